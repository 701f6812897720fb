"""Open a report in headless Chromium: did every chart render, any console error, any request?

Used by the browser test and by ``specsim report --screenshot``.  Needs selenium and the
Debian packages chromium and chromium-driver (``find_chromium`` says whether they are here).
Chromium starts with a fresh profile and its background networking off, so that every
request in the performance log comes from the page itself.
"""
from __future__ import annotations

import json
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from simulator.inputs.errors import SpecsimError

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--hide-scrollbars")
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
DRIVERS = ("chromedriver", "chromium-driver")
LOCAL_SCHEMES = ("file:", "data:", "about:", "blob:")
INSTALL_FIX = "apt-get install -y chromium chromium-driver, and pip install selenium"

# Reports whether each chart container holds an svg or a canvas, and whether vega-embed
# finished (data-rendered is set by the report's own script, "error" on failure).
CHART_STATE_JS = """
return Array.from(document.querySelectorAll('.chart')).map(function (el) {
  return {id: el.id, name: el.getAttribute('data-chart') || '',
          state: el.getAttribute('data-rendered') || '',
          drawn: el.querySelector('svg, canvas') !== null};
});
"""


@dataclass(frozen=True)
class BrowserCheck:
    """What headless Chromium saw when it opened a report."""

    charts: tuple[dict, ...]
    console_errors: tuple[str, ...]
    requests: tuple[str, ...]
    screenshot: Path | None = None
    title: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def undrawn(self) -> list[str]:
        return [c["id"] for c in self.charts if not c["drawn"]]

    @property
    def external_requests(self) -> list[str]:
        return [u for u in self.requests if not u.startswith(LOCAL_SCHEMES)]

    @property
    def ok(self) -> bool:
        return bool(self.charts) and not (self.undrawn or self.console_errors
                                          or self.external_requests)

    def describe(self) -> str:
        """One line for the command line."""
        drawn = len(self.charts) - len(self.undrawn)
        return (f"{drawn}/{len(self.charts)} charts rendered, {len(self.console_errors)} "
                f"console errors, {len(self.external_requests)} network requests")


def find_chromium() -> tuple[str, str] | None:
    """Paths of a Chromium binary and its driver, or None when either is missing."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return None
    binary = next((p for p in map(shutil.which, BROWSERS) if p), None)
    driver = next((p for p in map(shutil.which, DRIVERS) if p), None)
    return (binary, driver) if binary and driver else None


def _driver(binary: str, driver_path: str, profile: str, width: int, height: int):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = binary
    for flag in CHROMIUM_FLAGS:
        opts.add_argument(flag)
    opts.add_argument(f"--user-data-dir={profile}")
    opts.add_argument(f"--window-size={width},{height}")
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    # An explicit driver path keeps Selenium Manager from looking for one online.
    return webdriver.Chrome(options=opts, service=Service(executable_path=driver_path))


def _requested_urls(perf_log: list[dict], page_url: str) -> list[str]:
    """URLs requested from the moment the report's own document was requested onwards.

    The browser's start-up page may still be logging its internal chrome:// resources;
    those come before the report and are not the report's doing.
    """
    urls = []
    for entry in perf_log:
        msg = json.loads(entry["message"])["message"]
        if msg.get("method") == "Network.requestWillBeSent":
            urls.append(msg["params"]["request"]["url"])
        elif msg.get("method") == "Network.webSocketCreated":
            urls.append(msg["params"]["url"])
    return urls[urls.index(page_url):] if page_url in urls else urls


def check_report(html_path: str | Path, screenshot: str | Path | None = None, *,
                 width: int = 1400, timeout_s: float = 60.0,
                 max_height: int = 12000) -> BrowserCheck:
    """Open ``html_path`` headless, wait for the charts, collect logs, optionally screenshot.

    The screenshot is of the whole page (up to ``max_height`` pixels tall).
    """
    found = find_chromium()
    if found is None:
        raise SpecsimError("headless Chromium is not available", field="--screenshot",
                           fix=INSTALL_FIX)
    page = Path(html_path).expanduser().resolve()
    if not page.is_file():
        raise SpecsimError("no such file", source=str(page), field="report")
    with tempfile.TemporaryDirectory(prefix="specsim-chromium-") as profile:
        drv = _driver(found[0], found[1], profile, width, 900)
        try:
            drv.set_page_load_timeout(timeout_s)
            drv.get_log("browser")  # drop what the start-up page logged
            drv.get(page.as_uri())
            deadline = time.monotonic() + timeout_s
            charts = drv.execute_script(CHART_STATE_JS)
            while any(not c["state"] for c in charts) and time.monotonic() < deadline:
                time.sleep(0.1)
                charts = drv.execute_script(CHART_STATE_JS)
            shot = None
            if screenshot is not None:
                shot = Path(screenshot).expanduser()
                shot.parent.mkdir(parents=True, exist_ok=True)
                height = int(drv.execute_script(
                    "return document.documentElement.scrollHeight"))
                drv.set_window_size(width, min(max(height, 600), max_height))
                time.sleep(0.3)  # let the resized layout settle before capturing
                if not drv.save_screenshot(str(shot)):
                    raise SpecsimError("Chromium could not write the screenshot",
                                       source=str(shot), field="--screenshot")
            errors = tuple(e["message"] for e in drv.get_log("browser")
                           if e.get("level") == "SEVERE")
            requests = tuple(_requested_urls(drv.get_log("performance"), page.as_uri()))
            title = drv.title
        finally:
            drv.quit()
    return BrowserCheck(charts=tuple(charts), console_errors=errors, requests=requests,
                        screenshot=shot, title=title)
