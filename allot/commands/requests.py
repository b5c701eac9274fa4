"""Requests people type: submit, cancel, budget set/remove, host register/health.

Each command builds one v1 request (DESIGN §4) and sends it to the inbox — of a Kafka
broker (`--kafka HOST:PORT`, default `$ALLOT_KAFKA`) or an embedded journal folder
(`--data DIR`). Sending is asynchronous: the scheduler validates, authorizes and
decides; `allot submit --wait N` waits for its verdict in the journal.
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from allot.commands.common import (
    HORIZON_DEFAULT,
    AsOpt,
    ClusterOpt,
    DataOpt,
    HorizonOpt,
    InterruptedWithNote,
    KafkaOpt,
    Target,
    TargetError,
    horizon_seconds,
    plural,
    quiet_on_closed_pipe,
    resolve_target,
    visible,
    whoami,
)
from allot.commands.views import AllocationsOpt, NameOpt, NodelistOpt, StatesOpt, UserOpt

if TYPE_CHECKING:  # imported where used: the CLI starts without the read models
    from projections.budget_tree import BudgetTree


class RequestError(ValueError):
    """A bad flag value (e.g. a duration): one line for the user, exit 2."""


def _errors() -> tuple[type[BaseException], ...]:
    from streams.embedded import EmbeddedError
    from streams.inbox import InboxError

    return (TargetError, RequestError, InboxError, EmbeddedError)


@contextmanager
def one_line_errors() -> Iterator[None]:
    """Known errors become `error: ...` on stderr and exit code 2, never a traceback."""
    try:
        yield
    except _errors() as why:
        from allot.journald import error_line

        typer.echo(error_line(f"error: {why}"), err=True)
        raise typer.Exit(2) from None


def _duration(flag: str, text: str | None) -> float | None:
    if text is None:
        return None
    from domain.durations import format_duration, parse_duration

    try:
        seconds = parse_duration(text)
    except ValueError as why:
        raise RequestError(f"{flag} {text!r}: {why}") from None
    if seconds > 0 and _bare_number(text):
        # Slurm's --time reads a bare number as minutes: `--min-runtime 15` protected
        # a job for 15 seconds without a word
        typer.echo(
            f"note: {flag} {text.strip()} means {format_duration(seconds)}: a bare number "
            "is seconds here, not minutes as in Slurm's --time",
            err=True,
        )
    return seconds


def _bare_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


MAX_ARRAY_TASKS = 10_000
# Without --wait, a request to a folder that a scheduler serves now waits up to this long
# for the verdict on it (an idle scheduler answers within a few hundredths of a second),
# so that a rejection is said at once, as sbatch's and scancel's errors are, instead of
# only in `allot why`; an accepted request, or no verdict in time, returns as before.
ADMISSION_WAIT_S = 10.0
# what --help says of that wait, for every command that takes it but submit (its own text)
ADMISSION_WAIT_HELP = (
    f"Without --wait it still waits up to {ADMISSION_WAIT_S:g} s where a verdict can come at "
    "once (a --data folder a scheduler serves now; Kafka, for a login that may read the "
    "journal, with the cluster's scheduler running): a refusal is said then, exit 1; "
    "accepted, or no verdict in time: exit 0."
)
_TASKS = re.compile(r"^(?P<base>.+)_\[(?P<spec>[^\]]+)\]$")


def parse_array(spec: str, what: str | None = None) -> list[int]:
    """Task indexes from Slurm's `--array` syntax: `0-15`, `1,3,5-7`, `0-15:4` (every
    4th). Sorted, without repeats; at most MAX_ARRAY_TASKS. (`%N`, Slurm's limit on
    tasks running at once, is not supported: fair share decides what runs.) `what`
    names the spec in errors (default: the `--array` option)."""
    what = what or f"--array {spec!r}"
    if "%" in spec:
        raise RequestError(
            f"{what}: '%N' (tasks at once) is not supported; fair share and the "
            "allocation's budget decide how many run"
        )
    tasks: set[int] = set()
    for part in spec.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:-(\d+)(?::(\d+))?)?\s*", part)
        if m is None:
            raise RequestError(
                f"{what}: {part.strip()!r} is not N, N-M or N-M:STEP (e.g. 0-15, 1,3,5-7, 0-15:4)"
            )
        first = int(m[1])
        last = int(m[2]) if m[2] is not None else first
        step = int(m[3]) if m[3] is not None else 1
        if step < 1:
            raise RequestError(f"{what}: {part.strip()!r}: the step is at least 1")
        if last < first:
            raise RequestError(f"{what}: {part.strip()!r} is an empty range")
        if (last - first) // step + 1 + len(tasks) > MAX_ARRAY_TASKS:
            raise RequestError(f"{what}: more than {MAX_ARRAY_TASKS:,} tasks")
        tasks.update(range(first, last + 1, step))
    return sorted(tasks)


def expand_ids(ids: list[str]) -> list[str]:
    """Workload ids, with `BASE_[SPEC]` (as `allot submit --array` names its tasks)
    expanded to `BASE_<i>` for each index of SPEC; order kept, repeats dropped."""
    out: dict[str, None] = {}
    for given in ids:
        m = _TASKS.match(given)
        if m is not None:
            tasks = parse_array(m["spec"], f"ID {given!r}")
            out.update((f"{m['base']}_{i}", None) for i in tasks)
        elif "[" in given or "]" in given:  # no generated id has brackets: a typo
            raise RequestError(
                f"ID {given!r}: name tasks of a job array as 'BASE_[SPEC]', e.g. 'BASE_[0-15]'"
            )
        else:
            out[given] = None
    return list(out)


def _tags(given: list[str] | None) -> list[str]:
    """`--tag a,b --tag c` -> [a, b, c], as --member reads its lists: every view shows
    a workload's tags joined by commas, so a tag with a comma inside read as two.
    A repeated tag is sent once."""
    tags: list[str] = []
    for text in given or ():
        names = [t.strip() for t in text.split(",") if t.strip()]
        if not names:
            raise RequestError(
                f"--tag {text!r} names no tag; e.g. --tag debug or --tag debug,short"
            )
        tags += names
    return list(dict.fromkeys(tags))  # a tag named twice is one tag (kept where first named)


def _wait_seconds(text: str) -> float:
    from domain.durations import parse_duration

    try:
        return parse_duration(text)
    except ValueError as why:
        raise typer.BadParameter(str(why)) from None


WaitOpt = Annotated[
    float | None,
    typer.Option(
        "--wait",
        metavar="TIME",
        parser=_wait_seconds,
        help="Wait up to TIME (seconds, or 30s, 2m) for the scheduler's verdict; exit 1 if "
        "it rejected the request (the reason is printed) or none came. Cancel, hold, "
        "release and requeue of several workloads wait for each one's. " + ADMISSION_WAIT_HELP,
    ),
]


# how long `budget set`/`budget remove` wait for the verdict without --wait: a manager
# who was told only "sent" never learned that the change was refused
BUDGET_WAIT_S = 10.0

BudgetWaitOpt = Annotated[
    float | None,
    typer.Option(
        "--wait",
        metavar="TIME",
        parser=_wait_seconds,
        help=f"Wait up to TIME (seconds, or 30s, 2m) for the scheduler's verdict (default "
        f"{BUDGET_WAIT_S:g} s where one can come: a --data folder a scheduler serves, or "
        "Kafka with a principal that may read the journal); exit 1 if it refused the "
        "change (the reason is printed) or none came.",
    ),
]
NoWaitOpt = Annotated[
    bool,
    typer.Option(
        "--no-wait",
        help="Send and return at once, without the scheduler's verdict (`allot budget log` "
        "after `allot audit load` shows refused changes).",
    ),
]


def _budget_wait(wait: float | None, no_wait: bool) -> float | None:
    """The default wait of a budget command: none with --no-wait, else BUDGET_WAIT_S
    unless --wait says otherwise (which `_send` reads itself)."""
    if no_wait and wait is not None:
        raise RequestError("--wait and --no-wait: give one or the other")
    return None if no_wait else BUDGET_WAIT_S


def _check_wait(wait: float | None) -> None:
    if wait is not None and not wait >= 0:
        raise RequestError(f"--wait {wait}: give a number of seconds >= 0")


def _open_inbox(target: Target) -> tuple[Any, bool]:
    """The inbox writer, and whether a note on stderr says that no scheduler serves the
    `--data` folder now (so a --wait that times out need not say it again). The note
    comes once the request is in the folder: said before, it told of a request waiting
    in its inbox that a full disk then kept out."""
    from streams.inbox import open_inbox

    note = None
    if target.data is not None and not Path(target.data).exists():
        # a typo in --data would otherwise leave the request where no scheduler looks
        note = (
            f"note: {target.data} did not exist and was created; no scheduler reads it "
            f"until `allot serve --data {target.data}` runs"
        )
    elif target.data is not None and _unserved(target.data):
        # sent to a folder nobody serves, the request waits silently: a stopped or
        # crashed serve (the OS drops its lock with it, even on kill -9) or a wrong folder
        note = (
            f"note: no scheduler serves {target.data} now; the request waits in its inbox "
            f"until `allot serve --data {target.data}` runs"
        )
    writer = open_inbox(target)
    if note is None:
        return writer, False
    return _NoteOnceSent(writer, note), True


class _NoteOnceSent:
    """An inbox writer that says `note` on stderr once its requests are sent."""

    def __init__(self, writer: Any, note: str) -> None:
        self.writer = writer
        self.note = note

    def __getattr__(self, name: str) -> Any:
        return getattr(self.writer, name)

    def send(self, requests: list[dict[str, Any]]) -> None:
        self.writer.send(requests)
        typer.echo(self.note, err=True)

    def send_and_wait(
        self,
        requests: list[dict[str, Any]],
        match: Any,
        timeout: float,
        on_sent: Callable[[], None] | None = None,
        **options: Any,
    ) -> Any:
        def sent() -> None:
            typer.echo(self.note, err=True)
            if on_sent is not None:
                on_sent()

        return self.writer.send_and_wait(requests, match, timeout, sent, **options)


@dataclass(frozen=True)
class _Wait:
    """How a request waits for its verdict: up to `timeout` seconds, and, with
    `live_cluster`, only if the Kafka writer finds that cluster's scheduler live
    (`streams.inbox.KafkaInbox.send_and_wait`)."""

    timeout: float
    live_cluster: str | None = None


def _wait_for_verdict(
    target: Target,
    noted: bool,
    wait: float | None,
    cluster: str,
    admission: bool = True,
    by_default: bool = False,
) -> _Wait | None:
    """--wait's wait; without it (and with `admission`) ADMISSION_WAIT_S where the
    verdict may come at once, so that a rejection is said at once: a `--data` folder
    that a scheduler serves now (`noted`: a note said none does), or Kafka, where the
    writer checks the cluster's scheduler is live (the principal that submits may not
    read the journal, or no scheduler runs). A command's default wait (`by_default`,
    budget set) asks the same of Kafka as a folder's serve lock does: no verdict comes
    from a cluster no worker serves. None: only send."""
    live = cluster if target.data is None else None
    if wait is not None:
        return _Wait(wait, live if by_default else None)
    if not admission or (target.data is not None and noted):
        return None
    return _Wait(ADMISSION_WAIT_S, live)


def _rejected(verdict: dict[str, Any] | None) -> bool:
    return verdict is not None and str(verdict.get("type", "")).endswith(".rejected")


def _unserved(folder: Path) -> bool:
    """No `allot serve --data FOLDER` holds the folder's serve lock now."""
    from streams.embedded import serving_pid

    return serving_pid(folder) is None


