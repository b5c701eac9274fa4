"""A flapping host under config health_holddown, as an operator sees it on a folder
served by `allot serve --data`: `host list`, `host list -R` and `why` say it is held
down and until when; `host health --healthy --force` returns it."""

from __future__ import annotations

from pathlib import Path

import orjson

from tests.e2e.cli import allot

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
