"""The journal as people read it: the queue (like squeue), the share tree (like sshare)
and why a workload is where it is — answered from the journal alone.

Pure: no I/O. Events are folded with `domain.evolve` into a `domain.State` (the same
state the scheduler had) plus, per workload, the history the state forgets (submit
details, every placement and preemption with its `explain`, rejections, the end):

    view = fold(events)                  # or fold(decode_lines(lines))
    queue_rows(view, user="alice")       # pending in the order decide considers them
    share_rows(view)                     # the budget tree, Fair-Tree order
    why(view, "0-000017")["text"]        # a human explanation, line by line

Time is the journal's: "now" is the latest event time folded, never the wall clock.

Pending reasons (as `decide` would see the current state):

- ``Reserved``: it holds a reservation (hosts kept free for it, rule 10);
- ``Priority``: it would fit — on free GPUs or by preempting — but higher-ranked work
  comes first (a reservation for it, or the cycle's rule that work of a group needing
  as many GPUs as a failed one is not tried: same class and, if it may preempt, the
  same allocation);
- ``Headroom``: it fits only on the headroom hosts kept for short, small jobs;
- ``Resources``: no room, even by preemption (or only on unhealthy hosts: it waits for
  their repair);
- ``PartitionConfig``: it needs more GPUs than the cluster has registered (hosts were
  removed or shrunk after it was accepted); it waits until hosts are registered or grow;
- ``QOSMaxGRESPerUser``: starting it would put its submitter's allocated work over a
  `max_gpus_per_user` on its path; it waits for that user's own work to end.
"""

from __future__ import annotations

import difflib
import math
import pickle
import re
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, get_args

from pydantic import ValidationError

from domain import State, evolve
from domain import events as ev
from domain.durations import format_duration
from domain.fairshare import fair_tree
from domain.fairshare import ratio as fair_ratio
from domain.rederive import is_cause
from domain.state import PENDING, RUNNING, Workload, id_order
from domain.upcasting import upcast
from projections.history import ran_seconds
from projections.timeline import timeline
from projections.utilization import Utilization, current, idle_since, is_stale, next_reading
from streams.codec import Undecodable, load_object


class ViewError(ValueError):
    """A question the journal cannot answer: one line for the user."""


class UnintroducedError(ViewError):
    """A record that refers to a host or workload no earlier record introduces (a
    journal read from its middle, or edited). The fold that finds it does not know where
    the record is, only how many it folded (the message says `record N`); the reader
    that does names it with `at` (`decode_lines`, as `record_place` names a record that
    does not parse), only when one is raised: the fold keeps no place per record."""

    def __init__(self, event: Any, missing: KeyError, number: int) -> None:
        self.what = (
            f"{event.type} {event.id} refers to {missing} that no earlier record introduces: "
            "the journal must be read from its beginning"
        )
        super().__init__(
            f"record {number} ({event.type} {event.id}) refers to {missing} that "
            "no earlier record introduces: the journal must be read from its beginning"
        )

    def at(self, place: str) -> ViewError:
        """The same error, naming the record by `place` (FILE:LINE, `journal record N`)."""
        return ViewError(f"{place}: {self.what}")


# ------------------------------------------------------------------ decoding

_KNOWN_TYPES: frozenset[str] = frozenset(
    model.model_fields["type"].default
    for union in (ev.Input, ev.Decision, ev.Rejection)
    for model in get_args(union)
)


def decode_lines(
    lines: Iterable[bytes], first: int = 1, skipped: list[int] | None = None
) -> Iterator[Any]:
    """Journal records (JSON bytes) as events. Records of types this version does not
    know are skipped (a newer writer; their numbers appended to `skipped`, if given: see
    `event_place`); a corrupt record raises ViewError naming it (`record_place`;
    counting from `first`: the number of the first of `lines` in the journal), and so
    does a record the fold finds inconsistent (an `UnintroducedError` thrown back in
    at the record just yielded, as `fold` does)."""
    for number, line in enumerate(lines, start=first):
        try:
            raw = upcast(load_object(line))
        except Undecodable as why:
            raise ViewError(f"{record_place(lines, number)}: {why}") from None
        if raw.get("type") not in _KNOWN_TYPES:
            if skipped is not None:
                skipped.append(number)
            continue
        try:
            event = ev.parse_event(raw)
        except ValidationError as why:
            raise ViewError(
                f"{record_place(lines, number)}: not a valid {raw.get('type')} record: "
                f"{ev.describe_validation_error(why)}"
            ) from None
        try:
            yield event
        except UnintroducedError as why:  # thrown in by `fold`: this record's
            raise why.at(record_place(lines, number)) from None


def record_place(lines: Iterable[bytes], number: int) -> str:
    """How an error names record `number` of `lines`: FILE:LINE when they are a file's
    (`streams.sources.FileLines` knows the line of the record last returned, a piece of
    the file read by `streams.sources.FileTail` the line of each; a file's blank lines
    and other clusters' records make the two numbers differ), else `journal record N`
    (Kafka has no lines)."""
    place_of = getattr(lines, "place_of", None)
    if place_of is not None:
        return place_of(number)
    place = getattr(lines, "place", None)
    return place if place is not None else f"journal record {number}"


def event_place(lines: Iterable[bytes], first: int, skipped: list[int], index: int) -> str:
    """How an error names the event at `index` of those `decode_lines(lines, first,
    skipped)` returned, read whole (the records of `skipped` are not among them).
    `lines` must name any of its records (`place_of`, or a list: `journal record N`)."""
    number = first + index
    for s in skipped:  # in order
        if s <= number:
            number += 1
    return record_place(lines, number)


# ------------------------------------------------------------------ history


@dataclass(slots=True)
class Placement:
    id: str
    time: float
    attempt: int
    hosts: dict[str, tuple[int, ...]]
    charged: bool
    protected_until: float | None  # None: until it ends (legacy non-preemptible)
    explain: dict[str, Any]
    seq: int = -1  # position among the folded records (orders the timeline)


@dataclass(slots=True)
class Preemption:
    id: str
    time: float
    workload: str
    attempt: int
    reason: str
    beneficiary: str | None
    requeued: bool
    explain: dict[str, Any]
    seq: int = -1


@dataclass(slots=True)
class LostAttempt:
    """An attempt of resumable work the launcher lost with its node: requeued."""

    id: str
    time: float
    attempt: int
    actor: str
    exit_code: int | None
    reason: str | None
    seq: int = -1


@dataclass(slots=True)
class Rejection:
    id: str
    time: float
    type: str
    ref: str
    error: str
    actor: str
    workload: str | None
    input_type: str | None
    seq: int = -1
    allocation: str | None = None  # the refused input's, when it named one
    gpus: int | None = None  # the refused input's, when it asked for some


@dataclass(slots=True)
class History:
    """What the journal says about one workload (the state keeps only live ones)."""

    workload: str
    submitted: ev.WorkloadSubmitted | None = None
    placements: list[Placement] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)  # of this workload
    caused: list[Preemption] = field(default_factory=list)  # it was the beneficiary
    lost: list[LostAttempt] = field(default_factory=list)  # requeued after a lost node
    rejections: list[Rejection] = field(default_factory=list)
    ended: dict[str, Any] | None = None  # time, how (finished/cancelled/preempted), ...
    pending_since: float | None = None
    held: tuple[str, float] | None = None  # (who, when) while it is held
    holds: list[tuple[int, str, str, float]] = field(default_factory=list)  # seq, type, who, t
    submitted_seq: int = -1
    ended_seq: int = -1
    utilization: Utilization | None = None  # the running attempt's last reading


class JournalView:
    """A folded journal: the scheduler's state plus per-workload history."""

    def __init__(self, live_only: bool = False, last_time: float | None = None) -> None:
        self.state: State | None = None
        # live_only: keep the history of live workloads only, and no rejections (what
        # `queue`, `shares` and `host list` read): memory bounded by the live queue, not
        # by every workload the journal ever held
        self.live_only = live_only
        self.histories: dict[str, History] = {}
        self.rejections: dict[str, Rejection] = {}  # by ref (the rejected input's id)
        self.records = 0
        self.first_time: float | None = None
        # index of the first input in the latest usage bucket that has one (and that
        # bucket's end): from there the scheduler ran a full cycle, so re-deriving the
        # journal from there rebuilds what its cycles remember (`projections.forecast`)
        self.tail_start: int | None = None
        self.tail_edge: float | None = None
        # `last_time`, the time of the journal's last record when known ahead (a file's
        # end): the state before the first input of its bucket is kept (pickled, at
        # `tail_copy_at`) with the records from there on, so that the forecast need not
        # fold the journal a second time to re-derive the tail
        self.last_time = last_time
        self.tail_copy: bytes | None = None
        self.tail_copy_at: int | None = None
        self.tail_records: list[Any] = []
        # per host: (time, actor, reason, healthy) of the report that last changed its
        # health, and when it was registered and drained (for `allot host list`)
        self.host_health: dict[str, tuple[float, str, str, bool]] = {}
        self.host_since: dict[str, float] = {}
        self.host_drained: dict[str, float] = {}
        # hosts `host.removed` took out of the cluster (and not registered again since):
        # (time, actor, reason, GPUs it had) for `allot host list -R`
        self.host_removed: dict[str, tuple[float, str, str, int]] = {}
        # allocations `budget.removed` took out of the tree (and not set again since),
        # with when: their past work is still the journal's (`allot acct -a PATH`)
        self.removed_allocations: dict[str, float] = {}
        # (time, every) of the last tick of a ticker that said how often it ticks: the
        # scheduler acts on a protection end at the first tick after it (the forecast)
        self.ticker: tuple[float, float] | None = None

    @property
    def now(self) -> float:
        return self.require().now

    @property
    def cluster(self) -> str:
        return self.require().cluster

    def require(self) -> State:
        if self.state is None:
            raise ViewError("the journal is empty: no records to answer from")
        return self.state

    def history(self, wid: str) -> History:
        h = self.histories.get(wid)
        if h is None:
            h = self.histories[wid] = History(wid)
        return h

    def _last_bucket(self, event: Any) -> bool:
        """Is `event` (an input) in the usage bucket of the journal's last record?"""
        assert self.state is not None and self.last_time is not None
        charged = self.state.charged
        return charged.next_edge(event.time) == charged.next_edge(self.last_time)

    def add(self, event: Any) -> None:
        state = self.state
        if state is None:
            state = self.state = State(event.cluster)
            self.first_time = event.time
        elif event.cluster != state.cluster:
            raise ViewError(
                f"the journal holds records of clusters {state.cluster!r} and "
                f"{event.cluster!r}; pick one with --cluster"
            )
        if self.tail_copy is not None:
            self.tail_records.append(event)
        elif self.last_time is not None and is_cause(event) and self._last_bucket(event):
            self.tail_copy = pickle.dumps(state, pickle.HIGHEST_PROTOCOL)
            self.tail_copy_at = self.records
            self.tail_records.append(event)
        wid = getattr(event, "workload", None)
        was_live = wid is not None and wid in state.workloads
        leaving = state.hosts.get(event.host) if event.type == "host.removed" else None
        try:
            evolve(state, event)
        except KeyError as why:  # a host or workload no earlier record introduced
            raise UnintroducedError(event, why, self.records + 1) from None
        seq = self.records
        self.records += 1
        if is_cause(event):
            edge = state.charged.next_edge(event.time)
            if edge != self.tail_edge:
                self.tail_start, self.tail_edge = seq, edge
                if self.tail_copy_at is not None and seq != self.tail_copy_at:
                    # a bucket after the one expected last (the journal grew as it was
                    # read): the copy is of no use, and the records must not pile up
                    self.tail_copy, self.tail_copy_at, self.last_time = None, None, None
                    self.tail_records = []
        kind = event.type
        if kind == "clock.tick":
            if event.every is not None:
                self.ticker = (event.time, event.every)
        elif kind == "workload.submitted":
            h = self.history(event.workload)
            h.submitted = event
            h.submitted_seq = seq
            h.pending_since = event.time
        elif kind == "workload.placed":
            h = self.history(event.workload)
            h.placements.append(
                Placement(
                    event.id,
                    event.time,
                    event.attempt,
                    dict(event.hosts),
                    event.charged,
                    event.protected_until,
                    dict(event.explain),
                    seq,
                )
            )
            h.pending_since = None
        elif kind == "workload.finished" and event.requeued:
            h = self.history(event.workload)
            h.lost.append(
                LostAttempt(
                    event.id,
                    event.time,
                    _lost_attempt(state, h, event),
                    event.actor,
                    event.exit_code,
                    event.reason,
                    seq,
                )
            )
            h.pending_since = event.time
        elif kind == "workload.utilization":
            h = self.history(event.workload)
            h.utilization = next_reading(h.utilization, event, state.config.idle_threshold)
        elif kind in ("workload.held", "workload.released"):
            h = self.history(event.workload)
            h.held = (event.actor, event.time) if kind == "workload.held" else None
            h.holds.append((seq, kind, event.actor, event.time))
        elif kind == "workload.preempted":
            p = Preemption(
                event.id,
                event.time,
                event.workload,
                event.attempt,
                event.reason,
                event.beneficiary,
                event.requeued,
                dict(event.explain),
                seq,
            )
            h = self.history(event.workload)
            h.preemptions.append(p)
            if event.requeued:
                h.pending_since = event.time
            if event.beneficiary and (not self.live_only or event.beneficiary in state.workloads):
                self.history(event.beneficiary).caused.append(p)
        elif kind == "budget.removed":
            self.removed_allocations[event.allocation] = event.time
        elif kind == "budget.set":
            self.removed_allocations.pop(event.allocation, None)
        elif kind == "host.registered":
            self.host_since.setdefault(event.host, event.time)
            self.host_removed.pop(event.host, None)
        elif kind == "host.removed":
            for known in (self.host_since, self.host_health, self.host_drained):
                known.pop(event.host, None)
            gpus = leaving.gpus if leaving is not None else 0
            self.host_removed[event.host] = (event.time, event.actor, event.reason, gpus)
        elif kind == "host.health":
            last = self.host_health.get(event.host)
            if last is None or last[3] != event.healthy:  # a repeated report changes nothing
                self.host_health[event.host] = (
                    event.time,
                    event.actor,
                    event.reason,
                    event.healthy,
                )
                self.host_drained.pop(event.host, None)
        elif kind == "host.drained":
            self.host_drained[event.host] = event.time
        elif kind.endswith(".rejected") and not self.live_only:
            r = Rejection(
                event.id,
                event.time,
                kind,
                event.ref,
                event.error,
                event.actor,
                event.workload,
                event.input_type,
                seq,
                event.allocation,
                event.gpus,
            )
            self.rejections[r.ref] = r
            # a launcher's late reading refused is no part of the workload's story
            if r.workload and r.input_type not in ev.INFORMATIONAL_TYPES:
                self.history(r.workload).rejections.append(r)
        if was_live and wid not in state.workloads:
            if self.live_only:
                self.histories.pop(wid, None)  # type: ignore[arg-type]
                return
            how = {
                "workload.finished": "finished",
                "workload.cancelled": "cancelled",
                "workload.preempted": "preempted",
            }.get(kind, kind)
            ended: dict[str, Any] = {"time": event.time, "how": how, "actor": event.actor}
            if kind == "workload.finished":
                ended["outcome"] = event.outcome
                ended["attempt"] = event.attempt
                ended["exit_code"] = event.exit_code
                ended["reason"] = event.reason
            h = self.history(wid)  # type: ignore[arg-type]
            h.ended = ended
            h.ended_seq = seq


