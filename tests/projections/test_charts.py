"""The time-series charts of report.html and the dashboard, read from the matplotlib
Figures they draw: bins chosen from the run's span, means over the time a bin covers,
axes that start at the run's start, labels in the right unit."""

from __future__ import annotations

import base64
import re

import matplotlib.pyplot as plt
import numpy as np
import orjson
import pytest

from projections.dashboard import build_snapshot
from projections.gantt import GanttCollector, collect, gantt_png
from projections.report import (
    _Timebase,
    allocation_figure,
    chart_bin,
    cluster_figure,
    draw_gantt,
    source_bin,
    wait_figure,
)
from projections.simulate import shared_gantt_window, write_reports
from projections.summary import fold, summarize
from projections.usage import HOUR, JournalBuilder

H8 = list(range(8))
DAY = 24 * HOUR
# a young cluster that came up 30 min 17 s after an hour: no bin edge at its start
YOUNG = JournalBuilder.START + 1817


def young_cluster(seconds: float = 125) -> JournalBuilder:
    """24 GPUs, all running one allocation's work for `seconds` (two leaves known)."""
    j = JournalBuilder(start=YOUNG)
    j.host("h0").host("h1").host("h2")
    j.budget("lab", 1).budget("lab/a", 3).budget("lab/b", 1)
    j.submit("big", "lab/a", 24).place("big", {"h0": H8, "h1": H8, "h2": H8})
    j.submit("small", "lab/b", 2)
    j.at(seconds).tick()
    return j


def charts(j: JournalBuilder):
    t0, t1 = j.events[0].time, j.events[-1].time
    proj = fold(j.events, bin_s=source_bin(t0, t1))
    tb = _Timebase(t0, t1, min_width=proj.bin_s)
    return proj, tb


@pytest.fixture
def close_figures():
    yield
    plt.close("all")


@pytest.mark.parametrize(
    ("span", "width"),
    [
        (125, 10),  # a 2-minute-old cluster: 10 s bins, not one hour-long bin
        (HOUR, 30),
        (3 * HOUR, 60),
        (12 * HOUR, 300),
        (2 * DAY, 900),
        (3 * DAY, HOUR),  # debug-flood: hourly, as before
        (30 * DAY, 6 * HOUR),
        (120 * DAY, DAY),
    ],
)
def test_chart_bins_follow_the_span(span, width):
    assert chart_bin(YOUNG, YOUNG + span) == width
    tb = _Timebase(YOUNG, YOUNG + span)
    assert tb.width == width
    assert 10 <= tb.n <= 200
    # rows are folded at the chart's bin, but never coarser than an hour
    assert source_bin(YOUNG, YOUNG + span) == min(width, HOUR)


def test_timebase_clips_to_the_run_and_divides_partial_bins_by_their_time():
    tb = _Timebase(YOUNG, YOUNG + 125)
    edges = tb.xedges()
    assert edges[0] == 0.0 and edges[-1] == pytest.approx(125 / 60)  # minutes
    assert np.all(np.diff(edges) > 0)
    assert tb.covered().sum() == pytest.approx(125)
    assert tb.covered()[0] == pytest.approx(3)  # 1817 s past the hour → bin ends at 1820
    assert tb.label == "minutes since start of run"


def test_young_cluster_usage_chart_shows_the_gpus_running(close_figures):
    """24 GPUs run for 125 s: every bin (the partial first and last too) shows 24, on an
    axis from 0 to ~2.1 minutes — not 0.8 GPUs in one hour-long bin at -0.5 h."""
    j = young_cluster()
    proj, tb = charts(j)
    rows = proj.hourly_rows()
    fig = allocation_figure(tb, rows, proj.delivered())
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title(loc="left").split()[0] for ax in panels] == ["lab/a", "lab/b"]
    lab_a = panels[0]
    received = next(line for line in lab_a.get_lines() if line.get_label() == "received (charged)")
    x, y = received.get_data()
    assert min(x) == 0.0 and max(x) == pytest.approx(125 / 60)
    assert np.allclose(y, 24.0)
    assert lab_a.get_xlim()[0] >= 0
    assert len(set(np.round(x, 6))) >= 10  # 10 s bins, not one flat hour
    assert "per 10 s" in fig._suptitle.get_text()
    assert any(ax.get_xlabel() == "minutes since start of run" for ax in panels)

    fig = cluster_figure(proj, tb)
    ax = fig.axes[0]
    assert ax.get_xlim()[0] == 0.0
    assert ax.get_xlabel() == "minutes since start of run"
    assert ax.get_ylabel() == "GPUs (mean per 10 s)"
    capacity = next(line for line in ax.get_lines() if line.get_label() == "healthy capacity")
    assert np.allclose(capacity.get_ydata(), 24.0)


