"""Derivatives of ``scipy.spatial.transform.Rotation``, reached through SciPy's door.

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
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.spatial.transform._rotation as _rotation
import scipy.spatial.transform._rotation_xp as _xp_backend
from scipy.spatial.transform import Rotation

from ..dispatch import strip, strip_all
from ..registry import defcomposite, intercepted

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
    original = _MUL.__wrapped__  # SciPy's own code while the door is in place
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
        return _AS_EULER.__wrapped__(self, seq, degrees=degrees, suppress_warnings=suppress_warnings)
    _AS_EULER.__wrapped__(_plain_copy(self), seq, degrees=degrees, suppress_warnings=suppress_warnings)
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
    original = _CONCATENATE.__wrapped__
    many = [rotations] if isinstance(rotations, Rotation) else rotations
    if not all(isinstance(r, Rotation) for r in many) or not any(_traced(r._quat) for r in many):
        return original(rotations)
    reference = original(_plain_copy(rotations) if isinstance(rotations, Rotation) else [_plain_copy(r) for r in many])
    quat = np.concatenate([np.reshape(r._quat, (-1, 4)) for r in many], axis=0)
    return _new(quat, reference)


def _approx_equal(self, other, atol=None, degrees=False):
    """A comparison: SciPy's own answer on the plain quaternions (it carries no gradient)."""
    original = _APPROX_EQUAL.__wrapped__
    if not isinstance(other, Rotation):
        return original(self, other, atol=atol, degrees=degrees)
    return original(_plain_copy(self), _plain_copy(other), atol=atol, degrees=degrees)


defcomposite(intercepted(_CONCATENATE, route_all=True), _concatenate, note="any rotation traced")
defcomposite(intercepted(_APPROX_EQUAL, route_all=True), _approx_equal, note="a comparison: constant")
