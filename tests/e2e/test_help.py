"""Every option and argument a user can read about in `--help` says what it does: of
`allot` (every command and subcommand) and of `python -m streams.worker`, which the
README offers as the scheduler's other entry point."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
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


def test_every_local_launcher_option_has_a_description() -> None:
    """README offers examples/launcher/local_launcher.py to start from; its --help
    listed five bare flags."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("local_launcher", LAUNCHER)
    assert spec is not None and spec.loader is not None
    launcher = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(launcher)
    silent = [
        "/".join(action.option_strings)
        for action in launcher._parser()._actions
        if not (action.help or "").strip()
    ]
    assert not silent, silent


def test_every_allocation_option_takes_slurms_account_flag() -> None:
    """README maps Slurm's `-A ACCOUNT` to allot's `-A PATH`; `allot history -A` and
    `allot rollup -A` said 'No such option: -A' while `shares -A` worked."""
    from allot.cli import app

    without = [
        where
        for where, command in _commands(typer.main.get_command(app), [])
        for param in getattr(command, "params", [])
        if "--allocation" in getattr(param, "opts", []) and "-A" not in param.opts
    ]
    assert not without, without


ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = ROOT / "examples" / "launcher" / "local_launcher.py"
# where a user reads `allot ...` command lines: each must name a command and its options
DOCUMENTS = [
    "README.md",
    "DESIGN-NOTES.md",
    "deploy/kafka/README.md",
    "deploy/systemd/allot-serve.service",
]


def _allot_lines(text: str, markdown: bool = True) -> list[str]:
    """The `allot ...` commands of a text (up to a comment, a pipe, `&` or `;`): in
    markdown its code blocks' lines, elsewhere (a unit file) `.../bin/allot ...`; and
    inline code spans."""
    found = []
    blocks = re.findall(r"```[a-z]*\n(.*?)```", text, re.S) if markdown else [text]
    command = r"(?:^|[\s(])(allot\s.*)" if markdown else r"/bin/(allot\s.*)"
    for block in blocks:
        for line in block.splitlines():
            line = re.split(r"\s#\s|\s{2,}#", line)[0]
            match = re.search(command, line)
            if match:
                found.append(match.group(1))
    found += re.findall(r"`(allot [^`]+)`", text)
    return [re.split(r"\s(?:&&|&|\||;)|\)$", line)[0].strip() for line in found]


def _unknown_commands_and_options(text: str, root: Any, markdown: bool = True) -> list[str]:
    wrong = []
    for line in _allot_lines(text, markdown):
        try:
            words = shlex.split(line)[1:]
        except ValueError:  # an unmatched quote across a line break
            words = line.split()[1:]
        command, path = root, ["allot"]
        while getattr(command, "commands", None) and words and not words[0].startswith("-"):
            if words[0] not in command.commands:
                if re.fullmatch(r"[a-z][a-z-]*", words[0]) and words[0] not in PROSE:
                    wrong.append(f"`{line}`: no command {' '.join(path)} {words[0]}")
                break
            command, path = command.commands[words[0]], [*path, words.pop(0)]
        else:
            known = {"--help"} | {
                opt
                for param in command.params
                for opt in (*getattr(param, "opts", []), *getattr(param, "secondary_opts", []))
            }
            for word in words:
                flag = word.split("=")[0]
                if re.fullmatch(r"--?[A-Za-z][\w-]*", flag) and flag not in known:
                    wrong.append(f"`{line}`: {' '.join(path)} has no option {flag}")
    return wrong


PROSE = {"is", "and", "the", "command", "commands"}  # "`allot` is ..." in a sentence


@pytest.mark.parametrize("document", DOCUMENTS)
def test_documented_allot_commands_and_options_exist(document: str) -> None:
    """Every `allot ...` line a document shows names a real command (and subcommand)
    and only options that command takes, so a renamed or dropped flag cannot linger in
    the docs a newcomer copies from."""
    from allot.cli import app

    text, markdown = (ROOT / document).read_text(), document.endswith(".md")
    assert _allot_lines(text, markdown), "no allot command found: is this check blind?"
    assert not _unknown_commands_and_options(text, typer.main.get_command(app), markdown)


def test_allot_commands_named_in_help_texts_exist() -> None:
    """--help points at other commands (`allot queue --start`, `allot host health H
    --unhealthy`, ...): each names a real command and its real options."""
    from allot.cli import app

    root = typer.main.get_command(app)
    texts = [
        text
        for _, command in _commands(root, [])
        for text in [command.help, *(getattr(p, "help", None) for p in command.params)]
        if text
    ]
    assert not _unknown_commands_and_options("\n".join(texts), root)


