"""`cfgrad.numpy.fft`: numpy's discrete Fourier transforms on arrays and traced values
alike, with numpy's n=/s=/axis=/axes=/norm= (JAX's jnp.fft agrees).

Three primitives of the derivative table do the transforms, each over whole axes (numpy's
kernels; their rules are in primitives/fft.py): `fft` (fftn and ifftn of a
complex array), `rfft` (one axis of a float array) and `irfft` (one axis, to a real
output of length n). Here numpy's n= and s= crop or zero-pad the input first (index,
concatenate), and the n-dimensional real transforms and the Hermitian ones are
compositions, in numpy's own order: rfftn is an rfft of the last axis and a complex fftn
of the others, irfftn the reverse, hfft = irfft(conj(a)) and ihfft = conj(rfft(a)) at
the dual norm.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as _np

from ..errors import ArgumentValueError
from ..primitives import DUAL_NORM, FFT_NORMS, bind, complex_dtype
from .core import (
    _array,
    _axes,
    _axis,
    _conj,
    _dtype,
    _getitem,
    _ndim,
    _shape,
    astype,
    public_names,
    roll,
)


def _norm(function: str, norm: str | None) -> str:
    if norm is None:
        return "backward"
    if norm not in FFT_NORMS:
        raise ArgumentValueError(f"cnp.fft.{function}: norm={norm!r}; it must be None, "
                                 "'backward', 'ortho' or 'forward'")
    return norm


def _inexact(x: Any, kind: str) -> Any:
    """x as complex (kind "c") or float (kind "f"), of x's precision: ints and bools as
    float64 / complex128, as numpy's fft computes them."""
    dtype = _dtype(x)
    if kind == "c":
        want = complex_dtype(dtype if dtype.kind in "fc" else _np.dtype(_np.float64))
    else:
        want = dtype if dtype.kind == "f" else _np.dtype(_np.float64)
    return x if dtype == want else astype(x, want)


def _resized(x: Any, axis: int, n: int, function: str) -> Any:
    """x cropped or zero-padded at the end of `axis` to length n, as numpy's n= does."""
    if n < 1:
        raise ArgumentValueError(f"cnp.fft.{function}: invalid number of data points ({n}) "
                                 "specified; it must be at least 1")
    length = _shape(x)[axis]
    if n < length:
        return _getitem(x, (slice(None),) * axis + (slice(0, n),))
    if n > length:
        shape = list(_shape(x))
        shape[axis] = n - length
        return bind("concatenate", x, _np.zeros(shape, _dtype(x)), axis=axis)
    return x


def _axes_and_sizes(function: str, x: Any, s: Sequence[int] | None,
                    axes: Sequence[int] | None) -> tuple[list[int], list[int | None]]:
    """numpy's (s, axes) of an n-dimensional transform, axes normalized (in the caller's
    order) and one size per axis (None: the input's own)."""
    n = _ndim(x)
    if axes is None:
        axes = range(n - len(s), n) if s is not None else range(n)
    axes = [_axis(f"fft.{function}", x, a) for a in axes]
    if len(set(axes)) != len(axes):
        raise ArgumentValueError(f"cnp.fft.{function}: axes={list(axes)} repeats an axis")
    if s is None:
        return axes, [None] * len(axes)
    if len(s) != len(axes):
        raise ArgumentValueError(f"cnp.fft.{function}: s={tuple(s)} and axes={tuple(axes)} "
                                 "must have the same length")
    return axes, [int(d) for d in s]


def _complex_fftn(function: str, a: Any, s: Any, axes: Any, norm: str | None,
                  inverse: bool) -> Any:
    x = _inexact(a, "c")
    axes, sizes = _axes_and_sizes(function, x, s, axes)
    for axis, size in zip(axes, sizes):
        if size is not None:
            x = _resized(x, axis, size, function)
    if not axes:
        return x
    return bind("fft", x, axes=tuple(sorted(axes)), inverse=inverse,
                norm=_norm(function, norm))


def fft(a: Any, n: int | None = None, axis: int = -1, norm: str | None = None) -> Any:
    """The one-dimensional discrete Fourier transform along `axis` (numpy's fft)."""
    return _complex_fftn("fft", a, None if n is None else (n,), (axis,), norm, False)


def ifft(a: Any, n: int | None = None, axis: int = -1, norm: str | None = None) -> Any:
    """The inverse of `fft` (numpy's ifft)."""
    return _complex_fftn("ifft", a, None if n is None else (n,), (axis,), norm, True)


def fftn(a: Any, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
         norm: str | None = None) -> Any:
    """The n-dimensional transform over `axes` (all, or the last len(s)), numpy's fftn."""
    return _complex_fftn("fftn", a, s, axes, norm, False)


def ifftn(a: Any, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
          norm: str | None = None) -> Any:
    return _complex_fftn("ifftn", a, s, axes, norm, True)


def fft2(a: Any, s: Sequence[int] | None = None, axes: Sequence[int] = (-2, -1),
         norm: str | None = None) -> Any:
    return _complex_fftn("fft2", a, s, axes, norm, False)


