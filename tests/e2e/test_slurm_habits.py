"""What a Slurm user types by habit, against a folder served by `allot serve --data`:
sacct's and squeue's format strings, job array task ids, squeue's columns."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from domain.durations import format_duration
from tests.e2e.cli import allot, one_line_error

LONG_NAME = "pretrain-llama-70b-long-name"


def _ok(*args: str) -> str:
    result = allot(*args, env={"USER": "ops"})
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Two 8-GPU hosts; alice runs a named 4-GPU job and a 2-GPU filler, and a 4-task
    array of 8-GPU jobs of which one task runs and three wait."""
    data = tmp_path_factory.mktemp("slurm-habits") / "lab"
    d = ["--data", str(data)]
    _ok("host", "register", "h0", "8", *d)
    _ok("host", "register", "h1", "8", *d)
    _ok("budget", "set", "lab", "1", "--manager", "pm", *d)
    _ok("budget", "set", "lab/olmo", "3", "--member", "alice", "--as", "pm", *d)
    submit = ("submit", "-A", "lab/olmo", "--as", "alice", "--parsable", *d)
    named = _ok(*submit, "-G", "4", "--min-runtime", "1h", "--name", LONG_NAME).strip()
    tasks = _ok(*submit, "-G", "8", "--min-runtime", "1h", "--array", "0-3").split()
    filler = _ok(*submit, "-G", "2", "--min-runtime", "0", "--tag", "debug").strip()
    _ok("serve", "--once", "--tick", "0", *d)
    return {
        "data": str(data),
        "named": named,
        "base": tasks[0].rpartition("_")[0],
        "filler": filler,
    }


def _acct(lab: dict[str, str], *args: str) -> list[str]:
    return _ok("acct", "--data", lab["data"], "--noheader", *args).splitlines()


def test_sacct_field_widths_pad_and_cut_as_sacct(lab: dict[str, str]) -> None:
    """`-o JobID,JobName%30` was refused ("unknown field jobname%30"). As sacct, %N is N
    characters right-justified, %-N left-justified, and a longer value is cut with a
    '+'; field names in any case. An id is never cut: a cut ULID names nothing."""
    lines = _acct(lab, "-j", lab["named"], "--format=JobID,JobName%30,State,Elapsed")
    assert len(lines) == 1
    assert lines[0].startswith(f"{lab['named']}  {LONG_NAME:>30}  RUNNING")
    (line,) = _acct(lab, "-j", lab["named"], "-o", "jobname%-8,STATE%5,jobid%20,gpus%1")
    assert line == f"pretrai+  RUNN+  {lab['named']}     4"  # GPUS: the header is wider
    (line,) = _acct(lab, "-j", lab["filler"], "-o", "user%-8,jobname%6,state")
    assert line == f"alice     {'':6}  RUNNING"


def test_sacct_widths_leave_parsable_and_json_alone(lab: dict[str, str]) -> None:
    parsable = _ok("acct", "--data", lab["data"], "-j", lab["named"], "-p", "-o", "jobname%5")
    assert parsable.splitlines() == ["NAME", LONG_NAME]
    rows = orjson.loads(_ok("acct", "--data", lab["data"], "-o", "jobname%5", "--json"))
    assert LONG_NAME in [r["name"] for r in rows["workloads"]]


@pytest.mark.parametrize("spec", ["jobname%0", "jobname%x", "jobname%5000"])
def test_a_bad_sacct_width_is_one_line(lab: dict[str, str], spec: str) -> None:
    result = allot("acct", "--data", lab["data"], "-o", spec)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def _queue(lab: dict[str, str], *args: str) -> list[str]:
    return _ok("queue", "--data", lab["data"], *args).splitlines()


