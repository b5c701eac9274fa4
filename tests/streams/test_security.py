"""A broker with SASL/SCRAM and ACLs (`deploy/kafka/start --secure`): who may write
the inbox, who may write and read the journal, and what a bad login looks like.

One secure broker for the module, on a free port with a throwaway data dir (the
plaintext session broker is not touched). Principals and grants: deploy/kafka/secure.py.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import (
    ClusterAuthorizationFailedError,
    KafkaConnectionError,
    TopicAuthorizationFailedError,
)

from domain.config import SchedulerConfig
from streams import topics
from streams.inbox import InboxError, KafkaInbox, make_request
from streams.kafka_auth import KafkaAuthError, client_options
from streams.kafka_clients import quiet_stop
from streams.sources import SourceError, journal_lines
from streams.topic_admin import Topics, topic_configs
from tests.streams.rig import spawn_faust

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]
KAFKA_DIR = ROOT / "deploy" / "kafka"
ADMIN = "allot-admin"
PRINCIPALS = (ADMIN, "allot-submit", "allot-scheduler", "allot-reader")
ENV_KEYS = (
    "ALLOT_KAFKA_USER",
    "ALLOT_KAFKA_PASSWORD_FILE",
    "ALLOT_KAFKA_PASSWORD",
    "ALLOT_KAFKA_SASL_MECHANISM",
    "ALLOT_KAFKA_SECURITY_PROTOCOL",
)
WAIT_S = 30.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no {path})"


class Secure:
    def __init__(self, bootstrap: str, data: Path) -> None:
        self.bootstrap = bootstrap
        self.data = data

    def password_file(self, user: str) -> Path:
        return self.data / "credentials" / f"{user}.password"

    def options(self, user: str) -> dict[str, Any]:
        return client_options(user, str(self.password_file(user)))

    def env(self, user: str | None, password_file: str | Path | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ENV_KEYS}
        env.pop("ALLOT_KAFKA", None)
        if user is not None:
            env["ALLOT_KAFKA_USER"] = user
            env["ALLOT_KAFKA_PASSWORD_FILE"] = str(password_file or self.password_file(user))
        return env


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secure]:
    data = tmp_path_factory.mktemp("kafka-secure")
    port = _free_port()
    stop = [str(KAFKA_DIR / "stop"), "--data", str(data), "--quiet"]
    try:
        proc = subprocess.run(
            [str(KAFKA_DIR / "start"), "--secure", "--data", str(data), "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=300,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        subprocess.run(stop, timeout=60, check=False)
        pytest.fail(f"start --secure timed out\n{_tail(data / 'broker.log')}", pytrace=False)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        subprocess.run(stop, timeout=60, check=False)
        pytest.fail(
            f"start --secure failed ({proc.returncode}):\n{proc.stderr}\n"
            f"{_tail(data / 'broker.log')}",
            pytrace=False,
        )
    assert "credentials" in proc.stderr  # says where the passwords are
    # a comment in its config template once ran `allot topics create` (backticks)
    assert "error:" not in proc.stderr, proc.stderr
    env = Secure(lines[-1], data)
    try:
        asyncio.run(_create_topics(env))
        yield env
    finally:
        subprocess.run(stop, timeout=60, check=False)


async def _create_topics(env: Secure, names: Topics | None = None) -> None:
    """The scheduler principal may create the allot.* topics (as `allot topics create` does)."""
    configs = topic_configs(names or Topics())
    admin = AIOKafkaAdminClient(bootstrap_servers=env.bootstrap, **env.options("allot-scheduler"))
    await admin.start()
    try:
        present = set(await admin.list_topics())
        missing = [t for t in configs if t not in present]
        if missing:
            await admin.create_topics(
                [NewTopic(t, 1, 1, topic_configs=configs[t]) for t in missing]
            )
    finally:
        await admin.close()


@pytest.fixture
def as_user(monkeypatch: pytest.MonkeyPatch, secure: Secure) -> Any:
    """Set the environment the CLI reads: as_user("allot-submit")."""

    def set_user(user: str | None, password_file: str | Path | None = None) -> None:
        for key in ENV_KEYS:
            monkeypatch.delenv(key, raising=False)
        if user is not None:
            monkeypatch.setenv("ALLOT_KAFKA_USER", user)
            monkeypatch.setenv(
                "ALLOT_KAFKA_PASSWORD_FILE", str(password_file or secure.password_file(user))
            )

    return set_user


async def _produce(
    env: Secure, options: dict[str, Any], topic: str, value: bytes, key: bytes = b"sec"
) -> int:
    producer = AIOKafkaProducer(
        bootstrap_servers=env.bootstrap,
        enable_idempotence=True,
        acks="all",
        request_timeout_ms=10_000,
        **options,
    )
    try:  # a start the broker refuses leaves the client open: stop it too
        await asyncio.wait_for(producer.start(), 15)
        meta = await asyncio.wait_for(await producer.send(topic, value, key=key), 15)
        return meta.offset
    finally:
        await quiet_stop(producer)


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "allot.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )


# ------------------------------------------------------------------ the broker


def test_credentials_are_private_files(secure: Secure) -> None:
    for user in PRINCIPALS:
        path = secure.password_file(user)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert len(path.read_text().strip()) >= 24
    assert len({secure.password_file(u).read_text() for u in PRINCIPALS}) == len(PRINCIPALS)
    props = (secure.data / "server.properties").stat().st_mode
    assert stat.S_IMODE(props) == 0o600  # it holds the inter-broker (admin) login
    # settings and comments only: no command's output written into it
    for line in (secure.data / "server.properties").read_text().splitlines():
        setting = re.fullmatch(r"[a-z0-9_.-]+=.*", line)
        assert not line or line.startswith("#") or setting, f"not a setting: {line[:40]!r}"
    # a second start is a no-op that prints the same address
    again = subprocess.run(
        [str(KAFKA_DIR / "start"), "--secure", "--data", str(secure.data), "--quiet"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip().splitlines()[-1] == secure.bootstrap
    # and the plaintext flavour refuses a secure data dir
    plain = subprocess.run(
        [str(KAFKA_DIR / "start"), "--data", str(secure.data), "--quiet"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert plain.returncode != 0 and "--secure" in plain.stderr


# ------------------------------------------------------------------ the scheduler end to end


async def _placed_through_the_scheduler(secure: Secure, gone: Any) -> dict[str, Any]:
    """Set up a fresh cluster and submit a workload as allot-submit; read the journal as
    allot-reader until the running scheduler has placed it. `gone()` says why the
    scheduler stopped (None while it runs)."""
    cluster = f"sec-{uuid.uuid4().hex[:8]}"
    workload = f"w-{uuid.uuid4().hex[:8]}"
    requests = [
        make_request("host.registered", cluster=cluster, actor="root", host="h0", gpus=8),
        make_request(
            "budget.set",
            cluster=cluster,
            actor="root",
            allocation="lab",
            weight=1,
            managers=["alice"],
        ),
        make_request(
            "budget.set",
            cluster=cluster,
            actor="alice",
            allocation="lab/a",
            weight=1,
            members=["u"],
        ),
        make_request(
            "workload.submitted",
            cluster=cluster,
            actor="u",
            workload=workload,
            allocation="lab/a",
            gpus=2,
            min_runtime=600,
            resumable=True,
        ),
    ]
    producer = AIOKafkaProducer(
        bootstrap_servers=secure.bootstrap,
        enable_idempotence=True,
        acks="all",
        **secure.options("allot-submit"),
    )
    await producer.start()
    try:
        for r in requests:
            await (await producer.send(topics.INBOX, orjson.dumps(r), key=cluster.encode()))
    finally:
        await producer.stop()

    consumer = AIOKafkaConsumer(
        topics.JOURNAL,
        bootstrap_servers=secure.bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        **secure.options("allot-reader"),
    )
    await consumer.start()
    placed = None
    try:
        deadline = time.monotonic() + 3 * WAIT_S
        while placed is None:
            why = gone()
            assert why is None, f"the scheduler stopped: {why}"
            assert time.monotonic() < deadline, "no workload.placed in the journal"
            batches = await consumer.getmany(timeout_ms=200)
            for records in batches.values():
                for m in records:
                    rec = orjson.loads(m.value)
                    if rec.get("type") == "workload.placed" and rec.get("workload") == workload:
                        placed = rec
    finally:
        await consumer.stop()
    assert placed["cluster"] == cluster
    assert sum(len(g) for g in placed["hosts"].values()) == 2
    return placed


async def test_worker_as_scheduler_places_a_submission(secure: Secure) -> None:
    """allot-submit writes requests, the worker as allot-scheduler journals the
    decision, allot-reader reads it."""
    from streams.worker import serve

    stop = asyncio.Event()
    task = asyncio.create_task(
        serve(
            secure.bootstrap,
            config=SchedulerConfig(admins=("root",)),
            stop=stop,
            tick_every=0,
            kafka_options=secure.options("allot-scheduler"),
        )
    )
    try:
        await _placed_through_the_scheduler(
            secure, lambda: repr(task.exception()) if task.done() else None
        )
    finally:
        stop.set()
        await asyncio.wait_for(task, WAIT_S)


def test_a_worker_in_a_group_the_acls_refuse_stops_with_one_line(secure: Secure) -> None:
    """A --group the scheduler's principal may not join: the worker stopped with
    aiokafka's traceback; now with one line naming the principal and the refusal."""
    done = subprocess.run(
        [
            sys.executable, "-m", "streams.worker", "--kafka", secure.bootstrap,
            "--topic-suffix=", "--create-topics", "--tick-every", "0", "--group", "not-ours",
        ],
        capture_output=True, text=True, timeout=120, env=secure.env("allot-scheduler"),
        cwd=ROOT, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: Kafka at "), last
    assert "refused principal 'allot-scheduler'" in last and "GroupAuthorization" in last


async def test_faust_worker_logs_in_as_scheduler(secure: Secure, tmp_path: Path) -> None:
    """`faust -A streams.app worker` under ACLs: faust's own connection (its consumer
    group and leader topic) and the scheduler's both log in as allot-scheduler."""
    log = tmp_path / "faust.log"
    env = {**secure.env("allot-scheduler"), "ALLOT_KAFKA": secure.bootstrap}
    proc = spawn_faust(env, tmp_path / "faust", log)
    try:
        await _placed_through_the_scheduler(
            secure, lambda: _tail(log) if proc.poll() is not None else None
        )
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 60) == 0, _tail(log)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text(errors="replace")
    assert "allot scheduler consuming" in text, _tail(log)
    assert "AuthorizationFailed" not in text and "Authentication failed" not in text, _tail(log)


