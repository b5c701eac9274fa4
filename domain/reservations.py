"""Reservations of a scheduling cycle (`domain.decide`, step 6, rule 10): the hosts that
free soonest held for a blocked workload, and what may backfill them meanwhile."""

from __future__ import annotations

import math
from dataclasses import replace

from domain.state import PENDING, Workload


class Reservations:
    """The reservations of `domain.decide.Cycle`, which holds them (`reservations`)."""

    __slots__ = ()

    def may_backfill(self, w: Workload, allocated: bool, held: tuple[str, float]) -> bool:
        """Only what cannot delay the reservation: unallocated work (the holder may take
        it back any time), or allocated work whose protection ends before the holder's
        start and which the holder may then preempt."""
        if not allocated:
            return True
        holder_id, start = held
        holder = self.state.workloads.get(holder_id)
        if holder is None or holder.state != PENDING:
            return True  # cancelled or started since: its hosts are held for no one
        if self.now + w.min_runtime > start:
            room = start - self.now
            if room > self.refused_room:
                self.refused_room = room
            return False
        as_victim = replace(w, charged=True, protected_until=self.now + w.min_runtime)
        s = self.state
        if s.ordering.may_preempt(s, self.ranking, holder, as_victim, math.inf) is None:
            self.refused_victim = True
            return False
        return True

    def could_hold(self, w: Workload, short: bool) -> bool:
        """Could the healthy hosts hold `w` if they were empty? Not when it needs more
        GPUs than they have together (hosts removed, shrunk or unhealthy since it was
        submitted), nor when it is asked on one host and no healthy host is that big
        (the biggest is cordoned). (Other work bigger than every healthy host is a
        gang, and the headroom leaves a host of the biggest size to other work.) Such
        work reserves nothing, so it must not take a reservation's place: it took the
        only one and large work behind it starved (rule 10)."""
        s = self.state
        need = w.gpus
        if need > s.healthy_capacity:
            return False
        if not s.single_host(w):  # a gang: whole healthy hosts add up to it
            return True
        keep_off_headroom = self.keeps_off_headroom(w, True, short)
        return any(
            h.healthy and h.gpus >= need and not (keep_off_headroom and h.name in s.headroom)
            for h in s.hosts.values()
        )

    def reserve(self, w: Workload, short: bool) -> None:
        """Hold the hosts that free soonest for `w`, one of the first MAX_RESERVATIONS
        allocated workloads that fit nowhere (hosts held for earlier ones excluded)."""
        s = self.state
        need = w.gpus
        single = s.single_host(w)
        timed = []
        now = self.now
        inf = math.inf
        isfinite = math.isfinite
        workloads = s.workloads
        may_preempt = s.ordering.may_preempt
        ranking = self.ranking
        known: dict[str, float] = {}  # workload -> when it frees its GPUs for `w`
        verdicts: dict[tuple[bool, str, int], bool] = {}

        def frees(vid: str) -> float:  # self.frees_at(w, v, verdicts), memoized per workload
            v = workloads[vid]
            kind = (v.charged, v.allocation, v.priority)
            allowed = verdicts.get(kind)
            if allowed is None:
                allowed = verdicts[kind] = may_preempt(s, ranking, w, v, inf) is not None
            if allowed and isfinite(v.protected_until):
                t = known[vid] = max(now, v.protected_until)
            elif v.expected_runtime is not None:
                t = known[vid] = max(now, v.start + v.expected_runtime)
            else:
                t = known[vid] = inf
            return t

        reservations = self.reservations
        headroom = s.headroom
        keep_off_headroom = self.keeps_off_headroom(w, True, short)
        for host in s.hosts.values():
            if host.name in reservations:
                continue  # already held for work ranked above `w`
            if not host.healthy or (single and host.gpus < need):
                continue
            if keep_off_headroom and host.name in headroom:
                continue
            if single:
                # the need-th soonest GPU: free ones now, the others when their work frees
                # them (never before now)
                left = need - len(host.free)
                t = now
                if left > 0:
                    pairs = [
                        (known[vid] if vid in known else frees(vid), n)
                        for vid, n in host.workloads.items()
                    ]
                    pairs.sort()
                    for t, n in pairs:  # noqa: B007
                        left -= n
                        if left <= 0:
                            break
                timed.append((t, host.index, host))
            else:
                latest = now  # when the last of its work frees it (inf: never)
                for vid in host.workloads:
                    t = known[vid] if vid in known else frees(vid)
                    if t > latest:
                        latest = t
                        if latest == inf:
                            break
                timed.append((latest, host.index, host))
        timed.sort()  # by (time, host index): indexes are unique
        if single:
            picked = timed[:1]
        else:
            picked, total = [], 0
            for t in timed:
                if total >= need:
                    break
                picked.append(t)
                total += t[2].gpus
            if total < need:
                return
        if not picked or math.isinf(picked[-1][0]):
            return
        start = max(t[0] for t in picked)
        for t in picked:
            self.reservations[t[2].name] = (w.id, start)

    def frees_at(
        self, w: Workload, v: Workload, verdicts: dict[tuple[bool, str, int], bool]
    ) -> float:
        """When `v`'s GPUs become available to `w`: now or at its protection end if `w`
        may preempt its kind of work, else at its declared end, else never."""
        kind = (v.charged, v.allocation, v.priority)
        allowed = verdicts.get(kind)
        if allowed is None:
            s = self.state
            allowed = verdicts[kind] = (
                s.ordering.may_preempt(s, self.ranking, w, v, math.inf) is not None
            )
        if allowed and math.isfinite(v.protected_until):
            return max(self.now, v.protected_until)
        if v.expected_runtime is not None:
            return max(self.now, v.start + v.expected_runtime)
        return math.inf
