"""`allot compare`'s rows: a difference too small to show is shown as none."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from projections.compare import compare_summaries, different_inputs, load_summary
from projections.journal import JournalError


def _summary(occupancy: float, idle: float, p90: float) -> dict[str, Any]:
    return {
        "policy": "fairshare",
        "occupancy": occupancy,
        "contended_idle": {"gpu_hours": idle},
        "wait_s": {"all": {"p50": 0.0, "p90": p90}, "by_tag": {}},
    }


def _changes(a: dict[str, Any], b: dict[str, Any]) -> dict[str, str]:
    return {label: change for label, _, _, change in compare_summaries(a, b)}


def test_differences_that_round_away_have_no_minus_sign() -> None:
    a = _summary(0.998_4004, 12.000_01, 100.0)
    b = _summary(0.998_4001, 12.000_00, 99.8)
    changes = _changes(a, b)
    assert changes["occupancy"] == "+0.000"
    assert changes["idle GPU-h while work waited"] == "+0.0"
    assert changes["wait p90 (all)"] == "+0s"


def test_real_differences_keep_their_sign() -> None:
    changes = _changes(_summary(0.5, 10.0, 600.0), _summary(0.25, 12.5, 60.0))
    assert changes["occupancy"] == "-0.250"
    assert changes["idle GPU-h while work waited"] == "+2.5"
    assert changes["wait p90 (all)"] == "-9m"


def test_a_malformed_mapping_in_a_summary_is_no_row_not_a_traceback() -> None:
    odd = {**_summary(0.5, 1.0, 1.0), "delivered": {"by_allocation": 5}}
    labels = [label for label, _, _, _ in compare_summaries(odd, _summary(0.5, 1.0, 1.0))]
    leaves = [x for x in labels if x.startswith("delivered ")]
    assert "occupancy" in labels and leaves == ["delivered overall", "delivered min"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such folder"),
        (b"{}", "not the summary of a run (no policy, workloads, delivered, wait_s)"),
        (b"[1, 2]", "not the summary of a run"),
    ],
    ids=["missing", "empty-object", "a-list"],
)
def test_compare_refuses_what_is_not_a_runs_summary(
    tmp_path: Path, content: bytes | None, message: str
) -> None:
    """`echo '{}' > fake/summary.json` printed a table of dashes with rc 0."""
    folder = tmp_path / "fake"
    if content is not None:
        folder.mkdir()
        (folder / "summary.json").write_bytes(content)
    with pytest.raises(JournalError, match=re.escape(message)):
        load_summary(folder)


def test_compare_names_the_runs_an_out_folder_holds(tmp_path: Path) -> None:
    """`allot compare out-a out-b` on two --out folders said only "no summary.json here",
    although each held the runs to pass."""
    for policy in ("fairshare", "legacy-priority"):
        (tmp_path / policy).mkdir()
        (tmp_path / policy / "summary.json").write_bytes(b"{}")
    with pytest.raises(JournalError) as why:
        load_summary(tmp_path)
    assert str(why.value) == (
        f"{tmp_path}: no summary.json here; pass one of the runs in it: "
        f"{tmp_path / 'fairshare'} or {tmp_path / 'legacy-priority'}"
    )


def test_compare_given_a_runs_journal_names_its_folder(tmp_path: Path) -> None:
    """A journal passed for a run was reported as "not valid JSON (unexpected content
    after document: line 2 column 1)"."""
    run = tmp_path / "fairshare"
    run.mkdir()
    (run / "summary.json").write_bytes(b"{}")
    (run / "journal.jsonl").write_bytes(b'{"type": "config.set"}\n{"type": "clock.tick"}\n')
    with pytest.raises(JournalError) as why:
        load_summary(run / "journal.jsonl")
    assert str(why.value) == f"{run / 'journal.jsonl'}: not a summary; pass its run folder {run}"


def _waits(p90: float, started: int, never: int) -> dict[str, Any]:
    return {"p50": p90 / 2, "p90": p90, "count": started, "unplaced": never}


def test_how_many_never_started_stands_beside_each_tags_waits() -> None:
    """The percentiles are of started work: a policy that starts 7 of 373 filler jobs
    showed 'wait p90 (filler) 0s' and read as the better one for filler."""
    from projections.simulate import comparison_rows

    fair = {"wait_s": {"all": _waits(60, 30, 1), "by_tag": {"filler": _waits(3e5, 18, 355)}}}
    legacy = {"wait_s": {"all": _waits(90, 20, 11), "by_tag": {"filler": _waits(0, 7, 366)}}}
    rows = dict(comparison_rows({"fairshare": fair, "legacy-priority": legacy}))
    assert rows["wait p90 (filler)"] == ["3d11h", "0s"]
    assert rows["never started (filler)"] == ["355 of 373", "366 of 373"]
    assert rows["never started (all)"] == ["1 of 31", "11 of 31"]
    changes = {label: (va, vb, ch) for label, va, vb, ch in compare_summaries(fair, legacy)}
    assert changes["never started (filler)"] == ("355", "366", "+11")
    # a tag every policy started all of gets no row
    done = {"wait_s": {"all": _waits(60, 30, 0), "by_tag": {"debug": _waits(0, 9, 0)}}}
    assert not [label for label, _ in comparison_rows({"a": done}) if "never" in label]


