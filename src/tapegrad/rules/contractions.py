"""Derivatives of tensor contractions: einsum, tensordot, dot and their relatives.

Every ``np.einsum`` call is rewritten into one canonical form (explicit output,
ellipses replaced by letters) and recorded as one node of the internal
primitive :func:`einsum_p`.  The VJP for operand ``k`` is another
:func:`einsum_p` of the cotangent with the other operands, so every order of
derivative is again an einsum.  Batch axes of the cotangent get fresh letters
in front.  Two details make the VJP exact:

* a label that occurs only in operand ``k`` (summed away there) is
  broadcast back along its axis;
* a label repeated inside operand ``k`` (a diagonal, ``'ii->i'``) puts the
  cotangent on that diagonal with a constant Kronecker-delta operand.

``np.tensordot`` is a primitive whose VJPs are tensordots (BLAS, no einsum
parsing on the hot path).  The other functions here (``dot``, ``inner``,
``outer``, ``vdot``, ``kron``, ``cross``, ``trace``, ``diagonal``,
``multi_dot``, ``matrix_transpose`` and the ``np.linalg`` spellings) are composites of matmul, tensordot, einsum and
element-wise rules.
"""

from __future__ import annotations

import functools
import math
import string
import warnings
from typing import Any, Sequence

import numpy as np

from ..dispatch import _reject_out, primitive
from ..registry import CONSTANT_ARG, defcomposite, defconstant, defstrong, defvjp
from ._util import strong_bilinear, swap_last

__all__ = ["einsum_p", "canonical_einsum"]

_LETTERS = string.ascii_letters
#: NumPy's limit on the number of operands of one call (NPY_MAXARGS in NumPy 2).
_MAX_OPERANDS = 64


# ---------------------------------------------------------------- einsum parsing
def _sublist_to_labels(sublist: Sequence[Any]) -> str:
    """Interleaved-form labels (ints, Ellipsis) to a subscript string, as NumPy's C parser does."""
    out = []
    for s in sublist:
        if s is Ellipsis:
            out.append("...")
        else:
            s = int(s)
            if not 0 <= s < 52:
                raise ValueError(f"subscript {s} is not in range [0, 52) in einstein sum")
            # 0-25 -> 'A'-'Z', 26-51 -> 'a'-'z': keeps numeric order == ASCII order.
            out.append(chr(ord("A") + s) if s < 26 else chr(ord("a") + s - 26))
    return "".join(out)


def _split_call(args: tuple) -> tuple:
    """``(subscripts, operands)`` from either einsum calling convention."""
    if isinstance(args[0], str):
        return args[0], list(args[1:])
    operands, terms = [], []
    rest = list(args)
    while len(rest) >= 2:
        operands.append(rest.pop(0))
        terms.append(_sublist_to_labels(rest.pop(0)))
    spec = ",".join(terms)
    if rest:
        spec += "->" + _sublist_to_labels(rest[0])
    return spec, operands


@functools.lru_cache(maxsize=1024)
def canonical_einsum(subscripts: str, ndims: tuple) -> str:
    """Rewrite einsum subscripts with an explicit output and no ellipsis.

    Parameters
    ----------
    subscripts : str
        The subscripts as the user wrote them (implicit or explicit output, ``...``).
    ndims : tuple of int
        Number of dimensions of each operand.

    Returns
    -------
    str
        Equivalent subscripts ``'ab,bc->ac'`` using letters only.
    """
    spec = subscripts.replace(" ", "")
    if "->" in spec:
        lhs, out = spec.split("->")
        explicit = True
    else:
        lhs, out, explicit = spec, "", False
    terms = lhs.split(",")
    if len(terms) != len(ndims):
        raise ValueError(f"einsum: {len(terms)} subscript terms for {len(ndims)} operands")
    used = set(spec) - set(".,->")
    free = [c for c in _LETTERS if c not in used]
    widths = []
    for term, nd in zip(terms, ndims):
        width = nd - len(term.replace("...", "")) if "..." in term else 0
        if width < 0 or ("..." not in term and len(term) != nd):
            raise ValueError(f"einsum: subscripts {term!r} do not match an operand with {nd} dimensions")
        widths.append(width)
    n_ell = max(widths, default=0)
    if n_ell > len(free):
        raise ValueError("einsum: too many dimensions for the available subscript letters")
    ell = "".join(free[:n_ell])
    terms = [t.replace("...", ell[n_ell - w :]) for t, w in zip(terms, widths)]
    if explicit:
        if "..." in out:
            out = out.replace("...", ell)
        elif n_ell:
            raise ValueError(
                "output has more dimensions than subscripts given in einstein sum, but no '...' "
                "ellipsis provided to broadcast the extra dimensions."
            )
    else:
        counts = {}
        for t in terms:
            for c in t:
                counts[c] = counts.get(c, 0) + 1
        out = ell + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ell))
    return ",".join(terms) + "->" + out


