"""What a forward's token totals cost, apart from attention: priced per operator, and
tabulated per token count for the engine's hot path.

The layer terms (the dense linears, a MoE layer's grouped expert GEMMs and the small kernels
around them, the elementwise kernels, the all-reduces, the embedding gather) depend on the
tokens the forward computes (padded to a captured size under CUDA graphs) and on whether its
kernels are launched eagerly; the head terms (LM head, logits
gather) on the tokens through the LM head alone; the pipeline transfer on the tokens sent.
``token_terms`` and ``head_terms`` give each operator's numbers (``CostModel.breakdown``'s
per-operator truth); ``TokenTables`` gives ``CostModel.step_time`` their summed times.

A step of the engine rarely repeats its token total (a prefill chunk plus a changing number
of decodes), so a per-total memo misses.  ``TokenTables`` prices ``TABLE_BLOCK`` consecutive
counts at once with numpy the first time a count of the block is asked for (one vectorised
pass through ``Roofline.gemm_time``, ``transfer_time`` and the collectives), up to
``TABLE_MAX`` tokens; a count past it, or not a whole number, is priced by the scalar path
and kept in a bounded memo.  A block is always the same counts in the same positions of an
array of the same length, so the float a count gets does not depend on which counts were
asked for before (the engine's fast-forward and step-by-step modes ask in different orders
and must agree bit for bit); it agrees with the scalar path within rounding (the same IEEE
operations in the same order: on the shipped profiles, bit for bit).  A block costs about
ten scalar pricings; the tables hold at most ``3 * TABLE_MAX`` counts (two launch modes of
layer terms, one of head terms: a few MB at worst, a few blocks in an engine run).
"""
from __future__ import annotations

import numpy as np

from simulator.cost import ar_fusion as arf
from simulator.cost import engine_kernels as ek
from simulator.cost import moe
from simulator.cost import moe_kernels as mk
from simulator.cost import router_gemm as rg

# Entries kept in each memo (token totals, uniform batches) before the oldest is dropped.
MEMO_SIZE = 4096
TABLE_BLOCK = 1024    # token counts priced in one vectorised pass
TABLE_MAX = 65536     # counts from here on are priced one by one (bounded memo)


def remember(memo: dict, key, value) -> None:
    """Store in a bounded memo, dropping the oldest entry when it is full."""
    if len(memo) >= MEMO_SIZE:
        del memo[next(iter(memo))]
    memo[key] = value


# ---------------------------------------------------------------- per operator (scalar)
def linear(cm, tokens: float, weight: float, out_per_tok: float, in_per_tok: float,
           layers: int, roof=None, wb: float | None = None,
           name: str = "") -> tuple[float, ...]:
    """A GEMM ``[tokens x in] @ [in x out]`` over ``layers``: (flops, hbm bytes, host
    bytes, compute s, memory s, host s, GPU s), its weights ``wb`` bytes an element
    computed on ``roof`` (default: the model's 16-bit roofline and activation bytes).
    With the profile's kernel shapes the GPU time is ``Roofline.gemm_time`` (tile and wave
    quantisation, latency, floor; its operands at the roofline's dtype, as W8A8 and W4A4
    kernels quantise the activations on the fly), else the flat roofline."""
    roof = cm._roof if roof is None else roof
    flops = 2.0 * tokens * weight
    wbytes = weight * (cm._b if wb is None else wb)
    hbm = wbytes + tokens * (in_per_tok + out_per_tok) * cm._b
    host = wbytes * cm._offload
    compute_s = roof.compute_time(flops, hbm)
    memory_s = roof.memory_time(hbm)
    host_s = host / cm._host_bw if host else 0.0
    if cm._shapes:  # at least a Triton FP8 kernel's serial K loop (engine_kernels.py)
        gpu = max(float(roof.gemm_time(tokens, out_per_tok, in_per_tok)),
                  ek.dense_floor(cm, tokens, out_per_tok, in_per_tok,
                                 cm._b if wb is None else wb, name))
        if name == rg.ROUTER:  # vLLM's gate at its measured times where they apply
            gpu = rg.router_s(cm, tokens, gpu)
    else:
        gpu = max(compute_s, memory_s)
    return (flops * layers, hbm * layers, host * layers, compute_s * layers,
            memory_s * layers, host_s * layers, max(gpu, host_s) * layers)


