"""Arrivals: release each request at its arrival time and route it to a replica."""
from __future__ import annotations

import numpy as np
import simpy

from simulator.engine.replica import Replica
from simulator.engine.requests import RequestTable


def arrivals(env: simpy.Environment, table: RequestTable, replicas: list[Replica], router: str,
             admissible: np.ndarray):
    """Release requests at their arrival times and route each to a replica."""
    arrival = table.arrival_s
    n = arrival.size
    i = 0
    rr = 0
    while i < n:
        wait = arrival[i] - env.now
        if wait > 0:
            yield env.timeout(wait)
        j = i
        while j < n and arrival[j] <= env.now:
            if admissible[j]:
                if router == "round_robin" or len(replicas) == 1:
                    target = replicas[rr % len(replicas)]
                    rr += 1
                else:
                    target = min(replicas, key=lambda r: (r.outstanding_tokens, r.index))
                target.submit(j)
            j += 1
        i = j
