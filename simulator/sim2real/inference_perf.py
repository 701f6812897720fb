"""An inference-perf experiment (github.com/kubernetes-sigs/inference-perf) as measured runs,
one per load stage: ``exp-config.yaml`` (the vLLM server's model, tensor parallelism and
batching knobs), ``results/config.yaml`` (the load generator's resolved configuration: what
it ran) and ``results/stage_N_lifecycle_metrics.json`` (each stage's measured aggregates).

The requests are rebuilt as inference-perf made them (its source at commit e60b98d, the last
before these runs, is cited line by line below):

- ``constant`` load (loadgen/load_timer.py, ConstantLoadTimer): a stage sends
  ``int(rate * duration)`` requests whose gaps are exponential draws scaled to sum to the
  duration exactly (Poisson arrivals conditioned on their count);
- a stage starts only once every request of the one before has finished
  (loadgen/load_generator.py, run_stage: "Wait until all requests are finished"), so each
  stage is replayed on its own, from an idle server;
- ``shared_prefix`` data (datagen/shared_prefix_datagen.py): ``num_groups`` system prompts
  of ``system_prompt_len`` random tokens, ``num_prompts_per_group`` questions each; the
  prompts are shuffled once and request i sends prompt ``i % prompts`` (load_lazy_data), so
  every prompt repeats: its blocks are declared as Mooncake-style block ids (one per vLLM
  block), the system prompt's whole blocks shared by its group, the rest by the prompt's
  repeats;
- prompt lengths: the client counts each prompt's tokens with the model's tokenizer
  (apis/completion.py: ``count_tokens(self.prompt)``); each prompt's length is drawn from
  stage 0's measured ``prompt_len`` quantiles (linear between the listed percentiles,
  nothing beyond them is assumed): the prompts are made once and every stage sends the
  same ones, so every stage's file lists the same percentiles (default_args' do);
- output lengths: the server ignores EOS (``server.ignore_eos``), so vLLM generates exactly
  ``max_tokens = output_len`` tokens; the measured ``output_len`` is the client's
  re-tokenisation of the streamed text and is not used.

Measured statistics compared (seconds in the files, ms here): TTFT (first streamed event),
E2E (``request_latency``), over the stage's successful requests; both are the client's
(client/modelserver/openai_client.py: ``time.perf_counter()`` before ``session.post`` to
each SSE event's arrival, apis/completion.py), so they are compared with the simulated
engine interval plus vLLM's frontend (simulator/engine/frontend.py).  inference-perf's
``time_per_output_token`` divides by the number of streamed *events* less one
(reportgen/base.py), not of tokens, so the TPOT compared is vLLM's, (E2E - TTFT) /
(output - 1), whose mean is exactly (mean E2E - mean TTFT) / (output_len - 1) when every
request has output_len tokens; its percentiles are not in the files.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np

from simulator.inputs.errors import SpecsimError
from simulator.inputs.json_text import loads
from simulator.inputs.yaml_io import as_bool, as_number, as_str, check_keys, \
    load_yaml_file, require_mapping
from simulator.sim2real.measured_run import VLLM_BATCHING, MeasuredRun
from workloads.workload import MAX_REQUESTS, Workload

CONFIG = "results/config.yaml"
STAGE = "results/stage_{}_lifecycle_metrics.json"
# the percentiles a lifecycle file lists, as quantiles (reportgen/base.py, summarize)
QUANTILES = {"min": 0.0, "p0.1": 0.001, "p1": 0.01, "p5": 0.05, "p10": 0.1, "p25": 0.25,
             "median": 0.5, "p75": 0.75, "p90": 0.9, "p95": 0.95, "p99": 0.99,
             "p99.9": 0.999, "max": 1.0}
STATS = {"mean": "mean", "median": "p50", "p90": "p90", "p99": "p99"}
SERIES = {"time_to_first_token": "ttft", "request_latency": "e2e"}
MAX_PROMPT_TOKENS = 1 << 20  # a prompt's length, at most (docs/limits.md)
_BLOCK = VLLM_BATCHING["block_size"]  # the replay's block (exp-config may not change it)
_STRIDE = MAX_PROMPT_TOKENS // _BLOCK  # block ids of one group or prompt: its blocks all fit
_PROMPT_IDS = _STRIDE << 20  # prompts' block ids, above every group's (groups < 2**20)
MAX_BLOCK_IDS = 50_000_000  # block ids over all prompts (400 MB of int64; docs/limits.md)
MAX_CONFIG_INT = MAX_REQUESTS * 100  # an exp-config / shared_prefix integer (docs/limits.md)
MAX_STAGE_BYTES = 64 * 2 ** 20  # a stage's lifecycle file larger than this is refused
# The server: inference-sim/training's experiments ran an instrumented vLLM (its README:
# "OTEL journey + step traces"; .gitignore: "instrumented vllm code"), built by
# github.com/inference-sim/vllm's Dockerfile.fork on vllm/vllm-openai v0.14.1, then v0.15.1
# (VLLM_BASE_VERSION); vLLM schedules asynchronously by default since v0.14.0 (its release
# notes: "Async scheduling is now enabled by default", PR #27614), so an experiment is
# replayed with async scheduling unless its exp-config.yaml says ``async_scheduling: false``
SERVER_ENGINE = "vLLM 0.14-0.15 (inference-sim/vllm)"


def is_inference_perf_run(path: Path) -> bool:
    return (path / "exp-config.yaml").is_file() and (path / CONFIG).is_file()


def _mapping(data: Mapping, key: str, src: str, prefix: str = "") -> Mapping[str, Any]:
    return require_mapping(data.get(key), source=src, field=prefix + key)


def _int(data: Mapping, key: str, src: str, prefix: str, minimum: int = 1) -> int:
    return int(as_number(data.get(key), source=src, field=prefix + key, minimum=minimum,
                         maximum=MAX_CONFIG_INT, integer=True))


EXP_KEYS = ("model", "tensor_parallelism", "max_num_seqs", "max_num_batched_tokens",
            "max_model_len", "async_scheduling", "block_size", "enable_prefix_caching",
            "enable_chunked_prefill", "gpu_memory_utilization", "app")
# results/config.yaml's sections (inference-perf's config.py, Config)
CONFIG_KEYS = ("api", "data", "load", "metrics", "report", "storage", "server", "tokenizer",
               "circuit_breakers")


def _server(folder: Path) -> dict:
    src = str(folder / "exp-config.yaml")
    cfg = require_mapping(load_yaml_file(folder / "exp-config.yaml"), source=src)
    check_keys(cfg, allowed=EXP_KEYS, source=src)
    batching = dict(VLLM_BATCHING)
    for key in ("max_num_seqs", "max_num_batched_tokens", "max_model_len"):
        if key in cfg:
            batching[key] = _int(cfg, key, src, "")
    for key in ("enable_prefix_caching", "enable_chunked_prefill"):
        batching[key] = as_bool(cfg.get(key, batching[key]), source=src, field=key)
    batching["gpu_memory_utilization"] = float(as_number(
        cfg.get("gpu_memory_utilization", batching["gpu_memory_utilization"]), source=src,
        field="gpu_memory_utilization", strictly_positive=True, maximum=1))
    if cfg.get("block_size", _BLOCK) != _BLOCK:
        raise SpecsimError(f"block_size {cfg['block_size']!r}: the replay's prompts are "
                           f"blocks of {_BLOCK} tokens (vLLM's default)", source=src,
                           field="block_size", fix=f"remove it or give {_BLOCK}")
    return {"model": as_str(cfg.get("model"), source=src, field="model"),
            "tensor_parallel": _int(cfg, "tensor_parallelism", src, "")
            if "tensor_parallelism" in cfg else 1, "batching": batching,
            "async_scheduling": as_bool(cfg.get("async_scheduling", True), source=src,
                                        field="async_scheduling")}


def _load(cfg: Mapping, src: str) -> list[tuple[float, int, int]]:
    load = _mapping(cfg, "load", src)
    as_str(load.get("type"), source=src, field="load.type", choices=("constant",))
    stages = load.get("stages")
    if not isinstance(stages, list) or not stages:
        raise SpecsimError("expected a list of stages (rate, duration)", source=src,
                           field="load.stages")
    out = []
    for i, stage in enumerate(stages):
        p = f"load.stages[{i}]."
        stage = require_mapping(stage, source=src, field=p[:-1])
        rate = float(as_number(stage.get("rate"), source=src, field=p + "rate",
                               strictly_positive=True))
        duration = _int(stage, "duration", src, p)
        n = int(rate * duration)  # ConstantLoadTimer: int(rate * duration)
        if not 1 <= n <= MAX_REQUESTS:
            raise SpecsimError(f"rate x duration gives {n:,} requests; expected 1 to "
                               f"{MAX_REQUESTS:,}", source=src, field=p + "rate")
        out.append((rate, duration, n))
    return out


def _data(cfg: Mapping, src: str) -> dict[str, int]:
    data = _mapping(cfg, "data", src)
    as_str(data.get("type"), source=src, field="data.type", choices=("shared_prefix",))
    sp = _mapping(data, "shared_prefix", src, "data.")
    p = "data.shared_prefix."
    for key in ("question_distribution", "output_distribution"):
        if sp.get(key) is not None:
            raise SpecsimError("length distributions are not supported", source=src,
                               field=p + key, fix="give fixed question_len and output_len")
    if as_bool(sp.get("enable_multi_turn_chat", False), source=src,
               field=p + "enable_multi_turn_chat"):
        raise SpecsimError("multi-turn chat is not supported", source=src,
                           field=p + "enable_multi_turn_chat")
    server = _mapping(cfg, "server", src)
    as_str(server.get("type"), source=src, field="server.type", choices=("vllm",))
    if not as_bool(_mapping(cfg, "api", src).get("streaming", False), source=src,
                   field="api.streaming"):
        raise SpecsimError("TTFT is measured only from a streamed response", source=src,
                           field="api.streaming", fix="run inference-perf with streaming: true")
    if not as_bool(server.get("ignore_eos", False), source=src, field="server.ignore_eos"):
        raise SpecsimError("the output lengths are known only when the server ignores EOS",
                           source=src, field="server.ignore_eos")
    out = {k: _int(sp, k, src, p) for k in ("num_groups", "num_prompts_per_group",
                                             "output_len")}
    if out["num_groups"] * out["num_prompts_per_group"] > MAX_REQUESTS:
        raise SpecsimError(f"{out['num_groups'] * out['num_prompts_per_group']:,} prompts "
                           f"(num_groups x num_prompts_per_group); at most {MAX_REQUESTS:,}",
                           source=src, field=p + "num_groups",
                           fix="fewer groups or prompts per group")
    out["system_prompt_len"] = _int(sp, "system_prompt_len", src, p, minimum=0)
    return out


def _stage_file(folder: Path, i: int) -> tuple[Mapping[str, Any], str]:
    path = folder / STAGE.format(i)
    src = str(path)
    if not path.is_file() or path.stat().st_size > MAX_STAGE_BYTES:
        raise SpecsimError(f"stage {i}'s metrics are missing (not a file of at most 64 MiB)",
                           source=src, fix="give inference-perf's per_stage lifecycle report")
    try:
        data = loads(path.read_text(encoding="utf-8"), source=src)
    except SpecsimError:
        raise  # nested too deeply
    except (ValueError, UnicodeDecodeError) as exc:
        raise SpecsimError(f"not JSON ({type(exc).__name__})", source=src) from None
    return require_mapping(data, source=src), src


def _distribution(data: Mapping, field: str, src: str) -> dict[str, float]:
    dist = require_mapping(data, source=src, field=field)
    out = {}
    for key in ("mean", *QUANTILES):
        out[key] = float(as_number(dist.get(key), source=src, field=f"{field}.{key}",
                                   minimum=0))
    return out


def _measured(stage: Mapping, src: str, output_len: int) -> dict[str, float]:
    """The stage's statistics in latency_metrics' names (ms), over its successes."""
    ok = _mapping(stage, "successes", src)
    latency = _mapping(ok, "latency", src, "successes.")
    out = {}
    for name, short_name in SERIES.items():
        dist = _distribution(latency.get(name), f"successes.latency.{name}", src)
        for stat, key in STATS.items():
            out[f"{short_name}_{key}_ms"] = dist[stat] * 1e3
    if output_len > 1:
        out["tpot_mean_ms"] = (out["e2e_mean_ms"] - out["ttft_mean_ms"]) / (output_len - 1)
    return out


def quantile_draw(dist: Mapping[str, float], n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` whole numbers drawn from the listed percentiles' quantile function (linear
    between them; none below the minimum or above the maximum)."""
    q = np.array(list(QUANTILES.values()))
    values = np.array([dist[k] for k in QUANTILES])  # non-decreasing: _prompt_lengths
    return np.rint(np.interp(rng.random(n), q, values)).astype(np.int64)


