"""`cfgrad.numpy`'s array manipulation: joining and splitting, flipping and rotating,
padding, repeating, gathering (`take`, `choose`, `select`, …), diagonals and triangles,
index grids, and the axis shuffles (`moveaxis`, `atleast_2d`, …).

Every function here is a composition of the shape and indexing primitives (`index` with
a static spec, `reshape`, `transpose`, `broadcast_to`, `concatenate`, `scatter_add`,
`where`), whose rules give the derivative, so no new entry of the derivative table is
needed. A rearrangement whose structure numpy computes in one call (`insert`, the modes
of `pad`, `repeat`) is found by applying numpy's own function to an array of positions
(an `arange`) and gathering the input with the result, once: one node whatever the
size, and numpy's semantics by construction. Sizes, split points, inserted positions
and pad widths set the result's shape, so they must be concrete; values (and, where JAX
traces them, integer indices) may be traced. JAX's semantics are followed where it
differs from numpy (out-of-bounds `take`, `unravel_index`; docs/api.md lists them).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as _np

from ..errors import ArgumentValueError, TracerBoolError
from ..ir import broadcast_shapes
from ..primitives import bind
from ..trace_context import current_loc, is_traced
from .core import (
    _array,
    _axes,
    _axis,
    _concrete_length,
    _dtype,
    _fill_value,
    _joined,
    _ndim,
    _shape,
    _to_end,
    _weakly_typed,
    amax,
    amin,
    astype,
    broadcast_to,
    clip,
    concatenate,
    floor_divide,
    linspace,
    mean,
    mod,
    public_names,
    ravel,
    reshape,
    rint,
    stack,
    transpose,
    where,
)


def _along(axis: int, item: Any) -> tuple:
    """An index spec applying `item` to axis `axis` and taking every other axis whole."""
    return (slice(None),) * axis + (item,)


def _static(function: str, what: str, value: Any) -> Any:
    """A concrete value for an argument that sets the result's shape or structure."""
    _concrete_length(function, what, value)
    return value


def _needs_concrete(function: str, what: str, advice: str) -> TracerBoolError:
    loc = current_loc()
    return TracerBoolError(f"cnp.{function}: {what} is traced{f' at {loc}' if loc else ''}, "
                           f"but {advice}")


def _gather(a: Any, positions: _np.ndarray) -> Any:
    """`ravel(a)[positions]`: `a` rearranged by flat positions computed with numpy."""
    return bind("index", ravel(a), spec=(positions.astype(_np.int64),))


def _positions(shape: tuple[int, ...]) -> _np.ndarray:
    return _np.arange(int(_np.prod(shape, dtype=_np.int64)), dtype=_np.int64).reshape(shape)


# -- axes ------------------------------------------------------------------------------


def moveaxis(a: Any, source: Any, destination: Any) -> Any:
    """numpy's moveaxis: the other axes keep their order."""
    n = _ndim(a)
    sources = [_axis("moveaxis", a, s) for s in _np.atleast_1d(source)]
    destinations = [_axis("moveaxis", a, d) for d in _np.atleast_1d(destination)]
    if len(sources) != len(destinations):
        raise ArgumentValueError("cnp.moveaxis: source and destination must have the same "
                                 f"number of elements, got {source!r} and {destination!r}")
    if len(set(sources)) != len(sources) or len(set(destinations)) != len(destinations):
        raise ArgumentValueError(f"cnp.moveaxis: repeated axis in {source!r} or "
                                 f"{destination!r}")
    order = [i for i in range(n) if i not in sources]
    for dest, src in sorted(zip(destinations, sources)):
        order.insert(dest, src)
    return a if order == list(range(n)) else transpose(a, order)


def permute_dims(a: Any, axes: Sequence[int] | None = None) -> Any:
    """The array API's name of `transpose`."""
    return transpose(a, axes)


def matrix_transpose(x: Any) -> Any:
    """Swap the last two axes (a stack of matrices transposed)."""
    n = _ndim(x)
    if n < 2:
        raise ArgumentValueError(f"cnp.matrix_transpose: the input must have at least 2 "
                                 f"dimensions, got {n}")
    return transpose(x, tuple(range(n - 2)) + (n - 1, n - 2))


def _at_least(arys: tuple, ndim: int, place: Any) -> Any:
    """Each array reshaped by `place(shape)` if it has fewer than `ndim` dimensions: the
    array for one argument, a list for several (JAX's; numpy gives a tuple)."""
    out = []
    for a in arys:
        a = _array(a)
        shape = _shape(a)
        out.append(a if len(shape) >= ndim else reshape(a, place(shape)))
    return out[0] if len(out) == 1 else out


def atleast_1d(*arys: Any) -> Any:
    return _at_least(arys, 1, lambda s: (1,))


def atleast_2d(*arys: Any) -> Any:
    """(n,) becomes (1, n)."""
    return _at_least(arys, 2, lambda s: (1,) * (2 - len(s)) + s)


def atleast_3d(*arys: Any) -> Any:
    """(n,) becomes (1, n, 1) and (m, n) becomes (m, n, 1), as numpy."""
    return _at_least(arys, 3, lambda s: {0: (1, 1, 1), 1: (1,) + s + (1,), 2: s + (1,)}[len(s)])


