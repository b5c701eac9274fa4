"""BrokerWatch: one line when the broker is lost, one when it answers again; a one-off
connection error the probe finds answered says nothing. (The real broker going away
is tests/streams/test_broker_restart.py; here the probe and the clock are fakes.)"""

from __future__ import annotations

import logging

import pytest

from streams.broker_watch import BrokerWatch


class FakeBroker:
    def __init__(self) -> None:
        self.up = True
        self.probes = 0

    async def answers(self) -> bool:
        self.probes += 1
        return self.up


@pytest.fixture
def rig(caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.WARNING, logger="allot.test-watch")
    broker, now = FakeBroker(), [1_000_000.0]
    watch = BrokerWatch(
        "k:9092", {}, logging.getLogger("allot.test-watch"), probe=broker.answers,
        clock=lambda: now[0], probe_every_s=5.0,
    )  # fmt: skip
    aiokafka = logging.getLogger("aiokafka.test-watch")
    aiokafka.addHandler(watch)
    try:
        yield watch, broker, now, aiokafka, caplog
    finally:
        aiokafka.removeHandler(watch)


def said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "allot.test-watch"]


@pytest.mark.parametrize(
    "message, args",
    [
        ("Unable connect to node with id %s: %s", (1, "[Errno 111] Connect call failed")),
        ("Failed fetch messages from %s: %s", (1, "KafkaConnectionError: Connection at k closed")),
        ("Got error produce response: %s", ("NodeNotReadyError: node 1 not ready",)),
    ],
    ids=["connect", "fetch", "produce"],
)
async def test_an_outage_is_said_once_and_its_end_with_its_length(rig, message, args) -> None:
    watch, broker, now, aiokafka, caplog = rig
    broker.up = False
    aiokafka.error(message, *args)
    await watch.check()
    for _ in range(3):  # more errors and probes while it stays down: no more lines
        now[0] += 6
        aiokafka.error(message, *args)
        await watch.check()
    assert said(caplog) == [
        "lost the connection to Kafka at k:9092 since 13:46:40 UTC: retrying; nothing is "
        "decided until it is back, and requests sent meanwhile wait in the inbox"
    ]
    broker.up = True
    now[0] += 6
    await watch.check()
    assert said(caplog)[1:] == [
        "Kafka at k:9092 answers again after 24s; the worker goes on from where its journal ends"
    ]
    assert not watch.down


async def test_a_blip_the_probe_finds_answered_says_nothing(rig) -> None:
    watch, broker, _now, aiokafka, caplog = rig
    aiokafka.error("Unable connect to node with id %s: %s", 1, "Connect call failed")
    await watch.check()
    assert broker.probes == 1 and said(caplog) == []


async def test_probes_only_after_an_error_and_at_most_every_period(rig) -> None:
    watch, broker, now, aiokafka, _caplog = rig
    await watch.check()
    aiokafka.warning("Heartbeat session expired")  # not about reaching the broker
    await watch.check()
    assert broker.probes == 0
    broker.up = False
    aiokafka.error("Unable to update metadata from %s", [1])
    await watch.check()
    now[0] += 1
    await watch.check()
    assert broker.probes == 1
    now[0] += 5
    await watch.check()
    assert broker.probes == 2


async def test_a_committed_batch_ends_the_outage(rig) -> None:
    watch, broker, now, aiokafka, caplog = rig
    broker.up = False
    aiokafka.error("Unable connect to node with id %s: %s", 1, "Connect call failed")
    await watch.check()
    now[0] += 90
    watch.answered()  # the worker committed a batch: the broker is back
    assert said(caplog)[-1].startswith("Kafka at k:9092 answers again after 1m30s")
    watch.answered()
    assert len(said(caplog)) == 2


# (first block's start, its end, second block's start, its end), in 10 ms steps
QUIET_BLOCKS = [
    pytest.param((0, 3, 1, 5), id="interleaved-second-ends-last"),
    pytest.param((0, 5, 1, 3), id="nested"),
    pytest.param((0, 2, 3, 5), id="one-after-the-other"),
]


@pytest.mark.parametrize("steps", QUIET_BLOCKS)
async def test_quiet_blocks_of_two_workers_give_the_watch_back_its_log(steps) -> None:
    """Two workers in one process quiet aiokafka's log while they probe at start; when
    their blocks overlapped across awaits, aiokafka's logger stayed silenced for good
    and no later outage reached the watch."""
    import asyncio

    from streams.kafka_clients import aiokafka_quiet

    logger = logging.getLogger("aiokafka")
    before = logger.level

    async def block(start: int, end: int) -> None:
        await asyncio.sleep(start / 100)
        with aiokafka_quiet():
            assert logger.getEffectiveLevel() == logging.CRITICAL
            await asyncio.sleep((end - start) / 100)

    first_start, first_end, second_start, second_end = steps
    await asyncio.gather(block(first_start, first_end), block(second_start, second_end))
    assert logger.level == before
    assert logger.isEnabledFor(logging.ERROR)
