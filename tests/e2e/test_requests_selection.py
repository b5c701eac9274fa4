"""Hold, release and requeue end to end, and which workloads a request names: id
prefixes, job-array base ids and queue filters (real processes, real files; one
reading a Kafka journal). Split from test_requests.py so that two test processes can
share the request tests."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import orjson
import pytest

from tests.e2e.requests_rig import (
    ADMIN,
    allot,
    env,
    journal,
    one_4_gpu_host_for_lab_x,
    one_line_error,
    records_of,
    serve,
    wait_for,
)

# ------------------------------------------------------------------ hold and requeue


def _two_8_gpu_jobs_on_one_host(data: Path, min_runtime: str) -> tuple[str, str]:
    """Through the CLI, on a serve of `data`: host h1 (8 GPUs), leaf lab/olmo (member
    alice), and two 8-GPU jobs of alice's; returns their ids once the first runs."""
    for args in (
        ("host", "register", "h1", "8"),
        ("budget", "set", "lab", "1"),
        ("budget", "set", "lab/olmo", "1", "--member", "alice"),
    ):
        assert allot(*args, "--as", ADMIN, "--data", str(data), "--wait", "20").returncode == 0
    common = ["-A", "lab/olmo", "-G", "8", "--min-runtime", min_runtime, "--as", "alice"]
    first = allot("submit", *common, "--data", str(data), "--parsable").stdout.strip()
    second = allot("submit", *common, "--data", str(data), "--parsable").stdout.strip()
    wait_for(data, lambda r: r["type"] == "workload.placed" and r["workload"] == first)
    return first, second


def test_hold_keeps_pending_work_off_free_gpus_until_release(tmp_path: Path) -> None:
    """scontrol hold / release: held work waits beside free GPUs; released, it starts."""
    data = tmp_path / "data"
    server = serve(data)
    try:
        run, wait = _two_8_gpu_jobs_on_one_host(data, "15m")
        held = allot("hold", wait, "--as", "alice", "--data", str(data), "--wait", "20")
        assert held.returncode == 0 and held.stdout.splitlines()[-1] == f"Workload {wait} held"
        again = allot("hold", wait, "--as", "alice", "--data", str(data), "--wait", "20")
        assert again.returncode == 1 and "is held already" in again.stdout
        cancel = allot("cancel", run, "--as", "alice", "--data", str(data), "--wait", "20")
        assert cancel.returncode == 0, cancel.stderr
        rows = orjson.loads(allot("queue", "--data", str(data), "--json").stdout)["workloads"]
        assert [(r["id"], r["state"], r["reason"]) for r in rows] == [(wait, "PENDING", "Held")]
        assert "expected start: none while held" in allot("why", wait, "--data", str(data)).stdout
        assert not any(
            r["type"] == "workload.placed" and r["workload"] == wait for r in journal(data)
        )
        released = allot("release", wait, "--as", "alice", "--data", str(data), "--wait", "20")
        assert released.returncode == 0 and released.stdout.splitlines()[-1] == (
            f"Workload {wait} released"
        )
        wait_for(data, lambda r: r["type"] == "workload.placed" and r["workload"] == wait)
        why = allot("why", wait, "--data", str(data)).stdout
        assert "held           by alice" in why and "released       by alice" in why
    finally:
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=30)


