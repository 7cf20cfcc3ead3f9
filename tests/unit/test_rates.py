"""Link rates: the spellings people use in, tc's spelling out."""

import pytest

from clockfabric.topology import RateError, format_rate, parse_rate


@pytest.mark.parametrize(
    ("text", "bps"),
    [
        ("1gbit", 10**9),
        ("1Gbit", 10**9),
        ("200Mbit/s", 200 * 10**6),
        ("10Gbps", 10 * 10**9),  # networks' "bps" is bits, not bytes
        ("100m", 100 * 10**6),
        ("1500kbit", 1_500_000),
        ("2tbit", 2 * 10**12),
        ("64bit", 64),
        ("1.5gbit", 1_500_000_000),
        (" 5 mbit ", 5 * 10**6),
        ("300", 300),
        (10**9, 10**9),
        (1e9, 10**9),
        (1, 1),
    ],
)
def test_parse_rate_accepts_common_spellings(text, bps):
    got = parse_rate(text)
    assert got == bps
    assert type(got) is int


@pytest.mark.parametrize("text", ["fast", "-1mbit", "1 gigabit", "1gbyte", "", "1.2.3gbit", "gbit"])
def test_parse_rate_rejects_unparseable_text_and_says_how_to_write_it(text):
    with pytest.raises(RateError) as info:
        parse_rate(text)
    msg = str(info.value)
    assert repr(text) in msg  # names the offending value
    assert "1gbit" in msg and "200mbit" in msg  # shows how to write a rate


@pytest.mark.parametrize("value", ["0", "0gbit", 0, -5, 0.4])
def test_parse_rate_rejects_zero_and_below(value):
    with pytest.raises(RateError, match="above zero"):
        parse_rate(value)


@pytest.mark.parametrize("value", [True, False])
def test_parse_rate_rejects_booleans(value):
    # bool is an int subclass: True must not silently become 1 bit/s
    with pytest.raises(RateError) as info:
        parse_rate(value)
    assert "1gbit" in str(info.value)


def test_rate_error_is_a_value_error():
    assert issubclass(RateError, ValueError)


@pytest.mark.parametrize(
    ("bps", "text"),
    [
        (10**12, "1tbit"),
        (10**9, "1gbit"),
        (40 * 10**9, "40gbit"),
        (1_500_000_000, "1500mbit"),
        (200 * 10**6, "200mbit"),
        (1_500_000, "1500kbit"),
        (1000, "1kbit"),
        (1234, "1234bit"),
        (1, "1bit"),
    ],
)
def test_format_rate_uses_shortest_exact_spelling(bps, text):
    assert format_rate(bps) == text


@pytest.mark.parametrize("bps", [1, 999, 1000, 1001, 123_456_789, 10**9, 25 * 10**9, 3 * 10**12 + 7, 10**15])
def test_format_then_parse_round_trips(bps):
    assert parse_rate(format_rate(bps)) == bps


@pytest.mark.parametrize("text", ["1gbit", "200Mbit/s", "10Gbps", "100m", "1.5gbit", "64bit"])
def test_parse_then_format_then_parse_is_stable(text):
    bps = parse_rate(text)
    assert parse_rate(format_rate(bps)) == bps


@pytest.mark.parametrize(("text", "bps"), [("1.001kbit", 1001), ("0.0157gbit", 15_700_000)])
def test_parse_rate_decimal_values_are_exact(text, bps):
    assert parse_rate(text) == bps
