"""Derivatives of scipy.spatial.transform.Rotation in SciPy's default mode (tapegrad.rules.scipy_spatial).

Rotations built from traced values keep a traced quaternion; every method is
checked against central finite differences at first and second order, with a
batch of cotangents against single VJPs (check_grads), and against closed forms.
"""

import warnings

import numpy as np
import pytest
import scipy.spatial.transform as sst
from scipy._lib._array_api import SCIPY_ARRAY_API
from scipy.spatial.transform import RigidTransform, Rotation

import tapegrad as tg
from tapegrad import interception
from tapegrad.testing import check_grads


def array_api_mode():
    return bool(SCIPY_ARRAY_API)

rng = np.random.default_rng(11)
V = rng.uniform(-1.0, 1.0, 3)
VS = rng.uniform(-1.0, 1.0, (2, 3))
P = rng.uniform(-1.0, 1.0, (4, 3))
Q = np.append(rng.uniform(-0.5, 0.5, 3), 1.5)


def _same(traced, plain):
    traced = traced if isinstance(traced, tuple) else (traced,)
    plain = plain if isinstance(plain, tuple) else (plain,)
    for t, p in zip(traced, plain):
        np.testing.assert_allclose(t, p, rtol=1e-13, atol=1e-14)
        assert np.shape(t) == np.shape(p)


CONSTRUCTORS = {
    "from_rotvec": (lambda v: Rotation.from_rotvec(v), V),
    "from_rotvec batch": (lambda v: sst.Rotation.from_rotvec(v), VS),
    "from_rotvec degrees": (lambda v: Rotation.from_rotvec(40 * v, degrees=True), V),
    "from_quat": (lambda q: Rotation.from_quat(q), Q),
    "from_quat scalar_first": (lambda q: Rotation.from_quat(q, scalar_first=True), Q[::-1].copy()),
    "Rotation(quat)": (lambda q: Rotation(q), Q),
    "from_mrp": (lambda m: Rotation.from_mrp(0.4 * m), V),
    "from_matrix": (lambda v: Rotation.from_matrix(Rotation.from_rotvec(v).as_matrix()), VS),
    "from_euler xyz": (lambda a: Rotation.from_euler("xyz", a), V),
    "from_euler ZXZ degrees": (lambda a: Rotation.from_euler("ZXZ", 50 * a, degrees=True), VS),
    "from_euler one axis": (lambda a: Rotation.from_euler("y", a[0]), V),
    "from_euler two axes": (lambda a: Rotation.from_euler("XZ", a[:2]), V),
}
OUTPUTS = {
    "as_matrix": lambda r: r.as_matrix(),
    "as_quat": lambda r: r.as_quat(),
    "as_quat canonical scalar_first": lambda r: r.as_quat(canonical=True, scalar_first=True),
    "as_rotvec": lambda r: r.as_rotvec(),
    "as_rotvec degrees": lambda r: r.as_rotvec(degrees=True),
    "as_mrp": lambda r: r.as_mrp(),
    "as_euler xyz": lambda r: r.as_euler("xyz"),
    "as_euler ZYX degrees": lambda r: r.as_euler("ZYX", degrees=True),
    "as_euler zxz": lambda r: r.as_euler("zxz"),
    "as_euler YXY": lambda r: r.as_euler("YXY"),
    "magnitude": lambda r: r.magnitude(),
    "inv": lambda r: r.inv().as_quat(),
    "pow": lambda r: (r ** 0.7).as_rotvec(),
    "apply": lambda r: r.apply(P[:1] if r.single else P[:2]),
    "apply inverse": lambda r: r.apply(P[0], inverse=True),
    "mul": lambda r: (r * r.inv() * Rotation.from_rotvec([0.1, -0.2, 0.3]) * r).as_rotvec(),
}


@pytest.mark.parametrize("make", list(CONSTRUCTORS), ids=str)
def test_constructors(make):
    build, x = CONSTRUCTORS[make]
    check_grads(lambda x: build(x).as_matrix(), (x,))
    _same(tg.vjp(lambda x: build(x).as_quat(), x)[0], build(x).as_quat())


@pytest.mark.parametrize("out", list(OUTPUTS), ids=str)
@pytest.mark.parametrize("x", [V, VS], ids=["single", "batch"])
def test_methods(out, x):
    f = lambda v: OUTPUTS[out](Rotation.from_rotvec(v))  # noqa: E731
    check_grads(f, (x,))
    _same(tg.vjp(f, x)[0], f(x))


