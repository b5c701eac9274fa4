"""A real Kafka broker for every test that needs one (one per session).

``kafka_bootstrap`` is ``host:port`` of a broker, from the first of:

1. ``$ALLOT_KAFKA`` (a broker someone already runs);
2. testcontainers' Kafka module, when a Docker engine answers;
3. ``deploy/kafka/start`` (the official Apache Kafka jars, fetched once with Maven)
   on a free port with a throwaway data dir, stopped at the end of the session. Under
   pytest-xdist the workers share one such broker: the first to need it starts it, and
   the controller stops it when the run ends.

Tests that need it are never skipped for lack of a broker: if none can be had, the
fixture fails with the broker's log tail.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KAFKA_DIR = ROOT / "deploy" / "kafka"
# First use downloads the jars with Maven; later starts take seconds.
START_TIMEOUT_S = 900
STOP_TIMEOUT_S = 60
TESTCONTAINERS_IMAGE = "confluentinc/cp-kafka:7.9.0"
# set by a pytest-xdist controller for its workers (see pytest_configure)
SHARED_RUN_ENV = "ALLOT_TEST_RUN"
_OWNED_RUN: str | None = None


# Slurm's variables, which `allot queue` and `allot acct` read as squeue and sacct do
# (formats, filters, sort): a Slurm user's own would change every table the tests read
for _slurm_variable in (
    "SQUEUE_FORMAT",
    "SQUEUE_FORMAT2",
    "SACCT_FORMAT",
    "SQUEUE_USERS",
    "SQUEUE_STATES",
    "SQUEUE_ACCOUNT",
    "SQUEUE_NAMES",
    "SQUEUE_SORT",
):
    os.environ.pop(_slurm_variable, None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _docker_answers() -> bool:
    """True when a Docker engine answers a ping within a few seconds."""
    if not os.environ.get("DOCKER_HOST") and not os.path.exists("/var/run/docker.sock"):
        return False
    try:
        import docker

        client = docker.from_env(timeout=3)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no {path})"


def _start_local_broker(data: Path) -> str:
    """`deploy/kafka/start` on a free port with `data` as its storage: its address."""
    data.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    cmd = [str(KAFKA_DIR / "start"), "--data", str(data), "--port", str(port)]
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=START_TIMEOUT_S, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        subprocess.run([str(KAFKA_DIR / "stop"), "--data", str(data)], timeout=STOP_TIMEOUT_S)
        pytest.fail(
            f"deploy/kafka/start did not finish in {START_TIMEOUT_S}s\n"
            f"{_tail(data / 'broker.log')}",
            pytrace=False,
        )
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        subprocess.run([str(KAFKA_DIR / "stop"), "--data", str(data)], timeout=STOP_TIMEOUT_S)
        pytest.fail(
            f"could not start a Kafka broker (exit {proc.returncode}):\n{proc.stderr}\n"
            f"{_tail(data / 'broker.log')}",
            pytrace=False,
        )
    return lines[-1]


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    env = os.environ.get("ALLOT_KAFKA", "").strip().removeprefix("kafka://")
    if env:
        yield env
        return

    if _docker_answers():
        try:
            from testcontainers.community.kafka import KafkaContainer
        except ImportError:  # testcontainers < 4.14
            from testcontainers.kafka import KafkaContainer

        container = (
            KafkaContainer(os.environ.get("ALLOT_KAFKA_IMAGE", TESTCONTAINERS_IMAGE))
            .with_kraft()
            .with_env("KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR", "1")
            .with_env("KAFKA_TRANSACTION_STATE_LOG_MIN_ISR", "1")
            .with_env("KAFKA_AUTO_CREATE_TOPICS_ENABLE", "true")
        )
        container.start(timeout=120)
        try:
            yield container.get_bootstrap_server()
        finally:
            container.stop()
        return

    worker = os.environ.get("PYTEST_XDIST_WORKER")
    run = os.environ.get(SHARED_RUN_ENV)
    if worker and run:
        # pytest-xdist: the workers share one broker; the controller stops it
        yield _shared_broker(_shared_dir(run))
        return

    data = tmp_path_factory.mktemp("kafka")
    bootstrap = _start_local_broker(data)
    try:
        yield bootstrap
    finally:
        _stop_local_broker(data)


def _stop_local_broker(data: Path) -> None:
    subprocess.run(
        [str(KAFKA_DIR / "stop"), "--data", str(data), "--quiet"],
        timeout=STOP_TIMEOUT_S,
        check=False,
    )


def _shared_dir(run: str) -> Path:
    return Path(tempfile.gettempdir()) / f"allot-test-kafka-{run}"


def _shared_broker(shared: Path) -> str:
    """The run's one broker: the first worker to ask starts it, the others wait for it."""
    shared.mkdir(exist_ok=True)
    with open(shared / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        address = shared / "address"
        if address.exists():
            return address.read_text().strip()
        bootstrap = _start_local_broker(shared / "data")
        address.write_text(bootstrap)
        return bootstrap


def pytest_configure(config: pytest.Config) -> None:
    global _OWNED_RUN
    # the controller of a pytest-xdist run names it, so its workers find one broker
    if not hasattr(config, "workerinput") and SHARED_RUN_ENV not in os.environ:
        _OWNED_RUN = os.environ[SHARED_RUN_ENV] = uuid.uuid4().hex


def pytest_unconfigure(config: pytest.Config) -> None:
    if _OWNED_RUN is None or hasattr(config, "workerinput"):
        return
    shared = _shared_dir(_OWNED_RUN)
    if (shared / "data").exists():
        _stop_local_broker(shared / "data")
    shutil.rmtree(shared, ignore_errors=True)


# ------------------------------------------------------------- clients left running

# how long a test's aiokafka tasks may take to finish after it ends
CLIENT_SETTLE_S = 3.0


def _is_aiokafka(task: asyncio.Task) -> bool:
    code = getattr(task.get_coro(), "cr_code", None)
    return code is not None and f"{os.sep}aiokafka{os.sep}" in code.co_filename


@pytest.fixture(autouse=True)
async def _no_kafka_client_left_running(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    """A Kafka test that leaves an aiokafka client running fails here. The tests of one
    xdist worker share one event loop: a producer left retrying a stopped broker spun on
    it, and a consumer left in a group kept fetching, for the rest of the session, and a
    later test on that worker starved (the failover test timed out with an empty
    journal). The leftovers are cancelled so the next test starts clean."""
    if request.node.get_closest_marker("kafka") is None:
        yield
        return
    before = set(asyncio.all_tasks())
    yield
    deadline = time.monotonic() + CLIENT_SETTLE_S
    while True:
        left = [t for t in asyncio.all_tasks() - before if not t.done() and _is_aiokafka(t)]
        if not left or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    if not left:
        return
    names = sorted({t.get_coro().__qualname__ for t in left})
    for task in left:
        task.cancel()
    await asyncio.wait(left, timeout=CLIENT_SETTLE_S)
    pytest.fail(
        f"{len(left)} aiokafka task(s) still running after the test (a client not stopped): "
        + ", ".join(names),
        pytrace=False,
    )
