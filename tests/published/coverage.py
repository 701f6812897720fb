"""How often the 90% intervals hold the published numbers: the intervals' calibration on the
published-results check, per case group (``python -m tests.published --coverage N``).

Every numeric case -- a mean acceptance length (``tau``), a speedup (``speedup``), an
absolute throughput or latency (``absolute``); not the orders, signs and best-K cases -- is
predicted ``N`` times, draw ``i`` under ``CaseDraw`` ``i`` of every declared uncertain input
(tests/published/case_draw.py): its drafter's published acceptance spread
(``default_spreads``), the device's cost factor (``COST_SIGMA``, from the sim-to-real runs)
and the speculative path's cost factor.  Its 90% interval is [p5, p95] of the N predictions
(Hyndman & Fan's type 6: ``INTERVAL_METHOD`` of ``simulator/uncertainty/propagate.py``); it
covers the published number where that lies inside (a published range: where the two meet).

The speculative path's sigma is estimated from this check itself, so it is estimated leave
one out: a speedup case's own miss never widens its own interval.  Each speedup case's miss
is read as the factor ``g`` on its speculative path that would make its prediction the
published number (``spec_factors``); its nonconformity score is ``|ln g|``, and sigma is
the split-conformal 90% quantile of the other speedup cases' scores (the
``ceil((n + 1) 0.9)``-th smallest of the n) over 1.6449, so that the factor alone spans
``+-q`` between p5 and p95 (simulator/uncertainty/conformal.py: Lei et al. 2018, JASA,
Sec. 2.2; the acceptance and cost draws add width, so the interval is conservative).  The
shipped default (``SPEC_COST_SIGMA``) is the same quantile over every speedup case.

The two other groups take the model's own error on the check, leave one out too
(tests/published/model_error.py): an absolute case's device cost factor has the sigma of
the other absolute cases of its metric kind (a throughput is the step's inverse, so a
lognormal factor on the step is the same lognormal error on the throughput) in place of
``COST_SIGMA``; a tau case whose drafter states no acceptance spread (its prediction does
not move under the acceptance draw) has its predictions multiplied by a lognormal factor
with the sigma of the other tau cases' errors.  Every sigma is the same conformal reading
(it replaced ``median / 0.6745``, issue 39: a normal scale from the median does not carry
the check's heavy tail), computed from the cases' predictions at run time.  Fewer than 9
other cases: the quantile is unbounded, and so is the case's interval (``unbounded_row``:
p5 0, p95 inf, no draw).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from simulator.uncertainty.propagate import INTERVAL_METHOD
from simulator.uncertainty.conformal import conformal_sigma
from simulator.uncertainty.spec import COST_SIGMA
from tests.published.case_draw import CaseDraw
from tests.published.cases import CASES
from tests.published.harness import drawn
from tests.published.model_error import KINDS, kind_errors, log_error, loo_sigma, metric_kind
from tests.published.tolerances import ABSOLUTE, RANGE, SPEEDUP, TAU, Case

GROUPS = ("tau", "speedup", "absolute")
BAND = (0.80, 0.97)        # issue 39: the 90% intervals' coverage must lie in this band
PROBE_FACTOR = 2.0         # the speculative path's factor of the second run of spec_factors


def group(case: Case) -> str | None:
    """The case's group; None for a case with no number to cover (an order, signs, best K)
    or no declared input to draw (a speedup of two runs without speculation: the device's
    cost factor cancels in the ratio and its speculative factor is undefined, which would
    make the speculative sigma unbounded for every case)."""
    if case.tolerance == SPEEDUP and not case.speculative:
        return None
    return {TAU: "tau", RANGE: "tau", SPEEDUP: "speedup", ABSOLUTE: "absolute"}.get(
        case.tolerance)


def numeric_cases(cases: list[Case] = CASES) -> list[Case]:
    return [c for c in cases if group(c) is not None]


def draws(n: int, seed: int = 0) -> list[np.ndarray]:
    """Draw ``i``'s standard numbers (acceptance z, acceptance u, cost z, speculative z,
    tau model-error z), from child ``i`` of ``SeedSequence(seed)``: the same draws for every
    case and sigma (the fifth drawn last, so the first four are what they were before it)."""
    out = []
    for child in np.random.SeedSequence(seed).spawn(n):
        rng = np.random.default_rng(child)
        out.append(np.array([rng.standard_normal(), rng.uniform(), rng.standard_normal(),
                             rng.standard_normal(), rng.standard_normal()]))
    return out


def predict(case: Case, draw: CaseDraw | None = None) -> float:
    """The case's prediction, under ``draw`` (None: the point estimate)."""
    if draw is None:
        return float(case.predict(case.engine))
    with drawn(draw):
        return float(case.predict(case.engine))


