"""One percentile method (issue 24 item 8): ``traffic.model.percentile`` is linear interpolation
between the two nearest ranks, numpy's default, checked against numpy itself; the tap's
``Latency`` reports it exactly, and past its cap keeps a bounded, deterministic uniform sample
that its report page names."""

from __future__ import annotations

import random

import numpy as np
import pytest

from queuewire.tap.report import latency_note
from queuewire.traffic.model import PERCENTILE_METHOD, Latency, percentile

QS = (0.0, 0.01, 0.25, 0.5, 0.9, 0.95, 0.99, 0.999, 1.0)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 10, 100, 1001])
def test_percentile_is_numpy_linear_interpolation(n):
    rng = random.Random(n)
    values = sorted(rng.randrange(0, 50_000_000) for _ in range(n))
    for q in QS:
        assert percentile(values, q) == pytest.approx(np.percentile(values, q * 100), rel=1e-12,
                                                      abs=1e-6), q


def test_percentile_interpolates_between_the_nearest_ranks():
    # n = 4: the median sits halfway between ranks 1 and 2, p99 at rank 2.97
    assert percentile([10, 20, 40, 80], 0.5) == 30.0
    assert percentile([10, 20, 40, 80], 0.99) == pytest.approx(40 + 0.97 * 40)
    assert percentile([10, 20, 40, 80], 1.0) == 80.0 and percentile([5], 0.99) == 5.0
    assert percentile(np.array([10, 20, 40, 80]), 0.25) == 17.5   # a numpy array works too


def test_percentile_refuses_no_values_and_a_rank_outside_0_1():
    with pytest.raises(ValueError, match="no values"):
        percentile([], 0.5)
    with pytest.raises(ValueError, match="within"):
        percentile([1, 2], 50)


def test_tap_latency_is_exact_below_its_cap():
    rng = random.Random(7)
    values = [rng.randrange(1_000, 90_000_000) for _ in range(5_000)]
    lat = Latency()
    for v in values:
        lat.add(v)
    s = lat.summary()
    assert s["count"] == s["sample"] == 5_000 and not lat.sampled
    assert s["p50_us"] == round(float(np.percentile(values, 50)) / 1000, 1)
    assert s["p99_us"] == round(float(np.percentile(values, 99)) / 1000, 1)
    assert s["max_us"] == round(max(values) / 1000, 1)
    assert lat.percentile(0.5) == pytest.approx(np.percentile(values, 50))


def test_tap_latency_past_its_cap_keeps_a_bounded_deterministic_uniform_sample():
    def fill() -> Latency:
        lat = Latency(max_samples=500)
        for v in range(1, 20_001):           # uniform 1..20000: the true median is 10000.5
            lat.add(v * 1000)
        return lat
    lat = fill()
    assert len(lat.samples) == 500 and lat.count == 20_000 and lat.sampled
    assert lat.summary() == fill().summary()             # seeded: same traffic, same figures
    assert lat.summary()["sample"] == 500 and lat.max == 20_000_000
    # a uniform sample of 500 of 20000: its median within a few percent of the true one
    assert abs(lat.percentile(0.5) - 10_000_500) < 0.15 * 10_000_500
    # not just the first 500 kept: the sample reaches the later values
    assert max(lat.samples) > 15_000_000
    summary = {"commands": {"PUSH": {"latency": lat.summary()},
                            "Ping": {"latency": Latency().summary()}}}
    note = latency_note(summary)
    assert note.startswith(PERCENTILE_METHOD)
    assert "PUSH (500 of 20,000 latencies)" in note and "Ping" not in note


def test_an_empty_latency_reports_no_figures():
    s = Latency().summary()
    assert s == {"count": 0, "mean_us": None, "p50_us": None, "p99_us": None, "max_us": None,
                 "sample": 0}
    with pytest.raises(ValueError):
        Latency(max_samples=0)
