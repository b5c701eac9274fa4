"""`allot queue`, `allot shares`, `allot why` and `allot executor --simulate` end to end.

The views run as subprocesses on a simulation's journal (`--journal FILE`), on the
embedded folder (`--data DIR`, written by `allot serve --data`) and on a real Kafka
broker (`--kafka`, the session broker of tests/streams/conftest.py).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest

from allot.commands.executor import SimulatedLauncher
from projections import views as v
from streams.sources import SourceError, journal_lines
from tests.e2e.cli import allot, allot_on_a_terminal, one_line_error


@pytest.fixture(scope="module")
def journal(tiny_journal: Path) -> Path:
    return tiny_journal


@pytest.fixture(scope="module")
def records(journal: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in journal.read_bytes().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def folded(journal: Path) -> v.JournalView:
    return v.fold(v.decode_lines(journal_lines(journal=journal)))


# ------------------------------------------------------------------ queue


def test_queue_table(journal: Path, folded: v.JournalView) -> None:
    result = allot("queue", "--journal", str(journal))
    assert result.returncode == 0, result.stderr
    header = result.stdout.splitlines()[1].split()
    assert header == [
        "ID",
        "ALLOCATION",
        "USER",
        "STATE",
        "GPUS",
        "WAIT/TIME",
        "REASON",
        "NODELIST",
    ]
    first = v.queue_rows(folded)[0]
    assert first["id"] in result.stdout.splitlines()[2]
    assert "cluster tiny" in result.stdout.splitlines()[0]


def test_queue_json_matches_the_projection(journal: Path, folded: v.JournalView) -> None:
    result = allot("queue", "--journal", str(journal), "--json")
    assert result.returncode == 0, result.stderr
    payload = orjson.loads(result.stdout)
    assert payload["cluster"] == "tiny"
    rows = payload["workloads"]
    assert [r["id"] for r in rows] == [r["id"] for r in v.queue_rows(folded)]
    assert {r["state"] for r in rows} <= {"PENDING", "RUNNING"}
    assert all(r["reason"] for r in rows)
    pending = [r for r in rows if r["state"] == "PENDING"]
    assert [r["position"] for r in pending] == list(range(1, len(pending) + 1))


@pytest.mark.parametrize(
    ("args", "check"),
    [
        pytest.param(
            ["-o", "%i %T %r"],
            lambda out: out.splitlines()[0].split() == ["ID", "STATE", "REASON"],
            id="format-letters",
        ),
        pytest.param(
            ["--format", "id,user"],
            lambda out: out.splitlines()[0].split() == ["ID", "USER"],
            id="format-names",
        ),
        pytest.param(
            ["-u", "alice", "--json"],
            lambda out: {r["user"] for r in orjson.loads(out)["workloads"]} == {"alice"},
            id="user",
        ),
        pytest.param(
            ["-a", "lab/eval", "--json"],
            lambda out: {r["allocation"] for r in orjson.loads(out)["workloads"]} == {"lab/eval"},
            id="allocation",
        ),
        pytest.param(
            ["--long"],
            lambda out: (
                {"POS", "RANK", "RATIO", "PRIO", "SUBMITTED"} <= set(out.splitlines()[1].split())
            ),
            id="long",
        ),
        pytest.param(
            ["-o", "%i|%u|%T"],
            lambda out: (
                out.splitlines()[0] == "ID|USER|STATE"
                and all(line.count("|") == 2 and " " not in line for line in out.splitlines())
            ),
            id="format-literal-separators",
        ),
        pytest.param(
            ["-o", "%.12i %5u", "--noheader"],
            lambda out: (
                all(
                    len(line) == 18 and line[12] == " " and line[:12].strip() == line[:12].lstrip()
                    for line in out.splitlines()
                )
                and "ID" not in out
            ),
            id="format-widths-noheader",
        ),
        pytest.param(
            ["-t", "r", "--json"],
            lambda out: {r["state"] for r in orjson.loads(out)["workloads"]} == {"RUNNING"},
            id="states-running",
        ),
        pytest.param(
            ["-t", "PD", "--json"],
            lambda out: {r["state"] for r in orjson.loads(out)["workloads"]} == {"PENDING"},
            id="states-pending",
        ),
        pytest.param(
            ["-t", "all", "--json"],
            lambda out: (
                {r["state"] for r in orjson.loads(out)["workloads"]} == {"PENDING", "RUNNING"}
            ),
            id="states-all-as-squeue",
        ),
    ],
)
def test_queue_options(journal: Path, args: list[str], check: Any) -> None:
    result = allot("queue", "--journal", str(journal), *args)
    assert result.returncode == 0, result.stderr
    assert check(result.stdout), result.stdout


def _format_help(command: str) -> str:
    """The --format help of `allot COMMAND`, as `--help` prints it (unwrapped)."""
    import typer

    from allot.cli import app

    params = typer.main.get_command(app).commands[command].params  # type: ignore[attr-defined]
    return next(p.help for p in params if "--format" in p.opts)


@pytest.mark.parametrize(
    ("letter", "name"),
    [(letter, name) for name, (letter, _, _) in v.QUEUE_COLUMNS.items()],
    ids=list(v.QUEUE_COLUMNS),
)
def test_queue_format_help_names_each_field_as_format_reads_it(
    letter: str | None, name: str
) -> None:
    """`%S start_time` in the help, while `-o start_time` was an unknown column. allot's
    own columns, which squeue's letters would misname, are named without one."""
    if letter is None:
        assert re.search(rf"\b{name}\b", _format_help("queue"))
        assert v.parse_format(name) == [name]
        return
    assert re.search(rf"%{letter} {name}\b", _format_help("queue"))
    assert v.parse_format(name) == v.parse_format(f"%{letter}") == [name]


def test_acct_format_help_names_only_fields_format_reads() -> None:
    from projections.acct import parse_acct_format

    text = re.sub(r"\([^)]*\)", "", _format_help("acct")).split(":", 1)[1]  # no asides
    text = text.replace("sacct's", "").replace("work too.", "")
    names = [n.strip() for n in re.split(r"[,;]", text) if n.strip()]
    assert len(names) == 38  # every field, and sacct's names for some
    assert parse_acct_format(",".join(names))


@pytest.mark.parametrize("command", ["queue", "acct"])
def test_users_and_allocations_take_comma_separated_lists(
    journal: Path, folded: v.JournalView, command: str
) -> None:
    """As squeue/sacct -u a,b: each listed user's (allocation's) workloads, not none."""

    def ids(*args: str) -> set[str]:
        result = allot(command, "--journal", str(journal), "--json", *args)
        assert result.returncode == 0, result.stderr
        return {r["id"] for r in orjson.loads(result.stdout)["workloads"]}

    users = sorted({r["user"] for r in v.queue_rows(folded)})[:2]
    leaves = sorted({r["allocation"] for r in v.queue_rows(folded)})[:2]
    assert len(users) == 2 and len(leaves) == 2
    both = ids("-u", ",".join(users))
    assert both and both == ids("-u", users[0]) | ids("-u", users[1])
    paths = ids("-a", ",".join(leaves))
    assert paths and paths == ids("-a", leaves[0]) | ids("-a", leaves[1])
    result = allot(command, "--journal", str(journal), "-a", f"{leaves[0]},lab/nope")
    assert result.returncode == 2 and "-a lab/nope: no such allocation" in result.stderr


@pytest.mark.parametrize("command", ["queue", "acct"])
def test_me_is_the_callers_user_as_squeue_me(
    journal: Path, folded: v.JournalView, command: str
) -> None:
    """`squeue --me` was "No such option: --me"."""

    def ids(user: str, *args: str) -> set[str]:
        run = allot(command, "--journal", str(journal), "--json", *args, env={"USER": user})
        assert run.returncode == 0, run.stderr
        return {r["id"] for r in orjson.loads(run.stdout)["workloads"]}

    first, second = sorted({r["user"] for r in v.queue_rows(folded)})[:2]
    mine = ids(first, "--me")
    assert mine and mine == ids(second, "-u", first)
    assert ids(first, "--me", "-u", second) == mine | ids(first, "-u", second)


def test_queue_of_ended_workloads_says_how_they_ended(
    journal: Path, records: list[dict[str, Any]]
) -> None:
    """squeue -j shows a job that just completed (CD); allot's queue said only "no
    workloads pending or running", as if the id named nothing."""
    done = next(
        r["workload"]
        for r in records
        if r["type"] == "workload.finished" and r.get("outcome") == "completed"
    )
    result = allot("queue", "--journal", str(journal), "-j", done)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == (
        "no workloads pending or running for that filter; ended: 1 completed "
        f"(`allot acct -j {done}` has the records)"
    )
    # another user's filter leaves it out: the note counts what the filters keep
    other = allot("queue", "--journal", str(journal), "-j", done, "-u", "nobody")
    assert other.stdout.splitlines()[-1] == "no workloads pending or running for that filter"


# ------------------------------------------------------------------ acct


