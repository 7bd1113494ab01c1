"""Wire timestamps: exactly YYYY-MM-DDTHH:MM:SS.mmmZ out, RFC 3339 with a zone in."""

from datetime import datetime, timezone

import pytest

from runstate.actors import timestamps
from runstate.actors.timestamps import format_ms, parse_timestamp


def test_format_has_exactly_three_fraction_digits_and_an_uppercase_z():
    """The official client on Python 3.10 parses only 3 or 6 fraction digits."""
    assert format_ms(0) == "1970-01-01T00:00:00.000Z"
    assert format_ms(1_800_000_000_007) == "2027-01-15T08:00:00.007Z"


def test_a_year_before_1000_is_written_with_four_digits_and_reads_back():
    """The wire's year is always four digits (strftime wrote year 99 as "99"), and every stamp
    written reads back as the same instant; a time that in UTC falls outside years 1 to 9999 is
    refused as it is read."""
    for text in ("0001-01-01T00:00:00.000Z", "0099-06-30T12:34:56.789Z", "0999-12-31T23:59:59.999Z", "9999-12-31T23:59:59.999Z"):
        assert format_ms(parse_timestamp(text)) == text
    assert format_ms(parse_timestamp("1969-12-31T23:59:59.500Z")) == "1969-12-31T23:59:59.500Z"
    for text in ("0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-14:00"):
        with pytest.raises(ValueError, match="out of range"):
            parse_timestamp(text)


def test_formatting_is_the_same_from_the_caches_and_past_their_size():
    """Stamps repeat (cached whole) and come in runs of one second (cached by second); more
    distinct values than either cache holds still format exactly."""
    start = 1_800_000_000_000
    walls = [start + step * 7 for step in range(timestamps.STAMPS_CACHED_MAX + 500)]
    walls += [start + step * 1000 for step in range(timestamps.SECONDS_CACHED_MAX + 500)]
    for _ in range(2):
        for wall_ms in walls:
            moment = datetime.fromtimestamp(wall_ms / 1000, tz=timezone.utc)
            expected = moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{wall_ms % 1000:03d}Z"
            assert format_ms(wall_ms) == expected
    assert len(timestamps._STAMPS) <= timestamps.STAMPS_CACHED_MAX
    assert len(timestamps._SECONDS) <= timestamps.SECONDS_CACHED_MAX


@pytest.mark.parametrize(
    "text, expected",
    [
        ("2027-01-15T08:00:00Z", 1_800_000_000_000),
        ("2027-01-15T08:00:00.5Z", 1_800_000_000_500),
        ("2027-01-15T08:00:00.123456789Z", 1_800_000_000_123),
        ("2027-01-15T09:00:00+01:00", 1_800_000_000_000),
        ("2027-01-15 08:00:00.250z", 1_800_000_000_250),
    ],
)
def test_parse_accepts_a_zone_and_any_fraction(text, expected):
    """Deadlines from clients may have any fraction length and a Z or an offset."""
    assert parse_timestamp(text) == expected


@pytest.mark.parametrize("text", ["2027-01-15", "2027-01-15T08:00:00", "tomorrow", "", "1800000000", "2027-13-01T00:00:00Z"])
def test_parse_refuses_what_is_not_a_zoned_timestamp(text):
    """A timestamp without a zone is refused rather than guessed."""
    with pytest.raises(ValueError):
        parse_timestamp(text)