def spec_factors(cases: list[Case]) -> dict[str, float]:
    """Per speedup case, the speculative path's factor ``g`` whose prediction is the
    published number: 1/speedup is linear in g where the baseline does not speculate
    (plain over speculative makespan or TPOT, every step of the speculative run moved by
    the same g), so two runs, g = 1 and g = PROBE_FACTOR, give it exactly; for a ratio of
    two speculative runs (an engine over another) it is the same line's reading, an
    approximation.  ``inf`` where no positive g reaches the published number (its miss is
    not the speculative path's cost)."""
    out = {}
    for case in cases:
        if group(case) != "speedup":
            continue
        s1 = predict(case)
        s2 = predict(case, CaseDraw(spec_cost_factor=PROBE_FACTOR))
        slope = (1 / s2 - 1 / s1) / (PROBE_FACTOR - 1)
        g = 1 + (1 / case.published - 1 / s1) / slope if slope > 0 else float("nan")
        out[case.name] = g if g > 0 else float("inf")
    return out


def spec_sigma(factors: dict[str, float], leave_out: str | None = None) -> float:
    """The conformal 90% quantile of ``|ln g|`` over the speedup cases but ``leave_out``,
    over 1.6449 (``conformal_sigma``; ``inf`` with fewer than 9 of them)."""
    return conformal_sigma(abs(float(np.log(g))) if np.isfinite(g) else np.inf
                           for name, g in factors.items() if name != leave_out)


def has_spread(case: Case) -> bool:
    """Whether the case's prediction moves under its drafter's declared acceptance spread
    (a draw one sd, or the range's top, away): False where its source states none."""
    return predict(case, CaseDraw(acceptance_z=1.0, acceptance_u=1.0)) != predict(case)


@dataclass(frozen=True)
class ModelError:
    """The model's errors on the check (``ln(predicted / published)``), per group."""

    absolute: dict[str, float]   # absolute case -> error
    kinds: dict[str, str]        # absolute case -> metric kind (model_error.metric_kind)
    tau: dict[str, float]        # tau case -> error
    no_spread: frozenset[str]    # the tau cases whose drafter states no spread

    def cost_sigma(self, name: str | None = None, kind: str = "throughput") -> float:
        """The absolute cases' sigma of ``name``'s kind (``kind`` without a name), left
        one out."""
        kind = self.kinds[name] if name is not None else kind
        return loo_sigma(kind_errors(self.absolute, self.kinds)[kind], name)

    def tau_sigma(self, name: str | None = None) -> float:
        return loo_sigma(self.tau, name)


def model_error(chosen: list[Case]) -> ModelError:
    """Every absolute and tau case's point error, and which tau cases state no spread."""
    absolute = {c.name: log_error(c.published, predict(c)) for c in chosen
                if group(c) == "absolute"}
    kinds = {c.name: metric_kind(c) for c in chosen if group(c) == "absolute"}
    taus = [c for c in chosen if group(c) == "tau"]
    return ModelError(absolute, kinds, {c.name: log_error(c.published, predict(c))
                                        for c in taus},
                      frozenset(c.name for c in taus if not has_spread(c)))


@dataclass(frozen=True)
class Covered:
    """One case's interval and whether it holds the published number."""

    case: Case
    group: str
    sigma: float        # the speculative path's sigma its draws used
    miss: float | None  # a speedup's miss read as a speculative factor (spec_factors)
    p5: float
    p50: float
    p95: float
    model_sigma: float | None = None  # the model error's sigma (absolute: the cost factor's)
    unbounded: bool = False  # an unbounded sigma: no draw, the factor's whole range

    @property
    def covered(self) -> bool:
        if self.unbounded and self.miss is not None:
            return bool(np.isfinite(self.miss))  # a positive factor closes the miss, or none
        lo, hi = self.case.published if isinstance(self.case.published, tuple) \
            else (self.case.published, self.case.published)
        return self.p5 <= hi and lo <= self.p95


def interval(case: Case, numbers: list[np.ndarray], sigma: float, miss: float | None = None,
             *, cost_sigma: float = COST_SIGMA, tau_sigma: float | None = None) -> Covered:
    """The case's p5/p50/p95 over the draws ``numbers``: its speculative sigma ``sigma``,
    its device cost factor's ``cost_sigma`` and, for a tau without a spread, the model
    error's ``tau_sigma`` (a lognormal factor on each prediction).  A sigma of the case
    that is unbounded gives ``unbounded_row``."""
    model = tau_sigma if tau_sigma is not None else \
        cost_sigma if group(case) == "absolute" else None
    if not np.isfinite(sigma) or (model is not None and not np.isfinite(model)):
        return unbounded_row(case, sigma, miss, model)
    preds = [predict(case, CaseDraw(acceptance_z=float(z[0]), acceptance_u=float(z[1]),
                                    cost_factor=float(np.exp(cost_sigma * z[2])),
                                    spec_cost_factor=float(np.exp(sigma * z[3]))))
             * (1.0 if tau_sigma is None else float(np.exp(tau_sigma * z[4])))
             for z in numbers]
    p5, p50, p95 = (float(v) for v in np.quantile(preds, (0.05, 0.5, 0.95),
                                                  method=INTERVAL_METHOD))
    return Covered(case, group(case), sigma, miss, p5, p50, p95, model)


