"""The speculative iteration's host and framework work, per engine (``execution.engine``).

Every speculative iteration does work beside the draft and verification forwards: the
rejection sampler and the verification metadata, the proposer's input preparation and its
bookkeeping between draft forwards, building (and for a dynamic tree, reranking) the token
tree, and the device-to-host syncs the draft loop forces.  Measured from outside, engines'
speculative speedups ran above the cost model's forwards alone; this module prices that
work, per engine, from counts read in each engine's code at a named version
(``engines.yaml``, each number with its source), with the execution's own unit costs:

- an **eager kernel** (or host-to-device upload) launched outside any CUDA graph costs one
  ``kernel_launch_s`` of host time (the profile's eager launch cost);
- a **host op** on CPU tensors or Python per tree node costs the same dispatch;
- a **sync** (a ``.tolist()`` / ``.item()`` the next launch waits on) drains the GPU queue,
  so the host work that follows it -- one engine step's worth (``Execution.host_s``) --
  shows in full, whatever ``async_scheduling`` says;
- an **extra host step** (SGLang's draft extend as a batch of its own) costs the same;
- output processing run synchronously under speculation (vLLM V0) shows per sequence.

A sync is counted where a device read (``.item()``, ``.tolist()``, ``.cpu()``, a boolean
mask's index, a size read off a device tensor, a blocking upload) waits on device work
queued since the previous one; a read right after another drains nothing.  A batch build's
own read (SGLang's ``seq_lens.cpu()`` under FA3) belongs to its host step, as the plain
step's does, and the first read after the verification stands for the plain step's closing
``.tolist()``: neither is counted.  The drafting path's syncs and host steps
(``draft_syncs``, ``draft_host_steps``, per later draft forward ``draft_step_*``) are paid
by the methods that draft with a model; ``syncs`` and ``host_steps`` by every method.

Which of these a method pays is its ``SpecWork`` (draft forwards, tree levels, nodes, whether it
reranks a dynamic tree, maps a reduced draft vocabulary to the target's, fuses several target
layers' hidden states, verifies a branching tree), never its name: every policy calls
``spec_host_s``, so the same work costs the same (tests/simulator/cost/test_spec_host.py holds
every shipped policy to it).  The one place a method's name enters is the syncs: where an engine
runs several methods through one proposer whose branches force different syncs (vLLM 0.9's
EagleProposer: two ``.item()`` for EAGLE, one for DeepSeek MTP), the entry's ``method_syncs`` gives
each method's count as read, and ``SpecWork.method`` picks it, so a method whose code does less
pays less.  With ``overlap`` (the engine runs the speculative path's host work under the device's,
as TensorRT-LLM's overlap scheduler does) only the syncs and extra host steps show.  Where the
engine runs the draft's forward over the accepted tokens outside any CUDA graph
(``draft_extend_eager``) that forward is priced eager by the layer's own cost model
(feature_draft.py), not here. Where the engine's attention backend verifies a tree as a cascade
(``tree_cascade``: SGLang's FA3 backend with top-k > 1) the extra kernels of every layer are GPU
work, priced by the cost models' own kernels (tree_cascade.py, ``spec_device_s``), and the expand
part's metadata is eager host work (``tree_verify_kernels``).  Everything is a per-iteration
constant in the batch's size: no per-request loop.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from simulator.cost.tree_cascade import tree_cascade_s
from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import (
    as_bool,
    as_number,
    as_str,
    check_keys,
    load_yaml_file,
    require_mapping,
)

CATALOG = Path(__file__).with_name("engines.yaml")
COUNTS = ("verify_kernels", "draft_prep_kernels", "draft_step_kernels", "tree_level_kernels",
          "rerank_kernels", "rerank_node_ops", "vocab_map_kernels", "feature_kernels",
          "fuse_kernels", "tree_verify_kernels", "syncs", "rerank_syncs", "host_steps",
          "draft_build_kernels", "draft_syncs", "draft_host_steps", "draft_step_syncs",
          "draft_step_host_steps", "tree_verify_syncs")
# Launches per decoder layer a DeepSeek-class model's decode runs beyond the cost model's
# generic MoE/MLA families, by kind (simulator/cost/engine_kernels.py); 0 where not read
DECODE_COUNTS = ("mla_pointwise_kernels", "mla_other_kernels", "moe_pointwise_kernels",
                 "moe_other_kernels", "deepep_pointwise_kernels", "eplb_map_kernels",
                 "allreduce_norm_fusion_tokens")
# The kernels an engine runs its block-FP8 linears and experts with: triton (a serial K loop
# per program, engine_kernels.py's floor), or default (DeepGEMM / CUTLASS: no floor)
FP8_GEMMS = ("default", "triton", "deepgemm")
# An eager engine's launches per decoder layer beyond the generic layer's (eager_stream.py)
LAYER_COUNTS = ("norm_kernels", "layer_kernels_before_attention",
                "layer_kernels_after_attention", "layer_host_ops")
BOOLS = ("overlap", "split_qkv_a", "draft_extend_eager", "tree_cascade", "mixed_chunk",
         "shared_experts_fusion", "absorbed_uv_o", "mem_fraction_static", "vllm_fused_moe",
         "mla_disables_chunked_prefill", "unchunked_prefill_apart", "deepgemm_decode_floor",
         "vllm_mla_module", "one_block_moe_align", "no_dp_attention")
MAX_COUNT = 10_000
PER_SEQ = ("sync_output_per_seq_us",)  # host us a drafting sequence adds, an iteration
# SGLang's admission-time KV reservation (simulator/engine/reserve.py): new_token_ratio's
# default start, floor factor and decay steps, schedule_conservativeness, the clip on a
# request's reserved tokens and the retraction's headroom; 0 (absent): not modelled
RESERVE = ("init_new_token_ratio", "min_new_token_ratio_factor", "new_token_ratio_decay_steps",
           "schedule_conservativeness", "clip_max_new_tokens", "retract_decode_steps")
# The prefill attention kernel an engine runs where the GPU has it (``prefill_attention``):
# fa3, FlashAttention-3 on Hopper (the profile's ``kernels.attention_prefill_fa3``); fa2, the
# FlashAttention-2-class kernel every profile prices (``kernels.attention_prefill``).  A GPU
# without an fa3 entry runs the fa2 entry whatever the engine asks.
PREFILL_KERNELS = ("fa2", "fa3")
# The methods (policy names) whose proposer an engine's code may run with its own syncs
# (``method_syncs``): vLLM V1 runs eagle, eagle3 and DeepSeek MTP through one EagleProposer
# whose branches differ, n-gram matching (prompt_lookup) on the host, Medusa its own way
SYNC_METHODS = ("eagle", "eagle3", "mtp", "prompt_lookup", "medusa")


@dataclass(frozen=True)
class SpecWork:
    """What one speculative iteration of a method does, in kinds of work."""

    draft_forwards: int = 0   # sequential draft forwards (0: a model-free proposer)
    tree_levels: int = 0      # draft forwards that pick top-k children (0: a chain)
    tree_nodes: int = 0       # nodes of a dynamic tree reranked each iteration
    rerank: bool = False      # the tree is rebuilt and reranked every iteration (EAGLE-2)
    vocab_map: bool = False   # each forward's logits over a reduced draft vocabulary are
    #                           mapped to the target's (EAGLE-3's d2t)
    feature_layers: int = 0   # target layers whose hidden states are gathered and fused each
    #                           iteration (EAGLE-3: 3); 0: the last layer's alone
    # the verified tokens' rows of the tree mask: the drafted tokens each attends (the root
    # 1, a node its depth + 1); () where the verification is a chain's (a causal block)
    verify_tree_keys: tuple[int, ...] = ()
    # the draft forwards that expand a tree's top-k branches: (queries a request, drafted
    # tokens each attends) of each; () for a chain or a tree drafted level by level
    draft_tree: tuple[tuple[int, int], ...] = ()
    # the method (SYNC_METHODS) whose proposer code the engine runs: an engine whose
    # proposer branches force fewer syncs for it says so (SpecHost.method_syncs); "" or a
    # method the engine does not name pays the engine's ``syncs``
    method: str = ""


@dataclass(frozen=True)
class SpecHost:
    """An engine's per-iteration speculative-path work (counts; see the module docstring)."""

    name: str = "none"
    version: str = ""
    verify_kernels: int = 0      # rejection sampler + verification metadata, per iteration
    draft_prep_kernels: int = 0  # the proposer's input preparation, once per iteration
    draft_step_kernels: int = 0  # bookkeeping between draft forwards, per forward after one
    tree_level_kernels: int = 0  # top-k / score / parent bookkeeping per tree level
    rerank_kernels: int = 0      # a dynamic tree's final top-N, sort, mask build
    rerank_node_ops: int = 0     # host ops per reranked node (Python mask / index loops)
    # the drafts assembled into the verification's input, once per drafting iteration, chain
    # or tree (SGLang builds a chain's "tree" too: build_tree_kernel_efficient)
    draft_build_kernels: int = 0
    vocab_map_kernels: int = 0   # a draft-vocabulary map's launches, per draft forward
    feature_kernels: int = 0     # gathers per fused target layer beyond the one of draft_prep
    fuse_kernels: int = 0        # the fused features' concatenation and fusing linear
    tree_verify_kernels: int = 0  # eager metadata launches of a tree's verification beyond
    #                               a chain's (SGLang FA3's expand page table and mask rows)
    syncs: int = 0               # device->host syncs per iteration (accepted counts, drafts)
    rerank_syncs: int = 0        # syncs of a dynamic tree's build
    tree_verify_syncs: int = 0   # syncs of a tree's verification beyond a chain's
    # the drafting path's syncs and extra host steps (batch builds), once per drafting
    # iteration and per draft forward after the first (a draft loop not captured whole);
    # ``syncs`` and ``host_steps`` are the verification's, paid by every method
    draft_syncs: int = 0
    draft_host_steps: int = 0
    draft_step_syncs: int = 0
    draft_step_host_steps: int = 0
    # (method, syncs) where a method's proposer code forces other syncs than ``syncs``
    method_syncs: tuple[tuple[str, int], ...] = ()
    host_steps: int = 0          # extra engine host steps per iteration
    sync_output_per_seq_us: float = 0.0  # PER_SEQ: output processing no step hides
    overlap: bool = False        # launches and host ops hidden under the device's work
    # the draft's forward over the tokens accepted last time (SGLang's draft extend) runs
    # outside any CUDA graph: each of its kernels launched eagerly (policies/feature_draft.py)
    draft_extend_eager: bool = False
    # a tree's attention runs as a cascade (prefix part, expand part over the tree, merged)
    # in every layer of the verification and of the top-k draft forwards (tree_cascade.py)
    tree_cascade: bool = False
    # the prefill attention kernel (PREFILL_KERNELS): a named engine's (engines.yaml), or the
    # scenario's execution.prefill_attention; without either the FA2-class kernel every
    # profile prices (the A100's fitted to measured kernels; docs/execution.md on FA3)
    prefill_attention: str = "fa2"
    # DeepSeek-class decode (engine_kernels.py): extra launches a MLA / MoE layer, FP8 GEMMs
    mla_pointwise_kernels: int = 0
    mla_other_kernels: int = 0
    moe_pointwise_kernels: int = 0
    moe_other_kernels: int = 0
    # per MoE layer behind DeepEP's low-latency dispatch (moe_dispatch all_to_all), and the
    # logical-to-physical expert map under EPLB (DP attention's MoE terms, dp_attention.py)
    deepep_pointwise_kernels: int = 0
    eplb_map_kernels: int = 0
    allreduce_norm_fusion_tokens: int = 0  # ar_fusion.py: all-reduce + add + norm fused
    fp8_gemm: str = "default"
    norm_kernels: int = 0  # LAYER_COUNTS: launches an RMSNorm (0: the generic one), more
    layer_kernels_before_attention: int = 0  # pointwise launches a layer, and
    layer_kernels_after_attention: int = 0   # ops on CPU tensors (a dispatch, no GPU time)
    layer_host_ops: int = 0
    # steps may carry prefill chunks beside decodes (vLLM V1; batching.mixed_chunk's default)
    mixed_chunk: bool = True
    # an MLA target runs without chunked prefill or prefix caching, prefill and decode steps
    # apart, whatever the scenario asks (vLLM 0.7.x: simulator/engine_overrides.py)
    mla_disables_chunked_prefill: bool = False
    # with chunked prefill off, whole prompts in prefill-only steps and the decodes in steps of
    # their own, whatever batching.mixed_chunk says (vLLM V0: simulator/engine_overrides.py)
    unchunked_prefill_apart: bool = False
    # dense block-FP8 decode rows at PR #5820's DeepGEMM (engine_kernels.deepgemm_decode_floor)
    deepgemm_decode_floor: bool = False
    split_qkv_a: bool = False    # q_a_proj and kv_a_proj_with_mqa as two linears
    absorbed_uv_o: bool = False  # MLA decode's output as one W_UV_O GEMM (vLLM 0.7.x)
    # a MoE layer's shared experts run as always-picked experts of the routed grouped GEMM
    # (SGLang's num_fused_shared_experts), without EP: simulator/cost/moe.py MoeShape.of
    shared_experts_fusion: bool = False
    # the KV pool sized as SGLang 0.5 sizes it by default (memory_plan.py
    # sglang_mem_fraction_static), not by vLLM's gpu_memory_utilization and profiled headroom
    mem_fraction_static: bool = False
    vllm_fused_moe: bool = False  # vLLM's own FP8 fused_moe: moe_kernels.grouped_gemm_kernel
    vllm_mla_module: bool = False  # vLLM's MLA decode module, measured: moe_kernels.py
    one_block_moe_align: bool = False  # vLLM 0.7.x's align: engine_kernels.moe_align_terms
    no_dp_attention: bool = False  # no DP attention (vLLM V0): deployment refuses DP > 1
    init_new_token_ratio: float = 0.0  # RESERVE (0: no reservation)
    min_new_token_ratio_factor: float = 0.0
    new_token_ratio_decay_steps: float = 0.0
    schedule_conservativeness: float = 0.0
    clip_max_new_tokens: float = 0.0
    retract_decode_steps: float = 0.0
    sources: tuple[str, ...] = field(default=(), compare=False)

    def kernels(self, work: SpecWork) -> int:
        """Eager launches and host ops of one iteration of ``work``."""
        n = self.verify_kernels
        if work.draft_forwards:
            n += self.draft_prep_kernels + self.draft_build_kernels \
                + self.draft_step_kernels * (work.draft_forwards - 1)
            n += self.vocab_map_kernels * work.draft_forwards if work.vocab_map else 0
        if work.feature_layers:
            n += self.fuse_kernels + self.feature_kernels * (work.feature_layers - 1)
        n += self.tree_level_kernels * work.tree_levels
        if work.rerank:
            n += self.rerank_kernels + self.rerank_node_ops * work.tree_nodes
        if work.verify_tree_keys:
            n += self.tree_verify_kernels
        return n

    def steps(self, work: SpecWork) -> int:
        """Host steps the iteration exposes: its syncs and extra steps."""
        syncs = self.syncs
        for method, count in self.method_syncs:  # at most a few entries; most have none
            if method == work.method:
                syncs = count
        n = syncs + self.host_steps + (self.rerank_syncs if work.rerank else 0)
        if work.draft_forwards:
            n += self.draft_syncs + self.draft_host_steps + (work.draft_forwards - 1) * (
                self.draft_step_syncs + self.draft_step_host_steps)
        return n + (self.tree_verify_syncs if work.verify_tree_keys else 0)


