"""Every primitive of the derivative table under the compiled backend (native.py).

Each primitive is either compiled, and then computes what its numpy implementation
computes (bitwise for exact operations: arithmetic, comparisons, selections, shape
operations, indexing, sums in numpy's order; to a few ulp for the functions of a math
library), or structural (a node native.py writes itself, checked where its feature is).
Every primitive has a compiled form; an operand a compiled form refuses (a complex sort)
falls back with the reason, tested with that primitive's family. Cases sharing input
types are compiled as one program (a Numba compile costs about a second), then compared
case by case. Measured on the machine this was written on (x86-64, numba 0.68.1, numpy
2.4), for these inputs: of the math-library functions, exp, tan, tanh, arcsin, arccos,
arcsinh, sinh, cbrt and arctanh (float64) and exp, tan, tanh, arcsin, arccos, arcsinh,
cosh, log2, log10 and sigmoid (float32) differ from numpy's in the last bits; log,
log1p, expm1, sin, cos, cosh, arctan, arccosh, exp2, log2, log10, pow, arctan2, hypot,
logaddexp(2), softplus, sigmoid, logsumexp and angle (float64) agreed bitwise. matmul
calls SciPy's BLAS, the interpreter numpy's: the same routines, the last bits of some
vector products differ; einsum differs too (numpy's sums in an order of its own)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from primitive_facts import FACTS, POSITIVE
from test_jit_linalg import CHECKED as LAPACK_CHECKED

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad.api import lowered
from cfgrad.interpret import Compiled
from cfgrad.native import NativeProgram
from cfgrad.primitives import PRIMITIVES, bind, dense_value
from cfgrad.primitives.table import Structural


@dataclasses.dataclass(frozen=True)
class Case:
    """`fn(*args)` of traced values applies the primitive `prim`; `exact`: the compiled
    result must equal numpy's bitwise (else to a few ulp)."""

    prim: str
    fn: Callable[..., Any]
    args: tuple
    exact: bool = True
    batch: str = "misc"
    label: str = ""


def _un(name: str, **params: Any) -> Callable[..., Any]:
    return lambda *xs: bind(name, *xs, **params)


F = np.array([0.3, -0.7, 0.45])
F2 = np.array([[0.3, -0.7, 0.45], [1.25, -0.0, -2.5]])
F3 = np.arange(24.0).reshape(2, 3, 4) * 0.37 - 3.1
POS = np.array([0.3, 1.7, 2.5])
I = np.array([7, -7, 0, 5], np.int64)
J = np.array([2, 2, 3, 0], np.int64)  # with a zero divisor
B = np.array([True, False, True])
C = np.array([1.5 - 2j, -0.25 + 0.5j, -3.0 - 0.0j])

# float functions, each compiled as the same IEEE operation as numpy's (bitwise) or by a
# math library, Numba's (LLVM's / the C library's) and numpy's (tests/primitive_facts.py)
_FLOAT_UNARY = ["neg", "abs", "sign", "relu", "floor", "rint", "ceil", "trunc", "sqrt",
                "stop_gradient", "isfinite", "signbit",
                "exp", "log", "log1p", "expm1", "sin", "cos", "tan", "tanh", "sinh", "cosh",
                "arctan", "sigmoid", "softplus", "arcsin", "arccos", "arcsinh", "arctanh",
                "cbrt", "exp2", "log2", "log10", "arccosh", "sinc", "i0", "i1"]
_DOMAIN = {name: POS for name in _FLOAT_UNARY if FACTS[name].domain == POSITIVE}


def _bitwise(name: str) -> bool:
    return FACTS[name].exactness == "bitwise"


def _unary_cases() -> list[Case]:
    cases = []
    for dtype in (np.float64, np.float32):
        for name in _FLOAT_UNARY:
            x = (_DOMAIN.get(name, F) + (1.5 if name == "arccosh" else 0)).astype(dtype)
            exact = _bitwise(name)
            for arg in (x, x[1]):
                cases.append(Case(name, _un(name), (arg,), exact, f"unary-{dtype.__name__}",
                                  f"{dtype.__name__}{list(arg.shape)}"))
    for name in ("neg", "abs", "sign", "invert"):
        cases.append(Case(name, _un(name), (I,), True, "int", "int64"))
    for name in ("logical_not", "invert"):
        cases.append(Case(name, _un(name), (B,), True, "int", "bool"))
    for n in (3, -2, 0, 20):
        cases.append(Case("integer_pow", _un("integer_pow", n=n), (F,), True, "binary",
                          f"n={n}"))
    cases.append(Case("integer_pow", _un("integer_pow", n=5), (I,), True, "int", "int64"))
    return cases


