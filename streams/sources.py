"""Where read-side commands get journal records: a file, the embedded folder, or Kafka.

    for line in journal_lines(journal=Path("out/fairshare/journal.jsonl")): ...
    for line in journal_lines(data=Path("DIR"), cluster="lab"): ...
    for line in journal_lines(kafka="127.0.0.1:9092", cluster="lab"): ...

Each yields the journal's records as raw JSON bytes, oldest first:

- ``journal``: a journal file (a simulation's ``journal.jsonl``, a copy of the
  embedded journal);
- ``data``: the embedded journal ``DIR/journal.jsonl`` written by ``allot serve --data``;
- ``kafka``: topic ``allot.journal`` read from the beginning up to its end as of the
  start of the read (the last stable offset: records of unfinished transactions are
  not shown), with an aiokafka consumer that joins no group (manual assignment, no
  commits) and has bounded timeouts. Records are keyed by cluster; only ``cluster``'s
  are kept when it is given.

A last line without its newline is a write in progress (or cut short by a crash) and
is not returned. In files, ``cluster`` keeps the records whose ``cluster`` field
matches. ``follow=True`` keeps tailing after the current end (used by
``allot executor``) and never ends by itself; a missing journal file is then waited
for, as long as its folder exists. A file's records come as a `FileLines`, which knows
the line of the record last returned (a bad one is named FILE:LINE) and whether a last
line was left out.

A missing file, an empty journal, a missing topic or an unreachable broker raise
`SourceError` with one line a person can act on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import mmap
import queue
import re
import threading
import time
from array import array
from collections.abc import Callable, Coroutine, Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from streams import kafka_auth, topics
from streams.kafka_clients import unreachable

# aiokafka logs connection failures itself; SourceError reports them as one line
logging.getLogger("aiokafka").addHandler(logging.NullHandler())
log = logging.getLogger("allot.sources")

# bounded waits for the Kafka reader (seconds)
CONNECT_TIMEOUT_S = 10.0
REQUEST_TIMEOUT_MS = 10_000
# no progress towards the end offsets for this long: stop there rather than hang on a
# broker that stopped answering; 3 s gave up on a busy machine's slow fetch, and a read
# that stops early says so (`_StoppedShort`)
IDLE_TIMEOUT_S = 10.0
# what every reader says when no option names a journal
NO_JOURNAL_GIVEN = (
    "say where the journal is: --kafka HOST:PORT (or $ALLOT_KAFKA), --data DIR or --journal FILE"
)
POLL_MS = 200
FILE_POLL_S = 0.1


class SourceError(RuntimeError):
    """The journal cannot be read: one line for the user."""


class BrokerError(SourceError):
    """The broker, not the journal, is the trouble: unreachable, a refused login or ACL,
    no journal topic (a mistyped suffix). The journal itself may be fine."""


class EmptyJournal(SourceError):
    """The journal exists but holds no (complete) records of the cluster."""


def journal_lines(
    *,
    kafka: str | None = None,
    data: Path | None = None,
    journal: Path | None = None,
    cluster: str | None = None,
    follow: bool = False,
    whole: bool = False,
) -> Iterator[bytes]:
    """The journal's records as JSON bytes (one record each, no newline), oldest first.

    Exactly one of ``journal`` (a file), ``data`` (the embedded folder) and ``kafka``
    (a bootstrap ``HOST:PORT``) is read, in that order of preference. With ``whole``, a
    Kafka read that stops before the end it saw at its start raises `SourceError` (a
    backup must not pass for complete) instead of warning.
    """
    if journal is not None:
        return _file_lines(Path(journal), cluster, follow, what="journal file")
    if data is not None:
        return _file_lines(_embedded_journal(data), cluster, follow, what="embedded journal")
    if kafka:
        return _kafka_lines(kafka, cluster, follow, whole=whole)
    raise SourceError(NO_JOURNAL_GIVEN)


def last_record_time(
    *,
    kafka: str | None = None,
    data: Path | None = None,
    journal: Path | None = None,
    cluster: str | None = None,
    search_back: bool = False,
) -> float | None:
    """The `time` of the journal's last complete record, read from its end, or None (no
    such file, another cluster's record last, no time; in Kafka, none of `cluster`'s
    among the last records of each partition): lets a fold know ahead which records its
    last usage bucket holds (`projections.views`), so a forecast need not read the
    journal twice. A guess that the journal outgrows is harmless (the fold notices).

    With `search_back`, a journal other clusters share is searched back to its start for
    `cluster`'s last record: None then means the cluster has none (`allot history`
    counts from that time, and must not take another cluster's writing for an empty
    journal)."""
    if kafka is not None:
        return _kafka_last_time(kafka, cluster, search_back)
    if journal is not None:
        path = Path(journal)
    elif data is not None:
        path = Path(data) / "journal.jsonl"
    else:
        return None
    try:
        with path.open("rb") as f:
            size = f.seek(0, 2)
            f.seek(max(0, size - _END_BYTES))
            block = f.read()
    except OSError:
        return None
    complete = block[: block.rfind(b"\n") + 1].splitlines()
    for line in reversed(complete[1:] if len(block) == _END_BYTES else complete):
        if not line.strip():
            continue
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(record, dict):
            return None
        if not _matches(line, cluster):
            return _file_last_time_of(path, cluster) if search_back else None
        return _time_of(record)
    return None


def _time_of(record: dict[str, Any]) -> float | None:
    time = record.get("time")
    ok = isinstance(time, int | float) and not isinstance(time, bool)
    return float(time) if ok else None


def _file_last_time_of(path: Path, cluster: str | None) -> float | None:
    """The time of `cluster`'s last complete record in a journal file others share, read
    backwards from its end; a line is decoded only if its bytes may be the cluster's."""
    maybe = _may_be_of(cluster)
    try:
        with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as text:
            end = text.rfind(b"\n") + 1
            while end > 0:
                start = text.rfind(b"\n", 0, end - 1) + 1
                line = text[start:end]
                end = start
                if not maybe(line):
                    continue
                with contextlib.suppress(orjson.JSONDecodeError):
                    record = orjson.loads(line)
                    if isinstance(record, dict) and _matches(line, cluster):
                        return _time_of(record)
    except (OSError, ValueError):  # ValueError: mmap of an empty file
        return None
    return None


