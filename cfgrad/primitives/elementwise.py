"""Elementwise primitives (`cfgrad.numpy`'s arithmetic and math functions, and `where` and
`clip`), each entry with its compiled form beside it: most are numpy ufuncs Numba
compiles as they are (`Ufunc`), the others' Numba source is the function just above the
entry. Derivatives are the textbook ones (Abramowitz & Stegun 4.4, 4.6, 9.6.27); the
conventions at kinks and domain edges follow JAX's jax.numpy, except where a note says
otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import LoweringError, Unsupported
from ..ir import TensorType
from .rules import (
    DtypeOf,
    add_terms,
    broadcast_shape,
    elementwise_type,
    int_param,
    mask_like,
    np_dtype,
    np_zero,
    to_out_shape,
    unbroadcast,
)
from .table import (
    UFUNC,
    Compilation,
    Primitive,
    Source,
    Ufunc,
    bind,
    real_dtype,
    register,
)


def _unary(name: str, impl: Callable, deriv: Callable[[Any, Any], Any] | None,
           notes: str = "", promote: str = "float", out_dtype: Any = None,
           real_only: bool = False, compiled: Compilation = UFUNC,
           operator: str | None = None) -> None:
    """deriv(x, out) is the pointwise derivative, written with traced values. For complex
    x it is the complex derivative of a holomorphic function, and `ct * deriv` is then
    JAX's VJP as it stands (the transpose, not the conjugate transpose, of t -> t*deriv).
    An `impl` that is a numpy ufunc compiles as that ufunc unless `compiled` says
    otherwise (tests/primitives/test_primitive_table.py compiles every such entry)."""
    if deriv is None:
        vjp = jvp = None
    else:
        def vjp(ct, xs, out):
            return (ct * deriv(xs[0], out),)

        def jvp(ts, xs, out):
            return None if ts[0] is None else ts[0] * deriv(xs[0], out)

    register(Primitive(name=name, impl=impl, abstract=elementwise_type(name, out_dtype), vjp=vjp,
                       jvp=jvp, family="elementwise",
                       promote=promote, nondiff=deriv is None, notes=notes,
                       real_only=real_only, compiled=compiled, operator=operator))


def _sigmoid_impl(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)


def _relu_impl(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, np.zeros((), x.dtype))


register(Primitive(name="neg", impl=np.negative, abstract=elementwise_type("neg"),
                   vjp=lambda ct, xs, out: (-ct,),
                   jvp=lambda ts, xs, out: None if ts[0] is None else -ts[0],
                   family="elementwise", compiled=Ufunc(operator=True), operator="(-{0})"))
_unary("exp", np.exp, lambda x, y: y)
_unary("log", np.log, lambda x, y: 1.0 / x, "domain x > 0; log(0) = -inf, gradient inf")
_unary("log1p", np.log1p, lambda x, y: 1.0 / (1.0 + x), "domain x > -1; accurate near 0")
_unary("expm1", np.expm1, lambda x, y: y + 1.0, "accurate near 0")
_unary("sin", np.sin, lambda x, y: bind("cos", x))
_unary("cos", np.cos, lambda x, y: -bind("sin", x))
_unary("tan", np.tan, lambda x, y: 1.0 + y * y)
_unary("tanh", np.tanh, lambda x, y: 1.0 - y * y)
_unary("sinh", np.sinh, lambda x, y: bind("cosh", x))
_unary("cosh", np.cosh, lambda x, y: bind("sinh", x))
_unary("arctan", np.arctan, lambda x, y: 1.0 / (1.0 + x * x))
_unary("sqrt", np.sqrt, lambda x, y: 0.5 / y,
       "domain x >= 0; sqrt'(0) = +inf (as in JAX and PyTorch); use a custom_vjp for a "
       "finite value at 0")


def _safe_modulus(out):
    """|z|, with 1 where z = 0: the rules below divide by it, and conj(z) / |z| (the
    phase, written as a differentiable expression of z and |z|, since sign(z) has
    derivative 0 and a rule using it would give wrong second derivatives) is then 0 at
    z = 0, as JAX's. The division is of real numbers, before the complex product."""
    return bind("where", out == 0.0, 1.0, out)


