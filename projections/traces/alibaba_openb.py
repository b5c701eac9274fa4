"""`alibaba-openb`: Alibaba's GPU pod list (clusterdata `cluster-trace-gpu-v2023`,
`openb_pod_list_*.csv`).

Header `name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,
creation_time,deletion_time,scheduled_time`; times are seconds (the published
files start near 0). Semantics, as documented with the trace:

- `num_gpu` is the GPU count (0-8); `gpu_milli` is the share of *one* GPU, in
  thousandths, that a GPU-sharing pod (`num_gpu == 1`) asks for. A fractional pod
  still needs a whole GPU here, so GPUs = ceil(num_gpu). `num_gpu == 0` (CPU-only
  pods) is no GPU work: skipped and counted (`skipped_no_gpu`) whatever its other
  cells hold.
- Submit time = `creation_time`; the pod ran from `scheduled_time` (or its creation,
  if that is later: no pod ran before it existed) to `deletion_time`. An empty or 0
  `deletion_time` means the pod never ended (it runs until the horizon).
- A pod never scheduled is skipped and counted (`skipped_unscheduled`), not imported:
  `scheduled_time` empty (the trace's `Pending` pods, deleted while waiting), 0 for a
  pod created later (0 stands for "none", as it does for `deletion_time`), or after
  the pod's `deletion_time`. Such a pod never ran, so nothing says how long it would
  have: importing it with `deletion - creation` as its runtime (as this reader once
  did) made up work, which a policy comparison then charged and waited for. Without
  a `scheduled_time` column, `pod_phase` `Pending` marks them. A pod deleted before it
  was created is a malformed row.
- Pods still running when the trace was cut carry the cut as their `deletion_time`
  (12902960 s, about 149 days, in `openb_pod_list_default.csv`; each sampled sibling
  has its own), not an empty cell. The cut is the file's latest `deletion_time` when
  at least two pods share it; a pod deleted then whose `pod_phase` does not say it
  ended (`Succeeded`, `Failed`) is imported as never ended (runtime None, so it runs
  until the horizon) and counted in `running_at_cut`. Imported as ending at the cut,
  it looked finished: a simulation ended it there, and under a policy that started it
  later, after the trace. `pod_phase` alone says nothing of this: the published files
  give `Running` to most pods deleted long before the cut.
- `pod_phase` otherwise: `Pending` pods that were scheduled (a `scheduled_time`) held
  a node and are kept; `Failed` pods ran from their schedule to their deletion.
- Times are rebased: the earliest imported pod is submitted at 0. The published
  files share one origin (`openb_pod_list_default.csv` starts at 0); the sampled
  siblings (`gpushare*`, `cpu*`, `gpuspec*`) start later and are not sorted by
  `creation_time` (submissions are).
- The `multigpu*` siblings have only `name,cpu_milli,memory_mib,num_gpu,gpu_milli`:
  no times nor qos, so nothing to replay. They are refused, saying so, not
  imported as pods all submitted at once that never end.
- `qos` (LS, BE, Burstable, Guaranteed, ...) becomes a tag and is the tenant mapped
  to an allocation; `name` becomes the submission's name. Other columns are ignored
  (`pod_phase` but for the cases above).
"""

from __future__ import annotations

import math
from pathlib import Path

from projections.traces.common import (
    MAX_COUNT,
    Allocations,
    BadValue,
    NeverRan,
    Row,
    Submission,
    TraceError,
    TraceResult,
    checked_name,
    checked_tags,
    finish,
    first_line,
    header_names,
    is_missing,
    optional_text,
    parse_number,
    read_csv,
    require,
    submission,
)

REQUIRED = ("name", "num_gpu", "qos", "creation_time", "deletion_time")
OPTIONAL = ("cpu_milli", "memory_mib", "gpu_milli", "gpu_spec", "pod_phase", "scheduled_time")


TIME_COLUMNS = ("creation_time", "deletion_time")


# phases that say the pod had ended when the trace saw it last
ENDED_PHASES = frozenset({"succeeded", "failed"})


