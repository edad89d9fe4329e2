"""The statistics part of `cfgrad.numpy`: cumulative sums and products, sorting and
searching, order statistics (quantiles, medians), the NaN-ignoring reductions, moments of
several variables (average, cov, corrcoef), and differences, integrals and interpolation
along an axis.

numpy's names and signatures with JAX's semantics and gradients. Running sums and
products, sorts and searches are primitives of the derivative table (cumsum, cumprod,
sort, argsort, searchsorted); the rest are compositions of primitives whose rules give
the derivative JAX gives (a quantile interpolates between gathered sorted entries, so its
gradient goes to the entries it reads, with the interpolation weights).
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as _np

from ..errors import ArgumentValueError, TracerBoolError
from ..primitives import bind
from ..trace_context import current_loc, is_traced
from .core import (
    _axes,
    _axis,
    _cast,
    _concrete_length,
    _dtype,
    _getitem,
    _masked,
    _ndim,
    _no_out,
    _shape,
    _weakly_typed,
    abs,
    all,
    amax,
    amin,
    argmax,
    argmin,
    asarray,
    astype,
    broadcast_to,
    clip,
    concatenate,
    expand_dims,
    floor,
    logical_not,
    matmul,
    maximum,
    mean,
    minimum,
    mod,
    not_equal,
    prod,
    public_names,
    ravel,
    reshape,
    sqrt,
    sum,
    transpose,
    where,
)

_select = where  # the functions with a `where=` parameter select with this name

# -- helpers -------------------------------------------------------------------------------


def _isnan(a: Any) -> Any:
    return not_equal(a, a)


def _has_nan(a: Any) -> bool:
    return _dtype(a).kind in "fc"


def _without_nan(a: Any, fill: Any) -> Any:
    """`a` with its NaN entries replaced by `fill` (integers have none)."""
    return where(_isnan(a), fill, a) if _has_nan(a) else a


def _inexact(a: Any) -> Any:
    """`a` as a float array: integers and booleans in float64, as JAX promotes them."""
    return a if _dtype(a).kind in "fc" else astype(a, _np.float64)


def _part(a: Any, axis: int, start: int | None, stop: int | None) -> Any:
    """a[start:stop] along `axis`."""
    return _getitem(a, (slice(None),) * axis + (slice(start, stop),))


def _flip(a: Any, axis: int) -> Any:
    return _getitem(a, (slice(None),) * axis + (slice(None, None, -1),))


def _along(values: Any, axis: int, ndim: int) -> Any:
    """A 1-D array shaped to broadcast along `axis` of an array of `ndim` dimensions."""
    return reshape(values, tuple(-1 if d == axis else 1 for d in range(ndim)))


# -- cumulative sums and products ------------------------------------------------------------


def _cumulative(name: str, a: Any, axis: Any, dtype: Any, fill: Any = None) -> Any:
    a = _cast(a, dtype)
    if fill is not None:
        a = _without_nan(a, fill)
    if axis is None:
        a, axis = ravel(a), 0
    params = {"reverse": False} if name == "cumsum" else {}
    return bind(name, a, axis=_axis(name, a, axis), **params)


def cumsum(a: Any, axis: Any = None, dtype: Any = None, out: Any = None) -> Any:
    """numpy's cumsum (of the flattened array without `axis`); its VJP is the running sum
    from the other end."""
    _no_out("cumsum", out)
    return _cumulative("cumsum", a, axis, dtype)


def cumprod(a: Any, axis: Any = None, dtype: Any = None, out: Any = None) -> Any:
    """numpy's cumprod; its derivative is exact where entries are zero (as JAX's)."""
    _no_out("cumprod", out)
    return _cumulative("cumprod", a, axis, dtype)


def nancumsum(a: Any, axis: Any = None, dtype: Any = None, out: Any = None) -> Any:
    """cumsum with NaN counted as 0 (NaN entries get no gradient)."""
    _no_out("nancumsum", out)
    return _cumulative("cumsum", a, axis, dtype, fill=0)


def nancumprod(a: Any, axis: Any = None, dtype: Any = None, out: Any = None) -> Any:
    """cumprod with NaN counted as 1 (NaN entries get no gradient)."""
    _no_out("nancumprod", out)
    return _cumulative("cumprod", a, axis, dtype, fill=1)


def _cumulative_new(name: str, x: Any, axis: Any, dtype: Any, include_initial: bool,
                    identity: int) -> Any:
    """The array API's cumulative_sum/prod: `axis` may be left out only for 1-D input;
    `include_initial` starts the result with the identity."""
    if axis is None:
        if _ndim(x) > 1:
            raise ArgumentValueError(f"cnp.{name}: axis is required for arrays of more than "
                                     f"one dimension (got {_ndim(x)} dimensions)")
        axis = 0
    x = reshape(x, (1,)) if _ndim(x) == 0 else x
    result = _cumulative("cumsum" if identity == 0 else "cumprod", x, axis, dtype)
    if not include_initial:
        return result
    axis = _axis(name, x, axis)
    shape = list(_shape(result))
    shape[axis] = 1
    start = _np.full(shape, identity, _dtype(result))
    return concatenate([start, result], axis=axis)


def cumulative_sum(x: Any, /, *, axis: Any = None, dtype: Any = None,
                   include_initial: bool = False) -> Any:
    return _cumulative_new("cumulative_sum", x, axis, dtype, include_initial, 0)


def cumulative_prod(x: Any, /, *, axis: Any = None, dtype: Any = None,
                    include_initial: bool = False) -> Any:
    return _cumulative_new("cumulative_prod", x, axis, dtype, include_initial, 1)


# -- sorting and searching ---------------------------------------------------------------------


def _sort_args(function: str, a: Any, axis: Any, order: Any) -> tuple[Any, int]:
    if order is not None:
        raise ArgumentValueError(f"cnp.{function}: order= (fields of structured arrays) is "
                                 "not supported")
    if axis is None:
        return ravel(a), 0
    return a, _axis(function, a, axis)


def sort(a: Any, axis: Any = -1, kind: Any = None, order: Any = None, *, stable: bool = True,
         descending: bool = False) -> Any:
    """numpy's sort, always stable (NaN last); each entry of the result takes the gradient
    of the entry it came from. `descending` reverses the ascending sort (as JAX)."""
    a, axis = _sort_args("sort", a, axis, order)
    result = bind("sort", a, axis=axis)
    return _flip(result, axis) if descending else result


def argsort(a: Any, axis: Any = -1, kind: Any = None, order: Any = None, *,
            stable: bool = True, descending: bool = False) -> Any:
    """numpy's argsort, always stable: tied entries keep their order, also with
    `descending=True` (as JAX)."""
    a, axis = _sort_args("argsort", a, axis, order)
    if not descending:
        return bind("argsort", a, axis=axis)
    last = _shape(a)[axis] - 1
    return _flip(last - bind("argsort", _flip(a, axis), axis=axis), axis)


def searchsorted(a: Any, v: Any, side: str = "left", sorter: Any = None, *,
                 method: Any = None) -> Any:
    """numpy's searchsorted into a sorted 1-D `a` (ordered by `sorter`, if given)."""
    if sorter is not None:
        a = _getitem(a, sorter if is_traced(sorter) else _np.asarray(sorter))
    return bind("searchsorted", a, v, side=side)