def test_requeue_stops_running_work_and_it_starts_over_ahead_of_later_work(
    tmp_path: Path,
) -> None:
    """scontrol requeue: the running job stops (preempted, reason requested) and waits
    again with its submit time, so it starts again before work submitted after it."""
    data = tmp_path / "data"
    server = serve(data)
    try:
        run, later = _two_8_gpu_jobs_on_one_host(data, "1h")
        pending = allot("requeue", later, "--as", "alice", "--data", str(data), "--wait", "20")
        assert pending.returncode == 1 and "not running; nothing to requeue" in pending.stdout
        done = allot("requeue", run[:12], "--as", "alice", "--data", str(data), "--wait", "20")
        assert done.returncode == 0 and done.stdout.splitlines()[-1] == f"Workload {run} requeued"
        again = wait_for(
            data,
            lambda r: r["type"] == "workload.placed" and r["workload"] == run and r["attempt"] == 2,
        )
        stop = next(
            r for r in journal(data) if r["type"] == "workload.preempted" and r["workload"] == run
        )
        assert (stop["reason"], stop["requeued"], stop["explain"]["requested_by"]) == (
            "requested",
            True,
            "alice",
        )
        assert again["cause"] == stop["cause"]  # the same cycle: no GPU left idle
        why = allot("why", run, "--data", str(data)).stdout
        assert "reason requested (requeued by alice, allot requeue)" in why
        assert "preempted #1   requested by alice (allot requeue)" in why  # the history
        verified = allot("replay", str(data / "journal.jsonl"), "--verify")
        assert verified.returncode == 0, verified.stdout + verified.stderr
        rows = orjson.loads(allot("queue", "--data", str(data), "--json").stdout)["workloads"]
        assert {r["id"]: r["state"] for r in rows} == {run: "RUNNING", later: "PENDING"}
    finally:
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=30)


# ------------------------------------------------------------------ id prefixes

RUN = "01KQ8M4XJ7AAAAAAAAAAAAAAAA"  # live, running
WAIT = "01KQ8M4XJ7BBBBBBBBBBBBBBBB"  # live, pending
DONE = "01KQ8M4XK0CCCCCCCCCCCCCCCC"  # ended
SWEEP = "01KQ9ZZZZZDDDDDDDDDDDDDDDD"  # a job array's base; tasks 0-3, pending


def _prefix_folder(folder: Path) -> Path:
    """An embedded folder whose journal holds RUN (running), WAIT (pending), DONE
    (ended) and the job array SWEEP_[0-3] (pending); no scheduler reads its inbox."""
    from projections.usage import JournalBuilder

    j = JournalBuilder(cluster="default").host("h0").budget("lab", 1)
    j.submit(DONE, "lab", 8).place(DONE, {"h0": list(range(8))}).at(60).finish(DONE)
    j.submit(RUN, "lab", 8).place(RUN, {"h0": list(range(8))})
    j.submit(WAIT, "lab", 8)
    for i in range(4):
        j.submit(f"{SWEEP}_{i}", "lab", 8)
    folder.mkdir()
    j.write(folder / "journal.jsonl")
    return folder


def _sent(folder: Path) -> list[tuple[str, str]]:
    """(type, workload) of each request in the folder's inbox, in order."""
    lines = (folder / "inbox.jsonl").read_bytes().splitlines()
    requests = [orjson.loads(orjson.loads(line)["value"]) for line in lines]
    return [(r["type"], r["workload"]) for r in requests]


@pytest.mark.parametrize(
    ("command", "given", "sent"),
    [
        pytest.param("cancel", ["01KQ8M4XJ7A"], [RUN], id="cancel-prefix"),
        pytest.param("hold", ["01KQ8M4XJ7B"], [WAIT], id="hold-prefix"),
        pytest.param("release", ["01KQ8M4XJ7B"], [WAIT], id="release-prefix"),
        pytest.param("cancel", [RUN], [RUN], id="whole-id"),
        # a prefix of the array's base and a task index: that task, not _10 or _1x
        pytest.param("hold", ["01KQ9Z_2"], [f"{SWEEP}_2"], id="array-task"),
        pytest.param("cancel", ["01KQ9Z_[1-2]"], [f"{SWEEP}_2", f"{SWEEP}_1"], id="array-spec"),
        pytest.param("hold", [f"{SWEEP}_[0,3]"], [f"{SWEEP}_0", f"{SWEEP}_3"], id="whole-tasks"),
        # DONE has ended: 01KQ8M4XK names no live workload, so the scheduler answers
        # the prefix of an ended workload is sent whole: the scheduler says it ended
        # (sent as given, it was refused as an unknown workload)
        pytest.param("cancel", ["01KQ8M4XK"], [DONE], id="ended-sent-whole"),
        pytest.param("cancel", ["nope"], ["nope"], id="unknown-sent-as-given"),
    ],
)
def test_cancel_hold_release_take_a_unique_prefix_as_why_does(
    tmp_path: Path, command: str, given: list[str], sent: list[str]
) -> None:
    data = _prefix_folder(tmp_path / "data")
    result = allot(command, *given, "--data", str(data))
    assert result.returncode == 0, result.stderr
    kind = {"cancel": "cancelled", "hold": "held", "release": "released"}[command]
    assert _sent(data) == [(f"workload.{kind}", wid) for wid in sent]
    if len(sent) == 1:
        assert result.stdout.startswith(f"{command.title()} of workload {sent[0]} sent")


