"""Kubernetes resource quantities, read as k8s.io/apimachinery's ``resource.Quantity``.  (pure)

The grammar is apimachinery's ``parseQuantityString``: an optional sign, digits with at most one
``.``, then one suffix (``n u m k M G T P E``, ``Ki Mi Gi Ti Pi Ei``, or an exponent ``e``/``E``
followed by an int64, which Go then truncates to int32).  Like the API, a value is rounded up
(away from zero) to a whole nano-unit when it is parsed.

Bounded by construction: parsing is linear in the length of the text and never builds a number
wider than a few dozen digits, whatever the exponent (``1e999999`` is as cheap as ``1``).  The
scheduler compares int64s (``MilliValue()`` for cpu, ``Value()`` for everything else); a quantity
beyond int64 cannot be scheduled, so it *saturates* at int64's maximum in those units: it fits no
node, and a node that claims it has that much of something is full of it.  :func:`problem` says
when a value is one the API would refuse in a pod or a node (negative, not an integer where one is
needed, beyond int64): readers of user-supplied files reject those (see ``docs/cli.md``).
"""

from __future__ import annotations

import math
import re
import sys
from decimal import Decimal
from functools import lru_cache

INT64_MAX = 2**63 - 1
NANO = 10**9
#: int64's maximum in whole units, in nano-units: the ceiling every quantity saturates at
SATURATED_NANOS = INT64_MAX * NANO
#: int64's maximum milli-cpu, in nano-units (the scheduler counts cpu in millicores)
SATURATED_CPU_NANOS = INT64_MAX * 10**6

_DECIMAL_EXPONENTS = {"": 0, "n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15}
_DECIMAL_EXPONENTS["E"] = 18  # the exa suffix, not an exponent: "2E" is 2 * 10**18
_BINARY_EXPONENTS = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}

# One greedy step each, applied in sequence with no backtracking: a single regular expression for
# the whole grammar backtracks quadratically on a long run of digits that ends badly.
_DIGITS = re.compile(r"[0-9]*")
_ZEROS = re.compile(r"0*")
_SUFFIX_LETTERS = re.compile(r"[eEinumkKMGTP]*")
#: more significant digits than this cannot change a value rounded to nano-units below saturation
_KEPT_DIGITS = 80
#: quantity texts longer than this are parsed every time instead of being cached
_CACHED_LENGTH = 64


def _end(pattern: re.Pattern[str], text: str, pos: int, endpos: int = sys.maxsize) -> int:
    """Where the run of ``pattern`` that starts at ``pos`` ends (``pos`` for an empty run: every
    pattern above matches the empty string)."""
    match = pattern.match(text, pos, endpos)
    return match.end() if match else pos


class QuantityError(ValueError):
    """Not a quantity; the message quotes (the start of) the value."""


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _invalid(value: object) -> QuantityError:
    return QuantityError(f"invalid quantity {_shown(value)}")


def parse_nanos(value: object) -> int:
    """The value in nano-units (``"500m"`` -> 500_000_000), saturated at +/- ``SATURATED_NANOS``.

    Accepts a string, an int or a finite float (YAML and JSON give numbers for ``cpu: 1``).
    Raises :class:`QuantityError` naming the value when it is not a quantity.
    """
    if isinstance(value, bool):
        raise _invalid(value)
    if isinstance(value, int):
        if value.bit_length() > 64:  # past int64 (and no multiplication of a huge number)
            return -SATURATED_NANOS if value < 0 else SATURATED_NANOS
        return max(-SATURATED_NANOS, min(SATURATED_NANOS, value * NANO))
    if isinstance(value, (float, Decimal)):
        if not value.is_finite() if isinstance(value, Decimal) else not math.isfinite(value):
            raise _invalid(value)
        # repr(1e-05) is "1e-05", str(Decimal("1E+999")) is "1E+999": quantity text already.
        return _parse(repr(value) if isinstance(value, float) else str(value))
    if isinstance(value, str):
        return _parse_text(value) if len(value) <= _CACHED_LENGTH else _parse(value)
    raise _invalid(value)