def digitize(x: Any, bins: Any, right: bool = False) -> Any:
    """numpy's digitize for increasing or decreasing `bins` (JAX's formula)."""
    if _ndim(bins) != 1:
        raise ArgumentValueError(f"cnp.digitize: bins must be 1-D, got shape {_shape(bins)}")
    n = _shape(bins)[0]
    if n == 0:
        return _np.zeros(_shape(x), _np.int64)
    side = "left" if right else "right"
    increasing = _getitem(bins, -1) >= _getitem(bins, 0)
    return where(increasing, searchsorted(bins, x, side),
                 n - searchsorted(_flip(bins, 0), x, side))


def isin(element: Any, test_elements: Any, assume_unique: bool = False,
         invert: bool = False, *, kind: Any = None) -> Any:
    """Whether each entry of `element` equals one of `test_elements` (compared all at once,
    as JAX does: O(len(element) * len(test_elements)))."""
    element = element if is_traced(element) else _np.asarray(element)
    tests = ravel(test_elements)
    found = bind("amax", expand_dims(element, _ndim(element)) == tests,
                 axes=(_ndim(element),), keepdims=False)
    return logical_not(found) if invert else found


def count_nonzero(a: Any, axis: Any = None, *, keepdims: bool = False) -> Any:
    return sum(not_equal(a, 0), axis, keepdims=keepdims)


