"""Replay a recorded journal: verify determinism, or re-decide it under a new config."""

from __future__ import annotations

import heapq
import math
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from domain import State, admit, decide, evolve
from domain import events as ev
from domain.config import parse_config
from domain.rederive import is_cause
from projections.journal import (
    JournalError,
    decode_record,
    iter_lines,
    journal_file,
    read_journal,
    reporting,
)
from projections.simulate import SCENARIO_ACTOR, RunSpec
from projections.summary import iso
from streams.codec import encode

# inputs a what-if keeps; executor reports and ticks are re-created by the simulator
_KEPT = {
    "host.registered",
    "host.health",
    "host.removed",
    "budget.set",
    "budget.removed",
    "config.set",
    "workload.submitted",
    "workload.cancelled",
}


@dataclass
class Verification:
    records: int
    decisions: int
    difference: str | None  # None: every decision reproduced byte for byte
    # decisions of the last input the journal does not hold because its end was cut
    # off mid-line (`cut`): not compared, not a difference
    uncompared: int = 0


def _without_source(line: bytes) -> bytes:
    """A live journal line minus its `inbox` position (the worker appends it last), so
    it compares byte for byte with the re-made decision."""
    if b'"inbox"' not in line:
        return line
    raw = orjson.loads(line)
    raw.pop("inbox", None)
    return orjson.dumps(raw)


def verify(
    path: Path | str, progress: Callable[[int, int], None] | None = None, *, cut: bool = False
) -> Verification:
    """Re-decide every accepted input with the journal's own config (it is in the log) and
    compare each decision byte for byte; stops at the first difference. `progress`, if
    given, hears (records, bytes read) now and then. `cut`: the file ends in the middle
    of a line, so the last input's later decisions are missing, not different. A file
    that is no journal (not JSON, not journal records, empty, a folder without
    journal.jsonl) is a JournalError naming the file and the line."""
    path = journal_file(path)
    state: State | None = None
    records = decisions = 0
    lines = iter_lines(path)
    if progress is not None:
        lines = reporting(lines, progress, size=lambda item: len(item[1]) + 1)

    produced: list[tuple[bytes, Any]] = []
    for number, line in lines:
        records += 1
        record = decode_record(path, number, line)
        if state is None:
            state = State(record.cluster)
        if record.type in ev.BOOKKEEPING_TYPES:  # a restore's mark: no input, no decision
            continue
        if not is_cause(record):
            if not produced:
                return Verification(
                    records,
                    decisions,
                    f"line {number}: the journal has a decision the replay did not make: {line.decode()[:300]}",
                )
            got, _ = produced.pop(0)
            decisions += 1
            if got != _without_source(line):
                return Verification(
                    records,
                    decisions,
                    f"line {number}: decision differs\n  journal: {line.decode()[:400]}\n  replay:  {got.decode()[:400]}",
                )
            continue
        if produced:
            return Verification(
                records,
                decisions,
                f"line {number}: the replay made a decision the journal lacks: {produced[0][0].decode()[:300]}",
            )
        if record.type in ev.INPUT_TYPES and record.actor != ev.SCHEDULER:
            again = admit(state, record)
            if again.type != record.type:
                return Verification(
                    records,
                    decisions,
                    f"line {number}: input {record.id} was accepted but replay rejects it: {getattr(again, 'error', '')}",
                )
        evolve(state, record)
        if ev.is_informational(record):  # a report for views: it caused no cycle
            continue
        produced = [(encode(d), d) for d in decide(state, state.now, cause=record.id)]
    if produced and cut:
        return Verification(records, decisions, None, uncompared=len(produced))
    if produced:
        return Verification(
            records,
            decisions,
            f"end of journal: the replay made decisions the journal lacks: {produced[0][0].decode()[:300]}",
        )
    return Verification(records, decisions, None)


_WHAT_IF_ID = re.compile(r"what-if-(?P<round>\d+)-budget-\d+")


@dataclass(frozen=True)
class BudgetChange:
    """`--budget PATH=WEIGHT[@TIME]`: PATH's weight in a what-if. Without a time, every
    recorded `budget.set` of PATH gets WEIGHT (as if it had always had it); with one,
    a `budget.set` is added then (a duration after the journal's first record, or an
    ISO date/time) and later recorded changes of PATH still apply."""

    path: str
    weight: float
    at: str | None = None

    @classmethod
    def parse(cls, text: str) -> BudgetChange:
        from domain.admission import MAX_WEIGHT
        from domain.tree import valid_path

        where = f"--budget {text}"
        path, eq, rest = text.partition("=")
        value, _, at = rest.partition("@")
        path = path.strip()
        if not eq or not valid_path(path):
            raise JournalError(f"{where}: give PATH=WEIGHT or PATH=WEIGHT@TIME, e.g. lab/olmo=2@1d")
        try:
            weight = float(value)
        except ValueError:
            weight = math.nan
        if not (math.isfinite(weight) and 0 <= weight <= MAX_WEIGHT):
            raise JournalError(f"{where}: the weight is a number from 0 to {MAX_WEIGHT:g}")
        if "@" in rest and not at.strip():
            raise JournalError(f"{where}: say when after '@' (1d, 2026-11-30T12:00)")
        return cls(path, weight, at.strip() or None)

    def moment(self, start: float, end: float) -> float:
        """When this change takes effect in a journal running from `start` to `end`."""
        from domain.durations import parse_duration, parse_utc

        assert self.at is not None
        try:
            t = start + parse_duration(self.at)
        except ValueError:
            try:
                t = parse_utc(self.at)
            except ValueError:
                raise JournalError(
                    f"--budget {self.path}={self.weight:g}@{self.at}: TIME is a duration "
                    "after the journal's first record (1d, 36h) or an ISO date/time"
                ) from None
        if not start <= t <= end:
            raise JournalError(
                f"--budget {self.path}={self.weight:g}@{self.at}: that is outside the "
                f"journal ({iso(start)} to {iso(end)})"
            )
        return t


