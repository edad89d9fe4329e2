"""`cfgrad.numpy.linalg`: numpy's linear algebra on arrays and traced values alike, each
function a primitive of the derivative table (numpy's LAPACK kernel, the published
derivative rules) or a composition of them.

The factorizations (`solve`, `cholesky`, `eigh`, `eig`, `svd`, `qr`, `det`, `slogdet`,
`pinv`) are primitives; everything else is built on them and on the contractions, so its
derivative follows: `inv` is a solve against the identity, the norms and `cond` are
reductions of entries or of singular values, `lstsq` is JAX's SVD formula. Semantics are
JAX's where it differs from numpy (symmetrized inputs of `eigh`/`cholesky`, always-present
`lstsq` residuals, `pinv`'s default cutoff, gradient 0 of a norm at 0): docs/api.md lists
them.
"""

from __future__ import annotations

import operator
from collections import namedtuple
from collections.abc import Sequence
from typing import Any

import numpy as _np

from ..errors import ArgumentValueError, LoweringError
from ..primitives import bind
from ..trace_context import is_traced
from . import contractions as _c
from .core import (
    _axes,
    _axis_of_ndim,
    _dtype,
    _getitem,
    _ndim,
    _shape,
    _to_end,
    abs,
    amax,
    amin,
    astype,
    broadcast_to,
    multiply,
    public_names,
    reshape,
    sqrt,
    sum,
    swapaxes,
    transpose,
    where,
)
from .core import matmul as _matmul
from .manipulation import diagonal as _diagonal

# numpy's result types, by the same names and fields
_EighResult = namedtuple("EighResult", "eigenvalues eigenvectors")
_EigResult = namedtuple("EigResult", "eigenvalues eigenvectors")
_SVDResult = namedtuple("SVDResult", "U S Vh")
_QRResult = namedtuple("QRResult", "Q R")
_SlogdetResult = namedtuple("SlogdetResult", "sign logabsdet")


def _float(a: Any) -> Any:
    """a as LAPACK takes it: integers and bools in float64, float16 in float32."""
    kind, dtype = _dtype(a).kind, _dtype(a)
    if kind in "biu":
        return astype(a, _np.float64)
    if dtype == _np.float16:
        return astype(a, _np.float32)
    return a if is_traced(a) else _np.asarray(a)


def _matrices(function: str, a: Any, square: bool = False) -> Any:
    a = _float(a)
    shape = _shape(a)
    if len(shape) < 2 or (square and shape[-1] != shape[-2]):
        what = "square matrices" if square else "matrices"
        raise ArgumentValueError(f"cnp.linalg.{function}: needs a (stack of) {what} (the "
                                 f"last two axes), got shape {shape}")
    return a


def _mT(a: Any) -> Any:
    return swapaxes(a, -1, -2)


def _symmetrized(a: Any) -> Any:
    """(A + A^T) / 2, as JAX symmetrizes the input of eigh and cholesky: the result and
    its gradient depend on both triangles."""
    return (a + _mT(a)) * 0.5


# -- solving and inverting ----------------------------------------------------------------


def solve(a: Any, b: Any) -> Any:
    """A x = b for (stacks of) square A: b is a vector when 1-D (numpy 2 and JAX), else a
    (stack of) n×k matrices; batch axes broadcast."""
    a = _matrices("solve", a, square=True)
    b = _float(b)
    if _ndim(b) == 1:
        x = bind("solve", a, reshape(b, (_shape(b)[0], 1)))
        return _getitem(x, (Ellipsis, 0))
    return bind("solve", a, b)


def inv(a: Any) -> Any:
    """A^{-1}, as the solve of A X = I (its derivative -A^{-1} dA A^{-1} follows)."""
    a = _matrices("inv", a, square=True)
    return bind("solve", a, _np.eye(_shape(a)[-1], dtype=_dtype(a)))


