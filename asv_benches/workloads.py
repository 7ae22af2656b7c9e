"""Benchmark workloads W1-W14, shared by the asv suite, compare.py and the smoke test.

Every workload is written once, as plain NumPy code.  Each function takes an
optional ``xp`` namespace (``numpy`` by default): tapegrad differentiates the
default form unchanged, while compare.py passes a small adapter namespace so
that the *same* arithmetic runs on autograd, JAX, PyTorch, TensorFlow, ...

The namespace must provide: ``sin cos exp log log1p tanh matmul`` and
``sum(x, axis=None, keepdims=False)``, ``max(x, axis, keepdims)``, and for
W8, W12 and W13 ``linalg.cholesky linalg.solve linalg.slogdet`` (W12 also ``diagonal``).  Operators
(``+ - * / **``, slicing, ``[..., None]``) are used directly on the arrays.

W1-W6 are the original, tuned-for workloads; W7-W11 were added later as
workloads nobody tuned for (an ODE loop, a Gaussian process, a large
Hessian-vector product, a 2-D field's Hessian, per-example gradients).
W12-W14 are the classes where an outside harness found tapegrad behind PyTorch
(issue 24): the GP likelihood written with ``cholesky`` for the log-determinant and
``solve(K, y)``, or with ``slogdet`` and ``solve(K, y)``, and a Hessian-vector
product with ``log1p(exp(x)) + cos(x)``.

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
    "nbody_rk4",
    "gp_nlml",
    "hvp_objective",
    "grid_energy",
    "per_example_losses",
    "gp_nlml_cholesky",
    "gp_nlml_slogdet",
    "hvp_softplus",
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


# ----------------------------------------------------------------------------- W7
NBODY_BODIES = 5
NBODY_STEPS = 200
NBODY_DT = 0.01
NBODY_SOFTENING = 0.1


def _nbody_accel(q: Any, mass: Any, xp: Any) -> Any:
    """Softened gravitational accelerations of bodies at ``q`` (N, 3)."""
    diff = q[None, :, :] - q[:, None, :]  # diff[i, j] = q_j - q_i
    r2 = xp.sum(diff * diff, axis=-1) + NBODY_SOFTENING
    w = mass * r2**-1.5  # mass broadcasts over j
    return xp.sum(diff * w[:, :, None], axis=1)


def nbody_rk4(state: Any, mass: Any, steps: int = NBODY_STEPS, dt: float = NBODY_DT, xp: Any = np) -> Any:
    """W7: ``steps`` classical RK4 steps of a small N-body system, then ``|q|^2 + |v|^2 / 2``.

    ``state`` is ``(2, N, 3)``: positions and velocities.  Many small
    operations on (N, 3) arrays: per-op overhead, like W1, in a real loop.
    """
    q, v = state[0], state[1]
    for _ in range(steps):
        k1q, k1v = v, _nbody_accel(q, mass, xp)
        k2q, k2v = v + 0.5 * dt * k1v, _nbody_accel(q + 0.5 * dt * k1q, mass, xp)
        k3q, k3v = v + 0.5 * dt * k2v, _nbody_accel(q + 0.5 * dt * k2q, mass, xp)
        k4q, k4v = v + dt * k3v, _nbody_accel(q + dt * k3q, mass, xp)
        q = q + (dt / 6.0) * (k1q + 2.0 * k2q + 2.0 * k3q + k4q)
        v = v + (dt / 6.0) * (k1v + 2.0 * k2v + 2.0 * k3v + k4v)
    return xp.sum(q * q) + 0.5 * xp.sum(v * v)


# ----------------------------------------------------------------------------- W8
GP_POINTS = 400
GP_JITTER = 1e-6


def gp_nlml(theta: Any, sqdist: Any, y: Any, eye: Any, xp: Any = np) -> Any:
    """W8: negative log marginal likelihood of a squared-exponential Gaussian process.

    ``theta = (log signal variance, log length scale, log noise variance)``;
    ``sqdist`` the (n, n) squared distances of the inputs, ``eye`` the identity.
    Built on ``cholesky`` (the data term through a solve with the factor) and
    ``slogdet`` (the log determinant), as a NumPy user would write it.
    """
    n = y.shape[0]
    k = xp.exp(theta[0]) * xp.exp(-0.5 * sqdist * xp.exp(-2.0 * theta[1])) + (xp.exp(theta[2]) + GP_JITTER) * eye
    z = xp.linalg.solve(xp.linalg.cholesky(k), y)
    return 0.5 * xp.matmul(z, z) + 0.5 * xp.linalg.slogdet(k)[1] + 0.5 * n * np.log(2.0 * np.pi)


# ----------------------------------------------------------------------------- W9
def hvp_objective(x: Any, xp: Any = np) -> Any:
    """W9: separable terms plus a Rosenbrock coupling; its Hessian-vector product is wanted (n = 1e6)."""
    head, tail = x[:-1], x[1:]
    coupling = xp.sum(100.0 * (tail - head**2) ** 2 + (1.0 - head) ** 2)
    return xp.sum(xp.log1p(x * x)) + 0.1 * xp.sum(xp.cos(x)) + coupling


# ----------------------------------------------------------------------------- W10
GRID = 30


def grid_energy(x: Any, xp: Any = np) -> Any:
    """W10: a 2-D field's energy with 2-D slicing; its full (900 x 900) Hessian is wanted.

    ``sum(log1p(dx^2)) + sum(log1p(dy^2)) + sum(x^4) / 4`` with
    ``dx = x[1:, :] - x[:-1, :]`` and ``dy = x[:, 1:] - x[:, :-1]``.
    """
    dx = x[1:, :] - x[:-1, :]
    dy = x[:, 1:] - x[:, :-1]
    return xp.sum(xp.log1p(dx * dx)) + xp.sum(xp.log1p(dy * dy)) + 0.25 * xp.sum(x**4)


# ----------------------------------------------------------------------------- W11
PER_EXAMPLE_BATCH = 512
PER_EXAMPLE_DIM = 200


def per_example_losses(w: Any, x: Any, y: Any, xp: Any = np) -> Any:
    """W11: logistic losses ``log(1 + exp(-y_i x_i . w))``, one per example.

    With ``x`` (B, d) the result has length B and its Jacobian's rows are the
    per-example gradients; with one row ``x`` (d,) it is that example's loss
    (the form ``vmap(grad(...))`` differentiates).
    """
    return xp.log1p(xp.exp(-y * xp.matmul(x, w)))


# ----------------------------------------------------------------------------- W12-W14 (issue 24)
def _gp_kernel(theta: Any, sqdist: Any, eye: Any, xp: Any) -> Any:
    return xp.exp(theta[0]) * xp.exp(-0.5 * sqdist * xp.exp(-2.0 * theta[1])) + (xp.exp(theta[2]) + GP_JITTER) * eye


def gp_nlml_cholesky(theta: Any, sqdist: Any, y: Any, eye: Any, xp: Any = np) -> Any:
    """W12: W8's likelihood with the log-determinant from ``cholesky`` and the data term from ``solve(K, y)``.

    ``log det K = 2 sum(log(diag(L)))`` with ``L = cholesky(K)``; the solve
    is with ``K`` itself (its own factorisation in NumPy, as a user writes it).
    """
    n = y.shape[0]
    k = _gp_kernel(theta, sqdist, eye, xp)
    logdet = 2.0 * xp.sum(xp.log(xp.diagonal(xp.linalg.cholesky(k))))
    alpha = xp.linalg.solve(k, y)
    return 0.5 * xp.matmul(y, alpha) + 0.5 * logdet + 0.5 * n * np.log(2.0 * np.pi)


def gp_nlml_slogdet(theta: Any, sqdist: Any, y: Any, eye: Any, xp: Any = np) -> Any:
    """W13: the same likelihood with ``slogdet(K)`` and ``solve(K, y)``: no Cholesky at all."""
    n = y.shape[0]
    k = _gp_kernel(theta, sqdist, eye, xp)
    alpha = xp.linalg.solve(k, y)
    return 0.5 * xp.matmul(y, alpha) + 0.5 * xp.linalg.slogdet(k)[1] + 0.5 * n * np.log(2.0 * np.pi)


def hvp_softplus(x: Any, xp: Any = np) -> Any:
    """W14: ``sum(log1p(exp(x)) + cos(x))`` plus W9's Rosenbrock coupling; its HVP is wanted (n = 1e6)."""
    head, tail = x[:-1], x[1:]
    coupling = xp.sum(100.0 * (tail - head**2) ** 2 + (1.0 - head) ** 2)
    return xp.sum(xp.log1p(xp.exp(x)) + xp.cos(x)) + coupling


