"""report.html (self-contained, numbers present) and gantt.png (valid, sensible, fast
enough to draw, right window)."""

from __future__ import annotations

import base64
import json
import re
import struct

import pytest

from projections.gantt import GanttCollector, write_gantt
from projections.report import _contended_idle_rows, fmt_dur, fmt_pct, write_report
from projections.summary import summarize
from projections.usage import HOUR, JournalBuilder

T0 = JournalBuilder.START
H8 = list(range(8))
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == PNG_MAGIC
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def run() -> JournalBuilder:
    """Two leaves of lab (3:1) plus a second top-level; a preemption, a drain, tags."""
    j = JournalBuilder()
    j.host("h0").host("h1").host("h2")
    j.budget("lab", 3).budget("lab/a", 3).budget("lab/b", 1).budget("ops", 1).budget("ops/x", 1)
    j.submit("a1", "lab/a", 8, tags=("train",)).place("a1", {"h0": H8})
    j.submit("f1", "lab/b", 4, min_runtime=0, tags=("filler",)).place("f1", {"h1": [4, 5, 6, 7]})
    j.submit("x1", "ops/x", 12, tags=("train",)).place("x1", {"h1": [0, 1, 2, 3], "h2": H8})
    j.at(600).submit("d1", "lab/a", 2, min_runtime=900, tags=("debug",))
    j.at(900).preempt("f1", "unallocated", beneficiary="d1").place("d1", {"h1": [4, 5]})
    j.at(1800).health("h2", False, "xid-79")
    j.at(2400).finish("d1").place("f1", {"h1": [4, 5, 6, 7]})
    j.at(3600).preempt("x1", "drain", requeued=False).add("host.drained", host="h2")
    j.at(2 * HOUR).finish("a1").finish("f1")
    return j


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    j = run()
    journal = j.write(out / "journal.jsonl")
    summary = summarize(journal, policy="fairshare", engine={"wall_s": 0.25, "peak_rss_mb": 99})
    path = write_report(journal, summary, out / "report.html")
    return out, path.read_text(encoding="utf-8"), summary


def test_report_is_one_offline_file(report):
    out, text, _ = report
    assert sorted(p.name for p in out.iterdir()) == ["journal.jsonl", "report.html"]
    assert text.startswith("<!DOCTYPE html>")
    assert not re.search(r"https?://", text)
    assert not re.search(r"<(link|iframe|object|embed)\b", text, re.I)
    assert not re.search(r"<script[^>]*\bsrc=", text, re.I)
    assert "@import" not in text and "url(" not in text
    srcs = re.findall(r'<img[^>]*\bsrc="([^"]*)"', text)
    assert len(srcs) == 5  # cluster, allocations, waits, preemptions, gantt
    for src in srcs:
        assert src.startswith("data:image/png;base64,")
        width, height = png_size(base64.b64decode(src.split(",", 1)[1]))
        assert width >= 800 and height >= 200


def test_report_title_names_policy_and_period(report):
    _, text, _ = report
    assert "<title>allot report — fairshare</title>" in text
    assert "2026-01-01 00:00 UTC → 2026-01-01 02:00 UTC" in text


def test_report_shows_the_summary_numbers(report):
    _, text, summary = report
    embedded = re.search(r'<script type="application/json" id="summary">(.*?)</script>', text, re.S)
    assert embedded is not None
    assert json.loads(embedded.group(1)) == summary
    for value in (
        summary["occupancy"],
        summary["delivered"]["overall"],
        summary["delivered"]["by_allocation"]["lab/a"],
    ):
        assert fmt_pct(value) in text
    # per-allocation and per-tag rows are there, with the preemption reasons
    for needle in ("lab/a", "lab/b", "ops/x", "debug", "filler", "train", "drain", "unallocated"):
        assert f">{needle}<" in text
    # engine figures are passed through
    assert ">peak memory (MB)<" in text and ">99<" in text
    assert ">wall time (s)<" in text and ">peak_rss_mb<" not in text
    assert ">preempted and not requeued<" in text and ">preempted_terminal<" not in text
    # d1 waited only while all 24 GPUs were busy: no idle time to explain
    assert summary["contended_idle"] == {
        "gpu_hours": 0.0,
        "headroom_gpu_hours": 0.0,
        "by_smallest_waiting_gpus": {},
    }
    assert '<td class="">idle while work waited (GPU-h)</td><td class="num">0.0</td>' in text


