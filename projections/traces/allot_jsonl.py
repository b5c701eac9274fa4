"""`allot-jsonl`: the submissions file `allot trace import` writes, and reads back.

One JSON object per line in the `workload.submitted` contract (DESIGN §4; see
`domain.events.WorkloadSubmitted`), `time` relative to the trace start. Optional
contract fields the source trace did not have (`min_runtime`, `resumable`,
`priority`, `runtime`, `name`) are left out, so the scenario still decides them.
"""

from __future__ import annotations

import math
import os
import secrets
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

from projections.traces.common import (
    MAX_COUNT,
    Allocations,
    BadValue,
    Submission,
    TraceError,
    TraceResult,
    finish,
    iter_lines,
    skip_bad_row,
    submission,
)

TYPE = "workload.submitted"


def to_record(sub: Submission, n: int) -> dict[str, Any]:
    """The `workload.submitted` record for the `n`th submission (ids from the position)."""
    record: dict[str, Any] = {
        "type": TYPE,
        "v": 1,
        "id": f"trace-{n}",
        "time": float(sub["time"]),
        "cluster": "default",
        "actor": sub.get("actor") or "trace",
        "workload": sub.get("workload") or f"w{n:07d}",
        "allocation": sub["allocation"],
        "gpus": int(sub["gpus"]),
    }
    for key in ("min_runtime", "resumable", "priority"):
        if sub.get(key) is not None:
            record[key] = sub[key]
    record["tags"] = list(sub.get("tags") or ())
    if sub.get("runtime") is not None:
        record["runtime"] = float(sub["runtime"])
    if sub.get("name"):
        record["name"] = sub["name"]
    return record


def write_submissions(submissions: Iterable[Submission], out: Path) -> int:
    """Write one orjson line per submission (numbered from 1); returns how many.

    Written to a temporary file beside `out`, renamed over it once complete: a failure
    (or Ctrl-C) half-way leaves `out` as it was, never half-written."""
    out = Path(out)
    if out.is_symlink():
        out = out.resolve()  # replace the file it points to, as writing through it did
    temporary = out.with_name(f".{out.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    count = 0
    try:
        with open(temporary, "xb") as handle:
            for count, sub in enumerate(submissions, start=1):
                handle.write(orjson.dumps(to_record(sub, count), option=orjson.OPT_APPEND_NEWLINE))
        os.replace(temporary, out)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return count


def _number(record: dict[str, Any], key: str, *, required: bool = False) -> float | None:
    value = record.get(key)
    if value is None:
        if required:
            raise BadValue(key, "missing")
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise BadValue(key, f"{value!r} is not a number")
    if value < 0:
        raise BadValue(key, f"{value!r} must be >= 0")
    return float(value)


def _integer(record: dict[str, Any], key: str, *, minimum: int | None) -> int | None:
    value = record.get(key)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadValue(key, f"{value!r} is not an integer")
    if abs(value) > MAX_COUNT:
        raise BadValue(key, f"{value!r} is too large (at most {MAX_COUNT:,})")
    if minimum is not None and value < minimum:
        raise BadValue(key, f"{value!r} must be >= {minimum}")
    return value


def _text(record: dict[str, Any], key: str, *, required: bool = False) -> str | None:
    value = record.get(key)
    if value is None or value == "":
        if required:
            raise BadValue(key, "missing")
        return None
    if not isinstance(value, str):
        raise BadValue(key, f"{value!r} is not a string")
    return value


def parse_record(raw: Any, allocations: Allocations) -> Submission | None:
    """One line's object as a submission (None: it asks for no GPU)."""
    if not isinstance(raw, dict):
        raise BadValue(None, f"expected a JSON object, got {type(raw).__name__}")
    kind = raw.get("type", TYPE)
    if kind != TYPE:
        raise BadValue("type", f"{kind!r} is not {TYPE!r}")
    time = _number(raw, "time", required=True)
    tenant = _text(raw, "allocation", required=True)
    gpus = _integer(raw, "gpus", minimum=0)
    if gpus is None:
        raise BadValue("gpus", "missing")
    resumable = raw.get("resumable")
    if resumable is not None and not isinstance(resumable, bool):
        raise BadValue("resumable", f"{resumable!r} is not true or false")
    tags = raw.get("tags") or []
    if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
        raise BadValue("tags", f"{tags!r} is not a list of strings")
    sub = submission(
        time=time or 0.0,
        allocation=allocations(tenant or ""),
        gpus=gpus,
        workload=_text(raw, "workload"),
        actor=_text(raw, "actor"),
        runtime=_number(raw, "runtime"),
        min_runtime=_number(raw, "min_runtime"),
        resumable=resumable,
        priority=_integer(raw, "priority", minimum=None),
        tags=tags,
        name=_text(raw, "name"),
    )
    return sub if gpus > 0 else None


def read(path: Path, allocations: Allocations, *, skip_bad: bool) -> TraceResult:
    result = TraceResult()
    for number, line in iter_lines(path):
        result.rows += 1
        try:
            try:
                raw = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise BadValue(None, f"not JSON: {exc}") from None
            sub = parse_record(raw, allocations)
        except BadValue as exc:
            where = f" field {exc.column}:" if exc.column else ""
            message = f"{path}:{number}:{where} {exc.message}"
            if skip_bad:
                skip_bad_row(result, message)
                continue
            raise TraceError(message, row_error=True) from None
        if sub is None:
            result.skipped_no_gpu += 1
        else:
            result.submissions.append(sub)
    return finish(result, rebase=False)