def pinv(a: Any, rcond: Any = None, hermitian: bool = False, *, rtol: Any = None) -> Any:
    """The Moore-Penrose pseudo-inverse, JAX's: singular values at most rtol times the
    largest are dropped, rtol = 10 max(m, n) eps unless given (`rcond` is its old name);
    `hermitian` is accepted and computes the same by the SVD."""
    del hermitian
    a = _matrices("pinv", a)
    cutoff = rtol if rtol is not None else rcond
    if cutoff is None:
        cutoff = 10.0 * max(_shape(a)[-2:]) * float(_np.finfo(_dtype(a)).eps)
    if is_traced(cutoff):
        raise LoweringError("cnp.linalg.pinv: rtol must be a concrete number, not traced")
    return bind("pinv", a, rtol=float(cutoff))


def lstsq(a: Any, b: Any, rcond: Any = None) -> tuple[Any, Any, Any, Any]:
    """The least-squares solution (x, residuals, rank, singular values) as JAX computes
    it from the SVD: singular values below rcond times the largest (eps max(m, n) unless
    given) are dropped; the residuals |b - a x|^2 per column (shape (1,) for a 1-D b) are
    always returned (numpy returns an empty array when rank < n or m <= n)."""
    a = _matrices("lstsq", a)
    b = _float(b)
    if _ndim(a) != 2 or _ndim(b) not in (1, 2) or _shape(b)[0] != _shape(a)[0]:
        raise ArgumentValueError(f"cnp.linalg.lstsq: needs an m×n matrix and an m or m×k "
                                 f"right-hand side, got shapes {_shape(a)} and {_shape(b)}")
    m, n = _shape(a)
    if rcond is None:
        rcond = float(_np.finfo(_dtype(a)).eps) * max(m, n)
    u, s, vh = bind("svd", a, full_matrices=False)
    keep = (s > 0) & (s >= rcond * _getitem(s, (0,)))
    s_inv = where(keep, 1.0 / where(keep, s, 1.0), 0.0)
    column = reshape(b, (m, 1)) if _ndim(b) == 1 else b
    x = _matmul(_mT(vh), reshape(s_inv, (-1, 1)) * _matmul(_mT(u), column))
    residuals = sum((column - _matmul(a, x)) ** 2, axis=0)
    if _ndim(b) == 1:
        x = reshape(x, (n,))
    return x, residuals, sum(astype(keep, _np.int64)), s


def tensorinv(a: Any, ind: int = 2) -> Any:
    """numpy's tensorinv: the inverse of a reshaped to a square matrix, shaped back as
    a.shape[ind:] + a.shape[:ind]."""
    ind = operator.index(ind)
    shape = _shape(a)
    if ind <= 0:
        raise ArgumentValueError(f"cnp.linalg.tensorinv: ind must be a positive integer, "
                                 f"got {ind}")
    rows = int(_np.prod(shape[ind:], dtype=_np.int64))
    return reshape(inv(reshape(a, (rows, -1))), shape[ind:] + shape[:ind])


def tensorsolve(a: Any, b: Any, axes: Sequence[int] | None = None) -> Any:
    """numpy's tensorsolve: x with tensordot(a, x, x.ndim) = b, `axes` of a moved to the
    end first."""
    n = _ndim(a)
    if axes is not None:
        moved = [i % n for i in axes]
        a = transpose(a, [i for i in range(n) if i not in moved] + moved)
    shape = _shape(a)[_ndim(b):]
    size = int(_np.prod(shape, dtype=_np.int64))
    return reshape(solve(reshape(a, (-1, size)), reshape(b, (-1,))), shape)


def matrix_power(a: Any, n: int) -> Any:
    """A^n for an integer n by repeated squaring (JAX's way); A^0 is the identity and a
    negative n raises the inverse."""
    n = operator.index(n)
    shape = _shape(a)
    if len(shape) < 2 or shape[-1] != shape[-2]:
        raise ArgumentValueError(f"cnp.linalg.matrix_power: needs a (stack of) square "
                                 f"matrices, got shape {shape}")
    if n == 0:
        return broadcast_to(_np.eye(shape[-1], dtype=_dtype(a)), shape)
    if n < 0:
        a, n = inv(a), -n
    result = None
    while n:
        if n & 1:
            result = a if result is None else _matmul(result, a)
        n >>= 1
        if n:
            a = _matmul(a, a)
    return result