def test_report_numbers_match_the_journal(report):
    _, _, s = report
    # charged: a1 8×2h + d1 2×1500s + x1 12×1h (x1 partly on h2, which fails at 0.5h)
    assert s["gpu_hours"]["charged"] == pytest.approx(16 + 2 * 1500 / HOUR + 12, abs=1e-3)
    # busy on healthy hosts: 24×900 + 22×900 + 14×600 + 16×1200 + 12×3600 = 112 200
    # healthy: 24×1800 + 16×5400 = 129 600
    assert s["occupancy"] == pytest.approx(112200 / 129600, abs=1e-6)
    assert s["preemptions_by_reason"] == {"drain": 1, "unallocated": 1}
    assert s["workloads"]["preempted_terminal"] == 1
    assert s["wait_s"]["by_tag"]["debug"]["p50"] == 300.0


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0 s"),
        (4.5, "4.5 s"),
        (24, "24 s"),
        (300, "5.0 min"),
        (6480, "1.8 h"),
        (3 * 86400, "3.0 d"),
    ],
)
def test_duration_format(seconds, text):
    assert fmt_dur(seconds) == text


def test_gantt_png_is_valid_and_sensibly_sized(tmp_path):
    out = tmp_path / "gantt.png"
    window = write_gantt(run().events, out)
    assert window == (T0, T0 + 2 * HOUR)  # short run: all of it
    width, height = png_size(out.read_bytes())
    assert width == 1300  # the report's other charts' width: fits a 1024 px window
    assert 300 <= height <= 1800
    assert out.stat().st_size > 5_000


def test_gantt_records_intervals_with_their_flags():
    g = GanttCollector()
    for e in run().events:
        g.apply(e)
    g.close()
    runs = {
        (g.leaves[g.leaf[i]], g.start[i] - T0, g.end[i] - T0): (
            bool(g.preempted[i]),
            g.preemptible_from[i] - T0,
            sorted(g.rows[g.row_off[i] : g.row_off[i] + g.row_len[i]]),
        )
        for i in range(len(g.start))
    }
    inf = float("inf")
    assert runs[("lab/a", 0, 7200)] == (False, 3600, list(range(8)))  # h0 = rows 0-7
    assert runs[("lab/b", 0, 900)] == (True, 0, [12, 13, 14, 15])  # unallocated: hatched
    assert runs[("ops/x", 0, 3600)] == (True, 3600, [8, 9, 10, 11, *range(16, 24)])
    assert runs[("lab/a", 900, 2400)] == (False, 1800, [12, 13])
    assert runs[("lab/b", 2400, 7200)] == (False, 2400, [12, 13, 14, 15])
    assert len(runs) == 5
    assert g.unhealthy == [("h2", T0 + 1800, T0 + 2 * HOUR)]
    assert inf not in list(g.preemptible_from)


def test_gantt_default_window_is_the_busiest_day():
    j = JournalBuilder()
    j.host("h0").budget("lab", 1).budget("lab/a", 1)
    j.at(3 * HOUR).submit("quiet", "lab/a", 1).place("quiet", {"h0": [0]})
    j.at(4 * HOUR).finish("quiet")
    j.at(30 * HOUR).submit("busy", "lab/a", 8).place("busy", {"h0": H8})
    j.at(50 * HOUR).finish("busy")
    j.at(72 * HOUR).tick()
    g = GanttCollector()
    for e in j.events:
        g.apply(e)
    g.close()
    w0, w1 = g.busiest_window()
    assert w1 - w0 == 24 * HOUR
    assert T0 + 26 * HOUR <= w0 <= T0 + 30 * HOUR  # covers all 20 busy hours


def test_gantt_window_and_row_limit(tmp_path):
    out = tmp_path / "gantt.png"
    window = (T0 + 600, T0 + 1800)
    assert write_gantt(run().events, out, window=window, max_rows=8) == window
    _, height_limited = png_size(out.read_bytes())
    write_gantt(run().events, out, window=window)
    _, height_full = png_size(out.read_bytes())
    assert height_limited < height_full


@pytest.mark.parametrize(
    ("min_runtime", "hatched"),
    [pytest.param(0, True, id="unallocated-is-hatched"), pytest.param(7200, False, id="protected")],
)
def test_gantt_hatches_preemptible_time(tmp_path, min_runtime, hatched):
    """One host fully used for the whole window: count white stripe pixels in the bar."""
    import matplotlib.image as mpimg

    j = JournalBuilder().host("h0").budget("lab", 1).budget("lab/a", 1)
    j.submit("w", "lab/a", 8, min_runtime=min_runtime).place("w", {"h0": H8})
    j.at(HOUR).finish("w")
    out = tmp_path / "gantt.png"
    write_gantt(j.events, out)
    img = mpimg.imread(out)[..., :3]
    h, w, _ = img.shape
    # the middle of the plot area is inside the bar whatever the margins
    patch = img[int(h * 0.35) : int(h * 0.65), int(w * 0.3) : int(w * 0.6)]
    whiteish = (patch.min(axis=-1) > 0.85).mean()
    if hatched:
        assert 0.15 < whiteish < 0.5
    else:
        assert whiteish < 0.01


