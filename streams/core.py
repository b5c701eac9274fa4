"""The scheduler loop's transport-free heart: inbox records in, journal records out.

Both shells use it — `allot serve --data DIR` (the embedded file journal) and the
faust/aiokafka worker — so they decide identically:

1. decode: bytes that are not a JSON object become a dead-letter entry (DLQ);
   anything else becomes an input event or its `*.rejected`;
2. stamp: an accepted input's event time is the record's broker timestamp, clamped so
   it never goes backwards (the client's own `time` is only a claim: a claim older than
   the usage window is rejected);
3. `domain.handle`: admit -> evolve -> decide;
4. encode: every resulting record carries `inbox: [partition, offset]` of the input
   that caused it, so a restarted worker resumes after the last offset in its journal
   and never folds an input twice.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from domain import State, decide, evolve, handle
from domain import events as ev
from domain.admission import MAX_TIME, reject_old_claim
from domain.config import SchedulerConfig
from domain.rederive import is_decision, rederive
from streams.codec import Undecodable, decode_event, encode_body, load_object

# Pickled snapshots of a SchedulerCore (worker and embedded) carry this; bump it when the
# pickled state or decide's caches change shape, so older snapshots are not restored
# (they are only a shortcut: the journal rebuilds the state). 2: failure groups,
# dedup order without times; 3: changed hosts (protection ends run light cycles);
# 4: queue keys end with `id_order` (array tasks by index), not the bare id; 5: held
# work (`Workload.on_hold`); 6: a cycle's failures carry the room a reservation left
# (backfill behind a refused bucket head); 7: ratios as of the last bucket edge (no
# protection-end count on the state or the last cycle); 8: requeues asked (`State.requeue_asked`);
# 9: lost attempts requeued per workload (`Workload.lost`); 10: flap hold-down
# (`State.held_down`, `Host.returned`/`flapping`/`held_until`); 11: work asked on one
# host (`Workload.one_host`, its own buckets); 12: per-user limits (`Node.max_*_per_user`,
# `AllocationTree.limited`, `State.user_usage`, buckets per user).
SNAPSHOT_FORMAT = 12


@dataclass(frozen=True, slots=True)
class InboxRecord:
    partition: int
    offset: int
    timestamp: float  # broker (or embedded append) time, seconds since the epoch
    value: bytes


@dataclass(frozen=True, slots=True)
class DeadLetter:
    record: InboxRecord
    error: str


# an input's size: Kafka's default message limit, so the embedded journal (a file,
# which has none) cannot take a request a broker would refuse (a 30 MB tag was journaled)
MAX_INPUT_BYTES = 1_048_576


@dataclass
class BatchResult:
    journal: list[bytes] = field(default_factory=list)  # encoded journal records, in order
    dead: list[DeadLetter] = field(default_factory=list)
    inputs: int = 0  # inbox records folded (accepted or rejected)


def encode_with_source(event: Any, record: InboxRecord) -> bytes:
    return encode_body(event, {"inbox": [record.partition, record.offset]})


class _Diverged(Exception):
    pass


# the usage bucket's default until fair-share ratios were read once per bucket (15 min now)
_OLD_DEFAULT_BUCKET_S = 3600.0


def old_bucket_note(recorded: SchedulerConfig, wanted: SchedulerConfig | None) -> str | None:
    """A hint for a cluster whose journal keeps the old default bucket (1 h) while no
    bucket was asked for now: ratios are read once per bucket since then, so they move
    hourly there (new clusters: every 15 minutes). None otherwise."""
    if recorded.bucket != _OLD_DEFAULT_BUCKET_S:
        return None
    if wanted is not None and "bucket" in wanted.model_fields_set:
        return None
    return (
        "the journal's usage bucket is 1h (the default before fair-share ratios were read "
        "once per bucket, at its edges): ratios here move hourly; --set bucket=15m (the "
        "default now) lets them move every 15 minutes, --set bucket=1h keeps the hour "
        "and silences this note"
    )


def _given_over(recorded: SchedulerConfig, wanted: SchedulerConfig) -> SchedulerConfig:
    """`recorded` with the keys `wanted` was given (all of them for a config that was
    parsed from a full record)."""
    given = wanted.model_fields_set
    if given >= set(SchedulerConfig.model_fields):
        return wanted
    return recorded.with_overrides({k: v for k, v in wanted.model_dump().items() if k in given})


class SchedulerCore:
    """One cluster's scheduler state plus where it is in the inbox."""

    def __init__(self, cluster: str, config: SchedulerConfig | None = None) -> None:
        # the config takes effect through a journaled config.set, exactly as on replay
        self.state = State(cluster)
        self.wanted = config
        # inbox partition -> last offset folded (resume point = this + 1)
        self.positions: dict[int, int] = {}
        self.diverged = False  # the journal could not be re-derived (see fold_journal)
        self._config_checked: Any = None
        self._config_differs = False
        self._config_target: SchedulerConfig | None = None

    # ------------------------------------------------------------- recovery
    def fold_journal(self, lines: Iterable[bytes]) -> int:
        """Rebuild from journal records by re-deriving them (see `domain.rederive`), so
        the rebuilt scheduler decides exactly as the one that wrote them; every decision
        re-made is checked against the journal's. Should they ever differ (a journal
        written by other code), the journal wins: the state is rebuilt by folding it and
        `diverged` says so. Works from a fresh core or from a restored snapshot."""
        records: list[tuple[Any, list[int] | None]] = []
        for line in lines:
            raw = load_object(line)
            source = raw.get("inbox")
            position = (
                [int(source[0]), int(source[1])]
                if isinstance(source, list) and len(source) == 2
                else None
            )
            records.append((decode_event(line), position))
        for record, position in records:
            if record.type in ev.INBOX_RESETS:
                # the records before it read another deployment's inbox: this one is
                # read from its start (`allot journal restore`)
                self.positions.clear()
            elif position is not None:
                partition, offset = position
                self.positions[partition] = max(self.positions.get(partition, -1), offset)
        base = copy.deepcopy(self.state)  # where a divergent journal is folded from
        expected = iter(r for r, _ in records if is_decision(r))
        try:
            for _, made in rederive(self.state, (r for r, _ in records)):
                for decision in made:
                    if ev.event_to_dict(decision) != ev.event_to_dict(next(expected)):
                        raise _Diverged
            if next(expected, None) is not None:
                raise _Diverged
        except (_Diverged, StopIteration):
            self.diverged = True
            self.state = base
            for record, _ in records:
                evolve(self.state, record)
        return len(records)

    def config_due(self) -> bool:
        """Journal the wanted config before the next input? It is the recorded config
        with the keys `wanted` was given (`model_fields_set`: `--set window=3d` changes
        the window and keeps the journal's admins). Compared once, not per record:
        pydantic model equality is not free."""
        checked = self._config_checked
        config, wanted = self.state.config, self.wanted
        # keyed on both: a restart with new --admin/--policy/--set sets `wanted` on a core
        # restored from a snapshot or the journal, whose cache compared the old one
        if checked is None or checked[0] is not config or checked[1] is not wanted:
            self._config_checked = (config, wanted)
            self._config_target = None if wanted is None else _given_over(config, wanted)
            self._config_differs = wanted is not None and self._config_target != config
        return self._config_differs

    def seen(self, record: InboxRecord) -> bool:
        return record.offset <= self.positions.get(record.partition, -1)

    # -------------------------------------------------------------- process
    def config_event(self, record: InboxRecord, config: SchedulerConfig) -> ev.ConfigSet:
        return ev.ConfigSet(
            id=f"{self.state.cluster}/config@{record.partition}:{record.offset}",
            time=self._stamp(record),
            cluster=self.state.cluster,
            actor=ev.SCHEDULER,
            config=config.model_dump(mode="json"),
        )

    def _stamp(self, record: InboxRecord) -> float:
        now = self.state.now
        return record.timestamp if not math.isfinite(now) else max(now, record.timestamp)

    def process(
        self, records: Iterable[InboxRecord], out: BatchResult | None = None
    ) -> BatchResult:
        """Fold a batch of inbox records (already-folded offsets are skipped)."""
        out = out or BatchResult()
        journal = out.journal
        positions = self.positions
        state = self.state
        for record in records:
            partition, offset = record.partition, record.offset
            if offset <= positions.get(partition, -1):  # seen()
                continue
            positions[partition] = offset
            # _stamp(), inline: this loop runs once per inbox record
            now = state.now
            stamped = record.timestamp if not math.isfinite(now) else max(now, record.timestamp)
            if len(record.value) > MAX_INPUT_BYTES:  # the broker's own limit, in files too
                out.dead.append(
                    DeadLetter(
                        record,
                        f"record of {len(record.value):,} bytes; an input is at most "
                        f"{MAX_INPUT_BYTES:,}",
                    )
                )
                continue
            try:
                raw = load_object(record.value)
            except Undecodable as why:
                out.dead.append(DeadLetter(record, str(why)))
                continue
            out.inputs += 1
            # one `inbox` value for every record this input causes (encoded at once)
            source = {"inbox": [partition, offset]}
            if self.wanted is not None and abs(stamped) <= MAX_TIME:
                if self.config_due():
                    # the scheduler's own fact (not a request): folded without admission,
                    # so never at a time admission refuses (a broker timestamp past year
                    # 9999 would become the clock, and every later input be rejected)
                    assert self._config_target is not None
                    config = self.config_event(record, self._config_target)
                    evolve(state, config)
                    journal.append(encode_body(config, source))
                    for produced in decide(state, state.now, cause=config.id):
                        journal.append(encode_body(produced, source))
                # the start's config is applied once (DESIGN §4): an admin's later
                # config.set stands until the next start (it used to be reverted at once)
                self.wanted = None
            claimed = raw.get("time")
            window = state.config.window
            too_old = (
                isinstance(claimed, int | float)
                and not isinstance(claimed, bool)
                and claimed < stamped - window
            )
            if not too_old:
                # the broker's time replaces the claim; a claim from before the window
                # is kept so admission rejects it ("older than the window")
                raw["time"] = stamped
            event = ev.parse_input(raw, stamped)
            now = state.now
            if too_old and not isinstance(event, ev._Rejected) and not claimed < now - window:
                # admission judges claims by the state's clock: without one (a fresh
                # state) or behind the broker it would accept the claim as event time
                event = reject_old_claim(state, event, stamped)
            for produced in handle(state, event):
                journal.append(encode_body(produced, source))
        return out