def multi_dot(arrays: Sequence[Any]) -> Any:
    """The chained product of the arrays, a 1-D first (last) one taken as a row (column)
    vector and its axis dropped from the result; multiplied left to right (numpy picks an
    order by cost: the same value up to rounding)."""
    arrays = list(arrays)
    if len(arrays) < 2:
        raise ArgumentValueError("cnp.linalg.multi_dot: needs at least two arrays")
    first, last = arrays[0], arrays[-1]
    row, column = _ndim(first) == 1, _ndim(last) == 1
    if row:
        arrays[0] = reshape(first, (1, -1))
    if column:
        arrays[-1] = reshape(last, (-1, 1))
    if any(_ndim(x) != 2 for x in arrays):
        raise ArgumentValueError("cnp.linalg.multi_dot: the arrays must be 2-D (the first "
                                 "and last may be 1-D)")
    out = arrays[0]
    for x in arrays[1:]:
        out = _matmul(out, x)
    shape = _shape(out)
    return reshape(out, (() if row else shape[:1]) + (() if column else shape[1:]))


# -- factorizations --------------------------------------------------------------------------


def cholesky(a: Any, *, upper: bool = False) -> Any:
    """The Cholesky factor (lower, or upper: its transpose) of the symmetrized A, NaN when
    it is not positive definite (both as JAX)."""
    low = bind("cholesky", _symmetrized(_matrices("cholesky", a, square=True)))
    return _mT(low) if upper else low


def eigh(a: Any, UPLO: str = "L") -> Any:  # noqa: N803 (numpy's name)
    """Eigenvalues (ascending) and eigenvectors of the symmetrized A (JAX's; numpy reads
    the `UPLO` triangle only, the same for a symmetric A)."""
    if UPLO not in ("L", "U"):
        raise ArgumentValueError(f"cnp.linalg.eigh: UPLO must be 'L' or 'U', got {UPLO!r}")
    w, v = bind("eigh", _symmetrized(_matrices("eigh", a, square=True)), uplo=UPLO)
    return _EighResult(w, v)


def eigvalsh(a: Any, UPLO: str = "L") -> Any:  # noqa: N803 (numpy's name)
    """The eigenvalues of eigh, ascending."""
    return eigh(a, UPLO).eigenvalues


def eig(a: Any) -> Any:
    """Eigenvalues and right eigenvectors of a real or complex A, always complex (JAX's;
    numpy's are real when every eigenvalue is), each eigenvector of unit 2-norm with its
    largest entry real (LAPACK's). Derivatives need distinct eigenvalues."""
    w, v = bind("eig", _matrices("eig", a, square=True))
    return _EigResult(w, v)


def eigvals(a: Any) -> Any:
    """The eigenvalues of eig (complex): dw = diag(V^{-1} dA V)."""
    return eig(a).eigenvalues


def svd(a: Any, full_matrices: bool = True, compute_uv: bool = True,
        hermitian: bool = False) -> Any:
    """U, S, Vh (S descending) or, with compute_uv=False, S alone. Derivatives need
    distinct singular values and, for a non-square A, full_matrices=False (as JAX).
    `hermitian` is accepted and computes the SVD the general way."""
    del hermitian
    a = _matrices("svd", a)
    if not compute_uv:
        return bind("svd", a, full_matrices=False)[1]
    u, s, vh = bind("svd", a, full_matrices=bool(full_matrices))
    return _SVDResult(u, s, vh)


def svdvals(x: Any) -> Any:
    """The singular values, descending."""
    return svd(x, compute_uv=False)


def qr(a: Any, mode: str = "reduced") -> Any:
    """Q and R ('reduced', 'complete'), or R alone ('r'); derivatives for every shape
    except the complete factors of a tall matrix (not unique)."""
    if mode not in ("reduced", "complete", "r"):
        raise ArgumentValueError(f"cnp.linalg.qr: mode must be 'reduced', 'complete' or "
                                 f"'r', got {mode!r}")
    q, r = bind("qr", _matrices("qr", a), complete=mode == "complete")
    return r if mode == "r" else _QRResult(q, r)


def det(a: Any) -> Any:
    """The determinant (numpy's LU)."""
    return bind("det", _matrices("det", a, square=True))


