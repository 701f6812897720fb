"""How a model is split over devices: tensor, pipeline and expert parallelism, weight offloading.

Expert parallelism follows vLLM's ``enable_expert_parallel``: a MoE layer's experts are spread
whole over the EP ranks instead of each expert being sharded over the TP ranks; attention (and
every dense layer) stays tensor parallel.  vLLM's EP size is TP x DP.  Without data-parallel
attention a replica is one TP group (replicas are separate engines) and EP is off (1) or
equal to tensor_parallel.  With ``data_parallel_attention`` N > 1 (SGLang's
``--enable-dp-attention --dp-size N``, vLLM's ``--data-parallel-size N
--enable-expert-parallel``) one replica spans N attention ranks of ``tensor_parallel`` GPUs
each, stepping in lockstep, its experts spread over all of them (EP = TP x N):
simulator/cost/dp_attention.py prices it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import as_bool, as_number, as_str, check_keys, require_mapping


@dataclass(frozen=True)
class Parallelism:
    """How a model is split over devices and where its weights live."""

    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    micro_batches: int = 1
    offload_fraction: float = 0.0  # share of weights streamed over the host link each step
    # vLLM's draft_tensor_parallel_size: the draft (a draft model, EAGLE/Medusa/MTP heads)
    # is sharded over this many of the target's ranks; None: the target's TP (vLLM's
    # default, and how vLLM and SGLang run EAGLE heads), 1: replicated on one GPU per rank
    draft_tensor_parallel: int | None = None
    # vLLM's enable_expert_parallel: 1 off; else the EP degree, which must be tensor_parallel
    expert_parallel: int = 1
    # SGLang's dp_size with enable_dp_attention, vLLM's data_parallel_size with
    # enable_expert_parallel: attention data-parallel ranks in this replica (1: none)
    data_parallel_attention: int = 1
    # how a MoE layer's tokens reach the experts under DP attention: all_gather (vLLM's
    # allgather_reducescatter backend), all_to_all (DeepEP low-latency) or deepep_normal
    # (DeepEP's normal kernels, SGLang's prefill; dp_attention.py)
    moe_dispatch: str = "all_gather"
    # SGLang's enable_two_batch_overlap: the step run as two micro-batches, one's dispatch
    # and combine under the other's compute (dp_attention.py, tbo.py)
    two_batch_overlap: bool = False
    # vLLM's dbo_decode_token_threshold / dbo_prefill_token_threshold: a step is split only
    # where every DP rank holds at least this many tokens (the decode one for a rank whose
    # batch is uniform decode, tbo.overlap_applies); 0: every step (SGLang has no threshold)
    tbo_decode_token_threshold: int = 0
    tbo_prefill_token_threshold: int = 0
    # whose two-batch overlap: "sglang" (a prefill batch cut between whole requests, its
    # decode schedule staggered by two stages) or "vllm" (DBO: cut at the token midpoint,
    # one schedule for both); simulator/cost/tbo.py
    tbo_schedule: str = "sglang"
    # the SMs DeepEP's normal kernels hold while they run beside the other micro-batch's
    # compute (tbo.sm_split): SGLang's --deepep-config normal_dispatch num_sms, else DeepEP's
    # Buffer.num_sms default 20 (deepseek-ai/DeepEP deep_ep/buffer.py; vLLM's
    # VLLM_DBO_COMM_SMS default, vllm/envs.py, is 20 as well)
    deepep_num_sms: int = 20
    # SGLang's enable_eplb and ep_num_redundant_experts (vLLM's enable_eplb and
    # eplb_config.num_redundant_experts): experts placed, hot ones replicated, by DeepSeek's
    # EPLB from the routing's expected loads (rank_load.busiest_rank_share)
    eplb: bool = False
    redundant_experts: int = 0

    def __post_init__(self) -> None:
        for name in ("tensor_parallel", "pipeline_parallel", "micro_batches",
                     "data_parallel_attention"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SpecsimError(f"must be a whole number >= 1, got {value!r}", field=name)
        for name in ("tbo_decode_token_threshold", "tbo_prefill_token_threshold"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise SpecsimError(f"must be a whole number >= 0, got {value!r}",
                                   field=f"parallelism.{name}")
        dtp = self.draft_tensor_parallel
        if dtp is not None and (isinstance(dtp, bool) or dtp not in (1, self.tensor_parallel)):
            raise SpecsimError(f"must be 1 or the target's tensor_parallel "
                               f"({self.tensor_parallel}), got {dtp!r}",
                               field="parallelism.draft_tensor_parallel_size",
                               fix=f"use 1 or {self.tensor_parallel}, as vLLM allows")
        if self.data_parallel_attention > 1:
            self._check_dp_attention()
            return
        ep = self.expert_parallel
        if isinstance(ep, bool) or ep not in (1, self.tensor_parallel):
            raise SpecsimError(f"must be 1 (off) or the tensor_parallel degree "
                               f"({self.tensor_parallel}), got {ep!r}",
                               field="parallelism.expert_parallel",
                               fix="write expert_parallel: true (EP = TP, as vLLM's "
                                   "enable_expert_parallel with one data-parallel rank) or "
                                   "false")
        if not (0.0 <= self.offload_fraction <= 1.0):
            raise SpecsimError(f"must be in [0, 1], got {self.offload_fraction!r}",
                               field="offload_fraction")

    def _check_dp_attention(self) -> None:
        """What this project models of DP attention: one GPU per attention rank, experts
        spread over every GPU, one pipeline stage, no offloading."""
        dp, field = self.data_parallel_attention, "parallelism.data_parallel_attention"
        if self.tensor_parallel != 1:
            raise SpecsimError(f"data_parallel_attention {dp} with tensor_parallel "
                               f"{self.tensor_parallel}: attention TP inside a DP rank is "
                               "not modelled", field=field,
                               fix=f"use tensor_parallel: 1 (SGLang --tp {dp} --dp {dp}, vLLM "
                                   f"-tp 1 -dp {dp}) or drop data_parallel_attention")
        if self.expert_parallel != dp:
            raise SpecsimError(f"data_parallel_attention {dp} needs the experts spread over "
                               f"its {dp} GPUs, got expert_parallel {self.expert_parallel}",
                               field="parallelism.expert_parallel",
                               fix="write expert_parallel: true (SGLang --ep, vLLM "
                                   "--enable-expert-parallel)")
        if self.pipeline_parallel != 1 or self.offload_fraction or \
                self.draft_tensor_parallel not in (None, 1):
            raise SpecsimError("data_parallel_attention is modelled with one pipeline stage, "
                               "no offloading and the draft on its rank", field=field,
                               fix="drop pipeline_parallel, offload_fraction and "
                                   "draft_tensor_parallel_size")
        if self.two_batch_overlap and self.moe_dispatch == "all_gather":
            raise SpecsimError("two-batch overlap is modelled with DeepEP's dispatch (its "
                               "communication beside the other micro-batch's compute)",
                               field="parallelism.enable_two_batch_overlap",
                               fix="set moe_dispatch: all_to_all or deepep_normal, or drop "
                                   "enable_two_batch_overlap")
        if self.tbo_schedule not in TBO_SCHEDULES:
            raise SpecsimError(f"unknown schedule {self.tbo_schedule!r}",
                               field="parallelism.tbo_schedule", fix="one of " +
                               ", ".join(TBO_SCHEDULES))
        if self.redundant_experts and not self.eplb:
            raise SpecsimError("redundant experts are placed by EPLB",
                               field="parallelism.ep_num_redundant_experts",
                               fix="add enable_eplb: true or drop ep_num_redundant_experts")
        if self.moe_dispatch not in MOE_DISPATCH:
            raise SpecsimError(f"unknown MoE dispatch {self.moe_dispatch!r}",
                               field="parallelism.moe_dispatch",
                               fix="one of " + ", ".join(MOE_DISPATCH))

    def check_splits(self, model) -> None:
        """``model`` (a ModelSpec) splits as this asks: its heads over the TP ranks, its
        layers over the pipeline stages."""
        if model.num_heads % self.tensor_parallel:
            raise SpecsimError(f"{model.name} has {model.num_heads} heads, not divisible by "
                               f"tensor_parallel={self.tensor_parallel}",
                               field="tensor_parallel")
        if self.pipeline_parallel > model.num_layers:
            raise SpecsimError(f"{model.name} has only {model.num_layers} layers",
                               field="pipeline_parallel")

    @property
    def draft_tp(self) -> int:
        """The draft's tensor parallel degree."""
        return self.tensor_parallel if self.draft_tensor_parallel is None \
            else self.draft_tensor_parallel

    def draft(self) -> "Parallelism":
        """The draft's own Parallelism (its weights on the host's GPUs, no offloading)."""
        return Parallelism(tensor_parallel=self.draft_tp)

    @property
    def devices(self) -> int:
        return self.tensor_parallel * self.pipeline_parallel * self.data_parallel_attention

    def attention_rank(self) -> "Parallelism":
        """One DP attention rank's own placement (its TP group; no experts of its own)."""
        return Parallelism(tensor_parallel=self.tensor_parallel,
                           draft_tensor_parallel=self.draft_tensor_parallel)


