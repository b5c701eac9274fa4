"""`allot executor --simulate`: a stand-in launcher, and the contract a real one follows.

The scheduler only *decides*; a launcher makes the decisions happen on the machines
and tells the scheduler when work ends. It needs nothing but the journal (topic
`allot.journal` keyed by cluster, or `DIR/journal.jsonl`) and the inbox:

How a real launcher (Kubernetes Job, Slurm, a container runtime) consumes the journal
-----------------------------------------------------------------------------------
1. Read the journal of its cluster in order (a Kafka consumer on `allot.journal`
   with `isolation_level="read_committed"`, filtered by key = cluster, committing its
   own offset; or tail `DIR/journal.jsonl`).
   Keep each `workload.submitted` (what to run: its name, tags, and whatever your
   submit wrapper put in them, e.g. an image or a script).
2. `workload.placed` (`workload`, `attempt`, `hosts` = host -> GPU indices): start
   attempt `attempt` of the workload on exactly those GPUs — a Kubernetes Job with a
   nodeSelector/affinity for each host and `CUDA_VISIBLE_DEVICES` (or a device plugin
   allocation) for the indices; a Slurm job with `--nodelist` and the GPU binding; a
   container with `--gpus '"device=0,1"'`. Starting late is fine; starting somewhere
   else is not (the scheduler counts those GPUs as taken).
3. `workload.preempted` (`workload`, `attempt`, `reason`, `beneficiary`, `requeued`):
   stop that attempt, so the beneficiary can start on the same GPUs (a Kubernetes Job:
   set `spec.suspend: true` or delete it, and create a new Job for the next attempt;
   README, *A Kubernetes Job launcher*). A grace period
   for checkpointing (`preempt_grace` in the journaled `config.set`, advisory) is the
   launcher's to give, before the beneficiary's own `workload.placed` is acted on.
   With `requeued: true` the workload waits again and will get a new
   `workload.placed` with the next attempt: resume it from its checkpoint there if it
   is resumable, else start it over (reason `requested`, from `allot requeue`, requeues
   work that is not resumable too). Reason `gpus_removed`: its host was removed
   (`host.removed`) or registered again with fewer GPUs; stop it if it still runs.
4. When an attempt ends on its own, send `workload.finished` to the inbox with
   `outcome` `completed`, `failed` or `lost` (the node died) and the `attempt`; a
   workload that could not be started at all is reported `failed`, or `lost` when its
   host is gone. When a node dies, first report its host unhealthy (`host.health`),
   then its attempts `lost`: otherwise the scheduler, which still counts the host as
   healthy, may place the requeued work on it again at once. The attempt makes
   a late report about an old attempt harmless: the scheduler rejects it instead of
   ending the new one (a report without `attempt` ends the running one). Give each
   report an id that is the same when resent, e.g. `launcher/<cluster>/<workload>/<attempt>`.
   The journal records the accepted report with `requeued: true` for a `lost` attempt
   of resumable work, which waits again like a requeued preemption (its next
   `workload.placed` starts the next attempt; resume it from its checkpoint there), at
   most `max_lost_requeues` times (config, default 5; then a lost report ends it).
5. `workload.cancelled`: stop it; no report is needed.
6. On restart, re-read the journal (or resume from the committed offset) to its end
   before acting, and reconcile: the attempts that should run are those placed and not
   yet finished, preempted or cancelled. Which of them do run is the launcher's own
   record (keep one: process or job ids, exit statuses): adopt what still runs, report
   what ended while it was down, stop what the journal ended, start only attempts it
   never started. Nothing is sent back for a preemption or a cancellation.

Requests go to `allot.inbox` keyed by cluster, or as lines
`{"ts": <now>, "value": "<request JSON>"}` appended to `DIR/inbox.jsonl` under `flock`
on `DIR/.lock` (`streams.inbox.open_inbox` writes either); `streams.sources.journal_tail`
reads either journal. `examples/launcher/local_launcher.py` is a real launcher built on
them (local processes), tested by `tests/e2e/test_local_launcher.py`.

Requests are v1 inbox records (DESIGN §4): `type`, `v: 1`, a unique `id`, `time`
(now; the scheduler stamps its own), `cluster`, `actor` (this launcher's principal:
`executor` for the simulated one, or its `--as`),
`workload`, `outcome`, `attempt`, and optionally `exit_code` and `reason` (one line),
which `allot acct` and `allot why` show. (`requeued` is the scheduler's to set: a
report's own is not taken.)

The simulated executor
----------------------
`allot executor --simulate` plays that launcher without running anything: on
`workload.placed` it schedules a `workload.finished` (outcome completed, with the
attempt) for when the workload's remaining `runtime` (from its `workload.submitted`)
has passed, divided by `--speed`; `workload.preempted` cancels that report and, for
resumable work, keeps the progress made (so a requeued workload needs only the rest;
so does a `lost` report of resumable work, which the journal records as requeued);
work without a `runtime` runs until cancelled. Report ids are deterministic
(`executor/<cluster>/<workload>/<attempt>`), so a restarted executor that resends a
report cannot end anything twice. `--once` reads the journal as it is now, fires the
reports it schedules (waiting for them), and exits.

GPU utilization (observability, never policy): a launcher that can read how busy an
attempt keeps its GPUs (nvidia-smi, DCGM) may send `workload.utilization` now and
then: `workload`, `attempt` (the running one; a reading of an old attempt is
rejected), `utilization` (mean over the GPUs and the interval, 0..1), optionally
`memory` (mean fraction of GPU memory in use, 0..1), and `interval` (the seconds the
mean covers, default 300). The scheduler journals it without folding it (decisions
are the same with or without these), and `allot queue`, `allot why`, `allot idle` and
the metric `allot_allocation_idle_gpus` show work below `idle_threshold` for
`idle_after` or longer (config). A launcher that cannot read the GPUs sends nothing.
With `--idle-fraction F` the simulated executor reports a reading of every running
attempt each `--utilization-every` (default 5m): that fraction of workloads (chosen by
their id, so the same ones on every run) at 0% (idle, squatting), the rest busy (90%);
with `--once`, one reading of each running attempt since its start.
"""

