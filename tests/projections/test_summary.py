"""summary.json from hand-made journals whose numbers are worked out in the comments.

Cluster: h0, h1 with 8 GPUs each; lab/a and lab/b weighted 3:1 (12 and 4 GPUs of 16).
"""

from __future__ import annotations

import json

import pytest

from projections.summary import percentile, summarize, wait_stats
from projections.usage import HOUR, JournalBuilder

T0 = JournalBuilder.START
H8 = list(range(8))


def cluster() -> JournalBuilder:
    return (
        JournalBuilder()
        .host("h0")
        .host("h1")
        .budget("lab", 1)
        .budget("lab/a", 3)
        .budget("lab/b", 1)
    )


def mixed_run() -> JournalBuilder:
    """Two hours:
    a1  lab/a 8 GPUs train   h0        0 → 3600   charged 28 800
    f1  lab/b 4 GPUs filler  h1[4-7]   0 → 1800   unallocated, preempted for b1
                             h1[0-3] 2400 → 7200  (requeue wait 600)
    d1  lab/a 2 GPUs debug   h1[0,1] 600 → 2400   charged 3 600, wait 0
    b1  lab/b 4 GPUs train   h1[4-7] 1800 → 5400  charged 14 400, wait 600 (contended)
    busy 73 200 of 115 200 healthy GPU-s; 46 800 charged, 26 400 unallocated.
    """
    j = cluster()
    j.submit("a1", "lab/a", 8, tags=("train",)).place("a1", {"h0": H8})
    j.submit("f1", "lab/b", 4, min_runtime=0, tags=("filler",)).place("f1", {"h1": [4, 5, 6, 7]})
    j.at(600).submit("d1", "lab/a", 2, min_runtime=900, tags=("debug",)).place("d1", {"h1": [0, 1]})
    j.at(1200).submit("b1", "lab/b", 4, tags=("train",))
    j.at(1800).preempt("f1", "unallocated", beneficiary="b1").place("b1", {"h1": [4, 5, 6, 7]})
    j.at(2400).finish("d1").place("f1", {"h1": [0, 1, 2, 3]})
    j.at(3600).finish("a1")
    j.at(5400).finish("b1")
    j.at(7200).finish("f1")
    return j


@pytest.fixture(scope="module")
def mixed() -> dict:
    return summarize(mixed_run().events, policy="fairshare", engine={"wall_s": 1.5})


def test_workload_counts(mixed):
    assert mixed["policy"] == "fairshare"
    assert mixed["workloads"] == {
        "submitted": 4,
        "completed": 4,
        "rejected": 0,
        "preempted": 1,
        "unfinished": 0,
        "unfinished_pending": 0,
        "unfinished_running": 0,
        "failed": 0,
        "lost": 0,
        "cancelled": 0,
        "preempted_terminal": 0,
    }
    assert mixed["preemptions"] == 1
    assert mixed["preemptions_by_reason"] == {"unallocated": 1}
    assert mixed["rejected_by_reason"] == {}


def test_occupancy_and_fractions(mixed):
    assert mixed["occupancy"] == pytest.approx(73200 / 115200, abs=1e-6)
    # contended only 1200 → 1800 (b1 waits): a1 8 + d1 2 + f1 4 busy of 16
    assert mixed["occupancy_contended"] == pytest.approx(14 / 16, abs=1e-6)
    assert mixed["allocated_fraction"] == pytest.approx(46800 / 73200, abs=1e-6)
    assert mixed["unallocated_fraction"] == pytest.approx(26400 / 73200, abs=1e-6)
    assert mixed["gpu_hours"]["contended_hours"] == pytest.approx(600 / HOUR, abs=1e-3)
    assert mixed["period"]["hours"] == 2.0
    assert mixed["period"]["start_iso"] == "2026-01-01T00:00:00Z"