def test_acct_lists_every_workload_like_sacct(journal: Path, folded: v.JournalView) -> None:
    from projections.acct import acct_rows

    result = allot("acct", "--journal", str(journal), "--json")
    assert result.returncode == 0, result.stderr
    payload = orjson.loads(result.stdout)
    assert payload["workloads"] == orjson.loads(orjson.dumps(acct_rows(folded)))
    assert payload["totals"]["workloads"] == len(payload["workloads"]) == 80
    table = allot("acct", "--journal", str(journal), "-u", "bob", "-s", "completed,preempted")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[1].split()[:4] == ["ID", "ALLOCATION", "USER", "STATE"]
    assert len(lines) > 3  # some of bob's work ended so
    assert all(line.split()[2] == "bob" for line in lines[2:-1])
    assert {line.split()[3] for line in lines[2:-1]} <= {"COMPLETED", "PREEMPTED"}
    assert lines[-1].startswith(f"{len(lines) - 3} workloads, ")
    # sacct's short state codes read the same
    coded = allot("acct", "--journal", str(journal), "-u", "bob", "-s", "cd,PR")
    assert coded.returncode == 0 and coded.stdout == table.stdout


def test_acct_totals_count_states_with_thousands_separators(tmp_path: Path) -> None:
    """As the workload count beside them ("1,200 workloads"); it read "1200 pending"."""
    from projections.usage import JournalBuilder

    j = JournalBuilder(cluster="default").host("h0").budget("lab", 1).budget("lab/a", 1)
    for i in range(1200):
        j.submit(f"w{i}", "lab/a", 8)
    path = j.write(tmp_path / "journal.jsonl")
    result = allot("acct", "--journal", str(path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1].startswith("1,200 workloads"), result.stdout[-300:]
    assert result.stdout.splitlines()[-1].endswith("now 1,200 pending"), result.stdout[-300:]


def test_acct_format_and_parsable_are_for_scripts(journal: Path, folded: v.JournalView) -> None:
    from projections.acct import acct_rows

    rows = acct_rows(folded)
    result = allot("acct", "--journal", str(journal), "-p", "-o", "id,state,gpus,tags")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "ID|STATE|GPUS|TAGS"
    assert lines[1:] == [f"{r['id']}|{r['state']}|{r['gpus']}|{','.join(r['tags'])}" for r in rows]
    bare = allot("acct", "--journal", str(journal), "-p", "-n", "-o", "id,state,gpus,tags")
    assert bare.stdout.splitlines() == lines[1:]  # sacct -n: the same, without the header
    nothing = allot("acct", "--journal", str(journal), "-p", "-u", "nobody")
    assert nothing.stdout.splitlines() == [  # the header alone: a script sees no rows
        "ID|ALLOCATION|USER|STATE|GPUS|ALLOC|SUBMITTED|START|END|WAIT|RUN|GPU_H|N|REASON"
    ]


def test_acct_totals_parts_add_up_to_the_total_as_shown(tmp_path: Path) -> None:
    """'1.1 GPU-hours run (1.0 charged, 0.0 unallocated)': each rounded on its own, the
    parts did not add up; one more decimal where they would not."""
    from projections.usage import JournalBuilder

    j = JournalBuilder().host("h0").budget("lab", 1)
    j.submit("paid", "lab", 1).submit("free", "lab", 1, min_runtime=0)
    j.place("paid", {"h0": [0]}).place("free", {"h0": [1]})
    j.at(144).finish("free").at(3744).finish("paid")  # 0.04 and 1.04 GPU-hours
    path = j.write(tmp_path / "journal.jsonl")
    table = allot("acct", "--journal", str(path))
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[-1] == (
        "2 workloads, 1.08 GPU-hours run (1.04 charged, 0.04 unallocated); now 2 completed"
    )


@pytest.mark.parametrize(
    ("args", "last_line", "json_totals"),
    [
        pytest.param(
            [],
            "3 workloads, 11.0 GPU-hours run (6.0 charged, 5.0 unallocated); now 3 completed",
            {"gpu_hours": 11.0, "charged_gpu_hours": 6.0, "unallocated_gpu_hours": 5.0},
            id="whole-lives",
        ),
        pytest.param(
            ["-S", "2026-01-01T01:30"],
            "2 workloads, 2.5 GPU-hours run in the window (2.5 charged, 0.0 unallocated; "
            "7.0 over their whole lives); now 2 completed",
            {
                "window_gpu_hours": 2.5,
                "window_charged_gpu_hours": 2.5,
                "window_unallocated_gpu_hours": 0.0,
            },
            id="window",
        ),
    ],
)
def test_acct_totals_split_charged_from_unallocated_gpu_hours(
    tmp_path: Path, args: list[str], last_line: str, json_totals: dict[str, float]
) -> None:
    """The charged part is what `allot shares` counts; sums by hand in
    tests/projections/acct_histories.py's `charged_and_free`."""
    from tests.projections.acct_histories import charged_and_free

    path = charged_and_free().write(tmp_path / "journal.jsonl")
    table = allot("acct", "--journal", str(path), *args)
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[-1] == last_line
    payload = orjson.loads(allot("acct", "--journal", str(path), *args, "--json").stdout)
    assert {k: payload["totals"][k] for k in json_totals} == json_totals
    split = allot(
        "acct", "--journal", str(path), "-p", "-o", "id,charged_gpu_hours,unallocated_gpu_hours"
    )
    assert split.stdout.splitlines() == [
        "ID|CHARGED_GPU_H|UNALLOC_GPU_H",
        "paid|4.0|0.0",
        "free|0.0|4.0",
        "mixed|2.0|1.0",
    ]


@pytest.mark.parametrize(
    ("command", "args"),
    [
        pytest.param("queue", [], id="queue"),
        pytest.param("queue", ["--long"], id="queue-long"),
        pytest.param("queue", ["--start"], id="queue-start"),
        pytest.param("queue", ["-u", "nobody"], id="queue-empty"),
        pytest.param("queue", ["-o", "%i %T", "-u", "nobody"], id="queue-format-empty"),
        pytest.param("acct", [], id="acct"),
        pytest.param("acct", ["-u", "bob"], id="acct-user"),
        pytest.param("acct", ["-u", "nobody"], id="acct-empty"),
    ],
)
def test_noheader_leaves_the_rows_of_the_table_alone(
    journal: Path, command: str, args: list[str]
) -> None:
    """squeue -h and sacct -n: one line per workload, without the title, the column
    names and the lines after them; not only with --format or -p."""
    flag = "-h" if command == "queue" else "-n"
    table = allot(command, "--journal", str(journal), *args)
    bare = allot(command, "--journal", str(journal), *args, flag)
    assert bare.returncode == 0, bare.stderr
    rows = orjson.loads(allot(command, "--journal", str(journal), *args, "--json").stdout)
    count = len(rows["workloads"])
    assert count or "nobody" in args
    if "-o" in args:  # --format prints the column names without a title
        assert bare.stdout == "".join(line + "\n" for line in table.stdout.splitlines()[1:])
        return
    assert bare.stdout.splitlines() == table.stdout.splitlines()[2 : 2 + count]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["-o", "id,bogus"], "unknown field bogus"),
        (["-o", ""], "no fields"),
        (["-s", "done"], "--state done: unknown"),
        (["-s", ""], "--state: give states"),
        (["--since", "yesterdayish"], "not a time"),
        (["-S", "1h", "-E", "2h"], "is before --since"),
        (["-j", ""], "--jobs: give workload ids"),
        (["-j", "x_[0-2"], "BASE_[SPEC]"),
        (["-a", "lab/typo"], "-a lab/typo: no such allocation"),
    ],
    ids=[
        "unknown-field",
        "no-fields",
        "unknown-state",
        "no-state",
        "bad-since",
        "until-before-since",
        "no-jobs",
        "bad-array",
        "unknown-allocation",
    ],
)
def test_acct_errors_are_one_line(journal: Path, args: list[str], needle: str) -> None:
    one_line_error(allot("acct", "--journal", str(journal), *args), needle)


def _removed_allocation(folder: Path) -> Path:
    """A journal where lab/gone ran `old` (finished), then was removed; lab/a runs
    `live`; lab/back was removed and set again."""
    from projections.usage import JournalBuilder

    j = JournalBuilder().host("h0").budget("lab", 1).budget("lab/a", 1).budget("lab/gone", 1)
    j.budget("lab/back", 1).add("budget.removed", actor="admin", allocation="lab/back")
    j.budget("lab/back", 1)
    j.submit("old", "lab/gone", 4).place("old", {"h0": [0, 1, 2, 3]})
    j.at(3600).finish("old").add("budget.removed", actor="admin", allocation="lab/gone")
    j.submit("live", "lab/a", 4).place("live", {"h0": [0, 1, 2, 3]})
    return j.write(folder / "journal.jsonl")


@pytest.mark.parametrize(
    ("args", "ids"),
    [
        pytest.param(["-a", "lab/gone"], ["old"], id="removed"),
        pytest.param(["-a", "lab/gone/"], ["old"], id="removed-trailing-slash"),
        pytest.param(["-a", "lab/gone,lab/a"], ["old", "live"], id="removed-and-live"),
        pytest.param(["-a", "lab"], ["old", "live"], id="above-it"),
        pytest.param(["-a", "lab/gone", "-u", "nobody"], [], id="removed-no-match"),
        pytest.param(["-a", "lab/back"], [], id="removed-and-set-again"),
    ],
)
def test_acct_lists_the_past_work_of_a_removed_allocation(
    tmp_path: Path, args: list[str], ids: list[str]
) -> None:
    """sacct keeps the jobs of a deleted account: `-a PATH` of an allocation that
    `budget remove` took out of the tree had been refused as no such allocation."""
    journal = _removed_allocation(tmp_path)
    result = allot("acct", "--journal", str(journal), "--json", *args)
    assert result.returncode == 0, result.stderr
    assert [r["id"] for r in orjson.loads(result.stdout)["workloads"]] == ids


