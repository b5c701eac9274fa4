"""The request commands end to end: `allot submit/cancel/budget/host` against a running
`allot serve --data DIR` (real processes, real files), and `allot submit --kafka`
against a real broker."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest

from allot.commands.requests import RequestError, expand_ids, likely_typo_of, parse_array
from tests.e2e.requests_rig import (
    ADMIN,
    ULID,
    allot,
    env,
    journal,
    one_4_gpu_host_for_lab_x,
    one_line_error,
    records_of,
    serve,
    unserved_note,
    wait_for,
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A running `allot serve --data DIR --admin ops` with two hosts and a budget tree:
    lab (managed by pm) -> lab/olmo (members alice, bob), lab/vision (member carol)."""
    data = tmp_path_factory.mktemp("cluster") / "data"
    server = serve(data, "--tick", "1h")
    try:
        setup = [
            ("host", "register", "h1", "8", "--as", ADMIN),
            ("host", "register", "h2", "8", "--as", ADMIN),
            ("budget", "set", "lab", "1", "--manager", "pm", "--as", ADMIN),
            (
                "budget",
                "set",
                "lab/olmo",
                "3",
                "--member",
                "alice",
                "--member",
                "bob",
                "--as",
                "pm",
            ),
            ("budget", "set", "lab/vision", "1", "--member", "carol", "--as", "pm"),
        ]
        for args in setup:
            result = allot(*args, "--data", str(data))
            assert result.returncode == 0, result.stderr
            assert " sent (request " in result.stdout
        wait_for(data, lambda r: r.get("allocation") == "lab/vision")
        yield data
    finally:
        server.send_signal(signal.SIGINT)
        out, err = server.communicate(timeout=30)
        assert server.returncode == 0, err
        assert "allot serve: cluster default" in out and "stopped at inbox offset" in out


def test_setup_is_accepted_with_each_actor(cluster: Path) -> None:
    records = journal(cluster)
    config = records[0]
    assert config["type"] == "config.set" and config["config"]["admins"] == [ADMIN]
    accepted = [(r["type"], r["actor"]) for r in records if "rejected" not in r["type"]]
    assert ("host.registered", ADMIN) in accepted
    assert ("budget.set", "pm") in accepted
    olmo = next(r for r in records if r.get("allocation") == "lab/olmo")
    assert olmo["members"] == ["alice", "bob"] and olmo["weight"] == 3.0


def test_submit_waits_until_placed(cluster: Path) -> None:
    result = allot(
        "submit",
        "--data",
        str(cluster),
        "--allocation",
        "lab/olmo",
        "--gpus",
        "2",
        "--min-runtime",
        "15m",
        "--resumable",
        "--priority",
        "2",
        "--tag",
        "debug",
        "--tag",
        "py",
        "--name",
        "notebook",
        "--runtime",
        "2h",
        "--expected-runtime",
        "90m",
        "--as",
        "alice",
        "--wait",
        "20",
    )
    assert result.returncode == 0, result.stderr
    first, second = result.stdout.splitlines()
    workload = first.removeprefix("Submitted workload ")
    assert ULID.match(workload), first
    assert second.startswith(f"Workload {workload} placed on h")
    assert "charged, protected until" in second

    records = journal(cluster)
    submitted = next(
        r for r in records if r["type"] == "workload.submitted" and r["workload"] == workload
    )
    assert submitted["actor"] == "alice"
    assert submitted["min_runtime"] == 900.0 and submitted["resumable"] is True
    assert submitted["priority"] == 2 and submitted["tags"] == ["debug", "py"]
    assert submitted["name"] == "notebook"
    assert submitted["runtime"] == 7200.0 and submitted["expected_runtime"] == 5400.0
    assert submitted["id"] != workload  # the envelope id is per request
    placed = next(
        r for r in records if r["type"] == "workload.placed" and r["workload"] == workload
    )
    assert placed["cause"] == submitted["id"] and placed["charged"] is True

    # cancel it: another member may not (and --wait says so), the submitter may
    result = allot("cancel", workload, "--data", str(cluster), "--as", "bob", "--wait", "20")
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"The cancel of workload {workload} was rejected: 'bob' may not cancel" in result.stdout
    result = allot("cancel", workload, "--data", str(cluster), "--as", "alice", "--wait", "20")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == f"Workload {workload} cancelled"
    wait_for(cluster, lambda r: r["type"] == "workload.cancelled" and r["workload"] == workload)


def test_parsable_prints_only_the_id(cluster: Path) -> None:
    common = ["--data", str(cluster), "--allocation", "lab/vision", "--gpus", "1"]
    result = allot("submit", *common, "--min-runtime", "0", "--parsable", "--as", "carol")
    assert result.returncode == 0, result.stderr
    assert ULID.match(result.stdout.strip()) and result.stdout.count("\n") == 1
    first = result.stdout.strip()

    result = allot(
        "submit", *common, "--min-runtime", "0", "--parsable", "--as", "carol", "--wait", "20"
    )
    assert result.returncode == 0, result.stderr
    second = result.stdout.strip()
    assert ULID.match(second) and result.stdout.count("\n") == 1
    assert "placed on" in result.stderr  # the verdict goes to stderr with --parsable
    assert second > first  # sortable: later ids sort later
    placed = wait_for(cluster, lambda r: r["type"] == "workload.placed" and r["workload"] == second)
    assert placed["charged"] is False  # min runtime 0: unallocated


