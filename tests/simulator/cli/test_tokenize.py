"""``specsim tokenize``: text in (JSONL records or a folder of pairs), a token-id trace out;
the ``words`` tokenizer's determinism, the optional tokenizers' clear errors, one-line
input errors with exit code 2, specsim's output-path rules, and no temporary left behind."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from simulator.cli import main
from tests.helpers import REPO
from workloads.arrivals import PoissonArrivals
from workloads.token_trace import read_token_trace
from workloads.tokenizers import WORD_PATTERN, WordsTokenizer, load_tokenizer


def _jsonl(path, *records):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n"
                            for r in records), encoding="utf-8")
    return str(path)


def _leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".specsim-"))


def _one_line_error(capsys, *words):
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("specsim: error: ")
    for word in words:
        assert word in err, err
    return err


# ---------------------------------------------------------------- the words tokenizer
def test_words_splits_words_spaces_and_punctuation():
    text = "def f(x):\n    return x+1  # ok"
    pieces = WORD_PATTERN.findall(text)
    assert "".join(pieces) == text  # nothing is dropped
    assert pieces[:7] == ["def", " ", "f", "(", "x", ")", ":"]
    assert pieces[7:9] == ["\n    ", "return"] and "  " in pieces and "#" in pieces


def test_words_ids_by_first_appearance_and_deterministic():
    a, b = WordsTokenizer(), WordsTokenizer()
    text = "the cat saw the cat."
    assert a.encode(text) == b.encode(text) == [0, 1, 2, 1, 3, 1, 0, 1, 2, 4]
    # the vocabulary carries over within one tokenizer: a repeat reuses its ids
    assert a.encode("cat the") == [2, 1, 0]
    assert load_tokenizer("words").encode(text) == [0, 1, 2, 1, 3, 1, 0, 1, 2, 4]


@pytest.mark.parametrize("spec, package", [("hf:gpt2", "transformers"),
                                           ("tiktoken:cl100k_base", "tiktoken")])
def test_a_missing_optional_tokenizer_names_pip_install(tmp_path, capsys, monkeypatch, spec,
                                                        package):
    monkeypatch.setitem(sys.modules, package, None)  # import raises ImportError
    src = _jsonl(tmp_path / "in.jsonl", {"prompt": "a", "output": "b"})
    assert main(["tokenize", src, "-o", str(tmp_path / "out.jsonl"), "--tokenizer",
                 spec]) == 2
    _one_line_error(capsys, "--tokenizer", f"pip install {package}")
    assert not (tmp_path / "out.jsonl").exists() and not _leftovers(tmp_path)


# ---------------------------------------------------------------- inputs
def test_jsonl_records_with_arrivals_and_tasks(tmp_path, capsys):
    src = _jsonl(tmp_path / "log.jsonl",
                 {"prompt": "fix x = 1", "output": "x = 2", "arrival_s": 0.5, "task": "edit",
                  "model": "ignored"}, "",
                 {"prompt": "say hi", "output": "hi hi", "arrival_s": 1.25, "task": "chat"})
    out = tmp_path / "trace.jsonl"
    assert main(["tokenize", src, "-o", str(out), "--tokenizer", "words"]) == 0
    text = capsys.readouterr().out
    assert "2 requests" in text and "stand-in" in text
    wl = read_token_trace(out)
    assert wl.arrival_s.tolist() == [0.5, 1.25] and wl.task.tolist() == ["edit", "chat"]
    tok = WordsTokenizer()
    want = [tok.encode(t) for t in ("fix x = 1", "x = 2", "say hi", "hi hi")]
    got = [wl.prompt_ids[0], wl.output_ids[0], wl.prompt_ids[1], wl.output_ids[1]]
    assert [g.tolist() for g in got] == want
    header = json.loads(out.read_text().splitlines()[0])
    assert header == {"specsim": "token_ids", "tokenizer": "words", "source": "log.jsonl"}
    assert not _leftovers(tmp_path)


def test_records_without_arrivals_get_seeded_poisson(tmp_path):
    src = _jsonl(tmp_path / "log.jsonl", *({"prompt": f"p {i}", "output": "o"}
                                           for i in range(5)))
    out = tmp_path / "t.jsonl"
    assert main(["tokenize", src, "-o", str(out), "--tokenizer", "words", "--rate", "3",
                 "--seed", "7"]) == 0
    want = PoissonArrivals(3.0).sample(5, np.random.default_rng(7))
    assert read_token_trace(out).arrival_s == pytest.approx(np.round(want, 6), abs=1e-9)


def test_a_folder_of_pairs_in_name_order(tmp_path):
    folder = tmp_path / "pairs"
    folder.mkdir()
    for name, prompt, output in (("b", "second prompt", "2"), ("a", "first prompt", "1")):
        (folder / f"{name}.prompt.txt").write_text(prompt, encoding="utf-8")
        (folder / f"{name}.output.txt").write_text(output, encoding="utf-8")
    (folder / "notes.md").write_text("not a request", encoding="utf-8")
    out = tmp_path / "t.jsonl"
    assert main(["tokenize", str(folder), "-o", str(out), "--tokenizer", "words"]) == 0
    wl = read_token_trace(out)
    tok = WordsTokenizer()
    assert wl.prompt_ids[0].tolist() == tok.encode("first prompt")  # a before b
    assert wl.output_ids[0].tolist() == tok.encode("1")
    assert wl.prompt_ids[1].tolist() == tok.encode("second prompt")


BAD = [
    # (records, words of the one-line error)
    (["{oops"], ("line 1", "not valid JSON")),
    ([{"prompt": "a", "output": "b"}, {"prompt": "a"}], ("line 2", "output", "missing")),
    ([{"prompt": 3, "output": "b"}], ("line 1", "prompt", "not a string")),
    ([{"prompt": "a", "output": ""}], ("line 1", "output", "empty")),
    ([{"prompt": "a", "output": "b", "arrival_s": -2}], ("line 1", "arrival_s")),
    ([{"prompt": "a", "output": "b", "arrival_s": 1}, {"prompt": "a", "output": "b"}],
     ("arrival_s", "some records only")),
    ([{"prompt": "a", "output": "b", "arrival_s": 2}, {"prompt": "a", "output": "b",
                                                       "arrival_s": 1}],
     ("arrival_s", "record 2", "sort")),
    ([{"prompt": "a", "output": "b", "task": ""}], ("line 1", "task")),
    ([], ("no requests",)),
]


@pytest.mark.parametrize("records, words", BAD, ids=[b[1][-1] for b in BAD])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, records, words):
    src = _jsonl(tmp_path / "in.jsonl", *records)
    out = tmp_path / "out.jsonl"
    assert main(["tokenize", src, "-o", str(out), "--tokenizer", "words"]) == 2
    _one_line_error(capsys, *words)
    assert not out.exists() and not _leftovers(tmp_path)


def test_bad_arguments_and_paths(tmp_path, capsys):
    src = _jsonl(tmp_path / "in.jsonl", {"prompt": "a", "output": "b", "arrival_s": 0})
    out = str(tmp_path / "o.jsonl")
    cases = [
        (["--tokenizer", "bpe"], ("--tokenizer", "unknown tokenizer")),
        (["--tokenizer", "words", "--rate", "2"], ("--rate", "arrival_s")),
        (["--tokenizer", "words", "--rate", "-1"], ("--rate",)),
    ]
    for extra, words in cases:
        assert main(["tokenize", src, "-o", out, *extra]) == 2
        _one_line_error(capsys, *words)
    assert main(["tokenize", str(tmp_path / "nothing"), "-o", out, "--tokenizer",
                 "words"]) == 2
    _one_line_error(capsys, "INPUT", "not a file or a folder")
    folder = tmp_path / "pairs"
    folder.mkdir()
    (folder / "x.prompt.txt").write_text("p", encoding="utf-8")
    assert main(["tokenize", str(folder), "-o", out, "--tokenizer", "words"]) == 2
    _one_line_error(capsys, "x.prompt.txt has no x.output.txt")
    assert not (tmp_path / "o.jsonl").exists() and not _leftovers(tmp_path)


# ---------------------------------------------------------------- the output path
def test_output_rules_follow_specsim_writers(tmp_path, capsys):
    src = _jsonl(tmp_path / "in.jsonl", {"prompt": "a b", "output": "b"})
    foreign = tmp_path / "notes.jsonl"
    foreign.write_text("my own file\n", encoding="utf-8")
    argv = ["tokenize", src, "-o", str(foreign), "--tokenizer", "words"]
    assert main(argv) == 2
    _one_line_error(capsys, "not written by specsim", "--overwrite")
    assert foreign.read_text(encoding="utf-8") == "my own file\n"
    assert main(argv + ["--overwrite"]) == 0
    assert read_token_trace(foreign).prompt_tokens.tolist() == [3]
    # a file specsim wrote is replaced without --overwrite
    _jsonl(tmp_path / "in.jsonl", {"prompt": "a b c", "output": "b"})
    assert main(argv) == 0
    assert read_token_trace(foreign).prompt_tokens.tolist() == [5]
    assert main(["tokenize", src, "-o", str(tmp_path), "--tokenizer", "words"]) == 2
    assert not _leftovers(tmp_path)


def test_interrupted_write_leaves_no_temporary(tmp_path, capsys, monkeypatch):
    import workloads.token_trace as token_trace

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(token_trace, "write_token_trace", interrupted)
    src = _jsonl(tmp_path / "in.jsonl", {"prompt": "a", "output": "b"})
    out = tmp_path / "out.jsonl"
    assert main(["tokenize", src, "-o", str(out), "--tokenizer", "words"]) == 130
    assert not out.exists() and not _leftovers(tmp_path)


def test_the_console_script_prints_no_traceback(tmp_path):
    src = _jsonl(tmp_path / "in.jsonl", "{oops")
    run = subprocess.run([sys.executable, "-m", "simulator.cli", "tokenize", src, "-o",
                          str(tmp_path / "o.jsonl"), "--tokenizer", "words"], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.count("\n") == 1 and "line 1" in run.stderr
