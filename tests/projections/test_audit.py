"""The audit store (`projections.audit`): a real DuckDB file, checked against the journal.

Journals come from `domain.handle` (the domain test builders: a small, hand-checkable
history) and from `allot simulate` of tests/e2e/fixtures/tiny.yaml; every number the
views and presets give is recomputed here from the records in plain Python.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from projections import audit
from projections.budget_log import budget_undo
from streams.sources import journal_lines
from tests.domain.builders import START, cluster
from tests.projections.audit_histories import (
    loaded,
    named_changes_history,
    night_history,
    refused_history,
    reweighted_history,
    small_history,
    write,
)

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "e2e" / "fixtures" / "tiny.yaml"
SIMULATE = (sys.executable, "-m", "allot.cli", "simulate")
HOUR = 3600.0


@pytest.fixture
def small(tmp_path: Path) -> tuple[Path, Path, list[dict[str, Any]]]:
    journal, db = loaded(tmp_path, small_history())
    records = [orjson.loads(line) for line in journal.read_bytes().splitlines()]
    return journal, db, records


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[dict[str, Any]]]:
    out = tmp_path_factory.mktemp("sim")
    subprocess.run(
        [*SIMULATE, str(TINY), "--out", str(out), "-q", "--no-report"],
        check=True,
        cwd=ROOT,
    )
    journal = out / "fairshare" / "journal.jsonl"
    db = out / "audit.duckdb"
    audit.load(db, journal_lines(journal=journal), source=str(journal))
    records = [orjson.loads(line) for line in journal.read_bytes().splitlines() if line.strip()]
    return journal, db, records


def ts(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC).replace(tzinfo=None)


def python_runs(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Runs folded by hand: a placement lasts until its workload's next end record."""
    users = {r["workload"]: r["actor"] for r in records if r["type"] == "workload.submitted"}
    now = max(r["time"] for r in records)
    open_: dict[str, dict[str, Any]] = {}
    runs: list[dict[str, Any]] = []
    for r in records:
        if r["type"] == "workload.placed":
            run = {
                "workload": r["workload"],
                "allocation": r["allocation"],
                "user": users[r["workload"]],
                "gpus": r["gpus"],
                "charged": r["charged"],
                "start": r["time"],
                "end": None,
            }
            open_[r["workload"]] = run
            runs.append(run)
        elif r["type"] in ("workload.finished", "workload.preempted", "workload.cancelled"):
            run = open_.pop(r.get("workload"), None)
            if run is not None:
                run["end"] = r["time"]
    for run in runs:
        run["end_t"] = run["end"] if run["end"] is not None else now
    return runs


def python_history(
    records: list[dict[str, Any]], path: str, lo: float, hi: float
) -> dict[str, tuple[float, float]]:
    out: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for run in python_runs(records):
        a = run["allocation"]
        if a != path and not a.startswith(path + "/"):
            continue
        start, end = max(run["start"], lo), min(run["end_t"], hi)
        if end <= start:
            continue
        out[run["user"]][0 if run["charged"] else 1] += run["gpus"] * (end - start) / HOUR
    return {u: (round(c, 4), round(n, 4)) for u, (c, n) in out.items()}


def preset_history(answer: dict[str, Any]) -> dict[str, tuple[float, float]]:
    return {u["user"]: (u["charged_gpu_h"], u["unallocated_gpu_h"]) for u in answer["users"]}


# ------------------------------------------------------------------ the journal view


def test_journal_view_has_one_typed_row_per_record(small: Any) -> None:
    _, db, records = small
    con = audit.connect(db, read_only=True)
    columns, rows = audit.sql(
        con,
        "SELECT type, time, cluster, actor, workload, allocation, record FROM journal ORDER BY seq",
    )
    described = {r[0]: r[1] for r in con.execute("DESCRIBE journal").fetchall()}
    con.close()
    assert described["time"] == "TIMESTAMP"
    assert described["type"] == "VARCHAR"
    assert columns == ["type", "time", "cluster", "actor", "workload", "allocation", "record"]
    assert len(rows) == len(records)
    for row, r in zip(rows, records, strict=True):
        assert row[0] == r["type"]
        assert abs((row[1] - ts(r["time"])).total_seconds()) < 1e-3
        assert row[2:6] == (r["cluster"], r["actor"], r.get("workload"), r.get("allocation"))
        assert orjson.loads(row[6]) == r


