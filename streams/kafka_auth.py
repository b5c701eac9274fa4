"""Who a Kafka client logs in as: aiokafka keyword arguments for SASL/SCRAM.

`client_options()` is `{}` for a plaintext broker (no user given, none in the
environment). With a user it returns `security_protocol`, `sasl_mechanism`,
`sasl_plain_username` and `sasl_plain_password` for every aiokafka client
(`AIOKafkaProducer(**client_options(), ...)`).

Environment (arguments win):

    ALLOT_KAFKA_USER               principal, e.g. allot-submit
    ALLOT_KAFKA_PASSWORD_FILE      file holding its password (deploy/kafka/start --secure
                                   writes DATA/credentials/<principal>.password)
    ALLOT_KAFKA_PASSWORD           the password itself (when no file is given)
    ALLOT_KAFKA_SASL_MECHANISM     SCRAM-SHA-512 (default), SCRAM-SHA-256 or PLAIN
    ALLOT_KAFKA_SECURITY_PROTOCOL  SASL_PLAINTEXT (default) or SASL_SSL
    ALLOT_KAFKA_SSL_CAFILE         with SASL_SSL: CA certificates (PEM) to check the
                                   broker's certificate with (default: the system's)

Errors are `KafkaAuthError` with one line a person can act on.
"""

from __future__ import annotations

import os
from typing import Any

USER_ENV = "ALLOT_KAFKA_USER"
PASSWORD_FILE_ENV = "ALLOT_KAFKA_PASSWORD_FILE"
PASSWORD_ENV = "ALLOT_KAFKA_PASSWORD"
MECHANISM_ENV = "ALLOT_KAFKA_SASL_MECHANISM"
PROTOCOL_ENV = "ALLOT_KAFKA_SECURITY_PROTOCOL"

DEFAULT_MECHANISM = "SCRAM-SHA-512"
DEFAULT_PROTOCOL = "SASL_PLAINTEXT"
MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")
PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")


class KafkaAuthError(ValueError):
    """Kafka credentials are missing, unreadable or inconsistent: one line."""


def _env(name: str) -> str | None:
    value = os.environ.get(name, "").strip()
    return value or None


