"""Property-based tests: invariants of the scheduling core over random event sequences.

A scenario is a cluster, a small budget tree (with a zero-share leaf `z`), a config and
a list of operations: submissions with random contracts, finishes, cancels, health
flips, clock ticks, budget and policy changes, and now and then an invalid input.
After every step the journal is checked against an independent model built only from
the journal's records; at the end the inputs are replayed (determinism) and the
journal is folded with `evolve` alone (the journal is the state).
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from domain import State, evolve
from domain import events as ev
from domain.config import SchedulerConfig
from domain.decide import Cycle
from domain.fairshare import Ranking, fair_tree
from domain.policies import register_ordering
from domain.state import PENDING, Workload
from domain.tree import ancestors
from streams.codec import encode
from tests.domain.builders import Cluster, fingerprint


class PluginPriority:
    """A plugin ordering as a user might write one: no `preemption_scope` (so failures
    are grouped by allocation and priority) and preemption of lower-priority work of
    other allocations once past protection."""

    name = "test-plugin-priority"
    unallocated_may_preempt = False

    def rank(self, state: State, now: float) -> Ranking:
        return Ranking()

    def queue_key(self, w: Workload) -> tuple[Any, ...]:
        return (-w.priority, w.submit_time)

    def sort_key(self, ranking: Ranking, w: Workload, allocated: bool) -> tuple[Any, ...]:
        return (not allocated, *w.queue_key)

    def terms(self, state: State, w: Workload, allocated: bool, now: float) -> tuple[bool, float]:
        return (True, now + w.min_runtime) if allocated else (False, now)

    def may_preempt(
        self, state: State, ranking: Ranking, beneficiary: Workload, victim: Workload, at: float
    ) -> str | None:
        if not victim.charged:
            return "unallocated"
        if victim.protected_until > at or victim.allocation == beneficiary.allocation:
            return None
        return "priority" if victim.priority < beneficiary.priority else None


register_ordering(PluginPriority())

ORDERINGS = ["fairshare", "fifo", "largest-first", "longest-first", "shortest-first"]
ORDERINGS_ALL = [*ORDERINGS, "legacy-priority", PluginPriority.name]
LEAVES = ["p1/a", "p1/b", "p2/a", "z"]
NODES = ["p1", "p2", "p1/a", "p1/b", "p2/a"]
DTS = [0, 0, 1, 60, 600, 900, 3600, 4 * 3600]
BAD = [
    "unknown-alloc",
    "parent-alloc",
    "gpus-0",
    "gpus-huge",
    "min-negative",
    "min-above-cap",
    "finish-ghost",
    "cancel-ghost",
    "finish-pending",
    "health-ghost",
    "config-bad",
    "dup-id",
    "dup-workload",
    "old",
    "huge-time",
    "placed-as-input",
    "other-cluster",
    "unparsable",
]

PROPERTY_SETTINGS = settings(
    max_examples=int(os.environ.get("ALLOT_HYPOTHESIS_EXAMPLES", "100")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

submit_op = st.tuples(
    st.just("submit"),
    st.sampled_from(LEAVES),
    st.sampled_from([1, 1, 2, 3, 4, 8, 8, 12, 16]),
    st.sampled_from([0, 60, 900, 900, 3600, 8 * 3600]),
    st.booleans(),
    st.integers(0, 3),
    st.sampled_from([None, None, 600, 7200]),
)
# operation kinds and their relative frequencies
OPERATIONS = {
    "submit": (8, submit_op),
    "tick": (3, st.tuples(st.just("tick"))),
    "finish": (2, st.tuples(st.just("finish"), st.integers(0, 30), st.booleans())),
    # the launcher lost the node under it: resumable work is requeued, the rest ends
    "lose": (1, st.tuples(st.just("lose"), st.integers(0, 30), st.booleans())),
    # `allot requeue`: running work stops and waits again (pending work: rejected);
    # naming no attempt, the running one, or the one before it (stale: rejected)
    "requeue": (1, st.tuples(st.just("requeue"), st.integers(0, 30), st.integers(0, 2))),
    "cancel": (1, st.tuples(st.just("cancel"), st.integers(0, 30))),
    "hold": (1, st.tuples(st.just("hold"), st.integers(0, 30))),
    "release": (1, st.tuples(st.just("release"), st.integers(0, 30))),
    "health": (1, st.tuples(st.just("health"), st.integers(0, 7), st.booleans())),
    "budget": (
        1,
        st.tuples(st.just("budget"), st.sampled_from(NODES), st.sampled_from([0, 1, 2, 3])),
    ),
    "ordering": (1, st.tuples(st.just("ordering"), st.sampled_from(ORDERINGS_ALL))),
    "bad": (1, st.tuples(st.just("bad"), st.sampled_from(BAD))),
}
KINDS = [kind for kind, (weight, _) in OPERATIONS.items() for _ in range(weight)]
op = st.tuples(
    st.sampled_from(DTS),
    st.sampled_from(KINDS).flatmap(lambda kind: OPERATIONS[kind][1]),
)


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    hosts = draw(st.sampled_from([1, 2, 2, 3, 8]))
    config = {
        "ordering": draw(st.sampled_from(["fairshare"] * 4 + ORDERINGS_ALL[1:])),
        "placement": draw(st.sampled_from(["pack", "spread", "least-loaded"])),
        "hysteresis": draw(st.sampled_from([0.0, 0.05, 0.5])),
        "window": draw(st.sampled_from(["7d", "6h"])),
        "bucket": draw(st.sampled_from(["1h", "15m"])),
        "headroom_hosts": draw(st.sampled_from([0, 1])),
        "max_lost_requeues": draw(st.sampled_from([5, 1, 0])),
    }
    weights = {node: draw(st.sampled_from([1, 1, 2, 3, 0])) for node in NODES}
    return {
        "hosts": hosts,
        "small_host": draw(st.booleans()),
        "config": config,
        "weights": weights,
        "ops": draw(st.lists(op, min_size=20, max_size=80)),
    }


# ------------------------------------------------------------------------- driver


def build(scenario: dict[str, Any]) -> Cluster:
    c = Cluster(hosts=0, **scenario["config"])
    for i in range(scenario["hosts"]):
        small = scenario["small_host"] and i == scenario["hosts"] - 1 and i > 0
        c.host(f"h{i}", 4 if small else 8)
    for node in NODES:
        c.budget(node, scenario["weights"][node])
    c.budget("z", 0)
    return c


class Runner:
    """Applies a scenario's operations one by one, checking invariants after each."""

    def __init__(self, scenario: dict[str, Any]) -> None:
        self.c = build(scenario)
        self.model = JournalModel()
        self.model.feed(self.c.state, self.c.journal)
        self.model.check(self.c.state)
        self.ops = scenario["ops"]
        self.n = 0

    def run(self) -> Cluster:
        for dt, operation in self.ops:
            self.c.after(dt)
            expect_rejection, event = self.make(operation)
            before = fingerprint(self.c.state)
            out = self.c.send(event)
            self.check_output(event, out, expect_rejection, before)
            self.model.feed(self.c.state, out)
            self.model.check(self.c.state)
            assert_work_conserving(self.c.state)
        return self.c

    def make(self, operation: tuple) -> tuple[bool, Any]:
        c = self.c
        kind = operation[0]
        live = sorted(c.state.workloads)
        running = sorted(c.running())
        pending = sorted(c.pending())
        if kind == "submit":
            _, leaf, gpus, min_runtime, resumable, priority, expected = operation
            self.n += 1
            fields = {
                "workload": f"w{self.n}",
                "allocation": leaf,
                "gpus": gpus,
                "min_runtime": float(min_runtime),
                "resumable": resumable,
                "priority": priority,
                "expected_runtime": expected,
            }
            return False, ev.WorkloadSubmitted(**c.envelope(), **fields)
        if kind in ("finish", "lose") and running:
            w = c.state.workloads[running[operation[1] % len(running)]]
            attempt = w.attempt if operation[2] else None
            outcome = "lost" if kind == "lose" else "completed"
            return False, ev.WorkloadFinished(
                **c.envelope(), workload=w.id, attempt=attempt, outcome=outcome
            )
        if kind == "requeue" and live:
            w = c.state.workloads[live[operation[1] % len(live)]]
            attempt = [None, w.attempt, w.attempt - 1][operation[2]] or None
            event = ev.WorkloadRequeueRequested(**c.envelope(), workload=w.id, attempt=attempt)
            return w.state != "running" or attempt not in (None, w.attempt), event
        if kind == "cancel" and live:
            return False, ev.WorkloadCancelled(
                **c.envelope(), workload=live[operation[1] % len(live)]
            )
        held = [wid for wid in pending if c.state.workloads[wid].on_hold]
        waiting = [wid for wid in pending if not c.state.workloads[wid].on_hold]
        if kind == "hold" and waiting:
            wid = waiting[operation[1] % len(waiting)]
            return False, ev.WorkloadHeld(**c.envelope(), workload=wid)
        if kind == "release" and held:
            wid = held[operation[1] % len(held)]
            return False, ev.WorkloadReleased(**c.envelope(), workload=wid)
        if kind == "health":
            names = sorted(c.state.hosts)
            host = names[operation[1] % len(names)]
            return False, ev.HostHealth(**c.envelope(), host=host, healthy=operation[2])
        if kind == "budget":
            return False, ev.BudgetSet(**c.envelope(), allocation=operation[1], weight=operation[2])
        if kind == "ordering":
            config = {**c.state.config.model_dump(), "ordering": operation[1]}
            return False, ev.ConfigSet(**c.envelope(), config=config)
        if kind == "bad":
            return True, self.bad(operation[1], live, pending)
        return False, ev.ClockTick(**c.envelope())

    def bad(self, kind: str, live: list[str], pending: list[str]) -> Any:
        c = self.c
        cap = c.state.config.max_min_runtime

        def submit(**over: Any) -> Any:
            fields = {"workload": "bad", "allocation": "p1/a", "gpus": 1, "min_runtime": 60.0}
            fields.update(over)
            env = {k: fields.pop(k) for k in ("time", "cluster", "id") if k in fields}
            return ev.WorkloadSubmitted(**c.envelope(**env), **fields)

        if kind == "unknown-alloc":
            return submit(allocation="nope/x")
        if kind == "parent-alloc":
            return submit(allocation="p1")
        if kind == "gpus-0":
            return submit(gpus=0)
        if kind == "gpus-huge":
            return submit(gpus=10**6)
        if kind == "min-negative":
            return submit(min_runtime=-1.0)
        if kind == "min-above-cap":
            return submit(min_runtime=cap + 1)
        if kind == "finish-pending" and pending:
            return ev.WorkloadFinished(**c.envelope(), workload=pending[0])
        if kind in ("finish-ghost", "finish-pending"):
            return ev.WorkloadFinished(**c.envelope(), workload="ghost")
        if kind == "cancel-ghost":
            return ev.WorkloadCancelled(**c.envelope(), workload="ghost")
        if kind == "health-ghost":
            return ev.HostHealth(**c.envelope(), host="ghost", healthy=True)
        if kind == "config-bad":
            return ev.ConfigSet(**c.envelope(), config={"window": "soon"})
        if kind == "dup-id":
            accepted = [e.id for e in c.journal if e.type in ev.INPUT_TYPES]
            return ev.ClockTick(**c.envelope(id=accepted[-1]))
        if kind == "dup-workload" and live:
            return submit(workload=live[0])
        if kind == "dup-workload":
            return submit(workload="")
        if kind == "old":
            return ev.ClockTick(**c.envelope(time=c.state.now - c.state.config.window - 10))
        if kind == "huge-time":
            return ev.ClockTick(**c.envelope(time=1e306))
        if kind == "placed-as-input":
            return ev.WorkloadPlaced(**c.envelope(), workload="x", hosts={"h0": (0,)}, charged=True)
        if kind == "other-cluster":
            return submit(cluster="elsewhere")
        assert kind == "unparsable"
        return ev.parse_input({"type": "workload.submitted", "id": "raw", "gpus": "x"}, c.now)

    def check_output(self, event: Any, out: list[Any], rejected: bool, before: Any) -> None:
        first = out[0]
        assert first.type.endswith(".rejected") or first.id == event.id
        if rejected:
            assert first.type.endswith(".rejected"), (event, first)
            assert first.error
            if len(out) == 1:
                assert fingerprint(self.c.state) == before
        for decision in out[1:]:
            assert decision.type in ("workload.placed", "workload.preempted", "host.drained")
            assert decision.actor == "allot" and decision.cause == first.id
            assert decision.time == first.time


