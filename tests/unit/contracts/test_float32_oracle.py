"""contracts.float32.parse_strtof against the C library's own ``strtof`` (the function ORT calls).

Invariants guarded: for every text the C ``strtof`` consumes completely, ``parse_strtof`` returns
the same float32 bit pattern (signs of zeros and infinities, NaN as NaN); for every text it does not
consume completely (or not at all), ``parse_strtof`` says "not a number" (None). The texts are
seeded draws around the hard places: exact midpoints between neighbouring float32 values (written
out exactly, and one digit above/below), the subnormal range, the overflow boundary at FLT_MAX,
signs, exponents, hexadecimal floats, and the special words. ``round_to_float32`` of a negative
value is the negated rounding of its magnitude.
"""

from __future__ import annotations

import ctypes
import math
import random
import struct
from fractions import Fraction

import pytest

from contracts.float32 import FLT_MAX, parse_strtof

_LIBC = ctypes.CDLL(None)
_LIBC.strtof.restype = ctypes.c_float
_LIBC.strtof.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p)]


def _c_strtof(text: str) -> float | None:
    raw = text.encode("ascii")
    buf = ctypes.create_string_buffer(raw)
    end = ctypes.c_char_p()
    value = _LIBC.strtof(buf, ctypes.byref(end))
    consumed = ctypes.cast(end, ctypes.c_void_p).value - ctypes.addressof(buf)  # type: ignore[operator]
    return float(value) if consumed == len(raw) and raw else None


def _bits(value: float) -> int:
    return struct.unpack("<I", struct.pack("<f", value))[0]


def _exact_decimal(value: Fraction) -> str:
    """A dyadic rational written out exactly in decimal."""
    sign = "-" if value < 0 else ""
    value = abs(value)
    den = value.denominator
    twos = den.bit_length() - 1  # den is a power of two
    scaled = value.numerator * 5**twos  # value = scaled / 10**twos
    digits = str(scaled).rjust(twos + 1, "0")
    return f"{sign}{digits[:-twos] or '0'}.{digits[-twos:]}" if twos else f"{sign}{digits}"


def _float32_neighbours(rng: random.Random) -> tuple[float, float]:
    kind = rng.random()
    if kind < 0.15:
        bits = rng.randrange(1, 0x00800000)  # subnormal
    elif kind < 0.25:
        bits = rng.randrange(0x7F7F0000, 0x7F7FFFFF)  # next to FLT_MAX
    else:
        bits = rng.randrange(0x00800000, 0x7F7FFFFF)
    low = struct.unpack("<f", struct.pack("<I", bits))[0]
    high = struct.unpack("<f", struct.pack("<I", bits + 1))[0]
    return low, high


