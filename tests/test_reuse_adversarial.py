"""``reuse=True`` against eager mode on adversarial programs (helper-19).

Each program below tries to make a reused recording give a stale or wrong number:
NumPy's Python-level helpers (``np.vectorize``, ``np.piecewise``, ``np.apply_along_axis``,
``np.select``), value-dependent sizes (``np.unique``, ``np.nonzero``, masks), ties in sorts
and selections, bins and ``searchsorted`` on traced data, Python ints, pytrees, argnums and
keywords that change, bound methods and callable objects, ``lru_cache``, generators,
writes into inputs and intermediates, ``out=`` buffers, complex intermediates, float32,
error states and warnings, ``try``/``except``, recursion and Newton loops decided by traced
values, random generators, threads.  Every call is compared with eager mode (the same API
without ``reuse``) bit for bit; inputs change over the calls (values, NaN / inf / -0.0,
shapes, dtypes, strides) and most programs run at first and second order.

Bugs these programs found, each fixed (the minimal reproductions stay beside the tests):

* a ``Generator`` the function draws from was missed in a list, a nested tuple or a named
  tuple argument, on the instance of a bound method / callable object, or in a helper's
  closure: the replay repeated the recorded draw (``reuse_guards._generators_in`` now walks
  containers, instances, partials and functions);
* a ``RuntimeWarning`` recorded with ``warnings.catch_warnings(record=True)`` and branched on
  was no guard (a recording made while the function records warnings is not kept);
* a NaN's sign in a float / complex argument was lost by the cache key (``float.hex``);
* the writeable flag (and strides) of a non-differentiated array were not in the key;
* a builtin that a module global shadows after the recording kept being replayed;
* a non-differentiated array that the function writes into was snapshotted after the
  recording (now before; such a recording is not kept: a replay would not write);
* integer outputs of multi-output primitives (``lu_factor``'s pivots, ``frexp``'s exponent,
  ``lstsq``'s rank, ``qr(pivoting=True)``'s permutation, ``schur``'s ``sdim``) were no guard;
* ``functools.partial(...).keywords`` rebound in place and ``__kwdefaults__`` scalars changed
  in place were not seen.

Documented limitations (``docs/reuse.md``, "What is frozen") are asserted through
``reuse="check"`` raising :class:`ReuseMismatchError` instead.
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import random
import warnings

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.reuse import ReuseMismatchError, ReuseWarning
from tests.test_reuse_wild import _api, agree, same, steps

X = np.array([0.3, -1.2, 2.0, 0.7])
SECOND = [tg.grad, tg.hessian, tg.hvp]
FIRST_SECOND = [tg.grad, tg.value_and_grad, tg.hessian, tg.hvp]


def _id(make):
    return make.__name__


def strict(a, b) -> bool:
    """Bit for bit with types: a NumPy scalar is not a 0-d array, a str compares as a str."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(strict(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(strict(x, y) for x, y in zip(a, b))
    if isinstance(a, (str, bytes, int, type(None))):
        return a == b
    if isinstance(a, float):
        return np.float64(a).tobytes() == np.float64(b).tobytes()
    a2, b2 = np.asarray(a), np.asarray(b)
    return a2.shape == b2.shape and a2.dtype == b2.dtype and a2.tobytes() == b2.tobytes()


def _xs(*arrays):
    return [(np.array(a, dtype=float),) for a in arrays]


# ============================================================ NumPy's Python-level helpers
def _vectorize(x):
    f = np.vectorize(lambda v: v**2 if v > 0 else np.sin(v))
    return np.sum(f(x) * x)


def _vectorize_signature(x):
    f = np.vectorize(lambda r: np.sum(r**2) if r[0] > 0 else np.sum(r), signature="(n)->()")
    return np.sum(f(x.reshape(2, 2)))


def _piecewise(x):
    return np.sum(np.piecewise(x, [x < 0, x >= 0], [lambda v: v**3, lambda v: np.sin(v)]))


def _select(x):
    return np.sum(np.select([x < -1, x < 1], [x**2, np.cos(x)], default=x**3))


def _apply_along_axis(x):
    return np.sum(np.apply_along_axis(lambda r: r * np.max(r), 1, x.reshape(2, 2)))


HELPERS = {
    "vectorize": (_vectorize, [X, -X, X * 2, X]),
    "vectorize_signature": (_vectorize_signature, [X, -X, X]),
    "piecewise": (_piecewise, [X, -X, X * 3, X]),
    "select": (_select, [X, -X, X * 3, X]),
    "apply_along_axis": (_apply_along_axis, [X, -X, X[::-1].copy(), X]),
}


@pytest.mark.parametrize("make", FIRST_SECOND, ids=_id)
@pytest.mark.parametrize("name", list(HELPERS))
def test_numpy_python_helpers(name, make):
    fun, xs = HELPERS[name]
    reused = steps(_api(make), fun, [(x,) for x in xs])
    assert reused.reuse_stats.refused is None
    assert reused.reuse_stats.replays >= 1


# ============================================================ sizes, ties, bins decided by values
def _unique(x):
    u = np.unique(x)
    return np.sum(u**2) * len(u)


def _unique_counts(x):
    u, c = np.unique(np.round(x), return_counts=True)
    return np.sum(x**2) * np.sum(c**2) + np.sum(u)


def _nonzero(x):
    i = np.nonzero(x > 0)[0]
    return np.sum(x[i] ** 2) + i.size


def _mask_len(x):
    return np.sum(x[x > 0.5]) * len(x[x > 0.5])


def _sort_ties(x):
    return np.sum(np.sort(x) * np.arange(1.0, 1 + x.size))


def _argsort_ties(x):
    return np.sum(x[np.argsort(x, kind="stable")] * np.arange(1.0, 1 + x.size))


def _searchsorted(x):
    return np.sum(x**2 * np.searchsorted(np.array([-1.0, 0.0, 1.0]), x))


def _searchsorted_traced_edges(x):
    e = np.sort(x[:2])
    return np.sum(x[2:] ** 2 * np.searchsorted(e, x[2:])) + np.sum(e**2)


def _digitize(x):
    return np.sum(np.sin(x) * np.digitize(x, [-1.0, 0.0, 1.0]))


def _histogram(x):
    h, e = np.histogram(x, bins=3)
    return np.sum(e**2) + np.sum(h * x[:3].sum())


def _einsum_optimize(x):
    m = x.reshape(2, 2)
    return np.einsum("ij,jk,kl->", m, m, m, optimize=True) + np.einsum("ii", m, optimize="greedy")


def _max_min_ties(x):
    return np.max(x) ** 2 + np.min(x) * 3 + np.sum(np.max(x.reshape(2, 2), axis=0) ** 2)


def _median_percentile(x):
    return np.median(x) ** 2 + np.percentile(x, 30) * 2


