"""The v1 event contract (DESIGN §4) as frozen pydantic models.

Every record in the inbox and the journal is one of these. Models are flat and
frozen; unknown fields are ignored so newer writers don't break older readers.
Parsing from a plain ``dict`` lives here (pure); bytes live at the edges
(`streams.codec`). Old versions are upgraded by the upcasters in
`domain.upcasting` before validation.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    TypeAdapter,
    ValidationError,
)

from domain.text import one_line
from domain.upcasting import CURRENT_VERSION, upcast

SCHEDULER = "allot"


class Envelope(BaseModel):
    """Fields on every event."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    type: str
    v: int = 1
    id: str
    time: float
    cluster: str = "default"
    actor: str = SCHEDULER
    # id of the input whose processing produced this decision (decisions only)
    cause: str | None = None


# ---------------------------------------------------------------- inputs


def _whole(value: Any) -> Any:
    """2.0 is the count 2 (JSON has one number type; the inbox took it before strict
    types, so old inboxes still re-derive); anything else is left to the strict check."""
    if type(value) is float and value.is_integer():
        return int(value)
    return value


# an input's numbers and flags as JSON types, not coerced: `"gpus": true` was 1 GPU and
# `"min_runtime": "30"` 30 seconds (a float field still takes an integer, an integer
# field a whole float)
# a count fits a signed 64-bit integer: JSON writers (orjson among them) hold no more,
# and a 1e20 that became int would fail only when its record is written
Count = Annotated[int, BeforeValidator(_whole), Strict(), Field(ge=-(2**63), le=2**63 - 1)]
MAX_PRIORITY = 2**31 - 1  # a 32-bit column holds any priority (`allot submit` says the same)
Priority = Annotated[
    int, BeforeValidator(_whole), Strict(), Field(ge=-MAX_PRIORITY, le=MAX_PRIORITY)
]
Number = Annotated[float, Strict()]
Seconds = Number


MAX_REASON = 1000  # characters of a launcher's reason: a line, not a log


def _reason_line(value: Any) -> Any:
    return one_line(value, MAX_REASON) if isinstance(value, str) else value


def _bit(value: Any) -> Any:
    """0 and 1 are false and true (as JSON writers without booleans send them, and the
    inbox took before strict types); anything else is left to the strict check."""
    if type(value) is int and value in (0, 1):
        return bool(value)
    return value


Flag = Annotated[bool, BeforeValidator(_bit), Strict()]


class WorkloadSubmitted(Envelope):
    type: Literal["workload.submitted"] = "workload.submitted"
    workload: str
    allocation: str
    gpus: Count
    min_runtime: Seconds = 0.0
    resumable: Flag = False
    priority: Priority = 0
    tags: tuple[str, ...] = ()
    name: str | None = None
    # seconds of work the workload needs: read only by simulated executors
    runtime: Seconds | None = None
    # user's own estimate: ordering policies and reservations may use it
    expected_runtime: Seconds | None = None
    # true: all its GPUs on one host (NVLink), never a gang over smaller hosts; absent
    # (None, as in every journal written before it) or false: one host only when it fits
    # on the biggest healthy host, else whole hosts. None, not false, by default so
    # records without it are written (and replay) byte for byte as before.
    one_host: Flag | None = None


class WorkloadCancelled(Envelope):
    type: Literal["workload.cancelled"] = "workload.cancelled"
    workload: str


class WorkloadHeld(Envelope):
    """Pending work kept out of scheduling until released (scontrol hold)."""

    type: Literal["workload.held"] = "workload.held"
    workload: str


class WorkloadReleased(Envelope):
    """Held work back in the queue, with its original submit time (scontrol release)."""

    type: Literal["workload.released"] = "workload.released"
    workload: str


class WorkloadRequeueRequested(Envelope):
    """Stop a running workload and queue it again with its submit time (scontrol
    requeue): the scheduler answers at once with `workload.preempted`, reason
    `requested`, requeued even when not resumable (it then starts over).

    `attempt`, when given, is the attempt the sender saw running: a request about an
    attempt that has already stopped is rejected, as a late `workload.finished` is, so
    a request sent twice (or by two people) does not stop the attempt the first one
    started. Without it the request stops whatever attempt runs when it arrives (as
    every record written before the field existed does, so they re-derive as they
    were)."""

    type: Literal["workload.requeue_requested"] = "workload.requeue_requested"
    workload: str
    attempt: Count | None = None


