"""Pickle and compress snapshots without stalling the event loop.

A worker's state holds a window of dedup ids and usage buckets: pickling a busy
cluster takes seconds, and done in the loop it stops every batch meanwhile (the burst
after the stall then looks like a backlog to the scheduler). On POSIX the snapshot is
taken in a forked child instead: `fork` gives it a copy-on-write image of the state as
it is at that instant, so the parent goes on folding batches while the child pickles,
compresses and writes the blobs back through a pipe. Where there is no `fork`, or it
fails, the blobs are made inline, as before.

The child touches nothing but the objects it pickles and the pipe, and leaves with
`os._exit` (no atexit handlers, no flushing of the parent's buffers, no asyncio).
The embedded scheduler (`--data DIR`, no event loop) uses `fork_to_file` the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import signal
import struct
import warnings
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

_FRAME = struct.Struct(">Q")
COMPRESS_LEVEL = 1  # snapshots are frequent and short-lived: speed over size


def blob_of(obj: Any) -> bytes:
    """One snapshot blob: the object pickled (highest protocol) and zlib-compressed."""
    return zlib.compress(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), COMPRESS_LEVEL)


def can_fork() -> bool:
    return hasattr(os, "fork")


def start_blobs(objects: Sequence[Any], *, fork: bool = True) -> asyncio.Future[list[bytes]]:
    """Begin `[blob_of(o) for o in objects]` now, in a forked child when possible, and
    return a future of the blobs. The objects are captured at this call: the caller may
    change them as soon as it returns. Must be called from a running event loop."""
    loop = asyncio.get_running_loop()
    if fork and can_fork():
        read_fd, write_fd = os.pipe()
        try:
            pid = _fork()
        except OSError:
            os.close(read_fd)
            os.close(write_fd)
        else:
            if pid == 0:  # the child: never returns
                _child(objects, read_fd, write_fd)
            os.close(write_fd)
            return asyncio.ensure_future(_collect(pid, read_fd, len(objects)))
    ready = loop.create_future()
    try:
        ready.set_result([blob_of(o) for o in objects])
    except Exception as why:  # reported where the future is awaited
        ready.set_exception(why)
    return ready


async def _collect(pid: int, read_fd: int, count: int) -> list[bytes]:
    loop = asyncio.get_running_loop()
    reaped = False
    try:
        data = await loop.run_in_executor(None, _read_all, read_fd)
        status = await loop.run_in_executor(None, _reap, pid)
        reaped = True
    finally:
        os.close(read_fd)
        if not reaped:  # cancelled: do not leave a child (or a zombie) behind
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
    if status != 0:
        raise RuntimeError(f"snapshot child exited with status {status}")
    return _frames(data, count)


def _fork() -> int:
    # Python >= 3.12 warns when a process with threads forks (the event loop's executor
    # threads, here): the child only pickles, compresses and writes, taking no lock
    # another thread could hold, so the warning does not apply.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return os.fork()


def _child(objects: Sequence[Any], read_fd: int, write_fd: int) -> None:
    code = 1
    try:
        os.close(read_fd)
        for obj in objects:
            blob = blob_of(obj)
            _write_all(write_fd, _FRAME.pack(len(blob)))
            _write_all(write_fd, blob)
        code = 0
    except BaseException:  # the parent sees the status, not a traceback
        code = 1
    finally:
        os._exit(code)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def _reap(pid: int) -> int:
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _frames(data: bytes, count: int) -> list[bytes]:
    blobs, at = [], 0
    for _ in range(count):
        if at + _FRAME.size > len(data):
            raise RuntimeError("snapshot child's output is cut short")
        (size,) = _FRAME.unpack_from(data, at)
        at += _FRAME.size
        if at + size > len(data):
            raise RuntimeError("snapshot child's output is cut short")
        blobs.append(data[at : at + size])
        at += size
    if at != len(data):
        raise RuntimeError("snapshot child wrote more than it was asked for")
    return blobs


def fork_to_file(obj: Any, path: Path, *, fork: bool = True) -> int | None:
    """Write `blob_of(obj)` to `path` atomically (a temporary file, fsync, rename,
    fsync of the folder) from a forked child; returns its pid (reap it with `reaped`).
    Without `fork` (or when it fails) the file is written inline and None returned.
    The child first closes every descriptor it inherited but stdin/out/err: one holding
    the parent's flock, or its --metrics-port socket, would outlive a parent killed
    mid-snapshot and refuse the restart."""
    if fork and can_fork():
        try:
            pid = _fork()
        except OSError:
            pid = -1
        if pid == 0:  # the child: never returns
            code = 1
            try:
                os.closerange(3, _open_max())
                _write_file(obj, path)
                code = 0
            except OSError as why:  # a full disk: its errno goes back as the exit code
                if why.errno and 0 < why.errno < 256 - _ERRNO_EXIT:
                    code = _ERRNO_EXIT + why.errno
            finally:
                os._exit(code)
        if pid > 0:
            return pid
    _write_file(obj, path)
    return None


_ERRNO_EXIT = 64  # a `fork_to_file` child's exit code: 64 + the errno its write failed with


def child_failure(code: int) -> str:
    """Why a `fork_to_file` child that ended with exit code `code` (`reaped`) failed:
    the system's words for a write that failed (`No space left on device`), else the
    code or the signal."""
    if _ERRNO_EXIT < code < 256:
        return os.strerror(code - _ERRNO_EXIT)
    if code < 0:
        return f"killed by signal {-code}"
    return f"exit {code}"


def _open_max() -> int:
    try:
        return min(int(os.sysconf("SC_OPEN_MAX")), 1 << 20)
    except (OSError, ValueError):
        return 4096


def reaped(pid: int, *, wait: bool = False) -> int | None:
    """The exit code of child `pid` once it has ended (None while it runs)."""
    done, status = os.waitpid(pid, 0 if wait else os.WNOHANG)
    return None if done == 0 else os.waitstatus_to_exitcode(status)


def _write_file(obj: Any, path: Path) -> None:
    tmp = path.with_name(f"{path.name}.tmp.{os.getpid()}")
    try:
        with tmp.open("wb") as f:
            f.write(blob_of(obj))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
