"""The embedded journal (`--data DIR`): real files, real processes, kill -9."""

from __future__ import annotations

import os
import pickle
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import zlib
from collections import Counter
from pathlib import Path

import orjson
import pytest

from domain.events import INPUT_TYPES
from streams.core import SNAPSHOT_FORMAT, DeadLetter, InboxRecord, SchedulerCore
from streams.embedded import (
    DLQ_FILE,
    INBOX_FILE,
    JOURNAL_FILE,
    SNAPSHOT_FILE,
    EmbeddedError,
    EmbeddedScheduler,
    InboxReader,
    LineReader,
    Recovery,
    append_dead_letters,
    append_journal,
    append_requests,
    folder_lock,
    read_dead_letters,
    read_inbox,
    read_journal_lines,
    serving_pid,
)
from streams.inbox import make_request
from streams.offloop import blob_of

ADMIN = "ops"


def allot(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")}
    return subprocess.run(
        [sys.executable, "-m", "allot.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def setup_requests(cluster: str = "default") -> list[dict]:
    out = [
        make_request("host.registered", cluster=cluster, actor=ADMIN, host=f"h{i}", gpus=8)
        for i in range(4)
    ]
    out.append(
        make_request(
            "budget.set", cluster=cluster, actor=ADMIN, allocation="lab", weight=1, managers=["pm"]
        )
    )
    for leaf, weight in (("a", 3), ("b", 2), ("c", 1)):
        out.append(
            make_request(
                "budget.set",
                cluster=cluster,
                actor="pm",
                allocation=f"lab/{leaf}",
                weight=weight,
                members=["alice", "bob"],
            )
        )
    return out


def mixed_requests(n: int, seed: int, cluster: str = "default") -> list[bytes | dict]:
    """Submissions, cancels, finishes, ticks, health flips, budget changes and bad input."""
    rng = random.Random(seed)
    out: list[bytes | dict] = []
    submitted: list[str] = []
    for i in range(n):
        k = rng.random()
        if k < 0.02:
            out.append(b"not json %d \xff" % i)  # DLQ (and not even UTF-8)
        elif k < 0.04:
            out.append({"type": "workload.submitted", "id": f"bad-{seed}-{i}", "cluster": cluster})
        elif k < 0.05:
            out.append({"type": "no.such.type", "id": f"odd-{seed}-{i}", "cluster": cluster})
        elif k < 0.10 and submitted:
            out.append(
                make_request(
                    "workload.finished",
                    cluster=cluster,
                    actor="executor",
                    workload=rng.choice(submitted),
                    outcome="completed",
                )
            )
        elif k < 0.13 and submitted:
            out.append(
                make_request(
                    "workload.cancelled",
                    cluster=cluster,
                    actor="alice",
                    workload=rng.choice(submitted),
                )
            )
        elif k < 0.16:
            out.append(make_request("clock.tick", cluster=cluster, actor="allot-ticker"))
        elif k < 0.17:
            out.append(
                make_request(
                    "host.health",
                    cluster=cluster,
                    actor=ADMIN,
                    host=f"h{rng.randrange(4)}",
                    healthy=rng.random() < 0.6,
                    reason="probe",
                )
            )
        elif k < 0.18:
            out.append(
                make_request(
                    "budget.set",
                    cluster=cluster,
                    actor=rng.choice(["pm", "mallory"]),
                    allocation=f"lab/{rng.choice('abc')}",
                    weight=rng.choice([1, 2, 3]),
                )
            )
        else:
            workload = f"w-{seed}-{i:05d}"
            submitted.append(workload)
            out.append(
                make_request(
                    "workload.submitted",
                    cluster=cluster,
                    actor=rng.choice(["alice", "bob", "mallory"]),
                    workload=workload,
                    allocation=f"lab/{rng.choice('abc')}",
                    gpus=rng.choice([1, 2, 4, 8, 16]),
                    min_runtime=rng.choice([0, 600, 3600, 7200]),
                    resumable=rng.random() < 0.5,
                    priority=rng.randrange(3),
                )
            )
    return out


def journal_records(folder: Path) -> list[dict]:
    return [orjson.loads(line) for line in read_journal_lines(folder)]


def assert_exactly_once(folder: Path) -> None:
    """Every inbox offset is in the journal (accepted input or rejection) or the DLQ,
    exactly once; no decision id repeats; the journal is in inbox order."""
    reader = InboxReader(folder)  # offsets run on from the header's base, if any
    while reader.read(10_000):
        pass
    inbox = reader.offset
    reader.close()
    records = journal_records(folder)
    inputs: Counter[int] = Counter()
    offsets = []
    for r in records:
        offsets.append(r["inbox"][1])
        if r["type"] == "config.set":
            continue
        if r["type"] in INPUT_TYPES or r["type"].endswith(".rejected"):
            inputs[r["inbox"][1]] += 1
    dead = Counter(d["inbox"][1] for d in read_dead_letters(folder))
    assert offsets == sorted(offsets)
    assert not [o for o, n in inputs.items() if n > 1], "an input folded twice"
    assert not [o for o, n in dead.items() if n > 1], "a dead letter written twice"
    assert not set(inputs) & set(dead)
    assert set(inputs) | set(dead) == set(range(inbox)), "an inbox offset is missing"
    ids = Counter(r["id"] for r in records)
    assert not [i for i, n in ids.items() if n > 1], "a decision (or input) id is duplicated"


def stripped_copy(journal: Path, out: Path) -> Path:
    """The journal without the `inbox` field each streamed record carries."""
    with out.open("wb") as f:
        for line in journal.read_bytes().splitlines():
            record = orjson.loads(line)
            record.pop("inbox", None)
            f.write(orjson.dumps(record) + b"\n")
    return out


# ------------------------------------------------------------ files


def test_requests_round_trip_with_offsets_and_raw_bytes(tmp_path: Path) -> None:
    values = [
        {"type": "clock.tick", "id": "t1"},
        "not json at all",
        b"\xff\xfe binary",
        b'{"type":"clock.tick","id":"t2"}',
    ]
    append_requests(tmp_path, values[:2], ts=100.0)
    append_requests(tmp_path, values[2:], ts=101.5)
    records = read_inbox(tmp_path)
    assert [r.offset for r in records] == [0, 1, 2, 3]
    assert all(r.partition == 0 for r in records)
    assert [r.timestamp for r in records] == [100.0, 100.0, 101.5, 101.5]
    assert records[0].value == orjson.dumps(values[0])
    assert records[1].value == b"not json at all"
    assert records[2].value == b"\xff\xfe binary"  # survives byte for byte
    assert records[3].value == values[3]
    assert read_inbox(tmp_path, start=2) == records[2:]
    assert read_inbox(tmp_path, start=1, limit=2) == records[1:3]
    # each line is the documented wrapper
    first = orjson.loads((tmp_path / INBOX_FILE).read_bytes().splitlines()[1])
    assert first == {"ts": 100.0, "value": "not json at all"}


def test_journal_and_dead_letters_append_and_read(tmp_path: Path) -> None:
    append_journal(tmp_path, [b'{"a":1}', b'{"a":2}\n'])
    append_journal(tmp_path, [])
    assert list(read_journal_lines(tmp_path)) == [b'{"a":1}', b'{"a":2}']
    record = InboxRecord(0, 7, 5.0, b"\x00garbage")
    append_dead_letters(tmp_path, [DeadLetter(record, "not JSON: boom")])
    (letter,) = read_dead_letters(tmp_path)
    assert letter["inbox"] == [0, 7]
    assert letter["error"] == "not JSON: boom"
    assert letter["value"] == "\x00garbage"


def test_a_truncated_last_line_is_ignored_then_cut_by_the_next_append(tmp_path: Path) -> None:
    append_requests(tmp_path, ["one", "two"], ts=1.0)
    path = tmp_path / INBOX_FILE
    with path.open("ab") as f:  # a writer died mid-line
        f.write(b'{"ts": 2.0, "value": "thr')
    reader = InboxReader(tmp_path)
    assert [r.value for r in reader.read()] == [b"one", b"two"]
    assert reader.read() == []  # still cut short: not a record
    assert [r.value for r in read_inbox(tmp_path)] == [b"one", b"two"]

    append_requests(tmp_path, ["three"], ts=3.0)
    (three,) = reader.read()  # the same reader continues correctly
    assert (three.offset, three.value, three.timestamp) == (2, b"three", 3.0)
    assert path.read_bytes().count(b"thr") == 1  # the torn tail is gone
    assert [r.offset for r in read_inbox(tmp_path)] == [0, 1, 2]
    reader.close()

    # the journal reader and the DLQ reader ignore a torn tail too
    append_journal(tmp_path, [b'{"x":1}'])
    with (tmp_path / JOURNAL_FILE).open("ab") as f:
        f.write(b'{"x":')
    assert list(read_journal_lines(tmp_path)) == [b'{"x":1}']
    append_journal(tmp_path, [b'{"x":2}'])
    assert list(read_journal_lines(tmp_path)) == [b'{"x":1}', b'{"x":2}']
    with (tmp_path / DLQ_FILE).open("ab") as f:
        f.write(b'{"inbox":[0,')
    assert list(read_dead_letters(tmp_path)) == []


def test_a_line_longer_than_the_read_chunk(tmp_path: Path) -> None:
    big = "x" * (3 << 20)
    append_requests(tmp_path, ["a", big, "b"], ts=1.0)
    with LineReader(tmp_path / INBOX_FILE) as reader:
        lines = reader.read()
    assert len(lines) == 3
    assert [r.value for r in read_inbox(tmp_path)] == [b"a", big.encode(), b"b"]


WRITER = textwrap.dedent(
    """
    import sys, time
    from streams.embedded import append_requests
    folder, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    for i in range(count):
        append_requests(folder, [f"{name}:{i}"])
    """
)


def test_two_writers_and_a_reader_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    count = 250
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), name, str(count)])
        for name in ("A", "B")
    ]
    reader = InboxReader(tmp_path)
    seen: list[InboxRecord] = []
    deadline = time.monotonic() + 60
    while len(seen) < 2 * count and time.monotonic() < deadline:
        batch = reader.read(37)  # small batches: the reader races the writers
        seen.extend(batch)
        if not batch:
            time.sleep(0.002)
    for w in writers:
        assert w.wait(timeout=60) == 0
    seen.extend(reader.read())
    reader.close()

    assert [r.offset for r in seen] == list(range(2 * count))
    values = [r.value.decode() for r in seen]
    assert Counter(values) == Counter(f"{n}:{i}" for n in "AB" for i in range(count))
    for name in "AB":  # each writer's lines in its own order
        mine = [int(v.split(":")[1]) for v in values if v.startswith(name)]
        assert mine == list(range(count))
    stamps = [r.timestamp for r in seen]
    assert stamps == sorted(stamps)  # stamped under the lock, in line order
    assert read_inbox(tmp_path) == seen


