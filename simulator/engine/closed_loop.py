"""A closed-loop client: at most ``max_concurrency`` requests in flight, as
``vllm bench serve --max-concurrency N`` runs (a semaphore around each request: a request is
sent once its arrival time has come and one of the N slots is free; a finished request frees
its slot).  The time a request is sent becomes its arrival (the client measures TTFT and E2E
from there), so a request that waited for a slot does not count that wait as serving.

Replicas learn of nothing outside them before it happens only under open-loop arrivals; here
the next arrival depends on every replica's finishes, so the run goes step by step (no
fast-forward: the same results, by the engine's exactness rule, at the reference's speed).
"""
from __future__ import annotations

import numpy as np
import simpy

from simulator.engine.requests import RequestTable
from simulator.engine.router import Arrivals, _Wake


class ClosedLoopArrivals(Arrivals):
    """Arrivals held to ``max_concurrency`` requests in flight (see the module docstring)."""

    def __init__(self, env: simpy.Environment, table: RequestTable, replicas: list,
                 router: str, admissible: np.ndarray, max_concurrency: int) -> None:
        self.free = int(max_concurrency)
        self.slot = env.event()
        super().__init__(env, table, replicas, router, admissible)

    def finished(self, n: int) -> None:
        """``n`` requests finished (a replica's ``on_finish``): their slots are free."""
        self.free += n
        if not self.slot.triggered:
            self.slot.succeed()

    def horizon(self, index: int) -> float:
        return self.env.now  # never ahead: replicas run step by step

    def run(self):
        """Send each admissible request at its arrival time or when a slot frees, later of
        the two, and route it."""
        env, arrival, ok = self.env, self.table.arrival_s, self.admissible
        rr = 0
        for j in np.flatnonzero(ok).tolist():
            wait = arrival[j] - env.now
            if wait > 0:
                self.next_time = float(arrival[j])
                yield _Wake(env, wait)
            while self.free <= 0:
                self.slot = env.event()
                yield self.slot
            self.free -= 1
            arrival[j] = env.now
            target, rr = self._route(rr)
            target.submit(j)
        self.next_time = float("inf")
