"""`decide(state, now) -> decisions`: one scheduling cycle (DESIGN §5)."""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from itertools import islice
from typing import Any

from domain import events as ev
from domain.admission import admit
from domain.evolve import evolve
from domain.fairshare import Ranking, diverging, entitlement, outranks
from domain.free_hosts import FreeHosts
from domain.policies.ordering import BUILTIN as _BUILTIN_ORDERINGS
from domain.reservations import Reservations
from domain.state import PENDING, State, Workload, head
from domain.victims import VictimSearch


def _num(x: float) -> float | None:
    """A JSON-safe number for `explain` (None stands for infinity)."""
    return round(x, 6) if math.isfinite(x) else None


def preemption_scope(policy: Any, w: Workload, allocated: bool) -> Any:
    """What `w`'s right to preempt depends on, beyond its GPUs: work of one scope that
    failed to fit with fewer GPUs proves the rest of the scope cannot fit either. None
    for work that never preempts (free GPUs alone decide, alike for its whole class);
    a policy without `preemption_scope` is taken to judge by allocation and priority."""
    if not (allocated or policy.unallocated_may_preempt):
        return None
    scope = getattr(policy, "preemption_scope", None)
    return (w.allocation, w.priority) if scope is None else scope(w)


def decide(state: State, now: float, cause: str | None = None) -> list[Any]:
    """Run one scheduling cycle at event time `now` and return its decisions.

    Each decision is folded into `state` through `evolve` as it is made, so later
    steps of the same cycle see the GPUs earlier steps took or freed; the ranking is
    taken once, so every decision of a cycle is judged on the same snapshot.

    1. Snapshot: rank the leaves once (the ordering policy; Fair-Tree over fair-share
       ratios by default) and note the headroom hosts.
    2. Drain: stop running work that held GPUs which left the cluster (a host removed
       or shrunk: reason gpus_removed, requeued as after a lost node); stop running
       work whose requeue was asked (`allot requeue`: preempted,
       reason requested, always requeued); on unhealthy hosts, preempt unallocated work
       now and allocated work whose protection has ended; report a host `host.drained`
       once it is empty.
    3. Order: merge the heads of the pending buckets by the policy's sort key.
    4. Place: put the next workload on free GPUs — one host if it fits on one, else
       whole hosts (gang) — never on a headroom host unless it is short and small,
       unallocated, or too big for the other hosts together, and on a reserved host
       only if it cannot delay the reservation.
    5. Preempt: otherwise, if it may preempt, free GPUs from eligible victims: on the
       host (or hosts, for a gang) where that stops the fewest GPUs elsewhere (victims
       running on other hosts too), then the fewest charged GPUs, then the fewest GPUs;
       on a host, unallocated work first, then resumable work (it is requeued, not
       ended), then the lowest ranked, then the most recently started.
    6. Reserve: each of the first MAX_RESERVATIONS allocated workloads that fit neither
       way — and that the healthy hosts could hold if empty — reserves the hosts that
       free soonest for it (protection ends, declared runtimes); later work backfills
       them only if it cannot delay that start.
    7. Follow up: after a preemption (it may requeue work the order has passed, or free
       more GPUs than its beneficiary took after work that needed them failed), or once
       a reservation's holder started (work tried before it was kept off its hosts),
       while GPUs are free a light cycle at the same moment places waiting work on them
       (no preemption: that is for the next cycle, on the hosts this one changed).
    A workload that cannot be placed ends its bucket's turn, and every later bucket of
    the same group needing at least as many GPUs is skipped: such work cannot fit
    either — unless only a reservation kept it off GPUs (its minimum runtime would
    overrun the holder's start, or the holder could not preempt it later): work of
    the group with a shorter minimum runtime, or of another allocation or level, may
    still backfill, so it is still tried, in later buckets and among the next
    BACKFILL_DEPTH workloads behind the head in its own bucket. A group is the
    class (allocated, short) plus, for work that may preempt, what its preemption
    rights depend on (`preemption_scope`: the allocation under fair share) — another
    allocation's work may reclaim where this one could not. That keeps a cycle's cost
    independent of the number of pending workloads.

    Quick cycles: when nothing that could unblock waiting work happened since the last
    full cycle (no GPUs freed, no protection ended, no budget, host or config change,
    no window bucket left), only the newly submitted workloads are tried, on that
    cycle's snapshot and against its failures. Blocked work is re-examined at the next
    such change — at the latest at the next bucket edge. Ratios are read as of the
    last bucket edge (`UsageLedger.ranked_reader`), so the ranking a quick or light
    cycle reuses is exactly the one a full cycle would take: they may look at less,
    never judge on stale numbers.
    """
    if not state.cordoned and not state.requeue_asked and not state.gpus_removed:
        # nothing to drain and nothing fresh to try on an unchanged cluster: no cycle
        # (what `quick` would conclude, without building one; a tick or an inert cancel)
        if not state.pending_count:
            return []
        last = state.blocked
        if (
            not state.fresh
            and last is not None
            and last.version == state.version
            and now < last.edge
        ):
            return []
    cycle = Cycle(state, now, cause)
    if state.gpus_removed:
        cycle.stop_on_removed_gpus()
    if state.requeue_asked:
        cycle.requeue_asked()
    if state.cordoned:
        cycle.drain()
    if state.pending_count and not cycle.quick():
        light = cycle.can_be_light() and not cycle.force_full and not cycle.reservation_moved()
        cycle.schedule(light=light)
    out = cycle.out
    if (
        state.with_free
        and (cycle.holder_started or any(e.type == "workload.preempted" for e in out))
        and cycle.can_be_light()
    ):
        # a preemption may requeue work this cycle's order has passed, or free more GPUs
        # than its beneficiary took (a gang's hosts) after work that needed them failed;
        # a reservation's holder that started leaves its hosts' other GPUs to work the
        # reservation kept off them earlier in the cycle: while GPUs are free, a light
        # cycle with no host marked changed tries all waiting work, in order, on free
        # GPUs only, at once rather than at the next input, which may be hours away;
        # what changed stays for the next cycle's victim search
        changed, state.changed_hosts = state.changed_hosts, {}
        follow = Cycle(state, now, cause)
        follow.schedule(light=True)
        out.extend(follow.out)
        state.changed_hosts = {**changed, **state.changed_hosts}
    return out