class JournalModel:
    """What the journal says, rebuilt from its records alone, checked against the state."""

    def __init__(self) -> None:
        self.owner: dict[tuple[str, int], str] = {}
        self.running: dict[str, Any] = {}  # workload -> its workload.placed
        self.submitted: dict[str, Any] = {}
        self.closed: dict[bool, dict[str, float]] = {
            True: defaultdict(float),
            False: defaultdict(float),
        }
        self.slack: dict[bool, dict[str, float]] = {
            True: defaultdict(float),
            False: defaultdict(float),
        }
        self.paths: set[str] = set()
        self.last_time = -math.inf
        self.asked: set[str] = set()  # requeues accepted and not yet answered
        self.lost: dict[str, int] = {}  # lost attempts requeued, per workload

    def feed(self, state: State, records: list[Any]) -> None:
        for i, e in enumerate(records):
            assert e.time >= self.last_time, "journal time went backwards"
            self.last_time = e.time
            handler = getattr(self, "on_" + e.type.replace(".", "_"), None)
            if handler is not None:
                handler(state, e)
            if e.type == "workload.preempted" and e.beneficiary is not None:
                # GPUs are taken from a victim only for a beneficiary placed right away
                later = [r for r in records[i + 1 :] if r.type == "workload.placed"]
                placed = next(r for r in later if r.workload == e.beneficiary)
                assert e.workload in placed.explain["preempted"]

    def on_workload_submitted(self, state: State, e: Any) -> None:
        self.submitted[e.workload] = e
        self.paths.update(ancestors(e.allocation))

    def on_workload_placed(self, state: State, e: Any) -> None:
        assert e.workload not in self.running, f"{e.workload} placed twice"
        sub = self.submitted[e.workload]
        for name, gpus in e.hosts.items():
            host = state.hosts[name]
            assert host.healthy, f"{e.workload} placed on unhealthy {name}"
            for g in gpus:
                assert 0 <= g < host.gpus
                assert (name, g) not in self.owner, f"GPU {name}:{g} given twice"
                self.owner[(name, g)] = e.workload
        held = sum(len(g) for g in e.hosts.values())
        assert held >= sub.gpus
        if len(e.hosts) > 1:  # gangs take whole hosts
            assert all(len(g) == state.hosts[h].gpus for h, g in e.hosts.items())
        if e.charged:
            # zero-share leaves and min_runtime 0 never run charged
            assert sub.min_runtime > 0 and state.tree.share(sub.allocation) > 0
            assert sub.allocation != "z"
        else:
            assert e.protected_until == e.time  # unallocated: never protected
        if state.ordering.name == "legacy-priority":
            # non-preemptible within the cap, else preemptible overflow
            assert e.protected_until in (None, e.time)
            assert e.protected_until == e.time or e.charged
        elif e.charged:
            assert e.protected_until == e.time + sub.min_runtime
        if e.charged and set(e.hosts) & state.headroom:
            assert sub.gpus <= state.config.short_job_max_gpus
            assert sub.min_runtime <= state.config.short_job_max_min_runtime
        self.running[e.workload] = e

    def on_workload_preempted(self, state: State, e: Any) -> None:
        placed = self.running.get(e.workload)
        assert placed is not None, f"{e.workload} preempted while not running"
        assert e.attempt == placed.attempt
        until = math.inf if placed.protected_until is None else placed.protected_until
        if e.reason in ("fair_share", "priority") or (e.reason == "drain" and placed.charged):
            assert e.time >= until, f"protected {e.workload} preempted ({e.reason})"
        if e.reason == "unallocated":
            assert not placed.charged
        if e.reason == "fair_share":
            beneficiary = self.submitted[e.beneficiary]
            assert beneficiary.allocation != placed.allocation
            # either rule: the beneficiary's allocation ranks above the victim's
            assert e.explain["beneficiary_rank"] < e.explain["victim_rank"]
            if e.explain.get("rule", "ratio") == "ratio":
                # judged on the ratios a fresh ranking gives now, whatever kind of cycle
                # (quick, light, full) made it: ratios move only at bucket edges
                fresh = fair_tree(state, e.time).ratios
                for path, shown in e.explain["compared"].items():
                    ratio = fresh[path]
                    assert shown == (round(ratio, 6) if math.isfinite(ratio) else None), path
                # the beneficiary's side leads the victim's by the hysteresis margin
                ours, theirs = e.explain["compared"].values()
                assert ours is not None
                # (explain rounds ratios to 6 decimals: with hysteresis 0 two ratios a
                # hair apart print alike)
                assert theirs is None or theirs + 1e-6 > ours * (1 + state.config.hysteresis)
            else:
                # reclaim: the victim's side and its own allocation ran beyond their
                # entitlement, the beneficiary's side (first entry) within its own
                assert e.explain["rule"] == "reclaim"
                entries = list(e.explain["running_vs_entitled"].values())
                ours_running, ours_entitled = entries[0]
                assert ours_running + beneficiary.gpus <= ours_entitled + 1e-6
                for running, entitled in entries[1:]:
                    assert running > entitled
        if e.reason == "drain":
            assert any(not state.hosts[h].healthy for h in placed.hosts)
        if e.reason == "requested":  # the asker wants it run again, resumable or not
            assert e.workload in self.asked and e.requeued and e.explain["requested_by"]
            self.asked.discard(e.workload)
        else:
            assert e.requeued == self.submitted[e.workload].resumable
        self.release(e)

    def on_workload_requeue_requested(self, state: State, e: Any) -> None:
        assert e.workload in self.running, "requeue accepted for work not running"
        assert e.attempt in (None, self.running[e.workload].attempt), "stale requeue accepted"
        self.asked.add(e.workload)

    def on_config_set(self, state: State, e: Any) -> None:
        # leaving legacy-priority: work protected until it ends is protected for its
        # contract's minimum runtime from its start, as fairshare would have placed it
        if state.ordering.name == "legacy-priority":
            return
        for wid, placed in list(self.running.items()):
            if placed.protected_until is None:
                until = placed.time + self.submitted[wid].min_runtime
                self.running[wid] = placed.model_copy(update={"protected_until": until})

    def on_host_drained(self, state: State, e: Any) -> None:
        assert not state.hosts[e.host].healthy
        assert not any(h == e.host for h, _ in self.owner), f"{e.host} drained while busy"

    def on_workload_finished(self, state: State, e: Any) -> None:
        assert e.workload in self.running, "finish accepted for work not running"
        times = self.lost.get(e.workload, 0)
        lost = e.outcome == "lost" and self.submitted[e.workload].resumable
        lost = lost and times < state.config.max_lost_requeues  # then it ends
        assert e.requeued is (True if lost else None)  # requeued: it waits again
        self.lost[e.workload] = times + lost
        self.release(e)
        assert (e.workload in state.workloads) is lost

    def on_workload_cancelled(self, state: State, e: Any) -> None:
        if e.workload in self.running:
            self.release(e)

    def release(self, e: Any) -> None:
        placed = self.running.pop(e.workload)
        for name, gpus in placed.hosts.items():
            for g in gpus:
                assert self.owner.pop((name, g)) == e.workload
        held = sum(len(g) for g in placed.hosts.values())
        for p in ancestors(placed.allocation):
            self.closed[placed.charged][p] += held * (e.time - placed.time)
            self.slack[placed.charged][p] += held * 0.001

    def check(self, state: State) -> None:
        now = state.now
        assert not self.asked, f"requeue asked and not done: {sorted(self.asked)}"
        assert not state.requeue_asked
        # the state agrees with the journal on who runs where
        live_running = {w.id: w for w in state.workloads.values() if w.state == "running"}
        assert live_running.keys() == self.running.keys()
        for wid, w in live_running.items():
            assert w.hosts == self.running[wid].hosts
        for host in state.hosts.values():
            owned = {g for (h, g), _ in self.owner.items() if h == host.name}
            assert not owned & set(host.free), f"{host.name}: a GPU both free and taken"
            assert len(owned) + len(host.free) == host.gpus, f"{host.name} capacity"
            assert sum(host.workloads.values()) == len(owned)
        for host in state.hosts.values():  # rule 9: cordon, drain, report
            if host.healthy:
                continue
            for wid in host.workloads:
                w = state.workloads[wid]
                assert w.charged and w.protected_until > now, f"{wid} left on {host.name}"
            assert host.drained == (not host.workloads), host
        pending = sum(1 for w in state.workloads.values() if w.state != "running" and not w.on_hold)
        assert state.pending_count == pending
        assert all(w.bucket is None for w in state.workloads.values() if w.on_hold)
        # conservation: ledger totals equal the journal's gpus x run time
        for charged, ledger in ((True, state.charged), (False, state.unallocated)):
            open_gpus: dict[str, float] = defaultdict(float)
            open_slack: dict[str, float] = defaultdict(float)
            for placed in self.running.values():
                if placed.charged == charged:
                    held = sum(len(g) for g in placed.hosts.values())
                    for p in ancestors(placed.allocation):
                        open_gpus[p] += held * (now - placed.time)
                        open_slack[p] += held * 0.001
            for p in self.paths:
                expected = self.closed[charged][p] + open_gpus[p]
                tolerance = self.slack[charged][p] + open_slack[p] + 1e-6
                got = ledger.total(p, now)
                assert abs(got - expected) <= tolerance, (p, charged, got, expected)
                assert 0 <= ledger.usage(p, now) <= got + 1e-9
        assert state.charged.total("z", now) == 0.0