@dataclass
class _Sent:
    """A request that went out: where, what, and with --wait the verdict (None: none
    came in time) and, without one, what else kept it away (`trouble`: the broker went
    away during the wait)."""

    target: Target
    request: dict[str, Any]
    verdict: dict[str, Any] | None = None
    trouble: str | None = None
    # a note already said that no scheduler serves the --data folder
    noted_unserved: bool = False
    # with --wait, the verdict on each request by its id (those that came in time)
    verdicts: dict[str, dict[str, Any]] = field(default_factory=dict)
    # how long it waited for a verdict (None: it did not): --wait, or a default wait
    waited: float | None = None
    # the wait was the command's default, not --wait (a timeout says how to change it)
    by_default: bool = False


def _wait_stoppable(
    writer: Any,
    requests: list[dict[str, Any]],
    match: Any,
    wait: _Wait,
    on_sent: Any,
    check: str,
) -> Any:
    """`writer.send_and_wait`, where Ctrl-C after the requests are out stops the wait, not
    the requests (as sbatch --wait): one line says they stand and how to follow them,
    exit 130. Ctrl-C before they are out is an ordinary interruption."""
    out = False

    def said() -> None:
        nonlocal out
        out = True
        on_sent()

    try:
        found = writer.send_and_wait(
            requests, match, wait.timeout, said, live_cluster=wait.live_cluster
        )
    except KeyboardInterrupt:
        if not out:
            raise
        raise InterruptedWithNote(
            f"Stopped waiting (Ctrl-C); the request was sent and stands: {check}"
        ) from None
    unserved = getattr(writer, "unserved", None)
    if unserved is not None:  # the broker lists no worker serving it: said, not waited for
        from streams import topics

        typer.echo(
            f"note: no scheduler serves cluster {unserved!r} at {writer.label} now; the "
            f"request waits in {topics.INBOX} until one runs (`allot serve --kafka "
            f"{writer.bootstrap}`)",
            err=True,
        )
    return found


def _send_all(
    target: Target,
    requests: list[dict[str, Any]],
    wait: float | None,
    on_sent: Callable[[], None],
    check: str,
    default_wait: float | None = None,
    admission: bool = True,
) -> _Sent:
    """Send; `on_sent` runs once the requests are out (acknowledged by the broker, or
    written to the folder), before any wait, so the caller says so before a verdict
    that may not come. With `wait`, also the journal's verdict on the first request.
    Without it, `default_wait` is waited instead where a verdict can come: a folder
    that a scheduler serves, or a broker whose journal this sender may read. Without
    both, a verdict that may come at once is still waited for (`admission`,
    `_wait_for_verdict`) so that a rejection is said at once; `admission=False`
    (--no-wait) only sends."""
    from streams.inbox import verdict_ref

    writer, noted = _open_inbox(target)
    try:
        by_default = wait is None and default_wait is not None and _may_watch(writer, noted)
        if by_default:
            wait = default_wait
        how = _wait_for_verdict(target, noted, wait, requests[0]["cluster"], admission, by_default)
        if how is None:
            writer.send(requests)
            on_sent()
            return _Sent(target, requests[0], noted_unserved=noted)
        verdicts: dict[str, dict[str, Any]] = {}
        sent = {r["id"] for r in requests}

        def every(record: dict[str, Any]) -> bool:  # the wait ends with the last verdict
            # looked up by the id the record answers (verdict_on's rule), not by trying
            # each request on it: `cancel -u` of 10,000 jobs spent 20 s in that loop
            ref = verdict_ref(record)
            if isinstance(ref, str) and ref in sent and ref not in verdicts:
                verdicts[ref] = record
            return len(verdicts) == len(sent)

        _wait_stoppable(writer, requests, every, how, on_sent, check)
        if getattr(writer, "unserved", None) is not None:
            # no worker serves the cluster: a note said so and nothing was waited for
            wait, by_default = None, False
        first = verdicts.get(requests[0]["id"])
        return _Sent(target, requests[0], first, writer.trouble, noted, verdicts, wait, by_default)
    finally:
        writer.close()


def _may_watch(writer: Any, unserved: bool) -> bool:
    """Whether a default wait can see a verdict: not when no scheduler serves the
    folder (a note said so), nor when the Kafka principal may not read the journal
    (`allot-submit`: writing the inbox is all it may do)."""
    if unserved:
        return False
    if writer.can_watch():
        return True
    from streams import kafka_auth, topics

    user = os.environ.get(kafka_auth.USER_ENV, "").strip() or "this principal"
    typer.echo(
        f"note: not waiting for the scheduler's verdict: {user} may not read "
        f"{topics.JOURNAL}; `allot why ID` as a reader says what it decided",
        err=True,
    )
    return False


def _send(
    kafka: str | None,
    data: Any,
    kind: str,
    *,
    cluster: str,
    actor: str | None,
    said: str,
    wait: float | None = None,
    default_wait: float | None = None,
    admission: bool = True,
    **fields: Any,
) -> _Sent:
    """Send one `kind` request; `said` (`Registration of host h1 sent`) is printed with
    its id as soon as it is out. `default_wait`: see `_send_all`."""
    from streams.inbox import make_request

    _check_wait(wait)
    target = resolve_target(kafka, data)
    request = make_request(kind, cluster=cluster, actor=whoami(actor), **fields)
    check = f"`allot why {request['id']}` says what the scheduler decided"

    def said_sent() -> None:
        _sent(said, target, request)

    return _send_all(target, [request], wait, said_sent, check, default_wait, admission)


def _sent(verb: str, target: Target, request: dict[str, Any]) -> None:
    typer.echo(f"{verb} (request {request['id']} to {target.where})")


def _lost_on_the_way(what: str, wait: float, trouble: str, check: str) -> None:
    """The one line after a --wait whose broker went away: no verdict, the request was
    out, and how to see what became of it. Exit 1 (no verdict), not 2 (nothing sent)."""
    typer.echo(
        f"No verdict on {what} after {wait:g} s: {trouble}; the request was sent (above): "
        f"once the broker answers, {check}",
        err=True,
    )
    raise typer.Exit(1)


def _report_verdict(
    what: str, done: str | Callable[[], str], wait: float | None, sent: _Sent, check: str
) -> None:
    """After `--wait` (or a default wait, `sent.waited`): `done` if the scheduler
    accepted `what`, else why not (exit 1). `check` says how to see the outcome later
    (when no verdict came in time). Without either, only a rejection that came during
    the admission wait is said (exit 1)."""
    wait = sent.waited if wait is None else wait
    if wait is None:
        if _rejected(sent.verdict):
            assert sent.verdict is not None
            typer.echo(f"{what[0].upper()}{what[1:]} was rejected: {sent.verdict.get('error')}")
            raise typer.Exit(1)
        return
    verdict = sent.verdict
    if verdict is None:
        if sent.trouble is not None:
            _lost_on_the_way(what, wait, sent.trouble, check)
        hint = _no_scheduler_hint(sent.target, sent.noted_unserved)
        if sent.by_default:
            hint += " (--wait TIME waits longer, --no-wait not at all)"
        # the request is not lost: a scheduler started later decides it, so say so
        typer.echo(
            f"No verdict on {what} after {wait:g} s{hint}; the request stays queued and "
            f"is decided when the scheduler reads it: {check}",
            err=True,
        )
        raise typer.Exit(1)
    if str(verdict.get("type", "")).endswith(".rejected"):
        typer.echo(f"{what[0].upper()}{what[1:]} was rejected: {verdict.get('error')}")
        raise typer.Exit(1)
    typer.echo(done if isinstance(done, str) else done())


def _request_check(request: dict[str, Any], effect: str) -> str:
    """How to see what became of a request that is not about a workload."""
    return f"{effect} shows whether it took effect (`allot why {request['id']}`: if it was rejected, why)"


def _no_scheduler_hint(target: Target, noted: bool = False) -> str:
    """Why a wait for the scheduler may have timed out, when we can tell; nothing new
    when a note said before the wait that no scheduler serves the folder."""
    if target.data is not None:
        if _unserved(target.data) and not noted:
            return f"; no `allot serve --data {target.data}` is running"
        return ""
    if target.kafka is not None:  # no way to see the workers from here: say what to check
        return f"; is an `allot serve --kafka {target.kafka}` running for this cluster?"
    return ""


