"""Scheduler state for one cluster: what `evolve` folds and `decide` reads.

State is mutable for speed (a copy per event would dominate the cost); it changes
only through `domain.evolve.evolve`, so the journal fully determines it.

Pending work sits in *buckets* keyed by (leaf, gpus, wants_allocation, short_small),
each a sorted list in the ordering policy's static key. The scheduling cycle merges
bucket heads, so its cost depends on the number of buckets, not of pending workloads.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from sortedcontainers import SortedList

from domain.config import SchedulerConfig
from domain.headroom import pick_headroom
from domain.ledger import UsageLedger
from domain.tree import AllocationTree

PENDING, RUNNING = "pending", "running"
# (leaf, gpus, wants_allocation, short_small), and a fifth element, True, for work asked
# on one host: it waits where a gang of its size may run, so it needs buckets (and
# failure groups) of its own; other keys keep their shape (snapshots, cached heads).
# Allocated work under a per-user GPU limit has (..., one_host, user): a bucket per user
BucketKey = tuple[Any, ...]


@dataclass(slots=True)
class Workload:
    id: str
    allocation: str
    actor: str
    gpus: int
    min_runtime: float
    resumable: bool
    priority: int
    tags: tuple[str, ...]
    submit_time: float
    expected_runtime: float | None = None
    name: str | None = None
    state: str = PENDING
    attempt: int = 0
    hosts: dict[str, tuple[int, ...]] = field(default_factory=dict)
    held: int = 0  # GPUs held while running
    start: float = 0.0
    protected_until: float = 0.0  # math.inf: protected until it ends (legacy)
    charged: bool = False
    exposed: bool = False  # running and past protection: some policy may preempt it
    first_placed: float | None = None
    queue_key: tuple[Any, ...] = ()
    bucket: BucketKey | None = None
    on_hold: bool = False  # pending but out of the queue until released (allot hold)
    lost: int = 0  # attempts lost with their node and requeued (see max_lost_requeues)
    one_host: bool = False  # asked for all its GPUs on one host (never a gang)

    @property
    def wants_allocation(self) -> bool:
        return self.min_runtime > 0


def id_order(wid: str) -> tuple[str, int, str]:
    """The queue's last tie-break: the workload id, but array tasks (`BASE_N`) by index,
    as Slurm runs them (`BASE_4` before `BASE_10`); other ids by their text."""
    base, sep, index = wid.rpartition("_")
    # bounded: int() of thousands of digits is slow, and refused past 4,300
    if sep and index.isascii() and index.isdigit() and len(index) <= 18:
        return (base, int(index), wid)
    return (wid, -1, wid)


@dataclass(slots=True)
class Host:
    name: str
    index: int
    gpus: int
    free: list[int]  # free GPU indices, ascending
    healthy: bool = True
    drained: bool = False
    workloads: dict[str, int] = field(default_factory=dict)  # workload id -> GPUs held here
    exposed: int = 0  # GPUs held here by work past its protection
    # flap damping (config health_holddown): when the host last returned to service; set
    # when it failed again sooner than the hold-down after that (its next healthy report
    # is held down); while held down, when it returns (it stays cordoned until then)
    returned: float = -math.inf
    flapping: bool = False
    held_until: float | None = None


def head(queue: SortedList) -> tuple[Any, str]:
    """`queue[0]` without SortedList's general indexing (a hot path)."""
    return queue._lists[0][0]


