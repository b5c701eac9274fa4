"""TAB completion as the shell asks for it: `allot` run with $_ALLOT_COMPLETE and the
words typed (bash's COMP_WORDS/COMP_CWORD, zsh's and fish's _TYPER_COMPLETE_ARGS),
against a running `allot serve --data DIR`; and once through bash itself, with the
script `allot completion bash` prints."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from allot.completion import POLICIES
from tests.e2e import requests_rig
from tests.e2e.requests_rig import ADMIN, allot, one_4_gpu_host_for_lab_x, serve, wait_for


def env(**extra: str) -> dict[str, str]:
    """The environment of user `tester` (or USER=...) without $ALLOT_*, plus `extra`."""
    return {**requests_rig.env(), **extra}


def complete(line: str, **environ: str) -> list[str]:
    """What bash's TAB offers at the end of `line` (its last word is being typed)."""
    words = line.split()
    cword = len(words) if line.endswith(" ") else len(words) - 1
    extra = {"COMP_WORDS": line, "COMP_CWORD": str(cword), "_ALLOT_COMPLETE": "complete_bash"}
    result = allot(environ=env(**extra, **environ))
    assert result.returncode == 0 and not result.stderr, result.stderr
    return result.stdout.split()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A served folder with hosts h1 and h2, allocations lab, lab/x, lab/y, and work
    of tester (running, pending, held, cancelled) and of bob (held); ids by name."""
    data = tmp_path_factory.mktemp("completion") / "data"
    data.mkdir()
    server = serve(data)
    try:
        one_4_gpu_host_for_lab_x(data)
        for args in [
            ("host", "register", "h2", "4"),
            ("budget", "set", "lab/y", "1"),
            ("budget", "set", "lab/x", "--member", "tester", "--member", "bob"),
        ]:
            assert allot(*args, "--as", ADMIN, "--data", str(data)).returncode == 0
        wait_for(data, lambda r: r.get("allocation") == "lab/y")
        ids = {}
        submitters = {
            "runs": "tester", "waits": "tester", "held": "tester", "gone": "tester", "bobs": "bob"
        }  # fmt: skip
        for name, user in submitters.items():
            sent = allot(
                "submit", "-A", "lab/x", "-G", "8", "--min-runtime", "1h", "--data", str(data),
                environ=env(USER=user),
            )  # fmt: skip
            assert sent.returncode == 0, sent.stderr
            ids[name] = sent.stdout.split()[-1]
        wait_for(data, lambda r: r.get("type") == "workload.placed")
        for verb, name in [("cancel", "gone"), ("hold", "held"), ("hold", "bobs")]:
            user = submitters[name]
            assert (
                allot(verb, ids[name], "--data", str(data), environ=env(USER=user)).returncode == 0
            )
        for kind in ("workload.cancelled", "workload.held"):
            wait_for(data, lambda r, kind=kind: r.get("type") == kind)
        yield {"data": str(data), **ids}
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_commands_and_flags_complete_without_a_journal() -> None:
    assert complete("allot hol") == ["hold"]
    assert "--min-runtime" in complete("allot submit --mi")
    assert complete("allot budget re") == ["remove"]
    assert complete("allot completion ") == ["bash", "fish", "zsh"]


def test_allocations_complete_after_dash_a_from_data_or_allot_data(served: dict) -> None:
    data = served["data"]
    assert complete(f"allot submit --data {data} -A ") == ["lab", "lab/x", "lab/y"]
    assert complete(f"allot submit --data {data} --allocation lab/") == ["lab/x", "lab/y"]
    assert complete("allot shares -A lab/", ALLOT_DATA=data) == ["lab/x", "lab/y"]
    assert complete("allot budget set lab/", ALLOT_DATA=data) == ["lab/x", "lab/y"]


def test_workload_ids_are_the_users_own_in_the_states_the_command_takes(served: dict) -> None:
    """cancel: not ended; hold: pending; release: held; requeue: running; why: any.
    The hold of running work the scheduler rejected leaves it running."""
    data = served["data"]
    runs, waits, held, gone = (served[name] for name in ("runs", "waits", "held", "gone"))
    offered = {
        verb: complete(f"allot {verb} --data {data} ")
        for verb in ("cancel", "hold", "release", "requeue", "why")
    }
    assert offered == {
        "cancel": sorted([runs, waits, held]),
        "hold": [waits],
        "release": [held],
        "requeue": [runs],
        "why": sorted([runs, waits, held, gone]),
    }
    assert complete(f"allot cancel --data {data} {runs} ") == sorted([waits, held])
    assert complete(f"allot release --data {data} ", USER="bob") == [served["bobs"]]


def test_an_option_value_after_equals_completes(served: dict) -> None:
    """Bash splits words at `=` ($COMP_WORDBREAKS): `--allocation=lab/` comes as
    `--allocation`, `=`, `lab/`, and `--allocation=` with `=` as the word typed."""
    data = served["data"]
    assert complete(f"allot submit --data = {data} --allocation = lab/") == ["lab/x", "lab/y"]
    assert complete(f"allot submit --data {data} --allocation =") == ["lab", "lab/x", "lab/y"]
    assert complete(f"allot queue --data {data} --cluster =") == ["default"]


def test_hosts_clusters_and_policies(served: dict) -> None:
    data = served["data"]
    assert complete(f"allot host health --data {data} ") == ["h1", "h2"]
    assert complete(f"allot host remove --data {data} h2") == ["h2"]
    assert complete(f"allot queue --data {data} --cluster ") == ["default"]
    assert complete("allot simulate lab.yaml -p l") == [
        "largest-first",
        "legacy-priority",
        "longest-first",
    ]


def test_kafka_gets_no_journal_words_and_does_not_wait(served: dict) -> None:
    """From Kafka nothing is read (too slow for a TAB): no names, at once, even with
    $ALLOT_DATA set too and the broker unreachable."""
    unreachable = {"ALLOT_KAFKA": "127.0.0.1:9", "ALLOT_DATA": served["data"]}
    assert complete("allot submit -A ", **unreachable) == []
    assert complete("allot submit -G", **unreachable) == ["-G"]


def test_zsh_and_fish_get_the_same_words(served: dict) -> None:
    data = served["data"]
    typed = {"_TYPER_COMPLETE_ARGS": f"allot host health --data {data} h"}
    zsh = allot(environ=env(_ALLOT_COMPLETE="complete_zsh", **typed))
    assert '"h1"' in zsh.stdout and '"h2"' in zsh.stdout, zsh.stderr
    fish = allot(
        environ=env(
            _ALLOT_COMPLETE="complete_fish", _TYPER_COMPLETE_FISH_ACTION="get-args", **typed
        )
    )
    assert fish.stdout.split() == ["h1", "h2"], fish.stderr


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_bash_completes_with_the_printed_script(served: dict, tmp_path: Path) -> None:
    """The script `allot completion bash` prints, sourced into bash, fills COMPREPLY."""
    script = allot("completion", "bash")
    assert script.returncode == 0, script.stderr
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "allot").write_text(f'#!/bin/sh\nexec {sys.executable} -m allot.cli "$@"\n')
    (bin_dir / "allot").chmod(0o755)
    shell = (
        'eval "$(cat completion.bash)"\n'
        f"COMP_WORDS=(allot submit --data {served['data']} -A lab/)\n"
        "COMP_CWORD=5\n"
        "_allot_completion allot\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
        # `--allocation=lab/`, as bash splits it at the `=`
        f"COMP_WORDS=(allot submit --data {served['data']} --allocation = lab/)\n"
        "COMP_CWORD=6\n"
        "_allot_completion allot\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    (tmp_path / "completion.bash").write_text(script.stdout)
    ran = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", shell],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env=env(PATH=f"{bin_dir}:{env()['PATH']}"),
    )
    assert ran.stdout.split() == ["lab/x", "lab/y"] * 2, ran.stderr


def test_unknown_shell_is_one_line() -> None:
    result = allot("completion", "tcsh")
    assert result.returncode == 2 and "give bash, zsh or fish" in result.stderr


def test_the_offered_policies_are_the_built_in_ones() -> None:
    from domain.policies.ordering import BUILTIN

    assert set(POLICIES) == {policy.name for policy in BUILTIN}
