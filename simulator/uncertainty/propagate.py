"""Monte Carlo over the declared input uncertainty: N draws per policy, p5/p50/p95 of each
summary metric, and the share of its variance each source explains.

The shares come from the same N joint draws, no further simulation: a linear regression of
each metric on the draws' scalar inputs (the acceptance shift, the log of the cost factor).
The sources are drawn independently, so a scalar source's first-order part of the variance
is its coefficient squared times its input's variance (a standardised regression
coefficient squared: Saltelli et al., Global Sensitivity Analysis: The Primer, 2008, sec.
1.2.3); the workload's part is what those linear terms leave (with any non-linear remainder
of the others, which ``nonlinear`` reports where the workload does not vary).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.inputs.errors import SpecsimError
from simulator.scenario import Scenario
from simulator.uncertainty.draws import Draw, draw_inputs, draw_scenario, restrict

METRICS = ("p50_ttft_s", "p99_ttft_s", "p50_tpot_s", "p99_tpot_s", "output_tokens_per_s",
           "goodput_requests_per_s")
QUANTILES = ((5, 0.05), (50, 0.5), (95, 0.95))
# How every interval of a continuous metric is read from N draws: Hyndman & Fan, "Sample
# quantiles in statistical packages", The American Statistician 50(4), 1996, type 6
# (position h = (N + 1) p, "p(k) = E[F(x[k])]"). For a continuous distribution
# E[F(X_(k))] = k / (N + 1), so [x_(0.05(N+1)), x_(0.95(N+1))] holds a fresh value 90% of
# the time on average once N >= 19 (20 draws: (19.95 - 1.05) / 21). numpy's default, type 7
# (h = (N - 1) p + 1), under-covers by construction: 74% at N = 10, 81% at N = 20. Below
# N = 19 type 6 clips to the draws' range, expected coverage (N - 1) / (N + 1), the most any
# interval between draws has. At p = 0.5 types 6 and 7 agree: the median is unchanged.
INTERVAL_METHOD = "weibull"


@dataclass(frozen=True)
class DrawTask:
    """One policy's scenario under one draw (picklable: executors ship it to workers)."""

    scenario: Scenario
    draw: Draw


def run_draw(task: DrawTask) -> tuple[float, ...]:
    """The summary metrics of one draw."""
    from simulator.simulate import simulate
    summary = simulate(draw_scenario(task.scenario, task.draw)).summary()
    return tuple(float(summary[m]) for m in METRICS)


def varied_sources(scenario: Scenario) -> tuple[str, ...]:
    """The declared sources that vary: acceptance only where the block gives a spread,
    spec_cost only where the policy speculates (without a speculative path it moves
    nothing) and its sigma is not zero."""
    unc = scenario.uncertainty
    acc = unc.acceptance is not None and not unc.acceptance.zero
    spec = scenario.policy.name != "none" and unc.spec_cost_sigma > 0.0
    return tuple(s for s in unc.sources
                 if (s != "acceptance" or acc) and (s != "spec_cost" or spec))


def propagate(scenarios: list[Scenario], draws: int, executor, progress=None) -> list[dict]:
    """One row per policy scenario: for each metric its p5/p50/p95 over ``draws`` joint
    draws and, where more than one source varies, each source's variance share."""
    from simulator.planning.executors import Failure, run_items
    from simulator.uncertainty.published_spread import with_published_spread

    scenarios = [with_published_spread(sc) for sc in scenarios]  # acceptance: default
    inputs: list[list[Draw]] = []
    tasks: list[DrawTask] = []
    for sc in scenarios:
        varied = varied_sources(sc)
        mine = [restrict(d, varied) for d in draw_inputs(sc.seed, draws, sc.uncertainty)]
        inputs.append(mine)
        tasks.extend(DrawTask(sc, d) for d in mine)
    values = run_items(run_draw, tasks, executor, progress=progress)
    failed = [v for v in values if isinstance(v, Failure)]
    if failed:
        raise SpecsimError(f"a draw failed: {failed[0].error}", field="uncertainty",
                           fix="narrow the declared spreads, or run the draw's scenario "
                               "alone to see why")
    table = np.asarray(values, dtype=float).reshape(len(scenarios), draws, len(METRICS))
    return [{**{key: v for key, v in intervals(table[k]).items() if not key.endswith("_var")},
             **shares(table[k], inputs[k], varied_sources(sc))}
            for k, sc in enumerate(scenarios)]


def intervals(values: np.ndarray) -> dict:
    """p5/p50/p95 (``INTERVAL_METHOD``) and the variance of each metric over the draws
    (rows)."""
    out = {}
    for i, m in enumerate(METRICS):
        col = values[:, i]
        ok = col[~np.isnan(col)]
        for name, q in QUANTILES:
            out[f"{m}_p{name}"] = float(np.quantile(ok, q, method=INTERVAL_METHOD)) \
                if ok.size else float("nan")
        out[f"{m}_var"] = float(np.var(ok)) if ok.size else float("nan")
    return out


def shares(values: np.ndarray, draws: list[Draw], varied: tuple[str, ...],
           metrics: tuple[str, ...] = METRICS) -> dict:
    """Per metric (``metrics``: the columns of ``values``): each varying source's share of
    the variance over the draws (rows of ``values``), the widest source and, without a
    varying workload, the ``nonlinear`` part the linear terms leave (the module docstring)."""
    x = {"acceptance": np.array([d.acceptance_shift for d in draws]),
         "cost": np.log([d.cost_factor for d in draws]),
         "spec_cost": np.log([d.spec_cost_factor for d in draws])}
    scalars = [s for s in varied if s in x]
    out: dict = {}
    if len(varied) >= 2 and len(draws) < len(scalars) + 2:  # too few draws to fit a line
        return {f"{m}_widest": "none" for m in metrics}
    for i, m in enumerate(metrics):
        y = values[:, i]
        if len(varied) < 2 or np.isnan(y).any():
            out[f"{m}_widest"] = varied[0] if len(varied) == 1 and np.var(y) > 0 else "none"
            continue
        parts = _parts(y, [x[s] for s in scalars])
        explained, residual = parts
        named = dict(zip(scalars, explained))
        if "workload" in varied:
            named["workload"] = residual
        else:
            out[f"{m}_nonlinear"] = residual / float(np.var(y)) if np.var(y) > 0 else 0.0
        total = sum(named.values())
        for s in varied:
            out[f"{m}_share_{s}"] = named[s] / total if total > 0 else float("nan")
        out[f"{m}_widest"] = max(named, key=named.get) if total > 0 else "none"
    return out


def _parts(y: np.ndarray, xs: list[np.ndarray]) -> tuple[list[float], float]:
    """(beta_s^2 var(x_s) per input, the variance left) of the least-squares fit of ``y``
    on the inputs with an intercept."""
    design = np.column_stack([np.ones(y.size)] + [x - x.mean() for x in xs])
    beta, *_ = np.linalg.lstsq(design, y, rcond=None)
    explained = [float(b * b * np.var(x)) for b, x in zip(beta[1:], xs)]
    return explained, max(float(np.var(y - design @ beta)), 0.0)