# ------------------------------------------------------------ recovery


def run_to_end(folder: Path, *, batch: int) -> None:
    with EmbeddedScheduler(folder, "default", None, batch=batch) as scheduler:
        scheduler.start()
        scheduler.drain()


def crash_states(folder: Path) -> list[tuple[bytes, bytes]]:
    """(journal bytes, dlq bytes) a crash could leave: the scheduler writes journal lines
    and dead letters in inbox order, so a crash state is a prefix of that merged stream,
    possibly ending in a torn line."""
    journal = (folder / JOURNAL_FILE).read_bytes().splitlines(keepends=True)
    dlq = (folder / DLQ_FILE).read_bytes().splitlines(keepends=True)
    stream = [("j", orjson.loads(x)["inbox"][1], x) for x in journal]
    stream += [("d", orjson.loads(x)["inbox"][1], x) for x in dlq]
    stream.sort(key=lambda item: item[1])  # stable: a group's lines keep their order
    states = []
    for cut in range(len(stream) + 1):
        done = stream[:cut]
        j = b"".join(x for kind, _, x in done if kind == "j")
        d = b"".join(x for kind, _, x in done if kind == "d")
        states.append((j, d))
        if cut < len(stream):  # the next line torn half way
            kind, _, line = stream[cut]
            half = line[: max(1, len(line) // 2)]
            states.append((j + half, d) if kind == "j" else (j, d + half))
    return states


def test_recovery_from_any_crash_point_rewrites_the_same_journal(tmp_path: Path) -> None:
    full = tmp_path / "full"
    append_requests(full, setup_requests(), ts=1_767_225_600.0)
    requests = mixed_requests(150, seed=7)
    for i in range(0, len(requests), 10):  # appended over time, ten at a time
        append_requests(full, requests[i : i + 10], ts=1_767_225_600.0 + 60 * (i + 1))
    run_to_end(full, batch=7)
    journal = (full / JOURNAL_FILE).read_bytes()
    dlq = (full / DLQ_FILE).read_bytes()
    assert dlq and journal.count(b"workload.placed") > 5
    assert_exactly_once(full)

    states = crash_states(full)
    rng = random.Random(3)
    picked = states[:4] + rng.sample(states[4:-4], 30) + states[-4:]
    for n, (j, d) in enumerate(picked):
        folder = tmp_path / f"crash{n}"
        folder.mkdir()
        shutil.copy(full / INBOX_FILE, folder / INBOX_FILE)
        (folder / JOURNAL_FILE).write_bytes(j)
        (folder / DLQ_FILE).write_bytes(d)
        run_to_end(folder, batch=5)
        assert (folder / JOURNAL_FILE).read_bytes() == journal, f"crash state {n}"
        assert (folder / DLQ_FILE).read_bytes() == dlq, f"crash state {n}"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_refuses_a_second_scheduler_and_a_wrong_cluster(tmp_path: Path) -> None:
    append_requests(tmp_path, setup_requests())
    first = EmbeddedScheduler(tmp_path, "default")
    first.start()
    try:
        assert serving_pid(tmp_path) == os.getpid()
        result = allot("serve", "--data", str(tmp_path), "--once")
        assert result.returncode == 2
        assert "already running" in result.stderr and str(os.getpid()) in result.stderr
        assert "Traceback" not in result.stderr
        # with --metrics-port it said "metrics on http://..." before refusing the folder
        result = allot("serve", "--data", str(tmp_path), "--metrics-port", str(free_port()))
        assert result.returncode == 2, result.stderr
        assert result.stderr.splitlines() == [
            f"error: another `allot serve` is already running on {tmp_path} "
            f"(pid {os.getpid()}); one scheduler per folder"
        ]
        first.drain()
    finally:
        first.close()
    assert serving_pid(tmp_path) is None
    with pytest.raises(EmbeddedError, match="cluster 'default'"):
        EmbeddedScheduler(tmp_path, "other").start()
    result = allot("serve", "--data", str(tmp_path), "--cluster", "other", "--once")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "--cluster default" in result.stderr


def test_kill_9_mid_stream_then_restart_loses_and_repeats_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    append_requests(data, setup_requests())
    once = allot("serve", "--data", str(data), "--once", "--admin", ADMIN)
    assert once.returncode == 0, once.stderr
    assert "resumed at inbox offset 0" in once.stdout
    setup_lines = len(list(read_journal_lines(data)))
    assert setup_lines >= len(setup_requests())

    append_requests(data, mixed_requests(2000, seed=11))
    total = len(read_inbox(data))
    kills = 0
    for round_ in range(3):
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "allot.cli",
                "serve",
                "--data",
                str(data),
                "--admin",
                ADMIN,
                "--batch",
                "23",
                "--tick",
                "0",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
        )
        try:
            start = len(list(read_journal_lines(data)))
            target = start + 150 + 100 * round_
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if len(list(read_journal_lines(data))) >= target or proc.poll() is not None:
                    break
                time.sleep(0.005)
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            proc.send_signal(signal.SIGKILL)
            kills += 1
        finally:
            proc.wait(timeout=30)
            for stream in (proc.stdout, proc.stderr):
                if stream:
                    stream.close()
    journaled = {r["inbox"][1] for r in journal_records(data)}
    assert kills == 3 and max(journaled) < total - 1, "the kills should land mid-stream"

    final = allot("serve", "--data", str(data), "--once", "--admin", ADMIN)
    assert final.returncode == 0, final.stderr
    assert "warning" not in final.stderr
    assert f"stopped at inbox offset {total}" in final.stdout
    assert_exactly_once(data)
    assert len(list(read_dead_letters(data))) > 10

    # the decisions are reproduced by a replay of the journal
    stripped = stripped_copy(data / JOURNAL_FILE, tmp_path / "stripped.jsonl")
    verify = allot("replay", str(stripped), "--verify")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    verify = allot("replay", str(data / JOURNAL_FILE), "--verify")
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_serve_ticks_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    append_requests(tmp_path, setup_requests())
    proc = subprocess.Popen(
        [sys.executable, "-m", "allot.cli", "serve", "--data", str(tmp_path), "--tick", "0.2s"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
        env={k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")},
    )
    try:
        deadline = time.monotonic() + 30
        ticks: list[dict] = []
        while time.monotonic() < deadline and len(ticks) < 2:
            ticks = [r for r in journal_records(tmp_path) if r["type"] == "clock.tick"]
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert len(ticks) >= 2 and all(t["actor"] == "allot-ticker" for t in ticks)
    assert ticks[0]["time"] < ticks[1]["time"]  # time moves in the log
    assert "ticking every 0.2 s" in out and "stopped at inbox offset" in out
    assert_exactly_once(tmp_path)


def test_a_stop_while_serve_recovers_is_said_and_cuts_nothing(tmp_path: Path) -> None:
    """SIGTERM while `allot serve` rebuilds its state (a big journal takes minutes; here
    it waits for the folder lock, held as README says to rotate the inbox, to complete
    a cut-short input) ended it without a word: SIGTERM's default action. It now stops
    with a line, leaves the folder as a crash there would, and the next start goes on."""
    data = tmp_path / "data"
    append_requests(data, setup_requests())
    append_requests(
        data,
        [
            make_request(
                "workload.submitted", cluster="default", actor="alice", workload="w1",
                allocation="lab/a", gpus=1, min_runtime=60,
            )
        ],
    )  # fmt: skip
    once = allot("serve", "--data", str(data), "--once", "--admin", ADMIN)
    assert once.returncode == 0, once.stderr
    lines = (data / JOURNAL_FILE).read_bytes().splitlines(keepends=True)
    assert orjson.loads(lines[-1])["type"] == "workload.placed"
    cut = b"".join(lines[:-1])  # a crash before the placement of w1 was written
    (data / JOURNAL_FILE).write_bytes(cut)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")}
    with folder_lock(data):  # completing w1's records waits for this lock
        proc = subprocess.Popen(
            [sys.executable, "-m", "allot.cli", "serve", "--data", str(data), "--admin", ADMIN],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            stdin=subprocess.DEVNULL, env=env,
        )  # fmt: skip
        try:
            while serving_pid(data) != proc.pid:  # it is recovering
                assert proc.poll() is None, proc.communicate()
                time.sleep(0.05)
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, (out, err)
    assert "Traceback" not in err, err
    assert f"allot serve: stopped while recovering {data}" in out, (out, err)
    assert "resumed at" not in out
    assert (data / JOURNAL_FILE).read_bytes() == cut
    again = allot("serve", "--data", str(data), "--once", "--admin", ADMIN)
    assert again.returncode == 0, again.stderr
    assert (data / JOURNAL_FILE).read_bytes() == b"".join(lines)
    assert_exactly_once(data)


def test_serve_once_says_how_many_inputs_went_to_the_dead_letter_file(tmp_path: Path) -> None:
    """The stop line counted inputs and journal records: with requests that were not
    JSON, the inputs unaccounted for were in DIR/dlq.jsonl, and nothing said so."""
    data = tmp_path / "data"
    append_requests(data, [*setup_requests(), b"{not json", b"[1]"])
    once = allot("serve", "--data", str(data), "--once", "--admin", ADMIN)
    assert once.returncode == 0, once.stderr
    inputs = len(setup_requests()) + 2
    journaled = len(list(read_journal_lines(data)))
    assert len(list(read_dead_letters(data))) == 2
    assert once.stdout.splitlines()[-1] == (
        f"allot serve: stopped at inbox offset {inputs} ({inputs} inputs, {journaled} journal "
        f"records this run; 2 inputs to the dead-letter file {data / DLQ_FILE})"
    )
    again = allot("serve", "--data", str(data), "--once", "--admin", ADMIN)
    assert again.stdout.splitlines()[-1] == (  # none this run: nothing to say
        f"allot serve: stopped at inbox offset {inputs} (0 inputs, 0 journal records this run)"
    )


def test_serve_config_flags_are_journaled(tmp_path: Path) -> None:
    append_requests(tmp_path, setup_requests())
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")}
    environ["ALLOT_ADMINS"] = "ops, root"
    flags = ["--once", "--set", "window=3d", "--policy", "fifo"]
    result = subprocess.run(
        [sys.executable, "-m", "allot.cli", "serve", "--data", str(tmp_path), *flags],
        capture_output=True,
        text=True,
        env=environ,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    config = journal_records(tmp_path)[0]
    assert config["type"] == "config.set"
    assert config["config"]["admins"] == ["ops", "root"]
    assert config["config"]["ordering"] == "fifo" and config["config"]["window"] == 3 * 86400

    # no config flags: the journal's config stays (no new config.set)
    append_requests(tmp_path, [make_request("clock.tick", cluster="default", actor="x")])
    assert allot("serve", "--data", str(tmp_path), "--once").returncode == 0
    assert [r["type"] for r in journal_records(tmp_path)].count("config.set") == 1

    # a restart with other flags journals them (it used to keep the first start's config:
    # the comparison was cached by the journal's config alone, not by the flags too)
    append_requests(tmp_path, [make_request("clock.tick", cluster="default", actor="x")])
    result = allot(
        "serve", "--data", str(tmp_path), "--once", "--admin", "carol", "--policy", "fifo"
    )
    assert result.returncode == 0, result.stderr
    configs = [r for r in journal_records(tmp_path) if r["type"] == "config.set"]
    assert len(configs) == 2 and configs[1]["config"]["admins"] == ["carol"]
    assert configs[1]["config"]["ordering"] == "fifo"

    for flags, message in (
        (["--set", "windw=3d"], "unknown config key 'windw'"),
        (["--set", "window"], "expected KEY=VALUE"),
        (["--set", "window=-3d"], "config key 'window': not a duration: '-3d'"),
        (["--policy", "nope"], "nope"),
        (["--tick", "soon"], "--tick 'soon'"),
    ):
        result = allot("serve", "--data", str(tmp_path), "--once", *flags)
        assert result.returncode == 2, (flags, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (flags, result.stderr)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(b"window: 3d\nwindw: 1d\n", ": unknown config key 'windw'", id="unknown-key"),
        pytest.param(b"window: soon\n", ": config key 'window': not a duration", id="bad-value"),
        pytest.param(
            b"window: 3d\n  bucket: [1\n",
            ":2:9: not valid YAML: mapping values are not allowed here",
            id="yaml-syntax",
        ),
        pytest.param(
            b"window: 1d\nwindow: 2d\n",
            ":2:1: not valid YAML: key 'window' given twice",
            id="twice",
        ),
        pytest.param(b"\xff\xfe", ": not UTF-8 text", id="not-utf8"),
    ],
)
def test_a_bad_config_file_is_one_line_naming_it(tmp_path: Path, text: bytes, message: str) -> None:
    """An unknown key did not name the file (a --set would read the same), a YAML error
    took four lines, a key given twice was silently the last, and bytes that are not
    UTF-8 were a traceback; `allot simulate` says `FILE:LINE:COL: ...` in one line."""
    config = tmp_path / "config.yaml"
    config.write_bytes(text)
    result = allot("serve", "--data", str(tmp_path / "data"), "--once", "--config", str(config))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: --config {config}{message}"), lines


def test_a_config_file_is_journaled(tmp_path: Path) -> None:
    append_requests(tmp_path, setup_requests())
    for n, text in enumerate(("window: 2d\n", "config: {window: 3d}\nhorizon: 1d\n")):
        config = tmp_path / "config.yaml"  # plain keys, or a scenario's `config:` section
        config.write_text(text)
        append_requests(tmp_path, [make_request("clock.tick", cluster="default", actor="x")])
        result = allot("serve", "--data", str(tmp_path), "--once", "--config", str(config))
        assert result.returncode == 0, result.stderr
        configs = [r for r in journal_records(tmp_path) if r["type"] == "config.set"]
        assert configs[n]["config"]["window"] == (2 + n) * 86400


def test_a_core_restored_from_a_snapshot_sees_new_config_flags() -> None:
    """The Kafka worker sets `wanted` on a core unpickled from its snapshot: the restored
    comparison cache must not hide that the flags changed."""
    from domain.config import SchedulerConfig

    core = SchedulerCore("default", SchedulerConfig(admins=["ops"]))
    record = InboxRecord(
        0,
        0,
        1_767_225_600.0,
        orjson.dumps(make_request("clock.tick", cluster="default", actor="x")),
    )
    core.process([record])
    assert tuple(core.state.config.admins) == ("ops",) and not core.config_due()
    restored = pickle.loads(pickle.dumps(core))
    restored.wanted = SchedulerConfig(admins=["carol"], ordering="fifo")
    assert restored.config_due()
    restored.wanted = SchedulerConfig(admins=["ops"])  # equal to the journal's: nothing due
    assert not restored.config_due()


def _tick(offset: int, actor: str = "x") -> InboxRecord:
    body = make_request("clock.tick", cluster="default", actor=actor)
    return InboxRecord(0, offset, 1_767_225_600.0 + offset, orjson.dumps(body))


def _configs(journal: list[bytes]) -> list[dict]:
    return [r for r in map(orjson.loads, journal) if r["type"] == "config.set"]


def test_a_restart_with_set_changes_that_key_and_keeps_the_journals_admins() -> None:
    """`allot serve --set window=3d` without --admin used to journal the defaults plus
    the window: the recorded admins were dropped and anyone could act."""
    from domain.config import SchedulerConfig, parse_config

    core = SchedulerCore("default", SchedulerConfig(admins=["ops"], hysteresis=0.3))
    core.process([_tick(0)])
    restored = pickle.loads(pickle.dumps(core))
    restored.wanted = parse_config({"window": "3d"})
    (config,) = _configs(restored.process([_tick(1)]).journal)
    assert config["actor"] == "allot"
    assert config["config"]["window"] == 3 * 86400
    assert config["config"]["admins"] == ["ops"] and config["config"]["hysteresis"] == 0.3


def test_an_admins_config_change_stands_until_the_next_start() -> None:
    """The start's config is journaled once (DESIGN §4); the server used to journal it
    again right after an admin's change, reverting it at the next input."""
    from domain.config import SchedulerConfig

    core = SchedulerCore("default", SchedulerConfig(admins=["ops"]))
    first = core.process([_tick(0)]).journal
    assert [c["actor"] for c in _configs(first)] == ["allot"]
    change = make_request(
        "config.set", cluster="default", actor="ops", config={"admins": ["ops"], "window": "2d"}
    )
    out = core.process(
        [InboxRecord(0, 1, 1_767_225_601.0, orjson.dumps(change)), _tick(2), _tick(3)]
    ).journal
    assert [c["actor"] for c in _configs(out)] == ["ops"]
    assert core.state.config.window == 2 * 86400
    # a restart with flags applies them again, over what the admin left
    core.wanted = SchedulerConfig(admins=["ops", "carol"])
    (again,) = _configs(core.process([_tick(4)]).journal)
    assert again["config"]["admins"] == ["ops", "carol"] and again["config"]["window"] == 2 * 86400


# ------------------------------------------------------------ snapshots

EVERY_STEP = 1e-9  # snapshot_every: due after every step (when the last one is written)


def snapshot_run(folder: Path, *, batch: int, every: float | None) -> Recovery:
    with EmbeddedScheduler(folder, "default", None, batch=batch, snapshot_every=every) as s:
        recovery = s.start()
        while s.step():
            time.sleep(0.002)  # let a forked snapshot finish now and then
    return recovery


def two_folders(tmp_path: Path, first: int, more: int) -> tuple[Path, Path, list]:
    """`with_snapshots` served `first` requests taking snapshots as it went, then (from
    its last snapshot) `more` without, so its journal runs on past the snapshot;
    `reference` served the same inbox from the beginning without snapshots."""
    requests = mixed_requests(first + more, seed=5)
    with_snapshots, reference = tmp_path / "snap", tmp_path / "ref"
    for folder in (with_snapshots, reference):
        append_requests(folder, setup_requests(), ts=1_767_225_600.0)
    for i in range(0, first, 10):
        append_requests(with_snapshots, requests[i : i + 10], ts=1_767_225_600.0 + 60 * (i + 1))
    snapshot_run(with_snapshots, batch=7, every=EVERY_STEP)
    assert (with_snapshots / SNAPSHOT_FILE).exists()
    for i in range(first, first + more, 10):
        append_requests(with_snapshots, requests[i : i + 10], ts=1_767_225_600.0 + 60 * (i + 1))
    snapshot_run(with_snapshots, batch=11, every=None)
    shutil.copy(with_snapshots / INBOX_FILE, reference / INBOX_FILE)
    snapshot_run(reference, batch=50, every=None)  # from the beginning, no snapshot
    assert not (reference / SNAPSHOT_FILE).exists()
    return with_snapshots, reference, requests


def test_a_restart_from_a_snapshot_decides_as_a_run_from_the_beginning(tmp_path: Path) -> None:
    snap, ref, _ = two_folders(tmp_path, first=300, more=200)
    lines_before = len(list(read_journal_lines(snap)))
    recovery = snapshot_run(snap, batch=9, every=None)
    assert 0 < recovery.from_snapshot < lines_before
    assert recovery.folded == lines_before - recovery.from_snapshot  # only the tail re-derived
    assert (snap / JOURNAL_FILE).read_bytes() == (ref / JOURNAL_FILE).read_bytes()
    assert (snap / DLQ_FILE).read_bytes() == (ref / DLQ_FILE).read_bytes()
    assert_exactly_once(snap)


@pytest.mark.parametrize(
    "damage",
    ["journal-cut", "unreadable", "wrong-state", "wrong-position", "other-cluster", "old-format"],
)
def test_a_snapshot_that_cannot_be_trusted_is_not_used(
    tmp_path: Path, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    snap, ref, _ = two_folders(tmp_path, first=200, more=50)
    path = snap / SNAPSHOT_FILE
    if damage == "journal-cut":  # journal and DLQ older than the snapshot (a backup)
        states = crash_states(snap)
        journal, dlq = states[len(states) // 3]
        (snap / JOURNAL_FILE).write_bytes(journal)
        (snap / DLQ_FILE).write_bytes(dlq)
        warning = "does not fit"
    elif damage == "unreadable":
        path.write_bytes(b"\x00 not a snapshot")
        warning = "unreadable, or written by another allot version"
    else:
        snapshot = pickle.loads(zlib.decompress(path.read_bytes()))
        if damage == "wrong-state":  # the files fit, the state does not: re-derive it all
            core = snapshot["core"]
            core.state = SchedulerCore("default").state
            warning = "re-deriving it from the beginning"
        elif damage == "wrong-position":  # the state is not the one at the inbox mark
            snapshot["core"] = SchedulerCore("default")
            warning = "does not fit"
        elif damage == "old-format":  # written by code whose state had another shape
            snapshot["format"] = SNAPSHOT_FORMAT - 1
            warning = "does not fit"
        else:
            snapshot["cluster"] = "elsewhere"
            warning = "does not fit"
        path.write_bytes(blob_of(snapshot))
    recovery = snapshot_run(snap, batch=9, every=None)
    assert warning in capsys.readouterr().err
    assert recovery.from_snapshot == 0
    assert (snap / JOURNAL_FILE).read_bytes() == (ref / JOURNAL_FILE).read_bytes()
    assert (snap / DLQ_FILE).read_bytes() == (ref / DLQ_FILE).read_bytes()


def test_serve_snapshots_and_says_where_it_resumed(tmp_path: Path) -> None:
    data = tmp_path / "data"
    append_requests(data, setup_requests())
    append_requests(data, mixed_requests(300, seed=9))
    never = allot("serve", "--data", str(data), "--once", "--snapshot-every", "0", "--batch", "20")
    assert never.returncode == 0, never.stderr
    assert not (data / SNAPSHOT_FILE).exists()
    append_requests(data, mixed_requests(300, seed=10))
    often = allot(
        "serve", "--data", str(data), "--once", "--snapshot-every", "0.001", "--batch", "20"
    )
    assert often.returncode == 0, often.stderr
    assert (data / SNAPSHOT_FILE).exists()
    assert not list(data.glob(f"{SNAPSHOT_FILE}.tmp.*"))  # written whole, then renamed
    (data / f"{SNAPSHOT_FILE}.tmp.99999").write_bytes(b"half")  # a writer killed mid-way
    again = allot("serve", "--data", str(data), "--once")
    assert not list(data.glob(f"{SNAPSHOT_FILE}.tmp.*"))
    assert again.returncode == 0, again.stderr
    assert "after a snapshot of" in again.stdout and "warning" not in again.stderr
    bad = allot("serve", "--data", str(data), "--once", "--snapshot-every", "soon")
    assert bad.returncode == 2 and "--snapshot-every 'soon'" in bad.stderr


def test_recovery_from_a_snapshot_and_any_later_crash_point(tmp_path: Path) -> None:
    """Every snapshot taken along a run, combined with any crash state that still holds
    what was written before it, recovers to the same journal and DLQ as the run."""
    full = tmp_path / "full"
    append_requests(full, setup_requests(), ts=1_767_225_600.0)
    requests = mixed_requests(120, seed=13)
    for i in range(0, len(requests), 10):
        append_requests(full, requests[i : i + 10], ts=1_767_225_600.0 + 60 * (i + 1))
    snapshots: list[tuple[bytes, int, int]] = []  # (snapshot, journal bytes, dlq bytes)
    with EmbeddedScheduler(
        full, "default", None, batch=7, snapshot_every=EVERY_STEP, fork_snapshots=False
    ) as scheduler:
        scheduler.start()
        while scheduler.step():
            snapshots.append(
                (
                    (full / SNAPSHOT_FILE).read_bytes(),
                    (full / JOURNAL_FILE).stat().st_size,
                    (full / DLQ_FILE).stat().st_size if (full / DLQ_FILE).exists() else 0,
                )
            )
    journal = (full / JOURNAL_FILE).read_bytes()
    dlq = (full / DLQ_FILE).read_bytes()
    assert len(snapshots) > 10 and dlq

    states = crash_states(full)
    rng = random.Random(17)
    cases = 0
    for n, (snapshot, js, ds) in enumerate(rng.sample(snapshots, 8)):
        later = [(j, d) for j, d in states if len(j) >= js and len(d) >= ds]
        for m, (j, d) in enumerate(rng.sample(later, min(4, len(later)))):
            folder = tmp_path / f"s{n}-c{m}"
            folder.mkdir()
            shutil.copy(full / INBOX_FILE, folder / INBOX_FILE)
            (folder / JOURNAL_FILE).write_bytes(j)
            (folder / DLQ_FILE).write_bytes(d)
            (folder / SNAPSHOT_FILE).write_bytes(snapshot)
            recovery = snapshot_run(folder, batch=5, every=None)
            assert recovery.from_snapshot > 0, f"snapshot {n} unused with crash state {m}"
            assert (folder / JOURNAL_FILE).read_bytes() == journal, f"snapshot {n}, crash {m}"
            assert (folder / DLQ_FILE).read_bytes() == dlq, f"snapshot {n}, crash {m}"
            cases += 1
    assert cases >= 20


def test_a_journal_that_differs_from_its_inbox_is_folded_as_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A journal record edited by hand (or written by other code) no longer re-derives
    from the inbox: the restart warns once, rebuilds the state from the journal as it
    is (the edited value in effect), leaves the journal alone and resumes after it."""
    folder = tmp_path / "d"
    append_requests(folder, setup_requests(), ts=1_767_225_600.0)
    requests = mixed_requests(150, seed=21)
    for i in range(0, len(requests), 10):
        append_requests(folder, requests[i : i + 10], ts=1_767_225_600.0 + 60 * (i + 1))
    with EmbeddedScheduler(folder, "default", None, batch=9, fork_snapshots=False) as s:
        s.start()
        while s.step():
            pass
        running = {w.id for w in s.core.state.workloads.values() if w.state == "running"}
    lines = (folder / JOURNAL_FILE).read_bytes().splitlines(keepends=True)
    # the last placement of a workload still running: its protection is in the state
    edit = max(
        i
        for i, x in enumerate(lines)
        if b'"workload.placed"' in x and orjson.loads(x)["workload"] in running
    )
    assert edit < len(lines) - 5  # inside the journal, not at its end
    record = orjson.loads(lines[edit])
    record["protected_until"] = 4_102_444_800.0  # 2100: protected "for ever"
    lines[edit] = orjson.dumps(record) + b"\n"
    edited = b"".join(lines)
    (folder / JOURNAL_FILE).write_bytes(edited)
    capsys.readouterr()
    with EmbeddedScheduler(folder, "default", None, batch=9, fork_snapshots=False) as s:
        recovery = s.start()
        assert recovery.folded == len(lines)
        assert recovery.resumed_at == sum(1 for _ in (folder / INBOX_FILE).open("rb"))
        w = s.core.state.workloads[record["workload"]]
        assert w.protected_until == 4_102_444_800.0  # as recorded
    err = capsys.readouterr().err
    assert (
        err.count(
            "differ from a re-derivation (a journal written by another allot version, or edited); folding"
        )
        == 1
    ), err
    assert (folder / JOURNAL_FILE).read_bytes() == edited


def test_a_folder_serve_cannot_lock_is_one_line(tmp_path: Path) -> None:
    """A read-only folder was a traceback from os.open (here the lock's name is taken
    by a folder: the same failure, and it fails for root too)."""
    folder = tmp_path / "d"
    (folder / ".serve.lock").mkdir(parents=True)
    result = allot("serve", "--data", str(folder), "--once", "--tick", "0")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.strip() == f"error: cannot serve {folder}: .serve.lock: Is a directory"


def test_an_input_larger_than_a_broker_takes_is_a_dead_letter_and_refused_at_send(
    tmp_path: Path,
) -> None:
    """A file has no message limit: a 30 MB tag was journaled (and printed by why)."""
    from streams.core import MAX_INPUT_BYTES

    core = SchedulerCore("default")
    big = orjson.dumps(
        make_request("clock.tick", cluster="default", actor="u") | {"pad": "x" * MAX_INPUT_BYTES}
    )
    out = core.process([InboxRecord(0, 0, 1_767_225_600.0, big)])
    assert out.journal == [] and len(out.dead) == 1
    assert f"record of {len(big):,} bytes" in out.dead[0].error
    # the tools refuse it before anything is written
    from streams.inbox import EmbeddedInbox, InboxError

    request = make_request(
        "workload.submitted", cluster="default", actor="u", workload="w", allocation="lab",
        gpus=1, min_runtime=3600.0, tags=["x" * MAX_INPUT_BYTES],
    )  # fmt: skip
    with pytest.raises(InboxError, match="the scheduler takes at most 1,048,576"):
        EmbeddedInbox(tmp_path / "d").send([request])
    assert not (tmp_path / "d" / INBOX_FILE).exists()


def test_an_append_that_fails_part_way_leaves_none_of_its_lines(tmp_path: Path) -> None:
    # a full disk mid-batch had left the first tasks of a refused array in the inbox,
    # to be read as accepted; a file-size limit fails the write the same way
    path = tmp_path / "inbox.jsonl"
    path.write_bytes(b'{"a":1}\n{"torn')
    script = textwrap.dedent(
        f"""
        import resource, signal
        from pathlib import Path
        from streams.embedded import EmbeddedError, _append
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
        try:
            _append(Path({str(path)!r}), b'{{"b":2}}\\n' * 2000)
        except EmbeddedError as why:
            print("refused:", why)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    assert out.startswith("refused: cannot write")
    assert path.read_bytes() == b'{"a":1}\n'  # the torn tail cut, nothing of the batch


@pytest.mark.parametrize("line", [b"oops{", b"[1]", b'"text"'], ids=["not-json", "list", "string"])
def test_a_damaged_dead_letter_line_is_named(tmp_path: Path, line: bytes) -> None:
    (tmp_path / "dlq.jsonl").write_bytes(b'{"inbox": [0, 3], "error": "x"}\n' + line + b"\n")
    with pytest.raises(EmbeddedError, match=r"dlq\.jsonl: a line that is not a dead letter"):
        list(read_dead_letters(tmp_path))


# ------------------------------------------------------------ an inbox cut by hand

T0 = 1_767_225_600.0


def unique_requests(n: int, seed: int, tag: str) -> list[bytes | dict]:
    """`mixed_requests`, its garbage made unique to `tag` (bytes already dead-lettered
    are told apart from new ones by their bytes only)."""
    out = mixed_requests(n, seed)
    return [
        b"%s %d \xff" % (tag.encode(), i) if isinstance(r, bytes) else r for i, r in enumerate(out)
    ]


def request_counts(folder: Path) -> tuple[Counter[str], Counter[str]]:
    """How often each request id is in the journal (as an input or a rejection's ref),
    and each dead letter's bytes in the DLQ."""
    ids: Counter[str] = Counter()
    for r in journal_records(folder):
        if r["type"] == "config.set" and r["actor"] == "allot":
            continue
        if r["type"] in INPUT_TYPES:
            ids[r["id"]] += 1
        elif r["type"].endswith(".rejected"):
            ids[r["ref"]] += 1
    return ids, Counter(d["value"] for d in read_dead_letters(folder))


def assert_each_once(folder: Path, requests: list[bytes | dict]) -> None:
    ids, dead = request_counts(folder)
    for r in requests:
        if isinstance(r, dict):
            assert ids[r["id"]] == 1, f"request {r['id']} is in the journal {ids[r['id']]} times"
        else:
            value = r.decode("utf-8", "replace")
            assert dead[value] == 1, f"{r!r} is in the DLQ {dead[value]} times"


def _cut(data: bytes, how: str) -> bytes | None:
    lines = data.splitlines(keepends=True)
    half = len(lines) // 2
    edited = next(i for i in range(half, len(lines)) if b"workload.submitted" in lines[i])
    if how == "cut to zero":
        return b""
    if how == "cut mid-way":  # back to the first half of its lines
        return b"".join(lines[:half])
    if how == "cut mid-line":  # truncate -s: the last line left is torn
        return data[: len(data) // 2 + 17]
    if how == "head cut":  # the oldest half dropped (rotated away)
        return b"".join(lines[half:])
    if how == "line removed":
        return b"".join(lines[:half] + lines[half + 1 :])
    if how == "line edited":  # the same request (its id), other GPUs
        wrapper = orjson.loads(lines[edited])
        request = orjson.loads(wrapper["value"])
        request["gpus"] *= 2  # journaled whether accepted or rejected
        wrapper["value"] = orjson.dumps(request).decode()
        return b"".join([*lines[:edited], orjson.dumps(wrapper) + b"\n", *lines[edited + 1 :]])
    if how == "removed":
        return None
    raise AssertionError(how)


CUTS = [
    "cut to zero",
    "cut mid-way",
    "cut mid-line",
    "head cut",
    "line removed",
    "line edited",
    "removed",
]


@pytest.mark.parametrize("how", CUTS)
def test_an_inbox_cut_by_hand_loses_and_repeats_nothing(
    tmp_path: Path, how: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The inbox is cut back, rotated, edited or removed by hand while serve is down, and
    requests are sent before and after the restart. Its line numbers no longer are the
    offsets the journal records, so resuming after the last recorded offset skipped the
    new requests (those at lines it took as done) or refused to start. Now every request
    sent is in the journal (or the DLQ) once, none from before is applied again, and the
    restart says what it found; a later restart re-derives the same journal."""
    folder = tmp_path / "d"
    old = setup_requests() + unique_requests(80, seed=30, tag="old")
    for i in range(0, len(old), 10):
        append_requests(folder, old[i : i + 10], ts=T0 + 60 * i)
    run_to_end(folder, batch=7)
    inbox = folder / INBOX_FILE
    recorded = max(r["inbox"][1] for r in journal_records(folder))
    cut = _cut(inbox.read_bytes(), how)
    if cut is None:
        inbox.unlink()
    else:
        inbox.write_bytes(cut)

    before = unique_requests(30, seed=32, tag="before")  # sent while serve is down
    for i in range(0, len(before), 10):
        append_requests(folder, before[i : i + 10], ts=T0 + 9000 + 60 * i)
    capsys.readouterr()
    with EmbeddedScheduler(
        folder, "default", None, batch=7, snapshot_every=EVERY_STEP, fork_snapshots=False
    ) as s:
        recovery = s.start()
        err = capsys.readouterr().err
        s.drain()
        after = unique_requests(20, seed=33, tag="after")  # sent once it runs again
        append_requests(folder, after, ts=T0 + 20_000)
        s.drain()

    if how == "line edited":  # the same requests at the same offsets: the journal stands
        assert (
            err.count(
                "differ from a re-derivation (a journal written by another allot version, or edited); folding"
            )
            == 1
        ), err
        assert not list(folder.glob(f"{INBOX_FILE}.replaced-*"))
        assert recovery.resumed_at == recorded + 1
    else:
        assert err.count("warning") == 1, err
        assert f"{inbox} is not the inbox journal.jsonl was folded from" in err
        assert f"the inbox starts again at offset {recorded + 1} with the 30 requests" in err
        assert recovery.resumed_at == recorded + 1
        # the inbox as it was found is kept whole (after a torn last line was cut off by
        # the next append; a removed one was made again by the requests sent)
        (kept,) = folder.glob(f"{INBOX_FILE}.replaced-*")
        whole = b"" if cut is None else cut[: cut.rfind(b"\n") + 1]
        assert kept.read_bytes().startswith(whole)
        assert kept.read_bytes().count(b"\n") == whole.count(b"\n") + len(before)
        assert inbox.read_bytes().startswith(b'{"inbox_base":%d,' % (recorded + 1))
    assert_each_once(folder, old + before + after)
    assert_exactly_once(folder)

    journal = (folder / JOURNAL_FILE).read_bytes()
    for snapshot in (True, False):  # from the snapshot taken since, then from the start
        if not snapshot:
            (folder / SNAPSHOT_FILE).unlink()
        capsys.readouterr()
        with EmbeddedScheduler(folder, "default", None, batch=7, snapshot_every=None) as s:
            again = s.start()  # re-derived from the new inbox: nothing to repair or warn of
            assert s.drain() == 0
        err = capsys.readouterr().err
        assert (folder / JOURNAL_FILE).read_bytes() == journal
        assert (again.from_snapshot > 0) == snapshot
        if how != "line edited" or snapshot:
            assert err == ""
            assert again.from_snapshot + again.folded == journal.count(b"\n")
            assert again.repaired == 0


@pytest.mark.parametrize("how", ["truncated", "truncated, then outgrown", "replaced", "removed"])
def test_an_inbox_cut_while_serving_loses_and_repeats_nothing(
    tmp_path: Path, how: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Cut under a running scheduler: it read on from its old byte position, so requests
    written since the cut were skipped (or read from mid-line as dead letters), and in a
    file replaced by a rename it never saw another line. Now the reader notices and the
    inbox starts again as at a restart."""
    folder = tmp_path / "d"
    old = setup_requests() + unique_requests(60, seed=30, tag="old")
    append_requests(folder, old, ts=T0)
    inbox = folder / INBOX_FILE
    new = unique_requests(150, seed=43, tag="new")
    with EmbeddedScheduler(folder, "default", None, batch=7, snapshot_every=None) as s:
        s.start()
        s.drain()
        recorded = s.offset - 1
        size = inbox.stat().st_size
        capsys.readouterr()
        if how.startswith("truncated"):
            with inbox.open("r+b") as f:
                f.truncate(0)
        elif how == "replaced":  # an editor's save, `mv`: another file under the name
            part = tmp_path / "part"
            part.write_bytes(b"".join(inbox.read_bytes().splitlines(keepends=True)[:5]))
            os.replace(part, inbox)
        else:
            inbox.unlink()
        if how == "truncated":
            assert s.step() == 0  # it looks before anything is sent
        append_requests(folder, new[:75], ts=T0 + 9000)
        append_requests(folder, new[75:], ts=T0 + 9100)
        if how == "truncated, then outgrown":  # past where it stood before it looks
            assert inbox.stat().st_size > size
        s.drain()
        err = capsys.readouterr().err
        assert s.offset == recorded + 1 + len(new)
    assert err.count("warning") == 1 and "while serving" in err, err
    assert f"starts again at offset {recorded + 1} with the " in err
    assert_each_once(folder, old + new)
    assert_exactly_once(folder)


def test_a_request_written_to_an_inbox_renamed_away_while_serving_is_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`mv inbox.jsonl rotated` under a running scheduler, while a submit that had opened
    the file was writing: its request lands in the moved file after the reader found the
    name gone, and the re-base read only the path, so it was never decided. The re-base
    now reads first what the moved file, still open, holds beyond the reader."""
    from streams.embedded import FileChanged, _append, encode_request

    folder = tmp_path / "d"
    old = setup_requests() + unique_requests(40, seed=31, tag="old")
    append_requests(folder, old, ts=T0)
    inbox = folder / INBOX_FILE
    late = unique_requests(3, seed=44, tag="late")
    new = unique_requests(30, seed=45, tag="new")
    with EmbeddedScheduler(folder, "default", None, batch=7, snapshot_every=None) as s:
        s.start()
        s.drain()
        rotated = tmp_path / "rotated"
        os.replace(inbox, rotated)
        with pytest.raises(FileChanged):  # the reader sees the name gone ...
            s.reader.read()
        # ... then the submit that had the file open writes, and the re-base follows
        _append(rotated, b"".join(encode_request(v, T0 + 8000) + b"\n" for v in late))
        s._rebase("replaced while serving")
        append_requests(folder, new, ts=T0 + 9000)
        s.drain()
        err = capsys.readouterr().err
    assert err.count("warning") == 1, err
    assert f"with the {len(late)} requests of it" in err
    assert_each_once(folder, old + late + new)
    assert_exactly_once(folder)


def test_a_request_written_to_an_inbox_renamed_away_meanwhile_is_written_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file a submit has open is moved before its write: the request went only to
    the moved file, where no scheduler at rest looks. It is written again at the path."""
    from streams.embedded import _append

    path = tmp_path / "inbox.jsonl"
    path.write_bytes(b"first\n")
    moved = tmp_path / "rotated"
    real_fsync = os.fsync

    def move_then_sync(fd: int) -> None:  # the operator's `mv` lands mid-append
        if path.exists() and not moved.exists():
            os.replace(path, moved)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", move_then_sync)
    _append(path, b"second\n")
    assert moved.read_bytes() == b"first\nsecond\n"
    assert path.read_bytes() == b"second\n"


def test_serve_once_says_it_stopped_on_sigterm(tmp_path: Path) -> None:
    """`allot serve --once` took SIGTERM's default action: it died without a word (exit
    -15), where plain `allot serve` finishes its batch and says where it stopped. Here
    the stop comes while --once waits for the folder lock to write its first batch."""
    data = tmp_path / "data"
    append_requests(data, setup_requests())
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")}
    with folder_lock(data):  # its first journal write waits for this lock
        proc = subprocess.Popen(
            [sys.executable, "-m", "allot.cli", "serve", "--data", str(data), "--once"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            stdin=subprocess.DEVNULL, env=env,
        )  # fmt: skip
        try:
            assert proc.stdout is not None
            started = proc.stdout.readline()  # said once recovered, before the drain
            assert "resumed at inbox offset 0" in started, (started, proc.stderr)
            proc.send_signal(signal.SIGTERM)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, (out, err)
    assert "Traceback" not in err, err
    last = out.splitlines()[-1]
    assert last.startswith("allot serve: stopped at inbox offset "), out
    stopped_at = int(last.split()[6])  # before or after its batch: never within one
    assert stopped_at in (0, len(setup_requests())), out
    assert {r["inbox"][1] for r in journal_records(data)} == set(range(stopped_at))


class SteppedClock:
    """The wall clock and the time since boot of a machine whose wall clock NTP steps."""

    def __init__(self, wall: float) -> None:
        self.wall, self.booted = wall, 1000.0

    def wait(self, seconds: float) -> None:
        self.wall += seconds
        self.booted += seconds

    def step(self, seconds: float) -> None:
        self.wall += seconds


def test_wall_clock_steps_neither_freeze_nor_reverse_time_in_the_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inbox stamps were the wall clock, which the scheduler clamps so that event time
    never goes back: an NTP step back of an hour froze time in the journal for an hour
    (every tick at one time; no protection ended, no usage accrued). A step back is now
    not taken: time in the log goes on at CLOCK_PACE (0.9) of the time since boot
    until the wall clock catches up; a step forward is taken once."""
    t0 = 1_767_225_600.0
    clock = SteppedClock(t0)
    monkeypatch.setattr(time, "time", lambda: clock.wall)
    monkeypatch.setattr(time, "clock_gettime", lambda _which: clock.booted)
    folder = tmp_path / "data"
    submit = make_request(
        "workload.submitted", cluster="default", actor="alice", workload="w1",
        allocation="lab/a", gpus=8, min_runtime=1800, resumable=True,
    )  # fmt: skip
    append_requests(folder, [*setup_requests(), submit])
    expected = []
    for step, wait in ((0, 600), (-3600, 600), (0, 1200), (7200, 0), (0, 600), (-600, 0)):
        clock.step(step)
        clock.wait(wait)
        append_requests(folder, [make_request("clock.tick", cluster="default", actor=ADMIN)])
        expected.append(t0 + {0: 600, 1: 1140, 2: 2220, 3: 6000, 4: 6600, 5: 6600}[len(expected)])
    with EmbeddedScheduler(folder, "default", None, fork_snapshots=False) as scheduler:
        scheduler.start()
        scheduler.drain()
    records = journal_records(folder)
    ticks = [r["time"] for r in records if r["type"] == "clock.tick"]
    # back an hour: not taken; forward two: the one hour beyond the log's time, once
    assert ticks == expected
    placed = next(r for r in records if r["type"] == "workload.placed")
    assert placed["time"] == t0 and placed["protected_until"] == t0 + 1800
    assert ticks[2] > placed["protected_until"]  # 37 minutes on, its protection has ended


def test_after_a_step_back_the_inbox_clock_meets_the_wall_clock_again_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """After the wall clock stepped back an hour, DIR/.clock kept the journal an hour
    ahead of it for good (until a forward step), silently. Now the journal's time runs
    at 0.9 of real time, never back, until the wall clock catches up (ten hours), and
    the first stamp finding it more than a few seconds behind warns, once."""
    t0 = 1_767_225_600.0
    clock = SteppedClock(t0)
    monkeypatch.setattr(time, "time", lambda: clock.wall)
    monkeypatch.setattr(time, "clock_gettime", lambda _which: clock.booted)
    folder = tmp_path / "data"

    def stamp() -> float:
        append_requests(folder, [make_request("clock.tick", cluster="default", actor=ADMIN)])
        return orjson.loads((folder / ".clock").read_bytes())["ts"]

    stamps = [stamp()]
    clock.step(-3600)
    for _ in range(11):
        clock.wait(3600)
        stamps.append(stamp())
    assert stamps == sorted(set(stamps))  # never back, never still
    leads = [round(ts - (t0 - 3600 + 3600 * i)) for i, ts in enumerate(stamps) if i]
    assert leads == [3240, 2880, 2520, 2160, 1800, 1440, 1080, 720, 360, 0, 0]
    warned = [line for line in capsys.readouterr().err.splitlines() if "behind" in line]
    assert len(warned) == 1 and "3240 s behind the journal" in warned[0], warned
    clock.step(-4)  # a few seconds: nothing to say
    stamp()
    clock.step(-60)
    stamp()
    warned = [line for line in capsys.readouterr().err.splitlines() if "behind" in line]
    assert len(warned) == 1 and "64 s behind" in warned[0], warned


def test_the_inbox_clock_keeps_its_lead_across_a_reboot() -> None:
    from streams.embedded import next_stamp

    last = {"ts": 5000.0, "wall": 1400.0, "booted": 900.0, "boot": "a"}  # 3600 s ahead
    assert next_stamp(last, 1500.0, 1000.0, "a") == 5090.0  # 0.9 of the pace since boot
    assert next_stamp(last, 9000.0, 1000.0, "a") == 9000.0  # a forward step, taken
    assert next_stamp(last, 1500.0, 30.0, "b") == 5090.0  # rebooted: the lead, shrunk alike
    assert next_stamp(last, 1300.0, 30.0, "b") == 5000.0  # ... never back
    assert next_stamp(None, 1500.0, 30.0, "b") == 1500.0  # no clock file yet
    assert next_stamp({"ts": "x"}, 1500.0, 30.0, "b") == 1500.0  # a damaged one


# ------------------------------------------------------------ files lost or full under serve


def start_serve(folder: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "allot.cli", "serve", "--data", str(folder), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
        env={k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")},
    )


def wait_for_offset(folder: Path, offset: int, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        done = [r["inbox"][1] for r in journal_records(folder) if "inbox" in r]
        if done and max(done) >= offset:
            return
        time.sleep(0.05)
    raise AssertionError(f"serve did not reach inbox offset {offset}")


@pytest.mark.parametrize("how", ["removed", "replaced"])
def test_a_journal_removed_under_a_running_serve_stops_it_and_a_restart_rebuilds_it(
    tmp_path: Path, how: str
) -> None:
    """`rm DIR/journal.jsonl` (or a copy put in its place) under `allot serve`: it went on
    from memory into a new journal of only the records after that, so `allot queue` and
    every reader lost the history (hosts, budgets, running work), and a restart from the
    snapshot it wrote there kept it lost. It now stops with one line before writing
    there, and a restart re-derives the whole journal from the inbox."""
    folder = tmp_path / "d"
    old = setup_requests() + unique_requests(30, seed=50, tag="old")
    append_requests(folder, old)
    proc = start_serve(folder, "--tick", "0", "--snapshot-every", "0.1s")
    try:
        wait_for_offset(folder, len(old) - 1, proc)
        journal = folder / JOURNAL_FILE
        full = journal.read_bytes()
        if how == "removed":
            journal.unlink()
        else:  # an older copy restored over it
            part = tmp_path / "part"
            part.write_bytes(b"".join(full.splitlines(keepends=True)[:3]))
            os.replace(part, journal)
        kept = journal.read_bytes() if journal.exists() else None
        new = unique_requests(20, seed=51, tag="new")
        append_requests(folder, new)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 2, err
    assert "Traceback" not in err
    assert err.strip().endswith(
        f"error: {journal} was {how} while serving ({len(full.splitlines()):,} records it "
        f"held are not in it now); stopped without writing there. `allot serve --data "
        f"{folder}` again re-derives the journal from inbox.jsonl (every request it still "
        "holds), or put the journal back first"
    ), err
    assert (journal.read_bytes() if journal.exists() else None) == kept  # nothing written
    again = allot("serve", "--data", str(folder), "--once", "--tick", "0")
    assert again.returncode == 0, again.stderr
    assert_each_once(folder, old + new)
    assert_exactly_once(folder)
    if how == "removed":  # the history is back whole, decided as it was
        assert journal.read_bytes().startswith(full)


def test_a_snapshot_serve_cannot_write_is_a_warning_naming_the_file_and_why(
    tmp_path: Path,
) -> None:
    """The forked child's failure was `writing DIR/snapshot.pickle failed (exit 1)`: no
    cause (a full disk, a folder made read-only). Its errno now comes back as the
    reason. Here the name is taken by a folder, so the rename fails (for root too)."""
    folder = tmp_path / "d"
    append_requests(folder, setup_requests())
    (folder / SNAPSHOT_FILE / "x").mkdir(parents=True)
    proc = start_serve(folder, "--tick", "0.1s", "--snapshot-every", "0.1s")
    try:
        wait_for_offset(folder, len(setup_requests()) + 3, proc)  # a few ticks on
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    failed = [line for line in err.splitlines() if "failed" in line]
    assert failed, err
    assert failed[0] == (
        f"allot serve: warning: writing {folder / SNAPSHOT_FILE} failed: Is a directory "
        "(serving goes on; a restart re-derives more of the journal)"
    )
    assert_exactly_once(folder)


def test_a_scheduler_whose_journal_write_failed_decides_nothing_more(tmp_path: Path) -> None:
    """After a failed write (a full disk: here a file-size limit, lifted again) the core
    had moved past records the journal does not hold; a later step journaled decisions
    after that gap, on inputs a restart does not see as decided. Every step now refuses."""
    folder = tmp_path / "d"
    append_requests(folder, setup_requests())
    script = textwrap.dedent(
        f"""
        import resource, signal
        from streams.embedded import EmbeddedError, EmbeddedScheduler, append_requests
        from tests.streams.test_embedded import mixed_requests
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        with EmbeddedScheduler({str(folder)!r}, "default", None, snapshot_every=None) as s:
            s.start()
            s.drain()
            size = (s.folder / "journal.jsonl").stat().st_size
            append_requests(s.folder, mixed_requests(20, seed=60), ts=2e9)
            hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
            resource.setrlimit(resource.RLIMIT_FSIZE, (size + 300, hard))
            try:
                s.step()
            except EmbeddedError as why:
                print("first:", why)
            print((s.folder / "journal.jsonl").stat().st_size == size)
            resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))  # space again
            append_requests(s.folder, mixed_requests(5, seed=61), ts=2e9 + 1)
            try:
                print("then:", s.step(), "read")
            except EmbeddedError as why:
                print("then:", why)
            print((s.folder / "journal.jsonl").stat().st_size == size)
        """
    )
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    first, unchanged, then, still = run.stdout.splitlines()
    assert (unchanged, still) == ("True", "True"), then  # none of the batch, nothing after
    assert first.startswith("first: cannot write ") and "the scheduler stopped" in first
    assert then == first.replace("first:", "then:", 1)
    allot("serve", "--data", str(folder), "--once", "--tick", "0")
    assert_exactly_once(folder)
