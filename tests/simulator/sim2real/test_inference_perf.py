"""The inference-perf experiment reader (simulator/sim2real/inference_perf.py) on a small
experiment directory written here, in the layout of github.com/inference-sim/training
(default_args/, commit ed5c1d2): exp-config.yaml, results/config.yaml and one
results/stage_N_lifecycle_metrics.json per load stage."""
import json

import numpy as np
import pytest

from simulator.cli import main
from simulator.inputs.errors import SpecsimError
from simulator.cli.validate_serving import MAX_RUNS
from simulator.sim2real.inference_perf import _PROMPT_IDS, _STRIDE, MAX_PROMPT_TOKENS, \
    QUANTILES, constant_arrivals, prompt_blocks, quantile_draw, read_inference_perf_runs
from workloads.workload import MAX_BLOCK_ID, MAX_REQUESTS

CONFIG = """\
api: {type: completion, streaming: true}
data:
  type: shared_prefix
  shared_prefix:
    num_groups: 3
    num_prompts_per_group: 4
    system_prompt_len: 40
    question_len: 60
    output_len: 9
load:
  type: constant
  interval: 1.0
  stages:
  - {rate: 2.0, duration: 10}
  - {rate: 5.0, duration: 4}
server:
  type: vllm
  ignore_eos: true
"""
EXP = ("model: meta-llama/Llama-2-7b-hf\ntensor_parallelism: 1\nmax_model_len: 4096\n"
       "max_num_batched_tokens: 2048\nmax_num_seqs: 128\napp: inference-perf\n")


def _dist(lo: float, hi: float, mean: float | None = None) -> dict:
    """Percentiles spread linearly from lo to hi."""
    out = {k: lo + (hi - lo) * q for k, q in QUANTILES.items()}
    out["mean"] = (lo + hi) / 2 if mean is None else mean
    return out


def _stage(count: int, ttft: float, e2e: float) -> dict:
    latency = {"time_to_first_token": _dist(ttft, ttft), "request_latency": _dist(e2e, e2e),
               "time_per_output_token": _dist(0.01, 0.01)}
    return {"load_summary": {"count": count}, "failures": {"count": 0},
            "successes": {"count": count, "latency": latency,
                          "prompt_len": _dist(101, 120), "output_len": _dist(9, 9)}}


def _write(folder, config=CONFIG, stages=(_stage(20, 0.02, 0.1), _stage(20, 0.03, 0.2))):
    (folder / "results").mkdir(parents=True)
    (folder / "exp-config.yaml").write_text(EXP)
    (folder / "results" / "config.yaml").write_text(config)
    for i, stage in enumerate(stages):
        (folder / "results" / f"stage_{i}_lifecycle_metrics.json").write_text(
            json.dumps(stage))
    return folder


@pytest.fixture
def experiment(tmp_path):
    return _write(tmp_path / "exp-llama-2-7b-tp1-general")


def test_each_stage_sends_rate_times_duration_requests(experiment):
    """ConstantLoadTimer: int(rate x duration) requests, the last sent at the stage's end;
    each stage replayed apart (inference-perf waits for a stage to finish)."""
    runs = read_inference_perf_runs(experiment)
    assert [len(r.workload) for r in runs] == [20, 20]
    for run, duration in zip(runs, (10, 4)):
        t = run.workload.arrival_s
        assert t[-1] == pytest.approx(duration) and t[0] > 0 and (np.diff(t) >= 0).all()
        assert (run.workload.output_tokens == 9).all()  # ignore_eos: max_tokens exactly
    assert runs[1].name.endswith("/stage_1") and runs[0].model == "meta-llama/Llama-2-7b-hf"
    assert runs[0].batching["max_num_batched_tokens"] == 2048