# ------------------------------------------------------------------ submit tools


async def test_submit_may_write_the_inbox(secure: Secure, as_user: Any) -> None:
    assert await _produce(secure, secure.options("allot-submit"), topics.INBOX, b"{}") >= 0
    # and through the CLI's writer, configured from the environment
    as_user("allot-submit")
    request = make_request("workload.cancelled", cluster="sec", actor="u", workload="nope")
    inbox = KafkaInbox(secure.bootstrap)
    try:
        await asyncio.to_thread(inbox.send, [request])
    finally:
        await asyncio.to_thread(inbox.close)  # a blocking writer: off this test's loop


async def test_submit_may_not_write_the_journal(secure: Secure) -> None:
    with pytest.raises(TopicAuthorizationFailedError):
        await _produce(secure, secure.options("allot-submit"), topics.JOURNAL, b"{}")
    for topic in (topics.DLQ, topics.SNAPSHOTS):
        with pytest.raises(TopicAuthorizationFailedError):
            await _produce(secure, secure.options("allot-submit"), topic, b"{}")


def test_submit_may_not_read_the_journal(secure: Secure, as_user: Any) -> None:
    as_user("allot-submit")
    with pytest.raises(
        SourceError, match=re.escape("not authorized as 'allot-submit' to read allot.journal")
    ):
        list(journal_lines(kafka=secure.bootstrap))


