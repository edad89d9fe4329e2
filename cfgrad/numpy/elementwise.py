"""`cfgrad.numpy`'s elementwise math beyond the operators' arithmetic of `core`: inverse
trigonometric and hyperbolic functions, base-2/base-10 exponentials and logarithms, the
floating-point functions (`copysign`, `fmod`, `modf`, `ldexp`, `nan_to_num`, …) and the
float predicates (`isnan`, `isclose`, `array_equal`, …).

Each is a primitive of the derivative table where its numpy kernel is exact or its
derivative needs a convention of its own (`arcsin`, `cbrt`, `sinc`, `hypot`, `fmod`, …),
and otherwise a composition of primitives whose rules give JAX's derivative (`copysign`
is a `where` of `abs`, `fmax` a `where` that passes the gradient to the argument it
picks). Integer and bool inputs are computed in float64 where numpy does, and returned
as they are by the functions that leave whole numbers whole (`ceil`, `trunc`).
"""

from __future__ import annotations

from typing import Any

import numpy as _np

from ..errors import ArgumentTypeError
from ..primitives import bind
from ..trace_context import is_traced
from .core import (
    _array,
    _dtype,
    _make_rounding,
    _make_unary,
    _shape,
    _weakly_typed,
    abs,
    all,
    astype,
    floor_divide,
    isfinite,
    logical_and,
    logical_or,
    mod,
    public_names,
    where,
)

arcsin, arccos, arcsinh, arccosh, arctanh, cbrt, exp2, log2, log10, sinc, i0, signbit = (
    _make_unary(name, __name__) for name in ("arcsin", "arccos", "arcsinh", "arccosh",
                                             "arctanh", "cbrt", "exp2", "log2", "log10",
                                             "sinc", "i0", "signbit"))
asin, acos, asinh, acosh, atanh = arcsin, arccos, arcsinh, arccosh, arctanh
ceil, trunc = _make_rounding("ceil", __name__), _make_rounding("trunc", __name__)


def _inexact(x: Any) -> Any:
    """`x` as an inexact value: bool and integer arrays in float64 (as numpy computes
    them), Python bools and ints as Python floats (weakly typed, as JAX), float and complex
    values as they are (a complex value cast to float64 would lose its imaginary part)."""
    if isinstance(x, bool | int):
        return float(x)
    if isinstance(x, float | complex):
        return x
    x = _array(x)
    return x if x.dtype.kind in "fc" else astype(x, _np.float64)


def arctan2(x1: Any, x2: Any) -> Any:
    """The angle of the point (x2, x1), in [-pi, pi]; its derivative is nan at (0, 0),
    as JAX's."""
    return bind("arctan2", x1, x2)


atan2 = arctan2


def hypot(x1: Any, x2: Any) -> Any:
    """sqrt(x1^2 + x2^2) without overflow; its gradient at (0, 0) is 0, as a norm's."""
    return bind("hypot", x1, x2)


def logaddexp(x1: Any, x2: Any) -> Any:
    """log(exp(x1) + exp(x2)), finite where the exponentials overflow."""
    return bind("logaddexp", x1, x2)


def logaddexp2(x1: Any, x2: Any) -> Any:
    """log2(2**x1 + 2**x2), finite where the powers overflow."""
    return bind("logaddexp2", x1, x2)


def fmod(x1: Any, x2: Any) -> Any:
    """C's remainder, with the sign of `x1` (`cnp.mod` takes `x2`'s): exact, integers
    stay integers; d/dx2 = -trunc(x1 / x2), as JAX."""
    return bind("fmod", x1, x2)


def fabs(x: Any) -> Any:
    """|x| as a float (integers in float64, as numpy)."""
    return abs(_inexact(x))


def positive(x: Any) -> Any:
    """+x: the value itself (numpy copies it; traced values are immutable anyway)."""
    return x if is_traced(x) else _np.positive(_np.asarray(x))


def deg2rad(x: Any) -> Any:
    """Degrees to radians, `x * pi / 180` (integers in float64)."""
    return _inexact(x) * (_np.pi / 180.0)


def rad2deg(x: Any) -> Any:
    """Radians to degrees, `x * 180 / pi` (integers in float64)."""
    return _inexact(x) * (180.0 / _np.pi)


radians, degrees = deg2rad, rad2deg


def copysign(x1: Any, x2: Any) -> Any:
    """|x1| with the sign bit of x2, as JAX's `where(signbit(x2), -|x1|, |x1|)`: the
    derivative in x1 is ±sign(x1) (0 at x1 = 0, as `abs`), and 0 in x2."""
    magnitude = abs(_weakly_typed(_inexact(x1), x2)[0])
    return where(signbit(x2), -magnitude, magnitude)


def divmod(x1: Any, x2: Any) -> tuple[Any, Any]:
    """(x1 // x2, x1 % x2), numpy's floor division and the remainder with x2's sign."""
    return floor_divide(x1, x2), mod(x1, x2)