def _may_be_of(cluster: str | None) -> Callable[[bytes], bool]:
    """A byte test no record of `cluster` fails (`default`'s may omit the field)."""
    if cluster is None:
        return lambda line: True
    named = orjson.dumps(cluster)
    if cluster == "default":
        return lambda line: named in line or b'"cluster"' not in line
    return lambda line: named in line


_END_BYTES = 1 << 16  # a journal record is far smaller (an input is at most 1 MB, rarely)

# how long before the time in a workload's id (a ULID) the Kafka search for its records
# starts: the submitting host's clock may run ahead of the scheduler's
ID_CLOCK_SLACK_S = 600.0
_ULID = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}")
_CROCKFORD = {c: i for i, c in enumerate("0123456789ABCDEFGHJKMNPQRSTVWXYZ")}


def ulid_time(wid: str) -> float | None:
    """The creation time (seconds) in an id that starts with a ULID (as `allot submit`
    makes them, `ULID` or `ULID_N`), else None."""
    if not _ULID.match(wid):
        return None
    ms = 0
    for c in wid[:10]:
        ms = ms * 32 + _CROCKFORD[c]
    return ms / 1000


def records_naming(
    ids: Iterable[str],
    *,
    kafka: str | None = None,
    data: Path | None = None,
    journal: Path | None = None,
    cluster: str | None = None,
) -> list[dict[str, Any]]:
    """The journal's records whose `workload` is one of `ids` or a task of one
    (`ID_<n>`, a job array's), oldest first, as dicts.

    Found by a byte search, decoding only the lines that name them: far cheaper than
    folding the journal (a request command asks it whether an id is a job array's
    base, or which attempt a workload runs). In Kafka the search starts
    ID_CLOCK_SLACK_S before the oldest time in the ids (ULIDs: nothing names a
    workload before its id was made); other ids are searched for from the start.
    [] when nothing names them, or there is no journal yet (no file, no records);
    SourceError when it cannot be read (no broker, no topic)."""
    wanted = list(dict.fromkeys(ids))
    if not wanted:
        return []
    # each id as JSON writes it (quotes and backslashes escaped): whole, or `_<n>` after
    pattern = re.compile(
        rb'"(?:'
        + b"|".join(re.escape(orjson.dumps(wid)[1:-1]) for wid in wanted)
        + rb')(?:_[0-9]+)?"'
    )
    names = set(wanted)

    def about(record: Any) -> bool:
        wid = record.get("workload") if isinstance(record, dict) else None
        if not isinstance(wid, str):
            return False
        head, sep, index = wid.rpartition("_")
        return wid in names or (bool(sep) and head in names and index.isdigit())

    since = None
    if kafka is not None and journal is None and data is None:
        times = [ulid_time(wid) for wid in wanted]
        if all(t is not None for t in times):
            since = int((min(t for t in times if t is not None) - ID_CLOCK_SLACK_S) * 1000)
    return list(_found(pattern, about, kafka, data, journal, cluster, since))


def records_of_type(
    kinds: Iterable[str],
    *,
    kafka: str | None = None,
    data: Path | None = None,
    journal: Path | None = None,
    cluster: str | None = None,
) -> list[dict[str, Any]]:
    """The journal's records whose `type` is one of `kinds` (e.g. `budget.set`), oldest
    first, as dicts; found by a byte search as `records_naming` finds its records, so
    reading a few rare records (the budget tree's) costs a scan, not a fold. [] when
    there is no journal yet; SourceError when it cannot be read."""
    return list(
        iter_records_of_type(kinds, kafka=kafka, data=data, journal=journal, cluster=cluster)
    )


def iter_records_of_type(
    kinds: Iterable[str],
    *,
    kafka: str | None = None,
    data: Path | None = None,
    journal: Path | None = None,
    cluster: str | None = None,
) -> Iterator[dict[str, Any]]:
    """`records_of_type` one record at a time: a fold over many of the journal's
    records (`allot history`'s runs) holds only its own state, not them all."""
    wanted = set(kinds)
    if not wanted:
        return iter(())
    # each type as JSON writes it, closing quote included (`budget.set"`, not
    # `budget.settled"`); `input_type` of a rejection matches too and is sorted out below
    pattern = re.compile(b"|".join(re.escape(orjson.dumps(k)[1:]) for k in sorted(wanted)))

    def of_kind(record: Any) -> bool:
        return isinstance(record, dict) and record.get("type") in wanted

    return _found(pattern, of_kind, kafka, data, journal, cluster)


