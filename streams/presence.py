"""Which clusters a running worker serves, as the broker sees it now.

Each worker is a member of its identity's presence group (`streams.worker_presence`)
for as long as it runs: it leaves when it stops, and the broker drops a killed one when
its session times out. Its member metadata carries a card: the inbox it reads and the
clusters it serves (all: null). A request tool reads the cards to tell at once whether
a verdict will come (`streams.inbox`), whether or not the worker journals clock ticks.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata
from aiokafka.errors import for_code
from aiokafka.protocol.admin import DescribeGroupsRequest, ListGroupsRequest

PRESENCE_END = "/live"
GROUP_COORDINATOR = 0  # FindCoordinator's key type for a consumer group
STABLE = "Stable"  # the only state in which the broker shows members' metadata


def presence_prefix(journal: str) -> str:
    """What the presence group of every worker writing `journal` starts with
    (`streams.worker_helpers.identity`)."""
    return f"allot-scheduler/{journal}/"


def card(inbox: str, clusters: Iterable[str] | None) -> bytes:
    return orjson.dumps(
        {"inbox": inbox, "clusters": None if clusters is None else sorted(clusters)}
    )


class CardAssignor(RoundRobinPartitionAssignor):
    """Round robin, as before (members of an earlier release agree on the protocol by
    its name), with this worker's card as the member metadata's user data."""

    def __init__(self, worker_card: bytes) -> None:
        self.card = worker_card

    def metadata(self, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:  # type: ignore[override]
        return ConsumerProtocolMemberMetadata(self.version, list(topics), self.card)


def died_here(client_id: str) -> bool:
    """A presence member that was a worker on this machine whose process is gone: the
    broker keeps it until its session times out, so a worker restarted at once after a
    crash would otherwise warn that it took over from a live one."""
    prefix = f"allot-worker/{socket.gethostname()}/pid-"
    if not client_id.startswith(prefix) or not client_id[len(prefix) :].isdigit():
        return False
    pid = int(client_id[len(prefix) :])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, as another user
        return False
    return _zombie(pid)


def _zombie(pid: int) -> bool:
    """Dead but not yet reaped by its parent (a supervisor, or a container's init that
    is slow to reap): signal 0 still reaches it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # the state follows the command name, which is in parentheses and may hold any
    return stat[stat.rfind(")") + 2 : stat.rfind(")") + 3] in ("Z", "X")


def _served_by(metadata: bytes, inbox: str, cluster: str) -> bool | None:
    """Whether a member with this metadata serves `cluster` from `inbox`; None: it
    carries no card (a worker of an earlier release)."""
    try:
        found = orjson.loads(ConsumerProtocolMemberMetadata.decode(metadata).user_data)
    except Exception:
        return None
    if not isinstance(found, dict) or "clusters" not in found:
        return None
    clusters = found["clusters"]
    return found.get("inbox") == inbox and (clusters is None or cluster in clusters)


async def serves(client: Any, inbox: str, journal: str, cluster: str) -> bool | None:
    """Whether a running worker serves `cluster` from `inbox`, writing `journal`:
    True, False (the broker lists no such member), or None when the broker will not
    say (this login may not see the groups, a group is between members, a member of an
    earlier release shows no card). `client` is a started AIOKafkaClient (a producer's:
    its connections are reused, and the request asks no topic metadata)."""
    prefix = presence_prefix(journal)
    groups = [g for g in await _groups(client) if g.startswith(prefix) and g.endswith(PRESENCE_END)]
    # a login that may not describe the groups is shown none: ask about one by name,
    # which such a login is refused (an error: None)
    unknown = False
    for error, state, members in await _described(client, groups or [f"{prefix}*{PRESENCE_END}"]):
        if error != 0:
            return None
        members = [m for m in members if not died_here(m[1])]
        if members and state != STABLE:
            unknown = True
            continue
        for member in members:
            served = _served_by(member[3], inbox, cluster)
            if served:
                return True
            unknown = unknown or served is None
    return None if unknown else False


async def _groups(client: Any) -> list[str]:
    """The consumer groups every broker lists to this login."""
    names: list[str] = []
    for broker in client.cluster.brokers():
        response = await client.send(broker.nodeId, ListGroupsRequest())
        if response.error_code:
            raise for_code(response.error_code)("listing the consumer groups")
        names.extend(group[0] for group in response.groups)
    return names


async def _described(client: Any, groups: list[str]) -> list[tuple[int, str, list[Any]]]:
    """(error code, state, members) of each group, asked of its coordinator."""
    by_node: dict[int, list[str]] = {}
    for group in groups:
        by_node.setdefault(await client.coordinator_lookup(GROUP_COORDINATOR, group), []).append(
            group
        )
    found = []
    for node, named in by_node.items():
        response = await client.send(node, DescribeGroupsRequest(groups=named))
        found.extend((g[0], g[2], g[5]) for g in response.groups)
    return found