def _abs_vjp(ct, xs, out):
    """|z| of a complex z: d|z| = Re(conj(z) dz) / |z|, whose transpose in JAX's convention
    is ct * conj(z) / |z|."""
    x = xs[0]
    if x.dtype.kind == "c":
        return ((ct / _safe_modulus(out)) * bind("conj", x),)
    return (ct * bind("sign", x),)


def _abs_jvp(ts, xs, out):
    x, t = xs[0], ts[0]
    if x.dtype.kind == "c":
        return bind("real", bind("conj", x) * t) / _safe_modulus(out)
    return t * bind("sign", x)


register(Primitive(
    name="abs", impl=np.abs,
    abstract=lambda types: TensorType(types[0].shape, real_dtype(types[0].dtype)),
    vjp=_abs_vjp, jvp=_abs_jvp, family="elementwise", promote="none", compiled=UFUNC,
    operator="abs({0})",
    notes="abs'(0) = 0 (the minimum-norm subgradient); for complex z the result is real, "
          "d|z| = Re(conj(z)/|z| dz), 0 at z = 0 (as JAX)"))


def _sign_source(args, types, out):
    """numpy's sign(-0.0) is 0.0 (Numba's -0.0): adding a zero makes it so. Numba's sign
    of a uint8 array reads it as signed (200 gives 255): of unsigned integers, the
    smaller of x and 1."""
    if out.dtype.kind == "u":
        return f"np.minimum({args[0]}, {np_dtype(out)}(1))"
    if out.dtype.kind != "f":
        return f"np.sign({args[0]})"
    return f"(np.sign({args[0]}) + {np_zero(out)})"


_unary("sign", np.sign, None, "derivative 0 everywhere (undefined at 0, taken as 0)",
       promote="same", compiled=Source(_sign_source))


def _sigmoid_source(args, types, out):
    return f"K.sigmoid({args[0]}, {np_dtype(out)}(1))"


_unary("sigmoid", _sigmoid_impl, lambda x, y: y * (1.0 - y),
       "computed from exp(-|x|): finite for any input", real_only=True,
       compiled=Source(_sigmoid_source))


def _relu_source(args, types, out):
    return f"K.maximum({args[0]}, {np_zero(out)})"


_unary("relu", _relu_impl, lambda x, y: mask_like(x > 0, x), "relu'(0) = 0", promote="same",
       real_only=True, compiled=Source(_relu_source))


def _softplus_source(args, types, out):
    return f"np.logaddexp({np_zero(out)}, {args[0]})"


_unary("softplus", lambda x: np.logaddexp(np.zeros((), x.dtype), x),
       lambda x, y: bind("sigmoid", x), "log(1 + e^x) via logaddexp: finite for any input",
       real_only=True, compiled=Source(_softplus_source))
_unary("floor", np.floor, None, "derivative 0 (undefined at integers, taken as 0)",
       real_only=True)
_unary("rint", np.rint, None,
       "numpy's rint, halves to the even neighbour: derivative 0 (undefined at halves, taken "
       "as 0)")


def _identity_source(args, types, out):
    return args[0]


register(Primitive(
    name="stop_gradient", impl=lambda x: x[()], abstract=elementwise_type("stop_gradient"),
    family="elementwise",
    promote="none", nondiff=True, compiled=Source(_identity_source),
    notes="the identity whose derivative is taken as 0: no gradient flows through it",
    aliases=True))
_unary("isfinite", np.isfinite, None, promote="none", out_dtype=np.bool_)
_unary("logical_not", np.logical_not, None, promote="none", out_dtype=np.bool_)
_unary("invert", np.invert, None, promote="none", operator="(~{0})")

# ---------------------------------------------------------------------------------
# Elementwise binary
# ---------------------------------------------------------------------------------


def _binary(name: str, impl: Callable, dx: Callable | None, dy: Callable | None,
            notes: str = "", promote: str = "same", out_dtype: Any = None,
            compiled: Compilation = UFUNC, operator: str | None = None) -> None:
    """dx(x, y, out) and dy(x, y, out) are the partial derivatives (full shape); `compiled`
    as `_unary`'s."""
    if dx is None:
        vjp = jvp = None
    else:
        def vjp(ct, xs, out):
            x, y = xs
            return (unbroadcast(ct * dx(x, y, out), x.shape),
                    unbroadcast(ct * dy(x, y, out), y.shape))

        def jvp(ts, xs, out):
            x, y = xs
            return add_terms(None if ts[0] is None else ts[0] * dx(x, y, out),
                              None if ts[1] is None else ts[1] * dy(x, y, out))

    register(Primitive(name=name, impl=impl, abstract=elementwise_type(name, out_dtype), vjp=vjp,
                       jvp=jvp, family="elementwise",
                       promote=promote, nondiff=dx is None, notes=notes, compiled=compiled,
                       operator=operator))


