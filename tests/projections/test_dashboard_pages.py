"""The dashboard's pages as HTML, from a hand-made journal (no server: the e2e test in
tests/e2e/test_dashboard.py drives the real one in Chromium)."""

from __future__ import annotations

import html
import re

import orjson
import pytest

from projections.dashboard import build_snapshot, queue_page
from projections.usage import JournalBuilder

H8 = list(range(8))


def snapshot(j: JournalBuilder):
    snap = build_snapshot([orjson.dumps(d) for d in j.dicts()])
    assert snap.ok, snap.error or snap.empty
    return snap


def named_queue() -> JournalBuilder:
    j = JournalBuilder().host("h0")
    j.budget("lab", 1).budget("lab/a", 1)
    j.submit("run1", "lab/a", 8).place("run1", {"h0": H8})
    j.at(60).add(
        "workload.submitted",
        actor="alice",
        workload="wait1",
        allocation="lab/a",
        gpus=4,
        min_runtime=3600.0,
        name="bert-finetune-lr3e-4",
    )
    j.at(120).tick()
    return j


def test_queue_tables_scroll_sideways_and_keep_times_and_hosts_on_one_line():
    text = queue_page(snapshot(named_queue()))
    for table in ("pending", "running"):
        assert f'<div class="scroll"><table class="{table}">' in text
    pending = re.search(r'<tr data-id="wait1">(.*?)</tr>', text, re.S)[1]
    assert re.search(r'<td class="nowrap" data-k="submitted">2026-01-01 00:01:00', pending)
    running = re.search(r'<tr data-id="run1">(.*?)</tr>', text, re.S)[1]
    assert '<td class="nowrap" data-k="nodelist">h0</td>' in running
    assert '<td class="nowrap" data-k="started">' in running


def test_queue_shows_the_workloads_name_under_its_id():
    text = queue_page(snapshot(named_queue()))
    pending = re.search(r'<tr data-id="wait1">(.*?)</tr>', text, re.S)[1]
    assert (
        '<a href="/workload/wait1">wait1</a><span class="wname" title="bert-finetune-lr3e-4">'
        "bert-finetune-lr3e-4</span>" in pending
    )
    running = re.search(r'<tr data-id="run1">(.*?)</tr>', text, re.S)[1]
    assert "wname" not in running  # no name, no empty line


def test_queue_explains_the_policy_in_a_sentence_with_the_full_chain_folded():
    text = queue_page(snapshot(named_queue()))
    hint = re.search(r"<p class='hint' id='policy'>(.*?)</p>", text, re.S)[1]
    assert "Policy <b>fairshare</b>: allocated work first;" in hint
    for raw in ("Default. Chain", "`", "Cycle.reclaim_holds", "1. allocated"):
        assert raw not in hint
    details = re.search(r"<details class='hint' id='policy-chain'>(.*?)</details>", text, re.S)
    assert details and "<summary>" in details[1]
    assert "Cycle.reclaim_holds" in details[1]  # the full chain is one click away


def test_a_plugin_policy_is_summed_up_by_its_docstrings_first_sentence():
    from projections.dashboard import policy_summary

    class Mine:
        """Orders by `team` size. Chain: 1. big teams; 2. `submit_time`."""

        name = "mine"

    assert policy_summary(Mine()) == "Orders by team size."


def half_hour_left() -> JournalBuilder:
    """run1 fills h0 and expects to run 30 minutes; wait1 waits for it."""
    j = JournalBuilder().host("h0")
    j.budget("lab", 1).budget("lab/a", 1)
    j.submit("run1", "lab/a", 8, min_runtime=900.0, expected_runtime=1800.0)
    j.place("run1", {"h0": H8})
    j.at(60).submit("wait1", "lab/a", 4)
    j.at(120).tick()
    return j


def test_queue_shows_when_waiting_work_is_expected_to_start_and_running_work_to_end():
    text = queue_page(snapshot(half_hour_left()))
    pending = re.search(r'<tr data-id="wait1">(.*?)</tr>', text, re.S)[1]
    assert '<td class="nowrap" data-k="expected_start">2026-01-01 00:30:00</td>' in pending
    assert '<td class="nowrap" data-k="expected_nodes">h0</td>' in pending
    running = re.search(r'<tr data-id="run1">(.*?)</tr>', text, re.S)[1]
    assert "2026-01-01 00:30:00 (finishes)" in running
    assert "The expected start is a forecast: it assumes no new work arrives" in text