from __future__ import annotations

import contextlib
import heapq
import math
import queue
import signal
import threading
import time
import zlib
from dataclasses import dataclass
from typing import Annotated, Any

import orjson
import typer

from allot.commands.common import (
    ClusterOpt,
    DataOpt,
    KafkaOpt,
    TargetError,
    plural,
    resolve_target,
    whoami,
)

ACTOR = "executor"
UTILIZATION_EVERY = 300.0  # seconds between a running attempt's readings
BUSY, IDLE = 0.9, 0.0  # the simulated readings (mean GPU utilization)


@dataclass(slots=True)
class _Job:
    runtime: float | None  # seconds of work; None: runs until cancelled
    resumable: bool
    done: float = 0.0  # seconds of work completed in earlier attempts
    attempt: int = 0
    started: float | None = None  # journal time the current attempt started


class SimulatedLauncher:
    """Journal records (dicts) in, due `workload.finished` requests out. No I/O."""

    def __init__(
        self,
        cluster: str,
        speed: float = 1.0,
        actor: str = ACTOR,
        idle_fraction: float | None = None,
        utilization_every: float | None = UTILIZATION_EVERY,
    ) -> None:
        """`idle_fraction`: report GPU utilization, that fraction of workloads idle
        (None: no readings); `utilization_every`: seconds between readings (None: one
        reading of each attempt running when first asked, as `--once` sends)."""
        if not speed > 0:
            raise ValueError("--speed must be > 0")
        self.cluster = cluster
        self.speed = speed
        self.actor = actor
        self.idle_fraction = idle_fraction
        self.utilization_every = utilization_every
        # running attempts -> when their next reading is due
        self.readings: dict[tuple[str, int], float] = {}
        self.jobs: dict[str, _Job] = {}
        self.timers: dict[tuple[str, int], float] = {}  # (workload, attempt) -> due
        self.heap: list[tuple[float, str, int]] = []
        # reports sent and not yet answered: every inbox request ends up in the journal
        # as itself or its rejection, so each entry lives until that answer is read
        self.sent: dict[str, tuple[str, int]] = {}  # request id -> (workload, attempt)
        self.rejected: list[dict[str, Any]] = []  # rejections of our reports, unlogged

    def report_id(self, workload: str, attempt: int) -> str:
        return f"{ACTOR}/{self.cluster}/{workload}/{attempt}"

    def on_record(self, r: dict[str, Any]) -> None:
        if r.get("cluster", "default") != self.cluster:
            return
        kind = r.get("type")
        wid = r.get("workload")
        t = float(r.get("time", 0.0))
        if kind == "workload.submitted" and isinstance(wid, str):
            runtime = r.get("runtime")
            self.jobs[wid] = _Job(
                runtime=float(runtime) if isinstance(runtime, int | float) else None,
                resumable=bool(r.get("resumable", False)),
            )
        elif kind == "workload.placed" and isinstance(wid, str):
            job = self.jobs.setdefault(wid, _Job(runtime=None, resumable=False))
            attempt = int(r.get("attempt", 1))
            self.readings.pop((wid, job.attempt), None)
            job.attempt, job.started = attempt, t
            if self.idle_fraction is not None:
                every = self.utilization_every
                self.readings[(wid, attempt)] = -math.inf if every is None else t + every
            if job.runtime is not None:
                due = t + max(0.0, job.runtime - job.done) / self.speed
                self.timers[(wid, attempt)] = due
                heapq.heappush(self.heap, (due, wid, attempt))
        elif (
            kind == "workload.preempted" or (kind == "workload.finished" and r.get("requeued"))
        ) and isinstance(wid, str):
            # a requeued attempt: preempted, or lost with its node (resumable work)
            job = self.jobs.get(wid)
            named = r.get("attempt")
            attempt = int(named if named is not None else job.attempt if job else 1)
            self.timers.pop((wid, attempt), None)
            self.readings.pop((wid, attempt), None)
            if job is not None and job.attempt == attempt and job.started is not None:
                if job.resumable:
                    job.done += max(0.0, t - job.started) * self.speed
                job.started = None
            if not r.get("requeued", False):
                self._forget(wid)
        elif kind in ("workload.finished", "workload.cancelled") and isinstance(wid, str):
            self._forget(wid)
            self.sent.pop(r.get("id"), None)  # type: ignore[arg-type]
        elif isinstance(kind, str) and kind.endswith(".rejected") and r.get("ref") in self.sent:
            del self.sent[r["ref"]]
            self.rejected.append(r)

    def _forget(self, wid: str) -> None:
        job = self.jobs.pop(wid, None)
        if job is not None:
            self.timers.pop((wid, job.attempt), None)
            self.readings.pop((wid, job.attempt), None)

    def is_idle(self, wid: str) -> bool:
        """The same workloads idle on every run: a hash of the id against the fraction."""
        fraction = self.idle_fraction or 0.0
        return zlib.crc32(wid.encode()) / 2**32 < fraction

    def next_reading(self) -> float | None:
        """When the next utilization reading is due (None: none scheduled)."""
        return min(self.readings.values(), default=None)

    def readings_due(self, now: float) -> list[dict[str, Any]]:
        """The utilization readings due by `now`, each attempt's next one scheduled
        (`utilization_every` None: each attempt read once)."""
        out = []
        every = self.utilization_every
        for (wid, attempt), at in list(self.readings.items()):
            if at > now:
                continue
            job = self.jobs.get(wid)
            started = job.started if job is not None and job.started is not None else now
            since_start = now - started
            interval = since_start if every is None else min(every, since_start)
            if every is None:
                del self.readings[(wid, attempt)]
            else:
                self.readings[(wid, attempt)] = now + every
            idle = self.is_idle(wid)
            out.append(
                {
                    "type": "workload.utilization",
                    "v": 1,
                    # one reading a second at most per attempt: a resend is a duplicate
                    "id": f"{self.report_id(wid, attempt)}/utilization@{int(now)}",
                    "time": now,
                    "cluster": self.cluster,
                    "actor": self.actor,
                    "workload": wid,
                    "attempt": attempt,
                    "utilization": IDLE if idle else BUSY,
                    "memory": 0.3 if idle else 0.8,
                    "interval": round(min(86400.0, max(1.0, interval)), 3),
                }
            )
        return out

    def next_due(self) -> float | None:
        while self.heap:
            due, wid, attempt = self.heap[0]
            if self.timers.get((wid, attempt)) == due:
                return due
            heapq.heappop(self.heap)
        return None

    def scheduled(self) -> int:
        return len(self.timers)

    def due(self, now: float) -> list[dict[str, Any]]:
        """The reports due by `now` (removed from the schedule)."""
        out = []
        while (at := self.next_due()) is not None and at <= now:
            _, wid, attempt = heapq.heappop(self.heap)
            del self.timers[(wid, attempt)]
            rid = self.report_id(wid, attempt)
            self.sent[rid] = (wid, attempt)
            out.append(
                {
                    "type": "workload.finished",
                    "v": 1,
                    "id": rid,
                    "time": now,
                    "cluster": self.cluster,
                    "actor": self.actor,
                    "workload": wid,
                    "outcome": "completed",
                    "attempt": attempt,
                }
            )
        return out