def handle(state: State, event: Any) -> list[Any]:
    """Admit one input, fold it, decide: the journal records it produces, in order."""
    accepted = admit(state, event)
    evolve(state, accepted)
    out = [accepted]
    if not ev.is_informational(accepted):  # (a report for views: no cycle)
        out.extend(decide(state, state.now, cause=accepted.id))
    return out


def next_wakeup(state: State) -> float | None:
    """The next moment a decision could change with no new input, while work waits or
    hosts drain: a protection end, the end of a flapping host's hold-down or, while
    work waits, the next usage bucket edge (ratios are read anew there)."""
    if not state.pending_count and not state.cordoned:
        return None
    moments = []
    protection = state.next_protection_end()
    if protection is not None:
        moments.append(protection)
    if state.held_down:
        moments.append(min(state.held_down.values()))
    if state.pending_count:
        moments.append(state.charged.next_edge(state.now))
    return min(moments, default=None)


# how many of the top blocked allocated workloads hold hosts (Slurm's backfill also
# reserves for several; one lets small allocations starve behind one big job's hold)
MAX_RESERVATIONS = 1

# how far behind a bucket head refused only by a reservation a cycle looks for work
# short enough to backfill (Slurm's bf_max_job_test bounds its backfill scan the same way)
BACKFILL_DEPTH = 32


@dataclass(slots=True)
class Blocked:
    """What the last full cycle left waiting, so quick cycles can build on it."""

    version: int
    shape_version: int
    edge: float
    ranking: Ranking
    # group -> (sort key, GPUs, room): work later in the order needing at least as many
    # GPUs and a minimum runtime over `room` cannot fit (room -inf: whatever its runtime)
    failed: dict[tuple[Any, ...], list[tuple[Any, int, float]]]
    reservations: dict[str, tuple[str, float]]
    holders: int
    last_holder_key: Any