def bincount(x: Any, weights: Any = None, minlength: int = 0, *,
             length: int | None = None) -> Any:
    """numpy's bincount of non-negative integers, differentiable in `weights`. With JAX's
    `length`: the number of bins (then values >= length are dropped, negative ones count
    as 0, as JAX); without it the length is max(x) + 1 (at least `minlength`), which needs
    a concrete `x`."""
    if _ndim(x) != 1 or _dtype(x).kind not in "biu":
        raise ArgumentValueError(f"cnp.bincount: x must be a 1-D array of non-negative "
                                 f"integers, got {_dtype(x)} of shape {_shape(x)}")
    _concrete_length("bincount", "minlength", minlength)
    _concrete_length("bincount", "length", length)
    if length is None:
        if is_traced(x):
            loc = current_loc()
            raise TracerBoolError(
                f"cnp.bincount: x is a traced value{f' at {loc}' if loc else ''}, so the "
                "number of bins (max(x) + 1) is unknown while the function is traced; pass "
                "length=<a Python int> (JAX's argument), as jax.numpy.bincount needs under jit")
        x_arr = _np.asarray(x)
        length = max(int(minlength), int(x_arr.max()) + 1 if x_arr.size else 0)
    length = operator.index(length)
    if weights is None:
        weights = _np.ones(_shape(x), _np.int64)
    inside = x < length
    counted = where(inside, weights, 0)
    index = maximum(where(inside, x, 0), 0)  # negative values count as 0, as in JAX
    return bind("scatter_add", counted, astype(index, _np.int64), spec=("$",),
                shape=(length,))


# -- order statistics --------------------------------------------------------------------------

_METHODS = ("linear", "lower", "higher", "midpoint", "nearest")


def _quantile(function: str, a: Any, q: Any, axis: Any, method: str, keepdims: bool,
              ignore_nan: bool, interpolation: Any = None, weights: Any = None) -> Any:
    """JAX's quantile: sort along the reduced axes (moved last and flattened), read the
    entries at floor and ceil of q * (n - 1) (n: the count of non-NaN entries when NaN are
    ignored) and combine them as `method` says. The gradient goes to the entries read, with
    the interpolation weights (linear), 1/2 each (midpoint) or 1 (lower, higher, nearest);
    nearest rounds a fraction of exactly 1/2 down, as JAX (numpy rounds to even)."""
    if interpolation is not None:
        method = interpolation
    if method not in _METHODS:
        raise ArgumentValueError(f"cnp.{function}: method={method!r} is not one of "
                                 f"{', '.join(_METHODS)}")
    if weights is not None:
        raise ArgumentValueError(f"cnp.{function}: weights= (method 'inverted_cdf') is not "
                                 "supported")
    a = _inexact(a)
    ndim, shape = _ndim(a), _shape(a)
    axes = _axes(a, axis, function)
    kept = tuple(d for d in range(ndim) if d not in axes)
    rest = tuple(shape[d] for d in kept)
    n = int(_np.prod([shape[d] for d in axes], dtype=_np.int64))
    if n == 0:
        raise ArgumentValueError(f"cnp.{function}: cannot take a quantile over an empty axis")
    if kept + axes != tuple(range(ndim)):
        a = transpose(a, kept + axes)
    flat = a if rest + (n,) == shape else reshape(a, rest + (n,))
    q = asarray(q) if is_traced(q) else _np.asarray(q, dtype=_dtype(a))
    q_shape = _shape(q)
    q_full = reshape(q, q_shape + (1,) * len(rest))
    if ignore_nan:
        count = sum(logical_not(_isnan(flat)), -1, dtype=_dtype(a))  # rest
        position = q_full * (count - 1.0)
        top = count - 1.0
    else:
        flat = where(bind("amax", _isnan(flat), axes=(len(rest),), keepdims=True), _np.nan,
                     flat)
        position = q_full * float(n - 1)
        top = float(n - 1)
    ordered = bind("sort", flat, axis=len(rest))
    low, high = floor(position), -floor(-position)
    high_weight = position - low
    grids = tuple(_np.arange(d, dtype=_np.int64).reshape(
        [d if e == i else 1 for e in range(len(rest))]) for i, d in enumerate(rest))

    def read(at: Any) -> Any:
        index = astype(maximum(minimum(at, top), 0.0), _np.int64)
        index = broadcast_to(index, q_shape + rest)
        return _getitem(ordered, grids + (index,))

    low_value, high_value = read(low), read(high)
    if method == "linear":
        result = low_value * (1.0 - high_weight) + high_value * high_weight
    elif method == "lower":
        result = low_value
    elif method == "higher":
        result = high_value
    elif method == "nearest":
        result = where(high_weight <= 0.5, low_value, high_value)
    else:
        result = (low_value + high_value) * 0.5
    if keepdims:
        result = reshape(result, q_shape + tuple(1 if d in axes else s
                                                 for d, s in enumerate(shape)))
    return result if _dtype(result) == _dtype(a) else astype(result, _dtype(a))


