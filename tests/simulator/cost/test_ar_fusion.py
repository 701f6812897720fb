"""SGLang's FlashInfer all-reduce + residual add + RMSNorm fusion on B200
(simulator/cost/ar_fusion.py, engines.yaml sglang-v0.5-blackwell): the kernels it counts
away, its price against the measurement it cites, and where it stops."""
import dataclasses

import numpy as np
import pytest

from hardware.profile import load_profile
from simulator.cost import ar_fusion as arf
from simulator.cost import token_terms as tt
from simulator.cost.cost_model import CostModel
from simulator.cost.execution import resolve_execution
from simulator.cost.parallelism import Parallelism
from simulator.cost.spec_catalog import load_engine
from simulator.models.spec import load_model

FUSED = "sglang-v0.5-blackwell"
PLAIN = "sglang-v0.5"
# sgl-project/sglang PR #7621 (B200, DeepSeek-R1 TP 8): the fused kernel's time
PR_7621_FUSED_S = 8.7e-6
# sglang-0.5.12 communicator.py FUSE_ALLREDUCE_MAX_BATCH_SIZE
MAX_TOKENS = 2048


def _cm(engine: str, tp: int = 8, hw: str = "b200") -> CostModel:
    profile = load_profile(hw)
    ex = resolve_execution(profile, {"spec": load_engine(engine)}, max_num_seqs=128)
    return CostModel(profile, load_model("deepseek-v3"), Parallelism(tensor_parallel=tp),
                     execution=ex)


def _ops(cm: CostModel, new, ctx) -> dict[str, float]:
    return {op.name: op.time_s for op in cm.breakdown(new, ctx).ops}


def test_the_engine_entry_is_sglang_v05_with_the_fusion_bound():
    fused, plain = load_engine(FUSED), load_engine(PLAIN)
    assert fused.allreduce_norm_fusion_tokens == MAX_TOKENS
    assert plain.allreduce_norm_fusion_tokens == 0
    skip = {"name", "version", "sources", "allreduce_norm_fusion_tokens"}
    for f in dataclasses.fields(fused):
        if f.name not in skip:
            assert getattr(fused, f.name) == getattr(plain, f.name), f.name


def test_a_forward_fuses_all_but_the_last_layers_mlp_all_reduce():
    cm = _cm(FUSED)
    layers = cm.model.num_layers
    assert arf.fused_count(cm, 1.0, layers) == 2 * layers - 1
    assert arf.fused_count(cm, float(MAX_TOKENS), layers) == 2 * layers - 1
    assert arf.fused_count(cm, MAX_TOKENS + 1.0, layers) == 0.0
    assert arf.fused_count(cm, 0.0, layers) == 0.0
    got = arf.fused_count(cm, np.array([0.0, 1.0, 2048.0, 2049.0]), layers)
    assert got.tolist() == [0.0, 2 * layers - 1, 2 * layers - 1, 0.0]
    assert arf.fused_count(_cm(FUSED, tp=1), 1.0, layers) == 0.0  # no all-reduce at TP 1
    assert arf.fused_count(_cm(PLAIN), 1.0, layers) == 0.0


def test_one_token_fused_kernel_is_the_measured_one():
    """At one DeepSeek-V3 token over 8 B200s the fused kernel is PR #7621's 8.7 us: the
    all-reduce term less the one plain all-reduce, over the 2 L - 1 fused ones."""
    cm = _cm(FUSED)
    layers = cm.model.num_layers
    ar = float(cm._collectives.all_reduce_s(cm._h * cm._b, 8, custom=cm._custom_ar))
    fused_each = (_ops(cm, [1], [8000])["all_reduce"] - ar) / (2 * layers - 1)
    assert fused_each == pytest.approx(PR_7621_FUSED_S, abs=0.01e-6)


def test_the_fusion_moves_exactly_the_norms_adds_and_all_reduces():
    """Against sglang-v0.5 on the same deployment: each fused all-reduce takes one norm and
    one residual add out of the elementwise term and adds the epilogue; nothing else moves."""
    fused, plain = _cm(FUSED), _cm(PLAIN)
    n = 2 * fused.model.num_layers - 1
    for tokens in (1, 16, 64):
        new, ctx = [1] * tokens, [1000] * tokens
        a, b = _ops(fused, new, ctx), _ops(plain, new, ctx)
        kernels = tt._elementwise_kernels(plain, float(tokens))
        norm, add = kernels[0], kernels[2]
        assert norm[1] == "norm" and add[1] == "elementwise"
        saved = sum(float(plain._roof.transfer_time(nb, k, rows=r)) for nb, k, r in (norm, add))
        assert a["elementwise"] == pytest.approx(b["elementwise"] - n * saved, rel=1e-12)
        epi = float(arf.epilogue_s(plain, float(tokens)))
        assert a["all_reduce"] == pytest.approx(b["all_reduce"] + n * epi, rel=1e-12)
        assert {k: v for k, v in a.items() if k not in ("elementwise", "all_reduce")} == \
            {k: v for k, v in b.items() if k not in ("elementwise", "all_reduce")}
        assert a["elementwise"] + a["all_reduce"] < b["elementwise"] + b["all_reduce"]


