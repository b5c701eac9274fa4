"""The `allot` command. Thin: parses, calls `domain`, `projections` and `streams`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from allot import completion as completion_words
from allot.commands import (
    audit,
    dashboard,
    executor,
    journal,
    metrics,
    ops,
    requests,
    rollup,
    serve,
    trace,
    usage,
    views,
)
from allot.commands.common import InterruptedWithNote, kafka_environment_help


def _no_value_shown_for_flags() -> None:
    """typer 0.29's rich help labels on/off flags `<bool>` (`--resumable <bool>`, even
    `--help <bool>`), as if they took a value; they take none, so show no type."""
    option = getattr(typer.core, "TyperOption", None)
    shown = getattr(option, "display_type_rich", None)
    if shown is None or getattr(shown, "_allot_flags_fixed", False):
        return

    def display_type_rich(self: Any, ctx: Any) -> str | None:
        return None if getattr(self, "is_flag", False) else shown(self, ctx)

    display_type_rich._allot_flags_fixed = True  # type: ignore[attr-defined]
    option.display_type_rich = display_type_rich


_no_value_shown_for_flags()

app = typer.Typer(
    name="allot",
    help=(
        "allot: an event-sourced GPU cluster scheduler with hierarchical fair share.\n\n"
        "Run it live (serve, topics, journal export/restore; submit, cancel, hold, release, requeue, budget, host; queue, "
        "acct, shares, why, idle; executor), watch it (metrics, dashboard, usage, rollup, audit, "
        "history, preemptions), and simulate policies before rollout (simulate, replay, "
        "compare, demo, trace import). Every command has --help; `allot completion bash` "
        "(or zsh, fish) prints the shell's TAB completion."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)
app.add_typer(trace.app, name="trace", help="Import cluster traces into allot's submissions JSONL.")

for _module in (
    requests,
    serve,
    views,
    ops,
    journal,
    executor,
    metrics,
    dashboard,
    audit,
    usage,
    rollup,
):
    _module.register(app)


class _Console:
    """A rich Console made on first use: rich is imported only by commands that print
    with it (start-up time of the read-only presets, issue 5)."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Any = None

    @property
    def real(self) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


console = _Console()
err = _Console(stderr=True)

DEMO_POLICIES = ["fairshare", "legacy-priority"]

PolicyOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--policy",
        "-p",
        help="Ordering policy; repeat to compare several (default: the config's ordering: "
        "--set ordering=..., else the scenario's or the journal's, else fairshare).",
    ),
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        help="Override a config key, e.g. --set window=3d --set max_min_runtime=4h "
        "(also the engine's checkpoint_loss=5m).",
    ),
]
QuietOpt = Annotated[
    bool,
    typer.Option(
        "--quiet", "-q", help="No progress bar and no line per finished run; warnings still print."
    ),
]
JobsOpt = Annotated[
    int | None,
    typer.Option(
        "--jobs",
        "-j",
        min=1,
        help="Policies simulated at once, each in its own process (default: one per CPU, "
        "up to the number of policies). Outputs are the same either way.",
    ),
]


def _default_jobs() -> int:
    import os

    return os.cpu_count() or 1


class CliError(Exception):
    """One clear line for the user, exit code 2."""


def _examples_dir() -> Path:
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "examples", here / "examples"):
        if candidate.is_dir():
            return candidate
    raise CliError("the examples folder is missing from this installation")


def _gantt_window(text: str | None, start: float) -> tuple[float, float] | None:
    if not text:
        return None
    from domain.durations import parse_duration

    a, sep, b = text.partition(":")
    try:
        lo, hi = parse_duration(a), parse_duration(b)
    except ValueError as why:
        raise CliError(f"--gantt-window {text!r}: {why}; use FROM:TO offsets, e.g. 2d:3d") from None
    if not sep or hi <= lo:
        raise CliError(f"--gantt-window {text!r}: use FROM:TO offsets with FROM < TO, e.g. 2d:3d")
    return start + lo, start + hi


def _run_policies(
    spec: Any,
    policies: list[str],
    out: Path,
    *,
    quiet: bool,
    gantt_window: str | None,
    reports: bool,
    jobs: int = 1,
) -> dict[str, dict[str, Any]]:
    """Run every policy into OUT/<policy>/ (each swapped in when complete; see
    `run_policy`); with several, OUT/comparison.md too, else an old one is removed.
    Ctrl-C: one line on what is where, exit 130."""
    from allot.plugins import import_policy
    from domain.policies import resolve_ordering, resolve_placement
    from projections.simulate import check_output_folder, output_lock

    policies = list(dict.fromkeys(policies))  # a policy named twice runs once
    import_policy(spec.config.placement, "placement")
    resolve_placement(spec.config.placement)  # an unknown one: an error before --out is made
    for policy in policies:
        import_policy(policy, "ordering")
        resolve_ordering(policy)
    check_output_folder(out, policies)
    window = _gantt_window(gantt_window, spec.start)
    with output_lock(out):
        return _run_policies_locked(
            spec, policies, out, window, quiet=quiet, reports=reports, jobs=jobs
        )


