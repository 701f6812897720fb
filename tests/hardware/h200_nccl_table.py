"""What the H200 NCCL tests share (test_h200_nccl.py: all-reduce, test_h200_allgather.py:
all-gather): aiconfigurator's nccl-tests grid, the skip without its checkout, the shipped
block's pieces by world."""
from __future__ import annotations

import numpy as np
import pytest

from calibrate import aiconfigurator as aic
from hardware.collectives_yaml import collectives_to_dict
from hardware.profile import load_profile

MIB = 1024 * 1024
NBYTES = np.array([512.0 * 2**i for i in range(21)])   # 512 B to 512 MiB
need_table = pytest.mark.skipif(aic.data_root() is None,
                                reason=f"{aic.ENV} names no aiconfigurator checkout")


def table_rows(op: str) -> dict:
    """The h200 table's rows of ``op`` (NCCL 2.29.2), by world."""
    return aic.nccl_rows(aic.table("h200_sxm", "comm", "nccl", "2.29.2", "nccl_perf"), op)


def worlds(kind: str) -> dict:
    """The shipped h200 ``kind`` block's pieces, by world."""
    block = collectives_to_dict(load_profile("h200").collectives)[kind]
    return {w["world"]: w["pieces"] for w in block["worlds"]}
