"""Reductions (`sum`, `mean`, `prod`, `amax`, `amin`, `logsumexp`, `argmax`, `argmin`),
running sums and products, sorting and searching, each entry with its Numba source
beside it: sums and products in numpy's order of operations for C-contiguous operands
(pairwise along a contiguous run of reduced axes, else row by row), so compiled results
are numpy's bits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import LoweringError, Unsupported
from ..ir import TensorType
from .rules import (
    axes_param,
    axis_param,
    bool_param,
    mask_like,
    np_dtype,
    np_zero,
    reduced_shape,
    with_kept_dims,
)
from .table import (
    Primitive,
    Source,
    bind,
    register,
)


def _nonempty_reduction(op: str, t: TensorType, axes: tuple[int, ...]) -> None:
    """Reductions without an identity (max, min, their arg- forms, logsumexp's shift by the
    max) have no value over an empty axis: numpy raises at run time, so the rule refuses."""
    empty = [a for a in axes if t.shape[a] == 0]
    if empty:
        raise LoweringError(f"{op}: cannot reduce {t} over its empty axis {empty[0]} "
                            "(the reduction has no identity)")


def _reduction_type(op: str, out_dtype: Callable[[np.dtype], np.dtype],
                    identity: bool = True) -> Callable[..., TensorType]:
    def rule(types: list[TensorType], axes: tuple[int, ...], keepdims: bool) -> TensorType:
        t = types[0]
        axes = axes_param(op, axes, t)
        keepdims = bool_param(op, "keepdims", keepdims)
        if not identity:
            _nonempty_reduction(op, t, axes)
        return TensorType(reduced_shape(t.shape, axes, keepdims), np.dtype(out_dtype(t.dtype)))

    return rule


def _sum_dtype(d: np.dtype) -> np.dtype:
    return np.dtype(np.int64) if d.kind in "bi" else (np.dtype(np.uint64) if d.kind == "u" else d)


def _mean_dtype(d: np.dtype) -> np.dtype:
    return np.dtype(np.float64) if d.kind in "biu" else d


def _spread(ct, x, axes, keepdims):
    """Broadcast a reduction's cotangent back over the reduced axes."""
    return bind("broadcast_to", with_kept_dims(ct, x.shape, axes, keepdims), shape=x.shape)


def _count(shape, axes) -> int:
    return int(np.prod([shape[a] for a in axes], dtype=np.int64))


def _extreme(name: str, impl: Callable, write: Callable[..., str]) -> None:
    def weights(x, out, axes, keepdims):
        hit = mask_like(x == with_kept_dims(out, x.shape, axes, keepdims), x)
        return hit / bind("sum", hit, axes=axes, keepdims=True)

    def vjp(ct, xs, out, axes, keepdims):
        x = xs[0]
        return (_spread(ct, x, axes, keepdims) * weights(x, out, axes, keepdims),)

    def jvp(ts, xs, out, axes, keepdims):
        x = xs[0]
        return bind("sum", ts[0] * weights(x, out, axes, keepdims), axes=axes, keepdims=keepdims)

    register(Primitive(name=name,
                       impl=lambda x, axes, keepdims: impl(x, axis=axes, keepdims=keepdims),
                       abstract=_reduction_type(name, lambda d: d, identity=False), vjp=vjp,
                       jvp=jvp,
                       family="reduction", promote="none", compiled=Source(write),
                       notes="ties share the gradient equally among the extreme entries"))


