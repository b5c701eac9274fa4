"""`gantt.png`: the GPU timeline of a run.

Rows are GPUs (`host/index`, hosts in registration order), bars are workload run
intervals. Hue per top-level allocation (or, under a single root, per allocation where
the tree first branches), a shade per leaf; hatched where the workload
is preemptible (unallocated, or past its `protected_until`); red outline, and a bold
red tick at its end, where the interval ended by preemption; translucent red dashed boxes, over its work, where a host
was unhealthy.

`GanttCollector` folds events in one pass into compact arrays (a few dozen bytes per
run interval plus 4 per GPU), so 1M-workload journals fit; drawing only touches the
intervals inside the window and uses a handful of `PolyCollection`s.
"""

from __future__ import annotations

import colorsys
import io
import math
from array import array
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from domain.text import plural
from projections.chart_style import LABEL_PT, MIN_PT, TITLE_PT, style_ticks
from projections.usage import fields, iter_events

HOUR = 3600.0
DAY = 86400.0
INF = float("inf")

# hue per top-level allocation (matplotlib tab10 without grey/red, which mean things here)
_BASE_COLORS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#9467bd",
    "#17becf",
    "#8c564b",
    "#e377c2",
    "#bcbd22",
    "#393b79",
    "#637939",
    "#8c6d31",
    "#7b4173",
)
_UNKNOWN_COLOR = "#9e9e9e"
_PREEMPTED = "#d62728"  # outline and end mark of a run that preemption stopped


def _when(t: float, *, seconds: bool = False) -> str:
    from datetime import UTC, datetime

    fmt = "%Y-%m-%d %H:%M:%S UTC" if seconds else "%Y-%m-%d %H:%M UTC"
    return datetime.fromtimestamp(t, UTC).strftime(fmt)


def time_unit(span: float) -> tuple[float, str]:
    """(seconds per unit, name) for a time axis spanning `span` seconds."""
    if span <= 120:
        return 1.0, "seconds"
    if span <= 3 * HOUR:
        return 60.0, "minutes"
    if span <= 3 * DAY:
        return HOUR, "hours"
    return DAY, "days"


def window_title(head: str, w0: float, w1: float, t0: float, t1: float, kind: str = "run") -> str:
    """`head — start → end (where the window lies in the run)`, e.g.
    `GPU timeline — 2026-01-01 01:00 UTC → … (1h–1d1h of a 3d run)`; `kind` names what
    the timeline is of (a forecast's: `forecast`)."""
    from domain.durations import format_duration as dur

    seconds = w1 - w0 < HOUR or (w0 % 60 != 0)  # short or off-minute windows: to the second
    where = (
        f"the whole {kind}, {dur(t1 - t0)}"
        if w0 <= t0 and w1 >= t1
        else f"{dur(max(0.0, w0 - t0))}–{dur(max(0.0, w1 - t0))} of a {dur(t1 - t0)} {kind}"
    )
    return f"{head} — {_when(w0, seconds=seconds)} → {_when(w1, seconds=seconds)}  ({where})"


def _branch_depth(leaves: list[str]) -> int:
    """The first level of the paths where the tree branches: 0 when the top-level
    allocations differ, 1 under a single root (`lab/...`), and so on."""
    parts = [leaf.split("/") for leaf in leaves if leaf]
    depth = 0
    while parts and all(len(p) > depth + 1 for p in parts):
        if len({p[depth] for p in parts}) > 1:
            break
        depth += 1
    return depth


# Leaves of one group spread over this range of CIE L* (perceived lightness, 0 black to
# 100 white), SHADE_STEP apart while that fits: even in L*, not in HLS lightness, whose
# steps look unequal from one hue to another. The old spread (HLS lightness -0.16 to
# +0.24, clipped at 0.85) put 8 leaves of one group as little as 2-5 L* apart, and pink's
# two lightest clipped to one colour.
SHADE_LSTAR = (28.0, 88.0)
SHADE_STEP = 30.0


