"""The first part of `cfgrad.numpy`: creation, the arithmetic of the operators, the basic
reductions, shapes and indexing, and the helpers every other part normalizes arguments with.

Each function normalizes numpy-style arguments (axis, keepdims, shapes) and applies a
primitive from the derivative table, or composes a few. On concrete arrays the result is
computed at once with numpy; on traced values it is recorded in the Program.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as _np

from ..errors import ArgumentValueError, LoweringError, TracerBoolError
from ..primitives import bind, shifted_by_max, softmax_of
from ..trace_context import current_loc, current_trace, is_traced

pi = _np.pi
e = _np.e
inf = _np.inf
nan = _np.nan
newaxis = None
float16, float32, float64 = _np.float16, _np.float32, _np.float64
int32, int64, bool_ = _np.int32, _np.int64, _np.bool_
ndarray = _np.ndarray


def _ndim(x: Any) -> int:
    return x.ndim if is_traced(x) else _np.ndim(x)


def _shape(x: Any) -> tuple[int, ...]:
    return tuple(x.shape) if is_traced(x) else _np.shape(x)


def _dtype(x: Any) -> _np.dtype:
    """The dtype numpy gives `x`: Python scalars and lists have none of their own."""
    return x.dtype if is_traced(x) else _np.asarray(x).dtype


def _axes(x: Any, axis: Any) -> tuple[int, ...]:
    n = _ndim(x)
    if axis is None:
        return tuple(range(n))
    axes = (axis,) if isinstance(axis, int | _np.integer) else tuple(axis)
    out = []
    for a in axes:
        if not -n <= a < n:
            raise ValueError(f"axis {a} is out of bounds for an array of dimension {n}")
        out.append(int(a) % n)
    return tuple(sorted(out))


# -- creation ------------------------------------------------------------------------


def asarray(x: Any, dtype: Any = None) -> Any:
    """Inside a trace, a concrete array becomes a traced constant (so it can be indexed by
    a traced integer); a traced value passes through (cast if `dtype` is given)."""
    if is_traced(x):
        return x if dtype is None or _np.dtype(dtype) == x.dtype else astype(x, dtype)
    trace = current_trace()
    if trace is not None:
        return trace.tracer(trace.const(_np.asarray(x, dtype=dtype)))
    return _np.asarray(x, dtype=dtype)


array = asarray


def zeros(shape: Any, dtype: Any = float) -> _np.ndarray:
    return _np.zeros(shape, dtype)


def ones(shape: Any, dtype: Any = float) -> _np.ndarray:
    return _np.ones(shape, dtype)


def full(shape: Any, fill_value: Any, dtype: Any = None) -> Any:
    if is_traced(fill_value):
        value = fill_value if dtype is None else astype(fill_value, dtype)
        return broadcast_to(value, shape)
    return _np.full(shape, fill_value, dtype)


def zeros_like(x: Any, dtype: Any = None) -> _np.ndarray:
    return _np.zeros(_shape(x), dtype or _dtype(x))


def ones_like(x: Any, dtype: Any = None) -> _np.ndarray:
    return _np.ones(_shape(x), dtype or _dtype(x))


def full_like(x: Any, fill_value: Any, dtype: Any = None) -> Any:
    return full(_shape(x), fill_value, dtype or _dtype(x))


def _concrete_length(function: str, what: str, value: Any) -> None:
    """Refuse a traced value that would set the length of an array: shapes are fixed when
    a function is traced, so they cannot depend on values known only when it runs."""
    if is_traced(value):
        loc = current_loc()
        raise TracerBoolError(
            f"cnp.{function}: {what} is a traced value ({value.value.type})"
            f"{f' at {loc}' if loc else ''}, but it sets the length of the result, which must "
            "be known while the function is traced. Use a concrete value (a Python number or "
            "a static argument); to repeat work a traced number of times use "
            "cg.fori_loop(lower, upper, body, init); for a traced offset write "
            "cnp.arange(n) + offset.")


def arange(*args: Any, dtype: Any = None) -> _np.ndarray:
    """numpy's arange; its bounds must be concrete (the result's length depends on them)."""
    for name, bound in zip(("start" if len(args) > 1 else "stop", "stop", "step"), args):
        _concrete_length("arange", name, bound)
    return _np.arange(*args, dtype=dtype)


def linspace(start: Any, stop: Any, num: int = 50, endpoint: bool = True,
             dtype: Any = None) -> Any:
    """numpy's linspace. A traced `start` or `stop` gives `arange(num) * step + start`
    with `step = (stop - start) / (num - 1)` (numpy's own formula, so concrete and traced
    results agree) and the last element exactly `stop`: differentiable in both ends.
    `num` must be concrete: it is the length of the result."""
    _concrete_length("linspace", "num", num)
    if not is_traced(start) and not is_traced(stop):
        return _np.linspace(start, stop, num, endpoint=endpoint, dtype=dtype)
    num = operator.index(num)
    if num < 0:
        raise ValueError(f"cnp.linspace: num={num} must be non-negative")
    computed = _np.result_type(*(x.dtype if is_traced(x) else x for x in (start, stop)),
                               float(num))
    shape = _np.broadcast_shapes(_shape(start), _shape(stop))
    index = _np.arange(num, dtype=computed).reshape((num,) + (1,) * len(shape))
    lo, hi = asarray(start, computed), asarray(stop, computed)
    div = num - 1 if endpoint else num
    delta = hi - lo
    y = index * (delta / div if div > 0 else delta) + lo
    if endpoint and num > 1:
        y = where(index == num - 1, hi, y)
    if dtype is None:
        return y
    return astype(floor(y) if _np.dtype(dtype).kind in "iu" else y, dtype)


def eye(n: int, m: int | None = None, dtype: Any = float) -> _np.ndarray:
    return _np.eye(n, m, dtype=dtype)


# -- elementwise -----------------------------------------------------------------------


def _make_unary(name: str) -> Any:
    def fn(x: Any) -> Any:
        return bind(name, x)

    fn.__name__ = name
    fn.__doc__ = f"Elementwise `{name}` (see docs/api.md for its derivative conventions)."
    return fn


def _make_binary(name: str) -> Any:
    def fn(x: Any, y: Any) -> Any:
        return bind(name, x, y)

    fn.__name__ = name
    return fn


exp, log, log1p, expm1 = (_make_unary(n) for n in ("exp", "log", "log1p", "expm1"))
sin, cos, tan, tanh = (_make_unary(n) for n in ("sin", "cos", "tan", "tanh"))
sinh, cosh, arctan = (_make_unary(n) for n in ("sinh", "cosh", "arctan"))
sqrt, abs, sign, floor = (_make_unary(n) for n in ("sqrt", "abs", "sign", "floor"))
rint = _make_unary("rint")
sigmoid, relu, softplus = (_make_unary(n) for n in ("sigmoid", "relu", "softplus"))
negative, isfinite, logical_not = (_make_unary(n) for n in ("neg", "isfinite", "logical_not"))
absolute = abs
add, subtract, multiply = (_make_binary(n) for n in ("add", "sub", "mul"))
divide = true_divide = _make_binary("div")
maximum, minimum, mod = (_make_binary(n) for n in ("maximum", "minimum", "mod"))
less, less_equal, greater = (_make_binary(n) for n in ("lt", "le", "gt"))
greater_equal, equal, not_equal = (_make_binary(n) for n in ("ge", "eq", "ne"))
logical_and, logical_or, logical_xor = (
    _make_binary(n) for n in ("logical_and", "logical_or", "logical_xor"))


def power(x: Any, y: Any) -> Any:
    """x ** y. With a Python integer exponent it is `integer_pow` (repeated
    multiplication, like JAX): exact, cheap, and with a derivative for negative bases (no
    log of a negative number); otherwise the general `pow`."""
    if isinstance(y, int | _np.integer) and not isinstance(y, bool) and not isinstance(
            x, int | float):
        if y == 1:
            return x
        if y < 0 and _np.dtype(getattr(x, "dtype", _np.float64)).kind in "biu":
            raise ArgumentValueError(
                f"power: an integer base to the negative power {int(y)}; integers to "
                "negative integer powers are not allowed (as in numpy): use a float base")
        return bind("integer_pow", x, n=int(y))
    return bind("pow", x, y)


def floor_divide(x: Any, y: Any) -> Any:
    """x // y as numpy computes it, a primitive of its own so integers never pass through
    float64 (exact int64 quotients, 0 for a zero divisor); its derivative is 0 wherever it
    exists, like floor's."""
    return bind("floor_divide", x, y)


