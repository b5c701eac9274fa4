"""Read a journal file (a simulation's journal.jsonl or the embedded journal)."""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import orjson
from pydantic import ValidationError

from domain.events import describe_validation_error
from streams.codec import Undecodable, decode_event

T = TypeVar("T")


class JournalError(ValueError):
    pass


def journal_file(path: Path | str) -> Path:
    """The journal file a user named: a file, or a folder holding journal.jsonl (a run
    folder such as out/fairshare, as `allot compare` takes, or a --data folder)."""
    path = Path(path)
    if path.is_dir():
        inside = path / "journal.jsonl"
        if inside.is_file():
            return inside
        raise JournalError(
            f"{path}: a folder without journal.jsonl; name a journal file or a run folder "
            "such as out/fairshare"
        )
    if not path.exists():
        raise JournalError(f"{path}: no such journal file")
    return path


def iter_lines(path: Path | str) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) of each non-empty line of a journal file (or of a folder's
    journal.jsonl); a last line without a newline is a write cut short by a crash and
    is skipped, not an error. A file without one complete non-blank line holds no
    journal records: a JournalError (an empty journal replays to nothing, silently)."""
    path = journal_file(path)
    found = False
    tail = b""
    with path.open("rb") as f:
        for number, line in enumerate(f, start=1):
            if not line.endswith(b"\n"):
                tail = line  # truncated tail
                break
            if line.strip():
                found = True
                yield number, line.rstrip(b"\n")
    if found:
        return
    if tail.strip():
        raise JournalError(
            f"{path}: no journal records: its {len(tail):,} "
            f"{'byte holds' if len(tail) == 1 else 'bytes hold'} no complete line "
            "(a journal is one JSON record per line)"
        )
    raise JournalError(f"{path}: empty: no journal records")


def reporting(
    items: Iterable[T],
    progress: Callable[[int, int], None],
    size: Callable[[T], int],
    every: int = 2048,
) -> Iterator[T]:
    """`items`, telling `progress` (items so far, their total `size`) every `every`
    items and at the end: how long reads show a progress bar without slowing down."""
    count = done = 0
    for item in items:
        count += 1
        done += size(item)
        if count % every == 0:
            progress(count, done)
        yield item
    progress(count, done)


def decode_record(path: Path, number: int, line: bytes) -> Any:
    """Line `number` of journal `path` as an event; a JournalError naming the file and
    the line if it is not a journal record."""
    try:
        return decode_event(line)
    except Undecodable as why:
        raise JournalError(f"{path}:{number}: {why}") from None
    except ValidationError as why:
        raw = orjson.loads(line)
        what = describe_validation_error(why)
        # {"ts": ..., "value": "<request>"}, or the header of an inbox started again
        if "type" not in raw and ("value" in raw or "inbox_base" in raw):
            what = "a request in an embedded inbox, not yet decided; replay the journal.jsonl beside it"
        raise JournalError(f"{path}:{number}: not a journal record: {what}") from None


def read_journal(path: Path | str) -> Iterator[Any]:
    """Journal records as events; a corrupt line raises JournalError naming the line."""
    path = journal_file(path)
    for number, line in iter_lines(path):
        yield decode_record(path, number, line)


_gc_lock = threading.Lock()
_gc_paused = 0  # folds running with the collector off (threads of the dashboard)
_gc_was_enabled = False


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off while a journal is folded: a fold allocates
    millions of small objects that live on, and the collector kept re-scanning them
    (about 45% of a 564k-record fold). A fold makes next to no cycles; the collector is
    back on when the last fold in any thread ends."""
    global _gc_paused, _gc_was_enabled
    with _gc_lock:
        if _gc_paused == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_paused += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_paused -= 1
            if _gc_paused == 0 and _gc_was_enabled:
                gc.enable()
