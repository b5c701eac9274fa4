"""Shell completion for `allot` (bash, zsh, fish).

`allot completion SHELL` prints the script; on each TAB the shell runs `allot` again
with $_ALLOT_COMPLETE set and the words typed so far, and `main` hands over to
`complete`. That runs on every TAB, so it builds only the command being typed and
imports neither `domain` (pydantic) nor a Kafka client: the words it offers from the
journal (allocations, hosts, clusters, the user's workload ids) come from a byte
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
# which of the user's workloads each command's ID arguments offer, by state ("ended":
# cancelled, rejected, or finished or preempted without being requeued)
WORKLOAD_STATES = {
    "cancel": {"pending", "held", "running"},
    "hold": {"pending"},
    "release": {"held"},
    "requeue": {"running"},
    "why": {"pending", "held", "running", "ended"},
}
_WORKLOAD_RECORDS = (
    "workload.submitted",
    "workload.placed",
    "workload.held",
    "workload.released",
    "workload.cancelled",
    "workload.finished",
    "workload.preempted",
    "workload.rejected",
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
        words, cword = bash_words()
        return words[1:cword]
    line = os.environ.get("_TYPER_COMPLETE_ARGS", "")
    words = _split(line)
    if line and not line[-1].isspace():
        words = words[:-1]  # the word being completed
    return words[1:]


def bash_words() -> tuple[list[str], int]:
    """Bash's COMP_WORDS and COMP_CWORD with each `--option = value` glued back into
    `--option=value`: bash splits words at the characters of $COMP_WORDBREAKS, `=`
    among them, so `--allocation=la<TAB>` comes as `--allocation`, `=`, `la`, which
    click reads as the value `=` and a stray `la`. (Bash replaces only the text after
    the `=` with what is offered, so the offered values stay bare.)"""
    words = _split(os.environ["COMP_WORDS"])
    try:
        cword = int(os.environ.get("COMP_CWORD", len(words)))
    except ValueError:
        cword = len(words)
    glued: list[str] = []
    new_cword = cword
    for at, word in enumerate(words):
        after_equals = at >= 2 and words[at - 1] == "=" and _is_long_option(words[at - 2])
        if (word == "=" and glued and _is_long_option(glued[-1])) or after_equals:
            glued[-1] += word
            if at <= cword:
                new_cword -= 1
        else:
            glued.append(word)
    return glued, new_cword


def _is_long_option(word: str) -> bool:
    return word.startswith("--") and "=" not in word


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
    if "COMP_WORDS" in os.environ:  # typer's bash class reads them again: glue `=` there too
        words, cword = bash_words()
        if str(cword) != os.environ.get("COMP_CWORD"):
            os.environ["COMP_WORDS"] = shlex.join(words)
            os.environ["COMP_CWORD"] = str(cword)
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
    if len(path) == 1 and path[0] in WORKLOAD_STATES and param.param_type_name == "argument":
        states = WORKLOAD_STATES[path[0]]
        return lambda ctx: workloads_in(ctx, states)
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


def workloads_in(ctx: Any, states: set[str]) -> list[str]:
    """Ids of the user's (--as, else $USER) workloads whose state is one of `states`."""
    user = ctx.params.get("as_") or os.environ.get("USER") or getpass.getuser()
    return [
        wid
        for wid, state in workload_states(_records(ctx, _WORKLOAD_RECORDS), user).items()
        if state in states
    ]


def workload_states(records: Iterable[dict[str, Any]], user: str) -> dict[str, str]:
    """The state (pending, held, running, ended) of each workload `user` submitted, by id,
    in submission order. An input the scheduler rejected (a submission over quota, a
    hold of running work, another user's cancel) changes nothing: its state is put back."""
    states: dict[str, str] = {}
    before: dict[str, tuple[str, str | None]] = {}  # input id -> (workload, state before it)
    for record in records:
        wid, kind = record.get("workload"), record["type"]
        if kind == "workload.rejected":
            undone = before.pop(str(record.get("ref")), None)
            if undone is not None:
                _put_back(states, *undone)
            continue
        if not isinstance(wid, str) or (wid not in states and kind != "workload.submitted"):
            continue
        if kind == "workload.submitted" and record.get("actor") != user:
            continue
        if kind in _INPUTS:
            before[str(record.get("id"))] = (wid, states.get(wid))
        states[wid] = _state_after(kind, record)
    return states


def _put_back(states: dict[str, str], wid: str, state: str | None) -> None:
    if state is None:
        states.pop(wid, None)
    else:
        states[wid] = state


_INPUTS = ("workload.submitted", "workload.held", "workload.released", "workload.cancelled")


def _state_after(kind: str, record: dict[str, Any]) -> str:
    if kind in ("workload.submitted", "workload.released"):
        return "pending"
    if kind == "workload.held":
        return "held"
    if kind == "workload.placed":
        return "running"
    if kind in ("workload.finished", "workload.preempted"):
        return "pending" if record.get("requeued") is True else "ended"
    return "ended"  # cancelled