def test_squeue_default_format_keeps_ids_whole(lab: dict[str, str]) -> None:
    """squeue's `%.18i` cut every id to 18 characters: the four tasks of an array all
    read the same, and none could be pasted into `allot why`. The id column widens."""
    lines = _queue(lab, "-o", "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R")
    ids = [line.split()[0] for line in lines[1:]]
    assert sorted(ids) == sorted(
        [lab["named"], lab["filler"], *(f"{lab['base']}_{i}" for i in range(4))]
    )
    assert len({len(line.rstrip()) - len(line.split()[-1]) for line in lines}) == 1, lines
    named = next(line for line in lines if line.split()[0] == lab["named"])
    assert named.split()[1:5] == ["default", "pretrain", "alice", "R"]


def test_squeue_long_format(lab: dict[str, str]) -> None:
    """squeue -O/--Format was "No such option". As squeue: `type[:[.][size][suffix]]`,
    20 wide without a size, 0 (or none after the colon) whole, '.' right-justifies,
    names in any case."""
    lines = _queue(lab, "-j", lab["named"], "-O", "JobID:30,Name:10,UserName:.8,State")
    assert lines == [
        f"{'ID':30}{'NAME':10}{'USER':>8}{'STATE':20}",
        f"{lab['named']:30}{LONG_NAME[:10]}{'alice':>8}{'RUNNING':20}",
    ]
    lines = _queue(lab, "-j", lab["named"], "--Format=jobid:|,timelimit:0|,reasonlist:")
    assert lines[1] == f"{lab['named']}|1h|h0"
    # an id wider than its size widens the column, with a space after it
    (line,) = _queue(lab, "-j", lab["named"], "-h", "-O", "jobid:.8,statecompact:2")
    assert line == f"{lab['named']} R "


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["-O", "JobID,NumCPUs"], "--Format NumCPUs: allot schedules GPUs only"),
        (["-O", "jobid,MinMemory"], "--Format MinMemory: allot schedules GPUs only"),
        (["-o", "%.18i %C"], "%C (CPUs): allot schedules GPUs only"),
        (["-o", "%i %m"], "%m (memory): allot schedules GPUs only"),
        (["-O", "JobID,Bogus"], "unknown field Bogus"),
        (["-O", "jobid", "-o", "%i"], "exclude each other"),
    ],
)
def test_squeue_long_format_errors_are_one_line(
    lab: dict[str, str], args: list[str], needle: str
) -> None:
    result = allot("queue", "--data", lab["data"], *args)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and needle in result.stderr


def test_why_takes_an_array_task_with_a_shortened_base(lab: dict[str, str]) -> None:
    """`allot why PREFIX_2` (BASE_INDEX with the base cut short, as `-j` and `cancel`
    take it) was "no workload"; it is task 2 of the one array whose base PREFIX starts,
    never task 12 of it."""
    prefix = lab["base"][:12]
    shown = _ok("why", f"{prefix}_2", "--data", lab["data"])
    assert shown.startswith(f"workload {lab['base']}_2: lab/olmo, 8 GPUs")
    result = allot("why", f"{prefix}_9", "--data", lab["data"])
    assert result.returncode == 2 and f"no workload '{prefix}_9'" in result.stderr


def test_why_from_the_audit_database_takes_an_array_and_its_tasks(
    lab: dict[str, str], tmp_path: Path
) -> None:
    """With --audit alone, `allot why BASE` was "ambiguous in the audit database"; it
    now lists the tasks by their last recorded state, as `why BASE` does from the
    journal, and `PREFIX_N` names one task there too."""
    db = str(tmp_path / "audit.duckdb")
    _ok("audit", "load", "--data", lab["data"], "--db", db)
    lines = _ok("why", lab["base"], "--audit", db).splitlines()
    assert lines[0].startswith(f"array {lab['base']}: 4 tasks — 1 running, 3 pending")
    assert [line.split()[0] for line in lines[1:5]] == [f"{lab['base']}_{i}" for i in range(4)]
    assert "running attempt 1" in lines[1] and "pending since" in lines[2]
    as_json = orjson.loads(_ok("why", lab["base"], "--audit", db, "--json"))
    assert as_json["by_state"] == {"running": 1, "pending": 3}
    assert [t["state"] for t in as_json["tasks"]] == ["RUNNING", "PENDING", "PENDING", "PENDING"]
    task = _ok("why", f"{lab['base'][:12]}_3", "--audit", db)
    assert task.startswith(f"workload {lab['base']}_3: from the audit database")