def _found(
    pattern: re.Pattern[bytes],
    keep: Callable[[Any], bool],
    kafka: str | None,
    data: Path | None,
    journal: Path | None,
    cluster: str | None,
    since_ms: int | None = None,
) -> Iterator[dict[str, Any]]:
    """The records (dicts) of lines `pattern` finds that `keep` accepts, oldest first,
    one at a time: only those lines are decoded. Kafka (when no file is named) from
    `since_ms` on."""
    if kafka is not None and journal is None and data is None:
        try:
            for line in _kafka_lines(kafka, cluster, False, since_ms=since_ms):
                if pattern.search(line):
                    record = orjson.loads(line)
                    if keep(record):
                        yield record
        except EmptyJournal:
            return
        return
    path = Path(journal) if journal is not None else _embedded_journal(Path(data or "."))
    try:
        with path.open("rb") as f:
            size = f.seek(0, 2)
            if not size:
                return
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as text:
                end = text.rfind(b"\n") + 1  # a last line without its newline: not a record
                done = -1
                for m in pattern.finditer(text, 0, end):
                    if m.start() < done:
                        continue  # the line holding it was read already
                    start = text.rfind(b"\n", 0, m.start()) + 1
                    done = text.find(b"\n", m.end()) + 1
                    line = text[start:done]
                    with contextlib.suppress(orjson.JSONDecodeError):
                        record = orjson.loads(line)
                        if keep(record) and _matches(line, cluster):
                            yield record
    except FileNotFoundError:
        return


# ------------------------------------------------------------------ files


def _embedded_journal(data: Path) -> Path:
    folder = Path(data)
    if not folder.is_dir():
        raise SourceError(
            f"{folder}: no such folder; start the embedded scheduler with "
            f"`allot serve --data {folder}` or point --data at its folder"
        )
    return folder / "journal.jsonl"


def _matches(line: bytes, cluster: str | None) -> bool:
    if cluster is None:
        return True
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        return True  # let the decoder name the bad line
    return not isinstance(record, dict) or record.get("cluster", "default") == cluster


class FileLines:
    """A journal file's records, as `journal_lines` returns them, that know where they
    are: a decoder names a bad record by `place` (FILE:LINE, as `allot replay` does), and
    a command can say that the read left out a last line cut short (`cut`)."""

    def __init__(self, path: Path, read: Callable[[FileLines], Iterator[bytes]]) -> None:
        self.path = path
        self.line = 0  # line number of the record last returned
        self.cut = False  # the read stopped at a last line without its newline
        self._records = read(self)  # a generator: it reads from the first record asked for

    def __iter__(self) -> FileLines:
        return self

    def __next__(self) -> bytes:
        return next(self._records)

    @property
    def place(self) -> str:
        return f"{self.path}:{self.line}"


def _file_lines(path: Path, cluster: str | None, follow: bool, *, what: str) -> FileLines:
    if not follow:
        _require_file(path, what)
        return FileLines(path, lambda at: _read_file(at, cluster, what))
    if not path.parent.is_dir():
        raise SourceError(f"{path.parent}: no such folder")
    return FileLines(path, lambda at: _tail_file(at, cluster))


def _require_file(path: Path, what: str) -> None:
    if not path.is_file():
        if path.exists():
            raise SourceError(f"{path}: not a file; --journal wants a journal.jsonl file")
        raise SourceError(f"{path}: no such {what}")


def is_inbox_record(record: Any) -> bool:
    """Is `record` (a decoded line) an embedded inbox's request, `{"ts": ..., "value":
    "<request text>"}`, or the header `{"inbox_base": N}` of an inbox started again
    (`streams.embedded`), rather than a journal record?"""
    return (
        isinstance(record, dict)
        and "type" not in record
        and (
            ("ts" in record and ("value" in record or "value_b64" in record))
            or "inbox_base" in record
        )
    )


def inbox_not_journal(path: Path) -> str:
    """What to say when `path`, an embedded folder's inbox, is read as a journal."""
    journal = path.parent / "journal.jsonl"
    return (
        f"{path} is an embedded inbox (requests not yet scheduled), not a journal; the "
        f"scheduler's journal is {journal}: --journal {journal}, or --data {path.parent}"
    )


def _read_file(at: FileLines, cluster: str | None, what: str) -> Iterator[bytes]:
    path = at.path
    found = 0
    seen: set[str] = set()
    first = True
    with path.open("rb") as f:
        for number, line in enumerate(f, start=1):
            if not line.endswith(b"\n"):
                at.cut = bool(line.strip())
                break  # a write in progress or cut short: not a record yet
            at.line = number
            line = line.strip()
            if not line:
                continue
            if first:  # an inbox's records carry no type: it would read as empty
                first = False
                with contextlib.suppress(orjson.JSONDecodeError):
                    if is_inbox_record(orjson.loads(line)):
                        raise SourceError(inbox_not_journal(path))
            if _matches(line, cluster):
                found += 1
                yield line
            elif len(seen) < 10:
                with contextlib.suppress(Exception):
                    seen.add(str(orjson.loads(line).get("cluster")))
    if not found:
        raise _no_records(path, cluster, what, seen)


def _no_records(path: Path, cluster: str | None, what: str, seen: set[str]) -> EmptyJournal:
    if seen:
        others = ", ".join(sorted(seen))
        return EmptyJournal(
            f"{path}: no records of cluster {cluster!r} (it holds: {others}); "
            "pick one with --cluster"
        )
    if path.name == "inbox.jsonl" and (path.parent / "journal.jsonl").is_file():
        return EmptyJournal(inbox_not_journal(path))
    return EmptyJournal(f"{path}: the {what} is empty (no complete records yet)")


