"""``specsim plan --target M --hardware G --gpus N ...``: a capacity question in flags.

The question (a model, a GPU type and count, the traffic as input/output lengths or a trace,
a request rate or a client concurrency, p99 TTFT and TPOT targets, the methods to try)
becomes candidate deployments: every tensor-parallel degree that divides the GPUs within one
node (with and without expert parallelism for a mixture-of-experts target), the rest of the
GPUs as replicas, and each method at each draft length.  Each candidate is written as
``vllm serve`` engine arguments (vLLM's own names and Hugging Face ids) and turned into a
scenario by the same code as ``specsim run --vllm-args`` (simulator/vllm_args.py), so the
configuration the plan writes for its winner is, by construction, the one it simulated.
The search and the verdict are in simulator/planning/quick_search.py.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from simulator.inputs.errors import SpecsimError
from simulator.models.spec import ModelSpec, list_models, load_model
from simulator.vllm_config import hf_id

# The methods a flags-only plan tries, by vLLM's speculative_config method names (chain is
# specsim's name for vLLM's draft_model).  Model-free methods (ngram, suffix) need the
# prompts' token ids, which lengths alone do not give: plan them with a plan YAML.
QUICK_METHODS = ("none", "draft_model", "eagle", "eagle3", "mtp")
METHOD_ALIASES = {"chain": "draft_model", "deepseek_mtp": "mtp"}
DEFAULT_GAMMAS = (1, 2, 3, 4, 5)
# Limits (docs/limits.md): a node has at most 8 GPUs (the tensor-parallel group stays in
# one NVLink domain); the GPU count bounds the replicas each simulation runs.
MAX_NODE_GPUS = 8
MAX_QUICK_GPUS = 512
MAX_QUICK_REQUESTS = 20_000
DEFAULT_REQUESTS = 300
# --pareto's ladder of concurrencies ends here by default, and may reach at most the limit
# (each level runs 4 x its concurrency requests at least: pareto_search.py)
DEFAULT_PARETO_CONCURRENCY = 256
MAX_PARETO_CONCURRENCY = 1024
# closed-loop runs send every request at once (vllm bench serve --request-rate inf): the
# arrivals are 1 us apart, far below any step time, and the client holds them to C in flight
CLOSED_LOOP_RATE = 1e6
# an open loop holds a rate only with at most this much of its trace in flight at its last
# arrival (capacity.RateSearch's default max_in_flight_fraction)
OPEN_LOOP_BACKLOG = 0.25


@dataclass(frozen=True)
class Question:
    """A capacity question, validated (the CLI's flags)."""

    target: str                    # catalog name (a Hugging Face id is resolved to it)
    hardware: str
    gpus: int
    ttft_ms: float
    tpot_ms: float
    isl: int | None = None
    osl: int | None = None
    trace: str | None = None       # a trace path, or "default" (the shipped one)
    rate: float | None = None      # requests/s (open loop, Poisson for --isl/--osl)
    concurrency: int | None = None  # requests in flight (closed loop)
    methods: tuple[str, ...] | None = None  # None: none + every method the target has
    gammas: tuple[int, ...] = DEFAULT_GAMMAS
    requests: int = DEFAULT_REQUESTS
    seed: int = 0
    disagg: bool = False           # also prefill/decode disaggregated deployments (xPyD)

    @property
    def closed_loop(self) -> bool:
        return self.concurrency is not None


@dataclass(frozen=True)
class Shape:
    """One replica's parallelism: tensor parallel, expert parallel, and the data-parallel
    attention ranks (1: none; N: N GPUs, one attention rank each, the experts over all)."""

    tensor_parallel: int
    expert_parallel: bool = False
    data_parallel: int = 1

    @property
    def gpus(self) -> int:
        return self.tensor_parallel * self.data_parallel

    @property
    def name(self) -> str:
        if self.data_parallel > 1:
            return f"DP{self.data_parallel}+EP"
        return f"TP{self.tensor_parallel}" + ("+EP" if self.expert_parallel else "")


@dataclass(frozen=True)
class Candidate:
    """One deployment: its label, its ``vllm serve`` arguments (underscore names, vLLM's
    values), its replica count and the scenario it simulates as."""

    label: str
    method: str
    gamma: int
    shape: Shape
    replicas: int
    engine_args: Mapping[str, Any]
    payload: Mapping[str, Any]
    # a disaggregated deployment: shape, replicas and engine_args are its decode pool's,
    # these its prefill pool's (None: aggregated)
    prefill_shape: Shape | None = None
    prefill_replicas: int = 0
    prefill_engine_args: Mapping[str, Any] | None = None

    @property
    def disaggregated(self) -> bool:
        return self.prefill_shape is not None

    @property
    def devices(self) -> int:
        pre = 0 if self.prefill_shape is None else self.prefill_shape.gpus * self.prefill_replicas
        return self.shape.gpus * self.replicas + pre

    @property
    def layout(self) -> str:
        """``TP4 x2`` or, disaggregated, ``1P TP8 + 1D DP8+EP`` (prefill + decode)."""
        if self.prefill_shape is None:
            return f"{self.shape.name} x{self.replicas}"
        return (f"{self.prefill_replicas}P {self.prefill_shape.name} + "
                f"{self.replicas}D {self.shape.name}")

    @property
    def tensor_parallel(self) -> int:
        return self.shape.tensor_parallel

    @property
    def expert_parallel(self) -> bool:
        return self.shape.expert_parallel


def drafter(method: str, target: ModelSpec) -> str | None:
    """The catalog model ``method`` drafts with for ``target`` (None: the target's own MTP
    modules, or no speculation); an error naming the fix when the catalog has none."""
    if method in ("none", "mtp"):
        if method == "mtp" and not target.mtp_modules:
            raise SpecsimError(f"{target.name} has no MTP modules", field="--methods",
                               fix="drop mtp, or use a target with them (deepseek-v3)")
        return None
    if method == "draft_model":
        from simulator.models.default_draft import resolve_draft
        return resolve_draft(None, target, field="--methods")
    from simulator.models.default_draft import default_head
    head = default_head(method, target)
    if head is None:
        raise SpecsimError(f"no {method} head in the catalog for {target.name}",
                           field="--methods",
                           fix=f"drop {method}, or use a target the catalog has one for")
    return head.name


def methods_for(question: Question, target: ModelSpec) -> tuple[str, ...]:
    """The methods to try: those asked (each checked), else none + every one the catalog
    holds a drafter for."""
    if question.methods is not None:
        for m in question.methods:
            drafter(m, target)
        return question.methods
    found = ["none"]
    for m in QUICK_METHODS[1:]:
        try:
            drafter(m, target)
        except SpecsimError:
            continue
        found.append(m)
    return tuple(found)


def parse_methods(text: str) -> tuple[str, ...]:
    """``none,eagle3,mtp`` -> canonical names, distinct, in order; unknown names refused."""
    out: list[str] = []
    for raw in text.split(","):
        name = METHOD_ALIASES.get(raw.strip(), raw.strip())
        if name not in QUICK_METHODS:
            raise SpecsimError(f"unknown method {raw.strip()!r}", field="--methods",
                               fix=f"use any of {', '.join(QUICK_METHODS)} (chain is "
                                   "draft_model); ngram and suffix need a plan YAML")
        if name not in out:
            out.append(name)
    return tuple(out)


def workload_payload(q: Question) -> dict[str, Any]:
    """The scenario ``workload`` of the question: fixed lengths with Poisson arrivals at the
    rate, or the trace rescaled to it; closed loop: every request sent at once and held to
    the concurrency, as ``vllm bench serve --request-rate inf --max-concurrency C``."""
    rate = CLOSED_LOOP_RATE if q.closed_loop else q.rate
    if q.trace is not None:
        wl: dict[str, Any] = {"trace": q.trace, "max_requests": q.requests, "rate_per_s": rate}
    else:
        wl = {"synthetic": {"num_requests": q.requests,
                            "arrival": {"process": "poisson", "rate_per_s": rate},
                            "prompt": {"dist": "fixed", "tokens": q.isl},
                            "output": {"dist": "fixed", "tokens": q.osl}}}
    if q.closed_loop:
        wl["max_concurrency"] = q.concurrency
    return wl


def model_arg(target: ModelSpec) -> str:
    """``model``: the target's Hugging Face id, else its catalog name, else (the user's own
    model file, ``--target my-model.yaml``) that file's absolute path, which vllm_args
    reads back as the same model (and the user swaps for the checkpoint's path)."""
    if hf_id(target.name) or target.name in list_models():
        return hf_id(target.name) or target.name
    return str(Path(target.path).resolve())


def engine_args(target: ModelSpec, method: str, gamma: int, shape: Shape,
                replicas: int) -> dict[str, Any]:
    """The ``vllm serve`` arguments of one candidate, by vLLM's names and Hugging Face ids;
    the scheduler limits are written out (specsim's defaults; per data-parallel rank, as
    vLLM reads them) so that the deployment runs what was simulated."""
    from simulator.scenario import Batching
    b = Batching()
    args: dict[str, Any] = {"model": model_arg(target),
                            "tensor_parallel_size": shape.tensor_parallel,
                            "max_num_seqs": b.max_num_seqs,
                            "max_num_batched_tokens": b.max_num_batched_tokens,
                            "enable_chunked_prefill": b.enable_chunked_prefill,
                            "enable_prefix_caching": b.enable_prefix_caching,
                            "gpu_memory_utilization": b.gpu_memory_utilization}
    if shape.expert_parallel:
        args["enable_expert_parallel"] = True
    if shape.data_parallel > 1:  # data-parallel attention (vllm_args maps it back)
        args["data_parallel_size"] = shape.data_parallel
    elif replicas > 1 and not target.is_moe:
        # one `vllm serve` runs a dense model's replicas; a MoE model's data-parallel ranks
        # share its experts (not replicas): its replicas are separate servers (serve.sh)
        args["data_parallel_size"] = replicas
    if method != "none":
        spec: dict[str, Any] = {"method": method, "num_speculative_tokens": gamma}
        name = drafter(method, target)
        if name is not None:
            spec["model"] = hf_id(name) or name
        if method == "draft_model":
            spec.pop("method")  # vLLM infers it from a decoder model
        args["speculative_config"] = spec
    return args


def tp_options(q: Question, target: ModelSpec) -> list[Shape]:
    """Every power-of-two tensor-parallel degree dividing the GPUs up to one node; for a
    mixture-of-experts target, each TP > 1 also with expert parallelism, and data-parallel
    attention over each such power of two (one GPU per attention rank, the experts over
    all: SGLang's --enable-dp-attention, vLLM's --data-parallel-size with EP)."""
    out = []
    t = 1
    while t <= min(q.gpus, MAX_NODE_GPUS):
        if q.gpus % t == 0:
            out.append(Shape(t))
            if target.is_moe and t > 1:
                out += [Shape(t, True), Shape(1, True, t)]
        t *= 2
    return out


def question_target(q: Question) -> tuple[ModelSpec, dict[str, Any]]:
    """The target of the question, checked against its lengths, and the scenario fields
    every candidate shares (traffic, SLO, hardware, seed)."""
    target = load_model(q.target)
    if q.isl is not None and q.osl is not None and q.isl + q.osl > target.max_context:
        raise SpecsimError(f"--isl {q.isl:,} + --osl {q.osl:,} exceed {target.name}'s "
                           f"max_context {target.max_context:,}", field="--isl",
                           fix="shorten the requests, or ask about a longer-context model")
    return target, {"name": "plan", "seed": q.seed, "hardware": q.hardware,
                    "workload": workload_payload(q),
                    "slo": {"ttft_ms": q.ttft_ms, "tpot_ms": q.tpot_ms}}


def candidates(q: Question) -> list[Candidate]:
    """Every aggregated deployment the question allows, each with its scenario (not yet
    checked for memory: quick_search does that and reports what does not fit); with
    ``--disagg``, quick_disagg.all_candidates adds the disaggregated ones."""
    from simulator.vllm_args import apply_vllm_args, vllm_args_from_mapping
    target, base = question_target(q)
    from simulator.deployment import DP_ATTENTION_POLICIES
    out = []
    for shape in tp_options(q, target):
        replicas = q.gpus // shape.gpus
        for method in methods_for(q, target):
            if shape.data_parallel > 1 and method not in DP_ATTENTION_POLICIES:
                continue  # a separate draft is not modelled split over attention ranks
            for gamma in (0,) if method == "none" else q.gammas:
                args = engine_args(target, method, gamma, shape, replicas)
                label = f"{shape.name} x{replicas} {method}" + (f" k={gamma}" if gamma else "")
                payload = apply_vllm_args({**copy.deepcopy(base), "replicas": replicas},
                                          vllm_args_from_mapping(args, source=label))
                out.append(Candidate(label, method, gamma, shape, replicas, args, payload))
    return out
