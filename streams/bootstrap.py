"""`--kafka` addresses, checked alike by every command (a light module: the read-only
commands import it at start-up)."""

from __future__ import annotations


class BootstrapError(ValueError):
    """Not a `HOST:PORT[,HOST:PORT...]`."""


def parse_bootstrap(text: str) -> str:
    """`HOST:PORT[,HOST:PORT...]` (a `kafka://` prefix is accepted)."""
    servers = []
    for part in text.strip().removeprefix("kafka://").split(","):
        host, sep, port = part.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise BootstrapError(f"--kafka {text!r}: expected HOST:PORT, e.g. 127.0.0.1:9092")
        servers.append(f"{host}:{port}")
    return ",".join(servers)
