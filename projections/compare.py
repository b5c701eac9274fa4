"""Compare two runs' summaries: what changed for whom."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from projections.journal import JournalError
from projections.simulate import format_value
from projections.simulate import summary_value as _get
from projections.summary import how_it_ended

# what every summary.json of `allot simulate`/`replay` has (issue 3's schema)
_REQUIRED = ("policy", "workloads", "delivered", "wait_s")


def load_summary(folder: Path) -> dict[str, Any]:
    if not folder.exists():
        raise JournalError(f"{folder}: no such folder; pass a run folder such as out/fairshare")
    path = folder / "summary.json" if folder.is_dir() else folder
    if not path.exists():
        raise JournalError(f"{folder}: no summary.json here; pass {_run_folders(folder)}")
    if path.name != "summary.json" and (path.parent / "summary.json").exists():
        # a run's journal.jsonl (the file an analyst just replayed) read as a summary
        # was "not valid JSON (unexpected content after document ...)"
        raise JournalError(f"{folder}: not a summary; pass its run folder {path.parent}")
    try:
        summary = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as why:
        raise JournalError(f"{path}: not valid JSON ({why})") from None
    missing = (
        list(_REQUIRED)
        if not isinstance(summary, dict)
        else [k for k in _REQUIRED if not isinstance(summary.get(k), dict | str)]
    )
    if missing:
        raise JournalError(
            f"{path}: not the summary of a run (no {', '.join(missing)}); pass a folder "
            "`allot simulate` or `allot replay` wrote"
        )
    return summary


def _run_folders(folder: Path) -> str:
    """What to pass instead of `folder`: the runs it holds (the --out folder of a
    simulation of several policies holds one per policy), or the usual form."""
    runs = (
        sorted(sub for sub in folder.iterdir() if (sub / "summary.json").is_file())
        if folder.is_dir()
        else []
    )
    if not runs:
        return "a run folder such as out/fairshare"
    named = " or ".join(str(run) for run in runs[:3])
    return f"one of the runs in it: {named}" + (" ..." if len(runs) > 3 else "")


def different_inputs(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """Why two runs look like runs of different inputs (another start, another number
    of submissions, accepted or not), or None: comparing them then says little about a
    policy or a budget. (Their ends may differ: a run without a horizon lasts until its
    work has ended.)"""

    def inputs(s: dict[str, Any]) -> tuple[Any, int]:
        counts = s.get("workloads") or {}
        total = (counts.get("submitted") or 0) + (counts.get("rejected") or 0)
        return (s.get("period") or {}).get("start_iso"), total

    (start_a, total_a), (start_b, total_b) = inputs(a), inputs(b)
    if start_a != start_b:
        return f"they start at different times ({start_a} and {start_b})"
    if total_a != total_b:
        return f"they were given different numbers of submissions ({total_a:,} and {total_b:,})"
    return None


def _period(summary: dict[str, Any]) -> tuple[str, str, str] | None:
    """(start, end, how it ended in words) of the simulated period a summary measured,
    or None when it does not say (a summary from before periods were kept)."""
    period = summary.get("period")
    if not isinstance(period, dict):
        return None
    start, end = period.get("start_iso"), period.get("end_iso")
    if not isinstance(start, str) or not isinstance(end, str):
        return None
    how = how_it_ended(summary)
    if not how:  # written before `ended` was kept: the horizon flag, if that
        horizon = period.get("horizon")
        how = {True: "at an end fixed before the run", False: "when its work ended"}.get(
            horizon if isinstance(horizon, bool) else None, ""
        )
    return start, end, how


def _describe(period: tuple[str, str, str]) -> str:
    start, end, how = period
    return f"{start} to {end}" + (f", {how}" if how else "")


def different_periods(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """One line when two runs measured different simulated periods (other horizons, or
    runs without one that ended at different times): their waits, counts and delivered
    shares are then measured over different spans, so their differences are not the
    policy's alone. None when the periods match or a summary does not record its own."""
    pa, pb = _period(a), _period(b)
    if pa is None or pb is None or pa[:2] == pb[:2]:
        return None
    return (
        f"these runs cover different periods (A: {_describe(pa)}; B: {_describe(pb)}): "
        "waits, counts and delivered are not comparable; give both the same horizon"
    )


def policies_periods_differ(summaries: dict[str, dict[str, Any]]) -> str | None:
    """`different_periods` for the runs of one scenario under several policies (named):
    without a horizon each ends when its own work does."""
    periods = {name: _period(s) for name, s in summaries.items()}
    known = {name: p for name, p in periods.items() if p is not None}
    if len({p[:2] for p in known.values()}) < 2:
        return None
    shown = "; ".join(f"{name}: {_describe(p)}" for name, p in known.items())
    return (
        f"the policies' runs cover different periods ({shown}): waits, counts and "
        "delivered are not comparable; give the scenario a horizon"
    )


def unknown_period(summary: dict[str, Any]) -> bool:
    """Whether a summary does not say which simulated period it measured."""
    return _period(summary) is None


def _keys(summary: dict[str, Any], *keys: str) -> list[str]:
    """The names under a mapping of the summary (none if it is not one)."""
    found = _get(summary, *keys)
    return [str(k) for k in found] if isinstance(found, dict) else []