def _elementwise_kernels(cm, tokens):
    """(bytes, kind, rows) of each elementwise kernel of one layer (``tokens`` a float or an
    array): 2 norms, 2 residual adds, the activation, rope where the model has it."""
    b, h, T = cm._b, cm._h, tokens
    f_dev = cm._f / cm._tp
    kernels = [((3 * T * h + h) * b, "norm", T)] * 2 + [(3 * T * h * b, "elementwise",
                                                         None)] * 2
    kernels.append((3 * T * f_dev * b, "activation", T) if cm._gated
                   else (2 * T * f_dev * b, "elementwise", None))
    if cm._rope:
        kernels.append((3 * T * cm._qkv_dev * b, "rope", T))
    return kernels


def elementwise(cm, tokens: float, layers: int) -> tuple:
    """Norms, residual adds, the activation (and rope) of ``layers`` layers:
    (flops, bytes, GPU s, kernels).  With kernel shapes, one ``transfer_time`` per kernel
    with the bytes each kernel's loads and stores request (hardware/kernels.py's kinds,
    as ``specsim validate --measurements`` checks them against Vidur's A100 kernels)."""
    flops = 10.0 * tokens * cm._h * layers
    if not cm._shapes:
        e_bytes = tokens * cm._elementwise_bytes_per_token
        return flops, e_bytes * layers, (cm._roof.memory_time(e_bytes)
                                         if e_bytes else 0.0) * layers, 5
    kernels = _elementwise_kernels(cm, tokens)
    gpu = sum(float(cm._roof.transfer_time(nb, kind, rows=rows)) for nb, kind, rows in kernels)
    return flops, sum(k[0] for k in kernels) * layers, gpu * layers, len(kernels)


def token_terms(cm, tokens: float, layers: int, with_head: bool,
                mode: str = "eager") -> list[tuple]:
    """Operators whose cost depends on the batch's token totals only (not attention).

    Each is ``(name, flops, hbm_bytes, host_bytes, compute_s, memory_s, host_s,
    launch_s, gpu_s)`` summed over ``layers``: ``launch_s`` is the host time of the
    operator's eager launches (0 inside a CUDA graph), ``gpu_s`` its kernels' time, the
    operator's time ``max(gpu_s, launch_s)``.  Plain floats.
    """
    k = 0.0 if mode != "eager" else cm._launch_s
    terms = []
    for name, weight, out_t, in_t, n, roof, wb in cm._linears:
        n = layers if n is None else n
        lin = linear(cm, tokens, weight, out_t, in_t, n, roof, wb, name)
        terms.append((name,) + lin[:6] + (k * n,) + lin[6:])
    if cm._moe is not None:
        n = cm._moe.layers
        for name, *arr, launches in moe.routed_terms(cm, np.array([tokens], dtype=np.float64)):
            fl, hbm, host, c_s, m_s, h_s, gpu = (float(a[0]) * n for a in arr)
            terms.append((name, fl, hbm, host, c_s, m_s, h_s, launches * k * n, gpu))
    for name, nb, gpu, kernels, n in mk.small_kernel_terms(cm, tokens):
        n = n * layers / cm._layers
        g = float(gpu) * n
        terms.append((name, 0.0, float(nb) * n, 0.0, 0.0, g, 0.0, kernels * k * n, g))
    e_flops, e_bytes, e_s, e_kernels = elementwise(cm, tokens, layers)
    e_launch = e_kernels * k * layers
    fused = arf.fused_count(cm, tokens, layers)  # norms and adds the all-reduces take in
    if fused:
        saved_s, saved_b = _saved_elementwise(cm, tokens)
        e_s, e_bytes = e_s - fused * saved_s, e_bytes - fused * saved_b
        e_launch = (e_kernels * layers - 2 * fused) * k
    terms.append(("elementwise", e_flops, e_bytes, 0.0, 0.0, e_s, 0.0, e_launch, e_s))
    if cm._tp > 1:  # after attention and after the MLP, on the hidden states
        ar, ar_k = _all_reduces(cm, layers, k)
        ar_s = ar * float(cm._collectives.all_reduce_s(
            tokens * cm._h * cm._b, cm._tp, custom=cm._custom_ar))
        if fused:
            ar_s = ar_s + fused * float(arf.epilogue_s(cm, tokens))
        terms.append(("all_reduce", 0.0, 0.0, 0.0, 0.0, ar_s, 0.0, ar_k, ar_s))
    if with_head:
        g_bytes = tokens * cm._h * cm._b
        if cm._shapes:  # a gather: an int64 index per element as well
            g_s = float(cm._roof.transfer_time(tokens * cm._h * (2 * cm._b + 8), "embedding"))
        else:
            g_s = cm._roof.memory_time(g_bytes) if g_bytes else 0.0
        terms.append(("embedding", 0.0, g_bytes, 0.0, 0.0, g_s, 0.0, k, g_s))
    return terms


