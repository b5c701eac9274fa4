"""Placement policies: which host a single-host workload lands on (DESIGN §5 rule 5)."""

from __future__ import annotations

from domain.policies import register_placement
from domain.state import Host


class Pack:
    """Best fit: the host with the fewest free GPUs that still fits (keeps hosts whole)."""

    name = "pack"

    def choose(self, hosts: list[Host], gpus: int) -> Host | None:
        return min(hosts, key=lambda h: (len(h.free), h.index), default=None)


class Spread:
    """Worst fit: the host with the most free GPUs (spreads load, e.g. for I/O)."""

    name = "spread"

    def choose(self, hosts: list[Host], gpus: int) -> Host | None:
        return min(hosts, key=lambda h: (-len(h.free), h.index), default=None)


class LeastLoaded:
    """The host with the smallest fraction of its GPUs busy (differs from spread when
    host sizes differ)."""

    name = "least-loaded"

    def choose(self, hosts: list[Host], gpus: int) -> Host | None:
        return min(hosts, key=lambda h: ((h.gpus - len(h.free)) / h.gpus, h.index), default=None)


for _policy in (Pack(), Spread(), LeastLoaded()):
    register_placement(_policy)
