"""Bytes <-> events at the edge (orjson). Everything inside works on models."""

from __future__ import annotations

from typing import Any

import orjson

from domain.events import Envelope, Event, event_to_dict, parse_event, parse_input
from domain.upcasting import upcast


class Undecodable(ValueError):
    """Bytes that are not a JSON object: they go to the dead-letter topic."""


# orjson serializes what `event_to_dict` would hand it the same way (tuples and lists
# alike); types it would render differently from pydantic's JSON mode raise instead
_STRICT = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


def encode_body(event: Envelope, extra: dict[str, Any] | None = None) -> bytes:
    """orjson of `event_to_dict(event)` (plus `extra` keys), without pydantic's dump:
    a model's fields are already validated values, in field order."""
    body = {k: v for k, v in event.__dict__.items() if v is not None}
    if extra:
        body.update(extra)
    try:
        return orjson.dumps(body, option=_STRICT)
    except TypeError:  # something only pydantic's JSON mode knows how to render
        body = event_to_dict(event)
        if extra:
            body.update(extra)
        return orjson.dumps(body)


def encode(event: Envelope) -> bytes:
    return encode_body(event)


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