_FLOAT_BINARY = ["add", "sub", "mul", "div", "fmod", "maximum", "minimum", "lt", "le", "gt",
                 "ge", "eq", "ne", "floor_divide", "mod",
                 "pow", "arctan2", "hypot", "logaddexp", "logaddexp2"]


def _binary_cases() -> list[Case]:
    cases = []
    y = np.array([0.25, -0.0, 0.45])
    for name in _FLOAT_BINARY:
        a = np.abs(F2) + 0.1 if name == "pow" else F2
        for args, label in (((a, y), "(2,3)-(3,)"), ((np.float64(-1.75), y), "()-(3,)"),
                            ((a[0, 1], y[0]), "()-()")):
            cases.append(Case(name, _un(name), args, _bitwise(name), "binary", label))
    for name in ("add", "sub", "mul", "floor_divide", "mod", "maximum", "lt", "eq",
                 "bitwise_and", "bitwise_or", "bitwise_xor"):
        cases.append(Case(name, _un(name), (I, J), True, "int", "int64, zero divisor"))
    for name in ("logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or",
                 "bitwise_xor", "eq"):
        cases.append(Case(name, _un(name), (B, B[::-1].copy()), True, "int", "bool"))
    return cases


def _reduction_cases() -> list[Case]:
    cases = []
    for name in ("sum", "mean", "prod", "amax", "amin", "logsumexp"):
        exact = name != "logsumexp"
        for axes, keepdims in (((0,), False), ((1,), False), ((2,), True), ((0, 1), False),
                               ((1, 2), True), ((0, 1, 2), False), ((), False)):
            if name in ("amax", "amin", "logsumexp") and axes == ():
                continue
            cases.append(Case(name, _un(name, axes=axes, keepdims=keepdims), (F3,), exact,
                              "reduce", f"axes={axes} keepdims={keepdims}"))
        if name in ("sum", "mean", "prod"):  # axes apart: numpy's loops, in order
            cases.append(Case(name, _un(name, axes=(0, 2), keepdims=False), (F3,), True,
                              "reduce", "axes=(0, 2)"))
        cases.append(Case(name, _un(name, axes=(), keepdims=False), (np.float64(-0.0),),
                          exact, "reduce", "scalar"))
    big = np.sin(np.arange(300.0)) * 1e3  # past numpy's pairwise block of 128 terms
    cases.append(Case("sum", _un("sum", axes=(0,), keepdims=False), (big,), True, "reduce",
                      "pairwise"))
    cases.append(Case("sum", _un("sum", axes=(1,), keepdims=False), (big.reshape(2, 150),),
                      True, "reduce", "pairwise rows"))
    cases.append(Case("sum", _un("sum", axes=(0,), keepdims=False), (I,), True, "int", "int"))
    cases.append(Case("sum", _un("sum", axes=(0,), keepdims=False), (B,), True, "int", "bool"))
    cases.append(Case("prod", _un("prod", axes=(0,), keepdims=False), (I,), True, "int",
                      "int"))
    cases.append(Case("mean", _un("mean", axes=(0,), keepdims=False), (I,), True, "int",
                      "int"))
    nan = F3.copy()
    nan[1, 1, 2] = nan[0, 2, 1] = np.nan
    for name in ("argmax", "argmin"):
        for axis in (None, 0, 1, 2):
            for x, label in ((F3, ""), (nan, " nan")):
                cases.append(Case(name, _un(name, axis=axis), (x,), True, "reduce",
                                  f"axis={axis}{label}"))
        cases.append(Case(name, _un(name, axis=0), (I,), True, "int", "int"))
    for axis in (0, 1, 2):
        for reverse in (False, True):
            cases.append(Case("cumsum", _un("cumsum", axis=axis, reverse=reverse), (F3,), True,
                              "reduce", f"axis={axis} reverse={reverse}"))
        cases.append(Case("cumprod", _un("cumprod", axis=axis), (F3,), True, "reduce",
                          f"axis={axis}"))
    cases.append(Case("cumsum", _un("cumsum", axis=0, reverse=False), (B,), True, "int",
                      "bool"))
    cases.append(Case("cumprod", _un("cumprod", axis=0), (I,), True, "int", "int"))
    for name in ("sort", "argsort"):  # ties, -0.0, NaNs, ints: tests/jit/test_jit_orderings
        cases.append(Case(name, _un(name, axis=1), (nan,), True, "reduce", "axis=1 nan"))
    cases.append(Case("searchsorted", _un("searchsorted", side="left"),
                      (np.sort(F3[0, 0]), F3[1]), True, "reduce"))
    return cases