def quantile(a: Any, q: Any, axis: Any = None, out: Any = None, overwrite_input: bool = False,
             method: str = "linear", keepdims: bool = False, *, weights: Any = None,
             interpolation: Any = None) -> Any:
    """numpy's quantile with JAX's semantics (a slice with a NaN gives NaN); `q` may be
    traced and is differentiable too."""
    _no_out("quantile", out)
    return _quantile("quantile", a, q, axis, method, keepdims, False, interpolation, weights)


def nanquantile(a: Any, q: Any, axis: Any = None, out: Any = None,
                overwrite_input: bool = False, method: str = "linear", keepdims: bool = False,
                *, weights: Any = None, interpolation: Any = None) -> Any:
    """quantile of the non-NaN entries; an all-NaN slice gives NaN (JAX's semantics)."""
    _no_out("nanquantile", out)
    return _quantile("nanquantile", a, q, axis, method, keepdims, True, interpolation,
                     weights)


def percentile(a: Any, q: Any, axis: Any = None, out: Any = None,
               overwrite_input: bool = False, method: str = "linear", keepdims: bool = False,
               *, weights: Any = None, interpolation: Any = None) -> Any:
    _no_out("percentile", out)
    return _quantile("percentile", a, _percent(q), axis, method, keepdims, False,
                     interpolation, weights)


def nanpercentile(a: Any, q: Any, axis: Any = None, out: Any = None,
                  overwrite_input: bool = False, method: str = "linear",
                  keepdims: bool = False, *, weights: Any = None,
                  interpolation: Any = None) -> Any:
    _no_out("nanpercentile", out)
    return _quantile("nanpercentile", a, _percent(q), axis, method, keepdims, True,
                     interpolation, weights)


def _percent(q: Any) -> Any:
    return q / 100.0 if is_traced(q) else _np.asarray(q, dtype=_np.float64) / 100.0


def median(a: Any, axis: Any = None, out: Any = None, overwrite_input: bool = False,
           keepdims: bool = False) -> Any:
    """The 0.5 quantile by the midpoint method, as JAX: of two middle entries each gets
    half the gradient (also when they are equal)."""
    _no_out("median", out)
    return _quantile("median", a, 0.5, axis, "midpoint", keepdims, False)


def nanmedian(a: Any, axis: Any = None, out: Any = None, overwrite_input: bool = False,
              keepdims: bool = False) -> Any:
    _no_out("nanmedian", out)
    return _quantile("nanmedian", a, 0.5, axis, "midpoint", keepdims, True)


# -- reductions that ignore NaN -----------------------------------------------------------------


def nansum(a: Any, axis: Any = None, dtype: Any = None, out: Any = None,
           keepdims: bool = False, initial: Any = None, where: Any = None) -> Any:
    _no_out("nansum", out)
    return sum(_without_nan(a, 0), axis, dtype, None, keepdims, initial, where)


def nanprod(a: Any, axis: Any = None, dtype: Any = None, out: Any = None,
            keepdims: bool = False, initial: Any = None, where: Any = None) -> Any:
    _no_out("nanprod", out)
    return prod(_without_nan(a, 1), axis, dtype, None, keepdims, initial, where)