def assert_work_conserving(state: State) -> None:
    """After every decision no waiting workload fits GPUs it may use right now: free,
    healthy, not a headroom host it must keep off, not held by a reservation it could
    delay. (Found work requeued by a preemption left waiting beside a free GPU until
    the next input.)"""
    cycle = Cycle.snapshot(state, state.now)
    if state.blocked is not None:
        cycle.reservations = dict(state.blocked.reservations)
    for w in state.workloads.values():
        if w.state != PENDING or w.bucket is None:
            continue
        single = w.gpus <= state.max_host_gpus()
        fits = cycle.free_hosts(w, state.allocated(w), w.bucket[3], single)
        assert fits is None, f"{w.id} ({w.gpus} GPUs) waits though {fits} are free for it"


# ------------------------------------------------------------------------ properties


def found(
    *,
    hosts: int,
    ops: list[Any],
    ordering: str = "fairshare",
    hysteresis: float = 0.0,
    weights: dict[str, float] | None = None,
) -> dict[str, Any]:
    """A scenario a deep run found, in the shape `scenarios()` generates."""
    return {
        "hosts": hosts,
        "small_host": False,
        "config": {
            "ordering": ordering,
            "placement": "pack",
            "hysteresis": hysteresis,
            "window": "7d",
            "bucket": "1h",
            "headroom_hosts": 0,
        },
        "weights": weights or {"p1": 1, "p2": 1, "p1/a": 1, "p1/b": 1, "p2/a": 1},
        "ops": ops,
    }


