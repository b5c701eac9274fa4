"""Prometheus metrics folded from the journal (prometheus-client, a custom `Collector`).

    collector = MetricsCollector()
    for event in events:               # journal records, oldest first (models or dicts)
        collector.apply(event)
    registry = collector.registry()    # a private CollectorRegistry holding only it
    text = exposition(registry)        # the text format, as /metrics serves it

Everything is computed from the journal, so `allot metrics` (reading a journal) and the
worker (folding what it writes) expose the same numbers. Names are `allot_*` in base
units (seconds, ratios), counters end in `_total`, and labels are bounded: `cluster`,
`state`, `reason`, `class`, `type`, `allocation` (the budget tree is configured, so
its paths are bounded) and `host` (registered hosts) — never workload ids or users.

Per cluster (a journal may hold several; each gets its own fold):

- ``allot_gpus{state}``: allocated / unallocated (held by charged / uncharged running
  work, on any host: work draining off an unhealthy host still holds its GPUs), idle
  (free on healthy hosts), cordoned (free on unhealthy hosts); they sum to the
  registered GPUs.
- ``allot_workloads{state}``: pending / running.
- ``allot_allocation_workloads{allocation, state}`` and
  ``allot_allocation_gpus{allocation, state}``: the same per leaf allocation (every
  leaf, 0 when idle): its pending / running workloads, and the GPUs its running work
  holds, allocated / unallocated (summed over leaves, ``allot_gpus`` of those states).
  A Kueue dashboard's per-ClusterQueue panels (``kueue_pending_workloads``,
  ``kueue_admitted_active_workloads``, ``kueue_cluster_queue_resource_usage``) read
  these.
- ``allot_allocation_idle_gpus{allocation}``: GPUs held by each leaf's running work
  whose launcher reports it idle (`workload.utilization` below `idle_threshold` for at
  least `idle_after`; stale readings do not count): held GPUs doing no work, the
  squatting `allot idle` lists by user. Every leaf has its series, 0 when none.
  Alert AllotIdleGPUs.
- ``allot_queue_wait_seconds{class}``: histogram of submit → first placement;
  ``class`` is ``short`` for work tagged ``debug`` or within the short-job rule
  (0 < min_runtime ≤ short_job_max_min_runtime and gpus ≤ short_job_max_gpus), else
  ``other``.
- ``allot_oldest_wait_seconds{class}``: how long the longest-waiting workload of the
  class (not on hold) has waited so far, in journal time; the histogram above only
  sees waits that ended.
- ``allot_preemptions_total{reason}``.
- ``allot_allocation_preemptions_total{allocation, reason}`` and
  ``allot_allocation_queue_wait_seconds{allocation}``: who is preempted (the preempted
  workload's leaf; summed over leaves, ``allot_preemptions_total``) and who waits (the
  histogram above, by the waiting workload's leaf instead of its class; summed over
  leaves, the class histogram summed over classes). Every leaf has its series from the
  start, at 0. New series rather than an ``allocation`` label on the two above, so the
  sums existing dashboards take do not change (Kueue: ``kueue_evicted_workloads_total``,
  by the evicted workload's ClusterQueue, and ``kueue_admission_wait_time_seconds``).
- ``allot_requeued_attempts_total{reason}``: attempts that ended with their workload
  waiting again: requeued preemptions by reason, and ``lost`` (the launcher lost the
  node under resumable work).
- ``allot_host_cordons_total{host}``: times a host went from healthy to unhealthy
  (hosts that never did have no series). A host flapping (a bad NIC reported
  unhealthy and healthy again every few seconds) counts up fast, while its health
  and `allot host list -R` show only one moment of it; alert AllotHostFlapping.
- ``allot_workloads_ended_total{state}``: workloads that ended, by how (the states of
  `allot acct`): completed / failed / lost (the launcher's report), cancelled,
  preempted (not requeued), node_fail (drained off an unhealthy host).
- ``allot_fair_share_ratio{allocation}``: usage / (share × capacity × window) of every
  node of the tree, as `decide` sees it: usage as of the last bucket edge (+Inf for a
  zero share).
- ``allot_delivered_ratio{allocation}``: min(1, Σ_h received_h / Σ_h owed_h) since the
  first record folded, with the counters ``allot_owed_gpu_seconds_total`` and
  ``allot_received_gpu_seconds_total`` behind it (so a dashboard can take any range:
  ``increase(received) / increase(owed)``). Leaves with nothing owed have no sample.
- ``allot_decisions_total{type}``: placed / preempted / drained (``rate()`` gives
  decisions per second).
- ``allot_decision_latency_seconds``: histogram of the time from the input (or
  rejection) that caused a decision to the decision. Served by the scheduler itself
  (`allot serve --metrics-port`), it ends when the decision is written (wall clock)
  and starts at the input's journal time, which is when it was sent (its inbox
  record's timestamp): the latency people see; what it recovers on a restart is not
  timed again. Folded from a journal afterwards (`allot metrics`, simulations), a
  decision carries its cause's time, so it is 0.
- ``allot_rejected_inputs_total{reason}``: by the ``*.rejected`` record type.
- ``allot_journal_records_total``, ``allot_journal_last_record_timestamp_seconds`` and
  ``allot_journal_lag_seconds`` (wall clock − the last record's time).
- ``allot_scheduler_recovering``: 1 while `allot serve --metrics-port` rebuilds its
  state (only this is exposed then), else 0.
- ``allot_journal_unreadable_records_total`` (no cluster label):
  corrupt records a following `allot metrics` skipped rather than stop serving.
- ``allot_data_filesystem_avail_bytes{path}``, ``allot_data_filesystem_size_bytes{path}``
  (no cluster label; with a `--data` folder only, read at each scrape, exposed while
  recovering too): the space left on the folder's filesystem, as node_exporter's
  ``node_filesystem_*_bytes``. A full disk stops `allot serve`; alert
  AllotDataDiskFilling fires before.

`apply` and `collect` take a lock: one thread may follow the journal while the HTTP
server's threads scrape.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, get_args

from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from domain import State, evolve
from domain import events as ev
from domain.fairshare import ratio as fair_ratio
from domain.state import PENDING, RUNNING
from domain.upcasting import upcast
from projections.usage import UsageProjection
from projections.utilization import Utilization, current, is_idle, next_reading

# histogram buckets (seconds)
QUEUE_WAIT_BUCKETS = (
    1.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    900.0,
    1800.0,
    3600.0,
    7200.0,
    14400.0,
    28800.0,
    86400.0,
    math.inf,
)
DECISION_LATENCY_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    math.inf,
)

GPU_STATES = ("allocated", "unallocated", "idle", "cordoned")
WORKLOAD_STATES = (PENDING, RUNNING)
QUEUE_CLASSES = ("short", "other")
PREEMPTION_REASONS: tuple[str, ...] = get_args(
    ev.WorkloadPreempted.model_fields["reason"].annotation
)
REQUEUE_REASONS = (*PREEMPTION_REASONS, "lost")
ENDED_STATES = ("completed", "failed", "lost", "cancelled", "preempted", "node_fail")
DECISION_TYPES = {
    "workload.placed": "placed",
    "workload.preempted": "preempted",
    "host.drained": "drained",
}
REJECTION_TYPES: tuple[str, ...] = tuple(
    sorted(m.model_fields["type"].default for m in get_args(ev.Rejection))
)
KNOWN_TYPES: frozenset[str] = frozenset(
    m.model_fields["type"].default
    for u in (ev.Input, ev.Decision, ev.Rejection)
    for m in get_args(u)
)
CAUSE_MEMORY = 4096  # recent causes whose times are kept for the latency histogram

# every metric family the collector exposes (the names Prometheus sees, before any
# _bucket/_sum/_count suffix): the Grafana dashboard test checks its queries use these
METRIC_NAMES: dict[str, str] = {
    "allot_gpus": "gauge",
    "allot_workloads": "gauge",
    "allot_allocation_workloads": "gauge",
    "allot_allocation_gpus": "gauge",
    "allot_allocation_idle_gpus": "gauge",
    "allot_queue_wait_seconds": "histogram",
    "allot_oldest_wait_seconds": "gauge",
    "allot_preemptions_total": "counter",
    "allot_allocation_preemptions_total": "counter",
    "allot_allocation_queue_wait_seconds": "histogram",
    "allot_requeued_attempts_total": "counter",
    "allot_workloads_ended_total": "counter",
    "allot_fair_share_ratio": "gauge",
    "allot_delivered_ratio": "gauge",
    "allot_owed_gpu_seconds_total": "counter",
    "allot_received_gpu_seconds_total": "counter",
    "allot_decisions_total": "counter",
    "allot_decision_latency_seconds": "histogram",
    "allot_rejected_inputs_total": "counter",
    "allot_journal_records_total": "counter",
    "allot_journal_last_record_timestamp_seconds": "gauge",
    "allot_journal_lag_seconds": "gauge",
    "allot_journal_unreadable_records_total": "counter",
    "allot_scheduler_recovering": "gauge",
    "allot_host_cordons_total": "counter",
    "allot_data_filesystem_avail_bytes": "gauge",
    "allot_data_filesystem_size_bytes": "gauge",
}


def exposed_series_names() -> set[str]:
    """Every series name a scrape may show (histograms add _bucket, _sum, _count)."""
    out: set[str] = set()
    for name, kind in METRIC_NAMES.items():
        if kind == "histogram":
            out |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
        else:
            out.add(name)
    return out


class _Histogram:
    """Cumulative-bucket counts for a custom collector."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * len(bounds)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.sum += value
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[i] += 1
                break

    def buckets(self) -> list[tuple[str, float]]:
        out, total = [], 0
        for bound, n in zip(self.bounds, self.counts, strict=True):
            total += n
            out.append(("+Inf" if math.isinf(bound) else _float(bound), total))
        return out


