"""Two-batch overlap (SGLang ``--enable-two-batch-overlap``, vLLM ``--enable-dbo``) under DP
attention with EP.

The mechanism (DeepSeek's inference system, github.com/deepseek-ai/profile-data: "two
micro-batches ... the computation of one micro-batch overlaps with the communication of the
other"; the SGLang large-scale EP blog, lmsys.org/blog/2025-05-05-large-scale-ep, "Two-batch
Overlap"): each rank's batch is split in two micro-batches, A and B, and the step runs on two
streams of one GPU: the compute stream runs the micro-batches' stages in turn, the
communication stream their DeepEP collectives, one at a time in launch order.  Which
compute hides which collective is the engine's schedule, SGLang's
python/sglang/srt/operations_strategy.py (the "deepseek_blog" strategies), taken stage by
stage (``_stages``; a stage runs until its yield):

- prefill (``tbo_delta_stages=0``, A and B in turn): [attention, gate, dispatch launched] |
  [dispatch awaited, routed experts, combine launched] | [shared expert, combine awaited,
  the next layer's attention ...].  So A's dispatch hides behind B's attention, B's behind
  A's experts, A's combine behind B's experts and A's shared expert, B's behind A's next
  attention: the drawing of profile-data's prefill (108 SMs computing, 24 communicating),
  and vLLM's DBO schedule (docs/design/dbo.md, one schedule for every batch).
- decode (``tbo_delta_stages=2``: A runs two stages ahead): [attention's input
  projections] | [attention, output projection, gate] | [dispatch launched, shared expert]
  | [dispatch awaited, routed experts, combine launched] | [combine awaited] per layer.

Not every part hides: a collective longer than the compute the schedule puts beside it shows
its excess, and a collective's wait cannot move into another stage.  At prefill DeepEP's
normal kernels hold ``parallelism.deepep_num_sms`` SMs while they run (SGLang's
DeepEPConfig: the ``num_sms`` of ``--deepep-config``, else DeepEP's ``Buffer.num_sms`` = 20,
deepseek-ai/DeepEP deep_ep/buffer.py; ``sm_split``), and SGLang caps DeepGEMM at the rest
for the whole overlapped forward (two_batch_overlap.py ``_model_forward_tbo``: the
overlapped operations inside ``configure_deep_gemm_num_sms(total - num_sms)``; DeepGEMM's
``set_num_sms``, "the maximum SM count for all GEMM kernels", read by its dense
``gemm_fp8_fp8_bf16_nt`` as by its grouped GEMMs): the routed experts' GEMMs and, where the
engine runs its block-FP8 linears on DeepGEMM (``fp8_gemm: deepgemm``), the MoE layers'
attention projections and shared expert (``half_of``'s ``capped``, the ``*_gemm`` parts);
its dense layers run before the overlap on the whole batch (deepseek_v2.py: the
``first_k_dense_replace`` layers, then ``model_forward_maybe_tbo``), uncapped.  vLLM's DBO
the same with DeepEP's high-throughput kernels (vllm/envs.py ``VLLM_DBO_COMM_SMS`` 20, "the
rest of the SMs on the device will be allocated to compute"; gpu_ubatch_wrapper.py sets
DeepGEMM's count around the micro-batches' whole forward, its dense layers included).  So
those GEMMs take ``SMs / (SMs - held)`` times as long, and other compute gets ``1 - held /
SMs`` of the SMs while a collective is in flight (``_Streams.run``: the work done at that
rate inside each collective's interval, at the full rate outside; the blog's ablation: "the
no-TBO 8k case outperforms the TBO 16k case in per-kernel speed ... reduced streaming
multiprocessors (SMs) with TBO").  DeepEP's low-latency kernels (decode) hold no SM while the
data is in flight (profile-data: "all GPU SMs are freed"; SGLang's decode strategy sets no
DeepGEMM SM count), but every SM while they send and receive (the blog's decode breakdown:
they "either fully utilize SMs (during send/receive) or none (during inflight waiting)"; a
layer's dispatch holds them 0.06 ms in DeepEP's unit test, 128 tokens a rank x 8 copies):
``LL_SM_S`` per 1,024 routed copies, run on the compute stream after each collective's
launch in either schedule (``Half.dispatch_sm``, ``combine_sm``; zero for the normal
kernels, whose SMs are the ``sm_share``; the combine's time is not stated, so it is taken
per copy as the dispatch's, though its BF16 copies are twice the bytes).  With it SGLang's
decode ablation is priced 0.71 at 32 tokens a device (0.73 measured), 1.26 at 256 (1.255),
where the SMs free throughout priced 0.75 and 1.29.

DeepEP's normal kernels run slower beside compute than alone (the blog's prefill breakdown:
DeepSeek's and SGLang's communication "slower than unit test results, while the latter is
achievable when disabling TBO"): in an overlapped step across nodes each dispatch and
combine takes 1.83 and 1.28 times its standalone price (hardware/collectives.py), measured
from DeepSeek's profiler trace against DeepEP's unit test (simulator/cost/tbo_measured.py
``overlap_factors``, passed as ``overlapped_step``'s ``comm_factor``); within a node and for
the low-latency kernels the slowdown is not measured (priced 1).  Not priced, for want of
a number: the compute's slowdown beyond the SMs taken ("potential noisy neighbor effects
during overlap"): each kernel runs at its own price on the SMs it is left.

What the split costs is priced by pricing each micro-batch on its own: each runs every
kernel (twice the kernel floors and launches), reads every weight (twice the weight bytes of a
memory-bound decode) and computes its GEMMs at half the rows (lower efficiency at smaller M).
The forward is still one step of the scheduler and one CUDA graph: the host time and the
graph replay are counted once.  A micro-batch's operators are placed in the stages by name
(``half_of``): the routed experts, the shared expert and the collectives spread evenly over
the MoE layers, the other per-layer operators over every layer (the dense layers' share,
with the dense MLPs and the embedding, before the first MoE layer; the LM head after the
last).  With no communication the step is the two micro-batches' compute; with every
collective within the compute beside it (and no SM held) it is hidden in full.

The split (``split_rank``): decode requests (one token each) by count in both engines; a
prefill batch between whole requests in SGLang (``split_by_sequence``: requests of unequal
lengths split unevenly, a single request stays whole in one micro-batch and nothing
overlaps), at the token midpoint in vLLM (``create_ubatch_slices``: a request that straddles
it is cut in two, the second part's context the first's tokens on).
``parallelism.tbo_schedule`` picks the engine (``sglang``, or ``vllm`` from ``--vllm-args``'
``enable_dbo``).

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

from dataclasses import dataclass, replace

import numpy as np

from simulator.inputs.errors import SpecsimError

# DeepEP's low-latency dispatch holds every SM while it sends and receives: "unit tests with
# DeepEP reveal a potential of 0.06ms occupying SMs" for a decode layer's dispatch of SGLang's
# large-EP deployment (lmsys.org/blog/2025-05-05-large-scale-ep, "Detail Breakdown", decode:
# 128 tokens a rank each micro-batch, top-8 of DeepSeek-V3's hidden 7168), its in-flight time
# holding none; per routed copy of a token (the kernels copy each copy in and out)
LL_SM_S = 60e-6
LL_SM_COPIES = 128 * 8


def sm_split(sm_count: int, held: int, decode: bool) -> tuple[float, float]:
    """``(share, factor)`` of DeepEP's normal kernels holding ``held`` of the GPU's
    ``sm_count`` SMs (module docstring): the share the compute beside a collective loses,
    and how much longer the GEMMs on DeepGEMM's capped SMs take at prefill (1 at decode,
    where SGLang sets no DeepGEMM SM count)."""
    if not 0 < held < sm_count:
        raise SpecsimError(f"DeepEP's kernels cannot hold {held} of the GPU's {sm_count} SMs",
                           field="parallelism.deepep_num_sms",
                           fix=f"a whole number from 1 to {sm_count - 1}")
    return held / sm_count, 1.0 if decode else sm_count / (sm_count - held)


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
        threshold = decode_threshold if uniform_decode(new, ctx, uniform_max) \
            else prefill_threshold
        if float(new.sum()) < threshold:
            return False
    return True


def uniform_decode(new: np.ndarray, ctx: np.ndarray, uniform_max: float) -> bool:
    """Every request continues a sequence with the same count of new tokens, at most
    ``uniform_max`` (a decode or verification batch: SGLang's DECODE and TARGET_VERIFY
    forward modes, vLLM's uniform decode)."""
    active = new > 0
    return bool(active.any()) and bool(np.all(ctx[active] > 0)) and \
        new[active].min() == new[active].max() <= uniform_max


@dataclass(frozen=True)
class Half:
    """One micro-batch's work, in device seconds at the whole GPU: ``lead`` before the first
    MoE layer (embedding, the dense layers), per MoE layer ``prep`` (the attention's input
    projections), ``core`` (the rest of the layer before the experts: attention, its output
    projection, norms, the router), ``experts`` (the routed experts' grouped GEMMs),
    ``shared`` (the shared expert and its add), ``dispatch`` and ``combine`` (its DeepEP
    collectives), and ``tail`` after the last (final norm, LM head).  The ``*_gemm`` parts
    are the GEMMs of ``lead``, ``prep``, ``core`` and ``shared`` that run on DeepGEMM's
    capped SMs (``half_of``'s ``capped``), the routed ``experts`` always do."""

    lead: float
    prep: float
    core: float
    experts: float
    shared: float
    dispatch: float
    combine: float
    tail: float
    dispatch_sm: float = 0.0  # the seconds each collective's kernels hold every SM on the
    combine_sm: float = 0.0   # compute stream (DeepEP low latency's send and receive)
    lead_gemm: float = 0.0
    prep_gemm: float = 0.0
    core_gemm: float = 0.0
    shared_gemm: float = 0.0


def _stages(h: Half, layers: int, decode: bool) -> list[list[tuple]]:
    """One micro-batch's stages, SGLang's operations_strategy.py (module docstring): each
    a list of ("run", s, capped?) (capped: on DeepGEMM's SMs), ("send", s) (a collective
    launched) and ("wait",) (the last one's result needed)."""
    lead = [("run", h.lead, False), ("run", h.lead_gemm, True)]
    prep = [("run", h.prep, False), ("run", h.prep_gemm, True)]
    core = [("run", h.core, False), ("run", h.core_gemm, True)]
    shared = [("run", h.shared, False), ("run", h.shared_gemm, True)]
    experts = [("wait",), ("run", h.experts, True), ("send", h.combine),
               ("run", h.combine_sm, False)]
    if decode:  # delta 2: prep | core | dispatch + shared | experts | combine's wait
        out = [lead + prep]
        for i in range(layers):
            out += [core, [("send", h.dispatch), ("run", h.dispatch_sm, False), *shared],
                    experts, [("wait",)]]
            out.append(prep if i + 1 < layers else [("run", h.tail, False)])
        return out
    send_d = [("send", h.dispatch), ("run", h.dispatch_sm, False)]  # delta 0
    out = [lead + prep + core + send_d]
    for i in range(layers):
        out.append(experts)
        nxt = prep + core + send_d if i + 1 < layers else [("run", h.tail, False)]
        out.append([*shared, ("wait",), *nxt])
    return out


PREP_OPS = ("fused_qkv_a_proj", "q_b_proj", "kv_b_proj", "qkv_proj")  # attention's inputs
EXPERT_OPS = ("experts_up", "experts_down")
SHARED_OPS = ("shared_up", "shared_down", "fp8_quant_shared", "moe_shared_add")
LEAD_OPS = ("embedding", "mlp_up", "mlp_down", "fp8_quant_mlp")  # the dense layers' MLP
TAIL_OPS = ("lm_head",)
MOE_CORE_OPS = ("router", "moe_routing")  # the gate and top-k of each MoE layer
COMM_OPS = ("moe_dispatch", "moe_combine")


def capped_share(name: str, layers: int, moe_layers: int, capped: frozenset,
                 lead_capped: bool) -> float:
    """The share of operator ``name``'s seconds on DeepGEMM's capped SMs: all of the routed
    experts'; of a GEMM named in ``capped``, its MoE layers' share (and the dense layers'
    where ``lead_capped``); none of the rest, nor of the LM head (``tail``)."""
    if name in EXPERT_OPS:
        return 1.0
    if name not in capped or name in TAIL_OPS:
        return 0.0
    if name in LEAD_OPS:
        return 1.0 if lead_capped else 0.0
    if name in SHARED_OPS + COMM_OPS + MOE_CORE_OPS or lead_capped:
        return 1.0
    return moe_layers / layers  # a per-layer GEMM's MoE layers


def half_of(times: dict[str, float], layers: int, moe_layers: int,
            capped: frozenset = frozenset(), lead_capped: bool = False) -> Half:
    """A micro-batch's ``Half`` from its operators' seconds over the forward (the
    CostModel's names): the routed experts, shared expert and collectives spread over the
    MoE layers, the other per-layer operators over every layer (the dense layers' share of
    them, with the dense MLPs, before the first MoE layer); the GEMMs named in ``capped``
    in the ``*_gemm`` parts where ``capped_share`` puts them."""
    parts: dict[str, list[float]] = {}
    dense = (layers - moe_layers) / layers

    def add(part: str, t: float, on: bool) -> None:
        free_gemm = parts.setdefault(part, [0.0, 0.0])
        free_gemm[1 if on else 0] += t

    for name, t in times.items():
        on = name in capped and name not in TAIL_OPS
        if name in EXPERT_OPS + SHARED_OPS + COMM_OPS + MOE_CORE_OPS:
            part = "experts" if name in EXPERT_OPS else "shared" if name in SHARED_OPS \
                else name if name in COMM_OPS else "core"
            add(part, t / moe_layers, on)
        elif name in LEAD_OPS + TAIL_OPS:
            add("lead" if name in LEAD_OPS else "tail", t, on and lead_capped)
        else:  # per layer: the dense layers' share leads, the MoE layers' per MoE layer
            add("lead", dense * t, on and lead_capped)
            add("prep" if name in PREP_OPS else "core", (1.0 - dense) * t / moe_layers, on)

    def part(name: str, gemm: bool = False) -> float:
        return parts.get(name, [0.0, 0.0])[1 if gemm else 0]
    return Half(lead=part("lead"), prep=part("prep"), core=part("core"),
                experts=part("experts") + part("experts", True), shared=part("shared"),
                dispatch=part("moe_dispatch"), combine=part("moe_combine"),
                tail=part("tail"), lead_gemm=part("lead", True), prep_gemm=part("prep", True),
                core_gemm=part("core", True), shared_gemm=part("shared", True))


class _Streams:
    """The compute stream and the communication stream of one GPU: collectives run one at a
    time in launch order; while one runs, compute other than the GEMMs on DeepGEMM's capped
    SMs gets ``1 - sm_share`` of the SMs; those take ``expert_factor`` times as long."""

    def __init__(self, sm_share: float, expert_factor: float) -> None:
        self.t, self.free, self.busy, self.first = 0.0, 0.0, [], 0
        self.share, self.expert_factor = sm_share, expert_factor
        self.done: dict[int, float] = {}

    def run(self, work: float, capped: bool) -> None:
        if capped or self.share <= 0.0:
            self.t += work * (self.expert_factor if capped else 1.0)
            return
        rate = 1.0 - self.share
        for a, b in self.busy[self.first:]:
            if b <= self.t:
                self.first += 1
                continue
            if a > self.t:  # the SMs are all free until the next collective
                if work <= a - self.t:
                    break
                work -= a - self.t
                self.t = a
            if work <= (b - self.t) * rate:
                self.t += work / rate
                return
            work -= (b - self.t) * rate
            self.t = b
        self.t += work

    def send(self, who: int, seconds: float) -> None:
        if seconds <= 0.0:  # no collective (e.g. one rank's empty micro-batch): no wait
            self.done[who] = self.t
            return
        start = max(self.t, self.free)
        self.free = self.done[who] = start + seconds
        self.busy.append((start, self.free))

    def wait(self, who: int) -> None:
        self.t = max(self.t, self.done.get(who, 0.0))


def overlapped_step(a: Half, b: Half, layers: int, decode: bool, sm_share: float = 0.0,
                    expert_factor: float = 1.0,
                    comm_factor: tuple[float, float] = (1.0, 1.0)) -> float:
    """The device seconds of a two-batch-overlapped forward over ``layers`` MoE layers: the
    stages of both micro-batches issued in SGLang's order (A's first ``delta`` stages, then
    A and B in turn, then B's last ``delta``) and run on the two streams (module
    docstring), each dispatch and combine ``comm_factor`` times its standalone seconds where
    both micro-batches have collectives (with one empty, none runs beside compute)."""
    if a.dispatch > 0.0 and b.dispatch > 0.0:
        a, b = (replace(h, dispatch=h.dispatch * comm_factor[0],
                        combine=h.combine * comm_factor[1]) for h in (a, b))
    sa, sb = _stages(a, layers, decode), _stages(b, layers, decode)
    delta = 2 if decode else 0
    order = [(0, st) for st in sa[:delta]]
    for x, y in zip(sa[delta:], sb):
        order += [(0, x), (1, y)]
    order += [(1, st) for st in sb[len(sb) - delta:]]
    streams = _Streams(sm_share, expert_factor)
    for who, stage in order:
        for step in stage:
            if step[0] == "run":
                streams.run(step[1], step[2])
            elif step[0] == "send":
                streams.send(who, step[1])
            else:
                streams.wait(who)
    return streams.t


def split_rank(new: np.ndarray, ctx: np.ndarray, logits: np.ndarray, *,
               by_sequence: bool = False):
    """One rank's batch in two ``(new, ctx, logits)`` per-request arrays (module
    docstring): decode requests (one token each) by count; else at the token midpoint, a
    request that straddles it cut in two (its logits with the second part: vLLM), or
    ``by_sequence`` between whole requests (SGLang, ``split_by_sequence``)."""
    cum = np.cumsum(new)
    total = float(cum[-1]) if cum.size else 0.0
    half = np.floor(total / 2.0)
    if new.size and np.all(new <= 1.0):  # decode: whole requests, by count
        cut = new.size // 2
        return (new[:cut], ctx[:cut], logits[:cut]), (new[cut:], ctx[cut:], logits[cut:])
    if by_sequence:
        cut = split_by_sequence(new)
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


def split_by_sequence(new: np.ndarray) -> int:
    """SGLang's prefill split (python/sglang/srt/two_batch_overlap.py of the large-EP blog's
    release, ``_split_array_by_half_sum``): the first micro-batch takes whole requests up to
    the first whose running sum of new tokens reaches half the total (floor), never the
    last; a single request stays whole in the second."""
    half = float(np.sum(new)) // 2
    cut = 0
    for value in np.cumsum(new)[:-1]:
        cut += 1
        if value >= half:
            break
    return cut
