"""Options every live command shares: where the journal is, which cluster, who you are."""

from __future__ import annotations

import getpass
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer


def kafka_environment_help() -> str:
    """What every `--kafka` help says besides the address: the topic suffix (and the
    one in effect) and the login variables, read by every command alike."""
    from streams.topics import BASE_INBOX, BASE_JOURNAL, SUFFIX, SUFFIX_ENV

    now = (
        f"now {SUFFIX!r}: {BASE_INBOX}{SUFFIX}, {BASE_JOURNAL}{SUFFIX}, ..." if SUFFIX else "unset"
    )
    return (
        f"Topic names get ${SUFFIX_ENV} appended ({now}); use the scheduler's. A broker "
        "with logins: $ALLOT_KAFKA_USER, $ALLOT_KAFKA_PASSWORD_FILE (or "
        "$ALLOT_KAFKA_PASSWORD), $ALLOT_KAFKA_SASL_MECHANISM (default SCRAM-SHA-512), "
        "$ALLOT_KAFKA_SECURITY_PROTOCOL (SASL_PLAINTEXT or SASL_SSL)."
    )


KafkaOpt = Annotated[
    str | None,
    typer.Option(
        "--kafka",
        envvar="ALLOT_KAFKA",
        help=f"Kafka bootstrap HOST:PORT (default $ALLOT_KAFKA). {kafka_environment_help()}",
        show_default=False,
    ),
]
DataOpt = Annotated[
    Path | None,
    typer.Option(
        "--data",
        help="Embedded journal folder (no broker): DIR/inbox.jsonl, DIR/journal.jsonl "
        "(default $ALLOT_DATA when neither --kafka nor $ALLOT_KAFKA is given).",
    ),
]
JournalOpt = Annotated[
    Path | None,
    typer.Option("--journal", help="Read a journal file, e.g. a simulation's journal.jsonl."),
]
ClusterOpt = Annotated[
    str,
    typer.Option(
        "--cluster",
        envvar="ALLOT_CLUSTER",
        help="Cluster name (default $ALLOT_CLUSTER, else 'default').",
    ),
]
ReadClusterOpt = Annotated[
    str | None,
    typer.Option(
        "--cluster",
        envvar="ALLOT_CLUSTER",
        help="Cluster name (default $ALLOT_CLUSTER; unset, a file or --data folder is read "
        "whole and Kafka's cluster is 'default').",
        show_default=False,
    ),
]
SubtreeOpt = Annotated[
    str | None,
    typer.Option(
        "--allocation",
        "-a",
        "--account",
        "-A",
        help="Only this allocation and the allocations under it (Slurm's -A/--account).",
    ),
]
AsOpt = Annotated[
    str | None,
    typer.Option("--as", help="Act as this principal (default $USER).", show_default=False),
]
HORIZON_DEFAULT = "2d"
HorizonOpt = Annotated[
    str,
    typer.Option(
        "--horizon",
        metavar="DURATION",
        help="How far ahead the forecast looks (e.g. 6h, 2d; default 2d); later starts read N/A.",
        show_default=False,
    ),
]

# the simulated executor runs work `--speed` times faster than its runtime: so must
# the forecast of a journal it reports to, or it foresees ends that many times late
WorkSpeedOpt = Annotated[
    float,
    typer.Option(
        "--speed",
        metavar="X",
        help="The forecast's work runs X times faster than its runtime, as under `allot "
        "executor --simulate --speed X` (default 1).",
        show_default=False,
    ),
]


def check_speed(speed: float) -> float:
    """--speed, if it is a number > 0; else TargetError."""
    import math

    if not (speed > 0 and math.isfinite(speed)):
        raise TargetError(f"--speed must be a number > 0, got {speed:g}")
    return speed


# the end of a time range, for every command that takes --since/--until (as sacct -E)
UntilOpt = Annotated[
    str | None,
    typer.Option(
        "--until",
        "-E",
        help="Until (same forms as --since; default: the latest record).",
        show_default=False,
    ),
]