def _nan_extreme(name: str, reduce: Any, fill: float) -> Any:
    def fn(a: Any, axis: Any = None, out: Any = None, keepdims: bool = False,
           initial: Any = None, where: Any = None) -> Any:
        """JAX's nanmax/nanmin: NaN entries left out (no gradient); a slice of NaN only
        gives NaN (unless `initial` is given)."""
        _no_out(name, out)
        result = reduce(_without_nan(a, fill), axis, None, keepdims, initial, where)
        if initial is not None or not _has_nan(a):
            return result
        return _select(all(_isnan(a), axis, keepdims=keepdims), _np.nan, result)

    fn.__name__ = name
    return fn


nanmax = _nan_extreme("nanmax", amax, -_np.inf)
nanmin = _nan_extreme("nanmin", amin, _np.inf)


def nanmean(a: Any, axis: Any = None, dtype: Any = None, out: Any = None,
            keepdims: bool = False, *, where: Any = None) -> Any:
    """The mean of the non-NaN entries (NaN for a slice of NaN only)."""
    _no_out("nanmean", out)
    a = _inexact(_cast(a, dtype))
    count = _count_valid(a, axis, keepdims, where)
    return sum(_without_nan(a, 0), axis, None, None, keepdims, where=where) / count


def _count_valid(a: Any, axis: Any, keepdims: bool, where_: Any) -> Any:
    valid = logical_not(_isnan(a))
    return sum(astype(_masked(valid, where_, False), _dtype(a)), axis, keepdims=keepdims)


def nanvar(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, ddof: Any = 0,
           keepdims: bool = False, *, where: Any = None, correction: Any = None) -> Any:
    """The variance of the non-NaN entries, divided by count - ddof; NaN where that is not
    positive (JAX's semantics)."""
    _no_out("nanvar", out)
    if correction is not None:
        ddof = correction
    a = _inexact(_cast(a, dtype))
    centered = _without_nan(a - nanmean(a, axis, keepdims=True, where=where), 0)
    normalizer = _count_valid(a, axis, keepdims, where) - ddof
    total = sum(centered * centered, axis, None, None, keepdims, where=where)
    bad = normalizer <= 0
    return _select(bad, _np.nan, total) / _select(bad, 1.0, normalizer)


def nanstd(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, ddof: Any = 0,
           keepdims: bool = False, *, where: Any = None, correction: Any = None) -> Any:
    _no_out("nanstd", out)
    return sqrt(nanvar(a, axis, dtype, None, ddof, keepdims, where=where,
                       correction=correction))


def _nan_arg(name: str, arg: Any, fill: float) -> Any:
    def fn(a: Any, axis: Any = None, out: Any = None, *, keepdims: bool = False) -> Any:
        """JAX's nanargmax/nanargmin: the index among the non-NaN entries; -1 for a slice
        of NaN only (numpy raises)."""
        _no_out(name, out)
        index = arg(_without_nan(a, fill), axis, keepdims=keepdims)
        if not _has_nan(a):
            return index
        return _select(all(_isnan(a), axis, keepdims=keepdims), -1, index)

    fn.__name__ = name
    return fn


nanargmax = _nan_arg("nanargmax", argmax, -_np.inf)
nanargmin = _nan_arg("nanargmin", argmin, _np.inf)


# -- moments ----------------------------------------------------------------------------------


def average(a: Any, axis: Any = None, weights: Any = None, returned: bool = False, *,
            keepdims: bool = False) -> Any:
    """numpy's average: the mean, or sum(a * w) / sum(w) with `weights` (of a's shape, or
    1-D along a single `axis`); `returned` adds the sum of the weights."""
    a = _inexact(a)
    if weights is None:
        avg = mean(a, axis, keepdims=keepdims)
        count = float(_np.prod([_shape(a)[d] for d in _axes(a, axis, "average")], dtype=_np.int64))
        scale = _np.full(_shape(avg), count, _dtype(avg))
    else:
        w = weights
        if _shape(w) != _shape(a):
            if axis is None:
                raise ArgumentValueError("cnp.average: weights of a shape other than a's need "
                                         "an axis")
            if _ndim(w) != 1 or _shape(w)[0] != _shape(a)[_axis("average", a, axis)]:
                raise ArgumentValueError(
                    f"cnp.average: weights of shape {_shape(w)} do not match a of shape "
                    f"{_shape(a)} along axis {axis}")
            w = _along(w, _axis("average", a, axis), _ndim(a))
        w = broadcast_to(w, _shape(a))
        scale = sum(w, axis, keepdims=keepdims)
        avg = sum(a * w, axis, keepdims=keepdims) / scale
        scale = broadcast_to(_cast(scale, _dtype(avg)), _shape(avg))
    return (avg, scale) if returned else avg


