"""Shape and data movement: `reshape`, `transpose`, `broadcast_to`, `concatenate`, `roll`,
`astype`, each with its Numba source beside it.
"""

from __future__ import annotations

import numpy as np

from ..errors import LoweringError
from ..ir import TensorType, broadcast_shapes, format_param
from .rules import (
    axes_param,
    axis_param,
    dtype_param,
    np_dtype,
    shape_param,
    unbroadcast,
)
from .table import (
    Primitive,
    Source,
    bind,
    register,
)


def _reshape_type(types: list[TensorType], shape: tuple[int, ...]) -> TensorType:
    shape = shape_param("reshape", shape)
    if int(np.prod(shape, dtype=np.int64)) != types[0].size:
        raise LoweringError(f"reshape: cannot reshape {types[0]} to {list(shape)}")
    return TensorType(tuple(shape), types[0].dtype)


def _reshape_source(args, types, out, shape):
    if types[0].shape == () and out.shape == ():
        return args[0]
    if types[0].shape == ():
        return f"np.full({out.shape}, {args[0]})"
    if out.shape == ():
        return f"{args[0]}.ravel()[0]"
    return f"np.ascontiguousarray({args[0]}).reshape({out.shape})"


register(Primitive(
    name="reshape", impl=lambda x, shape: x.reshape(shape), abstract=_reshape_type,
    vjp=lambda ct, xs, out, shape: (bind("reshape", ct, shape=xs[0].shape),),
    jvp=lambda ts, xs, out, shape: bind("reshape", ts[0], shape=shape),
    family="shape", promote="none", compiled=Source(_reshape_source), aliases=True))


def _transpose_type(types: list[TensorType], axes: tuple[int, ...]) -> TensorType:
    t = types[0]
    if len(axes_param("transpose", axes, t)) != t.ndim:
        raise LoweringError(f"transpose: parameter axes={format_param(axes)} is not a "
                            f"permutation of the axes of {t}")
    return TensorType(tuple(t.shape[a] for a in axes), t.dtype)


def _transpose_source(args, types, out, axes):
    """`.T` where the axes are reversed (every 2-D transpose): Numba compiles
    `np.transpose(x, axes)` in about 4 s and `.T` in a tenth of that."""
    axes = tuple(axes)
    if axes == tuple(range(len(axes))):
        return args[0]
    if axes == tuple(reversed(range(len(axes)))):
        return f"{args[0]}.T"
    return f"np.transpose({args[0]}, {axes})"


register(Primitive(
    name="transpose", impl=lambda x, axes: x.transpose(axes), abstract=_transpose_type,
    vjp=lambda ct, xs, out, axes: (bind("transpose", ct, axes=tuple(np.argsort(axes).tolist())),),
    jvp=lambda ts, xs, out, axes: bind("transpose", ts[0], axes=axes),
    family="shape", promote="none", compiled=Source(_transpose_source), aliases=True))


def _broadcast_to_type(types: list[TensorType], shape: tuple[int, ...]) -> TensorType:
    t = types[0]
    shape = shape_param("broadcast_to", shape)
    try:
        if broadcast_shapes(t.shape, shape) != tuple(shape):
            raise ValueError
    except ValueError:
        raise LoweringError(f"broadcast_to: cannot broadcast {t} to {list(shape)}") from None
    return TensorType(tuple(shape), t.dtype)


def _broadcast_to_source(args, types, out, shape):
    if out.shape == ():
        return args[0] if types[0].shape == () else f"{args[0]}.ravel()[0]"
    if types[0].shape == ():
        return f"np.full({out.shape}, {args[0]})"
    if types[0].shape == out.shape:
        return args[0]
    return f"np.broadcast_to({args[0]}, {out.shape})"


register(Primitive(
    name="broadcast_to", impl=lambda x, shape: np.broadcast_to(x, shape),
    abstract=_broadcast_to_type,
    vjp=lambda ct, xs, out, shape: (unbroadcast(ct, xs[0].shape),),
    jvp=lambda ts, xs, out, shape: bind("broadcast_to", ts[0], shape=shape),
    family="shape", promote="none",
    notes="the result is a read-only view, as numpy's", compiled=Source(_broadcast_to_source),
    aliases=True))


def _concat_type(types: list[TensorType], axis: int) -> TensorType:
    first = types[0]
    axis = axis_param("concatenate", "axis", axis, first)
    for t in types[1:]:
        if t.ndim != first.ndim or any(
                a != b for i, (a, b) in enumerate(zip(t.shape, first.shape)) if i != axis):
            raise LoweringError(f"concatenate: shapes {first} and {t} differ off axis {axis}")
    shape = list(first.shape)
    shape[axis] = sum(t.shape[axis] for t in types)
    return TensorType(tuple(shape), first.dtype)