def spec_host_s(execution, work: SpecWork, sequences: int) -> float:
    """Seconds of one speculative iteration's host work over ``sequences`` drafting
    requests: the one cost function every policy's iteration is charged by."""
    spec = execution.spec
    if sequences <= 0 or spec.name == "none":
        return 0.0
    launches = 0.0 if spec.overlap else spec.kernels(work) * execution.kernel_launch_s
    return launches + spec.steps(work) * execution.host_s(sequences) \
        + sequences * spec.sync_output_per_seq_us * 1e-6


def tree_rows(tree) -> tuple[int, ...]:
    """``SpecWork.verify_tree_keys`` of verifying the TokenTree ``tree`` (with its root):
    () for a chain, whose verification is one causal block."""
    if tree.num_nodes <= tree.max_depth:
        return ()
    return (1,) + tuple(int(d) + 1 for d in tree.depth)


def spec_device_s(execution, work: SpecWork, sequences: int, target=None,
                  draft=None) -> float:
    """Seconds of the GPU work an engine's tree attention adds to one iteration of ``work``
    (``SpecHost.tree_cascade``: tree_cascade.py), on the ``target`` cost model's layers and
    the ``draft``'s (either None: a pricer without a model, or no draft layer)."""
    if sequences <= 0 or not execution.spec.tree_cascade:
        return 0.0
    return tree_cascade_s(target, draft, work.verify_tree_keys, work.draft_tree, sequences)