class State:
    """Everything `decide` needs, for one cluster."""

    def __init__(self, cluster: str, config: SchedulerConfig | None = None) -> None:
        from domain.policies import resolve_ordering, resolve_placement

        self.cluster = cluster
        self.config = config or SchedulerConfig()
        self.ordering = resolve_ordering(self.config.ordering)
        self.placement = resolve_placement(self.config.placement)
        self.now = -math.inf
        self.seq = 0  # decisions and rejections emitted so far: their ids
        self.tree = AllocationTree()
        self.charged = UsageLedger(self.config.window, self.config.bucket)
        self.unallocated = UsageLedger(self.config.window, self.config.bucket)
        self.hosts: dict[str, Host] = {}
        self.next_host_index = 0  # a new host's index (hosts removed keep theirs unused)
        self.with_free: dict[str, None] = {}  # hosts with a free GPU: where placement looks
        self.capacity = 0  # registered GPUs (healthy or not)
        # host GPUs -> how many hosts have that many: registered, and of those healthy
        self.host_sizes: dict[int, int] = {}
        self.healthy_sizes: dict[int, int] = {}
        # GPUs of the biggest healthy host: larger work is a gang (an unhealthy host takes
        # nothing, so it does not make work wait for one host that big); of the
        # registered ones while none is healthy
        self.largest_host = 0
        self.smallest_host = 0  # ... and of the smallest (0: no host yet)
        self.healthy_capacity = 0
        self.workloads: dict[str, Workload] = {}  # live: pending or running
        self.queues: dict[BucketKey, SortedList] = {}
        self.pending_count = 0
        self.cordoned: dict[str, None] = {}  # unhealthy hosts, ordered by registration
        # hosts reported healthy but held down for flapping (health_holddown): -> when
        # they return to service (they are among `cordoned` until then)
        self.held_down: dict[str, float] = {}
        self.headroom: frozenset[str] = frozenset()
        self.protection_ends: list[tuple[float, str, int]] = []  # heap
        # work past protection, grouped by what preemption rules look at:
        # (charged, allocation, priority) -> host -> workload id -> GPUs on that host
        self.exposed: dict[tuple[bool, str, int], dict[str, dict[str, int]]] = {}
        # bumped by anything that could unblock waiting work (see decide's quick cycles)
        self.version = 0
        # bumped only by what changes who may preempt whom or where work may go: a
        # preemption, a budget, host or config change (a protection end only adds
        # victims on its hosts: see `changed_hosts`)
        self.shape_version = 0
        # where something changed since the last cycle: GPUs freed, or work past its
        # protection (victims appeared); a light cycle looks for victims only here
        self.changed_hosts: dict[str, None] = {}
        self.fresh: list[str] = []  # submitted since the last full cycle
        self.blocked: Any = None  # the last full cycle's outcome (domain.decide.Blocked)
        self.legacy_protected: dict[str, int] = {}  # top-level -> GPUs of never-preempted work
        # running work whose requeue was asked (-> by whom): the next cycle stops it
        self.requeue_asked: dict[str, str] = {}
        # running work holding GPUs that left the cluster (host removed or shrunk):
        # workload id -> (host, its GPU indices there that are gone, the host's GPUs
        # now; 0: removed); the next cycle stops it as on a lost node
        self.gpus_removed: dict[str, tuple[str, list[int], int]] = {}
        # dedup horizon: input ids and ended workload ids, remembered for one window
        # (id -> when, and the ids in that order: times only grow, and an id is never
        # remembered twice while remembered, so the order holds bare ids — a
        # (time, id) tuple per entry would cost ~56 more bytes per id)
        self.seen_ids: dict[str, float] = {}
        self.seen_order: deque[str] = deque()
        self.ended: dict[str, float] = {}
        self.ended_order: deque[str] = deque()
        # per-user limits (`AllocationTree.limited`): (limiting node, user) -> [pending
        # workloads, GPUs held by charged work] under that node; kept only while some
        # node sets a limit (every change of it is behind `tree.limited`)
        self.user_usage: dict[tuple[str, str], list[int]] = {}
        self._init_caches()

    def _init_caches(self) -> None:
        # decide's cache of bucket heads: bucket -> (epoch, (sort key, bucket, allocated,
        # failure group)) as Cycle.entry makes them, valid while the epoch is current
        # (same policy, tree and leaf ranks; see domain.decide.Cycle.heap);
        # enqueue/dequeue drop a bucket's entry
        self.heads: dict[BucketKey, tuple[int, tuple[Any, ...]]] = {}
        self.heads_epoch = 0
        self.heads_token: tuple[Any, ...] | None = None
        self.heads_changes = 0  # bumped when a bucket appears, goes or changes its head
        self.heads_heap: tuple[Any, ...] | None = None  # ((epoch, changes), heap, ...)
        # decide's victim sort keys: workload id -> (key, workload), None -> the leaf ranks
        # they were made for (kept across cycles that share it); a placement drops its
        # workload's entry (the key reads the start)
        self.victim_keys: dict[Any, Any] = {}

    def __setstate__(self, saved: dict[str, Any]) -> None:
        self.__dict__.update(saved)
        if "healthy_sizes" not in saved:  # pickled before sizes were counted by health
            self.host_sizes, self.healthy_sizes = {}, {}
            for host in self.hosts.values():
                self.count_host(host, 1)
            self.sizes_changed()
        if "next_host_index" not in saved:  # pickled before hosts could be removed
            self.next_host_index = len(self.hosts)
            self.gpus_removed = {}
        if "victim_keys" not in saved:  # pickled before (some of) the caches existed
            self._init_caches()
        if "user_usage" not in saved:  # pickled before per-user limits
            self.user_usage = {}

    # ------------------------------------------------------------ helpers
    def next_id(self) -> str:
        return f"{self.cluster}/{self.seq}"

    def is_admin(self, actor: str) -> bool:
        """An empty admin list means nobody locked the cluster down."""
        return not self.config.admins or actor in self.config.admins

    def short_small(self, w: Workload) -> bool:
        return self.config.is_short_small(w.gpus, w.min_runtime)

    def allocated(self, w: Workload) -> bool:
        """Would `w` run allocated (charged, protected) if placed now?"""
        return w.wants_allocation and self.tree.share(w.allocation) > 0

    def max_host_gpus(self) -> int:
        return self.largest_host

    def single_host(self, w: Workload) -> bool:
        """Does `w` go on one host? When asked (`one_host`), or when it fits on the biggest
        healthy host; else it takes whole hosts (a gang)."""
        return w.one_host or w.gpus <= self.largest_host

    # ---------------------------------------------------- per-user limits
    def count_user(self, w: Workload, pending: int, gpus: int) -> None:
        """Count `w`'s change (pending workloads, charged GPUs) for its submitter under
        each node on its path that sets a per-user limit. Callers check `tree.limited`
        first: without a limit anywhere nothing is counted."""
        usage = self.user_usage
        for node in self.tree.limits_of(w.allocation):
            key = (node.path, w.actor)
            counts = usage.get(key)
            if counts is None:
                counts = usage[key] = [0, 0]
            counts[0] += pending
            counts[1] += gpus

    def recount_users(self) -> None:
        """Count every live workload anew (a limit was set or removed)."""
        self.user_usage = {}
        if not self.tree.limited:
            return
        for w in self.workloads.values():
            if w.state == PENDING:
                self.count_user(w, 1, 0)
            elif w.charged:
                self.count_user(w, 0, w.held)

    def user_counts(self, path: str, user: str) -> tuple[int, int]:
        """`user`'s pending workloads and charged GPUs under limiting node `path`."""
        counts = self.user_usage.get((path, user))
        return (counts[0], counts[1]) if counts else (0, 0)

    def over_gpu_limit(self, w: Workload) -> tuple[str, int, int] | None:
        """The first node on `w`'s path whose max_gpus_per_user starting `w` would
        exceed for its submitter: (node, the limit, GPUs the user's charged work holds
        under it now); None when within every limit. Only allocated work is limited."""
        for node in self.tree.limits_of(w.allocation):
            cap = node.max_gpus_per_user
            if cap is None:
                continue
            counts = self.user_usage.get((node.path, w.actor))
            held = counts[1] if counts else 0
            if held + w.gpus > cap:
                return node.path, cap, held
        return None

    def count_host(self, host: Host, sign: int) -> None:
        """Count `host` (sign 1) in `host_sizes`/`healthy_sizes` at its size and health,
        or take it out (-1) before either changes; `sizes_changed` then."""
        for sizes, counted in ((self.host_sizes, True), (self.healthy_sizes, host.healthy)):
            if not counted:
                continue
            left = sizes.get(host.gpus, 0) + sign
            if left:
                sizes[host.gpus] = left
            else:
                del sizes[host.gpus]

    def sizes_changed(self) -> None:
        """The biggest and smallest host, among the healthy ones (see `largest_host`),
        and the headroom hosts, which depend on them."""
        sizes = self.healthy_sizes or self.host_sizes
        self.largest_host = max(sizes, default=0)
        self.smallest_host = min(sizes, default=0)
        self.recompute_headroom()

    def fit_kind(self, gpus: int, one_host: bool = False) -> bool | str:
        """True for a gang on a cluster of mixed host sizes: the one case where work
        needing more GPUs may fit when work needing fewer did not (whole small hosts
        can hold a gang while no big host has room for a single-host job), so failures
        of the two kinds say nothing about each other (decide's failure groups).
        "one_host" for work asked on one host that is bigger than every healthy host:
        it fails where a gang of its size may fit, so its failures cover no gang."""
        if gpus <= self.largest_host:
            return False
        if one_host:
            return "one_host"
        return self.smallest_host != self.largest_host

    def enqueue(self, w: Workload) -> None:
        w.state = PENDING
        w.queue_key = (*self.ordering.queue_key(w), *id_order(w.id))
        key: BucketKey = (w.allocation, w.gpus, w.wants_allocation, self.short_small(w))
        if w.one_host:
            key = (*key, True)
        tree = self.tree
        if tree.limited and w.wants_allocation and tree.gpu_limited(w.allocation):
            # each user's work waits in buckets of its own: one over its GPU limit is
            # passed over without holding up other users' work of the same shape
            key = (*key[:4], w.one_host, w.actor)
        w.bucket = key
        item = (w.queue_key, w.id)
        queue = self.queues.get(key)
        if queue is None:
            queue = self.queues[key] = SortedList()
            queue.add(item)
            self._head_changed(key)
        else:
            queue.add(item)
            if head(queue) is item:
                self._head_changed(key)
        self.pending_count += 1

    def dequeue(self, w: Workload) -> None:
        key = w.bucket
        if key is None:
            return
        queue = self.queues[key]
        item = (w.queue_key, w.id)
        if head(queue) == item:
            self._head_changed(key)
        queue.remove(item)
        if not queue:
            del self.queues[key]
        w.bucket = None
        self.pending_count -= 1

    def _head_changed(self, key: BucketKey) -> None:
        self.heads.pop(key, None)
        self.heads_changes += 1

    def requeue_all(self) -> None:
        """Re-key every pending workload (the ordering policy changed)."""
        pending = [self.workloads[wid] for q in self.queues.values() for _, wid in q]
        self.queues.clear()
        self.heads.clear()
        self.heads_changes += 1
        self.pending_count = 0
        for w in pending:
            w.bucket = None
            self.enqueue(w)

    def recompute_headroom(self) -> None:
        """The hosts kept for short, small jobs (`domain.headroom.pick_headroom`)."""
        hosts = self.hosts
        newest_first = ((name, h.gpus) for name in reversed(hosts) if (h := hosts[name]).healthy)
        healthy = len(hosts) - len(self.cordoned)  # cordoned: the unhealthy hosts
        largest = self.largest_host
        self.headroom = frozenset(
            pick_headroom(
                newest_first,
                healthy,
                self.config.headroom_hosts,
                largest,
                self.healthy_sizes.get(largest, 0),
            )
        )

    def remember(self, order: deque[str], seen: dict[str, float], key: str) -> None:
        seen[key] = self.now
        order.append(key)

    def forget_old(self) -> None:
        horizon = self.now - self.config.window
        for order, seen in ((self.seen_order, self.seen_ids), (self.ended_order, self.ended)):
            while order:
                when = seen.get(order[0])
                if when is not None and when >= horizon:
                    break
                key = order.popleft()
                if when is not None:
                    del seen[key]

    def expose(self, w: Workload) -> None:
        """`w`'s protection has ended: its hosts become places victims may be found."""
        w.exposed = True
        self.version += 1
        group = self.exposed.setdefault((w.charged, w.allocation, w.priority), {})
        for name, gpus in w.hosts.items():
            self.hosts[name].exposed += len(gpus)
            group.setdefault(name, {})[w.id] = len(gpus)
            self.changed_hosts[name] = None

    def unexpose(self, w: Workload) -> None:
        if not w.exposed:
            return
        w.exposed = False
        key = (w.charged, w.allocation, w.priority)
        group = self.exposed.get(key, {})
        for name, gpus in w.hosts.items():
            host = self.hosts.get(name)
            if host is not None:
                host.exposed -= len(gpus)
            on_host = group.get(name)
            if on_host is not None:
                on_host.pop(w.id, None)
                if not on_host:
                    del group[name]
        if not group:
            self.exposed.pop(key, None)

    def expose_due(self) -> None:
        """Expose running work whose protection ended by `now` (amortized O(1))."""
        heap = self.protection_ends
        while heap and heap[0][0] <= self.now:
            _, wid, attempt = heapq.heappop(heap)
            w = self.workloads.get(wid)
            if w is not None and w.state == RUNNING and w.attempt == attempt and not w.exposed:
                self.expose(w)

    def next_protection_end(self) -> float | None:
        """Earliest protection end still ahead of `now` among running charged work."""
        heap = self.protection_ends
        while heap:
            until, wid, attempt = heap[0]
            w = self.workloads.get(wid)
            if w is None or w.state != RUNNING or w.attempt != attempt or w.exposed:
                heapq.heappop(heap)
                continue
            return until
        return None