def _parse(spec: str) -> tuple:
    lhs, out = spec.split("->")
    return lhs.split(","), out


# ---------------------------------------------------------------- einsum primitive
def _einsum_impl(spec: str, *operands: Any, optimize: Any = False, **kwargs: Any) -> Any:
    return np.einsum(spec, *operands, optimize=optimize, **kwargs)


einsum_p = primitive(_einsum_impl)


def _delta(size: int, ndim: int, dtype: Any) -> np.ndarray:
    """The ``ndim``-way Kronecker delta of side ``size`` (ones on the main diagonal), read-only.

    Deltas up to 4 MiB are cached: the VJP of ``np.diagonal(a)`` of an n x n ``a`` (a
    log-determinant from a Cholesky factor) would otherwise build one in every sweep.
    """
    if size**ndim * np.dtype(dtype).itemsize <= 1 << 22:
        return _cached_delta(size, ndim, dtype)
    return _build_delta(size, ndim, dtype)


def _build_delta(size: int, ndim: int, dtype: Any) -> np.ndarray:
    d = np.zeros((size,) * ndim, dtype=dtype)
    d[(np.arange(size),) * ndim] = 1
    d.flags.writeable = False
    return d


_cached_delta = functools.lru_cache(maxsize=32)(_build_delta)


@functools.lru_cache(maxsize=1024)
def _vjp_plan(spec: str, k: int, nb: int) -> tuple:
    """Subscripts for the cotangent of operand ``k`` given ``nb`` batch axes.

    Returns ``(contract, kept, unique, diag)``: ``contract`` maps (g, other
    operands) to ``kept``, the labels of operand ``k`` that are seen elsewhere;
    ``unique`` lists operand ``k``'s labels once each; ``diag`` is ``None`` or
    ``(subscripts, deltas)`` spreading the unique labels onto repeated ones.
    """
    terms, out = _parse(spec)
    used = set(spec)
    free = [c for c in _LETTERS if c not in used]
    if nb > len(free):
        raise ValueError("einsum: too many batch axes for the available subscript letters")
    batch = "".join(free[:nb])
    free = free[nb:]
    term = terms[k]
    others = [t for j, t in enumerate(terms) if j != k]
    elsewhere = set(out).union(*others) if others else set(out)
    unique = "".join(dict.fromkeys(term))
    kept = "".join(c for c in unique if c in elsewhere)
    contract = ",".join([batch + out] + others) + "->" + batch + kept
    diag = None
    if len(unique) != len(term):
        # Give every repeat a fresh letter; a delta ties it to the first occurrence.
        target, ties = [], {}
        for c in term:
            if c in target or c in ties.get(c, ""):
                fresh = free.pop(0)
                ties[c] = ties.get(c, "") + fresh
                target.append(fresh)
            else:
                target.append(c)
        deltas = tuple((c + extra) for c, extra in ties.items())
        diag = (",".join((batch + unique,) + deltas) + "->" + batch + "".join(target), deltas)
    return contract, kept, unique, diag


def _vjp_optimize(optimize: Any, n_operands: int) -> Any:
    # A two-operand VJP without optimization runs NumPy's C loops instead of BLAS; an
    # explicit contraction path given for the forward does not fit the VJP's operands.
    if n_operands < 2:
        return False
    return optimize if isinstance(optimize, str) else True


#: A contraction that sums is computed as a product and a sum only while the product (the
#: einsum's whole iteration space) has at most this many times the cotangent's elements.
_PRODUCT_SUM_WIDENING = 8