def round(a: Any, decimals: int = 0) -> Any:
    """numpy's round: halves go to the even neighbour, at `decimals` digits (negative:
    tens, hundreds, …), computed as numpy does (scale, round, unscale). Its derivative is
    0, like floor's. Python's `round(x)` and `round(x, n)` on a traced value call this."""
    if not is_traced(a):
        return _np.round(a, decimals)
    decimals = operator.index(decimals)
    if a.dtype == _np.bool_:  # as numpy does
        return astype(a, _np.float16)
    if a.dtype.kind in "iu":
        if decimals >= 0:
            return a
        return astype(round(astype(a, _np.float64), decimals), a.dtype)
    if decimals >= 0:
        return rint(a * 10.0 ** decimals) / 10.0 ** decimals
    return rint(a / 10.0 ** -decimals) * 10.0 ** -decimals


around = round


def square(x: Any) -> Any:
    return bind("mul", x, x)


def reciprocal(x: Any) -> Any:
    return bind("div", 1.0, x)


def where(condition: Any, x: Any, y: Any) -> Any:
    if not is_traced(condition):
        condition = _np.asarray(condition, dtype=bool)
    elif condition.dtype != _np.bool_:
        condition = condition != 0
    return bind("where", condition, x, y)


def clip(a: Any, a_min: Any, a_max: Any) -> Any:
    lo = -_np.inf if a_min is None else a_min
    hi = _np.inf if a_max is None else a_max
    return bind("clip", a, lo, hi)