_END = object()


def _feed(launcher: SimulatedLauncher, line: bytes) -> None:
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        return  # not ours to judge: the scheduler's views name bad lines
    if isinstance(record, dict):
        launcher.on_record(record)


def _reader(lines: Any, out: queue.Queue[Any]) -> None:
    try:
        for line in lines:
            out.put(line)
    except BaseException as exc:
        out.put(exc)
    out.put(_END)


# waits between attempts while the inbox is down: short, because the scheduler keeps
# deciding meanwhile (a report 30 s late let a tick preempt work that had finished)
RETRY_S = (1.0, 2.0, 3.0, 5.0)


def send_retrying(
    inbox: Any, batch: list[dict[str, Any]], stop: threading.Event, log: Any = None
) -> bool:
    """Send the reports, retrying while the inbox cannot take them (a broker restart):
    the same requests again, so one that did arrive is only a duplicate id the scheduler
    rejects. False if `stop` was set first. An inbox that refuses for good (a folder
    it may not write: InboxRefused) is not retried: that error is raised at once."""
    from streams.inbox import InboxError, InboxRefused

    attempt = 0
    while True:
        try:
            inbox.send(batch)
            return True
        except InboxRefused:
            raise
        except InboxError as why:
            wait = RETRY_S[min(attempt, len(RETRY_S) - 1)]
            attempt += 1
            if log:
                log(f"cannot send {len(batch)} report(s) ({why}); retrying in {wait:g} s")
            if stop.wait(wait):
                return False