# found in CI: one plan of several reclaim victims took a borrower below its
# entitlement (a later victim's side ran 18 GPUs of 18.67 entitled when it was taken)
_FILLER = (0, ("submit", "p1/a", 1, 0, False, 0, None))  # 1 GPU, unallocated
RECLAIM_BELOW_ENTITLEMENT = found(
    hosts=8,
    hysteresis=0.5,
    ops=[
        (0, ("health", 0, False)),
        *[_FILLER] * 15,
        *[(0, ("submit", "p1/a", 1, 900, False, 0, None))] * 2,
        (0, ("submit", "p2/a", 12, 60, False, 0, None)),
        *[_FILLER] * 6,
        (0, ("submit", "p1/a", 8, 60, False, 0, None)),
        (600, ("submit", "p1/a", 12, 60, False, 0, None)),
        (0, ("submit", "p2/a", 12, 60, False, 0, None)),
        (0, ("budget", "p2", 2)),
        (60, _FILLER[1]),
    ],
)


# found by the work-conservation invariant: a 1-GPU job preempted a 16-GPU gang that
# does not requeue; the 8-GPU job that had failed earlier in the cycle waited beside a
# whole free host
GANG_LEFT_A_HOST_FREE = found(
    hosts=2,
    hysteresis=0.05,
    weights={"p1": 3, "p2": 1, "p1/a": 1, "p1/b": 1, "p2/a": 1},
    ops=[
        (0, ("submit", "p1/a", 1, 0, False, 0, None)),
        (0, ("submit", "p1/a", 1, 0, False, 0, None)),
        (0, ("submit", "p1/a", 12, 60, True, 0, None)),
        (600, ("submit", "p1/a", 4, 60, False, 0, None)),
        (0, ("submit", "p2/a", 1, 60, False, 0, 600)),
        (0, ("tick",)),
        (0, ("budget", "p2", 2)),
        (14400, ("submit", "p1/a", 1, 60, False, 0, None)),
        (0, ("finish", 0, False)),
        (0, ("submit", "p1/a", 1, 0, False, 0, None)),
        (600, ("finish", 0, False)),
        (0, ("submit", "p2/a", 2, 60, False, 0, None)),
        (0, ("submit", "p2/a", 8, 60, True, 0, None)),
        (0, ("submit", "p1/a", 1, 0, True, 0, None)),
        (3600, ("tick",)),
        (600, ("finish", 1, False)),
        (900, ("submit", "p1/a", 12, 60, False, 0, None)),
        (600, ("tick",)),
        (900, ("cancel", 0)),
        (3600, ("submit", "p1/b", 1, 60, False, 0, None)),
    ],
)