@functools.lru_cache(maxsize=1024)
def _product_sum_plan(contract: str) -> Any:
    """``(terms, labels, axes, res)`` when ``contract`` may be computed as products (and a sum), else ``None``.

    That is a contraction of the cotangent with one or more arrays (no label
    repeated inside a term) that either sums nothing (``"Zi,ij->Zij"``, the VJP
    of ``einsum("ij,ij->i", d, d)``: each output element is one product) or has a
    label common to every operand and the result and at least one label summed
    away (``"Zij,ij->Zi"``; ``"Zei,eij->Zej"`` from ``einsum("eij,ej->ei", K, u)``;
    ``"Ze,eij,ej->Zei"`` from ``einsum("ei,eij,ej->e", u, K, u)``): NumPy's einsum
    cannot hand that to BLAS and sums it in an order of its own.  ``labels``
    orders the iteration space: the result's labels, then the summed ones;
    ``axes[k]`` moves operand ``k``'s axes into that order.
    """
    lhs, res = contract.split("->")
    terms = tuple(lhs.split(","))
    if len(terms) < 2 or any(len(set(t)) != len(t) for t in terms + (res,)):
        return None
    every = set().union(*terms)
    if not set(res) <= every:
        return None
    summed = "".join(dict.fromkeys(c for c in "".join(terms) if c not in res))
    if summed and not set(res).intersection(*map(set, terms)):
        return None
    labels = res + summed
    return terms, labels, tuple(tuple(t.index(c) for c in labels if c in t) for t in terms), res


def _product_sum(contract: str, g: Any, others: Sequence[Any]) -> Any:
    """``einsum(contract, g, *others)`` as ``g * y1 * ...``, summed over the summed labels, else ``None``.

    See :func:`_product_sum_plan`.  The products (left to right) and NumPy's sum are
    what the sweep's sparse batches compute entry by entry (and the one code for
    dense and sparse cotangents alike), so a sparse Hessian through
    ``einsum("ij,ij->i", d, d)`` or a finite-element ``einsum("eij,ej->ei", K, u)``
    stays sparse and gives the dense result's bits.  ``None`` also when a sum's
    product would be more than :data:`_PRODUCT_SUM_WIDENING` times larger than
    ``g`` (einsum's loops then save the memory).
    """
    plan = _product_sum_plan(contract)
    if plan is None:
        return None
    terms, labels, axes, res = plan
    operands = (g,) + tuple(others)
    sizes: dict = {}
    for term, operand in zip(terms, operands):
        for c, n in zip(term, np.shape(operand)):
            if sizes.setdefault(c, n) != n:
                return None  # a label of length 1 in one operand, broadcast by einsum
    summed = len(labels) > len(res)
    if summed and math.prod(sizes[c] for c in labels) > _PRODUCT_SUM_WIDENING * max(1, math.prod(np.shape(g))):
        return None
    product = None
    for term, operand, order in zip(terms, operands, axes):
        aligned = np.reshape(np.transpose(operand, order), tuple(sizes[c] if c in term else 1 for c in labels))
        product = aligned if product is None else product * aligned
    return np.sum(product, axis=tuple(range(len(res), len(labels)))) if summed else product


def _make_einsum_vjp(k: int):
    def vjp(g, ans, spec, *operands, optimize=False, **kwargs):
        nb = np.ndim(g) - np.ndim(ans)
        contract, kept, unique, diag = _vjp_plan(spec, k, nb)
        others = operands[:k] + operands[k + 1 :]
        c = _product_sum(contract, g, others) if others else None
        if c is None:
            c = einsum_p(contract, g, *others, optimize=_vjp_optimize(optimize, len(others) + 1))
        term = _parse(spec)[0][k]
        shape = np.shape(operands[k])
        sizes = dict(zip(term, shape))
        if len(kept) != len(unique):
            # Labels summed only inside operand k: the cotangent is constant along them.
            batch_shape = np.shape(c)[:nb]
            c = np.reshape(c, batch_shape + tuple(sizes[u] if u in kept else 1 for u in unique))
            c = np.broadcast_to(c, batch_shape + tuple(sizes[u] for u in unique))
        if diag is not None:
            sub, deltas = diag
            # Boolean deltas never promote the cotangent's dtype.
            consts = [_delta(sizes[d[0]], len(d), bool) for d in deltas]
            c = einsum_p(sub, c, *consts, optimize=False)
        return c

    return vjp


# The VJPs contract a sparse batch as products and sums (_product_sum); any other
# contraction builds the dense batch (sparse_batch has no einsum).
defvjp(einsum_p, CONSTANT_ARG, *[_make_einsum_vjp(k) for k in range(_MAX_OPERANDS)], sparse=True)


