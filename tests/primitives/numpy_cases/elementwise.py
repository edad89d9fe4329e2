"""Examples of the elementwise family for tests/primitives/test_numpy_coverage.py:
elementwise math and predicates, creation functions and the polynomial functions (issue 13).

Float inputs sit inside each function's domain and away from its kinks (where finite
differences would straddle a jump); integer and bool inputs check the result's dtype kind.
`reference=` marks where numpy's result differs from JAX's semantics, which cfgrad
follows.
"""

import numpy as np

rng = np.random.default_rng(13)


def ex(*args, kwargs=None, **options):
    return dict(args=args, kwargs=kwargs or {}, **options)


def away(shape, lo=0.2, hi=2.0):
    """|x| in [lo, hi] with random signs: clear of the kinks at 0."""
    return rng.uniform(lo, hi, shape) * rng.choice([-1.0, 1.0], shape)


def grid(shape, offset=0.3):
    """Multiples of 0.5 plus `offset` (jittered by ±0.05): clear of integers and halves."""
    return 0.5 * rng.integers(-6, 7, shape) + offset + rng.uniform(-0.05, 0.05, shape)


F23 = rng.uniform(-2.0, 2.0, (2, 3))
F4 = rng.uniform(-2.0, 2.0, 4)
F0 = np.array(0.7)
F31 = rng.uniform(-2.0, 2.0, (3, 1))
F32 = rng.uniform(-2.0, 2.0, (2, 3)).astype(np.float32)
I23 = np.array([[-3, 0, 2], [5, -1, 4]])
I4 = np.array([1, 2, 3, 4])
B3 = np.array([True, False, True])
UNIT = rng.uniform(-0.9, 0.9, (2, 3))
POS = rng.uniform(0.2, 3.0, (2, 3))
SPECIAL = np.array([1.5, np.nan, np.inf, -np.inf, -0.0, 0.0, -2.0])


def unary(sample, ints=True, bools=False):
    """A float matrix, a float scalar, a float32 matrix (values only), and integer (and
    bool) inputs where numpy takes them."""
    cases = [ex(sample((2, 3))), ex(np.asarray(sample(()))), ex(sample((4,))),
             ex(sample((2, 3)).astype(np.float32), grad=False, rtol=1e-6, atol=1e-6)]
    if ints is not False:
        cases.append(ex(I23 if ints is True else ints))
    if bools:
        cases.append(ex(B3))
    return cases


def symmetric(shape):
    return rng.uniform(-2.0, 2.0, shape)


def positive(shape):
    return rng.uniform(0.2, 3.0, shape)


def unit(shape):
    return rng.uniform(-0.9, 0.9, shape)


def binary(sx, sy, ints=True):
    """Same shapes, broadcasting both ways, a Python scalar operand, and integers."""
    cases = [ex(sx((2, 3)), sy((2, 3))), ex(sx((3, 1)), sy((4,))), ex(sx(()), sy((2, 3))),
             ex(sx((2, 3)), float(sy(())))]
    if ints:
        cases.append(ex(I23, np.array([2, 3, 1])))
    return cases


def quotients(shape, y):
    """x = q * y with q at least 0.2 from an integer: clear of mod's and fmod's jumps."""
    return (rng.integers(-3, 3, shape) + rng.uniform(0.2, 0.8, shape)) * y


Y23 = away((2, 3), 0.5)
Y3 = away(3, 0.5)
DIVISION = [ex(quotients((2, 3), Y23), Y23), ex(quotients((2, 3), Y3), Y3),
            ex(quotients((2, 3), 1.5), 1.5), ex(np.array([7, -7, 8, -9]), np.array([2, 2, -3, 4]))]
COMPARISON = [ex(F23, F4[:3]), ex(I23, np.array([0, 0, 2])), ex(F23, 0.5), ex(B3, B3[::-1])]
LOGICAL = [ex(B3, B3[::-1]), ex(F23 > 0, F4[:3] > 0), ex(I23, np.array([0, 1, 2]))]
ANGLES = unary(symmetric)
ARCTAN2 = binary(lambda s: away(s, 0.3), lambda s: away(s, 0.3))


def polyval_reference(p, x):
    return np.polyval(p, x)