def test_contended_idle_is_charged_to_the_smallest_waiting_workload(mixed):
    # 1200 → 1800: 2 of 16 GPUs idle while b1 (4 GPUs) waits = 1 200 GPU-s
    assert mixed["contended_idle"] == {
        "gpu_hours": pytest.approx(1200 / HOUR, abs=1e-3),
        "headroom_gpu_hours": 0.0,  # two hosts: none kept for short jobs
        "by_smallest_waiting_gpus": {"4": 1.0},
    }


def test_contended_idle_while_only_a_gang_waits_then_while_small_work_waits():
    """g1 (16 GPUs) waits 0 → 3600 while a1 (2 GPUs) runs: 14 GPUs idle; from 1800, s1
    (1 GPU) waits too and is now the smallest waiting: the idle time goes to it."""
    j = cluster()
    j.submit("a1", "lab/a", 2).place("a1", {"h0": [0, 1]})
    j.submit("g1", "lab/b", 16)
    j.at(1800).submit("s1", "lab/b", 1)
    j.at(3600).finish("a1").cancel("s1").place("g1", {"h0": H8, "h1": H8})
    j.at(7200).finish("g1")
    s = summarize(j.events, policy="p")
    idle = s["contended_idle"]
    assert idle["gpu_hours"] == pytest.approx(14 * 3600 / HOUR, abs=1e-3)
    assert idle["by_smallest_waiting_gpus"] == {"1": 0.5, "16": 0.5}
    # the same idle time that occupancy_contended leaves out
    assert s["occupancy_contended"] == pytest.approx(2 / 16, abs=1e-6)


def test_delivered_mixed(mixed):
    # hour 0: a owed min(43 200, 32 400) = 32 400, received 32 400
    #         b owed min(14 400, 9 600) = 9 600 (b1 waits from 1200), received 7 200
    # hour 1: b owed 7 200, received 7 200; a has nothing
    d = mixed["delivered"]
    assert d["by_allocation"] == {"lab/a": 1.0, "lab/b": pytest.approx(14400 / 16800, abs=1e-6)}
    assert d["min"] == pytest.approx(14400 / 16800, abs=1e-6)
    assert d["overall"] == pytest.approx(46800 / 49200, abs=1e-6)
    assert d["hourly_strict"] == pytest.approx(46800 / 49200, abs=1e-6)
    assert d["owed_gpu_h"] == {"lab/a": 9.0, "lab/b": pytest.approx(16800 / HOUR, abs=1e-3)}


def test_waits_by_tag_and_requeue(mixed):
    w = mixed["wait_s"]
    # first waits: a1 0, f1 0, d1 0, b1 600 (nearest rank)
    assert w["all"] == {
        "p50": 0.0,
        "p90": 600.0,
        "p99": 600.0,
        "mean": 150.0,
        "count": 4,
        "unplaced": 0,
    }
    assert w["by_tag"]["train"] == {
        "p50": 0.0,
        "p90": 600.0,
        "p99": 600.0,
        "mean": 300.0,
        "count": 2,
        "unplaced": 0,
    }
    assert w["by_tag"]["debug"]["count"] == 1
    assert w["by_tag"]["debug"]["p90"] == 0.0
    assert set(w["by_tag"]) == {"train", "debug", "filler"}
    # and by allocation: every started wait is in its leaf's samples, once
    by_leaf = w["by_allocation"]
    assert sum(x["count"] for x in by_leaf.values()) == w["all"]["count"]
    assert max(x["p90"] for x in by_leaf.values() if x["count"]) == w["all"]["p90"]
    # f1's second placement is a requeue wait, not a queue wait
    r = mixed["requeue_wait_s"]
    assert r["all"]["count"] == 1
    assert r["all"]["p50"] == 600.0
    assert set(r["by_tag"]) == {"filler"}


def test_engine_is_passed_through(mixed):
    assert mixed["engine"] == {"wall_s": 1.5}
    assert summarize(cluster().events, policy="x")["engine"] == {
        "wall_s": None,
        "workloads_per_s": None,
        "peak_rss_mb": None,
    }


def test_summary_is_json_serialisable(mixed):
    assert json.loads(json.dumps(mixed)) == mixed


