"""A flapping host under config health_holddown, as an operator sees it on a folder
served by `allot serve --data`: `host list`, `host list -R` and `why` say it is held
down and until when; `host health --healthy --force` returns it."""

from __future__ import annotations

import signal
from pathlib import Path

import orjson

from tests.e2e.cli import allot
from tests.e2e.requests_rig import ADMIN, serve
from tests.e2e.requests_rig import allot as rig_allot

SERVE = ("serve", "--once", "--tick", "0", "--set", "health_holddown=1h")


def _ok(data: Path, *args: str) -> str:
    result = allot(*args, "--data", str(data), env={"USER": "ops"})
    assert result.returncode == 0, result.stderr
    return result.stdout


def _step(data: Path, *args: str) -> None:
    _ok(data, *args)
    _ok(data, *SERVE)


def test_host_list_and_why_say_a_flapping_host_is_held_down(tmp_path: Path) -> None:
    data = tmp_path / "lab"
    _ok(data, "host", "register", "node1", "8")
    _ok(data, "budget", "set", "lab", "1")
    _step(data, "budget", "set", "lab/a", "1")
    for healthy in ("--unhealthy", "--healthy", "--unhealthy", "--healthy"):
        _step(data, "host", "health", "node1", healthy, "--reason", "probe")
    wid = _ok(data, "submit", "-A", "lab/a", "-G", "1", "--min-runtime", "0", "--parsable")
    _ok(data, *SERVE)

    (row,) = orjson.loads(_ok(data, "host", "list", "--json"))["hosts"]
    assert (row["state"], row["free"], row["workloads"]) == ("held", 0, [])
    until = row["held_until"]
    assert until and "held down until " + until in row["reason"]
    table = _ok(data, "host", "list").splitlines()
    assert table[2].split()[:2] == ["node1", "held"] and "held down until" in table[2]
    (reason,) = orjson.loads(_ok(data, "host", "list", "-R", "--json"))["hosts"]
    assert (reason["state"], reason["held_until"]) == ("held", until)
    assert f"node1 held down for flapping until {until}" in _ok(data, "why", wid.strip())

    refused = allot("host", "health", "node1", "--unhealthy", "--force", "--data", str(data))
    assert refused.returncode != 0 and "--force returns a held-down host" in refused.stderr

    _step(data, "host", "health", "node1", "--healthy", "--force")
    (row,) = orjson.loads(_ok(data, "host", "list", "--json"))["hosts"]
    assert (row["state"], row["held_until"], row["workloads"]) == ("mixed", None, [wid.strip()])


def test_an_accepted_healthy_report_says_the_host_stays_held_down(tmp_path: Path) -> None:
    """`--healthy --wait` said "marked healthy" of a host the scheduler kept held down:
    at 3 a.m. the operator walked away from a host taking no work."""
    data = tmp_path / "lab"
    server = serve(data, "--tick", "1h", "--set", "health_holddown=1h")
    try:
        _ok(data, "host", "register", "node1", "8")
        said = []
        for healthy in ("--unhealthy", "--healthy", "--unhealthy", "--healthy"):
            result = rig_allot(
                "host", "health", "node1", healthy, "--data", str(data), "--as", ADMIN,
                "--wait", "30",
            )  # fmt: skip
            assert result.returncode == 0, result.stderr
            said.append(result.stdout.splitlines()[-1])
        (row,) = orjson.loads(_ok(data, "host", "list", "--json"))["hosts"]
        assert row["state"] == "held"
        assert said[:3] == ["Host node1 marked unhealthy", "Host node1 marked healthy",
                            "Host node1 marked unhealthy"]  # fmt: skip
        assert said[3] == (
            f"Host node1 reported healthy; it stays held down until {row['held_until']} UTC: "
            "it failed again within health_holddown 1h of its last return (flapping). "
            "`allot host health node1 --healthy --force` returns it now"
        )
        forced = rig_allot(
            "host", "health", "node1", "--healthy", "--force", "--data", str(data),
            "--as", ADMIN, "--wait", "30",
        )  # fmt: skip
        assert forced.stdout.splitlines()[-1] == "Host node1 marked healthy", forced.stderr
    finally:
        server.send_signal(signal.SIGINT)
        _, err = server.communicate(timeout=30)
        assert server.returncode == 0, err
