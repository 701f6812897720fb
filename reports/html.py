"""One self-contained HTML page: Vega, Vega-Lite and Vega-Embed inlined, every string escaped.

Nothing on the page refers to the network: the JavaScript is bundled by vl-convert, chart
data is inlined in the specs, and the specs lose their ``$schema`` URL (vega-embed is told
the mode instead).  Text goes through ``html.escape``; JSON inside ``<script>`` has ``<``,
``>`` and ``&`` written as unicode escapes so that no label can close the script element.
"""
from __future__ import annotations

import functools
import html
import json
import math
from typing import Callable, Mapping, Sequence

import altair as alt
import numpy as np
import pandas as pd

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0;
       color: #1d1d1f; background: #fafafa; }
main { max-width: 1280px; margin: 0 auto; padding: 16px 28px 48px; }
h1 { font-size: 1.6em; margin: 0.4em 0 0.1em; }
h2 { font-size: 1.25em; margin: 1.6em 0 0.4em; border-bottom: 1px solid #ddd; }
p.note { color: #555; margin: 0.3em 0 0.8em; max-width: 70em; }
.charts { display: flex; flex-wrap: wrap; gap: 18px; }
.chart { background: #fff; border: 1px solid #e4e4e4; border-radius: 6px; padding: 8px;
         min-width: 200px; min-height: 120px; }
table { border-collapse: collapse; background: #fff; font-size: 0.9em; margin: 0.4em 0; }
th, td { border: 1px solid #ddd; padding: 4px 8px; text-align: right; white-space: nowrap; }
th { background: #f0f0f3; white-space: normal; max-width: 9em; vertical-align: bottom; }
.table-wrap { overflow-x: auto; max-width: 100%; }
td:first-child, th:first-child { text-align: left; }
pre { background: #fff; border: 1px solid #ddd; padding: 10px; overflow-x: auto;
      font-size: 0.85em; max-width: 100%; }
nav a { margin-right: 12px; font-size: 0.9em; }
"""

# Embeds each chart; a failure is logged to the console (the browser test reads it) and
# shown in the chart's box.
EMBED_JS = """
(function () {
  var specs = JSON.parse(document.getElementById("specsim-specs").textContent);
  var opts = {renderer: "svg", actions: false, mode: "vega-lite"};
  Object.keys(specs).forEach(function (id) {
    var el = document.getElementById(id);
    vegaEmbed(el, specs[id], opts).then(function () {
      el.setAttribute("data-rendered", "true");
    }).catch(function (err) {
      el.setAttribute("data-rendered", "error");
      el.textContent = "chart failed: " + err;
      console.error("specsim chart " + id + " failed: " + err);
    });
  });
})();
"""


REPORT_GENERATOR = "specsim"  # a report is replaced only if it carries this mark


@functools.lru_cache(maxsize=1)
def vega_bundle() -> str:
    """Vega, Vega-Lite (the version Altair writes) and Vega-Embed as one script (cached)."""
    import vl_convert
    major_minor = ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])
    version = major_minor if major_minor in vl_convert.get_vegalite_versions() else None
    return vl_convert.javascript_bundle(vl_version=version).replace("</script", "<\\/script")


def script_json(obj) -> str:
    """JSON safe to place inside a <script> element."""
    text = json.dumps(obj, allow_nan=False, separators=(",", ":"))
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def chart_spec(chart) -> dict:
    """The chart's Vega-Lite spec with its data inlined and no $schema URL."""
    spec = chart.to_dict()
    spec.pop("$schema", None)
    return spec


def esc(value) -> str:
    """Escape any value for HTML text or attributes."""
    return html.escape(str(value), quote=True)


def format_number(value, digits: int = 3) -> str:
    """Numbers to ``digits`` significant figures with thousands separators; NaN as a dash."""
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (int, np.integer)):
        return f"{int(value):,}"
    try:
        v = float(value)
    except (TypeError, ValueError):
        return str(value)
    if math.isnan(v):
        return "-"
    if math.isinf(v) or v == 0:
        return str(v) if v else "0"
    mag = int(math.floor(math.log10(abs(v))))
    if mag >= 7 or mag < -3:
        return f"{v:.{digits}g}"
    return f"{v:,.{max(0, digits - 1 - mag)}f}"


def format_percent(value) -> str:
    """A fraction as a percentage to one decimal; NaN as a dash."""
    v = float(value)
    return "-" if not np.isfinite(v) else f"{100 * v:.1f}%"


Column = tuple[str, Callable[[object], str]]


def table_html(df: pd.DataFrame, columns: Mapping[str, Column] | None = None,
               max_rows: int = 200) -> str:
    """An escaped HTML table; ``columns`` maps a column to (header, formatter)."""
    if columns is None:
        columns = {c: (str(c), format_number) for c in df.columns}
    cols = [c for c in columns if c in df.columns]
    head = "".join(f"<th>{esc(columns[c][0])}</th>" for c in cols)
    body = []
    for _, row in df.head(max_rows).iterrows():
        body.append("<tr>" + "".join(f"<td>{esc(columns[c][1](row[c]))}</td>" for c in cols)
                    + "</tr>")
    more = (f'<p class="note">first {max_rows} of {len(df)} rows shown</p>'
            if len(df) > max_rows else "")
    return (f'<div class="table-wrap"><table><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>{more}")


class Page:
    """Builds the report body section by section, then writes one HTML document."""

    def __init__(self, title: str) -> None:
        self.title = title
        self._parts: list[str] = []
        self._specs: dict[str, dict] = {}
        self._sections: list[tuple[str, str]] = []

    @property
    def chart_ids(self) -> list[str]:
        return list(self._specs)

    def section(self, title: str) -> None:
        anchor = f"s{len(self._sections) + 1}"
        self._sections.append((anchor, title))
        self._parts.append(f'<h2 id="{anchor}">{esc(title)}</h2>')

    def text(self, text: str) -> None:
        self._parts.append(f'<p class="note">{esc(text)}</p>')

    def table(self, df: pd.DataFrame, columns: Mapping[str, Column] | None = None,
              max_rows: int = 200) -> None:
        self._parts.append(table_html(df, columns, max_rows))

    def pre(self, text: str) -> None:
        self._parts.append(f"<pre>{esc(text)}</pre>")

    def charts(self, named: Sequence[tuple[str, object]]) -> None:
        """A row of charts: (name, altair chart) pairs; each gets its own container."""
        boxes = []
        for name, chart in named:
            cid = f"chart-{len(self._specs) + 1}"
            self._specs[cid] = chart_spec(chart)
            boxes.append(f'<div class="chart" id="{cid}" data-chart="{esc(name)}"></div>')
        if boxes:
            self._parts.append('<div class="charts">' + "".join(boxes) + "</div>")

    def to_html(self, subtitle: str = "") -> str:
        nav = " ".join(f'<a href="#{a}">{esc(t)}</a>' for a, t in self._sections)
        scripts = ""
        if self._specs:
            scripts = (f"<script>{vega_bundle()}</script>\n"
                       f'<script id="specsim-specs" type="application/json">'
                       f"{script_json(self._specs)}</script>\n<script>{EMBED_JS}</script>")
        return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                f"<meta name=\"generator\" content=\"{REPORT_GENERATOR}\">"
                "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
                f"<title>{esc(self.title)}</title><style>{CSS}</style></head>\n<body><main>"
                f"<h1>{esc(self.title)}</h1><p class=\"note\">{esc(subtitle)}</p>"
                f"<nav>{nav}</nav>\n{''.join(self._parts)}</main>\n{scripts}</body></html>\n")