def test_queue_says_when_waiting_work_will_not_start_within_the_forecast():
    text = queue_page(snapshot(named_queue()))  # run1 gave no runtime: it runs on
    pending = re.search(r'<tr data-id="wait1">(.*?)</tr>', text, re.S)[1]
    assert '<td class="nowrap" data-k="expected_start">N/A</td>' in pending
    assert "gave neither --runtime nor --expected-runtime" in text


def test_the_timeline_page_draws_what_the_forecast_expects_to_change():
    """Up to a little after the last expected change (at least an hour), not the whole
    two-day horizon, where minute-long jobs filled a sliver of the picture."""
    from projections.dashboard import timeline_page

    snap = snapshot(half_hour_left())
    status, text = timeline_page(snap, {})
    assert status == 200
    section = text[text.index("id='forecast-timeline'") :]
    assert "The next 1h, as the scheduler expects it" in section  # wait1 starts in 28m
    assert "Nothing is expected to change after that, up to the forecast's horizon (2d)" in (
        html.unescape(section)
    )
    assert re.search(r'<img[^>]+src="data:image/png;base64,[A-Za-z0-9+/=]{1000,}"', section)
    assert "It is a forecast: it assumes no new work arrives" in section
    # the picture is the forecast's: wait1 runs on h0 from 00:30 on
    assert any(
        r.type == "workload.placed" and r.workload == "wait1" for r in snap.forecast().records
    )


def test_the_dashboards_horizon_bounds_its_forecast():
    """`allot dashboard --horizon 20m`: wait1 is expected at 00:30, past 00:02 + 20m."""
    from projections.dashboard import Dashboard, timeline_page

    records = [orjson.dumps(d) for d in half_hour_left().dicts()]
    board = Dashboard(lambda: records, label="test", horizon_s=1200.0)
    snap = board.snapshot()
    pending = re.search(r'<tr data-id="wait1">(.*?)</tr>', queue_page(snap), re.S)[1]
    assert '<td class="nowrap" data-k="expected_start">N/A</td>' in pending
    _, text = timeline_page(snap, {})
    assert "The next 20m, as the scheduler expects it" in text


def test_the_workload_page_says_when_it_is_expected_to_start_as_why_does():
    """The workload page is `allot why` in a browser; it lacked the forecast lines."""
    from projections.dashboard import workload_page

    status, text = workload_page(snapshot(half_hour_left()), "wait1")
    assert status == 200
    assert "expected start: 2026-01-01 00:30:00 (in 28m) on h0" in text


def test_the_timeline_opens_on_a_running_clusters_last_day_and_a_runs_busiest():
    """A live cluster's recent past belongs beside the forecast of its next days; it
    opened on the busiest 24 h of the whole history."""
    from projections.dashboard import default_window

    j = JournalBuilder().host("h0")
    j.budget("lab", 1).budget("lab/a", 1)
    j.submit("busy", "lab/a", 8, min_runtime=900.0).place("busy", {"h0": H8})
    j.at(3600).finish("busy")
    j.at(5 * 86400).tick()  # quiet days since
    snap = snapshot(j)
    last = snap.gantt.last_time
    assert default_window(snap, wall=last + 60) == (last - 86400, last)  # live
    busiest = snap.gantt.busiest_window()
    assert default_window(snap, wall=last + 7 * 86400) == busiest  # a finished run
    assert busiest[0] - JournalBuilder.START < 3600  # the busy hour, not the quiet end


def crowded_queue() -> JournalBuilder:
    """One 8-GPU host, busy; five workloads waiting in two allocations."""
    j = JournalBuilder().host("h0")
    j.budget("lab", 1).budget("lab/a", 1).budget("lab/b", 1)
    j.submit("run1", "lab/a", 8).place("run1", {"h0": H8})
    for i, leaf in enumerate(["a", "b", "a", "b", "b"]):
        j.at(60 + i).submit(f"w{i}", f"lab/{leaf}", 8)
    j.at(120).tick()
    return j