def _tail_file(at: FileLines, cluster: str | None) -> Iterator[bytes]:
    """Complete lines as they are appended, forever (the file may not exist yet)."""
    path = at.path
    while not path.exists():
        time.sleep(FILE_POLL_S)
    with path.open("rb") as f:
        pos = 0  # start of the first line not yet returned
        while True:
            f.seek(pos)
            line = f.readline()
            if not line.endswith(b"\n"):
                # nothing new, or a line still being written: read it again from its
                # start later (the embedded writer truncates a cut-short line first)
                time.sleep(FILE_POLL_S)
                continue
            pos += len(line)
            at.line += 1
            line = line.strip()
            if line and _matches(line, cluster):
                yield line


# ------------------------------------------------------------------ kafka

_END = object()


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


def _on_own_thread(
    consume: Callable[[Callable[[Any], None], threading.Event], Coroutine[Any, Any, None]],
    bootstrap: str,
    *,
    name: str,
    depth: int,
) -> Iterator[Any]:
    """Run `consume(put, stop)` (an aiokafka reader) on its own thread and event loop
    (callers are plain synchronous code, possibly inside another loop) and yield what it
    puts, through a bounded queue; its failure is raised here as one SourceError line."""
    out: queue.Queue[Any] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: Any) -> None:
        while not stop.is_set():
            try:
                out.put(item, timeout=0.2)
                return
            except queue.Full:
                continue

    def run() -> None:
        try:
            asyncio.run(consume(put, stop))
        except BaseException as exc:
            put(_Failure(exc))
        else:
            put(_END)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    try:
        while True:
            item = out.get()
            if item is _END:
                return
            if isinstance(item, _Failure):
                raise _as_source_error(item.error, bootstrap)
            yield item
    finally:
        stop.set()
        thread.join(timeout=5)


def _kafka_lines(
    bootstrap: str,
    cluster: str | None,
    follow: bool,
    since_ms: int | None = None,
    *,
    whole: bool = False,
) -> Iterator[bytes]:
    """The journal topic's lines of `cluster` (all when None), read on a thread of
    their own; with `follow`, forever; with `since_ms`, only from each partition's
    first record stamped (by its producer) at or after that time."""
    found = 0
    others: list[str] = []
    for batch in _on_own_thread(
        lambda put, stop: _consume(bootstrap, cluster, follow, put, stop, since_ms),
        bootstrap,
        name="allot-journal-reader",
        depth=64,
    ):
        if isinstance(batch, _OtherClusters):
            others = batch
            continue
        if isinstance(batch, _StoppedShort):
            if whole:
                raise SourceError(batch.removeprefix("warning: "))
            log.warning("%s", batch)
            continue
        for line in batch:
            found += 1
            yield line
    if not found and not follow:
        raise _no_kafka_records(bootstrap, cluster, others)


class _OtherClusters(list):
    """The reader's last word when no record was `cluster`'s: the clusters it saw."""


class _StoppedShort(str):
    """The reader's word that it stopped before the end offsets it saw at the start."""


async def _stopped_short(consumer: Any, remaining: Any, ends: dict[Any, int]) -> _StoppedShort:
    where = []
    for tp in sorted(remaining, key=lambda tp: tp.partition):
        with contextlib.suppress(Exception):
            where.append(
                f"partition {tp.partition} at offset {await consumer.position(tp)} of {ends[tp]}"
            )
    return _StoppedShort(
        f"warning: stopped reading {topics.JOURNAL} ({', '.join(where)}): nothing came for "
        f"{IDLE_TIMEOUT_S:g} s (a slow or overloaded broker?); the answer is as of the last "
        "record read"
    )


def _no_kafka_records(
    bootstrap: str, cluster: str | None, others: list[str] | None = None
) -> EmptyJournal:
    which = f"of cluster {cluster!r} " if cluster else ""
    if others:
        return EmptyJournal(
            f"the journal (topic {topics.JOURNAL} on {bootstrap}) has no records {which}"
            f"(it holds: {', '.join(others)}); pick one with --cluster or $ALLOT_CLUSTER"
        )
    return EmptyJournal(
        f"the journal (topic {topics.JOURNAL} on {bootstrap}) has no records {which}yet; "
        "is the scheduler running for this cluster (allot serve --kafka, --cluster)?"
    )


def _as_source_error(error: BaseException, bootstrap: str) -> SourceError:
    if isinstance(error, SourceError):
        return error
    if isinstance(error, asyncio.TimeoutError | TimeoutError):
        return BrokerError(unreachable(bootstrap, f"no answer in {CONNECT_TIMEOUT_S:g}s"))
    reason = kafka_auth.describe_error(error)
    if reason is not None:
        return BrokerError(f"Kafka at {bootstrap}: {reason}")
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return BrokerError(f"cannot read the journal from Kafka at {bootstrap}: {text}")


