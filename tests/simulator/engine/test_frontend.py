"""The serving frontend (simulator/engine/frontend.py): a client-measured run is compared
with the engine interval plus the frontend's latency, exactly; an idle server's client TTFT
is its server TTFT plus that latency; nothing of it depends on fast-forward or on more than
the seed."""
import dataclasses

import numpy as np
import pytest

from simulator.engine.frontend import (NO_FRONTEND, VLLM_V1_FRONTEND, Frontend, frontend_for,
                                       running_at_arrival)
from simulator.inputs.errors import SpecsimError
from simulator.scenario import EngineOptions
from simulator.sim2real.compare import predict, run_scenario
from simulator.sim2real.measured_run import VLLM_BATCHING, MeasuredRun
from simulator.simulate import simulate
from tests.simulator.engine.test_fast_forward import assert_identical
from workloads.workload import Workload


def _run(wl: Workload, measured_at: str, engine: str = "vLLM 0.11.0") -> MeasuredRun:
    return MeasuredRun(name="t", model="llama-2-7b", hardware="h100-sxm", tensor_parallel=1,
                       batching=dict(VLLM_BATCHING), engine=engine, workload=wl,
                       measured_at=measured_at)


def _poisson(seed: int, n: int = 60) -> Workload:
    rng = np.random.default_rng(seed)
    return Workload(name="p", arrival_s=np.cumsum(rng.exponential(0.05, n)),
                    prompt_tokens=rng.integers(20, 2000, n),
                    output_tokens=rng.integers(2, 80, n))


def test_an_idle_server_adds_the_fixed_and_per_token_latency_exactly():
    """One request on an idle server: client TTFT = server TTFT + 4.21 ms + 1.815 us per
    prompt token (the measured line), and client E2E = server E2E + the same."""
    prompt = 3000
    wl = Workload(name="one", arrival_s=np.zeros(1), prompt_tokens=np.array([prompt]),
                  output_tokens=np.array([16]))
    server, _ = predict(_run(wl, "server"), None)
    client, _ = predict(_run(wl, "client"), None)
    extra_ms = 4.21 + 1.815e-3 * prompt
    assert client["ttft_mean_ms"] - server["ttft_mean_ms"] == pytest.approx(extra_ms, rel=1e-9)
    assert client["e2e_mean_ms"] - server["e2e_mean_ms"] == pytest.approx(extra_ms, rel=1e-9)
    assert client["tpot_mean_ms"] == pytest.approx(server["tpot_mean_ms"], rel=1e-12)


def test_under_load_every_request_is_shifted_by_its_own_prompt():
    """Per request, not on average: each percentile of a client run is that of the shifted
    per-request values (the shift differs by prompt), and the ITLs are untouched."""
    wl = _poisson(1)
    server_req = simulate(run_scenario(_run(wl, "server"), None), workload=wl).requests
    ttft, e2e = VLLM_V1_FRONTEND.client_view(server_req["ttft_s"], server_req["e2e_s"],
                                             wl.prompt_tokens, wl.arrival_s)
    client, _ = predict(_run(wl, "client"), None)
    server, _ = predict(_run(wl, "server"), None)
    assert client["ttft_p90_ms"] == pytest.approx(1e3 * np.quantile(ttft, 0.9), rel=1e-12)
    assert client["e2e_p50_ms"] == pytest.approx(1e3 * np.quantile(e2e, 0.5), rel=1e-12)
    assert client["itl_mean_ms"] == server["itl_mean_ms"]


def test_the_load_term_counts_the_requests_in_the_engine_at_each_arrival():
    """running_at_arrival against a direct count (start <= t < start + e2e, less the request
    itself), ties included; the load term adds 0.060 ms per running request exactly."""
    rng = np.random.default_rng(4)
    start = np.round(rng.uniform(0, 5, 200), 1)  # rounded: arrivals and finishes tie
    e2e = np.round(rng.uniform(0.1, 2, 200), 1)
    count = np.array([int(((start <= t) & (start + e2e > t)).sum()) - 1 for t in start])
    assert np.array_equal(running_at_arrival(start, e2e), count) and count.max() > 20
    prompt = rng.integers(20, 2000, 200)
    loaded = VLLM_V1_FRONTEND.client_view(np.zeros(200), e2e, prompt, start)
    idle = VLLM_V1_FRONTEND.client_view(np.zeros(200), e2e, prompt)
    assert np.allclose(loaded[0] - idle[0], 60e-6 * count, rtol=0, atol=1e-15)
    assert np.allclose(loaded[1] - loaded[0], idle[1] - idle[0], rtol=0, atol=1e-12)


def test_an_engine_not_priced_adds_nothing():
    assert frontend_for("vLLM 0.11.0") is VLLM_V1_FRONTEND
    assert frontend_for("vLLM 0.14-0.15 (inference-sim/vllm)") is VLLM_V1_FRONTEND
    assert frontend_for("vllm-v0.15.1") is VLLM_V1_FRONTEND
    for engine in ("vllm", "vLLM 0.7.3", "vLLM 0.6.0", "vLLM 0.16.0", "vLLM 1.11"):
        assert frontend_for(engine) is NO_FRONTEND, engine  # not where it was measured
    assert frontend_for("SGLang 0.4.1") is NO_FRONTEND
    wl = _poisson(2, 10)
    a, _ = predict(_run(wl, "client", engine="SGLang 0.4.1"), None)
    b, _ = predict(_run(wl, "server", engine="SGLang 0.4.1"), None)
    assert a == b


def test_negative_latencies_are_refused():
    with pytest.raises(ValueError):
        Frontend(fixed_s=-1e-3)
    with pytest.raises(ValueError):
        Frontend(per_prompt_token_s=float("nan"))
    with pytest.raises(ValueError):
        Frontend(per_running_s=-1e-6)


def test_fast_forward_and_seed_give_identical_client_latencies():
    wl = _poisson(3)
    sc = run_scenario(_run(wl, "client"), None)
    on, off = (simulate(dataclasses.replace(sc, engine=EngineOptions(fast_forward=ff)),
                        workload=wl) for ff in (True, False))
    assert_identical(on, off)
    views = [VLLM_V1_FRONTEND.client_view(r.requests["ttft_s"], r.requests["e2e_s"],
                                          wl.prompt_tokens, wl.arrival_s) for r in (on, off)]
    assert all(np.array_equal(x, y) for x, y in zip(*views))
    first, _ = predict(_run(wl, "client"), None)
    again, _ = predict(_run(_poisson(3), "client"), None)
    assert first == again


def test_a_client_run_without_a_measured_frontend_says_so():
    wl = _poisson(2, 10)
    note = _run(wl, "client", engine="vLLM 0.7.3").report_notes()[-1]
    assert "no measured frontend for 'vLLM 0.7.3'" in note
    assert _run(wl, "server", engine="vLLM 0.7.3").report_notes() == ()
    assert _run(wl, "client", engine="vLLM 0.11.0").report_notes() == ()
    with pytest.raises(SpecsimError) as err:
        _run(wl, "proxy", engine="vLLM 0.11.0")
    assert err.value.field == "measured_at"