def test_dashboard_workload_page_takes_an_array_and_its_tasks(lab: dict[str, str]) -> None:
    """/workload/BASE was a 404 ("the start of 4 workload ids"); it lists the array's
    tasks, each linked to its page, and /workload/PREFIX_N is that task's page."""
    import os
    import signal
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "allot.cli",
            "dashboard",
            "--data",
            lab["data"],
            "--port",
            f"{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )

    def get(path: str) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as r:
            return r.read().decode()

    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                get("/favicon.ico")  # up
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.2)
        page = get(f"/workload/{lab['base']}")
        assert f"Job array {lab['base']}" in page
        for i in range(4):
            assert f'<a href="/workload/{lab["base"]}_{i}">' in page
        assert "4 tasks — 1 running, 3 pending" in page
        task = get(f"/workload/{lab['base'][:12]}_1")
        assert f"workload {lab['base']}_1: lab/olmo" in task
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)


def test_queue_shows_names_when_a_shown_job_has_one(lab: dict[str, str]) -> None:
    """squeue's default shows NAME; allot queue's had no name column at all. It is
    after ID when a shown job has a name, cut to 20 characters (--long: whole), and
    takes no room otherwise; the columns issue #4 asks for stay."""
    lines = _queue(lab)
    assert lines[1].split() == [
        "ID", "NAME", "ALLOCATION", "USER", "STATE", "GPUS", "WAIT/TIME", "REASON", "NODELIST",
    ]  # fmt: skip
    named = next(line for line in lines if line.startswith(lab["named"]))
    assert named.split()[1] == LONG_NAME[:19] + "…"
    assert LONG_NAME in "\n".join(_queue(lab, "--long"))
    unnamed = _queue(lab, "-j", lab["filler"])
    assert unnamed[1].split()[:3] == ["ID", "ALLOCATION", "USER"]
    assert orjson.loads(_ok("queue", "--data", lab["data"], "--json"))["workloads"][0].keys() >= {
        "id",
        "name",
    }


def _queue_json(lab: dict[str, str], wid: str) -> dict[str, object]:
    rows = orjson.loads(_ok("queue", "--data", lab["data"], "--json", "-j", wid))["workloads"]
    return next(r for r in rows if r["id"] == wid)


def test_sacct_partition_nodelist_tres_and_planned(lab: dict[str, str]) -> None:
    """sacct's Partition, NodeList, ReqTRES, AllocTRES, Planned (Reserved before 23.11)
    were "unknown field". Partition is the cluster; NodeList the hosts of its last
    placement ("None assigned" before it ran, as sacct's); the TRES are the GPUs (and
    hosts) allot knows; Planned is how long it waited to start."""
    fields = "JobID,Partition,NodeList,ReqTRES,AllocTRES,State"
    named = _ok("acct", "--data", lab["data"], "-p", "-n", "-j", lab["named"], "-o", fields)
    host = _queue_json(lab, lab["named"])["nodelist"]
    assert host in ("h0", "h1")
    assert named.splitlines() == [
        f"{lab['named']}|default|{host}|gres/gpu=4|gres/gpu=4,node=1|RUNNING"
    ]
    waiting = _acct(lab, "-p", "-j", f"{lab['base']}_3", "-o", fields)
    assert waiting == [f"{lab['base']}_3|default|None assigned|gres/gpu=8||PENDING"]
    for line in _acct(lab, "-p", "-o", "planned,Reserved,wait"):
        planned, reserved, wait = line.split("|")
        assert planned == reserved == wait != ""
    rows = orjson.loads(_ok("acct", "--data", lab["data"], "--json"))["workloads"]
    assert {r["cluster"] for r in rows} == {"default"}
    by_id = {r["id"]: r for r in rows}
    assert (by_id[lab["named"]]["nodelist"], by_id[lab["named"]]["alloc_nodes"]) == (host, 1)
    assert (by_id[f"{lab['base']}_3"]["nodelist"], by_id[f"{lab['base']}_3"]["alloc_nodes"]) == (
        "",
        None,
    )