def broadcast_arrays(*args: Any) -> list[Any]:
    """The arguments broadcast to their common shape (a list, as JAX's)."""
    arrays = [_array(a) for a in args]
    shape = broadcast_shapes(*(_shape(a) for a in arrays))
    return [a if _shape(a) == shape else broadcast_to(a, shape) for a in arrays]


# -- joining ---------------------------------------------------------------------------


def concat(arrays: Sequence[Any], /, *, axis: int | None = 0) -> Any:
    """The array API's name of `concatenate`."""
    return concatenate(arrays, axis=axis)


def _arrays(function: str, arrays: Sequence[Any]) -> list[Any]:
    return [_array(a) for a in _weakly_typed(*_joined(function, arrays))]


def hstack(tup: Sequence[Any]) -> Any:
    arrays = [atleast_1d(a) for a in _arrays("hstack", tup)]
    return concatenate(arrays, axis=0 if _ndim(arrays[0]) == 1 else 1)


def vstack(tup: Sequence[Any]) -> Any:
    return concatenate([atleast_2d(a) for a in _arrays("vstack", tup)], axis=0)


def dstack(tup: Sequence[Any]) -> Any:
    return concatenate([atleast_3d(a) for a in _arrays("dstack", tup)], axis=2)


def column_stack(tup: Sequence[Any]) -> Any:
    """1-D arrays become the columns of a 2-D array; 2-D arrays are joined as they are."""
    columns = [reshape(a, (-1, 1)) if _ndim(a) < 2 else a
               for a in _arrays("column_stack", tup)]
    return concatenate(columns, axis=1)


def append(arr: Any, values: Any, axis: int | None = None) -> Any:
    """`values` joined after `arr` (both flattened when `axis` is None); a Python number
    takes the other's dtype where it can, as in JAX (`append(x32, 1.0)` is float32)."""
    arr, values = _weakly_typed(arr, values)
    if axis is None:
        return concatenate([ravel(_array(arr)), ravel(_array(values))], axis=0)
    return concatenate([_array(arr), _array(values)], axis=axis)


def _block_depth(arrays: Any, where_: str) -> int:
    if isinstance(arrays, tuple):
        raise ArgumentValueError(f"cnp.block: {where_} is a tuple; only lists can be used "
                                 "to arrange blocks")
    if not isinstance(arrays, list):
        return 0
    if not arrays:
        raise ArgumentValueError(f"cnp.block: {where_} is an empty list")
    depths = {_block_depth(a, f"{where_}[{i}]") for i, a in enumerate(arrays)}
    if len(depths) > 1:
        raise ArgumentValueError(f"cnp.block: the lists in {where_} are nested to different "
                                 f"depths ({sorted(depths)})")
    return 1 + depths.pop()


def _block_leaves(arrays: Any) -> list[Any]:
    if isinstance(arrays, list):
        return [leaf for a in arrays for leaf in _block_leaves(a)]
    return [arrays]


def _block_rebuilt(arrays: Any, leaves: Any) -> Any:
    """The nested lists `arrays` with their leaves taken in order from `leaves`."""
    if isinstance(arrays, list):
        return [_block_rebuilt(a, leaves) for a in arrays]
    return next(leaves)


def block(arrays: Any) -> Any:
    """numpy's block: the innermost lists are joined along the last axis, the next ones
    along the one before, every block first given at least as many dimensions as the
    lists are deep (leading ones)."""
    depth = _block_depth(arrays, "arrays")
    leaves = iter(_weakly_typed(*_block_leaves(arrays)))
    arrays = _block_rebuilt(arrays, leaves)
    ndim = max([depth] + [_ndim(leaf) for leaf in _block_leaves(arrays)])

    def assemble(item: Any, level: int) -> Any:
        if isinstance(item, list):
            return concatenate([assemble(a, level + 1) for a in item], axis=level - depth)
        a = _array(item)
        return reshape(a, (1,) * (ndim - _ndim(a)) + _shape(a))

    return assemble(arrays, 0)


# -- splitting ---------------------------------------------------------------------------


def _split(function: str, ary: Any, indices_or_sections: Any, axis: int,
           equal: bool) -> list[Any]:
    ary = _array(ary)
    axis = _axis(function, ary, axis)
    sections = _static(function, "indices_or_sections", indices_or_sections)
    n = _shape(ary)[axis]
    if _np.ndim(sections) == 0:
        count = operator.index(sections)
        if count <= 0:
            raise ArgumentValueError(f"cnp.{function}: the number of sections must be "
                                     f"positive, got {count}")
        if equal and n % count:
            raise ArgumentValueError(f"cnp.{function}: an axis of length {n} does not split "
                                     f"into {count} equal sections; use cnp.array_split")
        each, extra = divmod(n, count)
        bounds = _np.cumsum([0] + [each + 1] * extra + [each] * (count - extra))
    else:
        # pieces between the indices, read as numpy's `ary[lo:hi]` reads them
        bounds = [0, *(operator.index(i) for i in sections), n]
    return [bind("index", ary, spec=_along(axis, slice(int(lo), int(hi))))
            for lo, hi in zip(bounds[:-1], bounds[1:])]


