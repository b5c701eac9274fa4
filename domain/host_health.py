"""Rule 9 with the flap hold-down (config `health_holddown`), for one host: what a
`host.health` report does to its health. The scheduler's fold (`evolve`) and the read
models that count healthy capacity (projections/usage.py) both call it, so they agree
on when a host takes work again."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class HostHealth:
    """A host's health as rule 9 sees it (`domain.state.Host` has the same fields):
    when it last returned to service; `flapping` once it failed again sooner than the
    hold-down after that; while held down, when it returns (it stays cordoned until)."""

    healthy: bool = True
    returned: float = -math.inf
    flapping: bool = False
    held_until: float | None = None


def health_reported(
    host: Any, healthy: bool, force: bool, time: float, holddown: float
) -> bool | None:
    """Fold one report at `time` into `host`'s flap fields (`flapping`, `held_until`).
    Returns the health the host moves to: True, back in service as of `time` (the
    caller then calls `returned_to_service`), False, cordoned; None: no change (a
    repeated report, or a healthy one that starts or keeps a hold-down). The caller
    sets `healthy` itself, as it counts capacity."""
    if not healthy:
        if host.held_until is not None:
            # failed again while held down: it stays cordoned, and its next healthy
            # report starts the hold-down over
            host.held_until = None
            return None
        if not host.healthy:
            return None
        # failed again sooner than the hold-down after its return: its next return waits
        host.flapping = time - host.returned < holddown
        return False
    if force:
        host.flapping = False
        return None if host.healthy else True
    if host.healthy or host.held_until is not None:  # a repeated report changes nothing
        return None
    if host.flapping and holddown > 0:
        host.held_until = time + holddown
        return None
    return True


def returned_to_service(host: Any, at: float) -> None:
    """`host`'s flap fields once it takes work again as of `at` (reported healthy, or
    its hold-down passed)."""
    host.held_until = None
    host.returned = at