def test_constant_load_gaps_are_scaled_exponentials():
    """The gaps divided by the duration are exponential draws over their sum: the same
    generator's draws give them back exactly."""
    t = constant_arrivals(50, 25.0, np.random.default_rng(7))
    g = np.random.default_rng(7).exponential(1.0, 50)
    assert np.allclose(np.diff(t, prepend=0.0), g * 25.0 / g.sum())


def test_prompts_repeat_with_their_groups_blocks(experiment):
    """12 prompts (3 groups x 4) sent in a fixed shuffled order, request i the (i mod 12)th:
    a prompt's repeats have its length and blocks; the system prompt's two whole blocks
    of 16 (40 tokens) are shared by exactly the 4 prompts of a group."""
    wl = read_inference_perf_runs(experiment)[0].workload
    assert wl.hash_block_tokens == 16
    for i in range(8):
        assert wl.prompt_tokens[i] == wl.prompt_tokens[i + 12]
        assert np.array_equal(wl.prefix_hashes[i], wl.prefix_hashes[i + 12])
    first = [tuple(wl.prefix_hashes[i][:2]) for i in range(12)]
    assert sorted(first.count(k) for k in set(first)) == [4, 4, 4]
    third = {int(wl.prefix_hashes[i][2]) for i in range(12)}
    assert len(third) == 12  # the block holding the question is each prompt's own
    assert all(h.size == -(-n // 16) for h, n in zip(wl.prefix_hashes, wl.prompt_tokens))


def test_prompt_lengths_follow_the_measured_quantiles():
    """Drawn by the listed percentiles' quantile function: inside [min, max], and for
    percentiles spread linearly from 101 to 120, uniform: mean 110.5."""
    x = quantile_draw(_dist(101, 120), 20_000, np.random.default_rng(0))
    assert x.min() >= 101 and x.max() <= 120
    assert x.mean() == pytest.approx(110.5, abs=0.1)


def test_measured_statistics_in_ms_and_tpot_by_tokens(experiment):
    """TTFT and E2E from the stage file (s -> ms); mean TPOT (E2E - TTFT) / (9 - 1)."""
    runs = read_inference_perf_runs(experiment)
    m = runs[1].measured()
    assert m["ttft_mean_ms"] == pytest.approx(30.0) and m["e2e_p90_ms"] == pytest.approx(200)
    assert m["tpot_mean_ms"] == pytest.approx((200 - 30) / 8)


def test_same_seed_same_requests(experiment):
    a, b = (read_inference_perf_runs(experiment, seed=3)[1].workload for _ in range(2))
    assert np.array_equal(a.arrival_s, b.arrival_s)
    assert np.array_equal(a.prompt_tokens, b.prompt_tokens)


@pytest.mark.parametrize("old, new, field", [
    ("type: constant", "type: poisson", "load.type"),
    ("type: shared_prefix", "type: random", "data.type"),
    ("ignore_eos: true", "ignore_eos: false", "server.ignore_eos"),
    ("output_len: 9", "output_len: nine", "data.shared_prefix.output_len"),
    ("{rate: 5.0, duration: 4}", "{rate: -1, duration: 4}", "load.stages[1].rate")])
def test_bad_config_names_the_file_and_field(tmp_path, old, new, field):
    folder = _write(tmp_path / "x", config=CONFIG.replace(old, new))
    with pytest.raises(SpecsimError) as err:
        read_inference_perf_runs(folder)
    assert err.value.field == field and err.value.source.endswith("config.yaml")


def test_a_missing_or_malformed_stage_file_is_named(tmp_path):
    folder = _write(tmp_path / "x", stages=(_stage(20, 0.02, 0.1),))
    with pytest.raises(SpecsimError, match="stage 1's metrics are missing") as err:
        read_inference_perf_runs(folder)
    assert err.value.source.endswith("stage_1_lifecycle_metrics.json")
    (folder / "results" / "stage_1_lifecycle_metrics.json").write_text("{not json")
    with pytest.raises(SpecsimError, match="not JSON"):
        read_inference_perf_runs(folder)
    broken = _stage(20, 0.02, 0.1)
    del broken["successes"]["latency"]["request_latency"]["p90"]
    (folder / "results" / "stage_1_lifecycle_metrics.json").write_text(json.dumps(broken))
    with pytest.raises(SpecsimError) as err:
        read_inference_perf_runs(folder)
    assert err.value.field == "successes.latency.request_latency.p90"


def test_the_command_compares_every_stage(tmp_path, capsys):
    """A parent folder of experiments: one table per stage, then the headline."""
    _write(tmp_path / "a")
    assert main(["validate-serving", str(tmp_path), "--profile", "h100-sxm",
                 "--stats", "mean"]) == 0
    out = capsys.readouterr().out
    assert "a/stage_0:" in out and "a/stage_1:" in out
    assert out.strip().splitlines()[-1].endswith("over 2 runs")


def test_the_command_exits_2_on_a_bad_experiment(tmp_path, capsys):
    _write(tmp_path / "a", config=CONFIG.replace("type: constant", "type: poisson"))
    assert main(["validate-serving", str(tmp_path / "a"), "--profile", "h100-sxm"]) == 2
    err = capsys.readouterr().err
    assert "load.type" in err and "config.yaml" in err


def test_optional_note_fields_and_counts(tmp_path):
    """time_per_output_token and load_summary feed only a note: without them the stage is
    read; a count that is not a whole number is refused, naming it."""
    stage = _stage(20, 0.02, 0.1)
    del stage["load_summary"], stage["successes"]["latency"]["time_per_output_token"]
    runs = read_inference_perf_runs(_write(tmp_path / "a", stages=(stage, stage)))
    assert runs[0].notes[0].startswith("20 requests (rate x duration), ? sent, 20 measured")
    stage["successes"]["count"] = float("nan")
    with pytest.raises(SpecsimError) as err:
        read_inference_perf_runs(_write(tmp_path / "b", stages=(stage, stage)))
    assert err.value.field == "successes.count"


def test_a_prompts_blocks_fit_its_stride():
    """Block ids of two prompts never collide: a prompt of MAX_PROMPT_TOKENS tokens has at
    most _STRIDE blocks, and every group's ids lie below the prompts'."""
    last = prompt_blocks(MAX_PROMPT_TOKENS, 0, 0, 0, 16)
    first_of_next = prompt_blocks(16, 0, 1, 0, 16)
    assert last.size == _STRIDE and last[-1] < first_of_next[0]
    assert MAX_REQUESTS * _STRIDE <= _PROMPT_IDS
    assert _PROMPT_IDS + MAX_REQUESTS * _STRIDE <= MAX_BLOCK_ID  # the prefix cache's bound


def test_batching_keys_reach_the_replay(tmp_path):
    folder = _write(tmp_path / "a")
    (folder / "exp-config.yaml").write_text(
        EXP + "enable_prefix_caching: false\ngpu_memory_utilization: 0.8\nblock_size: 16\n")
    batching = read_inference_perf_runs(folder)[0].batching
    assert not batching["enable_prefix_caching"]
    assert batching["gpu_memory_utilization"] == 0.8 and batching["block_size"] == 16


def test_runs_are_counted_after_the_stages(tmp_path, capsys):
    """MAX_RUNS counts runs: one experiment of MAX_RUNS + 1 stages is refused."""
    stages = "".join("  - {rate: 1.0, duration: 1}\n" for _ in range(MAX_RUNS + 1))
    config = CONFIG.replace("  - {rate: 2.0, duration: 10}\n  - {rate: 5.0, duration: 4}\n",
                            stages)
    _write(tmp_path / "a", config=config, stages=[_stage(1, 0.02, 0.1)] * (MAX_RUNS + 1))
    assert main(["validate-serving", str(tmp_path / "a"), "--profile", "h100-sxm"]) == 2
    assert f"more than {MAX_RUNS} runs" in capsys.readouterr().err