class InterruptedWithNote(Exception):
    """Ctrl-C that a command answered itself: `allot` prints the note (what stands, what
    was left where) instead of its bare "interrupted", and exits 130."""


class TargetError(ValueError):
    """A missing or conflicting --kafka/--data/--journal: one line for the user."""


def horizon_seconds(text: str) -> float:
    """--horizon in seconds; a bad value is one line for the user (TargetError)."""
    from domain.durations import parse_duration

    try:
        seconds = parse_duration(text)
    except ValueError as why:
        raise TargetError(f"--horizon {text!r}: {why}") from None
    if not seconds > 0 or seconds > 366 * 86400:
        raise TargetError(f"--horizon {text!r}: give a duration above 0 and at most 366d")
    return seconds


@dataclass(frozen=True)
class Target:
    kafka: str | None = None
    data: Path | None = None
    journal: Path | None = None

    @property
    def label(self) -> str:
        return f"kafka {self.kafka}" if self.kafka else f"{self.data or self.journal}"

    @property
    def where(self) -> str:
        """Where a request went, named so it reads apart from an allocation's path."""
        return f"folder {self.data}" if self.data is not None else self.label


def resolve_target(
    kafka: str | None, data: Path | None, journal: Path | None = None, *, writable: bool = True
) -> Target:
    """Exactly one source: --data wins over $ALLOT_KAFKA when both are set."""
    if journal is not None:
        if writable:
            raise TargetError(
                "--journal is read-only; use --data DIR or --kafka HOST:PORT to send requests"
            )
        return Target(journal=journal)
    if data is not None:
        if data.is_file():  # e.g. --data DIR/inbox.jsonl or DIR/journal.jsonl
            hint = "; read a journal file with --journal" if not writable else ""
            raise TargetError(
                f"--data {data}: a file; --data wants the embedded scheduler's folder "
                f"(--data {data.parent}){hint}"
            )
        return Target(data=data)
    if kafka:
        from streams.bootstrap import BootstrapError, parse_bootstrap

        try:
            return Target(kafka=parse_bootstrap(kafka))
        except BootstrapError as why:  # readers too: `127.0.0.1` quietly meant port 9092
            raise TargetError(str(why)) from None
    raise TargetError(
        "say where the scheduler is: --kafka HOST:PORT (or $ALLOT_KAFKA) or --data DIR"
    )


def read_target(kafka: str | None, data: Path | None, journal: Path | None) -> Target:
    """The journal a read-only command reads; one of the three options must name it."""
    from streams.sources import NO_JOURNAL_GIVEN

    if kafka is None and data is None and journal is None:
        raise TargetError(NO_JOURNAL_GIVEN)
    return resolve_target(kafka, data, journal, writable=False)


def ends_mid_line(path: Path | None) -> bool:
    """Does the journal file end in a line without its newline (a write in progress, or
    a file cut short)? The readers leave that line out; commands say so."""
    if path is None or not path.is_file() or path.stat().st_size == 0:
        return False
    with path.open("rb") as f:
        f.seek(-1, 2)
        return f.read(1) != b"\n"


def cut_line_warning(path: Path) -> str:
    """What a command says (one line, on stderr, after reading the rest) of a journal
    file that `ends_mid_line`: its answer leaves that line out."""
    return (
        f"warning: {path} ends in the middle of a line (cut short, or still being "
        "written); that last line is left out"
    )


def say_if_cut(read: Any) -> None:
    """After a read of a journal file to its end: the `cut_line_warning` on stderr if it
    left out a last line cut short. `read` knows (`cut`) and of which file (`path`): a
    `streams.sources.FileLines`, or a `projections.usage_store.ResumableUsage` after its
    update; anything else (a Kafka read) says nothing."""
    if getattr(read, "cut", False):
        typer.echo(visible(cut_line_warning(read.path)), err=True)


