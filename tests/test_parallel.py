"""Large element-wise calls split across threads (tapegrad.parallel): same bits, same errors.

The tests shrink the size threshold and force splitting (``SPLIT_NS = 0``) so
that small arrays exercise every path, on any number of CPUs.
"""

import multiprocessing
import sys
import warnings

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import parallel
from tapegrad.registry import RULE_TABLE, RULES
from tapegrad.tape import Tape


@pytest.fixture
def split(monkeypatch):
    """Split every qualifying call of at least 3000 elements across 3 threads."""
    monkeypatch.setattr(parallel, "MIN_SIZE", 3000)
    monkeypatch.setattr(parallel, "SPLIT_NS", 0.0)
    monkeypatch.setattr(parallel, "_COST", {})
    before = parallel.num_threads()
    parallel.set_num_threads(3)
    yield
    parallel.set_num_threads(before)


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint64)


def _values(rng, n, kind):
    v = rng.standard_normal(n) * 3
    v[::97] = 0.0
    v[::89] = -0.0
    v[::101] = np.nan
    v[::103] = np.inf
    v[::107] = -np.inf
    if kind == "positive":
        v = np.abs(v) + 0.25
    return v


def _elementwise_ufuncs(char):
    seen = []
    for rule in RULE_TABLE:
        if rule is not None and rule.elementwise and type(rule.fun) is np.ufunc and rule.fun not in seen:
            if parallel._has_loop(rule.fun, rule.fun.nin, char):
                seen.append(rule.fun)
    return seen


UFUNCS = _elementwise_ufuncs("d")
COMPLEX_UFUNCS = _elementwise_ufuncs("D")


def test_the_element_wise_ufuncs_are_many():
    # the parametrisations below cover the element-wise rules
    assert len(UFUNCS) >= 40 and len(COMPLEX_UFUNCS) >= 20


@pytest.mark.parametrize("ufunc", UFUNCS, ids=lambda u: u.__name__)
def test_split_calls_give_the_bits_of_one_call(split, ufunc):
    rng = np.random.default_rng(0)
    n = 10007  # not a multiple of the chunk alignment: uneven chunks
    operands = [_values(rng, n, "any") for _ in range(ufunc.nin)]
    with np.errstate(all="ignore"):
        expected = ufunc(*operands)
        got = parallel.call(ufunc, operands)
    assert got.dtype == np.float64 and got.shape == expected.shape
    assert np.array_equal(_bits(got), _bits(expected))
    if ufunc.nin == 2:  # a 0-d array and a Python float next to the array, on either side
        for scalar in (np.array(0.75), 0.75):
            for ops in ((operands[0], scalar), (scalar, operands[0])):
                with np.errstate(all="ignore"):
                    assert np.array_equal(_bits(parallel.call(ufunc, ops)), _bits(ufunc(*ops)))


@pytest.mark.parametrize("ufunc", COMPLEX_UFUNCS, ids=lambda u: u.__name__)
def test_split_complex_calls_give_the_bits_of_one_call(split, ufunc):
    rng = np.random.default_rng(4)
    n = 10007
    with np.errstate(all="ignore"):
        operands = [_values(rng, n, "any") + 1j * _values(rng, n, "any")[::-1] for _ in range(ufunc.nin)]
        expected = ufunc(*operands)
        got = parallel.call(ufunc, operands)
    assert got.dtype == np.complex128 and got.shape == expected.shape
    assert np.array_equal(_bits(got.view(np.float64)), _bits(expected.view(np.float64)))
    if ufunc.nin == 2:
        for scalar in (np.array(0.75 - 0.5j), 0.75 - 0.5j, 0.75):
            ops = (operands[0], scalar)
            with np.errstate(all="ignore"):
                got, expected = parallel.call(ufunc, ops), ufunc(*ops)
            assert np.array_equal(_bits(got.view(np.float64)), _bits(expected.view(np.float64)))


