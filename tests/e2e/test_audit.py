"""`allot audit load|sql`, `allot history`, `allot budget log`, `allot preemptions` as
subprocesses on a simulation's journal, and their one-line errors."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from datetime import UTC, datetime
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
    # floats in full: `.4g` printed 10486.6 as 1.049e+04 and 1234567.891 as 1234568
    query = "SELECT CAST(10486.6 AS DOUBLE) AS h, CAST(1234567.891 AS DOUBLE) AS x"
    floats = allot("audit", "sql", query, "--db", str(db))
    assert floats.stdout.splitlines()[-1].split() == ["10486.6", "1234567.891"]
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
    # the log is as new as the database's last load, and says so: a change made since
    # is missing from it, not refused or lost
    last = datetime.fromtimestamp(max(r["time"] for r in records), UTC)
    assert table.stdout.splitlines()[0] == (
        f"{len(budgets)} budget changes · {db} loaded up to "
        f"{last:%Y-%m-%d %H:%M:%S} UTC (`allot audit load` adds what is newer)"
    )


def test_budget_log_shows_each_weight_change_and_a_cleared_list(tmp_path: Path) -> None:
    """The table showed `3` for a change from 1 to 3, and a blank MEMBERS both where a
    change kept the members and where it removed them all."""
    from tests.projections.audit_histories import reweighted_history, write

    journal = write(tmp_path / "journal.jsonl", reweighted_history())
    db = tmp_path / "audit.duckdb"
    loaded = allot("audit", "load", "--journal", str(journal), "--db", str(db))
    assert loaded.returncode == 0, loaded.stderr
    table = allot("budget", "log", "-a", "lab/a", "--db", str(db))
    assert table.returncode == 0, table.stderr
    rows = [line.split()[2:] for line in table.stdout.splitlines()[2:]]
    assert rows == [
        ["pm", "lab/a", "set", "1", "alice"],
        ["pm", "lab/a", "set", "1", "→", "3"],
        ["pm", "lab/a", "set", "(none)"],
        ["pm", "lab/a", "removed"],
        ["pm", "lab/a", "set", "2"],
    ]


def test_budget_log_gives_the_command_that_undoes_each_latest_change(tmp_path: Path) -> None:
    """A weight set to 0 instead of 10 at night read `10 → 0` in the log: the on-call
    operator had to compose the command that puts it back, and for a change of members
    or a removal, the lists it replaced. Newest first, on stderr: the table is kept;
    the fixture's cluster is `test`, so the commands name it."""
    from tests.projections.audit_histories import night_history, write

    journal = write(tmp_path / "journal.jsonl", night_history())
    db = tmp_path / "audit.duckdb"
    loaded = allot("audit", "load", "--journal", str(journal), "--db", str(db))
    assert loaded.returncode == 0, loaded.stderr
    log = allot("budget", "log", "--db", str(db))
    assert log.returncode == 0, log.stderr
    assert log.stderr.splitlines() == [
        "undo pm's change of lab/old at 2026-01-01 03:00:00 (it was weight 2, managers tl, "
        "members (none)): allot budget set lab/old 2 --manager tl --no-members --cluster test",
        "undo pm's change of lab/small at 2026-01-01 02:00:00 (it was members bob): "
        "allot budget set lab/small --member bob --cluster test",
        "undo pm's change of lab/big at 2026-01-01 01:00:00 (it was weight 10): "
        "allot budget set lab/big 10 --cluster test",
    ]
    assert log.stdout.splitlines()[-1].split()[2:5] == ["mallory", "lab/big", "set"]


