"""The first part of `cfgrad.numpy`: creation, the arithmetic of the operators, the basic
reductions, shapes, indexing and JAX's indexed updates, and the helpers every other part
normalizes arguments with.

Each function normalizes numpy-style arguments (axis, keepdims, shapes) and applies a
primitive from the derivative table, or composes a few. On concrete arrays the result is
computed at once with numpy; on traced values it is recorded in the Program. The
constructors return `Array`s, numpy arrays with the `.at` of traced values, which lives
here beside the arrays that have it.
"""

from __future__ import annotations

import builtins
import operator
from collections.abc import Sequence
from typing import Any

import numpy as _np

from ..errors import ArgumentValueError, LoweringError, TracerBoolError
from ..ir import broadcast_shapes
from ..primitives import bind, item_axes, shifted_by_max, softmax_of
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


def _array(x: Any) -> Any:
    """A traced value as it is; anything else as a numpy array (lists, scalars)."""
    return x if is_traced(x) else _np.asarray(x)


def _is_python_scalar(x: Any) -> bool:
    """Whether `x` is a Python number (numpy's scalars, which subclass some, are not)."""
    return isinstance(x, bool | int | float | complex) and not isinstance(x, _np.generic)


def _weakly_typed(*operands: Any) -> list[Any]:
    """`operands`, each Python number made a 0-d array of the dtype it promotes to with the
    others (numpy 2's rule, Python numbers weakly typed, as JAX and `bind`): `1.0` beside
    a float32 array is float32, `0` beside int32 int32, `0.5` beside int32 float64.
    Functions that join or select their operands (append, select, stack, heaviside, ...)
    call this before making arrays of them: numpy would make each Python float a
    float64 array, promoting a float32 result to float64 (and a loop carry with it)."""
    if not builtins.any(_is_python_scalar(o) for o in operands):
        return list(operands)
    dtype = _np.result_type(*(o if _is_python_scalar(o) else _dtype(o) for o in operands))
    return [_np.asarray(o, dtype) if _is_python_scalar(o) else o for o in operands]


def _fill_value(dtype: _np.dtype, fill_value: Any) -> Any:
    """JAX's default fill of an out-of-bounds gather: NaN, the most negative integer, the
    largest unsigned integer, or True."""
    if fill_value is not None:
        return fill_value
    if dtype.kind in "fc":
        return _np.nan
    if dtype.kind == "i":
        return _np.iinfo(dtype).min
    if dtype.kind == "u":
        return _np.iinfo(dtype).max
    return True


def _to_end(a: Any, axes: Sequence[int]) -> Any:
    """a with `axes` (normalized) moved to the end, in that order: one transpose, or none."""
    rest = [i for i in range(_ndim(a)) if i not in axes]
    order = rest + list(axes)
    return a if order == list(range(_ndim(a))) else transpose(a, order)


def _axis(function: str, x: Any, axis: Any) -> int:
    """One axis of `x` normalized (0 <= axis < ndim), or an `ArgumentValueError` naming
    `function` (a `ValueError`, as numpy's AxisError is one), traced or not."""
    return _axis_of_ndim(function, _ndim(x), axis)


def _axis_of_ndim(function: str, n: int, axis: Any) -> int:
    """`_axis` for an array of `n` dimensions known only by that number."""
    try:
        index = operator.index(axis)
    except TypeError:
        raise ArgumentValueError(f"cnp.{function}: axis must be an integer, got {axis!r}") \
            from None
    if not -n <= index < n:
        raise ArgumentValueError(f"cnp.{function}: axis {index} is out of bounds for an "
                                 f"array of dimension {n}")
    return index % n


def _axes(x: Any, axis: Any, function: str) -> tuple[int, ...]:
    """`axis` (None: all, an integer or a sequence of them) normalized and sorted, with
    `_axis`'s errors."""
    if axis is None:
        return tuple(range(_ndim(x)))
    axes = tuple(axis) if isinstance(axis, tuple | list) else (axis,)
    return tuple(sorted(_axis(function, x, a) for a in axes))


# -- creation ------------------------------------------------------------------------


