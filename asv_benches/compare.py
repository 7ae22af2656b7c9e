"""Side-by-side timings of W1-W14 on tapegrad and on every installed peer library.

Usage (from the repository root)::

    python asv_benches/compare.py                       # everything installed
    python asv_benches/compare.py --workloads W1,W4 --libs tapegrad,torch --repeat 15
    python asv_benches/compare.py --rounds 3 --json out.json
    python asv_benches/compare.py --overhead            # tapegrad per-op overhead
    python asv_benches/compare.py --memory              # tapegrad peak memory (tracemalloc)
    python asv_benches/compare.py --profile --workloads W1   # cProfile hot spots of tapegrad
    python asv_benches/compare.py --tape-profile        # tapegrad time per recorded op / VJP
    python asv_benches/compare.py --reuse               # reuse=True against its NumPy floor

Each library runs in its own subprocess.  Inside it, every workload's
derivative and the *same process's* plain NumPy forward pass are timed in
alternation (so a noisy neighbour slows both alike), and the table shows the
median of each and their ratio.  ``--rounds R`` runs the whole set of
subprocesses R times, interleaving libraries, and pools the samples.

Every library's result is compared with tapegrad's (max abs and max relative
difference).  Peers are optional: a library that cannot be imported is
reported as "not installed".  Inputs are converted to each library's array
type once, outside the timed region; results are not converted back inside it.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import types
from typing import Any, Callable, Dict, List, Optional, Tuple


def limit_threads(n: int) -> None:
    """Ask every library's thread pools for ``n`` threads (0: leave the defaults).

    Must run before NumPy (or a peer) is imported.  On a shared 2-core machine
    a second BLAS/OpenMP thread mostly spin-waits for a core another process
    holds (a 300x300 matmul measured 4 ms on one thread and 34 ms on two under
    load), so ``--threads 1`` gives much steadier numbers there.  The default
    (0) measures what users get: each library's own thread pools.
    """
    if n <= 0:
        return
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
                "NUMEXPR_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS",
                "TAPEGRAD_NUM_THREADS"):
        os.environ[var] = str(n)
    os.environ["TAPEGRAD_BENCH_THREADS"] = str(n)
    if n == 1:
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1").strip()


def _threads_from_argv(argv: List[str]) -> int:
    for k, arg in enumerate(argv):
        if arg == "--threads" and k + 1 < len(argv):
            return int(argv[k + 1])
        if arg.startswith("--threads="):
            return int(arg.split("=", 1)[1])
    return 0


if __name__ == "__main__":
    limit_threads(_threads_from_argv(sys.argv[1:]))

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import workloads as W  # noqa: E402

LIBS = ["tapegrad", "autograd", "mygrad", "jax", "torch", "tensorflow"]
REL_TOL = 1e-6  # results further apart than this (relative to max |tapegrad|) are flagged


# =============================================================================== timing
def _time_calls(fn: Callable[[], Any], number: int) -> float:
    start = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - start) / number


def autorange(fn: Callable[[], Any], min_time: float) -> int:
    """Calls per sample so that one sample takes at least ``min_time`` seconds."""
    number = 1
    while True:
        t = _time_calls(fn, number) * number
        if t >= min_time:
            return number
        number = max(number * 2, int(number * 1.2 * min_time / max(t, 1e-9)))


def paired_samples(fns: List[Callable[[], Any]], repeat: int, min_time: float, budget: float) -> List[List[float]]:
    """Seconds per call for each of ``fns``, sampled in alternation ``repeat`` times.

    ``budget`` caps the total seconds spent: slow entries get fewer samples (at least 3).
    """
    numbers = [autorange(f, min_time) for f in fns]
    per_round = sum(_time_calls(f, n) * n for f, n in zip(fns, numbers))
    rounds = max(3, min(repeat, int(budget / max(per_round, 1e-9))))
    samples: List[List[float]] = [[] for _ in fns]
    for _ in range(rounds):
        for k, (f, n) in enumerate(zip(fns, numbers)):
            # One untimed call first: switching between NumPy's BLAS pool and a peer's
            # OpenMP pool costs a spin-down on 2 cores that belongs to neither.
            f()
            samples[k].append(_time_calls(f, n))
    return samples


# =============================================================================== adapters
def _ns(**funs: Any) -> types.SimpleNamespace:
    return types.SimpleNamespace(**funs)


def _split(args: tuple, conv: Callable[[Any], Any]) -> Tuple[Any, list, tuple, bool]:
    """Convert ``args``: (first, leaves of first, rest, first is a list)."""
    first = args[0]
    is_list = isinstance(first, list)
    leaves = [conv(a) for a in first] if is_list else [conv(first)]
    rest = tuple(conv(a) for a in args[1:])
    return (leaves if is_list else leaves[0]), leaves, rest, is_list


class Adapter:
    """One library: how to compute each kind of derivative of a workload.

    Subclasses define ``name``, ``version``, ``apis`` ({kind: [api label, ...]})
    and a method per api label returning ``(call, to_numpy)``.
    """

    name = ""
    version = ""
    apis: Dict[str, List[str]] = {}

    def build(self, api: str, w: W.Workload, args: tuple) -> Tuple[Callable[[], Any], Callable[[Any], list]]:
        xp = getattr(self, "xp", None)
        missing = [name for name in w.uses if xp is not None and not hasattr(xp, name)]
        if missing:
            raise NotImplementedError(f"{self.name} has no {', '.join(missing)} (needed by {w.key})")
        method = getattr(self, "api_" + api.replace(".", "_").replace("(", "_").replace(")", "").replace("=", "_"))
        return method(w, args)


def _np_list(r: Any) -> list:
    if isinstance(r, (list, tuple)):
        return [np.asarray(a, dtype=float) for a in r]
    return [np.asarray(r, dtype=float)]


class Tapegrad(Adapter):
    name = "tapegrad"
    apis = {"grad": ["grad"], "jacobian": ["jacobian"], "hessian": ["hessian"], "hvp": ["hvp"],
            "per_example": ["jacobian"]}

    def __init__(self) -> None:
        import tapegrad as tg

        self.tg, self.version = tg, tg.__version__

    def _make(self, transform: Callable, w: W.Workload, args: tuple):
        fn = transform(w.fun)
        return (lambda: fn(*args)), _np_list

    def api_grad(self, w, args):
        return self._make(self.tg.grad, w, args)

    def api_jacobian(self, w, args):
        return self._make(self.tg.jacobian, w, args)

    def api_hessian(self, w, args):
        return self._make(self.tg.hessian, w, args)

    def api_hvp(self, w, args):
        return self._make(self.tg.hvp, w, args)

    # reuse=True (issue 31): not in ``apis``, so the default tables are unchanged;
    # benchmarks/against_torch.py asks for them by name.
    reuse_apis = {kind: [f"{api}(reuse=True)" for api in apis_] for kind, apis_ in apis.items()}

    def api_grad_reuse_True(self, w, args):
        return self._make(functools.partial(self.tg.grad, reuse=True), w, args)

    def api_jacobian_reuse_True(self, w, args):
        return self._make(functools.partial(self.tg.jacobian, reuse=True), w, args)

    def api_hessian_reuse_True(self, w, args):
        return self._make(functools.partial(self.tg.hessian, reuse=True), w, args)

    def api_hvp_reuse_True(self, w, args):
        return self._make(functools.partial(self.tg.hvp, reuse=True), w, args)


class Autograd(Adapter):
    name = "autograd"
    apis = {"grad": ["grad"], "jacobian": ["jacobian"], "hessian": ["hessian"],
            "hvp": ["hessian_vector_product"], "per_example": ["jacobian"]}

    def __init__(self) -> None:
        import autograd
        import autograd.numpy as anp
        from importlib.metadata import version

        self.ag, self.xp, self.version = autograd, anp, version("autograd")

    def _make(self, transform: Callable, w: W.Workload, args: tuple):
        fn = transform(functools.partial(w.fun, xp=self.xp))
        return (lambda: fn(*args)), _np_list

    def api_grad(self, w, args):
        return self._make(self.ag.grad, w, args)

    def api_jacobian(self, w, args):
        return self._make(self.ag.jacobian, w, args)

    def api_hessian(self, w, args):
        return self._make(self.ag.hessian, w, args)

    def api_hessian_vector_product(self, w, args):
        hvp = self.ag.hessian_vector_product(functools.partial(w.fun, xp=self.xp))
        x, v, rest = args[0], args[1], args[2:]
        return (lambda: hvp(x, *rest, v)), _np_list  # autograd takes the vector last


class MyGrad(Adapter):
    name = "mygrad"
    apis = {"grad": ["backward"]}  # mygrad has no Jacobian or Hessian

    def __init__(self) -> None:
        import mygrad as mg

        self.mg, self.version = mg, mg.__version__
        self.xp = _ns(sin=mg.sin, cos=mg.cos, exp=mg.exp, log=mg.log, log1p=mg.log1p, tanh=mg.tanh,
                      matmul=mg.matmul, sum=mg.sum, max=mg.max)

    def api_backward(self, w, args):
        mg = self.mg
        first, is_list = args[0], isinstance(args[0], list)
        fun = functools.partial(w.fun, xp=self.xp)

        def call():
            leaves = [mg.tensor(a) for a in (first if is_list else [first])]
            out = fun(leaves if is_list else leaves[0], *args[1:])
            out.backward()
            return [leaf.grad for leaf in leaves]

        return call, _np_list


class Jax(Adapter):
    name = "jax"
    apis = {"grad": ["grad", "jit(grad)"], "jacobian": ["jacrev", "jit(jacrev)"],
            "hessian": ["hessian", "jit(hessian)"], "hvp": ["jvp(grad)", "jit(jvp(grad))"],
            "per_example": ["vmap(grad)", "jit(vmap(grad))"]}

    def __init__(self) -> None:
        import jax

        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp

        self.jax, self.jnp, self.version = jax, jnp, jax.__version__

    def _make(self, transform: Callable, w: W.Workload, args: tuple, jit: bool):
        jax = self.jax
        if jit and not w.jit:
            raise NotImplementedError(f"jit skipped for {w.key}: it would unroll the Python loop (minutes to compile)")
        conv = self.jnp.asarray
        first, _, rest, _ = _split(args, conv)
        fn = transform(functools.partial(w.fun, xp=self.jnp))
        if jit:
            fn = jax.jit(fn)
        return (lambda: jax.block_until_ready(fn(first, *rest))), _np_list

    def api_grad(self, w, args):
        return self._make(self.jax.grad, w, args, False)

    def api_jit_grad(self, w, args):
        return self._make(self.jax.grad, w, args, True)

    def api_jacrev(self, w, args):
        return self._make(self.jax.jacrev, w, args, False)

    def api_jit_jacrev(self, w, args):
        return self._make(self.jax.jacrev, w, args, True)

    def api_hessian(self, w, args):
        return self._make(self.jax.hessian, w, args, False)

    def api_jit_hessian(self, w, args):
        return self._make(self.jax.hessian, w, args, True)

    def _hvp_transform(self, fun):
        jax = self.jax
        return lambda x, v, *rest: jax.jvp(lambda y: jax.grad(fun)(y, *rest), (x,), (v,))[1]

    def _per_example_transform(self, fun):
        jax = self.jax
        return lambda w, *data: jax.vmap(jax.grad(fun), in_axes=(None,) + (0,) * len(data))(w, *data)

    def api_jvp_grad(self, w, args):
        return self._make(self._hvp_transform, w, args, False)

    def api_jit_jvp_grad(self, w, args):
        return self._make(self._hvp_transform, w, args, True)

    def api_vmap_grad(self, w, args):
        return self._make(self._per_example_transform, w, args, False)

    def api_jit_vmap_grad(self, w, args):
        return self._make(self._per_example_transform, w, args, True)


class Torch(Adapter):
    name = "torch"
    apis = {
        "grad": ["autograd.grad", "func.grad"],
        "jacobian": ["func.jacrev", "functional.jacobian(vectorize=True)"],
        "hessian": ["func.hessian", "functional.hessian(vectorize=True)"],
        "hvp": ["autograd.grad(create_graph=True)", "func.jvp(func.grad)"],
        "per_example": ["func.vmap(func.grad)", "func.jacrev"],
    }

    def __init__(self) -> None:
        import torch

        self.torch, self.version = torch, torch.__version__
        threads = int(os.environ.get("TAPEGRAD_BENCH_THREADS", "0"))
        if threads:
            torch.set_num_threads(threads)

        def tsum(x, axis=None, keepdims=False):
            return torch.sum(x) if axis is None else torch.sum(x, dim=axis, keepdim=keepdims)

        def tmax(x, axis=None, keepdims=False):
            return torch.amax(x) if axis is None else torch.amax(x, dim=axis, keepdim=keepdims)

        self.xp = _ns(sin=torch.sin, cos=torch.cos, exp=torch.exp, log=torch.log, log1p=torch.log1p,
                      tanh=torch.tanh, matmul=torch.matmul, sum=tsum, max=tmax, linalg=torch.linalg,
                      diagonal=torch.diagonal)

    def _conv(self, a):
        return self.torch.tensor(a)

    def _to_np(self, r):
        if isinstance(r, (list, tuple)):
            return [t.detach().numpy() for t in r]
        return [r.detach().numpy()]

    def api_autograd_grad(self, w, args):
        first, leaves, rest, _ = _split(args, self._conv)
        for leaf in leaves:
            leaf.requires_grad_(True)
        fun = functools.partial(w.fun, xp=self.xp)
        grad = self.torch.autograd.grad
        return (lambda: grad(fun(first, *rest), leaves)), self._to_np

    def _func(self, transform, w, args):
        first, _, rest, _ = _split(args, self._conv)
        fn = transform(functools.partial(w.fun, xp=self.xp))
        return (lambda: fn(first, *rest)), self._to_np

    def _functional(self, transform, w, args):
        first, _, rest, _ = _split(args, self._conv)
        fun = functools.partial(w.fun, xp=self.xp)
        return (lambda: transform(lambda x: fun(x, *rest), first, vectorize=True)), self._to_np

    def api_func_grad(self, w, args):
        # torch.func's transform: argnums=0 differentiates the first argument, a tensor or a list of them.
        first, _, rest, _ = _split(args, self._conv)
        grad = self.torch.func.grad(functools.partial(w.fun, xp=self.xp))
        return (lambda: grad(first, *rest)), self._to_np

    def api_func_jacrev(self, w, args):
        return self._func(self.torch.func.jacrev, w, args)

    def api_func_hessian(self, w, args):
        return self._func(self.torch.func.hessian, w, args)

    def api_functional_jacobian_vectorize_True(self, w, args):
        return self._functional(self.torch.autograd.functional.jacobian, w, args)

    def api_functional_hessian_vectorize_True(self, w, args):
        return self._functional(self.torch.autograd.functional.hessian, w, args)

    def api_autograd_grad_create_graph_True(self, w, args):
        # Double backward: the gradient with a graph, then its VJP with v (H is symmetric).
        torch = self.torch
        x, v, rest = self._conv(args[0]).requires_grad_(True), self._conv(args[1]), [self._conv(a) for a in args[2:]]
        fun = functools.partial(w.fun, xp=self.xp)

        def call():
            (g,) = torch.autograd.grad(fun(x, *rest), x, create_graph=True)
            return torch.autograd.grad(g, x, grad_outputs=v)

        return call, self._to_np

    def api_func_jvp_func_grad(self, w, args):
        func = self.torch.func
        x, v, rest = self._conv(args[0]), self._conv(args[1]), [self._conv(a) for a in args[2:]]
        grad = func.grad(functools.partial(w.fun, xp=self.xp))
        return (lambda: func.jvp(lambda y: grad(y, *rest), (x,), (v,))[1]), self._to_np

    def api_func_vmap_func_grad(self, w, args):
        func = self.torch.func
        first, _, rest, _ = _split(args, self._conv)
        per_example = func.vmap(func.grad(functools.partial(w.fun, xp=self.xp)), in_dims=(None,) + (0,) * len(rest))
        return (lambda: per_example(first, *rest)), self._to_np


class TensorFlow(Adapter):
    name = "tensorflow"
    apis = {"grad": ["GradientTape"], "jacobian": ["GradientTape.jacobian"],
            "hessian": ["GradientTape.jacobian(gradient)"]}

    def __init__(self) -> None:
        import tensorflow as tf

        self.tf, self.version = tf, tf.__version__
        threads = int(os.environ.get("TAPEGRAD_BENCH_THREADS", "0"))
        if threads:
            tf.config.threading.set_intra_op_parallelism_threads(threads)
            tf.config.threading.set_inter_op_parallelism_threads(threads)

        def matmul(a, b):
            if len(b.shape) == 1:
                return tf.linalg.matvec(a, b)
            return tf.linalg.matmul(a, b)

        self.xp = _ns(sin=tf.math.sin, cos=tf.math.cos, exp=tf.math.exp, log=tf.math.log,
                      log1p=tf.math.log1p, tanh=tf.math.tanh, matmul=matmul,
                      sum=lambda x, axis=None, keepdims=False: tf.reduce_sum(x, axis=axis, keepdims=keepdims),
                      max=lambda x, axis=None, keepdims=False: tf.reduce_max(x, axis=axis, keepdims=keepdims))

    def _prepare(self, w, args):
        first, leaves, rest, _ = _split(args, self.tf.constant)
        return first, leaves, rest, functools.partial(w.fun, xp=self.xp)

    def _to_np(self, r):
        return [t.numpy() for t in (r if isinstance(r, (list, tuple)) else [r])]

    def api_GradientTape(self, w, args):
        tf = self.tf
        first, leaves, rest, fun = self._prepare(w, args)

        def call():
            with tf.GradientTape() as tape:
                tape.watch(leaves)
                out = fun(first, *rest)
            return tape.gradient(out, leaves)

        return call, self._to_np

    def api_GradientTape_jacobian(self, w, args):
        tf = self.tf
        first, _, rest, fun = self._prepare(w, args)

        def call():
            with tf.GradientTape() as tape:
                tape.watch(first)
                out = fun(first, *rest)
            return tape.jacobian(out, first)

        return call, self._to_np

    def api_GradientTape_jacobian_gradient(self, w, args):
        tf = self.tf
        first, _, rest, fun = self._prepare(w, args)

        def call():
            with tf.GradientTape() as outer:
                outer.watch(first)
                with tf.GradientTape() as inner:
                    inner.watch(first)
                    out = fun(first, *rest)
                g = inner.gradient(out, first)
            return outer.jacobian(g, first)

        return call, self._to_np


ADAPTERS = {"tapegrad": Tapegrad, "autograd": Autograd, "mygrad": MyGrad, "jax": Jax,
            "torch": Torch, "tensorflow": TensorFlow}


# =============================================================================== worker
def run_worker(lib: str, keys: List[str], repeat: int, min_time: float, budget: float, outdir: str) -> None:
    """Runs inside the library's own subprocess; writes ``<lib>.json`` and result ``.npz`` files."""
    report: Dict[str, Any] = {"lib": lib, "entries": []}
    try:
        adapter = ADAPTERS[lib]()
    except ImportError as exc:
        report["status"] = f"not installed ({exc.__class__.__name__}: {exc})"
        _dump(report, outdir, lib)
        return
    except Exception as exc:  # installed but broken (e.g. built against another NumPy)
        report["status"] = f"failed to load ({exc.__class__.__name__}: {str(exc)[:160]})"
        _dump(report, outdir, lib)
        return
    report["status"] = "ok"
    report["version"] = adapter.version
    for key in keys:
        w = W.get(key)
        args = w.make_args()
        forward = functools.partial(w.forward, args)
        for api in adapter.apis.get(w.kind, []):
            entry = {"workload": w.key, "api": api}
            try:
                call, to_np = adapter.build(api, w, args)
                result = to_np(call())  # warm-up (JIT compile, caches) and the result to compare
                forward()
                np.savez(os.path.join(outdir, f"{lib}__{w.key}__{_slug(api)}.npz"), *result)
                gc.collect()
                t_np, t_lib = paired_samples([forward, call], repeat, min_time, budget)
                entry.update(status="ok", numpy_samples=t_np, samples=t_lib,
                             result_file=f"{lib}__{w.key}__{_slug(api)}.npz")
            except Exception as exc:  # a peer failing must not stop the comparison
                entry.update(status=f"error: {exc.__class__.__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}")
            report["entries"].append(entry)
            print(f"  {lib:<10} {w.key} {api:<36} {entry['status']}", file=sys.stderr, flush=True)
    _dump(report, outdir, lib)