def constant_arrivals(n: int, duration: float, rng: np.random.Generator) -> np.ndarray:
    """ConstantLoadTimer: ``n`` exponential gaps scaled to sum to the stage's duration,
    their running sums the send times from the stage's start (the last at its end)."""
    gaps = rng.exponential(1.0, n)
    return np.cumsum(gaps * (duration / gaps.sum()))


def prompt_blocks(length: int, group: int, prompt: int, shared: int,
                  block: int) -> np.ndarray:
    """A prompt's block ids, one per ``block`` tokens: its group's for the blocks wholly in
    the system prompt (``shared`` tokens), its own for the rest."""
    j = np.arange(-(-length // block), dtype=np.int64)
    own = _PROMPT_IDS + prompt * _STRIDE + j
    return np.where((j + 1) * block <= shared, group * _STRIDE + j, own)


def _prompt_lengths(stage: Mapping, src: str) -> dict[str, float]:
    """The stage's ``prompt_len`` percentiles: each within 1 to MAX_PROMPT_TOKENS and none
    below the one before (a quantile function never decreases)."""
    field = "successes.prompt_len"
    dist = _distribution(_mapping(stage, "successes", src).get("prompt_len"), field, src)
    last = 1.0
    for key in QUANTILES:
        if not last <= dist[key] <= MAX_PROMPT_TOKENS:
            raise SpecsimError(f"{dist[key]:g} tokens; expected {last:g} (the percentile "
                               f"before, or 1) to {MAX_PROMPT_TOKENS:,}", source=src,
                               field=f"{field}.{key}",
                               fix="give the lifecycle report's measured prompt lengths")
        last = dist[key]
    return dist


def _prompts(data: dict[str, int], stage0: Mapping, src: str, block: int,
             rng: np.random.Generator) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """Each prompt's length and block ids, in the order the generator sends them.  Every
    stage sends the same prompts (made once, load_lazy_data), so their lengths are drawn
    once, from stage 0's percentiles (each stage's file lists the same ones)."""
    dist = _prompt_lengths(stage0, src)
    per = data["num_prompts_per_group"]
    count = data["num_groups"] * per  # at most MAX_REQUESTS: _data
    lengths = quantile_draw(dist, count, rng)
    total = int((-(-lengths // block)).sum())
    if total > MAX_BLOCK_IDS:
        raise SpecsimError(f"the prompts need {total:,} block ids; at most {MAX_BLOCK_IDS:,}",
                           source=src, field="successes.prompt_len",
                           fix="fewer prompts (data.shared_prefix in results/config.yaml) "
                               "or shorter ones")
    shared = data["system_prompt_len"]
    blocks = [prompt_blocks(int(n), p // per, p, shared, block)
              for p, n in enumerate(lengths.tolist())]
    order = rng.permutation(count)  # random.shuffle of the prompts, once
    return lengths[order], tuple(blocks[i] for i in order.tolist())


def _stage_notes(stage: Mapping, src: str, n: int, output_len: int) -> tuple[str, ...]:
    ok = _mapping(stage, "successes", src)
    counts = {}
    for part in ("load_summary", "successes", "failures"):
        block = stage.get(part)
        value = block.get("count") if isinstance(block, Mapping) else None
        counts[part] = "?" if value is None else int(as_number(
            value, source=src, field=f"{part}.count", minimum=0, integer=True))
    notes = [f"{n:,} requests (rate x duration), {counts['load_summary']} sent, "
             f"{counts['successes']} measured successes, {counts['failures']} failures"]
    lat = _mapping(ok, "latency", src, "successes.")
    tpot = lat.get("time_per_output_token")  # optional: only for this note
    tpot = tpot.get("mean") if isinstance(tpot, Mapping) else None
    e2e, ttft = (require_mapping(lat.get(k), source=src, field=k).get("mean")
                 for k in ("request_latency", "time_to_first_token"))
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
           for v in (tpot, e2e, ttft)):
        events = (e2e - ttft) / tpot / max(output_len - 1, 1)
        notes.append(f"{events:.2f} streamed events per token (inference-perf's TPOT "
                     "counts events); TPOT compared: mean (E2E - TTFT) / (output - 1)")
    return tuple(notes)


def read_inference_perf_runs(folder: str | Path, seed: int = 0) -> list[MeasuredRun]:
    """The experiment in ``folder``, one run per load stage (see the module docstring);
    every draw from one generator seeded with ``seed``."""
    folder = Path(folder)
    server = _server(folder)
    src = str(folder / CONFIG)
    cfg = require_mapping(load_yaml_file(folder / CONFIG), source=src)
    check_keys(cfg, allowed=CONFIG_KEYS, source=src)
    stages, data = _load(cfg, src), _data(cfg, src)
    files = [_stage_file(folder, i) for i in range(len(stages))]
    measured = [_measured(stage, s, data["output_len"]) for stage, s in files]
    rng = np.random.default_rng(seed)
    block = int(server["batching"]["block_size"])
    lengths, blocks = _prompts(data, files[0][0], files[0][1], block, rng)
    runs = []
    for i, ((_, duration, n), (stage, stage_src)) in enumerate(zip(stages, files)):
        which = np.arange(n) % lengths.size
        wl = Workload(name=f"{folder.name}/stage_{i}",
                      arrival_s=constant_arrivals(n, duration, rng),
                      prompt_tokens=lengths[which],
                      output_tokens=np.full(n, data["output_len"], np.int64),
                      prefix_hashes=tuple(blocks[j] for j in which.tolist()),
                      hash_block_tokens=block)
        runs.append(MeasuredRun(
            name=wl.name, model=server["model"], hardware=None,
            tensor_parallel=server["tensor_parallel"], batching=server["batching"],
            engine=SERVER_ENGINE, workload=wl, aggregates=measured[i], source=stage_src,
            notes=_stage_notes(stage, stage_src, n, data["output_len"]),
            measured_at="client", async_scheduling=server["async_scheduling"]))
    return runs
