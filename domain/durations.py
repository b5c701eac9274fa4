"""Durations as people write them (`30s`, `15m`, `8h`, `7d`, `1h30m`, Slurm's
`[D-]HH:MM:SS`) and as seconds."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
# Slurm's --time forms with a colon or a day: MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS
# (a bare number stays seconds, as everywhere in allot, not Slurm's minutes)
_SLURM = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?")


def parse_duration(value: str | float | int) -> float:
    """Seconds in `value`; raises ValueError naming the accepted forms."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        text = value.strip().lower().replace(" ", "")
        try:
            seconds = float(text)
        except ValueError:
            slurm = _slurm_seconds(text)
            parts = _PART.findall(text)
            if slurm is not None:
                seconds = slurm
            elif not parts or "".join(n + u for n, u in parts) != text:
                raise ValueError(
                    f"not a duration: {value!r} (use e.g. 30s, 15m, 8h, 7d, 1h30m, seconds, "
                    "or Slurm's [D-]HH:MM:SS)"
                ) from None
            else:
                seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"duration must be a finite number of seconds >= 0, got {value!r}")
    return seconds


def _slurm_seconds(text: str) -> float | None:
    """Seconds in Slurm's `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM` or `D-HH:MM:SS`; None for
    anything else (a bare number is not one of them here)."""
    m = _SLURM.fullmatch(text)
    if m is None:
        return None
    days, first, second, third = m.groups()
    if days is None and second is None:
        return None  # a bare number: seconds, handled by the caller
    if any(part is not None and int(part) >= 60 for part in (second, third)):
        return None  # minutes and seconds after a colon are below 60
    if days is None:  # MM:SS or HH:MM:SS
        if third is None:
            return int(first) * 60.0 + int(second)
        return int(first) * 3600.0 + int(second) * 60.0 + int(third)
    hms = int(first) * 3600.0 + int(second or 0) * 60.0 + int(third or 0)  # D-HH[:MM[:SS]]
    return int(days) * 86400.0 + hms


_CLOCK = re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2}))?")


def parse_clock(text: str, now: float) -> float | None:
    """`08:03` or `08:03:30` as sacct -S reads it: that UTC time of day, the last one at
    or before `now` (today's, else yesterday's); None for anything else. Checked before
    durations where a time is wanted: Slurm's `MM:SS` duration would take it otherwise."""
    m = _CLOCK.fullmatch(text.strip())
    if m is None:
        return None
    hours, minutes, seconds = int(m[1]), int(m[2]), int(m[3] or 0)
    if hours > 23 or minutes > 59 or seconds > 59 or not math.isfinite(now):
        return None
    midnight = now - now % 86400.0
    t = midnight + hours * 3600.0 + minutes * 60.0 + seconds
    return t if t <= now else t - 86400.0


def parse_utc(text: str) -> float:
    """Seconds since the epoch from an ISO 8601 date or time (`2026-01-01`,
    `2026-01-01 03:00`, `...T03:00:00Z`); without a zone it is UTC. ValueError if not."""
    text = text.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def format_duration(seconds: float) -> str:
    """Compact human form: 0s, 45s, 15m, 2h30m, 7d, 1d2h."""
    if not math.isfinite(seconds):
        return "inf"
    if abs(seconds) >= 1e11:  # thousands of years: the digits of a huge number say nothing
        return f"{seconds / 86400:.3g}d"
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    out = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, seconds = divmod(seconds, size)
        if count:
            out.append(f"{count}{unit}")
        if len(out) == 2:
            break
    return "".join(out)


_NOW_OFFSET = re.compile(
    r"now\s*([+-])\s*(\d+(?:\.\d+)?)\s*"
    r"(s|sec|secs|seconds?|m|min|mins|minutes?|h|hours?|d|days?|w|weeks?)?",
    re.IGNORECASE,
)
_UNIT_SECONDS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


# sacct's words for a time of day: seconds after the day's start
_DAY_WORDS = {"today": 0.0, "midnight": 0.0, "noon": 43200.0, "fika": 54000.0, "teatime": 57600.0}


