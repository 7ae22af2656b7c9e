"""The per-call fast paths of recording and of the sweep give the general paths' numbers.

Each fast path (basic indexing straight to the recorder, ``x[None]`` cotangents
as reshapes, small broadcasts filled in, reductions without ``expand_dims``,
parents held by index) is checked against finite differences or against the
plain NumPy call it replaces.
"""

import gc

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.lazy import broadcast_to
from tapegrad.rules._util import negative_axes, unreduce
from tapegrad.tape import ARGS, INDEX, PARENTS, Tape, parent_runs, rule_of
from tapegrad.testing import check_grads


def _pairwise(q):
    # W7's idiom: differences of all pairs through new axes, then weighted sums.
    diff = q[None, :, :] - q[:, None, :]
    r2 = np.sum(diff * diff, axis=-1) + 0.1
    w = r2**-1.5
    return np.sum(np.sum(diff * w[:, :, None], axis=1) ** 2) + np.sum(q[..., None] ** 3)


def test_newaxis_cotangents_match_finite_differences():
    # first and second order: VJPs, and VJPs of the traced VJPs
    check_grads(_pairwise, (np.random.default_rng(0).standard_normal((4, 3)),), order=2)


def test_newaxis_cotangents_in_jacobians_and_hessians():
    q = np.random.default_rng(1).standard_normal((3, 2))
    stacked = np.stack([tg.grad(lambda x, k=k: np.ravel(np.sum(x[None] * x[:, None], axis=0))[k])(q)
                        for k in range(q.size)])
    jac = tg.jacobian(lambda x: np.ravel(np.sum(x[None] * x[:, None], axis=0)))(q)
    np.testing.assert_array_equal(jac.reshape(q.size, -1), stacked.reshape(q.size, -1))
    hess = tg.hessian(_pairwise)(q).reshape(q.size, q.size)
    hvps = np.stack([tg.hvp(_pairwise)(q, e.reshape(q.shape)) for e in np.eye(q.size)]).reshape(q.size, q.size)
    np.testing.assert_allclose(hess, hvps, rtol=1e-12, atol=1e-12)


def test_basic_indexing_records_views_and_writes():
    # The direct route for basic indices keeps view semantics: a write through
    # y = x[1:] shows in x, as in NumPy.
    def f(x):
        x = x * 1.0
        y = x[1:]
        y *= 3.0
        return np.sum(x**2) + x[0, ...] + x[None][0, -1]

    check_grads(f, (np.array([0.5, -1.0, 2.0]),), order=2)


@pytest.mark.parametrize("shape,target", [((3,), (4, 3)), ((1, 5), (2, 5)), ((), (7,)), ((3,), (1000, 3))])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
def test_broadcast_fill_equals_numpy(shape, target, dtype):
    value = (np.arange(np.prod(shape, dtype=int)) + 1.5).reshape(shape).astype(dtype)
    got = broadcast_to(value, target)
    assert got.shape == target and got.dtype == value.dtype
    np.testing.assert_array_equal(got, np.broadcast_to(value, target))


def test_unreduce_and_axes_fast_paths():
    g = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(unreduce(g, (2, 3, 4), -1, False), np.broadcast_to(g[..., None], (2, 3, 4)))
    np.testing.assert_array_equal(unreduce(g, (2, 4, 3), 1, False), np.broadcast_to(g[:, None, :], (2, 4, 3)))
    batched = np.arange(12.0).reshape(2, 2, 3)  # a batch of two cotangents of a (2, 3) sum over axis 1
    np.testing.assert_array_equal(unreduce(batched, (2, 5, 3), 1, False)[1, :, 2, :], batched[1])
    assert negative_axes(0, 3) == (-3,) and negative_axes(-1, 3) == (-1,)
    with pytest.raises(np.exceptions.AxisError):
        negative_axes(3, 3)


def test_tracer_methods_and_refused_attributes():
    seen = {}

    def f(x):
        seen["flags"] = hasattr(x, "flags")
        with pytest.raises(AttributeError, match="no attribute 'no_such_thing'"):
            x.no_such_thing
        return x.sum(axis=0) * 2 + x.max()

    np.testing.assert_array_equal(tg.grad(f)(np.array([1.0, 3.0, 2.0])), [2.0, 3.0, 2.0])
    assert seen["flags"] is False


def test_nodes_are_tuples_of_plain_values_and_leave_gc_tracking():
    # A long tape must not be walked over and over by the cyclic garbage collector:
    # a node is a tuple of numbers, arrays and tuples, which a collection untracks.
    tape = Tape()
    x = tape.watch(np.ones(3))
    y = np.sin(x) * x
    node = tape.nodes[y._index]
    assert type(node) is tuple
    assert [p[2] for p in parent_runs(node[PARENTS])] == [node[INDEX] - 1, x._index]
    assert rule_of(node).name == "numpy.multiply" and rule_of(tape.nodes[x._index]) is None
    gc.collect(0)  # a young collection untracks args and parents (numbers and arrays) ...
    assert not gc.is_tracked(node[PARENTS]) and not gc.is_tracked(node[ARGS])
    gc.collect(1)  # ... and the next one the node, which now holds nothing trackable
    assert not gc.is_tracked(node)


def test_python_float_operands_give_numpys_bits_and_keep_float32():
    # x * 0.5 on a float64 value runs with a cached 0-d float64 array (Rule.scalar_operands):
    # the same numbers as NumPy with the Python float, first and second order.
    x = np.array([0.3, -1.7, 2.9, 1e-300, np.inf])

    def f(v):
        return np.sum(np.sin(v) * 1.01 + v * 0.5 - 0.25 / (v + 3.0) + 2.0 ** np.minimum(v, 1.0))

    def f_strong(v):  # the same constants as NumPy scalars (never converted)
        c = np.float64
        return np.sum(np.sin(v) * c(1.01) + v * c(0.5) - c(0.25) / (v + c(3.0)) + c(2.0) ** np.minimum(v, c(1.0)))

    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(tg.grad(f)(x), tg.grad(f_strong)(x))
        np.testing.assert_array_equal(tg.hessian(f)(x[:3]), tg.hessian(f_strong)(x[:3]))
        assert tg.grad(f)(x.astype(np.float32)).dtype == np.float32
    from tapegrad import dispatch

    assert 0.5 in dispatch._ARRAY_SCALARS and 1.01 in dispatch._ARRAY_SCALARS  # the fast path ran
    traced, _ = tg.vjp(lambda v: v * 0.1 + 0.7, x[:3])
    np.testing.assert_array_equal(traced, x[:3] * 0.1 + 0.7)
    check_grads(f, [x[:3]], order=2)