def _add_vjp(ct, xs, out):
    return unbroadcast(ct, xs[0].shape), unbroadcast(ct, xs[1].shape)


def _sub_vjp(ct, xs, out):
    return unbroadcast(ct, xs[0].shape), unbroadcast(-ct, xs[1].shape)


def _mul_vjp(ct, xs, out):
    x, y = xs
    return unbroadcast(ct * y, x.shape), unbroadcast(ct * x, y.shape)


def _div_vjp(ct, xs, out):
    x, y = xs
    gx = ct / y
    return unbroadcast(gx, x.shape), unbroadcast(-gx * out, y.shape)


register(Primitive(name="add", impl=np.add, abstract=elementwise_type("add"), vjp=_add_vjp,
                   jvp=lambda ts, xs, out: to_out_shape(add_terms(*ts), out),
                   family="elementwise", compiled=Ufunc(operator=True), operator="({0} + {1})"))
register(Primitive(name="sub", impl=np.subtract, abstract=elementwise_type("sub"), vjp=_sub_vjp,
                   jvp=lambda ts, xs, out: to_out_shape(
                       add_terms(ts[0], None if ts[1] is None else -ts[1]), out),
                   family="elementwise", compiled=Ufunc(operator=True), operator="({0} - {1})"))
register(Primitive(name="mul", impl=np.multiply, abstract=elementwise_type("mul"), vjp=_mul_vjp,
                   jvp=lambda ts, xs, out: add_terms(None if ts[0] is None else ts[0] * xs[1],
                                                  None if ts[1] is None else xs[0] * ts[1]),
                   family="elementwise", compiled=Ufunc(operator=True), operator="({0} * {1})"))


def _divide_source(args, types, out):
    """`/` (Numba's is numpy's on reals); numpy's own algorithm on complex operands."""
    if out.dtype.kind != "c":
        return f"({args[0]} / {args[1]})"
    real = "np.float32" if out.dtype == np.complex64 else "np.float64"
    value = f"K.complex_divide({args[0]}, {args[1]}, {real}(1))"
    if out.dtype == np.complex128:
        return value
    return f"np.complex64({value})" if out.shape == () else f"{value}.astype(np.complex64)"


register(Primitive(name="div", impl=np.true_divide, abstract=elementwise_type("div"),
                   vjp=_div_vjp,
                   jvp=lambda ts, xs, out: add_terms(
                       None if ts[0] is None else ts[0] / xs[1],
                       None if ts[1] is None else -ts[1] * out / xs[1]),
                   family="elementwise", promote="float",
                   notes="x / 0 gives ±inf or nan, as numpy", operator="({0} / {1})",
                   compiled=Source(_divide_source, elementwise=True)))


def _pow_dy(x, y, out):
    """out * log(x); for complex x on log's principal branch, 0 at x = 0 (as JAX)."""
    if x.dtype.kind == "c":
        return out * bind("log", bind("where", x == 0.0, 1.0, x))
    positive = x > 0
    safe_x = bind("where", positive, x, 1.0)
    return out * bind("log", safe_x) * mask_like(positive, x)


def _pow_dx(x, y, out):
    """y*x^(y-1), and exactly 0 where y == 0 (x^0 is constant; 0*0^-1 would be nan). The
    exponent is 1 rather than -1 where y == 0, so the unselected side is finite and the
    derivatives of this one are too (x^k at x = 0 to any order, as in `vander`)."""
    constant = y == 0.0
    return bind("where", constant, 0.0, y * x ** bind("where", constant, 1.0, y - 1.0))


