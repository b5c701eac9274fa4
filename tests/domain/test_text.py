"""Names are judged by a fixed list of characters, so every Python (whatever its Unicode
version) accepts and refuses the same inputs and a journal replays anywhere."""

from __future__ import annotations

import pytest

from domain.text import is_word, one_line, printable
from domain.tree import valid_path


@pytest.mark.parametrize(
    ("text", "as_printable", "as_word"),
    [
        ("olmo", True, True),
        ("my team", True, False),
        ("", True, False),
        ("a\tb", False, False),
        ("a\nb", False, False),
        ("a\x7fb", False, False),
        ("a\x85b", False, False),  # C1 next line
        ("a\u00a0b", False, False),  # no-break space looks like a space and is not one
        ("a\u3000b", False, False),  # ideographic space
        ("a\u200bb", False, False),  # zero-width space hides in a name
        ("admin\u202egpj", False, False),  # right-to-left override reorders what is shown
        ("a\ufeffb", False, False),  # byte-order mark
        ("a\U000e0041b", False, False),  # tag character
        ("équipe-été", True, True),
        ("视觉组", True, True),
        ("wifi-\U0001f6dc", True, True),  # unassigned in Python 3.11's Unicode 14, not in 3.12's
        ("lab-🚀", True, True),
    ],
    ids=lambda v: repr(v) if isinstance(v, str) else str(v),
)
def test_which_names_pass(text: str, as_printable: bool, as_word: bool) -> None:
    assert printable(text) is as_printable
    assert is_word(text) is as_word


def test_a_path_with_a_newer_emoji_is_valid_on_every_python() -> None:
    """valid_path('lab/wifi-🛜') was False on 3.11 and True on 3.12: replay --verify of a
    journal written by the one failed under the other."""
    assert valid_path("lab/wifi-\U0001f6dc")
    assert not valid_path("lab/wifi\u00a0net")


def test_every_format_character_this_python_knows_is_refused() -> None:
    """The fixed list covers Unicode's Cf (invisible format characters such as U+1D173,
    a musical beam control that made 'lab/olmo<U+1D173>' look like 'lab/olmo')."""
    import unicodedata

    let_through = [
        hex(c)
        for c in range(0x110000)
        if unicodedata.category(chr(c)) == "Cf" and is_word(f"a{chr(c)}b")
    ]
    assert not let_through, f"Unicode {unicodedata.unidata_version}: extend domain/text.py"


@pytest.mark.parametrize(
    ("text", "limit", "line"),
    [
        ("OOM-killed", 20, "OOM-killed"),
        ("Traceback:\n  File x\n\tboom", 100, "Traceback: File x boom"),
        ("a\u00a0\u200bb", 20, "a b"),
        ("x" * 30, 10, "x" * 9 + "…"),
        ("  spaced   out  ", 20, "spaced out"),
    ],
    ids=["plain", "stderr-tail", "hidden", "too-long", "spaces"],
)
def test_one_line_keeps_a_reason_to_one_printable_line(text: str, limit: int, line: str) -> None:
    assert one_line(text, limit) == line
    assert printable(one_line(text, limit)) and len(one_line(text, limit)) <= limit


def test_a_launchers_multi_line_reason_is_kept_as_one_line_not_refused() -> None:
    """A report refused for its reason left the work running and charged."""
    from domain import events as ev

    raw = {"type": "workload.finished", "id": "r", "time": 1.0, "workload": "w"}
    event = ev.parse_input({**raw, "outcome": "failed", "reason": "OOM\nXid 79\t"}, now=1.0)
    assert event.type == "workload.finished" and event.reason == "OOM Xid 79"


def test_plural_counts() -> None:
    from domain.text import plural

    assert [plural(n, "GPU") for n in (0, 1, 2, 1204)] == [
        "0 GPUs",
        "1 GPU",
        "2 GPUs",
        "1,204 GPUs",
    ]
    assert plural(1, "entry", "entries") == "1 entry"
    assert plural(3, "entry", "entries") == "3 entries"
