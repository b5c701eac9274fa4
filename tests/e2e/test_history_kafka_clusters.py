"""`allot history` and `allot preemptions` of one cluster of a Kafka journal that
others share: the cluster's records are found however many of another's came after
them. They said "no records yet" when another cluster had written more than a few
hundred records since the asked one's last (the latest time was looked for only near
the partition's end)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import orjson
import pytest

from streams.topic_admin import Topics, create_topics
from tests.e2e.cli import allot
from tests.e2e.kafka_journal import produce_journal

T0 = 1_767_225_600.0  # 2026-01-01
WID = "01KDVE0000000000000000000A"


def _of_a() -> list[dict]:
    base = {"cluster": "a", "v": 1}
    return [
        {**base, "type": "budget.set", "id": "a1", "time": T0, "actor": "ops",
         "allocation": "lab", "weight": 1},
        {**base, "type": "workload.submitted", "id": "a2", "time": T0 + 1, "actor": "alice",
         "workload": WID, "allocation": "lab", "gpus": 2, "min_runtime": 3600},
        {**base, "type": "workload.placed", "id": "a3", "time": T0 + 1, "actor": "allot",
         "workload": WID, "allocation": "lab", "gpus": 2, "hosts": {"h1": [0, 1]},
         "attempt": 1, "charged": True},
        {**base, "type": "workload.preempted", "id": "a4", "time": T0 + 3601, "actor": "allot",
         "workload": WID, "attempt": 1, "reason": "fairshare", "requeued": True},
    ]  # fmt: skip


def _of_b(n: int) -> list[dict]:
    return [
        {"cluster": "b", "v": 1, "type": "budget.set", "id": f"b{i}", "time": T0 + 7200 + i,
         "actor": "ops", "allocation": "other", "weight": 1}
        for i in range(n)
    ]  # fmt: skip


@pytest.mark.kafka
@pytest.mark.parametrize("after", [10, 2000], ids=["few-after", "many-after"])
def test_a_cluster_is_answered_whatever_another_wrote_after_it(
    kafka_bootstrap: str, after: int
) -> None:
    names = Topics.suffixed(f".leftovers2-{uuid.uuid4().hex[:8]}")
    asyncio.run(create_topics(kafka_bootstrap, topics=names))
    produce_journal(kafka_bootstrap, [*_of_a(), *_of_b(after)], topic=names.journal)
    env = {"ALLOT_TOPIC_SUFFIX": names.journal.removeprefix("allot.journal")}
    kafka = ("--kafka", kafka_bootstrap, "--cluster", "a", "--json")

    history = allot("history", "-a", "lab", *kafka, env=env)
    assert history.returncode == 0, history.stderr
    answer = orjson.loads(history.stdout)
    assert answer["users"][0]["user"] == "alice" and answer["charged_gpu_h"] == 2.0
    assert answer["until"] == "2026-01-01T01:00:01"  # a's latest record, not b's

    preempted = allot("preemptions", *kafka, env=env)
    assert preempted.returncode == 0, preempted.stderr
    (row,) = orjson.loads(preempted.stdout)
    assert (row["workload"], row["user"], row["ran_s"]) == (WID, "alice", 3600.0)


def test_a_cluster_of_a_shared_journal_file_is_answered(tmp_path: Path) -> None:
    """A journal file of several clusters (a Kafka backup's) whose last record is
    another cluster's: it said "no records yet" too."""
    shared = tmp_path / "journal.jsonl"
    shared.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in [*_of_a(), *_of_b(3)]))
    source = ("--journal", str(shared), "--cluster", "a", "--json")
    history = allot("history", "-a", "lab", *source)
    assert history.returncode == 0, history.stderr
    assert orjson.loads(history.stdout)["until"] == "2026-01-01T01:00:01"
    preempted = allot("preemptions", *source)
    assert preempted.returncode == 0, preempted.stderr
    assert [row["workload"] for row in orjson.loads(preempted.stdout)] == [WID]
    nobody = allot("preemptions", "--journal", str(shared), "--cluster", "c")
    assert nobody.returncode == 2 and "cluster c: no records yet" in nobody.stderr
