"""Durations as people write them and as the scheduler prints them."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest

from domain.durations import format_duration, parse_duration, parse_moment

PARSE_CASES = [
    ("30s", 30.0),
    ("15m", 900.0),
    ("8h", 28_800.0),
    ("7d", 604_800.0),
    ("1w", 604_800.0),
    ("1h30m", 5_400.0),
    ("1d2h3m4s", 93_784.0),
    ("1.5h", 5_400.0),
    (" 2H ", 7_200.0),
    ("2 h 30 m", 9_000.0),
    ("90", 90.0),
    ("0", 0.0),
    ("0.25", 0.25),
    (45, 45.0),
    (1.5, 1.5),
    (0, 0.0),
    # Slurm's --time forms (a bare number stays seconds)
    ("1:30", 90.0),
    ("01:00:00", 3_600.0),
    ("2-00:00:00", 172_800.0),
    ("1-12", 129_600.0),
    ("1-2:30", 95_400.0),
]


@pytest.mark.parametrize(("text", "seconds"), PARSE_CASES, ids=[repr(t) for t, _ in PARSE_CASES])
def test_parse_duration(text: str | float, seconds: float) -> None:
    assert parse_duration(text) == seconds


BAD_CASES = [
    "",
    "abc",
    "5x",
    "h",
    "1h-5m",
    "-5",
    "-1m",
    -1,
    -0.5,
    "inf",
    "nan",
    math.inf,
    math.nan,
    True,
    "1h 2",
    "1:75",
    "1:2:3:4",
    "-1:00",
    "1-",
    ":30",
]


@pytest.mark.parametrize("text", BAD_CASES, ids=[repr(t) for t in BAD_CASES])
def test_parse_duration_rejects(text: str | float) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def test_parse_error_names_the_accepted_forms() -> None:
    with pytest.raises(ValueError, match=r"30s, 15m, 8h, 7d"):
        parse_duration("soon")


FORMAT_CASES = [
    (1e308, "1.16e+303d"),  # not 300 digits of days
    (0, "0s"),
    (45, "45s"),
    (59.6, "1m"),
    (60, "1m"),
    (900, "15m"),
    (5_400, "1h30m"),
    (9_000, "2h30m"),
    (28_800, "8h"),
    (604_800, "7d"),
    (93_600, "1d2h"),
    (93_784, "1d2h"),  # two units at most
    (3_601, "1h1s"),
    (math.inf, "inf"),
]


@pytest.mark.parametrize(("seconds", "text"), FORMAT_CASES, ids=[t for _, t in FORMAT_CASES])
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize("seconds", [1, 59, 60, 61, 3_600, 5_400, 86_400, 90_000, 604_800])
def test_format_parse_round_trip_for_two_unit_values(seconds: int) -> None:
    assert parse_duration(format_duration(seconds)) == seconds


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("2026-01-01", 1_767_225_600.0),
        ("2026-01-01 03:00", 1_767_236_400.0),
        ("2026-01-01T03:00:00Z", 1_767_236_400.0),
        ("2026-01-01T04:00:00+01:00", 1_767_236_400.0),
    ],
    ids=["date", "naive-is-utc", "zulu", "offset"],
)
def test_utc_times(text: str, seconds: float) -> None:
    from domain.durations import parse_utc

    assert parse_utc(text) == seconds


def test_a_utc_time_must_be_iso() -> None:
    from domain.durations import parse_utc

    with pytest.raises(ValueError):
        parse_utc("yesterday")


NOON = 1_767_268_800.0  # 2026-01-01 12:00:00 UTC


@pytest.mark.parametrize(
    ("text", "moment"),
    [
        pytest.param("now", NOON, id="now"),
        pytest.param("07:13", NOON - 4 * 3600 - 47 * 60, id="earlier-today"),
        pytest.param("12:00", NOON, id="this-moment"),
        pytest.param("13:00", NOON - 23 * 3600, id="later-clock-is-yesterday"),
        pytest.param("08:03:30", NOON - 3 * 3600 - 56 * 60 - 30, id="with-seconds"),
        pytest.param("2h", NOON - 7200, id="duration-before"),
        pytest.param("2026-01-01 03:00", NOON - 9 * 3600, id="iso"),
        pytest.param("20260101", NOON - 12 * 3600, id="iso-basic-date-not-seconds"),
        pytest.param("now-1hour", NOON - 3600, id="sacct-now-minus-hour"),
        pytest.param("now-2h", NOON - 7200, id="now-minus-h"),
        pytest.param("now-90", NOON - 90, id="now-minus-seconds"),
        pytest.param("now+1day", NOON + 86400, id="now-plus-day"),
        pytest.param("NOW-1week", NOON - 7 * 86400, id="now-minus-week"),
    ],
)
def test_a_moment_is_now_a_time_of_day_a_duration_before_or_a_date(
    text: str, moment: float
) -> None:
    """sacct -S takes HH:MM as today's; read first as Slurm's MM:SS duration, 08:03
    was 8m3s before the journal's end."""
    assert parse_moment(text, NOON) == moment