def test_apply_and_mul_with_traced_other_side():
    r = Rotation.from_euler("zyx", [0.3, -0.2, 0.5])
    check_grads(lambda p: r.apply(p), (P,))
    check_grads(lambda v, p: Rotation.from_rotvec(v).apply(p, inverse=True), (V, P))
    check_grads(lambda v: (r * Rotation.from_rotvec(v)).as_quat(), (V,))  # a plain rotation on the left
    check_grads(lambda a, b: (Rotation.from_rotvec(a) * Rotation.from_mrp(b)).as_euler("XYZ"), (V, 0.3 * VS))


def test_closed_forms():
    # R_z(t) = [[cos, -sin, 0], [sin, cos, 0], [0, 0, 1]]
    t = 0.7
    d = tg.jacobian(lambda t: Rotation.from_euler("z", t).as_matrix())(t)
    np.testing.assert_allclose(d, [[-np.sin(t), -np.cos(t), 0], [np.cos(t), -np.sin(t), 0], [0, 0, 0]], atol=1e-14)
    # |rotvec| is the angle: its gradient is the unit axis.
    np.testing.assert_allclose(tg.grad(lambda v: Rotation.from_rotvec(v).magnitude())(V), V / np.linalg.norm(V),
                               rtol=1e-12)
    # apply is linear in the points: its Jacobian is the matrix.
    m = Rotation.from_rotvec(V).as_matrix()
    np.testing.assert_allclose(tg.jacobian(lambda p: Rotation.from_rotvec(V).apply(p))(P[0]), m, atol=1e-14)
    # as_rotvec(from_rotvec(v)) = v for |v| < pi: the identity.
    np.testing.assert_allclose(tg.jacobian(lambda v: Rotation.from_rotvec(v).as_rotvec())(V), np.eye(3), atol=1e-12)
    np.testing.assert_allclose(tg.jacobian(lambda a: Rotation.from_euler("xyz", a).as_euler("xyz"))(V), np.eye(3),
                               atol=1e-12)


def test_batched_cotangent_jacobian_equals_stacked_vjps():
    f = lambda v: Rotation.from_rotvec(v).apply(P).ravel()  # noqa: E731
    jac = tg.jacobian(f)(V)
    _, vjp = tg.vjp(f, V)
    np.testing.assert_allclose(jac, np.stack([vjp(e)[0] for e in np.eye(jac.shape[0])]), rtol=1e-13, atol=1e-15)


def test_hessian_matches_finite_differences_of_the_gradient():
    f = lambda a: np.sum(Rotation.from_euler("zyx", a).apply(P) * P[::-1]) + Rotation.from_rotvec(a).magnitude()  # noqa
    h = tg.hessian(f)(V)
    grad = tg.grad(f)
    eps = 1e-6
    fd = np.stack([(grad(V + eps * e) - grad(V - eps * e)) / (2 * eps) for e in np.eye(3)])
    np.testing.assert_allclose(h, fd, rtol=1e-6, atol=1e-8)


def test_no_tracer_gives_scipys_exact_results_and_nothing_stays_changed():
    functions = [Rotation.__dict__[k] for k in ("__init__", "apply", "__mul__", "as_euler")]
    functions += [Rotation.__dict__[k].__func__ for k in ("from_rotvec", "from_euler", "from_matrix", "from_mrp")]
    codes = [f.__code__ for f in functions]
    seen = {}

    def f(v):
        r = Rotation.from_euler("xyz", [0.1, 0.2, 0.3])  # plain inside a recording: SciPy's own code
        seen["quat"] = (r * Rotation.from_rotvec([0.3, 0.0, 0.1])).as_quat()
        seen["euler"] = r.as_euler("zyx")
        seen["apply"] = r.apply(P)
        return np.sum(Rotation.from_rotvec(v).as_matrix())

    tg.grad(f)(V)
    r = Rotation.from_euler("xyz", [0.1, 0.2, 0.3])
    assert np.array_equal(seen["quat"], (r * Rotation.from_rotvec([0.3, 0.0, 0.1])).as_quat())
    assert np.array_equal(seen["euler"], r.as_euler("zyx"))
    assert np.array_equal(seen["apply"], r.apply(P))
    assert [f.__code__ for f in functions] == codes
    assert type(Rotation.from_rotvec(V)._backend).__name__ == "module"  # a fresh rotation after recording
    assert "cy" in Rotation.from_rotvec(V)._backend.__name__