@pytest.mark.parametrize(
    ("command", "allocation", "says"),
    [
        pytest.param("acct", "lab/typo", "-a lab/typo: no such allocation", id="acct-typo"),
        pytest.param("queue", "lab/typo", "-a lab/typo: no such allocation", id="queue-typo"),
        pytest.param(
            "queue",
            "lab/gone",
            "-a lab/gone: removed from cluster test's budget tree at 2026-01-01 01:00:00 UTC, "
            "so nothing of it is live; `allot acct -a lab/gone` lists its past work",
            id="queue-removed",
        ),
    ],
)
def test_a_typo_and_in_the_queue_a_removed_allocation_are_refused(
    tmp_path: Path, command: str, allocation: str, says: str
) -> None:
    journal = _removed_allocation(tmp_path)
    one_line_error(allot(command, "--journal", str(journal), "-a", allocation), says)


@pytest.mark.parametrize(
    ("command", "inbox"),
    [
        pytest.param(["queue"], "requests", id="queue"),
        pytest.param(["acct"], "requests", id="acct"),
        pytest.param(["shares"], "requests", id="shares"),
        pytest.param(["host", "list"], "requests", id="host-list"),
        pytest.param(["why", "x"], "requests", id="why"),
        pytest.param(["usage"], "requests", id="usage"),
        pytest.param(["queue", "--cluster", "c1"], "requests", id="queue-of-a-cluster"),
        pytest.param(["queue"], "empty", id="queue-empty-inbox"),
        pytest.param(["queue"], "started-again", id="queue-inbox-started-again"),
    ],
)
def test_an_inbox_read_as_a_journal_says_so(
    tmp_path: Path, journal: Path, command: list[str], inbox: str
) -> None:
    """`--journal DIR/inbox.jsonl` had read as "the journal is empty": its records wrap
    requests the scheduler has not taken yet, and carry no journal record type."""
    data = tmp_path / "data"
    data.mkdir()
    if inbox == "requests":
        for args in (("budget", "set", "lab", "1"), ("host", "register", "h0", "8")):
            assert allot(*args, "--data", str(data)).returncode == 0
    elif inbox == "started-again":  # the header `allot serve` writes after a cut by hand
        (data / "inbox.jsonl").write_bytes(b'{"inbox_base":6}\n')
    else:
        (data / "inbox.jsonl").write_bytes(b"")
        shutil.copy(journal, data / "journal.jsonl")
    one_line_error(
        allot(*command, "--journal", str(data / "inbox.jsonl")),
        f"{data / 'inbox.jsonl'} is an embedded inbox (requests not yet scheduled), not a "
        f"journal; the scheduler's journal is {data / 'journal.jsonl'}: --journal "
        f"{data / 'journal.jsonl'}, or --data {data}",
    )


def test_every_view_says_what_moment_its_ratios_are_as_of(
    journal: Path, records: list[dict[str, Any]], folded: v.JournalView
) -> None:
    """Ratios and ranks are read as of the last usage bucket edge: shares, queue and why
    name that moment alike, and it is an edge at or before the journal's latest time."""
    state = folded.require()
    edge = state.charged.last_edge(state.now)
    assert edge <= state.now and edge % state.config.bucket == 0
    wid = next(r["workload"] for r in records if r["type"] == "workload.submitted")
    said = set()
    for args in (["shares"], ["queue"], ["why", wid]):
        shown = allot(*args, "--json", "--journal", str(journal))
        assert shown.returncode == 0, shown.stderr
        said.add(orjson.loads(shown.stdout)["ratios_as_of"])
    assert said == {v.iso(edge)}


@pytest.mark.parametrize(
    ("command", "hint"),
    [
        (["queue"], "read a journal file with --journal"),
        (["submit", "-A", "lab/a", "-G", "1", "--min-runtime", "15m"], None),
        (["cancel", "01M8PAAAXSY5ADR5W57JR0MR4Z"], None),
    ],
    ids=["read", "submit", "cancel"],
)
def test_data_naming_a_file_of_the_folder_points_at_the_folder(
    tmp_path: Path, command: list[str], hint: str | None
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "inbox.jsonl").write_bytes(b"")
    inbox = data / "inbox.jsonl"
    shown = allot(*command, "--data", str(inbox))
    one_line_error(shown, f"--data {inbox}: a file", f"(--data {data})")
    assert (hint in shown.stderr) if hint else "--journal" not in shown.stderr
    assert inbox.read_bytes() == b""  # nothing was sent


# ------------------------------------------------------------------ shares


def test_shares(journal: Path) -> None:
    table = allot("shares", "--journal", str(journal))
    assert table.returncode == 0, table.stderr
    assert "ALLOCATION" in table.stdout and "RATIO" in table.stdout
    result = allot("shares", "--journal", str(journal), "--json")
    assert result.returncode == 0, result.stderr
    payload = orjson.loads(result.stdout)
    rows = {r["path"]: r for r in payload["allocations"]}
    assert set(rows) == {"lab", "lab/train", "lab/eval"}
    assert rows["lab/train"]["share"] == 0.75 and rows["lab/eval"]["share"] == 0.25
    assert sorted(r["rank"] for r in rows.values() if r["leaf"]) == [1, 2]
    assert payload["capacity"] == 32
    long = allot("shares", "--journal", str(journal), "-l")
    assert long.returncode == 0, long.stderr
    assert long.stdout.splitlines()[1].split()[-2:] == ["MANAGERS", "MEMBERS"]


def zero_share_journal(folder: Path) -> Path:
    """lab/tulu's carol runs charged from 0; at 10m lab/tulu's weight becomes 0; at 1h
    (protection over) olmo's alice preempts her (ratios compared: tulu's infinite);
    alice ends at 2h and carol runs again, unallocated, ranked last with an infinite
    ratio."""
    from tests.domain.builders import cluster

    c = cluster(hosts=1, headroom_hosts=0, window="1d")
    c.tree({"lab/olmo": 1, "lab/tulu": 1})
    c.submit("carol", "lab/tulu", gpus=8, min_runtime="1h")
    c.at("10m").budget("lab/tulu", 0)
    c.after(1).submit("alice", "lab/olmo", gpus=8, min_runtime="1h")
    c.at("1h").tick()
    c.at("2h").finish("alice")
    c.at("2h1m").tick()
    return write_cluster(c, folder)


def write_cluster(c: Any, folder: Path) -> Path:
    """A tests.domain.builders cluster's journal as the scheduler writes it (its
    config first), in folder/journal.jsonl."""
    from domain import events as ev

    first = ev.ConfigSet(
        id="cfg", time=c.start, cluster=c.name, actor=ev.SCHEDULER,
        config=c.state.config.model_dump(mode="json"),
    )  # fmt: skip
    path = folder / "journal.jsonl"
    records = [ev.event_to_dict(e) for e in [first, *c.journal]]
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return path


@pytest.mark.parametrize(
    ("children", "cell"),
    [(False, "alice,bob"), (True, "alice,bob (inactive: not a leaf)")],
    ids=["a-leaf", "given-children"],
)
def test_shares_long_marks_members_that_may_not_submit(
    tmp_path: Path, children: bool, cell: str
) -> None:
    from tests.domain.builders import cluster

    c = cluster(hosts=1)
    c.budget("lab", 1, managers=("pm",))
    c.budget("lab/olmo", 3, members=("alice", "bob"), actor="pm")
    if children:
        c.budget("lab/olmo/pre", 1, members=("alice",), actor="pm")
    result = allot("shares", "-l", "--journal", str(write_cluster(c, tmp_path)))
    assert result.returncode == 0, result.stderr
    line = next(x for x in result.stdout.splitlines() if x.split()[:1] == ["olmo"])
    assert line.rstrip().endswith(f"  {cell}"), line


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        # sshare-like: WEIGHT SHARE USAGE RATIO ... on tulu's line
        (["shares"], re.compile(r"^\s*tulu\s+0\s+0\.0000\s+\S+\s+inf\s", re.M)),
        (["queue", "-o", "id,ratio"], re.compile(r"^carol\s+inf$", re.M)),
        (["why", "carol"], "compared fair-share ratios lab/olmo 0, lab/tulu inf"),
        (["why", "carol"], "allocation rank 2, fair-share ratio inf, share 0,"),
        # the history lines under the answer
        (["why", "carol"], re.compile(r"^\s+ratios lab/olmo 0, lab/tulu inf \(hysteresis", re.M)),
        (["why", "carol"], re.compile(r"^\s+rank 2, ratio inf, share 0, position 1", re.M)),
    ],
    ids=[
        "shares",
        "queue-ratio-column",
        "why-preemption-numbers",
        "why-placement-numbers",
        "why-history-preempted",
        "why-history-placed",
    ],
)
def test_a_zero_shares_ratio_reads_inf_everywhere(
    tmp_path: Path, args: list[str], needle: str | re.Pattern[str]
) -> None:
    """It printed three ways: inf in shares, blank in queue --long, inf and - in why."""
    path = zero_share_journal(tmp_path)
    result = allot(*args, "--journal", str(path), env={"COLUMNS": "250"})
    assert result.returncode == 0, result.stderr
    if isinstance(needle, str):
        assert needle in result.stdout, result.stdout
    else:
        assert needle.search(result.stdout), result.stdout


