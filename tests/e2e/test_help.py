"""Every option and argument a user can read about in `--help` says what it does: of
`allot` (every command and subcommand) and of `python -m streams.worker`, which the
README offers as the scheduler's other entry point."""

from __future__ import annotations

import typer


def _commands(command, path):
    yield " ".join(path) or "allot", command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, [*path, name])


def test_every_allot_option_and_argument_has_a_description() -> None:
    from allot.cli import app

    silent = [
        f"{where}: {'/'.join(getattr(param, 'opts', [param.name]))}"
        for where, command in _commands(typer.main.get_command(app), [])
        for param in getattr(command, "params", [])
        if not getattr(param, "hidden", False) and not (getattr(param, "help", "") or "").strip()
    ]
    assert not silent, silent


def test_every_worker_option_has_a_description() -> None:
    from streams.worker import _parser

    silent = [
        "/".join(action.option_strings)
        for action in _parser()._actions
        if not (action.help or "").strip()
    ]
    assert not silent, silent