def ptp(a: Any, axis: Any = None, out: Any = None, keepdims: bool = False) -> Any:
    """max - min (ties share the gradient as in max and min)."""
    _no_out("ptp", out)
    return amax(a, axis, keepdims=keepdims) - amin(a, axis, keepdims=keepdims)


def _rows(function: str, m: Any, rowvar: bool) -> Any:
    if _ndim(m) > 2:
        raise ArgumentValueError(f"cnp.{function}: m has more than 2 dimensions "
                                 f"({_shape(m)})")
    m = reshape(_inexact(m), (1, -1)) if _ndim(m) < 2 else _inexact(m)
    return transpose(m) if not rowvar and _shape(m)[0] != 1 else m


def cov(m: Any, y: Any = None, rowvar: bool = True, bias: bool = False, ddof: Any = None,
        fweights: Any = None, aweights: Any = None, *, dtype: Any = None) -> Any:
    """numpy's cov (variables in rows, or columns with rowvar=False), with integer
    frequency weights and real analytic weights."""
    x = _rows("cov", _cast(m, dtype), rowvar)
    if y is not None:
        x = concatenate([x, _rows("cov", _cast(y, dtype), rowvar)], axis=0)
    if ddof is None:
        ddof = 0 if bias else 1
    w = None
    if fweights is not None:
        w = _inexact(fweights)
    if aweights is not None:
        w = _inexact(aweights) if w is None else w * aweights
    avg, w_sum = average(x, axis=1, weights=w, returned=True)
    w_sum = _getitem(w_sum, 0)
    if w is None:
        fact = _shape(x)[1] - ddof
    elif ddof == 0:
        fact = w_sum
    elif aweights is None:
        fact = w_sum - ddof
    else:
        fact = w_sum - ddof * sum(w * aweights) / w_sum
    centered = x - reshape(avg, (-1, 1))
    weighted = centered if w is None else centered * w
    c = matmul(centered, transpose(weighted)) / fact
    return reshape(c, ()) if _shape(c) == (1, 1) else c


def corrcoef(x: Any, y: Any = None, rowvar: bool = True, *, dtype: Any = None) -> Any:
    """cov scaled by the standard deviations, clipped to [-1, 1] (as numpy and JAX)."""
    c = cov(x, y, rowvar, dtype=dtype)
    if _ndim(c) == 0:
        return c / c
    n = _shape(c)[0]
    diagonal = _getitem(c, (_np.arange(n), _np.arange(n)))
    stddev = sqrt(diagonal)
    c = c / reshape(stddev, (-1, 1)) / reshape(stddev, (1, -1))
    return clip(c, -1.0, 1.0)


# -- differences, integrals, interpolation --------------------------------------------------


def diff(a: Any, n: int = 1, axis: int = -1, prepend: Any = None, append: Any = None) -> Any:
    """numpy's diff (`n` times, along `axis`; booleans compare with !=)."""
    n = operator.index(n)
    if n < 0:
        raise ArgumentValueError(f"cnp.diff: order n={n} must be non-negative")
    if n == 0:
        return a
    if _ndim(a) == 0:
        raise ArgumentValueError("cnp.diff: needs an array of at least one dimension")
    axis = _axis("diff", a, axis)
    pieces = []
    for extra in _weakly_typed(*(x for x in (prepend, a, append) if x is not None)):
        if extra is not a and _ndim(extra) == 0:
            shape = list(_shape(a))
            shape[axis] = 1
            extra = broadcast_to(extra, tuple(shape))
        pieces.append(extra)
    if len(pieces) > 1:
        a = concatenate(pieces, axis=axis)
    boolean = _dtype(a) == _np.bool_
    for _ in range(n):
        upper, lower = _part(a, axis, 1, None), _part(a, axis, None, -1)
        a = not_equal(upper, lower) if boolean else upper - lower
    return a