def _saved_elementwise(cm, tokens):
    """(seconds, bytes) of the norm and residual add one fused all-reduce takes in
    (ar_fusion.py) at ``tokens`` (a float or an array); without kernel shapes, their
    bytes at the memory roof, as ``elementwise`` prices them."""
    if cm._shapes:
        return arf.saved_elementwise(cm, tokens, _elementwise_kernels(cm, tokens))
    nb = (6.0 * tokens * cm._h + cm._h) * cm._b
    return cm._roof.memory_time(nb), nb


def _all_reduces(cm, layers: int, k: float) -> tuple[int, float]:
    """All-reduces per forward and their eager launch time: two a layer under TP, expert
    parallelism included: with one data-parallel rank every TP rank holds all the tokens, its
    local experts compute their share and the MoE output is all-reduced as without EP (vLLM's
    ``FusedMoEParallelConfig.use_all2all_kernels`` is ``dp_size > 1 and use_ep``: no
    dispatch/combine all-to-all below DP 2)."""
    return 2 * layers, 2 * k * layers


def head_terms(cm, logits_tokens: float) -> list[tuple]:
    """Final norm, LM head and sampling: outside the captured graph, always launched;
    under tensor parallelism the vocabulary-parallel logits are gathered (vLLM's
    LogitsProcessor gathers them across the TP ranks).  The LM head stays 16-bit under
    fp8/fp4 weights (vLLM quantises linear layers, not the vocabulary-parallel head)."""
    head = linear(cm, logits_tokens, cm._lm_head_weight, cm._vocab_per_device, cm._h, 1)
    terms = [("lm_head",) + head[:6] + (3 * cm._launch_s,) + head[6:]]
    if cm._tp > 1 and logits_tokens:
        g_s = float(cm._collectives.all_gather_s(
            logits_tokens * cm._vocab_per_device * cm._tp * cm._b, cm._tp))
        terms.append(("logits_gather", 0.0, 0.0, 0.0, 0.0, g_s, 0.0, cm._launch_s, g_s))
    return terms


def terms_time(terms: list[tuple]) -> float:
    """The summed time of ``token_terms`` / ``head_terms`` tuples: ``max(launch, GPU)``."""
    return sum(max(t[7], t[8]) for t in terms)


