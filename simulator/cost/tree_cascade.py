"""A token tree's cascade attention: the GPU work an engine's attention backend adds, every
layer, to verify a branching tree (and to draft one), where it cannot attend a tree mask in
one kernel (``SpecHost.tree_cascade``, engines.yaml).

SGLang's FlashAttention-3 backend from PR #5318 on (python/sglang/srt/layers/attention/
flashattention_backend.py, ``forward_extend`` with ``use_cascade_attn``: target verification
with ``speculative_eagle_topk > 1``; ``forward_decode`` likewise for the draft's top-k
forwards) splits each layer's attention in two and merges them, because FA3 takes no
custom mask:

- the **prefix** part: every draft token over the request's KV cache, non-causal, returning
  its log-sum-exp (the attention the cost model already prices for the step);
- the **expand** part: each draft token as a query of its own over the draft tokens its row
  of the tree mask keeps (the root and its ancestors and itself), a second
  ``flash_attn_with_kvcache`` call: one decode-kind attention kernel of ``n x tokens``
  single-query rows;
- the two log-sum-exps transposed (``softmax_lse.T.contiguous()``, two copies), and
  ``merge_state_v2`` (sgl-kernel) combining the two outputs: three elementwise kernels.

Each is priced by the cost model's own kernels: the expand attention by the roofline's
decode attention kernel (``Roofline.attention_time``) on the layer's per-pair FLOPs and
per-key KV bytes, the copies and the merge by its elementwise transfer at their bytes, each
with the profile's kernel latency.  Inside a captured forward (SGLang captures the target
verification and the draft loop) they cost their GPU time alone; outside one each of the 4
kernels also costs a host launch and the layer takes the longer of the two.  Only the
kernels' device time is here: the eager metadata the engine builds for the expand part
before each verification is host work (``SpecHost.tree_verify_kernels``, spec_work.py).
"""
from __future__ import annotations

import numpy as np

from hardware.kernels import ELEMENTWISE

LSE_BYTES = 4.0   # the log-sum-exp is fp32, one per head per query
CASCADE_KERNELS = 4  # the expand attention, two log-sum-exp transposes, the merge


def cascade_layer_s(cm, keys: np.ndarray) -> float:
    """GPU seconds one layer of ``cm`` adds to merge a tree's expand attention into its
    prefix attention: ``keys[i]`` is the draft tokens the i-th query row attends (one row a
    verified token, over the whole batch)."""
    keys = np.asarray(keys, dtype=np.float64)
    if keys.size == 0:
        return 0.0
    flops_pair, kv_bytes, q_bytes, _ = cm._attention_coefficients(1.0)
    roof = cm._roof
    attention = roof.attention_time(keys * flops_pair, keys * kv_bytes + q_bytes,
                                    np.ones(keys.size))
    heads = cm.model.num_heads / cm._tp
    rows = float(keys.size)
    lse = rows * heads * LSE_BYTES
    out = q_bytes / 2.0 * rows  # one output of the layer (q_bytes: read Q, write O)
    copies = 2.0 * roof.transfer_time(2.0 * lse, ELEMENTWISE)  # each lse read and written
    merge = roof.transfer_time(3.0 * out + 3.0 * lse, ELEMENTWISE)  # two in, one out
    return float(attention) + copies + merge


def cascade_forward_s(cm, keys: np.ndarray, tokens: float) -> float:
    """``cascade_layer_s`` over every layer of ``cm``'s forward of ``tokens`` tokens: GPU
    time alone where that forward replays a full graph, else with each kernel's launch."""
    layer = cascade_layer_s(cm, keys)
    if layer == 0.0:
        return 0.0
    mode, _ = cm.execution.graph_tokens(tokens, True)
    if mode != "full":
        layer = max(layer, CASCADE_KERNELS * cm.execution.kernel_launch_s)
    return layer * cm.model.num_layers


def tree_cascade_s(target, draft, verify_keys: tuple[int, ...],
                   draft_forwards: tuple[tuple[int, int], ...], sequences: int) -> float:
    """Seconds the cascade adds to one speculative iteration of ``sequences`` requests: the
    target's verification of a tree whose tokens attend ``verify_keys`` draft tokens each,
    and the draft forwards ``(queries a request, draft tokens each attends)`` that expand
    the tree's top-k branches (``draft``: None where the method has no draft layer)."""
    total = 0.0
    if target is not None and verify_keys:
        keys = np.tile(np.asarray(verify_keys, dtype=np.float64), sequences)
        total += cascade_forward_s(target, keys, float(keys.size))
    if draft is not None:
        for queries, each in draft_forwards:
            rows = sequences * queries
            total += cascade_forward_s(draft, np.full(rows, float(each)), float(rows))
    return total
