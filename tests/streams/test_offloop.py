"""Snapshots made in a forked child (`streams.offloop`): same bytes, taken at the call,
failures reported, and the event loop free while the child works."""

from __future__ import annotations

import asyncio
import fcntl
import os
import pickle
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from streams.offloop import blob_of, can_fork, fork_to_file, reaped, start_blobs

pytestmark = pytest.mark.skipif(not can_fork(), reason="no os.fork on this platform")


def _state(n: int) -> dict[str, object]:
    return {"ids": {f"input-{i}": float(i) for i in range(n)}, "name": "c", "nested": [(1, 2)]}


async def test_child_blobs_equal_the_inline_ones() -> None:
    objects = [_state(1000), {"other": list(range(50))}, "plain"]
    forked = await start_blobs(objects)
    inline = await start_blobs(objects, fork=False)
    assert forked == inline == [blob_of(o) for o in objects]
    assert pickle.loads(zlib.decompress(forked[0])) == objects[0]


async def test_the_state_is_captured_at_the_call() -> None:
    state = _state(200_000)  # big enough that the child is still pickling below
    pending = start_blobs([state])
    state["ids"].clear()  # the live loop goes on changing its state
    state["name"] = "changed"
    (blob,) = await pending
    captured = pickle.loads(zlib.decompress(blob))
    assert captured["name"] == "c" and len(captured["ids"]) == 200_000


async def test_a_failing_child_is_reported() -> None:
    with pytest.raises(RuntimeError, match="snapshot child exited with status 1"):
        await start_blobs([{"fine": 1}, lambda: None])  # a lambda cannot be pickled


async def test_inline_failure_is_reported_too() -> None:
    with pytest.raises(Exception, match="pickle"):
        await start_blobs([lambda: None], fork=False)


class _Gate:
    """Pickles only once `path` exists: the test, not the clock, says when the child
    may finish."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self) -> tuple:
        while not os.path.exists(self.path):
            time.sleep(0.005)
        return (int, (7,))


async def test_the_loop_runs_while_the_child_pickles(tmp_path: Path) -> None:
    """Inline, the blobs are made before the call returns; forked, the call returns at
    once and the loop keeps turning while the child works (the worker folds batches
    meanwhile). A child held at a gate proves it without timing anything."""
    inline = start_blobs([_state(1000)], fork=False)
    assert inline.done()  # made before the call returned
    gate = tmp_path / "open"
    pending = start_blobs([_Gate(gate)], fork=True)
    turns = 0
    while turns < 20:  # the loop gets its turns: nothing in it waits on the child
        assert not pending.done()  # the child cannot have finished: the gate is shut
        await asyncio.sleep(0.001)
        turns += 1
    gate.touch()
    (blob,) = await pending
    assert pickle.loads(zlib.decompress(blob)) == 7


def _soon(attempt: Callable[[], object], refused: type[Exception], held: str) -> None:
    """`attempt()` succeeds within 4 s: the child closes its inherited copy as it starts
    (without the fix, only once it is done: never, while its gate is shut)."""
    deadline = time.monotonic() + 4.0
    while True:
        try:
            attempt()
            return
        except refused:
            assert time.monotonic() < deadline, held
            time.sleep(0.02)


def test_a_snapshot_child_does_not_keep_its_parents_lock(tmp_path: Path) -> None:
    """`allot serve --data` holds a flock on its folder; a snapshot child forked while
    it runs must not hold it on after the parent died (kill -9), or the restart is
    refused naming a dead pid."""
    lock = tmp_path / ".serve.lock"
    held = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    # a snapshot of a big state, still being written until the test opens the gate
    gate = tmp_path / "written"
    pid = fork_to_file(_Gate(gate), tmp_path / "snap")
    assert pid is not None
    try:
        os.close(held)  # the parent is gone
        again = os.open(lock, os.O_RDWR)
        try:
            _soon(
                lambda: fcntl.flock(again, fcntl.LOCK_EX | fcntl.LOCK_NB),
                BlockingIOError,
                "the snapshot child holds the lock",
            )
            assert reaped(pid) is None  # while the child still writes
        finally:
            os.close(again)
    finally:
        gate.touch()
        assert reaped(pid, wait=True) == 0
    assert (tmp_path / "snap").exists()


def test_a_snapshot_child_does_not_keep_its_parents_listening_port(tmp_path: Path) -> None:
    """`--metrics-port`: a restart right after a kill -9 found the port still taken by
    the snapshot child the dead scheduler had forked."""
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    gate = tmp_path / "written"
    pid = fork_to_file(_Gate(gate), tmp_path / "snap")
    assert pid is not None
    try:
        server.close()  # the parent is gone
        again = socket.socket()
        try:
            _soon(
                lambda: again.bind(("127.0.0.1", port)),
                OSError,
                "the snapshot child holds the port",
            )
            assert reaped(pid) is None  # while the child still writes
        finally:
            again.close()
    finally:
        gate.touch()
        assert reaped(pid, wait=True) == 0
