"""``--compare`` entries carrying their own acceptance (simulator/compare_spec.py): the three
forms, the label that reads back, and the errors, all before any simulation."""
import pytest
import yaml

import simulator.cli.run as run_cli
from simulator.cli import main
from simulator.inputs.errors import SpecsimError
from simulator.scenario import load_scenario, parse_compare


def test_a_changed_field_edits_the_scenarios_block_and_drops_its_source():
    chain, = parse_compare("chain:gamma=2,acceptance.alpha=0.7")
    assert chain.params["num_speculative_tokens"] == 2
    sc = load_scenario().with_policy(chain)
    assert sc.acceptance == {"model": "iid", "alpha": 0.7}      # Leviathan's source dropped
    assert chain.label == "chain:gamma=2,acceptance.alpha=0.7"
    assert parse_compare(chain.label)[0] == chain              # the label reads back


def test_a_whole_mapping_and_a_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = {"model": "positional", "rates": [0.9, 0.5], "source": "S",
           "measured_for": {"target": "opt-13b", "draft": "opt-125m"}}
    (tmp_path / "acc.yaml").write_text(yaml.safe_dump(cfg))
    none, inline, from_file = parse_compare(
        "none,eagle3:acceptance={model: positional, rates: [0.9, 0.5], source: S},"
        "chain:acceptance=acc.yaml")
    assert none.acceptance is None
    base = load_scenario()
    assert base.with_policy(inline).acceptance == {k: cfg[k] for k in ("model", "rates",
                                                                      "source")}
    assert base.with_policy(from_file).acceptance == cfg
    assert "acceptance" in base.with_policy(from_file).raw     # provenance: written


def test_a_new_model_starts_a_new_mapping():
    chain, = parse_compare("chain:acceptance.model=positional,acceptance.rates=[0.6]")
    assert load_scenario().with_policy(chain).acceptance == {"model": "positional",
                                                             "rates": [0.6]}


@pytest.mark.parametrize("text, says", [
    ("chain:acceptance=3", "mapping or a .yaml file"),
    ("chain:acceptance=missing.yaml", "no acceptance file"),
    ("chain:acceptance.=0.5", "cannot read"),
    ("chain:acceptance.a.b=0.5", "cannot read"),
    ("chain:acceptance={model: nope}", "unknown value 'nope'"),
])
def test_bad_entries_fail_as_they_are_read(text, says):
    with pytest.raises(SpecsimError) as err:
        parse_compare(text)
    assert says in str(err.value) and "--compare" in str(err.value) and err.value.fix


@pytest.mark.parametrize("text, field", [("chain:acceptance.alpha=1.5", "acceptance.alpha"),
                                         ("chain:acceptance.alfa=0.5", "acceptance.alfa")])
def test_a_bad_field_fails_before_any_simulation(text, field, tmp_path, monkeypatch, capsys):
    def never(*args, **kwargs):
        raise AssertionError("simulated before the --compare entry was checked")
    monkeypatch.setattr(run_cli, "simulate", never)
    code = main(["run", "--no-progress", "--out", str(tmp_path / "o"), "--compare",
                 f"none,{text}"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert f"--compare {text}: {field}:" in err
