"""The report's acceptance provenance lines: where each run's, candidate's or point's
acceptance comes from, and the warnings (``simulator.acceptance.provenance``)."""
from __future__ import annotations

from typing import Sequence

from reports.html import Page
from simulator.acceptance.provenance import frame_notes


def frame_acceptance(page: Page, table, label: str) -> None:
    """A plan's or sweep's acceptance sources, then its warnings (escaped by ``page.text``)."""
    sources, warnings = frame_notes(table, label)
    for line in sources:
        page.text(line)
    for line in warnings:
        page.text(f"Warning: {line}")


def run_acceptance(page: Page, results: Sequence) -> None:
    """Per run: where its acceptance comes from, and its warning."""
    for r in results:
        if r.info.get("acceptance_source"):
            page.text(f"Where {r.label}'s acceptance comes from: {r.info['acceptance_source']}")
        if r.info.get("acceptance_warning"):
            page.text(f"Warning: {r.label}: {r.info['acceptance_warning']}")
