"""`projections.budget_log` makes `allot budget log`'s rows; fed the journal's budget
records (a byte search) or the audit database's, it gives the same log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from projections import audit
from projections.budget_log import RECORD_TYPES, budget_log, budget_undo, rows_since
from streams.sources import records_of_type
from tests.projections import audit_histories as histories

HISTORIES = (
    "small_history",
    "reweighted_history",
    "refused_history",
    "named_changes_history",
    "night_history",
    "limits_history",
)


def _from_both(tmp_path: Path, history: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The budget log of `history` read from its journal and from its audit database."""
    journal, db = histories.loaded(tmp_path, history)
    from_journal = budget_log(records_of_type(RECORD_TYPES, journal=journal))
    con = audit.connect(db, read_only=True)
    try:
        return from_journal, audit.budget_log(con)
    finally:
        con.close()


@pytest.mark.parametrize("name", HISTORIES)
def test_the_journal_and_the_database_give_the_same_rows(name: str, tmp_path: Path) -> None:
    from_journal, from_db = _from_both(tmp_path, getattr(histories, name)())
    assert from_journal == from_db
    assert budget_undo(from_journal) == budget_undo(from_db)


def test_since_hides_older_rows_not_what_they_set(tmp_path: Path) -> None:
    journal, _ = histories.loaded(tmp_path, histories.reweighted_history())
    rows = budget_log(records_of_type(RECORD_TYPES, journal=journal), "lab/a")
    second: dict[str, Any] = rows[1]
    later = rows_since(rows, second["t"])
    assert later[0] == second and (second["previous_weight"], second["weight"]) == (1.0, 3.0)
    assert rows_since(rows, None) == rows
    assert budget_undo(rows, since=rows[-1]["t"] + 1) == []


def test_undo_puts_back_the_per_user_limits_a_change_replaced(tmp_path: Path) -> None:
    """A limit set where there was none is put back as none (CLEAR_LIMIT, -1); one
    replaced, as it was; a limit kept, not at all; a removed allocation gets back the
    limits it had, and no word of those it had not."""
    from_journal, from_db = _from_both(tmp_path, histories.limits_history())
    limits = ("max_gpus_per_user", "max_pending_per_user")
    for rows in (from_journal, from_db):
        undo = {
            u["allocation"]: tuple(u[k] for k in ("weight", *limits)) for u in budget_undo(rows)
        }
        assert undo == {"lab/c": (2.0, None, 5), "lab/b": (None, 4, None), "lab/a": (None, 8, -1)}
        first = budget_undo([r for r in rows if r["t"] <= rows[2]["t"]])  # lab/a's first limit
        assert [
            (u["allocation"], u["max_gpus_per_user"], u["max_pending_per_user"]) for u in first
        ] == [("lab/a", -1, None)]


@pytest.mark.parametrize("name", HISTORIES)
def test_history_and_preemptions_are_the_same_from_both_sources(name: str, tmp_path: Path) -> None:
    """The database answers in SQL over the tables `audit load` keeps (folding its
    records in Python took 20 s on 10M records); the journal is folded by
    `projections.history`: both must give the same rows."""
    from projections import history as folded

    journal, db = histories.loaded(tmp_path, getattr(histories, name)())
    records = records_of_type(folded.HISTORY_TYPES, journal=journal)
    latest = max(float(orjson.loads(line)["time"]) for line in journal.read_bytes().splitlines())
    roots = sorted({r["allocation"].split("/")[0] for r in records if r.get("allocation")})
    con = audit.connect(db, read_only=True)
    try:
        for root in roots:
            for since in (None, "1h"):
                assert audit.history(con, root, since) == folded.history(
                    records, root, since, None, latest
                )
        assert audit.preemptions(con) == folded.preemptions(records, None, None, latest)
    finally:
        con.close()