def test_a_zero_shares_ratio_is_null_in_every_json(tmp_path: Path) -> None:
    path = zero_share_journal(tmp_path)

    def payload(*args: str) -> Any:
        return orjson.loads(allot(*args, "--journal", str(path), "--json").stdout)

    shares = {r["path"]: r for r in payload("shares")["allocations"]}
    queue = {r["id"]: r for r in payload("queue")["workloads"]}
    why = payload("why", "carol")
    assert shares["lab/tulu"]["ratio"] is None and shares["lab/tulu"]["rank"] == 2
    assert queue["carol"]["ratio"] is None and queue["carol"]["rank"] == 2
    assert why["placements"][-1]["explain"]["ratio"] is None
    assert why["preemptions"][0]["explain"]["compared"]["lab/tulu"] is None


# ------------------------------------------------------------------ why


def test_why_preempted_workload(journal: Path, records: list[dict[str, Any]]) -> None:
    q = next(r for r in records if r["type"] == "workload.preempted")
    result = allot("why", q["workload"], "--journal", str(journal))
    assert result.returncode == 0, result.stderr
    assert f"workload {q['workload']}" in result.stdout
    assert f"reason {q['reason']}" in result.stdout
    assert q["beneficiary"] in result.stdout
    lines = result.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("history, "))
    # the answer (now, and for live work what is expected), then its history under it
    now_at = max(i for i, line in enumerate(lines[:at]) if line.startswith("now: "))
    # (numbers indented under now: its allocation's fair share and what is ahead)
    assert all(
        line.startswith(("expected", "  (a forecast", "    ")) for line in lines[now_at + 1 : at]
    )
    assert any(f"preempted #{q['attempt']}" in line for line in lines[at + 1 :])
    as_json = allot("why", q["workload"], "--journal", str(journal), "--json")
    payload = orjson.loads(as_json.stdout)
    assert payload["preemptions"][0]["reason"] == q["reason"]
    assert payload["preemptions"][0]["explain"] == q["explain"]
    first = next(e for e in payload["history"] if e["event"] == "preempted")
    assert (first["reason"], first["explain"]) == (q["reason"], q["explain"])


def test_why_placed_workload_quotes_explain(journal: Path, records: list[dict[str, Any]]) -> None:
    p = next(r for r in records if r["type"] == "workload.placed" and r["charged"])
    result = allot("why", p["workload"], "--journal", str(journal))
    assert result.returncode == 0, result.stderr
    assert f"allocation rank {p['explain']['rank']}" in result.stdout
    assert f"fair-share ratio {v.show(p['explain']['ratio'])}" in result.stdout
    assert f"protected until {v.iso(p['protected_until'])}" in result.stdout


# ------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    ("make_args", "needles"),
    [
        pytest.param(lambda j, d: ["queue"], ["--journal FILE"], id="no-source"),
        pytest.param(
            lambda j, d: ["queue", "--journal", str(d / "nope.jsonl")],
            ["no such journal file"],
            id="missing-file",
        ),
        pytest.param(
            lambda j, d: ["shares", "--journal", str(d / "empty.jsonl")], ["empty"], id="empty-file"
        ),
        pytest.param(
            lambda j, d: ["queue", "--data", str(d / "nofolder")],
            ["no such folder"],
            id="missing-folder",
        ),
        pytest.param(
            lambda j, d: ["queue", "--data", str(d)],
            ["no such embedded journal"],
            id="folder-without-journal",
        ),
        pytest.param(
            lambda j, d: ["why", "0-00000", "--journal", str(j)],
            ["is the start of", "0-000001", "give more of the id"],
            id="unknown-id",
        ),
        pytest.param(
            lambda j, d: ["queue", "--journal", str(j), "--cluster", "other"],
            ["holds: tiny"],
            id="wrong-cluster",
        ),
        pytest.param(
            lambda j, d: ["queue", "--journal", str(j), "-o", "%Z"],
            ["unknown format field %Z"],
            id="bad-format",
        ),
        pytest.param(
            lambda j, d: ["queue", "--journal", str(d / "corrupt.jsonl")],
            ["corrupt.jsonl:2: not JSON"],
            id="corrupt-record",
        ),
        pytest.param(
            lambda j, d: ["shares", "--kafka", "127.0.0.1:1"],
            ["cannot reach Kafka at 127.0.0.1:1"],
            id="unreachable-broker",
        ),
    ],
)
def test_errors_are_one_line(
    journal: Path, tmp_path: Path, make_args: Any, needles: list[str]
) -> None:
    (tmp_path / "empty.jsonl").write_bytes(b"")
    first = journal.read_bytes().splitlines()[0]
    (tmp_path / "corrupt.jsonl").write_bytes(first + b"\n{not json\n")
    one_line_error(allot(*make_args(journal, tmp_path)), *needles)


@pytest.mark.parametrize(
    "command",
    [["queue"], ["acct"], ["shares"], ["host", "list"], ["why", "0-000001"]],
    ids=lambda c: " ".join(c),
)
def test_corrupt_record_is_named_by_file_and_line(
    journal: Path, tmp_path: Path, command: list[str]
) -> None:
    """As `allot replay` names it (`FILE:LINE: not JSON: ...`); these said `journal
    record 3 is not JSON: not JSON: ...`, without the file. The line, not the record's
    number: a blank line and another cluster's record come before it."""
    first, second, *rest = journal.read_bytes().splitlines(keepends=True)
    other = orjson.dumps({**orjson.loads(first), "cluster": "other"}) + b"\n"
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"".join([first, b"\n", other, second, b"{not json\n", *rest]))
    result = allot(*command, "--journal", str(bad), "--cluster", "tiny")
    one_line_error(result, f"error: {bad}:5: not JSON: ")
    assert result.stderr.count("not JSON") == 1


def test_metrics_names_a_corrupt_record_by_file_and_line(journal: Path, tmp_path: Path) -> None:
    first, *rest = journal.read_bytes().splitlines(keepends=True)
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"".join([first, b"\n", b"[1]\n", *rest]))
    result = allot("metrics", "--journal", str(bad), "--no-follow", "--port", "1")
    one_line_error(result, f"error: {bad}:3: not a JSON object but list")


def unintroduced_host(journal: Path, tmp_path: Path) -> tuple[Path, str]:
    """The journal without the registration of the host its first placement uses, and
    with a blank line, another cluster's record and a record of a type this version
    does not know before that placement (so its line is not its record count): the
    file, and how the read commands should name the placement."""
    lines = journal.read_bytes().splitlines(keepends=True)
    records = [orjson.loads(line) for line in lines]
    placed = next(r for r in records if r["type"] == "workload.placed")
    host = next(iter(placed["hosts"]))
    registered = next(
        i for i, r in enumerate(records) if r["type"] == "host.registered" and r["host"] == host
    )
    first = records[0]
    other = orjson.dumps({**first, "cluster": "other"}) + b"\n"
    newer = orjson.dumps({"type": "budget.forecast", "id": "n1", "time": first["time"],
                          "cluster": first["cluster"]}) + b"\n"  # fmt: skip
    kept = [line for i, line in enumerate(lines) if i != registered]
    bad = tmp_path / "unintroduced.jsonl"
    out = [kept[0], b"\n", other, newer, *kept[1:]]
    bad.write_bytes(b"".join(out))
    number = out.index(lines[records.index(placed)]) + 1
    assert number != records.index(placed) + 1  # the line is not the record count
    return bad, (
        f"error: {bad}:{number}: workload.placed {placed['id']} refers to {host!r} that no "
        "earlier record introduces: the journal must be read from its beginning"
    )


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(["queue"], id="queue"),
        pytest.param(["queue", "--start"], id="queue-start"),
        pytest.param(["acct"], id="acct"),
        pytest.param(["shares"], id="shares"),
        pytest.param(["host", "list"], id="host-list"),
        pytest.param(["why", "0-000001"], id="why"),
        pytest.param(["metrics", "--no-follow", "--port", "1"], id="metrics"),
    ],
)
def test_a_record_referring_to_what_no_earlier_one_introduces_is_named_by_file_and_line(
    journal: Path, tmp_path: Path, command: list[str]
) -> None:
    """Named as a corrupt record is (FILE:LINE); these said `record N (...)`, a count of
    the records folded, not the line: a blank line, another cluster's record and a
    record of an unknown type come before it."""
    bad, says = unintroduced_host(journal, tmp_path)
    result = allot(*command, "--journal", str(bad), "--cluster", "tiny")
    one_line_error(result)
    assert result.stderr.strip() == says


@pytest.mark.parametrize(
    "command", [["queue"], ["acct"], ["shares"], ["host", "list"]], ids=lambda c: " ".join(c)
)
def test_truncated_last_line_is_left_out_and_said(
    journal: Path, tmp_path: Path, command: list[str]
) -> None:
    """The answer is the whole lines'; `allot replay` said that the last line is left
    out, these said nothing."""
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(journal.read_bytes() + b'{"type":"workload.subm')
    a = allot(*command, "--journal", str(journal), "--json")
    b = allot(*command, "--journal", str(cut), "--json")
    assert b.returncode == 0, b.stderr
    assert orjson.loads(a.stdout) == orjson.loads(b.stdout)
    assert a.stderr == ""
    assert b.stderr.splitlines() == [
        f"warning: {cut} ends in the middle of a line (cut short, or still being written); "
        "that last line is left out"
    ]