def _width(value: str, out: Any, computed: type) -> str:
    """`value`, which an integer helper computes in the 64-bit type `computed`, cast to
    `out`'s dtype: the low bits, as numpy's loops wrap in the operands' own width."""
    if out.dtype == computed:
        return value
    return f"{np_dtype(out)}({value})" if out.shape == () else f"{value}.astype({np_dtype(out)})"


def _power_source(args, types, out):
    """numpy's x ** y: on integers by repeated squaring, exact and wrapping, a negative
    exponent of a signed type raising numpy's ValueError (Numba's goes through float64:
    3 ** 35 is off by 3, 2 ** -1 is 0); on floats Numba's, which is C's pow."""
    kind = types[0].dtype.kind
    if kind not in "iu":
        return f"np.power({args[0]}, {args[1]})"
    exponent = args[1] if kind == "u" else f"K.nonnegative_exponents({args[1]})"
    return _width(f"K.int_power({args[0]}, {exponent})", out, np.uint64)


_binary("pow", np.power, _pow_dx, _pow_dy,
        "d/dy is taken as 0 where x <= 0 (log x undefined); d/dx follows y*x^(y-1), and is "
        "0 where y == 0 (also at x = 0, as JAX); int ** int stays integer, as numpy, and "
        "bool ** bool is int8, numpy's",
        out_dtype=DtypeOf(lambda dtype: np.dtype(np.int8) if dtype == np.bool_ else dtype),
        compiled=Source(_power_source))


def square_and_multiply(x: Any, n: int) -> Any:
    """x ** n for an integer n >= 1 by repeated squaring, as JAX's integer_pow: exact for
    integers, defined for negative bases, a few multiplications instead of pow(). The one
    chain of multiplications integer_pow is computed by: its numpy implementation runs it
    on arrays, the interpreter and the compiled code write it out as source (`_Product`),
    and compiled code past n = 16 calls Numba's compile of it (`kernels.integer_pow`), so
    all of them multiply the same operands in the same order and round alike."""
    result = x
    have = False
    base = x
    while n:
        if n & 1:
            result = base if not have else result * base
            have = True
        n >>= 1
        if n:
            base = base * base
    return result


class _Product:
    """The source of a value that `*` writes out: `square_and_multiply` of one gives the
    source of its chain, `((x * x) * x)`."""

    def __init__(self, source: str):
        self.source = source

    def __mul__(self, other: _Product) -> _Product:
        return _Product(f"({self.source} * {other.source})")


def _integer_pow_impl(x: np.ndarray, n: int) -> np.ndarray:
    if n < 0:
        return 1 / _integer_pow_impl(x, -n)
    return np.ones_like(x) if n == 0 else square_and_multiply(x, n)


def _integer_pow_inline(args: list[str], n: int) -> str | None:
    """The interpreter's source for x ** n with 2 <= n <= 4 (x*x*x: no call at all)."""
    return square_and_multiply(_Product(args[0]), n).source if 2 <= n <= 4 else None


def _integer_pow_source(args, types, out, n):
    """x ** |n| by the chain written out up to n = 16 (`K.integer_pow` past it: the
    source doubles in length with each squaring), and for a negative n its reciprocal, 1
    of the result's dtype over it (a bare 1 is an int64 to Numba, which would make a
    float32 quotient a float64)."""
    one = f"np.{out.dtype.name}(1)"
    if n == 0:  # ones, whatever x holds (numpy's ones_like)
        return one if out.shape == () else f"np.ones({out.shape}, np.{out.dtype.name})"
    k = abs(n)
    power = (square_and_multiply(_Product(args[0]), k).source if k <= 16
             else f"K.integer_pow({args[0]}, {k})")
    return power if n > 0 else f"({one} / {power})"


def _integer_pow_slope(x, n):
    return float(n) * bind("integer_pow", x, n=n - 1) if n != 1 else 1.0 + 0.0 * x


def _integer_pow_type(types: list[TensorType], n: int) -> TensorType:
    """x ** n keeps x's type, except that a negative power of an integer is a float64."""
    n = int_param("integer_pow", "n", n)
    return types[0] if types[0].dtype.kind in "fc" or n >= 0 else TensorType(
        types[0].shape, np.dtype(np.float64))


