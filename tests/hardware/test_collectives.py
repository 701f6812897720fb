"""Collectives (hardware/collectives.py) against Vidur's measured collectives, published
figures, closed forms and invariants.

Measured files: ../shared/measured/vidur/network/<topology>/{all_reduce,send_recv}.csv
(Vidur, github.com/microsoft/vidur, commit 7d47513), read here independently of the fitter
with pandas: the median over rows of ``time_stats.<op>.median`` per (num_workers, size), the
packed placement (devices_per_node = min(num_workers, max_devices_per_node)).
"""
from __future__ import annotations

import copy
import functools
import math

import numpy as np
import pandas as pd
import pytest

from hardware.collectives import (CUSTOM_MAX_BYTES, Collectives, fit_collectives, fit_pieces,
                                  joined)
from hardware.collectives_yaml import collectives_to_dict, parse_collectives
from hardware.profile import GB, Link, list_profiles, load_profile, profile_from_dict
from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import load_yaml_file
from tests.helpers import REPO, SHARED

NET = SHARED / "measured" / "vidur" / "network"
needs_data = pytest.mark.skipif(not (NET / "a100_dgx" / "all_reduce.csv").is_file(),
                                reason="../shared/measured/vidur/network is not here")
KIB, MIB = 1024, 2**20
BIG = 8 * MIB               # from here on a measured size's time is reproducible (see below)
INTRA = {"a100_dgx": (2, 4, 8), "a100_pairwise_nvlink": (2, 4)}   # worlds inside one node


def measured(folder: str, op: str) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    df = pd.read_csv(NET / folder / f"{op}.csv")
    df = df[df["devices_per_node"] == np.minimum(df["num_workers"], df["max_devices_per_node"])]
    med = df.groupby(["num_workers", "size"])[f"time_stats.{op}.median"].median() / 1e3
    return {int(w): (g.index.get_level_values("size").to_numpy(float), g.to_numpy())
            for w, g in med.groupby(level=0)}


@functools.lru_cache(maxsize=None)
def fitted(folder: str) -> Collectives:
    return parse_collectives(fit_collectives(NET / folder), source=folder)


def rel_err(pred, meas):
    return np.abs(np.asarray(pred) / meas - 1.0)


def worst_pair_ratio(t: np.ndarray) -> float:
    """max over i < j of t_i / t_j (sizes ascending).  A non-decreasing curve p within 20% of
    both needs 0.8 t_i <= p_i <= p_j <= 1.2 t_j, so a ratio above 1.5 makes 'every point
    within 20%' impossible for any monotone model."""
    return float(np.max(np.maximum.accumulate(t) / t))


# --- against the measurements --------------------------------------------------------------

@needs_data
@pytest.mark.parametrize("folder", sorted(INTRA))
def test_all_reduce_every_point_from_8_mib_within_20_percent(folder):
    model = fitted(folder)
    for world in INTRA[folder]:
        s, t = measured(folder, "all_reduce")[world]
        big = s >= BIG
        err = rel_err(model.all_reduce_s(s[big], world, custom=False), t[big])
        assert big.sum() > 100 and err.max() <= 0.2, (folder, world, err.max())


@needs_data
@pytest.mark.parametrize("folder", sorted(INTRA))
def test_below_8_mib_no_monotone_curve_can_hold_every_point_so_most_must(folder):
    # the small-message medians scatter (eager launches: the kernel waits for the other
    # ranks): a pair of sizes more than 1.5x apart the wrong way exists in every world, while
    # from 8 MiB on the measurement is monotone to within 20% (so the test above is fair)
    model = fitted(folder)
    for world in INTRA[folder]:
        s, t = measured(folder, "all_reduce")[world]
        assert worst_pair_ratio(t) > 1.5, (folder, world)
        assert worst_pair_ratio(t[s >= BIG]) <= 1.5, (folder, world)
        err = rel_err(model.all_reduce_s(s, world, custom=False), t)
        assert np.mean(err <= 0.2) >= 0.85 and np.median(err) <= 0.05, (folder, world)