def test_an_unauthorized_budget_change_is_rejected_with_the_actor(cluster: Path) -> None:
    # --no-wait only sends: the scheduler decides later
    result = allot(
        "budget", "set", "lab/olmo", "100", "--data", str(cluster), "--as", "mallory", "--no-wait"
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Budget change for lab/olmo (weight 100) sent (request ")
    rejected = wait_for(
        cluster, lambda r: r["type"] == "budget.rejected" and r["actor"] == "mallory"
    )
    assert rejected["allocation"] == "lab/olmo"
    assert "'mallory' is not a manager of 'lab'" in rejected["error"]
    # without it (as with --wait) the verdict is printed, and a refusal exits 1: a
    # manager told only "sent" never learned that the change was refused
    for wait in ((), ("--wait", "20")):
        result = allot(
            "budget", "set", "lab/olmo", "100", "--data", str(cluster), "--as", "mallory", *wait
        )  # fmt: skip
        assert result.returncode == 1, result.stdout + result.stderr
        assert result.stdout.splitlines()[-1].startswith(
            "The budget change for lab/olmo was rejected: 'mallory' is not a manager of 'lab'"
        )
    result = allot("budget", "remove", "lab/nowhere", "--data", str(cluster), "--as", "pm")
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1] == (
        "The removal of lab/nowhere was rejected: unknown allocation 'lab/nowhere'"
    )
    line = one_line_error(
        allot("budget", "remove", "lab/x", "--data", str(cluster), "--no-wait", "--wait", "5")
    )
    assert line == "error: --wait and --no-wait: give one or the other"

    # the manager may, and may remove what has no work
    result = allot(
        "budget", "set", "lab/tmp", "1", "--data", str(cluster), "--as", "pm", "--wait", "20"
    )
    assert result.returncode == 0 and result.stdout.splitlines()[-1] == "Budget of lab/tmp set"
    result = allot(
        "budget", "remove", "lab/tmp", "--data", str(cluster), "--as", "pm", "--wait", "20"
    )
    assert result.returncode == 0 and result.stdout.splitlines()[-1] == "Allocation lab/tmp removed"
    removed = wait_for(cluster, lambda r: r["type"] == "budget.removed")
    assert removed["allocation"] == "lab/tmp" and removed["actor"] == "pm"


def test_an_accepted_limit_change_says_the_limits_now(cluster: Path) -> None:
    """`Budget of lab/capped set` alone did not say which per-user limits now hold, so a
    typo (160 for 16) or a limit set before and forgotten went unseen: the verdict now
    gives both of the allocation's limits after a change of either."""

    def budget_set(*args: str) -> str:
        result = allot("budget", "set", "lab/capped", *args, "--data", str(cluster), "--as", "pm")
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout.splitlines()[-1]

    try:
        assert budget_set("1", "--max-pending-per-user", "20") == (
            "Budget of lab/capped set; per-user limits now: gpus none, pending 20"
        )
        assert budget_set("--max-gpus-per-user", "16") == (
            "Budget of lab/capped set; per-user limits now: gpus 16, pending 20"
        )
        assert budget_set("--max-pending-per-user", "none") == (
            "Budget of lab/capped set; per-user limits now: gpus 16, pending none"
        )
        assert budget_set("2") == "Budget of lab/capped set"  # no limit changed: none said
    finally:  # the module's other tests know lab's children
        gone = allot("budget", "remove", "lab/capped", "--data", str(cluster), "--as", "pm")
    assert gone.returncode == 0, gone.stdout + gone.stderr


def test_a_zero_weight_says_what_it_means(cluster: Path) -> None:
    """Weight 0 was taken with "Budget of ... set" alone: that the allocation's work now
    runs only unallocated (free, unprotected, preemptible) was for the manager to find."""
    note = (
        "note: weight 0: lab/vision and everything under it get no share; their work runs "
        "only unallocated (not charged, not protected, on GPUs no allocated work wants, "
        "preempted by any allocated request)"
    )
    try:
        zero = allot("budget", "set", "lab/vision", "0", "--data", str(cluster), "--as", "pm")
        assert zero.returncode == 0, zero.stdout + zero.stderr
        assert zero.stdout.splitlines()[-1] == "Budget of lab/vision set"
        assert zero.stderr.splitlines() == [note]
    finally:
        one = allot("budget", "set", "lab/vision", "1", "--data", str(cluster), "--as", "pm")
    assert one.returncode == 0 and one.stderr == "", one.stderr
    refused = allot("budget", "set", "lab/vision", "0", "--data", str(cluster), "--as", "eve")
    assert refused.returncode == 1 and refused.stderr == "", refused.stderr  # nothing changed
    weight_help = allot("budget", "set", "--help").stdout
    assert "0 gives it, and everything under it, no share" in " ".join(
        line.strip(" │") for line in weight_help.splitlines()
    )


def test_work_accepted_under_a_zero_share_is_said_to_run_unallocated(tmp_path: Path) -> None:
    """`submit --min-runtime 30m` to an allocation without share (weight 0 on its path)
    said only "Submitted workload": that the work is not charged, not protected and
    preempted by anyone was for `allot why` to tell."""
    data = tmp_path / "data"
    server = serve(data)
    try:
        for args in [
            ("host", "register", "h1", "8", "--as", ADMIN),
            ("budget", "set", "lab", "1", "--as", ADMIN),
            ("budget", "set", "lab/olmo", "1", "--member", "alice", "--as", ADMIN),
            ("budget", "set", "lab/vision", "0", "--member", "alice", "--as", ADMIN),
            ("budget", "set", "idle", "0", "--as", ADMIN),
            ("budget", "set", "idle/x", "1", "--member", "alice", "--as", ADMIN),
        ]:
            result = allot(*args, "--data", str(data))
            assert result.returncode == 0, result.stdout + result.stderr

        def submit(allocation: str, *flags: str) -> subprocess.CompletedProcess[str]:
            return allot(
                "submit", "-A", allocation, "-G", "1", "--data", str(data), "--as", "alice",
                *flags,
            )  # fmt: skip

        unshared = (
            "note: lab/vision has no share (weight 0): this work runs unallocated (not "
            "charged, not protected by --min-runtime, preempted by any allocated request)"
        )
        quick = submit("lab/vision", "--min-runtime", "30m")
        assert quick.returncode == 0 and quick.stderr.splitlines() == [unshared], quick.stderr
        parsable = submit("lab/vision", "--min-runtime", "30m", "--parsable")
        assert parsable.returncode == 0 and ULID.match(parsable.stdout.strip()), parsable.stdout
        assert parsable.stderr.splitlines() == [unshared]
        waited = submit("lab/vision", "--min-runtime", "30m", "--wait", "20")
        assert waited.returncode == 0 and "(unallocated, preemptible" in waited.stdout
        assert waited.stderr.splitlines() == [unshared]
        above = submit("idle/x", "--min-runtime", "30m")
        assert above.stderr.splitlines() == [
            unshared.replace("lab/vision", "idle/x").replace("(weight 0)", "(weight 0 at idle)")
        ]
        # asked for unallocated, or with a share: nothing to point out
        free = submit("lab/vision", "--min-runtime", "0", "--wait", "20")
        shared = submit("lab/olmo", "--min-runtime", "30m", "--wait", "20")
        assert free.returncode == 0 and shared.returncode == 0, free.stderr + shared.stderr
        assert free.stderr == "" and shared.stderr == "", free.stderr + shared.stderr
        assert "(charged, protected until" in shared.stdout, shared.stdout
        refused = submit("lab/vision", "--min-runtime", "30m", "--as", "eve")
        assert refused.returncode == 1 and "not a member" in refused.stdout, refused.stdout
        assert refused.stderr == "", refused.stderr
    finally:
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=30)


def test_members_given_to_an_allocation_with_children_are_said_to_be_inactive(
    cluster: Path,
) -> None:
    """`budget set lab --add-member zed` said "Members now: zed" and nothing else, while
    members of an allocation with children may not submit (shares -l: inactive)."""

    def members_of_lab(*flags: str) -> subprocess.CompletedProcess[str]:
        return allot("budget", "set", "lab", *flags, "--data", str(cluster), "--as", ADMIN)

    added = members_of_lab("--add-member", "zed")
    try:
        assert added.returncode == 0, added.stdout + added.stderr
        assert added.stdout.splitlines()[-1] == "Members now: zed"
        (note,) = added.stderr.splitlines()
        assert note.startswith("note: lab has children (lab/olmo, "), note
        assert note.endswith(
            "): its members may submit neither to it nor below it until it is a leaf again; "
            "add them to a leaf"
        )
    finally:
        removed = members_of_lab("--remove-member", "zed")
    assert removed.returncode == 0 and removed.stderr == "", removed.stderr  # none left
    leaf = allot(
        "budget", "set", "lab/vision", "--add-member", "carol", "--data", str(cluster), "--as", "pm"
    )  # fmt: skip
    assert leaf.returncode == 0 and leaf.stderr == "", leaf.stderr