async def _open_journal(bootstrap: str, *, reset: str, client_id: str) -> tuple[Any, list[int]]:
    """A started read_committed consumer (logged in as `kafka_auth` says) and the journal
    topic's partitions; every failure is one SourceError line (unreachable, login or ACL
    refused, no journal topic)."""
    from aiokafka import AIOKafkaConsumer
    from aiokafka.errors import KafkaError

    try:
        options = kafka_auth.client_options()
    except kafka_auth.KafkaAuthError as why:
        raise BrokerError(str(why)) from None
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset=reset,
        isolation_level="read_committed",
        request_timeout_ms=REQUEST_TIMEOUT_MS,
        client_id=client_id,
        **options,
    )
    try:
        await asyncio.wait_for(consumer.start(), CONNECT_TIMEOUT_S)
    except (KafkaError, OSError, TimeoutError) as exc:
        with contextlib.suppress(Exception):
            await consumer.stop()
        reason = kafka_auth.describe_error(exc)
        if reason is None and "Unable to bootstrap" in str(exc):
            reason = await kafka_auth.diagnose(bootstrap, options)
        if reason is not None:
            raise BrokerError(f"Kafka at {bootstrap}: {reason}") from None
        raise BrokerError(unreachable(bootstrap, exc)) from None
    try:
        # the public `topics()` does not keep the partitions it saw; ask the client once
        metadata = await asyncio.wait_for(consumer._client.fetch_all_metadata(), CONNECT_TIMEOUT_S)
        parts = sorted(metadata.partitions_for_topic(topics.JOURNAL) or ())
        if topics.JOURNAL not in metadata.topics() or not parts:
            if await kafka_auth.topic_denied(consumer._client, topics.JOURNAL):
                who = options.get("sasl_plain_username")
                raise BrokerError(
                    f"Kafka at {bootstrap}: not authorized"
                    f"{f' as {who!r}' if who else ''} to read {topics.JOURNAL} (ACLs); "
                    "use a principal that may read the journal (e.g. allot-reader)"
                )
            raise BrokerError(
                f"{topics.missing([topics.JOURNAL], bootstrap)}; {topics.NEW_DEPLOYMENT}"
            )
    except BaseException:
        with contextlib.suppress(Exception):
            await consumer.stop()
        raise
    return consumer, parts


async def _consume(
    bootstrap: str,
    cluster: str | None,
    follow: bool,
    put: Any,
    stop: threading.Event,
    since_ms: int | None = None,
) -> None:
    from aiokafka import TopicPartition

    consumer, parts = await _open_journal(bootstrap, reset="earliest", client_id="allot-reader")
    try:
        tps = [TopicPartition(topics.JOURNAL, p) for p in parts]
        consumer.assign(tps)
        await asyncio.wait_for(consumer.seek_to_beginning(*tps), CONNECT_TIMEOUT_S)
        ends = await asyncio.wait_for(consumer.end_offsets(tps), CONNECT_TIMEOUT_S)
        key = cluster.encode() if cluster is not None else None
        remaining = {tp for tp in tps if ends.get(tp, 0) > 0}
        if since_ms is not None and remaining:
            starts = await asyncio.wait_for(
                consumer.offsets_for_times(dict.fromkeys(remaining, max(0, since_ms))),
                CONNECT_TIMEOUT_S,
            )
            for tp in list(remaining):
                at = starts.get(tp)
                if at is None or at.offset >= ends[tp]:  # nothing that recent
                    remaining.discard(tp)
                else:
                    consumer.seek(tp, at.offset)
        found = False
        others: set[bytes] = set()  # other clusters' keys: named if none is `cluster`'s
        # until the end offsets seen at the start (then, when following, forever)
        last_progress = time.monotonic()
        while not stop.is_set():
            if not follow and (
                not remaining
                or time.monotonic() - last_progress > IDLE_TIMEOUT_S  # the broker stalls
            ):
                if remaining:
                    put(await _stopped_short(consumer, remaining, ends))
                if not found and others:
                    put(_OtherClusters(sorted(k.decode(errors="replace") for k in others)))
                return
            batches = await consumer.getmany(timeout_ms=POLL_MS, max_records=5000)
            lines: list[bytes] = []
            for tp in sorted(batches, key=lambda tp: tp.partition):
                for record in batches[tp]:
                    if _keep(record.key, record.value, key, cluster):
                        lines.append(record.value)
                    elif record.key is not None and len(others) < 10:
                        others.add(record.key)
            if lines:
                found = True
                put(lines)
            if batches:
                last_progress = time.monotonic()
            for tp in list(remaining):
                if await consumer.position(tp) >= ends[tp]:
                    remaining.discard(tp)
    finally:
        with contextlib.suppress(Exception):
            await consumer.stop()


_END_RECORDS = 512  # how far back from each partition's end `_kafka_last_time` looks


def _kafka_last_time(bootstrap: str, cluster: str | None, search_back: bool) -> float | None:
    found: list[bytes] = []
    for value in _on_own_thread(
        lambda put, stop: _last_values(bootstrap, cluster, put, stop, search_back),
        bootstrap,
        name="allot-journal-end",
        depth=64,
    ):
        found.append(value)
    times = []
    for value in found:
        try:
            record = orjson.loads(value)
        except orjson.JSONDecodeError:
            return None
        t = record.get("time") if isinstance(record, dict) else None
        if not isinstance(t, int | float) or isinstance(t, bool):
            return None
        times.append(float(t))
    return max(times, default=None)


