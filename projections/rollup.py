"""Whole-lab roll-up: usage, owed, received and delivered up the budget tree, across
clusters (issue #6).

The budget tree is global (`lab/olmo/pretrain` may be funded on several clusters), but
scheduling, shares and capacity are per cluster: each cluster's journal holds its own
`budget.*` records and every record carries its `cluster`. This projection folds the
records of any mix of clusters (each cluster's in its own journal order; how they are
interleaved does not matter) and answers, for every node of the union of the clusters'
budget trees — leaves and every ancestor, roots included — and for the lab as a whole,
what happened in one time range:

    r = Rollup()
    r.apply_lines(journal_lines(journal=path))      # or r.apply(record) per record
    result = r.result(since="7d")                    # or since/until as epoch seconds
    result.total.delivered, result.nodes["lab/olmo"].by_cluster["east"].owed

How the numbers are made (no second fold: each cluster is folded by the per-cluster,
per-allocation, per-hour `projections.usage.UsageProjection`, clipped to the range):

1. **Accounts.** For each cluster c and allocation a with rows in the range, the sums
   over the hours of `hourly_rows()` (`period_totals`): charged GPU-seconds (= received,
   DESIGN §2 counts charged time only), unallocated, demand, owed (per hour
   `min(share × healthy capacity, demand)`, summed), and two derived sums:
   `met = min(received, owed)` (DESIGN's period form, per account) and
   `strict = Σ_h min(received_h, owed_h)` (the stricter hourly form).
2. **Up the tree and across clusters: sums only.** A node's amount in cluster c is the
   sum of the accounts of c at the node or under it; its total is the sum over clusters;
   the lab total is the sum over all accounts (= the sum of the roots). Every column is
   a sum of GPU-seconds, so a node always equals the sum of its children (plus work
   charged to the node itself, which only happens when it was a leaf once) and the sum
   of its per-cluster breakdown.
3. **Ratios from the sums, never averaged.** `delivered = met / owed` of the node
   (None when nothing was owed). For a leaf on one cluster that is exactly
   `min(1, Σ_h received_h / Σ_h owed_h)` (`projections.usage.delivered`); for a
   subtree, several clusters or the lab it is DESIGN's overall form
   `Σ_a min(received_a, owed_a) / Σ_a owed_a` with one account per (cluster,
   allocation): what a team is owed is a per-cluster promise, so GPU-hours received
   beyond what one cluster owed do not pay what another cluster owes, nor does one
   team's surplus cover another team's shortfall. A team owed 10 GPU-h on one cluster
   and receiving all of it, and owed 100 GPU-h on another receiving 50, was delivered
   60/110 = 0.545, not the mean of 1.0 and 0.5. `delivered_hourly_strict` is
   `strict / owed`, likewise.

Time range: `since`/`until` are epoch seconds, or text: an ISO date/time (UTC) or a
duration before the latest record of the selected clusters (`7d`, `12h`, `now`). By
default it is the usage window ending at that latest record: the window of the
clusters' `config.set` (the largest if they differ), else 7 days. A cluster is
integrated only up to its own last record (its journal knows nothing later) and from
its first one. Charged time is exact (split at the range's edges), where the
scheduler's own usage ledger (`allot shares`) counts whole buckets at the window start.

The nodes are the union of the clusters' budget trees as of `until` plus every
allocation that had work or demand in the range (one removed since still counts).
"""

from __future__ import annotations

import contextlib
import difflib
import math
from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from domain.config import SchedulerConfig
from domain.tree import ancestors
from projections.usage import HOUR, RecordError, UsageProjection, fields, period_totals
from projections.usage import delivered as period_delivered

DEFAULT_WINDOW = SchedulerConfig.model_fields["window"].default


class RollupError(ValueError):
    """A question the journals cannot answer: one line for the user."""


# ------------------------------------------------------------------ amounts


