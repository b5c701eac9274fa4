"""Which workers of this worker's identity run now: a consumer group per identity that
reads nothing, so a newcomer (without --group) can say it took over from a live worker,
and a request tool can tell whether a scheduler serves its cluster (streams.presence)."""

from __future__ import annotations

import asyncio
import logging
import os
import socket

from aiokafka import AIOKafkaConsumer

from streams.kafka_clients import aiokafka_quiet
from streams.presence import CardAssignor, card, died_here
from streams.topic_admin import _admin
from streams.worker_helpers import _quiet_stop

log = logging.getLogger("allot.worker")


class Presence:
    """The presence group of `streams.worker_loop.Worker`."""

    # ---------------------------------------------------------------- presence
    def _presence_group(self) -> str:
        """A consumer group per identity (topics and cluster set) whose members are the
        running workers of that identity, with --group or not. It reads nothing: it only
        makes them visible to the broker's DescribeGroups, which is how a newcomer
        knows it takes over from a live worker (transactions do not tell), and a request
        tool that a verdict will come (each member's card, streams.presence)."""
        return f"{self.identity}/live"

    async def _live_workers(self) -> list[str]:
        """`CLIENT-ID at HOST` of each member of the presence group: the workers of this
        identity running now. Best effort: [] when the broker will not say."""
        try:
            with aiokafka_quiet():
                admin = await _admin(self.bootstrap, 10.0, self.kafka_options)
                try:
                    responses = await asyncio.wait_for(
                        admin.describe_consumer_groups([self._presence_group()]), 10.0
                    )
                finally:
                    await admin.close()
        except Exception as why:  # e.g. no Describe on the group under ACLs
            log.debug("could not describe group %s: %s", self._presence_group(), why)
            return []
        return [
            f"{member[1]} at {str(member[2]).lstrip('/')}"
            for response in responses
            for group in response.groups
            if group[0] == 0
            for member in group[5]
            if not died_here(member[1])
        ]

    async def _join_presence(self) -> None:
        """Join the presence group (subscribed to the dead-letter topic from its end,
        whatever it reads is dropped); a broker that refuses costs only the warning."""
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=self._presence_group(),
            client_id=f"allot-worker/{socket.gethostname()}/pid-{os.getpid()}",
            enable_auto_commit=False,
            auto_offset_reset="latest",
            session_timeout_ms=self.session_timeout_ms,
            heartbeat_interval_ms=max(500, self.session_timeout_ms // 4),
            # what request tools read to tell at once whether a verdict will come
            partition_assignment_strategy=(CardAssignor(card(self.topics.inbox, self.clusters)),),
            **self.kafka_options,
        )
        try:
            await consumer.start()
            consumer.subscribe([self.topics.dlq])
        except Exception as why:
            await _quiet_stop(consumer)
            log.debug("not in group %s: %s", self._presence_group(), why)
            return
        self._presence = consumer
        self._presence_task = asyncio.create_task(
            self._stay_present(consumer), name="allot-presence"
        )

    @staticmethod
    async def _stay_present(consumer: AIOKafkaConsumer) -> None:
        """Poll now and then: a member that does not poll leaves after max.poll.interval."""
        while True:
            try:
                await consumer.getmany(timeout_ms=1000, max_records=1)
            except asyncio.CancelledError:
                raise
            except Exception as why:
                log.debug("presence group: %s", why)
                await asyncio.sleep(1.0)
