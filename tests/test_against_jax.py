"""Second and third derivatives against JAX, where JAX can compute them.

JAX cannot reverse-differentiate `lax.while_loop` (or a `fori_loop` with a traced
bound, which becomes one), but forward over forward works through it, so every program
here is differentiated by JAX with `jacfwd(jacfwd(f))` and by cfgrad in every order of
modes. Each program is written once against a small namespace of control flow and numpy,
so both libraries run the same code. Skipped when JAX is not installed (it is not a
dependency); run `pip install jax` to include these.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
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
                         fori_loop=cg.fori_loop)
JAX = SimpleNamespace(np=jnp, cond=lax.cond, switch=lax.switch, while_loop=lax.while_loop,
                      fori_loop=lax.fori_loop)


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


PROGRAMS = [branchy, newton_sqrt, nested_loops, rnn, rk4_pendulum]
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


# -- linalg family: every example of tests/numpy_cases/linalg.py, value and gradient ----------


def _linalg_examples() -> list:
    path = Path(__file__).parent / "numpy_cases" / "linalg.py"
    spec = importlib.util.spec_from_file_location("numpy_cases_linalg_jax", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return [(name, i, e) for name, items in module.EXAMPLES.items()
            for i, e in enumerate(items)]


def _resolve(namespace, dotted):
    for part in dotted.split("."):
        namespace = getattr(namespace, part)
    return namespace


def _leaves(tree):
    if isinstance(tree, tuple | list):
        return [leaf for item in tree for leaf in _leaves(item)]
    return [tree]


@pytest.mark.parametrize("name, number, example", _linalg_examples(),
                         ids=lambda v: v if isinstance(v, str) else str(v)
                         if isinstance(v, int) else "")
def test_linalg_values_and_gradients_agree_with_jax(name, number, example):
    """cnp's value and the gradient of a random linear functional of its float results
    against jax.numpy's (the same LAPACK, so eigen- and singular vectors' signs agree)."""
    args, kwargs = example["args"], example.get("kwargs", {})
    ours, theirs = _resolve(cnp, name), _resolve(jnp, name)
    got, want = _leaves(ours(*args, **kwargs)), _leaves(theirs(*args, **kwargs))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert np.shape(g) == np.shape(w)
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12)
    traced = example.get("traced")
    if traced is None:
        traced = [i for i, a in enumerate(args) if isinstance(a, np.ndarray)]
    traced = [i for i in traced if np.asarray(args[i]).dtype.kind == "f"]
    if not example.get("grad", True) or not traced or name == "linalg.matrix_rank":
        return
    rng = np.random.default_rng(number)
    weights = [rng.normal(size=np.shape(w)) for w in want]

    def loss(fn, total):
        def f(*xs):
            full = list(args)
            for i, x in zip(traced, xs):
                full[i] = x
            outs = _leaves(fn(*full, **kwargs))
            return sum(total(w * o) for w, o in zip(weights, outs) if o.dtype.kind == "f")
        return f

    xs = tuple(args[i] for i in traced)
    argnums = tuple(range(len(xs)))
    ours_grad = cg.grad(loss(ours, cnp.sum), argnums=argnums)(*xs)
    theirs_grad = jax.grad(loss(theirs, jnp.sum), argnums=argnums)(*xs)
    for g, w in zip(_leaves(ours_grad), _leaves(theirs_grad)):
        np.testing.assert_allclose(g, w, rtol=1e-8, atol=1e-10)


def matrix_functions(lib, x):
    """A symmetric positive definite and a general matrix built from x, through every
    factorization: their Hessians meet the rules' second derivatives."""
    la = lib.np.linalg
    m = lib.np.stack([x, x[::-1] * x, lib.np.sin(x)]) + 3.0 * lib.np.eye(3)
    spd = m @ m.T
    total = la.slogdet(m)[1] + lib.np.sum(la.solve(m, x)) + lib.np.sum(la.cholesky(spd))
    total = total + la.eigvalsh(spd)[0] + la.norm(m, "nuc") + lib.np.sum(la.eigh(spd)[1][0])
    u, s, vh = la.svd(m[:, :2], full_matrices=False)
    q, r = la.qr(m[:2])
    return (total + lib.np.sum(u[0] * s) + lib.np.sum(q * r[:, :2]) + la.det(m)
            + lib.np.sum(la.pinv(m[:, :2]) ** 2) + lib.np.einsum("ij,jk,k->", m, spd, x))


def test_linalg_hessian_agrees_with_jax():
    point = np.array([0.4, -0.3, 0.8])
    want = np.asarray(jax.hessian(lambda x: matrix_functions(JAX, x))(jnp.asarray(point)))
    got = cg.hessian(lambda x: matrix_functions(CFGRAD, x))(point)
    assert got == pytest.approx(want, rel=1e-8, abs=1e-10)
