"""Discrete Fourier transforms, numpy's kernels (compiled too: numpy's own, called in
Numba's object mode, as Numba has no np.fft). Three
primitives, each transforming whole axes of their input's length: cfgrad.numpy.fft
crops or zero-pads (index, concatenate) for numpy's n= and s=, and composes rfftn,
irfftn, hfft and ihfft from them. Each is linear, so its JVP is itself applied to the
tangent; the VJPs are transposes in JAX's convention (see complex.py):
- fft: the DFT matrix F (and its inverse) is symmetric, F^T = F, with the same norm;
- rfft: the first m = n//2+1 rows R of F, from real x: c -> Re(R^T c) = Re(F pad(c));
- irfft: x = Re(A y) with A[j, k] = s w[k] e^(2 pi i jk/n), w = 1, 2, …, 2 (, 1 for
  even n), s the norm's scale: c -> c A = w * conj(rfft(c)) at the dual norm (the one
  scaling by s). JAX's rules for lax.fft (its FFT, RFFT, IRFFT transposes) are the same.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import LoweringError
from ..ir import TensorType
from .complex import complex_input
from .rules import (
    axes_param,
    axis_param,
    bool_param,
    int_param,
    np_dtype,
)
from .table import (
    Primitive,
    Source,
    bind,
    complex_dtype,
    real_dtype,
    register,
)

FFT_NORMS = ("backward", "ortho", "forward")
#: The norm that scales the opposite transform the same way (1/n on the other side).
DUAL_NORM = {"backward": "forward", "ortho": "ortho", "forward": "backward"}


def _fourier_source(x: str, kind: int, axes: tuple[int, ...], n: int, norm: str,
                    out: TensorType) -> str:
    """numpy's own transform, called from compiled code in Numba's object mode
    (`K.fourier`; Numba has no np.fft): the interpreter's result bit for bit."""
    return f"K.fourier({x}, {kind}, {tuple(axes)}, {n}, {FFT_NORMS.index(norm)}, {np_dtype(out)})"


def _norm_param(op: str, norm: Any) -> str:
    if norm not in FFT_NORMS:
        raise LoweringError(f"{op}: parameter norm must be one of {', '.join(FFT_NORMS)}, got "
                            f"{norm!r}")
    return norm


def _fft_type(types: list[TensorType], axes: tuple[int, ...], inverse: bool,
              norm: str) -> TensorType:
    t = types[0]
    complex_input("fft", t)
    axes_param("fft", axes, t)
    bool_param("fft", "inverse", inverse)
    _norm_param("fft", norm)
    return t


def _fft_impl(x: np.ndarray, axes: tuple[int, ...], inverse: bool, norm: str) -> np.ndarray:
    return (np.fft.ifftn if inverse else np.fft.fftn)(x, axes=axes, norm=norm)


register(Primitive(
    name="fft", impl=_fft_impl, abstract=_fft_type,
    vjp=lambda ct, xs, out, axes, inverse, norm: (
        bind("fft", ct, axes=axes, inverse=inverse, norm=norm),),
    jvp=lambda ts, xs, out, axes, inverse, norm: bind("fft", ts[0], axes=axes,
                                                      inverse=inverse, norm=norm),
    family="fft", promote="none",
    compiled=Source(lambda args, types, out, axes, inverse, norm: _fourier_source(
        args[0], int(inverse), axes, 0, norm, out)),
    notes="numpy's fftn / ifftn (inverse=True) over `axes` of a complex input, norm "
          "'backward', 'ortho' or 'forward'; its own transpose (the DFT matrix is symmetric)"))


def _half_length(n: int) -> int:
    return n // 2 + 1


def _rfft_type(types: list[TensorType], axis: int, norm: str) -> TensorType:
    t = types[0]
    if t.dtype.kind != "f":
        raise LoweringError(f"rfft: the input must be a float array, got {t}")
    axis = axis_param("rfft", "axis", axis, t)
    _norm_param("rfft", norm)
    if t.shape[axis] == 0:
        raise LoweringError(f"rfft: axis {axis} of {t} is empty")
    shape = list(t.shape)
    shape[axis] = _half_length(shape[axis])
    return TensorType(tuple(shape), complex_dtype(t.dtype))


def _zero_pad(x: Any, axis: int, length: int) -> Any:
    """x zero-padded at the end of `axis` to `length` (>= its own)."""
    extra = length - x.shape[axis]
    if extra == 0:
        return x
    shape = list(x.shape)
    shape[axis] = extra
    return bind("concatenate", x, np.zeros(shape, x.dtype), axis=axis)


def _rfft_vjp(ct, xs, out, axis, norm):
    full = _zero_pad(ct, axis, xs[0].shape[axis])
    return (bind("real", bind("fft", full, axes=(axis,), inverse=False, norm=norm)),)


register(Primitive(
    name="rfft", impl=lambda x, axis, norm: np.fft.rfft(x, axis=axis, norm=norm),
    abstract=_rfft_type, vjp=_rfft_vjp,
    jvp=lambda ts, xs, out, axis, norm: bind("rfft", ts[0], axis=axis, norm=norm),
    family="fft", promote="none",
    compiled=Source(lambda args, types, out, axis, norm: _fourier_source(
        args[0], 2, (axis,), 0, norm, out)),
    notes="numpy's rfft along `axis` of a float input: the n//2+1 non-negative frequencies"))


def _irfft_type(types: list[TensorType], axis: int, n: int, norm: str) -> TensorType:
    t = types[0]
    complex_input("irfft", t)
    axis = axis_param("irfft", "axis", axis, t)
    n = int_param("irfft", "n", n)
    _norm_param("irfft", norm)
    if n < 1 or t.shape[axis] != _half_length(n):
        raise LoweringError(f"irfft: an output of length n={n} needs {_half_length(max(n, 1))} "
                            f"frequencies along axis {axis}, got {t}")
    shape = list(t.shape)
    shape[axis] = n
    return TensorType(tuple(shape), real_dtype(t.dtype))


def _irfft_vjp(ct, xs, out, axis, n, norm):
    weights = np.full(_half_length(n), 2.0, real_dtype(xs[0].dtype))
    weights[0] = 1.0
    if n % 2 == 0:
        weights[-1] = 1.0
    weights = weights.reshape((-1,) + (1,) * (len(ct.shape) - 1 - axis))
    spectrum = bind("rfft", ct, axis=axis, norm=DUAL_NORM[norm])
    return (bind("conj", spectrum) * weights,)


register(Primitive(
    name="irfft", impl=lambda y, axis, n, norm: np.fft.irfft(y, n, axis=axis, norm=norm),
    abstract=_irfft_type, vjp=_irfft_vjp,
    jvp=lambda ts, xs, out, axis, n, norm: bind("irfft", ts[0], axis=axis, n=n, norm=norm),
    family="fft", promote="none",
    compiled=Source(lambda args, types, out, axis, n, norm: _fourier_source(
        args[0], 3, (axis,), n, norm, out)),
    notes="numpy's irfft along `axis` to a real output of length n, from its n//2+1 "
          "frequencies; the imaginary parts of the zero (and, n even, the n/2) frequency "
          "are ignored, so their cotangents are real"))

