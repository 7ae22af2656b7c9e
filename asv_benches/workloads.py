"""Benchmark workloads W1-W6, shared by the asv suite, compare.py and the smoke test.

Every workload is written once, as plain NumPy code.  Each function takes an
optional ``xp`` namespace (``numpy`` by default): tapegrad differentiates the
default form unchanged, while compare.py passes a small adapter namespace so
that the *same* arithmetic runs on autograd, JAX, PyTorch, TensorFlow, ...

The namespace must provide: ``sin cos exp log log1p tanh matmul`` and
``sum(x, axis=None, keepdims=False)``, ``max(x, axis, keepdims)``.  Operators
(``+ - * / **``, slicing) are used directly on the arrays.

All data is float64 and comes from fixed seeds, so every library sees the
same numbers and results can be compared element for element.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Tuple

import numpy as np

__all__ = [
    "Workload",
    "WORKLOADS",
    "get",
    "overhead_step",
    "mlp_loss",
    "elementwise_large",
    "jacobian_net",
    "logistic_ridge",
    "rosenbrock",
    "deep_chain",
    "wide_to_narrow",
]

SEED = 20240601


def _rng(offset: int) -> np.random.Generator:
    return np.random.default_rng(SEED + offset)


# ----------------------------------------------------------------------------- W1
W1_STEPS = 200


def overhead_step(x: Any, steps: int = W1_STEPS, xp: Any = np) -> Any:
    """W1: ``steps`` rounds of ``x = sin(x) * 1.01 + x * 0.5`` on a tiny array, then a sum.

    Pure interpreter overhead: 800 recorded calls on 10 numbers.
    """
    for _ in range(steps):
        x = xp.sin(x) * 1.01 + x * 0.5
    return xp.sum(x)


# ----------------------------------------------------------------------------- W2
MLP_SIZES = (784, 512, 512, 10)
MLP_BATCH = 256


def _log_softmax(z: Any, xp: Any) -> Any:
    # Max subtraction keeps exp() finite; the max carries no net gradient.
    shifted = z - xp.max(z, axis=-1, keepdims=True)
    return shifted - xp.log(xp.sum(xp.exp(shifted), axis=-1, keepdims=True))


def mlp_loss(params: List[Any], inputs: Any, onehot: Any, xp: Any = np) -> Any:
    """W2: tanh MLP 784-512-512-10 with mean softmax cross-entropy.

    ``params`` is ``[W1, b1, W2, b2, W3, b3]``; ``onehot`` the (batch, 10)
    one-hot targets (a constant, so no integer indexing is needed).
    """
    h = inputs
    n_layers = len(params) // 2
    for k in range(n_layers):
        w, b = params[2 * k], params[2 * k + 1]
        h = xp.matmul(h, w) + b
        if k < n_layers - 1:
            h = xp.tanh(h)
    logp = _log_softmax(h, xp)
    return -xp.sum(logp * onehot) / onehot.shape[0]


def mlp_data(batch: int = MLP_BATCH, sizes: Tuple[int, ...] = MLP_SIZES) -> Tuple[list, np.ndarray, np.ndarray]:
    rng = _rng(2)
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        params.append(rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in))
        params.append(0.1 * rng.standard_normal(fan_out))
    inputs = rng.standard_normal((batch, sizes[0]))
    labels = rng.integers(0, sizes[-1], size=batch)
    onehot = np.zeros((batch, sizes[-1]))
    onehot[np.arange(batch), labels] = 1.0
    return params, inputs, onehot


# ----------------------------------------------------------------------------- W3
def elementwise_large(x: Any, xp: Any = np) -> Any:
    """W3: ``sum(log1p(exp(sin(x) * x)) * cos(x) + tanh(x) ** 2)``: memory-bound ufuncs."""
    return xp.sum(xp.log1p(xp.exp(xp.sin(x) * x)) * xp.cos(x) + xp.tanh(x) ** 2)


# ----------------------------------------------------------------------------- W4
def jacobian_net(x: Any, w1: Any, w2: Any, xp: Any = np) -> Any:
    """W4: ``tanh(W2 @ tanh(W1 @ x))``, R^300 -> R^300; its full Jacobian is wanted."""
    return xp.tanh(xp.matmul(w2, xp.tanh(xp.matmul(w1, x))))


# ----------------------------------------------------------------------------- W5
def logistic_ridge(x: Any, a: Any, xp: Any = np) -> Any:
    """W5: ``sum(log(1 + exp(A @ x))) + 0.5 * sum(x * x)``; its full Hessian is wanted."""
    return xp.sum(xp.log(1 + xp.exp(xp.matmul(a, x)))) + 0.5 * xp.sum(x * x)


# ----------------------------------------------------------------------------- W6
def rosenbrock(x: Any, xp: Any = np) -> Any:
    """W6: ``sum(100 (x[1:] - x[:-1]**2)**2 + (1 - x[:-1])**2)``; its full Hessian is wanted."""
    head, tail = x[:-1], x[1:]
    return xp.sum(100.0 * (tail - head**2) ** 2 + (1.0 - head) ** 2)


# ----------------------------------------------------------------------------- registry
@dataclass
class Workload:
    """One benchmark problem.

    Attributes
    ----------
    key, name : str
        ``"W1"`` ... and a short name (``"overhead"``).
    kind : {"grad", "jacobian", "hessian"}
        What is computed, always with respect to ``args[argnum]``.
    fun : callable
        ``fun(*args, xp=np)``; the differentiated argument comes first.
    make_args : callable
        ``() -> tuple`` of float64 NumPy arrays (fixed seed), the benchmark sizes.
    description : str
    small_args : callable
        The same problem at a few elements, for correctness tests.
    """

    key: str
    name: str
    kind: str
    fun: Callable[..., Any]
    make_args: Callable[[], tuple]
    description: str
    small_args: Callable[[], tuple]

    @property
    def label(self) -> str:
        return f"{self.key} {self.name}"


def _w1_args() -> tuple:
    return (_rng(1).standard_normal(10),)


def _w2_args() -> tuple:
    params, inputs, onehot = mlp_data()
    return params, inputs, onehot


def _w2_small() -> tuple:
    params, inputs, onehot = mlp_data(batch=4, sizes=(6, 5, 4, 3))
    return params, inputs, onehot


def _w3_args(n: int = 1_000_000) -> tuple:
    return (_rng(3).uniform(-2.0, 2.0, n),)


def _w4_args(n: int = 300) -> tuple:
    rng = _rng(4)
    x = rng.standard_normal(n)
    w1 = rng.standard_normal((n, n)) / np.sqrt(n)
    w2 = rng.standard_normal((n, n)) / np.sqrt(n)
    return x, w1, w2


def _w5_args(n: int = 200, m: int = 500) -> tuple:
    rng = _rng(5)
    x = 0.5 * rng.standard_normal(n)
    a = rng.standard_normal((m, n)) / np.sqrt(n)
    return x, a


def _w6_args(n: int = 1000) -> tuple:
    return (_rng(6).uniform(-1.5, 1.5, n),)


WORKLOADS: Dict[str, Workload] = {
    w.key: w
    for w in [
        Workload("W1", "overhead", "grad", overhead_step, _w1_args,
                 "10 elements, 200 x (sin(x)*1.01 + x*0.5), sum; gradient",
                 lambda: (_rng(1).standard_normal(10),)),
        Workload("W2", "mlp", "grad", mlp_loss, _w2_args,
                 "batch 256, 784-512-512-10 tanh MLP, softmax CE; gradient w.r.t. 6 params",
                 _w2_small),
        Workload("W3", "elementwise_large", "grad", elementwise_large, _w3_args,
                 "1e6 elements, log1p(exp(sin(x)*x))*cos(x) + tanh(x)**2, sum; gradient",
                 lambda: _w3_args(50)),
        Workload("W4", "jacobian", "jacobian", jacobian_net, _w4_args,
                 "tanh(W2 @ tanh(W1 @ x)), 300 -> 300; full Jacobian",
                 lambda: _w4_args(7)),
        Workload("W5", "hessian", "hessian", logistic_ridge, _w5_args,
                 "sum(log(1+exp(A @ x))) + 0.5 sum(x*x), A 500x200; full Hessian",
                 lambda: _w5_args(6, 9)),
        Workload("W6", "rosen_hessian", "hessian", rosenbrock, _w6_args,
                 "Rosenbrock, n = 1000; full Hessian",
                 lambda: _w6_args(8)),
    ]
}


def get(key: str) -> Workload:
    """The workload named ``key`` (``"W3"`` or ``"elementwise_large"``)."""
    for w in WORKLOADS.values():
        if key.upper() == w.key or key == w.name:
            return w
    raise KeyError(f"unknown workload {key!r}; known: {', '.join(WORKLOADS)}")


# ----------------------------------------------------------------------------- memory workloads
def wide_to_narrow(x: Any, a: Any, b: Any) -> Any:
    """``B @ tanh(A @ x)``: a wide hidden layer, so a batch of m cotangents costs m * hidden floats.

    Used by the chunked-Jacobian memory benchmarks: the output Jacobian
    (m x n) is small next to the per-sweep cotangents (m x hidden).
    """
    return np.matmul(b, np.tanh(np.matmul(a, x)))


def wide_to_narrow_args(n: int = 50, hidden: int = 8000, m: int = 400) -> tuple:
    rng = _rng(7)
    return (
        rng.standard_normal(n),
        rng.standard_normal((hidden, n)) / np.sqrt(n),
        rng.standard_normal((m, hidden)) / np.sqrt(hidden),
    )


def _identity_block(fun: Callable[..., Any]) -> Callable[..., Any]:
    return fun


def deep_chain(x: Any, depth: int = 400, block_size: int = 20, block: Callable = _identity_block) -> Any:
    """A deep chain ``x = tanh(x) * 0.9 + 0.1 * x`` repeated ``depth`` times, then a sum.

    Checkpointing hook: the chain is cut into blocks of ``block_size`` steps,
    and each block function is passed through ``block`` before it runs.  The
    default keeps every intermediate on the tape; a checkpointing wrapper
    (``block=tapegrad.checkpoint`` once it exists) should keep only the block
    boundaries and recompute inside a block during the backward sweep.
    """

    def run_block(y: Any) -> Any:
        for _ in range(block_size):
            y = np.tanh(y) * 0.9 + 0.1 * y
        return y

    step = block(run_block)
    for _ in range(depth // block_size):
        x = step(x)
    return np.sum(x)


def deep_chain_args(n: int = 20_000) -> tuple:
    return (_rng(8).standard_normal(n),)


# ----------------------------------------------------------------------------- per-op overhead
#: Array sizes of the per-op benchmarks: interpreter-bound and memory-bound.
OP_SIZES = (10, 1_000_000)

#: Single calls whose dispatch cost is measured: ``op(x, y)`` with x traced, y a constant array.
OPS: Dict[str, Callable[[Any, Any], Any]] = {
    "sin": lambda x, y: np.sin(x),
    "mul_scalar": lambda x, y: x * 1.01,
    "add": lambda x, y: x + y,
    "sum": lambda x, y: np.sum(x),
    "dot": lambda x, y: x @ y,
    "getitem": lambda x, y: x[1:],
}

#: Shape-preserving steps ``v -> op(v)``, chained to measure the cost of one backward node.
CHAIN_OPS: Dict[str, Callable[[Any, Any], Any]] = {
    "sin": lambda v, y: np.sin(v),
    "mul_scalar": lambda v, y: v * 1.01,
    "add": lambda v, y: v + y,
}


def op_args(size: int) -> Tuple[np.ndarray, np.ndarray]:
    rng = _rng(9)
    return rng.standard_normal(size), rng.standard_normal(size)


def op_calls(size: int) -> int:
    """Calls per measurement: enough to amortise the tape's creation, few enough for memory."""
    return 100 if size <= 1000 else 5


