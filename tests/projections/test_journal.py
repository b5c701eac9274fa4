"""Reading journal files: the progress reports long reads give."""

from __future__ import annotations

import pytest

from projections.journal import reporting


@pytest.mark.parametrize(
    ("items", "every", "heard"),
    [
        pytest.param(5, 2, [(2, 20), (4, 40), (5, 50)], id="every-2"),
        pytest.param(4, 2, [(2, 20), (4, 40), (4, 40)], id="ends-on-a-report"),
        pytest.param(3, 10, [(3, 30)], id="fewer-than-every"),
        pytest.param(0, 10, [(0, 0)], id="empty"),
    ],
)
def test_reporting_hears_counts_and_sizes(
    items: int, every: int, heard: list[tuple[int, int]]
) -> None:
    got: list[tuple[int, int]] = []
    data = [b"x" * 10] * items
    out = list(reporting(data, lambda n, size: got.append((n, size)), size=len, every=every))
    assert out == data  # the items pass through unchanged
    assert got == heard


def test_reporting_is_lazy() -> None:
    """A bar follows the reader: nothing is read ahead of what the consumer takes."""
    pulled: list[int] = []

    def source():
        for i in range(10):
            pulled.append(i)
            yield i

    it = reporting(source(), lambda n, size: None, size=lambda _: 1, every=3)
    assert next(it) == 0 and pulled == [0]
