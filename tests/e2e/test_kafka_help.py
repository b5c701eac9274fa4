"""Every command that talks to Kafka says, in its `--help`, what else decides where
and as whom: `$ALLOT_TOPIC_SUFFIX` (and the one in effect) and the login variables.
An operator with a staging suffix or a secured broker finds them there, not only in
the README."""

from __future__ import annotations

import pytest
import typer

from tests.e2e.cli import allot

# the commands of the operator review, by the words that name them
KAFKA_COMMANDS = [
    "topics create", "serve", "executor", "metrics", "dashboard", "queue", "shares", "acct",
    "why", "replay", "rollup", "audit load", "usage", "submit", "cancel", "host health",
    "host register", "budget set",
]  # fmt: skip
VARIABLES = (
    "$ALLOT_TOPIC_SUFFIX",
    "$ALLOT_KAFKA_USER",
    "$ALLOT_KAFKA_PASSWORD_FILE",
    "$ALLOT_KAFKA_SASL_MECHANISM",
    "$ALLOT_KAFKA_SECURITY_PROTOCOL",
)


@pytest.mark.parametrize("command", KAFKA_COMMANDS, ids=KAFKA_COMMANDS)
def test_a_kafka_commands_help_names_the_topic_suffix_and_the_login(command: str) -> None:
    result = allot(*command.split(), "--help", env={"COLUMNS": "200"})
    assert result.returncode == 0, result.stderr
    missing = [name for name in VARIABLES if name not in result.stdout]
    assert not missing, result.stdout


def test_every_command_with_a_kafka_option_says_it() -> None:
    """In-process: the click tree of `allot`, every `--kafka` option's help."""
    from allot.cli import app

    def walk(command, path):
        for sub_name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, [*path, sub_name])
        for param in getattr(command, "params", []):
            if "--kafka" in getattr(param, "opts", ()):
                yield " ".join(path), param.help or ""

    found = dict(walk(typer.main.get_command(app), []))
    assert set(KAFKA_COMMANDS) <= set(found), sorted(found)
    silent = [name for name, text in found.items() if not all(v in text for v in VARIABLES)]
    assert not silent, silent


@pytest.mark.parametrize(
    ("suffix", "names"),
    [
        ("", "allot.inbox, allot.journal"),
        (".staging", "allot.inbox.staging, allot.journal.staging"),
    ],
    ids=["no-suffix", "suffix"],
)
def test_topics_create_help_names_the_topics_it_creates(suffix: str, names: str) -> None:
    result = allot(
        "topics", "create", "--help", env={"COLUMNS": "200", "ALLOT_TOPIC_SUFFIX": suffix}
    )
    assert result.returncode == 0, result.stderr
    assert f"Create {names} (kept forever" in " ".join(result.stdout.split()), result.stdout


# a command of each kind: creates topics, runs the worker, reads, sends
EACH_KIND = pytest.mark.parametrize(
    "args",
    [
        ["topics", "create"],
        ["serve"],
        ["queue"],
        ["submit", "-A", "lab/a", "-G", "1", "--min-runtime", "0"],
    ],
    ids=["topics-create", "serve", "queue", "submit"],
)

UNREACHABLE = (
    "error: cannot reach Kafka at 127.0.0.1:1: no broker answered; "
    "check --kafka / $ALLOT_KAFKA and that the broker runs"
)


@EACH_KIND
def test_an_unreachable_broker_reads_the_same_in_every_command(args: list[str]) -> None:
    """One line, worded once: a reader (queue) printed aiokafka's own text with its
    address tuples, a sender said something else again."""
    result = allot(*args, "--kafka", "127.0.0.1:1")
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr.strip() == UNREACHABLE


@pytest.mark.kafka
@EACH_KIND
def test_a_login_sent_to_a_broker_without_logins_says_so(
    kafka_bootstrap: str, args: list[str]
) -> None:
    """README's Security section exports $ALLOT_KAFKA_USER; left set in a shell that then
    talks to the plaintext test broker, every command said "no broker answered" of a
    broker that runs. It names the variable to unset instead."""
    login = {"ALLOT_KAFKA_USER": "allot-submit", "ALLOT_KAFKA_PASSWORD": "secret"}
    result = allot(*args, "--kafka", kafka_bootstrap, env=login)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr.strip() == (
        f"error: Kafka at {kafka_bootstrap}: the broker does not take a login there, but "
        "$ALLOT_KAFKA_USER is set: unset $ALLOT_KAFKA_USER (and its password) for a broker "
        "without logins"
    )