class WorkloadFinished(Envelope):
    """The launcher's report that an attempt ended.

    A `lost` attempt (its node died) of resumable work is requeued, like a preemption:
    the scheduler sets `requeued` when it accepts the report (whatever the sender put
    there). Absent, as in every record written before it existed, the report ended the
    workload: a field added without changing what v1 records mean, so they stay v1 and
    journals written before re-derive byte for byte."""

    type: Literal["workload.finished"] = "workload.finished"
    workload: str
    outcome: Literal["completed", "failed", "lost"] = "completed"
    # True, or None (a sender's value is not taken, so never refused either)
    requeued: Annotated[bool | None, BeforeValidator(lambda v: True if v is True else None)] = None
    # lax, unlike the other counts: the previous release took "1" as attempt 1, and its
    # inboxes must re-derive as journaled (bounded as they are: nothing past 64 bits)
    attempt: Annotated[int, Field(ge=-(2**63), le=2**63 - 1)] | None = None
    # what the launcher saw: the process's exit status and a few words (OOM, Xid 79),
    # kept to one line (a stderr tail is not refused: the report must end the work)
    exit_code: Count | None = None
    reason: Annotated[str | None, BeforeValidator(_reason_line)] = None


class WorkloadUtilization(Envelope):
    """A launcher's reading of how busy a running attempt keeps its GPUs: the mean GPU
    utilization (0..1) over the `interval` seconds before the report, and optionally
    the mean fraction of GPU memory in use. Observability only: accepted into the
    journal as a fact (so idle, "squatted" GPUs show in `allot queue`, `allot idle`
    and the metrics) but never folded into the scheduler's state, and it causes no
    scheduling cycle, so decisions are the same with or without these reports."""

    type: Literal["workload.utilization"] = "workload.utilization"
    workload: str
    # the attempt it measured: a late report about an old attempt is rejected
    attempt: Count
    utilization: Annotated[float, Strict(), Field(ge=0.0, le=1.0)]
    memory: Annotated[float, Strict(), Field(ge=0.0, le=1.0)] | None = None
    interval: Annotated[float, Strict(), Field(gt=0.0, le=86400.0)] = 300.0


class BudgetSet(Envelope):
    """Create an allocation or change its weight, managers or members.

    `managers`/`members` replace a list; `add_*`/`remove_*` change the list the
    scheduler holds when it folds the record (sacctmgr add user), so two managers adding
    people at once both land, where a client's list built from its own read of the
    journal would drop the other's change. Given with the list itself, they apply after
    it. On accepting a change by add/remove the scheduler writes the resulting list in
    `managers`/`members` (their meaning unchanged: the list after the change, so readers
    that predate the add/remove fields see the right one) and, where a name changed
    nothing, `already_*` (asked to be added, was there) and `absent_*` (asked to be
    removed, was not); a sender's values of those are not taken. Records without the new
    fields (every one written before them) mean what they did: still v1."""

    type: Literal["budget.set"] = "budget.set"
    allocation: str
    # None: keep the current weight (a change of managers or members only, decided on
    # the scheduler's state rather than a client's possibly stale read of it)
    weight: Number | None = None
    managers: tuple[str, ...] | None = None
    members: tuple[str, ...] | None = None
    add_managers: tuple[str, ...] | None = None
    remove_managers: tuple[str, ...] | None = None
    add_members: tuple[str, ...] | None = None
    remove_members: tuple[str, ...] | None = None
    already_managers: tuple[str, ...] | None = None
    absent_managers: tuple[str, ...] | None = None
    already_members: tuple[str, ...] | None = None
    absent_members: tuple[str, ...] | None = None
    # per-user limits on the node's subtree (Slurm's QOS MaxTRESPerUser=gres/gpu and
    # MaxSubmitJobsPerUser): the GPUs one user's charged work may hold at once, and the
    # workloads one user may have waiting. None (absent, as in every record written
    # before them): the limit is kept as it is (none on a new node); CLEAR_LIMIT (-1,
    # sacctmgr's way) removes it
    max_gpus_per_user: Count | None = None
    max_pending_per_user: Count | None = None

    @property
    def changes_managers_by_name(self) -> bool:
        return self.add_managers is not None or self.remove_managers is not None

    @property
    def changes_members_by_name(self) -> bool:
        return self.add_members is not None or self.remove_members is not None


