"""The usage table resumes from its own offset: a restart folds only what is new."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from projections.usage import UsageProjection
from projections.usage_store import ResumableUsage, UsageStoreError

TINY = Path(__file__).parents[1] / "e2e" / "fixtures" / "tiny.yaml"


@pytest.fixture(scope="module")
def journal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sim")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "allot.cli",
            "simulate",
            str(TINY),
            "--out",
            str(out),
            "-q",
            "--no-report",
        ],
        check=True,
    )
    return out / "fairshare" / "journal.jsonl"


def _one_pass(path: Path) -> list[dict]:
    from projections.usage import iter_journal

    projection = UsageProjection()
    for record in iter_journal(path):
        projection.apply(record)
    projection.close()
    return projection.hourly_rows()


def test_resuming_folds_only_new_records_and_matches_one_pass(
    journal: Path, tmp_path: Path
) -> None:
    lines = journal.read_bytes().splitlines(keepends=True)
    growing = tmp_path / "journal.jsonl"
    state = tmp_path / "usage.state"
    half = len(lines) // 2
    growing.write_bytes(b"".join(lines[:half]) + lines[half][:-5])  # a record cut short

    first = ResumableUsage.open(state, growing)
    assert first.update() == half  # the cut-short record waits
    first.save(state)

    growing.write_bytes(b"".join(lines))
    again = ResumableUsage.open(state, growing)
    assert again.records == half
    assert again.update() == len(lines) - half  # only what is new
    assert again.rows() == _one_pass(journal)


def test_another_journal_or_a_damaged_state_is_refused(journal: Path, tmp_path: Path) -> None:
    state = tmp_path / "usage.state"
    store = ResumableUsage.open(state, journal)
    store.update()
    store.save(state)
    other = tmp_path / "other.jsonl"
    other.write_bytes(journal.read_bytes().splitlines(keepends=True)[1])
    with pytest.raises(UsageStoreError, match="another journal"):
        ResumableUsage.open(state, other)
    state.write_bytes(b"not a pickle")
    with pytest.raises(UsageStoreError, match="not a usage state file"):
        ResumableUsage.open(state, journal)


@pytest.mark.parametrize("change", ["cut-short", "rewritten"])
def test_a_journal_cut_short_or_rewritten_since_is_refused(
    journal: Path, tmp_path: Path, change: str
) -> None:
    """The same first record, other bytes where the table stopped: it used to report
    '0 new' and the old totals, or call the healthy file corrupt."""
    copy = tmp_path / "journal.jsonl"
    lines = journal.read_bytes().splitlines(keepends=True)
    copy.write_bytes(b"".join(lines))
    state = tmp_path / "usage.state"
    store = ResumableUsage.open(state, copy)
    store.update()
    store.save(state)
    half = len(lines) // 2
    if change == "cut-short":
        copy.write_bytes(b"".join(lines[:half]))
    else:  # as long again, but another run's records after the first half
        copy.write_bytes(b"".join(lines[:half] + lines[1 : len(lines) - half + 1]))
    with pytest.raises(UsageStoreError, match=r"changed since .* was saved"):
        ResumableUsage.open(state, copy)
    copy.write_bytes(b"".join(lines) + lines[-1])  # only grown: still resumes
    assert ResumableUsage.open(state, copy).update() == 1
    assert not list(tmp_path.glob("*.tmp"))  # no temporary file left


def test_allot_usage_keeps_its_table_and_reports_delivered(journal: Path, tmp_path: Path) -> None:
    import orjson

    state = tmp_path / "usage.state"
    args = [
        sys.executable,
        "-m",
        "allot.cli",
        "usage",
        "--journal",
        str(journal),
        "--state",
        str(state),
        "--json",
    ]
    first = subprocess.run(args, capture_output=True, text=True, check=True)
    assert state.exists()
    again = subprocess.run(args, capture_output=True, text=True, check=True)
    assert orjson.loads(first.stdout) == orjson.loads(again.stdout)
    rows = {row["allocation"]: row for row in orjson.loads(first.stdout)}
    assert set(rows) == {"lab/eval", "lab/train"}
    for row in rows.values():
        expected = min(1.0, row["received_gpu_h"] / row["owed_gpu_h"])
        assert abs(row["delivered"] - expected) < 1e-3
    import os

    no_kafka = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")}
    bad = subprocess.run(
        [sys.executable, "-m", "allot.cli", "usage"], capture_output=True, text=True, env=no_kafka
    )
    assert bad.returncode == 2 and "--data DIR or --journal FILE" in bad.stderr
    both = subprocess.run(
        [*args[:3], "usage", "--journal", str(journal), "--data", str(tmp_path)],
        capture_output=True,
        text=True,
        env=no_kafka,
    )
    assert both.returncode == 2 and "--journal and --data: give one place" in both.stderr


def test_a_state_saved_before_contended_idle_keeps_folding(journal: Path, tmp_path: Path) -> None:
    """A pickled projection from before `contended_idle` (no waiting sizes) resumes:
    the waiting sizes are rebuilt from the live workloads."""
    lines = journal.read_bytes().splitlines()
    half = len(lines) // 2
    whole = UsageProjection()
    for line in lines[:half]:
        whole.apply(orjson.loads(line))
    waiting = dict(whole._waiting_sizes)
    assert waiting  # something waits at the cut, so there is something to rebuild
    # pickled as older code did: without the waiting sizes and contended_idle
    del whole._waiting_sizes, whole.contended_idle
    blob = pickle.dumps(whole)
    whole._waiting_sizes, whole.contended_idle = waiting, {}
    restored = pickle.loads(blob)
    assert restored._waiting_sizes == waiting
    for line in lines[half:]:
        restored.apply(orjson.loads(line))
        whole.apply(orjson.loads(line))
    assert restored._waiting_sizes == whole._waiting_sizes
    assert restored.totals() == whole.totals()


def test_a_state_saved_before_unrunnable_demand_keeps_folding(journal: Path) -> None:
    """A pickled projection from before unrunnable demand was kept apart (rows of three
    sums, leaves and workloads without the field) resumes and reads its rows."""
    lines = journal.read_bytes().splitlines()
    half = len(lines) // 2
    old = UsageProjection()
    for line in lines[:half]:
        old.apply(orjson.loads(line))
    for row in old._rows.values():
        del row[3]
    for leaf in old._leaves.values():
        del leaf.unrunnable
    for w in old.live.values():
        del w.unrunnable
    restored = pickle.loads(pickle.dumps(old))
    for line in lines[half:]:
        restored.apply(orjson.loads(line))
    restored.close()
    assert all(r["unrunnable_gpu_s"] >= 0 for r in restored.hourly_rows())


def test_a_state_saved_by_older_code_folds_the_record_types_added_since() -> None:
    """The record types a projection folds come from the code, not from the saved table
    (a table saved before `budget.rejected` was folded kept its older list)."""
    old = UsageProjection()
    del old._handlers["budget.rejected"]
    restored = pickle.loads(pickle.dumps(old))
    assert "budget.rejected" in restored._handlers
    assert restored._handlers.keys() == UsageProjection()._handlers.keys()


def test_a_file_of_several_clusters_is_read_one_cluster_at_a_time(
    journal: Path, tmp_path: Path
) -> None:
    from projections.usage import HOUR, JournalBuilder

    other = JournalBuilder(cluster="west").host("h0")
    other.budget("ops", 1).submit("o1", "ops", 8).place("o1", {"h0": list(range(8))})
    other.at(HOUR).finish("o1")
    west = other.write(tmp_path / "west.jsonl")
    both = tmp_path / "both.jsonl"
    both.write_bytes(journal.read_bytes())

    whole = ResumableUsage.open(tmp_path / "whole.state", both)
    whole.update()  # one cluster so far: read whole
    whole.save(tmp_path / "whole.state")
    both.write_bytes(journal.read_bytes() + west.read_bytes())
    resumed = ResumableUsage.open(tmp_path / "whole.state", both)
    with pytest.raises(
        UsageStoreError, match="clusters 'tiny' and 'west'; pick one with --cluster"
    ):
        resumed.update()  # another cluster appended since

    tiny = ResumableUsage.open(tmp_path / "tiny.state", both, "tiny")
    assert tiny.update() == len(journal.read_bytes().splitlines())
    assert tiny.rows() == _one_pass(journal)
    only_west = ResumableUsage.open(tmp_path / "west.state", both, "west")
    only_west.update()
    assert only_west.rows() == _one_pass(west)
    with pytest.raises(
        UsageStoreError, match=r"no records of cluster 'east' \(it holds: tiny, west\)"
    ):
        ResumableUsage.open(tmp_path / "east.state", both, "east").update()
    only_west.save(tmp_path / "west.state")
    with pytest.raises(UsageStoreError, match="cluster 'west', not of cluster 'tiny'"):
        ResumableUsage.open(tmp_path / "west.state", both, "tiny")