class Array(_np.ndarray):
    """A numpy array with JAX's indexed updates, `x.at[idx].set(v)` and its kin, as
    traced values have them: what cfgrad.numpy's constructors return, so that a function
    updating an array it made runs the same with and without a transformation (numpy's
    arrays have no `.at`; every JAX array has it).

    Nothing else differs from numpy's ndarray, whose subclass it is: numpy's operators,
    ufuncs, methods and views keep it an Array (as numpy keeps any subclass),
    `np.asarray` gives a plain ndarray of the same memory, and cfgrad's transformations
    take it as any numpy array and return plain numpy arrays."""

    __slots__ = ()

    def __array_wrap__(self, array: Any, context: Any = None, return_scalar: bool = False
                       ) -> Any:
        """A ufunc's or a reduction's result: a numpy scalar where numpy gives one
        (`x.sum()`, `x @ x` of vectors), as for a plain array, so that it hashes and is a
        Python float as numpy's results are; an Array otherwise."""
        if return_scalar:
            return array[()]
        return super().__array_wrap__(array, context, return_scalar)

    @property
    def at(self) -> _IndexUpdateHelper:
        """`x.at[idx].set(v)`, `.add`, `.multiply`, `.min`, `.max`, `.get`: each a new
        Array (`x` is left as it was), with the same values as traced."""
        return _IndexUpdateHelper(self)


def _holds_traced(x: Any) -> bool:
    """Whether `x` is traced or a (nested) list or tuple holding a traced value."""
    if isinstance(x, list | tuple):
        return builtins.any(_holds_traced(item) for item in x)
    return is_traced(x)


def _leaves(x: Any) -> list[Any]:
    return [leaf for item in x for leaf in _leaves(item)] if isinstance(x, list | tuple) else [x]


def _stacked(x: Any, dtype: Any) -> Any:
    """A nested list or tuple holding traced values as one array, as JAX's `array`: every
    leaf cast to `dtype` (by default the leaves' promoted dtype, Python numbers weakly
    typed, so `[x, 1.0]` with a float32 `x` is float32), then stacked level by level."""
    if dtype is None:
        dtype = _np.result_type(*(leaf if _is_python_scalar(leaf) else _dtype(leaf)
                                  for leaf in _leaves(x)))

    def build(item: Any) -> Any:
        if isinstance(item, list | tuple):
            return stack([build(part) for part in item])
        return asarray(item, dtype)

    return build(x)


def asarray(x: Any, dtype: Any = None) -> Any:
    """Inside a trace, a concrete array becomes a traced constant (so it can be indexed by
    a traced integer); a traced value passes through (cast if `dtype` is given); a
    (nested) list or tuple holding traced values is stacked (see `_stacked`)."""
    if not is_traced(x) and _holds_traced(x):
        return _stacked(x, dtype)
    if is_traced(x):
        return x if dtype is None or _np.dtype(dtype) == x.dtype else astype(x, dtype)
    trace = current_trace()
    if trace is not None:
        return trace.tracer(trace.const(_np.asarray(x, dtype=dtype)))
    return _np.asarray(x, dtype=dtype).view(Array)


def array(x: Any, dtype: Any = None, copy: bool = True, ndmin: int = 0) -> Any:
    """numpy's array: `asarray`, with leading axes of length 1 up to `ndmin` axes; a
    concrete array outside a trace is copied unless `copy=False`."""
    if not is_traced(x) and current_trace() is None:
        return _np.array(x, dtype=dtype, copy=copy or None, ndmin=ndmin).view(Array)
    out = asarray(x, dtype)
    missing = operator.index(ndmin) - out.ndim
    return reshape(out, (1,) * missing + tuple(out.shape)) if missing > 0 else out


def zeros(shape: Any, dtype: Any = float) -> Array:
    return _np.zeros(shape, dtype).view(Array)


def empty(shape: Any, dtype: Any = float) -> Array:
    """JAX's empty: zeros (numpy's leaves the memory as it was, which would make results
    depend on what ran before)."""
    return zeros(shape, dtype)


def ones(shape: Any, dtype: Any = float) -> Array:
    return _np.ones(shape, dtype).view(Array)


def full(shape: Any, fill_value: Any, dtype: Any = None) -> Any:
    if is_traced(fill_value):
        value = fill_value if dtype is None else astype(fill_value, dtype)
        return broadcast_to(value, shape)
    return _np.full(shape, fill_value, dtype).view(Array)


def zeros_like(x: Any, dtype: Any = None) -> Array:
    return zeros(_shape(x), dtype or _dtype(x))


def empty_like(x: Any, dtype: Any = None) -> Array:
    """JAX's empty_like: zeros, as `empty`."""
    return zeros_like(x, dtype)


def ones_like(x: Any, dtype: Any = None) -> Array:
    return ones(_shape(x), dtype or _dtype(x))


def full_like(x: Any, fill_value: Any, dtype: Any = None, shape: Any = None) -> Any:
    """An array of `x`'s shape (or `shape`) and dtype (or `dtype`) filled with
    `fill_value`, which may be traced (then the result is, and is differentiable in it)."""
    return full(_shape(x) if shape is None else shape, fill_value, dtype or _dtype(x))


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


