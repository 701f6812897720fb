"""``specsim tokenize INPUT -o OUT.jsonl --tokenizer NAME``: prompts and completions as text
in, a token-id trace (workloads/token_trace.py) out, for the model-free speculation methods.

INPUT is a JSONL file of ``{"prompt": "...", "output": "..."}`` records (optionally
``"arrival_s"`` and ``"task"``; other keys, as a serving log has them, are ignored), or a
folder of ``NAME.prompt.txt`` / ``NAME.output.txt`` pairs taken in name order.  Arrivals
are the records' ``arrival_s`` when every record has one, else Poisson at ``--rate`` from
``numpy.random.default_rng(--seed)``.  The output is written atomically and, like every
specsim output, replaces an existing file only when specsim wrote it or with
``--overwrite``.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Iterator

from simulator.cli.args import bounded_int, positive_float
from simulator.inputs import json_text
from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import short

FIELD = "INPUT"
DEFAULT_RATE_PER_S = 1.0
MAX_TEXT_CHARS = 2**30  # characters of one prompt or output file read (1 Gi)


def add_arguments(name: str, p: argparse.ArgumentParser) -> None:
    """Arguments of ``tokenize``."""
    p.add_argument("input", metavar="INPUT",
                   help='a JSONL file of {"prompt": ..., "output": ...} records, or a folder '
                        "of NAME.prompt.txt / NAME.output.txt pairs")
    p.add_argument("-o", "--out", required=True, metavar="OUT.jsonl",
                   help="the token-id trace to write")
    p.add_argument("--tokenizer", required=True, metavar="NAME",
                   help="words (built-in stand-in: counts differ from a real BPE), "
                        "hf:<name-or-path> (needs transformers) or tiktoken:<encoding>")
    p.add_argument("--rate", type=positive_float, default=None, metavar="R",
                   help="Poisson arrivals at R requests/s when the records carry no "
                        f"arrival_s (default {DEFAULT_RATE_PER_S:g})")
    p.add_argument("--seed", type=bounded_int(2**63 - 1, minimum=0), default=0,
                   help="seed of the Poisson arrivals (default 0)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing OUT that specsim did not write")


def _text(value, where: str, key: str, source: str) -> str:
    if not isinstance(value, str):
        raise SpecsimError(f"{where}: {key} is {short(value)}, not a string", source=source,
                           field=key, fix='each line: {"prompt": "...", "output": "..."}')
    return value


def _jsonl_records(path: Path, arrivals: list, tasks: list) -> Iterator[tuple[str, str, str]]:
    """``(where, prompt, output)`` per line; ``arrival_s`` and ``task`` go to the lists."""
    source = str(path)
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"line {number}"
            try:
                record = json_text.loads(line, source=source, where=f"{where}: ")
            except json.JSONDecodeError as exc:
                raise SpecsimError(f"{where} is not valid JSON ({exc.msg})", source=source,
                                   fix="one JSON object per line") from None
            if not isinstance(record, dict):
                raise SpecsimError(f"{where} is not a JSON object", source=source,
                                   fix="one JSON object per line")
            for key in ("prompt", "output"):
                if key not in record:
                    raise SpecsimError(f"{where}: {key} is missing", source=source, field=key,
                                       fix='each line: {"prompt": "...", "output": "..."}')
            arrivals.append(_arrival(record.get("arrival_s"), where, source))
            task = record.get("task")
            if task is not None and (not isinstance(task, str) or not task.strip()):
                raise SpecsimError(f"{where}: task is {short(task)}, not a non-empty label",
                                   source=source, field="task", fix="fix or drop the task key")
            tasks.append(task)
            yield (where, _text(record["prompt"], where, "prompt", source),
                   _text(record["output"], where, "output", source))


def _arrival(value, where: str, source: str) -> float | None:
    if value is None:
        return None
    if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
        raise SpecsimError(f"{where}: arrival_s is {short(value)}, not a number of seconds "
                           ">= 0", source=source, field="arrival_s", fix="fix or drop it")
    return float(value)


def _read_text(path: Path) -> str:
    if path.stat().st_size > MAX_TEXT_CHARS:
        raise SpecsimError(f"{path.name} is larger than 1 GiB", source=str(path.parent),
                           field=FIELD, fix="split it, or drop that request")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SpecsimError(f"{path.name} is not UTF-8 text", source=str(path.parent),
                           field=FIELD, fix="save it as UTF-8") from None


def folder_pairs(folder: Path) -> list[tuple[str, Path, Path]]:
    """``(name, prompt file, output file)`` for every NAME.prompt.txt / NAME.output.txt pair."""
    files = {p.name: p for p in folder.iterdir() if p.is_file()}
    names = sorted({n[:-len(s)] for n in files for s in (".prompt.txt", ".output.txt")
                    if n.endswith(s)})
    if not names:
        raise SpecsimError("the folder holds no NAME.prompt.txt / NAME.output.txt files",
                           source=str(folder), field=FIELD,
                           fix="one NAME.prompt.txt and one NAME.output.txt per request")
    for name in names:
        for have, want in ((".prompt.txt", ".output.txt"), (".output.txt", ".prompt.txt")):
            if name + have in files and name + want not in files:
                raise SpecsimError(f"{name}{have} has no {name}{want}", source=str(folder),
                                   field=FIELD, fix=f"add {name}{want}, or remove {name}{have}")
    return [(name, files[name + ".prompt.txt"], files[name + ".output.txt"]) for name in names]


def _folder_records(folder: Path) -> Iterator[tuple[str, str, str]]:
    for name, prompt, output in folder_pairs(folder):
        yield name, _read_text(prompt), _read_text(output)


def _arrival_times(given: list, rate: float | None, seed: int, n: int, source: str):
    """The records' arrival times, or Poisson ones; and a phrase saying which."""
    import numpy as np

    from workloads.arrivals import PoissonArrivals

    have = [a is not None for a in given]
    if n and all(have) and len(given) == n:
        if rate is not None:
            raise SpecsimError("the records carry arrival_s, and --rate would replace them",
                               field="--rate", fix="drop --rate, or drop arrival_s")
        times = np.asarray(given, np.float64)
        back = np.flatnonzero(np.diff(times) < 0)
        if back.size:
            raise SpecsimError(f"record {int(back[0]) + 2} arrives before the one above it",
                               source=source, field="arrival_s",
                               fix="sort the records by arrival_s")
        return times, "arrival_s of the records"
    if any(have):
        first = have.index(False) if have[0] else have.index(True)
        raise SpecsimError(f"arrival_s given on some records only (record {first + 1})",
                           source=source, field="arrival_s", fix="give it on every record or "
                                                                 "on none")
    rate = DEFAULT_RATE_PER_S if rate is None else rate
    rng = np.random.default_rng(seed)
    return PoissonArrivals(rate).sample(n, rng), f"Poisson at {rate:g}/s, seed {seed}"


