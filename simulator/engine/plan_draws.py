"""What a ``CarriedDraft`` (simulator/engine/plan.py) declares of its draws so that the
engine may draw a stretch's uniforms ahead (chain_short.py, draw_ahead.py): ``BatchDraws``,
its acceptances' walk where it depends on the batch size alone, and ``DrawnDraft``, its
proposer's own draws where it draws (a staged draft's inner acceptances).  Both rest on an
iteration's draws being ``rng.random`` calls in a fixed order: the proposer's, then the
acceptances'.  Re-exported by plan.py, the socket a policy imports."""
from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np


class BatchDraws(NamedTuple):
    """``CarriedDraft.draw_accepted`` of ``n`` requests where it depends on the batch size
    alone (a tree walk the same for every request), declared by ``batch_draws``."""

    # draw(rng): the same draws in the same order and the same array
    draw: Callable[[np.random.Generator], np.ndarray]
    # the most uniforms (``rng.random``'s doubles) one iteration's draw takes, and
    # ahead(draws, at): (the same counts as a list of ints, how many uniforms it took) from
    # uniforms drawn ahead, where its ``rng.random`` calls would return draws[at],
    # draws[at + 1], ... in order (a list holding at least ``most`` from ``at``); None: only
    # ``draw``
    most: int = 0
    ahead: Callable[[list, int], tuple[list, int]] | None = None


class DrawnDraft(NamedTuple):
    """``CarriedDraft.iteration_draft_s`` of ``n`` requests from uniforms drawn ahead, where
    its only draws are ``rng.random``'s, as many as its own walk takes (a staged draft's
    inner rounds), and its price does not depend on the tokens re-read; declared by
    ``drawn_draft_s``."""

    # the most uniforms one iteration's draft takes
    most: int
    # price(ctx, draws, at): (the proposer's seconds at contexts ``ctx``, a list of ints in
    # the batch's order, bitwise ``iteration_draft_s``'s; how many uniforms it took) where
    # its ``rng.random`` calls would return draws[at], draws[at + 1], ... in order (a list
    # holding at least ``most`` from ``at``)
    price: Callable[[list, list, int], tuple[float, int]]
    # walked(ctx, draws, at): ((``price``'s seconds, then the emissions, accepted + 1, of
    # its ``BatchDraws``' ``ahead`` counts from the uniforms that follow its own), how many
    # uniforms both took), where the policy walks both in one call (taking at most ``most``
    # and ``BatchDraws.most``; chain_walked.py); None: ``price`` and ``ahead`` apart
    walked: Callable[[list, list, int], tuple[tuple[float, list], int]] | None = None
