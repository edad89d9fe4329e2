"""`cfgrad.numpy`'s polynomial functions on coefficient arrays (highest power first, as
numpy's `poly*` functions): `polyval`, `polyadd`, `polysub`, `polymul`, `polyder`,
`polyint`, `polyfit`, and the Vandermonde matrix `vander`.

Each is a composition of primitives, differentiable in the coefficients and the points.
`polyval` is Horner's rule as numpy's (one multiply-add per coefficient); `polymul` is one
matrix product with a Toeplitz matrix gathered from the first factor. `polyfit` fits by
least squares as numpy's does (Vandermonde columns scaled to unit norm), solved through a
QR factorization by Gram-Schmidt with reorthogonalization and back substitution, so its
derivative is the one of the least-squares solution where the Vandermonde matrix has full
column rank.
"""

from __future__ import annotations

from typing import Any

import numpy as _np

from ..errors import ArgumentValueError
from ..trace_context import is_traced
from .core import (
    _array,
    _concrete_length,
    _dtype,
    _getitem,
    _ndim,
    _shape,
    _weakly_typed,
    asarray,
    concatenate,
    matmul,
    public_names,
    reshape,
    sqrt,
    stack,
    sum,
    zeros,
)
from .elementwise import _inexact


def _atleast_1d(a: Any) -> Any:
    a = asarray(a) if is_traced(a) else _np.asarray(a)
    return reshape(a, (1,)) if _ndim(a) == 0 else a


def _aligned(a1: Any, a2: Any) -> tuple[Any, Any]:
    """The two coefficient vectors padded with leading zeros to one length."""
    a1, a2 = _atleast_1d(a1), _atleast_1d(a2)
    diff = _shape(a2)[0] - _shape(a1)[0]
    if diff > 0:
        a1 = concatenate([zeros(diff, _dtype(a1)), a1])
    elif diff < 0:
        a2 = concatenate([zeros(-diff, _dtype(a2)), a2])
    return a1, a2


def polyadd(a1: Any, a2: Any) -> Any:
    """The coefficients of the sum of two polynomials."""
    a1, a2 = _aligned(a1, a2)
    return a1 + a2


def polysub(a1: Any, a2: Any) -> Any:
    """The coefficients of the difference of two polynomials."""
    a1, a2 = _aligned(a1, a2)
    return a1 - a2


def polymul(a1: Any, a2: Any) -> Any:
    """The coefficients of the product of two polynomials: their full convolution, as
    `T @ a2` with `T[k, j] = a1[k - j]` (zero outside a1) gathered in one indexing.
    Integer coefficients are computed in float64, as JAX (numpy keeps them integer)."""
    a1, a2 = _inexact(_atleast_1d(a1)), _inexact(_atleast_1d(a2))
    if not is_traced(a1) and not is_traced(a2):
        return _np.polymul(a1, a2)
    n, m = _shape(a1)[0], _shape(a2)[0]
    padding = zeros(m - 1, _dtype(a1))
    padded = concatenate([padding, a1, padding])
    gather = _np.arange(n + m - 1)[:, None] - _np.arange(m)[None, :] + (m - 1)
    return matmul(_getitem(padded, gather), a2)


def polyval(p: Any, x: Any) -> Any:
    """The polynomial with coefficients `p` at the points `x`, by Horner's rule as numpy
    (`y = y * x + p[i]` from the highest coefficient down)."""
    p, x = _weakly_typed(p, x)
    p, x = _atleast_1d(p), _array(x)  # plain: numpy's operators would keep an Array one
    y = _np.zeros(_shape(x), _dtype(x))
    for i in range(_shape(p)[0]):
        y = y * x + p[i]
    return y


def polyder(p: Any, m: int = 1) -> Any:
    """The coefficients of the `m`-th derivative; integer coefficients in float64, as JAX
    (numpy keeps them integer)."""
    m = _order("polyder", m)
    p = _inexact(_atleast_1d(p))
    for _ in range(m):
        p = p[:-1] * _np.arange(_shape(p)[0] - 1, 0, -1, dtype=_dtype(p))
    return p


def polyint(p: Any, m: int = 1, k: Any = None) -> Any:
    """The coefficients of the `m`-th antiderivative, with integration constants `k` (one
    per integration, lowest order first, as numpy; a scalar for all; zeros by default)."""
    m = _order("polyint", m)
    p = _atleast_1d(p)
    dtype = _np.result_type(_dtype(p), 1.0)  # of the result: float32 stays, as JAX
    k = zeros(m, dtype) if k is None else _atleast_1d(_weakly_typed(p, k)[1])
    if _shape(k)[0] == 1 and m > 1:
        k = k[0] * _np.ones(m, _dtype(k))
    if _shape(k)[0] < m:
        raise ArgumentValueError(f"cnp.polyint: k has {_shape(k)[0]} constants for m={m} "
                                 "integrations; give one per integration or a single one")
    for i in range(m):
        divisors = _np.arange(_shape(p)[0], 0, -1, dtype=dtype)
        p = concatenate([p / divisors, reshape(k[i], (1,))])
    return p