class SpecCharge:
    """``spec_host_s`` + ``spec_device_s`` bound to one execution, one method's work and
    its cost models, memoised by batch size (a policy holds one and calls it per
    iteration)."""

    __slots__ = ("execution", "work", "target", "draft", "_memo")

    def __init__(self, execution, work: SpecWork, target=None, draft=None) -> None:
        self.execution, self.work, self._memo = execution, work, {}
        self.target, self.draft = target, draft

    def __call__(self, sequences: int) -> float:
        got = self._memo.get(sequences)
        if got is None:
            ex = self.execution
            got = self._memo[sequences] = 0.0 if ex is None else (
                spec_host_s(ex, self.work, sequences)
                + spec_device_s(ex, self.work, sequences, self.target, self.draft))
        return got


def engine_names() -> tuple[str, ...]:
    """The engines of the catalog."""
    return tuple(_catalog())


def load_engine(name: str, *, source: str = "scenario",
                field_name: str = "execution.engine") -> SpecHost:
    """The catalog's engine ``name``."""
    catalog = _catalog()
    if name not in catalog:
        raise SpecsimError(f"unknown engine {name!r}", source=source, field=field_name,
                           fix="use one of: " + ", ".join(catalog))
    return catalog[name]


@lru_cache(maxsize=1)
def _catalog() -> dict[str, SpecHost]:
    src = str(CATALOG.name)
    data = require_mapping(load_yaml_file(CATALOG), source=src)
    return {str(k): _entry(str(k), v, src) for k, v in data.items()}


