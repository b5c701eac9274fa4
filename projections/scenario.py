"""Scenario files: the YAML a simulation runs, turned into the inputs the core folds.

```python
sc = load_scenario(Path("examples/lab.yaml"), overrides={"window": "3d"})
sc.setup_events()   # host.registered (h0..h{n-1}, or per host group), then budget.set, at sc.start
sc.timed_inputs()   # workload.submitted and host.health, sorted by (time, file order)
```

The file is validated with pydantic (`extra="forbid"` everywhere); any problem raises
`ScenarioError` whose message names the file and the key path, e.g.
`lab.yaml: workloads[2].generate.rate_per_h: Input should be greater than 0`.

Memory stays modest for million-workload scenarios: traces are read once into the
trace reader's list of submission dicts (the only per-workload list kept), and
events are built lazily while `timed_inputs()` merges the already-sorted sources.
"""

from __future__ import annotations

import difflib
import heapq
import math
import re
import types
import typing
from collections.abc import Hashable, Iterable, Iterator
from datetime import UTC, date, datetime
from operator import attrgetter
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PositiveInt,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from domain.admission import MAX_HOST_GPUS
from domain.config import SchedulerConfig
from domain.durations import format_duration, parse_utc
from domain.events import (
    MAX_PRIORITY,
    BudgetSet,
    HostHealth,
    HostRegistered,
    WorkloadSubmitted,
)
from domain.tree import ancestors, parent_of, valid_path
from projections.generate import Duration, GenerateSpec, samples

DEFAULT_START = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
DEFAULT_MIN_RUNTIME = 900.0
SCENARIO_ACTOR = "scenario"
FALLBACK_USER = "sim"
TRACE_FORMATS = ("allot-csv", "philly", "alibaba-openb", "allot-jsonl")

_GENERATED_ID = re.compile(r"^\d+-\d{6,}$")


class ScenarioError(ValueError):
    """A scenario that cannot be run; the message names the file and the key path."""


# ---------------------------------------------------------------- schema


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


MAX_HOSTS = 100_000  # a simulated cluster; beyond, memory runs out before an answer
MAX_HORIZON_S = 3650 * 86400.0  # ten years of simulated time


DEFAULT_HOST_PREFIX = "h"
# not ending in a digit, so a name splits back into prefix and number and no two
# groups' names can meet (prefix `h` and `h1` would both name `h10`)
_HOST_PREFIX = re.compile(r"[A-Za-z](?:[A-Za-z0-9_-]{0,30}[A-Za-z_-])?")


class HostGroup(_Strict):
    """`count` hosts of `gpus` GPUs each, named `<prefix><n>`; n counts on across the
    groups of one prefix, in file order."""

    count: PositiveInt = Field(le=MAX_HOSTS)
    gpus: PositiveInt = Field(le=MAX_HOST_GPUS)
    prefix: str = DEFAULT_HOST_PREFIX

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        if not _HOST_PREFIX.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a host name prefix: a letter, then up to 31 letters, digits,"
                " '-' or '_', not ending in a digit (hosts are named <prefix>0, <prefix>1, ...)"
            )
        return value


# pydantic names the branch of a tagged union in an error's location; _describe leaves
# these out, so a user reads `cluster.hosts[1].gpus`, the keys of the file
_COUNT_TAG = "<count>"
_GROUPS_TAG = "<groups>"
_UNION_TAGS = frozenset({_COUNT_TAG, _GROUPS_TAG})


def _hosts_shape(value: Any) -> str | None:
    if isinstance(value, list):
        return _GROUPS_TAG
    if isinstance(value, int | str):  # a str is judged (and refused) as a count
        return _COUNT_TAG
    return None


HostsField = Annotated[
    Annotated[PositiveInt, Field(le=MAX_HOSTS), Tag(_COUNT_TAG)]
    | Annotated[list[HostGroup], Field(min_length=1), Tag(_GROUPS_TAG)],
    Discriminator(
        _hosts_shape,
        custom_error_type="hosts_shape",
        custom_error_message=(
            "a number of hosts (each of gpus_per_host GPUs) or a list of host"
            " groups, e.g. [{count: 96, gpus: 8}, {count: 32, gpus: 4, prefix: ws}]"
        ),
    ),
]