def test_views_match_the_records(small: Any) -> None:
    _, db, records = small
    con = audit.connect(db, read_only=True)

    def count(view: str) -> int:
        return con.execute(f"SELECT count(*) FROM {view}").fetchall()[0][0]

    by_type = defaultdict(int)
    for r in records:
        by_type[r["type"]] += 1
    assert count("placements") == by_type["workload.placed"] == 2
    assert count("preemptions") == by_type["workload.preempted"]
    assert count("budget_changes") == by_type["budget.set"] + by_type["budget.removed"]
    assert count("rejections") == sum(n for t, n in by_type.items() if t.endswith(".rejected"))
    assert count("rejections") >= 1
    assert count("submissions") == by_type["workload.submitted"]

    runs = con.execute(
        'SELECT workload, "user", allocation, gpus, charged, start, "end", ended_by, '
        "gpu_seconds FROM runs ORDER BY workload"
    ).fetchall()
    con.close()
    assert runs == [
        ("a1", "alice", "lab/a", 4, True, ts(START), ts(START + HOUR), "finished", 4 * HOUR),
        ("b1", "bob", "lab/b", 4, False, ts(START), None, None, 4 * 3 * HOUR),
    ]


def test_presets_on_the_small_history(small: Any) -> None:
    db = small[1]
    con = audit.connect(db, read_only=True)
    answer = audit.history(con, "lab")
    assert preset_history(answer) == {"alice": (4.0, 0.0), "bob": (0.0, 12.0)}
    assert answer["charged_gpu_h"] == 4.0 and answer["unallocated_gpu_h"] == 12.0
    # clipped: the last 2.5h (from 30m): alice 0.5h x 4, bob 2.5h x 4
    clipped = audit.history(con, "lab", since="2h30m")
    assert preset_history(clipped) == {"alice": (2.0, 0.0), "bob": (0.0, 10.0)}
    assert preset_history(audit.history(con, "lab/a", until="2026-01-01T00:15")) == {
        "alice": (1.0, 0.0)
    }
    log = audit.budget_log(con)
    assert [(e["allocation"], e["weight"], e["actor"]) for e in log][-1] == ("lab/a", 0.5, "pm")
    assert log[-1]["time"] == "2026-01-01T00:30:00"
    assert [e["allocation"] for e in audit.budget_log(con, "lab/a")] == ["lab/a", "lab/a"]
    assert audit.preemptions(con) == []
    with pytest.raises(audit.AuditError, match="unknown allocation 'lab/nope'"):
        audit.history(con, "lab/nope")
    with pytest.raises(audit.AuditError, match="not a time"):
        audit.history(con, "lab", since="last tuesday")
    with pytest.raises(audit.AuditError, match="syntax error"):
        audit.sql(con, "SELEC 1")
    con.close()


def test_presets_on_a_simulation_match_python(sim: Any) -> None:
    _, db, records = sim
    con = audit.connect(db, read_only=True)
    now = max(r["time"] for r in records)
    for path, since in (("lab", None), ("lab/eval", "6h"), ("lab/train", "2026-01-01T03:00")):
        lo = audit.parse_time(since, now) if since else float("-inf")
        expected = python_history(records, path, lo, now)
        got = preset_history(audit.history(con, path, since))
        assert got.keys() == expected.keys() and expected
        for user, (charged, unallocated) in expected.items():
            assert got[user] == pytest.approx((charged, unallocated), abs=1e-3)
    preempted = [r for r in records if r["type"] == "workload.preempted"]
    assert preempted, "the fixture preempts"
    rows = audit.preemptions(con)
    assert [(p["workload"], p["reason"], p["beneficiary"]) for p in rows] == [
        (r["workload"], r["reason"], r.get("beneficiary")) for r in preempted
    ]
    late = audit.preemptions(con, since="6h")
    assert len(late) == sum(1 for r in preempted if r["time"] >= now - 6 * HOUR)
    budgets = [r for r in records if r["type"].startswith("budget.")]
    assert [(e["allocation"], e["weight"]) for e in audit.budget_log(con)] == [
        (r["allocation"], r.get("weight")) for r in budgets
    ]
    con.close()


# ------------------------------------------------------------------ loading


