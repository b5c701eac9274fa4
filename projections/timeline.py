"""One workload's history as a timeline: every attempt, from the journal's records about it.

    entries = timeline(records)          # records: journal-shaped dicts, journal order
    lines = timeline_text(entries)       # one line per entry (plus indented numbers)

`allot why` builds it from either source and both give the same entries for the same
journal: the records a folded journal keeps (`projections.views.history_records`) or
the rows of the audit database (`projections.audit.workload_records`).

An entry is a dict with `time` (ISO, UTC), `t` (epoch seconds), `event` and, by event:

- `submitted`: `actor`, `allocation`, `gpus`, `min_runtime`, `resumable`, `priority`,
  `tags`, `name`;
- `placed`: `attempt`, `hosts` (host -> GPU indices), `gpus`, `charged`,
  `protected_until` (ISO; None for legacy non-preemptible), `explain`;
- `preempted`: `attempt`, `reason`, `beneficiary`, `requeued`, `explain` (the numbers
  compared: ratios, hysteresis, ranks, running vs entitled, ...), `ran_s` (how long the
  attempt ran, as `allot preemptions` says it: `projections.history.ran_seconds`);
- `requeued`: `attempt` (the one that was preempted; the next placement starts the next);
- `finished`: `actor`, `attempt` (the latest placement's when the report names none),
  `outcome`, `requeued` (a lost attempt of resumable work, followed by `requeued`);
- `cancelled`: `actor`;
- `rejected`: `actor`, `type`, `ref`, `error`, `input_type`.

Pure and cheap to import (no pydantic, no domain package): the audit path of
`allot why` stays fast.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import sys
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

from projections.history import ran_seconds

TYPES = (
    "workload.submitted",
    "workload.placed",
    "workload.preempted",
    "workload.held",
    "workload.released",
)
ENDS = ("workload.finished", "workload.cancelled")


def domain_module(name: str) -> ModuleType:
    """`domain.<name>` for a dependency-free module of the core (`durations`,
    `upcasting`), without running the `domain` package's `__init__`: that imports the
    whole scheduler and its pydantic models, about 0.3 s of start-up that the audit
    presets do not need. The real module when `domain` is imported already."""
    real = sys.modules.get(f"domain.{name}")
    if real is not None:
        return real
    if "domain" in sys.modules:
        return importlib.import_module(f"domain.{name}")
    alias = f"_allot_standalone_domain_{name}"
    module = sys.modules.get(alias)
    if module is None:
        package = importlib.util.find_spec("domain")  # finds the package, runs nothing
        if package is None or not package.submodule_search_locations:
            return importlib.import_module(f"domain.{name}")
        path = Path(next(iter(package.submodule_search_locations))) / f"{name}.py"
        spec = importlib.util.spec_from_file_location(alias, path)
        if spec is None or spec.loader is None:
            return importlib.import_module(f"domain.{name}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[alias] = module
        spec.loader.exec_module(module)
    return module


def iso(t: float | None) -> str | None:
    """`2026-01-01 00:30:00` (UTC), as `allot why` prints times."""
    if not isinstance(t, int | float) or isinstance(t, bool) or not math.isfinite(t):
        return None
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S")


def about(record: Mapping[str, Any]) -> bool:
    """True for the record types a workload's timeline shows."""
    kind = record.get("type")
    return isinstance(kind, str) and (kind in TYPES or kind in ENDS or kind.endswith(".rejected"))


