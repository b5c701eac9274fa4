"""The usage and entitlement table, kept between runs: resumable from its own offset.

`ResumableUsage` wraps `UsageProjection` with where it stopped in the journal file (a
byte offset and a record count), saved atomically next to it; `update()` folds only what
was appended since, so a restart does not re-read history. `KafkaResumableUsage` does
the same for the journal topic: it saves, per partition, the offset and id of the last
record read, and the next run reads only after them. The saved projection is the open
one (intervals still running); reports are made from a closed copy.
"""

from __future__ import annotations

import copy
import os
import pickle
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from domain.upcasting import upcast
from projections.usage import RecordError, UsageProjection
from streams.codec import Undecodable, load_object

FORMAT = 1


class UsageStoreError(ValueError):
    pass


@dataclass
class ResumableUsage:
    """The table of one cluster of a journal file: of `cluster`'s records if given (the
    others are read past), else of the whole file, which must then hold one cluster."""

    journal: Path
    projection: UsageProjection = field(default_factory=UsageProjection)
    offset: int = 0  # bytes of the journal already folded
    records: int = 0  # records folded (of `cluster`, if given)
    first_line: bytes = b""  # the journal's first record: a different journal is refused
    cluster: str | None = None
    # the last record folded (ending at `offset`): a journal cut short or rewritten since
    # is refused rather than read from the middle of a line or past its end
    last_line: bytes = b""
    others: set[str] = field(default_factory=set)  # clusters read past in this update
    cut: bool = False  # this update stopped at a last line without its newline

    @property
    def path(self) -> Path:
        return self.journal

    @classmethod
    def open(cls, state_path: Path, journal: Path, cluster: str | None = None) -> ResumableUsage:
        if not state_path.exists():
            return cls(journal=journal, cluster=cluster)
        saved = _load_state(state_path)
        if saved.get("kind") == "kafka":
            raise UsageStoreError(
                f"{state_path} holds the table of a Kafka journal, not of {journal}; "
                "use another --state"
            )
        if saved.get("cluster") != cluster:
            raise UsageStoreError(
                f"{state_path} holds the table of {_which(saved.get('cluster'))}, not of "
                f"{_which(cluster)}; use another --state"
            )
        store = cls(
            journal,
            saved["projection"],
            saved["offset"],
            saved["records"],
            saved["first_line"],
            cluster,
            last_line=saved.get("last_line", b""),  # absent in tables saved before
        )
        if store.first_line and store._read_first_line() != store.first_line:
            raise UsageStoreError(
                f"{state_path} was built from another journal than {journal}; remove it to start over"
            )
        if store.last_line and not store._still_ends_with_last_line():
            raise UsageStoreError(
                f"{journal} changed since {state_path} was saved (cut short or rewritten "
                f"before its byte {store.offset:,}); remove {state_path} to start over"
            )
        return store

    def _still_ends_with_last_line(self) -> bool:
        """Are the bytes before `offset` still the last record folded?"""
        tail = self.last_line + b"\n"
        start = self.offset - len(tail)
        if start < 0:
            return False
        with self.journal.open("rb") as fh:
            fh.seek(start)
            return fh.read(len(tail)) == tail

    def _read_first_line(self) -> bytes:
        with self.journal.open("rb") as fh:
            return fh.readline().rstrip(b"\n")

    def update(self) -> int:
        """Fold the complete records appended since the last update; returns how many.
        A file of several clusters read without `cluster`, or one without a record of
        `cluster`, is a UsageStoreError that says which clusters it holds."""
        if not self.journal.exists():
            raise UsageStoreError(f"{self.journal}: no such journal file")
        only = self.cluster or (_cluster_of(self.first_line) if self.first_line else None)
        folded = 0
        self.cut = False
        with self.journal.open("rb") as fh:
            fh.seek(self.offset)
            while True:
                line = fh.readline()
                if not line.endswith(b"\n"):
                    self.cut = bool(line.strip())
                    break  # nothing more, or a record still being written
                self.offset += len(line)
                body = line.rstrip(b"\n")
                if not body.strip():
                    continue
                self.last_line = body
                try:
                    raw = load_object(body)
                except Undecodable as why:  # not JSON, or JSON but no object
                    place = self._place(self.offset - len(line))
                    raise UsageStoreError(f"{place}: {why}") from None
                if not self.first_line:  # an inbox's records carry no type: say so
                    from streams.sources import inbox_not_journal, is_inbox_record

                    if is_inbox_record(raw):
                        raise UsageStoreError(inbox_not_journal(self.journal))
                raw = upcast(raw)
                if not self.first_line:
                    self.first_line = body
                cluster = _cluster_of(raw)
                if only is None:
                    only = cluster
                elif cluster != only:
                    if self.cluster is not None:
                        self.others.add(cluster)
                        continue  # another cluster's record: read past it
                    raise UsageStoreError(
                        f"{self.journal}: the journal holds records of clusters {only!r} and "
                        f"{cluster!r}; pick one with --cluster"
                    )
                try:
                    self.projection.apply(raw)
                except RecordError as why:
                    place = self._place(self.offset - len(line))
                    raise UsageStoreError(f"{place}: not a journal record: {why}") from None
                self.records += 1
                folded += 1
        if self.cluster is not None and not self.records and self.others:
            raise UsageStoreError(
                f"{self.journal}: no records of cluster {self.cluster!r} (it holds: "
                f"{', '.join(sorted(self.others))}); pick one with --cluster"
            )
        return folded

    def _place(self, start: int) -> str:
        """FILE:LINE of the line starting at byte `start`, as the other read commands
        name a bad record: the lines before it are counted (for an error only; an
        update starts at a byte offset, not a line)."""
        lines = 0
        with self.journal.open("rb") as fh:
            while start > 0:
                block = fh.read(min(start, 1 << 20))
                if not block:
                    break
                lines += block.count(b"\n")
                start -= len(block)
        return f"{self.journal}:{lines + 1}"

    def save(self, state_path: Path) -> None:
        blob = pickle.dumps(
            {
                "format": FORMAT,
                "projection": self.projection,
                "offset": self.offset,
                "records": self.records,
                "first_line": self.first_line,
                "cluster": self.cluster,
                "last_line": self.last_line,
            }
        )
        _replace(state_path, blob)

    def rows(self, end: float | None = None) -> list[dict[str, Any]]:
        """Hourly rows per allocation, intervals still open counted up to `end`."""
        closed = copy.deepcopy(self.projection)
        closed.close(end)
        return closed.hourly_rows()


