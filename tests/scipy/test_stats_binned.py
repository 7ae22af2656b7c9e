"""``scipy.stats.binned_statistic``/``_2d``/``_dd`` over traced values (rules/scipy_stats_binned.py)."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.testing import check_grads

st = pytest.importorskip("scipy.stats")

rng = np.random.default_rng(37)
X = rng.uniform(0, 1, 30)
Y = rng.uniform(0, 1, 30)
V = np.sin(5 * X) + rng.normal(size=30) * 0.1
STATISTICS = ["mean", "sum", "std", "min", "max", "median", "count", np.mean, lambda a: np.sum(a**2) if len(a) else 0.0]


@pytest.mark.parametrize("statistic", STATISTICS, ids=[str(s) if isinstance(s, str) else getattr(s, "__name__", "fn") for s in STATISTICS])
def test_every_statistic_first_and_second_order(statistic):
    cases = [
        (lambda v: st.binned_statistic(X, v, statistic, bins=4).statistic, V),
        (lambda v: st.binned_statistic_2d(X, Y, v, statistic, bins=3).statistic, V),
        (lambda v: st.binned_statistic(X, [v, v**2], statistic, bins=4).statistic, V),
        (lambda x: st.binned_statistic(x, V, statistic, bins=4).bin_edges, X),
    ]
    for f, a in cases:
        check_grads(f, (a,), order=2)
        seen = {}

        def g(a):
            seen["value"] = f(a)
            return seen["value"]

        tg.jacobian(g)(a)
        assert np.array_equal(tg.stop_gradient(seen["value"]), f(a), equal_nan=True)


def test_closed_form_of_the_mean_and_empty_bins():
    bins = np.array([0.0, 0.25, 0.5, 2.0, 3.0])  # the last bin is empty
    jac = tg.jacobian(lambda v: st.binned_statistic(X, v, "mean", bins=bins).statistic)(V)
    which = np.digitize(X, bins[1:-1])
    for b in range(3):
        members = which == b
        np.testing.assert_allclose(jac[b], members / members.sum(), rtol=1e-14)
    assert np.all(jac[3] == 0)
    assert np.isnan(st.binned_statistic(X, V, "mean", bins=bins).statistic[3])
