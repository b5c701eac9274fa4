"""`report.html`: one self-contained page per run (no scripts, fonts or images from the
network — charts are inline base64 PNGs rendered with matplotlib's Agg backend).

Sections: headline numbers; cluster usage over time; per-allocation usage vs owed
(small multiples, one per leaf); queue-wait CDFs by tag; preemptions over time by
reason; the GPU timeline (gantt); tables of the summary. The summary dict itself is
embedded as JSON (`<script type="application/json" id="summary">`).
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from projections.chart_style import (
    LABEL_PT,
    MIN_PT,
    TITLE_PT,
    chart_img,
    style_ticks,
    whole_number_ticks,
)
from projections.gantt import DAY, GanttCollector, line_shade, palette, time_unit
from projections.summary import SummaryProjection, fold, how_it_ended
from projections.usage import HOUR

_CONTENDED_ALPHA = 0.12  # the cluster chart's grey band where work waited
_UNALLOC_LINE = "#3d3d3d"  # the per-allocation "unallocated" line: no allocation's hue
_CLIPPED = "#b00020"  # a panel's clipped peaks: their ▲ marks and the note naming them
_CLIPPED_MARK_PT = 6.0
# matplotlib's 6 pt above a panel, plus the half of a ▲ mark that stands above its top
_TITLE_PAD_PT = 6.0 + _CLIPPED_MARK_PT / 2 + 1

_REASON_COLORS = {
    "fair_share": "#1f77b4",
    "unallocated": "#ff7f0e",
    "drain": "#d62728",
    "priority": "#9467bd",
    "headroom": "#2ca02c",
    "requested": "#8c564b",
    "gpus_removed": "#7f7f7f",
}


# ------------------------------------------------------------------ formatting
def fmt_pct(x: float | None, digits: int = 1) -> str:
    return "—" if x is None else f"{100 * x:.{digits}f}%"


def fmt_dur(s: float | None) -> str:
    if s is None:
        return "—"
    if s < 60:
        return f"{s:.0f} s" if s >= 10 or s == int(s) else f"{s:.1f} s"
    if s < 3600:
        return f"{s / 60:.1f} min"
    if s < 2 * DAY:
        return f"{s / 3600:.1f} h"
    return f"{s / DAY:.1f} d"


def fmt_num(x: float | int | None, digits: int = 0) -> str:
    if x is None:
        return "—"
    return f"{x:,.{digits}f}"


def _fmt_value(v: Any) -> str:
    if isinstance(v, bool) or v is None or not isinstance(v, int | float):
        return "—" if v is None else str(v)
    return fmt_num(v) if isinstance(v, int) or float(v).is_integer() else fmt_num(v, 2)


# how the report names summary.json's keys (the keys themselves stay as they are)
_LABELS = {
    "wall_s": "wall time (s)",
    "workloads_per_s": "workloads per second",
    "peak_rss_mb": "peak memory (MB)",
    "preempted": "preempted (at least once)",
    "preempted_terminal": "preempted and not requeued",
    "unfinished": "unfinished at the end",
    "unfinished_pending": "unfinished: pending",
    "unfinished_running": "unfinished: running",
}


def _label(key: str) -> str:
    """A summary key or preemption reason in words: `peak_rss_mb` → `peak memory (MB)`,
    `fair_share` → `fair share`."""
    return _LABELS.get(key) or key.replace("_", " ")


def _when(t: float | None) -> str:
    if t is None:
        return "?"
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _png(fig: Any) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _img(data: str, alt: str) -> str:
    return chart_img(data, alt)


def _style_axes(ax: Any) -> None:
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.grid(color="#e6e6e6", lw=0.6)
    ax.set_axisbelow(True)
    style_ticks(ax)


# ---------------------------------------------------------------------- charts
# chart bin widths (seconds, label), finest first; `_Timebase` takes the finest one that
# keeps a chart at most `_MAX_BINS` bins wide
_BIN_CHOICES = (
    (10.0, "10 s"),
    (30.0, "30 s"),
    (60.0, "1 min"),
    (300.0, "5 min"),
    (900.0, "15 min"),
    (HOUR, "1 h"),
    (6 * HOUR, "6 h"),
    (DAY, "1 d"),
    (7 * DAY, "7 d"),
)
_MAX_BINS = 200


def chart_bin(t0: float, t1: float, *, min_width: float = 0.0) -> float:
    """The bin width (seconds) of time-series charts over [t0, t1]: the finest of
    `_BIN_CHOICES` (at least `min_width`) that needs at most `_MAX_BINS` bins."""
    span = max(1.0, t1 - t0)
    for width, _ in _BIN_CHOICES:
        if width >= min_width and math.ceil(span / width) + 1 <= _MAX_BINS:
            return width
    return _BIN_CHOICES[-1][0]


def source_bin(t0: float | None, t1: float | None) -> float:
    """The row width to fold a journal with so that its charts can use `chart_bin`:
    the chart's bin when finer than an hour (bins of an hour or more add whole hours)."""
    if t0 is None or t1 is None:
        return HOUR
    return min(HOUR, chart_bin(t0, t1))


