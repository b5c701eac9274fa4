"""Run a scenario (or a replayed journal) under one or more policies and write the
per-policy outputs: journal.jsonl, summary.json, report.html, gantt.png."""

from __future__ import annotations

import fcntl
import math
import os
import resource
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from domain.config import ConfigError, SchedulerConfig, parse_config
from domain.durations import parse_duration
from projections.engine import EXECUTOR, SIMULATOR, Engine, EngineOptions
from projections.scenario import ENGINE_KEYS
from streams.codec import encode

if TYPE_CHECKING:
    from projections.scenario import Scenario


SCENARIO_ACTOR = "scenario"


class SimulationError(ValueError):
    pass


def split_overrides(pairs: Iterable[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """`--set KEY=VALUE` pairs -> (scheduler config overrides, engine options)."""
    config: dict[str, Any] = {}
    engine: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise SimulationError(f"--set {pair!r}: expected KEY=VALUE, e.g. --set window=3d")
        parsed: Any = value.strip()
        if parsed.startswith(("[", "{")):
            try:
                parsed = orjson.loads(parsed)
            except orjson.JSONDecodeError:
                raise SimulationError(f"--set {key}: {value!r} is not valid JSON") from None
        elif key == "admins":  # a list of names, even of one: admins=alice
            parsed = [p.strip() for p in parsed.split(",") if p.strip()]
        (engine if key in ENGINE_KEYS else config)[key] = parsed
    if "checkpoint_loss" in engine:
        try:
            engine["checkpoint_loss"] = parse_duration(engine["checkpoint_loss"])
        except ValueError as why:
            raise SimulationError(f"--set checkpoint_loss: {why}") from None
    return config, engine


def run_engine_options(journal: Path) -> dict[str, Any]:
    """The engine settings of the simulated run whose journal this is (its folder's
    summary.json), where they differ from the defaults; {} for any other journal."""
    try:
        engine = orjson.loads((journal.parent / "summary.json").read_bytes()).get("engine")
    except (OSError, orjson.JSONDecodeError, AttributeError):
        return {}
    loss = engine.get("checkpoint_loss_s") if isinstance(engine, dict) else None
    if isinstance(loss, int | float) and not isinstance(loss, bool) and loss > 0:
        return {"checkpoint_loss": float(loss)}
    return {}


PERIOD_ENDS = ("horizon", "recorded", "work_ended", "stalled")


def period_ended(spec: RunSpec, stalled_at: float | None) -> str:
    """How a run's period ended (summary.json's `period.ended`): at the scenario's
    `horizon`, where the `recorded` journal a replay re-decides ends, when its work
    ended (`work_ended`), or `stalled` (waiting work nothing could start any more)."""
    if spec.horizon_end is not None:
        return spec.end_kind
    return "stalled" if stalled_at is not None else "work_ended"


@dataclass
class RunSpec:
    """Everything one policy run needs; built from a scenario or from a journal."""

    name: str
    cluster: str
    config: SchedulerConfig
    setup: Callable[[], Iterable[Any]]
    inputs: Callable[[], Iterable[Any]]
    start: float
    horizon_end: float | None = None
    workloads: int = 0
    engine: dict[str, Any] = field(default_factory=dict)
    # what `horizon_end` is: a scenario's horizon, or where a replayed journal ends
    end_kind: str = "horizon"

    @classmethod
    def of_scenario(cls, sc: Scenario, engine: dict[str, Any] | None = None) -> RunSpec:
        return cls(
            name=sc.name,
            cluster=sc.cluster_name,
            config=sc.config,
            setup=sc.setup_events,
            inputs=sc.timed_inputs,
            start=sc.start,
            horizon_end=sc.end_time(),
            workloads=sc.workload_count,
            engine={**(engine or {}), **_losses(sc.lose_work_at)},
        )


def _losses(lose_work_at: frozenset[str]) -> dict[str, Any]:
    """The engine option for host failures that kill their work, when there are any."""
    return {"lose_work_at": lose_work_at} if lose_work_at else {}


def policy_config(base: SchedulerConfig, policy: str | None) -> SchedulerConfig:
    overrides: dict[str, Any] = {}
    if policy:
        overrides["ordering"] = policy
    # the simulator's own actors administer the simulated cluster
    overrides["admins"] = sorted({*base.admins, SCENARIO_ACTOR, SIMULATOR, EXECUTOR})
    try:
        return base.with_overrides(overrides) if overrides else base
    except ConfigError as why:
        raise SimulationError(str(why)) from None


def _keeping_policy(
    inputs: Callable[[], Iterable[Any]], policy: str
) -> Callable[[], Iterator[Any]]:
    """`inputs` with each config change among them (a replayed journal's) kept to the
    run's policy and simulator admins, from the simulator's own admin: else the
    journal's later config would switch a `--policy` what-if back, or be refused."""

    def changed() -> Iterator[Any]:
        for event in inputs():
            if event.type == "config.set":
                try:
                    config = policy_config(parse_config(event.config, recorded=True), policy)
                except ValueError as why:
                    raise SimulationError(f"config change {event.id!r}: {why}") from None
                event = event.model_copy(
                    update={"config": config.model_dump(mode="json"), "actor": SCENARIO_ACTOR}
                )
            yield event

    return changed


def check_output_folder(out: Path, policies: Iterable[str] = ()) -> None:
    """Raise SimulationError (`--out DIR: <why>`) unless the runs can write DIR/<policy>/...:
    DIR is a folder or can be made one, and files can be created there. Creates nothing
    (a probe folder is made and removed), so it can run before anything else."""
    where = f"--out {out}"
    base = out  # the nearest existing part of the path, once found
    try:
        if out.exists() and not out.is_dir():
            raise SimulationError(f"{where}: is a file, not a folder")
        for policy in policies:
            if (out / policy).exists() and not (out / policy).is_dir():
                raise SimulationError(f"{where}: {out / policy} is a file, not a folder")
        while not base.exists() and base.parent != base:
            base = base.parent  # the nearest part of the path that exists
        if not base.is_dir():
            raise SimulationError(f"{where}: {base} is a file, not a folder")
        probe = tempfile.mkdtemp(prefix=".allot-probe-", dir=base)
    except OSError as why:
        reason = why.strerror or str(why)
        if base != out:
            reason = f"cannot create it in {base}: {reason}"
        raise SimulationError(f"{where}: {reason}") from None
    os.rmdir(probe)


@contextmanager
def output_lock(out: Path) -> Iterator[None]:
    """Hold a lock on folder DIR while runs write it: a second `simulate`/`replay`/`demo`
    into the same folder is refused (SimulationError) instead of both swapping each
    other's .partial folders away mid-run. An flock on the folder itself: no lock file
    is left behind, and it is released when the process ends, however it ends."""
    out.mkdir(parents=True, exist_ok=True)
    fd = os.open(out, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SimulationError(
                f"--out {out}: another allot run is writing there; wait for it to finish "
                "or pick another folder"
            ) from None
        yield
    finally:
        os.close(fd)


def run_policy(
    spec: RunSpec,
    policy: str,
    out_dir: Path,
    *,
    progress: Callable[[float], None] | None = None,
    reports: bool = True,
    gantt_window: tuple[float, float] | None = None,
    swap: bool = True,
) -> dict[str, Any]:
    """Simulate `spec` under `policy`; write DIR/<policy>/...; return the summary.

    The outputs are written to DIR/.<policy>.partial and swapped in for DIR/<policy> only
    when all are written: an interrupted or failed run leaves the previous results whole
    (and its partial journal in the .partial folder). `swap=False` leaves them there,
    for the caller to add the reports and `swap_in` (runs sharing a gantt window)."""
    from domain.policies import UnknownPolicy, resolve_ordering
    from projections.summary import iso, summarize

    try:
        resolve_ordering(policy)
    except UnknownPolicy as why:
        raise SimulationError(str(why)) from None
    config = policy_config(spec.config, policy)
    inputs = _keeping_policy(spec.inputs, policy)
    target = out_dir / policy
    work = partial_folder(out_dir, policy)
    if work.exists():
        shutil.rmtree(work)  # what an interrupted run left
    work.mkdir(parents=True)
    journal_path = work / "journal.jsonl"
    options = EngineOptions(horizon_end=spec.horizon_end, **spec.engine)
    engine = Engine(spec.cluster, config, options, on_time=progress)
    wall = time.perf_counter()
    with journal_path.open("wb", buffering=1 << 20) as journal:

        def records() -> Iterator[Any]:
            for record in engine.run(spec.setup(), inputs(), spec.start):
                journal.write(encode(record) + b"\n")  # one write: whole lines if interrupted
                yield record

        summary = summarize(records(), policy=policy, start=spec.start, end=spec.horizon_end)
    wall = time.perf_counter() - wall
    # whether the period's end was fixed before the run (a scenario's horizon, or the
    # recorded period a replay re-decides) rather than when its work ended: compare
    # warns about runs of different periods
    summary["period"]["horizon"] = spec.horizon_end is not None
    summary["period"]["ended"] = period_ended(spec, engine.stalled_at)
    submitted = summary.get("workloads", {}).get("submitted", 0)
    summary["engine"] = {
        "wall_s": round(wall, 3),
        "workloads_per_s": round(submitted / wall, 1) if wall > 0 else None,
        "peak_rss_mb": round(_peak_rss_mb(), 1),
        # the simulated launcher's own setting, which the journal does not hold: a replay
        # of this run reads it here (`run_engine_options`)
        "checkpoint_loss_s": options.checkpoint_loss,
    }
    if engine.stalled_at is not None:
        # a run without a horizon whose waiting work could never start: it stopped at
        # its last change instead of ticking for ever (the command warns)
        summary["engine"]["stalled_at"] = iso(engine.stalled_at)
    (work / "summary.json").write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2))
    if reports:
        write_reports(work, summary, gantt_window=gantt_window, source=target / "journal.jsonl")
    if swap:
        swap_in(work, target)
    return summary


def write_reports(
    folder: Path,
    summary: dict[str, Any],
    *,
    gantt_window: tuple[float, float] | None = None,
    source: Path | None = None,
) -> None:
    """`gantt.png` and `report.html` of the run in `folder` (from its journal.jsonl); the
    two show the same GPU timeline, titled with the policy. Each file is written beside
    and renamed into place, so a reader never sees half of one."""
    from projections.report import write_report

    journal_path = folder / "journal.jsonl"
    gantt_tmp = folder / ".gantt.png.partial"
    report_tmp = folder / ".report.html.partial"
    write_report(
        journal_path,
        summary,
        report_tmp,
        gantt_window=gantt_window,
        source=str(source or journal_path),
        gantt_path=gantt_tmp,
    )
    gantt_tmp.replace(folder / "gantt.png")
    report_tmp.replace(folder / "report.html")


def shared_gantt_window(folders: list[Path]) -> tuple[float, float]:
    """One GPU-timeline window for runs of one scenario under several policies (their
    folders): the busiest 24 h of the runs together, so side-by-side timelines show the
    same period."""
    from projections.gantt import collect, shared_window

    return shared_window([collect(folder / "journal.jsonl") for folder in folders])


def partial_folder(out_dir: Path, policy: str) -> Path:
    """Where a run of `policy` writes until it completes: DIR/.<policy>.partial."""
    return out_dir / f".{policy}.partial"


def swap_in(new: Path, target: Path) -> None:
    """Put the completed run's folder in place of the previous one, which is removed
    only once the new one is there."""
    old = target.with_name(f".{target.name}.old")
    with _signals_held():  # Ctrl-C waits for the two renames: DIR/<policy> always exists
        if old.exists():
            shutil.rmtree(old)  # left by a swap that was cut short
        if target.exists():
            target.rename(old)
        new.rename(target)
    if old.exists():
        shutil.rmtree(old)


@contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM are delivered after the block, not inside it."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _peak_rss_mb() -> float:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 1024.0 if sys.platform != "darwin" else rss / (1024.0 * 1024.0)


# ------------------------------------------------------------------ comparison
COMPARISON_ROWS: list[tuple[str, Callable[[dict[str, Any]], Any], str]] = [
    ("delivered overall", lambda s: s["delivered"]["overall"], "ratio"),
    ("delivered min", lambda s: s["delivered"]["min"], "ratio"),
    ("occupancy", lambda s: s["occupancy"], "ratio"),
    ("occupancy (contended)", lambda s: s["occupancy_contended"], "ratio"),
    ("unallocated fraction", lambda s: s["unallocated_fraction"], "ratio"),
    ("preemptions", lambda s: s["preemptions"], "count"),
    ("completed", lambda s: s["workloads"]["completed"], "count"),
    ("unfinished", lambda s: s["workloads"]["unfinished"], "count"),
    ("wait p50 (all)", lambda s: s["wait_s"]["all"]["p50"], "seconds"),
    ("wait p90 (all)", lambda s: s["wait_s"]["all"]["p90"], "seconds"),
]


def never_started(waits: dict[str, Any]) -> str | None:
    """`355 of 373`: how many of a group's workloads never started (None: all did). The
    wait percentiles are of the started ones only: without this, a policy that starts
    almost none of a tag's work shows that tag's few waits and looks fast."""
    unplaced = waits.get("unplaced") or 0
    if not unplaced:
        return None
    return f"{unplaced:,} of {unplaced + (waits.get('count') or 0):,}"


def comparison_rows(summaries: dict[str, dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """Rows of (metric, one formatted cell per policy), waits by tag included, each
    followed by how many of its workloads never started when any policy left some."""
    rows = []
    specs = list(COMPARISON_ROWS)
    specs.append(("never started (all)", lambda s: never_started(s["wait_s"]["all"]), "text"))
    tags = sorted(
        {tag for s in summaries.values() for tag in s.get("wait_s", {}).get("by_tag", {})}
    )
    for tag in tags:
        specs.append(
            (f"wait p90 ({tag})", lambda s, t=tag: s["wait_s"]["by_tag"][t]["p90"], "seconds")
        )
        specs.append(
            (
                f"never started ({tag})",
                lambda s, t=tag: never_started(s["wait_s"]["by_tag"][t]),
                "text",
            )
        )
    for label, get, kind in specs:
        cells = []
        for summary in summaries.values():
            try:
                value = get(summary)
            except (KeyError, TypeError):
                value = None
            cells.append(format_value(value, kind))
        if kind == "text" and all(cell == "—" for cell in cells):
            continue  # every workload of it started under every policy
        rows.append(
            (label, [("0" if cell == "—" else cell) if kind == "text" else cell for cell in cells])
        )
    return rows


def _adjacent_units(seconds: float) -> str:
    """A wait in two adjacent units: 22h for 22 h 0 m 48 s, where `format_duration`'s
    two largest non-zero units give 22h48s, which reads as 22 h 48 m in a table of
    waits. (`format_duration` itself stays: journal texts carry its form.)"""
    from itertools import pairwise

    from domain.durations import format_duration

    if abs(seconds) >= 1e11:  # thousands of years: its own short form
        return format_duration(seconds)
    units = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))
    whole = round(abs(seconds))
    sign = "-" if seconds < 0 and whole else ""
    for (unit, size), (small, small_size) in pairwise(units):
        if whole >= size:  # cut, not rounded, below the second unit (as everywhere else)
            big, rest = divmod(whole, size)
            tail = f"{rest // small_size}{small}" if rest >= small_size else ""
            return f"{sign}{big}{unit}{tail}"
    return sign + format_duration(whole)


def format_value(value: Any, kind: str) -> str:
    from domain.durations import format_duration

    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if kind == "ratio":
        return f"{value:.3f}"
    if kind == "seconds":
        return _adjacent_units(float(value)) if math.isfinite(value) else format_duration(value)
    if kind == "number":
        return f"{value:,.1f}"
    if kind == "count" and isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"  # as the change column and the run lines show counts
    return str(value)


def summary_value(summary: Any, *keys: str) -> Any:
    """summary[k1][k2]...; None where a key is missing."""
    for key in keys:
        if not isinstance(summary, dict) or key not in summary:
            return None
        summary = summary[key]
    return summary


def allocation_rows(summaries: dict[str, dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """Per leaf allocation: delivered, wait p90 and never started, one cell per policy."""
    get = summary_value
    leaves = sorted(
        {
            leaf
            for s in summaries.values()
            for block in (get(s, "delivered", "by_allocation"), get(s, "wait_s", "by_allocation"))
            if isinstance(block, dict)
            for leaf in block
        }
    )
    rows = []
    for leaf in leaves:
        for label, keys, kind in (
            ("delivered", ("delivered", "by_allocation", leaf), "ratio"),
            ("wait p90", ("wait_s", "by_allocation", leaf, "p90"), "seconds"),
        ):
            rows.append(
                (
                    f"{leaf}: {label}",
                    [format_value(get(s, *keys), kind) for s in summaries.values()],
                )
            )
        # `27 of 60`, as the main table says it (the percentiles are of started work)
        waits = [get(s, "wait_s", "by_allocation", leaf) for s in summaries.values()]
        rows.append(
            (
                f"{leaf}: never started",
                [(never_started(w) or "0") if isinstance(w, dict) else "—" for w in waits],
            )
        )
    return rows


def comparison_markdown(summaries: dict[str, dict[str, Any]]) -> str:
    names = list(summaries)
    header = ["| metric | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    lines = list(header)
    for label, cells in comparison_rows(summaries):
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    by_leaf = allocation_rows(summaries)
    if by_leaf:
        lines += ["", "By allocation (waits are of work that started):", "", *header]
        lines += [f"| {label} | " + " | ".join(cells) + " |" for label, cells in by_leaf]
    return "\n".join(lines) + "\n"