EXAMPLES = {
    # -- arithmetic ----------------------------------------------------------------------
    "add": binary(symmetric, symmetric) + [ex(B3, B3)],
    "subtract": binary(symmetric, symmetric),
    "multiply": binary(symmetric, symmetric) + [ex(B3, B3)],
    "divide": binary(symmetric, lambda s: away(s)),
    "true_divide": binary(symmetric, lambda s: away(s)),
    "negative": unary(symmetric),
    "positive": unary(symmetric),
    "reciprocal": unary(lambda s: away(s))[:4] + [
        ex(np.array([1, 2, -4]), reference=lambda x: 1.0 / x)],  # JAX: integers in float64
    "square": unary(symmetric),
    "power": [ex(POS, F23), ex(F23, 3), ex(F4, 2), ex(POS, 0.5), ex(I23, 2), ex(F23, -2),
              ex(POS[0], F31)],
    "pow": [ex(POS, F23), ex(F23, 3), ex(I23, 2)],
    "float_power": [ex(POS, F23), ex(F23, 3), ex(I23, 2), ex(POS, 0.5),
                    ex(POS.astype(np.float32), 2.0, grad=False, rtol=1e-6)],
    "mod": DIVISION,
    "remainder": DIVISION,
    "fmod": DIVISION,
    "divmod": DIVISION,
    "floor_divide": DIVISION,
    "modf": [ex(grid((2, 3))), ex(np.array(-2.7)), ex(I4)],
    "ldexp": [ex(F23, np.array([1, -2, 3])), ex(F4, 3), ex(I4, np.array(2)),
              ex(F32, np.array([1, 0, -1]), grad=False)],
    # -- exponential, logarithmic --------------------------------------------------------
    "exp": unary(symmetric),
    "exp2": unary(symmetric),
    "expm1": unary(symmetric),
    "log": unary(positive, ints=I4),
    "log2": unary(positive, ints=I4),
    "log10": unary(positive, ints=I4),
    "log1p": unary(lambda s: rng.uniform(-0.9, 3.0, s), ints=I4),
    "logaddexp": binary(symmetric, symmetric) + [ex(np.array([1000.0, -1000.0]), 999.0)],
    "logaddexp2": binary(symmetric, symmetric) + [ex(np.array([1000.0, -1000.0]), 999.0)],
    "sqrt": unary(positive, ints=I4),
    "cbrt": unary(lambda s: away(s, 0.2, 3.0)),
    "i0": unary(symmetric) + [ex(np.array([0.0, 15.0, -30.0]))],
    "sinc": unary(symmetric) + [ex(np.array([0.0, 1e-3, -4e-3, 0.5]))],
    # -- trigonometric, hyperbolic -------------------------------------------------------
    "sin": ANGLES,
    "cos": ANGLES,
    "tan": unary(lambda s: rng.uniform(-1.2, 1.2, s)),
    "arcsin": unary(unit, ints=np.array([0, 1, -1]))[:4],
    "asin": unary(unit)[:4],
    "arccos": unary(unit)[:4],
    "acos": unary(unit)[:4],
    "arctan": ANGLES,
    "atan": ANGLES,
    "arctan2": ARCTAN2,
    "atan2": ARCTAN2,
    "sinh": ANGLES,
    "cosh": ANGLES,
    "tanh": ANGLES,
    "arcsinh": ANGLES,
    "asinh": ANGLES,
    "arccosh": unary(lambda s: rng.uniform(1.1, 3.0, s), ints=I4[1:]),
    "acosh": unary(lambda s: rng.uniform(1.1, 3.0, s), ints=I4[1:]),
    "arctanh": unary(unit, ints=np.array([0]))[:4],
    "atanh": unary(unit)[:4],
    "hypot": binary(lambda s: away(s), lambda s: away(s)),
    "deg2rad": unary(lambda s: 90.0 * symmetric(s)),
    "radians": unary(lambda s: 90.0 * symmetric(s)),
    "rad2deg": unary(symmetric),
    "degrees": unary(symmetric),
    # -- piecewise -----------------------------------------------------------------------
    "abs": unary(lambda s: away(s)),
    "absolute": unary(lambda s: away(s)),
    "fabs": unary(lambda s: away(s)),
    "sign": unary(lambda s: away(s)),
    "signbit": unary(lambda s: away(s)) + [ex(SPECIAL)],
    "copysign": binary(lambda s: away(s), lambda s: away(s))
    + [ex(F4, SPECIAL[3:], grad=False)],  # y = ±0: a jump
    "heaviside": [ex(np.array([-1.5, 0.0, 2.0]), 0.5), ex(I23, np.array([5, 6, 7])),
                  ex(F23, F4[:3])],
    "floor": unary(grid),
    "ceil": unary(grid),
    "trunc": unary(grid),
    "rint": unary(grid),
    "round": unary(grid) + [ex(grid((2, 3)), kwargs=dict(decimals=1)),
                            ex(100 * grid(4), -1), ex(I23 * 17, -1)],
    "around": unary(grid) + [ex(grid((2, 3)), 2)],
    "maximum": binary(lambda s: grid(s, 0.1), lambda s: grid(s, 0.3)) + [ex(B3, B3[::-1])],
    "minimum": binary(lambda s: grid(s, 0.1), lambda s: grid(s, 0.3)),
    "fmax": binary(lambda s: grid(s, 0.1), lambda s: grid(s, 0.3))
    + [ex(SPECIAL, SPECIAL[::-1], grad=False),
       ex(np.array([np.nan, 1.0]), np.array([2.0, np.nan]), grad=False)],
    "fmin": binary(lambda s: grid(s, 0.1), lambda s: grid(s, 0.3))
    + [ex(SPECIAL, SPECIAL[::-1], grad=False),
       ex(np.array([np.nan, 1.0]), np.array([2.0, np.nan]), grad=False)],
    "clip": [ex(grid((2, 3), 0.1), -0.6, 0.9), ex(grid((2, 3), 0.1), grid(3, -0.2), 1.1),
             ex(grid(4, 0.1), None, 0.4), ex(I23, 0, 3), ex(grid(()), -0.1, None)],
    "where": [ex(F23 > 0, F23, F4[:3]), ex(B3, 1.0, F4[:3]), ex(F31 > 0, F4, -F4),
              ex(I23, I23, 7)],
    "nan_to_num": [ex(SPECIAL), ex(F23), ex(I4),
                   ex(SPECIAL, kwargs=dict(nan=-1.0, posinf=9.0, neginf=-9.0))],
    # -- comparison, logic, float predicates (no derivative) ------------------------------
    "equal": COMPARISON,
    "not_equal": COMPARISON,
    "less": COMPARISON,
    "less_equal": COMPARISON,
    "greater": COMPARISON,
    "greater_equal": COMPARISON,
    "logical_and": LOGICAL,
    "logical_or": LOGICAL,
    "logical_xor": LOGICAL,
    "logical_not": [ex(B3), ex(F23 > 0), ex(I23)],
    "isfinite": [ex(SPECIAL), ex(I23), ex(F23)],
    "isnan": [ex(SPECIAL), ex(I23), ex(B3)],
    "isinf": [ex(SPECIAL), ex(I23), ex(F23)],
    "isposinf": [ex(SPECIAL), ex(I4), ex(F23)],
    "isneginf": [ex(SPECIAL), ex(I4), ex(F23)],
    "isclose": [ex(F4, F4 + 1e-9), ex(SPECIAL, SPECIAL[::-1]), ex(I4, np.array([1, 3, 3, 5])),
                ex(SPECIAL, SPECIAL, kwargs=dict(equal_nan=True)),
                ex(F23, F23 + 0.01, kwargs=dict(rtol=0.0, atol=0.05))],
    "allclose": [ex(F4, F4 + 1e-9), ex(F4, F4 + 1e-3), ex(SPECIAL, SPECIAL),
                 ex(SPECIAL, SPECIAL, kwargs=dict(equal_nan=True)), ex(I4, I4)],
    "array_equal": [ex(F23, F23.copy()), ex(F23, F23 + 1.0), ex(F4, F23),
                    ex(SPECIAL, SPECIAL), ex(SPECIAL, SPECIAL, kwargs=dict(equal_nan=True)),
                    ex(I23, I23)],
    # -- creation ------------------------------------------------------------------------
    "array": [ex(F23), ex(I23, kwargs=dict(dtype=np.float64)),
              ex(F23, np.float32, grad=False, rtol=1e-6), ex(F4, kwargs=dict(ndmin=3)),
              ex(F0, kwargs=dict(ndmin=1)), ex(F23, kwargs=dict(copy=False))],
    "asarray": [ex(F23), ex(I23, kwargs=dict(dtype=np.float64)), ex(F0), ex(B3)],
    "astype": [ex(F32, np.float64), ex(F23, np.int64), ex(I23, np.float64), ex(F23, bool)],
    "copy": [ex(F23), ex(I23), ex(F0)],
    "arange": [ex(5), ex(1, 7, 2), ex(0.0, 1.0, 0.25), ex(3, kwargs=dict(dtype=np.float64))],
    "eye": [ex(3), ex(2, 4), ex(3, kwargs=dict(k=1)), ex(4, 3, -2), ex(2, kwargs=dict(dtype=int))],
    "identity": [ex(3), ex(2, kwargs=dict(dtype=int))],
    "tri": [ex(3), ex(2, 4, 1), ex(4, 3, -1, int)],
    "zeros": [ex(3), ex((2, 3)), ex((2,), int)],
    "ones": [ex(3), ex((2, 3)), ex((2,), bool)],
    "zeros_like": [ex(F23), ex(I23), ex(F23, kwargs=dict(dtype=int))],
    # JAX's empty and empty_like are zeros (numpy's leave the memory as it was)
    "empty": [ex(3, reference=np.zeros), ex((2,), int, reference=np.zeros)],
    "empty_like": [ex(F23, reference=np.zeros_like), ex(I23, reference=np.zeros_like),
                   ex(F23, kwargs=dict(dtype=int), reference=np.zeros_like)],
    "ones_like": [ex(F23), ex(I23), ex(B3)],
    "full": [ex((2, 3), np.array(1.5)), ex(3, F0, np.float64), ex((2, 4), F4),
             ex((2,), 7)],
    "full_like": [ex(F23, np.array(1.5)), ex(I23, 7), ex(F23, F4[:3]),
                  ex(F23, np.array(2.5), kwargs=dict(shape=(4,)))],
    "linspace": [ex(np.array(0.5), np.array(3.0), 5), ex(F0, 2.0, 4, False),
                 ex(np.array([0.0, 1.0]), np.array([2.0, -1.0]), 3, kwargs=dict(axis=1)),
                 ex(np.array(-1.0), np.array(1.0), 4, kwargs=dict(retstep=True)),
                 ex(np.array(0.2), np.array(7.9), 6, kwargs=dict(dtype=int)),
                 ex(0.0, 1.0, 3)],
    "logspace": [ex(np.array(0.5), np.array(2.0), 4), ex(F0, 2.0, 3, False),
                 ex(np.array(1.0), np.array(3.0), 4, kwargs=dict(base=2.0)),
                 ex(np.array([0.0, 1.0]), np.array([2.0, -1.0]), 3, kwargs=dict(axis=-1)),
                 ex(0.0, 2.0, 3, kwargs=dict(base=np.array(3.0))),
                 ex(0.0, 2.0, 3, True, np.array([2.0, 3.0])),  # a traced array base
                 ex(np.zeros((2, 1)), np.array(2.0), 3, True, np.array([2.0, 3.0]), None, -1)],
    "geomspace": [ex(np.array(1.0), np.array(1000.0), 4), ex(np.array(-2.0), -50.0, 3),
                  ex(np.array([1.0, 2.0]), np.array([8.0, 0.5]), 4, kwargs=dict(axis=1)),
                  ex(np.array(0.5), np.array(8.0), 3, False)],
    "ndim": [ex(F23), ex(F0), ex(I4)],
    "shape": [ex(F23), ex(F0), ex(I4)],
    "size": [ex(F23), ex(F0), ex(F23, 1)],
    # -- polynomials ---------------------------------------------------------------------
    "polyval": [ex(F4, F23), ex(F4, 0.5), ex(np.array([2.0]), F4), ex(I4, np.array([1, -2])),
                ex(F4, I23)],
    "polyadd": [ex(F4, F4[:2]), ex(F4[:3], F4), ex(F4, np.array(2.0)), ex(I4, I4[:2])],
    "polysub": [ex(F4, F4[:2]), ex(F4[:3], F4), ex(I4, I4[:2])],
    "polymul": [ex(F4, F4[:2]), ex(F4[:1], F4), ex(F4, np.array(2.0)),
                ex(I4, I4[:3], reference=lambda a, b: np.polymul(a, b) * 1.0)],  # JAX: floats,
    "polyder": [ex(F4), ex(F4, 2), ex(F4, 4), ex(F4, 0),
                ex(I4, reference=lambda p: np.polyder(p) * 1.0)],  # JAX: floats
    "polyint": [ex(F4), ex(F4, 2), ex(I4), ex(F4, 2, np.array([1.0, -2.0])), ex(F4, 3, 0.5)],
    "polyfit": [ex(np.linspace(-1.0, 2.0, 7), np.sin(np.linspace(-1.0, 2.0, 7)), 3, rtol=1e-8,
                   atol=1e-10),
                ex(F4, F23[0, :] @ np.ones(3) + F4 ** 2, 1, rtol=1e-8, atol=1e-10),
                ex(np.linspace(0.0, 1.0, 6), np.stack([np.exp(np.linspace(0.0, 1.0, 6)),
                                                      np.linspace(0.0, 1.0, 6) ** 2], 1), 2,
                   rtol=1e-8, atol=1e-10),
                ex(np.linspace(0.0, 1.0, 5), np.cos(np.linspace(0.0, 1.0, 5)), 2,
                   kwargs=dict(w=np.array([1.0, 2.0, 0.5, 1.0, 3.0])), rtol=1e-8, atol=1e-10)],
    "vander": [ex(F4), ex(F4, 3), ex(I4, kwargs=dict(increasing=True)), ex(F4, 5, True)],
}
