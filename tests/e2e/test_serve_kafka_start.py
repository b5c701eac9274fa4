"""How `allot serve --kafka` (and `python -m streams.worker`) starts: it creates no
topics, so a mistyped or forgotten `ALLOT_TOPIC_SUFFIX` stops it with one line instead
of starting an empty deployment nobody's tools read; the read tools name the suffix the
same way; an unreachable broker is one line. Real processes, the session's broker."""

from __future__ import annotations

import asyncio
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from tests.e2e.cli import allot, one_line_error

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]


def _topics(bootstrap: str) -> set[str]:
    from streams.topic_admin import _admin

    async def names() -> set[str]:
        admin = await _admin(bootstrap, 15.0)
        try:
            return set(await admin.list_topics())
        finally:
            await admin.close()

    return asyncio.run(names())


def _presence_members(bootstrap: str, suffix: str) -> int:
    """Members of the presence groups of workers on the journal with this suffix."""
    from streams.topic_admin import _admin

    async def count() -> int:
        admin = await _admin(bootstrap, 15.0)
        try:
            groups = [
                group[0]
                for group in await admin.list_consumer_groups()
                if f"allot.journal{suffix}/" in group[0] and group[0].endswith("/live")
            ]
            if not groups:
                return 0
            responses = await admin.describe_consumer_groups(groups)
            return sum(len(group[5]) for response in responses for group in response.groups)
        finally:
            await admin.close()

    return asyncio.run(count())


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")}
    return {**env, **extra}


@pytest.mark.parametrize(
    "command",
    [
        ["-m", "allot.cli", "serve", "--cluster", "typo", "--tick", "0"],
        ["-m", "streams.worker", "--cluster", "typo", "--tick-every", "0"],
    ],
    ids=["allot-serve", "streams-worker"],
)
def test_serve_with_a_suffix_nobody_created_refuses_and_creates_nothing(
    kafka_bootstrap: str, command: list[str]
) -> None:
    suffix = f".stagng-{uuid.uuid4().hex[:8]}"
    result = subprocess.run(
        [sys.executable, *command],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, cwd=ROOT,
        env=_env(ALLOT_KAFKA=kafka_bootstrap, ALLOT_TOPIC_SUFFIX=suffix),
    )  # fmt: skip
    one_line_error(
        result,
        f"no topic allot.inbox{suffix}, allot.journal{suffix} at {kafka_bootstrap}",
        f"ALLOT_TOPIC_SUFFIX is '{suffix}'",
        "`allot topics create --kafka ",
    )
    assert not [name for name in _topics(kafka_bootstrap) if name.endswith(suffix)]


@pytest.mark.parametrize(
    "command", [["queue"], ["shares"], ["acct"], ["host", "list"]], ids=" ".join
)
def test_a_read_tool_on_a_suffix_nobody_created_asks_about_the_suffix(
    kafka_bootstrap: str, command: list[str]
) -> None:
    """It said `run allot topics create and start the scheduler`: with a mistyped
    suffix, an invitation to make topics no scheduler reads."""
    suffix = f".stagng-{uuid.uuid4().hex[:8]}"
    result = allot(*command, env={"ALLOT_KAFKA": kafka_bootstrap, "ALLOT_TOPIC_SUFFIX": suffix})
    one_line_error(
        result,
        f"no topic allot.journal{suffix} at {kafka_bootstrap}",
        f"ALLOT_TOPIC_SUFFIX is '{suffix}': is it the scheduler's?",
    )
    assert "run `allot topics create`" not in result.stderr


