"""The execution model: launches and graph replay counted once, host time once per engine
step, the lecture's single roofline, draft placement, one accounting for every method."""
import dataclasses

import numpy as np
import pytest

from hardware.profile import load_profile
from simulator.cost.cost_model import KERNELS_PER_LAYER, KERNELS_PER_STEP, CostModel
from simulator.cost.execution import Execution, default_capture_sizes, parse_execution
from simulator.cost.parallelism import Parallelism
from simulator.cost.spec_catalog import load_engine
from simulator.inputs.errors import SpecsimError
from simulator.models.spec import load_model
from simulator.scenario import scenario_from_dict
from simulator.simulate import build_deployment, prepare
from tests.helpers import SHARED

A100 = load_profile("a100-40gb")
OPT13B = load_model("opt-13b")


def lecture_model(**kw) -> CostModel:
    """Lecture 000 sec. 1.2's time model: 60% of 312 TFLOP/s, the full 1,555 GB/s, 1.5 ms
    per step, one roofline over the step."""
    hw = dataclasses.replace(A100, compute_efficiency=0.6, memory_efficiency=1.0)
    ex = Execution(cuda_graphs=False, kernel_launch_s=0.0, cpu_step_s=1.5e-3,
                   step_model="single_roofline", **kw)
    return CostModel(hw, OPT13B, execution=ex)


@pytest.mark.parametrize("k, published_ms", [(4, 26.90), (8, 37.63)])
def test_lecture_single_roofline_reproduces_its_table(k, published_ms):
    # lecture 000 sec. 1.2 (and exercise 4): OPT-13B, A100-40GB, context 512, batch 32:
    # k = 4 takes 26.90 ms (still memory-bound), k = 8 37.63 ms (compute-bound)
    t = lecture_model().verify_time(32, 512, k)
    assert t * 1e3 == pytest.approx(published_ms, rel=0.02)


def test_lecture_batch_one_is_flat_in_k():
    # lecture 000 sec. 1.2: at batch 1 the time barely changes from k = 1 to 32
    cm = lecture_model()
    times = [cm.verify_time(1, 512, k) for k in range(1, 33)]
    assert max(times) / min(times) < 1.03


def test_single_roofline_is_one_max_not_a_sum():
    cm = lecture_model()
    cost = cm.breakdown(np.full(32, 4.0), np.full(32, 512.0))
    (step,) = cost.ops
    assert step.time_s == pytest.approx(max(step.compute_s, step.memory_s))
    # the per-operator sum prices the same step higher (its sum of maxima >= max of sums)
    summed = dataclasses.replace(cm.execution, step_model="sum_of_operators")
    assert CostModel(cm.hardware, OPT13B, execution=summed).breakdown(
        np.full(32, 4.0), np.full(32, 512.0)).gpu_s >= step.time_s


def test_graph_step_is_gpu_plus_one_replay_plus_host_time():
    cm = CostModel(A100, OPT13B)
    ex = cm.execution
    assert ex.cuda_graphs and ex.graph_launch_s == pytest.approx(15e-6)
    for batch in (1, 8, 64):
        cost = cm.breakdown(np.ones(batch), np.full(batch, 512.0))
        assert cost.mode == "full"
        assert cost.op_launch_s == 0.0  # no kernel launches inside the graph ...
        assert cost.launch_s == pytest.approx(ex.graph_launch_s)  # ... one replay
        assert cost.step_overhead_s == pytest.approx(ex.cpu_step_s)
        assert cost.time_s == pytest.approx(cost.gpu_s + cost.launch_s + cost.step_overhead_s)
        assert cm.decode_time(batch, 512) == pytest.approx(cost.time_s, rel=1e-12)


def test_eager_launches_hide_behind_long_kernels():
    # an eager forward is one stream (simulator/cost/stream.py; tests/simulator/cost/
    # test_stream.py checks it against the recurrence)
    ex = Execution(cuda_graphs=False, kernel_launch_s=4e-6, cpu_step_s=0.0)
    cm = CostModel(A100, OPT13B, execution=ex)
    cost = cm.breakdown(np.ones(1), [512.0])
    ops = {op.name: op for op in cost.ops}
    layers = OPT13B.num_layers
    # each operator at its GPU time; what the launches add is one operator of its own
    assert ops["qkv_proj"].overhead_s == 0.0 and ops["elementwise"].overhead_s == 0.0
    # a decode GEMM reads 5120 x 15360 x 2 bytes (~157 MB, ~110 us): it hides the launches
    # of the five tiny elementwise kernels a layer, which the per-operator sum of
    # max(GPU time, launches) charged in full
    e = ops["elementwise"]
    assert cost.time_s < cost.gpu_s - e.time_s + max(e.time_s, 5 * layers * 4e-6)
    assert cost.time_s >= cost.gpu_s + 4e-6  # the first launch is never hidden
    # with free launches every kernel count drops out exactly
    free = CostModel(A100, OPT13B, execution=dataclasses.replace(ex, kernel_launch_s=0.0))
    assert cm.decode_time(1, 512) - free.decode_time(1, 512) < \
        (layers * KERNELS_PER_LAYER + KERNELS_PER_STEP) * 4e-6


