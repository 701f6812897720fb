"""``staged``: both drafting levels priced round by round; the outer acceptance unchanged."""
import numpy as np
import pytest

from hardware.profile import load_profile
from simulator.acceptance import acceptance_from_config
from simulator.cost.cost_model import CostModel
from simulator.cost.drafting import chain_draft_time
from simulator.engine.plan import BatchView
from simulator.inputs.errors import SpecsimError
from simulator.models.spec import load_model
from simulator.policies.base import PolicyContext
from simulator.policies.staged import StagedSpeculation
from simulator.scenario import load_scenario, parse_policy
from simulator.simulate import build_deployment, simulate
from simulator.speculation.closed_forms import expected_tokens

HW = load_profile("a100-40gb")
TARGET = CostModel(HW, load_model("opt-13b"))
# drafts run inside the target's engine step: no host step time of their own
D1 = CostModel(HW, load_model("opt-1.3b"), host=False)
D2 = CostModel(HW, load_model("opt-125m"), host=False)


def make(params, alpha=0.8):
    p = StagedSpeculation.parse_params({"num_speculative_tokens": 6,
                                        "inner_speculative_tokens": 3, **params}, source="t")
    ctx = PolicyContext(target_cost=TARGET, draft_cost=D1,
                        acceptance=acceptance_from_config({"model": "iid", "alpha": alpha}))
    return StagedSpeculation(p, ctx)


def batch(n, context=400):
    return BatchView(request_ids=np.arange(n), context=np.full(n, context, np.int64),
                     generated=np.ones(n, np.int64), output_len=np.full(n, 10**6),
                     prompt_len=np.full(n, context), batch_size=n, now_s=0.0)


def _round(ctx, k):
    """One inner round by hand: k draft2 decodes, then one draft forward over k + 1 tokens."""
    ones = np.ones(ctx.size)
    return sum(D2.step_time(ones, ctx + j) for j in range(k)) + \
        D1.step_time(np.full(ctx.size, k + 1.0), ctx, np.full(ctx.size, k + 1.0))


def test_inner_alpha_one_needs_two_rounds():
    # gamma 6, gamma2 3: round 1 drafts 3 and keeps 3 + 1; round 2 drafts 1 and keeps 1 + 1
    pol = make({"draft2": "opt-125m", "inner_alpha": 1.0})
    ctx = np.array([400.0, 90.0])
    gpu, cpu, rounds = pol.draft_time(ctx, np.arange(2), np.random.default_rng(0))
    assert rounds == 2 and cpu == 0.0
    assert gpu == pytest.approx(_round(ctx, 3) + _round(ctx + 4, 1), rel=1e-12)


def test_inner_alpha_zero_needs_one_round_per_token():
    pol = make({"draft2": "opt-125m", "inner_alpha": 0.0})
    ctx = np.array([300.0])
    gpu, _, rounds = pol.draft_time(ctx, np.arange(1), np.random.default_rng(0))
    ks = [3, 3, 3, 2, 1, 0]                    # min(gamma2, still needed - 1)
    assert rounds == 6
    assert gpu == pytest.approx(sum(_round(ctx + r, k) for r, k in enumerate(ks)), rel=1e-12)


@pytest.mark.parametrize("draft2", ["opt-125m", "ngram"])
def test_few_requests_on_python_numbers_match_the_arrays(draft2):
    # whole-number contexts of a few requests take the rounds on Python numbers, the same
    # contexts as floats the array loop: the same rounds, draws and bits either way
    pol = make({"draft2": draft2, "inner_alpha": 0.6, "ngram_lookup_s": 1e-5})
    for seed in range(40):
        rng = np.random.default_rng(seed)
        ctx = rng.integers(1, 3000, int(rng.integers(1, 9)))
        fast, slow = np.random.default_rng(seed), np.random.default_rng(seed)
        got = pol.draft_time(ctx, np.arange(ctx.size), fast)
        assert got == pol.draft_time(ctx.astype(np.float64), np.arange(ctx.size), slow)
        assert fast.random() == slow.random()  # as many uniforms drawn


def test_ngram_second_stage_costs_cpu_lookups_only():
    pol = make({"inner_alpha": 1.0, "ngram_lookup_s": 1e-5})
    ctx = np.array([200.0, 200.0, 500.0])
    gpu, cpu, _ = pol.draft_time(ctx, np.arange(3), np.random.default_rng(0))
    assert cpu == pytest.approx(1e-5 * (3 + 1) * 3)
    four, two = np.full(3, 4.0), np.full(3, 2.0)
    assert gpu == pytest.approx(D1.step_time(four, ctx, four) + D1.step_time(two, ctx + 4, two),
                                rel=1e-12)