def _entry(name: str, data: Any, src: str) -> SpecHost:
    data = require_mapping(data, source=src, field=name)
    check_keys(data, allowed=("version", "prefill_attention", "fp8_gemm", "method_syncs",
                              *BOOLS, *COUNTS, *DECODE_COUNTS, *LAYER_COUNTS, *RESERVE,
                              *PER_SEQ), required=("version",), source=src, prefix=f"{name}.")
    out: dict[str, Any] = {"name": name, "version": as_str(
        data["version"], source=src, field=f"{name}.version")}
    sources = []
    if "prefill_attention" in data:
        item = require_mapping(data["prefill_attention"], source=src,
                               field=f"{name}.prefill_attention")
        check_keys(item, allowed=("value", "source"), required=("value", "source"),
                   source=src, prefix=f"{name}.prefill_attention.")
        kernel = as_str(item["value"], source=src, field=f"{name}.prefill_attention.value")
        if kernel not in PREFILL_KERNELS:
            raise SpecsimError(f"unknown prefill attention kernel {kernel!r}", source=src,
                               field=f"{name}.prefill_attention.value",
                               fix="use one of: " + ", ".join(PREFILL_KERNELS))
        out["prefill_attention"] = kernel
        sources.append("prefill_attention: " + as_str(
            item["source"], source=src, field=f"{name}.prefill_attention.source"))
    if "fp8_gemm" in data:
        item = require_mapping(data["fp8_gemm"], source=src, field=f"{name}.fp8_gemm")
        check_keys(item, allowed=("value", "source"), required=("value", "source"),
                   source=src, prefix=f"{name}.fp8_gemm.")
        out["fp8_gemm"] = as_str(item["value"], source=src, field=f"{name}.fp8_gemm.value",
                                 choices=FP8_GEMMS)
        sources.append("fp8_gemm: " + as_str(item["source"], source=src,
                                             field=f"{name}.fp8_gemm.source"))
    for key in (*BOOLS, *COUNTS, *DECODE_COUNTS, *LAYER_COUNTS, *RESERVE, *PER_SEQ):
        if key not in data:
            continue
        item = require_mapping(data[key], source=src, field=f"{name}.{key}")
        check_keys(item, allowed=("value", "source"), required=("value", "source"),
                   source=src, prefix=f"{name}.{key}.")
        where = f"{name}.{key}.value"
        out[key] = as_bool(item["value"], source=src, field=where) if key in BOOLS \
            else float(as_number(item["value"], source=src, field=where, minimum=0,
                                 maximum=MAX_COUNT)) if key in RESERVE + PER_SEQ \
            else int(as_number(item["value"], source=src, field=where, integer=True,
                               minimum=0, maximum=MAX_COUNT))
        sources.append(f"{key}: " + as_str(item["source"], source=src,
                                           field=f"{name}.{key}.source"))
    if "method_syncs" in data:
        out["method_syncs"] = _method_syncs(data["method_syncs"], name, src, sources)
    _check_reserve(out, name, src)
    return SpecHost(**out, sources=tuple(sources))