def split(ary: Any, indices_or_sections: Any, axis: int = 0) -> list[Any]:
    """Equal sections (an error if the axis does not divide) or pieces between indices."""
    return _split("split", ary, indices_or_sections, axis, equal=True)


def array_split(ary: Any, indices_or_sections: Any, axis: int = 0) -> list[Any]:
    """As split; `k` sections of an axis of length n need not be equal (the first n % k
    are one longer)."""
    return _split("array_split", ary, indices_or_sections, axis, equal=False)


def hsplit(ary: Any, indices_or_sections: Any) -> list[Any]:
    if _ndim(ary) == 0:
        raise ArgumentValueError("cnp.hsplit only works on arrays of 1 or more dimensions")
    return split(ary, indices_or_sections, axis=1 if _ndim(ary) > 1 else 0)


def vsplit(ary: Any, indices_or_sections: Any) -> list[Any]:
    if _ndim(ary) < 2:
        raise ArgumentValueError("cnp.vsplit only works on arrays of 2 or more dimensions")
    return split(ary, indices_or_sections, axis=0)


def unstack(x: Any, /, *, axis: int = 0) -> tuple[Any, ...]:
    """The slices of `x` along `axis` (a tuple, as numpy's and JAX's)."""
    x = _array(x)
    axis = _axis("unstack", x, axis)
    return tuple(bind("index", x, spec=_along(axis, i)) for i in range(_shape(x)[axis]))


# -- flipping, rotating, repeating, padding ------------------------------------------------


def flip(m: Any, axis: Any = None) -> Any:
    """Reverse `m` along `axis` (every axis when None): one strided slice."""
    m = _array(m)
    axes = _axes(m, axis, "flip")
    if not axes:
        return m
    return bind("index", m, spec=tuple(slice(None, None, -1) if i in axes else slice(None)
                                       for i in range(_ndim(m))))


def fliplr(m: Any) -> Any:
    if _ndim(m) < 2:
        raise ArgumentValueError("cnp.fliplr: the input must have at least 2 dimensions")
    return flip(m, 1)


def flipud(m: Any) -> Any:
    if _ndim(m) < 1:
        raise ArgumentValueError("cnp.flipud: the input must have at least 1 dimension")
    return flip(m, 0)


def rot90(m: Any, k: int = 1, axes: tuple[int, int] = (0, 1)) -> Any:
    """Rotate by 90 degrees `k` times in the plane of `axes`, from the first towards the
    second (numpy's direction)."""
    m = _array(m)
    if len(axes) != 2:
        raise ArgumentValueError(f"cnp.rot90: axes must name two axes, got {axes!r}")
    a0, a1 = (_axis("rot90", m, a) for a in axes)
    if a0 == a1:
        raise ArgumentValueError(f"cnp.rot90: axes must be different, got {axes!r}")
    k = operator.index(k) % 4
    if k == 0:
        return m
    if k == 2:
        return flip(m, (a0, a1))
    perm = list(range(_ndim(m)))
    perm[a0], perm[a1] = perm[a1], perm[a0]
    if k == 1:
        return transpose(flip(m, a1), perm)
    return flip(transpose(m, perm), a1)


def repeat(a: Any, repeats: Any, axis: int | None = None, *,
           total_repeat_length: int | None = None) -> Any:
    """Each element (or slice along `axis`) repeated. Concrete `repeats` gather once. As
    JAX: with `total_repeat_length` the result has that length, cut short or padded with
    the last slice, and only then may `repeats` be traced."""
    a = _array(a)
    if axis is None:
        a, axis = ravel(a), 0
    axis = _axis("repeat", a, axis)
    n = _shape(a)[axis]
    if is_traced(repeats):
        if total_repeat_length is None:
            raise _needs_concrete("repeat", "repeats", "the length of the result depends on "
                                  "it: pass total_repeat_length= (as in JAX) or concrete "
                                  "repeats")
        total = operator.index(_static("repeat", "total_repeat_length", total_repeat_length))
        counts = broadcast_to(astype(repeats, _np.int64), (n,))
        ends = bind("matmul", counts, _np.triu(_np.ones((n, n), _np.int64)))
        starts = _np.arange(total, dtype=_np.int64).reshape(total, 1)
        passed = bind("sum", astype(starts >= ends, _np.int64), axes=(1,), keepdims=False)
        return bind("index", a, clip(passed, 0, n - 1), spec=_along(axis, "$"))
    counts = _np.broadcast_to(_np.asarray(repeats, dtype=_np.int64), (n,))
    if (counts < 0).any():
        raise ArgumentValueError(f"cnp.repeat: repeats must be non-negative, got {repeats!r}")
    chosen = _np.repeat(_np.arange(n, dtype=_np.int64), counts)
    if total_repeat_length is not None:
        total = operator.index(total_repeat_length)
        chosen = _np.concatenate([chosen, _np.full(max(total - len(chosen), 0), n - 1)])
        chosen = chosen[:total]
    return bind("index", a, spec=_along(axis, chosen))


