"""`allot budget log` from the journal itself (--data, --journal, $ALLOT_DATA) and from
the audit database gives the same rows, refusals and undo lines. It used to read only
the database, so a manager had to run `allot audit load` before asking who changed a
budget. (The Kafka source: tests/e2e/test_budget_kafka.py.)"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.e2e.cli import allot, one_line_error
from tests.e2e.requests_rig import ADMIN, serve, wait_for
from tests.projections.audit_histories import limits_history, night_history, write


def rows_and_undo(result: subprocess.CompletedProcess[str]) -> tuple[list[str], list[str]]:
    """The table without its title (which names the source), and stderr's undo lines."""
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()[1:], result.stderr.splitlines()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A folder served by a real `allot serve --data`, its budgets set through it: lab
    (pm), lab/a at 1 then 3, erin added to lab/b's members, a change by mallory (not a
    manager) refused, and lab/c removed."""
    data = tmp_path_factory.mktemp("served") / "data"
    server = serve(data)
    try:
        for args in (
            ("budget", "set", "lab", "1", "--manager", "pm", "--as", ADMIN),
            ("budget", "set", "lab/a", "1", "--member", "alice", "--as", "pm"),
            ("budget", "set", "lab/b", "1", "--member", "bob", "--as", "pm"),
            ("budget", "set", "lab/c", "2", "--as", "pm"),
            ("budget", "set", "lab/a", "3", "--as", "pm"),
            ("budget", "set", "lab/b", "--add-member", "erin", "--as", "pm"),
            ("budget", "remove", "lab/c", "--as", "pm"),
        ):
            done = allot(*args, "--data", str(data))
            assert done.returncode == 0, (args, done.stdout, done.stderr)
        refused = allot("budget", "set", "lab/a", "9", "--as", "mallory", "--data", str(data))
        assert refused.returncode == 1, (refused.stdout, refused.stderr)
        wait_for(data, lambda r: r.get("type") == "budget.rejected")
        yield data
    finally:
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=30)


def test_the_journal_and_the_audit_database_give_the_same_log(served: Path, tmp_path: Path) -> None:
    from_journal = allot("budget", "log", "--data", str(served))
    assert from_journal.stdout.startswith(
        f"7 budget changes, 1 refused · from the journal ({served})\n"
    )
    db = tmp_path / "audit.duckdb"
    loaded = allot("audit", "load", "--data", str(served), "--db", str(db))
    assert loaded.returncode == 0, loaded.stderr
    from_db = allot("budget", "log", "--db", str(db))
    assert from_db.stdout.startswith(f"7 budget changes, 1 refused · {db} loaded up to ")
    assert rows_and_undo(from_journal) == rows_and_undo(from_db)

    rows, undo = rows_and_undo(from_journal)
    shown = [" ".join(line.split()[2:]) for line in rows[1:]]
    assert shown == [
        "ops lab set 1 pm",
        "pm lab/a set 1 alice",
        "pm lab/b set 1 bob",
        "pm lab/c set 2",
        "pm lab/a set 1 → 3",
        "pm lab/b set +erin → bob,erin",
        "pm lab/c removed",
        "mallory lab/a set refused 'mallory' is not a manager of 'lab'; ask pm",
    ]
    assert [line.split(": ", 1)[1] for line in undo] == [
        "allot budget set lab/c 2 --no-managers --no-members",
        "allot budget set lab/b --member bob",
        "allot budget set lab/a 1",
    ]

    # --json and -a alike; the database says nothing the journal does not
    for args in (["--json"], ["-a", "lab/a", "--json"], ["-A", "lab/b"]):
        journal_says = allot("budget", "log", *args, "--data", str(served))
        db_says = allot("budget", "log", *args, "--db", str(db))
        assert rows_and_undo(journal_says) == rows_and_undo(db_says), args
    logged = orjson.loads(
        allot("budget", "log", "-a", "lab/a", "--json", "--data", str(served)).stdout
    )
    assert [(r["change"], r["weight"], r["previous_weight"], r["error"]) for r in logged] == [
        ("set", 1.0, None, None),
        ("set", 3.0, 1.0, None),
        ("set refused", None, None, "'mallory' is not a manager of 'lab'; ask pm"),
    ]


def test_allot_data_names_the_journal_as_for_the_other_read_commands(served: Path) -> None:
    by_flag = allot("budget", "log", "--data", str(served))
    by_variable = allot("budget", "log", env={"ALLOT_DATA": str(served)})
    assert (by_variable.returncode, by_variable.stdout, by_variable.stderr) == (
        0,
        by_flag.stdout,
        by_flag.stderr,
    )


def test_since_shows_the_changes_from_then_on_from_both_sources(tmp_path: Path) -> None:
    """night_history: lab/big 10 → 0 at 01:00, erin added to lab/small at 02:00, lab/old
    removed at 03:00, mallory refused at 04:00. `-S 02:00` (a time of day, as sacct
    takes it) and `-S 3h` (before the latest record) keep the later changes; the
    previous weight is still the one set before --since."""
    journal = write(tmp_path / "journal.jsonl", night_history())
    db = tmp_path / "audit.duckdb"
    assert allot("audit", "load", "--journal", str(journal), "--db", str(db)).returncode == 0
    for since in ("02:00", "2026-01-01T02:00", "2h"):
        from_journal = allot("budget", "log", "-S", since, "--journal", str(journal))
        from_db = allot("budget", "log", "--since", since, "--db", str(db))
        rows, undo = rows_and_undo(from_journal)
        assert (rows, undo) == rows_and_undo(from_db), since
        assert [line.split()[3:5] for line in rows[1:]] == [
            ["lab/small", "set"],
            ["lab/old", "removed"],
            ["lab/big", "set"],
        ], since
        assert [line.split()[4] for line in undo] == ["lab/old", "lab/small"], since
    everything = allot("budget", "log", "-a", "lab/big", "--journal", str(journal))
    assert "10 → 0" in everything.stdout
    later = allot("budget", "log", "-a", "lab/big", "-S", "1h", "--journal", str(journal))
    assert [line.split()[2:] for line in later.stdout.splitlines()[2:]] == [
        ["mallory", "lab/big", "set", "refused", "'mallory'", "is", "not", "a", "manager",
         "of", "'lab';", "ask", "pm"],
    ]  # fmt: skip


def test_budget_log_source_errors_are_one_line(tmp_path: Path) -> None:
    journal = write(tmp_path / "journal.jsonl", night_history())
    one_line_error(allot("budget", "log", "-S", "soon", "--journal", str(journal)), "--since")
    one_line_error(
        allot("budget", "log", "-a", "nope", "--journal", str(journal)), "unknown allocation"
    )
    one_line_error(allot("budget", "log", "--data", str(tmp_path / "missing")), "no such folder")
    one_line_error(
        allot("budget", "log", "--journal", str(tmp_path / "none.jsonl")), "no such journal"
    )


def test_undo_lines_put_back_per_user_limits_from_both_sources(tmp_path: Path) -> None:
    """limits_history: lab/a's GPU limit 8 → 16 with a new pending limit of 20, lab/b's
    GPU limit 4 removed, lab/c (a pending limit of 5) removed. Each undo line gives the
    limits back as they were: `none` for one there was not."""
    journal = write(tmp_path / "journal.jsonl", limits_history())
    db = tmp_path / "audit.duckdb"
    assert allot("audit", "load", "--journal", str(journal), "--db", str(db)).returncode == 0
    from_journal = allot("budget", "log", "--journal", str(journal))
    assert rows_and_undo(from_journal) == rows_and_undo(allot("budget", "log", "--db", str(db)))
    _, undo = rows_and_undo(from_journal)
    assert [line.split(" (it was ", 1)[1] for line in undo] == [
        "weight 2, managers (none), members (none), per-user pending 5): allot budget set "
        "lab/c 2 --no-managers --no-members --max-pending-per-user 5 --cluster test",
        "per-user gpus 4): allot budget set lab/b --max-gpus-per-user 4 --cluster test",
        "per-user gpus 8, pending none): allot budget set lab/a --max-gpus-per-user 8 "
        "--max-pending-per-user none --cluster test",
    ]
