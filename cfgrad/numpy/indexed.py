"""`lax.dynamic_slice` and `lax.dynamic_update_slice` (exported as `cg.dynamic_slice`,
`cg.dynamic_update_slice`): a block of fixed size at starts that may be traced, read or
written through `core`'s indexing and indexed updates (`x.at[idx]`, which `core` owns so
that the arrays its constructors make have `.at` too).
"""

from __future__ import annotations

from typing import Any

import numpy as _np

from ..errors import ArgumentTypeError, ArgumentValueError
from .core import _shape, _window, _write_block, is_traced, public_names


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
    return _write_block(operand, update, starts)


__all__ = public_names(globals(), __name__)
