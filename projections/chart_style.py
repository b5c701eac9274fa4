"""Text sizes shared by every chart allot draws (report.html, gantt.png, the dashboard).

Charts are drawn at 100 dpi and shown about 1:1 in a 1400 px window (a little smaller
in a narrower one): 1 pt ≈ 1.39 px. `MIN_PT` keeps the smallest chart text, tick labels
and legend entries, as large as the page's own smallest text (12-14 px); with 7.5-9 pt
labels the charts were the hardest part of the page to read.
"""

from __future__ import annotations

from typing import Any

MIN_PT = 10.0  # tick labels, legend entries, notes inside a panel
LABEL_PT = 11.0  # axis labels, legend titles, a small multiple's own title
TITLE_PT = 12.5  # a chart's title


def style_ticks(ax: Any) -> None:
    """Both axes' tick labels at the minimum size (not matplotlib's rc default)."""
    ax.tick_params(axis="both", which="both", labelsize=MIN_PT)
