"""Victim search of a scheduling cycle (`domain.decide`, step 5): which running work a
waiting workload may preempt, on which host (or hosts, for a gang), and whether the
plan keeps reclaim's rule."""

from __future__ import annotations

from typing import Any

from domain.fairshare import BORROW_SLACK, diverging, entitlement, outranks
from domain.state import Host, Workload
from domain.tree import ancestor_chain


class VictimSearch:
    """The victim search of `domain.decide.Cycle`, whose state it reads."""

    __slots__ = ()

    def changed_host_could_hold(self, need: int | None) -> bool:
        """Could a changed host of a light cycle hold `need` GPUs (None: be cleared
        whole) if all its work past protection were preempted? A cheap bound before
        looking for victims."""
        hosts = self.state.hosts
        for name in self.light_hosts or ():
            h = hosts.get(name)
            if h is None or not h.healthy:
                continue
            if len(h.free) + h.exposed >= (h.gpus if need is None else need):
                return True
        return False

    def gang_may_preempt_now(self, w: Workload) -> bool:
        """In a light cycle, only if one of the changed hosts could now be cleared for
        `w` (its free GPUs plus the work there `w` may preempt fill it); otherwise
        nothing changed that could let the last cycle's failure succeed."""
        light = self.light_hosts
        if light is None:
            return True
        if not self.changed_host_could_hold(None):
            return False
        _, totals = self._victims(w)
        hosts = self.state.hosts
        for name in light:
            h = hosts.get(name)
            if h is None or not h.healthy:
                continue
            victims = totals.get(name)
            if len(h.free) + (victims[0] if victims else 0) >= h.gpus:
                return True
        return False

    def victim_map(
        self, w: Workload
    ) -> dict[str, list[tuple[tuple[Any, ...], Workload, int, str]]]:
        """Host -> running work `w` may preempt there, most preferred victim first.

        Built from the exposed groups (work past protection, grouped by the fields the
        rules read), asking the policy once per group, so its cost is the number of
        eligible victims, not of running work; a light cycle reads only its changed
        hosts (and, for new work, unallocated work anywhere). Cached per cycle by
        (allocation, priority, GPUs, everywhere, fresh) — reclaim reads the
        beneficiary's size — and cleared by every preemption or placement (both change
        the usage rates reclaim compares).
        """
        return self._victims(w)[0]

    def exposed_groups(self) -> list[tuple[dict[str, dict[str, int]], Workload]]:
        """The exposed groups as (host -> victims there, one member): the policy judges
        a whole group by any member. Cached with the victim maps (same invalidation)."""
        groups = self.victim_cache.get(None)  # type: ignore[call-overload]
        if groups is None:
            workloads = self.state.workloads
            groups = self.victim_cache[None] = [  # type: ignore[index]
                (hosts, workloads[next(iter(next(iter(hosts.values()))))])
                for hosts in self.state.exposed.values()
            ]
        return groups

    def _victims(
        self, w: Workload, everywhere: bool = False
    ) -> tuple[dict[str, list[Any]], dict[str, tuple[int, int, int]]]:
        """`victim_map` plus, per host, the sums its callers read: (GPUs of the victims
        on it, GPUs they hold in all, of which charged). A light cycle looks only on its
        changed hosts unless `everywhere` — and, for work submitted since the last cycle
        (`fresh_ids`), at unallocated work on every host: that work was never searched
        for victims (a quick attempt would have looked everywhere), and unallocated work
        is filler, given up the moment allocated work needs the room (rule 11)."""
        only = None if everywhere else self.light_hosts
        fresh = only is not None and w.id in self.fresh_ids
        key = (w.allocation, w.priority, w.gpus, only is None, fresh)
        cached = self.victim_cache.get(key)
        if cached is not None:
            return cached
        s = self.state
        ranks = self.ranking.ranks
        ranking = self.ranking
        now = self.now
        may_preempt = s.ordering.may_preempt
        workloads = s.workloads
        # a victim's sort key depends on the cycle's ranks and on fields fixed while it
        # runs (evolve drops the entry of a workload placed again)
        keys = self.victim_keys
        if keys.get(None) is not ranks:
            if keys.get(None) != ranks:  # a new order: new keys
                keys.clear()
            keys[None] = ranks  # type: ignore[index]

        def victim_key(vid: str) -> tuple[tuple[Any, ...], Workload]:
            v = workloads[vid]
            known = keys[vid] = (
                (v.charged, not v.resumable, -ranks.get(v.allocation, 0), -v.start, vid),
                v,
            )
            return known

        found: dict[str, list[Any]] = {}

        def take_group(hosts: dict[str, dict[str, int]], reason: str, skip: Any = ()) -> None:
            """List an exposed group's work as victims, host by host (but `skip`)."""
            for name, on_host in hosts.items():
                if name in skip:
                    continue
                entries = found.get(name)
                if entries is None:
                    entries = found[name] = []
                for vid, n in on_host.items():
                    known = keys.get(vid) or victim_key(vid)
                    entries.append((known[0], known[1], n, reason))

        if only is None:
            for hosts, sample in self.exposed_groups():
                reason = may_preempt(s, ranking, w, sample, now)
                if reason is not None:
                    take_group(hosts, reason)
        else:
            # a light cycle: only the work on its few changed hosts, each group judged
            # by the same member as in a full search
            exposed = s.exposed
            verdicts: dict[tuple[Any, ...], str | None] = {}
            samples = self.victim_cache.get("samples")  # type: ignore[call-overload]
            if samples is None:  # the groups' members change with preemptions and placements
                samples = self.victim_cache["samples"] = {}  # type: ignore[index]
            for name in only:
                host = s.hosts.get(name)
                if host is None:
                    continue
                for vid, n in host.workloads.items():
                    v = workloads[vid]
                    if not v.exposed:
                        continue
                    group = (v.charged, v.allocation, v.priority)
                    if group in verdicts:
                        reason = verdicts[group]
                    else:
                        sample = samples.get(group)
                        if sample is None:
                            on_hosts = exposed[group]
                            sample = samples[group] = workloads[
                                next(iter(next(iter(on_hosts.values()))))
                            ]
                        reason = verdicts[group] = may_preempt(s, ranking, w, sample, now)
                    if reason is None:
                        continue
                    known = keys.get(vid) or victim_key(vid)
                    entries = found.get(name)
                    if entries is None:
                        entries = found[name] = []
                    entries.append((known[0], known[1], n, reason))
            if fresh:
                # new work: unallocated work on the other hosts too (the same verdict a
                # full search gives its group)
                for hosts, sample in self.exposed_groups():
                    if sample.charged:
                        continue
                    reason = may_preempt(s, ranking, w, sample, now)
                    if reason is not None:
                        take_group(hosts, reason, skip=only)  # `only`: listed above
        totals: dict[str, tuple[int, int, int]] = {}
        for name, entries in found.items():
            entries.sort()  # keys are unique (they end with the workload id)
            gpus = held = charged = 0
            for c in entries:
                v = c[1]
                gpus += c[2]
                held += v.held
                if v.charged:
                    charged += v.held
            totals[name] = (gpus, held, charged)
        result = self.victim_cache[key] = (found, totals)
        return result

    def reclaim_holds(self, w: Workload, victims: list[tuple[Workload, str]]) -> bool:
        """Does every victim taken by reclaim alone (fair share, not out-ranked on the
        window) still come from a side and an allocation that borrow once the victims
        before it are gone? Kueue's reclaim-within-cohort: a plan takes from a borrower
        only down to its entitlement, never below (the rule is judged per group before
        the plan; a plan of several victims could take more than the excess)."""
        s = self.state
        accounts = s.charged.accounts
        taken: dict[str, int] = {}  # path -> charged GPUs the plan took before
        for v, reason in victims:
            if reason == "fair_share" and not outranks(s, self.ranking, w.allocation, v.allocation):
                split = diverging(w.allocation, v.allocation)
                for path in (split[1] if split else v.allocation, v.allocation):
                    acc = accounts.get(path)
                    rate = (acc.rate if acc else 0) - taken.get(path, 0)
                    if not rate > entitlement(s, path) + BORROW_SLACK:
                        return False
            if v.charged:
                for path in ancestor_chain(v.allocation):
                    taken[path] = taken.get(path, 0) + v.held
        return True

    def victims_single(
        self, w: Workload, allocated: bool, short: bool
    ) -> tuple[list[Host], list[tuple[Workload, str]]] | None:
        s = self.state
        need = w.gpus
        best: tuple[Any, ...] | None = None
        if (
            self.light_hosts is not None
            and w.id not in self.fresh_ids
            and not self.changed_host_could_hold(need)
        ):
            return None  # light cycle: no changed host could hold `w` even cleared
        found, totals = self._victims(w)
        hosts = s.hosts
        for name, cands in found.items():
            host = hosts[name]
            free = len(host.free)
            if host.gpus < need or free + totals[name][0] < need:
                continue
            if not self.usable(host, w, allocated, short):
                continue
            taken = []
            got = free
            for c in cands:
                if got >= need:
                    break
                taken.append(c)
                got += c[2]
            if len(taken) > 1:  # drop what isn't needed, least preferred first
                for c in taken[::-1]:
                    if got - c[2] >= need:
                        taken.remove(c)
                        got -= c[2]
            # greedy in preference order can overshoot: one victim alone may be fewer GPUs
            gap = need - free
            alone = None
            alone_key: tuple[Any, ...] | None = None
            for c in cands:
                if c[2] >= gap:
                    k = (c[1].held, c[0])
                    if alone_key is None or k < alone_key:
                        alone, alone_key = c, k
            options = [taken] if alone is None else [taken, [alone]]
            for victims in options:
                if not self.reclaim_holds(w, [(c[1], c[3]) for c in victims]):
                    continue
                held = charged = here = 0
                for c in victims:
                    v = c[1]
                    held += v.held
                    here += c[2]
                    if v.charged:
                        charged += v.held
                # ties: the plan whose dearest victim is the cheapest to lose (lowest
                # ranked, rule 6), before the host's index
                cost = (held - here, charged, held, max(c[0] for c in victims), host.index)
                if best is None or cost < best[0]:
                    best = (cost, host, victims)
        if best is None:
            return None
        return [best[1]], [(c[1], c[3]) for c in best[2]]

    def victims_gang(
        self, w: Workload, allocated: bool, short: bool, everywhere: bool = True
    ) -> tuple[list[Host], list[tuple[Workload, str]]] | None:
        """Whole hosts for gang `w` and the victims on them; `everywhere` False keeps a
        light cycle's scope (see `_victims`)."""
        s = self.state
        options = []
        victims, totals = self._victims(w, everywhere=everywhere)
        hosts = [s.hosts[name] for name in victims]
        hosts.extend(h for h in map(s.hosts.__getitem__, s.with_free) if not h.workloads)
        none = (0, 0, 0)
        for host in hosts:
            free = len(host.free)
            if free + host.exposed < host.gpus:
                continue  # some of it is protected: cannot be cleared
            gpus, held, charged = totals.get(host.name, none)
            if free + gpus < host.gpus:
                continue  # some of it may not be preempted by `w`
            if not self.usable(host, w, allocated, short):
                continue
            cands = victims.get(host.name, [])
            # ties: the host whose dearest victim is the cheapest to lose (rule 6)
            dearest = cands[-1][0] if cands else ()
            options.append(((held - gpus, charged, held, dearest, host.index), host, cands))
        options.sort(key=_first)
        chosen: list[tuple[Host, list[Any]]] = []
        picked: dict[str, tuple[Workload, str]] = {}
        total = 0
        for _, host, cands in options:
            if total >= w.gpus:
                break
            more = dict(picked)
            for c in cands:
                more.setdefault(c[1].id, (c[1], c[3]))
            if len(more) > len(picked) and not self.reclaim_holds(w, list(more.values())):
                continue  # clearing it would take a borrower below its entitlement
            chosen.append((host, cands))
            total += host.gpus
            picked = more
        if total < w.gpus:
            return None
        # on hosts of mixed sizes a later, bigger host can make an earlier one needless:
        # give back the costliest hosts the gang can do without, with the victims no
        # kept host needs (fewer victims never breaks the reclaim rule)
        for i in range(len(chosen) - 1, -1, -1):
            host = chosen[i][0]
            if total - host.gpus >= w.gpus and len(chosen) > 1:
                del chosen[i]
                total -= host.gpus
                needed = {c[1].id for _, cands in chosen for c in cands}
                picked = {vid: v for vid, v in picked.items() if vid in needed}
        return [host for host, _ in chosen], list(picked.values())


def _first(item: tuple[Any, ...]) -> Any:
    return item[0]
