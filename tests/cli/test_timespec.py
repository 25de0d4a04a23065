import time

import pytest

from corral.cli.errors import CliError
from corral.cli.timespec import midnight, parse_when

NOW = 1_700_000_000.0  # 2023-11-14T22:13:20Z


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1699999000", 1_699_999_000.0),
        ("1699999000.5", 1_699_999_000.5),
        ("now", NOW),
        ("today", 1_699_920_000.0),
        ("midnight", 1_699_920_000.0),
        ("now-2hours", NOW - 7200),
        ("now-30min", NOW - 1800),
        ("now - 1day", NOW - 86400),
        ("2h", NOW - 7200),
        ("3d", NOW - 3 * 86400),
        ("1w", NOW - 604800),
        ("45s", NOW - 45),
        ("10:30", 1_699_920_000.0 + 10.5 * 3600),
        ("10:30:15", 1_699_920_000.0 + 10.5 * 3600 + 15),
        ("2023-11-14", 1_699_920_000.0),
        ("2023-11-14T12:00", 1_699_963_200.0),
        ("2023-11-14T12:00:00", 1_699_963_200.0),
        ("2023-11-14 12:00:00", 1_699_963_200.0),
    ],
)
def test_parse_when(text, expected):
    assert parse_when(text, NOW) == expected


@pytest.mark.parametrize("text", ["", "yesterday", "25:00", "10:61", "2023-13-01", "now+", "-5"])
def test_parse_when_errors(text):
    with pytest.raises(CliError, match="invalid time"):
        parse_when(text, NOW)


def test_midnight():
    assert midnight(NOW) == 1_699_920_000.0
