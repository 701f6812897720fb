"""``linear_op_s``: one linear operator of a one-request forward priced alone must be the
operator ``CostModel.breakdown`` reports for that forward, bit for bit (``OperatorPrices``'
square linear reads it instead of a whole breakdown), on every way a forward runs: CUDA
graphs (full, padded to a capture size) and past the largest capture size (eager), eager
launches, flat rates, MoE layers with expert parallelism, a quantised target."""
import dataclasses

import numpy as np
import pytest

from simulator.cost.cost_model import CostModel
from simulator.cost.dp_attention import DpAttentionCostModel
from simulator.cost.drafting import OperatorPrices
from simulator.cost.linear_op import linear_op_s
from simulator.cost.parallelism import Parallelism
from tests.simulator.cost.test_verify_rows import CASES, _cost_model

# token counts: small decodes, every capture-size boundary region, long prompt chunks
TOKENS = [1, 2, 3, 7, 8, 9, 31, 33, 100, 255, 256, 257, 511, 512, 513, 1000, 2048, 4097,
          8191, 16384]


def _breakdown_op(cm: CostModel, name: str, tokens: int) -> float:
    t = np.array([float(tokens)])
    return {op.name: op.time_s for op in cm.breakdown(t, np.zeros(1), t).ops}[name]


@pytest.mark.parametrize("case", CASES, ids=["-".join(map(str, c)) for c in CASES])
def test_linear_op_is_breakdowns_operator_to_the_bit(case):
    cm = _cost_model(*case)
    names = {op[0] for op in cm._linears}
    assert "o_proj" in names
    for name in sorted(names):
        for tokens in TOKENS:
            assert linear_op_s(cm, name, tokens) == _breakdown_op(cm, name, tokens), \
                (name, tokens)


def test_operator_prices_square_linear_is_unchanged_on_a_moe_layer_with_ep():
    # MTP's pass model: one DeepSeek-V3 MoE layer, TP8 with expert parallelism (mtp_moe)
    from hardware.profile import load_profile
    from simulator.models.spec import load_model
    spec = dataclasses.replace(load_model("deepseek-v3"), num_layers=1, dense_layers=0,
                               mtp_modules=0)
    cm = CostModel(load_profile("h200"), spec,
                   Parallelism(tensor_parallel=8, expert_parallel=8))
    prices = OperatorPrices(cm)
    square = spec.hidden_size / spec.q_size
    for tokens in TOKENS:
        want = _breakdown_op(cm, "o_proj", tokens) / spec.num_layers * square
        assert prices.square_linear_s(tokens) == want
        assert prices.square_linear_s(tokens) == want  # from its memo, the same float


def test_it_declines_what_it_cannot_price_alone():
    cm = _cost_model("a100-80gb", "opt-13b", 1, "graphs")
    assert linear_op_s(cm, "no_such_op", 8) is None
    assert linear_op_s(cm, "o_proj", 0) is None
    single = dataclasses.replace(cm.execution, step_model="single_roofline")
    other = CostModel(cm.hardware, cm.model, cm.parallel, execution=single)
    assert linear_op_s(other, "o_proj", 8) is None
    from hardware.profile import load_profile
    from simulator.cost.dp_attention import cost_model
    from simulator.models.spec import load_model
    dp = cost_model(load_profile("h200"), load_model("deepseek-v3"),  # prices its own way
                    Parallelism(tensor_parallel=1, expert_parallel=8, data_parallel_attention=8))
    assert isinstance(dp, DpAttentionCostModel) and linear_op_s(dp, "o_proj", 8) is None
