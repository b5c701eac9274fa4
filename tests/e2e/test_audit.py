"""`allot audit load|sql`, `allot history`, `allot budget log`, `allot preemptions` as
subprocesses on a simulation's journal, and their one-line errors."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest

from projections import audit
from tests.e2e.cli import FIXTURES, one_line_error
from tests.e2e.cli import allot as run_allot

TINY = FIXTURES / "tiny.yaml"


def allot(*args: str, db: Path | None = None) -> subprocess.CompletedProcess[str]:
    return run_allot(*args, env={"ALLOT_AUDIT_DB": str(db)} if db is not None else None)


@pytest.fixture(scope="module")
def journal(tiny_journal: Path) -> Path:
    return tiny_journal


@pytest.fixture(scope="module")
def records(journal: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in journal.read_bytes().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def db(
    journal: Path, records: list[dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    path = tmp_path_factory.mktemp("audit") / "audit.duckdb"
    first = allot("audit", "load", "--journal", str(journal), "--db", str(path))
    assert first.returncode == 0, first.stderr
    assert f"loaded {len(records):,} new records" in first.stdout
    again = allot("audit", "load", "--journal", str(journal), "--db", str(path))
    assert again.returncode == 0, again.stderr
    assert f"loaded 0 new records into {path} ({len(records):,} in all)" in again.stdout
    return path


def as_json(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.returncode == 0, result.stderr
    return orjson.loads(result.stdout)


def test_sql_table_and_json(db: Path, records: list[dict[str, Any]]) -> None:
    query = "SELECT type, count(*) AS n FROM journal GROUP BY type ORDER BY n DESC, type"
    rows = as_json(allot("audit", "sql", query, "--db", str(db), "--json"))
    counts: dict[str, int] = {}
    for r in records:
        counts[r["type"]] = counts.get(r["type"], 0) + 1
    assert {row["type"]: row["n"] for row in rows} == counts
    table = allot("audit", "sql", query, "--db", str(db))
    assert table.returncode == 0, table.stderr
    assert "workload.submitted" in table.stdout and "type" in table.stdout.splitlines()[1]
    # the default database comes from $ALLOT_AUDIT_DB
    times = as_json(allot("audit", "sql", "SELECT min(time) AS t FROM journal", "--json", db=db))
    assert times[0]["t"].startswith("2026-01-01")


def test_history(db: Path) -> None:
    con = audit.connect(db, read_only=True)
    expected = audit.history(con, "lab", "6h")
    con.close()
    answer = as_json(allot("history", "--allocation", "lab", "--since", "6h", "--json", db=db))
    assert answer == expected
    assert answer["charged_gpu_h"] > 0 and {u["user"] for u in answer["users"]} == {"alice", "bob"}
    table = allot("history", "--allocation", "lab", "--since", "2026-01-01T06:00", "--db", str(db))
    assert table.returncode == 0, table.stderr
    assert "CHARGED GPU-h" in table.stdout and "alice" in table.stdout
    assert f"{expected['charged_gpu_h']:.2f}" in table.stdout


def test_budget_log(db: Path, records: list[dict[str, Any]]) -> None:
    rows = as_json(allot("budget", "log", "--json", "--db", str(db)))
    budgets = [r for r in records if r["type"] in ("budget.set", "budget.removed")]
    assert [(r["allocation"], r["weight"], r["actor"]) for r in rows] == [
        (r["allocation"], r.get("weight"), r["actor"]) for r in budgets
    ]
    table = allot("budget", "log", "--db", str(db))
    assert table.returncode == 0, table.stderr
    assert "lab/train" in table.stdout and "ACTOR" in table.stdout


def test_preemptions(db: Path, records: list[dict[str, Any]]) -> None:
    rows = as_json(allot("preemptions", "--json", "--db", str(db)))
    preempted = [r for r in records if r["type"] == "workload.preempted"]
    assert [p["workload"] for p in rows] == [r["workload"] for r in preempted]
    now = max(r["time"] for r in records)
    late = as_json(allot("preemptions", "--since", "3h", "--json", "--db", str(db)))
    assert len(late) == sum(1 for r in preempted if r["time"] >= now - 3 * 3600)
    table = allot("preemptions", "--db", str(db))
    assert table.returncode == 0, table.stderr
    assert "REASON" in table.stdout and preempted[0]["workload"] in table.stdout


# ------------------------------------------------------------------ errors


def test_a_query_with_a_syntax_error(db: Path) -> None:
    one_line_error(allot("audit", "sql", "SELEC 1", "--db", str(db)), "syntax error")
    one_line_error(allot("audit", "sql", "SELECT * FROM nope", "--db", str(db)), "nope")


def test_an_unknown_allocation(db: Path) -> None:
    one_line_error(
        allot("history", "--allocation", "lab/nope", "--db", str(db)), "unknown allocation"
    )
    one_line_error(
        allot("history", "--allocation", "lab", "--since", "soon", "--db", str(db)), "not a time"
    )


def test_an_empty_journal(tmp_path: Path) -> None:
    empty = tmp_path / "journal.jsonl"
    empty.write_bytes(b"")
    one_line_error(
        allot("audit", "load", "--journal", str(empty), "--db", str(tmp_path / "a.duckdb")),
        "empty",
    )
    one_line_error(
        allot("history", "--allocation", "lab", "--db", str(tmp_path / "missing.duckdb")),
        "no audit database",
    )
    one_line_error(allot("audit", "load", "--db", str(tmp_path / "a.duckdb")), "--journal")


def test_a_truncated_last_line(
    journal: Path, records: list[dict[str, Any]], tmp_path: Path
) -> None:
    only = tmp_path / "only.jsonl"
    only.write_bytes(journal.read_bytes().splitlines()[0][:40])
    one_line_error(
        allot("audit", "load", "--journal", str(only), "--db", str(tmp_path / "o.duckdb")),
        "empty",
    )
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(journal.read_bytes()[:-20])  # the last record loses its end
    db = tmp_path / "cut.duckdb"
    result = allot("audit", "load", "--journal", str(cut), "--db", str(db))
    assert result.returncode == 0, result.stderr
    assert f"loaded {len(records) - 1:,} new records" in result.stdout
    assert "last line" in result.stderr and "Traceback" not in result.stderr
    # once the write completes, the next load adds just that record
    cut.write_bytes(journal.read_bytes())
    result = allot("audit", "load", "--journal", str(cut), "--db", str(db))
    assert f"loaded 1 new records into {db} ({len(records):,} in all)" in result.stdout


def test_a_damaged_record_and_another_journal(journal: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"type":"clock.tick","time":1.0,"id":"a","cluster":"x"}\n{"type": \n')
    one_line_error(
        allot("audit", "load", "--journal", str(bad), "--db", str(tmp_path / "b.duckdb")),
        "record 2 is not valid JSON",
    )
    db = tmp_path / "c.duckdb"
    assert allot("audit", "load", "--journal", str(journal), "--db", str(db)).returncode == 0
    other = tmp_path / "other.jsonl"
    other.write_bytes(journal.read_bytes())
    one_line_error(allot("audit", "load", "--journal", str(other), "--db", str(db)), "another --db")


def test_load_from_the_embedded_folder(
    journal: Path, records: list[dict[str, Any]], tmp_path: Path
) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "journal.jsonl").write_bytes(journal.read_bytes())
    db = tmp_path / "d.duckdb"
    result = allot("audit", "load", "--data", str(folder), "--db", str(db))
    assert result.returncode == 0, result.stderr
    assert f"loaded {len(records):,} new records" in result.stdout
    one_line_error(
        allot("audit", "load", "--data", str(tmp_path / "nope"), "--db", str(db)), "no such folder"
    )
