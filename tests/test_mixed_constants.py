"""NumPy constants beside tracers in array-API code: SciPy's array-API mode and scikit-learn's dispatch (issue 32).

SciPy with ``SCIPY_ARRAY_API=1`` and scikit-learn with ``array_api_dispatch=True``
ask their inputs for one namespace and refused a NumPy array passed beside a
tracer ("Multiple namespaces for array inputs").  While a tape records, such a
constant now belongs to the tracer's namespace
(:mod:`tapegrad.integrations.array_namespaces`), so the calls below are written
as users write them, with plain NumPy arrays and Python scalars held fixed, and
their derivatives are checked against central differences at first and second
order, in reverse and forward mode (:mod:`tests._wrapped_checks`).

Calls without a tracer keep the libraries' own results and errors, inside a
recording window too; an array of a third library beside a tracer is still
refused, by the library, and tapegrad's error says what happened.

SciPy reads ``SCIPY_ARRAY_API`` once, at import, and scikit-learn's dispatch
needs it: everything runs in ONE fresh process.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

import tapegrad

pytest.importorskip("scipy")
ROOT = pathlib.Path(__file__).resolve().parent.parent

_PROBE = r'''
import json, warnings
import numpy as np
import scipy.special as sp, scipy.stats as st, scipy.integrate as si
import tapegrad as tg
from tests._wrapped_checks import check

warnings.simplefilter("ignore")
rng = np.random.default_rng(3)
x0 = rng.uniform(0.5, 2.0, 6)
c = rng.uniform(0.5, 2.0, 6)
y = rng.uniform(0.5, 2.0, 6)
p = c / c.sum()
t = np.linspace(0.0, 1.0, 6) ** 1.5

SCIPY = {
    "special.xlogy(c, x)": lambda x: sp.xlogy(c, x),
    "special.xlogy(x, c)": lambda x: sp.xlogy(x, c),
    "special.xlogy(2.0, x)": lambda x: sp.xlogy(2.0, x),
    "special.xlogy(np.float64, x)": lambda x: sp.xlogy(np.float64(1.5), x),
    "special.logsumexp(x, b=c)": lambda x: sp.logsumexp(x, b=c),
    "special.rel_entr(x, c)": lambda x: sp.rel_entr(x, c),
    "stats.pearsonr(x, y)": lambda x: st.pearsonr(x, y).statistic,
    "stats.pearsonr(y, x)": lambda x: st.pearsonr(y, x).statistic,
    "stats.ttest_ind(x, y)": lambda x: st.ttest_ind(x, y).statistic,
    "stats.entropy(x, qk=p)": lambda x: st.entropy(x, qk=p),
    "stats.pmean(x, 2.0, weights=c)": lambda x: st.pmean(x, 2.0, weights=c),
    "stats.moment(x, 3, center=1.0)": lambda x: st.moment(x, 3, center=1.0),
    "integrate.trapezoid(x, t)": lambda x: si.trapezoid(x**2, t),
}

out = {}


def record(prefix, table, x):
    """Each call's outcome: "pass", or the error's type and message."""
    for name, fun in table.items():
        try:
            check(fun, x)
            out[prefix + name] = ["pass", ""]
        except Exception as error:  # noqa: BLE001
            out[prefix + name] = [type(error).__name__, str(error)[:600]]


record("scipy:", SCIPY, x0)

# ------------------------------------------------------------- no tracer: the libraries' own results and errors
from scipy._lib._array_api import array_namespace
try:  # SciPy >= 1.18 vendors it elsewhere
    import scipy._external.array_api_compat as compat
except ImportError:
    import scipy._lib.array_api_compat as compat
import array_api_strict as strict

def outcome(f):
    try:
        value = f()
    except Exception as error:  # noqa: BLE001
        return "raises " + type(error).__name__ + ": " + str(error)
    return value

def plain_calls():
    return [
        outcome(lambda: array_namespace(c, y).__name__),
        outcome(lambda: compat.array_namespace(c, 2.0).__name__),
        outcome(lambda: compat.array_namespace(c, strict.asarray(y)).__name__),
        outcome(lambda: compat.array_namespace().__name__),
        outcome(lambda: float(sp.xlogy(c, y).sum())),
        outcome(lambda: float(st.pearsonr(c, y).statistic)),
    ]

outside = plain_calls()
inside = []
def recorder(x):
    inside.extend(plain_calls())
    return np.sum(x**2)
tg.grad(recorder)(x0)
out["plain calls unchanged"] = [outside == inside, repr(outside), repr(inside)]

def third_library(x):
    return sp.logsumexp(x, b=strict.asarray(c))
try:
    tg.grad(third_library)(x0)
    out["third library"] = ["no error", ""]
except Exception as error:  # noqa: BLE001
    out["third library"] = [type(error).__name__, str(error)]

# ------------------------------------------------------------- scikit-learn with array_api_dispatch
try:
    import sklearn
except ImportError:
    sklearn = None
if sklearn is not None:
    import sklearn.metrics as skm
    import sklearn.metrics.pairwise as pw
    from sklearn.decomposition import PCA
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
    from sklearn.linear_model import Ridge
    from sklearn.preprocessing import StandardScaler

    sklearn.set_config(array_api_dispatch=True)
    X0 = rng.uniform(-1.0, 1.0, (4, 3))
    Y = rng.uniform(-1.0, 1.0, (5, 3))
    T = rng.uniform(-1.0, 1.0, (4, 3))
    Z = rng.uniform(-1.0, 1.0, (3, 3))
    F = rng.uniform(-1.0, 1.0, (8, 3))
    labels = np.array([0, 1, 2, 0, 1, 2, 0, 1, 2])
    F9 = rng.uniform(-1.0, 1.0, (9, 3)) + labels[:, None]
    w = np.linspace(0.5, 1.5, 4)
    SKLEARN = {
        "rbf_kernel(X, Y)": lambda X: pw.rbf_kernel(X, Y, gamma=0.5),
        "rbf_kernel(Y, X)": lambda X: pw.rbf_kernel(Y, X, gamma=0.5),
        "euclidean_distances(X, Y)": lambda X: pw.euclidean_distances(X, Y + 3.0),
        "cosine_similarity(X, Y)": lambda X: pw.cosine_similarity(X, Y),
        "polynomial_kernel(X, Y)": lambda X: pw.polynomial_kernel(X, Y, degree=2, coef0=1.0),
        "mean_squared_error(T, X)": lambda X: skm.mean_squared_error(T, X, multioutput="raw_values"),
        "r2_score(T, X, sample_weight=w)": lambda X: skm.r2_score(T, X, sample_weight=w, multioutput="raw_values"),
        "StandardScaler().fit(F).transform(X)": lambda X: StandardScaler().fit(F).transform(X),
        "StandardScaler().fit(X, sample_weight=w)": lambda X: StandardScaler().fit(X, sample_weight=w).transform(X),
        "PCA(2).fit(F).transform(X)": lambda X: PCA(2, svd_solver="full").fit(F).transform(X),
        "Ridge().fit(X, y).predict(Z)": lambda X: Ridge(alpha=0.5).fit(X, np.arange(4.0)).predict(Z),
        "Ridge().fit(F, y).predict(X)": lambda X: Ridge(alpha=0.5).fit(F, F[:, 0] ** 2).predict(X),
        "LDA().fit(F9, labels).predict_proba(X)": lambda X: LinearDiscriminantAnalysis().fit(F9, labels).predict_proba(X),
    }
    record("sklearn:", SKLEARN, X0)
print(json.dumps(out))
'''

SCIPY_CASES = [
    "special.xlogy(c, x)", "special.xlogy(x, c)", "special.xlogy(2.0, x)", "special.xlogy(np.float64, x)",
    "special.logsumexp(x, b=c)", "special.rel_entr(x, c)", "stats.pearsonr(x, y)", "stats.pearsonr(y, x)",
    "stats.ttest_ind(x, y)", "stats.entropy(x, qk=p)", "stats.pmean(x, 2.0, weights=c)",
    "stats.moment(x, 3, center=1.0)", "integrate.trapezoid(x, t)",
]
SKLEARN_CASES = [
    "rbf_kernel(X, Y)", "rbf_kernel(Y, X)", "euclidean_distances(X, Y)", "cosine_similarity(X, Y)",
    "polynomial_kernel(X, Y)", "mean_squared_error(T, X)", "r2_score(T, X, sample_weight=w)",
    "StandardScaler().fit(F).transform(X)", "StandardScaler().fit(X, sample_weight=w)", "PCA(2).fit(F).transform(X)",
    "Ridge().fit(X, y).predict(Z)", "Ridge().fit(F, y).predict(X)", "LDA().fit(F9, labels).predict_proba(X)",
]


@pytest.fixture(scope="module")
def probe():
    pytest.importorskip("array_api_strict")
    env = dict(os.environ, SCIPY_ARRAY_API="1", PYTHONWARNINGS="ignore")
    src = str(pathlib.Path(tapegrad.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([src, str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", SCIPY_CASES)
def test_scipy_array_api_mode_with_constants(probe, name):
    status, detail = probe["scipy:" + name]
    assert status == "pass", detail


@pytest.mark.parametrize("name", SKLEARN_CASES)
def test_sklearn_dispatch_with_constants(probe, name):
    pytest.importorskip("sklearn")
    status, detail = probe["sklearn:" + name]
    assert status == "pass", detail


def test_calls_without_a_tracer_stay_the_libraries_own(probe):
    same, outside, inside = probe["plain calls unchanged"]
    assert same, (outside, inside)
    assert "raises TypeError: Multiple namespaces" in outside  # array-api-compat's own refusal, unchanged


def test_a_third_library_beside_a_tracer_is_still_refused(probe):
    kind, text = probe["third library"]
    assert kind == "GradientDroppedError"
    assert text.startswith("scipy.special.logsumexp (called at <string>:")
    assert "Multiple namespaces for array inputs" in text