@pytest.mark.parametrize(
    "spec",
    [
        "JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode",  # sacct's default
        "jobid,ncpus",
        "jobid,ReqMem%10",
        "jobid,maxrss",
    ],
)
def test_sacct_cpu_and_memory_fields_say_allot_schedules_gpus(
    lab: dict[str, str], spec: str
) -> None:
    """They were "unknown field", as if misspelt; allot knows no CPUs or memory."""
    result = allot("acct", "--data", lab["data"], "-o", spec)
    one_line_error(result, "allot schedules GPUs only", "AllocTRES")


def test_sacct_default_shows_names_when_a_job_has_one(lab: dict[str, str]) -> None:
    """sacct's default format has JobName; allot acct's default had no name at all. It
    is after ID when a shown workload has a name, and takes no room otherwise."""
    named = _ok("acct", "--data", lab["data"], "-p", "-j", lab["named"]).splitlines()
    assert named[0].split("|")[:3] == ["ID", "NAME", "ALLOCATION"]
    assert named[1].split("|")[:2] == [lab["named"], LONG_NAME]
    filler = _ok("acct", "--data", lab["data"], "-p", "-j", lab["filler"]).splitlines()
    assert filler[0].split("|")[:2] == ["ID", "ALLOCATION"]


def test_squeue_array_gres_and_tags_letters(lab: dict[str, str]) -> None:
    """squeue's %A (job id), %F (array job id), %K (array task index) and %b (gres) were
    refused or, for %K, printed tags: squeue's meaning wins, tags moved to %w."""
    fmt = "%i|%A|%F|%K|%b|%w"
    (task,) = _queue(lab, "-h", "-j", f"{lab['base']}_2", "-o", fmt)
    assert task == f"{lab['base']}_2|{lab['base']}_2|{lab['base']}|2|gres/gpu:8|"
    (named,) = _queue(lab, "-h", "-j", lab["named"], "-o", fmt)
    assert named == f"{lab['named']}|{lab['named']}|{lab['named']}|N/A|gres/gpu:4|"
    (filler,) = _queue(lab, "-h", "-j", lab["filler"], "-o", fmt)
    assert filler.endswith("|gres/gpu:2|debug")
    # squeue's %.18i habit: the array job id is an id too, never cut
    (task,) = _queue(lab, "-h", "-j", f"{lab['base']}_2", "-o", "%.10F|%.3K")
    assert task == f"{lab['base']} |  2"
    row = _queue_json(lab, f"{lab['base']}_2")
    assert (row["array_job_id"], row["array_task_id"]) == (lab["base"], 2)


def test_squeue_time_left_is_the_protection_left(lab: dict[str, str]) -> None:
    """%L was refused. allot has no time limit (%l is the min runtime); %L is what is
    left of it: the time until running work turns preemptible, a pending job's whole
    min runtime, 0s for unallocated work."""
    fmt = "%i|%l|%L"
    (named,) = _queue(lab, "-h", "-j", lab["named"], "-o", fmt)
    left = _queue_json(lab, lab["named"])["protected_left_s"]
    assert isinstance(left, float | int) and 0 < left <= 3600
    assert named == f"{lab['named']}|1h|{format_duration(left)}"
    (waiting,) = _queue(lab, "-h", "-j", f"{lab['base']}_3", "-o", fmt)
    assert waiting == f"{lab['base']}_3|1h|1h"
    (filler,) = _queue(lab, "-h", "-j", lab["filler"], "-o", fmt)
    assert filler == f"{lab['filler']}|0s|0s"