# ----------------------------------------------------------------------------- registry
@dataclass
class Workload:
    """One benchmark problem.

    Attributes
    ----------
    key, name : str
        ``"W1"`` ... and a short name (``"overhead"``).
    kind : {"grad", "jacobian", "hessian", "hvp", "per_example"}
        What is computed, always with respect to ``args[0]``.  ``"hvp"``:
        ``args = (x, v, *rest)`` and the product ``H(x) @ v`` of
        ``fun(x, *rest)`` is wanted.  ``"per_example"``: ``fun`` returns one
        loss per row of ``args[1]`` and the per-example gradients (the rows of
        the Jacobian) are wanted.
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
    uses: Tuple[str, ...] = ()  # namespace members beyond the common ones (e.g. "linalg")
    jit: bool = True  # False: a tracing JIT would unroll a long Python loop (minutes to compile)

    @property
    def label(self) -> str:
        return f"{self.key} {self.name}"

    def forward_args(self, args: tuple) -> tuple:
        """The arguments of the plain forward call ``fun(*forward_args)`` (drops an hvp's ``v``)."""
        return (args[0],) + tuple(args[2:]) if self.kind == "hvp" else tuple(args)

    def forward(self, args: tuple) -> Any:
        """The plain NumPy forward pass (the time every ratio is taken against)."""
        return self.fun(*self.forward_args(args))


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


def _w7_args(bodies: int = NBODY_BODIES) -> tuple:
    rng = _rng(10)
    state = np.stack([rng.uniform(-1.0, 1.0, (bodies, 3)), 0.3 * rng.standard_normal((bodies, 3))])
    mass = rng.uniform(0.5, 1.5, bodies)
    return state, mass


def _w8_args(n: int = GP_POINTS) -> tuple:
    rng = _rng(11)
    x = rng.uniform(0.0, 5.0, (n, 3))
    sqdist = np.sum((x[:, None, :] - x[None, :, :]) ** 2, axis=-1)
    y = np.sin(x[:, 0]) + np.cos(2.0 * x[:, 1]) + 0.1 * rng.standard_normal(n)
    theta = np.array([0.2, 0.3, np.log(0.05)])
    return theta, sqdist, y, np.eye(n)


def _w9_args(n: int = 1_000_000) -> tuple:
    rng = _rng(12)
    return rng.uniform(-1.5, 1.5, n), rng.standard_normal(n)


def _w10_args(side: int = GRID) -> tuple:
    return (_rng(13).standard_normal((side, side)),)


def _w11_args(batch: int = PER_EXAMPLE_BATCH, dim: int = PER_EXAMPLE_DIM) -> tuple:
    rng = _rng(14)
    x = rng.standard_normal((batch, dim)) / np.sqrt(dim)
    y = np.sign(rng.standard_normal(batch))
    return 0.5 * rng.standard_normal(dim), x, y


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
        Workload("W7", "ode_nbody", "grad", nbody_rk4, _w7_args,
                 "5 bodies, 200 RK4 steps of softened gravity; gradient w.r.t. the initial state",
                 lambda: _w7_args(3), jit=False),
        Workload("W8", "gp_nlml", "grad", gp_nlml, _w8_args,
                 "GP negative log marginal likelihood, n = 400 (cholesky, solve, slogdet); "
                 "gradient w.r.t. 3 hyperparameters",
                 lambda: _w8_args(7), uses=("linalg",)),
        Workload("W9", "hvp_large", "hvp", hvp_objective, _w9_args,
                 "1e6 elements, separable terms + Rosenbrock coupling; Hessian-vector product",
                 lambda: _w9_args(9)),
        Workload("W10", "grid_hessian", "hessian", grid_energy, _w10_args,
                 "30 x 30 field, energy of x[1:, :] - x[:-1, :] and x[:, 1:] - x[:, :-1]; full 900 x 900 Hessian",
                 lambda: _w10_args(4)),
        Workload("W11", "per_example", "per_example", per_example_losses, _w11_args,
                 "logistic loss, B = 512 examples, d = 200; per-example gradients (512 x 200)",
                 lambda: _w11_args(6, 4)),
        Workload("W12", "gp_cholesky", "grad", gp_nlml_cholesky, _w8_args,
                 "GP likelihood, n = 400: log det from cholesky(K), solve(K, y); gradient w.r.t. 3 hyperparameters",
                 lambda: _w8_args(7), uses=("linalg", "diagonal")),
        Workload("W13", "gp_slogdet", "grad", gp_nlml_slogdet, _w8_args,
                 "GP likelihood, n = 400: slogdet(K), solve(K, y); gradient w.r.t. 3 hyperparameters",
                 lambda: _w8_args(7), uses=("linalg",)),
        Workload("W14", "hvp_softplus", "hvp", hvp_softplus, _w9_args,
                 "1e6 elements, log1p(exp(x)) + cos(x) + Rosenbrock coupling; Hessian-vector product",
                 lambda: _w9_args(9)),
    ]
}


def tapegrad_derivative(w: Workload) -> Callable[..., Any]:
    """tapegrad's derivative of ``w`` for its kind, called as ``derivative(*w.make_args())``.

    Per-example gradients are the rows of the Jacobian of the loss vector
    (one batched sweep); an hvp is :func:`tapegrad.hvp` (``h(x, v, *rest)``).
    """
    import tapegrad as tg

    transform = {"grad": tg.grad, "jacobian": tg.jacobian, "hessian": tg.hessian, "hvp": tg.hvp,
                 "per_example": tg.jacobian}[w.kind]
    return transform(w.fun)


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