def _change(a: Any, b: Any, kind: str) -> str:
    if not isinstance(a, int | float) or not isinstance(b, int | float):
        return ""
    delta = b - a
    if kind == "seconds":
        shown = format_value(abs(delta), "seconds")
        return ("-" if delta < 0 and shown != "0s" else "+") + shown
    if isinstance(delta, float):
        # a difference that rounds away is shown as none ("+0.000"), not as "-0.000"
        delta = round(delta, 1 if kind == "number" else 3) + 0.0
    if kind == "ratio":
        return f"{delta:+.3f}"
    if kind == "number":
        return f"{delta:+,.1f}"
    return f"{delta:+,}" if isinstance(delta, int) else f"{delta:+.3f}"


def _differences(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """Rows for the config keys and budget weights in force at the end of each run that
    differ (a change made during one run shows only if its end state differs; summaries
    from before these were recorded have neither: no rows)."""
    from domain.config import DURATION_KEYS

    rows = []
    for label, key in (("config", "config"), ("weight", "weights")):
        va, vb = _get(a, key), _get(b, key)
        if not isinstance(va, dict) or not isinstance(vb, dict):
            continue
        for name in sorted({*va, *vb}):
            if va.get(name) == vb.get(name):
                continue
            kind = "seconds" if label == "config" and name in DURATION_KEYS else ""
            shown = [_show(v.get(name), kind) for v in (va, vb)]
            rows.append((f"{label} {name}", *shown, _change(va.get(name), vb.get(name), kind)))
    return rows


def _show(value: Any, kind: str) -> str:
    if value is None:
        return "—"
    if kind == "seconds" and isinstance(value, int | float):
        return format_value(value, "seconds")
    if isinstance(value, list):
        return ",".join(map(str, value)) or "—"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in sorted(value.items())) or "—"
    return f"{value:g}" if isinstance(value, float) else str(value)


def compare_summaries(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """Rows (metric, A, B, change)."""
    specs: list[tuple[str, tuple[str, ...], str]] = [
        ("policy", ("policy",), "text"),
        ("delivered overall", ("delivered", "overall"), "ratio"),
        ("delivered min", ("delivered", "min"), "ratio"),
        ("occupancy", ("occupancy",), "ratio"),
        ("occupancy (contended)", ("occupancy_contended",), "ratio"),
        ("idle GPU-h while work waited", ("contended_idle", "gpu_hours"), "number"),
        ("  of it on headroom hosts", ("contended_idle", "headroom_gpu_hours"), "number"),
        ("preemptions", ("preemptions",), "count"),
        ("workloads preempted", ("workloads", "preempted"), "count"),
        # preempted work that is not resumable ends: work thrown away, not delayed
        ("  of them ended, not requeued", ("workloads", "preempted_terminal"), "count"),
        ("workloads completed", ("workloads", "completed"), "count"),
        ("attempts lost with their node", ("lost_attempts", "all"), "count"),
        ("wait p50 (all)", ("wait_s", "all", "p50"), "seconds"),
        ("wait p90 (all)", ("wait_s", "all", "p90"), "seconds"),
    ]
    specs.append(("never started (all)", ("wait_s", "all", "unplaced"), "count"))
    tags = sorted({*_keys(a, "wait_s", "by_tag"), *_keys(b, "wait_s", "by_tag")})
    for tag in tags:
        specs.append((f"wait p50 ({tag})", ("wait_s", "by_tag", tag, "p50"), "seconds"))
        specs.append((f"wait p90 ({tag})", ("wait_s", "by_tag", tag, "p90"), "seconds"))
        # the percentiles are of started work: a policy that starts almost none of a
        # tag's work shows only those few waits
        specs.append((f"never started ({tag})", ("wait_s", "by_tag", tag, "unplaced"), "count"))
    leaves = sorted(
        {
            *_keys(a, "delivered", "by_allocation"),
            *_keys(b, "delivered", "by_allocation"),
            *_keys(a, "wait_s", "by_allocation"),
            *_keys(b, "wait_s", "by_allocation"),
        }
    )
    # who waits longer, by allocation: a budget change moves waits between projects
    # that share a tag (and `delivered`, measured against each run's own shares, can
    # read 1.000 for all of them in both runs)
    for leaf in leaves:
        waits = ("wait_s", "by_allocation", leaf)
        specs += [
            (f"{leaf}: delivered", ("delivered", "by_allocation", leaf), "ratio"),
            (
                f"{leaf}: delivered hour by hour",
                ("delivered", "hourly_strict_by_allocation", leaf),
                "ratio",
            ),
            (f"{leaf}: GPU-h received", ("delivered", "received_gpu_h", leaf), "number"),
            (f"{leaf}: wait p50", (*waits, "p50"), "seconds"),
            (f"{leaf}: wait p90", (*waits, "p90"), "seconds"),
            (f"{leaf}: never started", (*waits, "unplaced"), "count"),
        ]
    rows = _differences(a, b)
    for label, keys, kind in specs:
        va, vb = _get(a, *keys), _get(b, *keys)
        if kind == "text":
            rows.append((label, str(va), str(vb), ""))
        else:
            rows.append(
                (label, format_value(va, kind), format_value(vb, kind), _change(va, vb, kind))
            )
    return rows