register(Primitive(
    name="integer_pow", impl=_integer_pow_impl, abstract=_integer_pow_type,
    vjp=lambda ct, xs, out, n: (ct * _integer_pow_slope(xs[0], n),),
    jvp=lambda ts, xs, out, n: None if ts[0] is None else ts[0] * _integer_pow_slope(xs[0], n),
    family="elementwise", promote="none", compiled=Source(_integer_pow_source),
    operator=_integer_pow_inline,
    notes="x ** n for a Python integer n: repeated multiplication (as JAX's integer_pow), "
          "so negative bases are fine; d/dx = n x^(n-1)"))


# -- Elementwise family (issue 13): inverse trigonometric and hyperbolic functions, the
# base-2/base-10 exponentials and logarithms, cube root, sinc, Bessel's I0 (and I1, its
# derivative), logaddexp, hypot, arctan2, fmod, ceil, trunc, signbit. Derivatives are the
# textbook ones (Abramowitz & Stegun 4.4, 4.6, 9.6.27); the conventions at kinks and domain
# edges follow JAX's jax.numpy, except where a note says otherwise.

_LN2, _LN10 = float(np.log(2.0)), float(np.log(10.0))

_unary("arcsin", np.arcsin, lambda x, y: 1.0 / bind("sqrt", (1.0 - x) * (1.0 + x)),
       "domain -1 <= x <= 1; derivative +inf at ±1, as JAX")
_unary("arccos", np.arccos, lambda x, y: -1.0 / bind("sqrt", (1.0 - x) * (1.0 + x)),
       "domain -1 <= x <= 1; derivative -inf at ±1, as JAX")
_unary("arcsinh", np.arcsinh, lambda x, y: 1.0 / bind("hypot", x, 1.0),
       "derivative 1/hypot(x, 1): no overflow for large |x|")
_unary("arccosh", np.arccosh,
       lambda x, y: 1.0 / (bind("sqrt", x - 1.0) * bind("sqrt", x + 1.0)),
       "domain x >= 1; derivative +inf at 1, as JAX")
_unary("arctanh", np.arctanh, lambda x, y: 1.0 / ((1.0 - x) * (1.0 + x)),
       "domain -1 < x < 1; derivative +inf at ±1, as JAX")
_unary("cbrt", np.cbrt, lambda x, y: 1.0 / (3.0 * y * y),
       "real cube root, negative for negative x; derivative +inf at 0, as JAX")
_unary("exp2", np.exp2, lambda x, y: y * _LN2)
_unary("log2", np.log2, lambda x, y: 1.0 / (x * _LN2), "domain x > 0, as log")
_unary("log10", np.log10, lambda x, y: 1.0 / (x * _LN10), "domain x > 0, as log")


def _sinc_slope(x, y):
    """sinc'(x) = (cos(pi x) - sinc(x)) / x, which cancels near 0: within 0.01 of it, the
    Maclaurin series -pi^2 x/3 + pi^4 x^3/30 - pi^6 x^5/840 instead, whose own derivative
    at 0 is sinc''(0) = -pi^2/3 (a `where` between the two: derivatives of any order are
    right at 0, as JAX's)."""
    near = bind("abs", x) < 0.01
    safe = bind("where", near, 1.0, x)
    general = (bind("cos", np.pi * safe) - y) / safe
    x2 = x * x
    series = x * (-np.pi ** 2 / 3.0 + x2 * (np.pi ** 4 / 30.0 - x2 * (np.pi ** 6 / 840.0)))
    return bind("where", near, series, general)


def _special_source(name: str) -> Source:
    """numpy computes these in Python (np.sinc, np.i0) or in `_i1_impl`'s series, not as
    ufuncs: the compiled form is the same formula entry by entry (`K.sinc`, `K.i0`,
    `K.i1`), in the operand's float dtype where numpy computes in it."""
    def write(args, types, out):
        if types[0].dtype.kind != "f":
            raise Unsupported(f"{name} of {types[0]} (compiled: real floats)")
        return f"K.{name}({args[0]})"

    return Source(write)


_unary("sinc", np.sinc, _sinc_slope,
       "sin(pi x) / (pi x), 1 at 0; derivative 0 at 0 (and -pi^2/3 for the second), "
       "from its Maclaurin series near 0, as JAX", compiled=_special_source("sinc"))