class Failures:
    """What failed so far in one cycle, per group (see `decide`), and so which later
    work cannot fit either:
    - `hard`: the fewest GPUs that failed with no reservation in the way: work of the
      group needing at least as many cannot fit;
    - `soft`: failures only a reservation's start refused, as (GPUs, room) pairs: work
      needing at least as many GPUs fits only if its minimum runtime is at most `room`
      (the frontier is kept);
    - `refused`: failures a reservation refused because its holder could not preempt
      the work later, by (group, allocation, priority): that verdict is the same only
      for work of the same allocation and priority (under legacy-priority, lower work
      may backfill where higher work may not).
    `conditional` holds the groups with soft or refused entries (a head must be looked
    at to judge it)."""

    __slots__ = ("conditional", "exhausted", "fewest", "hard", "refused", "soft")

    def __init__(self, fewest: dict[Any, int]) -> None:
        self.hard: dict[tuple[Any, ...], int] = {}
        self.soft: dict[tuple[Any, ...], list[tuple[int, float]]] = {}
        self.refused: dict[tuple[Any, ...], int] = {}
        self.conditional: set[tuple[Any, ...]] = set()
        # groups whose every bucket is skipped from now on (failed hard at or below the
        # fewest GPUs any of its buckets needs): the cycle is over once all are
        self.fewest = fewest
        self.exhausted = 0

    def covers(self, group: tuple[Any, ...], w: Workload) -> bool:
        """Does a failure so far show that `w` (of `group`) cannot fit either?"""
        gpus = w.gpus
        if gpus >= self.hard.get(group, math.inf):
            return True
        runtime = w.min_runtime
        for g, r in self.soft.get(group, ()):
            if g <= gpus and runtime > r:
                return True
        return gpus >= self.refused.get((group, w.allocation, w.priority), math.inf)

    def add(self, group: tuple[Any, ...], w: Workload, room: float, victim: bool) -> None:
        """`w` of `group` failed. `room`: the longest minimum runtime a reservation's
        start would have let backfill (-inf: no start refused it); `victim`: a holder
        refused it as work it could not preempt later."""
        gpus = w.gpus
        if victim:
            if room == -math.inf:  # else refused two ways at once: proves nothing
                key = (group, w.allocation, w.priority)
                self.refused[key] = min(gpus, self.refused.get(key, gpus))
                self.conditional.add(group)
            return
        if room == -math.inf:
            before = self.hard.get(group, math.inf)
            if gpus < before:
                self.hard[group] = gpus
                least = self.fewest.get(group, 0)  # 0: a group first seen mid-cycle
                if gpus <= least < before:
                    self.exhausted += 1
            return
        soft = self.soft.setdefault(group, [])
        soft[:] = [(g, r) for g, r in soft if g < gpus or r < room]
        soft.append((gpus, room))
        self.conditional.add(group)


