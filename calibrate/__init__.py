"""Calibration and validation with torch: the only package that imports torch.

``specsim calibrate``: micro-benchmarks (benchmarks.py and bench_*.py) -> fit.py -> writer.py
(calibration.py strings them together).  ``specsim validate``: random-weight models
(model_torch.py) timed step by step against the cost model (validate.py), and a real
speculative loop with pinned acceptance (spec_loop.py).
"""