def _i1_impl(x: np.ndarray) -> np.ndarray:
    """Bessel's I1 (Abramowitz & Stegun 9.6.10): (x/2) * sum_k (x^2/4)^k / (k! (k+1)!).
    Every term is positive (no cancellation), so the sum is accurate for any x; it runs
    until the terms stop changing it (about |x|/2 + 20 terms), in float64."""
    z = np.asarray(x, np.float64)
    term = z / 2.0
    total = term.copy()
    quarter = z * z / 4.0
    k = 0
    with np.errstate(over="ignore", invalid="ignore"):
        while np.any(np.abs(term) > 1e-17 * np.abs(total)) and k < 2000:
            term = term * quarter / ((k + 1) * (k + 2))
            total = total + term
            k += 1
    return total.astype(x.dtype, copy=False)


def _i1_slope(x, y):
    """I1'(x) = I0(x) - I1(x)/x (A&S 9.6.27), and 1/2 at 0."""
    zero = x == 0.0
    return bind("i0", x) - bind("where", zero, 0.5, y / bind("where", zero, 1.0, x))


# real only: numpy's i0 refuses complex input, and _i1_impl's sum is of real numbers
_unary("i0", np.i0, lambda x, y: bind("i1", x),
       "modified Bessel function of the first kind, order 0; derivative I1(x)", real_only=True,
       compiled=_special_source("i0"))
_unary("i1", _i1_impl, _i1_slope,
       "modified Bessel function of the first kind, order 1 (the derivative of i0; not in "
       "cfgrad.numpy); derivative I0(x) - I1(x)/x, 1/2 at 0", real_only=True,
       compiled=_special_source("i1"))
_unary("ceil", np.ceil, None, "derivative 0 (undefined at integers, taken as 0)")
_unary("trunc", np.trunc, None, "derivative 0 (undefined at integers, taken as 0)")
_unary("signbit", np.signbit, None, promote="none", out_dtype=np.bool_)


def _safe_ratio(x, out):
    """x / out, and 0 where out == 0."""
    zero = out == 0.0
    return bind("where", zero, 0.0, x / bind("where", zero, 1.0, out))


_binary("arctan2", np.arctan2, lambda y, x, out: x / (x * x + y * y),
        lambda y, x, out: -y / (x * x + y * y),
        "arctan2(y, x): d/dy = x / (x^2 + y^2), d/dx = -y / (x^2 + y^2); nan at (0, 0), "
        "as JAX", promote="float")
_binary("hypot", np.hypot, lambda x, y, out: _safe_ratio(x, out),
        lambda x, y, out: _safe_ratio(y, out),
        "d/dx = x / hypot(x, y); 0 at (0, 0), the minimum-norm subgradient, as a norm's "
        "gradient at 0 (JAX gives 1/2 each there)", promote="float")
_binary("logaddexp", np.logaddexp, lambda x, y, out: bind("exp", x - out),
        lambda x, y, out: bind("exp", y - out),
        "log(e^x + e^y) without overflow; d/dx = e^(x - out); nan where x = y = ±inf",
        promote="float")
_binary("logaddexp2", np.logaddexp2, lambda x, y, out: bind("exp2", x - out),
        lambda x, y, out: bind("exp2", y - out),
        "log2(2^x + 2^y) without overflow; d/dx = 2^(x - out); nan where x = y = ±inf",
        promote="float")


def _fmod_type(types: list[TensorType]) -> TensorType:
    """As mod's: bools are computed in int8 (the rule is defined further down)."""
    return _integer_division_type("fmod")(types)


def _truncated_quotient(x, y):
    return bind("trunc", x / y)


def _division(name: str, ufunc: str, signed: str | None, real: str | None) -> Any:
    """The source of a division-like primitive: `K.<signed>` on signed integers, `K.<real>`
    on floats (numpy's algorithm, kernels.py says where Numba's differs), and Numba's
    `np.<ufunc>` on unsigned integers and bools, which is numpy's."""
    def write(args, types, out):
        kind = types[0].dtype.kind
        if kind == "i" and signed is not None:
            return _width(f"K.{signed}({', '.join(args)})", out, np.int64)
        if kind == "f" and real is not None:
            return f"K.{real}({', '.join(args)}, {np_dtype(out)}(1))"
        return f"np.{ufunc}({', '.join(args)})"

    write.__name__ = name
    write.__doc__ = f"numpy's {ufunc}, which x86 and Numba differ from at edge operands"
    return write


