"""`cg.jit` of contractions: `einsum` (and `cnp.tensordot`, `cnp.dot`, `cnp.inner`, which
lower to it) and stacks of matrix products (`(12, 4, 5) @ (5,)`, batch axes broadcast)
compiled, values and gradients against the interpreter's.

Both compile as loops (cfgrad/kernels.py: `contract1`/`contract2`, `matmul_stack`), which
sum in index order; numpy's einsum sums in an order of its own and its matmul calls BLAS,
so float results agree to a few ulps (tests/primitive_facts.py), integer ones exactly,
and transposes and diagonals (no arithmetic) bitwise. Every case of a dtype runs in one
compiled program (`fallback=False`: a case that fell back to the interpreter would fail),
so the file pays a few Numba compiles.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad.primitives import bind

LONG = os.environ.get("CFGRAD_HYPOTHESIS") == "long"  # the opt-in profile of conftest.py

_RNG = np.random.default_rng(25)


def _normal(*shape: int) -> np.ndarray:
    return _RNG.standard_normal(shape)


def _einsum(spec: str) -> Callable[..., Any]:
    return lambda *xs: cnp.einsum(spec, *xs)


def _tensordot(axes: Any) -> Callable[..., Any]:
    return lambda a, b: cnp.tensordot(a, b, axes)


def _matmul(a: Any, b: Any) -> Any:
    return a @ b


def _matmul_transposed(a: Any, b: Any) -> Any:
    """A stack times a transposed (non-contiguous) stack, as adjoints make them."""
    return a @ cnp.swapaxes(b, -1, -2)


# (label, function, float64 arguments, exact: no arithmetic, so bitwise)
_CASES: list[tuple[str, Callable[..., Any], tuple, bool]] = [
    ("einsum matrix product", _einsum("ij,jk->ik"), (_normal(3, 4), _normal(4, 5)), False),
    ("einsum full contraction", _einsum("ij,ij->"), (_normal(3, 4), _normal(3, 4)), False),
    ("einsum transpose", _einsum("ijk->kij"), (_normal(2, 3, 4),), True),
    ("einsum diagonal", _einsum("ii->i"), (_normal(4, 4),), True),
    ("einsum diagonal times matrix", _einsum("ii,ij->j"), (_normal(3, 3), _normal(3, 2)),
     False),
    ("einsum three operands", _einsum("ij,jk,kl->il"),
     (_normal(3, 4), _normal(4, 5), _normal(5, 2)), False),
    ("einsum scalar operand", lambda s, x: bind("einsum", s, x, subscripts=",i->i"),
     (np.float64(1.5), _normal(3)), False),
    ("einsum empty sum", _einsum("ij,jk->ik"), (_normal(3, 0), _normal(0, 2)), False),
    ("tensordot pairs", _tensordot(([1, 0], [0, 2])),
     (_normal(3, 2, 4), _normal(2, 5, 3)), False),
    ("matmul stack @ vector", _matmul, (_normal(12, 4, 5), _normal(5)), False),
    ("matmul vector @ stack", _matmul, (_normal(5), _normal(2, 5, 3)), False),
    ("matmul broadcast stacks", _matmul, (_normal(1, 3, 4), _normal(5, 4, 2)), False),
    ("matmul transposed stack", _matmul_transposed, (_normal(2, 3, 4), _normal(2, 5, 4)),
     False),
    ("matmul empty batch", _matmul, (_normal(0, 3, 4), _normal(4, 2)), False),
]

_GRADIENT_CASES = ("einsum diagonal times matrix", "matmul broadcast stacks")

# other dtypes: each compiles the helpers once more
_OTHER_DTYPES: list[tuple[str, Callable[..., Any], tuple]] = [
    ("einsum int32 wrapping", _einsum("i,i->"),
     (np.full(3, 2**20, np.int32), np.full(3, 2**12, np.int32))),
    ("matmul complex stack", _matmul,
     (_normal(2, 3, 4) + 1j * _normal(2, 3, 4), _normal(2, 4, 2) + 2j)),
]


def _all_in_one(cases: list[tuple]) -> tuple[Callable[..., Any], list[Any]]:
    """One function applying every case to its slice of the flat argument list."""
    flat = [a for c in cases for a in c[2]]

    def fn(*xs):
        outs, k = [], 0
        for c in cases:
            outs.append(c[1](*xs[k:k + len(c[2])]))
            k += len(c[2])
        return outs

    return fn, flat


def _close(got: Any, want: Any, label: str) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, label
    if want.dtype.kind in "iu":
        np.testing.assert_array_equal(got, want, err_msg=label)
    else:
        tol = 1e-5 if want.dtype in (np.float32, np.complex64) else 1e-13
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=label)


@pytest.mark.parametrize("cases", [_CASES, _OTHER_DTYPES], ids=["float64", "other-dtypes"])
def test_contractions_compile_and_match_the_interpreter(cases):
    fn, flat = _all_in_one(cases)
    jitted = cg.jit(fn, fallback=False)
    assert jitted.info(*flat).backend == "numba"
    compiled, interpreted = jitted(*flat), fn(*flat)
    for case, got, want in zip(cases, compiled, interpreted):
        _close(got, want, case[0])
        if len(case) > 3 and case[3]:  # no arithmetic: the same bits
            assert np.asarray(got).tobytes() == np.asarray(want).tobytes(), case[0]


@pytest.mark.skipif(not LONG, reason="a compiled adjoint, 10-12 s of cold Numba compile: "
                    "run under CFGRAD_HYPOTHESIS=long (values compile in the default run)")
def test_contraction_gradients_match_the_interpreter():
    """One compiled gradient of a weighted sum of a few cases: each argument's gradient
    against the interpreter's (einsum's adjoints are einsums, with an identity for a
    diagonal; matmul's of a broadcast stack are summed back over the batch). Few: Numba
    takes seconds per case to compile an adjoint."""
    cases = [c for c in _CASES if c[0] in _GRADIENT_CASES]
    fn, flat = _all_in_one(cases)
    weights = [_normal(*np.shape(out)) for out in fn(*flat)]

    def total(*xs):
        return sum(cnp.sum(out * w) for out, w in zip(fn(*xs), weights))

    argnums = tuple(range(len(flat)))
    jitted = cg.jit(cg.grad(total, argnums=argnums), fallback=False)
    compiled = jitted(*flat)
    interpreted = cg.grad(total, argnums=argnums)(*flat)
    for k, (got, want) in enumerate(zip(compiled, interpreted)):
        _close(got, want, f"argument {k}")


def _reason(fn: Callable[..., Any], *args: Any) -> str | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cg.CompileWarning)
        return cg.jit(fn).info(*args).reason


def test_what_is_not_compiled_says_why():
    """Booleans (numpy's einsum ors the products) and integer stacks run in the
    interpreter, the warning naming the operands."""
    b = np.array([[True, False], [True, True]])
    assert "einsum of booleans ('ij,jk->ik'; compiled: numbers)" in _reason(
        _einsum("ij,jk->ik"), b, b)
    i = np.arange(8).reshape(2, 2, 2)
    assert "matmul of i64[2,2,2] and i64[2,2,2] (compiled: floats)" in _reason(_matmul, i, i)
