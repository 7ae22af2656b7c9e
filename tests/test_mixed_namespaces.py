"""Arrays of two namespaces next to tracers in SciPy's and scikit-learn's array-API modes.

Those libraries refuse a call whose arrays come from two namespaces.  While a
tape records, NumPy arrays beside tracers belong to the tracers' namespace
(tapegrad.integrations.array_namespaces; tests/test_mixed_constants.py checks
their derivatives), so what is still refused is an array of a third library, or
NumPy arrays when that door is switched off.  tapegrad's error says that, names
the call and the user's line, and says what to write; it does not blame
compiled code.  SciPy reads SCIPY_ARRAY_API once, at import: the checks run in a
fresh process.
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
import json
import numpy as np
import scipy.special, scipy.stats
import tapegrad as tg

x = np.array([0.5, -1.0, 2.0])
w = np.array([1.0, 2.0, 3.0])
out = {}

def message(f, *args):
    try:
        f(*args)
    except Exception as error:  # noqa: BLE001
        return type(error).__name__, str(error)
    return None, ""

import array_api_strict as strict

ws = strict.asarray(w)  # a third library's array
out["logsumexp"] = message(tg.grad(lambda x: scipy.special.logsumexp(x, b=ws)), x)
out["pearsonr"] = message(tg.grad(lambda x: scipy.stats.pearsonr(x, ws)[0]), x)

def through_namespace(x):
    xp = x.__array_namespace__()
    return scipy.special.logsumexp(x, b=xp.asarray(w))

g = tg.grad(through_namespace)(x)
out["fixed"] = bool(np.allclose(g, w * np.exp(x) / np.sum(w * np.exp(x))))
g = tg.grad(lambda x: scipy.special.logsumexp(x, b=w))(x)  # a NumPy constant beside the tracer
out["numpy beside"] = bool(np.allclose(g, w * np.exp(x) / np.sum(w * np.exp(x))))

tg.intercept_scipy(False)  # the door off: NumPy arrays beside tracers are refused again
out["logsumexp off"] = message(tg.grad(lambda x: scipy.special.logsumexp(x, b=w)), x)
try:
    import sklearn
except ImportError:
    pass
else:
    from sklearn.decomposition import PCA
    sklearn.set_config(array_api_dispatch=True)
    X = np.random.default_rng(0).standard_normal((8, 3))
    pca = PCA(2).fit(X)
    out["sklearn"] = message(tg.grad(lambda X: np.sum(pca.transform(X) ** 2)), X)
tg.intercept_scipy(True)
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def probe():
    pytest.importorskip("array_api_strict")
    env = dict(os.environ, SCIPY_ARRAY_API="1")
    src = str(pathlib.Path(tapegrad.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([src, str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case, called", [("logsumexp", "scipy.special.logsumexp"), ("pearsonr", "scipy.stats.pearsonr")])
def test_scipy_mixed_namespaces_say_what_happened(probe, case, called):
    kind, text = probe[case]
    assert kind == "GradientDroppedError"
    assert text.startswith(called + " (called at <string>:")
    assert "received arrays of another array library together with tapegrad tracers" in text
    assert "Multiple namespaces for array inputs" in text
    assert "np.asarray(a)" in text
    assert "compiled code" not in text


def test_the_advised_rewrite_works(probe):
    assert probe["fixed"] is True
    assert probe["numpy beside"] is True


def test_numpy_beside_a_tracer_with_the_door_off_says_what_happened(probe):
    kind, text = probe["logsumexp off"]
    assert kind == "GradientDroppedError"
    assert text.startswith("scipy.special.logsumexp (called at <string>:")
    assert "received plain NumPy arrays together with tapegrad tracers" in text
    assert "xp = x.__array_namespace__(); c = xp.asarray(c)" in text
    assert "TAPEGRAD_INTERCEPT_SCIPY=0" in text
    assert "compiled code" not in text


def test_sklearn_fitted_on_numpy_with_the_door_off_says_what_happened(probe):
    if "sklearn" not in probe:
        pytest.skip("scikit-learn is not installed")
    kind, text = probe["sklearn"]
    assert kind == "GradientDroppedError"
    assert "transform (called at <string>:" in text
    assert "must use the same namespace" in text
    assert "move_estimator_to(estimator, x.__array_namespace__(), None)" in text
    assert "fit inside the differentiated function" in text
    assert "compiled code" not in text