def run_executor(
    target: Any,
    cluster: str,
    *,
    speed: float = 1.0,
    once: bool = False,
    log: Any = None,
    banner: str | None = None,
    clock: Any = time.time,
    stop: threading.Event | None = None,
    actor: str = ACTOR,
    idle_fraction: float | None = None,
    utilization_every: float = UTILIZATION_EVERY,
) -> int:
    """Play the launcher against `target` (`.kafka` / `.data`); returns reports sent.
    `banner` is logged once the journal answers (so a bad source is one error line)."""
    from itertools import islice

    from streams.inbox import open_inbox
    from streams.sources import EmptyJournal, journal_lines

    every = None if once else utilization_every  # --once: one reading of each attempt
    launcher = SimulatedLauncher(cluster, speed, actor, idle_fraction, every)
    stop = stop or threading.Event()
    # the journal as it is now, first and whole: a report is due only once every record
    # about its attempt is known (a restarted executor must not report work whose end,
    # or whose preemption, it had not read yet)
    backlog = 0
    # a scheduler started just now may not have written its journal yet: follow it
    unwritten = target.data is not None and not (target.data / "journal.jsonl").exists()
    try:
        if not (unwritten and not once):
            for line in journal_lines(kafka=target.kafka, data=target.data, cluster=cluster):
                backlog += 1
                _feed(launcher, line)
    except EmptyJournal:
        pass
    inbox = open_inbox(target)
    check = getattr(inbox, "check", None)  # a folder it may not write: say so now, once
    if check is not None:
        check()
    if banner and log:
        log(banner)
    records: queue.Queue[Any] = queue.Queue(maxsize=10_000)
    reading = not once
    thread = None
    if reading:  # then what comes after it, as it comes
        lines = journal_lines(kafka=target.kafka, data=target.data, cluster=cluster, follow=True)
        thread = threading.Thread(
            target=_reader, args=(islice(lines, backlog, None), records), daemon=True
        )
        thread.start()
    sent = 0
    try:
        while not stop.is_set():
            now = clock()
            batch = launcher.due(now)
            if batch:
                if not send_retrying(inbox, batch, stop, log):
                    break  # stopped while the inbox was unreachable
                sent += len(batch)
                if log:
                    for r in batch:
                        log(f"reported {r['workload']} attempt {r['attempt']} completed")
            readings = launcher.readings_due(now)
            if readings:
                if not send_retrying(inbox, readings, stop, log):
                    break
                sent += len(readings)
                if log:
                    idle = sum(1 for r in readings if r["utilization"] == IDLE)
                    log(f"reported the GPU utilization of {plural(len(readings), 'attempt')} "
                        f"({idle} idle)")  # fmt: skip
            for rej in launcher.rejected:
                if log:
                    log(f"report {rej.get('ref')} rejected: {rej.get('error')}")
            launcher.rejected.clear()
            alive = thread is not None and thread.is_alive()
            if not reading and (once or not alive) and launcher.next_due() is None:
                break
            nxt = min(
                (t for t in (launcher.next_due(), launcher.next_reading()) if t is not None),
                default=None,
            )
            wait = 0.2 if nxt is None else min(0.2, max(0.0, nxt - clock()))
            if not reading:
                stop.wait(wait)
                continue
            try:
                item = records.get(timeout=wait)
            except queue.Empty:
                continue
            while True:
                if item is _END:
                    reading = False
                    break
                if isinstance(item, BaseException):
                    raise item
                _feed(launcher, item)
                try:
                    item = records.get_nowait()
                except queue.Empty:
                    break
    finally:
        inbox.close()
    return sent


