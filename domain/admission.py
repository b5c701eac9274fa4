"""Admission: validate and authorize one input against the state.

`admit` returns the input (stamped with a non-decreasing event time) when it is
accepted, or a `*.rejected` event whose `error` says what was wrong and how to fix
it. It never raises and never changes the state; `evolve` folds whatever it returns.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Sequence
from typing import Any

from domain import events as ev
from domain.config import ConfigError, parse_config
from domain.durations import format_duration
from domain.policies import UnknownPolicy, resolve_ordering, resolve_placement
from domain.state import RUNNING, State, Workload
from domain.text import HIDDEN_WHAT, HOST_NAME_RULE, is_host_name, is_word, plural, printable
from domain.tree import parent_of, resolve_names, valid_path

MAX_TIME = 253402300799.0  # 9999-12-31T23:59:59Z
MAX_HOST_GPUS = 1024  # far above any real host; keeps a typo from allocating millions
MAX_NAME = 256  # characters of an id, actor, workload or host name, tag or workload name
MAX_TAGS = 64
MAX_HINT_NAME = 256  # "did you mean" suggestions only between names up to this long
_DECISION_TYPES = frozenset({"workload.placed", "workload.preempted", "host.drained"})


class Rejected(Exception):
    """Raised inside admission checks; turned into a `*.rejected` event."""


def admit(state: State, event: Any) -> Any:
    """The accepted input (time stamped) or its rejection."""
    now = max(event.time, state.now) if math.isfinite(event.time) else state.now
    # no usable stamp (a fresh state and a non-finite claim, or a time so large that
    # GPU-milliseconds overflow): reject it, stamped with the last good time
    bad_time = not (math.isfinite(now) and abs(now) <= MAX_TIME)
    if bad_time:
        now = state.now if math.isfinite(state.now) else 0.0
    if isinstance(event, ev._Rejected):  # already rejected at the edge (bad bytes/fields)
        return event.model_copy(
            update={"id": state.next_id(), "time": now, "cluster": state.cluster}
        )
    try:
        if bad_time:
            raise Rejected(
                f"time {event.time!r} is not seconds since the Unix epoch (before year 10000); "
                "check the sender's clock"
            )
        if event.type in _DECISION_TYPES or event.type.endswith(".rejected"):
            raise Rejected(f"{event.type} is written only by the scheduler; send a request instead")
        _check_common(state, event)
        check = _CHECKS.get(event.type)
        if check is not None:
            check(state, event)
    except Rejected as why:
        return ev.rejection_for(
            event.type,
            id=state.next_id(),
            time=now,
            cluster=state.cluster,
            actor=_clipped(event.actor),
            ref=_clipped(event.id),
            error=str(why),
            workload=_clipped(getattr(event, "workload", None)),
            allocation=_clipped(getattr(event, "allocation", None)),
            host=_clipped(getattr(event, "host", None)),
            gpus=_copied_gpus(getattr(event, "gpus", None)),
        )
    if event.type == "workload.finished":
        return _stamp_finished(state, event, now)
    if event.type == "budget.set" and _names_anything(event):
        return _stamp_budget_set(state, event, now)
    return event if event.time == now else event.model_copy(update={"time": now})


def _names_anything(event: ev.BudgetSet) -> bool:
    """A change by names, or a record claiming what one resolved to (not taken)."""
    return (
        event.changes_managers_by_name
        or event.changes_members_by_name
        or any(
            getattr(event, f"{kind}_{which}") is not None
            for kind in ("already", "absent")
            for which in ("managers", "members")
        )
    )


def _stamp_finished(state: State, event: ev.WorkloadFinished, now: float) -> ev.WorkloadFinished:
    """The accepted report with the scheduler's `requeued`: resumable work whose node was
    lost waits again (with its submit time, as after a preemption; Slurm requeues on a
    node failure too), up to `max_lost_requeues` times; a sender's own `requeued` is not
    taken."""
    w = state.workloads[event.workload]
    requeue = event.outcome == "lost" and w.resumable and w.lost < state.config.max_lost_requeues
    requeued = True if requeue else None  # None: not written, as before the field existed
    if event.time == now and event.requeued is requeued:
        return event
    return event.model_copy(update={"time": now, "requeued": requeued})


def _some(names: Sequence[str], shown: int = 5) -> str:
    """`a, b, c and 7 more`: whom to ask, without journaling a list of thousands in every
    rejection that names them."""
    head = ", ".join(n[:MAX_NAME] for n in names[:shown])
    return head + (f" and {len(names) - shown:,} more" if len(names) > shown else "")


def _clipped(value: str | None) -> str | None:
    """A refused input's name as its rejection keeps it: the first MAX_NAME characters
    (a megabyte-long id is not journaled again in full)."""
    return value if value is None or len(value) <= MAX_NAME else value[:MAX_NAME]


def _check_length(what: str, value: str | None) -> None:
    if value is not None and len(value) > MAX_NAME:
        raise Rejected(f"{what} of {len(value):,} characters; at most {MAX_NAME}")


def _check_common(state: State, event: Any) -> None:
    # ids are remembered for the whole window (duplicates): their size is the memory's
    _check_length("id", event.id)
    _check_length("actor", event.actor)
    fields = event.__dict__  # a model's fields: a missing one costs no AttributeError
    for field in ("workload", "host"):
        _check_length(field, fields.get(field))
    if event.cluster != state.cluster:
        raise Rejected(
            f"sent to cluster {event.cluster!r} but this scheduler runs {state.cluster!r}; "
            "use --cluster to pick the right one"
        )
    if event.id in state.seen_ids:
        raise Rejected(
            f"duplicate id {event.id!r}: an input with this id was already accepted; "
            "every request needs a fresh id (a resend of the same request is ignored)"
        )
    if math.isfinite(state.now) and event.time < state.now - state.config.window:
        raise Rejected(_old_claim(state, event.time))


def _old_claim(state: State, claimed: float) -> str:
    return (
        f"claims time {claimed:.0f}, older than the {format_duration(state.config.window)} "
        "window; check the sender's clock"
    )


# weights are relative among siblings: a million to one is already 0.0001% of a share;
# beyond, shares underflow to 0 and fair-share ratios to numbers nobody can read
MAX_WEIGHT = 1e6


def _copied_gpus(gpus: Any) -> int | None:
    """The refused input's GPUs for its rejection, if a count anyone could mean (an
    absurd one is in the error text; a consumer's 32-bit column need not hold it)."""
    return gpus if isinstance(gpus, int) and 0 < gpus < 2**31 else None