def test_the_batch_is_padded_to_the_captured_size():
    # vllm/config/compilation.py set_cudagraph_sizes: [1, 2, 4] + multiples of 8 below 256
    # + multiples of 16 up to min(2 * max_num_seqs, 512)
    assert default_capture_sizes(256)[:6] == (1, 2, 4, 8, 16, 24)
    assert default_capture_sizes(256)[-1] == 512 and default_capture_sizes(16)[-1] == 32
    ex = Execution(capture_sizes=default_capture_sizes(256), graph_launch_s=0.0)
    assert ex.graph_tokens(9, True) == ("full", 16.0)
    assert ex.graph_tokens(513, True) == ("eager", 513)
    assert ex.graph_tokens(300, False) == ("piecewise", 304.0)
    cm = CostModel(A100, OPT13B, execution=ex)
    nine, sixteen = (cm.breakdown(np.ones(n), np.zeros(n)) for n in (9, 16))
    lin = {o.name: o for o in nine.ops}["mlp_up"]
    assert lin.flops == pytest.approx({o.name: o for o in sixteen.ops}["mlp_up"].flops)


def test_vllm_before_full_and_piecewise_replays_a_uniform_batch_piecewise():
    # vLLM PR #25444 (2025-09-23) made FULL_AND_PIECEWISE the default: 0.9.2 and 0.10.1 ran
    # every captured forward piecewise, attention eager between the pieces (engines.yaml)
    base = Execution(capture_sizes=default_capture_sizes(256), graph_launch_s=0.0)
    for name, mode in (("vllm-v0.9", "piecewise"), ("vllm-v0.10", "piecewise"),
                       ("vllm-v0.11", "full"), ("sglang-v0.4", "full")):
        ex = dataclasses.replace(base, spec=load_engine(name))
        assert ex.graph_tokens(9, True) == (mode, 16.0)
        assert ex.graph_tokens(300, False) == ("piecewise", 304.0)
    # launches far longer than a layer's attention: piecewise, the 12 eager ones show
    slow = dataclasses.replace(base, kernel_launch_s=1e-3)
    full, piece = (CostModel(A100, load_model("opt-125m"), execution=dataclasses.replace(
        slow, spec=load_engine(name))).breakdown([1.0], [512.0])
        for name in ("vllm-v0.11", "vllm-v0.9"))
    assert (full.mode, piece.mode) == ("full", "piecewise")
    assert full.time_s < 12e-3 <= piece.time_s


def test_mixed_batches_replay_piecewise_graphs_around_eager_attention():
    ex = Execution(graph_launch_s=10e-6, kernel_launch_s=4e-6, cpu_step_s=0.0)
    cm = CostModel(A100, OPT13B, execution=ex)
    cost = cm.breakdown([100.0, 1.0, 1.0], [0.0, 300.0, 300.0])
    assert cost.mode == "piecewise"
    # the first replay delays the start; the other 40 are issued while the GPU works on
    # layers far longer than 10 us each, so they do not show
    assert cost.launch_s == pytest.approx(10e-6)
    tiny = CostModel(A100, load_model("opt-125m"), execution=dataclasses.replace(
        ex, graph_launch_s=1e-3))  # replays far longer than the GPU work: they show
    slow = tiny.breakdown([100.0, 1.0], [0.0, 30.0])
    assert slow.gpu_s + slow.op_launch_s < 12e-3
    assert slow.launch_s == pytest.approx(13e-3 - slow.gpu_s - slow.op_launch_s)


def test_async_scheduling_hides_host_time_behind_the_gpu():
    sync = Execution(cpu_step_s=2e-3, graph_launch_s=0.0)
    overlap = dataclasses.replace(sync, async_scheduling=True)
    s = CostModel(A100, OPT13B, execution=sync).breakdown([1.0], [512.0])
    a = CostModel(A100, OPT13B, execution=overlap).breakdown([1.0], [512.0])
    assert s.time_s == pytest.approx(s.gpu_s + 2e-3)
    assert a.time_s == pytest.approx(a.gpu_s)  # a ~19 ms step hides 2 ms of host work
    big = dataclasses.replace(overlap, cpu_step_s=1.0)
    b = CostModel(A100, OPT13B, execution=big).breakdown([1.0], [512.0])
    assert b.time_s == pytest.approx(1.0)     # the host is the bottleneck: max(gpu, cpu)