def ids(text: str, table: str) -> list[str]:
    body = re.search(rf'<table class="{table}">(.*?)</table>', text, re.S)[1]
    return re.findall(r'<tr data-id="([^"]+)">', body)


def positions(text: str) -> list[int]:
    return [int(x) for x in re.findall(r'data-k="position">(\d+)<', text)]


def test_the_queue_page_filters_by_allocation_and_user_keeping_queue_positions():
    snap = snapshot(crowded_queue())
    everything = queue_page(snap)
    assert len(ids(everything, "pending")) == 5
    text = queue_page(snap, {"allocation": ["lab/b"]})
    assert sorted(ids(text, "pending")) == ["w1", "w3", "w4"]
    assert "<h2>Pending (3)</h2>" in text and "<h2>Running (0)</h2>" in text
    where = dict(zip(ids(everything, "pending"), positions(everything), strict=True))
    assert positions(text) == [where[w] for w in ids(text, "pending")]  # the whole queue's
    assert "value='lab/b'" in text  # the form keeps the filter
    # the parent allocation holds both leaves' work
    assert len(ids(queue_page(snap, {"allocation": ["lab"]}), "pending")) == 5
    # as the budget tree prints an inner node (`lab/`): the same node
    assert len(ids(queue_page(snap, {"allocation": ["lab/"]}), "pending")) == 5
    typo = queue_page(snap, {"allocation": ["lab/zz"]})
    assert "value='lab/zz'" in typo  # kept in the box, to be corrected
    # comma-separated lists, as the CLI's -a and -u take them
    both = queue_page(snap, {"allocation": ["lab/a,lab/b"]})
    assert sorted(ids(both, "pending")) == ["w0", "w1", "w2", "w3", "w4"]
    assert len(ids(queue_page(snap, {"user": ["alice, nobody"]}), "pending")) == 5
    nobody = queue_page(snap, {"user": ["nobody"]})
    assert "id='no-pending'>Nothing that matches the filter is waiting" in nobody
    assert len(ids(queue_page(snap, {"user": ["alice"]}), "pending")) == 5


def test_the_queue_page_shows_a_limited_number_of_rows_with_a_link_to_the_rest():
    snap = snapshot(crowded_queue())
    text = queue_page(snap, {"limit": ["2"], "allocation": ["lab/b"]})
    assert len(ids(text, "pending")) == 2
    assert "<h2>Pending (3)</h2>" in text  # the count is of every row
    more = re.search(r"<p class='hint' id='pending-more'>(.*?)</p>", text, re.S)[1]
    assert "Showing the first 2 of 3" in more
    assert "href='/queue?allocation=lab%2Fb&amp;limit=all'" in more  # filter kept
    assert len(ids(queue_page(snap, {"limit": ["all"], "allocation": ["lab/b"]}), "pending")) == 3
    assert "pending-more" not in queue_page(snap)  # 5 rows: under the default limit


@pytest.mark.parametrize(
    "query, message",
    [
        pytest.param({"allocation": ["lab/zz"]}, "no allocation 'lab/zz'", id="unknown-allocation"),
        pytest.param(
            {"limit": ["lots"]}, "limit 'lots': a number of rows or 'all'", id="bad-limit"
        ),
    ],
)
def test_a_wrong_queue_filter_is_said_and_the_whole_queue_shown(query, message):
    text = queue_page(snapshot(crowded_queue()), query)
    shown = re.search(r"<div class='msg' id='filter-error'>(.*?)</div>", text)[1]
    assert message in html.unescape(shown)
    assert len(ids(text, "pending")) == 5