@needs_data
def test_two_node_world_16_is_fitted_but_cannot_be_held_to_20_percent():
    # world 16 spans two DGX nodes (InfiniBand): its medians jump 2x down and up between
    # 12 and 20 MiB, so no monotone curve is within 20% (nor 40%) of every point
    s, t = measured("a100_dgx", "all_reduce")[16]
    assert worst_pair_ratio(t[s >= BIG]) > 1.4 ** 2
    err = rel_err(fitted("a100_dgx").all_reduce_s(s, 16, custom=False), t)
    assert np.mean(err <= 0.2) >= 0.75 and np.median(err) <= 0.06


@needs_data
@pytest.mark.parametrize("folder", sorted(INTRA))
def test_send_recv_within_20_percent(folder):
    s, t = measured(folder, "send_recv")[2]
    err = rel_err(fitted(folder).send_recv_s(s), t)
    assert np.mean(err <= 0.2) >= 0.98, folder
    miss = s[(err > 0.2) & (s >= BIG)]
    # a100_dgx: the only misses from 8 MiB are 10 sizes between 29 and 33 MiB, where
    # neighbouring sizes alternate between about 120 and 150 us (the profile's source says so)
    assert len(miss) <= 10 and np.all((miss >= 29 * MIB) & (miss <= 33 * MIB)), miss / MIB


@needs_data
def test_the_form_holds_for_a40_send_recv_too():
    s, t = measured("a40_pairwise_nvlink", "send_recv")[2]
    pieces, errors = fit_pieces(s, t, 1.0)
    curve = joined(2, 1.0, [KIB * p["from_kib"] for p in pieces], 1e-6 * pieces[0]["latency_us"],
                   [GB * p.get("busbw_gb_per_s", math.inf) for p in pieces])
    err = rel_err(curve(s), t)
    assert np.mean(err <= 0.2) >= 0.95 and errors["within_20_percent"] == pytest.approx(
        np.mean(err <= 0.2), abs=0.01)


@needs_data
@pytest.mark.parametrize("name", ["a100-80gb", "a100-40gb"])
def test_shipped_a100_block_agrees_with_the_fit_and_its_stated_errors(name):
    shipped = load_profile(name).collectives
    fit = fitted("a100_dgx")
    raw = load_yaml_file(REPO / "hardware" / "profiles" / f"{name}.yaml")["collectives"]
    stated = raw["all_reduce"]["provenance"]["fit_errors"]
    for world, (s, t) in measured("a100_dgx", "all_reduce").items():
        mine = shipped.all_reduce_s(s, world, custom=False)
        assert rel_err(mine, fit.all_reduce_s(s, world, custom=False)).max() < 0.01
        assert np.mean(rel_err(mine, t) <= 0.2) == pytest.approx(
            stated[f"world_{world}"]["within_20_percent"], abs=0.005)
    s, t = measured("a100_dgx", "send_recv")[2]
    assert rel_err(shipped.send_recv_s(s), fit.send_recv_s(s)).max() < 0.01
    assert np.mean(rel_err(shipped.send_recv_s(s), t) <= 0.2) == pytest.approx(
        raw["send_recv"]["provenance"]["fit_errors"]["within_20_percent"], abs=0.005)


# --- against published figures ---------------------------------------------------------

# vLLM's custom all-reduce kernel, timed in sglang PR #2688 ("vllm time") on an A100, float32
# tensors of N elements (bytes = 4 N).
A100_CUSTOM = {2: [(2 * KIB, 13.0), (16 * KIB, 11.3), (128 * KIB, 12.1), (MIB, 17.6),
                   (2 * MIB, 22.3), (4 * MIB, 32.5), (8 * MIB, 55.3)],
               4: [(2 * KIB, 13.5), (16 * KIB, 12.1), (128 * KIB, 13.5), (MIB, 23.9),
                   (2 * MIB, 31.3), (4 * MIB, 47.1)],
               8: [(2 * KIB, 14.0), (16 * KIB, 14.2)]}
# NCCL all-reduce on 8 x H100 via torch.distributed, ByteDance-Seed/Triton-distributed #57
# (its 2 MiB entry, 290.73 us, 5x both neighbours, left out as the profile says)
H100_NCCL_8 = [(128, 19.19), (KIB, 19.50), (16 * KIB, 20.71), (32 * KIB, 22.65),
               (64 * KIB, 23.05), (128 * KIB, 23.71), (256 * KIB, 24.76), (512 * KIB, 25.24),
               (MIB, 32.42), (4 * MIB, 59.43), (8 * MIB, 90.51), (16 * MIB, 135.68)]


