"""Data-parallel attention with expert parallelism: one replica over N attention ranks.

How DeepSeek-class MoE models are served at high concurrency: SGLang ``--tp N --dp-size N
--enable-dp-attention --ep N``, vLLM ``--data-parallel-size N --enable-expert-parallel``
(docs/serving/data_parallel_deployment.md: "forward passes must be aligned, and expert
layers across all ranks are required to synchronize during every forward pass"), TensorRT-LLM's
attention DP.  Each of the N GPUs is an attention rank (attention TP 1 here) with its own
requests and their KV; the dense layers (attention projections, the leading dense MLPs, a
MoE layer's shared expert and router, the LM head) run on each rank over its own tokens, as
vLLM places them (replicated at attention TP; SGLang's defaults differ: ``--moe-dense-tp-size``
and ``--enable-dp-lm-head`` set whether its dense MLP and LM head are TP over the group);
each MoE layer's routed experts are spread over the N GPUs (EP = N) and every rank waits for
the MoE layer's collectives, so the ranks step in lockstep.

A step's time (``step_time``):

- the requests of the engine's batch are dealt to the ranks round-robin in batch order
  (request i on rank i mod N: SGLang's DP controller deals arrivals round-robin by default,
  ``--load-balance-method round_robin``); each rank's forward without the routed experts
  (attention over its requests' KV, its dense layers and LM head, its host step) is priced by
  the rank's own ``CostModel``, and the slowest rank sets the pace (the imbalance of the
  current batch, e.g. a prefill chunk on one rank);
- the routed experts of every MoE layer at the padded global count ``N x T_max`` (``T_max``
  the busiest rank's tokens: vLLM's ``coordinate_batch_across_dp``, vllm/v1/worker/
  dp_utils.py, pads every DP rank to the largest count so the ranks replay the same CUDA
  graph), EP over N (simulator/cost/moe.py: ``D(T)/N`` experts and ``T k / N`` rows on the
  mean rank, the busiest by rank_load.busiest_experts), with their routing kernels;
- the dispatch and combine of every MoE layer (``dispatch_bytes``), priced by
  hardware/collectives.py: ``all_gather`` (vLLM's ``allgather_reducescatter`` all2all
  backend and SGLang's DP-attention gather without DeepEP): the hidden states of all
  ``N T_max`` tokens all-gathered in 16 bits before the experts and reduce-scattered after
  (a reduce-scatter moves the all-gather's ``(p-1)/p`` bytes per rank, nccl-tests
  doc/PERFORMANCE.md: priced at the all-gather's time); ``all_to_all`` (DeepEP's
  low-latency kernels: SGLang ``--moe-a2a-backend deepep``, vLLM ``deepep_low_latency``):
  each rank sends each of its ``T_max`` tokens' k routed copies of the hidden state, FP8 with
  one fp32 scale per 128 elements on dispatch and 16-bit on combine (DeepEP README,
  low-latency dispatch ``use_fp8``), priced as the profile's all-to-all; ``deepep_normal``
  (DeepEP's normal kernels, SGLang's prefill with ``--moe-a2a-backend deepep``): each token
  sent once per node it reaches and forwarded inside the node, FP8 out and 16-bit back,
  priced by the profile's ``ep_normal`` block (hardware/collectives.py ``ep_normal_s``).

Two-batch overlap (``enable_two_batch_overlap``): the step as two micro-batches, each rank's
batch cut at its token midpoint, one's dispatch and combine beside the other's compute
(simulator/cost/tbo.py).  Expert load: under a skewed routing or EPLB's placement
(``enable_eplb``, ``ep_num_redundant_experts``) the busiest rank's expected share of the
routed rows (under EPLB with what live traffic adds, eplb_live.py) prices its grouped GEMMs
and, beyond uniform routing's, its dispatch and combine (``ep_shape``, moe.busiest_share).
The closed forms' fast paths do not apply (the ranks' maximum is not a line in the batch's
context sum): they answer None, and the engine prices step by step.

The engine sees one replica: its batching limits are the replica's (SGLang divides
``--chunked-prefill-size`` and ``--max-running-requests`` among the DP ranks; a vLLM DP rank
has its own, so the replica's are N times a rank's), a request's prefill chunk is at most one
rank's share of the token budget (simulator/deployment.py ``rank_chunk_tokens``), and its
KV blocks are pooled over the ranks (simulator/cost/memory_plan.py).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from simulator.cost import moe, moe_kernels, rank_load, tbo
from simulator.cost import step_models as sm
from simulator.cost import token_terms as tt
from simulator.cost.cost_model import CostModel
from simulator.cost.op_cost import OpCost, StepCost, check_step
from simulator.cost.parallelism import Parallelism
from simulator.cost.tbo_measured import overlap_factors
from simulator.inputs.errors import SpecsimError

COMM = ("moe_dispatch", "moe_combine")
FP8_SCALE_GROUP = 128  # DeepEP's low-latency FP8 dispatch: one fp32 scale per 128 values


def cost_model(hardware, model, parallel: Parallelism = Parallelism(), **kw) -> CostModel:
    """The CostModel of a deployment: ``DpAttentionCostModel`` under DP attention."""
    if parallel.data_parallel_attention > 1:
        return DpAttentionCostModel(hardware, model, parallel, **kw)
    return CostModel(hardware, model, parallel, **kw)


def reached(k: int, places: int, experts: int) -> float:
    """Expected distinct places (nodes or ranks, each holding ``experts / places`` of the
    experts) that a token's ``k`` distinct routed experts fall on, the k drawn uniformly:
    ``n (1 - C(E - E/n, k) / C(E, k))``.  DeepSeek-V3's group-limited routing (at most 4 of
    8 expert groups a token) can only lower it; the model files do not carry the groups,
    so this is the upper bound."""
    if places <= 1:
        return 1.0
    missed = math.comb(experts - experts // places, k) / math.comb(experts, k)
    return places * (1.0 - missed)


def dispatch_bytes(mode: str, rank_tokens: float, ranks: int, hidden: int, k: int,
                   act_bytes: float, gpus_per_node: int = 8,
                   experts: int = 256) -> tuple[float, float]:
    """Bytes of one MoE layer's (dispatch, combine) on one GPU, in the collective's own size
    convention: ``all_gather``: the gathered output, ``ranks x rank_tokens`` tokens' hidden
    states (the reduce-scatter's input is the same); ``all_to_all``: a rank's send buffer,
    ``rank_tokens x k`` copies, FP8 plus scales out and ``act_bytes`` back; ``deepep_normal``:
    what crosses the bottleneck in DeepEP's normal kernels' own count (its
    tests/test_internode.py): each token once per node it reaches (across nodes: RDMA, then
    NVLink forwarding inside the node) or once per rank it reaches (within one node), FP8
    plus scales out and ``act_bytes`` back."""
    if mode == "all_gather":
        gathered = ranks * rank_tokens * hidden * act_bytes
        return gathered, gathered
    if mode == "deepep_normal":
        places = ranks // gpus_per_node if ranks > gpus_per_node else ranks
        sent = rank_tokens * reached(k, places, experts) * hidden
        return sent * (1.0 + 4.0 / FP8_SCALE_GROUP), sent * act_bytes
    copies = rank_tokens * k * hidden
    return copies * (1.0 + 4.0 / FP8_SCALE_GROUP), copies * act_bytes


def ep_shape(model, parallel: Parallelism, skew: float) -> moe.MoeShape:
    """The routed experts over the EP group, with the busiest rank's share of the rows where
    a skewed routing or EPLB's placement sets it (rank_load.busiest_rank_share)."""
    ep = parallel.expert_parallel
    shape = moe.MoeShape.of(model, 1, ep, skew)
    if shape.probs is None and not parallel.eplb:
        return shape  # uniform over the default placement: rank_load.busiest_experts
    probs = shape.probs if shape.probs is not None else \
        moe.inclusion_probabilities(shape.num_experts, shape.k)
    share = rank_load.busiest_rank_share(probs, ep, parallel.eplb,
                                           parallel.redundant_experts)
    return dataclasses.replace(shape, rank_share=share, eplb=parallel.eplb)


def merged(ops: list[OpCost]) -> tuple[OpCost, ...]:
    """Operators of the same name (the two micro-batches' runs) as one, their times added."""
    out: dict[str, OpCost] = {}
    for op in ops:
        p = out.get(op.name)
        out[op.name] = op if p is None else OpCost(
            op.name, p.flops + op.flops, p.hbm_bytes + op.hbm_bytes,
            p.host_bytes + op.host_bytes, p.compute_s + op.compute_s,
            p.memory_s + op.memory_s, p.host_s + op.host_s, p.overhead_s + op.overhead_s,
            roofline_s=p.time_s - p.overhead_s + op.time_s - op.overhead_s)
    return tuple(out.values())


class DpAttentionCostModel(CostModel):
    """Prices one replica of ``data_parallel_attention`` ranks (module docstring); its own
    CostModel part is one rank's forward without the routed experts."""

    def __init__(self, hardware, model, parallel: Parallelism, *, routing_skew: float = 0.0,
                 **kw) -> None:
        if not model.is_moe:
            raise SpecsimError(f"{model.name} is dense: data-parallel attention shares a MoE "
                               "model's experts across its ranks",
                               field="parallelism.data_parallel_attention",
                               fix="serve a dense model as separate replicas (replicas: N)")
        super().__init__(hardware, model, parallel.attention_rank(),
                         routing_skew=routing_skew, **kw)
        self.parallel = parallel
        self._ranks = parallel.data_parallel_attention
        self._dispatch = parallel.moe_dispatch
        self._ep_moe = ep_shape(model, parallel, routing_skew)
        self._moe = None  # the ranks' forwards leave the routed experts to _moe_s
        self._moe_memo: dict[tuple, float] = {}

    def _rank_batches(self, new, ctx, logits):
        """Each rank's (new, context, logits) in the round-robin deal; logits a per-request
        array, None, or a total shared in proportion to the ranks' requests."""
        n, ranks = new.size, self._ranks
        out = []
        for r in range(min(ranks, n)):
            if logits is None or np.ndim(logits) == 0:
                lg = None if logits is None else float(logits) * new[r::ranks].size / n
            else:
                lg = np.asarray(logits, dtype=np.float64)[r::ranks]
            out.append((new[r::ranks], ctx[r::ranks], lg))
        return out

    def _moe_terms(self, rank_tokens: float, eager: bool) -> list[tuple]:
        """One forward's MoE terms, ``(name, gpu s, launch s, bytes)`` over the MoE layers,
        at ``rank_tokens`` on the busiest rank (every rank padded to it)."""
        s, ranks = self._ep_moe, self._ranks
        total = ranks * rank_tokens
        k = self._launch_s if eager else 0.0
        out = []
        for name, _f, hbm, _h, _c, _m, _hs, gpu, launches in moe.routed_terms(
                self, np.array([total]), s):
            out.append((name, float(gpu[0]) * s.layers, launches * k * s.layers,
                        float(hbm[0]) * s.layers))
        # the router and weighted sum over the tokens the experts see (all after an all-gather),
        # the shared add over the rank's own, the second quantisation over the mean rank's
        # routed rows; behind DeepEP's normal kernels the layout into the tokens it receives
        route = total if self._dispatch == "all_gather" else rank_tokens
        normal = self._dispatch == "deepep_normal"
        received = rank_tokens * reached(s.k, ranks, s.num_experts) if normal else None
        low = self._dispatch == "all_to_all"  # DeepEP low latency: moe_kernels._moe_kernels
        for tokens, family in ((route, "moe_routing"), (rank_tokens, "moe_shared_add")):
            for name, nb, gpu, kernels, n in moe_kernels.moe_kernel_terms(
                    self, tokens, s, low, self.parallel.eplb, total * s.k / s.ep, received):
                if name == family:
                    out.append((name, float(gpu) * n, kernels * k * n, float(nb) * n))
        coll = self._collectives
        d_bytes, c_bytes = dispatch_bytes(self._dispatch, rank_tokens, ranks, self._h, s.k,
                                          self._b, coll.gpus_per_node, s.num_experts)
        if self._dispatch != "all_gather":  # the busiest rank receives and sends back its
            # share of the routed copies; the profile's curves were measured with uniform
            # routing over the default placement, so only what is hotter than that counts
            hot = moe.comm_hot(s, total)
            d_bytes, c_bytes = d_bytes * hot, c_bytes * hot
        price = {"all_gather": coll.all_gather_s, "all_to_all": coll.all_to_all_s,
                 "deepep_normal": coll.ep_normal_s}[self._dispatch]
        d_s, c_s = float(price(d_bytes, ranks)), float(price(c_bytes, ranks))
        out += [("moe_dispatch", d_s * s.layers, k * s.layers, 0.0),
                ("moe_combine", c_s * s.layers, k * s.layers, 0.0)]
        return out

    def _moe_s(self, rank_tokens: float, eager: bool) -> float:
        """``_moe_terms``' summed time (each ``max(gpu, launches)``), memoised."""
        return sum(self._moe_parts(rank_tokens, eager))

    def _moe_parts(self, rank_tokens: float, eager: bool) -> tuple[float, float]:
        """``_moe_terms``' (compute, dispatch + combine) seconds over the MoE layers."""
        key = (rank_tokens, eager)
        t = self._moe_memo.get(key)
        if t is None:
            terms = self._moe_terms(rank_tokens, eager)
            t = tuple(sum(max(gpu, launch) for name, gpu, launch, _ in terms
                          if (name in COMM) == comm) for comm in (False, True))
            tt.remember(self._moe_memo, key, t)
        return t

    def _ranks_priced(self, new_tokens, context, logits_tokens, price):
        """(the slowest rank's time and index, the busiest rank's tokens, whether it runs
        eagerly) with each rank priced by ``price(new, ctx, logits)``."""
        new = np.asarray(new_tokens, dtype=np.float64)
        ctx = np.asarray(context, dtype=np.float64)
        if ctx.size == 1 and new.size > 1:
            ctx = np.full_like(new, float(ctx.reshape(-1)[0]))
        batches = self._rank_batches(new, ctx, logits_tokens)
        times = [price(*b) for b in batches]
        slowest = int(np.argmax(times)) if times else 0
        t_max = max((float(b[0].sum()) for b in batches), default=0.0)
        busiest = max(batches, key=lambda b: float(b[0].sum())) if batches else None
        eager = busiest is not None and self._mode(busiest[0], t_max)[0] == "eager"
        return (times[slowest] if times else 0.0), slowest, t_max, eager

    def _overlapped(self, new_tokens, context) -> bool:
        """Whether this step runs as two overlapped micro-batches (tbo.overlap_applies)."""
        par = self.parallel
        if not par.two_batch_overlap:
            return False
        new = np.asarray(new_tokens, dtype=np.float64).reshape(-1)
        ctx = np.broadcast_to(np.asarray(context, dtype=np.float64).reshape(-1), new.shape) \
            if np.size(context) in (1, new.size) else np.zeros_like(new)
        ranks = [(new[r::self._ranks], ctx[r::self._ranks])
                 for r in range(min(self._ranks, new.size))]
        return tbo.overlap_applies(ranks, self._ranks, par.tbo_decode_token_threshold,
                                   par.tbo_prefill_token_threshold, sm.UNIFORM_MAX_QUERY)

    def step_time(self, new_tokens, context, logits_tokens=None) -> float:
        """The slowest rank's forward plus the MoE layers' experts and collectives."""
        if self._overlapped(new_tokens, context):
            return self.breakdown(new_tokens, context, logits_tokens).time_s
        rank_s, _, t_max, eager = self._ranks_priced(new_tokens, context, logits_tokens,
                                                     super().step_time)
        return rank_s + (self._moe_s(t_max, eager) if t_max > 0 else 0.0)

    def breakdown(self, new_tokens, context, logits_tokens=None) -> StepCost:
        """The slowest rank's operators, then the MoE layers' (``step_time`` within
        rounding)."""
        check_step(new_tokens, context, logits_tokens)
        if self._overlapped(new_tokens, context):
            return self._tbo_breakdown(new_tokens, context, logits_tokens)
        costs: list[StepCost] = []

        def price(new, ctx, logits) -> float:
            costs.append(CostModel.breakdown(self, new, ctx, logits))
            return costs[-1].time_s

        rank_s, slowest, t_max, eager = self._ranks_priced(new_tokens, context, logits_tokens,
                                                           price)
        rank = costs[slowest]
        ops = [OpCost(name, 0.0, nb, 0.0, 0.0, gpu, 0.0, max(launch - gpu, 0.0), roofline_s=gpu)
               for name, gpu, launch, nb in (self._moe_terms(t_max, eager) if t_max else [])]
        return StepCost(rank.ops + tuple(ops), rank.step_overhead_s, rank.pipeline_s,
                        rank_s + sum(op.time_s for op in ops), launch_s=rank.launch_s,
                        mode=rank.mode)

    def _tbo_half(self, batches, capped: frozenset = frozenset()
                  ) -> tuple[tbo.Half, list[OpCost]]:
        """One micro-batch over its ranks' ``batches``: its work by stage part (tbo.Half,
        the slowest rank's forward and the MoE terms at its busiest rank's tokens, the
        GEMMs named in ``capped`` on DeepGEMM's capped SMs) and its operators (the
        collectives at their serial time)."""
        costs = [CostModel.breakdown(self, *b) for b in batches if b[0].size]
        if not costs:
            return tbo.Half(*[0.0] * 8), []
        rank = max(costs, key=lambda c: c.time_s - c.step_overhead_s - c.launch_s)
        t_max = max(float(b[0].sum()) for b in batches)
        busiest = max(batches, key=lambda b: float(b[0].sum()))
        eager = self._mode(busiest[0], t_max)[0] == "eager"
        terms = self._moe_terms(t_max, eager) if t_max else []
        ops = list(rank.ops) + [
            OpCost(name, 0.0, nb, 0.0, 0.0, gpu, 0.0, max(launch - gpu, 0.0), roofline_s=gpu)
            for name, gpu, launch, nb in terms]
        half = tbo.half_of({op.name: op.time_s for op in ops}, self._layers,
                           self._ep_moe.layers, capped, self._lead_capped())
        if self._dispatch == "all_to_all":  # DeepEP low latency holds the SMs a while
            s = self._ep_moe
            held = tbo.LL_SM_S * t_max * s.k * moe.comm_hot(s, self._ranks * t_max) \
                / tbo.LL_SM_COPIES
            half = dataclasses.replace(half, dispatch_sm=held, combine_sm=held)
        return half, ops

    def _tbo_breakdown(self, new_tokens, context, logits_tokens) -> StepCost:
        """The step as two overlapped micro-batches (simulator/cost/tbo.py): each compute
        operator the sum of its two runs (the expert GEMMs on the SMs DeepEP leaves them at
        prefill), the dispatch and combine what the overlap leaves exposed, in proportion to
        their serial times; the graph replay and the host time once, at the whole batch."""
        new = np.asarray(new_tokens, dtype=np.float64)
        ctx = np.asarray(context, dtype=np.float64)
        ctx = np.full_like(new, float(ctx.reshape(-1)[0])) if ctx.size == 1 else ctx
        lg = new.copy() if logits_tokens is None else np.asarray(logits_tokens, np.float64)
        if lg.ndim == 0:  # a total: shared by the requests' new tokens
            lg = float(lg) * new / max(float(new.sum()), 1.0)
        whole = self._rank_batches(new, ctx, lg)
        sglang = self.parallel.tbo_schedule == "sglang"
        halves = [tbo.split_rank(*b, by_sequence=sglang) for b in whole]
        decode = tbo.uniform_decode(new, ctx, sm.UNIFORM_MAX_QUERY)
        normal = self._dispatch == "deepep_normal" and self._roof.kernels is not None
        share, factor = tbo.sm_split(self._roof.kernels.sm_count,
                                     self.parallel.deepep_num_sms, decode) if normal \
            else (0.0, 1.0)
        capped = self._deepgemm_ops() if factor != 1.0 else frozenset()
        (a, ops_a), (b, ops_b) = (self._tbo_half([h[i] for h in halves], capped)
                                  for i in (0, 1))
        device = tbo.overlapped_step(a, b, self._ep_moe.layers, decode and sglang, share,
                                     factor, overlap_factors(normal, self._collectives,
                                                             self._ranks))
        on = [tbo.capped_share(op.name, self._layers, self._ep_moe.layers, capped,
                               self._lead_capped()) for op in ops_a + ops_b]
        ops = merged([op if not c else dataclasses.replace(op, roofline_s=(
            op.time_s - op.overhead_s) * (1.0 + (factor - 1.0) * c))
            for op, c in zip(ops_a + ops_b, on)])
        compute = sum(op.time_s for op in ops if op.name not in COMM)
        serial = sum(op.time_s for op in ops if op.name in COMM)
        keep = max(device - compute, 0.0) / serial if serial > 0 else 0.0
        ops = tuple(op if op.name not in COMM else dataclasses.replace(
            op, roofline_s=op.time_s * keep, overhead_s=0.0) for op in ops)
        busiest = max(whole, key=lambda r: float(r[0].sum()))
        mode = self._mode(busiest[0], float(busiest[0].sum()))[0]
        total = self._with_replays(mode, device)
        host = self._host_time(max(int(np.count_nonzero(r[0])) for r in whole), total)
        return StepCost(ops, host, 0.0, total + host, launch_s=total - device, mode=mode)

    def _deepgemm_ops(self) -> frozenset:
        """The dense linears the engine runs on DeepGEMM (engine_kernels.dense_floor's
        case: an 8-bit linear, ``fp8_gemm: deepgemm``), whose SM count the overlapped
        prefill caps as the routed experts' (tbo.py docstring)."""
        if self.execution.spec.fp8_gemm != "deepgemm" or self.model.dtype != "fp8":
            return frozenset()
        return frozenset(op[0] for op in self._linears if op[6] < self._b)

    def _lead_capped(self) -> bool:
        """Whether the dense layers run under the cap: inside vLLM's micro-batches, before
        SGLang's (deepseek_v2.py runs them whole, then model_forward_maybe_tbo)."""
        return self.parallel.tbo_schedule != "sglang"

    # the closed forms do not apply: the engine prices step by step
    def uniform_step_times(self, n, u, ctx_sums, logits):
        return None

    def uniform_step_time(self, n, u, ctx_sum, logits):
        return None

    def uniform_pricer(self, n, u, logits):
        return None

    def mixed_step_time(self, n, ctx_sum, chunks, chunk_ctx, logits):
        return None

    def mixed_verify_time(self, n, u, ctx_sum, chunks, chunk_ctx, logits):
        return None

    def chain_decode_time(self, context: np.ndarray, steps: int) -> float:
        """``steps`` sequential 1-token forwards, each priced by ``step_time``."""
        ctx = np.asarray(context, dtype=np.float64)
        ones = np.ones(ctx.size)
        return sum(self.step_time(ones, ctx + j) for j in range(steps)) if ctx.size else 0.0

    def chain_decode_times(self, n, ctx_sums, steps):
        return None

    def weight_bytes_read(self, tokens: float) -> float:
        """Weights one GPU reads in a forward of ``tokens`` tokens of the replica (its rank's
        dense weights, its share of the touched experts)."""
        s = self._ep_moe
        touched = s.num_experts if tokens == np.inf else s.distinct(float(tokens))
        return super().weight_bytes_read(tokens) + s.layers * touched / s.ep \
            * (s.up_weight + s.down_weight) * self._wb