def run_ops(op: Callable[[Any, Any], Any], x: Any, y: Any, k: int) -> None:
    """``k`` independent calls of ``op`` on the same inputs."""
    for _ in range(k):
        op(x, y)


def chain(step: Callable[[Any, Any], Any], v: Any, y: Any, k: int) -> Any:
    """``k`` chained calls of ``step``, then a sum (a scalar to differentiate)."""
    for _ in range(k):
        v = step(v, y)
    return np.sum(v)


# ----------------------------------------------------------------------------- peak memory
def traced_peak(fn: Callable[[], Any]) -> int:
    """Peak bytes allocated (Python objects and NumPy buffers) while ``fn()`` runs.

    Measured with :mod:`tracemalloc` relative to the allocations alive when
    the call starts, so it is independent of the interpreter's baseline.
    """
    import gc
    import tracemalloc

    gc.collect()
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        start, _ = tracemalloc.get_traced_memory()
        result = fn()
        _, peak = tracemalloc.get_traced_memory()
        del result
    finally:
        if not was_tracing:
            tracemalloc.stop()
    return peak - start


JAC_CHUNK = 40


def _traced_forward(fun: Callable[..., Any], *args: Any) -> Callable[[], Any]:
    """The forward pass as tapegrad records it: the tape (every intermediate) stays alive."""
    import tapegrad as tg

    def run():
        with tg.GradientTape() as tape:
            watched = tape.watch(args[0])
            return tape, fun(watched, *args[1:])

    return run