def tile(A: Any, reps: Any) -> Any:
    """`A` repeated `reps` times along each axis: broadcast then reshape, no gather."""
    A = _array(A)
    reps = tuple(operator.index(r) for r in _np.atleast_1d(_static("tile", "reps", reps)))
    ndim = max(len(reps), _ndim(A))
    shape = (1,) * (ndim - _ndim(A)) + _shape(A)
    reps = (1,) * (ndim - len(reps)) + reps
    if all(r == 1 for r in reps):
        return reshape(A, shape)
    spread = tuple(d for pair in zip((1,) * ndim, shape) for d in pair)
    tiled = broadcast_to(reshape(A, spread),
                         tuple(d for pair in zip(reps, shape) for d in pair))
    return reshape(tiled, tuple(r * d for r, d in zip(reps, shape)))



def _pad_widths(array: Any, pad_width: Any) -> _np.ndarray:
    widths = _np.asarray(_static("pad", "pad_width", pad_width))
    if widths.dtype.kind not in "iu":
        raise ArgumentValueError(f"cnp.pad: pad_width must be integers, got {pad_width!r}")
    try:
        widths = _np.broadcast_to(widths, (_ndim(array), 2))
    except ValueError:
        raise ArgumentValueError(f"cnp.pad: pad_width {pad_width!r} does not fit an array of "
                                 f"dimension {_ndim(array)}") from None
    if (widths < 0).any():
        raise ArgumentValueError(f"cnp.pad: pad_width must be non-negative, got {pad_width!r}")
    return widths


def _pad_constant(array: Any, widths: _np.ndarray, constant_values: Any) -> Any:
    """Constant padding, one axis after the other as numpy does (the corners take the
    later axis's values); traced constants are differentiable."""
    values = _array(constant_values)
    if _ndim(values) not in (0, 1, 2):
        raise ArgumentValueError("cnp.pad: constant_values must be a scalar or pairs, got "
                                 f"shape {_shape(values)}")
    pairs = values if _ndim(values) == 0 else broadcast_to(values, (_ndim(array), 2))
    dtype = _dtype(array)
    for axis, (before, after) in enumerate(widths):
        if not before and not after:
            continue
        pieces = []
        for side, width in enumerate((before, after)):
            shape = list(_shape(array))
            shape[axis] = int(width)
            value = pairs if _ndim(values) == 0 else bind("index", pairs, spec=(axis, side))
            pieces.append(broadcast_to(astype(value, dtype), tuple(shape)))
        array = concatenate([pieces[0], array, pieces[1]], axis=axis)
    return array


_PAD_OPTIONS = {"constant": {"constant_values"}, "empty": set(), "edge": set(), "wrap": set(),
                "reflect": {"reflect_type"}, "symmetric": {"reflect_type"},
                "linear_ramp": {"end_values"}, "maximum": {"stat_length"},
                "minimum": {"stat_length"}, "mean": {"stat_length"}}
_STATISTICS = {"maximum": amax, "minimum": amin, "mean": mean}


def _stat_lengths(ndim: int, stat_length: Any) -> list[list[int | None]]:
    if stat_length is None:
        return [[None, None]] * ndim
    lengths = _np.asarray(_static("pad", "stat_length", stat_length))
    if lengths.dtype.kind not in "iu" or (lengths < 0).any():
        raise ArgumentValueError(f"cnp.pad: stat_length must be non-negative integers, got "
                                 f"{stat_length!r}")
    return _np.broadcast_to(lengths, (ndim, 2)).tolist()


def _pad_side(mode: str, array: Any, axis: int, side: int, width: int, option: Any) -> Any:
    """The pad of `array` before (side 0) or after (side 1) `axis`, `width` long, in a
    computed mode: a ramp from the end value to the edge (numpy's `linspace`, floored for
    integers), or a statistic of the `option` (stat_length) entries nearest that side
    (rounded half to even for integers, as numpy)."""
    n, dtype = _shape(array)[axis], _dtype(array)
    if mode == "linear_ramp":
        edge = bind("index", array, spec=_along(axis, 0 if side == 0 else n - 1))
        ramp = moveaxis(linspace(option, edge, width, endpoint=False, dtype=dtype), 0, axis)
        return flip(ramp, axis) if side else ramp
    length = n if option is None else min(option, n)
    if length == 0:
        raise ArgumentValueError(f"cnp.pad: stat_length of 0 (axis {axis}) yields no value "
                                 "for padding")
    window = slice(0, length) if side == 0 else slice(n - length, n)
    value = _STATISTICS[mode](bind("index", array, spec=_along(axis, window)), axis,
                              keepdims=True)
    if dtype.kind in "iu":
        value = rint(value)
    shape = list(_shape(array))
    shape[axis] = width
    return broadcast_to(astype(value, dtype), tuple(shape))


