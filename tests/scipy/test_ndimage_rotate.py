"""``scipy.ndimage.rotate`` over tracers (rules/scipy_ndimage_rotate.py): image and angle, 2-D and 3-D."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.testing import check_grads

nd = pytest.importorskip("scipy.ndimage")

IMAGE = np.random.default_rng(39).uniform(size=(5, 6))
VOLUME = np.random.default_rng(40).uniform(size=(2, 5, 6))


@pytest.mark.parametrize("options", [dict(reshape=False, order=1), dict(reshape=True, order=1),
                                     dict(reshape=False, order=3, mode="nearest")], ids=["same", "reshape", "cubic"])
def test_image_first_and_second_order(options):
    check_grads(lambda im: nd.rotate(im, 30, **options), (IMAGE,), order=2)
    seen = {}

    def f(im):
        seen["value"] = nd.rotate(im, 30, **options)
        return seen["value"]

    tg.jacobian(f)(IMAGE)
    assert np.array_equal(tg.stop_gradient(seen["value"]), nd.rotate(IMAGE, 30, **options))


def test_angle_and_volumes():
    check_grads(lambda a: nd.rotate(IMAGE, a[0], reshape=False, order=1), (np.array([30.0]),), order=2)
    check_grads(lambda v: nd.rotate(v, 25, axes=(1, 2), reshape=True, order=1), (VOLUME,), order=2)
    check_grads(lambda v: nd.rotate(v, 25, axes=(0, 2), reshape=False, order=1), (VOLUME,), order=2)
    # A quarter turn moves pixels exactly: the Jacobian is a permutation.
    jac = tg.jacobian(lambda im: nd.rotate(im, 90, order=1))(IMAGE)
    assert np.allclose(np.sort(jac.reshape(IMAGE.size, IMAGE.size).sum(axis=1)), 1.0)
