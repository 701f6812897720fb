"""Token-level synthetic workloads for the model-free speculation methods (lecture 000, 5.3).

Prompt lookup and suffix-tree proposers need real token sequences: their acceptance is
whatever repetition the workload contains.  Here the target model is a deterministic rule
(as in the lecture's "code 05" demo), so its continuation of each prompt is known in
advance and stored as ``output_ids``:

- ``code_edit``: the prompt is a fixed instruction header followed by code-like tokens
  (keywords, punctuation, identifiers from a small per-request pool); the output is that
  code again with a few identifiers renamed to fresh ids that appear nowhere in the
  prompt.  Prompt lookup copies long runs and breaks only at the renames.
- ``agent_loop``: a few templates are shared by every request; an output re-emits one or
  more of them with their slots filled by spans copied from the request's own prompt.
  Earlier outputs predict the template text (a suffix index over past outputs), the
  prompt predicts the slot fillers (prompt lookup): the case for SuffixDecoding's two trees.
- ``free_chat``: prompts and outputs drawn independently from a broad Zipf vocabulary; no
  copying, so only chance n-gram matches on frequent tokens.

Ids ``0..255`` are reserved for structural tokens (keywords, punctuation, headers); words
and identifiers use ``256..vocab_size-1``.  Every draw comes from the ``rng`` passed in.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from simulator.inputs.errors import SpecsimError
from workloads.lengths import (
    LengthDistribution,
    LognormalLength,
    UniformLength,
    check_count,
    check_positive,
)
from workloads.workload import MAX_REQUESTS, MAX_TOKEN_IDS, MAX_TOKENS_PER_REQUEST, Workload

WORD_BASE = 256
MIN_VOCAB = 1024
MAX_VOCAB = 1_000_000  # docs/limits.md: the Zipf tables hold one float per word

_NL, _INDENT, _ID = 1, 2, -1
_KW = {name: 3 + i for i, name in enumerate(
    ["def", "return", "if", "for", "in", "=", "(", ")", ":", ",", ".", "+", "<", "[", "]"])}
_CODE_LINES = [
    ["def", _ID, "(", _ID, ",", _ID, ")", ":", _NL],
    [_INDENT, _ID, "=", _ID, "(", _ID, ")", _NL],
    [_INDENT, _ID, "=", _ID, ".", _ID, "(", _ID, ",", _ID, ")", _NL],
    [_INDENT, "if", _ID, "<", _ID, ":", _NL],
    [_INDENT, _INDENT, "return", _ID, "+", _ID, _NL],
    [_INDENT, "for", _ID, "in", _ID, ":", _NL],
    [_INDENT, _INDENT, _ID, "[", _ID, "]", "=", _ID, _NL],
    [_INDENT, "return", _ID, _NL],
]
CODE_LINES = tuple(np.array([_KW.get(t, t) if isinstance(t, str) else t for t in line],
                            dtype=np.int64) for line in _CODE_LINES)
_SHORTEST_LINE = min(len(line) for line in CODE_LINES)
# "Rewrite the following code, renaming as asked:" — the same header on every request.
CODE_HEADER = np.arange(64, 72, dtype=np.int64)


def _check_vocab(vocab_size: int, needed_words: int) -> int:
    vocab = check_count(vocab_size, "vocab_size", minimum=MIN_VOCAB, maximum=MAX_VOCAB)
    if vocab - WORD_BASE < needed_words:
        raise SpecsimError(f"vocab_size {vocab} leaves {vocab - WORD_BASE} word ids, fewer than "
                           f"the {needed_words} this workload needs", field="vocab_size",
                           fix="raise vocab_size")
    return vocab


class _TokenBudget:
    """Counts the token ids a workload generates; refuses to pass MAX_TOKEN_IDS."""

    def __init__(self) -> None:
        self.used = 0

    def take(self, count: int, done: int, total: int) -> None:
        self.used += count
        if self.used > MAX_TOKEN_IDS:
            raise SpecsimError(f"the token ids of {done + 1:,} of {total:,} requests already "
                               f"pass the limit of {MAX_TOKEN_IDS:,}", field="num_requests",
                               fix="generate fewer or shorter requests (docs/limits.md)")


def _zipf_cdf(size: int, exponent: float) -> np.ndarray:
    weights = np.arange(1, size + 1, dtype=np.float64) ** -exponent
    cdf = np.cumsum(weights)
    return cdf / cdf[-1]


def _draw_outside(taken: np.ndarray, universe: int, size: int,
                  rng: np.random.Generator) -> np.ndarray:
    """Draw ``size`` distinct values from ``0..universe-1`` that are not in ``taken``."""
    taken = np.sort(taken)
    picks = rng.choice(universe - len(taken), size=size, replace=False)
    # The k-th value outside a sorted set S is k plus the count of S[j] - j <= k.
    return picks + np.searchsorted(taken - np.arange(len(taken)), picks, side="right")


def _draw(cdf: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """Draw ``n`` ranks (0-based) from the distribution with cumulative weights ``cdf``."""
    return np.minimum(np.searchsorted(cdf, rng.random(n), side="right"), len(cdf) - 1)


@dataclass(frozen=True)
class CodeEdit:
    """Rewrite a code prompt, renaming ``renamed_identifiers`` of its identifiers."""

    kind: ClassVar[str] = "code_edit"
    length_fields: ClassVar[tuple[str, ...]] = ("code",)

    vocab_size: int = 32000
    code: LengthDistribution = UniformLength(200, 800)
    identifiers_per_request: int = 24
    renamed_identifiers: int = 2

    def __post_init__(self) -> None:
        pool = check_count(self.identifiers_per_request, "identifiers_per_request")
        renamed = check_count(self.renamed_identifiers, "renamed_identifiers", minimum=0)
        if renamed > pool:
            raise SpecsimError(f"renamed_identifiers ({renamed}) exceeds identifiers_per_request "
                               f"({pool})", field="renamed_identifiers")
        object.__setattr__(self, "vocab_size", _check_vocab(self.vocab_size, pool + renamed))
        object.__setattr__(self, "identifiers_per_request", pool)
        object.__setattr__(self, "renamed_identifiers", renamed)

    def generate(self, n: int, rng: np.random.Generator) -> tuple[list, list]:
        """Return ``n`` prompts and the target's output for each."""
        words = self.vocab_size - WORD_BASE
        # A few identifiers dominate real code (self, i, x): rank-1/r weights over the pool.
        pool_cdf = _zipf_cdf(self.identifiers_per_request, 1.0)
        prompts, outputs = [], []
        budget = _TokenBudget()
        for length in self.code.sample(n, rng):
            budget.take(2 * int(length) + len(CODE_HEADER), len(prompts), n)
            pool = rng.choice(words, size=self.identifiers_per_request, replace=False)
            lines = rng.integers(len(CODE_LINES), size=length // _SHORTEST_LINE + 1)
            code = np.concatenate([CODE_LINES[j] for j in lines])[:length]
            slots = code == _ID
            code[slots] = WORD_BASE + pool[_draw(pool_cdf, int(slots.sum()), rng)]
            present = np.unique(code[code >= WORD_BASE])
            renamed = min(self.renamed_identifiers, len(present))
            old = rng.choice(present, size=renamed, replace=False)
            fresh = WORD_BASE + _draw_outside(pool, words, renamed, rng)
            output = code.copy()
            for before, after in zip(old, fresh):
                output[code == before] = after
            prompts.append(np.concatenate([CODE_HEADER, code]))
            outputs.append(output)
        return prompts, outputs


@dataclass(frozen=True)
class AgentLoop:
    """Outputs re-emit shared templates whose slots are filled with spans of the request's prompt.

    Every prompt is a shared system prompt of ``system_tokens`` followed by a per-request
    context (at least ``slot_tokens`` long, so that a slot can copy from it).  Each
    output chains 1..``max_steps`` templates (uniform), each template picked uniformly
    from ``num_templates``; a template has about ``template_tokens`` fixed tokens (uniform
    within +-50%) and ``slots_per_template`` slots of ``slot_tokens`` copied tokens.
    """

    kind: ClassVar[str] = "agent_loop"
    length_fields: ClassVar[tuple[str, ...]] = ("context",)

    vocab_size: int = 32000
    num_templates: int = 4
    template_tokens: int = 48
    slots_per_template: int = 3
    slot_tokens: int = 4
    max_steps: int = 3
    system_tokens: int = 64
    context: LengthDistribution = UniformLength(100, 400)

    def __post_init__(self) -> None:
        for name in ("num_templates", "template_tokens", "slot_tokens", "max_steps",
                     "system_tokens"):
            object.__setattr__(self, name, check_count(getattr(self, name), name))
        object.__setattr__(self, "slots_per_template",
                           check_count(self.slots_per_template, "slots_per_template", minimum=0))
        object.__setattr__(self, "vocab_size", _check_vocab(self.vocab_size, 1))
        longest = self.max_steps * (self.template_tokens + self.template_tokens // 2
                                    + self.slots_per_template * self.slot_tokens)
        if longest > MAX_TOKENS_PER_REQUEST or \
                self.num_templates * (2 * self.template_tokens + self.slots_per_template) \
                > MAX_TOKEN_IDS:
            raise SpecsimError(f"an output could hold {longest:,} tokens (max_steps x template "
                               f"and slot tokens); the limit is {MAX_TOKENS_PER_REQUEST:,} per "
                               f"request and {MAX_TOKEN_IDS:,} in all templates",
                               field="max_steps", fix="lower max_steps, template_tokens, "
                               "slots_per_template or num_templates")

    def _templates(self, rng: np.random.Generator) -> list[np.ndarray]:
        """Return the shared templates: fixed word tokens with ``-1`` marking each slot."""
        templates, half = [], self.template_tokens // 2
        for _ in range(self.num_templates):
            size = rng.integers(max(half, 1), self.template_tokens + half, endpoint=True)
            text = rng.integers(WORD_BASE, self.vocab_size, size=size)
            cuts = np.sort(rng.choice(size + 1, size=self.slots_per_template))
            templates.append(np.insert(text, cuts, _ID).astype(np.int64))
        return templates

    def generate(self, n: int, rng: np.random.Generator) -> tuple[list, list]:
        """Return ``n`` prompts and the target's output for each."""
        system = rng.integers(WORD_BASE, self.vocab_size, size=self.system_tokens)
        templates = self._templates(rng)
        prompts, outputs = [], []
        budget = _TokenBudget()
        for length in np.maximum(self.context.sample(n, rng), self.slot_tokens):
            budget.take(self.system_tokens + int(length), len(prompts), n)
            context = rng.integers(WORD_BASE, self.vocab_size, size=length)
            steps = rng.integers(1, self.max_steps, endpoint=True)
            pieces = []
            for t in rng.integers(self.num_templates, size=steps):
                template = templates[t]
                slots = np.flatnonzero(template == _ID)
                starts = rng.integers(0, length - self.slot_tokens, size=len(slots),
                                      endpoint=True)
                fills = [context[s:s + self.slot_tokens] for s in starts]
                # Replace each slot marker by its copied span.
                parts = np.split(template, slots)
                step = [parts[0]]
                for fill, part in zip(fills, parts[1:]):
                    step += [fill, part[1:]]
                pieces.append(np.concatenate(step))
            prompts.append(np.concatenate([system, context]).astype(np.int64))
            outputs.append(np.concatenate(pieces).astype(np.int64))
            budget.take(len(outputs[-1]), len(prompts), n)
        return prompts, outputs


@dataclass(frozen=True)
class FreeChat:
    """Prompts and outputs drawn independently from a broad Zipf(``zipf_exponent``) vocabulary."""

    kind: ClassVar[str] = "free_chat"
    length_fields: ClassVar[tuple[str, ...]] = ("prompt", "output")

    vocab_size: int = 32000
    zipf_exponent: float = 1.0
    prompt: LengthDistribution = LognormalLength(300, 200, 1500)
    output: LengthDistribution = LognormalLength(150, 100, 512)

    def __post_init__(self) -> None:
        object.__setattr__(self, "vocab_size", _check_vocab(self.vocab_size, 1))
        object.__setattr__(self, "zipf_exponent",
                           check_positive(self.zipf_exponent, "zipf_exponent"))

    def generate(self, n: int, rng: np.random.Generator) -> tuple[list, list]:
        """Return ``n`` prompts and the target's output for each."""
        prompt_lengths = self.prompt.sample(n, rng)
        output_lengths = self.output.sample(n, rng)
        cdf = _zipf_cdf(self.vocab_size - WORD_BASE, self.zipf_exponent)
        lengths = np.concatenate([prompt_lengths, output_lengths])
        _TokenBudget().take(int(lengths.sum()), n, n)
        tokens = WORD_BASE + _draw(cdf, int(lengths.sum()), rng).astype(np.int64)
        pieces = np.split(tokens, np.cumsum(lengths)[:-1])
        return pieces[:n], pieces[n:]


TokenWorkloadSpec = CodeEdit | AgentLoop | FreeChat

TOKEN_WORKLOADS: dict[str, type] = {
    "code_edit": CodeEdit,
    "agent_loop": AgentLoop,
    "free_chat": FreeChat,
}


def token_workload(spec: TokenWorkloadSpec, num_requests: int, arrivals,
                   rng: np.random.Generator) -> Workload:
    """Draw arrival times, then token sequences; label every request with the spec's kind."""
    n = check_count(num_requests, "num_requests", maximum=MAX_REQUESTS)
    arrival_s = arrivals.sample(n, rng)
    prompts, outputs = spec.generate(n, rng)
    return Workload(
        name=spec.kind, arrival_s=arrival_s,
        prompt_tokens=np.array([len(p) for p in prompts], dtype=np.int64),
        output_tokens=np.array([len(o) for o in outputs], dtype=np.int64),
        task=np.full(n, spec.kind, dtype=object),
        prompt_ids=tuple(prompts), output_ids=tuple(outputs))
