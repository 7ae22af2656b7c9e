"""``reuse_guards.same``: bitwise equality of the values a reused recording compares.

Large C- or F-contiguous arrays are compared in place (as unsigned integers),
the others through their bytes; both ways must say exactly what comparing the
bytes says: -0.0 is not 0.0, NaNs with other payloads differ, the same bits
under another dtype or shape are another value.
"""

import numpy as np
import pytest

from tapegrad.reuse_guards import _COPY_BYTES, same

# Both sides of the threshold between the two ways of comparing.
SIZES = (3, _COPY_BYTES // 8 + 5)


def _bytes_say(a, b):
    """What the plain definition says: same type, shape, dtype and bytes."""
    return type(a) is type(b) and a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def _quiet_nan(payload):
    return np.array([0x7FF8000000000000 | payload], dtype=np.uint64).view(np.float64)[0]


@pytest.mark.parametrize("n", SIZES)
def test_equal_copies_are_the_same_nan_included(n):
    a = np.random.default_rng(0).standard_normal(n)
    a[1] = np.nan
    a[2] = -np.inf
    assert same(a, a.copy())
    assert same(a, a)


@pytest.mark.parametrize("n", SIZES)
def test_signed_zeros_differ(n):
    a = np.zeros(n)
    b = a.copy()
    b[-1] = -0.0
    assert not same(a, b)
    assert not same(b, a)


@pytest.mark.parametrize("n", SIZES)
def test_nan_payloads_differ(n):
    a = np.ones(n)
    b = a.copy()
    a[n // 2] = _quiet_nan(1)
    b[n // 2] = _quiet_nan(2)
    assert np.isnan(a[n // 2]) and np.isnan(b[n // 2])
    assert not same(a, b)
    b[n // 2] = _quiet_nan(1)
    assert same(a, b)


@pytest.mark.parametrize("n", SIZES)
def test_one_changed_entry_anywhere_differs(n):
    a = np.random.default_rng(1).standard_normal(n)
    for k in (0, n // 3, n - 1):
        b = a.copy()
        b[k] = np.nextafter(b[k], np.inf)
        assert not same(a, b)


@pytest.mark.parametrize("n", SIZES)
def test_equal_bytes_under_another_dtype_or_shape_differ(n):
    a = np.random.default_rng(2).standard_normal(2 * n)
    assert not same(a, a.view(np.int64))
    assert not same(a, a.view(np.uint64))
    assert not same(a.view(np.int64), a.view(np.uint64))
    assert not same(a, a.reshape(2, n))
    assert not same(a.view(np.uint8), a.view(np.int8))
    assert not same(a.astype(">f8"), a.astype("<f8"))


@pytest.mark.parametrize("n", SIZES)
def test_non_contiguous_and_fortran_arrays(n):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((n, 4))
    b = a.copy()
    for x, y in ((a[:, 1], b[:, 1]), (a[::2], b[::2]), (a.T, b.T), (np.asfortranarray(a), np.asfortranarray(b))):
        assert same(x, y)
        assert same(x, np.ascontiguousarray(y))  # the same elements in another memory order
    b[n - 1, 1] = -b[n - 1, 1]
    for x, y in ((a[:, 1], b[:, 1]), (a.T, b.T), (np.asfortranarray(a), np.asfortranarray(b))):
        assert not same(x, y)
    assert same(a[:, 0], b[:, 0])  # the change is outside this column


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", [np.complex128, np.float32, np.float16, np.int8, np.bool_, "S3", "V5", "M8[s]"])
def test_every_item_size_agrees_with_the_bytes(n, dtype):
    rng = np.random.default_rng(4)
    raw = rng.integers(0, 256, size=n * np.dtype(dtype).itemsize, dtype=np.uint8)
    a = raw.view(dtype)
    b = a.copy()
    assert same(a, b) == _bytes_say(a, b) is True
    flipped = raw.copy()
    flipped[-1] ^= 1
    c = flipped.view(dtype)
    assert same(a, c) == _bytes_say(a, c) is False


def test_structured_dtype_with_padding_compares_bytes():
    dtype = np.dtype({"names": ["a", "b"], "formats": ["u1", "f8"], "offsets": [0, 8], "itemsize": 16})
    raw = np.zeros(SIZES[1] * dtype.itemsize, dtype=np.uint8)
    a, b = raw.view(dtype), raw.copy().view(dtype)  # (a copy of the records need not copy the padding)
    assert same(a, b)
    b.view(np.uint8)[1] = 7  # a padding byte: tobytes() sees it, so does same()
    assert same(a, b) == _bytes_say(a, b) is False


def test_object_arrays_are_never_the_same():
    a = np.array([1.0, "x"], dtype=object)
    assert not same(a, a.copy())
    big = np.empty(SIZES[1], dtype=object)
    big[:] = 1.0
    assert not same(big, big.copy())


@pytest.mark.parametrize("shape", [(), (0,), (0, 5), (1,)])
def test_empty_and_zero_dimensional_arrays(shape):
    a = np.full(shape, -0.0)
    assert same(a, a.copy())
    assert not same(a, np.zeros(shape)) or a.size == 0
    assert not same(np.zeros((0, 2)), np.zeros((2, 0)))


def test_numpy_scalars_and_subclasses():
    assert same(np.float64(-0.0), np.float64(-0.0))
    assert not same(np.float64(-0.0), np.float64(0.0))
    assert not same(np.float64(1.0), np.float32(1.0))
    m = np.ma.masked_array(np.ones(SIZES[1]))
    assert not same(m, np.ma.masked_array(np.ones(SIZES[1])))  # a subclass: compared by identity
    assert same(m, m)


@pytest.mark.parametrize("seed", range(20))
def test_random_pairs_agree_with_the_bytes(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.choice(SIZES))
    a = rng.standard_normal(n)
    specials = np.array([0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, _quiet_nan(5)])
    a[rng.integers(0, n, 4)] = rng.choice(specials, 4)
    b = a.copy()
    if seed % 2:
        b[rng.integers(0, n)] = rng.choice(specials)
    assert same(a, b) == _bytes_say(a, b)
