"""`cfgrad.numpy`'s array constructors beyond `core`'s (`identity`, `tri`, `logspace`,
`geomspace`, `copy`) and the shape queries `ndim`, `shape`, `size`.

Constructors return concrete `Array`s (core's numpy arrays with `.at`), which enter a
Program as constants; `logspace` and `geomspace` with a traced end are traced
(compositions of `linspace` and `power`, so differentiable in their ends, with numpy's
values and endpoints exact as numpy and JAX give them). The shape queries return Python ints and
tuples for traced values too: shapes are fixed while a function is traced.
"""

from __future__ import annotations

from typing import Any

import numpy as _np

from ..ir import broadcast_shapes
from ..trace_context import is_traced
from .core import (
    Array,
    _concrete_length,
    _first_axis_to,
    _ndim,
    _shape,
    asarray,
    astype,
    linspace,
    power,
    public_names,
    reshape,
    sign,
    where,
)
from .elementwise import log10


def identity(n: int, dtype: Any = None) -> Array:
    """The n×n identity matrix (float64 unless `dtype` says otherwise)."""
    _concrete_length("identity", "n", n)
    return _np.identity(n, dtype=float if dtype is None else dtype).view(Array)


def tri(N: int, M: int | None = None, k: int = 0, dtype: Any = float) -> Array:
    """Ones at and below the `k`-th diagonal of an N×M array, zeros above."""
    for name, size in (("N", N), ("M", M), ("k", k)):
        _concrete_length("tri", name, size)
    return _np.tri(N, M, k, dtype=dtype).view(Array)


def copy(a: Any) -> Any:
    """A copy of `a` (an Array); a traced value is returned as it is (traced values are
    immutable, so no later write can tell the two apart), with the identity's
    derivative."""
    return a if is_traced(a) else _np.array(a, copy=True).view(Array)


def ndim(a: Any) -> int:
    """The number of axes of `a`, a Python int for traced values too."""
    return _ndim(a)


def shape(a: Any) -> tuple[int, ...]:
    """The shape of `a`, a tuple of Python ints for traced values too."""
    return _shape(a)


def size(a: Any, axis: int | None = None) -> int:
    """The number of elements of `a` (along `axis`), a Python int for traced values too."""
    dims = _shape(a)
    return int(_np.prod(dims, dtype=_np.int64)) if axis is None else dims[axis]


def _traced(*values: Any) -> bool:
    return any(is_traced(v) for v in values)


def _behind_samples(x: Any, ndim: int, samples: int | None = None) -> Any:
    """`x`, whose first axis holds `samples` samples (all of its first axis by default;
    1 for a base, which has none), reshaped so that its other axes broadcast as the last
    of `ndim` axes behind the samples' axis: numpy's alignment of start, stop and base."""
    dims = tuple(_shape(x))
    if samples is None:
        samples, dims = dims[0], dims[1:]
    return reshape(x, (samples,) + (1,) * (ndim - len(dims)) + dims)


def logspace(start: Any, stop: Any, num: int = 50, endpoint: bool = True,
             base: Any = 10.0, dtype: Any = None, axis: int = 0) -> Any:
    """base ** linspace(start, stop, num): `num` samples from base**start to base**stop,
    differentiable in start, stop and base when they are traced."""
    _concrete_length("logspace", "num", num)
    if not _traced(start, stop, base):
        return _np.logspace(start, stop, num, endpoint, base, dtype, axis).view(Array)
    shape = broadcast_shapes(_shape(start), _shape(stop), _shape(base))
    exponents = _behind_samples(linspace(start, stop, num, endpoint), len(shape))
    y = _first_axis_to(power(_behind_samples(asarray(base), len(shape), 1), exponents), axis)
    return y if dtype is None else astype(y, dtype)


def geomspace(start: Any, stop: Any, num: int = 50, endpoint: bool = True,
              dtype: Any = None, axis: int = 0) -> Any:
    """`num` samples from start to stop spaced by a constant ratio (both ends of one sign,
    nonzero), with the ends exactly `start` and `stop` as numpy's; differentiable in both
    when they are traced (the derivative of the first sample in `start` is 1, as JAX)."""
    _concrete_length("geomspace", "num", num)
    if not _traced(start, stop):
        return _np.geomspace(start, stop, num, endpoint, dtype, axis).view(Array)
    direction = sign(start)
    lo, hi = start / direction, stop / direction
    y = logspace(log10(lo), log10(hi), num, endpoint)
    ends = _np.arange(num).reshape((num,) + (1,) * (_ndim(y) - 1))
    y = where(ends == 0, lo, y)
    if endpoint and num > 1:
        y = where(ends == num - 1, hi, y)
    y = _first_axis_to(direction * y, axis)
    return y if dtype is None else astype(y, dtype)


__all__ = public_names(globals(), __name__)