def read_password(path: str) -> str:
    """The first line of `path`, stripped; a missing, unreadable or empty file names it."""
    try:
        with open(os.path.expanduser(path), encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise KafkaAuthError(f"Kafka password file {path}: no such file") from None
    except IsADirectoryError:
        raise KafkaAuthError(f"Kafka password file {path}: is a folder, not a file") from None
    except PermissionError:
        raise KafkaAuthError(f"Kafka password file {path}: permission denied") from None
    except (OSError, UnicodeDecodeError) as why:
        reason = getattr(why, "strerror", None) or type(why).__name__
        raise KafkaAuthError(f"Kafka password file {path}: cannot read it ({reason})") from None
    lines = text.splitlines()
    password = lines[0].strip() if lines else ""
    if not password:
        raise KafkaAuthError(f"Kafka password file {path}: is empty")
    return password


def client_options(
    user: str | None = None,
    password_file: str | None = None,
    *,
    mechanism: str | None = None,
) -> dict[str, Any]:
    """aiokafka keyword arguments to log in as `user` (else $ALLOT_KAFKA_USER); `{}`
    when there is no user (a plaintext broker)."""
    user = (user or "").strip() or _env(USER_ENV)
    password_file = (password_file or "").strip() or _env(PASSWORD_FILE_ENV)
    if user is None:
        if password_file is not None or _env(PASSWORD_ENV) is not None:
            raise KafkaAuthError(f"a Kafka password is set but no user: set ${USER_ENV}")
        return {}
    if password_file is not None:
        password = read_password(password_file)
    else:
        password = os.environ.get(PASSWORD_ENV, "").strip()
        if not password:
            raise KafkaAuthError(
                f"Kafka user {user!r} has no password: set ${PASSWORD_FILE_ENV} "
                f"to a file holding it, or ${PASSWORD_ENV}"
            )
    chosen = (mechanism or _env(MECHANISM_ENV) or DEFAULT_MECHANISM).upper()
    if chosen not in MECHANISMS:
        raise KafkaAuthError(
            f"SASL mechanism {chosen!r} is not supported; use one of {', '.join(MECHANISMS)}"
        )
    protocol = (_env(PROTOCOL_ENV) or DEFAULT_PROTOCOL).upper()
    if protocol not in PROTOCOLS:
        raise KafkaAuthError(
            f"${PROTOCOL_ENV}={protocol!r}: use one of {', '.join(PROTOCOLS)} "
            f"(unset {USER_ENV} for a plaintext broker)"
        )
    options: dict[str, Any] = {
        "security_protocol": protocol,
        "sasl_mechanism": chosen,
        "sasl_plain_username": user,
        "sasl_plain_password": password,
    }
    if protocol == "SASL_SSL":
        from aiokafka.helpers import create_ssl_context

        cafile = _env("ALLOT_KAFKA_SSL_CAFILE")
        options["ssl_context"] = create_ssl_context(cafile=cafile)
    return options


def describe_error(error: BaseException) -> str | None:
    """A one-line explanation when `error` is a Kafka authentication or authorization
    failure (else None), naming the principal from the environment if there is one."""
    from aiokafka import errors as e

    who = _env(USER_ENV)
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    as_who = f" as {who!r}" if who else ""
    if isinstance(error, e.TopicAuthorizationFailedError) or "TopicAuthorizationFailed" in text:
        return f"not authorized{as_who}: the broker's ACLs deny this topic ({text})"
    if isinstance(error, e.GroupAuthorizationFailedError):
        return f"not authorized{as_who}: the broker's ACLs deny the consumer group ({text})"
    if isinstance(error, e.TransactionalIdAuthorizationFailed):
        return f"not authorized{as_who}: the broker's ACLs deny the transactional id ({text})"
    if isinstance(error, e.ClusterAuthorizationFailedError):
        return f"not authorized{as_who}: the broker's ACLs deny a cluster operation ({text})"
    auth_failed = getattr(e, "SaslAuthenticationFailed", None)
    if (auth_failed is not None and isinstance(error, auth_failed)) or (
        "Authentication failed" in text or "SaslAuthenticationFailed" in text
    ):
        return f"Kafka rejected the login{as_who}: wrong user or password ({text})"
    if isinstance(error, e.UnsupportedSaslMechanismError) or "UnsupportedSaslMechanism" in text:
        return f"the broker does not accept this SASL mechanism ({text})"
    if "AuthorizationFailed" in type(error).__name__ or "AuthorizationFailed" in text:
        return f"not authorized{as_who}: {text or type(error).__name__}"
    return None


async def diagnose(bootstrap: str, options: dict[str, Any], timeout: float = 3.0) -> str | None:
    """Why a client could not bootstrap, when it is a login problem: aiokafka only logs
    the SASL error and raises "Unable to bootstrap". Connects once to the first
    address with `options` and returns a one-line reason, or None if it is not about
    credentials (e.g. nothing listens there)."""
    import asyncio

    from aiokafka.conn import create_conn
    from aiokafka.errors import IllegalSaslStateError, KafkaConnectionError
    from aiokafka.protocol.metadata import MetadataRequest

    host, _, port = bootstrap.split(",")[0].strip().rpartition(":")
    try:
        conn = await asyncio.wait_for(
            create_conn(host, int(port), request_timeout_ms=int(timeout * 1000), **options),
            timeout,
        )
    except IllegalSaslStateError:
        if options:  # a login left in the environment, sent to a listener without logins
            return (
                f"the broker does not take a login there, but ${USER_ENV} is set: unset "
                f"${USER_ENV} (and its password) for a broker without logins"
            )
        return None
    except Exception as why:
        return describe_error(why)
    try:
        await asyncio.wait_for(conn.send(MetadataRequest([])), timeout)
    except KafkaConnectionError:
        if not options:
            return (
                "the broker closed the connection before answering: it probably requires "
                f"a login; set ${USER_ENV} and ${PASSWORD_FILE_ENV}"
            )
        return None
    except Exception as why:
        return describe_error(why)
    finally:
        conn.close()
    return None


async def topic_denied(client: Any, topic: str, timeout: float = 5.0) -> bool:
    """True when the broker says this client may not describe `topic` (ACLs). A topic
    the principal may not see is left out of an all-topics Metadata answer, as if it
    did not exist; asking for it by name tells the two apart. `client` is an
    AIOKafkaClient (`consumer._client`)."""
    import asyncio

    from aiokafka.errors import TopicAuthorizationFailedError
    from aiokafka.protocol.metadata import MetadataRequest

    try:
        node = client.get_random_node()
        response = await asyncio.wait_for(
            client.send(node, MetadataRequest([topic], allow_auto_topic_creation=False)),
            timeout,
        )
    except Exception:
        return False
    for entry in response.topics:
        error_code, name = entry[0], entry[1]
        if name == topic and error_code == TopicAuthorizationFailedError.errno:
            return True
    return False