def ediff1d(ary: Any, to_end: Any = None, to_begin: Any = None) -> Any:
    """Differences of the flattened array, with `to_begin`/`to_end` (cast to its dtype)
    around them."""
    flat = ravel(ary)
    pieces = [_part(flat, 0, 1, None) - _part(flat, 0, None, -1)]
    if to_begin is not None:
        pieces.insert(0, ravel(_cast(asarray(to_begin), _dtype(flat))))
    if to_end is not None:
        pieces.append(ravel(_cast(asarray(to_end), _dtype(flat))))
    return concatenate(pieces) if len(pieces) > 1 else pieces[0]


def _gradient_along(f: Any, spacing: Any, axis: int, edge_order: int) -> Any:
    """numpy's second-order central differences inside, one-sided differences of order
    `edge_order` at the ends, for a uniform step or 1-D coordinates."""
    ndim = _ndim(f)

    def part(start: int | None, stop: int | None) -> Any:
        return _part(f, axis, start, stop)

    if _ndim(spacing) == 0:
        h = spacing
        inner = (part(2, None) - part(None, -2)) / (2.0 * h)
        if edge_order == 1:
            first = (part(1, 2) - part(0, 1)) / h
            last = (part(-1, None) - part(-2, -1)) / h
        else:
            first = (-1.5 * part(0, 1) + 2.0 * part(1, 2) - 0.5 * part(2, 3)) / h
            last = (0.5 * part(-3, -2) - 2.0 * part(-2, -1) + 1.5 * part(-1, None)) / h
    else:
        if _shape(spacing) != (_shape(f)[axis],):
            raise ArgumentValueError(
                f"cnp.gradient: coordinates of shape {_shape(spacing)} do not match the "
                f"{_shape(f)[axis]} points along axis {axis}")
        dx = _along(_inexact(spacing), axis, ndim)
        step = _part(dx, axis, 1, None) - _part(dx, axis, None, -1)
        dx1, dx2 = _part(step, axis, None, -1), _part(step, axis, 1, None)
        inner = (-dx2 / (dx1 * (dx1 + dx2)) * part(None, -2)
                 + (dx2 - dx1) / (dx1 * dx2) * part(1, -1)
                 + dx1 / (dx2 * (dx1 + dx2)) * part(2, None))
        if edge_order == 1:
            first = (part(1, 2) - part(0, 1)) / _part(step, axis, 0, 1)
            last = (part(-1, None) - part(-2, -1)) / _part(step, axis, -1, None)
        else:
            d1, d2 = _part(step, axis, 0, 1), _part(step, axis, 1, 2)
            first = (-(2.0 * d1 + d2) / (d1 * (d1 + d2)) * part(0, 1)
                     + (d1 + d2) / (d1 * d2) * part(1, 2)
                     - d1 / (d2 * (d1 + d2)) * part(2, 3))
            d1, d2 = _part(step, axis, -2, -1), _part(step, axis, -1, None)
            last = (d2 / (d1 * (d1 + d2)) * part(-3, -2)
                    - (d2 + d1) / (d1 * d2) * part(-2, -1)
                    + (2.0 * d2 + d1) / (d2 * (d1 + d2)) * part(-1, None))
    return concatenate([first, inner, last], axis=axis)


def gradient(f: Any, *varargs: Any, axis: Any = None, edge_order: int = 1) -> Any:
    """numpy's gradient (JAX has no `edge_order`; here 1 or 2 as numpy): one array per
    axis, a tuple of them for several axes."""
    if edge_order not in (1, 2):
        raise ArgumentValueError(f"cnp.gradient: edge_order={edge_order!r} must be 1 or 2")
    f = _inexact(f)
    axes = _axes(f, axis, "gradient") if axis is None or not isinstance(
        axis, tuple | list) else tuple(_axis("gradient", f, ax) for ax in axis)
    if len(varargs) == 0:
        spacings: list[Any] = [1.0] * len(axes)
    elif len(varargs) == 1 and _ndim(varargs[0]) == 0:
        spacings = list(varargs) * len(axes)
    elif len(varargs) == len(axes):
        spacings = list(varargs)
    else:
        raise ArgumentValueError(f"cnp.gradient: {len(varargs)} spacing arguments for "
                                 f"{len(axes)} axes")
    for ax in axes:
        if _shape(f)[ax] < edge_order + 1:
            raise ArgumentValueError(
                f"cnp.gradient: axis {ax} has {_shape(f)[ax]} points; edge_order="
                f"{edge_order} needs at least {edge_order + 1}")
    results = tuple(_gradient_along(f, h, ax, edge_order) for ax, h in zip(axes, spacings))
    return results[0] if len(results) == 1 else results


