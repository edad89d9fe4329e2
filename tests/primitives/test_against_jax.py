"""Second and third derivatives against JAX, where JAX can compute them.

JAX cannot reverse-differentiate `lax.while_loop` (or a `fori_loop` with a traced
bound, which becomes one), but forward over forward works through it, so every program
here is differentiated by JAX with `jacfwd(jacfwd(f))` and by cfgrad in every order of
modes. Each program is written once against a small namespace of control flow and numpy,
so both libraries run the same code. At the end, first derivatives of complex functions
(JAX's convention, through a branch and a loop) and of the fft family, and eig's Hessian
(against lax.linalg.eig with eigenvector derivatives enabled). Skipped when JAX is
not installed (it is not a dependency); run `pip install jax` to include these.
"""

from __future__ import annotations

import functools
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


def rearranged(lib, x):
    """Array manipulation in a loop: a reflected pad gathered at indices the loop computes
    (`take`, `choose` in mode 'wrap'), triangles and diagonals, repeats, tiles, rolls,
    an insertion and a selection."""
    def step(t, v):
        padded = lib.np.pad(v, (2, 1), mode="reflect")
        idx = (lib.np.arange(3) + t) % 6
        gathered = lib.np.take(padded, idx)
        chosen = lib.np.choose(idx % 2, [v, gathered], mode="wrap")
        m = lib.np.tril(lib.np.outer(v, lib.np.flip(v)), -1) + lib.np.diag(lib.np.sin(v))
        wide = lib.np.insert(lib.np.repeat(v, 2), 1, gathered[0])[1::2]
        picked = lib.np.select([v > 0.5], [v * v], default=lib.np.roll(gathered, 1))
        return lib.np.tanh(m @ chosen * 0.3 + wide * 0.5 + picked * 0.1)

    return lib.np.sum(lib.fori_loop(0, 4, step, x) * lib.np.tile(x, 2)[1:4])


PROGRAMS = [branchy, newton_sqrt, nested_loops, rnn, rk4_pendulum, rearranged]


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


# -- statistics family (issue 13): first and second derivatives of the order statistics,
# running products (with a zero), moments and interpolation, against JAX's.


def statistics(lib, x):
    y = lib.np.concatenate([x, x * x - 0.5, lib.np.sin(x) * 0.0])  # three exact zeros
    knots = lib.np.array([-1.0, 0.1, 0.6, 1.4])
    return (lib.np.sum(lib.np.cumprod(y[:6] + 0.3) * lib.np.cos(y[:6]))
            + lib.np.sum(lib.np.sort(y) * lib.np.arange(9.0))
            + lib.np.quantile(y ** 3, 0.3) + lib.np.median(lib.np.exp(x))
            + lib.np.nanstd(y, ddof=1) + lib.np.sum(lib.np.cov(lib.np.stack([x, x ** 3])))
            + lib.np.sum(lib.np.interp(x, knots, lib.np.sin(knots * x[0])))
            + lib.np.sum(lib.np.cumprod(y[6:]) * x))


def test_statistics_hessian_agrees_with_jax():
    want = np.asarray(jax.hessian(lambda x: statistics(JAX, x))(jnp.asarray(POINT)))
    got = cg.hessian(lambda x: statistics(CFGRAD, x))(POINT)
    assert got == pytest.approx(want, rel=1e-10, abs=1e-12)
    forward = cg.jacfwd(cg.jacfwd(lambda x: statistics(CFGRAD, x)))(POINT)
    assert forward == pytest.approx(want, rel=1e-10, abs=1e-12)


# -- complex numbers and fft (issue 13, complex+fft family): first derivatives in JAX's
# convention, through a branch and a loop, and the fft family's VJPs and JVPs

