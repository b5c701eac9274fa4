"""Per-user limits end to end on an embedded `--data` folder: `allot budget set
--max-gpus-per-user/--max-pending-per-user`, work over the GPU limit waiting with reason
QOSMaxGRESPerUser (queue, why, --json) while another user's starts, a submission over
the pending limit refused, the limits in `allot shares` and `allot budget log`, and a
simulated scenario whose allocation carries them."""

from __future__ import annotations

from pathlib import Path

import orjson

from tests.e2e.requests_rig import ADMIN, allot, journal


def _ok(*args: str) -> str:
    result = allot(*args)
    assert result.returncode == 0, (result.stdout, result.stderr)
    return result.stdout


def _submit(data: Path, user: str, gpus: int) -> str:
    common = ("-A", "lab/a", "--min-runtime", "1h", "--as", user, "--parsable")
    return _ok("submit", *common, "-G", str(gpus), "--data", str(data)).strip()


def test_user_limits_on_a_data_folder(tmp_path: Path) -> None:
    data = tmp_path / "data"
    d = ("--data", str(data))
    for args in (
        ("host", "register", "h0", "8"),
        ("host", "register", "h1", "8"),
        ("budget", "set", "lab", "1", "--max-gpus-per-user", "4"),
        ("budget", "set", "lab/a", "1", "--member", "alice,bob"),
        ("budget", "set", "lab/a", "--max-pending-per-user", "2"),
    ):
        _ok(*args, "--as", ADMIN, *d)
    refused = allot("budget", "set", "lab", "--max-gpus-per-user", "0", *d)
    assert refused.returncode == 2 and "--max-gpus-per-user '0'" in refused.stderr
    a1 = _submit(data, "alice", 4)
    a2 = _submit(data, "alice", 2)  # over alice's 4 GPUs under lab: waits
    b1 = _submit(data, "bob", 2)  # bob's, after hers: starts
    a3 = _submit(data, "alice", 1)
    a4 = _submit(data, "alice", 1)  # her third pending under lab/a: refused
    _ok("serve", *d, "--admin", ADMIN, "--once")

    records = journal(data)
    placed = {r["workload"] for r in records if r["type"] == "workload.placed"}
    assert a1 in placed and b1 in placed and a2 not in placed and a3 not in placed
    (rejected,) = [r for r in records if r["type"] == "workload.rejected"]
    assert rejected["workload"] == a4
    assert "'alice' has 2 pending workloads under 'lab/a'" in rejected["error"]
    assert "max_pending_per_user 2" in rejected["error"]

    queue = orjson.loads(_ok("queue", "--json", *d))
    rows = {r["id"]: r for r in (queue["workloads"] if isinstance(queue, dict) else queue)}
    assert rows[a2]["reason"] == "QOSMaxGRESPerUser"
    assert "alice's allocated work under lab holds 4 GPUs" in rows[a2]["detail"]
    assert "4 GPUs lab allows each user at once" in rows[a2]["detail"]
    shown = _ok("queue", "-u", "alice", *d)
    assert "QOSMaxGRESPerUser" in shown
    assert "QOSMaxGRESPerUser" in _ok("queue", "--start", *d)  # the forecast runs the domain
    why = _ok("why", a2, *d)
    assert "QOSMaxGRESPerUser" in why and "max_gpus_per_user" in why

    shares = orjson.loads(_ok("shares", "--json", *d))
    limits = {
        r["path"]: (r["max_gpus_per_user"], r["max_pending_per_user"])
        for r in shares["allocations"]
    }
    assert limits == {"lab": (4, None), "lab/a": (None, 2)}
    table = _ok("shares", *d)
    assert "PER-USER" in table and "gpus 4" in table and "pending 2" in table

    log = orjson.loads(_ok("budget", "log", "--json", *d))
    log_rows = log["changes"] if isinstance(log, dict) else log
    assert [(r["allocation"], r["max_gpus_per_user"], r["max_pending_per_user"]) for r in log_rows][
        -3:
    ] == [("lab", 4, None), ("lab/a", None, None), ("lab/a", None, 2)]

    # the limit removed: alice's waiting work starts at once
    _ok("budget", "set", "lab", "--max-gpus-per-user", "none", "--as", ADMIN, *d)
    _ok("serve", *d, "--admin", ADMIN, "--once")
    placed = {r["workload"] for r in journal(data) if r["type"] == "workload.placed"}
    assert {a2, a3} <= placed
    assert "gpus none" in _ok("budget", "log", *d)
    assert "PER-USER" in _ok("shares", *d)  # lab/a's pending limit is still set


def test_a_scenario_allocation_takes_the_limits(tmp_path: Path) -> None:
    scenario = tmp_path / "limits.yaml"
    scenario.write_text(
        """
cluster: {name: limits, hosts: 2, gpus_per_host: 8}
horizon: 4h
allocations:
  - {path: lab, weight: 1, max_gpus_per_user: 4}
  - {path: lab/a, weight: 1, members: [alice, bob]}
workloads:
  - generate: {seed: 1, user: alice, allocation: lab/a, arrival: burst, count: 4, gpus: 2,
               min_runtime: 30m, runtime: 1h}
  - generate: {seed: 2, user: bob, allocation: lab/a, arrival: burst, count: 2, gpus: 2,
               min_runtime: 30m, runtime: 1h, start: 1m}
"""
    )
    out = tmp_path / "out"
    _ok("simulate", str(scenario), "-p", "fairshare", "--no-report", "-q", "--out", str(out))
    recorded = out / "fairshare" / "journal.jsonl"
    assert _most_gpus_per_user(recorded) == {"alice": 4, "bob": 4}  # though 16 were there
    _ok("replay", str(recorded), "--verify", "-q")
    # a what-if of the weights keeps the recorded limits (--budget sets weights only)
    what_if = tmp_path / "what-if"
    _ok("replay", str(recorded), "--budget", "lab=2", "--budget", "lab/a=3@1h", "--out",
        str(what_if), "--no-report", "-q")  # fmt: skip
    assert _most_gpus_per_user(what_if / "fairshare" / "journal.jsonl") == {"alice": 4, "bob": 4}


def _most_gpus_per_user(journal_file: Path) -> dict[str, int]:
    """The most GPUs each user's work held at once in a journal whose `lab` has a GPU
    limit of 4 per user."""
    records = [orjson.loads(line) for line in journal_file.open("rb")]
    (setup,) = [r for r in records if r["type"] == "budget.set" and r["allocation"] == "lab"]
    assert setup["max_gpus_per_user"] == 4
    held: dict[str, int] = {}
    users = {r["workload"]: r["actor"] for r in records if r["type"] == "workload.submitted"}
    most = {"alice": 0, "bob": 0}
    for r in records:
        if r["type"] == "workload.placed":
            held[r["workload"]] = r["gpus"]
        elif r["type"] in ("workload.finished", "workload.preempted"):
            held.pop(r["workload"], None)
        for user in most:
            most[user] = max(most[user], sum(g for w, g in held.items() if users[w] == user))
    return most
