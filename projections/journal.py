"""Read a journal file (a simulation's journal.jsonl or the embedded journal)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from domain.events import describe_validation_error
from streams.codec import Undecodable, decode_event

T = TypeVar("T")


class JournalError(ValueError):
    pass


def iter_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) of each non-empty line; a last line without a newline is a
    write cut short by a crash and is skipped, not an error."""
    if not path.exists():
        raise JournalError(f"{path}: no such journal file")
    with path.open("rb") as f:
        number = 0
        for number, line in enumerate(f, start=1):
            if not line.endswith(b"\n"):
                return  # truncated tail
            if line.strip():
                yield number, line.rstrip(b"\n")


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


def read_journal(path: Path | str) -> Iterator[Any]:
    """Journal records as events; a corrupt line raises JournalError naming the line."""
    path = Path(path)
    for number, line in iter_lines(path):
        try:
            yield decode_event(line)
        except Undecodable as why:
            raise JournalError(f"{path}:{number}: {why}") from None
        except ValidationError as why:
            raise JournalError(
                f"{path}:{number}: not a journal record: {describe_validation_error(why)}"
            ) from None
