"""The closed-form half of ``CostModel``: what ``ClosedFormPricer`` declares (uniform batches
by their closed form, mixed decode-and-chunk forwards by a line, rows of a stretch at once)
and the forwards of a few requests on Python numbers (``few_step_time``).

``ClosedForms`` is a mixin of ``CostModel`` alone: it prices through the model's own parts
(``_uniform_step``'s memo of ``step_models.uniform_step``, ``_mode``, ``_fixed``,
``_step_from``, the tables) and holds the memos those prices are read from, each a pure
function of its key.  Every price is bitwise ``step_time``'s for the batch it describes
(``mixed_*``: within rounding), or None where no closed form applies; ``few_step_time``
always returns ``step_time``'s float.
"""
from __future__ import annotations

import numpy as np

from simulator.cost import few_step
from simulator.cost import mixed_chunk
from simulator.cost import scalar_forms as sf
from simulator.cost import step_models as sm
from simulator.cost import step_rows
from simulator.cost import token_terms as tt
from simulator.cost import verify_rows
from simulator.cost.mla import DECODE_MAX_QUERY
from simulator.engine.plan import ClosedFormPricer

_MISSING = object()
_SUM = np.add.reduce
_MEMO = 4096  # entries of the row parts' memo before it is cleared


class ClosedForms(ClosedFormPricer):
    """``CostModel``'s closed forms (see the module docstring).  The model sets, before any
    price: ``_closed`` (its class is ``CostModel`` itself, whose ``step_time`` these forms
    reproduce; a subclass pricing otherwise gets ``step_time`` row by row), ``_small``
    (``_closed`` and ``step_time`` has its closed forms: ``few_step_time``'s shortcuts
    apply) and ``_few`` (its attention on Python numbers, ``few_step.FewAttention``, None
    where it has none: MLA, no kernel shapes)."""

    _closed: bool
    _small: bool
    _few: few_step.FewAttention | None

    def _init_forms(self) -> None:
        """The memos, empty: closed forms by (n, u, logits), the decode line (``_MISSING``
        until first asked), row parts by (n, fewest, most, total, head tokens)."""
        self._uniform_cache: dict[tuple, sm.UniformStep | None] = {}
        self._decode_line, self._verify_lines = _MISSING, {}  # sm.decode_line's, by u
        self._row_parts: dict[tuple, object] = {}
        self._few_mixed: dict[tuple, tuple | None] = {}  # few_mixed_time's, by counts + head
        self._chunk = _MISSING  # chunk_pricer's, once asked

    def uniform_step_times(self, n: int, u: int, ctx_sums: np.ndarray,
                           logits: int) -> np.ndarray | None:
        """Seconds of K uniform forwards: ``n`` requests of ``u`` new tokens each (1: decode,
        gamma + 1: chain verification), the k-th with contexts summing to ``ctx_sums[k]``,
        ``logits`` tokens through the LM head in all.

        Bitwise what ``step_time`` returns for each of those batches; None where the closed
        form does not apply (``step_models.uniform_step`` says when).
        """
        k, sums = self._uniform(int(n), float(u), float(logits)), np.asarray(ctx_sums, np.float64)
        return None if k is None else sm.uniform_time(k, sums, np.maximum)

    def uniform_step_time(self, n: int, u: int, ctx_sum: float, logits: int) -> float | None:
        """``uniform_step_times`` of one batch, on Python numbers (the same operations: bitwise
        the same float); None where the closed form does not apply."""
        k = self._uniform(int(n), float(u), float(logits))
        return None if k is None else sm.uniform_time(k, float(ctx_sum), max)

    def uniform_pricer(self, n: int, u: int, logits: int):
        """``uniform_step_time(n, u, x, logits)`` as a function of the context sum ``x`` alone
        (bitwise the same float), None where the closed form does not apply."""
        k = self._uniform(int(n), float(u), float(logits))
        return None if k is None else sf.scalar_time(k)

    def uniform_form(self, n: int, u: int, logits: int) -> sm.UniformStep | None:
        """``uniform_pricer(n, u, logits)``'s closed form itself (memoised), for a caller
        that adds several forms' terms in one function (``drafting.chain_round_pricer``);
        None where none applies or ``step_time`` is not this class's own (``_closed``)."""
        return self._uniform(int(n), float(u), float(logits)) if self._closed else None

    def uniform_sum_pricer(self, n: int, forwards: list):
        """``total`` plus ``uniform_pricer(n, u, logits)(x + offset)`` of each (offset, u,
        logits) of ``forwards``, added left to right, as a function of (total, x), bitwise
        (``scalar_forms.sum_pricer``); None where a forward has no closed form or another."""
        ks = [(offset, self._uniform(int(n), float(u), float(lg))) for offset, u, lg in forwards]
        return None if any(k is None for _, k in ks) else sf.sum_pricer(ks)

    def mixed_step_time(self, n: int, ctx_sum: float, chunks: list[int], chunk_ctx: list[int],
                        logits: float) -> float | None:
        """One forward of ``n`` 1-token decodes (contexts summing to ``ctx_sum``) by the closed
        form's line, and chunks (``chunks[i]`` over ``chunk_ctx[i]``) by request: ``step_time``
        within rounding (``step_models.mixed_time``); None where no line applies, or uniform."""
        line = self._decode_line
        if line is _MISSING:
            line = self._decode_line = sm.decode_line(self)
        return None if line is None or n < 1 else \
            sm.mixed_time(self, line, n, ctx_sum, chunks, chunk_ctx, logits)

    def mixed_chunk_pricer(self):
        """``ClosedFormPricer.mixed_chunk_pricer``: the model's numbers read once
        (mixed_chunk.py), bitwise ``mixed_step_time``; its default where that has no form."""
        line = self._decode_line
        if line is _MISSING:
            line = self._decode_line = sm.decode_line(self)
        return mixed_chunk.one_chunk_pricer(self, line) or super().mixed_chunk_pricer()

    def chunk_pricer(self):
        """``uniform_step_time(1, c, x, 0)`` of a prompt chunk of ``c`` > 1 tokens (a whole
        number, as a float) over ``x`` cached ones as a function ``f(c, x)``, the model's
        numbers read once (``_chunk_pricer``); None where it has none (then
        ``uniform_step_time`` prices)."""
        got = self._chunk
        if got is _MISSING:
            got = self._chunk = _chunk_pricer(self)
        return got

    def mixed_verify_time(self, n: int, u: int, ctx_sum: float, chunks, chunk_ctx, logits):
        """``mixed_step_time`` of ``n`` chain verifications of ``u`` > 1 tokens (0: chunks only)."""
        return sm.mixed_verify_time(self, n, u, ctx_sum, chunks, chunk_ctx, logits)

    def _uniform(self, n: int, u: float, logits: float) -> sm.UniformStep | None:
        """The closed form of a uniform batch, memoised (None where none applies)."""
        key = (n, u, logits)
        k = self._uniform_cache.get(key, _MISSING)
        if k is _MISSING:
            k = sm.uniform_step(self, n, u, logits)
            tt.remember(self._uniform_cache, key, k)
        return k

    def chain_decode_times(self, n: int, ctx_sums: np.ndarray, steps: int) -> np.ndarray | None:
        """``chain_decode_time`` of K batches of ``n`` requests at once, the k-th with
        contexts summing to ``ctx_sums[k]``: bitwise each one's where it is the uniform
        closed form (one row of ``steps`` forwards per batch, summed as its 1-D sum is),
        None elsewhere."""
        if steps <= 0 or n < 1:
            return None
        s = np.asarray(ctx_sums, dtype=np.float64)
        times = self.uniform_step_times(n, 1, s[:, None] + n * np.arange(steps), n)
        return None if times is None else np.add.reduce(times, axis=1)

    def verify_step_times(self, tokens: np.ndarray, context: np.ndarray) -> np.ndarray:
        """``ClosedFormPricer.verify_step_times``, the rows at once (verify_rows.py)."""
        return verify_rows.verify_step_times(self, tokens, context, self._closed)

    def rows_step_times(self, tokens, context, logits=None) -> np.ndarray:
        """``ClosedFormPricer.rows_step_times``, the rows at once (step_rows.py)."""
        return step_rows.rows_step_times(self, tokens, context, logits, self._closed)

    def row_part(self, n: int, row: np.ndarray, low: float, high: float, total: float,
                 head: float):
        """What a forward of ``n`` requests (``low``..``high`` new tokens each, ``total`` in
        all, ``head`` through the LM head; ``row``: its token counts, read only where
        ``low`` is 0) costs apart from its contexts: ``step_time``'s closed form of a
        uniform batch where one applies, else (runtime mode, fixed seconds) for
        ``_step_from``; memoised, a function of those numbers and, where the engine prices
        the absorbed ``W_UV_O`` by them, the row's decode rows (``_decode_rows``)."""
        rows = self._decode_rows(row)  # 0.0 at once where nothing is priced by them
        key = (n, low, high, total, head, rows)
        part = self._row_parts.get(key)
        if part is None:
            k = self._uniform(n, low, head) if low == high else None
            if k is not None:
                part = k
            else:
                mode = self._mode(row, total, low, high)
                part = mode[0], self._fixed(total, head, *mode, rows)
            if len(self._row_parts) >= _MEMO:
                self._row_parts.clear()
            self._row_parts[key] = part
        return part

    def few_step_time(self, new: list, ctx: list, logits_tokens=None) -> float:
        """``step_time(new, ctx, logits_tokens)`` of a few requests given as lists, bitwise,
        on Python numbers where it can (numpy's per-call cost is most of the price of a
        forward of a few requests): whole new-token counts of at least one, whole-number
        contexts where they are all alike (the closed form at their sum); a forward with
        different counts by ``few_step``'s attention.  ``step_time`` on arrays elsewhere."""
        if self._small and new and len(ctx) == len(new):
            head = _head_tokens(logits_tokens)
            got = None if head is _MISSING else self._few_time(new, ctx, head)
            if got is not None:
                return got
        return super().few_step_time(new, ctx, logits_tokens)

    def few_uniform_pricer(self, n: int, u: float, head: float):
        """``ClosedFormPricer.few_uniform_pricer``: ``_few_time``'s closed form of alike
        requests (the memoised ``row_part`` of ``low == high``: ``_uniform``'s) bound as
        ``scalar_time``, bitwise its ``uniform_time``; None where ``few_step_time`` has no
        shortcut or the batch no closed form."""
        k = self._uniform(int(n), float(u), float(head)) if self._small else None
        return None if k is None else sf.scalar_time(k)

    def few_mixed_time(self, new: list, ctx: list, head: float) -> float | None:
        """``ClosedFormPricer.few_mixed_time``: ``_few_time``'s forward of different counts,
        or of alike ones where the batch has no closed form (an MLA verification's), by
        ``few_step``'s attention added to the memoised ``row_part``, its checks left to the
        caller; None where it has no such shortcut (``few_step_time`` then prices)."""
        got = self._few_parts(new, head)
        return None if got is None else got[0](got[1], got[2], got[3](ctx))

    def few_mixed_pricer(self, new: list, head: float):
        """``ClosedFormPricer.few_mixed_pricer``: ``few_mixed_time(new, ctx, head)`` as a
        function of ``ctx`` alone (the same memo entry, the same float), None where that
        has no shortcut."""
        got = self._few_parts(new, head)
        if got is None:
            return None
        tail, mode, fixed, attention = got
        return lambda ctx: tail(mode, fixed, attention(ctx))

    def _few_parts(self, new: list, head: float) -> tuple | None:
        """``few_mixed_time``'s memo entry of ``new`` and ``head``: (``step_tail`` of its
        requests, ``_step_from``'s operations bound once, memoised by count (``tail_of``);
        runtime mode; fixed seconds; its attention as a function of the contexts), None
        where it has no shortcut."""
        if not self._small or self._few is None:
            return None
        # the counts' fixed part and attention pricer (``FewAttention.pricer``: bitwise
        # ``attention_s``), memoised by counts and head: a few requests' re-read counts
        # repeat, and their kernels' rates and per-request factors are most of the price
        key = (*new, head)
        got = self._few_mixed.get(key, _MISSING)
        if got is _MISSING:
            lo, hi, n = min(new), max(new), len(new)
            part = self.row_part(n, new, lo, hi, float(sum(new)), head)
            got = None if hi > self._few.max_query or type(part) is not tuple else \
                (verify_rows.tail_of(self, n), part[0], part[1], self._few.pricer(new))
            if len(self._few_mixed) >= _MEMO:
                self._few_mixed.clear()
            self._few_mixed[key] = got
        return got

    def few_pricer(self, new: list):
        """``ClosedFormPricer.few_pricer``: where the counts differ (whole numbers of at least
        one, ints) ``_few_time``'s attention shortcut with its fixed part looked up once
        (``row_part`` is a function of the counts alone), else ``few_step_time``.  Its
        contexts are whole numbers, ints or floats (the same floats either way)."""
        bind = self.few_binder(new)
        return super().few_pricer(new) if bind is None else bind(new)

    def few_binder(self, new: list):
        """``few_pricer(m)`` as ``bind(m)`` for every ``m`` that holds ``new``'s counts in any
        order, where ``few_pricer`` takes the shortcut (None elsewhere): the fixed part, the
        runtime mode and the attention's kernels depend on the counts' multiset alone
        (``row_part``'s memo key, its ``_mode`` given the fewest and most; the decode rows:
        a sum of whole numbers, exact in any order), ``bind`` takes each request's in order."""
        # ints (their sum an int, as _head_tokens asks): whole numbers, the LM head's
        # tokens their sum, the same float as the sum of their floats (exact)
        s = sum(new) if self._small and new and self._few is not None else None
        if type(s) is not int:
            return None
        row = list(map(float, new))
        lo, hi, n = min(row), max(row), len(row)
        if not 1.0 <= lo < hi <= self._few.max_query:
            return None
        tokens = float(s)
        mode, fixed = self.row_part(n, row, lo, hi, tokens, tokens)
        if self._stream is None and mode in ("full", "piecewise") and not self.host:
            # _step_from's operations without host time, in the attention's own
            # call (FewAttention.pricer's step)
            g, layers, full = self.execution.graph_launch_s, self._layers, mode == "full"
            attention = self._few.binder(n, row.count(1.0), (
                fixed, layers, None if full else self._launch_s * layers,
                None if full else layers * g, g))
            return lambda m: attention(list(map(float, m)))
        attention, step_from = self._few.binder(n, row.count(1.0)), self._step_from

        def bind(m: list):
            priced = attention(list(map(float, m)))
            return lambda ctx: step_from(mode, fixed, priced(ctx), n)
        return bind

    def _few_time(self, new: list, ctx: list, head: float | None) -> float | None:
        """``few_step_time``'s shortcut, None where it has none (see there)."""
        new = [float(t) for t in new]
        lo, hi = min(new), max(new)
        if lo < 1.0 or not all(t.is_integer() for t in new):
            return None
        tokens = float(sum(new))  # whole numbers: exact in any order, as _SUM's
        n = len(new)
        part = self.row_part(n, new, lo, hi, tokens, tokens if head is None else head)
        if type(part) is not tuple:  # every request alike: the closed form at the sum
            s = sum(ctx)  # ints: exact; floats only where all are whole (exact in any order)
            if type(s) is not int and not all(float(c).is_integer() for c in ctx):
                return None
            return sm.uniform_time(part, float(s), max)
        if self._few is None or lo == hi or hi > self._few.max_query:  # step_time's
            return None
        return self._step_from(part[0], part[1], self._few.attention_s(
            new, [float(c) for c in ctx]), n)