# ---------------------------------------------------------------- per count (vectorised)
def _linear_times(cm, tokens: np.ndarray, weight: float, out_per_tok: float,
                  in_per_tok: float, layers: int, roof=None, wb=None, name="") -> np.ndarray:
    """``linear``'s GPU seconds (the host link a roof) at every count of ``tokens``."""
    roof = cm._roof if roof is None else roof
    wbytes = weight * (cm._b if wb is None else wb)
    hbm = wbytes + tokens * (in_per_tok + out_per_tok) * cm._b
    host = wbytes * cm._offload
    host_s = host / cm._host_bw if host else 0.0
    if cm._shapes:
        gpu = np.maximum(roof.gemm_time(tokens, out_per_tok, in_per_tok),
                         ek.dense_floor(cm, tokens, out_per_tok, in_per_tok,
                                 cm._b if wb is None else wb, name))
        if name == rg.ROUTER:
            gpu = rg.router_s(cm, tokens, gpu)
    else:
        gpu = np.maximum(roof.compute_time(2.0 * tokens * weight, hbm),
                         roof.memory_time(hbm))
    return np.maximum(gpu, host_s) * layers


def layer_times(cm, tokens: np.ndarray, eager: bool) -> np.ndarray:
    """``terms_time(token_terms(cm, t, layers, True, mode))`` at every count ``t`` of
    ``tokens`` (float64), the same operators in the same order."""
    layers, k = cm._layers, cm._launch_s if eager else 0.0
    roof = cm._roof
    total = np.zeros_like(tokens)
    for name, weight, out_t, in_t, n, lroof, wb in cm._linears:
        n = layers if n is None else n
        total = total + np.maximum(k * n, _linear_times(cm, tokens, weight, out_t, in_t, n,
                                                        lroof, wb, name))
    if cm._moe is not None:
        n = cm._moe.layers
        for *_, gpu, launches in moe.routed_terms(cm, tokens):
            total = total + np.maximum(launches * k * n, gpu * n)
    for _, _, gpu, kernels, n in mk.small_kernel_terms(cm, tokens):
        total = total + np.maximum(kernels * k * n, gpu * n)
    if cm._shapes:
        e_s = np.zeros_like(tokens)
        kernels = _elementwise_kernels(cm, tokens)
        for nb, kind, rows in kernels:
            e_s = e_s + roof.transfer_time(nb, kind, rows=rows)
        e_s, e_kernels = e_s * layers, len(kernels)
    else:
        e_bytes = tokens * cm._elementwise_bytes_per_token
        e_s = np.where(e_bytes > 0, roof.memory_time(e_bytes), 0.0) * layers
        e_kernels = 5
    e_launch, fusion = e_kernels * k * layers, cm.execution.spec.allreduce_norm_fusion_tokens
    if fusion:  # ar_fusion.py: norms and adds the all-reduces take in
        fused = arf.fused_count(cm, tokens, layers)
        e_s = e_s - fused * _saved_elementwise(cm, tokens)[0]
        e_launch = np.where(fused > 0, (e_kernels * layers - 2 * fused) * k, e_launch)
    total = total + np.maximum(e_launch, e_s)
    if cm._tp > 1:
        ar, ar_k = _all_reduces(cm, layers, k)
        ar_s = ar * cm._collectives.all_reduce_s(tokens * cm._h * cm._b, cm._tp,
                                                 custom=cm._custom_ar)
        if fusion:
            ar_s = ar_s + fused * arf.epilogue_s(cm, tokens)
        total = total + np.maximum(ar_k, ar_s)
    if cm._shapes:
        g_s = roof.transfer_time(tokens * cm._h * (2 * cm._b + 8), "embedding")
    else:
        g_bytes = tokens * cm._h * cm._b
        g_s = np.where(g_bytes > 0, roof.memory_time(g_bytes), 0.0)
    return total + np.maximum(k, g_s)


def head_times(cm, logits: np.ndarray) -> np.ndarray:
    """``terms_time(head_terms(cm, l))`` at every count ``l`` of ``logits`` (float64)."""
    total = np.maximum(3 * cm._launch_s, _linear_times(
        cm, logits, cm._lm_head_weight, cm._vocab_per_device, cm._h, 1))
    if cm._tp > 1:
        g_s = cm._collectives.all_gather_s(logits * cm._vocab_per_device * cm._tp * cm._b,
                                           cm._tp)
        total = total + np.where(logits > 0, np.maximum(cm._launch_s, g_s), 0.0)
    return total


