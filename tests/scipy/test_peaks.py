"""``scipy.signal.find_peaks``/``peak_prominences``/``peak_widths`` over a traced signal (rules/scipy_peaks.py)."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.testing import check_grads

signal = pytest.importorskip("scipy.signal")

T = np.linspace(0, 6, 60)
X = np.sin(2 * T) + 0.3 * np.sin(5.3 * T) + 0.05 * T  # three peaks, none on a plateau


def test_indices_are_scipys_and_the_values_traced():
    peaks = signal.find_peaks(X)[0]
    seen = {}

    def f(x):
        p, _ = signal.find_peaks(x)
        seen["peaks"] = p
        return np.sum(x[p] ** 2)

    grad = tg.grad(f)(X)
    assert np.array_equal(seen["peaks"], peaks) and type(seen["peaks"]) is np.ndarray
    expected = np.zeros_like(X)
    expected[peaks] = 2 * X[peaks]
    assert np.array_equal(grad, expected)


def test_every_value_property_first_and_second_order():
    keys = ("peak_heights", "prominences", "widths", "left_ips", "right_ips", "width_heights", "left_thresholds",
            "right_thresholds")

    def f(x):
        _, props = signal.find_peaks(x, height=-5, threshold=0, prominence=0.01, width=0.5, rel_height=0.6)
        return np.concatenate([props[k] for k in keys])

    check_grads(f, (X,), order=2)
    seen = {}

    def g(x):
        seen["props"] = signal.find_peaks(x, height=-5, threshold=0, prominence=0.01, width=0.5, rel_height=0.6)[1]
        return seen["props"]["widths"]

    tg.jacobian(g)(X)
    plain = signal.find_peaks(X, height=-5, threshold=0, prominence=0.01, width=0.5, rel_height=0.6)[1]
    for k in keys:
        assert np.array_equal(tg.stop_gradient(seen["props"][k]), plain[k]), k
    assert np.array_equal(seen["props"]["left_bases"], plain["left_bases"])


def test_peak_prominences_and_widths():
    def f(x):
        p = signal.find_peaks(x)[0]
        prom = signal.peak_prominences(x, p)
        wide = signal.peak_widths(x, p, rel_height=0.7, prominence_data=prom)
        return np.concatenate([prom[0], wide[0], wide[1], wide[3], signal.peak_widths(x, p)[2]])

    check_grads(f, (X,), order=2)
