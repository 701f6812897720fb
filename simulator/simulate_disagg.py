"""``simulate`` of a disaggregated scenario: a prefill pool and a decode pool (xPyD) joined by
a KV link (simulator/engine/disagg.py; docs/scenarios.md states the semantics).

Each pool is the scenario with the pool's parallelism and replicas: its own cost model, its
own memory plan (KV blocks) and its own policy per replica, on the scenario's hardware.
Requests arrive at the prefill pool through the scenario's router, and their KV goes to the
decode pool through the same router rule.  Replica indices: the prefill pool's first
(0 .. P-1), then the decode pool's (P .. P+D-1); a request's ``replica`` is the decode
replica that finished it.  Decode replicas draw from the streams an aggregated run of the
decode pool would (``replica_streams``); prefill replicas never draw (nothing decodes there).
Under a closed-loop client (the workload's ``max_concurrency``) a request's slot frees when
it finishes, on its decode replica (or on its prefill replica when its only output token is
the prefill's); the replicas run step by step either way (engine/disagg.py).
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import simpy

from simulator.deployment import admissible, rank_chunk_tokens
from simulator.engine.disagg import DecodeReplica, KvLink, PrefillReplica
from simulator.engine.prefix_cache import PrefixCache
from simulator.engine.recorder import Recorder
from simulator.engine.requests import EngineLimits
from simulator.engine.closed_loop import ClosedLoopArrivals
from simulator.engine.router import Arrivals
from simulator.results import Results
from simulator.scenario import Scenario


def _limits(scenario: Scenario, kv_blocks: int) -> EngineLimits:
    b = scenario.batching
    return EngineLimits(max_num_seqs=b.max_num_seqs,
                        max_num_batched_tokens=b.max_num_batched_tokens,
                        enable_chunked_prefill=b.enable_chunked_prefill,
                        block_size=b.block_size, kv_blocks=kv_blocks,
                        max_chunk_tokens=rank_chunk_tokens(scenario))


def kv_link_bytes_per_token(scenario: Scenario, dep) -> float:
    """KV bytes one context token sends: the target's (``ModelSpec.kv_bytes_per_token``:
    every layer, K and V of every KV head, or MLA's latent once) plus the draft's KV models'
    (an MTP module's, an EAGLE layer's, a draft model's) when ``draft_kv: transferred``."""
    draft = sum(m.kv_bytes_per_token() for m in dep.kv_models)
    return dep.target.kv_bytes_per_token() + \
        (draft if scenario.disaggregation.draft_kv == "transferred" else 0.0)


def simulate_disaggregated(scenario: Scenario, *, workload=None, target_cost=None,
                           draft_cost=None, progress: Callable[[int, int], None] | None = None,
                           record_events: bool = False) -> Results:
    """Run a disaggregated scenario (see the module docstring)."""
    from simulator.run_setup import (cache_keys, engine_stats, finish_counter,
                                    pool_scenarios, prefix_cache_stats, prepare_pool,
                                    replica_streams, servable)
    pre_s, dec_s = pool_scenarios(scenario)
    costs = {"target_cost": target_cost, "draft_cost": draft_cost}
    pre = prepare_pool(pre_s, "prefill", workload=workload, **costs)
    dec = prepare_pool(dec_s, "decode", workload=pre.workload, **costs)
    table, ok = servable(dec_s, dec)
    ok &= admissible(table, pre_s, pre.deployment)
    env = simpy.Environment()
    n_pre, n_dec = len(pre.policies), len(dec.policies)
    recorder = Recorder(record_events, steps_table=scenario.engine.steps_table,
                        num_requests=int(table.arrival_s.size), replicas=n_pre + n_dec)
    on_finish = None if progress is None else finish_counter(progress, table.arrival_s.size,
                                                               int(np.count_nonzero(~ok)))
    d, target = scenario.disaggregation, dec.deployment.target
    prefillers: list[PrefillReplica] = []
    decoders: list[DecodeReplica] = []
    cap = pre.workload.max_concurrency
    client = None if cap is None else ClosedLoopArrivals(env, table, prefillers,
                                                         scenario.router, ok, cap)
    on_finish = _freeing(client, on_finish)
    link = KvLink(env, table, decoders, scenario.router,
                  bytes_per_token=kv_link_bytes_per_token(scenario, dec.deployment),
                  bandwidth_bytes_per_s=d.link.bandwidth_bytes_per_s,
                  latency_s=d.link.latency_s, layers=target.num_layers,
                  layerwise=d.transfer == "layerwise")
    rebuild = d.draft_kv == "rebuilt"
    pre_lim = _limits(pre_s, pre.deployment.memory.kv_blocks)
    b = scenario.batching
    keys = cache_keys(pre.workload, table, pre_lim, pre.deployment.max_verify_tokens) \
        if b.enable_prefix_caching else None
    prefillers.extend(PrefillReplica(env, i, table, pre_lim, pre.target_cost, pol, rng,
                                     recorder, on_finish, link=link, arrivals=None,
                                     rebuild_draft_kv=rebuild, prefix_cache=PrefixCache(
                                         pre_lim.kv_blocks, b.block_size, keys)
                                     if keys is not None and keys.shared is not None else None)
                      for i, (pol, rng) in enumerate(zip(pre.policies, pre.rng.spawn(n_pre))))
    dec_lim = _limits(dec_s, dec.deployment.memory.kv_blocks)
    decoders.extend(DecodeReplica(env, n_pre + i, table, dec_lim, dec.target_cost, pol, rng,
                                  recorder, on_finish, arrivals=None,
                                  rebuild_draft_kv=rebuild)
                    for i, (pol, rng) in enumerate(zip(dec.policies,
                                                       replica_streams(dec.rng, n_dec))))
    if client is None:  # open loop: started after the replicas, as it always was
        Arrivals(env, table, prefillers, scenario.router, ok)
    env.run()
    results = Results.from_run(scenario, table, recorder, dec.deployment, pre.workload)
    _describe(results, scenario, link, prefillers + decoders, pre, dec)
    results.info["engine"] = engine_stats(scenario, prefillers + decoders)
    results.info["prefix_cache"] = prefix_cache_stats(scenario, pre.workload, prefillers)
    return results


def _freeing(client: ClosedLoopArrivals | None, on_finish):
    """The replicas' ``on_finish``: under a closed-loop client a finish also frees a slot."""
    if client is None:
        return on_finish
    if on_finish is None:
        return client.finished

    def both(n: int) -> None:
        client.finished(n)
        on_finish(n)
    return both


def _describe(results: Results, scenario: Scenario, link: KvLink, replicas, pre, dec) -> None:
    """The per-request transfer columns and the run's disaggregation summary."""
    from simulator.acceptance.provenance import acceptance_provenance
    req = results.requests
    req["prefill_done_s"] = link.prefill_done_s
    req["kv_ready_s"] = link.ready_s
    req["kv_transfer_bytes"] = link.bytes
    d = scenario.disaggregation
    sent = link.bytes > 0
    results.info["replicas"] = len(replicas)
    results.info["disaggregation"] = {
        "prefill_replicas": d.prefill.replicas, "decode_replicas": d.decode.replicas,
        "prefill_devices": d.prefill.parallelism.devices,
        "decode_devices": d.decode.parallelism.devices,
        "prefill_kv_blocks": pre.deployment.memory.kv_blocks,
        "decode_kv_blocks": dec.deployment.memory.kv_blocks,
        "transfer": d.transfer, "draft_kv": d.draft_kv,
        "link_bandwidth_bytes_per_s": d.link.bandwidth_bytes_per_s,
        "link_latency_s": d.link.latency_s, "link_source": d.link.source,
        "kv_bytes_per_token": link.bytes_per_token,
        "kv_bytes_sent": float(link.bytes.sum()),
        "transfer_s_mean": float(np.mean((link.ready_s - link.prefill_done_s)[sent]))
        if sent.any() else 0.0}
    where = acceptance_provenance(scenario)
    results.info["acceptance_source"] = where.line
    results.info["acceptance_warning"] = where.warning
