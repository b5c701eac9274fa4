"""Free-host search of a scheduling cycle (`domain.decide`, step 4): which hosts may take
a workload now, on free GPUs only (the headroom and reservations respected), and
whole hosts for a gang."""

from __future__ import annotations

from domain.state import Host, Workload


class FreeHosts:
    """The free-host search of `domain.decide.Cycle`, whose state it reads."""

    __slots__ = ()

    def keeps_off_headroom(self, w: Workload, allocated: bool, short: bool) -> bool:
        """Allocated work that is not short stays off the headroom hosts (rule 11) —
        unless the other healthy hosts together are too small for it: kept off, it
        would never run (a 64-GPU job on eight 8-GPU hosts, one of them headroom)."""
        if not allocated or short:
            return False
        s = self.state
        if not s.headroom:
            return False
        spare = sum(s.hosts[name].gpus for name in s.headroom)
        return w.gpus <= s.healthy_capacity - spare

    def usable(self, host: Host, w: Workload, allocated: bool, short: bool) -> bool:
        if not host.healthy:
            return False
        if host.name in self.state.headroom and self.keeps_off_headroom(w, allocated, short):
            return False
        held = self.reservations.get(host.name)
        if held is not None and held[0] != w.id:
            return self.may_backfill(w, allocated, held)
        return True

    def take(
        self, chosen: list[Host], gpus: int, single: bool
    ) -> dict[str, tuple[int, ...]] | None:
        if single:
            host = chosen[0]
            return {host.name: tuple(host.free[:gpus])} if len(host.free) >= gpus else None
        if any(len(h.free) < h.gpus for h in chosen):
            return None
        return {h.name: tuple(h.free) for h in chosen}

    def free_hosts(
        self, w: Workload, allocated: bool, short: bool, single: bool
    ) -> dict[str, tuple[int, ...]] | None:
        s = self.state
        need = w.gpus
        if single:
            # self.usable(h, ...) inlined: this runs for every placement attempt
            hosts = s.hosts
            reservations = self.reservations
            headroom = s.headroom
            keep_off_headroom = headroom and self.keeps_off_headroom(w, allocated, short)
            fits = []
            for name in s.with_free:
                h = hosts[name]
                if len(h.free) < need or not h.healthy:
                    continue
                if keep_off_headroom and name in headroom:
                    continue
                held = reservations.get(name)
                if (
                    held is not None
                    and held[0] != w.id
                    and not self.may_backfill(w, allocated, held)
                ):
                    continue
                fits.append(h)
            if short and s.headroom:  # keep training hosts whole: short work goes to headroom first
                fits = [h for h in fits if h.name in s.headroom] or fits
            host = s.placement.choose(fits, need)
            return None if host is None else {host.name: tuple(host.free[:need])}
        whole = [
            h
            for h in map(s.hosts.__getitem__, s.with_free)
            if len(h.free) == h.gpus and self.usable(h, w, allocated, short)
        ]
        chosen = _fewest_hosts(whole, need)
        return None if chosen is None else {h.name: tuple(h.free) for h in chosen}


def _fewest_hosts(hosts: list[Host], need: int) -> list[Host] | None:
    """Whole hosts adding up to `need` GPUs: as few hosts as can, and of those the fewest
    GPUs (on hosts of mixed sizes the biggest first may overshoot: 12 + 8 where 8 + 8
    does); of each size the first registered."""
    ordered = sorted(hosts, key=lambda h: (-h.gpus, h.index))
    count = total = 0
    for h in ordered:  # the biggest first: the fewest hosts there can be
        if total >= need:
            break
        count += 1
        total += h.gpus
    if total < need:
        return None
    by_size: dict[int, list[Host]] = {}
    for h in ordered:
        by_size.setdefault(h.gpus, []).append(h)
    if len(by_size) == 1:
        return ordered[:count]
    # the fewest GPUs of `count` hosts: (hosts, GPUs) -> how many of each size, as
    # reachable with the sizes so far (a handful of sizes, a few dozen hosts)
    reach: dict[tuple[int, int], tuple[int, ...]] = {(0, 0): ()}
    for size, group in by_size.items():
        nxt: dict[tuple[int, int], tuple[int, ...]] = {}
        for (n, gpus), taken in reach.items():
            for more in range(min(len(group), count - n) + 1):
                nxt.setdefault((n + more, gpus + more * size), (*taken, more))
        reach = nxt
    gpus = min(g for n, g in reach if n == count and g >= need)
    chosen: list[Host] = []
    for group, more in zip(by_size.values(), reach[(count, gpus)], strict=True):
        chosen.extend(group[:more])
    return chosen
