"""The Pareto chart of ``specsim plan --pareto`` (reports/pareto_chart.py): frontier lines
over every point, four fixed series, a page written only over specsim's own."""
import pandas as pd
import pytest

from reports.pareto_chart import pareto_chart, pareto_page, render_pareto_report
from simulator.inputs.errors import SpecsimError
from simulator.planning.pareto import PER_GPU, PER_USER, with_frontier
from simulator.planning.pareto_search import SERIES


def _points() -> pd.DataFrame:
    # per series: (10, 100) and (20, 50) trade off; (15, 40) is below (20, 50)
    rows = []
    for s in SERIES[:3]:
        for i, (user, gpu) in enumerate(((10, 100), (20, 50), (15, 40))):
            rows.append({"series": s, "candidate": f"{s} {i}", "concurrency": 2 ** i,
                         PER_USER: user, PER_GPU: gpu, "p99_ttft_ms": 1.0,
                         "p99_tpot_ms": 1.0, "holds": True})
    return with_frontier(pd.DataFrame(rows))


def test_the_lines_join_only_frontier_points_over_every_point_drawn_faint():
    spec = pareto_chart(_points()).to_dict()
    faint, lines = spec["layer"]
    data = spec["datasets"]
    assert len(data[faint["data"]["name"]]) == 9
    drawn = data[lines["data"]["name"]]
    assert len(drawn) == 6 and {(r[PER_USER], r[PER_GPU]) for r in drawn} == {(10, 100),
                                                                             (20, 50)}
    assert faint["mark"]["opacity"] < 1
    # the four series keep their colours whether or not a run has all of them
    assert lines["encoding"]["color"]["scale"]["domain"] == list(SERIES)


def test_the_page_and_its_file(tmp_path):
    html = pareto_page(_points(), "plan --target x")
    assert 'name="generator"' in html and "Frontier points" in html
    out = render_pareto_report(_points(), tmp_path / "p.html", title="t")
    assert out.read_text() == pareto_page(_points(), "t")
    render_pareto_report(_points(), tmp_path / "p.html", title="t")  # its own: replaced
    mine = tmp_path / "mine.html"
    mine.write_text("<html>mine</html>")
    with pytest.raises(SpecsimError) as err:
        render_pareto_report(_points(), mine, title="t")
    assert err.value.field == "--report" and mine.read_text() == "<html>mine</html>"
