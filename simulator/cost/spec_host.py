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

The kinds of work and an engine's entry are spec_work.py's (``SpecWork``, ``SpecHost``), the
catalog's loading spec_catalog.py's (``load_engine``): import each from its module.
"""
from __future__ import annotations

from simulator.cost.spec_work import SpecWork
from simulator.cost.tree_cascade import tree_cascade_s


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
