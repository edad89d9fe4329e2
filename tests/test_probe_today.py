"""Adversarial checks of the day's changes (fused elementwise chains, the adjoint's
rematerialized primal reads, constant index arrays under cg.jit, compiled statistics).
Most of what was probed agreed with the interpreter bit for bit; what stays here is cheap
(one compiled program per test at most), with the regression tests of the two bugs found
(the rematerializing pass ran before dead-code removal; compiled complex division was
Numba's, not numpy's)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import cfgrad as cg
import cfgrad.numpy as cnp
import cfgrad.passes as passes
import cfgrad.reverse as reverse
from cfgrad.checkpoint import Binomial, EveryK, Online, Recompute, StoreAll

_WITHOUT_REMAT = tuple(p for p in passes.ADJOINT_PIPELINE
                       if p is not passes.rematerialize_primal_reads)


def _bits(x) -> bytes:
    return np.ascontiguousarray(np.asarray(x)).tobytes()


def _run(make, args):
    """The gradient and each loop's peak_bytes of a fresh function from `make` (the
    lowering cache is per function, so each call lowers again under the current passes)."""
    _, pullback = cg.vjp(make(), *args)
    grad = pullback(1.0)
    return grad, [s.peak_bytes for s in pullback.stats.loops]


def _with_and_without_remat(make, args):
    with_pass = _run(make, args)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(reverse, "ADJOINT_PIPELINE", _WITHOUT_REMAT)
        without = _run(make, args)
    return with_pass, without


def _nested(outer_strategy, inner_strategy):
    """v = h * p in an inner while loop with p from the outer loop, carries that swap."""
    def make():
        def f(x):
            def outer(i, c):
                a, b = c
                p = a * x

                def inner(cc):
                    h, k = cc
                    v = h * p
                    w = h - a
                    return (v * w + w * 0.25, k + 1.0)
                h, _ = cg.while_loop(lambda cc: cc[1] < 3.0 - a, inner, (b, 0.0),
                                     checkpoint=inner_strategy, max_iters=20)
                return (b * 0.9 + 0.1 * h, a)
            a, b = cg.fori_loop(0, 4, outer, (x, x * 0.5), checkpoint=outer_strategy)
            return a * b
        return f
    return make


@pytest.mark.parametrize("outer", [StoreAll(), Recompute(), EveryK(2), Binomial(2), Online(2)],
                         ids=repr)
@pytest.mark.parametrize("inner", [None, Recompute(), Binomial(1)], ids=repr)
def test_remat_nested_loops_same_bits_and_no_more_memory(outer, inner):
    (g1, peaks1), (g2, peaks2) = _with_and_without_remat(_nested(outer, inner), (0.7,))
    assert _bits(g1) == _bits(g2)
    assert all(p1 <= p2 for p1, p2 in zip(peaks1, peaks2, strict=True))
    assert any(p1 < p2 for p1, p2 in zip(peaks1, peaks2, strict=True))  # the pass fired
    eps = 1e-6
    fd = (_nested(outer, inner)()(0.7 + eps) - _nested(outer, inner)()(0.7 - eps)) / (2 * eps)
    assert np.isclose(g1[0], fd, rtol=1e-6)


def _inner_loop_reads_v():
    """v = a * b in the outer body, read by an inner loop's adjoint; b is not active."""
    def make():
        def f(x):
            def outer(i, c):
                a, b = c
                v = a * b
                k = cg.fori_loop(0, 3, lambda j, k: k * v, b)
                return (k + v * b, b * 0.9)
            a, b = cg.fori_loop(0, 2, outer, (x, 0.3))
            return a
        return f
    return make


def test_remat_never_keeps_more_than_without_it():
    """The pass runs last in the adjoint pipeline: an operand read it counted on can no
    longer be dropped after it (it once could: the cotangent of an operand that does not
    depend on x), so a loop never keeps more than without it."""
    (g1, peaks1), (g2, peaks2) = _with_and_without_remat(_inner_loop_reads_v(), (0.1,))
    assert _bits(g1) == _bits(g2)  # (the numbers are right)
    assert all(p1 <= p2 for p1, p2 in zip(peaks1, peaks2, strict=True)), (peaks1, peaks2)


def test_jit_complex_division_bitwise():
    """Compiled complex division is numpy's algorithm (kernels.complex_divide), not
    Numba's, which differs in the last bit: arrays and scalars, complex128 and complex64,
    zero divisors included."""
    rng = np.random.default_rng(0)
    c = rng.normal(size=50) + 1j * rng.normal(size=50)
    d = rng.normal(size=50) * np.exp(rng.uniform(-4, 4, 50)) + 1j * rng.normal(size=50)
    d[:3] = [0.0, 1j, complex(0.0, -0.0)]

    def div(c, d):
        return c / d, c[3] / d[4]
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("error", cg.CompileWarning)
        for dtype in (np.complex128, np.complex64):
            x, y = c.astype(dtype), d.astype(dtype)
            compiled = cg.jit(div)(x, y)
            assert [_bits(v) for v in compiled] == [_bits(v) for v in (x / y, x[3] / y[4])]


_NEG_REPEATED = np.array([-1, 0, 2, 2, -1])
_ROWS = np.array([[0], [1]])
_COLS = np.array([1, 3, 3])


def test_jit_constant_index_arrays_gather_and_scatter_bitwise():
    """Negative and repeated indices (their gradients add up), broadcast index arrays
    separated by a slice (numpy moves the advanced axes to the front), Ellipsis, an
    empty index array and cnp.take, forward values and gradient."""
    def parts(x, y):
        t = cnp.zeros((2, 3, 4)) + y[None, :3, :]
        return (x[_NEG_REPEATED], t[_ROWS, :, _COLS], t[..., _COLS],
                x[np.array([], dtype=np.int64)], cnp.take(x, _NEG_REPEATED), y[-1, _COLS])

    def loss(x, y):
        return sum(cnp.sum(p * p) * (j + 1.0) for j, p in enumerate(parts(x, y)))
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=4), rng.normal(size=(4, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("error", cg.CompileWarning)
        compiled = cg.jit(cg.grad(loss, argnums=(0, 1)))(x, y)
    interpreted = cg.grad(loss, argnums=(0, 1))(x, y)
    assert [_bits(g) for g in compiled] == [_bits(g) for g in interpreted]
    assert parts(x, y)[1].shape == (2, 3, 3)  # numpy's own rule, traced
