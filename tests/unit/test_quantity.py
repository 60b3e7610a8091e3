"""Quantities as k8s.io/apimachinery reads them (nebari_colocate.quantity).

Expected values come from apimachinery's own tests (pkg/api/resource/quantity_test.go,
``TestQuantityParse``: ``decQuantity(unscaled, scale)`` is ``unscaled * 10**scale``), and the
properties below compare the parser with an independent exact reference (``fractions.Fraction``).
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from nebari_colocate import quantity
from nebari_colocate.quantity import INT64_MAX, SATURATED_NANOS, QuantityError


def dec(unscaled: int, scale: int) -> int:
    """apimachinery's decQuantity(unscaled, scale), in nano-units."""
    return unscaled * 10 ** (scale + 9) if scale >= -9 else unscaled // 10 ** (-9 - scale)


@pytest.mark.parametrize(
    "text, expect",
    [
        ("0", 0),
        ("0Ki", 0),
        ("0T", 0),
        ("1", dec(1, 0)),
        ("8Ki", dec(8 * 1024, 0)),
        ("3Ei", dec(3 * 2**60, 0)),
        ("5n", dec(5, -9)),
        ("4u", dec(4, -6)),
        ("50k", dec(5, 4)),
        ("40T", dec(4, 13)),
        ("1E", dec(1, 18)),
        ("1E-3", dec(1, -3)),
        ("1e15", dec(1, 15)),
        ("100.035k", dec(100035, 0)),
        ("0.0005k", dec(5, -1)),
        ("0.5e-2", dec(5, -3)),
        ("1.3E+6", dec(13, 5)),
        ("6.987654321G", dec(6987654321, 0)),
        ("1.01E", dec(101, 16)),
        # rounded up to a whole nano-unit, as the API stores them
        ("3.001n", dec(4, -9)),
        ("1.1E-9", dec(2, -9)),
        ("0.0000000001", dec(1, -9)),
        ("0.00000012354", dec(124, -9)),
        ("0.000000000001Ki", dec(2, -9)),
        ("100.035Ki", dec(10243584, -2)),
        ("0.025Ti", dec(274877906944, -1)),
        (".0001k", dec(100, -3)),
        ("1.", dec(1, 0)),
        ("1.G", dec(1, 9)),
        # apimachinery reads a missing number as zero
        (".", 0),
        ("-.", 0),
        ("Gi", 0),
        # BinarySI saturates at int64 in apimachinery itself
        ("9Ei", SATURATED_NANOS),
        ("9223372036854775807Ki", SATURATED_NANOS),
        # exact in apimachinery, but past int64 its Value() overflows (returns 0): saturated
        ("12E", SATURATED_NANOS),
    ],
)
def test_quantity_text_is_read_as_apimachinery_reads_it(text, expect):
    assert quantity.parse_nanos(text) == expect


@pytest.mark.parametrize(
    "value",
    [
        # apimachinery's TestQuantityParse invalid list
        "1.1.M",
        "1+1.0M",
        "0.1mi",
        "0.1am",
        "aoeu",
        ".5i",
        "1i",
        "-3.01i",
        "-3.01e-",
        " 1",
        "1 ",
        # and what else strconv / the suffix table refuse
        "",
        "1e",
        "1e3m",
        "1Ee3",
        "1k3",
        "1e99999999999999999999",  # not an int64 exponent
        "1e3.5",
        "0x10",
        "\u0661",  # an Arabic-Indic digit: str.isdigit() says yes, Go says no
        "1" * 10_000 + "x",
        float("inf"),
        float("nan"),
        True,
        None,
        [1],
        {"cpu": 1},
    ],
)
def test_what_apimachinery_refuses_raises_quantity_error(value):
    with pytest.raises(QuantityError, match="invalid quantity"):
        quantity.parse_nanos(value)


@pytest.mark.parametrize(
    "test_variation_id, value, expect",
    [
        ("huge-decimal-exponent", "1e999999", SATURATED_NANOS),
        ("huge-exponent-cpu", "1e999999999", SATURATED_NANOS),
        ("negative-huge", "-1e999999", -SATURATED_NANOS),
        ("tiny-rounds-up-to-a-nano", "1e-999999", 1),
        # Go: int32(strconv.ParseInt("4294967296")) is 0, so the API stores 1
        ("exponent-wraps-at-int32", "1e4294967296", dec(1, 0)),
        ("exponent-wraps-negative", "1e2147483648", 1),
        ("long-zeros-cancel-a-long-exponent", "0." + "0" * 50_000 + "1e50009", dec(1, 8)),
        ("long-integer-saturates", "1" + "0" * 50_000, SATURATED_NANOS),
        ("long-fraction-rounds-up", "1." + "0" * 50_000 + "1", dec(1000000001, -9)),
        ("python-int", 4, dec(4, 0)),
        ("python-huge-int", 10**400, SATURATED_NANOS),
        ("python-float", 0.5, dec(5, -1)),
        ("python-small-float", 1e-5, dec(1, -5)),
    ],
)
def test_hostile_quantities_are_bounded(test_variation_id, value, expect):
    assert quantity.parse_nanos(value) == expect


