"""Three silent wrong gradients found by tests/test_wild_programs.py, each now right or refused.

* ``out=`` of an array function (``np.sum``, ``np.cumsum``, ``x.mean(out=y)``): the raw call
  filled the buffer while the tape kept another value.  A traced buffer now gets the result
  as an in-place write; a plain buffer of a differentiable result is a clear error.
* ``np.stack([x[:2], [x[0], x[1]]])``: an element that is itself a list of tracers lost its
  gradient (and the tracer escaped as the result).
* ``np.asfortranarray`` / ``order="F"`` copies: their layout, which ``ravel(order="K")`` reads.
"""

import numpy as np
import pytest

import tapegrad as tg

# Plain arrays made before any tape records: np.zeros & co. called inside a differentiated
# function give traced constants (tapegrad.buffers), so the refusals below need these.
_PLAIN3 = np.zeros(3)

X = np.array([0.3, -1.1, 0.8, 1.7, -0.4, 0.6])


def _fd(f, x, h=1e-6):
    rows = [(np.asarray(f(x + h * e)) - np.asarray(f(x - h * e))) / (2 * h) for e in np.eye(x.size)]
    return np.moveaxis(np.array(rows), 0, -1)


def _check(f, x=X, hessian=True):
    before = x.copy()
    value, _ = tg.vjp(f, x)
    np.testing.assert_array_equal(np.asarray(value), f(x))
    jac = tg.jacobian(f)(x)
    assert type(jac) is np.ndarray
    np.testing.assert_allclose(jac, _fd(f, x), rtol=1e-6, atol=1e-8)
    if hessian and np.ndim(value) == 0:
        np.testing.assert_allclose(tg.hessian(f)(x), _fd(tg.grad(f), x), rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(x, before)


# ---------------------------------------------------------------- out=
OUT_PROGRAMS = {
    "sum_axis_keyword": lambda x: (lambda b: (np.sum(x.reshape(2, 3), axis=0, out=b), np.sum(b**2))[1])(
        np.zeros_like(x, shape=(3,))),
    "sum_positional": lambda x: (lambda b: (np.sum(x.reshape(2, 3), 1, None, b), np.sum(b**3))[1])(
        np.zeros_like(x, shape=(2,))),
    "cumsum": lambda x: (lambda z: (np.cumsum(x, out=z), np.sum(z**2))[1])(np.zeros_like(x)),
    "cumprod_method": lambda x: (lambda z: (x.cumprod(out=z), np.sum(z))[1])(np.zeros_like(x)),
    "mean_method_returns_out": lambda x: (lambda z: 2.0 * x.reshape(3, 2).mean(axis=1, out=z) + z)(np.zeros_like(x, shape=(3,))),
    "max_out": lambda x: (lambda z: (np.max(x.reshape(2, 3), axis=1, out=z), np.sum(z * x[:2]))[1])(np.zeros_like(x, shape=(2,))),
    "prod_out": lambda x: (lambda z: (np.prod(x.reshape(3, 2), axis=0, out=z), np.sum(z))[1])(np.zeros_like(x, shape=(2,))),
    "concatenate_out": lambda x: (lambda o: (np.concatenate([x, 2.0 * x], out=o), np.sum(o**2))[1])(np.zeros_like(x, shape=(12,))),
    "float32_buffer_casts": lambda x: (lambda b: (np.sum(x.reshape(2, 3), axis=0, out=b), np.sum(b.astype(float) ** 2))[1])(
        np.zeros_like(x, shape=(3,), dtype=np.float32)),
}


@pytest.mark.parametrize("name", sorted(OUT_PROGRAMS))
def test_out_into_a_traced_buffer_is_an_in_place_write(name):
    f = OUT_PROGRAMS[name]
    if name == "float32_buffer_casts":
        g = tg.grad(f)(X)  # d sum(b**2) / dx with b the float32 column sums: 2 b, per column
        b = X.reshape(2, 3).sum(axis=0).astype(np.float32).astype(float)
        np.testing.assert_allclose(g, np.tile(2.0 * b, 2), rtol=1e-12)
        return
    _check(f)


@pytest.mark.parametrize("call", [
    lambda x, b: np.sum(x.reshape(2, 3), axis=0, out=b),
    lambda x, b: np.sum(x.reshape(2, 3), 0, None, b),
    lambda x, b: x.reshape(2, 3).mean(axis=0, out=b),
    lambda x, b: np.cumsum(x[:3], out=b),
    lambda x, b: np.amax(x.reshape(2, 3), axis=0, out=b),
    lambda x, b: np.concatenate([x[:1], x[1:3]], out=b),
])
def test_a_plain_buffer_of_a_differentiable_result_is_refused(call):
    def f(x):
        b = _PLAIN3.copy()
        call(x, b)
        return np.sum(b**2)

    with pytest.raises(tg.GradientDroppedError, match="was called with out="):
        tg.grad(f)(X)


def test_a_constant_result_into_a_plain_buffer_is_numpys_call():
    def f(x):
        where = np.empty((), dtype=np.intp)
        np.argmax(x, out=where)
        return x[where] * 3.0

    np.testing.assert_array_equal(tg.grad(f)(X), 3.0 * (np.arange(6) == np.argmax(X)))


def test_a_buffer_of_another_shape_is_numpys_error():
    def f(x):
        b = np.zeros_like(x, shape=(4,))
        np.sum(x.reshape(2, 3), axis=0, out=b)
        return np.sum(b)

    with pytest.raises(ValueError, match="out has shape"):
        tg.grad(f)(X)


# ---------------------------------------------------------------- nested lists of tracers
LIST_PROGRAMS = {
    "stack_array_and_list": lambda x: np.sum(np.stack([x[:2], [-x[1], x[0]]]) ** 2 * np.array([[1.0, 2.0], [3.0, 4.0]])),
    "stack_tuple_axis_1": lambda x: np.sum(np.stack((x[:2], (x[2], 1.0)), axis=1) ** 3),
    "stack_then_inverse": lambda x: np.sum(np.linalg.inv(np.stack([x[:2], [x[2], 1.0]]) + 3 * np.eye(2))),
    "concatenate_appended_sum": lambda x: np.sum(np.concatenate([x, [x.sum(), 2.0]]) ** 2),
    "vstack_nested": lambda x: np.sum(np.vstack([x[:3], [x[3], x[4] ** 2, 1.0]]) ** 2),
    "deeper_nesting": lambda x: np.sum(np.stack([x[:4].reshape(2, 2), [[x[4], 0.5], [x[5], x[0]]]]) ** 2),
}


@pytest.mark.parametrize("name", sorted(LIST_PROGRAMS))
def test_lists_of_tracers_inside_a_list_of_arrays(name):
    _check(LIST_PROGRAMS[name])


# ---------------------------------------------------------------- layouts
LAYOUT_PROGRAMS = {
    "asfortranarray_ravel_k": lambda x: np.asfortranarray(x.reshape(2, 3)).ravel(order="K") * np.arange(1.0, 7.0),
    "array_order_f": lambda x: np.array(x.reshape(2, 3), order="F").ravel(order="K") ** 2,
    "copy_order_f_ravel_a": lambda x: x.reshape(2, 3).copy(order="F").ravel(order="A") * np.arange(6.0),
    "asfortranarray_cast": lambda x: np.asfortranarray(x.reshape(3, 2), dtype=np.float64).reshape(-1, order="A") ** 3,
    "written_fortran_buffer": lambda x: (lambda b: (b.__setitem__(Ellipsis, x.reshape(2, 3)), b.ravel(order="K") ** 2)[1])(
        np.empty_like(x.reshape(2, 3), order="F")),
    "in_place_update_keeps_layout": lambda x: (lambda b: (b.__iadd__(x.reshape(2, 3)), b.ravel(order="K") * np.arange(6.0))[1])(
        np.asfortranarray(x.reshape(2, 3) * 2.0)),
    "entry_write_keeps_layout": lambda x: (lambda b: (b.__setitem__((0, 1), 7.0 * x[0]), b.ravel(order="K") ** 2)[1])(
        np.asfortranarray(x.reshape(2, 3) * 1.0)),
}


@pytest.mark.parametrize("name", sorted(LAYOUT_PROGRAMS))
def test_fortran_layouts_are_numpys(name):
    _check(LAYOUT_PROGRAMS[name])