# found by a 2,000-example run: at t=120 a requeued 1-GPU job preempts a 12-GPU gang
# and lands on h0; the 12-GPU w8 then reserves h0 and h1 from ~2h02m. In p1/b's 1-GPU
# bucket the head w5 (min runtime 8 h) may not backfill h1, and a failed head used to
# end its bucket's turn, so w9 behind it (min runtime 1 h, which ends before the
# reservation) waited beside the free host h1
WAITS_BESIDE_A_FREE_HOST = found(
    hosts=2,
    ops=[
        (0, ("tick",)),
        (0, ("tick",)),
        (0, ("ordering", "fairshare")),
        (0, ("submit", "p1/a", 1, 0, False, 0, None)),
        (0, ("submit", "p1/a", 1, 60, True, 0, 7200)),
        (60, ("tick",)),
        (0, ("submit", "p1/a", 1, 0, False, 0, None)),
        (0, ("submit", "p1/b", 12, 60, False, 0, None)),
        (0, ("submit", "p1/b", 1, 28800, False, 0, None)),
        (0, ("tick",)),
        (0, ("tick",)),
        (0, ("submit", "p1/a", 1, 0, False, 0, None)),
        (0, ("submit", "p1/a", 1, 0, False, 0, None)),
        (0, ("submit", "p1/a", 12, 60, False, 0, None)),
        (0, ("submit", "p1/b", 1, 3600, False, 0, None)),
        (0, ("submit", "p1/a", 1, 0, False, 0, None)),
        (0, ("submit", "p1/a", 1, 0, False, 0, None)),
        (0, ("submit", "p1/a", 1, 0, False, 0, None)),
        (0, ("submit", "p1/a", 1, 0, False, 0, None)),
        (60, ("submit", "p1/a", 1, 0, False, 0, None)),
    ],
)


