"""report.html as a person sees it in headless Chromium, in a wide and in narrow
windows: every chart shown at a size its text can be read at, the page itself never
scrolling sideways, and a chart that does not fit scrolling in its own frame."""

from __future__ import annotations

from pathlib import Path

import pytest

from projections.chart_style import MIN_SHOWN_SCALE
from tests.e2e.cli import TINY, allot
from tests.e2e.devtools import charts_as_shown

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report-layout")
    result = allot("simulate", str(TINY), "--out", str(out), "-q")
    assert result.returncode == 0, result.stderr
    return out / "fairshare" / "report.html"


def check_charts_readable(shown: dict, *, width: int) -> None:
    """Shared by the report and the dashboard: see the module docstring."""
    assert shown["charts"], "no chart on the page: this tests nothing"
    assert shown["page"] <= shown["viewport"], shown  # no sideways scroll of the page
    for chart in shown["charts"]:
        scale = chart["shown"] / chart["drawn"]
        # 10 pt text drawn at 100 dpi is about 10 px at 70 %, 7-8 px in an 800 px window
        assert scale >= MIN_SHOWN_SCALE - 0.005, (width, chart)
        if chart["overflows"] or chart["rightOfWindow"]:
            assert chart["scrolls"], (width, chart)
        if width >= 1400:  # a desktop window shows every chart whole, nearly 1:1
            assert not chart["overflows"] and scale >= 0.9, (width, chart)


@pytest.mark.parametrize("width", [1400, 1024, 800], ids=["desktop", "small-laptop", "narrow"])
def test_report_charts_stay_readable_at_any_window_width(report: Path, width: int) -> None:
    check_charts_readable(charts_as_shown(report.as_uri(), width=width), width=width)
