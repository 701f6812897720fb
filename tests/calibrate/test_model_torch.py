"""The random-weight torch decoder: KV-cache, per-request and tree-attention steps are exact."""
import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from calibrate.bench_overhead import tiny_spec  # noqa: E402
from calibrate.model_torch import TorchDecoder, footprint_bytes, scaled_spec, step_mask, torch_dtype  # noqa: E402
from simulator.inputs.errors import SpecsimError  # noqa: E402
from simulator.models.spec import load_model  # noqa: E402
from simulator.speculation.token_tree import TokenTree  # noqa: E402

CPU = torch.device("cpu")
ATOL = 1e-4


def _model(arch="opt", layers=2, kv_heads=None, seed=0):
    spec = tiny_spec(arch, layers, "fp32")
    if kv_heads is not None:
        spec = dataclasses.replace(spec, num_kv_heads=kv_heads)
    return TorchDecoder(spec, device=CPU, dtype=torch.float32, rng=np.random.default_rng(seed))


def _tokens(shape, seed=1):
    return torch.randint(0, 512, shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("arch,kv_heads", [("opt", None), ("llama", None), ("llama", 1)])
def test_decode_after_prefill_equals_longer_prefill(arch, kv_heads):
    # A KV cache is only right if step-by-step decoding reproduces the full forward.
    m = _model(arch, kv_heads=kv_heads)
    toks = _tokens((2, 9))
    full = m.forward(toks, m.new_cache(2, 16), 0)
    cache = m.new_cache(2, 16)
    m.forward(toks[:, :6], cache, 0)
    for i in range(6, 9):
        step = m.forward(toks[:, i:i + 1], cache, i)
        torch.testing.assert_close(step[:, 0], full[:, i], atol=ATOL, rtol=0)


def test_last_only_keeps_the_last_position():
    m = _model()
    toks = _tokens((1, 7))
    full = m.forward(toks, m.new_cache(1, 8), 0)
    last = m.forward(toks, m.new_cache(1, 8), 0, last_only=True)
    assert last.shape == (1, 1, 512)
    torch.testing.assert_close(last[:, 0], full[:, -1], atol=ATOL, rtol=0)


def test_per_request_contexts_equal_separate_runs():
    m = _model("llama")
    toks = _tokens((3, 12))
    starts = [4, 7, 5]
    cache = m.new_cache(3, 16)
    m.forward(toks[:, :8], cache, 0)          # fill every request's prefix
    new = _tokens((3, 3), seed=2)
    batched = m.forward(new, cache, torch.tensor(starts))
    for b, s in enumerate(starts):
        alone = m.new_cache(1, 16)
        m.forward(toks[b:b + 1, :s], alone, 0)
        ref = m.forward(new[b:b + 1], alone, s)
        torch.testing.assert_close(batched[b], ref[0], atol=ATOL, rtol=0)


def test_tree_step_equals_each_root_to_leaf_path_as_a_chain():
    # Tree attention (SpecInfer Def. 4.1): a node sees the prefix, the root and its ancestors,
    # at position start + depth; so each path's logits equal a causal chain over that path.
    m = _model("opt")
    tree = TokenTree.from_config((2, 2))
    n = tree.num_nodes
    local = torch.zeros(n + 1, n + 1, dtype=torch.bool)
    local[:, 0] = True
    local[1:, 1:] = torch.from_numpy(tree.attention_mask())
    depth = torch.from_numpy(np.concatenate([[0], tree.depth]))
    prefix, ctx = _tokens((1, 5)), 5
    step = _tokens((1, n + 1), seed=3)
    cache = m.new_cache(1, 32)
    m.forward(prefix, cache, 0)
    tree_logits = m.forward(step, cache, ctx, tree_mask=local, tree_depth=depth)
    for path in tree.paths():
        idx = [0] + [p + 1 for p in path]
        chain_cache = m.new_cache(1, 32)
        m.forward(prefix, chain_cache, 0)
        chain = m.forward(step[:, idx], chain_cache, ctx)
        torch.testing.assert_close(tree_logits[:, idx], chain, atol=ATOL, rtol=0)


def test_step_mask_shapes_and_visibility():
    assert step_mask(1, 10, None, CPU) is None
    mask = step_mask(3, 4, None, CPU)
    assert mask.shape == (3, 7)
    assert mask[:, :4].all() and mask[:, 4:].equal(torch.ones(3, 3, dtype=torch.bool).tril())
    per = step_mask(2, torch.tensor([1, 3]), None, CPU)
    assert per.shape == (2, 1, 2, 5)
    # request 0: prefix 1 key, new keys at 1..2, nothing beyond
    assert per[0, 0].tolist() == [[True, True, False, False, False],
                                  [True, True, True, False, False]]


def test_scaled_spec_and_bad_input():
    spec = scaled_spec(load_model("opt-1.3b"), num_layers=2, dtype="fp32")
    assert (spec.num_layers, spec.dtype, spec.hidden_size) == (2, "fp32", 2048)
    with pytest.raises(SpecsimError, match="layers"):
        scaled_spec(load_model("opt-125m"), num_layers=13)
    with pytest.raises(SpecsimError, match="medusa"):
        scaled_spec(load_model("medusa-vicuna-7b"))
    with pytest.raises(SpecsimError, match="dtype"):
        torch_dtype("int8")


def test_footprint_counts_weights_kv_and_logits():
    spec = scaled_spec(load_model("opt-125m"), num_layers=2, dtype="fp32")
    weights = spec.param_count() * 4
    kv = 2 * 2 * 3 * 100 * 768 * 4
    got = footprint_bytes(spec, batch=3, max_len=100, new_tokens=5, dtype_bytes=4)
    # weights and cache, plus a margin for the step's activations (logits dominate)
    assert weights + kv + 3 * 5 * 50272 * 4 <= got < 1.1 * (weights + kv)
    more = footprint_bytes(spec, batch=6, max_len=100, new_tokens=5, dtype_bytes=4)
    assert more - got >= kv