@dataclass(slots=True)
class Amounts:
    """GPU-seconds of one node (or account) over the range; ratios come from these."""

    charged: float = 0.0  # charged (allocated) GPU-seconds: usage
    unallocated: float = 0.0  # busy GPU-seconds of unallocated (free) work
    demand: float = 0.0  # ∫ GPUs of pending + running work with min_runtime > 0
    owed: float = 0.0  # Σ_h min(share × healthy capacity, demand)
    received: float = 0.0  # charged GPU-seconds (DESIGN §2: received counts charged only)
    met: float = 0.0  # Σ over (cluster, allocation) accounts of min(received, owed)
    strict: float = 0.0  # Σ over accounts and hours of min(received_h, owed_h)

    @classmethod
    def of_account(cls, sums: dict[str, float]) -> Amounts:
        """One (cluster, allocation) account from its `period_totals` sums."""
        received = sums.get("received_gpu_s", 0.0)
        owed = sums.get("owed_gpu_s", 0.0)
        return cls(
            charged=sums.get("charged_gpu_s", 0.0),
            unallocated=sums.get("unallocated_gpu_s", 0.0),
            demand=sums.get("demand_gpu_s", 0.0),
            owed=owed,
            received=received,
            # = owed × delivered(received, owed): DESIGN §2's period form, per account
            met=min(received, owed),
            strict=sums.get("strict_gpu_s", 0.0),
        )

    def add(self, other: Amounts) -> None:
        self.charged += other.charged
        self.unallocated += other.unallocated
        self.demand += other.demand
        self.owed += other.owed
        self.received += other.received
        self.met += other.met
        self.strict += other.strict

    @property
    def delivered(self) -> float | None:
        """`met / owed` (None when nothing was owed): see the module docstring. For one
        account this is `projections.usage.delivered(received, owed)` itself."""
        return period_delivered(self.met, self.owed)

    @property
    def delivered_hourly_strict(self) -> float | None:
        return period_delivered(self.strict, self.owed)

    def as_json(self) -> dict[str, Any]:
        def h(x: float) -> float:
            return round(x / HOUR, 3)

        return {
            "charged_gpu_h": h(self.charged),
            "owed_gpu_h": h(self.owed),
            "received_gpu_h": h(self.received),
            "met_gpu_h": h(self.met),
            "demand_gpu_h": h(self.demand),
            "unallocated_gpu_h": h(self.unallocated),
            "delivered": _round(self.delivered),
            "delivered_hourly_strict": _round(self.delivered_hourly_strict),
        }


def _round(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(x, digits)


@dataclass(slots=True)
class Node:
    """One allocation path of the union tree."""

    path: str
    clusters: set[str] = field(default_factory=set)
    children: list[str] = field(default_factory=list)
    amounts: Amounts = field(default_factory=Amounts)
    by_cluster: dict[str, Amounts] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    @property
    def depth(self) -> int:
        return self.path.count("/")

    @property
    def leaf(self) -> bool:
        return not self.children

    def as_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "name": self.name,
            "depth": self.depth,
            "leaf": self.leaf,
            "clusters": sorted(self.clusters),
            **self.amounts.as_json(),
            "by_cluster": {c: self.by_cluster[c].as_json() for c in sorted(self.by_cluster)},
        }


@dataclass(slots=True)
class ClusterInfo:
    """What one cluster's journal contributed."""

    name: str
    first: float  # first record (any time)
    last: float  # last record (any time)
    start: float  # integrated from here ...
    end: float  # ... to here (the range clipped to the journal)
    window: float | None  # its config's window, if journaled
    healthy: float = 0.0  # healthy GPU-seconds in [start, end]
    amounts: Amounts = field(default_factory=Amounts)

    def as_json(self) -> dict[str, Any]:
        hours = max(0.0, self.end - self.start) / HOUR
        return {
            "first": iso(self.first),
            "last": iso(self.last),
            "from": iso(self.start) if self.end > self.start else None,
            "to": iso(self.end) if self.end > self.start else None,
            "hours": round(hours, 3),
            "window_s": self.window,
            "healthy_gpu_h": round(self.healthy / HOUR, 3),
            **self.amounts.as_json(),
        }