def _float(x: float) -> str:
    return repr(float(x))


class _Usage(UsageProjection):
    """UsageProjection that reports first placements to its cluster's fold."""

    def __init__(self, on_wait: Callable[[Any, float], None]) -> None:
        super().__init__()
        self._on_wait = on_wait

    def on_placed(self, wid, w, d, first_wait, requeue_wait) -> None:  # type: ignore[no-untyped-def]
        if first_wait is not None:
            self._on_wait(w, first_wait)


class _ClusterFold:
    """The folds and counters of one cluster."""

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self.state = State(cluster)
        self.usage = _Usage(self._observe_wait)
        self.waits = {c: _Histogram(QUEUE_WAIT_BUCKETS) for c in QUEUE_CLASSES}
        # per leaf, filled in as leaves and work appear (see `allocation_counts`)
        self.allocation_waits: dict[str, _Histogram] = {}
        self.allocation_preemptions: dict[str, dict[str, int]] = {}
        self.latency = _Histogram(DECISION_LATENCY_BUCKETS)
        self.preemptions = dict.fromkeys(PREEMPTION_REASONS, 0)
        self.ended = dict.fromkeys(ENDED_STATES, 0)
        self.requeued = dict.fromkeys(REQUEUE_REASONS, 0)
        self.decisions = dict.fromkeys(DECISION_TYPES.values(), 0)
        self.rejections = dict.fromkeys(REJECTION_TYPES, 0)
        # per host, how often it went from healthy to unhealthy: a flapping host (a bad
        # NIC) shows here, where its health now and `sinfo -R` show one moment
        self.cordons: dict[str, int] = {}
        self.causes: OrderedDict[str, float] = OrderedDict()
        # each running attempt's last utilization reading (pruned as work ends)
        self.readings: dict[str, Utilization] = {}
        self.records = 0
        self.last_time: float | None = None
        self._delivered_at = -1  # record count the delivered cache was computed at
        self._delivered: dict[str, tuple[float, float]] = {}

    def queue_class(self, tags: Iterable[str], min_runtime: float, gpus: int) -> str:
        if "debug" in tags:
            return "short"
        return "short" if self.state.config.is_short_small(gpus, min_runtime) else "other"

    def _observe_wait(self, w: Any, wait: float) -> None:
        wait = max(0.0, wait)
        self.waits[self.queue_class(w.tags, w.min_runtime, w.gpus)].observe(wait)
        self._allocation_wait(w.allocation).observe(wait)

    def _allocation_wait(self, path: str) -> _Histogram:
        h = self.allocation_waits.get(path)
        if h is None:
            h = self.allocation_waits[path] = _Histogram(QUEUE_WAIT_BUCKETS)
        return h

    def _allocation_preemptions(self, path: str) -> dict[str, int]:
        counts = self.allocation_preemptions.get(path)
        if counts is None:
            counts = self.allocation_preemptions[path] = dict.fromkeys(PREEMPTION_REASONS, 0)
        return counts

    def _count_preemption(self, event: Any) -> None:
        self.preemptions[event.reason] = self.preemptions.get(event.reason, 0) + 1
        victim = self.state.workloads.get(event.workload)  # folded before `evolve`
        if victim is not None:
            counts = self._allocation_preemptions(victim.allocation)
            counts[event.reason] = counts.get(event.reason, 0) + 1

    def _count_cordon(self, event: Any) -> None:
        host = self.state.hosts.get(event.host)  # folded before `evolve`
        if host is not None and host.healthy and not event.healthy:
            self.cordons[event.host] = self.cordons.get(event.host, 0) + 1

    def apply(self, event: Any, written: float | None = None, timed: bool = True) -> None:
        """`written`: when the scheduler wrote `event` (wall clock), if it is being
        written now; decisions then measure their latency to it, not to their own time.
        `timed=False`: no latency (decisions a restarted scheduler recovered)."""
        kind = event.type
        self.records += 1
        if self.last_time is None or event.time > self.last_time:
            self.last_time = event.time
        if kind in DECISION_TYPES:
            self.decisions[DECISION_TYPES[kind]] += 1
            cause = event.cause
            if timed and cause is not None and cause in self.causes:
                end = event.time if written is None else written
                self.latency.observe(max(0.0, end - self.causes[cause]))
            if kind == "workload.preempted":
                self._count_preemption(event)
                if event.requeued:
                    self.requeued[event.reason] = self.requeued.get(event.reason, 0) + 1
                else:
                    node_fail = event.reason in ("drain", "gpus_removed")
                    self.ended["node_fail" if node_fail else "preempted"] += 1
        else:  # inputs and rejections cause cycles
            if kind == "workload.finished":
                if event.requeued:  # a lost attempt of resumable work: it waits again
                    self.requeued["lost"] += 1
                else:
                    self.ended[event.outcome] += 1
            elif kind == "workload.cancelled":
                self.ended["cancelled"] += 1
            elif kind == "host.health":
                self._count_cordon(event)
            elif kind == "workload.utilization":
                threshold = self.state.config.idle_threshold
                last = self.readings.get(event.workload)
                self.readings[event.workload] = next_reading(last, event, threshold)
            self.causes[event.id] = event.time
            if len(self.causes) > CAUSE_MEMORY:
                self.causes.popitem(last=False)
            if kind in self.rejections:
                self.rejections[kind] += 1
        self.usage.apply(event)
        try:
            evolve(self.state, event)
        except KeyError as why:  # a host or workload no earlier record introduced
            from projections.views import UnintroducedError  # (slow to import: on error only)

            raise UnintroducedError(event, why, self.records) from None

    # ------------------------------------------------------------- reading
    def gpus(self) -> dict[str, int]:
        out = dict.fromkeys(GPU_STATES, 0)
        workloads = self.state.workloads
        for host in self.state.hosts.values():
            # work still running on an unhealthy host (protected, being drained) holds
            # its GPUs as anywhere else: `shares` and the dashboard count it running
            out["idle" if host.healthy else "cordoned"] += len(host.free)
            for wid, n in host.workloads.items():
                w = workloads.get(wid)
                out["allocated" if w is not None and w.charged else "unallocated"] += n
        return out

    def workloads(self) -> dict[str, int]:
        out = dict.fromkeys(WORKLOAD_STATES, 0)
        for w in self.state.workloads.values():
            out[w.state] = out.get(w.state, 0) + 1
        return out

    def by_allocation(self) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]:
        """Per leaf allocation: workloads by state, and GPUs held by running work by
        whether it is charged. Every leaf has its series (zeros), so a panel per
        allocation does not vanish while it is idle."""
        workloads = {leaf: dict.fromkeys(WORKLOAD_STATES, 0) for leaf in self.state.tree.leaves()}
        gpus = {leaf: {"allocated": 0, "unallocated": 0} for leaf in workloads}
        empty = dict.fromkeys(WORKLOAD_STATES, 0)
        for w in self.state.workloads.values():
            counts = workloads.setdefault(w.allocation, dict(empty))
            counts[w.state] = counts.get(w.state, 0) + 1
        for host in self.state.hosts.values():
            for wid, n in host.workloads.items():
                w = self.state.workloads.get(wid)
                if w is None:
                    continue
                held = gpus.setdefault(w.allocation, {"allocated": 0, "unallocated": 0})
                held["allocated" if w.charged else "unallocated"] += n
        return workloads, gpus

    def idle_gpus(self) -> dict[str, int]:
        """Per leaf: GPUs held by running work idle for at least `idle_after` (every
        leaf, 0 when none). Readings of work that has ended are dropped here."""
        out = dict.fromkeys(self.state.tree.leaves(), 0)
        now = self.last_time
        idle_after = self.state.config.idle_after
        for wid in list(self.readings):
            w = self.state.workloads.get(wid)
            if w is None:
                del self.readings[wid]
                continue
            u = current(self.readings[wid], w)
            if u is not None and now is not None and is_idle(u, w, now, idle_after):
                out[w.allocation] = out.get(w.allocation, 0) + w.gpus
        return out

    def allocation_counts(self) -> tuple[dict[str, _Histogram], dict[str, dict[str, int]]]:
        """Per leaf: its queue-wait histogram and its preemptions by reason. Every leaf
        of the tree is there (at 0 until something happens: a counter that appears at
        1 loses that first increase to `increase()`), and so is every allocation that
        once had some, even if it left the tree (counters do not go back)."""
        for leaf in self.state.tree.leaves():
            self._allocation_wait(leaf)
            self._allocation_preemptions(leaf)
        return self.allocation_waits, self.allocation_preemptions

    def oldest_waits(self) -> dict[str, float]:
        """Per class, how long the longest-waiting workload has waited so far (journal
        time): the wait histogram only sees waits that ended, so work stuck in the
        queue shows here first."""
        out = dict.fromkeys(QUEUE_CLASSES, 0.0)
        now = self.last_time
        if now is None:
            return out
        for _, w in self.usage.waiting():
            klass = self.queue_class(w.tags, w.min_runtime, w.gpus)
            out[klass] = max(out[klass], now - w.since)
        return out

    def fair_share(self) -> dict[str, float]:
        state = self.state
        now = state.now
        if not math.isfinite(now):
            return {}
        return {path: fair_ratio(state, path, now) for path in sorted(state.tree.nodes)}

    def delivered(self) -> dict[str, tuple[float, float]]:
        """(owed, received) GPU-seconds per leaf since the first record (cached per
        record count: recomputing reads every hourly row)."""
        if self._delivered_at != self.records:
            sums: dict[str, list[float]] = {}
            for row in self.usage.hourly_rows():
                acc = sums.setdefault(row["allocation"], [0.0, 0.0])
                acc[0] += row["owed_gpu_s"]
                acc[1] += row["received_gpu_s"]
            self._delivered = {a: (o, r) for a, (o, r) in sorted(sums.items())}
            self._delivered_at = self.records
        return self._delivered


