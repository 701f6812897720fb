"""Write the shipped token-id sample, workloads/data/token_sample.jsonl, deterministically.

Run ``python -m workloads.make_token_sample [--output PATH]``.

Provenance: text this repository owns, tokenized with specsim's built-in ``words``
tokenizer (workloads/tokenizers.py: words, whitespace runs and punctuation, ids by first
appearance) -- a stand-in whose token counts differ from a real BPE's.  Nothing is read
from outside the repository.  Two kinds of request, from the files in ``SOURCES``:

- ``code_edit``: the prompt asks to rename the one or two most used parameters of a
  function and quotes the function's source; the output is that function with the
  parameters renamed (every use, found with ``ast``: a real, deterministic edit), so it
  copies the prompt except at the renamed names.
- ``summary``: the prompt asks for a summary of a docstring of three or more lines and
  quotes it; the output is extractive, the first sentence of each of its first three
  paragraphs, so it copies a few spans of the prompt.

Requests whose prompt and output exceed ``MAX_CONTEXT`` tokens together are left out (the
shipped scenario runs OPT-13B, whose context is 2048).  The order is a permutation and the
arrivals Poisson at ``RATE_PER_S``, both from ``numpy.random.default_rng(SEED)`` in that
order.  The header line records each source's SHA-256, and a test regenerates the file
and compares it byte for byte: when a source file changes, regenerate on purpose.
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import re
import textwrap
from pathlib import Path
from typing import Sequence

import numpy as np

from workloads.arrivals import PoissonArrivals
from workloads.token_trace import write_token_trace
from workloads.tokenizers import WordsTokenizer, tokenize_pairs
from workloads.workload import Workload

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_PATH = ROOT / "workloads" / "data" / "token_sample.jsonl"
# files that rarely change (the verification maths, the YAML helpers, the length laws)
SOURCES = ("simulator/speculation/verification.py", "simulator/speculation/enumeration.py",
           "simulator/speculation/tree_verification.py", "simulator/inputs/yaml_io.py",
           "workloads/lengths.py")
SEED = 20261201
RATE_PER_S = 0.4
MIN_LINES, MAX_LINES = 6, 45  # function sizes taken (lines, decorators included)
MAX_CONTEXT = 2000            # words tokens of prompt + output, under OPT's 2048
SENTENCE = re.compile(r"(.+?[.!?])(?:\s|$)", re.S)


def _parameters(fn: ast.FunctionDef) -> list[str]:
    """Its parameters other than self/cls, most used first (ties: in signature order)."""
    args = [a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
            if a.arg not in ("self", "cls")]
    uses = {name: 0 for name in args}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and node.id in uses:
            uses[node.id] += 1
    return sorted((a for a in args if uses[a]), key=lambda a: (-uses[a], args.index(a)))


def _renamed(lines: list[bytes], fn: ast.FunctionDef, names: dict[str, str]) -> list[bytes]:
    """The function's lines with every ast.Name / ast.arg of ``names`` renamed."""
    spots = [(n.lineno, n.col_offset, n.id) for n in ast.walk(fn)
             if isinstance(n, ast.Name) and n.id in names]
    spots += [(n.lineno, n.col_offset, n.arg) for n in ast.walk(fn)
              if isinstance(n, ast.arg) and n.arg in names]
    out = list(lines)
    for line, col, old in sorted(spots, reverse=True):  # right to left keeps columns valid
        text = out[line - 1]
        assert text[col:col + len(old)] == old.encode(), (line, col, old)
        out[line - 1] = text[:col] + names[old].encode() + text[col + len(old):]
    return out