def reject_old_claim(state: State, event: Any, stamped: float) -> Any:
    """The rejection of an input whose time claim is older than the window before its
    broker stamp, for when `admit` cannot tell (a fresh state has no clock yet; a
    lagging one would accept the claim as the event time)."""
    return ev.rejection_for(
        event.type,
        id=state.next_id(),
        time=stamped,
        cluster=state.cluster,
        actor=event.actor,
        ref=event.id,
        error=_old_claim(state, event.time),
        workload=getattr(event, "workload", None),
        allocation=getattr(event, "allocation", None),
        host=getattr(event, "host", None),
    )


def _require_admin(state: State, actor: str, what: str) -> None:
    if not state.is_admin(actor):
        raise Rejected(f"{actor!r} may not {what}; ask an admin ({_some(state.config.admins)})")


def _leaf(state: State, path: str) -> None:
    tree = state.tree
    if path not in tree:
        # difflib is quadratic: hint only between names of a sane length (a 300 kB
        # path near a 300 kB leaf took 14 s here, stalling the worker)
        close = (
            difflib.get_close_matches(
                path, [leaf for leaf in tree.leaves() if len(leaf) <= MAX_HINT_NAME], n=3
            )
            if len(path) <= MAX_HINT_NAME
            else []
        )
        hint = f"; did you mean {' or '.join(close)}?" if close else "; `allot shares` lists them"
        raise Rejected(f"unknown allocation {path!r}{hint}")
    node = tree.nodes[path]
    if not node.is_leaf:
        raise Rejected(
            f"{path!r} is not a leaf; submit to one of its children: {', '.join(node.children[:5])}"
        )