def _when(ts: Any) -> str:
    try:
        return datetime.fromtimestamp(float(ts), UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (TypeError, ValueError, OverflowError):
        return str(ts)


def describe_outcome(record: dict[str, Any]) -> str:
    """One line about a `workload.placed` / `*.rejected` journal record."""
    workload = record.get("workload", "?")
    if record.get("type") == "workload.placed":
        hosts = record.get("hosts") or {}
        where = ", ".join(
            f"{host}[{','.join(str(g) for g in gpus)}]" for host, gpus in hosts.items()
        )
        if record.get("charged"):
            until = record.get("protected_until")
            kind = "charged, protected until " + _when(until) if until else "charged"
        else:
            kind = "unallocated, preemptible"
        return f"Workload {workload} placed on {where} ({kind}, attempt {record.get('attempt', 1)})"
    return f"Workload {workload} was rejected: {record.get('error', 'no reason given')}"


# ---------------------------------------------------------------- commands


def submit(
    allocation: Annotated[
        str,
        typer.Option("--allocation", "-A", help="Leaf allocation path, e.g. lab/olmo/pretrain."),
    ],
    gpus: Annotated[int, typer.Option("--gpus", "-G", help="GPUs the workload needs.")],
    min_runtime: Annotated[
        str,
        typer.Option(
            "--min-runtime",
            help="Shortest useful occupancy (15m, 2h, 1:30:00; a bare number is seconds; "
            "0 = unallocated, preemptible any time).",
        ),
    ],
    resumable: Annotated[
        bool, typer.Option("--resumable", help="Requeue (don't end) it when preempted.")
    ] = False,
    priority: Annotated[
        int,
        typer.Option(
            "--priority",
            help="Order inside its allocation (higher first). Under fairshare it never "
            "preempts running work, not even its own allocation's (legacy-priority: levels "
            "0-3 preempt lower levels).",
        ),
    ] = 0,
    tag: Annotated[
        list[str] | None,
        typer.Option(
            "--tag", help="A tag, e.g. debug (repeatable, or comma-separated: debug,short)."
        ),
    ] = None,
    name: Annotated[
        str | None,
        typer.Option("--name", "--job-name", "-J", help="A human-readable name (sbatch's -J too)."),
    ] = None,
    runtime: Annotated[
        str | None,
        typer.Option(
            "--runtime",
            help="Work it needs: simulated executors run it this long, and forecasts "
            "(queue --start, --test-only) use it before --expected-runtime.",
        ),
    ] = None,
    expected_runtime: Annotated[
        str | None,
        typer.Option("--expected-runtime", help="Your estimate; some policies order by it."),
    ] = None,
    one_host: Annotated[
        bool,
        typer.Option(
            "--one-host",
            help="All its GPUs on one host (NVLink): it waits for a host with that many "
            "free rather than run as a gang over several; more GPUs than the biggest "
            "host has is refused.",
        ),
    ] = False,
    nodes: Annotated[
        int | None,
        typer.Option(
            "--nodes",
            "-N",
            metavar="1",
            help="sbatch's -N 1: the same as --one-host (other counts are refused: allot "
            "picks the hosts).",
        ),
    ] = None,
    parsable: Annotated[
        bool,
        typer.Option(
            "--parsable",
            help="Print only the workload id (one per task of an array); with --test-only, "
            "the expected start instead (ISO 8601 UTC, N/A, or rejected).",
        ),
    ] = False,
    wait: Annotated[
        float | None,
        typer.Option(
            "--wait",
            metavar="TIME",
            parser=_wait_seconds,
            help="Wait up to TIME (seconds, or 30s, 2m) for the scheduler's verdict (placed "
            "or rejected); exit 1 if rejected or still pending. With --array, the first "
            "task's: the tasks differ only in their index, so they are admitted alike.",
        ),
    ] = None,
    array: Annotated[
        str | None,
        typer.Option(
            "--array",
            "-a",
            metavar="SPEC",
            help="A job array, as sbatch: one workload per index of SPEC (0-15, 1,3,5-7, "
            "0-15:4), ids BASE_<index>; `allot cancel 'BASE_[SPEC]'` cancels them.",
        ),
    ] = None,
    test_only: Annotated[
        bool,
        typer.Option(
            "--test-only",
            help="Send nothing: say whether the scheduler would accept it and when and "
            "where it would start (as sbatch --test-only), from the forecast of "
            "`allot queue --start` with this submission added now.",
        ),
    ] = False,
    horizon: HorizonOpt = HORIZON_DEFAULT,
    kafka: KafkaOpt = None,
    data: DataOpt = None,
    cluster: ClusterOpt = "default",
    as_: AsOpt = None,
) -> None:
    """Submit a workload (or a job array). Prints `Submitted workload <id>`; the
    scheduler decides later. Where the verdict can come at once (a --data folder served
    now; Kafka, for a login that may read the journal, with the cluster's scheduler
    running) it waits up to 10 s for it: a refusal (not a member, an unknown allocation,
    more GPUs than the cluster has) is said then, exit 1.

    With --test-only nothing is sent: the journal is read (--data or
    --kafka) and the scheduler's own core plays the queue forward with this
    submission added at the journal's latest moment. It prints the verdict
    (rejected, and why) or when and on which hosts it would start and whom
    it would preempt, under the assumptions of `allot queue --start` (no
    other new work, running work ending after its runtime). Exit 1 if it
    would be rejected."""
    from streams.inbox import make_request, new_ulid, outcome_of, verdict_on

    with one_line_errors():
        if gpus < 1:  # the scheduler would reject it; say so now, in one line
            raise RequestError(f"--gpus {gpus}: a workload needs at least 1 GPU")
        if gpus > MAX_COUNT:
            raise RequestError(f"--gpus {gpus}: more GPUs than any cluster has")
        from domain.events import MAX_PRIORITY

        if abs(priority) > MAX_PRIORITY:  # the scheduler's bound, said before sending
            raise RequestError(
                f"--priority {priority}: use a number from {-MAX_PRIORITY} to {MAX_PRIORITY}"
            )
        from domain.text import HIDDEN_WHAT, printable

        if name is not None and not printable(name):
            raise RequestError(f"--name {name!r}: no {HIDDEN_WHAT}")
        from domain.admission import MAX_NAME, MAX_TAGS

        # the scheduler's own limits, said before anything is sent
        if name is not None and len(name) > MAX_NAME:
            raise RequestError(f"--name: {len(name):,} characters; at most {MAX_NAME}")
        tags = _tags(tag)
        if len(tags) > MAX_TAGS:
            raise RequestError(f"--tag: {len(tags):,} tags; at most {MAX_TAGS}")
        long_tag = next((t for t in tags if len(t) > MAX_NAME), None)
        if long_tag is not None:
            raise RequestError(f"--tag: a tag of {len(long_tag):,} characters; at most {MAX_NAME}")
        hidden = next((t for t in tags if not printable(t)), None)
        if hidden is not None:
            raise RequestError(f"--tag {hidden!r}: no {HIDDEN_WHAT}")
        one_host = _one_host(one_host, nodes)
        min_s = _duration("--min-runtime", min_runtime)
        run_s = _duration("--runtime", runtime)
        expected_s = _duration("--expected-runtime", expected_runtime)
        _check_wait(wait)
        tasks = None if array is None else parse_array(array)
        target = resolve_target(kafka, data)
        if test_only and wait is not None:
            raise RequestError("--test-only sends nothing, so there is no verdict to --wait for")
        if not test_only and horizon != HORIZON_DEFAULT:
            raise RequestError("--horizon is for --test-only (how far ahead it looks)")
        horizon_s = horizon_seconds(horizon) if test_only else 0.0
        workload = new_ulid()
        ids = [workload] if tasks is None else [f"{workload}_{i}" for i in tasks]
        actor = whoami(as_)
        requests = [
            make_request(
                "workload.submitted",
                cluster=cluster,
                actor=actor,
                workload=wid,
                allocation=allocation,
                gpus=gpus,
                min_runtime=min_s,
                resumable=resumable,
                priority=priority,
                tags=tags,
                name=name,
                runtime=run_s,
                expected_runtime=expected_s,
                # left out unless asked: a request without it is one as before
                one_host=True if one_host else None,
            )
            for wid in ids
        ]
        if test_only:
            _test_only(target, cluster, requests, horizon_s, parsable)
            return

        def submitted() -> None:  # as soon as the broker has it: before any wait
            if tasks is not None:
                if parsable:
                    typer.echo("\n".join(ids))
                else:
                    span = ids[0] if len(ids) == 1 else f"{ids[0]} … {ids[-1]}"
                    typer.echo(
                        f"Submitted array {workload}: {plural(len(ids), 'workload')} ({span})"
                    )
            else:
                typer.echo(workload if parsable else f"Submitted workload {workload}")

        writer, noted = _open_inbox(target)
        # an array's tasks differ only in their index: the first one's verdict (admitted
        # or refused, and why) is every task's; where they start is `allot queue -j`'s
        verdict = outcome_of(ids[0], requests[0]["id"])
        check = (
            f"`allot why {ids[0]}` says what the scheduler decided, "
            f"`allot cancel {workload}` withdraws it"
        )
        how = _wait_for_verdict(target, noted, wait, cluster)
        # without --wait the first verdict, admitted or refused, ends the wait: a refusal
        # is said now
        match = verdict if wait is not None else verdict_on(requests[0]["id"])
        try:
            if how is None:
                writer.send(requests)
                submitted()
                outcome = None
            else:
                outcome = _wait_stoppable(writer, requests, match, how, submitted, check)
        finally:
            writer.close()
    if min_s > 0 and _accepted(outcome, verdict):
        _say_if_unshared(target, cluster, allocation)
    if wait is None and not _rejected(outcome):
        return
    first = ids[0]
    if outcome is None:
        if writer.trouble is not None and verdict.accepted is None:
            _lost_on_the_way(
                f"workload {first}",
                wait,
                writer.trouble,
                f"`allot why {first}` says what the scheduler decided",
            )
        if verdict.accepted is not None:  # queued: the scheduler has it
            also = (
                "" if tasks is None else f" (the array's first task; `allot queue -j {workload}`)"
            )
            typer.echo(
                f"Workload {first} accepted, still waiting to start after {wait:g} s{also} "
                f"(`allot why {first}` says why)",
                err=True,
            )
            stuck = _cannot_start_on_the_cluster(kafka, data, cluster, first)
            if stuck:
                typer.echo(f"warning: {stuck}", err=True)
        else:
            hint = _no_scheduler_hint(target, noted)
            typer.echo(f"Workload {first} still pending after {wait:g} s{hint}", err=True)
        raise typer.Exit(1)
    typer.echo(describe_outcome(outcome), err=parsable or tasks is not None)
    if tasks is not None and len(ids) > 1:
        if _rejected(outcome):
            note = "the array's first task: every task is refused the same way"
        else:
            note = f"the array's first task; `allot queue -j {workload}` follows the others"
        typer.echo(f"({note})", err=True)
    if outcome.get("type") != "workload.placed":
        raise typer.Exit(1)


def _one_host(one_host: bool, nodes: int | None) -> bool:
    """--one-host, or sbatch's `-N 1` / `--nodes 1` for it. Other node counts are refused:
    allot picks the hosts (work bigger than a host takes whole hosts)."""
    if nodes is None or nodes == 1:
        return one_host or nodes == 1
    raise RequestError(
        f"--nodes {nodes}: allot picks the hosts (-G N more than a host holds gets whole "
        "hosts); only -N 1 is taken, as --one-host (all GPUs on one host)"
    )


def _accepted(outcome: dict[str, Any] | None, verdict: Any) -> bool:
    """The scheduler took the submission: its verdict came (placed, or the accepted
    input itself without --wait) and is no rejection, or --wait saw it queued."""
    if outcome is not None:
        return not _rejected(outcome)
    return verdict.accepted is not None


def _say_if_unshared(target: Target, cluster: str, allocation: str) -> None:
    """Accepted work asking for protection under a zero share runs unallocated
    (`State.allocated`): say so where the submitter looks, not only in `allot why`."""
    unshared = _unshared_node(target, cluster, allocation)
    if unshared is None:
        return
    where = "" if unshared == allocation else f" at {unshared}"
    typer.echo(
        f"note: {allocation} has no share (weight 0{where}): this work runs unallocated "
        "(not charged, not protected by --min-runtime, preempted by any allocated request)",
        err=True,
    )


def _unshared_node(target: Target, cluster: str, allocation: str) -> str | None:
    """The topmost node of `allocation`'s path whose share is zero at the journal's end;
    None when the share is not zero or the journal cannot be read."""
    tree = _budget_tree(target, cluster)
    return None if tree is None else tree.zero_share_at(allocation)


def _cannot_start_on_the_cluster(
    kafka: str | None, data: Path | None, cluster: str, wid: str
) -> str | None:
    """The queue's reason for pending `wid` when no wait on the cluster as it stands
    can start it (more GPUs than registered, or than the healthy hosts have, as after a
    host was removed or reported unhealthy): `submit --wait` warns of it rather than
    leave the submitter waiting for what will not come. None otherwise, or when the
    journal cannot be read (the verdict was printed: a hint is not worth an error)."""
    from allot.commands.views import load_view
    from projections.journal import JournalError
    from projections.views import ViewError, beyond_the_cluster
    from streams.sources import SourceError

    try:
        view = load_view(kafka, data, None, cluster, live_only=True)
        return beyond_the_cluster(view, wid)
    except (ViewError, SourceError, JournalError):
        return None


def _test_only(
    target: Target,
    cluster: str,
    requests: list[dict[str, Any]],
    horizon_s: float,
    parsable: bool,
) -> None:
    """`allot submit --test-only`: the forecast with `requests` added; nothing is sent."""
    from pydantic import ValidationError

    from allot.commands.views import fold_for_forecast, forecast_view, journal_reader
    from domain.events import parse_event
    from domain.upcasting import upcast
    from projections.journal import JournalError
    from projections.views import ViewError
    from streams.sources import SourceError

    try:
        arrivals = [parse_event(upcast(dict(r))) for r in requests]
    except ValidationError as why:
        first = why.errors()[0]
        where = ".".join(str(x) for x in first.get("loc", ()))
        raise RequestError(f"the scheduler would reject it: {where}: {first['msg']}") from None
    read = journal_reader(target.kafka, target.data, None, cluster)
    try:
        view = fold_for_forecast(read, target.kafka, target.data, None, cluster)
        fc = forecast_view(view, read, horizon_s, arrivals, wanted=[a.workload for a in arrivals])
    except (ViewError, SourceError, JournalError) as why:
        raise RequestError(f"cannot forecast from {target.label}: {why}") from None
    with quiet_on_closed_pipe():
        _print_test_only(fc, [a.workload for a in arrivals], view.now, horizon_s, parsable)
    if any(a.workload in fc.rejected for a in arrivals):
        raise typer.Exit(1)


def _print_test_only(fc: Any, ids: list[str], now: float, horizon_s: float, parsable: bool) -> None:
    from domain.durations import format_duration
    from projections.forecast import assumptions, victims_text
    from projections.views import iso, nodelist

    span = format_duration(horizon_s)
    if parsable:
        for wid in ids:
            start = fc.starts.get(wid)
            # with its zone: the help promises UTC, and a script's parser should not guess
            answer = "N/A" if start is None else str(iso(start.time)).replace(" ", "T") + "Z"
            typer.echo("rejected" if wid in fc.rejected else answer)
    elif len(ids) == 1:
        wid = ids[0]
        start = fc.starts.get(wid)
        if wid in fc.rejected:
            typer.echo(f"Workload would be rejected: {fc.rejected[wid]}")
        elif start is None:
            typer.echo(
                f"Workload would not start within {span} (the forecast's --horizon), as of "
                f"{iso(now)} UTC"
            )
        else:
            wait = start.time - now
            text = (
                f"Workload would start at {iso(start.time)} UTC "
                f"({'at once' if wait < 1 else 'in ' + format_duration(wait)}) on "
                f"{nodelist(start.hosts)}"
            )
            if start.preempts:
                text += f", preempting {victims_text(fc, start)}"
            typer.echo(text)
    else:
        starts = sorted(fc.starts[w].time for w in ids if w in fc.starts)
        refused = [w for w in ids if w in fc.rejected]
        if refused:
            typer.echo(
                f"{len(refused)} of {plural(len(ids), 'workload')} would be rejected: "
                f"{fc.rejected[refused[0]]}"
            )
        if starts:
            when = (
                f"at {iso(starts[0])} UTC"
                if starts[0] == starts[-1]
                else f"between {iso(starts[0])} and {iso(starts[-1])} UTC"
            )
            typer.echo(f"{len(starts)} of {plural(len(ids), 'workload')} would start {when}")
        late = len(ids) - len(starts) - len(refused)
        if late:
            typer.echo(f"{late} of {plural(len(ids), 'workload')} would not start within {span}")
    if not parsable:
        typer.echo(
            " ".join(
                [
                    "Nothing was submitted (--test-only). A forecast: no other new work, "
                    "budgets and hosts as they are, running work ending after its runtime.",
                    *assumptions(fc),
                ]
            ),
            err=True,
        )


IdsArg = Annotated[
    list[str] | None,
    typer.Argument(
        metavar="ID",
        help="Workload ids (as `allot submit` printed; a unique prefix of a live one is "
        "enough, as for `allot why`); 'BASE_[SPEC]' names tasks of a job array, e.g. "
        "'BASE_[0-15]' or 'BASE_[3,7]' (quote it from the shell); BASE alone, every task "
        "of the array the command can act on (as scancel BASE). May be left out when a "
        "filter (-u, --me, -t, -a, -n, -w) selects the workloads.",
        show_default=False,
    ),
]

# a whole id as `allot submit` makes them: a ULID, or task N of a job array (ULID_N)
_WHOLE_ID = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}(?:_\d+)?$")
# a bare ULID: a workload's id, or a job array's base (its tasks are ULID_N)
_BARE_ID = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}$")
_CANCEL, _REQUEUE = "workload.cancelled", "workload.requeue_requested"
# which of a job array's live tasks a request about its base id is sent for (Slurm:
# scancel, scontrol hold/release/requeue of an array act on each task they can), and
# how to say so: (plural, singular)
_ARRAY_TASKS: dict[str, tuple[Callable[[Any], bool], str, str]] = {
    _CANCEL: (lambda w: True, "have not ended", "has not ended"),
    "workload.held": (
        lambda w: w.state != "running" and not w.on_hold,
        "wait and are not held",
        "waits and is not held",
    ),
    "workload.released": (lambda w: w.on_hold, "are held", "is held"),
    _REQUEUE: (lambda w: w.state == "running", "are running", "is running"),
}


