"""Acceptance interface, registry, vLLM metrics, and the chain models (iid, positional, curve)."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.acceptance import (
    ACCEPTANCE_MODELS,
    AcceptanceModel,
    acceptance_from_config,
    expected_metrics,
    summarise_acceptance,
)
from simulator.acceptance.curve import CurveAcceptance, _leaf_paths, load_curve
from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import load_yaml_file
from tests.helpers import SHARED

TRACES = SHARED / "traces" / "acceptance"

MINIMAL = {
    "iid": {"alpha": 0.8},
    "positional": {"rates": [0.9, 0.8, 0.7]},
    "curve": {"lengths": {1: 1.8, 2: 2.4, 3: 2.8}},
    "medusa": {},
    "per_request": {"mean": 0.7, "concentration": 8.0},
    "context_decay": {"alpha0": 0.9, "scale_tokens": 2000.0, "floor": 0.4},
    "hard_token": {"alpha_easy": 0.95, "alpha_hard": 0.2, "p_easy_to_hard": 0.1,
                   "p_hard_to_hard": 0.6},
    "token_level": {"vocab_size": 6},
    "tree_topk": {"coverage": [[0.6, 0.75], [0.4, 0.55]]},
    "sequoia": {"rates": [0.7, 0.3]},
}


def _build(name):
    return acceptance_from_config({"model": name, **MINIMAL[name]})


def test_every_registered_model_has_a_minimal_config():
    assert set(MINIMAL) == set(ACCEPTANCE_MODELS)


@pytest.mark.parametrize("name", sorted(ACCEPTANCE_MODELS))
def test_interface_contract(name):
    model = _build(name)
    assert isinstance(model, AcceptanceModel) and model.name == name
    bound = model.bind(50, np.random.default_rng(0))
    gammas = np.array([0, 1, 2, 3, 4] * 10)
    ids = np.arange(50)
    ctx = np.full(50, 100)
    out = bound.sample_chain(gammas, ctx, ids, np.random.default_rng(1))
    assert out.shape == (50,) and np.issubdtype(out.dtype, np.integer)
    assert np.all((out >= 0) & (out <= gammas))
    # Same seed, same result, from a fresh binding.
    again = model.bind(50, np.random.default_rng(0)).sample_chain(
        gammas, ctx, ids, np.random.default_rng(1))
    assert np.array_equal(out, again)
    rates = model.bind(5, np.random.default_rng(0)).position_rates(4)
    assert rates.shape == (4,) and np.all(np.diff(rates) <= 1e-12)
    assert np.all((rates >= 0) & (rates <= 1))
    expected = model.bind(5, np.random.default_rng(0)).expected_accepted(4)
    assert expected is None or expected == pytest.approx(rates.sum())


@pytest.mark.parametrize("name", sorted(ACCEPTANCE_MODELS))
def test_bind_never_mutates_the_configured_model(name):
    model = _build(name)
    before = repr(model)
    state = getattr(model, "state", None)
    bound = model.bind(10, np.random.default_rng(0), tasks=None)
    bound.sample_chain(np.full(10, 3), np.zeros(10, int), np.arange(10),
                       np.random.default_rng(1))
    assert repr(model) == before and getattr(model, "state", None) is state


def test_config_errors_name_the_field_and_list_choices():
    with pytest.raises(SpecsimError, match="iid.*positional") as err:
        acceptance_from_config({"model": "gaussian"})
    assert err.value.field == "model"
    with pytest.raises(SpecsimError, match="valid keys are: alpha, measured_for, model, source"):
        acceptance_from_config({"model": "iid", "alpha": 0.8, "gamma": 3})
    with pytest.raises(SpecsimError, match="model"):
        acceptance_from_config({"alpha": 0.8})
    for bad in (1.5, -0.1, "0.8", float("nan"), True):
        with pytest.raises(SpecsimError, match="alpha"):
            acceptance_from_config({"model": "iid", "alpha": bad})
    with pytest.raises(SpecsimError, match="rates"):
        acceptance_from_config({"model": "positional", "rates": []})
    with pytest.raises(SpecsimError, match="gammas"):
        _build("iid").sample_chain(np.array([1.5]), np.zeros(1), np.zeros(1, int),
                                   np.random.default_rng(0))
    with pytest.raises(SpecsimError, match="contexts"):
        _build("iid").sample_chain(np.array([1, 2]), np.zeros(1), np.zeros(2, int),
                                   np.random.default_rng(0))


def _capped_geometric_moments(alpha, gamma):
    # P(n = k) = alpha^k (1 - alpha) for k < gamma, alpha^gamma for k = gamma.
    k = np.arange(gamma + 1)
    pmf = np.where(k < gamma, alpha ** k * (1 - alpha), alpha ** gamma)
    mean = float(pmf @ k)
    return mean, float(pmf @ (k - mean) ** 2)


@pytest.mark.parametrize("alpha, gamma", [(0.8, 3), (0.6, 5), (0.95, 8), (0.0, 4), (1.0, 4)])
def test_iid_monte_carlo_matches_the_formula(alpha, gamma):
    model = acceptance_from_config({"model": "iid", "alpha": alpha})
    mean, var = _capped_geometric_moments(alpha, gamma)
    # E(alpha, gamma) - 1 = alpha (1 - alpha^gamma) / (1 - alpha), written out here.
    closed = gamma if alpha == 1 else alpha * (1 - alpha ** gamma) / (1 - alpha)
    assert model.expected_accepted(gamma) == pytest.approx(closed, abs=1e-12)
    assert mean == pytest.approx(closed, abs=1e-12)
    n = 200_000
    draws = model.sample_chain(np.full(n, gamma), np.zeros(n, int), np.arange(n),
                               np.random.default_rng(42))
    # Sampling bound: 5 standard errors of the mean (exact variance of the capped geometric).
    assert abs(draws.mean() - closed) <= 5 * np.sqrt(var / n) + 1e-12
    rates = summarise_acceptance(draws, np.full(n, gamma))["per_position_rates"]
    exact = alpha ** np.arange(1, gamma + 1)
    assert np.all(np.abs(rates - exact) <= 5 * np.sqrt(exact * (1 - exact) / n) + 1e-12)


def test_worked_example_expected_tokens_2_952():
    # Lecture 003, section 9: alpha 0.80, K = 3 -> E[N] = 2.952 (tau, bonus included).
    metrics = expected_metrics(acceptance_from_config({"model": "iid", "alpha": 0.8}), 3)
    assert metrics["mean_acceptance_length"] == pytest.approx(2.952, abs=1e-12)
    assert metrics["per_position_rates"] == pytest.approx([0.8, 0.64, 0.512])
    assert metrics["acceptance_rate"] == pytest.approx(1.952 / 3)


def test_summarise_acceptance_by_hand():
    s = summarise_acceptance(np.array([0, 2, 3, 1]), np.array([3, 3, 3, 3]))
    assert (s["num_drafts"], s["num_draft_tokens"], s["num_accepted_tokens"]) == (4, 12, 6)
    assert s["acceptance_rate"] == pytest.approx(0.5)
    assert s["mean_acceptance_length"] == pytest.approx(2.5)          # 1 + 6 / 4
    assert s["per_position_rates"] == pytest.approx([3 / 4, 2 / 4, 1 / 4])
    assert s["tested_alpha"] == pytest.approx(6 / 9)                  # 3 rejections
    s = summarise_acceptance(np.array([0, 1, 2]), np.array([0, 1, 4]))
    assert s["num_drafts"] == 2 and s["num_draft_tokens"] == 5
    assert s["per_position_rates"] == pytest.approx([1.0, 1.0, 0.0, 0.0])
    with pytest.raises(SpecsimError, match="accepted"):
        summarise_acceptance(np.array([3]), np.array([2]))


def test_positional_closed_form_and_extension():
    model = acceptance_from_config({"model": "positional", "rates": [0.9, 0.8, 0.5]})
    assert model.position_rates(5) == pytest.approx([0.9, 0.72, 0.36, 0.18, 0.09])
    assert model.expected_accepted(3) == pytest.approx(0.9 + 0.72 + 0.36)
    n = 100_000
    draws = model.sample_chain(np.full(n, 3), np.zeros(n, int), np.arange(n),
                               np.random.default_rng(3))
    freq = np.bincount(draws, minlength=4) / n
    exact = np.array([0.1, 0.9 * 0.2, 0.72 * 0.5, 0.36])
    assert np.all(np.abs(freq - exact) <= 5 * np.sqrt(exact * (1 - exact) / n))


def test_curve_reproduces_a_consistent_curve_exactly():
    # AL from conditional rates 0.9, 0.8, 0.7: 1.9, 2.62, 3.124.
    model = acceptance_from_config({"model": "curve", "lengths": {1: 1.9, 2: 2.62, 3: 3.124}})
    assert model.rates == pytest.approx((0.9, 0.8, 0.7))
    assert model.max_fit_error == pytest.approx(0.0, abs=1e-12)
    assert [1 + model.expected_accepted(g) for g in (1, 2, 3)] == pytest.approx([1.9, 2.62, 3.124])


def test_curve_projects_an_inconsistent_curve():
    # Increments 0.8, 0.6, 0.7 cannot come from a positional model; pooling the last two
    # gives 0.8, 0.65, 0.65 -> AL 1.8, 2.45, 3.1 (worked by hand).
    model = acceptance_from_config({"model": "curve", "lengths": {1: 1.8, 2: 2.4, 3: 3.1}})
    assert model.fitted_lengths == pytest.approx([1.8, 2.45, 3.1])
    assert model.max_fit_error == pytest.approx(0.05)
    # A falling AL: increments 0.5, -0.1 are already non-increasing; the negative one is
    # clipped to 0 (min (S1-0.5)^2 + (S2+0.1)^2 over S1 >= S2 >= 0) -> AL 1.5, 1.5.
    model = acceptance_from_config({"model": "curve", "lengths": {1: 1.5, 2: 1.4}})
    assert model.fitted_lengths == pytest.approx([1.5, 1.5])
    assert model.max_fit_error == pytest.approx(0.1)


def test_curve_input_errors():
    for lengths, match in (({1: 1.8, 3: 2.5}, "missing"), ({1: 2.5}, "at most"),
                           ({1: 0.5}, "at least"), ({}, "mapping")):
        with pytest.raises(SpecsimError, match=match):
            acceptance_from_config({"model": "curve", "lengths": lengths})
    with pytest.raises(SpecsimError, match="exactly one"):
        acceptance_from_config({"model": "curve"})
    with pytest.raises(SpecsimError, match="not found"):
        acceptance_from_config({"model": "curve", "path": "no/such/file.yaml"})


def _trace(name):
    path = TRACES / name
    if not path.exists():
        pytest.skip(f"{path} not available")
    return path


def test_curve_from_a_trace_file_by_key_path():
    path = _trace("dsv4_mtp.yaml")
    model = acceptance_from_config({"model": "curve", "path": str(path),
                                    "key": "deepseek-v4-pro/thinking_off"})
    assert model.lengths[:2] == (1.92, 2.61)             # the file's first two points
    assert 1 + model.expected_accepted(1) == pytest.approx(1.92)
    # Relative paths: under the scenario's folder (base_dir), else the project root.
    by_base = acceptance_from_config({"model": "curve", "path": "acceptance/dsv4_mtp.yaml",
                                      "key": "deepseek-v4-pro/thinking_off"},
                                     base_dir=path.parent.parent)
    by_root = acceptance_from_config({"model": "curve",
                                      "path": "../shared/traces/acceptance/dsv4_mtp.yaml",
                                      "key": "deepseek-v4-pro/thinking_off"})
    assert by_base.lengths == by_root.lengths == model.lengths
    with pytest.raises(SpecsimError, match="thinking_on"):
        acceptance_from_config({"model": "curve", "path": str(path)})
    with pytest.raises(SpecsimError, match="thinking_maybe"):
        acceptance_from_config({"model": "curve", "path": str(path),
                                "key": ["deepseek-v4-pro", "thinking_maybe"]})


def test_every_shipped_curve_fits_within_its_reported_error():
    files = sorted(_trace("dsv4_mtp.yaml").parent.glob("*.yaml"))
    for file in files:
        for leaf in _leaf_paths(load_yaml_file(file)):
            measured = load_curve(str(file), list(leaf))
            model = CurveAcceptance.from_lengths(measured)
            fitted = model.fitted_lengths
            assert np.all(np.diff(fitted) >= -1e-12)     # a positional AL never falls
            assert np.max(np.abs(fitted - measured)) == pytest.approx(model.max_fit_error)
            # Only curves whose AL falls with gamma (DSpark at gamma 7-8) miss by > 0.2.
            if np.all(np.diff(measured) > -0.1):
                assert model.max_fit_error < 0.2, (file.name, leaf)


@pytest.mark.parametrize("alpha", [0.05, 0.5, 0.7, 0.999])
@pytest.mark.parametrize("gamma", [1, 4, 7])
def test_the_geometric_counter_is_sample_chains_and_the_logarithms_count(alpha, gamma):
    # the chain stretch and the fused chain step count acceptances with the counter an iid
    # model binds once (thresholds 1 - alpha**j); they must be sample_chain's exactly, and
    # the count floor(log(1 - u) / log alpha) capped at gamma wherever a draw is not within
    # a rounding of a threshold (the two are equal in exact arithmetic)
    from simulator.acceptance.iid import IIDAcceptance
    from simulator.acceptance.sampling import geometric_counts, geometric_thresholds
    rng = np.random.default_rng(int(alpha * 1000) + gamma)
    count = IIDAcceptance(alpha).chain_counter(gamma)
    cut = 1.0 - alpha ** np.arange(1, gamma + 1)
    assert np.array_equal(geometric_thresholds(alpha, gamma), cut)
    compared = 0
    for shape in ((1,), (7,), (33,), (5, 17), (20_000,)):
        draws = rng.random(shape)
        draws.flat[0] = 0.0  # u = 1 - draw = 1: log 0, no accepted draft
        expected = geometric_counts(draws, np.full(shape, alpha), gamma)
        got = count(draws, np.arange(shape[-1]))
        assert got.dtype == np.int64 and got.shape == shape and got.flat[0] == 0
        clear = np.min(np.abs(draws[..., None] - cut), axis=-1) > 1e-12
        assert np.array_equal(got[clear], expected[clear])
        compared += int(clear.sum())
    assert compared > 20_000  # nearly every draw is clear of the thresholds
    # at a threshold the count includes it; one float below, it does not
    at = count(cut, None)
    below = count(np.nextafter(cut, 0.0), None)
    assert at.tolist() == list(range(1, gamma + 1))
    assert below.tolist() == list(range(0, gamma))
    # and what sample_chain draws for one iteration, from the same generator state
    ids = np.arange(40)
    a, b = np.random.default_rng(5), np.random.default_rng(5)
    chain = IIDAcceptance(alpha).sample_chain(np.full(40, gamma), np.zeros(40), ids, a)
    assert chain.dtype == np.int64 and np.array_equal(count(b.random(40), ids), chain)


def test_iid_sample_chain_caps_each_requests_gamma_and_matches_alpha_to_the_k():
    # per-request gammas against one threshold list (the longest): each count capped at its
    # own gamma; P(>= k accepted) = alpha**k (the i.i.d. model's survival), 200k draws
    from simulator.acceptance.iid import IIDAcceptance
    alpha, n = 0.6, 200_000
    gammas = np.tile(np.array([0, 1, 3, 6], np.int64), n // 4)
    got = IIDAcceptance(alpha).sample_chain(gammas, np.zeros(n), np.arange(n),
                                           np.random.default_rng(11))
    assert got.dtype == np.int64 and np.all(got <= gammas) and np.all(got >= 0)
    six = got[gammas == 6]
    for k in range(1, 7):
        p = alpha ** k
        se = np.sqrt(p * (1 - p) / six.size)
        assert abs(np.mean(six >= k) - p) < 5 * se, k
    three = got[gammas == 3]
    assert abs(np.mean(three == 3) - alpha ** 3) < 5 * np.sqrt(alpha ** 3 / three.size)


def test_the_geometric_counter_gives_way_at_alpha_0_and_1():
    # log 0 and log 1 need geometric_counts' guards: no counter there
    from simulator.acceptance.iid import IIDAcceptance
    assert IIDAcceptance(0.0).chain_counter(4) is None
    assert IIDAcceptance(1.0).chain_counter(4) is None