def test_long_run_usage_chart_keeps_hourly_bins_in_hours(close_figures):
    j = JournalBuilder()
    j.host("h0").budget("lab", 1).budget("lab/a", 1)
    j.submit("w", "lab/a", 8).place("w", {"h0": H8})
    j.at(30 * HOUR).finish("w")
    j.at(72 * HOUR).tick()
    proj, tb = charts(j)
    assert proj.bin_s == HOUR and tb.width == HOUR
    fig = allocation_figure(tb, proj.hourly_rows(), proj.delivered())
    ax = fig.axes[0]
    assert ax.get_xlabel() == "hours since start of run"
    x, y = next(line for line in ax.get_lines() if line.get_label() == "owed").get_data()
    assert min(x) == 0.0 and max(x) == pytest.approx(72)
    assert np.allclose(y[x < 30], 8.0)  # owed its whole host while it ran


def test_dashboard_snapshot_folds_fine_bins_for_a_young_cluster():
    j = young_cluster()
    lines = [orjson.dumps(d) for d in j.dicts()]
    snap = build_snapshot(lines)
    assert snap.ok
    assert snap.chart_usage.bin_s == 10
    assert snap.usage.bin_s == HOUR  # delivered stays the hourly form
    assert snap.delivered == snap.usage.delivered()


# ------------------------------------------------------------------ GPU timeline
def gantt_of(j: JournalBuilder) -> GanttCollector:
    g = GanttCollector()
    for e in j.events:
        g.apply(e)
    g.close()
    return g


@pytest.mark.parametrize(
    ("seconds", "unit", "where"),
    [
        (45, "seconds", "the whole run, 45s"),
        (125, "minutes", "the whole run, 2m5s"),
        (2 * HOUR, "minutes", "the whole run, 2h"),
    ],
)
def test_gantt_of_a_short_run_speaks_seconds_or_minutes(close_figures, seconds, unit, where):
    fig, (w0, w1) = gantt_of(young_cluster(seconds)).figure(title="GPU timeline (fairshare)")
    ax = fig.axes[0]
    assert (w0, w1) == (YOUNG, YOUNG + seconds)
    assert ax.get_xlabel() == f"{unit} since start of run"
    per_unit = {"seconds": 1, "minutes": 60}[unit]
    assert ax.get_xlim() == pytest.approx((0, seconds / per_unit))
    title = ax.get_title(loc="left")
    assert title.startswith("GPU timeline (fairshare) — 2026-01-01 00:30:17 UTC → ")
    assert title.endswith(f"({where})")
    assert "0.0–0.0" not in title


def test_gantt_window_of_a_long_run_says_where_it_lies(close_figures):
    j = JournalBuilder()
    j.host("h0").budget("lab", 1).budget("lab/a", 1)
    j.submit("w", "lab/a", 8).place("w", {"h0": H8})
    j.at(72 * HOUR).finish("w")
    g = gantt_of(j)
    fig, _ = g.figure(window=(j.start + HOUR, j.start + 25 * HOUR))
    ax = fig.axes[0]
    assert ax.get_xlabel() == "hours since start of run"
    assert ax.get_xlim() == pytest.approx((1, 25))
    assert ax.get_title(loc="left") == (
        "GPU timeline — 2026-01-01 01:00 UTC → 2026-01-02 01:00 UTC  (1h–1d1h of a 3d run)"
    )


def test_a_gantt_window_past_the_end_of_the_run_stops_at_its_end(close_figures):
    """`--gantt-window 10h:100d` squeezed a 3-day run into the first 3% of the width."""
    j = JournalBuilder()
    j.host("h0").budget("lab", 1).budget("lab/a", 1)
    j.submit("w", "lab/a", 8).place("w", {"h0": H8})
    j.at(72 * HOUR).finish("w")
    fig, window = gantt_of(j).figure(window=(j.start + 10 * HOUR, j.start + 100 * 24 * HOUR))
    assert window == (j.start + 10 * HOUR, j.start + 72 * HOUR)
    assert fig.axes[0].get_xlim() == pytest.approx((10, 72))