def test_strided_and_two_dimensional_operands(split):
    rng = np.random.default_rng(1)
    wide = rng.standard_normal(20000)
    strided = wide[::2]  # 1-D with a stride: flat ranges are views
    grid = rng.standard_normal((100, 70))  # C-contiguous 2-D
    for ufunc, ops in ((np.sin, (strided,)), (np.hypot, (strided, strided[::-1])), (np.cos, (grid,)),
                       (np.arctan2, (grid, grid[::-1].copy()))):
        assert np.array_equal(_bits(parallel.call(ufunc, ops)), _bits(ufunc(*ops)))


def test_what_is_not_split_is_computed_by_numpy_unchanged(split, monkeypatch):
    def refuse(*args):
        raise AssertionError("split a call that must not be split")

    monkeypatch.setattr(parallel, "_run", refuse)
    rng = np.random.default_rng(2)
    x = rng.standard_normal(5000)
    cases = [
        (np.sin, (x.astype(np.float32),)),  # float32: NumPy's own (SIMD) loop choice
        (np.sin, (x[:2000],)),  # below MIN_SIZE
        (np.add, (x, x[:1])),  # broadcasting
        (np.add, (x, 2)),  # a Python int: NumPy's promotion rules decide
        (np.sin, (np.asfortranarray(rng.standard_normal((80, 70))),)),  # not C-contiguous
        (np.ldexp, (x, np.ones(5000, dtype=np.int64))),  # no float64 loop of this arity
        (np.sin, (np.ma.masked_array(x),)),  # a subclass
        (np.multiply, (x, x.astype(np.complex128))),  # mixed dtypes: NumPy casts
        (np.multiply, (x, 0.5j)),  # a complex scalar next to float64: NumPy promotes
        (np.sin, (x.astype(">f8"),)),  # byte-swapped
    ]
    for ufunc, ops in cases:
        got = parallel.call(ufunc, ops)
        expected = ufunc(*ops)
        assert type(got) is type(expected) and got.dtype == expected.dtype
        assert np.array_equal(got, expected, equal_nan=True)


def test_one_thread_never_splits(monkeypatch):
    monkeypatch.setattr(parallel, "MIN_SIZE", 3000)
    monkeypatch.setattr(parallel, "SPLIT_NS", 0.0)
    monkeypatch.setattr(parallel, "_run", lambda *a: pytest.fail("split with one thread"))
    before = parallel.num_threads()
    parallel.set_num_threads(1)
    try:
        x = np.linspace(0, 1, 5000)
        assert np.array_equal(parallel.call(np.sin, (x,)), np.sin(x))
    finally:
        parallel.set_num_threads(before)


@pytest.fixture
def splits_counted(monkeypatch):
    """Two threads, calls of 3000 elements or more eligible, ``add`` measured cheap, ``sin`` costly;
    yields the list that gets one entry per split call."""
    monkeypatch.setattr(parallel, "MIN_SIZE", 3000)
    monkeypatch.setattr(parallel, "_COST", {(np.add, "d"): 0.4, (np.sin, "d"): 9.0})
    calls = []
    real_run = parallel._run
    monkeypatch.setattr(parallel, "_run", lambda *a: calls.append(1) or real_run(*a))
    before = parallel.num_threads()
    parallel.set_num_threads(2)
    yield calls
    parallel.set_num_threads(before)


def test_cheap_loops_are_not_split(splits_counted):
    """Only loops measured (once, on a sample) at SPLIT_NS per element or more are split."""
    calls = splits_counted
    x = np.linspace(0, 1, 5000)
    parallel.call(np.add, (x, x))
    assert calls == []
    parallel.call(np.sin, (x,))
    assert calls == [1]
    got = parallel.call(np.cos, (x,))  # measured now, on a copy of 4096 elements
    cost = parallel._COST[(np.cos, "d")]
    assert cost > 0 and len(calls) == 1 + (cost >= parallel.SPLIT_NS)
    assert np.array_equal(got, np.cos(x))