def complex_loop(lib, z):
    def step(i, w):
        w = lib.cond(lib.np.sum(lib.np.real(w)) > 0.0, lambda v: v * (0.8 + 0.4j),
                     lambda v: lib.np.conj(v) * lib.np.exp(0.1j * v), w)
        return w + 0.1 * lib.np.sin(w) * lib.np.angle(w)
    w = lib.fori_loop(0, 4, step, z)
    return lib.np.sum(lib.np.abs(w) ** 2) + lib.np.real(lib.np.vdot(w, z))


def spectral(lib, x):
    y = lib.np.fft.rfft(x, 7, norm="ortho") * (1.0 + 0.5j)
    z = lib.np.fft.irfft(y, 6)[:4] + lib.np.fft.hfft(lib.np.fft.ifft(y), 5, norm="forward")[:4]
    w = lib.np.fft.fft2(lib.np.outer(z, z) + 0.3j, s=(3, 5))
    return lib.np.sum(lib.np.abs(w)) + lib.np.sum(lib.np.real(lib.np.fft.ihfft(x)))


COMPLEX_POINTS = [(complex_loop, np.array([0.4 - 0.7j, 0.2 + 0.1j, -0.5 + 0.3j])),
                  (spectral, np.array([0.3, -1.2, 0.8, 0.5]))]


@pytest.mark.parametrize("program, x", COMPLEX_POINTS, ids=["complex-loop", "spectral"])
def test_complex_gradients_agree_with_jax(program, x):
    got = cg.grad(lambda v: program(CFGRAD, v))(x)
    want = np.asarray(jax.grad(lambda v: program(JAX, v))(jnp.asarray(x)))
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


FFT_CALLS = [("fft", {"n": 6, "norm": "ortho"}), ("ifftn", {"s": (2, 5)}),
             ("rfftn", {"norm": "forward"}), ("irfft2", {"s": (3, 5)}),
             ("hfft", {"n": 7}), ("ihfft", {"norm": "ortho"}), ("fftshift", {})]


