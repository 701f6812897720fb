"""Issue 37 part 2: every output names each policy's acceptance source, and warns where it is
an unsourced default or a measurement of another target or drafter."""
import dataclasses

import yaml

from simulator.acceptance.provenance import acceptance_provenance, frame_notes
from simulator.cli import main
from simulator.policies.registry import POLICIES
from simulator.scenario import PolicyConfig, load_scenario, scenario_from_dict
from simulator.simulate import acceptance_columns, simulate

TINY = {"trace": "default", "max_requests": 3}
PLAN_SEARCH = {"min_rate_per_s": 0.5, "max_rate_per_s": 4, "rel_tol": 0.5}


def _vllm_70b_eagle3(tmp_path):
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump({
        "model": "meta-llama/Llama-3.1-70B", "tensor_parallel_size": 4,
        "speculative_config": {"method": "eagle3", "model": "eagle3-llama-3.1-70b-instruct",
                               "num_speculative_tokens": 3}}))
    return path


def test_vllm_args_70b_eagle3_never_shows_the_built_in_opt13b_citation(tmp_path, capsys):
    sc = load_scenario(None, ["hardware=h100-sxm", "workload.max_requests=2"],
                       _vllm_70b_eagle3(tmp_path))
    where = acceptance_provenance(sc)
    assert "Leviathan" not in where.line and "OPT-13B" not in where.line
    assert where.line.startswith("no source for eagle3-llama-3.1-70b-instruct")
    assert "unsourced default" in where.warning
    assert main(["run", "--no-progress", "--out", str(tmp_path / "out"), "--vllm-args",
                 str(tmp_path / "serve.yaml"), "--set", "hardware=h100-sxm",
                 "--set", "workload.max_requests=2"]) == 0
    out, err = capsys.readouterr()
    assert "OPT-13B" not in out and "Leviathan" not in out
    assert "acceptance: no source for eagle3-llama-3.1-70b-instruct" in out
    assert "warning: eagle3" in err and "unsourced default" in err


def test_specinfer_with_the_68m_draft_says_the_borrowed_source_and_warns():
    sc = scenario_from_dict({"target": "llama-2-7b", "draft": "llama-68m", "workload": TINY,
                             "policy": {"name": "specinfer", "expansion": [1, 1, 3, 1]}},
                            source="s.yaml")
    res = simulate(sc)
    line, warning = res.info["acceptance_source"], res.info["acceptance_warning"]
    assert "SpecInfer" in line and "the published default for llama-68m" in line
    assert "EAGLE" not in line and "Vicuna" not in line
    # SpecInfer measured LLaMA-7B (v1); the catalog's llama-2-7b is a stand-in
    assert "LLaMA-7B" in warning and "llama-2-7b" in warning


def test_plan_with_an_unsourced_default_warns(tmp_path, capsys):
    candidate = {"name": "h100 x4 eagle3", "hardware": "h100-sxm", "target": "llama-3.1-70b",
                 "draft": None, "tensor_parallel": 4,
                 "policy": {"name": "eagle3", "num_speculative_tokens": 3}}
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({"scenario": "default", "fixed": {"workload": TINY},
                                    "slo": {"p99_ttft_ms": 2000, "p99_tpot_ms": 100},
                                    "search": PLAN_SEARCH, "candidates": [candidate]}))
    assert main(["plan", str(plan), "--no-progress", "--out", str(tmp_path / "p.csv")]) == 0
    out, err = capsys.readouterr()
    assert "acceptance: no source for eagle3-llama-3.1-70b-instruct" in out
    assert "warning: h100 x4 eagle3: the acceptance is an unsourced default" in err
    import pandas as pd
    row = pd.read_csv(tmp_path / "p.csv").iloc[0]
    assert "unsourced default" in row["acceptance_warning"]


def test_the_built_in_scenario_warns_that_its_alpha_is_borrowed_from_t5():
    cols = acceptance_columns(load_scenario())
    assert "Leviathan" in cols["acceptance_source"]
    assert "T5-XXL + T5-small" in cols["acceptance_warning"]
    assert "opt-13b + opt-125m" in cols["acceptance_warning"]


def test_a_measurement_of_the_simulated_pair_has_no_warning():
    sc = load_scenario(None, ["acceptance.measured_for.target=opt-13b",
                              "acceptance.measured_for.draft=OPT-125M"])
    assert acceptance_columns(sc)["acceptance_warning"] == ""


def test_model_free_policies_declare_their_acceptance_and_adaptive_reads_its_base():
    free = {name for name, cls in POLICIES.items() if cls.acceptance_from_tokens}
    assert free == {"prompt_lookup", "suffix", "jacobi", "lookahead"}
    sc = load_scenario(None, ["draft=null"])
    for policy in (PolicyConfig("suffix"),
                   PolicyConfig("adaptive", {"base": {"name": "prompt_lookup"}})):
        where = acceptance_provenance(dataclasses.replace(sc, policy=policy))
        assert "token ids" in where.line and where.warning == ""


def test_frame_notes_group_sources_and_name_the_rows():
    import pandas as pd
    df = pd.DataFrame({"candidate": ["a", "b", "c"],
                       "acceptance_source": ["S1", "S1", "S2"],
                       "acceptance_warning": ["", "W", "W"]})
    lines, warnings = frame_notes(df, "candidate")
    assert lines == ["acceptance (a, b): S1", "acceptance (c): S2"]
    assert warnings == ["b, c: W"]


def test_the_plan_report_shows_sources_and_warnings_escaped():
    import html

    import pandas as pd

    from reports.page import build_report_html
    df = pd.DataFrame({"rank": [1], "candidate": ["<c>"], "max_rate_per_s": [1.0],
                       "acceptance_source": ["src <T5>"], "acceptance_warning": ["warn & x"]})
    page = build_report_html([], plan=df, versions={})
    assert html.escape("acceptance: src <T5>") in page
    assert html.escape("Warning: <c>: warn & x") in page and "<T5>" not in page


def test_gamma_map_rows_carry_the_source_and_warn_on_an_unsourced_alpha():
    from simulator.planning.gamma_map import gamma_map
    df = gamma_map(batches=[1], contexts=[256], gammas=[1, 2])
    assert set(df["acceptance_source"]) == {
        "no source given: iid (alpha: 0.8) is an assumption, not a measurement"}
    assert df["acceptance_warning"].str.contains("alpha 0.8 has no source").all()
    cited = {"model": "iid", "alpha": 0.75, "source": "Leviathan Table 3",
             "measured_for": {"target": "T5-XXL", "draft": "T5-small"}}
    df = gamma_map(batches=[1], contexts=[256], gammas=[1, 2], acceptance=cited)
    assert set(df["acceptance_source"]) == {"Leviathan Table 3"}
    assert df["acceptance_warning"].str.contains("T5-XXL + T5-small, not the simulated "
                                                 "opt-13b + opt-125m", regex=False).all()


def test_sweep_points_that_change_the_draft_drop_the_base_block_and_carry_the_source():
    from simulator.planning.sweep import SweepSpec, evaluate
    spec = SweepSpec.simulated([{"policy": "chain"}, {"draft": "opt-350m"}],
                               fixed={"workload.max_requests": 3})
    assert "acceptance" in spec.payloads[0] and "acceptance" not in spec.payloads[1]
    row = evaluate(spec.task(1))
    assert row["acceptance_source"] == ("no source for opt-350m: iid (alpha: 0.8) is the "
                                        "default, not a measurement")
    assert "unsourced default" in row["acceptance_warning"]
    assert "T5-XXL" in evaluate(spec.task(0))["acceptance_warning"]
