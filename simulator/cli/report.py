"""``specsim report RESULTS_DIR -o report.html``: the HTML report of a results folder."""
from __future__ import annotations

import argparse


def add_arguments(name: str, p: argparse.ArgumentParser) -> None:
    """Arguments of ``report``."""
    p.add_argument("results_dir", metavar="RESULTS_DIR",
                   help="a folder written by 'specsim run --out'")
    p.add_argument("-o", "--output", default="report.html",
                   help="HTML file to write (default report.html)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an --output file that specsim did not write")
    p.add_argument("--screenshot", default=None, metavar="PNG",
                   help="also open the report in headless Chromium, check that every chart "
                        "rendered offline, and save a full-page screenshot")


def main(args: argparse.Namespace) -> int:
    """Write the report; with --screenshot, check it in a browser. 1 if the check fails."""
    from reports import render_report_from_dir  # only reports/ imports altair
    from simulator.input_clash import check_outputs_not_inputs, results_dir_files
    check_outputs_not_inputs([("--output", args.output)], results_dir_files(args.results_dir))
    path = render_report_from_dir(args.results_dir, args.output, overwrite=args.overwrite)
    print(f"report: {path}")
    if args.screenshot:
        from reports.browser import check_report
        check = check_report(path, args.screenshot)
        print(f"browser check: {check.describe()}")
        print(f"screenshot: {check.screenshot}")
        for line in [*check.console_errors, *check.external_requests]:
            print(f"  {line}")
        if not check.ok:
            return 1
    return 0