def test_compare_shows_preempted_work_that_ended_and_work_completed() -> None:
    """fairshare preempted four workloads, two of them not resumable, which ended there;
    legacy-priority completed two more. compare showed 'workloads preempted 4 → 0'
    only: whether the preempted work was delayed or thrown away, it did not say."""
    fair = {"workloads": {"preempted": 4, "preempted_terminal": 2, "completed": 5}}
    legacy = {"workloads": {"preempted": 0, "preempted_terminal": 0, "completed": 7}}
    rows = {label: (va, vb, ch) for label, va, vb, ch in compare_summaries(fair, legacy)}
    assert rows["  of them ended, not requeued"] == ("2", "0", "-2")
    assert rows["workloads completed"] == ("5", "7", "+2")


def _run(start: str, submitted: int, rejected: int, end: str = "2026-01-08T00:00:00Z") -> dict:
    return {
        "period": {"start_iso": start, "end_iso": end},
        "workloads": {"submitted": submitted, "rejected": rejected},
    }


@pytest.mark.parametrize(
    ("b", "says"),
    [
        pytest.param(_run("2026-01-01T00:00:00Z", 90, 10), None, id="same-inputs"),
        # a stricter what-if rejects more of the same inputs; a run without a horizon
        # ends when its work does
        pytest.param(
            _run("2026-01-01T00:00:00Z", 80, 20, end="2026-01-09T00:00:00Z"),
            None,
            id="more-rejected-later-end",
        ),
        pytest.param(_run("2026-01-01T00:00:00Z", 120, 0), "numbers of submissions", id="count"),
        pytest.param(_run("2026-02-01T00:00:00Z", 90, 10), "different times", id="start"),
    ],
)
def test_runs_of_different_inputs_are_told_apart(b: dict, says: str | None) -> None:
    found = different_inputs(_run("2026-01-01T00:00:00Z", 90, 10), b)
    assert found is None if says is None else says in found


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (45, "45s"),
        (235, "3m55s"),
        (3689, "1h1m"),  # 1h1m29s: cut below the second unit
        (79248, "22h"),  # 22h0m48s read "22h48s", as if 22 hours 48 minutes
        (86399, "23h59m"),
        (216000, "2d12h"),
        (float("inf"), "inf"),
    ],
    ids=["seconds", "minutes", "cut", "no-skipped-unit", "below-a-day", "days", "inf"],
)
def test_waits_in_tables_use_two_adjacent_units(seconds: float, shown: str) -> None:
    from projections.simulate import format_value

    assert format_value(seconds, "seconds") == shown


@pytest.mark.parametrize(
    ("b_end", "b_period", "says"),
    [
        pytest.param("2026-01-08T00:00:00Z", {"horizon": True}, None, id="same-period"),
        pytest.param(
            "2026-01-09T00:00:00Z",
            {"horizon": False, "ended": "work_ended"},
            "(A: 2026-01-01T00:00:00Z to 2026-01-08T00:00:00Z, at its horizon; "
            "B: 2026-01-01T00:00:00Z to 2026-01-09T00:00:00Z, when its work ended)",
            id="no-horizon-later-end",
        ),
        pytest.param(
            # a replay of a live journal: it has no horizon, its recording stopped while
            # work was still waiting and running (it said "at its horizon")
            "2026-01-09T00:00:00Z",
            {"horizon": True, "ended": "recorded", "left": (3, 1)},
            "B: 2026-01-01T00:00:00Z to 2026-01-09T00:00:00Z, where the recorded journal "
            "ends, 4 workloads still unfinished (3 pending and 1 running))",
            id="replay-of-a-journal-that-ends-with-work-left",
        ),
        pytest.param(
            "2026-01-09T00:00:00Z",
            {"horizon": True},  # a summary from before `ended` was recorded
            "B: 2026-01-01T00:00:00Z to 2026-01-09T00:00:00Z, at an end fixed before the run)",
            id="ended-unknown",
        ),
        pytest.param(
            "2026-01-09T00:00:00Z",
            {},  # a summary from before `horizon` was recorded
            "B: 2026-01-01T00:00:00Z to 2026-01-09T00:00:00Z)",
            id="horizon-unknown",
        ),
    ],
)
def test_runs_of_different_periods_are_told_apart(
    b_end: str, b_period: dict, says: str | None
) -> None:
    from projections.compare import different_periods

    a = _run("2026-01-01T00:00:00Z", 90, 10)
    a["period"].update(horizon=True, ended="horizon")
    b = _run("2026-01-01T00:00:00Z", 90, 10, end=b_end)
    pending, running = b_period.pop("left", (0, 0))
    b["period"].update(b_period)
    b["workloads"].update(unfinished_pending=pending, unfinished_running=running)
    found = different_periods(a, b)
    assert found is None if says is None else says in found
    assert different_periods(a, {"workloads": {}}) is None  # no period recorded: no claim