def _block(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[int, int, int] | None:
    """(outer, n, inner) when reducing `axes` of a C-contiguous array of `shape` is
    reducing the middle axis of its reshape to (outer, n, inner): the reduced axes are
    adjacent once axes of length 1 are dropped (as numpy's iterator drops them). None
    for axes apart, whose order of operations numpy's iterator chooses."""
    ndim = len(shape)
    axes = {a % ndim for a in axes} if ndim else set()
    kept = [d for d in range(ndim) if shape[d] != 1]
    reduced = [j for j, d in enumerate(kept) if d in axes]
    if reduced and reduced != list(range(reduced[0], reduced[-1] + 1)):
        return None
    first = reduced[0] if reduced else len(kept)
    last = reduced[-1] + 1 if reduced else len(kept)
    size = [shape[d] for d in kept]
    return (int(np.prod(size[:first], dtype=np.int64)),
            int(np.prod(size[first:last], dtype=np.int64)),
            int(np.prod(size[last:], dtype=np.int64)))


def _over_block(helper: str, op: str, args, types, out, axes, cast: bool = True,
                extra: str = "") -> str:
    """`helper` (a `K.…3` function of (outer, n, inner) to (outer, inner)) applied to
    the operand reshaped for `axes`, its result shaped as `out`."""
    t = types[0]
    block = _block(t.shape, axes)
    if block is None:
        raise Unsupported(f"{op} over the axes {tuple(axes)} of {t}, which are not adjacent "
                          "(numpy's iterator picks the order of operations)")
    x = args[0]
    if cast and t.dtype != out.dtype:
        x = f"{np_dtype(out)}({x})" if t.shape == () else f"{x}.astype({np_dtype(out)})"
    x3 = (f"np.full((1, 1, 1), {x})" if t.shape == ()
          else f"np.ascontiguousarray({x}).reshape({block})")
    value = f"{helper}({x3}{extra})"
    return f"{value}[0, 0]" if out.shape == () else f"{value}.reshape({out.shape})"


def _apart(x: str, t: Any, out: Any, axes: tuple[int, ...], product: bool) -> str:
    """A sum or product over axes that are not adjacent, in numpy's order for a
    C-contiguous operand (axes of length 1 dropped): a trailing run of reduced axes is its
    iterator's inner loop (pairwise for a sum), every other reduced axis an outer loop
    accumulating into the result in C order (`K.combine3`: rows combined one after
    another)."""
    ndim = t.ndim
    reduced = {a % ndim for a in axes}
    dims = [d for d in range(ndim) if t.shape[d] != 1]
    shape = [t.shape[d] for d in dims]
    flags = [d in reduced for d in dims]
    value = f"np.ascontiguousarray({x}).reshape({tuple(shape)})"
    run = 0
    while not product and run < len(flags) and flags[len(flags) - 1 - run]:
        run += 1
    if run:  # the inner loop: a pairwise sum over the trailing run, for each other index
        lead = shape[:len(shape) - run]
        inner = int(np.prod(shape[len(shape) - run:], dtype=np.int64))
        value = (f"K.sum3({value}.reshape(({int(np.prod(lead, dtype=np.int64))}, {inner}, "
                 f"1))).reshape({tuple(lead)})")
        shape, flags = lead, flags[:len(lead)]
    outer = [j for j, f in enumerate(flags) if f]
    kept = [j for j, f in enumerate(flags) if not f]
    if outer:
        n_outer = int(np.prod([shape[j] for j in outer], dtype=np.int64))
        n_kept = int(np.prod([shape[j] for j in kept], dtype=np.int64))
        value = (f"K.combine3(np.ascontiguousarray(np.transpose({value}, "
                 f"{tuple(outer + kept)})).reshape((1, {n_outer}, {n_kept})), {product})[0]")
    return f"{value}.ravel()[0]" if out.shape == () else f"{value}.reshape({out.shape})"


def _sum_source(args, types, out, axes, keepdims):
    """numpy's order of additions for C-contiguous operands (the interpreter's arrays,
    where it matters): pairwise along a contiguous run of reduced axes, else row by row."""
    t = types[0]
    x = args[0] if t.dtype == out.dtype else (
        f"{np_dtype(out)}({args[0]})" if t.shape == () else f"{args[0]}.astype({np_dtype(out)})")
    if t.shape == ():  # numpy adds the scalar to its 0 (-0.0 becomes 0.0)
        return f"({np_zero(out)} + {x})"
    if out.shape == ():  # every axis: a scalar, with no (1, 1) result array made for it
        return f"K.total({x}, {np_zero(out)})"
    if _block(t.shape, axes) is not None:
        return _over_block("K.sum3", "sum", [x], [t], out, axes, cast=False)
    return _apart(x, t, out, axes, product=False)


register(Primitive(
    name="sum", impl=lambda x, axes, keepdims: x.sum(axis=axes, keepdims=keepdims),
    abstract=_reduction_type("sum", _sum_dtype),
    vjp=lambda ct, xs, out, axes, keepdims: (_spread(ct, xs[0], axes, keepdims),),
    jvp=lambda ts, xs, out, axes, keepdims: bind("sum", ts[0], axes=axes, keepdims=keepdims),
    family="reduction", promote="none", compiled=Source(_sum_source)))


def _mean_source(args, types, out, axes, keepdims):
    """numpy's mean: the sum in the result's dtype, then divided by the count."""
    t = types[0]
    count = int(np.prod([t.shape[a] for a in axes], dtype=np.int64)) if t.shape else 1
    total = _sum_source(args, types, out, axes, keepdims)
    return f"({total} / {np_dtype(out)}({count}))"


register(Primitive(
    name="mean", impl=lambda x, axes, keepdims: np.mean(x, axis=axes, keepdims=keepdims),
    abstract=_reduction_type("mean", _mean_dtype),
    vjp=lambda ct, xs, out, axes, keepdims: (
        _spread(ct, xs[0], axes, keepdims) / float(_count(xs[0].shape, axes)),),
    jvp=lambda ts, xs, out, axes, keepdims: bind("mean", ts[0], axes=axes, keepdims=keepdims),
    family="reduction", promote="none", compiled=Source(_mean_source)))


def _reduced(args, types, out, axes, keepdims, whole: str, along: str) -> str:
    """A reduction over `axes`: `whole` for every axis (a scalar), else `along` applied
    one axis at a time from the last, then the result reshaped to `out` (keepdims)."""
    x, t = args[0], types[0]
    if t.shape == ():
        return x
    if not axes:  # numpy reduces over no axis into a new array, never the input itself
        return f"{x}.copy()"
    axes = tuple(sorted(a % t.ndim for a in axes))
    if len(axes) == t.ndim:
        value = whole.format(x)
    else:
        value = x
        for a in reversed(axes):
            value = along.format(value, a)
    if out.shape == () or (not keepdims and len(axes) != t.ndim):
        return value
    return f"K.reshaped({value}, {out.shape})"


def _amax_source(args, types, out, axes, keepdims):
    return _reduced(args, types, out, axes, keepdims, "np.max({0})",
                    "K.extreme_along({0}, {1}, True)")


def _amin_source(args, types, out, axes, keepdims):
    return _reduced(args, types, out, axes, keepdims, "np.min({0})",
                    "K.extreme_along({0}, {1}, False)")


_extreme("amax", np.max, _amax_source)
_extreme("amin", np.min, _amin_source)


def _prod_partials(x, out, axes, keepdims):
    """d prod / d x_i = product of the other entries, exact when some entries are zero."""
    zero = x == 0.0
    nonzero_x = bind("where", zero, 1.0, x)
    prod_nonzero = bind("prod", nonzero_x, axes=axes, keepdims=True)
    zeros = bind("sum", mask_like(zero, x), axes=axes, keepdims=True)
    no_zero = prod_nonzero / nonzero_x
    one_zero_here = prod_nonzero * mask_like(bind("logical_and", zero, zeros == 1.0), x)
    return bind("where", zeros == 0.0, no_zero, one_zero_here)


def _prod_source(args, types, out, axes, keepdims):
    """numpy multiplies in order, from 1: over any axes, the entries in C order."""
    t = types[0]
    if _block(t.shape, axes) is not None or t.shape == ():
        return _over_block("K.combine3", "prod", args, types, out, axes, extra=", True")
    x = args[0] if t.dtype == out.dtype else f"{args[0]}.astype({np_dtype(out)})"
    return _apart(x, t, out, axes, product=True)


register(Primitive(
    name="prod", impl=lambda x, axes, keepdims: np.prod(x, axis=axes, keepdims=keepdims),
    abstract=_reduction_type("prod", _sum_dtype),
    vjp=lambda ct, xs, out, axes, keepdims: (
        _spread(ct, xs[0], axes, keepdims) * _prod_partials(xs[0], out, axes, keepdims),),
    jvp=lambda ts, xs, out, axes, keepdims: bind(
        "sum", ts[0] * _prod_partials(xs[0], out, axes, keepdims), axes=axes,
        keepdims=keepdims),
    compiled=Source(_prod_source),
    family="reduction", promote="none", notes="exact with zeros: the product of the other entries"))


def _logsumexp_impl(x, axes, keepdims):
    m = np.max(x, axis=axes, keepdims=True)
    m = np.where(np.isfinite(m), m, np.zeros((), x.dtype))
    s = np.log(np.sum(np.exp(x - m), axis=axes, keepdims=True)) + m
    return s if keepdims else np.squeeze(s, axis=axes)


def shifted_by_max(x: Any, axes: tuple[int, ...]) -> Any:
    """x - max(x) over `axes`, with the maximum behind a stop_gradient.

    softmax, log_softmax and logsumexp are invariant to the shift, so it is a constant to
    their derivatives. Shifting by the maximum itself (exact in any dtype, unlike a rounded
    logsumexp) keeps exp of the result in [0, 1] and accurate to x's own dtype."""
    top = bind("stop_gradient", bind("amax", x, axes=axes, keepdims=True))
    return bind("sub", x, top)


def softmax_of(x: Any, axes: tuple[int, ...]) -> Any:
    """exp(x) / sum(exp(x)) over `axes`, from the shifted x: the gradient of logsumexp,
    and `cnp.softmax`."""
    e = bind("exp", shifted_by_max(x, axes))
    return e / bind("sum", e, axes=axes, keepdims=True)


def _logsumexp_source(args, types, out, axes, keepdims):
    return _over_block("K.logsumexp3", "logsumexp", args, types, out, axes)


register(Primitive(
    name="logsumexp", impl=_logsumexp_impl,
    abstract=_reduction_type("logsumexp", lambda d: d, identity=False),
    vjp=lambda ct, xs, out, axes, keepdims: (
        _spread(ct, xs[0], axes, keepdims) * softmax_of(xs[0], axes),),
    jvp=lambda ts, xs, out, axes, keepdims: bind(
        "sum", ts[0] * softmax_of(xs[0], axes), axes=axes, keepdims=keepdims),
    compiled=Source(_logsumexp_source), family="reduction", promote="float", real_only=True,
    notes="shifted by the maximum: finite for inputs of any size"))


# -- Statistics family (issue 13): cumulative sums and products, sorting, searching. --------


def _along_spec(shape: tuple[int, ...], axis: int) -> tuple:
    """An index spec picking, at every position of `shape`, the entry of the traced index
    ('$', of `shape` too) along `axis`: numpy's take_along_axis as the `index` primitive,
    the other axes indexed by constant open grids, so its VJP is `scatter_add`'s."""
    return tuple("$" if d == axis else
                 np.arange(n, dtype=np.int64).reshape([n if e == d else 1
                                                       for e in range(len(shape))])
                 for d, n in enumerate(shape))


def _axis_type(op: str, out_dtype: Callable[[np.dtype], np.dtype]) -> Callable[..., TensorType]:
    def rule(types: list[TensorType], axis: int) -> TensorType:
        axis_param(op, "axis", axis, types[0])
        return TensorType(types[0].shape, np.dtype(out_dtype(types[0].dtype)))

    return rule


def _cumsum_type(types: list[TensorType], axis: int, reverse: bool) -> TensorType:
    bool_param("cumsum", "reverse", reverse)
    return _axis_type("cumsum", _sum_dtype)(types, axis=axis)


def _cumsum_impl(x, axis, reverse):
    if not reverse:
        return np.cumsum(x, axis=axis, dtype=_sum_dtype(x.dtype))
    return np.flip(np.cumsum(np.flip(x, axis), axis=axis, dtype=_sum_dtype(x.dtype)), axis)


def _cumulate(args, types, out, axis, reverse, product):
    t = types[0]
    x = args[0] if t.dtype == out.dtype else f"{args[0]}.astype({np_dtype(out)})"
    if t.shape == ():
        return x if t.dtype == out.dtype else f"{np_dtype(out)}({args[0]})"
    axis %= t.ndim
    block = (int(np.prod(t.shape[:axis], dtype=np.int64)), t.shape[axis],
             int(np.prod(t.shape[axis + 1:], dtype=np.int64)))
    return (f"K.cumulate3(np.ascontiguousarray({x}).reshape({block}), {reverse}, "
            f"{product}).reshape({out.shape})")


def _cumsum_source(args, types, out, axis, reverse):
    return _cumulate(args, types, out, axis, reverse, False)


register(Primitive(
    name="cumsum", impl=_cumsum_impl, abstract=_cumsum_type,
    # The transpose of a running sum is the running sum from the other end.
    vjp=lambda ct, xs, out, axis, reverse: (
        bind("cumsum", ct, axis=axis, reverse=not reverse),),
    jvp=lambda ts, xs, out, axis, reverse: bind("cumsum", ts[0], axis=axis, reverse=reverse),
    compiled=Source(_cumsum_source), family="statistics", promote="none"))


def _cumprod_partials(x, axis):
    """D[..., i, j, ...] = d out_j / d x_i = prod of x_k over k <= j, k != i (0 for j < i),
    with the new axis i inserted before `axis`: a running product of x with entry i set to
    1, so it is exact where x has zeros (as JAX's, which differentiates an associative
    scan) and its own derivative is again a cumprod. O(n^2) along the axis."""
    shape, n = tuple(x.shape), x.shape[axis]
    lead, trail = shape[:axis], shape[axis + 1:]
    grid = (1,) * len(lead) + (n, n) + (1,) * len(trail)
    eye = np.eye(n, dtype=bool).reshape(grid)
    upper = np.triu(np.ones((n, n), dtype=bool)).reshape(grid)
    rows = bind("reshape", x, shape=lead + (1, n) + trail)
    running = bind("cumprod", bind("where", eye, 1.0, rows), axis=axis + 1)
    return bind("where", upper, running, 0.0)


def _cumprod_vjp(ct, xs, out, axis):
    x = xs[0]
    shape = tuple(x.shape)
    cts = bind("reshape", ct, shape=shape[:axis] + (1, shape[axis]) + shape[axis + 1:])
    return (bind("sum", _cumprod_partials(x, axis) * cts, axes=(axis + 1,), keepdims=False),)


def _cumprod_jvp(ts, xs, out, axis):
    x = xs[0]
    shape = tuple(x.shape)
    t = bind("reshape", ts[0], shape=shape[:axis + 1] + (1,) + shape[axis + 1:])
    return bind("sum", _cumprod_partials(x, axis) * t, axes=(axis,), keepdims=False)


def _cumprod_source(args, types, out, axis):
    return _cumulate(args, types, out, axis, False, True)


register(Primitive(
    name="cumprod", impl=lambda x, axis: np.cumprod(x, axis=axis, dtype=_sum_dtype(x.dtype)),
    abstract=_axis_type("cumprod", _sum_dtype), vjp=_cumprod_vjp, jvp=_cumprod_jvp,
    compiled=Source(_cumprod_source), family="statistics", promote="none",
    notes="exact with zeros: d out_j / d x_i is the product of x_k over k <= j, k != i"))


def _sort_vjp(ct, xs, out, axis):
    x = xs[0]
    perm = bind("argsort", x, axis=axis)
    return (bind("scatter_add", ct, perm, spec=_along_spec(tuple(x.shape), axis),
                 shape=tuple(x.shape)),)


def _sort_jvp(ts, xs, out, axis):
    x = xs[0]
    perm = bind("argsort", x, axis=axis)
    return bind("index", ts[0], perm, spec=_along_spec(tuple(x.shape), axis))


def _real_ordering(op: str, t: TensorType) -> None:
    """Refuse a complex ordering (numpy's lexicographic order with its NaN rules has no
    compiled form): it runs in the interpreter."""
    if t.dtype.kind == "c":
        raise Unsupported(f"{op} of complex {t} (compiled: real numbers)")


def _ordering_source(helper: str):
    """sort's or argsort's source: `K.sort3`/`K.argsort3` (a stable merge sort in numpy's
    order) along the middle axis of the (outer, n, inner) reshape."""
    def write(args, types, out, axis):
        t = types[0]
        _real_ordering(helper, t)
        axis %= t.ndim
        block = (int(np.prod(t.shape[:axis], dtype=np.int64)), t.shape[axis],
                 int(np.prod(t.shape[axis + 1:], dtype=np.int64)))
        return (f"K.{helper}3(np.ascontiguousarray({args[0]}).reshape({block}))"
                f".reshape({out.shape})")

    return write


def _searchsorted_source(args, types, out, side):
    _real_ordering("searchsorted", types[0])
    right = side == "right"
    if types[1].shape == ():
        return f"K.searchsorted1({args[0]}, {args[1]}, {right})"
    return (f"K.searchsorted({args[0]}, np.ascontiguousarray({args[1]}).reshape(-1), "
            f"{right}).reshape({out.shape})")


register(Primitive(
    name="sort", impl=lambda x, axis: np.sort(x, axis=axis, kind="stable"),
    abstract=_axis_type("sort", lambda d: d), vjp=_sort_vjp, jvp=_sort_jvp,
    family="statistics", promote="none", compiled=Source(_ordering_source("sort")),
    notes="a stable sort (NaN last): each output takes the gradient of the input it came "
          "from, so of tied entries the earlier one goes first, as JAX's"))
register(Primitive(
    name="argsort", impl=lambda x, axis: np.argsort(x, axis=axis, kind="stable"),
    abstract=_axis_type("argsort", lambda d: np.dtype(np.int64)),
    family="statistics", promote="none", nondiff=True,
    compiled=Source(_ordering_source("argsort")),
    notes="a stable sort's permutation (ties keep their order, NaN last): no derivative"))


def _searchsorted_type(types: list[TensorType], side: str) -> TensorType:
    if side not in ("left", "right"):
        raise LoweringError(f"searchsorted: parameter side must be 'left' or 'right', got "
                            f"{side!r}")
    if types[0].ndim != 1:
        raise LoweringError(f"searchsorted: the sorted array must be 1-D, got {types[0]}")
    return TensorType(types[1].shape, np.dtype(np.int64))


register(Primitive(
    name="searchsorted",
    impl=lambda a, v, side: np.asarray(np.searchsorted(a, v, side=side), dtype=np.int64),
    abstract=_searchsorted_type, family="statistics", nondiff=True,
    compiled=Source(_searchsorted_source),
    notes="insertion indices into a sorted 1-D array (for an unsorted one, numpy's "
          "answer and the compiled one may differ): no derivative"))


def _arg_type(op: str) -> Callable[..., TensorType]:
    def rule(types: list[TensorType], axis: int | None) -> TensorType:
        t = types[0]
        if axis is None:  # over the flattened array
            _nonempty_reduction(op, TensorType((t.size,), t.dtype), (0,))
            return TensorType((), np.dtype(np.int64))
        axis = axis_param(op, "axis", axis, t)
        _nonempty_reduction(op, t, (axis,))
        return TensorType(reduced_shape(t.shape, (axis,), False), np.dtype(np.int64))

    return rule


def _arg_source(largest: bool):
    """argmax's source (`largest`) or argmin's: `K.arg3` along the axis, of the flattened
    array for axis=None (one run over every entry, in C order)."""
    def write(args, types, out, axis):
        t = types[0]
        axes = tuple(range(t.ndim)) if axis is None else (axis,)
        block = (1, max(1, int(np.prod(t.shape, dtype=np.int64))), 1) if axis is None \
            else _block(t.shape, axes)
        x3 = (f"np.full((1, 1, 1), {args[0]})" if t.shape == ()
              else f"np.ascontiguousarray({args[0]}).reshape({block})")
        value = f"K.arg3({x3}, {largest})"
        return f"{value}[0, 0]" if out.shape == () else f"{value}.reshape({out.shape})"

    return write


for _name, _fn, _largest in [("argmax", np.argmax, True), ("argmin", np.argmin, False)]:
    register(Primitive(name=_name, impl=(lambda f: lambda x, axis: f(x, axis=axis))(_fn),
                       abstract=_arg_type(_name),
                       family="reduction", promote="none", nondiff=True, real_only=True,
                       compiled=Source(_arg_source(_largest)),
                       notes="integer result: no derivative"))