def _chunk_pricer(cm: ClosedForms):
    """``ClosedForms.chunk_pricer``: ``step_models.uniform_step(cm, 1, c, 0.0)`` then
    ``uniform_time(k, x, max)``, the same operations in the same order (the same float;
    ``max(a, b)`` as ``b if b > a else a``, scalar_forms.py), without the form's dataclass
    and memo entry (a prompt chunk's count rarely repeats: a miss each time, issue 36);
    None for a subclass or an eager stream (``_closed``), MLA (its coefficients depend on
    the count) or a model priced by ``breakdown`` alone (``_general_only``)."""
    if not cm._closed or cm._mla is not None or cm._general_only:
        return None
    pair, kv, q_io, up = cm._attention_coefficients(2.0)  # without MLA: any count's
    roof, kind, ex, layers = cm._roof, cm._prefill_kind, cm.execution, cm._layers
    causal, over, graph_s = cm._prefill_causal, cm._prefill_overhead, ex.graph_launch_s
    launch, replays = cm._launch_s * layers, layers * graph_s
    host, overlap = (ex.host_s(1) if cm.host else None), ex.async_scheduling

    def price(c: float, x: float) -> float | None:
        width = (0.5 * (c + 1.0) + (0.0 if c <= DECODE_MAX_QUERY else over)) if causal \
            else float(c)  # step_models.prefill_width
        line = roof.attention_line(kind, pair * c + up, pair * c * width, kv, c * kv + c * q_io)
        if line is None:
            return None
        slope, intercept, latency, floor = line
        tokens = 1.0 * c
        mode, padded = ex.graph_tokens(tokens, c <= sm.UNIFORM_MAX_QUERY)
        fixed = cm._fixed(tokens, 0.0, mode, padded, cm._uniform_decode_rows(1, c))
        y = slope * x + (1.0 * intercept + latency)
        attention = (floor if floor > y else y) * layers
        if mode != "full" and launch > attention:  # eager launches over the layers
            attention = launch
        device = fixed + attention
        if mode == "full":
            device = device + graph_s
        elif mode == "piecewise":
            device = (replays if replays > device else device) + graph_s
        if host is None:
            return device
        if overlap:
            shown = host - device
            return device + (0.0 if 0.0 > shown else shown)
        return device + host
    return price


def _head_tokens(logits_tokens):
    """The LM head's tokens in all as ``step_time`` sums them: None (the new tokens'), an
    array's numpy sum, a list's sum where it is of ints (exact in any order); ``_MISSING``
    for a list holding floats (its numpy sum is ``step_time``'s to take)."""
    if logits_tokens is None:
        return None
    if isinstance(logits_tokens, np.ndarray):
        return float(_SUM(logits_tokens, axis=None))
    s = sum(logits_tokens)
    return float(s) if type(s) is int else _MISSING