def test_scipys_checks_and_warnings_are_kept():
    with pytest.raises(ValueError, match="Expected axis specification"):
        tg.grad(lambda a: np.sum(Rotation.from_euler("xyzx", a).as_quat()))(np.ones(4))
    with pytest.raises(ValueError):
        tg.grad(lambda q: np.sum(Rotation.from_quat(q).as_quat()))(np.ones(3))
    with pytest.raises(ValueError, match="zero norm"):
        tg.grad(lambda q: np.sum(Rotation.from_quat(q).as_quat()))(np.zeros(4))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tg.grad(lambda a: np.sum(Rotation.from_euler("xyz", a).as_euler("xyz")))(np.array([0.1, np.pi / 2, 0.2]))
    assert any("Gimbal lock" in str(w.message) for w in caught)


def test_inputs_not_mutated_and_lists_of_tracers():
    q = Q.copy()
    tg.grad(lambda q: np.sum(Rotation.from_quat(q).as_rotvec()))(q)
    assert np.array_equal(q, Q)
    g = tg.grad(lambda v: np.sum(Rotation.from_quat([v[0], v[1], 0.3, 1.0]).as_rotvec()))(V)
    eps = 1e-6
    f = lambda v: np.sum(Rotation.from_quat([v[0], v[1], 0.3, 1.0]).as_rotvec())  # noqa: E731
    np.testing.assert_allclose(g, [(f(V + eps * e) - f(V - eps * e)) / (2 * eps) for e in np.eye(3)], atol=1e-8)


def test_concatenate_mean_indexing_and_comparisons():
    f = lambda v: Rotation.concatenate(  # noqa: E731
        [Rotation.from_rotvec(v[0]), Rotation.from_rotvec(v[1:]), Rotation.from_rotvec([0.1, 0.2, 0.3])]
    ).as_rotvec()
    check_grads(f, (VS,))
    _same(tg.vjp(f, VS)[0], f(VS))
    check_grads(lambda v: Rotation.from_rotvec(v).mean(weights=[1.0, 3.0]).as_rotvec(), (VS,), order=1)
    check_grads(lambda v: np.stack([r.as_rotvec() for r in Rotation.from_rotvec(v)]), (VS,))
    same = []
    tg.grad(lambda v: same.append(Rotation.from_rotvec(v).approx_equal(Rotation.from_rotvec(v + 1e-3))) or
            np.sum(v))(VS)
    assert np.array_equal(same[0], Rotation.from_rotvec(VS).approx_equal(Rotation.from_rotvec(VS + 1e-3)))


def test_align_vectors_raises_clearly_in_the_default_mode():
    b = Rotation.from_rotvec([0.2, -0.1, 0.4]).apply(P) + 0.05 * rng.uniform(-1.0, 1.0, P.shape)
    f = lambda v: np.sum(Rotation.align_vectors(v, b)[0].as_rotvec())  # noqa: E731
    if not array_api_mode():
        with pytest.raises(tg.GradientDroppedError, match="align_vectors"):
            tg.grad(f)(P)
    else:  # SciPy's array-API code runs on tracers itself
        check_grads(f, (P,), order=1)


# ------------------------------------------------------------------ RigidTransform
C6 = rng.uniform(-1.0, 1.0, 6)
CS6 = rng.uniform(-1.0, 1.0, (2, 6))
TRANSFORMS = {
    "from_exp_coords": lambda c: RigidTransform.from_exp_coords(c),
    "from_exp_coords small angle": lambda c: RigidTransform.from_exp_coords(np.concatenate([1e-4 * c[..., :3],
                                                                                            c[..., 3:]], axis=-1)),
    "from_matrix": lambda c: RigidTransform.from_matrix(RigidTransform.from_exp_coords(c).as_matrix()),
    "RigidTransform(matrix)": lambda c: RigidTransform(RigidTransform.from_exp_coords(c).as_matrix()),
    "from_components": lambda c: sst.RigidTransform.from_components(c[..., 3:], Rotation.from_rotvec(c[..., :3])),
    "from_translation": lambda c: RigidTransform.from_translation(c[..., 3:]),
    "from_rotation": lambda c: RigidTransform.from_rotation(Rotation.from_mrp(0.5 * c[..., :3])),
}
TF_OUTPUTS = {
    "as_matrix": lambda t: t.as_matrix(),
    "as_exp_coords": lambda t: t.as_exp_coords(),
    "translation": lambda t: t.translation,
    "rotation": lambda t: t.rotation.as_rotvec(),
    "inv": lambda t: t.inv().as_matrix(),
    "pow": lambda t: (t ** 0.4).as_exp_coords(),
    "pow -1": lambda t: (t ** -1).as_matrix(),
    "apply": lambda t: t.apply(P[:1] if t.single else P[:2]),
    "apply inverse": lambda t: t.apply(P[0], inverse=True),
    "mul": lambda t: (t * RigidTransform.from_exp_coords([0.1, -0.2, 0.3, 1.0, 0.5, -2.0]) * t.inv() * t).as_matrix(),
}