class MetricsCollector(Collector):
    """A prometheus-client collector fed journal events with `apply` (see module doc)."""

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.clusters: dict[str, _ClusterFold] = {}
        self.skipped = 0  # records of types this version does not know
        self.unreadable = 0  # records a follower skipped as corrupt (see allot metrics)
        # a scheduler rebuilding its state: only this is exposed meanwhile (the numbers
        # of a half-folded journal would mislead; an exporter that does not answer at
        # all looks dead, AllotMetricsDown)
        self.recovering = False
        # an embedded journal's folder: its filesystem's space is exposed, read at each
        # scrape (a full disk stops `allot serve`; the alert must come before)
        self.data_dir: Path | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------- folding
    def apply(self, event: Any, *, written: float | None = None, timed: bool = True) -> None:
        """Fold one journal record: a `domain.events` model or its wire-form dict.
        Dicts of unknown types (a newer writer) are skipped. `written`: the wall-clock
        time the scheduler wrote it, when it is fed as it is written; `timed=False`:
        not in the decision latency (a restarted scheduler's recovered journal)."""
        if isinstance(event, dict):
            raw = upcast(dict(event))
            if raw.get("type") not in KNOWN_TYPES:
                self.skipped += 1
                return
            event = ev.parse_event(raw)
        with self._lock:
            fold = self.clusters.get(event.cluster)
            if fold is None:
                fold = self.clusters[event.cluster] = _ClusterFold(event.cluster)
            fold.apply(event, written, timed)

    def apply_all(self, events: Iterable[Any]) -> MetricsCollector:
        for e in events:
            self.apply(e)
        return self

    def registry(self) -> CollectorRegistry:
        """A private registry holding only this collector (no global state)."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        return registry

    # ------------------------------------------------------------- exposing
    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            return iter(self._families())

    def _families(self) -> list[Metric]:
        recovering = GaugeMetricFamily(
            "allot_scheduler_recovering",
            "1 while the scheduler rebuilds its state from snapshot and journal (nothing "
            "else is exposed meanwhile), else 0.",
        )
        recovering.add_metric([], 1.0 if self.recovering else 0.0)
        if self.recovering:
            return [recovering, *self._data_families()]
        return [recovering, *self._journal_families(), *self._data_families()]

    def _data_families(self) -> list[Metric]:
        """The data folder's filesystem, as node_exporter's node_filesystem_*_bytes
        (avail: what an unprivileged writer may still use). No samples without a
        folder, or when it cannot be read (the folder gone: serve says so itself)."""
        avail = GaugeMetricFamily(
            "allot_data_filesystem_avail_bytes",
            "Bytes an unprivileged writer may still use on the filesystem of the embedded "
            "journal's folder (--data); when none are left allot serve stops.",
            labels=["path"],
        )
        size = GaugeMetricFamily(
            "allot_data_filesystem_size_bytes",
            "Size of the filesystem of the embedded journal's folder (--data).",
            labels=["path"],
        )
        try:
            fs = os.statvfs(self.data_dir) if self.data_dir is not None else None
        except OSError:
            fs = None
        if fs is not None:
            avail.add_metric([str(self.data_dir)], float(fs.f_bavail * fs.f_frsize))
            size.add_metric([str(self.data_dir)], float(fs.f_blocks * fs.f_frsize))
        return [avail, size]

    def _journal_families(self) -> list[Metric]:
        c = ["cluster"]
        gpus = GaugeMetricFamily(
            "allot_gpus",
            "GPUs by state: allocated / unallocated (held by charged / free work), idle "
            "(free on healthy hosts), cordoned (free on unhealthy hosts); they sum to the "
            "registered GPUs.",
            labels=[*c, "state"],
        )
        workloads = GaugeMetricFamily(
            "allot_workloads",
            "Live workloads by state: pending (held included) / running.",
            labels=[*c, "state"],
        )
        allocation_workloads = GaugeMetricFamily(
            "allot_allocation_workloads",
            "Live workloads per leaf allocation by state: pending (held included) / running "
            "(Kueue: kueue_pending_workloads, kueue_admitted_active_workloads per ClusterQueue).",
            labels=[*c, "allocation", "state"],
        )
        allocation_gpus = GaugeMetricFamily(
            "allot_allocation_gpus",
            "GPUs held by each leaf allocation's running work: allocated (charged) / "
            "unallocated (free, preemptible) (Kueue: kueue_cluster_queue_resource_usage).",
            labels=[*c, "allocation", "state"],
        )
        idle_gpus = GaugeMetricFamily(
            "allot_allocation_idle_gpus",
            "GPUs held by each leaf allocation's running work that its launcher reports "
            "idle (utilization below idle_threshold for idle_after or longer).",
            labels=[*c, "allocation"],
        )
        waits = HistogramMetricFamily(
            "allot_queue_wait_seconds",
            "Submit to first placement, by class (short: debug-tagged or short and small); "
            "waits after a requeue are not counted.",
            labels=[*c, "class"],
        )
        allocation_waits = HistogramMetricFamily(
            "allot_allocation_queue_wait_seconds",
            "Submit to first placement per leaf allocation (who waits; Kueue: "
            "kueue_admission_wait_time_seconds per ClusterQueue); waits after a requeue are "
            "not counted, and work still waiting is not in it yet.",
            labels=[*c, "allocation"],
        )
        oldest = GaugeMetricFamily(
            "allot_oldest_wait_seconds",
            "How long the longest-waiting workload of each class has waited so far.",
            labels=[*c, "class"],
        )
        preemptions = CounterMetricFamily(
            "allot_preemptions", "Preemptions by reason.", labels=[*c, "reason"]
        )
        allocation_preemptions = CounterMetricFamily(
            "allot_allocation_preemptions",
            "Preemptions per leaf allocation of the preempted work (who is preempted; Kueue: "
            "kueue_evicted_workloads_total per ClusterQueue), by reason.",
            labels=[*c, "allocation", "reason"],
        )
        requeued = CounterMetricFamily(
            "allot_requeued_attempts",
            "Attempts that ended with the workload waiting again, by why (a preemption's "
            "reason, or lost: its node died under resumable work).",
            labels=[*c, "reason"],
        )
        cordons = CounterMetricFamily(
            "allot_host_cordons",
            "Times each host went from healthy to unhealthy (a host listed only once it "
            "has): a flapping host, whose work is moved off at each, counts up fast.",
            labels=[*c, "host"],
        )
        ended = CounterMetricFamily(
            "allot_workloads_ended",
            "Workloads that ended, by how (allot acct's states).",
            labels=[*c, "state"],
        )
        fair = GaugeMetricFamily(
            "allot_fair_share_ratio",
            "usage / (share x capacity x window) per allocation (tree node), usage as of "
            "the last usage bucket edge (what the scheduler ranks on).",
            labels=[*c, "allocation"],
        )
        delivered = GaugeMetricFamily(
            "allot_delivered_ratio",
            "min(1, received / owed) per leaf allocation since the first record.",
            labels=[*c, "allocation"],
        )
        owed = CounterMetricFamily(
            "allot_owed_gpu_seconds",
            "GPU-seconds owed per leaf allocation (hourly min(entitlement, demand)).",
            labels=[*c, "allocation"],
        )
        received = CounterMetricFamily(
            "allot_received_gpu_seconds",
            "Charged GPU-seconds received per leaf allocation.",
            labels=[*c, "allocation"],
        )
        decisions = CounterMetricFamily(
            "allot_decisions", "Scheduling decisions by type.", labels=[*c, "type"]
        )
        latency = HistogramMetricFamily(
            "allot_decision_latency_seconds",
            "Time from the causing input to the decision (0 when folded from a journal).",
            labels=c,
        )
        rejected = CounterMetricFamily(
            "allot_rejected_inputs", "Rejected inputs by rejection type.", labels=[*c, "reason"]
        )
        records = CounterMetricFamily("allot_journal_records", "Journal records folded.", labels=c)
        last = GaugeMetricFamily(
            "allot_journal_last_record_timestamp_seconds",
            "Time of the last journal record (unix seconds).",
            labels=c,
        )
        lag = GaugeMetricFamily(
            "allot_journal_lag_seconds",
            "Wall clock minus the last journal record's time (allot serve ticks every 10 s "
            "by default: more means the scheduler is stopped, behind, or cut off from Kafka).",
            labels=c,
        )
        now = self.clock()
        for name in sorted(self.clusters):
            f = self.clusters[name]
            for state, n in f.gpus().items():
                gpus.add_metric([name, state], n)
            for state, n in f.workloads().items():
                workloads.add_metric([name, state], n)
            per_workloads, per_gpus = f.by_allocation()
            for path in sorted(per_workloads):
                for state, n in per_workloads[path].items():
                    allocation_workloads.add_metric([name, path, state], n)
            for path in sorted(per_gpus):
                for state, n in per_gpus[path].items():
                    allocation_gpus.add_metric([name, path, state], n)
            for path, n in sorted(f.idle_gpus().items()):
                idle_gpus.add_metric([name, path], n)
            for klass, h in f.waits.items():
                waits.add_metric([name, klass], h.buckets(), h.sum)
            for klass, age in f.oldest_waits().items():
                oldest.add_metric([name, klass], age)
            for reason, n in f.preemptions.items():
                preemptions.add_metric([name, reason], n)
            per_waits, per_preemptions = f.allocation_counts()
            for path in sorted(per_waits):
                h = per_waits[path]
                allocation_waits.add_metric([name, path], h.buckets(), h.sum)
            for path in sorted(per_preemptions):
                for reason, n in per_preemptions[path].items():
                    allocation_preemptions.add_metric([name, path, reason], n)
            for reason, n in f.requeued.items():
                requeued.add_metric([name, reason], n)
            for how, n in f.ended.items():
                ended.add_metric([name, how], n)
            for host in sorted(f.cordons):
                cordons.add_metric([name, host], f.cordons[host])
            for path, r in f.fair_share().items():
                fair.add_metric([name, path], r)
            for path, (o, r) in f.delivered().items():
                owed.add_metric([name, path], o)
                received.add_metric([name, path], r)
                if o > 0:
                    delivered.add_metric([name, path], min(1.0, r / o))
            for kind, n in f.decisions.items():
                decisions.add_metric([name, kind], n)
            latency.add_metric([name], f.latency.buckets(), f.latency.sum)
            for kind, n in f.rejections.items():
                rejected.add_metric([name, kind], n)
            records.add_metric([name], f.records)
            if f.last_time is not None:
                last.add_metric([name], f.last_time)
                lag.add_metric([name], max(0.0, now - f.last_time))
        families = [
            gpus,
            workloads,
            allocation_workloads,
            allocation_gpus,
            idle_gpus,
            waits,
            allocation_waits,
            oldest,
            preemptions,
            allocation_preemptions,
            requeued,
            cordons,
            ended,
            fair,
            delivered,
            owed,
            received,
            decisions,
            latency,
            rejected,
            records,
            last,
            lag,
        ]
        # of no cluster: the record could not be read
        unreadable = CounterMetricFamily(
            "allot_journal_unreadable_records",
            "Journal records a following exporter skipped as corrupt.",
        )
        unreadable.add_metric([], self.unreadable)
        families.append(unreadable)
        return families


def exposition(registry: CollectorRegistry) -> str:
    """The Prometheus text format of `registry` (what /metrics serves)."""
    return generate_latest(registry).decode()


class LiveMetrics:
    """A running scheduler's /metrics: a `MetricsCollector` fed the journal lines it
    recovers and writes, served by prometheus_client's HTTP server from `start()` (a
    port in use raises OSError at once). Until `ready()` it shows only
    `allot_scheduler_recovering 1`, so no scrape sees a half-folded journal. Shared by
    `allot serve --metrics-port` and the faust worker's $ALLOT_METRICS_PORT."""

    def __init__(
        self,
        port: int,
        bind: str = "127.0.0.1",
        *,
        on_bad: Callable[[str], None] | None = None,
        data_dir: Path | None = None,
    ) -> None:
        self.port = port
        self.bind = bind
        self.collector = MetricsCollector()
        self.collector.data_dir = data_dir
        self.server: Any = None
        self.bad = 0  # lines that could not be folded (the first is reported)
        self.on_bad = on_bad

    def feed(self, lines: list[bytes], *, recovered: bool = False) -> None:
        """Fold `lines` the scheduler just wrote (or, `recovered`, found on start)."""
        from streams.codec import Undecodable, load_object

        written = time.time()  # the decision latencies of what is being written end here
        for line in lines:
            try:
                self.collector.apply(load_object(line), written=written, timed=not recovered)
            except (Undecodable, ValueError) as why:
                self.bad += 1
                if self.bad == 1 and self.on_bad is not None:
                    self.on_bad(f"metrics skip a journal record: {why}")

    def ready(self) -> None:
        """Recovery is done: expose what the journal says."""
        self.collector.recovering = False

    def start(self) -> None:
        from prometheus_client import start_http_server

        if self.server is not None:
            return
        self.collector.recovering = True
        self.server, _thread = start_http_server(
            self.port, addr=self.bind, registry=self.collector.registry()
        )

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


__all__ = [
    "METRIC_NAMES",
    "LiveMetrics",
    "MetricsCollector",
    "exposed_series_names",
    "exposition",
]