def _live_view(target: Target, cluster: str) -> Any:
    """The journal's live workloads (a `live_only` JournalView), or None when it cannot
    be read (a new folder, no journal topic yet)."""
    from allot.commands.views import journal_reader
    from projections.journal import JournalError
    from projections.views import ViewError, fold
    from streams.sources import SourceError

    try:
        return fold(journal_reader(target.kafka, target.data, None, cluster)(), live_only=True)
    except (SourceError, ViewError, JournalError, OSError):
        return None


def _cancel_order(target: Target, cluster: str, ids: list[str], view: Any = None) -> list[str]:
    """The order to cancel `ids` in: work that waits before work that runs (a running
    workload's freed GPUs would otherwise start waiting work of the same list just
    before its own cancel arrives), each part last id first (a job array starts its
    tasks in index order). Without a readable journal, last id first. `view`: the
    live view already read, if any."""
    backwards = ids[::-1]
    if len(ids) < 2:
        return backwards
    view = view if view is not None else _live_view(target, cluster)
    if view is None:
        return backwards
    from domain.state import RUNNING
    from projections.views import ViewError

    try:
        live = view.require().workloads
    except ViewError:  # nothing scheduled yet
        return backwards
    running = {wid for wid in ids if (w := live.get(wid)) is not None and w.state == RUNNING}
    return [w for w in backwards if w not in running] + [w for w in backwards if w in running]