def test_loading_twice_adds_nothing_and_appends_resume(tmp_path: Path) -> None:
    history = small_history()
    journal = tmp_path / "journal.jsonl"
    db = tmp_path / "audit.duckdb"
    write(journal, history[:10])
    first = audit.load(db, journal_lines(journal=journal), source="j")
    assert first == {"added": 10, "records": 10, "source": "j"}
    assert audit.load(db, journal_lines(journal=journal), source="j")["added"] == 0
    write(journal, history)
    again = audit.load(db, journal_lines(journal=journal), source="j")
    assert again["added"] == len(history) - 10
    con = audit.connect(db, read_only=True)
    seqs = [r[0] for r in con.execute("SELECT seq FROM journal ORDER BY seq").fetchall()]
    ids = [r[0] for r in con.execute("SELECT id FROM journal ORDER BY seq").fetchall()]
    con.close()
    assert seqs == list(range(len(history)))
    assert ids == [r.id for r in history]


def test_small_batches_keep_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(audit, "BATCH", 3)
    history = small_history()
    journal = write(tmp_path / "journal.jsonl", history)
    db = tmp_path / "audit.duckdb"
    assert audit.load(db, journal_lines(journal=journal))["added"] == len(history)
    con = audit.connect(db, read_only=True)
    ids = [r[0] for r in con.execute("SELECT id FROM journal ORDER BY seq").fetchall()]
    con.close()
    assert ids == [r.id for r in history]


def test_another_journal_is_refused(tmp_path: Path) -> None:
    history = small_history()
    db = tmp_path / "audit.duckdb"
    a = write(tmp_path / "a.jsonl", history)
    audit.load(db, journal_lines(journal=a), source="a")
    with pytest.raises(audit.AuditError, match="another --db"):
        audit.load(db, journal_lines(journal=a), source="b")
    shorter = write(tmp_path / "b.jsonl", history[:3])
    with pytest.raises(audit.AuditError, match="another"):
        audit.load(db, journal_lines(journal=shorter), source="a")


def test_a_damaged_record_is_named(tmp_path: Path) -> None:
    journal = tmp_path / "journal.jsonl"
    journal.write_bytes(b'{"type":"clock.tick","time":1.0,"id":"a"}\n{"type": oops\n')
    with pytest.raises(audit.AuditError, match=r"^journal record 2: not valid JSON"):
        audit.load(tmp_path / "audit.duckdb", journal_lines(journal=journal))
    # told where each record is, it names the file and line (a blank line first here)
    journal.write_bytes(b'\n{"type":"clock.tick","time":1.0,"id":"a"}\n{"type": oops\n')
    lines = journal_lines(journal=journal)
    with pytest.raises(audit.AuditError, match=f"^{re.escape(str(journal))}:3: not valid JSON"):
        audit.load(tmp_path / "other.duckdb", lines, where=lambda: lines.place)


def test_a_value_out_of_its_columns_range_does_not_stop_the_load(tmp_path: Path) -> None:
    """A refused request from another producer may carry any number: its column reads
    NULL, the record stays whole, and later records still load."""
    journal = tmp_path / "journal.jsonl"
    journal.write_bytes(
        b'{"type":"workload.rejected","time":1.0,"id":"r1","cluster":"c","actor":"x",'
        b'"ref":"i1","error":"gpus","workload":"w","gpus":9223372036854775807}\n'
        b'{"type":"clock.tick","time":2.0,"id":"t1","cluster":"c","actor":"allot"}\n'
    )
    db = tmp_path / "audit.duckdb"
    audit.load(db, journal_lines(journal=journal))
    con = audit.connect(db, read_only=True)
    rows = con.execute("SELECT id, gpus, record->>'$.gpus' FROM records ORDER BY seq").fetchall()
    assert rows == [("r1", None, "9223372036854775807"), ("t1", None, None)]


def test_an_empty_database_says_so(tmp_path: Path) -> None:
    db = tmp_path / "audit.duckdb"
    audit.connect(db).close()
    con = audit.connect(db, read_only=True)
    with pytest.raises(audit.AuditError, match="empty"):
        audit.history(con, "lab")
    con.close()
    with pytest.raises(audit.AuditError, match="no audit database"):
        audit.connect(tmp_path / "missing.duckdb", read_only=True)


# ------------------------------------------------------------------ why: the history


