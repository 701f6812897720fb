"""Mixture-of-experts layers: the distinct experts a step touches, and what they cost.

Routing.  Each token picks ``k`` distinct experts of ``E``; tokens are independent.  Under
uniform routing a given expert is among a token's k with probability ``k / E``, so of a step's
``T`` tokens none picks it with probability ``(1 - k/E)^T`` and the expected number of
distinct experts touched is the closed form ``D(T) = E (1 - (1 - k/E)^T)``: ``D(1) = k``,
``D(T) -> E``.  Real routers are skewed (a few hot experts); ``routing_skew`` s >= 0 models
that with Zipf inclusion probabilities: ``p_e`` proportional to ``rank_e^-s``, scaled so that
``sum p_e = k`` (each token still picks k), capped at 1 with the excess redistributed over
the uncapped experts in proportion to their weights; then ``D(T) = sum_e 1 - (1 - p_e)^T``
(exact for independent tokens given the inclusion probabilities).  s = 0 is the uniform
closed form; a larger s concentrates the picks and lowers D at every T > 1.

Cost of one MoE layer on one device at T tokens (``MoeShape``).  The routed experts run as one
grouped GEMM per projection (vLLM's fused_moe: one Triton launch over all experts' token
blocks for w13, one for w2), so each projection is priced as ONE kernel, not one per expert.
Its weight bytes are those of the experts touched on the device: all ``D(T)`` of them, a 1/TP
slice of each, when every expert is sharded over the TP ranks; ``D(T) / EP`` whole experts on
the mean rank when they are spread over the EP ranks (in both cases 1/TP of the touched
experts' bytes, since EP = TP here); its FLOPs ``2 T k P / TP`` (P one expert's parameters);
the tokens per touched expert ``T k / D(T)``.  With the profile's kernel shapes its GPU time
is simulator/cost/moe_kernels.py's grouped GEMM on the busiest rank (tiles of BLOCK_M rows
per expert, the measured fused-MoE streaming rate), the routing, align, sum and quantisation
kernels around it a term of their own; without them, the flat roofline of the mean device.

Fused shared experts (``engines.yaml`` ``shared_experts_fusion``: SGLang on CUDA without EP,
``DeepseekV2MoE.num_fused_shared_experts``).  The shared expert's weights are loaded as
expert E of the fused MoE (E + 1 experts) and the fused top-k kernel appends it to every
token's picks (``moe_fused_gate(..., num_fused_shared_experts, ...)``: top-(k + 1)), so the
layer runs no shared MLP of its own: no shared GEMMs, no activation quantisations for them,
no add of their output.  Priced as E + s experts, k + s picks a token, each shared expert's
inclusion probability 1: ``D(T) = s + sum_e 1 - (1 - p_e)^T`` over the routed ones (D(1) =
k + s), the shared expert's slice read once a step with the touched experts' and its T rows
in the grouped GEMMs' tiles.  Under EP SGLang turns the fusion off (the shared expert is
not an expert of any one rank), and so does the shape.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from simulator.cost import engine_kernels, eplb_live, moe_kernels, rank_load
from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import as_number, check_keys, require_mapping

# one grouped GEMM launch per projection; the routing, align, sum and quantisation kernels
# around them are simulator/cost/moe_kernels.py's ``moe_routing`` term
LAUNCHES_UP, LAUNCHES_DOWN = 1, 1


@dataclass(frozen=True)
class MoeOptions:
    """A scenario's ``moe:`` block: how a MoE target's tokens are routed (``routing_skew``
    s >= 0: 0 uniform top-k, s > 0 Zipf expert popularity rank^-s)."""

    routing_skew: float = 0.0


def parse_moe_options(data: Any, source: str) -> MoeOptions:
    """``moe: {routing_skew: s}`` -> MoeOptions."""
    data = require_mapping(data or {}, source=source, field="moe")
    check_keys(data, allowed=("routing_skew",), source=source, prefix="moe.")
    if "routing_skew" not in data:
        return MoeOptions()
    return MoeOptions(float(as_number(data["routing_skew"], source=source,
                                      field="moe.routing_skew", minimum=0.0, maximum=10.0,
                                      fix="0 is uniform routing; 1 is Zipf's law")))


def inclusion_probabilities(num_experts: int, k: int, skew: float = 0.0) -> np.ndarray:
    """Each expert's probability of being among one token's k (sum k, each <= 1): uniform
    ``k / E`` at skew 0, else Zipf weights ``rank^-skew`` scaled to sum k, capped at 1 with
    the excess handed to the uncapped experts in proportion to their weights."""
    if not 1 <= k <= num_experts:
        raise SpecsimError(f"top-{k} routing over {num_experts} experts is impossible",
                           field="experts_per_token", fix="use 1 <= k <= num_experts")
    if skew < 0 or not np.isfinite(skew):
        raise SpecsimError(f"must be a finite number >= 0, got {skew!r}",
                           field="moe.routing_skew", fix="0 is uniform routing")
    w = np.arange(1, num_experts + 1, dtype=np.float64) ** -float(skew)
    p = np.zeros(num_experts)
    capped = np.zeros(num_experts, dtype=bool)
    while True:  # at most k rounds: each one caps at least one more expert
        free = ~capped
        p[free] = (k - np.count_nonzero(capped)) * w[free] / w[free].sum()
        over = free & (p > 1.0)
        if not over.any():
            return np.minimum(p, 1.0)
        capped |= over
        p[capped] = 1.0


def distinct_experts(tokens, num_experts: int, k: int, probs: np.ndarray | None = None):
    """Expected distinct experts touched by ``tokens`` tokens (a float or an array):
    the closed form under uniform routing (``probs`` None), else ``sum_e 1 - (1 - p_e)^T``."""
    t = np.asarray(tokens, dtype=np.float64)
    if probs is None:
        d = num_experts * (1.0 - (1.0 - k / num_experts) ** t)
    else:
        d = (1.0 - (1.0 - probs) ** t[..., None]).sum(axis=-1)
    return float(d) if np.ndim(d) == 0 else d


@dataclass(frozen=True)
class MoeShape:
    """One MoE layer's routed experts on one device (elements unless named bytes)."""

    layers: int              # MoE layers of the model
    num_experts: int
    k: int
    probs: np.ndarray | None  # inclusion probabilities; None: uniform (closed form)
    ep: int                  # expert parallel degree (1: experts sharded over TP)
    up_weight: float         # one expert's w13 (gate+up) on the device
    down_weight: float       # one expert's w2
    up_out: float            # w13 output per routed token row on the device
    down_in: float           # w2 input per routed token row
    hidden: int
    # the busiest EP rank's share of the routed rows where the routing or the placement
    # makes it more than its 1/ep (rank_load.busiest_rank_share); None: uniform routing
    # over an even placement, where today's rows per touched expert stand
    rank_share: float | None = None
    eplb: bool = False       # placed by EPLB: its rows are the busiest rank's, alone
    fused_shared: int = 0    # shared experts run as always-picked experts of these GEMMs

    @classmethod
    def of(cls, model, tp: int, ep: int, skew: float, fuse_shared: bool = False) -> "MoeShape":
        """The routed experts; ``fuse_shared`` (without EP): the shared experts join them as
        ``s`` more experts every token picks (module docstring, "Fused shared experts")."""
        fe, h = model.expert_ffn_size, model.hidden_size
        gates = 2 if model.gated_mlp else 1
        E, k = model.num_experts, model.experts_per_token
        probs = None if skew == 0 else inclusion_probabilities(E, k, skew)
        if probs is None:
            inclusion_probabilities(E, k)  # validates k against E
        s = model.shared_experts if fuse_shared and ep == 1 else 0
        if s:  # each shared expert in every token's picks: inclusion probability 1
            routed = np.full(E, k / E) if probs is None else probs
            E, k, probs = E + s, k + s, np.concatenate([routed, np.ones(s)])
        # EP: whole experts, E/ep of them per device; else every expert's intermediate / tp
        f_dev = fe if ep > 1 else fe / tp
        return cls(model.moe_layers, E, k, probs, ep, gates * h * f_dev,
                   f_dev * h, gates * f_dev, f_dev, h, fused_shared=s)

    def distinct(self, tokens):
        return distinct_experts(tokens, self.num_experts, self.k, self.probs)