def test_member_lists_split_on_commas_and_clear_with_no_members(cluster: Path) -> None:
    def members_after(*flags: str) -> list[str]:
        result = allot(
            "budget", "set", "lab/team", "1", *flags, "--data", str(cluster), "--as", "pm",
            "--wait", "20",
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        sets = [r for r in journal(cluster) if r["type"] == "budget.set"]
        assert sets[-1]["allocation"] == "lab/team"
        return sets[-1]["members"]

    # sacctmgr's users=a,b: two people, not one named "dan,erin"
    assert members_after("--member", "dan, erin,", "--member", "fay,,dan") == ["dan", "erin", "fay"]
    assert members_after("--no-members") == []
    # no WEIGHT: only the members change, the weight stays (sacctmgr modify)
    result = allot(
        "budget", "set", "lab/team", "--member", "gus", "--data", str(cluster), "--as", "pm",
        "--wait", "20",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    last = [r for r in journal(cluster) if r["type"] == "budget.set"][-1]
    # no weight in the request: the scheduler keeps its own (a client's read may be stale)
    assert (last["allocation"], last["members"]) == ("lab/team", ["gus"])
    assert "weight" not in last
    refused = allot(
        "budget", "set", "lab/nobody", "--member", "x", "--data", str(cluster), "--as", "pm",
        "--wait", "20",
    )  # fmt: skip
    assert refused.returncode == 1
    assert "'lab/nobody' does not exist yet: give its weight" in refused.stdout
    for flags, says in [
        (("--member", ""), "names nobody; --no-members clears the list"),
        (("--member", "dan smith"), "'dan smith'"),
        (("--member", "dan", "--no-members"), "give one or the other"),
    ]:
        line = one_line_error(
            allot("budget", "set", "lab/team", "1", *flags, "--data", str(cluster), "--as", "pm")
        )
        assert says in line, line
    line = one_line_error(allot("budget", "set", "lab/team", "--data", str(cluster), "--as", "pm"))
    assert "nothing to change" in line, line


def test_members_are_added_and_removed_by_name(cluster: Path) -> None:
    """`--member erin` replaced the whole list (bob was dropped without a word);
    --add-member and --remove-member change the scheduler's list, keeping the others."""

    def budget_set(*flags: str, wait: bool = True) -> subprocess.CompletedProcess[str]:
        waiting = ("--wait", "20") if wait else ()
        return allot(
            "budget", "set", "lab/midtrain", *flags, *waiting, "--data", str(cluster), "--as", "pm"
        )

    def last_set() -> dict:
        return [r for r in journal(cluster) if r.get("allocation") == "lab/midtrain"][-1]

    assert budget_set("1", "--member", "bob,carol").returncode == 0
    added = budget_set("--add-member", "erin")
    assert added.returncode == 0, added.stderr
    assert added.stdout.splitlines()[-2:] == [
        "Budget of lab/midtrain set",
        "Members now: bob, carol, erin",
    ]
    again = budget_set("--add-member", "erin", "--remove-member", "zed,carol")
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[-3:] == [
        "erin was already a member",
        "zed was not a member: nothing to remove",
        "Members now: bob, erin",
    ]
    record = last_set()
    assert (record["add_members"], record["remove_members"]) == (["erin"], ["zed", "carol"])
    assert (record["members"], record["already_members"], record["absent_members"]) == (
        ["bob", "erin"],
        ["erin"],
        ["zed"],
    )
    assert "weight" not in record and "managers" not in record
    # two changes sent at once, neither waiting for the other: both land, in journal order
    first = budget_set("--add-member", "frank", wait=False)
    second = budget_set("--add-member", "gus", "--remove-member", "bob", wait=False)
    assert first.returncode == second.returncode == 0, (first.stderr, second.stderr)
    wait_for(cluster, lambda r: r.get("add_members") == ["gus"])
    shares = allot("shares", "-l", "--json", "-A", "lab/midtrain", "--data", str(cluster))
    assert shares.returncode == 0, shares.stderr
    rows = orjson.loads(shares.stdout)["allocations"]
    assert [(r["path"], r["members"]) for r in rows] == [("lab/midtrain", ["erin", "frank", "gus"])]
    # with a weight, and the managers' list alike
    both = budget_set("2", "--add-manager", "tl")
    assert both.returncode == 0, both.stderr
    assert both.stdout.splitlines()[-1] == "Managers now: tl"
    assert (last_set()["weight"], last_set()["managers"]) == (2.0, ["tl"])
    table = allot("shares", "-l", "--account", "lab/midtrain", "--data", str(cluster))
    assert table.returncode == 0, table.stderr
    (line,) = [x for x in table.stdout.splitlines() if "midtrain" in x]
    assert line.split()[0] == "lab/midtrain" and line.split()[-2:] == ["tl", "erin,frank,gus"]
    for flags, says in [
        (("--member", "x", "--add-member", "y"), "--member replaces the members and --add-member"),
        (("--no-members", "--remove-member", "y"), "--no-members replaces the members"),
        (("--manager", "x", "--remove-manager", "y"), "give one or the other"),
        (("--add-member", "y", "--remove-member", "y"), "y: both --add-member and --remove-member"),
        (("--add-member", "dan smith"), "--add-member 'dan smith': one user name each"),
        (("--add-member", ","), "--add-member names nobody"),
    ]:
        line = one_line_error(budget_set(*flags, wait=False))
        assert says in line, line


def test_a_new_path_close_to_a_sibling_is_refused_as_a_typo(cluster: Path) -> None:
    """`budget set lab/olmoo 5` created a sibling of lab/olmo, which took a share from
    lab/olmo and lab/vision at once; a manager's typo should not reshuffle the shares."""
    inbox = cluster / "inbox.jsonl"
    before = inbox.read_bytes()
    for typo in ("lab/olmoo", "lab/Olmo", "lab/visoin"):
        line = one_line_error(
            allot("budget", "set", typo, "5", "--data", str(cluster), "--as", "pm")
        )
        existing = "lab/vision" if "vis" in typo else "lab/olmo"
        assert f"{typo} does not exist, and {existing} does: a typo? Nothing sent" in line
        assert "--create" in line
    assert inbox.read_bytes() == before  # refused before sending
    # a name close to nothing, the next of a series, or --create, creates as before
    created = (("lab/robotics", "1"), ("lab/olmo2", "1"), ("lab/olmoo", "1", "--create"))
    for args in created:
        result = allot("budget", "set", *args, "--data", str(cluster), "--as", "pm", "--wait", "20")
        assert result.returncode == 0, result.stdout + result.stderr
        assert result.stdout.splitlines()[-1] == f"Budget of {args[0]} set"
    for path, *_ in created:  # leave the module's tree as it was
        result = allot(
            "budget", "remove", path, "--data", str(cluster), "--as", "pm", "--wait", "20"
        )
        assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("name", "siblings", "typo_of"),
    [
        ("pretrian", ["pretrain", "midtrain"], "pretrain"),
        ("Olmo", ["olmo"], "olmo"),
        ("olmoo", ["olmo"], "olmo"),
        ("visoin", ["vision"], "vision"),
        ("teamb", ["teama"], "teama"),  # no separator: a letter series or a slip
        ("team-b", ["team-a"], None),
        ("team-c", ["team-a", "team-b"], None),
        ("olmo2", ["olmo"], None),
        ("run11", ["run10"], None),
        ("v2", ["v1"], None),
        ("robotics", ["olmo", "vision"], None),
    ],
    ids=[
        "transposed",
        "case",
        "doubled-letter",
        "swapped",
        "letter-no-separator",
        "next-letter",
        "third-letter",
        "numbered-after-unnumbered",
        "next-number",
        "versions",
        "nothing-close",
    ],
)
def test_a_typo_is_told_from_the_next_of_a_series(
    name: str, siblings: list[str], typo_of: str | None
) -> None:
    """Sibling teams are named team-a, team-b, ...: refusing each new one as a typo of
    the last (as a Kueue user's queues were) made --create a habit."""
    assert likely_typo_of(name, siblings) == typo_of


def test_host_health_and_an_unauthorized_registration(cluster: Path) -> None:
    result = allot(
        "host", "health", "h2", "--unhealthy", "--reason", "ECC errors", "--data", str(cluster),
        "--as", ADMIN,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    health = wait_for(cluster, lambda r: r["type"] == "host.health" and r["host"] == "h2")
    assert health["healthy"] is False and health["reason"] == "ECC errors"
    result = allot(
        "host", "health", "h2", "--healthy", "--data", str(cluster), "--as", ADMIN, "--wait", "20"
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "Host h2 marked healthy"
    wait_for(cluster, lambda r: r["type"] == "host.health" and r["healthy"] is True)

    result = allot("host", "register", "h9", "8", "--data", str(cluster), "--as", "eve")
    assert result.returncode == 1, result.stdout + result.stderr  # said without --wait too
    assert "'eve' may not register hosts" in result.stdout.splitlines()[-1]
    result = allot(
        "host", "register", "h9", "8", "--data", str(cluster), "--as", "eve", "--wait", "20"
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stdout.splitlines()[-1].startswith(
        "The registration of host h9 was rejected: 'eve' may not register hosts"
    )
    rejected = wait_for(cluster, lambda r: r["type"] == "host.rejected" and r["actor"] == "eve")
    assert "may not register hosts" in rejected["error"]


@pytest.mark.parametrize(
    ("flags", "error"),
    [
        (["--allocation", "lab/olmo", "--gpus", "999", "--min-runtime", "15m"], "asks for 999 GPUs"),
        (["--allocation", "lab/olmo", "--gpus", "1", "--min-runtime", "9h"], "exceeds the cap"),
        (["--allocation", "lab/olmp", "--gpus", "1", "--min-runtime", "15m"], "unknown allocation 'lab/olmp'; did you mean lab/olmo"),
    ],
    ids=["more-gpus-than-the-cluster", "min-runtime-9h", "unknown-allocation"],
)  # fmt: skip
def test_bad_submissions_end_in_a_clear_rejection(
    cluster: Path, flags: list[str], error: str
) -> None:
    result = allot("submit", "--data", str(cluster), *flags, "--as", "bob", "--wait", "20")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    workload = result.stdout.splitlines()[0].removeprefix("Submitted workload ")
    assert f"Workload {workload} was rejected: " in result.stdout and error in result.stdout
    rejected = wait_for(
        cluster, lambda r: r["type"] == "workload.rejected" and r.get("workload") == workload
    )
    assert error in rejected["error"] and rejected["actor"] == "bob"


@pytest.mark.parametrize(
    ("flags", "error"),
    [
        (["-A", "lab/vision", "-G", "1", "--min-runtime", "15m"], "'bob' is not a member of 'lab/vision'; ask one of its managers (pm) to add you"),
        (["-A", "lab/olmp", "-G", "1", "--min-runtime", "15m"], "unknown allocation 'lab/olmp'; did you mean lab/olmo"),
        (["-A", "lab/olmo", "-G", "64", "--min-runtime", "15m"], "asks for 64 GPUs but cluster 'default' has 16 registered"),
    ],
    ids=["not-a-member", "typo-in-the-allocation", "more-gpus-than-the-cluster"],
)  # fmt: skip
def test_a_rejected_submission_without_wait_is_said_at_once(
    cluster: Path, flags: list[str], error: str
) -> None:
    """Without --wait, a submission the scheduler refused printed `Submitted workload ID`
    and exited 0: the submitter learnt of it only from `allot why` or `acct`, where sbatch
    says "Batch job submission failed" at once. A served folder answers at once, so
    submit waits for that verdict and says a refusal, exit 1."""
    result = allot("submit", "--data", str(cluster), *flags, "--as", "bob")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    first, said = result.stdout.splitlines()
    workload = first.removeprefix("Submitted workload ")
    assert said.startswith(f"Workload {workload} was rejected: ") and error in said
    parsable = allot("submit", "--data", str(cluster), *flags, "--as", "bob", "--parsable")
    assert parsable.returncode == 1 and ULID.match(parsable.stdout.strip())
    assert error in parsable.stderr


def test_an_accepted_submission_without_wait_says_only_that_it_was_sent(cluster: Path) -> None:
    result = allot(
        "submit", "--data", str(cluster), "-A", "lab/olmo", "-G", "1", "--min-runtime", "0",
        "--as", "bob", "--parsable",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert ULID.match(result.stdout.strip()) and result.stderr == ""


def test_a_refused_cancel_without_wait_is_said_at_once(cluster: Path) -> None:
    """scancel of another user's job, of an unknown id or of a finished job is an error
    at once; `allot cancel` without --wait said "sent" and exited 0 for all three."""
    common = ["--data", str(cluster)]
    submitted = allot(
        "submit", "-A", "lab/olmo", "-G", "1", "--min-runtime", "0", "--as", "alice",
        "--parsable", *common,
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip()
    theirs = allot("cancel", job, "--as", "carol", *common)
    assert theirs.returncode == 1 and "Traceback" not in theirs.stderr
    assert theirs.stdout.splitlines()[-1] == (
        f"The cancel of workload {job} was rejected: 'carol' may not cancel '{job}': only "
        "its submitter 'alice', managers of its allocation or an admin may"
    )
    unknown = allot("cancel", "12345", "--as", "alice", *common)
    assert unknown.returncode == 1
    assert unknown.stdout.splitlines()[-1] == (
        "The cancel of workload 12345 was rejected: unknown workload '12345'; "
        "`allot queue` lists live ones"
    )
    assert allot("cancel", job, "--as", "alice", *common).returncode == 0
    again = allot("cancel", job, "12345", "--as", "alice", *common)
    assert again.returncode == 1
    assert f"The cancel of workload {job} was rejected: workload '{job}' has already ended" in (
        again.stdout.splitlines()
    )


def test_cancelling_a_rejected_submission_says_why_it_was_rejected(cluster: Path) -> None:
    """`allot cancel ID` of a submission the scheduler rejected said "unknown workload
    ...; `allot queue` lists live ones", as for a typo: the journal says why it was
    rejected, so that is said instead, nothing is sent and it exits 1 (scancel of an
    invalid job id). Other ids given with it are still sent."""
    common = ["--data", str(cluster), "--as", "bob"]
    flags = ["-A", "lab/olmo", "-G", "64", "--min-runtime", "15m", "--parsable"]
    refused = allot("submit", *flags, *common).stdout.strip()
    tasks = allot("submit", *flags, "-a", "0-1", *common).stdout.split()
    base = tasks[0].rsplit("_", 1)[0]
    fine = allot("submit", "-A", "lab/olmo", "-G", "1", "--min-runtime", "0", "--parsable", *common)
    wait_for(cluster, lambda r: r.get("workload") == tasks[-1])
    before = len(journal(cluster))
    why = (
        "asks for 64 GPUs but cluster 'default' has 16 registered; submit with at most 16 "
        "GPUs, or ask an admin (ops) to register more hosts"
    )
    for wid in (refused, base, tasks[1]):
        result = allot("cancel", wid, *common)
        assert result.returncode == 1, result.stdout + result.stderr
        assert result.stdout.splitlines() == [
            f"The cancel of workload {wid} was not sent: its submission was rejected "
            f"({why}), so there is no such workload to cancel"
        ]
    both = allot("cancel", refused, fine.stdout.strip(), "--wait", "20", *common)
    assert both.returncode == 1, both.stdout + both.stderr
    assert f"Workload {fine.stdout.strip()} cancelled" in both.stdout.splitlines()
    cancels = [
        r
        for r in journal(cluster)[before:]
        if r.get("input_type", r["type"]) == "workload.cancelled"
    ]
    assert [r["workload"] for r in cancels] == [fine.stdout.strip()]


def test_a_bad_flag_is_one_clear_line(cluster: Path) -> None:
    inbox = (cluster / "inbox.jsonl").read_bytes()
    base = ["submit", "--data", str(cluster), "--allocation", "lab/olmo", "--gpus", "1"]
    line = one_line_error(allot(*base, "--min-runtime", "15x"))
    assert line.startswith("error: --min-runtime '15x': not a duration")
    line = one_line_error(allot(*base, "--min-runtime", "1m", "--runtime=-3h"))
    assert "--runtime" in line
    line = one_line_error(allot(*base[:-1], "0", "--min-runtime", "15m"))
    assert line == "error: --gpus 0: a workload needs at least 1 GPU"
    line = one_line_error(allot("host", "register", "h9", "2000", "--data", str(cluster)))
    assert line == "error: GPUS 2000: a host has 1 to 1024 GPUs"
    # the scheduler's size limits, said before sending
    line = one_line_error(allot(*base, "--min-runtime", "1m", "--tag", "t" * 300))
    assert line == "error: --tag: a tag of 300 characters; at most 256"
    many = [a for i in range(65) for a in ("--tag", f"t{i}")]
    line = one_line_error(allot(*base, "--min-runtime", "1m", *many))
    assert line == "error: --tag: 65 tags; at most 64"
    assert (cluster / "inbox.jsonl").read_bytes() == inbox  # nothing was sent

    result = allot("submit", "--allocation", "lab/olmo", "--gpus", "1", "--min-runtime", "1m")
    assert one_line_error(result) == (
        "error: say where the scheduler is: --kafka HOST:PORT (or $ALLOT_KAFKA) or --data DIR"
    )
    assert result.returncode == 2
    result = allot("cancel", "x", "--kafka", "nonsense")
    assert "expected HOST:PORT" in one_line_error(result)
    # said before sending, in one line each
    for args, said in (
        (("host", "register", "h9", "-1"), "error: GPUS -1: a host has 1 to 1024 GPUs"),
        (
            ("host", "health", "h1", "--unhealthy", "--healthy"),
            "error: --healthy and --unhealthy: say one for host h1",
        ),
        (
            ("cancel", ""),
            "error: ID '': empty; give a workload id (`allot queue` lists them)",
        ),
        (
            ("cancel", "x", "--as", ""),
            "error: --as: empty; give a user name, or leave --as out to act as $USER",
        ),
    ):
        result = allot(*args, "--data", str(cluster))
        assert result.returncode == 2 and one_line_error(result) == said, result.stderr
    # two sources given: one used to win without a word
    for args, named in (
        (("submit", "--data", str(cluster), "--kafka=127.0.0.1:1"), "--data and --kafka"),
        (("queue", "--journal", "j.jsonl", "--data", str(cluster)), "--journal and --data"),
    ):
        result = allot(*args)
        assert result.returncode == 2
        assert one_line_error(result) == f"error: {named}: give one place to read or send, not both"
    for reader in (("queue",), ("acct",), ("audit", "load")):  # readers alike: no port
        result = allot(*reader, "--kafka", "127.0.0.1")
        assert "--kafka '127.0.0.1': expected HOST:PORT" in one_line_error(result)
    line = one_line_error(allot("host", "health", "h1", "--data", str(cluster)))
    assert line == "error: say --healthy or --unhealthy for host h1"
    weights = (("nan", "nan"), ("inf", "inf"), ("-1", "-1"), ("-0.5", "-0.5"), ("1e308", "1e+308"))
    for weight, shown in weights:
        line = one_line_error(allot("budget", "set", "lab/x", weight, "--data", str(cluster)))
        assert line == f"error: WEIGHT {shown}: a weight is a number from 0 to 1e+06"
    # past 64 bits the request could not even be written
    huge = "99999999999999999999"
    line = one_line_error(allot(*base[:-1], huge, "--min-runtime", "1m"))
    assert line == f"error: --gpus {huge}: more GPUs than any cluster has"
    line = one_line_error(allot(*base[:-1], "1", "--min-runtime", "1m", "--priority", f"-{huge}"))
    assert line.startswith(f"error: --priority -{huge}: use a number from")
    line = one_line_error(allot("budget", "set", "lab/my\tteam", "1", "--data", str(cluster)))
    assert line.startswith("error: PATH 'lab/my\\tteam': names separated by '/', without")
    line = one_line_error(allot(*base[:-1], "1", "--min-runtime", "1m", "--name", "a\nb"))
    hidden = "no control or invisible characters (tabs, newlines, bidi marks)"
    assert line == f"error: --name 'a\\nb': {hidden}"
    line = one_line_error(allot(*base[:-1], "1", "--min-runtime", "1m", "--tag", "x\ny"))
    assert line == f"error: --tag 'x\\ny': {hidden}"
    # a host list's own characters would make `queue -w` and NODELIST ambiguous
    for host, shown in (("x,y", "'x,y'"), ("z[1-2]", "'z[1-2]'"), ("h\u200bx", "'h\\u200bx'")):
        line = one_line_error(allot("host", "register", host, "8", "--data", str(cluster)))
        assert line.startswith(f"error: HOST {shown}: a host name is one word: no spaces")
    assert (cluster / "inbox.jsonl").read_bytes() == inbox  # still nothing sent


def _submit_tagged(
    tmp_path: Path, tags: list[str]
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """`allot submit` with one --tag per item of `tags` into a new folder."""
    data = tmp_path / "data"
    data.mkdir()
    flags = [a for t in tags for a in ("--tag", t)]
    return data, allot(
        "submit", "-A", "lab", "-G", "1", "--min-runtime", "0", *flags, "--data", str(data)
    )


@pytest.mark.parametrize(
    ("tags", "sent"),
    [
        pytest.param(["a,b"], ["a", "b"], id="comma-list"),
        pytest.param(["a,b", "c"], ["a", "b", "c"], id="lists-and-repeats"),
        pytest.param([" a , b,"], ["a", "b"], id="spaces-and-a-trailing-comma"),
        pytest.param(["debug"], ["debug"], id="one"),
        pytest.param([], [], id="none"),
        pytest.param(["debug", "a,debug"], ["debug", "a"], id="a-tag-named-twice-once"),
    ],
)
def test_tags_split_on_commas_as_slurm_lists_do(
    tmp_path: Path, tags: list[str], sent: list[str]
) -> None:
    """`--tag a,b` had sent one tag 'a,b', which every view shows as two (a,b)."""
    data, result = _submit_tagged(tmp_path, tags)
    assert result.returncode == 0, result.stderr
    (line,) = (data / "inbox.jsonl").read_bytes().splitlines()
    assert orjson.loads(orjson.loads(line)["value"])["tags"] == sent


@pytest.mark.parametrize(
    ("tags", "says"),
    [
        pytest.param([","], "error: --tag ',' names no tag; e.g. --tag debug", id="no-tag"),
        pytest.param(
            [",".join(f"t{i}" for i in range(65))],
            "error: --tag: 65 tags; at most 64",
            id="too-many",
        ),
    ],
)
def test_bad_tag_lists_are_one_line_and_send_nothing(
    tmp_path: Path, tags: list[str], says: str
) -> None:
    data, result = _submit_tagged(tmp_path, tags)
    assert one_line_error(result).startswith(says)
    assert not (data / "inbox.jsonl").exists()


def test_a_data_folder_that_did_not_exist_is_named(tmp_path: Path) -> None:
    """A typo in --data would leave the request where no scheduler looks: say so."""
    typo = tmp_path / "lba"
    args = ["--allocation", "lab/olmo", "--gpus", "1", "--min-runtime", "15m", "--data"]
    result = allot("submit", *args, str(typo))
    assert result.returncode == 0 and result.stdout.startswith("Submitted workload")
    assert f"note: {typo} did not exist and was created" in result.stderr
    assert f"until `allot serve --data {typo}` runs" in result.stderr
    result = allot("cancel", "x", "--data", str(typo))
    # it exists now: no note that it did not; still nobody serves it
    assert result.returncode == 0 and result.stderr.splitlines() == [unserved_note(typo)]


def test_help_shows_no_value_for_on_off_flags() -> None:
    out = allot("submit", "--help", environ=env(COLUMNS="120")).stdout
    (resumable,) = [line for line in out.splitlines() if "--resumable" in line]
    (gpus,) = [line for line in out.splitlines() if "--gpus" in line]
    assert "<bool>" not in out and "<int>" in gpus, out
    assert "Requeue" in resumable


def test_an_unreachable_broker_is_one_clear_line_within_seconds() -> None:
    """(A hang fails it by the subprocess timeout; how fast is not a test's to time.)"""
    args = ["--allocation", "lab/olmo", "--gpus", "1", "--min-runtime", "15m"]
    result = allot("submit", "--kafka", "127.0.0.1:1", *args, timeout=30)
    line = one_line_error(result)
    assert line.startswith("error: cannot reach Kafka at 127.0.0.1:1"), line
    # $ALLOT_KAFKA is the default target
    result = allot("budget", "remove", "lab/x", timeout=30, environ=env(ALLOT_KAFKA="127.0.0.1:1"))
    assert one_line_error(result).startswith("error: cannot reach Kafka at 127.0.0.1:1")


def test_submit_without_a_scheduler_times_out_with_a_hint(tmp_path: Path) -> None:
    data = tmp_path / "idle"
    result = allot(
        "submit", "--data", str(data), "--allocation", "a", "--gpus", "1", "--min-runtime", "0",
        "--wait", "0.3",
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stdout.startswith("Submitted workload ")
    note, pending = result.stderr.splitlines()  # said once: the folder's note, then the wait
    assert note.startswith(f"note: {data} did not exist and was created; no scheduler reads")
    assert pending.endswith("still pending after 0.3 s")
    assert len((data / "inbox.jsonl").read_bytes().splitlines()) == 1


def _interrupted_wait(*args: str, environ: dict[str, str] | None = None) -> tuple[str, str]:
    """`allot ARGS --wait 60` stopped with Ctrl-C once it said the request was out: its
    stdout and stderr (it must exit 130)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "allot.cli", *args, "--wait", "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environ or env(),
        stdin=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()  # printed once the request is out, before the wait
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, (first, out, err)
    return first + out, err


def test_ctrl_c_during_wait_says_the_request_stands(tmp_path: Path) -> None:
    """Ctrl-C ended `--wait` without a word (typer turns it into exit 130 before
    allot's own 'interrupted' line): was the job submitted or not?"""
    data = tmp_path / "idle"
    out, err = _interrupted_wait(
        "submit", "--data", str(data), "-A", "a", "-G", "1", "--min-runtime", "0",
        "--parsable",
    )  # fmt: skip
    workload = out.strip()
    assert ULID.match(workload), out
    assert err.splitlines()[-1] == (
        f"Stopped waiting (Ctrl-C); the request was sent and stands: `allot why {workload}` "
        f"says what the scheduler decided, `allot cancel {workload}` withdraws it"
    )
    assert len((data / "inbox.jsonl").read_bytes().splitlines()) == 1
    out, err = _interrupted_wait("cancel", workload, "--data", str(data))
    assert out.startswith(f"Cancel of workload {workload} sent")
    assert err.splitlines() == [
        unserved_note(data),
        "Stopped waiting (Ctrl-C); the request was sent and stands: "
        f"`allot why {workload}` says what the scheduler decided",
    ]


@pytest.mark.parametrize("stop", ["sigint", "sigkill"])
def test_a_request_to_a_folder_nobody_serves_says_so_once(tmp_path: Path, stop: str) -> None:
    """A request to a folder whose serve stopped (or died by kill -9, which drops its
    lock with it) waited in the inbox without a word; --parsable output stays the id."""
    data = tmp_path / "data"
    server = serve(data)
    try:
        one_4_gpu_host_for_lab_x(data)
        served = allot("cancel", "w1", "w2", "--data", str(data))
        assert served.stderr == "", served.stderr  # no note: it is served
        assert served.returncode == 1  # the scheduler knows neither id, and says so at once
        assert "The cancel of workload w1 was rejected: unknown workload 'w1'" in served.stdout
    finally:
        server.send_signal(signal.SIGINT if stop == "sigint" else signal.SIGKILL)
        server.communicate(timeout=30)
    submit = ["submit", "-A", "lab/x", "-G", "1", "--min-runtime", "0", "--data", str(data)]
    result = allot(*submit, "--array", "0-3", "--parsable")
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.split()) == 4 and all(
        ULID.match(t[:26]) for t in result.stdout.split()
    )
    assert result.stderr.splitlines() == [unserved_note(data)]
    result = allot("cancel", "w1", "w2", "--data", str(data))
    assert result.returncode == 0 and result.stderr.splitlines() == [unserved_note(data)]


def test_a_bare_number_duration_is_said_to_be_seconds(tmp_path: Path) -> None:
    """A Slurm user's `--min-runtime 15` (Slurm's --time reads minutes) protected the
    job for 15 seconds without a word; units and zero need no note."""
    data = tmp_path / "idle"
    data.mkdir()
    common = ["submit", "--data", str(data), "-A", "a", "-G", "1", "--parsable"]
    bare = allot(*common, "--min-runtime", "15", "--runtime", "90")
    assert bare.returncode == 0, bare.stderr
    assert bare.stderr.splitlines() == [
        "note: --min-runtime 15 means 15s: a bare number is seconds here, not minutes as in "
        "Slurm's --time",
        "note: --runtime 90 means 1m30s: a bare number is seconds here, not minutes as in "
        "Slurm's --time",
        unserved_note(data),
    ]
    for durations in (["--min-runtime", "15m", "--runtime", "1:30"], ["--min-runtime", "0"]):
        quiet = allot(*common, *durations)  # no duration note (nobody serves the folder)
        assert quiet.returncode == 0 and quiet.stderr.splitlines() == [unserved_note(data)]
    lines = (data / "inbox.jsonl").read_bytes().splitlines()
    sent = [orjson.loads(orjson.loads(line)["value"]) for line in lines]
    assert [(r["min_runtime"], r.get("runtime")) for r in sent] == [(15, 90), (900, 90), (0, None)]


def test_a_name_takes_sbatchs_job_name_flags(tmp_path: Path) -> None:
    """`allot submit -J NAME` (sbatch's) was "No such option: -J"."""
    data = tmp_path / "idle"
    data.mkdir()
    common = ["submit", "--data", str(data), "-A", "a", "-G", "1", "--min-runtime", "0"]
    for flag in ("--name", "--job-name", "-J"):
        assert allot(*common, flag, f"run{flag}").returncode == 0
    lines = (data / "inbox.jsonl").read_bytes().splitlines()
    names = [orjson.loads(orjson.loads(line)["value"])["name"] for line in lines]
    assert names == ["run--name", "run--job-name", "run-J"]


def test_submit_wait_on_queued_work_says_it_was_accepted(tmp_path: Path) -> None:
    """The journal holds the submission but no GPU is free: it used to ask whether a
    scheduler was running at all."""
    data = tmp_path / "data"
    server = serve(data)
    try:
        for args in [("host", "register", "h1", "4"), ("budget", "set", "lab", "1")]:
            assert allot(*args, "--as", ADMIN, "--data", str(data)).returncode == 0
        common = ["submit", "--data", str(data), "-A", "lab", "-G", "4", "--min-runtime", "1h"]
        first = allot(*common, "--as", ADMIN, "--wait", "20")
        assert first.returncode == 0, first.stderr
        # long enough for a loaded machine to journal the submission (not its placement)
        second = allot(*common, "--as", ADMIN, "--wait", "8", "--parsable")
        assert second.returncode == 1
        workload = second.stdout.strip()
        assert second.stderr.splitlines() == [
            f"Workload {workload} accepted, still waiting to start after 8 s "
            f"(`allot why {workload}` says why)"
        ]
    finally:
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=30)


def test_submit_wait_warns_of_work_the_healthy_hosts_cannot_hold(tmp_path: Path) -> None:
    """12 GPUs asked of a cluster whose 8-GPU host is unhealthy (two 4-GPU hosts
    healthy): accepted, and it waits for the repair. `--wait` said only "still waiting";
    it now says what for."""
    data = tmp_path / "data"
    server = serve(data)
    try:
        steps = [
            ("host", "register", "h1", "4"),
            ("host", "register", "h2", "8"),
            ("host", "register", "h3", "4"),
            ("host", "health", "h2", "--unhealthy", "--reason", "xid-79"),
            ("budget", "set", "lab", "1"),
        ]
        for args in steps:
            done = allot(*args, "--as", ADMIN, "--data", str(data), "--wait", "20")
            assert done.returncode == 0, done.stderr
        common = ["submit", "--data", str(data), "-A", "lab", "--min-runtime", "1h"]
        fits = allot(*common, "-G", "4", "--as", ADMIN, "--wait", "20")
        assert fits.returncode == 0 and "warning" not in fits.stderr, fits.stderr
        waits = allot(*common, "-G", "12", "--as", ADMIN, "--wait", "8", "--parsable")
        assert waits.returncode == 1
        assert waits.stderr.splitlines()[1:] == [
            "warning: Resources: needs 12 GPUs; 8 of the cluster's 16 are healthy: it waits "
            "for unhealthy h2 to be repaired"
        ]
    finally:
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=30)


def test_cancel_without_a_scheduler_times_out_with_a_hint(tmp_path: Path) -> None:
    data = tmp_path / "idle"
    result = allot("cancel", "w1", "--data", str(data), "--wait", "0.3")
    assert result.returncode == 1
    assert result.stdout.startswith("Cancel of workload w1 sent")
    assert "no scheduler reads it until `allot serve" in result.stderr  # said once, at once
    assert "No verdict on the cancel of workload w1 after 0.3 s; the request" in result.stderr
    # not lost: it waits in the inbox for a scheduler, and the line says how to follow it
    assert "the request stays queued and is decided when the scheduler reads it" in result.stderr
    assert "allot why w1" in result.stderr
    assert len((data / "inbox.jsonl").read_bytes().splitlines()) == 1
    # several at once: each is waited for; none came
    several = allot("cancel", "w1", "w2", "--data", str(data), "--wait", "0.3")
    assert several.returncode == 1
    assert several.stdout.splitlines()[-1] == "0 of 2 workloads cancelled"
    note, verdicts = several.stderr.splitlines()
    assert note == unserved_note(data)
    assert verdicts.startswith("No verdict on 2 of the 2 requests after 0.3 s; they stay")
    assert len((data / "inbox.jsonl").read_bytes().splitlines()) == 3


# ------------------------------------------------------------------ Kafka


async def _ensure_topic(bootstrap: str, name: str) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.errors import TopicAlreadyExistsError

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20_000)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name=name, num_partitions=3, replication_factor=1)])
    except TopicAlreadyExistsError:
        pass
    finally:
        await admin.close()


async def _find(bootstrap: str, topic: str, match: Callable[[object], bool]) -> object:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500)
            for records in batches.values():
                for record in records:
                    if match(record):
                        return record
    finally:
        await consumer.stop()
    raise AssertionError(f"no matching record in {topic}")


@pytest.mark.kafka
def test_submit_to_kafka_writes_an_orjson_record_keyed_by_cluster(
    kafka_bootstrap: str,
) -> None:
    from streams.topics import INBOX

    asyncio.run(_ensure_topic(kafka_bootstrap, INBOX))
    cluster = f"c-{os.getpid()}-{time.monotonic_ns()}"
    result = allot(
        "submit", "--kafka", kafka_bootstrap, "--cluster", cluster, "--allocation", "lab/olmo",
        "--gpus", "4", "--min-runtime", "15m", "--tag", "debug", "--parsable", "--as", "alice",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    workload = result.stdout.strip()
    assert ULID.match(workload)

    record = asyncio.run(
        _find(kafka_bootstrap, INBOX, lambda r: workload.encode() in (r.value or b""))
    )
    assert record.key == cluster.encode()  # type: ignore[attr-defined]
    body = orjson.loads(record.value)  # type: ignore[attr-defined]
    assert body["type"] == "workload.submitted" and body["v"] == 1
    assert body["workload"] == workload and body["cluster"] == cluster
    assert body["actor"] == "alice" and body["gpus"] == 4 and body["min_runtime"] == 900.0
    assert body["tags"] == ["debug"] and isinstance(body["time"], float)

    # the other request commands reach the same topic
    result = allot("host", "register", "hx", "8", "--kafka", kafka_bootstrap, "--cluster", cluster)
    assert result.returncode == 0, result.stderr
    record = asyncio.run(
        _find(
            kafka_bootstrap,
            INBOX,
            lambda r: r.key == cluster.encode() and b"host.registered" in (r.value or b""),
        )
    )
    assert orjson.loads(record.value)["actor"] == "tester"  # type: ignore[attr-defined]

    # nobody serves this cluster: a wait for the verdict says what to check
    from streams.topics import JOURNAL

    asyncio.run(_ensure_topic(kafka_bootstrap, JOURNAL))
    result = allot(
        "host", "register", "hy", "8", "--kafka", kafka_bootstrap, "--cluster", cluster,
        "--wait", "2", timeout=60,
    )  # fmt: skip
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert (
        f"after 2 s; is an `allot serve --kafka {kafka_bootstrap}` running for this cluster?"
    ) in result.stderr


@pytest.mark.kafka
def test_ctrl_c_during_a_kafka_wait_prints_no_traceback(kafka_bootstrap: str) -> None:
    """The wait's task outlived its consumer: 'Task exception was never retrieved' and
    a ConsumerStoppedError traceback after Ctrl-C."""
    suffix = f".ctrl-c-{os.getpid()}-{time.monotonic_ns()}"
    environ = env(ALLOT_TOPIC_SUFFIX=suffix, ALLOT_KAFKA=kafka_bootstrap)
    created = allot("topics", "create", environ=environ)
    assert created.returncode == 0, created.stderr
    out, err = _interrupted_wait(
        "submit", "-A", "lab/a", "-G", "1", "--min-runtime", "1m", environ=environ
    )
    assert out.startswith("Submitted workload ")
    assert err.splitlines() == [err.splitlines()[0]], err  # one line, no traceback
    assert err.startswith("Stopped waiting (Ctrl-C); the request was sent and stands")


@pytest.mark.kafka
def test_a_request_to_topics_nobody_created_is_refused(kafka_bootstrap: str) -> None:
    """A mistyped ALLOT_TOPIC_SUFFIX: the request went to an inbox the broker created on
    first use, which no scheduler reads ('Submitted', exit 0), and --wait created a
    journal topic with the broker's 7-day retention."""
    from streams.topic_admin import _admin

    async def topic_names() -> list[str]:
        admin = await _admin(kafka_bootstrap, 15.0)
        try:
            return list(await admin.list_topics())
        finally:
            await admin.close()

    suffix = f".typo-{os.getpid()}-{time.monotonic_ns()}"
    environ = env(ALLOT_TOPIC_SUFFIX=suffix, ALLOT_KAFKA=kafka_bootstrap)
    for extra in ([], ["--wait", "2"]):
        result = allot(
            "submit", "-A", "lab/a", "-G", "1", "--min-runtime", "1m", *extra, environ=environ
        )
        assert result.returncode == 2, (result.stdout, result.stderr)
        assert f"no topic allot.inbox{suffix}" in result.stderr
        assert f"ALLOT_TOPIC_SUFFIX is '{suffix}'" in result.stderr
    names = asyncio.run(topic_names())
    assert not any(name.endswith(suffix) for name in names), names


@pytest.mark.kafka
def test_topics_create_warns_about_existing_topics_allot_cannot_rely_on(
    kafka_bootstrap: str,
) -> None:
    """Topics made otherwise (by hand, or by a broker creating them on first use) were
    'left unchanged' without a word: a journal deleted after 7 days, an inbox stamped
    by its writers' clocks."""
    from aiokafka.admin import NewTopic

    from streams.topic_admin import _admin

    suffix = f".drift-{os.getpid()}-{time.monotonic_ns()}"

    async def make_them_badly() -> None:
        admin = await _admin(kafka_bootstrap, 15.0)
        try:
            await admin.create_topics(
                [
                    NewTopic(
                        name=f"allot.journal{suffix}",
                        num_partitions=1,
                        replication_factor=1,
                        topic_configs={"retention.ms": "604800000"},
                    ),
                    NewTopic(
                        name=f"allot.inbox{suffix}",
                        num_partitions=1,
                        replication_factor=1,
                        topic_configs={"message.timestamp.type": "CreateTime"},
                    ),
                ]
            )
        finally:
            await admin.close()

    asyncio.run(make_them_badly())
    result = allot(
        "topics", "create", environ=env(ALLOT_TOPIC_SUFFIX=suffix, ALLOT_KAFKA=kafka_bootstrap)
    )
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 2, result.stderr
    assert (
        f"allot.inbox{suffix} has message.timestamp.type=CreateTime, allot needs LogAppendTime"
        in warnings[0]
    )
    assert f"allot.journal{suffix} has retention.ms=604800000, allot needs -1" in warnings[1]
    assert "--add-config retention.ms=-1" in warnings[1]
    # asking for more partitions than existing topics have says so, rather than nothing
    again = allot(
        "topics", "create", "--partitions", "3",
        environ=env(ALLOT_TOPIC_SUFFIX=suffix, ALLOT_KAFKA=kafka_bootstrap),
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert f"exists  allot.journal{suffix} (left unchanged; it has 1 partition, not 3" in (
        again.stdout
    )


@pytest.mark.kafka
def test_one_topic_suffix_moves_every_tool(kafka_bootstrap: str) -> None:
    """`$ALLOT_TOPIC_SUFFIX` gives a second deployment its own topics on a shared
    broker: topics create, serve, the request tools and the views all use them, and
    the default topics see none of it."""
    from streams.topics import BASE_INBOX, BASE_JOURNAL, INBOX, JOURNAL

    suffix = f".e2e-{os.getpid()}-{time.monotonic_ns()}"
    cluster = "staging"
    environ = env(ALLOT_TOPIC_SUFFIX=suffix, ALLOT_KAFKA=kafka_bootstrap, ALLOT_CLUSTER=cluster)
    result = allot("topics", "create", environ=environ)
    assert result.returncode == 0, result.stderr
    assert f"{BASE_JOURNAL}{suffix}" in result.stdout + result.stderr
    server = subprocess.Popen(
        [sys.executable, "-m", "allot.cli", "serve", "--kafka", kafka_bootstrap,
         "--cluster", cluster, "--admin", ADMIN, "--tick", "1h"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environ,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        for args in (
            ("host", "register", "h1", "8", "--as", ADMIN),
            ("budget", "set", "lab", "1", "--as", ADMIN),
            ("budget", "set", "lab/a", "1", "--member", "alice", "--as", ADMIN),
        ):
            result = allot(*args, environ=environ)
            assert result.returncode == 0, result.stderr
        result = allot(
            "submit", "-A", "lab/a", "-G", "2", "--min-runtime", "15m", "--as", "alice",
            "--parsable", "--wait", "60", environ=environ, timeout=120,
        )  # fmt: skip
        assert result.returncode == 0, (result.stdout, result.stderr)
        workload = result.stdout.strip()
        assert "placed on h1" in result.stderr
        # a verdict read back from the journal topic: another user may not cancel it
        result = allot(
            "cancel", workload, "--as", "mallory", "--wait", "60", environ=environ, timeout=120
        )
        assert result.returncode == 1, (result.stdout, result.stderr)
        assert f"The cancel of workload {workload} was rejected: 'mallory' may not" in result.stdout
        result = allot("queue", "--json", environ=environ)
        assert result.returncode == 0, result.stderr
        rows = orjson.loads(result.stdout)["workloads"]
        assert [(r["id"], r["state"]) for r in rows] == [(workload, "RUNNING")], rows
    finally:
        server.send_signal(signal.SIGINT)
        _, logged = server.communicate(timeout=60)
    # the worker says when it is ready (it used to log nothing: no handler was set up)
    assert (
        "allot serve INFO allot.worker: scheduler ready: 0 clusters on inbox partitions" in logged
    )
    # this process was started without the suffix: its names are the defaults
    assert (INBOX, JOURNAL) == (BASE_INBOX, BASE_JOURNAL)
    for topic in (INBOX, JOURNAL):
        asyncio.run(_ensure_topic(kafka_bootstrap, topic))
        assert not asyncio.run(records_of(kafka_bootstrap, topic, cluster.encode()))


# ------------------------------------------------------------------ job arrays


@pytest.mark.parametrize(
    ("spec", "tasks"),
    [
        ("0-3", [0, 1, 2, 3]),
        ("1,3,5-7", [1, 3, 5, 6, 7]),
        ("0-15:4", [0, 4, 8, 12]),
        ("5", [5]),
        ("3,1,3", [1, 3]),
        (" 2-4 ", [2, 3, 4]),
    ],
    ids=["range", "list-and-range", "step", "one", "repeats", "spaces"],
)
def test_array_specs_follow_sbatch(spec: str, tasks: list[int]) -> None:
    assert parse_array(spec) == tasks


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("0-15%4", "'%N' (tasks at once) is not supported"),
        ("a-b", "is not N, N-M or N-M:STEP"),
        ("5-1", "is an empty range"),
        ("0-9:0", "'0-9:0': the step is at least 1"),
        ("0-20000", "more than 10,000 tasks"),
        ("", "is not N, N-M or N-M:STEP"),
    ],
    ids=["throttle", "letters", "backwards", "zero-step", "too-many", "empty"],
)
def test_bad_array_specs_say_why(spec: str, says: str) -> None:
    with pytest.raises(RequestError, match=re.escape(says)):
        parse_array(spec)


def test_array_ids_expand_for_cancel() -> None:
    assert expand_ids(["X_[0-2]", "Y", "X_1", "Z_[4,6]"]) == [
        "X_0",
        "X_1",
        "X_2",
        "Y",
        "Z_4",
        "Z_6",
    ]
    assert expand_ids(["plain_id", "p_7"]) == ["plain_id", "p_7"]


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("X_[3-1]", "ID 'X_[3-1]': '3-1' is an empty range"),
        ("X_[0-3", "ID 'X_[0-3': name tasks of a job array as 'BASE_[SPEC]'"),
        ("x_[]", "ID 'x_[]': name tasks of a job array as 'BASE_[SPEC]'"),
        ("X_[0-9%2]", "ID 'X_[0-9%2]': '%N' (tasks at once) is not supported"),
    ],
    ids=["backwards", "unclosed", "empty", "throttle"],
)
def test_bad_array_patterns_in_ids_name_the_id(given: str, says: str) -> None:
    """Not `--array`, which cancel does not have; and never sent as a literal id."""
    with pytest.raises(RequestError, match=re.escape(says)):
        expand_ids(["ok", given])


def test_a_job_array_is_submitted_and_partly_cancelled(cluster: Path) -> None:
    common = ["--data", str(cluster), "--allocation", "lab/vision", "--gpus", "1"]
    result = allot("submit", *common, "--min-runtime", "0", "--array", "0-3", "--as", "carol")
    assert result.returncode == 0, result.stderr
    m = re.match(r"Submitted array (\S+): 4 workloads \((\S+) … (\S+)\)", result.stdout)
    assert m, result.stdout
    base = m[1]
    assert ULID.match(base) and (m[2], m[3]) == (f"{base}_0", f"{base}_3")
    for i in range(4):
        wait_for(
            cluster,
            lambda r, i=i: r["type"] == "workload.placed" and r["workload"] == f"{base}_{i}",
        )

    result = allot("cancel", f"{base}_[1-2]", "--data", str(cluster), "--as", "carol")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"Cancel of 2 workloads sent ({base}_1 … {base}_2")
    for i in (1, 2):
        wait_for(
            cluster,
            lambda r, i=i: r["type"] == "workload.cancelled" and r["workload"] == f"{base}_{i}",
        )
    cancelled = {r["workload"] for r in journal(cluster) if r["type"] == "workload.cancelled"}
    assert f"{base}_0" not in cancelled and f"{base}_3" not in cancelled
    result = allot("queue", "-j", base, "--json", "--data", str(cluster))
    assert result.returncode == 0, result.stderr
    rows = orjson.loads(result.stdout)["workloads"]
    assert sorted(r["id"] for r in rows) == [f"{base}_0", f"{base}_3"]

    result = allot(
        "submit", *common, "--min-runtime", "0", "-a", "7,9", "--parsable", "--as", "carol"
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.split()
    assert len(lines) == 2 and lines[0].endswith("_7") and lines[1].endswith("_9")
    assert lines[0].rsplit("_", 1)[0] == lines[1].rsplit("_", 1)[0]


def test_wait_on_several_workloads_says_which_were_refused(cluster: Path) -> None:
    """`--wait` refused several ids ("works for one workload"), so a typo among them
    (scontrol hold 12 13 99: "Invalid job id specified" for 99) went unseen."""
    common = ["--data", str(cluster), "--as", "carol"]
    result = allot(
        "submit", "-A", "lab/vision", "-G", "16", "--min-runtime", "1h", "-a", "0-2",
        "--parsable", *common,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    tasks = result.stdout.split()
    base = tasks[0].rsplit("_", 1)[0]
    for task in tasks:  # all the GPUs each: the first may start, the others wait
        wait_for(cluster, lambda r, t=task: r.get("workload") == t)
    typo = f"{base}_9"
    held = allot("hold", *tasks[1:], typo, "--wait", "20", *common)
    assert held.returncode == 1, held.stderr
    assert held.stdout.splitlines()[1:] == [
        f"The hold of workload {typo} was rejected: unknown workload '{typo}'; "
        "`allot queue` lists live ones",
        "2 of 3 workloads held",
    ]
    released = allot("release", base, "--wait", "20", *common)
    assert released.returncode == 0, released.stderr
    assert released.stdout.splitlines()[-1] == "2 of 2 workloads released"
    cancelled = allot("cancel", base, "--wait", "20", *common)
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.splitlines()[-1] == "3 of 3 workloads cancelled"


def test_cancelling_a_list_with_running_work_last_starts_none_of_the_waiting(
    tmp_path: Path,
) -> None:
    """scancel A B C where C runs and A, B wait for its GPUs: cancelled last id first,
    C went first and its GPUs started B just before B's own cancel arrived."""
    data = tmp_path / "data"
    server = serve(data)
    try:
        one_4_gpu_host_for_lab_x(data)
        ids = []
        for _ in range(3):
            result = allot(
                "submit", "--data", str(data), "-A", "lab/x", "-G", "4", "--min-runtime",
                "1h", "--parsable", "--as", ADMIN,
            )  # fmt: skip
            assert result.returncode == 0, result.stderr
            ids.append(result.stdout.strip())
        running, *waiting = ids
        wait_for(data, lambda r: r.get("workload") == ids[-1])
        result = allot("cancel", *waiting, running, "--data", str(data), "--as", ADMIN)
        assert result.returncode == 0, result.stderr
        wait_for(data, lambda r: r["type"] == "workload.cancelled" and r["workload"] == running)
        records = journal(data)
        started = {r["workload"] for r in records if r["type"] == "workload.placed"}
        assert started == {running}
        cancelled = [r["workload"] for r in records if r["type"] == "workload.cancelled"]
        assert sorted(cancelled) == sorted(ids) and cancelled[-1] == running
    finally:
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=30)


def test_an_array_with_wait_reports_its_first_tasks_verdict(cluster: Path) -> None:
    """sbatch --array fails at once for a user the account refuses: so does --wait."""
    common = ["--data", str(cluster), "--allocation", "lab/vision", "--gpus", "1"]
    refused = allot(
        "submit",
        *common,
        "--min-runtime",
        "0",
        "--array",
        "0-2",
        "--as",
        "mallory",
        "--wait",
        "20s",
    )
    assert refused.returncode == 1, refused.stderr
    base = refused.stdout.split()[2].rstrip(":")
    assert refused.stdout.startswith(f"Submitted array {base}: 3 workloads")
    assert f"Workload {base}_0 was rejected: 'mallory' is not a member" in refused.stderr
    assert "every task is refused the same way" in refused.stderr
    rejected = [r["workload"] for r in journal(cluster) if r["type"] == "workload.rejected"]
    assert {f"{base}_{i}" for i in range(3)} <= set(rejected)  # every task was sent
    admitted = allot(
        "submit", *common, "--min-runtime", "0", "--array", "0-1", "--as", "carol", "--wait", "20"
    )
    assert admitted.returncode == 0, admitted.stderr
    base = admitted.stdout.split()[2].rstrip(":")
    assert f"Workload {base}_0 placed on" in admitted.stderr
    assert f"`allot queue -j {base}` follows the others" in admitted.stderr
    result = allot("submit", *common, "--min-runtime", "0", "--array", "0-3%2")
    assert "'%N' (tasks at once) is not supported" in one_line_error(result)


def test_a_scheduler_that_ignored_changes_by_name_is_said_to(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A scheduler of an earlier release accepts `--add-member erin` as a change that
    keeps the lists (it ignores the unknown fields): its verdict has no resulting list,
    and --wait must not say the budget was set as asked."""
    import typer

    from allot.commands.requests import _ListChange, _say_named_changes

    members = _ListChange(replace=None, add=["erin"], remove=None)
    kept = _ListChange(replace=None, add=None, remove=None)
    old_verdict = {"type": "budget.set", "allocation": "lab/a", "add_members": ["erin"]}
    with pytest.raises(typer.Exit) as exited:
        _say_named_changes(old_verdict, kept, members)
    assert exited.value.exit_code == 1
    assert "The scheduler ignored --add-member/--remove-member" in capsys.readouterr().err
    _say_named_changes({**old_verdict, "members": ["bob", "erin"]}, kept, members)
    assert capsys.readouterr().out == "Members now: bob, erin\n"
