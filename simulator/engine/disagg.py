"""Prefill/decode disaggregation in the engine: prefill-only and decode-only replicas joined
by a KV link (simulator/simulate_disagg.py builds them; docs/scenarios.md states the
semantics).

- ``PrefillReplica``: an ordinary replica (chunked prefill as aggregated) whose requests leave
  at the end of their prefill, with the token that prefill sampled: their KV blocks are freed
  and their KV is handed to the link.  A request whose only output token is that one
  finishes there.  SGLang's ``--disaggregation-mode prefill`` server and vLLM's
  ``kv_producer`` instance run prefills only, the first token sampled at their end.
- ``KvLink``: prices each request's transfer (latency + bytes / bandwidth, or with layer-wise
  transfer only the last layer's share after the prefill ends) and delivers it to a decode
  replica when it has arrived.
- ``DecodeReplica``: admits delivered requests, already prefilled, FIFO while its sequence
  limit and its own KV blocks allow (no prefill chunk: their KV is there); they decode from
  the next iteration, with speculation as aggregated.  A request preempted there is
  recomputed there (vLLM's recompute preemption), through the ordinary admission.

Nothing outside a replica can tell it in advance when a transfer will land, so disaggregated
replicas run step by step (no fast-forward): identical results with ``engine.fast_forward``
on or off, by construction.
"""
from __future__ import annotations

import numpy as np
import simpy

from simulator.engine.replica import Replica
from simulator.engine.requests import RUNNING, WAITING, RequestTable

_ANY = np.logical_or.reduce


class KvLink:
    """The KV transfers from the prefill pool to the decode pool.

    ``bytes_per_token``: the KV bytes one context token holds over the whole model (all
    layers, every KV head once: MLA's latent once), plus the draft's when it is transferred;
    ``layers``: the target's layers (layer-wise transfer leaves one layer's share after the
    prefill's last forward)."""

    def __init__(self, env: simpy.Environment, table: RequestTable, decoders: list,
                 router: str, *, bytes_per_token: float, bandwidth_bytes_per_s: float,
                 latency_s: float, layers: int, layerwise: bool) -> None:
        self.env, self.t, self.decoders, self.router = env, table, decoders, router
        self.bytes_per_token = float(bytes_per_token)
        self.bandwidth = float(bandwidth_bytes_per_s)
        self.latency = float(latency_s)
        self.layers = int(layers)
        self.layerwise = bool(layerwise)
        n = table.arrival_s.size
        self.bytes = np.zeros(n)  # KV bytes each request sent
        self.prefill_done_s = np.full(n, np.nan)  # its prefill's end (its first token sampled)
        self.ready_s = np.full(n, np.nan)  # its KV complete on the decode side
        self._next = 0  # round robin over the decode replicas

    def transfer_s(self, tokens: int, prefill_s: float) -> float:
        """Seconds from a prefill's end until its KV is on the decode side: ``tokens`` of
        context, the prefill having run ``prefill_s`` seconds since its first chunk began."""
        whole = tokens * self.bytes_per_token / self.bandwidth
        if not self.layerwise:
            return self.latency + whole
        # each layer's KV leaves while the next layer computes: after the last forward only
        # the last layer's share is left, unless the link is slower than the compute
        return self.latency + max(whole / self.layers, whole - prefill_s)

    def send(self, rid: int, tokens: int, now: float) -> None:
        """The prefill of ``rid`` (``tokens`` of KV) ended at ``now``: start its transfer."""
        t = self.t
        delay = self.transfer_s(tokens, now - float(t.first_scheduled_s[rid]))
        self.bytes[rid] = tokens * self.bytes_per_token
        self.prefill_done_s[rid] = now
        done = self.env.timeout(delay)
        done.callbacks.append(lambda _event, rid=rid: self._deliver(rid))

    def _deliver(self, rid: int) -> None:
        self.ready_s[rid] = self.env.now
        ds = self.decoders
        if self.router == "round_robin" or len(ds) == 1:
            target = ds[self._next % len(ds)]
            self._next += 1
        else:
            target = min(ds, key=lambda r: (r.outstanding_tokens, r.index))
        target.receive(rid)


