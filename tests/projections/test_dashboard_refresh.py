"""The dashboard folds only what the journal gained: a refresh after records are
appended gives the pages a fold of the whole journal gives, and a journal rewritten or
cut short is folded again from its start (the Kafka tail: tests/e2e/test_dashboard_kafka.py)."""

from __future__ import annotations

import threading
from pathlib import Path

import orjson
import pytest

from domain import events as ev
from projections import views as v
from projections.dashboard import Dashboard, build_snapshot, file_stamp, queue_page
from streams.codec import encode
from streams.sources import journal_lines, journal_tail
from tests.projections.runs import T0, simulated_run

YOUNG = [encode(e) for e in simulated_run(seed=3, hosts=3, count=40)]  # about 30 h long
# the same, with a host registered three days before: charts in hourly bins throughout
SPARE = ev.HostRegistered(id="spare", time=T0 - 3 * 86400, cluster="c", host="spare", gpus=8)
RUN = [encode(SPARE), *YOUNG]


def board_on(path: Path) -> Dashboard:
    return Dashboard(
        lambda: journal_lines(journal=path),
        label="test",
        stamp=file_stamp(path),
        tail=lambda: journal_tail(journal=path),
    )


def write(path: Path, records: list[bytes], mode: str = "wb") -> None:
    with path.open(mode) as f:
        f.write(b"".join(r + b"\n" for r in records))


def same_as_full_fold(snap, records: list[bytes]) -> None:
    """Everything the pages read equals a fold of `records` from scratch."""
    full = build_snapshot(records)
    assert snap.ok and full.ok
    assert snap.view.records == full.view.records == len(records)
    assert v.queue_rows(snap.view) == v.queue_rows(full.view)
    assert v.share_rows(snap.view) == v.share_rows(full.view)
    assert snap.usage.hourly_rows() == full.usage.hourly_rows()
    assert snap.chart_usage.hourly_rows() == full.chart_usage.hourly_rows()
    assert snap.delivered == full.delivered
    assert list(snap.gantt.start) == list(full.gantt.start)
    assert list(snap.gantt.end) == list(full.gantt.end)
    assert queue_page(snap) == queue_page(full)


