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
from cfgrad.primitives import PRIMITIVES

RNG = np.random.default_rng(25)
A = RNG.standard_normal((4, 4)) + 4 * np.eye(4)  # well conditioned: ulps stay ulps
B = RNG.standard_normal((4, 3))
SPD = A @ A.T + np.eye(4)
TALL = RNG.standard_normal((5, 3))
WIDE = TALL.T.copy()
Z = A + 1j * RNG.standard_normal((4, 4))  # distinct complex eigenvalues


def _values(a, b, spd, tall, wide, z, a32, wide32):
    """Every compiled linalg entry, on each shape and dtype its source distinguishes."""
    w, v = cnp.linalg.eigh(spd)
    u, s, vh = cnp.linalg.svd(tall, full_matrices=False)
    uf, sf, vhf = cnp.linalg.svd(a)
    q, r = cnp.linalg.qr(tall)
    qw, rw = cnp.linalg.qr(wide, mode="complete")
    zw, zv = cnp.linalg.eig(z)
    sign, logdet = cnp.linalg.slogdet(a)
    sign32, logdet32 = cnp.linalg.slogdet(a32)
    return {
        "solve": cnp.linalg.solve(a, b), "solve vector": cnp.linalg.solve(a.T, b[:, 0]),
        "cholesky": cnp.linalg.cholesky(spd), "eigh": (w, v), "svd": (u, s, vh),
        "svd full": (uf, sf, vhf), "qr": (q, r), "qr wide complete": (qw, rw), "eig": (zw, zv),
        "det": cnp.linalg.det(a), "slogdet": (sign, logdet), "pinv": cnp.linalg.pinv(tall),
        "pinv wide": cnp.linalg.pinv(wide), "det float32": cnp.linalg.det(a32),
        "slogdet float32": (sign32, logdet32), "pinv float32": cnp.linalg.pinv(wide32),
        "matmul strided": a[:, ::2] @ tall[1::2], "matmul transposed": a.T @ a,
    }


ARGS = (A, B, SPD, TALL, WIDE, Z, A.astype(np.float32), WIDE.astype(np.float32))
CHECKED = {"solve", "cholesky", "eigh", "svd", "qr", "eig", "det", "slogdet", "pinv"}


@functools.cache
def _compiled_values() -> Callable:
    jitted = cg.jit(_values, fallback=False)
    assert jitted.info(*ARGS).backend == "numba"
    return jitted


def _close(got: Any, want: Any, label: str) -> None:
    """Within a few ulps of numpy's, relative to the largest entry (LAPACK's rounding
    spreads over a result), signs included; dtype and shape exact."""
    got, want = (x if isinstance(x, tuple | list) else (x,) for x in (got, want))
    assert len(got) == len(want), label
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape, label
        eps = np.finfo(w.dtype).eps
        scale = max(float(np.max(np.abs(w), initial=0.0)), 1.0)
        np.testing.assert_allclose(g, w, rtol=0, atol=64 * eps * scale, err_msg=label)


def test_every_compiled_linalg_entry_is_checked_here():
    """The entries this file covers are the linalg family's compiled ones but matmul
    (tests/primitives/test_kernels.py has its cases)."""
    compiled = {n for n, p in PRIMITIVES.items() if p.family == "linalg"
                and type(p.compiled).__name__ == "Source"} - {"matmul"}
    assert compiled == CHECKED


@pytest.mark.parametrize("label", sorted(_values(*ARGS)))
def test_compiled_values_match_the_interpreter(label):
    got = _compiled_values()(*ARGS)[label]
    _close(got, _values(*ARGS)[label], label)  # eagerly: the interpreter's numpy


def _loss(a, b, spd, tall, wide, z):
    """A scalar of every compiled entry with a derivative rule, each through its cheapest
    output (every adjoint node is one more Numba compile: the vectors' terms of eigh, svd
    and eig are checked by tests/primitives/test_linalg.py in the interpreter, whose rules
    the compiled adjoint runs as they are)."""
    return (cnp.sum(cnp.linalg.solve(a, b) ** 2) + cnp.sum(cnp.linalg.cholesky(spd))
            + cnp.sum(cnp.linalg.eigh(spd)[0] ** 2) + cnp.sum(cnp.linalg.svd(tall, full_matrices=False)[1])
            + cnp.sum(cnp.linalg.qr(wide)[1]) + cnp.linalg.det(a) + cnp.linalg.slogdet(a)[1]
            + cnp.sum(cnp.linalg.pinv(tall)) + cnp.sum(cnp.real(cnp.linalg.eig(z)[0] ** 2)))


def test_compiled_gradients_match_the_interpreter():
    argnums = tuple(range(6))
    args = ARGS[:6]
    jitted = cg.jit(cg.grad(_loss, argnums=argnums), fallback=False)
    assert jitted.info(*args).backend == "numba"
    for got, want, name in zip(jitted(*args), cg.grad(_loss, argnums=argnums)(*args),
                               ("a", "b", "spd", "tall", "wide", "z")):
        _close(got, want, name)


def _solve_and_factor(a, b, spd):
    return cnp.linalg.solve(a, b), cnp.linalg.det(a), cnp.linalg.cholesky(spd)


def test_what_numba_answers_otherwise_reruns_in_the_interpreter():
    """Numba's np.linalg raises LinAlgError where numpy answers: a NaN or inf in the matrix
    (numpy's LAPACK gives NaNs, or numbers), a matrix cholesky makes NaN of (not positive
    definite); the call reruns in the interpreter and returns numpy's values."""
    jitted = cg.jit(_solve_and_factor, fallback=False)
    assert jitted.info(A, B, SPD).backend == "numba"
    for bad in (np.nan, np.inf):
        a = A.copy()
        a[0, 1] = bad
        with np.errstate(all="ignore"):
            got, want = jitted(a, B, -SPD), _solve_and_factor(a, B, -SPD)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
        assert np.all(np.isnan(got[2]))
    with pytest.raises(np.linalg.LinAlgError, match="Singular matrix"):
        jitted(np.ones((4, 4)), B, SPD)


@pytest.mark.parametrize("fn, args, reason", [
    (cnp.linalg.solve, (np.stack([A, A]), B), "stack of matrices"),
    (lambda a: cnp.linalg.eigh(a, UPLO="U")[0], (SPD,), "uplo='U'"),
    (lambda a: cnp.linalg.eig(a)[0], (A,), "eig of a real matrix"),
    (lambda a: cnp.linalg.svd(a)[1], (np.zeros((0, 3)),), "empty matrix"),
    (lambda a: cnp.linalg.qr(a, mode="complete")[0], (TALL,), "complete QR of a tall"),
    (lambda a, b: a @ b, (np.stack([A, A]), B), "matmul of"),
], ids=["stack", "eigh-upper", "eig-real", "svd-empty", "qr-complete-tall", "matmul-stack"])
def test_what_is_not_compiled_is_refused_with_a_reason(fn, args, reason):
    program = lowered(fn, args)[0].program
    with pytest.raises(Unsupported, match=reason):
        NativeProgram(Compiled(program))