def register(app: typer.Typer) -> None:
    """Add `executor` to the `allot` app."""

    @app.command("executor", help=_HELP)
    def executor(
        simulate: Annotated[
            bool,
            typer.Option(
                "--simulate",
                help="Play the launcher: report workload.finished after each workload's "
                "runtime (the only mode this command has).",
            ),
        ] = False,
        speed: Annotated[
            float,
            typer.Option("--speed", help="Run simulated work this many times faster."),
        ] = 1.0,
        once: Annotated[
            bool,
            typer.Option(
                "--once",
                help="Read the journal as it is now, send the reports it schedules (waiting "
                "for them), then exit.",
            ),
        ] = False,
        quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No per-report log.")] = False,
        idle_fraction: Annotated[
            float | None,
            typer.Option(
                "--idle-fraction",
                help="Also report each running attempt's GPU utilization "
                "(workload.utilization), this fraction (0..1) of workloads idle at 0% "
                "(the same ones on every run), the rest busy at 90%: to demo `allot idle`.",
                show_default=False,
            ),
        ] = None,
        utilization_every: Annotated[
            str,
            typer.Option(
                "--utilization-every",
                help="With --idle-fraction: time between a running attempt's readings "
                "(with --once: one reading of each, covering its run so far).",
            ),
        ] = "5m",
        kafka: KafkaOpt = None,
        data: DataOpt = None,
        cluster: ClusterOpt = "default",
        as_: Annotated[
            str | None,
            typer.Option(
                "--as",
                help=f"Report as this principal (default {ACTOR}): the actor of its "
                "workload.finished reports, as a real launcher's (a gateway may insist on it). "
                "Not $USER, unlike the other request commands: the launcher is a role, not a "
                "person. The scheduler accepts a report from any actor (it checks the workload "
                "and attempt), so the name only records who ended the work, and the service "
                "account a launcher runs under (root, or no $USER in a container) would say "
                "less.",
                show_default=False,
            ),
        ] = None,
    ) -> None:
        from streams.embedded import EmbeddedError
        from streams.inbox import InboxError
        from streams.sources import SourceError

        try:
            if not simulate:
                raise TargetError(
                    "only the simulated executor is built in: use --simulate (a real launcher "
                    "follows the contract in README, 'How a real launcher consumes the journal'; "
                    "examples/launcher/local_launcher.py is one to start from)"
                )
            if not (speed > 0 and math.isfinite(speed)):
                raise TargetError(f"--speed must be a number > 0, got {speed:g}")
            if idle_fraction is not None and not 0 <= idle_fraction <= 1:
                raise TargetError(f"--idle-fraction must be from 0 to 1, got {idle_fraction:g}")
            every = _positive_duration(utilization_every, "--utilization-every")
            target = resolve_target(kafka, data)
            actor = ACTOR if as_ is None else whoami(as_)

            def log(message: str) -> None:
                if not quiet:
                    typer.echo(f"allot executor: {message}", err=True)

            banner = (
                f"simulating the launcher of cluster {cluster} on {target.label}, "
                f"speed x{speed:g}, reporting as {actor}"
                + (
                    f", GPU utilization {idle_fraction:.0%} of workloads idle"
                    if idle_fraction is not None
                    else ""
                )
                + (", once" if once else "")
            )
            stop = threading.Event()  # SIGTERM stops it like Ctrl-C, with its last line
            with contextlib.suppress(ValueError):  # not the main thread (tests)
                # set from a thread: the handler runs in the main thread, which may be
                # inside stop.wait() holding the lock set() takes (a deadlock)
                signal.signal(
                    signal.SIGTERM,
                    lambda *_: threading.Thread(target=stop.set, daemon=True).start(),
                )
            sent = run_executor(
                target,
                cluster,
                speed=speed,
                once=once,
                log=log,
                banner=banner,
                stop=stop,
                actor=actor,
                idle_fraction=idle_fraction,
                utilization_every=every,
            )
            if not quiet:
                typer.echo(f"allot executor: {plural(sent, 'report')} sent", err=True)
        except (TargetError, SourceError, InboxError, EmbeddedError) as why:
            typer.echo(f"error: {why}", err=True)
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            raise typer.Exit(130) from None  # `allot` says "interrupted"


