"""A real Kafka broker for every test that needs one (one per session).

``kafka_bootstrap`` is ``host:port`` of a broker, from the first of:

1. ``$ALLOT_KAFKA`` (a broker someone already runs);
2. testcontainers' Kafka module, when a Docker engine answers;
3. ``deploy/kafka/start`` (the official Apache Kafka jars, fetched once with Maven)
   on a free port with a throwaway data dir, stopped at the end of the session.

Tests that need it are never skipped for lack of a broker: if none can be had, the
fixture fails with the broker's log tail.
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KAFKA_DIR = ROOT / "deploy" / "kafka"
# First use downloads the jars with Maven; later starts take seconds.
START_TIMEOUT_S = 900
STOP_TIMEOUT_S = 60
TESTCONTAINERS_IMAGE = "confluentinc/cp-kafka:7.9.0"


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

    data = tmp_path_factory.mktemp("kafka")
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
    try:
        yield lines[-1]
    finally:
        subprocess.run(
            [str(KAFKA_DIR / "stop"), "--data", str(data), "--quiet"],
            timeout=STOP_TIMEOUT_S,
            check=False,
        )