def journal_run_spec(
    path: Path | str,
    config_overrides: dict[str, Any],
    engine: dict[str, Any],
    budgets: Sequence[BudgetChange] = (),
) -> RunSpec:
    """A what-if: the journal's inputs, with each workload's work derived from its run
    intervals, re-decided by the simulator under the journal's config plus overrides
    (in every config change it records, too) and with `budgets` changed."""
    path = journal_file(path)
    base: dict[str, Any] | None = None
    cluster = None
    start = end = None
    runtime: dict[str, float] = {}
    began: dict[str, float] = {}
    completed: set[str] = set()
    fresh_start: set[str] = set()  # not resumable: a requeued attempt's work is lost
    budgeted: set[str] = set()
    # host failures that killed their work (an attempt there was reported lost while the
    # host was down): the what-if's launcher loses the work running there too
    hosts_of: dict[str, dict[str, Any]] = {}
    down: dict[str, str] = {}  # unhealthy host -> the health input that took it down
    lose_work_at: set[str] = set()
    rounds = [0]  # what-if rounds already in the journal (a what-if of a what-if)
    count = 0
    for record in read_journal(path):
        cluster = cluster or record.cluster
        start = record.time if start is None else start
        end = record.time
        kind = record.type
        if kind == "config.set" and base is None:
            base = dict(record.config)
        elif kind == "workload.submitted":
            count += 1
            if not record.resumable:
                fresh_start.add(record.workload)
        elif kind == "budget.set":
            budgeted.add(record.allocation)
            if (m := _WHAT_IF_ID.fullmatch(record.id)) is not None:
                rounds.append(int(m["round"]))
        elif kind == "host.health":
            if record.healthy:
                down.pop(record.host, None)
            else:
                down.setdefault(record.host, record.id)
        elif kind == "workload.placed":
            began[record.workload] = record.time
            hosts_of[record.workload] = record.hosts
        elif kind in ("workload.preempted", "workload.finished", "workload.cancelled"):
            t0 = began.pop(record.workload, None)
            if t0 is not None:
                runtime[record.workload] = runtime.get(record.workload, 0.0) + record.time - t0
            if kind == "workload.preempted" and record.requeued and record.workload in fresh_start:
                runtime.pop(record.workload, None)  # `allot requeue`: it starts over
            if kind == "workload.finished" and record.outcome == "completed":
                completed.add(record.workload)
            if kind == "workload.finished" and record.outcome == "lost":
                lose_work_at.update(down[h] for h in hosts_of.get(record.workload, ()) if h in down)
    if cluster is None:
        raise JournalError(f"{path}: the journal is empty; nothing to replay")
    try:
        config = parse_config(
            {**(base or {}), **config_overrides}, recorded="legacy_caps" not in config_overrides
        )
    except ValueError as why:
        raise JournalError(str(why)) from None
    first_config = base is not None
    assert start is not None and end is not None
    always = {b.path: b.weight for b in budgets if b.at is None}
    never = sorted(always.keys() - budgeted)
    if never:
        leaf, weight = never[0], always[never[0]]
        raise JournalError(
            f"--budget {leaf}={weight:g}: the journal never sets {leaf}; "
            f"add it from a moment on with {leaf}={weight:g}@TIME"
        )
    added = sorted(
        (
            ev.BudgetSet(
                id=f"what-if-{max(rounds) + 1}-budget-{n}",
                time=b.moment(start, end),
                cluster=cluster,
                actor=SCENARIO_ACTOR,
                allocation=b.path,
                weight=b.weight,
            )
            for n, b in enumerate(budgets)
            if b.at is not None
        ),
        key=lambda e: e.time,
    )

    def recorded() -> Iterator[Any]:
        skipped_config = not first_config
        for record in read_journal(path):
            if record.type not in _KEPT:
                continue
            if record.type == "config.set":
                if not skipped_config:
                    skipped_config = True  # the base config: the engine journals its own
                    continue
                # a later change (a restarted server's new --set, an admin's): the
                # what-if's overrides hold in it too
                yield record.model_copy(update={"config": {**record.config, **config_overrides}})
            elif record.type == "workload.submitted":
                work = record.runtime
                if work is None and record.workload in completed:
                    work = runtime.get(record.workload)
                yield record.model_copy(update={"runtime": work})
            elif record.type == "budget.set" and record.allocation in always:
                yield record.model_copy(update={"weight": always[record.allocation]})
            else:
                yield record

    def inputs() -> Iterator[Any]:
        # an added change goes after the recorded inputs of its moment
        return heapq.merge(recorded(), added, key=lambda e: e.time)

    return RunSpec(
        name=path.stem,
        cluster=cluster,
        config=config,
        setup=lambda: [],
        inputs=inputs,
        start=start,
        horizon_end=end,
        end_kind="recorded",
        workloads=count,
        engine={**engine, "lose_work_at": frozenset(lose_work_at)} if lose_work_at else engine,
    )


__all__ = ["BudgetChange", "JournalError", "Verification", "journal_run_spec", "verify"]
