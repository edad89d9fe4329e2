"""`cfgrad.numpy`'s complex parts: real, imag, conj/conjugate and angle on arrays and
traced values alike, with JAX's semantics and its convention for the derivatives of
functions of complex numbers (docs/api.md, Complex numbers).

numpy (and JAX) apply no operation to a real input of `real` or `conj`: the value comes
back as it is, so no node is traced for it; `imag` of a real input is zeros.
"""

from __future__ import annotations

from typing import Any

import numpy as _np

from ..primitives import bind
from ..trace_context import is_traced
from .core import _conj, _dtype, _shape, public_names


def real(val: Any) -> Any:
    """The real part; a real input as it is."""
    if _dtype(val).kind == "c":
        return bind("real", val)
    return val if is_traced(val) else _np.real(val)


def imag(val: Any) -> Any:
    """The imaginary part; zeros of a real input's shape and dtype (no derivative)."""
    if _dtype(val).kind == "c":
        return bind("imag", val)
    return _np.zeros(_shape(val), _dtype(val))


def conj(x: Any) -> Any:
    """The complex conjugate; a real input as it is. Its derivative is not holomorphic:
    the VJP conjugates the cotangent."""
    return _conj(x)


conjugate = conj


def angle(z: Any, deg: bool = False) -> Any:
    """The argument of z in (-pi, pi] (degrees with `deg=True`), a float; 0 or pi for a
    real input, whose derivative is 0."""
    a = bind("angle", z)
    return a * (180.0 / _np.pi) if deg else a


__all__ = public_names(globals(), __name__)