def test_staging_pays_when_draft2_agrees_and_not_when_it_never_does():
    ctx = np.array([400.0])
    chain = chain_draft_time(D1, ctx, np.array([6]))
    rng = np.random.default_rng(7)
    good = make({"inner_alpha": 0.7})
    mean_good = np.mean([good.draft_time(ctx, np.arange(1), rng)[0] for _ in range(300)])
    assert mean_good < 0.7 * chain
    useless = make({"inner_alpha": 0.0})
    assert useless.draft_time(ctx, np.arange(1), rng)[0] >= chain


def test_outer_acceptance_is_the_chains():
    pol = make({})
    assert pol.expected_accepted() == pytest.approx(expected_tokens(0.8, 6) - 1.0)
    b = batch(20000)
    got = pol.accept(pol.propose(b, np.random.default_rng(0)), b, np.random.default_rng(1))
    assert abs(got.mean() - (expected_tokens(0.8, 6) - 1.0)) < 4 * got.std() / np.sqrt(got.size)


def test_default_inner_alpha_is_the_scenarios_first_position_rate():
    assert make({}, alpha=0.65).inner.alpha == pytest.approx(0.65)


def test_memory_plan_holds_both_drafts():
    dep = build_deployment(load_scenario("workloads/scenarios/staged.yaml"))
    models = [load_model(n) for n in ("opt-13b", "opt-1.3b", "opt-125m")]
    assert dep.memory.weight_bytes == pytest.approx(sum(m.weight_bytes() for m in models))
    assert dep.memory.kv_bytes_per_token == pytest.approx(
        sum(m.kv_bytes_per_token() for m in models))


@pytest.mark.parametrize("params, field", [
    ({"num_speculative_tokens": 0}, "policy.num_speculative_tokens"),
    ({"inner_alpha": 1.5}, "policy.inner_alpha"),
    ({"inner_gamma": 2}, "policy.inner_gamma"),
    ({"draft2": 3}, "policy.draft2"),
])
def test_bad_parameters_name_the_field(params, field):
    with pytest.raises(SpecsimError) as err:
        parse_policy({"name": "staged", **params}, "test")
    assert field in str(err.value)


@pytest.mark.parametrize("name", ["no-such-model", "medusa-vicuna-7b"])
def test_bad_second_stage_models_name_the_field(name):
    with pytest.raises(SpecsimError) as err:
        make({"draft2": name})
    assert err.value.field == "policy.draft2"


def test_shipped_scenario_runs():
    res = simulate(load_scenario("workloads/scenarios/staged.yaml"))
    assert (res.requests["status"] == "finished").all()
    dec = res.steps[res.steps["num_decode"] > 0]
    assert (dec["draft_tokens"] == 6 * dec["num_decode"]).all()
    assert (dec["draft_s"] > 0).all()
    tau = res.summary()["mean_acceptance_length"]
    assert 1.0 < tau <= 7.0


@pytest.mark.parametrize("draft2", ["opt-125m", "ngram"])
def test_draws_ahead_are_the_iterations_own(draft2):
    # a stretch of a few requests takes an iteration's inner and outer uniforms from a list
    # drawn ahead (DrawnDraft, BatchDraws): the same seconds and counts as the generator's
    # own calls, as many uniforms taken, wherever in the list they start
    pol = make({"draft2": draft2, "inner_alpha": 0.6, "ngram_lookup_s": 1e-5})
    pol.chain_stretch()
    for seed in range(40):
        pick = np.random.default_rng(seed + 100)
        n, skip = int(pick.integers(1, 9)), int(pick.integers(0, 5))
        ctx, ids = pick.integers(1, 3000, n), np.arange(n)
        own = np.random.default_rng(seed)
        own.random(skip)
        want = pol.iteration_draft_s(ids, ctx, np.ones(n), own)
        want_counts = pol.draw_accepted(own, ids, ctx).tolist()
        draws = np.random.default_rng(seed).random(skip + pol.gamma * n + n).tolist()
        got, used = pol.drawn_draft_s(n).price(ctx.tolist(), draws, skip)
        counts, taken = pol.batch_draws(n).ahead(draws, skip + used)
        assert (got, counts) == (want, want_counts) and taken == n
        assert draws[skip + used + n] == own.random()  # the next uniform: as many taken


def test_draws_ahead_only_where_both_levels_walk_lists():
    assert make({}).drawn_draft_s(9) is None and make({}).batch_draws(9) is None
    assert make({}, alpha=1.0).batch_draws(3) is None  # no outer thresholds
    assert make({"inner_alpha": 1.0}).drawn_draft_s(3) is None  # no inner thresholds


@pytest.mark.parametrize("overrides", [[], ["policy.draft2=ngram"],
                                       ["workload.max_requests=30", "batching.max_num_seqs=4"]])
def test_fast_forward_is_the_step_by_step_path(overrides):
    from tests.simulator.engine.test_fast_forward import identical_or_unservable
    sc = load_scenario("workloads/scenarios/staged.yaml", overrides)
    assert identical_or_unservable(sc) is not None