def _slug(api: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in api)


def _dump(report: dict, outdir: str, lib: str) -> None:
    with open(os.path.join(outdir, f"{lib}.json"), "w") as fh:
        json.dump(report, fh)


# =============================================================================== driver
def _spawn(lib: str, keys: List[str], opts: argparse.Namespace, outdir: str) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", lib, "--workloads", ",".join(keys),
           "--repeat", str(opts.repeat), "--min-time", str(opts.min_time), "--budget", str(opts.budget),
           "--threads", str(opts.threads), "--outdir", outdir]
    env = dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    try:
        proc = subprocess.run(cmd, env=env, timeout=opts.timeout)
        if proc.returncode != 0:
            return {"lib": lib, "status": f"crashed (exit {proc.returncode})", "entries": []}
    except subprocess.TimeoutExpired:
        return {"lib": lib, "status": f"timed out after {opts.timeout} s", "entries": []}
    path = os.path.join(outdir, f"{lib}.json")
    if not os.path.exists(path):
        return {"lib": lib, "status": "no report written", "entries": []}
    with open(path) as fh:
        return json.load(fh)


def _load(outdir: str, name: str) -> list:
    with np.load(os.path.join(outdir, name)) as data:
        return [data[f"arr_{k}"] for k in range(len(data.files))]