def test_serve_creates_a_missing_dead_letter_or_snapshot_topic_and_says_so(
    kafka_bootstrap: str,
) -> None:
    """Only the inbox and the journal must exist (a deployment from before the
    snapshot topic, or one whose dead letters were deleted)."""
    from aiokafka.admin import NewTopic

    from streams.topic_admin import Topics, _admin, topic_configs

    suffix = f".part-{uuid.uuid4().hex[:8]}"
    topics = Topics.suffixed(suffix)
    configs = topic_configs(topics)

    async def some() -> None:
        admin = await _admin(kafka_bootstrap, 15.0)
        try:
            await admin.create_topics(
                [
                    NewTopic(t, 1, 1, topic_configs=configs[t])
                    for t in (topics.inbox, topics.journal)
                ]
            )
        finally:
            await admin.close()

    asyncio.run(some())
    proc = subprocess.Popen(
        [sys.executable, "-m", "allot.cli", "serve", "--cluster", "c", "--tick", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
        env=_env(ALLOT_KAFKA=kafka_bootstrap, ALLOT_TOPIC_SUFFIX=suffix), cwd=ROOT,
    )  # fmt: skip
    lines = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if "scheduler ready" in line:
                break
    finally:
        proc.send_signal(signal.SIGINT)
        _, rest = proc.communicate(timeout=60)
    logged = "".join(lines) + rest
    assert proc.returncode == 0, logged
    for name in (topics.dlq, topics.snapshots):
        assert f"WARNING allot.worker: created topic {name} (it did not exist)" in logged
    assert {topics.dlq, topics.snapshots} <= _topics(kafka_bootstrap)


def test_serve_on_an_unreachable_broker_is_one_line() -> None:
    """aiokafka's own ERROR about the connection came first."""
    result = allot("serve", "--kafka", "127.0.0.1:1", "--cluster", "x", "--tick", "0")
    one_line_error(result, "cannot reach Kafka at 127.0.0.1:1")


class _Serve:
    """`allot serve --kafka` in the background; its log lines read as they come."""

    def __init__(self, environ: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "allot.cli", "serve", "--cluster", "c", "--tick", "1s",
             "--admin", "ops"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            stdin=subprocess.DEVNULL, env=environ, cwd=ROOT,
        )  # fmt: skip
        self.lines: queue.Queue[str] = queue.Queue()
        self.log: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.put(line)
        self.lines.put("")  # the end

    def until(self, text: str, timeout: float = 120) -> None:
        """Read its log up to a line with `text` (fails if it ends or stays quiet)."""
        while True:
            line = self.lines.get(timeout=timeout)
            assert line, "".join(self.log)
            self.log.append(line)
            if text in line:
                return

    def stop(self, signum: int = signal.SIGINT) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signum)
        code = self.proc.wait(timeout=60)
        while True:
            line = self.lines.get(timeout=30)
            if not line:
                return code
            self.log.append(line)

    @property
    def text(self) -> str:
        return "".join(self.log)


@pytest.mark.parametrize(
    "previous",
    ["running", "stopped", "killed", "killed-unreaped"],
    ids=["running", "stopped", "killed", "killed-unreaped"],
)
def test_a_second_serve_says_it_took_over_from_a_live_worker(
    kafka_bootstrap: str, previous: str
) -> None:
    """Two `allot serve` for one cluster: the newcomer fences the running one (which
    stops with 'took over'); its log used to read like any start. A worker started
    right after the first was killed on this machine does not warn: the broker still
    lists the dead one until its session times out, but its process is gone."""
    suffix = f".two-{uuid.uuid4().hex[:8]}"
    environ = _env(ALLOT_KAFKA=kafka_bootstrap, ALLOT_TOPIC_SUFFIX=suffix)
    created = allot(
        "topics", "create", env={"ALLOT_KAFKA": kafka_bootstrap, "ALLOT_TOPIC_SUFFIX": suffix}
    )
    assert created.returncode == 0, created.stderr
    first = _Serve(environ)
    second = None
    try:
        first.until("scheduler ready")
        if previous == "stopped":
            assert first.stop() == 0, first.text
        if previous.startswith("killed"):  # once the broker lists it as present
            while _presence_members(kafka_bootstrap, suffix) == 0:
                assert first.proc.poll() is None, first.text
                time.sleep(0.2)
            first.proc.kill()
            if previous == "killed":  # else a zombie, as under a parent slow to reap it
                first.proc.wait(timeout=60)
        second = _Serve(environ)
        second.until("scheduler ready")
        if previous == "running":
            # fenced at its next tick's write
            assert first.proc.wait(timeout=120) == 2, first.text
            assert first.stop() == 2
            assert "another worker with this worker's topics and clusters took over" in first.text
        assert second.stop() == 0, second.text
    finally:
        for serve in (first, second):
            if serve is not None and serve.proc.poll() is None:
                serve.proc.kill()
                serve.proc.wait()
    warned = [line for line in second.log if "from a live worker" in line]
    if previous == "running":
        assert len(warned) == 1, second.text
        assert (
            "WARNING allot.worker: took inbox partitions [0] over from a live worker" in warned[0]
        )
        assert "allot-worker/" in warned[0]  # which one: its client id and host
    else:
        assert not warned, second.text


