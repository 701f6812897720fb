"""simulator/input_clash.py: an output resolving to one of the command's inputs is refused,
under any spelling of the path (``..``, a symbolic link, a hard link); others pass."""
from __future__ import annotations

import os

import pytest

from simulator.input_clash import check_outputs_not_inputs, workload_files
from simulator.inputs.errors import SpecsimError


def test_every_spelling_of_the_same_file_is_refused(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text("x\n")
    (tmp_path / "sub").mkdir()
    os.link(src, tmp_path / "hard.jsonl")
    os.symlink(src, tmp_path / "soft.jsonl")
    for out in (src, tmp_path / "sub" / ".." / "in.jsonl", tmp_path / "hard.jsonl",
                tmp_path / "soft.jsonl"):
        with pytest.raises(SpecsimError, match="--out: .* is the input"):
            check_outputs_not_inputs([("--out", out)], [src])
    assert src.read_text() == "x\n"


def test_a_results_folder_clashes_with_an_input_inside_it_only(tmp_path):
    (tmp_path / "r").mkdir()
    inside = tmp_path / "r" / "s.yaml"
    inside.write_text("seed: 0\n")
    with pytest.raises(SpecsimError, match="holds the input"):
        check_outputs_not_inputs([("--out", tmp_path / "r")], [inside], folders=("--out",))
    # the same path as a file output is not a clash (it names the folder, not the file)
    check_outputs_not_inputs([("--report", tmp_path / "r")], [inside])
    check_outputs_not_inputs([("--out", tmp_path / "other")], [inside], folders=("--out",))


def test_other_paths_and_missing_entries_pass(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text("x\n")
    check_outputs_not_inputs([("--out", tmp_path / "out.jsonl"), ("--report", None)],
                             [src, None, ""])


def test_workload_files_finds_every_trace_relative_to_the_scenario(tmp_path):
    workload = {"synthetic": {"prompt": {"dist": "empirical", "trace": "a.csv"},
                              "output": {"dist": "empirical", "trace": "default"}},
                "trace": "/abs/b.csv"}
    assert sorted(map(str, workload_files(workload, tmp_path))) == \
        sorted([str(tmp_path / "a.csv"), "/abs/b.csv"])
