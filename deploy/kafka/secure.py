"""Helpers for `deploy/kafka/start --secure` (Python standard library only).

    secure.py credentials DATA        make DATA/credentials/<principal>.password (mode 600)
                                      for the principals below, if missing
    secure.py scram-args DATA         print `--add-scram` arguments for `kafka-storage
                                      format` (salted passwords, never the passwords)
    secure.py jaas DATA               print the broker's inter-broker JAAS line
    secure.py probe PORT DATA         exit 0 when the broker on 127.0.0.1:PORT accepts the
                                      admin's SCRAM login and lists itself in Metadata
    secure.py acls PORT DATA [SUFFIX] create the ACLs below (idempotent) as the admin;
                                      with SUFFIX ($ALLOT_TOPIC_SUFFIX of a deployment),
                                      also the literal topic grants for its suffixed names

No secret is in this file: passwords are generated at first start (`secrets`) and live
only in DATA/credentials (and, for the super user, in DATA/server.properties, mode 600).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import secrets
import socket
import struct
import sys
from pathlib import Path

MECHANISM = "SCRAM-SHA-512"
ITERATIONS = 4096
ADMIN = "allot-admin"
PRINCIPALS = (ADMIN, "allot-submit", "allot-scheduler", "allot-reader")

# Kafka enum values (org.apache.kafka.common.resource / acl)
TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID = 2, 3, 4, 5
LITERAL, PREFIXED = 3, 4
READ, WRITE, CREATE, DESCRIBE, DESCRIBE_CONFIGS, IDEMPOTENT_WRITE = 3, 4, 5, 8, 10, 12
ALLOW = 3
OP_NAMES = {
    READ: "READ",
    WRITE: "WRITE",
    CREATE: "CREATE",
    DESCRIBE: "DESCRIBE",
    DESCRIBE_CONFIGS: "DESCRIBE_CONFIGS",
    IDEMPOTENT_WRITE: "IDEMPOTENT_WRITE",
}

INBOX, JOURNAL, DLQ, SNAPSHOTS = (
    "allot.inbox",
    "allot.journal",
    "allot.inbox.dlq",
    "allot.snapshots",
)

# (principal, resource type, name, pattern, operations). allot-admin is a super user.
ACLS: list[tuple[str, int, str, int, tuple[int, ...]]] = [
    # submit tools: write requests to the inbox, nothing else
    ("allot-submit", TOPIC, INBOX, LITERAL, (WRITE, DESCRIBE)),
    ("allot-submit", CLUSTER, "kafka-cluster", LITERAL, (IDEMPOTENT_WRITE,)),
    # the scheduler: reads the inbox (and its own ticker writes clock.tick to it),
    # writes and re-reads journal / DLQ / snapshots, creates the allot.* topics,
    # transactional ids allot-scheduler*, consumer groups allot-scheduler*
    (
        "allot-scheduler",
        TOPIC,
        "allot.",
        PREFIXED,
        (READ, WRITE, DESCRIBE, CREATE, DESCRIBE_CONFIGS),
    ),
    # faust's own topics when run as `faust -A streams.app worker` (allot-scheduler-faust-*)
    (
        "allot-scheduler",
        TOPIC,
        "allot-scheduler",
        PREFIXED,
        (READ, WRITE, DESCRIBE, CREATE, DESCRIBE_CONFIGS),
    ),
    ("allot-scheduler", TRANSACTIONAL_ID, "allot-scheduler", PREFIXED, (WRITE, DESCRIBE)),
    ("allot-scheduler", GROUP, "allot-scheduler", PREFIXED, (READ, DESCRIBE)),
    ("allot-scheduler", CLUSTER, "kafka-cluster", LITERAL, (IDEMPOTENT_WRITE,)),
    # readers (views, metrics, audit, dashboards, executors): the journal only
    ("allot-reader", TOPIC, JOURNAL, LITERAL, (READ, DESCRIBE)),
    ("allot-reader", GROUP, "allot-reader", PREFIXED, (READ, DESCRIBE)),
]


# Kafka's legal topic characters: a suffix that could not name a topic is refused
SUFFIX_CHARS = re.compile(r"[A-Za-z0-9._-]*")


def acls_for(suffix: str) -> list[tuple[str, int, str, int, tuple[int, ...]]]:
    """ACLS, plus, for a deployment whose topic names end with `suffix`
    ($ALLOT_TOPIC_SUFFIX: allot.inbox.staging), the same literal grants on its names.
    Literal, not prefixed: a prefix allot.inbox would let allot-submit write the DLQ
    allot.inbox.dlq too. The scheduler's allot.* prefix covers its topics already."""
    if not suffix:
        return ACLS
    extra = [
        (principal, rtype, name + suffix, pattern, ops)
        for principal, rtype, name, pattern, ops in ACLS
        if rtype == TOPIC and pattern == LITERAL
    ]
    return ACLS + extra