# ------------------------------------------------------------------ shared window
def busy_run(folder, busy_from: float, busy_to: float):
    """A 72 h run whose one host is busy from `busy_from` to `busy_to` (hours)."""
    j = JournalBuilder()
    j.host("h0").budget("lab", 1).budget("lab/a", 1)
    j.at(busy_from * HOUR).submit("w", "lab/a", 8).place("w", {"h0": H8})
    j.at(busy_to * HOUR).finish("w")
    j.at(72 * HOUR).tick()
    folder.mkdir()
    j.write(folder / "journal.jsonl")
    return j


def embedded_images(html_text: str) -> list[bytes]:
    return [
        base64.b64decode(src)
        for src in re.findall(r'<img[^>]*\bsrc="data:image/png;base64,([^"]*)"', html_text)
    ]


def test_runs_of_several_policies_share_one_gantt_window(tmp_path):
    """Each run alone has its own busiest day (hours 2-26 vs 36-60); together they get
    one window (the busiest of the runs together), the same in both reports, and each
    gantt.png is its report's timeline (titled with the policy)."""
    start = JournalBuilder.START
    a = busy_run(tmp_path / "fairshare", 2, 20)
    b = busy_run(tmp_path / "legacy-priority", 40, 60)
    alone = [gantt_of(j).busiest_window() for j in (a, b)]
    assert alone[0] != alone[1]
    w0, w1 = shared_gantt_window([tmp_path / "fairshare", tmp_path / "legacy-priority"])
    assert w1 - w0 == DAY
    assert start + 36 * HOUR <= w0 <= start + 40 * HOUR  # all of the busier run's 20 h
    captions = set()
    for policy in ("fairshare", "legacy-priority"):
        folder = tmp_path / policy
        summary = summarize(folder / "journal.jsonl", policy=policy)
        write_reports(folder, summary, gantt_window=(w0, w1))
        assert sorted(p.name for p in folder.iterdir()) == [
            "gantt.png",
            "journal.jsonl",
            "report.html",
        ]
        text = (folder / "report.html").read_text()
        gantt_png = (folder / "gantt.png").read_bytes()
        assert embedded_images(text)[-1] == gantt_png
        expected, window = draw_gantt(collect(folder / "journal.jsonl"), policy, (w0, w1))
        assert gantt_png == expected and window == (w0, w1)
        captions.update(re.findall(r"Window: [^<]*\.", text))
    assert captions == {"Window: 2026-01-02 12:00 UTC → 2026-01-03 12:00 UTC."}


def test_gantt_png_is_titled_with_the_policy(close_figures):
    g = gantt_of(young_cluster())
    fig, _ = g.figure(title="GPU timeline (legacy-priority)")
    assert fig.axes[0].get_title(loc="left").startswith("GPU timeline (legacy-priority) — ")
    png, _ = draw_gantt(g, "legacy-priority")
    assert png == gantt_png(g, title="GPU timeline (legacy-priority)")


def four_leaves() -> JournalBuilder:
    j = JournalBuilder()
    j.host("h0").host("h1")
    j.budget("lab", 1).budget("ops", 1)
    for k, leaf in enumerate(("lab/a", "lab/b", "lab/c", "ops/x")):
        j.budget(leaf, 1)
        j.submit(f"w{k}", leaf, 4).place(
            f"w{k}", {f"h{k // 2}": [4 * (k % 2) + i for i in range(4)]}
        )
    j.at(6 * HOUR).tick()
    return j