def unbounded_row(case: Case, sigma: float, miss: float | None,
                  model: float | None) -> Covered:
    """The interval of an unbounded (conformal) sigma: the lognormal factor's whole range,
    (0, inf), not drawn; p50 the point.  It holds every published number, but a speedup
    whose miss no positive factor closes (``miss`` inf) is not covered."""
    return Covered(case, group(case), sigma, miss, 0.0, predict(case), float("inf"), model,
                   unbounded=True)


def _case_interval(case: Case, numbers: list[np.ndarray], factors: dict[str, float],
                   full: float, err: ModelError) -> Covered:
    """One case's interval, each sigma estimated without it."""
    if case.name in factors:
        return interval(case, numbers, spec_sigma(factors, case.name), factors[case.name])
    if case.name in err.absolute:
        return interval(case, numbers, full, cost_sigma=err.cost_sigma(case.name))
    if case.name in err.no_spread:
        return interval(case, numbers, full, tau_sigma=err.tau_sigma(case.name))
    return interval(case, numbers, full)


def coverage(n: int, cases: list[Case] = CASES,
             seed: int = 0) -> tuple[list[Covered], float, ModelError]:
    """Every numeric case's interval over ``n`` draws, every sigma estimated from the check
    left one out; the shipped speculative sigma (every speedup case) and the model's
    errors (``ModelError``: its sigmas over every case)."""
    chosen = numeric_cases(cases)
    factors = spec_factors(chosen)
    err = model_error(chosen)
    numbers = draws(n, seed)
    full = spec_sigma(factors)
    return [_case_interval(c, numbers, factors, full, err) for c in chosen], full, err


def by_group(rows: list[Covered]) -> dict[str, tuple[int, int]]:
    """Group -> (covered, cases)."""
    return {g: (sum(r.covered for r in rows if r.group == g),
                sum(r.group == g for r in rows)) for g in GROUPS}


def _print_rows(rows: list[Covered], err: ModelError) -> None:
    print(f"{'case':44s} {'group':8s} {'published':>11s} {'p5':>8s} {'p50':>8s} "
          f"{'p95':>8s} {'spec sigma':>10s} {'miss g':>7s} {'ln err':>7s} {'model sigma':>11s}"
          "  covered")
    errors = {**err.absolute, **err.tau}
    for r in rows:
        pub = r.case.published
        text = "-".join(f"{v:.2f}" for v in pub) if isinstance(pub, tuple) else f"{pub:.2f}"
        e = errors.get(r.case.name)
        print(f"{r.case.name:44s} {r.group:8s} {text:>11s} {r.p5:8.2f} {r.p50:8.2f} "
              f"{r.p95:8.2f} {r.sigma:10.4f} {'' if r.miss is None else f'{r.miss:.2f}':>7s} "
              f"{'' if e is None else f'{e:+.3f}':>7s} "
              f"{'' if r.model_sigma is None else f'{r.model_sigma:.4f}':>11s}  "
              f"{'yes' if r.covered else 'no'}")


def print_coverage(n: int) -> int:
    """The table and the per-group coverage; exit status 1 where a group leaves BAND."""
    start = time.perf_counter()
    rows, full, err = coverage(n)
    _print_rows(rows, err)
    outside = 0
    for g, (k, m) in by_group(rows).items():
        frac = k / m if m else float("nan")
        inside = BAND[0] <= frac <= BAND[1]
        outside += int(not inside)
        print(f"{g}: {k}/{m} ({frac:.0%}) inside the 90% intervals"
              + ("" if inside else f", outside [{BAND[0]:.0%}, {BAND[1]:.0%}]"))
    print("every sigma: the conformal 90% quantile of the scores / 1.6449 (inf: unbounded, "
          "fewer than 9 cases)")
    print(f"speculative-path sigma over every speedup case (the shipped default): {full:.4f}")
    counts = {k: sum(v == k for v in err.kinds.values()) for k in KINDS}
    for kind in KINDS:
        print(f"model error, absolute {kind} ({counts[kind]} cases): sigma "
              f"{err.cost_sigma(kind=kind):.4f} over every case (uncertainty.model_error: "
              "published)" if counts[kind] else f"model error, absolute {kind}: no case")
    print(f"model error, tau ({len(err.tau)} cases): sigma {err.tau_sigma():.4f} over every "
          f"case; drawn for the cases without a spread: {', '.join(sorted(err.no_spread))}")
    print(f"{n} draws, {time.perf_counter() - start:.1f} s")
    return 1 if outside else 0