# -- reductions -------------------------------------------------------------------------


def _reduction(name: str) -> Any:
    def fn(a: Any, axis: Any = None, keepdims: bool = False) -> Any:
        return bind(name, a, axes=_axes(a, axis), keepdims=bool(keepdims))

    fn.__name__ = name
    return fn


sum = _reduction("sum")
mean = _reduction("mean")
prod = _reduction("prod")
max = amax = _reduction("amax")
min = amin = _reduction("amin")
logsumexp = _reduction("logsumexp")


def all(a: Any, axis: Any = None, keepdims: bool = False) -> Any:
    return amin(astype(a, bool), axis, keepdims)


def any(a: Any, axis: Any = None, keepdims: bool = False) -> Any:
    return amax(astype(a, bool), axis, keepdims)


def argmax(a: Any, axis: int | None = None) -> Any:
    return bind("argmax", a, axis=None if axis is None else _axes(a, axis)[0])


def argmin(a: Any, axis: int | None = None) -> Any:
    return bind("argmin", a, axis=None if axis is None else _axes(a, axis)[0])


def var(a: Any, axis: Any = None, keepdims: bool = False) -> Any:
    centered = a - mean(a, axis, keepdims=True)
    return mean(centered * centered, axis, keepdims)


def std(a: Any, axis: Any = None, keepdims: bool = False) -> Any:
    return sqrt(var(a, axis, keepdims))


def log_softmax(x: Any, axis: Any = -1) -> Any:
    """x - logsumexp(x), computed as z - log(sum(exp(z))) with z = x - max(x): subtracting
    a rounded logsumexp from x would cost float16/float32 the digits of max(x)."""
    axes = _axes(x, axis)
    z = shifted_by_max(x, axes)
    return z - log(sum(exp(z), axes, keepdims=True))


def softmax(x: Any, axis: Any = -1) -> Any:
    """exp(x) / sum(exp(x)), shifted by max(x) first (see `log_softmax`)."""
    return softmax_of(x, _axes(x, axis))


# -- linear algebra -----------------------------------------------------------------------


def matmul(a: Any, b: Any) -> Any:
    return bind("matmul", a, b)


def vdot(a: Any, b: Any) -> Any:
    return sum(multiply(ravel(a), ravel(b)))


# -- shapes ---------------------------------------------------------------------------------