def test_delivered_is_capped_at_one_and_a_starved_leaf_is_zero():
    """lab/a runs 16 GPUs (owed 12), lab/b waits with 4 GPUs for the whole hour."""
    j = cluster()
    j.submit("a1", "lab/a", 8).submit("a2", "lab/a", 8).submit("b1", "lab/b", 4)
    j.place("a1", {"h0": H8}).place("a2", {"h1": H8})
    j.at(HOUR).finish("a1").finish("a2").cancel("b1")
    s = summarize(j.events, policy="p")
    d = s["delivered"]
    assert d["by_allocation"] == {"lab/a": 1.0, "lab/b": 0.0}
    assert d["min"] == 0.0
    # Σ min(received, owed) / Σ owed = (43 200 + 0) / (43 200 + 14 400)
    assert d["overall"] == pytest.approx(0.75, abs=1e-6)
    assert s["occupancy"] == 1.0
    assert s["occupancy_contended"] == 1.0
    assert s["wait_s"]["all"]["unplaced"] == 0
    assert s["workloads"]["cancelled"] == 1


def test_period_form_differs_from_strict_hourly_form():
    """lab/a alone: hour 0 gets 16 GPUs (owed 12), hour 1 gets 4 (owed 12, demand 16)."""
    j = cluster()
    j.submit("a1", "lab/a", 8).submit("a2", "lab/a", 8)
    j.place("a1", {"h0": H8}).place("a2", {"h1": H8})
    j.at(HOUR).preempt("a1").preempt("a2")
    j.submit("a3", "lab/a", 4).place("a3", {"h0": [0, 1, 2, 3]})
    j.at(2 * HOUR).finish("a3").cancel("a1").cancel("a2")
    d = summarize(j.events, policy="p")["delivered"]
    assert d["overall"] == pytest.approx((16 + 4) / 24, abs=1e-6)
    assert d["by_allocation"]["lab/a"] == pytest.approx(20 / 24, abs=1e-6)
    assert d["hourly_strict"] == pytest.approx((12 + 4) / 24, abs=1e-6)
    # per allocation too: hour 0's surplus pays nothing of hour 1's shortfall
    assert d["hourly_strict_by_allocation"] == {"lab/a": pytest.approx(16 / 24, abs=1e-6)}


def test_nothing_owed_gives_null_ratios():
    j = cluster()
    j.submit("f", "lab/b", 8, min_runtime=0).place("f", {"h0": H8})
    j.at(HOUR).finish("f")
    s = summarize(j.events, policy="p")
    assert s["delivered"]["overall"] is None
    assert s["delivered"]["min"] is None
    assert s["delivered"]["by_allocation"] == {}
    assert s["occupancy_contended"] is None
    assert s["unallocated_fraction"] == 1.0
    assert s["wait_s"]["by_tag"] == {}


@pytest.mark.parametrize(
    ("down_at", "occupancy"),
    [
        pytest.param(None, 12 / 16, id="healthy"),  # a1 on h0 (8), b1 on h1 (4)
        pytest.param(HOUR, (8 * 2 + 4) / (16 + 8), id="h1-down-after-an-hour"),
        pytest.param(0, 8 / 8, id="h1-down-from-the-start"),
    ],
)
def test_unhealthy_hosts_are_excluded_from_occupancy(down_at, occupancy):
    j = cluster()
    j.submit("a1", "lab/a", 8).place("a1", {"h0": H8})
    j.submit("b1", "lab/b", 4).place("b1", {"h1": [0, 1, 2, 3]})
    if down_at is not None:
        j.at(down_at).health("h1", False, "xid-79")
    j.at(2 * HOUR).finish("a1").finish("b1")
    s = summarize(j.events, policy="p")
    assert s["occupancy"] == pytest.approx(occupancy, abs=1e-6)
    # charged time on a draining host still counts as delivered
    assert s["gpu_hours"]["charged"] == pytest.approx(24.0)


