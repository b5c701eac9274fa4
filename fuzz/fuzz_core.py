"""atheris (libFuzzer) harness: fuzzer bytes -> inbox records -> `SchedulerCore.process`.

    pip install -e '.[fuzz]'                      # atheris is optional
    python fuzz/fuzz_core.py --make-corpus fuzz/corpus
    python fuzz/fuzz_core.py fuzz/corpus -max_total_time=300

Each input is split on the ASCII record separator (0x1e) into up to 64 inbox record
values, folded after a fixed setup (two hosts, a budget tree, a running workload) by a
fresh core; each value is also fed to `streams.codec` on its own. A failure is an
uncaught exception or a broken invariant (same contract as
tests/streams/test_fuzz_core.py):

- `process` never raises; each record is a dead letter iff it is not a JSON object,
  else it has one run of journal records carrying its `inbox` position with exactly one
  cause (the accepted input or its rejection), after an optional config re-assertion;
- every journal record parses back (`decode_event`) and re-encodes to the same bytes;
- `decode_input` returns an event or raises `Undecodable`, and what it returns encodes
  and decodes back to itself.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import atheris

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import orjson  # noqa: E402  (not instrumented: third-party)
import pydantic  # noqa: E402,F401

with atheris.instrument_imports(include=["domain", "streams"]):
    from domain import events as ev
    from domain.admission import MAX_TIME
    from domain.config import SchedulerConfig
    from domain.rederive import is_cause
    from streams import codec
    from streams.core import InboxRecord, SchedulerCore

CLUSTER = "c"
T0 = 1_800_000_000.0
SEP = b"\x1e"
STAMP_SEP = b"\x1f"
MAX_JUMP = 86400.0
MAX_RECORDS = 64
CONFIG = SchedulerConfig(admins=("root",), window=86400.0)


def _req(i: int, kind: str, actor: str = "root", **fields: object) -> bytes:
    body = {"type": kind, "v": 1, "id": f"setup-{i}", "cluster": CLUSTER, "actor": actor}
    return orjson.dumps({**body, **fields})


SETUP = [
    _req(0, "host.registered", host="h0", gpus=8),
    _req(1, "host.registered", host="h1", gpus=8),
    _req(2, "budget.set", allocation="lab", weight=1, managers=["root"]),
    _req(3, "budget.set", allocation="lab/a", weight=1, members=["u"]),
    _req(4, "workload.submitted", "u", workload="w0", allocation="lab/a", gpus=2, min_runtime=60),
]
SEEDS = [
    _req(10, "workload.submitted", "u", workload="w1", allocation="lab/a", gpus=1, min_runtime=900),
    _req(11, "workload.cancelled", "u", workload="w0"),
    _req(12, "workload.finished", "u", workload="w0", outcome="failed", attempt=1),
    _req(13, "budget.set", allocation="lab/b", weight=2.5, members=["u"]),
    _req(14, "budget.removed", allocation="lab/a"),
    _req(15, "host.health", host="h0", healthy=False, reason="ecc"),
    _req(16, "clock.tick"),
    _req(17, "config.set", config={"window": "1d", "admins": ["root"], "bucket": 60}),
    b'{"type":"workload.submitted","v":0,"id":"s","cluster":"c","actor":"u","workload":"w9",'
    b'"allocation":"lab/a","gpu_count":1,"min_runtime_minutes":5,"preemptible":true}',
    b'{"type":"workload.placed","id":"p","cluster":"c","workload":"w0","hosts":{"h0":[0]}}',
    b"[1,2,3]",
    b'{"type":"clock.tick","id":"t","time":-1e308}',
    b'@9223372036854775.807\x1f{"type":"clock.tick","id":"t2","cluster":"c"}',
    b'@1800080000\x1f{"type":"clock.tick","id":"t3","cluster":"c","time":1790000000}',
]


class Broken(AssertionError):
    pass


def check(cond: bool, what: str) -> None:
    if not cond:
        raise Broken(what)


def _stamp(value: bytes, default: float) -> tuple[bytes, float]:
    """`@<number>\x1f<value>`: the record's broker timestamp is <number>."""
    if value[:1] == b"@" and STAMP_SEP in value:
        head, _, rest = value[1:].partition(STAMP_SEP)
        try:
            stamp = float(head)
        except ValueError:
            return value, default
        if math.isfinite(stamp) and abs(stamp) <= 2**63 / 1000:  # Kafka's int64 ms
            # at most a day ahead unless past year 9999 (refused outright): the usage
            # ledger writes one bucket per bucket width crossed while work runs, so a
            # jump of years is a known memory bomb (domain/ledger.py, issue #6 report)
            if T0 + MAX_JUMP < stamp <= MAX_TIME:
                stamp = T0 + MAX_JUMP
            return rest, stamp
    return value, default


def fold(values: list[bytes], wanted: SchedulerConfig | None) -> None:
    core = SchedulerCore(CLUSTER, wanted)
    core.process([InboxRecord(0, i, T0, v) for i, v in enumerate(SETUP)])
    base = len(SETUP)
    for i, raw_value in enumerate(values):
        value, stamp = _stamp(raw_value, T0 + 60.0 * i)
        record = InboxRecord(i % 2, base + i, stamp, value)
        result = core.process([record])
        try:
            codec.load_object(value)
            is_object = True
        except codec.Undecodable:
            is_object = False
        if not is_object:
            check([d.record for d in result.dead] == [record], "not dead-lettered")
            check(result.journal == [] and result.inputs == 0, "dead letter journaled")
            continue
        check(not result.dead and result.inputs == 1 and result.journal, "input not journaled")
        events = []
        for line in result.journal:
            raw = orjson.loads(line)
            check(raw["inbox"] == [record.partition, record.offset], "wrong inbox source")
            event = codec.decode_event(line)
            again = orjson.dumps({**ev.event_to_dict(event), "inbox": raw["inbox"]})
            check(again == line, "journal record does not re-encode to itself")
            check(math.isfinite(event.time) and event.time <= MAX_TIME, "bad event time")
            events.append(event)
        own_config = f"{CLUSTER}/config@{record.partition}:{record.offset}"
        causes = [e for e in events if is_cause(e) and e.id != own_config]
        check(len(causes) == 1, f"{len(causes)} causes for one record")


def codec_roundtrip(value: bytes) -> None:
    try:
        event = codec.decode_input(value, T0)
    except codec.Undecodable:
        return
    line = codec.encode(event)
    check(ev.event_to_dict(codec.decode_event(line)) == ev.event_to_dict(event), "codec")


def TestOneInput(data: bytes) -> None:
    wanted: SchedulerConfig | None = CONFIG
    if data[:1] == b"!":  # a worker started without a config: an open cluster
        wanted, data = None, data[1:]
    values = data.split(SEP)[:MAX_RECORDS]
    for value in values:
        codec_roundtrip(value)
    fold(values, wanted)


def make_corpus(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i, seed in enumerate(SEEDS):
        (folder / f"seed-{i:02d}").write_bytes(seed)
    (folder / "seed-all").write_bytes(SEP.join(SEEDS))
    (folder / "seed-open").write_bytes(b"!" + SEP.join(SEEDS))


def main(argv: list[str]) -> None:
    if len(argv) >= 3 and argv[1] == "--make-corpus":
        make_corpus(Path(argv[2]))
        return
    atheris.Setup(argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