def trapezoid(y: Any, x: Any = None, dx: Any = 1.0, axis: int = -1) -> Any:
    """The trapezoidal rule along `axis`, with sample points `x` (1-D, or of y's shape)
    or a uniform step `dx`."""
    y = _inexact(y)
    axis = _axis("trapezoid", y, axis)
    if x is None:
        d = dx
    elif _ndim(x) == 1:
        d = diff(_along(_inexact(x), axis, _ndim(y)), axis=axis)
    else:
        d = diff(_inexact(x), axis=axis)
    pairs = _part(y, axis, 1, None) + _part(y, axis, None, -1)
    return sum(d * pairs * 0.5, axis)


def interp(x: Any, xp: Any, fp: Any, left: Any = None, right: Any = None,
           period: Any = None) -> Any:
    """numpy's interp for increasing `xp`, as JAX computes it (also differentiable in xp
    and fp; `left`/`right` may be 'extrapolate'). At a knot the interval to its right is
    used (JAX's convention): the derivative in x there is the right slope (the left one at
    the last knot)."""
    if _ndim(xp) != 1 or _shape(xp) != _shape(fp):
        raise ArgumentValueError("cnp.interp: xp and fp must be 1-D arrays of equal length")
    for side, value in (("left", left), ("right", right)):
        if isinstance(value, str) and value != "extrapolate":
            raise ArgumentValueError(f"cnp.interp: the only string {side} takes is "
                                     f"'extrapolate', got {value!r}")
    x, xp, fp = _inexact(x), _inexact(xp), _inexact(fp)
    if period is not None:
        if _ndim(period) != 0:
            raise ArgumentValueError(f"cnp.interp: period must be a scalar, got {period!r}")
        period = abs(period)
        x, xp = mod(x, period), mod(xp, period)
        order = argsort(xp)
        xp, fp = _getitem(xp, order), _getitem(fp, order)
        xp = concatenate([_part(xp, 0, -1, None) - period, xp, _part(xp, 0, None, 1) + period])
        fp = concatenate([_part(fp, 0, -1, None), fp, _part(fp, 0, None, 1)])
    n = _shape(xp)[0]
    i = clip(searchsorted(xp, x, side="right"), 1, n - 1)
    below_x, below_f = _getitem(xp, i - 1), _getitem(fp, i - 1)
    dx = _getitem(xp, i) - below_x
    df = _getitem(fp, i) - below_f
    tiny = _np.spacing(_np.finfo(_dtype(dx)).eps)
    flat = abs(dx) <= tiny  # equal knots: no slope, and no NaN in the gradient
    f = where(flat, below_f, below_f + (x - below_x) / where(flat, 1.0, dx) * df)
    if period is None:
        if not isinstance(left, str):
            f = where(x < _getitem(xp, 0), _getitem(fp, 0) if left is None else left, f)
        if not isinstance(right, str):
            f = where(x > _getitem(xp, -1), _getitem(fp, -1) if right is None else right, f)
    return f


def unwrap(p: Any, discont: Any = None, axis: int = -1, *, period: Any = 2 * _np.pi) -> Any:
    """numpy's unwrap (JAX's formula): jumps of more than max(discont, period / 2) are
    brought back by multiples of `period`; the corrections are piecewise constant, so the
    derivative is that of the identity."""
    axis = _axis("unwrap", p, axis)
    if _shape(p)[axis] == 0:
        return p
    if discont is None:
        discont = period / 2
    interval = period // 2 if _dtype(p).kind in "iu" and isinstance(period, int) else period / 2
    dd = diff(p, axis=axis)
    ddmod = mod(dd + interval, period) - interval
    ddmod = where((ddmod == -interval) & (dd > 0), interval, ddmod)
    correction = where(abs(dd) < discont, 0, ddmod - dd)
    return concatenate([_part(p, axis, 0, 1),
                        _part(p, axis, 1, None) + cumsum(correction, axis=axis)], axis=axis)


__all__ = public_names(globals(), __name__)