def test_rejections_are_counted_by_reason_most_common_first():
    j = cluster()
    j.reject("w1", "min_runtime 9h exceeds the cap 8h")
    for n in range(3):
        j.reject(f"big{n}", "asks for 64 GPUs but cluster 'test' has 16 registered")
    j.reject("w2", "min_runtime 9h exceeds the cap 8h")
    j.add("budget.rejected", ref="in-b", error="not a manager", allocation="lab/a")  # no workload
    for n in range(11):  # 11 more reasons, one each: only the 10 most common are kept
        j.reject(f"odd{n}", f"odd reason {n}")
    s = summarize(j.events, policy="p")
    assert s["workloads"]["rejected"] == 16
    reasons = s["rejected_by_reason"]
    assert list(reasons.items())[:3] == [
        ("asks for 64 GPUs but cluster 'test' has 16 registered", 3),
        ("min_runtime 9h exceeds the cap 8h", 2),
        ("odd reason 0", 1),  # ties keep the order they were first seen
    ]
    assert len(reasons) == 10 and "odd reason 7" in reasons and "odd reason 8" not in reasons


def test_rejected_unfinished_and_censored_waits():
    j = cluster()
    j.reject("bad")
    j.submit("a1", "lab/a", 16, tags=("train",)).place("a1", {"h0": H8, "h1": H8})
    j.at(60).submit("d1", "lab/a", 1, tags=("debug",))  # never placed
    j.at(HOUR).preempt("a1", "fair_share", requeued=False)
    s = summarize(j.events, policy="p")
    assert s["workloads"]["submitted"] == 2
    assert s["workloads"]["rejected"] == 1
    assert s["workloads"]["unfinished"] == 1
    assert s["workloads"]["preempted"] == 1
    assert s["workloads"]["preempted_terminal"] == 1
    assert s["wait_s"]["all"]["count"] == 1
    assert s["wait_s"]["all"]["unplaced"] == 1
    assert s["wait_s"]["by_tag"]["debug"] == {
        "p50": None,
        "p90": None,
        "p99": None,
        "mean": None,
        "count": 0,
        "unplaced": 1,
    }


@pytest.mark.parametrize(
    "tags",
    [("debug", "debug"), ("debug", "train", "debug")],
    ids=["same-tag-twice", "same-tag-around-another"],
)
def test_a_tag_named_twice_counts_the_workload_once(tags):
    j = cluster()
    j.submit("d1", "lab/a", 1, tags=tags).place("d1", {"h0": [0]})
    j.at(60).submit("d2", "lab/a", 1, tags=tags)  # never placed
    s = summarize(j.events, policy="p")
    assert s["wait_s"]["by_tag"]["debug"]["count"] == 1
    assert s["wait_s"]["by_tag"]["debug"]["unplaced"] == 1


def test_preempted_counts_workloads_once_and_events_every_time():
    j = cluster()
    j.submit("r", "lab/a", 8).place("r", {"h0": H8})
    for k in range(1, 4):
        j.at(k * 600).preempt("r", "fair_share").at(k * 600 + 60).place("r", {"h0": H8})
    j.at(HOUR).finish("r")
    s = summarize(j.events, policy="p")
    assert s["preemptions"] == 3
    assert s["workloads"]["preempted"] == 1
    assert s["requeue_wait_s"]["all"]["count"] == 3
    assert s["requeue_wait_s"]["all"]["mean"] == 60.0
    assert s["wait_s"]["all"]["count"] == 1


def test_end_extends_the_run_past_the_last_event():
    j = cluster()
    j.submit("a1", "lab/a", 8).place("a1", {"h0": H8})
    j.at(HOUR).finish("a1")
    assert summarize(j.events, policy="p")["occupancy"] == pytest.approx(0.5)
    later = summarize(j.events, policy="p", end=T0 + 2 * HOUR)
    assert later["occupancy"] == pytest.approx(0.25)
    assert later["period"]["hours"] == 2.0


def test_end_before_the_last_event_ignores_later_events():
    j = mixed_run()
    s = summarize(j.events, policy="p", end=T0 + 1000)
    # at 1000 s: a1, f1 and d1 submitted; b1 not yet; nothing finished
    assert s["workloads"]["submitted"] == 3
    assert s["workloads"]["completed"] == 0
    assert s["workloads"]["unfinished"] == 3
    assert s["period"]["end"] == T0 + 1000


