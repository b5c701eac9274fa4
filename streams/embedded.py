"""The embedded journal (`--data DIR`): the scheduler loop on plain files, no broker.

Files in DIR:

- `inbox.jsonl` — requests, one line each: `{"ts": <append wall time>, "value": "<raw
  request text>"}` (`"value_b64"` instead of `"value"` for bytes that are not UTF-8).
  The raw text is kept as sent, so even bytes that are not JSON survive to the DLQ.
  A request's inbox offset is its 0-based line number (partition 0), counted from the
  header's `inbox_base` in an inbox that was started again (see below).
- `journal.jsonl` — journal records exactly as `SchedulerCore` encodes them (each
  carries `inbox: [0, offset]` of the input that caused it).
- `dlq.jsonl` — dead letters: `{"inbox": [0, offset], "error": ..., "value": ...}`.
- `.clock` — the last request stamp, and the time since boot it was taken at (see
  "the inbox clock" below: stamps follow neither the wall clock's steps back nor freeze).
- `.lock` — `fcntl.flock` taken around every append, so several `allot` commands and
  one `allot serve` share the folder; `.serve.lock` — held by the one `allot serve`.

Crash safety: an append is whole lines, written then flushed and fsynced under the
lock. A last line without its newline is a write cut short: readers ignore it and the
next append truncates it first, so it is never mistaken for a full record. The
scheduler writes journal lines and dead letters in inbox order, so after a crash every
input before the last one recorded is complete and only the last input's records may
be cut short. A write that fails (a full disk) is cut back the same way and stops the
scheduler for good (its core is past what the files hold); so does a journal removed or
replaced under it, before it writes there: a restart re-derives from the inbox.

Restart: `EmbeddedScheduler.start` re-derives the journal from the inbox record by
record (processing is deterministic: the inbox keeps each request's append time) and
checks it line for line, then appends whatever a crash cut short. Re-deriving, rather
than only folding the journal's records, also restores what `decide` remembers between
inputs (`State.blocked`, the last full cycle's ranking), so decisions after a restart
are exactly those of an uninterrupted run and `allot replay --verify` reproduces them.
A journal that does not match an inbox still holding the requests it records (the
journal was edited, or written by other code) is folded as recorded, with a warning.

An inbox cut back, replaced, rotated or removed by hand (at rest or under a running
`allot serve`, whose reader checks the bytes before its position and that the name
still is its file) no longer numbers its lines as the journal's offsets: reading on
from the last recorded offset skipped the requests sent since, or refused to start.
The journal stands; the inbox is kept as `inbox.jsonl.replaced-<time>` and started
again with a header line `{"inbox_base": N}`, N one past the last offset the journal or
the DLQ records, carrying the requests they do not hold (by request id; dead letters by
their bytes), so none is lost and none applied twice (`EmbeddedScheduler._rebase`). A
later restart folds the journal before N as recorded and re-derives the rest.

Snapshots (`snapshot.pickle`): every `snapshot_every` seconds of serving (60 by
default) a forked child pickles the core together with where it stands in the inbox
and the journal (line, byte position, and a hash of the bytes just before it), and
renames the file into place (`streams.offloop.fork_to_file`; the loop does not wait).
A restart that finds one whose positions still hold starts from it and re-derives only
the journal after it, checked as above; a snapshot that does not fit the files (they
were replaced, edited or truncated), or cannot be read, is ignored with a warning, and
a re-derivation from it that disagrees with the journal starts over from the beginning.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import heapq
import os
import pickle
import shutil
import sys
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import orjson

from domain import events as ev
from domain.admission import MAX_NAME
from domain.config import SchedulerConfig, parse_config
from streams.codec import Undecodable, load_object
from streams.core import (
    MAX_INPUT_BYTES,
    SNAPSHOT_FORMAT,
    BatchResult,
    DeadLetter,
    InboxRecord,
    SchedulerCore,
)
from streams.offloop import child_failure, fork_to_file, reaped

INBOX_FILE = "inbox.jsonl"
JOURNAL_FILE = "journal.jsonl"
DLQ_FILE = "dlq.jsonl"
LOCK_FILE = ".lock"
SERVE_LOCK_FILE = ".serve.lock"
SNAPSHOT_FILE = "snapshot.pickle"
SNAPSHOT_EVERY_S = 60.0
_TAIL = 4096  # bytes before a snapshot's position that must still be the same
_GUARD = 512  # bytes before a guarded reader's position checked at each refill
PARTITION = 0  # the embedded inbox has one partition
_CHUNK = 1 << 20


class EmbeddedError(Exception):
    """A problem with an embedded journal folder: one line for the user. `errno` is the
    failed system call's, when one failed (so a caller can tell a folder it may not
    write, which waiting does not cure, from a full disk)."""

    def __init__(self, message: str, *, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno


class AlreadyServing(EmbeddedError):
    """Another `allot serve` holds the folder's serve lock."""


class JournalGone(EmbeddedError):
    """DIR/journal.jsonl was removed or replaced under a running scheduler."""


# ------------------------------------------------------------------ locking


def _folder(folder: Path | str, *, create: bool = True) -> Path:
    path = Path(folder)
    if path.exists() and not path.is_dir():
        raise EmbeddedError(f"{path} is not a folder (--data wants a folder, e.g. ./allot-data)")
    if create:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as why:
            raise EmbeddedError(
                f"cannot create {path}: {why.strerror or why}", errno=why.errno
            ) from None
    return path