def _grad_of(fun: Callable[..., Any], *args: Any, **kw: Any) -> Callable[[], Any]:
    import tapegrad as tg

    g = tg.grad(fun, **kw)
    return lambda: g(*args)


def _jacobian_of(fun: Callable[..., Any], *args: Any, **kw: Any) -> Callable[[], Any]:
    import tapegrad as tg

    jac = tg.jacobian(fun, **kw)
    return lambda: jac(*args)


def checkpoint_block() -> Any:
    """tapegrad's checkpointing wrapper, or ``None`` while the library has none.

    The hook for the deep-chain memory benchmarks: once ``tapegrad.checkpoint``
    exists (``checkpoint(fun) -> fun`` recomputing ``fun``'s inside during the
    backward sweep), the "checkpoint" variants appear automatically.
    """
    import tapegrad as tg

    return getattr(tg, "checkpoint", None)


def _memory_builders() -> Dict[str, Tuple[Callable[[], Callable[[], Any]], Any, str]]:
    m = wide_to_narrow_args()[2].shape[0]
    builders = {
        "W3 forward (numpy)": (lambda: functools.partial(elementwise_large, *_w3_args()), None, ""),
        "W3 forward (traced)": (lambda: _traced_forward(elementwise_large, *_w3_args()), "W3 forward (numpy)", ""),
        "W3 grad": (lambda: _grad_of(elementwise_large, *_w3_args()), ("W3 forward (numpy)", "W3 forward (traced)"),
                    "<= 3x forward"),
        "W2 forward (numpy)": (lambda: functools.partial(mlp_loss, *mlp_data()), None, ""),
        "W2 forward (traced)": (lambda: _traced_forward(mlp_loss, *mlp_data()), "W2 forward (numpy)", ""),
        "W2 grad": (lambda: _grad_of(mlp_loss, *mlp_data()), ("W2 forward (numpy)", "W2 forward (traced)"),
                    "<= 3x forward"),
        "jacobian unchunked": (lambda: _jacobian_of(wide_to_narrow, *wide_to_narrow_args()), None, ""),
        "jacobian chunked": (
            lambda: _jacobian_of(wide_to_narrow, *wide_to_narrow_args(), chunk_size=JAC_CHUNK),
            "jacobian unchunked",
            f"~ k/m = {JAC_CHUNK}/{m} = {JAC_CHUNK / m:.2f}",
        ),
        "deep chain forward (numpy)": (lambda: functools.partial(deep_chain, *deep_chain_args()), None, ""),
        "deep chain forward (traced)": (
            lambda: _traced_forward(deep_chain, *deep_chain_args()), "deep chain forward (numpy)", ""),
        "deep chain grad": (lambda: _grad_of(deep_chain, *deep_chain_args()),
                            ("deep chain forward (numpy)", "deep chain forward (traced)"), ""),
    }
    if checkpoint_block() is not None:
        builders["deep chain grad (checkpoint)"] = (
            lambda: _grad_of(functools.partial(deep_chain, block=checkpoint_block()), *deep_chain_args()),
            "deep chain grad",
            "<< deep chain grad",
        )
    return builders


#: Names of the memory scenarios (the checkpoint one only when tapegrad has ``checkpoint``).
def memory_scenario_names() -> List[str]:
    return list(_memory_builders())


def memory_references(name: str) -> Tuple[str, ...]:
    """The scenarios that ``name``'s peak is compared with (first = main reference)."""
    reference = _memory_builders()[name][1]
    if reference is None:
        return ()
    return (reference,) if isinstance(reference, str) else tuple(reference)


def memory_scenario(name: str) -> Tuple[Callable[[], Any], Tuple[str, ...], str]:
    """``(fn, reference scenario names, target text)``; builds only that scenario's data."""
    build, _, target = _memory_builders()[name]
    return build(), memory_references(name), target
