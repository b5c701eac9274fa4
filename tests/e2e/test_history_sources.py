"""`allot history` and `allot preemptions` from the journal itself (--data, --journal,
$ALLOT_DATA) and from the audit database give the same table and JSON. They used to
read only the database, so an operator with a --data folder had to run `allot audit
load` first to learn who used an allocation or what was preempted."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.e2e.cli import allot, one_line_error
from tests.e2e.requests_rig import journal, one_4_gpu_host_for_lab_x, serve, wait_for


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """A folder served by a real `allot serve --data` (stopped before the reads, so both
    sources see the same journal): alice's and bob's work on lab/x, alice's requeued
    (a preemption) and started again, bob's cancelled; and its audit database."""
    root = tmp_path_factory.mktemp("served")
    data = root / "data"
    server = serve(data)
    try:
        one_4_gpu_host_for_lab_x(data)
        ids = {}
        for user in ("alice", "bob"):
            submitted = allot(
                "submit", "-A", "lab/x", "-G", "2", "--min-runtime", "1h", "--as", user,
                "--data", str(data), "--parsable",
            )  # fmt: skip
            assert submitted.returncode == 0, submitted.stderr
            ids[user] = submitted.stdout.strip()
        for wid in ids.values():
            wait_for(data, lambda r, w=wid: r["type"] == "workload.placed" and r["workload"] == w)
        requeued = allot(
            "requeue", ids["alice"], "--as", "alice", "--data", str(data), "--wait", "20"
        )
        assert requeued.returncode == 0, requeued.stdout + requeued.stderr
        wait_for(
            data,
            lambda r: (
                r["type"] == "workload.placed"
                and r["workload"] == ids["alice"]
                and r["attempt"] == 2
            ),
        )
        cancelled = allot("cancel", ids["bob"], "--as", "bob", "--data", str(data), "--wait", "20")
        assert cancelled.returncode == 0, cancelled.stderr
        wait_for(data, lambda r: r["type"] == "workload.cancelled")
    finally:
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=30)
    assert any(r["type"] == "workload.preempted" for r in journal(data))
    db = root / "audit.duckdb"
    loaded = allot("audit", "load", "--data", str(data), "--db", str(db))
    assert loaded.returncode == 0, loaded.stderr
    yield data, db


def same(a: subprocess.CompletedProcess[str], b: subprocess.CompletedProcess[str]) -> str:
    assert a.returncode == 0, a.stderr
    assert (b.returncode, b.stdout, b.stderr) == (0, a.stdout, a.stderr)
    return a.stdout


@pytest.mark.parametrize(
    "question",
    [
        ("history", "-a", "lab"),
        ("history", "-a", "lab/x", "--json"),
        ("history", "-a", "lab", "--since", "2m", "--json"),
        ("preemptions",),
        ("preemptions", "--json"),
    ],
)
def test_the_journal_and_the_audit_database_give_the_same_answer(
    served: tuple[Path, Path], question: tuple[str, ...]
) -> None:
    data, db = served
    from_journal = allot(*question, "--data", str(data))
    from_file = allot(*question, "--journal", str(data / "journal.jsonl"))
    from_variable = allot(*question, env={"ALLOT_DATA": str(data)})
    from_db = allot(*question, "--db", str(db))
    from_default_db = allot(*question, env={"ALLOT_AUDIT_DB": str(db)})
    out = same(from_journal, from_db)
    for other in (from_file, from_variable, from_default_db):
        same(from_journal, other)
    assert out.strip()


def test_the_answers_name_the_work(served: tuple[Path, Path]) -> None:
    data, _ = served
    rows = orjson.loads(allot("preemptions", "--json", "--data", str(data)).stdout)
    assert [(r["user"], r["allocation"], r["gpus"], r["reason"], r["requeued"]) for r in rows] == [
        ("alice", "lab/x", 2, "requested", True)
    ]
    assert rows[0]["ran_s"] is not None and rows[0]["ran_s"] >= 0
    answer = orjson.loads(allot("history", "-a", "lab", "--json", "--data", str(data)).stdout)
    runs = {u["user"]: u["runs"] for u in answer["users"]}
    assert runs == {"alice": 2, "bob": 1}  # alice ran twice (requeued), bob once
    table = allot("preemptions", "--data", str(data)).stdout
    assert table.startswith("1 preemption\n") and "requested" in table


def test_an_unknown_allocation_is_one_line_from_both(served: tuple[Path, Path]) -> None:
    data, db = served
    for source in (("--data", str(data)), ("--db", str(db))):
        one_line_error(allot("history", "-a", "lab/nope", *source), "unknown allocation 'lab/nope'")


@pytest.mark.parametrize("question", [("history", "-a", "lab"), ("preemptions",)])
def test_no_journal_and_no_audit_database_say_where_the_journal_is(
    tmp_path: Path, question: tuple[str, ...]
) -> None:
    result = allot(*question, cwd=tmp_path)
    one_line_error(result)
    assert result.stderr == (
        "error: say where the journal is: --kafka HOST:PORT (or $ALLOT_KAFKA), --data DIR "
        "or --journal FILE (or an audit database: --db)\n"
    )


def test_a_missing_folder_is_one_line(tmp_path: Path) -> None:
    for question in (("history", "-a", "lab"), ("preemptions",)):
        one_line_error(allot(*question, "--data", str(tmp_path / "missing")), "no such folder")
