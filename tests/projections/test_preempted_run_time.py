"""How long a preempted attempt ran is said alike by `allot preemptions` (its RAN
column) and `allot why` (its "after running" line and its history), from the journal
and from the audit database, whatever the reason. A `gpus_removed` preemption's
record names no `explain.ran_s` (its v1 bytes are kept): `preemptions` derived it from
the attempt's placement while `why` printed no run time at all."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from domain import events as ev
from domain.durations import format_duration
from domain.events import event_to_dict
from projections import audit, history
from projections.timeline import timeline
from projections.views import fold, why
from tests.domain.builders import Cluster, cluster
from tests.projections.audit_histories import loaded

MIN = 60.0


def fair_share() -> Cluster:
    c = cluster(hosts=1).tree({"lab/a": 1, "lab/b": 1})
    c.submit("w", "lab/a", gpus=8, min_runtime="15m")
    c.at("20m").submit("b", "lab/b", gpus=8, min_runtime="15m")
    return c


def unhealthy_host() -> Cluster:
    c = cluster(hosts=1).tree({"lab/a": 1})
    c.submit("w", "lab/a", gpus=8, min_runtime="15m")
    c.at("25m").health("h0", False, reason="xid-79")
    return c


def pulled_gpu() -> Cluster:
    c = cluster(hosts=1).tree({"lab/a": 1})
    c.submit("w", "lab/a", gpus=8, min_runtime="1h")
    c.at("16s").host("h0", 7)  # registered again with a GPU fewer
    return c


def lost_host() -> Cluster:
    c = cluster(hosts=1).tree({"lab/a": 1})
    c.submit("w", "lab/a", gpus=8, min_runtime="1h")
    c.at("40m").input(ev.HostRemoved, host="h0", reason="decommissioned")
    return c


def requested_requeue() -> Cluster:
    c = cluster(hosts=1).tree({"lab/a": 1})
    c.submit("w", "lab/a", gpus=8, min_runtime="1h")
    c.at("50m").requeue("w")
    return c


@pytest.mark.parametrize(
    ("scenario", "reason", "ran"),
    [
        (fair_share, "fair_share", 20 * MIN),
        (unhealthy_host, "drain", 25 * MIN),
        (pulled_gpu, "gpus_removed", 16.0),
        (lost_host, "gpus_removed", 40 * MIN),
        (requested_requeue, "requested", 50 * MIN),
    ],
    ids=["fair-share", "unhealthy", "pulled-gpu", "lost-host", "requested"],
)
def test_preemptions_and_why_say_the_same_run_time_from_either_source(
    tmp_path: Path, scenario: Callable[[], Cluster], reason: str, ran: float
) -> None:
    c = scenario()
    (stop,) = c.preemptions("w")
    assert stop.reason == reason
    records = [event_to_dict(e) for e in c.journal]
    _, db = loaded(tmp_path, c.journal)
    con = audit.connect(db, read_only=True)
    try:
        from_db = audit.preemptions(con)
        db_history = timeline(audit.workload_records(con, "w"))
    finally:
        con.close()
    from_journal = history.preemptions(records, None, None, c.now)
    assert [r["ran_s"] for r in from_journal if r["workload"] == "w"] == [ran]
    assert [r["ran_s"] for r in from_db if r["workload"] == "w"] == [ran]

    answer = why(fold(c.journal), "w")
    assert _after_running(answer["text"]) == [format_duration(ran)]
    assert [q["ran_s"] for q in answer["preemptions"]] == [ran]
    for entries in (answer["history"], db_history):
        assert [e["ran_s"] for e in entries if e["event"] == "preempted"] == [ran]


def _after_running(text: list[str]) -> list[str | None]:
    """The run time each "attempt N: preempted" line of `why` gives (None: none)."""
    said = []
    for line in text:
        if re.match(r"attempt \d+: preempted ", line):
            found = re.search(r" after running (.+?)(?: for |: )", line)
            said.append(found.group(1) if found else None)
    return said


def test_the_history_line_says_the_run_time_of_a_gpus_removed_preemption() -> None:
    from projections.timeline import timeline_text

    c = pulled_gpu()
    lines = timeline_text(timeline(event_to_dict(e) for e in c.journal if _about_w(e)))
    (preempted,) = [x for x in lines if "preempted #1" in x]
    assert preempted.rstrip().endswith("gpus_removed after 16s")


def _about_w(e: Any) -> bool:
    return getattr(e, "workload", None) == "w"