def _difference(result: list, reference: list) -> Tuple[float, float]:
    if len(result) != len(reference) or any(a.shape != b.shape for a, b in zip(result, reference)):
        shapes = [a.shape for a in result], [b.shape for b in reference]
        raise ValueError(f"shape mismatch {shapes}")
    abs_diff = max(float(np.max(np.abs(a - b), initial=0.0)) for a, b in zip(result, reference))
    scale = max(float(np.max(np.abs(b), initial=0.0)) for b in reference)
    return abs_diff, abs_diff / scale if scale else abs_diff


def collect(opts: argparse.Namespace) -> dict:
    """Run every library's subprocess ``opts.rounds`` times and merge the samples."""
    keys = [W.get(k).key for k in opts.workloads]
    libs = list(opts.libs)
    merged: Dict[Tuple[str, str, str], dict] = {}
    status: Dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="tapegrad-compare-") as outdir:
        run_libs = libs if "tapegrad" in libs else ["tapegrad"] + libs  # tapegrad is the reference
        for r in range(opts.rounds):
            order = run_libs if r % 2 == 0 else run_libs[::-1]
            for lib in order:
                print(f"[round {r + 1}/{opts.rounds}] {lib}", file=sys.stderr, flush=True)
                rep = _spawn(lib, keys, opts, outdir)
                status.setdefault(lib, {"status": rep["status"], "version": rep.get("version")})
                for e in rep["entries"]:
                    slot = merged.setdefault((lib, e["workload"], e["api"]), dict(e, numpy_samples=[], samples=[]))
                    if e["status"] == "ok":
                        slot["numpy_samples"] += e["numpy_samples"]
                        slot["samples"] += e["samples"]
                    elif slot["status"] == "ok":
                        slot["status"] = e["status"]
        rows = _rows(merged, keys, libs, outdir)
    return {"machine": machine_info(), "libraries": status, "rows": rows, "targets": targets(rows),
            "options": {"repeat": opts.repeat, "rounds": opts.rounds, "min_time": opts.min_time,
                        "threads": opts.threads}}