def test_small_multiples_label_the_lowest_panel_of_every_column(close_figures):
    """4 leaves in a 3-column grid: the panels above the two empty cells keep their x
    tick labels and x label (sharex hid them), and the legend sits close to the panels."""
    proj, tb = charts(four_leaves())
    fig = allocation_figure(tb, proj.hourly_rows(), proj.delivered())
    fig.canvas.draw()
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title(loc="left").split()[0] for ax in panels] == [
        "lab/a",
        "lab/b",
        "lab/c",
        "ops/x",
    ]
    for ax in panels:
        labelled = [t for t in ax.get_xticklabels() if t.get_visible() and t.get_text()]
        if ax.get_title(loc="left").startswith("lab/a"):
            assert not labelled and not ax.get_xlabel()  # ops/x below it has them
        else:
            assert labelled, ax.get_title(loc="left")
            assert ax.get_xlabel() == "hours since start of run"
    hidden = [ax for ax in fig.axes if not ax.get_visible()]
    assert len(hidden) == 2 and not any(ax.get_xlabel() for ax in hidden)
    # no wide empty band between the legend and the top row's panel titles
    renderer = fig.canvas.get_renderer()
    legend_bottom = fig.legends[0].get_window_extent(renderer).y0
    titles_top = max(ax._left_title.get_window_extent(renderer).y1 for ax in panels[:3])
    assert 0 < legend_bottom - titles_top < 40  # pixels at 100 dpi


def test_unallocated_line_and_received_swatch_are_neutral(close_figures):
    """lab's hue is tab10 orange, the colour the unallocated line used to have: the line
    is now dark grey dash-dot, and the legend's 'received' swatch is grey, not the first
    panel's hue."""
    from matplotlib.colors import to_rgb

    from projections.gantt import palette

    j = JournalBuilder().host("h0")
    j.budget("lab", 1).budget("lab/a", 1).budget("ops", 1).budget("ops/x", 1)
    j.submit("filler", "lab/a", 4, min_runtime=0).place("filler", {"h0": [0, 1, 2, 3]})
    j.submit("train", "ops/x", 4).place("train", {"h0": [4, 5, 6, 7]})
    j.at(2 * HOUR).tick()
    proj, tb = charts(j)
    fig = allocation_figure(tb, proj.hourly_rows(), proj.delivered())
    _, rgb = palette(["lab/a", "ops/x"])
    hues = [tuple(np.round(c, 3)) for c in rgb]
    lab_a = fig.axes[0]
    (unalloc,) = [line for line in lab_a.get_lines() if line.get_label() == "unallocated"]
    assert np.allclose(unalloc.get_ydata()[1:-1], 4.0)
    color = to_rgb(unalloc.get_color())
    assert color[0] == color[1] == color[2]  # grey
    assert tuple(np.round(color, 3)) not in hues
    assert unalloc.get_linestyle() == "-."
    legend = fig.legends[0]
    texts = [t.get_text() for t in legend.get_texts()]
    received = dict(zip(texts, legend.legend_handles, strict=True))["received (charged)"]
    face = received.get_facecolor()[:3]
    assert face[0] == face[1] == face[2]


def test_every_received_line_stands_out_from_the_white_panel(close_figures):
    """Six leaves of one program (and one of another): the lightest shades (L* up to 88) drew the received
    line in a colour hardly visible on white (lab's multimodal/video, language/
    posttrain). Each line is now dark enough (L* <= 62, about 3:1 on white) and keeps
    its leaf's hue; the fill under it keeps the leaf's own shade, as in gantt.png."""
    import colorsys

    from matplotlib.colors import to_rgb

    from projections.gantt import palette

    leaves = [f"lab/team-{k}" for k in range(6)] + ["ops/x"]
    j = JournalBuilder()
    j.budget("lab", 1).budget("ops", 1)
    for k, leaf in enumerate(leaves):
        j.host(f"h{k}").budget(leaf, 1)
        j.submit(f"w{k}", leaf, 8).place(f"w{k}", {f"h{k}": H8})
    j.at(3 * HOUR).tick()
    proj, tb = charts(j)
    fig = allocation_figure(tb, proj.hourly_rows(), proj.delivered())
    _, shades = palette(leaves)
    assert max(_cie_lstar(row) for row in shades) > 80  # the case this is about
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert len(panels) == len(leaves)
    for ax, shade in zip(panels, shades, strict=True):
        (line,) = [ln for ln in ax.get_lines() if ln.get_label() == "received (charged)"]
        color = np.array(to_rgb(line.get_color()))
        assert _cie_lstar(color) <= 62, ax.get_title(loc="left")
        hue = colorsys.rgb_to_hls(*color)[0]
        assert hue == pytest.approx(colorsys.rgb_to_hls(*shade)[0], abs=0.01)
        fill = ax.collections[0].get_facecolor()[0][:3]
        assert np.allclose(fill, shade)