CLEAR_LIMIT = -1  # a per-user limit of -1 removes the limit (sacctmgr's MaxJobs=-1)
USER_LIMITS = ("max_gpus_per_user", "max_pending_per_user")


class BudgetRemoved(Envelope):
    type: Literal["budget.removed"] = "budget.removed"
    allocation: str


class HostRegistered(Envelope):
    type: Literal["host.registered"] = "host.registered"
    host: str
    gpus: Count


def _true_or_none(value: Any) -> Any:
    """An optional flag written only when true: false reads as absent."""
    return None if value is False else value


class HostHealth(Envelope):
    type: Literal["host.health"] = "host.health"
    host: str
    healthy: Flag
    reason: str = ""
    # an admin's override of the flap hold-down (`health_holddown`): the host is usable
    # at once. Written only when true, so every record without it keeps its v1 bytes
    force: Annotated[Annotated[bool, Strict()] | None, BeforeValidator(_true_or_none)] = None


class HostRemoved(Envelope):
    """A host leaves the cluster for good (decommissioned): its GPUs leave the capacity
    and the work on them stops as on a lost node (`workload.preempted`, reason
    `gpus_removed`). Its name may be registered again later, as a new host."""

    type: Literal["host.removed"] = "host.removed"
    host: str
    reason: str = ""


class ClockTick(Envelope):
    """Moves event time. A ticker's ticks say how often it ticks (`every`, seconds):
    the scheduler decides only at inputs, so a protection that ends between two ticks
    is acted on at the next one, and the forecast (`projections.forecast`) needs the
    cadence to foresee when. Absent on the simulator's ticks and older tickers'."""

    type: Literal["clock.tick"] = "clock.tick"
    every: Annotated[float, Strict(), Field(gt=0, allow_inf_nan=False)] | None = None


class ConfigSet(Envelope):
    """The scheduler's effective config; keys as in `domain.config.SchedulerConfig`."""

    type: Literal["config.set"] = "config.set"
    config: dict[str, Any]


# ------------------------------------------------------------- decisions


class WorkloadPlaced(Envelope):
    type: Literal["workload.placed"] = "workload.placed"
    workload: str
    allocation: str = ""
    gpus: int = 0
    hosts: dict[str, tuple[int, ...]]
    attempt: int = 1
    charged: bool
    # None: protected until it ends (legacy-priority's non-preemptible work)
    protected_until: float | None = None
    explain: dict[str, Any] = Field(default_factory=dict)


class WorkloadPreempted(Envelope):
    type: Literal["workload.preempted"] = "workload.preempted"
    workload: str
    attempt: int = 1
    # gpus_removed: the GPUs it ran on left the cluster (`host.removed`, or a
    # `host.registered` with fewer GPUs); stopped as on a lost node
    reason: Literal[
        "fair_share", "unallocated", "drain", "priority", "headroom", "requested", "gpus_removed"
    ]
    beneficiary: str | None = None
    requeued: bool
    explain: dict[str, Any] = Field(default_factory=dict)


class HostDrained(Envelope):
    type: Literal["host.drained"] = "host.drained"
    host: str


# ------------------------------------------------------------ bookkeeping