# h100-sxm's and h200's custom curves are the CUDA-graph timings (tests/hardware/
# test_h100_allreduce.py, test_h200_allreduce.py; PR #2904's were timed without CUDA graphs);
# h200's NCCL curve is its own (tests/hardware/test_h200_nccl.py)
@pytest.mark.parametrize("name,table,custom,limit", [
    ("a100-80gb", A100_CUSTOM, True, 0.12), ("h100-sxm", {8: H100_NCCL_8}, False, 0.075)])
def test_profiles_reproduce_the_published_points(name, table, custom, limit):
    c = load_profile(name).collectives
    for world, points in table.items():
        s = np.array([p[0] for p in points], float)
        t = np.array([p[1] for p in points]) * 1e-6
        if custom:  # below vLLM's 8 MiB max_size (vLLM uses '<'; the 8 MiB point is NCCL's)
            s, t = s[s < CUSTOM_MAX_BYTES], t[s < CUSTOM_MAX_BYTES]
        assert rel_err(c.all_reduce_s(s, world, custom=custom), t).max() <= limit, world


# --- closed forms ----------------------------------------------------------------------------

def one_piece(lat_us: float, busbw_gb: float, worlds=(2, 8)) -> Collectives:
    piece = [{"from_kib": 0, "latency_us": lat_us, "busbw_gb_per_s": busbw_gb}]
    return parse_collectives({
        "all_reduce": {"source": "closed form", "worlds": [{"world": w, "pieces": piece}
                                                           for w in worlds]},
        "send_recv": {"source": "closed form", "pieces": piece}}, source="test")


SIZES = np.array([1.0, 2048, 16384, 1e6, 3.3e7, 1e9])


def test_single_regime_equals_latency_plus_bus_traffic_over_busbw():
    lat, bw = 7e-6, 150e9
    c = one_piece(7.0, 150.0)
    for p in (2, 8):
        assert np.allclose(c.all_reduce_s(SIZES, p), lat + SIZES * 2 * (p - 1) / p / bw,
                           rtol=1e-12)
        assert np.allclose(c.all_gather_s(SIZES, p), lat + SIZES * (p - 1) / p / bw,
                           rtol=1e-12)
    assert np.allclose(c.send_recv_s(SIZES), lat + SIZES / bw, rtol=1e-12)


def test_unmeasured_worlds_follow_the_stated_rules():
    lat, bw = 7e-6, 150e9
    c = one_piece(7.0, 150.0, worlds=(4,))
    # below the smallest: latency held, bus bandwidth held, the world's own bus traffic
    assert np.allclose(c.all_reduce_s(SIZES, 2), lat + SIZES * 1.0 / bw, rtol=1e-12)
    # above the largest: plus the latency grown linearly in p - 1
    assert np.allclose(c.all_reduce_s(SIZES, 8),
                       lat * (1 + 4 / 3) + SIZES * 1.75 / bw, rtol=1e-12)
    two = one_piece(7.0, 150.0, worlds=(2, 8))
    t2, t8 = two.all_reduce_s(SIZES, 2), two.all_reduce_s(SIZES, 8)
    assert np.allclose(two.all_reduce_s(SIZES, 4), t2 + (4 - 2) / (8 - 2) * (t8 - t2))
    assert "interpolated between worlds 2 and 8" in two.basis("all_reduce", 4)
    assert "extrapolated" in c.basis("all_reduce", 8) and "world 4" in c.basis("all_reduce", 2)


def test_from_link_reproduces_todays_ring_formula():
    link = Link("nvlink", 300 * GB, 5e-6)
    c = Collectives.from_link(link)
    for p in (2, 4, 8):
        assert np.allclose(c.all_reduce_s(SIZES, p),
                           2 * (p - 1) * 5e-6 + SIZES * 2 * (p - 1) / p / (300 * GB))
        assert np.allclose(c.all_gather_s(SIZES, p),
                           (p - 1) * 5e-6 + SIZES * (p - 1) / p / (300 * GB))
    assert np.allclose(c.send_recv_s(SIZES), 5e-6 + SIZES / (300 * GB))
    cpu = load_profile("cpu")           # a profile with no collectives: block
    assert cpu.collectives.all_reduce_s(1e6, 4) == pytest.approx(
        Collectives.from_link(cpu.interconnect).all_reduce_s(1e6, 4))


