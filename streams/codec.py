"""Bytes <-> events at the edge (orjson). Everything inside works on models."""

from __future__ import annotations

from typing import Any

import orjson

from domain.events import Envelope, Event, event_to_dict, parse_event, parse_input
from domain.upcasting import upcast


class Undecodable(ValueError):
    """Bytes that are not a JSON object: they go to the dead-letter topic."""


def encode(event: Envelope) -> bytes:
    return orjson.dumps(event_to_dict(event))


def load_object(data: bytes | str) -> dict[str, Any]:
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise Undecodable(f"not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise Undecodable(f"not a JSON object but {type(raw).__name__}")
    return raw


def decode_input(data: bytes | str, now: float = 0.0) -> Event:
    """An inbox record: an input event or its rejection; `Undecodable` for non-JSON."""
    return parse_input(load_object(data), now)


def decode_event(data: bytes | str) -> Event:
    """A journal record (trusted: written by the scheduler); raises on bad records."""
    return parse_event(upcast(load_object(data)))
