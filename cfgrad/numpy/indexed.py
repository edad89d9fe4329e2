"""The indexed-update part of `cfgrad.numpy`: JAX's `x.at[idx]` (set, add, multiply, min,
max, get) and `lax.dynamic_slice` / `lax.dynamic_update_slice` (exported as
`cg.dynamic_slice`, `cg.dynamic_update_slice`).

Updates are functional, as in JAX: `x.at[idx].set(v)` returns a new array. An index is
normalized once into the `index`/`scatter` primitives' spec: negative integers count from
the end, and an out-of-bounds integer index is handled by `mode` as in JAX: updates drop
it (`"drop"`, the default) or clamp it (`"clip"`); `get` clamps it (the default) or gives
`fill_value` (`"fill"`). Dropping points the index at one extra slot appended to its axis,
which is sliced off again, so it costs no data-dependent shape.
"""

from __future__ import annotations

from typing import Any

import numpy as _np

from ..errors import ArgumentTypeError, ArgumentValueError, LoweringError
from ..primitives import bind
from ..trace_context import current_loc
from .core import (
    _fill_value,
    _item_axes,
    _ndim,
    _normalize_index_item,
    _shape,
    _traced_windows,
    _window,
    _window_rows,
    _window_size,
    asarray,
    astype,
    broadcast_to,
    clip,
    concatenate,
    full,
    is_traced,
    public_names,
    where,
)

_UPDATE_MODES = (None, "drop", "fill", "clip", "promise_in_bounds")


class _Index:
    """An index normalized against `x`'s shape for `mode`: the spec and its traced index
    inputs, and the axes that got an extra slot (where dropped or filled entries point)."""

    def __init__(self, x: Any, index: Any, extra_slot: bool):
        items = index if isinstance(index, tuple) else (index,)
        self.x = x
        shape = _shape(x)
        self.padded: list[int] = []
        dynamic: list[Any] = []
        spec = []
        for item, axis in zip(items, _axes_of(x, items)):
            item = _normalize_index_item(item, dynamic)
            if axis is None or isinstance(item, slice):
                spec.append(item)
                continue
            n = shape[axis]
            i = dynamic.pop() if isinstance(item, str) else item
            i = where(i < 0, i + n, i)
            if extra_slot:
                i = where((i >= 0) & (i < n), i, n)
                if axis not in self.padded:
                    self.padded.append(axis)
            else:
                i = clip(i, 0, max(n - 1, 0))
            if is_traced(i):
                dynamic.append(i)
                spec.append("$")
            else:
                i = _np.asarray(i, _np.int64)
                spec.append(int(i) if i.ndim == 0 else i)
        self.spec, self.dynamic = tuple(spec), dynamic

    def extended(self, x: Any, fill: Any) -> Any:
        """`x` with one slot of `fill` appended to each padded axis."""
        for axis in self.padded:
            shape = list(_shape(x))
            shape[axis] = 1
            x = concatenate([x, full(tuple(shape), fill, x.dtype)], axis=axis)
        return x

    def trimmed(self, x: Any) -> Any:
        """`x` without the appended slots."""
        if not self.padded:
            return x
        shape = _shape(self.x)
        return x[tuple(slice(0, shape[a]) if a in self.padded else slice(None)
                       for a in range(len(shape)))]

    def selected_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """The shape indexing an array of `shape` with the spec gives."""
        probes = iter([_np.zeros(_shape(d), _np.int64) for d in self.dynamic])
        view = _np.broadcast_to(_np.zeros(()), shape)
        return view[tuple(next(probes) if isinstance(s, str) else s
                          for s in self.spec)].shape


def _mode(mode: Any, what: str) -> Any:
    if mode not in _UPDATE_MODES:
        raise ArgumentValueError(f"x.at[…].{what}: mode must be one of {_UPDATE_MODES[1:]} (or "
                                 f"None), got {mode!r}")
    return mode


def _axes_of(x: Any, items: tuple) -> list[int | None]:
    """The axis of `x` each index item selects on, or the `LoweringError` `x[…]` gives
    for more items than `x` has axes."""
    axes = _item_axes(items, _ndim(x))
    if any(axis is not None and axis >= _ndim(x) for axis in axes):
        what = x.value.type if is_traced(x) else f"an array of shape {_shape(x)}"
        loc = current_loc()
        raise LoweringError(f"x.at[…]: indexing {what} with {len(axes)} items: too many "
                            f"indices for an array of {_ndim(x)} dimensions"
                            f"{f' at {loc}' if loc else ''}")
    return axes


def _block(x: Any, index: Any) -> tuple[list[Any], Any, tuple] | None:
    """For an index with windows `i:i + k` (traced i, concrete k): the start of the block
    they select on each axis of `x` (0 where there is no window), the block (taken as
    `x[idx]` takes it: windows first, as `cg.dynamic_slice`) and the rest of the index,
    which applies within the block; None for an index without windows. Updating the
    block and writing it back makes several windows select their outer product, the
    block, as reading does."""
    items = index if isinstance(index, tuple) else (index,)
    starts: list[Any] = [0] * _ndim(x)
    windowed = False
    for item, axis in zip(items, _axes_of(x, items)):
        if _window_size(item) is not None:
            starts[axis], windowed = item.start, True
    if not windowed:
        return None
    inner, rest = _traced_windows(x, items)
    return starts, inner, rest