def test_the_timeline_reads_a_time_of_day_as_the_pages_print_times():
    """`from=00:01` (pages print HH:MM) was read as Slurm's MM:SS: 1 s after the start."""
    from projections.dashboard import timeline_window
    from projections.usage import JournalBuilder

    START = JournalBuilder.START

    snap = snapshot(crowded_queue())  # 00:00 to 00:02 on its day
    assert timeline_window(snap, {"from": ["00:01"], "to": ["00:02"]}) == (START + 60, START + 120)
    assert timeline_window(snap, {"from": ["1m"]})[0] == START + 60  # an offset still
    assert timeline_window(snap, {"from": ["1m"], "to": ["now"]}) == (START + 60, START + 120)


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ({"from": ["0s"], "to": ["1e15"]}, "from 1970 to the year 9999"),  # was a 500
        ({"from": ["0s"], "to": ["400d"]}, "at most a year"),
    ],
    ids=["past-year-9999", "longer-than-a-year"],
)
def test_a_timeline_range_no_picture_can_show_is_said(query, says):
    from projections.dashboard import RangeError, timeline_window

    with pytest.raises(RangeError, match=says):
        timeline_window(snapshot(crowded_queue()), query)


@pytest.mark.parametrize(
    ("value", "meta", "said"),
    [
        pytest.param("30", 30, None, id="reloads"),
        pytest.param(
            "1",
            5,
            "refresh=1: a page reloads every 5 to 3600 seconds; this one every 5",
            id="too-often",
        ),
        pytest.param(
            "0", 5, "refresh=0: a page reloads every 5 to 3600 seconds; this one every 5", id="zero"
        ),
        pytest.param(
            "86400",
            3600,
            "refresh=86400: a page reloads every 5 to 3600 seconds; this one every 3600",
            id="too-seldom",
        ),
        pytest.param(
            "soon",
            None,
            "refresh='soon': a number of seconds from 5 to 3600; this page does not reload itself",
            id="not-a-number",
        ),
        pytest.param(
            "1²",
            None,
            "refresh='1²': a number of seconds from 5 to 3600; this page does not reload itself",
            id="not-an-ascii-number",
        ),
        pytest.param("", None, None, id="not-asked"),
    ],
)
def test_a_page_reloads_itself_when_asked_and_says_what_it_made_of_a_wrong_value(
    value: str, meta: int | None, said: str | None
) -> None:
    """A refresh outside 5 to 3600 s, or not a number, was dropped without a word."""
    from projections.dashboard import page, with_refresh

    html_text = with_refresh(page("Queue", "<p>x</p>"), {"refresh": [value]})
    tag = f"<meta http-equiv='refresh' content='{meta}'>"
    if meta is None:
        assert "http-equiv" not in html_text
    else:
        assert html_text.count(tag) == 1 and html_text.index(tag) < html_text.index("</head>")
    shown = re.search(r"<main><div class='msg' id='refresh-error'>(.*?)</div><p>x</p>", html_text)
    assert (html.unescape(shown[1]) if shown else None) == said


def big_cluster() -> JournalBuilder:
    """130 hosts of 8 GPUs (1,040 GPUs: more than one timeline picture), work on the
    first and the last host."""
    j = JournalBuilder()
    for i in range(130):
        j.host(f"h{i}")
    j.budget("lab", 1).budget("lab/a", 1)
    j.submit("first", "lab/a", 8).place("first", {"h0": list(range(8))})
    j.submit("last", "lab/a", 8).place("last", {"h129": list(range(8))})
    j.at(3600).tick()
    return j


def test_a_cluster_bigger_than_a_picture_is_paged_by_gpu_rows():
    """The timeline drew the first 1,024 GPUs and no way to see the rest (a 10k-GPU lab
    showed a tenth of itself)."""
    from projections.dashboard import timeline_page
    from projections.gantt import _bars

    snap = snapshot(big_cluster())
    status, page = timeline_page(snap, {})
    assert status == 200
    pages = re.search(r"<p class='sub' id='gpu-pages'>(.*?)</p>", page)[1]
    assert "GPUs 1–1,024 of 1,040" in pages and "next →" in pages and "previous" not in pages
    assert "gpu=1025" in html.unescape(pages)
    status, page = timeline_page(snap, {"gpu": ["1025"]})
    pages = re.search(r"<p class='sub' id='gpu-pages'>(.*?)</p>", page)[1]
    assert status == 200 and "GPUs 1,025–1,040 of 1,040" in pages and "← previous" in pages
    # the second page draws the last host's work, in its own rows
    g = snap.gantt
    w0, w1 = g.first_time, g.last_time
    solid, _, _ = _bars(g, w0, w1, 16, w0, 1.0, first=1024)
    assert len(solid[0]) == 1 and solid[0][0][:, 1].min() >= 0  # rows 1024.. drawn from 0
    assert len(_bars(g, w0, w1, 1024, w0, 1.0)[0][0]) == 1  # the first page: h0's only
    status, page = timeline_page(snap, {"gpu": ["5000"]})
    assert status == 400 and "a GPU row from 1 to 1,040" in html.unescape(page)