def build_workload(input_path: Path, tokenizer, rate: float | None, seed: int):
    """The token workload of INPUT (a JSONL file or a folder) and a phrase on its arrivals."""
    from workloads.tokenizers import tokenize_pairs
    from workloads.workload import Workload

    arrivals: list = []
    tasks: list = []
    if input_path.is_dir():
        records = _folder_records(input_path)
    elif input_path.is_file():
        records = _jsonl_records(input_path, arrivals, tasks)
    else:
        raise SpecsimError(f"{short(str(input_path))} is not a file or a folder", field=FIELD,
                           fix="give a JSONL file or a folder of .prompt.txt/.output.txt pairs")
    try:
        prompts, outputs = tokenize_pairs(records, tokenizer, source=str(input_path))
    except UnicodeDecodeError:
        raise SpecsimError("the file is not UTF-8 text", source=str(input_path), field=FIELD,
                           fix="save it as UTF-8") from None
    times, how = _arrival_times(arrivals, rate, seed, len(prompts), str(input_path))
    labelled = [t is not None for t in tasks]
    if any(labelled) and not all(labelled):
        raise SpecsimError("task given on some records only", source=str(input_path),
                           field="task", fix="label every record or none")
    wl = Workload(name=input_path.stem or "tokenized", arrival_s=times,
                  prompt_tokens=[p.size for p in prompts],
                  output_tokens=[o.size for o in outputs],
                  task=tasks if tasks and all(labelled) else None,
                  prompt_ids=tuple(prompts), output_ids=tuple(outputs))
    return wl, how


def _input_files(input_path: Path) -> list[Path]:
    """The files ``tokenize`` reads: INPUT itself, or a folder's pairs."""
    if input_path.is_dir():
        return [input_path] + [p for _, *pair in folder_pairs(input_path) for p in pair]
    return [input_path]


def main(args: argparse.Namespace) -> int:
    """Check OUT, tokenize INPUT, write the trace atomically, and say what it holds."""
    from simulator.input_clash import check_outputs_not_inputs
    from simulator.output_paths import OutputLock, check_file_target, write_file_atomic
    from workloads.token_trace import TOKEN_TRACE_MARK, write_token_trace
    from workloads.tokenizers import load_tokenizer

    def check():
        return check_file_target(args.out, "--out", marks=(TOKEN_TRACE_MARK,),
                                 overwrite=args.overwrite, what="token trace")

    input_path = Path(args.input).expanduser()
    check_outputs_not_inputs([("--out", args.out)], _input_files(input_path))
    out = check()  # before any work: a refused path costs nothing
    tokenizer = load_tokenizer(args.tokenizer)
    workload, how = build_workload(input_path, tokenizer, args.rate, args.seed)

    def write(tmp: Path) -> None:
        with tmp.open("w", encoding="utf-8", newline="\n") as handle:
            write_token_trace(workload, handle, tokenizer=tokenizer.name,
                              source=input_path.name)

    with OutputLock(out, "--out"):
        check()
        write_file_atomic(out, write, "--out")
    print(f"wrote {out}: {len(workload):,} requests, {int(workload.prompt_tokens.sum()):,} "
          f"prompt + {int(workload.output_tokens.sum()):,} output tokens ({tokenizer.name}; "
          f"arrivals: {how})")
    if tokenizer.name == "words":
        print("note: 'words' is a stand-in tokenizer (words, spaces and punctuation); its "
              "token counts differ from a real BPE's, so times per token are indicative")
    return 0
