"""`allot acct`: every workload's record, finished or not, as `sacct` lists jobs.

One row per submitted workload (and per rejected submission), from a folded journal
(`projections.views.JournalView`): its state, when it was submitted, first started and
ended, how long it waited and ran (all attempts), the GPUs it asked for and held (a gang
holds whole hosts), the GPU-hours it held them, split into charged (allocated: what
`allot shares`, `usage` and `rollup` count) and unallocated (free) time, and how often
it was placed and preempted.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Collection
from typing import Any

from domain.state import RUNNING
from projections.views import (
    History,
    JournalView,
    ended_detail,
    iso,
    matches_allocation,
    matches_user,
    nodelist,
    queue_rows,
)

# sacct's names where they mean the same; PREEMPTED is a workload ended by preemption
# (not resumable), NODE_FAIL one ended because its host was drained as unhealthy; a
# requeued one (preempted or lost with its node, and resumable; or `allot requeue`d) is
# PENDING or RUNNING again
STATES = (
    "PENDING",
    "RUNNING",
    "COMPLETED",
    "FAILED",
    "LOST",
    "CANCELLED",
    "PREEMPTED",
    "NODE_FAIL",
    "REJECTED",
)
# sacct -s's short codes for the states it shares
STATE_CODES = {
    "PD": "PENDING",
    "R": "RUNNING",
    "CD": "COMPLETED",
    "F": "FAILED",
    "CA": "CANCELLED",
    "PR": "PREEMPTED",
    "NF": "NODE_FAIL",
}

AcctRow = dict[str, Any]


def _state(view: JournalView, h: History) -> str:
    w = view.require().workloads.get(h.workload)
    if w is not None:
        return "RUNNING" if w.state == RUNNING else "PENDING"
    if h.submitted is None:
        return "REJECTED"
    ended = h.ended or {}
    how = ended.get("how")
    if how == "finished":
        return {"completed": "COMPLETED", "failed": "FAILED", "lost": "LOST"}.get(
            ended.get("outcome", "completed"), "COMPLETED"
        )
    if how == "cancelled":
        return "CANCELLED"
    if how == "preempted":
        drained = h.preemptions and h.preemptions[-1].reason in ("drain", "gpus_removed")
        return "NODE_FAIL" if drained else "PREEMPTED"
    # not live and no end recorded: the view records every end it folds, so only a
    # future ending record of another kind lands here; say it still waits
    return "PENDING"


def _runs(h: History, now: float, running: bool) -> list[tuple[float, float, int, bool]]:
    """Its run intervals over all attempts (the current one up to `now`), each with the
    GPUs it held (its hosts' GPUs: whole hosts for a gang, as it is charged) and whether
    the attempt was charged (allocated) or ran unallocated (free)."""
    stops = {q.attempt: q.time for q in h.preemptions}
    stops.update((lost.attempt, lost.time) for lost in h.lost)
    out = []
    for i, p in enumerate(h.placements):
        stop = stops.get(p.attempt)
        if stop is None and i == len(h.placements) - 1:
            stop = now if running else (h.ended or {}).get("time")
        if stop is not None and stop > p.time:
            out.append((p.time, stop, _held(p), p.charged))
    return out


def _held(p: Any) -> int:
    return sum(len(gpus) for gpus in p.hosts.values())


def acct_rows(
    view: JournalView,
    *,
    user: str | Collection[str] | None = None,
    allocation: str | Collection[str] | None = None,
    ids: Collection[str] | None = None,
    states: Collection[str] | None = None,
    since: float | None = None,
    until: float | None = None,
) -> list[AcctRow]:
    """Rows by submit time (ties in journal order). `allocation` matches the path and
    what is under it; `ids` a workload id or a job array's base id; [since, until]
    keeps workloads whose life (submit to end, or to now) overlaps it, and each row's
    `window_gpu_hours` counts only the runs inside. `states` (STATES names): without a
    window, the state now; with one, as sacct -s with -S/-E, a state it was in during
    the window (pending or running then, or ended that way inside it)."""
    state = view.require()
    now = state.now
    # live work's reason as `allot queue` gives it (Priority, Resources, protected ...)
    live_reason = {r["id"]: r["reason"] for r in queue_rows(view)} if state.workloads else {}
    rows: list[AcctRow] = []
    order: list[int] = []  # journal position of each row's submission
    for wid, h in view.histories.items():
        s = h.submitted
        rejection = None
        if s is None:  # a submission the scheduler refused (not a refused cancel of it)
            rejection = next(
                (r for r in h.rejections if r.input_type == "workload.submitted"), None
            )
        if s is None and rejection is None:
            continue  # only mentioned (e.g. a beneficiary from before the journal began)
        who = s.actor if s is not None else rejection.actor
        path = s.allocation if s is not None else rejection.allocation
        if not matches_user(who, user):
            continue
        if allocation is not None and not (path and matches_allocation(path, allocation)):
            continue
        if ids is not None and wid not in ids and wid.rsplit("_", 1)[0] not in ids:
            continue
        name = _state(view, h)
        windowed = since is not None or until is not None
        if states is not None and not windowed and name not in states:
            continue
        submitted = s.time if s is not None else rejection.time
        running = name == "RUNNING"
        first = h.placements[0].time if h.placements else None
        ended = None if name in ("PENDING", "RUNNING") else (h.ended or {}).get("time", submitted)
        last = now if ended is None else ended
        if (since is not None and last < since) or (until is not None and submitted > until):
            continue
        runs = _runs(h, now, running)
        ran = sum(b - a for a, b, _, _ in runs)
        lo = -math.inf if since is None else since
        hi = math.inf if until is None else until
        if states is not None and windowed:
            during = _states_during(h, name, submitted, runs, ended, now, lo, hi)
            if not during & set(states):
                continue
        # GPU-seconds held, in all and inside the window: [charged, unallocated]
        gpu_s, inside = [0.0, 0.0], [0.0, 0.0]
        for a, b, held, charged in runs:
            gpu_s[not charged] += held * (b - a)
            inside[not charged] += held * max(0.0, min(b, hi) - max(a, lo))
        gpus = s.gpus if s is not None else (rejection.gpus or 0)
        last_hosts = list(h.placements[-1].hosts) if h.placements else []
        rows.append(
            {
                "id": wid,
                "name": s.name if s is not None else None,
                # sacct's Partition: allot schedules each cluster on its own
                "cluster": state.cluster,
                "allocation": path,
                "user": who,
                "state": name,
                "gpus": gpus,
                "submitted": iso(submitted),
                "submit_time": submitted,
                "start": iso(first),
                "start_time": first,
                "end": iso(ended),
                "end_time": ended,
                "wait_s": round((first if first is not None else last) - submitted, 3),
                "run_s": round(ran, 3),
                "alloc_gpus": _held(h.placements[-1]) if h.placements else None,
                # the hosts of its last placement, as alloc_gpus counts its GPUs
                "nodelist": nodelist(last_hosts),
                "alloc_nodes": len(last_hosts) if last_hosts else None,
                # held, charged or not (sacct's); charged is what the shares count
                "gpu_hours": round(sum(gpu_s) / 3600, 4),
                "charged_gpu_hours": round(gpu_s[0] / 3600, 4),
                "unallocated_gpu_hours": round(gpu_s[1] / 3600, 4),
                "window_gpu_hours": round(sum(inside) / 3600, 4),
                "window_charged_gpu_hours": round(inside[0] / 3600, 4),
                "window_unallocated_gpu_hours": round(inside[1] / 3600, 4),
                "attempts": len(h.placements),
                "preemptions": len(h.preemptions),
                "tags": list(s.tags) if s is not None else [],
                "reason": live_reason.get(wid) or _reason(h, name),
                # the launcher's exit status, as a number (sacct's ExitCode)
                "exit_code": (h.ended or {}).get("exit_code"),
            }
        )
        order.append(h.submitted_seq if s is not None else rejection.seq)
    # by submit time, then in the journal's order (as submitted)
    ranked = sorted(range(len(rows)), key=lambda i: (rows[i]["submit_time"], order[i]))
    return [rows[i] for i in ranked]


def _states_during(
    h: History,
    final: str,
    submitted: float,
    runs: list[tuple[float, float, int, bool]],
    ended: float | None,
    now: float,
    lo: float,
    hi: float,
) -> set[str]:
    """The states a workload was in at some moment of [lo, hi]."""
    out = set()
    if any(a <= hi and b >= lo for a, b, _, _ in runs):
        out.add("RUNNING")
    # pending from submission, and from each requeue, to the next start (or its end)
    starts = sorted(a for a, _, _, _ in runs)
    waits_from = [submitted, *_requeue_times(h)]
    last = now if ended is None else ended
    for t in waits_from:
        until = next((a for a in starts if a >= t), last)
        if t <= hi and until >= lo and until > t:
            out.add("PENDING")
    if ended is not None and lo <= ended <= hi:  # it ended that way inside the window
        out.add(final)
    return out


def _reason(h: History, state: str) -> str:
    """Why it ended (or is where it is), in a few words."""
    if state == "REJECTED":
        return next(r.error for r in h.rejections if r.input_type == "workload.submitted")
    if state == "CANCELLED":
        return f"by {(h.ended or {}).get('actor')}"
    if state in ("PREEMPTED", "NODE_FAIL") and h.preemptions:
        q = h.preemptions[-1]
        if q.reason == "drain":
            return f"drain (host {q.explain.get('host')} unhealthy)"
        if q.reason == "gpus_removed":
            return f"gpus_removed (host {q.explain.get('host')})"
        return f"{q.reason}" + (f" for {q.beneficiary}" if q.beneficiary else "")
    said = ended_detail(h.ended or {})  # the launcher's exit status and reason
    if state in ("COMPLETED", "FAILED", "LOST"):  # live work takes `allot queue`'s reason
        n = len(_requeue_times(h))
        lost = f" ({len(h.lost)} after a lost node)" if h.lost else ""
        return ", ".join(filter(None, [said, f"requeued {n}x{lost}" if n else ""]))
    return said


def _requeue_times(h: History) -> list[float]:
    """When it was requeued: preempted (resumable, or `allot requeue`), or lost with
    its node."""
    return sorted([q.time for q in h.preemptions if q.requeued] + [x.time for x in h.lost])


def totals(rows: list[AcctRow]) -> dict[str, Any]:
    """What the rows add up to: workloads, GPU-hours run (in all, and inside the
    window the rows were chosen by; each also split into charged and unallocated),
    workloads per state (now)."""
    by_state = Counter(r["state"] for r in rows)

    def add(key: str) -> float:
        return round(sum(r[key] for r in rows), 3)

    return {
        "workloads": len(rows),
        **{
            f"{window}{kind}gpu_hours": add(f"{window}{kind}gpu_hours")
            for window in ("", "window_")
            for kind in ("", "charged_", "unallocated_")
        },
        "by_state": {s: by_state[s] for s in STATES if by_state[s]},
    }


def split_hours(total: float, charged: float, unallocated: float) -> tuple[str, str, str]:
    """The totals line's GPU-hours `total (charged, unallocated)` as text whose parts
    add up to the total as shown: one decimal, or more (up to three) while the rounded
    parts do not (1.1 = 1.0 + 0.0 reads as 1.06 = 1.02 + 0.04). Each number stays its
    own value rounded, so the charged part is what `allot rollup` counts, at that
    precision; should three decimals still disagree (per-workload rounding), the total
    shown is the sum of the parts shown."""
    from decimal import Decimal

    for digits in (1, 2, 3):
        shown = [f"{x:.{digits}f}" for x in (total, charged, unallocated)]
        if Decimal(shown[1]) + Decimal(shown[2]) == Decimal(shown[0]):
            break
    else:
        shown[0] = str(Decimal(shown[1]) + Decimal(shown[2]))
    return (
        f"{Decimal(shown[0]):,}",
        f"{Decimal(shown[1]):,}",
        f"{Decimal(shown[2]):,}",
    )


def _dur(seconds: float) -> str:
    from domain.durations import format_duration

    return format_duration(seconds)


# name -> (header, cell); the names are --format's (sacct's --format, allot's field names)
ACCT_COLUMNS: dict[str, tuple[str, Callable[[AcctRow], str]]] = {
    "id": ("ID", lambda r: r["id"]),
    "name": ("NAME", lambda r: r["name"] or ""),
    "allocation": ("ALLOCATION", lambda r: r["allocation"] or ""),
    "user": ("USER", lambda r: r["user"]),
    "state": ("STATE", lambda r: r["state"]),
    "gpus": ("GPUS", lambda r: str(r["gpus"])),
    "alloc_gpus": ("ALLOC", lambda r: "" if r["alloc_gpus"] is None else str(r["alloc_gpus"])),
    "submitted": ("SUBMITTED", lambda r: r["submitted"] or ""),
    "start": ("START", lambda r: r["start"] or ""),
    "end": ("END", lambda r: r["end"] or ""),
    "wait": ("WAIT", lambda r: _dur(r["wait_s"])),
    "run": ("RUN", lambda r: _dur(r["run_s"])),
    "gpu_hours": ("GPU_H", lambda r: f"{r['gpu_hours']:.1f}"),
    "charged_gpu_hours": ("CHARGED_GPU_H", lambda r: f"{r['charged_gpu_hours']:.1f}"),
    "unallocated_gpu_hours": (
        "UNALLOC_GPU_H",
        lambda r: f"{r['unallocated_gpu_hours']:.1f}",
    ),
    "window_gpu_hours": ("WINDOW_GPU_H", lambda r: f"{r['window_gpu_hours']:.1f}"),
    "window_charged_gpu_hours": (
        "WINDOW_CHARGED_GPU_H",
        lambda r: f"{r['window_charged_gpu_hours']:.1f}",
    ),
    "window_unallocated_gpu_hours": (
        "WINDOW_UNALLOC_GPU_H",
        lambda r: f"{r['window_unallocated_gpu_hours']:.1f}",
    ),
    "attempts": ("N", lambda r: str(r["attempts"])),
    "preemptions": ("PREEMPTIONS", lambda r: str(r["preemptions"])),
    "tags": ("TAGS", lambda r: ",".join(r["tags"])),
    "reason": ("REASON", lambda r: r["reason"]),
    "exit_code": ("EXIT", lambda r: "" if r["exit_code"] is None else str(r["exit_code"])),
    "partition": ("PARTITION", lambda r: r["cluster"]),
    # sacct prints "None assigned" for a job that never started
    "nodelist": ("NODELIST", lambda r: r["nodelist"] or "None assigned"),
    "req_tres": ("REQ_TRES", lambda r: f"gres/gpu={r['gpus']}"),
    "alloc_tres": ("ALLOC_TRES", lambda r: _alloc_tres(r)),
}
# --long's table, and -p's and $SACCT_FORMAT-less scripts' fields (they read it whole)
LONG_ACCT_COLUMNS = [
    "id", "allocation", "user", "state", "gpus", "alloc_gpus", "submitted", "start", "end",
    "wait", "run", "gpu_hours", "attempts", "reason",
]  # fmt: skip
# the table's default, short as sacct's (lab's fits 80 columns; the long one was 180-222)
DEFAULT_ACCT_COLUMNS = ["id", "allocation", "user", "state", "gpus", "wait", "run", "gpu_hours"]
RIGHT_ALIGNED = frozenset(
    {"GPUS", "ALLOC", "WAIT", "RUN", "N", "PREEMPTIONS", "EXIT"}
    | {header for header, _ in ACCT_COLUMNS.values() if header.endswith("GPU_H")}
)


def _alloc_tres(r: AcctRow) -> str:
    """sacct's AllocTRES, the part allot knows: `gres/gpu=16,node=2` of what its last
    placement held (blank before it started, as sacct's)."""
    if r["alloc_gpus"] is None:
        return ""
    return f"gres/gpu={r['alloc_gpus']},node={r['alloc_nodes']}"


def default_acct_columns(rows: list[AcctRow], long: bool = False) -> list[str]:
    """`allot acct`'s columns: DEFAULT_ACCT_COLUMNS (LONG_ACCT_COLUMNS when `long`), with
    NAME after the id (as sacct's JobID, JobName) when any row shown has a name; none
    takes no room."""
    base = LONG_ACCT_COLUMNS if long else DEFAULT_ACCT_COLUMNS
    if not any(r["name"] for r in rows):
        return base
    return [base[0], "name", *base[1:]]


# sacct --format names for the same fields
SACCT_NAMES = {
    "jobid": "id",
    "jobname": "name",
    "account": "allocation",
    "submit": "submitted",
    "elapsed": "run",
    "reqgpus": "gpus",
    "allocgpus": "alloc_gpus",
    "exitcode": "exit_code",
    "cluster": "partition",
    "reqtres": "req_tres",
    "alloctres": "alloc_tres",
    # sacct's Planned (Reserved before Slurm 23.11): how long it waited to start
    "planned": "wait",
    "reserved": "wait",
}
# sacct fields of CPUs and memory: allot schedules GPUs and records neither
CPU_MEMORY_FIELDS = frozenset(
    {
        "alloccpus", "ncpus", "reqcpus", "reqmem", "maxrss", "averss", "maxvmsize",
        "avevmsize", "cputime", "cputimeraw", "totalcpu", "usercpu", "systemcpu",
        "avecpu", "mincpu",
    }
)  # fmt: skip


# sacct's `%N` after a field name: N characters, right-justified; `%-N`: left-justified
_FIELD_WIDTH = re.compile(r"^(?P<name>[^%]*)%(?P<width>-?\d+)$")
MAX_FIELD_WIDTH = 1000  # wider than any terminal; a typo's width would fill memory


def parse_acct_fields(spec: str) -> list[tuple[str, int | None]]:
    """`JobID,JobName%30,state%-10` (or space-separated, any case; sacct's jobid, jobname,
    account, submit, elapsed, exitcode too) -> (column name, width) pairs: the width as
    sacct's `%N` gives it (positive: right-justified, negative: left-justified), None
    without one. ValueError naming the unknown fields and listing the known."""
    fields: list[tuple[str, int | None]] = []
    unknown = []
    for token in spec.replace(",", " ").split():
        sized = _FIELD_WIDTH.match(token)
        name = (sized["name"] if sized else token).strip().lower()
        width = int(sized["width"]) if sized else None
        if width is not None and not 0 < abs(width) <= MAX_FIELD_WIDTH:
            raise ValueError(
                f"--format {spec!r}: {token}: a width is 1 to {MAX_FIELD_WIDTH:,} characters"
            )
        if name in CPU_MEMORY_FIELDS:
            raise ValueError(
                f"--format {token}: allot schedules GPUs only and records no CPUs or "
                "memory; for GPUs: ReqTRES, AllocTRES, gpus, alloc_gpus"
            )
        name = SACCT_NAMES.get(name, name)
        if name not in ACCT_COLUMNS:
            unknown.append(token.lower())
        fields.append((name, width))
    if unknown or not fields:
        raise ValueError(
            f"--format {spec!r}: {'unknown field ' + ', '.join(unknown) if unknown else 'no fields'}"
            f"; fields: {', '.join(ACCT_COLUMNS)} (a width as sacct's: name%20, name%-20)"
        )
    return fields


def parse_acct_format(spec: str) -> list[str]:
    """The column names of `parse_acct_fields`, without their widths."""
    return [name for name, _ in parse_acct_fields(spec)]


def acct_cells(rows: list[AcctRow], columns: list[str]) -> tuple[list[str], list[list[str]]]:
    headers = [ACCT_COLUMNS[c][0] for c in columns]
    return headers, [[ACCT_COLUMNS[c][1](r) for c in columns] for r in rows]


__all__ = [
    "ACCT_COLUMNS",
    "DEFAULT_ACCT_COLUMNS",
    "LONG_ACCT_COLUMNS",
    "RIGHT_ALIGNED",
    "STATES",
    "STATE_CODES",
    "acct_cells",
    "acct_rows",
    "default_acct_columns",
    "parse_acct_fields",
    "parse_acct_format",
    "totals",
]


ARRAY_TASKS_SHOWN = 20  # task lines `allot why BASE` prints before "… N more"


def array_summary(
    view: JournalView, base: str, shown: int = ARRAY_TASKS_SHOWN
) -> dict[str, Any] | None:
    """`allot why BASE` of a job array: its tasks by state, then each task's state and
    reason (as `allot acct` gives them), in index order. None when `base` is a workload's
    own id or no task BASE_<n> was submitted. The text lists the first `shown` tasks;
    `tasks` lists them all (id, index, state, reason, nodelist)."""
    from domain.state import id_order

    histories = view.histories
    if base in histories and (histories[base].submitted or histories[base].rejections):
        return None
    rows = [r for r in acct_rows(view, ids={base}) if r["id"] != base]
    if not rows:
        return None
    rows.sort(key=lambda r: id_order(r["id"]))
    state = view.require()
    counts = Counter(r["state"] for r in rows)
    # what runs and waits first, as squeue lists it; then how the others ended
    order = ("RUNNING", "PENDING", *(s for s in STATES if s not in ("RUNNING", "PENDING")))
    by_state = {s.lower(): counts[s] for s in order if counts[s]}
    live = state.workloads
    tasks = [
        {
            "id": r["id"],
            "index": int(r["id"].rsplit("_", 1)[1]),
            "state": r["state"],
            "reason": r["reason"],
            "nodelist": nodelist(live[r["id"]].hosts) if r["id"] in live else "",
        }
        for r in rows
    ]
    parts = ", ".join(f"{n:,} {s}" for s, n in by_state.items())
    text = [f"array {base}: {len(rows):,} task{'s' if len(rows) != 1 else ''} — {parts}"]
    width = max(len(t["id"]) for t in tasks[:shown])
    for t in tasks[:shown]:
        where = f" on {t['nodelist']}" if t["nodelist"] else ""
        reason = f" — {t['reason']}" if t["reason"] else ""
        text.append(f"  {t['id']:<{width}}  {t['state'].lower()}{where}{reason}")
    if len(tasks) > shown:
        text.append(f"  … {len(tasks) - shown:,} more (`allot acct -j {base}` lists every task)")
    index = tasks[0]["index"]
    text.append(f"`allot why {base}_{index}` explains one task (its numbers and history)")
    return {
        "array": base,
        "cluster": state.cluster,
        "now": iso(state.now),
        "by_state": by_state,
        "tasks": tasks,
        "text": text,
    }
