"""``reuse=True`` on the wild programs: every reused call is eager mode's, bit for bit.

The realistic programs of ``tests/test_wild_programs.py`` (NumPy) and
``tests/test_wild_scipy_programs.py`` (SciPy) are differentiated with
``reuse=True`` at their point, at three nearby points (a fixed seed), and at their
point again; each result is compared with eager mode's (the same API without
``reuse``) by its bytes (shape, dtype, signed zeros and NaNs included), and the
inputs must not be mutated.  Scalar programs go through ``value_and_grad`` (and
``grad`` for the NumPy ones), vector programs through ``jacobian``, a subset through
``hessian`` and ``hvp``.  A program is either replayed (``replays > 0``) or refused
with a reason (then eager at every call: fine, see ``REFUSALS`` printed by
``test_summary``).  The only tolerance is for programs whose *eager* result is itself
not reproducible (SciPy's ``onenormest`` and ARPACK draw their own random start
vectors), and only on calls that were not replays.

The second half are adversarial programs written to make a recording stale: Python
branches on traced values, argmax indices, mutated globals / closure cells /
non-differentiated arguments / defaults / ``functools.partial`` arguments, random
numbers, writes into the input, float32, NaN / inf / signed zeros, changed shapes.

Bugs these tests found, each fixed and kept as a test:

* an exception raised by a NumPy call on traced values and caught by Python (a
  ``try: inv(A) except LinAlgError``, ``int`` of a NaN, ``np.errstate(divide="raise")``)
  was no guard: recorded on the except path, later calls replayed that path where eager
  mode takes the other one (tapegrad's own ``det`` VJP catches ``LinAlgError`` at a
  singular matrix).  Such a recording is now answered and not kept
  (``ReuseStats.unkept``);
* ``hessian``/``hvp`` with ``reuse=True`` did not guard a ``functools.partial``'s
  arguments (the guards did not follow ``__wrapped__``);
* ``np.sum(x, 1)`` (a positional axis) was refused: the compiled sum VJP read only a
  keyword ``axis``.
"""

from __future__ import annotations

import collections
import functools
import warnings

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.reuse import ReuseWarning
from tests import test_wild_programs as W

try:
    import scipy  # noqa: F401
except ImportError:  # pragma: no cover
    S = None
else:
    from tests import test_wild_scipy_programs as S


# ---------------------------------------------------------------------- helpers
def same(a, b) -> bool:
    """Bit for bit through tuples, lists and dicts: type of container, shape, dtype and bytes."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype == object:
        return False
    return a.tobytes() == b.tobytes() and np.array_equal(a, b, equal_nan=True)


def close(a, b) -> bool:
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(close(x, y) for x, y in zip(a, b))
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and np.allclose(a, b, rtol=1e-9, atol=1e-12, equal_nan=True)


def _copy(a):
    return np.array(a, copy=True) if isinstance(a, np.ndarray) else a


def _unchanged(args, before):
    for a, b in zip(args, before):
        if isinstance(a, np.ndarray):
            assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), "an input was mutated"


class Raised(collections.namedtuple("Raised", "type")):
    """A call that raised (eager and reuse must raise alike)."""


def _call(fun, args, kwargs=None):
    try:
        return fun(*args, **(kwargs or {}))
    except Exception as exc:  # noqa: BLE001
        return Raised(type(exc))


def _raised(r) -> bool:
    return type(r) is Raised


def agree(reused, eager, args, kwargs=None, what=""):
    """One call of each; the reused result must be eager mode's (a raise must be the same raise)."""
    before = [_copy(a) for a in args]
    replays = reused.reuse_stats.replays
    r = _call(reused, args, kwargs)
    _unchanged(args, before)
    e = _call(eager, args, kwargs)
    _unchanged(args, before)
    if _raised(r) or _raised(e):
        assert _raised(r) and _raised(e) and r.type is e.type, f"{what}: reuse {r!r}, eager {e!r}"
        return r
    if not same(r, e):
        # Only where eager mode itself does not reproduce (a solver's own random start)
        # and this call was not answered from a recording.
        e2 = eager(*args, **(kwargs or {}))
        nondeterministic = not same(e, e2)
        assert nondeterministic and reused.reuse_stats.replays == replays, (
            f"{what}: reuse=True differs from eager mode\nreuse: {r!r}\neager: {e!r}\n{reused.reuse_stats!r}"
        )
        assert close(r, e), what
    return r