def _run_policies_locked(
    spec: Any,
    policies: list[str],
    out: Path,
    window: tuple[float, float] | None,
    *,
    quiet: bool,
    reports: bool,
    jobs: int,
) -> dict[str, dict[str, Any]]:
    import shutil

    from allot.parallel_runs import Interrupted, can_run_in_parallel, run_policies_in_parallel
    from allot.progress import sim_progress, sims_progress, steps_progress
    from projections.simulate import (
        SimulationError,
        comparison_markdown,
        partial_folder,
        run_policy,
        shared_gantt_window,
        swap_in,
        write_reports,
    )

    # several policies without --gantt-window: their timelines show one shared window,
    # chosen once all runs are done, so the reports are written after the runs, in the
    # .partial folders, which are swapped in only then (Ctrl-C keeps the old results)
    shared = reports and window is None and len(policies) > 1
    for policy in policies:  # an earlier interrupted run's partial outputs
        shutil.rmtree(partial_folder(out, policy), ignore_errors=True)
    jobs = min(jobs, len(policies))
    summaries: dict[str, dict[str, Any]] = {}
    swapped: list[str] = []  # shared window: the runs already in place
    each_reports = reports and not shared
    try:
        if jobs > 1 and can_run_in_parallel():
            with sims_progress(
                policies, spec.start, spec.horizon_end, quiet=quiet, console=console.real
            ) as update:
                summaries = run_policies_in_parallel(
                    spec, policies, out, jobs=jobs, reports=each_reports, gantt_window=window,
                    on_time=update, swap=not shared,
                )  # fmt: skip
            if not shared:
                for policy, summary in summaries.items():
                    _say_done(policy, summary, out, quiet)
        else:
            for policy in policies:
                with sim_progress(
                    policy, spec.start, spec.horizon_end, quiet=quiet, console=console.real
                ) as tick:
                    summaries[policy] = run_policy(
                        spec, policy, out, progress=tick, reports=each_reports,
                        gantt_window=window, swap=not shared,
                    )  # fmt: skip
                if not shared:
                    _say_done(policy, summaries[policy], out, quiet)
        if shared:
            works = {policy: partial_folder(out, policy) for policy in summaries}
            together = shared_gantt_window(list(works.values()))
            with steps_progress(
                "reports", len(summaries), quiet=quiet, console=console.real
            ) as step:
                for policy, summary in summaries.items():
                    if step is not None:
                        step(f"{policy}: report.html, gantt.png")
                    write_reports(
                        works[policy],
                        summary,
                        gantt_window=together,
                        source=out / policy / "journal.jsonl",
                    )
            for policy, summary in summaries.items():
                swap_in(works[policy], out / policy)
                swapped.append(policy)
                _say_done(policy, summary, out, quiet)
    except OSError as why:  # a full disk, a folder made read-only meanwhile
        for policy in policies:  # partial outputs of a failed write are no use to anyone
            shutil.rmtree(partial_folder(out, policy), ignore_errors=True)
        raise SimulationError(
            f"cannot write the results in {out}: {why.strerror or why}; the previous "
            "results there are unchanged"
        ) from None
    except KeyboardInterrupt as stop:
        if shared:  # a run is finished once its folder, reports and all, is in place
            finished = swapped
        else:
            finished = stop.finished if isinstance(stop, Interrupted) else list(summaries)
        raise InterruptedWithNote(_interrupted(out, policies, finished)) from None
    comparison = out / "comparison.md"
    if len(summaries) > 1:
        from projections.compare import policies_periods_differ

        _print_comparison(summaries)
        apart = policies_periods_differ(summaries)
        if apart is not None:  # even with --quiet: the table compares unlike periods
            err.print(f"[yellow]warning:[/] {apart}", soft_wrap=True)
        temporary = comparison.with_name(".comparison.md.partial")
        temporary.write_text(comparison_markdown(summaries))
        temporary.replace(comparison)
    else:
        comparison.unlink(missing_ok=True)  # it compared the runs of an earlier command
    if window is not None and reports:
        _say_window_after_end(window, spec.start, summaries)
    return summaries


def _say_window_after_end(
    window: tuple[float, float], start: float, summaries: dict[str, dict[str, Any]]
) -> None:
    """A --gantt-window that starts after a run ended draws an empty chart: say so."""
    from domain.durations import format_duration

    for policy, summary in summaries.items():
        end = (summary.get("period") or {}).get("end")
        if isinstance(end, int | float) and window[0] >= end:
            err.print(
                f"[yellow]warning:[/] {policy}: --gantt-window starts after the run ended "
                f"({format_duration(end - start)} in): its GPU timeline is empty",
                soft_wrap=True,
            )


def _interrupted(out: Path, policies: list[str], finished: list[str]) -> str:
    """One line: which runs finished, which folders keep their previous results, where
    the partial journals are."""
    from projections.simulate import partial_folder

    def listed(paths: list[Path]) -> str:
        return ", ".join(str(p) for p in paths)

    rest = [p for p in policies if p not in finished]
    kept = [out / p for p in rest if (out / p).is_dir()]
    fresh = [out / p for p in rest if not (out / p).is_dir()]
    journals = [partial_folder(out, p) / "journal.jsonl" for p in rest]
    journals = [j for j in journals if j.is_file() and j.stat().st_size]  # not an empty one
    parts = []
    if finished:
        parts.append(f"finished: {listed([out / p for p in finished])}")
    if kept:
        parts.append(f"the previous results in {listed(kept)} are unchanged")
    if fresh:
        parts.append(f"nothing was written to {listed(fresh)}")
    if journals:
        one = len(journals) == 1
        parts.append(f"the partial journal{' is' if one else 's are'} in {listed(journals)}")
    comparison = out / "comparison.md"
    if finished and comparison.exists():
        comparison.unlink()  # some of the runs it compared were replaced
        parts.append(f"removed {comparison} (it compared the previous results)")
    return "interrupted: " + "; ".join(parts)


def _say_recording_ended(policy: str, summary: dict[str, Any]) -> None:
    """A replay stops where its recorded journal does, not at a horizon; work the
    recording left pending or running is left so here too: say so, and that the pending
    work's waits so far are in no percentile."""
    from projections.summary import how_it_ended

    counts = summary.get("workloads") or {}
    if not counts.get("unfinished"):
        return
    end = (summary.get("period") or {}).get("end_iso")
    censored = (
        "; the pending work's waits so far are in no wait percentile (allot compare "
        "counts it as never started)"
        if counts.get("unfinished_pending")
        else ""
    )
    err.print(
        f"note: {policy}: the replay stopped at {end}, {how_it_ended(summary)}{censored}",
        soft_wrap=True,
    )