def _structure_cases() -> list[Case]:
    c = np.array([[True, False, True], [False, False, True]])
    lo, hi = np.array([-0.5, 0.0, 0.5]), np.float64(1.0)
    nan = np.array([np.nan, 3.0, -3.0])
    return [
        Case("where", _un("where"), (c, F, np.float64(9.0)), True, "shape", "broadcast"),
        Case("where", _un("where"), (c[0, 0], F[0], F[1]), True, "shape", "scalar"),
        Case("clip", _un("clip"), (F2, lo, hi), True, "shape", "array bounds"),
        Case("clip", _un("clip"), (nan, np.float64(-1.0), np.float64(1.0)), True, "shape",
             "nan"),
        Case("clip", _un("clip"), (F[0], F[1], F[2]), True, "shape", "scalars"),
        Case("reshape", _un("reshape", shape=(3, 2)), (F2,), True, "shape"),
        Case("reshape", _un("reshape", shape=(1,)), (F[0],), True, "shape", "scalar"),
        Case("reshape", _un("reshape", shape=()), (F[0],), True, "shape", "scalar to ()"),
        Case("transpose", _un("transpose", axes=(2, 0, 1)), (F3,), True, "shape"),
        Case("broadcast_to", _un("broadcast_to", shape=(2, 3)), (F,), True, "shape"),
        Case("broadcast_to", _un("broadcast_to", shape=(2, 3)), (F[0],), True, "shape",
             "scalar"),
        Case("concatenate", _un("concatenate", axis=1), (F2, F2[:, :2].copy()), True, "shape"),
        Case("roll", lambda x, s: bind("roll", x, s, axis=1), (F2, np.int64(-4)), True,
             "shape"),
        Case("roll", lambda x, s: bind("roll", x, s, axis=None), (F2, np.int64(2)), True,
             "shape", "flattened"),
        Case("astype", _un("astype", dtype=np.dtype(np.int64)), (F2 * 3,), True, "shape"),
        Case("astype", _un("astype", dtype=np.dtype(np.bool_)), (F2,), True, "shape"),
        Case("astype", _un("astype", dtype=np.dtype(np.float32)), (I,), True, "int"),
        Case("copy", _un("copy"), (F2,), True, "shape"),
        Case("accumulate", lambda a, b: bind("accumulate", a * 1.0, b), (F2, F2 * 3), True,
             "shape"),
        Case("accumulate_outer",
             lambda a, b, c: bind("accumulate_outer", bind("copy", a), b, c),
             (F2, F[:2].copy(), F), False, "shape"),
        Case("index", lambda x: x[None, ..., -1], (F2,), True, "shape", "None, ..., -1"),
        Case("index", lambda x: x[1, ::-2], (F2,), True, "shape", "slices"),
        Case("index", lambda x, i: x[i], (F2, np.int64(-1)), True, "shape", "traced -1"),
        Case("index", lambda x, i: x[:, i], (F2, np.int64(1)), True, "shape", "traced"),
        Case("scatter_add", lambda v, i: bind("scatter_add", v, i, spec=("$",), shape=(2, 3)),
             (F, np.int64(-1)), True, "shape"),
        Case("accumulate_index",
             lambda a, v, i: bind("accumulate_index", bind("copy", a), v, i, spec=("$",)),
             (F2, F, np.int64(-2)), True, "shape"),
        *_indexing_cases(),
        Case("matmul", _un("matmul"), (F, F), False, "shape", "vec.vec"),
        Case("matmul", _un("matmul"), (F2, F), False, "shape", "mat.vec"),
        Case("matmul", _un("matmul"), (F[:2].copy(), F2), False, "shape", "vec.mat"),
        Case("matmul", _un("matmul"), (F2, F2.T.copy()), False, "shape", "mat.mat"),
        Case("einsum", _un("einsum", subscripts="ij,ij->i"), (F2, F2[::-1].copy()), False,
             "shape"),
        Case("real", _un("real"), (C,), True, "complex"),
        Case("imag", _un("imag"), (C[0],), True, "complex", "scalar"),
        Case("conj", _un("conj"), (C,), True, "complex"),
        Case("angle", _un("angle"), (C,), False, "complex"),
        Case("angle", _un("angle"), (np.array([-1.0, -0.0, 0.0, 2.0]),), True, "complex",
             "real"),
        Case("const", lambda x: x + np.array([1.0, 2.0, 3.0]), (F,), True, "shape"),
        # numpy's own transforms, called in Numba's object mode: bitwise
        Case("fft", lambda z: cnp.fft.fft2(z, norm="ortho"), (np.outer(C, C[::-1]),), True,
             "complex", "2 axes"),
        Case("fft", lambda z: cnp.fft.ifft(z), (C.astype(np.complex64),), True, "complex",
             "inverse complex64"),
        Case("rfft", lambda x: cnp.fft.rfft(x, axis=0, norm="forward"), (F2,), True, "shape"),
        Case("irfft", lambda z: cnp.fft.irfft(z, n=5), (C,), True, "complex"),
        Case("write_row", lambda x: cg.scan(lambda c, v: (c + v, c * v), 0.0, x)[1], (F,),
             True, "shape", "scalar rows"),
        Case("write_row", lambda x: cg.scan(lambda c, v: (c * 0.5 + v, c * v), x[0], x)[1],
             (F2,), True, "shape", "array rows"),
    ]


