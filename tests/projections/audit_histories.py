"""Small budget and work histories for the audit store's tests (tests/projections and
tests/e2e), written as journals and loaded into a DuckDB file as `allot audit load`
does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from domain import events as ev
from projections import audit
from streams.codec import encode
from streams.sources import journal_lines
from tests.domain.builders import cluster


def write(path: Path, records: list[Any]) -> Path:
    path.write_bytes(b"".join(encode(r) + b"\n" for r in records))
    return path


def small_history() -> list[Any]:
    """8 GPUs; alice runs 4 GPUs charged for 1h in lab/a; bob runs 4 GPUs unallocated
    in lab/b from 0 to the end (3h); pm halves lab/a's weight at 30m; a submission to
    an unknown allocation is rejected."""
    c = cluster(hosts=1, headroom_hosts=0)
    c.budget("lab", 1, managers=("pm",))
    c.budget("lab/a", 1, members=("alice",), actor="pm")
    c.budget("lab/b", 1, members=("bob",), actor="pm")
    c.submit("a1", "lab/a", gpus=4, min_runtime="1h", actor="alice")
    c.submit("b1", "lab/b", gpus=4, min_runtime=0, actor="bob")
    c.at("30m").input(ev.BudgetSet, allocation="lab/a", weight=0.5, actor="pm")
    c.submit("x1", "lab/zzz", gpus=1, actor="alice")
    c.at("1h").finish("a1")
    c.at("3h").tick()
    return c.journal


def reweighted_history() -> list[Any]:
    """pm gives lab/a weight 1, then 3, clears its members (weight kept), removes it
    and creates it again with weight 2."""
    c = cluster(hosts=1, headroom_hosts=0)
    c.budget("lab", 1, managers=("pm",))
    c.budget("lab/a", 1, members=("alice",), actor="pm")
    c.at("1h").input(ev.BudgetSet, allocation="lab/a", weight=3, actor="pm")
    c.at("2h").input(ev.BudgetSet, allocation="lab/a", members=(), actor="pm")
    c.at("3h").input(ev.BudgetRemoved, allocation="lab/a", actor="pm")
    c.at("4h").input(ev.BudgetSet, allocation="lab/a", weight=2, actor="pm")
    return c.journal


def refused_history() -> list[Any]:
    """lab/a at weight 1; mallory's change to 9 and pm's removal of an unknown
    allocation are refused; pm sets lab/a to 3."""
    c = cluster(hosts=1, headroom_hosts=0)
    c.budget("lab", 1, managers=("pm",))
    c.budget("lab/a", 1, actor="pm")
    c.at("1h").input(ev.BudgetSet, allocation="lab/a", weight=9, actor="mallory")
    c.at("2h").input(ev.BudgetRemoved, allocation="lab/gone", actor="pm")
    c.at("3h").input(ev.BudgetSet, allocation="lab/a", weight=3, actor="pm")
    return c.journal


def named_changes_history() -> list[Any]:
    """lab/a starts with members alice and bob; pm adds erin (and bob, already there),
    removes alice and zed (not there), then adds a manager."""
    c = cluster(hosts=1, headroom_hosts=0)
    c.budget("lab", 1, managers=("pm",))
    c.budget("lab/a", 1, members=("alice", "bob"), actor="pm")
    c.at("1h").input(ev.BudgetSet, allocation="lab/a", add_members=("erin", "bob"), actor="pm")
    c.at("2h").input(
        ev.BudgetSet, allocation="lab/a", remove_members=("alice", "zed"), weight=2, actor="pm"
    )
    c.at("3h").input(ev.BudgetSet, allocation="lab/a", add_managers=("tl",), actor="pm")
    return c.journal


def limits_history() -> list[Any]:
    """pm gives lab/a a GPU limit of 8 at 1h, then 16 GPUs and 20 pending at 2h;
    creates lab/b with a GPU limit of 4 at 3h and removes that limit at 4h; creates
    lab/c (weight 2, a pending limit of 5) and removes it at 5h."""
    c = cluster(hosts=1, headroom_hosts=0)
    c.budget("lab", 1, managers=("pm",))
    c.budget("lab/a", 1, actor="pm")
    c.at("1h").input(ev.BudgetSet, allocation="lab/a", max_gpus_per_user=8, actor="pm")
    c.at("2h").input(
        ev.BudgetSet,
        allocation="lab/a",
        max_gpus_per_user=16,
        max_pending_per_user=20,
        actor="pm",
    )
    c.at("3h").input(ev.BudgetSet, allocation="lab/b", weight=1, max_gpus_per_user=4, actor="pm")
    c.at("4h").input(ev.BudgetSet, allocation="lab/b", max_gpus_per_user=-1, actor="pm")
    c.budget("lab/c", 2, max_pending_per_user=5, actor="pm")
    c.at("5h").input(ev.BudgetRemoved, allocation="lab/c", actor="pm")
    return c.journal


def loaded(tmp_path: Path, records: list[Any]) -> tuple[Path, Path]:
    """`records` written to TMP/journal.jsonl and loaded into TMP/audit.duckdb: (journal,
    database)."""
    journal = write(tmp_path / "journal.jsonl", records)
    db = tmp_path / "audit.duckdb"
    audit.load(db, journal_lines(journal=journal), source=str(journal))
    return journal, db


def night_history() -> list[Any]:
    """pm sets lab/big to 10 (members alice) and lab/small to 5; at night pm sets
    lab/big's weight to 0, adds erin to lab/small, and removes lab/old (weight 2,
    manager tl, no members); a refused change to lab/big comes last."""
    c = cluster(hosts=1, headroom_hosts=0)
    c.budget("lab", 1, managers=("pm",))
    c.budget("lab/big", 10, members=("alice",), actor="pm")
    c.budget("lab/small", 5, members=("bob",), actor="pm")
    c.budget("lab/old", 2, managers=("tl",), actor="pm")
    c.at("1h").input(ev.BudgetSet, allocation="lab/big", weight=0, actor="pm")
    c.at("2h").input(ev.BudgetSet, allocation="lab/small", add_members=("erin",), actor="pm")
    c.at("3h").input(ev.BudgetRemoved, allocation="lab/old", actor="pm")
    c.at("4h").input(ev.BudgetSet, allocation="lab/big", weight=7, actor="mallory")
    return c.journal