def test_contended_idle_rows_name_what_the_smallest_waiting_workload_needed():
    rows = _contended_idle_rows(
        {"gpu_hours": 5.0, "by_smallest_waiting_gpus": {"1": 0.1, "16": 0.9}}
    )
    assert rows == [
        ["idle while work waited (GPU-h)", "5.0"],
        ["… by the smallest waiting workload's GPUs", "1 GPU 10.0% · 16 GPUs 90.0%"],
    ]
    assert _contended_idle_rows(None) == []
    kept = _contended_idle_rows({"gpu_hours": 5.0, "headroom_gpu_hours": 4.0})
    assert kept == [
        ["idle while work waited (GPU-h)", "5.0"],
        ["… of it on hosts kept for short jobs", "4.0"],
    ]


def weight_change(at_h: float | None) -> JournalBuilder:
    """One 8-GPU host, lab/a and lab/b 1:1 (shares 50%); lab/a runs 4 GPUs (its demand)
    from 0 to 6h. `at_h`: lab/b's weight becomes 3 then (lab/a's share 25%)."""
    j = JournalBuilder().host("h0")
    j.budget("lab", 1).budget("lab/a", 1).budget("lab/b", 1)
    j.submit("a", "lab/a", 4).place("a", {"h0": [0, 1, 2, 3]})
    if at_h is not None:
        j.at(at_h * HOUR).budget("lab/b", 3)
    j.at(6 * HOUR).finish("a")
    return j


@pytest.mark.parametrize(
    ("at_h", "share", "owed"),
    [
        (None, "50.00%", "24.0"),  # min(50% x 8, 4) = 4 GPUs owed for 6 h
        # owed min(4, 4) x 3 h + min(25% x 8, 4) x 3 h = 12 + 6: both shares, where the
        # final one alone would make it 12
        (
            3,
            "25.00% now<br><small>(50.00% at first, 25.00% from 2026-01-01 03:00 UTC)</small>",
            "18.0",
        ),
    ],
    ids=["share-unchanged", "weight-changed-mid-run"],
)
def test_the_share_beside_owed_says_when_a_budget_change_moved_it(
    tmp_path, at_h: float | None, share: str, owed: str
):
    """report.html showed only the final share next to owed computed from both."""
    journal = weight_change(at_h).write(tmp_path / "journal.jsonl")
    summary = summarize(journal, policy="fairshare")
    text = write_report(journal, summary, tmp_path / "report.html").read_text(encoding="utf-8")
    row = re.search(r"<tr><td class=\"\">lab/a</td>(.*?)</tr>", text, re.S)
    assert row is not None
    cells = re.findall(r'<td class="num">(.*?)</td>', row.group(1), re.S)
    assert cells[:2] == [share, owed]
    assert "share (at the end)" in text and "with the share in force that hour" in text


def _cards_of(text: str) -> list[tuple[str, str]]:
    return re.findall(
        r'<div class="card"><div class="v">([^<]*)</div><div class="k">([^<]*)<', text
    )


def test_headline_waits_say_how_much_work_never_started(tmp_path):
    """The cards showed "p90 wait 0 s" for a run where half the work never started: the
    percentiles are of started work only, and nothing beside them said so."""
    j = JournalBuilder()
    j.host("h0").budget("lab", 1).budget("lab/a", 1)
    j.submit("a1", "lab/a", 8, tags=("train",)).place("a1", {"h0": H8})
    j.submit("a2", "lab/a", 8, tags=("train",))  # waits to the end
    j.at(HOUR).add("clock.tick")
    journal = j.write(tmp_path / "journal.jsonl")
    summary = summarize(journal, policy="fairshare")
    text = write_report(journal, summary, tmp_path / "report.html").read_text(encoding="utf-8")
    cards = _cards_of(text)
    assert ("0 s", "p90 wait (of work that started)") in cards
    assert ("1", "of 2 submitted never started") in cards
    assert not any(label == "p90 wait" for _, label in cards)


def test_headline_waits_of_a_run_where_all_work_started(report):
    _, text, summary = report
    cards = _cards_of(text)
    assert ("5.0 min", "median wait") not in cards  # d1 waited 300 s; a1, f1, x1 none
    assert ("0 s", "median wait") in cards
    assert (str(summary["workloads"]["submitted"]), "workloads submitted") in cards
    assert not any("never started" in label for _, label in cards)


def test_work_no_policy_could_place_is_named_beside_the_owed_table(tmp_path):
    """A 16-GPU job waiting after h1 is removed is owed nothing; the report says why its
    allocation has no delivered figure instead of leaving the row blank."""
    j = JournalBuilder()
    j.host("h0").host("h1").budget("lab", 1).budget("lab/a", 1)
    j.submit("a1", "lab/a", 16)
    j.add("host.removed", actor="admin", host="h1")
    j.at(HOUR).add("clock.tick")
    journal = j.write(tmp_path / "journal.jsonl")
    summary = summarize(journal, policy="fairshare")
    text = write_report(journal, summary, tmp_path / "report.html").read_text(encoding="utf-8")
    assert "could not hold even empty" in text
    assert "lab/a 16.0 GPU-h" in text