def busiest_share(s: MoeShape, tokens):
    """The busiest EP rank's share of a layer's routed rows at ``tokens`` tokens over the EP
    group: ``s.rank_share`` (the expected loads' busiest rank), under EPLB plus what the live
    traffic adds beyond the loads it placed, ``eplb_live.live_excess`` of the mean rank's
    ``1 / ep`` at that rank's ``tokens k / ep`` rows (simulator/cost/eplb_live.py)."""
    if not s.eplb:
        return s.rank_share
    return s.rank_share + eplb_live.live_excess(s.ep, tokens * s.k / s.ep) / s.ep


def comm_hot(s: MoeShape, tokens) -> float:
    """The busiest rank's rows over what uniform routing over the default placement puts on
    its busiest (at least 1; 1 where ``s`` has no hot rank): what scales the dispatch and
    combine it receives and sends back (dp_attention.py), at ``tokens`` over the EP group."""
    if s.rank_share is None:
        return 1.0
    return max(1.0, float(busiest_share(s, tokens)) / _even_share(s.num_experts, s.k, s.ep))


@functools.lru_cache(maxsize=None)
def _even_share(num_experts: int, k: int, ep: int) -> float:
    """The busiest rank's share under uniform routing over the default placement (a
    constant of the shape, asked for at every priced step by ``comm_hot``)."""
    return rank_load.busiest_rank_share(inclusion_probabilities(num_experts, k), ep)


