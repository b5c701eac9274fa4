"""Sending requests to a scheduler's inbox, and watching its journal for the outcome.

`open_inbox(target)` gives a writer for `--data DIR` (appends to DIR/inbox.jsonl) or
`--kafka HOST:PORT` (an idempotent aiokafka producer, `acks=all`, key = cluster, value
= orjson bytes, to `allot.inbox`). The Kafka writer runs synchronously (asyncio.run)
for the CLI and fails within a few seconds with `InboxError("cannot reach Kafka at
HOST:PORT: ...")` when the broker does not answer. It logs in as
`streams.kafka_auth.client_options()` says ($ALLOT_KAFKA_USER, ...); a rejected login
or an ACL denial is one line too.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import orjson

from streams import kafka_auth, topics
from streams.bootstrap import BootstrapError
from streams.bootstrap import parse_bootstrap as _parse_bootstrap
from streams.broker_watch import answers
from streams.embedded import (
    INBOX_FILE,
    JOURNAL_FILE,
    EmbeddedError,
    LineReader,
    append_requests,
    folder_lock,
)
from streams.kafka_clients import aiokafka_quiet, cancel_leftovers, quiet_stop, unreachable

# aiokafka logs connection failures itself; the CLI reports them as one line
logging.getLogger("aiokafka").addHandler(logging.NullHandler())
log = logging.getLogger("allot.inbox")

CONNECT_TIMEOUT_S = float(os.environ.get("ALLOT_KAFKA_CONNECT_TIMEOUT", "5"))
SEND_TIMEOUT_S = float(os.environ.get("ALLOT_KAFKA_SEND_TIMEOUT", "15"))
# a request sent without --wait waits for the verdict when a running worker serves its
# cluster (streams.presence: its presence group's card; KafkaInbox.send_and_wait,
# live_cluster), and the broker answers that within PRESENCE_ASK_S. When it cannot tell
# (this login may not see the groups, a worker of an earlier release), a cluster whose
# journal partition had a record this recently has a live scheduler (its ticker
# journals a clock.tick every 10 s by default)
PRESENCE_ASK_S = 3.0
LIVE_WITHIN_S = 30.0
LIVE_SCAN_RECORDS = 20_000  # ... looking back at most this far for the cluster's records
LIVE_SCAN_S = 3.0  # ... and for at most this long (else: sent without a wait)
POLL_S = 0.02

Match = Callable[[dict[str, Any]], bool]


class InboxError(Exception):
    """The request could not be sent (broker unreachable, folder unusable): one line."""


class InboxRefused(InboxError):
    """The inbox can never take the request as things stand (a folder this process may
    not write, a read-only file system): sending it again does not help."""


# what an embedded inbox answers when only a person can fix it (a full disk may free up)
_LASTING_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS, errno.EISDIR, errno.ENOTDIR})


def _inbox_error(why: EmbeddedError, also: str = "") -> InboxError:
    lasting = why.errno in _LASTING_ERRNOS
    return (InboxRefused if lasting else InboxError)(f"{why}{also}")


# ------------------------------------------------------------------ identity

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_ulid_lock = threading.Lock()
_ulid_last = (0, 0)


def new_ulid(now: float | None = None) -> str:
    """A ULID: 48 bits of milliseconds + 80 random bits as 26 Crockford base32 chars.

    Sortable by creation time, unique; within one millisecond of one process the
    random part counts up, so ids from one process sort in creation order."""
    global _ulid_last
    ms = int((time.time() if now is None else now) * 1000) & ((1 << 48) - 1)
    with _ulid_lock:
        last_ms, last_rand = _ulid_last
        if ms <= last_ms and now is None and last_rand < (1 << 80) - 1:
            ms, rand = last_ms, last_rand + 1
        else:
            rand = int.from_bytes(os.urandom(10), "big")
        _ulid_last = (ms, rand)
    value = (ms << 80) | rand
    chars = []
    for _ in range(26):
        chars.append(_CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def make_request(kind: str, *, cluster: str, actor: str, **fields: Any) -> dict[str, Any]:
    """An inbox request with the v1 envelope: a fresh `id`, `time` = now (a claim)."""
    body: dict[str, Any] = {
        "type": kind,
        "v": 1,
        "id": new_ulid(),
        "time": time.time(),
        "cluster": cluster,
        "actor": actor,
    }
    body.update({k: v for k, v in fields.items() if v is not None})
    return body


# ------------------------------------------------------------------ writers


class InboxWriter(Protocol):
    label: str

    def send(self, requests: list[dict[str, Any]]) -> None: ...

    # whether this sender may read the journal, so a wait for the verdict can see it
    def can_watch(self) -> bool: ...

    # `live_cluster` (a request sent without --wait): wait only if that cluster's
    # scheduler will answer soon, else send and return None at once
    def send_and_wait(
        self,
        requests: list[dict[str, Any]],
        match: Match,
        timeout: float,
        on_sent: Callable[[], None] | None = None,
        live_cluster: str | None = None,
    ) -> dict[str, Any] | None: ...

    def close(self) -> None: ...

    # after a `send_and_wait` that returned None: why no verdict may have come besides
    # the scheduler not answering in time (e.g. the broker went away), else None
    trouble: str | None


def encode_requests(requests: list[dict[str, Any]]) -> list[bytes]:
    """The requests' wire form; a value JSON cannot carry (an integer beyond 64 bits)
    is one line for the user, before anything is sent."""
    from streams.core import MAX_INPUT_BYTES

    try:
        encoded = [orjson.dumps(r) for r in requests]
    except TypeError as why:
        raise InboxError(f"cannot send the request: {why}") from None
    for blob in encoded:
        if len(blob) > MAX_INPUT_BYTES:
            raise InboxError(
                f"the request is {len(blob):,} bytes; the scheduler takes at most "
                f"{MAX_INPUT_BYTES:,} (shorten its tags or name)"
            )
    return encoded


class EmbeddedInbox:
    """Appends requests to DIR/inbox.jsonl; the outcome is read from DIR/journal.jsonl."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.label = str(folder)
        self.trouble: str | None = None

    def send(self, requests: list[dict[str, Any]]) -> None:
        try:
            append_requests(self.folder, encode_requests(requests))
        except EmbeddedError as why:  # all or nothing: no line of it is in the inbox
            raise _inbox_error(why, "; nothing was sent") from None

    def check(self) -> None:
        """Raise InboxRefused now if this process cannot write the folder's inbox, so a
        long-running sender (the executor) says so at its start, not at its first send."""
        try:
            with folder_lock(self.folder, shared=True):  # opens DIR/.lock for writing
                inbox = self.folder / INBOX_FILE
                if inbox.exists():
                    os.close(os.open(inbox, os.O_WRONLY | os.O_APPEND))
        except EmbeddedError as why:
            raise _inbox_error(why) from None
        except OSError as why:
            raise _inbox_error(
                EmbeddedError(f"cannot write {inbox}: {why.strerror or why}", errno=why.errno)
            ) from None

    def can_watch(self) -> bool:
        return True  # whoever may append to the folder's inbox reads its journal

    def send_and_wait(
        self,
        requests: list[dict[str, Any]],
        match: Match,
        timeout: float,
        on_sent: Callable[[], None] | None = None,
        live_cluster: str | None = None,
    ) -> dict[str, Any] | None:
        # `live_cluster` asks nothing of a folder: the caller checked its serve lock
        path = self.folder / JOURNAL_FILE
        reader = LineReader(path)
        try:
            # only records written after the request can be its outcome
            reader.pos = path.stat().st_size if path.exists() else 0
            self.send(requests)
            if on_sent is not None:
                on_sent()
            deadline = time.monotonic() + timeout
            while True:
                for line in reader.read():
                    if not line.strip():
                        continue
                    try:
                        record = orjson.loads(line)
                    except orjson.JSONDecodeError:
                        continue
                    if isinstance(record, dict) and match(record):
                        return record
                if time.monotonic() >= deadline:
                    return None
                time.sleep(POLL_S)
        finally:
            reader.close()

    def close(self) -> None:
        pass