def timeline(records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The entries for one workload's records (journal order); other types are skipped."""
    out: list[dict[str, Any]] = []
    attempt: Any = None  # of the latest placement: a report that names none is about it
    placed_at: dict[tuple[Any, Any], Any] = {}  # (attempt, cluster): when it was placed
    for r in records:
        kind = r.get("type")
        if not isinstance(kind, str) or not about(r):
            continue
        t = r.get("time")
        head: dict[str, Any] = {"time": iso(t), "t": t}
        if kind == "workload.submitted":
            out.append(
                {
                    **head,
                    "event": "submitted",
                    "actor": r.get("actor"),
                    "allocation": r.get("allocation"),
                    "gpus": r.get("gpus"),
                    "min_runtime": float(r.get("min_runtime") or 0.0),
                    "resumable": bool(r.get("resumable", False)),
                    "priority": r.get("priority", 0),
                    "tags": list(r.get("tags") or ()),
                    "name": r.get("name"),
                    "one_host": bool(r.get("one_host")),
                }
            )
        elif kind == "workload.placed":
            hosts = {str(h): list(g) for h, g in (r.get("hosts") or {}).items()}
            protected = r.get("protected_until")
            placed_at.setdefault((r.get("attempt"), r.get("cluster")), t)
            out.append(
                {
                    **head,
                    "event": "placed",
                    "attempt": (attempt := r.get("attempt", 1)),
                    "hosts": hosts,
                    "gpus": sum(len(g) for g in hosts.values()),
                    "charged": bool(r.get("charged")),
                    "protected_until": iso(protected),
                    "explain": dict(r.get("explain") or {}),
                }
            )
        elif kind == "workload.preempted":
            preempted = r.get("attempt", 1)
            requeued = bool(r.get("requeued"))
            explain = dict(r.get("explain") or {})
            began = placed_at.get((r.get("attempt"), r.get("cluster")))
            out.append(
                {
                    **head,
                    "event": "preempted",
                    "attempt": preempted,
                    "reason": r.get("reason"),
                    "beneficiary": r.get("beneficiary"),
                    "requeued": requeued,
                    "explain": explain,
                    "ran_s": _ran(explain, t, began),
                }
            )
            if requeued:
                out.append({**head, "event": "requeued", "attempt": preempted})
        elif kind == "workload.finished":
            ended = r.get("attempt") if r.get("attempt") is not None else attempt
            requeued = bool(r.get("requeued"))
            out.append(
                {
                    **head,
                    "event": "finished",
                    "actor": r.get("actor"),
                    "attempt": ended,
                    "outcome": r.get("outcome") or "completed",
                    "requeued": requeued,
                }
            )
            if requeued:
                out.append({**head, "event": "requeued", "attempt": ended})
        elif kind in ("workload.cancelled", "workload.held", "workload.released"):
            out.append({**head, "event": kind.split(".", 1)[1], "actor": r.get("actor")})
        else:
            out.append(
                {
                    **head,
                    "event": "rejected",
                    "actor": r.get("actor"),
                    "type": kind,
                    "ref": r.get("ref"),
                    "error": r.get("error"),
                    "input_type": r.get("input_type"),
                }
            )
    return out


def last_state(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """What the timeline's last entry says the workload is doing (`state`, `text`)."""
    format_duration = domain_module("durations").format_duration

    last = next((e for e in reversed(entries) if e["event"] != "rejected"), None)
    if last is None:
        return {"state": "REJECTED" if entries else "UNKNOWN", "text": "never accepted"}
    event, when = last["event"], last["time"]
    if event in ("submitted", "requeued", "released"):
        return {"state": "PENDING", "text": f"pending since {when}"}
    if event == "held":
        return {"state": "PENDING", "text": f"held by {last['actor']} since {when}"}
    if event == "placed":
        terms = (
            f"protected until {last['protected_until']}"
            if last["charged"] and last["protected_until"]
            else "preemptible (unallocated)"
            if not last["charged"]
            else "non-preemptible until it ends"
        )
        ran = ""
        latest = max((e["t"] for e in entries if isinstance(e["t"], int | float)), default=None)
        if latest is not None and isinstance(last["t"], int | float) and latest > last["t"]:
            ran = f" ({format_duration(latest - last['t'])} before the last entry)"
        return {
            "state": "RUNNING",
            "text": f"running attempt {last['attempt']} since {when}{ran}; {terms}",
        }
    if event == "preempted":
        return {"state": "PREEMPTED", "text": f"ended at {when}: preempted and not resumable"}
    if event == "finished":
        return {"state": "FINISHED", "text": f"finished ({last['outcome']}) at {when}"}
    return {"state": "CANCELLED", "text": f"cancelled by {last['actor']} at {when}"}


def timeline_text(entries: list[dict[str, Any]]) -> list[str]:
    """Lines for people: `TIME  EVENT  details`, numbers indented below."""
    format_duration = domain_module("durations").format_duration

    lines: list[str] = []
    for e in entries:
        event = e["event"]
        label = event if "attempt" not in e or e["attempt"] is None else f"{event} #{e['attempt']}"
        head = f"  {e['time'] or '?':19}  {label:15}"
        if event == "submitted":
            bits = [
                str(e["allocation"]),
                f"{e['gpus']} GPU{'s' if e['gpus'] != 1 else ''}"
                + (" on one host" if e.get("one_host") else ""),
                f"min runtime {format_duration(e['min_runtime'])}",
                "resumable" if e["resumable"] else "not resumable",
                f"priority {e['priority']}",
            ]
            if e["tags"]:
                bits.append(f"tags {','.join(e['tags'])}")
            lines.append(f"{head}by {e['actor']}: {', '.join(bits)}")
        elif event == "placed":
            hosts = "; ".join(f"{h} GPUs {_span(g)}" for h, g in e["hosts"].items())
            if not e["charged"]:
                terms = "unallocated (free, preemptible)"
            elif e["protected_until"]:
                terms = f"charged, protected until {e['protected_until']}"
            else:
                terms = "charged, non-preemptible until it ends"
            gpus = f"{e['gpus']} GPU{'' if e['gpus'] == 1 else 's'}"
            lines.append(f"{head}on {hosts} ({gpus}), {terms}")
            numbers = _numbers(e["explain"], ("rank", "ratio", "share", "position", "policy"))
            victims = e["explain"].get("preempted")
            if isinstance(victims, list) and victims:
                numbers.append(f"preempted {', '.join(str(v) for v in victims)}")
            if numbers:
                lines.append(" " * 38 + ", ".join(numbers))
        elif event == "preempted":
            x = e["explain"]
            by = f" for {e['beneficiary']}" if e["beneficiary"] else ""
            if e["beneficiary"] and x.get("beneficiary_allocation"):
                by += f" ({x['beneficiary_allocation']})"
            ran = e.get("ran_s")
            ran_text = f" after {format_duration(ran)}" if ran is not None else ""
            rule = f", rule {x['rule']}" if x.get("rule") else ""
            if x.get("requested_by"):
                by = f" by {x['requested_by']} (allot requeue)"
            lines.append(f"{head}{e['reason']}{rule}{by}{ran_text}")
            numbers = []
            compared = x.get("compared")
            if isinstance(compared, dict) and compared:
                pairs = ", ".join(f"{k} {_ratio(v)}" for k, v in compared.items())
                numbers.append(f"ratios {pairs} (hysteresis {_num(x.get('hysteresis'))})")
            if x.get("beneficiary_rank") is not None or x.get("victim_rank") is not None:
                numbers.append(
                    f"ranks: beneficiary {x.get('beneficiary_rank')}, victim {x.get('victim_rank')}"
                )
            rve = x.get("running_vs_entitled")
            if isinstance(rve, dict) and rve:
                numbers.append(
                    "running/entitled "
                    + ", ".join(
                        f"{k} {v[0]}/{_num(v[1])}"
                        for k, v in rve.items()
                        if isinstance(v, list | tuple) and len(v) == 2
                    )
                )
            if x.get("host"):
                numbers.append(f"host {x['host']}")
            if numbers:
                lines.append(" " * 38 + "; ".join(numbers))
        elif event == "requeued":
            lines.append(f"{head}waits again with its original submit time")
        elif event == "finished":
            lost = ": its node was lost" if e["outcome"] == "lost" else ""
            lines.append(f"{head}{e['outcome']} (reported by {e['actor']}){lost}")
        elif event in ("cancelled", "held"):
            lines.append(f"{head}by {e['actor']}")
        elif event == "released":
            lines.append(f"{head}by {e['actor']}: waits again with its original submit time")
        else:
            what = e["input_type"] or e["type"]
            lines.append(f"{head}{what} request {e['ref']} from {e['actor']}: {e['error']}")
    return lines


def _ran(explain: dict[str, Any], t: Any, placed_at: Any) -> float | None:
    """The attempt's run time; None for a record without a usable time."""
    if not isinstance(t, int | float) or isinstance(t, bool):
        return None
    began = placed_at if isinstance(placed_at, int | float) else None
    return ran_seconds(explain, float(t), began)


def _span(gpus: list[Any]) -> str:
    g = sorted(int(x) for x in gpus)
    if len(g) > 1 and g == list(range(g[0], g[-1] + 1)):
        return f"{g[0]}-{g[-1]}"
    return ",".join(str(x) for x in g)


def _num(x: Any) -> str:
    if isinstance(x, bool) or not isinstance(x, int | float):
        return "-" if x is None else str(x)
    if not math.isfinite(x):
        return "inf"
    return f"{x:.4g}"


def _ratio(x: Any) -> str:
    """A fair-share ratio: the journal's null is infinite (a zero share), `inf` as
    `allot shares` prints it."""
    return "inf" if x is None else _num(x)


def _numbers(explain: Mapping[str, Any], keys: tuple[str, ...]) -> list[str]:
    out = []
    for key in keys:
        value = explain.get(key)
        if key == "ratio" and key in explain:  # null: infinite (explain has it if ranked)
            out.append(f"ratio {_ratio(value)}")
        elif value is not None:
            out.append(f"{key} {_num(value) if key != 'policy' else value}")
    return out