MOE_DISPATCH = ("all_gather", "all_to_all", "deepep_normal")
TBO_SCHEDULES = ("sglang", "vllm")


def expert_parallel_degree(value: Any, tp: int, source: str, dp: int = 1) -> int:
    """A scenario's ``expert_parallel``: true (EP = TP x DP attention), false, or the degree
    (1 or that)."""
    if dp > 1:  # the EP group spans every attention rank
        tp = tp * dp
    if isinstance(value, bool):
        return tp if value else 1
    ep = as_number(value, source=source, field="parallelism.expert_parallel", integer=True,
                   minimum=1, maximum=1024)
    if ep not in (1, tp):
        raise SpecsimError(f"must be true, false, 1 or tensor_parallel ({tp}), got {ep}",
                           source=source, field="parallelism.expert_parallel",
                           fix="EP = TP x DP in vLLM (DP: data_parallel_attention): write "
                               "expert_parallel: true")
    return ep


def _tbo_setting(data: Any, key: str, kw: dict, source: str) -> int:
    """A two-batch-overlap setting, given with the overlap: a token threshold (a whole
    number >= 0), the schedule, or DeepEP's SM count (a whole number >= 1)."""
    if not kw.get("two_batch_overlap"):
        raise SpecsimError("a two-batch-overlap setting without the overlap",
                           source=source, field=f"parallelism.{key}",
                           fix="add enable_two_batch_overlap: true or remove it")
    if key == "tbo_schedule":
        return as_str(data[key], source=source, field=f"parallelism.{key}",
                      choices=TBO_SCHEDULES)
    return as_number(data[key], source=source, field=f"parallelism.{key}", integer=True,
                     minimum=int(key == "deepep_num_sms"), maximum=10_000_000)