def _order(function: str, m: Any) -> int:
    _concrete_length(function, "m", m)
    m = int(m)
    if m < 0:
        raise ArgumentValueError(f"cnp.{function}: the order m={m} must be non-negative")
    return m


def vander(x: Any, N: int | None = None, increasing: bool = False) -> Any:
    """The Vandermonde matrix of the points `x`: columns x**(N-1), …, x, 1 (or the other
    way round with `increasing`). A float `x` keeps its dtype (numpy computes float32 in
    float64), bools count as integers."""
    if _ndim(x) != 1:
        raise ArgumentValueError(f"cnp.vander: x must be one-dimensional, got shape "
                                 f"{_shape(x)}")
    _concrete_length("vander", "N", N)
    n = _shape(x)[0] if N is None else int(N)
    dtype = _np.promote_types(_dtype(x), _np.int64) if _dtype(x).kind in "biu" else _dtype(x)
    powers = _np.arange(n, dtype=dtype)
    powers = powers if increasing else powers[::-1].copy()
    if not is_traced(x):
        return _np.power(_np.asarray(x, dtype)[:, None], powers)
    base = reshape(x if _dtype(x) == dtype else asarray(x, dtype), (-1, 1))
    return base ** powers


def _least_squares(a: Any, b: Any) -> Any:
    """The least-squares solution of a @ c = b for a tall `a` of full column rank: a = QR
    by modified Gram-Schmidt, each column orthogonalized twice (accurate to the rounding
    of Householder QR for full-rank matrices), then R c = Q^T b by back substitution."""
    cols = _shape(a)[1]
    qs: list[Any] = []
    r: dict[tuple[int, int], Any] = {}
    for j in range(cols):
        v = a[:, j]
        for _ in range(2):
            for i, q in enumerate(qs):
                coefficient = sum(q * v)
                r[i, j] = coefficient if (i, j) not in r else r[i, j] + coefficient
                v = v - coefficient * q
        r[j, j] = sqrt(sum(v * v))
        qs.append(v / r[j, j])
    rhs = [matmul(q, b) for q in qs]
    c: list[Any] = [None] * cols
    for j in reversed(range(cols)):
        total = rhs[j]
        for i in range(j + 1, cols):
            total = total - r[j, i] * c[i]
        c[j] = total / r[j, j]
    return stack(c)


def polyfit(x: Any, y: Any, deg: int, rcond: float | None = None, full: bool = False,
            w: Any = None, cov: bool = False) -> Any:
    """The degree-`deg` polynomial closest to the points (x, y) in least squares (each
    column of a 2-D `y` fitted on its own; `w` weights the residuals), as numpy's. With
    nothing traced it is numpy's polyfit (every option); traced, it returns the
    coefficients only (`full` and `cov` are refused) and assumes full column rank, where
    `rcond` changes nothing."""
    if not any(is_traced(v) for v in (x, y, w)):
        return _np.polyfit(x, y, deg, rcond, full, w, cov)
    if full or cov:
        raise ArgumentValueError("cnp.polyfit: full=True and cov=True need concrete x, y "
                                 "and w; traced, polyfit returns the coefficients only")
    _concrete_length("polyfit", "deg", deg)
    deg = int(deg)
    if deg < 0:
        raise ArgumentValueError(f"cnp.polyfit: deg={deg} must be non-negative")
    x, y = asarray(x) + 0.0, asarray(y) + 0.0
    if _ndim(x) != 1 or _ndim(y) not in (1, 2) or _shape(x)[0] != _shape(y)[0]:
        raise ArgumentValueError(f"cnp.polyfit: x must be 1-D and y 1-D or 2-D of the same "
                                 f"length, got shapes {_shape(x)} and {_shape(y)}")
    lhs, rhs = vander(x, deg + 1), y
    if w is not None:
        weights = reshape(asarray(w) + 0.0, (-1, 1))
        lhs = lhs * weights
        rhs = rhs * (weights if _ndim(rhs) == 2 else reshape(weights, (-1,)))
    scale = sqrt(sum(lhs * lhs, axis=0))
    c = _least_squares(lhs / scale, rhs)
    return c / (scale if _ndim(c) == 1 else reshape(scale, (-1, 1)))


__all__ = public_names(globals(), __name__)