@pytest.mark.parametrize("make", list(TRANSFORMS), ids=str)
@pytest.mark.parametrize("c", [C6, CS6], ids=["single", "batch"])
def test_rigid_transform_constructors(make, c):
    f = lambda c: TRANSFORMS[make](c).as_matrix()  # noqa: E731
    check_grads(f, (c,))
    _same(tg.vjp(f, c)[0], f(c))


@pytest.mark.parametrize("out", list(TF_OUTPUTS), ids=str)
@pytest.mark.parametrize("c", [C6, CS6], ids=["single", "batch"])
def test_rigid_transform_methods(out, c):
    f = lambda c: TF_OUTPUTS[out](RigidTransform.from_exp_coords(c))  # noqa: E731
    check_grads(f, (c,))
    if out == "pow":
        # SciPy's compiled power is off by ~1e-8 here; ours is exp(n log T): n times the coordinates.
        np.testing.assert_allclose(tg.vjp(f, c)[0], 0.4 * c, rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(f(c), 0.4 * c, rtol=1e-6)
    else:
        _same(tg.vjp(f, c)[0], f(c))


def test_rigid_transform_closed_forms_and_plain_sides():
    # A pure translation moves points by t: the Jacobian of apply in t is the identity.
    np.testing.assert_allclose(tg.jacobian(lambda t: RigidTransform.from_translation(t).apply(P[0]))(C6[:3]),
                               np.eye(3), atol=1e-15)
    # exp coords round trip: the identity.
    np.testing.assert_allclose(tg.jacobian(lambda c: RigidTransform.from_exp_coords(c).as_exp_coords())(C6),
                               np.eye(6), atol=1e-12)
    fixed = RigidTransform.from_exp_coords([0.3, 0.1, -0.2, 1.0, 2.0, 3.0])
    check_grads(lambda p: fixed.apply(p), (P,))
    check_grads(lambda c: (fixed * RigidTransform.from_exp_coords(c)).as_matrix(), (C6,))
    interception.uninstall(now=True)  # the gradients above left their trampolines lingering
    codes = [RigidTransform.__dict__[k].__code__ for k in ("__init__", "apply", "__mul__", "inv")]
    seen = []
    tg.grad(lambda c: seen.append((fixed * fixed.inv()).as_matrix()) or np.sum(c))(C6)
    assert np.array_equal(seen[0], (fixed * fixed.inv()).as_matrix())
    assert [RigidTransform.__dict__[k].__code__ for k in ("__init__", "apply", "__mul__", "inv")] == codes


def test_from_matrix_orthogonalises_like_scipy():
    m = Rotation.from_rotvec([0.3, 0.2, -0.1]).as_matrix() + 0.05 * rng.uniform(-1.0, 1.0, (3, 3))
    f = lambda m: Rotation.from_matrix(m).as_quat()  # noqa: E731
    check_grads(f, (m,))
    _same(tg.vjp(f, m)[0], f(m))
    with pytest.raises(ValueError, match="determinant"):
        tg.grad(lambda m: np.sum(Rotation.from_matrix(m).as_quat()))(-np.eye(3))


def test_keyword_calls():
    check_grads(lambda v: Rotation.from_rotvec(rotvec=v).as_matrix(), (V,))
    check_grads(lambda a: Rotation.from_euler(seq="xyz", angles=a, degrees=True).as_quat(), (30 * V,))
    check_grads(lambda q: Rotation.from_quat(quat=q).apply(vectors=P), (Q,))


def test_rigid_transform_power_checks():
    t = lambda c: RigidTransform.from_exp_coords(c)  # noqa: E731
    with pytest.raises(TypeError):  # no modulus, as in SciPy
        tg.grad(lambda c: np.sum(t(c).__pow__(2.0, 3).as_matrix()))(C6)
    with pytest.raises(tg.NonDifferentiableArgumentError, match="exponent"):
        tg.grad(lambda n: np.sum((t(C6) ** n).as_matrix()) + np.sum(t(n * C6).as_matrix()))(0.5)
    # The rewrite the message suggests is differentiable in n.
    check_grads(lambda n: RigidTransform.from_exp_coords(n * t(C6).as_exp_coords()).as_matrix(), (np.array(0.5),))