def lifecycle_history() -> list[Any]:
    """8 GPUs: `u1` runs unallocated, is preempted and requeued for `a1` (charged), runs
    again and finishes; `c1` waits and is cancelled; a late report about `u1`'s first
    attempt is rejected."""
    c = cluster(hosts=1, headroom_hosts=0)
    c.budget("lab", 1, managers=("pm",))
    c.budget("lab/a", 1, members=("alice", "bob"), actor="pm")
    c.submit("u1", "lab/a", gpus=8, min_runtime=0, resumable=True, actor="bob")
    c.at("10m").submit("a1", "lab/a", gpus=8, min_runtime="30m", actor="alice")
    c.at("15m").submit("c1", "lab/a", gpus=8, min_runtime="1h", actor="alice")
    c.at("16m").cancel("c1", actor="alice")
    c.at("40m").finish("a1")
    c.at("50m").finish("u1", attempt=1)  # about the old attempt: rejected
    c.at("2h").finish("u1")
    c.at("3h").tick()
    return c.journal


def both_histories(journal: Path, db: Path, wid: str) -> tuple[list[Any], list[Any]]:
    from projections.timeline import timeline
    from projections.views import decode_lines, fold, why

    from_journal = why(fold(decode_lines(journal_lines(journal=journal))), wid)["history"]
    con = audit.connect(db, read_only=True)
    try:
        from_db = timeline(audit.workload_records(con, audit.find_workload(con, wid)))
    finally:
        con.close()
    return from_journal, from_db


def test_why_history_has_every_attempt_from_both_sources(tmp_path: Path) -> None:
    journal, db = loaded(tmp_path, lifecycle_history())

    from_journal, from_db = both_histories(journal, db, "u1")
    assert from_journal == from_db
    events = [(e["event"], e.get("attempt")) for e in from_db]
    assert events == [
        ("submitted", None),
        ("placed", 1),
        ("preempted", 1),
        ("requeued", 1),
        ("placed", 2),
        ("rejected", None),
        ("finished", 2),
    ]
    placed, preempted = from_db[1], from_db[2]
    assert placed["hosts"] and placed["gpus"] == 8 and placed["charged"] is False
    assert placed["protected_until"] == placed["time"]  # unallocated: never protected
    assert preempted["beneficiary"] == "a1" and preempted["reason"] == "unallocated"
    assert preempted["requeued"] is True and preempted["explain"]  # the numbers used
    assert from_db[0]["actor"] == "bob" and from_db[-1]["outcome"] == "completed"

    charged = both_histories(journal, db, "a1")
    assert charged[0] == charged[1]
    a1_placed = next(e for e in charged[1] if e["event"] == "placed")
    assert a1_placed["charged"] is True
    assert a1_placed["explain"].get("preempted") == ["u1"]
    assert a1_placed["protected_until"] > a1_placed["time"]

    cancelled = both_histories(journal, db, "c1")
    assert cancelled[0] == cancelled[1]
    assert [e["event"] for e in cancelled[1]] == ["submitted", "cancelled"]
    assert cancelled[1][-1]["actor"] == "alice"


def test_why_history_is_the_same_from_both_sources_on_a_simulation(sim: Any) -> None:
    journal, db, records = sim
    ids = sorted({r["workload"] for r in records if r.get("workload")})
    assert len(ids) > 20
    for wid in ids:
        from_journal, from_db = both_histories(journal, db, wid)
        assert from_journal == from_db, wid
        placed = [e for e in from_db if e["event"] == "placed"]
        expected = [r for r in records if r["type"] == "workload.placed" and r["workload"] == wid]
        assert [e["attempt"] for e in placed] == [r["attempt"] for r in expected]


def test_why_history_ids_and_errors(sim: Any, tmp_path: Path) -> None:
    _, db, records = sim
    con = audit.connect(db, read_only=True)
    try:
        wid = next(r["workload"] for r in records if r["type"] == "workload.preempted")
        assert audit.find_workload(con, wid) == wid
        with pytest.raises(audit.AuditError, match="no workload 'nope'"):
            audit.find_workload(con, "nope")
        with pytest.raises(audit.AuditError, match="ambiguous"):
            audit.find_workload(con, wid.split("-")[0] + "-")
    finally:
        con.close()
    empty = tmp_path / "empty.duckdb"
    audit.connect(empty).close()
    con = audit.connect(empty, read_only=True)
    with pytest.raises(audit.AuditError, match="empty"):
        audit.find_workload(con, "x")
    con.close()


