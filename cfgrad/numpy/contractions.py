"""`cfgrad.numpy`'s contractions: products that sum over shared axes (`einsum`,
`tensordot`, `dot`, `inner`, `vecdot`, `matvec`, `vecmat`), and the structured products
and sums built on them (`outer`, `kron`, `cross`, `trace`, `convolve`, `correlate`).

Every contraction is one `einsum` node of the derivative table (numpy's kernel; its VJP
is an einsum of the cotangent with the other operands), or a few shape operations around
a primitive, so a call costs a fixed number of nodes whatever the sizes. numpy's argument
conventions (negative axes, `axes=` forms, 1-D operands) are resolved here, before
binding, so the einsum primitive only ever sees explicit subscripts.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from typing import Any

import numpy as _np

from ..errors import ArgumentValueError
from ..ir import broadcast_shapes
from ..primitives import bind
from .core import (
    _axis_of_ndim,
    _conj,
    _dtype,
    _getitem,
    _ndim,
    _shape,
    _to_end,
    _weakly_typed,
    broadcast_to,
    concatenate,
    matmul,
    multiply,
    public_names,
    reshape,
    stack,
    subtract,
    sum,
    transpose,
)
from .manipulation import diagonal

_LETTERS = string.ascii_letters


def _explicit(subscripts: str, operands: Sequence[Any]) -> tuple[str, list[Any]]:
    """numpy's einsum subscripts made explicit: `...` spelled out in letters (broadcasting
    operands whose ellipsis axes have size 1 to the common shape), and the implicit output
    (letters used once, in alphabetical order) written out."""
    text = subscripts.replace(" ", "")
    inputs, arrow, output = text.partition("->")
    terms = inputs.split(",")
    if len(terms) != len(operands):
        raise ArgumentValueError(f"cnp.einsum: {subscripts!r} names {len(terms)} operands, "
                                 f"{len(operands)} given")
    spare = iter(c for c in _LETTERS[::-1] if c not in text)
    ellipsis_ndim = [_ndim(x) - len(t.replace("...", "")) if "..." in t else 0
                     for t, x in zip(terms, operands)]
    width = max(ellipsis_ndim, default=0)
    filler = "".join(next(spare) for _ in range(width))[::-1]
    batch = broadcast_shapes(*(
        _shape(x)[t.index("..."):t.index("...") + k] for t, x, k in
        zip(terms, operands, ellipsis_ndim) if "..." in t)) if width else ()
    spelled, ready = [], []
    for t, x, k in zip(terms, operands, ellipsis_ndim):
        if "..." in t:
            start = t.index("...")
            shape = _shape(x)
            target = shape[:start] + tuple(batch[width - k:]) + shape[start + k:]
            if target != shape:
                x = broadcast_to(x, target)
            t = t.replace("...", filler[width - k:])
        if len(t) != _ndim(x) or not t.isalpha():
            raise ArgumentValueError(f"cnp.einsum: subscripts {t!r} do not fit an operand "
                                     f"of shape {_shape(x)}")
        spelled.append(t)
        ready.append(x)
    if arrow:
        output = output.replace("...", filler)
    else:
        counts = "".join(spelled)
        output = filler + "".join(sorted(c for c in set(counts) if counts.count(c) == 1
                                         and c not in filler))
    return ",".join(spelled) + "->" + output, ready


def einsum(subscripts: str, *operands: Any, optimize: Any = False, **kwargs: Any) -> Any:
    """numpy's einsum with a subscripts string (`...`, implicit and explicit outputs):
    one `einsum` node. `optimize` is accepted for numpy's signature; the primitive plans
    the contraction itself, once per shape (numpy's greedy order)."""
    if kwargs:
        raise ArgumentValueError(f"cnp.einsum: unsupported arguments {sorted(kwargs)} "
                                 "(only subscripts, operands and optimize)")
    if not isinstance(subscripts, str):
        raise ArgumentValueError("cnp.einsum: give the subscripts as a string "
                                 "('ij,jk->ik'); the interleaved operand/sublist form is "
                                 "not supported")
    del optimize  # the contraction order is the primitive's business
    spelled, ready = _explicit(subscripts, operands)
    return bind("einsum", *ready, subscripts=spelled)


def _contract(a: Any, b: Any, axes_a: Sequence[int], axes_b: Sequence[int]) -> Any:
    """Sum over axes_a of a paired with axes_b of b; the free axes of a, then of b."""
    na, nb = _ndim(a), _ndim(b)
    la = list(_LETTERS[:na])
    lb = list(_LETTERS[na:na + nb])
    for i, j in zip(axes_a, axes_b):
        if _shape(a)[i] != _shape(b)[j]:
            raise ArgumentValueError(f"shape mismatch for sum: axis {i} of {_shape(a)} "
                                     f"and axis {j} of {_shape(b)}")
        lb[j] = la[i]
    out = [c for i, c in enumerate(la) if i not in axes_a] + [
        c for j, c in enumerate(lb) if j not in axes_b]
    return bind("einsum", a, b, subscripts=f"{''.join(la)},{''.join(lb)}->{''.join(out)}")


def tensordot(a: Any, b: Any, axes: Any = 2) -> Any:
    """numpy's tensordot: `axes` an int N (the last N axes of a with the first N of b)
    or a pair of axis sequences (or of single axes)."""
    na, nb = _ndim(a), _ndim(b)
    if isinstance(axes, int | _np.integer):
        n = int(axes)
        if n < 0 or n > na or n > nb:
            raise ArgumentValueError(f"cnp.tensordot: axes={n} does not fit operands of "
                                     f"dimensions {na} and {nb}")
        axes_a, axes_b = list(range(na - n, na)), list(range(n))
    else:
        first, second = axes
        first = [first] if isinstance(first, int | _np.integer) else list(first)
        second = [second] if isinstance(second, int | _np.integer) else list(second)
        if len(first) != len(second):
            raise ArgumentValueError(f"cnp.tensordot: axes {axes!r} pair {len(first)} axes "
                                     f"with {len(second)}")
        axes_a = [_axis_of_ndim("tensordot", na, i) for i in first]
        axes_b = [_axis_of_ndim("tensordot", nb, j) for j in second]
    return _contract(a, b, axes_a, axes_b)


def dot(a: Any, b: Any) -> Any:
    """numpy's dot: a product with a scalar, the inner product of vectors, the matrix
    product of matrices, and for N-D operands the sum over a's last axis and b's
    second-to-last (its only one if 1-D)."""
    na, nb = _ndim(a), _ndim(b)
    if na == 0 or nb == 0:
        return multiply(a, b)
    if na <= 2 and nb <= 2:
        return matmul(a, b)
    return _contract(a, b, [na - 1], [max(nb - 2, 0)])


def inner(a: Any, b: Any) -> Any:
    """numpy's inner: the sum over the last axes of both (a product with a scalar)."""
    na, nb = _ndim(a), _ndim(b)
    if na == 0 or nb == 0:
        return multiply(a, b)
    return _contract(a, b, [na - 1], [nb - 1])


def outer(a: Any, b: Any) -> Any:
    """numpy's outer: both operands flattened, every product of an entry of a with one of
    b, as a (a.size, b.size) matrix (a Python number weakly typed, as JAX)."""
    a, b = _weakly_typed(a, b)
    return multiply(reshape(a, (-1, 1)), reshape(b, (1, -1)))


def kron(a: Any, b: Any) -> Any:
    """numpy's Kronecker product: the shapes padded with leading ones to one length, the
    factors interleaved by broadcasting ((a0, 1, a1, 1) * (1, b0, 1, b1)) and merged."""
    a, b = _weakly_typed(a, b)
    n = max(_ndim(a), _ndim(b))
    sa = (1,) * (n - _ndim(a)) + tuple(_shape(a))
    sb = (1,) * (n - _ndim(b)) + tuple(_shape(b))
    spread_a = reshape(a, tuple(d for s in sa for d in (s, 1)))
    spread_b = reshape(b, tuple(d for s in sb for d in (1, s)))
    return reshape(multiply(spread_a, spread_b), tuple(x * y for x, y in zip(sa, sb)))


def vecdot(x1: Any, x2: Any, axis: int = -1) -> Any:
    """numpy 2's vecdot: conj(x1) · x2 along `axis`, the other axes broadcast."""
    shape = broadcast_shapes(_shape(x1), _shape(x2))
    if not shape:
        raise ArgumentValueError("cnp.vecdot: needs operands of at least one dimension")
    return sum(multiply(_conj(x1), x2), axis=_axis_of_ndim("vecdot", len(shape), axis))


def matvec(x1: Any, x2: Any) -> Any:
    """numpy 2's matvec: (..., m, n) matrices times (..., n) vectors, batches broadcast."""
    if _ndim(x1) < 2 or _ndim(x2) < 1:
        raise ArgumentValueError(f"cnp.matvec: needs a matrix and a vector, got shapes "
                                 f"{_shape(x1)} and {_shape(x2)}")
    return _getitem(matmul(x1, reshape(x2, tuple(_shape(x2)) + (1,))), (Ellipsis, 0))


def vecmat(x1: Any, x2: Any) -> Any:
    """numpy 2's vecmat: conj of (..., n) vectors times (..., n, m) matrices."""
    if _ndim(x1) < 1 or _ndim(x2) < 2:
        raise ArgumentValueError(f"cnp.vecmat: needs a vector and a matrix, got shapes "
                                 f"{_shape(x1)} and {_shape(x2)}")
    row = reshape(_conj(x1), tuple(_shape(x1)[:-1]) + (1, _shape(x1)[-1]))
    return _getitem(matmul(row, x2), (Ellipsis, 0, slice(None)))


def trace(a: Any, offset: int = 0, axis1: int = 0, axis2: int = 1, dtype: Any = None) -> Any:
    """numpy's trace: the sum of a diagonal of the (axis1, axis2) planes."""
    total = sum(diagonal(a, offset, axis1, axis2), axis=-1)
    return total if dtype is None else bind("astype", total, dtype=_np.dtype(dtype))


def cross(a: Any, b: Any, axisa: int = -1, axisb: int = -1, axisc: int = -1,
          axis: int | None = None) -> Any:
    """numpy's cross product of 3-vectors (or 2-vectors, whose cross product is the
    scalar z component) along axisa/axisb, the result's vectors along axisc."""
    if axis is not None:
        axisa = axisb = axisc = axis
    u = _to_end(a, (_axis_of_ndim("cross", _ndim(a), axisa),))
    v = _to_end(b, (_axis_of_ndim("cross", _ndim(b), axisb),))
    du, dv = _shape(u)[-1], _shape(v)[-1]
    if du not in (2, 3) or dv not in (2, 3):
        raise ArgumentValueError(f"cnp.cross: incompatible dimensions for cross product "
                                 f"(dimension must be 2 or 3), got {du} and {dv}")

    def part(x: Any, k: int, size: int) -> Any:
        return _getitem(x, (Ellipsis, k)) if k < size else None

    u0, u1, u2 = (part(u, k, du) for k in range(3))
    v0, v1, v2 = (part(v, k, dv) for k in range(3))
    z = subtract(multiply(u0, v1), multiply(u1, v0))
    if du == 2 and dv == 2:
        return z
    x = multiply(u1, v2) if u2 is None else (
        -multiply(u2, v1) if v2 is None else subtract(multiply(u1, v2), multiply(u2, v1)))
    y = multiply(u2, v0) if v2 is None else (
        -multiply(u0, v2) if u2 is None else subtract(multiply(u2, v0), multiply(u0, v2)))
    out = stack([x, y, z], axis=-1)
    n = _ndim(out)
    c = _axis_of_ndim("cross", n, axisc)
    return out if c == n - 1 else transpose(out, [*range(c), n - 1, *range(c, n - 1)])


_MODES = ("full", "same", "valid")


def _correlate_window(a: Any, v: Any, start: int, length: int) -> Any:
    """Entries start … start+length-1 of the full correlation of 1-D a and v (lag k at
    entry k + len(v) - 1): a zero-padded, gathered into a (length, len(v)) window matrix
    by one constant index, times v."""
    m = _shape(v)[0]
    pad = _np.zeros(m - 1, _np.result_type(_dtype(a), _dtype(v)))
    padded = concatenate([pad, a, pad]) if m > 1 else a
    rows = start + _np.arange(length)[:, None] + _np.arange(m)[None, :]
    return matmul(_getitem(padded, (rows,)), v)


def _check_1d(function: str, a: Any, v: Any, mode: str) -> None:
    if _ndim(a) != 1 or _ndim(v) != 1 or not _shape(a)[0] or not _shape(v)[0]:
        raise ArgumentValueError(f"cnp.{function}: needs two non-empty 1-D arrays, got "
                                 f"shapes {_shape(a)} and {_shape(v)}")
    if mode not in _MODES:
        raise ArgumentValueError(f"cnp.{function}: mode must be one of {_MODES}, got {mode!r}")


def _window(mode: str, n: int, m: int, same_start: int) -> tuple[int, int]:
    if mode == "full":
        return 0, n + m - 1
    if mode == "same":
        return same_start, max(n, m)
    return min(n, m) - 1, abs(n - m) + 1


def correlate(a: Any, v: Any, mode: str = "valid") -> Any:
    """numpy's 1-D cross-correlation, c[k] = sum_n a[n + k] conj(v[n]), in numpy's modes
    (and numpy's centring of `same` when v is the longer)."""
    _check_1d("correlate", a, v, mode)
    n, m = _shape(a)[0], _shape(v)[0]
    start, length = _window(mode, n, m, (m - 1) // 2 if n >= m else n // 2)
    return _correlate_window(a, _conj(v), start, length)


def convolve(a: Any, v: Any, mode: str = "full") -> Any:
    """numpy's 1-D convolution: the correlation with v reversed."""
    _check_1d("convolve", a, v, mode)
    n, m = _shape(a)[0], _shape(v)[0]
    start, length = _window(mode, n, m, (min(n, m) - 1) // 2)
    return _correlate_window(a, _getitem(v, (slice(None, None, -1),)), start, length)


__all__ = public_names(globals(), __name__)