def test_the_check_of_documents_finds_a_wrong_command_or_option() -> None:
    from allot.cli import app

    text = "see `allot queue --bogus` or `allot frob`\n```bash\nallot shares -Z  # c\n```\n"
    wrong = _unknown_commands_and_options(text, typer.main.get_command(app))
    assert len(wrong) == 3, wrong


def test_every_allot_variable_a_document_names_is_read_somewhere() -> None:
    """An $ALLOT_* variable the docs tell an operator to set is read by some code (the
    commands, the worker, the faust app, the broker scripts, the launcher or the tests)."""
    named = set()
    others = ["deploy/systemd/allot.env", "deploy/docker-compose.yml", LAUNCHER]
    for document in [*DOCUMENTS, *others]:
        named |= set(re.findall(r"\bALLOT_[A-Z_]*[A-Z]\b", (ROOT / document).read_text()))
    sources = [
        path
        for folder in ("allot", "streams", "projections", "domain", "tests", "examples")
        for path in (ROOT / folder).rglob("*.py")
    ] + [ROOT / "deploy" / "kafka" / name for name in ("start", "stop", "secure.py")]
    code = "\n".join(path.read_text() for path in sources)
    unread = sorted(name for name in named if not re.search(rf"[\"'$]{{?{name}\b", code))
    assert not unread, unread


def _made_at_run_time(path: str) -> bool:
    """A folder the tools create (the broker's jar cache, say) is git-ignored: a fresh
    clone lacks it until the first run, and a reader is told how it is made."""
    ignored = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT, check=False)
    return ignored.returncode == 0


@pytest.mark.parametrize("document", [d for d in DOCUMENTS if d.endswith(".md")])
def test_every_repository_path_a_document_names_exists(document: str) -> None:
    """`examples/launcher/local_launcher.py`, `deploy/prometheus/alerts.yml`, ...: a
    file a reader is sent to is there (folders the tools create at run time aside)."""
    tops = "|".join(p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith("."))
    named = re.findall(
        rf"(?<![\w/.-])((?:{tops}|\.ci)/[\w./-]*[\w/])", (ROOT / document).read_text()
    )
    missing = sorted({path for path in named if "/." not in path and not (ROOT / path).exists()})
    assert not [path for path in missing if not _made_at_run_time(path)], missing
    assert document != "README.md" or len(named) > 10, named  # the check sees them


def test_trace_import_help_names_the_columns_each_format_needs() -> None:
    """An analyst writing a small philly or alibaba-openb file to try a policy had only
    the format names in --help, and learned the columns one error at a time."""
    from projections.scenario import DEFAULT_MIN_RUNTIME
    from projections.traces import alibaba_openb, allot_csv, philly
    from tests.e2e.cli import allot

    shown = allot("trace", "import", "--help", env={"COLUMNS": "200"})
    assert shown.returncode == 0, shown.stderr
    text = " ".join(shown.stdout.split())
    for fmt, module in (
        ("allot-csv", allot_csv),
        ("philly", philly),
        ("alibaba-openb", alibaba_openb),
    ):
        paragraph = text.split(f" {fmt}: ", 1)[1]
        for other in ("allot-csv", "philly", "alibaba-openb", "allot-jsonl"):
            paragraph = paragraph.split(f" {other}: ", 1)[0]
        for column in module.REQUIRED:
            assert column in paragraph, (fmt, column)
    assert f"default {DEFAULT_MIN_RUNTIME / 60:g}m" in text


REQUEST_COMMANDS = ["cancel", "hold", "release", "requeue"]
REQUEST_COMMANDS += ["host register", "host health", "host remove"]


def test_every_request_command_says_it_waits_for_a_refusal_without_wait() -> None:
    """Without --wait, cancel, hold, release, requeue and host register/health/remove
    wait up to 10 s for a refusal where one can come at once (README, "Requests and their
    verdicts"); only `allot submit --help` said so."""
    from allot.cli import app
    from allot.commands.requests import ADMISSION_WAIT_HELP

    commands = dict(_commands(typer.main.get_command(app), []))
    silent = [
        where
        for where in REQUEST_COMMANDS
        if not any(
            ADMISSION_WAIT_HELP in (getattr(param, "help", "") or "")
            for param in commands[where].params
        )
    ]
    assert not silent, silent
    assert "Without --wait it still waits up to 10 s" in ADMISSION_WAIT_HELP