def test_squeue_long_format_array_gres_nodes_partition(lab: dict[str, str]) -> None:
    """-O's ArrayJobID, ArrayTaskID, tres-per-node, TimeLeft were "unknown field"."""
    task = f"{lab['base']}_0"
    host = _queue_json(lab, task)["nodelist"]
    fields = "ArrayJobID:0|,ArrayTaskID:0|,tres-per-node:0|,NodeList:0|,Partition:0|,TimeLeft:0"
    (line,) = _queue(lab, "-h", "-j", task, "-O", fields)
    assert line.startswith(f"{lab['base']}|0|gres/gpu:8|{host}|default|")
    (line,) = _queue(lab, "-h", "-j", lab["named"], "-O", "gres:0|,ArrayTaskID:.4")
    assert line == "gres/gpu:4| N/A"


def test_squeue_format_variables_are_read_when_no_format_is_given(lab: dict[str, str]) -> None:
    """$SQUEUE_FORMAT and $SQUEUE_FORMAT2 in a Slurm user's profile were ignored. As
    squeue: -o's variable first, else -O's; -o, -O, --long or --start set them aside."""
    d = ("queue", "--data", lab["data"], "-h", "-j", lab["named"])
    env = {"USER": "ops", "SQUEUE_FORMAT": "%i|%u|%t"}
    assert allot(*d, env=env).stdout == f"{lab['named']}|alice|R\n"
    both = {**env, "SQUEUE_FORMAT2": "jobid:0|,username:0"}
    assert allot(*d, env=both).stdout == f"{lab['named']}|alice|R\n"
    assert allot(*d, env={"SQUEUE_FORMAT2": "jobid:0|,username:0"}).stdout == (
        f"{lab['named']}|alice\n"
    )
    assert allot(*d, "-o", "%u", env=env).stdout == "alice\n"
    assert allot(*d, "-O", "username:0", env=env).stdout == "alice\n"
    assert allot(*d, "--long", env=env).stdout.split()[:2] == [lab["named"], LONG_NAME]


def test_a_wrong_squeue_format_variable_is_named(lab: dict[str, str]) -> None:
    result = allot("queue", "--data", lab["data"], env={"SQUEUE_FORMAT": "%i %Z"})
    one_line_error(result, "$SQUEUE_FORMAT", "unknown format field %Z")
    result = allot("queue", "--data", lab["data"], env={"SQUEUE_FORMAT2": "jobid,bogus"})
    one_line_error(result, "$SQUEUE_FORMAT2", "unknown field bogus")


def test_sacct_format_variable_is_read_when_no_format_is_given(lab: dict[str, str]) -> None:
    """$SACCT_FORMAT was ignored; --format still wins over it."""
    d = ("acct", "--data", lab["data"], "-P", "-n", "-j", lab["named"])
    env = {"SACCT_FORMAT": "JobID,User%4,State"}
    assert allot(*d, env=env).stdout == f"{lab['named']}|alice|RUNNING\n"
    assert allot(*d, "-o", "state", env=env).stdout == "RUNNING\n"
    result = allot("acct", "--data", lab["data"], env={"SACCT_FORMAT": "jobid,AllocCPUS"})
    one_line_error(result, "$SACCT_FORMAT", "allot schedules GPUs only")


def test_squeue_format_and_long_exclude_each_other(lab: dict[str, str]) -> None:
    """`-o %i -l` printed the format and dropped --long without a word; squeue refuses."""
    result = allot("queue", "--data", lab["data"], "-o", "%i", "-l")
    one_line_error(result, "-o (--format) and -l (--long) exclude each other")


