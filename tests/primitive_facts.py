"""Facts about each primitive that several test files need, in one table: data, no logic.

`FACTS` has a row per primitive of cfgrad/primitives/' `PRIMITIVES`:

- `exactness`: how the Numba backend (cfgrad/native.py) computes it against numpy, where
  the entry declares a compiled form (`Primitive.compiled`: which entries have none, and
  why, is the entry's declaration, not a fact of this table): "bitwise" (the same IEEE
  operations: arithmetic, comparisons, selections, shape operations, indexing, sums in
  numpy's order) or "ulps" (a math library's function, or BLAS and LAPACK: a few units in
  the last place); None for an entry without one. Read by tests/primitives/test_kernels.py,
  which checks each claim (the LAPACK entries': tests/jit/test_jit_linalg.py).
- `domain`: the interval real inputs of the first operand are drawn from where the
  primitive is smooth and finite (inside its domain, away from poles and branch cuts);
  `None`: any moderate value. Read by tests/primitives/test_primitives.py (hypothesis
  inputs) and tests/primitives/test_kernels.py (which of its inputs are positive).
- `adjoint_only`: emitted only by the reverse builder, never reachable from
  `cfgrad.numpy` (tested through the adjoints that use them).

`KINKS` and `EXTREMES` hold the documented derivatives at kinks and the stable
primitives' values at extreme inputs (docs/numerics.md), checked by
tests/primitives/test_primitives.py and listed against the page by
tests/primitives/test_subgradients.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

import cfgrad as cg
import cfgrad.numpy as cnp


@dataclass(frozen=True)
class Facts:
    exactness: str | None  # "bitwise", "ulps", or None: no compiled form
    domain: tuple[float, float] | None = None
    adjoint_only: bool = False


BITWISE, ULPS = Facts("bitwise"), Facts("ulps")
UNCOMPILED = Facts(None)
POSITIVE = (0.1, 3.0)

FACTS: dict[str, Facts] = {
    # elementwise, one operand
    "neg": BITWISE, "abs": BITWISE, "sign": BITWISE, "relu": BITWISE, "floor": BITWISE,
    "rint": BITWISE, "ceil": BITWISE, "trunc": BITWISE, "sqrt": Facts("bitwise", POSITIVE),
    "stop_gradient": BITWISE, "isfinite": BITWISE, "signbit": BITWISE,
    "logical_not": BITWISE, "invert": BITWISE, "integer_pow": BITWISE,
    "exp": ULPS, "log": Facts("ulps", POSITIVE), "log1p": Facts("ulps", (-0.9, 3.0)),
    "expm1": ULPS, "sin": Facts("ulps", (-3.0, 3.0)), "cos": Facts("ulps", (-3.0, 3.0)),
    "tan": Facts("ulps", (-1.2, 1.2)), "tanh": ULPS, "sinh": ULPS, "cosh": ULPS,
    "arctan": ULPS, "sigmoid": Facts("ulps", (-5.0, 5.0)),
    "softplus": Facts("ulps", (-5.0, 5.0)), "arcsin": Facts("ulps", (-0.9, 0.9)),
    "arccos": Facts("ulps", (-0.9, 0.9)), "arcsinh": ULPS, "arccosh": Facts("ulps", (1.1, 3.0)),
    "arctanh": Facts("ulps", (-0.9, 0.9)), "cbrt": ULPS, "exp2": ULPS,
    "log2": Facts("ulps", POSITIVE), "log10": Facts("ulps", POSITIVE),
    # numpy's formulas entry by entry (kernels.py): i1's series and float64 sinc bitwise;
    # i0's exp and float32 sinc's sin are the math library's (measured: i0 within 3 ulps
    # in float64 and 4 in float32 over [-30, 30], float32 sinc within 2)
    "sinc": ULPS, "i0": Facts("ulps", (-4.0, 4.0)), "i1": Facts("bitwise", (-4.0, 4.0)),
    # elementwise, two or three operands
    "add": BITWISE, "sub": BITWISE, "mul": BITWISE, "div": BITWISE, "fmod": BITWISE,
    "maximum": BITWISE, "minimum": BITWISE, "lt": BITWISE, "le": BITWISE, "gt": BITWISE,
    "ge": BITWISE, "eq": BITWISE, "ne": BITWISE, "floor_divide": BITWISE, "mod": BITWISE,
    "logical_and": BITWISE, "logical_or": BITWISE, "logical_xor": BITWISE,
    "bitwise_and": BITWISE, "bitwise_or": BITWISE, "bitwise_xor": BITWISE,
    "pow": Facts("ulps", (0.3, 2.0)), "arctan2": ULPS, "hypot": ULPS, "logaddexp": ULPS,
    "logaddexp2": ULPS, "where": BITWISE, "clip": BITWISE,
    # reductions and statistics
    "sum": BITWISE, "mean": BITWISE, "amax": BITWISE, "amin": BITWISE, "prod": BITWISE,
    "logsumexp": Facts("ulps", (-3.0, 3.0)), "cumsum": BITWISE, "cumprod": BITWISE,
    "argmax": BITWISE, "argmin": BITWISE,
    "sort": BITWISE, "argsort": BITWISE, "searchsorted": BITWISE,
    # linear algebra
    # (BLAS and LAPACK: SciPy's build compiled, numpy's interpreted; tests/jit/
    # test_jit_linalg.py checks the LAPACK entries)
    "matmul": ULPS, "einsum": ULPS, "solve": ULPS, "cholesky": ULPS, "eigh": ULPS,
    "eig": ULPS, "svd": ULPS, "qr": ULPS, "det": ULPS, "slogdet": ULPS, "pinv": ULPS,
    # shapes, indexing, dtypes, constants
    "reshape": BITWISE, "transpose": BITWISE, "broadcast_to": BITWISE,
    "concatenate": BITWISE, "index": BITWISE, "scatter_add": BITWISE, "roll": BITWISE,
    "astype": BITWISE, "const": BITWISE, "write_row": BITWISE, "scatter": UNCOMPILED,
    # complex numbers and fft
    "real": BITWISE, "imag": BITWISE, "conj": BITWISE, "angle": ULPS,
    "fft": BITWISE, "rfft": BITWISE, "irfft": BITWISE,
    # in-place accumulation of the reverse pass
    "copy": Facts("bitwise", adjoint_only=True), "accumulate": Facts("bitwise", adjoint_only=True),
    "accumulate_outer": Facts("ulps", adjoint_only=True),
    "accumulate_index": Facts("bitwise", adjoint_only=True),
    # custom rules, callbacks and nested transformations
    "custom_vjp": UNCOMPILED, "custom_jvp": UNCOMPILED, "debug_callback": UNCOMPILED,
    "call": UNCOMPILED, "vjp_call": UNCOMPILED,
}

ARR = np.array
KINKS = [
    # (id, f, args, expected gradient w.r.t. every argument)
    ("abs'(0)=0", cnp.abs, (ARR([0.0, -1.0, 2.0]),), (ARR([0.0, -1.0, 1.0]),)),
    ("relu'(0)=0", cnp.relu, (ARR([0.0, -1.0, 2.0]),), (ARR([0.0, 0.0, 1.0]),)),
    ("sign'=0", cnp.sign, (ARR([0.0, -1.0, 2.0]),), (ARR([0.0, 0.0, 0.0]),)),
    ("floor'=0", cnp.floor, (ARR([1.0, -0.5]),), (ARR([0.0, 0.0]),)),
    ("maximum tie", cnp.maximum, (1.0, 1.0), (0.5, 0.5)),
    ("minimum tie", cnp.minimum, (1.0, 1.0), (0.5, 0.5)),
    ("maximum broadcast ties", cnp.maximum, (ARR([1.0, 2.0, 1.0]), 1.0),
     (ARR([0.5, 1.0, 0.5]), 1.0)),
    ("minimum broadcast ties", cnp.minimum, (ARR([1.0, 2.0, 1.0]), 1.0),
     (ARR([0.5, 0.0, 0.5]), 2.0)),
    ("amax ties share", cnp.amax, (ARR([1.0, 3.0, 3.0, 3.0]),), (ARR([0, 1, 1, 1]) / 3,)),
    ("amin ties share", cnp.amin, (ARR([1.0, 3.0, 1.0, 3.0]),), (ARR([0.5, 0, 0.5, 0]),)),
    ("amax ties per row", lambda x: cnp.amax(x, axis=1, keepdims=True),
     (ARR([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]]),), (ARR([[0, 0.5, 0.5], [1 / 3] * 3]),)),
    ("clip at lo", lambda x: cnp.clip(x, 0.0, 1.0), (0.0,), (1.0,)),
    ("clip at hi", lambda x: cnp.clip(x, 0.0, 1.0), (1.0,), (1.0,)),
    ("clip at lo, bounds traced", cnp.clip, (1.0, 1.0, 2.0), (1.0, 0.0, 0.0)),
    ("clip at hi, bounds traced", cnp.clip, (2.0, 1.0, 2.0), (1.0, 0.0, 0.0)),
    ("clip below lo", cnp.clip, (0.5, 1.0, 2.0), (0.0, 1.0, 0.0)),
    ("clip above hi", cnp.clip, (2.5, 1.0, 2.0), (0.0, 0.0, 1.0)),
    ("sqrt'(0)=inf", cnp.sqrt, (0.0,), (math.inf,)),
    # d/dx x^3 = 3x^2 = 12 at -2; d/dy is 0 where x <= 0 (log x undefined)
    ("pow d/dy=0 at x<0", cnp.power, (-2.0, 3.0), (12.0, 0.0)),
    ("pow d/dy=0 at x=0", cnp.power, (0.0, 2.5), (0.0, 0.0)),
    ("pow 0^0", cnp.power, (0.0, 0.0), (0.0, 0.0)),  # x^0 is constant in x
    ("prod one zero", cnp.prod, (ARR([2.0, 0.0, 3.0]),), (ARR([0.0, 6.0, 0.0]),)),
    ("prod two zeros", cnp.prod, (ARR([2.0, 0.0, 0.0, 3.0]),), (np.zeros(4),)),
    ("prod zeros per column", lambda x: cnp.prod(x, axis=0),
     (ARR([[2.0, 0.0, 5.0], [0.0, 0.0, 1.0], [4.0, 1.0, 3.0]]),),
     (ARR([[0.0, 0.0, 3.0], [8.0, 0.0, 15.0], [0.0, 0.0, 5.0]]),)),
    ("where: unselected gets 0", lambda x, y: cnp.where(ARR([True, False]), x, y),
     (ARR([1.0, 2.0]), ARR([3.0, 4.0])), (ARR([1.0, 0.0]), ARR([0.0, 1.0]))),
    # statistics family (issue 13): each value is JAX's gradient at the same input
    ("cumprod one zero", cnp.cumprod, (ARR([2.0, 0.0, 3.0]),), (ARR([1.0, 8.0, 0.0]),)),
    ("cumprod two zeros", lambda x: cnp.cumprod(x) * ARR([1.0, 2.0, 3.0, 4.0, 5.0]),
     (ARR([2.0, 0.0, 3.0, 0.0, 5.0]),), (ARR([1.0, 22.0, 0.0, 0.0, 0.0]),)),
    ("sort ties stable", lambda x: cnp.sort(x) * ARR([1.0, 2.0, 3.0, 4.0]),
     (ARR([3.0, 1.0, 3.0, 2.0]),), (ARR([3.0, 1.0, 4.0, 2.0]),)),
    ("sort descending ties", lambda x: cnp.sort(x, descending=True) * ARR([1.0, 2.0, 3.0, 4.0]),
     (ARR([3.0, 1.0, 3.0, 2.0]),), (ARR([2.0, 4.0, 1.0, 3.0]),)),
    ("median even: midpoint", cnp.median, (ARR([1.0, 3.0, 2.0, 3.0]),),
     (ARR([0.0, 0.5, 0.5, 0.0]),)),
    ("median odd ties", cnp.median, (ARR([2.0, 1.0, 2.0]),), (ARR([1.0, 0.0, 0.0]),)),
    ("median all equal", cnp.median, (ARR([2.0, 2.0, 2.0, 2.0]),),
     (ARR([0.0, 0.5, 0.5, 0.0]),)),
    ("quantile linear ties", lambda x: cnp.quantile(x, 0.375),
     (ARR([1.0, 1.0, 2.0, 1.0, 0.0]),), (ARR([0.5, 0.5, 0.0, 0.0, 0.0]),)),
    ("quantile at a knot", lambda x: cnp.quantile(x, 0.5), (ARR([3.0, 0.0, 2.0, 1.0, 4.0]),),
     (ARR([0.0, 0.0, 1.0, 0.0, 0.0]),)),
    ("quantile nearest at 1/2", lambda x: cnp.quantile(x, 0.5, method="nearest"),
     (ARR([3.0, 0.0, 2.0, 1.0]),), (ARR([0.0, 0.0, 0.0, 1.0]),)),
    ("nanmedian ties", cnp.nanmedian, (ARR([2.0, np.nan, 2.0, 1.0]),),
     (ARR([1.0, 0.0, 0.0, 0.0]),)),
    ("max tie with initial", lambda x: cnp.max(x, initial=2.0), (ARR([1.0, 2.0]),),
     (ARR([0.0, 0.5]),)),
    ("interp at knots", lambda x: cnp.interp(x, ARR([0.0, 1.0, 2.0]), ARR([0.0, 1.0, 3.0])),
     (ARR([0.0, 1.0, 2.0]),), (ARR([1.0, 2.0, 2.0]),)),
    # elementwise family (issue 13)
    ("sinc'(0)=0", cnp.sinc, (ARR([0.0, 2.0]),), (ARR([0.0, 0.5]),)),
    ("sinc''(0)=-pi^2/3", lambda x: cg.grad(cnp.sinc)(x), (0.0,), (-np.pi ** 2 / 3.0,)),
    ("cbrt'(0)=inf", cnp.cbrt, (0.0,), (math.inf,)),
    ("arcsin'(1)=inf", cnp.arcsin, (ARR([1.0, -1.0]),), (ARR([math.inf, math.inf]),)),
    ("arccos'(1)=-inf", cnp.arccos, (ARR([1.0, -1.0]),), (ARR([-math.inf, -math.inf]),)),
    ("hypot at (0, 0)", cnp.hypot, (0.0, 0.0), (0.0, 0.0)),
    ("i0''(0)=1/2", lambda x: cg.grad(cnp.i0)(x), (0.0,), (0.5,)),
    ("fmod d/dy=-trunc(x/y)", cnp.fmod, (-7.5, 2.0), (1.0, 3.0)),
    ("ceil'=0", cnp.ceil, (ARR([1.0, -0.5]),), (ARR([0.0, 0.0]),)),
    ("trunc'=0", cnp.trunc, (ARR([1.0, -0.5]),), (ARR([0.0, 0.0]),)),
    ("fmax tie to x2", cnp.fmax, (1.0, 1.0), (0.0, 1.0)),
    ("fmin tie to x2", cnp.fmin, (1.0, 1.0), (0.0, 1.0)),
    ("copysign at x1=0", cnp.copysign, (0.0, -1.0), (0.0, 0.0)),
]


E1 = math.exp(-1.0)
EXTREMES = [
    # (id, f, x, value, derivative), the references derived by hand
    ("logsumexp +1000", cnp.logsumexp, ARR([1000.0, 999.0]), 1000.0 + math.log1p(E1),
     ARR([1.0, E1]) / (1.0 + E1)),
    ("logsumexp -1000", cnp.logsumexp, ARR([-1000.0, -1001.0]), -1000.0 + math.log1p(E1),
     ARR([1.0, E1]) / (1.0 + E1)),
    ("logsumexp 1e-300", cnp.logsumexp, ARR([1e-300, -1e-300]), math.log(2.0),
     ARR([0.5, 0.5])),
    ("softplus +1000", cnp.softplus, 1000.0, 1000.0, 1.0),
    ("softplus -1000", cnp.softplus, -1000.0, 0.0, 0.0),  # e^-1000 underflows to 0
    ("softplus 1e-300", cnp.softplus, 1e-300, math.log(2.0), 0.5),
    ("sigmoid +1000", cnp.sigmoid, 1000.0, 1.0, 0.0),
    ("sigmoid -1000", cnp.sigmoid, -1000.0, 0.0, 0.0),
    ("sigmoid 1e-300", cnp.sigmoid, 1e-300, 0.5, 0.25),
    ("log1p 1e-300", cnp.log1p, 1e-300, 1e-300, 1.0),
    ("log1p +1000", cnp.log1p, 1000.0, math.log(1001.0), 1.0 / 1001.0),
    ("expm1 1e-300", cnp.expm1, 1e-300, 1e-300, 1.0),
    ("expm1 -1000", cnp.expm1, -1000.0, -1.0, 0.0),
    ("expm1 700", cnp.expm1, 700.0, math.exp(700.0), math.exp(700.0)),
]