# ------------------------------------------------------------------ report wording
def test_preemption_legend_names_reasons_in_words(close_figures):
    from projections.report import preemption_figure

    j = JournalBuilder().host("h0").budget("lab", 1).budget("lab/a", 1)
    j.submit("w", "lab/a", 8).place("w", {"h0": H8})
    j.at(600).preempt("w", "fair_share")
    j.at(HOUR).tick()
    proj, tb = charts(j)
    fig = preemption_figure(proj, tb)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["fair share (1)"]
    assert ax.get_xlabel() == "minutes since start of run"


def test_a_report_without_preemptions_says_so(tmp_path):
    from projections.report import write_report

    j = young_cluster()
    journal = j.write(tmp_path / "journal.jsonl")
    summary = summarize(journal, policy="fairshare")
    text = write_report(journal, summary, tmp_path / "report.html").read_text()
    assert '<p class="sub">No preemptions in this run.</p>' in text
    assert "nothing to show" not in text
    assert ">preempted and not requeued<" in text


def legend_labels(j: JournalBuilder) -> list[str]:
    fig, _ = gantt_of(j).figure(title="GPU timeline")
    return [t.get_text().strip() for t in fig.axes[0].get_legend().get_texts()]


STYLE_KEYS = ["preemptible", "ended by preemption", "host unhealthy"]


def test_gantt_legend_keys_only_what_the_window_shows(close_figures):
    """A key for something the picture does not show reads as a bug ("where are the
    red outlines?"); each style key appears exactly when its marks do."""
    quiet = legend_labels(young_cluster(HOUR))  # protected all along (min runtime 1 h)
    assert quiet == ["lab/a"]  # the allocation that ran; no style key at all
    later = legend_labels(young_cluster(2 * HOUR))  # past its protection for the 2nd hour
    assert [k for k in STYLE_KEYS if k in later] == ["preemptible"]

    j = JournalBuilder(start=YOUNG)
    j.host("h0").host("h1").budget("lab", 1).budget("lab/a", 1)
    j.submit("w", "lab/a", 8).place("w", {"h0": H8}, protected_until=YOUNG + 2 * HOUR)
    j.at(600).health("h1", False).at(900).preempt("w").at(1200).tick()
    busy = legend_labels(j)
    assert [k for k in STYLE_KEYS if k in busy] == ["ended by preemption", "host unhealthy"]


def _longest_red_run_in_plot(fig) -> int:
    """The most pixels of the preemption red (#d62728) stacked in one column of the
    plot area (the legend's key is red too)."""
    fig.canvas.draw()
    rgb = np.asarray(fig.canvas.buffer_rgba())[..., :3].astype(int)
    box = fig.axes[0].get_window_extent()
    height = rgb.shape[0]
    plot = rgb[round(height - box.y1) : round(height - box.y0), round(box.x0) : round(box.x1)]
    red = np.abs(plot - (214, 39, 40)).max(axis=2) < 40
    longest = 0
    for column in red.T:
        run = 0
        for is_red in column:
            run = run + 1 if is_red else 0
            longest = max(longest, run)
    return longest


def test_a_preemption_in_a_1024_gpu_timeline_is_visible(close_figures):
    """In a lab-sized chart a 1-GPU bar is about 1 px tall, and its red outline alone
    was a smear no one could find: the moment it stopped carries a mark of its own,
    taller than a host's rows, in the preemption red."""
    j = JournalBuilder(start=YOUNG)
    for k in range(128):
        j.host(f"h{k}")
    j.budget("lab", 1).budget("lab/a", 1)
    j.submit("w", "lab/a", 1).place("w", {"h64": [3]})
    j.at(1800).preempt("w").at(3600).tick()
    fig, _ = gantt_of(j).figure()
    assert _longest_red_run_in_plot(fig) >= 10


