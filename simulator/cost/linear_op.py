"""One linear operator of a one-request forward, priced alone.

``OperatorPrices`` (drafting.py) reads a drafter's small linears (EAGLE's fc, EAGLE-3's
fused feature fc, MTP's eh_proj, Medusa's ResBlocks) from ``CostModel.breakdown`` of one
request of ``tokens`` new tokens.  A prompt chunk's token count rarely repeats, so its memo
misses and each miss prices the whole forward (attention, a MoE layer's routed experts, the
small kernels) to read one operator: on the MoE scenarios the largest part of a run.
``linear_op_s`` prices that operator alone, the same terms in the same order as
``breakdown``: the forward's runtime mode and padded tokens (``CostModel._mode`` on one
request: ``Execution.graph_tokens``), the operator's ``token_terms.linear`` over the model's
layers, its eager launches (none where the forward is one eager stream:
``eager_stream.EagerStream.ops``), ``op_from_term``'s time_s (bitwise ``breakdown``'s operator:
``tests/simulator/cost/test_linear_op.py``).  Only for a plain ``CostModel`` with the
sum-of-operators step model (a subclass may price its forward otherwise: ``None``).
"""
from __future__ import annotations

from simulator.cost import step_models as sm
from simulator.cost import token_terms as tt
from simulator.cost.cost_model import CostModel


def linear_op_s(cm: CostModel, name: str, tokens: int) -> float | None:
    """``{op.name: op.time_s for op in cm.breakdown([tokens], [0], [tokens]).ops}[name]``
    for a linear operator ``name`` (summed over the layers); None where it cannot say so
    bitwise (another class, another step model, no such linear)."""
    if type(cm) is not CostModel or cm.execution.step_model != "sum_of_operators" \
            or tokens < 1:
        return None
    t = float(tokens)
    mode, padded = cm.execution.graph_tokens(t, t <= sm.UNIFORM_MAX_QUERY)
    # an eager launch beyond the GPU time, unless the forward is priced as one stream
    # (eager_stream: each operator at its GPU time, the unhidden launches apart)
    launch = 0.0 if mode != "eager" or cm._stream is not None else cm._launch_s
    found = None  # breakdown's dict keeps the last operator of a name
    for op, weight, out_t, in_t, n, roof, wb in cm._linears:
        if op == name:
            found = (weight, out_t, in_t, cm._layers if n is None else n, roof, wb)
    if found is None:
        return None
    weight, out_t, in_t, n, roof, wb = found
    gpu = tt.linear(cm, padded, weight, out_t, in_t, n, roof, wb, name)[6]
    # op_from_term's operator's time_s (its roofline, the launches beyond it), without
    # building it: a prompt chunk's count rarely repeats, so each one is a miss
    return gpu + max(launch * n - gpu, 0.0)