def test_trivial_cases_and_vectorisation():
    c = load_profile("a100-80gb").collectives
    assert c.all_reduce_s(1e6, 1) == 0.0 and c.all_gather_s(1e6, 1) == 0.0
    assert c.all_reduce_s(0, 8) == 0.0 and c.send_recv_s(0) == 0.0
    grid = np.geomspace(1, 1e9, 50)
    for p in (3, 4, 6, 16):
        for f in (c.all_reduce_s, c.all_gather_s, lambda s, p: c.all_reduce_s(s, p, custom=False)):
            assert np.array_equal(f(grid, p), [f(float(x), p) for x in grid])
    assert np.array_equal(c.send_recv_s(grid), [c.send_recv_s(float(x)) for x in grid])
    assert c.all_reduce_s(np.int64(4096), np.int64(4)) == c.all_reduce_s(4096, 4)
    assert isinstance(c.all_reduce_s(4096, 4), float)
    for bad in (0, -2, 2.5, True):
        with pytest.raises(SpecsimError) as e:
            c.all_reduce_s(1e6, bad)
        assert e.value.field == "world"
    with pytest.raises(SpecsimError):
        c.send_recv_s(-1)


def test_custom_all_reduce_only_where_vllm_runs_it():
    c = load_profile("a100-80gb").collectives
    for p in (2, 4, 6, 8):
        assert c.all_reduce_s(16 * KIB, p) < c.all_reduce_s(16 * KIB, p, custom=False)
        assert c.all_reduce_s(CUSTOM_MAX_BYTES, p) == c.all_reduce_s(CUSTOM_MAX_BYTES, p,
                                                                     custom=False)
    for p in (3, 5, 16):
        assert c.all_reduce_s(16 * KIB, p) == c.all_reduce_s(16 * KIB, p, custom=False)
    assert "interpolated between worlds 4 and 8" in c.basis("custom_all_reduce", 6)
    assert "no custom all-reduce" in c.basis("custom_all_reduce", 16)
    for name in ("l40s", "a10"):        # PCIe only: vLLM turns its custom all-reduce off
        pcie = load_profile(name).collectives
        assert pcie.all_reduce_s(16 * KIB, 2) == pcie.all_reduce_s(16 * KIB, 2, custom=False)


# --- invariants over every shipped profile -------------------------------------------------

GRID = np.unique(np.concatenate([np.geomspace(1, 2**30, 3000),
                                 np.arange(1, 41) * 2**20 - 1, np.arange(1, 41) * 2**20]))


@pytest.mark.parametrize("name", list_profiles())
def test_monotone_non_decreasing_in_message_size(name):
    c = load_profile(name).collectives
    runs = [c.send_recv_s(GRID)] + [f(GRID, p) for p in range(1, 17)
                                    for f in (c.all_gather_s,
                                              lambda s, p: c.all_reduce_s(s, p, custom=False),
                                              lambda s, p: c.all_reduce_s(s, p, custom=True))]
    for t in runs:
        assert np.all(np.diff(t) >= -1e-15) and np.all(np.isfinite(t))


@pytest.mark.parametrize("name", list_profiles())
def test_a_larger_world_is_never_cheaper_for_large_messages(name):
    c = load_profile(name).collectives
    nccl = np.geomspace(BIG, 2**30, 200)
    custom = np.geomspace(MIB, CUSTOM_MAX_BYTES - 1, 50)   # where the custom kernel runs
    for p in range(2, 16):
        assert np.all(c.all_reduce_s(nccl, p + 1, custom=False)
                      >= c.all_reduce_s(nccl, p, custom=False)), p
        assert np.all(c.all_gather_s(nccl, p + 1) >= c.all_gather_s(nccl, p)), p
    for lo, hi in ((2, 4), (4, 6), (6, 8)):
        assert np.all(c.all_reduce_s(custom, hi) >= c.all_reduce_s(custom, lo)), (lo, hi)