class Cycle(VictimSearch, FreeHosts, Reservations):
    """One scheduling cycle's working view (see `decide`). Read-side projections may
    also use it as a dry run (`dry_run`, `fits`, `free_hosts`, `victims_single`,
    `victims_gang` and `reserve` only look at the state; reservations live on the
    cycle); only `emit`, `place` and `preempt` change it."""

    __slots__ = (
        "cause",
        "force_full",
        "fresh_ids",
        "holder_started",
        "holders",
        "light_hosts",
        "now",
        "out",
        "position",
        "ranking",
        "refused_limit",
        "refused_room",
        "refused_victim",
        "reservations",
        "state",
        "victim_cache",
        "victim_keys",
    )

    def __init__(self, state: State, now: float, cause: str | None) -> None:
        self.state = state
        self.now = now
        self.cause = cause
        self.out: list[Any] = []
        self.ranking: Ranking = Ranking()
        # host -> (workload it is held for, when that workload is expected to start)
        self.reservations: dict[str, tuple[str, float]] = {}
        self.holders = 0  # workloads that tried to reserve this cycle
        self.force_full = False  # a quick attempt found work that needs a full cycle
        self.holder_started = False  # a reservation's holder was placed: it holds nothing now
        self.light_hosts: frozenset[str] | None = None  # light cycle: where victims may be
        # light cycle: work submitted since the last cycle, never searched for victims
        # (its input also changed the cluster, so no quick attempt ran): it may take
        # unallocated work anywhere, not only on the changed hosts (see `_victims`)
        self.fresh_ids: frozenset[str] = frozenset()
        self.position = 0
        # the longest minimum runtime a reservation refused in the current attempt would
        # have let backfill (-inf: no reservation refused it; see may_backfill)
        self.refused_room = -math.inf
        self.refused_victim = False  # ... and one refused it as work it could not preempt
        # its submitter's max_gpus_per_user refused it: no failure of its group (other
        # users' work of its shape may start), no reservation, no preemption
        self.refused_limit = False
        # (allocation, priority, GPUs, everywhere, fresh) -> host -> victims; see victim_map
        self.victim_cache: dict[tuple[str, int, int, bool, bool], Any] = {}
        self.victim_keys = state.victim_keys  # see State._init_caches

    # ------------------------------------------------------------ output
    def emit(self, event: Any) -> None:
        if event.type in ("workload.preempted", "workload.placed"):
            self.victim_cache.clear()  # rates and the exposed groups changed
        evolve(self.state, event)
        self.out.append(event)

    def _envelope(self) -> dict[str, Any]:
        s = self.state
        return {"id": s.next_id(), "time": self.now, "cluster": s.cluster, "cause": self.cause}

    def preempt(
        self,
        victim: Workload,
        reason: str,
        beneficiary: str | None,
        explain: dict,
        requeued: bool | None = None,
    ) -> None:
        self.emit(
            ev.WorkloadPreempted(
                **self._envelope(),
                workload=victim.id,
                attempt=victim.attempt,
                reason=reason,
                beneficiary=beneficiary,
                requeued=victim.resumable if requeued is None else requeued,
                explain=explain,
            )
        )

    def begin_attempt(self) -> None:
        """Forget what reservations refused in the last placement attempt."""
        self.refused_room = -math.inf
        self.refused_victim = False
        self.refused_limit = False

    # ------------------------------------------------------------- drain
    def requeue_asked(self) -> None:
        """Stop the running work whose requeue was asked, in the order asked: requeued
        with its submit time even when not resumable (the asker wants it run again)."""
        s = self.state
        asked, s.requeue_asked = s.requeue_asked, {}
        for wid, actor in asked.items():
            w = s.workloads.get(wid)
            if w is not None and w.state != PENDING:
                explain = {
                    "requested_by": actor,
                    "victim_allocation": w.allocation,
                    "charged": w.charged,
                    "ran_s": _num(self.now - w.start),
                    "protected_until": _num(w.protected_until),
                }
                self.preempt(w, "requested", None, explain, requeued=True)

    def stop_on_removed_gpus(self) -> None:
        """Stop the running work that held GPUs which left the cluster (its host was
        removed or re-registered with fewer GPUs), as on a lost node: resumable work is
        requeued with its submit time, up to `max_lost_requeues` times; other work ends."""
        s = self.state
        for wid, (host, gpus, registered) in list(s.gpus_removed.items()):
            w = s.workloads.get(wid)
            if w is None or w.state == PENDING:
                s.gpus_removed.pop(wid, None)
                continue
            explain = {
                "host": host,
                "gpus": gpus,
                "host_gpus": registered,
                "charged": w.charged,
                "protected_until": _num(w.protected_until),
            }
            requeue = w.resumable and w.lost < s.config.max_lost_requeues
            self.preempt(w, "gpus_removed", None, explain, requeued=requeue)

    def drain(self) -> None:
        s = self.state
        for name in list(s.cordoned):
            host = s.hosts[name]
            for wid in list(host.workloads):
                v = s.workloads[wid]
                if not v.charged or v.protected_until <= self.now:
                    self.preempt(
                        v,
                        "drain",
                        None,
                        {
                            "host": name,
                            "charged": v.charged,
                            "protected_until": _num(v.protected_until),
                        },
                    )
            if not host.workloads and not host.drained:
                self.emit(ev.HostDrained(**self._envelope(), host=name))

    # ---------------------------------------------------------- schedule
    def quick(self) -> bool:
        """Try only the fresh submissions against the last full cycle's outcome; False
        when a full cycle is needed (something changed, or a fresh workload preempted
        or would take over the reservation)."""
        s = self.state
        last = s.blocked
        if last is None or last.version != s.version or self.now >= last.edge:
            return False
        self.ranking = last.ranking
        self.reservations = dict(last.reservations)
        self.holders = MAX_RESERVATIONS
        policy = s.ordering
        for wid in s.fresh:
            w = s.workloads.get(wid)
            if w is None or w.bucket is None:
                continue
            allocated = s.allocated(w)
            short = w.bucket[3]
            key = policy.sort_key(self.ranking, w, allocated)
            group = (
                allocated,
                short,
                preemption_scope(policy, w, allocated),
                s.fit_kind(w.gpus, w.one_host),
            )
            failures = last.failed.setdefault(group, [])
            gpus = w.gpus
            runtime = w.min_runtime
            covered = False
            for fk, fg, fr in failures:
                if fg <= gpus and runtime > fr and fk < key:
                    covered = True
                    break
            if covered:
                continue  # work ahead of it with no more GPUs (and no shorter) could not fit
            self.position = 1
            self.begin_attempt()
            before = len(self.out)
            if self.try_place(w, allocated, short):
                if any(e.type == "workload.preempted" for e in self.out[before:]):
                    self.force_full = True
                    return False
                last.version = s.version  # it only took free GPUs: the rest stays blocked
                continue
            if self.refused_limit:
                continue  # waits for its submitter's own work to end, blocking nobody
            room = self.refused_room
            if not self.refused_victim:  # that verdict is only for its allocation and level
                # keep only the frontier: a failure ahead of this one needing no more
                # GPUs (nor room) already covers whatever this one would (a tiny list)
                failures[:] = [
                    (fk, fg, fr) for fk, fg, fr in failures if fk < key or fg < gpus or fr < room
                ]
                failures.append((key, gpus, room))
            if allocated and (
                last.holders < MAX_RESERVATIONS
                or last.last_holder_key is None
                or key < last.last_holder_key
            ):
                self.force_full = True
                return False  # it would hold a reservation
        s.fresh.clear()
        return True

    @classmethod
    def snapshot(cls, state: State, now: float) -> Cycle:
        """A cycle with its ranking taken, for dry runs (nothing is emitted)."""
        cycle = cls(state, now, None)
        cycle.ranking = state.ordering.rank(state, now)
        return cycle

    def dry_run(self, pending: list[tuple[Any, Workload, bool]]) -> set[str]:
        """Walk `pending` ((sort key, workload, allocated), in order) like a full cycle
        without placing anything: the first allocated workloads that fit nowhere reserve
        hosts (rule 10), and work of a group needing at least as many GPUs as a failed
        one is skipped (see `decide`). Returns the ids that would fit now (for read-side views)."""
        self.ranking = (
            self.ranking if self.ranking.ranks else self.state.ordering.rank(self.state, self.now)
        )
        self.reservations, self.holders = {}, 0
        failed = Failures({})
        fitting: set[str] = set()
        policy = self.state.ordering
        for _, w, allocated in pending:
            short = self.state.short_small(w)
            group = (
                allocated,
                short,
                preemption_scope(policy, w, allocated),
                self.state.fit_kind(w.gpus, w.one_host),
            )
            if failed.covers(group, w):
                continue
            self.begin_attempt()
            if self.fits(w, allocated, short):
                fitting.add(w.id)
                continue
            if self.refused_limit:
                continue
            failed.add(group, w, self.refused_room, self.refused_victim)
            if allocated and self.holders < MAX_RESERVATIONS and self.could_hold(w, short):
                self.holders += 1
                self.reserve(w, short)
        return fitting

    def fits(self, w: Workload, allocated: bool, short: bool) -> bool:
        """Free GPUs for `w` now, or victims it may preempt for them (a query)."""
        s = self.state
        if self.over_user_limit(w, allocated):
            return False
        single = s.single_host(w)
        if self.free_hosts(w, allocated, short, single) is not None:
            return True
        if not (allocated or s.ordering.unallocated_may_preempt):
            return False
        plan = (
            self.victims_single(w, allocated, short)
            if single
            else self.victims_gang(w, allocated, short)
        )
        return plan is not None

    def can_be_light(self) -> bool:
        s = self.state
        last = s.blocked
        return last is not None and self.now < last.edge and last.shape_version == s.shape_version

    def reservation_moved(self) -> bool:
        """Did something change on a host the last cycle reserved? Freed GPUs there may
        bring its holder's start forward: a light cycle would keep the later start and
        let backfill run past the real one, so the next cycle is a full one."""
        s = self.state
        last = s.blocked
        return last is not None and any(name in last.reservations for name in s.changed_hosts)

    def schedule(self, light: bool = False) -> None:
        """The full cycle, or a *light* one when since the last only GPUs were freed
        (completions, cancels) or work's protection ended: the same order on the last
        snapshot, its reservations kept, and victims sought only on the hosts where
        that happened (elsewhere nothing changed that could let a preemption succeed).
        A gang preempts in a light cycle only when one of those hosts could now be
        cleared; it then looks for victims everywhere (it needs several hosts). Work
        submitted since the last cycle was never searched (its input also changed the
        cluster, so no quick attempt ran): it may also take unallocated work anywhere."""
        s = self.state
        last = s.blocked
        self.victim_cache = {}
        # ratios are read as of the last bucket edge, and a light cycle runs before the
        # next one with the same budget tree and hosts: the last ranking is today's
        ranking = last.ranking if light else s.ordering.rank(s, self.now)
        self.ranking = ranking
        # what changes during this cycle (work exposed the moment it is placed, GPUs a
        # preemption left over) is for the next one to look at
        changed, s.changed_hosts = s.changed_hosts, {}
        if light:
            self.reservations, self.holders = dict(last.reservations), MAX_RESERVATIONS
            self.light_hosts = frozenset(changed)
            self.fresh_ids = frozenset(s.fresh)
            last_holder_key = last.last_holder_key
            edge = last.edge
        else:
            # a quick attempt may have borrowed the last cycle's view: start clean
            self.reservations, self.holders = {}, 0
            self.light_hosts = None
            self.fresh_ids = frozenset()
            last_holder_key = None
            edge = s.charged.next_edge(self.now)
        failures: dict[tuple[Any, ...], list[tuple[Any, int, float]]] = {}
        # the bucket heads in order; a placed head's successor is inserted among the
        # entries still ahead (keys are unique: this pops exactly as a heap would)
        order, fewest = self.heap(ranking)
        shared = True  # `order` is the state's cached list until something is inserted
        at = 0
        queues = s.queues
        inf = math.inf
        failed = Failures(fewest)
        hard, conditional = failed.hard, failed.conditional
        # a light cycle keeps the last cycle's reservations: their holder may use its
        # hosts, so failures its reservation caused prove nothing about it
        holders = {held[0] for held in self.reservations.values()}
        holder_buckets = {
            w.bucket for wid in holders if (w := s.workloads.get(wid)) is not None and w.bucket
        }
        while at < len(order):
            sort_key, key, allocated, group = order[at]
            at += 1
            gpus = key[1]
            # a bucket's GPUs and group are in its entry: skip before looking at its head
            skip = gpus >= hard.get(group, inf)
            if skip and key not in holder_buckets:
                continue
            queue = queues.get(key)
            if not queue:
                continue
            wid = head(queue)[1]
            holder = wid in holders
            if skip and not holder:
                continue
            if holder:
                holder_buckets.discard(key)  # tried: the cycle may end without it
            w = s.workloads[wid]
            short = key[3]
            if group in conditional and not holder and failed.covers(group, w):
                # a reservation refused work of this group: other work of its bucket (a
                # shorter minimum runtime, another level) may still fit
                self.backfill_behind(key, allocated, short, group, failed)
                if failed.exhausted == len(fewest) and not holder_buckets:
                    break
                continue
            self.position += 1
            self.begin_attempt()
            if self.try_place(w, allocated, short):
                queue = queues.get(key)
                if queue:
                    nxt = s.workloads[head(queue)[1]]
                    if shared:
                        order, shared = order[at:], False
                        at = 0
                    bisect.insort(order, self.entry(ranking, nxt, key, allocated), at)
                continue
            if self.refused_limit:
                # the bucket is its submitter's alone (`State.enqueue`), and its work
                # needs as many GPUs: it all waits for that user's running work to end
                continue
            refused, victim = self.refused_room, self.refused_victim
            failed.add(group, w, refused, victim)
            if not victim:  # that verdict is only for its allocation and level
                failures.setdefault(group, []).append((sort_key, gpus, refused))
            if allocated and self.holders < MAX_RESERVATIONS and self.could_hold(w, short):
                self.holders += 1
                last_holder_key = sort_key
                self.reserve(w, short)
            if refused > -inf or victim:
                self.backfill_behind(key, allocated, short, group, failed)
            if failed.exhausted == len(fewest) and not holder_buckets:
                break  # every bucket left needs at least as many GPUs as failed in its group
        s.fresh.clear()
        s.blocked = Blocked(
            version=s.version,
            shape_version=s.shape_version,
            edge=edge,
            ranking=ranking,
            failed=failures,
            reservations=self.reservations,
            holders=self.holders,
            last_holder_key=last_holder_key,
        )

    def backfill_behind(
        self, key: Any, allocated: bool, short: bool, group: tuple[Any, ...], failed: Failures
    ) -> None:
        """Try the next BACKFILL_DEPTH workloads behind the head of bucket `key` that
        no failure so far covers (a reservation refused the head: shorter or
        lower-level work may backfill it), in queue order, until one fails with no
        reservation in the way."""
        queue = self.state.queues.get(key)
        if not queue:
            return
        workloads = self.state.workloads
        # listed first: each placement takes its workload out of the queue
        behind = [wid for _, wid in islice(queue, 1, 1 + BACKFILL_DEPTH)]
        for wid in behind:
            w = workloads[wid]
            if failed.covers(group, w):
                continue
            self.position += 1
            self.begin_attempt()
            if self.try_place(w, allocated, short):
                continue
            if self.refused_limit:
                return  # the rest of the bucket is the same user's, as big
            failed.add(group, w, self.refused_room, self.refused_victim)
            if self.refused_room == -math.inf and not self.refused_victim:
                return  # nothing of its size fits, whatever its runtime or level

    def entry(self, ranking: Ranking, w: Workload, key: Any, allocated: bool) -> tuple[Any, ...]:
        """A bucket head's place in the order: (sort key, bucket, allocated, group)."""
        s = self.state
        policy = s.ordering
        # a failure of work needing fewer GPUs covers work of its group needing more:
        # gangs on mixed host sizes are a group of their own (`State.fit_kind`)
        kind = s.fit_kind(key[1], len(key) > 4 and key[4])  # asked on one host
        group = (allocated, key[3], preemption_scope(policy, w, allocated), kind)
        return (policy.sort_key(ranking, w, allocated), key, allocated, group)

    def heap(self, ranking: Ranking) -> tuple[list[tuple[Any, ...]], dict[Any, int]]:
        """The heads of the pending buckets as a sorted list of `entry`s, and the
        fewest GPUs any bucket of each group needs. The list may be the state's cached
        one: copy before changing it.

        A head's entry is cached on the state while the policy, the budget tree and
        the ranking's leaf ranks stay the same (the built-in policies' sort keys read
        nothing else; a plugin's entries live as long as its ranking object), so a
        cycle recomputes only the buckets whose head changed."""
        s = self.state
        policy = s.ordering
        leaves = s.tree.leaves()
        token = s.heads_token
        sizes = (s.smallest_host, s.largest_host)  # entries' groups read them (fit_kind)
        if not (
            token is not None
            and len(token) == 4
            and token[0] is policy
            and token[2] is leaves
            and token[3] == sizes
            and (
                token[1] is ranking
                or (type(policy) in _BUILTIN_ORDERINGS and token[1].ranks == ranking.ranks)
            )
        ):
            s.heads_epoch += 1
            s.heads_token = (policy, ranking, leaves, sizes)
        epoch = s.heads_epoch
        stamp = (epoch, s.heads_changes)
        cached_heap = s.heads_heap
        if cached_heap is not None and cached_heap[0] == stamp:
            return cached_heap[1], cached_heap[2]
        heads = s.heads
        workloads = s.workloads
        heap: list[tuple[Any, ...]] = []
        fewest: dict[Any, int] = {}
        for key, queue in s.queues.items():
            cached = heads.get(key)
            if cached is not None and cached[0] == epoch:
                entry = cached[1]
            else:
                w = workloads[head(queue)[1]]
                entry = self.entry(ranking, w, key, s.allocated(w))
                heads[key] = (epoch, entry)
            heap.append(entry)
            group = entry[3]
            if key[1] < fewest.get(group, math.inf):
                fewest[group] = key[1]
        heap.sort()
        s.heads_heap = (stamp, heap, fewest)
        return heap, fewest

    def over_user_limit(self, w: Workload, allocated: bool) -> bool:
        """Would starting allocated `w` put its submitter over a max_gpus_per_user?
        (Sets `refused_limit`; no limit anywhere costs one dict check.)"""
        s = self.state
        if allocated and s.tree.limited and s.over_gpu_limit(w) is not None:
            self.refused_limit = True
            return True
        return False

    def try_place(self, w: Workload, allocated: bool, short: bool) -> bool:
        s = self.state
        if self.over_user_limit(w, allocated):
            return False
        single = s.single_host(w)
        hosts = self.free_hosts(w, allocated, short, single)
        preempted: list[str] = []
        everywhere = True  # where a gang looks for victims
        if hosts is None and not single and not self.gang_may_preempt_now(w):
            if w.id not in self.fresh_ids:
                return False
            everywhere = False  # new work: the changed hosts, and unallocated work anywhere
        if hosts is None and (allocated or s.ordering.unallocated_may_preempt):
            plan = (
                self.victims_single(w, allocated, short)
                if single
                else self.victims_gang(w, allocated, short, everywhere)
            )
            if plan is not None:
                chosen, victims = plan
                for victim, reason in victims:
                    self.preempt(victim, reason, w.id, self.preempt_explain(w, victim, reason))
                    preempted.append(victim.id)
                hosts = self.take(chosen, w.gpus, single)
        if hosts is None:
            return False
        self.place(w, allocated, hosts, preempted)
        return True

    # -------------------------------------------------------------- place
    def place(
        self, w: Workload, allocated: bool, hosts: dict[str, tuple[int, ...]], preempted: list[str]
    ) -> None:
        s = self.state
        charged, until = s.ordering.terms(s, w, allocated, self.now)
        explain: dict[str, Any] = {
            "policy": s.ordering.name,
            "placement": s.placement.name,
            "position": self.position,
            "share": _num(s.tree.share(w.allocation)),
        }
        rank = self.ranking.ranks.get(w.allocation)
        if rank is not None:
            explain["rank"] = rank
            explain["ratio"] = _num(self.ranking.ratios.get(w.allocation, math.inf))
        if preempted:
            explain["preempted"] = preempted
        workloads = s.workloads
        backfilled = [
            held
            for name in hosts
            if (held := self.reservations.get(name)) is not None
            and held[0] != w.id
            and (holder := workloads.get(held[0])) is not None
            and holder.state == PENDING  # a started holder holds nothing any more
        ]
        if backfilled:
            explain["backfill"] = {"reserved_for": backfilled[0][0], "from": _num(backfilled[0][1])}
        if s.headroom & hosts.keys():
            explain["headroom"] = True
        if self.reservations and any(held[0] == w.id for held in self.reservations.values()):
            self.holder_started = True
        self.emit(
            ev.WorkloadPlaced(
                **self._envelope(),
                workload=w.id,
                allocation=w.allocation,
                gpus=w.gpus,
                hosts=hosts,
                attempt=w.attempt + 1,
                charged=charged,
                protected_until=None if math.isinf(until) else until,
                explain=explain,
            )
        )

    def preempt_explain(self, w: Workload, v: Workload, reason: str) -> dict[str, Any]:
        explain: dict[str, Any] = {
            "beneficiary_allocation": w.allocation,
            "victim_allocation": v.allocation,
            "charged": v.charged,
            "ran_s": _num(self.now - v.start),
            "protected_until": _num(v.protected_until),
        }
        if reason == "fair_share":
            ranks, ratios = self.ranking.ranks, self.ranking.ratios
            split = diverging(w.allocation, v.allocation)
            explain.update(
                beneficiary_rank=ranks.get(w.allocation),
                victim_rank=ranks.get(v.allocation),
                hysteresis=self.state.config.hysteresis,
            )
            if split:
                explain["compared"] = {
                    split[0]: _num(ratios[split[0]]),
                    split[1]: _num(ratios[split[1]]),
                }
            if outranks(self.state, self.ranking, w.allocation, v.allocation):
                explain["rule"] = "ratio"
            else:  # reclaim: GPUs in use vs entitled (share x healthy capacity) now
                explain["rule"] = "reclaim"
                rate = self.state.charged.rate
                nodes = [*(split or ()), v.allocation]
                explain["running_vs_entitled"] = {
                    p: [rate(p), _num(entitlement(self.state, p))] for p in dict.fromkeys(nodes)
                }
        elif reason == "priority":
            explain.update(beneficiary_priority=w.priority, victim_priority=v.priority)
        return explain
