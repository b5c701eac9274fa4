"""Replay a recorded journal: verify determinism, or re-decide it under a new config."""

from __future__ import annotations

from collections.abc import Callable, Iterator
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
from projections.simulate import RunSpec
from streams.codec import encode

# inputs a what-if keeps; executor reports and ticks are re-created by the simulator
_KEPT = {
    "host.registered",
    "host.health",
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


def journal_run_spec(
    path: Path | str, config_overrides: dict[str, Any], engine: dict[str, Any]
) -> RunSpec:
    """A what-if: the journal's inputs, with each workload's work derived from its run
    intervals, re-decided by the simulator under the journal's config plus overrides."""
    path = journal_file(path)
    base: dict[str, Any] | None = None
    cluster = None
    start = end = None
    runtime: dict[str, float] = {}
    began: dict[str, float] = {}
    completed: set[str] = set()
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
        elif kind == "workload.placed":
            began[record.workload] = record.time
        elif kind in ("workload.preempted", "workload.finished", "workload.cancelled"):
            t0 = began.pop(record.workload, None)
            if t0 is not None:
                runtime[record.workload] = runtime.get(record.workload, 0.0) + record.time - t0
            if kind == "workload.finished" and record.outcome == "completed":
                completed.add(record.workload)
    if cluster is None:
        raise JournalError(f"{path}: the journal is empty; nothing to replay")
    try:
        config = parse_config({**(base or {}), **config_overrides})
    except ValueError as why:
        raise JournalError(str(why)) from None
    first_config = base is not None

    def inputs() -> Iterator[Any]:
        skipped_config = not first_config
        for record in read_journal(path):
            if record.type not in _KEPT:
                continue
            if record.type == "config.set" and not skipped_config:
                skipped_config = True  # the base config: the engine journals its own
                continue
            if record.type == "workload.submitted":
                work = record.runtime
                if work is None and record.workload in completed:
                    work = runtime.get(record.workload)
                yield record.model_copy(update={"runtime": work})
            else:
                yield record

    return RunSpec(
        name=path.stem,
        cluster=cluster,
        config=config,
        setup=lambda: [],
        inputs=inputs,
        start=start,
        horizon_end=end,
        workloads=count,
        engine=engine,
    )


__all__ = ["JournalError", "Verification", "journal_run_spec", "verify"]
