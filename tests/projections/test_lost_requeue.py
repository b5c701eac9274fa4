"""A lost attempt of resumable work is requeued: every read model agrees.

The journal comes from the real core (`tests.domain.builders`): `w` (8 GPUs, resumable)
runs 20 minutes (protected for an hour), its host dies (xid-79) and the launcher
reports the attempt `lost`;
the host comes back at 30 minutes, `w` runs again (attempt 2) for an hour and completes.
"""

from __future__ import annotations

from typing import Any

import pytest

from allot.commands.executor import SimulatedLauncher
from domain.events import event_to_dict
from projections.acct import acct_rows
from projections.forecast import work_needed
from projections.metrics import MetricsCollector, exposition
from projections.summary import summarize
from projections.usage import JournalBuilder
from projections.views import fold, why
from tests.domain.builders import cluster

MIN = 60.0


def lost_then_completed(stop_after_lost: bool = False) -> list[Any]:
    c = cluster(hosts=1).tree({"lab/a": 1})
    c.submit("w", "lab/a", gpus=8, min_runtime="1h", runtime=80 * MIN)  # protected at 20m
    c.submit("x", "lab/a", gpus=8, resumable=False)  # waits behind w throughout
    c.at("20m").health("h0", False, reason="xid-79")
    c.finish("w", attempt=1, outcome="lost", reason="Xid 79")
    if not stop_after_lost:
        c.at("30m").health("h0", True, reason="repaired")
        c.at("90m").finish("w", attempt=2)
        c.at("100m").tick()
    return c.journal


@pytest.fixture(scope="module")
def journal() -> list[Any]:
    return lost_then_completed()


def test_the_journal_says_requeued_and_the_next_attempt_follows(journal: list[Any]) -> None:
    reports = [e for e in journal if e.type == "workload.finished"]
    assert [(e.attempt, e.outcome, e.requeued) for e in reports] == [
        (1, "lost", True),
        (2, "completed", None),
    ]
    starts = [
        (e.workload, e.attempt, e.time - journal[0].time)
        for e in journal
        if e.type == "workload.placed"
    ]
    assert starts == [("w", 1, 0.0), ("w", 2, 30 * MIN), ("x", 1, 90 * MIN)]


def test_acct_shows_one_workload_completed_after_a_lost_node(journal: list[Any]) -> None:
    row = next(r for r in acct_rows(fold(journal)) if r["id"] == "w")
    assert row["state"] == "COMPLETED"
    assert row["attempts"] == 2
    assert row["run_s"] == 20 * MIN + 60 * MIN  # the lost attempt's run, then the rest
    assert row["gpu_hours"] == pytest.approx(8 * 80 / 60, abs=1e-3)
    assert row["reason"] == "requeued 1x (1 after a lost node)"


def test_why_tells_the_lost_attempt_and_the_requeue(journal: list[Any]) -> None:
    out = why(fold(journal), "w")
    text = "\n".join(out["text"])
    assert "attempt 1: lost" in text and "Xid 79" in text
    assert "requeued: it waits again with its original submit time" in text
    assert "attempt 2: placed" in text and "after waiting 10m" in text
    assert [x["attempt"] for x in out["lost"]] == [1]
    events = [(e["event"], e.get("attempt")) for e in out["history"]]
    assert events == [
        ("submitted", None),
        ("placed", 1),
        ("finished", 1),
        ("requeued", 1),
        ("placed", 2),
        ("finished", 2),
    ]
    assert out["current"]["state"] == "FINISHED"


def test_queue_counts_the_wait_from_the_requeue() -> None:
    view = fold(lost_then_completed(stop_after_lost=True))
    h = view.histories["w"]
    assert h.pending_since == view.require().now  # waits from the lost report, not submit
    assert view.require().workloads["w"].state != "running"
    work, done = work_needed(view)
    assert work["w"] == 80 * MIN and done["w"] == 20 * MIN  # the forecast resumes it


def test_metrics_count_a_requeue_not_an_end(journal: list[Any]) -> None:
    text = exposition(MetricsCollector(clock=lambda: 0.0).apply_all(journal).registry())
    assert 'allot_requeued_attempts_total{cluster="test",reason="lost"} 1.0' in text
    assert 'allot_workloads_ended_total{cluster="test",state="lost"} 0.0' in text
    assert 'allot_workloads_ended_total{cluster="test",state="completed"} 1.0' in text


def test_summary_counts_it_completed_with_a_requeue_wait(journal: list[Any]) -> None:
    s = summarize(journal, policy="fairshare")
    assert s["workloads"]["completed"] == 1 and s["workloads"].get("lost", 0) == 0
    assert s["requeue_wait_s"]["all"]["count"] == 1
    assert s["requeue_wait_s"]["all"]["p50"] == 10 * MIN


def test_the_simulated_launcher_resumes_with_the_work_left() -> None:
    launcher = SimulatedLauncher("test")
    for e in lost_then_completed(stop_after_lost=True):
        launcher.on_record(event_to_dict(e))
    job = launcher.jobs["w"]
    assert job.done == 20 * MIN and job.started is None and not launcher.timers


def test_a_requeued_report_in_a_journal_no_scheduler_wrote_is_still_read() -> None:
    """A hand-edited journal: a requeued report, naming no attempt, about work that had
    ended already; the view takes the last placement's attempt rather than fail."""
    j = JournalBuilder().host("h0").budget("lab", 1).budget("lab/a", 1)
    j.submit("w", "lab/a", 8).place("w", {"h0": list(range(8))})
    j.at(600).finish("w")
    j.add("workload.finished", actor="x", workload="w", outcome="lost", requeued=True)
    view = fold(j.events)
    assert [x.attempt for x in view.histories["w"].lost] == [1]
    assert "attempt 1: lost" in "\n".join(why(view, "w")["text"])


def test_acct_tells_the_requeues_of_work_a_last_lost_report_ended() -> None:
    c = cluster(hosts=1, max_lost_requeues=1).tree({"lab/a": 1})
    c.submit("w", "lab/a", gpus=8)
    c.at("10m").finish("w", attempt=1, outcome="lost")  # requeued, placed again at once
    c.at("20m").finish("w", attempt=2, outcome="lost", reason="Xid 79")  # the cap: ends
    row = next(r for r in acct_rows(fold(c.journal)) if r["id"] == "w")
    assert (row["state"], row["attempts"]) == ("LOST", 2)
    assert row["reason"] == "Xid 79, requeued 1x (1 after a lost node)"