@contextmanager
def folder_lock(folder: Path | str, *, shared: bool = False) -> Iterator[None]:
    """The folder's append lock (`DIR/.lock`), exclusive unless `shared`."""
    path = _folder(folder) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as why:
        raise EmbeddedError(f"cannot open {path}: {why.strerror or why}", errno=why.errno) from None
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


def _append(path: Path, data: bytes, tries: int = 3) -> None:
    """Append whole lines (call with the folder lock held): a torn tail left by a crash
    is cut off first, then the data is written, flushed and fsynced. All or nothing: a
    write that fails (a full disk) is cut off again, so no part of a batch (the first
    94 tasks of a refused 200-task array) is left to be read as accepted. A file renamed
    away by hand while it was written is written again at the path (a request there
    twice is one: the scheduler drops a resend by its id)."""
    if not data:
        return
    created = not path.exists()
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError as why:
        raise EmbeddedError(f"cannot open {path}: {why.strerror or why}", errno=why.errno) from None
    whole: int | None = None
    try:
        size = os.fstat(fd).st_size
        whole = size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            whole = _complete_size(fd, size)
            os.ftruncate(fd, whole)
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    except OSError as why:
        if whole is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, whole)
        raise EmbeddedError(
            f"cannot write {path}: {why.strerror or why}", errno=why.errno
        ) from None
    else:
        written_to = os.fstat(fd)
    finally:
        os.close(fd)
    if created:
        _fsync_dir(path.parent)
    if tries > 1 and not _names(path, (written_to.st_dev, written_to.st_ino)):
        _append(path, data, tries - 1)


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


# ------------------------------------------------------------------ the inbox clock
#
# A request's `ts` is the scheduler's event time for it (as a broker's timestamp is), so
# it must not follow the wall clock's steps back: the scheduler clamps event time to
# never go back, and an NTP step back of an hour froze time in the journal for that hour
# (ticks all at one time, no protection ending, no usage accruing). Stamps are therefore
# taken under the folder lock from DIR/.clock, the last stamp with the time since boot
# it was taken at: the next stamp is the wall clock, or the last stamp plus CLOCK_PACE
# of the time since boot that has passed, whichever is later. A step back is not taken:
# time in the log goes on, a little slower than real time (as chrony slews rather than
# steps), so its lead over the wall clock shrinks by 1 - CLOCK_PACE of each second and
# the wall clock takes over again (an hour's step back: ten hours later). Kept ahead
# at full pace, the log stayed ahead until the next forward step, i.e. forever. A step
# forward is taken once. Across a reboot (no time since boot to compare) the lead is
# what it was, less the same share of the wall time that has passed. A lead beyond
# CLOCK_WARN_S is told once, on stderr, by the stamp that finds it.

CLOCK_FILE = ".clock"
CLOCK_PACE = 0.9  # journal seconds per real second while the wall clock is behind
CLOCK_WARN_S = 5.0  # a lead of the journal over the wall clock worth a warning
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def wall_clock() -> float:
    """Seconds since the epoch (tests replace it to step the clock)."""
    return time.time()


def since_boot() -> float:
    """Seconds since boot, suspend included: unaffected by steps of the wall clock."""
    return time.clock_gettime(getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC))


def _boot_id() -> str | None:
    try:
        return _BOOT_ID.read_text().strip() or None
    except OSError:
        return None


def next_stamp(last: dict[str, Any] | None, wall: float, booted: float, boot: str | None) -> float:
    """The stamp after `last` (DIR/.clock's record, or None) at wall time `wall`,
    `booted` seconds since boot `boot`: never before the last one, never frozen, and
    back to the wall clock in time after a step back (CLOCK_PACE)."""
    if last is None:
        return wall
    try:
        last_ts, last_wall = float(last["ts"]), float(last["wall"])
        last_booted, last_boot = float(last["booted"]), last.get("boot")
    except (KeyError, TypeError, ValueError):
        return wall
    if boot is not None and boot == last_boot and booted >= last_booted:
        return max(wall, last_ts + (booted - last_booted) * CLOCK_PACE)
    # another boot: the lead it had, shrunk as it would have by the wall time since
    lead = max(0.0, last_ts - last_wall) - (1 - CLOCK_PACE) * max(0.0, wall - last_wall)
    return max(wall + max(0.0, lead), last_ts)


def _clock_lead_warning(stamp: float, wall: float, last: dict[str, Any] | None) -> str | None:
    """What to say when this stamp finds the wall clock more than CLOCK_WARN_S behind
    the journal and the last one did not (so a step back is told once)."""
    lead = stamp - wall
    if lead <= CLOCK_WARN_S:
        return None
    with contextlib.suppress(KeyError, TypeError, ValueError):
        if float(last["ts"]) - float(last["wall"]) > CLOCK_WARN_S:  # type: ignore[index]
            return None  # told already
    catch_up = lead / (1 - CLOCK_PACE)
    return (
        f"the wall clock is {lead:.0f} s behind the journal's time (stepped back?); "
        f"request times go on at {CLOCK_PACE:g} of real time and meet it again in "
        f"about {catch_up / 3600:.1f} h"
    )


def _inbox_stamp(folder: Path) -> float:
    """The next request stamp (call with the folder lock held), recorded in DIR/.clock."""
    path = folder / CLOCK_FILE
    try:
        last = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        last = None  # none yet, or cut short by a crash: start from the wall clock
    last = last if isinstance(last, dict) else None
    wall, booted, boot = wall_clock(), since_boot(), _boot_id()
    stamp = next_stamp(last, wall, booted, boot)
    record = {"ts": stamp, "wall": wall, "booted": booted, "boot": boot}
    with contextlib.suppress(OSError):  # a clock that cannot be kept: the wall clock then
        # written beside and renamed over: a write cut short (a full disk, a power cut)
        # leaves the last record, not half of one, which would lose its lead over a
        # wall clock stepped back
        part = path.with_name(CLOCK_FILE + ".part")
        part.write_bytes(orjson.dumps(record))
        os.replace(part, path)
    message = _clock_lead_warning(stamp, wall, last)
    if message is not None:
        print(f"allot: warning: {message}", file=sys.stderr)
    return stamp