def plural(n: int, noun: str) -> str:
    """`1 workload`, `2 workloads`, `1,204 GPUs`."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def whoami(explicit: str | None) -> str:
    if explicit is not None and not explicit.strip():
        # `--as "$UNSET"`: acting as the caller instead would put the wrong name in the log
        raise TargetError("--as: empty; give a user name, or leave --as out to act as $USER")
    if explicit:
        return explicit
    return os.environ.get("USER") or getpass.getuser()


# the shell's status for a process ended by SIGPIPE: `allot ... | head -1` under
# `set -o pipefail` reads as the closed pipe it is, not as a verdict (exit 1) or an error
CLOSED_PIPE_EXIT = 141


class OutputError(OSError):
    """Writing the command's output failed (a full disk, `> /dev/full`), as opposed to
    reading its input: the two read alike as OSError otherwise."""


class _CheckedStdout:
    """sys.stdout (or its binary buffer), whose write failures other than a closed pipe
    are OutputErrors."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    @property
    def buffer(self) -> Any:
        return _CheckedStdout(self._inner.buffer)

    def write(self, text: Any) -> int:
        try:
            return self._inner.write(text)
        except BrokenPipeError:
            raise
        except OSError as why:
            raise OutputError(why.errno, why.strerror) from None

    def flush(self) -> None:
        try:
            self._inner.flush()
        except BrokenPipeError:
            raise
        except OSError as why:
            raise OutputError(why.errno, why.strerror) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def stdout_to_devnull() -> None:
    """Later flushes (at exit) must not fail again on a closed or full stdout."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


# what a terminal would act on inside journal data (a workload id, a tag, a host's
# reason): every control character but newline and tab, and ESC unless it starts a
# colour (SGR) sequence, which the tables write themselves. Shown as \x1b, not obeyed:
# OSC window titles, links and clipboard writes, cursor moves, a CR over the line.
_UNSAFE = re.compile(r"\x1b(?!\[[0-9;]*m)|[\x00-\x08\x0b-\x1a\x1c-\x1f\x7f-\x9f]")


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # in a table cell, tab and newline too


def visible(text: str) -> str:
    """`text` with every control character shown as an escape (\x1b), none obeyed: for
    one table cell (a tab or newline would break the row too)."""
    return _CONTROL.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"


class _SafeText:
    """A text stream that shows a terminal's control sequences in what it writes as
    escapes (`_UNSAFE`), so data read from a journal cannot drive the terminal."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def write(self, text: Any) -> int:
        if isinstance(text, str):
            self._inner.write(_UNSAFE.sub(_escape, text))
            return len(text)
        return self._inner.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@contextmanager
def terminal_safe() -> Iterator[None]:
    """While a read command prints journal data: stdout through `_SafeText`. Not stderr:
    progress bars draw there with the very sequences it escapes; error lines pass
    through `visible` instead."""
    out = sys.stdout
    sys.stdout = _SafeText(out)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout = out


@contextmanager
def quiet_on_closed_pipe() -> Iterator[None]:
    """Stdout closed early (`| head`): stop quietly with CLOSED_PIPE_EXIT. Stdout that
    cannot be written (`> /dev/full`): one line saying so, exit 2."""
    inner = sys.stdout
    sys.stdout = _CheckedStdout(inner)  # type: ignore[assignment]
    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError:
        stdout_to_devnull()
        raise typer.Exit(CLOSED_PIPE_EXIT) from None
    except OutputError as why:
        stdout_to_devnull()
        typer.echo(f"error: cannot write the output: {why.strerror or why}", err=True)
        raise typer.Exit(2) from None
    finally:
        sys.stdout = inner


def pipe_console(**options: Any) -> Any:
    """A rich Console whose closed pipe ends the command as `quiet_on_closed_pipe` does
    (rich's own handler exits 1, which reads as a failure)."""
    from rich.console import Console

    console = Console(**options)
    console.on_broken_pipe = _closed_pipe  # type: ignore[method-assign]
    return console


def _closed_pipe() -> None:
    raise BrokenPipeError