class _IndexedRef:
    """`x.at[idx]`: the update methods of JAX's `_IndexUpdateRef`."""

    def __init__(self, x: Any, index: Any):
        self.x, self.index = x, index

    def _update(self, op: str, values: Any, mode: Any) -> Any:
        block = _block(self.x, self.index)
        if block is not None:
            starts, inner, rest = block
            updated = _IndexedRef(inner, rest)._update(op, values, mode)
            return dynamic_update_slice(self.x, updated, starts)
        drop = _mode(mode, op) in (None, "drop", "fill", "promise_in_bounds")
        ix = _Index(self.x, self.index, extra_slot=drop)
        x = ix.x
        base = ix.extended(x, _np.zeros((), x.dtype))
        shape = ix.selected_shape(_shape(base))
        v = broadcast_to(astype(asarray(values), x.dtype), shape)
        if op == "add":
            added = bind("scatter_add", v, *ix.dynamic, spec=ix.spec, shape=_shape(base))
            return x + ix.trimmed(added)
        return ix.trimmed(bind("scatter", base, v, *ix.dynamic, spec=ix.spec, op=op))

    def set(self, values: Any, *, indices_are_sorted: bool = False,
            unique_indices: bool = False, mode: Any = None) -> Any:
        """x with x[idx] = values; of a repeated index, the last update is written (JAX
        leaves the order unspecified) and only it gets a gradient."""
        return self._update("set", values, mode)

    def add(self, values: Any, *, indices_are_sorted: bool = False,
            unique_indices: bool = False, mode: Any = None) -> Any:
        """x with values added at idx; repeated indices accumulate."""
        return self._update("add", values, mode)

    def multiply(self, values: Any, *, indices_are_sorted: bool = False,
                 unique_indices: bool = False, mode: Any = None) -> Any:
        """x with x[idx] multiplied by values; repeated indices multiply them all."""
        return self._update("mul", values, mode)

    mul = multiply

    def min(self, values: Any, *, indices_are_sorted: bool = False,
            unique_indices: bool = False, mode: Any = None) -> Any:
        """x with x[idx] = minimum(x[idx], values), over repeated indices too."""
        return self._update("min", values, mode)

    def max(self, values: Any, *, indices_are_sorted: bool = False,
            unique_indices: bool = False, mode: Any = None) -> Any:
        """x with x[idx] = maximum(x[idx], values), over repeated indices too."""
        return self._update("max", values, mode)

    def get(self, *, indices_are_sorted: bool = False, unique_indices: bool = False,
            mode: Any = None, fill_value: Any = None) -> Any:
        """x[idx]; an out-of-bounds index is clamped, or gives `fill_value` (NaN for floats,
        as JAX) with mode="fill"."""
        block = _block(self.x, self.index)
        if block is not None:
            return _IndexedRef(block[1], block[2]).get(mode=mode, fill_value=fill_value)
        fill = _mode(mode, "get") == "fill"
        ix = _Index(self.x, self.index, extra_slot=fill)
        x = ix.x
        base = ix.extended(x, _np.asarray(_fill_value(x.dtype, fill_value), x.dtype)) \
            if fill else x
        return bind("index", base, *ix.dynamic, spec=ix.spec)


class _IndexUpdateHelper:
    """The `.at` property of a traced value: `x.at[idx]` gives the updates at idx."""

    __slots__ = ("x",)

    def __init__(self, x: Any):
        self.x = x

    def __getitem__(self, index: Any) -> _IndexedRef:
        return _IndexedRef(self.x, index)


def _starts(operand: Any, start_indices: Any, function: str) -> list[Any]:
    ndim = len(_shape(operand))
    starts = list(start_indices) if isinstance(start_indices, list | tuple) else [
        start_indices[k] for k in range(_shape(start_indices)[0])] if ndim else []
    if len(starts) != ndim:
        raise ArgumentValueError(f"{function}: {len(starts)} start indices for an operand of "
                                 f"{ndim} dimensions; give one per dimension")
    for s in starts:
        if (is_traced(s) and (s.dtype.kind not in "iu" or s.ndim)) or (
                not is_traced(s) and _np.asarray(s).dtype.kind not in "iu"):
            raise ArgumentTypeError(f"{function}: start indices must be integer scalars, got "
                                    f"{s!r}")
    return starts


def dynamic_slice(operand: Any, start_indices: Any, slice_sizes: Any) -> Any:
    """`lax.dynamic_slice`: the block of `slice_sizes` at `start_indices` (traced or not),
    each start clamped so the block fits (a negative start counts from the end first)."""
    starts = _starts(operand, start_indices, "dynamic_slice")
    sizes = [int(k) for k in slice_sizes]
    if len(sizes) != len(starts):
        raise ArgumentValueError(f"dynamic_slice: {len(sizes)} slice sizes for an operand of "
                                 f"{len(starts)} dimensions")
    out = operand
    for axis, (start, size) in enumerate(zip(starts, sizes)):
        out = _window(out, axis, start, size)
    return out


def dynamic_update_slice(operand: Any, update: Any, start_indices: Any) -> Any:
    """`lax.dynamic_update_slice`: `operand` with the block at `start_indices` replaced by
    `update`, each start clamped so the block fits (a negative start counts from the end
    first)."""
    starts = _starts(operand, start_indices, "dynamic_update_slice")
    shape, sizes = _shape(operand), _shape(update)
    if len(sizes) != len(shape) or any(k > n for k, n in zip(sizes, shape)):
        raise ArgumentValueError(f"dynamic_update_slice: an update of shape {sizes} does not "
                                 f"fit in an operand of shape {shape}")
    index = tuple(
        _window_rows(n, s, k).reshape(
            tuple(k if b == a else 1 for b in range(len(shape))))
        for a, (s, n, k) in enumerate(zip(starts, shape, sizes)))
    return _IndexUpdateHelper(operand)[index].set(update, mode="clip")


__all__ = public_names(globals(), __name__)