def _rows(merged: dict, keys: List[str], libs: List[str], outdir: str) -> list:
    rows = []
    for key in keys:
        ref_entry = next((e for (l, k, _), e in merged.items() if l == "tapegrad" and k == key), None)
        reference = None
        if ref_entry is not None and ref_entry.get("result_file"):
            reference = _load(outdir, ref_entry["result_file"])
        for (lib, k, api), e in merged.items():
            if k != key or lib not in libs:
                continue
            row = {"workload": key, "lib": lib, "api": api, "status": e["status"]}
            if e["status"] == "ok" and e["samples"]:
                med, np_med = statistics.median(e["samples"]), statistics.median(e["numpy_samples"])
                # Ratio of samples taken back to back, then the median: robust to load that drifts.
                paired = statistics.median(t / f for t, f in zip(e["samples"], e["numpy_samples"]))
                row.update(median_s=med, numpy_forward_s=np_med, ratio=paired,
                           min_s=min(e["samples"]), n_samples=len(e["samples"]))
                if reference is not None:
                    try:
                        row["max_abs_diff"], row["max_rel_diff"] = _difference(_load(outdir, e["result_file"]), reference)
                        if row["max_rel_diff"] > REL_TOL:
                            row["status"] = "MISMATCH"
                    except ValueError as exc:
                        row["status"] = f"MISMATCH ({exc})"
            rows.append(row)
    return rows