def lstar(rgb: Iterable[float]) -> float:
    """CIE L* of an sRGB colour (components 0-1)."""
    r, g, b = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb)
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    return 116.0 * y ** (1 / 3) - 16.0 if y > 216 / 24389 else y * 24389 / 27


def _with_lstar(h: float, s: float, target: float) -> tuple[float, float, float]:
    """The colour of hue h and HLS saturation s whose L* is `target` (L* grows with HLS
    lightness at a fixed hue and saturation: bisection, a fixed number of steps)."""
    lo, hi = 0.0, 1.0
    for _ in range(30):
        mid = (lo + hi) / 2
        if lstar(colorsys.hls_to_rgb(h, mid, s)) < target:
            lo = mid
        else:
            hi = mid
    return colorsys.hls_to_rgb(h, (lo + hi) / 2, s)


def _shade_targets(base: float, n: int) -> list[float]:
    """L* of n shades, darkest first: SHADE_STEP apart (closer when n shades would not
    fit in SHADE_LSTAR), centred on the group's own colour as far as the range allows."""
    low, high = SHADE_LSTAR
    span = min(high - low, SHADE_STEP * (n - 1))
    first = min(max(base - span / 2, low), high - span)
    return [first + span * k / (n - 1) for k in range(n)]


def palette(leaves: list[str], known: Iterable[str] = ()) -> tuple[dict[str, str], np.ndarray]:
    """Hue per allocation at the first level where the tree branches (the top-level
    ones, or under a single root such as `lab/` its children) and an RGB row per leaf
    (in `leaves` order): leaves of one such group get shades of its hue, from darker to
    lighter by path, evenly apart in perceived lightness (`SHADE_LSTAR`, `SHADE_STEP`);
    a group's only leaf has the group's own colour. Hues and shades are spread over
    `leaves` and `known` (the budget tree's leaves): an allocation keeps its colour
    whichever of them a picture shows; the hues returned are those of `leaves`."""
    from matplotlib.colors import to_rgb

    shown = leaves
    leaves = sorted({*leaves, *known})
    depth = _branch_depth(leaves)

    def group(leaf: str) -> str:
        return "/".join(leaf.split("/")[: depth + 1])

    tops = sorted({group(leaf) for leaf in leaves if leaf})
    top_color = {top: _BASE_COLORS[i % len(_BASE_COLORS)] for i, top in enumerate(tops)}
    by_top: dict[str, list[str]] = {}
    for leaf in sorted(set(leaves)):
        if leaf:
            by_top.setdefault(group(leaf), []).append(leaf)
    shade: dict[str, tuple[float, float, float]] = {}
    for top, siblings in by_top.items():
        base = to_rgb(top_color[top])
        if len(siblings) == 1:
            shade[siblings[0]] = base
            continue
        h, _, s = colorsys.rgb_to_hls(*base)
        targets = _shade_targets(lstar(base), len(siblings))
        for leaf, target in zip(siblings, targets, strict=True):
            shade[leaf] = _with_lstar(h, s, target)
    rgb = np.zeros((max(1, len(shown)), 3))
    for i, leaf in enumerate(shown):
        rgb[i] = shade[leaf] if leaf else to_rgb(_UNKNOWN_COLOR)
    groups = {group(leaf) for leaf in shown if leaf}
    return {top: c for top, c in top_color.items() if top in groups}, rgb


# A line drawn in a leaf's colour on white (report.html's small multiples) is no
# lighter than this L*: the lightest shades (up to SHADE_LSTAR's 88) drew a received
# line a reader could barely see. L* 60 is about 3:1 contrast on white (WCAG's bar for
# graphics); fills keep the leaf's own shade, so the hue still matches gantt.png.
LINE_MAX_LSTAR = 60.0


def line_shade(rgb: Iterable[float]) -> tuple[float, float, float]:
    """`rgb` (a leaf's colour), darkened to `LINE_MAX_LSTAR` if lighter: its hue, visible
    as a thin line on white."""
    rgb = tuple(rgb)
    if lstar(rgb) <= LINE_MAX_LSTAR:
        return rgb  # type: ignore[return-value]
    h, _, s = colorsys.rgb_to_hls(*rgb)
    return _with_lstar(h, s, LINE_MAX_LSTAR)


