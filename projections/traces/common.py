"""Plumbing shared by the trace readers: errors, results, CSV rows, cell parsing.

Every reader turns a file into *submission dicts* (see `projections.traces`): one
per job or pod asking for at least one GPU, sorted by submit time (ties keep the
file's row order). Rows are read with the `csv` module one at a time, so a
100k-row trace costs a fraction of a second; only the parsed submissions are kept.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from domain.admission import MAX_NAME, MAX_TAGS
from domain.durations import parse_duration
from domain.text import printable
from domain.tree import valid_path

Submission = dict[str, Any]

_MISSING = frozenset({"", "nan", "none", "null", "na", "n/a", "-"})
_TRUE = frozenset({"true", "t", "yes", "y", "1"})
_FALSE = frozenset({"false", "f", "no", "n", "0"})


class TraceError(ValueError):
    """A trace (or allocation map) that cannot be read; the message names file, line, column.

    `row_error` is True when one malformed row caused it (`skip_bad` would skip it).
    """

    def __init__(self, message: str, *, row_error: bool = False) -> None:
        super().__init__(message)
        self.row_error = row_error


class NeverRan(Exception):
    """Raised by a row parser for a job its source says never ran (an openb pod deleted
    before it was scheduled): nothing says how long it would have run, so it is no
    workload; the reader counts it in `skipped_unscheduled`."""


class BadValue(ValueError):
    """One unreadable cell or record; the reader adds the file and line."""

    def __init__(self, column: str | None, message: str) -> None:
        super().__init__(message)
        self.column = column
        self.message = message


@dataclass
class TraceResult:
    """What a trace held, ready for a scenario or for `allot trace import`."""

    submissions: list[Submission] = field(default_factory=list)
    skipped_bad: int = 0  # malformed rows skipped (only with skip_bad)
    skipped_no_gpu: int = 0  # rows/pods asking for no GPU
    skipped_unscheduled: int = 0  # pods never scheduled: no run, so no runtime to replay
    unfinished: int = 0  # jobs that never ended: runtime None, they run until the horizon
    running_at_cut: int = 0  # of those, openb pods still running when the trace was cut
    rows: int = 0  # data rows (or JSON lines) read, blank lines not counted
    bad_examples: list[str] = field(default_factory=list)  # the first few skipped, and why
    unmapped: dict[str, int] = field(default_factory=dict)  # tenant -> rows the map missed


MAX_BAD_EXAMPLES = 3


def skip_bad_row(result: TraceResult, where: str) -> None:
    """Count a malformed row skipped under skip_bad, keeping the first few reasons."""
    result.skipped_bad += 1
    if len(result.bad_examples) < MAX_BAD_EXAMPLES:
        result.bad_examples.append(where)


# a job longer than ten years is a placeholder or a unit mistake (milliseconds read as
# seconds), not work: without a horizon it would make the run last centuries
MAX_RUNTIME_S = 3650 * 86400.0


def submission(
    *,
    runtime_column: str = "runtime",
    time: float,
    allocation: str,
    gpus: int,
    workload: str | None = None,
    actor: str | None = None,
    runtime: float | None = None,
    min_runtime: float | None = None,
    resumable: bool | None = None,
    priority: int | None = None,
    tags: Iterable[str] = (),
    name: str | None = None,
    one_host: bool | None = None,
) -> Submission:
    """A submission dict with every key present (None: not in the trace), but for
    `one_host`, there only when true (a million rows need no key that says nothing). A
    runtime over MAX_RUNTIME_S is a BadValue of `runtime_column`."""
    if runtime is not None and runtime > MAX_RUNTIME_S:
        raise BadValue(
            runtime_column,
            f"a runtime of {runtime:,.0f} s is over ten years (at most {MAX_RUNTIME_S:,.0f} s)",
        )
    sub: Submission = {
        "time": float(time),
        "workload": workload,
        "actor": actor,
        "allocation": allocation,
        "gpus": int(gpus),
        "runtime": runtime,
        "min_runtime": min_runtime,
        "resumable": resumable,
        "priority": priority,
        "tags": list(tags),
        "name": name,
    }
    if one_host:
        sub["one_host"] = True
    return sub


# ------------------------------------------------------------------ allocations


@dataclass(frozen=True)
class OptionNames:
    """How the user gave the reader's options, for the errors that name them: the
    command's flags, or a scenario's trace keys."""

    prefix: str = "--allocation-prefix"
    map: str = "--allocation-map"
    format: str = "--format "
    timezone: str = "--timezone"


CLI_OPTIONS = OptionNames()
SCENARIO_KEYS = OptionNames(
    prefix="allocation_prefix", map="allocation_map", format="format: ", timezone="timezone"
)

_PATH_RULE = "names separated by '/', without spaces or control characters"


class Allocations:
    """Source tenant (VC, app, qos) -> allocation path: the map, else `<prefix><tenant>`."""

    __slots__ = ("mapping", "names", "prefix", "unmapped")

    def __init__(
        self, mapping: dict[str, str] | None, prefix: str, names: OptionNames = CLI_OPTIONS
    ) -> None:
        self.mapping = mapping or {}
        self.prefix = prefix or ""
        self.names = names
        self.unmapped: dict[str, int] = {}  # with a map: tenants it missed, and their rows
        # a prefix no tenant can complete was blamed on every row in turn, and with
        # skip_bad every row was skipped: an empty file, exit 0
        if self.prefix and not valid_path(self.prefix + "x"):
            raise TraceError(
                f"{names.prefix} {self.prefix!r} makes no allocation path with a tenant after"
                f" it ({_PATH_RULE}), e.g. vc/ or lab/olmo/"
            )

    def __call__(self, tenant: str, column: str) -> str:
        """The allocation of `tenant` (read from `column`, which a bad one's error names)."""
        mapped = self.mapping.get(tenant)
        if mapped is not None:
            return mapped
        if self.mapping:
            self.unmapped[tenant] = self.unmapped.get(tenant, 0) + 1
        path = self.prefix + tenant
        if not valid_path(path):
            # e.g. an unterminated quote that swallowed the following lines
            shown = tenant if len(tenant) <= 40 else tenant[:37] + "..."
            raise BadValue(
                column,
                f"{shown!r} makes no allocation path ({_PATH_RULE}); {self.names.map} can name it",
            )
        return path


class _MapError(ValueError):
    pass


class _TenantLoader(yaml.SafeLoader):
    """Keeps mapping keys as written: tenant ids like `0123`, `1e5` or `yes` stay text."""


def _mapping_with_text_keys(loader: _TenantLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    mapping: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        if not isinstance(key_node, yaml.ScalarNode):
            raise _MapError(f"line {key_node.start_mark.line + 1}: a tenant must be a plain name")
        key = key_node.value
        if key in mapping:
            raise _MapError(f"line {key_node.start_mark.line + 1}: tenant {key!r} is mapped twice")
        mapping[key] = loader.construct_object(value_node, deep=True)
    return mapping


_TenantLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _mapping_with_text_keys,  # type: ignore[arg-type]
)


def load_allocation_map(path: Path | str) -> dict[str, str]:
    """Read a YAML mapping `source tenant: allocation path`; TraceError says what is wrong."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise TraceError(f"{path}: allocation map not found") from None
    except IsADirectoryError:
        raise TraceError(f"{path}: allocation map is a directory, not a file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(f"{path}: cannot read allocation map: {exc}") from None
    try:
        data = yaml.load(text, Loader=_TenantLoader)  # a SafeLoader subclass
    except _MapError as exc:
        raise TraceError(f"{path}: allocation map {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise TraceError(f"{path}{where}: allocation map is not valid YAML: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise TraceError(
            f"{path}: allocation map must be a mapping of source tenant to allocation path "
            f"(e.g. `vc1: lab/olmo/pretrain`), not a {type(data).__name__}"
        )
    mapping: dict[str, str] = {}
    for key, value in data.items():
        tenant = str(key).strip()
        if not tenant:
            raise TraceError(f"{path}: allocation map has an empty tenant name")
        if not isinstance(value, str) or not valid_path(value.strip()):
            # `LS: lab/latency sensitive` was written to every LS row as its allocation
            raise TraceError(
                f"{path}: tenant {tenant!r}: allocation must be a path like lab/olmo/pretrain "
                f"({_PATH_RULE}), got {value!r}"
            )
        mapping[tenant] = value.strip()
    return mapping


def load_zone(name: str, names: OptionNames = CLI_OPTIONS) -> Any:
    """The IANA time zone `name` (e.g. America/Los_Angeles); TraceError if unknown."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(name.strip())
    # OSError: a region such as `Pacific` is a folder of the zone database, not a zone
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise TraceError(
            f"{names.timezone} {name!r}: no such time zone; give an IANA name such as "
            "America/Los_Angeles or UTC (without a time zone database here, install tzdata)"
        ) from None


# ------------------------------------------------------------------ cells


def is_missing(text: str) -> bool:
    return text.lower() in _MISSING


def require(text: str, column: str) -> str:
    if is_missing(text):
        raise BadValue(column, "missing value")
    return text


# the largest count (GPUs, priority) a row may give: a 32-bit integer's range, as the
# scheduler's clients and the audit store read them (past 64 bits JSON cannot carry it)
MAX_COUNT = 2**31 - 1


def parse_int(text: str, column: str, *, minimum: int | None = 0) -> int:
    """An integer cell; `3.0` (as pandas writes) is fine, `3.5` and `x` are not, nor
    one beyond ±MAX_COUNT."""
    require(text, column)
    try:
        value = int(text)
    except ValueError:
        try:
            number = float(text)
        except ValueError:
            raise BadValue(column, f"{text!r} is not an integer") from None
        if not number.is_integer():
            raise BadValue(column, f"{text!r} is not an integer") from None
        value = int(number)
    if abs(value) > MAX_COUNT:
        raise BadValue(column, f"{text!r} is too large (at most {MAX_COUNT:,})")
    if minimum is not None and value < minimum:
        raise BadValue(column, f"{text!r} must be >= {minimum}")
    return value


def parse_number(text: str, column: str, *, minimum: float | None = 0.0) -> float:
    require(text, column)
    try:
        value = float(text)
    except ValueError:
        raise BadValue(column, f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise BadValue(column, f"{text!r} is not a finite number")
    if minimum is not None and value < minimum:
        raise BadValue(column, f"{text!r} must be >= {minimum:g}")
    return value


def parse_seconds(text: str, column: str) -> float:
    """A duration cell: plain seconds or `30s`, `15m`, `8h`, `7d`, `1h30m`."""
    require(text, column)
    try:
        return parse_duration(text)
    except ValueError:
        raise BadValue(column, _not_seconds(text)) from None


def _not_seconds(text: str) -> str:
    """Why a duration cell was refused: `-30` is a duration of the wrong sign, `inf` a
    number but no time; calling them "not a duration" sent users looking at the form."""
    if text.startswith("-") and _is_duration(text[1:]):
        return f"{text!r} must be >= 0"
    try:
        float(text)
    except ValueError:
        return f"{text!r} is not a duration (use seconds or e.g. 30s, 15m, 8h, 7d)"
    return f"{text!r} is not a finite number of seconds"


def _is_duration(text: str) -> bool:
    try:
        parse_duration(text)
    except ValueError:
        return False
    return True


def optional_seconds(text: str, column: str) -> float | None:
    return None if is_missing(text) else parse_seconds(text, column)


def parse_bool(text: str, column: str) -> bool | None:
    if is_missing(text):
        return None
    lowered = text.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise BadValue(column, f"{text!r} is not a boolean (use true or false)")


def optional_text(text: str) -> str | None:
    return None if is_missing(text) else text


# Names the scheduler's admission would refuse (domain.admission: every such job was
# imported, then rejected one by one in the simulation): bad rows here, by its rules.


def checked_id(text: str | None, column: str) -> str | None:
    """A workload id or user: at most MAX_NAME characters."""
    if text is not None and len(text) > MAX_NAME:
        raise BadValue(column, f"{len(text):,} characters; at most {MAX_NAME}")
    return text


def checked_name(text: str | None, column: str) -> str | None:
    """A workload's name: printable (no tab or newline) and at most MAX_NAME characters."""
    if text is not None and not printable(text):
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise BadValue(column, f"{shown!r} has control characters (tabs, newlines)")
    return checked_id(text, column)


def checked_tags(tags: list[str], column: str) -> list[str]:
    """At most MAX_TAGS printable tags of at most MAX_NAME characters each (what
    admission takes: a row it would refuse is a bad row here, not a rejection later),
    empty ones dropped and each kept once, in order: `debug;debug` counted the
    workload's wait twice in summary.json's `wait_s.by_tag.debug`."""
    tags = list(dict.fromkeys(tag for tag in tags if tag))
    if len(tags) > MAX_TAGS:
        raise BadValue(column, f"{len(tags):,} tags; at most {MAX_TAGS}")
    for tag in tags:
        if len(tag) > MAX_NAME:
            raise BadValue(column, f"a tag of {len(tag):,} characters; at most {MAX_NAME}")
        if not printable(tag):
            shown = tag if len(tag) <= 40 else tag[:37] + "..."
            raise BadValue(column, f"tag {shown!r} has control or invisible characters")
    return tags


# ------------------------------------------------------------------ files


def open_text(path: Path) -> io.TextIOBase:
    """The file as text: UTF-8 with or without BOM, any line ending, gzip if `.gz`.

    Bytes that are not UTF-8 come through as lone surrogates (`surrogateescape`), for
    `check_utf8` to refuse with the line they are on: a strict decoder raised 8 KiB
    ahead of the line being read (the error named the wrong line) and ended the read,
    so skip_bad could not skip the row."""
    try:
        if path.suffix == ".gz":
            return io.TextIOWrapper(
                gzip.open(path, "rb"),
                encoding="utf-8-sig",
                errors="surrogateescape",
                newline="",
            )
        return open(path, encoding="utf-8-sig", errors="surrogateescape", newline="")
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise TraceError(f"{path}: is a directory, not a trace file") from None
    except OSError as exc:
        raise TraceError(f"{path}: cannot open: {exc.strerror or exc}") from None


_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")  # what surrogateescape makes of a bad byte


def check_utf8(text: str, column: str | None = None) -> None:
    """Refuse text read from bytes that are not UTF-8 (see `open_text`), saying why
    (and in which column, when the text is one cell)."""
    if text.isascii() or not _ESCAPED_BYTE.search(text):
        return
    try:
        text.encode("utf-8", "surrogateescape").decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadValue(column, f"not UTF-8 text: {exc.reason}") from None
    # bytes that decode once joined (a line's cells, say) where their parts did not
    raise BadValue(column, "not UTF-8 text")


class Row:
    """One CSV record; `row["col"]` is the stripped cell, `""` if absent."""

    __slots__ = ("cells", "index")

    def __init__(self, index: dict[str, int]) -> None:
        self.index = index
        self.cells: list[str] = []

    def has(self, column: str) -> bool:
        """Whether the header names `column` (an absent one reads as empty cells)."""
        return column in self.index

    def __getitem__(self, column: str) -> str:
        i = self.index.get(column)
        if i is None or i >= len(self.cells):
            return ""
        return self.cells[i].strip()


def check_unique_id(sub: Submission | None, first_use: dict[str, int], line: int) -> None:
    """A workload id named on an earlier line is a bad row: a scenario refuses it."""
    named = sub.get("workload") if sub is not None else None
    if named is None:
        return
    if named in first_use:
        raise BadValue(
            "workload", f"workload id {named!r} is used again (first on line {first_use[named]})"
        )
    first_use[named] = line


RowParser = Callable[[Row], "Submission | None"]


def read_csv(
    path: Path,
    *,
    required: tuple[str, ...],
    parse_row: RowParser,
    skip_bad: bool,
) -> TraceResult:
    """Run `parse_row` over the data rows (None from it: the row asks for no GPU;
    NeverRan: the job never ran)."""
    result = TraceResult()
    with open_text(path) as handle:
        reader = csv.reader(handle)
        try:
            header = next(reader, None)
            while header is not None and not any(cell.strip() for cell in header):
                header = next(reader, None)
            if header is None:
                raise TraceError(
                    f"{path}: empty file; expected a header with {', '.join(required)}"
                )
            try:
                check_utf8("".join(header))
            except BadValue as exc:
                raise TraceError(f"{path}:{reader.line_num}: header: {exc.message}") from None
            index: dict[str, int] = {}
            for i, name in enumerate(header):
                index.setdefault(name.strip().lower(), i)
            missing = [name for name in required if name not in index]
            if missing:
                raise TraceError(
                    f"{path}:{reader.line_num}: missing required column"
                    f"{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                    f"(header has: {', '.join(h.strip() for h in header)})"
                )
            row = Row(index)
            columns = {i: name for name, i in index.items()}  # position -> column name
            first_use: dict[str, int] = {}  # workload id -> the line that named it
            before = reader.line_num
            for cells in reader:
                start, before = before + 1, reader.line_num
                if reader.line_num > start and any("\n" in c or "\r" in c for c in cells):
                    # no trace field holds a line break: a quote left open swallows every
                    # later line into one field (and the rows with it)
                    raise TraceError(
                        f"{path}:{start}: a quoted field runs on over "
                        f"{reader.line_num - start + 1:,} lines (a quote left open?)"
                    )
                if not cells or not any(cell.strip() for cell in cells):
                    continue
                result.rows += 1
                row.cells = cells
                try:
                    for i, cell in enumerate(cells):  # each cell alone: errors name it
                        if not cell.isascii():
                            check_utf8(cell, columns.get(i))
                    sub = parse_row(row)
                    check_unique_id(sub, first_use, reader.line_num)
                except NeverRan:
                    result.skipped_unscheduled += 1
                    continue
                except BadValue as exc:
                    where = f" column {exc.column}:" if exc.column else ""
                    message = f"{path}:{reader.line_num}:{where} {exc.message}"
                    if skip_bad:
                        skip_bad_row(result, message)
                        continue
                    raise TraceError(message, row_error=True) from None
                if sub is None:
                    result.skipped_no_gpu += 1
                    continue
                result.submissions.append(sub)
        except csv.Error as exc:
            raise TraceError(f"{path}:{reader.line_num}: unreadable CSV: {exc}") from None
        except (OSError, EOFError) as exc:  # e.g. a truncated .gz
            raise TraceError(f"{path}: cannot read: {exc}") from None
    return result


def first_line(path: Path) -> str | None:
    """The file's first non-blank line, stripped (None: none, or unreadable)."""
    try:
        for _, line in iter_lines(path):
            return line.strip()
    except (TraceError, UnicodeError, csv.Error):
        return None
    return None


def header_names(line: str) -> set[str]:
    """The column names of a CSV header line, as `read_csv` matches them."""
    try:
        cells = next(csv.reader([line]), [])
    except csv.Error:
        return set()
    return {cell.strip().lower() for cell in cells}


def finish(result: TraceResult, *, rebase: bool) -> TraceResult:
    """Sort by submit time (stable: ties keep row order); `rebase`: earliest submit = 0."""
    subs = result.submissions
    subs.sort(key=_time)
    if rebase and subs:
        start = subs[0]["time"]
        if start:
            for sub in subs:
                sub["time"] = sub["time"] - start
    result.unfinished = sum(1 for sub in subs if sub["runtime"] is None)
    return result


def _time(sub: Submission) -> float:
    return sub["time"]


def iter_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) for each non-blank line of a text file; a line that was not
    UTF-8 is for the caller's `check_utf8`."""
    with open_text(path) as handle:
        try:
            for number, line in enumerate(handle, start=1):
                if line.strip():
                    yield number, line
        except (OSError, EOFError) as exc:
            raise TraceError(f"{path}: cannot read: {exc}") from None
