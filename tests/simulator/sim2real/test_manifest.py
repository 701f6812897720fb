"""``*.run.yaml`` manifests (simulator/sim2real/manifest.py): a ``vllm bench serve`` result
written from a known simulation replays with zero error; a default (non-detailed) file and a
published aggregate compare on the metrics they hold, and say so."""
import json

import numpy as np
import pytest
import yaml

from simulator.cli import main
from simulator.inputs.errors import SpecsimError
from simulator.sim2real.compare import compare_run, run_scenario
from simulator.sim2real.manifest import read_manifest
from simulator.simulate import simulate
from workloads.workload import Workload

MANIFEST = {"kind": "vllm_bench_serve", "result": "result.json", "model": "llama-2-7b",
            "hardware": "h100-sxm", "tensor_parallel": 1, "engine": "vLLM 0.11.0",
            "batching": {"max_num_seqs": 64, "max_num_batched_tokens": 2048},
            "measured_at": "server"}  # written from the simulated engine interval


def _known_result(tmp_path, detailed=True):
    """Simulate 40 requests, write them as vllm bench serve --save-result [--save-detailed]
    would: per-request TTFT, ITLs (each request's decode time split evenly) and start_times."""
    rng = np.random.default_rng(0)
    wl = Workload(name="known", arrival_s=np.sort(rng.uniform(0, 8, 40)),
                  prompt_tokens=rng.integers(50, 900, 40), output_tokens=rng.integers(2, 200, 40))
    (tmp_path / "known.run.yaml").write_text(yaml.safe_dump(MANIFEST))
    req = simulate(run_scenario(_stub_run(wl), None), workload=wl).requests
    ttft, e2e, out = req["ttft_s"].to_numpy(), req["e2e_s"].to_numpy(), wl.output_tokens
    data = {"input_lens": wl.prompt_tokens.tolist(), "output_lens": out.tolist(),
            "request_rate": "inf", "mean_ttft_ms": float(ttft.mean() * 1e3)}
    if detailed:
        data.update(ttfts=ttft.tolist(), start_times=(wl.arrival_s + 100.0).tolist(),
                    itls=[[(e - t) / (n - 1)] * int(n - 1) for t, e, n in zip(ttft, e2e, out)])
    (tmp_path / "result.json").write_text(json.dumps(data))
    return tmp_path / "known.run.yaml"


def _stub_run(wl):
    from simulator.sim2real.measured_run import MeasuredRun, VLLM_BATCHING
    return MeasuredRun(name="known", model="llama-2-7b", hardware="h100-sxm",
                       tensor_parallel=1, batching={**VLLM_BATCHING, **MANIFEST["batching"]},
                       engine="x", workload=wl)


def test_a_result_written_from_a_known_simulation_replays_with_zero_error(tmp_path):
    run = read_manifest(_known_result(tmp_path))
    assert run.notes == ("per request (--save-detailed)",)
    table = compare_run(run, None).set_index("metric")
    for metric in ("ttft", "tpot", "e2e"):
        for stat in ("mean", "p50", "p90", "p99"):
            assert abs(table.loc[f"{metric}_{stat}_ms", "error_%"]) < 1e-6, (metric, stat)


def test_a_client_measurement_is_compared_with_the_frontend_added(tmp_path):
    """The same file declared as a client's: every predicted TTFT and E2E is the engine's
    plus vLLM's frontend latency of its prompt and of the requests in the engine at its
    arrival, exactly, so the means differ by its mean and TPOT (a difference of the two) not
    at all."""
    from simulator.engine.frontend import VLLM_V1_FRONTEND, running_at_arrival
    from simulator.sim2real.compare import run_scenario
    from simulator.simulate import simulate
    path = _known_result(tmp_path)
    server = compare_run(read_manifest(path), None).set_index("metric")["predicted"]
    path.write_text(yaml.safe_dump({**MANIFEST, "measured_at": "client"}))
    run = read_manifest(path)
    client = compare_run(run, None).set_index("metric")["predicted"]
    wl = run.workload
    e2e = simulate(run_scenario(run, None), workload=wl).requests["e2e_s"].to_numpy()
    running = running_at_arrival(wl.arrival_s, e2e)
    extra_ms = 1e3 * VLLM_V1_FRONTEND.latency_s(wl.prompt_tokens, running).mean()
    assert extra_ms > 4.2
    for metric in ("ttft_mean_ms", "e2e_mean_ms"):
        assert client[metric] - server[metric] == pytest.approx(extra_ms, rel=1e-9)
    assert client["tpot_mean_ms"] == pytest.approx(server["tpot_mean_ms"], rel=1e-12)


def test_a_default_file_compares_on_its_aggregates(tmp_path):
    run = read_manifest(_known_result(tmp_path, detailed=False))
    assert "aggregates" in run.notes[0]
    table = compare_run(run, None)
    assert table["metric"].tolist() == ["ttft_mean_ms"]  # all that file holds


def test_a_published_aggregate(tmp_path):
    m = {**MANIFEST, "kind": "published", "source": "a made-up figure for the test"}
    del m["result"]
    m["load"] = {"num_prompts": 50, "input_len": 512, "output_len": 64, "request_rate": 2}
    m["measured"] = {"mean_ttft_ms": 40.0, "median_tpot_ms": 7.0}
    (tmp_path / "pub.run.yaml").write_text(yaml.safe_dump(m))
    table = compare_run(read_manifest(tmp_path / "pub.run.yaml"), None)
    assert sorted(table["metric"]) == ["tpot_p50_ms", "ttft_mean_ms"]
    assert np.isfinite(table["predicted"].to_numpy(float)).all()


@pytest.mark.parametrize("change, field", [({"kind": "nope"}, "kind"),
                                           ({"tensor_parallel": 0}, "tensor_parallel"),
                                           ({"batching": {"max_seqs": 4}}, "batching.max_seqs"),
                                           ({"colour": 1}, "colour")])
def test_bad_manifests_name_the_field(tmp_path, change, field):
    (tmp_path / "bad.run.yaml").write_text(yaml.safe_dump({**MANIFEST, **change}))
    with pytest.raises(SpecsimError) as err:
        read_manifest(tmp_path / "bad.run.yaml")
    assert field in str(err.value)


def test_the_command_takes_a_manifest(tmp_path, capsys):
    path = _known_result(tmp_path)
    assert main(["validate-serving", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.strip().splitlines()[-1] == "median APE: TTFT 0.0% TPOT 0.0% E2E 0.0% over 1 runs"
