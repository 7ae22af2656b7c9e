"""Derivatives of ``scipy.spatial.transform.Rotation`` and ``RigidTransform``, reached through SciPy's door.

A :class:`~scipy.spatial.transform.Rotation` stores one quaternion per rotation
(scalar last) in ``_quat`` and computes everything with a *backend* module:
SciPy's Cython one for NumPy arrays, or its array-API one (written with array
functions, ``scipy.spatial.transform._rotation_xp``).  In SciPy's default mode a
tracer would go to the Cython backend and drop its gradient.

The rules here make a rotation built from traced values hold a *traced*
quaternion and the array-API backend: its methods (``as_matrix``,
``as_quat``, ``as_rotvec``, ``as_euler``, ``as_mrp``, ``inv``,
``magnitude``, ``__pow__``, indexing) then run SciPy's own array code on the
tracer, so tapegrad records NumPy calls that it differentiates (at any order).
The entry points that would pick the Cython backend again are intercepted:

* the constructors ``Rotation(quat)`` (``__init__``, which ``from_quat`` and
  indexing call), ``from_rotvec``, ``from_euler``, ``from_matrix``,
  ``from_mrp``;
* ``apply`` (a traced rotation, or traced vectors) and ``__mul__`` (either
  factor traced; it sees every product made while a tape records and runs
  SciPy's own code when neither is traced).

Each rule first runs SciPy's own call on the plain values: SciPy's checks and
errors are kept, and its result fixes the output's shape, the ``single``
flag and the quaternion's sign (``q`` and ``-q`` are one rotation; the traced
quaternion takes the sign SciPy stored), so ``as_quat`` gives SciPy's numbers.

``RigidTransform`` follows the same plan with its 4 x 4 matrices (see the
section below).  Not covered (a clear :class:`~tapegrad.errors.GradientDroppedError`
from SciPy's compiled code): ``align_vectors``, ``as_davenport``,
``RigidTransform.from_dual_quat``/``as_dual_quat``, and ``mean`` of transforms.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.spatial.transform._rotation as _rotation
import scipy.spatial.transform._rotation_xp as _xp_backend
from scipy.spatial.transform import Rotation

from ..dispatch import strip, strip_all
from ..errors import NonDifferentiableArgumentError
from ..registry import ORIGINALS, defcomposite, intercepted

_NAMESPACE = _rotation.array_namespace


def _traced(x: Any) -> bool:
    return strip(x) is not x


def _float64(x: Any) -> Any:
    """SciPy's ``_promote`` for NumPy input: float64 (a list holding tracers becomes one traced array)."""
    if isinstance(x, (list, tuple)) or np.isscalar(x):
        x = np.asarray(x)  # while a tape records, tapegrad's asarray stacks traced elements
    return x if np.result_type(x) == np.float64 else x.astype(np.float64)


def _plain_copy(rot: Rotation) -> Rotation:
    """The same rotation with its quaternion as a plain array and the backend SciPy picks for it."""
    out = Rotation.__new__(Rotation)
    out.__dict__.update(rot.__dict__)
    quat = np.asarray(strip(rot._quat))
    if quat.ndim == 1:  # one rotation stored 1-D (array-API mode): NumPy's layout is (1, 4) and single
        quat, out._single = quat[None], True
    out._quat = quat
    out._xp = _NAMESPACE(quat)
    out._backend = _rotation.select_backend(out._xp, cython_compatible=quat.ndim < 3)
    return out


def _with_signs_of(quat: Any, reference: np.ndarray) -> Any:
    """``quat`` reshaped like SciPy's ``reference`` and sign-matched to it row by row."""
    quat = np.reshape(quat, reference.shape)
    dots = np.sum(np.asarray(strip_all(quat)) * reference, axis=-1, keepdims=True)
    flip = np.where(dots < 0, -1.0, 1.0)
    return quat * flip if np.any(flip < 0) else quat


