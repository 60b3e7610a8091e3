"""benchmarks/burst.py's percentile: the nearest rank, as the burst's figures are read."""

from __future__ import annotations

import math

import pytest

from benchmarks.burst import percentile

CASES = [
    # (name, samples, q, expected)
    ("the median of an odd count is its middle", [3.0, 1.0, 2.0], 0.5, 2.0),
    ("the median of an even count is the lower middle", [4.0, 1.0, 3.0, 2.0], 0.5, 2.0),
    (
        "p99 of 100 samples is the 99th, not the largest",
        [float(i) for i in range(1, 101)],
        0.99,
        99.0,
    ),
    ("p99 of 200 samples is the 198th", [float(i) for i in range(1, 201)], 0.99, 198.0),
    ("p99 of a few samples is the largest", [1.0, 5.0, 2.0], 0.99, 5.0),
    ("the whole range's top is the largest", [1.0, 2.0], 1.0, 2.0),
    ("one sample is every quantile", [7.0], 0.5, 7.0),
]


@pytest.mark.parametrize(("name", "samples", "q", "expected"), CASES, ids=[c[0] for c in CASES])
def test_percentile_is_the_nearest_rank(name, samples, q, expected):
    assert percentile(samples, q) == expected


def test_percentile_of_no_samples_is_not_a_number():
    assert math.isnan(percentile([], 0.99))