def test_from_split_any_elements_every_loop_is_split(splits_counted, monkeypatch):
    """A cheap loop (memory-bound) is split too on arrays of SPLIT_ANY elements or more."""
    monkeypatch.setattr(parallel, "SPLIT_ANY", 8000)
    calls = splits_counted
    small, large = np.linspace(0, 1, 5000), np.linspace(0, 1, 8000)
    parallel.call(np.add, (small, small))
    assert calls == []
    got = parallel.call(np.add, (large, -large[::-1]))
    assert calls == [1] and np.array_equal(_bits(got), _bits(large - large[::-1]))


def test_large_cotangent_sums_are_split_with_the_same_bits(split, monkeypatch):
    import tapegrad.backward as backward_module

    monkeypatch.setattr(backward_module, "LARGE", 3000)
    rng = np.random.default_rng(4)
    x, v = rng.standard_normal(9001), rng.standard_normal(9001)

    def f(x):  # x feeds five uses: four sums of cotangents
        return np.sum(np.exp(x) * np.tanh(x) + x * x + np.log1p(x * x) - np.cos(x))

    split_results = (tg.grad(f)(x), tg.hvp(f)(x, v))
    parallel.set_num_threads(1)
    for a, b in zip(split_results, (tg.grad(f)(x), tg.hvp(f)(x, v))):
        assert np.array_equal(_bits(a), _bits(b))

def test_floating_point_errors_are_reported_as_numpy_reports_them(split):
    x = np.linspace(-1.0, 1.0, 9000)  # log of negatives: invalid
    with np.errstate(invalid="ignore"):
        expected = np.log(np.abs(x) - 0.5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = parallel.call(np.log, (np.abs(x) - 0.5,))
    assert np.array_equal(_bits(got), _bits(expected))
    runtime = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(runtime) == 1 and "invalid value encountered in log" in str(runtime[0].message)
    assert "concurrent" not in runtime[0].filename  # warned in this thread, not in a worker
    with np.errstate(invalid="raise"):
        with pytest.raises(FloatingPointError, match="invalid value encountered in log"):
            parallel.call(np.log, (np.abs(x) - 0.5,))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.errstate(invalid="ignore"):
            got = parallel.call(np.log, (np.abs(x) - 0.5,))
    assert np.array_equal(_bits(got), _bits(expected))
    seen = []
    with np.errstate(invalid="call", call=lambda kind, flag: seen.append(kind)):
        parallel.call(np.log, (np.abs(x) - 0.5,))
    assert seen == ["invalid value"]  # once: by the whole call in this thread
    with np.errstate(divide="raise"):  # errors the caller does not watch still split
        assert np.array_equal(_bits(parallel.call(np.sin, (x,))), _bits(np.sin(x)))


def test_set_num_threads_checks_its_argument():
    with pytest.raises(ValueError, match="at least 1"):
        tg.set_num_threads(0)


def test_the_environment_variable_sets_the_default(monkeypatch):
    monkeypatch.setattr(parallel, "_threads", None)
    monkeypatch.setenv("TAPEGRAD_NUM_THREADS", "1")
    assert tg.num_threads() == 1
    monkeypatch.setattr(parallel, "_threads", None)
    monkeypatch.delenv("TAPEGRAD_NUM_THREADS")
    assert 1 <= tg.num_threads() <= 8
    default = tg.num_threads()
    monkeypatch.setattr(parallel, "_threads", None)
    monkeypatch.setenv("TAPEGRAD_NUM_THREADS", "two")
    with pytest.warns(RuntimeWarning, match="TAPEGRAD_NUM_THREADS='two' is not a whole number"):
        assert tg.num_threads() == default


def _child(queue):
    x = np.linspace(0.0, 3.0, 9000)
    queue.put(bool(np.array_equal(parallel.call(np.sin, (x,)), np.sin(x))))


@pytest.mark.skipif(sys.platform != "linux", reason="fork start method")
def test_a_forked_child_gets_a_pool_of_its_own(split):
    x = np.linspace(0.0, 3.0, 9000)
    parallel.call(np.sin, (x,))  # the parent's pool exists now
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child, args=(queue,))
    child.start()
    child.join(60)
    assert child.exitcode == 0, "the child hung or failed on the inherited pool"
    assert queue.get(timeout=5) is True


