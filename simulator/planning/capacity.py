"""Capacity planning: the highest request rate each deployment sustains within an SLO.

For each candidate deployment (a set of scenario overrides: hardware, tensor parallelism,
replicas, policy, ...) the engine replays one trace, built once from the scenario's seed and
rescaled with ``Workload.rescale_rate``, at rates on a fixed geometric lattice
``min_rate * (1 + rel_tol)^k``: bracket from an analytic warm start
(``simulator.planning.warm_start``) by steps sized by the SLO violation, then bisect on k.
Same seed, same lattice, same trace shape for every candidate, so (with feasibility
monotone in the rate) a faster or larger deployment can never be reported slower by the
search itself.  An SLO sets any of p99 TTFT, p99 TPOT and a
goodput fraction (the share of all requests meeting the per-request TTFT/TPOT targets); a
rate also needs the backlog to stay small (``max_in_flight_fraction``, see evaluate_rate).
Also: the fewest replicas that sustain a target rate, and the cost per million output tokens
from a user price table (``{device: $/hour}``).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from simulator.inputs.errors import SpecsimError

def simulate(scenario, *, workload=None):
    """``simulator.simulate.simulate``, imported on first use: the CLI's argument parsers
    read this module's limits without loading the engine (SimPy)."""
    from simulator.simulate import simulate as run
    return run(scenario, workload=workload)


def scenario_workload(scenario):
    """``simulator.simulate.scenario_workload``, imported on first use (as ``simulate``)."""
    from simulator.simulate import scenario_workload as build
    return build(scenario)


# rates outside [MIN_RATE_PER_S, MAX_RATE_PER_S] put arrival times beyond what the engine's
# clock resolves, or every request at one instant (docs/limits.md)
MIN_RATE_PER_S, MAX_RATE_PER_S = 1e-6, 1e6


@dataclass(frozen=True)
class CapacitySLO:
    """What "sustained" means; per-request targets feed the goodput fraction."""

    p99_ttft_s: float | None = None
    p99_tpot_s: float | None = None
    goodput_fraction: float | None = None
    ttft_s: float | None = None
    tpot_s: float | None = None

    def __post_init__(self) -> None:
        if self.p99_ttft_s is None and self.p99_tpot_s is None and self.goodput_fraction is None:
            raise SpecsimError("the SLO sets nothing", field="slo",
                               fix="give p99_ttft_ms, p99_tpot_ms or goodput_fraction")
        if self.goodput_fraction is not None and self.ttft_s is None and self.tpot_s is None:
            raise SpecsimError("goodput_fraction needs per-request targets", field="slo",
                               fix="add ttft_ms and/or tpot_ms (or set slo in the scenario)")


@dataclass(frozen=True)
class RateSearch:
    """The rate lattice: min_rate * (1 + rel_tol)^k up to max_rate."""

    min_rate_per_s: float = 0.05
    max_rate_per_s: float = 500.0
    rel_tol: float = 0.05
    # steady-state check: share of the trace still in the system at the last arrival
    max_in_flight_fraction: float = 0.25

    def __post_init__(self) -> None:
        if not 0 < self.min_rate_per_s < self.max_rate_per_s:
            raise SpecsimError(f"need 0 < min_rate_per_s < max_rate_per_s, got "
                               f"{self.min_rate_per_s} and {self.max_rate_per_s}",
                               field="search.min_rate_per_s")
        if not 0.001 <= self.rel_tol <= 1.0:
            raise SpecsimError(f"must be in [0.001, 1], got {self.rel_tol}",
                               field="search.rel_tol")
        if not 0 < self.max_in_flight_fraction <= 1.0:
            raise SpecsimError(f"must be in (0, 1], got {self.max_in_flight_fraction}",
                               field="search.max_in_flight_fraction")

    @property
    def top(self) -> int:
        return int(math.floor(math.log(self.max_rate_per_s / self.min_rate_per_s)
                              / math.log1p(self.rel_tol) + 1e-9))

    def rate(self, k: int) -> float:
        return self.min_rate_per_s * math.exp(k * math.log1p(self.rel_tol))

    def index(self, rate: float) -> int:
        k = round(math.log(rate / self.min_rate_per_s) / math.log1p(self.rel_tol))
        return int(min(max(k, 0), self.top))


