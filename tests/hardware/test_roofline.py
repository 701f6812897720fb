"""The one operator formula (hardware/roofline.py), as the cost model and calibration read it."""
import numpy as np
import pytest

from hardware.profile import load_profile
from hardware.roofline import Roofline
from simulator.cost.cost_model import CostModel
from simulator.inputs.errors import SpecsimError
from simulator.models.spec import load_model

PEAK, BW = 312e12, 1555e9   # A100-40GB fp16 datasheet (DESIGN.md section 4)


def test_an_operator_takes_its_slowest_roof_plus_overhead():
    roof = Roofline(PEAK, BW, compute_efficiency=0.5, memory_efficiency=0.8)
    flops, nbytes = np.array([1e12, 1e6, 0.0]), np.array([1e6, 1e9, 4e6])
    expected = np.maximum(flops / (PEAK * 0.5), nbytes / (BW * 0.8))
    assert roof.time(flops, nbytes) == pytest.approx(expected, rel=1e-15)
    assert roof.time(flops, nbytes, count=3.0, overhead_s=1e-6) == \
        pytest.approx(3 * expected + 1e-6, rel=1e-15)
    assert roof.compute_time(0.0, 1e6) == 0.0


def test_curves_are_read_in_log10_of_flops_bytes_or_intensity_and_clamped():
    curve = ((1e6, 0.1), (1e10, 0.9))
    by_flops = Roofline(PEAK, BW, compute_curve=curve, memory_curve=curve)
    assert by_flops.compute_rate(1e8, 1.0) == pytest.approx(PEAK * 0.5)   # halfway in log10
    assert by_flops.compute_rate(1e3, 1.0) == pytest.approx(PEAK * 0.1)   # clamped low
    assert by_flops.memory_rate(1e12) == pytest.approx(BW * 0.9)          # clamped high
    by_intensity = Roofline(PEAK, BW, compute_curve=((1.0, 0.2), (100.0, 0.8)),
                            axis="intensity")
    assert by_intensity.compute_rate(1e9, 1e8) == pytest.approx(PEAK * 0.5)  # 10 FLOP/B
    with pytest.raises(SpecsimError, match="unknown curve axis"):
        Roofline(PEAK, BW, axis="bytes")


def test_the_cost_model_prices_its_linear_layers_with_the_roofline():
    hw, model = load_profile("a100-40gb"), load_model("opt-13b")
    cm, roof = CostModel(hw, model, overheads=False), hw.roofline(model.dtype)
    ops = {op.name: op for op in cm.breakdown([1], [0]).ops}
    lm = ops["lm_head"]
    assert lm.compute_s == roof.compute_time(lm.flops, lm.hbm_bytes)
    assert lm.memory_s == roof.memory_time(lm.hbm_bytes)
