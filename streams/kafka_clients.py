"""Stopping aiokafka clients without letting their shutdown fail the caller, and
keeping aiokafka's own log quiet while a probe speaks for it.

`quiet_stop(client)` stops a producer, consumer or admin client and swallows what its
shutdown raises. That includes the `asyncio.CancelledError` aiokafka (0.14) raises from
`AIOKafkaConsumer.stop()` after the broker went away: its fetcher awaits the fetch tasks
it has just cancelled, so the stop ends there, before the client's connections and
metadata task are closed. That CancelledError is not a cancellation of the caller, so
it is swallowed, and the client's connections are closed here instead. A stop that
times out (a producer flushing to a broker that went away) is finished the same way, its
background tasks cancelled. A real cancellation of the caller still propagates.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from typing import Any

# open `aiokafka_quiet` blocks and the level aiokafka's logger had before the first
_quiet = {"depth": 0, "level": logging.NOTSET}


@contextlib.contextmanager
def aiokafka_quiet() -> Iterator[None]:
    """aiokafka's logger says nothing below CRITICAL meanwhile. Counted, not saved per
    block: two workers' blocks interleave across awaits, and restoring per block left
    the logger silenced for good (the broker watch, which reads it, then never saw an
    outage)."""
    logger = logging.getLogger("aiokafka")
    if _quiet["depth"] == 0:
        _quiet["level"] = logger.level
        logger.setLevel(logging.CRITICAL)
    _quiet["depth"] += 1
    try:
        yield
    finally:
        _quiet["depth"] -= 1
        if _quiet["depth"] == 0:
            logger.setLevel(_quiet["level"])


def unreachable(bootstrap: str, why: object) -> str:
    """The one line every command says when no broker answers at `bootstrap`, whichever
    client found out (aiokafka's own text names its address tuples, which says nothing
    more to a user)."""
    if isinstance(why, TimeoutError):
        text = "no answer in time"
    else:
        text = str(why).strip().split("\n")[0][:200] or type(why).__name__
        if "Unable to bootstrap" in text:
            text = "no broker answered"
    return (
        f"cannot reach Kafka at {bootstrap}: {text}; "
        "check --kafka / $ALLOT_KAFKA and that the broker runs"
    )


def _being_cancelled() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def quiet_stop(client: Any, timeout: float = 5.0) -> None:
    """Stop `client` (anything with an async `stop()`); never raises but a cancellation
    of the caller itself. A stop that times out or is cut short is finished by force
    (`_force_close`), so nothing of the client keeps running after this returns."""
    try:
        await asyncio.wait_for(client.stop(), timeout)
        return
    except asyncio.CancelledError:
        if _being_cancelled():
            raise
    except Exception:
        pass
    await _force_close(client, timeout)


async def _force_close(client: Any, timeout: float) -> None:
    """Cancel the background tasks a cut-short stop left behind and close the client's
    connections. aiokafka (0.14) stops a producer by waiting for its unsent records to
    flush, and a consumer by leaving its group, both through the broker: with the broker
    gone the stop times out half way, and the producer's sender went on looking for its
    transaction coordinator every 100 ms for as long as the process lived. Its tasks are
    found by owner, since the sender awaits request tasks it keeps to itself."""
    inner = getattr(client, "_client", None) or getattr(client, "client", None)
    parts = [client, inner] + [
        getattr(client, name, None)
        for name in ("_sender", "_fetcher", "_coordinator", "_message_accumulator")
    ]
    owners = {id(part) for part in parts if part is not None}
    running = [task for task in asyncio.all_tasks() if id(_owner(task)) in owners]
    running = [task for task in running if task is not asyncio.current_task()]
    for task in running:
        task.cancel()
    if running:
        await asyncio.wait(running, timeout=timeout)
    accumulator = getattr(client, "_message_accumulator", None)
    if accumulator is not None:
        # imported here: `--data` commands use this module's helpers without aiokafka
        from aiokafka.errors import KafkaConnectionError

        # with its sender gone, what it still holds is never sent: say so to whoever
        # awaits it (and to the flush the cut-short stop left waiting on it)
        held = _batches_of(accumulator)
        accumulator.fail_all(KafkaConnectionError("the producer stopped before sending this"))
        _read_failures(held)
    if inner is not None:
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await asyncio.wait_for(inner.close(), timeout)
    if _being_cancelled():
        raise asyncio.CancelledError


def _batches_of(accumulator: Any) -> list[Any]:
    """The record batches a producer's accumulator holds (aiokafka 0.14's attributes)."""
    queued = getattr(accumulator, "_batches", None) or {}
    return [b for batches in queued.values() for b in batches] + list(
        getattr(accumulator, "_pending_batches", None) or ()
    )


def _read_failures(batches: list[Any]) -> None:
    """Mark the failures of `batches` read: each batch's own futures (its drain waiter,
    awaited only by the sender we cancelled) and its records' (whose senders may have
    gone). Unread, asyncio logged each as "Future exception was never retrieved" when
    it was collected, at the end of the run. An awaiting sender still gets its error."""
    for batch in batches:
        futures = [getattr(batch, "future", None), getattr(batch, "_drain_waiter", None)]
        futures += [future for future, _ in getattr(batch, "_msg_futures", ())]
        for future in futures:
            if isinstance(future, asyncio.Future) and future.done() and not future.cancelled():
                future.exception()


def _owner(task: asyncio.Task) -> object:
    """The object whose method `task` runs (None for a plain coroutine function)."""
    frame = getattr(task.get_coro(), "cr_frame", None)
    return None if frame is None else frame.f_locals.get("self")


def cancel_leftovers(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel and finish every task still pending on `loop` (not running) before it is
    closed: a client whose stop failed leaves tasks behind, which Python reports as
    "Task was destroyed but it is pending!" when the loop is collected."""
    pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    with contextlib.suppress(Exception):
        loop.run_until_complete(loop.shutdown_asyncgens())
