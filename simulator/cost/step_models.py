"""Step models beside the per-operator sum: a micro-batched pipeline, and the lecture's
single roofline.

``CostModel.breakdown`` hands a step to ``pipelined_step`` when ``pipeline_parallel > 1`` with
several micro-batches: each micro-batch is priced by the cost model's own operators, the
makespan is the sum of one stage's work over the micro-batches plus (pp - 1) times the
slowest micro-batch's stage time, and the stage-to-stage sends are added.  With
``step_model: single_roofline`` it folds the operators into ``single_roofline``'s one max.
"""
from __future__ import annotations

import numpy as np

from simulator.cost.execution import KERNELS_OUTSIDE_GRAPH
from simulator.cost.op_cost import OpCost, StepCost

COLLECTIVE_OPS = ("all_reduce", "logits_gather")


def pipelined_step(cm, new, ctx, logits) -> StepCost:
    """The StepCost of ``cm`` (a CostModel) over micro-batches of the step (``new``,
    ``ctx``: tokens and context per request; ``logits``: tokens through the LM head)."""
    pp, mb = cm.parallel.pipeline_parallel, cm.parallel.micro_batches
    per_stage_layers = cm._layers / pp
    groups = [g for g in np.array_split(np.arange(new.size), min(mb, new.size)) if g.size]
    total_tokens = float(new.sum()) or 1.0
    stage_times, all_ops, replay = [], [], 0.0
    for g in groups:
        share = float(new[g].sum()) / total_tokens
        ops, mode = cm._layer_ops(new[g], ctx[g], logits * share, cm._layers, True)
        all_ops.append(ops)
        replay += cm._with_replays(mode, 0.0)
        stage_times.append(sum(op.time_s for op in ops) * per_stage_layers / cm._layers)
    merged = [OpCost(name=ops0.name,
                     flops=sum(o[i].flops for o in all_ops),
                     hbm_bytes=sum(o[i].hbm_bytes for o in all_ops),
                     host_bytes=sum(o[i].host_bytes for o in all_ops),
                     compute_s=sum(o[i].compute_s for o in all_ops),
                     memory_s=sum(o[i].memory_s for o in all_ops),
                     host_s=sum(o[i].host_s for o in all_ops),
                     overhead_s=sum(o[i].overhead_s for o in all_ops),
                     roofline_s=None if ops0.roofline_s is None
                     else sum(o[i].roofline_s for o in all_ops))
              for i, ops0 in enumerate(all_ops[0])]
    busy = sum(op.time_s for op in merged)
    # Work is spread over pp stages; the makespan is sum of one stage's work over the
    # micro-batches plus (pp - 1) times the slowest micro-batch's stage time.
    makespan = sum(stage_times) + (pp - 1) * max(stage_times)
    transfer = cm._pipeline_transfer(total_tokens / len(groups), pp) * len(groups)
    pipe = makespan - busy + transfer
    device = makespan + transfer + replay
    cpu = cm._host_time(int(np.count_nonzero(new)), device)
    return StepCost(tuple(merged), cpu, pipe, device + cpu, launch_s=replay,
                    mode="pipelined")


def single_roofline(cm, ops: list[OpCost], mode: str) -> list[OpCost]:
    """The lecture's step model: one roofline over the whole step's FLOPs and bytes,
    ``max(F / (peak * eta_c), B / (bandwidth * eta_m))`` at the flat efficiencies, with
    elementwise traffic fused away (as vLLM's fused kernels do).  Eager launches are a
    third roof over the whole step; the collectives are added as they are."""
    # collectives have no FLOPs or HBM bytes of their own: they stay separate operators
    collectives = [op for op in ops if op.name in COLLECTIVE_OPS]
    kept = [op for op in ops if op.name != "elementwise" and op.name not in COLLECTIVE_OPS]
    flops = sum(op.flops for op in kept)
    nbytes = sum(op.hbm_bytes for op in kept)
    kernels = {"full": KERNELS_OUTSIDE_GRAPH,
               "piecewise": cm._layers + KERNELS_OUTSIDE_GRAPH}.get(mode, cm._kernels)
    roof = max(flops * cm._inv_crate, nbytes * cm._inv_mrate,
               sum(op.host_s for op in kept))
    return [OpCost("step", flops, nbytes, sum(op.host_bytes for op in kept),
                   flops * cm._inv_crate, nbytes * cm._inv_mrate,
                   sum(op.host_s for op in kept),
                   max(kernels * cm._launch_s - roof, 0.0))] + collectives
