"""JSON written by hand for the hostile-input tests (tests/streams/test_fuzz_core.py
and test_fuzz_worker.py): values nested past what `json` can recurse into, unbounded
ints, NaN and lone surrogates, which no well-behaved encoder writes."""

from __future__ import annotations

import json
from typing import Any


class Deep:
    """A JSON value nested `depth` levels deep (written as raw text: `json` would recurse)."""

    def __init__(self, depth: int, kind: str) -> None:
        self.depth, self.kind = depth, kind

    def text(self) -> str:
        if self.kind == "list":
            return "[" * self.depth + "]" * self.depth
        return '{"k":' * self.depth + "1" + "}" * self.depth


def _encode(value: Any, ensure_ascii: bool) -> str:
    if isinstance(value, Deep):
        return value.text()
    if isinstance(value, dict):
        items = (f"{_encode(k, ensure_ascii)}:{_encode(v, ensure_ascii)}" for k, v in value.items())
        return "{" + ",".join(items) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_encode(v, ensure_ascii) for v in value) + "]"
    # `json` writes unbounded ints and (invalid JSON) NaN/Infinity; lone surrogates as
    # "\ud800" escapes (ensure_ascii) or as unencodable text (then surrogatepass bytes)
    return json.dumps(value, ensure_ascii=ensure_ascii)


def to_bytes(value: Any, ensure_ascii: bool = False) -> bytes:
    return _encode(value, ensure_ascii).encode("utf-8", "surrogatepass")