def _check_submitted(state: State, e: ev.WorkloadSubmitted) -> None:
    if not e.workload:
        raise Rejected("workload id is empty; the submit tool must generate one")
    if e.workload in state.workloads or e.workload in state.ended:
        raise Rejected(f"workload id {e.workload!r} is already in use; submit with a new id")
    _leaf(state, e.allocation)
    if not state.tree.may_submit(e.actor, e.allocation) and e.actor not in state.config.admins:
        raise Rejected(
            f"{e.actor!r} is not a member of {e.allocation!r}; ask one of its managers "
            f"({_some(sorted(state.tree.managers_above(e.allocation))) or 'an admin'}) to add you"
        )
    if e.gpus <= 0:
        raise Rejected(f"gpus must be at least 1, got {e.gpus}")
    if e.gpus > state.capacity:
        raise Rejected(_more_gpus_than_registered(state, e.gpus))
    if e.one_host and e.gpus > max(state.host_sizes, default=0):
        raise Rejected(_bigger_than_any_host(state, e.gpus))
    cap = state.config.max_min_runtime
    if not math.isfinite(e.min_runtime) or e.min_runtime < 0:
        raise Rejected(
            f"min_runtime must be between 0 and {format_duration(cap)}, got {e.min_runtime}"
        )
    if e.min_runtime > cap:
        raise Rejected(
            f"min_runtime {format_duration(e.min_runtime)} exceeds the cap "
            f"{format_duration(cap)} (max_min_runtime); ask for at most {format_duration(cap)} "
            "and make longer work resumable"
        )
    if e.name is not None and not printable(e.name):
        raise Rejected(f"name {e.name!r} has {HIDDEN_WHAT}; drop them")
    _check_length("name", e.name)
    if len(e.tags) > MAX_TAGS:
        raise Rejected(f"{len(e.tags):,} tags; at most {MAX_TAGS}")
    for tag in e.tags:
        _check_length("a tag", tag)
        if not printable(tag):
            raise Rejected(f"tag {tag!r} has {HIDDEN_WHAT}; drop them")
    for name, value in (("runtime", e.runtime), ("expected_runtime", e.expected_runtime)):
        if value is not None and (not math.isfinite(value) or value < 0):
            raise Rejected(f"{name} must be a duration >= 0, got {value}")
    if state.tree.limited:
        _check_user_limits(state, e)


def _check_user_limits(state: State, e: ev.WorkloadSubmitted) -> None:
    """Per-user limits on the nodes above the leaf (Slurm's QOS limits): a user with
    max_pending_per_user workloads waiting under a node submits no more there
    (QOSMaxSubmitJobPerUserLimit); allocated work asking more GPUs than a node's
    max_gpus_per_user could never start."""
    for node in state.tree.limits_of(e.allocation):
        pending, _ = state.user_counts(node.path, e.actor)
        cap = node.max_pending_per_user
        if cap is not None and pending >= cap:
            raise Rejected(
                f"{e.actor!r} has {plural(pending, 'pending workload')} under {node.path!r}, "
                f"its limit per user (max_pending_per_user {cap}, as Slurm's "
                "QOSMaxSubmitJobPerUserLimit); wait for some to start, or cancel some "
                f"(`allot queue -u {e.actor} -t pending`)"
            )
        cap = node.max_gpus_per_user
        if cap is not None and e.min_runtime > 0 and e.gpus > cap:
            raise Rejected(
                f"asks for {_gpus(e.gpus)} but {node.path!r} lets each user's allocated work "
                f"hold at most {_gpus(cap)} at once (max_gpus_per_user); submit with at most "
                f"{cap}, or with min runtime 0 to run unallocated (not limited)"
            )


def _gpus(n: int) -> str:
    """`1 GPU`, `8 GPUs`; without thousands separators: a refused count is quoted as sent."""
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def _more_gpus_than_registered(state: State, gpus: int) -> str:
    """The rejection of work larger than the cluster, with what to do next. Its first
    clause is the one journals written before the hint hold (replay reads rejections,
    it does not compare their texts)."""
    admins = _some(state.config.admins)
    admin = f"an admin ({admins})" if admins else "an admin"
    said = f"asks for {_gpus(gpus)} but cluster {state.cluster!r} has {state.capacity} registered"
    if not state.capacity:
        return f"{said}; ask {admin} to register hosts (`allot host register`)"
    return f"{said}; submit with at most {_gpus(state.capacity)}, or ask {admin} to register more hosts"


