"""Arrivals: release each request at its arrival time and route it to a replica.

``Arrivals.horizon(i)`` is a time before which nothing outside replica ``i`` can touch it,
which is what lets a replica fast-forward (simulator/engine/replica.py): under round-robin
routing the arrival time of the next request it will be given (a request is submitted when
the process wakes at or after its arrival time); under least-outstanding-tokens routing, when
the process wakes next (the router then reads every replica), ``inf`` once the trace is out.
Arrival wake-ups are URGENT events, so at equal times a request
is always routed before any replica's step completes, in either engine mode.
"""
from __future__ import annotations

import numpy as np
import simpy
from simpy.events import URGENT

from simulator.engine.requests import RequestTable


class _Wake(simpy.Event):
    """A timeout with URGENT priority (built as SimPy builds ``Timeout``)."""

    def __init__(self, env: simpy.Environment, delay: float) -> None:
        super().__init__(env)
        self._ok = True
        self._value = None
        env.schedule(self, URGENT, delay)


class Arrivals:
    """The arrival process of a run and the time it wakes next."""

    def __init__(self, env: simpy.Environment, table: RequestTable, replicas: list,
                 router: str, admissible: np.ndarray) -> None:
        self.env = env
        self.table = table
        self.replicas = replicas
        self.router = router
        self.admissible = admissible
        arrival = table.arrival_s
        self.next_time = float(arrival[0]) if arrival.size else float("inf")
        self.upcoming: list[list[float]] | None = None  # per replica, under round robin
        self.given: list[int] = []
        self.process = env.process(self.run())

    def _plan_routes(self) -> None:
        """Under round robin, which requests each replica will be given (known up front:
        the k-th admissible request goes to replica k mod R)."""
        if self.router == "round_robin" or len(self.replicas) == 1:
            count, ok = len(self.replicas), self.admissible
            rank = np.cumsum(ok) - 1
            # Python floats: ``horizon`` reads one at every crossing check
            self.upcoming = [np.append(self.table.arrival_s[ok & (rank % count == i)],
                                       np.inf).tolist() for i in range(count)]
            self.given = [0] * count

    def horizon(self, index: int) -> float:
        """Nothing outside replica ``index`` touches it before this time."""
        if self.upcoming is None:
            return self.next_time
        return self.upcoming[index][self.given[index]]

    def _route(self, rr: int):
        replicas = self.replicas
        if self.router == "round_robin" or len(replicas) == 1:
            return replicas[rr % len(replicas)], rr + 1
        return min(replicas, key=lambda r: (r.outstanding_tokens, r.index)), rr

    def run(self):
        """Release requests at their arrival times and route each to a replica."""
        self._plan_routes()  # the replicas exist once the process runs
        env, arrival, ok = self.env, self.table.arrival_s, self.admissible
        n = arrival.size
        i = rr = 0
        while i < n:
            wait = arrival[i] - env.now
            if wait > 0:
                self.next_time = env.now + wait  # what SimPy's clock will read
                yield _Wake(env, wait)
            j = i
            while j < n and arrival[j] <= env.now:
                if ok[j]:
                    target, rr = self._route(rr)
                    if self.upcoming is not None:
                        self.given[target.index] += 1
                    target.submit(j)
                j += 1
            i = j
        self.next_time = float("inf")