def _indexing_cases() -> list[Case]:
    """Traced index arrays (a repeated index, a negative one) and the .at updates."""
    rows = np.array([1, -2, 1], np.int64)  # into F2's axis 0: repeats, counts from the end
    cols = np.array([2, 0, 2, -1], np.int32)
    cases = [
        Case("index", lambda x, i: x[i], (F2, rows), True, "indexing", "traced array"),
        Case("index", lambda x, i, j: x[i, j[:, None]], (F2, np.int64(-1), cols), True,
             "indexing", "traced scalar and array"),
        Case("index", lambda x, i: x[np.array([0, 1]), None, i[:2]], (F2, cols), True,
             "indexing", "constant and traced arrays"),
        Case("scatter_add", lambda v, i: bind("scatter_add", v, i, spec=(slice(None), "$"),
                                              shape=(2, 3)),
             (F2[:, [0, 1, 2, 0]].copy(), cols), True, "indexing", "traced array"),
        Case("accumulate_index",
             lambda a, v, i: bind("accumulate_index", bind("copy", a), v, i, spec=("$",)),
             (F2, F2[[0, 1, 1]].copy(), rows), True, "indexing", "traced array"),
    ]
    for op in ("set", "mul", "min", "max"):
        cases += [
            Case("scatter", lambda x, v, i, op=op: bind("scatter", x, v, i, spec=("$",), op=op),
                 (F2, F2[::-1].copy()[[0, 1, 0]], rows), True, "indexing", f"{op} traced array"),
            Case("scatter", lambda x, v, op=op: bind("scatter", x, v, spec=(1, slice(0, 2)),
                                                     op=op),
                 (F2, np.array([-0.0, 7.5])), True, "indexing", f"{op} basic"),
            Case("scatter", lambda x, v, i, op=op: bind("scatter", x, v, i, spec=("$",), op=op),
                 (I, J[:3].copy(), np.array([0, 0, 3])), True, "int", f"{op} int64"),
        ]
    return cases


def _chunked(cases: list[Case], size: int = 12) -> list[Case]:
    """Each batch cut into programs of at most `size` cases: Numba's compile time grows
    faster than a function's length."""
    count: dict[str, int] = {}
    out = []
    for c in cases:
        k = count[c.batch] = count.get(c.batch, 0) + 1
        out.append(dataclasses.replace(c, batch=f"{c.batch}/{(k - 1) // size}"))
    return out


CASES = _chunked(_unary_cases() + _binary_cases() + _reduction_cases() + _structure_cases())