def evaluate_rate(scenario, workload, rate_per_s: float, slo: CapacitySLO,
                  max_in_flight_fraction: float = 0.25) -> dict[str, Any]:
    """Simulate at one rate; the SLO metrics, the worst ratio to its target, and feasibility.

    Besides the SLO, a rate counts as sustained only if, when the last request arrives, at
    most ``max_in_flight_fraction`` of the trace is still in the system: an overloaded
    server's backlog grows, and a trace too short for the rate ends as one burst that a
    large batch can absorb without ever reaching the steady state.
    """
    res = simulate(scenario, workload=workload.rescale_rate(rate_per_s))
    req = res.requests
    done = req[req["status"] == "finished"]
    good = np.ones(len(done), bool)
    if slo.ttft_s is not None:
        good &= done["ttft_s"].to_numpy() <= slo.ttft_s
    if slo.tpot_s is not None:
        good &= ~(done["tpot_s"].to_numpy() > slo.tpot_s)  # 1-token outputs have no TPOT
    s = res.summary()
    row = {"rate_per_s": rate_per_s, "p99_ttft_s": s["p99_ttft_s"], "p99_tpot_s": s["p99_tpot_s"],
           "goodput_fraction": float(good.sum()) / len(req), "rejected": s["rejected"],
           "output_tokens_per_s": s["output_tokens_per_s"],
           "acceptance_source": res.info.get("acceptance_source", "")}
    last = float(req["arrival_s"].max())
    row["in_flight_fraction"] = float(np.mean(~(req["finish_s"].to_numpy() <= last)))
    ratios = {"in_flight": row["in_flight_fraction"] / max_in_flight_fraction}
    if slo.p99_ttft_s is not None:
        ratios["p99_ttft"] = row["p99_ttft_s"] / slo.p99_ttft_s
    if slo.p99_tpot_s is not None:
        ratios["p99_tpot"] = row["p99_tpot_s"] / slo.p99_tpot_s
    if slo.goodput_fraction is not None:
        ratios["goodput"] = slo.goodput_fraction / row["goodput_fraction"] \
            if row["goodput_fraction"] > 0 else math.inf
    ratios = {k: r if math.isfinite(r) else math.inf for k, r in ratios.items()}  # NaN p99
    row["violation"] = max(ratios.values())
    row["violated"] = ",".join([k for k, r in ratios.items() if r > 1.0]
                               + (["rejected"] if row["rejected"] else []))
    row["feasible"] = not row["violated"]
    return row


def rate_search_bound(search: RateSearch) -> int:
    """Most simulations ``max_sustainable_rate`` runs: the start, ``ADAPTIVE_STEPS`` steps
    of at least one lattice point, then steps of 1, 2, 4, ... (at most a doubling each) to
    either end of the lattice, then a bisection within the last step with up to
    ``NEAR_PROBES`` probes beside its ends."""
    return 1 + ADAPTIVE_STEPS + len(_offsets(search.top, 1, _doubling(search))) + math.ceil(
        math.log2(_doubling(search))) + NEAR_PROBES


def replica_search_bound(max_replicas: int) -> int:
    """Most simulations ``min_replicas`` runs: 1, the doublings up to ``max_replicas``,
    ``max_replicas`` itself, then a bisection."""
    return 2 + int(math.floor(math.log2(max_replicas))) + math.ceil(math.log2(max_replicas))


def _doubling(search: RateSearch) -> int:
    return max(1, round(math.log(2.0) / math.log1p(search.rel_tol)))  # lattice steps


# bisection probes beside a point within 10% of the limits (``bracket``'s ``near``)
NEAR_PROBES = 2


def near_boundary(violation: float) -> bool:
    """Whether a rate's worst ratio to a limit is within 10% of 1."""
    return math.isfinite(violation) and violation > 0 and \
        abs(math.log(violation)) < math.log(1.1)


# bracketing steps sized by the violation of the point they leave (``step_after``); the
# steps after them double
ADAPTIVE_STEPS = 3


def step_after(violation: float, search: RateSearch) -> int:
    """Lattice steps from a simulated rate to the next one tried: half the distance, in the
    lattice's own steps, of its worst ratio to a limit from 1 (rounded; at least 1, at most
    a doubling).  Near capacity the latencies and the backlog grow faster than the rate,
    so a ratio of v puts the boundary closer than v's own distance; a ratio within 0.9-1.1
    steps by one point.  Without a finite ratio (rejections, no finished request): a
    quarter of a doubling."""
    if not (math.isfinite(violation) and violation > 0):
        return max(1, round(_doubling(search) / 4))
    steps = round(abs(math.log(violation)) / math.log1p(search.rel_tol) / 2.0)
    return min(max(steps, 1), _doubling(search))


def _offsets(span: int, first: int, cap: int) -> list[int]:
    """Cumulative distances of the steps from the start: ``first``, then each step twice
    the last (at most ``cap``), until ``span`` is reached."""
    out, step, at = [], first, 0
    while at < span:
        at = min(at + step, span)
        out.append(at)
        step = min(2 * step, cap)
    return out