def arange(*args: Any, dtype: Any = None) -> Array:
    """numpy's arange; its bounds must be concrete (the result's length depends on them)."""
    for name, bound in zip(("start" if len(args) > 1 else "stop", "stop", "step"), args):
        _concrete_length("arange", name, bound)
    return _np.arange(*args, dtype=dtype).view(Array)


def linspace(start: Any, stop: Any, num: int = 50, endpoint: bool = True,
             retstep: bool = False, dtype: Any = None, axis: int = 0) -> Any:
    """numpy's linspace. A traced `start` or `stop` gives `arange(num) * step + start`
    with `step = (stop - start) / (num - 1)` (numpy's own formula, so concrete and traced
    results agree) and the last element exactly `stop`: differentiable in both ends.
    `num` must be concrete: it is the length of the result. Array ends put the samples
    along `axis` of the result (0: first)."""
    _concrete_length("linspace", "num", num)
    if not is_traced(start) and not is_traced(stop):
        y = _np.linspace(start, stop, num, endpoint=endpoint, retstep=retstep, dtype=dtype,
                         axis=axis)
        return (y[0].view(Array), y[1]) if retstep else y.view(Array)
    num = operator.index(num)
    if num < 0:
        raise ValueError(f"cnp.linspace: num={num} must be non-negative")
    computed = _np.result_type(*(x.dtype if is_traced(x) else x for x in (start, stop)),
                               float(num))
    shape = broadcast_shapes(_shape(start), _shape(stop))
    index = _np.arange(num, dtype=computed).reshape((num,) + (1,) * len(shape))
    lo, hi = asarray(start, computed), asarray(stop, computed)
    div = num - 1 if endpoint else num
    delta = hi - lo
    step = delta / div if div > 0 else delta * _np.nan
    y = index * (step if div > 0 else delta) + lo
    if endpoint and num > 1:
        y = where(index == num - 1, hi, y)
    if dtype is not None:
        y = astype(floor(y) if _np.dtype(dtype).kind in "iu" else y, dtype)
    y = _first_axis_to(y, axis)
    return (y, step) if retstep else y


def _first_axis_to(y: Any, axis: int) -> Any:
    """`y` with its first axis moved to position `axis` (numpy's moveaxis(y, 0, axis)):
    where linspace and its kin put their samples."""
    n = _ndim(y)
    axis = operator.index(axis) % n
    if not axis:
        return y
    return transpose(y, tuple(range(1, axis + 1)) + (0,) + tuple(range(axis + 1, n)))


def eye(N: int, M: int | None = None, k: int = 0, dtype: Any = float) -> Array:
    """numpy's eye: ones on the `k`-th diagonal (above the main one for k > 0)."""
    for name, size in (("N", N), ("M", M), ("k", k)):
        _concrete_length("eye", name, size)
    return _np.eye(N, M, k, dtype=dtype).view(Array)


# -- elementwise -----------------------------------------------------------------------


def _make_unary(name: str, module: str = __name__) -> Any:
    """The cnp function applying primitive `name`, exported by `module` (a part of
    cfgrad.numpy that declares it, see `public_names`)."""
    def fn(x: Any) -> Any:
        return bind(name, x)

    fn.__name__ = fn.__qualname__ = name
    fn.__module__ = module
    fn.__doc__ = f"Elementwise `{name}` (see docs/api.md for its derivative conventions)."
    return fn


def _make_rounding(name: str, module: str = __name__) -> Any:
    """floor, ceil, trunc: integers and bools are already whole, and are returned as they
    are (numpy 2 and JAX keep their dtype); floats go through primitive `name`."""
    def fn(x: Any) -> Any:
        if _dtype(x).kind not in "biu":
            return bind(name, x)
        return x if is_traced(x) else _np.asarray(x)

    fn.__name__ = fn.__qualname__ = name
    fn.__module__ = module
    fn.__doc__ = f"Elementwise `{name}`; its derivative is 0 (see docs/api.md)."
    return fn


def _make_binary(name: str) -> Any:
    def fn(x: Any, y: Any) -> Any:
        return bind(name, x, y)

    fn.__name__ = name
    return fn