class ClusterSpec(_Strict):
    name: str = Field(min_length=1)
    hosts: HostsField
    gpus_per_host: PositiveInt = Field(8, le=MAX_HOST_GPUS)  # with a number of hosts only

    @field_validator("hosts")
    @classmethod
    def _not_too_many(cls, value: int | list[HostGroup]) -> int | list[HostGroup]:
        if isinstance(value, list):
            total = sum(group.count for group in value)
            if total > MAX_HOSTS:
                raise ValueError(f"the host groups hold {total} hosts, more than {MAX_HOSTS}")
        return value

    @field_validator("gpus_per_host")  # only when given: defaults are not validated
    @classmethod
    def _with_a_count(cls, value: int, info: ValidationInfo) -> int:
        if isinstance(info.data.get("hosts"), list):
            raise ValueError(
                "gpus_per_host goes with a number of hosts; with host groups each group"
                " gives its own gpus"
            )
        return value

    def groups(self) -> list[HostGroup]:
        """The hosts as groups: a number of hosts is one group of `h` hosts."""
        if isinstance(self.hosts, list):
            return list(self.hosts)
        return [HostGroup(count=self.hosts, gpus=self.gpus_per_host)]


class AllocationSpec(_Strict):
    path: str
    weight: float = Field(1.0, ge=0)
    managers: list[str] = Field(default_factory=list)
    members: list[str] = Field(default_factory=list)
    # per-user limits over its subtree (`allot budget set --max-gpus-per-user`); absent:
    # none (and the setup records keep the bytes they had before the keys existed)
    max_gpus_per_user: int | None = Field(None, ge=1, le=2**31 - 1)
    max_pending_per_user: int | None = Field(None, ge=1, le=2**31 - 1)

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not valid_path(value):
            raise ValueError(
                f"{value!r} is not an allocation path"
                " (names separated by '/', e.g. lab/olmo/pretrain)"
            )
        return value


class HealthSpec(_Strict):
    at: Duration
    host: int | str
    healthy: bool = False
    reason: str = ""
    # the host dies with its work: the simulated launcher reports every attempt running
    # there `lost` (resumable work is requeued); without it the host drains gracefully
    lost: bool = False

    @model_validator(mode="after")
    def _lost_when_failing(self) -> HealthSpec:
        if self.lost and self.healthy:
            raise ValueError("lost: true is for a host that fails (healthy: false)")
        return self


class TraceSpec(_Strict):
    """A trace file: paths are relative to the scenario file."""

    file: str = Field(min_length=1)
    format: Literal["allot-csv", "philly", "alibaba-openb", "allot-jsonl"]
    # defaults for rows that do not say
    min_runtime: Duration | None = None
    resumable: bool | None = None
    priority: int | None = Field(None, ge=-MAX_PRIORITY, le=MAX_PRIORITY)  # as a row's
    tags: list[str] = Field(default_factory=list)  # added to every row's tags
    allocation_prefix: str = ""
    allocation_map: str | None = None
    offset: Duration = 0.0  # shift: trace time 0 happens this long after the scenario start
    skip_bad: bool = False
    expected_runtime: bool = False  # copy each row's runtime into expected_runtime
    timezone: str | None = None  # philly: the IANA zone of its naive timestamps (default UTC)


class WorkloadEntry(_Strict):
    trace: TraceSpec | None = None
    generate: GenerateSpec | None = None

    @model_validator(mode="after")
    def _one(self) -> WorkloadEntry:
        if (self.trace is None) == (self.generate is None):
            raise ValueError("each workloads entry needs exactly one of trace or generate")
        return self


class ScenarioSpec(_Strict):
    name: str | None = Field(None, min_length=1)
    description: str = ""
    cluster: ClusterSpec
    allocations: list[AllocationSpec] = Field(default_factory=list)
    config: dict[str, Any] = Field(default_factory=dict)
    start: float = DEFAULT_START
    horizon: Duration | None = None
    health: list[HealthSpec] = Field(default_factory=list)
    workloads: list[WorkloadEntry] = Field(default_factory=list)

    @field_validator("start", mode="before")
    @classmethod
    def _start(cls, value: Any) -> float:
        return _epoch(value)

    @field_validator("horizon")
    @classmethod
    def _horizon(cls, value: float | None) -> float | None:
        if value is not None and value <= 0:
            raise ValueError("horizon must be > 0")
        if value is not None and value > MAX_HORIZON_S:
            # idle simulated time still wakes at every usage bucket edge: a horizon of
            # centuries ran for ever, its memory growing
            raise ValueError(f"horizon must be at most {MAX_HORIZON_S / 86400:.0f}d (ten years)")
        return value