def _adopt(rot: Rotation, quat: Any, reference: Rotation) -> Rotation:
    """Make ``rot`` hold the traced ``quat`` (shaped and signed like ``reference``) with the array backend."""
    rot._single = reference._single
    rot._quat = _with_signs_of(quat, np.asarray(reference._quat))
    rot._xp = _NAMESPACE(rot._quat)
    rot._backend = _xp_backend
    return rot


def _new(quat: Any, reference: Rotation) -> Rotation:
    return _adopt(Rotation.__new__(Rotation), quat, reference)


# ---------------------------------------------------------------- constructors
_INIT = Rotation.__dict__["__init__"]


def _init(self, quat, normalize=True, copy=True, scalar_first=False):
    reference = Rotation(strip_all(quat), normalize=normalize, copy=copy, scalar_first=scalar_first)
    q = _xp_backend.from_quat(_float64(quat), normalize=normalize, copy=copy, scalar_first=scalar_first)
    _adopt(self, q, reference)


defcomposite(intercepted(_INIT), _init, note="a traced quaternion, SciPy's array-API backend")


def _from_rotvec(rotvec, degrees=False):
    reference = Rotation.from_rotvec(strip_all(rotvec), degrees=degrees)
    return _new(_xp_backend.from_rotvec(_float64(rotvec), degrees=degrees), reference)


def _from_mrp(mrp):
    reference = Rotation.from_mrp(strip_all(mrp))
    return _new(_xp_backend.from_mrp(_float64(mrp)), reference)


def _from_matrix(matrix, *, assume_valid=False):
    reference = Rotation.from_matrix(strip_all(matrix), assume_valid=assume_valid)
    return _new(_xp_backend.from_matrix(_float64(matrix), assume_valid=assume_valid), reference)


_AXES = {"x": 0, "y": 1, "z": 2}


def _elementary(axis: int, angle: Any) -> Any:
    """The quaternion of a rotation by ``angle`` about one coordinate axis (scalar last)."""
    zero = np.zeros_like(angle)
    parts = [zero, zero, zero, np.cos(angle / 2.0)]
    parts[axis] = np.sin(angle / 2.0)
    return np.stack(parts, axis=-1)


def _from_euler(seq, angles, degrees=False):
    reference = Rotation.from_euler(seq, strip_all(angles), degrees=degrees)  # SciPy checks seq and shapes
    angles = _float64(angles)
    if degrees:
        angles = np.deg2rad(angles)
    angles = np.reshape(angles, np.shape(angles) if np.ndim(angles) else (1,))
    if np.shape(angles)[-1] != len(seq):  # a single-axis sequence given one angle per rotation
        angles = angles[..., None]
    intrinsic = seq.isupper()
    axes = [_AXES[c] for c in seq.lower()]
    # Intrinsic rotations compose on the right, extrinsic ones on the left.
    quat = _elementary(axes[0], angles[..., 0])
    for i in range(1, len(axes)):
        step = _elementary(axes[i], angles[..., i])
        quat = _xp_backend.compose_quat(quat, step) if intrinsic else _xp_backend.compose_quat(step, quat)
    return _new(quat, reference)


for _name, _impl in (
    ("from_rotvec", _from_rotvec),
    ("from_mrp", _from_mrp),
    ("from_matrix", _from_matrix),
    ("from_euler", _from_euler),
):
    defcomposite(intercepted(Rotation.__dict__[_name].__func__), _impl, note="SciPy's array-API backend on tracers")


# ---------------------------------------------------------------- apply and composition
_APPLY = Rotation.__dict__["apply"]
_MUL = Rotation.__dict__["__mul__"]


def _apply(self, vectors, inverse=False):
    expected = np.shape(_APPLY(_plain_copy(self), strip_all(vectors), inverse=inverse))  # SciPy's checks and shape
    v = _float64(vectors)
    if np.ndim(v) == 1:
        v = v[None, :]
    out = _xp_backend.apply(self._quat, v, inverse=inverse)
    return np.reshape(out, expected)