async def _last_values(
    bootstrap: str, cluster: str | None, put: Any, stop: threading.Event, search_back: bool
) -> None:
    """Puts the value of the last of `cluster`'s records among the last `_END_RECORDS`
    of each journal partition (committed ones, up to the end offsets seen at the start).
    With `search_back`, a partition without one there is read further back, eight times
    as far each time, until one is found or its start is read."""
    from aiokafka import TopicPartition

    consumer, parts = await _open_journal(bootstrap, reset="earliest", client_id="allot-reader")
    try:
        tps = [TopicPartition(topics.JOURNAL, p) for p in parts]
        consumer.assign(tps)
        ends = await asyncio.wait_for(consumer.end_offsets(tps), CONNECT_TIMEOUT_S)
        starts = await asyncio.wait_for(consumer.beginning_offsets(tps), CONNECT_TIMEOUT_S)
        key = cluster.encode() if cluster is not None else None
        last: dict[Any, bytes] = {}
        back = _END_RECORDS
        unread = {tp: ends[tp] for tp in tps if ends[tp] > starts[tp]}  # tp: first offset read
        while unread and not stop.is_set():
            froms = {tp: max(starts[tp], ends[tp] - back) for tp in unread}
            found = await _last_kept(consumer, froms, unread, key, cluster, stop)
            last.update(found)
            if not search_back:
                break
            unread = {tp: froms[tp] for tp in unread if tp not in found and froms[tp] > starts[tp]}
            back *= 8
        for value in last.values():
            put(value)
    finally:
        with contextlib.suppress(Exception):
            await consumer.stop()


async def _last_kept(
    consumer: Any,
    froms: dict[Any, int],
    ends: dict[Any, int],
    key: bytes | None,
    cluster: str | None,
    stop: threading.Event,
) -> dict[Any, bytes]:
    """The value of the last of `cluster`'s records in [froms[tp], ends[tp]) of each
    partition, for those that have one."""
    for tp, offset in froms.items():
        consumer.seek(tp, offset)
    remaining = set(froms)
    last: dict[Any, bytes] = {}
    progress = time.monotonic()
    while remaining and not stop.is_set():
        if time.monotonic() - progress > IDLE_TIMEOUT_S:
            break  # e.g. an unfinished transaction holds the rest back
        batches = await consumer.getmany(*remaining, timeout_ms=POLL_MS, max_records=5000)
        for tp, records in batches.items():
            for record in records:
                if record.offset < ends[tp] and _keep(record.key, record.value, key, cluster):
                    last[tp] = record.value  # type: ignore[assignment]
        if batches:
            progress = time.monotonic()
        for tp in list(remaining):
            if await consumer.position(tp) >= ends[tp]:
                remaining.discard(tp)
    return last


def _keep(key: bytes | None, value: bytes | None, want: bytes | None, cluster: str | None) -> bool:
    if value is None:
        return False
    if want is None:
        return True
    if key is not None:
        return key == want
    return _matches(value, cluster)


# ------------------------------------------------------------------ kafka, resumable


class JournalChanged(SourceError):
    """The journal topic no longer holds the record a saved position points at."""


def kafka_batches(
    bootstrap: str,
    cluster: str | None,
    after: dict[int, tuple[int, str | None]] | None = None,
) -> Iterator[tuple[list[bytes], dict[int, tuple[int, str | None]]]]:
    """The journal topic's records after saved positions, in batches, up to the end
    offsets as of the start of the read (read-committed, like `journal_lines`).

    `after` maps a partition to `(offset, id)` of the last record already read there
    (any cluster's); partitions it does not name are read from their beginning. Each
    batch is `(lines, positions)`: the records of `cluster` (all when None), oldest
    first per partition, and the positions after it in the same form, to save with
    what was done with the lines. The record at a saved offset must still carry the
    saved id, else `JournalChanged` (the topic was recreated: another journal). A read
    that stops before those end offsets (nothing came for `IDLE_TIMEOUT_S`) says so, as
    `journal_lines` does; its positions are those of what it read."""
    for item in _on_own_thread(
        lambda put, stop: _consume_after(bootstrap, cluster, dict(after or {}), put, stop),
        bootstrap,
        name="allot-journal-resume",
        depth=16,
    ):
        if isinstance(item, _StoppedShort):
            log.warning("%s", item)
            continue
        yield item


def _record_id(value: bytes | None) -> str | None:
    if value is None:
        return None
    try:
        record = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    rid = record.get("id") if isinstance(record, dict) else None
    return rid if isinstance(rid, str) else None


async def _consume_after(
    bootstrap: str,
    cluster: str | None,
    after: dict[int, tuple[int, str | None]],
    put: Any,
    stop: threading.Event,
) -> None:
    # a saved offset that is gone is an error, not a reset
    consumer, parts = await _open_journal(bootstrap, reset="none", client_id="allot-usage")
    try:
        await _read_after(consumer, parts, bootstrap, cluster, after, put, stop)
    finally:
        with contextlib.suppress(Exception):
            await consumer.stop()