# Targets of the performance issues: (workload, kind, peer (lib, api) or None, bound).
# A peer api of None means that library's fastest api in the run ("best eager": jit is excluded).
TARGETS = [
    ("W1", "ratio", None, 6.0),
    ("W2", "ratio", None, 2.8),
    ("W2", "ratio_below", ("torch", "autograd.grad"), 1.0),
    ("W3", "ratio", None, 2.0),
    ("W4", "time_vs", ("torch", "func.jacrev"), 0.85),
    ("W4", "faster_than", ("autograd", "jacobian"), 10.0),
    ("W5", "time_vs", ("torch", "func.hessian"), 0.5),
    ("W5", "faster_than", ("autograd", "hessian"), 10.0),
    ("W6", "time_vs", ("torch", "functional.hessian(vectorize=True)"), 1.0),
    ("W6", "faster_than", ("autograd", "hessian"), 10.0),
    ("W7", "ratio", None, 10.0),
] + [(key, "time_vs", ("torch", None), 0.8) for key in ("W7", "W8", "W9", "W10", "W11")] + [
    # Issue 24, part 2: an outside harness found these classes behind PyTorch eager.
    ("W2", "time_vs", ("torch", None), 0.8),
] + [(key, "time_vs", ("torch", None), 1.0) for key in ("W12", "W13", "W14")]