def test_squeue_gres_is_per_node_for_a_gang(tmp_path: Path) -> None:
    """%b read gres/gpu:16 for a 16-GPU gang on two 8-GPU hosts: with NODES 2, a Slurm
    user reads 32 GPUs. It is per node, as tres-per-node; tres-per-job is the total."""
    d = ["--data", str(tmp_path / "lab")]
    _ok("host", "register", "h0", "8", *d)
    _ok("host", "register", "h1", "8", *d)
    _ok("budget", "set", "lab", "1", *d)
    gang = _ok("submit", "-A", "lab", "-G", "16", "--min-runtime", "1h", "--parsable", *d)
    _ok("serve", "--once", "--tick", "0", *d)
    (line,) = _ok("queue", *d, "-h", "-o", "%i|%b|%D").splitlines()
    assert line == f"{gang.strip()}|gres/gpu:8|2"
    (line,) = _ok("queue", *d, "-h", "-O", "tres-per-node:0|,tres-per-job:0").splitlines()
    assert line == "gres/gpu:8|gres/gpu:16"


def test_sacct_flags_by_habit(lab: dict[str, str]) -> None:
    """sacct's -X (allocations only), -P/--parsable2 and --starttime/--endtime were "No
    such option"; allot has no job steps, so -X changes nothing."""
    d = ("acct", "--data", lab["data"], "-n", "-j", lab["named"], "-o", "jobid,state")
    want = f"{lab['named']}|RUNNING\n"
    assert allot(*d, "-X", "-P").stdout == want
    assert allot(*d, "--parsable2", "--starttime", "today", "--endtime", "now").stdout == want
    assert allot(*d, "-p", "-S", "midnight").stdout == want


def test_sacct_month_day_dates_on_the_command_line(lab: dict[str, str]) -> None:
    """`sacct -S 12/01` and `-S 1201` were "not a time" (1201 was 1201 seconds)."""
    from datetime import UTC, datetime

    now = orjson.loads(_ok("acct", "--data", lab["data"], "--json"))["time"]
    day = datetime.fromtimestamp(now, UTC)
    d = ("acct", "--data", lab["data"], "-P", "-n", "-j", lab["named"], "-o", "jobid")
    for since in (f"{day:%m%d}", f"{day:%m/%d}", f"{day:%m/%d/%y}", f"{day:%m/%d}-00:00"):
        assert _ok(*d, "-S", since, "-E", "now").split() == [lab["named"]], since
    result = allot(*d, "-S", "13/01")
    one_line_error(result, "not a time: '13/01'", "MM/DD")


@pytest.mark.parametrize("command", ["queue", "acct"])
def test_slurms_bare_dash_a_says_what_allots_means(lab: dict[str, str], command: str) -> None:
    """`sacct -a -u bob` (all users) read -u as allot's allocation path, then failed on
    "unexpected extra argument (bob)"."""
    result = allot(command, "--data", lab["data"], "-a", "-u", "alice")
    one_line_error(result, "'-u' is no allocation path", "every user's work is included")


@pytest.mark.parametrize(
    ("command", "slurms"),
    [("cancel", "scancel"), ("hold", "scontrol hold"), ("requeue", "scontrol requeue")],
)
def test_a_bare_dash_a_on_cancel_never_says_everything_is_included(
    lab: dict[str, str], command: str, slurms: str
) -> None:
    """`allot cancel -a -u bob` said "every user's work is included unless -u or --me
    narrows it", as if cancel acted on everyone's work; scancel has no -a, and cancel
    acts only on the ids or filters given. Nothing is sent."""
    result = allot(command, "--data", lab["data"], "-a", "-u", "alice", "--as", "alice")
    one_line_error(result, "'-u' is no allocation path", f"{slurms} has no -a", "-u USER")
    assert "included" not in result.stderr
    assert len(_queue(lab, "-h", "-u", "alice")) == 6


def test_a_bare_dash_a_on_shares_names_sshares_meaning(lab: dict[str, str]) -> None:
    result = allot("shares", "--data", lab["data"], "-a", "-u", "alice")
    one_line_error(result, "'-u' is no allocation path", "sshare's -a (all users)")