def float_power(x1: Any, x2: Any) -> Any:
    """x1 ** x2 computed in floating point: integers in float64; float32 stays float32, as
    JAX (numpy computes every dtype in float64). The derivative is `pow`'s."""
    return bind("pow", _inexact(x1), _inexact(x2))


def fmax(x1: Any, x2: Any) -> Any:
    """The larger of x1 and x2, ignoring a nan in one of them: JAX's `where(x1 > x2 or
    x2 is nan, x1, x2)`, so at a tie the whole gradient goes to x2."""
    x1, x2 = (_array(x) for x in _weakly_typed(x1, x2))
    return where(logical_or(x1 > x2, isnan(x2)), x1, x2)


def fmin(x1: Any, x2: Any) -> Any:
    """The smaller of x1 and x2, ignoring a nan in one of them; at a tie the gradient goes
    to x2, as JAX's."""
    x1, x2 = (_array(x) for x in _weakly_typed(x1, x2))
    return where(logical_or(x1 < x2, isnan(x2)), x1, x2)


def heaviside(x1: Any, x2: Any) -> Any:
    """0 where x1 < 0, 1 where x1 > 0 and x2 where x1 == 0 (integers in float64)."""
    x1, x2 = _weakly_typed(_inexact(x1), _inexact(x2))
    return where(x1 < 0, 0.0, where(x1 > 0, 1.0, x2))


def ldexp(x1: Any, x2: Any) -> Any:
    """x1 * 2**x2 for integer exponents x2: exact (a power of two), differentiable in x1."""
    if _dtype(x2).kind not in "biu":
        raise ArgumentTypeError(f"cnp.ldexp: the exponent x2 must be an integer array or "
                                f"number, got {_dtype(x2)}; for a float exponent write "
                                "x1 * cnp.exp2(x2)")
    x1 = _inexact(x1)
    dtype = _np.float64 if isinstance(x1, float) else _dtype(x1)
    return x1 * astype(exp2(x2), dtype)


def modf(x: Any) -> tuple[Any, Any]:
    """(fractional part, integral part), both with x's sign: `x - trunc(x)` and `trunc(x)`,
    as JAX (so the fractional part of ±inf is nan, where numpy gives ±0). The derivative
    goes to the fractional part."""
    x = _inexact(x)
    whole = trunc(x)
    return x - whole, whole


def isnan(x: Any) -> Any:
    """x != x: true only for nan."""
    x = _array(x)
    return x != x


def isinf(x: Any) -> Any:
    """|x| == inf."""
    return abs(x) == _np.inf


def isposinf(x: Any) -> Any:
    """x == +inf."""
    return _array(x) == _np.inf


def isneginf(x: Any) -> Any:
    """x == -inf."""
    return _array(x) == -_np.inf


def nan_to_num(x: Any, copy: bool = True, nan: float = 0.0, posinf: float | None = None,
               neginf: float | None = None) -> Any:
    """nan, +inf and -inf replaced by `nan`, `posinf` and `neginf` (by default 0 and the
    largest finite numbers of x's dtype); integers and bools are returned as they are. The
    derivative is 1 at finite entries and 0 at replaced ones."""
    if _dtype(x).kind in "biu":
        return x if is_traced(x) else _np.array(x, copy=copy)
    info = _np.finfo(_dtype(x))
    high = info.max if posinf is None else posinf
    low = info.min if neginf is None else neginf
    out = where(isnan(x), nan, x)
    return where(isposinf(x), high, where(isneginf(x), low, out))


def isclose(a: Any, b: Any, rtol: float = 1e-05, atol: float = 1e-08,
            equal_nan: bool = False) -> Any:
    """|a - b| <= atol + rtol * |b| for finite entries; infinities are close only to an
    equal infinity, and nan to nothing (to nan with `equal_nan`). Integers are compared
    in float64, as numpy does."""
    a, b = _inexact(a), _inexact(b)
    with _np.errstate(invalid="ignore"):  # inf - inf, in the entries `where` drops
        close = where(logical_and(isfinite(a), isfinite(b)),
                      abs(a - b) <= atol + rtol * abs(b), a == b)
    if equal_nan:
        close = logical_or(close, logical_and(isnan(a), isnan(b)))
    return close


def allclose(a: Any, b: Any, rtol: float = 1e-05, atol: float = 1e-08,
             equal_nan: bool = False) -> Any:
    """Whether `isclose` holds everywhere: a bool scalar (traced under a trace, as JAX)."""
    return all(isclose(a, b, rtol, atol, equal_nan))


def array_equal(a1: Any, a2: Any, equal_nan: bool = False) -> Any:
    """Whether a1 and a2 have one shape and equal entries (nan equal to nan with
    `equal_nan`): False for different shapes, else a bool scalar (traced under a trace)."""
    a1, a2 = _array(a1), _array(a2)
    if _shape(a1) != _shape(a2):
        return False
    equal = a1 == a2
    if equal_nan:
        equal = logical_or(equal, logical_and(isnan(a1), isnan(a2)))
    return all(equal)


__all__ = public_names(globals(), __name__)