def pad(array: Any, pad_width: Any, mode: str = "constant", **kwargs: Any) -> Any:
    """numpy's pad, in every mode of JAX's but 'median' and a callable. Axis after axis as
    numpy (each axis's pads span the pads of the axes before it). 'constant' joins
    constant blocks (constant_values may be traced, and differentiate); 'empty' pads
    with zeros (JAX's choice); 'edge', 'reflect', 'symmetric' and 'wrap' gather along
    each padded axis with the positions numpy's pad gives an `arange`, and the odd
    reflections, which are not gathers, are the linear maps numpy's pad gives the
    identity matrix; 'linear_ramp', 'maximum', 'minimum' and 'mean' compute each pad from
    the array (`end_values` may be traced)."""
    array = _array(array)
    widths = _pad_widths(array, pad_width)
    if mode not in _PAD_OPTIONS:
        raise ArgumentValueError(f"cnp.pad: mode {mode!r} is not supported; use one of "
                                 f"{', '.join(_PAD_OPTIONS)}")
    unknown = set(kwargs) - _PAD_OPTIONS[mode]
    if unknown:
        raise ArgumentValueError(f"cnp.pad: mode {mode!r} takes no {', '.join(sorted(unknown))}")
    if mode in ("constant", "empty"):
        return _pad_constant(array, widths, kwargs.get("constant_values", 0))
    odd = kwargs.get("reflect_type", "even")
    if odd not in ("even", "odd"):
        raise ArgumentValueError(f"cnp.pad: reflect_type must be 'even' or 'odd', got {odd!r}")
    ndim = _ndim(array)
    if mode == "linear_ramp":
        ends = _array(kwargs.get("end_values", 0))
        options: Any = ends if _ndim(ends) == 0 else broadcast_to(ends, (ndim, 2))
    else:
        options = _stat_lengths(ndim, kwargs.get("stat_length"))
    for axis, (before, after) in enumerate(widths):
        if not before and not after:
            continue
        n = _shape(array)[axis]
        if n == 0:
            raise ArgumentValueError(f"cnp.pad: cannot pad an empty axis ({axis}) in mode "
                                     f"{mode!r}")
        if mode in ("linear_ramp", *_STATISTICS):
            sides = []
            for side, width in enumerate((int(before), int(after))):
                option = (options if _ndim(options) == 0 else bind(
                    "index", options, spec=(axis, side))) if mode == "linear_ramp" \
                    else options[axis][side]
                sides.append(_pad_side(mode, array, axis, side, width, option))
            array = concatenate([sides[0], array, sides[1]], axis=axis)
        elif odd == "odd":
            lift = _np.pad(_np.eye(n), ((before, after), (0, 0)), mode, reflect_type="odd")
            moved = moveaxis(array, axis, -1)
            array = moveaxis(bind("matmul", moved, lift.T.astype(_dtype(array))), -1, axis)
        else:
            chosen = _np.pad(_np.arange(n, dtype=_np.int64), (before, after), mode)
            array = bind("index", array, spec=_along(axis, chosen))
    return array


# -- gathering ---------------------------------------------------------------------------


def _index_in_bounds(function: str, indices: Any, n: int, mode: str | None) -> tuple:
    """(safe indices, validity mask or None): `indices` into an axis of length n made safe
    by JAX's `mode` ('fill' by default: out of [-n, n) is invalid and reads index 0;
    'clip'; 'wrap'; and, for concrete indices only, numpy's 'raise')."""
    if not is_traced(indices):
        indices = _np.asarray(indices)
    if _dtype(indices).kind not in "iu":
        raise ArgumentValueError(f"cnp.{function}: indices must be integers, got "
                                 f"{_dtype(indices)}")
    mode = "fill" if mode is None else mode
    if mode == "raise":
        if is_traced(indices):
            raise _needs_concrete(function, "indices", "mode='raise' checks them when the "
                                  "function is traced: use mode='fill', 'clip' or 'wrap' "
                                  "(as in JAX)")
        if ((indices < -n) | (indices >= n)).any():
            raise IndexError(f"cnp.{function}: an index is out of bounds for an axis of "
                             f"length {n}")
        return indices % max(n, 1), None
    if mode == "wrap":
        return mod(indices, n), None
    if mode == "clip":
        return clip(indices, 0, n - 1), None
    if mode != "fill":
        raise ArgumentValueError(f"cnp.{function}: mode must be 'fill', 'clip', 'wrap' or "
                                 f"'raise', got {mode!r}")
    valid = (indices >= -n) & (indices < n)
    if not is_traced(valid) and valid.all():
        return indices % max(n, 1), None
    return where(valid, mod(indices, max(n, 1)), 0), valid



def _with_fill(result: Any, valid: Any, fill_value: Any, shape: tuple[int, ...]) -> Any:
    if valid is None:
        return result
    fill = _fill_value(_dtype(result), fill_value)
    return where(reshape(valid, shape), result, _np.asarray(fill, _dtype(result)))


def _dynamic(spec: list[Any], dynamic: list[Any], item: Any) -> None:
    if is_traced(item):
        spec.append("$")
        dynamic.append(item)
    else:
        spec.append(_np.asarray(item, _np.int64))


def take(a: Any, indices: Any, axis: int | None = None, mode: str | None = None,
         fill_value: Any = None) -> Any:
    """Elements of `a` at `indices` along `axis` (of the flattened array when None). As
    JAX: out-of-bounds indices (outside [-n, n)) give `fill_value` (NaN, the most
    negative integer, …) in the default mode 'fill'; 'clip' and 'wrap' as numpy."""
    a = _array(a)
    if axis is None:
        a, axis = ravel(a), 0
    axis = _axis("take", a, axis)
    shape = _shape(a)
    safe, valid = _index_in_bounds("take", indices, shape[axis], mode)
    spec: list[Any] = [slice(None)] * axis
    dynamic: list[Any] = []
    _dynamic(spec, dynamic, safe)
    result = bind("index", a, *dynamic, spec=tuple(spec))
    return _with_fill(result, valid, fill_value,
                      _shape(safe) + (1,) * (len(shape) - axis - 1))