def targets(rows: list) -> list:
    """Evaluate the issue's targets on the measured rows."""
    def find(key, lib, api=None):
        found = [r for r in rows if r["workload"] == key and r["lib"] == lib and (api is None or r["api"] == api)
                 and "median_s" in r and not r["api"].startswith("jit")]
        return min(found, key=lambda r: r["median_s"]) if found else None

    out = []
    measured = {r["workload"] for r in rows}
    for key, kind, peer, bound in TARGETS:
        if key not in measured:  # a workload left out of this run: no target line
            continue
        tg = find(key, "tapegrad")
        other = find(key, *peer) if peer else None
        if tg is None or (peer and other is None):
            what = "tapegrad" if tg is None else _peer_name(peer)
            out.append({"workload": key, "target": _target_text(kind, peer, bound), "value": None,
                        "verdict": f"n/a ({what} not measured)"})
            continue
        if kind == "ratio":
            value, ok = tg["ratio"], tg["ratio"] <= bound
        elif kind == "ratio_below":
            value = tg["ratio"] / other["ratio"]
            ok = value < bound
        elif kind == "time_vs":
            value = tg["median_s"] / other["median_s"]
            ok = value <= bound
        else:
            value = other["median_s"] / tg["median_s"]
            ok = value >= bound
        text = _target_text(kind, peer, bound) + (f" [{other['api']}]" if peer and peer[1] is None else "")
        out.append({"workload": key, "target": text, "value": value, "verdict": "PASS" if ok else "FAIL"})
    return out


def _peer_name(peer: tuple) -> str:
    return f"{peer[0]}[{peer[1]}]" if peer[1] is not None else f"{peer[0]}[best eager]"


def _target_text(kind: str, peer: Optional[tuple], bound: float) -> str:
    name = _peer_name(peer) if peer else ""
    return {
        "ratio": f"tapegrad / numpy fwd <= {bound:g}",
        "ratio_below": f"tapegrad ratio / {name} ratio < 1",
        "time_vs": f"tapegrad time / {name} time <= {bound:g}",
        "faster_than": f"{name} time / tapegrad time >= {bound:g}",
    }[kind]


def machine_info() -> dict:
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"date": time.strftime("%Y-%m-%d %H:%M"), "cpu": cpu, "cores": os.cpu_count(),
            "load_average": [round(v, 2) for v in os.getloadavg()],
            "python": platform.python_version(), "numpy": np.__version__, "platform": platform.platform()}


# =============================================================================== printing
def _fmt_time(s: Optional[float]) -> str:
    if s is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s * 1e9:.3g} ns"


def _fmt(x: Optional[float], spec: str) -> str:
    return "-" if x is None else format(x, spec)


def format_report(report: dict) -> str:
    lines = []
    m = report["machine"]
    lines.append(f"# {m['date']}  {m['cpu']} ({m['cores']} cores, load average at the end "
                 f"{'/'.join(map(str, m.get('load_average', [])))})  Python {m['python']}  NumPy {m['numpy']}")
    libs = ", ".join(f"{k} {v['version']}" if v["status"] == "ok" else f"{k}: {v['status']}"
                     for k, v in report["libraries"].items())
    lines.append(f"# libraries: {libs}")
    o = report["options"]
    threads = o.get("threads", 0)
    lines.append(f"# samples: up to {o['repeat']} per round x {o['rounds']} round(s), >= {o['min_time']} s each; "
                 f"threads per library: {threads if threads else 'library defaults'}")
    lines.append("")
    header = ["workload", "library[api]", "median", "numpy fwd", "ratio", "max abs diff", "max rel diff", "status"]
    table = [header]
    for r in report["rows"]:
        table.append([
            r["workload"], f"{r['lib']}[{r['api']}]", _fmt_time(r.get("median_s")),
            _fmt_time(r.get("numpy_forward_s")), _fmt(r.get("ratio"), ".1f"),
            _fmt(r.get("max_abs_diff"), ".1e"), _fmt(r.get("max_rel_diff"), ".1e"), r["status"],
        ])
    for lib, v in report["libraries"].items():
        if v["status"] != "ok":
            table.append(["all", lib, "-", "-", "-", "-", "-", v["status"]])
    lines += _markdown(table)
    lines.append("")
    lines.append("ratio: median over samples of (derivative time / plain NumPy forward time measured just before it,")
    lines.append("in the same process).  Peer targets compare medians of runs interleaved across processes.")
    lines.append("")
    lines.append("Targets:")
    lines.append("")
    lines += _markdown([["workload", "target", "value", "verdict"]] + [
        [t["workload"], t["target"], _fmt(t["value"], ".3g"), t["verdict"]] for t in report["targets"]
    ])
    return "\n".join(lines)