def _nearby(args, nums, rng):
    out = []
    for i, a in enumerate(args):
        if i in nums and isinstance(a, np.ndarray) and a.dtype.kind in "fc":
            step = 1e-3 * (1.0 + np.abs(a)) * rng.standard_normal(a.shape)
            out.append(np.array(a + step, dtype=a.dtype))  # 0-d stays an ndarray, float32 stays float32
        else:
            out.append(a)
    return out


def points(args, nums, seed=0):
    """The program's point, three nearby points, the point again."""
    rng = np.random.default_rng(seed)
    return [list(args)] + [_nearby(args, nums, rng) for _ in range(3)] + [list(args)]


# ---------------------------------------------------------------------- the programs
Case = collections.namedtuple("Case", "f args argnums")

CASES = {}
for _n, (_f, _args, _opts) in W.PROGRAMS.items():
    CASES["W." + _n] = Case(_f, list(_args), _opts.get("argnums", 0))
if S is not None:
    for _n, _p in S.PROGRAMS.items():
        CASES["S." + _n] = Case(_p.fn, [_p.x], 0)

W_SCALAR = {"W." + n for n in W.SCALAR_NAMES}

#: reuse_stats of every program and API, for test_summary.
STATS: dict = {}


def _is_scalar(name, case):
    if name.startswith("W."):
        return name in W_SCALAR
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.ndim(case.f(*[_copy(a) for a in case.args])) == 0


def _nums(argnums):
    return argnums if isinstance(argnums, tuple) else (argnums,)


