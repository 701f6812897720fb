"""One eager forward as a CUDA stream: the host issues kernels back to back, the GPU runs them
in order, asynchronously.

A kernel launch returns to the host before the kernel runs: "kernel launches" are among the
operations CUDA lists as asynchronous with respect to the host (CUDA C++ Programming Guide,
section "Asynchronous Concurrent Execution", "Concurrent Execution between Host and Device",
docs.nvidia.com/cuda/cuda-c-programming-guide/#concurrent-execution-between-host-and-device),
and PyTorch's eager mode relies on it: "By default, GPU operations are asynchronous. When you
call a function that uses the GPU, the operations are enqueued to the particular device, but
not necessarily executed until later" (PyTorch docs, CUDA semantics, Asynchronous execution:
https://pytorch.org/docs/stable/notes/cuda.html#asynchronous-execution).  Kernels of one
stream run in issue order.  So with the host issuing one kernel every ``L`` seconds
(``Execution.kernel_launch_s``) and kernel ``i`` taking ``g_i`` on the GPU, from the
forward's start::

    issue_i = i * L,  start_i = max(issue_i, end_{i-1}),  end_i = start_i + g_i

and the forward ends at ``end_n = max_j (j * L + g_j + ... + g_n)``: a long kernel (a
linear) hides the launches of the small kernels after it, a run of small kernels is paced
by the host.  ``stream_end`` is the recurrence itself; the rest is its closed form on
*segments*: a run of kernels is ``(n, G, M)`` (kernels, GPU seconds, ``max_j (j L +
suffix_j)``), and two runs one after the other are ``(n_a + n_b, G_a + G_b, max(M_a + G_b,
n_a L + M_b))`` (``join``), so a layer is priced once and repeated (``repeat``: ``M + (k - 1)
max(G, n L)``), exactly as the recurrence over all its kernels.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


class Segment(NamedTuple):
    """A run of kernels: ``n`` launches, ``gpu`` seconds of kernels, ``end`` the time from
    the run's start (an idle GPU, the host about to issue) to its last kernel's end."""

    n: float
    gpu: float
    end: float


EMPTY = Segment(0.0, 0.0, 0.0)


def stream_end(gpu_s, launch_s: float) -> float:
    """The recurrence, kernel by kernel: when the last of the kernels ``gpu_s`` (in issue
    order) ends, the host issuing one every ``launch_s``."""
    end = 0.0
    for i, g in enumerate(gpu_s, start=1):
        end = max(i * launch_s, end) + float(g)
    return end


def kernels(n: float, gpu_s: float, launch_s: float) -> Segment:
    """``n`` kernels of ``gpu_s / n`` seconds each (an operator's launches, alike); ``n`` 0:
    GPU time that lengthens the kernel before it (no launch of its own)."""
    if n <= 0:
        return Segment(0.0, gpu_s, gpu_s)
    if n < 1.0:  # an operator of some layers only, averaged over all (eager_stream.py)
        return Segment(n, gpu_s, launch_s + gpu_s)
    return Segment(n, gpu_s, max(launch_s + gpu_s, n * launch_s + gpu_s / n))


def join(a: Segment, b: Segment, launch_s: float, maximum=max) -> Segment:
    """Run ``a`` then ``b`` on one stream (``maximum``: ``np.maximum`` where a segment's
    times are arrays)."""
    return Segment(a.n + b.n, a.gpu + b.gpu, maximum(a.end + b.gpu, a.n * launch_s + b.end))


def chain(parts, launch_s: float) -> Segment:
    """The segments ``parts`` one after the other."""
    out = EMPTY
    for p in parts:
        out = join(out, p, launch_s)
    return out


def repeat(s: Segment, k: int, launch_s: float, maximum=max) -> Segment:
    """``s`` run ``k >= 1`` times back to back: the first run's end, then each further run
    adds its GPU time or its launches, whichever is longer (closed form of ``join``)."""
    return Segment(s.n * k, s.gpu * k, s.end + (k - 1) * maximum(s.gpu, s.n * launch_s))


def forward_end(before: Segment, pre: Segment, attention_s, post: Segment,
                layers: int, head: Segment, launch_s: float, maximum=max):
    """An eager forward: ``before`` (the embedding), ``layers`` layers each ``pre``, one
    attention kernel of ``attention_s`` (a float, or an array with ``np.maximum``),
    ``post``, then ``head`` (final norm, LM head, sampling)."""
    attention = Segment(1.0, attention_s, launch_s + attention_s)  # kernels(1, a)
    layer = join(join(pre, attention, launch_s, maximum), post, launch_s, maximum)
    body = join(before, repeat(layer, layers, launch_s, maximum), launch_s, maximum)
    return join(body, head, launch_s, maximum).end


@dataclass(frozen=True, slots=True)
class StreamParts:
    """An eager forward apart from its attention (``of``: the embedding, one layer's
    kernels before and after its attention, the head; ``tail_s`` the pipeline's sends and an
    absorbed W_UV_O's GPU time, after the rest), as the numbers ``forward_end`` reduces to
    at an attention of ``a`` seconds a layer: the layer's end ``max(x + a, y)``, its GPU
    time ``g + a``, its launches ``nl``; ``layers`` of them after the embedding's end
    ``b_end`` (GPU ``b_gpu``, launches ``b_nl``), then the head's GPU ``h_gpu``, the forward
    ending no sooner than ``h_end`` (all the launches, then the head's own end)."""

    x: float
    y: float
    g: float
    nl: float
    layers: int
    b_end: float
    b_gpu: float
    b_nl: float
    h_gpu: float
    h_end: float
    tail_s: float

    @classmethod
    def of(cls, before: Segment, pre: Segment, post: Segment, head: Segment, layers: int,
           launch_s: float, tail_s: float) -> "StreamParts":
        """The numbers of ``forward_end(before, pre, a, post, layers, head, launch_s)``."""
        n1 = (pre.n + 1.0) * launch_s  # the attention's issue
        n = pre.n + 1.0 + post.n
        return cls(max(pre.end, n1) + post.gpu, n1 + post.end, pre.gpu + post.gpu,
                   n * launch_s, layers, before.end, before.gpu, before.n * launch_s,
                   head.gpu, (before.n + layers * n) * launch_s + head.end, tail_s)

    def device_s(self, a_layer, maximum=max):
        """The forward's end at ``a_layer`` seconds of attention a layer (a float, or an
        array with ``np.maximum``: the same operations either way): ``forward_end``'s
        joins, in closed form."""
        g = self.g + a_layer
        body = maximum(self.b_end + self.layers * g, self.b_nl + maximum(self.x + a_layer, self.y)
                       + (self.layers - 1) * maximum(g, self.nl))
        return maximum(body + self.h_gpu, self.h_end) + self.tail_s
