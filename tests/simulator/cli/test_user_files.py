"""A new user's own files and questions: each error names the file, the field and the fix
(exit 2), and says where the problem is (not, say, in a --compare entry never written)."""
from __future__ import annotations

from simulator.cli import main
from tests.helpers import REPO


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


def test_plan_takes_the_users_own_model_and_profile_files(tmp_path, monkeypatch, capsys):
    """`plan --target my-model.yaml` failed on every candidate ('my-1b' is neither a catalog
    name nor a Hugging Face id), `--hardware my-gpu.yaml` was an unknown hardware name: the
    files' paths are now the candidates' model and hardware."""
    import yaml

    from simulator.models.spec import MODEL_DIR
    mine = yaml.safe_load((MODEL_DIR / "llama-3.2-1b.yaml").read_text())
    (tmp_path / "my-1b.yaml").write_text(yaml.safe_dump(dict(mine, name="my-1b")))
    monkeypatch.chdir(tmp_path)
    profile = (REPO / "hardware" / "profiles" / "a100-80gb.yaml").read_text()
    (tmp_path / "my-gpu.yaml").write_text(profile.replace("name: a100-80gb", "name: my-gpu"))
    assert main(["plan", "--target", "my-1b.yaml", "--hardware", "my-gpu.yaml", "--gpus", "1",
                 "--isl", "100", "--osl", "20", "--rate", "1", "--ttft-ms", "1000",
                 "--tpot-ms", "100", "--methods", "none", "--requests", "20", "--executor",
                 "serial", "--no-progress", "--format", "csv"]) == 0
    serve = yaml.safe_load((tmp_path / "specsim-plan" / "vllm-serve.yaml").read_text())
    assert serve["model"] == str(tmp_path.resolve() / "my-1b.yaml")  # run --vllm-args reads it
    assert "for vllm serve put the model's Hugging Face id" in \
        (tmp_path / "specsim-plan" / "vllm-serve.yaml").read_text()
    # serve.sh hands the engines a placeholder, never the specsim model file
    script = (tmp_path / "specsim-plan" / "serve.sh").read_text()
    assert "my-1b.yaml'" not in script and "my-1b.yaml " not in script.split("# vLLM")[1]
    assert "vllm serve '<checkpoint of my-1b>'" in script
    assert "# 1 x my-gpu as" in script  # the verdict names the profile, not its file's path
    assert "--model-path '<checkpoint of my-1b>'" in script
    assert "TP1 x1 none" in capsys.readouterr().out
    scenario = yaml.safe_load((tmp_path / "specsim-plan" / "scenario.yaml").read_text())
    assert scenario["hardware"] == str(tmp_path.resolve() / "my-gpu.yaml")
    assert main(["plan", "--target", "my-1b.yaml", "--hardware", "gone.yaml", "--gpus", "1",
                 "--isl", "100", "--osl", "20", "--rate", "1", "--ttft-ms", "1000",
                 "--tpot-ms", "100"]) == 2
    assert _error(capsys) == ("specsim: error: gone.yaml: --hardware: file not found "
                              "(fix: check the path)")


def test_a_new_target_on_the_built_in_scenario_gets_its_own_draft(capsys):
    """`specsim run --compare none,eagle3 --set target=llama-3.1-8b` failed, even for
    `none`: the built-in opt-125m draft is on OPT's vocabulary.  The new target gets the
    draft estimate and gamma-map default to (models/default_draft.py), or none."""
    from simulator.scenario import DEFAULT_SCENARIO, load_scenario
    assert load_scenario(None).draft == "opt-125m"
    assert load_scenario(None, ["target=llama-3.1-8b"]).draft == "llama-3.2-1b"
    assert load_scenario(None, ["target=mixtral-8x7b"]).draft is None
    assert load_scenario(None, ["target=llama-3.1-8b", "draft=llama-68m"]).draft == \
        "llama-68m"   # written: kept
    # written as the built-in's own value, it is still the user's (review: it was replaced)
    assert load_scenario(None, ["target=llama-2-7b", "draft=opt-125m"]).draft == "opt-125m"
    # a file the user names is theirs, its draft as written
    assert load_scenario(DEFAULT_SCENARIO, ["target=llama-3.1-8b"]).draft == "opt-125m"
    assert main(["run", "--no-progress", "--format", "csv", "--compare", "none,eagle3",
                 "--set", "target=llama-3.1-8b", "--set", "hardware=h100-sxm",
                 "--set", "workload.max_requests=5"]) == 0
    assert capsys.readouterr().out.count("\n") == 3


