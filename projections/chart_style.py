"""Text sizes shared by every chart allot draws (report.html, gantt.png, the dashboard).

Charts are drawn at 100 dpi and shown about 1:1 in a 1400 px window (a little smaller
in a narrower one): 1 pt ≈ 1.39 px. `MIN_PT` keeps the smallest chart text, tick labels
and legend entries, as large as the page's own smallest text (12-14 px); with 7.5-9 pt
labels the charts were the hardest part of the page to read.
"""

from __future__ import annotations

import base64
import html
from typing import Any

MIN_PT = 10.0  # tick labels, legend entries, notes inside a panel
LABEL_PT = 11.0  # axis labels, legend titles, a small multiple's own title
TITLE_PT = 12.5  # a chart's title


def style_ticks(ax: Any) -> None:
    """Both axes' tick labels at the minimum size (not matplotlib's rc default)."""
    ax.tick_params(axis="both", which="both", labelsize=MIN_PT)


# A chart is never shown narrower than this share of its drawn width: its figure
# scrolls sideways instead. Shrunk into an 800 px window `MIN_PT` text was 7-8 px, too
# small to read; at 70 % it is about 10 px, and the report's 1300 px charts (the GPU
# timeline too) still fit a 1024 px window without scrolling.
MIN_SHOWN_SCALE = 0.7


def png_width(data_b64: str) -> int:
    """The pixel width of a base64 PNG (its IHDR, the first 24 bytes)."""
    head = base64.b64decode(data_b64[:32])
    return int.from_bytes(head[16:20], "big")


def chart_img(data_b64: str, alt: str) -> str:
    """An inline PNG chart that never shows smaller than `MIN_SHOWN_SCALE` of its size
    (its `<figure>` scrolls sideways instead; see the pages' CSS)."""
    min_width = round(png_width(data_b64) * MIN_SHOWN_SCALE)
    return (
        f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data_b64}" '
        f'style="min-width: {min_width}px">'
    )


def whole_number_ticks(axis: Any) -> None:
    """Ticks on whole numbers (GPUs, preemptions: '2.5 GPUs' reads as a bug) whenever
    the range holds at least two; a smaller range keeps fractional ticks."""
    from matplotlib.ticker import MaxNLocator

    # "auto": as many ticks as fit the axis' length (the default 10 crowded it)
    axis.set_major_locator(
        MaxNLocator(nbins="auto", steps=[1, 2, 2.5, 5, 10], integer=True, min_n_ticks=2)
    )