def run_program(name, make, args_of=None, **kw):
    case = CASES[name]
    reused = make(case.f, reuse=True, **kw)
    eager = make(case.f, **kw)
    nums = _nums(kw.get("argnums", 0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # RuntimeWarnings of the programs, the ReuseWarning of a refusal
        for k, p in enumerate(points(case.args, nums)):
            agree(reused, eager, args_of(p) if args_of else p, what=f"{name} {make.__name__} call {k}")
    st = reused.reuse_stats
    STATS[(name, make.__name__)] = (st.recordings, st.rerecordings, st.replays, st.eager, st.refused, st.unkept)
    assert st.replays > 0 or st.refused, f"{name}: neither replayed nor refused: {st!r}"
    if st.refused:
        assert isinstance(st.refused, str) and st.refused.strip()
    return reused


@pytest.mark.parametrize("name", list(CASES))
def test_first_order(name):
    case = CASES[name]
    scalar = _is_scalar(name, case)
    make = tg.value_and_grad if scalar else tg.jacobian
    run_program(name, make, argnums=case.argnums)


@pytest.mark.parametrize("name", sorted(W_SCALAR))
def test_grad_numpy_programs(name):
    run_program(name, tg.grad, argnums=CASES[name].argnums)


# Hessians: every scalar NumPy program with one argument (bar one slow loop) and a
# spread of SciPy ones; hvp: a few of each.
HESSIAN = sorted(
    n for n in W_SCALAR if CASES[n].argnums == 0 and n != "W.adaptive_euler_heun"
) + [
    "S." + n
    for n in (
        "negbin_nll", "beta_binomial", "probit_erf", "gaussian_mixture", "logsumexp_weighted", "softmax_regression",
        "von_mises", "matern_bessel", "pendulum_ellipk", "hurwitz_trigamma", "dirichlet_digamma", "normal_nll",
        "student_t_regression", "gamma_mle", "poisson_glm", "frozen_normal", "mvn_mean_cov", "kl_entropy",
        "weibull_mle", "expm", "gp_cho", "eigh", "svd", "inv_det", "complex_solve_inv", "complex_eigh",
        "trapezoid_simpson", "cubic_spline", "interp1d", "regular_grid_linear", "signal_pipeline", "cdist_pdist",
        "ndimage_filters", "map_coordinates", "special_grab_bag", "lambertw", "discrete_stats", "dirichlet",
        "general_eig", "lstsq_pinv", "banded", "fft", "norm_list_of_params", "simpson_traced_x",
        "affine_transform_matrix_hessian", "rotate_angle_hessian", "special_comb_factorial",
    )
    if S is not None and n in S.PROGRAMS
]
HVP = [
    "W.spring_network", "W.lennard_jones", "W.logsumexp_by_hand", "W.python_branching", "W.sort_argsort_indexing",
    "W.clip_mask_fancy", "W.min_max_argmax", "W.nanstats", "W.det_at_singular_matrix",
] + ["S." + n for n in ("negbin_nll", "gp_cho", "eigh", "cubic_spline", "special_grab_bag", "complex_eigh", "fft")
     if S is not None and n in S.PROGRAMS]


@pytest.mark.parametrize("name", HESSIAN)
def test_hessian(name):
    run_program(name, tg.hessian)


@pytest.mark.parametrize("name", HVP)
def test_hvp(name):
    x = CASES[name].args[0]
    v = np.linspace(-1.0, 1.0, x.size).reshape(x.shape)
    run_program(name, tg.hvp, args_of=lambda p: [p[0], v])


@pytest.mark.parametrize("name", W.FLOAT32_PROGRAMS)
def test_float32_programs(name):
    case = CASES["W." + name]
    args32 = [case.args[0].astype(np.float32)] + case.args[1:]
    scalar = "W." + name in W_SCALAR
    for make in (tg.value_and_grad, tg.hessian) if scalar else (tg.jacobian,):
        reused, eager = make(case.f, reuse=True), make(case.f)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for k, p in enumerate(points(args32, (0,), seed=1)):
                assert p[0].dtype == np.float32
                agree(reused, eager, p, what=f"{name} float32 {make.__name__} call {k}")
            # then float64 (another signature) and float32 again
            agree(reused, eager, [case.args[0]] + case.args[1:], what=f"{name} float64")
            agree(reused, eager, args32, what=f"{name} float32 again")
        assert reused.reuse_stats.replays > 0 or reused.reuse_stats.refused


# NaN, inf, -inf and signed zeros in the inputs (programs through an SVD are left
# out: LAPACK's SVD with vectors does not return on an inf matrix, eager mode too).
_NO_INF = {"W.norms_variety", "W.svd_nuclear", "W.qr_lstsq_pinv"}


@pytest.mark.parametrize("name", sorted(n for n in CASES if n.startswith("W.") and n not in _NO_INF))
def test_nan_inf_signed_zero_inputs(name):
    case = CASES[name]
    x0 = case.args[0]
    xs = [x0]
    for value, where in ((np.nan, 0), (np.inf, 1), (-np.inf, -1), (0.0, 0), (-0.0, 1)):
        x = x0.copy()
        x.flat[where % x.size] = value
        xs.append(x)
    xs.append(x0)
    make = tg.value_and_grad if name in W_SCALAR else tg.jacobian
    reused, eager = make(case.f, reuse=True, argnums=case.argnums), make(case.f, argnums=case.argnums)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k, x in enumerate(xs):
            agree(reused, eager, [x] + case.args[1:], what=f"{name} non-finite call {k}")


# ---------------------------------------------------------------------- adversarial programs
X = np.array([0.3, -1.2, 2.0, 0.7])
SECOND = (tg.grad, tg.hessian)


def steps(make, fun, calls, **kw):
    """Run ``calls`` (argument tuples, or callables run between calls) on reused and eager; return the reused."""
    reused, eager = make(fun, reuse=True, **kw), make(fun, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k, c in enumerate(calls):
            if callable(c):
                c()
                continue
            args, kwargs = (c, {}) if not (len(c) == 2 and isinstance(c[1], dict)) else c
            agree(reused, eager, list(args), kwargs, what=f"{getattr(fun, '__name__', fun)} {make.__name__} step {k}")
    return reused


def _api(make):
    """hvp takes (x, v): adapt one-argument calls."""
    if make is not tg.hvp:
        return make

    def hvp_make(fun, **kw):
        inner = tg.hvp(fun, **kw)

        def call(x, *rest, **kwargs):
            return inner(x, np.linspace(-1.0, 1.0, np.size(x)).reshape(np.shape(x)), *rest, **kwargs)

        call.reuse_stats = getattr(inner, "reuse_stats", None)
        return call

    hvp_make.__name__ = "hvp"
    return hvp_make


APIS = [tg.grad, tg.value_and_grad, tg.jacobian, tg.hessian, tg.hvp]


def _branch(x):
    if x.sum() > 0:
        return np.sum(np.sin(x) * x)
    return np.sum(np.cos(x) * x**2)


def _argmax_index(x):
    return x[np.argmax(x)] ** 3 + np.sum(x**2)


def _python_loop_compare(x):
    return sum((v**2 if v > 0 else v**3) for v in x)


def _int_range(x):
    return sum(x[i] ** 2 for i in range(int(abs(x[2])) + 1))


def _mask(x):
    return np.sum(x[x > 0] ** 3) + np.sum(np.where(x < 1, x, 2 * x) ** 2)


def _sort_and_floor(x):
    return np.sum(np.sort(x) * np.arange(1.0, 5.0)) + np.sum(x**2 * np.floor(x))


def _nan_check(x):
    y = np.log(x)
    if np.isnan(y).any():
        return np.sum(np.nan_to_num(y))
    return np.sum(y**2)


def _signbit(x):
    return np.sum(np.where(np.signbit(x), 2 * x**2 + x, x**2 - x))


VALUE_GUARDS = {
    "branch_on_sum": (_branch, [X, -X, X, -X, X * 2]),
    "argmax_index": (_argmax_index, [X, X[::-1].copy(), X + [3.0, 0, 0, 0], X]),
    "python_loop_compare": (_python_loop_compare, [X, -X, X]),
    "range_of_int": (_int_range, [X, X * 1.8, X]),
    "mask_and_where": (_mask, [X, -X, X * 0.1, X]),
    "sort_and_floor": (_sort_and_floor, [X, -X, X * 3, X]),
    "nan_check_branch": (_nan_check, [np.abs(X), X, np.abs(X)]),
    "signbit_of_zero": (_signbit, [np.zeros(4), -np.zeros(4), np.zeros(4)]),
}


@pytest.mark.parametrize("make", APIS, ids=lambda m: m.__name__)
@pytest.mark.parametrize("name", list(VALUE_GUARDS))
def test_value_guards(name, make):
    fun, xs = VALUE_GUARDS[name]
    if make is tg.jacobian:
        fun = (lambda f: lambda x: np.stack([f(x), f(x) * 2.0]))(fun)
    reused = steps(_api(make), fun, [(x,) for x in xs])
    assert reused.reuse_stats.refused is None
    assert reused.reuse_stats.rerecordings >= 1  # the other branch was recorded, not replayed stale


def test_conversion_to_python_raises_alike():
    """float(), .item(), .tolist() of a tracer: eager raises; the reused call raises the same."""
    for fun in (
        lambda x: np.sum(x**2) * float(np.sum(x)),
        lambda x: np.sum(x**2) * x[0].item(),
        lambda x: sum(x.tolist()) + np.sum(x),
    ):
        steps(tg.grad, fun, [(X,), (X * 2,)])


G_ARRAY = np.array([1.0, 2.0, 3.0, 4.0])
G_SCALE = 2.0


def _reads_global_array(x):
    return np.sum(G_ARRAY * x**2) * G_SCALE


@pytest.mark.parametrize("make", APIS, ids=lambda m: m.__name__)
def test_global_array_mutated_and_global_rebound(make):
    global G_SCALE
    saved = (G_ARRAY.copy(), G_SCALE)

    def mutate():
        G_ARRAY[0] = 7.0

    def rebind():
        global G_SCALE
        G_SCALE = -3.0

    fun = _reads_global_array if make is not tg.jacobian else (lambda x: G_ARRAY * x**2 * G_SCALE)
    try:
        reused = steps(_api(make), fun, [(X,), (X * 2,), mutate, (X,), (X * 2,), rebind, (X,)])
    finally:
        G_ARRAY[:] = saved[0]
        G_SCALE = saved[1]
    assert reused.reuse_stats.rerecordings >= 2


@pytest.mark.parametrize("make", APIS, ids=lambda m: m.__name__)
def test_closure_cell_rebound(make):
    scale = 2.0
    data = np.array([1.0, -1.0, 0.5, 2.0])

    def fun(x):
        return np.sum(np.sin(x) * data) * scale

    def vector_fun(x):  # reads the cells itself (a helper's cells are frozen, see docs/reuse.md)
        return np.sin(x) * data * scale

    def rebind():
        nonlocal scale, data
        scale = 5.0
        data = data[::-1].copy()

    def mutate():
        data[1] = 9.0

    f = fun if make is not tg.jacobian else vector_fun
    reused = steps(_api(make), f, [(X,), (X * 2,), rebind, (X,), mutate, (X,), (X * 2,)])
    assert reused.reuse_stats.rerecordings >= 2


@pytest.mark.parametrize("make", APIS, ids=lambda m: m.__name__)
def test_non_differentiated_argument_mutated_in_place(make):
    data = np.array([1.0, 2.0, 3.0, 4.0])
    lst = [np.ones(4)]
    dct = {"w": np.ones(4)}

    def fun(x, d, l, m, n=2):
        return np.sum(d * np.sin(x) * l[0] * m["w"]) + np.sum(x**n)

    f = fun if make is not tg.jacobian else (lambda x, *a, **k: np.stack([fun(x, *a, **k), fun(-x, *a, **k)]))
    a = (data, lst, dct)
    calls = [
        ((X,) + a, {}),
        lambda: data.__setitem__(1, -3.0),
        ((X,) + a, {}),
        lambda: lst[0].__setitem__(0, 5.0),
        ((X,) + a, {}),
        lambda: dct["w"].__setitem__(3, -2.0),
        ((X,) + a, {}),
        lambda: dct.__setitem__("w", np.zeros(4)),
        ((X,) + a, {}),
        ((X,) + a, {"n": 3}),
        ((X,) + a, {"n": 2}),
    ]
    reused = steps(_api(make), f, calls)
    assert reused.reuse_stats.rerecordings >= 3


@pytest.mark.parametrize("make", APIS, ids=lambda m: m.__name__)
def test_number_arguments_equal_in_value_other_in_bits(make):
    """0.0 and -0.0, 1 and True and 1.0: equal numbers, other results."""

    def fun(x, c):
        return np.sum(x**2) * np.copysign(1.0, c) + np.sum(x * np.array(c).dtype.itemsize)

    f = fun if make is not tg.jacobian else (lambda x, c: np.stack([fun(x, c), fun(x, c) + 1]))
    steps(_api(make), f, [(X, 0.0), (X, -0.0), (X, 0.0), (X, 1), (X, True), (X, 1.0), (X, np.float32(1.0))])


@pytest.mark.parametrize("make", APIS, ids=lambda m: m.__name__)
def test_default_array_mutated_in_place(make):
    w = np.array([1.0, 2.0, 3.0, 4.0])

    def fun(x, w=w):
        return np.sum(w * x**3)

    f = fun if make is not tg.jacobian else (lambda x, w=w: w * x**3)
    reused = steps(_api(make), f, [(X,), lambda: w.__setitem__(0, 9.0), (X,), (X * 2,)])
    assert reused.reuse_stats.rerecordings >= 1


@pytest.mark.parametrize(
    "make",
    [tg.grad, tg.value_and_grad, tg.jacobian, tg.hessian, tg.hvp],
    ids=lambda m: m.__name__,
)
def test_partial_argument_mutated_in_place(make):
    w = np.array([1.0, 2.0, 3.0, 4.0])
    fun = functools.partial(lambda x, w: np.sum(w * x**3), w=w)
    if make is tg.jacobian:
        fun = functools.partial(lambda x, w: w * x**3, w=w)
    steps(_api(make), fun, [(X,), lambda: w.__setitem__(2, 9.0), (X,), (X * 2,)])


@pytest.mark.parametrize(
    "make",
    [tg.grad, tg.value_and_grad, tg.hessian, tg.hvp],
    ids=lambda m: m.__name__,
)
def test_partial_holding_a_generator(make):
    """A Generator in a partial draws at every eager call: the reused function must not replay one draw."""

    def f(x, rng):
        return np.sum(x**3) * rng.standard_normal()

    reused = _api(make)(functools.partial(f, rng=np.random.default_rng(0)), reuse=True)
    eager = _api(make)(functools.partial(f, rng=np.random.default_rng(0)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = [(reused(X), eager(X)) for _ in range(3)]
    for k, (r, e) in enumerate(results):
        assert same(r, e), f"call {k}: reuse {r!r}, eager {e!r}"
    assert reused.reuse_stats.refused is not None


# --------------------------------------------------------------- random numbers
def _global_random(x):
    return np.sum(x * np.random.standard_normal(x.shape))


RNG = np.random.default_rng(5)


def _global_generator(x):
    return np.sum(x**2 * RNG.standard_normal(x.shape))


def _generator_argument(x, rng):
    return np.sum(x**2 * rng.standard_normal(x.shape))


def _seeded_inside(x):
    return np.sum(x**2 * np.random.default_rng(3).standard_normal(x.shape))


@pytest.mark.parametrize("make", APIS, ids=lambda m: m.__name__)
def test_numpy_random_inside_is_refused(make):
    fun = _global_random if make is not tg.jacobian else (lambda x: x * np.random.standard_normal(x.shape))
    reused, eager = _api(make)(fun, reuse=True), _api(make)(fun)
    with pytest.warns(ReuseWarning, match="random"):
        np.random.seed(1)
        r = reused(X)
    np.random.seed(1)
    assert same(r, eager(X))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for seed in (2, 3):
            np.random.seed(seed)
            r = reused(X)
            np.random.seed(seed)
            assert same(r, eager(X))
    assert "random" in reused.reuse_stats.refused
    assert reused.reuse_stats.replays == 0


@pytest.mark.parametrize("make", [tg.grad, tg.hessian, tg.hvp], ids=lambda m: m.__name__)
def test_global_generator_and_generator_argument_are_refused(make):
    reused, eager = _api(make)(_global_generator, reuse=True), _api(make)(_global_generator)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(3):
            state = RNG.bit_generator.state
            r = reused(X)
            RNG.bit_generator.state = state
            assert same(r, eager(X))
        assert "random" in reused.reuse_stats.refused
        reused, eager = _api(make)(_generator_argument, reuse=True), _api(make)(_generator_argument)
        g1, g2 = np.random.default_rng(9), np.random.default_rng(9)
        for _ in range(3):
            assert same(reused(X, g1), eager(X, g2))
        assert "random" in reused.reuse_stats.refused


@pytest.mark.parametrize("make", APIS, ids=lambda m: m.__name__)
def test_seeded_generator_created_inside(make):
    fun = _seeded_inside if make is not tg.jacobian else (lambda x: x * np.random.default_rng(3).random(4))
    steps(_api(make), fun, [(X,), (X * 2,), (X,)])


# ------------------------------------------------------ writes, dtypes, non-finite, shapes
def _writes_into_input(x):
    x[0] = x[1] * 2.0
    x[2:] *= 3.0
    return np.sum(x**2 * np.arange(1.0, 5.0))


@pytest.mark.parametrize("make", APIS, ids=lambda m: m.__name__)
def test_function_writing_into_its_input(make):
    fun = _writes_into_input if make is not tg.jacobian else (lambda x: (_writes_into_input(x), x)[1])
    steps(_api(make), fun, [(X.copy(),), (X * 2,), (X.copy(),), (X * 2,)])  # agree() checks the inputs kept


def _smooth(x):
    return np.sum(np.tanh(x) * x**2) + np.prod(np.cos(x[..., :2]))


@pytest.mark.parametrize("make", APIS, ids=lambda m: m.__name__)
def test_float32_and_float64_alternating(make):
    fun = _smooth if make is not tg.jacobian else (lambda x: np.tanh(x) * x**2)
    x32 = X.astype(np.float32)
    steps(_api(make), fun, [(x32,), (X,), (x32 * 2,), (X * 2,), (x32,), (X.astype(np.float16),)])


@pytest.mark.parametrize("make", APIS, ids=lambda m: m.__name__)
def test_nan_inf_inputs(make):
    def fun(x):
        return np.sum(np.sqrt(x) * x) + np.sum(np.where(x > 0, np.log(np.abs(x) + 1), 0.0))

    f = fun if make is not tg.jacobian else (lambda x: np.sqrt(x) * x)
    a = np.abs(X)
    calls = [a, np.array([np.nan, 1, 2, 3.0]), np.array([np.inf, 1, 2, 3.0]), np.array([0.0, 1, 2, 3.0]),
             np.array([-0.0, 1, 2, 3.0]), np.array([-1.0, 1, 2, 3.0]), a, np.array([np.nan, 1, 2, 3.0])]
    steps(_api(make), f, [(c,) for c in calls])


@pytest.mark.parametrize("make", APIS, ids=lambda m: m.__name__)
def test_changed_shapes_dtypes_and_layouts(make):
    fun = _smooth if make is not tg.jacobian else (lambda x: np.tanh(x) * x**2)
    m = np.arange(1.0, 7.0).reshape(2, 3) / 7
    calls = [X, np.ones(5) * 0.3, m, X, X[::-1], np.asfortranarray(m), m.T, X[::2], np.zeros(0) + 0.5,
             np.array(0.4), X]
    steps(_api(make), fun, [(c,) for c in calls])


# ---------------------------------------------------------- exceptions caught by Python
# A call on traced values that raises, caught by the function, decides a path no guard can
# check; so does an error state the function sets to raise.  Such a recording answers its
# own call and is not kept (ReuseStats.unkept); a kept one that raises in a replay hands the
# call to eager mode.


def _inv_or_fallback(x):
    try:
        return np.sum(np.linalg.inv(np.diag(x)))
    except np.linalg.LinAlgError:
        return np.sum(x**2)


def _cholesky_or_fallback(x):
    a = np.eye(2) * x[0] + np.array([[0.0, 1.0], [1.0, 0.0]]) * x[1]
    try:
        return np.sum(np.linalg.cholesky(a) ** 2)
    except np.linalg.LinAlgError:
        return np.sum(a**3)


def _errstate_raise(x):
    with np.errstate(divide="raise"):
        try:
            return np.sum(1.0 / x)
        except FloatingPointError:
            return np.sum(x**2)


def _int_of_nan_caught(x):
    try:
        k = int(x[0] * 0.0 + np.nanmax(x))  # ValueError when x holds NaN
    except ValueError:
        return np.sum(np.sin(x))
    return np.sum(x**2) * (k % 2 + 1)


def _warning_as_error_caught(x):
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        try:
            return np.sum(np.log(x) * x)
        except RuntimeWarning:
            return np.sum(x**3)


CAUGHT = {
    "inv_or_fallback": (_inv_or_fallback, [np.array([0.0, 1.0]), np.array([2.0, 1.0]), np.array([0.0, 1.0])]),
    "cholesky_or_fallback": (_cholesky_or_fallback, [np.array([1.0, 2.0]), np.array([2.0, 1.0])]),
    "errstate_raise": (_errstate_raise, [np.array([0.0, 1.0]), np.array([2.0, 1.0])]),
    "int_of_nan_caught": (_int_of_nan_caught, [np.array([np.nan, 1.0]), np.array([2.0, 1.0])]),
    "warning_as_error_caught": (_warning_as_error_caught, [np.array([0.0, 1.0]), np.array([2.0, 1.0])]),
}


@pytest.mark.parametrize("make", SECOND, ids=lambda m: m.__name__)
@pytest.mark.parametrize("name", list(CAUGHT))
def test_exception_caught_inside_the_function(name, make):
    """Recorded on the except path: that recording is not kept, so the try path is eager mode's."""
    fun, xs = CAUGHT[name]
    reused = steps(make, fun, [(x,) for x in xs])
    assert reused.reuse_stats.unkept >= 1, reused.reuse_stats


@pytest.mark.parametrize("name", list(CAUGHT))
def test_exception_caught_recorded_on_the_try_path(name):
    """The other order: a replay whose NumPy call raises hands the call to eager mode."""
    fun, xs = CAUGHT[name]
    steps(tg.grad, fun, [(x,) for x in xs[1:2] + xs[:1] + xs[1:2]])


def test_a_function_that_never_raises_is_kept():
    """The watch marks only recordings whose calls raised: the try path alone replays."""
    reused = steps(tg.grad, _inv_or_fallback, [(np.array([2.0, 1.0]),), (np.array([3.0, 1.0]),),
                                               (np.array([4.0, 5.0]),)])
    assert reused.reuse_stats.replays == 2 and reused.reuse_stats.unkept == 0, reused.reuse_stats


def test_errstate_ignore_inside_is_replayed():
    """An error state that only silences (ignore, warn) changes no number: the recording is kept."""

    def fun(x):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.sum(np.where(x > 0, np.log(np.abs(x)), 0.0) * x)

    reused = steps(tg.grad, fun, [(np.array([0.0, 1.0, 2.0]),), (np.array([0.5, 1.0, 2.0]),),
                                  (np.array([0.25, 1.0, 2.0]),)])
    assert reused.reuse_stats.replays >= 1 and reused.reuse_stats.unkept == 0, reused.reuse_stats


def test_caller_errstate_raise_reaches_the_caller():
    """Recorded under the default state, called under np.errstate(divide='raise'): eager mode raises, so must reuse."""
    f = tg.grad(lambda x: np.sum(1.0 / x), reuse=True)
    f(np.array([1.0, 2.0]))
    f(np.array([1.0, 3.0]))
    with np.errstate(divide="raise"), pytest.raises(FloatingPointError):
        f(np.array([0.0, 2.0]))
    with np.errstate(divide="raise"):
        np.testing.assert_array_equal(f(np.array([1.0, 4.0])), -1.0 / np.array([1.0, 4.0]) ** 2)
    assert f.reuse_stats.replays >= 2, f.reuse_stats


@pytest.mark.parametrize("make", [tg.hessian, tg.hvp], ids=lambda m: m.__name__)
def test_det_hessian_recorded_at_a_singular_matrix(make):
    """det's own VJP catches LinAlgError at a singular matrix (cofactors): that recording is not kept."""
    reused = steps(_api(make), lambda m: np.linalg.det(m.reshape(2, 2)),
                   [(np.array([1.0, 2.0, 2.0, 4.0]),), (np.array([1.0, 2.0, 2.0, 4.5]),),
                    (np.array([1.0, 2.0, 2.0, 4.25]),), (np.array([1.0, 2.0, 2.0, 4.0]),)])
    assert reused.reuse_stats.unkept >= 1 and reused.reuse_stats.replays >= 1, reused.reuse_stats


def test_det_first_order_recorded_at_a_singular_matrix():
    for make in (tg.grad, tg.value_and_grad, tg.jacobian):
        f = (lambda m: np.linalg.det(m.reshape(2, 2))) if make is not tg.jacobian else (
            lambda m: np.stack([np.linalg.det(m.reshape(2, 2))] * 2))
        steps(make, f, [(np.array([1.0, 2.0, 2.0, 4.0]),), (np.array([1.0, 2.0, 2.0, 4.5]),),
                        (np.array([1.0, 2.0, 2.0, 4.0]),)])


# ------------------------------------------------------------- needless refusals
@pytest.mark.parametrize("fun", [
    lambda x: np.sum(x[:, None].sum(1)),
    lambda x: np.sum(np.sum(x.reshape(2, 2), 0) ** 2),
    lambda x: np.sum(np.sum(x.reshape(2, 2), -1, None, None, True) ** 3),
    lambda x: np.sum(np.mean(x.reshape(2, 2), 1) * np.prod(x.reshape(2, 2), 0)),
])
def test_sum_with_a_positional_axis_is_replayed(fun):
    """np.sum(x, 1): the compiled sum VJP once read only a keyword axis (W.reshape_transpose_moveaxis was refused)."""
    reused = steps(tg.grad, fun, [(X,), (X * 2,), (X - 1,)])
    assert reused.reuse_stats.refused is None, reused.reuse_stats.refused
    assert reused.reuse_stats.replays == 2, reused.reuse_stats


# ---------------------------------------------------------------------- summary
def test_summary():
    """Counts of replayed and refused programs (run with ``-s`` to read the refusals)."""
    if not STATS:
        pytest.skip("no program ran in this session (run the whole file)")
    replayed = {k for k, v in STATS.items() if v[4] is None}
    refused = collections.defaultdict(list)
    for (name, api), v in STATS.items():
        if v[4] is not None:
            refused[v[4].split(" (")[0] if "does not replay" in v[4] else v[4]].append(f"{name}[{api}]")
    rerecorded = [k for k in replayed if STATS[k][1] >= 3]
    print(f"\nreuse=True on {len({n for n, _ in STATS})} programs, {len(STATS)} (program, API) pairs: "
          f"{len(replayed)} replayed, {sum(map(len, refused.values()))} refused; {len(rerecorded)} of the "
          f"replayed ones recorded again at each nearby point (a guard on a value that moved)")
    unkept = sorted(f"{n}[{a}]" for (n, a), v in STATS.items() if v[5])
    print(f"  recordings not kept (a NumPy call on traced values raised, caught) in {len(unkept)}: {', '.join(unkept)}")
    for reason, names in sorted(refused.items(), key=lambda kv: -len(kv[1])):
        print(f"  refused ({len(names)}): {reason}\n    " + ", ".join(sorted(names)))
    assert len(replayed) > len(STATS) // 2
