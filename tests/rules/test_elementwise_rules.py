"""Rules marked element-wise, and the cotangents the sweep therefore does not check.

A rule with ``Rule.elementwise`` promises that, for an operand with the output's
shape and dtype, its VJP returns exactly the cotangent's shape and dtype.  The
recorder marks such float64 operands (``tape.FITTED``) and the sweep trusts the
mark, so every marked rule is checked here against that promise, with and
without a batch of cotangents, and the marked sweeps against unmarked ones.
"""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.registry import RULE_TABLE
from tapegrad.tape import FITTED, PARENTS, Tape

ELEMENTWISE = sorted((rule for rule in RULE_TABLE if rule.elementwise), key=lambda rule: rule.name)


def test_only_rules_with_a_vjp_for_every_operand_are_marked():
    assert all(rule.simple for rule in ELEMENTWISE)
    assert not any(rule.elementwise for rule in RULE_TABLE if rule.key in (np.ldexp, np.heaviside))


def test_the_core_arithmetic_and_elementary_functions_are_marked():
    names = {rule.key for rule in ELEMENTWISE}
    for ufunc in (np.add, np.subtract, np.multiply, np.true_divide, np.power, np.sin, np.exp, np.log1p, np.maximum):
        assert ufunc in names
    # Several outputs, or VJPs that are not element-wise in the cotangent: never marked.
    for ufunc in (np.divmod, np.modf, np.frexp, np.matmul, np.vecdot):
        assert ufunc not in names


@pytest.mark.parametrize("rule", ELEMENTWISE, ids=lambda rule: rule.name)
@pytest.mark.parametrize("batch", [(), (3,)])
def test_a_marked_rule_returns_the_cotangents_shape_and_dtype(rule, batch):
    ufunc = rule.key
    rng = np.random.default_rng(0)
    x = rng.uniform(0.2, 0.9, 5)  # float64, in every marked function's domain or not: NaN keeps the shape
    for argnum in range(ufunc.nin):
        # The marked calls: the traced operand is a float64 array, any other a 0-d float64 constant.
        args = [np.array(0.7) for _ in range(ufunc.nin)]
        args[argnum] = x
        with np.errstate(all="ignore"):
            ans = ufunc(*args)
            g = rng.standard_normal(batch + ans.shape)
            gi = rule.vjps[argnum](g, ans, *args)
        # The recorder also takes the output's shape and dtype as known (Tracer._small).
        assert ans.dtype == np.float64 and ans.shape == x.shape, f"{rule.name} argument {argnum}"
        if ufunc.nin == 2:
            both = ufunc(x, x[::-1].copy())
            assert both.dtype == np.float64 and both.shape == x.shape, rule.name
        assert type(gi) is np.ndarray, f"{rule.name} argument {argnum}: {type(gi)}"
        assert gi.shape == batch + x.shape, f"{rule.name} argument {argnum}"
        assert gi.dtype == np.float64, f"{rule.name} argument {argnum}"


def _positions(tape):
    return [p for node in tape.nodes for p in node[PARENTS][1::4]]


def test_the_recorder_marks_float64_operands_of_marked_rules_only():
    tape = Tape()
    x = tape.watch(np.linspace(0.1, 0.9, 4))
    w = tape.watch(np.ones((3, 4)))
    np.sin(x) * 1.5 + x * np.cos(x)  # every operand float64 with the output's shape: all marked
    assert _positions(tape) == [FITTED] * 7
    del tape.nodes[2:]
    x * w  # x broadcasts against w
    np.matmul(w, x)  # not element-wise
    assert _positions(tape) == [-1] * 4

    tape = Tape()
    y = tape.watch(np.linspace(0.1, 0.9, 4).astype(np.float32))
    np.sin(y) * 1.5  # float32: the general path, which casts where NumPy promoted
    assert FITTED not in _positions(tape)

    tape = Tape()
    z = tape.watch(np.linspace(0.1, 0.9, 4))
    z * np.float64(1.5)  # a NumPy scalar: not a Python float
    z * np.array(0.5)  # nor is a 0-d array
    assert FITTED not in _positions(tape)


def _program(x, c):
    """The same maths with constants ``c`` (Python floats: marked; 0-d arrays: not marked)."""
    y = np.sin(x) * c[0] + x * c[1]
    y = c[2] / (np.exp(-y) + c[3]) - np.maximum(y, c[4]) ** c[5]
    return np.sum(np.tanh(y - c[2]) * np.log1p(y * y))


CONSTANTS = [1.01, 0.5, 2.0, 1.0, 0.25, 2.0]


@pytest.mark.parametrize("values", [
    np.linspace(-1.0, 1.0, 7),
    np.array([0.25, 0.25, np.nan, np.inf, -np.inf, 0.0, -0.0]),
])
def test_marked_sweeps_give_exactly_the_numbers_of_unmarked_ones(values):
    as_arrays = [np.array(c) for c in CONSTANTS]
    with np.errstate(all="ignore"):
        marked = tg.grad(lambda x: _program(x, CONSTANTS))(values)
        plain = tg.grad(lambda x: _program(x, as_arrays))(values)
        np.testing.assert_array_equal(marked, plain)
        marked_h = tg.hessian(lambda x: _program(x, CONSTANTS))(values)
        plain_h = tg.hessian(lambda x: _program(x, as_arrays))(values)
        np.testing.assert_array_equal(marked_h, plain_h)
        # A batch of cotangents, against the plainest way: stacked single VJPs.
        fun = lambda x: np.sin(x) * 3.0 - x * 0.5  # noqa: E731
        marked_j = tg.jacobian(fun)(values)
        _, pullback = tg.vjp(fun, values)
        rows = np.stack([pullback(row)[0] for row in np.eye(values.size)])
    np.testing.assert_array_equal(marked_j, rows)


def test_a_float32_program_keeps_float32_on_the_unmarked_path():
    x = np.linspace(-1.0, 1.0, 5).astype(np.float32)
    g = tg.grad(lambda x: np.sum(np.sin(x) * 1.01 + x * 0.5))(x)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, np.cos(x) * 1.01 + 0.5, rtol=1e-6)


def test_tracers_of_small_float64_values_know_their_shape():
    tape = Tape()
    x = tape.watch(np.linspace(0.1, 0.9, 4))
    assert x._small == (4,)
    assert tape.watch(np.ones(3, dtype=np.float32))._small is None
    assert tape.watch(np.ones(10**5))._small is None  # large: attributes are read instead
    y = np.sin(x) * 2.0 + x
    assert y._small == (4,) and type(y._value) is np.ndarray and y._value.dtype == np.float64
    z = x[1:]  # not element-wise: the shape is read from the result
    assert z._small == (3,)
    s = np.sum(x * x)  # a NumPy scalar: not known (None is always a safe answer)
    assert s._small is None
    w = x * np.ones((2, 4))  # broadcast: read from the result
    assert w._small == (2, 4)


def test_an_in_place_write_keeps_a_tracers_shape_knowledge_true():
    def f(x):
        y = x * 2.0
        y += np.sin(x)  # in place: the tracer object now stands for the sum
        assert y._small == (4,)
        y[1:] = y[1:] * 0.5
        assert y._small is None or (y._small == np.shape(y._value) and y._value.dtype == np.float64)
        return np.sum(y * 1.5)

    x = np.linspace(0.1, 0.9, 4)
    expected = 1.5 * (2.0 + np.cos(x)) * np.array([1.0, 0.5, 0.5, 0.5])
    np.testing.assert_allclose(tg.grad(f)(x), expected, rtol=1e-14)