def slogdet(a: Any) -> Any:
    """The sign and log |det A|."""
    sign, logabsdet = bind("slogdet", _matrices("slogdet", a, square=True))
    return _SlogdetResult(sign, logabsdet)


def matrix_rank(A: Any, tol: Any = None, hermitian: bool = False, *,  # noqa: N803
                rtol: Any = None) -> Any:
    """The number of singular values above tol (absolute), or above rtol (default
    max(m, n) eps) times the largest; a vector or scalar has rank 1 unless all zero."""
    del hermitian
    A = _float(A)  # noqa: N806
    if _ndim(A) < 2:
        return astype(amax(A != 0) if _ndim(A) else A != 0, _np.int64)
    s = svdvals(A)
    if tol is None:
        if rtol is None:
            rtol = max(_shape(A)[-2:]) * float(_np.finfo(_dtype(A)).eps)
        tol = amax(s, axis=-1, keepdims=True) * rtol
    elif _ndim(tol):
        tol = reshape(tol, tuple(_shape(tol)) + (1,))
    return sum(astype(s > tol, _np.int64), axis=-1)


# -- norms ---------------------------------------------------------------------------------------


def _two_norm(x: Any, axes: tuple[int, ...], keepdims: bool) -> Any:
    """sqrt(sum(x^2)) with gradient 0 where the sum is 0 (sqrt'(0) would make it NaN):
    the minimum-norm subgradient, by a where on both sides of the square root."""
    squares = sum(x * x, axis=axes, keepdims=keepdims)
    zero = squares == 0
    return where(zero, 0.0, sqrt(where(zero, 1.0, squares)))


def _vector_norm(x: Any, ord: Any, axes: tuple[int, ...], keepdims: bool) -> Any:
    if ord is None or ord == 2:
        return _two_norm(x, axes, keepdims)
    size = abs(x)
    if ord == _np.inf:
        return amax(size, axis=axes, keepdims=keepdims)
    if ord == -_np.inf:
        return amin(size, axis=axes, keepdims=keepdims)
    if ord == 0:
        return sum(astype(x != 0, _dtype(x)), axis=axes, keepdims=keepdims)
    if ord == 1:
        return sum(size, axis=axes, keepdims=keepdims)
    if isinstance(ord, str):
        raise ArgumentValueError(f"cnp.linalg.vector_norm: invalid ord {ord!r} for a "
                                 "vector norm")
    powered = sum(size ** float(ord), axis=axes, keepdims=keepdims)
    if ord < 0:
        return powered ** (1.0 / ord)
    zero = powered == 0
    return where(zero, 0.0, where(zero, 1.0, powered) ** (1.0 / ord))


def _matrix_norm(x: Any, ord: Any, axes: tuple[int, int], keepdims: bool) -> Any:
    rows, cols = axes
    if rows == cols:
        raise ArgumentValueError("cnp.linalg.norm: the two axes of a matrix norm must differ")
    if ord is None or ord in ("fro", "f"):
        return _two_norm(x, (rows, cols), keepdims)
    if ord in ("nuc", 2, -2):
        s = svdvals(_to_end(x, (rows, cols)))
        y = sum(s, axis=-1) if ord == "nuc" else (amax if ord == 2 else amin)(s, axis=-1)
    elif ord in (1, -1, _np.inf, -_np.inf):
        summed, reduced = (rows, cols) if ord in (1, -1) else (cols, rows)
        y = (amax if ord > 0 else amin)(sum(abs(x), axis=summed, keepdims=True),
                                        axis=reduced, keepdims=True)
        if keepdims:
            return y
        return reshape(y, tuple(d for i, d in enumerate(_shape(y)) if i not in axes))
    else:
        raise ArgumentValueError(f"cnp.linalg.norm: invalid ord {ord!r} for a matrix norm")
    if keepdims:
        shape = list(_shape(x))
        shape[rows] = shape[cols] = 1
        return reshape(y, tuple(shape))
    return y