@pytest.mark.parametrize(
    ("command", "given", "says"),
    [
        pytest.param(
            "cancel",
            "01KQ8M4XJ7",
            f"error: '01KQ8M4XJ7' is the start of 2 live workload ids ({RUN}, {WAIT}); "
            "give more of the id",
            id="two-workloads",
        ),
        pytest.param(
            "hold",
            "01KQ9Z",
            f"error: '01KQ9Z' is the start of 4 live workload ids ({SWEEP}_0, {SWEEP}_1, "
            f"{SWEEP}_2, {SWEEP}_3); give more of the id, or name tasks of the job array "
            f"as '{SWEEP}_[SPEC]'",
            id="an-arrays-tasks",
        ),
    ],
)
def test_an_ambiguous_prefix_is_one_line_naming_the_candidates(
    tmp_path: Path, command: str, given: str, says: str
) -> None:
    data = _prefix_folder(tmp_path / "data")
    result = allot(command, given, WAIT, "--data", str(data))
    assert result.returncode == 2
    assert one_line_error(result) == says
    assert not (data / "inbox.jsonl").exists() or _sent(data) == []  # nothing was sent


def test_whole_ids_are_sent_without_reading_the_journal(tmp_path: Path) -> None:
    """As before: a whole id (as `allot submit` prints it) needs no readable journal
    (a bare one is looked for with a byte search, to tell a job array's base), so one
    that cannot be read does not matter; neither does it for a prefix (the scheduler
    answers)."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "journal.jsonl").write_bytes(b"not json\n")
    for given in (RUN, f"{SWEEP}_[1-2]", "01KQ8M4XJ7A"):
        result = allot("cancel", given, "--data", str(data))
        assert result.returncode == 0, result.stderr
    assert [wid for _, wid in _sent(data)] == [RUN, f"{SWEEP}_2", f"{SWEEP}_1", "01KQ8M4XJ7A"]


# ------------------------------------------------------------------ job array base ids

ARR = "01KQA0000AEEEEEEEEEEEEEEEE"  # tasks 0 running, 1 done, 2 held, 3 waiting, 4 cancelled, 10 waiting
ENDED = "01KQA0000CGGGGGGGGGGGGGGGG"  # tasks 0 and 1, both done
PLAIN = "01KQA0000BFFFFFFFFFFFFFFFF"  # named train, running its second attempt


def _array_folder(folder: Path) -> Path:
    """An embedded folder whose journal holds the job arrays ARR and ENDED and the
    workload PLAIN (see their comments); no scheduler reads its inbox."""
    from projections.usage import JournalBuilder

    j = JournalBuilder(cluster="default").host("h0").budget("lab", 1)
    for i in (0, 1, 2, 3, 4, 10):
        j.submit(f"{ARR}_{i}", "lab", 1)
    j.place(f"{ARR}_0", {"h0": [0]}).place(f"{ARR}_1", {"h0": [1]}).hold(f"{ARR}_2")
    j.cancel(f"{ARR}_4")
    for i in (0, 1):
        j.submit(f"{ENDED}_{i}", "lab", 1).place(f"{ENDED}_{i}", {"h0": [2 + i]})
    j.submit(PLAIN, "lab", 1, name="train").place(PLAIN, {"h0": [4]}).preempt(PLAIN)
    j.place(PLAIN, {"h0": [4]})
    j.at(60).finish(f"{ARR}_1").finish(f"{ENDED}_0").finish(f"{ENDED}_1")
    folder.mkdir()
    j.write(folder / "journal.jsonl")
    return folder


def _requests(folder: Path) -> list[dict]:
    lines = (folder / "inbox.jsonl").read_bytes().splitlines()
    return [orjson.loads(orjson.loads(line)["value"]) for line in lines]


@pytest.mark.parametrize(
    ("command", "given", "sent", "says"),
    [
        # scancel BASE: every task that has not ended; waiting ones first, last first
        pytest.param(
            "cancel",
            [ARR],
            [f"{ARR}_10", f"{ARR}_3", f"{ARR}_2", f"{ARR}_0"],
            f"Job array {ARR}: 4 of its 6 tasks have not ended",
            id="cancel-base",
        ),
        pytest.param(
            "cancel",
            [ARR, PLAIN],
            [f"{ARR}_10", f"{ARR}_3", f"{ARR}_2", PLAIN, f"{ARR}_0"],
            f"Job array {ARR}: 4 of its 6 tasks have not ended",
            id="cancel-base-and-a-workload",
        ),
        pytest.param(
            "hold",
            [ARR],
            [f"{ARR}_3", f"{ARR}_10"],
            f"Job array {ARR}: 2 of its 4 live tasks wait and are not held",
            id="hold-base",
        ),
        pytest.param(
            "release",
            [ARR],
            [f"{ARR}_2"],
            f"Job array {ARR}: 1 of its 4 live tasks is held",
            id="release-base",
        ),
        pytest.param(
            "requeue",
            [ARR],
            [f"{ARR}_0"],
            f"Job array {ARR}: 1 of its 4 live tasks is running",
            id="requeue-base",
        ),
        # as before: a task by its whole id, a workload by its own
        pytest.param("cancel", [f"{ARR}_3"], [f"{ARR}_3"], None, id="cancel-one-task"),
        pytest.param("cancel", [PLAIN], [PLAIN], None, id="cancel-a-workload"),
        pytest.param("requeue", [PLAIN], [PLAIN], None, id="requeue-a-workload"),
    ],
)
def test_a_job_arrays_base_id_names_the_tasks_the_request_applies_to(
    tmp_path: Path, command: str, given: list[str], sent: list[str], says: str | None
) -> None:
    data = _array_folder(tmp_path / "data")
    result = allot(command, *given, "--data", str(data))
    assert result.returncode == 0, result.stderr
    kind = {
        "cancel": "workload.cancelled",
        "hold": "workload.held",
        "release": "workload.released",
        "requeue": "workload.requeue_requested",
    }[command]
    requests = _requests(data)
    assert [(r["type"], r["workload"]) for r in requests] == [(kind, wid) for wid in sent]
    if says is not None:
        assert result.stdout.splitlines()[-1] == says
    if command == "requeue":  # the attempt it runs, so a request sent twice stops it once
        attempts = {f"{ARR}_0": 1, PLAIN: 2}
        assert [r["attempt"] for r in requests] == [attempts[wid] for wid in sent]
    else:
        assert not any("attempt" in r for r in requests)


@pytest.mark.parametrize(
    ("command", "given", "says"),
    [
        pytest.param(
            "cancel",
            ENDED,
            f"error: job array {ENDED}: all 2 of its tasks have ended; nothing was sent",
            id="cancel-ended",
        ),
        pytest.param(
            "requeue",
            ENDED,
            f"error: job array {ENDED}: all 2 of its tasks have ended; nothing was sent",
            id="requeue-ended",
        ),
        pytest.param(
            "hold",
            f"{ARR}_[0,2]",  # not a base: sent, and the scheduler answers for each
            None,
            id="tasks-are-sent-as-named",
        ),
    ],
)
def test_a_job_array_base_with_nothing_to_send_sends_nothing(
    tmp_path: Path, command: str, given: str, says: str | None
) -> None:
    data = _array_folder(tmp_path / "data")
    result = allot(*command.split(), given, "--data", str(data))
    if says is None:
        assert result.returncode == 0, result.stderr
        assert len(_requests(data)) == 2
        return
    assert result.returncode == 2
    assert one_line_error(result) == says
    assert not (data / "inbox.jsonl").exists()


@pytest.mark.parametrize(
    ("command", "given", "sent", "says"),
    [
        # what `allot queue` with the same flags lists; waiting work first, last first
        pytest.param(
            "cancel",
            ["-u", "alice"],
            [f"{ARR}_2", f"{ARR}_10", f"{ARR}_3", PLAIN, f"{ARR}_0"],
            "Selected 5 live workloads (-u alice)",
            id="cancel-user",
        ),
        pytest.param(
            "cancel",
            ["--me", "-t", "pending"],
            [f"{ARR}_2", f"{ARR}_10", f"{ARR}_3"],
            "Selected 3 live workloads (--me -t pending)",
            id="cancel-mine-pending",
        ),
        pytest.param(
            "cancel",
            ["-A", "lab", "--state", "running"],
            [PLAIN, f"{ARR}_0"],
            "Selected 2 live workloads (-a lab -t running)",
            id="cancel-account-running",
        ),
        pytest.param(
            "cancel", ["-n", "train"], [PLAIN], "Selected 1 live workload (-n train)", id="name"
        ),
        # ids and filters: those of the ids the filters match (as scancel)
        pytest.param(
            "cancel",
            [ARR, "-t", "r"],
            [f"{ARR}_0"],
            "Selected 1 live workload (-t r)",
            id="ids-and-filter",
        ),
        # hold, release, requeue: of the selection, those they can act on
        pytest.param(
            "hold",
            ["-u", "alice"],
            [f"{ARR}_3", f"{ARR}_10"],
            "Selected 5 live workloads (-u alice): 2 wait and are not held",
            id="hold-user",
        ),
        pytest.param(
            "release",
            ["--me"],
            [f"{ARR}_2"],
            "Selected 5 live workloads (--me): 1 is held",
            id="release-mine",
        ),
        pytest.param(
            "requeue",
            ["-w", "h0"],
            [f"{ARR}_0", PLAIN],
            "Selected 2 live workloads (-w h0)",
            id="requeue-host",
        ),
    ],
)
def test_filters_select_the_workloads_the_queue_lists_with_the_same_flags(
    tmp_path: Path, command: str, given: list[str], sent: list[str], says: str
) -> None:
    """scancel -u USER / --me / -t / -A / -n / -w: people wrote `allot cancel $(allot
    queue --me -h -o %i)`; the filters now select what that queue lists."""
    data = _array_folder(tmp_path / "data")
    environ = {**env(), "USER": "alice"}
    queue_flags = [f for f in given if f != ARR] + (["-j", ARR] if ARR in given else [])
    queue_flags = ["-a" if f == "-A" else f for f in queue_flags]
    listed = allot("queue", *queue_flags, "-h", "-o", "%i", "--data", str(data), environ=environ)
    assert listed.returncode == 0, listed.stderr
    result = allot(command, *given, "--data", str(data), environ=environ)
    assert result.returncode == 0, result.stderr
    requests = _requests(data)
    assert [r["workload"] for r in requests] == sent
    if command == "cancel":
        assert set(sent) == set(listed.stdout.split())
    assert result.stdout.splitlines()[-1] == says
    if command == "requeue":
        assert [r["attempt"] for r in requests] == [1, 2]


def test_me_means_the_user_the_requests_are_sent_as(tmp_path: Path) -> None:
    """README's live walk-through runs as USER=ops and cancels alice's work `--as alice`:
    `--me` then selects alice's workloads, the ones the requests are sent in her name for,
    not the shell's $USER's (which owns none here)."""
    data = _array_folder(tmp_path / "data")
    environ = {**env(), "USER": "ops"}
    result = allot(
        "cancel", "--me", "-t", "pending", "--as", "alice", "--data", str(data), environ=environ
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    requests = _requests(data)
    assert [r["workload"] for r in requests] == [f"{ARR}_2", f"{ARR}_10", f"{ARR}_3"]
    assert {r["actor"] for r in requests} == {"alice"}
    assert result.stdout.splitlines()[-1] == "Selected 3 live workloads (--me -t pending)"
    # without --as, --me is still $USER, as squeue's: ops has nothing here
    mine = allot("hold", "--me", "--data", str(data), environ=environ)
    assert mine.returncode == 0, mine.stderr
    assert mine.stdout == "No live workload matches --me; nothing was sent\n"


@pytest.mark.parametrize("command", ["cancel", "hold", "requeue"])
def test_filters_that_select_nothing_send_nothing_and_exit_0(tmp_path: Path, command: str) -> None:
    """As scancel -u USER of a user with no jobs: nothing to do is not an error."""
    data = _array_folder(tmp_path / "data")
    result = allot(command, "-u", "nobody", "-t", "pd", "--data", str(data))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "No live workload matches -u nobody -t pd; nothing was sent\n"
    assert not (data / "inbox.jsonl").exists()


@pytest.mark.parametrize(
    ("given", "says"),
    [
        pytest.param(
            [],
            "error: give workload ids, or filters that select them (-u USER, --me, -t "
            "STATE, -a PATH, -n NAME, -w HOSTS; `allot queue` takes the same)",
            id="neither-ids-nor-filters",
        ),
        pytest.param(
            ["-t", "done"],
            "error: --states 'done': the queue holds pending (pd) and running (r) work; "
            "`allot acct -s` has the ended states",
            id="unknown-state",
        ),
        pytest.param(
            ["-a", "lab/nope"],
            "error: -a lab/nope: no such allocation in cluster default's budget tree "
            "(`allot shares` lists them)",
            id="unknown-allocation",
        ),
    ],
)
def test_cancel_without_a_selection_says_what_to_give(
    tmp_path: Path, given: list[str], says: str
) -> None:
    data = _array_folder(tmp_path / "data")
    result = allot("cancel", *given, "--data", str(data))
    assert result.returncode == 2
    assert one_line_error(result) == says
    assert not (data / "inbox.jsonl").exists()


def test_cancel_by_filter_waits_for_each_verdict(tmp_path: Path) -> None:
    """--wait with a selection waits for every request's verdict, as with several ids."""
    data = tmp_path / "data"
    server = serve(data)
    try:
        one_4_gpu_host_for_lab_x(data)
        result = allot(
            "submit", "--data", str(data), "-A", "lab/x", "-G", "4", "--min-runtime", "1h",
            "--array", "0-2", "-J", "sweep", "--as", ADMIN, "--wait", "20",
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        result = allot(
            "cancel", "-n", "sweep", "-u", ADMIN, "--wait", "20", "--data", str(data),
            "--as", ADMIN,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines()[1:] == [
            f"Selected 3 live workloads (-u {ADMIN} -n sweep)",
            "3 of 3 workloads cancelled",
        ]
        records = journal(data)
        assert len([r for r in records if r["type"] == "workload.placed"]) == 1
    finally:
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=30)


@pytest.mark.parametrize("given", ["{base}_[0-11]", "{base}"], ids=["tasks", "base-id"])
def test_cancelling_a_job_array_by_tasks_or_base_starts_none_of_its_waiting_tasks(
    tmp_path: Path, given: str
) -> None:
    """scancel 1234 cancels the whole array, as naming its tasks does: 4 tasks run on
    the one 4-GPU host, 8 wait, none of those starts on a GPU a cancel frees (cancels
    sent in index order would free a GPU for the next waiting task just before its own
    cancel)."""
    data = tmp_path / "data"
    server = serve(data)
    try:
        one_4_gpu_host_for_lab_x(data)
        result = allot(
            "submit", "--data", str(data), "-A", "lab/x", "-G", "1", "--min-runtime", "1h",
            "--array", "0-11", "--parsable", "--as", ADMIN,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        base = result.stdout.split()[0].rsplit("_", 1)[0]
        wait_for(data, lambda r: r["type"] == "workload.placed" and r["workload"] == f"{base}_3")
        result = allot("cancel", given.format(base=base), "--data", str(data), "--as", ADMIN)
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith(f"Cancel of 12 workloads sent ({base}_0 … {base}_11")
        wait_for(
            data,
            lambda r: r["type"] == "workload.cancelled" and r["workload"] == f"{base}_0",
        )
        records = journal(data)
        started = {r["workload"] for r in records if r["type"] == "workload.placed"}
        assert started == {f"{base}_{i}" for i in range(4)}
        cancelled = [r["workload"] for r in records if r["type"] == "workload.cancelled"]
        assert sorted(cancelled) == sorted(f"{base}_{i}" for i in range(12))
        assert not any(r["type"].endswith(".rejected") for r in records)
    finally:
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=30)


@pytest.mark.parametrize("times", [2, 3], ids=["twice", "three-times"])
def test_requeue_sent_again_before_the_scheduler_answered_stops_the_work_once(
    tmp_path: Path, times: int
) -> None:
    """`allot requeue W` repeated while the scheduler is down: the requests land in one
    inbox batch. Each names the attempt its sender saw, so only the first stops it;
    the others are rejected as stale rather than stopping the attempt it started."""
    data = tmp_path / "data"
    server = serve(data)
    try:
        run, _ = _two_8_gpu_jobs_on_one_host(data, "1h")
    finally:
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=30)
    for _ in range(times):
        result = allot("requeue", run, "--as", "alice", "--data", str(data))
        assert result.returncode == 0, result.stderr
    server = serve(data)
    try:
        rejected = [
            wait_for(
                data,
                lambda r, n=n: (
                    r["type"] == "workload.rejected" and r["ref"] == _requests(data)[-1 - n]["id"]
                ),
            )
            for n in range(times - 1)
        ]
        records = journal(data)
        stops = [r for r in records if r["type"] == "workload.preempted" and r["workload"] == run]
        assert [(r["attempt"], r["reason"]) for r in stops] == [(1, "requested")]
        assert (
            max(r["attempt"] for r in records if r.get("workload") == run and "attempt" in r) == 2
        )
        for r in rejected:
            assert "is on attempt 2: attempt 1 has stopped already" in r["error"]
    finally:
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=30)