def _mul(self, other):
    original = ORIGINALS[_MUL]  # SciPy's own code while the door is in place
    traced = isinstance(other, Rotation) and (_traced(self._quat) or _traced(other._quat))
    if not traced:
        return original(self, other)
    reference = original(_plain_copy(self), _plain_copy(other))  # NotImplemented, SciPy's checks
    if reference is NotImplemented:
        return reference
    quat = _xp_backend.compose_quat(self._quat, other._quat)
    quat = quat / np.linalg.norm(quat, axis=-1, keepdims=True)  # Rotation(quat, normalize=True)
    return _new(quat, reference)


defcomposite(intercepted(_APPLY, inspect_self=True), _apply, note="SciPy's array-API backend on tracers")
defcomposite(intercepted(_MUL, route_all=True), _mul, note="either factor traced")


# ---------------------------------------------------------------- Euler angles of a traced rotation
_AS_EULER = Rotation.__dict__["as_euler"]


def _as_euler(self, seq, degrees=False, *, suppress_warnings=False):
    """Euler angles by the quaternion method SciPy uses (Bernardes and Viollet, 2022), on tracers.

    SciPy's own call on the plain quaternion runs first: it checks ``seq`` and
    warns about gimbal lock exactly as it would.  At gimbal lock the third
    angle is set to zero and the first takes the whole rotation, as in SciPy.
    """
    if not _traced(self._quat):
        return ORIGINALS[_AS_EULER](self, seq, degrees=degrees, suppress_warnings=suppress_warnings)
    ORIGINALS[_AS_EULER](_plain_copy(self), seq, degrees=degrees, suppress_warnings=suppress_warnings)
    quat = self._quat
    extrinsic = seq.islower()
    i, j, k = [_AXES[c] for c in (seq.lower() if extrinsic else seq.lower()[::-1])]
    symmetric = i == k
    if symmetric:
        k = 3 - i - j
    sign = (i - j) * (j - k) * (k - i) // 2
    w = quat[..., 3]
    if symmetric:
        a, b, c, d = w, quat[..., i], quat[..., j], quat[..., k] * sign
    else:
        a = w - quat[..., j]
        b = quat[..., i] + quat[..., k] * sign
        c = quat[..., j] + w
        d = quat[..., k] * sign - quat[..., i]
    half_sum = np.arctan2(b, a)
    half_diff = np.arctan2(d, c)
    middle = 2 * np.arctan2(np.hypot(c, d), np.hypot(a, b))
    plain_middle = np.asarray(strip(middle))
    near_zero = np.abs(plain_middle) <= 1e-7
    regular = ~(near_zero | (np.abs(plain_middle - np.pi) <= 1e-7))
    angles = [np.where(near_zero, 2 * half_sum, 2 * half_diff * (-1 if extrinsic else 1)), middle, np.zeros_like(middle)]
    first, third = (0, 2) if extrinsic else (2, 0)
    angles[first] = np.where(regular, half_sum - half_diff, angles[first])
    last = np.where(regular, half_sum + half_diff, angles[third])
    if not symmetric:
        last = last * sign
        angles[1] = angles[1] - np.pi / 2
    angles[third] = last
    out = np.mod(np.stack(angles, axis=-1) + np.pi, 2 * np.pi) - np.pi
    if degrees:
        out = out * (180.0 / np.pi)
    return out[0] if self._single else out


defcomposite(intercepted(_AS_EULER, inspect_self=True), _as_euler, note="SciPy's quaternion method on tracers")


# ---------------------------------------------------------------- several rotations at once
_CONCATENATE = Rotation.__dict__["concatenate"].__func__
_APPROX_EQUAL = Rotation.__dict__["approx_equal"]