def _bigger_than_any_host(state: State, gpus: int) -> str:
    """The rejection of work asked on one host that no registered host could hold: it
    would wait forever (healthy or not, the biggest host is the most it can have)."""
    biggest = max(state.host_sizes)
    return (
        f"asks for {gpus} GPUs on one host (one_host) but the biggest host of cluster "
        f"{state.cluster!r} has {biggest}; submit with at most {biggest} GPUs, or without "
        "one_host to run on whole hosts"
    )


def _live(state: State, workload_id: str, verb: str = "cancel") -> Any:
    w = state.workloads.get(workload_id)
    if w is None:
        if workload_id in state.ended:
            raise Rejected(f"workload {workload_id!r} has already ended")
        if any(f"{workload_id}_{i}" in state.workloads for i in (0, 1)):  # cheap probe
            raise Rejected(
                f"unknown workload {workload_id!r}; it names a job array: {verb} its tasks "
                f"as '{workload_id}_[SPEC]', e.g. '{workload_id}_[0-15]' "
                f"(`allot queue -j {workload_id}` lists them)"
            )
        raise Rejected(f"unknown workload {workload_id!r}; `allot queue` lists live ones")
    return w


def _owned(state: State, e: Any, verb: str) -> Workload:
    """The live workload `e` is about, if its actor may `verb` it: its submitter, the
    managers of its allocation (or above) and admins may."""
    w = _live(state, e.workload, verb)
    if e.actor != w.actor and not _may_act_under(state, e.actor, w.allocation):
        raise Rejected(
            f"{e.actor!r} may not {verb} {e.workload!r}: only its submitter {w.actor!r}, "
            "managers of its allocation or an admin may"
        )
    return w


def _check_cancelled(state: State, e: ev.WorkloadCancelled) -> None:
    _owned(state, e, "cancel")


def _check_held(state: State, e: ev.WorkloadHeld) -> None:
    w = _owned(state, e, "hold")
    if w.state == RUNNING:
        raise Rejected(
            f"workload {e.workload!r} is running; only pending work can be held (cancel it, "
            "or submit it again later)"
        )
    if w.on_hold:
        raise Rejected(f"workload {e.workload!r} is held already; `allot release` lets it run")


def _check_released(state: State, e: ev.WorkloadReleased) -> None:
    w = _owned(state, e, "release")
    if not w.on_hold:
        raise Rejected(f"workload {e.workload!r} is not held; nothing to release")


def _check_requeue_requested(state: State, e: ev.WorkloadRequeueRequested) -> None:
    """A request naming the attempt its sender saw (`allot requeue` does) is about that
    attempt only: once it has stopped, a second request for it (sent before the first
    was answered, in one inbox batch or not) is stale, not a request to stop the next
    attempt too. That is the contract's rule for attempts (a late report about an old
    attempt is rejected instead of ending the new one), applied to requests."""
    w = _owned(state, e, "requeue")
    if e.attempt is not None and e.attempt < 1:
        raise Rejected(f"attempt {e.attempt}: attempts count from 1 (`allot why` lists them)")
    if w.state != RUNNING:
        waits = "held" if w.on_hold else "waiting in the queue"
        if e.attempt is not None and e.attempt <= w.attempt:  # (the attempt it last ran)
            raise Rejected(
                f"attempt {e.attempt} of {e.workload!r} has stopped already and it is "
                f"{waits}; nothing to requeue"
            )
        raise Rejected(f"workload {e.workload!r} is {waits}, not running; nothing to requeue")
    if e.attempt is not None and e.attempt < w.attempt:
        raise Rejected(
            f"request is about attempt {e.attempt} but {e.workload!r} is on attempt "
            f"{w.attempt}: attempt {e.attempt} has stopped already (requeued or preempted); "
            f"stale request ignored (requeue it again to stop attempt {w.attempt})"
        )
    if e.attempt is not None and e.attempt > w.attempt:
        raise Rejected(
            f"request is about attempt {e.attempt} but {e.workload!r} is on attempt "
            f"{w.attempt}; no such attempt yet"
        )


def _check_finished(state: State, e: ev.WorkloadFinished) -> None:
    w = _live(state, e.workload)
    if w.state != RUNNING:
        raise Rejected(f"workload {e.workload!r} is {w.state}, not running; nothing to finish")
    if e.attempt is not None and e.attempt != w.attempt:
        raise Rejected(
            f"report is about attempt {e.attempt} but {e.workload!r} is on attempt {w.attempt}; "
            "stale report ignored"
        )


