"""The command line: the only part of ``simulator/`` that parses arguments, draws progress
bars, prints, and imports ``reports/`` or ``calibrate/``.  ``specsim = simulator.cli:main``."""
from simulator.cli.main import main

__all__ = ["main"]