def test_sources_ignore_a_truncated_tail(tmp_path: Path) -> None:
    (tmp_path / "journal.jsonl").write_bytes(b'{"a":1}\n{"b":2}\n{"c":')
    lines = journal_lines(data=tmp_path)
    assert list(lines) == [b'{"a":1}', b'{"b":2}']
    assert lines.cut and lines.place == f"{tmp_path / 'journal.jsonl'}:2"  # type: ignore[attr-defined]
    (tmp_path / "journal.jsonl").write_bytes(b'{"c":')
    with pytest.raises(SourceError, match="empty"):
        list(journal_lines(data=tmp_path))


def test_follow_waits_for_complete_lines(tmp_path: Path) -> None:
    """A cut-short line that the writer truncates and rewrites is read whole, once."""
    path = tmp_path / "journal.jsonl"
    path.write_bytes(b'{"a":1}\n{"b":')
    lines = journal_lines(data=tmp_path, follow=True)
    assert next(lines) == b'{"a":1}'
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(next(lines)), daemon=True)
    reader.start()
    time.sleep(0.3)
    assert not got  # the partial line is not a record
    with path.open("r+b") as f:
        f.truncate(len(b'{"a":1}\n'))
        f.seek(0, 2)
        f.write(b'{"c":3}\n')
    reader.join(timeout=5)
    assert got == [b'{"c":3}']
    assert lines.place == f"{path}:2"  # type: ignore[attr-defined]


# ------------------------------------------------------------------ executor


def _placed(wid: str, attempt: int, t: float) -> dict[str, Any]:
    return {
        "type": "workload.placed",
        "cluster": "c",
        "workload": wid,
        "attempt": attempt,
        "time": t,
    }


def _preempted(wid: str, attempt: int, t: float, requeued: bool = True) -> dict[str, Any]:
    return {
        "type": "workload.preempted",
        "cluster": "c",
        "workload": wid,
        "attempt": attempt,
        "time": t,
        "requeued": requeued,
    }


def _submitted(wid: str, runtime: float | None, resumable: bool = True) -> dict[str, Any]:
    out = {"type": "workload.submitted", "cluster": "c", "workload": wid, "time": 0.0}
    out["resumable"] = resumable
    if runtime is not None:
        out["runtime"] = runtime
    return out


LAUNCHER_CASES = [
    ("runs-its-runtime", 1.0, [_submitted("w", 100), _placed("w", 1, 1000)], {("w", 1): 1100}),
    ("speed-divides", 4.0, [_submitted("w", 100), _placed("w", 1, 1000)], {("w", 1): 1025}),
    (
        "resumable-keeps-progress",
        1.0,
        [
            _submitted("w", 100),
            _placed("w", 1, 1000),
            _preempted("w", 1, 1030),
            _placed("w", 2, 2000),
        ],
        {("w", 2): 2070},
    ),
    (
        "not-resumable-starts-over",
        1.0,
        [
            _submitted("w", 100, resumable=False),
            _placed("w", 1, 1000),
            _preempted("w", 1, 1030),
            _placed("w", 2, 2000),
        ],
        {("w", 2): 2100},
    ),
    (
        "preemption-cancels-the-report",
        1.0,
        [_submitted("w", 100), _placed("w", 1, 1000), _preempted("w", 1, 1030, requeued=False)],
        {},
    ),
    ("no-runtime-runs-until-cancelled", 1.0, [_submitted("w", None), _placed("w", 1, 1000)], {}),
    (
        "finished-elsewhere",
        1.0,
        [
            _submitted("w", 100),
            _placed("w", 1, 1000),
            {"type": "workload.cancelled", "cluster": "c", "workload": "w", "time": 1001},
        ],
        {},
    ),
    (
        "other-cluster",
        1.0,
        [{**_submitted("w", 100), "cluster": "x"}, {**_placed("w", 1, 1000), "cluster": "x"}],
        {},
    ),
]


@pytest.mark.parametrize(
    ("speed", "journal_records", "due"),
    [pytest.param(s, j, d, id=i) for i, s, j, d in LAUNCHER_CASES],
)
def test_simulated_launcher(
    speed: float, journal_records: list[dict[str, Any]], due: dict[tuple[str, int], float]
) -> None:
    launcher = SimulatedLauncher("c", speed)
    for record in journal_records:
        launcher.on_record(record)
    assert launcher.timers == pytest.approx(due)
    if due:
        (wid, attempt), at = next(iter(due.items()))
        assert launcher.due(at - 1) == []
        [report] = launcher.due(at)
        assert report == {
            "type": "workload.finished",
            "v": 1,
            "id": f"executor/c/{wid}/{attempt}",
            "time": at,
            "cluster": "c",
            "actor": "executor",
            "workload": wid,
            "outcome": "completed",
            "attempt": attempt,
        }
        assert launcher.next_due() is None


def _journal_types(folder: Path) -> list[dict[str, Any]]:
    path = folder / "journal.jsonl"
    if not path.exists():
        return []
    return [orjson.loads(x) for x in path.read_bytes().splitlines() if x.strip()]


