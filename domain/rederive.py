"""Re-derive a journal: the way to rebuild state that decides exactly as the original.

Folding a journal with `evolve` alone rebuilds the facts, but not what the scheduling
cycle remembers between inputs (the last full cycle's snapshot that quick and light
cycles build on). Re-deriving runs every journaled input through `evolve` + `decide`
again — the same calls the live scheduler made — so the rebuilt state is the live one,
and each decision made along the way can be checked against the journal's own.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from domain import events as ev
from domain.decide import decide
from domain.evolve import evolve
from domain.state import State


def is_cause(record: Any) -> bool:
    """Journal records that caused a cycle: accepted inputs and rejections."""
    return record.type in ev.INPUT_TYPES or isinstance(record, ev._Rejected)


def is_decision(record: Any) -> bool:
    """Journal records a cycle made (what a re-derivation re-makes): neither causes nor
    bookkeeping (`journal.restored`)."""
    return not is_cause(record) and record.type not in ev.BOOKKEEPING_TYPES


def rederive(state: State, records: Iterable[Any]) -> Iterator[tuple[Any, list[Any]]]:
    """For each cause in `records` (decisions in between are skipped): fold it and run
    the cycle it triggered; yields (cause, decisions re-made). The caller compares those
    with the decisions the journal holds after that cause."""
    for record in records:
        if not is_cause(record):
            continue
        evolve(state, record)
        if ev.is_informational(record):  # it caused no cycle
            yield record, []
            continue
        yield record, decide(state, state.now, cause=record.id)