TIES = [np.array([1.0, 0.5, 1.0, 2.0]), np.array([0.5, 1.0, 1.0, 2.0]), np.array([1.0, 1.0, 0.5, 2.0]),
        np.array([2.0, 2.0, 2.0, 2.0]), np.array([1.0, 0.5, 1.0, 2.0])]
EDGES = [X, -X, np.array([0.0, -1.0, 1.0, -0.0]), X * 0.1, X]
SIZES = {
    "unique": (_unique, TIES + [X]),
    "unique_counts": (_unique_counts, [X, np.array([1.1, 1.2, 2.0, 3.0]), np.array([1.1, 2.2, 2.0, 3.0]), X]),
    "nonzero": (_nonzero, [X, -X, X * 2, np.abs(X), X]),
    "mask_len": (_mask_len, [X, X * 3, -X, X]),
    "sort_ties": (_sort_ties, TIES),
    "argsort_stable_ties": (_argsort_ties, TIES),
    "searchsorted": (_searchsorted, EDGES),
    "searchsorted_traced_edges": (_searchsorted_traced_edges, [X, -X, X[::-1].copy(), X]),
    "digitize": (_digitize, EDGES),
    "histogram": (_histogram, [X, -X, X * 2, X]),
    "einsum_optimize": (_einsum_optimize, [X, -X, X * 2]),
    "max_min_ties": (_max_min_ties, TIES),
    "median_percentile": (_median_percentile, TIES[:3] + [X]),
}


@pytest.mark.parametrize("make", SECOND, ids=_id)
@pytest.mark.parametrize("name", list(SIZES))
def test_value_dependent_sizes_ties_and_bins(name, make):
    fun, xs = SIZES[name]
    reused = steps(_api(make), fun, [(x,) for x in xs])
    assert reused.reuse_stats.refused is None