def _concat_vjp(ct, xs, out, axis):
    pieces, start = [], 0
    for x in xs:
        stop = start + x.shape[axis]
        spec = (slice(None),) * axis + (slice(start, stop, None),)
        pieces.append(bind("index", ct, spec=spec))
        start = stop
    return tuple(pieces)


def _concat_jvp(ts, xs, out, axis):
    if all(t is None for t in ts):
        return None
    full = [t if t is not None else bind("broadcast_to", 0.0 * x, shape=x.shape)
            for t, x in zip(ts, xs)]
    return bind("concatenate", *full, axis=axis)


def _concatenate_source(args, types, out, axis):
    return f"np.concatenate(({', '.join(args)},), axis={axis})"


register(Primitive(
    name="concatenate", impl=lambda *xs, axis: np.concatenate(xs, axis=axis), abstract=_concat_type,
    vjp=_concat_vjp, jvp=_concat_jvp, family="shape", compiled=Source(_concatenate_source)))


def _roll_type(types: list[TensorType], axis: int | None) -> TensorType:
    if types[1].dtype.kind not in "iu" or types[1].ndim != 0:
        raise LoweringError(f"roll: the shift must be an integer scalar, got {types[1]}")
    if axis is not None:  # None: roll the flattened array
        axis_param("roll", "axis", axis, types[0])
    return types[0]


def _roll_source(args, types, out, axis):
    shape = types[0].shape
    if shape == ():
        return args[0]
    if axis is None:  # numpy rolls the flattened array, then restores the shape
        blocks = (1, int(np.prod(shape)), 1)
    else:  # the axes before `axis`, it, the axes after
        k = axis % len(shape)
        blocks = (int(np.prod(shape[:k])), shape[k], int(np.prod(shape[k + 1:])))
    return (f"K.roll3(np.ascontiguousarray({args[0]}).reshape({blocks}), {args[1]})"
            f".reshape({shape})")


register(Primitive(
    name="roll", impl=lambda x, shift, axis: np.roll(x, int(shift), axis=axis), abstract=_roll_type,
    vjp=lambda ct, xs, out, axis: (bind("roll", ct, -xs[1], axis=axis), None),
    jvp=lambda ts, xs, out, axis: None if ts[0] is None else bind("roll", ts[0], xs[1], axis=axis),
    family="shape", promote="none", dynamic=(1,), compiled=Source(_roll_source)))


def _astype_impl(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """numpy's cast, except that complex to a real number type takes the real part without
    numpy's ComplexWarning (as JAX does); complex to bool is x != 0, as numpy's."""
    x = np.asarray(x)
    if x.dtype.kind == "c" and np.dtype(dtype).kind not in "cb":
        return np.real(x).astype(dtype)
    return x.astype(dtype)


def _astype_vjp(ct, xs, out, dtype):
    """The transpose of the cast: back to the input's dtype; a complex cotangent of a real
    input keeps its real part (JAX's convention: the cotangent of a real value is real)."""
    x = xs[0]
    if x.dtype.kind not in "fc":
        return (None,)
    if x.dtype.kind == "f" and ct.dtype.kind == "c":
        ct = bind("real", ct)
    return (bind("astype", ct, dtype=x.dtype),)


def _astype_jvp(ts, xs, out, dtype):
    if out.dtype.kind not in "fc":
        return None
    t = ts[0]
    if t.dtype.kind == "c" and out.dtype.kind == "f":
        t = bind("real", t)
    return bind("astype", t, dtype=dtype)


def _astype_source(args, types, out, dtype):
    if types[0].dtype.kind == "c" and out.dtype.kind not in "cb":
        x = f"np.real({args[0]})"
    else:
        x = args[0]
    if out.dtype.kind == "b":
        return f"({x} != 0)"
    if out.shape == ():
        return f"{np_dtype(out)}({x})"
    return f"{x}.astype({np_dtype(out)})"


register(Primitive(
    name="astype", impl=_astype_impl,
    abstract=lambda types, dtype: TensorType(types[0].shape, dtype_param("astype", dtype)),
    vjp=_astype_vjp, jvp=_astype_jvp,
    family="shape", promote="none",
    notes="a cast to an integer or bool type has no derivative; complex to a real type "
          "takes the real part (as JAX), so its cotangent is the real cotangent as complex, "
          "and a real to complex cast's cotangent is the real part of the complex one",
    compiled=Source(_astype_source)))

