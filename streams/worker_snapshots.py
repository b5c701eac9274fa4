"""The Kafka worker's snapshot rounds: per owned partition, the pickled cores of its
clusters and a manifest naming the journal offsets they correspond to, written to the
compacted snapshot topic and loaded back on a takeover."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pickle
import time
import uuid
import zlib
from dataclasses import dataclass
from typing import Any

import orjson
from aiokafka.errors import ProducerFenced

from streams.core import SNAPSHOT_FORMAT, SchedulerCore
from streams.offloop import start_blobs
from streams.topic_admin import MAX_SNAPSHOT_BYTES
from streams.worker_helpers import _abandon, _Partition, plural

log = logging.getLogger("allot.worker")

MANIFEST_PREFIX = "__manifest__/"


@dataclass(frozen=True)
class _Round:
    """A snapshot round captured for one partition: its clusters' blobs are
    `blobs[first : first + len(clusters)]` once the (shared) future resolves."""

    part: _Partition
    generation: int
    round_id: str
    clusters: list[str]
    manifest: bytes
    first: int
    blobs: asyncio.Future[list[bytes]]


class Snapshots:
    """Snapshot rounds of `streams.worker_loop.Worker`."""

    def _manifest_key(self, p: int) -> bytes:
        return f"{MANIFEST_PREFIX}{self.identity}/p{p}".encode()

    async def _load_snapshots(self, parts: list[int]) -> dict[int, dict[int, int]]:
        """Cores of `parts` from their latest complete snapshot rounds; returns, per
        inbox partition, the journal offsets to fold from (none: the whole journal)."""
        latest: dict[bytes, bytes | None] = {}
        async for _, records in self._read_to_end(self.topics.snapshots, big=True):
            for r in records:
                if r.key is not None:
                    latest[r.key] = r.value
        offsets: dict[int, dict[int, int]] = {}
        for p in parts:
            manifest_raw = latest.get(self._manifest_key(p))
            if not manifest_raw:
                continue
            try:
                manifest = orjson.loads(manifest_raw)
                cores: dict[str, SchedulerCore] = {}
                for cluster in manifest["clusters"]:
                    blob = latest.get(cluster.encode())
                    if blob is None:
                        raise ValueError(f"no snapshot for cluster {cluster!r}")
                    snap = pickle.loads(zlib.decompress(blob))
                    if (
                        snap.get("format") != SNAPSHOT_FORMAT
                        or snap.get("round") != manifest["round"]
                    ):
                        raise ValueError(
                            f"snapshot of {cluster!r} is not from round {manifest['round']}"
                        )
                    core = snap["core"]
                    core.wanted = self._wanted(cluster)
                    cores[cluster] = core
                journal = {int(jp): int(o) for jp, o in manifest["journal"].items()}
                dead, scanned = int(manifest["dead"]), int(manifest["scanned"])
            except Exception as why:  # an old format or a code change: rebuild
                log.warning(
                    "ignoring snapshot round of partition %d (%s); folding its whole journal",
                    p,
                    why,
                )
                continue
            self.cores.update(cores)
            part = self.owned[p]
            part.dead, part.scanned = dead, scanned
            part.journal_next = dict(journal)
            offsets[p] = journal
            log.info(
                "loaded snapshot round %s of partition %d: %s",
                manifest["round"],
                p,
                plural(len(cores), "cluster"),
            )
        return offsets

    # ---------------------------------------------------------------- snapshots
    async def _snapshot_dirty(self, parts: set[int] | None = None, *, locked: bool = False) -> None:
        """Snapshot every dirty owned partition (of `parts`), each in one transaction of
        its own producer: the pickled cores of its clusters plus a manifest naming the
        round and the journal offsets the round corresponds to. Holds the lock
        throughout (a hand-over or a clean stop); the periodic snapshot is
        `_snapshot_in_background`."""
        if not locked:
            async with self._lock:
                await self._snapshot_dirty(parts, locked=True)
            return
        rounds = self._begin_snapshots(parts)
        await self._finish_snapshots(rounds)

    async def _snapshot_in_background(self) -> None:
        """The periodic snapshot without stalling the loop: under the lock the state is
        captured (a forked child's copy-on-write image, `streams.offloop`) and the
        manifest fixed; batches go on while the child pickles; the lock is taken again
        only for the write. A round overtaken meanwhile (a hand-over snapshot, or the
        partition dropped and taken over) is not written."""
        async with self._lock:
            rounds = self._begin_snapshots(None)
        if not rounds:
            return
        with contextlib.suppress(Exception):  # reported per round by _finish_snapshots
            await asyncio.shield(rounds[0].blobs)
        async with self._lock:
            await self._finish_snapshots(rounds)

    def _begin_snapshots(self, parts: set[int] | None) -> list[_Round]:
        """Capture a round of every dirty owned partition (of `parts`), all in one child;
        the caller holds the lock. Changes folded after this mark the partition dirty
        again."""
        chosen = [
            part
            for p, part in sorted(self.owned.items())
            if part.dirty and (parts is None or p in parts) and p not in self._pending
        ]
        if not chosen:
            return []
        taken = time.time()
        rounds, objects = [], []
        for part in chosen:
            round_id = uuid.uuid4().hex
            clusters = sorted(c for c in self.cores if self.home(c) == part.number)
            first = len(objects)
            objects.extend(
                {
                    "format": SNAPSHOT_FORMAT,
                    "round": round_id,
                    "cluster": cluster,
                    "core": self.cores[cluster],
                    "taken": taken,
                }
                for cluster in clusters
            )
            manifest = orjson.dumps(
                {
                    "round": round_id,
                    "taken": taken,
                    "partition": part.number,
                    "clusters": clusters,
                    "journal": {str(jp): o for jp, o in part.journal_next.items()},
                    "dead": part.dead,
                    "scanned": part.scanned,
                }
            )
            part.generation += 1
            part.dirty = False
            part.last_snapshot = time.monotonic()
            rounds.append((part, part.generation, round_id, clusters, manifest, first))
        blobs = start_blobs(objects, fork=self.fork_snapshots)
        return [_Round(*r, blobs=blobs) for r in rounds]

    async def _finish_snapshots(self, rounds: list[_Round]) -> None:
        """Write the captured rounds, each partition's in its own transaction; the
        caller holds the lock. A failed round leaves its partition dirty."""
        if not rounds:
            return
        try:
            blobs = await rounds[0].blobs
        except Exception as why:
            for r in rounds:
                r.part.dirty = True
            log.warning("snapshot failed: %s", why)
            return
        current = [
            r
            for r in rounds
            if self.owned.get(r.part.number) is r.part and r.part.generation == r.generation
        ]
        results = await asyncio.gather(
            *(self._write_snapshot(r, blobs) for r in current), return_exceptions=True
        )
        for r, result in zip(current, results, strict=True):
            if isinstance(result, ProducerFenced):
                # as for a batch: the producer is dead (its next transaction would fail
                # on aiokafka's state machine, a bare AssertionError), the partition gone
                self._on_fenced(r.part.number)
            elif isinstance(result, BaseException):
                r.part.dirty = True
                log.warning("snapshot of inbox partition %d failed: %s", r.part.number, result)

    async def _write_snapshot(self, r: _Round, blobs: list[bytes]) -> None:
        part = r.part
        mine = blobs[r.first : r.first + len(r.clusters)]
        for cluster, blob in zip(r.clusters, mine, strict=True):
            if len(blob) > MAX_SNAPSHOT_BYTES:
                log.warning(
                    "snapshot of %s is %d bytes, over the limit; skipping this round",
                    cluster,
                    len(blob),
                )
                return
        producer = part.producer
        await producer.begin_transaction()
        futures: list[Any] = []
        try:
            for cluster, blob in zip(r.clusters, mine, strict=True):
                futures.append(
                    await producer.send(self.topics.snapshots, value=blob, key=cluster.encode())
                )
            futures.append(
                await producer.send(
                    self.topics.snapshots, value=r.manifest, key=self._manifest_key(part.number)
                )
            )
            await asyncio.gather(*futures)
            await producer.commit_transaction()
        except Exception:
            _abandon(futures)
            with contextlib.suppress(Exception):
                await producer.abort_transaction()
            raise
        self.stats.snapshots += 1
        part.written = r.generation
        log.info(
            "snapshot round %s of partition %d: %s, %s",
            r.round_id,
            part.number,
            plural(len(mine), "cluster"),
            plural(sum(len(b) for b in mine), "byte"),
        )
