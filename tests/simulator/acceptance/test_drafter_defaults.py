"""Every drafter of the model catalog has a cited default acceptance or an explicit
'no source for <drafter>' line; the cited ones reproduce the published numbers."""
import dataclasses

import pytest

from simulator.acceptance import acceptance_from_config
from simulator.acceptance.drafter_defaults import drafter_default, drafter_defaults, drafter_line
from simulator.acceptance.provenance import acceptance_provenance, mismatch
from simulator.models.spec import list_models, load_model
from simulator.scenario import PolicyConfig, scenario_from_dict


# defaults measured with another target or head than the catalog's (kimi-k2.5 and its MLA
# EAGLE-3 head, InferenceX): provenance warns whenever they are used
STAND_INS = {"eagle3-kimi-k2"}


def catalog_drafters() -> list[str]:
    """Heads (eagle, eagle3, medusa), targets' MTP modules (as the mtp policy names them),
    and every decoder smaller than another decoder of its family and tokenizer."""
    models = [load_model(name) for name in list_models()]
    decoders = [m for m in models if m.kind == "decoder"]
    out = [m.name for m in models if m.kind in ("eagle", "eagle3", "medusa")]
    out += [f"{m.name}-mtp" for m in models if m.mtp_modules > 0]
    out += [d.name for d in decoders
            if any(t.family == d.family and t.tokenizer_vocab == d.tokenizer_vocab
                   and t.published_params > d.published_params for t in decoders)]
    return sorted(out)


@pytest.mark.parametrize("drafter", catalog_drafters())
def test_every_drafter_has_a_cited_default_or_says_no_source(drafter):
    line = drafter_line(drafter)
    cfg = drafter_default(drafter)
    if cfg is None:
        assert line == f"no source for {drafter}"
        return
    acceptance_from_config(cfg)                       # a valid mapping
    assert cfg["source"] in line and drafter in line
    if drafter in list_models() and load_model(drafter).kind != "decoder":
        # a head's default is a measurement on the target it was trained for, or it is a
        # stand-in and provenance says so
        warning = mismatch(cfg, load_model(drafter).base_model, drafter)
        assert (warning != "") == (drafter in STAND_INS), warning
    else:
        assert cfg["measured_for"]["draft"].lower() == drafter


def test_every_default_is_a_catalog_drafter():
    assert set(drafter_defaults()) <= set(catalog_drafters())


def test_no_number_is_given_where_none_is_published():
    # the EAGLE-3 paper measures LLaMA-Instruct 3.3 70B, not this catalog head's numbers
    assert drafter_default("eagle3-llama-3.1-70b-instruct") is None
    assert drafter_default("opt-125m") is None


def test_eagle_heads_carry_the_papers_top1_rates():
    # EAGLE (arXiv:2401.15077v3) Table 2, Vicuna-7B, MT-bench, T=0: 0-alpha..4-alpha
    cov = drafter_default("eagle-vicuna-7b")["coverage"]
    assert [row[0] for row in cov] == [0.79, 0.74, 0.72, 0.73, 0.67]
    assert all(row == sorted(row) and row[-1] <= 1 for row in cov)


def expected_tokens(alpha: float, gamma: int) -> float:
    """Leviathan et al. 2023, Eq. 1: (1 - alpha^(gamma+1)) / (1 - alpha)."""
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)


def test_the_eagle3_8b_default_reproduces_vllms_acceptance_length():
    # vLLM issue #20780, EAGLE 3 column: AL 3.08 at K=4; Leviathan Eq. 1 closed form
    alpha = drafter_default("eagle3-llama-3.1-8b-instruct")["alpha"]
    assert expected_tokens(alpha, 4) == pytest.approx(3.08, abs=1e-3)
    alpha1 = drafter_default("eagle-llama-3.1-8b-instruct")["alpha"]   # EAGLE 1: 2.29 at K=3
    assert expected_tokens(alpha1, 3) == pytest.approx(2.29, abs=1e-3)


def test_the_mtp_default_lies_in_deepseeks_published_range():
    # DeepSeek-V3 Technical Report sec. 5.4.3: second-token acceptance 85% to 90%
    assert 0.85 <= drafter_default("deepseek-v3-mtp")["alpha"] <= 0.90


def test_medusa_heads_carry_the_published_head_accuracies():
    # FasterDecoding/Medusa assets/medusa_acc.csv: 7b head 1 top-1 0.5604
    model = acceptance_from_config(drafter_default("medusa-vicuna-7b"))
    assert model.coverage[0][0] == pytest.approx(0.5604)


def test_a_scenario_without_acceptance_runs_its_drafters_default():
    sc = scenario_from_dict({"target": "vicuna-7b", "draft": "eagle-vicuna-7b",
                             "policy": {"name": "eagle", "num_speculative_tokens": 3}},
                            source="s.yaml")
    where = acceptance_provenance(sc)
    assert "EAGLE (Li et al." in where.line and "default for eagle-vicuna-7b" in where.line
    assert where.warning == ""                       # measured for this very pair
    mtp = dataclasses.replace(sc, target="deepseek-v3", draft=None,
                              policy=PolicyConfig("mtp", {"num_speculative_tokens": 2}))
    assert "DeepSeek-V3 Technical Report" in acceptance_provenance(mtp).line
