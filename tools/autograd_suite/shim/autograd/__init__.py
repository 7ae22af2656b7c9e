"""A shim that answers autograd's public API with tapegrad (tools/autograd_suite).

``import autograd.numpy as np`` gives plain NumPy, ``autograd.scipy`` plain
SciPy, and autograd's differential operators and test utilities are computed
by tapegrad (see :mod:`autograd.differential_operators` and
:mod:`autograd.test_util`).  It exists to run autograd's own test suite,
unchanged, against tapegrad; it is not part of the tapegrad package.
"""

from .builtins import dict, isinstance, list, tuple, type  # noqa: F401
from .core import primitive  # noqa: F401
from .differential_operators import (  # noqa: F401
    checkpoint,
    deriv,
    elementwise_grad,
    grad,
    grad_and_aux,
    grad_named,
    hessian,
    hessian_tensor_product,
    hessian_vector_product,
    holomorphic_grad,
    jacobian,
    make_ggnvp,
    make_hvp,
    make_jvp,
    make_vjp,
    multigrad_dict,
    tensor_jacobian_product,
    value_and_grad,
    vector_jacobian_product,
)
from .util import subvals  # noqa: F401

#: Marks this package as the shim (the runner checks that ``import autograd`` found it).
__tapegrad_shim__ = True
