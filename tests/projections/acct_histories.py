"""A small journal whose GPU-hours split into charged and unallocated parts, summed by
hand, for `allot acct`'s tests (tests/projections/test_acct.py, tests/e2e/test_views.py)."""

from __future__ import annotations

from projections.usage import JournalBuilder


def charged_and_free() -> JournalBuilder:
    """One 8-GPU host, one leaf; times in hours.
    - paid: 2 GPUs charged, 0 → 2h: 4 charged GPU-h;
    - free: 4 GPUs unallocated (min_runtime 0), 0 → 1h: 4 free GPU-h;
    - mixed: 1 GPU, its first attempt unallocated 0 → 1h (1 free GPU-h), preempted,
      its second charged 1h → 3h (2 charged GPU-h)."""
    hour = 3600.0
    j = JournalBuilder().host("h0").budget("lab", 1)
    j.submit("paid", "lab", 2).place("paid", {"h0": [0, 1]})
    j.submit("free", "lab", 4, min_runtime=0).place("free", {"h0": [2, 3, 4, 5]})
    j.submit("mixed", "lab", 1).place("mixed", {"h0": [6]}, charged=False)
    j.at(hour).finish("free").preempt("mixed", beneficiary="paid")
    j.place("mixed", {"h0": [6]})
    j.at(2 * hour).finish("paid")
    j.at(3 * hour).finish("mixed")
    return j