def _program(x):
    head, tail = x[:-1], x[1:]
    return (np.sum(np.log1p(x * x)) + 0.1 * np.sum(np.cos(x)) + np.sum(np.hypot(head, tail))
            + np.sum(100.0 * (tail - head**2) ** 2))


def test_derivatives_are_the_same_bits_with_and_without_splitting(split, monkeypatch):
    rng = np.random.default_rng(3)
    x = rng.standard_normal(9000)  # above Tracer.SMALL_BYTES: the recorder's general path
    v = rng.standard_normal(9000)
    runs = []
    real_run = parallel._run
    monkeypatch.setattr(parallel, "_run", lambda *a: runs.append(1) or real_run(*a))
    split_results = (tg.grad(_program)(x), tg.hvp(_program)(x, v), tg.hessian(_program)(x[:40]))
    assert len(runs) >= 10  # cos, log1p, hypot, products, ... in the forward and the traced gradient
    runs.clear()
    parallel.set_num_threads(1)
    whole = (tg.grad(_program)(x), tg.hvp(_program)(x, v), tg.hessian(_program)(x[:40]))
    assert runs == []
    for a, b in zip(split_results, whole):
        assert np.array_equal(_bits(a), _bits(b))


def test_x_times_x_is_recorded_as_a_square():
    tape = Tape()
    x = tape.watch(np.linspace(-1.0, 2.0, 7))
    y = x * x
    assert [n[1] for n in tape.nodes[1:]] == [RULE_TABLE.index(tg.registry.RULES[np.square])]
    assert np.array_equal(_bits(y._value), _bits(np.multiply(x._value, x._value)))
    f32 = np.linspace(-1.0, 2.0, 7, dtype=np.float32)
    assert tg.grad(lambda a: np.sum(a * a))(f32).dtype == np.float32
    assert np.array_equal(tg.grad(lambda a: np.sum(a * a))(f32), 2 * f32)
    z = np.array([1.0 + 2.0j, -0.5j])
    assert np.allclose(tg.grad(lambda a: np.real(np.sum(a * a)))(z), 2 * z)  # complex: a product
    h = tg.hessian(lambda a: np.sum((a * a) * a))(np.array([1.0, -2.0]))
    assert np.array_equal(h, np.diag([6.0, -12.0]))


def test_a_sweep_that_computes_cos_for_sin_splits_it(split, monkeypatch):
    """sin's VJP needs cos(x); when the forward did not compute it, the sweep does, split."""
    x = np.linspace(-3.0, 3.0, 9000)
    ufuncs = []
    real_call = parallel.call
    monkeypatch.setattr(tg.memo, "parallel_call", lambda u, ops: ufuncs.append(u) or real_call(u, ops))
    got = tg.grad(lambda a: np.sum(np.sin(a)))(x)
    assert ufuncs == [np.cos]
    assert np.array_equal(_bits(got), _bits(np.cos(x)))


def _warnings_of(fun, *args):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fun(*args)
    return result, sorted(str(w.message) for w in caught)


def test_a_gradient_warns_and_raises_as_it_does_on_one_thread(split):
    x = np.linspace(-3.0, 3.0, 9000)
    x[5] = np.inf  # sin(inf): invalid, in the forward and in the sweep's cos
    x[7000] = np.nan
    fun = tg.grad(lambda a: np.sum(np.sin(a) * np.log1p(a * a)))
    split_grad, split_warnings = _warnings_of(fun, x)
    with np.errstate(invalid="raise"):
        with pytest.raises(FloatingPointError):
            fun(x)
    parallel.set_num_threads(1)
    whole_grad, whole_warnings = _warnings_of(fun, x)
    assert split_warnings == whole_warnings and split_warnings  # the same warnings, and some
    assert np.array_equal(_bits(split_grad), _bits(whole_grad))
    with np.errstate(invalid="raise"):
        with pytest.raises(FloatingPointError):
            fun(x)


