"""`evolve(state, event) -> state`: fold one accepted fact or decision into the state.

Only admitted inputs and the scheduler's own decisions reach here, so folding never
needs to validate; it stays total anyway (an unknown workload is ignored) because a
journal is replayed with this same function.
"""

from __future__ import annotations

import heapq
import math
from typing import Any

from domain import events as ev
from domain.config import parse_config
from domain.host_health import health_reported, returned_to_service
from domain.policies import resolve_ordering, resolve_placement
from domain.state import RUNNING, Host, State, Workload, head
from domain.tree import resolve_names


def evolve(state: State, event: Any) -> State:
    if event.type in ev.BOOKKEEPING_TYPES:  # about the transport, not the cluster
        return state
    if event.time > state.now:
        state.now = event.time
        state.expose_due()
        if state.held_down:
            _return_held_down(state)
    fold = _FOLDS.get(event.type)
    if fold is not None:
        fold(state, event)
        if event.type == "workload.submitted":
            state.fresh.append(event.workload)
        elif event.type != "workload.cancelled":  # _cancelled says itself
            state.version += 1
            if event.type in _SHAPE_CHANGES:
                state.shape_version += 1
    if event.type in ev.INPUT_TYPES:
        state.remember(state.seen_order, state.seen_ids, event.id)
        state.forget_old()
    else:  # decisions and rejections: the scheduler's own records, numbered
        state.seq += 1
    return state


_SHAPE_CHANGES = frozenset(
    {
        # a full cycle: a held holder's reservation goes, released work may preempt
        "workload.held",
        "workload.released",
        "workload.preempted",
        "budget.set",
        "budget.removed",
        "host.registered",
        "host.health",
        "host.removed",
        "config.set",
    }
)


def _submitted(state: State, e: ev.WorkloadSubmitted) -> None:
    w = Workload(
        id=e.workload,
        allocation=e.allocation,
        actor=e.actor,
        gpus=e.gpus,
        min_runtime=e.min_runtime,
        resumable=e.resumable,
        priority=e.priority,
        tags=tuple(e.tags),
        submit_time=e.time,
        expected_runtime=e.expected_runtime,
        name=e.name,
        one_host=bool(e.one_host),
    )
    state.workloads[w.id] = w
    state.enqueue(w)
    if state.tree.limited:
        state.count_user(w, 1, 0)


def _release(state: State, w: Workload, now: float) -> None:
    """Give a running workload's GPUs back and stop its accrual."""
    state.unexpose(w)
    for name, gpus in w.hosts.items():
        host = state.hosts.get(name)
        if host is None:
            continue
        # a GPU index the host no longer has (it shrank) is not given back
        host.free = sorted((*host.free, *(g for g in gpus if g < host.gpus)))
        host.workloads.pop(w.id, None)
        if host.free:  # (empty only when every GPU it held is gone)
            state.with_free[name] = None
        state.changed_hosts[name] = None
    ledger = state.charged if w.charged else state.unallocated
    ledger.change_rate(w.allocation, -w.held, now)
    if state.tree.limited:
        state.count_user(w, 0, -w.held if w.charged else 0)
    if math.isinf(w.protected_until):
        top = state.tree.top_level(w.allocation)
        state.legacy_protected[top] = state.legacy_protected.get(top, 0) - w.held
    w.hosts = {}
    w.held = 0


def _end(state: State, w: Workload) -> None:
    if w.state == RUNNING:
        _release(state, w, state.now)
    else:
        state.dequeue(w)
        if state.tree.limited:
            state.count_user(w, -1, 0)
    del state.workloads[w.id]
    state.remember(state.ended_order, state.ended, w.id)


def _cancelled(state: State, e: ev.WorkloadCancelled) -> None:
    w = state.workloads.get(e.workload)
    unblocks = w is None or not _inert_cancel(state, w)
    if w is not None:
        _end(state, w)
    if unblocks:
        state.version += 1


def _held(state: State, e: ev.WorkloadHeld) -> None:
    w = state.workloads[e.workload]
    w.on_hold = True
    state.dequeue(w)  # out of every bucket: no cycle sees it, no reservation is kept


def _released(state: State, e: ev.WorkloadReleased) -> None:
    w = state.workloads[e.workload]
    w.on_hold = False
    state.enqueue(w)  # its queue key keeps the submit time


def _inert_cancel(state: State, w: Workload) -> bool:
    """Can cancelling `w` not unblock anything? True for waiting work that holds no
    reservation and whose bucket successor could not backfill one (there is none, or
    `w` is not its bucket's head): no GPUs are freed and the ranking reads usage
    only, so the last cycle's outcome stands and the next cycle may stay quick
    (cancelling a job array of waiting work costs no full cycles)."""
    blocked = state.blocked
    if w.state == RUNNING or blocked is None:
        return False
    reservations = blocked.reservations
    if not reservations:
        return True
    if any(holder == w.id for holder, _ in reservations.values()):
        return False
    queue = state.queues.get(w.bucket) if w.bucket is not None else None
    return not queue or head(queue)[1] != w.id