def code_edits(path: str, source: str) -> list[tuple[str, str, str]]:
    """``(where, prompt, output)``: one rename request per function of a usable size."""
    tree = ast.parse(source)
    lines = source.encode("utf-8").splitlines(keepends=True)
    out = []
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef):
            continue
        first = min([fn.lineno] + [d.lineno for d in fn.decorator_list])
        params = _parameters(fn)
        if not params or not MIN_LINES <= fn.end_lineno - first + 1 <= MAX_LINES:
            continue
        names = {old: f"{old}_value" for old in params[:2]}
        edited = _renamed(lines, fn, names)
        before = textwrap.dedent(b"".join(lines[first - 1:fn.end_lineno]).decode("utf-8"))
        after = textwrap.dedent(b"".join(edited[first - 1:fn.end_lineno]).decode("utf-8"))
        asks = " and ".join(f"`{old}` to `{new}`" for old, new in names.items())
        prompt = (f"In this function from {path}, rename the parameter {asks}, everywhere it "
                  f"is used. Reply with the whole function in a code block.\n\n```python\n"
                  f"{before}```\n")
        out.append((f"{path}:{fn.lineno}", prompt, f"```python\n{after}```\n"))
    return out


def summaries(path: str, source: str) -> list[tuple[str, str, str]]:
    """``(where, prompt, output)``: one extractive summary per docstring of 3+ lines."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)):
            continue
        doc = ast.get_docstring(node)
        if not doc or len(doc.splitlines()) < 3:
            continue
        what = f"`{node.name}`" if hasattr(node, "name") else "the module"
        paragraphs = [p for p in re.split(r"\n\s*\n", doc) if p.strip()][:3]
        picks = []
        for paragraph in paragraphs:
            match = SENTENCE.match(paragraph.strip())
            picks.append(" ".join((match.group(1) if match else paragraph).split()))
        prompt = (f"Summarise the documentation of {what} in {path} in at most three "
                  f"sentences.\n\n{doc}\n")
        out.append((f"{path}:{getattr(node, 'lineno', 1)}", prompt, " ".join(picks) + "\n"))
    return out


def sample_requests(root: Path = ROOT) -> tuple[list, dict[str, str]]:
    """Every request ``(task, where, prompt, output)`` in source order, and the sources' hashes."""
    requests = []
    hashes = {}
    for path in SOURCES:
        data = (root / path).read_bytes()
        hashes[path] = hashlib.sha256(data).hexdigest()
        text = data.decode("utf-8")
        requests += [("code_edit", *r) for r in code_edits(path, text)]
        requests += [("summary", *r) for r in summaries(path, text)]
    return requests, hashes


def token_sample(root: Path = ROOT) -> tuple[Workload, dict[str, str]]:
    """The sample workload (the same every time the sources are the same) and the hashes."""
    requests, hashes = sample_requests(root)
    rng = np.random.default_rng(SEED)
    order = rng.permutation(len(requests))
    shuffled = [requests[i] for i in order]
    prompts, outputs = tokenize_pairs(((w, p, o) for _, w, p, o in shuffled), WordsTokenizer(),
                                      source="token sample")
    keep = [i for i in range(len(shuffled)) if prompts[i].size + outputs[i].size <= MAX_CONTEXT]
    wl = Workload(name="token_sample", arrival_s=PoissonArrivals(RATE_PER_S).sample(len(keep),
                                                                                     rng),
                  prompt_tokens=[prompts[i].size for i in keep],
                  output_tokens=[outputs[i].size for i in keep],
                  task=[shuffled[i][0] for i in keep],
                  prompt_ids=tuple(prompts[i] for i in keep),
                  output_ids=tuple(outputs[i] for i in keep))
    return wl, hashes


def write_token_sample(path: str | Path = SAMPLE_PATH, root: Path = ROOT) -> Path:
    """Write the sample to ``path`` and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    workload, hashes = token_sample(root)
    with path.open("w", encoding="utf-8", newline="\n") as handle:
        write_token_trace(workload, handle, tokenizer="words",
                          source="python -m workloads.make_token_sample", sha256=hashes)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``--output`` and write the sample."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=SAMPLE_PATH,
                        help="where to write the JSONL (default: the shipped file)")
    write_token_sample(parser.parse_args(argv).output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
