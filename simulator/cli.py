"""The ``specsim`` command line: parse, dispatch, and turn input errors into exit code 2."""
from __future__ import annotations

import argparse
import importlib
import sys

from simulator.errors import SpecsimError

# subcommand -> module with add_arguments(parser) and main(args) -> int.  Modules are
# imported lazily so that `specsim estimate` never pays for pandas-heavy or torch imports.
COMMANDS = {
    "run": ("simulator.cli_run", "simulate a scenario (default: the built-in one)"),
    "estimate": ("simulator.cli_estimate", "analytic draft/verify/decode times and speedup per gamma"),
    "gamma": ("simulator.cli_estimate", "optimal gamma and speedup curve from alpha and c"),
    "hardware": ("simulator.cli_catalog", "list or show hardware profiles"),
    "models": ("simulator.cli_catalog", "list or show catalogued models"),
    "calibrate": ("simulator.cli_calibrate", "measure a device with torch micro-benchmarks; write a calibrated profile"),
    "validate": ("simulator.cli_calibrate", "compare predicted step times with real torch model steps"),
    "sweep": ("simulator.cli_sweep", "run a grid of analytic or simulated points (resumable)"),
    "gamma-map": ("simulator.cli_sweep", "best gamma per batch and context, and the crossover batch"),
    "plan": ("simulator.cli_plan", "max sustainable rate, replicas and cost per deployment"),
    "report": ("simulator.cli_report", "write the self-contained HTML report of a results folder"),
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's own errors: usage + one line, exit 2
        self.print_usage(sys.stderr)
        sys.stderr.write(f"specsim: error: {message}\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    """The full parser with every subcommand."""
    parser = _Parser(prog="specsim", description="LLM serving simulator with speculative "
                     "decoding: latency, throughput, goodput and the best gamma.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        importlib.import_module(module).add_arguments(name, p)
        p.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    try:
        return int(importlib.import_module(args._module).main(args) or 0)
    except SpecsimError as exc:
        sys.stderr.write(f"specsim: error: {exc}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("specsim: interrupted\n")
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