_fmod_source = _division("fmod", "fmod", "int_fmod", None)


register(Primitive(
    name="fmod", impl=np.fmod, abstract=_fmod_type,
    vjp=lambda ct, xs, out: (unbroadcast(ct, xs[0].shape),
                             unbroadcast(-ct * _truncated_quotient(*xs), xs[1].shape)),
    jvp=lambda ts, xs, out: to_out_shape(add_terms(
        ts[0], None if ts[1] is None else -ts[1] * _truncated_quotient(*xs)), out),
    family="elementwise", compiled=Source(_fmod_source, elementwise=True),
    notes="C's fmod, the sign of x: x - trunc(x/y)*y, exact; d/dx = 1, d/dy = -trunc(x/y), "
          "as JAX; undefined where x/y is an integer (a jump)"))


def _tie_mask(x, y, out, wins):
    return mask_like(wins, x) + 0.5 * mask_like(x == y, x)


def _helper_source(name: str, doc: str) -> Callable[..., str]:
    """The source calling `K.<name>` on the operands: kernels.py's function computing the
    primitive as numpy does, where Numba's function of that name differs."""
    def write(args, types, out):
        return f"K.{name}({', '.join(args)})"

    write.__doc__ = doc
    return write


_maximum_source = _helper_source("maximum", "numpy's: the second operand on a tie "
                                            "(max(-0.0, 0.0) is 0.0), NaN from either")
_minimum_source = _helper_source("minimum", "numpy's: the second operand on a tie, NaN from "
                                            "either")


_binary("maximum", np.maximum, lambda x, y, out: _tie_mask(x, y, out, x > y),
        lambda x, y, out: _tie_mask(y, x, out, y > x), "ties split the gradient 1/2 : 1/2",
        compiled=Source(_maximum_source))
_binary("minimum", np.minimum, lambda x, y, out: _tie_mask(x, y, out, x < y),
        lambda x, y, out: _tie_mask(y, x, out, y < x), "ties split the gradient 1/2 : 1/2",
        compiled=Source(_minimum_source))
for _name, _fn, _symbol in [("lt", np.less, "<"), ("le", np.less_equal, "<="),
                            ("gt", np.greater, ">"), ("ge", np.greater_equal, ">="),
                            ("eq", np.equal, "=="), ("ne", np.not_equal, "!=")]:
    _binary(_name, _fn, None, None, "comparison: no derivative", out_dtype=np.bool_,
            compiled=Ufunc(operator=True), operator=f"({{0}} {_symbol} {{1}})")
for _name, _fn in [("logical_and", np.logical_and), ("logical_or", np.logical_or),
                   ("logical_xor", np.logical_xor)]:
    _binary(_name, _fn, None, None, "logical: no derivative", promote="none",
            out_dtype=np.bool_)
for _name, _fn, _symbol in [("bitwise_and", np.bitwise_and, "&"),
                            ("bitwise_or", np.bitwise_or, "|"),
                            ("bitwise_xor", np.bitwise_xor, "^")]:
    _binary(_name, _fn, None, None, "bitwise on bool/int: no derivative",
            operator=f"({{0}} {_symbol} {{1}})")


def _integer_division_type(op: str) -> Callable[..., TensorType]:
    """x // y and x % y keep the operands' dtype; numpy computes them for bools in int8."""
    def rule(types: list[TensorType]) -> TensorType:
        dtype = types[-1].dtype
        return TensorType(broadcast_shape(types, op),
                          np.dtype(np.int8) if dtype == np.bool_ else dtype)

    return rule


def _mod_quotient(x, y):
    return bind("floor", x / y)


# Integer operands stay integers: numpy's int64 // and % are exact (2**60 + 1 // 3) and give
# 0 for a zero divisor, which a detour through float64 (floor(x / y)) does not.
_floor_divide_source = _division("floor_divide", "floor_divide", "int_floor_divide",
                                 "float_floor_divide")


register(Primitive(
    name="floor_divide", impl=np.floor_divide, abstract=_integer_division_type("floor_divide"),
    family="elementwise", nondiff=True, real_only=True,
    compiled=Source(_floor_divide_source, elementwise=True),
    notes="numpy's floor division, exact for integers: derivative 0 (undefined where x/y is "
          "an integer, taken as 0)"))