def _check_utilization(state: State, e: ev.WorkloadUtilization) -> None:
    """A launcher's reading, accepted from any actor as `workload.finished` is, about
    the attempt running now only: a late reading of an old attempt would make the new
    one look idle (or busy)."""
    w = _live(state, e.workload, "report on")
    if w.state != RUNNING:
        raise Rejected(f"workload {e.workload!r} is {w.state}, not running; nothing to measure")
    if e.attempt != w.attempt:
        raise Rejected(
            f"report is about attempt {e.attempt} but {e.workload!r} is on attempt {w.attempt}; "
            "stale report ignored"
        )


def _check_budget_target(state: State, path: str, actor: str) -> None:
    if not valid_path(path):
        raise Rejected(
            f"invalid allocation path {path!r}: use names separated by '/', without spaces "
            "or control characters, e.g. lab/olmo"
        )
    parent = parent_of(path)
    if parent is None:
        _require_admin(state, actor, f"change top-level allocation {path!r}")
        return
    if parent not in state.tree:
        raise Rejected(f"parent {parent!r} does not exist; create it first")
    if not _may_act_under(state, actor, parent):
        managers = _some(sorted(state.tree.managers_above(parent))) or "an admin"
        raise Rejected(f"{actor!r} is not a manager of {parent!r}; ask {managers}")


def _may_act_under(state: State, actor: str, path: str) -> bool:
    """Managers of `path` or an ancestor, and admins; anyone while nobody claimed it."""
    managers = state.tree.managers_above(path)
    if actor in managers or actor in state.config.admins:
        return True
    return not managers and not state.config.admins


def _check_budget_set(state: State, e: ev.BudgetSet) -> None:
    _check_budget_target(state, e.allocation, e.actor)
    _check_named_changes(e.add_managers, e.remove_managers, "managers")
    _check_named_changes(e.add_members, e.remove_members, "members")
    for name in ev.USER_LIMITS:
        value = getattr(e, name)
        if value is not None and value != ev.CLEAR_LIMIT and not 1 <= value <= 2**31 - 1:
            raise Rejected(
                f"{name} must be at least 1 (or {ev.CLEAR_LIMIT} to remove the limit), got {value}"
            )
    if e.weight is None:
        if e.allocation not in state.tree:
            raise Rejected(f"{e.allocation!r} does not exist yet: give its weight to create it")
        return
    if not math.isfinite(e.weight) or not 0 <= e.weight <= MAX_WEIGHT:
        raise Rejected(f"weight must be a number from 0 to {MAX_WEIGHT:g}, got {e.weight:g}")
    parent = parent_of(e.allocation)
    if e.allocation not in state.tree and parent is not None and state.tree.nodes[parent].is_leaf:
        live = sum(1 for w in state.workloads.values() if w.allocation == parent)
        if live:
            raise Rejected(
                f"{parent!r} has {plural(live, 'live workload')}; a node with children takes no work — "
                f"{_let_finish(live)}"
            )


def _let_finish(live: int) -> str:
    them = "it" if live == 1 else "them"
    return f"let {them} finish or cancel {them} first"


def _check_named_changes(
    add: tuple[str, ...] | None, remove: tuple[str, ...] | None, which: str
) -> None:
    """Names to add to or remove from a list: one user name each, and none both added
    and removed (which one was meant?)."""
    for field, names in ((f"add_{which}", add), (f"remove_{which}", remove)):
        for name in names or ():
            _check_length(f"a name in {field}", name)
            if not is_word(name) or "," in name:
                raise Rejected(
                    f"{field}: {name!r} is not a user name (one name each, without spaces, "
                    "commas or control characters)"
                )
    both = sorted(set(add or ()) & set(remove or ()))
    if both:
        raise Rejected(
            f"{_some(both)} both added to and removed from the {which}; give one or the other"
        )