def test_summarize_reads_a_journal_path(tmp_path, mixed):
    path = mixed_run().write(tmp_path / "journal.jsonl")
    from_file = summarize(path, policy="fairshare", engine={"wall_s": 1.5})
    assert from_file == mixed


@pytest.mark.parametrize(
    ("values", "p", "expected"),
    [
        pytest.param([5.0], 50, 5.0, id="single"),
        pytest.param([float(v) for v in range(1, 11)], 50, 5.0, id="p50-of-10"),
        pytest.param([float(v) for v in range(1, 11)], 90, 9.0, id="p90-of-10"),
        pytest.param([float(v) for v in range(1, 11)], 99, 10.0, id="p99-of-10"),
        pytest.param([float(v) for v in range(1, 101)], 99, 99.0, id="p99-of-100"),
        pytest.param([float(v) for v in range(1, 101)], 90, 90.0, id="p90-of-100"),
    ],
)
def test_percentile_is_nearest_rank(values, p, expected):
    assert percentile(sorted(values), p) == expected


def test_wait_stats_empty_is_null():
    assert wait_stats([]) == {
        "p50": None,
        "p90": None,
        "p99": None,
        "mean": None,
        "count": 0,
        "unplaced": 0,
    }


def _gang_beside_headroom(headroom: int | None) -> JournalBuilder:
    """8 hosts, h0..h5 busy, a 24-GPU gang waiting for an hour beside h6 and h7 idle;
    `headroom`: the journal's config says so (None: no config record, the default)."""
    from domain.config import SchedulerConfig

    j = JournalBuilder()
    if headroom is not None:
        config = {**SchedulerConfig().model_dump(mode="json"), "headroom_hosts": headroom}
        j.add("config.set", config=config)
    for i in range(8):
        j.host(f"h{i}")
    j.budget("lab", 1).budget("lab/a", 1)
    for i in range(6):
        j.submit(f"r{i}", "lab/a", 8).place(f"r{i}", {f"h{i}": H8})
    j.submit("gang", "lab/a", 24)
    j.at(HOUR).tick()
    return j


@pytest.mark.parametrize(
    ("headroom", "kept_idle"),
    [
        pytest.param(None, 8.0, id="default-one-host"),  # 8 hosts keep one: h7
        pytest.param(0, 0.0, id="none-kept"),
        pytest.param(5, 8.0, id="capped-at-one-in-eight"),
    ],
)
def test_idle_time_on_the_hosts_kept_for_short_jobs_is_counted_apart(
    headroom: int | None, kept_idle: float
) -> None:
    """Idle GPUs beside a waiting gang are 16; the headroom host's 8 of them are the
    price of short jobs never waiting, not a scheduling loss."""
    idle = summarize(_gang_beside_headroom(headroom).events, policy="p")["contended_idle"]
    assert idle["gpu_hours"] == pytest.approx(16.0, abs=1e-3)
    assert idle["headroom_gpu_hours"] == pytest.approx(kept_idle, abs=1e-3)


# ------------------------------------------------ work no policy could place is not owed
def _bigger_than_what_is_left() -> JournalBuilder:
    """lab/a runs 8 GPUs on h0 for 2 h; lab/b's 16-GPU job waits from the start, and
    h1 is removed at once: from then on no scheduler could place it."""
    j = cluster()
    j.submit("a1", "lab/a", 8).place("a1", {"h0": H8})
    j.submit("b1", "lab/b", 16)
    j.add("host.removed", actor="admin", host="h1")
    j.at(2 * HOUR).finish("a1")
    return j