def _say_done(policy: str, summary: dict[str, Any], out: Path, quiet: bool) -> None:
    from rich.markup import escape

    from allot.commands.common import plural

    if not quiet:
        engine = summary.get("engine", {})
        console.print(
            f"[green]✓[/] {policy}: {plural(summary['workloads']['submitted'], 'workload')} in "
            f"{engine.get('wall_s')} s ({engine.get('workloads_per_s'):,} workloads/s) → "
            f"{escape(str(out / policy))}[yellow]{escape(_rejections(summary, out / policy))}[/]",
            soft_wrap=True,
        )
    elif summary.get("workloads", {}).get("rejected"):
        # even with --quiet: refused submissions change what the run measured
        said = _rejections(summary, out / policy).strip().removeprefix("(").removesuffix(")")
        err.print(f"[yellow]warning:[/] {policy}: {escape(said)}", soft_wrap=True)
    if not quiet and (summary.get("period") or {}).get("ended") == "recorded":
        _say_recording_ended(policy, summary)
    stalled_at = summary.get("engine", {}).get("stalled_at")
    if stalled_at:  # even with --quiet: the run's period ended earlier than asked
        waiting = sum(
            summary.get(key, {}).get("all", {}).get("unplaced") or 0
            for key in ("wait_s", "requeue_wait_s")
        )
        err.print(
            f"[yellow]warning:[/] {policy}: nothing could change after {stalled_at}, so the"
            f" run ends there with {waiting:,} workload{'' if waiting == 1 else 's'} still"
            " waiting (behind work that never ends, or for hosts that stay unhealthy); set a"
            " horizon to measure a fixed period",
            soft_wrap=True,
        )
    # even with --quiet: a what-if whose budget change was refused is not that what-if
    for kind, seen in (summary.get("rejected_inputs") or {}).items():
        if kind.startswith("workload."):
            continue  # cancels of work that had ended: the same as in the recorded run
        count = seen.get("count", 0)
        err.print(
            f"[yellow]warning:[/] {policy}: {count:,} {escape(kind)} input"
            f"{'' if count == 1 else 's'} refused, the first: "
            f'"{escape(str(seen.get("first", ""))[:200])}" (the run went on without '
            f"{'it' if count == 1 else 'them'}; see {escape(str(out / policy / 'journal.jsonl'))})",
            soft_wrap=True,
        )


def _rejections(summary: dict[str, Any], folder: Path) -> str:
    """` (29 rejected: "<the most common reason>"; see DIR/journal.jsonl)`, or "" when the
    scenario's submissions were all accepted."""
    rejected = summary.get("workloads", {}).get("rejected") or 0
    if not rejected:
        return ""
    reasons = summary.get("rejected_by_reason") or {}
    text = f" ({rejected:,} rejected"
    if reasons:
        reason, count = next(iter(reasons.items()))
        if len(reason) > 100:
            reason = reason[:99] + "…"
        text += ": " if count == rejected else f", {count:,} of them: "
        text += f'"{reason}"'
    return text + f"; see {folder / 'journal.jsonl'})"


def _print_comparison(summaries: dict[str, dict[str, Any]]) -> None:
    from rich.table import Table

    from projections.simulate import comparison_rows

    table = Table(title="policy comparison", show_lines=False)
    table.add_column("metric")
    for name in summaries:
        table.add_column(name, justify="right")
    for label, cells in comparison_rows(summaries):
        table.add_row(label, *cells)
    console.print(table)


