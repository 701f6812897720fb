"""A token tree's cascade attention (simulator/cost/tree_cascade.py) and the eager metadata
of its verification (engines.yaml ``tree_verify_kernels``): the counts against the code
they cite, the price in closed form, and which engines pay it."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hardware.profile import load_profile
from simulator.cost.cost_model import CostModel
from simulator.cost.execution import Execution
from simulator.cost.spec_catalog import engine_names, load_engine
from simulator.cost.spec_host import spec_device_s, spec_host_s, tree_rows
from simulator.cost.spec_work import SpecWork
from simulator.cost.tree_cascade import CASCADE_KERNELS, cascade_layer_s, tree_cascade_s
from simulator.models.spec import load_model
from simulator.speculation.token_tree import TokenTree

SGLANG = load_engine("sglang-v0.4.5")

# sgl-project/sglang python/sglang/srt/layers/attention/flashattention_backend.py (PR #5318's
# cascade; the code index's copy at 003e7b77), forward_extend with use_cascade_attn: the
# kernels a layer launches beyond the prefix attention
CASCADE = ["flash_attn_with_kvcache over forward_metadata_spec_decode_expand",
           "softmax_lse.T.contiguous()", "softmax_lse_expand.T.contiguous()",
           "merge_state_v2"]
# init_forward_metadata_replay_cuda_graph, target verify, the launches before the replay
TOPK_GT_1 = ["cache_seqlens copy_", "cumsum", "cu_seqlens_k copy_", "req_to_token gather",
             "page_table copy_",  # the prefix half; the expand half:
             "arange", "offsets + seq_lens", "seq_lens + N", "repeat_interleave", "cumsum",
             "pad", "cols.repeat_interleave", "+ cum_len", "padded indices fill_",
             "custom_mask gather", "col_indices + N", "torch.where", "torch.sort",
             "req_to_token gather", "gather(1, cols)", "repeat_interleave",
             "gather(1, sort_order)", "page_table copy_", "mask.sum", "cache_seqlens copy_",
             "cumsum", "cu_seqlens_k copy_"]
TOPK_1 = ["seq_lens + N", "cache_seqlens copy_", "cumsum", "cu_seqlens_k copy_",
          "strided page gather", "//= page_size", "page_table copy_"]


def test_the_counts_are_the_cited_codes():
    assert CASCADE_KERNELS == len(CASCADE)
    assert SGLANG.tree_verify_kernels == len(TOPK_GT_1) - len(TOPK_1) == 20
    # only SGLang's FA3 backend splits a tree's attention: FlashInfer (SGLang 0.4.1) and the
    # official EAGLE code attend the tree mask in one kernel, vLLM and TensorRT-LLM verify
    # chains here
    assert {n for n in engine_names() if load_engine(n).tree_cascade} == {"sglang-v0.4.5"}


def test_a_trees_rows_attend_its_root_ancestors_and_self():
    # root -> a (depth 1) -> b, c (depth 2); root -> d (depth 1)
    tree = TokenTree(parents=np.array([-1, 0, 0, -1]))
    assert tree_rows(tree) == (1, 2, 3, 3, 2)
    assert tree_rows(TokenTree.chain(4)) == ()  # a chain verifies in one causal block


def _flat_llama(execution: Execution) -> CostModel:
    """Llama-3.1-8B on an H100 priced by the flat roofline (no kernel latencies)."""
    hw = dataclasses.replace(load_profile("h100-sxm"), kernels=None)
    return CostModel(hw, load_model("llama-3.1-8b"), execution=execution)


def test_one_layer_of_the_cascade_in_closed_form():
    """Llama-3.1-8B (32 query heads of 128, 8 KV heads, bf16): a query row attending k
    drafted tokens does 4 x 4096 FLOPs a key and reads 2 x 1024 x 2 bytes a key plus its
    query and output (2 x 4096 x 2 bytes); each log-sum-exp copy moves 32 fp32 a row in and
    out; the merge reads two outputs and two log-sum-exps and writes one of each."""
    cm = _flat_llama(Execution(spec=SGLANG))
    c, m = cm._roof.flat_compute_rate, cm._roof.flat_memory_rate
    keys = np.array([1, 2, 3, 4, 2, 3, 1, 2], dtype=float)
    rows = keys.size
    attention = sum(max(k * 4 * 4096 / c, (k * 4096 + 16384) / m) for k in keys)
    lse = rows * 32 * 4
    copies = 2 * (2 * lse) / m
    merge = (3 * rows * 4096 * 2 + 3 * lse) / m
    assert cascade_layer_s(cm, keys) == pytest.approx(attention + copies + merge, rel=1e-12)
    # decode attention this small is memory-bound: the bytes alone
    assert attention == pytest.approx((keys.sum() * 4096 + rows * 16384) / m, rel=1e-12)


def test_the_iteration_pays_every_layer_of_the_verification_and_of_the_draft():
    graphs = Execution(spec=SGLANG, capture_sizes=(1, 2, 4, 8, 16, 32, 64))
    eager = Execution(spec=SGLANG, cuda_graphs=False, kernel_launch_s=10e-6)
    keys = (1, 2, 3, 4, 2, 3, 1, 2)
    for ex in (graphs, eager):
        target = _flat_llama(ex)
        layer = cascade_layer_s(target, np.tile(np.array(keys, float), 2))
        assert layer < 4 * 10e-6  # eager, the 4 launches outlast the kernels
        launched = layer if ex.cuda_graphs else 4 * 10e-6
        assert tree_cascade_s(target, None, keys, (), 2) == pytest.approx(32 * launched,
                                                                          rel=1e-12)
    target = _flat_llama(graphs)
    draft = target  # any layer model: the draft's forwards priced on its own layers
    want = 32 * (cascade_layer_s(draft, np.full(2 * 4, 1.0))
                 + cascade_layer_s(draft, np.full(2 * 4, 2.0)))
    assert tree_cascade_s(None, draft, (), ((4, 1), (4, 2)), 2) == pytest.approx(want,
                                                                                 rel=1e-12)


def test_only_a_tree_on_a_cascading_engine_pays():
    ex = Execution(spec=SGLANG, kernel_launch_s=10e-6, cpu_step_s=200e-6)
    target = _flat_llama(ex)
    chain = SpecWork(draft_forwards=3)
    tree = dataclasses.replace(chain, verify_tree_keys=(1, 2, 3, 2))
    assert spec_device_s(ex, chain, 4, target) == 0.0
    assert spec_device_s(ex, tree, 4, target) > 0.0
    # 20 more metadata launches and the expand lengths' max().item() (0.4.5.post3's replay)
    assert spec_host_s(ex, tree, 4) - spec_host_s(ex, chain, 4) == pytest.approx(
        20 * 10e-6 + 200e-6)
    flashinfer = dataclasses.replace(ex, spec=load_engine("sglang-v0.4"))
    assert spec_device_s(flashinfer, tree, 4, target) == 0.0
    assert spec_host_s(flashinfer, tree, 4) == spec_host_s(flashinfer, chain, 4)