class JournalRestored(Envelope):
    """`allot journal restore` copied this cluster's journal into a new topic set.

    Written after the cluster's copied records (never by the scheduler, never taken
    from the inbox). The `inbox` positions of the records before it belong to the old
    deployment's inbox; the scheduler resumes the new inbox from its start, as if it had
    read none of it. Nothing else changes: folding it leaves the state as it was (no
    event time, no decision number), so the decisions that follow are the ones the old
    journal would have given. `time` is the cluster's last journal time; `restored_at`
    the wall clock of the restore."""

    type: Literal["journal.restored"] = "journal.restored"
    records: int  # this cluster's records copied before it
    # [partition, last offset] of the old inbox the copied records had read (an audit
    # of what the restore left behind; never read to resume)
    old_inbox: tuple[tuple[int, int], ...] = ()
    restored_at: float
    source: str | None = None  # the file restored (its name)


class _Rejected(Envelope):
    ref: str
    error: str
    # copied from the input when known, so the journal answers "what was rejected"
    workload: str | None = None
    allocation: str | None = None
    host: str | None = None
    input_type: str | None = None
    gpus: int | None = None  # a refused submission's (or host registration's) GPUs


class WorkloadRejected(_Rejected):
    type: Literal["workload.rejected"] = "workload.rejected"


class BudgetRejected(_Rejected):
    type: Literal["budget.rejected"] = "budget.rejected"


class HostRejected(_Rejected):
    type: Literal["host.rejected"] = "host.rejected"


class ClockRejected(_Rejected):
    type: Literal["clock.rejected"] = "clock.rejected"


class ConfigRejected(_Rejected):
    type: Literal["config.rejected"] = "config.rejected"


class InputRejected(_Rejected):
    type: Literal["input.rejected"] = "input.rejected"


Input = (
    WorkloadSubmitted
    | WorkloadCancelled
    | WorkloadHeld
    | WorkloadReleased
    | WorkloadRequeueRequested
    | WorkloadFinished
    | WorkloadUtilization
    | BudgetSet
    | BudgetRemoved
    | HostRegistered
    | HostHealth
    | HostRemoved
    | ClockTick
    | ConfigSet
)
Decision = WorkloadPlaced | WorkloadPreempted | HostDrained
Rejection = (
    WorkloadRejected
    | BudgetRejected
    | HostRejected
    | ClockRejected
    | ConfigRejected
    | InputRejected
)
# records that are neither inputs nor decisions: folded as nothing, re-derived past
Bookkeeping = JournalRestored
Event = Annotated[Input | Decision | Rejection | Bookkeeping, Field(discriminator="type")]

INPUT_TYPES: frozenset[str] = frozenset(
    m.model_fields["type"].default
    for m in Input.__args__  # type: ignore[attr-defined]
)
# the records after one of these read a new inbox (SchedulerCore.fold_journal)
INBOX_RESETS: frozenset[str] = frozenset({JournalRestored.model_fields["type"].default})
BOOKKEEPING_TYPES: frozenset[str] = INBOX_RESETS
# inputs that inform views only: accepted (or rejected) into the journal but never
# folded into the state and never the cause of a scheduling cycle
INFORMATIONAL_TYPES: frozenset[str] = frozenset({WorkloadUtilization.model_fields["type"].default})


def is_informational(record: Any) -> bool:
    """An informational input, or the rejection of one: it causes no cycle."""
    if record.type in INFORMATIONAL_TYPES:
        return True
    return isinstance(record, _Rejected) and record.input_type in INFORMATIONAL_TYPES


REJECTION_BY_NOUN: dict[str, type[_Rejected]] = {
    "workload": WorkloadRejected,
    "budget": BudgetRejected,
    "host": HostRejected,
    "clock": ClockRejected,
    "config": ConfigRejected,
}
_EVENT_ADAPTER: TypeAdapter[Any] = TypeAdapter(Event)
# an input type's own model validator: what the union would pick by `type`, without
# the union's dispatch (errors differ only by the tag leading their location)
_INPUT_VALIDATORS: dict[str, Any] = {
    m.model_fields["type"].default: m.__pydantic_validator__
    for m in Input.__args__  # type: ignore[attr-defined]
}


