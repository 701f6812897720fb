"""``DrawAhead`` (issue 36): uniforms drawn in chunks for a stretch's tree walks, then the
generator settled where the walks' own ``rng.random`` calls would have left it.  It rests
on two properties of numpy's generators, checked here on the real ones: consecutive
``random`` calls concatenate (a + b doubles are ``random(a + b)``'s), and ``random`` leaves
the buffered 32-bit half that bounded integer draws keep (restored with the saved state)."""
import numpy as np
import pytest

from simulator.engine.draw_ahead import DrawAhead

BIT_GENERATORS = [np.random.PCG64, np.random.PCG64DXSM, np.random.MT19937, np.random.Philox,
                  np.random.SFC64]


def _rng(kind, seed):
    return np.random.Generator(kind(seed))


def _same(a, b) -> bool:
    """Two bit generator states (dicts of ints, strings and arrays) equal, value by value."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and np.array_equal(a, b)
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("kind", BIT_GENERATORS, ids=lambda k: k.__name__)
def test_consecutive_random_calls_concatenate(kind):
    sizes = np.random.default_rng(3).integers(0, 40, 30).tolist()
    split, whole = _rng(kind, 11), _rng(kind, 11)
    parts = np.concatenate([split.random(k) for k in sizes])
    assert parts.tolist() == whole.random(sum(sizes)).tolist()
    assert _same(split.bit_generator.state, whole.bit_generator.state)


@pytest.mark.parametrize("kind", [k for k in BIT_GENERATORS if k is not np.random.MT19937],
                         ids=lambda k: k.__name__)  # (MT19937's outputs are 32-bit: no half)
def test_random_leaves_the_buffered_half_alone(kind):
    rng = _rng(kind, 5)
    rng.integers(0, 10)  # a bounded draw under 2**32: half of a 64-bit output kept
    before = rng.bit_generator.state
    rng.random(7)
    after = rng.bit_generator.state
    assert not _same(after, before)  # the outputs moved on
    assert before["has_uint32"] == 1  # the half is there to keep
    assert (after["has_uint32"], after["uinteger"]) == (1, before["uinteger"])


def _walk(draws: list, at: int):
    """A stand-in walk: the uniforms it takes, as many as its first decides (1 to 6)."""
    used = 1 + int(draws[at] * 6)
    return np.array(draws[at:at + used]), used


@pytest.mark.parametrize("kind", BIT_GENERATORS, ids=lambda k: k.__name__)
@pytest.mark.parametrize("chunk", [1, 6, 50])
def test_walks_see_the_stream_and_settle_leaves_the_generator_where_calls_would(kind, chunk):
    for seed in range(20):
        mine, ref = _rng(kind, seed), _rng(kind, seed)
        for rng in (mine, ref):  # a buffered 32-bit half the settling must keep
            rng.integers(0, 1000)
        ahead = DrawAhead(mine, 6, chunk)
        for _ in range(seed % 9):
            got = ahead.take(_walk)
            first = ref.random(1)  # the walk's own calls: one, then the rest it takes
            rest = ref.random(1 + int(first[0] * 6) - 1)
            assert got.tolist() == [*first.tolist(), *rest.tolist()]
        ahead.settle()
        assert _same(mine.bit_generator.state, ref.bit_generator.state)
        assert mine.integers(0, 1000, 5).tolist() == ref.integers(0, 1000, 5).tolist()
        assert mine.random(3).tolist() == ref.random(3).tolist()


def test_a_settled_stream_starts_afresh():
    mine, ref = np.random.default_rng(9), np.random.default_rng(9)
    ahead = DrawAhead(mine, 6, 30)
    for _ in range(2):  # two passes of one DrawAhead, each settled
        for _ in range(3):
            got = ahead.take(_walk)
            assert got.tolist() == ref.random(got.size).tolist()
        ahead.settle()
        assert _same(mine.bit_generator.state, ref.bit_generator.state)
