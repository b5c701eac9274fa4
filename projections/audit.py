"""The audit store: the journal in an embedded DuckDB database, for ad-hoc questions.

    loaded = load("allot-audit.duckdb", journal_lines(journal=Path("journal.jsonl")))
    con = connect("allot-audit.duckdb")
    con.sql("SELECT type, count(*) FROM journal GROUP BY ALL").show()

`load` appends the records it has not seen yet: the database remembers how many records
of its source it holds and the `id` of the last one, so loading again only adds the new
ones (and refuses a different journal). Records are batched through DuckDB's own JSON
reader (a temporary NDJSON file per batch), so millions of records load in seconds.

Tables and views (times are UTC `TIMESTAMP`s; `t` columns are the raw epoch seconds):

- `records` (table): one row per record, `seq` (0-based journal position), the
  envelope, the fields the views need, and `record` (the raw JSON);
- `journal`: `seq, type, time, cluster, actor, workload, allocation, id, record`;
- `submissions`: accepted `workload.submitted` with `user` (its actor);
- `placements`: `workload.placed` with the submitting `user`, `gpus` (asked for),
  `held` (the GPUs its hosts give it: whole hosts for a gang), `charged`, ...;
- `preemptions`: `workload.preempted` with the victim's allocation, user and GPUs;
- `budget_changes`: `budget.set` / `budget.removed` with actor, weight, managers;
- `rejections`: every `*.rejected` record with `ref` and `error`;
- `runs`: one row per placement (`gpus`: the GPUs it held, as charged), from `start`
  to the first end of that workload after it (`workload.finished`, `workload.preempted`
  or `workload.cancelled`); a run still going has `end` NULL and is counted up to the
  journal's latest time (`end_t`).

The presets (`history`, `budget_log`, `preemptions`) answer `allot history`,
`allot budget log` and `allot preemptions`, made in SQL over the tables `audit load`
keeps (`budget_rows`, `runs`, `records`): the same rows as `projections.budget_log` and
`projections.history` make from the journal, which tests keep equal; `budget_log_json`
is the budget log as `--json` prints it, written by DuckDB. `allot why ID --audit DB` reads one workload's records
with `find_workload` (a unique prefix is enough) and `workload_records`, and turns them
into its timeline with `projections.timeline` (the same as from the journal). Errors a
person can act on raise `AuditError`.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import orjson

# a `budget.set`'s changes by name, kept in `budget_rows` beside the resulting lists
# (columns added to older databases)
from projections.budget_log import NAMED_CHANGES, RECORD_TYPES, USER_LIMITS

# `budget_rows`' JSON columns beyond the lists: the named changes, the per-user limits
_EXTRA_COLUMNS = (*NAMED_CHANGES, *USER_LIMITS)

BATCH = 500_000  # records per DuckDB JSON read

# fields copied out of each record into `records`: (column, SQL type, JSON path)
_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("type", "VARCHAR", "$.type"),
    ("t", "DOUBLE", "$.time"),
    ("cluster", "VARCHAR", "$.cluster"),
    ("actor", "VARCHAR", "$.actor"),
    ("workload", "VARCHAR", "$.workload"),
    ("allocation", "VARCHAR", "$.allocation"),
    ("id", "VARCHAR", "$.id"),
    ("gpus", "INTEGER", "$.gpus"),
    ("attempt", "INTEGER", "$.attempt"),
    ("charged", "BOOLEAN", "$.charged"),
    ("protected_until", "DOUBLE", "$.protected_until"),
    ("reason", "VARCHAR", "$.reason"),
    ("beneficiary", "VARCHAR", "$.beneficiary"),
    ("requeued", "BOOLEAN", "$.requeued"),
    ("outcome", "VARCHAR", "$.outcome"),
    ("weight", "DOUBLE", "$.weight"),
    ("ref", "VARCHAR", "$.ref"),
    ("error", "VARCHAR", "$.error"),
    ("min_runtime", "DOUBLE", "$.min_runtime"),
    ("managers", "JSON", "$.managers"),
    ("members", "JSON", "$.members"),
    ("victim_allocation", "VARCHAR", "$.explain.victim_allocation"),
    ("ran_s", "DOUBLE", "$.explain.ran_s"),
)


# the GPUs a placement holds: its hosts' GPU indices (a gang of 12 on 8-GPU hosts holds
# 16, and is charged 16); the requested `gpus` where a record has no hosts
def _held(record: str, gpus: str) -> str:
    return (
        f"coalesce(list_sum(list_transform(json_extract({record}, '$.hosts.*'), "
        f"lambda x: json_array_length(x))), {gpus})"
    )


_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS records (
    seq BIGINT,
    time TIMESTAMP,
    {", ".join(f"{name} {sql}" for name, sql, _ in _FIELDS)},
    record JSON
);
CREATE TABLE IF NOT EXISTS audit_state (
    source VARCHAR,
    records BIGINT,
    last_id VARCHAR,
    last_time DOUBLE,
    loaded_at TIMESTAMP
);
CREATE OR REPLACE VIEW journal AS
    SELECT seq, type, time, cluster, actor, workload, allocation, id, record FROM records;
CREATE TABLE IF NOT EXISTS workloads (
    workload VARCHAR, allocation VARCHAR, "user" VARCHAR, gpus INTEGER, submitted_seq BIGINT
);
CREATE TABLE IF NOT EXISTS run_spells (
    workload VARCHAR, attempt INTEGER, allocation VARCHAR, "user" VARCHAR, gpus INTEGER,
    charged BOOLEAN, start TIMESTAMP, "end" TIMESTAMP, ended_by VARCHAR, how VARCHAR,
    start_t DOUBLE, end_t DOUBLE, gpu_seconds DOUBLE, placed_seq BIGINT
);
CREATE OR REPLACE VIEW submissions AS
    SELECT seq, time, t, cluster, workload, allocation, actor AS "user", gpus, min_runtime,
           record
    FROM records WHERE type = 'workload.submitted';
CREATE OR REPLACE VIEW placements AS
    SELECT p.seq, p.time, p.t, p.cluster, p.workload, p.attempt,
           coalesce(p.allocation, w.allocation) AS allocation, w."user",
           coalesce(p.gpus, w.gpus) AS gpus, {_held("p.record", "coalesce(p.gpus, w.gpus)")} AS held,
           p.charged,
           make_timestamp(CAST(round(p.protected_until * 1e6) AS BIGINT)) AS protected_until,
           p.record->'hosts' AS hosts, p.record->'explain' AS explain
    FROM records p LEFT JOIN workloads w USING (workload)
    WHERE p.type = 'workload.placed';
CREATE OR REPLACE VIEW preemptions AS
    SELECT q.seq, q.time, q.t, q.cluster, q.workload, q.attempt,
           coalesce(q.victim_allocation, w.allocation) AS allocation, w."user", w.gpus,
           q.reason, q.beneficiary, q.requeued,
           -- a `drain` or `gpus_removed` preemption's explain has no ran_s: its attempt's
           -- placement says (as projections.history.ran_seconds, which `allot why` reads)
           coalesce(q.ran_s, q.t - p.t) AS ran_s,
           q.actor, q.record->'explain' AS explain
    FROM records q LEFT JOIN workloads w USING (workload)
    LEFT JOIN records p ON p.type = 'workload.placed' AND p.workload = q.workload
                       AND p.attempt = q.attempt AND p.cluster = q.cluster
    WHERE q.type = 'workload.preempted';
CREATE TABLE IF NOT EXISTS budget_rows (
    seq BIGINT, time TIMESTAMP, t DOUBLE, cluster VARCHAR, actor VARCHAR,
    allocation VARCHAR, change VARCHAR, weight DOUBLE, managers JSON, members JSON
);
{"".join(f"ALTER TABLE budget_rows ADD COLUMN IF NOT EXISTS {c} JSON;" for c in _EXTRA_COLUMNS)}
CREATE OR REPLACE VIEW budget_changes AS
    SELECT seq, time, t, cluster, actor, allocation, change, weight, managers, members,
           {", ".join(_EXTRA_COLUMNS)}
    FROM budget_rows;
CREATE OR REPLACE VIEW rejections AS
    SELECT seq, time, t, cluster, type, actor, ref, error, workload, allocation, record
    FROM records WHERE type LIKE '%.rejected';
CREATE OR REPLACE VIEW runs AS SELECT * FROM run_spells;
"""


