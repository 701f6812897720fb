"""``suffix``: SuffixDecoding (Oliaro et al., NeurIPS 2025): speculation trees from suffix tries.

Two indexes, as in the paper and ArcticInference: a per-request trie over the request's prompt
and the tokens it has generated (the prompt-lookup part), and a global trie over the outputs
of finished requests (FIFO-evicted beyond ``suffix_decoding_max_cached_requests``; one per
replica, as each serving instance keeps its own).  Each iteration, per request, each trie
matches the longest suffix of the context that it has seen followed by something -- and, when
that match leaves fewer than the budget's tokens below it in the depth-bounded trie, also the
longest match that leaves room -- and expands a speculation tree best-first by
frequency-estimated path probability: at most ``min(num_speculative_tokens,
max_spec_factor * match_length + max_spec_offset)`` nodes, each with probability >=
``suffix_decoding_min_token_prob``.  The tree with the higher score (sum of node
probabilities) is verified: n nodes cost n + 1 tokens in the verification forward, and the
request accepts the deepest node on the target's true path (greedy tree verification).

Like ``prompt_lookup`` it runs on the workload's real token ids.  CPU time per request per
iteration is ``cpu_time_per_request_s`` (10 us) for the speculation plus
``cpu_time_per_token_s`` (5 us) per token added to its trie (the prompt on its first
iteration), inside ArcticInference's measured 6.3-28 us of speculation and 4.1-5.5 us of
update per output token (snowflakedb/ArcticInference PRs #211, #212).
"""
from __future__ import annotations

from collections import deque

import numpy as np

from simulator.engine.plan import (
    AheadDraft,
    BatchView,
    DraftPlan,
    VariedDraft,
    VariedPlan,
    VariedRows,
    emitted_tokens,
)
from simulator.inputs.errors import SpecsimError
from simulator.inputs.params import Param
from simulator.cost.spec_work import SpecWork
from simulator.policies.base import PolicyBase, PolicyContext, spec_charge
from simulator.policies.draft_control import LimitedControl, LimitedDraft
from simulator.policies.token_text import TokenText, require_token_ids
from simulator.speculation.output_suffixes import GlobalIndex
from simulator.speculation.suffix_index import EMPTY, Speculation, accepted_depth
from simulator.speculation.text_suffixes import TextSuffixes

SUFFIX_SPECULATE_S = 1e-5   # ArcticInference PRs #211/#212: 6.3-28 us per output token
SUFFIX_UPDATE_S = 5e-6      # ibid.: 4.1-5.5 us per token added
# a speculation's score over its node count is at most 1 + ~1e-13 (rounding; see speculate)
_ROUNDING = 1.000000001


class _RequestState:
    __slots__ = ("index", "indexed")

    def __init__(self, depth: int) -> None:
        # the request's trie, answered from its text (text_suffixes.py): a trie would make
        # ~depth nodes per prompt token, most never read
        self.index = TextSuffixes(depth)
        self.indexed = 0


