"""Every chart of report.html, gantt.png and the dashboard can be read where it is
shown: no text smaller than `chart_style.MIN_PT`, none cut off at the figure's edge,
and no two labels drawn over each other — for a tiny run and for a lab-sized one."""

from __future__ import annotations

import itertools

import matplotlib.pyplot as plt
import pytest
from matplotlib.legend import Legend
from matplotlib.text import Text

from projections.chart_style import MIN_PT
from projections.gantt import GanttCollector
from projections.report import (
    _Timebase,
    allocation_figure,
    cluster_figure,
    preemption_figure,
    source_bin,
    wait_figure,
)
from projections.summary import fold
from projections.usage import HOUR, JournalBuilder

H8 = list(range(8))
LEAVES = [f"{top}/{team}" for top in ("agents", "language", "vision") for team in "abcde"]


def tiny_run() -> JournalBuilder:
    """Two hosts, two leaves, one preemption: the smallest run with every key."""
    j = JournalBuilder()
    j.host("h0").host("h1")
    j.budget("lab", 1).budget("lab/a", 3).budget("lab/b", 1)
    j.submit("a1", "lab/a", 8, tags=("train",)).place("a1", {"h0": H8})
    j.submit("b1", "lab/b", 4, min_runtime=0, tags=("filler",)).place("b1", {"h1": H8[:4]})
    j.at(600).submit("a2", "lab/a", 4, tags=("debug",))
    j.at(900).preempt("b1", "unallocated", beneficiary="a2").place("a2", {"h1": H8[:4]})
    j.at(2 * HOUR).finish("a1").finish("a2").tick()
    return j


TAGS = ("pretraining", "evaluation", "sweep", "filler", "debug", "interactive")


def lab_run() -> JournalBuilder:
    """64 hosts (512 GPUs), 15 leaves under 3 programs, a day of work with preemptions
    of several reasons, requeued work placed again and 1,200 workloads that never
    start: long legends (six tags, 4-digit counts), 5 rows of small multiples, dense
    gantt rows."""
    j = JournalBuilder()
    hosts = [f"node-{k:03d}" for k in range(64)]
    for h in hosts:
        j.host(h)
    for top in ("agents", "language", "vision"):
        j.budget(top, 1)
    for leaf in LEAVES:
        j.budget(leaf, 1)
    occupant, requeued = {}, []
    for k, h in enumerate(hosts):
        occupant[k] = f"w{k}"
        j.submit(f"w{k}", LEAVES[k % 15], 8, tags=(TAGS[k % 6],)).place(f"w{k}", {h: H8})
    for n in range(1200):
        j.submit(f"never{n}", LEAVES[n % 15], 64, tags=(TAGS[n % 6],))
    for step in range(1, 24):
        j.at(step * HOUR)
        for k in range(step % 4, 64, 4):
            reason = ("fair_share", "unallocated", "priority")[step % 3]
            j.preempt(occupant[k], reason, requeued=True)
            requeued.append(occupant[k])
            if step % 2 == 0:
                occupant[k] = requeued.pop(0)
            else:
                occupant[k] = f"w{k}-{step}"
                j.submit(occupant[k], LEAVES[(k + step) % 15], 8, tags=(TAGS[(k + step) % 6],))
            j.place(occupant[k], {hosts[k]: H8})
    j.at(24 * HOUR).tick()
    return j


def figures(j: JournalBuilder) -> dict[str, plt.Figure]:
    t0, t1 = j.events[0].time, j.events[-1].time
    proj = fold(j.events, bin_s=source_bin(t0, t1))
    tb = _Timebase(t0, t1, min_width=proj.bin_s)
    gantt = GanttCollector()
    for e in j.events:
        gantt.apply(e)
    gantt.close(t1)
    figs = {
        "cluster": cluster_figure(proj, tb),
        "allocations": allocation_figure(tb, proj.hourly_rows(), proj.delivered()),
        "waits": wait_figure(proj),
        "preemptions": preemption_figure(proj, tb),
        "gantt": gantt.figure(title="GPU timeline (fairshare)")[0],
    }
    for fig in figs.values():
        fig.canvas.draw()
    return figs


def _shown(text: Text) -> bool:
    """Drawn: visible itself and, for an axes' text, in a visible axes."""
    return text.get_visible() and (text.axes is None or text.axes.get_visible())


def _undrawn_tick_labels(fig: plt.Figure) -> set[int]:
    """Tick labels an axis keeps but does not draw (their tick lies outside its view)."""
    kept, drawn = set(), set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            for tick in axis.majorTicks + axis.minorTicks:
                kept |= {id(tick.label1), id(tick.label2)}
            for tick in axis._update_ticks():
                drawn |= {id(tick.label1), id(tick.label2)}
    return kept - drawn


def texts(fig: plt.Figure) -> list[Text]:
    undrawn = _undrawn_tick_labels(fig)
    return [
        t for t in fig.findobj(Text) if t.get_text().strip() and _shown(t) and id(t) not in undrawn
    ]


@pytest.fixture(scope="module", params=["tiny", "lab"])
def drawn(request):
    figs = figures(tiny_run() if request.param == "tiny" else lab_run())
    yield request.param, figs
    for fig in figs.values():
        plt.close(fig)