def _placed(state: State, e: ev.WorkloadPlaced) -> None:
    w = state.workloads.get(e.workload)
    if w is None:
        return
    state.dequeue(w)
    state.victim_keys.pop(w.id, None)
    w.state = RUNNING
    w.attempt = e.attempt
    w.hosts = dict(e.hosts)
    w.held = 0
    for name, gpus in e.hosts.items():
        host = state.hosts[name]
        taken = set(gpus)
        host.free = [g for g in host.free if g not in taken]
        if not host.free:
            state.with_free.pop(name, None)
        host.workloads[w.id] = len(gpus)
        w.held += len(gpus)
    w.start = e.time
    w.charged = e.charged
    w.protected_until = math.inf if e.protected_until is None else e.protected_until
    if w.first_placed is None:
        w.first_placed = e.time
    ledger = state.charged if w.charged else state.unallocated
    ledger.change_rate(w.allocation, w.held, e.time)
    if state.tree.limited:
        state.count_user(w, -1, w.held if w.charged else 0)
    if math.isinf(w.protected_until):
        top = state.tree.top_level(w.allocation)
        state.legacy_protected[top] = state.legacy_protected.get(top, 0) + w.held
    elif w.protected_until > e.time:
        heapq.heappush(state.protection_ends, (w.protected_until, w.id, w.attempt))
    else:
        state.expose(w)


def _requeue_requested(state: State, e: ev.WorkloadRequeueRequested) -> None:
    # the cycle this input causes stops it (`decide`: a preemption, reason requested)
    state.requeue_asked[e.workload] = e.actor


def _preempted(state: State, e: ev.WorkloadPreempted) -> None:
    state.requeue_asked.pop(e.workload, None)
    if state.gpus_removed.pop(e.workload, None) is not None and e.requeued:
        w = state.workloads.get(e.workload)
        if w is not None and w.state == RUNNING:
            w.lost += 1  # as a lost attempt (max_lost_requeues)
    _stopped(state, e.workload, e.requeued, e.time)


def _finished(state: State, e: ev.WorkloadFinished) -> None:
    # requeued: a lost attempt of resumable work (admission decided)
    w = state.workloads.get(e.workload)
    if e.requeued and w is not None and w.state == RUNNING:
        w.lost += 1
    _stopped(state, e.workload, bool(e.requeued), e.time)
    if e.requeued:
        # as a requeued preemption: work back in a bucket, perhaps ahead of a
        # reservation's holder, which the last cycle's order cannot know (a full cycle)
        state.shape_version += 1


def _stopped(state: State, workload: str, requeued: bool, now: float) -> None:
    """A running attempt ended: the workload waits again (requeued) or is done."""
    w = state.workloads.get(workload)
    if w is None or w.state != RUNNING:
        return
    if requeued:
        _release(state, w, now)
        state.enqueue(w)
        if state.tree.limited:
            state.count_user(w, 1, 0)
    else:
        _end(state, w)


def _budget_set(state: State, e: ev.BudgetSet) -> None:
    managers, members = budget_lists(state, e)
    limits = {name: value for name in ev.USER_LIMITS if (value := getattr(e, name)) is not None}
    state.tree.set(e.allocation, e.weight, managers, members, limits)
    if limits:  # who is counted, and whose work waits in buckets per user, changed
        state.recount_users()
        state.requeue_all()


def budget_lists(
    state: State, e: ev.BudgetSet
) -> tuple[tuple[str, ...] | None, tuple[str, ...] | None]:
    """The managers and members `e` leaves (None: kept): named additions and removals
    apply to the lists as they are now, in journal order (admission writes the same
    result into the record; applying the changes to it again changes nothing)."""
    node = state.tree.nodes.get(e.allocation)
    managers, members = e.managers, e.members
    if e.changes_managers_by_name:
        current = node.managers if node is not None else ()
        managers = resolve_names(current, managers, e.add_managers, e.remove_managers).names
    if e.changes_members_by_name:
        current = node.members if node is not None else ()
        members = resolve_names(current, members, e.add_members, e.remove_members).names
    return managers, members


def _budget_removed(state: State, e: ev.BudgetRemoved) -> None:
    if e.allocation in state.tree:
        state.tree.remove(e.allocation)


def _host_registered(state: State, e: ev.HostRegistered) -> None:
    if e.host in state.hosts:
        _host_resized(state, state.hosts[e.host], e.gpus)
        return
    host = state.hosts[e.host] = Host(e.host, state.next_host_index, e.gpus, list(range(e.gpus)))
    state.next_host_index += 1
    state.with_free[e.host] = None
    state.capacity += e.gpus
    state.healthy_capacity += e.gpus
    state.count_host(host, 1)
    state.sizes_changed()


def _host_resized(state: State, host: Host, gpus: int) -> None:
    """A registered host's new GPU count: capacity follows; work holding an index the
    host no longer has is marked for the cycle to stop, as on a lost node."""
    change = gpus - host.gpus
    state.count_host(host, -1)
    host.gpus = gpus
    state.count_host(host, 1)
    host.free = [*(g for g in host.free if g < gpus), *range(gpus - change, gpus)]
    _mark_removed_gpus(state, host, lambda g: g >= gpus, gpus)
    if host.free:
        state.with_free.setdefault(host.name, None)
    else:
        state.with_free.pop(host.name, None)
    _host_capacity_changed(state, host, change)