def rejection_for(raw_type: object, **fields: Any) -> _Rejected:
    """A `<noun>.rejected` for an input of `raw_type` (`input.rejected` if unknown)."""
    model: type[_Rejected] = InputRejected
    if isinstance(raw_type, str) and raw_type in INPUT_TYPES:
        model = REJECTION_BY_NOUN.get(raw_type.split(".", 1)[0], InputRejected)
    if isinstance(raw_type, str):
        fields.setdefault("input_type", raw_type[:100])
    return model(**fields)


def describe_validation_error(error: ValidationError) -> str:
    """One readable line per problem: `gpus: Input should be a valid integer (got 'x')`."""
    parts = []
    for item in error.errors()[:5]:
        loc = [str(p) for p in item["loc"]]
        if loc and "." in loc[0]:  # the discriminator's tag, e.g. "workload.submitted"
            loc = loc[1:]
        where = ".".join(loc) or "record"
        got = item.get("input")
        shown = _show(got, repr) if not isinstance(got, dict) else "an object"
        if len(shown) > 60:
            shown = shown[:57] + "..."
        parts.append(
            f"{where}: {item['msg']} (got {shown})"
            if item["type"] != "missing"
            else f"{where}: missing"
        )
    return "; ".join(parts)


def parse_event(raw: dict[str, Any]) -> Event:
    """Validate one already-upcast record; raises pydantic.ValidationError."""
    return _EVENT_ADAPTER.validate_python(raw)


def event_to_dict(event: Envelope) -> dict[str, Any]:
    """The wire form: plain JSON types, `None` optionals dropped to keep records small."""
    return event.model_dump(mode="json", exclude_none=True)


def _show(value: object, show: Any = str) -> str:
    """`show(value)`, or its type's name for a value that cannot be printed: JSON nested
    close to orjson's depth limit (1024) exceeds Python's recursion limit in str/repr."""
    try:
        return show(value)
    except (RecursionError, ValueError):
        return f"<unprintable {type(value).__name__}>"


def _clip(value: object, limit: int = 200) -> str | None:
    return None if value is None else _show(value)[:limit]


class _Unsupported(ValueError):
    pass


def parse_input(raw: dict[str, Any], now: float = 0.0) -> Event:
    """An inbox record as an event, or the `*.rejected` explaining why it is not one.

    Never raises: missing fields, wrong types and unknown `type`s become rejections
    (typed after the input's noun) carrying the record's id as `ref`.
    """
    try:
        record = upcast(dict(raw))
        validator = _INPUT_VALIDATORS.get(record.get("type"))
        if validator is None:
            ref = _clip(raw.get("id")) or "?"
            known = ", ".join(sorted(INPUT_TYPES))
            raise_type = record.get("type")
            return rejection_for(
                raise_type,
                id=f"{ref}/rejected",
                ref=ref,
                time=now,
                cluster=_clip(raw.get("cluster")) or "default",
                # who sent it, as claimed (without one it read as the scheduler's own)
                actor=_clip(raw.get("actor")) or "unknown",
                error=f"unknown input type {_clip(raise_type, 60)!r}; inputs are: {known}",
            )
        version = record.get("v", CURRENT_VERSION)
        if type(version) is not int or version != CURRENT_VERSION:  # older ones were
            # upcast: a newer writer, or junk (true, "1": not the version 1)
            raise _Unsupported(
                f"version {repr(version)[:20]} of {record.get('type')} is not one this "
                f"scheduler reads (v{CURRENT_VERSION}, and older ones upcast); upgrade allot "
                "or send v1"
            )
        return validator.validate_python(record)
    except _Unsupported as exc:
        error = str(exc)
    except ValidationError as exc:
        error = describe_validation_error(exc)
    except Exception as exc:  # a hostile record must never stop the worker
        error = f"unreadable record: {type(exc).__name__}"
    ref = _clip(raw.get("id")) or "?"  # here, not up front: accepted records never need it
    return rejection_for(
        raw.get("type"),
        id=f"{ref}/rejected",
        ref=ref,
        time=now,
        cluster=_clip(raw.get("cluster")) or "default",
        actor=_clip(raw.get("actor")) or "unknown",
        workload=_clip(raw.get("workload")),
        error=f"invalid {_clip(raw.get('type'), 60)}: {error}",
    )