def _concatenate(rotations):
    original = ORIGINALS[_CONCATENATE]
    many = [rotations] if isinstance(rotations, Rotation) else rotations
    if not all(isinstance(r, Rotation) for r in many) or not any(_traced(r._quat) for r in many):
        return original(rotations)
    reference = original(_plain_copy(rotations) if isinstance(rotations, Rotation) else [_plain_copy(r) for r in many])
    quat = np.concatenate([np.reshape(r._quat, (-1, 4)) for r in many], axis=0)
    return _new(quat, reference)


def _approx_equal(self, other, atol=None, degrees=False):
    """A comparison: SciPy's own answer on the plain quaternions (it carries no gradient)."""
    original = ORIGINALS[_APPROX_EQUAL]
    if not isinstance(other, Rotation):
        return original(self, other, atol=atol, degrees=degrees)
    return original(_plain_copy(self), _plain_copy(other), atol=atol, degrees=degrees)


defcomposite(intercepted(_CONCATENATE, route_all=True), _concatenate, note="any rotation traced")
defcomposite(intercepted(_APPROX_EQUAL, route_all=True), _approx_equal, note="a comparison: constant")


# ================================================================ RigidTransform
# A RigidTransform stores one 4 x 4 matrix per transform in ``_matrix``.  Built from
# traced values it keeps a traced matrix and SciPy's array-API backend, as rotations
# do; the steps whose array code writes traced values into plain arrays (the exponential
# coordinates, the inverse, building a matrix from its parts) are written here with
# NumPy calls, and the constructors, ``apply``, ``__mul__``, ``inv``, ``__pow__`` and
# ``as_exp_coords`` are intercepted.
_TRANSFORM = _rigid = None
try:
    import scipy.spatial.transform._rigid_transform as _rigid
    import scipy.spatial.transform._rigid_transform_xp as _rigid_backend
    from scipy.spatial.transform import RigidTransform as _TRANSFORM
except ImportError:  # a SciPy without RigidTransform
    pass


def _plain_transform(tf: Any) -> Any:
    """The same transform with its matrix as a plain array and the backend SciPy picks for it."""
    out = _TRANSFORM.__new__(_TRANSFORM)
    out.__dict__.update(tf.__dict__)
    matrix = np.asarray(strip(tf._matrix))
    if matrix.ndim == 2:  # one transform stored 2-D (array-API mode): NumPy's layout is (1, 4, 4)
        matrix, out._single = matrix[None], True
    out._matrix = matrix
    out._xp = _NAMESPACE(matrix)
    out._backend = _rigid.select_backend(out._xp, matrix.ndim < 4)
    return out


def _new_transform(matrix: Any, reference: Any) -> Any:
    """A transform holding the traced ``matrix`` (shaped like SciPy's ``reference``), array backend."""
    tf = _TRANSFORM.__new__(_TRANSFORM)
    tf._single = reference._single
    tf._matrix = np.reshape(matrix, np.shape(reference._matrix))
    tf._xp = _NAMESPACE(tf._matrix)
    tf._backend = _rigid_backend
    return tf


def _assemble(rotation: Any, translation: Any) -> Any:
    """``[[R, t], [0, 0, 0, 1]]`` from stacks of 3 x 3 matrices and 3-vectors (traced-capable)."""
    batch = np.broadcast_shapes(np.shape(rotation)[:-2], np.shape(translation)[:-1])
    rotation = np.broadcast_to(rotation, batch + (3, 3))
    translation = np.broadcast_to(translation, batch + (3,))
    top = np.concatenate([rotation, translation[..., :, None]], axis=-1)
    bottom = np.broadcast_to(np.array([0.0, 0.0, 0.0, 1.0]), batch + (1, 4))
    return np.concatenate([top, bottom], axis=-2)


def _skew(v: Any) -> Any:
    """The cross-product matrices of a stack of 3-vectors."""
    zero = np.zeros_like(v[..., 0])
    rows = [
        np.stack([zero, -v[..., 2], v[..., 1]], axis=-1),
        np.stack([v[..., 2], zero, -v[..., 0]], axis=-1),
        np.stack([-v[..., 1], v[..., 0], zero], axis=-1),
    ]
    return np.stack(rows, axis=-2)