def _host_removed(state: State, e: ev.HostRemoved) -> None:
    host = state.hosts.pop(e.host, None)
    if host is None:
        return
    _mark_removed_gpus(state, host, lambda g: True, 0)
    for where in (state.with_free, state.cordoned, state.changed_hosts, state.held_down):
        where.pop(e.host, None)
    state.count_host(host, -1)
    _host_capacity_changed(state, host, -host.gpus)


def _mark_removed_gpus(state: State, host: Host, gone: Any, registered: int) -> None:
    """Running work on `host` holding a GPU that is `gone`: the next cycle stops it
    (`decide`: preempted, reason gpus_removed; requeued as after a lost node)."""
    for wid in host.workloads:
        w = state.workloads[wid]
        lost = [g for g in w.hosts.get(host.name, ()) if gone(g)]
        if lost:
            state.gpus_removed[wid] = (host.name, lost, registered)


def _host_capacity_changed(state: State, host: Host, change: int) -> None:
    state.capacity += change
    if host.healthy:
        state.healthy_capacity += change
    state.sizes_changed()


def _host_health(state: State, e: ev.HostHealth) -> None:
    host = state.hosts.get(e.host)
    if host is None:
        return
    moved = health_reported(host, e.healthy, e.force, e.time, state.config.health_holddown)
    if host.held_until is None:
        state.held_down.pop(host.name, None)
    else:
        state.held_down[host.name] = host.held_until
    if moved is True:
        return_to_service(state, host, e.time)
    elif moved is False:
        _set_health(state, host, False)


def return_to_service(state: State, host: Host, now: float) -> None:
    """`host` takes work again (reported healthy, or its hold-down passed)."""
    state.held_down.pop(host.name, None)
    returned_to_service(host, now)
    _set_health(state, host, True)


def _set_health(state: State, host: Host, healthy: bool) -> None:
    state.count_host(host, -1)
    host.healthy = healthy
    state.count_host(host, 1)
    if healthy:
        host.drained = False
        state.cordoned.pop(host.name, None)
        state.healthy_capacity += host.gpus
    else:
        state.cordoned[host.name] = None
        state.healthy_capacity -= host.gpus
    state.sizes_changed()  # the biggest healthy host decides what is a gang


def _return_held_down(state: State) -> None:
    """Hosts whose flap hold-down passed by `now` return to service, as of its end."""
    due = [name for name, until in state.held_down.items() if until <= state.now]
    for name in due:
        host = state.hosts[name]
        return_to_service(state, host, state.held_down[name])
        state.changed_hosts[name] = None
    if due:  # a host change that no folded record stands for: a full cycle
        state.version += 1
        state.shape_version += 1


def _host_drained(state: State, e: ev.HostDrained) -> None:
    host = state.hosts.get(e.host)
    if host is not None:
        host.drained = True


def _config_set(state: State, e: ev.ConfigSet) -> None:
    old = state.config
    state.config = parse_config(e.config, recorded=True)
    state.placement = resolve_placement(state.config.placement)
    state.charged.reconfigure(state.config.window, state.config.bucket)
    state.unallocated.reconfigure(state.config.window, state.config.bucket)
    if state.config.ordering != old.ordering:
        state.ordering = resolve_ordering(state.config.ordering)
        state.requeue_all()
        _renew_lifelong_protection(state)
    elif (
        state.config.short_job_max_gpus != old.short_job_max_gpus
        or state.config.short_job_max_min_runtime != old.short_job_max_min_runtime
    ):
        state.requeue_all()
    state.recompute_headroom()


def _renew_lifelong_protection(state: State) -> None:
    """Running work the old policy protected until it ends (legacy-priority, within its
    cap) takes the new policy's terms as from its start: else a switch away from
    legacy-priority would leave it never time-sliced and never drained."""
    for w in state.workloads.values():
        if w.state != RUNNING or not math.isinf(w.protected_until):
            continue
        _, until = state.ordering.terms(state, w, w.charged, w.start)
        if math.isinf(until):
            continue  # the new policy protects it until it ends too
        top = state.tree.top_level(w.allocation)
        state.legacy_protected[top] = state.legacy_protected.get(top, 0) - w.held
        w.protected_until = until
        if until > state.now:
            heapq.heappush(state.protection_ends, (until, w.id, w.attempt))
        else:
            state.expose(w)


_FOLDS = {
    "workload.submitted": _submitted,
    "workload.cancelled": _cancelled,
    "workload.held": _held,
    "workload.released": _released,
    "workload.finished": _finished,
    "workload.requeue_requested": _requeue_requested,
    "workload.placed": _placed,
    "workload.preempted": _preempted,
    "budget.set": _budget_set,
    "budget.removed": _budget_removed,
    "host.registered": _host_registered,
    "host.health": _host_health,
    "host.drained": _host_drained,
    "host.removed": _host_removed,
    "config.set": _config_set,
}
