"""Small builders so domain tests read like the rules they check.

    c = cluster(hosts=2)                       # h0, h1 with 8 GPUs each
    c.budget("lab/a", 3)                       # creates `lab` (weight 1) on the way
    c.submit("w1", "lab/a", gpus=8, min_runtime="15m", resumable=True)
    c.at("20m").tick()                         # 20 minutes after the cluster's start
    c.finish("w1")
    assert c.placed("w1") and not c.preempted("w1")

Every input goes through `domain.handle` (admit + evolve + decide); the driver
stamps ids and times and keeps the whole journal in `c.journal`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from domain import State, handle
from domain import events as ev
from domain.config import SchedulerConfig
from domain.durations import parse_duration
from domain.state import RUNNING
from domain.tree import ancestors

START = 1_767_225_600.0  # 2026-01-01T00:00:00Z
ADMIN = "root"


def seconds(value: str | float | int) -> float:
    """`"15m"` -> 900.0; numbers are seconds."""
    return parse_duration(value)


@dataclass(frozen=True)
class Spec:
    """A workload's contract, with defaults a test can override (see `workload`)."""

    allocation: str = "lab/a"
    gpus: int = 1
    min_runtime: float = 900.0
    resumable: bool = True
    priority: int = 0
    expected_runtime: float | None = None
    actor: str = ADMIN

    def fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "allocation": self.allocation,
            "gpus": self.gpus,
            "min_runtime": self.min_runtime,
            "resumable": self.resumable,
            "priority": self.priority,
            "actor": self.actor,
        }
        if self.expected_runtime is not None:
            out["expected_runtime"] = self.expected_runtime
        return out


def workload(
    allocation: str = "lab/a",
    gpus: int = 1,
    min_runtime: str | float = "15m",
    resumable: bool = True,
    priority: int = 0,
    expected_runtime: str | float | None = None,
    actor: str = ADMIN,
) -> Spec:
    """A workload contract with test defaults: 1 GPU, 15 min, resumable, priority 0."""
    return Spec(
        allocation=allocation,
        gpus=gpus,
        min_runtime=seconds(min_runtime),
        resumable=resumable,
        priority=priority,
        expected_runtime=None if expected_runtime is None else seconds(expected_runtime),
        actor=actor,
    )


