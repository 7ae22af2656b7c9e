"""Outputs that wrap a tracer are differentiated through, in every way of asking (issue 30, item 3).

A function may build its result in a library that wraps arrays: an xarray
``DataArray``, a pint ``Quantity``, pint-xarray, any NEP-18 duck array.  The
tracer then sits inside the returned object; read as it is, that object was a
constant and its gradient a silent zero.  Every API is checked here against
central finite differences in float64, first and second order; objects that are
no arrays are refused with a TypeError naming their type.
"""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.check import check_function
from tapegrad.outputs import UnreadableOutputError
from tapegrad.testing import check_grads
from tapegrad.tracer import Tracer

# Plain arrays made before any tape records: np.zeros & co. called inside a differentiated
# function give traced constants (tapegrad.buffers), so the refusals below need these.
_PLAIN_ONES3 = np.ones(3)

xr = pytest.importorskip("xarray")
pint = pytest.importorskip("pint")
pint_xarray = pytest.importorskip("pint_xarray")

UREG = pint_xarray.unit_registry  # the registry pint-xarray quantifies with
Q = UREG.Quantity
X = np.array([0.3, -0.7, 1.1, 0.5])
RNG = np.random.default_rng(30)
C = RNG.standard_normal(4)  # a cotangent / tangent for 4 outputs / inputs


class Duck(np.lib.mixins.NDArrayOperatorsMixin):
    """A minimal NEP-18 duck array: NumPy calls on it run on the array it wraps."""

    def __init__(self, payload, label="duck"):
        self._payload = payload
        self.label = label  # metadata the value must keep

    @property
    def shape(self):
        return np.shape(self._payload)

    @property
    def dtype(self):
        return self._payload.dtype

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self._payload, dtype=dtype)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        raw = [i._payload if isinstance(i, Duck) else i for i in inputs]
        return Duck(getattr(ufunc, method)(*raw, **kwargs), self.label)

    def __array_function__(self, func, types, args, kwargs):
        def unwrap(a):
            if isinstance(a, Duck):
                return a._payload
            return type(a)(unwrap(b) for b in a) if isinstance(a, (list, tuple)) else a

        out = func(*unwrap(args), **{k: unwrap(v) for k, v in kwargs.items()})
        wrap = isinstance(out, np.generic) or hasattr(out, "__array_function__")  # arrays, not a dtype
        return Duck(out, self.label) if wrap else out


class SlotDuck(np.lib.mixins.NDArrayOperatorsMixin):
    """A duck array that keeps its array in a slot (no instance dict)."""

    __slots__ = ("_value", "unit")

    def __init__(self, value, unit="u"):
        self._value = value
        self.unit = unit

    shape = property(lambda self: np.shape(self._value))
    dtype = property(lambda self: self._value.dtype)

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self._value, dtype=dtype)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        raw = [i._value if isinstance(i, SlotDuck) else i for i in inputs]
        return SlotDuck(getattr(ufunc, method)(*raw, **kwargs), self.unit)


class TwoArrays(Duck):
    """Holds a second traced array of its own shape: which one is the data is ambiguous."""

    def __init__(self, payload, other):
        super().__init__(payload)
        self.other = other


class Box:
    """A plain object, no array."""

    def __init__(self, value):
        self.value = value


def da(x):
    return xr.DataArray(x, dims="t", coords={"t": np.arange(np.shape(x)[-1])})


def pxa(x):
    return xr.DataArray(x, dims="t").pint.quantify("m")


# name: (vector-valued f: R^4 -> R^4, scalar-valued s: R^4 -> R), each returning a wrapper.
FAMILIES = {
    "DataArray": (lambda x: np.sin(da(x)) * da(x) ** 2, lambda x: (np.sin(da(x)) ** 2 * da(x)).sum()),
    "Variable": (
        lambda x: np.exp(xr.Variable("t", x)) * xr.Variable("t", x),
        lambda x: (np.exp(xr.Variable("t", x)) * np.cos(xr.Variable("t", x))).sum(),
    ),
    "Quantity": (
        lambda x: np.exp(Q(x, "m") / Q(2.0, "m")) * Q(x, "s"),
        lambda x: np.sum(np.exp(Q(x, "m") / Q(2.0, "m"))),  # the example
    ),
    "pint-xarray": (
        lambda x: np.sin(pxa(x) / Q(1.0, "m")) * pxa(x),
        lambda x: (pxa(x) ** 3).mean() + (pxa(x) ** 2).isel(t=0) * Q(1.0, "m"),
    ),
    "duck": (lambda x: np.sin(Duck(x)) * Duck(x) ** 2, lambda x: np.sum(np.cos(Duck(x)) * Duck(x) ** 3)),
    "duck of Quantity": (
        lambda x: np.sin(Duck(Q(x, "m")) / Q(1.0, "m")) * Duck(Q(x, "s")),
        lambda x: np.sum(np.exp(Duck(Q(x, "m")) / Q(2.0, "m")) * Duck(Q(x, "m"))),
    ),
    "slot duck": (lambda x: np.tanh(SlotDuck(x)) * SlotDuck(x), lambda x: np.sum(np.tanh(SlotDuck(x)) ** 2)),
}
NAMES = list(FAMILIES)