_remainder_source = _division("remainder", "remainder", "int_remainder", "float_remainder")


register(Primitive(
    name="mod", impl=np.mod, abstract=_integer_division_type("mod"),
    vjp=lambda ct, xs, out: (unbroadcast(ct, xs[0].shape),
                         unbroadcast(-ct * _mod_quotient(*xs), xs[1].shape)),
    jvp=lambda ts, xs, out: to_out_shape(add_terms(
        ts[0], None if ts[1] is None else -ts[1] * _mod_quotient(*xs)), out),
    family="elementwise", real_only=True, compiled=Source(_remainder_source, elementwise=True),
    operator="({0} % {1})",
    notes="x - floor(x/y)*y (numpy's sign convention): d/dx = 1, d/dy = -floor(x/y); "
          "undefined where x/y is an integer (a jump)"))

# ---------------------------------------------------------------------------------
# Selection
# ---------------------------------------------------------------------------------


def _where_type(types: list[TensorType]) -> TensorType:
    if types[0].dtype != np.bool_:
        raise LoweringError(f"where: the condition must be bool, got {types[0]}")
    if types[1].dtype != types[2].dtype:
        raise LoweringError(f"where: branches differ in dtype: {types[1]} vs {types[2]}")
    return TensorType(broadcast_shape(types, "where"), types[1].dtype)


def _where_impl(c, x, y):
    return np.where(c, x, y)


def _where_vjp(ct, xs, out):
    c, x, y = xs
    return (None, unbroadcast(bind("where", c, ct, 0.0), x.shape),
            unbroadcast(bind("where", c, 0.0, ct), y.shape))


def _where_jvp(ts, xs, out):
    if ts[1] is None and ts[2] is None:
        return None
    c = xs[0]
    tx = ts[1] if ts[1] is not None else 0.0
    ty = ts[2] if ts[2] is not None else 0.0
    return bind("broadcast_to", bind("where", c, tx, ty), shape=out.shape)


def _where_source(args, types, out):
    if out.shape == ():
        return f"({args[1]} if {args[0]} else {args[2]})"
    return f"K.select({args[0]}, {args[1]}, {args[2]})"


register(Primitive(name="where", impl=_where_impl, abstract=_where_type, vjp=_where_vjp,
                   jvp=_where_jvp, family="selection", compiled=Source(_where_source),
                   promote_from=1, dynamic=(0,),
                   notes="only the selected input receives gradient; the other gets exactly 0, "
                         "which its own rule can still turn into nan (0 * inf: where(x > 0, "
                         "sqrt(x), 0) at x = 0, as in JAX); use cond, which never runs the "
                         "untaken branch"))


def _clip_type(types: list[TensorType]) -> TensorType:
    return TensorType(broadcast_shape(types, "clip"), types[0].dtype)


def _clip_vjp(ct, xs, out):
    x, lo, hi = xs
    inside = bind("logical_and", x >= lo, x <= hi)
    return (unbroadcast(ct * mask_like(inside, ct), x.shape),
            unbroadcast(ct * mask_like(x < lo, ct), lo.shape),
            unbroadcast(ct * mask_like(x > hi, ct), hi.shape))


def _clip_jvp(ts, xs, out):
    x, lo, hi = xs
    inside = bind("logical_and", x >= lo, x <= hi)
    return add_terms(None if ts[0] is None else ts[0] * mask_like(inside, out),
                      None if ts[1] is None else ts[1] * mask_like(x < lo, out),
                      None if ts[2] is None else ts[2] * mask_like(x > hi, out))


def _clip_source(args, types, out):
    if out.shape == ():
        return f"K.clip_scalar({args[0]}, {args[1]}, {args[2]})"
    return f"K.clip({args[0]}, {args[1]}, {args[2]})"


register(Primitive(name="clip", impl=np.clip, abstract=_clip_type, vjp=_clip_vjp, jvp=_clip_jvp,
                   family="selection", real_only=True, compiled=Source(_clip_source),
                   notes="at a bound (x == lo or x == hi) the gradient goes to x (1), as "
                         "PyTorch's clamp; lo/hi get it only where x is strictly outside"))