def test_appended_records_are_folded_onto_the_last_refresh(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    board = board_on(path)
    cuts = [len(RUN) // 3, len(RUN) // 3 + 1, 2 * len(RUN) // 3, len(RUN)]
    write(path, RUN[: cuts[0]])
    for done, cut in zip([0, *cuts], cuts, strict=False):
        if done:
            write(path, RUN[done:cut], "ab")
        same_as_full_fold(board.snapshot(), RUN[:cut])
    assert board.refolds == 1  # the history was folded once, then only what was new


def test_a_write_in_progress_is_not_folded_until_its_line_ends(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    board = board_on(path)
    half = len(RUN) // 2
    write(path, RUN[:half])
    with path.open("ab") as f:
        f.write(RUN[half][:20])
    same_as_full_fold(board.snapshot(), RUN[:half])
    with path.open("ab") as f:
        f.write(RUN[half][20:] + b"\n")
    same_as_full_fold(board.snapshot(), RUN[: half + 1])
    assert board.refolds == 1


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda run: run[: len(run) // 2], id="cut-short"),
        pytest.param(lambda run: [run[0], *run[2:]], id="rewritten-longer"),
        pytest.param(lambda run: [run[1], run[0], *run[2:-1]], id="rewritten-same-start"),
    ],
)
def test_a_journal_rewritten_or_cut_short_is_folded_again(tmp_path: Path, change) -> None:
    path = tmp_path / "journal.jsonl"
    board = board_on(path)
    write(path, RUN[:-1])
    board.snapshot()
    records = change(RUN)
    write(path, records)
    same_as_full_fold(board.snapshot(), records)
    assert board.refolds == 2


HALF = len(RUN) // 2


@pytest.mark.parametrize(
    "cuts",
    [
        pytest.param([], id="in-the-first-fold"),
        pytest.param([HALF], id="appended"),
        pytest.param([HALF // 2, HALF + 1], id="appended-after-a-blank-line-folded-before"),
    ],
)
def test_a_corrupt_record_is_named_by_file_and_line_and_the_fold_recovers(
    tmp_path: Path, cuts: list[int]
) -> None:
    """As the read commands name it (FILE:LINE); the pages said `journal record N`, a
    count of records (a blank line comes before this one), not where to look. The
    journal is written in pieces, cut before the line at each index of `cuts`, with a
    refresh after each."""
    path = tmp_path / "journal.jsonl"
    board = board_on(path)
    lines = [*(r + b"\n" for r in RUN[:HALF]), b"\n", b"{not json\n"]
    for a, b in zip([0, *cuts], [*cuts, len(lines)], strict=True):
        with path.open("ab") as f:
            f.write(b"".join(lines[a:b]))
        snap = board.snapshot()
    assert not snap.ok
    assert f"{path}:{HALF + 2}: not JSON" in snap.error
    write(path, RUN)  # repaired
    same_as_full_fold(board.snapshot(), RUN)
    assert board.refolds == 2


def test_a_growing_young_journal_gets_the_charts_bins_a_full_fold_gives(tmp_path: Path) -> None:
    """A journal a few hours long is charted in bins finer than an hour; as it grows the
    bins widen, which needs its usage folded again in the new bins."""
    path = tmp_path / "journal.jsonl"
    board = board_on(path)
    times = [e.time for e in v.decode_lines(YOUNG)]
    early = [r for r, t in zip(YOUNG, times, strict=True) if t < times[0] + 600]
    write(path, early)
    first = board.snapshot()
    assert first.chart_usage is not first.usage  # finer bins than the hourly rows
    write(path, YOUNG[len(early) :], "ab")
    same_as_full_fold(board.snapshot(), YOUNG)
    assert board.refolds == 2


def test_a_source_read_whole_each_time_folds_only_what_follows(tmp_path: Path) -> None:
    """Without a tail (e.g. a list of records), the source is read whole and the
    records folded before are skipped."""
    records: list[bytes] = list(RUN[:10])
    board = Dashboard(lambda: list(records), label="test", ttl=0.0)
    same_as_full_fold(board.snapshot(), records)
    records.extend(RUN[10:])
    same_as_full_fold(board.snapshot(), records)
    assert board.refolds == 1
    records[5:] = []  # cut short
    same_as_full_fold(board.snapshot(), records)
    assert board.refolds == 2


def test_no_refresh_changes_the_view_while_a_page_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    board = board_on(path)
    half = len(RUN) // 2
    write(path, RUN[:half])
    refreshed = threading.Event()
    with board.reading() as snap:
        write(path, RUN[half:], "ab")
        other = threading.Thread(target=lambda: (board.snapshot(), refreshed.set()))
        other.start()
        assert not refreshed.wait(0.5)  # the refresh waits for this page
        assert snap.view.records == half
    assert refreshed.wait(30)
    other.join()
    same_as_full_fold(board.snapshot(), RUN)


@pytest.mark.parametrize("appended", [False, True], ids=["in-the-first-fold", "appended"])
def test_a_record_referring_to_an_unregistered_host_is_named_by_file_and_line(
    tmp_path: Path, appended: bool
) -> None:
    """As `allot queue` names it (FILE:LINE); the pages said `record N (...)`, the count
    of records folded: a blank line and a record of a type this version does not know
    (not folded) come before it, in the piece a refresh reads."""
    records = [orjson.loads(r) for r in RUN]
    placed = next(i for i, r in enumerate(records) if r["type"] == "workload.placed")
    host = next(iter(records[placed]["hosts"]))
    kept = [
        line
        for line, r in zip(RUN, records, strict=True)
        if not (r["type"] == "host.registered" and r["host"] == host)
    ]
    at = kept.index(RUN[placed])
    newer = orjson.dumps({"type": "budget.forecast", "id": "n", "time": T0, "cluster": "c"})
    lines = [*(r + b"\n" for r in kept[:at]), b"\n", newer + b"\n", *(r + b"\n" for r in kept[at:])]
    path = tmp_path / "journal.jsonl"
    board = board_on(path)
    if appended:
        path.write_bytes(b"".join(lines[: at - 1]))
        assert board.snapshot().ok
        with path.open("ab") as f:
            f.write(b"".join(lines[at - 1 :]))
    else:
        path.write_bytes(b"".join(lines))
    snap = board.snapshot()
    assert not snap.ok
    assert snap.error == (
        f"{path}:{at + 3}: workload.placed {records[placed]['id']} refers to {host!r} that no "
        "earlier record introduces: the journal must be read from its beginning"
    )