def take_along_axis(arr: Any, indices: Any, axis: int | None, mode: str | None = None,
                    fill_value: Any = None) -> Any:
    """`arr` gathered along `axis` at `indices`, which has `arr`'s number of dimensions and
    broadcasts against it off that axis. Out-of-bounds indices as in `take` (JAX)."""
    arr = _array(arr)
    if axis is None:
        if _ndim(indices) != 1:
            raise ArgumentValueError("cnp.take_along_axis: indices must be 1-D when axis is "
                                     f"None, got shape {_shape(indices)}")
        arr, axis = ravel(arr), 0
    axis = _axis("take_along_axis", arr, axis)
    shape = _shape(arr)
    if _ndim(indices) != len(shape):
        raise ArgumentValueError(f"cnp.take_along_axis: indices have {_ndim(indices)} "
                                 f"dimensions, the array {len(shape)}")
    safe, valid = _index_in_bounds("take_along_axis", indices, shape[axis], mode)
    spec: list[Any] = []
    dynamic: list[Any] = []
    for i, d in enumerate(shape):
        if i == axis:
            _dynamic(spec, dynamic, safe)
        else:
            spec.append(_np.arange(d, dtype=_np.int64).reshape(
                (1,) * i + (d,) + (1,) * (len(shape) - i - 1)))
    result = bind("index", arr, *dynamic, spec=tuple(spec))
    return _with_fill(result, valid, fill_value, _shape(safe))


def choose(a: Any, choices: Any, out: None = None, mode: str = "raise") -> Any:
    """Each element from the choice `a` names there (all broadcast together). As JAX:
    mode 'raise' needs a concrete `a`; 'wrap' and 'clip' work on traced values."""
    if out is not None:
        raise ArgumentValueError("cnp.choose: out= is not supported (arrays are immutable)")
    a = _array(a)
    if _dtype(a).kind not in "iu":
        raise ArgumentValueError(f"cnp.choose: a must be integers, got {_dtype(a)}")
    options = _array(choices) if is_traced(choices) or isinstance(choices, _np.ndarray) \
        else [_array(c) for c in _weakly_typed(*choices)]
    count = len(options) if isinstance(options, list) else _shape(options)[0]
    if mode == "raise":
        if is_traced(a):
            raise _needs_concrete("choose", "a", "mode='raise' checks it when the function "
                                  "is traced: use mode='wrap' or 'clip' (as in JAX)")
        if ((a < 0) | (a >= count)).any():
            raise ArgumentValueError("cnp.choose: invalid entry in the choice array a")
    elif mode == "wrap":
        a = mod(a, count)
    elif mode == "clip":
        a = clip(a, 0, count - 1)
    else:
        raise ArgumentValueError(f"cnp.choose: mode must be 'raise', 'wrap' or 'clip', got "
                                 f"{mode!r}")
    shapes = [_shape(o) for o in options] if isinstance(options, list) else [
        _shape(options)[1:]]
    shape = broadcast_shapes(_shape(a), *shapes)
    if isinstance(options, list):
        stacked = stack([broadcast_to(o, shape) for o in options])
    else:
        stacked = broadcast_to(options, (count,) + shape)
    spec: list[Any] = []
    dynamic: list[Any] = []
    _dynamic(spec, dynamic, broadcast_to(a, shape) if _shape(a) != shape else a)
    spec.extend(_np.arange(d, dtype=_np.int64).reshape(
        (1,) * i + (d,) + (1,) * (len(shape) - i - 1)) for i, d in enumerate(shape))
    return bind("index", stacked, *dynamic, spec=tuple(spec))


def select(condlist: Sequence[Any], choicelist: Sequence[Any], default: Any = 0) -> Any:
    """Where the first true condition picks its choice, `default` elsewhere (all broadcast
    together). As JAX, conditions need not be boolean (nonzero is true)."""
    if len(condlist) != len(choicelist):
        raise ArgumentValueError(f"cnp.select: {len(condlist)} conditions but "
                                 f"{len(choicelist)} choices")
    if not condlist:
        raise ArgumentValueError("cnp.select: condlist is empty")
    conditions = [_array(c) for c in condlist]
    *choices, default = (_array(c) for c in _weakly_typed(*choicelist, default))
    shape = broadcast_shapes(*(_shape(x) for x in (*conditions, *choices)),
                                 _np.shape(default) if not is_traced(default) else
                                 _shape(default))
    result = broadcast_to(_array(default), shape)
    for condition, choice in reversed(list(zip(conditions, choices))):
        result = where(condition, choice, result)
    return result


def insert(arr: Any, obj: Any, values: Any, axis: int | None = None) -> Any:
    """`values` (cast to `arr`'s dtype) inserted before the positions `obj`, as numpy's
    insert lays them out: one gather from `arr` and `values` together. `obj` must be
    concrete (it sets the result's shape), as in JAX."""
    arr = _array(arr)
    obj = _static("insert", "obj", obj)
    values = astype(_array(values), _dtype(arr))
    size = int(_np.prod(_shape(arr), dtype=_np.int64))
    marks = -1 - _positions(_shape(values))
    laid = _np.insert(_positions(_shape(arr)), obj, marks, axis=axis)
    positions = _np.where(laid < 0, size - 1 - laid, laid)
    return _gather(concatenate([ravel(arr), ravel(values)], axis=0), positions)