def plain(value):
    """The plain float64 numbers of a value (its magnitude; a Dataset as a dict)."""
    if isinstance(value, xr.Dataset):
        return {k: plain(value[k]) for k in value.data_vars}
    if isinstance(value, (xr.DataArray, xr.Variable)):
        return plain(value.data)
    if isinstance(value, pint.Quantity):
        return plain(value.magnitude)
    if isinstance(value, Duck):
        return plain(value._payload)
    if isinstance(value, SlotDuck):
        return plain(value._value)
    return np.asarray(value, dtype=np.float64)


def fd_jacobian(f, x, eps=1e-6):
    """Central differences: shape ``out.shape + x.shape``."""
    columns = []
    for j in range(x.size):
        e = np.zeros_like(x)
        e.flat[j] = eps
        columns.append((plain(f(x + e)) - plain(f(x - e))) / (2 * eps))
    return np.moveaxis(np.stack(columns), 0, -1).reshape(np.shape(plain(f(x))) + x.shape)


def fd_hessian(s, x, h=1e-4):
    """Central second differences of scalar ``s``."""
    n = x.size
    H = np.empty((n, n))
    for i in range(n):
        for j in range(n):
            ei, ej = np.eye(n)[i] * h, np.eye(n)[j] * h
            H[i, j] = (
                plain(s(x + ei + ej)) - plain(s(x + ei - ej)) - plain(s(x - ei + ej)) + plain(s(x - ei - ej))
            ) / (4 * h * h)
    return H


def close(a, b, rtol=1e-6, atol=1e-8):
    assert type(a) is np.ndarray, f"a derivative must be a plain ndarray, got {type(a).__name__}"
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


def innermost(value):
    """What a wrapper holds once every wrapper is taken off."""
    while True:
        if isinstance(value, (xr.DataArray, xr.Variable)):
            value = value.data
        elif isinstance(value, pint.Quantity):
            value = value.magnitude
        elif isinstance(value, Duck):
            value = value._payload
        elif isinstance(value, SlotDuck):
            value = value._value
        else:
            return value


def same_value(value, expected):
    """A value API returns what the function returned: same type and metadata, plain numbers inside."""
    assert type(value) is type(expected)
    assert type(innermost(value)) is not Tracer
    if isinstance(expected, pint.Quantity):
        assert value.units == expected.units
    if isinstance(expected, (xr.DataArray, xr.Variable)):
        assert value.dims == expected.dims
    if isinstance(expected, xr.DataArray):
        assert value.coords.equals(expected.coords)
    if isinstance(expected, Duck):
        assert value.label == expected.label
    np.testing.assert_allclose(plain(value), plain(expected), rtol=1e-12)


@pytest.fixture(params=NAMES)
def family(request):
    return FAMILIES[request.param]


# ------------------------------------------------------------------ first order
def test_grad_and_value_and_grad(family):
    _, s = family
    expected = fd_jacobian(s, X)
    close(tg.grad(s)(X), expected)
    value, g = tg.value_and_grad(s)(X)
    close(g, expected)
    same_value(value, s(X))


def test_jacobian_whole_chunked_and_forward(family):
    f, _ = family
    expected = fd_jacobian(f, X)
    assert np.abs(expected - np.diag(np.diag(expected))).max() == 0  # element-wise: a real check of the diagonal
    for J in (
        tg.jacobian(f)(X),
        tg.jacobian(f, chunk_size=1)(X),
        tg.jacobian(f, chunk_size=3)(X),
        tg.jacfwd(f)(X),
        tg.jacobian(f, mode="forward")(X),
    ):
        close(J, expected)


