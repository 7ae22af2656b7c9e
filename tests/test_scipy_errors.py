"""Where SciPy converts a tracer inside compiled code: a GradientDroppedError naming the SciPy
function and the user's line, never a bare TypeError / AttributeError / ValueError."""

import io

import numpy as np
import pytest
import scipy.interpolate as si
import scipy.linalg as sl
import scipy.ndimage as nd
import scipy.signal as ss
import scipy.spatial as sp
import scipy.spatial.distance as sd
from scipy.fft import fft

import tapegrad as tg
from tapegrad import check

x = np.linspace(0.1, 1.0, 6)

# SciPy functions that tapegrad has no rule for and that reach compiled code (most of
# SciPy's array functions now have rules reached through SciPy's door: tests/scipy/).
# One lambda per line: the line of the SciPy call is the lambda's first line.
CASES = [
    # np.asarray lets the tracer through; compiled code then refuses it (__array__)
    ("scipy.spatial.KDTree", lambda x: np.sum(sp.KDTree(x[:, None]).query(np.array([[0.5]]))[0])),
    ("scipy.ndimage.geometric_transform", lambda x: np.sum(nd.geometric_transform(x, lambda c: (c[0] * 0.5,)))),
    # a Cython memoryview: "a bytes-like object is required, not 'Tracer'"
    ("scipy.spatial.distance.directed_hausdorff", lambda x: sd.directed_hausdorff(x[:, None], x[:, None] + 1)[0]),
    # compiled code that converts the tracer itself (upfirdn, listed here before, now has a rule)
    ("scipy.signal.symiirorder1", lambda x: np.sum(ss.symiirorder1(x, 0.5, 0.1))),
    ("scipy.linalg.qz", lambda x: np.sum(sl.qz(np.outer(x, x) + np.eye(6), np.eye(6))[0])),
    ("scipy.interpolate.splrep", lambda x: np.sum(si.splrep(np.arange(6.0), x)[1])),
]


@pytest.mark.parametrize("name, f", CASES, ids=[c[0] for c in CASES])
def test_compiled_scipy_code_raises_gradient_dropped_error(name, f):
    with pytest.raises(tg.GradientDroppedError) as info:
        tg.grad(f)(x)
    message = str(info.value)
    assert message.startswith(f"{name} (called at {__file__}:{f.__code__.co_firstlineno})"), message
    assert "drop" in message and "tapegrad.stop_gradient" in message
    # The same error from every entry point: a Jacobian and a GradientTape block.
    with pytest.raises(tg.GradientDroppedError, match=name):
        tg.jacobian(f)(x)
    with pytest.raises(tg.GradientDroppedError, match=name):
        with tg.GradientTape() as tape:
            f(tape.watch(x))


def test_the_original_error_is_kept_as_the_cause():
    with pytest.raises(tg.GradientDroppedError) as info:
        tg.grad(CASES[2][1])(x)
    assert type(info.value.__cause__) is TypeError
    assert "bytes-like object is required, not 'Tracer'" in str(info.value.__cause__)


def test_fft_through_the_scipy_backend_reaches_its_rule():
    # scipy.fft's multimethods call its default backend's Python functions, which have rules.
    def f(x):
        return np.sum(np.abs(fft(x)) ** 2)

    assert np.allclose(tg.grad(f)(x), 2 * len(x) * x)  # Parseval: sum |fft(x)|^2 = n sum x^2


def test_memory_attributes_of_a_tracer():
    def f(t):
        assert not hasattr(t, "strides")  # still an AttributeError for duck typing
        return t.flags

    with pytest.raises(tg.GradientDroppedError, match=r"x\.flags at .*test_scipy_errors\.py:\d+") as info:
        tg.grad(f)(x)
    assert isinstance(info.value, AttributeError)
    assert tg.grad(lambda t: np.sum(t) if t.device == "cpu" else None)(x).tolist() == [1.0] * 6


def test_user_code_reaching_a_buffer_is_named_by_its_line():
    def f(t):
        return np.sum(np.frombuffer(memoryview(t)))

    with pytest.raises(tg.GradientDroppedError) as info:
        tg.grad(f)(x)
    assert f"compiled code at {__file__}:{f.__code__.co_firstlineno + 1}" in str(info.value)


def test_unrelated_errors_pass_unchanged():
    def f(t):
        raise TypeError("my own problem with Tracer objects")

    with pytest.raises(TypeError, match="^my own problem") as info:
        tg.grad(f)(x)
    assert not isinstance(info.value, tg.TapegradError)
    with pytest.raises(ValueError, match="could not be broadcast"):
        tg.grad(lambda t: np.sum(t + np.ones(4)))(x)


def transformed(v):
    return np.sum(nd.geometric_transform(v, lambda c: (c[0] * 0.5,)) ** 2)


def test_check_reports_it_the_same_way():
    report = check.check_function(transformed, [x])
    assert report.error.startswith("GradientDroppedError: scipy.ndimage.geometric_transform (called at ")
    assert f"{__file__}:{transformed.__code__.co_firstlineno + 1}" in report.error
    import argparse

    parser = argparse.ArgumentParser()
    check.add_arguments(parser)
    out, err = io.StringIO(), io.StringIO()
    code = check.run(parser.parse_args(["tests.test_scipy_errors:transformed", "--shape", "5"]), out, err)
    assert code == check.EXIT_UNSUPPORTED
    assert "GradientDroppedError: scipy.ndimage.geometric_transform" in out.getvalue()


def test_scipy_array_api_helpers_now_trace():
    # logsumexp used to refuse a tracer in SciPy's array-API helpers (``at(x, i).set``,
    # "Can't update read-only array"); with Tracer.__array_namespace__ it traces.
    from scipy.special import logsumexp

    np.testing.assert_allclose(tg.grad(logsumexp)(x), np.exp(x) / np.sum(np.exp(x)))
