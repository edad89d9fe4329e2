"""Second and third derivatives against JAX, where JAX can compute them.

JAX cannot reverse-differentiate `lax.while_loop` (or a `fori_loop` with a traced
bound, which becomes one), but forward over forward works through it, so every program
here is differentiated by JAX with `jacfwd(jacfwd(f))` and by cfgrad in every order of
modes. Each program is written once against a small namespace of control flow and numpy,
so both libraries run the same code. Skipped when JAX is not installed (it is not a
dependency); run `pip install jax` to include these.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad.checkpoint import Binomial, Online

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy
lax = jax.lax

CFGRAD = SimpleNamespace(np=cnp, cond=cg.cond, switch=cg.switch, while_loop=cg.while_loop,
                         fori_loop=cg.fori_loop, scan=cg.scan, dynamic_slice=cg.dynamic_slice,
                         dynamic_update_slice=cg.dynamic_update_slice)
JAX = SimpleNamespace(np=jnp, cond=lax.cond, switch=lax.switch, while_loop=lax.while_loop,
                      fori_loop=lax.fori_loop, scan=lax.scan, dynamic_slice=lax.dynamic_slice,
                      dynamic_update_slice=lax.dynamic_update_slice)


def branchy(lib, x):
    y = lib.cond(lib.np.sum(x) > 0.0, lambda v: lib.np.sin(v) * v, lambda v: v ** 3, x)
    k = lib.np.sum((x > 0.5).astype(np.int64))
    z = lib.switch(k, [lambda v: lib.np.exp(v), lambda v: lib.np.tanh(v) * 2.0,
                       lambda v: v * v], y)
    return lib.np.sum(z * x)


def newton_sqrt(lib, x):
    """A while loop with a tolerance stop: elementwise sqrt of 1 + x², differentiated
    through the iterations that ran."""
    a = 1.0 + x * x

    def body(c):
        y, _ = c
        y_new = 0.5 * (y + a / y)
        return y_new, lib.np.max(lib.np.abs(y_new - y))

    y, _ = lib.while_loop(lambda c: c[1] > 1e-14, body, (a, 1.0 + 0.0 * lib.np.sum(a)))
    return lib.np.sum(y * lib.np.cos(x))


def nested_loops(lib, x):
    def outer(i, c):
        def inner(j, d):
            return lib.np.sin(d) * 0.9 + x * 0.1 * j
        return lib.fori_loop(0, 3, inner, c) + lib.cond(i % 2 == 0, lambda: x * x,
                                                        lambda: -x, )
    return lib.np.sum(lib.fori_loop(0, 4, outer, x) ** 2)


def rnn(lib, x):
    W = np.array([[0.3, -0.2, 0.1], [0.05, 0.25, -0.15], [-0.1, 0.2, 0.35]])

    def step(t, h):
        return lib.np.tanh(W @ h + x * (t + 1.0) * 0.1)

    return lib.np.sum(lib.fori_loop(0, 6, step, lib.np.zeros(3)) * x)


def rk4_pendulum(lib, x):
    """An explicit RK4 integrator of a damped pendulum whose parameters are x."""
    g, damping, theta0 = x[0], x[1], x[2]

    def f(s):
        return lib.np.stack([s[1], -g * lib.np.sin(s[0]) - damping * s[1]])

    def step(i, s):
        h = 0.05
        k1 = f(s)
        k2 = f(s + 0.5 * h * k1)
        k3 = f(s + 0.5 * h * k2)
        k4 = f(s + h * k3)
        return s + h / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4)

    s = lib.fori_loop(0, 40, step, lib.np.stack([theta0, 0.0 * theta0]))
    return s[0] ** 2 + 0.5 * s[1] ** 2


def scanned_updates(lib, x):
    """A reversed scan whose ys are built by indexed updates (repeated indices), then
    read through a dynamic slice and updated at a traced offset."""
    xs = lib.np.stack([x, x * x, lib.np.sin(x), x[::-1]])

    def step(c, row):
        c = lib.np.tanh(c * row + 0.1)
        y = c.at[1].multiply(row[0]).at[np.array([0, 2, 0])].add(c[1])
        return c, y.at[np.array([2, 2])].min(row[:2] * 0.5)

    c, ys = lib.scan(step, x, xs, reverse=True)
    k = lib.np.sum((x > 0.5).astype(np.int64))
    window = lib.dynamic_slice(ys, (k, 0), (2, 3))
    ys = lib.dynamic_update_slice(ys, window * window, (k - 1, 0))
    return lib.np.sum(ys ** 2) + lib.np.sum(c) + lib.np.sum(ys.at[2].max(0.5 * x))


PROGRAMS = [branchy, newton_sqrt, nested_loops, rnn, rk4_pendulum, scanned_updates]
POINT = np.array([0.7, 0.2, 0.9])


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__)
def test_hessians_agree_with_jax(program):
    def ours(x):
        return program(CFGRAD, x)

    theirs = jax.jacfwd(jax.jacfwd(lambda x: program(JAX, x)))(jnp.asarray(POINT))
    want = np.asarray(theirs)
    assert cg.hessian(ours)(POINT) == pytest.approx(want, rel=1e-10, abs=1e-12)
    basis = np.eye(3)
    forward_over_reverse = np.stack([cg.jvp(cg.grad(ours), (POINT,), (e,))[1] for e in basis])
    reverse_over_reverse = np.stack([cg.grad(lambda x, e=e: cnp.sum(cg.grad(ours)(x) * e))(POINT)
                                     for e in basis])
    reverse_over_forward = np.stack([cg.grad(lambda x, e=e: cg.jvp(ours, (x,), (e,))[1])(POINT)
                                     for e in basis])
    for got in (forward_over_reverse, reverse_over_reverse, reverse_over_forward):
        assert got == pytest.approx(want, rel=1e-10, abs=1e-12)


@pytest.mark.parametrize("program", [newton_sqrt, rk4_pendulum], ids=lambda p: p.__name__)
def test_third_derivatives_agree_with_jax(program):
    def ours(x):
        return program(CFGRAD, x)

    v = np.array([0.3, -0.5, 0.8])
    theirs = jax.jacfwd(jax.jacfwd(jax.jacfwd(lambda x: program(JAX, x))))(jnp.asarray(POINT))
    want = np.einsum("ijk,k->ij", np.asarray(theirs), v)
    got = cg.jvp(cg.hessian(ours), (POINT,), (v,))[1]
    assert got == pytest.approx(want, rel=1e-9, abs=1e-11)


@pytest.mark.parametrize("strategy", [Binomial(2), Online(2)], ids=repr)
def test_strategies_do_not_change_a_bit(strategy):
    def ours(x):
        return rk4_pendulum(CFGRAD, x)

    reference = cg.hessian(ours)(POINT)
    assert np.array_equal(cg.hessian(ours, checkpoint=strategy)(POINT), reference)
