"""Say in the worker's own log when the broker goes away and when it is back.

While the broker is down aiokafka retries on its own and logs connection errors (held
back to one line per message every 30 s by `streams.log_repeats`); nothing of the
worker's said that it had stopped deciding, nor when it started again. `BrokerWatch`
is a logging handler on the `aiokafka` logger that notes a connection error; its task
(`run`, beside the worker's loop) then calls `check()`, which probes the broker (one connection and a
Metadata request, at most every `probe_every_s`):

- the probe fails: one WARNING "lost the connection to Kafka" with the time of the
  first error (once per outage);
- a later probe answers: one WARNING "Kafka answers again" with how long it was gone.

A one-off error whose probe answers says nothing, so a broker closing an idle
connection does not cry wolf.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from domain.durations import format_duration

# fragments of aiokafka's messages (and exception names) that mean "cannot reach it"
CONNECTION_SIGNS = (
    "Unable connect to node",
    "Unable to update metadata",
    "KafkaConnectionError",
    "NodeNotReadyError",
    "Connection at",
    "Connect call failed",
)
PROBE_EVERY_S = 5.0


async def answers(bootstrap: str, options: dict[str, Any], timeout: float = 2.0) -> bool:
    """Does any bootstrap address take a connection and answer a Metadata request?"""
    from aiokafka.conn import create_conn
    from aiokafka.protocol.metadata import MetadataRequest

    for address in bootstrap.split(","):
        host, _, port = address.strip().rpartition(":")
        conn = None
        try:
            conn = await asyncio.wait_for(
                create_conn(host, int(port), request_timeout_ms=int(timeout * 1000), **options),
                timeout,
            )
            await asyncio.wait_for(conn.send(MetadataRequest([])), timeout)
            return True
        except Exception:
            continue
        finally:
            if conn is not None:
                conn.close()
    return False


class BrokerWatch(logging.Handler):
    def __init__(
        self,
        bootstrap: str,
        options: dict[str, Any],
        log: logging.Logger,
        probe: Callable[[], Awaitable[bool]] | None = None,
        clock: Callable[[], float] = time.time,
        probe_every_s: float = PROBE_EVERY_S,
    ) -> None:
        super().__init__(level=logging.WARNING)
        self.bootstrap = bootstrap
        self.log = log
        self.probe = probe or (lambda: answers(bootstrap, options))
        self.clock = clock
        self.probe_every_s = probe_every_s
        self.first_error: float | None = None  # of the streak being looked into
        self.down_since: float | None = None  # announced outage
        self._next_probe = 0.0

    def emit(self, record: logging.LogRecord) -> None:
        if self.first_error is not None:
            return
        text = str(record.msg)
        if record.exc_info and record.exc_info[1] is not None:
            text += type(record.exc_info[1]).__name__
        if any(sign in text for sign in CONNECTION_SIGNS) or any(
            sign in str(arg) for arg in record.args or () for sign in CONNECTION_SIGNS
        ):
            self.first_error = self.clock()

    @property
    def down(self) -> bool:
        return self.down_since is not None

    async def check(self) -> None:
        """Probe when an error was seen (rate-limited) and say what changed."""
        if self.first_error is None:
            return
        now = self.clock()
        if now < self._next_probe:
            return
        self._next_probe = now + self.probe_every_s
        if await self.probe():
            self.answered()
        elif self.down_since is None:
            self.down_since = self.first_error
            self.log.warning(
                "lost the connection to Kafka at %s since %s UTC: retrying; nothing is "
                "decided until it is back, and requests sent meanwhile wait in the inbox",
                self.bootstrap,
                time.strftime("%H:%M:%S", time.gmtime(self.first_error)),
            )

    async def run(self, stop: asyncio.Event, every_s: float = 1.0) -> None:
        while not stop.is_set():
            await self.check()
            await asyncio.sleep(every_s)

    def answered(self) -> None:
        """The broker did something for us (a probe, a committed batch): it is up."""
        if self.down_since is not None:
            self.log.warning(
                "Kafka at %s answers again after %s; the worker goes on from where its "
                "journal ends",
                self.bootstrap,
                format_duration(max(0.0, self.clock() - self.down_since)),
            )
        self.first_error = self.down_since = None
        self._next_probe = 0.0
