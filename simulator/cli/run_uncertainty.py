"""``run --uncertainty N``: the run's p5/p50/p95 per policy and metric, and which declared
input makes the width (simulator/uncertainty); the summary table gains the columns."""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from simulator.cli.args import MAX_WORKERS, bounded_int
from simulator.cli.progress import Progress
from simulator.uncertainty.spec import MAX_UNCERTAINTY_DRAWS

if TYPE_CHECKING:
    import pandas as pd

    from simulator.scenario import Scenario


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``--uncertainty N`` and ``--workers``."""
    p.add_argument("--uncertainty", type=bounded_int(MAX_UNCERTAINTY_DRAWS), default=None,
                   metavar="N",
                   help="also run N Monte Carlo draws of the scenario's declared input "
                        "uncertainty (acceptance spread, cost-model error, workload "
                        f"re-draws; at most {MAX_UNCERTAINTY_DRAWS:,}) and report p5/p50/p95 "
                        "of each metric (docs/uncertainty.md); default: the scenario's "
                        "uncertainty.draws, else none")
    p.add_argument("--workers", type=bounded_int(MAX_WORKERS), default=None,
                   help=f"processes for the draws (default: every core; at most {MAX_WORKERS})")


def draws_asked(args: argparse.Namespace, scenario: Scenario, policies: list) -> int:
    """The number of draws (0: none), checked with the policies' spreads and --workers
    before any work."""
    draws = scenario.uncertainty.draws if args.uncertainty is None else args.uncertainty
    if draws:  # the executors (multiprocessing) and the draws load only when asked for
        from simulator.planning.executors import check_executor_args
        from simulator.uncertainty.draws import check_acceptance
        check_executor_args("local", workers=args.workers)
        for pol in policies:  # a --compare entry's own acceptance must take the spread
            check_acceptance(scenario.with_policy(pol))
    return draws


def interval_columns(scenarios: list[Scenario], draws: int, args: argparse.Namespace,
                     progress: bool) -> pd.DataFrame:
    """One row per policy: the interval and variance-share columns."""
    import pandas as pd

    from simulator.planning.executors import make_executor
    from simulator.uncertainty.propagate import propagate
    name = "serial" if args.workers == 1 else "local"
    with make_executor(name, workers=args.workers) as ex, \
            Progress("uncertainty", unit="draws", enabled=progress) as bar:
        rows = propagate(scenarios, draws, ex, progress=bar.set)
    return pd.DataFrame(rows).assign(uncertainty_draws=draws)  # the report names N


def interval_table(summary: pd.DataFrame) -> pd.DataFrame:
    """The long form printed under the run's table: policy, metric, point, p5/p50/p95,
    the widest source and its share."""
    import pandas as pd

    from simulator.uncertainty.propagate import METRICS
    rows = []
    for _, r in summary.iterrows():
        for m in METRICS:
            scale, unit = (1e3, m[:-2] + "_ms") if m.endswith("_s") and "per_s" not in m \
                else (1.0, m)
            widest = r[f"{m}_widest"]
            share = r.get(f"{m}_share_{widest}", float("nan"))
            rows.append({"policy": r["policy"], "metric": unit, "point": r[m] * scale,
                         "p5": r[f"{m}_p5"] * scale, "p50": r[f"{m}_p50"] * scale,
                         "p95": r[f"{m}_p95"] * scale, "widest_source": widest,
                         "share": share})
    return pd.DataFrame(rows)


def source_lines(scenario: Scenario, draws: int) -> list[str]:
    """Where each width comes from, one line per declared source."""
    from simulator.uncertainty.propagate import varied_sources
    from simulator.uncertainty.published_spread import with_published_spread
    scenario = with_published_spread(scenario)  # acceptance: default (the scenario's policy)
    unc, varied = scenario.uncertainty, varied_sources(scenario)
    lines = [f"uncertainty: {draws} draws per policy; sources varied: "
             f"{', '.join(varied) or 'none (every draw is the point estimate)'}"]
    if "acceptance" in unc.sources:
        a = unc.acceptance
        lines.append("  acceptance: " + ("no spread declared (acceptance.uncertainty)"
                     if a is None else f"shift sd {a.sd:g}" if a.sd is not None
                     else f"shift in [{a.range[0]:g}, {a.range[1]:g}]")
                     + (f"; source: {a.source}" if a is not None else ""))
    if "cost" in unc.sources:
        lines.append(f"  cost: lognormal factor on every step, sigma {unc.cost_sigma:.4f}; "
                     f"source: {unc.cost_source}")
    if "spec_cost" in unc.sources:
        lines.append(f"  spec_cost: lognormal factor on the speculative path (draft forwards, "
                     f"speculative host work), sigma {unc.spec_cost_sigma:.4f}; "
                     f"source: {unc.spec_cost_source}")
    if "workload" in unc.sources:
        lines.append("  workload: trace and engine draws re-drawn, one seed per draw "
                     "spawned from the scenario's seed")
    if len(varied) > 1:
        lines.append("  share: the widest source's part of the variance over the same draws "
                     "(acceptance, cost, spec_cost: their linear terms; workload: what "
                     "those leave)")
    return lines
