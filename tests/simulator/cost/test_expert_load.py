"""The measured DeepSeek expert popularity (simulator/cost/expert_load.py): the Zipf fit
against hand arithmetic and the cited number, and its placement by EPLB on a small case."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from simulator.cost import expert_load, moe, rank_load
from simulator.inputs.errors import SpecsimError


def test_hottest_expert_by_hand():
    # top-1 of 4 at s = 1: weights 1, 1/2, 1/3, 1/4 sum to 25/12, so the hottest expert is
    # picked with probability 12/25 = 0.48 against the mean 1/4: 1.92 times the mean
    assert expert_load.hottest_over_mean(4, 1, 1.0) == pytest.approx(1.92, rel=1e-12)
    assert expert_load.skew_for_hottest(1.92, 4, 1) == pytest.approx(1.0, rel=1e-9)
    assert expert_load.hottest_over_mean(256, 8, 0.0) == pytest.approx(1.0, rel=1e-12)
    assert expert_load.skew_for_hottest(1.0, 256, 8) == pytest.approx(0.0, abs=1e-12)


def test_an_impossible_hottest_expert_is_refused():
    # top-2 of 4: the hottest expert in every token's picks is 1 / (2/4) = 2 times the mean,
    # the most a Zipf (or any) routing can give it; below the mean is no hottest expert
    for ratio in (2.0, 0.5):
        with pytest.raises(SpecsimError, match="hottest_over_mean"):
            expert_load.skew_for_hottest(ratio, 4, 2)


def test_deepseek_skew_reproduces_the_cited_hottest_expert():
    s = expert_load.deepseek_measured_skew()
    # the hottest of 256 picked with probability 11.948 x 8/256 = 0.373 < 1 (no cap), so
    # it carries 256 / H(256, s) of the mean, H the generalised harmonic number; the cited
    # imbalance ratio (max - mean) / mean = 10.948: TensorRT-LLM tech blog 4, Table 1
    harmonic = sum(r ** -s for r in range(1, 257))
    assert 256 / harmonic == pytest.approx(1 + 10.948, rel=1e-9)
    assert 0.59 < s < 0.60


def test_eplb_places_a_zipf_profile_as_enumerated():
    # top-1 of 4 at s = 1: loads 0.48, 0.24, 0.16, 0.12 (sum 1)
    p = moe.inclusion_probabilities(4, 1, 1.0)
    np.testing.assert_allclose(p, [0.48, 0.24, 0.16, 0.12], rtol=1e-12)
    # contiguous blocks {0.48, 0.24} {0.16, 0.12}: 0.72; EPLB without replicas packs the
    # best split {0.48, 0.12} {0.24, 0.16}, as enumerating every 2 + 2 split finds
    assert rank_load.busiest_rank_share(p, 2) == pytest.approx(0.72, rel=1e-12)
    best = min(max(p[list(a)].sum(), 1.0 - p[list(a)].sum())
               for a in itertools.combinations(range(4), 2))
    assert best == pytest.approx(0.60, rel=1e-12)
    assert rank_load.busiest_rank_share(p, 2, eplb=True) == pytest.approx(best, rel=1e-12)
    # 2 redundant slots: 0.48 split in two (0.24 a replica), then the tie 0.24 / 0.24 goes
    # to the first expert (eplb.py's argmax): 3 replicas of 0.16; six replicas, 3 a rank,
    # heaviest first to the lighter rank with room: A 0.24, B 0.16, B 0.32, A 0.40,
    # B 0.48 (full), A 0.52 -- the best of the 3 + 3 splits
    got = rank_load.busiest_rank_share(p, 2, eplb=True, redundant=2)
    w = [0.16, 0.16, 0.16, 0.24, 0.16, 0.12]
    best = min(max(sum(w[i] for i in a), 1.0 - sum(w[i] for i in a))
               for a in itertools.combinations(range(6), 3))
    assert got == pytest.approx(0.52, rel=1e-12) and best == pytest.approx(0.52, rel=1e-12)