def _angle_and_guard(rotvec: Any) -> tuple:
    angle = np.linalg.norm(rotvec, axis=-1, keepdims=True)
    small = np.asarray(strip(angle)) < 1e-3  # a series below 1e-3 rad, as SciPy
    return angle, small, angle + small  # the guard only stops 0 / 0 in the branch not taken


def _exp_translation(rotvec: Any) -> Any:
    """``V = I + k1 S + k2 S^2``: SE(3) translations from the se(3) translation part."""
    angle, small, safe = _angle_and_guard(rotvec)
    k1 = np.where(small, 0.5 - angle**2 / 24 + angle**4 / 720, (1.0 - np.cos(angle)) / safe**2)
    k2 = np.where(small, 1 / 6 - angle**2 / 120 + angle**4 / 5040, (angle - np.sin(angle)) / safe**3)
    s = _skew(rotvec)
    return np.eye(3) + k1[..., None] * s + k2[..., None] * (s @ s)


def _log_translation(rotvec: Any) -> Any:
    """``V^-1 = I - S / 2 + k S^2`` in closed form."""
    angle, small, safe = _angle_and_guard(rotvec)
    k = np.where(small, 1 / 12 + angle**2 / 720 + angle**4 / 30240, (1 - 0.5 * angle / np.tan(0.5 * safe)) / safe**2)
    s = _skew(rotvec)
    return np.eye(3) - 0.5 * s + k[..., None] * (s @ s)


def _matrix_from_exp(coords: Any) -> Any:
    rotvec = coords[..., :3]
    rotation = _xp_backend.as_matrix(_xp_backend.from_rotvec(rotvec))
    return _assemble(rotation, (_exp_translation(rotvec) @ coords[..., 3:, None])[..., 0])


def _exp_from_matrix(matrix: Any) -> Any:
    rotvec = _xp_backend.as_rotvec(_xp_backend.from_matrix(matrix[..., :3, :3], assume_valid=True))
    translation = (_log_translation(rotvec) @ matrix[..., :3, 3, None])[..., 0]
    return np.concatenate([rotvec, translation], axis=-1)


def _inverse_matrix(matrix: Any) -> Any:
    r_t = np.swapaxes(matrix[..., :3, :3], -1, -2)
    return _assemble(r_t, -(r_t @ matrix[..., :3, 3, None])[..., 0])