def test_submit_wait_without_read_access_says_so(secure: Secure) -> None:
    """--wait reads the journal for the verdict: allot-submit may not, and is told that
    (not that the topic is missing), before anything is sent."""
    done = _cli(secure.env("allot-submit"), *_submit_args(secure), "--wait", "5")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "principal 'allot-submit' sees no topic allot.journal" in line
    assert "do not let it read (to --wait for the verdict)" in line


def test_budget_set_without_read_access_sends_without_waiting(secure: Secure) -> None:
    """`budget set` waits for the verdict by default where it can; allot-submit may not
    read the journal, so it sends as before and says why no verdict is awaited (a default
    wait must not turn into the --wait refusal above)."""
    done = _cli(
        secure.env("allot-submit"), "budget", "set", "lab/b", "1", "--kafka", secure.bootstrap
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Budget change for lab/b (weight 1) sent (request ")
    assert done.stderr.splitlines() == [
        "note: not waiting for the scheduler's verdict: allot-submit may not read "
        f"{topics.JOURNAL}; `allot why ID` as a reader says what it decided"
    ]


def test_submit_without_wait_awaits_a_verdict_only_where_the_login_reads_the_journal(
    secure: Secure,
) -> None:
    """Without --wait, a refusal is said at once when a scheduler serves the cluster and
    the login may read the journal (allot-admin). allot-submit may not: its request is
    sent as before, with no error about the journal it cannot read."""
    cluster = f"sec-{uuid.uuid4().hex[:8]}"
    worker = subprocess.Popen(
        [
            sys.executable, "-m", "streams.worker", "--kafka", secure.bootstrap,
            "--topic-suffix=", "--tick-every", "1", "--cluster", cluster,
        ],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=secure.env("allot-scheduler"),
        cwd=ROOT, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    where = ["--kafka", secure.bootstrap, "--cluster", cluster]
    try:
        for setup in (["host", "register", "h0", "8"], ["budget", "set", "lab", "1"]):
            done = _cli(secure.env(ADMIN), *setup, *where, "--wait", "50")
            assert done.returncode == 0, (done.stdout, done.stderr)
        submit = ["submit", "-A", "lab", "-G", "24", "--min-runtime", "1h", *where]
        as_submitter = _cli(secure.env("allot-submit"), *submit)
        assert as_submitter.returncode == 0, (as_submitter.stdout, as_submitter.stderr)
        assert as_submitter.stderr == ""
        (line,) = as_submitter.stdout.splitlines()
        assert line.startswith("Submitted workload ")
        as_admin = _cli(secure.env(ADMIN), *submit)
        assert as_admin.returncode == 1, (as_admin.stdout, as_admin.stderr)
        said = as_admin.stdout.splitlines()[-1]
        assert said.endswith(
            "was rejected: asks for 24 GPUs but cluster "
            f"'{cluster}' has 8 registered; submit with at most 8 GPUs, or ask an admin to "
            "register more hosts"
        ), said
    finally:
        worker.send_signal(signal.SIGINT)
        try:
            worker.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


# ------------------------------------------------------------------ scheduler and readers


async def test_scheduler_may_write_the_journal(secure: Secure) -> None:
    record = {"type": "test.security", "v": 1, "id": uuid.uuid4().hex, "cluster": "sec-raw"}
    offset = await _produce(
        secure, secure.options("allot-scheduler"), topics.JOURNAL, orjson.dumps(record)
    )
    assert offset >= 0


async def test_reader_may_read_the_journal_but_not_write_it(secure: Secure, as_user: Any) -> None:
    record = {"type": "test.security", "v": 1, "id": uuid.uuid4().hex, "cluster": "sec-read"}
    await _produce(
        secure,
        secure.options("allot-scheduler"),
        topics.JOURNAL,
        orjson.dumps(record),
        key=b"sec-read",
    )
    as_user("allot-reader")
    lines = await asyncio.to_thread(
        lambda: list(journal_lines(kafka=secure.bootstrap, cluster="sec-read"))
    )
    assert record["id"] in {orjson.loads(line)["id"] for line in lines}
    reader = secure.options("allot-reader")
    # an idempotent producer is stopped at InitProducerId, a plain one at the topic
    with pytest.raises(ClusterAuthorizationFailedError):
        await _produce(secure, reader, topics.JOURNAL, b"{}")
    producer = AIOKafkaProducer(bootstrap_servers=secure.bootstrap, acks=1, **reader)
    await producer.start()
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            await (await producer.send(topics.JOURNAL, b"{}"))
        with pytest.raises(TopicAuthorizationFailedError):
            await (await producer.send(topics.INBOX, b"{}"))
    finally:
        await producer.stop()


# ------------------------------------------------------------------ a second deployment


async def test_start_grants_the_acls_of_a_topic_suffix(secure: Secure) -> None:
    """A second deployment on the broker (`ALLOT_TOPIC_SUFFIX=.x`, README's Security):
    `start --secure` with that suffix, run again while the broker runs, lets allot-submit
    write allot.inbox.x and allot-reader read allot.journal.x. The ACLs named only the
    default topics, so a submit tool with the suffix saw no topic."""
    suffix = f".sfx{uuid.uuid4().hex[:8]}"
    names = Topics.suffixed(suffix)
    await _create_topics(secure, names)
    cluster = "sec-sfx"
    record = {"type": "test.security", "v": 1, "id": uuid.uuid4().hex, "cluster": cluster}
    scheduler = secure.options("allot-scheduler")
    await _produce(secure, scheduler, names.journal, orjson.dumps(record), key=cluster.encode())

    def as_deployment(user: str) -> dict[str, str]:
        return {**secure.env(user), "ALLOT_TOPIC_SUFFIX": suffix}

    budget = ("budget", "set", "lab/b", "1", "--kafka", secure.bootstrap, "--cluster", cluster)
    read = ("journal", "export", "-o", "-", "--kafka", secure.bootstrap, "--cluster", cluster)
    refused = await asyncio.to_thread(_cli, as_deployment("allot-submit"), *budget)
    assert refused.returncode != 0 and f"allot.inbox{suffix}" in refused.stderr
    refused = await asyncio.to_thread(_cli, as_deployment("allot-reader"), *read)
    assert refused.returncode != 0 and f"allot.journal{suffix}" in refused.stderr

    port = secure.bootstrap.rsplit(":", 1)[1]
    start = [str(KAFKA_DIR / "start"), "--secure", "--data", str(secure.data), "--port", port]
    granted = await asyncio.to_thread(
        subprocess.run, start, capture_output=True, text=True, timeout=120,
        env=as_deployment(ADMIN), stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert granted.returncode == 0, granted.stderr
    assert f"ACLs for topic suffix '{suffix}'" in granted.stderr
    assert granted.stdout.strip().splitlines()[-1] == secure.bootstrap

    sent = await asyncio.to_thread(_cli, as_deployment("allot-submit"), *budget)
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.startswith("Budget change for lab/b (weight 1) sent (request ")
    answered = await asyncio.to_thread(_cli, as_deployment("allot-reader"), *read)
    assert answered.returncode == 0, answered.stderr
    assert [orjson.loads(line)["id"] for line in answered.stdout.splitlines()] == [record["id"]]
    # literal grants: not the deployment's journal, dead letters or snapshots for submit
    for topic in (names.journal, names.dlq, names.snapshots):
        with pytest.raises(TopicAuthorizationFailedError):
            await _produce(secure, secure.options("allot-submit"), topic, b"{}")


# ------------------------------------------------------------------ bad logins


def _submit_args(secure: Secure) -> list[str]:
    """`allot submit` of one small workload to the secure broker."""
    return ["submit", "--kafka", secure.bootstrap, "--allocation", "lab/a", "--gpus", "1",
            "--min-runtime", "1h"]  # fmt: skip


def test_wrong_password_is_one_clear_line(secure: Secure, tmp_path: Path) -> None:
    bad = tmp_path / "bad.password"
    bad.write_text("not-the-password\n")
    done = _cli(secure.env("allot-submit", bad), *_submit_args(secure))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    err = done.stderr.strip()
    assert len(err.splitlines()) == 1, err
    assert "rejected the login as 'allot-submit'" in err
    assert "not-the-password" not in err

    read = _cli(secure.env("allot-reader", bad), "queue", "--kafka", secure.bootstrap)
    assert read.returncode != 0
    assert "Traceback" not in read.stderr
    assert "rejected the login as 'allot-reader'" in read.stderr


def test_no_credentials_are_rejected(secure: Secure) -> None:
    done = _cli(secure.env(None), *_submit_args(secure))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "requires a login" in done.stderr and "ALLOT_KAFKA_USER" in done.stderr

    async def plain() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=secure.bootstrap)
        try:
            await asyncio.wait_for(producer.start(), 15)
        finally:
            await producer.stop()

    with pytest.raises(KafkaConnectionError):
        asyncio.run(plain())


def test_missing_password_file_names_the_path(secure: Secure, as_user: Any) -> None:
    as_user("allot-submit", "/nonexistent/allot-submit.password")
    with pytest.raises(
        InboxError, match=re.escape("/nonexistent/allot-submit.password: no such file")
    ):
        KafkaInbox(secure.bootstrap)
    with pytest.raises(
        SourceError, match=re.escape("/nonexistent/allot-submit.password: no such file")
    ):
        list(journal_lines(kafka=secure.bootstrap))


# ------------------------------------------------------------------ client_options (no broker)


def test_client_options(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key in ENV_KEYS:
        monkeypatch.delenv(key, raising=False)
    assert client_options() == {}
    pw = tmp_path / "p"
    pw.write_text("s3cret\n")
    assert client_options("alice", str(pw)) == {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "alice",
        "sasl_plain_password": "s3cret",
    }
    monkeypatch.setenv("ALLOT_KAFKA_USER", "bob")
    monkeypatch.setenv("ALLOT_KAFKA_PASSWORD", "pw")
    monkeypatch.setenv("ALLOT_KAFKA_SASL_MECHANISM", "scram-sha-256")
    opts = client_options()
    assert opts["sasl_plain_username"] == "bob" and opts["sasl_plain_password"] == "pw"
    assert opts["sasl_mechanism"] == "SCRAM-SHA-256"
    assert client_options(mechanism="PLAIN")["sasl_mechanism"] == "PLAIN"
    monkeypatch.setenv("ALLOT_KAFKA_PASSWORD_FILE", str(pw))
    assert client_options()["sasl_plain_password"] == "s3cret"  # the file wins
    monkeypatch.setenv("ALLOT_KAFKA_SASL_MECHANISM", "GSSAPI")
    with pytest.raises(KafkaAuthError, match="GSSAPI"):
        client_options()
    monkeypatch.delenv("ALLOT_KAFKA_SASL_MECHANISM")
    monkeypatch.setenv("ALLOT_KAFKA_SECURITY_PROTOCOL", "PLAINTEXT")
    with pytest.raises(KafkaAuthError, match="SASL_PLAINTEXT"):
        client_options()
    monkeypatch.delenv("ALLOT_KAFKA_SECURITY_PROTOCOL")
    with pytest.raises(KafkaAuthError, match=re.escape(f"{tmp_path}/missing: no such file")):
        client_options("bob", str(tmp_path / "missing"))
    (tmp_path / "empty").write_text("")
    with pytest.raises(KafkaAuthError, match="is empty"):
        client_options("bob", str(tmp_path / "empty"))
    monkeypatch.delenv("ALLOT_KAFKA_PASSWORD_FILE")
    monkeypatch.delenv("ALLOT_KAFKA_PASSWORD")
    with pytest.raises(KafkaAuthError, match="no password"):
        client_options()
