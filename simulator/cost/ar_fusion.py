"""The tensor-parallel all-reduce with the residual add and the RMSNorm fused in (SGLang's
``--enable-flashinfer-allreduce-fusion``, FlashInfer's ``trtllm_allreduce_fusion``), as
``engines.yaml``'s ``allreduce_norm_fusion_tokens`` turns it on.

What SGLang 0.5.12 runs (python/sglang/srt/layers/communicator.py in the PyPI wheel
sglang-0.5.12): ``apply_flashinfer_allreduce_fusion(batch_size)`` holds on sm90 / sm100 with
FlashInfer, the flag, no DP attention and ``0 < batch_size <= FUSE_ALLREDUCE_MAX_BATCH_SIZE``
(2048 tokens).  Then a DeepSeek layer's two all-reduces each take the next residual add and
RMSNorm into one kernel (``RMSNorm.forward_with_allreduce_fusion``): the attention output's
with ``post_attention_layernorm`` (``_gather_hidden_states_and_residual``), and the MoE /
MLP output's with the next layer's ``input_layernorm`` (``prepare_attn``, where the previous
layer left ``_sglang_needs_allreduce_fusion``), except after the last layer
(``should_fuse_mlp_allreduce_with_next_layer``: ``not self.is_last_layer``), whose output
is all-reduced alone before the final norm.  So a forward of ``L`` layers runs ``2 L - 1``
fused kernels and one plain all-reduce, and ``2 L - 1`` fewer norms and residual adds than
the generic layer's two of each (token_terms._elementwise_kernels); above 2048 tokens (a
long prefill chunk) nothing changes.

Its time.  sgl-project/sglang PR #7621 (2025-06-28, '[b200] support trt-llm allreduce fuse
rms_norm_add kernel', DeepSeek-R1 at TP 8 on B200, its decode profile) measured the custom
all-reduce and the fused add + RMSNorm after it at 13.5 us together and the fused kernel
that replaced them at 8.7 us.  The fused kernel is priced as the all-reduce the profile
prices at its bytes plus an epilogue, ``EPILOGUE_S``: 8.7 us less b200.yaml's custom
all-reduce of one DeepSeek-V3 token (7168 BF16 values, 14,336 bytes) over 8 GPUs, 7.88 us
(its CUDA-graph curve from ai-dynamo/aiconfigurator's b200_sxm measurements), so that at
one token it is the PR's 8.7 us (tests/simulator/cost/test_ar_fusion.py), plus the
residual's read and write and the normed output's write at the memory roof, the bytes a
norm moves, which only count at many tokens.  Not measured: the fused kernel's growth with
tokens (here the custom all-reduce's, not FlashInfer's one-shot Lamport kernel's own).
"""
from __future__ import annotations

import numpy as np

# sgl-project/sglang PR #7621: the fused kernel at 8.7 us, less b200.yaml's custom all-reduce
# of 14,336 bytes over 8 GPUs (7.876 us, hardware/profiles/b200.yaml collectives
# custom_all_reduce, world 8): the fused residual add and RMSNorm's own time
EPILOGUE_S = 8.7e-6 - 7.876e-6


def fused_count(cm, tokens, layers: float):
    """Fused all-reduces of a forward over ``layers`` of the model's layers at ``tokens``
    (a float or an array): ``2 layers - 1`` (the last layer's share of the one plain
    all-reduce) where the engine fuses, the model is split over TP ranks without DP
    attention (SGLang's ``not is_dp_attention_enabled()``) and the step's tokens are within
    the engine's bound; else 0."""
    bound = cm.execution.spec.allreduce_norm_fusion_tokens
    t = np.asarray(tokens, dtype=np.float64)
    if not bound or cm._tp <= 1 or cm.parallel.data_parallel_attention > 1:
        return np.zeros_like(t) if t.ndim else 0.0
    on = (t > 0.0) & (t <= bound)
    n = np.where(on, 2.0 * layers - layers / cm._layers, 0.0)
    return n if t.ndim else float(n)


def epilogue_s(cm, tokens):
    """The fused kernel's seconds beyond the all-reduce at ``tokens`` (module docstring)."""
    return EPILOGUE_S + cm._roof.memory_time(3.0 * np.asarray(tokens, dtype=np.float64)
                                             * cm._h * cm._b)


def saved_elementwise(cm, tokens, kernels) -> tuple:
    """(seconds, bytes) of one norm and one residual add of ``kernels``
    (token_terms._elementwise_kernels at ``tokens``: two norms, then two adds), the pair
    each fused all-reduce takes in."""
    (norm_b, norm_k, norm_r), _, (add_b, add_k, add_r) = kernels[:3]
    roof = cm._roof
    return (roof.transfer_time(norm_b, norm_k, rows=norm_r)
            + roof.transfer_time(add_b, add_k, rows=add_r)), norm_b + add_b
