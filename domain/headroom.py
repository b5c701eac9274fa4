"""Which hosts are kept for short, small jobs (`headroom_hosts`): one rule for the
scheduler (`domain.state`) and the reports that account for it (`projections.usage`).
Imports nothing, so light readers can use it."""

from __future__ import annotations

from collections.abc import Iterable

DEFAULT_HEADROOM_HOSTS = 1  # SchedulerConfig.headroom_hosts's default


def pick_headroom(
    healthy_newest_first: Iterable[tuple[str, int]],
    healthy: int,
    wanted: int,
    largest: int,
    largest_count: int,
) -> list[str]:
    """The last `wanted` healthy hosts in registration order, never more than one host
    in eight of the `healthy` ones, and never every healthy host of the `largest` size
    (`largest_count` of them): single-host work that only such a host holds would never
    run, as work that is not short stays off the headroom (rule 11). The last of them
    is passed over for the next newest host. `healthy_newest_first` gives (name, GPUs);
    it is read only as far as needed: it runs on every host registration, and a full
    scan made registering n hosts cost n² (150 s for 100k hosts)."""
    count = min(wanted, healthy // 8)
    chosen: list[str] = []
    if count > 0:
        largest_left = largest_count
        for name, gpus in healthy_newest_first:
            if gpus == largest:
                if largest_left == 1:
                    continue  # the last host that big: not kept from big work
                largest_left -= 1
            chosen.append(name)
            if len(chosen) == count:
                break
    return chosen