class _Timebase:
    """Bins for time series over the run [t0, t1]: bins aligned to multiples of their
    width, the first and last clipped to the run, so the axis starts at 0 and a partial
    bin's mean is over the time it covers. The width comes from the span (`chart_bin`),
    never finer than the rows' own bins (`min_width`)."""

    def __init__(self, t0: float, t1: float, *, min_width: float = 0.0) -> None:
        t1 = max(t1, t0 + 1.0)
        self.t0, self.t1 = t0, t1
        self.width = chart_bin(t0, t1, min_width=min_width)
        self.bin_label = next(
            (label for w, label in _BIN_CHOICES if w == self.width), f"{self.width:g} s"
        )
        self.origin = math.floor(t0 / self.width) * self.width
        self.n = max(1, math.ceil((t1 - self.origin) / self.width))
        self.unit, self.unit_name = time_unit(t1 - t0)

    def index(self, t: float) -> int:
        return min(self.n - 1, max(0, int((t - self.origin) // self.width)))

    def edges_s(self) -> np.ndarray:
        """Bin edges in seconds since the epoch, clipped to [t0, t1]."""
        edges = self.origin + np.arange(self.n + 1) * self.width
        return np.clip(edges, self.t0, self.t1)

    def covered(self) -> np.ndarray:
        """Seconds of the run each bin covers (the divisor of a bin's mean)."""
        return np.maximum(np.diff(self.edges_s()), 1e-9)

    def xedges(self) -> np.ndarray:
        """Bin edges in units since the run start (the first is 0)."""
        return (self.edges_s() - self.t0) / self.unit

    def x(self) -> np.ndarray:
        """Bin starts in units since the run start."""
        return self.xedges()[:-1]

    @property
    def label(self) -> str:
        return f"{self.unit_name} since start of run"


def _cluster_chart(proj: SummaryProjection, tb: _Timebase) -> str:
    return _png(cluster_figure(proj, tb))


def cluster_figure(proj: SummaryProjection, tb: _Timebase) -> Any:
    """The cluster usage chart (a matplotlib Figure; the caller closes it)."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    healthy = np.zeros(tb.n)
    charged = np.zeros(tb.n)
    unalloc = np.zeros(tb.n)
    contended = np.zeros(tb.n)
    for r in proj.cluster_hourly_rows():
        i = tb.index(r["hour"])
        healthy[i] += r["healthy_gpu_s"]
        charged[i] += r["charged_gpu_s"]
        unalloc[i] += r["unallocated_gpu_s"]
        contended[i] += r["contended_s"]
    fig, ax = plt.subplots(figsize=(13, 3.4))
    edges = tb.xedges()
    x = np.repeat(edges, 2)[1:-1]

    covered = tb.covered()

    def steps(v: np.ndarray) -> np.ndarray:
        return np.repeat(v / covered, 2)

    ax.fill_between(x, 0, steps(charged), color="#4c78a8", lw=0, label="allocated (charged)")
    ax.fill_between(
        x,
        steps(charged),
        steps(charged + unalloc),
        color="#f58518",
        alpha=0.75,
        lw=0,
        label="unallocated",
    )
    ax.plot(x, steps(healthy), color="#222222", lw=1.2, label="healthy capacity")
    top = max(1.0, float((healthy / covered).max()) * 1.08)
    frac = contended / covered
    ax.fill_between(
        x,
        0,
        top,
        where=np.repeat(frac, 2) > 0.5,
        color="#888888",
        alpha=_CONTENDED_ALPHA,
        lw=0,
        label="work waiting (contended)",
    )
    ax.set_ylim(0, top)
    whole_number_ticks(ax.yaxis)
    ax.set_xlim(edges[0], edges[-1])
    ax.set_ylabel(f"GPUs (mean per {tb.bin_label})", fontsize=LABEL_PT)
    ax.set_xlabel(tb.label, fontsize=LABEL_PT)
    ax.set_title("Cluster usage", loc="left", fontsize=TITLE_PT)
    handles, labels = ax.get_legend_handles_labels()
    # the band is faint so the bars read through it; its key alone on white was
    # invisible, so it gets an edge
    handles[labels.index("work waiting (contended)")] = Patch(
        facecolor="#888888", alpha=_CONTENDED_ALPHA * 2, edgecolor="#777777"
    )
    ax.legend(
        handles,
        labels,
        loc="upper left",
        bbox_to_anchor=(1.005, 1),
        frameon=False,
        fontsize=MIN_PT,
    )
    _style_axes(ax)
    fig.tight_layout()
    return fig


def _allocation_chart(
    proj: SummaryProjection, tb: _Timebase, rows: list[dict[str, Any]], delivered: dict
) -> str | None:
    fig = allocation_figure(tb, rows, delivered)
    return None if fig is None else _png(fig)


_TOP_KEYS = ("received", "owed", "entitled", "unalloc")


def _robust_top(series: dict[str, np.ndarray], live: np.ndarray) -> tuple[float, np.ndarray | None]:
    """The y limit of one usage-vs-owed panel from its per-bin means, and the bins whose
    value lies above it (None when nothing is clipped). The limit is 1.3 × the peak,
    unless a few bins spike far above the rest: then it is 1.3 × the larger of the
    series' 90th percentile and 1.5 × owed's, and the bins above it are returned so the
    chart can mark them rather than hide them silently."""
    vals = {k: np.nan_to_num(v[live]) for k, v in series.items() if v[live].size}
    if not vals:
        return 0.0, None
    peak = max(float(v.max()) for v in vals.values())
    steady = max(float(np.percentile(v, 90, method="lower")) for v in vals.values())
    if "owed" in vals:
        steady = max(steady, 1.5 * float(np.percentile(vals["owed"], 90, method="lower")))
    limit = steady * 1.3
    if peak <= 0 or limit <= 0 or peak <= 1.2 * limit:
        return peak * 1.3, None
    over = np.zeros(live.shape, dtype=bool)
    for v in series.values():
        over |= np.nan_to_num(v) > limit
    return limit, over & live


def allocation_figure(tb: _Timebase, rows: list[dict[str, Any]], delivered: dict) -> Any:
    """Usage vs owed small multiples, one panel per leaf in `rows` (a matplotlib Figure
    the caller closes, or None without rows)."""
    import matplotlib.pyplot as plt

    series: dict[str, dict[str, np.ndarray]] = {}
    for r in rows:
        s = series.get(r["allocation"])
        if s is None:
            s = series[r["allocation"]] = {
                k: np.zeros(tb.n) for k in ("received", "owed", "demand", "entitled", "unalloc")
            }
        i = tb.index(r["hour"])
        s["received"][i] += r["received_gpu_s"]
        s["owed"][i] += r["owed_gpu_s"]
        s["demand"][i] += r["demand_gpu_s"]
        s["entitled"][i] += r["entitled_gpu_s"]
        s["unalloc"][i] += r["unallocated_gpu_s"]
    if not series:
        return None
    leaves = sorted(series)
    _, rgb = palette(leaves)
    n = len(leaves)
    ncols = min(3, n)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(13, 0.6 + 2.3 * nrows), sharex=True, squeeze=False
    )
    edges = tb.xedges()
    x = np.repeat(edges, 2)[1:-1]
    by_alloc = delivered.get("by_allocation") or {}
    covered = tb.covered()
    for k, leaf in enumerate(leaves):
        ax = axes[k // ncols][k % ncols]
        s = {key: np.repeat(v / covered, 2) for key, v in series[leaf].items()}
        color = rgb[k]
        ax.fill_between(x, 0, s["received"], color=color, alpha=0.35, lw=0)
        ax.plot(x, s["received"], color=line_shade(color), lw=1.3, label="received (charged)")
        ax.plot(x, s["owed"], color="#111111", lw=1.1, label="owed")
        ax.plot(x, s["entitled"], color="#555555", lw=0.8, ls=":", label="share × capacity")
        ax.plot(x, s["demand"], color="#888888", lw=0.9, ls="--", label="demand (clipped)")
        if s["unalloc"].any():
            # neutral: an allocation's own hue may be this orange (or any other colour)
            ax.plot(x, s["unalloc"], color=_UNALLOC_LINE, lw=1.0, ls="-.", label="unallocated")
        # demand is often many times the share: keep the interesting part readable; a
        # short spike does not set the axis either (it is clipped, marked and named)
        note = ""
        top, clipped = _robust_top(
            {key: series[leaf][key] / covered for key in _TOP_KEYS}, covered > 0
        )
        if top > 0:
            ax.set_ylim(0, top)
        if clipped is not None:
            peak = max(float(s[key].max()) for key in _TOP_KEYS)
            # a second title line: inside the panel it hid the ▲ marks it explains, and
            # beside the title it leaves no room for a long name
            note = f"\npeak {fmt_num(peak)} clipped ▲"
            ax.plot(
                ((tb.xedges()[:-1] + tb.xedges()[1:]) / 2)[clipped],
                np.full(int(clipped.sum()), top),
                ls="none",
                marker="^",
                ms=_CLIPPED_MARK_PT,
                color=_CLIPPED,
                clip_on=False,
                label="_clipped",
                zorder=5,
            )
        ratio = by_alloc.get(leaf)
        ax.set_title(
            f"{leaf}  —  delivered {fmt_pct(ratio)}{note}",
            fontsize=LABEL_PT,
            loc="left",
            pad=_TITLE_PAD_PT,
            color="#b00020" if ratio is not None and ratio < 0.9 else "#222222",
        )
        ax.set_xlim(edges[0], edges[-1])
        if top <= 0:
            ax.set_ylim(bottom=0)
        whole_number_ticks(ax.yaxis)
        _style_axes(ax)
    for k in range(n, nrows * ncols):
        axes[k // ncols][k % ncols].set_visible(False)
    # the lowest visible panel of each column carries the x tick labels and the x label
    # (sharex hides them on every row but the last, whose cells may be empty)
    for col in range(ncols):
        rows_in_col = [r for r in range(nrows) if r * ncols + col < n]
        last = axes[rows_in_col[-1]][col]
        last.xaxis.set_tick_params(which="both", labelbottom=True)
        last.set_xlabel(tb.label, fontsize=LABEL_PT)
    for row in axes:
        row[0].set_ylabel("GPUs", fontsize=LABEL_PT)
    from matplotlib.patches import Patch

    handles, labels = [], []
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in labels:
                if lab == "received (charged)":  # each panel's own colour: a neutral swatch
                    h = Patch(facecolor="#9a9a9a", alpha=0.6, edgecolor="#555555", lw=1.0)
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="upper right", ncol=len(labels), frameon=False, fontsize=MIN_PT)
    fig.suptitle(
        f"Usage vs owed per allocation (mean GPUs per {tb.bin_label})",
        x=0.01,
        ha="left",
        fontsize=TITLE_PT,
    )
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.1 / (0.6 + 2.3 * nrows)))
    return fig


_DUR_TICKS = [
    (0, "0"),
    (1, "1s"),
    (10, "10s"),
    (60, "1m"),
    (600, "10m"),
    (3600, "1h"),
    (6 * 3600, "6h"),
    (DAY, "1d"),
    (7 * DAY, "7d"),
    (30 * DAY, "30d"),
]


def _ecdf(values: Any, limit: int = 2000, never: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The empirical CDF of `values`, of `never` more that never ended (never started):
    it tops out at the fraction that did, not at 1."""
    v = np.sort(np.asarray(values, dtype=float))
    y = np.arange(1, v.size + 1) / (v.size + never)
    if v.size > limit:
        idx = np.unique(np.linspace(0, v.size - 1, limit).astype(int))
        v, y = v[idx], y[idx]
    return np.concatenate([[v[0]], v]), np.concatenate([[0.0], y])


_WAIT_KEY_COLUMNS = 2


def _wait_chart(proj: SummaryProjection) -> str:
    return _png(wait_figure(proj))


def wait_figure(proj: SummaryProjection) -> Any:
    """Wait CDFs by tag, first placement and after a requeue: each panel's key sits
    under its x label, not over the curves (in the corner it hid the sweep and train
    curves, which rise through it, and the 60 s line struck through its labels)."""
    import matplotlib.pyplot as plt

    never, again = proj._unplaced()
    # one colour per tag in both panels: the nine biggest of either
    biggest = sorted(
        {*proj.waits.by_tag, *proj.requeue_waits.by_tag},
        key=lambda t: (
            -len(proj.waits.by_tag.get(t, ())),
            -len(proj.requeue_waits.by_tag.get(t, ())),
            t,
        ),
    )[:9]
    colour = {t: plt.get_cmap("tab10")((k + 1) % 10) for k, t in enumerate(sorted(biggest))}
    # keys in two columns ("train (n=1,109 of 1,754)" at 10 pt: three columns ran into
    # the other panel's key); the figure grows by their rows
    key_rows = math.ceil((1 + len(biggest)) / _WAIT_KEY_COLUMNS)
    fig, axes = plt.subplots(1, 2, figsize=(13, 3.9 + 0.24 * key_rows), sharey=True)
    panels = (
        (axes[0], proj.waits, "Queue wait: submit → first placement", never),
        (axes[1], proj.requeue_waits, "Requeue wait: preemption → next placement", again),
    )
    xmax = 60.0
    for ax, waits, title, left in panels:
        groups: list[tuple[str, Any, int]] = []
        if len(waits.all):
            groups.append(("all", waits.all, left.count))
        groups.extend(
            (t, waits.by_tag[t], left.by_tag.get(t, 0)) for t in sorted(colour) if t in waits.by_tag
        )
        for name, vals, unended in groups:
            x, y = _ecdf(vals, never=unended)
            xmax = max(xmax, float(x[-1]))
            started = f"{len(vals):,} of {len(vals) + unended:,}" if unended else f"{len(vals):,}"
            ax.step(
                x,
                y,
                where="post",
                lw=2.0 if name == "all" else 1.3,
                color="#222222" if name == "all" else colour[name],
                label=f"{name} (n={started})",
            )
        if not groups:
            ax.text(
                0.5, 0.5, "none", ha="center", va="center", transform=ax.transAxes, color="#888888"
            )
        ax.set_title(title, loc="left", fontsize=TITLE_PT)
        ax.set_xscale("symlog", linthresh=1.0)
        ax.axvline(60, color="#b00020", lw=0.8, ls=":")
        if groups:
            ax.legend(
                loc="upper center",
                bbox_to_anchor=(0.5, -0.2),
                ncol=min(_WAIT_KEY_COLUMNS, len(groups)),
                fontsize=MIN_PT,
                frameon=False,
            )
        _style_axes(ax)
    for ax in axes:
        ticks = [(v, lab) for v, lab in _DUR_TICKS if v <= xmax * 1.5]
        ax.set_xticks([v for v, _ in ticks])
        ax.set_xticklabels([lab for _, lab in ticks])
        ax.set_xlim(0, xmax * 1.5)
        ax.set_xlabel("wait (log scale; dotted line = 60 s)", fontsize=LABEL_PT)
    axes[0].set_ylabel("fraction of workloads\n(short of 1: never started)", fontsize=LABEL_PT)
    axes[0].set_ylim(0, 1.02)
    fig.tight_layout()
    return fig


def _preemption_chart(proj: SummaryProjection, tb: _Timebase) -> str | None:
    fig = preemption_figure(proj, tb)
    return None if fig is None else _png(fig)


def preemption_figure(proj: SummaryProjection, tb: _Timebase) -> Any:
    """Preemptions per bin stacked by reason (a Figure the caller closes; None if none)."""
    import matplotlib.pyplot as plt

    if not proj.preemptions_hourly:
        return None
    reasons = sorted({r for _, r in proj.preemptions_hourly})
    counts = {r: np.zeros(tb.n) for r in reasons}
    for (hour, reason), c in proj.preemptions_hourly.items():
        counts[reason][tb.index(hour)] += c
    fig, ax = plt.subplots(figsize=(13, 3.0))
    x = tb.x()
    width = np.diff(tb.xedges())
    bottom = np.zeros(tb.n)
    for k, r in enumerate(reasons):
        ax.bar(
            x,
            counts[r],
            width=width,
            bottom=bottom,
            align="edge",
            color=_REASON_COLORS.get(r, plt.get_cmap("tab10")(k % 10)),
            label=f"{_label(r)} ({int(counts[r].sum()):,})",
            lw=0,
        )
        bottom += counts[r]
    ax.set_xlim(tb.xedges()[0], tb.xedges()[-1])
    ax.set_ylabel(f"preemptions per {tb.bin_label}", fontsize=LABEL_PT)
    whole_number_ticks(ax.yaxis)
    ax.set_xlabel(tb.label, fontsize=LABEL_PT)
    ax.set_title("Preemptions over time by reason", loc="left", fontsize=TITLE_PT)
    ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1), frameon=False, fontsize=MIN_PT)
    _style_axes(ax)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------- tables
def _table(head: list[str], rows: list[list[str]], numeric_from: int = 1) -> str:
    th = "".join(
        f'<th class="{"num" if i >= numeric_from else ""}">{html.escape(h)}</th>'
        for i, h in enumerate(head)
    )
    body = []
    for row in rows:
        cells = []
        for i, c in enumerate(row):
            cls = "num" if i >= numeric_from else ""
            cells.append(f'<td class="{cls}">{c}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{th}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _wait_rows(block: dict[str, Any]) -> list[list[str]]:
    out = []
    groups = [("all", block.get("all") or {})]
    groups += sorted((block.get("by_tag") or {}).items())
    for name, st in groups:
        out.append(
            [
                f"<b>{html.escape(name)}</b>" if name == "all" else html.escape(name),
                fmt_num(st.get("count")),
                fmt_dur(st.get("p50")),
                fmt_dur(st.get("p90")),
                fmt_dur(st.get("p99")),
                fmt_dur(st.get("mean")),
                fmt_num(st.get("unplaced", 0)),
            ]
        )
    return out


def _delivered_rows(summary: dict[str, Any], proj: SummaryProjection) -> list[list[str]]:
    d = summary.get("delivered") or {}
    owed = d.get("owed_gpu_h") or {}
    received = d.get("received_gpu_h") or {}
    by = d.get("by_allocation") or {}
    unalloc: dict[str, float] = {}
    for r in proj.hourly_rows():
        unalloc[r["allocation"]] = unalloc.get(r["allocation"], 0.0) + r["unallocated_gpu_s"]
    leaves = sorted(set(owed) | set(by) | set(received) | set(proj.tree.leaves()))
    rows = []
    for leaf in leaves:
        ratio = by.get(leaf)
        cls = (
            "bad"
            if ratio is not None and ratio < 0.9
            else ("warn" if ratio is not None and ratio < 0.95 else "")
        )
        rows.append(
            [
                html.escape(leaf),
                _share_cell(proj, leaf),
                fmt_num(owed.get(leaf), 1),
                fmt_num(received.get(leaf), 1),
                fmt_num(unalloc.get(leaf, 0.0) / HOUR, 1),
                f'<span class="{cls}">{fmt_pct(ratio)}</span>',
            ]
        )
    return rows


def _unrunnable_note(summary: dict[str, Any]) -> str:
    """Which leaves' waiting work no policy could place, left out of owed (or nothing)."""
    unrunnable = (summary.get("delivered") or {}).get("unrunnable_gpu_h") or {}
    if not unrunnable:
        return ""
    each = ", ".join(f"{leaf} {fmt_num(gpu_h, 1)} GPU-h" for leaf, gpu_h in unrunnable.items())
    return (
        '<p class="sub">Not owed, so not in the table: waiting work the healthy hosts '
        "could not hold even empty (hosts removed, shrunk or unhealthy since it was "
        f"accepted) requested {html.escape(each)}.</p>"
    )


_CSS = """
:root { --fg:#1d1d1f; --muted:#6b6b70; --line:#e3e3e8; --accent:#4c78a8; }
* { box-sizing: border-box; }
body { font: 14px/1.45 -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       color: var(--fg); margin: 0; background: #fafafa; }
main { max-width: 1360px; margin: 0 auto; padding: 24px 28px 48px; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 32px 0 10px; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
.sub { color: var(--muted); margin: 0 0 18px; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(128px, 1fr)); gap: 10px; }
.card { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 10px 12px; }
.card .v { font-size: 22px; font-weight: 600; }
.card .k { color: var(--muted); font-size: 12px; }
figure { margin: 8px 0 0; background: #fff; border: 1px solid var(--line); border-radius: 8px;
         padding: 8px; overflow-x: auto; }
figure img { width: 100%; height: auto; display: block; }
figcaption { color: var(--muted); font-size: 12.5px; padding: 6px 4px 0; }
table { border-collapse: collapse; background: #fff; border: 1px solid var(--line);
        margin: 6px 0; min-width: 420px; }
th, td { padding: 5px 12px; border-bottom: 1px solid var(--line); text-align: left; }
th { background: #f2f2f5; font-weight: 600; font-size: 13px; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.grid2 { display: grid; grid-template-columns: repeat(auto-fit, minmax(420px, 1fr)); gap: 18px; }
.bad { color: #b00020; font-weight: 600; } .warn { color: #a15c00; font-weight: 600; }
footer { color: var(--muted); font-size: 12px; margin-top: 36px; }
"""


def _share_cell(proj: SummaryProjection, leaf: str) -> str:
    """The leaf's share at the end of the run and, when a budget change moved it during
    the run, each earlier value with when it changed: owed was computed hour by hour
    from the share in force then, so the final share alone does not explain it."""
    final = fmt_pct(proj.tree.share(leaf), 2) if leaf in proj.tree else "—"
    steps = proj.share_steps(leaf)
    if len(steps) < 2:
        return final
    history = ", ".join(
        f"{fmt_pct(share, 2)} from {_when(t)}" if i else f"{fmt_pct(share, 2)} at first"
        for i, (t, share) in enumerate(steps)
    )
    return f"{final} now<br><small>({html.escape(history)})</small>"


def _lost_attempts(lost: Any) -> str:
    """ "3 (2)": attempts reported lost, and of them those requeued; "—" for runs
    summarized before the count existed."""
    if not isinstance(lost, dict):
        return "—"
    return f"{fmt_num(lost.get('all'))} ({fmt_num(lost.get('requeued'))})"


def _contended_idle_rows(idle: dict[str, Any] | None) -> list[list[str]]:
    """Idle GPU-hours while allocated work waited, and what the smallest waiting
    workload needed then (small work waiting beside idle GPUs is a scheduling loss;
    only whole-host work waiting is fragmentation it waits out)."""
    if not idle:
        return []
    shares = " · ".join(
        f"{gpus} GPU{'s' if gpus != '1' else ''} {fmt_pct(share)}"
        for gpus, share in idle.get("by_smallest_waiting_gpus", {}).items()
    )
    rows = [["idle while work waited (GPU-h)", fmt_num(idle.get("gpu_hours"), 1)]]
    if idle.get("headroom_gpu_hours"):  # kept for short jobs: the price of their not waiting
        rows.append(
            ["… of it on hosts kept for short jobs", fmt_num(idle["headroom_gpu_hours"], 1)]
        )
    if shares:
        rows.append(["… by the smallest waiting workload's GPUs", html.escape(shares)])
    return rows


def _wait_cards(waits: dict[str, Any], submitted: Any) -> list[tuple[str, str]]:
    """The median and p90 wait and the workloads submitted, saying how many never
    started when some did not: the percentiles are of started work only, so "p90 wait
    0 s" stood alone when half the work never ran."""
    never = waits.get("unplaced") or 0
    if not never:
        return [
            ("median wait", fmt_dur(waits.get("p50"))),
            ("p90 wait", fmt_dur(waits.get("p90"))),
            ("workloads submitted", fmt_num(submitted)),
        ]
    return [
        ("median wait (of work that started)", fmt_dur(waits.get("p50"))),
        ("p90 wait (of work that started)", fmt_dur(waits.get("p90"))),
        (f"of {fmt_num(submitted)} submitted never started", fmt_num(never)),
    ]


def _cards(summary: dict[str, Any]) -> str:
    d = summary.get("delivered") or {}
    wl = summary.get("workloads") or {}
    waits = (summary.get("wait_s") or {}).get("all") or {}
    items = [
        ("delivered (overall)", fmt_pct(d.get("overall"))),
        ("delivered (worst allocation)", fmt_pct(d.get("min"))),
        ("occupancy", fmt_pct(summary.get("occupancy"))),
        ("contended occupancy", fmt_pct(summary.get("occupancy_contended"))),
        ("unallocated share of busy", fmt_pct(summary.get("unallocated_fraction"))),
        *_wait_cards(waits, wl.get("submitted")),
        ("preemptions", fmt_num(summary.get("preemptions"))),
    ]
    return (
        '<div class="cards">'
        + "".join(
            f'<div class="card"><div class="v">{v}</div><div class="k">{html.escape(k)}</div></div>'
            for k, v in items
        )
        + "</div>"
    )


def _figure(data: str | None, alt: str, caption: str, *, empty: str | None = None) -> str:
    if data is None:
        return f'<p class="sub">{html.escape(empty or "Nothing to show.")}</p>'
    return f"<figure>{_img(data, alt)}<figcaption>{html.escape(caption)}</figcaption></figure>"


def render_html(
    summary: dict[str, Any],
    proj: SummaryProjection,
    gantt: GanttCollector,
    *,
    gantt_window: tuple[float, float] | None = None,
    source: str | None = None,
    gantt_png: tuple[bytes, tuple[float, float]] | None = None,
) -> str:
    """The page; `gantt_png` is the timeline already drawn (PNG bytes and its window),
    else it is drawn here."""
    import matplotlib

    matplotlib.use("Agg")

    policy = str(summary.get("policy", "?"))
    period = summary.get("period") or {}
    p_start, p_end = proj.period()
    t0 = period.get("start", p_start) or p_start or 0.0
    t1 = period.get("end", p_end) or p_end or t0
    tb = _Timebase(t0, max(t1, t0 + 1), min_width=proj.bin_s)
    rows = proj.hourly_rows()
    delivered = summary.get("delivered") or proj.delivered(rows)

    charts = {
        "cluster": _cluster_chart(proj, tb),
        "alloc": _allocation_chart(proj, tb, rows, delivered),
        "waits": _wait_chart(proj),
        "preempt": _preemption_chart(proj, tb),
    }
    gantt_b64 = None
    window = None
    if gantt_png is None and gantt.n_rows:
        gantt_png = draw_gantt(gantt, policy, gantt_window)
    if gantt_png is not None:
        gantt_b64 = base64.b64encode(gantt_png[0]).decode("ascii")
        window = gantt_png[1]

    wl = summary.get("workloads") or {}
    workload_rows = [[html.escape(_label(k)), fmt_num(v)] for k, v in wl.items()]
    headline = [
        ["occupancy (busy / healthy GPU-s)", fmt_pct(summary.get("occupancy"), 2)],
        ["contended occupancy", fmt_pct(summary.get("occupancy_contended"), 2)],
        *_contended_idle_rows(summary.get("contended_idle")),
        ["allocated fraction of busy", fmt_pct(summary.get("allocated_fraction"), 2)],
        ["unallocated fraction of busy", fmt_pct(summary.get("unallocated_fraction"), 2)],
        ["delivered overall", fmt_pct(delivered.get("overall"), 2)],
        ["delivered, worst allocation", fmt_pct(delivered.get("min"), 2)],
        ["delivered, strict hourly form", fmt_pct(delivered.get("hourly_strict"), 2)],
        ["preemptions", fmt_num(summary.get("preemptions"))],
        [
            "attempts lost with their node (requeued)",
            _lost_attempts(summary.get("lost_attempts")),
        ],
    ]
    for k, v in (summary.get("gpu_hours") or {}).items():
        headline.append(
            [
                f"{k.replace('_', ' ')} (GPU-h)"
                if k != "contended_hours"
                else "time with work waiting (h)",
                fmt_num(v, 1),
            ]
        )
    by_reason = summary.get("preemptions_by_reason") or {}
    engine = summary.get("engine") or {}
    engine_rows = [
        [html.escape(_label(str(k))), html.escape(_fmt_value(v))] for k, v in engine.items()
    ]
    title = f"allot report — {policy}"
    span = f"{_when(t0)} → {_when(t1)} ({(t1 - t0) / HOUR:,.1f} h"
    ended = how_it_ended(summary)
    span += f", {ended})" if ended else ")"
    gantt_caption = "Rows are GPUs (hosts in registration order), bars are workload runs: hue per "
    gantt_caption += "branch of the budget tree (its first level with several allocations), "
    gantt_caption += "shade per leaf; hatched = preemptible (unallocated or "
    gantt_caption += "past protection); red outline and tick at its end = ended by preemption."
    if window is not None:
        gantt_caption += f" Window: {_when(window[0])} → {_when(window[1])}."

    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body><main>",
        f"<h1>{html.escape(title)}</h1>",
        f'<p class="sub">{html.escape(span)}'
        + (f" · journal {html.escape(source)}" if source else "")
        + "</p>",
        _cards(summary),
        "<h2>Cluster</h2>",
        _figure(
            charts["cluster"],
            "cluster usage",
            "Busy GPUs (allocated vs unallocated) "
            "against healthy capacity; grey background where work with a minimum "
            "runtime was waiting.",
        ),
        "<h2>Usage vs owed per allocation</h2>",
        _figure(
            charts["alloc"],
            "usage vs owed",
            "owed = min(share × healthy capacity, "
            "demand) per hour, with the share in force that hour; received = charged GPU "
            "time; delivered = min(1, Σ received / Σ owed) over the run. The table's share "
            "is the one at the end of the run, followed by its earlier values when a "
            "budget change moved it. A panel whose few bins spike far above the rest tops "
            "out below them: those bins are marked ▲ and the panel names the peak.",
        ),
        _table(
            [
                "allocation",
                "share (at the end)",
                "owed GPU-h",
                "received GPU-h",
                "unallocated GPU-h",
                "delivered",
            ],
            _delivered_rows(summary, proj),
        ),
        _unrunnable_note(summary),
        "<h2>Queue waits</h2>",
        _figure(
            charts["waits"],
            "wait CDFs",
            "Cumulative distribution of waits by tag, over every workload of the tag: a curve "
            "that stops below 1 has that share still waiting at the end (never started; "
            "n = started of all). One colour per tag in both panels.",
        ),
        '<div class="grid2"><div><h3>submit → first placement</h3>',
        _table(
            ["tag", "count", "p50", "p90", "p99", "mean", "still waiting"],
            _wait_rows(summary.get("wait_s") or {}),
        ),
        "</div><div><h3>after a requeue</h3>",
        _table(
            ["tag", "count", "p50", "p90", "p99", "mean", "still waiting"],
            _wait_rows(summary.get("requeue_wait_s") or {}),
        ),
        "</div></div>",
        "<h2>Preemptions</h2>",
        _figure(
            charts["preempt"],
            "preemptions",
            "Preemptions per time bin, stacked by reason.",
            empty="No preemptions in this run.",
        ),
        _table(
            ["reason", "count"],
            [[html.escape(_label(k)), fmt_num(v)] for k, v in by_reason.items()],
        )
        if by_reason
        else "",
        "<h2>GPU timeline</h2>",
        _figure(gantt_b64, "GPU timeline", gantt_caption, empty="No GPUs to show."),
        "<h2>Numbers</h2>",
        '<div class="grid2"><div>',
        _table(["metric", "value"], headline),
        "</div><div>",
        _table(["workloads", "count"], workload_rows),
        _table(["engine", "value"], engine_rows) if engine_rows else "",
        "</div></div>",
        '<script type="application/json" id="summary">'
        + json.dumps(summary, sort_keys=True).replace("</", "<\\/")
        + "</script>",
        "<footer>Generated by allot from the run's journal; every chart is embedded, "
        "so this file works offline.</footer>",
        "</main></body></html>",
    ]
    return "\n".join(parts)


def draw_gantt(
    gantt: GanttCollector, policy: str, window: tuple[float, float] | None = None
) -> tuple[bytes, tuple[float, float]]:
    """The GPU timeline of a run of `policy` as PNG bytes, and the window drawn (default:
    the busiest 24 h)."""
    buf = io.BytesIO()
    drawn = gantt.render(buf, window=window, title=f"GPU timeline ({policy})")
    return buf.getvalue(), drawn


def write_report(
    events_or_path: Iterable[Any] | str | Path,
    summary: dict[str, Any],
    out_path: str | Path,
    *,
    gantt_window: tuple[float, float] | None = None,
    start: float | None = None,
    end: float | None = None,
    source: str | None = None,
    gantt_path: str | Path | None = None,
) -> Path:
    """Fold the journal (one pass) and write the self-contained `report.html`.

    Tables show `summary` as given (e.g. with the engine's timings); charts come from
    the events, clipped to the summary's period unless `start` / `end` say otherwise.
    `source` is how the report names its journal (default: the path read). With
    `gantt_path`, the report's GPU timeline is also written there (`gantt.png`: the same
    picture, titled with the policy)."""
    period = summary.get("period") or {}
    if start is None:
        start = period.get("start")
    if end is None:
        end = period.get("end")
    gantt = GanttCollector()
    bin_s = source_bin(start, end)  # charts of a short run need rows finer than an hour
    proj = fold(events_or_path, start=start, end=end, sinks=[gantt], bin_s=bin_s)
    gantt.close(proj.now)
    if source is None and isinstance(events_or_path, str | Path):
        source = str(events_or_path)
    drawn = None
    if gantt.n_rows or gantt_path is not None:
        drawn = draw_gantt(gantt, str(summary.get("policy", "?")), gantt_window)
        if gantt_path is not None:
            Path(gantt_path).write_bytes(drawn[0])
    text = render_html(
        summary,
        proj,
        gantt,
        gantt_window=gantt_window,
        source=source,
        gantt_png=drawn if gantt.n_rows else None,
    )
    out = Path(out_path)
    out.write_text(text, encoding="utf-8")
    return out


__all__ = ["draw_gantt", "fmt_dur", "fmt_pct", "render_html", "write_report"]