async def _read_after(
    consumer: Any,
    parts: list[int],
    bootstrap: str,
    cluster: str | None,
    after: dict[int, tuple[int, str | None]],
    put: Any,
    stop: threading.Event,
) -> None:
    """`_consume_after`'s read on a started consumer (a new one, or one kept between
    reads): seeks every partition, so what it read before does not matter."""
    from aiokafka import TopicPartition

    tps = {p: TopicPartition(topics.JOURNAL, p) for p in parts}
    gone = sorted(set(after) - set(tps))
    if gone:
        raise JournalChanged(
            f"topic {topics.JOURNAL} on {bootstrap} has no partition {gone[0]} any more "
            "(recreated?): this is another journal"
        )
    consumer.assign(list(tps.values()))
    starts = await asyncio.wait_for(
        consumer.beginning_offsets(list(tps.values())), CONNECT_TIMEOUT_S
    )
    ends = await asyncio.wait_for(consumer.end_offsets(list(tps.values())), CONNECT_TIMEOUT_S)
    positions = dict(after)
    check: dict[int, tuple[int, str | None]] = {}  # the saved record, to read again
    for p, tp in tps.items():
        if p in after:
            offset, rid = after[p]
            if not starts[tp] <= offset < ends[tp]:
                held = (
                    f"holds offsets {starts[tp]}..{ends[tp] - 1}"
                    if starts[tp] < ends[tp]
                    else "is empty"
                )
                raise JournalChanged(
                    f"topic {topics.JOURNAL} on {bootstrap} partition {p} {held}, not the "
                    f"saved {offset} (recreated?): this is another journal"
                )
            consumer.seek(tp, offset)
            check[p] = (offset, rid)
        else:
            consumer.seek(tp, starts[tp])
    key = cluster.encode() if cluster is not None else None
    # a saved partition is read at least up to its saved record (to check it)
    remaining = {p for p, tp in tps.items() if p in after or starts[tp] < ends[tp]}
    last_progress = time.monotonic()
    while not stop.is_set() and remaining:
        if time.monotonic() - last_progress > IDLE_TIMEOUT_S:
            # e.g. an unfinished transaction holds the rest back, or the broker stalls
            put(await _stopped_short(consumer, {tps[p] for p in remaining}, ends))
            return
        batches = await consumer.getmany(timeout_ms=POLL_MS, max_records=5000)
        lines: list[bytes] = []
        for tp in sorted(batches, key=lambda tp: tp.partition):
            p = tp.partition
            for record in batches[tp]:
                if p in check:
                    offset, rid = check.pop(p)
                    if record.offset != offset or _record_id(record.value) != rid:
                        raise JournalChanged(
                            f"topic {topics.JOURNAL} on {bootstrap} partition {p}: the "
                            f"record at offset {offset} is not the one read last time "
                            "(recreated?): this is another journal"
                        )
                    continue  # read before: only its position was needed
                positions[p] = (record.offset, _record_id(record.value))
                if _keep(record.key, record.value, key, cluster):
                    lines.append(record.value)
        if batches:
            last_progress = time.monotonic()
            put((lines, dict(positions)))
        for p in list(remaining):
            if await consumer.position(tps[p]) >= ends[tps[p]]:
                remaining.discard(p)


# ------------------------------------------------------------------ tails
# A reader that keeps its place: `read()` returns the records appended since the last
# `advance(mark)` and the mark to advance to once the caller has used them, so a caller
# that fails on them reads the same records again. A journal rewritten or cut short
# before the mark raises `JournalChanged` (read it again from the start). Used where a
# long-running reader refreshes often (`allot dashboard`, the local launcher), so a
# refresh costs what was appended, not the whole history. `close()` when done: a Kafka
# tail keeps its consumer between reads.


class PlacedLines(list):  # type: ignore[type-arg]
    """A piece of a journal file's records (`FileTail.read`) that names each one as a
    `FileLines` does, by FILE:LINE (`place_of`): a decoder's error says where to look."""

    def __init__(self, path: Path, first: int) -> None:
        super().__init__()
        self.path = path
        self.first = first  # the number of this piece's first record in the journal
        self.numbers = array("q")  # the line of each record

    def place_of(self, number: int) -> str:
        """Where record `number` (of the journal, counted from 1) is."""
        return f"{self.path}:{self.numbers[number - self.first]}"


class FileTail:
    """The complete records of a journal file (of `cluster`, if given), a piece at a time."""

    def __init__(self, path: Path, cluster: str | None = None, what: str = "journal file"):
        self.path = Path(path)
        self.cluster = cluster
        self.what = what
        self.offset = 0  # bytes read, up to the end of the last complete line
        self.last_line = b""  # that line (without its newline): to notice a rewrite
        self.first_line = b""  # the file's first line, for the same reason
        self.count = 0  # records of `cluster` returned so far
        self.line = 0  # lines read so far (blank ones and other clusters' included)

    def read(self) -> tuple[PlacedLines, Any]:
        _require_file(self.path, self.what)
        lines = PlacedLines(self.path, self.count + 1)
        seen: set[str] = set()
        offset, first, last, number = self.offset, self.first_line, self.last_line, self.line
        with self.path.open("rb") as f:
            if offset:
                # the first and the last line read must still be where they were
                tail = last + b"\n"
                if f.readline() != first:
                    raise JournalChanged(f"{self.path} was rewritten")
                f.seek(offset - len(tail))
                if f.read(len(tail)) != tail:
                    raise JournalChanged(f"{self.path} was cut short or rewritten")
            for line in f:
                if not line.endswith(b"\n"):
                    break  # a write in progress or cut short: not a record yet
                if not offset:
                    first = line
                offset += len(line)
                number += 1
                last = line[:-1]
                body = line.strip()
                if not body:
                    continue
                if _matches(body, self.cluster):
                    lines.append(body)
                    lines.numbers.append(number)
                elif len(seen) < 10 and not self.count:
                    with contextlib.suppress(Exception):
                        seen.add(str(orjson.loads(body).get("cluster")))
        if not self.count and not lines:
            raise _no_records(self.path, self.cluster, self.what, seen)
        return lines, (offset, first, last, self.count + len(lines), number)

    def advance(self, mark: Any) -> None:
        self.offset, self.first_line, self.last_line, self.count, self.line = mark

    def close(self) -> None:
        """Nothing held between reads (the file is opened by each)."""