def _walk(ok, start: int, span: int, sign: int, cap: int,
          steps: Callable[[int], int] | None) -> tuple[int, int | None]:
    """Step from ``start`` (simulated; its answer ``ok(start)``) in direction ``sign`` for
    at most ``span`` points until the answer changes: (the last point with the start's
    answer, the first without it or None).  The first ``ADAPTIVE_STEPS`` steps are
    ``steps(k)`` of the point k they leave (None: a doubling), each later one twice the
    last, every step at most ``cap``."""
    same, at, step, taken = ok(start), 0, None, 0
    last = start
    while at < span:
        if steps is not None and taken < ADAPTIVE_STEPS:
            step = min(max(steps(last), 1), cap)
        else:
            step = cap if step is None else min(2 * step, cap)
        taken += 1
        at = min(at + step, span)
        k = start + sign * at
        if ok(k) != same:
            return last, k
        last = k
    return last, None


def max_sustainable_rate(scenario, slo: CapacitySLO, search: RateSearch = RateSearch(), *,
                         workload=None, warm_start: bool = True,
                         on_evaluation: Callable[[], None] | None = None,
                         start_rate: float | None = None) -> dict[str, Any]:
    """Largest lattice rate meeting the SLO (bracket, then bisection); NaN when none does.

    The search starts at the lattice point nearest the analytic warm start
    (``warm_start.starting_rate``; no estimate: the trace's own rate) and steps away from
    it by ``step_after`` each point's violation for ``ADAPTIVE_STEPS`` steps, then by
    doubling steps; the bisection tries the neighbours of an end near the limits first.
    ``warm_start=False`` is the search before all that: from the trace's rate, every step
    a doubling.  ``evaluated`` lists every simulated rate;
    ``best_*`` is the least violating of them.  ``on_evaluation()`` is called after each
    simulation (progress); at most ``rate_search_bound(search)`` of them.  ``start_rate``
    (with ``warm_start``) starts there instead (an uncertainty draw: near the point answer).
    """
    workload = workload if workload is not None else scenario_workload(scenario)
    seen: dict[int, dict] = {}

    def ok(k: int) -> bool:
        if k not in seen:
            seen[k] = evaluate_rate(scenario, workload, search.rate(k), slo,
                                    search.max_in_flight_fraction)
            if on_evaluation is not None:
                on_evaluation()
        return seen[k]["feasible"]

    start = search.index(start_rate) if start_rate is not None and warm_start else \
        start_index(scenario, workload, slo, search, warm_start)
    ok(start)
    if warm_start:
        lo, hi = bracket(ok, start, search, lambda k: step_after(seen[k]["violation"], search),
                         lambda k: near_boundary(seen[k]["violation"]))
    else:
        lo, hi = bracket(ok, start, search)
    return _rate_summary(seen, lo, hi, search)


def start_index(scenario, workload, slo: CapacitySLO, search: RateSearch,
                warm_start: bool = True) -> int:
    """The lattice point the search starts at: the analytic warm start's
    (``warm_start.starting_rate``), else the trace's own rate's (the middle of the lattice
    for a trace without one)."""
    rate = workload.mean_rate_per_s
    if warm_start:
        from simulator.planning.warm_start import starting_rate
        estimate = starting_rate(scenario, workload, slo.p99_tpot_s)
        rate = estimate if estimate is not None else rate
    if not math.isfinite(rate):
        return search.top // 2
    return search.index(min(max(rate, search.min_rate_per_s), search.max_rate_per_s))


def bracket(ok, start: int, search: RateSearch, steps: Callable[[int], int] | None = None,
            near: Callable[[int], bool] | None = None) -> tuple[int | None, int | None]:
    """(highest feasible, lowest infeasible) lattice indices: step from ``start`` until the
    answer changes (``_walk``: ``steps(k)`` lattice points after point k for the first
    ``ADAPTIVE_STEPS``, then doubling steps; None: every step a doubling), then bisect;
    None where the lattice ends first.  ``near(k)``: point k (simulated) is within 10% of
    the limits; the bisection then tries its neighbour first, at most ``NEAR_PROBES``
    times.  With feasibility monotone in the rate the answer is the same from any start,
    whatever ``steps`` and ``near`` say."""
    cap = _doubling(search)
    if ok(start):
        lo, hi = _walk(ok, start, search.top - start, 1, cap, steps)
    else:
        hi, lo = _walk(ok, start, start, -1, cap, steps)
    probes = NEAR_PROBES if near is not None else 0
    while lo is not None and hi is not None and hi - lo > 1:
        mid = (lo + hi) // 2
        if probes and (near(hi) or near(lo)):
            probes -= 1
            mid = hi - 1 if near(hi) else lo + 1
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo, hi


