"""Disaggregated candidates of ``specsim plan --disagg``: prefill and decode pools (xPyD).

The GPU budget splits between a prefill pool and a decode pool at each P:D ratio of
``RATIOS`` that divides it; each pool takes every instance shape an aggregated deployment of
its GPUs would (quick_plan.tp_options: powers of two within a node, with expert parallelism
and data-parallel attention for a mixture-of-experts target), the rest of its GPUs as
instances.  The two pools run the same method at the same draft length (the prefill side
builds the draft's KV and sends it: ``draft_kv: transferred``) and have the same
data-parallel attention degree and expert parallelism: a scenario has one set of scheduler
limits, which vLLM reads per attention rank, so pools of different degrees would not be the
``vllm serve`` arguments written for them.
"""
from __future__ import annotations

import copy
import dataclasses
from typing import Any, Mapping

from simulator.models.spec import ModelSpec
from simulator.planning.quick_plan import (
    Candidate,
    Question,
    Shape,
    candidates,
    engine_args,
    methods_for,
    question_target,
    tp_options,
)

# prefill : decode shares of the GPUs (decode-heavy first after 1:1: decode holds the KV of
# every running request, prefill only while it computes; AIConfigurator and Dynamo's
# planner search the same kind of ratios)
RATIOS = ((1, 1), (1, 2), (1, 3), (2, 1))
# The KV link, priced per GPU: DGX H100, H200 and B200 nodes have one ConnectX-7 NIC at
# 400 Gb/s (50 GB/s) per GPU for the compute fabric (NVIDIA DGX H100/H200 and DGX B200
# datasheets); a request's KV sits on its instance's tensor-parallel ranks (one rank under
# data-parallel attention), each sending its share over its own NIC.  Assumed for every GPU
# type (a DGX A100 has 200 Gb/s ConnectX-6 NICs: half of it), as the shipped
# deepseek_disagg.yaml does; the latency is that scenario's assumed 5 us.
NIC_BYTES_PER_S = 50e9
LINK_LATENCY_US = 5.0
LINK_SOURCE = ("specsim plan --disagg: 50 GB/s (one ConnectX-7 400 Gb/s NIC per GPU, NVIDIA "
               "DGX H100/H200/B200 datasheets) per tensor-parallel rank of the smaller "
               "instance; 5 us setup, assumed")


def pool_splits(gpus: int) -> list[tuple[int, int]]:
    """(prefill GPUs, decode GPUs) for each ratio of ``RATIOS`` that divides ``gpus``."""
    out: list[tuple[int, int]] = []
    for a, b in RATIOS:
        if gpus * a % (a + b) == 0:
            split = (gpus * a // (a + b), gpus * b // (a + b))
            if min(split) >= 1 and split not in out:
                out.append(split)
    return out


def pool_pairs(q: Question, target: ModelSpec) -> list[tuple[Shape, int, Shape, int]]:
    """(prefill shape, its instances, decode shape, its instances) of every split, the two
    shapes of the same data-parallel degree and expert parallelism."""
    out = []
    for pre_gpus, dec_gpus in pool_splits(q.gpus):
        pre = tp_options(dataclasses.replace(q, gpus=pre_gpus), target)
        dec = tp_options(dataclasses.replace(q, gpus=dec_gpus), target)
        out += [(p, pre_gpus // p.gpus, d, dec_gpus // d.gpus) for p in pre for d in dec
                if (p.data_parallel, p.expert_parallel) == (d.data_parallel, d.expert_parallel)]
    return out


def link_payload(pre: Shape, dec: Shape) -> dict[str, Any]:
    """The ``disaggregation.link`` of a pair of instance shapes."""
    ranks = min(pre.tensor_parallel, dec.tensor_parallel)
    return {"bandwidth_gb_per_s": NIC_BYTES_PER_S * ranks / 1e9,
            "latency_us": LINK_LATENCY_US, "source": LINK_SOURCE}


def _pool(base: Mapping[str, Any], target: ModelSpec, method: str, gamma: int, shape: Shape,
          replicas: int, label: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """One pool's ``vllm serve`` arguments and the aggregated scenario they make."""
    from simulator.vllm_args import apply_vllm_args, vllm_args_from_mapping
    args = engine_args(target, method, gamma, shape, replicas)
    payload = apply_vllm_args({**copy.deepcopy(dict(base)), "replicas": replicas},
                              vllm_args_from_mapping(args, source=label))
    return args, payload


def disaggregated_candidates(q: Question, target: ModelSpec,
                             base: Mapping[str, Any]) -> list[Candidate]:
    """Every disaggregated deployment of the question's GPUs, each method at each gamma."""
    from simulator.deployment import DP_ATTENTION_POLICIES
    out = []
    for pre, n_pre, dec, n_dec in pool_pairs(q, target):
        for method in methods_for(q, target):
            if dec.data_parallel > 1 and method not in DP_ATTENTION_POLICIES:
                continue  # as aggregated: a separate draft is not split over attention ranks
            for gamma in (0,) if method == "none" else q.gammas:
                label = f"{n_pre}P {pre.name} + {n_dec}D {dec.name} {method}" + (
                    f" k={gamma}" if gamma else "")
                pre_args, pre_payload = _pool(base, target, method, gamma, pre, n_pre, label)
                args, payload = _pool(base, target, method, gamma, dec, n_dec, label)
                payload["disaggregation"] = {
                    "prefill": {"replicas": n_pre, "parallelism": pre_payload["parallelism"]},
                    "decode": {"replicas": n_dec, "parallelism": payload.pop("parallelism")},
                    "link": link_payload(pre, dec), "transfer": "layerwise",
                    "draft_kv": "transferred"}
                del payload["replicas"]
                out.append(Candidate(label, method, gamma, dec, n_dec, args, payload,
                                     prefill_shape=pre, prefill_replicas=n_pre,
                                     prefill_engine_args=pre_args))
    return out


def all_candidates(q: Question) -> list[Candidate]:
    """The aggregated candidates, and with ``--disagg`` the disaggregated ones after them."""
    out = candidates(q)
    if q.disagg:
        target, base = question_target(q)
        out += disaggregated_candidates(q, target, base)
    return out