def _delete_topic(bootstrap: str, name: str) -> None:
    from streams.topic_admin import _admin

    async def delete() -> None:
        admin = await _admin(bootstrap, 15.0)
        try:
            await admin.delete_topics([name])
        finally:
            await admin.close()

    asyncio.run(delete())
    while name in _topics(bootstrap):  # deletion is asynchronous on the broker
        time.sleep(0.2)


def test_a_restart_says_where_the_inbox_resumes_and_how_many_requests_wait(
    kafka_bootstrap: str,
) -> None:
    """After an upgrade the operator wants to know how far behind the new worker starts;
    the take-over line named only the journal records it re-read."""
    suffix = f".resume-{uuid.uuid4().hex[:8]}"
    env = {"ALLOT_KAFKA": kafka_bootstrap, "ALLOT_TOPIC_SUFFIX": suffix, "ALLOT_CLUSTER": "c"}
    assert allot("topics", "create", env=env).returncode == 0
    first = _Serve(_env(**env))
    first.until("scheduler ready")
    registered = allot("host", "register", "h0", "8", "--as", "ops", "--wait", "30", env=env)
    assert registered.returncode == 0, registered.stderr
    assert first.stop() == 0, first.text
    for name in ("h1", "h2", "h3"):  # sent while no scheduler runs
        assert allot("host", "register", name, "8", "--as", "ops", env=env).returncode == 0
    second = _Serve(_env(**env))
    try:
        second.until("took over inbox partitions [0]")
    finally:
        assert second.stop() == 0, second.text
    took = next(line for line in second.log if "took over inbox partitions" in line)
    assert "; inbox resumes at offset " in took and ", 3 requests waiting)" in took, took
    # one cluster is "1 cluster" (the log said "1 clusters")
    assert "(1 cluster, " in took, took
    ready = next(line for line in second.log if "scheduler ready" in line)
    assert "scheduler ready: 1 cluster on inbox partitions [0]" in ready, ready


def test_serve_refuses_an_inbox_created_again_instead_of_skipping_its_requests(
    kafka_bootstrap: str,
) -> None:
    """The journal records the inbox offsets it has read; an inbox topic deleted and
    created again starts at 0, so the worker took its new requests for read ones and
    dropped them without a word (a submit got no verdict, the clock stood still)."""
    suffix = f".recreated-{uuid.uuid4().hex[:8]}"
    env = {"ALLOT_KAFKA": kafka_bootstrap, "ALLOT_TOPIC_SUFFIX": suffix, "ALLOT_CLUSTER": "c"}
    assert allot("topics", "create", env=env).returncode == 0
    first = _Serve(_env(**env))
    first.until("scheduler ready")
    for name in ("h0", "h1"):
        registered = allot("host", "register", name, "8", "--as", "ops", "--wait", "30", env=env)
        assert registered.returncode == 0, registered.stderr
    assert first.stop() == 0, first.text
    _delete_topic(kafka_bootstrap, f"allot.inbox{suffix}")
    assert allot("topics", "create", env=env).returncode == 0
    result = subprocess.run(
        [sys.executable, "-m", "allot.cli", "serve", "--cluster", "c", "--tick", "1s"],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, cwd=ROOT,
        env=_env(**env),
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    error = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(error) == 1, result.stderr
    assert (
        f"allot.inbox{suffix} partition 0 ends at offset 0, but allot.journal{suffix}" in error[0]
    )
    assert "would be skipped as read" in error[0]
