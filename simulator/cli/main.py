"""The ``specsim`` command line: parse, dispatch, and turn input errors into exit code 2."""
from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys

from simulator.cli.output import WIDTH_HELP
from simulator.inputs.errors import SpecsimError

# subcommand -> module with add_arguments(parser) and main(args) -> int.  Modules are
# imported lazily so that `specsim estimate` never pays for pandas-heavy or torch imports.
COMMANDS = {
    "run": ("simulator.cli.run", "simulate a scenario (default: the built-in one)"),
    "estimate": ("simulator.cli.estimate", "analytic draft/verify/decode times and speedup per gamma"),
    "gamma": ("simulator.cli.estimate", "optimal gamma and speedup curve from alpha and c"),
    "hardware": ("simulator.cli.catalog", "list or show hardware profiles"),
    "models": ("simulator.cli.catalog", "list or show catalogued models; from-hf: one from a config.json"),
    "calibrate": ("simulator.cli.calibrate", "measure a device with torch micro-benchmarks; write a calibrated profile"),
    "validate": ("simulator.cli.calibrate", "compare predicted step times with real torch model steps"),
    "sweep": ("simulator.cli.sweep", "run a grid of analytic or simulated points (resumable)"),
    "gamma-map": ("simulator.cli.gamma_map", "best gamma per batch and context, and the crossover batch"),
    "plan": ("simulator.cli.plan", "max sustainable rate, replicas and cost per deployment"),
    "compare-measured": ("simulator.cli.compare_measured", "replay a 'vllm bench serve --save-result' run; predicted vs measured per metric"),
    "validate-serving": ("simulator.cli.validate_serving", "replay measured serving runs (vLLM request spans); predicted vs measured TTFT, TPOT, E2E"),
    "tokenize": ("simulator.cli.tokenize", "turn prompts and completions (text) into a token-id trace for prompt lookup, suffix, lookahead"),
    "report": ("simulator.cli.report", "write the self-contained HTML report of a results folder"),
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's own errors: one line (usage via --help), exit 2
        from simulator.inputs.yaml_io import clip
        sys.stderr.write(f"specsim: error: {clip(message, 400)} (see '{self.prog} --help')\n")
        raise SystemExit(2)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser with every subcommand; with ``argv``, only the command it names gets its
    arguments (and only its module is imported), so ``specsim --help`` and each command
    start without importing the others' dependencies (pandas, SimPy, torch)."""
    parser = _Parser(prog="specsim", description="LLM serving simulator with speculative "
                     "decoding: latency, throughput, goodput and the best gamma.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True  # no command: one error line, like any other argument error
    named = None if argv is None else next((a for a in argv if not a.startswith("-")), "")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text, epilog=WIDTH_HELP)
        if named is None or name == named:
            importlib.import_module(module).add_arguments(name, p)
        p.set_defaults(_module=module)
    return parser


class Terminated(BaseException):
    """SIGTERM (or SIGHUP) as an exception, so that every ``finally`` and cleanup runs."""


def _raise_terminated(signum, frame) -> None:
    raise Terminated(signum)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script.

    Exit codes: 0 done, 1 some points failed or a check did not pass, 2 bad input (one line
    on stderr), 130 interrupted (Ctrl-C), 128 + N stopped by signal N (143 for SIGTERM).
    Every temporary file is removed on the way out.
    """
    entry = argv is None  # the process's own command line (the console script, -m)
    old = {}
    try:
        for sig in (signal.SIGTERM, signal.SIGHUP):
            old[sig] = signal.signal(sig, _raise_terminated)
    except ValueError:  # not the main thread (main() called from a library): leave them
        old = {}
    try:
        argv = sys.argv[1:] if argv is None else list(argv)
        parser = build_parser(argv)
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # --help (0) or an argument error (2): a code, as below
            return exc.code if isinstance(exc.code, int) else 2
        if not args.command:  # add_subparsers(dest="command"): None where none was named
            parser.print_help()
            return 2
        return int(importlib.import_module(args._module).main(args) or 0)
    except SpecsimError as exc:
        _say("specsim: error: " + " ".join(str(exc).split()))  # always one line
        return 2
    except KeyboardInterrupt:
        _say("specsim: interrupted; nothing was left half-written")
        return 130
    except Terminated as exc:
        signum = int(exc.args[0]) if exc.args else int(signal.SIGTERM)
        _say(f"specsim: stopped by {signal.Signals(signum).name}; nothing was left "
             "half-written")
        return 128 + signum
    except BrokenPipeError:
        _quiet_stdout()
        return 0
    except OSError as exc:  # a full disk, a quota, a file too large: one line, no traceback
        from simulator.inputs.yaml_io import clip
        from simulator.output_paths import describe_os_error
        where = f" {clip(repr(str(exc.filename)), 200)}" if exc.filename else ""
        _say(f"specsim: error: cannot read or write{where}: {describe_os_error(exc)} (fix: "
             "free space or choose another path; nothing was left half-written)")
        return 2
    except MemoryError:
        _say("specsim: error: out of memory (fix: a smaller trace, grid or batch; see "
             "docs/limits.md)")
        return 2
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if entry:
            _ending_process()


def _ending_process() -> None:
    """The command is done and the interpreter is about to end: move every object into the
    collector's permanent generation (``gc.freeze``, Python's documented switch), so that
    the full collections the interpreter runs while it shuts down skip them.  Those passes
    over the objects the imports made (pandas and pyarrow: about 60,000) free nothing that
    the end of the process does not; measured, they were about 0.1 s of every `specsim run`
    process.  Files are closed by then (every output is written in a ``with``)
    and ``weakref.finalize`` cleanups still run (atexit).  Not when ``main`` is called with
    arguments from a program, which goes on: there its objects stay collectable."""
    import gc
    gc.freeze()


def _say(line: str) -> None:
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _quiet_stdout() -> None:
    """After a closed pipe (``specsim ... | head``), keep Python's exit flush from failing."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    raise SystemExit(main())