@pytest.mark.parametrize("text", ["25:00", "24:00", "23:59:60"])
def test_a_clock_past_the_day_is_refused_not_read_as_minutes(text: str) -> None:
    """sacct reads HH:MM as a time of day; 25:00 used to pass as Slurm's MM:SS (25
    minutes before the journal's end) while 23:59 was a time: refused now."""
    with pytest.raises(ValueError, match=f"not a time of day: '{text}'; hours run 00-23"):
        parse_moment(text, NOON)


@pytest.mark.parametrize("text", ["12:60", "soon", "1:2:3:4"])
def test_what_is_no_moment_names_the_forms(text: str) -> None:
    with pytest.raises(ValueError, match="a time of day such as 07:13"):
        parse_moment(text, NOON)


@pytest.mark.parametrize(
    ("text", "moment"),
    [
        pytest.param("23:59", NOON + 11 * 3600 + 59 * 60, id="later-today"),
        pytest.param("07:13", NOON - 4 * 3600 - 47 * 60, id="earlier-today"),
        pytest.param("12:00", NOON, id="this-moment"),
        pytest.param("2h", NOON - 7200, id="duration-before"),
    ],
)
def test_an_end_time_of_day_is_todays_as_sacct_E_reads_it(text: str, moment: float) -> None:
    """`acct -S 00:00 -E 23:59` read 23:59 as yesterday's: an end before the start."""
    assert parse_moment(text, NOON, end=True) == moment


@pytest.mark.parametrize(
    ("text", "moment"),
    [
        pytest.param("today", NOON - 12 * 3600, id="today"),
        pytest.param("Midnight", NOON - 12 * 3600, id="midnight"),
        pytest.param("noon", NOON, id="noon"),
        pytest.param("teatime", NOON + 4 * 3600, id="teatime"),
    ],
)
def test_sacct_words_for_a_time_of_day(text: str, moment: float) -> None:
    """`sacct -S today` (or midnight, noon) was "not a time"."""
    assert parse_moment(text, NOON + 60) == moment
    assert parse_moment(text, NOON + 60, end=True) == moment


@pytest.mark.parametrize(
    ("text", "iso"),
    [
        pytest.param("0101", "2026-01-01T00:00", id="mmdd"),
        pytest.param("01/01", "2026-01-01T00:00", id="mm/dd"),
        pytest.param("1/1", "2026-01-01T00:00", id="m/d"),
        pytest.param("01.01", "2026-01-01T00:00", id="mm.dd"),
        pytest.param("1201", "2025-12-01T00:00", id="a-later-month-is-last-years"),
        pytest.param("12/24/25", "2025-12-24T00:00", id="mm/dd/yy"),
        pytest.param("122425", "2025-12-24T00:00", id="mmddyy"),
        pytest.param("12/31-08:30", "2025-12-31T08:30", id="with-a-time"),
        pytest.param("0101T06:15:30", "2026-01-01T06:15:30", id="mmdd-t-time"),
    ],
)
def test_sacct_month_day_dates(text: str, iso: str) -> None:
    """`sacct -S 1201`, `-S 12/01`, `-E 12/24/25` were "not a time" (and `1201` was read
    as 1201 seconds). Without a year, as sacct looking back: the journal's year, the one
    before for a month after the journal's."""
    want = datetime.fromisoformat(iso).replace(tzinfo=UTC).timestamp()
    assert parse_moment(text, NOON) == want
    assert parse_moment(text, NOON, end=True) == want


@pytest.mark.parametrize(
    ("text", "seconds"), [("1300", 1300.0), ("0000", 0.0), ("0431", 431.0), ("90", 90.0)]
)
def test_numbers_that_are_no_month_and_day_stay_seconds(text: str, seconds: float) -> None:
    assert parse_moment(text, NOON) == NOON - seconds


@pytest.mark.parametrize("text", ["13/01", "02/30", "12/01-25:00", "1/1/2026"])
def test_an_impossible_month_day_date_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="MM/DD"):
        parse_moment(text, NOON)