class SuffixDecoding(PolicyBase, LimitedDraft, AheadDraft):
    """Speculation trees from a per-request and a global suffix trie, frequency-scored."""

    name = "suffix"
    acceptance_from_tokens = True
    PARAMS = {
        "num_speculative_tokens": Param("int", default=16, minimum=1, maximum=256,
                                        aliases=("gamma",),
                                        help="most tree nodes per request (verify n + 1)"),
        "suffix_decoding_max_tree_depth": Param("int", default=24, minimum=2, maximum=512,
                                                help="longest substring the tries hold"),
        "suffix_decoding_max_spec_factor": Param("float", default=1.0, minimum=0.0,
                                                 maximum=1e6,
                                                 help="speculate up to factor x match length"),
        "suffix_decoding_max_spec_offset": Param("float", default=0.0, minimum=-1e6,
                                                 maximum=1e6, help="... plus this offset"),
        "suffix_decoding_min_token_prob": Param("float", default=0.1, minimum=0.0, maximum=1.0,
                                                help="drop nodes less likely than this"),
        "suffix_decoding_max_cached_requests": Param("int", default=10000, minimum=0,
                                                     maximum=10**9,
                                                     help="outputs kept in the global trie"),
        "speculate_tree": Param("bool", default=True,
                                help="a tree (true) or the single most likely path (false)"),
        "use_request_tree": Param("bool", default=True, help="match the request's own text"),
        "use_global_tree": Param("bool", default=True, help="match earlier outputs"),
        "cpu_time_per_request_s": Param("float", default=SUFFIX_SPECULATE_S, minimum=0.0,
                                        maximum=1.0, help="CPU speculation time per request"),
        "cpu_time_per_token_s": Param("float", default=SUFFIX_UPDATE_S, minimum=0.0,
                                      maximum=1.0, help="CPU time per token indexed"),
    }

    @classmethod
    def check_params(cls, out: dict, *, raw, source: str, prefix: str) -> None:
        if not (out["use_request_tree"] or out["use_global_tree"]):
            raise SpecsimError("both suffix trees are switched off", source=source,
                               field=prefix + "use_global_tree", fix="enable at least one")

    def __init__(self, params: dict, ctx: PolicyContext) -> None:
        self.text = TokenText(*require_token_ids(ctx.workload, self.name))
        self.host = spec_charge(ctx, SpecWork())  # model-free: the verification's work
        p = params
        self.k = int(p["num_speculative_tokens"])
        self.depth = int(p["suffix_decoding_max_tree_depth"])
        self.factor = float(p["suffix_decoding_max_spec_factor"])
        self.offset = float(p["suffix_decoding_max_spec_offset"])
        self.min_prob = float(p["suffix_decoding_min_token_prob"])
        self.max_cached = int(p["suffix_decoding_max_cached_requests"])
        self.tree = bool(p["speculate_tree"])
        self.use_request = bool(p["use_request_tree"])
        self.use_global = bool(p["use_global_tree"])
        self.cpu_request_s = float(p["cpu_time_per_request_s"])
        self.cpu_token_s = float(p["cpu_time_per_token_s"])
        self.global_index = GlobalIndex(self.depth)  # (output_suffixes.py)
        self._cached: deque[int] = deque()
        # the global trie's speculations by (node key, budget), until it next changes: requests
        # that follow the same earlier output match the same nodes
        self._global_specs: dict[tuple[int, int], Speculation] = {}
        self._global_version = 0  # how many times the global trie changed
        # each request's last deep match in it: (version, context size, length)
        self._global_seen: dict[int, tuple[int, int, int]] = {}
        self._requests: dict[int, _RequestState] = {}
        self._ahead: tuple = ((), [()])  # plan_rows' requests and their counts indexed
        # speculations by (request, context size, cap, global trie version): this planning
        # pass's and the last one's (``_new_plan``)
        self._specs: dict[tuple, Speculation] = {}
        self._specs_before: dict[tuple, Speculation] = {}

    @property
    def max_verify_tokens(self) -> int:
        return self.k + 1

    def draft_control(self, params: dict) -> LimitedControl:
        """Per-request caps: the tries speculate at most each request's cap of nodes."""
        return LimitedControl(self, self.k)

    # ------------------------------------------------------------------ speculation
    def _request_state(self, rid: int, tokens: list[int],
                       size: int) -> tuple[_RequestState, int]:
        """The request's trie, brought up to its context (the first ``size`` of its
        ``tokens``; its text may run further: rows planned ahead); also the tokens added."""
        state = self._requests.get(rid)
        if state is None:
            state = self._requests[rid] = _RequestState(self.depth)
        have = len(state.index.text)
        if size > have:
            state.index.extend(tokens[have:size])
        added = size - state.indexed
        if added > 0:
            state.indexed = size
        return state, max(added, 0)

    def speculate(self, rid: int, generated: int, cap: int) -> tuple[Speculation, int]:
        """The best-scoring speculation of the two tries, and the tokens indexed on the way.

        Each trie tries its longest match and the longest one that leaves room below it for
        ``cap`` tokens within the depth bound; of equal scores the first tried stands.  A
        try whose budget cannot beat the best so far is skipped: a tree of ``budget`` nodes
        scores at most ``budget`` (each node's path probability is at most 1, give or take
        the rounding of a product of at most 512 ratios, far below ``_ROUNDING``).
        """
        roomy = max(1, self.depth - cap)
        factor, offset, min_prob, tree = self.factor, self.offset, self.min_prob, self.tree
        best, top, added = EMPTY, 0.0, 0  # (top: the best's score)
        tokens = self.text.tokens(rid)
        size = self.text.prompt_ids[rid].size + generated
        if self.use_request:
            state, added = self._request_state(rid, tokens, size)
        key = (rid, size, cap, self._global_version)
        self._specs[key] = spec = self._specs_before.get(key)
        if spec is not None:  # planned before, that row thrown away: the same inputs
            return spec, added
        if self.use_request:
            index = state.index
            deep, near = index.matches(self.depth, roomy, size)
            for match in (deep,) if near[0] == deep[0] else (deep, near):  # one node each
                budget = max(0, min(cap, int(factor * match[0] + offset + 1e-9)))
                if budget == 0 or top > budget * _ROUNDING:
                    continue
                spec = index.speculate(match, budget, min_prob, tree, size)
                score = spec.score
                if score > top:
                    best, top = spec, score
        if self.use_global and not self.global_index.empty():
            best, top = self._global_best(rid, tokens, size, cap, roomy, best, top)
        self._specs[key] = best
        return best, added

    def _new_plan(self) -> None:
        """Start a planning pass: the last pass's speculations kept to answer its rows
        that were thrown away (the engine keeps a stretch's rows up to an event and plans
        again from there: each request's text and the global trie as they were then)."""
        self._specs_before, self._specs = self._specs, {}

    def _global_best(self, rid: int, tokens: list[int], size: int, cap: int, roomy: int,
                     best: Speculation, top: float) -> tuple[Speculation, float]:
        """``speculate``'s tries of the global trie: (best, top) after them.

        The request's last deep match (at ``size0`` tokens, the trie unchanged since) bounds
        this one: a suffix of ``size`` tokens that occurs with a continuation holds one of
        the earlier context ``size - size0`` shorter, so the match is at most that much
        longer -- the search runs below it, and is skipped where even its budget could not
        beat ``top``."""
        factor, offset = self.factor, self.offset
        longest = self.depth
        seen = self._global_seen.get(rid)
        if seen is not None and seen[0] == self._global_version and size >= seen[1]:
            longest = min(longest, seen[2] + size - seen[1])
            budget = max(0, min(cap, int(factor * longest + offset + 1e-9)))
            if budget == 0 or top > budget * _ROUNDING:
                return best, top
        index, known = self.global_index, self._global_specs
        tail = tokens[max(size - self.depth, 0):size]  # all that a match can read
        found = index.matches(tail, longest, roomy)
        self._global_seen[rid] = (self._global_version, size, found[0][1])
        for key, m, node in found:
            budget = max(0, min(cap, int(factor * m + offset + 1e-9)))
            if key < 0 or budget == 0 or top > budget * _ROUNDING:
                continue
            spec = known.get((key, budget))
            if spec is None:
                spec = known[key, budget] = index.speculate(node, m, budget, self.min_prob,
                                                            self.tree)
            score = spec.score
            if score > top:
                best, top = spec, score
        return best, top

    def propose_limited(self, batch: BatchView, rng: np.random.Generator,
                        max_draft: np.ndarray) -> DraftPlan:
        """Propose at most ``max_draft[i]`` nodes for request i (adaptive controllers' hook)."""
        n, cpu, specs = self.speculations(batch.request_ids, batch.generated, max_draft)
        return DraftPlan(num_draft=n, verify_tokens=n + 1, cpu_time_s=cpu, payload=specs)

    def speculations(self, request_ids: np.ndarray, generated: np.ndarray,
                     max_draft: np.ndarray) -> tuple[np.ndarray, float, dict]:
        """(nodes per request, the CPU seconds, each request's ``Speculation`` by id):
        ``propose_limited``'s, on arrays."""
        specs: dict[int, Speculation] = {}
        cpu = 0.0
        ids = request_ids.tolist()
        self._new_plan()
        for rid, g, cap in zip(ids, generated.tolist(), np.minimum(max_draft, self.k).tolist()):
            if cap > 0:
                specs[rid], added = self.speculate(rid, g, cap)
                cpu += self.cpu_request_s + added * self.cpu_token_s
            else:
                specs[rid] = Speculation([], [], [])
        n = np.fromiter((len(specs[r]) for r in ids), np.int64, len(ids))
        cpu += self.host(int(np.count_nonzero(n)))
        return n, cpu, specs

    def propose(self, batch: BatchView, rng: np.random.Generator) -> DraftPlan:
        return self.propose_limited(batch, rng, np.full(len(batch), self.k, np.int64))

    def accept(self, plan: DraftPlan, batch: BatchView, rng: np.random.Generator) -> np.ndarray:
        return self._accepted(plan.payload, batch.request_ids, batch.generated, plan.num_draft)

    def _accepted(self, specs: dict, request_ids: np.ndarray, generated: np.ndarray,
                  num_draft: np.ndarray) -> np.ndarray:
        """``accept`` on arrays: the deepest node of each tree on the target's path."""
        out = np.zeros(request_ids.size, np.int64)
        for i, (rid, g, n) in enumerate(zip(request_ids.tolist(), generated.tolist(),
                                            num_draft.tolist())):
            if n:
                out[i] = self._depth_accepted(specs[rid], rid, g)
        return out

    def _depth_accepted(self, spec: Speculation, rid: int, generated: int) -> int:
        """The deepest node of ``spec`` on the target's path (its next tokens, fewer near
        the end of the output: the request's text ends there)."""
        at = self.text.prompt_ids[rid].size + generated
        return accepted_depth(spec, self.text.tokens(rid)[at:at + len(spec)])

    # ------------------------------------------------------------------ bookkeeping
    def observe(self, plan: DraftPlan, batch: BatchView, accepted: np.ndarray,
                step_time_s: float) -> None:
        """Move finished requests' outputs into the global trie (FIFO beyond the cap)."""
        self._finish(batch.request_ids, batch.generated, batch.output_len, accepted)

    def _finish(self, request_ids: np.ndarray, generated: np.ndarray, output_len: np.ndarray,
                accepted: np.ndarray) -> None:
        """``observe`` on arrays."""
        emitted = emitted_tokens(accepted, generated, output_len)
        for rid in request_ids[generated + emitted >= output_len].tolist():
            self._requests.pop(rid, None)
            self.text.forget(rid)
            self._global_seen.pop(rid, None)
            if self.use_global and self.max_cached > 0:
                self._global_specs.clear()
                self._global_version += 1
                self.global_index.add(self.text.output_ids[rid].tolist())
                self._cached.append(rid)
                if len(self._cached) > self.max_cached:
                    evicted = self.text.output_ids[self._cached.popleft()]
                    self.global_index.remove(evicted.tolist())

    # ------------------------------------------------------------------ VariedDraft
    def varied_draft(self) -> VariedDraft:
        """Its iterations on arrays (engine/varied_stretch.py): itself."""
        return self

    def plan_limited(self, request_ids, generated, max_draft):
        n, cpu, specs = self.speculations(request_ids, generated, max_draft)
        return VariedPlan(n, n + 1, 0.0 + cpu, specs)

    def draw_counts(self, rng, request_ids, context, generated, plan):
        return self._accepted(plan.payload, request_ids, generated, plan.num_draft)

    def plan_rows(self, request_ids, generated, output_len, steps, rng):
        """``plan_counts`` and ``draw_counts`` of up to ``steps`` iterations, up to the
        first that finishes a request (the global trie changes only then): each request's
        speculation at the text it reaches, its own index's text grown ahead
        (text_suffixes.py answers for a shorter one) and its count of tokens indexed (the
        CPU it charges) put back by ``keep_rows``."""
        ids, gens, outs = request_ids.tolist(), generated.tolist(), output_len.tolist()
        n = len(ids)
        before = self._indexed(ids)
        self._new_plan()
        nodes, accepted, seconds, indexed = [], [], [], []
        for _ in range(steps):
            cpu = 0.0  # ``speculations``' sum, in the batch's order
            row_nodes, row_accepted = [0] * n, [0] * n
            for i, (rid, g) in enumerate(zip(ids, gens)):
                spec, added = self.speculate(rid, g, self.k)
                cpu += self.cpu_request_s + added * self.cpu_token_s
                if spec.tokens:
                    row_nodes[i] = len(spec)
                    row_accepted[i] = a = self._depth_accepted(spec, rid, g)
                    gens[i] = g + a + 1
                else:
                    gens[i] = g + 1
            nodes.append(row_nodes)
            accepted.append(row_accepted)
            seconds.append(0.0 + (cpu + self.host(n - row_nodes.count(0))))
            indexed.append(self._indexed(ids))
            if any(g >= out for g, out in zip(gens, outs)):  # the last row that can be kept
                break
        self._ahead = (ids, [before, *indexed])
        drafts = np.array(nodes, np.int64).reshape(len(seconds), n)
        return VariedRows(drafts, drafts + 1, np.array(accepted, np.int64).reshape(drafts.shape),
                          np.array(seconds))

    def keep_rows(self, kept):
        """Each request's count of tokens indexed as after the ``kept`` rows."""
        ids, indexed = self._ahead
        self._ahead = ((), [()])
        for rid, count in zip(ids, indexed[kept]):
            state = self._requests.get(rid)
            if state is not None:  # (none where the request's own trie is off)
                state.indexed = count

    def _indexed(self, ids: list) -> list[int]:
        """Each request's count of tokens indexed in its own trie (0: none yet)."""
        states = self._requests
        return [s.indexed if (s := states.get(rid)) is not None else 0 for rid in ids]

    def observe_counts(self, request_ids, generated, output_len, plan, accepted,
                       step_time_s):
        self._finish(request_ids, generated, output_len, accepted)