def _rows_drawn(page: str, alt: str) -> int:
    """The height in pixels of the page's picture `alt` (its PNG header's): a picture
    of more GPU rows is taller."""
    import base64

    data = re.search(rf'alt="{alt}" src="data:image/png;base64,([^"]+)"', page)[1]
    return int.from_bytes(base64.b64decode(data)[20:24], "big")


@pytest.mark.parametrize(
    ("gpu", "rows"),
    [pytest.param("1", "1–1,024", id="first-page"), pytest.param("1025", "1,025–1,040", id="last")],
)
def test_every_picture_of_the_timeline_shows_the_page_of_gpus_asked_for(gpu: str, rows: str):
    """?gpu= paged the picture of the past; the forecast's below it stayed on the first
    1,024 GPUs (the last host's work could not be seen coming)."""
    from projections.dashboard import timeline_page

    status, page = timeline_page(snapshot(big_cluster()), {"gpu": [gpu]})
    assert status == 200 and f"GPUs {rows} of 1,040" in page
    assert _rows_drawn(page, "expected GPU timeline") == _rows_drawn(page, "GPU timeline")


@pytest.mark.parametrize(
    ("path", "shown"),
    [
        pytest.param("lab", "lab", id="root"),
        pytest.param("lab/team", "team/", id="inner"),
        pytest.param("lab/team/a", "a", id="leaf"),
    ],
)
def test_the_budget_tree_names_its_root_without_a_trailing_slash(path: str, shown: str):
    """The root showed as `lab/`, a path no command takes for it."""
    from projections.dashboard import allocations_page

    j = JournalBuilder().host("h0")
    j.budget("lab", 1).budget("lab/team", 1).budget("lab/team/a", 1).budget("lab/b", 1)
    j.at(60).tick()
    text = allocations_page(snapshot(j))
    row = re.search(rf'<tr data-path="{path}">(.*?)</tr>', text, re.S)[1]
    name = re.search(r'data-k="name">(.*?)</td>', row)[1]
    assert html.unescape(name).replace("\xa0", "") == shown


def test_the_budget_tree_shows_per_user_limits_once_an_allocation_has_one():
    """The page listed each allocation's weight and share but not the per-user limits
    `allot shares` shows, so work waiting on QOSMaxGRESPerUser had no visible cause."""
    from projections.dashboard import allocations_page

    def limits_column(j: JournalBuilder) -> dict[str, str] | None:
        text = allocations_page(snapshot(j.at(60).tick()))
        if "per-user limits" not in text:
            return None
        rows = re.findall(r'<tr data-path="([^"]+)">(.*?)</tr>', text, re.S)
        return {p: re.search(r'data-k="limits">(.*?)</td>', row)[1] for p, row in rows}

    j = JournalBuilder().host("h0")
    j.budget("lab", 1).budget("lab/a", 1).budget("lab/b", 1)
    assert limits_column(j) is None  # no limit anywhere: no column
    j = JournalBuilder().host("h0")
    j.budget("lab", 1).budget("lab/a", 1).budget("lab/b", 1)
    j.add("budget.set", actor="admin", allocation="lab", max_gpus_per_user=16)
    j.add("budget.set", actor="admin", allocation="lab/a", max_pending_per_user=20)
    assert limits_column(j) == {"lab": "gpus 16", "lab/a": "pending 20", "lab/b": ""}