def _more_than_the_healthy_hosts_hold() -> JournalBuilder:
    """h0, h1 of 4 GPUs, h2 of 8 unhealthy for the first hour; a 12-GPU job (a gang:
    more than the 8 healthy GPUs) waits from 0, may run from 1 h (repaired) but waits
    till 2 h, runs an hour. (An 8-GPU job would be a gang of h0 and h1 meanwhile: work
    bigger than every healthy host is owed as soon as they hold it together.)"""
    j = JournalBuilder().host("h0", 4).host("h1", 4).host("h2", 8)
    j.budget("lab", 1).budget("lab/a", 1)
    j.health("h2", False, "xid-79").submit("b1", "lab/a", 12)
    j.at(HOUR).health("h2", True, "repaired")
    j.at(2 * HOUR).place("b1", {"h2": H8, "h0": H8[:4]})
    j.at(3 * HOUR).finish("b1")
    return j


def _bigger_than_every_healthy_host() -> JournalBuilder:
    """As `_more_than_the_healthy_hosts_hold`, with an 8-GPU job: a gang of h0 and h1
    while h2 is down, so owed from the start (it was unrunnable demand for the first
    hour while single-host work waited for h2's repair)."""
    j = JournalBuilder().host("h0", 4).host("h1", 4).host("h2", 8)
    j.budget("lab", 1).budget("lab/a", 1)
    j.health("h2", False, "xid-79").submit("b1", "lab/a", 8)
    j.at(HOUR).health("h2", True, "repaired")
    j.at(2 * HOUR).place("b1", {"h2": H8})
    j.at(3 * HOUR).finish("b1")
    return j


def _requeued_after_its_host_was_removed() -> JournalBuilder:
    """A 16-GPU gang runs an hour on h0 + h1; h1 is removed and the gang requeued: it
    waits an hour more on a cluster of 8 GPUs, then is cancelled."""
    j = cluster()
    j.submit("a1", "lab/a", 16).place("a1", {"h0": H8, "h1": H8})
    j.at(HOUR).add("host.removed", actor="admin", host="h1")
    j.preempt("a1", "gpus_removed", requeued=True)
    j.at(2 * HOUR).cancel("a1")
    return j


@pytest.mark.parametrize(
    ("journal", "by_allocation", "owed", "unrunnable"),
    [
        pytest.param(
            _bigger_than_what_is_left,
            {"lab/a": 1.0},  # lab/b was owed nothing: no policy could have run b1
            {"lab/a": 12.0, "lab/b": 0.0},  # a: min(¾ × 8 GPUs, 8) × 2 h
            {"lab/b": 32.0},  # b1's 16 GPUs × 2 h
            id="host-removed-under-waiting-work",
        ),
        pytest.param(
            _more_than_the_healthy_hosts_hold,
            {"lab/a": 0.5},  # owed 12 GPU-h in each of hours 1 and 2, received in hour 2
            {"lab/a": 24.0},
            {"lab/a": 12.0},  # the first hour, while h2 was down
            id="more-than-the-healthy-hosts-hold",
        ),
        pytest.param(
            _bigger_than_every_healthy_host,
            {"lab/a": 1 / 3},  # owed 8 GPU-h in each of hours 0-2, received in hour 2
            {"lab/a": 24.0},
            {},
            id="bigger-than-every-healthy-host",
        ),
        pytest.param(
            _requeued_after_its_host_was_removed,
            {"lab/a": 1.0},  # first hour: owed min(¾ × 16, 16), received 16 GPU-h
            {"lab/a": 12.0},
            {"lab/a": 16.0},  # waiting for 16 GPUs of 8 in the second
            id="requeued-after-its-host-was-removed",
        ),
    ],
)
def test_waiting_work_the_healthy_hosts_could_never_hold_is_not_owed(
    journal, by_allocation, owed, unrunnable
):
    d = summarize(journal().events, policy="p")["delivered"]
    assert d["by_allocation"] == pytest.approx(by_allocation)
    assert d["owed_gpu_h"] == pytest.approx(owed)
    assert d["unrunnable_gpu_h"] == pytest.approx(unrunnable)


def test_runnable_waiting_work_is_owed_and_nothing_is_unrunnable(mixed):
    assert mixed["delivered"]["unrunnable_gpu_h"] == {}