# ------------------------------------------------------------------ result


@dataclass(slots=True)
class RollupResult:
    since: float
    until: float
    window: float | None  # the default range's window (None when --since was given)
    clusters: dict[str, ClusterInfo]
    total: Amounts
    nodes: dict[str, Node]  # depth first, siblings by path
    roots: list[str]

    def node(self, path: str) -> Node:
        """The node at `path`; RollupError naming close matches if there is none."""
        path = path.strip().strip("/")
        found = self.nodes.get(path)
        if found is not None:
            return found
        close = difflib.get_close_matches(path, list(self.nodes), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        where = ", ".join(sorted(self.clusters))
        raise RollupError(
            f"unknown allocation {path!r}: no budget or work under it in clusters {where}{hint}"
        )

    def rows(self, *, depth: int | None = None, allocation: str | None = None) -> list[Node]:
        """Nodes depth first (siblings by path): all, or the subtree at `allocation`,
        down to `depth` levels below the top shown (the roots, or `allocation`; 0: that
        top only), as `allot shares -A` indents from the allocation asked for."""
        tops = self.roots if allocation is None else [self.node(allocation).path]
        out: list[Node] = []

        def visit(path: str, below_top: int) -> None:
            if depth is not None and below_top > depth:
                return
            out.append(self.nodes[path])
            for child in self.nodes[path].children:
                visit(child, below_top + 1)

        for top in tops:
            visit(top, 0)
        return out

    def as_json(self, *, depth: int | None = None, allocation: str | None = None) -> dict[str, Any]:
        return {
            "since": iso(self.since),
            "until": iso(self.until),
            "since_time": self.since,
            "until_time": self.until,
            "window_s": self.window,
            "clusters": {c: self.clusters[c].as_json() for c in sorted(self.clusters)},
            "total": {
                "clusters": sorted(self.clusters),
                **self.total.as_json(),
                "by_cluster": {
                    c: self.clusters[c].amounts.as_json() for c in sorted(self.clusters)
                },
            },
            "allocations": [n.as_json() for n in self.rows(depth=depth, allocation=allocation)],
        }


def iso(t: float | None) -> str | None:
    if t is None or not math.isfinite(t):
        return None
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: float | str, latest: float, end: bool = False) -> float:
    """Epoch seconds, or text as `domain.durations.parse_moment` reads it (`now`,
    `07:13`, `7d`, an ISO date or time), durations and times of day before `latest`."""
    from domain.durations import parse_moment

    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    try:
        return parse_moment(str(value), latest, end)
    except ValueError as why:
        raise RollupError(str(why)) from None


# ------------------------------------------------------------------ folding


class _Cluster:
    __slots__ = ("at", "first", "last", "records", "sources", "window")

    def __init__(self, t: float) -> None:
        self.first = t
        self.last = t
        self.records: list[Any] = []
        self.window: float | None = None
        # where each kept record was read (a line of a file, else its number in the
        # read), and how that is named: (index of its first record, namer) per source
        self.at = array("q")
        self.sources: list[tuple[int, Callable[[int], str] | None]] = []

    def keep(self, record: Any, at: int, where: Callable[[int], str] | None) -> None:
        if not self.sources or self.sources[-1][1] is not where:
            self.sources.append((len(self.records), where))
        self.at.append(at)
        self.records.append(record)

    def place(self, i: int) -> str | None:
        """Where kept record `i` was read (FILE:LINE, `journal record N`), if known."""
        k = bisect_right(self.sources, i, key=lambda source: source[0]) - 1
        where = self.sources[k][1] if k >= 0 else None
        return where(self.at[i]) if where is not None else None