def routed_terms(cm, tokens: np.ndarray, shape: MoeShape | None = None) -> list[tuple]:
    """Per MoE layer, at every count of ``tokens`` (float64 array): ``(name, flops, hbm
    bytes, host bytes, compute s, memory s, host s, gpu s, launches)`` of the grouped w13
    and w2 GEMMs; offloaded weights (``offload_fraction``) stream the touched experts'
    share over the host link, a third roof as for the dense linears.  ``shape``: the
    experts' placement (default ``cm._moe``; DP attention's EP group, dp_attention.py)."""
    s: MoeShape = cm._moe if shape is None else shape
    roof, wb, b = cm._lin_roof, cm._wb, cm._b
    # experts touched on the device (each a 1/TP slice, or D/EP whole experts under EP)
    # and the routed token rows it computes
    d_dev = s.distinct(tokens) / s.ep
    rows = tokens * s.k / s.ep
    if cm._shapes:  # the busiest rank sets the pace (rank_load.busiest_experts)
        d_busy = rank_load.busiest_experts(s, tokens)
        rows_busy = rows * d_busy / np.maximum(d_dev, 1e-12)
        if s.rank_share is not None:  # a hot rank: its expected rows, if more; under
            # EPLB the replicas even out what the uneven contiguous blocks added
            hot = tokens * s.k * busiest_share(s, tokens)
            rows_busy = hot if s.eplb else np.maximum(rows_busy, hot)
        eta = moe_kernels.streaming_efficiency(cm)
        kernel = moe_kernels.grouped_gemm_kernel(cm)
    out = []
    for name, weight, t_in, t_out, launches in (
            ("experts_up", s.up_weight, s.hidden, s.up_out, LAUNCHES_UP),
            ("experts_down", s.down_weight, s.down_in, s.hidden, LAUNCHES_DOWN)):
        flops = 2.0 * rows * weight
        hbm = d_dev * weight * wb + rows * (t_in + t_out) * b
        host = d_dev * weight * wb * cm._offload
        host_s = host / cm._host_bw
        compute_s = roof.compute_time(flops, hbm)
        memory_s = roof.memory_time(hbm)
        if cm._shapes:
            gpu = np.maximum(moe_kernels.grouped_gemm_s(roof, eta, d_busy, rows_busy, t_out,
                                                        t_in, wb, b, kernel),
                             engine_kernels.grouped_floor(cm, d_busy, rows_busy, t_out, t_in,
                                                          (moe_kernels.BLOCK_M_SMALL,
                                                           moe_kernels.BLOCK_M)))
        else:
            gpu = np.maximum(compute_s, memory_s)
        out.append((name, flops, hbm, host, compute_s, memory_s, host_s,
                    np.maximum(gpu, host_s), launches))
    return out


def verify_decode_ratio(cost, batches, tokens: int, context: float) -> np.ndarray:
    """The step time of verifying ``tokens`` tokens per request over a 1-token decode, at
    each batch size of ``batches`` and equal ``context`` (the report's roofline curve: near
    1 on a dense model at small batch, well above 1 on a MoE model until D(T) nears E)."""
    return np.array([cost.verify_time(int(n), context, int(tokens))
                     / cost.decode_time(int(n), context) for n in batches])
