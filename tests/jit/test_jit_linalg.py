"""The linear algebra entries compiled (cfgrad/primitives/linalg.py, cfgrad/kernels.py):
Numba's np.linalg and np.dot, which call SciPy's LAPACK and BLAS, against the interpreter's
numpy.

Each compiled entry's values and its gradient under `cg.jit(cg.grad(...))` equal the
interpreter's to the last bits (the same LAPACK and BLAS routines, from SciPy's build
rather than numpy's: measured on the machine this was written on, eigh, svd, qr, eig, gemm
and gemv gave numpy's bits; getrf (solve, det, slogdet), potrf and vector dot products
the last bits of some), eigenvector and singular vector signs included. Every value case
is one compiled program, every gradient one more (a cold Numba compile of the linalg
helpers takes seconds each, solve's about 7). What Numba's np.linalg answers otherwise
than numpy's (a non-finite matrix, a Cholesky factor cfgrad makes NaN, a singular
matrix's error) reruns in the interpreter; what the compiled code does not take (stacks,
real eig, ...) is refused with a reason.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad.api import lowered
from cfgrad.errors import Unsupported
from cfgrad.interpret import Compiled
from cfgrad.native import NativeProgram
from cfgrad.primitives import PRIMITIVES, bind

LONG = os.environ.get("CFGRAD_HYPOTHESIS") == "long"  # the opt-in profile of conftest.py
RNG = np.random.default_rng(25)
A = RNG.standard_normal((4, 4)) + 4 * np.eye(4)  # well conditioned: ulps stay ulps
B = RNG.standard_normal((4, 3))
SPD = A @ A.T + np.eye(4)
TALL = RNG.standard_normal((5, 3))
WIDE = TALL.T.copy()
Z = A + 1j * RNG.standard_normal((4, 4))  # distinct complex eigenvalues


def _values(a, b, spd, tall, wide, z, a32):
    """Every compiled linalg entry, on each shape and dtype its source distinguishes, as
    nodes of their own (`bind`: cnp's wrappers add nodes, each one more compile)."""
    rtol = 10 * 5 * float(np.finfo(np.float64).eps)
    return {
        "solve": bind("solve", a, b), "solve transposed": bind("solve", a.T, b),
        "cholesky": bind("cholesky", spd), "eigh": bind("eigh", spd, uplo="L"),
        "svd": bind("svd", tall, full_matrices=False),
        "svd full": bind("svd", a, full_matrices=True),
        "qr": bind("qr", tall, complete=False), "qr wide complete": bind("qr", wide, complete=True),
        "eig": bind("eig", z), "det": bind("det", a), "slogdet": bind("slogdet", a),
        "pinv": bind("pinv", tall, rtol=rtol), "det float32": bind("det", a32),
        "slogdet float32": bind("slogdet", a32),
        "matmul strided": a[:, ::2] @ tall[1::2], "matmul transposed": a.T @ a,
    }


ARGS = (A, B, SPD, TALL, WIDE, Z, A.astype(np.float32))
CHECKED = {"solve", "cholesky", "eigh", "svd", "qr", "eig", "det", "slogdet", "pinv"}


def _parts(x: Any) -> tuple:
    """The outputs of a multi-output entry (a tuple or list), or the one."""
    return tuple(x) if isinstance(x, tuple | list) else (x,)


def _close(got: Any, want: Any, label: str) -> None:
    """Within a few ulps of numpy's, relative to the largest entry (LAPACK's rounding
    spreads over a result), signs included; dtype and shape exact."""
    for g, w in zip(_parts(got), _parts(want), strict=True):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape, label
        eps = np.finfo(w.dtype).eps
        scale = max(float(np.max(np.abs(w), initial=0.0)), 1.0)
        np.testing.assert_allclose(g, w, rtol=0, atol=64 * eps * scale, err_msg=label)


def test_every_compiled_linalg_entry_is_checked_here():
    """The entries this file covers are the linalg family's compiled ones but the
    contractions, matmul and einsum (tests/primitives/test_kernels.py and
    tests/jit/test_jit_contractions.py have their cases)."""
    compiled = {n for n, p in PRIMITIVES.items() if p.family == "linalg"
                and type(p.compiled).__name__ == "Source"} - {"matmul", "einsum"}
    assert compiled == CHECKED


def _loss(a, b, spd, tall, wide):
    """A scalar of the compiled entries with a derivative rule, each through its cheapest
    output (every adjoint node costs compile time; eig's adjoint would compile a complex
    solve, seconds more). The rules themselves, vectors' terms and eig's included, are
    tests/primitives/test_linalg.py's; the compiled adjoint runs the same nodes, here with
    the transposed operands adjoints pass (`solve(A^T, ...)`)."""
    return (cnp.sum(bind("solve", a, b) ** 2) + cnp.sum(bind("cholesky", spd))
            + cnp.sum(bind("eigh", spd, uplo="L")[0] ** 2)
            + cnp.sum(bind("svd", tall, full_matrices=False)[1])
            + cnp.sum(bind("qr", wide, complete=False)[1]) + bind("det", a)
            + bind("slogdet", a)[1] + cnp.sum(bind("pinv", tall, rtol=1e-14)))


def _checked(a, b, spd, tall, wide, z, a32):
    """The values and, under `CFGRAD_HYPOTHESIS=long`, the gradient, as one program: the
    LAPACK code Numba links into a program is compiled again for each (about 20 s of a
    cold run here), so one is paid; the gradient's adjoint (the same entries, transposed
    operands) adds about 15 s more, kept out of the default run to keep the test command
    under its time."""
    values = _values(a, b, spd, tall, wide, z, a32)
    if not LONG:
        return values
    grads = cg.grad(_loss, argnums=(0, 1, 2, 3, 4))(a, b, spd, tall, wide)
    return {**values, "gradient": tuple(grads)}


@functools.cache
def _compiled() -> Callable:
    jitted = cg.jit(_checked, fallback=False)
    assert jitted.info(*ARGS).backend == "numba"
    return jitted


@pytest.mark.parametrize("label", sorted(_values(*ARGS)) + (["gradient"] if LONG else []))
def test_compiled_values_and_gradients_match_the_interpreter(label):
    got = _compiled()(*ARGS)[label]
    _close(got, _checked(*ARGS)[label], label)  # eagerly: the interpreter's numpy


def test_what_numba_answers_otherwise_reruns_in_the_interpreter():
    """Numba's np.linalg raises LinAlgError where numpy answers: a NaN or inf in an operand
    (numpy's LAPACK gives NaNs, or numbers), a matrix cholesky makes NaN of (not positive
    definite); the call reruns in the interpreter and returns numpy's values, or raises
    numpy's error (a singular matrix)."""
    for bad in (np.nan, np.inf):
        b = B.copy()
        b[0, 1] = bad
        args = (A, b, -SPD, *ARGS[3:])
        with np.errstate(all="ignore"):
            got, want = _compiled()(*args), _checked(*args)
        for label in want:
            for g, w in zip(_parts(got[label]), _parts(want[label]), strict=True):
                np.testing.assert_array_equal(g, w, err_msg=label)
        assert np.all(np.isnan(got["cholesky"]))
    with pytest.raises(np.linalg.LinAlgError, match="Singular matrix"):
        _compiled()(np.ones((4, 4)), *ARGS[1:])


@pytest.mark.parametrize("fn, args, reason", [
    (cnp.linalg.solve, (np.stack([A, A]), B), "stack of matrices"),
    (lambda a: cnp.linalg.eigh(a, UPLO="U")[0], (SPD,), "uplo='U'"),
    (lambda a: cnp.linalg.eig(a)[0], (A,), "eig of a real matrix"),
    (lambda a: cnp.linalg.svd(a)[1], (np.zeros((0, 3)),), "empty matrix"),
    (lambda a: cnp.linalg.qr(a, mode="complete")[0], (TALL,), "complete QR of a tall"),
    (lambda a, b: a @ b, (np.stack([A, A]).astype(np.int64), B.astype(np.int64)),
     "matmul of"),
], ids=["stack", "eigh-upper", "eig-real", "svd-empty", "qr-complete-tall", "matmul-int-stack"])
def test_what_is_not_compiled_is_refused_with_a_reason(fn, args, reason):
    program = lowered(fn, args)[0].program
    with pytest.raises(Unsupported, match=reason):
        NativeProgram(Compiled(program))