@pytest.mark.parametrize(
    ("ordering", "ratio"),
    [("fairshare", "inf"), ("fifo", "")],
    ids=["zero-share-fair-share", "no-fair-share"],
)
def test_a_pending_rows_ratio_reads_as_allot_queue_prints_it(ordering: str, ratio: str):
    """A zero share's ratio is `inf` (JSON null), as in `allot shares` and `allot queue`;
    a policy without fair share ranks nothing and shows no ratio (it said inf)."""
    j = JournalBuilder().host("h0").add("config.set", config={"ordering": ordering})
    j.budget("lab", 1).budget("lab/a", 1).budget("lab/zero", 0)
    j.submit("run1", "lab/a", 8).place("run1", {"h0": H8})
    j.at(60).submit("wait1", "lab/zero", 4)
    j.at(120).tick()
    pending = re.search(r'<tr data-id="wait1">(.*?)</tr>', queue_page(snapshot(j)), re.S)[1]
    assert f'<td class="num" data-k="ratio">{ratio}</td>' in pending, pending


def test_an_allocation_has_one_colour_in_the_past_and_in_the_forecast():
    """lab/a, lab/b and lab/c ran; only lab/c runs now. The forecast picture used to
    spread lab's shades over the leaves it showed (lab/c alone: the group's own colour),
    so lab/c was one shade above and another below on the timeline page; both pictures
    now spread them over the budget tree, and the forecast's key names only lab/c."""
    from projections.forecast import timeline

    j = JournalBuilder().host("h0").host("h1")
    j.budget("lab", 1).budget("ops", 1)
    for leaf in ("lab/a", "lab/b", "lab/c", "ops/x", "ops/y"):
        j.budget(leaf, 1)
    j.submit("a", "lab/a", 8).place("a", {"h0": H8})
    j.submit("b", "lab/b", 8).place("b", {"h1": H8})
    j.at(3600).finish("a").finish("b")
    j.submit("c", "lab/c", 8, expected_runtime=3600.0).place("c", {"h0": H8})
    j.at(3660).tick()
    snap = snapshot(j)
    past = snap.gantt
    ahead = timeline(snap.view, snap.forecast())
    assert ahead.leaves == ["lab/c"]
    past_tops, past_rgb = past.colors()
    ahead_tops, ahead_rgb = ahead.colors()
    assert list(ahead_rgb[0]) == list(past_rgb[past.leaves.index("lab/c")])
    assert ahead_tops == {"lab": past_tops["lab"]}  # ops ran in neither: no key for it
    assert len({tuple(c) for c in past_rgb}) == 3  # three shades of lab's hue


JAN5 = JournalBuilder.START + 4 * 86400 + 14 * 3600 + 17 * 60  # 2026-01-05 14:17 UTC


@pytest.mark.parametrize(
    "span",
    [7 * 86400, 5 * 3600, 1800],
    ids=["a-week-from-jan-5", "five-hours", "half-an-hour"],
)
def test_the_timeline_hint_and_range_error_give_an_example_inside_the_journal(span):
    """The hint's example UTC time came out as 2026-01-01 03:00 whatever the journal:
    outside one that runs from 01-05 on. It is now one of the journal's own times."""
    from datetime import UTC, datetime

    from projections.dashboard import timeline_page

    j = JournalBuilder(start=JAN5).host("h0")
    j.budget("lab", 1).budget("lab/a", 1)
    j.submit("run1", "lab/a", 8).place("run1", {"h0": H8})
    j.at(span).tick()
    snap = snapshot(j)
    t0, t1 = JAN5, JAN5 + span

    def inside(example: str) -> bool:
        t = datetime.strptime(example, "%Y-%m-%d %H:%M").replace(tzinfo=UTC).timestamp()
        return t0 <= t <= t1

    status, text = timeline_page(snap, {})
    assert status == 200
    hint = re.search(r"<span class='hint'>(.*?)</span>", text, re.S)[1]
    example = re.search(r"UTC times \((\d{4}-\d\d-\d\d \d\d:\d\d)\)", hint)[1]
    assert inside(example), (example, hint)
    assert "2026-01-01" not in hint

    status, text = timeline_page(snap, {"from": ["yesterday"]})
    assert status == 400
    error = html.unescape(re.search(r"id='range-error'>(.*?)</div>", text, re.S)[1])
    example = re.search(r"UTC time \(like (\d{4}-\d\d-\d\d \d\d:\d\d) or \d\d:\d\d\)", error)[1]
    assert inside(example), error