@pytest.mark.parametrize(
    ("leaves", "groups"),
    [
        pytest.param(["a/x", "a/y", "b/z"], {"a", "b"}, id="top-levels-differ"),
        pytest.param(
            ["lab/nlp/pretrain", "lab/nlp/eval", "lab/vision/det", "lab/infra"],
            {"lab/nlp", "lab/vision", "lab/infra"},
            id="one-root",  # README's shape: every leaf was a shade of one blue
        ),
    ],
)
def test_hues_go_to_where_the_tree_first_branches(leaves: list[str], groups: set[str]) -> None:
    import colorsys

    from projections.gantt import palette

    hues, rgb = palette(leaves)
    assert set(hues) == groups
    # leaves of different groups get different hues; of one group, one hue in shades
    hue = [round(colorsys.rgb_to_hls(*row)[0], 3) for row in rgb]
    group_of = {
        leaf: next(g for g in groups if leaf == g or leaf.startswith(g + "/")) for leaf in leaves
    }
    for i, a in enumerate(leaves):
        for j, b in enumerate(leaves):
            assert (hue[i] == hue[j]) == (group_of[a] == group_of[b]), (a, b)


def _cie_lstar(rgb: np.ndarray) -> float:
    """CIE L* (perceived lightness, 0-100) of an sRGB colour, written out here rather
    than taken from the module under test."""
    linear = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    y = float(linear @ np.array([0.2126, 0.7152, 0.0722]))
    return 116.0 * np.cbrt(y) - 16.0 if y > (6 / 29) ** 3 else y * (29 / 3) ** 3


# 8 leaves over L* 28-88 are 8.6 apart; the old spread left light hues' leaves 0-4 apart
MIN_LSTAR_APART = 8.0


@pytest.mark.parametrize("size", range(2, 9), ids=lambda n: f"{n}-leaves")
def test_leaves_of_one_group_are_clearly_different_shades(size: int) -> None:
    """In gantt.png's legend the leaves of one team were shades too close to tell apart
    (7 or 8 leaves of a light hue came out the same colour). Every hue in the palette is
    checked: 12 groups of `size` leaves each."""
    import colorsys
    import itertools

    from projections.gantt import palette

    groups = [f"p{g:02d}" for g in range(12)]
    leaves = [f"{g}/team-{k}" for g in groups for k in range(size)]
    hues, rgb = palette(leaves)
    assert len(set(hues.values())) == 12
    for g, group in enumerate(groups):
        rows = rgb[g * size : (g + 1) * size]
        lightness = [_cie_lstar(row) for row in rows]
        closest = min(abs(a - b) for a, b in itertools.combinations(lightness, 2))
        assert closest >= MIN_LSTAR_APART, (group, hues[group], np.round(lightness, 1))
        assert lightness == sorted(lightness), group  # darker to lighter by path
        # one hue per group, whatever the shade
        assert len({round(colorsys.rgb_to_hls(*row)[0], 3) for row in rows}) == 1, group


def test_wait_cdf_keys_sit_below_the_curves_not_over_them(close_figures):
    """Each wait panel's key is outside its plot area (in the lower right corner it was
    drawn over the sweep and train curves rising through it), under the x label, and
    inside the picture."""
    j = JournalBuilder()
    j.host("h0").host("h1")
    j.budget("lab", 1).budget("lab/a", 1)
    for k, tag in enumerate(("debug", "eval", "sweep", "train", "filler")):
        j.submit(f"w{k}", "lab/a", 8, tags=(tag,))
    j.place("w0", {"h0": H8}).at(90).place("w1", {"h1": H8})
    j.at(HOUR).preempt("w0").place("w2", {"h0": H8})
    j.at(3 * HOUR).place("w0", {"h0": H8}).at(6 * HOUR).tick()
    proj, _ = charts(j)
    fig = wait_figure(proj)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    whole = fig.bbox
    keyed = [ax for ax in fig.axes if ax.get_legend() is not None]
    assert len(keyed) == 2
    for ax in keyed:
        key = ax.get_legend().get_window_extent(renderer)
        plot = ax.get_window_extent(renderer)
        label = ax.xaxis.label.get_window_extent(renderer)
        assert key.y1 <= plot.y0, (key, plot)  # below the plot area, not over curves
        assert key.y1 <= label.y0, (key, label)  # and below the x label
        assert whole.x0 <= key.x0 and key.x1 <= whole.x1 and whole.y0 <= key.y0, (key, whole)
    left, right = (ax.get_legend().get_window_extent(renderer) for ax in keyed)
    assert left.x1 <= right.x0  # the two keys side by side, not on each other