class _KeptLoop:
    """An event loop on a daemon thread of its own, for a client kept between the calls
    of plain synchronous code (which may itself run inside another loop)."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result()
        except (KeyboardInterrupt, SystemExit):
            future.cancel()  # Ctrl-C while waiting stops the work on the thread too
            raise

    def close(self) -> None:
        async def cancel_the_rest() -> None:  # e.g. a read cut short by Ctrl-C
            rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in rest:
                task.cancel()
            await asyncio.gather(*rest, return_exceptions=True)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(cancel_the_rest(), self.loop).result(timeout=5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        if not self.thread.is_alive():
            self.loop.close()


class KafkaTail:
    """The journal topic's records of `cluster` (all when None), a piece at a time:
    each read goes up to the end offsets as of its start (read-committed).

    One consumer is kept from the first read to `close()` (on a thread of its own), so a
    poller (the local launcher reads twice a second) does not connect, log in and fetch
    metadata again for each read. A read that fails drops it; the next opens another
    (a broker back, a topic recreated: the partitions are looked up again)."""

    def __init__(self, bootstrap: str, cluster: str | None = None):
        self.bootstrap = bootstrap
        self.cluster = cluster
        self.positions: dict[int, tuple[int, str | None]] = {}
        self.count = 0
        self._none_yet: EmptyJournal | None = None  # said while the cluster has no record
        self._loop: _KeptLoop | None = None
        self._consumer: Any = None
        self._parts: list[int] = []
        self.opened = 0  # consumers started, for the curious (one while reads succeed)

    def read(self) -> tuple[list[bytes], Any]:
        lines: list[bytes] = []
        positions = self.positions
        for batch, after in self._batches():
            lines.extend(batch)
            positions = after
        if not self.count and not lines:
            # none of the cluster's: the next read goes on after what was read (a poller
            # waiting for a new cluster's first record read the whole topic each time)
            self.positions = positions
            if self._none_yet is None:
                self._none_yet = self._no_records()
            raise self._none_yet
        return lines, (positions, self.count + len(lines))

    def _batches(self) -> list[tuple[list[bytes], dict[int, tuple[int, str | None]]]]:
        """What `kafka_batches` yields, read with the kept consumer."""
        if self._loop is None:
            self._loop = _KeptLoop("allot-journal-tail")
        items: list[Any] = []
        try:
            self._loop.run(self._read_kept(items.append))
        except (KeyboardInterrupt, SystemExit):
            raise  # a poller's Ctrl-C, not a broker's failure (that would be retried)
        except BaseException as why:
            self._drop_consumer()
            raise _as_source_error(why, self.bootstrap) from None
        for item in items:
            if isinstance(item, _StoppedShort):
                log.warning("%s", item)
        return [item for item in items if not isinstance(item, _StoppedShort)]

    async def _read_kept(self, put: Callable[[Any], None]) -> None:
        if self._consumer is None:
            self._consumer, self._parts = await _open_journal(
                self.bootstrap, reset="none", client_id="allot-journal-tail"
            )
            self.opened += 1
        await _read_after(
            self._consumer,
            self._parts,
            self.bootstrap,
            self.cluster,
            dict(self.positions),
            put,
            threading.Event(),
        )

    def _drop_consumer(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None and self._loop is not None:
            with contextlib.suppress(Exception):
                self._loop.run(consumer.stop())

    def close(self) -> None:
        """Stop the consumer and its thread (a later read starts them again)."""
        self._drop_consumer()
        if self._loop is not None:
            self._loop.close()
            self._loop = None

    def _no_records(self) -> EmptyJournal:
        """Why a read found nothing, naming the clusters the topic holds (read whole)."""
        try:
            for _ in journal_lines(kafka=self.bootstrap, cluster=self.cluster):
                break  # records came in meanwhile: the next read returns them
        except EmptyJournal as why:
            return why
        return _no_kafka_records(self.bootstrap, self.cluster)

    def advance(self, mark: Any) -> None:
        self.positions, self.count = mark


class RereadTail:
    """Any source read whole each time (`lines()`), returning only what follows the
    records returned before; the last of those must still be where it was."""

    def __init__(self, lines: Callable[[], Iterable[bytes]]):
        self.lines = lines
        self.count = 0
        self.last = b""

    def read(self) -> tuple[list[bytes], Any]:
        new: list[bytes] = []
        count, last = 0, b""
        for line in self.lines():
            count += 1
            if count < self.count:
                continue
            if count == self.count:
                if line != self.last:
                    raise JournalChanged("the journal was rewritten")
                continue
            new.append(line)
            last = line
        if count < self.count:
            raise JournalChanged("the journal was cut short")
        return new, (count, last if new else self.last)

    def advance(self, mark: Any) -> None:
        self.count, self.last = mark

    def close(self) -> None:
        """Nothing held between reads."""


def journal_tail(
    *,
    kafka: str | None = None,
    data: Path | None = None,
    journal: Path | None = None,
    cluster: str | None = None,
) -> FileTail | KafkaTail:
    """A tail of the journal `journal_lines` would read (same preference and errors)."""
    if journal is not None:
        return FileTail(Path(journal), cluster, "journal file")
    if data is not None:
        return FileTail(_embedded_journal(data), cluster, "embedded journal")
    if kafka:
        return KafkaTail(kafka, cluster)
    raise SourceError(NO_JOURNAL_GIVEN)
