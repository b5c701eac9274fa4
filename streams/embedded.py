"""The embedded journal (`--data DIR`): the scheduler loop on plain files, no broker.

Files in DIR:

- `inbox.jsonl` — requests, one line each: `{"ts": <append wall time>, "value": "<raw
  request text>"}` (`"value_b64"` instead of `"value"` for bytes that are not UTF-8).
  The raw text is kept as sent, so even bytes that are not JSON survive to the DLQ.
  A request's inbox offset is its 0-based line number (partition 0).
- `journal.jsonl` — journal records exactly as `SchedulerCore` encodes them (each
  carries `inbox: [0, offset]` of the input that caused it).
- `dlq.jsonl` — dead letters: `{"inbox": [0, offset], "error": ..., "value": ...}`.
- `.lock` — `fcntl.flock` taken around every append, so several `allot` commands and
  one `allot serve` share the folder; `.serve.lock` — held by the one `allot serve`.

Crash safety: an append is whole lines, written then flushed and fsynced under the
lock. A last line without its newline is a write cut short: readers ignore it and the
next append truncates it first, so it is never mistaken for a full record. The
scheduler writes journal lines and dead letters in inbox order, so after a crash every
input before the last one recorded is complete and only the last input's records may
be cut short.

Restart: `EmbeddedScheduler.start` re-derives the journal from the inbox record by
record (processing is deterministic: the inbox keeps each request's append time) and
checks it line for line, then appends whatever a crash cut short. Re-deriving, rather
than only folding the journal's records, also restores what `decide` remembers between
inputs (`State.blocked`, the last full cycle's ranking), so decisions after a restart
are exactly those of an uninterrupted run and `allot replay --verify` reproduces them.
A journal that does not match its inbox is folded as recorded, with a warning.
"""

from __future__ import annotations

import base64
import fcntl
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import orjson

from domain.config import SchedulerConfig, parse_config
from streams.codec import Undecodable, load_object
from streams.core import BatchResult, DeadLetter, InboxRecord, SchedulerCore

INBOX_FILE = "inbox.jsonl"
JOURNAL_FILE = "journal.jsonl"
DLQ_FILE = "dlq.jsonl"
LOCK_FILE = ".lock"
SERVE_LOCK_FILE = ".serve.lock"
PARTITION = 0  # the embedded inbox has one partition
_CHUNK = 1 << 20


class EmbeddedError(Exception):
    """A problem with an embedded journal folder: one line for the user."""


class AlreadyServing(EmbeddedError):
    """Another `allot serve` holds the folder's serve lock."""


# ------------------------------------------------------------------ locking


def _folder(folder: Path | str, *, create: bool = True) -> Path:
    path = Path(folder)
    if path.exists() and not path.is_dir():
        raise EmbeddedError(f"{path} is not a folder (--data wants a folder, e.g. ./allot-data)")
    if create:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as why:
            raise EmbeddedError(f"cannot create {path}: {why.strerror or why}") from None
    return path