if _TRANSFORM is not None:
    _TF_INIT = _TRANSFORM.__dict__["__init__"]
    _TF_APPLY = _TRANSFORM.__dict__["apply"]
    _TF_MUL = _TRANSFORM.__dict__["__mul__"]
    _TF_INV = _TRANSFORM.__dict__["inv"]
    _TF_POW = _TRANSFORM.__dict__["__pow__"]
    _TF_AS_EXP = _TRANSFORM.__dict__["as_exp_coords"]
    _TF_STATIC = {k: _TRANSFORM.__dict__[k].__func__ for k in ("from_exp_coords", "from_translation", "from_rotation")}

    def _tf_init(self, matrix, normalize=True, copy=True):
        reference = _TRANSFORM(strip_all(matrix), normalize=normalize, copy=copy)  # SciPy's checks
        m = _float64(matrix)
        if normalize:  # the rotation block is orthogonalised through its quaternion, as in SciPy
            rotation = _xp_backend.as_matrix(_xp_backend.from_matrix(m[..., :3, :3]))
            m = _assemble(rotation, m[..., :3, 3])
        tf = _new_transform(m, reference)
        self.__dict__.update(tf.__dict__)

    def _tf_from_exp_coords(exp_coords):
        reference = _TF_STATIC["from_exp_coords"](strip_all(exp_coords))
        return _new_transform(_matrix_from_exp(_float64(exp_coords)), reference)

    def _tf_from_translation(translation):
        reference = _TF_STATIC["from_translation"](strip_all(translation))
        t = _float64(translation)
        return _new_transform(_assemble(np.eye(3), t), reference)

    def _tf_from_rotation(rotation):
        original = ORIGINALS[_TF_STATIC["from_rotation"]]
        if not isinstance(rotation, Rotation) or not _traced(rotation._quat):
            return original(rotation)
        reference = original(_plain_copy(rotation))
        return _new_transform(_assemble(rotation.as_matrix(), np.zeros(3)), reference)

    def _tf_apply(self, vector, inverse=False):
        expected = np.shape(_TF_APPLY(_plain_transform(self), strip_all(vector), inverse=inverse))
        matrix = _inverse_matrix(self._matrix) if inverse else self._matrix
        v = _float64(vector)
        out = (matrix[..., :3, :3] @ v[..., None])[..., 0] + matrix[..., :3, 3]
        return np.reshape(out, expected)

    def _tf_mul(self, other):
        original = ORIGINALS[_TF_MUL]
        traced = isinstance(other, _TRANSFORM) and (_traced(self._matrix) or _traced(other._matrix))
        if not traced:
            return original(self, other)
        reference = original(_plain_transform(self), _plain_transform(other))
        if reference is NotImplemented:
            return reference
        return _new_transform(_tf_init_matrix(self._matrix @ other._matrix), reference)

    def _tf_init_matrix(m):
        """What ``RigidTransform(m, normalize=True)`` stores: the rotation block re-orthogonalised."""
        rotation = _xp_backend.as_matrix(_xp_backend.from_matrix(m[..., :3, :3]))
        return _assemble(rotation, m[..., :3, 3])

    def _tf_inv(self):
        if not _traced(self._matrix):
            return ORIGINALS[_TF_INV](self)
        return _new_transform(_inverse_matrix(self._matrix), ORIGINALS[_TF_INV](_plain_transform(self)))

    def _tf_pow(self, n):
        original = ORIGINALS[_TF_POW]
        if not _traced(self._matrix) and not _traced(n):
            return original(self, n)
        if _traced(n):
            raise NonDifferentiableArgumentError(
                "tapegrad cannot differentiate scipy.spatial.transform.RigidTransform.__pow__ in the exponent n: "
                "pass it as a constant (tapegrad.stop_gradient(n)), or write T ** n as "
                "RigidTransform.from_exp_coords(n * T.as_exp_coords())."
            )
        reference = original(_plain_transform(self), n)  # SciPy's checks and special cases
        if n == 0:
            return _new_transform(np.asarray(reference._matrix), reference)
        if n == 1:
            return _new_transform(self._matrix, reference)
        if n == -1:
            return _new_transform(_inverse_matrix(self._matrix), reference)
        return _new_transform(_matrix_from_exp(_exp_from_matrix(self._matrix) * n), reference)

    def _tf_as_exp_coords(self):
        if not _traced(self._matrix):
            return ORIGINALS[_TF_AS_EXP](self)
        coords = _exp_from_matrix(self._matrix)
        return coords[0] if self._single else coords

    defcomposite(intercepted(_TF_INIT), _tf_init, note="a traced matrix, SciPy's array-API backend")
    defcomposite(intercepted(_TF_STATIC["from_exp_coords"]), _tf_from_exp_coords)
    defcomposite(intercepted(_TF_STATIC["from_translation"]), _tf_from_translation)
    defcomposite(intercepted(_TF_STATIC["from_rotation"], route_all=True), _tf_from_rotation)
    defcomposite(intercepted(_TF_APPLY, inspect_self=True), _tf_apply)
    defcomposite(intercepted(_TF_MUL, route_all=True), _tf_mul, note="either factor traced")
    defcomposite(intercepted(_TF_INV, inspect_self=True), _tf_inv)
    defcomposite(intercepted(_TF_POW, inspect_self=True), _tf_pow)
    defcomposite(intercepted(_TF_AS_EXP, inspect_self=True), _tf_as_exp_coords)
