"""`alibaba-openb`: Alibaba's GPU pod list (clusterdata `cluster-trace-gpu-v2023`,
`openb_pod_list_*.csv`).

Header `name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,
creation_time,deletion_time,scheduled_time`; times are seconds (the published
files start near 0). Semantics, as documented with the trace:

- `num_gpu` is the GPU count (0-8); `gpu_milli` is the share of *one* GPU, in
  thousandths, that a GPU-sharing pod (`num_gpu == 1`) asks for. A fractional pod
  still needs a whole GPU here, so GPUs = ceil(num_gpu); `num_gpu == 0` (CPU-only
  pods) is skipped and counted.
- Submit time = `creation_time`. The pod starts at `scheduled_time`, which is empty
  for pods deleted before being scheduled (`pod_phase` Pending); they start at
  `creation_time` instead, as do pods whose `scheduled_time` is 0 or before their
  creation (no pod ran before it existed). Runtime = `deletion_time - start`; an
  empty or 0 `deletion_time` means the pod never ended (it runs until the horizon). A pod
  scheduled after its deletion did no work (runtime 0); one deleted before it was
  created is a malformed row.
- `qos` (LS, BE, Burstable, Guaranteed, ...) becomes a tag and is the tenant mapped
  to an allocation; `name` becomes the submission's name. Other columns are ignored.
"""

from __future__ import annotations

import math
from pathlib import Path

from projections.traces.common import (
    MAX_COUNT,
    Allocations,
    BadValue,
    Row,
    Submission,
    TraceResult,
    checked_name,
    checked_tags,
    finish,
    is_missing,
    optional_text,
    parse_number,
    read_csv,
    require,
    submission,
)

REQUIRED = ("name", "num_gpu", "qos", "creation_time", "deletion_time")
OPTIONAL = ("cpu_milli", "memory_mib", "gpu_milli", "gpu_spec", "pod_phase", "scheduled_time")


def read(path: Path, allocations: Allocations, *, skip_bad: bool) -> TraceResult:
    def parse_row(row: Row) -> Submission | None:
        num_gpu = parse_number(row["num_gpu"], "num_gpu")
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
        if num_gpu == 0:
            return None
        if num_gpu > MAX_COUNT:
            raise BadValue("num_gpu", f"{row['num_gpu']!r} is too large (at most {MAX_COUNT:,})")
        runtime: float | None = None
        if deleted:  # empty or 0: still running when the trace was cut
            if deleted < created:
                raise BadValue(
                    "deletion_time", f"{deletion_text!r} is before creation_time {created:g}"
                )
            runtime = max(0.0, deleted - _start(created, scheduled))
        return submission(
            time=created,
            allocation=allocations(qos, "qos"),
            gpus=math.ceil(num_gpu),
            runtime=runtime,
            runtime_column="deletion_time",
            tags=checked_tags([qos], "qos"),
            name=checked_name(optional_text(row["name"]), "name"),
        )

    return finish(
        read_csv(path, required=REQUIRED, parse_row=parse_row, skip_bad=skip_bad), rebase=True
    )


def _start(created: float, scheduled: float | None) -> float:
    """When the pod began running: a scheduled time of 0, like an empty one, means never
    scheduled (0 - creation made a pod run longer than it existed), and no pod ran
    before it was created."""
    if not scheduled:
        return created
    return max(created, scheduled)