def _epoch(value: Any) -> float:
    """Seconds since the epoch from a YAML timestamp, an ISO string or a number, in
    the years 1970 to 9999 (the journal's times, DESIGN §4)."""
    seconds = _epoch_any(value)
    from domain.admission import MAX_TIME

    if not (math.isfinite(seconds) and 0 <= seconds <= MAX_TIME):
        raise ValueError(f"{value!r} is out of range (a time from 1970 to 9999)")
    return seconds


def _epoch_any(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError(f"not a time: {value!r}")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return parse_utc(value)
        except ValueError:
            raise ValueError(
                f"not a time: {value!r} (use ISO 8601, e.g. 2026-01-01T00:00:00Z)"
            ) from None
    if isinstance(value, date) and not isinstance(value, datetime):
        value = datetime(value.year, value.month, value.day)
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.timestamp()
    raise ValueError(f"not a time: {value!r} (use ISO 8601, e.g. 2026-01-01T00:00:00Z)")


# ---------------------------------------------------------------- errors


def _where(loc: Iterable[Any]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _model_at(loc: tuple[Any, ...], root: type[BaseModel]) -> type[BaseModel] | None:
    """The model class whose field set the key at `loc` belongs to (for "unknown key")."""
    current: Any = root
    for part in loc[:-1]:
        current = _unwrap(current)
        if isinstance(part, int):
            continue
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(part)
            if field is None:
                return None
            current = field.annotation
        else:
            return None
    current = _unwrap(current)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _unwrap(annotation: Any) -> Any:
    """Strip Optional, list[...] and Annotated down to a model class when there is one."""
    for _ in range(5):
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            # the branch that holds keys (int | list[HostGroup]: HostGroup)
            models = [a for a in typing.get_args(annotation) if _is_model(_unwrap(a))]
            if not models:
                return annotation
            annotation = models[0]
        elif origin in (list, tuple):
            annotation = typing.get_args(annotation)[0]
        else:
            return annotation
    return annotation


# --set keys the simulated launcher reads, not the scheduler (projections.simulate)
ENGINE_KEYS = ("checkpoint_loss",)


def check_override_keys(overrides: dict[str, Any]) -> None:
    """Refuse `--set` keys that are no config key, as `allot simulate` does (a replay's
    own check said "unknown config key", without naming --set or the key meant)."""
    known = [*ENGINE_KEYS, *SchedulerConfig.model_fields]
    for key in overrides:
        if key in known:
            continue
        hint = difflib.get_close_matches(key, known, n=1)
        meant = f" (did you mean {hint[0]!r}?)" if hint else ""
        raise ScenarioError(
            f"--set: {key}: unknown key {key!r}{meant}; known keys: {', '.join(known)}"
        )
    config = {k: v for k, v in overrides.items() if k not in ENGINE_KEYS}
    try:
        SchedulerConfig.model_validate(config)
    except ValidationError as exc:
        # a value wrong whatever the journal's config holds (a bad duration), in
        # simulate's words; one that clashes with another key is judged with the
        # journal's config, later
        if any(item["loc"] and item["loc"][0] in config for item in exc.errors()):
            raise ScenarioError(
                _describe("--set", exc, root=SchedulerConfig, also_known=ENGINE_KEYS)
            ) from None


def _describe(
    source: str,
    error: ValidationError,
    *,
    root: type[BaseModel] = ScenarioSpec,
    prefix: tuple[Any, ...] = (),
    also_known: tuple[str, ...] = (),
) -> str:
    """One line per problem: `lab.yaml: workloads[2].generate.rate_per_h: <what is wrong>`."""
    lines = []
    for item in error.errors()[:8]:
        loc = tuple(part for part in item["loc"] if part not in _UNION_TAGS)
        where = _where(prefix + loc) or ("config" if root is SchedulerConfig else "scenario")
        if item["type"] == "extra_forbidden":
            key = str(loc[-1]) if loc else "?"
            model = _model_at(loc, root)
            known = [*also_known, *model.model_fields] if model else []
            hint = difflib.get_close_matches(key, known, n=1)
            msg = f"unknown key {key!r}"
            if hint:
                msg += f" (did you mean {hint[0]!r}?)"
            if known:
                msg += f"; known keys: {', '.join(known)}"
        elif item["type"] == "missing":
            msg = "missing (required)"
        else:
            msg = item["msg"]
            if msg.startswith(("Value error, ", "Assertion failed, ")):
                msg = msg.split(", ", 1)[1]
            got = item.get("input")
            if not isinstance(got, dict | list) and item["type"] not in ("value_error",):
                shown = repr(got)
                msg += f" (got {shown[:57] + '...' if len(shown) > 60 else shown})"
        lines.append(f"{source}: {where}: {msg}")
    extra = len(error.errors()) - 8
    if extra > 0:
        lines.append(f"{source}: ... and {extra} more problem{'' if extra == 1 else 's'}")
    return "\n".join(lines)


# ---------------------------------------------------------------- the scenario


class _Leaf:
    """What submitting to a leaf needs: who submits by default, who may submit."""

    __slots__ = ("default_user", "principals")

    def __init__(self, default_user: str, principals: frozenset[str]) -> None:
        self.default_user = default_user
        self.principals = principals


class Scenario:
    """A validated scenario: the cluster, budget tree, config and input streams."""

    def __init__(
        self,
        spec: ScenarioSpec,
        *,
        name: str,
        base_dir: Path,
        source: str,
        config: SchedulerConfig,
    ) -> None:
        self.spec = spec
        self.name = name
        self.source = source
        self.base_dir = base_dir
        self.cluster_name = spec.cluster.name
        # (name, GPUs) in registration order: a host's index is its place here
        self.host_sizes: list[tuple[str, int]] = _host_layout(spec.cluster.groups())
        self._host_index = {name: i for i, (name, _) in enumerate(self.host_sizes)}
        self.hosts = len(self.host_sizes)
        self.start = spec.start
        self.horizon = spec.horizon
        self.config = config
        self.allocations = self._allocation_order()  # (path, spec or None if implied)
        paths = [path for path, _ in self.allocations]
        has_child = {parent_of(p) for p in paths}
        self.leaves: list[str] = [p for p in paths if p not in has_child]
        self._leaf_info = {leaf: self._leaf(leaf) for leaf in self.leaves}
        self._health = self._health_events()
        self._traces: dict[int, list[dict[str, Any]]] = {}
        self.trace_stats: dict[int, Any] = {}
        self._check_generators()
        self._read_traces()
        self.workload_count = sum(
            len(self._traces[i]) if entry.trace else entry.generate.total  # type: ignore[union-attr]
            for i, entry in enumerate(spec.workloads)
        )

    # ------------------------------------------------------------ facts
    @property
    def capacity(self) -> int:
        """Registered GPUs."""
        return sum(gpus for _, gpus in self.host_sizes)

    @property
    def gpus_per_host(self) -> int:
        """The biggest host's GPUs (every host's, when they are all one size)."""
        return max(gpus for _, gpus in self.host_sizes)

    def host_name(self, index: int) -> str:
        return self.host_sizes[index][0]

    def setup_events(self) -> list[HostRegistered | BudgetSet]:
        """Hosts in file order (h0..h{n-1} for a number of hosts), then the budget tree
        (parents first), all at `start`."""
        events: list[HostRegistered | BudgetSet] = []
        common = {"time": self.start, "cluster": self.cluster_name, "actor": SCENARIO_ACTOR}
        for host, gpus in self.host_sizes:
            events.append(HostRegistered(id=f"setup-{len(events)}", host=host, gpus=gpus, **common))
        for path, alloc in self.allocations:
            events.append(
                BudgetSet(
                    id=f"setup-{len(events)}",
                    allocation=path,
                    weight=alloc.weight if alloc else 1.0,
                    managers=(tuple(alloc.managers) or None) if alloc else None,
                    members=(tuple(alloc.members) or None) if alloc else None,
                    max_gpus_per_user=alloc.max_gpus_per_user if alloc else None,
                    max_pending_per_user=alloc.max_pending_per_user if alloc else None,
                    **common,
                )
            )
        return events

    def timed_inputs(self) -> Iterator[WorkloadSubmitted | HostHealth]:
        """Submissions and health changes sorted by (time, health first, then file order).

        A generator: events are built as the merge consumes them, so a million-workload
        scenario never holds a million events at once.
        """
        sources: list[Iterator[Any]] = [iter(self._health)]
        for index, entry in enumerate(self.spec.workloads):
            if entry.trace is not None:
                sources.append(self._trace_events(index, entry.trace))
            else:
                assert entry.generate is not None
                sources.append(self._generated_events(index, entry.generate))
        return heapq.merge(*sources, key=attrgetter("time"))

    def beyond_horizon(self) -> int:
        """How many trace rows are submitted after the horizon (never simulated)."""
        end = self.end_time()
        if end is None:
            return 0
        count = 0
        for index, subs in self._traces.items():
            trace = self.spec.workloads[index].trace
            assert trace is not None
            cut = end - self.start - trace.offset  # in the trace's own times
            count += sum(1 for sub in subs if sub["time"] > cut)
        return count

    def late_health(self) -> list[str]:
        """A line per `health` entry after the horizon (never simulated), for the user to
        see as the late trace rows are: they used to be dropped without a word."""
        if self.horizon is None:
            return []
        return [
            f"{self.source}: health[{i}].at: {format_duration(item.at)} comes after the horizon"
            f" ({format_duration(self.horizon)}): this health change is not simulated"
            for i, item in enumerate(self.spec.health)
            if item.at > self.horizon
        ]

    def skipped_rows(self) -> list[str]:
        """A line per trace entry whose `skip_bad: true` skipped malformed rows (worded as
        `allot trace import --skip-bad` reports them), and per trace whose pods were never
        scheduled (not simulated: they never ran), for the user to see."""
        lines = []
        for index, result in sorted(self.trace_stats.items()):
            trace = self.spec.workloads[index].trace
            assert trace is not None
            where = f"{self.source}: workloads[{index}].trace: {trace.file}"
            if result.skipped_bad:
                rows = "row" if result.skipped_bad == 1 else "rows"
                first = f"; the first: {result.bad_examples[0]}" if result.bad_examples else ""
                lines.append(
                    f"{where}: skipped {result.skipped_bad} bad {rows} of {result.rows}"
                    f" (skip_bad: true){first}"
                )
            if result.skipped_unscheduled:
                pods = "pod" if result.rows == 1 else "pods"
                lines.append(
                    f"{where}: skipped {result.skipped_unscheduled} of {result.rows} {pods},"
                    " never scheduled in the trace (no run, so no runtime to simulate)"
                )
        return lines

    def end_time(self) -> float | None:
        """Absolute time the simulation stops at (None: when all work has ended)."""
        return None if self.horizon is None else self.start + self.horizon

    # ------------------------------------------------------------ building
    def _allocation_order(self) -> list[tuple[str, AllocationSpec | None]]:
        declared: dict[str, AllocationSpec] = {}
        for i, alloc in enumerate(self.spec.allocations):
            if alloc.path in declared:
                raise self._error(f"allocations[{i}].path", f"duplicate allocation {alloc.path!r}")
            declared[alloc.path] = alloc
        order: list[tuple[str, AllocationSpec | None]] = []
        seen: set[str] = set()
        for path in declared:
            for node in ancestors(path):
                if node not in seen:
                    seen.add(node)
                    order.append((node, declared.get(node)))
        return order

    def _leaf(self, leaf: str) -> _Leaf:
        by_path = {p: a for p, a in self.allocations}
        members = list(by_path[leaf].members) if by_path[leaf] else []
        managers: list[str] = []
        for node in reversed(ancestors(leaf)):  # the leaf itself, then up to the top
            alloc = by_path[node]
            if alloc:
                managers.extend(m for m in alloc.managers if m not in managers)
        default = members[0] if members else managers[0] if managers else FALLBACK_USER
        return _Leaf(default, frozenset(members) | frozenset(managers))

    def _health_events(self) -> list[HostHealth]:
        entries: list[tuple[float, int, HostHealth]] = []
        for i, item in enumerate(self.spec.health):
            host = self._host(item.host, f"health[{i}].host")
            event = HostHealth(
                id=_health_id(i),
                time=self.start + item.at,
                cluster=self.cluster_name,
                actor=SCENARIO_ACTOR,
                host=host,
                healthy=item.healthy,
                reason=item.reason,
            )
            entries.append((event.time, i, event))
        entries.sort(key=lambda e: (e[0], e[1]))
        return [e for _, _, e in entries]

    @property
    def lose_work_at(self) -> frozenset[str]:
        """Ids of the health changes whose host dies with its work (`lost: true`)."""
        return frozenset(_health_id(i) for i, item in enumerate(self.spec.health) if item.lost)

    def _host(self, value: int | str, where: str) -> str:
        """A host given by its index in registration order (`17`, `"17"`) or its name
        (`h17`, `ws3`; `h017` is `h17`)."""
        index: int | None = None
        if isinstance(value, int):
            index = value
        else:
            text = value.strip()
            if text.isdecimal():
                index = int(text)
            else:
                match = re.fullmatch(r"(\D+)(\d+)", text)
                name = f"{match.group(1)}{int(match.group(2))}" if match else text
                index = self._host_index.get(name)
        if index is None or not 0 <= index < self.hosts:
            raise self._error(
                where,
                f"no host {value!r}: hosts are {self._host_ranges()}"
                f" (or their index 0..{self.hosts - 1})",
            )
        return self.host_name(index)

    def _host_ranges(self) -> str:
        """`h0..h95, ws0..ws31`: the names of each run of one prefix, in order."""
        runs: list[list[str]] = []
        last_prefix = None
        for name, _ in self.host_sizes:
            prefix = name.rstrip("0123456789")
            if prefix != last_prefix:
                runs.append([])
                last_prefix = prefix
            runs[-1].append(name)
        shown = [run[0] if len(run) == 1 else f"{run[0]}..{run[-1]}" for run in runs]
        if len(shown) > 8:  # many small groups: the message stays one readable line
            shown = [*shown[:7], f"... and {len(runs) - 7} more"]
        return ", ".join(shown)

    def _check_generators(self) -> None:
        leaves = set(self.leaves)
        for i, entry in enumerate(self.spec.workloads):
            gen = entry.generate
            if gen is None:
                continue
            where = f"workloads[{i}].generate"
            if gen.allocation not in leaves:
                known = {p for p, _ in self.allocations}
                if gen.allocation in known:
                    children = [p for p, _ in self.allocations if parent_of(p) == gen.allocation]
                    raise self._error(
                        f"{where}.allocation",
                        f"{gen.allocation!r} is not a leaf allocation"
                        f" (it has {', '.join(children)}); workloads are submitted to leaves",
                    )
                hint = difflib.get_close_matches(gen.allocation, self.leaves, n=1)
                raise self._error(
                    f"{where}.allocation",
                    f"unknown allocation {gen.allocation!r}"
                    + (f" (did you mean {hint[0]!r}?)" if hint else "")
                    + (
                        f"; leaves are: {', '.join(self.leaves)}"
                        if self.leaves
                        else "; the scenario declares no allocations"
                    ),
                )
            info = self._leaf_info[gen.allocation]
            if gen.user is not None and info.principals and gen.user not in info.principals:
                raise self._error(
                    f"{where}.user",
                    f"{gen.user!r} may not submit to {gen.allocation!r}: only its members and the"
                    f" managers above it may ({', '.join(sorted(info.principals))})",
                )

    def _read_traces(self) -> None:
        taken: set[str] = set()
        for i, entry in enumerate(self.spec.workloads):
            if entry.trace is None:
                continue
            result = self._read_trace(i, entry.trace)
            subs = result.submissions
            self._check_trace_allocations(i, entry.trace, subs)
            subs.sort(key=_submit_time)  # readers sort already; a cheap no-op then
            self._check_trace_span(i, entry.trace, subs)
            for sub in subs:
                workload = sub.get("workload")
                if workload is None:
                    continue
                if workload in taken or _GENERATED_ID.match(workload):
                    raise self._error(
                        f"workloads[{i}].trace.file",
                        f"workload id {workload!r} in {entry.trace.file}"
                        " is used twice in this scenario",
                    )
                taken.add(workload)
            self._traces[i] = subs
            self.trace_stats[i] = result
            result.submissions = []  # the scenario keeps the one list

    def _check_trace_span(self, index: int, spec: TraceSpec, subs: list[dict[str, Any]]) -> None:
        """Without a horizon the run lasts until the last submission has ended: one more
        than ten years after the start (a placeholder date among the rows) is refused, as
        such a horizon is, for memory's sake."""
        if self.horizon is not None or not subs:
            return
        last = spec.offset + subs[-1]["time"]
        if last <= MAX_HORIZON_S:
            return
        raise self._error(
            f"workloads[{index}].trace",
            f"{spec.file}: its submissions span {format_duration(subs[-1]['time'] - subs[0]['time'])}"
            f" and the last comes {format_duration(last)} after the start, more than"
            f" {MAX_HORIZON_S / 86400:.0f}d (ten years) of simulated time; check the trace"
            " for a placeholder date, or set a horizon to simulate only its beginning",
        )

    def _check_trace_allocations(
        self, index: int, spec: TraceSpec, subs: list[dict[str, Any]]
    ) -> None:
        """Every row must go to a leaf of this scenario, as a generator's allocation must:
        otherwise all of them would only be rejected, one by one, in the journal."""
        leaves = self._leaf_info
        unknown: dict[str, int] = {}  # allocation -> rows, first seen first
        for sub in subs:
            allocation = sub["allocation"]
            if allocation not in leaves:
                unknown[allocation] = unknown.get(allocation, 0) + 1
        if not unknown:
            return
        names = list(unknown)
        shown = ", ".join(repr(name) for name in names[:3])
        if len(names) > 3:
            shown += f" and {len(names) - 3} more"
        rows = sum(unknown.values())
        how = []
        if spec.allocation_prefix:
            how.append(f"allocation_prefix {spec.allocation_prefix!r}")
        if spec.allocation_map is not None:
            how.append(f"allocation_map {spec.allocation_map}")
        raise self._error(
            f"workloads[{index}].trace",
            f"{spec.file}: {rows} of {len(subs)} rows go to allocations that are not leaves of"
            f" this scenario: {shown}"
            + (f" (with {' and '.join(how)})" if how else "")
            + (
                f"; leaves are: {', '.join(self.leaves)}"
                if self.leaves
                else "; the scenario declares no allocations"
            )
            + "; map the trace's tenants with allocation_prefix or allocation_map",
        )

    def _read_trace(self, index: int, spec: TraceSpec) -> Any:
        try:
            from projections.traces import SCENARIO_KEYS, load_allocation_map, read_trace
        except ImportError as exc:  # pragma: no cover - the trace readers ship with allot
            raise self._error(
                f"workloads[{index}].trace", f"trace readers unavailable: {exc}"
            ) from None
        path = self.base_dir / spec.file
        try:
            mapping = None
            if spec.allocation_map is not None:
                mapping = load_allocation_map(self.base_dir / spec.allocation_map)
            return read_trace(
                path,
                spec.format,
                allocation_map=mapping,
                allocation_prefix=spec.allocation_prefix,
                skip_bad=spec.skip_bad,
                names=SCENARIO_KEYS,
                timezone=spec.timezone,
            )
        except (ValueError, OSError) as exc:
            raise self._error(f"workloads[{index}].trace", str(exc)) from None

    def _user(self, allocation: str) -> str:
        info = self._leaf_info.get(allocation)
        return info.default_user if info else FALLBACK_USER

    def _trace_events(self, index: int, spec: TraceSpec) -> Iterator[WorkloadSubmitted]:
        base = self.start + spec.offset
        default_min = DEFAULT_MIN_RUNTIME if spec.min_runtime is None else spec.min_runtime
        default_resumable = bool(spec.resumable)
        default_priority = spec.priority or 0
        extra_tags = tuple(spec.tags)
        cluster = self.cluster_name
        for n, sub in enumerate(self._traces[index]):
            workload = sub.get("workload") or f"{index}-{n:06d}"
            allocation = sub["allocation"]
            runtime = sub.get("runtime")
            min_runtime = sub.get("min_runtime")
            resumable = sub.get("resumable")
            priority = sub.get("priority")
            tags = tuple(sub.get("tags") or ())
            if extra_tags:
                tags += tuple(t for t in extra_tags if t not in tags)
            yield WorkloadSubmitted(
                id=f"submit-{workload}",
                time=base + sub["time"],
                cluster=cluster,
                actor=sub.get("actor") or self._user(allocation),
                workload=workload,
                allocation=allocation,
                gpus=sub["gpus"],
                min_runtime=default_min if min_runtime is None else min_runtime,
                resumable=default_resumable if resumable is None else resumable,
                priority=default_priority if priority is None else priority,
                tags=tags,
                name=sub.get("name"),
                runtime=runtime,
                expected_runtime=runtime if spec.expected_runtime else None,
                one_host=sub.get("one_host") or None,  # absent, as before, unless asked
            )

    def _generated_events(self, index: int, spec: GenerateSpec) -> Iterator[WorkloadSubmitted]:
        actor = spec.user or self._user(spec.allocation)
        tags = tuple(spec.tags)
        base = self.start
        cluster = self.cluster_name
        for n, (offset, gpus, runtime) in enumerate(samples(spec)):
            workload = f"{index}-{n:06d}"
            yield WorkloadSubmitted(
                id=f"submit-{workload}",
                time=round(base + offset, 3),  # monotonic, so the order is kept
                cluster=cluster,
                actor=actor,
                workload=workload,
                allocation=spec.allocation,
                gpus=gpus,
                min_runtime=spec.min_runtime,
                resumable=spec.resumable,
                priority=spec.priority,
                tags=tags,
                name=f"{spec.name}-{n}" if spec.name else None,
                runtime=runtime,
                expected_runtime=runtime if spec.expected_runtime else None,
                one_host=spec.one_host or None,  # absent, as before, unless asked
            )

    def _error(self, where: str, message: str) -> ScenarioError:
        return ScenarioError(f"{self.source}: {where}: {message}")


def _submit_time(sub: dict[str, Any]) -> float:
    return sub["time"]


# ---------------------------------------------------------------- loading


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (PyYAML keeps the last,
    so `horizon: 1d` then `horizon: 2h` ran 2h without a word)."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, Hashable) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} given twice", key_node.start_mark
                )
            if isinstance(key, Hashable):
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_scenario(path: Path | str, overrides: dict[str, Any] | None = None) -> Scenario:
    """Read and validate a scenario file; `overrides` are config keys (e.g. from `--set`)."""
    path = Path(path)
    source = path.name
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ScenarioError(f"{path}: no such scenario file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"{path}: cannot read: {exc}") from None
    raw = load_yaml(text, source)
    return scenario_from_dict(
        raw, source=source, base_dir=path.parent, overrides=overrides, default_name=path.stem
    )


def load_yaml(text: str, source: str) -> Any:
    """`text` parsed safely, a key given twice refused; what does not parse is a
    ScenarioError of one line, `SOURCE:LINE:COL: not valid YAML: ...` (`allot serve
    --config` says it the same way)."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ScenarioError(f"{source}{where}: not valid YAML: {problem}") from None
    except ValueError as exc:  # what PyYAML's constructors raise, e.g. a 13th month
        raise ScenarioError(f"{source}: not valid YAML: {exc}") from None


def scenario_from_dict(
    raw: Any,
    *,
    source: str = "scenario",
    base_dir: Path | str = ".",
    overrides: dict[str, Any] | None = None,
    default_name: str = "scenario",
) -> Scenario:
    """Validate an already-parsed scenario (trace paths are relative to `base_dir`)."""
    if not isinstance(raw, dict):
        raise ScenarioError(
            f"{source}: a scenario is a mapping with cluster, allocations, workloads, ...;"
            f" got {type(raw).__name__}"
        )
    try:
        spec = ScenarioSpec.model_validate(raw)
    except ValidationError as exc:
        raise ScenarioError(_describe(source, exc)) from None
    try:
        config = SchedulerConfig.model_validate(spec.config)
    except ValidationError as exc:
        raise ScenarioError(
            _describe(source, exc, root=SchedulerConfig, prefix=("config",))
        ) from None
    if overrides:
        try:
            config = SchedulerConfig.model_validate({**spec.config, **overrides})
        except ValidationError as exc:
            raise ScenarioError(
                _describe("--set", exc, root=SchedulerConfig, also_known=ENGINE_KEYS)
            ) from None
    return Scenario(
        spec,
        name=spec.name or default_name,
        base_dir=Path(base_dir),
        source=source,
        config=config,
    )


def _host_layout(groups: list[HostGroup]) -> list[tuple[str, int]]:
    """(name, GPUs) of every host, group by group; each prefix numbers its hosts from 0
    on, across its groups, so a name never depends on the groups of other prefixes."""
    taken: dict[str, int] = {}
    layout: list[tuple[str, int]] = []
    for group in groups:
        first = taken.get(group.prefix, 0)
        layout.extend((f"{group.prefix}{n}", group.gpus) for n in range(first, first + group.count))
        taken[group.prefix] = first + group.count
    return layout


def _health_id(index: int) -> str:
    """The input id of the scenario's `health[index]` entry."""
    return f"health-{index}"
