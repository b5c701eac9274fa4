"""`allot budget log`: who changed which budget, when, from what to what, and what would
undo the latest changes, made from the journal's budget records alone:

    rows = budget_log(records_of_type(RECORD_TYPES, data=Path("lab")), "lab/olmo")
    undo = budget_undo(rows)

The records (dicts, oldest first) come from the journal itself (a byte search,
`streams.sources.records_of_type`: no `allot audit load` first). The audit database
makes the same rows in SQL from the `budget_rows` table `audit load` keeps
(`projections.audit.budget_log`; a test keeps the two equal) and comes here only for a
database of an older layout. Plain Python, no DuckDB.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

# the records the log is made of: the changes made, and the ones the scheduler refused
RECORD_TYPES = ("budget.set", "budget.removed", "budget.rejected")

# a `budget.set`'s changes by name and the names that changed nothing (the scheduler's)
NAMED_CHANGES = (
    "add_managers",
    "remove_managers",
    "add_members",
    "remove_members",
    "already_managers",
    "absent_managers",
    "already_members",
    "absent_members",
)

# per-user limits a `budget.set` set (-1: removed; None: kept)
USER_LIMITS = ("max_gpus_per_user", "max_pending_per_user")

# a `budget.set` record's value that removes a limit (`domain.events.CLEAR_LIMIT`; the
# domain is not imported here: `allot budget log` starts light)
CLEAR_LIMIT = -1

_LIST_FIELDS = ("managers", "members")
# what an undo line puts back
_UNDONE_FIELDS = ("weight", *_LIST_FIELDS, *USER_LIMITS)


class BudgetLogError(ValueError):
    """A question the budget log cannot answer (an unknown allocation, a bad --since):
    one line for the user."""


def since_time(text: str, latest: float) -> float:
    """--since as every command reads it (`domain.durations.parse_moment`: `7d`, `07:13`,
    an ISO date, ...), relative forms counted back from `latest`, the journal's latest
    record time."""
    from projections.timeline import domain_module

    durations = domain_module("durations")  # not the whole domain package: start-up time
    try:
        return durations.parse_moment(text, latest)
    except ValueError as why:
        raise BudgetLogError(f"--since {text!r}: {why}") from None


def budget_log(
    records: Iterable[dict[str, Any]], allocation: str | None = None
) -> list[dict[str, Any]]:
    """Every budget change, oldest first (optionally for one allocation and those under
    it), with `previous_weight`: the weight in force before it (None for
    a new allocation, or its first set after a removal: the removal ends what came
    before). `weight`, `managers` and `members` are None where the change kept them; a
    change by names has the resulting list there, the names in `add_members`,
    `remove_members`, `add_managers`, `remove_managers`, and those that changed nothing
    in `already_members` (added, were there), `absent_members` (removed, were not) and
    the managers' alike (None where not given); `max_gpus_per_user` and
    `max_pending_per_user` the per-user limits it set (-1: removed; None: kept). Changes the scheduler refused are rows
    too, `change` `set refused` or `remove refused` and `error` why (None for the
    others): the change they asked for is not in the journal, only its `ref`."""
    weights: dict[tuple[Any, Any], float] = {}
    rows = []
    for record in records:
        row = _row(record, weights) if _is_budget_record(record) else None
        if row is not None:
            rows.append(row)
    if allocation:
        path = allocation.strip().strip("/")
        rows = [r for r in rows if _under(r["allocation"], path)]
        if not rows:
            raise BudgetLogError(unknown_allocation(allocation))
    return rows


def unknown_allocation(allocation: str) -> str:
    return f"unknown allocation {allocation!r}: no budget change names it"


def rows_since(rows: list[dict[str, Any]], since: float | None) -> list[dict[str, Any]]:
    """The rows from `since` on. It hides older rows, not their effect: a weight set
    before it is still the `previous_weight` of the first change after it."""
    return rows if since is None else [r for r in rows if r["t"] >= since]


def _is_budget_record(record: Any) -> bool:
    return isinstance(record, dict) and record.get("type") in RECORD_TYPES


def _under(allocation: Any, path: str) -> bool:
    return isinstance(allocation, str) and (allocation == path or allocation.startswith(path + "/"))


def _row(record: dict[str, Any], weights: dict[tuple[Any, Any], float]) -> dict[str, Any] | None:
    """One record's row; `weights` holds each allocation's weight in force so far."""
    t = _number(record.get("time"))
    if t is None:
        return None  # not a record the scheduler wrote (every one has its time)
    kind = record["type"]
    cluster, allocation = record.get("cluster"), record.get("allocation")
    row: dict[str, Any] = {
        "time": _iso(t),
        "t": t,
        "cluster": _text(cluster),
        "actor": _text(record.get("actor")),
        "allocation": _text(allocation),
    }
    if kind == "budget.rejected":
        removing = record.get("input_type") == "budget.removed"
        row["change"] = "remove refused" if removing else "set refused"
        row.update(_REFUSED_EMPTY)
        row["error"] = _text(record.get("error"))
        return row
    weight = _number(record.get("weight"))
    key = (cluster, allocation)
    if kind == "budget.removed":
        previous = weights.pop(key, None)
    else:
        previous = weights.get(key)
        if weight is not None:
            weights[key] = weight
    row["change"] = "set" if kind == "budget.set" else "removed"
    row["weight"] = weight
    row["previous_weight"] = previous
    for name in _LISTS:
        value = record.get(name)
        row[name] = value if isinstance(value, list) else None
    for name in USER_LIMITS:
        value = record.get(name)
        row[name] = value if type(value) is int else None
    row["error"] = None
    return row


_LISTS = ("managers", "members", *NAMED_CHANGES)
# a refused change's row: what it asked for is not in the journal
_REFUSED_EMPTY = dict.fromkeys(("weight", "previous_weight", *_LISTS, *USER_LIMITS))


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def _as_restored(before: dict[str, Any], fields: Iterable[str]) -> dict[str, Any]:
    """The values to set again: an unset list is put back as an empty one, a limit
    that was not there as CLEAR_LIMIT (`--max-gpus-per-user none`)."""
    return {f: before[f] if f not in _LIST_FIELDS else before[f] or [] for f in fields}


def _held_after(row: dict[str, Any], before: dict[str, Any] | None) -> dict[str, Any]:
    """An allocation's weight, lists and limits after the accepted `set` in `row`. A
    limit the row kept stays as it was; a new allocation has none (CLEAR_LIMIT), as a
    row's -1 (or any value below 1, as `AllocationTree.set`) leaves it."""
    kept = before or {}
    held = {f: row[f] if row[f] is not None else kept.get(f) for f in ("weight", *_LIST_FIELDS)}
    for f in USER_LIMITS:
        value = row[f]
        if value is None:
            held[f] = kept.get(f, CLEAR_LIMIT)
        else:
            held[f] = value if value >= 1 else CLEAR_LIMIT
    return held