# found by a 1,000-example run: at 2h01m w6 (8 GPUs) preempts w7 and w4 on h0 and w8
# reserves h0; w6 finishes at once. In the light cycle that follows, w7 (1 GPU, p2/a) is
# tried first and may not backfill h0 (its holder w8, of the same allocation, could not
# preempt it later); then w8 starts on half of h0, which voids the reservation, but w7
# was already passed over and waited beside h0's other four GPUs
HOLDER_LEFT_GPUS_FREE = found(
    hosts=2,
    ops=[
        (0, ("tick",)),
        (0, ("ordering", "fairshare")),
        (0, ("ordering", "fairshare")),
        (0, ("submit", "p1/a", 1, 0, False, 0, None)),
        (0, ("ordering", "fairshare")),
        (0, ("finish", 0, False)),
        (0, ("finish", 0, False)),
        (0, ("submit", "p1/a", 4, 0, False, 0, None)),
        (0, ("submit", "p1/a", 8, 60, True, 0, None)),
        (0, ("submit", "p2/a", 1, 60, False, 0, None)),
        (0, ("submit", "p2/a", 3, 28800, False, 0, None)),
        (0, ("submit", "p1/a", 8, 60, False, 0, 600)),
        (0, ("ordering", "fairshare")),
        (60, ("ordering", "fairshare")),
        (0, ("submit", "p2/a", 1, 60, True, 0, None)),
        (0, ("submit", "p2/a", 4, 60, True, 0, None)),
        (3600, ("ordering", "fairshare")),
        (3600, ("finish", 2, False)),
        (0, ("finish", 1, False)),
        (0, ("submit", "p1/a", 1, 0, False, 0, None)),
    ],
)