# Every primitive has a compiled case above, or is structural (STRUCTURAL), or is a LAPACK
# entry tests/jit/test_jit_linalg.py compiles (LAPACK_CHECKED: their helpers take seconds
# each to compile, paid once there).
# Not primitives a program applies to data: `call` (a sub-program), `vjp_call` (a gradient
# inside the program, checked by the gradient tests below), the custom rules' nodes and
# debug callbacks (tests/jit/test_jit_custom_rules.py).
STRUCTURAL = {n for n, p in PRIMITIVES.items() if isinstance(p.compiled, Structural)}


def _program(fn: Callable, args: tuple) -> Any:
    return lowered(fn, args)[0].program


@functools.cache
def _batch_results(batch: str) -> dict[int, Any]:
    """Compile every case of `batch` as one program; case index -> its compiled result."""
    members = [(i, c) for i, c in enumerate(CASES) if c.batch == batch]
    flat = [a for _, c in members for a in c.args]

    def fn(*xs):
        outs, k = [], 0
        for _, c in members:
            outs.append(c.fn(*xs[k:k + len(c.args)]))
            k += len(c.args)
        return outs

    native = NativeProgram(Compiled(_program(fn, tuple(flat))))
    results = native(flat)
    return {i: r for (i, _), r in zip(members, results)}


def test_every_primitive_is_compiled_or_listed():
    compiled = {c.prim for c in CASES}
    assert compiled | STRUCTURAL | LAPACK_CHECKED == set(PRIMITIVES)


def test_every_compiled_derivative_is_checked():
    """Each compiled primitive with a derivative rule has a gradient case below (the
    in-place accumulators, which only adjoints emit, are covered by those adjoints)."""
    differentiable = {c.prim for c in CASES if PRIMITIVES[c.prim].vjp is not None}
    checked = set(_GRAD_SCALAR).union(*_GRAD_ARRAY)
    internal = {"copy", "accumulate", "accumulate_outer", "scatter_add", "accumulate_index",
                "real", "imag", "conj", "angle", "astype", "const"}
    assert differentiable - internal <= checked


@pytest.mark.parametrize("index", range(len(CASES)),
                         ids=[f"{c.prim}-{c.label}-{i}" for i, c in enumerate(CASES)])
def test_compiled_matches_numpy(index):
    case = CASES[index]
    got = _batch_results(case.batch)[index]
    with np.errstate(all="ignore"):
        want = dense_value(case.fn(*[np.asarray(a) for a in case.args]))
    want = np.asarray(want)
    assert np.asarray(got).dtype == want.dtype
    assert np.shape(got) == want.shape
    if case.exact:
        np.testing.assert_array_equal(got, want, strict=True)
        # and bitwise: the sign of zero and NaN's place
        assert np.asarray(got).tobytes() == want.tobytes()
    else:
        np.testing.assert_allclose(got, want, rtol=4 * 4e-16 if want.dtype.itemsize >= 8
                                   and want.dtype.kind != "c" else 4 * 1.2e-7, atol=0)


# -- gradients: cg.jit(cg.grad(sum of op(x))) against central differences ----------------
# Elementwise primitives on scalars (one cheap program); the others on small arrays, a
# program each few (Numba compiles every broadcasting array operation anew, ~1 s apiece).

