"""Wire timestamps: exactly YYYY-MM-DDTHH:MM:SS.mmmZ out, RFC 3339 with a zone in."""

import pytest

from runstate.actors.timestamps import format_ms, parse_timestamp


def test_format_has_exactly_three_fraction_digits_and_an_uppercase_z():
    """The official client on Python 3.10 parses only 3 or 6 fraction digits."""
    assert format_ms(0) == "1970-01-01T00:00:00.000Z"
    assert format_ms(1_800_000_000_007) == "2027-01-15T08:00:00.007Z"


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