@app.command()
def simulate(
    scenario: Annotated[Path, typer.Argument(help="Scenario YAML (see examples/lab.yaml).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder: DIR/<policy>/...")],
    policy: PolicyOpt = None,
    set_: SetOpt = None,
    gantt_window: Annotated[
        str | None, typer.Option(help="Time range of gantt.png as FROM:TO offsets, e.g. 2d:3d.")
    ] = None,
    no_report: Annotated[
        bool, typer.Option("--no-report", help="Skip report.html and gantt.png.")
    ] = False,
    jobs: JobsOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Simulate a scenario under one or more policies.

    Writes DIR/<policy>/{journal.jsonl, summary.json, report.html, gantt.png}; with several
    --policy options also prints a comparison table and writes DIR/comparison.md. Each
    DIR/<policy> is replaced only once its new run is complete (Ctrl-C keeps the old one).
    Ends by saying where the reports and summaries are (not with --quiet).

    A run lasts until the scenario's horizon, or without one until all work has ended.
    When waiting work can never start (behind work that never ends, or for hosts that
    stay unhealthy), it ends at its last change with a warning (summary.json:
    engine.stalled_at). Several policies whose runs cover different periods (no horizon,
    different ends) get a warning under the table: give the scenario a horizon.
    """
    ran = _simulate(scenario, out, policy, set_, gantt_window, no_report, jobs, quiet)
    if not quiet:
        _say_where_results(out, ran, reports=not no_report)


def _simulate(
    scenario: Path,
    out: Path,
    policy: list[str] | None,
    set_: list[str] | None,
    gantt_window: str | None,
    no_report: bool,
    jobs: int | None,
    quiet: bool,
) -> list[str]:
    """`allot simulate` but its footer: the policies run (demo says where they went)."""
    from projections.scenario import load_scenario
    from projections.simulate import RunSpec, check_output_folder, split_overrides

    check_output_folder(out)  # before the scenario's traces are read
    config_overrides, engine = split_overrides(set_ or [])
    sc = load_scenario(scenario, config_overrides)
    for line in sc.skipped_rows() + sc.late_health():
        typer.echo(f"warning: {line}", err=True)
    late = sc.beyond_horizon()
    if late:
        from domain.durations import format_duration

        rows = "1 trace row comes" if late == 1 else f"{late:,} trace rows come"
        typer.echo(
            f"warning: {rows} after the horizon ({format_duration(sc.horizon or 0)} after "
            f"the start) and {'is' if late == 1 else 'are'} not simulated",
            err=True,
        )
    kept = sc.hosts // 8
    asked = "headroom_hosts" in config_overrides or "headroom_hosts" in sc.spec.config
    if asked and sc.config.headroom_hosts > kept:  # the default is not a request
        typer.echo(
            f"warning: headroom_hosts {sc.config.headroom_hosts}: at most one host in eight is kept "
            f"for short jobs, so this {sc.hosts}-host cluster keeps {kept}",
            err=True,
        )
    spec = RunSpec.of_scenario(sc, engine)
    return list(
        _run_policies(
            spec,
            policy or [spec.config.ordering],  # the scenario's `ordering` (or --set's)
            out,
            quiet=quiet,
            gantt_window=gantt_window,
            reports=not no_report,
            jobs=jobs or _default_jobs(),
        )
    )


@app.command()
def replay(
    journal: Annotated[
        Path | None,
        typer.Argument(
            help="A recorded journal: a JSONL file, a run folder (<out>/<policy>) or a --data "
            "folder; or read it from Kafka with --kafka."
        ),
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Output folder for the what-if.")
    ] = None,
    policy: PolicyOpt = None,
    set_: SetOpt = None,
    budget: Annotated[
        list[str] | None,
        typer.Option(
            "--budget",
            metavar="PATH=WEIGHT[@TIME]",
            help="A budget what-if (repeatable): PATH=WEIGHT gives PATH that weight in "
            "every recorded change of it (as if it always had it); PATH=WEIGHT@TIME "
            "changes it from TIME on (a duration after the journal's first record, "
            "e.g. 2d, or an ISO date/time). Weights only: recorded per-user limits "
            "hold as they were.",
        ),
    ] = None,
    verify: Annotated[
        bool,
        typer.Option(
            "--verify",
            help="Re-decide with the journal's own config; fail on the first difference.",
        ),
    ] = False,
    kafka: Annotated[
        str | None,
        typer.Option(
            "--kafka",
            metavar="HOST:PORT",
            help="Read the journal topic from this Kafka broker instead of a file "
            f"(default $ALLOT_KAFKA when no JOURNAL is given). {kafka_environment_help()}",
        ),
    ] = None,
    cluster: Annotated[
        str | None,
        typer.Option(
            "--cluster",
            help="The cluster whose journal to replay (with --kafka; default "
            "$ALLOT_CLUSTER, else 'default').",
        ),
    ] = None,
    no_report: Annotated[
        bool, typer.Option("--no-report", help="Skip report.html and gantt.png.")
    ] = False,
    jobs: JobsOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Replay a recorded journal: check determinism (--verify), or re-decide it under
    another policy, config or budget (a what-if).

    The journal is a file, a run folder or a --data folder (its journal.jsonl), or
    the journal topic with --kafka. --verify checks
    determinism; otherwise re-decide its inputs (submissions with the work each
    workload did, budget and health changes) under a new policy, config or budget
    (--policy, --set, --budget) — a what-if. `allot compare A B` then shows who
    waits longer, by tag and by allocation."""
    import tempfile

    def fail(message: str) -> typer.Exit:
        typer.echo(f"error: {message}", err=True)  # one line, however long
        return typer.Exit(2)

    if verify and (policy or set_ or budget):
        raise fail(
            "--policy/--set/--budget have no effect with --verify: it re-decides with the "
            "journal's own config; drop them, or give --out DIR for a what-if under them"
        )
    if verify and (out is not None or jobs is not None):
        raise fail(
            "--out/--jobs have no effect with --verify: it writes nothing and checks one "
            "journal; drop them, or drop --verify for a what-if into --out"
        )
    import os

    if journal is None and kafka is None:  # like the other readers: $ALLOT_KAFKA
        kafka = os.environ.get("ALLOT_KAFKA") or None
    if kafka is not None:  # --kafka given or from $ALLOT_KAFKA: $ALLOT_CLUSTER either way
        cluster = cluster or os.environ.get("ALLOT_CLUSTER") or None
    if journal is None and kafka is None:
        raise fail("replay reads one journal: give a JOURNAL file or --kafka HOST:PORT")
    if journal is not None and kafka is not None:
        raise fail("replay reads one journal: give a JOURNAL file or --kafka HOST:PORT, not both")
    if not verify and out is None:
        raise fail("replay needs --out DIR (or --verify)")
    if kafka is None:
        if cluster is not None:
            raise fail("--cluster goes with --kafka (a journal file is replayed whole)")
        assert journal is not None
        _replay(journal, out, policy, set_, budget, verify, quiet, jobs, no_report)
        return
    from streams.sources import SourceError, journal_lines

    with tempfile.TemporaryDirectory(prefix="allot-replay-") as tmp:
        path = Path(tmp) / "journal.jsonl"
        from allot.progress import counted, record_progress

        try:
            with (
                path.open("wb") as f,
                record_progress("reading", None, quiet=quiet, console=console.real) as update,
            ):
                for line in counted(
                    journal_lines(kafka=kafka, cluster=cluster or "default"), update
                ):
                    f.write(line + b"\n")
        except SourceError as why:
            raise fail(str(why)) from None
        _replay(path, out, policy, set_, budget, verify, quiet, jobs, no_report)


def _replay(
    journal: Path,
    out: Path | None,
    policy: list[str] | None,
    set_: list[str] | None,
    budget: list[str] | None,
    verify: bool,
    quiet: bool,
    jobs: int | None = None,
    no_report: bool = False,
) -> None:
    """A JournalError (not a journal) reaches `main` as one error line, exit 2."""
    from rich.markup import escape

    from allot.commands.common import cut_line_warning, ends_mid_line
    from projections.journal import journal_file
    from projections.replay import BudgetChange, journal_run_spec
    from projections.replay import verify as verify_journal
    from projections.scenario import check_override_keys
    from projections.simulate import check_output_folder, run_engine_options, split_overrides

    journal = journal_file(journal)  # a run folder's journal.jsonl, as compare takes
    cut = ends_mid_line(journal)

    def say_cut() -> None:
        # after the reader read the rest: a file with no complete line is its error alone
        if cut:
            err.print(escape(cut_line_warning(journal)), soft_wrap=True)

    if verify:
        from allot.commands.common import plural
        from allot.progress import record_progress

        size = journal.stat().st_size
        with record_progress("verifying", size, quiet=quiet, console=console.real) as update:
            result = verify_journal(journal, progress=update, cut=cut)
        say_cut()
        if result.difference:
            err.print(
                f"[red]✗ not reproduced[/] after {plural(result.decisions, 'matching decision')}: "
                f"{escape(result.difference)}",
                soft_wrap=True,  # a journal line, whole: not folded at 80 columns
            )
            err.print(
                "(a journal is reproduced by the allot version that wrote it: one written "
                "by another version, e.g. before fair-share ratios were read at bucket "
                "edges (2026-11-30), or edited by hand, decides differently)"
            )
            raise typer.Exit(1)
        console.print(
            f"[green]✓[/] {plural(result.decisions, 'decision')} in "
            f"{plural(result.records, 'record')} reproduced byte for byte"
            + (
                f" (the last input's {plural(result.uncompared, 'decision')} after the cut "
                "line not compared)"
                if result.uncompared
                else ""
            ),
            soft_wrap=True,
        )
        return
    assert out is not None
    budgets = [BudgetChange.parse(text) for text in budget or []]
    check_output_folder(out)  # before the journal is read
    config_overrides, engine = split_overrides(set_ or [])
    check_override_keys(config_overrides)
    kept = {k: v for k, v in run_engine_options(journal).items() if k not in engine}
    if kept:  # the simulated launcher's setting of the run replayed, not the default
        from domain.durations import format_duration

        err.print(
            f"note: replaying with the run's checkpoint_loss={format_duration(kept['checkpoint_loss'])} "
            "(from its summary.json; --set checkpoint_loss=0 replays without it)",
            soft_wrap=True,
        )
        engine = {**engine, **kept}
    spec = journal_run_spec(journal, config_overrides, engine, budgets)
    say_cut()
    summaries = _run_policies(
        spec,
        policy or [spec.config.ordering],
        out,
        quiet=quiet,
        gantt_window=None,
        reports=not no_report,
        jobs=jobs or _default_jobs(),
    )
    if not quiet:
        _say_where_results(out, list(summaries), reports=not no_report)


@app.command()
def compare(
    dir_a: Annotated[Path, typer.Argument(help="A run folder: <out>/<policy>")],
    dir_b: Annotated[Path, typer.Argument(help="Another run folder: <out>/<policy>")],
) -> None:
    """Show what changed between two runs: waits by tag, preemptions, delivered per allocation.

    One table, A beside B: the config keys and budget weights that differ at the end of
    the runs, delivered share, occupancy, preemptions, waits (p50/p90) and never started
    by tag, then per allocation its delivered share (also hour by hour), GPU-hours
    received, waits and never started. Each run is measured over its own simulated
    period (summary.json's period): a warning says when the two differ (other horizons,
    or runs without one that ended at different times), a note when a summary records
    none or the runs may not share their inputs.
    """
    from rich.markup import escape

    from projections.compare import (
        compare_summaries,
        different_inputs,
        different_periods,
        load_summary,
        unknown_period,
    )

    a, b = load_summary(dir_a), load_summary(dir_b)
    rows = compare_summaries(a, b)
    apart = different_inputs(a, b)
    periods = different_periods(a, b)
    from rich.table import Table

    table = Table(title=f"{dir_a} → {dir_b}")
    for col, justify in (("metric", "left"), ("A", "right"), ("B", "right"), ("change", "right")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for row in rows:
        table.add_row(*row)
    console.print(table)
    for folder, summary in ((dir_a, a), (dir_b, b)):
        if "config" not in summary or "by_allocation" not in summary.get("wait_s", {}):
            err.print(
                f"note: {escape(str(folder))} was summarized by an older allot: it has no "
                "config, weights or waits by allocation (— above); `allot replay "
                f"{escape(str(folder))} --out DIR` re-runs it with them",
                soft_wrap=True,
            )
    unknown = [str(f) for f, s in ((dir_a, a), (dir_b, b)) if unknown_period(s)]
    if unknown:
        err.print(
            f"note: {escape(' and '.join(unknown))} {'does' if len(unknown) == 1 else 'do'} "
            "not record the period measured; check that both runs cover the same one",
            soft_wrap=True,
        )
    if periods is not None:
        err.print(f"[yellow]warning:[/] {escape(periods)}", soft_wrap=True)
    if apart is not None:
        err.print(
            f"note: these runs may not share their inputs: {escape(apart)}; compare runs of "
            "one scenario or what-ifs of one journal",
            soft_wrap=True,
        )


@app.command()
def demo(
    out: Annotated[Path, typer.Option("--out", "-o", help="Where the reports go.")] = Path(
        "allot-demo"
    ),
    scenario: Annotated[
        Path | None, typer.Option(help="Another scenario instead of examples/lab.yaml.")
    ] = None,
    jobs: JobsOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Run examples/lab.yaml under fairshare and legacy-priority and compare them."""
    if scenario is None:
        scenario = _examples_dir() / "lab.yaml"
        console.print(
            "Simulating [bold]lab.yaml[/]: a 1024-GPU lab, 15 allocations, a week of work, "
            "under the new fair-share scheduler and the old priority system..."
        )
    _simulate(scenario, out, DEMO_POLICIES, None, None, False, jobs, quiet)
    _say_where_results(out, DEMO_POLICIES, reports=True)  # even with --quiet, as before


def _say_where_results(out: Path, policies: list[str], *, reports: bool) -> None:
    """The footer of simulate, replay (a what-if) and demo: where each run's report,
    timeline and summary are, each path whole on its line (soft_wrap: a path broken
    over two lines cannot be pasted)."""
    from rich.markup import escape

    def path(*parts: str) -> str:
        return escape(str(out.joinpath(*parts)))

    if reports:
        console.print("\nReports (open in a browser; they work offline):")
        for policy in policies:
            gantt = path(policy, "gantt.png")
            console.print(
                f"  {path(policy, 'report.html')}   [dim](gantt: {gantt})[/]", soft_wrap=True
            )
    else:
        console.print("\nResults (--no-report: no report.html or gantt.png):")
    if len(policies) > 1:
        console.print(f"  comparison table: {path('comparison.md')}", soft_wrap=True)
    summaries = ", ".join(path(policy, "summary.json") for policy in policies)
    label = "summary" if len(policies) == 1 else "summaries"
    console.print(f"  {label}: {summaries}", soft_wrap=True)


# Errors that mean the user asked for something impossible: one line, exit 2. Looked up
# by module so that none is imported just to be caught: a module not yet imported cannot
# have raised its error (start-up time, issue 5).
_USER_ERRORS = (
    ("domain.config", "ConfigError"),
    ("streams.embedded", "EmbeddedError"),
    ("streams.inbox", "InboxError"),
    ("projections.journal", "JournalError"),
    ("allot.commands.requests", "RequestError"),
    ("projections.scenario", "ScenarioError"),
    ("projections.simulate", "SimulationError"),
    ("allot.commands.common", "TargetError"),
    ("projections.traces", "TraceError"),
    ("domain.policies", "UnknownPolicy"),
    ("orjson", "JSONDecodeError"),
)


@app.command()
def completion(
    shell: Annotated[
        str,
        typer.Argument(
            metavar="SHELL",
            help="The shell: bash, zsh or fish.",
            show_default=False,
        ),
    ],
) -> None:
    """Print the shell completion script for SHELL: TAB completes commands, options,
    and from a --data folder (or $ALLOT_DATA) allocations, hosts, clusters and your live
    workload ids.

    bash: add `eval "$(allot completion bash)"` to ~/.bashrc. zsh: add
    `eval "$(allot completion zsh)"` to ~/.zshrc, after compinit. fish: run
    `allot completion fish > ~/.config/fish/completions/allot.fish`.

    Kafka ($ALLOT_KAFKA, --kafka) gets commands and options only: reading the journal
    topic for names is too slow for a TAB."""
    if shell not in completion_words.SHELLS:
        raise CliError(f"no completion for shell {shell!r}; give bash, zsh or fish")
    print(completion_words.script(shell))


def _user_errors() -> tuple[type[BaseException], ...]:
    """The user-error classes of the modules imported so far."""
    kinds: list[type[BaseException]] = [CliError]
    for module, name in _USER_ERRORS:
        kind = getattr(sys.modules.get(module), name, None)
        if isinstance(kind, type):
            kinds.append(kind)
    return tuple(kinds)


# commands that never schedule or fold a journal: no policy plugins needed
_NO_PLUGINS = ({"audit", "history", "preemptions"}, {("budget", "log")})


def _needs_plugins(argv: list[str]) -> bool:
    words = [a for a in argv if not a.startswith("-")]
    if not words:
        return False
    if words[0] in _NO_PLUGINS[0] or tuple(words[:2]) in _NO_PLUGINS[1]:
        return False
    if words[0] == "why" and any(a == "--audit" or a.startswith("--audit=") for a in argv):
        # answered from the audit database alone unless a journal is named
        return any(a.split("=")[0] in ("--data", "--journal", "--kafka") for a in argv)
    return True


def _plugins_loaded_before_running(typer_app: typer.Typer) -> None:
    """Installed policy plugins are registered when a command's function runs, after its
    arguments parsed: `--help` and a mistyped flag end before that, and loading them
    (importlib.metadata's scan, and `domain` with its pydantic models) was half of their
    start-up."""
    for info in typer_app.registered_commands:
        if info.callback is not None and not getattr(info.callback, "_loads_plugins", False):
            info.callback = _with_plugins(info.callback)
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            _plugins_loaded_before_running(group.typer_instance)


def _with_plugins(command: Any) -> Any:
    import functools

    # typer reads the parameters through __wrapped__ (inspect.signature follows it)
    @functools.wraps(command)
    def run_with_plugins(*args: Any, **kwargs: Any) -> Any:
        from allot.plugins import load_entry_points

        load_entry_points()
        return command(*args, **kwargs)

    run_with_plugins._loads_plugins = True  # type: ignore[attr-defined]
    return run_with_plugins


def _keep_only_invoked(argv: list[str]) -> None:
    """Keep only the command being run in `app`: typer builds every registered command
    (and a pydantic adapter per parameter) on each start, most of `allot`'s start-up.
    The root help, or a name that is no command, keeps them all (for the list and the
    "did you mean")."""
    word = next((a for a in argv if not a.startswith("-")), None)
    if word is None:
        return

    def name(info: Any) -> str | None:
        callback = getattr(info, "callback", None)
        named = info.name or (
            getattr(info.typer_instance.info, "name", None)
            if getattr(info, "typer_instance", None) is not None
            else None
        )
        if named is None and callback is not None:
            named = callback.__name__
        return named.lower().replace("_", "-") if isinstance(named, str) else None

    commands = [c for c in app.registered_commands if name(c) == word]
    groups = [g for g in app.registered_groups if name(g) == word]
    if commands or groups:
        app.registered_commands = commands
        app.registered_groups = groups
        if not groups:
            # a Typer with one command and no callback would run it as the whole program
            # (no command name); a no-op callback keeps `allot NAME ...` a group
            app.callback()(_stay_a_group)


def _stay_a_group() -> None:
    pass


def _flow_help(typer_app: typer.Typer) -> None:
    """Rich keeps a docstring's line breaks, so a paragraph hard-wrapped in the source
    prints ragged at any other width. Give every command its help with each paragraph
    on one line (rich wraps it to the terminal), and a short help, for command lists,
    made of the first paragraph."""
    import inspect

    for info in typer_app.registered_commands:
        text = info.help or (info.callback.__doc__ if info.callback else None)
        if not text:
            continue
        paragraphs = [" ".join(p.split()) for p in inspect.cleandoc(text).split("\n\n")]
        info.help = "\n\n".join(paragraphs)
        if info.short_help is None:
            info.short_help = paragraphs[0]
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            _flow_help(group.typer_instance)


# click's usage errors, whichever click typer uses (recent typers carry their own copy)
_UsageError = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
_ClickException = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


def _unknown_option(why: Exception, argv: list[str]) -> str | None:
    """'No such option: --weight' for an unknown flag given to a command that takes a
    negative number as an argument (budget set, host register): click lets unknown
    options through to those as arguments, then names the wrong mistake ('Got unexpected
    extra argument(s) (--weight 3)', or 'Invalid value for 'weight''). None when the
    command parses options as usual, or no word of `argv` is an unknown option."""
    ctx = getattr(why, "ctx", None)
    if ctx is None or not ctx.ignore_unknown_options:
        return None
    params = ctx.command.params
    options = [
        o for p in params if p.param_type_name == "option" for o in (*p.opts, *p.secondary_opts)
    ]
    arguments = [p.name for p in params if p.param_type_name == "argument"]
    words = argv[: argv.index("--")] if "--" in argv else argv
    for word in words:
        flag = word.partition("=")[0]
        if not flag.startswith("-") or _is_number(flag) or flag in (*options, "--help"):
            continue
        from difflib import get_close_matches

        # `--weight 3`, `--gpu 8`: meant for an argument
        argument = get_close_matches(flag.lstrip("-"), arguments, n=1, cutoff=0.75)
        if argument:
            return f"No such option: {flag} ({argument[0].upper()} is given without a flag)"
        return _no_such_option_message(flag, options)
    return None


CLOSE_OPTION = 0.6  # difflib's default cutoff, as click's, over the names without dashes


def _closest_options(flag: str, options: list[str]) -> list[str]:
    """The options nearest `flag`, compared without their dashes, and only the nearest
    (several when they tie): click's guess compares `--alocation` with the dashes too,
    and offered `--horizon` beside `--allocation`."""
    from difflib import SequenceMatcher

    name = flag.lstrip("-")
    longs = flag.startswith("--")
    scores = {
        option: SequenceMatcher(None, name, option.lstrip("-")).ratio()
        for option in set(options)
        if option.startswith("--") == longs
    }
    best = max(scores.values(), default=0.0)
    if best < CLOSE_OPTION:
        return []
    return sorted(option for option, score in scores.items() if score == best)


def _no_such_option_message(flag: str, options: list[str]) -> str:
    close = _closest_options(flag, options)
    return f"No such option: {flag}" + (f" (did you mean {' or '.join(close)}?)" if close else "")


def _mistyped_option(why: Exception) -> str | None:
    """click's 'No such option' with allot's guess at what was meant (`_closest_options`)."""
    ctx = getattr(why, "ctx", None)
    flag = getattr(why, "option_name", None)
    if type(why).__name__ != "NoSuchOption" or ctx is None or not isinstance(flag, str):
        return None
    options = [o for p in ctx.command.params for o in (*p.opts, *p.secondary_opts)]
    return _no_such_option_message(flag, [o for o in options if o.startswith("-")])


_GPUS_ONLY = "allot schedules GPUs only: there are no CPUs or memory to ask for"
# sbatch flags a Slurm user types to `allot submit` by habit, and what allot has instead
_SBATCH_FLAGS = {
    "--gres": "sbatch's --gres=gpu:N is -G N here",
    "--gpus-per-node": "give the job's GPUs in all with -G N; a gang larger than a host "
    "gets whole hosts, and --one-host keeps them all on one",
    "--time": "allot has no time limit: --min-runtime is the protection the job buys, "
    "after which it runs on, preemptible; --runtime or --expected-runtime say how long it needs",
    "--partition": "a partition is a cluster here: --cluster NAME",
    "--account": "sbatch's --account is -A PATH here",
    "--qos": "--priority orders work inside its allocation; allot has no QOS",
    "--requeue": "sbatch's --requeue is --resumable",
    "--mem": _GPUS_ONLY,
    "--mem-per-gpu": _GPUS_ONLY,
    "--cpus-per-task": _GPUS_ONLY,
    "--cpus-per-gpu": _GPUS_ONLY,
}
_SBATCH_FLAGS.update(
    {
        "-t": _SBATCH_FLAGS["--time"],
        "-p": _SBATCH_FLAGS["--partition"],
        "-q": _SBATCH_FLAGS["--qos"],
        "-c": _GPUS_ONLY,
    }
)


# submit flags a Kueue user reaches for: a Job's queue label and priority class
_LOCAL_QUEUE = "Kueue's LocalQueue (kueue.x-k8s.io/queue-name) is a leaf allocation here: -A PATH"
_PRIORITY_CLASS = (
    "a WorkloadPriorityClass's value is --priority N here; it orders work inside its "
    "allocation only (under fairshare it preempts nothing)"
)
_KUEUE_FLAGS = {
    "--queue": _LOCAL_QUEUE,
    "--queue-name": _LOCAL_QUEUE,
    "--local-queue": "Kueue's LocalQueue is a leaf allocation here: -A PATH",
    "--priority-class": _PRIORITY_CLASS,
    "--workload-priority-class": _PRIORITY_CLASS,
}
# every flag `allot submit` answers with what it has instead
_SUBMIT_HABITS = {**_SBATCH_FLAGS, **_KUEUE_FLAGS}

# commands a kubectl/kueuectl user types by habit, and allot's own
_KUBECTL_COMMANDS = {
    "describe": "`kubectl describe workload` is `allot why ID` here",
    "get": "`kubectl get workloads` is `allot queue` here (`allot acct` lists ended work too)",
    "list": "`kueuectl list workloads` is `allot queue` here (`allot acct` lists ended work too)",
    "stop": "`kueuectl stop workload` is `allot hold ID` here for pending work; running work "
    "stops with `allot requeue ID` (it waits again) or `allot cancel ID`",
    "resume": "`kueuectl resume workload` is `allot release ID` here",
}


def _kubectl_hint(why: Exception, argv: list[str]) -> str | None:
    """What allot has instead of a kubectl or kueuectl verb typed as a command
    (`allot describe ID`): click's guess ('Did you mean budget?' for get) misleads."""
    ctx = getattr(why, "ctx", None)
    if ctx is None or ctx.parent is not None or "No such command" not in str(why):
        return None
    word = next((w for w in argv if not w.startswith("-")), None)
    hint = _KUBECTL_COMMANDS.get(word or "")
    return f"No such command '{word}': {hint}" if hint else None


def _submit_habit_hint(why: Exception) -> str | None:
    """What `allot submit` has instead of an sbatch or Kueue flag it was given
    (`--gres=gpu:8`, `-t 1h`, `--mem 10G`, `--queue-name`): click's guess at a close
    option (`--as, --gpus` for --gres, `--name` for --mem) sends a Slurm user the wrong
    way."""
    ctx = getattr(why, "ctx", None)
    flag = getattr(why, "option_name", None)
    if ctx is None or ctx.command.name != "submit" or not isinstance(flag, str):
        return None
    hint = _SUBMIT_HABITS.get(flag)
    return f"No such option: {flag}; {hint}" if hint else None


def _is_number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


DATA_ENV = "ALLOT_DATA"
_SOURCES = ("--data", "--kafka", "--journal")


def _default_data(argv: list[str]) -> list[str]:
    """`$ALLOT_DATA` stands for `--data DIR` (as `$ALLOT_KAFKA` does for --kafka) when
    the command takes --data and names no source itself; `$ALLOT_KAFKA` wins if both are
    set, as --kafka given alone would."""
    import os

    data = os.environ.get(DATA_ENV, "").strip()
    if not data or os.environ.get("ALLOT_KAFKA", "").strip():
        return argv
    if any(a in _SOURCES or a.startswith(tuple(f"{s}=" for s in _SOURCES)) for a in argv):
        return argv
    command: Any = typer.main.get_command(app)
    words = 0  # the command's own words (`host list`): --data goes right after them
    for word in argv:
        if word.startswith("-"):
            break
        sub = getattr(command, "commands", {}).get(word)
        if sub is None:
            break
        command = sub
        words += 1
    if any("--data" in getattr(param, "opts", ()) for param in command.params):
        # not at the end: after `--` it would be an argument, after an option left
        # without its value it would be that value
        return [*argv[:words], "--data", data, *argv[words:]]
    return argv


def _one_source(argv: list[str]) -> None:
    """Refuse two sources given as flags (`--data D --kafka H:P`): one of them used to
    win without a word. (`$ALLOT_KAFKA` beside --data is a default, not a conflict.)"""
    from allot.commands.common import TargetError

    given = []
    for word in argv:
        if word == "--":
            break
        flag = word.partition("=")[0]
        if flag in _SOURCES and flag not in given:
            given.append(flag)
    if len(given) > 1:
        raise TargetError(f"{' and '.join(given)}: give one place to read or send, not both")


def _explained_usage_error(why: _UsageError, argv: list[str]) -> str:
    """A usage error in allot's words where a habit from another tool explains it."""
    return (
        _unknown_option(why, argv)
        or _submit_habit_hint(why)
        or _kubectl_hint(why, argv)
        or _mistyped_option(why)
        or why.format_message()
    )


def main() -> None:
    if completion_words.requested():
        _keep_only_invoked(completion_words.typed_words())
        completion_words.complete(typer.main.get_command(app))
    try:
        _keep_only_invoked(sys.argv[1:])
        _one_source(sys.argv[1:])
        sys.argv[1:] = _default_data(sys.argv[1:])
        _flow_help(app)
        if _needs_plugins(sys.argv[1:]):
            _plugins_loaded_before_running(app)
        code = app(standalone_mode=False)
    except _UsageError as why:  # one line, as every other error (not click's panel)
        from rich.markup import escape

        where = why.ctx.command_path if why.ctx is not None else "allot"
        message = f"{_explained_usage_error(why, sys.argv[1:])} (see `{where} --help`)"
        err.print(f"[red]error:[/] {escape(message)}", soft_wrap=True)
        sys.exit(why.exit_code)
    except _ClickException as why:
        from rich.markup import escape

        err.print(f"[red]error:[/] {escape(why.format_message())}", soft_wrap=True)
        sys.exit(why.exit_code)
    except InterruptedWithNote as why:
        print(why, file=sys.stderr)
        sys.exit(130)
    except (KeyboardInterrupt, typer.Abort):
        err.print("interrupted")
        sys.exit(130)
    except BrokenPipeError:  # `| head` closed stdout: the shell's SIGPIPE status, quietly
        from allot.commands.common import CLOSED_PIPE_EXIT, stdout_to_devnull

        stdout_to_devnull()
        sys.exit(CLOSED_PIPE_EXIT)
    except Exception as why:
        if not isinstance(why, _user_errors()):
            raise
        from rich.markup import escape

        # soft_wrap: one line however long (rich would break it at the console width, 80
        # columns when stderr is not a terminal); escape: a message may hold [brackets]
        err.print(f"[red]error:[/] {escape(str(why))}", soft_wrap=True)
        sys.exit(2)
    if code == 130:  # typer turns Ctrl-C in a command into a silent Exit(130)
        err.print("interrupted")
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