def test_sinfo_noheader_and_node_flags(lab: dict[str, str]) -> None:
    """`sinfo -N -h` was "No such option: -h" (and -N): the hosts alone now, one a line;
    -N changes nothing (the list is already per host)."""
    lines = _ok("host", "list", "--data", lab["data"], "-N", "-h").splitlines()
    hosts = orjson.loads(_ok("host", "list", "--data", lab["data"], "--json"))["hosts"]
    assert [line.split()[:2] for line in lines] == [[h["host"], h["state"]] for h in hosts]
    assert len(lines) == 2
    assert _ok("host", "list", "-R", "--noheader", "--data", lab["data"]) == ""


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """lab (managed by pm) over olmo (alice, bob) and tulu (bob); ops (carol)."""
    d = ["--data", str(tmp_path_factory.mktemp("slurm-shares") / "lab")]
    _ok("host", "register", "h0", "8", *d)
    _ok("budget", "set", "lab", "1", "--manager", "pm", *d)
    _ok("budget", "set", "lab/olmo", "3", "--member", "alice,bob", "--as", "pm", *d)
    _ok("budget", "set", "lab/tulu", "1", "--member", "bob", "--as", "pm", *d)
    _ok("budget", "set", "ops", "1", "--member", "carol", *d)
    _ok("serve", "--once", "--tick", "0", *d)
    return d


def _shares(tree: list[str], *args: str) -> list[list[str]]:
    """`allot shares ARGS`'s rows: (allocation, ROLE cell) of each."""
    lines = _ok("shares", *tree, *args).splitlines()
    role_at = lines[1].index("ROLE")
    return [[line.split()[0], line[role_at:].strip()] for line in lines[2:]]


def test_sshare_u_lists_the_allocations_a_user_is_named_on(tree: list[str]) -> None:
    """`allot shares -u alice` (sshare -u: the user's associations) was "No such
    option". It lists where alice is named, and the allocations above for context."""
    assert _shares(tree, "-u", "alice") == [["lab", ""], ["olmo", "member"]]
    assert _shares(tree, "-u", "bob,pm") == [
        ["lab", "pm: manager"],
        ["olmo", "bob: member"],
        ["tulu", "bob: member"],
    ]
    assert "no allocation under lab names carol" in _ok("shares", *tree, "-u", "carol", "-A", "lab")
    rows = orjson.loads(_ok("shares", *tree, "-u", "carol", "--json"))["allocations"]
    assert [(r["path"], r["user_roles"]) for r in rows] == [("ops", {"carol": ["member"]})]
    nobody = _ok("shares", *tree, "-u", "dave")
    assert "no allocation names dave as manager or member" in nobody
    without = _ok("shares", *tree).splitlines()
    assert "ROLE" not in without[1] and len(without) == 2 + 4  # title, header, 4 rows


def test_squeue_filter_variables_are_read_when_no_flag_is_given(lab: dict[str, str]) -> None:
    """$SQUEUE_USERS, $SQUEUE_STATES, $SQUEUE_ACCOUNT and $SQUEUE_NAMES in a Slurm
    user's profile were ignored. As squeue: each is the default of its flag (-u, -t, -A,
    -n); the flag, and --me for -u, set it aside."""
    d = ("queue", "--data", lab["data"], "-h", "-o", "%i")
    everything = allot(*d).stdout.split()
    assert len(everything) == 6

    def shown(*args: str, **env: str) -> list[str]:
        result = allot(*d, *args, env={"USER": "ops", **env})
        assert result.returncode == 0, result.stderr
        return result.stdout.split()

    assert shown(SQUEUE_USERS="bob") == []
    assert shown("-u", "alice", SQUEUE_USERS="bob") == everything
    assert shown("--me", SQUEUE_USERS="bob", USER="alice") == everything
    running = [lab["named"], lab["filler"], f"{lab['base']}_0"]
    assert sorted(shown(SQUEUE_STATES="r")) == sorted(running)
    assert len(shown("-t", "pd", SQUEUE_STATES="r")) == 3
    assert shown(SQUEUE_ACCOUNT="lab/olmo") == everything
    assert shown(SQUEUE_NAMES=LONG_NAME) == [lab["named"]]
    assert shown("-n", "other", SQUEUE_NAMES=LONG_NAME) == []
    assert shown(SQUEUE_USERS="") == everything  # empty: unset, as squeue