def test_host_time_grows_per_sequence_and_drafts_pay_none():
    ex = Execution(cpu_step_s=1e-4, cpu_per_seq_s=1e-5, graph_launch_s=0.0)
    t = CostModel(A100, OPT13B, execution=ex)
    assert t.breakdown(np.ones(10), np.full(10, 64.0)).step_overhead_s == pytest.approx(2e-4)
    d = CostModel(A100, load_model("opt-125m"), execution=ex, host=False)
    assert d.breakdown(np.ones(10), np.full(10, 64.0)).step_overhead_s == 0.0
    # a draft model's chain of g: g forwards, each one graph replay, no host time
    ctx = np.full(10, 64.0)
    assert d.chain_decode_time(ctx, 3) == pytest.approx(
        sum(d.step_time(np.ones(10), ctx + j) for j in range(3)), rel=1e-12)


def test_medusa_heads_and_an_eagle_layer_pay_the_same_overheads():
    # one accounting: a draft forward pays its operators' GPU time plus one graph replay
    # and no host time, whichever method runs it (before: Medusa's heads paid nothing
    # beyond their operators while EAGLE's layer paid a whole 1.5 ms host step per forward)
    sc = {"hardware": "a100-40gb", "target": "vicuna-7b"}
    eagle = prepare(scenario_from_dict(
        {**sc, "draft": "eagle-vicuna-7b", "policy": {"name": "eagle",
                                                      "num_speculative_tokens": 1},
         "acceptance": {"model": "tree_topk", "coverage": [[0.6, 0.7, 0.75]]}},
        source="t")).policies[0]
    medusa = prepare(scenario_from_dict(
        {**sc, "draft": "medusa-vicuna-7b", "policy": {"name": "medusa", "node_budget": 8},
         "acceptance": {"model": "medusa", "size": "7b"}}, source="t")).policies[0]
    graph = eagle.cost.execution.graph_launch_s
    assert graph > 0 and medusa.prices.cost.execution.graph_launch_s == graph
    n, ctx = 8, np.full(8, 300.0)
    layer = eagle.cost.breakdown(np.ones(n), ctx, np.ones(n))
    assert layer.step_overhead_s == 0.0 and layer.launch_s == pytest.approx(graph)
    assert eagle.draft_time(ctx) == pytest.approx(layer.gpu_s + eagle._fc_s(n) + graph,
                                                  rel=1e-9)
    heads = medusa.num_heads * (medusa.prices.square_linear_s(n)
                                + medusa.prices.lm_head_s(n))
    assert medusa.heads_time(n) == pytest.approx(heads + graph, rel=1e-9)


def test_draft_tensor_parallel_size_shards_the_eagle_layer():
    # Llama-2-70B over 4 x A100-40GB with EAGLE-2: the layer sharded with the target's TP
    # (vLLM's and SGLang's default) leaves about twice the KV cache of a replicated one
    def dep(dtp):
        par = {"tensor_parallel": 4}
        if dtp is not None:
            par["draft_tensor_parallel_size"] = dtp
        return build_deployment(scenario_from_dict(
            {"hardware": "a100-40gb", "target": "llama-2-70b",
             "draft": "eagle-llama-2-70b-chat", "parallelism": par,
             "policy": {"name": "eagle2"},
             "acceptance": {"model": "tree_topk", "coverage": [[0.6, 0.7, 0.75, 0.78]]}},
            source="t"))
    sharded, replicated = dep(None), dep(1)
    target, layer = load_model("llama-2-70b"), load_model("eagle-llama-2-70b-chat")
    for d, share in ((sharded, 4), (replicated, 1)):
        weights = target.weight_bytes() / 4 + layer.weight_bytes() / share
        assert d.memory.weight_bytes == pytest.approx(weights)
        per_token = target.kv_bytes_per_token() / 4 + layer.kv_bytes_per_token() / share
        assert d.memory.kv_bytes_per_token == pytest.approx(per_token)
        assert d.memory.kv_budget_bytes == pytest.approx(
            A100.memory_bytes * 0.9 - weights - d.memory.activation_bytes)
    assert sharded.memory.kv_tokens > 1.8 * replicated.memory.kv_tokens
    # and the layer's forwards are priced on its shard
    assert sharded.target_cost.parallel.draft_tp == 4