def utilization_of(view: JournalView, w: Workload) -> dict[str, Any] | None:
    """A running workload's last reading, as views show it: `utilization`, `memory`,
    `reported` (when), `stale`, `idle_since` (its attempt's start at the earliest) and
    `idle_s`, and `idle` (idle for at least the config's `idle_after`). None: no
    reading of this attempt."""
    h = view.histories.get(w.id)
    u = current(h.utilization if h is not None else None, w)
    if u is None:
        return None
    now = view.now
    since = idle_since(u, w, now)
    idle_s = None if since is None else max(0.0, now - since)
    return {
        "utilization": u.utilization,
        "memory": u.memory,
        "reported": iso(u.time),
        "reported_s_ago": round(max(0.0, now - u.time), 3),
        "stale": is_stale(u, now),
        "idle_since": iso(since),
        "idle_s": None if idle_s is None else round(idle_s, 3),
        "idle": idle_s is not None and idle_s >= view.require().config.idle_after,
    }


def utilization_text(u: dict[str, Any]) -> str:
    """`GPU utilization 2% (memory 40%), reported 3m ago; idle for 45m`."""
    memory = f" (memory {u['memory']:.0%})" if u["memory"] is not None else ""
    text = f"GPU utilization {u['utilization']:.0%}{memory}, reported "
    text += f"{format_duration(u['reported_s_ago'])} ago"
    if u["stale"]:
        text += " (stale: no report since)"
    if u["idle_s"] is not None:
        text += f"; idle for {format_duration(u['idle_s'])}"
    return text


def _lost_attempt(state: State, h: History, event: Any) -> int:
    """The attempt a requeued report is about: the one it names, else the latest (the
    state's; or the last placement's, in a journal no scheduler wrote)."""
    if event.attempt is not None:
        return event.attempt
    w = state.workloads.get(event.workload)
    if w is not None:
        return w.attempt
    return h.placements[-1].attempt if h.placements else 0


def fold(
    events: Iterable[Any], live_only: bool = False, last_time: float | None = None
) -> JournalView:
    """Fold journal events (models) into a view; ViewError if there are none.
    `live_only`: only what live workloads need; `last_time`: the time of the last
    record, when known ahead (see JournalView)."""
    from projections.journal import gc_paused

    view = JournalView(live_only, last_time)
    with gc_paused():
        for event in events:
            try:
                view.add(event)
            except UnintroducedError as why:
                # the reader that yielded the record (`decode_lines`, suspended at it)
                # names where it is; any other source leaves the error as it is
                throw = getattr(events, "throw", None)
                if throw is None:
                    raise
                throw(why)
                raise
    view.require()
    return view


def _view(source: JournalView | Iterable[Any]) -> JournalView:
    return source if isinstance(source, JournalView) else fold(source)


# ------------------------------------------------------------------ formatting


def iso(t: float | None) -> str | None:
    """`2026-01-01 00:30:00` (UTC)."""
    if t is None or not math.isfinite(t):
        return None
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S")


def clock(t: float, now: float) -> str:
    """`HH:MM` (UTC) on the day of `now`, else `YYYY-MM-DD HH:MM`."""
    at = datetime.fromtimestamp(t, UTC)
    same_day = at.date() == datetime.fromtimestamp(now, UTC).date()
    return at.strftime("%H:%M" if same_day else "%Y-%m-%d %H:%M")


def num(x: float | None, digits: int = 4) -> float | None:
    """A JSON-safe rounded number (None for infinity / unknown)."""
    if x is None or not math.isfinite(x):
        return None
    return round(x, digits)


def ratio_text(ratio: float | None, rank: int | None = 0) -> str:
    """A fair-share ratio for people, one way everywhere: `inf` for a zero share (JSON
    null, as the journal has it), blank for an allocation the policy does not rank
    (`rank` None: no fair share, no ratio)."""
    if ratio is None:
        return "" if rank is None else "inf"
    return f"{ratio:.4g}"


def show(x: float | None, digits: int = 4) -> str:
    if x is None:
        return "inf"
    if isinstance(x, float) and not math.isfinite(x):
        return "inf"
    return f"{x:.{digits}g}" if isinstance(x, float) else str(x)


_SUFFIX = re.compile(r"^(.*?)(\d+)$")