def test_budget_log_marks_refused_changes_and_says_why(tmp_path: Path) -> None:
    from tests.projections.audit_histories import refused_history, write

    journal = write(tmp_path / "journal.jsonl", refused_history())
    db = tmp_path / "audit.duckdb"
    loaded = allot("audit", "load", "--journal", str(journal), "--db", str(db))
    assert loaded.returncode == 0, loaded.stderr
    table = allot("budget", "log", "--db", str(db))
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].startswith("3 budget changes, 2 refused · ")
    assert lines[1].split()[-2:] == ["REFUSED", "BECAUSE"]
    refused = [" ".join(line.split()[2:]) for line in lines[2:] if "refused" in line.split()]
    assert refused == [
        "mallory lab/a set refused 'mallory' is not a manager of 'lab'; ask pm",
        "pm lab/gone remove refused unknown allocation 'lab/gone'",
    ]


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
    # from just after the one before the last: "1 preemption", not "1 preemptions"
    before_last = max(r["time"] for r in preempted if r["time"] < preempted[-1]["time"])
    since = math.floor(before_last) + 1
    assert sum(1 for r in preempted if r["time"] >= since) == 1
    iso_since = datetime.fromtimestamp(since, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    one = allot("preemptions", "--since", iso_since, db=db)
    assert one.returncode == 0, one.stderr
    assert re.match(r"1 preemption(?!s)", one.stdout), one.stdout


def test_history_and_preemptions_take_sacct_short_range_flags(db: Path) -> None:
    """-S/-E, as acct and usage take them: `history -S 7d` was "No such option: -S"."""
    for command in (["history", "-a", "lab"], ["preemptions"]):
        long = as_json(allot(*command, "--since", "6h", "--until", "1h", "--json", db=db))
        short = as_json(allot(*command, "-S", "6h", "-E", "1h", "--json", db=db))
        assert short == long


def test_audit_tables_show_times_as_acct_and_queue_do(db: Path) -> None:
    """history's title, budget log and preemptions printed 2026-01-01T06:00:00 where
    acct, queue and why print 2026-01-01 06:00:00; their JSON keeps ISO's T."""
    stamp = re.compile(r"\b2026-01-01[ T]\d\d:\d\d:\d\d\b")
    tables = [
        allot("history", "-a", "lab", "-S", "2026-01-01T06:00", db=db),
        allot("budget", "log", db=db),
        allot("preemptions", db=db),
    ]
    for table in tables:
        assert table.returncode == 0, table.stderr
        shown = stamp.findall(table.stdout)
        assert shown and all("T" not in t for t in shown), table.stdout
    assert tables[0].stdout.startswith("lab · 2026-01-01 06:00:00 → ")
    assert all("T" in r["time"] for r in as_json(allot("preemptions", "--json", db=db)))


# ------------------------------------------------------------------ errors


def test_a_first_load_that_fails_leaves_no_database(tmp_path: Path) -> None:
    """An unreachable broker left an empty database behind, which later commands took
    for a loaded one."""
    database = tmp_path / "new.duckdb"
    result = allot("audit", "load", "--kafka", "127.0.0.1:1", "--db", str(database))
    one_line_error(result, "cannot reach Kafka at 127.0.0.1:1")
    assert not database.exists() and not list(tmp_path.iterdir())


def test_a_bad_empty_or_outside_query_is_one_line(db: Path) -> None:
    one_line_error(allot("audit", "sql", "SELEC 1", "--db", str(db)), "syntax error")
    one_line_error(allot("audit", "sql", "SELECT * FROM nope", "--db", str(db)), "nope")
    one_line_error(allot("audit", "sql", "  ", "--db", str(db)), "give a query")
    # read-only means the database only: no file written or read beside it
    out = db.parent / "leak.csv"
    copy = f"COPY (SELECT 1) TO '{out}'"
    one_line_error(allot("audit", "sql", copy, "--db", str(db)), "disabled")
    assert not out.exists()
    one_line_error(
        allot("audit", "sql", "SELECT * FROM read_text('/etc/hostname')", "--db", str(db)),
        "disabled",
    )


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
    assert f"loaded 1 new record into {db} ({len(records):,} in all)" in result.stdout


def test_a_damaged_record_and_another_journal(journal: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"type":"clock.tick","time":1.0,"id":"a","cluster":"x"}\n{"type": \n')
    one_line_error(
        allot("audit", "load", "--journal", str(bad), "--db", str(tmp_path / "b.duckdb")),
        f"{bad}:2: not valid JSON",  # by file and line, as queue and replay name it
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


# ------------------------------------------------------------------ allot why: history


def most_preempted(records: list[dict[str, Any]]) -> str:
    counts: dict[str, int] = {}
    for r in records:
        if r["type"] == "workload.preempted":
            counts[r["workload"]] = counts.get(r["workload"], 0) + 1
    return max(counts, key=lambda w: (counts[w], w))


def test_why_shows_the_same_history_from_the_journal_and_the_audit_db(
    journal: Path, db: Path, records: list[dict[str, Any]]
) -> None:
    wid = most_preempted(records)
    mine = [r for r in records if r.get("workload") == wid]
    from_journal = as_json(allot("why", wid, "--journal", str(journal), "--json"))
    from_db = as_json(allot("why", wid, "--audit", str(db), "--json"))
    both = as_json(allot("why", wid, "--journal", str(journal), "--audit", str(db), "--json"))
    assert from_journal["history"] == from_db["history"] == both["history"]
    assert from_journal["history_source"] == {"kind": "journal"}
    assert from_db["history_source"]["kind"] == both["history_source"]["kind"] == "audit"
    assert both["current"] == from_journal["current"]  # the answer still from the journal
    events = [e["event"] for e in from_db["history"]]
    assert events.count("placed") == sum(r["type"] == "workload.placed" for r in mine)
    assert events.count("preempted") == sum(r["type"] == "workload.preempted" for r in mine)
    assert events.count("requeued") == sum(
        r["type"] == "workload.preempted" and r["requeued"] for r in mine
    )
    assert events[0] == "submitted"
    q = next(e for e in from_db["history"] if e["event"] == "preempted")
    raw = next(r for r in mine if r["type"] == "workload.preempted")
    assert q["beneficiary"] == raw["beneficiary"] and q["explain"] == raw["explain"]
    # the last state the database records agrees with the journal's answer
    assert from_db["current"]["state"] == from_journal["current"]["state"]

    text = allot("why", wid, "--journal", str(journal))
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("history, "))
    # the timeline comes under the answer (now, and what is expected for live work)
    assert any(line.startswith("now: ") for line in lines[:at])
    assert not any(line.startswith("now: ") for line in lines[at:])
    assert "from the journal" in lines[at]
    assert any("preempted #1" in line and raw["beneficiary"] in line for line in lines[at:])
    assert any("requeued #1" in line for line in lines[at:])
    db_text = allot("why", wid, "--audit", str(db))
    assert db_text.returncode == 0, db_text.stderr
    assert "no journal read" in db_text.stdout and f"audit database {db}" in db_text.stdout
    timeline = db_text.stdout[db_text.stdout.index("history, ") :].splitlines()[1:]
    assert timeline == lines[at + 1 :]


def test_why_audit_unique_prefix_and_every_workload(
    journal: Path, db: Path, records: list[dict[str, Any]]
) -> None:
    wid = most_preempted(records)
    by_prefix = as_json(allot("why", wid, "--audit", str(db), "--json"))
    assert by_prefix["workload"] == wid
    rejected = next((r for r in records if r["type"].endswith(".rejected")), None)
    if rejected is not None and not rejected.get("workload"):
        answer = as_json(allot("why", rejected["ref"], "--audit", str(db), "--json"))
        assert answer["rejection"]["error"] == rejected["error"]


def test_why_history_errors(journal: Path, db: Path, tmp_path: Path) -> None:
    one_line_error(
        allot("why", "zz-nope", "--audit", str(db)), "no workload 'zz-nope'", "audit database"
    )
    one_line_error(allot("why", "0-", "--audit", str(db)), "ambiguous")  # many ids start so
    one_line_error(
        allot("why", "0-000001", "--audit", str(tmp_path / "missing.duckdb")),
        "no audit database",
        "allot audit load",
    )
    one_line_error(
        allot("why", "0-000001", "--journal", str(journal), "--audit", str(tmp_path / "m.duckdb")),
        "no audit database",
    )
    empty_db = tmp_path / "empty.duckdb"
    audit.connect(empty_db).close()
    one_line_error(allot("why", "0-000001", "--audit", str(empty_db)), "empty")
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    one_line_error(allot("why", "0-000001", "--journal", str(empty)), "empty")
    # the journal has grown past the database: say to load it
    grown = tmp_path / "grown.jsonl"
    extra = {
        "type": "workload.submitted", "v": 1, "id": "late-1", "time": 1767268800.0,
        "cluster": "tiny", "actor": "alice", "workload": "late-w", "allocation": "lab/train",
        "gpus": 1, "min_runtime": 60.0,
    }  # fmt: skip
    grown.write_bytes(journal.read_bytes() + orjson.dumps(extra) + b"\n")
    one_line_error(
        allot("why", "late-w", "--journal", str(grown), "--audit", str(db)),
        "not in the audit database",
        "allot audit load",
    )
    assert (
        as_json(allot("why", "late-w", "--journal", str(grown), "--json"))["history"][0]["event"]
        == "submitted"
    )


def test_audit_presets_start_without_the_scheduler(db: Path) -> None:
    """Start-up of the presets: no scheduler core, pydantic models, trace importers,
    Kafka client or plotting is imported (together most of a second). (asyncio is:
    typer's parameter adapters import pydantic, which imports it.)"""
    probe = (
        "import sys, runpy\n"
        "sys.argv = ['allot', *sys.argv[1:]]\n"
        "try:\n"
        "    runpy.run_module('allot.cli', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = [m for m in ('domain', 'domain.events', 'projections.traces', 'rich.markdown',\n"
        "         'aiokafka', 'faust', 'matplotlib', 'projections.views') if m in sys.modules]\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
    )
    for args in (
        ["budget", "log", "--json", "--db", str(db)],  # (not $ALLOT_KAFKA's journal)
        ["history", "--allocation", "lab", "--since", "7d", "--json", "--db", str(db)],
        ["preemptions", "--since", "7d", "--json", "--db", str(db)],
        ["why", "0-000001", "--audit", str(db), "--json"],
    ):
        result = subprocess.run(
            [sys.executable, "-c", probe, *args],
            capture_output=True,
            text=True,
            env={**os.environ, "ALLOT_AUDIT_DB": str(db)},
            timeout=120,
        )
        assert "HEAVY []" in result.stderr, (args, result.stderr[-2000:])


def test_why_a_rejected_request_from_both_sources(tmp_path: Path) -> None:
    from streams.codec import encode
    from tests.projections.audit_histories import small_history

    journal = tmp_path / "journal.jsonl"
    journal.write_bytes(b"".join(encode(r) + b"\n" for r in small_history()))
    db = tmp_path / "audit.duckdb"
    assert allot("audit", "load", "--journal", str(journal), "--db", str(db)).returncode == 0
    records = [orjson.loads(line) for line in journal.read_bytes().splitlines()]
    rejected = next(r for r in records if r["type"] == "workload.rejected")

    by_ref_journal = as_json(allot("why", rejected["ref"], "--journal", str(journal), "--json"))
    by_ref_db = as_json(allot("why", rejected["ref"], "--audit", str(db), "--json"))
    assert by_ref_db == by_ref_journal
    assert by_ref_db["rejection"]["error"] == rejected["error"]

    wid = rejected["workload"]
    from_db = as_json(allot("why", wid, "--audit", str(db), "--json"))
    from_journal = as_json(allot("why", wid, "--journal", str(journal), "--json"))
    assert from_db["history"] == from_journal["history"]
    assert [e["event"] for e in from_db["history"]] == ["rejected"]
    assert from_db["current"]["state"] == from_journal["current"]["state"] == "REJECTED"


def test_budget_log_shows_changes_by_name_and_the_lists_they_left(tmp_path: Path) -> None:
    from tests.projections.audit_histories import named_changes_history, write

    journal = write(tmp_path / "journal.jsonl", named_changes_history())
    db = tmp_path / "audit.duckdb"
    loaded = allot("audit", "load", "--journal", str(journal), "--db", str(db))
    assert loaded.returncode == 0, loaded.stderr
    table = allot("budget", "log", "-a", "lab/a", "--db", str(db))
    assert table.returncode == 0, table.stderr
    rows = [line.split(maxsplit=2)[2] for line in table.stdout.splitlines()[2:]]
    assert [" ".join(r.split()) for r in rows] == [
        "pm lab/a set 1 alice,bob",
        "pm lab/a set +erin +bob (already) → alice,bob,erin",
        "pm lab/a set 1 → 2 -alice -zed (not there) → bob,erin",
        "pm lab/a set +tl → tl",
    ]
    logged = as_json(allot("budget", "log", "-a", "lab/a", "--json", "--db", str(db)))
    assert logged[1]["add_members"] == ["erin", "bob"]
    assert logged[1]["already_members"] == ["bob"] and logged[1]["members"] == [
        "alice",
        "bob",
        "erin",
    ]
    assert logged[2]["absent_members"] == ["zed"] and logged[2]["remove_members"] == [
        "alice",
        "zed",
    ]