def delete(arr: Any, obj: Any, axis: int | None = None) -> Any:
    """`arr` without the entries `obj` (indices, a slice or a boolean mask) along `axis`
    (of the flattened array when None); `obj` must be concrete, as in JAX."""
    arr = _array(arr)
    obj = _static("delete", "obj", obj)
    if axis is None:
        arr, axis = ravel(arr), 0
    axis = _axis("delete", arr, axis)
    kept = _np.delete(_np.arange(_shape(arr)[axis], dtype=_np.int64), obj)
    return bind("index", arr, spec=_along(axis, kept))


# -- diagonals and triangles ----------------------------------------------------------------


def _diagonal_positions(rows: int, cols: int, offset: int) -> tuple[_np.ndarray, _np.ndarray]:
    length = max(0, min(rows, cols - offset) if offset >= 0 else min(rows + offset, cols))
    steps = _np.arange(length, dtype=_np.int64)
    return steps + max(-offset, 0), steps + max(offset, 0)


def diagonal(a: Any, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Any:
    """The diagonal of the `axis1`/`axis2` planes, as a last axis (numpy's layout)."""
    a = _array(a)
    if _ndim(a) < 2:
        raise ArgumentValueError("cnp.diagonal: the input must have at least 2 dimensions")
    i, j = _axis("diagonal", a, axis1), _axis("diagonal", a, axis2)
    if i == j:
        raise ArgumentValueError("cnp.diagonal: axis1 and axis2 cannot be the same")
    moved = _to_end(a, (i, j))
    rows, cols = _shape(a)[i], _shape(a)[j]
    return bind("index", moved, spec=(Ellipsis, *_diagonal_positions(rows, cols,
                                                                     operator.index(offset))))


def diag(v: Any, k: int = 0) -> Any:
    """A 1-D `v` placed on the k-th diagonal of a square matrix; the k-th diagonal of a
    2-D `v`."""
    v = _array(v)
    k = operator.index(k)
    if _ndim(v) == 2:
        return diagonal(v, k)
    if _ndim(v) != 1:
        raise ArgumentValueError(f"cnp.diag: the input must be 1-D or 2-D, got {_ndim(v)} "
                                 "dimensions")
    n = _shape(v)[0] + abs(k)
    return bind("scatter_add", v, spec=_diagonal_positions(n, n, k), shape=(n, n))



def diagflat(v: Any, k: int = 0) -> Any:
    return diag(ravel(_array(v)), k)


def _triangle(function: str, m: Any, k: int, lower: bool) -> Any:
    m = _array(m)
    if _ndim(m) < 2:
        raise ArgumentValueError(f"cnp.{function}: the input must have at least 2 "
                                 "dimensions (as in JAX)")
    rows, cols = _shape(m)[-2:]
    k = operator.index(k)
    keep = _np.tri(rows, cols, k, dtype=bool) if lower else ~_np.tri(rows, cols, k - 1,
                                                                   dtype=bool)
    return bind("where", keep, m, _np.zeros((), _dtype(m)))


def tril(m: Any, k: int = 0) -> Any:
    """`m` with the entries above the k-th diagonal of its last two axes zeroed."""
    return _triangle("tril", m, k, lower=True)


def triu(m: Any, k: int = 0) -> Any:
    """`m` with the entries below the k-th diagonal of its last two axes zeroed."""
    return _triangle("triu", m, k, lower=False)


# -- index arrays (concrete sizes; integer results) --------------------------------------------


def tril_indices(n: int, k: int = 0, m: int | None = None) -> tuple[_np.ndarray, _np.ndarray]:
    return _np.tril_indices(_static("tril_indices", "n", n), k, _static("tril_indices", "m", m))


def triu_indices(n: int, k: int = 0, m: int | None = None) -> tuple[_np.ndarray, _np.ndarray]:
    return _np.triu_indices(_static("triu_indices", "n", n), k, _static("triu_indices", "m", m))


def _square_sides(function: str, arr: Any) -> tuple[int, int]:
    if _ndim(arr) != 2:
        raise ArgumentValueError(f"cnp.{function}: the input must be 2-D, got {_ndim(arr)} "
                                 "dimensions")
    return _shape(arr)


def tril_indices_from(arr: Any, k: int = 0) -> tuple[_np.ndarray, _np.ndarray]:
    rows, cols = _square_sides("tril_indices_from", arr)
    return _np.tril_indices(rows, k, cols)


def triu_indices_from(arr: Any, k: int = 0) -> tuple[_np.ndarray, _np.ndarray]:
    rows, cols = _square_sides("triu_indices_from", arr)
    return _np.triu_indices(rows, k, cols)


def diag_indices(n: int, ndim: int = 2) -> tuple[_np.ndarray, ...]:
    return _np.diag_indices(_static("diag_indices", "n", n), ndim)


def indices(dimensions: Sequence[int], dtype: Any = int, sparse: bool = False) -> Any:
    return _np.indices(_static("indices", "dimensions", dimensions), dtype, sparse)


def ix_(*args: Any) -> tuple[Any, ...]:
    """Open-mesh index arrays: the i-th argument reshaped along axis i. Boolean arguments
    only when concrete (their nonzero positions set the shape)."""
    out = []
    for i, a in enumerate(args):
        a = _array(a)
        if _ndim(a) != 1:
            raise ArgumentValueError(f"cnp.ix_: argument {i} must be 1-D, got shape "
                                     f"{_shape(a)}")
        if _dtype(a) == _np.bool_:
            if is_traced(a):
                raise _needs_concrete("ix_", f"boolean argument {i}", "its nonzero positions "
                                      "set the result's shape")
            a = a.nonzero()[0]
        out.append(reshape(a, (1,) * i + (-1,) + (1,) * (len(args) - i - 1)))
    return tuple(out)


def meshgrid(*xi: Any, copy: bool = True, sparse: bool = False,
             indexing: str = "xy") -> list[Any]:
    """Coordinate arrays from coordinate vectors (a list, as JAX's). 'xy' indexing swaps
    the first two axes of the result (numpy's convention); `sparse` leaves them
    unbroadcast. `copy` is accepted for numpy's signature (arrays are not written)."""
    del copy
    if indexing not in ("xy", "ij"):
        raise ArgumentValueError(f"cnp.meshgrid: indexing must be 'xy' or 'ij', got "
                                 f"{indexing!r}")
    vectors = [ravel(_array(x)) for x in xi]
    n = len(vectors)
    lengths = [_shape(v)[0] for v in vectors]
    place = list(range(n))
    if indexing == "xy" and n > 1:
        place[0], place[1] = 1, 0
    full = [0] * n
    for axis, length in zip(place, lengths):
        full[axis] = length
    grids = []
    for axis, v in zip(place, vectors):
        grid = reshape(v, tuple(-1 if i == axis else 1 for i in range(n)))
        grids.append(grid if sparse else broadcast_to(grid, tuple(full)))
    return grids


def _integer_indices(function: str, x: Any) -> Any:
    x = _array(x)
    if _dtype(x).kind not in "iu":
        raise ArgumentValueError(f"cnp.{function}: indices must be integers, got {_dtype(x)}")
    return x


def ravel_multi_index(multi_index: Sequence[Any], dims: Sequence[int], mode: str = "raise",
                      order: str = "C") -> Any:
    """Flat indices from per-axis indices (which may be traced), as JAX: 'raise' needs
    concrete indices; 'clip', 'wrap' and 'ignore' (no check) work on traced ones."""
    dims = tuple(operator.index(d) for d in _static("ravel_multi_index", "dims", dims))
    index = [_integer_indices("ravel_multi_index", i) for i in multi_index]
    if len(index) != len(dims):
        raise ArgumentValueError(f"cnp.ravel_multi_index: {len(index)} index arrays for "
                                 f"{len(dims)} dimensions")
    if order not in ("C", "F"):
        raise ArgumentValueError(f"cnp.ravel_multi_index: order must be 'C' or 'F', got "
                                 f"{order!r}")
    modes = (mode,) * len(dims) if isinstance(mode, str) else tuple(mode)
    strides = _np.cumprod((1,) + (dims[:-1] if order == "F" else dims[:0:-1]), dtype=_np.int64)
    strides = strides if order == "F" else strides[::-1]
    result: Any = _np.int64(0)
    for i, d, s, how in zip(index, dims, strides, modes):
        if how == "raise":
            if is_traced(i):
                raise _needs_concrete("ravel_multi_index", "multi_index", "mode='raise' "
                                      "checks it when the function is traced: use "
                                      "mode='clip', 'wrap' or 'ignore' (as in JAX)")
            if ((i < 0) | (i >= d)).any():
                raise ArgumentValueError("cnp.ravel_multi_index: invalid entry in the "
                                         "coordinates array")
        elif how == "clip":
            i = clip(i, 0, d - 1)
        elif how == "wrap":
            i = mod(i, d)
        elif how != "ignore":
            raise ArgumentValueError(f"cnp.ravel_multi_index: mode must be 'raise', 'wrap', "
                                     f"'clip' or 'ignore', got {how!r}")
        result = result + astype(i, _np.int64) * int(s)
    return result


def unravel_index(indices: Any, shape: Sequence[int], order: str = "C") -> tuple[Any, ...]:
    """Per-axis indices from flat ones (which may be traced). As JAX: an index in
    [-size, 0) counts from the end and one out of bounds is clipped to the first or last
    element (numpy raises)."""
    flat = _integer_indices("unravel_index", indices)
    dims = [operator.index(d) for d in _np.atleast_1d(_static("unravel_index", "shape",
                                                                shape))]
    if order not in ("C", "F"):
        raise ArgumentValueError(f"cnp.unravel_index: order must be 'C' or 'F', got "
                                 f"{order!r}")
    out: list[Any] = [None] * len(dims)
    axes = range(len(dims)) if order == "F" else reversed(range(len(dims)))
    for axis in axes:
        flat, out[axis] = floor_divide(flat, dims[axis]), mod(flat, dims[axis])
    past, before = flat > 0, flat < -1
    return tuple(where(past, d - 1, where(before, 0, i)) for d, i in zip(dims, out))


__all__ = public_names(globals(), __name__)