@dataclass
class KafkaResumableUsage:
    """The same table for a Kafka journal: resumable from per-partition positions.

    Saved next to the projection: for each partition of the journal topic, the offset
    and `id` of the last record read there (of any cluster: the read skips the others
    but moves past them). `update(batches)` folds the new records of `cluster` from an
    iterator like `streams.sources.kafka_batches(bootstrap, cluster, store.positions)`;
    a topic that no longer holds the saved records is another journal and is refused
    by the reader."""

    cluster: str
    projection: UsageProjection = field(default_factory=UsageProjection)
    positions: dict[int, tuple[int, str | None]] = field(default_factory=dict)
    records: int = 0

    @classmethod
    def open(cls, state_path: Path, cluster: str) -> KafkaResumableUsage:
        if not state_path.exists():
            return cls(cluster=cluster)
        saved = _load_state(state_path)
        if saved.get("kind") != "kafka":
            raise UsageStoreError(
                f"{state_path} holds the table of a journal file, not of a Kafka journal; "
                "use another --state"
            )
        if saved["cluster"] != cluster:
            raise UsageStoreError(
                f"{state_path} holds the table of cluster {saved['cluster']!r}, not "
                f"{cluster!r}; use another --state"
            )
        return cls(cluster, saved["projection"], dict(saved["positions"]), saved["records"])

    def update(self, batches: Iterable[tuple[list[bytes], dict[int, Any]]]) -> int:
        """Fold the records of each batch, then take its positions; returns how many."""
        folded = 0
        for lines, positions in batches:
            for body in lines:
                try:
                    raw = upcast(load_object(body))
                except Undecodable as why:  # not JSON, or JSON but no object
                    raise UsageStoreError(
                        f"journal record {self.records + 1} of cluster {self.cluster!r}: {why}"
                    ) from None
                try:
                    self.projection.apply(raw)
                except RecordError as why:
                    raise UsageStoreError(
                        f"journal record {self.records + 1} of cluster {self.cluster!r} is not "
                        f"a journal record: {why}"
                    ) from None
                self.records += 1
                folded += 1
            self.positions = {int(p): (int(o), i) for p, (o, i) in positions.items()}
        return folded

    def save(self, state_path: Path) -> None:
        _save_state(
            state_path,
            {
                "format": FORMAT,
                "kind": "kafka",
                "cluster": self.cluster,
                "projection": self.projection,
                "positions": self.positions,
                "records": self.records,
            },
        )

    def rows(self, end: float | None = None) -> list[dict[str, Any]]:
        closed = copy.deepcopy(self.projection)
        closed.close(end)
        return closed.hourly_rows()


def _cluster_of(record: bytes | dict[str, Any]) -> str:
    raw = orjson.loads(record) if isinstance(record, bytes) else record
    return str(raw.get("cluster", "default")) if isinstance(raw, dict) else "default"


def _which(cluster: str | None) -> str:
    return "the whole journal" if cluster is None else f"cluster {cluster!r}"


def _load_state(state_path: Path) -> dict[str, Any]:
    try:
        saved = pickle.loads(state_path.read_bytes())
    except Exception as why:  # a damaged state file: say so, never guess
        raise UsageStoreError(
            f"{state_path}: not a usage state file ({type(why).__name__})"
        ) from None
    if not isinstance(saved, dict) or saved.get("format") != FORMAT:
        raise UsageStoreError(f"{state_path}: not a usage state file of this version")
    return saved


def _save_state(state_path: Path, state: dict[str, Any]) -> None:
    _replace(state_path, pickle.dumps(state))


def _replace(state_path: Path, blob: bytes) -> None:
    """Write `blob` over `state_path` atomically. The temporary name is this process's
    own: runs at the same time shared one, and one's rename found it gone."""
    tmp = state_path.with_name(f".{state_path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        tmp.write_bytes(blob)
        os.replace(tmp, state_path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
