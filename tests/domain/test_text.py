"""Names are judged by a fixed list of characters, so every Python (whatever its Unicode
version) accepts and refuses the same inputs and a journal replays anywhere."""

from __future__ import annotations

import pytest

from domain.text import is_word, printable
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