# sacct's dates without a year's century: MMDD[YY], MM/DD[/YY], MM.DD[.YY], each with an
# optional time of day after '-' or 'T' (MM/DD-08:00)
_SLURM_DATE = re.compile(
    r"(?:(\d{2})(\d{2})(\d{2})?|(\d{1,2})([/.])(\d{1,2})(?:\5(\d{2}))?)"
    r"(?:[-T](\d{1,2}):(\d{2})(?::(\d{2}))?)?"
)


def parse_slurm_date(text: str, latest: float) -> float | None:
    """sacct's `MMDD`, `MMDDYY`, `MM/DD`, `MM/DD/YY` (or with dots), optionally with
    `-HH:MM[:SS]`, in UTC; None for anything else, or a month or day that cannot be.
    Without a year it is `latest`'s, or the one before when the month is later than
    `latest`'s, as sacct looks back from now; YY is 20YY."""
    m = _SLURM_DATE.fullmatch(text.strip())
    if m is None or not math.isfinite(latest):
        return None
    month, day, year = (m[1], m[2], m[3]) if m[1] else (m[4], m[6], m[7])
    hours, minutes, seconds = int(m[8] or 0), int(m[9] or 0), int(m[10] or 0)
    if hours > 23 or minutes > 59 or seconds > 59:
        return None
    last = datetime.fromtimestamp(latest, UTC)
    if year is not None:
        full_year = 2000 + int(year)
    else:
        full_year = last.year - (1 if int(month) > last.month else 0)
    try:
        moment = datetime(full_year, int(month), int(day), hours, minutes, seconds, tzinfo=UTC)
    except ValueError:  # month 13, 31 April
        return None
    return moment.timestamp()


def parse_moment(text: str, latest: float, end: bool = False) -> float:
    """A moment as `--since`/`--until` take it: `now` (= `latest`, the journal's latest
    time) or sacct's `now-1hour`/`now-2d`, a time of day (`07:13`, see `parse_clock`;
    with `end`, as `--until` reads it, that time on `latest`'s day, as sacct's -E does),
    a duration before `latest` (`7d`, `12h`) or an ISO date/time (UTC unless it says
    otherwise; `20261201` too, not 20 million seconds); sacct's `today`, `midnight`
    (both 00:00), `noon`, `fika`, `teatime` of `latest`'s day; sacct's dates `MMDD`,
    `MM/DD`, `MM/DD/YY` (see `parse_slurm_date`: `1201` is December 1st, not 1201
    seconds, where it is a date). ValueError with the forms."""
    text = text.strip()
    if text.lower() == "now":
        return latest
    if text.lower() in _DAY_WORDS:  # sacct's, of `latest`'s day (UTC), never rolled on
        return latest - latest % 86400.0 + _DAY_WORDS[text.lower()]
    offset = _NOW_OFFSET.fullmatch(text)
    if offset is not None:
        sign, count, unit = offset.groups()
        size = _UNIT_SECONDS[(unit or "s")[0].lower()]
        return latest + (1 if sign == "+" else -1) * float(count) * size
    clock = parse_clock(text, latest)
    if clock is not None:
        if end and clock < latest - latest % 86400.0:
            return clock + 86400.0  # today's, though later than the latest record
        return clock
    if _CLOCK.fullmatch(text):  # 25:00 is no time of day; read as MM:SS it surprised
        raise ValueError(
            f"not a time of day: {text!r}; hours run 00-23, minutes and seconds 00-59 "
            "(a time of day such as 07:13)"
        )
    slurm_date = parse_slurm_date(text, latest)
    if slurm_date is not None:
        return slurm_date
    if not (text.isdigit() and len(text) == 8):  # YYYYMMDD is a date (ISO basic form)
        try:
            return latest - parse_duration(text)
        except ValueError:
            pass
    try:
        return parse_utc(text)
    except ValueError:
        raise ValueError(
            f"not a time: {text!r}; use an ISO date such as 2026-01-01 or 2026-01-01T12:00, "
            "sacct's MM/DD[/YY] or MMDD, a time of day such as 07:13 (or today, midnight, noon), now-1hour, or a "
            "duration before the journal's latest record such as 7d or 12h"
        ) from None