@pytest.mark.parametrize("name, kwargs", FFT_CALLS, ids=[c[0] for c in FFT_CALLS])
def test_fft_vjp_and_jvp_agree_with_jax(name, kwargs):
    rng = np.random.default_rng(0)
    real_input = name in ("rfftn", "ihfft")
    x = rng.standard_normal((3, 4)) + (0 if real_input else 1j * rng.standard_normal((3, 4)))
    ours, theirs = getattr(cnp.fft, name), getattr(jnp.fft, name)
    out, pullback = cg.vjp(lambda a: ours(a, **kwargs), x)
    jout, jpullback = jax.vjp(lambda a: theirs(a, **kwargs), jnp.asarray(x))
    ct = rng.standard_normal(out.shape) + (1j * rng.standard_normal(out.shape)
                                           if np.iscomplexobj(out) else 0)
    t = rng.standard_normal(x.shape) + (0 if real_input else 1j * rng.standard_normal(x.shape))
    np.testing.assert_allclose(out, jout, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(pullback(ct)[0], jpullback(ct)[0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(cg.jvp(lambda a: ours(a, **kwargs), (x,), (t,))[1],
                               jax.jvp(lambda a: theirs(a, **kwargs), (jnp.asarray(x),),
                                       (jnp.asarray(t),))[1], rtol=1e-12, atol=1e-12)


# Custom rules that are not exact derivatives, and a rule calling its own function: JAX
# differentiates the field the rule defines (issue 12). JAX cannot run forward mode
# through a custom_vjp, so its reference is reverse over reverse.
def custom_rules(lib, custom_vjp, custom_jvp):
    """The same functions with `custom_vjp`/`custom_jvp` of one library."""
    np_ = lib.np

    @custom_vjp
    def detach_y(x, y):
        return x * y

    detach_y.defvjp(lambda x, y: (x * y, (x, y)), lambda r, ct: (ct * r[1], ct * 0.0))

    @custom_jvp
    def x_part(x, y):
        return x * y

    @x_part.defjvp
    def _(primals, tangents):
        (x, y), (dx, _) = primals, tangents
        return x * y, y * dx

    @custom_jvp
    def doubled_exp(x):
        return np_.exp(x)

    @doubled_exp.defjvp
    def _(primals, tangents):
        y = doubled_exp(primals[0])
        return y, 2.0 * y * tangents[0]

    @custom_vjp
    def doubled_exp_vjp(x):
        return np_.exp(x)

    def fwd(x):
        y = doubled_exp_vjp(x)  # the custom function again, as JAX has it
        return y, y

    doubled_exp_vjp.defvjp(fwd, lambda y, ct: (2.0 * y * ct,))

    @custom_vjp
    def surrogate(x, a):
        return np_.sin(x) * a

    surrogate.defvjp(lambda x, a: (np_.sin(x) * a, (x, a)),
                     lambda r, ct: (ct * np_.cos(r[0]) * r[1] * np_.exp(r[0]),
                                    ct * np_.sin(2.0 * r[0])))

    def products(v):
        return (np_.sin(detach_y(v[0], v[1])) + x_part(v[1], v[0] * v[0])
                + doubled_exp(v[0] * v[1]) + doubled_exp_vjp(v[0] - v[1]))

    def in_loop(v):
        def body(i, c):
            return surrogate(c[0], c[1]), detach_y(c[1], c[0]) + 0.1

        return lib.fori_loop(0, 3, body, (v[0], v[1]))[0]

    def in_cond(v):
        return lib.cond(v[0] > 0.0, lambda u: surrogate(u[0], u[1]) * x_part(u[1], u[0]),
                        lambda u: u[0] * u[1], v)

    return [products, in_loop, in_cond]


CUSTOM_POINT = np.array([0.7, -0.4])


@pytest.mark.parametrize("k", range(3), ids=["products", "in_loop", "in_cond"])
@pytest.mark.parametrize("strategy", [None, Binomial(2)], ids=repr)
def test_custom_rules_at_second_and_third_order_agree_with_jax(k, strategy):
    ours = custom_rules(SimpleNamespace(np=cnp, cond=cg.cond, fori_loop=functools.partial(
        cg.fori_loop, checkpoint=strategy)), cg.custom_vjp, cg.custom_jvp)[k]
    theirs = custom_rules(JAX, jax.custom_vjp, jax.custom_jvp)[k]
    x = CUSTOM_POINT
    want = np.asarray(jax.jacrev(jax.grad(theirs))(jnp.asarray(x)))
    g = cg.grad(ours, checkpoint=strategy)
    basis = np.eye(2)
    for got in (cg.hessian(ours, checkpoint=strategy)(x), cg.jacrev(g)(x), cg.jacfwd(g)(x),
                np.stack([cg.jvp(g, (x,), (e,))[1] for e in basis], axis=1)):
        assert got == pytest.approx(want, rel=1e-10, abs=1e-12)
    want3 = np.asarray(jax.jacrev(jax.jacrev(jax.grad(theirs)))(jnp.asarray(x)))
    for got in (cg.jacfwd(cg.hessian(ours, checkpoint=strategy))(x),
                cg.jacrev(cg.jacrev(g))(x)):
        assert got == pytest.approx(want3, rel=1e-9, abs=1e-11)


# Custom rules that JAX differentiates where they ran (issue 23, item 7): a bwd that clips
# its cotangent (not linear in it), with and without residuals, in loops, and rules whose
# fwd or bwd call other custom functions. The derivative of the gradient must
# differentiate fwd and bwd as ordinary code, as JAX's reverse over reverse does.
def clipping_rules(lib, custom_vjp):
    np_ = lib.np

    @custom_vjp
    def clip_gradient(x):
        return x

    clip_gradient.defvjp(lambda x: (x, None), lambda r, g: (np_.clip(g, -0.6, 0.6),))

    @custom_vjp
    def clipped_sin(x):
        return np_.sin(x)

    clipped_sin.defvjp(lambda x: (np_.sin(x), np_.cos(x)),
                       lambda c, g: (np_.clip(g * c, -0.5, 0.5),))

    @custom_vjp
    def skew(x, y):
        return x * y

    skew.defvjp(lambda x, y: (x * y, (x, y)), lambda r, g: (g * r[1] * 2.0, g * r[0] * r[0]))

    @custom_vjp
    def nested(x):  # fwd and bwd call other custom functions
        return np_.sin(x)

    nested.defvjp(lambda x: (skew(np_.sin(x), 1.0), x),
                  lambda x, g: (skew(g, np_.cos(x)) * x,))

    W = np.array([[0.9, -0.4], [0.3, 1.1]])

    def clipped_rnn(v):
        out = lib.fori_loop(0, 3, lambda i, c: clip_gradient(np_.tanh(W @ c) * v * 2.0), v)
        return np_.sum(out * out) * 2.0

    def clipped_scan(v):
        def step(c, k):
            c2 = clipped_sin(c * v[0] + k)
            return c2 * 2.0 + v[1], c2 * c
        c, ys = lib.scan(step, v[1], np.array([0.1, 0.2, 0.3]))
        return c + np_.sum(ys)

    def clipped_branches(v):
        def step(i, c):
            return lib.cond(c > 0.0, lambda u: clip_gradient(np_.sin(u) * v[0] * 2.0),
                            lambda u: clipped_sin(u * v[1]), c)
        return lib.fori_loop(0, 4, step, v[0] + v[1])

    def nested_in_loop(v):
        return lib.fori_loop(0, 3, lambda i, c: nested(c * v[0]) * 2.0 + c * v[1], v[0])

    return [clipped_rnn, clipped_scan, clipped_branches, nested_in_loop]


@pytest.mark.parametrize("k", range(4), ids=["rnn", "scan", "branches", "nested"])
@pytest.mark.parametrize("strategy", [None, Binomial(2)], ids=repr)
def test_custom_rules_differentiated_where_they_ran_agree_with_jax(k, strategy):
    lib = SimpleNamespace(np=cnp, cond=cg.cond, fori_loop=functools.partial(
        cg.fori_loop, checkpoint=strategy), scan=functools.partial(cg.scan, checkpoint=strategy))
    ours, theirs = clipping_rules(lib, cg.custom_vjp)[k], clipping_rules(JAX, jax.custom_vjp)[k]
    x = np.array([0.7, -0.5])
    want = np.asarray(jax.jacrev(jax.grad(theirs))(jnp.asarray(x)))
    g = cg.grad(ours, checkpoint=strategy)
    for got in (cg.hessian(ours, checkpoint=strategy)(x), cg.jacrev(g)(x), cg.jacfwd(g)(x),
                np.stack([cg.jvp(g, (x,), (e,))[1] for e in np.eye(2)], axis=1)):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


# -- The elementwise family (issue 13): every example of
# tests/primitives/numpy_cases/elementwise.py, value and gradient, against jax.numpy. Where JAX
# refuses an example (integer rounding to negative decimals, a scalar polynomial, the gradient of a
# cast to an integer, an array `base` of logspace broadcast against 2-D ends as numpy does) there is
# nothing to compare; where JAX's gradient is nan and ours finite (polyfit at x = 0, from JAX's
# power rule), ours is the one checked against central differences.


def family_examples(family: str) -> list[tuple[str, int, dict]]:
    """(name, number, example) for every example of tests/primitives/numpy_cases/<family>.py."""
    path = Path(__file__).parent / "numpy_cases" / f"{family}.py"
    spec = importlib.util.spec_from_file_location(f"numpy_cases_{family}_vs_jax", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return [(name, i, example) for name, examples in module.EXAMPLES.items()
            for i, example in enumerate(examples)]


def _resolve(namespace, dotted):
    for part in dotted.split("."):
        namespace = getattr(namespace, part)
    return namespace


def _leaves(tree):
    if isinstance(tree, tuple | list):
        return [leaf for item in tree for leaf in _leaves(item)]
    return [tree]


def _float_total(lib, out):
    """The sum of every float output: one scalar whose gradient covers them all."""
    return sum((lib.sum(o * 1.0) for o in _leaves(out) if lib.asarray(o).dtype.kind == "f"),
               0.0)


@pytest.mark.parametrize(("name", "number", "example"), family_examples("elementwise"),
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


# -- linalg family: every example of tests/primitives/numpy_cases/linalg.py, value and gradient


def _jax_eig(a):
    """jax.numpy's eig refuses eigenvector derivatives unless asked (JAX issue 2748): its
    lax.linalg.eig with enable_eigvec_derivs=True, LAPACK's gauge differentiated."""
    return tuple(lax.linalg.eig(jnp.asarray(a) + 0.0, compute_left_eigenvectors=False,
                                enable_eigvec_derivs=True))


JAX_LINALG = {"linalg.eig": _jax_eig}


@pytest.mark.parametrize("name, number, example", family_examples("linalg"),
                         ids=lambda v: v if isinstance(v, str) else str(v)
                         if isinstance(v, int) else "")
def test_linalg_values_and_gradients_agree_with_jax(name, number, example):
    """cnp's value and the gradient of a random linear functional of its float results
    (the real part, Re(u y), of complex ones) against jax.numpy's (the same LAPACK, so
    eigen- and singular vectors' signs agree)."""
    args, kwargs = example["args"], example.get("kwargs", {})
    ours, theirs = _resolve(cnp, name), JAX_LINALG.get(name, _resolve(jnp, name))
    got, want = _leaves(ours(*args, **kwargs)), _leaves(theirs(*args, **kwargs))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert np.shape(g) == np.shape(w)
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12)
    traced = example.get("traced")
    if traced is None:
        traced = [i for i, a in enumerate(args) if isinstance(a, np.ndarray)]
    traced = [i for i in traced if np.asarray(args[i]).dtype.kind in "fc"]
    if not example.get("grad", True) or not traced or name == "linalg.matrix_rank":
        return
    rng = np.random.default_rng(number)
    weights = [rng.normal(size=np.shape(w)) + (1j * rng.normal(size=np.shape(w))
                                               if np.asarray(w).dtype.kind == "c" else 0.0)
               for w in want]

    def loss(fn, lib):
        def f(*xs):
            full = list(args)
            for i, x in zip(traced, xs):
                full[i] = x
            outs = _leaves(fn(*full, **kwargs))
            return sum(lib.sum(lib.real(w * o)) for w, o in zip(weights, outs)
                       if o.dtype.kind in "fc")
        return f

    xs = tuple(args[i] for i in traced)
    argnums = tuple(range(len(xs)))
    ours_grad = cg.grad(loss(ours, cnp), argnums=argnums)(*xs)
    theirs_grad = jax.grad(loss(theirs, jnp), argnums=argnums)(*xs)
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


def eigen_functions(lib, eig, x):
    """A general 3×3 matrix built from x (complex eigenvalues at the point below), through
    eig: a polynomial of the eigenvalues and the gauge-invariant |V|^2."""
    m = lib.np.stack([x, x[::-1] * x, lib.np.sin(x)]) + lib.np.array(
        [[1.0, -2.0, 0.0], [2.0, 1.0, 0.0], [0.0, 0.0, 3.0]])
    w, v = eig(m)
    weights = lib.np.arange(9.0).reshape(3, 3)
    return lib.np.real(lib.np.sum(w ** 3)) + lib.np.sum(lib.np.abs(v) ** 2 * weights)


def test_eig_hessian_agrees_with_jax():
    point = np.array([0.4, -0.3, 0.8])
    want = np.asarray(jax.hessian(lambda x: eigen_functions(JAX, _jax_eig, x))(
        jnp.asarray(point)))
    got = cg.hessian(lambda x: eigen_functions(CFGRAD, cnp.linalg.eig, x))(point)
    assert got == pytest.approx(want, rel=1e-8, abs=1e-10)
