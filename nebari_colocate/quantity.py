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
_SUFFIX_LETTERS = re.compile(r"[eEinumkKMGTP]*")
#: more significant digits than this cannot change a value rounded to nano-units below saturation
_KEPT_DIGITS = 80
#: quantity texts longer than this are parsed every time instead of being cached
_CACHED_LENGTH = 64


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
    if not text:
        raise _invalid(text)
    end = len(text)
    pos = 0
    negative = text[0] == "-"
    if text[0] in "+-":
        pos = 1
    whole = _DIGITS.match(text, pos).group()
    pos += len(whole)
    fraction = ""
    if pos < end and text[pos] == ".":
        fraction = _DIGITS.match(text, pos + 1).group()
        pos += 1 + len(fraction)
    suffix = text[pos:]
    letters = _SUFFIX_LETTERS.match(text, pos).group()
    rest = text[pos + len(letters) :]
    if rest[:1] in ("+", "-"):
        rest = rest[1:]
    if (rest and not rest.isdigit()) or not rest.isascii():
        raise _invalid(text)

    binary = 0
    if suffix in _DECIMAL_EXPONENTS:
        exponent = _DECIMAL_EXPONENTS[suffix]
    elif suffix in _BINARY_EXPONENTS:
        exponent, binary = 0, _BINARY_EXPONENTS[suffix]
    elif len(suffix) > 1 and suffix[0] in "eE" and _is_int64(suffix[1:]):
        # Go: int32(strconv.ParseInt(...)): an exponent beyond int32 wraps around.
        exponent = (int(suffix[1:]) + 2**31) % 2**32 - 2**31
    else:
        raise _invalid(text)

    digits = (whole + fraction).lstrip("0")
    if not digits:
        return 0
    significant = digits.rstrip("0")
    # value = int(significant) * 10**scale * 2**binary
    scale = exponent - len(fraction) + (len(digits) - len(significant))
    magnitude = len(significant) + scale  # value >= 10**(magnitude - 1) * 2**binary
    if (magnitude - 1) + binary * 0.30103 > 20:  # beyond 10**20 units: past int64 for sure
        nanos = SATURATED_NANOS
    elif magnitude + binary * 0.30103 < -10:  # below a nano-unit: rounds up to one
        nanos = 1
    else:
        sticky = len(significant) > _KEPT_DIGITS
        if sticky:
            scale += len(significant) - _KEPT_DIGITS
            significant = significant[:_KEPT_DIGITS]
        mantissa = (int(significant) + sticky) << binary
        shift = scale + 9
        # rounded up (away from zero), as the API rounds to nano-units
        nanos = mantissa * 10**shift if shift >= 0 else -(-mantissa // 10**-shift)
        nanos = min(nanos, SATURATED_NANOS)
    return -nanos if negative else nanos


def _is_int64(text: str) -> bool:
    """Go's ``strconv.ParseInt(text, 10, 64)`` succeeds (no spaces, no underscores, in range)."""
    body = text[1:] if text[:1] in ("+", "-") else text
    if not body or not body.isascii() or not body.isdigit():
        return False
    body = body.lstrip("0")
    if len(body) > 19:
        return False
    return -(2**63) <= int(text) <= INT64_MAX


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