def _set_on(held: dict[str, Any]) -> list[str]:
    """The fields to set on a removed allocation to have it back: all but its absent limits."""
    return [f for f in _UNDONE_FIELDS if f not in USER_LIMITS or held[f] != CLEAR_LIMIT]


def budget_undo(rows: list[dict[str, Any]], since: float | None = None) -> list[dict[str, Any]]:
    """For each allocation in `rows` (`budget_log`'s, oldest first, without `since`)
    whose last accepted change replaced something, what it replaced: `{cluster,
    allocation, time, t, actor, weight, managers, members, max_gpus_per_user,
    max_pending_per_user}`, each of the last five the value before the change (None
    where the change kept it; a list may be empty; a limit is CLEAR_LIMIT where there
    was none). An allocation the change created has nothing to put back; one it removed
    gets back its weight, lists and the limits it had. Newest change first; with
    `since`, only changes from then on. The rows must hold each allocation's history
    from its start (an allocation filter keeps whole histories)."""
    held: dict[tuple[str, str], dict[str, Any]] = {}
    replaced: dict[tuple[str, str], dict[str, Any] | None] = {}
    for r in rows:
        if r["error"] is not None:
            continue  # refused: it changed nothing
        key = (r["cluster"], r["allocation"])
        before = held.pop(key, None)
        if r["change"] == "removed":  # (a journal that starts later may not know it)
            # a limit it did not have needs no putting back: a new allocation has none
            was = _as_restored(before, _set_on(before)) if before else {}
        else:
            now = held[key] = _held_after(r, before)
            if before is None:  # created: nothing to put back
                was = {}
            else:
                changed = [f for f in _UNDONE_FIELDS if r[f] is not None and before[f] != now[f]]
                was = _as_restored(before, changed)
        replaced[key] = (
            {f: None for f in _UNDONE_FIELDS}
            | was
            | {"cluster": key[0], "allocation": key[1], "time": r["time"], "t": r["t"]}
            | {"actor": r["actor"]}
            if was
            else None
        )
    undo = [u for u in replaced.values() if u is not None and (since is None or u["t"] >= since)]
    return sorted(undo, key=lambda u: u["t"], reverse=True)