def test_draft_tensor_parallel_size_is_one_or_the_targets():
    with pytest.raises(SpecsimError, match="draft_tensor_parallel_size"):
        scenario_from_dict({"parallelism": {"tensor_parallel": 4,
                                            "draft_tensor_parallel_size": 2}}, source="t")
    # a draft whose heads the target's TP cannot split is told how to replicate it
    sc = scenario_from_dict({"target": "llama-2-70b", "draft": "llama-68m",
                             "parallelism": {"tensor_parallel": 8}, "hardware": "a100-80gb",
                             "policy": {"name": "chain"}}, source="t")
    with pytest.raises(SpecsimError, match="draft_tensor_parallel_size: 1"):
        build_deployment(sc)


def test_execution_block_is_validated():
    assert parse_execution({"enforce_eager": True}, source="t") == {"cuda_graphs": False}
    with pytest.raises(SpecsimError, match="execution.cudagraph_capture_sizes"):
        parse_execution({"cudagraph_capture_sizes": []}, source="t")
    with pytest.raises(SpecsimError, match="execution.step_model"):
        parse_execution({"step_model": "fast"}, source="t")
    with pytest.raises(SpecsimError, match="execution.cpu_step_us"):
        parse_execution({"cpu_step_us": -1}, source="t")
    with pytest.raises(SpecsimError, match="execution"):
        parse_execution({"cuda_graph": True}, source="t")
    sc = scenario_from_dict({"execution": {"enforce_eager": True, "cpu_step_us": 50}},
                            source="t")
    dep = build_deployment(sc)
    assert not dep.target_cost.execution.cuda_graphs
    assert dep.target_cost.execution.cpu_step_s == pytest.approx(50e-6)


def test_collectives_come_from_the_profiles_measured_model():
    # Llama-3.1-70B decode at batch 1: 2 all-reduces per layer of 8192 x 2 bytes, priced by
    # the profile's collectives (fitted to Vidur's DGX A100 all-reduce timings) rather than
    # a guessed 2(p - 1) x 5 us: TP8 is no longer slower than TP4
    hw, model = load_profile("a100-80gb"), load_model("llama-3.1-70b")
    for custom in (True, False):
        ex = dataclasses.replace(CostModel(hw, model).execution, custom_all_reduce=custom)
        times = {}
        for tp in (2, 4, 8):
            cm = CostModel(hw, model, Parallelism(tensor_parallel=tp), execution=ex)
            ops = {o.name: o for o in cm.breakdown([1.0], [512.0]).ops}
            assert ops["all_reduce"].time_s == pytest.approx(
                2 * model.num_layers * hw.collectives.all_reduce_s(8192 * 2, tp, custom=custom))
            assert ops["logits_gather"].time_s == pytest.approx(
                hw.collectives.all_gather_s(model.vocab_size * 2, tp))
            times[tp] = cm.decode_time(1, 512)
        assert times[8] < times[4] < times[2]


def test_custom_all_reduce_is_a_knob():
    assert parse_execution({"disable_custom_all_reduce": True}, source="t") == \
        {"custom_all_reduce": False}
    sc = scenario_from_dict({"hardware": "a100-80gb", "target": "llama-2-70b",
                             "parallelism": {"tensor_parallel": 4}, "policy": "none",
                             "execution": {"disable_custom_all_reduce": True}}, source="t")
    assert not build_deployment(sc).target_cost.execution.custom_all_reduce


def test_the_cost_model_prices_kernels_as_the_measured_validation_does():
    # `specsim validate --measurements` (calibrate/measured.py) and the cost model share one
    # formula: the per-layer time of each GEMM, and of the norms + adds + activation + rope,
    # equals the validator's prediction of Vidur's kernels of the same shapes
    measured = pytest.importorskip("calibrate.measured")
    root = SHARED / "measured" / "vidur" / "compute" / "a100"
    if not root.is_dir():
        pytest.skip("../shared/measured is absent")
    hw = load_profile("a100-80gb")
    roof = hw.roofline("fp16")
    model = load_model("llama-2-7b")
    kernels = measured.load_measurements(root, models=["meta-llama/Llama-2-7b-hf"]).kernels
    ex = Execution(cuda_graphs=True, graph_launch_s=0.0)  # no launches: GPU time only
    cm = CostModel(hw, model, execution=ex)
    layers = model.num_layers
    for tokens in (1, 64, 1024):
        rows = kernels[(kernels["tokens"] == tokens) & (kernels["tp"] == 1)]
        if rows.empty:
            continue
        rows = rows.drop_duplicates("op")
        pred = dict(zip(rows["op"], measured.predict(rows, roof)))
        ops = {o.name: o for o in cm.breakdown([float(tokens)], [0.0]).ops}
        pairs = {"qkv_proj": "attn_pre_proj", "o_proj": "attn_post_proj",
                 "mlp_up": "mlp_up_proj", "mlp_down": "mlp_down_proj"}
        for ours, theirs in pairs.items():
            assert ops[ours].time_s / layers == pytest.approx(pred[theirs], rel=1e-9)
        elementwise = pred["input_layernorm"] + pred["post_attention_layernorm"] \
            + 2 * pred["add"] + pred["mlp_act"] + pred["attn_rope"]
        assert ops["elementwise"].time_s / layers == pytest.approx(elementwise, rel=1e-9)