def test_without_threads_the_calling_thread_computes_every_chunk(split, monkeypatch):
    """A pool that cannot start threads (interpreter shutdown, a thread limit) is no error."""

    class Refusing:
        def submit(self, *args):
            raise RuntimeError("can't start new thread")

    monkeypatch.setattr(parallel, "_get_pool", lambda workers: Refusing())
    x = np.linspace(-3.0, 3.0, 10007)
    assert np.array_equal(_bits(parallel.call(np.sin, (x,))), _bits(np.sin(x)))


def _wave(x):
    z = np.exp(1j * x) * np.log(x + 2j)  # complex128 arrays of 9000 elements
    return np.sum(np.real(z * np.conj(np.sqrt(z + 3.0))))


def test_complex_intermediates_give_the_same_bits(split, monkeypatch):
    x = np.linspace(-2.0, 2.0, 9000)
    v = np.cos(np.arange(9000.0))
    runs = []
    real_run = parallel._run
    monkeypatch.setattr(parallel, "_run", lambda *a: runs.append(1) or real_run(*a))
    split_results = (tg.grad(_wave)(x), tg.hvp(_wave)(x, v))
    assert len(runs) >= 5
    parallel.set_num_threads(1)
    for a, b in zip(split_results, (tg.grad(_wave)(x), tg.hvp(_wave)(x, v))):
        assert np.array_equal(_bits(a), _bits(b))



TWINNED_RULES = [r for r in RULE_TABLE if r is not None and r.large_twin is not None]


def test_large_twins_are_declared_for_the_arithmetic():
    assert {r.key for r in TWINNED_RULES} >= {np.multiply, np.subtract, np.true_divide, np.negative, np.exp}
    for rule in TWINNED_RULES:
        twin = rule.large_twin
        assert twin.number != rule.number and RULE_TABLE[twin.number] is twin
        assert (twin.key, twin.name, twin.needs, twin.elementwise, twin.sparse) == (
            rule.key, rule.name, rule.needs, rule.elementwise, rule.sparse)


@pytest.mark.parametrize("rule", TWINNED_RULES, ids=lambda r: r.name)
def test_large_twin_vjps_give_the_bits_of_the_rules_vjps(split, rule):
    """What the sweep calls on the node of a large output (split across threads) is the VJP, bit for bit."""
    rng = np.random.default_rng(5)
    operands = [_values(rng, 10007, "any") for _ in range(rule.fun.nin)]
    g = _values(rng, 10007, "any")
    with np.errstate(all="ignore"):
        ans = rule.fun(*operands)
        for vjp, twin_vjp in zip(rule.vjps, rule.large_twin.vjps):
            assert np.array_equal(_bits(twin_vjp(g, ans, *operands)), _bits(vjp(g, ans, *operands))), rule.name


def test_the_recorder_gives_large_outputs_the_twin(monkeypatch):
    from tapegrad import dispatch

    monkeypatch.setattr(dispatch, "PARALLEL_LARGE", 15000)
    numbers = {}
    for n in (100, 10000, 20000):  # small; larger than a small value but under the bound; over it
        with tg.GradientTape() as tape:
            x = tape.watch(np.linspace(0.1, 1.0, n))
            y = x * np.linspace(1.0, 2.0, n)
        numbers[n] = tape._tape.nodes[-1][1]  # the rule number the node was recorded with
        np.testing.assert_array_equal(tape.gradient(y, x), np.linspace(1.0, 2.0, n))
    rule = RULES[np.multiply]
    assert numbers[100] == numbers[10000] == rule.number
    assert numbers[20000] == rule.large_twin.number
