"""`allot history` (GPU-hours by user of an allocation) and `allot preemptions`, made
from the journal's workload records alone:

    answer = history(records, "lab/olmo", since="7d", until=None, latest=latest)
    rows = preemptions(records, since=None, until=None, latest=latest)

The records (dicts, oldest first) come from either source, and both give the same
answer: the journal itself (`streams.sources`: a byte search for the few types each
needs, no `allot audit load` first) here, and the audit database in SQL over the tables
`audit load` keeps (`projections.audit.history`, `preemptions`: the same rows, a test
keeps them equal; folding 10M loaded records in Python took 20 s). `history` folds as the
records come (an iterable: a big journal is not held in memory), keeping only the
allocation's open runs. Plain Python, no DuckDB.

A run is one placement (`workload.placed`) up to the first end of its workload after it
(`workload.finished`, `workload.preempted` or `workload.cancelled`), or to the
journal's latest record time if none; its GPUs are those its hosts give it (whole hosts
for a gang, as charged), its allocation the placement's (else the submission's), its
user the submitter.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

RUN_ENDS = ("workload.finished", "workload.preempted", "workload.cancelled")
# what `history` reads: runs, their submitters, and the budgets that make an allocation known
HISTORY_TYPES = ("workload.submitted", "workload.placed", *RUN_ENDS, "budget.set")
# what `preemptions` reads: the preemptions, then their workloads' submissions and placements
PREEMPTED = "workload.preempted"
PREEMPTION_CONTEXT = ("workload.submitted", "workload.placed")


class HistoryError(ValueError):
    """A question history or preemptions cannot answer (an unknown allocation, a bad
    --since): one line for the user."""


def window(since: str | None, until: str | None, latest: float) -> tuple[float | None, float]:
    """[--since, --until] as every command reads them (`domain.durations.parse_moment`),
    relative forms counted back from `latest`, the journal's latest record time; no
    --since is the start (None), no --until the latest record."""
    from projections.timeline import domain_module

    parse = domain_module("durations").parse_moment  # not the whole domain: start-up time
    try:
        lo = parse(since, latest) if since else None
        hi = parse(until, latest, True) if until else latest
    except ValueError as why:
        raise HistoryError(str(why)) from None
    if lo is not None and hi < lo:
        raise HistoryError(f"--until ({iso(hi)}) is before --since ({iso(lo)})")
    return lo, hi


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def under(allocation: Any, path: str) -> bool:
    return isinstance(allocation, str) and (allocation == path or allocation.startswith(path + "/"))


def history(
    records: Iterable[dict[str, Any]],
    allocation: str,
    since: str | None,
    until: str | None,
    latest: float,
) -> dict[str, Any]:
    """GPU-hours charged and unallocated by user in `allocation` (and under it),
    counting the part of each run inside [since, until]; `latest` is the journal's
    latest record time (the end of a run still going)."""
    path = allocation.strip().strip("/")
    lo, hi = window(since, until, latest)
    start = lo if lo is not None else float("-inf")
    users: dict[Any, list[float]] = {}  # user: [charged s, unallocated s, runs]
    known = False
    submitted: dict[str, tuple[Any, Any, Any]] = {}  # workload: (allocation, user, gpus)
    running: dict[str, list[tuple[float, Any, Any, Any]]] = {}  # workload: open runs

    def close(wid: str, end: float) -> None:
        for began, user, gpus, charged in running.pop(wid, ()):
            if began < hi and end > start and isinstance(gpus, int | float):
                spent = gpus * (min(end, hi) - max(began, start))
                totals = users.setdefault(user, [0.0, 0.0, 0, False, False])
                slot = 0 if charged is True else 1 if charged is False else None
                if slot is not None:
                    totals[slot] += spent
                    totals[3 + slot] = True
                totals[2] += 1

    for record in records:
        kind, wid = record.get("type"), record.get("workload")
        if kind in RUN_ENDS:
            if wid in running:
                close(wid, _time(record))
            continue
        named = record.get("allocation")
        if kind == "budget.set" or (kind in PREEMPTION_CONTEXT and under(named, path)):
            known = known or under(named, path)
        if kind == "workload.submitted" and isinstance(wid, str) and under(named, path):
            submitted[wid] = (named, record.get("actor"), _int(record.get("gpus")))
        elif kind == "workload.placed" and isinstance(wid, str):
            sub = submitted.get(wid)
            if under(named if named is not None else sub and sub[0], path):
                gpus = _held(record)
                if gpus is None:
                    gpus = sub[2] if sub is not None else None
                run = (_time(record), sub[1] if sub else None, gpus, record.get("charged"))
                running.setdefault(wid, []).append(run)
    for wid in list(running):
        close(wid, latest)
    if not path or not known:
        raise HistoryError(unknown_allocation(allocation))
    return answer(path, lo, hi, users)


def unknown_allocation(allocation: str) -> str:
    return (
        f"unknown allocation {allocation!r}: no budget or workload in the journal names it "
        "(see `allot shares` or `allot budget log`)"
    )


def answer(path: str, lo: float | None, hi: float, users: dict[Any, list[Any]]) -> dict[str, Any]:
    """History's answer from `users`: user -> [charged s, unallocated s, runs, any
    charged run, any unallocated run] (the audit database sums the same in SQL)."""

    def rounded(seconds: float, any_: bool) -> float:
        return round(seconds / 3600.0, 4) if any_ else 0.0

    rows = [
        {
            "user": user,
            "charged_gpu_h": rounded(t[0], t[3]),
            "unallocated_gpu_h": rounded(t[1], t[4]),
            "runs": t[2],
            "_order": (not t[3], -t[0], user is None, user or ""),
        }
        for user, t in users.items()
    ]
    rows.sort(key=lambda r: r.pop("_order"))  # most charged first, then by user
    return {
        "allocation": path,
        "since": iso(lo) if lo is not None else None,
        "until": iso(hi),
        "users": rows,
        "charged_gpu_h": round(sum(u["charged_gpu_h"] for u in rows), 4),
        "unallocated_gpu_h": round(sum(u["unallocated_gpu_h"] for u in rows), 4),
    }


def preemptions(
    records: Iterable[dict[str, Any]], since: str | None, until: str | None, latest: float
) -> list[dict[str, Any]]:
    """Every preemption in [since, until], oldest first, with the victim's allocation
    (the scheduler's `explain.victim_allocation`, else its submission's), user and GPUs
    (asked for), and how long the preempted attempt ran (`explain.ran_s`, else since
    its placement). `records`: the preemptions and their workloads' submissions and
    placements (other records are passed over)."""
    lo, hi = window(since, until, latest)
    submitted: dict[str, dict[str, Any]] = {}
    placed: dict[tuple[Any, Any, Any], float] = {}
    rows = []
    for record in records:
        kind, wid = record.get("type"), record.get("workload")
        if kind == "workload.submitted" and isinstance(wid, str):
            submitted.setdefault(wid, record)
        elif kind == "workload.placed":
            key = (wid, record.get("attempt"), record.get("cluster"))
            placed.setdefault(key, _time(record))
        elif kind == PREEMPTED:
            t = _time(record)
            if (lo is None or t >= lo) and t <= hi:
                rows.append(_preemption(record, t, submitted.get(wid) or {}, placed))
    return rows


def _preemption(
    record: dict[str, Any],
    t: float,
    sub: dict[str, Any],
    placed: dict[tuple[Any, Any, Any], float],
) -> dict[str, Any]:
    explain = record.get("explain")
    explain = explain if isinstance(explain, dict) else {}
    began = placed.get((record.get("workload"), record.get("attempt"), record.get("cluster")))
    ran = ran_seconds(explain, t, began)
    victim = explain.get("victim_allocation")
    return {
        "time": iso(t),
        "t": t,
        "workload": record.get("workload"),
        "attempt": _int(record.get("attempt")),
        "allocation": victim if isinstance(victim, str) else sub.get("allocation"),
        "user": sub.get("actor"),
        "gpus": _int(sub.get("gpus")),
        "reason": record.get("reason"),
        "beneficiary": record.get("beneficiary"),
        "requeued": record.get("requeued"),
        "ran_s": ran,
    }


def ran_seconds(explain: dict[str, Any], t: float, placed_at: float | None) -> float | None:
    """How long a preempted attempt ran, as `allot preemptions` and `allot why` both say
    it: the scheduler's `explain.ran_s`, else (a `drain` or `gpus_removed` preemption
    names none, and its record keeps its v1 bytes) the time `t` of the preemption less
    `placed_at`, the time its attempt was placed; None when neither is known."""
    ran = _number(explain.get("ran_s"))
    if ran is None and placed_at is not None:
        ran = t - placed_at
    return ran


def _held(placed: dict[str, Any]) -> int | None:
    """The GPUs a placement's hosts give it (a gang of 12 on 8-GPU hosts holds 16, and
    is charged 16); its `gpus` where it names no hosts."""
    hosts = placed.get("hosts")
    indices = (
        hosts.values() if isinstance(hosts, dict) else hosts if isinstance(hosts, list) else ()
    )
    counts = [len(i) for i in indices if isinstance(i, list)]
    return sum(counts) if counts else _int(placed.get("gpus"))


def _time(record: dict[str, Any]) -> float:
    return float(record["time"])


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value)