# found by a 3,000-example run, under legacy-priority: w7 (4 GPUs) holds h0 from 1h10m.
# When h0 frees, the light cycle keeps that reservation; the requeued w5 (3 GPUs) may
# not backfill it and fails first, which ended the cycle (its group needs no fewer than
# 3 GPUs) before the holder, who may use h0, was tried: it waited beside 8 free GPUs
HOLDER_SKIPPED = found(
    hosts=1,
    ops=[
        (0, ("tick",)),
        (0, ("cancel", 0)),
        (0, ("cancel", 0)),
        (0, ("finish", 0, False)),
        (0, ("health", 0, False)),
        (0, ("health", 0, True)),
        (0, ("budget", "p1", 1)),
        (0, ("submit", "p1/a", 1, 0, False, 0, None)),
        (0, ("submit", "p1/a", 1, 0, False, 0, None)),
        (0, ("submit", "p1/a", 1, 0, False, 0, None)),
        (0, ("submit", "p1/a", 1, 0, False, 0, None)),
        (0, ("submit", "p1/a", 3, 60, True, 0, None)),
        (0, ("submit", "p1/a", 8, 0, False, 1, 600)),
        (0, ("ordering", "legacy-priority")),
        (0, ("bad", "unknown-alloc")),
        (0, ("submit", "p1/a", 4, 60, False, 0, None)),
        (0, ("finish", 0, False)),
        (3600, ("finish", 0, False)),
        (0, ("finish", 0, False)),
        (0, ("tick",)),
    ],
)


# found by a 3,000-example run, under legacy-priority: w15 (8 GPUs, level 1) holds h0;
# w16 (1 GPU, level 1) may not backfill it (w15 could not preempt it later), and its
# failure skipped w13 (1 GPU, level 0) of the same group, which w15 could preempt and
# so may backfill: it waited beside four free GPUs. A holder's "cannot preempt it"
# holds only for work of the same allocation and level.
LOWER_LEVEL_MAY_BACKFILL = found(
    hosts=1,
    ordering="legacy-priority",
    ops=[
        (0, ("tick",)),
        (0, ("finish", 0, False)),
        *[(0, ("submit", "p1/a", 1, 0, False, 0, None))] * 11,
        (0, ("submit", "p1/a", 1, 0, False, 1, None)),
        (0, ("submit", "p1/a", 1, 60, False, 0, None)),
        (0, ("submit", "p1/a", 8, 0, False, 1, None)),
        (0, ("submit", "p1/a", 8, 60, False, 1, None)),
        (0, ("finish", 0, False)),
        (0, ("submit", "p1/a", 1, 60, False, 1, None)),
        (0, ("submit", "p1/a", 1, 0, False, 2, 600)),
    ],
)