def _method_syncs(data: Any, name: str, src: str, sources: list[str]) -> tuple:
    """An entry's ``method_syncs``: {method: {value, source}} for methods of SYNC_METHODS,
    each count with its source (appended to ``sources``)."""
    data = require_mapping(data, source=src, field=f"{name}.method_syncs")
    out = []
    for method, item in data.items():
        where = f"{name}.method_syncs.{method}"
        if method not in SYNC_METHODS:
            raise SpecsimError(f"unknown method {method!r}", source=src, field=where,
                               fix="use one of: " + ", ".join(SYNC_METHODS))
        item = require_mapping(item, source=src, field=where)
        check_keys(item, allowed=("value", "source"), required=("value", "source"),
                   source=src, prefix=f"{where}.")
        out.append((method, int(as_number(item["value"], source=src, field=f"{where}.value",
                                          integer=True, minimum=0, maximum=MAX_COUNT))))
        sources.append(f"method_syncs.{method}: " + as_str(item["source"], source=src,
                                                           field=f"{where}.source"))
    return tuple(out)


def _check_reserve(out: dict[str, Any], name: str, src: str) -> None:
    """An engine's reservation keys come all together, with a decay over some steps."""
    given = [k for k in RESERVE if k in out]
    if not given:
        return
    missing = [k for k in RESERVE if k not in out]
    if missing or out["new_token_ratio_decay_steps"] <= 0:
        key = missing[0] if missing else "new_token_ratio_decay_steps"
        raise SpecsimError("an engine's KV reservation needs all of its keys and at least one "
                           "decay step", source=src, field=f"{name}.{key}",
                           fix="give " + ", ".join(RESERVE) + " (new_token_ratio_decay_steps "
                               "above 0), or none of them")
