"""Keep a library's repeated log lines from flooding the worker's log.

While the broker is down aiokafka logs the same connection error for every request it
retries: ~60 lines a second, thousands in a minute-long outage, which hide the worker's
own lines. `RepeatFilter` lets each distinct message of the chosen loggers through once
per `every_s` and says how many it held back when it lets the next one through.

`FencedFilter` drops asyncio's "Future exception was never retrieved" tracebacks for a
fenced producer: aiokafka fails its own internal futures too when a newer worker takes
over, and the worker has already said so in one line.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable


class RepeatFilter(logging.Filter):
    """A handler filter: records of loggers under `prefix` with the same logger, level
    and message template pass at most once per `every_s`; others always pass."""

    def __init__(
        self, prefix: str, every_s: float = 30.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__()
        self.prefix = prefix
        self.every_s = every_s
        self.clock = clock
        self.last: dict[tuple[str, int, str], float] = {}
        self.held: dict[tuple[str, int, str], int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        name = record.name
        if name != self.prefix and not name.startswith(self.prefix + "."):
            return True
        key = (name, record.levelno, str(record.msg))
        now = self.clock()
        last = self.last.get(key)
        if last is not None and now - last < self.every_s:
            self.held[key] = self.held.get(key, 0) + 1
            return False
        self.last[key] = now
        held = self.held.pop(key, 0)
        if held:
            record.msg = f"{record.msg} [and {held} more like it in the last {self.every_s:g} s]"
        return True


class FencedFilter(logging.Filter):
    """Drops asyncio's reports of unretrieved futures that failed with ProducerFenced."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name != "asyncio" or not record.exc_info:
            return True
        error = record.exc_info[1]
        return type(error).__name__ != "ProducerFenced"


def quiet_repeats(prefix: str = "aiokafka", every_s: float = 30.0) -> None:
    """Add a RepeatFilter for `prefix` (and a FencedFilter) to every handler of the root
    logger."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RepeatFilter) for f in handler.filters):
            handler.addFilter(RepeatFilter(prefix, every_s))
        if not any(isinstance(f, FencedFilter) for f in handler.filters):
            handler.addFilter(FencedFilter())