def test_vjp_and_jvp(family):
    f, _ = family
    J = fd_jacobian(f, X)
    out, pullback = tg.vjp(f, X)
    same_value(out, f(X))
    close(pullback(C)[0], C @ J)
    batch = RNG.standard_normal((2, 4))
    close(pullback(batch)[0], batch @ J)
    out, tangent = tg.jvp(f, (X,), (C,))
    same_value(out, f(X))
    close(tangent, J @ C)
    _, tangents = tg.jvp(f, (X,), (batch,))
    close(tangents, batch @ J.T)


# ------------------------------------------------------------------ second order
def test_hessian_and_hvp(family):
    _, s = family
    expected = fd_hessian(s, X)
    close(tg.hessian(s)(X), expected, rtol=1e-5, atol=1e-6)
    close(tg.hessian(s, chunk_size=2)(X), expected, rtol=1e-5, atol=1e-6)
    close(tg.jacfwd(tg.grad(s))(X), expected, rtol=1e-5, atol=1e-6)
    close(tg.hvp(s)(X, C), expected @ C, rtol=1e-5, atol=1e-6)


def test_jacobian_of_a_jvp_is_second_order(family):
    f, _ = family
    # d/dx (J(x) C), against central differences of central differences (no tapegrad in the reference).
    directional = lambda x: tg.jvp(f, (x,), (C,))[1]  # noqa: E731
    h = 1e-4
    reference = fd_jacobian(lambda x: (plain(f(x + h * C)) - plain(f(x - h * C))) / (2 * h), X, eps=h)
    close(tg.jacobian(directional)(X), reference, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------ the tape
def test_gradient_tape_and_gradients(family):
    f, s = family
    J = fd_jacobian(f, X)
    with tg.GradientTape(persistent=True) as tape:
        x = tape.watch(X)
        y = f(x)
        total = s(x)
    close(tape.gradient(y, x), J.sum(axis=0))
    close(tape.gradient(y, x, output_gradients=C), C @ J)
    close(tape.jacobian(y, x), J)
    close(tape.jacobian(y, x, chunk_size=1), J)
    close(tape.gradient(total, x), fd_jacobian(s, X))
    close(tg.gradients([y, total], [x])[0], J.sum(axis=0) + fd_jacobian(s, X))


WRAP_2D = {
    "DataArray": lambda x: xr.DataArray(x, dims=("b", "c")),
    "Quantity": lambda x: Q(x, "m"),
    "pint-xarray": lambda x: xr.DataArray(x, dims=("b", "c")).pint.quantify("m"),
    "duck": Duck,
}


@pytest.mark.parametrize("name", list(WRAP_2D))
def test_batch_jacobian(name):
    wrap = WRAP_2D[name]

    def f(x):
        w = wrap(x)
        return w**3 if name in ("Quantity", "pint-xarray") else np.sin(w) * w  # sin of metres: no

    x = np.random.default_rng(3).standard_normal((3, 2))
    expected = fd_jacobian(f, x)  # (3, 2, 3, 2): rows independent
    per_row = np.stack([expected[b, :, b, :] for b in range(3)])
    close(tg.batch_jacobian(f)(x), per_row)
    with tg.GradientTape() as tape:
        xt = tape.watch(x)
        y = f(xt)
    close(tape.batch_jacobian(y, xt), per_row)


def test_sparse_jacobian_and_hessian(family):
    f, s = family
    close(tg.jacobian(f, sparse=True)(X).toarray(), fd_jacobian(f, X))
    close(tg.hessian(s, sparse=True)(X).toarray(), fd_hessian(s, X), rtol=1e-5, atol=1e-6)
    with tg.GradientTape() as tape:
        x = tape.watch(X)
        y = f(x)
    close(tape.jacobian(y, x, sparse=True).toarray(), fd_jacobian(f, X))


# ------------------------------------------------------------------ check tools
@pytest.mark.filterwarnings("ignore::pint.UnitStrippedWarning")
def test_check_tools(family):
    f, s = family
    check_grads(f, [X])
    check_grads(s, [X])
    for target, mode in ((f, "gradient"), (f, "jacobian"), (s, "hessian")):
        report = check_function(target, [X], mode=mode)
        assert report.error is None and report.ok, (mode, report.error, report.fd_error)


# ------------------------------------------------------------------ values, structures, nesting
def test_value_holds_the_outer_tracer_when_nested():
    _, s = FAMILIES["DataArray"]
    # value_and_grad inside grad: its value is a DataArray of outer tracers, itself differentiated.
    g = tg.grad(lambda x: tg.value_and_grad(s)(x)[0] * 3.0)(X)
    close(g, 3.0 * fd_jacobian(s, X))
    q = tg.grad(lambda x: tg.vjp(FAMILIES["Quantity"][1], x)[0] * Q(2.0, "s"))(X)
    close(q, 2.0 * fd_jacobian(FAMILIES["Quantity"][1], X))


def test_structures_of_wrapped_outputs():
    f = lambda x: (da(x) ** 2, {"q": Q(x, "m") ** 3, "duck": np.sin(Duck(x))})  # noqa: E731
    jac = tg.jacobian(f)(X)
    close(jac[0], np.diag(2 * X))
    close(jac[1]["q"], np.diag(3 * X**2))
    close(jac[1]["duck"], np.diag(np.cos(X)))
    out, pullback = tg.vjp(f, X)
    assert isinstance(out[0], xr.DataArray) and isinstance(out[1]["q"], pint.Quantity)
    assert isinstance(out[1]["duck"], Duck)
    (g,) = pullback((C, {"q": C, "duck": C}))
    close(g, C * (2 * X + 3 * X**2 + np.cos(X)))


def test_cotangents_and_weights_in_the_outputs_wrapper():
    f, _ = FAMILIES["DataArray"]
    J = fd_jacobian(f, X)
    _, pullback = tg.vjp(f, X)
    close(pullback(da(C))[0], C @ J)
    q, _ = FAMILIES["Quantity"]
    _, pullback = tg.vjp(q, X)
    close(pullback(Q(C, "s"))[0], C @ fd_jacobian(q, X))
    with tg.GradientTape() as tape:
        x = tape.watch(X)
        y = f(x)
    close(tape.gradient(y, x, output_gradients=da(C)), C @ J)


def test_aux_is_lowered_through_wrappers():
    def f(x):
        y = da(x) ** 2
        return y.sum(), {"y": y, "name": "squares"}

    (value, aux), g = tg.value_and_grad(f, has_aux=True)(X)
    close(g, 2 * X)
    assert type(aux["y"].data) is np.ndarray and aux["name"] == "squares"
    np.testing.assert_allclose(aux["y"].values, X**2)


def test_dataset_is_a_dict_of_its_data_variables():
    def f(x):
        return xr.Dataset({"a": ("t", x**2), "b": ("t", np.sin(x)), "c": ("t", np.ones(4))}, coords={"t": np.arange(4)})

    jac = tg.jacobian(f)(X)
    assert set(jac) == {"a", "b", "c"}
    close(jac["a"], fd_jacobian(lambda x: f(x)["a"], X))
    close(jac["b"], fd_jacobian(lambda x: f(x)["b"], X))
    close(jac["c"], np.zeros((4, 4)))  # a constant data variable
    close(tg.jacfwd(f)(X)["b"], np.diag(np.cos(X)))
    out, pullback = tg.vjp(f, X)
    assert isinstance(out, xr.Dataset) and type(out["a"].data) is np.ndarray
    np.testing.assert_allclose(out["b"].values, np.sin(X))
    expected = C * (2 * X + np.cos(X))
    close(pullback({"a": C, "b": C, "c": C})[0], expected)
    close(pullback(xr.Dataset({"a": ("t", C), "b": ("t", C), "c": ("t", C)}))[0], expected)
    _, tangent = tg.jvp(f, (X,), (C,))
    close(tangent["a"], 2 * X * C)
    with pytest.raises(TypeError, match="structure"):
        tg.grad(lambda x: f(x).sum())(X)  # a Dataset is several outputs: no scalar
    with tg.GradientTape(persistent=True) as tape:
        x = tape.watch(X)
        ds = f(x)
    close(tape.gradient(ds, x), 2 * X + np.cos(X))
    with pytest.raises(UnreadableOutputError, match="Dataset"):
        tape.jacobian(ds, x)


# ------------------------------------------------------------------ constants
CONSTANTS = {
    "DataArray": lambda x: xr.DataArray(np.full(4, 2.0), dims="t"),
    "Quantity": lambda x: Q(np.full(4, 2.0), "m"),
    "pint-xarray": lambda x: xr.DataArray(np.full(4, 2.0), dims="t").pint.quantify("m"),
    "duck": lambda x: Duck(np.full(4, 2.0)),
}


@pytest.mark.parametrize("name", list(CONSTANTS))
def test_a_constant_output_gives_the_zero_answer(name):
    f = CONSTANTS[name]
    close(tg.jacobian(f)(X), np.zeros((4, 4)))
    close(tg.jacfwd(f)(X), np.zeros((4, 4)))
    close(tg.vjp(f, X)[1](C)[0], np.zeros(4))
    s = lambda x: np.sum(f(x))  # noqa: E731
    close(tg.grad(s)(X), np.zeros(4))
    value, g = tg.value_and_grad(s)(X)
    close(g, np.zeros(4))
    same_value(value, s(X))
    with tg.GradientTape(persistent=True) as tape:
        x = tape.watch(X)
        y = f(x)
    assert tape.gradient(y, x) is None
    close(tape.gradient(y, x, unconnected_gradients="zero"), np.zeros(4))
    close(tape.jacobian(y, x, unconnected_gradients="zero"), np.zeros((4, 4)))


def test_grad_of_a_constant_dataarray_is_zeros():
    g = tg.grad(lambda x: (xr.DataArray(np.array([1.0, 2.0]), dims="t") ** 2).sum())(X)
    close(g, np.zeros(4))


# ------------------------------------------------------------------ refusals
NOT_ARRAYS = {
    "str": lambda x: "a string",
    "None": lambda x: None,
    "object": lambda x: object(),
    "Box of a tracer": lambda x: Box(np.sum(x)),
    "dict with a str": lambda x: {"y": np.sum(x), "label": "loss"},
}
ASKS = {
    "grad": lambda f: tg.grad(f)(X),
    "value_and_grad": lambda f: tg.value_and_grad(f)(X),
    "vjp": lambda f: tg.vjp(f, X),
    "jvp": lambda f: tg.jvp(f, (X,), (C,)),
    "jacobian": lambda f: tg.jacobian(f)(X),
    "jacobian chunked": lambda f: tg.jacobian(f, chunk_size=1)(X),
    "jacfwd": lambda f: tg.jacfwd(f)(X),
    "hessian": lambda f: tg.hessian(f)(X),
    "hvp": lambda f: tg.hvp(f)(X, C),
    "batch_jacobian": lambda f: tg.batch_jacobian(f)(X),
}


@pytest.mark.parametrize("ask", list(ASKS))
@pytest.mark.parametrize("name", list(NOT_ARRAYS))
def test_an_object_that_is_no_array_is_refused(name, ask):
    f = NOT_ARRAYS[name]
    with pytest.raises(TypeError) as info:
        ASKS[ask](f)
    assert isinstance(info.value, UnreadableOutputError)
    qualname = {"str": "str", "None": "NoneType", "object": "object"}.get(name, "str")
    if name == "Box of a tracer":
        qualname = f"{Box.__module__}.Box"
    assert qualname in str(info.value) and "tapegrad differentiates" in str(info.value)


def test_targets_that_are_no_arrays_are_refused():
    with tg.GradientTape(persistent=True) as tape:
        x = tape.watch(X)
        y = np.sum(x)
    for target in ("abc", Box(y), None):
        with pytest.raises(UnreadableOutputError, match="the target"):
            tape.gradient(target, x)
        with pytest.raises(UnreadableOutputError, match="the target"):
            tape.jacobian(target, x)
        with pytest.raises(UnreadableOutputError, match="the target"):
            tg.gradients(target, [x])


def test_a_duck_array_holding_two_traced_arrays_of_its_shape_is_ambiguous():
    with pytest.raises(UnreadableOutputError, match=r"2 different traced arrays .*out\._payload, out\.other"):
        tg.jacobian(lambda x: TwoArrays(x * 2.0, x * 3.0))(X)
    # The same traced array twice is one array.
    def twice(x):
        y = np.sin(x)
        return TwoArrays(y, y)

    close(tg.jacobian(twice)(X), np.diag(np.cos(X)))


def test_a_duck_array_of_another_shape_than_its_tracer_is_refused():
    with pytest.raises(UnreadableOutputError, match=r"has shape \(4,\)"):
        tg.jacobian(lambda x: TwoArrays(_PLAIN_ONES3.copy(), x))(X)
