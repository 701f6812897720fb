"""The engine reaches its fast paths through declared contracts (simulator/engine/plan.py:
``Policy``, ``StepPricer``, ``ClosedFormPricer``, ``VariedDraft``), never by probing an object for a member:
no ``getattr``/``hasattr`` in the engine or the policies, and a policy and a pricer written
here against those declarations alone are fast-forwarded, with the same results as the
step-by-step reference."""
from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

import simulator.run_setup as run_setup
from simulator.engine.plan import (
    BatchView,
    ChainStretch,
    ClosedFormPricer,
    DraftPlan,
    VariedDraft,
    VariedPlan,
)
from simulator.scenario import EngineOptions
from simulator.simulate import simulate
from tests.helpers import REPO, scenario, workload
from tests.simulator.engine.test_fast_forward import assert_identical

PROBE = re.compile(r"\b(getattr|hasattr)\(")
# (file, the probing line's code) -> why it stays; every other probe fails the test
ALLOWED = {
    ("simulator/policies/mtp.py", 'fields = {f.name: getattr(target, f.name) for f in '
                                  'dataclasses.fields(ModelSpec)}'):
        "copies a dataclass's declared fields by name (dataclasses.fields), probes nothing",
}


def _probes() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for folder in ("simulator/engine", "simulator/policies"):
        for path in sorted((REPO / folder).glob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            for line in path.read_text().splitlines():
                code = line.split("#")[0].strip()
                if PROBE.search(code) and (rel, code) not in ALLOWED:
                    found.setdefault(rel, []).append(code)
    return found


def test_the_engine_and_the_policies_probe_nothing():
    found = _probes()
    assert not found, found
    # every allowed line is still there (an entry for a line that went is stale)
    for rel, code in ALLOWED:
        assert code in (REPO / rel).read_text(), (rel, code)


class LinearPricer(ClosedFormPricer):
    """A target forward of ``a + b`` per new token ``+ c`` per context token: its uniform
    closed forms are the same floating-point operations on the batch's sums."""

    a, b, c = 2e-3, 3e-5, 2e-7

    def step_time(self, new_tokens, context, logits_tokens=None) -> float:
        return self.a + self.b * float(np.sum(new_tokens)) + self.c * float(np.sum(context))

    def uniform_step_times(self, n, u, ctx_sums, logits):
        return self.a + self.b * float(n * u) + self.c * np.asarray(ctx_sums, np.float64)

    def uniform_step_time(self, n, u, ctx_sum, logits):
        return self.a + self.b * float(n * u) + self.c * float(ctx_sum)

    def uniform_pricer(self, n, u, logits):
        return lambda x: self.a + self.b * float(n * u) + self.c * float(x)

    def mixed_step_time(self, n, ctx_sum, chunks, chunk_ctx, logits):
        return None  # no mixed closed form: step_time prices those steps

    def mixed_verify_time(self, n, u, ctx_sum, chunks, chunk_ctx, logits):
        return None

    def chain_decode_times(self, n, ctx_sums, steps):
        return None


class ToyChain:
    """A chain policy written against ``engine.plan.Policy`` alone: every request drafts
    ``gamma`` tokens, all accepted when its one uniform falls below ``alpha`` (else none),
    drafting costs ``d`` per request plus ``e`` per context token; its ``ChainStretch``
    gives the same draws and prices for many iterations at once."""

    name = "toy_chain"
    plain_decode = False
    prefill_adds_time = True
    gamma, alpha, d, e = 3, 0.6, 4e-4, 1e-8
    max_verify_tokens = gamma + 1  # what the driver's memory plan reads

    def propose(self, batch: BatchView, rng: np.random.Generator) -> DraftPlan:
        k = np.full(len(batch), self.gamma, np.int64)
        return DraftPlan(k, k + 1, draft_time_s=self._draft_s(len(batch),
                                                              float(np.sum(batch.context))))

    def accept(self, plan: DraftPlan, batch: BatchView, rng: np.random.Generator):
        return np.minimum(self._accepted(rng.random(len(batch)), batch.request_ids),
                          plan.num_draft)

    def observe(self, plan, batch, accepted, step_time_s) -> None:
        pass

    def prefill_time(self, new_tokens, context) -> float:
        return self.e * float(np.sum(new_tokens))

    def chain_stretch(self) -> ChainStretch | None:
        return ChainStretch(self.gamma, None, self._accepted,
                            lambda n, sums: self._draft_s(n, np.asarray(sums, np.float64)),
                            lambda n: lambda x: self._draft_s(n, x))

    def varied_draft(self) -> VariedDraft | None:
        return None

    def _accepted(self, draws, request_ids):
        return np.where(draws < self.alpha, self.gamma, 0).astype(np.int64)

    def _draft_s(self, n, ctx_sum):
        return self.d * float(n) + self.e * ctx_sum


class ToyPlain(ToyChain):
    """A plain-decode policy: proposes, draws and learns nothing."""

    name = "toy_plain"
    plain_decode = True
    prefill_adds_time = False
    max_verify_tokens = 1

    def propose(self, batch, rng) -> DraftPlan:
        zero = np.zeros(len(batch), np.int64)
        return DraftPlan(zero, zero + 1)

    def accept(self, plan, batch, rng):
        return np.zeros(len(batch), np.int64)

    def prefill_time(self, new_tokens, context) -> float:
        return 0.0

    def chain_stretch(self) -> ChainStretch | None:
        return None


class ToyVaried(ToyChain, VariedDraft):
    """Draft counts that differ per request and change every iteration, (request id +
    generated) mod (gamma + 1), each request's drafts all accepted when its one uniform
    falls below ``alpha``: a ``VariedDraft``, its iterations taken on arrays."""

    name = "toy_varied"
    prefill_adds_time = False

    def __init__(self) -> None:
        self.seen: dict[int, int] = {}  # accepted drafts per request, as observed

    def propose(self, batch, rng) -> DraftPlan:
        plan = self.plan_counts(batch.request_ids, batch.context, batch.generated,
                                batch.output_len, batch.prompt_len, batch.batch_size, rng)
        return DraftPlan(plan.num_draft, plan.verify_tokens, draft_time_s=plan.seconds)

    def accept(self, plan, batch, rng):
        return self._draw(rng, plan.num_draft)

    def observe(self, plan, batch, accepted, step_time_s) -> None:
        self._learn(batch.request_ids, accepted)

    def prefill_time(self, new_tokens, context) -> float:
        return 0.0

    def chain_stretch(self) -> ChainStretch | None:
        return None

    def varied_draft(self) -> VariedDraft | None:
        return self

    def plan_counts(self, request_ids, context, generated, output_len, prompt_len,
                    batch_size, rng) -> VariedPlan:
        k = (request_ids + generated) % (self.gamma + 1)
        return VariedPlan(k, k + 1, self.d * float(np.count_nonzero(k))
                          + self.e * float(np.sum(context)))

    def draw_counts(self, rng, request_ids, context, generated, plan):
        return self._draw(rng, plan.num_draft)

    def observe_counts(self, request_ids, generated, output_len, plan, accepted,
                       step_time_s) -> None:
        self._learn(request_ids, accepted)

    def _draw(self, rng, k):
        return np.where(rng.random(k.size) < self.alpha, k, 0)

    def _learn(self, request_ids, accepted) -> None:
        for rid, a in zip(request_ids.tolist(), accepted.tolist()):
            self.seen[rid] = self.seen.get(rid, 0) + a


@pytest.mark.parametrize("toy", [ToyChain, ToyPlain, ToyVaried])
def test_a_policy_and_a_pricer_of_the_contract_alone_fast_forward_exactly(toy, monkeypatch):
    monkeypatch.setattr(run_setup, "build_policy", lambda *args, **kwargs: toy())
    rng = np.random.default_rng(5)
    n = 60
    wl = workload(np.sort(rng.uniform(0, 2, n)), rng.integers(8, 500, n),
                  rng.integers(10, 300, n))
    sc = scenario("chain:num_speculative_tokens=3", hardware="a10", target="opt-1.3b",
                  draft="opt-125m", replicas=2,
                  batching={"max_num_seqs": 16, "max_num_batched_tokens": 512})
    on, off = (simulate(dataclasses.replace(sc, engine=EngineOptions(fast_forward=ff)),
                        workload=wl, target_cost=LinearPricer()) for ff in (True, False))
    assert_identical(on, off)
    assert off.info["engine"]["vectorised"] == 0
    assert on.info["engine"]["vectorised"] > on.info["engine"]["iterations"] / 4
    steps = on.steps
    if toy is not ToyPlain:  # acceptance really varied, and the proposer's time is there
        assert steps["accepted_tokens"].nunique() > 5
        assert steps["draft_s"][steps["draft_tokens"] > 0].gt(0).all()
    if toy is ToyChain:  # it prices the prefill chunks too
        assert steps["draft_s"].gt(0).all()
    if toy is ToyVaried:  # the counts really varied, per request and per iteration
        assert steps["draft_tokens"].nunique() > 10
