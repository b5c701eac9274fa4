"""Which hosts are kept for short, small jobs (`headroom_hosts`): one rule for the
scheduler (`domain.state`) and the reports that account for it (`projections.usage`).
Imports nothing, so light readers can use it."""

from __future__ import annotations

from collections.abc import Iterable

DEFAULT_HEADROOM_HOSTS = 1  # SchedulerConfig.headroom_hosts's default


def pick_headroom(healthy_newest_first: Iterable[str], healthy: int, wanted: int) -> list[str]:
    """The last `wanted` healthy hosts in registration order, never more than one host
    in eight of the `healthy` ones. Reads `healthy_newest_first` only as far as needed:
    it runs on every host registration, and a full scan made registering n hosts cost
    n² (150 s for 100k hosts)."""
    count = min(wanted, healthy // 8)
    chosen: list[str] = []
    if count > 0:
        for name in healthy_newest_first:
            chosen.append(name)
            if len(chosen) == count:
                break
    return chosen