def test_an_unknown_allocation_in_the_budget_log(small: Any) -> None:
    con = audit.connect(small[1], read_only=True)
    try:
        with pytest.raises(audit.AuditError, match="unknown allocation"):
            audit.budget_log(con, "nope/x")
    finally:
        con.close()


def test_the_budget_log_says_which_weight_each_change_replaced(tmp_path: Path) -> None:
    """An audit of a budget showed the new weight only ("who set 3, and from what?"),
    and a cleared member list as a missing one."""
    db = loaded(tmp_path, reweighted_history())[1]
    con = audit.connect(db, read_only=True)
    try:
        log = audit.budget_log(con, "lab/a")
        assert [(e["change"], e["weight"], e["previous_weight"], e["members"]) for e in log] == [
            ("set", 1, None, ["alice"]),
            ("set", 3, 1, None),
            ("set", None, 3, []),  # weight kept; members cleared, not left out
            ("removed", None, 3, None),
            ("set", 2, None, None),  # a new allocation after the removal
        ]
    finally:
        con.close()


def test_the_budget_log_knows_what_each_allocations_last_change_replaced(
    tmp_path: Path,
) -> None:
    """On-call finding lab/big's weight set to 0 at night read `10 → 0` in the log and
    had to work out the command that puts 10 back; a change by names or a removal left
    them to rebuild the lists by hand. A creation has nothing to put back, and a
    refused change is not a change."""
    db = loaded(tmp_path, night_history())[1]
    con = audit.connect(db, read_only=True)
    try:
        undo = budget_undo(audit.budget_log(con))
        assert [
            (u["allocation"], u["weight"], u["managers"], u["members"], u["actor"]) for u in undo
        ] == [
            ("lab/old", 2, ["tl"], [], "pm"),
            ("lab/small", None, None, ["bob"], "pm"),
            ("lab/big", 10, None, None, "pm"),
        ]
        assert undo[-1]["time"] == "2026-01-01T01:00:00"
        assert budget_undo(audit.budget_log(con, "lab/big")) == undo[-1:]
    finally:
        con.close()
    (tmp_path / "recreated").mkdir()
    only_created = loaded(tmp_path / "recreated", reweighted_history())[1]
    con = audit.connect(only_created, read_only=True)
    try:  # lab/a's last change created it again: nothing of it to put back
        assert budget_undo(audit.budget_log(con)) == []
    finally:
        con.close()


def test_the_budget_log_lists_refused_changes_with_why(tmp_path: Path) -> None:
    """A refused change (not a manager, an unknown allocation) was only in the
    `rejections` view: `budget log`, where a manager looks for what became of a change,
    did not show it. It must not count as the weight a later change replaced."""
    db = loaded(tmp_path, refused_history())[1]
    con = audit.connect(db, read_only=True)
    try:
        log = audit.budget_log(con, "lab")
        assert [
            (e["actor"], e["allocation"], e["change"], e["weight"], e["previous_weight"])
            for e in log
        ] == [
            ("root", "lab", "set", 1, None),
            ("pm", "lab/a", "set", 1, None),
            ("mallory", "lab/a", "set refused", None, None),
            ("pm", "lab/gone", "remove refused", None, None),
            ("pm", "lab/a", "set", 3, 1),  # from 1: the refused 9 was never in force
        ]
        assert [e["error"] for e in log][:2] == [None, None]
        assert log[2]["error"].startswith("'mallory' is not a manager of 'lab'")
        assert log[3]["error"] == "unknown allocation 'lab/gone'"
    finally:
        con.close()


def test_a_database_loaded_before_budget_rows_is_backfilled(small: Any) -> None:
    """`budget_changes` reads its own small table; a database from before it was kept
    (its `budget_rows` empty) gets it filled on the next load."""
    journal, db, _ = small
    con = audit.connect(db, read_only=True)
    before = audit.budget_log(con)
    con.close()
    assert before
    import duckdb

    raw = duckdb.connect(str(db))  # not audit.connect: that would fill it again
    raw.execute("DELETE FROM budget_rows").fetchall()
    raw.close()
    assert audit.load(db, journal_lines(journal=journal), source=str(journal))["added"] == 0
    con = audit.connect(db, read_only=True)
    try:
        assert audit.budget_log(con) == before
    finally:
        con.close()