def append_requests(
    folder: Path | str, values: Iterable[bytes | str | dict[str, Any]], ts: float | None = None
) -> None:
    """Append requests to DIR/inbox.jsonl, stamped with the inbox clock (above; taken
    under the lock, so stamps follow line order and never go back) unless `ts` is given."""
    path = _folder(folder)
    values = list(values)
    if not values:
        return
    with folder_lock(path):
        stamp = _inbox_stamp(path) if ts is None else ts
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


@dataclass(frozen=True)
class Mark:
    """A position in an append-only file: the next line's number, its byte position,
    and a hash of the bytes before it (so a later reader can tell the file is still
    the one the position was taken in)."""

    line: int
    pos: int
    tail: str

    @classmethod
    def at(cls, path: Path, line: int, pos: int) -> Mark:
        return cls(line, pos, _tail_hash(path, pos))

    def holds(self, path: Path) -> bool:
        try:
            return path.stat().st_size >= self.pos and _tail_hash(path, self.pos) == self.tail
        except OSError:
            return False


def _names(path: Path, dev_ino: tuple[int, int]) -> bool:
    """Does `path` still name the file with this (device, inode)? (Not once renamed away,
    replaced or removed.)"""
    try:
        st = path.stat()
    except FileNotFoundError:
        return False
    return (st.st_dev, st.st_ino) == dev_ino


def _bytes_at(path: Path, start: int, end: int) -> bytes:
    try:
        with path.open("rb") as f:
            f.seek(start)
            return f.read(end - start)
    except OSError:
        return b""


def _tail_hash(path: Path, pos: int) -> str:
    start = max(0, pos - _TAIL)
    with path.open("rb") as f:
        f.seek(start)
        data = f.read(pos - start)
    if len(data) != pos - start:
        return ""
    return hashlib.sha256(data).hexdigest()


class FileChanged(EmbeddedError):
    """A file read as append-only was cut, replaced or rewritten under its reader."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path} {reason}")
        self.reason = reason


class LineReader:
    """Complete lines of an append-only file, read incrementally without the lock.

    A last line without its newline is not returned (it is a write in progress or one
    cut short by a crash); the position stays before it, so it is read once complete
    or, if a later append cut it off, the new lines are read in its place.

    With `guard`, a file that is no longer the one read (cut back by hand, replaced by
    another file, removed) raises `FileChanged` instead of being read on from the old
    position: each refill checks that the bytes just before it are still those read,
    and a read that finds nothing new checks the path still names the open file."""

    def __init__(self, path: Path | str, start: Mark | None = None, *, guard: bool = False) -> None:
        self.path = Path(path)
        self.pos = 0 if start is None else start.pos  # after the last complete line read
        self.line = 0 if start is None else start.line  # number of the next line
        self._file: IO[bytes] | None = None
        self._buf = b""  # bytes read from the file; self._buf[self._at] is at self.pos
        self._at = 0
        self.guard = guard
        self._seen = b""  # (guard) the last bytes before the buffer's start, as read
        self._id: tuple[int, int] | None = None  # (guard) device and inode of the open file
        if guard and self.pos:
            # a start checked by `Mark.holds` just now: the bytes before it are the file's
            self._seen = _bytes_at(self.path, max(0, self.pos - _GUARD), self.pos)

    def _open(self) -> IO[bytes] | None:
        if self._file is None:
            try:
                self._file = self.path.open("rb")
            except FileNotFoundError:
                if self.guard and self.pos:
                    raise FileChanged(
                        self.path, f"is gone (after {self.line} lines were read from it)"
                    ) from None
                return None
            if self.guard:
                st = os.fstat(self._file.fileno())
                self._id = (st.st_dev, st.st_ino)
        return self._file

    def _check_same_file(self) -> None:
        """(guard) The path still names the file being read."""
        if self._id is None or not _names(self.path, self._id):
            raise FileChanged(
                self.path,
                f"was replaced or removed after {self.line} lines were read from it",
            )

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def moved_away_lines(self) -> list[bytes]:
        """The complete lines not read yet of the file this reader has open, when the
        path no longer names that file (renamed or removed under it): requests written
        there before, or while, it was moved. [] while the path still names it."""
        f = self._file
        if f is None:
            return []
        st = os.fstat(f.fileno())
        if _names(self.path, (st.st_dev, st.st_ino)):
            return []
        f.seek(self.pos)
        data = f.read()
        end = data.rfind(b"\n")
        return data[:end].split(b"\n") if end >= 0 else []

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
                want = _CHUNK if rest < _CHUNK else 2 * rest
                if self.guard:
                    seen = (self._seen + buf[max(0, at - _GUARD) : at])[-_GUARD:]
                    f.seek(self.pos - len(seen))
                    data = f.read(len(seen) + want)
                    if data[: len(seen)] != seen:
                        if out:  # lines read before it stand: the next read raises
                            break
                        raise FileChanged(
                            self.path,
                            f"no longer holds the {self.line} lines read from it",
                        )
                    data = data[len(seen) :]
                else:
                    f.seek(self.pos)
                    data = f.read(want)
                if len(data) <= rest and data == buf[at:]:
                    if self.guard and not out:
                        self._check_same_file()
                    break  # nothing new
                if self.guard:
                    self._seen = seen
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


def inbox_header(path: Path) -> tuple[int, int]:
    """(offset of the first request, byte length of the header line) of an inbox that
    starts with a header line `{"inbox_base": N, ...}` (written when the inbox was
    started again: see `EmbeddedScheduler._rebase`); (0, 0) for one without."""
    head = _bytes_at(path, 0, 1024)
    nl = head.find(b"\n")
    base = _header_base(head[:nl]) if nl > 0 else None
    return (0, 0) if base is None else (base, nl + 1)


def _header_base(line: bytes) -> int | None:
    if b'"inbox_base"' not in line:
        return None
    try:
        raw = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(raw, dict) or "value" in raw or "value_b64" in raw:
        return None
    base = raw.get("inbox_base")
    return base if type(base) is int and base >= 0 else None


class InboxReader:
    """DIR/inbox.jsonl as `InboxRecord`s, incrementally. A request's offset is its line
    number among the requests, counted from the header's base (0 without one). The
    reader is guarded: an inbox cut, replaced or removed under it raises `FileChanged`."""

    def __init__(self, folder: Path | str, start: int = 0) -> None:
        path = Path(folder) / INBOX_FILE
        self.base, size = inbox_header(path)
        self.header = 1 if size else 0  # lines before the first request
        self.lines = LineReader(path, Mark(1, size, "") if size else None, guard=True)
        self.last_ts = 0.0
        if start > self.base:
            self.skip_to(start)

    @property
    def offset(self) -> int:
        """The offset the next read starts at."""
        return self.base + self.lines.line - self.header

    def skip_to(self, offset: int) -> None:
        while self.offset < offset:
            if not self.read(min(offset - self.offset, 100_000)):
                break

    def resume(self, mark: Mark, last_ts: float) -> None:
        """Continue from a snapshot's position (checked by `Mark.holds`)."""
        self.lines.close()
        path = self.lines.path
        self.base, size = inbox_header(path)
        self.header = 1 if size else 0
        self.lines = LineReader(path, mark, guard=True)
        self.last_ts = last_ts

    def read(self, limit: int | None = None) -> list[InboxRecord]:
        first = self.offset
        records = []
        for n, line in enumerate(self.lines.read(limit)):
            record = decode_request(line, first + n, self.last_ts)
            self.last_ts = record.timestamp
            records.append(record)
        return records

    def close(self) -> None:
        self.lines.close()


