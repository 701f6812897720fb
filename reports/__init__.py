"""DataFrames -> Altair charts -> one self-contained HTML report (the only package that
imports altair).

``render_report(results, path, scenario=None, sweep=None, plan=None, validation=None,
calibration=None)`` writes the report of a list of Results; ``render_report_from_dir(
results_dir, path)`` writes the report of a ``specsim run --out`` folder.
"""
from reports.folder_report import render_report_from_dir
from reports.page import build_report_html, render_report
from simulator.results_dir import load_results_dir

__all__ = ["render_report", "render_report_from_dir", "build_report_html", "load_results_dir"]