# --- the profile block: bad input names the field ----------------------------------------

def a100_block() -> dict:
    return copy.deepcopy(load_yaml_file(REPO / "hardware/profiles/a100-80gb.yaml"))


@pytest.mark.parametrize("edit,field", [
    (lambda c: c.update(bogus=1), "collectives.bogus"),
    (lambda c: c["all_reduce"]["worlds"][0]["pieces"][0].update(wat=1),
     "collectives.all_reduce.worlds[0].pieces[0].wat"),
    (lambda c: c["all_reduce"]["worlds"][1]["pieces"][0].update(latency_us=-1),
     "collectives.all_reduce.worlds[1].pieces[0].latency_us"),
    (lambda c: c["all_reduce"].pop("source"), "collectives.all_reduce.source"),
    (lambda c: c["send_recv"].pop("source"), "collectives.send_recv.source"),
    (lambda c: c["all_reduce"]["worlds"][0]["pieces"][1].update(latency_us=60.0),
     "collectives.all_reduce.worlds[0].pieces[1].latency_us"),
    (lambda c: c["all_reduce"]["worlds"][0]["pieces"][1].update(from_kib=0),
     "collectives.all_reduce.worlds[0].pieces[1].from_kib"),
    (lambda c: c["all_reduce"]["worlds"].reverse(), "collectives.all_reduce.worlds[1].world"),
    (lambda c: c["custom_all_reduce"].update(max_kib=0), "collectives.custom_all_reduce.max_kib"),
    (lambda c: c["all_reduce"]["worlds"][0]["pieces"][2].update(busbw_gb_per_s=0),
     "collectives.all_reduce.worlds[0].pieces[2].busbw_gb_per_s"),
    (lambda c: c.update(from_interconnect={"source": "the link formulas"}),
     "collectives.all_reduce"),
])
def test_bad_collectives_blocks_are_refused_naming_the_field(edit, field):
    data = a100_block()
    edit(data["collectives"])
    with pytest.raises(SpecsimError) as e:
        profile_from_dict(data, source="bad.yaml")
    assert e.value.field == field and e.value.fix, str(e.value)


def test_unknown_key_lists_the_valid_ones_and_joins_give_the_latency_to_write():
    data = a100_block()
    data["collectives"]["all_reduce"]["worlds"][0]["pieces"][0]["latency"] = 1
    with pytest.raises(SpecsimError) as e:
        profile_from_dict(data, source="bad.yaml")
    assert "busbw_gb_per_s, from_kib, latency_us" in e.value.fix
    data = a100_block()
    data["collectives"]["all_reduce"]["worlds"][0]["pieces"][1]["latency_us"] = 60.0
    with pytest.raises(SpecsimError) as e:
        profile_from_dict(data, source="bad.yaml")
    assert "35.198" in e.value.fix   # the value the file states


def test_every_collectives_number_has_a_source():
    for name in list_profiles():
        raw = load_yaml_file(REPO / "hardware" / "profiles" / f"{name}.yaml")
        p = load_profile(name)
        for key in raw.get("collectives", {}):
            assert len(p.sources[f"collectives.{key}"]) >= 60, (name, key)


def test_joined_pieces_meet_exactly():
    c = joined(4, 1.5, [0, 1e5, 1e7], 2e-5, [math.inf, 50e9, 200e9])
    for s in (1e5, 1e7):
        before = c(np.array([np.nextafter(s, 0)]))[0]
        assert c(np.array([s]))[0] == pytest.approx(before, rel=1e-9)


@pytest.mark.parametrize("name", list_profiles())
def test_the_block_written_back_loads_to_the_same_collectives(name):
    p = load_profile(name)
    block = collectives_to_dict(p.collectives)
    again = parse_collectives(block, source="again", link=p.interconnect) if block else \
        Collectives.from_link(p.interconnect)
    for world in (1, 2, 3, 6, 8, 16):
        assert np.array_equal(again.all_reduce_s(GRID, world), p.collectives.all_reduce_s(
            GRID, world)) and np.array_equal(again.all_gather_s(GRID, world),
                                             p.collectives.all_gather_s(GRID, world))
    assert np.array_equal(again.send_recv_s(GRID), p.collectives.send_recv_s(GRID))