def reshape(a: Any, shape: Any) -> Any:
    shape = (shape,) if isinstance(shape, int | _np.integer) else tuple(int(s) for s in shape)
    size = int(_np.prod(_shape(a), dtype=_np.int64))
    if shape.count(-1) == 1:
        known = int(_np.prod([s for s in shape if s != -1], dtype=_np.int64))
        shape = tuple(size // known if s == -1 else s for s in shape) if known else shape
    return bind("reshape", a, shape=shape)


def ravel(a: Any) -> Any:
    return reshape(a, (-1,))


def transpose(a: Any, axes: Sequence[int] | None = None) -> Any:
    n = _ndim(a)
    perm = tuple(reversed(range(n))) if axes is None else tuple(int(x) % n for x in axes)
    return bind("transpose", a, axes=perm)


def swapaxes(a: Any, axis1: int, axis2: int) -> Any:
    perm = list(range(_ndim(a)))
    i, j = _axes(a, axis1)[0], _axes(a, axis2)[0]
    perm[i], perm[j] = perm[j], perm[i]
    return bind("transpose", a, axes=tuple(perm))


def broadcast_to(a: Any, shape: Any) -> Any:
    shape = (shape,) if isinstance(shape, int | _np.integer) else tuple(shape)
    return bind("broadcast_to", a, shape=shape)


def expand_dims(a: Any, axis: int) -> Any:
    shape = list(_shape(a))
    axis = axis % (len(shape) + 1)
    shape.insert(axis, 1)
    return reshape(a, tuple(shape))


def squeeze(a: Any, axis: Any = None) -> Any:
    shape = _shape(a)
    axes = tuple(i for i, d in enumerate(shape) if d == 1) if axis is None else _axes(a, axis)
    for ax in axes:
        if shape[ax] != 1:
            raise ValueError(f"squeeze: axis {ax} has size {shape[ax]}, not 1")
    return reshape(a, tuple(d for i, d in enumerate(shape) if i not in axes))


def concatenate(arrays: Sequence[Any], axis: int | None = 0) -> Any:
    """As numpy: `axis=None` flattens the arrays first."""
    arrays = [ravel(a) for a in arrays] if axis is None else list(arrays)
    return bind("concatenate", *arrays, axis=_axes(arrays[0], 0 if axis is None else axis)[0])


def stack(arrays: Sequence[Any], axis: int = 0) -> Any:
    arrays = list(arrays)
    axis = axis % (_ndim(arrays[0]) + 1)
    return concatenate([expand_dims(a, axis) for a in arrays], axis=axis)


def roll(a: Any, shift: Any, axis: int | None = None) -> Any:
    if not is_traced(shift):
        shift = _np.asarray(shift, dtype=_np.int64)
    return bind("roll", a, shift, axis=None if axis is None else _axes(a, axis)[0])


def astype(x: Any, dtype: Any) -> Any:
    return bind("astype", x, dtype=_np.dtype(dtype))


def take(a: Any, indices: Any, axis: int = 0) -> Any:
    return _getitem(a, (slice(None),) * _axes(a, axis)[0] + (indices,))


def _normalize_index_item(item: Any, dynamic: list[Any]) -> Any:
    if is_traced(item):
        if item.dtype.kind not in "iu":
            raise LoweringError(f"indexing with a traced {item.value.type} value: only integer "
                                "indices can be traced; select with cnp.where instead of a mask")
        dynamic.append(item)
        return "$"
    if isinstance(item, slice):
        for bound in (item.start, item.stop, item.step):
            if is_traced(bound):
                raise LoweringError("slice bounds must be Python integers; for a window at a "
                                    "traced offset, index with cnp.arange(n) + offset")
        return item
    if item is None or item is Ellipsis:
        return item
    if isinstance(item, bool | _np.bool_):
        raise LoweringError("indexing with a boolean scalar is not supported")
    if isinstance(item, int | _np.integer):
        return int(item)
    arr = _np.asarray(item)
    if arr.dtype == _np.bool_:
        raise LoweringError("boolean mask indexing gives a data-dependent shape; use "
                            "cnp.where(mask, x, 0) instead")
    if arr.dtype.kind not in "iu":
        raise LoweringError(f"array index of dtype {arr.dtype} is not an integer index")
    return arr.astype(_np.int64)


def _getitem(x: Any, index: Any) -> Any:
    items = index if isinstance(index, tuple) else (index,)
    dynamic: list[Any] = []
    spec = tuple(_normalize_index_item(item, dynamic) for item in items)
    return bind("index", x, *dynamic, spec=spec)


def public_names(namespace: dict[str, Any], module: str) -> list[str]:
    """What a part of `cfgrad.numpy` exports (its `__all__`): the functions it defines,
    aliases included (`absolute = abs`), so the namespace and the tracers' numpy dispatch
    pick up a new function without a second list to keep in step."""
    return sorted(name for name, obj in namespace.items()
                  if not name.startswith("_") and callable(obj)
                  and getattr(obj, "__module__", None) == module)


__all__ = [name for name in public_names(globals(), __name__) if name != "public_names"] + [
    "pi", "e", "inf", "nan", "newaxis", "float16", "float32", "float64", "int32", "int64",
    "bool_", "ndarray"]
