"""Log lines for journald when systemd connects stderr to it.

systemd sets `$JOURNAL_STREAM` to the device and inode of the stream it connects a
service's stdout/stderr to; journald reads a leading `<N>` on a line as its syslog
priority (`SyslogLevelPrefix=`, on by default) and stamps time, unit and pid itself.
Without the prefix every line, `error: ...` included, is priority 6 (info), so
`journalctl -u allot-serve -p warning` showed nothing. Elsewhere (a terminal, a file,
Docker) nothing changes.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from types import TracebackType
from typing import TextIO

# syslog priorities by Python logging level (RFC 5424: 3 err, 4 warning, 6 info, 7 debug)
_PRIORITIES = (
    (logging.CRITICAL, 2),
    (logging.ERROR, 3),
    (logging.WARNING, 4),
    (logging.INFO, 6),
)
CRIT = 2
ERR = 3


def stream_is_journal(stream: TextIO | None = None) -> bool:
    """True when `stream` (default stderr) is the one systemd hands journald."""
    stream = sys.stderr if stream is None else stream
    wanted = os.environ.get("JOURNAL_STREAM", "")
    if not wanted:
        return False
    try:
        st = os.fstat(stream.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return wanted == f"{st.st_dev}:{st.st_ino}"


def syslog_priority(levelno: int) -> int:
    for level, priority in _PRIORITIES:
        if levelno >= level:
            return priority
    return 7


class JournalFormatter(logging.Formatter):
    """`<N>logger: message`, one journal entry per line of it (a traceback's lines
    keep the priority)."""

    def format(self, record: logging.LogRecord) -> str:
        prefix = f"<{syslog_priority(record.levelno)}>"
        text = f"{record.name}: {super().format(record)}"
        return "\n".join(prefix + line for line in text.splitlines() or [""])


def error_line(text: str) -> str:
    """`text` as an error line on stderr: with journald's err priority when it reads it."""
    return f"<{ERR}>{text}" if stream_is_journal() else text


def crash_lines(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
    """`sys.excepthook` under journald: a crash's traceback, every line at crit. Python's
    own hook wrote it as plain lines, which journald files one by one at info, so
    `journalctl -p err` missed the crash that made systemd restart the service."""
    text = "".join(traceback.format_exception(kind, value, tb))
    sys.stderr.write("".join(f"<{CRIT}>{line}\n" for line in text.splitlines()))
    sys.stderr.flush()


def log_to_journal() -> None:
    """Under journald: log records and a crash's traceback carry their priorities."""
    for handler in logging.getLogger().handlers:
        handler.setFormatter(JournalFormatter())
    sys.excepthook = crash_lines


__all__ = [
    "JournalFormatter",
    "crash_lines",
    "error_line",
    "log_to_journal",
    "stream_is_journal",
    "syslog_priority",
]
