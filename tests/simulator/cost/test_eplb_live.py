"""What EPLB leaves in live traffic (simulator/cost/eplb_live.py): the expected maximum of
normals against closed forms, the measured spread it is taken from and the imbalance ratios
of the same table it predicts, and how the busiest rank's rows price a layer."""
from __future__ import annotations

import math

import numpy as np
import pytest

from hardware.profile import load_profile
from simulator.cost import eplb_live, moe
from simulator.cost.dp_attention import DpAttentionCostModel
from simulator.cost.parallelism import Parallelism
from simulator.models.spec import load_model


def test_expected_maximum_of_normals_in_closed_form():
    # E[max] of 2 standard normals is 1/sqrt(pi), of 3 is 3/(2 sqrt(pi)); one normal: 0
    assert eplb_live.z_max(1) == 0.0
    assert eplb_live.z_max(2) == pytest.approx(1 / math.sqrt(math.pi), rel=1e-9)
    assert eplb_live.z_max(3) == pytest.approx(1.5 / math.sqrt(math.pi), rel=1e-9)
    # and it grows with n, slower than sqrt(2 ln n)
    z = [eplb_live.z_max(n) for n in (8, 32, 72, 256)]
    assert z == sorted(z) and all(v < math.sqrt(2 * math.log(n))
                                  for v, n in zip(z, (8, 32, 72, 256)))


def test_the_measured_spread_is_the_draw_and_the_rest():
    # TensorRT-LLM tech blog 4, Table 1, EPLB with 9 slots a rank at EP32: 1,024 rows a rank
    # on average, std 52.0; the binomial draw explains sqrt(31/32 / 1024) = 0.0308 of it
    draw = float(eplb_live.draw_sigma(1024.0, 32))
    assert draw == pytest.approx(math.sqrt(31 / 32 / 1024), rel=1e-12)
    rest = eplb_live.rest_sigma()
    assert math.hypot(draw, rest) == pytest.approx(52.0 / 1024, rel=1e-12)
    # and a step's draw shrinks as 1 / sqrt(rows): at prefill's 131,072 rows a rank only
    # the rest is left
    assert float(eplb_live.live_excess(32, 131072.0)) == pytest.approx(
        eplb_live.z_max(32) * rest, rel=0.003)


@pytest.mark.parametrize("ep,ratio", [(32, 0.109), (36, 0.115)])
def test_the_tables_imbalance_ratios_follow(ep, ratio):
    # the same table's (max - mean) / mean, not used in the fit: EP32 (9 slots a rank) and
    # EP36 (8 slots a rank), both at 1,024 rows a rank: predicted 0.105 and 0.108
    got = float(eplb_live.live_excess(ep, 1024.0))
    assert got == pytest.approx(ratio, rel=0.07)
    assert got < ratio  # both a little below the measured ratios


def _eplb_model(live: bool) -> DpAttentionCostModel:
    hw, m = load_profile("h100-sxm"), load_model("deepseek-v3")
    par = Parallelism(tensor_parallel=1, data_parallel_attention=32, expert_parallel=32,
                      moe_dispatch="deepep_normal", eplb=live, redundant_experts=0)
    return DpAttentionCostModel(hw, m, par)


def test_the_busiest_rank_sets_the_layers_rows_and_traffic():
    # uniform routing, EPLB without redundant experts: the placement is even (1/32 a rank),
    # so what EPLB adds is the live excess alone, on the expert rows and the collectives
    live, plain = _eplb_model(True), _eplb_model(False)
    s = live._ep_moe
    assert s.rank_share == pytest.approx(1 / 32, rel=1e-12) and plain._ep_moe.rank_share is None
    tokens = 32 * 4096.0
    excess = float(eplb_live.live_excess(32, tokens * 8 / 32))
    assert float(moe.busiest_share(s, tokens)) == pytest.approx((1 + excess) / 32, rel=1e-12)
    assert moe.comm_hot(s, tokens) == pytest.approx(1 + excess, rel=1e-12)
    assert moe.comm_hot(plain._ep_moe, tokens) == 1.0
    hot = {t[0]: t[1] for t in live._moe_terms(4096.0, False)}
    even = {t[0]: t[1] for t in plain._moe_terms(4096.0, False)}
    for name in ("moe_dispatch", "moe_combine"):  # bytes x (1 + excess), on one curve
        assert hot[name] > even[name] * (1 + 0.5 * excess)
    # the grouped GEMMs at (1 + excess) x the rows: compute-bound here, so nearly in
    # proportion (the weights are read once either way)
    ratio = hot["experts_up"] / even["experts_up"]
    assert 1 + 0.8 * excess < ratio <= 1 + excess + 1e-9
    assert np.isfinite(list(hot.values())).all()
