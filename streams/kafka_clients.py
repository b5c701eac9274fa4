"""Stopping aiokafka clients without letting their shutdown fail the caller, and
keeping aiokafka's own log quiet while a probe speaks for it.

`quiet_stop(client)` stops a producer, consumer or admin client and swallows what its
shutdown raises. That includes the `asyncio.CancelledError` aiokafka (0.14) raises from
`AIOKafkaConsumer.stop()` after the broker went away: its fetcher awaits the fetch tasks
it has just cancelled, so the stop ends there, before the client's connections and
metadata task are closed. That CancelledError is not a cancellation of the caller, so
it is swallowed, and the client's connections are closed here instead. A real
cancellation of the caller still propagates.
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
    of the caller itself."""
    try:
        await asyncio.wait_for(client.stop(), timeout)
    except asyncio.CancelledError:
        if _being_cancelled():
            raise
        inner = getattr(client, "_client", None)  # the connections the stop left open
        if inner is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(inner.close(), timeout)
    except Exception:
        pass


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
