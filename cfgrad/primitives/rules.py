"""The pieces the family modules' shape rules and derivative rules share: checks of static
parameters (a bad one is a LoweringError when traced, a VerifyError when parsed), the
elementwise and reduction result types, and the helpers of derivative rules (summing a
broadcast cotangent back, masks, symbolic zeros); and the two spellings every Numba
source uses (a dtype, its zero).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import LoweringError
from ..ir import DTYPE_CHOICES, TensorType, broadcast_shapes, format_param, ir_dtype
from .table import (
    bind,
)


def broadcast_shape(types: list[TensorType], op: str) -> tuple[int, ...]:
    try:
        return broadcast_shapes(*(t.shape for t in types))
    except ValueError:
        shapes = " and ".join(str(t) for t in types)
        raise LoweringError(f"{op}: cannot broadcast {shapes} together") from None


# -- Static parameters. A rule's signature names the parameters its primitive takes (the
# verifier holds nodes to it), and the rule checks their values: everything the
# implementation and the derivative rules will do with them must be decided here, so a
# bad parameter is a LoweringError when traced and a VerifyError when parsed, never a
# TypeError or numpy AxisError from a run or a derivative rule.


def int_param(op: str, name: str, value: Any) -> int:
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        raise LoweringError(f"{op}: parameter {name} must be an int, got {value!r}")
    return int(value)


def bool_param(op: str, name: str, value: Any) -> bool:
    if not isinstance(value, bool | np.bool_):
        raise LoweringError(f"{op}: parameter {name} must be True or False, got {value!r}")
    return bool(value)


def axis_param(op: str, name: str, value: Any, t: TensorType, whole: Any = None) -> int:
    """One axis of `t` (an item of the parameter `whole`, if given), as lowering normalizes
    it: 0 <= axis < ndim. No negative axes: the shape rules count from the front, so -1
    would give a different type than numpy's run does."""
    shown = f"{name}={format_param(value if whole is None else whole)}"
    is_int = isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)
    if not is_int or not 0 <= value < t.ndim:
        allowed = f"0 to {t.ndim - 1}" if t.ndim else "none, it is a scalar"
        raise LoweringError(f"{op}: parameter {shown}: {format_param(value)} is not an axis "
                            f"of {t} (its axes: {allowed})")
    return int(value)


def axes_param(op: str, value: Any, t: TensorType) -> tuple[int, ...]:
    if not isinstance(value, tuple):
        raise LoweringError(f"{op}: parameter axes must be a tuple of axes of {t}, got "
                            f"{value!r}")
    axes = tuple(axis_param(op, "axes", a, t, value) for a in value)
    if len(set(axes)) != len(axes):
        raise LoweringError(f"{op}: parameter axes={format_param(value)} repeats an axis")
    return axes


def shape_param(op: str, value: Any) -> tuple[int, ...]:
    if not isinstance(value, tuple) or any(
            isinstance(d, bool | np.bool_) or not isinstance(d, int | np.integer) or d < 0
            for d in value):
        raise LoweringError(f"{op}: parameter shape must be a tuple of sizes (ints >= 0), got "
                            f"{value!r}")
    return tuple(int(d) for d in value)


def dtype_param(op: str, value: Any) -> np.dtype:
    dtype = ir_dtype(value)
    if dtype is None:
        raise LoweringError(f"{op}: parameter dtype must be one of the IR's dtypes "
                            f"({DTYPE_CHOICES}), got {value!r}")
    return dtype


@dataclass(frozen=True)
class DtypeOf:
    """An elementwise result dtype that depends on the promoted input dtype (`of`)."""

    of: Callable[[np.dtype], np.dtype]


def elementwise_type(op: str, out_dtype: Any = None) -> Callable[..., TensorType]:
    """The rule of an elementwise primitive: the inputs' broadcast shape, in the dtype the
    inputs are promoted to, or `out_dtype` (a dtype, or a `DtypeOf` the promoted one)."""
    def rule(types: list[TensorType]) -> TensorType:
        dtype = types[-1].dtype
        if isinstance(out_dtype, DtypeOf):
            dtype = out_dtype.of(dtype)
        elif out_dtype is not None:
            dtype = np.dtype(out_dtype)
        return TensorType(broadcast_shape(types, op), dtype)

    return rule


def reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> tuple:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def unbroadcast(ct: Any, shape: tuple[int, ...]) -> Any:
    """Sum a cotangent of a broadcast result back to an input's shape."""
    if tuple(ct.shape) == tuple(shape):
        return ct
    lead = len(ct.shape) - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, d in enumerate(shape) if d == 1 and ct.shape[lead + i] != 1)
    summed = bind("sum", ct, axes=axes, keepdims=False) if axes else ct
    return bind("reshape", summed, shape=tuple(shape))


def mask_like(condition: Any, like: Any) -> Any:
    """A 0/1 array of `like`'s dtype: keeps float32/float16 programs in their precision."""
    return bind("astype", condition, dtype=like.dtype)


def with_kept_dims(x: Any, shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> Any:
    """Reshape a reduction result to its keepdims shape so it broadcasts against the input."""
    if keepdims:
        return x
    return bind("reshape", x, shape=reduced_shape(shape, axes, True))


def add_terms(*terms: Any) -> Any:
    present = [t for t in terms if t is not None]
    if not present:
        return None
    total = present[0]
    for t in present[1:]:
        total = total + t
    return total


def to_out_shape(t: Any, out: Any) -> Any:
    """Broadcast a tangent to the output's shape: when the other operand's tangent is a
    symbolic zero, a sum of tangents still has only its own operand's shape."""
    if t is None or tuple(t.shape) == tuple(out.shape):
        return t
    return bind("broadcast_to", t, shape=tuple(out.shape))


def np_dtype(t: Any) -> str:
    return f"np.{t.dtype.name}"


def np_zero(t: Any) -> str:
    return f"{np_dtype(t)}(0)"
