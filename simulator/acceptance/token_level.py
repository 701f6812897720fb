"""Acceptance that emerges from running the real verification on toy draft/target LMs.

Each request carries the last two tokens of its (toy) text.  An iteration drafts from the
draft LM, verifies with :func:`simulator.speculation.verification.speculative_sampling_verdict` (or
greedy verification at temperature 0) or, for a tree, drafts children without replacement
and runs multi-step speculative sampling (or naive sampling / VerifyGreedy), then appends
the emitted tokens to the request's text.  Contexts where the draft is far off
(``hard_fraction`` of them) make acceptance depend on where the text is.

The LM tables are part of the model's definition: ``table_seed`` names them.  Per-iteration
draws use the generator the engine passes in.

Closed form: with drafts x_i ~ q, P(first k accepted) = sum over x_1..x_k of
prod_i min(p, q)(x_i | context) -- a k-step walk over (second-last, last) token states with
weights min(p, q).  :meth:`position_rates` evaluates it from the target's stationary state
distribution, which is also where the unbound model starts every iteration.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Mapping

import numpy as np

from simulator.acceptance.fields import model_config, probability
from simulator.acceptance.sampling import check_batch, check_tree
from simulator.acceptance.tree_kinds import TreeAlgorithm
from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import as_number, as_str
from simulator.speculation.token_tree import sample_children, top_k_children
from simulator.speculation.toy_lm import ToyLM
from simulator.speculation.tree_verification import verify_tree
from simulator.speculation.verification import (
    greedy_verdict,
    sample_categorical,
    sample_verdict,
    speculative_sampling_verdict,
)

TREE_METHODS = ("mss", "naive")


@dataclass(frozen=True)
class TokenLevelAcceptance(TreeAlgorithm):
    """Real verification on an order-2 toy target and a noisy draft of it."""

    vocab_size: int = 8
    sharpness: float = 2.0
    draft_noise: float = 1.0
    hard_fraction: float = 0.0
    hard_noise: float = 4.0
    temperature: float = 1.0
    tree_method: str = "mss"
    table_seed: int = 0
    state: np.ndarray | None = field(default=None, compare=False, repr=False)
    name: ClassVar[str] = "token_level"

    def __post_init__(self) -> None:
        if self.tree_method not in TREE_METHODS:
            raise SpecsimError(f"unknown tree method {self.tree_method!r}", field="tree_method",
                               fix="choose one of: " + ", ".join(TREE_METHODS))
        tables = np.random.default_rng(self.table_seed)
        target = ToyLM.random_target(self.vocab_size, tables, self.sharpness)
        draft = target.noisy_draft(tables, self.draft_noise, self.hard_fraction,
                                   self.hard_noise)
        object.__setattr__(self, "_draft_raw", draft)
        object.__setattr__(self, "_target", target.with_temperature(self.temperature))
        object.__setattr__(self, "_draft", draft.with_temperature(self.temperature))
        object.__setattr__(self, "_stationary", self._target.stationary_states())

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any], *, source: str) -> "TokenLevelAcceptance":
        keys = ("vocab_size", "sharpness", "draft_noise", "hard_fraction", "hard_noise",
                "temperature", "tree_method", "table_seed")
        cfg = model_config(cfg, allowed=keys, source=source)
        kw: dict[str, Any] = {}
        if "vocab_size" in cfg:
            kw["vocab_size"] = int(as_number(cfg["vocab_size"], source=source,
                                             field="vocab_size", integer=True, minimum=2,
                                             maximum=64))
        for key in ("sharpness", "draft_noise", "hard_noise", "temperature"):
            if key in cfg:
                kw[key] = float(as_number(cfg[key], source=source, field=key, minimum=0.0,
                                          maximum=100.0))
        if "hard_fraction" in cfg:
            kw["hard_fraction"] = probability(cfg["hard_fraction"], source=source,
                                              field="hard_fraction")
        if "tree_method" in cfg:
            kw["tree_method"] = as_str(cfg["tree_method"], source=source, field="tree_method",
                                       choices=TREE_METHODS)
        if "table_seed" in cfg:
            kw["table_seed"] = int(as_number(cfg["table_seed"], source=source,
                                             field="table_seed", integer=True, minimum=0))
        return cls(**kw)

    @property
    def target(self) -> ToyLM:
        return self._target

    @property
    def draft(self) -> ToyLM:
        return self._draft

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def _start_states(self, count: int, rng: np.random.Generator) -> np.ndarray:
        flat = rng.choice(self._stationary.size, size=count, p=self._stationary.ravel())
        return np.stack(np.divmod(flat, self.vocab_size), axis=1)

    def bind(self, num_requests: int, rng: np.random.Generator,
             tasks: np.ndarray | None = None) -> "TokenLevelAcceptance":
        """A copy where each request's text starts at a stationary (second-last, last) pair."""
        return replace(self, state=self._start_states(int(num_requests), rng))

    def _states(self, request_ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        if self.state is None:
            return self._start_states(request_ids.size, rng)
        return self.state[request_ids]

    def _advance(self, request_ids, states, path_tokens, accepted, next_token) -> None:
        if self.state is None:
            return
        b = np.arange(accepted.size)
        last_draft = path_tokens[b, np.maximum(accepted - 1, 0)] if path_tokens.shape[1] \
            else states[:, 1]
        prev2 = np.where(accepted > 0, last_draft, states[:, 1])
        self.state[request_ids] = np.stack([prev2, next_token], axis=1)

    def sample_chain(self, gammas, contexts, request_ids, rng: np.random.Generator) -> np.ndarray:
        g, _, r = check_batch(gammas, contexts, request_ids)
        batch, top = g.size, int(g.max(initial=0))
        if batch == 0:
            return np.zeros(0, dtype=np.int64)
        states = self._states(r, rng)
        a, b = states[:, 0].copy(), states[:, 1].copy()
        v = self.vocab_size
        drafts = np.zeros((batch, top), dtype=np.intp)
        q = np.empty((batch, top, v))
        p = np.empty((batch, top + 1, v))
        for i in range(top):
            q[:, i] = self._draft.table[a, b]
            p[:, i] = self._target.table[a, b]
            drafts[:, i] = q[:, i].argmax(axis=-1) if self.greedy else \
                sample_categorical(q[:, i], rng)
            a, b = b, drafts[:, i]
        p[:, top] = self._target.table[a, b]
        if self.greedy:
            verdict = greedy_verdict(drafts, None, p, num_drafts=g)
            n = np.argmin(np.concatenate([verdict.accept > 0.5,
                                          np.zeros((batch, 1), dtype=bool)], axis=1), axis=1)
            token = verdict.stop[np.arange(batch), n].argmax(axis=-1)
        else:
            n, token = sample_verdict(speculative_sampling_verdict(drafts, q, p, g), rng)
        self._advance(r, states, drafts, n, token)
        return n.astype(np.int64)

    def check_tree_width(self, tree, *, field: str = "vocab_size") -> None:
        """Raise unless every node's children can be distinct tokens of the toy vocabulary.

        Children are drawn without replacement (MSS needs it; greedy takes the top k), so a
        node cannot have more children than the vocabulary has tokens.
        """
        width = int(tree.child_table.shape[1])
        if width > self.vocab_size:
            raise SpecsimError(
                f"vocab_size {self.vocab_size} is narrower than the token tree, which has "
                f"{width} children at one node: its children must be distinct tokens",
                field=field, fix=f"raise vocab_size to at least {width}, or give the tree at "
                                 f"most {self.vocab_size} children per node")

    def sample_tree(self, tree, contexts, request_ids, rng: np.random.Generator) -> np.ndarray:
        tree, c, r = check_tree(tree, contexts, request_ids)
        self.check_tree_width(tree)
        batch, n = c.size, tree.num_nodes
        if batch == 0:
            return np.zeros(0, dtype=np.int64)
        states = self._states(r, rng)
        st2 = np.empty((batch, n + 1), dtype=np.intp)
        st1 = np.empty((batch, n + 1), dtype=np.intp)
        st2[:, 0], st1[:, 0] = states[:, 0], states[:, 1]
        tokens = np.zeros((batch, n), dtype=np.intp)
        table = tree.child_table
        for row in range(n + 1):                        # depth-first: parents come first
            kids = table[row][table[row] >= 0]
            if kids.size:
                if self.greedy:
                    drawn = top_k_children(self._draft_raw.table[st2[:, row], st1[:, row]],
                                           kids.size)
                else:
                    drawn = sample_children(self._draft.table[st2[:, row], st1[:, row]],
                                            kids.size, rng)
                tokens[:, kids] = drawn
                st2[:, kids + 1] = st1[:, row][:, None]
                st1[:, kids + 1] = drawn
        p = self._target.table[st2, st1]
        q = self._draft.table[st2, st1]
        method = "greedy" if self.greedy else self.tree_method
        verdict = verify_tree(tree, p, None if self.greedy else rng, method,
                              draft_probs=q, tokens=tokens)
        if self.state is not None:
            last = verdict.last_node
            prev2 = np.where(last >= 0, tokens[np.arange(batch), np.maximum(last, 0)],
                             states[:, 1])
            self.state[r] = np.stack([prev2, verdict.next_token], axis=1)
        return verdict.accepted.astype(np.int64)

    def position_rates(self, gamma: int, context: int = 0) -> np.ndarray:
        """P(first k accepted), k = 1..gamma, from a stationary start (exact, see module doc)."""
        v = self.vocab_size
        p, q = self._target.table[:v, :v], self._draft.table[:v, :v]   # BOS never recurs
        if self.greedy:
            best_q = self._draft_raw.table[:v, :v].argmax(axis=-1)
            agree = best_q == p.argmax(axis=-1)
            weight = (np.arange(v) == best_q[..., None]) * agree[..., None]
        else:
            weight = np.minimum(p, q)                              # (a, b, x)
        vec = self._stationary.copy()                            # over (a, b)
        out = []
        for _ in range(int(gamma)):
            nxt = np.einsum("ab,abx->bx", vec, weight)           # state becomes (b, x)
            out.append(nxt.sum())
            vec = nxt
        return np.array(out)

    def expected_accepted(self, gamma: int, context: int = 0) -> float | None:
        """Exact for chains from a stationary start; trees have no closed form here."""
        return float(self.position_rates(gamma).sum())