def _positive_duration(text: str, flag: str) -> float:
    from domain.durations import parse_duration

    try:
        seconds = parse_duration(text)
    except ValueError as why:
        raise TargetError(f"{flag}: {why}") from None
    if not 0 < seconds <= 86400:
        raise TargetError(f"{flag} must be more than 0 and at most 1d, got {text}")
    return seconds


_HELP = (
    "Play the launcher for demos and load tests (--simulate): report each placed "
    "workload finished after its runtime.\n\n"
    "Follow the journal, report workload.finished after "
    "each workload's runtime (divided by --speed), drop the report when it is preempted "
    "(resumable work keeps its progress), never report work without a runtime. A --data "
    "folder whose inbox it may not write (read-only, another user's) stops it at its "
    "start: one error line, exit 2.\n\n"
    "A real launcher (Kubernetes Job, Slurm, a container runtime) follows the same "
    "contract: read the cluster's journal in order; on workload.placed start that "
    "attempt on exactly the hosts and GPU indices given; on workload.preempted stop "
    "it (a checkpoint grace period, preempt_grace in the journaled config, is the "
    "launcher's to give) before the beneficiary starts on those GPUs; when an attempt "
    "ends, send workload.finished with outcome completed, failed or lost and the "
    "attempt (a workload that cannot be started is reported failed); on "
    "workload.cancelled stop it. Reports for an old attempt are rejected, never end a "
    "newer one. See the module docstring of allot/commands/executor.py for details, and "
    "examples/launcher/local_launcher.py for a real launcher (local processes) to start from."
)

__all__ = ["SimulatedLauncher", "register", "run_executor"]