def _einsum(*args: Any, out: Any = None, optimize: Any = False, **kwargs: Any) -> Any:
    if out is not None:
        _reject_out("numpy.einsum", {"out": out})
    subscripts, operands = _split_call(args)
    spec = canonical_einsum(subscripts, tuple(np.ndim(o) for o in operands))
    return einsum_p(spec, *operands, optimize=optimize, **kwargs)


defcomposite(np.einsum, _einsum)
defconstant(np.einsum_path)


# ---------------------------------------------------------------- tensordot
def _tensordot_axes(axes: Any, nda: int, ndb: int) -> tuple:
    """Normalise ``axes`` to two lists of non-negative axes."""
    try:
        n = int(axes)
    except TypeError:
        a_axes, b_axes = axes
        a_axes = [a_axes] if np.ndim(a_axes) == 0 else list(a_axes)
        b_axes = [b_axes] if np.ndim(b_axes) == 0 else list(b_axes)
    else:
        a_axes = list(range(nda - n, nda))
        b_axes = list(range(n))
    return [int(a) % nda if nda else int(a) for a in a_axes], [int(b) % ndb if ndb else int(b) for b in b_axes]


def _tensordot_partner(g, own_nd, own_axes, other, other_axes, own_first):
    """Cotangent of one tensordot operand: ``g`` contracted with the other operand.

    ``g`` has shape ``batch + a_free + b_free``; the result has ``batch +``
    the operand's own axes, in its own order.
    """
    other_nd = np.ndim(other)
    own_free = [i for i in range(own_nd) if i not in own_axes]
    other_free = [i for i in range(other_nd) if i not in other_axes]
    # The other operand's free axes sit at the end (own is a) or right after batch.
    n_other_free = len(other_free)
    nb = np.ndim(g) - len(own_free) - n_other_free
    if own_first:
        g_axes = list(range(np.ndim(g) - n_other_free, np.ndim(g)))
    else:
        g_axes = list(range(nb, nb + n_other_free))
    c = np.tensordot(g, other, axes=(g_axes, other_free))
    # c: batch + own_free (in order) + contracted axes in the other operand's order.
    order = sorted(range(len(other_axes)), key=lambda j: other_axes[j])
    result_axes = own_free + [own_axes[j] for j in order]
    perm = [nb + result_axes.index(i) for i in range(own_nd)]
    if perm == list(range(nb, nb + own_nd)):
        return c
    return np.transpose(c, list(range(nb)) + perm)


def _tensordot_a(g, ans, a, b, axes=2):
    a_axes, b_axes = _tensordot_axes(axes, np.ndim(a), np.ndim(b))
    return _tensordot_partner(g, np.ndim(a), a_axes, b, b_axes, True)


def _tensordot_b(g, ans, a, b, axes=2):
    a_axes, b_axes = _tensordot_axes(axes, np.ndim(a), np.ndim(b))
    return _tensordot_partner(g, np.ndim(b), b_axes, a, a_axes, False)


defvjp(np.tensordot, _tensordot_a, _tensordot_b)
defstrong(np.tensordot, strong_bilinear(_tensordot_a, 1), strong_bilinear(_tensordot_b, 0))
defcomposite(np.linalg.tensordot, lambda x1, x2, axes=2: np.tensordot(x1, x2, axes=axes))


# ---------------------------------------------------------------- dot family
def _dot(a, b, out=None):
    if out is not None:
        _reject_out("numpy.dot", {"out": out})
    nda, ndb = np.ndim(a), np.ndim(b)
    if nda == 0 or ndb == 0:
        return np.multiply(a, b)
    if ndb <= 2:
        # For a 1-D or 2-D b, dot over the last axis of a is exactly matmul (BLAS).
        return np.matmul(a, b)
    return np.tensordot(a, b, axes=([nda - 1], [ndb - 2]))


def _inner(a, b):
    nda, ndb = np.ndim(a), np.ndim(b)
    if nda == 0 or ndb == 0:
        return np.multiply(a, b)
    if ndb <= 2:
        return np.matmul(a, b if ndb == 1 else swap_last(b))
    return np.tensordot(a, b, axes=([nda - 1], [ndb - 1]))


def _conj_if_complex(x):
    return np.conjugate(x) if np.iscomplexobj(x) else x


def _vdot(a, b):
    return np.matmul(_conj_if_complex(np.ravel(a)), np.ravel(b))


def _outer(a, b, out=None):
    if out is not None:
        _reject_out("numpy.outer", {"out": out})
    return np.multiply(np.reshape(a, (-1, 1)), np.reshape(b, (1, -1)))