exp, log, log1p, expm1 = (_make_unary(n) for n in ("exp", "log", "log1p", "expm1"))
sin, cos, tan, tanh = (_make_unary(n) for n in ("sin", "cos", "tan", "tanh"))
sinh, cosh, arctan = (_make_unary(n) for n in ("sinh", "cosh", "arctan"))
sqrt, abs, sign = (_make_unary(n) for n in ("sqrt", "abs", "sign"))
floor = _make_rounding("floor")
rint = _make_unary("rint")
sigmoid, relu, softplus = (_make_unary(n) for n in ("sigmoid", "relu", "softplus"))
negative, isfinite, logical_not = (_make_unary(n) for n in ("neg", "isfinite", "logical_not"))
absolute = abs
atan = arctan
add, subtract, multiply = (_make_binary(n) for n in ("add", "sub", "mul"))
divide = true_divide = _make_binary("div")
maximum, minimum, mod = (_make_binary(n) for n in ("maximum", "minimum", "mod"))
remainder = mod
less, less_equal, greater = (_make_binary(n) for n in ("lt", "le", "gt"))
greater_equal, equal, not_equal = (_make_binary(n) for n in ("ge", "eq", "ne"))
logical_and, logical_or, logical_xor = (
    _make_binary(n) for n in ("logical_and", "logical_or", "logical_xor"))


_FLOAT64_INTEGERS = int(_np.finfo(_np.float64).max)  # the largest integer float() takes


def power(x: Any, y: Any) -> Any:
    """x ** y. With a Python integer exponent it is `integer_pow` (repeated
    multiplication, like JAX): exact, cheap, and with a derivative for negative bases (no
    log of a negative number); otherwise the general `pow`."""
    if isinstance(y, int | _np.integer) and not isinstance(y, bool) and not isinstance(
            x, int | float):
        if y == 1:
            return x
        if abs(y) > _FLOAT64_INTEGERS:  # its derivative n x^(n-1) needs float(n)
            raise ArgumentValueError(
                f"power: an integer exponent of {len(str(abs(int(y))))} digits is beyond "
                "float64's range, which numpy cannot take either (OverflowError)")
        if y < 0 and _np.dtype(getattr(x, "dtype", _np.float64)).kind in "biu":
            raise ArgumentValueError(
                f"power: an integer base to the negative power {int(y)}; integers to "
                "negative integer powers are not allowed (as in numpy): use a float base")
        return bind("integer_pow", x, n=int(y))
    return bind("pow", x, y)


pow = power


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
        return _np.round(_np.asarray(a), decimals)
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


def _no_out(function: str, out: Any) -> None:
    """Refuse numpy's `out=`: results are new values here (traced values cannot be written
    into), as in JAX."""
    if out is not None:
        raise ArgumentValueError(
            f"cnp.{function}: out= is not supported (results are new arrays, as in JAX); "
            f"assign the result instead: y = cnp.{function}(...)")


def _masked(a: Any, where_: Any, fill: Any) -> Any:
    """`a` with the entries `where_` leaves out replaced by `fill` (numpy's `where=` of a
    reduction: those entries do not take part, so they get no gradient)."""
    return a if where_ is None else where(where_, a, fill)


def _lowest(dtype: _np.dtype) -> Any:
    """The identity of max for `dtype` (JAX's: -inf, the smallest integer, False)."""
    if dtype == _np.bool_:
        return False
    return int(_np.iinfo(dtype).min) if dtype.kind in "iu" else -_np.inf


def _highest(dtype: _np.dtype) -> Any:
    if dtype == _np.bool_:
        return True
    return int(_np.iinfo(dtype).max) if dtype.kind in "iu" else _np.inf


def _cast(a: Any, dtype: Any) -> Any:
    return a if dtype is None else astype(a, dtype)


def _reduce(name: str, a: Any, axis: Any, keepdims: bool) -> Any:
    return bind(name, a, axes=_axes(a, axis, name), keepdims=bool(keepdims))


def sum(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False,
        initial: Any = None, where: Any = None) -> Any:
    """numpy's sum: entries outside `where` count as 0, `initial` is added to the result;
    `dtype` casts the input first (as JAX)."""
    _no_out("sum", out)
    a = _cast(a, dtype)
    total = _reduce("sum", _masked(a, where, 0), axis, keepdims)
    return total if initial is None else total + initial


def prod(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False,
         initial: Any = None, where: Any = None) -> Any:
    """numpy's prod: entries outside `where` count as 1, the result is multiplied by
    `initial`; its derivative is exact where entries are zero."""
    _no_out("prod", out)
    a = _cast(a, dtype)
    total = _reduce("prod", _masked(a, where, 1), axis, keepdims)
    return total if initial is None else total * initial