def _rate_summary(seen: dict[int, dict], lo: int | None, hi: int | None,
                  search: RateSearch) -> dict[str, Any]:
    """The search's row: the max rate with its metrics, what limits it, and a note."""
    evaluations = [seen[k] for k in sorted(seen)]
    best = min(evaluations, key=lambda r: (not r["feasible"], r["violation"], -r["rate_per_s"]))
    out = {"feasible": lo is not None, "evaluations": len(evaluations),
           "max_rate_per_s": search.rate(lo) if lo is not None else float("nan"),
           "limited_by": seen[hi]["violated"] if hi is not None else "max_rate_per_s"}
    if lo is not None:
        out.update({k: seen[lo][k] for k in ("p99_ttft_s", "p99_tpot_s", "goodput_fraction",
                                             "output_tokens_per_s")})
        out["note"] = ""
        if hi is None:
            out["note"] = "meets the SLO up to max_rate_per_s: raise it"
        elif out["limited_by"] == "in_flight":
            out["note"] = (f"latencies still meet the SLO at {search.rate(hi):.4g}/s, but "
                           f"{seen[hi]['in_flight_fraction']:.0%} of the requests are in flight "
                           "at the last arrival: overloaded, or the trace is too short for "
                           "this rate (more requests would tell)")
    else:
        out.update(p99_ttft_s=float("nan"), p99_tpot_s=float("nan"),
                   goodput_fraction=float("nan"), output_tokens_per_s=float("nan"))
        why = f"{best['rejected']} requests can never be served (their reasons: the run's " \
            "reject_reason; over the context: see the plan's pre-flight line); " \
            if best["rejected"] else ""
        out["note"] = (f"infeasible: no rate in [{search.min_rate_per_s:g}, "
                       f"{search.max_rate_per_s:g}]/s meets the SLO; {why}best point seen: "
                       f"{best['rate_per_s']:.4g}/s with p99 TTFT "
                       f"{best['p99_ttft_s'] * 1e3:.1f} ms, "
                       f"p99 TPOT {best['p99_tpot_s'] * 1e3:.1f} ms, goodput "
                       f"{best['goodput_fraction']:.1%}, {best['in_flight_fraction']:.0%} still "
                       f"in flight at the last arrival ({best['violation']:.2f}x the limits)")
    out.update(best_rate_per_s=best["rate_per_s"], best_violation=best["violation"],
               evaluated=evaluations)
    return out


def min_replicas(scenario, slo: CapacitySLO, rate_per_s: float, *, max_replicas: int = 64,
                 workload=None, max_in_flight_fraction: float = 0.25,
                 on_evaluation: Callable[[], None] | None = None) -> dict[str, Any]:
    """Fewest replicas sustaining ``rate_per_s`` (doubling, then bisection); NaN if none.

    Each count is checked by simulating that many replicas at ``rate_per_s`` (the trace
    rescaled to it, split by the scenario's router): ``checked`` is that simulation's row
    (``evaluate_rate``) for the answer, ``below`` the one for a replica fewer (None when
    not simulated: the answer is 1), ``largest`` the most replicas tried when none holds
    (``checked_replicas``: the count of ``checked``, else of ``largest``),
    ``evaluations`` the simulations run (at most ``replica_search_bound(max_replicas)``).
    """
    workload = workload if workload is not None else scenario_workload(scenario)
    seen: dict[int, dict] = {}

    def ok(n: int) -> bool:
        if n not in seen:
            seen[n] = evaluate_rate(dataclasses.replace(scenario, replicas=n), workload,
                                    rate_per_s, slo, max_in_flight_fraction)
            if on_evaluation is not None:
                on_evaluation()
        return seen[n]["feasible"]

    def answer(n: float) -> dict[str, Any]:
        found = n == n
        return {"min_replicas": n, "checked": seen[n] if found else None,
                "checked_replicas": n if found else max(seen),
                "below": seen.get(n - 1) if found else None,
                "largest": None if found else seen[max(seen)], "evaluations": len(seen)}

    if ok(1):
        return answer(1)
    lo, hi = 1, 2
    while hi <= max_replicas and not ok(hi):
        lo, hi = hi, hi * 2
    if hi > max_replicas:
        if lo == max_replicas or not ok(max_replicas):
            return answer(float("nan"))
        hi = max_replicas
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return answer(hi)