def read(path: Path, allocations: Allocations, *, skip_bad: bool) -> TraceResult:
    _refuse_pod_list_without_times(path)
    deletions: list[float] = []  # every row's deletion_time, CPU-only pods' too: the cut
    may_run_past: dict[int, float] = {}  # id(submission) -> its deletion_time

    def parse_row(row: Row) -> Submission | None:
        deletions.append(_loose_time(row["deletion_time"]))
        num_gpu = parse_number(row["num_gpu"], "num_gpu")
        if num_gpu == 0:  # a CPU-only pod: no GPU work, whatever else its row says
            return None
        if num_gpu > MAX_COUNT:
            raise BadValue("num_gpu", f"{row['num_gpu']!r} is too large (at most {MAX_COUNT:,})")
        qos = require(row["qos"], "qos")
        created = parse_number(row["creation_time"], "creation_time")
        deletion_text = row["deletion_time"]
        deleted = (
            None if is_missing(deletion_text) else parse_number(deletion_text, "deletion_time")
        )
        scheduled_text = row["scheduled_time"]
        scheduled = (
            None if is_missing(scheduled_text) else parse_number(scheduled_text, "scheduled_time")
        )
        if deleted and deleted < created:  # empty or 0: still running when the trace was cut
            raise BadValue(
                "deletion_time", f"{deletion_text!r} is before creation_time {created:g}"
            )
        start = _start(row, created, scheduled, deleted)
        sub = submission(
            time=created,
            allocation=allocations(qos, "qos"),
            gpus=math.ceil(num_gpu),
            runtime=max(0.0, deleted - start) if deleted else None,
            runtime_column="deletion_time",
            tags=checked_tags([qos], "qos"),
            name=checked_name(optional_text(row["name"]), "name"),
        )
        if deleted and row["pod_phase"].lower() not in ENDED_PHASES:
            may_run_past[id(sub)] = deleted
        return sub

    result = read_csv(path, required=REQUIRED, parse_row=parse_row, skip_bad=skip_bad)
    cut = _cut(deletions)
    if cut is not None:
        for sub in result.submissions:
            if may_run_past.get(id(sub)) == cut:
                sub["runtime"] = None
                result.running_at_cut += 1
    return finish(result, rebase=True)


def _loose_time(text: str) -> float:
    """A deletion_time for finding the cut; 0 for one that is empty or unreadable (the
    row's own parse reports it, if it is a GPU pod's)."""
    try:
        return float(text)
    except ValueError:
        return 0.0


def _cut(deletions: list[float]) -> float | None:
    """When the trace was cut: its latest deletion_time, if at least two pods share it
    (one pod deleted last is a deletion, not a cut); None if none is."""
    latest = max(deletions, default=0.0)
    if latest <= 0 or not math.isfinite(latest) or deletions.count(latest) < 2:
        return None
    return latest


def _start(row: Row, created: float, scheduled: float | None, deleted: float | None) -> float:
    """When the pod began running (no pod ran before it was created); NeverRan if it
    was never scheduled while it existed."""
    if not row.has("scheduled_time"):  # nothing says when: from creation, unless Pending
        if row["pod_phase"].lower() == "pending":
            raise NeverRan
        return created
    if scheduled is None or (scheduled == 0 and created > 0) or (deleted and scheduled > deleted):
        raise NeverRan
    return max(created, scheduled)


def _refuse_pod_list_without_times(path: Path) -> None:
    """A pod list with GPU requests but no times (the published `multigpu*` files,
    made for packing experiments) says nothing about when pods came or how long
    they ran: refused with that reason, not the bare list of missing columns."""
    line = first_line(path)
    names = header_names(line) if line else set()
    if {"name", "num_gpu"} <= names and not names & set(TIME_COLUMNS):
        raise TraceError(
            f"{path}: a pod list without {' or '.join(TIME_COLUMNS)} (like Alibaba's "
            "openb_pod_list_multigpu*.csv, made for packing experiments): it says neither "
            "when pods were submitted nor how long they ran, so there is nothing to replay; "
            "use openb_pod_list_default.csv or a sibling with times"
        )