def _setup_embedded(data: Path) -> tuple[str, str]:
    """Two hosts, one allocation, a 2-second workload and one without a runtime."""
    for args in (
        ["host", "register", "h0", "8"],
        ["host", "register", "h1", "8"],
        ["budget", "set", "lab", "1"],
        ["budget", "set", "lab/a", "1"],
    ):
        result = allot(*args, "--data", str(data))
        assert result.returncode == 0, result.stderr
    ids = []
    for extra in (["--runtime", "2s", "--resumable"], ["--name", "forever"]):
        result = allot(
            "submit", "-A", "lab/a", "-G", "4", "--min-runtime", "1m", "--parsable",
            "--as", "alice", "--data", str(data), *extra,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        ids.append(result.stdout.strip())
    return ids[0], ids[1]


def test_executor_once_on_the_embedded_journal(tmp_path: Path) -> None:
    """submit -> serve places -> executor reports -> serve folds the report."""
    data = tmp_path / "data"
    short, forever = _setup_embedded(data)
    assert allot("serve", "--data", str(data), "--once", "--tick", "0").returncode == 0
    placed = {r["workload"] for r in _journal_types(data) if r["type"] == "workload.placed"}
    assert placed == {short, forever}

    result = allot("executor", "--simulate", "--data", str(data), "--once", "--speed", "10")
    assert result.returncode == 0, result.stderr
    assert f"reported {short} attempt 1 completed" in result.stderr

    assert allot("serve", "--data", str(data), "--once", "--tick", "0").returncode == 0
    finished = [r for r in _journal_types(data) if r["type"] == "workload.finished"]
    assert [(r["workload"], r["attempt"], r["actor"], r["outcome"]) for r in finished] == [
        (short, 1, "executor", "completed")
    ]
    queue = orjson.loads(allot("queue", "--data", str(data), "--json").stdout)
    assert [(r["id"], r["state"]) for r in queue["workloads"]] == [(forever, "RUNNING")]
    why = allot("why", short, "--data", str(data))
    assert "finished (completed)" in why.stdout


def test_the_executor_reports_as_the_principal_given_by_as(tmp_path: Path) -> None:
    """Every other command that sends requests takes --as; the executor reported as
    `executor` whatever the deployment's launcher principal was."""
    data = tmp_path / "data"
    short, _ = _setup_embedded(data)
    assert allot("serve", "--data", str(data), "--once", "--tick", "0").returncode == 0
    empty = allot("executor", "--simulate", "--data", str(data), "--once", "--as", "")
    assert empty.returncode == 2 and empty.stderr.startswith("error: --as: empty"), empty.stderr
    result = allot(
        "executor", "--simulate", "--data", str(data), "--once", "--speed", "10",
        "--as", "launcher-bot",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "reporting as launcher-bot" in result.stderr.splitlines()[0]
    assert allot("serve", "--data", str(data), "--once", "--tick", "0").returncode == 0
    finished = [r for r in _journal_types(data) if r["type"] == "workload.finished"]
    assert [(r["workload"], r["actor"]) for r in finished] == [(short, "launcher-bot")]
    help_lines = allot("executor", "--help").stdout.splitlines()
    help_text = " ".join(line.strip(" │") for line in help_lines)
    assert "--as" in help_text and "Report as this principal (default executor)" in help_text
    # why the default is not $USER, as for every other request command
    assert "Not $USER, unlike the other request commands: the launcher is a role" in help_text


def test_a_restarted_executor_reports_nothing_that_already_ended(tmp_path: Path) -> None:
    """A journal where 3,000 attempts were placed long ago and have since finished, one
    preempted: the executor reads all of it before any report falls due (it used to
    report work whose end it had not read yet: duplicate ids the scheduler rejects)."""
    data = tmp_path / "data"
    data.mkdir()
    n = 3000
    records = [{**_submitted(f"w{i}", 60.0), "cluster": "default"} for i in range(n)]
    records += [{**_placed(f"w{i}", 1, 100.0), "cluster": "default"} for i in range(n)]
    records += [
        {"type": "workload.finished", "cluster": "default", "workload": f"w{i}",
         "attempt": 1, "time": 160.0, "id": f"executor/default/w{i}/1"}
        for i in range(n - 1)
    ]  # fmt: skip
    records.append({**_preempted(f"w{n - 1}", 1, 130.0, requeued=False), "cluster": "default"})
    (data / "journal.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    result = allot("executor", "--simulate", "--data", str(data), "--once", "--speed", "1000")
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[-1] == "allot executor: 0 reports sent"
    assert not (data / "inbox.jsonl").exists() or not (data / "inbox.jsonl").read_bytes()


def test_executor_follows_a_running_scheduler(tmp_path: Path) -> None:
    """`allot serve --data` and `allot executor --simulate` running side by side."""
    data = tmp_path / "data"
    short, _ = _setup_embedded(data)
    env = {k: val for k, val in os.environ.items() if not k.startswith("ALLOT_")}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "allot.cli", *args, "--data", str(data)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
        for args in (["serve", "--tick", "0"], ["executor", "--simulate", "--speed", "4"])
    ]
    try:
        deadline = time.monotonic() + 60
        done = False
        while time.monotonic() < deadline and not done:
            done = any(
                r["type"] == "workload.finished" and r["workload"] == short
                for r in _journal_types(data)
            )
            time.sleep(0.1)
        assert done, [p.poll() for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def test_executor_errors_are_one_line(tmp_path: Path) -> None:
    one_line_error(allot("executor", "--data", str(tmp_path)), "--simulate")
    one_line_error(allot("executor", "--simulate"), "--kafka")
    one_line_error(
        allot("executor", "--simulate", "--speed", "0", "--data", str(tmp_path)), "--speed"
    )
    one_line_error(
        allot("executor", "--simulate", "--once", "--data", str(tmp_path / "nope")),
        "no such folder",
    )


# ------------------------------------------------------------------ kafka


async def _produce(bootstrap: str, topic: str, records: list[dict[str, Any]], key: str) -> None:
    from aiokafka import AIOKafkaProducer

    from streams.topic_admin import create_topics

    await create_topics(bootstrap)  # the broker creates none on first use
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all")
    await producer.start()
    try:
        sent = [
            await producer.send(topic, key=key.encode(), value=orjson.dumps(r)) for r in records
        ]
        await asyncio.gather(*sent)
    finally:
        await producer.stop()


async def _read_inbox(bootstrap: str, cluster: str, want: int) -> list[dict[str, Any]]:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(
        "allot.inbox", bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest"
    )
    await consumer.start()
    found: list[dict[str, Any]] = []
    try:
        deadline = time.monotonic() + 30
        while len(found) < want and time.monotonic() < deadline:
            for batch in (await consumer.getmany(timeout_ms=500)).values():
                for message in batch:
                    if message.key == cluster.encode():
                        found.append(orjson.loads(message.value))
    finally:
        await consumer.stop()
    return found


@pytest.mark.kafka
def test_views_read_the_kafka_journal(
    kafka_bootstrap: str,
    records: list[dict[str, Any]],
    folded: v.JournalView,
) -> None:
    cluster = f"views-{uuid.uuid4().hex[:8]}"
    mine = [{**r, "cluster": cluster} for r in records]
    asyncio.run(_produce(kafka_bootstrap, "allot.journal", mine, cluster))
    result = allot("queue", "--cluster", cluster, "--json", env={"ALLOT_KAFKA": kafka_bootstrap})
    assert result.returncode == 0, result.stderr
    rows = orjson.loads(result.stdout)["workloads"]
    assert [r["id"] for r in rows] == [r["id"] for r in v.queue_rows(folded)]
    shares = allot("shares", "--kafka", kafka_bootstrap, "--cluster", cluster, "--json")
    assert shares.returncode == 0, shares.stderr
    one_line_error(
        allot("queue", "--kafka", kafka_bootstrap, "--cluster", f"{cluster}-none"), "no records"
    )


@pytest.mark.kafka
def test_queue_start_reads_the_kafka_journal_like_a_file(
    kafka_bootstrap: str, records: list[dict[str, Any]], data_dir: Path
) -> None:
    cluster = f"start-{uuid.uuid4().hex[:8]}"
    head = records[: _after_the_last_input(records)]
    asyncio.run(
        _produce(
            kafka_bootstrap, "allot.journal", [{**r, "cluster": cluster} for r in head], cluster
        )
    )
    live = allot("queue", "--start", "--json", "--cluster", cluster, "--kafka", kafka_bootstrap)
    assert live.returncode == 0, live.stderr
    local = allot("queue", "--start", "--json", "--data", str(data_dir), "--cluster", "tiny")
    assert local.returncode == 0, local.stderr
    starts = [
        [
            (r["id"], r["expected_start"], r["expected_nodes"])
            for r in orjson.loads(out)["workloads"]
        ]
        for out in (live.stdout, local.stdout)
    ]
    assert starts[0] == starts[1] and any(start for _, start, _ in starts[0])


@pytest.mark.kafka
def test_executor_once_reports_to_the_kafka_inbox(kafka_bootstrap: str) -> None:
    cluster = f"exec-{uuid.uuid4().hex[:8]}"
    now = time.time()
    journal = [
        {"type": "workload.submitted", "v": 1, "id": "s1", "time": now, "cluster": cluster,
         "actor": "alice", "workload": "w1", "allocation": "lab/a", "gpus": 1, "runtime": 1.0},
        {"type": "workload.placed", "v": 1, "id": f"{cluster}/0", "time": now, "cluster": cluster,
         "actor": "allot", "workload": "w1", "hosts": {"h0": [0]}, "attempt": 1, "charged": True,
         "protected_until": now},
        {"type": "workload.submitted", "v": 1, "id": "s2", "time": now, "cluster": cluster,
         "actor": "alice", "workload": "w2", "allocation": "lab/a", "gpus": 1},
    ]  # fmt: skip
    asyncio.run(_produce(kafka_bootstrap, "allot.journal", journal, cluster))
    result = allot(
        "executor", "--simulate", "--once", "--speed", "2", "--kafka", kafka_bootstrap,
        "--cluster", cluster,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    [report] = asyncio.run(_read_inbox(kafka_bootstrap, cluster, 1))
    assert (report["type"], report["workload"], report["attempt"], report["actor"]) == (
        "workload.finished",
        "w1",
        1,
        "executor",
    )


# ------------------------------------------------------------------ forecast


def _after_the_last_input(records: list[dict[str, Any]]) -> int:
    """Index of the first cause after the last input from outside the simulator (a
    submission or a host change): from there on only executor reports and ticks come."""
    outside = max(
        i
        for i, r in enumerate(records)
        if r["type"] in ("workload.submitted", "host.health", "budget.set")
    )
    return next(
        i
        for i, r in enumerate(records)
        if i > outside and r["type"] in ("workload.finished", "clock.tick")
    )


def test_queue_start_foresees_the_rest_of_a_run_with_no_new_input(
    records: list[dict[str, Any]], journal: Path, tmp_path: Path
) -> None:
    cut = _after_the_last_input(records)
    lines = journal.read_bytes().splitlines()[:cut]
    head = tmp_path / "head.jsonl"
    head.write_bytes(b"\n".join(lines) + b"\n")
    now, end = records[cut - 1]["time"], records[-1]["time"]
    first_placed: dict[str, str] = {}
    for r in records[cut:]:
        if r["type"] == "workload.placed":
            first_placed.setdefault(r["workload"], v.iso(r["time"]))
    horizon = f"{int(end - now)}s"
    result = allot("queue", "--journal", str(head), "--start", "--json", "--horizon", horizon)
    assert result.returncode == 0, result.stderr
    rows = orjson.loads(result.stdout)["workloads"]
    assert rows and {r["state"] for r in rows} == {"PENDING"}
    foreseen = {r["id"]: r["expected_start"] for r in rows if r["expected_start"]}
    assert len(foreseen) >= 3
    assert foreseen == {wid: first_placed[wid] for wid in foreseen}
    assert {r["id"] for r in rows if not r["expected_start"]} == {
        r["id"] for r in rows if r["id"] not in first_placed
    }
    table = allot("queue", "--journal", str(head), "--start", "--horizon", horizon)
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[1].split() == [
        "ID",
        "ALLOCATION",
        "USER",
        "GPUS",
        "START_TIME",
        "SCHEDNODES",
        "REASON",
    ]
    wid, when = next(iter(foreseen.items()))
    line = next(x for x in table.stdout.splitlines() if x.startswith(wid + " "))
    assert when[:16] in line
    assert "START_TIME is a forecast" in table.stdout
    why = allot("why", wid, "--journal", str(head), "--horizon", horizon, "--json")
    assert why.returncode == 0, why.stderr
    assert orjson.loads(why.stdout)["forecast"]["expected_start"] == when
    text = allot("why", wid, "--journal", str(head), "--horizon", horizon)
    assert f"expected start: {when}" in text.stdout


@pytest.mark.parametrize("horizon", ["0s", "-1h", "soon", "400d"], ids=str)
def test_a_bad_horizon_is_one_line(journal: Path, horizon: str) -> None:
    one_line_error(
        allot("queue", "--journal", str(journal), "--start", "--horizon", horizon), "--horizon"
    )


def test_an_allocation_that_is_not_there_is_refused_not_an_empty_queue(
    journal: Path, folded: v.JournalView
) -> None:
    """squeue -p with an unknown partition errs; an empty table hid the typo."""
    one_line_error(
        allot("queue", "--journal", str(journal), "-a", "lab/typo"), "no such allocation"
    )
    leaf = next(iter(folded.state.tree.leaves()))
    result = allot("queue", "--journal", str(journal), "-a", leaf, "-u", "nobody")
    assert result.returncode == 0 and "for that filter" in result.stdout  # there, but empty


def test_a_horizon_without_a_forecast_is_refused(journal: Path, data_dir: Path) -> None:
    one_line_error(allot("queue", "--journal", str(journal), "--horizon", "3d"), "--start")
    submit = allot(
        "submit",
        "--data",
        str(data_dir),
        "-A",
        "lab/eval",
        "-G",
        "1",
        "--min-runtime",
        "15m",
        "--horizon",
        "3d",
    )
    one_line_error(submit, "--test-only")
    assert (data_dir / "inbox.jsonl").read_bytes() == b""


def test_queue_start_lists_soonest_first_and_pct_s_shows_running_starts(
    data_dir: Path,
) -> None:
    result = allot("queue", "--data", str(data_dir), "--cluster", "tiny", "--start", "--json")
    rows = orjson.loads(result.stdout)["workloads"]
    starts = [r["expected_start_time"] for r in rows]
    known = [t for t in starts if t is not None]
    assert known and known == sorted(known) and starts[: len(known)] == known  # N/A last
    plain = allot("queue", "--data", str(data_dir), "--cluster", "tiny", "-o", "%i %t %S", "--json")
    running = [r for r in orjson.loads(plain.stdout)["workloads"] if r["state"] == "RUNNING"]
    table = allot("queue", "--data", str(data_dir), "--cluster", "tiny", "-o", "%i %t %S")
    assert running and all(
        f"{r['id']}  " in table.stdout and r["started"][:16] in table.stdout for r in running
    )


@pytest.mark.parametrize(
    "command",
    [
        ["why", "{wid}"],
        [
            "submit",
            "-A",
            "lab/eval",
            "-G",
            "1",
            "--min-runtime",
            "15m",
            "--as",
            "bob",
            "--test-only",
            "--array",
            "0-300",
            "--parsable",
        ],
        ["shares"],  # a rich table: rich's own handler exited 1
        ["acct", "--json"],
        ["queue"],
    ],
    ids=["why", "submit-test-only", "shares", "acct-json", "queue"],
)
def test_a_closed_pipe_ends_quietly_with_the_shells_sigpipe_status(
    data_dir: Path, records: list[dict[str, Any]], command: list[str]
) -> None:
    """`| head -1` under pipefail: 141 (SIGPIPE), not 1 (a rejection) or an error line.
    The pipe's reading end is closed before the command writes, so every write fails."""
    wid = next(r["workload"] for r in records if r["type"] == "workload.preempted")
    args = [c.format(wid=wid) for c in command]
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "allot.cli",
                *args,
                "--data",
                str(data_dir),
                "--cluster",
                "tiny",
            ],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert run.returncode == 141, run.stderr
    assert "error" not in run.stderr and "Traceback" not in run.stderr


@pytest.mark.parametrize("command", [["shares"], ["acct", "--json"], ["queue"]], ids=str)
def test_output_that_cannot_be_written_says_so(data_dir: Path, command: list[str]) -> None:
    """`> /dev/full`: the write failed, not the journal's read."""
    with open("/dev/full", "w") as full:
        run = subprocess.run(
            [sys.executable, "-m", "allot.cli", *command, "--data", str(data_dir)],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    assert run.returncode == 2
    assert run.stderr.splitlines() == ["error: cannot write the output: No space left on device"]


@pytest.fixture
def data_dir(records: list[dict[str, Any]], journal: Path, tmp_path: Path) -> Path:
    """An embedded folder whose journal is the tiny run up to after its last input."""
    cut = _after_the_last_input(records)
    folder = tmp_path / "cluster"
    folder.mkdir()
    (folder / "journal.jsonl").write_bytes(
        b"\n".join(journal.read_bytes().splitlines()[:cut]) + b"\n"
    )
    (folder / "inbox.jsonl").write_bytes(b"")
    return folder


def _test_only(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return allot("submit", "--data", str(data_dir), "--cluster", "tiny", "--test-only", *args)


def test_submit_test_only_forecasts_and_sends_nothing(data_dir: Path) -> None:
    now = v.fold(v.decode_lines(journal_lines(journal=data_dir / "journal.jsonl"))).now
    args = ["-A", "lab/eval", "-G", "1", "--min-runtime", "15m", "--as", "bob"]
    result = _test_only(data_dir, *args, "--runtime", "10m")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Workload would start at "), result.stdout
    assert "Nothing was submitted (--test-only)" in result.stderr
    parsable = _test_only(data_dir, *args, "--runtime", "10m", "--parsable")
    assert parsable.returncode == 0, parsable.stderr
    start = parsable.stdout.strip()
    assert start.endswith("Z")  # ISO 8601 UTC, as the help says
    start = start.removesuffix("Z")
    assert start >= v.iso(now).replace(" ", "T") and start.replace("T", " ") in result.stdout
    array = _test_only(data_dir, *args, "--array", "0-3")
    assert array.returncode == 0, array.stderr
    assert "of 4 workloads would start" in array.stdout
    assert (data_dir / "inbox.jsonl").read_bytes() == b""  # nothing was sent


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["-A", "lab/eval", "-G", "1", "--min-runtime", "15m", "--as", "mallory"], "not a member"),
        (
            ["-A", "lab/nope", "-G", "1", "--min-runtime", "15m", "--as", "bob"],
            "unknown allocation",
        ),
    ],
    ids=["not-a-member", "unknown-allocation"],
)
def test_submit_test_only_says_why_the_scheduler_would_refuse(
    data_dir: Path, args: list[str], needle: str
) -> None:
    result = _test_only(data_dir, *args)
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert result.stdout.startswith("Workload would be rejected: ") and needle in result.stdout
    assert (data_dir / "inbox.jsonl").read_bytes() == b""


def test_submit_test_only_refuses_wait(data_dir: Path) -> None:
    one_line_error(
        _test_only(data_dir, "-A", "lab/eval", "-G", "1", "--min-runtime", "15m", "--wait", "5"),
        "--test-only",
        "--wait",
    )


def test_host_list_prints_every_host_and_its_json_is_the_projection(
    journal: Path, folded: v.JournalView
) -> None:
    rows = v.host_rows(folded)
    table = allot("host", "list", "--journal", str(journal))
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[1].split()[:5] == ["HOST", "STATE", "GPUS", "HELD", "FREE"]
    assert [line.split()[:2] for line in lines[2:]] == [[r["host"], r["state"]] for r in rows]
    as_json = allot("host", "list", "--journal", str(journal), "--json")
    assert orjson.loads(as_json.stdout)["hosts"] == rows


@pytest.mark.parametrize("command", ["queue", "acct"])
def test_jobs_refuse_an_id_that_names_nothing(journal: Path, command: str) -> None:
    """squeue: "Invalid job id specified"; not an empty answer with exit 0 (prefixes:
    tests/projections/test_views.py)."""
    one_line_error(
        allot(command, "--journal", str(journal), "-j", "no-such-id"), "no workload 'no-such-id'"
    )


@pytest.mark.kafka
def test_a_cluster_with_no_records_on_kafka_names_those_that_have_some(
    kafka_bootstrap: str, records: list[dict[str, Any]]
) -> None:
    """`allot why ID --kafka` without --cluster reads cluster 'default': when that has
    nothing, the error says which clusters the topic holds (as for a file)."""
    from streams.topic_admin import Topics, create_topics

    sfx = f".v{uuid.uuid4().hex[:8]}"
    asyncio.run(create_topics(kafka_bootstrap, topics=Topics.suffixed(sfx)))
    asyncio.run(
        _produce(
            kafka_bootstrap, f"allot.journal{sfx}", [{**r, "cluster": "c7"} for r in records], "c7"
        )
    )
    result = allot(
        "queue", "--kafka", kafka_bootstrap, env={"ALLOT_TOPIC_SUFFIX": sfx}
    )  # no --cluster: 'default'
    one_line_error(
        result, "no records of cluster 'default' (it holds: c7); pick one with --cluster"
    )


# what a terminal obeys: an OSC window title, a clear-line, a carriage return, a colour
HOSTILE = "\x1b]0;pwned\x07\x1b[2K\r\x1b[31m"


@pytest.mark.parametrize(
    "command",
    [
        ["queue"], ["queue", "--long"], ["why", "w-evil"], ["acct"], ["host", "list"],
        ["shares"], ["why", "w"],
    ],
    ids=["queue", "queue-long", "why", "acct", "host-list", "shares", "ambiguous-id-error"],
)  # fmt: skip
def test_journal_data_cannot_drive_the_terminal(tmp_path: Path, command: list[str]) -> None:
    """Ids, tags and reasons come from whoever writes the inbox: a read command shows
    their control characters as escapes (\\x1b) instead of writing them out."""
    from projections.usage import JournalBuilder

    j = JournalBuilder().host("h0").host(f"h1{HOSTILE}")
    j.budget("lab", 1).budget("lab/a", 1)
    j.submit("w-evil", "lab/a", 8, tags=(f"t{HOSTILE}",), actor=f"eve{HOSTILE}")
    j.submit(f"w2{HOSTILE}", "lab/a", 16)
    j.health("h0", False, reason=f"xid{HOSTILE}")
    journal = j.write(tmp_path / "journal.jsonl")
    result = allot(*command, "--journal", str(journal))
    assert result.returncode == (2 if command == ["why", "w"] else 0), result.stderr
    shown = result.stdout + result.stderr
    for raw in ("\x1b]", "\x07", "\x1b[2K", "\r", "\x1b[31m"):
        assert raw not in shown, (raw, shown)
    assert "\\x1b]0;pwned\\x07" in shown or command[0] == "shares"


def test_queue_of_an_ended_job_id_is_empty_not_another_job(journal: Path, records) -> None:
    """`squeue -j` of a finished job shows nothing; the queue folds only live work, and
    an ended id had matched a live one by prefix (or was 'not in the journal')."""
    done = next(r["workload"] for r in records if r["type"] == "workload.finished")
    result = allot("queue", "-j", done, "--journal", str(journal), "--json")
    assert result.returncode == 0, result.stderr
    assert orjson.loads(result.stdout)["workloads"] == []


@pytest.fixture(scope="module")
def on_three_hosts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """w0 runs on h0, the gang w1 on h1 and h2, w2 waits."""
    from projections.usage import JournalBuilder

    j = JournalBuilder(cluster="default").host("h0").host("h1").host("h2").budget("lab", 1)
    j.submit("w0", "lab", 8).place("w0", {"h0": list(range(8))})
    j.submit("w1", "lab", 16).place("w1", {"h1": list(range(8)), "h2": list(range(8))})
    j.submit("w2", "lab", 8)
    return j.write(tmp_path_factory.mktemp("nodes") / "journal.jsonl")


@pytest.mark.parametrize(
    ("hosts", "shown"),
    [("h0", ["w0"]), ("h[1-2]", ["w1"]), ("h2", ["w1"]), ("h0,h2", ["w0", "w1"])],
    ids=["one-host", "a-range", "one-host-of-a-gang", "a-list"],
)
def test_queue_nodelist_shows_what_runs_there(
    on_three_hosts: Path, hosts: str, shown: list[str]
) -> None:
    """squeue -w: the ids alone (-h -o %i) feed `allot requeue $(...)`; waiting work runs
    nowhere, so it is never shown."""
    result = allot("queue", "--journal", str(on_three_hosts), "-w", hosts, "-h", "-o", "%i")
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.split()) == shown


@pytest.mark.parametrize(
    ("hosts", "error"),
    [
        ("h7", "--nodelist: unknown host 'h7'; `allot host list` lists them"),
        ("h[6-9]", "unknown host 'h6' (and 3 more)"),
        ("h[1-", "--nodelist 'h[1-': a '[' is not closed"),
    ],
    ids=["unknown", "unknown-range", "unreadable"],
)
def test_queue_nodelist_refuses_a_host_it_does_not_know(
    on_three_hosts: Path, hosts: str, error: str
) -> None:
    one_line_error(allot("queue", "--journal", str(on_three_hosts), "-w", hosts), error)


def test_queue_iterate_reads_the_journal_again_until_ctrl_c(journal: Path, tmp_path: Path) -> None:
    """`allot queue -i 1`, as squeue -i: a report now, then one a second, each headed
    by the wall-clock time and each from the journal as it is then (records appended
    between them show); Ctrl-C ends it with exit 0 and no traceback."""
    lines = journal.read_bytes().splitlines(keepends=True)
    growing = tmp_path / "growing.jsonl"
    growing.write_bytes(b"".join(lines[: len(lines) // 2]))
    env = {k: val for k, val in os.environ.items() if not k.startswith("ALLOT_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "allot.cli", "queue", "-i", "1", "--journal", str(growing)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    reports: list[list[str]] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if re.fullmatch(r"\w{3} \w{3} \d\d \d\d:\d\d:\d\d \d{4} UTC\n", line):
                reports.append([])
                if len(reports) == 2:  # the first report is out: the journal grows
                    # whole at once (a rewrite in place, read mid-way, is no journal)
                    (tmp_path / "whole.jsonl").write_bytes(b"".join(lines))
                    (tmp_path / "whole.jsonl").replace(growing)
                if len(reports) == 4:
                    break
            else:
                reports[-1].append(line)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    titles = [
        next(line for line in report if line.startswith("cluster ")) for report in reports[:3]
    ]
    whole = v.fold(v.decode_lines(journal_lines(journal=journal)))
    assert v.iso(whole.now) not in titles[0], titles  # half the journal: an earlier time
    assert v.iso(whole.now) in titles[2], titles


def test_queue_iterate_refuses_json(journal: Path) -> None:
    one_line_error(allot("queue", "-i", "1", "--json", "--journal", str(journal)), "--iterate")


def test_why_of_a_job_arrays_base_id_lists_its_tasks(tmp_path: Path) -> None:
    """`allot why BASE` refused the base ("the start of 3 workload ids; give more of
    the id"); it now gives the array, and --json its tasks."""
    from projections.usage import JournalBuilder

    base = "01KQA0000AEEEEEEEEEEEEEEEE"
    j = JournalBuilder().host("h0").budget("lab", 1)
    for i in range(3):
        j.submit(f"{base}_{i}", "lab", 4)
    j.place(f"{base}_0", {"h0": [0, 1, 2, 3]}).place(f"{base}_1", {"h0": [4, 5, 6, 7]})
    journal = j.at(60).finish(f"{base}_1").write(tmp_path / "journal.jsonl")
    shown = allot("why", base, "--journal", str(journal))
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == f"array {base}: 3 tasks — 1 running, 1 pending, 1 completed"
    assert lines[1].startswith(f"  {base}_0  running on h0 — protected until ")
    assert lines[2:] == [
        f"  {base}_1  completed",
        f"  {base}_2  pending — Priority",
        f"`allot why {base}_0` explains one task (its numbers and history)",
    ]
    as_json = orjson.loads(allot("why", base, "--journal", str(journal), "--json").stdout)
    assert as_json["array"] == base and as_json["by_state"]["pending"] == 1
    assert [(t["id"], t["state"]) for t in as_json["tasks"]] == [
        (f"{base}_0", "RUNNING"),
        (f"{base}_1", "COMPLETED"),
        (f"{base}_2", "PENDING"),
    ]
    # the start of the base names the array in its error
    one_line_error(
        allot("why", base[:12], "--journal", str(journal)),
        "is the start of 3 workload ids",
        f"or `allot why {base}` for the job array",
    )


def test_queue_start_shows_names_as_the_queue_does(tmp_path: Path) -> None:
    """`allot queue --help` says NAME follows ID when a shown job has one, and squeue
    --start shows NAME; `allot queue --start` left it out, so two pending jobs of one
    allocation could not be told apart there."""
    d = ["--data", str(tmp_path / "lab")]

    def ok(*args: str) -> str:
        result = allot(*args, *d, env={"USER": "ops"})
        assert result.returncode == 0, result.stderr
        return result.stdout

    ok("host", "register", "h0", "8")
    ok("budget", "set", "lab", "1", "--member", "alice")
    submit = ("submit", "-A", "lab", "--as", "alice", "--min-runtime", "1h", "--runtime", "2h")
    ok(*submit, "-G", "8")
    ok(*submit, "-G", "4", "--name", "eval-sweep")
    ok("serve", "--once", "--tick", "0")
    lines = ok("queue", "--start").splitlines()
    assert lines[1].split()[:3] == ["ID", "NAME", "ALLOCATION"]
    assert lines[2].split()[1] == "eval-sweep"
    long = ok("queue", "--start", "--long").splitlines()[1].split()
    assert long[:2] == ["ID", "NAME"] and long.count("NAME") == 1


def test_shares_one_column_too_wide_fits_an_80_column_terminal(tmp_path: Path) -> None:
    """A lab-like tree whose shares table is 82 columns at its natural width: on an
    80-column terminal every row wrapped, a character or two on a line of its own.
    There the columns are one space apart and each row fits on one line; a pipe still
    gets the two-space table whole."""
    from projections.usage import HOUR, JournalBuilder

    leaf = "multimodal/video-captions"
    j = JournalBuilder(cluster="default").host("h0", gpus=512)
    j.budget("multimodal", 3).budget(leaf, 2).budget("language", 5).budget("language/data", 6)
    j.submit("big", leaf, 320).place("big", {"h0": list(range(320))})
    j.submit("wait", leaf, 512)
    j.at(100 * HOUR).tick()
    path = j.write(tmp_path / "journal.jsonl")

    piped = allot("shares", "--journal", str(path), env={"COLUMNS": "80"}).stdout
    piped_rows = piped.splitlines()[1:]
    assert max(len(line) for line in piped_rows) > 80  # the case this is about
    code, shown = allot_on_a_terminal("shares", "--journal", str(path), columns=80)
    assert code == 0, shown
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown).replace("\r", "")
    rows = plain.splitlines()[1:]  # the title may wrap: it is one sentence
    rows = rows[rows.index(next(r for r in rows if r.startswith("ALLOCATION"))) :]
    assert len(rows) == len(piped_rows) == 5
    assert all(len(line) <= 80 for line in rows), rows
    assert [line.split() for line in rows] == [line.split() for line in piped_rows]