def cred_dir(data: Path) -> Path:
    return data / "credentials"


def password(data: Path, user: str) -> str:
    return (cred_dir(data) / f"{user}.password").read_text().strip()


def cmd_credentials(data: Path) -> None:
    folder = cred_dir(data)
    folder.mkdir(mode=0o700, exist_ok=True)
    os.chmod(folder, 0o700)
    for user in PRINCIPALS:
        path = folder / f"{user}.password"
        if path.exists():
            continue
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(24) + "\n")
    # a client config for Kafka's Java tools (--command-config), as the super user
    props = folder / "admin.properties"
    jaas = jaas_line(data)
    fd = os.open(props, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(
            "security.protocol=SASL_PLAINTEXT\n"
            f"sasl.mechanism={MECHANISM}\n"
            f"sasl.jaas.config={jaas}\n"
        )


def jaas_line(data: Path) -> str:
    return (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{ADMIN}" password="{password(data, ADMIN)}";'
    )


def cmd_scram_args(data: Path) -> None:
    algo = MECHANISM.split("-", 1)[1].replace("-", "").lower()  # sha512
    for user in PRINCIPALS:
        salt = os.urandom(16)
        salted = hashlib.pbkdf2_hmac(algo, password(data, user).encode(), salt, ITERATIONS)
        print("--add-scram")
        print(
            f"{MECHANISM}=[name={user},iterations={ITERATIONS},"
            f'salt="{base64.b64encode(salt).decode()}",'
            f'saltedpassword="{base64.b64encode(salted).decode()}"]'
        )


# ------------------------------------------------------------------ wire protocol


class Conn:
    def __init__(self, port: int, timeout: float = 3.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.settimeout(timeout)
        self.corr = 0

    def close(self) -> None:
        self.sock.close()

    def _recv(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed by the broker")
            data += chunk
        return data

    def call(self, api_key: int, version: int, body: bytes) -> bytes:
        self.corr += 1
        client = b"allot-setup"
        header = struct.pack(">hhih", api_key, version, self.corr, len(client)) + client
        msg = header + body
        self.sock.sendall(struct.pack(">i", len(msg)) + msg)
        (n,) = struct.unpack(">i", self._recv(4))
        data = self._recv(n)
        (got,) = struct.unpack(">i", data[:4])
        if got != self.corr:
            raise ValueError("correlation id mismatch")
        return data[4:]


def _str(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def _bytes(raw: bytes) -> bytes:
    return struct.pack(">i", len(raw)) + raw


class Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: str) -> tuple:
        size = struct.calcsize(fmt)
        out = struct.unpack(fmt, self.data[self.pos : self.pos + size])
        self.pos += size
        return out

    def nstr(self) -> str | None:
        (n,) = self.take(">h")
        if n < 0:
            return None
        text = self.data[self.pos : self.pos + n].decode()
        self.pos += n
        return text

    def nbytes(self) -> bytes | None:
        (n,) = self.take(">i")
        if n < 0:
            return None
        raw = self.data[self.pos : self.pos + n]
        self.pos += n
        return raw


def login(conn: Conn, user: str, secret: str) -> None:
    """SaslHandshake v1 + SCRAM over SaslAuthenticate v1 (RFC 5802)."""
    r = Reader(conn.call(17, 1, _str(MECHANISM)))
    (err,) = r.take(">h")
    if err:
        raise RuntimeError(f"SaslHandshake error {err}")
    algo = MECHANISM.split("-", 1)[1].replace("-", "").lower()
    name = user.replace("=", "=3D").replace(",", "=2C")
    cnonce = base64.b64encode(os.urandom(18)).decode()
    bare = f"n={name},r={cnonce}"

    def step(payload: str) -> str:
        rr = Reader(conn.call(36, 1, _bytes(payload.encode())))
        (code,) = rr.take(">h")
        message = rr.nstr()
        if code:
            raise PermissionError(f"SASL authentication failed ({code}): {message}")
        return (rr.nbytes() or b"").decode()

    server_first = step("n,," + bare)
    fields = dict(part.split("=", 1) for part in server_first.split(","))
    nonce, salt, iters = fields["r"], base64.b64decode(fields["s"]), int(fields["i"])
    if not nonce.startswith(cnonce):
        raise PermissionError("SCRAM: server nonce does not extend ours")
    salted = hashlib.pbkdf2_hmac(algo, secret.encode(), salt, iters)
    client_key = hmac.new(salted, b"Client Key", algo).digest()
    stored_key = hashlib.new(algo, client_key).digest()
    without_proof = f"c=biws,r={nonce}"
    auth_message = f"{bare},{server_first},{without_proof}".encode()
    signature = hmac.new(stored_key, auth_message, algo).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    server_final = step(f"{without_proof},p={base64.b64encode(proof).decode()}")
    server_key = hmac.new(salted, b"Server Key", algo).digest()
    expected = base64.b64encode(hmac.new(server_key, auth_message, algo).digest()).decode()
    if server_final != f"v={expected}":
        raise PermissionError("SCRAM: the broker's signature does not verify")


def admin_conn(port: int, data: Path) -> Conn:
    conn = Conn(port)
    try:
        login(conn, ADMIN, password(data, ADMIN))
    except BaseException:
        conn.close()
        raise
    return conn


def cmd_probe(port: int, data: Path) -> int:
    try:
        conn = admin_conn(port, data)
        try:
            # Metadata v4: topics = null (all), allow_auto_topic_creation = false
            resp = conn.call(3, 4, struct.pack(">i?", -1, False))
            (_throttle, brokers) = struct.unpack(">ii", resp[:8])
            return 0 if brokers >= 1 else 1
        finally:
            conn.close()
    except Exception:
        return 1


def cmd_acls(port: int, data: Path, suffix: str = "") -> int:
    suffix = suffix.strip()  # as streams.topics reads $ALLOT_TOPIC_SUFFIX
    if not SUFFIX_CHARS.fullmatch(suffix):
        print(
            f"topic suffix {suffix!r}: use only letters, digits, '.', '_' and '-'", file=sys.stderr
        )
        return 2
    creations = []
    for principal, rtype, name, pattern, ops in acls_for(suffix):
        for op in ops:
            creations.append(
                struct.pack(">b", rtype)
                + _str(name)
                + struct.pack(">b", pattern)
                + _str(f"User:{principal}")
                + _str("*")
                + struct.pack(">bb", op, ALLOW)
            )
    body = struct.pack(">i", len(creations)) + b"".join(creations)
    conn = admin_conn(port, data)
    try:
        r = Reader(conn.call(30, 1, body))  # CreateAcls v1
    finally:
        conn.close()
    r.take(">i")  # throttle
    (n,) = r.take(">i")
    failed = []
    for i in range(n):
        (code,) = r.take(">h")
        message = r.nstr()
        if code:
            failed.append(f"ACL #{i}: error {code}: {message}")
    if failed:
        print("\n".join(failed), file=sys.stderr)
        return 1
    return 0


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "credentials":
        cmd_credentials(Path(rest[0]))
        return 0
    if cmd == "scram-args":
        cmd_scram_args(Path(rest[0]))
        return 0
    if cmd == "jaas":
        print(jaas_line(Path(rest[0])))
        return 0
    if cmd == "probe":
        return cmd_probe(int(rest[0]), Path(rest[1]))
    if cmd == "acls":
        return cmd_acls(int(rest[0]), Path(rest[1]), rest[2] if len(rest) > 2 else "")
    print(f"secure.py: unknown command {cmd}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
