"""How an engine runs a forward: eager launches or CUDA-graph replay, host CPU time, overlap.

A step's time is ``GPU time + launch time + the CPU time not hidden behind the GPU``, and
each part is counted once:

- **GPU time**: the operators' roofline times (the cost model's per-operator sum, or one
  roofline over the whole step with ``step_model: single_roofline``).
- **Launch time**, only where launches happen.  Eager: the host issues one kernel per
  ``kernel_launch_s`` while the GPU runs them asynchronously, in order: a forward where
  every forward runs eager is one CUDA stream, kernel i issued at ``i * launch`` and
  started when it is issued and its predecessor has ended (simulator/cost/stream.py,
  eager_stream.py: a long kernel hides the launches of the small ones after it, a run of
  small kernels is paced by the host).  A forward run eager beside graphs (past the
  largest captured size) prices each operator of n kernels ``max(GPU time, n *
  launch)``.  CUDA graphs: one ``graph_launch_s`` per replay and no per-kernel
  launch; the batch is padded to the next captured size (vLLM pads ``num_tokens`` to a
  ``cudagraph_capture_sizes`` entry).  vLLM's default mode, FULL_AND_PIECEWISE, replays one
  full graph for a uniform batch (every request the same query length: decode, or
  verification of the same k) and, for a mixed prefill/decode batch, piecewise graphs
  around attention, which runs eager (vLLM docs/design/cuda_graphs.md); an engine that ran
  piecewise graphs only (``SpecHost.piecewise_graphs``: vLLM before PR #25444, 0.9 and
  0.10) replays them for a uniform batch too; batches above the
  largest captured size run eager.  The LM head and sampling run outside the graph
  (``compute_logits`` follows the captured forward).
- **Host CPU time** per engine step: scheduling, input preparation, sampling bookkeeping:
  ``cpu_step_s + cpu_per_seq_s * sequences``, charged once per engine step (a draft loop
  inside the step pays none: it runs in the same ``execute_model`` call).  Synchronous
  engines add it to the step; with ``async_scheduling`` (vLLM's ``--async-scheduling``,
  opt-in: PR #19970) it overlaps the GPU and only what exceeds the GPU time shows.

Draft forwards (a draft model's chain, EAGLE's layer, Medusa's heads, a tree level) are
priced by the same rules: GPU time plus one graph replay per forward (vLLM and SGLang
capture the draft loop) or eager launches; with ``captured_draft_loop: false`` each also
pays a host step (Hugging Face assisted generation calls the draft model once per token
from Python).  No method pays or skips an overhead another of the same shape does not.

Host time grows per sequence where ``cpu_per_seq_us`` is set: vLLM issue #6913 measured V0's
output processing at 0.2 ms for batch 1 and 3.4 ms for batch 32 (Llama-3-70B, 4 x H100);
V1 runs output processing in the API-server process, overlapped with the engine
(vLLM V1 blog, Jan 2025), so the profiles' default is 0.
"""
from __future__ import annotations

import bisect
import dataclasses
from dataclasses import dataclass
from typing import Any

from simulator.cost.spec_catalog import PREFILL_KERNELS, load_engine
from simulator.cost.spec_work import SpecHost
from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import as_bool, as_number, as_str, check_keys, require_mapping

STEP_MODELS = ("sum_of_operators", "single_roofline")
MAX_CAPTURE_SIZES = 1024       # entries in a cudagraph_capture_sizes list
MAX_CAPTURE_TOKENS = 65536     # largest captured size accepted
# Launched even when the forward replays a full graph: final norm, LM head, sampling.
KERNELS_OUTSIDE_GRAPH = 3