class _Resolved:
    """What `_resolve_ids` found: the ids to send, the live view if it was read, the
    attempt each workload runs (requeue) and a note per job array base expanded."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.view: Any = None
        self.attempts: dict[str, int] = {}
        self.notes: list[str] = []
        self.empty: list[str] = []  # why an array base named no task to send
        # ids the journal never accepted, their submission having been rejected: why
        self.never_accepted: dict[str, str] = {}


def _resolve_ids(kind: str, target: Target, cluster: str, ids: list[str]) -> _Resolved:
    """`ids` as the requests name them:

    - a unique prefix of a live workload's id: that id, as the journal names it
      (`projections.views.resolve_live`); several matches are a RequestError listing
      them;
    - a job array's base id (the journal names tasks BASE_<n>): its live tasks the
      request applies to, as Slurm's `scancel BASE` cancels every task of the array
      that has not ended (hold: those waiting and not held; release: the held ones;
      requeue: the running ones);
    - anything else as given; so is everything the journal cannot tell (a new folder,
      no journal topic yet): the scheduler answers.

    An id whose submission the scheduler rejected (and never accepted) is not sent:
    `never_accepted` says why it was rejected, which the scheduler's own answer
    ("unknown workload") cannot.

    Whole ids cost a byte search of the journal (`streams.sources.records_naming`), not
    a fold: only a prefix or an array's base reads the live state. A requeue also
    takes the attempt each workload runs (its latest placement), so a request sent
    twice before the scheduler answered stops it once."""
    from streams.sources import SourceError, records_naming

    out = _Resolved()
    bare = {wid for wid in ids if _BARE_ID.match(wid)}
    searched = [wid for wid in ids if _WHOLE_ID.match(wid)]
    records: list[dict[str, Any]] = []
    if searched:
        try:
            records = records_naming(
                searched, kafka=target.kafka, data=target.data, cluster=cluster
            )
        except (SourceError, OSError, ValueError):
            records = []  # sent as given: the scheduler answers
    submitted: dict[str, set[str]] = {}  # array base -> its tasks the journal accepted
    for r in records:
        base = _task_of(str(r.get("workload")))
        if base in bare and r.get("type") == "workload.submitted":
            submitted.setdefault(base, set()).add(r["workload"])
    out.never_accepted = _rejected_submissions(searched, records)
    ids = [wid for wid in ids if wid not in out.never_accepted]
    prefixes = {wid for wid in ids if not _WHOLE_ID.match(wid)}
    state = None
    if submitted or prefixes:
        out.view = _live_view(target, cluster)
        state = None if out.view is None else out.view.require()
    # ids other tools made (not ULIDs) are read as prefixes: one that is exactly an
    # array's base names its tasks too
    bases = set(submitted)
    if state is not None and prefixes:
        bases.update(b for k in state.workloads if (b := _task_of(k)) in prefixes)
    chosen: list[str] = []
    for wid in ids:
        if wid in bases and state is not None:
            chosen += _array_tasks(kind, wid, state, len(submitted.get(wid, ())), out)
        elif wid in prefixes and out.view is not None:
            from projections.views import ViewError, resolve_live

            try:
                chosen.append(resolve_live(out.view, wid))
            except ViewError as why:  # an ambiguous prefix; its candidates are journal data
                raise RequestError(visible(str(why))) from None
        else:
            chosen.append(wid)
    out.ids = list(dict.fromkeys(chosen))
    if kind == _REQUEUE:
        if state is not None:
            live = state.workloads
            out.attempts = {w: live[w].attempt for w in out.ids if w in live and live[w].attempt}
        else:
            for r in records:
                wid, attempt = r.get("workload"), r.get("attempt")
                if r.get("type") == "workload.placed" and isinstance(attempt, int):
                    out.attempts[wid] = max(out.attempts.get(wid, 0), attempt)
    return out


def _rejected_submissions(ids: list[str], records: list[dict[str, Any]]) -> dict[str, str]:
    """Of `ids`, those the journal `records` (about them) show rejected at submission and
    never accepted, each with the rejection's error; an array's base counts when every
    task of it the journal names was rejected so (its first task's error)."""
    accepted: set[str] = set()
    errors: dict[str, str] = {}
    for r in records:
        wid = str(r.get("workload"))
        if r.get("type") == "workload.submitted":
            accepted.update((wid, _task_of(wid) or wid))
        elif r.get("type") == "workload.rejected" and r.get("input_type") == "workload.submitted":
            for name in (wid, _task_of(wid)):
                if name is not None:
                    errors.setdefault(name, visible(str(r.get("error", "no reason given"))))
    return {wid: errors[wid] for wid in ids if wid in errors and wid not in accepted}


def _task_of(wid: str) -> str | None:
    """The base of job array task `wid` (BASE_<n>), else None."""
    head, sep, index = wid.rpartition("_")
    return head if sep and head and index.isdigit() else None


def _array_tasks(kind: str, base: str, state: Any, submitted: int, out: _Resolved) -> list[str]:
    """The live tasks of job array `base` a `kind` request is sent for, in index order;
    notes how many, of how many, in `out`."""
    from domain.state import id_order

    applies, are, is_ = _ARRAY_TASKS[kind]
    live = sorted((wid for wid in state.workloads if _task_of(wid) == base), key=id_order)
    tasks = [wid for wid in live if applies(state.workloads[wid])]
    total = max(submitted, len(live))
    of = plural(total, "task") if kind == _CANCEL else plural(len(live), "live task")
    out.notes.append(
        f"Job array {base}: {len(tasks)} of its {of} {is_ if len(tasks) == 1 else are}"
    )
    if not live:
        out.empty.append(f"job array {base}: all {total} of its tasks have ended")
    elif not tasks:
        out.empty.append(f"job array {base}: none of its live tasks ({len(live)}) {is_}")
    return tasks


@dataclass
class _Filters:
    """scancel's selection flags, read as `allot queue` reads them (its -u, --me, -a,
    -t, -n, -w): with any given, the workloads are the queue's rows they select."""

    user: str | None = None
    me: bool = False
    allocation: str | None = None
    states: str | None = None
    name: str | None = None
    nodelist: str | None = None
    as_: str | None = None  # whom --me means: the --as the requests are sent as

    def given(self) -> bool:
        return self.me or any(
            v is not None
            for v in (self.user, self.allocation, self.states, self.name, self.nodelist)
        )

    def text(self) -> str:
        """The filters as flags, to say what selected the workloads."""
        import shlex

        flags = [
            ("-u", self.user),
            ("--me", "" if self.me else None),
            ("-a", self.allocation),
            ("-t", self.states),
            ("-n", self.name),
            ("-w", self.nodelist),
        ]
        return " ".join(
            f"{flag} {shlex.quote(value)}" if value else flag
            for flag, value in flags
            if value is not None
        )


def _select(
    kind: str, target: Target, cluster: str, ids: list[str] | None, filters: _Filters
) -> _Resolved:
    """The live workloads `filters` select (of `ids`, when given, as `allot queue -j`
    reads them: scancel's filters narrow the ids it is given), and of those the ones a
    `kind` request applies to (hold: waiting and not held; release: held; requeue:
    running; cancel: all). Notes how many, in `out.notes`."""
    from allot.commands.views import _with_me, journal_reader, select_rows
    from projections.views import fold, resolve_jobs

    out = _Resolved()
    read = journal_reader(target.kafka, target.data, None, cluster)
    out.view = view = fold(read(), live_only=ids is None)
    what = filters.text()
    if view.state is None:  # an empty journal: nothing is live
        out.notes.append(f"No live workload matches {what}")
        return out
    rows = select_rows(
        view,
        ids=resolve_jobs(view, ids),
        user=_with_me(filters.user, filters.me, filters.as_),
        allocation=filters.allocation,
        states=filters.states,
        nodelist=filters.nodelist,
        name=filters.name,
    )
    live = view.state.workloads
    applies, are, is_ = _ARRAY_TASKS[kind]
    out.ids = [r["id"] for r in rows if applies(live[r["id"]])]
    selected = plural(len(rows), "live workload")
    if len(out.ids) == len(rows):
        out.notes.append(
            f"Selected {selected} ({what})" if rows else f"No live workload matches {what}"
        )
    else:
        out.notes.append(
            f"Selected {selected} ({what}): {len(out.ids)} {is_ if len(out.ids) == 1 else are}"
        )
    if kind == _REQUEUE:
        out.attempts = {w: live[w].attempt for w in out.ids if live[w].attempt}
    return out


def _about_workloads(
    kind: str,
    verb: str,
    done: str,
    workloads: list[str] | None,
    wait: float | None,
    target_options: tuple[str | None, Path | None],
    cluster: str,
    as_: str | None,
    filters: _Filters | None = None,
) -> None:
    """Send one `kind` request per workload (cancel, hold, release, requeue) and report.
    With `filters`, the workloads are those the queue's selection names (see `_select`);
    none selected sends nothing and exits 0, as scancel -u USER with no jobs does."""
    from streams.inbox import make_request

    filters = filters or _Filters()
    with one_line_errors():
        _check_wait(wait)
        if not workloads and not filters.given():
            raise RequestError(
                "give workload ids, or filters that select them (-u USER, --me, -t STATE, "
                "-a PATH, -n NAME, -w HOSTS; `allot queue` takes the same)"
            )
        if any(not wid.strip() for wid in workloads or ()):  # '' starts every id
            raise RequestError("ID '': empty; give a workload id (`allot queue` lists them)")
        ids = expand_ids(workloads) if workloads else None
        target = resolve_target(*target_options)
        if filters.given():
            found = _select_or_fail(kind, target, cluster, ids, filters)
            if not found.ids:
                typer.echo(f"{found.notes[-1]}; nothing was sent")
                return
        else:
            assert ids is not None
            found = _resolve_ids(kind, target, cluster, ids)
        for wid, error in found.never_accepted.items():
            typer.echo(
                f"The {verb.lower()} of workload {wid} was not sent: its submission was "
                f"rejected ({error}), so there is no such workload to {verb.lower()}"
            )
        ids = found.ids
        if not ids and found.never_accepted:
            raise typer.Exit(1)
        if not ids:
            raise RequestError(f"{'; '.join(found.empty)}; nothing was sent")
        actor = whoami(as_)
        order = _cancel_order(target, cluster, ids, found.view) if kind == _CANCEL else ids
        requests = [
            make_request(
                kind, cluster=cluster, actor=actor, workload=wid, attempt=found.attempts.get(wid)
            )
            for wid in order
        ]

        def said() -> None:
            if len(requests) == 1:
                _sent(f"{verb} of workload {ids[0]} sent", target, requests[0])
            else:
                typer.echo(
                    f"{verb} of {len(requests)} workloads sent ({ids[0]} … {ids[-1]}, "
                    f"to {target.where})"
                )
            for note in found.notes:
                typer.echo(note)

        follow = f"`allot why {ids[0]}`" if len(ids) == 1 else "`allot why ID` (each id)"
        check = f"{follow} says what the scheduler decided"
        sent = _send_all(target, requests, wait, said, check)
    _report_sent(verb, done, requests, wait, sent, check)
    if found.never_accepted:  # as scancel of an invalid job id among valid ones
        raise typer.Exit(1)


def _report_sent(
    verb: str,
    done: str,
    requests: list[dict[str, Any]],
    wait: float | None,
    sent: _Sent,
    check: str,
) -> None:
    """What became of the requests `_about_workloads` sent, as far as it waited."""
    if len(requests) > 1 and wait is not None:
        _report_verdicts(verb, done, requests, wait, sent, check)
        return
    if len(requests) > 1:  # no --wait: only the rejections the admission wait saw
        if _say_rejections(verb, requests, sent):
            raise typer.Exit(1)
        return
    wid = requests[0]["workload"]
    _report_verdict(
        f"the {verb.lower()} of workload {wid}", f"Workload {wid} {done}", wait, sent, check
    )


def _select_or_fail(
    kind: str, target: Target, cluster: str, ids: list[str] | None, filters: _Filters
) -> _Resolved:
    """`_select`, with a journal that cannot be read (or a filter naming nothing there)
    as a RequestError: selecting by filter needs the journal, unlike naming ids."""
    from allot.commands.views import _expected

    try:
        return _select(kind, target, cluster, ids, filters)
    except OSError as why:
        raise RequestError(f"cannot read the journal to select workloads: {why}") from None
    except Exception as why:
        message = _expected(why)
        if message is None:
            raise
        raise RequestError(visible(" ".join(message.split()))) from None


def _say_rejections(verb: str, requests: list[dict[str, Any]], sent: _Sent) -> int:
    """A line for each request the scheduler rejected; how many there were."""
    rejected = 0
    for r in requests:
        verdict = sent.verdicts.get(r["id"])
        if _rejected(verdict):
            assert verdict is not None
            rejected += 1
            typer.echo(
                f"The {verb.lower()} of workload {r['workload']} was rejected: "
                f"{verdict.get('error')}"
            )
    return rejected


def _report_verdicts(
    verb: str, done: str, requests: list[dict[str, Any]], wait: float, sent: _Sent, check: str
) -> None:
    """After `--wait` on several workloads (as scancel of several jobs does): a line for
    each rejection, then how many were `done`; exit 1 unless every one was, saying how
    many had no verdict in time."""
    rejected = _say_rejections(verb, requests, sent)
    accepted = len(sent.verdicts) - rejected
    typer.echo(f"{accepted} of {plural(len(requests), 'workload')} {done}")
    missing = len(requests) - len(sent.verdicts)
    if missing:
        why = (
            f": {sent.trouble}"
            if sent.trouble
            else _no_scheduler_hint(sent.target, sent.noted_unserved)
        )
        typer.echo(
            f"No verdict on {missing} of the {len(requests)} requests after {wait:g} s{why}; "
            f"they stay queued and are decided when the scheduler reads them: {check}",
            err=True,
        )
    if rejected or missing:
        raise typer.Exit(1)


# --me is whoever the requests are sent as: `cancel --me --as alice` selects alice's work,
# not the shell's $USER's
_MeOpt = Annotated[
    bool,
    typer.Option(
        "--me",
        help="Only your own workloads (--as, else $USER), as squeue --me; with -u, theirs too.",
    ),
]


def _workload_command(kind: str, verb: str, done: str, doc: str) -> Callable[..., None]:
    """A command that sends one `kind` request per workload id (cancel, hold, release,
    requeue)."""

    def command(
        workloads: IdsArg = None,
        user: UserOpt = None,
        me: _MeOpt = False,
        allocation: AllocationsOpt = None,
        states: StatesOpt = None,
        name: NameOpt = None,
        nodelist: NodelistOpt = None,
        wait: WaitOpt = None,
        kafka: KafkaOpt = None,
        data: DataOpt = None,
        cluster: ClusterOpt = "default",
        as_: AsOpt = None,
    ) -> None:
        filters = _Filters(user, me, allocation, states, name, nodelist, as_)
        _about_workloads(kind, verb, done, workloads, wait, (kafka, data), cluster, as_, filters)

    command.__doc__ = doc
    if kind != _CANCEL:
        command.__doc__ += (
            "\n\n    Filters (-u, --me, -a, -t, -n, -w) select workloads as `allot queue` "
            "does with the same flags\n    (with ids too: those of them the filters match); "
            "it acts on those it can\n    and says how many; none is not an error (exit 0, "
            "nothing sent)."
        )
    command.__name__ = verb.lower()
    return command


cancel = _workload_command(
    "workload.cancelled",
    "Cancel",
    "cancelled",
    """Cancel workloads (their submitter, their allocation's managers or an admin may).

    A job array's base id cancels every task of the array that has not
    ended, as scancel does.

    Filters select the workloads as `allot queue` does with the same flags
    (`allot cancel --me -t pending` cancels what `allot queue --me -t pending`
    lists); with ids too, only those of them the filters match (as scancel).
    It says how many were selected; none is not an error (exit 0, nothing
    sent). Waiting work is cancelled before running work.""",
)
hold = _workload_command(
    "workload.held",
    "Hold",
    "held",
    """Keep pending workloads from starting until released, like scontrol hold.

    `allot release` puts held work back in the queue with its original
    submit time. Only pending work can be held; its submitter, its
    allocation's managers or an admin may. `allot queue` shows it with
    reason Held.""",
)
release = _workload_command(
    "workload.released",
    "Release",
    "released",
    """Let held workloads be scheduled again, like scontrol release.

    They keep their original submit time. Their submitter, their
    allocation's managers or an admin may release them.""",
)

requeue = _workload_command(
    "workload.requeue_requested",
    "Requeue",
    "requeued",
    """Stop running workloads and queue them again, like scontrol requeue.

    Each waits again with its original submit time and starts over as its next
    attempt (the launcher sees `workload.preempted`, reason requested, with
    requeued true: resumable work resumes from its checkpoint, other work runs
    from the start). Its submitter, its allocation's managers or an admin may.
    The request names the attempt the journal shows running: sent again
    before the scheduler answered, it is rejected as stale rather than
    stopping the attempt the first one started.
    To move work off a host, report the host unhealthy first
    (`allot host health H --unhealthy`), or it may start there again.""",
)


# the largest GPU count or priority a request may carry (a 32-bit integer's range)
MAX_COUNT = 2**31 - 1

budget_app = typer.Typer(
    help="Change the budget tree: weights, managers, members, per-user limits.",
    no_args_is_help=True,
)
host_app = typer.Typer(
    help="Register, resize and remove hosts, report their health, list them.",
    no_args_is_help=True,
)


def _principals(option: str, given: list[str] | None, clear: bool) -> list[str] | None:
    """`--member a,b --member c` -> [a, b, c]; `--no-members` -> [] (clear); neither -> None
    (unchanged). A name with a space or a comma inside is refused here (the old CLI sent
    `a,b` as one principal)."""
    if clear:
        if given:
            raise RequestError(f"{option} and --no-{option[2:]}s: give one or the other")
        return []
    return _named(option, given, nobody=f"; --no-{option[2:]}s clears the list")


def _named(option: str, given: list[str] | None, nobody: str = "") -> list[str] | None:
    """`--add-member a,b --add-member c` -> [a, b, c]; None when not given. `nobody`
    ends the error for a list that names nobody."""
    if given is None:
        return None
    from domain.text import is_word

    # `a,,b` and `a,` name a and b; only a list that names nobody is a mistake
    names = [n.strip() for text in given for n in text.split(",") if n.strip()]
    if not names:
        raise RequestError(f"{option} names nobody{nobody}")
    bad = next((n for n in names if not is_word(n)), None)
    if bad is not None:
        raise RequestError(
            f"{option} {bad!r}: one user name each (no spaces; commas separate names)"
        )
    return list(dict.fromkeys(names))


@dataclass(frozen=True)
class _ListChange:
    """What `budget set` asks of one list (managers or members): a replacement (None:
    kept), or names to add and remove from the list the scheduler holds."""

    replace: list[str] | None
    add: list[str] | None
    remove: list[str] | None

    @property
    def by_name(self) -> bool:
        return self.add is not None or self.remove is not None


def _list_change(
    noun: str, given: list[str] | None, clear: bool, add: list[str] | None, remove: list[str] | None
) -> _ListChange:
    """One list's flags read together: --NOUN/--no-NOUNs replace the list, --add-NOUN/
    --remove-NOUN change it; both kinds at once is one error (which list was meant?)."""
    flag = f"--{noun}"
    replace = _principals(flag, given, clear)
    added = _named(f"--add-{noun}", add)
    removed = _named(f"--remove-{noun}", remove)
    if replace is not None and (added is not None or removed is not None):
        used = flag if given else f"--no-{noun}s"
        other = "--add-" + noun if added is not None else "--remove-" + noun
        raise RequestError(
            f"{used} replaces the {noun}s and {other} changes the current ones: give one or "
            f"the other (--add-{noun}/--remove-{noun} keep everyone else)"
        )
    both = [n for n in added or () if n in (removed or ())]
    if both:
        raise RequestError(
            f"{', '.join(both)}: both --add-{noun} and --remove-{noun}; give one or the other"
        )
    return _ListChange(replace, added, removed)


def _near_miss(target: Target, cluster: str, path: str) -> str | None:
    """An existing sibling `path` is probably a typo of (`lab/olmo/pretrian` beside
    `lab/olmo/pretrain`), when `path` itself does not exist; None when it exists, nothing
    is close, or the journal cannot be read (the scheduler decides as before)."""
    from domain.tree import parent_of

    tree = _budget_tree(target, cluster)
    if tree is None:
        return None
    parent = parent_of(path)
    if path in tree.paths or (parent is not None and parent not in tree.paths):
        return None  # a missing parent is the scheduler's rejection to give
    siblings = {s.rpartition("/")[2]: s for s in tree.children_of(parent)}
    typo_of = likely_typo_of(path.rpartition("/")[2], siblings)
    return None if typo_of is None else siblings[typo_of]


def likely_typo_of(name: str, siblings: Iterable[str]) -> str | None:
    """The sibling name `name` is probably a mistyped copy of: the same but for case,
    or close to it (`pretrian` beside `pretrain`) but for the next of a series
    (`team-b` beside `team-a`, `run2` beside `run1`, `olmo2` beside `olmo`): sibling
    teams and projects are named that way, and refusing each new one as a typo made
    --create a habit, which defeats the check."""
    from difflib import get_close_matches

    names = sorted(siblings)
    same_but_case = [n for n in names if n.casefold() == name.casefold()]
    if same_but_case:
        return same_but_case[0]
    close = [n for n in names if not _next_of_a_series(name, n)]
    found = get_close_matches(name, close, n=1, cutoff=0.8)
    return found[0] if found else None


def _next_of_a_series(a: str, b: str) -> bool:
    """`a` and `b` differ only in a trailing number, or in one trailing letter after a
    separator (`team-a`, `team-b`)."""
    pairs = zip(a.casefold(), b.casefold(), strict=False)
    common = next((i for i, (x, y) in enumerate(pairs) if x != y), min(len(a), len(b)))
    prefix, rest_a, rest_b = a[:common], a[common:], b[common:]
    if prefix[-1:].isdigit():  # run10 beside run11: the number starts before the difference
        digits = len(prefix) - len(prefix.rstrip("0123456789"))
        prefix, rest_a, rest_b = prefix[:-digits], a[common - digits :], b[common - digits :]
    if all(rest.isdigit() or not rest for rest in (rest_a, rest_b)):
        return bool(prefix)
    one_letter = all(len(rest) == 1 and rest.isalpha() for rest in (rest_a, rest_b))
    return one_letter and prefix[-1:] in ("-", "_", ".")


def _budget_tree(target: Target, cluster: str) -> BudgetTree | None:
    """`cluster`'s `BudgetTree` at the journal's end, from the tree's records alone (a
    byte search, not a fold), or None when the journal cannot be read."""
    from projections.budget_tree import BudgetTree
    from streams.sources import SourceError, records_of_type

    try:
        records = records_of_type(
            ("budget.set", "budget.removed"), kafka=target.kafka, data=target.data,
            cluster=cluster,
        )  # fmt: skip
    except (SourceError, OSError):
        return None
    return BudgetTree.from_records(records)


def _refuse_near_miss(target: Target, cluster: str, path: str) -> None:
    existing = _near_miss(target, cluster, path)
    if existing is not None:
        raise RequestError(
            f"{path} does not exist, and {existing} does: a typo? Nothing sent: this would "
            f"create {path} beside it, taking a share from its siblings; add --create if a "
            "new allocation is what you mean"
        )


# a negative WEIGHT would otherwise read as an unknown option ("No such option: -1")
@budget_app.command("set", context_settings={"ignore_unknown_options": True})
def budget_set(
    path: Annotated[str, typer.Argument(help="Allocation path, e.g. lab/olmo/pretrain.")],
    weight: Annotated[
        float | None,
        typer.Argument(
            help="Share among its siblings (0 to 1e6); left out, the scheduler keeps its "
            "current weight (to change only managers or members, as sacctmgr modify does). "
            "0 gives it, and everything under it, no share: its work still runs, but only "
            "unallocated (not charged, not protected, preempted by any allocated request)."
        ),
    ] = None,
    manager: Annotated[
        list[str] | None,
        typer.Option(
            "--manager",
            help="May change its children's budgets (repeatable, or comma-separated: "
            "a,b). Given, the list replaces the current managers; left out, they stay.",
        ),
    ] = None,
    member: Annotated[
        list[str] | None,
        typer.Option(
            "--member",
            help="May submit to it (repeatable, or comma-separated: a,b). Given, the list "
            "replaces the current members; left out, they stay.",
        ),
    ] = None,
    no_managers: Annotated[
        bool, typer.Option("--no-managers", help="Clear its managers (none left).")
    ] = False,
    no_members: Annotated[
        bool, typer.Option("--no-members", help="Clear its members (none left).")
    ] = False,
    add_member: Annotated[
        list[str] | None,
        typer.Option(
            "--add-member",
            help="Add to its members, keeping the others (sacctmgr add user; repeatable, "
            "or a,b). The scheduler applies it to the members it holds then, so a change "
            "made by someone else at the same moment stays.",
        ),
    ] = None,
    remove_member: Annotated[
        list[str] | None,
        typer.Option(
            "--remove-member",
            help="Remove from its members, keeping the others (repeatable, or a,b).",
        ),
    ] = None,
    add_manager: Annotated[
        list[str] | None,
        typer.Option(
            "--add-manager", help="Add to its managers, keeping the others (repeatable, or a,b)."
        ),
    ] = None,
    remove_manager: Annotated[
        list[str] | None,
        typer.Option(
            "--remove-manager",
            help="Remove from its managers, keeping the others (repeatable, or a,b).",
        ),
    ] = None,
    max_gpus_per_user: Annotated[
        str | None,
        typer.Option(
            "--max-gpus-per-user",
            metavar="N|none",
            help="At most N GPUs held at once by each user's allocated work under PATH, "
            "summed over its subtree (Slurm's QOS MaxTRESPerUser=gres/gpu=N). Work that "
            "would pass it waits, reason QOSMaxGRESPerUser, without holding up other "
            "users' work. 'none' (or -1) removes the limit; left out, it is kept.",
        ),
    ] = None,
    max_pending_per_user: Annotated[
        str | None,
        typer.Option(
            "--max-pending-per-user",
            metavar="M|none",
            help="At most M workloads pending (held ones too) per user under PATH, summed "
            "over its subtree: a submission past it is rejected (Slurm's "
            "MaxSubmitJobsPerUser). 'none' (or -1) removes the limit; left out, it is kept.",
        ),
    ] = None,
    create: Annotated[
        bool,
        typer.Option(
            "--create",
            help="Create PATH even though an existing sibling's name is close to it "
            "(without it, `lab/olmo/pretrian` beside lab/olmo/pretrain is refused as a "
            "likely typo).",
        ),
    ] = False,
    wait: BudgetWaitOpt = None,
    no_wait: NoWaitOpt = False,
    kafka: KafkaOpt = None,
    data: DataOpt = None,
    cluster: ClusterOpt = "default",
    as_: AsOpt = None,
) -> None:
    """Create an allocation or change its weight, managers, members or per-user limits.

    Managers of any allocation above it may, or an admin (top-level ones: admins
    only). It waits for the scheduler's verdict (up to 10 s; --wait TIME, or --no-wait
    to return at once): a refused change (not a manager, an unknown parent, ...) says
    why and exits 1. `allot shares -l` shows the current managers and members. --member and
    --manager replace a list; --add-member, --remove-member, --add-manager and
    --remove-manager change it, keeping everyone else (adding someone already there, or
    removing someone who is not, changes nothing and is not an error: the verdict says so).
    For one list give one kind or the other (--member or --no-members with
    --add-member is refused). A scheduler older than --add-member and its kin ignores
    them: the verdict says so, exit 1. A new PATH whose name is close to an existing
    sibling's is refused as a likely typo unless --create is given: created, it would
    take a share from its siblings at once. The next of a series is no typo
    (lab/team-b beside lab/team-a, run2 beside run1, olmo2 beside olmo)."""
    with one_line_errors():
        from domain.admission import MAX_WEIGHT

        default_wait = _budget_wait(wait, no_wait)
        if weight is not None and not (math.isfinite(weight) and 0 <= weight <= MAX_WEIGHT):
            raise RequestError(f"WEIGHT {weight:g}: a weight is a number from 0 to {MAX_WEIGHT:g}")
        from domain.tree import valid_path  # imported here: audit commands start light

        if not valid_path(path):
            raise RequestError(
                f"PATH {path!r}: names separated by '/', without spaces or control characters"
            )
        managers = _list_change("manager", manager, no_managers, add_manager, remove_manager)
        members = _list_change("member", member, no_members, add_member, remove_member)
        limits = {
            name: _user_limit(option, text)
            for name, option, text in (
                ("max_gpus_per_user", "--max-gpus-per-user", max_gpus_per_user),
                ("max_pending_per_user", "--max-pending-per-user", max_pending_per_user),
            )
            if text is not None
        }
        if (
            weight is None
            and managers.replace is None
            and members.replace is None
            and not managers.by_name
            and not members.by_name
            and not limits
        ):
            raise RequestError(
                "nothing to change: give a WEIGHT, or --manager/--member (--no-managers, "
                "--no-members, --add-member, --remove-member, --add-manager, "
                "--remove-manager), or --max-gpus-per-user/--max-pending-per-user"
            )
        if not create:
            _refuse_near_miss(resolve_target(kafka, data), cluster, path)
        what = f"weight {weight:g}" if weight is not None else "weight kept"
        sent = _send(
            kafka,
            data,
            "budget.set",
            cluster=cluster,
            actor=as_,
            said=f"Budget change for {path} ({what}) sent",
            allocation=path,
            weight=weight,
            managers=managers.replace,
            members=members.replace,
            add_managers=managers.add,
            remove_managers=managers.remove,
            add_members=members.add,
            remove_members=members.remove,
            **limits,
            wait=wait,
            default_wait=default_wait,
            admission=False,  # the default wait is the budget commands' own
        )
    _report_verdict(
        f"the budget change for {path}",
        lambda: f"Budget of {path} set{_limits_now(sent, cluster, path, limits)}",
        wait,
        sent,
        _request_check(sent.request, "`allot shares -l`"),
    )
    if sent.verdict is not None:
        _say_named_changes(sent.verdict, managers, members)
        _say_if_limits_ignored(sent.verdict, limits)
        if members.add or members.replace:
            _say_if_members_inactive(sent.target, cluster, path)
    if weight == 0:
        typer.echo(_ZERO_WEIGHT_NOTE.format(path=path), err=True)


def _user_limit(option: str, text: str) -> int:
    """A per-user limit as sent: N >= 1, or -1 (`none`) to remove the limit."""
    from domain.events import CLEAR_LIMIT

    word = text.strip().lower()
    if word in ("none", "-1", "unlimited"):
        return CLEAR_LIMIT
    if not word.isdigit() or not 1 <= int(word) <= 2**31 - 1:
        raise RequestError(
            f"{option} {text!r}: give a whole number of at least 1, or 'none' to remove the limit"
        )
    return int(word)


def _limits_now(sent: _Sent, cluster: str, path: str, limits: dict[str, int]) -> str:
    """`; per-user limits now: gpus 16, pending none`: after an accepted change of a
    limit, both of PATH's as they now are (the one left out may have been set before),
    so a typo shows at once; nothing when the change set none or the scheduler ignored
    them (`_say_if_limits_ignored`)."""
    verdict = sent.verdict or {}
    if not limits or any(verdict.get(name) is None for name in limits):
        return ""
    tree = _budget_tree(sent.target, cluster)
    now = tree.user_limits(path) if tree is not None else None
    if now is None:  # the journal could not be read again: what this change set
        now = {name: verdict[name] for name in limits}
    shown = []
    for label, name in (("gpus", "max_gpus_per_user"), ("pending", "max_pending_per_user")):
        if name in now:
            value = now[name]
            shown.append(f"{label} {'none' if value is None or value < 1 else value}")
    return f"; per-user limits now: {', '.join(shown)}"


def _say_if_limits_ignored(verdict: dict[str, Any], limits: dict[str, int]) -> None:
    """A scheduler older than the per-user limits accepts the change without them (its
    record has no such field): say so and exit 1, or the manager believes a limit holds."""
    ignored = [name for name in limits if verdict.get(name) is None]
    if ignored:
        options = "/".join(f"--{name.replace('_', '-')}" for name in ignored)
        typer.echo(
            f"The scheduler ignored {options}: it predates per-user limits and set none; "
            "upgrade `allot serve`",
            err=True,
        )
        raise typer.Exit(1)


def _say_if_members_inactive(target: Target, cluster: str, path: str) -> None:
    """Members given to an allocation that has children may submit neither to it nor
    below it (`allot shares -l`: inactive): say so, or the manager who added them hears
    of it from them, when their submissions are refused."""
    tree = _budget_tree(target, cluster)
    children = [] if tree is None else tree.children_of(path)
    if children:
        typer.echo(
            f"note: {path} has children ({', '.join(children[:3])}"
            f"{', ...' if len(children) > 3 else ''}): its members may submit neither to it "
            "nor below it until it is a leaf again; add them to a leaf",
            err=True,
        )


# what a zero weight means (DESIGN §5 rule 8: `State.allocated` needs a non-zero share),
# said when one is set: without it a manager read "set" and learned it from the queue
_ZERO_WEIGHT_NOTE = (
    "note: weight 0: {path} and everything under it get no share; their work runs only "
    "unallocated (not charged, not protected, on GPUs no allocated work wants, preempted "
    "by any allocated request)"
)


def _say_named_changes(verdict: dict[str, Any], *changes: _ListChange) -> None:
    """After an accepted change by names: each list as it now is, and the names that
    changed nothing (`erin was already a member`). A scheduler that wrote no resulting
    list predates --add-member and friends and ignored them: exit 1."""
    for noun, change in zip(("manager", "member"), changes, strict=True):
        if not change.by_name:
            continue
        now = verdict.get(f"{noun}s")
        if now is None:
            typer.echo(
                f"The scheduler ignored --add-{noun}/--remove-{noun}: it predates them and "
                f"left the {noun}s as they were; upgrade `allot serve`, or give the whole "
                f"list with --{noun}",
                err=True,
            )
            raise typer.Exit(1)
        for name in verdict.get(f"already_{noun}s") or ():
            typer.echo(f"{name} was already a {noun}")
        for name in verdict.get(f"absent_{noun}s") or ():
            typer.echo(f"{name} was not a {noun}: nothing to remove")
        typer.echo(f"{noun.capitalize()}s now: {', '.join(now) if now else '(none)'}")


@budget_app.command("remove")
def budget_remove(
    path: Annotated[str, typer.Argument(help="Allocation path to remove (no children).")],
    wait: BudgetWaitOpt = None,
    no_wait: NoWaitOpt = False,
    kafka: KafkaOpt = None,
    data: DataOpt = None,
    cluster: ClusterOpt = "default",
    as_: AsOpt = None,
) -> None:
    """Remove an allocation that has no children and no live workloads.

    Waits for the scheduler's verdict as `budget set` does: exit 1 with the reason if
    it refused."""
    with one_line_errors():
        default_wait = _budget_wait(wait, no_wait)
        sent = _send(
            kafka, data, "budget.removed", cluster=cluster, actor=as_,
            said=f"Removal of {path} sent", allocation=path, wait=wait,
            default_wait=default_wait, admission=False,
        )  # fmt: skip
    _report_verdict(
        f"the removal of {path}",
        f"Allocation {path} removed",
        wait,
        sent,
        _request_check(sent.request, "`allot shares -l`"),
    )


# a negative GPUS would otherwise read as an unknown option ("No such option: -1")
@host_app.command("register", context_settings={"ignore_unknown_options": True})
def host_register(
    host: Annotated[str, typer.Argument(help="Host name.")],
    gpus: Annotated[int, typer.Argument(help="Number of GPUs on the host.")],
    wait: WaitOpt = None,
    kafka: KafkaOpt = None,
    data: DataOpt = None,
    cluster: ClusterOpt = "default",
    as_: AsOpt = None,
) -> None:
    """Register a host and its GPUs (admins only, when admins are set).

    Registering a known host again with another count is its new size (a board
    replaced, a GPU pulled): capacity follows at once. With fewer GPUs, running
    work on an index the host no longer has (GPU 7 of `h7 7` after `h7 8`) stops
    as on a lost node: resumable work is requeued with its submit time (at most
    max_lost_requeues times), other work ends (NODE_FAIL). To move work off
    first, report the host unhealthy and wait until `allot host list` says
    drained."""
    from domain.admission import MAX_HOST_GPUS
    from domain.text import HOST_NAME_RULE, is_host_name

    with one_line_errors():
        if not is_host_name(host):  # the scheduler would reject it
            raise RequestError(f"HOST {host!r}: a host name is {HOST_NAME_RULE}")
        if not 1 <= gpus <= MAX_HOST_GPUS:  # the scheduler would reject it
            raise RequestError(f"GPUS {gpus}: a host has 1 to {MAX_HOST_GPUS} GPUs")
        sent = _send(
            kafka, data, "host.registered", cluster=cluster, actor=as_, host=host, gpus=gpus,
            said=f"Registration of host {host} ({plural(gpus, 'GPU')}) sent", wait=wait,
        )  # fmt: skip
    _report_verdict(
        f"the registration of host {host}",
        f"Host {host} registered",
        wait,
        sent,
        _request_check(sent.request, "`allot host list`"),
    )


@host_app.command("health")
def host_health(
    host: Annotated[str, typer.Argument(help="Host name.")],
    healthy: Annotated[
        bool | None,
        typer.Option(
            "--healthy/--unhealthy",
            help="Healthy hosts take work; unhealthy ones are cordoned and drained "
            "(one of the two is required).",
            show_default=False,
        ),
    ] = None,
    reason: Annotated[str, typer.Option("--reason", help="Why, for the audit log.")] = "",
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="With --healthy: return a host held down for flapping (config "
            "health_holddown) to service now.",
        ),
    ] = False,
    wait: WaitOpt = None,
    kafka: KafkaOpt = None,
    data: DataOpt = None,
    cluster: ClusterOpt = "default",
    as_: AsOpt = None,
) -> None:
    """Report a host healthy or unhealthy (admins only, when admins are set).

    Unhealthy: no new work goes there; unallocated work and work past its
    protection are preempted at once, protected work when its protection
    ends (non-resumable work then ends as NODE_FAIL); the host is reported
    drained once empty.

    Healthy: it takes work again, unless config health_holddown is set and it
    failed again within that long of its last return (flapping): then it stays
    cordoned until it has stayed healthy that long (the accepted report and
    `allot host list` say until when), or --force returns it now."""
    with one_line_errors():
        if healthy is None:
            raise RequestError(f"say --healthy or --unhealthy for host {host}")
        if {"--healthy", "--unhealthy"} <= set(sys.argv):  # click keeps the last one
            raise RequestError(f"--healthy and --unhealthy: say one for host {host}")
        if force and not healthy:
            raise RequestError(f"--force returns a held-down host: say --healthy for {host}")
        state = "healthy" if healthy else "unhealthy"
        sent = _send(
            kafka,
            data,
            "host.health",
            cluster=cluster,
            actor=as_,
            said=f"Host {host} reported {state}",
            host=host,
            healthy=healthy,
            reason=reason,
            wait=wait,
            **({"force": True} if force else {}),
        )
    _report_verdict(
        f"the health report of {host}",
        lambda: (
            (healthy and _held_down(kafka, data, cluster, host)) or f"Host {host} marked {state}"
        ),
        wait,
        sent,
        _request_check(sent.request, "`allot host list`"),
    )


