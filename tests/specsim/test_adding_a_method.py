"""docs/adding-a-method.md, run as written: its policy file, loaded from the page alone and
registered as the page says, parses from YAML, refuses bad parameters by field, prices its
draft as the page's closed form says, and advances on the engine's fast path with tables
identical to the step-by-step reference."""
from __future__ import annotations

import dataclasses
import re
import types

import numpy as np
import pytest
import yaml

from simulator.cost.spec_host import SpecCharge
from simulator.cost.spec_work import SpecWork
from simulator.inputs.errors import SpecsimError
from simulator.policies import registry
from simulator.run_setup import build_deployment
from simulator.scenario import EngineOptions, load_scenario, scenario_from_dict
from simulator.simulate import simulate
from tests.helpers import REPO, workload
from tests.simulator.engine.test_fast_forward import assert_identical

PAGE = REPO / "docs" / "adding-a-method.md"


def page_blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)


@pytest.fixture
def layer_skip(monkeypatch):
    """The page's policy class, registered in POLICIES as its section 3 says."""
    module = types.ModuleType("layer_skip_from_the_page")
    exec(compile(page_blocks("python")[0], str(PAGE), "exec"), module.__dict__)
    cls = module.LayerSkipSpeculation
    monkeypatch.setitem(registry.POLICIES, cls.name, cls)
    return cls


def page_scenario(**engine):
    """The built-in scenario (OPT-13B on an A100-40GB) with the page's YAML policy block."""
    block = yaml.safe_load(page_blocks("yaml")[0])
    raw = {**load_scenario().raw, **block}
    raw.pop("draft", None)
    sc = scenario_from_dict(raw, source="page")
    return dataclasses.replace(sc, engine=EngineOptions(**engine)) if engine else sc


def small_workload(n=60, seed=3):
    rng = np.random.default_rng(seed)
    return workload(np.sort(rng.uniform(0, 3, n)), rng.integers(16, 400, n),
                    rng.integers(20, 200, n))


def test_the_page_policy_runs_on_the_fast_path_exactly(layer_skip):
    wl = small_workload()
    on, off = (simulate(page_scenario(fast_forward=ff), workload=wl) for ff in (True, False))
    assert_identical(on, off)
    assert off.info["engine"]["vectorised"] == 0
    assert on.info["engine"]["vectorised"] > on.info["engine"]["iterations"] / 4
    assert on.steps["accepted_tokens"].nunique() > 3   # acceptance really drawn


def test_its_draft_is_the_share_of_the_targets_chain_of_decodes(layer_skip):
    sc = page_scenario(fast_forward=False)
    target = build_deployment(sc).target_cost   # the cost model simulate prices with
    share = 6 / target.model.num_layers      # the YAML block's draft_layers
    wl = small_workload(n=1)                 # one request: every decode step is n = 1
    out = simulate(sc, workload=wl)
    decode = out.steps[(out.steps["prefill_tokens"] == 0) & (out.steps["draft_s"] > 0)]
    row = decode.iloc[0]
    # the forward reads its context plus the tokens it verifies
    ctx = np.array([float(row["kv_read_tokens"] - row["decode_tokens"])])
    chain = sum(target.step_time(np.ones(1), ctx + j) for j in range(3))
    # the engine's host work of 3 draft forwards for one drafting request
    host = SpecCharge(target.execution, SpecWork(draft_forwards=3))(1)
    assert chain > 0
    assert row["draft_s"] == pytest.approx(share * chain + host, rel=1e-9)
    later = decode.iloc[-1]                  # its context grew: the draft costs more
    assert later["draft_s"] >= row["draft_s"]


@pytest.mark.parametrize("policy, field", [
    ({"name": "layer_skip", "draft_layers": 40}, "policy.draft_layers"),
    ({"name": "layer_skip", "draft_layers": -1}, "draft_layers"),
    ({"name": "layer_skip", "num_speculative_tokens": 0}, "num_speculative_tokens"),
    ({"name": "layer_skip", "exit_layer": 4}, "exit_layer"),
])
def test_bad_parameters_name_their_field(layer_skip, policy, field):
    raw = {**load_scenario().raw, "policy": policy, "acceptance": {"model": "iid",
                                                                   "alpha": 0.6}}
    raw.pop("draft", None)
    with pytest.raises(SpecsimError) as err:
        sc = scenario_from_dict(raw, source="page")
        simulate(sc, workload=small_workload(n=2))
    assert field in str(err.value)
