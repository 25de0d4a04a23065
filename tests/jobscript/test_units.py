import pytest

from corral.jobscript import DirectiveError, format_duration, format_duration_short, parse_mem_mib, parse_time_s


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("60", 3600),  # M
        ("5", 300),
        ("0:30", 30),  # M:S
        ("10:05", 605),
        ("1:02:03", 3723),  # H:M:S
        ("00:30:00", 1800),
        ("2-0", 2 * 86400),  # D-H
        ("1-12", 86400 + 12 * 3600),
        ("1-2:30", 86400 + 2 * 3600 + 30 * 60),  # D-H:M
        ("3-04:05:06", 3 * 86400 + 4 * 3600 + 5 * 60 + 6),  # D-H:M:S
        (" 15 ", 900),
        ("90", 5400),  # minutes over 59 are fine, as in Slurm
    ],
)
def test_parse_time_forms(text, seconds):
    assert parse_time_s(text) == seconds


@pytest.mark.parametrize("text", ["UNLIMITED", "infinite", "Unlimited", "-1", "0", "00:00:00", "0-0"])
def test_unlimited_time_is_refused_with_the_reason(text):
    with pytest.raises(DirectiveError, match="unlimited time limits are not supported.*finite"):
        parse_time_s(text)


@pytest.mark.parametrize("text", ["", "abc", "1:2:3:4", "1-2-3", "1.5", "-5", "1h", "1-", ":30", "1-2:3:4:5"])
def test_bad_time_names_value_and_forms(text):
    with pytest.raises(DirectiveError) as info:
        parse_time_s(text)
    assert repr(text) in str(info.value)
    assert "M:S" in info.value.reason


@pytest.mark.parametrize(
    ("text", "mib"),
    [
        ("1000", 1000),  # bare number: MiB
        ("0", 0),
        ("50M", 50),
        ("50MB", 50),
        ("8g", 8192),
        ("16GB", 16384),
        ("16Gb", 16384),
        ("2T", 2 * 1024 * 1024),
        ("1tb", 1024 * 1024),
        ("1024K", 1),
        ("2048kb", 2),
        ("1K", 1),  # kibibytes round up to a MiB, as Slurm does
        ("1025K", 2),
        (" 4G ", 4096),
    ],
)
def test_parse_mem_forms(text, mib):
    assert parse_mem_mib(text) == mib


@pytest.mark.parametrize("text", ["", "G", "1.5G", "-1G", "16GiB", "16X", "16 G", "1e3", "16BB"])
def test_bad_mem(text):
    with pytest.raises(DirectiveError, match="invalid memory size"):
        parse_mem_mib(text)


@pytest.mark.parametrize(
    ("seconds", "elapsed", "short"),
    [
        (0, "00:00:00", "0:00"),
        (303, "00:05:03", "5:03"),
        (3599.9, "00:59:59", "59:59"),
        (3600, "01:00:00", "1:00:00"),
        (93784, "1-02:03:04", "1-02:03:04"),
        (86400 + 7200, "1-02:00:00", "1-02:00:00"),
        (12 * 86400, "12-00:00:00", "12-00:00:00"),
        (-5, "00:00:00", "0:00"),
    ],
)
def test_format_duration(seconds, elapsed, short):
    assert format_duration(seconds) == elapsed
    assert format_duration_short(seconds) == short