def test_an_uncaptured_draft_loop_pays_a_host_step_per_draft_forward():
    # Hugging Face assisted generation calls the draft model from Python once per token
    base = {"hardware": "a100-40gb", "target": "opt-13b", "draft": "opt-125m",
            "policy": {"name": "chain", "num_speculative_tokens": 3}}
    inside = build_deployment(scenario_from_dict(base, source="t"))
    loop = build_deployment(scenario_from_dict(
        {**base, "execution": {"captured_draft_loop": False}}, source="t"))
    ctx = np.full(4, 200.0)
    host = inside.target_cost.execution.cpu_step_s
    assert loop.draft_cost.chain_decode_time(ctx, 3) == pytest.approx(
        inside.draft_cost.chain_decode_time(ctx, 3) + 3 * host, rel=1e-9)
    # and the target's own step is unchanged
    assert loop.target_cost.decode_time(4, 200) == inside.target_cost.decode_time(4, 200)


def test_the_run_says_how_its_steps_were_executed():
    from simulator.simulate import simulate
    sc = scenario_from_dict({"workload": {"trace": "default", "max_requests": 5},
                             "execution": {"enforce_eager": True, "async_scheduling": True}},
                            source="t")
    text = simulate(sc).info["execution"]
    assert text.startswith("eager (10 us a kernel launch)") and "overlapped" in text
    graphs = Execution(capture_sizes=(1, 2, 4, 8), graph_launch_s=15e-6, cpu_step_s=2e-4)
    assert graphs.describe() == ("CUDA graphs up to 8 tokens (15 us a replay); "
                                 "host 200 us a step, synchronous")


def test_data_parallel_drafts_are_not_sharded():
    # SpecInfer's SSMs run a whole copy per GPU (the batch split over them): a TP-8 target
    # keeps them unsharded, in memory and in time, and their heads need not divide by 8
    sc = scenario_from_dict({"hardware": "a100-80gb", "target": "llama-2-70b",
                             "parallelism": {"tensor_parallel": 8},
                             "policy": {"name": "specinfer",
                                        "draft_models": ["llama-68m", "llama-160m"],
                                        "num_speculative_tokens": 4},
                             "acceptance": {"model": "tree_topk",
                                            "coverage": [[0.6, 0.7], [0.6, 0.7]]}},
                            source="t")
    dep = build_deployment(sc)
    drafts = load_model("llama-68m").weight_bytes() + load_model("llama-160m").weight_bytes()
    assert dep.memory.weight_bytes == pytest.approx(
        load_model("llama-2-70b").weight_bytes() / 8 + drafts)


def test_single_roofline_keeps_the_collectives():
    hw, model = load_profile("a100-80gb"), load_model("llama-2-7b")
    one = Execution(graph_launch_s=0.0, step_model="single_roofline")
    cm = CostModel(hw, model, Parallelism(tensor_parallel=4), execution=one)
    cost = cm.breakdown(np.ones(16), np.full(16, 512.0))
    ops = {o.name: o for o in cost.ops}
    assert set(ops) == {"step", "all_reduce", "logits_gather"}
    assert ops["all_reduce"].time_s == pytest.approx(
        2 * model.num_layers * hw.collectives.all_reduce_s(16 * model.hidden_size * 2, 4))
    assert cost.time_s == pytest.approx(sum(o.time_s for o in cost.ops) + cost.launch_s
                                        + cost.step_overhead_s)


def test_cuda_graphs_beat_eager_for_a_small_model_at_batch_one():
    # the reason vLLM captures graphs: a small model's decode is launch-bound when eager
    from simulator.cost.execution import eager
    for name in ("a100-40gb", "h100-sxm"):
        hw = load_profile(name)
        for model in ("opt-125m", "llama-3.1-8b"):
            spec = load_model(model)
            graphs = CostModel(hw, spec).decode_time(1, 512)
            launched = CostModel(hw, spec, execution=eager(hw)).decode_time(1, 512)
            assert graphs < launched