def _linalg_outer(x1, x2):
    if np.ndim(x1) != 1 or np.ndim(x2) != 1:
        raise ValueError(
            "Input arrays must be one-dimensional, but they are "
            f"x1.ndim={np.ndim(x1)} and x2.ndim={np.ndim(x2)}."
        )
    return _outer(x1, x2)


defcomposite(np.dot, _dot)
defcomposite(np.inner, _inner)
defcomposite(np.vdot, _vdot)
defcomposite(np.outer, _outer)
defcomposite(np.linalg.outer, _linalg_outer)


def _kron(a, b):
    nd = max(np.ndim(a), np.ndim(b))
    sa = (1,) * (nd - np.ndim(a)) + np.shape(a)
    sb = (1,) * (nd - np.ndim(b)) + np.shape(b)
    # Interleave the axes: a's (i, 1, j, 1, ...) times b's (1, k, 1, l, ...).
    a2 = np.reshape(a, tuple(x for s in sa for x in (s, 1)))
    b2 = np.reshape(b, tuple(x for s in sb for x in (1, s)))
    return np.reshape(np.multiply(a2, b2), tuple(x * y for x, y in zip(sa, sb)))


defcomposite(np.kron, _kron)


# ---------------------------------------------------------------- cross products
def _numpy_crosses_2_vectors() -> bool:
    """Whether the running NumPy's ``np.cross`` accepts 2-element vectors.

    NumPy 2.0 deprecated them (a ``DeprecationWarning``) and NumPy 2.5 removed them
    (a ``ValueError``, as ``np.linalg.cross`` always did); the rule follows whichever
    NumPy it runs on, asked once on plain arrays.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            np.cross(np.array([1.0, 0.0]), np.array([0.0, 1.0]))
        except ValueError:
            return False
    return True


CROSSES_2_VECTORS = _numpy_crosses_2_vectors()


def _cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    if axis is not None:
        axisa = axisb = axisc = axis
    a = np.moveaxis(a, axisa, -1)
    b = np.moveaxis(b, axisb, -1)
    na, nb = np.shape(a)[-1], np.shape(b)[-1]
    if not CROSSES_2_VECTORS and (na != 3 or nb != 3):
        raise ValueError(
            "Both input arrays must be (arrays of) 3-dimensional vectors, "
            f"but they are {na} and {nb} dimensional instead."
        )
    if na not in (2, 3) or nb not in (2, 3):
        raise ValueError("incompatible dimensions for cross product\n(dimension must be 2 or 3)")
    if na == 2 or nb == 2:
        warnings.warn(
            "Arrays of 2-dimensional vectors are deprecated. Use arrays of 3-dimensional vectors instead. "
            "(deprecated in NumPy 2.0)",
            DeprecationWarning,
            stacklevel=3,
        )
    a0, a1, b0, b1 = a[..., 0], a[..., 1], b[..., 0], b[..., 1]
    z = a0 * b1 - a1 * b0
    if na == 2 and nb == 2:
        return z
    if na == 3 and nb == 3:
        a2, b2 = a[..., 2], b[..., 2]
        x = a1 * b2 - a2 * b1
        y = a2 * b0 - a0 * b2
    elif na == 3:  # b has a zero third component
        a2 = a[..., 2]
        x, y = -(a2 * b1), a2 * b0
    else:
        b2 = b[..., 2]
        x, y = a1 * b2, -(a0 * b2)
    c = np.stack([x, y, z], axis=-1)
    return np.moveaxis(c, -1, axisc)


def _linalg_cross(x1, x2, axis=-1):
    if np.shape(x1)[axis] != 3 or np.shape(x2)[axis] != 3:
        raise ValueError(
            "Both input arrays must be (arrays of) 3-dimensional vectors, but they are "
            f"{np.shape(x1)[axis]} and {np.shape(x2)[axis]} dimensional instead."
        )
    return _cross(x1, x2, axis=axis)


defcomposite(np.cross, _cross)
defcomposite(np.linalg.cross, _linalg_cross)


# ---------------------------------------------------------------- diagonals and traces
def _diagonal_call(a, offset, axis1, axis2, keep_diag, dtype=None):
    """``np.diagonal`` (``keep_diag``) or ``np.trace`` as one einsum with a repeated label."""
    nd = np.ndim(a)
    axis1, axis2 = axis1 % nd if nd else axis1, axis2 % nd if nd else axis2
    if nd < 2:
        raise ValueError("diag requires an array of at least two dimensions")
    if axis1 == axis2:
        raise ValueError("axis1 and axis2 cannot be the same")
    shape = np.shape(a)
    n1, n2 = shape[axis1], shape[axis2]
    start1, start2 = (0, offset) if offset >= 0 else (-offset, 0)
    length = max(0, min(n1 - start1, n2 - start2))
    if (start1, start2, length) != (0, 0, n1) or n1 != n2:
        index = [slice(None)] * nd
        index[axis1] = slice(start1, start1 + length)
        index[axis2] = slice(start2, start2 + length)
        a = a[tuple(index)]
    letters = list(_LETTERS[:nd])
    letters[axis2] = letters[axis1]
    rest = "".join(c for i, c in enumerate(letters) if i not in (axis1, axis2))
    out = rest + (letters[axis1] if keep_diag else "")
    kwargs = {} if dtype is None else {"dtype": dtype}
    return einsum_p("".join(letters) + "->" + out, a, **kwargs)


def _diagonal(a, offset=0, axis1=0, axis2=1):
    return _diagonal_call(a, offset, axis1, axis2, True)


def _trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    if out is not None:
        _reject_out("numpy.trace", {"out": out})
    return _diagonal_call(a, offset, axis1, axis2, False, dtype)


defcomposite(np.diagonal, _diagonal)
defcomposite(np.trace, _trace)
defcomposite(np.linalg.diagonal, lambda x, offset=0: _diagonal_call(x, offset, -2, -1, True))
defcomposite(np.linalg.trace, lambda x, offset=0, dtype=None: _diagonal_call(x, offset, -2, -1, False, dtype))


# ---------------------------------------------------------------- vector products
# The gufuncs np.vecdot / np.matvec / np.vecmat have their rules in rules/ufuncs.py.
defcomposite(np.linalg.vecdot, lambda x1, x2, axis=-1: np.vecdot(x1, x2, axis=axis))


def _matrix_transpose(x):
    if np.ndim(x) < 2:
        raise ValueError("Input array must be at least 2-dimensional")
    return np.swapaxes(x, -1, -2)


defcomposite(np.matrix_transpose, _matrix_transpose)
defcomposite(np.linalg.matrix_transpose, _matrix_transpose)
defcomposite(np.linalg.matmul, lambda x1, x2: np.matmul(x1, x2))


# ---------------------------------------------------------------- multi_dot
def _chain_order(dims: Sequence[int]) -> list:
    """Cheapest parenthesisation of a matrix chain (classic dynamic programme).

    Returns ``split[i][j]``: where the product of matrices ``i..j`` splits.
    """
    n = len(dims) - 1
    cost = [[0] * n for _ in range(n)]
    split = [[0] * n for _ in range(n)]
    for length in range(1, n):
        for i in range(n - length):
            j = i + length
            best = None
            for k in range(i, j):
                c = cost[i][k] + cost[k + 1][j] + dims[i] * dims[k + 1] * dims[j + 1]
                if best is None or c < best:
                    best, split[i][j] = c, k
            cost[i][j] = best
    return split


def _multi_dot(arrays, *, out=None):
    if out is not None:
        _reject_out("numpy.linalg.multi_dot", {"out": out})
    arrays = list(arrays)
    n = len(arrays)
    if n < 2:
        raise ValueError("Expecting at least two arrays.")
    if n == 2:
        return np.dot(arrays[0], arrays[1])
    first_1d, last_1d = np.ndim(arrays[0]) == 1, np.ndim(arrays[-1]) == 1
    if first_1d:
        arrays[0] = np.reshape(arrays[0], (1, -1))
    if last_1d:
        arrays[-1] = np.reshape(arrays[-1], (-1, 1))
    for a in arrays:
        if np.ndim(a) != 2:
            raise np.linalg.LinAlgError(f"{np.ndim(a)}-dimensional array given. Array must be two-dimensional")
    split = _chain_order([np.shape(a)[0] for a in arrays] + [np.shape(arrays[-1])[1]])

    def product(i, j):
        if i == j:
            return arrays[i]
        k = split[i][j]
        return np.matmul(product(i, k), product(k + 1, j))

    result = product(0, n - 1)
    if first_1d and last_1d:
        return result[0, 0]
    if first_1d:
        return result[0]
    if last_1d:
        return result[:, 0]
    return result


defcomposite(np.linalg.multi_dot, _multi_dot)