def _held_down(kafka: str | None, data: Path | None, cluster: str, host: str) -> str | None:
    """After an accepted healthy report: what `allot host list` says when the scheduler
    keeps `host` held down for flapping (config health_holddown), else None; None too
    when the journal cannot be read (the verdict came: a hint is not worth an error)."""
    from allot.commands.views import load_view
    from projections.journal import JournalError
    from projections.views import ViewError, held_down_after_report
    from streams.sources import SourceError

    try:
        return held_down_after_report(load_view(kafka, data, None, cluster, live_only=True), host)
    except (ViewError, SourceError, JournalError):
        return None


@host_app.command("remove")
def host_remove(
    host: Annotated[str, typer.Argument(help="Host name.")],
    reason: Annotated[str, typer.Option("--reason", help="Why, for the audit log.")] = "",
    wait: WaitOpt = None,
    kafka: KafkaOpt = None,
    data: DataOpt = None,
    cluster: ClusterOpt = "default",
    as_: AsOpt = None,
) -> None:
    """Remove a host from the cluster for good (admins only, when admins are set),
    like deleting a node from slurm.conf.

    Its GPUs leave the capacity (shares, entitlements and usage follow) and its
    running work stops at once as on a lost node: resumable work is requeued with
    its submit time (at most max_lost_requeues times), other work ends
    (NODE_FAIL). To let protected work finish first, report the host unhealthy and
    remove it once `allot host list` says drained. `allot host list -R` shows when
    and by whom it was removed; its name may be registered again later."""
    with one_line_errors():
        sent = _send(
            kafka, data, "host.removed", cluster=cluster, actor=as_,
            said=f"Removal of host {host} sent", host=host, reason=reason, wait=wait,
        )  # fmt: skip
    _report_verdict(
        f"the removal of host {host}",
        f"Host {host} removed",
        wait,
        sent,
        _request_check(sent.request, "`allot host list -R`"),
    )


COMMANDS: dict[str, Callable[..., None]] = {
    "submit": submit,
    "cancel": cancel,
    "hold": hold,
    "release": release,
    "requeue": requeue,
}


def register(app: typer.Typer) -> None:
    """Add this module's commands to the `allot` app."""
    for name, command in COMMANDS.items():
        app.command(name)(command)
    app.add_typer(budget_app, name="budget")
    app.add_typer(host_app, name="host")