def norm(x: Any, ord: Any = None, axis: Any = None, keepdims: bool = False) -> Any:
    """numpy's norm: of the flattened x when ord and axis are None, a vector norm over one
    axis, a matrix norm over two. Its gradient at 0 is 0 (the minimum-norm subgradient;
    JAX's is NaN there)."""
    x = _float(x)
    n = _ndim(x)
    if axis is None:
        if ord is None:
            return _two_norm(x, tuple(range(n)), keepdims)
        if n not in (1, 2):
            raise ArgumentValueError(f"cnp.linalg.norm: ord={ord!r} needs a 1-D or 2-D "
                                     f"array when axis is None, got {n}-D")
        axis = tuple(range(n))
    axes = (axis,) if isinstance(axis, int | _np.integer) else tuple(axis)
    axes = tuple(_axis_of_ndim("linalg.norm", n, a) for a in axes)
    if len(axes) == 1:
        return _vector_norm(x, ord, axes, keepdims)
    if len(axes) == 2:
        return _matrix_norm(x, ord, axes, keepdims)
    raise ArgumentValueError(f"cnp.linalg.norm: axis {axis!r} names {len(axes)} axes; give "
                             "one (a vector norm) or two (a matrix norm)")


def vector_norm(x: Any, *, axis: Any = None, keepdims: bool = False, ord: Any = 2) -> Any:
    """numpy 2's vector_norm: over the given axes taken as one vector (all of them when
    None)."""
    x = _float(x)
    return _vector_norm(x, ord, _axes(x, axis, "linalg.vector_norm"), keepdims)


def matrix_norm(x: Any, *, keepdims: bool = False, ord: Any = "fro") -> Any:
    """numpy 2's matrix_norm over the last two axes."""
    x = _matrices("matrix_norm", x)
    n = _ndim(x)
    return _matrix_norm(x, ord, (n - 2, n - 1), keepdims)


def cond(x: Any, p: Any = None) -> Any:
    """The condition number: the ratio of extreme singular values for p None, 2 or -2,
    else norm(x, p) norm(inv(x), p)."""
    x = _matrices("cond", x)
    if p is None or p in (2, -2):
        s = svdvals(x)
        top, bottom = _getitem(s, (Ellipsis, 0)), _getitem(s, (Ellipsis, -1))
        return bottom / top if p == -2 else top / bottom
    axes = (-2, -1)
    return multiply(norm(x, p, axes), norm(inv(x), p, axes))


# -- numpy 2's array-API functions, over the last axes -----------------------------------------


def matmul(x1: Any, x2: Any) -> Any:
    """numpy's matmul."""
    return _matmul(x1, x2)


def matrix_transpose(x: Any) -> Any:
    """The last two axes swapped."""
    if _ndim(x) < 2:
        raise ArgumentValueError(f"cnp.linalg.matrix_transpose: needs at least 2-D, got "
                                 f"shape {_shape(x)}")
    return _mT(x)


def diagonal(x: Any, *, offset: int = 0) -> Any:
    """The diagonals of the matrices of the last two axes."""
    return _diagonal(x, offset, -2, -1)


def trace(x: Any, *, offset: int = 0, dtype: Any = None) -> Any:
    """The traces of the matrices of the last two axes."""
    return _c.trace(x, offset, -2, -1, dtype)


def outer(x1: Any, x2: Any) -> Any:
    """The outer product of two 1-D arrays."""
    if _ndim(x1) != 1 or _ndim(x2) != 1:
        raise ArgumentValueError(f"cnp.linalg.outer: needs two 1-D arrays, got shapes "
                                 f"{_shape(x1)} and {_shape(x2)}")
    return _c.outer(x1, x2)


def cross(x1: Any, x2: Any, *, axis: int = -1) -> Any:
    """The cross product of 3-vectors along `axis`."""
    if _shape(x1)[axis] != 3 or _shape(x2)[axis] != 3:
        raise ArgumentValueError("cnp.linalg.cross: needs 3-vectors along axis "
                                 f"{axis}, got shapes {_shape(x1)} and {_shape(x2)}")
    return _c.cross(x1, x2, axis=axis)


def tensordot(x1: Any, x2: Any, *, axes: Any = 2) -> Any:
    """numpy's tensordot."""
    return _c.tensordot(x1, x2, axes)


def vecdot(x1: Any, x2: Any, *, axis: int = -1) -> Any:
    """conj(x1) · x2 along `axis`."""
    return _c.vecdot(x1, x2, axis)


__all__ = public_names(globals(), __name__)