# found by a 2,000-example run once lost reports entered the operations: w12 (12 GPUs,
# resumable, lost on h4+h5) was requeued ahead of w2, the holder of a reservation in the
# same bucket; the light cycle that followed tried w12 (refused: w2 holds h4), skipped
# w2 behind it, and left w2 beside two free hosts. A requeue now takes a full cycle.
LOST_AHEAD_OF_HOLDER = {
    "hosts": 8,
    "small_host": False,
    "config": {
        "ordering": "fairshare",
        "placement": "spread",
        "hysteresis": 0.0,
        "window": "7d",
        "bucket": "1h",
        "headroom_hosts": 1,
    },
    "weights": {"p1": 1, "p2": 1, "p1/a": 1, "p1/b": 1, "p2/a": 1},
    "ops": [
        (0, ("submit", "p1/a", 1, 60, False, 0, None)),
        (0, ("submit", "p1/b", 12, 60, True, 0, None)),
        *[(0, ("submit", "p1/a", 1, 0, False, 0, None))] * 6,
        (0, ("submit", "p1/a", 3, 60, False, 0, None)),
        (0, ("cancel", 2)),
        (0, ("finish", 3, False)),
        (0, ("submit", "p1/a", 1, 0, False, 0, None)),
        (0, ("submit", "p1/a", 1, 3600, False, 0, None)),
        (0, ("submit", "p1/b", 12, 60, True, 0, 600)),
        (0, ("submit", "p1/a", 1, 3600, False, 0, None)),
        (0, ("submit", "p1/a", 1, 0, False, 0, None)),
        (0, ("health", 0, False)),
        (0, ("submit", "p1/a", 1, 0, False, 0, None)),
        (0, ("submit", "p1/a", 1, 0, False, 0, None)),
        (60, ("submit", "p1/a", 1, 0, False, 0, None)),
        (0, ("lose", 2, False)),
    ],
}


@PROPERTY_SETTINGS
@example(RECLAIM_BELOW_ENTITLEMENT)
@example(GANG_LEFT_A_HOST_FREE)
@example(WAITS_BESIDE_A_FREE_HOST)
@example(HOLDER_LEFT_GPUS_FREE)
@example(HOLDER_SKIPPED)
@example(LOWER_LEVEL_MAY_BACKFILL)
@example(LOST_AHEAD_OF_HOLDER)
@given(scenarios())
def test_invariants_hold_after_every_step(scenario: dict[str, Any]) -> None:
    """No GPU given twice, capacity never exceeded, protected work never preempted for
    fair share, unallocated work never charged, conservation of charged GPU-seconds,
    zero-share leaves never charged, no input raises, bad input rejected unchanged."""
    Runner(scenario).run()


def _replay(scenario: dict[str, Any], inputs: list[Any]) -> list[bytes]:
    fresh = Cluster(hosts=0)  # the config is among the inputs
    for event in inputs:
        fresh.send(event)
    return [encode(e) for e in fresh.journal]


@PROPERTY_SETTINGS
@given(scenarios())
def test_replaying_the_same_inputs_gives_byte_identical_journals(
    scenario: dict[str, Any],
) -> None:
    c = Runner(scenario).run()
    assert _replay(scenario, c.inputs) == [encode(e) for e in c.journal]


def _live(state: State) -> Any:
    now = state.now
    workloads = sorted(
        (
            w.id,
            w.state,
            w.attempt,
            tuple(sorted(w.hosts.items())),
            w.held,
            w.charged,
            w.start,
            w.protected_until,
            w.submit_time,
            w.queue_key,
        )
        for w in state.workloads.values()
    )
    paths = sorted({p for w in state.workloads.values() for p in ancestors(w.allocation)} | {"z"})
    paths += sorted(state.charged.accounts)
    usage = [
        (
            p,
            state.charged.usage_ms(p, now),
            state.charged.total(p, now),
            state.unallocated.total(p, now),
        )
        for p in paths
    ]
    return (
        fingerprint(state),
        workloads,
        usage,
        state.now,
        state.seq,
        state.headroom,
        sorted(state.cordoned),
        state.ordering.name,
        state.placement.name,
        dict(state.legacy_protected),
        sorted(state.ended),
    )


@PROPERTY_SETTINGS
@given(scenarios())
def test_folding_the_journal_alone_rebuilds_the_live_state(scenario: dict[str, Any]) -> None:
    c = Runner(scenario).run()
    folded = State(c.name, config=SchedulerConfig(**scenario["config"]))
    for record in c.journal:
        evolve(folded, record)
    assert _live(folded) == _live(c.state)
    assert sorted(folded.seen_ids) == sorted(c.state.seen_ids)
