"""report.html as a person sees it in headless Chromium, in a wide and in narrow
windows: every chart shown at a size its text can be read at, the page itself never
scrolling sideways, and a chart that does not fit scrolling in its own frame."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.cli import TINY, allot
from tests.e2e.devtools import charts_as_shown, check_charts_readable

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report-layout")
    result = allot("simulate", str(TINY), "--out", str(out), "-q")
    assert result.returncode == 0, result.stderr
    return out / "fairshare" / "report.html"


@pytest.mark.parametrize("width", [1400, 1024, 800], ids=["desktop", "small-laptop", "narrow"])
def test_report_charts_stay_readable_at_any_window_width(report: Path, width: int) -> None:
    check_charts_readable(charts_as_shown(report.as_uri(), width=width), width=width)


def test_every_report_chart_fits_a_small_laptop_window_whole(report: Path) -> None:
    """The GPU timeline was drawn 1400 px wide: in a 1024 px window it scrolled
    sideways and its legend's end started off-screen. No chart scrolls there."""
    shown = charts_as_shown(report.as_uri(), width=1024)
    cut = [c for c in shown["charts"] if c["overflows"] or c["rightOfWindow"]]
    assert not cut, cut
    assert any(c["alt"] == "GPU timeline" for c in shown["charts"]), shown["charts"]
