"""What the request-command tests share: the real `allot` in a subprocess, a served
`--data` folder, and reading its journal (tests/e2e/test_requests*.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import orjson

ULID = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}$")
ADMIN = "ops"


def env(**extra: str) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")}
    out.update(USER="tester", **extra)
    return out


def allot(
    *args: str, timeout: float = 60, environ: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "allot.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environ or env(),
        stdin=subprocess.DEVNULL,
    )


def journal(folder: Path) -> list[dict]:
    path = folder / "journal.jsonl"
    if not path.exists():
        return []
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def wait_for(folder: Path, match: Callable[[dict], bool], timeout: float = 20) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for record in journal(folder):
            if match(record):
                return record
        time.sleep(0.05)
    raise AssertionError(f"no matching journal record in {timeout} s: {journal(folder)[-5:]}")


def unserved_note(folder: Path) -> str:
    """The note a request to a folder that no `allot serve` serves now gets on stderr."""
    return (
        f"note: no scheduler serves {folder} now; the request waits in its inbox until "
        f"`allot serve --data {folder}` runs"
    )


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


def serve(data: Path, *args: str) -> subprocess.Popen[str]:
    """`allot serve --data DATA --admin ops ARGS` in the background."""
    return subprocess.Popen(
        [sys.executable, "-m", "allot.cli", "serve", "--data", str(data), "--admin", ADMIN, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
        stdin=subprocess.DEVNULL,
    )


def one_4_gpu_host_for_lab_x(data: Path) -> None:
    """Host h1 (4 GPUs) and allocation lab/x, set up through a running `serve(data)`."""
    for args in [
        ("host", "register", "h1", "4"),
        ("budget", "set", "lab", "1"),
        ("budget", "set", "lab/x", "1"),
    ]:
        assert allot(*args, "--as", ADMIN, "--data", str(data)).returncode == 0
    wait_for(data, lambda r: r.get("allocation") == "lab/x")


async def records_of(bootstrap: str, topic: str, key: bytes) -> list[object]:
    """Every record of `topic` with this key, reading to its current end."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        if not tps:
            await consumer._client.force_metadata_update()
            parts = consumer.partitions_for_topic(topic) or ()
            tps = [TopicPartition(topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        found = []
        deadline = time.monotonic() + 60
        while any([await consumer.position(tp) < ends[tp] for tp in tps]):
            assert time.monotonic() < deadline, f"could not read {topic} to its end"
            for records in (await consumer.getmany(timeout_ms=500)).values():
                found.extend(r for r in records if r.key == key)
        return found
    finally:
        await consumer.stop()