def _extreme(name: str, combine: Any, identity: Any) -> Any:
    def fn(a: Any, axis: Any = None, out: Any = None, keepdims: bool = False,
           initial: Any = None, where: Any = None) -> Any:
        _no_out(name, out)
        if where is not None and initial is None:
            raise ArgumentValueError(
                f"cnp.{name}: where= needs initial= (the reduction has no identity to give an "
                "empty selection), as in numpy and JAX")
        result = _reduce("amax" if combine is maximum else "amin",
                         _masked(a, where, identity(_dtype(a))), axis, keepdims)
        # Combined after the reduction, as JAX does: a tie between the extreme and
        # `initial` splits the gradient 1/2 : 1/2 (maximum's convention).
        return result if initial is None else combine(result, initial)

    fn.__name__ = name
    fn.__doc__ = (f"numpy's {name}: `where=` (with `initial=`) leaves entries out; ties share "
                  "the gradient equally.")
    return fn


max = amax = _extreme("max", maximum, _lowest)
min = amin = _extreme("min", minimum, _highest)


def mean(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False,
         *, where: Any = None) -> Any:
    """numpy's mean; with `where=`, of the selected entries only."""
    _no_out("mean", out)
    a = _cast(a, dtype)
    if where is None:
        return _reduce("mean", a, axis, keepdims)
    computed = _np.result_type(_dtype(a), 1.0)
    total = _reduce("sum", astype(_masked(a, where, 0), computed), axis, keepdims)
    return total / _selected_count(a, axis, keepdims, where, computed)


def _selected_count(a: Any, axis: Any, keepdims: bool, where_: Any, dtype: Any) -> Any:
    """How many entries a reduction with `where=` takes over `axis`, as `dtype`."""
    chosen = broadcast_to(where_, broadcast_shapes(_shape(a), _shape(where_)))
    return _reduce("sum", astype(chosen, dtype), axis, keepdims)


def logsumexp(a: Any, axis: Any = None, keepdims: bool = False) -> Any:
    return _reduce("logsumexp", a, axis, keepdims)


def all(a: Any, axis: Any = None, out: Any = None, keepdims: bool = False, *,
        where: Any = None) -> Any:
    _no_out("all", out)
    return _reduce("amin", _masked(astype(a, bool), where, True), axis, keepdims)


def any(a: Any, axis: Any = None, out: Any = None, keepdims: bool = False, *,
        where: Any = None) -> Any:
    _no_out("any", out)
    return _reduce("amax", _masked(astype(a, bool), where, False), axis, keepdims)


def _arg_extreme(name: str) -> Any:
    def fn(a: Any, axis: int | None = None, out: Any = None, *, keepdims: bool = False) -> Any:
        _no_out(name, out)
        if axis is None:
            index = bind(name, a, axis=None)
            return reshape(index, (1,) * _ndim(a)) if keepdims else index
        axis = _axis(name, a, axis)
        index = bind(name, a, axis=axis)
        return expand_dims(index, axis) if keepdims else index

    fn.__name__ = name
    fn.__doc__ = f"numpy's {name} (the first of tied entries); an integer: no derivative."
    return fn


argmax = _arg_extreme("argmax")
argmin = _arg_extreme("argmin")


def var(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, ddof: Any = 0,
        keepdims: bool = False, *, where: Any = None, correction: Any = None) -> Any:
    """numpy's var: the mean squared deviation, divided by `N - ddof` (`correction` is the
    array-API name of ddof); with `where=`, of the selected entries only."""
    _no_out("var", out)
    if correction is not None:
        if ddof != 0:
            raise ArgumentValueError("cnp.var: give ddof or correction, not both")
        ddof = correction
    a = _cast(a, dtype)
    centered = a - mean(a, axis, keepdims=True, where=where)
    squares = _masked(centered * centered, where, 0)
    if where is None:
        count = float(_np.prod([_shape(a)[i] for i in _axes(a, axis, "var")], dtype=_np.int64))
    else:
        count = _selected_count(a, axis, keepdims, where, _np.result_type(_dtype(a), 1.0))
    return _reduce("sum", squares, axis, keepdims) / (count - ddof)


def std(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, ddof: Any = 0,
        keepdims: bool = False, *, where: Any = None, correction: Any = None) -> Any:
    """The square root of `var` (same arguments)."""
    _no_out("std", out)
    return sqrt(var(a, axis, dtype, None, ddof, keepdims, where=where, correction=correction))


def log_softmax(x: Any, axis: Any = -1) -> Any:
    """x - logsumexp(x), computed as z - log(sum(exp(z))) with z = x - max(x): subtracting
    a rounded logsumexp from x would cost float16/float32 the digits of max(x)."""
    axes = _axes(x, axis, "log_softmax")
    z = shifted_by_max(x, axes)
    return z - log(sum(exp(z), axes, keepdims=True))


def softmax(x: Any, axis: Any = -1) -> Any:
    """exp(x) / sum(exp(x)), shifted by max(x) first (see `log_softmax`)."""
    return softmax_of(x, _axes(x, axis, "softmax"))