def parallelism_from_dict(data: Any, source: str) -> Parallelism:
    """A scenario's (or a disaggregated pool's) ``parallelism`` mapping, validated."""
    data = require_mapping(data or {}, source=source, field="parallelism")
    keys = ("tensor_parallel", "pipeline_parallel", "micro_batches", "offload_fraction",
            "draft_tensor_parallel_size", "expert_parallel", "data_parallel_attention",
            "moe_dispatch", "enable_two_batch_overlap", "enable_eplb",
            "ep_num_redundant_experts", "tbo_decode_token_threshold",
            "tbo_prefill_token_threshold", "tbo_schedule", "deepep_num_sms")
    check_keys(data, allowed=keys, source=source, prefix="parallelism.")
    kw = {k: as_number(data[k], source=source, field=f"parallelism.{k}", integer=True,
                       minimum=1, maximum=1024)
          for k in keys[:3] + keys[6:7] if k in data}
    if "moe_dispatch" in data:
        kw["moe_dispatch"] = as_str(data["moe_dispatch"], source=source,
                                    field="parallelism.moe_dispatch", choices=MOE_DISPATCH)
    for key, name in (("enable_two_batch_overlap", "two_batch_overlap"),
                      ("enable_eplb", "eplb")):
        if key in data:
            kw[name] = as_bool(data[key], source=source, field=f"parallelism.{key}")
    for key in ("tbo_decode_token_threshold", "tbo_prefill_token_threshold", "tbo_schedule",
                "deepep_num_sms"):
        if key in data:
            kw[key] = _tbo_setting(data, key, kw, source)
    if "ep_num_redundant_experts" in data:
        kw["redundant_experts"] = as_number(data["ep_num_redundant_experts"], source=source,
                                            field="parallelism.ep_num_redundant_experts",
                                            integer=True, minimum=0, maximum=4096)
    if "offload_fraction" in data:
        kw["offload_fraction"] = float(as_number(data["offload_fraction"], source=source,
                                                 field="parallelism.offload_fraction",
                                                 minimum=0.0, maximum=1.0))
    if data.get("draft_tensor_parallel_size") is not None:
        kw["draft_tensor_parallel"] = as_number(
            data["draft_tensor_parallel_size"], source=source, integer=True, minimum=1,
            maximum=1024, field="parallelism.draft_tensor_parallel_size")
    if data.get("expert_parallel") is not None:
        kw["expert_parallel"] = expert_parallel_degree(
            data["expert_parallel"], kw.get("tensor_parallel", 1), source,
            kw.get("data_parallel_attention", 1))
    if kw.get("data_parallel_attention", 1) == 1 and any(
            kw.get(k) for k in ("two_batch_overlap", "eplb", "redundant_experts")):
        # a DP rank's own placement (memory_plan) drops them; a scenario cannot ask for them
        raise SpecsimError("two-batch overlap and EPLB are modelled under data-parallel "
                           "attention only", source=source,
                           field="parallelism.enable_two_batch_overlap",
                           fix="set data_parallel_attention > 1 with expert_parallel: true, "
                               "or drop enable_two_batch_overlap, enable_eplb and "
                               "ep_num_redundant_experts")
    return Parallelism(**kw)
