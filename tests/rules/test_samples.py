"""Every differentiable NumPy function, checked at first and second order on a sample call.

The samples live in ``tests/rules/samples.py``; ``docs/coverage.md`` marks the
functions found there "order 1 and 2 tested".  Three checks keep that mark
honest: each sample passes ``check_grads(order=2)`` (finite differences at
first and second order, a batch of cotangents against single VJPs); every
differentiable rule has a sample; and each sample really goes through the rule
of the function it is filed under.
"""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.errors import TapegradError
from tapegrad.registry import COMPOSITE, PRIMITIVE, RULES, function_name
from tapegrad.tape import rule_of
from tapegrad.testing import check_grads

from .samples import FIRST_ORDER_SAMPLES, SAMPLES

# Samples that expose a bug in a rule: kept (strict xfail) so the bug stays visible.
KNOWN_FAILURES: dict = {}


def _params(table, known_failures, prefix=""):
    out = []
    for fun, samples in table.items():
        for i, sample in enumerate(samples):
            ident = f"{prefix}{function_name(fun)}-{i}"
            reason = known_failures.get(ident)
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            out.append(pytest.param(fun, sample, id=ident, marks=marks))
    return out


PARAMS = _params(SAMPLES, KNOWN_FAILURES)
FIRST_ORDER_PARAMS = _params(FIRST_ORDER_SAMPLES, {}, prefix="first-order-")


def _differentiable_numpy_keys():
    """Keys of RULES that are NumPy functions or ufuncs with a derivative rule."""
    keys = []
    for key, rule in RULES.items():
        if isinstance(key, tuple) or rule.kind not in (PRIMITIVE, COMPOSITE):
            continue
        module = getattr(key, "__module__", None) or ""
        if isinstance(key, np.ufunc):
            if module != "numpy":  # SciPy's ufuncs, registered when scipy.special is loaded
                continue
        elif not module.startswith("numpy"):  # tapegrad's internal primitives, custom_vjp functions
            continue
        keys.append(key)
    return keys


# Functions whose derivative is zero wherever it exists: their samples cannot have a
# nonzero gradient.
ZERO_DERIVATIVE = {np.heaviside}


def _some_gradient_is_nonzero(sample):
    """Whether a random cotangent reaches some floating-point argument (the sample is not vacuous)."""
    rng = np.random.default_rng(1)
    out, vjp_fun = tg.vjp(sample.fun, *sample.args)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    cts = [rng.standard_normal(np.shape(o)) for o in outs]
    grads = vjp_fun(cts if isinstance(out, (tuple, list)) else cts[0])
    return any(np.any(g != 0) for g, a in zip(grads, sample.args) if np.asarray(a).dtype.kind in "fc")


@pytest.mark.parametrize("fun,sample", PARAMS)
def test_sample_against_finite_differences(fun, sample):
    check_grads(sample.fun, sample.args, order=2)
    assert _some_gradient_is_nonzero(sample) != (fun in ZERO_DERIVATIVE), "the sample's gradient is all zero"


def test_first_order_samples():
    """First order against finite differences; the second order must refuse, not guess.

    One test over the whole table (empty while every sampled NumPy function is
    differentiated at second order), so that an empty table is not a skipped test.
    """
    for param in FIRST_ORDER_PARAMS:
        _, sample = param.values
        check_grads(sample.fun, sample.args, order=1)
        assert _some_gradient_is_nonzero(sample), f"{param.id}: the sample's gradient is all zero"
        with pytest.raises(TapegradError):
            check_grads(sample.fun, sample.args, order=2, batch=0)


def test_every_differentiable_rule_has_a_sample():
    sampled = SAMPLES.keys() | FIRST_ORDER_SAMPLES.keys()
    missing = sorted(function_name(k) for k in _differentiable_numpy_keys() if k not in sampled)
    assert not missing, f"{len(missing)} differentiable functions without a sample: {', '.join(missing)}"


def test_samples_are_keyed_by_registered_functions():
    for table in (SAMPLES, FIRST_ORDER_SAMPLES):
        unregistered = [function_name(f) for f in table if f not in RULES or RULES[f].kind not in (PRIMITIVE, COMPOSITE)]
        assert not unregistered, f"samples of functions without a derivative rule: {unregistered}"
        assert all(table.values()), "every function needs at least one sample"


def _trace(sample):
    """Run the sample under a GradientTape and return the recorded nodes."""
    with tg.GradientTape() as tape:
        args = tape.watch(list(sample.args))
        sample.fun(*args)
    return tape._tape.nodes


def _dispatched_by_numpy(fun):
    """Whether NumPy hands calls of ``fun`` to a tracer (NEP 13 ufunc or NEP 18 dispatcher).

    ``np.asarray`` is a builtin that dispatches only through ``like=``; the deprecated
    ``np.row_stack`` is a plain Python wrapper that calls ``np.vstack``, so its rule is
    never reached and its sample is checked through ``vstack`` instead.
    """
    return isinstance(fun, np.ufunc) or type(fun) is type(np.concatenate) or fun is np.asarray


@pytest.mark.parametrize(
    "fun,sample", [pytest.param(*p.values, id=p.id) for p in PARAMS + FIRST_ORDER_PARAMS]
)
def test_sample_goes_through_its_rule(fun, sample, monkeypatch):
    rule = RULES[fun]
    if not _dispatched_by_numpy(fun):
        assert _trace(sample), f"{rule.name} is not dispatched by NumPy and its sample recorded nothing"
    elif rule.kind == COMPOSITE:
        calls = []
        impl = rule.impl

        def counting(*args, **kwargs):
            calls.append(1)
            return impl(*args, **kwargs)

        monkeypatch.setattr(rule, "impl", counting)
        _trace(sample)
        assert calls, f"the sample never dispatched the composite rule of {rule.name}"
    else:
        nodes = _trace(sample)
        recorded = {rule_of(n).name for n in nodes if rule_of(n) is not None}
        assert any(rule_of(n) is not None and rule_of(n).key is fun for n in nodes), (
            f"no node of {rule.name} on the tape; recorded: {sorted(recorded)}"
        )