class Rollup:
    """Folds journal records of any clusters; `result()` answers for a time range.

    Records (wire-form dicts or `domain.events` models) are kept per cluster until
    `result()`, because the default range ends at the latest record of all clusters,
    known only at the end (clock ticks are not kept: they only move time, and each
    cluster's last time is remembered). `clusters` keeps only those clusters' records.
    """

    def __init__(self, clusters: Iterable[str] | None = None) -> None:
        self.wanted: frozenset[str] | None = None if clusters is None else frozenset(clusters)
        self._clusters: dict[str, _Cluster] = {}
        self.others: set[str] = set()  # clusters seen but not wanted
        self.records = 0

    def apply(self, record: Any, *, at: int = 0, where: Callable[[int], str] | None = None) -> None:
        """Keep `record`; `where(at)` names it in an error (`apply_lines` gives them)."""
        d = fields(record)
        name = d.get("cluster") or "default"
        if self.wanted is not None and name not in self.wanted:
            self.others.add(name)
            return
        t = float(d["time"])
        c = self._clusters.get(name)
        if c is None:
            c = self._clusters[name] = _Cluster(t)
        elif t > c.last:
            c.last = t
        self.records += 1
        kind = d.get("type")
        if kind == "clock.tick":
            return
        if kind == "config.set":
            window = (d.get("config") or {}).get("window")
            if window is not None:
                from domain.durations import parse_duration

                with contextlib.suppress(ValueError):
                    c.window = parse_duration(window)
        c.keep(record, at, where)

    def apply_lines(self, lines: Iterable[bytes]) -> None:
        """Journal records as JSON bytes (one each), upcast to the current contract; a
        bad one is named as `allot queue` names it (FILE:LINE from a file)."""
        import orjson

        from domain.upcasting import upcast

        # a file's (`streams.sources.FileLines`): each record by its line, as it is read
        path = getattr(lines, "path", None) if hasattr(lines, "line") else None
        where = (lambda n: f"{path}:{n}") if path is not None else (lambda n: f"journal record {n}")
        for number, line in enumerate(lines, start=1):
            try:
                raw = orjson.loads(line)
            except orjson.JSONDecodeError as why:
                raise RollupError(f"{_place(lines, number)}: not JSON: {why}") from None
            if not isinstance(raw, dict) or "time" not in raw or "type" not in raw:
                raise RollupError(f"{_place(lines, number)}: not a journal record (no type/time)")
            self.apply(upcast(raw), at=lines.line if path is not None else number, where=where)  # type: ignore[attr-defined]

    @property
    def cluster_names(self) -> list[str]:
        return sorted(self._clusters)

    def require_wanted(self) -> None:
        """RollupError if a cluster asked for has no records, naming those there are."""
        if self.wanted is not None:
            missing = sorted(self.wanted - set(self._clusters))
            if missing:
                held = ", ".join(sorted(set(self._clusters) | self.others)) or "nothing"
                raise RollupError(
                    f"no records of cluster {', '.join(map(repr, missing))} "
                    f"(the journal holds: {held})"
                )

    def bounds(
        self,
        *,
        since: float | str | None = None,
        until: float | str | None = None,
        default_since: float | None = None,
    ) -> tuple[float, float, float | None]:
        """(lo, hi, window) of the range: `until` defaults to the latest record, `since`
        to `default_since` if given, else to the usage window before `until` (then
        returned as `window`, else None). See the module docstring for the forms."""
        clusters = self._clusters
        if not clusters:
            raise RollupError("the journal is empty: no records to roll up")
        latest = max(c.last for c in clusters.values())
        hi = latest if until is None else parse_time(until, latest, end=True)
        window: float | None = None
        if since is not None:
            lo = parse_time(since, latest)
        elif default_since is not None:
            lo = default_since
        else:
            window = self.window
            lo = hi - window
        if hi < lo:
            raise RollupError(f"--until ({iso(hi)}) is before --since ({iso(lo)})")
        return lo, hi, window

    @property
    def window(self) -> float:
        """The usage window of the clusters' `config.set` (the largest if they differ),
        else the default (7 days)."""
        windows = [c.window for c in self._clusters.values() if c.window is not None]
        return max(windows) if windows else DEFAULT_WINDOW

    def first(self, name: str) -> float:
        """The time of cluster `name`'s first record."""
        return self._clusters[name].first

    def projection(self, name: str, lo: float, hi: float) -> UsageProjection:
        """Cluster `name`'s records folded into a usage projection clipped to [lo, hi],
        closed at `hi` or the cluster's last record if earlier (its journal knows
        nothing later): its `hourly_rows()` are the range's, split exactly at its edges."""
        c = self._clusters[name]
        proj = UsageProjection(start=lo, end=hi)
        for i, record in enumerate(c.records):
            if fields(record)["time"] > hi:
                break  # each cluster's records are in journal (time) order
            try:
                proj.apply(record)
            except RecordError as why:
                place = c.place(i) or f"record {i + 1} of cluster {name!r}"
                raise RollupError(f"{place}: not a journal record: {why}") from None
        proj.close(end=min(hi, c.last))
        return proj

    def result(
        self, *, since: float | str | None = None, until: float | str | None = None
    ) -> RollupResult:
        """The roll-up over [since, until] (see the module docstring for defaults)."""
        clusters = self._clusters
        self.require_wanted()
        lo, hi, window = self.bounds(since=since, until=until)

        infos: dict[str, ClusterInfo] = {}
        accounts: list[tuple[str, str, Amounts]] = []
        tree_paths: dict[str, set[str]] = {}
        for name in sorted(clusters):
            c = clusters[name]
            proj = self.projection(name, lo, hi)
            end = min(hi, c.last)
            info = ClusterInfo(
                name=name,
                first=c.first,
                last=c.last,
                start=max(lo, c.first),
                end=end,
                window=c.window,
                healthy=proj.totals()["healthy_gpu_s"],
            )
            infos[name] = info
            for path, sums in sorted(period_totals(proj.hourly_rows()).items()):
                amounts = Amounts.of_account(sums)
                accounts.append((name, path, amounts))
                info.amounts.add(amounts)
            for path in proj.tree.nodes:
                tree_paths.setdefault(path, set()).add(name)

        nodes: dict[str, Node] = {}

        def node(path: str) -> Node:
            n = nodes.get(path)
            if n is None:
                n = nodes[path] = Node(path)
            return n

        for path, names in tree_paths.items():
            for p in ancestors(path):
                n = node(p)
                n.clusters |= names
                for name in names:
                    n.by_cluster.setdefault(name, Amounts())
        total = Amounts()
        for name, path, amounts in accounts:
            total.add(amounts)
            for p in ancestors(path):
                n = node(p)
                n.clusters.add(name)
                n.amounts.add(amounts)
                n.by_cluster.setdefault(name, Amounts()).add(amounts)
        for path in sorted(nodes):
            if "/" in path:
                nodes[path.rsplit("/", 1)[0]].children.append(path)
        roots = sorted(p for p in nodes if "/" not in p)
        ordered: dict[str, Node] = {}

        def visit(path: str) -> None:
            ordered[path] = nodes[path]
            for child in nodes[path].children:
                visit(child)

        for root in roots:
            visit(root)
        return RollupResult(
            since=lo,
            until=hi,
            window=window,
            clusters=infos,
            total=total,
            nodes=ordered,
            roots=roots,
        )


def _place(lines: Iterable[bytes], number: int) -> str:
    # imported for an error only: projections.views takes a while to import
    from projections.views import record_place

    return record_place(lines, number)


def rollup(
    records: Iterable[Any],
    *,
    since: float | str | None = None,
    until: float | str | None = None,
    clusters: Iterable[str] | None = None,
) -> RollupResult:
    """Fold `records` (dicts or models, any cluster mix) and roll them up."""
    r = Rollup(clusters)
    for record in records:
        r.apply(record)
    return r.result(since=since, until=until)


__all__ = [
    "Amounts",
    "ClusterInfo",
    "Node",
    "Rollup",
    "RollupError",
    "RollupResult",
    "parse_time",
    "rollup",
]
