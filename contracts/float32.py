"""Decimal and hexadecimal text to float32 with correct rounding, as onnxruntime's parsers do it.

ORT parses two session-option floats straight to float32: ``min_expert_weight`` with C ``strtof``
and ``tail_substitution_threshold`` with ``std::from_chars<float>``. Going through a double first
rounds twice: ``1.0000000596046448`` becomes the double exactly halfway between 1.0f and the next
float32, which then ties to even (1.0, accepted) where ``strtof`` rounds up (1.0000001, refused);
``3.40282356779733661637539395458142568447e38`` becomes the double halfway to 2^128 and then
overflows, where ``from_chars`` gives FLT_MAX. So the text is read as an exact rational and
rounded once to the nearest float32, ties to even, with subnormals, overflow to infinity and
underflow to zero.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

__all__ = ["FLT_MAX", "parse_from_chars", "parse_strtof", "round_to_float32"]

FLT_MAX = float.fromhex("0x1.fffffep127")
_C_SPACE = " \t\n\v\f\r"
_DEC = re.compile(r"([0-9]*)(?:\.([0-9]*))?(?:[eE]([+-]?[0-9]+))?\Z")
_HEX = re.compile(r"0[xX]([0-9a-fA-F]*)(?:\.([0-9a-fA-F]*))?(?:[pP]([+-]?[0-9]+))?\Z")
_SPECIAL = re.compile(r"(inf|infinity|nan(?:\([0-9A-Za-z_]*\))?)\Z", re.IGNORECASE)
# |value| >= 2^130 overflows and |value| < 2^-151 underflows to zero for any mantissa: exponents
# beyond these bounds are decided without building the (possibly huge) exact rational.
_TOO_BIG_LOG10, _TOO_SMALL_LOG10 = 40, -47
# The same for hex by bit length: a value in [2^(top-1), 2^top) rounds to zero when top <= -150
# (below 2^-150, half the smallest subnormal) and to infinity when top >= 129 (at least 2^128).
_HEX_ZERO_TOP, _HEX_INF_TOP = -149, 128


def round_to_float32(value: Fraction) -> float:
    """The float32 nearest to ``value`` (ties to even), as a Python float; +-inf on overflow."""
    if value == 0:
        return 0.0
    sign = -1.0 if value < 0 else 1.0
    q = abs(value)
    e = q.numerator.bit_length() - q.denominator.bit_length()
    if Fraction(2) ** e > q:
        e -= 1  # now 2^e <= q < 2^(e+1)
    step_exp = max(e, -126) - 23  # the spacing of float32 values around q: 2^step_exp
    scaled = q / (Fraction(2) ** step_exp)
    mantissa = math.floor(scaled)
    rest = scaled - mantissa
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and mantissa % 2 == 1):
        mantissa += 1
    result = Fraction(mantissa) * Fraction(2) ** step_exp
    if result > Fraction(FLT_MAX):
        return sign * math.inf
    return sign * float(result)


def _decimal(int_part: str, frac_part: str, exp_part: str) -> Fraction | None:
    digits = (int_part + frac_part).lstrip("0")
    exponent = int(exp_part or "0") - len(frac_part)
    if not digits:
        return Fraction(0)
    magnitude = len(digits) + exponent  # the value is in [10^(magnitude-1), 10^magnitude)
    if magnitude > _TOO_BIG_LOG10:
        return None  # overflow marker
    if magnitude < _TOO_SMALL_LOG10:
        return Fraction(0)
    return Fraction(int(digits)) * Fraction(10) ** exponent


def _rounded_decimal(int_part: str, frac_part: str, exp_part: str) -> float:
    exact = _decimal(int_part, frac_part, exp_part)
    return math.inf if exact is None else round_to_float32(exact)


def parse_strtof(text: str) -> float | None:
    """C ``strtof`` over the whole text (C whitespace around it allowed); None: not a number."""
    body = text.strip(_C_SPACE)
    sign = 1.0
    if body[:1] in "+-" and body:
        sign = -1.0 if body[0] == "-" else 1.0
        body = body[1:]
    if _SPECIAL.match(body):
        return math.nan if body[:1].lower() == "n" else sign * math.inf
    found = _HEX.match(body)
    if found is not None:
        int_part, frac_part, exp_part = found.group(1), found.group(2) or "", found.group(3) or "0"
        if not int_part and not frac_part:
            return None  # "0x" alone: strtof reads the "0" and stops at "x"
        mantissa = int(int_part + frac_part, 16)
        exponent = int(exp_part) - 4 * len(frac_part)
        top = mantissa.bit_length() + exponent  # the value is in [2^(top-1), 2^top)
        if mantissa == 0 or top < _HEX_ZERO_TOP:
            return sign * 0.0  # below 2^-150: under half the smallest subnormal
        if top > _HEX_INF_TOP:
            return sign * math.inf  # at least 2^128: past FLT_MAX and its rounding half-step
        return sign * round_to_float32(Fraction(mantissa) * Fraction(2) ** exponent)
    found = _DEC.match(body)
    if found is None or not (found.group(1) or found.group(2)):
        return None
    return sign * _rounded_decimal(found.group(1), found.group(2) or "", found.group(3) or "")


def parse_from_chars(text: str) -> float | None:
    """``std::from_chars<float>`` (general format) consuming the whole text.

    None when it does not parse, or parses out of range (overflow, or a nonzero value that rounds
    to zero).
    """
    body, sign = text, 1.0
    if body.startswith("-"):
        sign, body = -1.0, body[1:]
    if _SPECIAL.match(body):
        return math.nan if body[:1].lower() == "n" else sign * math.inf
    found = _DEC.match(body)
    if found is None or not (found.group(1) or found.group(2)):
        return None
    int_part, frac_part, exp_part = found.group(1), found.group(2) or "", found.group(3) or ""
    value = _rounded_decimal(int_part, frac_part, exp_part)
    if math.isinf(value):
        return None  # result_out_of_range
    if value == 0.0 and (int_part + frac_part).strip("0"):
        return None  # a nonzero number below the smallest subnormal: result_out_of_range
    return sign * value
