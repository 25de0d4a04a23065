
import pytest

from corral.cli.errors import CliError
from corral.cli.timespec import midnight, parse_when, parse_when_ahead

NOW = 1_700_000_000.0  # 2023-11-14T22:13:20Z


pytestmark = pytest.mark.usefixtures("utc")  # local times shown in UTC (tests/conftest.py)


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


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("now", NOW),
        ("NOW", NOW),
        ("now+90", NOW + 90),  # seconds by default, as scontrol
        ("now+1h", NOW + 3600),
        ("now + 30min", NOW + 1800),
        ("now+2days", NOW + 2 * 86400),
        ("now+1w", NOW + 604800),
        ("2026-11-22T10:00", 1_795_341_600.0),  # local time (UTC here)
        ("2026-11-22T10:00:30", 1_795_341_630.0),
        ("2026-11-22T10:00+01:00", 1_795_338_000.0),  # an explicit offset is honoured
        ("1795341600", 1_795_341_600.0),
    ],
)
def test_parse_when_ahead(text, expected):
    assert parse_when_ahead(text, NOW) == expected


@pytest.mark.parametrize("text", ["", "tomorrow", "now+", "now+1x", "now-1h", "2h", "10:30", "2026-13-01T00:00"])
def test_parse_when_ahead_errors(text):
    with pytest.raises(CliError) as info:
        parse_when_ahead(text, NOW)
    assert str(info.value).startswith(f"invalid time {text!r}: expected now, now+N")
