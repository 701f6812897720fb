"""The model's own error on the published check, as a lognormal sigma per metric kind,
estimated leave one out (tests/published/coverage.py draws the intervals with it).

Two groups have no declared input spread that could explain their misses:

- an absolute throughput or latency (``tolerances.ABSOLUTE``): the device's cost factor
  from the 21 inference-perf stages (``COST_SIGMA``) is the cost model's error on one H100
  vLLM build (four models at TP 1-4);
  the published absolutes are other builds and other deployments.  Their own errors are
  the cost model's error on that metric kind;
- a mean acceptance length whose drafter's source states no spread: its interval would be
  a point.  The acceptance model's error on the other tau cases is the width its conversion
  of the inputs into a tau has.  (No tau case of the check is such a case today: Medusa's
  and SpecInfer's sources gave their per-task spreads, ``default_spreads``.)

The estimator, chosen and committed before the coverage it gives was read, but after the
earlier one's coverage was seen below the band (docs/uncertainty.md; issue 39 replaced it):
a case's error is ``ln(predicted / published)`` (a published range: 0 inside it, else the
log over the nearer end, as ``Covered`` reads a range), its nonconformity score
``|error|``, and a group's interval half-width the split-conformal 90% quantile of its
other cases' scores, the ``ceil((n + 1) 0.9)``-th smallest of the n
(simulator/uncertainty/conformal.py: Lei et al. 2018, JASA, Sec. 2.2), drawn as the
lognormal sigma ``q / 1.6449``.  Unbounded (``inf``) with fewer than 9 other cases.  It
replaced ``median |error| / 0.6745`` (a normal's scale read from the median), which did not
carry the check's heavy tail: 18 known misses of 25-220% among well-predicted cases, so
every improvement of the latter narrowed the intervals of the former.  Conformal holds 90%
whatever the errors' distribution, for cases exchangeable with the others.  Zero-centred,
not shifted by the mean error, because shifting would move the point estimate the check
reports, which the intervals must contain.
"""
from __future__ import annotations

import numpy as np

from simulator.uncertainty.conformal import conformal_sigma
from tests.published.tolerances import ABSOLUTE, Case

KINDS = ("throughput", "latency")
# the unit a published absolute's source gives it, per metric kind (checked on every case:
# test_coverage.py), so that a new absolute case is sorted by what it measures
UNITS = {"throughput": ("token/s", "tokens/s"), "latency": (" ms", "latency")}


def metric_kind(case: Case) -> str:
    """``throughput`` or ``latency`` for an absolute case, by the unit its source gives."""
    if case.tolerance != ABSOLUTE:
        raise ValueError(f"{case.name}: not an absolute case")
    found = [k for k in KINDS if any(u in case.source for u in UNITS[k])]
    if len(found) != 1:
        raise ValueError(f"{case.name}: its source must name one unit of "
                         f"{', '.join(u for k in KINDS for u in UNITS[k])}")
    return found[0]


def log_error(published, predicted: float) -> float:
    """``ln(predicted / published)``; a published (lo, hi) range: 0 inside, else the log
    over the nearer end."""
    if isinstance(published, tuple):
        lo, hi = published
        return float(np.log(predicted / hi) if predicted > hi else
                     np.log(predicted / lo) if predicted < lo else 0.0)
    return float(np.log(predicted / published))


def loo_sigma(errors: dict[str, float], leave_out: str | None = None) -> float:
    """The conformal 90% quantile of ``|error|`` over the cases but ``leave_out``, over
    1.6449 (``conformal_sigma``; an infinite error counts as one larger than any); ``inf``
    (an unbounded interval) with fewer than 9 of them."""
    return conformal_sigma(abs(e) for name, e in errors.items() if name != leave_out)


def kind_errors(errors: dict[str, float], kinds: dict[str, str]) -> dict[str, dict]:
    """The errors split by metric kind (``kinds``: case -> kind)."""
    return {k: {n: e for n, e in errors.items() if kinds[n] == k} for k in KINDS}