def default_capture_sizes(max_num_seqs: int = 256, *, num_speculative_tokens: int = 0,
                          max_num_batched_tokens: int | None = None) -> tuple[int, ...]:
    """vLLM's default capture list (vllm/config/vllm.py ``_set_cudagraph_sizes``): 1, 2, 4,
    then multiples of 8 below 256, then multiples of 16, up to ``min(max_num_seqs *
    (1 + num_speculative_tokens) * 2, 512, max_num_batched_tokens)`` tokens; with
    speculation each size is rounded up to a multiple of 1 + num_speculative_tokens (vLLM's
    ``adjust_cudagraph_sizes_for_spec_decode``: a uniform decode batch is a whole number of
    requests)."""
    q = 1 + max(int(num_speculative_tokens), 0)
    top = min(int(max_num_seqs) * q * 2, 512)
    if max_num_batched_tokens is not None:
        top = min(top, int(max_num_batched_tokens))
    sizes = capture_sizes_up_to(max(top, 1))
    if q > 1:
        sizes = tuple(sorted({-(-s // q) * q for s in sizes}))
    return sizes


def capture_sizes_up_to(top: int) -> tuple[int, ...]:
    """vLLM's size pattern (1, 2, 4, multiples of 8 below 256, then of 16) up to ``top``
    (its ``max_cudagraph_capture_size``)."""
    return tuple(s for s in [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, top + 1, 16))
                 if s <= top)


@dataclass(frozen=True)
class Execution:
    """The engine's execution features and host costs (seconds); see the module docstring."""

    cuda_graphs: bool = True
    capture_sizes: tuple[int, ...] = default_capture_sizes()
    async_scheduling: bool = False
    step_model: str = "sum_of_operators"
    kernel_launch_s: float = 4e-6
    graph_launch_s: float = 0.0
    cpu_step_s: float = 0.0
    cpu_per_seq_s: float = 0.0
    custom_all_reduce: bool = True   # vLLM's default (disable_custom_all_reduce: false)
    # draft forwards run inside the target's engine step (vLLM, SGLang); False: each is its
    # own host step (Hugging Face assisted generation, a Python loop of model calls)
    captured_draft_loop: bool = True
    # the speculative iteration's host work (``execution.engine``: SpecHost, spec_work.py,
    # loaded by spec_catalog.py, priced by spec_host.py); none by default: only a named
    # engine's counts are charged
    spec: SpecHost = SpecHost()

    def __post_init__(self) -> None:
        if self.step_model not in STEP_MODELS:
            raise SpecsimError(f"unknown step model {self.step_model!r}",
                               field="execution.step_model",
                               fix="use one of: " + ", ".join(STEP_MODELS))

    @classmethod
    def free(cls) -> "Execution":
        """No launches, no host time: the plain roofline (``overheads: false``)."""
        return cls(cuda_graphs=False, kernel_launch_s=0.0)

    def graph_tokens(self, tokens: float, uniform: bool) -> tuple[str, float]:
        """The runtime mode of a forward of ``tokens`` tokens and the tokens it computes:
        ``("full", padded)``, ``("piecewise", padded)`` or ``("eager", tokens)``."""
        if not self.cuda_graphs or not self.capture_sizes or tokens <= 0:
            return "eager", tokens
        i = bisect.bisect_left(self.capture_sizes, tokens)
        if i == len(self.capture_sizes):
            return "eager", tokens
        full = uniform and not self.spec.piecewise_graphs  # vLLM 0.9-0.10: piecewise only
        return ("full" if full else "piecewise"), float(self.capture_sizes[i])

    def host_s(self, sequences: int) -> float:
        """CPU time of one engine step over ``sequences`` sequences."""
        return self.cpu_step_s + self.cpu_per_seq_s * sequences

    def describe(self) -> str:
        """One line: how steps are launched and what the host adds."""
        if self.cuda_graphs and self.capture_sizes:
            launch = (f"CUDA graphs up to {self.capture_sizes[-1]} tokens "
                      f"({self.graph_launch_s * 1e6:g} us a replay)")
        else:
            launch = f"eager ({self.kernel_launch_s * 1e6:g} us a kernel launch)"
        host = f"host {self.cpu_step_s * 1e6:g} us a step"
        if self.cpu_per_seq_s:
            host += f" + {self.cpu_per_seq_s * 1e6:g} us a sequence"
        host += ", overlapped" if self.async_scheduling else ", synchronous"
        parts = [launch, host]
        if not self.captured_draft_loop:
            parts.append("drafts step by step")
        if self.spec.name != "none":
            parts.append(f"speculative path of {self.spec.name}")
        if self.step_model != "sum_of_operators":
            parts.append(self.step_model)
        return "; ".join(parts)

    def visible_host_s(self, host_s: float, device_s: float) -> float:
        """The host time the step shows: all of it, or with async scheduling what the
        device time does not hide."""
        if self.async_scheduling:
            return max(host_s - device_s, 0.0)
        return host_s


_KEYS = ("enforce_eager", "disable_custom_all_reduce", "cudagraph_capture_sizes",
         "max_cudagraph_capture_size",
         "async_scheduling", "captured_draft_loop", "step_model", "kernel_launch_us",
         "graph_launch_us",
         "cpu_step_us", "cpu_per_seq_us", "engine", "prefill_attention")


def parse_execution(data: Any, *, source: str) -> dict:
    """Validate a scenario's ``execution:`` block; return it as Execution keyword overrides
    (only what was written).  vLLM's names where one exists."""
    data = require_mapping(data or {}, source=source, field="execution")
    check_keys(data, allowed=_KEYS, source=source, prefix="execution.")
    out: dict[str, Any] = {}
    if "enforce_eager" in data:
        out["cuda_graphs"] = not as_bool(data["enforce_eager"], source=source,
                                         field="execution.enforce_eager")
    if "disable_custom_all_reduce" in data:
        out["custom_all_reduce"] = not as_bool(data["disable_custom_all_reduce"],
                                               source=source,
                                               field="execution.disable_custom_all_reduce")
    if "cudagraph_capture_sizes" in data:
        sizes = data["cudagraph_capture_sizes"]
        if not isinstance(sizes, list) or not sizes or len(sizes) > MAX_CAPTURE_SIZES:
            raise SpecsimError(f"expected a list of 1 to {MAX_CAPTURE_SIZES} token counts",
                               source=source, field="execution.cudagraph_capture_sizes",
                               fix="e.g. [1, 2, 4, 8, 16, 32, 64]")
        vals = sorted({int(as_number(v, source=source, integer=True, minimum=1,
                                     maximum=MAX_CAPTURE_TOKENS,
                                     field=f"execution.cudagraph_capture_sizes[{i}]"))
                       for i, v in enumerate(sizes)})
        out["capture_sizes"] = tuple(vals)
    if "max_cudagraph_capture_size" in data:
        out["max_capture"] = int(as_number(data["max_cudagraph_capture_size"], source=source,
                                           field="execution.max_cudagraph_capture_size",
                                           integer=True, minimum=1,
                                           maximum=MAX_CAPTURE_TOKENS))
    if "async_scheduling" in data:
        out["async_scheduling"] = as_bool(data["async_scheduling"], source=source,
                                          field="execution.async_scheduling")
    if "captured_draft_loop" in data:
        out["captured_draft_loop"] = as_bool(data["captured_draft_loop"], source=source,
                                             field="execution.captured_draft_loop")
    if "engine" in data:
        out["spec"] = load_engine(as_str(data["engine"], source=source,
                                         field="execution.engine"), source=source)
    if "prefill_attention" in data:  # the engine's knob: SGLang --attention-backend fa3,
        # vLLM VLLM_FLASH_ATTN_VERSION; the named engine's choice otherwise (engines.yaml)
        out["spec"] = dataclasses.replace(out.get("spec", SpecHost()), prefill_attention=as_str(
            data["prefill_attention"], source=source, field="execution.prefill_attention",
            choices=PREFILL_KERNELS))
    if "step_model" in data:
        out["step_model"] = as_str(data["step_model"], source=source,
                                   field="execution.step_model", choices=STEP_MODELS)
    for key in ("kernel_launch_us", "graph_launch_us", "cpu_step_us", "cpu_per_seq_us"):
        if key in data:
            out[key.replace("_us", "_s")] = 1e-6 * as_number(
                data[key], source=source, field=f"execution.{key}", minimum=0, maximum=1e6)
    return out


def resolve_execution(hardware, overrides: dict | None = None, *, max_num_seqs: int = 256,
                      num_speculative_tokens: int = 0, max_num_batched_tokens: int | None = None,
                      overheads: bool = True) -> Execution:
    """The execution of a deployment: the profile's host and launch costs, vLLM's defaults
    for the features, the scenario's ``execution:`` overrides on top."""
    if not overheads:  # no launches, no host time; the step model and collectives stay
        # (and no speculative host work: it is priced in launches and host steps)
        keep = {k: v for k, v in (overrides or {}).items()
                if k in ("step_model", "custom_all_reduce")}
        return dataclasses.replace(Execution.free(), **keep)
    kw = dict(overrides or {})
    max_capture = kw.pop("max_capture", None)
    if "capture_sizes" not in kw:
        kw["capture_sizes"] = default_capture_sizes(
            max_num_seqs, num_speculative_tokens=num_speculative_tokens,
            max_num_batched_tokens=max_num_batched_tokens) if max_capture is None \
            else capture_sizes_up_to(max_capture)
    elif max_capture is not None:
        kw["capture_sizes"] = tuple(s for s in kw["capture_sizes"] if s <= max_capture)
    graphs = hardware.graph_launch_s
    if graphs is None:  # the device has no graph replay: every step runs eager
        kw["cuda_graphs"] = False
    base = {"kernel_launch_s": hardware.kernel_overhead_s,
            "graph_launch_s": graphs or 0.0,
            "cpu_step_s": hardware.step_overhead_s,
            "cpu_per_seq_s": hardware.cpu_per_seq_s}
    base.update(kw)
    return Execution(**base)


def eager(hardware) -> Execution:
    """Eager execution with the profile's costs: what torch micro-benchmarks time."""
    return dataclasses.replace(resolve_execution(hardware), cuda_graphs=False)