@contextmanager
def folder_lock(folder: Path | str, *, shared: bool = False) -> Iterator[None]:
    """The folder's append lock (`DIR/.lock`), exclusive unless `shared`."""
    path = _folder(folder) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as why:
        raise EmbeddedError(f"cannot open {path}: {why.strerror or why}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _complete_size(fd: int, size: int) -> int:
    """Byte length of the file's complete lines (everything up to the last newline)."""
    pos = size
    while pos > 0:
        start = max(0, pos - 65536)
        block = os.pread(fd, pos - start, start)
        cut = block.rfind(b"\n")
        if cut >= 0:
            return start + cut + 1
        pos = start
    return 0


def _append(path: Path, data: bytes) -> None:
    """Append whole lines (call with the folder lock held): a torn tail left by a crash
    is cut off first, then the data is written, flushed and fsynced."""
    if not data:
        return
    created = not path.exists()
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError as why:
        raise EmbeddedError(f"cannot open {path}: {why.strerror or why}") from None
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            os.ftruncate(fd, _complete_size(fd, size))
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    except OSError as why:
        raise EmbeddedError(f"cannot write {path}: {why.strerror or why}") from None
    finally:
        os.close(fd)
    if created:
        _fsync_dir(path.parent)


# ------------------------------------------------------------------ records


def encode_request(value: bytes | str | dict[str, Any], ts: float) -> bytes:
    """One inbox line (without the newline) for a raw request."""
    if isinstance(value, dict):
        value = orjson.dumps(value)
    if isinstance(value, bytes):
        try:
            text = value.decode("utf-8")
        except UnicodeDecodeError:
            return orjson.dumps({"ts": ts, "value_b64": base64.b64encode(value).decode()})
    else:
        text = value
    try:
        return orjson.dumps({"ts": ts, "value": text})
    except orjson.JSONEncodeError:  # lone surrogates in a str
        raw = text.encode("utf-8", "surrogatepass")
        return orjson.dumps({"ts": ts, "value_b64": base64.b64encode(raw).decode()})


def decode_request(line: bytes, offset: int, last_ts: float = 0.0) -> InboxRecord:
    """An inbox line as a record. A line that is not our wrapper (written by hand) is
    taken as the request itself, stamped with the previous line's time."""
    try:
        wrapper = orjson.loads(line)
    except orjson.JSONDecodeError:
        wrapper = None
    if isinstance(wrapper, dict):
        ts = wrapper.get("ts")
        if isinstance(ts, int | float) and not isinstance(ts, bool):
            value = wrapper.get("value")
            if isinstance(value, str):
                return InboxRecord(PARTITION, offset, float(ts), value.encode("utf-8"))
            b64 = wrapper.get("value_b64")
            if isinstance(b64, str):
                try:
                    return InboxRecord(PARTITION, offset, float(ts), base64.b64decode(b64))
                except ValueError:
                    pass
    return InboxRecord(PARTITION, offset, last_ts, line)


def append_requests(
    folder: Path | str, values: Iterable[bytes | str | dict[str, Any]], ts: float | None = None
) -> None:
    """Append requests to DIR/inbox.jsonl, stamped with the append time (taken under the
    lock, so stamps follow line order unless the wall clock steps back)."""
    path = _folder(folder)
    values = list(values)
    if not values:
        return
    with folder_lock(path):
        stamp = time.time() if ts is None else ts
        data = b"".join(encode_request(v, stamp) + b"\n" for v in values)
        _append(path / INBOX_FILE, data)


def append_journal(folder: Path | str, lines: Iterable[bytes]) -> None:
    """Append encoded journal records (one per line) to DIR/journal.jsonl."""
    data = b"".join(line.rstrip(b"\n") + b"\n" for line in lines)
    if data:
        path = _folder(folder)
        with folder_lock(path):
            _append(path / JOURNAL_FILE, data)


def encode_dead_letter(dead: DeadLetter) -> bytes:
    value = dead.record.value.decode("utf-8", "replace")
    return orjson.dumps(
        {
            "inbox": [dead.record.partition, dead.record.offset],
            "error": dead.error,
            "value": value,
            "ts": dead.record.timestamp,
        }
    )


def append_dead_letters(folder: Path | str, dead: Iterable[DeadLetter]) -> None:
    data = b"".join(encode_dead_letter(d) + b"\n" for d in dead)
    if data:
        path = _folder(folder)
        with folder_lock(path):
            _append(path / DLQ_FILE, data)


# ------------------------------------------------------------------ reading


class LineReader:
    """Complete lines of an append-only file, read incrementally without the lock.

    A last line without its newline is not returned (it is a write in progress or one
    cut short by a crash); the position stays before it, so it is read once complete
    or, if a later append cut it off, the new lines are read in its place."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.pos = 0  # byte position after the last complete line read
        self.line = 0  # number of the next line
        self._file: IO[bytes] | None = None
        self._buf = b""  # bytes read from the file; self._buf[self._at] is at self.pos
        self._at = 0

    def _open(self) -> IO[bytes] | None:
        if self._file is None:
            try:
                self._file = self.path.open("rb")
            except FileNotFoundError:
                return None
        return self._file

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def read(self, limit: int | None = None) -> list[bytes]:
        """The next complete lines (at most `limit`), without their newlines."""
        f = self._open()
        if f is None:
            return []
        out: list[bytes] = []
        buf, at = self._buf, self._at
        while limit is None or len(out) < limit:
            nl = buf.find(b"\n", at)
            if nl < 0:
                # refill from the first unread byte: bytes after the last newline may be
                # a torn tail that a later append replaced, so they are never kept
                rest = len(buf) - at
                f.seek(self.pos)
                data = f.read(_CHUNK if rest < _CHUNK else 2 * rest)
                if len(data) <= rest and data == buf[at:]:
                    break  # nothing new
                buf, at = data, 0
                continue
            out.append(buf[at:nl])
            self.pos += nl + 1 - at
            at = nl + 1
        self.line += len(out)
        self._buf, self._at = buf, at
        return out

    def skip_to(self, line: int) -> None:
        """Move on to line number `line` (or as far as complete lines go)."""
        while self.line < line:
            if not self.read(min(line - self.line, 100_000)):
                break

    def __enter__(self) -> LineReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class InboxReader:
    """DIR/inbox.jsonl as `InboxRecord`s, incrementally."""

    def __init__(self, folder: Path | str, start: int = 0) -> None:
        self.lines = LineReader(Path(folder) / INBOX_FILE)
        self.last_ts = 0.0
        if start:
            self.skip_to(start)

    @property
    def offset(self) -> int:
        """The offset the next read starts at."""
        return self.lines.line

    def skip_to(self, offset: int) -> None:
        while self.lines.line < offset:
            if not self.read(min(offset - self.lines.line, 100_000)):
                break

    def read(self, limit: int | None = None) -> list[InboxRecord]:
        first = self.lines.line
        records = []
        for n, line in enumerate(self.lines.read(limit)):
            record = decode_request(line, first + n, self.last_ts)
            self.last_ts = record.timestamp
            records.append(record)
        return records

    def close(self) -> None:
        self.lines.close()


def read_inbox(folder: Path | str, start: int = 0, limit: int | None = None) -> list[InboxRecord]:
    """Inbox records from offset `start` (0-based line number)."""
    reader = InboxReader(folder, start)
    try:
        return reader.read(limit)
    finally:
        reader.close()


def read_journal_lines(folder: Path | str) -> Iterator[bytes]:
    """Every complete, non-empty line of DIR/journal.jsonl."""
    with LineReader(Path(folder) / JOURNAL_FILE) as reader:
        while True:
            lines = reader.read(50_000)
            if not lines:
                return
            yield from (line for line in lines if line.strip())


def read_dead_letters(folder: Path | str) -> Iterator[dict[str, Any]]:
    with LineReader(Path(folder) / DLQ_FILE) as reader:
        while True:
            lines = reader.read(50_000)
            if not lines:
                return
            for line in lines:
                if line.strip():
                    yield orjson.loads(line)


def _inbox_offset(raw: dict[str, Any]) -> int | None:
    source = raw.get("inbox")
    if isinstance(source, list) and len(source) == 2 and source[0] == PARTITION:
        try:
            return int(source[1])
        except (TypeError, ValueError):
            return None
    return None


# ---------------------------------------------------------------- the loop


@dataclass(frozen=True)
class Recovery:
    folded: int  # journal records folded
    resumed_at: int  # first inbox offset still to process
    repaired: int  # journal records re-derived for an input a crash cut short


def serving_pid(folder: Path | str) -> int | None:
    """The pid of the `allot serve` holding DIR's serve lock, None when nobody serves."""
    path = Path(folder) / SERVE_LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 32, 0).decode(errors="replace").strip()
            return int(text) if text.isdigit() else -1
        return None
    finally:
        os.close(fd)