def read_inbox(folder: Path | str, start: int = 0, limit: int | None = None) -> list[InboxRecord]:
    """Inbox records from offset `start`."""
    reader = InboxReader(folder, start)
    try:
        return reader.read(limit)
    finally:
        reader.close()


def read_journal_lines(folder: Path | str, start: Mark | None = None) -> Iterator[bytes]:
    """Every complete, non-empty line of DIR/journal.jsonl (from `start`)."""
    with LineReader(Path(folder) / JOURNAL_FILE, start) as reader:
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
                if not line.strip():
                    continue
                try:
                    letter = orjson.loads(line)
                except orjson.JSONDecodeError as why:
                    letter = why
                if not isinstance(letter, dict):
                    # a hand-damaged line stopped the scheduler with no file named (or a
                    # traceback): say where, as for a corrupt journal record
                    raise EmbeddedError(
                        f"{Path(folder) / DLQ_FILE}: a line that is not a dead letter "
                        f"({str(letter)[:80]}): {line[:80]!r}; remove or mend it"
                    )
                yield letter


def _inbox_offset(raw: dict[str, Any]) -> int | None:
    source = raw.get("inbox")
    if isinstance(source, list) and len(source) == 2 and source[0] == PARTITION:
        try:
            return int(source[1])
        except (TypeError, ValueError):
            return None
    return None


def _bookkeeping(group: tuple[int | None, list[bytes]]) -> bool:
    """A group of journal lines without an inbox offset that are all bookkeeping
    (`journal.restored`, written by `allot journal restore`): caused by no request."""
    offset, lines = group
    return offset is None and all(
        load_object(line).get("type") in ev.BOOKKEEPING_TYPES for line in lines
    )


def _recorded_request(raw: dict[str, Any]) -> str | None:
    """The request id a journal record keeps: an input's `id`, a rejection's `ref` (None
    for decisions and the scheduler's own config.set)."""
    kind = raw.get("type")
    if not isinstance(kind, str):
        return None
    if kind in ev.INPUT_TYPES:
        if kind == "config.set" and raw.get("actor") == ev.SCHEDULER:
            return None
        value = raw.get("id")
    elif kind.endswith(".rejected"):
        value = raw.get("ref")
    else:
        return None
    return value if isinstance(value, str) else None


def _request_keys(value: bytes) -> tuple[frozenset[str], bool] | None:
    """What the journal may keep of request `value`'s id (see `_recorded_request`): the
    id itself, as its rejection clips it at parsing or at admission; and whether it is
    a string id (a request without one can only be rejected). None: not a request but
    a dead letter."""
    if len(value) > MAX_INPUT_BYTES:
        return None
    try:
        raw = load_object(value)
    except Undecodable:
        return None
    rid = raw.get("id")
    keys = {ev._clip(rid) or "?"}  # a rejection at parsing keeps this as its ref
    if isinstance(rid, str):
        keys.update((rid, rid[:MAX_NAME]))  # accepted; rejected at admission
    return frozenset(keys), isinstance(rid, str)