def _texts(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    out = ["inf", "-inf", "+INF", "Infinity", "-infinity", "nan", "-nan", "NaN", "nan(123)", "infx", "nanx", "-", "+",
           "", ".", "e5", "1e", "1e+", "0x", "0x1p", "0x1.8p1", "-0x1p-149", "0x1p-150", "0x1.000001p-149", "0x1p128",
           "-0x1.fffffep127", "-0", "-0.0", "0e999999", "1e-999999", "1e999999", "-1e39", "3.4028235e38",
           "3.40282356779733661637539395458142568448e38", "-3.40282356779733661637539395458142568447e38",
           "1.0000000596046448", "1.000000059604644775390625", "7e-46", "-7.1e-46", "1.4e-45", "00012.5000e-1",
           "1.5 ", " 1.5", "\t-2", "1,5", "1.5f", "0x1.0p0x",
           # hex exponents past the shortcut bounds with long mantissas / fractions (value = mantissa * 2^p)
           "0x1" + "0" * 100 + "p-401", "0x1" + "0" * 100 + "p-550", "0x1" + "0" * 100 + "p-549", "0x1p200",
           "0x1p201", "-0x1p-400", "0x1p-401", "0x0." + "0" * 50 + "1p230", "0x0." + "0" * 50 + "1p-100",
           "0x" + "f" * 40 + "p-100", "0x" + "f" * 40 + "p-310", "0x" + "f" * 40 + "p-309",
           "0x3p-151", "0x1p-150", "0x1.8p-150", "0x2p-151", "0x1.ffffffp127", "0x1.fffffefp127", "0xffffff8p100",
           "0xffffff7p100", "0x1p128", "0x0.8p129"]  # fmt: skip
    for _ in range(count):
        low, high = _float32_neighbours(rng)
        mid = (Fraction(low) + Fraction(high)) / 2
        if rng.random() < 0.5:
            mid = -mid
        exact = _exact_decimal(mid)
        out.append(exact)
        out.append(exact + rng.choice("123456789"))  # just above the midpoint
        trimmed = exact.rstrip("0")
        if "." in trimmed and len(trimmed.split(".")[1]) > 1:
            out.append(trimmed[:-1])  # just below (a digit cut)
        mantissa = f"{rng.randrange(1, 10**rng.randint(1, 12))}"
        out.append(f"{rng.choice(['', '-', '+'])}{mantissa[:1]}.{mantissa[1:]}e{rng.randint(-50, 40)}")
        out.append(f"{rng.choice(['', '-'])}0x{rng.randrange(1, 2**28):x}p{rng.randint(-180, 110)}")
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_parse_strtof_is_the_c_library_strtof(seed: int) -> None:
    mismatches = []
    for text in _texts(seed, 150):
        if text.endswith((" ", "\t", "\n")):
            continue  # ORT's own rule for trailing whitespace is tested by the session-option tests
        expected, got = _c_strtof(text), parse_strtof(text)
        if expected is None or got is None:
            same = expected is None and got is None
        elif math.isnan(expected):
            same = math.isnan(got)
        else:
            same = _bits(expected) == _bits(got)
        if not same:
            mismatches.append((text, expected, got))
    assert mismatches == []


def test_the_oracle_itself_distinguishes_the_midpoint_rounding() -> None:
    # Through a double, 1.0000000596046448 ties to 1.0; strtof (and parse_strtof) round it up.
    assert _c_strtof("1.0000000596046448") == parse_strtof("1.0000000596046448") == float.fromhex("0x1.000002p0")
    assert _c_strtof("-3.5e38") == parse_strtof("-3.5e38") == -math.inf
    assert _c_strtof(repr(FLT_MAX)) == FLT_MAX


@pytest.mark.parametrize("text", ["X1", "X-1", "Xinf", "X0x1p0", "+-1", "-+1"])
def test_only_one_plus_or_minus_is_a_sign(text: str) -> None:
    assert _c_strtof(text) is None
    assert parse_strtof(text) is None


@pytest.mark.parametrize(("text", "expected"), [
    ("nan", math.nan), ("NaN", math.nan), ("-nan", math.nan), ("nan(0-1)", None), ("nan(0x1_a)", math.nan),
    ("inf", math.inf), ("-Infinity", -math.inf), ("INF", math.inf), ("infinit", None),
    ("1.5", 1.5), ("-0.25e1", -2.5), ("1e39", None), ("1e-50", None), ("0e-50", 0.0), ("", None), (".", None),
])  # fmt: skip
def test_from_chars_reads_the_specials_and_refuses_what_a_float_cannot_hold(text: str, expected: float | None) -> None:
    """``std::from_chars<float>``: nan / inf / infinity in any case (nan with an optional
    ``(chars)`` payload of letters, digits and _), a sign on either; overflow and a nonzero value
    that rounds to zero do not parse."""
    from contracts.float32 import parse_from_chars

    got = parse_from_chars(text)
    if expected is None or not math.isnan(expected):
        assert got == expected
    else:
        assert got is not None and math.isnan(got)


@pytest.mark.parametrize(
    "value",
    [Fraction(3, 2), Fraction(1, 3), Fraction(2) ** -149, Fraction(FLT_MAX), Fraction(FLT_MAX) * 2],
)
def test_round_to_float32_rounds_a_negative_value_as_its_magnitude(value: Fraction) -> None:
    from contracts.float32 import round_to_float32

    # none of these is near a float32 midpoint, so the double's float32 is the nearest float32
    fits = value <= FLT_MAX
    nearest = struct.unpack("<f", struct.pack("<f", float(value)))[0] if fits else math.inf
    assert round_to_float32(value) == nearest
    assert round_to_float32(-value) == -nearest