def test_a_length_list_without_arrival_times_says_how_to_run_it(tmp_path, monkeypatch,
                                                                capsys):
    """A `vllm bench serve`-style list of lengths, written with every arrival_s 0: a rate
    cannot rescale it; the fix says what does (drop it; max_concurrency)."""
    (tmp_path / "lengths.csv").write_text("arrival_s,prompt_tokens,output_tokens\n"
                                          "0,512,128\n0,1024,256\n0,200,50\n")
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--no-progress", "--compare", "none", "--set",
                 "workload={trace: lengths.csv, rate_per_s: 2}"]) == 2
    assert "max_concurrency: N sends them N at a time" in _error(capsys)
    assert main(["run", "--no-progress", "--compare", "none", "--format", "csv", "--set",
                 "workload={trace: lengths.csv, max_concurrency: 2}"]) == 0


def test_the_workloads_page_lists_every_csv_formats_columns():
    from workloads.traces import _CSV_SIGNATURES
    page = (REPO / "docs" / "workloads.md").read_text(encoding="utf-8")
    for name, columns in _CSV_SIGNATURES.items():
        assert f"| `{name}` | `{','.join(columns)}`" in page, name


def test_a_plan_over_on_the_backlog_says_so_in_words(tmp_path, monkeypatch, capsys):
    """'(in_flight over)' named a column; a 3-request trace can never hold (its last
    request is in flight when it arrives: 1/3 > 25%), and the verdict now says why."""
    (tmp_path / "three.csv").write_text("arrival_s,prompt_tokens,output_tokens\n"
                                        "0,100,20\n0.25,200,30\n1.5,300,40\n")
    monkeypatch.chdir(tmp_path)
    assert main(["plan", "--target", "llama-3.2-1b", "--hardware", "a100-80gb", "--gpus",
                 "1", "--trace", "three.csv", "--rate", "5", "--ttft-ms", "1000",
                 "--tpot-ms", "100", "--methods", "none", "--executor", "serial",
                 "--no-progress"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "(over: the backlog: more than 25% of the requests still in flight when the " \
           "last one arrives (the last one always is: a trace of 3 or fewer never holds))" \
           in out and "in_flight over" not in out


def test_a_missing_draft_names_one_on_the_targets_tokenizer():
    """The fix said 'set draft: opt-125m' whatever the target (OPT's vocabulary: the next
    run failed on it)."""
    import pytest

    from simulator.inputs.errors import SpecsimError
    from simulator.scenario import DEFAULT_SCENARIO, load_scenario
    from simulator.simulate import check_runnable
    for target, fix in (("llama-3.1-8b", "set 'draft: llama-3.2-1b'"),
                        ("mixtral-8x7b", "a small model on mixtral-8x7b's tokenizer")):
        sc = load_scenario(DEFAULT_SCENARIO, [f"target={target}", "draft=null",
                                              "hardware=h200", "workload.max_requests=2"])
        with pytest.raises(SpecsimError, match="needs a draft model") as info:
            check_runnable(sc)
        assert info.value.fix.startswith(fix) if fix.startswith("set") else \
            fix in info.value.fix


def test_a_hugging_face_id_is_a_target_as_in_vllm_args():
    """`--set target=meta-llama/Llama-3.1-8B-Instruct` was an unknown model, though
    --vllm-args' model and plan --target take the catalog's ids."""
    import pytest

    from simulator.inputs.errors import SpecsimError
    from simulator.scenario import load_scenario
    sc = load_scenario(None, ["target=meta-llama/Llama-3.1-8B-Instruct"])
    assert (sc.target, sc.draft) == ("llama-3.1-8b", "llama-3.2-1b")
    from simulator.simulate import check_runnable
    with pytest.raises(SpecsimError, match="unknown model 'Qwen/Qwen2.5-14B'") as info:
        check_runnable(load_scenario(None, ["target=Qwen/Qwen2.5-14B"]))
    assert info.value.fix.startswith("write the model file of a Hugging Face config.json")


def test_plan_with_an_uncatalogued_id_says_how_to_give_the_model():
    from simulator.cli.plan_quick import _target
    from simulator.inputs.errors import SpecsimError
    try:
        _target("Qwen/Qwen2.5-14B")
    except SpecsimError as exc:
        assert exc.field == "--target" and "specsim models from-hf config.json" in exc.fix
    else:
        raise AssertionError("an uncatalogued id was taken")