def ifft2(a: Any, s: Sequence[int] | None = None, axes: Sequence[int] = (-2, -1),
          norm: str | None = None) -> Any:
    return _complex_fftn("ifft2", a, s, axes, norm, True)


def rfftn(a: Any, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
          norm: str | None = None) -> Any:
    """The n-dimensional transform of a real input: the last axis's non-negative
    frequencies only (numpy's rfftn: an rfft of the last axis, then fftn of the others)."""
    norm = _norm("rfftn", norm)
    x = _inexact(a, "f")
    axes, sizes = _axes_and_sizes("rfftn", x, s, axes)
    if not axes:
        raise ArgumentValueError("cnp.fft.rfftn: no axes to transform")
    for axis, size in zip(axes, sizes):
        if size is not None:
            x = _resized(x, axis, size, "rfftn")
    y = bind("rfft", x, axis=axes[-1], norm=norm)
    if len(axes) > 1:
        y = bind("fft", y, axes=tuple(sorted(axes[:-1])), inverse=False, norm=norm)
    return y


def rfft(a: Any, n: int | None = None, axis: int = -1, norm: str | None = None) -> Any:
    """The transform of a real input along `axis`: its n//2+1 non-negative frequencies."""
    return rfftn(a, None if n is None else (n,), (axis,), norm)


def rfft2(a: Any, s: Sequence[int] | None = None, axes: Sequence[int] = (-2, -1),
          norm: str | None = None) -> Any:
    return rfftn(a, s, axes, norm)


def irfftn(a: Any, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
           norm: str | None = None) -> Any:
    """The inverse of rfftn, a real array (numpy's irfftn: ifftn of all axes but the
    last, then an irfft of the last to length s[-1], by default 2*(m-1))."""
    norm = _norm("irfftn", norm)
    y = _inexact(a, "c")
    axes, sizes = _axes_and_sizes("irfftn", y, s, axes)
    if not axes:
        raise ArgumentValueError("cnp.fft.irfftn: no axes to transform")
    last = axes[-1]
    n = sizes[-1] if sizes[-1] is not None else 2 * (_shape(y)[last] - 1)
    if n < 1:
        raise ArgumentValueError(f"cnp.fft.irfftn: invalid number of data points ({n}) "
                                 f"specified; the output length along axis {last} must be at "
                                 "least 1 (pass n= or s=, or at least 2 frequencies)")
    for axis, size in zip(axes[:-1], sizes[:-1]):
        if size is not None:
            y = _resized(y, axis, size, "irfftn")
    if len(axes) > 1:
        y = bind("fft", y, axes=tuple(sorted(axes[:-1])), inverse=True, norm=norm)
    y = _resized(y, last, n // 2 + 1, "irfftn")
    return bind("irfft", y, axis=last, n=n, norm=norm)


def irfft(a: Any, n: int | None = None, axis: int = -1, norm: str | None = None) -> Any:
    """The inverse of rfft: a real output of length n (by default 2*(m-1))."""
    return irfftn(a, None if n is None else (n,), (axis,), norm)


def irfft2(a: Any, s: Sequence[int] | None = None, axes: Sequence[int] = (-2, -1),
           norm: str | None = None) -> Any:
    return irfftn(a, s, axes, norm)


def hfft(a: Any, n: int | None = None, axis: int = -1, norm: str | None = None) -> Any:
    """The transform of a signal with Hermitian symmetry, given by its first half: a real
    spectrum of length n (numpy: irfft(conj(a)) at the dual norm)."""
    dual = DUAL_NORM[_norm("hfft", norm)]
    return irfft(_conj(_inexact(a, "c")), n, axis, dual)


def ihfft(a: Any, n: int | None = None, axis: int = -1, norm: str | None = None) -> Any:
    """The inverse of hfft (numpy: conj(rfft(a)) at the dual norm)."""
    dual = DUAL_NORM[_norm("ihfft", norm)]
    return _conj(rfft(a, n, axis, dual))


def fftfreq(n: int, d: Any = 1.0) -> Any:
    """The sample frequencies of an fft of length n and sample spacing d (a traced d is
    fine: the result is k / (n d))."""
    return _np.fft.fftfreq(n) / _array(d)


def rfftfreq(n: int, d: Any = 1.0) -> Any:
    """The sample frequencies of an rfft of length n and sample spacing d."""
    return _np.fft.rfftfreq(n) / _array(d)


def _shifted(x: Any, axes: int | Sequence[int] | None, inverse: bool) -> Any:
    axes = _axes(x, axes, "fft.ifftshift" if inverse else "fft.fftshift")
    for axis in axes:
        length = _shape(x)[axis]
        x = roll(x, -(length // 2) if inverse else length // 2, axis)
    return x


def fftshift(x: Any, axes: int | Sequence[int] | None = None) -> Any:
    """The zero frequency moved to the centre of `axes` (all by default)."""
    return _shifted(x, axes, False)


def ifftshift(x: Any, axes: int | Sequence[int] | None = None) -> Any:
    """The inverse of fftshift."""
    return _shifted(x, axes, True)


__all__ = public_names(globals(), __name__)