@pytest.mark.kafka
@pytest.mark.parametrize(
    ("command", "given", "sent"),
    [
        pytest.param(
            "cancel",
            ARR,
            [(f"{ARR}_10", None), (f"{ARR}_3", None), (f"{ARR}_2", None), (f"{ARR}_0", None)],
            id="cancel-base",
        ),
        pytest.param("requeue", PLAIN, [(PLAIN, 2)], id="requeue-a-workload"),
        pytest.param("cancel", PLAIN, [(PLAIN, None)], id="cancel-a-workload"),
    ],
)
def test_a_base_id_and_a_requeues_attempt_are_read_from_a_kafka_journal(
    kafka_bootstrap: str, tmp_path: Path, command: str, given: str, sent: list[tuple]
) -> None:
    """As from a folder: the journal topic is searched from the time in the id on."""
    from streams.topics import BASE_INBOX, BASE_JOURNAL
    from tests.e2e.kafka_journal import produce_journal

    suffix = f".e2e-{os.getpid()}-{time.monotonic_ns()}"
    environ = env(ALLOT_TOPIC_SUFFIX=suffix, ALLOT_KAFKA=kafka_bootstrap)
    assert allot("topics", "create", environ=environ).returncode == 0
    folder = _array_folder(tmp_path / "data")
    produce_journal(kafka_bootstrap, journal(folder), topic=f"{BASE_JOURNAL}{suffix}")
    result = allot(command, given, "--as", ADMIN, environ=environ)
    assert result.returncode == 0, result.stderr
    records = asyncio.run(records_of(kafka_bootstrap, f"{BASE_INBOX}{suffix}", b"default"))
    requests = [orjson.loads(r.value) for r in records]
    assert [(r["workload"], r.get("attempt")) for r in requests] == sent