class AuditError(ValueError):
    """A question the audit store cannot answer: one line for the user."""


def connect(db_path: str | Path, *, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    path = Path(db_path)
    if read_only and not path.exists():
        raise AuditError(f"{path}: no audit database; run `allot audit load --db {path}` first")
    try:
        con = duckdb.connect(str(path), read_only=read_only)
    except duckdb.Error as why:
        raise AuditError(f"{path}: cannot open the audit database: {_first_line(why)}") from None
    con.execute("SET TimeZone = 'UTC'").fetchall()
    if not read_only:
        con.execute(_SCHEMA).fetchall()
        _backfill(con)
    elif not _has_table(con, "records"):
        con.close()
        raise AuditError(f"{path}: not an audit database; run `allot audit load --db {path}`")
    return con


def _has_table(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    rows = con.execute(
        "SELECT 1 FROM information_schema.tables WHERE table_name = ?", [name]
    ).fetchall()
    return bool(rows)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return " ".join(text.splitlines()[0].split()) if text else type(error).__name__


def state(con: duckdb.DuckDBPyConnection) -> dict[str, Any] | None:
    row = con.execute(
        "SELECT source, records, last_id, last_time, loaded_at FROM audit_state"
    ).fetchall()
    if not row:
        return None
    row = row[0]
    return dict(zip(("source", "records", "last_id", "last_time", "loaded_at"), row, strict=True))


def load(
    db_path: str | Path,
    lines: Iterable[bytes],
    *,
    source: str = "",
    where: Callable[[], str] | None = None,
) -> dict[str, Any]:
    """Append the records of `lines` (a journal, oldest first) not yet in the database.

    Returns `{"added": n, "records": total, "source": ...}`. A database holds one
    journal: the records it already has must be the journal's first ones (checked by
    the `id` of the last one loaded). `where()` names the record `lines` gave last (a
    file's FILE:LINE), for a damaged one's error."""
    con = connect(db_path)
    try:
        return _load(con, lines, source, where)
    finally:
        con.close()


def _load(
    con: duckdb.DuckDBPyConnection,
    lines: Iterable[bytes],
    source: str,
    where: Callable[[], str] | None,
) -> dict[str, Any]:
    before = state(con)
    done = before["records"] if before else 0
    if before and source and before["source"] and before["source"] != source:
        raise AuditError(
            f"this database holds the journal of {before['source']}, not {source}; "
            "use another --db for another journal"
        )
    label = source or (before or {}).get("source") or ""
    seq = 0
    batch: list[bytes] = []
    places: list[str] = []  # where each record of the batch is, if `where` says
    first = done
    with tempfile.TemporaryDirectory(prefix="allot-audit-") as tmp:
        chunk = Path(tmp) / "batch.jsonl"
        for line in lines:
            if seq < done:
                if seq == done - 1:
                    _check_same(line, before, seq)
                seq += 1
                continue
            batch.append(b'{"seq":%d,"r":%b}' % (seq, line))
            if where is not None:
                places.append(where())
            seq += 1
            if len(batch) >= BATCH:
                _insert(con, chunk, batch, first, label, places)
                first = seq
                batch, places = [], []
        if seq < done:
            raise AuditError(
                f"the journal has {seq:,} record{'' if seq == 1 else 's'} but this database already holds {done:,}: "
                "it is another (or a rewritten) journal; use another --db"
            )
        if batch:
            _insert(con, chunk, batch, first, label, places)
    if seq > done:
        con.execute("CHECKPOINT").fetchall()
    return {"added": seq - done, "records": seq, "source": label}


def _check_same(line: bytes, before: dict[str, Any] | None, seq: int) -> None:
    try:
        rid = orjson.loads(line).get("id")
    except (orjson.JSONDecodeError, AttributeError):
        rid = None
    if before is not None and rid != before["last_id"]:
        raise AuditError(
            f"record {seq:,} of the journal is {rid!r}, but the database loaded "
            f"{before['last_id']!r} there: another (or a rewritten) journal; use another --db"
        )


def _insert(
    con: duckdb.DuckDBPyConnection,
    chunk: Path,
    batch: list[bytes],
    first: int,
    source: str,
    places: list[str],
) -> None:
    """Add one batch (journal positions `first`...), the derived rows, and the new
    position, in one transaction: a load cut short resumes after its last batch."""
    try:
        last = orjson.loads(batch[-1])["r"]
    except orjson.JSONDecodeError:
        last = None
    last_id = last.get("id") if isinstance(last, dict) else None
    last_time = last.get("time") if isinstance(last, dict) else None
    chunk.write_bytes(b"\n".join(batch) + b"\n")
    paths = ", ".join(f"'{path}'" for _, _, path in _FIELDS)
    # TRY_CAST: a value out of its column's range (a refused request may copy one) reads
    # as NULL there, and stays whole in `record`, rather than stop every later load
    fields = ", ".join(
        f"TRY_CAST(f[{i + 1}] AS {sql})" if sql != "VARCHAR" else f"f[{i + 1}]"
        for i, (_, sql, _) in enumerate(_FIELDS)
    )
    names = ", ".join(name for name, _, _ in _FIELDS)
    try:
        con.execute("BEGIN").fetchall()
        con.execute(
            f"""
            INSERT INTO records (seq, time, {names}, record)
            SELECT seq, make_timestamp(CAST(round(CAST(f[2] AS DOUBLE) * 1e6) AS BIGINT)),
                   {fields}, r
            FROM (
                SELECT seq, r, json_extract_string(r, [{paths}]) AS f
                FROM read_json(?, format = 'newline_delimited',
                               columns = {{'seq': 'BIGINT', 'r': 'JSON'}},
                               maximum_object_size = 67108864)
            )
            """,
            [str(chunk)],
        ).fetchall()
        _derive(con, first)
        con.execute("DELETE FROM audit_state").fetchall()
        con.execute(
            "INSERT INTO audit_state VALUES (?, ?, ?, ?, now()::TIMESTAMP)",
            [source, first + len(batch), last_id, last_time],
        ).fetchall()
        con.execute("COMMIT").fetchall()
    except duckdb.Error as why:
        con.execute("ROLLBACK").fetchall()
        bad = _bad_record(batch, first, places)
        raise AuditError(bad or f"cannot load: {_first_line(why)}") from None


_BUDGET_ROWS = f"""
    INSERT INTO budget_rows (seq, time, t, cluster, actor, allocation, change, weight,
                             managers, members, {", ".join(_EXTRA_COLUMNS)})
    SELECT seq, time, t, cluster, actor, allocation,
           CASE type WHEN 'budget.set' THEN 'set' ELSE 'removed' END, weight, managers, members,
           {", ".join(f"json_extract(record, '$.{c}')" for c in _EXTRA_COLUMNS)}
    FROM records WHERE seq >= ? AND type IN ('budget.set', 'budget.removed')
"""

# rows an older allot loaded without the named changes their records hold
_NAMED_CHANGES_BACKFILL = f"""
    UPDATE budget_rows SET {", ".join(f"{c} = json_extract(r.record, '$.{c}')" for c in NAMED_CHANGES)}
    FROM records r
    WHERE r.seq = budget_rows.seq AND budget_rows.change = 'set'
      AND {" AND ".join(f"budget_rows.{c} IS NULL" for c in NAMED_CHANGES[:4])}
      AND ({" OR ".join(f"json_extract(r.record, '$.{c}') IS NOT NULL" for c in NAMED_CHANGES[:4])})
"""


def _backfill(con: duckdb.DuckDBPyConnection) -> None:
    """Bring a database loaded by an older allot up to date (once): fill `budget_rows`
    if it predates them, and derive `run_spells` again if they count a gang's GPUs asked
    for rather than held (before 62ac550: its history disagreed with `allot shares`)."""
    if (
        not con.execute("SELECT 1 FROM budget_rows LIMIT 1").fetchall()
        and con.execute(
            "SELECT 1 FROM records WHERE type IN ('budget.set', 'budget.removed') LIMIT 1"
        ).fetchall()
    ):
        con.execute(_BUDGET_ROWS, [0]).fetchall()
        con.execute("CHECKPOINT").fetchall()
    con.execute(_NAMED_CHANGES_BACKFILL).fetchall()
    stale = con.execute(
        f"""
        SELECT 1 FROM run_spells r JOIN records p ON p.seq = r.placed_seq
        WHERE r.gpus IS DISTINCT FROM {_held("p.record", "p.gpus")} LIMIT 1
        """
    ).fetchall()
    if stale:
        _derive_runs(con, 0)
        con.execute("CHECKPOINT").fetchall()


def _derive(con: duckdb.DuckDBPyConnection, first: int) -> None:
    """Bring `workloads`, `budget_rows` and `run_spells` up to date with the records
    from `first` on: new submissions and budget changes (the budget log reads a small
    table of its own, not the 10M-row `records`); runs of new placements, and of older
    ones still open (their end may be among the new records)."""
    con.execute(_BUDGET_ROWS, [first]).fetchall()
    con.execute(
        """
        INSERT INTO workloads
        SELECT workload, allocation, actor, gpus, seq FROM records
        WHERE seq >= ? AND type = 'workload.submitted'
        """,
        [first],
    ).fetchall()
    lo = con.execute(
        'SELECT coalesce(min(placed_seq), ?) FROM run_spells WHERE "end" IS NULL', [first]
    ).fetchall()[0][0]
    _derive_runs(con, min(lo, first))


def _derive_runs(con: duckdb.DuckDBPyConnection, lo: int) -> None:
    """`run_spells` again for the placements from journal position `lo` on."""
    con.execute("DELETE FROM run_spells WHERE placed_seq >= ?", [lo]).fetchall()
    con.execute(
        """
        INSERT INTO run_spells
        WITH placed AS (
            SELECT seq, t, workload, attempt, allocation, {HELD} AS gpus, charged
            FROM records WHERE seq >= $lo AND type = 'workload.placed'
        ), ends AS (
            SELECT seq, t, workload, type, coalesce(outcome, reason) AS how
            FROM records
            WHERE seq > $lo
              AND type IN ('workload.finished', 'workload.preempted', 'workload.cancelled')
        ), latest AS (SELECT max(t) AS now FROM records)
        SELECT p.workload, p.attempt, coalesce(p.allocation, w.allocation), w."user",
               coalesce(p.gpus, w.gpus), p.charged,
               make_timestamp(CAST(round(p.t * 1e6) AS BIGINT)),
               make_timestamp(CAST(round(e.t * 1e6) AS BIGINT)),
               replace(e.type, 'workload.', ''), e.how,
               p.t, coalesce(e.t, latest.now),
               coalesce(p.gpus, w.gpus) * (coalesce(e.t, latest.now) - p.t),
               p.seq
        FROM placed p
        ASOF LEFT JOIN ends e ON p.workload = e.workload AND e.seq > p.seq
        LEFT JOIN workloads w ON w.workload = p.workload
        CROSS JOIN latest
        ORDER BY p.seq
        """.replace("{HELD}", _held("record", "gpus")),
        {"lo": lo},
    ).fetchall()


def _bad_record(batch: list[bytes], first: int, places: list[str]) -> str | None:
    """Name the first record of a failed batch that is not a JSON object with a time:
    FILE:LINE when `places` knows it (as `allot queue` and `replay` name it), else its
    number in the journal."""
    for i, line in enumerate(batch):
        place = places[i] if i < len(places) else f"journal record {first + i + 1:,}"
        try:
            record = orjson.loads(line)["r"]
        except orjson.JSONDecodeError:
            return f"{place}: not valid JSON (a damaged journal?)"
        if not isinstance(record, dict):
            return f"{place}: not a JSON object"
        t = record.get("time")
        if not isinstance(t, int | float) or isinstance(t, bool):
            return f"{place}: no numeric 'time'"
    return None


# ------------------------------------------------------------------ queries


def sql(con: duckdb.DuckDBPyConnection, query: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run one ad-hoc query: (column names, rows); a bad query raises AuditError.

    The query reads the database and nothing else: files, extensions and other
    databases are closed to it (the connection cannot open them again)."""
    if not query.strip():
        raise AuditError('give a query, e.g. "SELECT type, count(*) FROM journal GROUP BY ALL"')
    try:
        con.execute("SET enable_external_access = false").fetchall()
        rel = con.execute(query)
        if rel is None or rel.description is None:
            return [], []
        columns = [d[0] for d in rel.description]
        return columns, rel.fetchall()
    except duckdb.Error as why:
        raise AuditError(f"query failed: {_first_line(why)}") from None


def latest_time(con: duckdb.DuckDBPyConnection) -> float:
    row = con.execute("SELECT max(t) FROM records").fetchall()[0]
    if row[0] is None:
        raise AuditError("the audit database is empty: load a journal with `allot audit load`")
    return float(row[0])


def parse_time(text: str, now: float, end: bool = False) -> float:
    """`domain.durations.parse_moment` (`now`, `07:13`, `7d`, an ISO date or time) with
    `now` the journal's latest event time; AuditError when it is none of them."""
    from projections.timeline import domain_module

    durations = domain_module("durations")  # not the whole domain package: start-up time
    try:
        return durations.parse_moment(text, now, end)
    except ValueError as why:
        raise AuditError(str(why)) from None


def iso(t: float | None) -> str | None:
    if t is None:
        return None
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def history(
    con: duckdb.DuckDBPyConnection,
    allocation: str,
    since: str | None = None,
    until: str | None = None,
    cluster: str | None = None,
) -> dict[str, Any]:
    """GPU-hours charged and unallocated by user in `allocation` (and under it) inside
    [since, until]: `projections.history.history`'s answer, summed in SQL over the
    `runs` table `audit load` keeps (folding the records in Python took 20 s on 10M
    records, this well under one)."""
    from projections import history as made

    path = allocation.strip().strip("/")
    try:
        lo, hi = made.window(since, until, latest_time(con))
    except made.HistoryError as why:
        raise AuditError(str(why)) from None
    if not path or not _known_allocation(con, path, cluster):
        raise AuditError(made.unknown_allocation(allocation))
    rows = con.execute(
        f"""
        SELECT "user", sum(CASE WHEN charged THEN g END), sum(CASE WHEN NOT charged THEN g END),
               count(*)
        FROM (
            SELECT "user", charged, gpus * (least(end_t, $hi) - greatest(start_t, $lo)) AS g
            FROM runs
            WHERE (allocation = $path OR starts_with(allocation, $path || '/'))
              AND start_t < $hi AND end_t > $lo AND gpus IS NOT NULL
              {_IN_CLUSTER if cluster is not None else ""}
        )
        GROUP BY "user"
        """,
        {"path": path, "lo": -1e18 if lo is None else lo, "hi": hi}
        | ({"cluster": cluster} if cluster is not None else {}),
    ).fetchall()
    # a sum is NULL where the user had no such run (bool_or of each was 20% of the query)
    users = {
        user: [
            0.0 if charged is None else charged,
            0.0 if free is None else free,
            runs,
            charged is not None,
            free is not None,
        ]
        for user, charged, free, runs in rows
    }
    return made.answer(path, lo, hi, users)


# a workload of `$cluster`, for tables without a cluster column. Left out of the query,
# not made true by a NULL $cluster: DuckDB still scans `records` for the subquery (+30%
# CPU for `history` on the 10M-record benchmark)
_IN_CLUSTER = """AND workload IN (
    SELECT workload FROM records WHERE type = 'workload.submitted' AND cluster = $cluster)"""


def _known_allocation(con: duckdb.DuckDBPyConnection, path: str, cluster: str | None) -> bool:
    """A budget, submission or placement names `path` or a path under it."""
    row = con.execute(
        """
        SELECT count(*) FROM records
        WHERE type IN ('budget.set', 'workload.submitted', 'workload.placed')
          AND (allocation = $path OR starts_with(allocation, $path || '/'))
          AND ($cluster IS NULL OR cluster = $cluster)
        """,
        {"path": path, "cluster": cluster},
    ).fetchall()
    return bool(row[0][0])


# budget changes with the weight each one replaced (None for the first set of an
# allocation, or its first after a removal: the removal ends what came before)
_BUDGET_CHANGES_WITH_PREVIOUS = """(
    SELECT *, last_value(CASE WHEN change = 'set' THEN weight END IGNORE NULLS) OVER (
        PARTITION BY cluster, allocation, era ORDER BY seq
        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS previous_weight
    FROM (
        SELECT *, coalesce(sum(CASE WHEN change = 'removed' THEN 1 ELSE 0 END) OVER (
            PARTITION BY cluster, allocation ORDER BY seq
            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS era
        FROM budget_changes
    )
)"""

# budget changes the scheduler refused (`budget.rejected`), as rows of the log: the
# change the request asked for is not in the journal (only its `ref`), so its weight and
# lists are NULL and `error` says why
_REFUSED_BUDGET_CHANGES = f"""(
    SELECT seq, time, t, cluster, actor, allocation,
           CASE json_extract_string(record, '$.input_type')
               WHEN 'budget.removed' THEN 'remove refused' ELSE 'set refused' END AS change,
           NULL::DOUBLE AS weight, NULL::DOUBLE AS previous_weight, NULL::JSON AS managers,
           NULL::JSON AS members, {", ".join(f"NULL::JSON AS {c}" for c in _EXTRA_COLUMNS)},
           error
    FROM rejections WHERE type = 'budget.rejected'
)"""


def _has_named_changes(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether `budget_rows` has the named-change columns (a database an older allot
    loaded, read without loading again, has not: loading adds them)."""
    have = {
        name
        for (name,) in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'budget_rows'"
        ).fetchall()
    }
    return all(c in have for c in _EXTRA_COLUMNS)


def _budget_records(con: duckdb.DuckDBPyConnection, cluster: str | None) -> list[Any]:
    """The raw budget records, oldest first (`projections.budget_log.RECORD_TYPES`)."""
    where = "type IN (?, ?, ?)" + (" AND cluster = ?" if cluster is not None else "")
    params = [*RECORD_TYPES, cluster] if cluster is not None else list(RECORD_TYPES)
    rows = con.execute(f"SELECT record FROM records WHERE {where} ORDER BY seq", params).fetchall()
    return [orjson.loads(record) for (record,) in rows]


# `budget_log`'s rows in the database: the accepted changes with `previous_weight` and the
# refused ones (`error` NULL for the others), of `$cluster` and `$path` and under it
# (NULL: all)
_BUDGET_LOG_ROWS = f"""(
    SELECT * FROM (SELECT *, NULL::VARCHAR AS error FROM {_BUDGET_CHANGES_WITH_PREVIOUS}
                   UNION ALL BY NAME SELECT * FROM {_REFUSED_BUDGET_CHANGES})
    WHERE ($cluster IS NULL OR cluster = $cluster)
      AND ($path IS NULL OR allocation = $path OR starts_with(allocation, $path || '/'))
)"""
_BUDGET_LOG_KEYS = ("time", "t", "cluster", "actor", "allocation", "change", "weight",
                    "previous_weight")  # fmt: skip
# `budget_rows`' JSON columns: the lists of names, and the per-user limits (numbers)
_BUDGET_LOG_LISTS = ("managers", "members", *NAMED_CHANGES)
_BUDGET_LOG_JSON = (*_BUDGET_LOG_LISTS, *USER_LIMITS)


def budget_log(
    con: duckdb.DuckDBPyConnection, allocation: str | None = None, cluster: str | None = None
) -> list[dict[str, Any]]:
    """`projections.budget_log.budget_log`'s rows (the same keys and values; a test keeps
    them equal), made in SQL from the `budget_rows` table `audit load` keeps: folding the
    raw records in Python took 1.6 s on the 10M-record benchmark (100k budget records)."""
    from projections import budget_log as log

    latest_time(con)
    if not _has_named_changes(con):  # an older layout: made from the records themselves
        try:
            return log.budget_log(_budget_records(con, cluster), allocation)
        except log.BudgetLogError as why:
            raise AuditError(str(why)) from None
    path = allocation.strip().strip("/") if allocation else None
    rows = con.execute(
        f"""
        SELECT strftime(time, '%Y-%m-%dT%H:%M:%S'), t, cluster, actor, allocation, change,
               weight, previous_weight, {", ".join(_BUDGET_LOG_JSON)}, error
        FROM {_BUDGET_LOG_ROWS} ORDER BY seq
        """,
        {"cluster": cluster, "path": path},
    ).fetchall()
    if allocation and not rows:
        raise AuditError(log.unknown_allocation(allocation))
    loads = orjson.loads
    return [
        {
            **dict(zip(_BUDGET_LOG_KEYS, row[:8], strict=True)),
            **{
                k: loads(v) if v is not None else None
                for k, v in zip(_BUDGET_LOG_JSON, row[8:-1], strict=True)
            },
            "error": row[-1],
        }
        for row in rows
    ]


def budget_log_json(
    con: duckdb.DuckDBPyConnection,
    allocation: str | None = None,
    cluster: str | None = None,
    since: str | None = None,
) -> bytes:
    """`orjson.dumps` of `budget_log`'s rows from `since` on (`allot budget log --json`),
    the same bytes (a test keeps them equal) written by DuckDB, a row at a time (one
    to_json of a list of them took 1.7x as long): making a Python row of each took a
    third of the command's time on the 10M-record benchmark (100k rows). Where
    DuckDB's JSON would differ from orjson's (`_ORJSON_ALIKE`), made from the rows."""
    from projections import budget_log as log

    latest = latest_time(con)
    if not _has_named_changes(con):
        rows = budget_log(con, allocation, cluster)
        return orjson.dumps(log.rows_since(rows, _since_time(since, latest)))
    path = allocation.strip().strip("/") if allocation else None
    params = {"cluster": cluster, "path": path}
    if (
        allocation
        and not con.execute(f"SELECT 1 FROM {_BUDGET_LOG_ROWS} LIMIT 1", params).fetchall()
    ):
        raise AuditError(log.unknown_allocation(allocation))
    since_t = _since_time(since, latest)
    fields = ", ".join(f"'{k}': {k}" for k in (*_BUDGET_LOG_KEYS[1:], *_BUDGET_LOG_JSON, "error"))
    alike, text = con.execute(
        f"""
        SELECT bool_and({_ORJSON_ALIKE}),
               coalesce('[' || string_agg(to_json({{
                   'time': strftime(time, '%Y-%m-%dT%H:%M:%S'), {fields}
               }}), ',' ORDER BY seq) || ']', '[]')
        FROM {_BUDGET_LOG_ROWS} WHERE $since IS NULL OR t >= $since
        """,
        {**params, "since": since_t},
    ).fetchall()[0]
    data = text.encode()
    if alike is False or _UPPER_HEX_ESCAPE.search(data):
        return orjson.dumps(log.rows_since(budget_log(con, allocation, cluster), since_t))
    return data


def _since_time(since: str | None, latest: float) -> float | None:
    from projections.budget_log import since_time

    return since_time(since, latest) if since is not None else None


def _orjson_number(column: str) -> str:
    return f"({column} IS NULL OR {column} = 0 OR (abs({column}) >= 1e-5 AND abs({column}) < 1e15))"


# a row DuckDB writes as orjson does: its numbers where both write the shortest
# round-trip digits (DuckDB writes 1e16 as 10000000000000000.0 and 1e-6 as 0.000001,
# orjson 1e16 and 1e-6), lists of names only (not numbers in them) and whole limits
_ORJSON_ALIKE = " AND ".join(
    [
        *(_orjson_number(c) for c in ("t", "weight", "previous_weight")),
        *(
            f"({c} IS NULL OR json_structure({c}) IN ('[\"VARCHAR\"]', '[\"NULL\"]'))"
            for c in _BUDGET_LOG_LISTS
        ),
        *(f"({c} IS NULL OR json_type({c}) IN ('BIGINT', 'UBIGINT'))" for c in USER_LIMITS),
    ]
)
# DuckDB escapes some control characters in upper case (\u001B), orjson in lower case
_UPPER_HEX_ESCAPE = re.compile(rb"\\u[0-9a-fA-F]{0,3}[A-F]")


# the `preemptions` view's rows in [$lo, $hi] of `$cluster` (NULL: any), with its
# columns. Not read through the view: its join with every placement (for a drained
# attempt's ran_s) hashes all of them, 2.5M on the 10M-record benchmark (0.35 s for
# 292 preemptions in 7 days); here only the placements of this window's preemptions
# without ran_s are joined
_PREEMPTIONS_IN_WINDOW = """
WITH q AS (
    SELECT seq, t, cluster, workload, attempt, victim_allocation, reason, beneficiary,
           requeued, ran_s
    FROM records
    WHERE type = 'workload.preempted' AND t >= $lo AND t <= $hi
      AND ($cluster IS NULL OR cluster = $cluster)
)
SELECT q.t, q.workload, q.attempt, coalesce(q.victim_allocation, w.allocation) AS allocation,
       w."user", w.gpus, q.reason, q.beneficiary, q.requeued,
       coalesce(q.ran_s, q.t - p.t) AS ran_s
FROM q LEFT JOIN workloads w USING (workload)
LEFT JOIN (
    SELECT workload, attempt, cluster, t FROM records
    WHERE type = 'workload.placed' AND workload IN (SELECT workload FROM q WHERE ran_s IS NULL)
) p ON p.workload = q.workload AND p.attempt = q.attempt AND p.cluster = q.cluster
ORDER BY q.seq
"""


def preemptions(
    con: duckdb.DuckDBPyConnection,
    since: str | None = None,
    until: str | None = None,
    cluster: str | None = None,
) -> list[dict[str, Any]]:
    """Every preemption in [since, until], oldest first: `projections.history.preemptions`'s
    rows, the `preemptions` view's (the same victim allocation, user, GPUs and run time),
    not folded in Python (6.5 s on 10M records, this a few ms)."""
    from projections import history as made

    try:
        lo, hi = made.window(since, until, latest_time(con))
    except made.HistoryError as why:
        raise AuditError(str(why)) from None
    rows = con.execute(
        _PREEMPTIONS_IN_WINDOW,
        {"lo": -1e18 if lo is None else lo, "hi": hi, "cluster": cluster},
    ).fetchall()
    keys = ("workload", "attempt", "allocation", "user", "gpus", "reason", "beneficiary",
            "requeued", "ran_s")  # fmt: skip
    return [
        {"time": made.iso(t), "t": t, **dict(zip(keys, rest, strict=True))} for t, *rest in rows
    ]


def find_workload(con: duckdb.DuckDBPyConnection, wid: str) -> str:
    """`wid` itself, or the one workload id it is a unique prefix of; else AuditError
    naming close matches."""
    latest_time(con)
    wid = wid.strip()
    if not wid:
        raise AuditError("give a workload id")
    rows = con.execute(
        "SELECT DISTINCT workload FROM records WHERE starts_with(workload, ?) "
        "ORDER BY workload LIMIT 6",
        [wid],
    ).fetchall()
    ids = [r[0] for r in rows]
    if wid in ids:
        return wid
    if len(ids) == 1:
        return ids[0]
    task = _task_of_a_prefix(con, wid) if not ids else None
    if task is not None:
        return task
    if ids:
        raise AuditError(
            f"workload id {wid!r} is ambiguous in the audit database: it begins "
            f"{', '.join(ids[:5])}{', ...' if len(ids) > 5 else ''}; give more of it"
        )
    raise AuditError(
        f"no workload {wid!r} in the audit database (is it loaded? `allot audit load` "
        "adds the journal's new records; `allot queue` lists live workloads)"
    )


def _task_of_a_prefix(con: duckdb.DuckDBPyConnection, wid: str) -> str | None:
    """`PREFIX_N` (Slurm's BASE_INDEX with the base shortened, as `-j` takes it): task
    N of the one job array whose base PREFIX starts; None when none or several."""
    head, sep, index = wid.rpartition("_")
    if not (sep and head and index.isdigit()):
        return None
    rows = con.execute(
        "SELECT DISTINCT workload FROM records WHERE starts_with(workload, ?) "
        "AND ends_with(workload, ?) LIMIT 2",
        [head, f"_{index}"],
    ).fetchall()
    found = [r[0] for r in rows if r[0].rpartition("_")[2] == index]
    return found[0] if len(found) == 1 else None


def array_tasks(con: duckdb.DuckDBPyConnection, base: str) -> list[str]:
    """The task ids BASE_<n> of job array `base` in the database, by index; empty when
    `base` is no array's base (or is a workload's own id)."""
    latest_time(con)
    base = base.strip()
    rows = con.execute(
        "SELECT DISTINCT workload FROM records WHERE starts_with(workload, ?)",
        [f"{base}_"],
    ).fetchall()
    own = con.execute("SELECT 1 FROM records WHERE workload = ? LIMIT 1", [base]).fetchone()
    tasks = [r[0] for r in rows if r[0][len(base) + 1 :].isdigit()]
    if own is not None or not base:
        return []
    return sorted(tasks, key=lambda t: int(t.rpartition("_")[2]))


def workload_records(con: duckdb.DuckDBPyConnection, wid: str) -> list[dict[str, Any]]:
    """The records about workload `wid` (its own, not those where it is only the
    beneficiary), in journal order, as journal-shaped dicts (upcast like the journal
    readers do): what `projections.timeline.timeline` reads."""
    from projections.timeline import domain_module

    upcast = domain_module("upcasting").upcast  # not the whole domain package
    rows = con.execute(
        """
        SELECT record FROM records
        WHERE workload = ? AND (type IN ('workload.submitted', 'workload.placed',
            'workload.preempted', 'workload.finished', 'workload.cancelled',
            'workload.held', 'workload.released')
            OR type LIKE '%.rejected')
        ORDER BY seq
        """,
        [wid],
    ).fetchall()
    loads = orjson.loads
    return [upcast(loads(r[0])) for r in rows]


def rejected_request(con: duckdb.DuckDBPyConnection, ref: str) -> dict[str, Any] | None:
    """The rejection of the request whose id is `ref`, if the journal has one."""
    rows = con.execute(
        "SELECT record FROM records WHERE ref = ? AND type LIKE '%.rejected' ORDER BY seq LIMIT 1",
        [ref],
    ).fetchall()
    return orjson.loads(rows[0][0]) if rows else None


def default_db() -> Path:
    return Path(os.environ.get("ALLOT_AUDIT_DB", "allot-audit.duckdb"))
