"""Kit of the model-free proposers (prompt lookup, suffix decoding, lookahead): the
workload's real token ids per request, and how many of a draft match the text that follows."""
from __future__ import annotations

import numpy as np

from simulator.inputs.errors import SpecsimError


def require_token_ids(workload, policy: str) -> tuple[tuple, tuple]:
    """Return the workload's (prompt_ids, output_ids), or raise: the policy needs real tokens."""
    if workload is None or workload.prompt_ids is None or workload.output_ids is None:
        name = None if workload is None else workload.name
        raise SpecsimError(
            f"the {policy} policy matches real token ids, and workload {name!r} has none",
            field="workload",
            fix="use a token-level workload, e.g. workload: {tokens: {kind: code_edit, "
                "num_requests: 50, arrival: {process: poisson, rate_per_s: 1}}}, or a "
                "token-id trace: workload: {trace: my.jsonl, format: token_ids} (specsim "
                "tokenize makes one)")
    return workload.prompt_ids, workload.output_ids


class TokenText:
    """Each request's prompt + output ids: what it has emitted so far and what comes next."""

    def __init__(self, prompt_ids: tuple, output_ids: tuple) -> None:
        self.prompt_ids = prompt_ids
        self.output_ids = output_ids
        self._full: dict[int, np.ndarray] = {}
        self._lists: dict[int, list[int]] = {}

    def full(self, rid: int) -> np.ndarray:
        """Prompt followed by the whole output of request ``rid`` (cached while it runs)."""
        text = self._full.get(rid)
        if text is None:
            text = np.concatenate((self.prompt_ids[rid], self.output_ids[rid]))
            self._full[rid] = text
        return text

    def tokens(self, rid: int) -> list[int]:
        """``full(rid)`` as a Python list (cached while it runs): the proposers read a few
        tokens at a time, which a list indexes without numpy's per-call layers."""
        text = self._lists.get(rid)
        if text is None:
            text = self._lists[rid] = self.full(rid).tolist()
        return text

    def known(self, rid: int, generated: int) -> np.ndarray:
        """The tokens the request's context holds: prompt + the first ``generated`` outputs."""
        return self.full(rid)[:self.prompt_ids[rid].size + int(generated)]

    def upcoming(self, rid: int, generated: int, n: int) -> np.ndarray:
        """The target's next ``n`` tokens (fewer near the end of the output)."""
        g = int(generated)
        return self.output_ids[rid][g:g + int(n)]

    def forget(self, rid: int) -> None:
        """Drop the cached text of a finished request."""
        self._full.pop(rid, None)
        self._lists.pop(rid, None)


def matched_prefix(draft: np.ndarray, truth: np.ndarray) -> int:
    """Leading tokens of ``draft`` equal to ``truth`` (greedy verification of a chain)."""
    n = min(draft.size, truth.size)
    if n == 0:
        return 0
    # a few tokens each: compared as Python ints, without numpy's per-call layers
    for i, (a, b) in enumerate(zip(draft[:n].tolist(), truth[:n].tolist())):
        if a != b:
            return i
    return n