# -- linear algebra -----------------------------------------------------------------------


def matmul(a: Any, b: Any) -> Any:
    return bind("matmul", a, b)


def _conj(x: Any) -> Any:
    """The complex conjugate of x; a real x as it is (numpy returns it unchanged too)."""
    return bind("conj", x) if _dtype(x).kind == "c" else x


def vdot(a: Any, b: Any) -> Any:
    """numpy's vdot: the flattened a, conjugated, dotted with the flattened b."""
    return sum(multiply(ravel(_conj(a)), ravel(b)))


# -- shapes ---------------------------------------------------------------------------------


def reshape(a: Any, shape: Any, order: str = "C") -> Any:
    """numpy's reshape; order 'F' reads and writes the elements with the first index
    changing fastest (the C reshape of the reversed axes, transposed back), as JAX."""
    _check_order("reshape", order)
    shape = (shape,) if isinstance(shape, int | _np.integer) else tuple(int(s) for s in shape)
    if order == "F":
        return transpose(reshape(transpose(a), shape[::-1]))
    size = int(_np.prod(_shape(a), dtype=_np.int64))
    if shape.count(-1) == 1:
        known = int(_np.prod([s for s in shape if s != -1], dtype=_np.int64))
        shape = tuple(size // known if s == -1 else s for s in shape) if known else shape
    if shape == _shape(a) and (is_traced(a) or isinstance(a, _np.ndarray)):
        return a  # no node for a reshape that changes nothing (ravel of a vector)
    return bind("reshape", a, shape=shape)


def _check_order(function: str, order: str) -> None:
    if order not in ("C", "F"):
        raise ArgumentValueError(f"cnp.{function}: order must be 'C' or 'F' (as in JAX), got "
                                 f"{order!r}")


def ravel(a: Any, order: str = "C") -> Any:
    return reshape(a, (-1,), order)


def transpose(a: Any, axes: Sequence[int] | None = None) -> Any:
    n = _ndim(a)
    perm = tuple(reversed(range(n))) if axes is None else tuple(int(x) % n for x in axes)
    return bind("transpose", a, axes=perm)


def swapaxes(a: Any, axis1: int, axis2: int) -> Any:
    perm = list(range(_ndim(a)))
    i, j = _axis("swapaxes", a, axis1), _axis("swapaxes", a, axis2)
    perm[i], perm[j] = perm[j], perm[i]
    return bind("transpose", a, axes=tuple(perm))


def broadcast_to(a: Any, shape: Any) -> Any:
    shape = (shape,) if isinstance(shape, int | _np.integer) else tuple(shape)
    return bind("broadcast_to", a, shape=shape)


def expand_dims(a: Any, axis: Any) -> Any:
    """New axes of length 1 at the positions `axis` (an int or a tuple) of the result."""
    axes = (axis,) if isinstance(axis, int | _np.integer) else tuple(axis)
    ndim = _ndim(a) + len(axes)
    placed = sorted(int(ax) % ndim if -ndim <= ax < ndim else ndim for ax in axes)
    if placed and placed[-1] == ndim:
        raise ValueError(f"expand_dims: axis {axis} is out of bounds for a result of "
                         f"dimension {ndim}")
    if len(set(placed)) != len(placed):
        raise ValueError(f"expand_dims: repeated axis in {axis}")
    shape = list(_shape(a))
    for ax in placed:
        shape.insert(ax, 1)
    return reshape(a, tuple(shape))


def squeeze(a: Any, axis: Any = None) -> Any:
    shape = _shape(a)
    axes = tuple(i for i, d in enumerate(shape) if d == 1) if axis is None else _axes(
        a, axis, "squeeze")
    for ax in axes:
        if shape[ax] != 1:
            raise ValueError(f"squeeze: axis {ax} has size {shape[ax]}, not 1")
    return reshape(a, tuple(d for i, d in enumerate(shape) if i not in axes))


def _joined(function: str, arrays: Sequence[Any]) -> list[Any]:
    """The arrays a joining function takes, at least one."""
    arrays = list(arrays)
    if not arrays:
        raise ArgumentValueError(f"cnp.{function}: need at least one array to join")
    return arrays


def concatenate(arrays: Sequence[Any], axis: int | None = 0) -> Any:
    """As numpy: `axis=None` flattens the arrays first."""
    arrays = _weakly_typed(*_joined("concatenate", arrays))
    arrays = [ravel(a) for a in arrays] if axis is None else arrays
    return bind("concatenate", *arrays,
                axis=_axis("concatenate", arrays[0], 0 if axis is None else axis))


def stack(arrays: Sequence[Any], axis: int = 0) -> Any:
    arrays = _weakly_typed(*_joined("stack", arrays))
    axis = axis % (_ndim(arrays[0]) + 1)
    return concatenate([expand_dims(a, axis) for a in arrays], axis=axis)


def roll(a: Any, shift: Any, axis: Any = None) -> Any:
    """numpy's roll; several shifts and axes are broadcast together and applied in turn
    (axis None: their sum, on the flattened array). A shift may be traced, or a tuple
    or list holding traced shifts."""
    if not is_traced(shift) and _holds_traced(shift):
        shift = asarray(shift)
    if is_traced(shift) and shift.ndim == 0 or not is_traced(shift) and _np.ndim(shift) == 0:
        if not is_traced(shift):
            shift = _np.asarray(shift, dtype=_np.int64)
        if axis is not None and not isinstance(axis, int | _np.integer):
            axes = tuple(axis)
            for ax in axes:
                a = roll(a, shift, ax)
            return a
        return bind("roll", a, shift, axis=None if axis is None else _axis("roll", a, axis))
    if axis is None:
        return roll(a, sum(shift), None)
    axes = (axis,) if isinstance(axis, int | _np.integer) else tuple(axis)
    count = broadcast_shapes(_shape(shift), (len(axes),))[0]
    shifts = broadcast_to(shift, (count,)) if is_traced(shift) else _np.broadcast_to(
        shift, (count,))
    for i, ax in enumerate(_np.broadcast_to(_np.asarray(axes), (count,))):
        a = roll(a, shifts[i], int(ax))
    return a


def astype(x: Any, dtype: Any) -> Any:
    return bind("astype", x, dtype=_np.dtype(dtype))


def _normalize_index_item(item: Any, dynamic: list[Any]) -> Any:
    if is_traced(item):
        if item.dtype.kind not in "iu":
            raise LoweringError(f"indexing with a traced {item.value.type} value: only integer "
                                "indices can be traced; select with cnp.where instead of a mask")
        dynamic.append(item)
        return "$"
    if isinstance(item, slice):
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


def _clamped_start(start: Any, n: int, size: int) -> Any:
    """A window's start as `lax.dynamic_slice` takes it: a negative start counts from the
    end, then the start is clamped so that `size` elements from it fit in `n`."""
    start = astype(start, _np.int64)
    return clip(where(start < 0, start + n, start), 0, n - size)


def _window_rows(n: int, start: Any, size: int) -> Any:
    """The indices of `size` consecutive elements of an axis of length `n` from `start`
    (traced or not), clamped as `_clamped_start` says."""
    if not 0 <= size <= n:
        raise ArgumentValueError(f"a window of {size} elements does not fit in an axis of "
                                 f"length {n}")
    return arange(size) + _clamped_start(start, n, size)


def _window_slice(n: int, start: Any, size: int) -> slice | None:
    """The slice a window of `size` elements from a constant `start` covers in an axis of
    length `n`, clamped as `_clamped_start` says (a basic index: a view, compiled as a
    subscript); None for a traced start."""
    if is_traced(start):
        return None
    _window_rows(n, start, size)  # (checks that the window fits)
    first = int(_clamped_start(start, n, size))
    return slice(first, first + size)


def _window(x: Any, axis: int, start: Any, size: int) -> Any:
    """`size` consecutive elements of `x` along `axis` from `start`, clamped to fit."""
    n = _shape(x)[axis]
    constant = _window_slice(n, start, size)
    if constant is not None:
        return bind("index", x, spec=(slice(None),) * axis + (constant,))
    return bind("index", x, _window_rows(n, start, size), spec=(slice(None),) * axis + ("$",))


def _offset(stop: Any, start: Any) -> int | None:
    """k when the traced `stop` was computed as `start + k` (or `k + start`) for a
    concrete integer k, else None: read off the node that made it."""
    trace = current_trace()
    made = next((n for b in trace.blocks for n in b.nodes if stop.value in n.outputs), None)
    if made is None or made.op != "add" or start.value not in made.inputs:
        return None
    other = made.inputs[1] if made.inputs[0] is start.value else made.inputs[0]
    const = next((n for n in trace.const_nodes if other in n.outputs), None)
    if const is None or const.params["value"].ndim != 0 or \
            const.params["value"].dtype.kind not in "iu":
        return None
    return int(const.params["value"])


def _window_size(item: Any) -> int | None:
    """k for a slice `i:i + k` with a traced i and a concrete k (a cfgrad extension: JAX
    refuses traced slice bounds); None for an item that is no slice with traced bounds."""
    if not isinstance(item, slice) or not (
            is_traced(item.start) or is_traced(item.stop) or is_traced(item.step)):
        return None
    size = None
    if is_traced(item.start) and is_traced(item.stop) and item.step in (None, 1):
        size = _offset(item.stop, item.start)
    if size is None:
        raise LoweringError(
            "a slice with traced bounds must be x[i:i + k] with a concrete k (a window of "
            "fixed size k at a traced offset i, clamped to fit as cg.dynamic_slice); for "
            "anything else use cg.dynamic_slice(x, starts, sizes)")
    return size


def _traced_windows(x: Any, items: tuple) -> tuple[Any, tuple]:
    """`x[i:i + k]` for a traced i: the window taken first (as `cg.dynamic_slice`, start
    clamped), the item then a full slice."""
    out = list(items)
    for k, (item, axis) in enumerate(zip(items, item_axes(items, _ndim(x)))):
        size = _window_size(item)
        if size is not None:
            x, out[k] = _window(x, axis, item.start, size), slice(None)
    return x, tuple(out)


def _getitem(x: Any, index: Any) -> Any:
    items = index if isinstance(index, tuple) else (index,)
    x, items = _traced_windows(x, items)
    dynamic: list[Any] = []
    spec = tuple(_normalize_index_item(item, dynamic) for item in items)
    return bind("index", x, *dynamic, spec=spec)


# -- indexed updates ----------------------------------------------------------------------
# JAX's `x.at[idx]` (set, add, multiply, min, max, get), functional as in JAX: an update
# returns a new array. An index is normalized once into the `index`/`scatter` primitives'
# spec: negative integers count from the end, and an out-of-bounds integer index is
# handled by `mode` as in JAX: updates drop it ("drop", the default) or clamp it ("clip");
# `get` clamps it (the default) or gives `fill_value` ("fill"). Dropping points the index
# at one extra slot appended to its axis, which is sliced off again, so it costs no
# data-dependent shape.


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
                i = clip(i, 0, builtins.max(n - 1, 0))
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
    axes = item_axes(items, _ndim(x))
    if builtins.any(axis is not None and axis >= _ndim(x) for axis in axes):
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
            return _write_block(self.x, updated, starts)
        drop = _mode(mode, op) in (None, "drop", "fill", "promise_in_bounds")
        ix = _Index(self.x, self.index, extra_slot=drop)
        x = ix.x
        base = ix.extended(x, _np.zeros((), x.dtype))
        shape = ix.selected_shape(_shape(base))
        v = broadcast_to(astype(asarray(values), x.dtype), shape)
        if op == "add":
            added = bind("scatter_add", v, *ix.dynamic, spec=ix.spec, shape=_shape(base))
            return self._kept(x + ix.trimmed(added))
        return self._kept(ix.trimmed(bind("scatter", base, v, *ix.dynamic, spec=ix.spec,
                                          op=op)))

    def _kept(self, out: Any) -> Any:
        """An update of an Array as an Array (so that updates chain, eagerly as traced);
        of a traced value or a plain numpy array, as it is."""
        if type(self.x) is Array and not is_traced(out):
            return _np.asarray(out).view(Array)
        return out

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
        out = bind("index", base, *ix.dynamic, spec=ix.spec)
        # what x[idx] gives for an Array: an Array, or a numpy scalar for one element
        return out.view(Array) if type(x) is Array and type(out) is _np.ndarray else out


class _IndexUpdateHelper:
    """The `.at` property of a traced value or an Array: `x.at[idx]` gives the updates at
    idx, computed now on concrete operands and traced on traced ones, by the same code."""

    __slots__ = ("x",)

    def __init__(self, x: Any):
        self.x = x

    def __getitem__(self, index: Any) -> _IndexedRef:
        return _IndexedRef(self.x, index)


def _write_block(operand: Any, update: Any, starts: list[Any]) -> Any:
    """`operand` with `update` written as the block at `starts` (integer scalars, traced or
    not), each start clamped so the block fits: `lax.dynamic_update_slice`, whose
    arguments `cg.dynamic_update_slice` checks, and the write-back of `x.at` on windows."""
    shape, sizes = _shape(operand), _shape(update)
    constant = [_window_slice(n, s, k) for s, n, k in zip(starts, shape, sizes)]
    if None not in constant:  # every start constant: a basic index
        return _IndexedRef(operand, tuple(constant)).set(update)
    index = tuple(
        _window_rows(n, s, k).reshape(
            tuple(k if b == a else 1 for b in range(len(shape))))
        for a, (s, n, k) in enumerate(zip(starts, shape, sizes)))
    return _IndexedRef(operand, index).set(update, mode="clip")


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