@lru_cache(maxsize=4096)
def _parse_text(text: str) -> int:
    # Clusters repeat a handful of quantity strings ("100m", "256Mi"): parse each once.
    return _parse(text)


def _parse(text: str) -> int:
    # Every step is one C-speed scan (a regular expression match, a count or a slice of at most
    # _KEPT_DIGITS characters): str.lstrip("0") or str.isdigit() would cost several times more on
    # a megabyte of digits.
    if not text:
        raise _invalid(text)
    end = len(text)
    pos = 1 if text[0] in "+-" else 0
    negative = text[0] == "-"
    whole_end = _end(_DIGITS, text, pos)
    fraction_start = fraction_end = whole_end
    if whole_end < end and text[whole_end] == ".":
        fraction_start = whole_end + 1
        fraction_end = _end(_DIGITS, text, fraction_start)
    suffix_start = fraction_end
    letters_end = digits_start = _end(_SUFFIX_LETTERS, text, suffix_start)
    if digits_start < end and text[digits_start] in "+-":
        digits_start += 1
    if _end(_DIGITS, text, digits_start) != end:
        raise _invalid(text)

    suffix = text[suffix_start:] if end - suffix_start <= 24 else None
    binary = 0
    if suffix in _DECIMAL_EXPONENTS:
        exponent = _DECIMAL_EXPONENTS[suffix]
    elif suffix in _BINARY_EXPONENTS:
        exponent, binary = 0, _BINARY_EXPONENTS[suffix]
    elif letters_end == suffix_start + 1 and text[suffix_start] in "eE":
        parsed = _int64_exponent(text, suffix_start + 1)
        if parsed is None:
            raise _invalid(text)
        exponent = parsed
    else:
        raise _invalid(text)

    # The first significant digit, in the integer part or else in the fraction.
    first = _end(_ZEROS, text, pos, whole_end)
    if first == whole_end:
        first = _end(_ZEROS, text, fraction_start, fraction_end)
        if first == fraction_end:
            return 0
    # value = int(digits from `first`, the point removed) * 10**scale * 2**binary
    fraction_length = fraction_end - fraction_start
    count = (
        (whole_end - first if first < whole_end else 0) + fraction_end - max(first, fraction_start)
    )
    scale = exponent - fraction_length
    magnitude = count + scale  # 10**(magnitude - 1) <= value / 2**binary < 10**magnitude
    if (magnitude - 1) + binary * 0.30103 > 20:  # beyond 10**20 units: past int64 for sure
        nanos = SATURATED_NANOS
    elif magnitude + binary * 0.30103 < -10:  # below a nano-unit: rounds up to one
        nanos = 1
    else:
        head = _digits(text, first, whole_end, fraction_start, fraction_end, _KEPT_DIGITS + 1)
        sticky = False
        if count > _KEPT_DIGITS:
            # More digits than can matter: keep the first ones, remember whether any dropped
            # digit is not zero, and round up past them.
            dropped_from = first + _KEPT_DIGITS + (first < whole_end <= first + _KEPT_DIGITS)
            sticky = _any_nonzero(text, dropped_from, whole_end, fraction_start, fraction_end)
            scale += count - _KEPT_DIGITS
            head = head[:_KEPT_DIGITS]
        mantissa = (int(head) + sticky) << binary
        shift = scale + 9
        # rounded up (away from zero), as the API rounds to nano-units
        nanos = mantissa * 10**shift if shift >= 0 else -(-mantissa // 10**-shift)
        nanos = min(nanos, SATURATED_NANOS)
    return -nanos if negative else nanos


def _digits(text: str, first: int, whole_end: int, frac_start: int, frac_end: int, n: int) -> str:
    """Up to ``n`` digits from ``first``, skipping the decimal point."""
    if first >= whole_end:
        return text[first : min(frac_end, first + n)]
    head = text[first : min(whole_end, first + n)]
    return head + text[frac_start : min(frac_end, frac_start + n - len(head))]


def _any_nonzero(text: str, start: int, whole_end: int, frac_start: int, frac_end: int) -> bool:
    """Whether a digit other than 0 is at or after ``start`` (a position in the text)."""
    spans = [(start, whole_end), (frac_start, frac_end)] if start < whole_end else []
    if start >= whole_end:
        spans = [(max(start, frac_start), frac_end)]
    return any(_end(_ZEROS, text, a, b) < b for a, b in spans if a < b)


def _int64_exponent(text: str, start: int) -> int | None:
    """Go's ``int32(strconv.ParseInt(text[start:], 10, 64))``, or None where ParseInt fails: an
    exponent beyond int32 wraps around, one beyond int64 is no quantity."""
    sign = text[start : start + 1]
    body = start + 1 if sign in ("+", "-") else start
    if body >= len(text):
        return None
    significant = _end(_ZEROS, text, body)
    if len(text) - significant > 19:
        return None
    value = int(text[significant:] or "0")
    if sign == "-":
        value = -value
    if not -(2**63) <= value <= INT64_MAX:
        return None
    return (value + 2**31) % 2**32 - 2**31


def to_decimal(nanos: int) -> Decimal:
    """Nano-units as an exact Decimal of whole units (``500_000_000`` -> ``0.5``)."""
    return Decimal(f"{nanos}e-9")  # the string constructor is exact (no context rounding)


def parse(value: object) -> Decimal:
    """The exact value of a quantity in whole units (``"1.5Gi"`` -> ``1610612736``)."""
    return to_decimal(parse_nanos(value))


def units(resource: str, nanos: int) -> int:
    """The integer the scheduler compares: millicores for cpu, else whole units rounded up;
    at most int64's maximum (the scheduler's counters are int64)."""
    value = -(-nanos // (10**6 if resource == "cpu" else NANO))
    return max(-INT64_MAX - 1, min(INT64_MAX, value))


def scheduler_units(resource: str, value: object) -> int:
    """:func:`units` of a quantity as written (``("cpu", "1.5")`` -> ``1500``)."""
    return units(resource, parse_nanos(value))


def is_integer_resource(resource: str) -> bool:
    """Resources the API takes whole numbers of only (apimachinery's ``IsIntegerResourceName``):
    ``pods`` and extended resources (a domain-prefixed name such as ``nvidia.com/gpu``, outside
    ``kubernetes.io/``).  cpu, memory, ephemeral-storage and hugepages take fractions."""
    if resource == "pods":
        return True
    return (
        "/" in resource
        and "kubernetes.io/" not in resource
        and not resource.startswith("requests.")
    )


def saturates(resource: str, value: object) -> bool:
    """A valid, non-negative quantity beyond what the scheduler counts (int64 millicores for
    cpu, else int64 units): kube-apiserver accepts and stores it (``cpu: 10e399``), and the
    scheduler counts it saturated, as an unbounded amount."""
    try:
        nanos = parse_nanos(value)
    except QuantityError:
        return False
    return nanos >= (SATURATED_CPU_NANOS if resource == "cpu" else SATURATED_NANOS)


def problem(resource: str, value: object) -> str | None:
    """Why the API would refuse ``value`` for ``resource`` in a pod's or node's resources, or None.

    Checks what ``ValidateResourceQuantityValue`` checks (a valid quantity, not negative, whole
    for integer resources) and that it is within what the scheduler can count (int64).
    """
    try:
        nanos = parse_nanos(value)
    except QuantityError as exc:
        return str(exc)
    if nanos < 0:
        return f"quantity {_shown(value)} is negative"
    limit = SATURATED_CPU_NANOS if resource == "cpu" else SATURATED_NANOS
    if nanos >= limit:
        what = "millicores" if resource == "cpu" else "units"
        return f"quantity {_shown(value)} is beyond what Kubernetes can count (2^63-1 {what})"
    if is_integer_resource(resource) and nanos % NANO:
        return f"quantity {_shown(value)} of {resource} must be a whole number"
    return None
