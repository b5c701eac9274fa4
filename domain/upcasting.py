"""Upcasters: turn an old version of a record into the current one, so old journals replay.

An upcaster maps `(type, v)` to a function from the raw dict at version `v` to the
raw dict at `v + 1`. `upcast` applies them until no upcaster matches. A field's
meaning never changes within one `v`; any change of meaning bumps `v` and adds an
upcaster here, with a test in `tests/domain/test_upcasting.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Raw = dict[str, Any]
UPCASTERS: dict[tuple[str, int], Callable[[Raw], Raw]] = {}
CURRENT_VERSION = 1


def upcaster(
    event_type: str, from_version: int
) -> Callable[[Callable[[Raw], Raw]], Callable[[Raw], Raw]]:
    def register(fn: Callable[[Raw], Raw]) -> Callable[[Raw], Raw]:
        UPCASTERS[(event_type, from_version)] = fn
        return fn

    return register


def upcast(raw: Raw) -> Raw:
    """`raw` at the newest version known; records without `v` are taken as v1."""
    version = raw.get("v", CURRENT_VERSION)
    while isinstance(version, int) and (step := UPCASTERS.get((raw.get("type"), version))):
        raw = step(raw)
        version += 1
        raw["v"] = version
    return raw


@upcaster("workload.submitted", 0)
def _submitted_v0(raw: Raw) -> Raw:
    """v0 (the pre-release draft submit tool) sent `gpu_count`, `min_runtime_minutes`
    and `preemptible` (true meant: may be stopped and requeued)."""
    out = {
        k: v for k, v in raw.items() if k not in ("gpu_count", "min_runtime_minutes", "preemptible")
    }
    if "gpu_count" in raw:
        out.setdefault("gpus", raw["gpu_count"])
    if "min_runtime_minutes" in raw:
        minutes = raw["min_runtime_minutes"]
        # a non-number is passed on as is, so validation rejects it (never silently 0)
        numeric = isinstance(minutes, int | float) and not isinstance(minutes, bool)
        out.setdefault("min_runtime", float(minutes) * 60.0 if numeric else minutes)
    if "preemptible" in raw:
        out.setdefault("resumable", bool(raw["preemptible"]))
    return out