@pytest.mark.parametrize(
    ("variable", "value", "needle"),
    [
        ("SQUEUE_STATES", "cd", "--states 'cd'"),
        ("SQUEUE_ACCOUNT", "lab/nope", "-a lab/nope: no such allocation"),
    ],
)
def test_a_wrong_squeue_filter_variable_is_named(
    lab: dict[str, str], variable: str, value: str, needle: str
) -> None:
    result = allot("queue", "--data", lab["data"], env={variable: value})
    one_line_error(result, f"${variable} ({variable}={value!r})", needle)


def test_squeue_sort(lab: dict[str, str]) -> None:
    """`allot queue -S -t,i` (squeue -S) was "No such option". As squeue: -o's letters
    or field names, '-' descending; counts, durations and array indexes compare as
    numbers, and what has no value (a job that is no array task) comes last."""
    tasks = [f"{lab['base']}_{i}" for i in range(4)]
    lines = _queue(lab, "-h", "-S", "-t,i", "-o", "%t|%i")
    running = sorted([lab["named"], lab["filler"], tasks[0]], key=lambda i: (i.split("_")[0], i))
    assert lines == [f"R|{i}" for i in running] + [f"PD|{i}" for i in tasks[1:]]
    assert _queue(lab, "-h", "--sort=-K", "-o", "%K") == ["3", "2", "1", "0", "N/A", "N/A"]
    assert _queue(lab, "-h", "-S", "K", "-o", "%K") == ["0", "1", "2", "3", "N/A", "N/A"]
    by_gpus = _queue(lab, "-h", "-S", "gpus,jobid", "-o", "%i|%b")
    assert [line.split("|")[1] for line in by_gpus] == ["gres/gpu:2", "gres/gpu:4"] + [
        "gres/gpu:8"
    ] * 4
    rows = orjson.loads(_ok("queue", "--data", lab["data"], "--json", "-S", "-gpus,-K"))
    assert [r["id"] for r in rows["workloads"]] == [*reversed(tasks), lab["named"], lab["filler"]]


def test_squeue_sort_variable_is_read_without_dash_s(lab: dict[str, str]) -> None:
    d = ("queue", "--data", lab["data"], "-h", "-o", "%K")
    assert allot(*d, env={"SQUEUE_SORT": "-K"}).stdout.split()[:4] == ["3", "2", "1", "0"]
    assert allot(*d, "-S", "K", env={"SQUEUE_SORT": "-K"}).stdout.split()[:4] == [
        "0",
        "1",
        "2",
        "3",
    ]
    one_line_error(allot(*d, "-S", "-Z"), "--sort '-Z': unknown field")
    one_line_error(
        allot(*d, env={"SQUEUE_SORT": "%i"}), "$SQUEUE_SORT (SQUEUE_SORT='%i')", "unknown field"
    )


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--gres=gpu:8"], "-G N here"),
        (["-t", "1h"], "--min-runtime is the protection"),
        (["--mem", "10G"], "allot schedules GPUs only"),
        (["-p", "gpu"], "--cluster NAME"),
        (["--account", "lab/olmo"], "-A PATH here"),
    ],
)
def test_sbatch_flags_given_to_submit_say_what_allot_has(
    lab: dict[str, str], flags: list[str], says: str
) -> None:
    """`allot submit --gres=gpu:8` offered "Possible options: --as, --gpus", `--mem 10G`
    offered --name and `-t 1h` nothing: each now says what allot has instead. Nothing is
    sent."""
    submit = ("submit", "-A", "lab/olmo", "-G", "1", "--min-runtime", "1h", "--as", "alice")
    result = allot(*submit, *flags, "--data", lab["data"])
    one_line_error(result, f"No such option: {flags[0].partition('=')[0]}; ", says)
    assert "Possible options" not in result.stderr
    assert len(_queue(lab, "-h", "-u", "alice")) == 6