def _markdown(table: List[List[str]]) -> List[str]:
    widths = [max(len(str(row[c])) for row in table) for c in range(len(table[0]))]
    fmt = lambda row: "| " + " | ".join(str(v).ljust(w) for v, w in zip(row, widths)) + " |"  # noqa: E731
    return [fmt(table[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [fmt(r) for r in table[1:]]


# =============================================================================== overhead / memory
def overhead_report(min_time: float, repeat: int) -> str:
    """Microseconds per traced call and per backward node, tiny and large arrays."""
    import tapegrad as tg

    lines = ["Per-op cost (median us per call; overhead = traced - numpy):", ""]
    table = [["op", "size", "numpy", "traced fwd", "fwd overhead", "grad chain / node", "bwd per node"]]
    for size in W.OP_SIZES:
        for op, fn in W.OPS.items():
            x, y = W.op_args(size)
            k = W.op_calls(size)
            plain = lambda: W.run_ops(fn, x, y, k)  # noqa: E731

            def traced():
                with tg.GradientTape() as tape:
                    tx = tape.watch(x)
                    W.run_ops(fn, tx, y, k)

            row = [op, str(size)]
            t_np, t_tr = (statistics.median(s) / k for s in paired_samples([plain, traced], repeat, min_time, 30))
            row += [f"{t_np * 1e6:.2f}", f"{t_tr * 1e6:.2f}", f"{(t_tr - t_np) * 1e6:.2f}"]
            chain = W.CHAIN_OPS.get(op)
            if chain is None:
                row += ["-", "-"]
            else:
                def trace_chain():
                    with tg.GradientTape() as tape:
                        W.chain(chain, tape.watch(x), y, k)

                grad_chain = tg.grad(lambda v: W.chain(chain, v, y, k))
                s_tr, s_gr = paired_samples([trace_chain, lambda: grad_chain(x)], repeat, min_time, 30)
                t_tr_chain, t_gr = statistics.median(s_tr) / k, statistics.median(s_gr) / k
                row += [f"{t_gr * 1e6:.2f}", f"{(t_gr - t_tr_chain) * 1e6:.2f}"]
            table.append(row)
    lines += _markdown(table)
    lines.append("")
    lines.append("'grad chain / node': tg.grad of a chain of k such calls, divided by k; 'bwd per node' = that")
    lines.append("minus the traced forward of the same chain (the cost of one backward node).")
    return "\n".join(lines)


def memory_report() -> str:
    """Peak traced allocations (tracemalloc) of tapegrad's memory scenarios."""
    lines = ["Peak memory (tracemalloc: bytes allocated above what was alive when the call started):", ""]
    table = [["scenario", "peak", "peak / reference", "target"]]
    peaks: Dict[str, int] = {}
    for name in W.memory_scenario_names():
        fn, refs, target = W.memory_scenario(name)
        peaks[name] = W.traced_peak(fn)
        del fn
        ratios = [f"{peaks[name] / peaks[r]:.3g} x {r}" for r in refs if peaks.get(r)]
        table.append([name, f"{peaks[name] / 2**20:.2f} MiB", "; ".join(ratios) or "-", target])
    lines += _markdown(table)
    return "\n".join(lines)


def profile_report(keys: List[str], top: int, seconds: float = 2.0) -> str:
    """cProfile of tapegrad on each workload: the functions with the most own time.

    Each workload's derivative is called repeatedly for about ``seconds``
    (after a warm-up call); counts are per call of the derivative.
    """
    import cProfile
    import pstats

    out = []
    for key in keys:
        w = W.get(key)
        args = w.make_args()
        derivative = W.tapegrad_derivative(w)
        derivative(*args)
        calls = max(1, int(seconds / max(_time_calls(lambda: derivative(*args), 1), 1e-6)))
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(calls):
            derivative(*args)
        prof.disable()
        stats = pstats.Stats(prof)
        total = stats.total_tt
        out.append(f"== {w.label}: {total / calls * 1e3:.2f} ms per call under cProfile ({calls} calls)")
        rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:top]
        table = [["own %", "cum %", "calls/call", "function"]]
        for (filename, line, name), (cc, nc, tt, ct, _) in rows:
            where = f"{os.path.basename(filename)}:{line}({name})" if line else name
            table.append([f"{100 * tt / total:.1f}", f"{100 * ct / total:.1f}", f"{nc / calls:.0f}", where])
        out += _markdown(table)
        out.append("")
    return "\n".join(out)


class _Clock:
    """Exclusive time per category: a category's time excludes the categories nested inside it."""

    def __init__(self) -> None:
        self.totals: Dict[tuple, List[float]] = {}
        self.stack: List[float] = []  # per open frame: time spent in nested frames

    def wrap(self, category: tuple, fn: Callable) -> Callable:
        def timed(*args: Any, **kwargs: Any) -> Any:
            self.stack.append(0.0)
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - start
                nested = self.stack.pop()
                if self.stack:
                    self.stack[-1] += elapsed
                slot = self.totals.setdefault(category, [0, 0.0])
                slot[0] += 1
                slot[1] += elapsed - nested

        return timed


@contextlib.contextmanager
def _timed_rules(clock: _Clock):
    """Wrap every rule's forward and VJPs, and the backward driver's helpers, with ``clock``."""
    from tapegrad import backward as bw
    from tapegrad.registry import RULES

    saved = [(rule, rule.fun, rule.vjps) for rule in set(RULES.values())]
    hooks = _driver_helpers(bw)
    try:
        for rule, fun, vjps in saved:
            rule.fun = clock.wrap(("forward", rule.name), fun)
            rule.vjps = tuple(clock.wrap((f"vjp[{i}]", rule.name), v) if callable(v) else v
                              for i, v in enumerate(vjps))
        for owner, attr, fn in hooks:
            owner_name = "" if owner is bw else owner.__name__ + "."
            setattr(owner, attr, clock.wrap(("sweep helper", f"backward.{owner_name}{attr}"), fn))
        yield
    finally:
        for rule, fun, vjps in saved:
            rule.fun, rule.vjps = fun, vjps
        for owner, attr, fn in hooks:
            setattr(owner, attr, fn)


def tape_profile_report(keys: List[str], top: int, seconds: float = 2.0) -> str:
    """Where tapegrad's time goes, by recorded operation: forward calls, each VJP, the sweep's helpers.

    Every rule's ``fun`` and ``vjps`` and the backward driver's helpers are
    temporarily wrapped with timers; nested calls (a Hessian's traced VJPs)
    are counted exclusively.  "python overhead" is the rest: tracing,
    dispatch, node creation, the sweep's own loop.  The timers add about a
    microsecond per call, so tiny workloads look worse here than they are.
    """
    out = []
    for key in keys:
        w = W.get(key)
        args = w.make_args()
        derivative = W.tapegrad_derivative(w)
        derivative(*args)
        calls = max(1, int(seconds / max(_time_calls(lambda: derivative(*args), 1), 1e-6)))
        clock = _Clock()
        with _timed_rules(clock):
            total = _time_calls(lambda: derivative(*args), calls)
        items = sorted(clock.totals.items(), key=lambda kv: kv[1][1], reverse=True)
        rest = max(0.0, total - sum(t for _, (_, t) in items) / calls)
        table = [["% of total", "ms per call", "count per call", "what", "rule"]]
        for (what, name), (count, t) in items[:top]:
            table.append([f"{100 * t / calls / total:.1f}", f"{t / calls * 1e3:.3f}", f"{count / calls:.0f}", what, name])
        table.append([f"{100 * rest / total:.1f}", f"{rest * 1e3:.3f}", "-", "python overhead", "(the rest)"])
        out.append(f"== {w.label}: {total * 1e3:.2f} ms per call with timers ({calls} calls)")
        out += _markdown(table)
        out.append("")
    return "\n".join(out)


def _driver_helpers(module: Any) -> List[Tuple[Any, str, Callable]]:
    """The backward driver's helpers (accumulation, un-broadcasting, ...) to time.

    Every function and method defined in ``module`` except the sweep itself,
    found by introspection so that the profiler follows the driver's changes.
    """
    skip = {"backward", "_sweep"}
    hooks = []
    for name, obj in list(vars(module).items()):
        if getattr(obj, "__module__", None) != module.__name__ or name in skip:
            continue
        if isinstance(obj, types.FunctionType):
            hooks.append((module, name, obj))
        elif isinstance(obj, type):
            for attr, fn in list(vars(obj).items()):
                if isinstance(fn, types.FunctionType) and not attr.startswith("__"):
                    hooks.append((obj, attr, fn))
    return hooks


# =============================================================================== main
def reuse_report(repeat: int, min_time: float, budget: float) -> str:
    """``reuse=True`` workloads (asv_benches/benchmarks/reuse.py): each entry against its floor, in one process.

    The entries of a workload are sampled in alternation (garbage collector on); the
    ratio column is the median over rounds of entry / floor.
    """
    from benchmarks import reuse as R

    lines = ["| workload | entry | median | ratio to the floor (min-max) |", "|---|---|---|---|"]
    gc.enable()
    for name, pairs in R.entries().items():
        fns = [fn for _, fn in pairs]
        samples = paired_samples(fns, repeat, min_time, budget)
        floor = samples[0]
        for (label, _), times in zip(pairs, samples):
            ratios = [t / f for t, f in zip(times, floor)]
            lines.append(
                f"| {name} | {label} | {_fmt_time(statistics.median(times))} | "
                f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) |"
            )
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workloads", default=",".join(W.WORKLOADS), help="comma-separated, e.g. W1,W4 (default: all)")
    p.add_argument("--libs", default=",".join(LIBS), help=f"comma-separated subset of {','.join(LIBS)}")
    p.add_argument("--repeat", type=int, default=9, help="timing samples per entry and round (default 9)")
    p.add_argument("--rounds", type=int, default=1, help="run all libraries this many times, interleaved")
    p.add_argument("--min-time", type=float, default=0.05, help="seconds per sample at least (calls are looped)")
    p.add_argument("--budget", type=float, default=20.0, help="seconds per entry and round at most (>= 3 samples)")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per library subprocess")
    p.add_argument("--threads", type=int, default=0,
                   help="threads for every library's BLAS/OpenMP pools (default 0 = each library's own "
                        "default; 1 is far steadier on a busy machine)")
    p.add_argument("--json", dest="json_out", help="also write the full report (all samples) to this file")
    p.add_argument("--overhead", action="store_true", help="tapegrad per-op overhead instead of the table")
    p.add_argument("--memory", action="store_true", help="tapegrad peak-memory scenarios instead of the table")
    p.add_argument("--profile", action="store_true", help="cProfile tapegrad on each workload (top functions)")
    p.add_argument("--tape-profile", action="store_true",
                   help="tapegrad time per recorded operation (forward, each VJP, accumulation)")
    p.add_argument("--reuse", action="store_true", help="reuse=True workloads against their floor (one process)")
    p.add_argument("--top", type=int, default=15, help="rows per workload for --profile / --tape-profile")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--outdir", help=argparse.SUPPRESS)
    opts = p.parse_args(argv)
    opts.workloads = [k for k in opts.workloads.split(",") if k]
    opts.libs = [k for k in opts.libs.split(",") if k]
    unknown = [lib for lib in opts.libs if lib not in ADAPTERS]
    if unknown:
        p.error(f"unknown libraries {unknown}; known: {LIBS}")
    if opts.worker:
        run_worker(opts.worker, opts.workloads, opts.repeat, opts.min_time, opts.budget, opts.outdir)
        return 0
    if opts.reuse:
        print(reuse_report(opts.repeat, opts.min_time, opts.budget))
        return 0
    if opts.overhead or opts.memory or opts.profile or opts.tape_profile:
        if opts.profile:
            print(profile_report(opts.workloads, opts.top))
        if opts.tape_profile:
            print(tape_profile_report(opts.workloads, opts.top))
        if opts.overhead:
            print(overhead_report(opts.min_time, opts.repeat))
        if opts.memory:
            print(memory_report())
        return 0
    report = collect(opts)
    print(format_report(report))
    if opts.json_out:
        with open(opts.json_out, "w") as fh:
            json.dump(report, fh, indent=1)
    bad = [r for r in report["rows"] if r["status"].startswith("MISMATCH")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
