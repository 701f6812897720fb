"""Two-batch overlap (SGLang ``--enable-two-batch-overlap``) under DP attention with EP.

The mechanism (DeepSeek's inference system, github.com/deepseek-ai/profile-data: "two
micro-batches ... the computation of one micro-batch overlaps with the communication of the
other"; the SGLang large-scale EP blog, lmsys.org/blog/2025-05-05-large-scale-ep, "Two-batch
Overlap"): each rank's batch is split in two micro-batches, A and B; the compute stream runs
A's layer, then B's, then A's next; a MoE layer's dispatch and combine of A run on the
communication side while B computes, and B's while A computes its next layer.  So, per MoE
layer, A's communication ``m_A`` hides behind B's compute ``c_B`` and B's behind A's:

    step = C_A + C_B + L_moe * (exposed(m_A, c_B) + exposed(m_B, c_A))
    exposed(m, c) = max(m, c + s m) - c = max(m - c, s m)

``C_x`` a micro-batch's whole compute (its ranks' forwards at its own tokens, its routed
experts and routing kernels), ``c_x = C_x / num_layers`` its compute in one layer (the layers'
compute taken as even; the dense layers have no collective), ``m_x`` one MoE layer's dispatch
plus combine at its tokens, ``s`` the share of the SMs the communication kernels hold while
they run (DeepEP's normal kernels run on ``Buffer.num_sms`` = 20 SMs, deepseek-ai/DeepEP
deep_ep/buffer.py, so the compute beside them runs on the rest; the low-latency kernels'
receive is a hook that holds no SM, the DeepEP README: s = 0).

What the split costs is priced by pricing each micro-batch on its own: each runs every
kernel (twice the kernel floors and launches), reads every weight (twice the weight bytes of a
memory-bound decode) and computes its GEMMs at half the rows (lower efficiency at smaller M).
The forward is still one step of the scheduler and one CUDA graph: the host time and the
graph replay are counted once.  With no communication the step is ``C_A + C_B``, what the
split alone adds; with each micro-batch's communication within the other's compute
(and s = 0) it is hidden in full.

The split (``split_rank``) follows SGLang's two_batch_overlap.py: a rank's batch is cut at
its token midpoint, in request order, a request whose tokens straddle it split in two (the
second part's context the first's tokens on); decode requests (one token each) split by
count.

Where the engine splits (``overlap_applies``): SGLang splits every step it can; vLLM
(``--enable-dbo``, vLLM 0.11's ParallelConfig ``dbo_decode_token_threshold`` 32 and
``dbo_prefill_token_threshold`` 512; vllm/v1/worker/ubatch_splitting.py
``check_ubatch_thresholds``: ``num_tokens >= threshold``, the decode one for a uniform-decode
batch) splits a step only if every DP rank votes for it, an idle rank voting no
(``get_dp_padding_ubatch``: "Either all ranks run with microbatching or none of them do";
vllm-project/vllm #50738: "including an idle rank that has nothing scheduled").  A step below
the threshold runs as one batch, its communication after its compute.
"""
from __future__ import annotations

import numpy as np

DEEPEP_NORMAL_SMS = 20  # deepseek-ai/DeepEP deep_ep/buffer.py: Buffer.num_sms default


def overlap_applies(ranks_batch: list[tuple[np.ndarray, np.ndarray]], ranks: int,
                    decode_threshold: int, prefill_threshold: int,
                    uniform_max: float) -> bool:
    """Whether a step is split (module docstring): each of the ``ranks`` DP ranks' new tokens
    (``ranks_batch``, the busy ranks' per-request (new, context) arrays; the rest idle)
    reach the threshold of its batch's kind: uniform decode (every request continuing a
    sequence with the same count of new tokens, at most ``uniform_max``: vLLM's
    ``1 + num_speculative_tokens``) or one with a prefill."""
    if decode_threshold <= 0 and prefill_threshold <= 0:
        return True
    if len(ranks_batch) < ranks:
        return False  # an idle rank votes no
    for new, ctx in ranks_batch:
        active = new > 0
        uniform = bool(active.any()) and bool(np.all(ctx[active] > 0)) and \
            new[active].min() == new[active].max() <= uniform_max
        if float(new.sum()) < (decode_threshold if uniform else prefill_threshold):
            return False
    return True


def exposed(m, c, sm_share: float):
    """Seconds communication ``m`` adds beyond compute ``c`` it runs beside (module
    docstring); arrays broadcast."""
    return np.maximum(np.subtract(m, c), np.multiply(sm_share, m))


def overlapped_step(c_a: float, c_b: float, m_a: float, m_b: float, layers: int,
                    moe_layers: int, sm_share: float = 0.0) -> float:
    """The device seconds of a two-batch-overlapped forward: micro-batch computes ``c_a``,
    ``c_b`` (whole forwards), one MoE layer's communication ``m_a``, ``m_b``, over ``layers``
    layers of which ``moe_layers`` communicate (module docstring)."""
    per_a, per_b = c_a / layers, c_b / layers
    hidden = exposed(m_a, per_b, sm_share) + exposed(m_b, per_a, sm_share)
    return c_a + c_b + moe_layers * float(hidden)


def split_rank(new: np.ndarray, ctx: np.ndarray, logits: np.ndarray):
    """One rank's batch cut at its token midpoint: two ``(new, ctx, logits)`` per-request
    arrays (module docstring); logits go with a split request's second part."""
    cum = np.cumsum(new)
    total = float(cum[-1]) if cum.size else 0.0
    half = np.floor(total / 2.0)
    if new.size and np.all(new <= 1.0):  # decode: whole requests, by count
        cut = new.size // 2
        return (new[:cut], ctx[:cut], logits[:cut]), (new[cut:], ctx[cut:], logits[cut:])
    i = int(np.searchsorted(cum, half, side="left")) if cum.size else 0
    if i >= new.size:
        return (new, ctx, logits), (new[:0], ctx[:0], logits[:0])
    before = half - (cum[i] - new[i])  # request i's tokens in the first half
    if before <= 0:
        return (new[:i], ctx[:i], logits[:i]), (new[i:], ctx[i:], logits[i:])
    rest = new[i] - before
    first = (np.append(new[:i], before), np.append(ctx[:i], ctx[i]),
             np.append(logits[:i], 0.0))
    second = (np.concatenate([[rest], new[i + 1:]]),
              np.concatenate([[ctx[i] + before], ctx[i + 1:]]),
              np.concatenate([[logits[i]], logits[i + 1:]]))
    if rest <= 0:
        second = (new[i + 1:], ctx[i + 1:], logits[i + 1:])
        first = (new[:i + 1], ctx[:i + 1], logits[:i + 1])
    return first, second
