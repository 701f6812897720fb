"""A new user's own files and questions: each error names the file, the field and the fix
(exit 2), and says where the problem is (not, say, in a --compare entry never written)."""
from __future__ import annotations

from simulator.cli import main


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_a_bad_trace_is_the_traces_error_not_the_first_compare_entrys(tmp_path, monkeypatch,
                                                                      capsys):
    trace = tmp_path / "mine.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,100,20\n0.5,-3,20\n")
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--no-progress", "--set", f"workload={{trace: {trace}}}"]) == 2
    err = _error(capsys)
    assert "--compare" not in err
    assert err.startswith(f"specsim: error: {trace}: prompt_tokens: line 3")
    assert not (tmp_path / "specsim-out").exists()


def test_set_paths_on_the_built_in_scenario_are_the_current_folders(tmp_path, monkeypatch,
                                                                   capsys):
    """`specsim run --set workload.trace=mine.csv` read workloads/scenarios/mine.csv (the
    built-in scenario's folder): a relative path is where the user typed it."""
    (tmp_path / "mine.csv").write_text("arrival_s,prompt_tokens,output_tokens\n"
                                       "0,100,20\n0.5,200,30\n1.0,300,40\n")
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--no-progress", "--format", "csv", "--compare", "none",
                 "--set", "workload={trace: mine.csv}"]) == 0
    assert capsys.readouterr().out.count("\n") == 2   # the header and policy none's row


def test_the_built_in_comparison_does_not_label_errors_with_a_compare_never_written(
        tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--no-progress", "--set", "target=nope.yaml"]) == 2
    assert _error(capsys).startswith(f"specsim: error: {tmp_path / 'nope.yaml'}: file not found")
    assert main(["run", "--no-progress", "--compare", "none,chain", "--set",
                 "target=nope.yaml"]) == 2
    assert "--compare none: " in _error(capsys)   # written: the entry is named