@pytest.mark.parametrize(
    "test_variation_id, resource, value, expect",
    [
        ("cpu-millicores", "cpu", "1.5", 1500),
        ("cpu-rounds-up", "cpu", "100u", 1),
        ("memory-bytes-round-up", "memory", "1500m", 2),
        ("memory-saturates", "memory", "1e999999", INT64_MAX),
        ("cpu-saturates-in-millicores", "cpu", "1e16", INT64_MAX),
        ("gpu-whole", "nvidia.com/gpu", "2", 2),
    ],
)
def test_scheduler_units_are_int64_like_the_schedulers(test_variation_id, resource, value, expect):
    assert quantity.scheduler_units(resource, value) == expect


@pytest.mark.parametrize(
    "test_variation_id, resource, value, expect",
    [
        ("fine", "memory", "1Gi", None),
        ("negative", "cpu", "-1", "negative"),
        ("negative-gpu", "nvidia.com/gpu", "-5", "negative"),
        ("beyond-int64", "memory", "1e999999", "beyond what Kubernetes can count"),
        ("cpu-beyond-int64-millicores", "cpu", "1e16", "beyond what Kubernetes can count"),
        ("fractional-gpu", "nvidia.com/gpu", "500m", "whole number"),
        ("fractional-pods", "pods", "1.5", "whole number"),
        ("fractional-hugepages-allowed", "hugepages-2Mi", "1.5Mi", None),
        ("prefixed-native-allowed", "kubernetes.io/something", "500m", None),
        ("not-a-quantity", "memory", "lots", "invalid quantity 'lots'"),
    ],
)
def test_problem_says_what_the_api_would_refuse(test_variation_id, resource, value, expect):
    found = quantity.problem(resource, value)
    if expect is None:
        assert found is None
    else:
        assert expect in found


# --------------------------------------------------------------------------------------------------
# properties

_DECIMAL = {"": 0, "n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}


def _reference_nanos(sign: str, whole: str, frac: str, suffix: str) -> int:
    """Exact value by Fraction arithmetic, rounded away from zero to nano, saturated."""
    number = Fraction(int(whole or "0")) + (Fraction(int(frac), 10 ** len(frac)) if frac else 0)
    if suffix in _DECIMAL:
        number *= Fraction(10) ** _DECIMAL[suffix]
    elif suffix in _BINARY:
        number *= 2 ** _BINARY[suffix]
    else:
        number *= Fraction(10) ** int(suffix[1:])
    nanos = min(math.ceil(number * 10**9), SATURATED_NANOS)
    return -nanos if sign == "-" else nanos


_suffixes = st.one_of(
    st.sampled_from(sorted(_DECIMAL) + sorted(_BINARY)),
    st.integers(-40, 40).map(lambda e: f"e{e}"),
    st.integers(-40, 40).map(lambda e: f"E{e:+d}"),
)


@settings(max_examples=500, deadline=None)
@given(
    sign=st.sampled_from(["", "+", "-"]),
    whole=st.text("0123456789", max_size=30),
    frac=st.none() | st.text("0123456789", max_size=30),
    suffix=_suffixes,
)
def test_well_formed_quantities_match_an_exact_reference(sign, whole, frac, suffix):
    text = sign + whole + ("." + frac if frac is not None else "") + suffix
    assume(text)  # apimachinery refuses only the empty string of these
    assert quantity.parse_nanos(text) == _reference_nanos(sign, whole, frac or "", suffix)


_quantity_alphabet = st.sampled_from(list("0123456789.+-eEinumkKMGTPx _"))


@settings(max_examples=1000, deadline=None)
@given(st.one_of(st.text(max_size=40), st.text(_quantity_alphabet, max_size=40)))
def test_any_text_is_a_quantity_or_a_quantity_error(text):
    try:
        nanos = quantity.parse_nanos(text)
    except QuantityError:
        return
    assert -SATURATED_NANOS <= nanos <= SATURATED_NANOS


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.integers(), st.floats(), st.booleans(), st.none(), st.binary(max_size=8)))
def test_any_scalar_is_a_quantity_or_a_quantity_error(value):
    try:
        nanos = quantity.parse_nanos(value)
    except QuantityError:
        return
    assert -SATURATED_NANOS <= nanos <= SATURATED_NANOS


@settings(max_examples=500, deadline=None)
@given(
    whole=st.text("0123456789", min_size=0, max_size=150),
    frac=st.text("0123456789", min_size=0, max_size=150),
    exponent=st.integers(-160, 40),
)
def test_long_digit_strings_round_like_the_exact_reference(whole, frac, exponent):
    # Beyond 80 significant digits the parser keeps the first ones and rounds up past the rest.
    text = f"{whole}.{frac}e{exponent}"
    assert quantity.parse_nanos(text) == _reference_nanos("", whole, frac, f"e{exponent}")
