"""`allot requeue` of work that is not resumable: it starts over, and the read models
that estimate work left (forecast, what-if replay) and `allot why` say so. The journal
comes from the real core (`tests.domain.builders`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from domain.events import event_to_dict
from projections.forecast import forecast, work_needed
from projections.replay import journal_run_spec
from projections.views import fold, why
from tests.domain.builders import cluster

MIN = 60.0


def requeued_at_50m(resumable: bool, *, report_end: bool = False) -> list[Any]:
    """`w` (8 GPUs, an hour of work, protected an hour) runs alone; at 50 minutes its
    submitter requeues it and it starts again at once; with `report_end`, its launcher
    reports it completed an hour later."""
    c = cluster(hosts=1).tree({"lab/a": 1})
    c.submit("w", "lab/a", gpus=8, min_runtime="1h", resumable=resumable, runtime=60 * MIN)
    c.at("50m").requeue("w")
    if report_end:
        c.at("110m").finish("w", attempt=2)
    return c.journal


@pytest.mark.parametrize(
    ("resumable", "kept", "ends_at"),
    [(True, 50 * MIN, 60 * MIN), (False, None, 110 * MIN)],
    ids=["resumable-keeps-progress", "not-resumable-starts-over"],
)
def test_the_forecast_counts_progress_only_for_resumable_work(
    resumable: bool, kept: float | None, ends_at: float
) -> None:
    journal = requeued_at_50m(resumable)
    view = fold(journal)
    _, done = work_needed(view)
    assert done.get("w") == kept
    end = forecast(view, 86400.0, journal=journal).ends["w"]
    assert (end.how, end.time - journal[0].time) == ("finished", ends_at)


@pytest.mark.parametrize(
    ("resumable", "work"), [(True, 110 * MIN), (False, 60 * MIN)], ids=["resumable", "not"]
)
def test_a_what_if_gives_requeued_work_only_the_work_it_needed(
    tmp_path: Path, resumable: bool, work: float
) -> None:
    """The what-if drops requeues: a workload that started over needs only its last
    attempt's work, one that resumed the sum of its attempts."""
    path = tmp_path / "journal.jsonl"
    path.write_bytes(
        b"".join(
            orjson.dumps(event_to_dict(e)) + b"\n"
            for e in requeued_at_50m(resumable, report_end=True)
        )
    )
    spec = journal_run_spec(path, {}, {})
    submitted = next(e for e in spec.inputs() if e.type == "workload.submitted")
    # the submission carried a runtime (the simulated launcher's); drop it to derive one
    assert submitted.runtime == 60 * MIN
    bare = path.read_bytes().replace(b',"runtime":3600.0', b"")
    path.write_bytes(bare)
    spec = journal_run_spec(path, {}, {})
    submitted = next(e for e in spec.inputs() if e.type == "workload.submitted")
    assert submitted.runtime == work


def test_why_says_work_that_is_not_resumable_starts_over() -> None:
    text = "\n".join(why(fold(requeued_at_50m(False)), "w")["text"])
    assert "reason requested (requeued by root, allot requeue)" in text
    assert "requeued: it waits again with its original submit time and starts over" in text
    resumable = "\n".join(why(fold(requeued_at_50m(True)), "w")["text"])
    assert "starts over" not in resumable


def test_why_says_a_requeue_inside_the_protection_stopped_it_there() -> None:
    """It said "protection ended" at a time after the preemption."""
    text = "\n".join(why(fold(requeued_at_50m(True)), "w")["text"])
    assert "victim allocation lab/a, charged, protected until " in text
    assert "(stopped inside it)" in text and "protection ended" not in text