def nodelist(hosts: Iterable[str]) -> str:
    """Slurm-style compressed host list: `h0,h1,h2,h5` -> `h[0-2,5]`."""
    groups: dict[str, list[int]] = {}
    plain: list[str] = []
    for name in hosts:
        m = _SUFFIX.match(name)
        if m and not (len(m.group(2)) > 1 and m.group(2).startswith("0")):
            groups.setdefault(m.group(1), []).append(int(m.group(2)))
        else:
            plain.append(name)
    out = []
    for prefix, numbers in groups.items():
        numbers = sorted(set(numbers))
        if len(numbers) == 1:
            out.append(f"{prefix}{numbers[0]}")
            continue
        ranges, start, prev = [], numbers[0], numbers[0]
        for n in [*numbers[1:], None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            ranges.append(str(start) if start == prev else f"{start}-{prev}")
            if n is not None:
                start = prev = n
        out.append(f"{prefix}[{','.join(ranges)}]")
    return ",".join([*out, *plain])


MAX_NODELIST = 100_000  # hosts one range of a host list may name (a typo's guard)
_BRACKETS = re.compile(r"^(?P<prefix>[^\[\]]*)\[(?P<spec>[^\[\]]*)\](?P<suffix>[^\[\]]*)$")


def expand_nodelist(text: str) -> list[str]:
    """`h[0-2,5],gpu7` -> `h0, h1, h2, h5, gpu7`: the host lists `nodelist` writes and
    Slurm's `-w` takes (a range keeps its zero padding: `n[08-10]` -> n08, n09, n10).
    ValueError names what cannot be read."""
    parts, depth, current = [], 0, ""
    for ch in text:
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if depth not in (0, 1):
            raise ValueError(f"{text!r}: brackets do not nest in a host list")
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    if depth:
        raise ValueError(f"{text!r}: a '[' is not closed")
    parts.append(current)
    names: list[str] = []
    for part in (x.strip() for x in parts):
        if not part:
            continue
        m = _BRACKETS.match(part)
        if m is None:
            if "[" in part or "]" in part:
                raise ValueError(f"{part!r}: give one [range] per name, e.g. h[0-3,7]")
            names.append(part)
            continue
        for item in m["spec"].split(","):
            lo, dash, hi = item.strip().partition("-")
            if not lo.isdigit() or (dash and not hi.isdigit()):
                raise ValueError(f"{part!r}: {item!r} is not a number or a range like 0-3")
            width = len(lo) if lo.startswith("0") else 0
            first, last = int(lo), int(hi if dash else lo)
            if last - first >= MAX_NODELIST:
                raise ValueError(f"{part!r}: more than {MAX_NODELIST:,} hosts in one range")
            for n in range(first, last + 1):
                names.append(f"{m['prefix']}{n:0{width}d}{m['suffix']}")
    return list(dict.fromkeys(names))


# ------------------------------------------------------------------ queue

QueueRow = dict[str, Any]


@dataclass(slots=True)
class _Reasons:
    """Why each pending workload waits, judged like one `decide` cycle would."""

    state: State
    cycle: Any
    holders: dict[str, tuple[list[str], float]]
    fitting: set[str] = field(default_factory=set)  # pending ids that would start now

    @classmethod
    def build(cls, state: State) -> _Reasons:
        from domain.decide import Cycle

        return cls(state, Cycle.snapshot(state, state.now), {})

    def plan(self, pending: list[tuple[Any, Workload, bool]]) -> None:
        """The scheduler's own dry run (`domain.decide.Cycle.dry_run`): who would hold
        which hosts, and who would start now."""
        self.fitting = self.cycle.dry_run(pending)
        for host, (wid, start) in self.cycle.reservations.items():
            self.holders.setdefault(wid, ([], start))[0].append(host)

    def waits_for_gpus(self, w: Workload) -> bool:
        """Pending `w` would not start now but could on the healthy cluster: when GPUs
        free up it takes them before any lower-ranked work (what Slurm's Priority
        reason means for the work behind it)."""
        s = self.state
        if w.id in self.fitting or (s.tree.limited and s.over_gpu_limit(w) is not None):
            return False  # (work over its user's limit waits for that user, not for GPUs)
        return self.cycle.could_hold(w, s.short_small(w))

    @property
    def ranking(self) -> Any:
        return self.cycle.ranking

    def fits(self, w: Workload, allocated: bool, short: bool) -> bool:
        return self.cycle.fits(w, allocated, short)

    def reason(
        self,
        w: Workload,
        allocated: bool,
        ahead: int,
        first: Workload | None,
        blocker: tuple[int, Workload] | None = None,
    ) -> tuple[str, str, Workload | None]:
        """`ahead`: how many pending workloads the scheduler considers before `w`,
        `first` the first of them (a count, not a list: a list per row made a queue of
        20k pending quadratic); `blocker` the first of them that waits for GPUs
        (`waits_for_gpus`), with its position. Returns the reason, its detail and the
        workload ahead that the detail names (None if none)."""
        s, cycle = self.state, self.cycle
        now = s.now
        short = s.short_small(w)
        held = self.holders.get(w.id)
        if held is not None:
            hosts, start = held
            # when the hosts' current work may end or be preempted, judged on today's
            # ranking; not a bound: as ranks move, a preemption may come sooner
            # (`queue --start` plays the ranking forward)
            when = "now" if start <= now else f"from {clock(start, now)} as ranks stand now"
            return "Reserved", f"holds {nodelist(hosts)} for it, free {when}", None
        over = s.over_gpu_limit(w) if allocated and s.tree.limited else None
        if over is not None:
            return ("QOSMaxGRESPerUser", _over_user_limit(w, *over), None)
        beyond = _beyond_the_cluster(s, w, cycle.could_hold(w, short))
        if beyond is not None:
            return (*beyond, None)
        behind = f"behind {ahead} higher-ranked pending workload{'s' if ahead != 1 else ''}" + (
            f" (first: {first.id} of {first.allocation})" if first else ""
        )
        if self.fits(w, allocated, short):
            if ahead == 0:
                # nothing is ahead of it and it fits: the incremental cycles since the
                # last full one have not looked where it fits (a full cycle at every
                # usage bucket edge does)
                edge = s.charged.next_edge(now)
                return (
                    "Priority",
                    "first in line and it could start now; the scheduler's next full "
                    f"cycle starts it by {clock(edge, now)} at the latest",
                    None,
                )
            return "Priority", behind, first
        saved = cycle.reservations
        if saved:
            cycle.reservations = {}
            try:
                fits_unreserved = self.fits(w, allocated, short)
            finally:
                cycle.reservations = saved
            if fits_unreserved:
                holders = sorted({wid for wid, _ in saved.values()})
                held_for = s.workloads.get(holders[0])
                return (
                    "Priority",
                    f"the hosts it could use are held for higher-ranked {', '.join(holders)}",
                    held_for,
                )
        if allocated and not short and s.headroom and self.fits(w, allocated, True):
            cfg = s.config
            return (
                "Headroom",
                f"only the headroom hosts {nodelist(sorted(s.headroom))} have room; they are "
                f"kept for short jobs (<= {_gpus(cfg.short_job_max_gpus)}, min runtime "
                f"<= {format_duration(cfg.short_job_max_min_runtime)})",
                None,
            )
        room = _no_room(s, w.gpus, s.single_host(w))
        if not allocated and not s.ordering.unallocated_may_preempt:
            room = f"{room}; unallocated work preempts nothing"
        else:
            room = f"{room} and nothing it may preempt"
        if w.one_host:  # whole hosts that hold it together are no use to it
            room = f"{room}; it waits for one host with {_gpus(w.gpus)} (asked on one host)"
        if blocker is not None:
            # as Slurm's Priority: higher-ranked work waits for GPUs too, and takes
            # them first as they free up
            position, b = blocker
            return (
                "Priority",
                f"behind {ahead} higher-ranked pending workload{'s' if ahead != 1 else ''}, "
                f"of which {b.id} of {b.allocation} (position {position}) gets GPUs first "
                f"as they free up; now {room}",
                b,
            )
        return "Resources", room, None


def _over_user_limit(w: Workload, path: str, cap: int, held: int) -> str:
    """The detail of QOSMaxGRESPerUser (Slurm's reason for MaxTRESPerUser=gres/gpu)."""
    return (
        f"{w.actor}'s allocated work under {path} holds {_gpus(held)}; {_gpus(w.gpus)} more "
        f"would pass the {_gpus(cap)} {path} allows each user at once (max_gpus_per_user): "
        "it starts as that work ends, and other users' work goes ahead of it meanwhile"
    )


def _fair_share(state: State, ranking: Any, path: str) -> dict[str, Any]:
    """An allocation's rank, fair-share ratio (None: infinite, a zero share) and share."""
    node = state.tree.nodes.get(path)
    return {
        "rank": ranking.ranks.get(path),
        "ratio": num(ranking.ratios.get(path), 6),
        "share": None if node is None else num(node.share, 6),
    }


def _beyond_the_cluster(s: State, w: Workload, could_hold: bool) -> tuple[str, str] | None:
    """Why `w` could not start even on an empty cluster, or None. More GPUs than are
    registered (hosts removed or shrunk since it was accepted): Slurm's PartitionConfig,
    it waits until hosts are registered or grow. Otherwise the unhealthy hosts it needs:
    Resources, it waits for their repair."""
    if w.gpus > s.capacity:
        return (
            "PartitionConfig",
            f"needs {_gpus(w.gpus)}; cluster {s.cluster} has {s.capacity} registered "
            "(hosts removed or shrunk since it was accepted): it cannot start until hosts "
            "are registered or grow; cancel it or submit it again with fewer GPUs",
        )
    if w.one_host:
        return _beyond_every_host(s, w, could_hold)
    if could_hold or w.gpus <= s.healthy_capacity:
        # work bigger than every healthy host is a gang of them, and the headroom is never
        # every host of the biggest size: what the healthy hosts hold together, they hold
        return None
    down = [h.name for h in sorted(s.hosts.values(), key=lambda h: h.index) if not h.healthy]
    return (
        "Resources",
        f"needs {_gpus(w.gpus)}; {s.healthy_capacity} of the cluster's {s.capacity} are "
        f"healthy: it waits for unhealthy {_some_hosts(down)} to be repaired" + _held_down_note(s),
    )


def _beyond_every_host(s: State, w: Workload, could_hold: bool) -> tuple[str, str] | None:
    """`_beyond_the_cluster` for work asked on one host: no registered host is that big
    (removed or shrunk since it was accepted), or those that are are unhealthy."""
    if could_hold:
        return None
    big = [h for h in sorted(s.hosts.values(), key=lambda h: h.index) if h.gpus >= w.gpus]
    if not big:
        return (
            "PartitionConfig",
            f"needs {_gpus(w.gpus)} on one host; the biggest host of cluster {s.cluster} has "
            f"{max(s.host_sizes, default=0)} (hosts removed or shrunk since it was accepted): "
            "it cannot start until a host that big is registered; cancel it or submit it "
            "again with fewer GPUs or without --one-host",
        )
    down = [h.name for h in big if not h.healthy]
    if len(down) < len(big):
        return None  # a healthy host that big is kept as headroom: said as Headroom
    return (
        "Resources",
        f"needs {_gpus(w.gpus)} on one host; the hosts that big are unhealthy: it waits "
        f"for one host, {_some_hosts(down)}, to be repaired" + _held_down_note(s),
    )


def beyond_the_cluster(source: JournalView | Iterable[Any], wid: str) -> str | None:
    """ "REASON: detail" when pending `wid` could not start even on an emptied cluster
    (`_beyond_the_cluster`), else None."""
    view = _view(source)
    s = view.require()
    w = s.workloads.get(wid)
    if w is None or w.state != PENDING:
        return None
    cycle = _Reasons.build(s).cycle
    found = _beyond_the_cluster(s, w, cycle.could_hold(w, s.short_small(w)))
    return None if found is None else f"{found[0]}: {found[1]}"


def _some_hosts(names: list[str], most: int = 8) -> str:
    shown = nodelist(names[:most])
    return shown if len(names) <= most else f"{shown} and {len(names) - most} more"


def _no_room(s: Any, gpus: int, single: bool) -> str:
    """Why `gpus` GPUs do not fit on the free ones: none free, or too few on one host
    (a gang, `single` False: not enough whole hosts free). "no free GPUs" beside a host
    with six free read as a bug."""
    free = sum(len(h.free) for h in s.hosts.values() if h.healthy)
    if not free:
        return "no free GPUs" + _held_down_note(s)
    if not single:
        return f"{_gpus(free)} free, but not {gpus} on whole hosts" + _held_down_note(s)
    return f"{_gpus(free)} free, but no host has {gpus} of them" + _held_down_note(s)


def _held_down_note(s: Any) -> str:
    """Hosts reported healthy but held down for flapping (health_holddown): they take
    work again when the hold-down ends, which the reader may be waiting for."""
    if not s.held_down:
        return ""
    until = min(s.held_down.values())
    names = sorted(s.held_down, key=id_order)
    return (
        f"; {_some_hosts(names)} held down for flapping until {iso(until)}"
        if len(names) == 1
        else f"; {_some_hosts(names)} held down for flapping, the first until {iso(until)}"
    )


def _gpus(n: int) -> str:
    return f"{n} GPU{'' if n == 1 else 's'}"


def _key_json(key: tuple[Any, ...]) -> list[Any]:
    out: list[Any] = []
    for part in key:
        if isinstance(part, float) and not math.isfinite(part):
            out.append(None)
        elif isinstance(part, bool | int | float | str) or part is None:
            out.append(part)
        else:
            out.append(str(part))
    return out


def matches_allocation(path: str, wanted: str | Collection[str] | None) -> bool:
    """`wanted` is the path or one above it (a trailing / is ignored; empty: any), or
    several such."""
    if not wanted:
        return True
    if not isinstance(wanted, str):
        return any(matches_allocation(path, one) for one in wanted)
    wanted = wanted.rstrip("/")
    return path == wanted or path.startswith(wanted + "/")


def ended_detail(ended: dict[str, Any]) -> str:
    """`exit 137: OOM-killed`: what the launcher said of a finished workload ("" if nothing)."""
    code, reason = ended.get("exit_code"), ended.get("reason")
    text = f"exit {code}" if code is not None else ""
    if reason:
        text = f"{text}: {reason}" if text else reason
    return text


def split_names(text: str | None) -> list[str] | None:
    """`a, b`: the names of a comma-separated filter (`-u a,b`, `?user=a,b`); None when
    it names none (no filter)."""
    if text is None:
        return None
    return [n.strip() for n in text.split(",") if n.strip()] or None


def matches_user(actor: str, wanted: str | Collection[str] | None) -> bool:
    """`wanted` is the user, or several (None: anyone)."""
    if wanted is None:
        return True
    return actor == wanted if isinstance(wanted, str) else actor in wanted


def queue_rows(
    source: JournalView | Iterable[Any],
    *,
    user: str | Collection[str] | None = None,
    allocation: str | Collection[str] | None = None,
    ids: Collection[str] | None = None,
    states: Collection[str] | None = None,
    hosts: Collection[str] | None = None,
    names: Collection[str] | None = None,
) -> list[QueueRow]:
    """Live workloads: pending first, in the order the scheduler would consider them
    (the ordering policy's rank and sort key, as `domain.decide` merges its buckets),
    then running ones by start time. `allocation` matches the path and what is under it;
    `ids` a workload id or a job array's base id (`BASE` matches `BASE_<index>`);
    `states` PENDING and/or RUNNING; `hosts` work running on any of them; `names`
    workloads with one of these names. This is the one selection of live work: `allot
    queue` shows it and `allot cancel/hold/release/requeue` with filters act on it.

    Each row: id, name, allocation, user, state (PENDING/RUNNING), gpus, time_s (pending:
    waited since it last became pending; running: run time of this attempt), reason,
    detail, nodelist, hosts, and the sort keys (position, rank, ratio, priority,
    submitted, sort_key) for a long view.
    """
    view = _view(source)
    state = view.require()
    now = state.now
    reasons = _Reasons.build(state)
    ranking = reasons.ranking
    policy = state.ordering
    pending: list[tuple[Any, Workload, bool]] = []
    running: list[Workload] = []
    held: list[Workload] = []  # out of the scheduler's order until released
    for w in state.workloads.values():
        if w.state == RUNNING:
            running.append(w)
        elif w.on_hold:
            held.append(w)
        else:
            allocated = state.allocated(w)
            pending.append((policy.sort_key(ranking, w, allocated), w, allocated))
    pending.sort(key=lambda item: item[0])
    running.sort(key=lambda w: (w.start, w.id))
    reasons.plan(pending)

    rows: list[QueueRow] = []
    first = pending[0][1] if pending else None
    blocker: tuple[int, Workload] | None = None  # the first pending that waits for GPUs
    positions: dict[str, int] = {}

    def wanted(w: Workload) -> bool:
        return _wanted(w, user, allocation, ids) and _matches(w, states, hosts, names)

    for position, (key, w, allocated) in enumerate(pending, start=1):
        if wanted(w):
            reason, detail, named = reasons.reason(
                w, allocated, position - 1, first if position > 1 else None, blocker
            )
            h = view.histories.get(w.id)
            since = h.pending_since if h and h.pending_since is not None else w.submit_time
            row = _row(view, w, "PENDING", now - since, reason, detail, ranking)
            row.update(position=position, allocated=allocated, sort_key=_key_json(key))
            # the workload ahead that the detail names, with its fair-share numbers
            row["ahead"] = (
                None
                if named is None
                else {
                    "id": named.id,
                    "allocation": named.allocation,
                    "position": positions.get(named.id),
                    **_fair_share(state, ranking, named.allocation),
                }
            )
            rows.append(row)
        positions[w.id] = position
        if blocker is None and reasons.waits_for_gpus(w):
            blocker = (position, w)
    for w in sorted(held, key=lambda w: (w.submit_time, id_order(w.id))):
        if not wanted(w):
            continue
        h = view.histories.get(w.id)
        who, when = h.held if h and h.held else ("?", now)
        detail = f"held by {who} since {clock(when, now)}; `allot release {w.id}` queues it again"
        since = h.pending_since if h and h.pending_since is not None else w.submit_time
        row = _row(view, w, "PENDING", now - since, "Held", detail, ranking)
        row.update(position=None, allocated=state.allocated(w), sort_key=None)
        rows.append(row)
    for w in running:
        if not wanted(w):
            continue
        if w.charged and w.protected_until > now:
            if math.isinf(w.protected_until):
                reason, detail = "protected", "non-preemptible (legacy priority) until it ends"
            else:
                reason = f"protected until {clock(w.protected_until, now)}"
                detail = f"protected for {format_duration(w.protected_until - now)} more"
        else:
            reason = "preemptible"
            detail = (
                "charged; protection ended, runs while its allocation out-ranks waiting work"
                if w.charged
                else "unallocated: free, preemptible by any allocated work"
            )
        cordoned = [h for h in w.hosts if not state.hosts[h].healthy]
        if cordoned:
            detail += f"; host {nodelist(cordoned)} unhealthy: preempted when protection ends"
        usage = utilization_of(view, w)
        if usage is not None:
            detail += "; " + utilization_text(usage)
            if usage["idle"]:
                reason += f"; idle {format_duration(usage['idle_s'])}"
        row = _row(view, w, "RUNNING", now - w.start, reason, detail, ranking)
        row.update(
            position=None,
            allocated=w.charged,
            attempt=w.attempt,
            started=iso(w.start),
            charged=w.charged,
            protected_until=iso(w.protected_until),
            usage=usage,
        )
        rows.append(row)
    return rows


def _wanted(
    w: Workload,
    user: str | Collection[str] | None,
    allocation: str | Collection[str] | None,
    ids: Collection[str] | None,
) -> bool:
    return (
        matches_user(w.actor, user)
        and matches_allocation(w.allocation, allocation)
        and (ids is None or w.id in ids or w.id.rsplit("_", 1)[0] in ids)
    )


def _matches(
    w: Workload,
    states: Collection[str] | None,
    hosts: Collection[str] | None,
    names: Collection[str] | None,
) -> bool:
    return (
        (states is None or ("RUNNING" if w.state == RUNNING else "PENDING") in states)
        and (hosts is None or any(h in hosts for h in w.hosts))
        and (names is None or w.name in names)
    )


def _nodes(state: State, w: Workload) -> int | None:
    """squeue's %D: the hosts running work holds; for waiting work the hosts it will
    take — one when it fits on the largest host, else whole hosts of the cluster's one
    host size — and None on a cluster of mixed sizes, where that depends on which hosts
    free up (or with no host registered)."""
    if w.hosts:
        return len(w.hosts)
    if not state.hosts:
        return None
    if state.single_host(w):
        return 1
    if state.smallest_host != state.largest_host:
        return None
    return -(-w.gpus // state.largest_host)


def _gpus_per_node(state: State, w: Workload) -> int | None:
    """squeue's tres-per-node (%b): the GPUs it holds (running) or will hold (waiting) on
    each of its hosts. A gang takes whole hosts, so on 8-GPU hosts 16 GPUs read as 8 per
    node on 2 nodes, as Slurm's `--gres=gpu:8 -N 2`; 12 GPUs hold 8 per node too (it
    is charged for them). None when its hosts differ in what they give it (or, waiting,
    on a cluster of mixed host sizes, where that depends on which hosts free up)."""
    if w.hosts:
        counts = {len(gpus) for gpus in w.hosts.values()}
        return counts.pop() if len(counts) == 1 else None
    if not state.hosts:
        return None
    if state.single_host(w):
        return w.gpus
    if state.smallest_host != state.largest_host:
        return None
    return state.largest_host


def _row(
    view: JournalView,
    w: Workload,
    state_name: str,
    time_s: float,
    reason: str,
    detail: str,
    ranking: Any,
) -> QueueRow:
    return {
        "id": w.id,
        "name": w.name,
        "allocation": w.allocation,
        "user": w.actor,
        "state": state_name,
        "gpus": w.gpus,
        "time_s": round(max(0.0, time_s), 3),
        "reason": reason,
        "detail": detail,
        "nodelist": nodelist(w.hosts) if w.hosts else "",
        "hosts": {name: list(gpus) for name, gpus in w.hosts.items()},
        "nodes": _nodes(view.require(), w),
        "gpus_per_node": _gpus_per_node(view.require(), w),
        "cluster": view.cluster,
        "rank": ranking.ranks.get(w.allocation),
        "ratio": num(ranking.ratios.get(w.allocation), 6),
        "priority": w.priority,
        "min_runtime": w.min_runtime,
        "resumable": w.resumable,
        "one_host": w.one_host,
        "tags": list(w.tags),
        "submitted": iso(w.submit_time),
        "submit_time": w.submit_time,
        **_array_keys(w.id),
        # running: what is left of its protection (None: protected until it ends)
        "protected_left_s": _protected_left(w, view.now),
    }


def _array_keys(wid: str) -> dict[str, Any]:
    """squeue's ArrayJobID and ArrayTaskID: a job array's task BASE_N is (BASE, N); any
    other workload is its own array job, with no task index (None)."""
    base, _, index = wid.rpartition("_")
    if _task(wid) and index.isascii() and len(index) <= 18:  # int() of huge text is slow
        return {"array_job_id": base, "array_task_id": int(index)}
    return {"array_job_id": wid, "array_task_id": None}


def _protected_left(w: Workload, now: float) -> float | None:
    """Seconds of protection a running workload has left (0 once past it); a pending one
    gets its whole min runtime when placed. None: protected until it ends (legacy)."""
    if w.state != RUNNING:
        return w.min_runtime
    if not math.isfinite(w.protected_until):
        return None
    return round(max(0.0, w.protected_until - now), 3)


# ------------------------------------------------------------------ queue columns

# name -> (squeue's letter for it, or None: allot's own, by name only; header, cell)
QUEUE_COLUMNS: dict[str, tuple[str | None, str, Callable[[QueueRow], str]]] = {
    "id": ("i", "ID", lambda r: r["id"]),
    "name": ("j", "NAME", lambda r: r["name"] or ""),
    "allocation": ("a", "ALLOCATION", lambda r: r["allocation"]),
    "user": ("u", "USER", lambda r: r["user"]),
    "state": ("T", "STATE", lambda r: r["state"]),
    "st": ("t", "ST", lambda r: "PD" if r["state"] == "PENDING" else "R"),
    # squeue's %g is the group: allot's GPUs have no letter (%b is per node)
    "gpus": (None, "GPUS", lambda r: str(r["gpus"])),
    "time": ("M", "WAIT/TIME", lambda r: format_duration(r["time_s"])),
    "reason": ("r", "REASON", lambda r: r["reason"]),
    "nodelist": ("N", "NODELIST", lambda r: r["nodelist"]),
    # squeue's node count: blank for waiting gangs on a cluster of mixed host sizes
    "nodes": ("D", "NODES", lambda r: "" if r["nodes"] is None else str(r["nodes"])),
    # squeue's partition: allot's nearest analog is the cluster (one scheduler each)
    "partition": ("P", "PARTITION", lambda r: r["cluster"]),
    "reason_or_nodes": (
        "R",
        "NODELIST(REASON)",
        lambda r: r["nodelist"] if r["state"] == "RUNNING" else f"({r['reason']})",
    ),
    # %p, %k and %f until 2026-12: squeue's priority, comment and features
    "position": (None, "POS", lambda r: "" if r["position"] is None else str(r["position"])),
    "rank": (None, "RANK", lambda r: "" if r["rank"] is None else str(r["rank"])),
    "ratio": (None, "RATIO", lambda r: ratio_text(r["ratio"], r["rank"])),
    "priority": ("Q", "PRIO", lambda r: str(r["priority"])),
    "submitted": ("V", "SUBMITTED", lambda r: r["submitted"] or ""),
    "min_runtime": ("l", "MIN_RUNTIME", lambda r: format_duration(r["min_runtime"])),
    # squeue's %w is the wckey, the nearest Slurm analog of tags (%K was tags until
    # 2026-12: squeue's %K is the array task index)
    "tags": ("w", "TAGS", lambda r: ",".join(r["tags"])),
    # squeue's %F and %K: BASE and N of a job array's task BASE_N (N/A: not a task)
    "array_job_id": ("F", "ARRAY_JOB_ID", lambda r: r["array_job_id"]),
    "array_task_id": (
        "K",
        "ARRAY_TASK_ID",
        lambda r: "N/A" if r["array_task_id"] is None else str(r["array_task_id"]),
    ),
    # squeue's %b (tres-per-node): GPUs on each of its hosts (blank: they differ)
    "gres": (
        "b",
        "GRES",
        lambda r: "" if r["gpus_per_node"] is None else f"gres/gpu:{r['gpus_per_node']}",
    ),
    # squeue -O tres-per-job: the GPUs the job asks for, in all
    "tres_per_job": (None, "TRES_PER_JOB", lambda r: f"gres/gpu:{r['gpus']}"),
    # squeue's %L is the time left of its limit; allot has no limit, only protection
    "protected_left": (
        "L",
        "PROTECTED_LEFT",
        lambda r: (
            "UNLIMITED" if r["protected_left_s"] is None else format_duration(r["protected_left_s"])
        ),
    ),
    "detail": (None, "DETAIL", lambda r: r["detail"]),
    # the launcher's last GPU utilization reading of a running attempt, and how long
    # its readings have stayed below `idle_threshold` (blank: none reported)
    "util": (None, "UTIL", lambda r: _usage_cell(r, "utilization")),
    "idle": (None, "IDLE", lambda r: _usage_cell(r, "idle_s")),
    # asked for all its GPUs on one host (`submit --one-host`): never a gang
    "one_host": (None, "ONE_HOST", lambda r: "yes" if r["one_host"] else "no"),
    # from a forecast (`projections.forecast.annotate`): pending work only, as squeue's
    # as squeue's %S: the expected start of pending work, the actual one of running work
    "start": (
        "S",
        "START_TIME",
        lambda r: (
            (r.get("expected_start") or "N/A")[:16]
            if r["state"] == "PENDING"
            else (r.get("started") or "")[:16]
        ),
    ),
    "schednodes": ("Y", "SCHEDNODES", lambda r: r.get("expected_nodes") or ""),
}
FORECAST_COLUMNS = {"start", "schednodes"}


def _usage_cell(row: QueueRow, key: str) -> str:
    usage = row.get("usage")
    value = usage.get(key) if usage else None
    if value is None:
        return ""
    return f"{value:.0%}" if key == "utilization" else format_duration(value)


DEFAULT_COLUMNS = ["id", "allocation", "user", "state", "gpus", "time", "reason", "nodelist"]
NAME_WIDTH = 20  # the default queue's NAME: longer names are cut (--long shows them whole)


def default_columns(rows: list[QueueRow], base: list[str] | None = None) -> list[str]:
    """`allot queue`'s columns: `base` (DEFAULT_COLUMNS; START_COLUMNS for --start),
    with NAME after the id (as squeue's JOBID ... NAME, --start's too) when any row
    shown has a name; none takes no room."""
    base = DEFAULT_COLUMNS if base is None else base
    if not any(r["name"] for r in rows):
        return base
    return [base[0], "name", *base[1:]]


def short_name(name: str, width: int = NAME_WIDTH) -> str:
    """`name` cut to `width` characters, the last one '…' when cut."""
    return name if len(name) <= width else name[: width - 1] + "…"


LONG_COLUMNS = [
    "position",
    "id",
    "name",
    "allocation",
    "user",
    "state",
    "gpus",
    "time",
    "rank",
    "ratio",
    "priority",
    "submitted",
    "min_runtime",
    "reason",
    "nodelist",
    "detail",
]
START_COLUMNS = ["id", "allocation", "user", "gpus", "start", "schednodes", "reason"]
_BY_LETTER = {letter: name for name, (letter, _, _) in QUEUE_COLUMNS.items() if letter}
# squeue's %A: the job id, unique for each task of an array (allot's BASE_N)
_BY_LETTER["A"] = "id"
# squeue's %p: its priority as a number from 0 to 1; allot's nearest is --priority (%Q)
_BY_LETTER["p"] = "priority"
# squeue's letters for what allot has no equivalent of: refused, never read otherwise
# (%g, %k, %f and %p were allot's gpus, rank, ratio and position until 2026-12)
NOT_IN_ALLOT_LETTERS = {
    "g": ("group name", "allot knows no Unix groups; its GPUs: %b (per host) or -o gpus"),
    "k": ("comment", "allot keeps no comment; its tags: %w; its fair-share rank: -o rank"),
    "f": (
        "features",
        "allot has one GPU type per cluster and no host features; its fair-share ratio: -o ratio",
    ),
}
NOT_IN_ALLOT_NAMES = {
    "group": "group name",
    "groupname": "group name",
    "comment": "comment",
    "feature": "features",
    "features": "features",
}
# squeue's CPU, memory and disk fields: allot schedules GPUs only
_CPU_MEMORY_LETTERS = {
    "C": "CPUs",
    "c": "CPUs per node",
    "m": "memory",
    "d": "minimum temporary disk",
}
_CPU_MEMORY_NAMES = {
    "numcpus", "mincpus", "cpus-per-task", "tres-per-task", "minmemory", "mintmpdisk",
}  # fmt: skip
# columns holding a workload id: never cut (a cut id names nothing)
ID_COLUMNS = frozenset({"id", "array_job_id"})


def _gpus_only(what: str, instead: str) -> ViewError:
    return ViewError(
        f"{what}: allot schedules GPUs only and knows no CPUs, memory or disk; for GPUs: {instead}"
    )


def _not_in_allot(field: str, meaning: str, hint: str) -> ViewError:
    return ViewError(f"not supported by allot: {field} (Slurm's {meaning}); {hint}")


def parse_format(spec: str) -> list[str]:
    """Columns from `%i %a %u %T %b %M %r` (squeue's letters) or `id,user,gpus,reason`.
    squeue's letters allot has nothing for (%g group, %k comment, %f features; CPUs,
    memory, disk) are refused with why, never read as another field."""
    spec = spec.strip()
    if "%" in spec:
        letters = re.findall(r"%(?:\.?\d+)?([A-Za-z])", spec.replace("%%", ""))
        for letter in letters:
            if letter in _CPU_MEMORY_LETTERS:
                raise _gpus_only(f"%{letter} ({_CPU_MEMORY_LETTERS[letter]})", "%b or -o gpus")
            if letter in NOT_IN_ALLOT_LETTERS:
                raise _not_in_allot(f"%{letter}", *NOT_IN_ALLOT_LETTERS[letter])
        unknown = [f"%{c}" for c in letters if c not in _BY_LETTER]
        if unknown or not letters:
            known = " ".join(f"%{letter}={name}" for letter, name in _BY_LETTER.items())
            what = (
                f"unknown format field {' '.join(unknown)}" if unknown else f"no field in {spec!r}"
            )
            raise ViewError(f"{what}; known: {known}")
        return [_BY_LETTER[c] for c in letters]
    names = [n.strip().lower() for n in re.split(r"[,\s]+", spec) if n.strip()]
    unknown = [n for n in names if n not in QUEUE_COLUMNS]
    if unknown or not names:
        what = ", ".join(unknown) if unknown else repr(spec)
        raise ViewError(f"unknown column {what}; known: {', '.join(QUEUE_COLUMNS)}")
    return names


_FIELD = re.compile(r"%%|%(\.)?(\d+)?([A-Za-z])")
MAX_FIELD_WIDTH = 1000  # wider than any terminal; a typo's width would fill memory


def format_template(spec: str) -> list[tuple[str, str | None, int | None, bool]] | None:
    """squeue's literal `-o`: `%i|%u|%T`, `%.18i %9u` — text between fields is kept and
    `%[.]W` pads (right-aligned with the dot) or cuts a field to W characters, as squeue
    does. None when the format is fields separated by spaces only, with no widths: those
    print as aligned columns. Parts: (literal before, column, width, right-aligned), the
    last one (trailing literal, None, None, False)."""
    if "%" not in spec:
        return None
    parse_format(spec)  # unknown letters: the same error
    parts: list[tuple[str, str | None, int | None, bool]] = []
    at = 0
    for m in _FIELD.finditer(spec):
        if m[0] == "%%":  # printf's literal %
            continue
        width = int(m[2]) if m[2] else None
        if width is not None and width > MAX_FIELD_WIDTH:
            raise ViewError(f"{m[0]!r}: a field is at most {MAX_FIELD_WIDTH:,} characters wide")
        literal = spec[at : m.start()].replace("%%", "%")
        parts.append((literal, _BY_LETTER[m[3]], width, bool(m[1])))
        at = m.end()
    parts.append((spec[at:].replace("%%", "%"), None, None, False))
    literal = "".join(text for text, *_ in parts)
    if not literal.strip() and all(width is None for _, _, width, _ in parts):
        return None
    return parts


def render_template(parts: list[tuple[str, str | None, int | None, bool]], cells: list[str]) -> str:
    """One line of `format_template` parts filled with `cells` (one per column part)."""
    out: list[str] = []
    values = iter(cells)
    for text, column, width, right in parts:
        out.append(text)
        if column is None:
            continue
        value = next(values)
        if width is not None:
            value = value[:width].rjust(width) if right else value[:width].ljust(width)
        out.append(value)
    return "".join(out)


Template = list[tuple[str, str | None, int | None, bool]]

# squeue -O's field names for allot's columns (allot's own names are taken too)
SQUEUE_LONG_NAMES = {
    "jobid": "id",
    "jobarrayid": "id",
    "username": "user",
    "account": "allocation",
    "statecompact": "st",
    "cluster": "partition",
    "timeused": "time",
    "numnodes": "nodes",
    "reasonlist": "reason_or_nodes",
    "submittime": "submitted",
    "starttime": "start",
    "prioritylong": "priority",
    "timelimit": "min_runtime",
    "timeleft": "protected_left",
    "arrayjobid": "array_job_id",
    "arraytaskid": "array_task_id",
    "tres-per-node": "gres",
    "tres-per-job": "tres_per_job",
    "wckey": "tags",
}
LONG_FORMAT_WIDTH = 20  # squeue -O's width for a field given without one
_LONG_FIELD = re.compile(r"^(?P<name>[^:]+)(?::(?P<right>\.)?(?P<width>\d*)(?P<suffix>.*))?$")


def parse_long_format(spec: str) -> tuple[list[str], Template]:
    """squeue -O/--Format: `JobID:20,Name:.30,State`, each field `type[:[.][size][suffix]]`
    in any case: squeue's names (jobid, name, username, account, state, statecompact,
    partition, timeused, numnodes, reasonlist, reason, nodelist, submittime, starttime,
    priority, timelimit) or allot's column names. As squeue, a field without a size is
    20 characters wide, size 0 (or none after the colon) prints it whole, '.'
    right-justifies, and the suffix is
    printed after it (no space is added between fields). The columns, and the parts
    `render_template` fills."""
    columns: list[str] = []
    parts: Template = []
    before = ""
    unknown = []
    for token in (t.strip() for t in spec.split(",")):
        if not token:
            continue
        m = _LONG_FIELD.match(token)
        if m is None:
            unknown.append(token)
            continue
        name = m["name"].strip().lower()
        if name in _CPU_MEMORY_NAMES:
            raise _gpus_only(f"--Format {m['name'].strip()}", "tres-per-node or gpus")
        if name in NOT_IN_ALLOT_NAMES:
            raise _not_in_allot(
                f"--Format {m['name'].strip()}", NOT_IN_ALLOT_NAMES[name], "see --help"
            )
        name = SQUEUE_LONG_NAMES.get(name, name)
        if name not in QUEUE_COLUMNS:
            unknown.append(m["name"].strip())
            continue
        # no colon: 20; a colon without a size (`Name:`, `Name:|`) or size 0: whole
        width = LONG_FORMAT_WIDTH if m["width"] is None else int(m["width"] or 0)
        if width > MAX_FIELD_WIDTH:
            raise ViewError(f"{token!r}: a field is at most {MAX_FIELD_WIDTH:,} characters wide")
        columns.append(name)
        parts.append((before, name, width or None, bool(m["right"])))
        before = m["suffix"] or ""
    if unknown or not columns:
        known = sorted({*SQUEUE_LONG_NAMES, *QUEUE_COLUMNS})
        what = f"unknown field {', '.join(unknown)}" if unknown else f"no field in {spec!r}"
        raise ViewError(f"--Format: {what}; known: {', '.join(known)}")
    parts.append((before, None, None, False))
    return columns, parts


def whole_ids(parts: Template, lines: list[list[str]]) -> Template:
    """`parts` with the id column widened to the longest id in `lines`, and a space after
    it, when its width would cut one: squeue's habitual `%.18i` fits Slurm's numbers, but a cut
    ULID names nothing (and a job array's tasks would all read alike)."""
    out: Template = []
    at = 0  # the cell of each column part
    widened = False
    for text, column, width, right in parts:
        if widened and not text[:1].isspace():
            text = " " + text  # so the widened id does not run into what follows
        widened = False
        if column in ID_COLUMNS and width is not None:
            longest = max(len(line[at]) for line in lines)
            widened = longest > width
            width = max(longest, width)
        at += column is not None
        out.append((text, column, width, right))
    return out


# what `queue -S` compares for a column: its value, not its text (durations, counts and
# times as numbers, array tasks by index); columns not named here compare by their text
_SORT_VALUES: dict[str, Callable[[QueueRow], Any]] = {
    "id": lambda r: id_order(r["id"]),
    "array_job_id": lambda r: id_order(r["array_job_id"]),
    "array_task_id": lambda r: r["array_task_id"],
    "gpus": lambda r: r["gpus"],
    "tres_per_job": lambda r: r["gpus"],
    "gres": lambda r: r["gpus_per_node"],
    "time": lambda r: r["time_s"],
    "nodes": lambda r: r["nodes"],
    "position": lambda r: r["position"],
    "rank": lambda r: r["rank"],
    "ratio": lambda r: r["ratio"],
    "priority": lambda r: r["priority"],
    "submitted": lambda r: r["submit_time"],
    "min_runtime": lambda r: r["min_runtime"],
    # None: protected until it ends, squeue's UNLIMITED: the most left
    "protected_left": lambda r: (
        math.inf if r["protected_left_s"] is None else r["protected_left_s"]
    ),
    # squeue -S t: PD before R, as its job states' order
    "st": lambda r: r["state"],
    "state": lambda r: r["state"],
    # pending work's expected start (a forecast's); N/A and running work: missing
    "start": lambda r: r.get("expected_start_time") if r["state"] == "PENDING" else None,
}


def parse_sort(spec: str) -> list[tuple[str, bool]]:
    """squeue -S/--sort: `-t,i`, `u`, `+P,-p`: squeue's format letters (without '%'),
    -O's field names or allot's column names, comma-separated, each '+' ascending (the
    default) or '-' descending. [(column, descending)]; ViewError naming the fields."""
    keys = []
    for token in (t.strip() for t in spec.split(",")):
        if not token:
            continue
        descending = token.startswith("-")
        field = token.lstrip("+-").strip()
        column = _BY_LETTER.get(field) if len(field) == 1 else None
        if column is None:
            lowered = field.lower()
            column = SQUEUE_LONG_NAMES.get(lowered, lowered)
        if column not in QUEUE_COLUMNS:
            letters = "".join(sorted(_BY_LETTER))
            raise ViewError(
                f"--sort {token!r}: unknown field; use squeue's letters ({letters}), "
                "-O's field names or allot's column names, e.g. -S -t,i or -S u"
            )
        keys.append((column, descending))
    if not keys:
        raise ViewError("--sort names no field; e.g. -S -t,i (state descending, then id)")
    return keys


def sort_rows(rows: list[QueueRow], keys: list[tuple[str, bool]]) -> list[QueueRow]:
    """`rows` sorted by `keys` (`parse_sort`), as squeue -S; rows equal on every key
    keep their order (the queue's own). Missing values (a pending job's nodes, an
    unranked allocation) come last either way."""
    out = list(rows)
    for column, descending in reversed(keys):  # stable: the first key sorts last
        value = _SORT_VALUES.get(column) or QUEUE_COLUMNS[column][2]

        def key(
            r: QueueRow, value: Callable[[QueueRow], Any] = value, down: bool = descending
        ) -> tuple[bool, Any]:
            v = value(r)
            return ((v is None) != down, 0 if v is None else v)

        out.sort(key=key, reverse=descending)
    return out


def queue_cells(rows: list[QueueRow], columns: list[str]) -> tuple[list[str], list[list[str]]]:
    """(headers, cells) of `rows` for `columns` (names of QUEUE_COLUMNS)."""
    headers = [QUEUE_COLUMNS[c][1] for c in columns]
    cells = [[QUEUE_COLUMNS[c][2](r) for c in columns] for r in rows]
    return headers, cells


# ------------------------------------------------------------------ hosts

HostRow = dict[str, Any]


def drains_by(state: Any, host: Any) -> float | None:
    """When a draining host should be empty: its work leaves as its protection ends
    (at once when past it). None when healthy, empty, or holding work protected until it
    ends (legacy-priority's non-preemptible work)."""
    if host.healthy or not host.workloads:
        return None
    ends = [state.workloads[w].protected_until for w in host.workloads if w in state.workloads]
    if not ends or not math.isfinite(max(ends)):
        return None
    return max(max(ends), state.now)


def held_down_reason(state: Any, host: Any, health: tuple[Any, ...] | None) -> str:
    """Why a host reported healthy takes no work: it failed again soon after its last
    return (config health_holddown), and until when it waits."""
    who = f", by {health[1]}" if health else ""
    return (
        f"flapping: reported healthy{who}, held down until {iso(host.held_until)} "
        f"(health_holddown {format_duration(state.config.health_holddown)}; "
        f"`allot host health {host.name} --healthy --force` returns it now)"
    )


def held_down_after_report(source: JournalView | Iterable[Any], name: str) -> str | None:
    """After an accepted healthy report of host `name`: the truth when it takes no work
    even so (held down for flapping), as `host list` shows it; None when it is not held."""
    row = next((r for r in host_rows(source) if r["host"] == name), None)
    if row is None or row["state"] != "held":
        return None
    holddown = format_duration(_view(source).require().config.health_holddown)
    return (
        f"Host {name} reported healthy; it stays held down until {row['held_until']} UTC: "
        f"it failed again within health_holddown {holddown} of its last return "
        f"(flapping). `allot host health {name} --healthy --force` returns it now"
    )


def host_rows(source: JournalView | Iterable[Any]) -> list[HostRow]:
    """Every registered host in registration order, as `sinfo -N` lists nodes: state
    (idle, mixed, allocated; draining = unhealthy with work still on it, drained =
    unhealthy and empty), GPUs, held and free, its workloads, and for an unhealthy host
    since when, who reported it and why. A healthy host kept for short jobs says so."""
    view = _view(source)
    state = view.require()
    now = state.now
    rows: list[HostRow] = []
    for host in sorted(state.hosts.values(), key=lambda h: h.index):
        held = sum(host.workloads.values())
        health = view.host_health.get(host.name)
        if host.healthy:
            name = "idle" if not held else "allocated" if not host.free else "mixed"
            since = None
            reason = "headroom (short jobs)" if host.name in state.headroom else ""
        elif host.held_until is not None:
            name = "held"
            since = health[0] if health else None
            reason = held_down_reason(state, host, health)
        else:
            name = "draining" if host.workloads else "drained"
            since = health[0] if health else None
            who, why_ = (health[1], health[2]) if health else ("?", "")
            reason = f"{why_ or 'unhealthy'} (by {who})"
        rows.append(
            {
                "host": host.name,
                "state": name,
                "healthy": host.healthy,
                "gpus": host.gpus,
                "held": held,
                "free": len(host.free) if host.healthy else 0,
                "workloads": sorted(host.workloads, key=id_order),
                "since": iso(since),
                "since_s": None if since is None else round(now - since, 3),
                "drained_at": iso(view.host_drained.get(host.name)),
                "drains_by": iso(drains_by(state, host)),
                "held_until": iso(host.held_until),
                "reason": reason,
            }
        )
    return rows


def host_reason_rows(
    source: JournalView | Iterable[Any], *, removed: bool = False
) -> list[HostRow]:
    """The hosts not taking work and why, as `sinfo -R` lists them: unhealthy hosts
    (draining or drained) in registration order; with `removed`, then the hosts removed
    from the cluster in the order they were removed (sinfo -R forgets a node deleted
    from the cluster: a list of every host ever decommissioned buried the ones to
    repair). Each: who reported it, why, since when (and when it drained)."""
    view = _view(source)
    state = view.require()
    rows: list[HostRow] = []
    for host in sorted(state.hosts.values(), key=lambda h: h.index):
        if host.healthy:
            continue
        health = view.host_health.get(host.name)
        when, who, why_, _ = health or (None, "?", "", False)
        held = host.held_until is not None
        rows.append(
            {
                "host": host.name,
                "state": "held" if held else "draining" if host.workloads else "drained",
                "gpus": host.gpus,
                "reason": held_down_reason(state, host, health) if held else why_ or "unhealthy",
                "by": who,
                "since": iso(when),
                "drained_at": iso(view.host_drained.get(host.name)),
                "drains_by": iso(drains_by(state, host)),
                "held_until": iso(host.held_until),
            }
        )
    for name, (when, who, why_, gpus) in sorted(
        view.host_removed.items() if removed else (), key=lambda item: item[1][0]
    ):
        rows.append(
            {
                "host": name,
                "state": "removed",
                "gpus": gpus,
                "reason": why_ or "removed",
                "by": who,
                "since": iso(when),
                "drained_at": None,
                "drains_by": None,
            }
        )
    return rows


# ------------------------------------------------------------------ shares

ShareRow = dict[str, Any]


def share_rows(source: JournalView | Iterable[Any]) -> list[ShareRow]:
    """The budget tree depth first, siblings in Fair-Tree order (fair-share ratio
    ascending; ties: larger share, then path), so leaf ranks read top down.

    Each row: path, name, depth, leaf, weight, share, usage_gpu_h (charged in the
    window as of the last bucket edge, `ratios_as_of` in the header: ratios and ranks
    are read from it), ratio (None = infinite: zero share),
    rank (leaves), running (charged GPUs now), unallocated (GPUs running unallocated),
    entitled and entitled_gpus (the same: share x healthy capacity, in GPUs now, where
    `allot usage`'s entitled_gpu_h is GPU-hours over a period), pending (GPUs of
    pending work), managers and
    members (as `allot budget set` last gave them), members_active (False on an
    allocation with children: its members may not submit there, nor below it, until
    it is a leaf again).
    """
    view = _view(source)
    state = view.require()
    now = state.now
    tree = state.tree
    ranking = fair_tree(state, now)
    ranked_usage = state.charged.ranked_reader(now)  # what the ratios were read from
    pending: dict[str, int] = {}
    for w in state.workloads.values():
        if w.state == PENDING:
            for p in _ancestors(w.allocation):
                pending[p] = pending.get(p, 0) + w.gpus
    rows: list[ShareRow] = []

    def visit(paths: list[str], depth: int) -> None:
        ratios = {p: ranking.ratios.get(p, fair_ratio(state, p, now)) for p in paths}
        for p in sorted(paths, key=lambda p: (ratios[p], -tree.nodes[p].share, p)):
            node = tree.nodes[p]
            rows.append(
                {
                    "path": p,
                    "name": p.rsplit("/", 1)[-1],
                    "depth": depth,
                    "leaf": not node.children,
                    "weight": node.weight,
                    "share": num(node.share, 6),
                    "usage_gpu_h": round(ranked_usage(p) / 3_600_000.0, 3),
                    "ratio": num(ratios[p], 6),
                    "rank": ranking.ranks.get(p),
                    "running": state.charged.rate(p),
                    "unallocated": state.unallocated.rate(p),
                    # GPUs now (`allot usage`'s entitled_gpu_h is GPU-hours over a period)
                    "entitled": round(node.share * state.healthy_capacity, 2),
                    "entitled_gpus": round(node.share * state.healthy_capacity, 2),
                    "pending": pending.get(p, 0),
                    "managers": list(node.managers),
                    "members": list(node.members),
                    # members may submit to a leaf only: on an allocation given children
                    # since, they are kept (a leaf again, it takes them back) but idle
                    "members_active": not node.children,
                    # per-user limits set on this node, over its subtree (None: none)
                    "max_gpus_per_user": node.max_gpus_per_user,
                    "max_pending_per_user": node.max_pending_per_user,
                }
            )
            if node.children:
                visit(node.children, depth + 1)

    visit(tree.roots, 0)
    return rows


def user_roles(row: ShareRow, users: Iterable[str]) -> dict[str, list[str]]:
    """How each of `users` is named on a share row: {"alice": ["member"]}, only those
    named (a manager named as member too has both)."""
    roles: dict[str, list[str]] = {}
    for user in users:
        named = [role for role in ("manager", "member") if user in row[role + "s"]]
        if named:
            roles[user] = named
    return roles


def rows_of_users(rows: list[ShareRow], users: Collection[str]) -> list[ShareRow]:
    """The share rows that name one of `users` as manager or member, and the allocations
    above them for context (as sshare -u lists the accounts above a user's associations),
    in `rows`' order; each with `user_roles` (empty on a row shown for context)."""
    named = {r["path"] for r in rows if user_roles(r, users)}
    shown = {above for path in named for above in _ancestors(path)}
    return [{**r, "user_roles": user_roles(r, users)} for r in rows if r["path"] in shown]


def _ancestors(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def shares_header(source: JournalView | Iterable[Any]) -> dict[str, Any]:
    """What the share numbers are relative to."""
    view = _view(source)
    state = view.require()
    edge = state.charged.last_edge(state.now)
    return {
        "cluster": state.cluster,
        "now": iso(state.now),
        "time": state.now,
        "policy": state.ordering.name,
        "window_s": state.config.window,
        # usage (and the ratios) cover [usage_since, ratios_as_of]: the window to the
        # last bucket edge
        "usage_since": iso(edge - state.config.window),
        "ratios_as_of": iso(edge),
        "bucket_s": state.config.bucket,
        "capacity": state.capacity,
        "healthy_capacity": state.healthy_capacity,
    }


# ------------------------------------------------------------------ why


def find_workload(view: JournalView, wid: str) -> str:
    """`wid` itself, or the one workload id it is a unique prefix of; else ViewError
    listing close matches."""
    if not wid.strip():  # '' starts every id
        raise ViewError("an empty workload id names nothing; `allot queue` lists them")
    histories = view.histories
    h = histories.get(wid)
    if h is not None and _names_a_workload(h):
        return wid
    known = [k for k, h in histories.items() if _names_a_workload(h)]
    task = _task_of_a_prefix(known, wid)
    if task is not None:
        return task
    prefixed = [k for k in known if k.startswith(wid)]
    if len(prefixed) == 1:
        # a prefix names its workload even after a refused request sent the prefix as
        # given (`allot cancel PREFIX` of ended work)
        return prefixed[0]
    if h is not None and not prefixed:  # only refused requests (a hold, a cancel) named it
        refused = "; ".join(
            f"{r.input_type or r.type} from {r.actor} at {iso(r.time)}: {r.error}"
            for r in h.rejections[:3]
        )
        raise ViewError(f"no workload {wid!r}: only refused requests name it ({refused})")
    if prefixed:  # an ambiguous prefix, e.g. the shared time part of ULIDs
        shown = ", ".join(sorted(prefixed, key=id_order)[:5])
        more = f" and {len(prefixed) - 5} more" if len(prefixed) > 5 else ""
        bases = {k.rpartition("_")[0] for k in prefixed}
        array = bases.pop() if len(bases) == 1 and all(_task(k) for k in prefixed) else None
        raise ViewError(
            f"{wid!r} is the start of {len(prefixed)} workload ids ({shown}{more}); "
            "give more of the id" + (f", or `allot why {array}` for the job array" if array else "")
        )
    close = difflib.get_close_matches(wid, list(known), n=5, cutoff=0.5)
    hint = f"; did you mean: {', '.join(close)}?" if close else ""
    if not close and not known:
        hint = "; the journal has no workloads yet"
    elif not close:
        hint = "; `allot queue` lists live workloads"
    raise ViewError(f"no workload {wid!r} in the journal of cluster {view.cluster!r}{hint}")


def resolve_jobs(view: JournalView, ids: Collection[str] | None) -> set[str] | None:
    """`-j`'s ids as the views match them: a workload id, a job array's base id, or a
    unique prefix of one workload's id (as `allot why` takes); an id that names nothing
    is a ViewError (squeue: "Invalid job id specified"), not an empty answer."""
    if ids is None:
        return None
    histories = view.histories
    bases: set[str] = set()  # job arrays' bases (their tasks are BASE_<index>)
    for k, h in histories.items():
        head, _, index = k.rpartition("_")
        if head and index.isdigit() and _names_a_workload(h):
            bases.add(head)
    out: set[str] = set()
    for wid in ids:
        h = histories.get(wid)
        if (h is not None and _names_a_workload(h)) or wid in bases:
            out.add(wid)  # a workload, or a job array's base: its tasks match
            continue
        head, _, index = wid.rpartition("_")
        if index.isdigit() and head:  # PREFIX_3: task 3 of the array PREFIX starts
            base = _one_base(bases, head)
            if base is not None and f"{base}_{index}" in histories:
                out.add(f"{base}_{index}")
                continue
        base = _one_base(bases, wid)
        if base is not None and all(
            k.rpartition("_")[0] == base for k in histories if k.startswith(wid)
        ):
            out.add(base)  # the start of one array's base (and of nothing else)
            continue
        out.add(find_workload(view, wid))
    return out


def resolve_live(view: JournalView, wid: str) -> str:
    """For a request about a live workload (cancel, hold, release): `wid` itself when a
    live or recently ended workload has it, else the one live workload whose id it
    starts (`PREFIX_N`: task N of a job array whose base PREFIX starts), else the one
    recently ended one (the scheduler answers that it ended); `wid` unchanged when it
    starts none (the scheduler answers: unknown); ViewError listing them when it
    starts several live ones. Reads the state only, so a `live_only` view will do."""
    state = view.require()
    live = state.workloads
    if wid in live or wid in state.ended:
        return wid
    head, sep, index = wid.rpartition("_")
    if sep and head and index.isdigit():
        # task N of an array: never another index that merely starts with N (_1 -> _10)
        def starts(k: str) -> bool:
            base, _, n = k.rpartition("_")
            return n == index and base.startswith(head)
    else:

        def starts(k: str) -> bool:
            return k.startswith(wid)

    found = [k for k in live if starts(k)]
    if not found:
        # the prefix of a recently ended workload: sent whole, the scheduler says it
        # has ended (the prefix itself would be an unknown workload)
        ended = [k for k in state.ended if starts(k)]
        return ended[0] if len(ended) == 1 else wid
    if len(found) == 1:
        return found[0]
    found.sort(key=id_order)
    shown = ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
    bases = {k.rpartition("_")[0] for k in found}
    hint = "give more of the id"
    if len(bases) == 1 and all("_" in k and k.rpartition("_")[2].isdigit() for k in found):
        hint += f", or name tasks of the job array as '{bases.pop()}_[SPEC]'"
    raise ViewError(f"{wid!r} is the start of {len(found)} live workload ids ({shown}); {hint}")


def _task_of_a_prefix(known: Iterable[str], wid: str) -> str | None:
    """`PREFIX_N`, Slurm's BASE_INDEX with the base shortened to a prefix (as `-j` and
    `allot cancel` take it): task N of the one job array whose base PREFIX starts;
    None when it names none or several (never task 10 for `_1`)."""
    head, sep, index = wid.rpartition("_")
    if not (sep and head and index.isdigit()):
        return None
    found = {k for k in known if _task(k) and k.rpartition("_")[2] == index and k.startswith(head)}
    return found.pop() if len(found) == 1 else None


def _task(wid: str) -> bool:
    """Is `wid` a job array's task (BASE_<n>)?"""
    head, sep, index = wid.rpartition("_")
    return bool(sep and head and index.isdigit())


def _one_base(bases: set[str], prefix: str) -> str | None:
    """The one job array base `prefix` starts, if exactly one."""
    found = [b for b in bases if b.startswith(prefix)]
    return found[0] if len(found) == 1 else None


def _names_a_workload(h: History) -> bool:
    """Was it ever a workload (submitted, refused as a submission, or seen running)? A
    refused hold or cancel of a mistyped id leaves a history that is none of these."""
    return (
        h.submitted is not None
        or bool(h.placements or h.preemptions or h.caused or h.lost or h.ended)
        or any(r.input_type == "workload.submitted" for r in h.rejections)
    )


def history_records(view: JournalView, wid: str) -> list[dict[str, Any]]:
    """The journal's records about workload `wid`, in journal order, as the journal-shaped
    dicts `projections.timeline.timeline` reads (the audit database gives the same)."""
    h = view.histories.get(wid)
    if h is None:
        return []
    items: list[tuple[int, dict[str, Any]]] = []
    if h.submitted is not None:
        items.append((h.submitted_seq, h.submitted.model_dump()))
    for p in h.placements:
        record = {
            "type": "workload.placed",
            "time": p.time,
            "workload": wid,
            "attempt": p.attempt,
            "hosts": p.hosts,
            "charged": p.charged,
            "protected_until": p.protected_until,
            "explain": p.explain,
        }
        items.append((p.seq, record))
    for q in h.preemptions:
        record = {
            "type": "workload.preempted",
            "time": q.time,
            "workload": wid,
            "attempt": q.attempt,
            "reason": q.reason,
            "beneficiary": q.beneficiary,
            "requeued": q.requeued,
            "explain": q.explain,
        }
        items.append((q.seq, record))
    for lost in h.lost:
        record = {
            "type": "workload.finished",
            "time": lost.time,
            "workload": wid,
            "actor": lost.actor,
            "outcome": "lost",
            "attempt": lost.attempt,
            "requeued": True,
        }
        record.update(_said(lost.exit_code, lost.reason))
        items.append((lost.seq, record))
    for r in h.rejections:
        record = {
            "type": r.type,
            "time": r.time,
            "workload": wid,
            "actor": r.actor,
            "ref": r.ref,
            "error": r.error,
            "input_type": r.input_type,
        }
        items.append((r.seq, record))
    for seq, kind, actor, t in h.holds:
        items.append((seq, {"type": kind, "time": t, "workload": wid, "actor": actor}))
    e = h.ended
    if e is not None and e["how"] in ("finished", "cancelled"):
        record = {
            "type": f"workload.{e['how']}",
            "time": e["time"],
            "workload": wid,
            "actor": e.get("actor"),
        }
        if e["how"] == "finished":
            record["outcome"] = e.get("outcome")
            record["attempt"] = e.get("attempt")
            record.update(_said(e.get("exit_code"), e.get("reason")))
        items.append((h.ended_seq, record))
    items.sort(key=lambda item: item[0])
    return [record for _, record in items]


def _said(exit_code: int | None, reason: str | None) -> dict[str, Any]:
    """What a launcher's report said, as its record's keys (absent when it said nothing)."""
    return {k: v for k, v in (("exit_code", exit_code), ("reason", reason)) if v is not None}


def why(source: JournalView | Iterable[Any], workload_id: str) -> dict[str, Any]:
    """Everything the journal says about one workload, with `text`: lines for people.

    `history` is its timeline (`projections.timeline`): every attempt, from submission
    to the end. An id that names no workload but a rejected request (its `ref`)
    explains that rejection. Unknown ids raise ViewError with close matches."""
    view = _view(source)
    state = view.require()
    if workload_id not in view.histories and workload_id in view.rejections:
        r = view.rejections[workload_id]
        text = [
            f"request {r.ref} ({r.input_type or r.type.replace('.rejected', '')}) "
            f"from {r.actor} was rejected at {iso(r.time)}: {r.error}"
        ]
        return {"request": r.ref, "rejection": _rejection_json(r), "text": text}
    wid = find_workload(view, workload_id)
    h = view.histories[wid]
    now = state.now
    text: list[str] = []
    out: dict[str, Any] = {
        "workload": wid,
        "cluster": state.cluster,
        "now": iso(now),
        "ratios_as_of": iso(state.charged.last_edge(now)),  # what ranks and ratios read
    }
    s = h.submitted
    if s is not None:
        contract = [
            s.allocation,
            f"{s.gpus} GPU{'s' if s.gpus != 1 else ''}" + (" on one host" if s.one_host else ""),
            f"min runtime {format_duration(s.min_runtime)}"
            + (" (unallocated: free, always preemptible)" if s.min_runtime <= 0 else ""),
            "resumable" if s.resumable else "not resumable",
            f"priority {s.priority}",
        ]
        if s.tags:
            contract.append(f"tags {','.join(s.tags)}")
        title = f"workload {wid}" + (f" ({s.name})" if s.name else "")
        text.append(f"{title}: {', '.join(contract)}")
        extra = []
        if s.runtime is not None:
            extra.append(f"needs {format_duration(s.runtime)} of work")
        if s.expected_runtime is not None:
            extra.append(f"expected runtime {format_duration(s.expected_runtime)}")
        text.append(
            f"submitted {iso(s.time)} by {s.actor}" + (f" ({'; '.join(extra)})" if extra else "")
        )
        out["submitted"] = {
            "time": iso(s.time),
            "actor": s.actor,
            "allocation": s.allocation,
            "gpus": s.gpus,
            "min_runtime": s.min_runtime,
            "resumable": s.resumable,
            "priority": s.priority,
            "tags": list(s.tags),
            "name": s.name,
            "runtime": s.runtime,
            "expected_runtime": s.expected_runtime,
            "one_host": bool(s.one_host),
        }
    else:
        text.append(f"workload {wid}: no accepted submission in the journal")

    events: list[tuple[float, int, str, Any]] = []
    for p in h.placements:
        events.append((p.time, 1, "placed", p))
    for p in h.preemptions:
        events.append((p.time, 0, "preempted", p))
    for lost in h.lost:
        events.append((lost.time, 0, "lost", lost))
    for r in h.rejections:
        events.append((r.time, 2, "rejected", r))
    events.sort(key=lambda e: (e[0], e[1]))
    last_pending = s.time if s is not None else None
    placements_json, preemptions_json, rejections_json = [], [], []
    lost_json = []
    for _, _, kind, item in events:
        if kind == "placed":
            p: Placement = item
            waited = (
                ""
                if last_pending is None
                else f" after waiting {format_duration(p.time - last_pending)}"
            )
            text.append(
                f"attempt {p.attempt}: placed {iso(p.time)}{waited} on {_hosts_text(p.hosts)}"
            )
            text.append("    " + _terms_text(p, now))
            numbers = _placement_numbers(p.explain)
            if numbers:
                text.append("    " + numbers)
            named = p.explain.get("preempted")
            victims = [
                c
                for c in h.caused
                if c.time == p.time and (not isinstance(named, list) or c.workload in named)
            ]
            for c in victims:
                text.append(
                    f"    preempted {c.workload} (attempt {c.attempt}) to make room: "
                    + _preemption_reason_text(c, as_victim=False)
                )
            placements_json.append(
                {
                    "time": iso(p.time),
                    "attempt": p.attempt,
                    "hosts": {k: list(v) for k, v in p.hosts.items()},
                    "charged": p.charged,
                    "protected_until": iso(p.protected_until)
                    if p.protected_until is not None
                    else None,
                    "explain": p.explain,
                    "preempted": [c.workload for c in victims],
                }
            )
        elif kind == "preempted":
            q: Preemption = item
            ran = _ran_seconds(q, h)
            ran_text = f" after running {format_duration(ran)}" if ran is not None else ""
            by = f" for {q.beneficiary}" if q.beneficiary else ""
            who = q.explain.get("beneficiary_allocation")
            if q.beneficiary and who:
                by += f" ({who})"
            text.append(
                f"attempt {q.attempt}: preempted {iso(q.time)}{ran_text}{by}: "
                + _preemption_reason_text(q, as_victim=True)
            )
            for line in _preemption_numbers(q):
                text.append("    " + line)
            over = q.requeued and s is not None and not s.resumable  # `allot requeue`
            text.append(
                "    requeued: it waits again with its original submit time"
                + (" and starts over (not resumable)" if over else "")
                if q.requeued
                else "    not resumable: it ended here"
            )
            if q.requeued:
                last_pending = q.time
            preemptions_json.append(
                {
                    "time": iso(q.time),
                    "attempt": q.attempt,
                    "reason": q.reason,
                    "beneficiary": q.beneficiary,
                    "requeued": q.requeued,
                    "explain": q.explain,
                    "ran_s": ran,
                }
            )
        elif kind == "lost":
            lost: LostAttempt = item
            said = ended_detail({"exit_code": lost.exit_code, "reason": lost.reason})
            text.append(
                f"attempt {lost.attempt}: lost {iso(lost.time)} (reported by "
                f"{lost.actor}{': ' + said if said else ''}): its node died under it"
            )
            text.append("    requeued: it waits again with its original submit time")
            last_pending = lost.time
            lost_json.append(
                {
                    "time": iso(lost.time),
                    "attempt": lost.attempt,
                    "actor": lost.actor,
                    "exit_code": lost.exit_code,
                    "reason": lost.reason,
                }
            )
        else:
            r: Rejection = item
            text.append(
                f"rejected {iso(r.time)}: {r.input_type or r.type} request {r.ref} "
                f"from {r.actor}: {r.error}"
            )
            rejections_json.append(_rejection_json(r))
    out["placements"] = placements_json
    out["preemptions"] = preemptions_json
    out["lost"] = lost_json  # attempts requeued after their node was lost
    out["rejections"] = rejections_json

    current = _current(view, wid, h)
    out["current"] = current
    text.append("now: " + current["text"])
    text.extend("    " + line for line in current.pop("lines", []))
    out["text"] = text
    out["history"] = timeline(history_records(view, wid))
    return out


def _ran_seconds(q: Preemption, h: History) -> float | None:
    """How long the preempted attempt ran, as `allot preemptions` says it."""
    placed_at = next((p.time for p in h.placements if p.attempt == q.attempt), None)
    return ran_seconds(q.explain, q.time, placed_at)


def _rejection_json(r: Rejection) -> dict[str, Any]:
    return {
        "time": iso(r.time),
        "type": r.type,
        "ref": r.ref,
        "actor": r.actor,
        "error": r.error,
        "input_type": r.input_type,
    }


def _hosts_text(hosts: dict[str, tuple[int, ...]]) -> str:
    parts = []
    for name, gpus in hosts.items():
        g = sorted(gpus)
        span = (
            f"{g[0]}-{g[-1]}"
            if g and g == list(range(g[0], g[-1] + 1)) and len(g) > 1
            else (",".join(str(x) for x in g))
        )
        parts.append(f"{name} GPUs {span}")
    return "; ".join(parts)


def _terms_text(p: Placement, now: float) -> str:
    if not p.charged:
        return "unallocated: not charged, never protected (any allocated work may preempt it)"
    if p.protected_until is None:
        return "charged, non-preemptible until it ends (legacy priority, within its cap)"
    length = format_duration(p.protected_until - p.time)
    return f"charged, protected until {iso(p.protected_until)} ({length})"


def _placement_numbers(explain: dict[str, Any]) -> str:
    parts = []
    if "rank" in explain:
        parts.append(f"allocation rank {explain['rank']}")
    if "ratio" in explain:
        parts.append(f"fair-share ratio {show(explain['ratio'])}")
    if explain.get("share") is not None:
        parts.append(f"share {show(explain['share'])}")
    if "position" in explain:
        parts.append(f"queue position {explain['position']} in its cycle")
    if explain.get("policy"):
        parts.append(f"policy {explain['policy']}/{explain.get('placement', '?')}")
    if explain.get("backfill"):
        b = explain["backfill"]
        parts.append(f"backfilled onto hosts reserved for {b.get('reserved_for')}")
    if explain.get("headroom"):
        parts.append("on a headroom host (kept for short jobs)")
    return ", ".join(parts)


def _preemption_reason_text(q: Preemption, *, as_victim: bool) -> str:
    e = q.explain
    if q.reason == "unallocated":
        return "reason unallocated (it ran free, so any allocated work may take its GPUs)"
    if q.reason == "drain":
        host = e.get("host", "?")
        return f"reason drain (host {host} is unhealthy and its work is moved off)"
    if q.reason == "fair_share":
        rule = e.get("rule", "ratio")
        if rule == "reclaim":
            return (
                "reason fair_share, rule reclaim (the beneficiary's side is owed GPUs now "
                "while the victim's runs beyond its entitlement)"
            )
        return "reason fair_share, rule ratio (the beneficiary's allocation used less of its share)"
    if q.reason == "priority":
        return (
            f"reason priority (level {e.get('beneficiary_priority')} over "
            f"{e.get('victim_priority')})"
        )
    if q.reason == "headroom":
        return "reason headroom (a short job needed the headroom host)"
    if q.reason == "gpus_removed":
        return f"reason gpus_removed ({_removed_gpus_text(e)}: stopped as on a lost node)"
    if q.reason == "requested":
        return f"reason requested (requeued by {e.get('requested_by', '?')}, allot requeue)"
    return f"reason {q.reason}"


def _removed_gpus_text(explain: dict[str, Any]) -> str:
    """What left the cluster under the work: its host, or some of the host's GPUs."""
    host = explain.get("host", "?")
    if not explain.get("host_gpus"):
        return f"host {host} was removed from the cluster"
    gone = list(explain.get("gpus") or ())
    gpus = ",".join(str(g) for g in gone)
    lost = f"GPU {gpus} is gone" if len(gone) == 1 else f"GPUs {gpus} are gone"
    return f"host {host} was registered again with {_gpus(explain['host_gpus'])}; {lost}"


def _preemption_numbers(q: Preemption) -> list[str]:
    e = q.explain
    lines = []
    if e.get("victim_allocation"):
        protected = e.get("protected_until")
        lines.append(
            f"victim allocation {e['victim_allocation']}, "
            + ("charged" if e.get("charged") else "unallocated")
            + (
                (
                    f", protection ended {iso(protected)}"
                    if protected <= q.time
                    else f", protected until {iso(protected)} (stopped inside it)"
                )
                if e.get("charged") and isinstance(protected, int | float)
                else ""
            )
        )
    if q.reason == "fair_share":
        compared = e.get("compared") or {}
        if compared:
            pairs = ", ".join(f"{path} {show(v)}" for path, v in compared.items())
            lines.append(
                f"rule {e.get('rule', 'ratio')}: compared fair-share ratios {pairs} "
                f"(hysteresis {show(e.get('hysteresis'))})"
            )
        else:
            lines.append(f"rule {e.get('rule', 'ratio')}")
        if e.get("beneficiary_rank") is not None or e.get("victim_rank") is not None:
            lines.append(
                f"ranks: beneficiary {e.get('beneficiary_rank')}, victim {e.get('victim_rank')}"
            )
        rve = e.get("running_vs_entitled")
        if rve:
            pairs = ", ".join(
                f"{path} {vals[0]}/{show(vals[1])}"
                for path, vals in rve.items()
                if isinstance(vals, list | tuple) and len(vals) == 2
            )
            lines.append(f"running vs entitled GPUs: {pairs}")
    elif q.reason == "drain" and e.get("host"):
        lines.append(f"host {e['host']}")
    return lines


def _current(view: JournalView, wid: str, h: History) -> dict[str, Any]:
    state = view.require()
    now = state.now
    w = state.workloads.get(wid)
    if w is None:
        if h.ended is not None:
            e = h.ended
            how = e["how"]
            state_name = how.upper()
            last = h.preemptions[-1] if h.preemptions else None
            if how == "finished":
                said = ", ".join(filter(None, [e.get("outcome", "completed"), ended_detail(e)]))
                what = f"finished ({said}) at {iso(e['time'])}"
            elif how == "cancelled":
                what = f"cancelled by {e.get('actor')} at {iso(e['time'])}"
            elif how == "preempted" and last is not None and last.reason == "gpus_removed":
                state_name = "NODE_FAIL"
                what = (
                    f"ended at {iso(e['time'])}: {_removed_gpus_text(last.explain)}, and it "
                    "is not resumable (or its lost-node requeues were used up)"
                )
            elif how == "preempted" and last is not None and last.reason == "drain":
                state_name = "NODE_FAIL"  # sacct's name, as `allot acct` says
                what = (
                    f"ended at {iso(e['time'])}: its host {last.explain.get('host')} was "
                    "drained as unhealthy, and it is not resumable"
                )
            elif how == "preempted":
                what = f"ended at {iso(e['time'])}: preempted and not resumable"
            else:
                what = f"ended at {iso(e['time'])} ({how})"
            return {
                "state": state_name,
                "text": what,
                **{k: v for k, v in e.items() if k != "time"},
            }
        if h.submitted is None and h.rejections:
            return {"state": "REJECTED", "text": "rejected; never ran"}
        return {"state": "UNKNOWN", "text": "not live (ended outside the window kept here)"}
    rows = [r for r in queue_rows(view, ids=[wid]) if r["id"] == wid]
    row = rows[0] if rows else None
    if w.state == RUNNING:
        text = (
            f"running on {nodelist(w.hosts)} for {format_duration(now - w.start)} "
            f"(attempt {w.attempt}); {row['reason'] if row else ''}"
        )
        if row:
            text += f" — {row['detail']}"
        return {"state": "RUNNING", "text": text, "row": row}
    pending = sum(1 for x in state.workloads.values() if x.state == PENDING and not x.on_hold)
    if row is None:
        text = "pending"
    elif w.on_hold:
        text = f"held, pending for {format_duration(row['time_s'])} — {row['detail']}"
    else:
        text = (
            f"pending for {format_duration(row['time_s'])}, position {row['position']} of "
            f"{pending} — {row['reason']}: {row['detail']}"
        )
    out: dict[str, Any] = {"state": "PENDING", "text": text, "row": row}
    if row is not None and not w.on_hold:
        # the numbers behind its position: its allocation's, and those of the work
        # ahead that the reason names (ranks and ratios as of the last bucket edge)
        node = state.tree.nodes.get(w.allocation)
        mine = {
            "allocation": w.allocation,
            "rank": row["rank"],
            "ratio": row["ratio"],
            "share": None if node is None else num(node.share, 6),
        }
        out["fair_share"] = mine
        out["ahead"] = row.get("ahead")
        lines = [f"its allocation {_fair_share_text(mine)}"]
        ahead = row.get("ahead")
        if ahead is not None:
            where = f" (position {ahead['position']})" if ahead.get("position") else ""
            lines.append(f"ahead of it: {ahead['id']}{where} of {_fair_share_text(ahead)}")
        out["lines"] = lines
    return out


def _fair_share_text(x: dict[str, Any]) -> str:
    """`lab/tulu: rank 1, fair-share ratio 0.0319, share 0.375` (a zero share's ratio is
    `inf`, as `allot shares` prints it; without fair share, no rank or ratio)."""
    parts = []
    if x.get("rank") is not None:
        parts.append(f"rank {x['rank']}")
        parts.append(f"fair-share ratio {show(x.get('ratio'))}")
    if x.get("share") is not None:
        parts.append(f"share {show(x['share'])}")
    return f"{x['allocation']}: {', '.join(parts)}" if parts else x["allocation"]


def idle_rows(
    source: JournalView | Iterable[Any],
    *,
    user: str | Collection[str] | None = None,
    allocation: str | Collection[str] | None = None,
    every: bool = False,
) -> list[dict[str, Any]]:
    """Running work whose launcher reports its GPUs idle (`allot idle`): below the
    config's `idle_threshold` for at least `idle_after` (`every`: for any time), the
    longest idle first. Each row: id, name, allocation, user, gpus, utilization, memory,
    idle_since, idle_s, idle (past `idle_after`), protected (its protection has not
    ended: it cannot be preempted for fair share yet) and protected_until."""
    view = _view(source)
    state = view.require()
    now = state.now
    rows = []
    for w in state.workloads.values():
        if w.state != RUNNING or not _wanted(w, user, allocation, None):
            continue
        usage = utilization_of(view, w)
        if usage is None or usage["idle_s"] is None or not (every or usage["idle"]):
            continue
        protected = w.charged and w.protected_until > now
        rows.append(
            {
                "id": w.id,
                "name": w.name,
                "allocation": w.allocation,
                "user": w.actor,
                "gpus": w.gpus,
                "nodelist": nodelist(w.hosts),
                "attempt": w.attempt,
                **{k: usage[k] for k in ("utilization", "memory", "idle_since", "idle_s", "idle")},
                "reported": usage["reported"],
                "protected": protected,
                "protected_until": iso(w.protected_until) if protected else None,
            }
        )
    rows.sort(key=lambda r: (-r["idle_s"], r["id"]))
    return rows
