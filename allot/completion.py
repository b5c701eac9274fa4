"""Shell completion for `allot` (bash, zsh, fish).

`allot completion SHELL` prints the script; on each TAB the shell runs `allot` again
with $_ALLOT_COMPLETE set and the words typed so far, and `main` hands over to
`complete`. That runs on every TAB, so it builds only the command being typed and
imports neither `domain` (pydantic) nor a Kafka client: the words it offers from the
journal (allocations, hosts, clusters, the user's live workload ids) come from a byte
search of a `--data` folder's (or a `--journal` file's) journal for the few record
types that name them. From Kafka it offers none of these: reading the journal topic
from its start cannot be made quick enough for a TAB.
"""

from __future__ import annotations

import getpass
import os
import shlex
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

PROG = "allot"
COMPLETE_VAR = "_ALLOT_COMPLETE"
SHELLS = ("bash", "zsh", "fish")

# the built-in ordering policies, as domain.policies.ordering registers them (a test
# keeps the two in step): importing `domain` for their names would cost every TAB
# pydantic's import. Plugins' policies are not offered (finding them scans entry points).
POLICIES = (
    "fairshare",
    "fifo",
    "largest-first",
    "longest-first",
    "shortest-first",
    "legacy-priority",
)
# the commands whose ID arguments name the user's own live workloads
WORKLOAD_COMMANDS = ("cancel", "hold", "release", "requeue", "why")
_LIVE_ENDS = (
    "workload.submitted",
    "workload.cancelled",
    "workload.finished",
    "workload.preempted",
)


def requested() -> bool:
    """Is this run the shell asking for completions (not a command to run)?"""
    return COMPLETE_VAR in os.environ


def script(shell: str) -> str:
    """The completion script `allot completion SHELL` prints."""
    from typer._completion_shared import get_completion_script

    return get_completion_script(prog_name=PROG, complete_var=COMPLETE_VAR, shell=shell)


def typed_words() -> list[str]:
    """The words after `allot` that are typed out (the one under the cursor is not),
    as the shell passed them: bash in COMP_WORDS/COMP_CWORD, zsh and fish in
    _TYPER_COMPLETE_ARGS (up to the cursor)."""
    if "COMP_WORDS" in os.environ:
        words = _split(os.environ["COMP_WORDS"])
        try:
            cword = int(os.environ.get("COMP_CWORD", len(words)))
        except ValueError:
            cword = len(words)
        return words[1:cword]
    line = os.environ.get("_TYPER_COMPLETE_ARGS", "")
    words = _split(line)
    if line and not line[-1].isspace():
        words = words[:-1]  # the word being completed
    return words[1:]


def _split(line: str) -> list[str]:
    try:
        return shlex.split(line)
    except ValueError:  # an open quote: the word being typed
        return line.split()


def complete(command: Any) -> None:
    """Answer the shell (click's completion protocol, in typer's shell formats) and
    exit, with `allot`'s own words added to `command` (the click command built)."""
    from typer._completion_classes import completion_init

    completion_init()  # registers typer's bash/zsh/fish formats with click
    offer_words(command)
    command.main(prog_name=PROG)


def offer_words(command: Any) -> None:
    """Give the parameters whose values the journal (or a fixed list) knows their
    completion: found by their names, so every command taking --allocation or
    --cluster offers them, including ones added later."""
    for path, cmd in _commands(command, ()):
        for param in getattr(cmd, "params", []):
            found = _completer(path, param)
            if found is not None:
                param._custom_shell_complete = _offering(found)


def _commands(command: Any, path: tuple[str, ...]) -> Iterable[tuple[tuple[str, ...], Any]]:
    yield path, command
    for name, sub in (getattr(command, "commands", None) or {}).items():
        yield from _commands(sub, (*path, name))


def _completer(path: tuple[str, ...], param: Any) -> Callable[[Any], Iterable[str]] | None:
    opts = set(getattr(param, "opts", ()))
    budget_path = path in (("budget", "set"), ("budget", "remove")) and param.name == "path"
    if "--allocation" in opts or budget_path:
        return allocations
    if "--cluster" in opts:
        return clusters
    if "--policy" in opts:
        return lambda ctx: POLICIES
    if path[:1] == ("host",) and param.name == "host":
        return hosts
    if path == ("completion",):
        return lambda ctx: SHELLS
    if path in {(c,) for c in WORKLOAD_COMMANDS} and param.param_type_name == "argument":
        return live_workloads
    return None


def _offering(find: Callable[[Any], Iterable[str]]) -> Callable[[Any, Any, str], list[str]]:
    def offer(ctx: Any, param: Any, incomplete: str) -> list[str]:
        try:
            words = find(ctx)
        except Exception:  # a TAB shows nothing rather than a traceback in the prompt
            return []
        given = ctx.params.get(param.name)
        typed = set(given) if isinstance(given, (list, tuple)) else set()  # `cancel A B`
        return sorted({w for w in words if w.startswith(incomplete) and w not in typed})

    return offer


# ------------------------------------------------------------------ the journal's words


def _records(ctx: Any, kinds: Iterable[str], *, whole: bool = False) -> list[dict[str, Any]]:
    """The records of `kinds` in the journal the command line names (--data, --journal,
    else $ALLOT_DATA unless Kafka is named), of its --cluster unless `whole`; [] from
    Kafka or when there is nothing to read."""
    params = ctx.params
    data, journal = params.get("data"), params.get("journal")
    if data is None and journal is None:
        if params.get("kafka") or os.environ.get("ALLOT_KAFKA", "").strip():
            return []
        env = os.environ.get("ALLOT_DATA", "").strip()
        if not env:
            return []
        data = env
    from streams.sources import SourceError, records_of_type

    cluster = None if whole else params.get("cluster")
    try:
        return records_of_type(
            kinds,
            data=None if journal is not None else Path(data),
            journal=None if journal is None else Path(journal),
            cluster=cluster,
        )
    except (SourceError, OSError, ValueError):
        return []


def allocations(ctx: Any) -> set[str]:
    """The budget tree's paths at the journal's end."""
    paths: set[str] = set()
    for record in _records(ctx, ("budget.set", "budget.removed")):
        path = record.get("allocation")
        if isinstance(path, str):
            (paths.add if record["type"] == "budget.set" else paths.discard)(path)
    return paths


def hosts(ctx: Any) -> set[str]:
    """The hosts registered and not removed."""
    names: set[str] = set()
    for record in _records(ctx, ("host.registered", "host.removed")):
        name = record.get("host")
        if isinstance(name, str):
            (names.add if record["type"] == "host.registered" else names.discard)(name)
    return names


def clusters(ctx: Any) -> set[str]:
    """The clusters that have a budget or a host (every cluster in use has both)."""
    return {
        str(record.get("cluster", "default"))
        for record in _records(ctx, ("budget.set", "host.registered"), whole=True)
    }


def live_workloads(ctx: Any) -> list[str]:
    """Ids of the user's (--as, else $USER) workloads not ended: submitted, and not
    cancelled, nor finished or preempted without being requeued."""
    user = ctx.params.get("as_") or os.environ.get("USER") or getpass.getuser()
    live: dict[str, None] = {}
    for record in _records(ctx, _LIVE_ENDS):
        wid = record.get("workload")
        if not isinstance(wid, str):
            continue
        if record["type"] == "workload.submitted":
            if record.get("actor") == user:
                live[wid] = None
        elif record["type"] == "workload.cancelled" or record.get("requeued") is not True:
            live.pop(wid, None)
    return list(live)