def test_a_gang_is_charged_its_whole_hosts_and_every_report_says_so(tmp_path: Path) -> None:
    """12 GPUs on 8-GPU hosts take two whole hosts: the scheduler charges 16 GPUs, and
    acct, the usage table and the audit's history count the same 16 (not the 12 asked)."""
    from projections.acct import acct_rows
    from projections.summary import fold as fold_usage
    from projections.views import fold

    c = cluster(hosts=2, headroom_hosts=0)
    c.budget("lab", 1)
    c.budget("lab/a", 1, members=("alice",))
    c.submit("g1", "lab/a", gpus=12, min_runtime="1h", actor="alice")
    c.at("2h").tick()
    placed = next(e for e in c.journal if e.type == "workload.placed")
    assert sum(len(g) for g in placed.hosts.values()) == 16
    assert c.state.charged.usage("lab/a", c.state.now) == pytest.approx(16 * 2 * HOUR)

    (row,) = acct_rows(fold(c.journal))
    assert (row["gpus"], row["alloc_gpus"], row["gpu_hours"]) == (12, 16, 32.0)
    charged = sum(r["charged_gpu_s"] for r in fold_usage(c.journal).hourly_rows()) / HOUR
    assert charged == pytest.approx(32.0)

    journal, db = loaded(tmp_path, c.journal)
    con = audit.connect(db, read_only=True)
    assert preset_history(audit.history(con, "lab")) == {"alice": (32.0, 0.0)}
    assert con.sql("SELECT gpus, held FROM placements").fetchall() == [(12, 16)]
    con.close()
    # a database an older allot loaded counted the 12 asked for: the next load fixes it
    import duckdb

    raw = duckdb.connect(str(db))  # not audit.connect: that would derive them again
    raw.execute("UPDATE run_spells SET gpus = 12, gpu_seconds = gpu_seconds * 12 / 16")
    raw.close()
    assert audit.load(db, journal_lines(journal=journal), source=str(journal))["added"] == 0
    con = audit.connect(db, read_only=True)
    assert preset_history(audit.history(con, "lab")) == {"alice": (32.0, 0.0)}
    con.close()


def test_the_budget_log_shows_changes_by_name_and_the_lists_they_left(tmp_path: Path) -> None:
    db = loaded(tmp_path, named_changes_history())[1]
    con = audit.connect(db, read_only=True)
    try:
        log = audit.budget_log(con, "lab/a")
        assert [
            (e["members"], e["add_members"], e["already_members"], e["remove_members"]) for e in log
        ] == [
            (["alice", "bob"], None, None, None),
            (["alice", "bob", "erin"], ["erin", "bob"], ["bob"], None),
            (["bob", "erin"], None, None, ["alice", "zed"]),
            (None, None, None, None),  # the members were kept
        ]
        assert log[2]["absent_members"] == ["zed"] and log[2]["weight"] == 2
        assert (log[3]["managers"], log[3]["add_managers"]) == (["tl"], ["tl"])
    finally:
        con.close()


def test_a_database_without_the_named_change_columns_reads_and_is_filled(
    tmp_path: Path,
) -> None:
    """A database an older allot loaded has no add_members (...) columns: read as it is,
    the log still has them (it is made from the records); the next load adds them."""
    import duckdb

    journal, db = loaded(tmp_path, named_changes_history())
    con = audit.connect(db, read_only=True)
    expected = audit.budget_log(con)
    con.close()
    raw = duckdb.connect(str(db))  # as an older allot left it
    raw.execute("DROP VIEW budget_changes").fetchall()
    for column in audit.NAMED_CHANGES:
        raw.execute(f"ALTER TABLE budget_rows DROP COLUMN {column}").fetchall()
    raw.execute(
        "CREATE VIEW budget_changes AS SELECT seq, time, t, cluster, actor, allocation, "
        "change, weight, managers, members FROM budget_rows"
    ).fetchall()
    raw.close()
    con = audit.connect(db, read_only=True)
    try:
        # the log is made from the records themselves, not from the derived columns
        assert audit.budget_log(con) == expected
    finally:
        con.close()
    assert audit.load(db, journal_lines(journal=journal), source=str(journal))["added"] == 0
    con = audit.connect(db, read_only=True)
    try:
        assert audit.budget_log(con) == expected
    finally:
        con.close()