_GRAD_SCALAR = {
    **{name: (_un(name), F[2]) for name in _FLOAT_UNARY
       if not _bitwise(name) or name in ("neg", "abs", "relu")},
    "log": (_un("log"), POS[1]), "log2": (_un("log2"), POS[1]),
    "log10": (_un("log10"), POS[1]), "sqrt": (_un("sqrt"), POS[1]),
    "arccosh": (_un("arccosh"), POS[1] + 1.5), "i1": (_un("i1"), F[1]),
    "integer_pow": (_un("integer_pow", n=3), F[1]),
    "pow": (lambda x: bind("pow", x, x), POS[1]),
    "add": (lambda x: x + (x + 1.0), F[1]), "sub": (lambda x: (2.0 * x) - (x - 1.0), F[1]),
    "mul": (lambda x: x * (x + 1.0), F[1]), "div": (lambda x: 1.0 / (x + 2.0), F[1]),
    "arctan2": (lambda x: bind("arctan2", x, 1.0 - x), F[1]),
    "hypot": (lambda x: bind("hypot", x, 2.0), F[1]),
    "logaddexp": (lambda x: bind("logaddexp", x, x * 0.5), F[1]),
    "logaddexp2": (lambda x: bind("logaddexp2", x, x * 0.5), F[1]),
    "fmod": (lambda x: bind("fmod", x, 0.4), F[1]), "mod": (lambda x: bind("mod", x, 0.4), F[1]),
    "maximum": (lambda x: bind("maximum", x, 0.1), F[1]),
    "minimum": (lambda x: bind("minimum", x, 0.1), F[1]),
    "where": (lambda x: bind("where", x > 0, x * x, -x), F[1]),
    "clip": (lambda x: bind("clip", x, -0.5, 0.4), F[2]),
    "stop_gradient": (lambda x: x * bind("stop_gradient", x), F[1]),
}
_GRAD_ARRAY = [{
    "sum": (lambda x: bind("sum", x * x, axes=(1,), keepdims=False), F2),
    "mean": (lambda x: bind("mean", x * x, axes=(0,), keepdims=True), F2),
    "prod": (_un("prod", axes=(0,), keepdims=False), F),
    "amax": (_un("amax", axes=(0,), keepdims=False), F),
    "amin": (_un("amin", axes=(0,), keepdims=False), F),
    "sort": (lambda x: bind("sort", x, axis=0) * F, F),
}, {
    "logsumexp": (_un("logsumexp", axes=(0,), keepdims=False), F),
    "cumsum": (lambda x: bind("cumsum", x, axis=0, reverse=True) ** 2, F),
    "cumprod": (_un("cumprod", axis=0), F),
    "matmul": (lambda x: bind("matmul", x, x), F),
    "einsum": (lambda x: bind("einsum", x, x * x, subscripts="ij,kj->ik"), F2),
}, {
    "reshape": (lambda x: bind("reshape", x, shape=(3, 2)) ** 2, F2),
    "transpose": (lambda x: bind("transpose", x, axes=(1, 0)) * F2.T, F2),
    "broadcast_to": (lambda x: bind("broadcast_to", x, shape=(2, 3)) * F2, F),
    "concatenate": (lambda x: bind("concatenate", x, x * x, axis=0), F),
    "roll": (lambda x: bind("roll", x, np.int64(1), axis=0) * F, F),
    "index": (lambda x: x[1, ::-1] ** 2, F2),
    "scatter": (lambda x: cnp.asarray(x).at[np.array([2, 0, 2])].multiply(x + 1.0), F),
    "fft": (lambda x: cnp.real(cnp.fft.fft(x * x)) * F, F),
    "rfft": (lambda x: cnp.imag(cnp.fft.rfft(x, norm="ortho")) * 3.0, F),
    "irfft": (lambda x: cnp.fft.irfft(cnp.fft.rfft(x), n=3) ** 2, F),
    "write_row": (lambda x: cg.scan(lambda c, v: (c * 0.5 + v, c * v), 0.25, x)[1] ** 2, F),
}]


def _central_difference(f: Callable, x: np.ndarray, h: float = 1e-6) -> np.ndarray:
    x = np.array(x, np.float64)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[i] += h
        down[i] -= h
        g[i] = (f(up) - f(down)) / (2 * h)
    return g


@pytest.mark.parametrize("ops", [_GRAD_SCALAR, *_GRAD_ARRAY],
                         ids=["scalars"] + [f"arrays{i}" for i in range(len(_GRAD_ARRAY))])
def test_compiled_gradients_match_central_differences(ops):
    """One program differentiating every case of `ops` (one compile): each gradient
    against central differences of the eager function, and against the interpreter's."""
    names = sorted(ops)
    xs = [np.array(ops[n][1], np.float64) for n in names]

    def total(*args):
        return sum(cnp.sum(ops[n][0](x)) for n, x in zip(names, args))

    argnums = tuple(range(len(names)))
    jitted = cg.jit(cg.grad(total, argnums=argnums), fallback=False)
    assert jitted.info(*xs).backend == "numba"
    compiled = jitted(*xs)
    interpreted = cg.grad(total, argnums=argnums)(*xs)
    for name, x, g, gi in zip(names, xs, compiled, interpreted):
        def eager(v, name=name, x=x):
            if name == "stop_gradient":  # a constant to the derivative: x0 * v
                return float(np.sum(x * v))
            return float(np.sum(ops[name][0](v)))

        np.testing.assert_allclose(g, _central_difference(eager, x), rtol=1e-6, atol=1e-6,
                                   err_msg=name)
        np.testing.assert_allclose(g, gi, rtol=1e-13, atol=1e-15, err_msg=name)
