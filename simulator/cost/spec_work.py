"""What one speculative iteration does (``SpecWork``) and what an engine's catalog entry
holds (``SpecHost``): counts of eager launches, host ops, syncs and host steps, and the
engine's other execution choices, with the counting of one iteration's launches and
exposed host steps.  Priced by spec_host.py, loaded from engines.yaml by spec_catalog.py."""
from __future__ import annotations

from dataclasses import dataclass, field


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
    # every captured forward replays piecewise graphs around an eager attention, a uniform
    # batch's too (vLLM V1 before FULL_AND_PIECEWISE: Execution.graph_tokens)
    piecewise_graphs: bool = False
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
    vllm_fp8_linear: bool = False  # vLLM's block-FP8 linear's decode floor: vllm_linear.py
    vllm_router_gemm: bool = False  # vLLM's MoE gate at its measured times: router_gemm.py
    one_block_moe_align: bool = False  # vLLM 0.7.x's align: engine_kernels.measured_align_s
    global_mem_moe_align: bool = False  # SGLang 0.4.1's: engine_kernels.measured_align_s
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