_UNHEALTHY_FILL = (0.85, 0.15, 0.15, 0.22)
_UNHEALTHY_EDGE = (0.7, 0.1, 0.1, 0.9)


class GanttCollector:
    """Run intervals of every workload, in compact arrays."""

    def __init__(self) -> None:
        self.first_time: float | None = None
        self.last_time: float | None = None
        self.hosts: list[str] = []
        self.host_gpus: dict[str, int] = {}
        self.host_row0: dict[str, int] = {}
        self.n_rows = 0
        self.leaves: list[str] = []
        # every allocation the budget tree has had: colours are spread over these, so
        # that one keeps its colour in every picture (the past, the forecast, a policy)
        self.budget_paths: set[str] = set()
        self._leaf_idx: dict[str, int] = {}
        self._alloc_of: dict[str, str] = {}  # live workloads
        # running: workload -> (start, leaf idx, preemptible_from, rows)
        self._running: dict[str, tuple[float, int, float, tuple[int, ...]]] = {}
        self.start = array("d")
        self.end = array("d")
        self.preemptible_from = array("d")  # start if unallocated, inf if never
        self.leaf = array("i")
        self.preempted = array("b")
        self.row_off = array("q")  # offset into `rows`
        self.row_len = array("i")
        self.rows = array("i")
        self._unhealthy_since: dict[str, float] = {}
        self.unhealthy: list[tuple[str, float, float]] = []
        # what the timeline is of, for its title and x axis ("forecast": from now on)
        self.kind = "run"

    # ------------------------------------------------------------------ fold
    def apply(self, event: Any) -> None:
        d = fields(event)
        t = float(d["time"])
        if self.first_time is None:
            self.first_time = t
        self.last_time = t if self.last_time is None else max(self.last_time, t)
        kind = d["type"]
        if kind == "workload.submitted":
            self._alloc_of[d["workload"]] = d["allocation"]
        elif kind == "workload.placed":
            self._placed(d, t)
        elif kind == "workload.preempted":
            self._stop(d["workload"], t, preempted=True)
            if not d.get("requeued"):
                self._alloc_of.pop(d["workload"], None)
        elif kind in ("workload.finished", "workload.cancelled"):
            self._stop(d["workload"], t, preempted=False)
            if not d.get("requeued"):  # a lost attempt's work runs again
                self._alloc_of.pop(d["workload"], None)
        elif kind == "budget.set":
            self.budget_paths.add(d["allocation"])
        elif kind == "host.registered":
            self._register(d["host"], int(d.get("gpus") or 0))
        elif kind == "host.health":
            host = d["host"]
            if d.get("healthy"):
                since = self._unhealthy_since.pop(host, None)
                if since is not None:
                    self.unhealthy.append((host, since, t))
            else:
                self._unhealthy_since.setdefault(host, t)

    def _register(self, host: str, gpus: int) -> None:
        """A new host's rows go below the others'. A host registered again with more
        GPUs than it had grows its block (its new GPUs were dropped from the picture);
        one with fewer keeps it: the rows of pulled GPUs hold their past."""
        width = self.host_gpus.get(host)
        if width is None:
            self.hosts.append(host)
            self.host_gpus[host] = gpus
            self.host_row0[host] = self.n_rows
            self.n_rows += gpus
        elif gpus > width:
            self._grow(host, gpus - width)

    def _grow(self, host: str, extra: int) -> None:
        """Insert `extra` rows at the end of `host`'s block: the hosts after it, and
        the rows of every run on them, move down (rare: a host resized)."""
        at = self.host_row0[host] + self.host_gpus[host]
        self.host_gpus[host] += extra
        self.n_rows += extra
        for later in self.hosts[self.hosts.index(host) + 1 :]:
            self.host_row0[later] += extra
        rows = np.frombuffer(self.rows, dtype=np.int32)
        rows[rows >= at] += extra
        self._running = {
            wid: (*run[:3], tuple(r + extra if r >= at else r for r in run[3]))
            for wid, run in self._running.items()
        }

    def _leaf_index(self, path: str) -> int:
        idx = self._leaf_idx.get(path)
        if idx is None:
            idx = self._leaf_idx[path] = len(self.leaves)
            self.leaves.append(path)
        return idx

    def _placed(self, d: dict[str, Any], t: float) -> None:
        wid = d["workload"]
        if wid in self._running:
            self._stop(wid, t, preempted=False)
        alloc = d.get("allocation") or self._alloc_of.get(wid, "")
        rows: list[int] = []
        for host, idx in (d.get("hosts") or {}).items():
            self._register(host, max(idx, default=-1) + 1)  # grows a host that outgrew its rows
            base = self.host_row0[host]
            width = self.host_gpus[host]
            rows.extend(base + i for i in idx if 0 <= i < width)
        rows.sort()
        if not d.get("charged"):
            pf = t
        else:
            pu = d.get("protected_until")
            pf = INF if pu is None else max(t, float(pu))
        self._running[wid] = (t, self._leaf_index(alloc), pf, tuple(rows))

    def _stop(self, wid: str, t: float, *, preempted: bool) -> None:
        run = self._running.pop(wid, None)
        if run is None:
            return
        start, leaf, pf, rows = run
        self.start.append(start)
        self.end.append(t)
        self.preemptible_from.append(pf)
        self.leaf.append(leaf)
        self.preempted.append(1 if preempted else 0)
        self.row_off.append(len(self.rows))
        self.row_len.append(len(rows))
        self.rows.extend(rows)

    def close(self, end: float | None = None) -> None:
        """End the runs and unhealthy periods still open at `end` (default: last event)."""
        t = end if end is not None else self.last_time
        if t is None:
            return
        for wid in list(self._running):
            self._stop(wid, t, preempted=False)
        for host, since in self._unhealthy_since.items():
            self.unhealthy.append((host, since, t))
        self._unhealthy_since.clear()
        self.last_time = max(self.last_time or t, t)

    # ---------------------------------------------------------------- window
    def busiest_window(self, length: float = DAY) -> tuple[float, float]:
        """The `length` window (starting on an hour edge) with the most busy GPU-seconds;
        the whole run if it is shorter than `length`."""
        return shared_window([self], length)

    def busy_between(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Busy GPU-seconds in each window [a[k], b[k]]."""
        if not len(self.start):
            return np.zeros(np.shape(a))
        starts = np.frombuffer(self.start, dtype=np.float64)
        ends = np.frombuffer(self.end, dtype=np.float64)
        gpus = np.frombuffer(self.row_len, dtype=np.int32).astype(np.float64)
        times = np.concatenate([starts, ends])
        deltas = np.concatenate([gpus, -gpus])
        order = np.argsort(times, kind="stable")
        times, deltas = times[order], deltas[order]
        rate = np.cumsum(deltas)  # busy GPUs right after times[k]
        integral = np.concatenate([[0.0], np.cumsum(rate[:-1] * np.diff(times))])

        def busy_until(x: np.ndarray) -> np.ndarray:  # ∫ busy dt from -inf to x
            k = np.searchsorted(times, x, side="right") - 1
            kk = np.clip(k, 0, None)
            val = integral[kk] + rate[kk] * (x - times[kk])
            return np.where(k < 0, 0.0, val)

        return busy_until(np.asarray(b)) - busy_until(np.asarray(a))

    # ------------------------------------------------------------------ draw
    def colors(self) -> tuple[dict[str, str], np.ndarray]:
        paths = self.budget_paths
        inner = {p.rsplit("/", 1)[0] for p in paths if "/" in p}
        return palette(self.leaves, known=sorted(paths - inner))

    def render(
        self,
        out: str | Path | BinaryIO,
        *,
        window: tuple[float, float] | None = None,
        max_rows: int = 1024,
        first_row: int = 0,
        title: str | None = None,
        dpi: int = 100,
    ) -> tuple[float, float]:
        """Draw the window (default: busiest 24 h) to `out` as PNG; returns the window."""
        import matplotlib.pyplot as plt

        fig, (w0, w1) = self.figure(
            window=window, max_rows=max_rows, first_row=first_row, title=title, dpi=dpi
        )
        fig.savefig(out, format="png", dpi=dpi)
        plt.close(fig)
        return w0, w1

    def figure(
        self,
        *,
        window: tuple[float, float] | None = None,
        max_rows: int = 1024,
        first_row: int = 0,
        title: str | None = None,
        dpi: int = 100,
    ) -> tuple[Any, tuple[float, float]]:
        """The matplotlib Figure of the window (the caller closes it) and the window:
        GPU rows `first_row` to `first_row + max_rows` (a big cluster, a page at a time)."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.collections import PolyCollection
        from matplotlib.patches import Patch

        t0 = self.first_time or 0.0
        w0, w1 = window if window is not None else self.busiest_window()
        last = self.last_time
        if window is not None and last is not None and w0 < last < w1:
            w1 = last  # a window past the end of the run: draw up to its end, not empty space
        if w1 <= w0:
            w1 = w0 + 1.0
        first = max(0, min(first_row, self.n_rows - 1)) if self.n_rows else 0
        n_rows = min(self.n_rows - first, max_rows) if self.n_rows else 1
        span = w1 - w0
        unit, unit_name = time_unit(span)

        rows_h = n_rows * (0.16 if n_rows <= 64 else 0.05 if n_rows <= 256 else 0.0135)
        height = min(18.0, max(3.2, 1.6 + rows_h))
        # as wide as the report's other charts: at 14 in it did not fit a 1024 px window
        # even at the report's smallest shown scale, and scrolled there
        fig, ax = plt.subplots(figsize=(13, height), dpi=dpi)

        top_color, rgb = self.colors()
        solid, hatched, outlines = _bars(self, w0, w1, n_rows, t0, unit, first)
        # thin white edges separate neighbouring bars; dropped when bars are tiny
        edge = (1, 1, 1, 0.9) if n_rows <= 256 else "none"
        if solid[0].size:
            ax.add_collection(
                PolyCollection(solid[0], facecolors=rgb[solid[1]], edgecolors=edge, lw=0.4)
            )
        if hatched[0].size:
            # hatching is drawn as one striped raster overlay after layout: matplotlib's
            # per-polygon hatch costs ~1 ms a bar, far too slow for big windows
            ax.add_collection(
                PolyCollection(hatched[0], facecolors=rgb[hatched[1]], edgecolors=edge, lw=0.4)
            )
        if outlines.size:
            ax.add_collection(
                PolyCollection(
                    outlines,
                    facecolors="none",
                    edgecolors=_PREEMPTED,
                    lw=0.9 if n_rows <= 256 else 0.5,
                    zorder=3,
                )
            )
            _preemption_marks(ax, outlines)
        bands = []
        for host, a, b in self.unhealthy:
            r0 = self.host_row0.get(host)
            if r0 is None or b <= w0 or a >= w1:
                continue
            r0, r1 = r0 - first, r0 - first + self.host_gpus[host]
            if r1 <= 0 or r0 >= n_rows:
                continue
            r0, r1 = max(0, r0), min(n_rows, r1)
            x0, x1 = (max(a, w0) - t0) / unit, (min(b, w1) - t0) / unit
            bands.append([(x0, r0), (x1, r0), (x1, r1), (x0, r1)])
        if bands:
            # over the bars: a host drains while its work runs, and that is when an
            # operator looks (under them, the band showed only once the host was empty)
            ax.add_collection(
                PolyCollection(
                    bands,
                    facecolors=_UNHEALTHY_FILL,
                    edgecolors=_UNHEALTHY_EDGE,
                    linestyles="--",
                    lw=1.0,
                    zorder=4,
                )
            )

        ax.set_xlim((w0 - t0) / unit, (w1 - t0) / unit)
        ax.set_ylim(n_rows, 0)
        shown_hosts = [h for h in self.hosts if first <= self.host_row0[h] < first + n_rows]
        if len(shown_hosts) <= 200:
            for h in shown_hosts[1:]:
                ax.axhline(self.host_row0[h] - first, color="#bbbbbb", lw=0.4, zorder=0.5)
        step = max(1, math.ceil(len(shown_hosts) / 40))
        ticks = shown_hosts[::step]
        ax.set_yticks(
            [
                self.host_row0[h]
                - first
                + min(self.host_gpus[h], first + n_rows - self.host_row0[h]) / 2
                for h in ticks
            ]
        )
        ax.set_yticklabels(ticks)
        style_ticks(ax)
        ax.tick_params(axis="y", length=0)
        ax.set_xlabel(
            f"{unit_name} from now"
            if self.kind == "forecast"
            else f"{unit_name} since start of run",
            fontsize=LABEL_PT,
        )
        ax.set_ylabel(
            f"GPUs by host ({plural(self.n_rows, 'GPU')})"
            if n_rows == self.n_rows
            else f"GPUs by host ({first + 1:,}–{first + n_rows:,} of {self.n_rows:,})",
            fontsize=LABEL_PT,
        )
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
        ax.grid(axis="x", color="#e0e0e0", lw=0.6, zorder=0)
        ax.set_axisbelow(True)

        ax.set_title(
            window_title(title or "GPU timeline", w0, w1, t0, self.last_time or t0, self.kind),
            fontsize=TITLE_PT,
            loc="left",
        )
        handles = []
        show_leaves = len([leaf for leaf in self.leaves if leaf]) <= 30
        for top, c in top_color.items():
            handles.append(Patch(facecolor=c, label=top))
            if show_leaves:
                for leaf, i in sorted(
                    (leaf, i) for i, leaf in enumerate(self.leaves) if leaf.startswith(top + "/")
                ):
                    handles.append(Patch(facecolor=rgb[i], label="   " + leaf[len(top) + 1 :]))
        if any(not leaf for leaf in self.leaves):
            handles.append(Patch(facecolor=_UNKNOWN_COLOR, label="(no allocation)"))
        # the style keys only for what the window shows (a key for nothing reads as a bug)
        if hatched[0].size:
            handles.append(
                Patch(facecolor="#9e9e9e", hatch="////", edgecolor="white", label="preemptible")
            )
        if outlines.size:
            # the outline with the end mark drawn over it, as the chart shows them
            outline = Patch(facecolor="none", edgecolor=_PREEMPTED, label="ended by preemption")
            handles.append((outline, _preemption_mark_key()))
        if bands:
            handles.append(
                Patch(
                    facecolor=_UNHEALTHY_FILL,
                    edgecolor=_UNHEALTHY_EDGE,
                    linestyle="--",
                    label="host unhealthy",
                )
            )
        ax.legend(
            handles,
            [(h[0] if isinstance(h, tuple) else h).get_label() for h in handles],
            loc="upper left",
            bbox_to_anchor=(1.005, 1.0),
            fontsize=MIN_PT,
            frameon=False,
            title="allocation",
            title_fontsize=LABEL_PT,
        )
        fig.tight_layout()
        if hatched[0].size:
            _hatch_overlay(fig, ax, hatched[0])
        return fig, (w0, w1)


def _preemption_mark_style() -> dict[str, Any]:
    from matplotlib.patheffects import withStroke

    # a fixed size in points: in a 1024-GPU chart a 1-GPU bar is about 1 px tall and its
    # red outline is lost among hundreds of bars; the white halo keeps the mark apart
    # from red and orange bars
    return {
        "ls": "none",
        "marker": "|",
        "ms": 10,
        "mew": 2.2,
        "color": _PREEMPTED,
        "path_effects": [withStroke(linewidth=4.5, foreground="white")],
    }


def _preemption_marks(ax: Any, outlines: np.ndarray) -> None:
    """A bold red tick where each preempted run stopped (the right edge of its
    outline `outlines`: N, 4, 2 in data coordinates), at the middle of its rows."""
    x = outlines[:, 1, 0]
    y = (outlines[:, 1, 1] + outlines[:, 2, 1]) / 2
    ax.plot(x, y, zorder=3.5, clip_on=False, **_preemption_mark_style())


def _preemption_mark_key() -> Any:
    from matplotlib.lines import Line2D

    return Line2D([], [], **_preemption_mark_style())


def _hatch_overlay(fig: Any, ax: Any, rects: np.ndarray, period: int = 7) -> None:
    """White diagonal stripes over `rects` (N, 4, 2 in data coordinates) as one image
    at the axes' pixel resolution."""
    box = ax.get_window_extent(fig.canvas.get_renderer())
    width, height = max(1, round(box.width)), max(1, round(box.height))
    (xa, xb), (ya, yb) = ax.get_xlim(), ax.get_ylim()  # ya > yb: rows grow downwards
    x0 = rects[:, 0, 0]
    x1 = rects[:, 1, 0]
    y0 = rects[:, 0, 1]
    y1 = rects[:, 2, 1]
    c0 = np.clip(np.round((x0 - xa) / (xb - xa) * width), 0, width).astype(np.int64)
    c1 = np.clip(np.round((x1 - xa) / (xb - xa) * width), 0, width).astype(np.int64)
    r0 = np.clip(np.round((y0 - yb) / (ya - yb) * height), 0, height).astype(np.int64)
    r1 = np.clip(np.round((y1 - yb) / (ya - yb) * height), 0, height).astype(np.int64)
    keep = (c1 > c0) & (r1 > r0)
    c0, c1, r0, r1 = c0[keep], c1[keep], r0[keep], r1[keep]
    # 2-D difference array: coverage count after two cumulative sums
    cover = np.zeros((height + 1, width + 1), dtype=np.int32)
    np.add.at(cover, (r0, c0), 1)
    np.add.at(cover, (r0, c1), -1)
    np.add.at(cover, (r1, c0), -1)
    np.add.at(cover, (r1, c1), 1)
    mask = cover.cumsum(0).cumsum(1)[:height, :width] > 0
    rows, cols = np.indices((height, width))
    phase = (rows + cols) % period
    image = np.zeros((height, width, 4), dtype=np.float32)
    # a white stripe with a faint dark edge reads on light and dark shades alike
    image[mask & (phase < 2)] = (1.0, 1.0, 1.0, 0.85)
    image[mask & (phase == 2)] = (0.0, 0.0, 0.0, 0.22)
    ax.imshow(
        image,
        extent=(xa, xb, ya, yb),
        origin="upper",
        aspect="auto",
        interpolation="nearest",
        zorder=2.2,
    )
    ax.set_xlim(xa, xb)
    ax.set_ylim(ya, yb)


def _bars(
    g: GanttCollector,
    w0: float,
    w1: float,
    n_rows: int,
    t0: float,
    unit: float,
    first: int = 0,
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray], np.ndarray]:
    """Rectangles (N, 4, 2) for solid and hatched parts (with leaf indices) and for the
    red outlines, one per contiguous block of GPU rows of an interval in the window
    (rows `first` to `first + n_rows`, drawn from 0)."""
    empty = (np.zeros((0, 4, 2)), np.zeros(0, dtype=int))
    if not len(g.start):
        return empty, empty, np.zeros((0, 4, 2))
    start = np.frombuffer(g.start, dtype=np.float64)
    end = np.frombuffer(g.end, dtype=np.float64)
    sel = np.nonzero((end > w0) & (start < w1) & (end > start))[0]
    if not sel.size:
        return empty, empty, np.zeros((0, 4, 2))
    pf = np.frombuffer(g.preemptible_from, dtype=np.float64)
    leaf = np.frombuffer(g.leaf, dtype=np.int32)
    pre = np.frombuffer(g.preempted, dtype=np.int8)
    off = np.frombuffer(g.row_off, dtype=np.int64)
    length = np.frombuffer(g.row_len, dtype=np.int32)
    rows = np.frombuffer(g.rows, dtype=np.int32)

    # blocks of contiguous rows: (interval index, row0, row1)
    blk_i: list[int] = []
    blk_r0: list[int] = []
    blk_r1: list[int] = []
    for i in sel.tolist():
        r = rows[off[i] : off[i] + length[i]]
        r = r[(r >= first) & (r < first + n_rows)] - first
        if not r.size:
            continue
        breaks = np.nonzero(np.diff(r) != 1)[0]
        firsts = np.concatenate([[0], breaks + 1])
        lasts = np.concatenate([breaks, [r.size - 1]])
        for a, b in zip(firsts.tolist(), lasts.tolist(), strict=True):
            blk_i.append(i)
            blk_r0.append(int(r[a]))
            blk_r1.append(int(r[b]) + 1)
    if not blk_i:
        return empty, empty, np.zeros((0, 4, 2))
    bi = np.asarray(blk_i)
    y0 = np.asarray(blk_r0, dtype=float) + 0.08
    y1 = np.asarray(blk_r1, dtype=float) - 0.08
    s = np.maximum(start[bi], w0)
    e = np.minimum(end[bi], w1)
    p = np.clip(pf[bi], s, e)

    def rects(x0: np.ndarray, x1: np.ndarray, ya: np.ndarray, yb: np.ndarray) -> np.ndarray:
        x0 = (x0 - t0) / unit
        x1 = (x1 - t0) / unit
        return np.stack(
            [
                np.stack([x0, ya], -1),
                np.stack([x1, ya], -1),
                np.stack([x1, yb], -1),
                np.stack([x0, yb], -1),
            ],
            axis=1,
        )

    m_solid = p > s
    m_hatch = e > p
    solid = (rects(s[m_solid], p[m_solid], y0[m_solid], y1[m_solid]), leaf[bi][m_solid])
    hatched = (rects(p[m_hatch], e[m_hatch], y0[m_hatch], y1[m_hatch]), leaf[bi][m_hatch])
    m_out = (pre[bi] == 1) & (end[bi] <= w1)
    outlines = rects(s[m_out], e[m_out], y0[m_out], y1[m_out])
    return solid, hatched, outlines


