"""Which characters a name may not hold: a fixed list, not Python's Unicode database.

`str.isprintable()` and `str.isspace()` answer from the interpreter's Unicode version
(U+1F6DC is unprintable on Python 3.11, printable on 3.12), so an input one Python
accepts another would refuse, and a journal written under one would not replay under
the other. The characters refused here are the ones that break a table or hide what a
name says: controls (C0, DEL, C1), Unicode's White_Space, and the invisible format
characters (Unicode 15's category Cf: soft hyphen, zero-width and joiners,
bidirectional marks and overrides, word joiners, the byte-order mark, tags, ...). Every
other code point passes, assigned or not.
"""

from __future__ import annotations


def _chars(*spans: tuple[int, int]) -> frozenset[str]:
    return frozenset(chr(c) for lo, hi in spans for c in range(lo, hi + 1))


# Unicode's White_Space property (PropList.txt; unchanged since Unicode 6.3)
SPACES = _chars(
    (0x09, 0x0D), (0x20, 0x20), (0x85, 0x85), (0xA0, 0xA0), (0x1680, 0x1680),
    (0x2000, 0x200A), (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000),
)  # fmt: skip
CONTROLS = _chars((0x00, 0x1F), (0x7F, 0x9F))
# Unicode's format characters (category Cf, as of Unicode 15: soft hyphen, Arabic number
# signs, zero-width and joiners, bidirectional marks and overrides, word joiners and
# invisible operators, the byte-order mark, interlinear annotation, Egyptian, shorthand
# and musical format controls, tags), plus surrogates
INVISIBLE = _chars(
    (0x00AD, 0x00AD), (0x0600, 0x0605), (0x061C, 0x061C), (0x06DD, 0x06DD),
    (0x070F, 0x070F), (0x0890, 0x0891), (0x08E2, 0x08E2), (0x180E, 0x180E),
    (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x2064), (0x2066, 0x206F),
    (0xD800, 0xDFFF), (0xFEFF, 0xFEFF), (0xFFF9, 0xFFFB), (0x110BD, 0x110BD),
    (0x110CD, 0x110CD), (0x13430, 0x1343F), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A),
    (0xE0001, 0xE0001), (0xE0020, 0xE007F),
)  # fmt: skip
_HIDDEN = CONTROLS | INVISIBLE | (SPACES - {" "})
_NOT_IN_WORDS = CONTROLS | INVISIBLE | SPACES


def printable(text: str) -> bool:
    """No control, invisible or white-space character but the plain space."""
    if text.isascii():  # ASCII's answer is the same on every Python
        return text.isprintable()
    return _HIDDEN.isdisjoint(text)


def is_word(text: str) -> bool:
    """Non-empty, and `printable` without any space: one name in a path or a list."""
    if text.isascii():
        return bool(text) and text.isprintable() and " " not in text
    return bool(text) and _NOT_IN_WORDS.isdisjoint(text)


def is_host_name(text: str) -> bool:
    """One word (`is_word`) without ',', '[' or ']': those write host lists (h[1-4],h9),
    so a name holding them could not be told from a list of other hosts."""
    return is_word(text) and not any(c in ",[]" for c in text)


HIDDEN_WHAT = "control or invisible characters (tabs, newlines, bidi marks)"
HOST_NAME_RULE = "one word: no spaces, control or invisible characters, ',', '[' or ']'"


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """`1 workload`, `2 workloads`, `1,204 GPUs`: a count in a message; `nouns` when the
    plural is not `noun` + s (`plural(n, "entry", "entries")`)."""
    return f"{n:,} {noun if n == 1 else nouns or noun + 's'}"


def one_line(text: str, limit: int) -> str:
    """`text` as one printable line of at most `limit` characters: each run of hidden
    characters or white space becomes one space, and a longer text is cut, ending "…"."""
    if len(text) <= limit and printable(text) and "  " not in text:
        return text
    line = " ".join("".join(" " if c in _NOT_IN_WORDS else c for c in text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
