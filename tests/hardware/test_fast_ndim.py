"""``fast_ndim`` (hardware/roofline.py): ``np.ndim``'s answer on every kind of value the
roofline and the engine-kernel floors are handed, Python numbers and None without
``np.ndim``'s AttributeError path."""
import numpy as np
import pytest

from hardware.roofline import fast_ndim

VALUES = [0, 3, 2.5, -0.0, float("nan"), float("inf"), None, True, np.float64(2.0),
          np.int64(3), np.array(1.0), np.ones(3), np.ones((2, 2)), [1, 2], (1.0,), [[1.0]]]


@pytest.mark.parametrize("x", VALUES, ids=[type(v).__name__ + str(i) for i, v in
                                          enumerate(VALUES)])
def test_fast_ndim_is_np_ndim(x):
    assert fast_ndim(x) == np.ndim(x)