def _stamp_budget_set(state: State, event: ev.BudgetSet, now: float) -> ev.BudgetSet:
    """The accepted change by names with what it resolved to on the scheduler's lists as
    they are now (journal order): the resulting `managers`/`members`, and the names that
    changed nothing (`already_*`, `absent_*`); a sender's values of those are not taken."""
    node = state.tree.nodes.get(event.allocation)
    update: dict[str, Any] = {"time": now}
    for which, add, remove in (
        ("managers", event.add_managers, event.remove_managers),
        ("members", event.add_members, event.remove_members),
    ):
        if add is None and remove is None:
            update[f"already_{which}"] = update[f"absent_{which}"] = None
            continue
        current = getattr(node, which) if node is not None else ()
        resolved = resolve_names(current, getattr(event, which), add, remove)
        update[which] = resolved.names
        update[f"already_{which}"] = resolved.already or None
        update[f"absent_{which}"] = resolved.absent or None
    return event.model_copy(update=update)


def _check_budget_removed(state: State, e: ev.BudgetRemoved) -> None:
    if e.allocation not in state.tree:
        raise Rejected(f"unknown allocation {e.allocation!r}")
    _check_budget_target(state, e.allocation, e.actor)
    node = state.tree.nodes[e.allocation]
    if node.children:
        raise Rejected(
            f"{e.allocation!r} has children ({', '.join(node.children[:5])}); remove them first"
        )
    live = sum(1 for w in state.workloads.values() if w.allocation == e.allocation)
    if live:
        raise Rejected(f"{e.allocation!r} has {plural(live, 'live workload')}; {_let_finish(live)}")


def _check_host_registered(state: State, e: ev.HostRegistered) -> None:
    _require_admin(state, e.actor, "register hosts")
    if not e.host:
        raise Rejected("host name is empty")
    if not is_host_name(e.host):
        raise Rejected(f"host name {e.host!r} is not {HOST_NAME_RULE} (they write host lists)")
    if e.gpus <= 0 or e.gpus > MAX_HOST_GPUS:
        raise Rejected(f"a host has 1 to {MAX_HOST_GPUS} GPUs, got {e.gpus}")
    if e.host in state.hosts and e.gpus == state.hosts[e.host].gpus:
        raise Rejected(f"host {e.host!r} is already registered with {_gpus(e.gpus)}: nothing to do")
    # another count is the host's new size (a board replaced, a GPU pulled): capacity
    # follows, and work on a GPU index that no longer exists stops as on a lost node


def _check_host_health(state: State, e: ev.HostHealth) -> None:
    _require_admin(state, e.actor, "report host health")
    if e.host not in state.hosts:
        raise Rejected(f"unknown host {e.host!r}; register it first (`allot host register`)")
    if e.force and not e.healthy:
        raise Rejected(
            "force overrides the flap hold-down of a host reported healthy; "
            "send it with healthy true, or leave it out"
        )


def _check_host_removed(state: State, e: ev.HostRemoved) -> None:
    _require_admin(state, e.actor, "remove hosts")
    if e.host not in state.hosts:
        raise Rejected(f"unknown host {e.host!r}; `allot host list` lists registered hosts")
    if not printable(e.reason):
        raise Rejected(f"reason {e.reason!r} has {HIDDEN_WHAT}; drop them")
    _check_length("reason", e.reason)


def _check_config(state: State, e: ev.ConfigSet) -> None:
    _require_admin(state, e.actor, "change the scheduler config")
    try:
        config = parse_config(e.config)
        resolve_ordering(config.ordering)
        resolve_placement(config.placement)
    except (ConfigError, UnknownPolicy) as why:
        raise Rejected(str(why)) from None
    except Exception as why:  # e.g. {"window": null}: a validator that is not pydantic's
        raise Rejected(
            f"unreadable config ({type(why).__name__}: {str(why)[:100]}); durations are "
            "seconds or text like 30s, 15m, 8h, 7d"
        ) from None


_CHECKS = {
    "workload.submitted": _check_submitted,
    "workload.cancelled": _check_cancelled,
    "workload.held": _check_held,
    "workload.released": _check_released,
    "workload.requeue_requested": _check_requeue_requested,
    "workload.finished": _check_finished,
    "workload.utilization": _check_utilization,
    "budget.set": _check_budget_set,
    "budget.removed": _check_budget_removed,
    "host.registered": _check_host_registered,
    "host.health": _check_host_health,
    "host.removed": _check_host_removed,
    "config.set": _check_config,
}