class EmbeddedScheduler:
    """`SchedulerCore` over DIR's files: the embedded `allot serve`.

    `start()` takes the serve lock and rebuilds the state from the journal; `step()`
    folds the next batch of inbox records and appends what it produced.
    """

    def __init__(
        self,
        folder: Path | str,
        cluster: str,
        config: SchedulerConfig | None = None,
        *,
        batch: int = 2000,
        on_journal: Callable[[list[bytes]], None] | None = None,
    ) -> None:
        self.folder = _folder(folder)
        # called with journal lines once they are appended (and, from `start`, with
        # every line of the recovered journal): e.g. a metrics fold
        self.on_journal = on_journal
        self.cluster = cluster
        self.config = config  # None: keep the config the journal records
        self.batch = batch
        self.core = SchedulerCore(cluster, None)
        self.reader: InboxReader | None = None
        self._serve_fd: int | None = None
        self.processed = 0  # inbox records handled since start
        self.journaled = 0  # journal records written since start

    # ------------------------------------------------------------ lifecycle
    def _take_serve_lock(self) -> None:
        path = self.folder / SERVE_LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 32, 0).decode(errors="replace").strip()
            os.close(fd)
            who = f" (pid {text})" if text.isdigit() else ""
            raise AlreadyServing(
                f"another `allot serve` is already running on {self.folder}{who}; "
                "one scheduler per folder"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._serve_fd = fd

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()
            self.reader = None
        if self._serve_fd is not None:
            os.close(self._serve_fd)
            self._serve_fd = None

    def __enter__(self) -> EmbeddedScheduler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> Recovery:
        """Take the serve lock and rebuild the state (see `_recover`)."""
        self._take_serve_lock()
        try:
            recovery = self._recover()
            if self.on_journal is not None:
                with LineReader(self.folder / JOURNAL_FILE) as reader:
                    while lines := reader.read(50_000):
                        self.on_journal([line for line in lines if line.strip()])
            return recovery
        except BaseException:
            self.close()
            raise

    def _journal_groups(self) -> Iterator[tuple[int | None, list[bytes]]]:
        """Journal lines grouped by the inbox offset that caused them, in order."""
        group: list[bytes] = []
        group_offset: int | None = None
        checked = False
        for number, line in enumerate(read_journal_lines(self.folder), start=1):
            try:
                raw = load_object(line)
            except Undecodable as why:
                raise EmbeddedError(
                    f"{self.folder / JOURNAL_FILE}:{number}: corrupt journal record ({why})"
                ) from None
            if not checked:
                checked = True
                theirs = raw.get("cluster", "default")
                if theirs != self.cluster:
                    raise EmbeddedError(
                        f"{self.folder} holds the journal of cluster {theirs!r}, not "
                        f"{self.cluster!r}; use --cluster {theirs}"
                    )
            offset = _inbox_offset(raw)
            if group and (offset != group_offset or offset is None):
                yield group_offset, group
                group = []
            group.append(line)
            group_offset = offset
        if group:
            yield group_offset, group

    def _recover(self) -> Recovery:
        """Re-derive the journal from the inbox, record by record, and check it matches.

        Processing is deterministic (the inbox keeps each request's append time), so
        this rebuilds exactly the state an uninterrupted run would have — including
        what `decide` remembers between inputs, which folding decisions alone would
        not restore. The last input's records, if a crash cut them short, are
        completed. A journal that does not match (written by other code, or edited)
        is folded as recorded instead, with a warning."""
        dead = set()
        for letter in read_dead_letters(self.folder):
            offset = _inbox_offset(letter)
            if offset is not None:
                dead.add(offset)
        groups = self._journal_groups()
        reader = InboxReader(self.folder)
        self.reader = reader
        core = self.core
        folded = repaired = 0
        mismatch: str | None = None

        def replay_dead(before: int) -> bool:
            """Process the records before offset `before`: each must be a dead letter."""
            nonlocal mismatch
            while reader.offset < before:
                records = reader.read(min(before - reader.offset, 1000))
                if not records:
                    mismatch = (
                        f"the journal or DLQ refers to inbox offset {before - 1} but "
                        f"{self.folder / INBOX_FILE} has only {reader.offset} complete lines"
                    )
                    return False
                core.wanted = None
                for record in records:
                    out = core.process((record,))
                    if record.offset not in dead or out.journal:
                        mismatch = (
                            f"inbox offset {record.offset} is neither in the journal nor the DLQ"
                        )
                        return False
            return True

        pending = next(groups, None)
        while pending is not None:
            offset, lines = pending
            pending = next(groups, None)
            if offset is None:
                mismatch = "a journal record carries no inbox offset"
                break
            if offset < reader.offset:
                mismatch = f"inbox offset {offset} appears twice in the journal"
                break
            if not replay_dead(offset):
                break
            records = reader.read(1)
            if not records:
                mismatch = (
                    f"the journal refers to inbox offset {offset} but "
                    f"{self.folder / INBOX_FILE} has only {reader.offset} complete lines"
                )
                break
            first = load_object(lines[0])
            core.wanted = None
            if first.get("type") == "config.set" and isinstance(first.get("config"), dict):
                core.wanted = parse_config(first["config"])
            produced = core.process(records).journal
            if produced == lines:
                folded += len(lines)
                continue
            if pending is None and produced[: len(lines)] == lines:
                missing = produced[len(lines) :]  # a crash cut the last input short
                append_journal(self.folder, missing)
                folded += len(lines)
                repaired = len(missing)
                continue
            mismatch = f"the records of inbox offset {offset} differ from a re-derivation"
            break

        if mismatch is None and dead:
            replay_dead(max(dead) + 1)

        if mismatch is not None:
            print(
                f"allot serve: warning: {mismatch}; folding {self.folder / JOURNAL_FILE} as "
                "recorded (decisions after this restart may differ from a replay)",
                file=sys.stderr,
            )
            reader.close()
            self.core = core = SchedulerCore(self.cluster, None)
            folded = 0
            for _, lines in self._journal_groups():
                folded += self._fold(lines)
            core.positions[PARTITION] = max(
                core.positions.get(PARTITION, -1), max(dead, default=-1)
            )
            self.reader = reader = InboxReader(self.folder, core.positions[PARTITION] + 1)
            repaired = 0

        core.wanted = self.config
        resume = core.positions.get(PARTITION, -1) + 1
        if reader.offset != resume:
            raise EmbeddedError(
                f"the journal has processed inbox offset {resume - 1} but "
                f"{self.folder / INBOX_FILE} has only {reader.offset} complete lines"
            )
        return Recovery(folded=folded, resumed_at=resume, repaired=repaired)

    def _fold(self, lines: list[bytes]) -> int:
        try:
            return self.core.fold_journal(lines)
        except Exception as why:
            raise EmbeddedError(
                f"{self.folder / JOURNAL_FILE}: cannot fold the journal: {why}"
            ) from None

    # ------------------------------------------------------------ processing
    def step(self, limit: int | None = None) -> int:
        """Fold the next batch of inbox records; returns how many were read."""
        assert self.reader is not None, "call start() first"
        records = self.reader.read(limit or self.batch)
        if not records:
            return 0
        out = BatchResult()
        # write in inbox order: journal lines up to each dead letter, then the letter
        plan: list[tuple[int, DeadLetter | None]] = []
        for record in records:
            dead = len(out.dead)
            self.core.process((record,), out)
            if len(out.dead) > dead:
                plan.append((len(out.journal), out.dead[-1]))
        written = 0
        for upto, letter in plan:
            append_journal(self.folder, out.journal[written:upto])
            written = upto
            if letter is not None:
                append_dead_letters(self.folder, [letter])
        append_journal(self.folder, out.journal[written:])
        if self.on_journal is not None and out.journal:
            self.on_journal(out.journal)
        self.processed += len(records)
        self.journaled += len(out.journal)
        return len(records)

    def drain(self) -> int:
        """Fold what the inbox holds now (stops once a read comes back short, so writers
        that never pause cannot keep it running)."""
        total = 0
        while True:
            n = self.step()
            total += n
            if n < self.batch:
                return total

    @property
    def offset(self) -> int:
        """The next inbox offset to process."""
        return self.core.positions.get(PARTITION, -1) + 1