def parse_bootstrap(text: str) -> str:
    """`HOST:PORT[,HOST:PORT...]`; a bad one is an InboxError (one line for the user)."""
    try:
        return _parse_bootstrap(text)
    except BootstrapError as why:
        raise InboxError(str(why)) from None


class KafkaInbox:
    """An idempotent producer (`acks=all`) to `allot.inbox`, key = cluster.

    One producer (on a private event loop) serves every `send` until `close`, so a
    long-running caller — the executor reporting finishes — logs in once, not per
    report. A failed send drops the producer; the next send starts a fresh one."""

    def __init__(
        self,
        bootstrap: str,
        *,
        connect_timeout: float = CONNECT_TIMEOUT_S,
        send_timeout: float = SEND_TIMEOUT_S,
    ) -> None:
        self.bootstrap = parse_bootstrap(bootstrap)
        self.label = f"kafka {self.bootstrap}"
        self.connect_timeout = connect_timeout
        self.send_timeout = send_timeout
        try:
            self.options = kafka_auth.client_options()
        except kafka_auth.KafkaAuthError as why:
            raise InboxError(str(why)) from None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._producer: Any = None
        self._topics_seen = False  # the inbox (and journal) were found on the broker
        self._journal_listed = False  # ... the journal among them (ACLs may hide it)
        self.trouble: str | None = None
        # the cluster no running worker serves, found by a send_and_wait with live_cluster
        self.unserved: str | None = None

    def _failure(self, why: BaseException) -> InboxError:
        """A login or ACL problem in one line, else "cannot reach Kafka"."""
        reason = kafka_auth.describe_error(why)
        if reason is not None:
            return InboxError(f"Kafka at {self.bootstrap}: {reason}")
        return self._unreachable(why)

    def _unreachable(self, why: object) -> InboxError:
        return InboxError(unreachable(self.bootstrap, why))

    def send(self, requests: list[dict[str, Any]]) -> None:
        self._run(self._send(requests, watch=False))

    def send_and_wait(
        self,
        requests: list[dict[str, Any]],
        match: Match,
        timeout: float,
        on_sent: Callable[[], None] | None = None,
        live_cluster: str | None = None,
    ) -> dict[str, Any] | None:
        """Send, then wait up to `timeout` for the journal record `match` accepts.

        A failure before the broker acknowledged the send is an InboxError (nothing, or
        nothing known, was sent). Once it is acknowledged `on_sent` runs (the caller
        says the request is out), and from then on nothing raises: a broker that goes
        away during the wait is a wait without a verdict (None), with `trouble` saying
        so.

        With `live_cluster` (a request sent without --wait) it waits only when a verdict
        will come soon: this login may read the journal (a submitter's may not) and a
        running worker serves the cluster (`_watch_if_live`). Otherwise it sends and
        returns None at once, with no error and no delay, as `send` does; `unserved`
        names the cluster when the broker said no worker serves it."""
        self.trouble = self.unserved = None
        consumer = self._run(self._send(requests, watch=True, live_cluster=live_cluster))
        assert self._loop is not None
        waiting = None
        try:
            if on_sent is not None:
                on_sent()
            if consumer is None:  # live_cluster: no verdict to wait for
                return None
            waiting = self._loop.create_task(self._wait(consumer, match, timeout))
            try:
                found = self._loop.run_until_complete(waiting)
            except Exception as why:  # the request is out: no traceback, no error exit
                found = None
                reason = kafka_auth.describe_error(why) or str(why) or type(why).__name__
                self.trouble = f"reading {topics.JOURNAL} failed: {reason}"
            gone = found is None and self.trouble is None
            if gone and not self._loop.run_until_complete(answers(self.bootstrap, self.options)):
                self.trouble = f"Kafka at {self.bootstrap} stopped answering during the wait"
            return found
        finally:
            if waiting is not None and not waiting.done():
                # Ctrl-C stopped the loop mid-wait: end the wait before its consumer, or
                # the stopped consumer's error is printed as a task nobody retrieved
                waiting.cancel()
                self._loop.run_until_complete(asyncio.gather(waiting, return_exceptions=True))
            if consumer is not None:
                self._loop.run_until_complete(quiet_stop(consumer))

    def can_watch(self) -> bool:
        """Whether the broker shows this principal the journal topic: one that may only
        write the inbox (`allot-submit`) cannot wait for a verdict. Unreachable: an
        InboxError, as a send would raise."""
        return bool(self._run(self._journal_visible()))

    async def _journal_visible(self) -> bool:
        return topics.JOURNAL in await self._topics_shown()

    async def _topics_shown(self) -> set[str]:
        """The topics the broker lists to this principal (those it may describe)."""
        producer = await self._open_producer()
        try:
            metadata = await producer.client.fetch_all_metadata()
        except Exception as why:
            await self._drop_producer()
            raise self._unreachable(kafka_auth.describe_error(why)) from None
        return set(metadata.topics())

    def close(self) -> None:
        loop, self._loop = self._loop, None
        if loop is None:
            return
        try:
            loop.run_until_complete(self._drop_producer())
            cancel_leftovers(loop)
        finally:
            loop.close()

    def _run(self, coro: Any) -> Any:
        from aiokafka.errors import KafkaError

        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        try:
            return self._loop.run_until_complete(coro)
        except InboxError:
            raise
        except (TimeoutError, KafkaError, OSError) as why:
            raise self._failure(why) from None

    async def _open_producer(self) -> Any:
        """The producer, started on first use (and again after a failure)."""
        from aiokafka import AIOKafkaProducer

        if self._producer is None:
            producer = AIOKafkaProducer(
                bootstrap_servers=self.bootstrap,
                enable_idempotence=True,
                acks="all",
                request_timeout_ms=int(self.send_timeout * 1000),
                client_id="allot-cli",
                **self.options,
            )
            await self._start(producer)
            self._producer = producer
        return self._producer

    async def _check_topics(self, *, journal: bool) -> None:
        """The inbox (and, to wait for a verdict, the journal) must exist: a broker that
        creates topics on first use would make a mistyped ALLOT_TOPIC_SUFFIX one that no
        scheduler reads (the request silently lost), with the broker's retention."""
        if self._topics_seen:
            return
        present = await self._topics_shown()
        self._journal_listed = topics.JOURNAL in present
        wanted = [topics.INBOX, topics.JOURNAL] if journal else [topics.INBOX]
        missing = [name for name in wanted if name not in present]
        if missing:
            user = os.environ.get(kafka_auth.USER_ENV, "").strip()
            if user:  # the broker lists only the topics the principal may describe
                need = "read (to --wait for the verdict)" if missing == [topics.JOURNAL] else "use"
                raise InboxError(
                    f"principal {user!r} sees no topic {', '.join(missing)} at "
                    f"{self.bootstrap}: the broker's ACLs do not let it {need} "
                    f"{', '.join(missing)}, or the topic does not exist (`allot topics "
                    "create` as an admin creates it)"
                )
            raise InboxError(f"{topics.missing(missing, self.bootstrap)}; {topics.NEW_DEPLOYMENT}")
        self._topics_seen = True

    async def _drop_producer(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            await quiet_stop(producer)

    async def _start(self, client: Any) -> None:
        try:
            await asyncio.wait_for(client.start(), self.connect_timeout)
        except TimeoutError:
            await quiet_stop(client)
            raise self._unreachable(f"no answer within {self.connect_timeout:g} s") from None
        except Exception as why:
            await quiet_stop(client)
            reason = kafka_auth.describe_error(why)
            if reason is None and "Unable to bootstrap" in str(why):
                reason = await kafka_auth.diagnose(self.bootstrap, self.options)
            if reason is not None:
                raise InboxError(f"Kafka at {self.bootstrap}: {reason}") from None
            raise self._unreachable(why) from None

    async def _send(
        self, requests: list[dict[str, Any]], *, watch: bool, live_cluster: str | None = None
    ) -> Any:
        """Send `requests` and wait for the broker's acknowledgement. With `watch`, a
        consumer of the journal is positioned at its end first and returned (the
        caller waits with it and stops it); on a failure it is stopped here. With
        `live_cluster` too, only when `_watch_if_live` finds one (else None)."""
        encoded = encode_requests(requests)
        await self._check_topics(journal=watch and live_cluster is None)
        consumer = None
        if watch and live_cluster is not None:
            consumer = await self._watch_if_live(live_cluster)
        elif watch:
            consumer = await self._watch()
        try:
            producer = await self._open_producer()
            try:
                futures = [
                    await producer.send(
                        topics.INBOX,
                        key=str(r.get("cluster", "default")).encode(),
                        value=value,
                    )
                    for r, value in zip(requests, encoded, strict=True)
                ]
                await asyncio.wait_for(asyncio.gather(*futures), self.send_timeout)
            except TimeoutError:
                await self._drop_producer()
                raise self._unreachable(
                    f"{topics.INBOX} did not acknowledge within {self.send_timeout:g} s"
                ) from None
            except BaseException:
                await self._drop_producer()
                raise
        except BaseException:
            if consumer is not None:
                await quiet_stop(consumer)
            raise
        return consumer

    async def _watch(self) -> Any:
        """A consumer of the journal positioned at its end (before the request is sent);
        partitions that appear later are read from their start."""
        from aiokafka import AIOKafkaConsumer

        consumer = AIOKafkaConsumer(
            topics.JOURNAL,
            bootstrap_servers=self.bootstrap,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            metadata_max_age_ms=1000,
            request_timeout_ms=int(self.send_timeout * 1000),
            client_id="allot-cli-wait",
            **self.options,
        )
        try:
            await self._start(consumer)
        except InboxError as why:
            if "not authorized" not in str(why):
                raise
            raise InboxError(
                f"{why}; --wait reads {topics.JOURNAL} to see the outcome, so nothing was "
                "sent: submit without --wait, or as a principal that may read the journal"
            ) from None
        present = await consumer.topics()
        if topics.JOURNAL not in present and await kafka_auth.topic_denied(
            consumer._client, topics.JOURNAL
        ):
            await quiet_stop(consumer)
            who = self.options.get("sasl_plain_username")
            raise InboxError(
                f"Kafka at {self.bootstrap}: not authorized{f' as {who!r}' if who else ''} "
                f"to read {topics.JOURNAL}, so --wait cannot see the outcome; nothing was "
                "sent. Submit without --wait, or as a principal that may read the journal"
            )
        if topics.JOURNAL in present:
            deadline = time.monotonic() + self.connect_timeout
            while not consumer.assignment() and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assigned = list(consumer.assignment())
            if assigned:
                await consumer.seek_to_end(*assigned)
                for tp in assigned:
                    await consumer.position(tp)
        return consumer

    async def _watch_if_live(self, cluster: str) -> Any:
        """`_watch`'s consumer when a verdict on `cluster` will come soon, else None
        (never an error: the request is then sent without a wait). Soon: this login may
        read the journal, and a running worker serves `cluster` (`_served`)."""
        if not self._journal_listed:  # the ACLs hide it from this login (or it is missing)
            return None
        served = await self._served(cluster)
        if served is False:
            self.unserved = cluster
            return None
        try:
            consumer = await self._watch()
        except InboxError:  # not authorized to read it: no verdict to wait for
            return None
        if served:
            return consumer
        try:  # the broker would not say: the cluster's journal partition was written lately
            live = await _written_lately(consumer, cluster)
        except Exception as why:  # e.g. no Describe on the journal: as if nobody wrote
            log.debug("cannot tell whether %s has a live scheduler: %s", cluster, why)
            live = False
        if not live:
            await quiet_stop(consumer)
            return None
        return consumer

    async def _served(self, cluster: str) -> bool | None:
        """Whether a running worker serves `cluster` (streams.presence.serves): the
        presence groups' cards, so a worker stopped a moment ago is not, and one that
        journals no clock ticks is; None when the broker will not say in PRESENCE_ASK_S."""
        from streams.presence import serves

        try:
            client = (await self._open_producer()).client
            with aiokafka_quiet():
                asked = serves(client, topics.INBOX, topics.JOURNAL, cluster)
                return await asyncio.wait_for(asked, PRESENCE_ASK_S)
        except Exception as why:  # e.g. no Describe on the groups under ACLs
            log.debug("cannot see the scheduler workers of %s: %s", cluster, why)
            return None

    async def _wait(self, consumer: Any, match: Match, timeout: float) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            batches = await consumer.getmany(timeout_ms=int(min(left, 0.5) * 1000))
            for records in batches.values():
                for message in records:
                    try:
                        record = orjson.loads(message.value)
                    except (orjson.JSONDecodeError, TypeError):
                        continue
                    if isinstance(record, dict) and match(record):
                        return record


async def _written_lately(consumer: Any, cluster: str) -> bool:
    """Whether the journal has a record of `cluster` (its key) timestamped in the last
    LIVE_WITHIN_S, in the partition the scheduler writes it to (the default partitioner
    on the cluster's name, streams.worker_batches); other clusters may share it, maybe
    served by no scheduler. Reads at most LIVE_SCAN_RECORDS records back, for at most
    LIVE_SCAN_S (not found: False, the request is sent without a wait); `consumer`
    (positioned at the end by `_watch`) is put back at the end."""
    from aiokafka import TopicPartition
    from aiokafka.partitioner import DefaultPartitioner

    parts = sorted(consumer.partitions_for_topic(topics.JOURNAL) or ())
    if not parts:
        return False
    tp = TopicPartition(topics.JOURNAL, DefaultPartitioner()(cluster.encode(), parts, parts))
    since_ms = int((time.time() - LIVE_WITHIN_S) * 1000)
    first = (await consumer.offsets_for_times({tp: since_ms})).get(tp)
    if first is None:  # nothing written lately, by any cluster's scheduler
        return False
    end = await consumer.position(tp)
    key = cluster.encode()
    consumer.seek(tp, first.offset)
    deadline = time.monotonic() + LIVE_SCAN_S
    try:
        seen = 0
        while seen < LIVE_SCAN_RECORDS and (left := deadline - time.monotonic()) > 0:
            # the first fetch after the seek waits for the one at the end to give up
            records = (await consumer.getmany(tp, timeout_ms=int(left * 1000))).get(tp, [])
            if any(r.key == key for r in records):
                return True
            # the end, but for the marker that commits the scheduler's last transaction
            # (never returned); rarely, a record after a batch's end is missed: no wait
            if (seen and not records) or (records and records[-1].offset + 2 >= end):
                return False
            seen += len(records)
        return False
    finally:
        consumer.seek(tp, end)


def open_inbox(target: Any) -> InboxWriter:
    """A writer for `target` (anything with `.kafka: str | None` and `.data: Path | None`;
    `--data` wins when both are set)."""
    data = getattr(target, "data", None)
    if data is not None:
        return EmbeddedInbox(Path(data))
    kafka = getattr(target, "kafka", None)
    if kafka:
        return KafkaInbox(kafka)
    raise InboxError(
        "say where the scheduler is: --kafka HOST:PORT (or $ALLOT_KAFKA) or --data DIR"
    )


def verdict_ref(record: dict[str, Any]) -> Any:
    """The request a journal record gives the verdict on, if it is one: a `*.rejected`
    names it in `ref`; an accepted input is journaled under the request's own id."""
    kind = record.get("type")
    if isinstance(kind, str) and kind.endswith(".rejected"):
        return record.get("ref")
    return record.get("id")


def verdict_on(ref: str) -> Match:
    """Matches the journal record that accepts the request `ref` (the input itself,
    journaled under its own id) or rejects it (a `*.rejected` whose `ref` is it)."""

    def match(record: dict[str, Any]) -> bool:
        return verdict_ref(record) == ref

    return match


class Outcome:
    """Matches the journal record that decides a submission: `workload.placed` or
    `workload.rejected` for `workload` (or a rejection whose `ref` is the request id).
    On the way it notes the submission itself when journaled under `ref` (`accepted`):
    work still pending then is queued, not lost."""

    def __init__(self, workload: str | None = None, ref: str | None = None) -> None:
        self.workload = workload
        self.ref = ref
        self.accepted: dict[str, Any] | None = None

    def __call__(self, record: dict[str, Any]) -> bool:
        kind = record.get("type")
        workload, ref = self.workload, self.ref
        if kind == "workload.placed":
            return workload is not None and record.get("workload") == workload
        if isinstance(kind, str) and kind.endswith(".rejected"):
            return (ref is not None and record.get("ref") == ref) or (
                workload is not None and record.get("workload") == workload
            )
        if kind == "workload.submitted" and ref is not None and record.get("id") == ref:
            self.accepted = record
        return False


def outcome_of(workload: str | None = None, ref: str | None = None) -> Outcome:
    return Outcome(workload, ref)