def _steady_rows(tb, received, owed):
    """One allocation's rows: per chart bin, `received` and `owed` mean GPUs."""
    starts = tb.edges_s()[:-1]
    covered = tb.covered()
    return [
        {
            "allocation": "agents/code",
            "hour": t,
            "received_gpu_s": r * c,
            "owed_gpu_s": o * c,
            "demand_gpu_s": r * c,
            "entitled_gpu_s": o * c,
            "unallocated_gpu_s": 0.0,
        }
        for t, c, r, o in zip(starts, covered, received, owed, strict=True)
    ]


def _clip_note(ax):
    """The panel's note naming a clipped peak: its title's second line (or any text)."""
    titles = (ax.get_title(loc=where) for where in ("left", "center", "right"))
    lines = [line for title in titles for line in title.splitlines()]
    lines += [t.get_text() for t in ax.texts]
    return [line for line in lines if "clipped" in line]


@pytest.mark.parametrize("spike_at", [1, 40], ids=["early-spike", "mid-run-spike"])
def test_allocation_chart_clips_a_lone_spike_and_says_so(close_figures, spike_at):
    """Steady usage of 60–100 GPUs owed 55, with one bin at 600: the axis tops out well
    below the spike (the steady part fills the panel), the clipped bin is marked and the
    panel names the peak."""
    tb = _Timebase(YOUNG, YOUNG + 7 * DAY)
    received = 60 + 40 * (np.arange(tb.n) % 5) / 4
    received[spike_at] = 600.0
    fig = allocation_figure(tb, _steady_rows(tb, received, np.full(tb.n, 55.0)), {})
    ax = fig.axes[0]
    bottom, top = ax.get_ylim()
    assert bottom == 0 and 100 <= top <= 200  # the steady part is readable
    assert _clip_note(ax) == ["peak 600 clipped ▲"]
    markers = [line for line in ax.get_lines() if line.get_marker() == "^"]
    assert len(markers) == 1
    mx, my = markers[0].get_data()
    assert len(mx) == 1 and my[0] == pytest.approx(top)
    assert tb.xedges()[spike_at] < mx[0] < tb.xedges()[spike_at + 1]


def test_allocation_chart_without_a_spike_shows_everything(close_figures):
    tb = _Timebase(YOUNG, YOUNG + 7 * DAY)
    received = 60 + 40 * (np.arange(tb.n) % 5) / 4
    fig = allocation_figure(tb, _steady_rows(tb, received, np.full(tb.n, 55.0)), {})
    ax = fig.axes[0]
    assert ax.get_ylim() == pytest.approx((0, 100 * 1.3))
    assert _clip_note(ax) == []
    assert not [line for line in ax.get_lines() if line.get_marker() == "^"]


def test_a_host_that_grew_is_drawn_with_its_new_gpus(close_figures):
    """h0 (8 GPUs) registered again with 12: `more` ran on its GPUs 8-11 and was not
    drawn (rows past the host's first size were dropped), and h1 kept rows that h0
    now needed. h0's block grows; h1 and the run on it move down."""
    from tests.domain.builders import cluster

    c = cluster(hosts=2, headroom_hosts=0).tree({"lab/a": 1})
    c.submit("full", "lab/a", gpus=8, min_runtime="1h")
    c.submit("on-h1", "lab/a", gpus=2, min_runtime="1h")
    c.at("10m").host("h0", 12)
    c.at("11m").submit("more", "lab/a", gpus=4, min_runtime="1h")
    assert c.placed("more").hosts == {"h0": (8, 9, 10, 11)}
    g = GanttCollector()
    for e in c.journal:
        g.apply(e)
    g.close(c.start + 3600)
    assert (g.n_rows, g.host_row0, g.host_gpus) == (20, {"h0": 0, "h1": 12}, {"h0": 12, "h1": 8})
    rows = np.frombuffer(g.rows, dtype=np.int32)
    runs = sorted(
        (round(g.start[i] - c.start), rows[g.row_off[i] : g.row_off[i] + g.row_len[i]].tolist())
        for i in range(len(g.start))
    )
    assert runs == [(0, list(range(8))), (0, [12, 13]), (660, [8, 9, 10, 11])]
    fig, _ = g.figure(title="GPU timeline")
    assert fig.axes[0].get_ylabel() == "GPUs by host (20 GPUs)"