def _digest(value: object) -> str:
    text = value if isinstance(value, str) else repr(value)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


# ---------------------------------------------------------------- the loop


@dataclass(frozen=True)
class Recovery:
    folded: int  # journal records folded
    resumed_at: int  # first inbox offset still to process
    repaired: int  # journal records re-derived for an input a crash cut short
    from_snapshot: int = 0  # journal records the snapshot it started from covered


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


FOLD_BATCH = 50_000  # journal records folded at once when the journal is taken as recorded


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
        on_journal: Callable[..., None] | None = None,
        snapshot_every: float | None = SNAPSHOT_EVERY_S,
        fork_snapshots: bool = True,
    ) -> None:
        self.folder = _folder(folder)
        # seconds between snapshots while inputs arrive (None or <= 0: never)
        self.snapshot_every = snapshot_every if snapshot_every and snapshot_every > 0 else None
        self.fork_snapshots = fork_snapshots  # False: written in the loop (tests)
        self._snapshot_pid: int | None = None
        self._last_snapshot = time.monotonic()
        self._unsnapshotted = 0  # inbox records processed since the last snapshot
        self._journal_line = 0  # lines in the journal file (after our last append)
        # called with journal lines once they are appended (and, from `start`, with
        # every line of the recovered journal and `recovered=True`): e.g. a metrics fold
        self.on_journal = on_journal
        self.cluster = cluster
        self.config = config  # None: keep the config the journal records
        self.batch = batch
        self.core = SchedulerCore(cluster, None)
        self.reader: InboxReader | None = None
        self._serve_fd: int | None = None
        # which file DIR/journal.jsonl is (device, inode), once it exists: one removed or
        # replaced under a running serve must not be started again with only new records
        self._journal_id: tuple[int, int] | None = None
        self._stopped: EmbeddedError | None = None  # a write failed: no more steps
        self.processed = 0  # inbox records handled since start
        self.journaled = 0  # journal records written since start
        self.dead_lettered = 0  # inbox records written to DIR/dlq.jsonl since start

    # ------------------------------------------------------------ lifecycle
    def take_serve_lock(self) -> None:
        """Hold DIR/.serve.lock (one `allot serve` per folder), or raise AlreadyServing.
        `start` takes it if this was not called first; a caller that says anything
        about serving (a metrics URL) calls it first, so a refusal comes before that."""
        if self._serve_fd is not None:
            return
        path = self.folder / SERVE_LOCK_FILE
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as why:  # a read-only folder, a full disk: one line, not a traceback
            raise EmbeddedError(
                f"cannot serve {self.folder}: {path.name}: {why.strerror or why}"
            ) from None
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
        if self._snapshot_pid is not None:  # let a snapshot being written finish
            reaped(self._snapshot_pid, wait=True)
            self._snapshot_pid = None
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
        self.take_serve_lock()
        # a re-base that died before its swap (only a serve, holding that lock, writes it)
        (self.folder / f"{INBOX_FILE}.tmp").unlink(missing_ok=True)
        try:
            for attempt in range(3):
                try:
                    recovery = self._recover()
                    break
                except FileChanged:  # cut or replaced while being re-derived: look again
                    if attempt == 2:
                        raise
            self._note_journal()
            if self.on_journal is not None:
                with LineReader(self.folder / JOURNAL_FILE) as reader:
                    while lines := reader.read(50_000):
                        self.on_journal([ln for ln in lines if ln.strip()], recovered=True)
            return recovery
        except BaseException:
            self.close()
            raise

    def _journal_groups(
        self, start: Mark | None = None
    ) -> Iterator[tuple[int | None, list[bytes]]]:
        """Journal lines (from `start`) grouped by the inbox offset that caused them."""
        group: list[bytes] = []
        group_offset: int | None = None
        checked = False
        first = 1 if start is None else start.line + 1
        for number, line in enumerate(read_journal_lines(self.folder, start), start=first):
            self._journal_line = number
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
        """Re-derive the journal from the inbox, record by record, and check it matches
        (from the snapshot, when there is one that fits the files).

        Processing is deterministic (the inbox keeps each request's append time), so
        this rebuilds exactly the state an uninterrupted run would have — including
        what `decide` remembers between inputs, which folding decisions alone would
        not restore. The last input's records, if a crash cut them short, are
        completed. A journal that does not match (written by other code, or edited)
        is folded as recorded instead, with a warning."""
        snapshot = self._usable_snapshot()
        if snapshot is not None:
            recovery = self._rederive(snapshot)
            if recovery is not None:
                return recovery
            self._warn(
                "the journal after the snapshot differs from a re-derivation; "
                "re-deriving it from the beginning"
            )
        recovery = self._rederive(None)
        assert recovery is not None
        return recovery

    def _warn(self, message: str) -> None:
        print(f"allot serve: warning: {message}", file=sys.stderr)

    def _usable_snapshot(self) -> dict[str, Any] | None:
        """DIR/snapshot.pickle if it can be read and its positions still hold."""
        path = self.folder / SNAPSHOT_FILE
        for stale in self.folder.glob(f"{SNAPSHOT_FILE}.tmp.*"):  # a writer that died
            stale.unlink(missing_ok=True)
        if not path.exists():
            return None
        try:
            snapshot = pickle.loads(zlib.decompress(path.read_bytes()))
            base, header = inbox_header(self.folder / INBOX_FILE)
            header_lines = 1 if header else 0
            fits = (
                snapshot["format"] == SNAPSHOT_FORMAT
                and snapshot["cluster"] == self.cluster
                and isinstance(snapshot["core"], SchedulerCore)
                and snapshot["inbox"].line >= header_lines
                and snapshot["core"].positions.get(PARTITION, -1) + 1
                == base + snapshot["inbox"].line - header_lines
                and snapshot["inbox"].holds(self.folder / INBOX_FILE)
                and snapshot["journal"].holds(self.folder / JOURNAL_FILE)
            )
        except Exception as why:  # unreadable: it is only a shortcut
            # (a snapshot of another allot version fails here, before its format is read)
            self._warn(
                f"ignoring {path}: unreadable, or written by another allot version "
                f"({type(why).__name__}: {why}); rebuilding from the journal"
            )
            return None
        if not fits:
            self._warn(f"ignoring {path}: it does not fit this folder's inbox and journal")
            return None
        return snapshot

    def _rederive(self, snapshot: dict[str, Any] | None) -> Recovery | None:
        """`_recover` from `snapshot` (None: from the beginning). From a snapshot, a
        journal that does not match returns None (the caller starts over)."""
        dead = set()
        for letter in read_dead_letters(self.folder):
            offset = _inbox_offset(letter)
            if offset is not None:
                dead.add(offset)
        if self.reader is not None:
            self.reader.close()
        reader = InboxReader(self.folder)
        self.reader = reader
        self._journal_line = 0
        start: Mark | None = None
        if snapshot is None:
            self.core = SchedulerCore(self.cluster, None)
        else:
            self.core = snapshot["core"]
            start = snapshot["journal"]
            self._journal_line = start.line
            reader.resume(snapshot["inbox"], snapshot["inbox_ts"])
        groups = self._journal_groups(start)
        core = self.core
        folded = repaired = 0
        mismatch: str | None = None
        pending = next(groups, None)
        if snapshot is None and reader.base:
            # the inbox was started again at its base (see `_rebase`): the requests before
            # it are in no inbox, so their records are folded as recorded
            prefix: list[bytes] = []
            while pending is not None and (
                (pending[0] is not None and pending[0] < reader.base) or _bookkeeping(pending)
            ):
                prefix.extend(pending[1])
                pending = next(groups, None)
                if len(prefix) >= FOLD_BATCH:
                    folded += self._fold(prefix)
                    prefix = []
            folded += self._fold(prefix) if prefix else 0
            core.positions[PARTITION] = max(core.positions.get(PARTITION, -1), reader.base - 1)

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

        while pending is not None:
            offset, lines = pending
            pending = next(groups, None)
            if _bookkeeping((offset, lines)):  # a restore's mark: no input, no state
                folded += len(lines)
                continue
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
            if (
                first.get("type") == "config.set"
                and first.get("actor") == ev.SCHEDULER  # the server's own, not an admin's
                and isinstance(first.get("config"), dict)
            ):
                core.wanted = parse_config(first["config"], recorded=True)
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
            mismatch = (
                f"the records of inbox offset {offset} differ from a re-derivation (a "
                "journal written by another allot version, or edited)"
            )
            break

        if mismatch is None and dead:
            replay_dead(max(dead) + 1)

        if mismatch is not None and snapshot is not None:
            return None
        if mismatch is not None:
            # is it the inbox that changed (cut, replaced, edited), or the journal?
            changed = self._inbox_differs()
            if changed is None:
                self._warn(
                    f"{mismatch}; folding {self.folder / JOURNAL_FILE} as recorded (decisions "
                    "after this restart may differ from a replay)"
                )
            reader.close()
            self.core = core = SchedulerCore(self.cluster, None)
            folded = 0
            self._journal_line = 0
            batch: list[bytes] = []
            for _, lines in self._journal_groups():
                batch.extend(lines)
                if len(batch) >= FOLD_BATCH:  # one fold per batch, not per input: each
                    folded += self._fold(batch)  # copies the state once (it was quadratic)
                    batch = []
            folded += self._fold(batch) if batch else 0
            core.positions[PARTITION] = max(
                core.positions.get(PARTITION, -1), max(dead, default=-1)
            )
            if changed is not None:
                self._rebase(changed)  # the journal's records stand; new requests follow
                assert self.reader is not None
                reader = self.reader
            else:
                self.reader = reader = InboxReader(self.folder, core.positions[PARTITION] + 1)
            repaired = 0

        core.wanted = self.config
        resume = core.positions.get(PARTITION, -1) + 1
        if reader.offset != resume and snapshot is not None:
            return None
        if reader.offset != resume:
            raise EmbeddedError(
                f"the journal has processed inbox offset {resume - 1} but "
                f"{self.folder / INBOX_FILE} has only {reader.offset} complete lines"
            )
        self._journal_line += repaired
        covered = 0 if snapshot is None else snapshot["journal"].line
        return Recovery(folded=folded, resumed_at=resume, repaired=repaired, from_snapshot=covered)

    def _inbox_differs(self) -> str | None:
        """Why DIR/inbox.jsonl is not the inbox the journal and the DLQ were folded from,
        or None when it is (a journal that does not re-derive from it was edited, or
        written by other code). At every offset they record, from the inbox's base on,
        the inbox must hold that request: the id an input or its rejection recorded, the
        bytes of a dead letter."""
        dead = []
        for letter in read_dead_letters(self.folder):
            offset = _inbox_offset(letter)
            if offset is not None:
                dead.append((offset, None, _digest(letter.get("value"))))
        dead.sort(key=lambda item: item[0])

        def journaled() -> Iterator[tuple[int, str | None, str | None]]:
            for offset, lines in self._journal_groups():
                if offset is not None:
                    for line in lines:
                        ref = _recorded_request(load_object(line))
                        if ref is not None:
                            yield offset, ref, None
                            break

        reader = InboxReader(self.folder)
        last = -1
        try:
            for offset, ref, digest in heapq.merge(journaled(), dead, key=lambda item: item[0]):
                if offset < reader.base or offset <= last:
                    continue  # before the inbox's base; or twice (the journal's own problem)
                last = offset
                reader.skip_to(offset)
                got = reader.read(1) if reader.offset == offset else []
                if not got:
                    return f"it ends at offset {reader.offset}; the journal records offset {offset}"
                value = got[0].value
                if ref is not None:
                    keys = _request_keys(value)
                    if keys is None or ref not in keys[0]:
                        return (
                            f"its request at offset {offset} is not {ref!r}, which the journal "
                            "recorded there"
                        )
                elif _digest(value.decode("utf-8", "replace")) != digest:
                    return (
                        f"its request at offset {offset} is not the dead letter the DLQ "
                        "recorded there"
                    )
        except FileChanged as why:
            return f"it {why.reason}"
        finally:
            reader.close()
        return None

    def _rebase(self, why: str) -> None:
        """Start DIR/inbox.jsonl again: it no longer holds what the journal was folded
        from (`why`: cut back, replaced or edited by hand), so its line numbers are not
        the offsets the journal records, and reading on from the recorded offset would
        skip new requests (or read old ones as new).

        The journal's records stand. Under the folder lock (no request is appended
        meanwhile) the inbox is kept as `inbox.jsonl.replaced-<time>` and replaced by
        one whose header gives the offset its first request has: one past the last
        offset the journal or the DLQ records, so offsets never repeat. It carries the
        requests of the old inbox that the journal and the DLQ do not hold (by request
        id; a dead letter by its bytes), in their order: those sent after the cut.
        Requests they hold are left out, so none is applied twice; one without a string
        id can only be rejected, so it is carried. Replay is unchanged: it reads the
        journal only."""
        inbox = self.folder / INBOX_FILE
        if self._snapshot_pid is not None:  # its inbox position is about to mean nothing
            reaped(self._snapshot_pid, wait=True)
            self._snapshot_pid = None
        with folder_lock(self.folder):
            # an inbox renamed away under the running reader: what it had not read yet
            # (a request a submit wrote while the file was moved, too) comes first
            moved: list[bytes] = []
            if self.reader is not None:
                moved = self.reader.lines.moved_away_lines()
                self.reader.close()
                self.reader = None
            old_base, header = inbox_header(inbox)
            with LineReader(inbox, Mark(1, header, "") if header else None) as lines:
                raw = [line for chunk in iter(lambda: lines.read(50_000), []) for line in chunk]
            raw = moved + raw
            records: list[InboxRecord] = []
            last_ts = 0.0
            for n, line in enumerate(raw):
                records.append(decode_request(line, n, last_ts))
                last_ts = records[-1].timestamp
            keys = [_request_keys(r.value) for r in records]
            dead = [
                _digest(r.value.decode("utf-8", "replace")) if k is None else None
                for r, k in zip(records, keys, strict=True)
            ]
            refs, letters, top = self._recorded_in(
                {key for k in keys if k is not None and k[1] for key in k[0]},
                {d for d in dead if d is not None},
            )
            carried = [
                r
                for r, k, d in zip(records, keys, dead, strict=True)
                if not (d in letters if k is None else k[1] and not refs.isdisjoint(k[0]))
            ]
            base = max(top, self.core.positions.get(PARTITION, -1), old_base - 1) + 1
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
            aside = self.folder / f"{INBOX_FILE}.replaced-{stamp}"
            n = 1
            while aside.exists():
                n += 1
                aside = self.folder / f"{INBOX_FILE}.replaced-{stamp}-{n}"
            head = {"inbox_base": base, "replaces": aside.name if inbox.exists() else None}
            data = orjson.dumps(head) + b"\n"
            data += b"".join(encode_request(r.value, r.timestamp) + b"\n" for r in carried)
            tmp = self.folder / f"{INBOX_FILE}.tmp"
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view) :]
                    os.fsync(fd)
                finally:
                    os.close(fd)
                if inbox.exists():  # kept whole (a crash before the swap leaves both)
                    try:
                        os.link(inbox, aside)
                    except OSError:
                        shutil.copyfile(inbox, aside)
                os.replace(tmp, inbox)
            except OSError as why_not:
                raise EmbeddedError(
                    f"cannot start {inbox} again: {why_not.strerror or why_not}"
                ) from None
            _fsync_dir(self.folder)
        # it was taken at a position of the old inbox (a restart would ignore it)
        (self.folder / SNAPSHOT_FILE).unlink(missing_ok=True)
        self.core.positions[PARTITION] = base - 1
        self.reader = InboxReader(self.folder)
        if not head["replaces"] and not records:
            self._warn(
                f"there is no {inbox}: removed by hand, or {JOURNAL_FILE} copied in from "
                "elsewhere (a restore of `allot journal export`'s copy); the inbox starts at "
                f"offset {base}, after the last one the journal records"
            )
            return
        kept = f"kept it as {aside.name}" if head["replaces"] else "it is gone"
        self._warn(
            f"{inbox} is not the inbox {JOURNAL_FILE} was folded from ({why}): cut, replaced "
            f"or edited by hand; {kept}; the inbox starts again at offset {base} with the "
            f"{len(carried)} requests of it the journal does not hold "
            f"({len(records) - len(carried)} it holds are left out, not applied twice; "
            "any without an id are carried, to be rejected again)"
        )

    def _recorded_in(self, wanted: set[str], letters: set[str]) -> tuple[set[str], set[str], int]:
        """Of the request ids `wanted` and dead-letter digests `letters`, those the
        journal and the DLQ hold, and the last inbox offset they record (-1: none)."""
        refs: set[str] = set()
        found: set[str] = set()
        top = -1
        for line in read_journal_lines(self.folder):
            try:
                raw = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if not isinstance(raw, dict):
                continue
            offset = _inbox_offset(raw)
            if offset is not None and offset > top:
                top = offset
            ref = _recorded_request(raw)
            if ref is not None and ref in wanted:
                refs.add(ref)
        for letter in read_dead_letters(self.folder):
            offset = _inbox_offset(letter)
            if offset is not None and offset > top:
                top = offset
            if letters and (digest := _digest(letter.get("value"))) in letters:
                found.add(digest)
        return refs, found, top

    def _fold(self, lines: list[bytes]) -> int:
        try:
            return self.core.fold_journal(lines)
        except Exception as why:
            raise EmbeddedError(
                f"{self.folder / JOURNAL_FILE}: cannot fold the journal: {why}"
            ) from None

    # ------------------------------------------------------------ processing
    def _note_journal(self) -> None:
        """Remember which file DIR/journal.jsonl is (nothing while there is none)."""
        with contextlib.suppress(FileNotFoundError):
            st = (self.folder / JOURNAL_FILE).stat()
            self._journal_id = (st.st_dev, st.st_ino)

    def _check_journal(self) -> None:
        """Stop (JournalGone) if DIR/journal.jsonl is not the file this scheduler folded
        and appends to. Removed (the folder too) or replaced under it, the next append
        created a journal of only the records after that, and the running scheduler
        went on from its memory: the records before were lost to every reader, and a
        restart (from the snapshot it wrote there) kept them lost. Stopped before any
        write, a restart re-derives the journal from the inbox instead."""
        if self._journal_id is None:
            return
        path = self.folder / JOURNAL_FILE
        if not _names(path, self._journal_id):
            what = "replaced" if path.exists() else "removed"
            raise JournalGone(
                f"{path} was {what} while serving ({self._journal_line:,} records it held "
                "are not in it now); stopped without writing there. `allot serve --data "
                f"{self.folder}` again re-derives the journal from {INBOX_FILE} (every "
                "request it still holds), or put the journal back first"
            )

    def step(self, limit: int | None = None) -> int:
        """Fold the next batch of inbox records; returns how many were read."""
        assert self.reader is not None, "call start() first"
        if self._stopped is not None:
            raise self._stopped
        self._check_journal()  # before reading: a removed folder is not an inbox to re-base
        try:
            records = self.reader.read(limit or self.batch)
        except FileChanged as why:  # cut, replaced or removed by hand while serving
            self._rebase(f"it {why.reason} while serving")
            assert self.reader is not None
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
        self._check_journal()
        try:
            written = 0
            for upto, letter in plan:
                append_journal(self.folder, out.journal[written:upto])
                written = upto
                if letter is not None:
                    append_dead_letters(self.folder, [letter])
            append_journal(self.folder, out.journal[written:])
        except EmbeddedError as why:
            # the core has moved past records the files do not hold: deciding on from
            # it would journal decisions on inputs a restart does not see as decided
            self._stopped = EmbeddedError(
                f"{why}; the scheduler stopped: the requests from inbox offset "
                f"{records[0].offset} on wait in {INBOX_FILE}, decided once `allot serve` "
                "starts again where it can write",
                errno=why.errno,
            )
            raise self._stopped from None
        if self._journal_id is None:
            self._note_journal()  # the first records of a new journal created it
        self._journal_line += len(out.journal)
        if self.on_journal is not None and out.journal:
            self.on_journal(out.journal)
        self.processed += len(records)
        self.journaled += len(out.journal)
        self.dead_lettered += len(out.dead)
        self._unsnapshotted += len(records)
        self._maybe_snapshot()
        return len(records)

    def _maybe_snapshot(self) -> None:
        """Start a snapshot in a forked child when one is due and none is being
        written; the loop goes on meanwhile (see the module docstring)."""
        if self.snapshot_every is None or not self._unsnapshotted:
            return
        if self._snapshot_pid is not None:
            code = reaped(self._snapshot_pid)
            if code is None:
                return  # still writing the last one
            self._snapshot_pid = None
            if code != 0:
                self._snapshot_failed(child_failure(code))
        if time.monotonic() - self._last_snapshot < self.snapshot_every:
            return
        assert self.reader is not None
        lines = self.reader.lines
        journal = self.folder / JOURNAL_FILE
        snapshot = {
            "format": SNAPSHOT_FORMAT,
            "cluster": self.cluster,
            "core": self.core,
            "inbox": Mark.at(lines.path, lines.line, lines.pos),
            "inbox_ts": self.reader.last_ts,
            "journal": Mark.at(journal, self._journal_line, journal.stat().st_size),
        }
        try:
            self._snapshot_pid = fork_to_file(
                snapshot,
                self.folder / SNAPSHOT_FILE,
                fork=self.fork_snapshots,
            )
        except OSError as why:  # written here (no fork): a failed write is no failed step
            self._snapshot_failed(why.strerror or str(why))
        self._last_snapshot = time.monotonic()
        self._unsnapshotted = 0

    def _snapshot_failed(self, why: str) -> None:
        self._warn(
            f"writing {self.folder / SNAPSHOT_FILE} failed: {why} (serving goes on; "
            "a restart re-derives more of the journal)"
        )

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
