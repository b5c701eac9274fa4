"""Per-allocation, per-hour usage / demand / owed tables folded from the journal.

`UsageProjection` reads events one at a time (single pass, in journal order) and keeps

- per live workload a small record (dropped as soon as the workload is terminal),
- per leaf its current rates (charged / unallocated busy GPUs, demanded GPUs) that are
  integrated lazily, split exactly at hour edges, into sparse hourly rows,
- per hour cluster-wide aggregates (healthy capacity, busy, charged, unallocated,
  contended time),
- the (rare) change points of healthy capacity and of the leaves' shares, from which a
  leaf's entitlement `∫ share(t) × capacity(t) dt` for any hour is computed when rows
  are read.

Definitions (DESIGN §2):

- *busy* GPUs of a running workload = the number of GPU indices in its `hosts`;
- *charged* / *unallocated* = busy GPU-seconds of placements with `charged` true/false;
- *demand* of a leaf = GPUs requested by its pending + running workloads with
  `min_runtime > 0` (pending work on hold, `allot hold`, is not demand: it does not
  ask to run, so no GPUs are owed for it and it makes no time contended). Pending work
  that the healthy hosts could not hold even if they were empty (more GPUs than they
  have together: hosts were removed, shrunk or went unhealthy after it was accepted;
  work bigger than every healthy host is a gang of them) is not demand either but *unrunnable*
  demand, kept apart (`unrunnable_gpu_s`): no policy could have given it GPUs, so
  owing them would charge the scheduler for the cluster's shape. It still waits, so it
  still makes time contended;
- *healthy capacity* = GPUs of registered hosts whose last `host.health` was healthy,
  less those held down for flapping (config `health_holddown`) until their hold-down
  ends: the scheduler places nothing there, by the same rule (`domain.host_health`);
- `owed_h = min(∫_h share × healthy capacity dt, demand_h)`; `received_h = charged_h`.
- *occupancy* counts busy GPUs on healthy hosts only (a draining host's GPUs are in
  neither numerator nor denominator), so it never exceeds 1;
  *contended* time is time while at least one workload with `min_runtime > 0` waits;
  its idle GPU-seconds are also kept by the GPUs of the smallest such workload waiting
  then (`contended_idle`): idle GPUs while 1-GPU work waits is a scheduling loss, while
  only whole-host gangs wait it is fragmentation the gangs wait out.

Events may be pydantic models from `domain.events` or the plain dicts of the wire form
(`iter_journal`), which is several times faster for big journals.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from domain.durations import parse_duration
from domain.headroom import DEFAULT_HEADROOM_HOSTS, pick_headroom
from domain.host_health import HostHealth, health_reported, returned_to_service
from domain.tree import AllocationTree, ancestors

HOUR = 3600.0

PENDING = "pending"
RUNNING_PROTECTED = "running_protected"
RUNNING_PREEMPTIBLE = "running_preemptible"

SpellCallback = Callable[[str, str, float, float], None]


def iter_journal(path: str | Path, *, validate: bool = False) -> Iterator[Any]:
    """Records of a `journal.jsonl`: upcast plain dicts (fast), or validated models."""
    import orjson

    from domain.upcasting import upcast

    if validate:
        from streams.codec import decode_event

    with open(path, "rb") as fh:
        for line in fh:
            if not line.strip():
                continue
            yield decode_event(line) if validate else upcast(orjson.loads(line))


def iter_events(events: Iterable[Any] | str | Path) -> Iterable[Any]:
    """`events` itself, or the records of the journal file it names."""
    if isinstance(events, str | Path):
        return iter_journal(events)
    return events


def fields(event: Any) -> dict[str, Any]:
    """The field dict of a wire-form dict or a pydantic event model."""
    return event if type(event) is dict else event.__dict__


def hour_of(t: float) -> float:
    return math.floor(t / HOUR) * HOUR


class RecordError(ValueError):
    """A journal record the fold cannot read (valid JSON, not the contract's shape)."""


class _Workload:
    __slots__ = (
        "allocation",
        "attempt",
        "busy",
        "charged",
        "gpus",
        "hosts",
        "min_runtime",
        "placed_once",
        "preempted_once",
        "protected_until",
        "requeued",
        "running",
        "since",
        "submitted",
        "tags",
        "unrunnable",
    )

    def __init__(
        self,
        allocation: str,
        gpus: int,
        min_runtime: float,
        tags: tuple[str, ...],
        submitted: float | None,
        since: float,
    ) -> None:
        self.allocation = allocation
        self.gpus = gpus
        self.min_runtime = min_runtime
        self.tags = tags
        self.submitted = submitted
        self.since = since  # start of the current spell (pending or running)
        self.running = False
        self.busy = 0
        self.charged = False
        self.protected_until: float | None = None
        self.hosts: dict[str, int] = {}
        self.attempt = 0
        self.placed_once = False
        self.preempted_once = False
        self.requeued = False  # pending again after a requeue
        # waiting, and counted in its leaf's `unrunnable` rather than its `demand`
        self.unrunnable = False


class _Leaf:
    __slots__ = ("charged", "demand", "last", "unalloc", "unrunnable")

    def __init__(self, now: float) -> None:
        self.charged = 0  # busy GPUs of running charged work
        self.unalloc = 0  # busy GPUs of running uncharged work
        self.demand = 0  # requested GPUs of pending + running work with min_runtime > 0
        self.unrunnable = 0  # of pending such work the healthy hosts could never hold
        self.last = now  # integrated up to here


# indices into the cluster-wide hourly aggregate
_HEALTHY, _BUSY, _CHARGED, _UNALLOC, _CONT_S, _CONT_HEALTHY, _CONT_BUSY = range(7)


class UsageProjection:
    bin_s = HOUR  # class default: projections pickled before `bin_s` existed are hourly

    """Folds journal events into hourly per-leaf usage rows (see module doc).

    `start` / `end` clip what is integrated (state is still folded outside them).
    `bin_s` (default an hour) is the width of the rows' time bins, aligned to multiples
    of it since the epoch; charts of short journals fold with finer bins (a minute), while
    `delivered`'s hourly form is defined on hourly rows.
    `on_spell(workload, state, start, end)` is called for every finished spell
    (`pending`, `running_protected`, `running_preemptible`); `close()` ends open ones.
    """

    def __init__(
        self,
        *,
        start: float | None = None,
        end: float | None = None,
        on_spell: SpellCallback | None = None,
        bin_s: float = HOUR,
    ) -> None:
        if not bin_s > 0:
            raise ValueError(f"bin_s must be positive, got {bin_s!r}")
        self.bin_s = float(bin_s)
        self.start = start
        self.end = end
        self.on_spell = on_spell
        self.now: float | None = None
        self.first_time: float | None = None
        self.tree = AllocationTree()
        self.config: dict[str, Any] = {}
        self.hosts: dict[str, int] = {}  # registration order
        self.healthy: dict[str, bool] = {}
        # rule 9's flap fields per host that had a health report, and the hosts held
        # down for flapping (config health_holddown) -> when they return: as the
        # scheduler, which places nothing there until then (domain.host_health)
        self._health: dict[str, HostHealth] = {}
        self._held_down: dict[str, float] = {}
        self.capacity = 0  # healthy GPUs
        self.live: dict[str, _Workload] = {}
        self._leaves: dict[str, _Leaf] = {}
        self._busy_by_host: dict[str, int] = {}
        self._busy_healthy = 0
        self._charged = 0
        self._unalloc = 0
        self._waiting_allocated = 0  # pending workloads with min_runtime > 0
        self._waiting_sizes: dict[int, int] = {}  # their GPUs -> how many
        # pending work on hold (allot hold): out of the queue, so neither demand nor waiting
        self._on_hold: set[str] = set()
        # smallest waiting GPUs -> idle healthy GPU-seconds while contended
        self.contended_idle: dict[int, float] = {}
        # of those, the idle GPU-seconds on the hosts kept for short jobs (headroom)
        self.headroom_idle = 0.0
        self._headroom: list[str] | None = None  # the headroom hosts (None: work it out)
        self._rows: dict[tuple[str, float], list[float]] = {}
        self._cluster: dict[float, list[float]] = {}
        self._hour_start = 0.0
        self._hour_row: list[float] | None = None
        # change points of (capacity, shares): times and parallel values
        self._tl_times: list[float] = []
        self._tl_values: list[tuple[int, dict[str, float]]] = []
        self._shares: dict[str, float] = {}
        self._closed = False
        self._handlers = self._event_handlers()

    # ------------------------------------------------------------------ folding
    def apply(self, event: Any) -> None:
        if self._closed:
            raise RuntimeError("projection is closed")
        d = event if type(event) is dict else event.__dict__
        try:
            t = d["time"]
            if self.now is None:
                self.now = self.first_time = t
            elif t > self.now:
                self._advance(t)
            handler = self._handlers.get(d["type"])
            if handler is not None:
                handler(d, self.now)
        except KeyError as why:  # wire dicts are read unvalidated, for speed
            raise RecordError(f"a {d.get('type')!r} record without {why}") from None
        except (TypeError, ValueError) as why:
            raise RecordError(
                f"a {d.get('type')!r} record with a field of the wrong type: {why}"
            ) from None

    def _event_handlers(self) -> dict[str, Callable[[dict[str, Any], float], None]]:
        """Record type -> fold step. Rebuilt on load, never taken from a saved table: a
        table saved by older code would otherwise keep its older list."""
        return {
            "workload.submitted": self._submitted,
            "workload.placed": self._placed,
            "workload.preempted": self._preempted,
            "workload.finished": self._finished,
            "workload.cancelled": self._cancelled,
            "workload.held": self._held,
            "workload.released": self._released,
            "workload.rejected": self._rejected,
            # the other nouns' refusals only count (summary.json's rejected_inputs)
            "budget.rejected": self._rejected,
            "host.rejected": self._rejected,
            "config.rejected": self._rejected,
            "clock.rejected": self._rejected,
            "input.rejected": self._rejected,
            "host.registered": self._host_registered,
            "host.health": self._host_health,
            "host.removed": self._host_removed,
            "budget.set": self._budget_set,
            "budget.removed": self._budget_removed,
            "config.set": self._config_set,
        }

    def __setstate__(self, saved: dict[str, Any]) -> None:
        self.__dict__.update(saved)
        self._handlers = self._event_handlers()
        if "_waiting_sizes" not in saved:  # saved (allot usage) before contended_idle
            self._waiting_sizes = {}
            for w in self.live.values():
                if not w.running and w.min_runtime > 0:
                    self._waiting_sizes[w.gpus] = self._waiting_sizes.get(w.gpus, 0) + 1
            self.contended_idle = {}
        if "_on_hold" not in saved:  # saved before allot hold
            self._on_hold = set()
        if "_held_down" not in saved:  # saved before the flap hold-down
            self._health = {}
            self._held_down = {}
        if "headroom_idle" not in saved:  # saved before the headroom figure
            self.headroom_idle = 0.0
            self._headroom = None
        self._upgrade_unrunnable()

    def _upgrade_unrunnable(self) -> None:
        """A table saved before unrunnable demand was kept apart: every row and leaf
        gets it at 0, every workload counts as runnable (its GPUs are in `demand`)."""
        for row in self._rows.values():
            if len(row) == 3:
                row.append(0.0)
        for leaf in self._leaves.values():
            if not hasattr(leaf, "unrunnable"):
                leaf.unrunnable = 0
        for w in self.live.values():
            if not hasattr(w, "unrunnable"):
                w.unrunnable = False

    def advance_to(self, t: float) -> None:
        """Move time to `t` without an event (e.g. a simulation horizon)."""
        if self.now is None:
            self.now = self.first_time = t
        elif t > self.now:
            self._advance(t)

    def close(self, end: float | None = None) -> None:
        """Advance to `end` (default: the clip end or the last event), flush all leaves
        and emit the open spells. Further `apply` calls raise."""
        if self._closed:
            return
        target = end if end is not None else self.end
        if target is not None:
            self.advance_to(target)
        now = self.now if self.now is not None else 0.0
        self._flush_all()
        if self.on_spell is not None:
            for wid, w in self.live.items():
                if w.running:
                    self._emit_run_spells(wid, w, now)
                elif now > w.since:
                    self.on_spell(wid, PENDING, w.since, now)
        self._closed = True

    # ---------------------------------------------------------------- integration
    def _clip(self, a: float, b: float) -> tuple[float, float]:
        if self.start is not None and a < self.start:
            a = self.start
        if self.end is not None and b > self.end:
            b = self.end
        return a, b

    def _advance(self, t: float) -> None:
        """Integrate up to `t`, returning each host whose hold-down ends by then at its
        end (the scheduler does so as of that moment, with no record for it)."""
        while self._held_down:
            host, until = min(self._held_down.items(), key=lambda item: item[1])
            if until > t:
                break
            self._advance_cluster(until)
            del self._held_down[host]
            returned_to_service(self._health[host], until)
            self._set_healthy(host, True)
        self._advance_cluster(t)

    def _advance_cluster(self, t: float) -> None:
        if t <= self.now:  # type: ignore[operator]
            return
        a = self.now
        self.now = t
        if self.start is not None and a < self.start:  # type: ignore[operator]
            a = self.start
        b = t if self.end is None or t < self.end else self.end
        if b <= a:  # type: ignore[operator]
            return
        row = self._hour_row
        width = self.bin_s
        if row is not None and a >= self._hour_start and b <= self._hour_start + width:
            # fast path: the step stays inside the current hour
            dt = b - a  # type: ignore[operator]
            row[_HEALTHY] += self.capacity * dt
            row[_BUSY] += self._busy_healthy * dt
            row[_CHARGED] += self._charged * dt
            row[_UNALLOC] += self._unalloc * dt
            if self._waiting_allocated > 0:
                row[_CONT_S] += dt
                row[_CONT_HEALTHY] += self.capacity * dt
                row[_CONT_BUSY] += self._busy_healthy * dt
                self._idle_while_contended(dt)
            return
        healthy = float(self.capacity)
        busy = float(self._busy_healthy)
        charged = float(self._charged)
        unalloc = float(self._unalloc)
        contended = self._waiting_allocated > 0
        if contended:
            self._idle_while_contended(b - a)  # type: ignore[operator]
        cluster = self._cluster
        while a < b:
            h = math.floor(a / width) * width
            seg_end = min(b, h + width)
            dt = seg_end - a
            row = cluster.get(h)
            if row is None:
                row = cluster[h] = [0.0] * 7
            self._hour_start, self._hour_row = h, row
            row[_HEALTHY] += healthy * dt
            row[_BUSY] += busy * dt
            row[_CHARGED] += charged * dt
            row[_UNALLOC] += unalloc * dt
            if contended:
                row[_CONT_S] += dt
                row[_CONT_HEALTHY] += healthy * dt
                row[_CONT_BUSY] += busy * dt
            a = seg_end

    def _idle_while_contended(self, dt: float) -> None:
        idle = self.capacity - self._busy_healthy
        if idle > 0:
            smallest = min(self._waiting_sizes)
            self.contended_idle[smallest] = self.contended_idle.get(smallest, 0.0) + idle * dt
            headroom = self._headroom
            if headroom is None:
                headroom = self._headroom = self._headroom_hosts()
            if headroom:
                busy = self._busy_by_host
                kept = sum(self.hosts[h] - busy.get(h, 0) for h in headroom)
                self.headroom_idle += min(idle, kept) * dt

    def _headroom_hosts(self) -> list[str]:
        """The hosts the scheduler keeps for short, small jobs now, by its own rule."""
        want = self.config.get("headroom_hosts", DEFAULT_HEADROOM_HOSTS)
        healthy = [(h, n) for h, n in self.hosts.items() if self.healthy.get(h, True)]
        wanted = want if isinstance(want, int) else 0
        largest = max((n for _, n in healthy), default=0)
        biggest = sum(1 for _, n in healthy if n == largest)
        return pick_headroom(reversed(healthy), len(healthy), wanted, largest, biggest)

    def _wait(self, w: _Workload) -> None:
        self._waiting_allocated += 1
        self._waiting_sizes[w.gpus] = self._waiting_sizes.get(w.gpus, 0) + 1

    def _unwait(self, w: _Workload) -> None:
        self._waiting_allocated -= 1
        left = self._waiting_sizes[w.gpus] - 1
        if left:
            self._waiting_sizes[w.gpus] = left
        else:
            del self._waiting_sizes[w.gpus]

    def _leaf(self, path: str) -> _Leaf:
        """The leaf's accumulator, integrated up to now (call before changing rates)."""
        leaf = self._leaves.get(path)
        now = self.now  # type: ignore[assignment]
        if leaf is None:
            leaf = self._leaves[path] = _Leaf(now)
            return leaf
        if leaf.last < now:
            if leaf.charged or leaf.unalloc or leaf.demand or leaf.unrunnable:
                self._integrate(path, leaf, leaf.last, now)
            leaf.last = now
        return leaf

    def _integrate(self, path: str, leaf: _Leaf, a: float, b: float) -> None:
        a, b = self._clip(a, b)
        rows = self._rows
        width = self.bin_s
        while a < b:
            h = math.floor(a / width) * width
            seg_end = min(b, h + width)
            dt = seg_end - a
            row = rows.get((path, h))
            if row is None:
                row = rows[(path, h)] = [0.0, 0.0, 0.0, 0.0]
            row[0] += leaf.charged * dt
            row[1] += leaf.unalloc * dt
            row[2] += leaf.demand * dt
            row[3] += leaf.unrunnable * dt
            a = seg_end

    def _flush_all(self) -> None:
        if self.now is None:
            return
        for path in self._leaves:
            self._leaf(path)

    def _timeline_changed(self) -> None:
        now = self.now  # type: ignore[assignment]
        value = (self.capacity, self._shares)
        if self._tl_times and self._tl_times[-1] == now:
            self._tl_values[-1] = value
        else:
            self._tl_times.append(now)
            self._tl_values.append(value)

    # ------------------------------------------------------------- cluster events
    def _host_registered(self, d: dict[str, Any], now: float) -> None:
        host = d["host"]
        gpus = int(d.get("gpus") or 0)
        old = self.hosts.get(host)
        if old is None:
            self.healthy.setdefault(host, True)
            busy = self._busy_by_host.setdefault(host, 0)
            if self.healthy[host]:
                self._busy_healthy += busy
        if self.healthy[host]:
            self.capacity += gpus - (old or 0)
        self.hosts[host] = gpus
        self._headroom = None
        self._timeline_changed()
        self._hosts_changed()

    def _host_health(self, d: dict[str, Any], now: float) -> None:
        host = d["host"]
        healthy = bool(d.get("healthy"))
        if host not in self.hosts:  # not registered (yet): remember, no capacity
            self.healthy[host] = healthy
            return
        health = self._health.setdefault(host, HostHealth())
        health.healthy = self.healthy[host]
        moved = health_reported(health, healthy, bool(d.get("force")), now, self._holddown())
        if health.held_until is None:
            self._held_down.pop(host, None)
        else:
            self._held_down[host] = health.held_until
        if moved is None:
            return
        if moved:
            self._held_down.pop(host, None)
            returned_to_service(health, now)
        self._set_healthy(host, moved)

    def _holddown(self) -> float:
        """Config health_holddown in seconds (0: off)."""
        return parse_duration(self.config.get("health_holddown") or 0)

    def _set_healthy(self, host: str, healthy: bool) -> None:
        self.healthy[host] = healthy
        self._health[host].healthy = healthy
        self._headroom = None
        sign = 1 if healthy else -1
        self.capacity += sign * self.hosts[host]
        self._busy_healthy += sign * self._busy_by_host.get(host, 0)
        self._timeline_changed()
        self._hosts_changed()

    def _host_removed(self, d: dict[str, Any], now: float) -> None:
        """A host gone for good: its GPUs leave the capacity (the work on them stops in
        the records that follow, which then count it nowhere)."""
        host = d["host"]
        gpus = self.hosts.pop(host, None)
        if gpus is None:
            return
        self._health.pop(host, None)
        self._held_down.pop(host, None)
        if self.healthy.pop(host, True):
            self.capacity -= gpus
            self._busy_healthy -= self._busy_by_host.get(host, 0)
        self._headroom = None
        self._timeline_changed()
        self._hosts_changed()

    def could_hold(self, gpus: int) -> bool:
        """Could the healthy hosts, emptied, hold work of `gpus` GPUs? As rule 10's
        `could_hold`: work bigger than every healthy host is a gang of whole healthy
        hosts, and smaller work fits on the biggest, so whenever they have that many
        GPUs together. Headroom is left out: it is never every host of the biggest size,
        and gangs the others cannot hold may use it."""
        return gpus <= self.capacity  # the healthy GPUs

    def _hosts_changed(self) -> None:
        """Hosts came, went, changed size or health: move waiting work between demand
        and unrunnable demand to match what the healthy hosts could hold now."""
        held = self._on_hold
        for wid, w in self.live.items():
            if w.running or w.min_runtime <= 0 or wid in held:
                continue
            if w.unrunnable == self.could_hold(w.gpus):
                self._stop_waiting_demand(w)
                self._start_waiting_demand(w)

    def _start_waiting_demand(self, w: _Workload) -> None:
        """Waiting allocated work `w` asks for its GPUs: as demand if the healthy hosts
        could hold it, else as unrunnable demand."""
        leaf = self._leaf(w.allocation)
        w.unrunnable = not self.could_hold(w.gpus)
        if w.unrunnable:
            leaf.unrunnable += w.gpus
        else:
            leaf.demand += w.gpus

    def _stop_waiting_demand(self, w: _Workload) -> None:
        """Waiting allocated work `w` no longer asks (placed, held, ended)."""
        leaf = self._leaf(w.allocation)
        if w.unrunnable:
            leaf.unrunnable -= w.gpus
        else:
            leaf.demand -= w.gpus
        w.unrunnable = False

    def _budget_set(self, d: dict[str, Any], now: float) -> None:
        path = d["allocation"]
        for anc in ancestors(path)[:-1]:
            if anc not in self.tree:  # parents come first in a journal; be lenient
                self.tree.set(anc, 1.0)
        weight = d.get("weight")  # None: kept (a change of managers or members)
        self.tree.set(
            path, None if weight is None else float(weight), d.get("managers"), d.get("members")
        )
        self._shares_changed()

    def _budget_removed(self, d: dict[str, Any], now: float) -> None:
        path = d["allocation"]
        for p in [p for p in self.tree.nodes if p.startswith(path + "/")]:
            self.tree.nodes.pop(p, None)
        if path in self.tree:
            self.tree.remove(path)
        self._shares_changed()

    def _shares_changed(self) -> None:
        tree = self.tree
        self._shares = {leaf: tree.share(leaf) for leaf in tree.leaves()}
        self._timeline_changed()

    def _config_set(self, d: dict[str, Any], now: float) -> None:
        self.config = dict(d.get("config") or {})
        self._headroom = None

    # ------------------------------------------------------------ workload events
    def _submitted(self, d: dict[str, Any], now: float) -> None:
        wid = d["workload"]
        if wid in self.live:
            return
        w = _Workload(
            d["allocation"],
            int(d.get("gpus") or 0),
            float(d.get("min_runtime") or 0.0),
            # a tag named twice counts once (waits by tag would count the workload twice)
            tuple(dict.fromkeys(d.get("tags") or ())),
            now,
            now,
        )
        self.live[wid] = w
        if w.min_runtime > 0:
            self._start_waiting_demand(w)
            self._wait(w)
        self.on_submitted(wid, w, d)

    def _placed(self, d: dict[str, Any], now: float) -> None:
        wid = d["workload"]
        w = self.live.get(wid)
        if w is None:  # a journal that starts mid-run: take what the placement says
            charged = bool(d.get("charged"))
            w = _Workload(
                d.get("allocation") or "",
                int(d.get("gpus") or 0),
                1.0 if charged else 0.0,
                (),
                None,
                now,
            )
            self.live[wid] = w
            if w.min_runtime > 0:
                self._leaf(w.allocation).demand += w.gpus
        elif w.running:
            self._stop_run(wid, w, now)
        else:
            self._end_pending(wid, w, now)
            if w.unrunnable:  # it ran after all: running work is demand
                self._stop_waiting_demand(w)
                self._leaf(w.allocation).demand += w.gpus
        first = not w.placed_once
        wait = None if w.submitted is None else now - w.since
        requeue_wait = wait if w.requeued else None
        hosts: dict[str, int] = {}
        for host, idx in (d.get("hosts") or {}).items():
            hosts[host] = len(idx)
        w.hosts = hosts
        w.busy = busy = sum(hosts.values())
        w.charged = bool(d.get("charged"))
        pu = d.get("protected_until")
        w.protected_until = None if pu is None else float(pu)
        w.attempt = int(d.get("attempt") or w.attempt + 1)
        w.running = True
        w.since = now
        w.placed_once = True
        w.requeued = False
        leaf = self._leaf(w.allocation)
        if w.charged:
            leaf.charged += busy
            self._charged += busy
        else:
            leaf.unalloc += busy
            self._unalloc += busy
        by_host = self._busy_by_host
        healthy = self.healthy
        for host, n in hosts.items():
            by_host[host] = by_host.get(host, 0) + n
            if healthy.get(host, False) and host in self.hosts:
                self._busy_healthy += n
        self.on_placed(wid, w, d, wait if first else None, requeue_wait)

    def _preempted(self, d: dict[str, Any], now: float) -> None:
        wid = d["workload"]
        w = self.live.get(wid)
        if w is None:
            return
        first = not w.preempted_once
        w.preempted_once = True
        requeued = bool(d.get("requeued"))
        if w.running:
            self._stop_run(wid, w, now)
            if requeued:
                self._requeue(w, now)
        elif not requeued:
            self._end_pending(wid, w, now)
        self.on_preempted(wid, w, d, first)
        if not requeued:
            self._terminal(wid, w)

    def _requeue(self, w: _Workload, now: float) -> None:
        """A stopped attempt's workload waits again (from now, for `requeue_wait_s`)."""
        w.since = now
        w.requeued = True
        if w.min_runtime > 0:
            self._wait(w)
            if not self.could_hold(w.gpus):  # e.g. stopped because its host was removed
                self._leaf(w.allocation).demand -= w.gpus
                self._start_waiting_demand(w)

    def _finished(self, d: dict[str, Any], now: float) -> None:
        if d.get("requeued"):  # a lost attempt of resumable work: it waits again
            w = self.live.get(d["workload"])
            if w is not None and w.running:
                self._stop_run(d["workload"], w, now)
                self._requeue(w, now)
                self.on_lost_requeued(d["workload"], w, d)
            return
        self._end(d, now, str(d.get("outcome") or "completed"))

    def _cancelled(self, d: dict[str, Any], now: float) -> None:
        self._end(d, now, "cancelled")

    def _held(self, d: dict[str, Any], now: float) -> None:
        wid = d["workload"]
        w = self.live.get(wid)
        if w is None or w.running or wid in self._on_hold:
            return
        self._on_hold.add(wid)
        if w.min_runtime > 0:
            self._stop_waiting_demand(w)
            self._unwait(w)

    def _released(self, d: dict[str, Any], now: float) -> None:
        wid = d["workload"]
        w = self.live.get(wid)
        if w is None or wid not in self._on_hold:
            return
        self._on_hold.discard(wid)
        if w.min_runtime > 0:
            self._start_waiting_demand(w)
            self._wait(w)

    def _rejected(self, d: dict[str, Any], now: float) -> None:
        self.on_rejected(d)

    def _end(self, d: dict[str, Any], now: float, outcome: str) -> None:
        wid = d["workload"]
        w = self.live.get(wid)
        if w is None:
            return
        if w.running:
            self._stop_run(wid, w, now)
        else:
            self._end_pending(wid, w, now)
        self.on_ended(wid, w, d, outcome)
        self._terminal(wid, w)

    def _end_pending(self, wid: str, w: _Workload, now: float) -> None:
        if w.min_runtime > 0 and wid not in self._on_hold:
            self._unwait(w)
        if self.on_spell is not None and now > w.since:
            self.on_spell(wid, PENDING, w.since, now)

    def _stop_run(self, wid: str, w: _Workload, now: float) -> None:
        leaf = self._leaf(w.allocation)
        if w.charged:
            leaf.charged -= w.busy
            self._charged -= w.busy
        else:
            leaf.unalloc -= w.busy
            self._unalloc -= w.busy
        by_host = self._busy_by_host
        healthy = self.healthy
        for host, n in w.hosts.items():
            by_host[host] -= n
            if healthy.get(host, False) and host in self.hosts:
                self._busy_healthy -= n
        if self.on_spell is not None:
            self._emit_run_spells(wid, w, now)
        w.running = False
        w.busy = 0
        w.hosts = {}

    def _emit_run_spells(self, wid: str, w: _Workload, now: float) -> None:
        cb = self.on_spell
        assert cb is not None
        start = w.since
        if now <= start:
            return
        pu = w.protected_until
        if not w.charged:
            cb(wid, RUNNING_PREEMPTIBLE, start, now)
        elif pu is None or pu >= now:
            cb(wid, RUNNING_PROTECTED, start, now)
        elif pu <= start:
            cb(wid, RUNNING_PREEMPTIBLE, start, now)
        else:
            cb(wid, RUNNING_PROTECTED, start, pu)
            cb(wid, RUNNING_PREEMPTIBLE, pu, now)

    def _terminal(self, wid: str, w: _Workload) -> None:
        if wid in self._on_hold:
            self._on_hold.discard(wid)  # its demand went with the hold
        elif w.min_runtime > 0 and w.unrunnable:
            self._stop_waiting_demand(w)
        elif w.min_runtime > 0:
            self._leaf(w.allocation).demand -= w.gpus
        del self.live[wid]

    # -------------------------------------------------- hooks for subclasses
    def on_submitted(self, wid: str, w: _Workload, d: dict[str, Any]) -> None:
        """A workload entered the queue."""

    def on_placed(
        self,
        wid: str,
        w: _Workload,
        d: dict[str, Any],
        first_wait: float | None,
        requeue_wait: float | None,
    ) -> None:
        """Placed; `first_wait` is submit → first placement (None if not the first)."""

    def on_preempted(self, wid: str, w: _Workload, d: dict[str, Any], first: bool) -> None:
        """Preempted (`first`: for the first time)."""

    def on_ended(self, wid: str, w: _Workload, d: dict[str, Any], outcome: str) -> None:
        """Finished (completed/failed/lost) or cancelled."""

    def on_lost_requeued(self, wid: str, w: _Workload, d: dict[str, Any]) -> None:
        """An attempt lost with its node; the (resumable) workload waits again."""

    def on_rejected(self, d: dict[str, Any]) -> None:
        """A `*.rejected` record (workload, budget, host or config)."""

    # --------------------------------------------------------------- read side
    @property
    def waiting_allocated(self) -> int:
        return self._waiting_allocated

    def waiting(self) -> Iterator[tuple[str, _Workload]]:
        """The live workloads waiting to run now (not running, not on hold); each one's
        `since` is when its current wait began (submission, or its last preemption)."""
        held = self._on_hold
        for wid, w in self.live.items():
            if not w.running and wid not in held:
                yield wid, w

    def entitlement(self, leaves: Iterable[str], a: float, b: float) -> dict[str, float]:
        """`∫_a^b share(t) × healthy capacity(t) dt` per leaf, in GPU-seconds."""
        out = dict.fromkeys(leaves, 0.0)
        times = self._tl_times
        if b <= a or not times:
            return out
        i = max(0, bisect_right(times, a) - 1)
        n = len(times)
        while i < n and times[i] < b:
            seg_a = max(a, times[i])
            seg_b = b if i + 1 == n else min(b, times[i + 1])
            if seg_b > seg_a:
                cap, shares = self._tl_values[i]
                if cap:
                    for leaf in out:
                        s = shares.get(leaf, 0.0)
                        if s:
                            out[leaf] += s * cap * (seg_b - seg_a)
            i += 1
        return out

    def share_steps(self, leaf: str) -> list[tuple[float, float]]:
        """`leaf`'s share of the cluster over the integrated period: (from, share) at
        its start and at each change (a budget change), the value in force before the
        period counted from its start. Empty if the leaf never had a budget in it."""
        lo, hi = self.period()
        steps: list[tuple[float, float]] = []
        for t, (_, shares) in zip(self._tl_times, self._tl_values, strict=True):
            share = shares.get(leaf)
            if hi is not None and t > hi:
                break
            if share is None:
                continue
            t = t if lo is None else max(t, lo)
            if steps and steps[-1][0] == t:
                steps.pop()  # several at one moment: the last holds
            if not steps or steps[-1][1] != share:
                steps.append((t, share))
        return steps

    def _hour_bounds(self, h: float) -> tuple[float, float]:
        a, b = self._clip(h, h + self.bin_s)
        if self.first_time is not None:
            a = max(a, self.first_time)
        if self.now is not None:
            b = min(b, self.now)
        return a, b

    def hourly_rows(self) -> list[dict[str, Any]]:
        """Per-leaf, per-hour rows (sorted by hour, then allocation) for every hour in
        which the leaf had demand or ran work. An hour in which a leaf had neither owes
        it nothing and has no row. Includes `entitled_gpu_s` (∫ share × capacity)."""
        if not self._closed:
            self._flush_all()
        by_hour: dict[float, list[tuple[str, list[float]]]] = {}
        for (path, h), vals in self._rows.items():
            by_hour.setdefault(h, []).append((path, vals))
        out: list[dict[str, Any]] = []
        for h in sorted(by_hour):
            entries = sorted(by_hour[h], key=lambda e: e[0])
            a, b = self._hour_bounds(h)
            ent = self.entitlement([p for p, _ in entries], a, b)
            for path, (charged, unalloc, demand, unrunnable) in entries:
                entitled = ent[path]
                out.append(
                    {
                        "allocation": path,
                        "hour": h,
                        "charged_gpu_s": charged,
                        "unallocated_gpu_s": unalloc,
                        "demand_gpu_s": demand,
                        "owed_gpu_s": min(entitled, demand),
                        # pending work the healthy hosts could not hold even empty
                        "unrunnable_gpu_s": unrunnable,
                        "received_gpu_s": charged,
                        "entitled_gpu_s": entitled,
                    }
                )
        return out

    def cluster_hourly_rows(self) -> list[dict[str, float]]:
        """Cluster-wide per-hour aggregates (every hour with any time integrated)."""
        out = []
        for h in sorted(self._cluster):
            r = self._cluster[h]
            out.append(
                {
                    "hour": h,
                    "healthy_gpu_s": r[_HEALTHY],
                    "busy_gpu_s": r[_BUSY],
                    "charged_gpu_s": r[_CHARGED],
                    "unallocated_gpu_s": r[_UNALLOC],
                    "contended_s": r[_CONT_S],
                    "contended_healthy_gpu_s": r[_CONT_HEALTHY],
                    "contended_busy_gpu_s": r[_CONT_BUSY],
                }
            )
        return out

    def totals(self) -> dict[str, float]:
        """Cluster-wide sums over the whole (clipped) run."""
        sums = [0.0] * 7
        for r in self._cluster.values():
            for i, v in enumerate(r):
                sums[i] += v
        return {
            "healthy_gpu_s": sums[_HEALTHY],
            "busy_gpu_s": sums[_BUSY],
            "charged_gpu_s": sums[_CHARGED],
            "unallocated_gpu_s": sums[_UNALLOC],
            "contended_s": sums[_CONT_S],
            "contended_healthy_gpu_s": sums[_CONT_HEALTHY],
            "contended_busy_gpu_s": sums[_CONT_BUSY],
        }

    def period(self) -> tuple[float | None, float | None]:
        """(start, end) of what was integrated."""
        a = self.first_time if self.start is None else self.start
        b = self.now if self.end is None else min(self.end, self.now or self.end)
        return a, b


def collect_spells(events: Iterable[Any]) -> list[tuple[str, str, float, float]]:
    """All spells of a (small) journal, in the order they end. For big journals pass an
    `on_spell` callback that writes them out instead."""
    spells: list[tuple[str, str, float, float]] = []
    proj = UsageProjection(on_spell=lambda *s: spells.append(s))  # type: ignore[arg-type]
    for e in iter_events(events):
        proj.apply(e)
    proj.close()
    return spells


def period_totals(rows: Iterable[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per allocation, the sums of the `*_gpu_s` columns of `hourly_rows()` over the
    rows given (a reporting period), plus `strict_gpu_s` = Σ_h min(received_h, owed_h)
    (the stricter hourly form of DESIGN §2)."""
    out: dict[str, dict[str, float]] = {}
    for row in rows:
        acc = out.get(row["allocation"])
        if acc is None:
            acc = out[row["allocation"]] = {"strict_gpu_s": 0.0}
        for key, value in row.items():
            if key.endswith("_gpu_s"):
                acc[key] = acc.get(key, 0.0) + value
        acc["strict_gpu_s"] += min(row["received_gpu_s"], row["owed_gpu_s"])
    return out


def delivered(received_gpu_s: float, owed_gpu_s: float) -> float | None:
    """DESIGN §2, one allocation over a period: min(1, Σ_h received_h / Σ_h owed_h);
    None when nothing was owed. (Several allocations together: Σ_a min(received_a,
    owed_a) / Σ_a owed_a, i.e. `met / owed` with met = min(received, owed) per
    allocation.)"""
    if owed_gpu_s <= 0:
        return None
    return min(1.0, received_gpu_s / owed_gpu_s)


__all__ = [
    "HOUR",
    "PENDING",
    "RUNNING_PREEMPTIBLE",
    "RUNNING_PROTECTED",
    "JournalBuilder",
    "UsageProjection",
    "collect_spells",
    "delivered",
    "fields",
    "hour_of",
    "iter_events",
    "iter_journal",
    "period_totals",
]


class JournalBuilder:
    """Hand-made journals for tests, docs and sketches: validated `domain.events` models
    in time order. Times passed to `at` are seconds after `start`.

    `place` fills the contract defaults from the submission: `charged` = min_runtime > 0,
    `protected_until` = now + min_runtime (now for unallocated work).
    """

    START = 1767225600.0  # 2026-01-01T00:00:00Z, the simulator's default start

    def __init__(self, start: float = START, cluster: str = "test") -> None:
        self.start = start
        self.now = start
        self.cluster = cluster
        self.events: list[Any] = []
        self._subs: dict[str, dict[str, Any]] = {}
        self._attempts: dict[str, int] = {}
        self._n = 0

    def at(self, t: float) -> JournalBuilder:
        assert self.start + t >= self.now, "journal time never goes backwards"
        self.now = self.start + t
        return self

    def add(self, type_: str, actor: str = "allot", **fields_: Any) -> JournalBuilder:
        from domain.events import parse_event

        self._n += 1
        raw = {"type": type_, "id": f"e{self._n}", "time": self.now, "cluster": self.cluster}
        raw["actor"] = actor
        raw.update({k: v for k, v in fields_.items() if v is not None or k == "protected_until"})
        self.events.append(parse_event(raw))
        return self

    def host(self, name: str, gpus: int = 8) -> JournalBuilder:
        return self.add("host.registered", actor="admin", host=name, gpus=gpus)

    def health(self, host: str, healthy: bool, reason: str = "") -> JournalBuilder:
        return self.add("host.health", actor="probe", host=host, healthy=healthy, reason=reason)

    def budget(self, path: str, weight: float) -> JournalBuilder:
        return self.add("budget.set", actor="admin", allocation=path, weight=weight)

    def submit(
        self,
        wid: str,
        allocation: str,
        gpus: int = 1,
        *,
        min_runtime: float = 3600.0,
        tags: tuple[str, ...] = (),
        resumable: bool = True,
        actor: str = "alice",
        expected_runtime: float | None = None,
        name: str | None = None,
    ) -> JournalBuilder:
        self._subs[wid] = {"allocation": allocation, "gpus": gpus, "min_runtime": min_runtime}
        named = {} if name is None else {"name": name}
        return self.add(
            "workload.submitted",
            actor=actor,
            workload=wid,
            allocation=allocation,
            gpus=gpus,
            min_runtime=min_runtime,
            resumable=resumable,
            tags=list(tags),
            expected_runtime=expected_runtime,
            **named,
        )

    def place(
        self,
        wid: str,
        hosts: dict[str, list[int]],
        *,
        charged: bool | None = None,
        protected_until: float | str | None = "default",
    ) -> JournalBuilder:
        sub = self._subs[wid]
        if charged is None:
            charged = sub["min_runtime"] > 0
        if protected_until == "default":
            protected_until = self.now + sub["min_runtime"] if charged else self.now
        self._attempts[wid] = self._attempts.get(wid, 0) + 1
        return self.add(
            "workload.placed",
            workload=wid,
            allocation=sub["allocation"],
            gpus=sub["gpus"],
            hosts=hosts,
            attempt=self._attempts[wid],
            charged=charged,
            protected_until=protected_until,
        )

    def preempt(
        self,
        wid: str,
        reason: str = "fair_share",
        *,
        requeued: bool = True,
        beneficiary: str | None = None,
        explain: dict[str, Any] | None = None,
    ) -> JournalBuilder:
        return self.add(
            "workload.preempted",
            workload=wid,
            attempt=self._attempts.get(wid, 1),
            reason=reason,
            requeued=requeued,
            beneficiary=beneficiary,
            explain=explain,
        )

    def finish(self, wid: str, outcome: str = "completed", **said: Any) -> JournalBuilder:
        return self.add(
            "workload.finished",
            actor="executor",
            workload=wid,
            outcome=outcome,
            attempt=self._attempts.get(wid, 1),
            **said,
        )

    def hold(self, wid: str) -> JournalBuilder:
        return self.add("workload.held", actor="alice", workload=wid)

    def release(self, wid: str) -> JournalBuilder:
        return self.add("workload.released", actor="alice", workload=wid)

    def cancel(self, wid: str) -> JournalBuilder:
        return self.add("workload.cancelled", actor="alice", workload=wid)

    def reject(
        self,
        wid: str,
        error: str = "min_runtime above the cap",
        allocation: str | None = None,
        gpus: int | None = None,
    ) -> JournalBuilder:
        return self.add(
            "workload.rejected",
            ref=f"in-{wid}",
            error=error,
            workload=wid,
            allocation=allocation,
            input_type="workload.submitted",
            gpus=gpus,
        )

    def tick(self) -> JournalBuilder:
        return self.add("clock.tick", actor="allot-ticker")

    def dicts(self) -> list[dict[str, Any]]:
        """The wire form (what `journal.jsonl` holds, one dict per line)."""
        from domain.events import event_to_dict

        return [event_to_dict(e) for e in self.events]

    def write(self, path: str | Path) -> Path:
        import orjson

        path = Path(path)
        path.write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in self.dicts()))
        return path
