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


# -- The elementwise family (issue 13): every example of tests/numpy_cases/elementwise.py,
# value and gradient, against jax.numpy. Where JAX refuses an example (integer rounding
# to negative decimals, a scalar polynomial, the gradient of a cast to an integer, an
# array `base` of logspace broadcast against 2-D ends as numpy does) there
# is nothing to compare; where JAX's gradient is nan and ours finite (polyfit at x = 0,
# from JAX's power rule), ours is the one checked against central differences.


def _elementwise_examples() -> list[tuple[str, int, dict]]:
    path = Path(__file__).parent / "numpy_cases" / "elementwise.py"
    spec = importlib.util.spec_from_file_location("numpy_cases_elementwise_vs_jax", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return [(name, i, example) for name, examples in module.EXAMPLES.items()
            for i, example in enumerate(examples)]


def _leaves(tree):
    if isinstance(tree, tuple | list):
        return [leaf for item in tree for leaf in _leaves(item)]
    return [tree]


def _float_total(lib, out):
    """The sum of every float output: one scalar whose gradient covers them all."""
    return sum((lib.sum(o * 1.0) for o in _leaves(out) if lib.asarray(o).dtype.kind == "f"),
               0.0)


@pytest.mark.parametrize(("name", "number", "example"), _elementwise_examples(),
                         ids=lambda v: v if isinstance(v, str | int) else "")
def test_elementwise_family_agrees_with_jax(name, number, example):
    args, kwargs = example["args"], example["kwargs"]
    try:
        theirs = getattr(jnp, name)(*args, **kwargs)
    except (NotImplementedError, TypeError, IndexError, ValueError):
        pytest.skip("jax.numpy refuses this example")
    ours = getattr(cnp, name)(*args, **kwargs)
    tolerance = dict(rtol=example.get("rtol", 1e-10) * 100, atol=1e-10)
    for got, want in zip(_leaves(ours), _leaves(theirs), strict=True):
        want = np.asarray(want)
        if want.dtype == np.float32:
            tolerance = dict(rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.asarray(got), want, equal_nan=True, **tolerance)
    floats = [i for i, a in enumerate(args) if isinstance(a, np.ndarray) and a.dtype.kind == "f"]
    if not floats or not example.get("grad", True):
        return

    def of(lib, fn):
        def total(*xs):
            full = list(args)
            for i, x in zip(floats, xs):
                full[i] = x
            return _float_total(lib, fn(*full, **kwargs))
        return total

    argnums = tuple(range(len(floats)))
    values = [args[i] for i in floats]
    try:
        want = jax.grad(of(jnp, getattr(jnp, name)), argnums=argnums)(*values)
    except TypeError:
        pytest.skip("jax.numpy cannot differentiate this example")
    got = cg.grad(of(cnp, getattr(cnp, name)), argnums=argnums)(*values)
    for g, w in zip(got, want, strict=True):
        w = np.asarray(w)
        finite = np.isfinite(w)
        np.testing.assert_allclose(np.asarray(g)[finite], w[finite], rtol=1e-7, atol=1e-9)