class PrefillReplica(Replica):
    """A replica of the prefill pool (see the module docstring)."""

    link: KvLink
    rebuild_draft_kv: bool  # the draft's KV is rebuilt on the decode side, not built here

    def __init__(self, *args, link: KvLink, rebuild_draft_kv: bool = False, **kwargs) -> None:
        self.link = link
        self.rebuild_draft_kv = bool(rebuild_draft_kv)
        super().__init__(*args, **kwargs)

    def _proposer_prefill_s(self, chunks: np.ndarray, context: np.ndarray) -> float:
        if self.rebuild_draft_kv:
            return 0.0  # no draft KV built here: the decode side builds it
        return super()._proposer_prefill_s(chunks, context)

    def _retire(self, now: float) -> None:
        b = self.b
        hand = ~b.in_prefill & (b.generated < b.output_len)
        if _ANY(hand):
            self._hand_off(np.flatnonzero(hand), now)
        super()._retire(now)  # those whose only output token was the prefill's

    def _hand_off(self, pos: np.ndarray, now: float) -> None:
        """The requests at ``pos`` finished their prefill: free their blocks, send their KV."""
        t, b = self.t, self.b
        rids = b.ids[pos].copy()
        tokens = b.computed[pos].tolist()
        if self.cache is None:
            self.used_blocks -= int(b.blocks[pos].sum())
        else:  # their full prompt blocks stay cached until evicted
            for rid, blocks in zip(rids.tolist(), b.blocks[pos].tolist()):
                self.used_blocks -= self.cache.release(rid, blocks)
        b.blocks[pos] = 0
        b.write_back(t, pos)
        keep = np.ones(b.ids.size, bool)
        keep[pos] = False
        b.keep(keep)
        self.outstanding_tokens -= int((t.output_len[rids] - t.generated[rids]).sum())
        for rid, n in zip(rids.tolist(), tokens):
            self.link.send(rid, n, now)


class DecodeReplica(Replica):
    """A replica of the decode pool (see the module docstring)."""

    rebuild_draft_kv: bool  # the draft prefills each admitted prompt (its KV not sent)
    _rebuild_s: float  # the draft prefills of this iteration's admissions, seconds

    def __init__(self, *args, rebuild_draft_kv: bool = False, **kwargs) -> None:
        self.rebuild_draft_kv = bool(rebuild_draft_kv)
        self._rebuild_s = 0.0
        super().__init__(*args, **kwargs)

    def receive(self, rid: int) -> None:
        """The KV of ``rid`` has arrived: it waits for a sequence slot and KV blocks."""
        t, now = self.t, self.env.now
        t.status[rid] = WAITING
        t.replica[rid] = self.index
        self.waiting.append(rid)
        self.outstanding_tokens += int(t.output_len[rid] - t.generated[rid])
        if self.rec.record_events:
            self.rec.events.append((now, "kv_arrival", rid, 0))
        if not self.wakeup.triggered:
            self.wakeup.succeed()

    def _admit_prefilled(self, now: float) -> None:
        """Admit the prefilled requests at the head of the queue, FIFO, while the sequence
        limit and the KV blocks (their context's) allow.  The client receives a request's
        first token now: the decode instance streams it, the token the prefill sampled
        having come with the KV (SGLang's decode side, ``process_prebuilt_extend``)."""
        t, b, lim = self.t, self.b, self.limits
        while self.waiting and b.ids.size < lim.max_num_seqs:
            rid = self.waiting[0]
            if t.in_prefill[rid]:
                return  # a preempted request: recomputed by the ordinary admission
            need = -(-int(t.computed[rid]) // lim.block_size)
            if self.used_blocks + need > lim.kv_blocks:
                return
            self.waiting.popleft()
            t.first_token_s[rid] = t.last_emit_s[rid] = now
            p = b.add(t, rid)
            b.blocks[p] = need
            self._take_blocks(need)
            t.status[rid] = RUNNING
            if self.rebuild_draft_kv:  # the draft prefills the context in one chunk
                self._rebuild_s += self.policy.prefill_time(
                    np.array([float(t.computed[rid])]), np.zeros(1))

    def _forward(self, *args, **kwargs):
        """The iteration's forward; the draft prefills of its admissions (rebuilding their
        draft KV) come before its drafting, in its draft time."""
        draft_s, *rest = super()._forward(*args, **kwargs)
        if self._rebuild_s:
            draft_s, self._rebuild_s = draft_s + self._rebuild_s, 0.0
        return (draft_s, *rest)

    def _schedule(self, now: float):
        self._admit_prefilled(now)
        return super()._schedule(now)

    def _plain_schedule(self, now: float):
        self._admit_prefilled(now)
        return super()._plain_schedule(now)

    def admission_chunk(self, budget: int, gone=()) -> int:
        if self.waiting and not self.t.in_prefill[self.waiting[0]]:
            return 0  # a prefilled request: admitted by _admit_prefilled
        return super().admission_chunk(budget, gone)