def test_a_preemption_by_a_removed_host_says_how_long_it_ran(tmp_path: Path) -> None:
    """`allot preemptions` left RAN blank for `gpus_removed` (its explain has no ran_s):
    it is read from the attempt's placement, as every other reason's is from its explain."""
    from domain import events as ev

    c = cluster(hosts=1, headroom_hosts=0)
    c.budget("lab", 1)
    c.budget("lab/a", 1, members=("alice",))
    c.submit("w1", "lab/a", gpus=8, min_runtime="1h", actor="alice")
    c.at("20m").input(ev.HostRemoved, host="h0", reason="decommissioned")
    _, db = loaded(tmp_path, c.journal)
    con = audit.connect(db, read_only=True)
    (row,) = audit.preemptions(con)
    con.close()
    assert (row["reason"], row["ran_s"]) == ("gpus_removed", 20 * 60.0)


def test_history_and_preemptions_are_the_same_from_both_sources_on_a_simulation(
    sim: Any,
) -> None:
    """The database answers in SQL over `runs` and `preemptions`; the journal is folded
    by `projections.history`. A simulation with preemptions, gangs and requeues: the
    same rows from both, for every allocation and a window cutting runs."""
    from projections import history as folded

    _, db, records = sim
    assert any(r["type"] == "workload.preempted" for r in records)
    latest = max(float(r["time"]) for r in records)
    paths = sorted({r["allocation"] for r in records if isinstance(r.get("allocation"), str)})
    roots = sorted({p.split("/")[0] for p in paths})
    con = audit.connect(db, read_only=True)
    try:
        for path in [*roots, *paths]:
            for since, until in ((None, None), ("1d", None), (None, "2d")):
                assert audit.history(con, path, since, until) == folded.history(
                    records, path, since, until, latest
                ), (path, since, until)
        for since in (None, "1d"):
            assert audit.preemptions(con, since) == folded.preemptions(records, since, None, latest)
    finally:
        con.close()


def _json_of_rows(con: Any, allocation: str | None = None, since: str | None = None) -> bytes:
    """What `budget log --json` printed before DuckDB wrote it: orjson of the rows."""
    from projections.budget_log import rows_since, since_time

    since_t = since_time(since, audit.latest_time(con)) if since is not None else None
    return orjson.dumps(rows_since(audit.budget_log(con, allocation), since_t))


@pytest.mark.parametrize(
    "history", [small_history, reweighted_history, refused_history, named_changes_history]
)
def test_the_budget_log_json_written_by_duckdb_is_orjsons(tmp_path: Path, history: Any) -> None:
    """`budget log --json` from the database is written by DuckDB (a Python row of each
    was a third of the command on 10M records): the bytes orjson made of the rows."""
    db = loaded(tmp_path, history())[1]
    con = audit.connect(db, read_only=True)
    try:
        for allocation, since in ((None, None), ("lab/a", None), (None, "1h"), ("lab", "2h")):
            assert audit.budget_log_json(con, allocation, since=since) == _json_of_rows(
                con, allocation, since
            )
        with pytest.raises(audit.AuditError, match="unknown allocation"):
            audit.budget_log_json(con, "nope/x", since="nonsense")
    finally:
        con.close()


@pytest.mark.parametrize(
    "odd",
    [
        {"weight": 1e-6},  # DuckDB: 0.000001, orjson: 1e-6
        {"weight": 1e20},  # DuckDB: 100000000000000000000.0, orjson: 1e20
        {"actor": "pm\x1b"},  # DuckDB: \u001B, orjson: \u001b
        {"members": ["alice", 1e20]},  # a number in a list
        {"max_gpus_per_user": 1e20},  # a limit that is not a whole number
    ],
)
def test_the_budget_log_json_is_orjsons_where_duckdb_writes_otherwise(
    tmp_path: Path, odd: dict[str, Any]
) -> None:
    """Where DuckDB's JSON writer differs from orjson's (numbers beyond 1e15 or below
    1e-5, upper-case escapes, numbers in a list), the JSON is made from the rows."""
    lines = write(tmp_path / "plain.jsonl", named_changes_history()).read_bytes().splitlines()
    records = [orjson.loads(line) for line in lines]
    last_set = max(i for i, r in enumerate(records) if r["type"] == "budget.set")
    records[last_set].update(odd)
    journal = tmp_path / "journal.jsonl"
    journal.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    db = tmp_path / "audit.duckdb"
    audit.load(db, journal_lines(journal=journal), source=str(journal))
    con = audit.connect(db, read_only=True)
    try:
        assert audit.budget_log_json(con) == _json_of_rows(con)
    finally:
        con.close()
