"""``mtp``: drafting with the target's own multi-token-prediction modules (vLLM's
``method: mtp``; DeepSeek-V3 technical report, arXiv 2412.19437, section 2.2).

An MTP module is one decoder layer of the target's shapes (with the target's mixture of
experts where it has one), an ``eh_proj`` that projects [norm(hidden), norm(embedding of the
next token)] (2h -> h), three norms, and the target's own embedding and output head
(``ModelSpec.mtp_module_params``).  Drafting ``num_speculative_tokens`` k tokens is k
sequential passes; pass j runs module ``j % mtp_modules``, so a model that ships one module
reuses it for every pass when k exceeds what it was trained for, as vLLM does
(vllm/model_executor/models/deepseek_mtp.py, ``DeepSeekMultiTokenPredictor.forward``:
``current_step_idx = spec_step_idx % self.num_mtp_layers``; vLLM's v1 EagleProposer, which
runs MTP drafts, passes no step index at all, i.e. module 0 every pass).  All modules have
the same shapes, so which one runs changes no cost.

Cost of a pass: the target's CostModel machinery on a one-layer ModelSpec of the target's
shapes (``dataclasses.replace(target, num_layers=1, dense_layers=0)``: the MoE layer for a
MoE target), which includes the shared LM head over the batch, plus the eh_proj priced as
two square linears of that layer (like EAGLE's fc).  The first pass re-reads the tokens
the target accepted last iteration (their hidden states come from the verification), as
EAGLE does; each module keeps one layer's KV, which the memory plan holds with the modules'
weights (``mtp_modules`` modules, however large k is).

Acceptance: the policy's own ``acceptance:`` if given, else the scenario's, per draft
position (a measured curve, ``{model: curve, path: ../shared/traces/acceptance/dsv4_mtp.yaml,
key: deepseek-v4-pro/thinking_off}``, reproduces its AL(k)).  There is no separate default:
the scenario's default is i.i.d. 0.8.  For reference, DeepSeek-V3 reports an acceptance rate
of the second token (k = 1) between 85% and 90% (arXiv 2412.19437, section 5.4.3).
"""
from __future__ import annotations

import dataclasses

from simulator.cost.drafting import OperatorPrices
from simulator.inputs.errors import SpecsimError
from simulator.inputs.params import Param
from simulator.models.spec import ModelSpec
from simulator.policies.base import PolicyContext
from simulator.policies.feature_draft import FeatureDraft, module_cost
from simulator.policies.tree_acceptance import check_acceptance_param, resolve_acceptance
from simulator.speculation.tree_shapes import chain_tree


@dataclasses.dataclass(frozen=True)
class MtpModules(ModelSpec):
    """The target's MTP modules as the memory plan holds them: ``num_layers`` modules, each
    ``mtp_module_params()`` (embedding and head shared with the target: not counted) and
    one layer of KV cache."""

    def param_count(self, active: bool = False) -> int:
        return self.num_layers * self.mtp_module_params()


def module_for_pass(j: int, modules: int) -> int:
    """The module pass j (0-based) runs: vLLM's ``spec_step_idx % num_mtp_layers``."""
    return j % modules


def _trained(target: ModelSpec | None) -> ModelSpec:
    if target is None or target.mtp_modules < 1:
        name = "the target" if target is None else target.name
        raise SpecsimError(f"{name} ships no multi-token-prediction modules "
                           f"(mtp_modules: 0)", field="policy.name",
                           fix="use a target with MTP modules (e.g. deepseek-v3), or another "
                               "policy (eagle3, chain)")
    return target


def mtp_memory_model(target: ModelSpec) -> MtpModules:
    """The target's MTP modules, for the memory plan."""
    fields = {f.name: getattr(target, f.name) for f in dataclasses.fields(ModelSpec)}
    fields.update(name=f"{target.name}-mtp", num_layers=target.mtp_modules, dense_layers=0)
    return MtpModules(**fields)


def mtp_pass_model(target: ModelSpec) -> ModelSpec:
    """One pass's layer: the target's shapes, one layer (MoE where the target has experts)."""
    return dataclasses.replace(target, name=f"{target.name}-mtp-pass", num_layers=1,
                               dense_layers=0, mtp_modules=0)


class MtpSpeculation(FeatureDraft):
    """k sequential passes of the target's MTP module(s) propose a chain of k tokens."""

    name = "mtp"
    PARAMS = {
        "num_speculative_tokens": Param("int", default=1, minimum=1, maximum=64,
                                        aliases=("gamma",),
                                        help="draft tokens: sequential module passes"),
        "acceptance": Param("any", default=None,
                            help="this policy's own acceptance model (a mapping)"),
    }

    @classmethod
    def check_params(cls, out: dict, *, raw, source: str, prefix: str) -> None:
        check_acceptance_param(out, source, prefix)

    @classmethod
    def memory_models(cls, params: dict, draft, target):
        """The MTP modules' weights and their KV (one layer each), not one per pass."""
        spec = mtp_memory_model(_trained(target))
        return [spec], [spec]

    def __init__(self, params: dict, ctx: PolicyContext) -> None:
        target = _trained(ctx.target_model)
        self.k = int(params["num_speculative_tokens"])
        self.modules = target.mtp_modules
        self.spec = mtp_pass_model(target)
        self.cost = module_cost(ctx, self.spec)
        self.prices = OperatorPrices(self.cost)
        self.tree = chain_tree(self.k)
        self.levels = [1] * self.k
        self.logits = self.levels
        self.acceptance = resolve_acceptance(params, ctx, self.tree, policy=self.name)
        self._start(ctx)

    @property
    def pass_modules(self) -> list[int]:
        """The module each of the k passes runs."""
        return [module_for_pass(j, self.modules) for j in range(self.k)]

    def eh_proj_s(self, tokens: float) -> float:
        """eh_proj (2h -> h, no bias) over ``tokens`` tokens: two square linears' worth."""
        return 2.0 * self.prices.square_linear_s(int(tokens))

    def _extra_s(self, first_tokens: float, later_tokens: list[float]) -> float:
        """Every pass (and every prefill chunk) projects [hidden, embedding] with eh_proj."""
        return sum(self.eh_proj_s(t) for t in [first_tokens] + later_tokens)
