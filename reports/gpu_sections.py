"""The report's sections for an engineer with a GPU: the calibration fit and the validation
of predicted against measured step times (split from page.py)."""
from __future__ import annotations

import pandas as pd

from reports import charts, extras
from reports.frames import as_frame
from reports.html import Page, format_number
from reports.html import format_percent as _pct


def calibration_section(page: Page, calibration, pricing) -> None:
    source = calibration
    if source is None and pricing is not None and pricing.hardware.compute_efficiency_curve:
        source = pricing.hardware  # the scenario runs on a calibrated profile: show its fit
    if source is None:
        return
    page.section("Calibration")
    curves, params, points = extras.calibration_frames(source)
    named = []
    if len(curves):
        named.append(("efficiency-curves", charts.efficiency_curve_chart(curves)))
    if len(points):
        sample = points if len(points) <= 2000 else points.sample(2000, random_state=0)
        named.append(("calibration", charts.calibration_chart(sample)))
    page.charts(named)
    if len(params):
        page.table(params)
    elif isinstance(source, pd.DataFrame):
        page.table(source, max_rows=50)


VALIDATION_TABLE = {"profile": ("profile", str), "step": ("step", str),
                    "cases": ("cases", format_number), "mape": ("MAPE", _pct),
                    "median_error": ("median error", _pct),
                    "worst_error": ("worst error", _pct)}


def validation_section(page: Page, validation) -> None:
    page.section("Validation")
    table = as_frame(validation)
    points = extras.validation_points(table)
    errors = extras.validation_errors(table)
    if len(points):
        page.text("Predicted against measured step times; errors are (predicted - "
                  "measured) / measured.")
        page.charts([("validation", charts.calibration_chart(
            points, "predicted vs measured step time"))])
    if len(errors):
        page.table(errors, VALIDATION_TABLE)
    else:
        page.table(table)