def test_above_the_bound_and_at_tp1_nothing_changes():
    big = ([MAX_TOKENS + 1], [0])
    assert _ops(_cm(FUSED), *big) == _ops(_cm(PLAIN), *big)
    assert _cm(FUSED, tp=1).step_time([1, 1], [500, 900]) == \
        _cm(PLAIN, tp=1).step_time([1, 1], [500, 900])


@pytest.mark.parametrize("new", [[1], [1] * 3, [1] * 16, [1] * 64, [700, 1, 1], [2048], [2049]])
def test_tables_and_scalar_path_agree(new):
    """step_time (token tables, closed forms) and breakdown (the scalar per-operator path)
    price the fused engine alike, as for every engine."""
    for tp in (4, 8):
        cm = _cm(FUSED, tp=tp)
        ctx = [4000 + 7 * i for i in range(len(new))]
        assert cm.step_time(new, ctx) == pytest.approx(cm.breakdown(new, ctx).time_s,
                                                       rel=1e-12)


def test_an_eager_forward_lays_the_fused_kernels_out_once():
    """Eager (one CUDA stream, eager_stream.py): the fused engine's layer has no separate
    norm or residual add left, so it is the plain engine's less those kernels' launches."""
    def eager(engine):
        profile = load_profile("b200")
        ex = resolve_execution(profile, {"spec": load_engine(engine), "cuda_graphs": False},
                               max_num_seqs=128)
        return CostModel(profile, load_model("deepseek-v3"), Parallelism(tensor_parallel=8),
                         execution=ex)
    fused, plain = eager(FUSED), eager(PLAIN)
    assert fused._stream is not None
    new, ctx = [1] * 4, [3000] * 4
    assert fused.step_time(new, ctx) == pytest.approx(fused.breakdown(new, ctx).time_s,
                                                      rel=1e-12)
    saved = plain.step_time(new, ctx) - fused.step_time(new, ctx)
    # at least the 4 launches a layer (2 norms, 2 adds) less the epilogue, all layers
    launch = plain.execution.kernel_launch_s
    assert saved > fused.model.num_layers * (4 * launch - 2 * arf.EPILOGUE_S)


def test_no_fusion_under_dp_attention():
    """SGLang fuses only without DP attention (apply_flashinfer_allreduce_fusion)."""
    from simulator.cost.dp_attention import cost_model

    def dp(engine):
        profile = load_profile("b200")
        ex = resolve_execution(profile, {"spec": load_engine(engine)}, max_num_seqs=128)
        par = Parallelism(tensor_parallel=1, data_parallel_attention=8, expert_parallel=8)
        return cost_model(profile, load_model("deepseek-v3"), par, execution=ex)
    new, ctx = [1] * 8, [2000] * 8
    assert dp(FUSED).step_time(new, ctx) == dp(PLAIN).step_time(new, ctx)
    assert dp(FUSED).breakdown(new, ctx).time_s == dp(PLAIN).breakdown(new, ctx).time_s


def test_fast_forward_is_exact_on_the_fused_engine():
    """A B200 TP 8 DeepSeek-R1 serving run on sglang-v0.5-blackwell (decode stretches at
    1-4 tokens, prompts of 900-2,500 tokens: prefill steps below and above the 2048-token
    bound): fast-forward on and off give identical results."""
    from simulator.scenario import EngineOptions, scenario_from_dict
    from simulator.simulate import simulate
    from tests.simulator.engine.test_fast_forward import assert_identical
    data = {"name": "b200-fusion", "seed": 3, "hardware": "b200", "target": "deepseek-v3",
            "policy": {"name": "none"}, "parallelism": {"tensor_parallel": 8},
            "batching": {"max_num_seqs": 8, "max_num_batched_tokens": 4096},
            "execution": {"engine": FUSED}, "kv_cache_dtype": "fp8",
            "workload": {"synthetic": {
                "num_requests": 6, "arrival": {"process": "poisson", "rate_per_s": 50.0},
                "prompt": {"dist": "uniform", "min_tokens": 900, "max_tokens": 2500},
                "output": {"dist": "fixed", "tokens": 40}}, "max_concurrency": 4}}
    sc = scenario_from_dict(data, source="t")
    on = simulate(dataclasses.replace(sc, engine=EngineOptions(fast_forward=True)))
    off = simulate(dataclasses.replace(sc, engine=EngineOptions(fast_forward=False)))
    assert_identical(on, off)
    assert len(on.requests) == 6