def shared_window(collectors: list[GanttCollector], length: float = DAY) -> tuple[float, float]:
    """The `length` window (starting on an hour edge) with the most busy GPU-seconds over
    all `collectors` together (runs of one scenario under several policies), so that
    their timelines show the same period; all of it if shorter than `length`."""
    firsts = [g.first_time for g in collectors if g.first_time is not None]
    t0 = min(firsts) if firsts else 0.0
    t1 = max([g.last_time or t0 for g in collectors], default=t0)
    if t1 - t0 <= length or not any(len(g.start) for g in collectors):
        return t0, max(t1, t0 + 1.0)
    first_hour = math.floor(t0 / HOUR) * HOUR
    candidates = np.arange(first_hour, t1 - length + 1e-6, HOUR)
    if not candidates.size:
        candidates = np.asarray([first_hour])
    scores = sum(g.busy_between(candidates, candidates + length) for g in collectors)
    best = float(candidates[int(np.argmax(scores))])
    return max(best, t0), best + length


def collect(events: Iterable[Any] | str | Path, end: float | None = None) -> GanttCollector:
    """A closed `GanttCollector` of `events` (or a journal path)."""
    g = GanttCollector()
    for e in iter_events(events):
        g.apply(e)
    g.close(end)
    return g


def write_gantt(
    events: Iterable[Any] | str | Path,
    out_path: str | Path,
    *,
    window: tuple[float, float] | None = None,
    max_rows: int = 1024,
    end: float | None = None,
    title: str | None = None,
) -> tuple[float, float]:
    """Collect `events` (or a journal path) and draw `gantt.png` (titled `title`, e.g.
    `GPU timeline (fairshare)`); returns the window."""
    return collect(events, end).render(out_path, window=window, max_rows=max_rows, title=title)


def gantt_png(g: GanttCollector, **kw: Any) -> bytes:
    buf = io.BytesIO()
    g.render(buf, **kw)
    return buf.getvalue()


__all__ = [
    "GanttCollector",
    "collect",
    "gantt_png",
    "shared_window",
    "time_unit",
    "window_title",
    "write_gantt",
]