def test_no_chart_text_is_smaller_than_the_minimum(drawn):
    run, figs = drawn
    small = [
        (name, t.get_text(), t.get_fontsize())
        for name, fig in figs.items()
        for t in texts(fig)
        if t.get_fontsize() < MIN_PT
    ]
    assert not small, f"{run}: text under {MIN_PT} pt: {small[:12]}"


def test_no_chart_text_is_cut_off_at_the_figure_edge(drawn):
    run, figs = drawn
    cut = []
    for name, fig in figs.items():
        renderer = fig.canvas.get_renderer()
        width, height = fig.canvas.get_width_height()
        for t in texts(fig):
            box = t.get_window_extent(renderer)
            if box.x0 < -0.5 or box.y0 < -0.5 or box.x1 > width + 0.5 or box.y1 > height + 0.5:
                cut.append((name, t.get_text(), tuple(round(v) for v in box.extents)))
    assert not cut, f"{run}: text outside the figure: {cut[:12]}"


def test_no_two_chart_labels_overlap(drawn):
    """Titles, axis labels, tick labels, notes and legend entries each keep their own
    space (a legend's entries are compared with the rest as one box)."""
    run, figs = drawn
    clashes = []
    for name, fig in figs.items():
        renderer = fig.canvas.get_renderer()
        boxes = []
        for t in texts(fig):
            if any(t in leg.get_texts() or t is leg.get_title() for leg in _legends(fig)):
                continue
            boxes.append((t.get_text(), t.get_window_extent(renderer).padded(-1)))
        boxes += [
            (f"legend:{leg.get_texts()[0].get_text()}", leg.get_window_extent(renderer))
            for leg in _legends(fig)
            if leg.get_visible()
        ]
        for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2):
            if box_a.overlaps(box_b):
                clashes.append((name, a, b))
    assert not clashes, f"{run}: overlapping text: {clashes[:12]}"


def _legends(fig: plt.Figure) -> list[Legend]:
    found = list(fig.legends)
    found += [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    return found


def _drawn_tick_values(ax, which: str) -> list[float]:
    axis = ax.yaxis if which == "y" else ax.xaxis
    return [tick.get_loc() for tick in axis._update_ticks()]


def test_gpu_and_count_axes_tick_whole_numbers(drawn):
    """A 16-GPU cluster's usage axis ticked 2.5, 7.5, 12.5 GPUs; GPUs and preemptions
    are counted in whole numbers (and not one tick for each of them)."""
    run, figs = drawn
    axes = [figs["cluster"].axes[0], figs["preemptions"].axes[0]]
    axes += [ax for ax in figs["allocations"].axes if ax.get_visible()]
    for ax in axes:
        ticks = _drawn_tick_values(ax, "y")
        assert 2 <= len(ticks) <= 8, (run, ax.get_ylabel(), ticks)
        assert all(v == int(v) for v in ticks), (run, ax.get_ylabel(), ticks)


def test_the_contended_band_has_a_key_one_can_see(drawn):
    """The grey 'work waiting' band is faint on purpose; its key on white was too."""
    _, figs = drawn
    legend = figs["cluster"].axes[0].get_legend()
    labels = [t.get_text() for t in legend.get_texts()]
    key = legend.legend_handles[labels.index("work waiting (contended)")]
    assert key.get_edgecolor()[3] > 0.5 or key.get_facecolor()[3] >= 0.2


def spiky_usage() -> tuple[_Timebase, list[dict]]:
    """Two days of hourly rows for a short and a long-named allocation, each owed 10
    GPUs and receiving them, but for three hours spiking far above the rest (the
    spikes are clipped); the long one's spikes fall at the panel's right edge, where
    the peak's note used to be drawn."""
    t0 = 1_800_000_000.0
    tb = _Timebase(t0, t0 + 48 * HOUR, min_width=HOUR)
    rows = []
    for leaf, spikes in (("lab/a", (3, 20, 40)), ("lab/a-rather-long-team-name", (45, 46, 47))):
        for h in range(48):
            received = 400 if h in spikes else 10
            rows.append(
                {
                    "allocation": leaf,
                    "hour": t0 + h * HOUR,
                    "received_gpu_s": received * HOUR,
                    "owed_gpu_s": 10 * HOUR,
                    "demand_gpu_s": received * HOUR,
                    "entitled_gpu_s": 10 * HOUR,
                    "unallocated_gpu_s": 0.0,
                }
            )
    return tb, rows


def test_a_clipped_peak_is_named_outside_the_data():
    """The 'peak N clipped ▲' note sat inside the panel's top right corner and hid the
    ▲ marks it explains; it is named where no data or mark is drawn."""
    tb, rows = spiky_usage()
    fig = allocation_figure(tb, rows, {})
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    try:
        panels = [ax for ax in fig.axes if ax.get_visible()]
        assert len(panels) == 2
        for ax in panels:
            notes = [t for t in texts(fig) if "clipped" in t.get_text() and t.axes is ax]
            marks = [line for line in ax.get_lines() if line.get_marker() == "^"]
            assert len(notes) == 1 and len(marks) == 1, [t.get_text() for t in notes]
            note = notes[0].get_window_extent(renderer)
            assert not note.overlaps(ax.get_window_extent(renderer)), ax.get_title(loc="left")
            assert not note.overlaps(marks[0].get_window_extent(renderer))
            assert f"peak {400}" in notes[0].get_text()
        for t in texts(fig):
            assert t.get_fontsize() >= MIN_PT, t.get_text()
    finally:
        plt.close(fig)