class Cluster:
    """Drives one `State` through `handle`, stamping ids and times."""

    def __init__(
        self,
        hosts: int = 2,
        gpus_per_host: int = 8,
        name: str = "test",
        start: float = START,
        **config: Any,
    ) -> None:
        self.name = name
        self.start = start
        self.now = start
        self.state = State(name, config=SchedulerConfig())
        self.journal: list[Any] = []
        self.inputs: list[Any] = []
        self.last: list[Any] = []
        self._ids = 0
        if config:  # in the journal, so a projection folding it decides alike
            self.configure(**config)
        for i in range(hosts):
            self.host(f"h{i}", gpus_per_host)

    # ------------------------------------------------------------ time
    def at(self, offset: str | float) -> Cluster:
        """Move the clock to `offset` after the cluster's start (never backwards)."""
        self.now = max(self.now, self.start + seconds(offset))
        return self

    def after(self, delta: str | float) -> Cluster:
        self.now += seconds(delta)
        return self

    def elapsed(self) -> float:
        return self.now - self.start

    # ---------------------------------------------------------- inputs
    def send(self, event: Any) -> list[Any]:
        """Handle one ready-made input event; returns the records it produced."""
        self.inputs.append(event)
        self.last = handle(self.state, event)
        self.journal.extend(self.last)
        return self.last

    def envelope(self, **over: Any) -> dict[str, Any]:
        self._ids += 1
        env = {"id": f"in-{self._ids}", "time": self.now, "cluster": self.name, "actor": ADMIN}
        env.update(over)
        return env

    def input(self, model: type, **fields: Any) -> list[Any]:
        env_keys = ("id", "time", "cluster", "actor")
        env = self.envelope(**{k: fields.pop(k) for k in env_keys if k in fields})
        return self.send(model(**env, **fields))

    def host(self, name: str, gpus: int = 8, **env: Any) -> list[Any]:
        return self.input(ev.HostRegistered, host=name, gpus=gpus, **env)

    def budget(
        self,
        path: str,
        weight: float = 1,
        managers: tuple[str, ...] | None = None,
        members: tuple[str, ...] | None = None,
        **env: Any,
    ) -> list[Any]:
        """Set `path`'s weight; missing ancestors are created with weight 1."""
        for parent in ancestors(path)[:-1]:
            if parent not in self.state.tree:
                self.input(ev.BudgetSet, allocation=parent, weight=1)
        return self.input(
            ev.BudgetSet, allocation=path, weight=weight, managers=managers, members=members, **env
        )

    def tree(self, weights: dict[str, float]) -> Cluster:
        for path, weight in weights.items():
            self.budget(path, weight)
        return self

    def submit(
        self,
        wid: str,
        allocation: str | Spec = "lab/a",
        gpus: int = 1,
        min_runtime: str | float = "15m",
        resumable: bool = True,
        priority: int = 0,
        expected_runtime: str | float | None = None,
        **env: Any,
    ) -> list[Any]:
        if isinstance(allocation, Spec):
            fields = allocation.fields()
        else:
            fields = workload(
                allocation, gpus, min_runtime, resumable, priority, expected_runtime
            ).fields()
        fields.update(env)
        return self.input(ev.WorkloadSubmitted, workload=wid, **fields)

    def finish(self, wid: str, attempt: int | None = None, **env: Any) -> list[Any]:
        return self.input(ev.WorkloadFinished, workload=wid, attempt=attempt, **env)

    def requeue(self, wid: str, **env: Any) -> list[Any]:
        return self.input(ev.WorkloadRequeueRequested, workload=wid, **env)

    def cancel(self, wid: str, **env: Any) -> list[Any]:
        return self.input(ev.WorkloadCancelled, workload=wid, **env)

    def hold(self, wid: str, **env: Any) -> list[Any]:
        return self.input(ev.WorkloadHeld, workload=wid, **env)

    def release(self, wid: str, **env: Any) -> list[Any]:
        return self.input(ev.WorkloadReleased, workload=wid, **env)

    def health(self, host: str, healthy: bool, reason: str = "", **env: Any) -> list[Any]:
        return self.input(ev.HostHealth, host=host, healthy=healthy, reason=reason, **env)

    def tick(self, **env: Any) -> list[Any]:
        return self.input(ev.ClockTick, **env)

    def configure(self, **config: Any) -> list[Any]:
        return self.input(ev.ConfigSet, config=config)

    def occupy(self, host: str, gpus: int, wid: str, **contract: Any) -> Any:
        """Run `wid` on exactly `host`: other healthy hosts with room for it are cordoned
        meanwhile (so use it while nothing unallocated runs on those)."""
        others = [
            h.name
            for h in self.state.hosts.values()
            if h.healthy and h.name != host and len(h.free) >= gpus
        ]
        for name in others:
            self.health(name, False)
        self.submit(wid, gpus=gpus, **contract)
        for name in others:
            self.health(name, True)
        placed = self.placed(wid)
        assert placed is not None and set(placed.hosts) == {host}, placed
        return placed

    def cordon_all(self) -> None:
        for name, host in self.state.hosts.items():
            if host.healthy:
                self.health(name, False)

    def uncordon_all(self) -> list[str]:
        """Make every host healthy again; the workloads placed meanwhile, in order."""
        placed: list[str] = []
        for name, host in list(self.state.hosts.items()):
            if not host.healthy:
                placed.extend(
                    e.workload for e in self.health(name, True) if e.type == "workload.placed"
                )
        return placed

    # --------------------------------------------------------- queries
    def of_type(self, type_: str, wid: str | None = None) -> list[Any]:
        return [
            e
            for e in self.journal
            if e.type == type_ and (wid is None or getattr(e, "workload", None) == wid)
        ]

    def placed(self, wid: str) -> Any | None:
        """The latest `workload.placed` for `wid` (None if never placed)."""
        found = self.of_type("workload.placed", wid)
        return found[-1] if found else None

    def placements(self, wid: str | None = None) -> list[Any]:
        return self.of_type("workload.placed", wid)

    def preempted(self, wid: str) -> Any | None:
        """The latest `workload.preempted` of `wid` (None if never preempted)."""
        found = self.of_type("workload.preempted", wid)
        return found[-1] if found else None

    def preemptions(self, wid: str | None = None) -> list[Any]:
        return self.of_type("workload.preempted", wid)

    def rejections(self, records: list[Any] | None = None) -> list[Any]:
        return [e for e in (self.journal if records is None else records) if _is_rejection(e)]

    def drained(self) -> list[str]:
        return [e.host for e in self.journal if e.type == "host.drained"]

    def running(self) -> set[str]:
        return {w.id for w in self.state.workloads.values() if w.state == RUNNING}

    def pending(self) -> set[str]:
        return {w.id for w in self.state.workloads.values() if w.state != RUNNING}

    def hosts_of(self, wid: str) -> set[str]:
        w = self.state.workloads.get(wid)
        return set(w.hosts) if w else set()

    def usage(self, path: str) -> float:
        return self.state.charged.usage(path, self.state.now)

    def charged_total(self, path: str) -> float:
        return self.state.charged.total(path, self.state.now)

    def unallocated_total(self, path: str) -> float:
        return self.state.unallocated.total(path, self.state.now)

    def free(self, host: str) -> int:
        return len(self.state.hosts[host].free)


def _is_rejection(event: Any) -> bool:
    return event.type.endswith(".rejected")


def cluster(hosts: int = 2, gpus_per_host: int = 8, **config: Any) -> Cluster:
    """A cluster of `hosts` x `gpus_per_host`, config keys as in SchedulerConfig.
    Usage buckets are a minute unless given, so ratios move at the minute marks these
    small scenarios are written in (they are read only at bucket edges)."""
    config.setdefault("bucket", "1m")
    return Cluster(hosts=hosts, gpus_per_host=gpus_per_host, **config)


def fingerprint(state: State) -> tuple[Any, ...]:
    """What a rejected input must leave unchanged (seq and time may advance)."""
    return (
        tuple(
            sorted(
                (w.id, w.state, w.attempt, tuple(sorted(w.hosts.items())), w.charged)
                for w in state.workloads.values()
            )
        ),
        tuple(
            sorted(
                (h.name, tuple(h.free), h.healthy, h.drained, tuple(sorted(h.workloads.items())))
                for h in state.hosts.values()
            )
        ),
        tuple(
            sorted(
                (n.path, n.weight, n.share, n.managers, n.members)
                for n in state.tree.nodes.values()
            )
        ),
        state.config,
        state.capacity,
        state.pending_count,
    )
