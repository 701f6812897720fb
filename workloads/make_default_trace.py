"""Write the shipped default trace, workloads/data/default_trace.csv, deterministically.

Run ``python -m workloads.make_default_trace [--output PATH]``.

Provenance: synthetic, not measured.  200 requests drawn from
``numpy.random.default_rng(SEED)`` in this order: Poisson arrivals at 2 req/s (first
request at 0), then prompt lengths, lognormal with mean 600 and median 400 tokens capped
at 1800, then output lengths, lognormal with mean 150 and median 100 tokens capped at 240
(so prompt + output <= 2040 fits OPT's 2048-token context).  The shapes are loosely those
of a chat service: right-skewed prompts a few times longer than the outputs, as in the
Azure LLM inference conversation trace (Patel et al., Splitwise, ISCA 2024), but smaller
so that the default scenario runs on OPT.  A test regenerates the file and checks that it
is byte-identical to the shipped one; if a numpy release changes the Generator's
streams, that test fails and the file must be regenerated on purpose.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Sequence

import numpy as np

from workloads.arrivals import PoissonArrivals
from workloads.config import synthetic_workload
from workloads.lengths import LognormalLength
from workloads.traces import DEFAULT_TRACE_PATH, write_specsim_csv
from workloads.workload import Workload

SEED = 20240204
NUM_REQUESTS = 200
ARRIVALS = PoissonArrivals(rate_per_s=2.0)
PROMPT = LognormalLength(mean_tokens=600, median_tokens=400, max_tokens=1800)
OUTPUT = LognormalLength(mean_tokens=150, median_tokens=100, max_tokens=240)


def default_workload() -> Workload:
    """Draw the default workload (the same every time)."""
    rng = np.random.default_rng(SEED)
    return synthetic_workload(NUM_REQUESTS, ARRIVALS, PROMPT, OUTPUT, rng, name="default")


def write_default_trace(path: str | Path = DEFAULT_TRACE_PATH) -> Path:
    """Write the default trace to ``path`` and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_specsim_csv(default_workload(), path)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``--output`` and write the trace."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=DEFAULT_TRACE_PATH,
                        help="where to write the CSV (default: the shipped file)")
    write_default_trace(parser.parse_args(argv).output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