class TokenTables:
    """The summed times of the layer terms (by tokens computed and launch mode), the head
    terms (by logits tokens) and the pipeline transfer (by tokens sent) of one CostModel,
    tabulated per block of counts (module docstring); ``tables=False`` prices every count
    with the scalar path instead (memoised; the benchmark's before).  At most
    ``3 * TABLE_MAX`` counts are tabulated: two launch modes of layer terms, one of head."""

    def __init__(self, cm, *, tables: bool = True) -> None:
        self._cm = cm
        self._limit = TABLE_MAX if tables else 0
        self._pipelined = cm.parallel.pipeline_parallel > 1
        # count -> time, filled a whole block at a time: a dict lookup is the hot path
        self._eager: dict[float, float] = {}
        self._graph: dict[float, float] = {}
        self._head: dict[float, float] = {}
        self.memo: dict[tuple, float] = {}  # counts past the tables, and pipeline sends

    def fixed(self, tokens: float, logits: float, mode: str, padded: float) -> float:
        """``layers(padded, mode) + head(logits) + pipeline(tokens)``, the sum in that order
        (``CostModel._fixed``)."""
        layer = (self._eager if mode == "eager" else self._graph).get(padded)
        head = self._head.get(logits)
        if layer is None or head is None or self._pipelined:
            return self.layers(padded, mode) + self.head(logits) + self.pipeline(tokens)
        return layer + head + 0.0  # pipeline(tokens) is 0.0 without stages

    def layers(self, tokens: float, mode: str) -> float:
        """The layer terms' time of a forward computing ``tokens`` tokens in ``mode``."""
        eager = mode == "eager"
        table = self._eager if eager else self._graph
        t = table.get(tokens)
        if t is not None:
            return t
        tokens = float(tokens)
        if 0.0 <= tokens < self._limit and tokens.is_integer():
            counts = _counts(int(tokens) // TABLE_BLOCK)
            table.update(zip(counts.tolist(), layer_times(self._cm, counts, eager).tolist()))
            return table[tokens]
        key = ("layers", tokens, eager)
        t = self.memo.get(key)
        if t is None:
            t = terms_time(token_terms(self._cm, tokens, self._cm._layers, True, mode))
            remember(self.memo, key, t)
        return t

    def head(self, logits: float) -> float:
        """The head terms' time of ``logits`` tokens through the LM head."""
        t = self._head.get(logits)
        if t is not None:
            return t
        logits = float(logits)
        if 0.0 <= logits < self._limit and logits.is_integer():
            counts = _counts(int(logits) // TABLE_BLOCK)
            self._head.update(zip(counts.tolist(), head_times(self._cm, counts).tolist()))
            return self._head[logits]
        key = ("head", logits)
        t = self.memo.get(key)
        if t is None:
            t = terms_time(head_terms(self._cm, logits))
            remember(self.memo, key, t)
        return t

    def pipeline(self, tokens: float) -> float:
        """The stage-to-stage sends of ``tokens`` tokens' hidden states (0 without stages)."""
        if not self._pipelined:
            return 0.0
        pp = self._cm.parallel.pipeline_parallel
        key = ("pipeline", tokens)
        t = self.memo.get(key)
        if t is None:
            t = self._cm._pipeline_transfer(tokens, pp)
            remember(self.memo, key, t)
        return t

    @property
    def tabulated(self) -> int:
        """Counts priced in tables so far (all kinds together): the tables' size."""
        return len(self._eager) + len(self._graph) + len(self._head)


def _counts(block: int) -> np.ndarray:
    """The token counts of table block ``block``, as float64."""
    return np.arange(block * TABLE_BLOCK, (block + 1) * TABLE_BLOCK, dtype=np.float64)