# Functions that read values and hand Python (or integer arrays) back: each must be a guard.
READERS = {
    "array_equal": lambda x: np.sum(x**2) * (2.0 if np.array_equal(x, np.abs(x)) else 1.0),
    "count_nonzero": lambda x: np.sum(x**2) * np.count_nonzero(x > 0.5),
    "argwhere": lambda x: np.sum(x[np.argwhere(x > 0)[:, 0]] ** 2),
    "extract_compress": lambda x: np.sum(np.extract(x > 0, x) ** 2) + np.sum(np.compress(x < 1, x) ** 3),
    "take_along_argsort": lambda x: np.sum(np.take_along_axis(x, np.argsort(x), 0) * np.arange(4.0)),
    "lexsort": lambda x: np.sum(x[np.lexsort((x, np.round(x)))] * np.arange(4.0)),
    "partition_argpartition": lambda x: np.sum(np.partition(x, 1)[:2] ** 2) + np.sum(x[np.argpartition(x, 2)[:2]]),
    "nanargmax": lambda x: x[np.nanargmax(x)] ** 2,
    "isin_intersect": lambda x: np.sum(x[np.isin(np.round(x), [0.0, 2.0])] ** 2)
    + np.sum(np.intersect1d(np.round(x), [0.0, 1.0, 2.0])),
    "trim_zeros": lambda x: np.sum(np.trim_zeros(x) ** 2) * np.trim_zeros(x).size,
    "modf_spacing_nextafter": lambda x: np.sum(np.modf(x)[0] ** 2 * np.modf(x)[1])
    + np.sum(x**2 * np.spacing(x) * 1e15) + np.sum(np.nextafter(x, 0) ** 2),
    "heaviside_copysign": lambda x: np.sum(np.heaviside(x, 0.5) * x**2) + np.sum(np.copysign(1.0, x) * x),
    "bincount_floor": lambda x: np.sum(np.bincount(np.floor(np.abs(x)).astype(int), weights=x, minlength=4) ** 2),
    "interp_traced_xp": lambda x: np.sum(np.interp(np.array([0.5, 1.5]), np.sort(x), x**2)),
    "matrix_rank": lambda x: np.sum(x**2)
    * np.linalg.matrix_rank(np.outer(x[:2], x[2:]) + np.diag(np.round(x[:2]))),
    "round_decimals": lambda x: np.sum(np.round(x, 1) * x**2),
    "isclose_where": lambda x: np.sum(np.where(np.isclose(x, 0.7), 1.0, x) ** 2),
    "accumulate_reduce_initial": lambda x: np.sum(np.maximum.accumulate(x) ** 2) + np.minimum.reduce(x) ** 3
    + np.max(x, initial=0.5) ** 2,
    "fmax_nan_reductions": lambda x: np.sum(np.fmax(x, 0.5) ** 2) + np.nanmax(x) ** 2 + np.nanmean(x) ** 2,
    "str_format_repr": lambda x: np.sum(x**2) * (len(str(x)) + len(repr(x[1])) + (f"{x[0]:.1f}" == "0.3")),
    "divmod_floor_divide": lambda x: np.sum(np.divmod(x, 0.5)[1] ** 2 * np.divmod(x, 0.5)[0])
    + np.sum((x // 0.5) * x**2),
    "astype_int": lambda x: np.sum(x**2 * x.astype(np.int64)) + np.sum(x * (x * 10).astype(np.int8)),
}
READER_INPUTS = [X, -X, np.array([0.0, 1.0, 2.0, 0.0]), np.array([0.7, 0.7, -0.0, 2.0]),
                 np.array([np.nan, 1.0, 2.0, 0.3]), np.array([-0.0, 0.0, 1.0, -1.0]), X * 2, X]


@pytest.mark.parametrize("make", [tg.grad, tg.hessian], ids=_id)
@pytest.mark.parametrize("name", list(READERS))
def test_value_readers(name, make):
    reused = steps(make, READERS[name], [(x,) for x in READER_INPUTS])
    assert reused.reuse_stats.refused is None


def _slogdet(x):
    sign, logdet = np.linalg.slogdet(x.reshape(2, 2))
    return sign * logdet


@pytest.mark.parametrize("make", [tg.grad, tg.hessian], ids=_id)
def test_slogdet_at_a_singular_matrix(make):
    """At a singular matrix eager mode raises LinAlgError (slogdet's VJP inverts); so must reuse.  The
    first-order recording made there does not replay: it is not kept (it used to refuse the function
    for good), and later calls are replayed again."""
    singular = np.array([-0.0, 0.0, 1.0, -1.0])
    reused, eager = make(_slogdet, reuse=True), make(_slogdet)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        warnings.simplefilter("error", ReuseWarning)
        for x in (X, X * 2):
            agree(reused, eager, [x])
        with pytest.raises(np.linalg.LinAlgError):
            reused(singular)
        for x in (X, X * 3, singular, X * 4):
            agree(reused, eager, [x])
    assert reused.reuse_stats.refused is None and reused.reuse_stats.replays >= 2, reused.reuse_stats


# ============================================================ arguments: ints, pytrees, argnums, keywords
def _power_n(x, n):
    return np.sum(x**n) + n * np.sum(np.sin(x)) + np.sum(x[:n])


@pytest.mark.parametrize("make", SECOND, ids=_id)
def test_python_int_argument_changes(make):
    """n = 3, np.int64(3), 3.0 and True compare equal; each is its own program (x[:3.0] raises)."""
    steps(_api(make), _power_n, [(X, 2), (X, 3), (X * 2, 3), (X, 2), (X, np.int64(3)), (X, 3.0), (X, True), (X, 3)])


def _tree_loss(p, data):
    loss = np.sum(p["w"] * data) ** 2 + np.sum(np.tanh(p["b"][0]) * p["b"][1])
    return loss, {"n": p["w"].size, "m": np.max(p["w"]), "k": np.argmax(p["w"])}


def test_dict_list_pytree_with_aux():
    p1 = {"w": X.copy(), "b": [np.array([0.1, 0.2]), np.array(1.5)]}
    p2 = {"w": -X, "b": [np.array([0.3, -0.2]), np.array(-1.5)]}
    d = np.arange(4.0)
    calls = [(p1, d), (p2, d), (p1, d * 2), (p1, d), (p2, d)]
    for make in (tg.grad, tg.value_and_grad):
        reused = steps(make, _tree_loss, calls, has_aux=True)
        assert reused.reuse_stats.replays >= 1


def _three(a, b, c):
    return np.sum(a * b**2) + np.sum(c) * np.sum(a) + np.sum(np.sin(a * c))


@pytest.mark.parametrize("argnums", [(0, 2), (2, 0), (1,), (0, 1, 2)])
@pytest.mark.parametrize("make", [tg.grad, tg.value_and_grad, tg.hessian], ids=_id)
def test_argnums_tuples(make, argnums):
    calls = [(X, X * 2, X), (X, -X, X), (X, X, X * 3), (X, X * 2, X)]
    steps(make, _three, calls, argnums=argnums)


def test_jacobian_argnums_aux_chunks_and_tree_outputs():
    steps(tg.jacobian, lambda a, b: a * b + np.sin(a), [(X, X * 2), (-X, X), (X, X)], argnums=(0, 1))

    def vf(x):
        return np.sin(x) * x[np.argmax(x)], {"m": np.max(x), "k": np.argmax(x)}

    for kw in ({"has_aux": True}, {"has_aux": True, "chunk_size": 2}):
        steps(tg.jacobian, vf, [(X,), (X * 2,), (-X,), (X,)], **kw)
    steps(tg.jacobian, lambda x: {"a": np.sin(x), "b": [x[0] * x[1], np.cumsum(x)]}, [(X,), (X * 2,), (X,)])


def _keywords(x, scale=1.0, mode="a", shift=None):
    y = x * scale
    if mode == "b":
        y = np.sin(y)
    if shift is not None:
        y = y + shift
    return np.sum(y**3)


@pytest.mark.parametrize("make", SECOND, ids=_id)
def test_keywords_that_change(make):
    calls = [((X,), {}), ((X,), {"scale": 2.0}), ((X,), {"mode": "b"}), ((X,), {"shift": np.ones(4)}),
             ((X,), {"shift": np.zeros(4)}), ((X,), {"shift": -np.zeros(4)}), ((X,), {"scale": -0.0}),
             ((X,), {"scale": 0.0}), ((X,), {"scale": np.float32(2.0)}), ((X,), {})]
    reused = steps(_api(make), _keywords, calls)
    assert reused.reuse_stats.replays >= 1


def test_hessian_of_pytrees_and_scalar_kinds():
    steps(tg.hessian, lambda p: np.sum(p["a"] ** 2 * p["b"] ** 3) + np.sum(np.sin(p["a"] * p["b"])),
          [({"a": X, "b": X * 2},), ({"a": -X, "b": X},), ({"a": X, "b": X * 2},)])
    steps(tg.hessian, lambda x: np.sum(x**3) * np.cos(np.sum(x)),
          [(X,), (np.float32(0.5),), (0.5,), (np.array(0.5),), (np.float64(0.5),), (X,)])


def test_result_types_are_eager_types():
    """np.float64 against a 0-d array, a str or an int in aux: types must be eager's too."""
    progs = [
        (lambda x: np.sum(x**2), False),
        (lambda x: np.ravel(x)[0] ** 2 + 1.0, False),
        (lambda x: (np.sum(x**2), {"i": x.size, "f": 1.5, "a": np.arange(3), "t": np.ravel(x)[-1], "s": str(x.shape),
                                   "n": np.float64(2.0)}), True),
        (lambda x: np.float64(3.0) + 0 * np.sum(x), False),
        (lambda x: np.sum(np.floor(x)), False),
        (lambda x: np.sum(x.astype(np.float32) ** 2), False),
    ]
    for fun, aux in progs:
        for make in (tg.value_and_grad, tg.grad):
            reused, eager = make(fun, reuse=True, has_aux=aux), make(fun, has_aux=aux)
            for arg in (X, X * 2, np.array(0.5), np.array(1.5), np.float64(0.5), np.float64(1.5), X):
                r, e = reused(arg), eager(arg)
                assert strict(r, e), (r, e)
            assert reused.reuse_stats.replays >= 1


# ============================================================ the function's world
class _Model:
    def __init__(self):
        self.w = np.arange(4.0)

    def loss(self, x):
        return np.sum(self.w * x**3)

    def __call__(self, x):
        return np.sum(np.tanh(self.w * x) * x)


@pytest.mark.parametrize("make", SECOND, ids=_id)
def test_attribute_array_written_in_place_never_silently_stale_in_check_mode(make):
    """Documented as frozen (attributes of objects): grad happens to follow an attribute array written in
    place (its node holds that array), hessian/hvp do not.  Under reuse='check' a reused call is then
    either eager's result or a ReuseMismatchError, never a silent stale number."""
    for pick in (lambda m: m.loss, lambda m: m):
        model = _Model()
        reused, eager = _api(make)(pick(model), reuse="check"), _api(make)(pick(model))
        assert same(reused(X), eager(X))
        model.w[0] = 5.0
        model.w[3] = -1.0
        for x in (X, X * 2):
            try:
                r = reused(x)
            except ReuseMismatchError:
                continue
            assert same(r, eager(x))


def test_bound_method_attribute_rebound_is_caught_by_check_mode():
    """Documented as frozen (attributes of objects): reuse='check' must say so."""
    model = _Model()
    g = tg.grad(model.loss, reuse="check")
    assert same(g(X), tg.grad(model.loss)(X))
    model.w = np.ones(4)
    with pytest.raises(ReuseMismatchError):
        g(X)


@functools.lru_cache(maxsize=None)
def _coefficients(n):
    c = np.arange(1.0, n + 1)
    c.flags.writeable = False
    return c


def _uses_lru_cache(x):
    return np.sum(_coefficients(x.size) * x**2) + np.sum(_coefficients(2) * x[:2])


@pytest.mark.parametrize("make", SECOND, ids=_id)
def test_lru_cached_helper(make):
    steps(_api(make), _uses_lru_cache, [(X,), (X * 2,), (np.ones(3),), (X,), (np.ones(5),), (X,)])


def _generator_expression(x):
    return sum((x[i] ** 2 for i in range(x.size) if x[i] > 0), start=x[0] * 0) + np.sum(np.fromiter(
        (k * 1.0 for k in range(x.size)), float) * x)


@pytest.mark.parametrize("make", SECOND, ids=_id)
def test_generator_expressions(make):
    steps(_api(make), _generator_expression, [(X,), (-X,), (X * 2,), (X,)])


def _uses_pow(x):
    return np.sum(pow(x, 2))


# Minimal reproduction:
#   def f(x): return np.sum(pow(x, 2))
#   g = tg.grad(f, reuse=True); g(X)
#   globals()["pow"] = lambda a, b: a ** 3     # a module global now shadows the builtin
#   g(X)  # 2 * X (the builtin replayed); eager: 3 * X**2
def test_builtin_shadowed_by_a_later_global():
    def shadow():
        globals()["pow"] = lambda a, b: a**3

    try:
        steps(tg.grad, _uses_pow, [(X,), shadow, (X,), (X * 2,)])
    finally:
        globals().pop("pow", None)


def _scaled(x, w, scale=1.0):
    return np.sum(w * x**3) * scale


# Minimal reproduction:
#   p = functools.partial(lambda x, w: np.sum(w * x**3), w=np.arange(4.0))
#   g = tg.grad(p, reuse=True); g(X)
#   p.keywords["w"] = np.ones(4)
#   g(X)  # [0, 4.32, 24, 4.41] (w = arange(4) replayed); eager [0.27, 4.32, 12, 1.47]
@pytest.mark.parametrize("make", [tg.grad, tg.hessian], ids=_id)
def test_partial_keywords_rebound_in_place(make):
    p = functools.partial(_scaled, w=np.arange(4.0), scale=2.0)
    steps(make, p, [(X,), lambda: p.keywords.__setitem__("w", np.ones(4)), (X,),
                    lambda: p.keywords.__setitem__("scale", 5.0), (X,)])


def _keyword_only(x, *, scale=1.0):
    return np.sum(x**3) * scale


# Minimal reproduction:
#   def f(x, *, scale=1.0): return np.sum(x**3) * scale
#   g = tg.grad(f, reuse=True); g(X); f.__kwdefaults__["scale"] = 4.0
#   g(X)  # 3 * X**2 (scale 1 replayed); eager 12 * X**2
def test_kwdefaults_changed_in_place():
    saved = dict(_keyword_only.__kwdefaults__)
    try:
        steps(tg.grad, _keyword_only, [(X,), lambda: _keyword_only.__kwdefaults__.__setitem__("scale", 4.0), (X,)])
    finally:
        _keyword_only.__kwdefaults__ = saved


# ============================================================ non-differentiated arguments
def _nan_sign(x, c):
    return np.sum(x**2) * np.copysign(1.0, c) + np.sum(x) * np.signbit(c)


# Minimal reproduction:
#   f = lambda x, c: np.sum(x**2) * np.copysign(1.0, c)
#   g = tg.grad(f, reuse=True); g(X, float("nan"))
#   g(X, -float("nan"))  # 2 * X (the +nan recording); eager -2 * X
@pytest.mark.parametrize("kind", ["float", "complex"])
def test_nan_sign_of_a_number_argument(kind):
    nan = float("nan")
    if kind == "float":
        steps(tg.grad, _nan_sign, [(X, nan), (X, -nan), (X, nan)])
    else:
        steps(tg.grad, lambda x, c: np.sum(x**2) * np.copysign(1.0, c.imag), [(X, complex(1, nan)),
                                                                             (X, complex(1, -nan))])


def _clips_data_in_place(x, d):
    np.clip(d, 0.0, None, out=d)  # a no-op on this data, but NumPy refuses it on a read-only array
    return np.sum(x**2 * d)


# Minimal reproduction:
#   def f(x, d): np.clip(d, 0.0, None, out=d); return np.sum(x**2 * d)
#   g = tg.grad(f, reuse=True); g(X, np.ones(4))
#   d = np.ones(4); d.flags.writeable = False
#   g(X, d)  # returns 2 * X; eager raises ValueError (output array is read-only)
@pytest.mark.parametrize("make", [tg.grad, tg.hessian], ids=_id)
def test_read_only_data_argument(make):
    d = np.array([1.0, 2.0, 3.0, 4.0])
    frozen = d.copy()
    frozen.flags.writeable = False
    steps(make, _clips_data_in_place, [(X, d), (X, frozen), (X * 2, frozen)])


def _doubles_data(x, d):
    d *= 2.0
    return np.sum(x**2 * d)


# Minimal reproduction:
#   def f(x, d): d *= 2.0; return np.sum(x**2 * d)
#   g = tg.grad(f, reuse=True); d1, d2 = np.ones(4), np.ones(4)
#   g(X, d1); tg.grad(f)(X, d2)
#   g(X, d1)  # 4 * X (d = 2 replayed, d1 stays 2); eager 8 * X (d2 becomes 4)
# (A global array written by f is snapshotted before the recording and records again.)
def test_function_writing_into_its_data_argument():
    d1, d2 = np.ones(4), np.ones(4)
    reused, eager = tg.grad(_doubles_data, reuse=True), tg.grad(_doubles_data)
    for _ in range(3):
        r, e = reused(X, d1), eager(X, d2)
        assert same(r, e) and same(d1, d2), (r, e, d1, d2)


def _normalises_data(x, d):
    d /= np.linalg.norm(d)  # idempotent after the first call
    return np.sum(x**2 * d)


def test_function_normalising_its_data_argument_idempotently():
    d1, d2 = np.array([3.0, 4.0, 0.0, 0.0]), np.array([3.0, 4.0, 0.0, 0.0])
    reused, eager = tg.grad(_normalises_data, reuse=True), tg.grad(_normalises_data)
    for x in (X, X * 2, X):
        assert same(reused(x, d1), eager(x, d2)) and same(d1, d2)


def test_iterator_argument_is_caught_by_check_mode():
    """An iterator is compared by identity (documented): its next() is frozen; reuse='check' says so."""
    g = tg.grad(lambda x, it: np.sum(x**2) * next(it), reuse="check")
    it = iter([1.0, 2.0, 3.0])
    assert same(g(X, it), 2 * X)
    with pytest.raises(ReuseMismatchError):
        g(X, it)


# ============================================================ writes, out=, in-place on intermediates
def _copyto_input(x):
    np.copyto(x, np.sin(x))
    return np.sum(x**3)


def _out_into_traced(x):
    buf = np.empty_like(x)
    np.sin(x, out=buf)
    np.multiply(buf, x, out=buf)
    np.add(buf, 1.0, out=buf, where=x > 0)
    return np.sum(buf**2)


def _in_place_intermediates(x):
    y = x * 2.0
    y[y > 1] -= 1.0
    y[::2] *= y[1::2]
    y += np.roll(y, 1)
    return np.sum(y**3)


def _writes_masked_input(x):
    x[x < 0] = 0.0
    x[np.argmax(x)] *= 2.0
    return np.sum(x**2 * np.arange(1.0, 5.0))


def _in_place_methods(x):
    y = x * 1.0
    y.sort()
    z = x * 2.0
    z.partition(1)
    w = x * 1.0
    np.putmask(w, w < 0, w**2)
    m = np.outer(x, x)
    np.fill_diagonal(m, x[::-1])
    return np.sum(y * np.arange(1.0, 5.0)) + np.sum(z[:2] ** 2) + np.sum(w**3) + np.sum(m**2)


def _fill_on_a_branch(x):
    y = x * 1.0
    if y[0] > 0:
        y.fill(0.5)
    np.place(y, y > 0.6, [7.0])
    return np.sum(y * x)


WRITES = {
    "copyto_input": (_copyto_input, [X, X * 2, X]),
    "out_into_traced_buffer": (_out_into_traced, [X, -X, X * 2, X]),
    "in_place_intermediates": (_in_place_intermediates, [X, -X, X * 2, X]),
    "writes_masked_input": (_writes_masked_input, [X, -X, X[::-1], X]),
    "in_place_methods": (_in_place_methods, [X, -X, X[::-1], np.array([0.0, -0.0, 1.0, 1.0]), X]),
    "fill_on_a_branch": (_fill_on_a_branch, [X, -X, X * 3, X]),
}


@pytest.mark.parametrize("make", FIRST_SECOND, ids=_id)
@pytest.mark.parametrize("name", list(WRITES))
def test_writes_and_out_arguments(name, make):
    fun, xs = WRITES[name]
    steps(_api(make), fun, [(x.copy(),) for x in xs])  # agree() checks the inputs are not changed


def _copyto_allocated(x):
    y = np.zeros(4)
    np.copyto(y, x * 2.0, where=x > 0)
    return np.sum(y**2 * x)


def _exp_into_allocated(x):
    buf = np.zeros((2, 4))
    np.exp(x, out=buf[0])
    return np.sum(buf * buf[0])


@pytest.mark.parametrize("fun", [_copyto_allocated, _exp_into_allocated])
def test_writes_into_allocated_buffers_replay(fun):
    """copyto(where=) and out= into an array the function allocates (a traced constant): eager, reuse and FD agree."""
    from tests._wrapped_checks import central_jacobian

    for make in (tg.grad, tg.hessian):
        reused = make(fun, reuse=True)
        for x in (X, -X, X[::-1].copy()):
            eager = make(fun)(x)
            np.testing.assert_array_equal(reused(x), eager)
            truth = central_jacobian(fun, x) if make is tg.grad else central_jacobian(tg.grad(fun), x)
            np.testing.assert_allclose(eager, truth, rtol=1e-6, atol=1e-6)


_PLAIN_MADE_ELSEWHERE = np.zeros((2, 4))


def test_unsupported_writes_raise_alike():
    """A traced value written into a plain array the function did not allocate: eager raises, reuse too."""

    def copyto_plain(x):
        y = _PLAIN_MADE_ELSEWHERE[0].copy()
        np.copyto(y, x * 2.0, where=x > 0)
        return np.sum(y**2 * x)

    def exp_into_plain(x):
        buf = _PLAIN_MADE_ELSEWHERE.copy()
        np.exp(x, out=buf[0])
        return np.sum(buf)

    for fun in (copyto_plain, exp_into_plain):
        for make in (tg.grad, tg.hessian):
            reused = make(fun, reuse=True)
            for x in (X, -X):
                with pytest.raises(tg.GradientDroppedError):
                    reused(x)
                with pytest.raises(tg.GradientDroppedError):
                    make(fun)(x)


# ============================================================ dtypes: complex, float32, strides
def _complex_intermediates(x):
    z = x[:2] + 1j * x[2:]
    w = np.exp(z) * np.conj(z) / (1 + z**2)
    return np.sum(np.abs(w) ** 2) + np.real(np.sum(w * w))


def _fft_angle(x):
    f = np.fft.fft(x)
    return np.sum(np.abs(f) ** 2 * np.arange(4.0)) + np.angle(f[1])


def _float32_mix(x):
    return np.sum(np.exp(x * 0.1) * x + np.float32(0.5) * x**2) + np.sum(x, dtype=np.float64) * 1e-3


X32 = X.astype(np.float32)
DTYPES = {
    "complex_intermediates": (_complex_intermediates, [X, -X, X * 2, np.array([0.0, -0.0, 1.0, 0.0]), X]),
    "fft_angle": (_fft_angle, [X, -X, X * 2, X]),
    "float32_mix": (_float32_mix, [X32, X32 * 2, X, X32, np.array([np.nan, 1, 2, 3], np.float32), X32,
                                   np.array([np.inf, -0.0, 1, 2], np.float32), X32]),
}


@pytest.mark.parametrize("make", FIRST_SECOND, ids=_id)
@pytest.mark.parametrize("name", list(DTYPES))
def test_complex_and_float32(name, make):
    fun, xs = DTYPES[name]
    steps(_api(make), fun, [(x,) for x in xs])


def test_complex_inputs_real_output():
    z = np.array([1 + 2j, -0.5 + 0.1j])
    steps(tg.grad, lambda z: np.sum(np.abs(z) ** 2 + np.real(z) * np.imag(z)), [(z,), (z * 1j,), (np.conj(z),), (z,)])
    steps(tg.jacobian, lambda z: np.abs(z) ** 2, [(z,), (z * 1j,), (z,)])


def _strided(x):
    y = x.reshape(-1)
    return np.sum(y[::2] ** 2 * y[1::2]) + np.sum(np.cumsum(x.ravel()) * np.arange(x.size))


@pytest.mark.parametrize("make", SECOND, ids=_id)
def test_strides_and_layouts(make):
    m = np.arange(1.0, 9.0).reshape(2, 4) / 9
    calls = [m[:, :2].copy(), m[:, :2], m[:, ::2], np.asfortranarray(m[:, :2]), m.T[:2], m[:, :2][::-1],
             m[:, :2].copy() * 2, m[:, :2]]
    steps(_api(make), _strided, [(c,) for c in calls])


# ============================================================ reductions with keywords
def _reduction_keywords(x):
    m = x.reshape(2, 2)
    return (np.sum(x, where=x > 0) + np.sum(m, axis=0, keepdims=True)[0, 1] * np.sum(x, initial=5.0)
            + np.sum(x, dtype=np.float32) + m.sum(1)[0] ** 2 + np.sum(x**2, where=np.array([True, False, True, True]))
            + np.add.reduce(x * x, initial=1.0) ** 2 + np.prod(x, where=x < 1)
            + np.mean(x, where=x > 0) ** 2 + np.var(x, ddof=1) + np.std(x, where=x > -1))


@pytest.mark.parametrize("make", FIRST_SECOND, ids=_id)
def test_reductions_with_where_initial_dtype_keepdims(make):
    steps(_api(make), _reduction_keywords, [(X,), (-X,), (X * 2,), (np.array([0.0, 1.0, 2.0, -0.5]),), (X,)])


# ============================================================ error states, warnings, try/except
def _errstate_nan_branch(x):
    with np.errstate(all="ignore"):
        y = np.log(x) * x
    if np.any(np.isnan(y)):
        return np.sum(np.nan_to_num(y, nan=0.0) ** 2)
    return np.sum(y)


@pytest.mark.parametrize("make", SECOND, ids=_id)
def test_errstate_ignore_then_nan_branch(make):
    a = np.abs(X)
    steps(_api(make), _errstate_nan_branch, [(a,), (X,), (a * 2,), (X * 2,), (a,)])


def _branch_on_recorded_warning(x):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = np.sqrt(x)
    if caught:  # sqrt of a negative number warned
        return np.sum(x**2)
    return np.sum(y * x)


# Minimal reproduction:
#   def f(x):
#       with warnings.catch_warnings(record=True) as w:
#           warnings.simplefilter("always"); y = np.sqrt(x)
#       return np.sum(x**2) if w else np.sum(y * x)
#   g = tg.grad(f, reuse=True); g(np.abs(X))
#   g(X)  # [0.82, nan, 2.12, 1.25] (the sqrt path); eager [0.6, -2.4, 4, 1.4] (the warned path)
@pytest.mark.parametrize("make", SECOND, ids=_id)
def test_branch_on_a_recorded_warning(make):
    a = np.abs(X)
    steps(_api(make), _branch_on_recorded_warning, [(a,), (X,), (a * 2,), (X * 2,)])


def _try_float(x):
    try:
        s = float(x[0])  # eager mode refuses a traced float(): the except path every time
    except Exception:  # noqa: BLE001
        s = 2.0
    return np.sum(x**2) * s


def _try_int(x):
    try:
        k = int(x[0] * 3)  # OverflowError at inf, ValueError at NaN
    except (ValueError, OverflowError):
        k = 7
    return np.sum(x ** (k % 3 + 1))


def _try_solve(x):
    a = np.array([[1.0, 0.0], [0.0, 0.0]]) + np.outer(x[:2], x[2:])
    try:
        return np.sum(np.linalg.solve(a, x[:2]) ** 2)
    except np.linalg.LinAlgError:
        return np.sum(np.linalg.lstsq(a, x[:2], rcond=None)[0] ** 2)


def _try_cholesky_jitter(x):
    a = np.outer(x, x) + np.diag(x**2 * 0.0 + 1e-3) * (x[0] > 0)
    jitter = 0.0
    for _ in range(4):
        try:
            c = np.linalg.cholesky(a + jitter * np.eye(4))
            return np.sum(np.log(np.diag(c)))
        except np.linalg.LinAlgError:
            jitter = 1e-2 if jitter == 0.0 else jitter * 10
    return np.sum(a)


TRIES = {
    "try_float": (_try_float, [X, X * 2, X]),
    "try_int_inf_nan": (_try_int, [X, np.array([np.inf, 1, 2, 3.0]), X * 2, np.array([np.nan, 1, 2, 3.0]), X]),
    "try_solve_or_lstsq": (_try_solve, [X, np.array([1.0, 0.0, 0.0, 1.0]), np.array([0.0, 1.0, 1.0, 0.0]), X * 2,
                                        np.array([0.0, 1.0, 1.0, 0.0]), X]),
    "try_cholesky_jitter": (_try_cholesky_jitter, [np.abs(X), -np.abs(X), np.abs(X) * 2, -np.abs(X) * 3,
                                                   np.abs(X)]),
}


@pytest.mark.parametrize("make", SECOND, ids=_id)
@pytest.mark.parametrize("name", list(TRIES))
def test_try_except_inside(name, make):
    fun, xs = TRIES[name]
    steps(_api(make), fun, [(x,) for x in xs])


# ============================================================ recursion and loops on traced values
def _recursion(x, depth=0):
    if np.sum(x**2) < 1.0 or depth > 20:
        return np.sum(np.sin(x))
    return _recursion(x * 0.5, depth + 1) + np.sum(x) * 0.1


def _newton_cube_root(x):
    y = x * 0 + 1.0
    for _ in range(60):
        step = (y**3 - x) / (3 * y**2)
        y = y - step
        if np.max(np.abs(step)) < 1e-12:
            break
    return np.sum(y**2)


def _heron_allclose(x):
    y = np.ones_like(x)
    while not np.allclose(y**2, x, rtol=1e-13, atol=0):
        y = 0.5 * (y + x / y)
    return np.sum(y * np.arange(1.0, 5.0))


AX = np.abs(X) + 0.5
LOOPS = {
    "recursion_depth": (_recursion, [X, X * 3, X * 0.1, X * 10, X]),
    "newton_cube_root": (_newton_cube_root, [AX, AX * 3, AX * 1.0000001, AX]),
    "heron_allclose": (_heron_allclose, [AX, AX * 3, AX * 1.0000001, AX]),
}


@pytest.mark.parametrize("make", SECOND, ids=_id)
@pytest.mark.parametrize("name", list(LOOPS))
def test_recursion_and_loops(name, make):
    fun, xs = LOOPS[name]
    steps(_api(make), fun, [(x,) for x in xs])


# ============================================================ random numbers
def _draws_from(get):
    def fun(x, box):
        return np.sum(x**2 * get(box).standard_normal(x.shape))

    return fun


_Params = collections.namedtuple("_Params", "rng scale")
RNG_BOXES = {
    "tuple": (lambda r: (r,), lambda b: b[0]),
    "dict": (lambda r: {"rng": r}, lambda b: b["rng"]),
    "list": (lambda r: [r], lambda b: b[0]),
    "nested_tuple": (lambda r: ((r,),), lambda b: b[0][0]),
    "namedtuple": (lambda r: _Params(r, 2.0), lambda b: b.rng),
}


# Minimal reproduction:
#   f = lambda x, box: np.sum(x**2 * box[0].standard_normal(4))
#   g = tg.grad(f, reuse=True); b1, b2 = [np.random.default_rng(0)], [np.random.default_rng(0)]
#   g(X, b1); tg.grad(f)(X, b2)
#   g(X, b1)  # repeats the first draw; eager draws again (another gradient)
@pytest.mark.parametrize("make", [tg.grad, tg.hessian], ids=_id)
@pytest.mark.parametrize("box", [
    name
    for name in RNG_BOXES
])
def test_generator_inside_an_argument_container(box, make):
    wrap, get = RNG_BOXES[box]
    fun = _draws_from(get)
    reused, eager = make(fun, reuse=True), make(fun)
    b1, b2 = wrap(np.random.default_rng(0)), wrap(np.random.default_rng(0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ReuseWarning)
        for k in range(3):
            r, e = reused(X, b1), eager(X, b2)
            assert same(r, e), f"call {k}: reuse {r!r}, eager {e!r}"
    assert "random" in (reused.reuse_stats.refused or "")


def test_generator_argument_warns():
    fun = _draws_from(lambda b: b[0])
    reused = tg.grad(fun, reuse=True)
    with pytest.warns(ReuseWarning, match="random"):
        reused(X, (np.random.default_rng(1),))
    assert same(reused(X, (np.random.default_rng(2),)), tg.grad(fun)(X, (np.random.default_rng(2),)))


class _Dropout:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.w = np.linspace(0.5, 2.0, 4)

    def loss(self, x):
        keep = self.rng.random(x.shape) > 0.3
        return np.sum(np.where(keep, self.w * x**2, 0.0))

    def __call__(self, x):
        return np.sum(self.w * x**2 * self.rng.standard_normal(x.shape))


def _make_noise(rng):
    def noise(shape):
        return rng.standard_normal(shape)

    return noise


_NOISE_A = _make_noise(np.random.default_rng(0))
_NOISE_B = _make_noise(np.random.default_rng(0))


def _noisy_a(x):
    return np.sum(x**2 * _NOISE_A(x.shape))


def _noisy_b(x):
    return np.sum(x**2 * _NOISE_B(x.shape))


# Minimal reproduction:
#   class Dropout:
#       def __init__(self): self.rng = np.random.default_rng(0)
#       def loss(self, x): return np.sum(x**2 * self.rng.standard_normal(4))
#   m1, m2 = Dropout(), Dropout(); g = tg.grad(m1.loss, reuse=True)
#   g(X); tg.grad(m2.loss)(X)
#   g(X)  # the first draw again; eager draws anew (no ReuseWarning either)
@pytest.mark.parametrize("where", ["bound_method", "callable_object", "helper_closure"])
def test_generator_reached_through_an_object(where):
    if where == "helper_closure":
        f1, f2 = _noisy_a, _noisy_b
    else:
        m1, m2 = _Dropout(0), _Dropout(0)
        f1, f2 = (m1.loss, m2.loss) if where == "bound_method" else (m1, m2)
    reused, eager = tg.grad(f1, reuse=True), tg.grad(f2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ReuseWarning)
        for k in range(3):
            r, e = reused(X), eager(X)
            assert same(r, e), f"call {k}: reuse {r!r}, eager {e!r}"


def _seeded_from_argument(x, seed):
    rng = np.random.default_rng(seed)
    children = np.random.SeedSequence(seed).spawn(2)
    other = np.random.default_rng(children[1])
    return np.sum(x**2 * rng.standard_normal(x.shape)) + np.sum(x * other.uniform(size=x.shape))


@pytest.mark.parametrize("make", FIRST_SECOND, ids=_id)
def test_generator_created_inside_from_a_seed_argument(make):
    """Deterministic: may be replayed, and must give eager's numbers for each seed."""
    reused = steps(_api(make), _seeded_from_argument, [(X, 1), (X * 2, 1), (X, 2), (X, 1), (X * 3, 2)])
    assert reused.reuse_stats.refused is None and reused.reuse_stats.replays >= 1


# ============================================================ threads
def _threaded_program(x):
    if np.sum(x) > 0:
        y = np.sin(x) * x[np.argmax(x)]
    else:
        y = np.cos(x) ** 2
    return np.sum(y[x > -5.0] ** 2) + np.prod(np.tanh(x[:2]))


def _thread_inputs(n):
    rng = np.random.default_rng(11)
    out = []
    for k in range(n):
        base = np.array([1.0, 2.0, 3.0, 4.0]) + 0.1 * rng.standard_normal(4)
        base = base[[0, 1, 2, 3]] if k % 2 else base[[3, 2, 1, 0]]
        out.append(base if k % 3 else -base)
    return out


@pytest.mark.parametrize("make", [tg.grad, tg.value_and_grad, tg.jacobian, tg.hessian, tg.hvp], ids=_id)
def test_threads_calling_one_reused_function(make):
    fun = _threaded_program if make is not tg.jacobian else (
        lambda x: np.stack([_threaded_program(x), _threaded_program(x[::-1])]))
    inputs = _thread_inputs(24)
    if make is tg.hvp:
        reused, eager = tg.hvp(fun, reuse=True), tg.hvp(fun)
        args = [(x, x[::-1] * 0.5) for x in inputs]
    else:
        reused, eager = make(fun, reuse=True), make(fun)
        args = [(x,) for x in inputs]
    expected = [eager(*a) for a in args]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda k: reused(*args[k % 24]), range(96)))
    for k, g in enumerate(got):
        assert same(g, expected[k % 24]), k
    assert reused.reuse_stats.replays >= 48, reused.reuse_stats


def test_threads_with_their_own_error_states():
    def fun(x):
        return np.sum(1.0 / x + np.log(np.abs(x)) * x)

    reused, eager = tg.grad(fun, reuse=True), tg.grad(fun)
    reused(np.array([1.0, 2.0]))
    xs = [np.array([1.0 + k, 2.0]) if k % 3 else np.array([0.0, 2.0 + k]) for k in range(48)]

    def work(k):
        state = {"divide": "raise"} if k % 2 else {"all": "ignore"}
        with np.errstate(**state):
            out = []
            for f in (reused, eager):
                try:
                    out.append(f(xs[k]))
                except FloatingPointError:
                    out.append("raised")
            return out

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        results = list(pool.map(work, range(48)))
    for k, (r, e) in enumerate(results):
        assert (isinstance(r, str) and r == e) or same(r, e), k
    assert sum(r == "raised" for r, _ in results if isinstance(r, str)) == 8


# ============================================================ hvp: the vector and extra arguments
def test_hvp_vectors_of_every_kind():
    def fun(x):
        return np.sum(np.sin(x) * x**2) + np.prod(x[:2])

    v = np.linspace(-1.0, 1.0, 4)
    vectors = [v, v.astype(np.float32), v + 0j, list(v), np.array([np.nan, 0, 1, 2]), v[::-1], 2.0, np.float64(1.0),
               np.broadcast_to(np.float64(1.0), (4,)), v.reshape(4, 1), -np.zeros(4), v]
    reused, eager = tg.hvp(fun, reuse=True), tg.hvp(fun)
    for vec in vectors:
        for x in (X, X * 2):
            agree(reused, eager, [x, vec], what=f"v={vec!r}")
    assert reused.reuse_stats.replays >= 10


def test_hvp_extra_arguments():
    def fun(x, d, k=1):
        return np.sum(np.sin(x) * x**2 * d) + k * np.sum(x[:k] ** 3)

    v = np.linspace(-1.0, 1.0, 4)
    d = np.arange(4.0)
    steps(tg.hvp, fun, [((X, v, d), {}), ((X * 2, v, d), {}), ((X, v, d * 2), {}), ((X, v, d), {"k": 3}),
                        ((X, v, d), {})])


# ============================================================ integer outputs of multi-output primitives
def _lstsq_rank_branch(x):
    sol, res, rank, s = np.linalg.lstsq(x.reshape(2, 2), np.ones(2), rcond=None)
    return np.sum(sol**2) if rank == 2 else np.sum(s**2)


def _frexp_exponent(x):
    m, e = np.frexp(x)
    return np.sum(x * e) + np.sum(m**2)


# Minimal reproduction:
#   f = lambda x: np.sum(x * np.frexp(x)[1])
#   g = tg.grad(f, reuse=True); g(X)
#   g(X * 4)  # [-1, 1, 2, 0] (X's exponents); eager [1, 3, 4, 2]
# and, for lstsq:
#   def f(x):
#       sol, res, rank, s = np.linalg.lstsq(x.reshape(2, 2), np.ones(2), rcond=None)
#       return np.sum(sol**2) if rank == 2 else np.sum(s**2)
#   g = tg.grad(f, reuse=True); g(X)
#   g(np.array([1.0, 2, 2, 4]))  # [-0.0019, ...] (the rank-2 path); eager [2, 4, 4, 8]
@pytest.mark.parametrize("name", ["frexp_exponent", "lstsq_rank_branch"])
def test_integer_outputs_of_numpy_multi_output_calls(name):
    fun, xs = {
        "frexp_exponent": (_frexp_exponent, [X, X * 4, X]),
        "lstsq_rank_branch": (_lstsq_rank_branch, [X, np.array([1.0, 2.0, 2.0, 4.0]), X]),
    }[name]
    steps(tg.grad, fun, [(x,) for x in xs])


LU_A = np.array([4.0, 1, 2, 1, 3, 0, 2, 0, 5])  # pivots [0 1 2]
LU_B = np.array([1.0, 1, 2, 4, 3, 0, 2, 0, 5])  # pivots [1 2 2]
LU_C = np.array([0.1, 1, 2, 1, 3, 0, 6, 0, 5])  # pivots [2 1 2]


def _lu_factor_solve(x):
    import scipy.linalg as sl

    lu, piv = sl.lu_factor(x.reshape(3, 3))
    return np.sum(sl.lu_solve((lu, piv), np.array([1.0, 2.0, 3.0])) ** 2)


def _qr_pivoting(x):
    import scipy.linalg as sl

    q, r, p = sl.qr(x.reshape(3, 3), pivoting=True)
    return np.sum(np.abs(np.diag(r)) * p)


def _schur_sdim(x):
    import scipy.linalg as sl

    return sl.schur(x.reshape(3, 3), sort="lhp")[2] * np.sum(x**2)


# Minimal reproduction:
#   f = lambda x: np.sum(sl.lu_solve(sl.lu_factor(x.reshape(3, 3)), np.array([1.0, 2.0, 3.0])) ** 2)
#   g = tg.value_and_grad(f, reuse=True); g(LU_A)
#   g(LU_B)[0]  # 10.2318... (LU_A's pivots [0 1 2] applied to LU_B's factors); eager 0.79584...
@pytest.mark.parametrize("make", [tg.grad, tg.hessian], ids=_id)
@pytest.mark.parametrize("name", ["lu_factor_solve", "qr_pivoting", "schur_sdim"])
def test_integer_outputs_of_scipy_factorizations(name, make):
    pytest.importorskip("scipy.linalg")
    fun = {"lu_factor_solve": _lu_factor_solve, "qr_pivoting": _qr_pivoting, "schur_sdim": _schur_sdim}[name]
    steps(make, fun, [(LU_A,), (LU_B,), (LU_C,), (LU_A,)])


def test_lu_factor_solve_at_fixed_pivots_is_replayed():
    """The same program while the pivots do not change: replayed, eager's numbers."""
    pytest.importorskip("scipy.linalg")
    reused = steps(tg.value_and_grad, _lu_factor_solve, [(LU_A,), (LU_A * 1.1,), (LU_A + 0.01,), (LU_A,)])
    assert reused.reuse_stats.replays >= 2


# ============================================================ random small programs
_UNARY = ["np.sin({a})", "np.exp(-{a}**2)", "np.tanh({a})", "{a}**2", "{a}**3", "np.abs({a})", "np.sqrt(np.abs({a})+1)",
          "{a}[::-1]", "np.cumsum({a})", "np.roll({a}, 1)", "{a} * np.float32(0.5)", "np.maximum({a}, 0.1)",
          "np.where({a} > 0, {a}, 2*{a})", "np.sort({a})", "{a}.astype(np.float32)", "{a}.astype(np.float64)",
          "np.log1p({a}**2)", "np.mean({a}) * {a}", "np.clip({a}, -1, 1)", "{a}[[0, 0, 1, 2]]",
          "np.concatenate([{a}[:2], {a}[2:]*2])", "np.outer({a}, {a}).sum(0)", "np.max({a}) - {a}",
          "np.prod({a}) + {a}", "({a} + 1j*{a}[::-1])", "np.abs({a} + 1j)", "np.linalg.norm({a}) * {a}",
          "np.diff({a}, prepend=0.0)"]
_BINARY = ["{a} + {b}", "{a} * {b}", "{a} / (1 + {b}**2)", "np.hypot({a}, {b})", "np.arctan2({a}, {b}+2)",
           "np.minimum({a}, {b})", "np.dot({a}, {b}) * {a}", "np.where({a} > {b}, {a}, {b})"]


def _random_program(rnd):
    lines = ["v0 = x"]
    n = rnd.randrange(3, 9)
    for i in range(1, n):
        if rnd.random() < 0.6:
            expr = rnd.choice(_UNARY).format(a=f"v{rnd.randrange(i)}")
        else:
            expr = rnd.choice(_BINARY).format(a=f"v{rnd.randrange(i)}", b=f"v{rnd.randrange(i)}")
        lines.append(f"v{i} = {expr}")
    lines.append("return " + " + ".join(f"np.sum(np.real(v{i}))" for i in range(max(1, n - 3), n)))
    source = "def program(x):\n    " + "\n    ".join(lines)
    namespace = {"np": np}
    exec(source, namespace)  # noqa: S102 - generated from the fixed tables above
    return namespace["program"], source


@pytest.mark.parametrize("seed", range(4))
def test_random_programs(seed):
    rnd = random.Random(seed)
    for k in range(12):
        program, source = _random_program(rnd)
        rng = np.random.default_rng(100 * seed + k)
        dtype = rnd.choice([np.float64, np.float32])
        xs = [rng.normal(size=4).astype(dtype) for _ in range(3)]
        xs.append(xs[0].copy())
        xs[1][0] = rnd.choice([np.nan, np.inf, 0.0, -0.0, 1.0])
        for make in (tg.value_and_grad, tg.hessian, tg.hvp):
            try:
                steps(_api(make), program, [(x,) for x in xs])
            except AssertionError as exc:
                raise AssertionError(f"{source}\n{exc}") from None
