"""`allot-jsonl`: the submissions file `allot trace import` writes, and reads back.

One JSON object per line in the `workload.submitted` contract (DESIGN §4; see
`domain.events.WorkloadSubmitted`), `time` relative to the trace start. Fields the
source trace did not have (`actor`, `workload`, `min_runtime`, `resumable`,
`priority`, `runtime`, `name`) are left out, so the scenario still decides them as
for the trace itself: the submitter by the allocation's members, the id unique in
the scenario.

Files written before that carry `"actor": "trace"` and ids `w0000001`, ... for rows
the source did not name; they read as if left out (see `_legacy_actor`, `_legacy_id`).
"""

from __future__ import annotations

import math
import os
import re
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
    check_unique_id,
    check_utf8,
    checked_id,
    checked_name,
    checked_tags,
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
    }
    # an invented submitter is no member of a scenario's leaves, and invented ids
    # collide between two imported files: left out, the scenario picks both
    for key in ("actor", "workload"):
        if sub.get(key):
            record[key] = sub[key]
    record["allocation"] = sub["allocation"]
    record["gpus"] = int(sub["gpus"])
    for key in ("min_runtime", "resumable", "priority"):
        if sub.get(key) is not None:
            record[key] = sub[key]
    record["tags"] = list(sub.get("tags") or ())
    if sub.get("runtime") is not None:
        record["runtime"] = float(sub["runtime"])
    if sub.get("name"):
        record["name"] = sub["name"]
    if sub.get("one_host"):
        record["one_host"] = True
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


# what earlier imports wrote for a row the source did not name (see the module's doc)
_LEGACY_ACTOR = "trace"
_LEGACY_RECORD_ID = re.compile(r"trace-(\d+)")


def _actor(record: dict[str, Any]) -> str | None:
    actor = _text(record, "actor")
    return None if actor == _LEGACY_ACTOR else actor


def _workload(record: dict[str, Any]) -> str | None:
    workload = _text(record, "workload")
    return None if workload is not None and _legacy_id(record, workload) else workload


def _legacy_id(record: dict[str, Any], workload: str) -> bool:
    """`w0000007` in the record `trace-7`: the id an earlier import made up from the
    record's position (tied to the record's own id, so that a row a source named
    `w0000001` elsewhere in the file keeps its name)."""
    match = _LEGACY_RECORD_ID.fullmatch(str(record.get("id", "")))
    return match is not None and workload == f"w{int(match.group(1)):07d}"


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
    one_host = raw.get("one_host")
    if one_host is not None and not isinstance(one_host, bool):
        raise BadValue("one_host", f"{one_host!r} is not true or false")
    tags = raw.get("tags") or []
    if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
        raise BadValue("tags", f"{tags!r} is not a list of strings")
    sub = submission(
        time=time or 0.0,
        allocation=allocations(tenant or "", "allocation"),
        gpus=gpus,
        workload=checked_id(_workload(raw), "workload"),
        actor=checked_id(_actor(raw), "actor"),
        runtime=_number(raw, "runtime"),
        min_runtime=_number(raw, "min_runtime"),
        resumable=resumable,
        priority=_integer(raw, "priority", minimum=None),
        tags=checked_tags(tags, "tags"),
        name=checked_name(_text(raw, "name"), "name"),
        one_host=one_host,
    )
    return sub if gpus > 0 else None


def read(path: Path, allocations: Allocations, *, skip_bad: bool) -> TraceResult:
    result = TraceResult()
    first_use: dict[str, int] = {}  # workload id -> the line that named it
    for number, line in iter_lines(path):
        result.rows += 1
        try:
            check_utf8(line)
            try:
                raw = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise BadValue(None, f"not JSON: {exc}") from None
            sub = parse_record(raw, allocations)
            check_unique_id(sub, first_use, number)
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
