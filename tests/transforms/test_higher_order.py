"""Higher-order derivatives: transformations nested in one another (issue 12, nested.py).

Second derivatives of programs with real control flow (cond, switch, a while loop that
stops on a tolerance, fori loops with traced bounds, nested loops, an RNN, ODE integrators,
custom rules inside loops) are computed by every composition of two transformations:

- ``grad.grad``: reverse over reverse, ``grad(x -> <grad f(x), v>)``;
- ``jvp.grad``: forward over reverse, ``jvp(grad f, x, v)``;
- ``grad.jvp``: reverse over forward, ``grad(x -> jvp(f, x, v))``;
- ``vjp.grad``: ``vjp(grad f, x)`` applied to v (the Hessian is symmetric);
- ``jvp.jvp``: forward over forward, ``e_i · H v`` for each basis vector e_i;

and checked against closed forms, against central finite differences of the gradient
(float64), and against each other (to ~1e-10 relative). Every checkpoint strategy — of
the loops themselves, of the inner grad, of the outer transformation (which matters where
the outer function has loops of its own: unrolled gradient descent, Newton's method with
grad and its grad in the loop body) — must give bitwise identical derivatives. Then:
third derivatives, closures over the enclosing trace's values, Hessian-vector products of
random programs (test_properties' generator), and edge cases (zero-trip loops, integer
arguments, has_aux, zero inner gradients, misuses refused as they are eagerly).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from test_properties import cases, cfgrad_functions, python_run

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad.checkpoint import Binomial, EveryK, Online, Recompute, StoreAll

RTOL = 1e-10  # compositions against each other and against closed forms
FD_RTOL = 1e-6  # against central differences of the gradient (h = 1e-5)

# One object per strategy for the whole module (the per-call strategy cache is keyed on
# them); None is the default (StoreAll unless the loop chose).
STRATEGIES = (StoreAll(), Recompute(), EveryK(1), EveryK(2), EveryK(3), Binomial(1),
              Binomial(2), Binomial(3), Online(1), Online(2), Online(3))


# ---------------------------------------------------------------------------------
# Second derivatives by every composition
# ---------------------------------------------------------------------------------


def vdot(a: Any, b: Any) -> Any:
    return cnp.sum(a * b)


def zero_tangents(args: tuple) -> tuple:
    return tuple(np.zeros_like(np.asarray(a)) for a in args)


COMPOSITIONS = ("grad.grad", "jvp.grad", "grad.jvp", "vjp.grad", "jvp.jvp")
REVERSE = COMPOSITIONS[:4]  # those with a reverse pass (strategies matter)


class SecondOrders:
    """H v, the second derivative of `f(x, *args)` in x along v, by every composition of
    two transformations; `args` are traced (not differentiated). `inner` is the checkpoint
    of the inner grad. The composed functions are built once, so calling `run` with
    another outer strategy reuses their lowerings."""

    def __init__(self, f: Callable, v: Any, args: tuple = (), inner: Any = None):
        self.f, self.v, self.args = f, v, args
        self.dargs = zero_tangents(args)
        self.g = cg.grad(f, checkpoint=inner)
        self.rev_rev = lambda x, *a: vdot(self.g(x, *a), v)
        self.rev_fwd = lambda x, *a: cg.jvp(lambda y: f(y, *a), (x,), (v,))[1]

    def run(self, x: Any, outer: Any = None, only: tuple = COMPOSITIONS) -> dict[
            str, np.ndarray]:
        f, v, args, dargs = self.f, self.v, self.args, self.dargs
        x = np.asarray(x, np.float64)
        out = {}
        if "grad.grad" in only:
            out["grad.grad"] = cg.grad(self.rev_rev, checkpoint=outer)(x, *args)
        if "jvp.grad" in only:
            out["jvp.grad"] = cg.jvp(self.g, (x, *args), (v, *dargs))[1]
        if "grad.jvp" in only:
            out["grad.jvp"] = cg.grad(self.rev_fwd, checkpoint=outer)(x, *args)
        if "vjp.grad" in only:
            out["vjp.grad"] = cg.vjp(self.g, x, *args, checkpoint=outer)[1](v)[0]
        if "jvp.jvp" in only:
            def jvp_jvp(e: np.ndarray) -> Any:
                return cg.jvp(lambda x, *a: cg.jvp(lambda y: f(y, *a), (x,), (e,))[1],
                              (x, *args), (v, *dargs))[1]

            if x.shape == ():
                out["jvp.jvp"] = jvp_jvp(np.float64(1.0))
            else:
                basis = np.eye(x.size).reshape(x.size, *x.shape)
                out["jvp.jvp"] = np.array([jvp_jvp(e) for e in basis]).reshape(x.shape)
        return {k: np.asarray(r) for k, r in out.items()}


def second_orders(f: Callable, x: Any, v: Any, args: tuple = (), *, inner: Any = None,
                  outer: Any = None, only: tuple = COMPOSITIONS) -> dict[str, np.ndarray]:
    return SecondOrders(f, v, args, inner).run(x, outer, only)


def gradient_fd(f: Callable, x: Any, v: Any, args: tuple = (), h: float = 1e-5) -> np.ndarray:
    """Central differences of the (eager, first-order) gradient along v."""
    g = cg.grad(f)
    x = np.asarray(x, np.float64)
    return (np.asarray(g(x + h * v, *args)) - np.asarray(g(x - h * v, *args))) / (2 * h)


def assert_close(got: Any, want: Any, rtol: float, what: str) -> None:
    """Relative to the largest entry of `want` (so that entries near zero of a vector do
    not need relative accuracy), or to 1e-4 when all are smaller."""
    want = np.asarray(want, np.float64)
    scale = max(1e-4, float(np.max(np.abs(want)))) if want.size else 1.0
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=rtol,
                               atol=rtol * scale, err_msg=what)


def assert_all_agree(results: dict[str, np.ndarray], rtol: float = RTOL) -> None:
    first = next(iter(results))
    for name, r in results.items():
        assert np.shape(r) == np.shape(results[first]), (name, np.shape(r))
        assert_close(r, results[first], rtol, f"{name} vs {first}")


def assert_bitwise(got: dict[str, np.ndarray], want: dict[str, np.ndarray], what: str) -> None:
    assert got.keys() <= want.keys()
    for name in got:
        g, w = got[name], want[name]
        assert g.dtype == w.dtype and np.array_equal(g, w), (
            f"{what}, {name}: {g!r} differs from the default's {w!r} "
            f"(by {np.max(np.abs(g - w))})")


# ---------------------------------------------------------------------------------
# Closed forms
# ---------------------------------------------------------------------------------


def leibniz(fs: list[float], gs: list[float], n: int) -> float:
    """The n-th derivative of a product from both factors' derivatives 0..n."""
    return sum(math.comb(n, k) * fs[k] * gs[n - k] for k in range(n + 1))


def sqrt_derivatives(a: float) -> list[float]:
    return [a**0.5, 0.5 * a**-0.5, -0.25 * a**-1.5, 0.375 * a**-2.5]


def sin_derivatives(a: float) -> list[float]:
    return [math.sin(a), math.cos(a), -math.sin(a), -math.cos(a)]


def exp_derivatives(a: float, k: float = 1.0) -> list[float]:
    return [k**n * math.exp(k * a) for n in range(4)]


def power_derivatives(a: float, p: int) -> list[float]:
    return [math.perm(p, n) * a ** (p - n) if n <= p else 0.0 for n in range(4)]


# ---------------------------------------------------------------------------------
# The programs
# ---------------------------------------------------------------------------------


def newton_sqrt(a: Any, checkpoint: Any = None) -> Any:
    """sqrt(a) (elementwise) by Newton's iteration from x = a, until two iterates agree to
    a relative 1e-13: the trip count depends on a, the result's derivatives are sqrt's."""

    def go_on(c: tuple) -> Any:
        x, prev = c
        return cnp.max(cnp.abs(x - prev) / x) > 1e-13

    def step(c: tuple) -> tuple:
        x, _ = c
        return 0.5 * (x + a / x), x

    return cg.while_loop(go_on, step, (a, a + 1.0), checkpoint=checkpoint, max_iters=100)[0]


def sqrt_sin(checkpoint: Any = None) -> Callable:
    return lambda a: newton_sqrt(a, checkpoint) * cnp.sin(a)


def sqrt_sin_derivative(a: float, n: int) -> float:
    return leibniz(sqrt_derivatives(a), sin_derivatives(a), n)


W_NEWTON = np.array([1.0, -2.0, 0.5])


def weighted_sqrt(checkpoint: Any = None) -> Callable:
    return lambda a: vdot(newton_sqrt(a, checkpoint), W_NEWTON)


def cond_program(checkpoint: Any = None) -> Callable:
    return lambda x: cg.cond(x > 0.0, lambda: cnp.sin(x) * x * x, lambda: cnp.exp(x) * x)


def cond_exact(x: float) -> float:
    if x > 0.0:
        return leibniz(sin_derivatives(x), power_derivatives(x, 2), 2)
    return leibniz(exp_derivatives(x), power_derivatives(x, 1), 2)


def switch_program(checkpoint: Any = None) -> Callable:
    def f(x: Any) -> Any:
        index = cnp.astype(x > 0.5, cnp.int64) + cnp.astype(x > 1.5, cnp.int64)
        return cg.switch(index, [lambda y: cnp.cos(y) * y, lambda y: y * y * y,
                                 lambda y: cnp.log(y) * y], x)

    return f


def switch_exact(x: float) -> float:
    if x <= 0.5:
        return -2.0 * math.sin(x) - x * math.cos(x)
    return 6.0 * x if x <= 1.5 else 1.0 / x


def geometric(checkpoint: Any = None) -> Callable:
    """sum_{k=0}^{n} x^k by Horner's rule, n a traced integer argument."""
    return lambda x, n: cg.fori_loop(0, n, lambda i, c: c * x + 1.0, 1.0,
                                     checkpoint=checkpoint)


def geometric_exact(x: float, n: int, order: int = 2) -> float:
    return sum(math.perm(k, order) * x ** (k - order)
               for k in range(order, n + 1))


def geometric_data_bound(checkpoint: Any = None) -> Callable:
    """The same with the bound computed from x: floor(3x)."""
    def f(x: Any) -> Any:
        n = cnp.astype(cnp.floor(3.0 * x), cnp.int64)
        return cg.fori_loop(0, n, lambda i, c: c * x + 1.0, 1.0, checkpoint=checkpoint)

    return f


def nested_loops(checkpoint: Any = None) -> Callable:
    """exp(x) multiplied by x, i times in the i-th outer iteration: x^6 exp(x)."""
    def f(x: Any) -> Any:
        def outer(i: Any, c: Any) -> Any:
            return cg.fori_loop(0, i, lambda j, d: d * x, c, checkpoint=checkpoint)

        return cg.fori_loop(0, 4, outer, cnp.exp(x), checkpoint=checkpoint)

    return f


def nested_loops_exact(x: float, n: int = 2) -> float:
    return leibniz(power_derivatives(x, 6), exp_derivatives(x), n)


def while_in_fori_in_cond(checkpoint: Any = None) -> Callable:
    """A while loop whose trip count depends on the data inside a fori loop inside a cond
    branch (no closed form: finite differences and the compositions)."""
    def f(x: Any) -> Any:
        def outer(i: Any, c: Any) -> Any:
            grown = cg.while_loop(lambda d: d < 2.0 + x,
                                  lambda d: d + 0.3 + 0.05 * cnp.sin(x * d),
                                  c, checkpoint=checkpoint)
            return 0.4 * grown + cnp.cos(x * c)

        return cg.cond(x > 0.0, lambda: cg.fori_loop(0, 3, outer, x, checkpoint=checkpoint),
                       lambda: x * x)

    return f


XS_RNN = np.array([[0.3, -0.2], [0.1, 0.5], [-0.4, 0.2], [0.7, -0.1], [0.2, 0.2]])
U_RNN = np.array([[0.5, -0.3], [0.2, 0.4], [-0.1, 0.6]])
H0_RNN = np.array([0.1, -0.2, 0.3])
W_OUT = np.array([1.0, -0.5, 0.25])


def rnn(checkpoint: Any = None) -> Callable:
    """A tanh cell run over 5 inputs from a vector state; the loss is linear in the last
    state, differentiated in the recurrent weights W (3x3)."""
    def f(w: Any) -> Any:
        def cell(i: Any, h: Any) -> Any:
            return cnp.tanh(w @ h + U_RNN @ cnp.asarray(XS_RNN)[i])

        return vdot(cg.fori_loop(0, len(XS_RNN), cell, H0_RNN, checkpoint=checkpoint), W_OUT)

    return f


def euler_step(rhs: Callable, y: Any, h: float) -> Any:
    return y + h * rhs(y)


def rk4_step(rhs: Callable, y: Any, h: float) -> Any:
    k1 = rhs(y)
    k2 = rhs(y + 0.5 * h * k1)
    k3 = rhs(y + 0.5 * h * k2)
    k4 = rhs(y + h * k3)
    return y + h / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4)


ODE_STEPS, ODE_H, ODE_Y0 = 8, 0.15, 1.3


def decay(step: Callable) -> Callable:
    """y' = -k y integrated by `step` from y0: y_N = y0 R(-k h)^N, R the scheme's
    stability polynomial; differentiated in k."""
    def make(checkpoint: Any = None) -> Callable:
        return lambda k: cg.fori_loop(0, ODE_STEPS,
                                      lambda i, y: step(lambda u: -k * u, y, ODE_H),
                                      ODE_Y0, checkpoint=checkpoint)

    return make


def decay_exact(coefficients: list[float]) -> Callable:
    """d^n/dk^n of y0 R(-kh)^N, R = sum c_j z^j (by the chain rule on z = -kh)."""
    def exact(k: float, n: int = 2) -> float:
        z, N, h = -k * ODE_H, ODE_STEPS, ODE_H
        r = [sum(c * math.perm(j, m) * z ** (j - m)
                 for j, c in enumerate(coefficients) if j >= m) for m in range(4)]
        p = [math.perm(N, m) * r[0] ** (N - m) for m in range(4)]
        if n == 2:
            d = p[2] * r[1] ** 2 + p[1] * r[2]
        else:
            d = p[3] * r[1] ** 3 + 3 * p[2] * r[1] * r[2] + p[1] * r[3]
        return ODE_Y0 * (-h) ** n * d

    return exact


EULER = [1.0, 1.0]
RK4 = [1.0, 1.0, 1 / 2, 1 / 6, 1 / 24]


def pendulum(checkpoint: Any = None) -> Callable:
    """A damped pendulum (theta'' = -p0 sin theta - p1 theta') by RK4, vector state,
    differentiated in its parameters p."""
    def f(p: Any) -> Any:
        def rhs(y: Any) -> Any:
            return cnp.stack([y[1], -p[0] * cnp.sin(y[0]) - p[1] * y[1]])

        y = cg.fori_loop(0, 10, lambda i, y: rk4_step(rhs, y, 0.2), np.array([1.0, 0.0]),
                         checkpoint=checkpoint)
        return y[0] + 0.5 * y[1]

    return f


@cg.custom_vjp
def xsin(x: Any) -> Any:
    return x * cnp.sin(x)


def _xsin_fwd(x: Any) -> tuple:
    return x * cnp.sin(x), (x, cnp.sin(x), cnp.cos(x))


def _xsin_bwd(res: tuple, ct: Any) -> tuple:
    x, s, c = res
    return (ct * (s + x * c),)


xsin.defvjp(_xsin_fwd, _xsin_bwd)


@cg.custom_jvp
def softplus(x: Any) -> Any:
    return cnp.log1p(cnp.exp(x))


@softplus.defjvp
def _softplus_jvp(primals: tuple, tangents: tuple) -> tuple:
    (x,), (t,) = primals, tangents
    return softplus(x), t * cnp.sigmoid(x)


def custom_vjp_loop(checkpoint: Any = None, fn: Callable = xsin) -> Callable:
    return lambda x: cg.fori_loop(0, 4, lambda i, c: 0.6 * fn(c) + 0.3 * x, x,
                                  checkpoint=checkpoint)


def custom_jvp_loop(checkpoint: Any = None, fn: Callable = softplus) -> Callable:
    """softplus in a while loop that stops on the data (the carry grows by at least 0.2
    per trip, so it stops from any start)."""
    return lambda x: cg.while_loop(lambda c: c < 3.0, lambda c: c + 0.5 * fn(c * x) + 0.2, x,
                                   checkpoint=checkpoint)


def plain_xsin(x: Any) -> Any:
    return x * cnp.sin(x)


def plain_softplus(x: Any) -> Any:
    return cnp.log1p(cnp.exp(x))


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    make: Callable  # loop checkpoint -> f(x, *args)
    x: Any
    v: Any
    args: tuple = ()
    exact: Callable | None = None  # (x, *args) -> H v
    reference: Callable | None = None  # () -> the same function without custom rules
    loops: bool = True
    sweep: bool = True  # in the per-program strategy sweep (not for repeated programs)

    def __str__(self) -> str:
        return self.name


RNG = np.random.default_rng(12)
W0 = RNG.standard_normal((3, 3)) * 0.6
V_W = RNG.standard_normal((3, 3))

CASES = [
    Case("cond-true", cond_program, 0.8, 1.0, exact=cond_exact, loops=False),
    Case("cond-false", cond_program, -0.6, -0.7, exact=lambda x: -0.7 * cond_exact(x),
         loops=False),
    *(Case(f"switch-{i}", switch_program, x, 1.0, exact=switch_exact, loops=False)
      for i, x in enumerate((0.3, 1.1, 2.2))),
    *(Case(f"newton-sqrt-{a}", sqrt_sin, a, 1.0, exact=lambda a: sqrt_sin_derivative(a, 2),
           sweep=a == 2.3) for a in (0.5, 2.3, 9.0)),
    Case("newton-sqrt-vector", weighted_sqrt, np.array([0.5, 2.0, 7.0]),
         np.array([0.3, -1.0, 2.0]),
         exact=lambda a: W_NEWTON * -0.25 * a**-1.5 * np.array([0.3, -1.0, 2.0])),
    Case("fori-traced-bound", geometric, 0.7, 1.0, args=(np.int64(6),),
         exact=lambda x, n: geometric_exact(x, int(n))),
    Case("fori-data-bound", geometric_data_bound, 1.4, 1.0,
         exact=lambda x: geometric_exact(x, 4)),
    Case("nested-fori", nested_loops, 0.9, 1.0, exact=nested_loops_exact),
    Case("while-in-fori-in-cond", while_in_fori_in_cond, 0.35, 1.0),
    Case("rnn", rnn, W0, V_W),
    Case("euler", decay(euler_step), 0.8, 1.0, exact=decay_exact(EULER), sweep=False),
    Case("rk4", decay(rk4_step), 0.8, 1.0, exact=decay_exact(RK4)),
    Case("rk4-pendulum", pendulum, np.array([2.0, 0.3]), np.array([0.4, -1.0]),
         sweep=False),
    Case("custom-vjp-in-fori", custom_vjp_loop, 0.7, 1.0,
         reference=lambda: custom_vjp_loop(fn=plain_xsin)),
    Case("custom-jvp-in-while", custom_jvp_loop, 0.9, 1.0,
         reference=lambda: custom_jvp_loop(fn=plain_softplus)),
]
LOOP_CASES = [c for c in CASES if c.loops and c.sweep]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_second_derivatives_agree_with_closed_forms_and_finite_differences(case: Case) -> None:
    """All five compositions agree with each other to ~1e-10, with the closed form where
    there is one (or the same program without custom rules), and with central
    differences of the gradient."""
    f = case.make()
    results = second_orders(f, case.x, case.v, case.args)
    assert_all_agree(results)
    if case.exact is not None:
        assert_close(results["grad.grad"], case.exact(case.x, *case.args), RTOL, "closed form")
    if case.reference is not None:
        plain = second_orders(case.reference(), case.x, case.v, case.args)
        assert_close(results["grad.grad"], plain["grad.grad"], RTOL, "without custom rules")
    fd = gradient_fd(f, case.x, case.v, case.args)
    assert_close(results["grad.grad"], fd, FD_RTOL, "finite differences")


# ---------------------------------------------------------------------------------
# Checkpointing: bitwise identical second derivatives
# ---------------------------------------------------------------------------------


def gradient_descent(f: Callable, inner: Any = None, loop: Any = None) -> Callable:
    """Three unrolled gradient-descent steps on f from x (a loop around an inner grad: the
    outer transformation's strategy applies to it)."""
    g = cg.grad(f, checkpoint=inner)
    return lambda x, *a: cg.fori_loop(0, 3, lambda i, c: c - 0.1 * g(c, *a), x,
                                      checkpoint=loop)


# the strategies each program is swept over, against the default (StoreAll); the Newton
# loop gets all of STRATEGIES
SWEEP = (Recompute(), EveryK(2), Binomial(2), Online(1))


@pytest.mark.parametrize("case", LOOP_CASES, ids=str)
def test_every_strategy_gives_bitwise_identical_second_derivatives(case: Case) -> None:
    """The loops' own `checkpoint=`, the inner grad's and the outer transformation's:
    each strategy alone, then combinations, against the default (StoreAll). Forward over
    forward has no reverse pass, so it is left out."""
    x, v, args = case.x, case.v, case.args
    default = SecondOrders(case.make(), v, args)
    want = default.run(x, only=REVERSE)
    for s in SWEEP:
        assert_bitwise(second_orders(case.make(s), x, v, args, only=REVERSE), want,
                       f"loops {s!r}")
        assert_bitwise(SecondOrders(case.make(), v, args, inner=s).run(
            x, only=("grad.grad", "jvp.grad", "vjp.grad")), want, f"inner {s!r}")
        assert_bitwise(default.run(x, outer=s, only=("grad.grad", "grad.jvp", "vjp.grad")),
                       want, f"outer {s!r}")
    for loop, inner, outer in ((SWEEP[0], SWEEP[2], SWEEP[1]), (SWEEP[3], SWEEP[0], SWEEP[2])):
        got = second_orders(case.make(loop), x, v, args, inner=inner, outer=outer,
                            only=REVERSE)
        assert_bitwise(got, want, f"loops {loop!r}, inner {inner!r}, outer {outer!r}")


GD_CASES = [c for c in LOOP_CASES if c.name in (
    "newton-sqrt-2.3", "fori-traced-bound", "rnn", "custom-vjp-in-fori", "custom-jvp-in-while")]


@pytest.mark.parametrize("case", GD_CASES, ids=str)
def test_gradient_descent_unrolled_every_strategy_bitwise(case: Case) -> None:
    """The derivative of three gradient-descent steps (a loop whose body is an inner grad)
    in their starting point: every strategy of the outer loop, of the loops inside f, of
    the inner grad and of the outer grad/vjp gives the same bits; the default agrees with
    finite differences and forward mode."""
    x, v, args = case.x, case.v, case.args

    def derivatives(loop: Any = None, f_loops: Any = None, inner: Any = None,
                    outer: Any = None, vjp: bool = True) -> dict[str, np.ndarray]:
        phi = gradient_descent(case.make(f_loops), inner, loop)
        x64 = np.asarray(x, float)
        out = {
            "grad": np.asarray(cg.grad(lambda x, *a: vdot(phi(x, *a), v),
                                       checkpoint=outer)(x64, *args)),
            "jvp": np.asarray(cg.jvp(lambda x: phi(x, *args), (x64,), (v,))[1]),
        }
        if vjp:
            out["vjp"] = np.asarray(cg.vjp(phi, x64, *args, checkpoint=outer)[1](v)[0])
        return out

    want = derivatives()
    phi = gradient_descent(case.make())
    h = 1e-5
    fd = (np.asarray(phi(x + h * v, *args)) - np.asarray(phi(x - h * v, *args))) / (2 * h)
    # phi's Jacobian J = (I - 0.1 H_3)(I - 0.1 H_2)(I - 0.1 H_1) is not symmetric: jvp gives
    # J v (against finite differences), grad and vjp J^T v (against forward mode, <J e_i, v>)
    assert_close(want["jvp"], fd, FD_RTOL, "jvp vs finite differences")
    assert_close(want["grad"], want["vjp"], RTOL, "grad vs vjp")
    x64 = np.asarray(x, float)
    basis = np.eye(x64.size).reshape(x64.size, *x64.shape)
    jt_v = np.array([vdot(cg.jvp(lambda x: phi(x, *args), (x64,), (e,))[1], v)
                     for e in basis]).reshape(x64.shape)
    assert_close(want["grad"], jt_v, RTOL, "J^T v by reverse vs by forward mode")
    for s in SWEEP:
        for knob in ("loop", "f_loops", "inner", "outer"):
            assert_bitwise(derivatives(**{knob: s}, vjp=knob == "outer"), want,
                           f"{knob} {s!r}")


def newton_argmin(theta: Any, checkpoint: Any = None) -> Any:
    """argmin_x cosh(x) - theta x = asinh(theta) by Newton's method, x -= f'(x) / f''(x),
    with f' and f'' by grad and grad of grad inside the while body, until two iterates
    agree to 1e-13: a derivative of it is at least third order."""
    obj = lambda x: cnp.cosh(x) - theta * x  # noqa: E731
    slope = cg.grad(obj)
    curvature = cg.grad(slope)

    def go_on(c: tuple) -> Any:
        x, prev = c
        return cnp.abs(x - prev) > 1e-13 * (1.0 + cnp.abs(x))

    def step(c: tuple) -> tuple:
        x, _ = c
        return x - slope(x) / curvature(x), x

    start = theta * 0.0
    return cg.while_loop(go_on, step, (start, start + 1.0), checkpoint=checkpoint,
                         max_iters=100)[0]


def test_newtons_method_with_grad_and_hessian_in_the_loop_body() -> None:
    """x*(theta) = asinh(theta): x*' = (1 + theta^2)^-1/2, x*'' = -theta (1 + theta^2)^-3/2
    (the implicit function theorem, which differentiating through converged Newton
    iterations reproduces); every strategy of the loop gives the same bits."""
    t0 = 0.7
    first, second = (1 + t0**2) ** -0.5, -t0 * (1 + t0**2) ** -1.5
    assert_close(newton_argmin(t0), math.asinh(t0), RTOL, "value")
    assert_close(cg.grad(newton_argmin)(t0), first, RTOL, "first derivative")
    want = {"grad.grad": cg.grad(cg.grad(newton_argmin))(t0),
            "jvp.grad": cg.jvp(cg.grad(newton_argmin), (t0,), (1.0,))[1],
            "grad.jvp": cg.grad(lambda t: cg.jvp(newton_argmin, (t,), (1.0,))[1])(t0)}
    for name, got in want.items():
        assert_close(got, second, RTOL, name)
    for s in SWEEP:
        f = lambda t, s=s: newton_argmin(t, s)  # noqa: E731
        assert cg.grad(cg.grad(f))(t0) == want["grad.grad"], s
        assert cg.jvp(cg.grad(f), (t0,), (1.0,))[1] == want["jvp.grad"], s
        inner = cg.grad(newton_argmin, checkpoint=s)
        assert cg.grad(inner)(t0) == want["grad.grad"], s


class CountingStoreAll(StoreAll):
    """StoreAll that counts the loop executions it is given."""

    def __init__(self) -> None:
        self.executions = 0

    def __eq__(self, other: object) -> bool:
        return other is self

    def __hash__(self) -> int:
        return id(self)

    def begin(self, run: Any) -> Any:
        self.executions += 1
        return super().begin(run)


def test_the_outer_strategy_reaches_the_loops_its_reverse_pass_reverses() -> None:
    """A call's `checkpoint` "is the strategy for every loop that did not choose its own"
    (api.md, grad and vjp). The reverse pass of a second derivative reverses the loops of f (in
    the JVP program of f's nested sub-program); when neither those loops nor the inner
    transformation chose a strategy, the outer call's choice should be theirs, or
    checkpointing a Hessian-vector product by reverse over forward is impossible (jvp
    takes no `checkpoint=`)."""
    f = lambda x: cg.fori_loop(0, 3, lambda i, c: cnp.sin(c) * x, x)  # noqa: E731
    # control: a loop of the outer program itself
    spy = CountingStoreAll()
    cg.grad(lambda x: f(x) + cg.grad(f)(x), checkpoint=spy)(0.7)
    assert spy.executions >= 1
    spy = CountingStoreAll()
    cg.grad(cg.grad(f, checkpoint=spy))(0.7)
    assert spy.executions >= 1, "the inner grad's strategy"
    missed = []
    for name, outer in [
        ("grad(x -> jvp(f, x, 1), checkpoint=s)",
         lambda s: cg.grad(lambda x: cg.jvp(f, (x,), (1.0,))[1], checkpoint=s)(0.7)),
        ("grad(grad(f), checkpoint=s)", lambda s: cg.grad(cg.grad(f), checkpoint=s)(0.7)),
        ("vjp(grad(f), x, checkpoint=s)",
         lambda s: cg.vjp(cg.grad(f), 0.7, checkpoint=s)[1](1.0)),
    ]:
        spy = CountingStoreAll()
        outer(spy)
        if spy.executions == 0:
            missed.append(name)
    assert not missed, f"the outer strategy is never used by: {missed}"


# ---------------------------------------------------------------------------------
# Third derivatives
# ---------------------------------------------------------------------------------


def sin_exp4(checkpoint: Any = None) -> Callable:
    """sin(x) multiplied by exp(x) four times in a loop: sin(x) e^{4x}."""
    return lambda x: cg.fori_loop(0, 4, lambda i, c: c * cnp.exp(x), cnp.sin(x),
                                  checkpoint=checkpoint)


def sin_exp4_exact(x: float, n: int) -> float:
    """d^n/dx^n sin(x) e^{4x} = e^{4x} Im((4 + i)^n e^{ix})."""
    return math.exp(4 * x) * ((4 + 1j) ** n * complex(math.cos(x), math.sin(x))).imag


def third_orders(f: Callable, x: float, inner: Any = None,
                 forward_only: bool = True) -> dict[str, np.ndarray]:
    """The third derivative of f at x by six compositions of three transformations
    (`inner`: the checkpoint of every grad but the outermost; `forward_only`: include
    jvp.jvp.jvp, which has no reverse pass)."""
    g = cg.grad(f, checkpoint=inner)
    gg = cg.grad(g, checkpoint=inner)
    out = {
        "grad.grad.grad": cg.grad(gg)(x),
        "jvp.grad.grad": cg.jvp(gg, (x,), (1.0,))[1],
        "grad.jvp.grad": cg.grad(lambda x: cg.jvp(g, (x,), (1.0,))[1])(x),
        "jvp.jvp.grad": cg.jvp(lambda x: cg.jvp(g, (x,), (1.0,))[1], (x,), (1.0,))[1],
        "grad.grad.jvp": cg.grad(cg.grad(lambda x: cg.jvp(f, (x,), (1.0,))[1],
                                         checkpoint=inner))(x),
    }
    if forward_only:
        out["jvp.jvp.jvp"] = cg.jvp(lambda x: cg.jvp(lambda y: cg.jvp(f, (y,), (1.0,))[1],
                                                     (x,), (1.0,))[1], (x,), (1.0,))[1]
    return {k: np.asarray(r) for k, r in out.items()}


@pytest.mark.parametrize("make, x, exact", [
    pytest.param(sin_exp4, 0.4, lambda x: sin_exp4_exact(x, 3), id="fori-sin-exp"),
    pytest.param(sqrt_sin, 2.3, lambda a: sqrt_sin_derivative(a, 3), id="newton-while"),
    pytest.param(nested_loops, 0.9, lambda x: nested_loops_exact(x, 3), id="nested-fori"),
    pytest.param(decay(rk4_step), 0.8, lambda k: decay_exact(RK4)(k, 3), id="rk4"),
])
def test_third_derivatives_against_closed_forms(make: Callable, x: float,
                                                exact: Callable) -> None:
    results = third_orders(make(), x)
    assert_all_agree(results)
    assert_close(results["grad.grad.grad"], exact(x), RTOL, "closed form")
    h = 1e-4
    gg = cg.grad(cg.grad(make()))
    assert_close(results["grad.grad.grad"], (gg(x + h) - gg(x - h)) / (2 * h), FD_RTOL,
                 "finite differences of the second derivative")


def test_third_derivatives_every_strategy_bitwise() -> None:
    """The Newton loop's own strategy and the inner grads' change no bit of the third
    derivative."""
    want = third_orders(sqrt_sin(), 2.3, forward_only=False)
    for s in SWEEP:
        assert_bitwise(third_orders(sqrt_sin(), 2.3, inner=s, forward_only=False), want,
                       f"inner {s!r}")
        assert_bitwise(third_orders(sqrt_sin(s), 2.3, forward_only=False), want,
                       f"loop {s!r}")


# ---------------------------------------------------------------------------------
# Closures over the enclosing trace's values
# ---------------------------------------------------------------------------------


def loop_xy(x: Any, y: Any) -> Any:
    """x^2 y^3 by a loop that multiplies by y; its mixed partial is 6 x y^2."""
    return cg.fori_loop(0, 3, lambda i, c: c * y, x * x)


def loop_smooth(x: Any, y: Any) -> Any:
    """No closed form: sin and a data-dependent while loop mixing x and y."""
    c = cg.while_loop(lambda c: c < 2.5, lambda c: c * (1.1 + 0.2 * cnp.sin(x * y)) + 0.1 * y,
                      x + 0.5)
    return cnp.cos(c * y) + x * c


@pytest.mark.parametrize("fun", [loop_xy, loop_smooth])
def test_mixed_partials_of_a_closure(fun: Callable) -> None:
    """d/dy of an inner grad in x closing over y, against finite differences of the
    first-order partial, the other order (Schwarz), and forward mode."""
    x0, y0, h = 0.8, 1.1, 1e-5
    by_y = cg.grad(lambda y: cg.grad(lambda x: fun(x, y))(x0))(y0)
    by_x = cg.grad(lambda x: cg.grad(lambda y: fun(x, y))(y0))(x0)
    fwd = cg.jvp(lambda y: cg.grad(lambda x: fun(x, y))(x0), (y0,), (1.0,))[1]
    rev_fwd = cg.grad(lambda y: cg.jvp(lambda x: fun(x, y), (x0,), (1.0,))[1])(y0)
    fx = cg.grad(fun, 0)
    fd = (fx(x0, y0 + h) - fx(x0, y0 - h)) / (2 * h)
    assert_close(by_y, fd, FD_RTOL, "finite differences")
    for other in (by_x, fwd, rev_fwd):
        assert_close(other, by_y, RTOL, "orders and modes")
    if fun is loop_xy:
        assert_close(by_y, 6 * x0 * y0**2, RTOL, "closed form")


def test_inner_point_depends_on_the_closed_over_value() -> None:
    """d/dy f_x(y^2, y) = f_xx(y^2, y) 2y + f_xy(y^2, y); for x^2 y^3, f_x(y^2, y) = 2y^5."""
    y0 = 1.2
    got = cg.grad(lambda y: cg.grad(lambda x: loop_xy(x, y))(y * y))(y0)
    assert_close(got, 10 * y0**4, RTOL, "closed form")
    assert_close(cg.jvp(lambda y: cg.grad(lambda x: loop_xy(x, y))(y * y), (y0,), (1.0,))[1],
                 got, RTOL, "forward over reverse")


def test_the_same_value_closed_over_twice() -> None:
    """Two inner grads close over y, each using it twice, one also at x = y:
    G(y) = d/dx[x^2 y + sin(xy)](y) + d/dx[x y^2](y) = 3y^2 + y cos(y^2)."""
    def big_g(y: Any) -> Any:
        first = cg.grad(lambda x: x * x * y + cnp.sin(x * y))(y)
        second = cg.grad(lambda x: x * y * y)(y)
        return first + second

    y0 = 0.9
    want = 6 * y0 + math.cos(y0**2) - 2 * y0**2 * math.sin(y0**2)
    assert_close(big_g(y0), 3 * y0**2 + y0 * math.cos(y0**2), RTOL, "value")
    assert_close(cg.grad(big_g)(y0), want, RTOL, "grad")
    assert_close(cg.jvp(big_g, (y0,), (1.0,))[1], want, RTOL, "jvp")
    assert_close(cg.grad(cg.grad(big_g))(y0), cg.jvp(cg.grad(big_g), (y0,), (1.0,))[1],
                 RTOL, "one order up")


def test_closed_over_value_used_only_in_an_inner_while_body() -> None:
    """Inner f(x) multiplies x by y until it reaches 5 (y appears only in the body):
    from x0 = 1 at y = 1.3 that is 7 trips, so f_x = y^7 and d/dy f_x = 7 y^6."""
    x0, y0 = 1.0, 1.3

    def inner(y: Any) -> Any:
        return cg.grad(lambda x: cg.while_loop(lambda c: c < 5.0, lambda c: c * y, x))(x0)

    assert_close(inner(y0), y0**7, RTOL, "the inner gradient")
    for outer in (cg.grad(inner)(y0), cg.jvp(inner, (y0,), (1.0,))[1]):
        assert_close(outer, 7 * y0**6, RTOL, "closed form")
    for s in STRATEGIES:
        got = cg.grad(lambda y, s=s: cg.grad(lambda x: cg.while_loop(
            lambda c: c < 5.0, lambda c: c * y, x, checkpoint=s))(x0))(y0)
        assert got == cg.grad(inner)(y0), s


def three_deep(x: Any, y: Any, z: Any) -> Any:
    """sin(x) y^3 z^3 by a loop: d^3/dx dy dz = 9 cos(x) y^2 z^2."""
    return cg.fori_loop(0, 3, lambda i, c: c * y * z, cnp.sin(x))


def test_closures_nested_three_deep() -> None:
    x0, y0, z0 = 0.7, 1.1, 0.8
    want = 9 * math.cos(x0) * y0**2 * z0**2
    xyz = cg.grad(lambda z: cg.grad(lambda y: cg.grad(lambda x: three_deep(x, y, z))(x0))(y0))
    zyx = cg.grad(lambda x: cg.grad(lambda y: cg.grad(lambda z: three_deep(x, y, z))(z0))(y0))
    fwd = cg.jvp(lambda z: cg.jvp(lambda y: cg.grad(lambda x: three_deep(x, y, z))(x0),
                                  (y0,), (1.0,))[1], (z0,), (1.0,))[1]
    assert_close(xyz(z0), want, RTOL, "x, y, z")
    assert_close(zyx(x0), want, RTOL, "z, y, x")
    assert_close(fwd, want, RTOL, "forward over forward over reverse")
    # each inner point computed from the enclosing variables: x0 = z y, y0 = z^2. The
    # innermost grad is g(y, z) = f_x(zy, y, z) = cos(zy) y^3 z^3; the middle one its total
    # derivative in y at y = z^2, h(z) = 3 cos(z^3) z^7 - sin(z^3) z^10; the outer h'(z).
    deep = cg.grad(lambda z: cg.grad(lambda y: cg.grad(
        lambda x: three_deep(x, y, z))(z * y))(z * z))
    c, s = math.cos(z0**3), math.sin(z0**3)
    want_deep = 21 * c * z0**6 - 19 * s * z0**9 - 3 * c * z0**12
    assert_close(deep(z0), want_deep, RTOL, "inner points from the enclosing variables")


# ---------------------------------------------------------------------------------
# Random programs: Hessian-vector products three ways
# ---------------------------------------------------------------------------------


def leaves(t: tuple) -> np.ndarray:
    return np.concatenate([np.ravel(np.asarray(x, np.float64)) for x in t])


@given(cases(), st.integers(0, 2**32 - 1), st.sampled_from(SWEEP))
def test_random_programs_hessian_vector_products(case: tuple, seed: int,
                                                 strategy: Any) -> None:
    """Forward over reverse, reverse over forward and reverse over reverse agree to ~1e-10
    on random programs with branches in loops, loops in branches, nested and zero-trip
    loops; the inner grad's strategy changes no bit; all agree with central differences
    of the gradient when the perturbed points take the same path (decisions and trip
    counts) as the point itself."""
    prog, a, b, v = case
    _, scalar = cfgrad_functions(prog)
    rng = np.random.default_rng(seed)
    d = (rng.standard_normal(), rng.standard_normal(), rng.standard_normal(prog.dim))
    x = (np.float64(a), np.float64(b), v)
    g = cg.grad(scalar, (0, 1, 2))
    fwd_rev = leaves(cg.jvp(g, x, d)[1])
    rev_fwd = leaves(cg.grad(lambda *x: cg.jvp(scalar, x, d)[1], (0, 1, 2))(*x))

    def rev_rev(g: Callable) -> np.ndarray:
        return leaves(cg.grad(lambda *x: sum(vdot(gi, di) for gi, di in zip(g(*x), d)),
                              (0, 1, 2))(*x))

    assert_close(rev_fwd, fwd_rev, RTOL, "reverse over forward vs forward over reverse")
    assert_close(rev_rev(g), fwd_rev, RTOL, "reverse over reverse vs forward over reverse")
    checkpointed = cg.grad(scalar, (0, 1, 2), checkpoint=strategy)
    assert np.array_equal(leaves(cg.jvp(checkpointed, x, d)[1]), fwd_rev), strategy
    assert np.array_equal(rev_rev(checkpointed), rev_rev(g)), strategy

    h = 1e-5
    _, base = python_run(prog, a, b, v)
    sides = []
    for sign in (1.0, -1.0):
        p = tuple(xi + sign * h * di for xi, di in zip(x, d))
        _, run = python_run(prog, float(p[0]), float(p[1]), p[2])
        assume((run.decisions, run.trips) == (base.decisions, base.trips))
        sides.append(leaves(g(*p)))
    assert_close(fwd_rev, (sides[0] - sides[1]) / (2 * h), FD_RTOL, "finite differences")


# ---------------------------------------------------------------------------------
# Edge cases
# ---------------------------------------------------------------------------------


def test_zero_trip_while_loop_in_the_inner_function() -> None:
    """The loop runs zero times at x0 (its carry passes through): f = x^3 there."""
    def f(x: Any) -> Any:
        c = cg.while_loop(lambda c: c > 5.0, lambda c: c * 0.5, x * x * x)
        return c + 0.0 * x

    x0 = 1.2
    results = second_orders(f, x0, 1.0)
    assert_all_agree(results)
    assert_close(results["grad.grad"], 6 * x0, RTOL, "closed form")
    for s in STRATEGIES:
        assert_bitwise(second_orders(f, x0, 1.0, inner=s), results, f"inner {s!r}")
    # and a fori loop with a traced bound of zero
    g = lambda x, n: cg.fori_loop(0, n, lambda i, c: c * x, x * x)  # noqa: E731
    assert_close(second_orders(g, x0, 1.0, (np.int64(0),))["grad.grad"], 2.0, RTOL, "zero n")
    assert_close(second_orders(g, x0, 1.0, (np.int64(2),))["grad.grad"], 12 * x0**2, RTOL,
                 "n = 2")


def test_integer_arguments_mixed_with_float_ones() -> None:
    """f(x, n, y) with n an int (a fori bound): second derivatives in x and y through argnums,
    the int passed traced at every level."""
    def f(x: Any, n: Any, y: Any) -> Any:
        return cg.fori_loop(0, n, lambda i, c: c * y + cnp.astype(i, cnp.float64) * x, x * x)

    def exact_grad(x: float, n: int, y: float) -> tuple[float, float]:
        c, dcx, dcy = x * x, 2 * x, 0.0
        for i in range(n):
            c, dcx, dcy = c * y + i * x, dcx * y + i, dcy * y + c
        return dcx, dcy

    x0, n0, y0 = 0.6, np.int64(4), 1.3
    gx = cg.grad(f, argnums=0)
    gxy = cg.grad(f, argnums=(0, 2))
    hxy = cg.grad(lambda x, n, y: gx(x, n, y), argnums=2)(x0, n0, y0)
    h = 1e-5
    fd_xy = (exact_grad(x0, 4, y0 + h)[0] - exact_grad(x0, 4, y0 - h)[0]) / (2 * h)
    assert_close(hxy, fd_xy, FD_RTOL, "d/dy f_x")
    # the Hessian rows in (x, y) by reverse over reverse and forward over reverse
    rows = [cg.grad(lambda x, n, y, k=k: gxy(x, n, y)[k], argnums=(0, 2))(x0, n0, y0)
            for k in (0, 1)]
    fwd = [cg.jvp(gxy, (x0, n0, y0), t)[1] for t in ((1.0, 0, 0.0), (0.0, 0, 1.0))]
    hessian = np.array(rows)
    assert_close(hessian, np.array(fwd).T, RTOL, "reverse vs forward over reverse")
    assert_close(hessian, hessian.T, RTOL, "symmetry")
    assert_close(hessian[0, 1], hxy, RTOL, "argnums=2 alone")


@pytest.mark.parametrize("call, match", [
    pytest.param(lambda x, n: cg.grad(lambda y, m: y * y, argnums=1)(x, n),
                 "gradients need float inputs", id="grad-in-an-int-argument"),
    pytest.param(lambda x, n: cg.grad(lambda y: (y * y, y))(x), "scalar output",
                 id="grad-of-a-pair-without-has_aux"),
    pytest.param(lambda x, n: cg.grad(lambda y: y * y, has_aux=True)(x),
                 r"pair \(value, aux\)", id="has_aux-without-a-pair"),
    pytest.param(lambda x, n: cg.grad(lambda y: (y * y, y, y), has_aux=True)(x),
                 r"pair \(value, aux\)", id="has_aux-with-a-triple"),
    pytest.param(lambda x, n: cg.vjp(lambda y: y * y, x, has_aux=True),
                 r"pair \(value, aux\)", id="vjp-has_aux-without-a-pair"),
    pytest.param(lambda x, n: cg.grad(lambda y: cnp.astype(y, cnp.int64))(x), "float scalar",
                 id="grad-of-an-int-output"),
])
def test_nested_transformations_refuse_what_eager_ones_refuse(call: Callable,
                                                              match: str) -> None:
    """A misuse of grad/vjp is the same ArgumentTypeError whether the transformation runs
    eagerly or inside another one's trace (where it is a node, not a run): a nested grad in
    an integer argument must not silently return an integer zero, nor one of a function
    returning a pair differentiate its first element."""
    x0, n0 = 0.7, np.int64(3)
    with pytest.raises(cg.ArgumentTypeError, match=match):
        call(x0, n0)
    with pytest.raises(cg.ArgumentTypeError, match=match):
        cg.grad(lambda x, n: (call(x, n), x)[1])(x0, n0)


def test_has_aux_in_the_inner_grad() -> None:
    """Inner f returns (x^3, sin x): grad with has_aux gives (3x^2, sin x); the outer grad
    differentiates both, the aux included: 6x + cos x."""
    def f(x: Any) -> tuple:
        y = cg.fori_loop(0, 2, lambda i, c: c * x, x)
        return y, cnp.sin(x)

    inner = cg.grad(f, has_aux=True)
    x0 = 0.7
    g, aux = inner(x0)
    assert_close(g, 3 * x0**2, RTOL, "first order")
    assert_close(aux, math.sin(x0), RTOL, "aux")
    outer = lambda x: inner(x)[0] + inner(x)[1]  # noqa: E731
    for got in (cg.grad(outer)(x0), cg.jvp(outer, (x0,), (1.0,))[1],
                cg.grad(lambda x: inner(x)[0])(x0) + math.cos(x0)):
        assert_close(got, 6 * x0 + math.cos(x0), RTOL, "second order")
    outer_aux = cg.grad(lambda x: (inner(x)[0], inner(x)[1] * 2.0), has_aux=True)(x0)
    assert_close(outer_aux[0], 6 * x0, RTOL, "has_aux at both levels")
    assert_close(outer_aux[1], 2 * math.sin(x0), RTOL, "the outer aux")


def test_value_and_grad_inside_grad() -> None:
    """d/dx (f + f') = f' + f'' for f = sqrt(x) sin(x) by Newton's loop."""
    a0 = 2.3
    def both(a: Any) -> Any:
        value, slope = cg.value_and_grad(sqrt_sin())(a)
        return value + slope

    want = sqrt_sin_derivative(a0, 1) + sqrt_sin_derivative(a0, 2)
    assert_close(cg.grad(both)(a0), want, RTOL, "grad")
    assert_close(cg.jvp(both, (a0,), (1.0,))[1], want, RTOL, "jvp")
    assert_close(cg.value_and_grad(both)(a0)[0],
                 sqrt_sin_derivative(a0, 0) + sqrt_sin_derivative(a0, 1), RTOL, "value")
    # and value_and_grad of value_and_grad's gradient
    value, second = cg.value_and_grad(lambda a: cg.value_and_grad(sqrt_sin())(a)[1])(a0)
    assert_close(value, sqrt_sin_derivative(a0, 1), RTOL, "value of the inner gradient")
    assert_close(second, sqrt_sin_derivative(a0, 2), RTOL, "its derivative")


def test_inner_grad_of_a_function_ignoring_its_argument_is_zero() -> None:
    """The inner function uses only the closed-over y: its gradient in x is zero, so is
    everything built on it, with float dtype and the argument's shape."""
    def zero(y: Any) -> Any:
        return cg.grad(lambda x: cg.fori_loop(0, 3, lambda i, c: c * y, y))(y)

    assert zero(1.5) == 0.0
    for got in (cg.grad(zero)(1.5), cg.jvp(zero, (1.5,), (1.0,))[1],
                cg.grad(cg.grad(zero))(1.5)):
        assert got == 0.0 and np.asarray(got).dtype == np.float64
    vec = cg.grad(lambda w: vdot(cg.grad(lambda x: cnp.sum(w * w))(w * 2.0), w))(np.ones(3))
    assert np.array_equal(vec, np.zeros(3))
    # the inner gradient is zero but the closed-over value still carries the outer one
    total = cg.grad(lambda y: cg.value_and_grad(lambda x: y * y * y)(y)[0])(1.5)
    assert_close(total, 3 * 1.5**2, RTOL, "value through the closure")


def test_grad_of_a_function_returning_an_inner_grad_of_a_constant() -> None:
    """grad(z -> z^3)(2) inside a traced function is a constant 12: derivative zero."""
    const = lambda x: cg.grad(lambda z: z * z * z)(2.0) + 0.0 * x  # noqa: E731
    pure = lambda x: cg.grad(lambda z: z * z * z)(2.0)  # noqa: E731
    assert cg.grad(const)(0.3) == 0.0
    assert cg.value_and_grad(const)(0.3) == (12.0, 0.0)
    assert cg.jvp(const, (0.3,), (1.0,)) == (12.0, 0.0)
    # a function returning the constant gradient only (not connected to x at all)
    assert cg.grad(lambda x: pure(x) * 1.0 + 0.0 * x)(0.3) == 0.0
    assert cg.grad(lambda x: pure(x) * x)(0.3) == 12.0
    assert cg.grad(cg.grad(lambda x: pure(x) * x * x))(0.3) == 24.0


def test_all_strategy_combinations_of_the_newton_loop_are_bitwise() -> None:
    """Pairs of a loop strategy and an inner one, for one small program: every strategy
    of STRATEGIES on both sides."""
    want = second_orders(sqrt_sin(), 2.3, 1.0, only=REVERSE)
    for loop, inner in itertools.product(STRATEGIES[:5], STRATEGIES[5:]):
        assert_bitwise(second_orders(sqrt_sin(loop), 2.3, 1.0, inner=inner, only=REVERSE), want,
                       f"loop {loop!r}, inner {inner!r}")


def test_an_untaken_branch_of_a_nested_function_never_reaches_the_gradient():
    """Operations on values the inner function closes over stay where the inner function
    computes them (inside its branch or loop), so the branch that is not taken is not run,
    in either order of modes and under anomaly detection (they were hoisted into the outer
    program, where sqrt of a negative gave NaN)."""
    def f(x):
        def inner(y):
            return cg.cond(x > 0.0, lambda y: y * cnp.sqrt(x), lambda y: y * 2.0, y)
        return cg.grad(inner)(x) + x

    def g(x):
        def inner(y):
            return cg.fori_loop(0, 0, lambda i, c: c * cnp.sqrt(x - 1.0), y)
        return cg.jvp(inner, (x,), (1.0,))[1] * x

    for point in (-1.0, 0.0):
        assert cg.grad(f)(point) == 1.0
        assert cg.jvp(f, (point,), (1.0,))[1] == 1.0
        assert cg.grad(f, detect_anomaly=True)(point) == 1.0
    assert cg.grad(g)(0.5) == 1.0
    program = cg.lower(f, -1.0)
    assert "sqrt" not in program.text()  # it is in the sub-program, inside the branch


def test_a_nested_pullback_checks_its_cotangent_as_an_eager_one_does():
    """A wrong-shaped cotangent is the eager pullback's ArgumentTypeError, not a wrong
    shape downstream or a raw numpy error; other dtypes are cast, as eagerly."""
    def f(x):
        out, pullback = cg.vjp(lambda y: y * y, x)
        return cnp.sum(pullback(cnp.ones((3, 2)))[0])

    with pytest.raises(cg.ArgumentTypeError, match=r"cotangent leaf 0 has shape \(3, 2\), "
                                                   r"the output has \(2,\)"):
        cg.grad(f)(np.ones(2))

    def g(x):
        return cnp.sum(cg.vjp(lambda y: y * y, x)[1](np.ones(2, np.int64))[0])

    assert cg.grad(g)(np.array([1.0, 3.0])).tolist() == [2.0, 2.0]


def test_anomaly_detection_names_the_operation_inside_a_nested_gradient():
    """detect_anomaly=True on the outer call or on the inner grad: the NaN made inside the
    nested sub-program is named there (`log`, program inner), not as a `vjp_call`."""
    def inner(y):
        return cnp.log(y - 1.0) * y

    def checked_inside(x):
        return cg.grad(inner, detect_anomaly=True)(x) * x

    def plain(x):
        return cg.grad(inner)(x) * x

    for call in (lambda: cg.grad(checked_inside)(0.5),
                 lambda: cg.grad(plain, detect_anomaly=True)(0.5)):
        with pytest.raises(cg.AnomalyError, match=r"`log` produced nan .* program inner"):
            call()


# ---------------------------------------------------------------------------------
# Custom rules that are not exact derivatives (issue 12): the derivative of the field the
# rule defines, as JAX gives it, by every composition
# ---------------------------------------------------------------------------------


@cg.custom_vjp
def product_vjp(x: Any, y: Any) -> Any:
    return x * y


# fwd computes x·y as ordinary code; bwd drops y's cotangent ("detach y")
product_vjp.defvjp(lambda x, y: (x * y, y), lambda y, ct: (ct * y, None))


@cg.custom_jvp
def product_jvp(x: Any, y: Any) -> Any:
    return x * y


@product_jvp.defjvp
def _product_jvp_rule(primals: tuple, tangents: tuple) -> tuple:
    (x, y), (dx, _) = primals, tangents
    return x * y, y * dx  # the rule's output x·y is differentiated as x·y at second order


@cg.custom_jvp
def doubled_exp(x: Any) -> Any:
    return cnp.exp(x)


@doubled_exp.defjvp
def _doubled_exp_rule(primals: tuple, tangents: tuple) -> tuple:
    (x,), (dx,) = primals, tangents
    y = doubled_exp(x)  # the function again, whose rule gives its derivative at next order
    return y, 2.0 * y * dx


@cg.custom_vjp
def doubled_exp_vjp(x: Any) -> Any:
    return cnp.exp(x)


def _doubled_exp_fwd(x: Any) -> tuple:
    y = doubled_exp_vjp(x)  # the function again: its rule gives its derivative at next order
    return y, y


doubled_exp_vjp.defvjp(_doubled_exp_fwd, lambda y, ct: (2.0 * y * ct,))


def second_derivatives(f: Callable, x: np.ndarray, checkpoint: Any = None) -> dict:
    """The derivative of grad f at x by every composition: row i is the gradient of the
    i-th component of grad f (the Jacobian of the gradient field, as jax.hessian)."""
    g = cg.grad(f, checkpoint=checkpoint)
    basis = np.eye(len(x))
    return {
        "hessian": cg.hessian(f, checkpoint=checkpoint)(x),
        "jacrev.grad": cg.jacrev(g, checkpoint=checkpoint)(x),
        "jacfwd.grad": cg.jacfwd(g)(x),
        "jvp.grad": np.stack([cg.jvp(g, (x,), (e,))[1] for e in basis], axis=1),
        "grad.grad": np.stack([cg.grad(lambda v, e=e: cnp.sum(g(v) * e),
                                       checkpoint=checkpoint)(x) for e in basis]),
    }


def product_field(product: Callable) -> Callable:
    """F = sin(m(x, y)) + m(y, x²) for a product m whose rule keeps only its first
    argument's part: grad F = (y cos xy, x²), whose derivative is not symmetric."""
    return lambda v: cnp.sin(product(v[0], v[1])) + product(v[1], v[0] * v[0])


def product_field_exact(x: float, y: float) -> np.ndarray:
    return np.array([[-y * y * math.sin(x * y), math.cos(x * y) - x * y * math.sin(x * y)],
                     [2.0 * x, 0.0]])


def power_loop(product: Callable, checkpoint: Any = None) -> Callable:
    """c ← m(c, a) three times from c = x, in a cond branch for x > 0: x a³, whose gradient
    field by the rule is (a³, 0), with derivative [[0, 3a²], [0, 0]]."""
    def f(v: Any) -> Any:
        def cubed(u: Any) -> Any:
            return cg.fori_loop(0, 3, lambda i, c: product(c, u[1]), u[0],
                                checkpoint=checkpoint)

        return cg.cond(v[0] > 0.0, cubed, lambda u: u[0] * u[1], v)

    return f


@pytest.mark.parametrize("product", [product_vjp, product_jvp], ids=["custom_vjp",
                                                                     "custom_jvp"])
@pytest.mark.parametrize("checkpoint", [None, Binomial(2), EveryK(2)], ids=repr)
def test_unsymmetric_rule_fields_are_differentiated_not_transposed(
        product: Callable, checkpoint: Any) -> None:
    """A rule whose derivative field is not a gradient: every composition gives the
    Jacobian of that field (forward over reverse used to give its transpose)."""
    x = np.array([0.7, -0.4])
    for name, got in second_derivatives(product_field(product), x, checkpoint).items():
        assert_close(got, product_field_exact(*x), RTOL, name)
    a = 0.9
    want = np.array([[0.0, 3 * a * a], [0.0, 0.0]])
    for name, got in second_derivatives(power_loop(product, checkpoint),
                                        np.array([1.3, a]), checkpoint).items():
        assert_close(got, want, RTOL, f"{name} through fori_loop and cond")


@pytest.mark.parametrize("f", [doubled_exp, doubled_exp_vjp], ids=["custom_jvp",
                                                                     "custom_vjp"])
def test_a_rule_calling_its_function_uses_the_rule_again_at_each_order(f: Callable) -> None:
    """f = exp with derivative 2 f(x) by a rule calling f (the custom_jvp's rule, the
    custom_vjp's fwd): f' = 2eˣ, f'' = 4eˣ, f''' = 8eˣ (JAX's values); for F = f(xy) + x
    the Hessian is 2eˣʸ[[2y², 2xy + 1], [2xy + 1, 2x²]]."""
    x0 = 0.3
    assert_close(cg.grad(f)(x0), 2 * math.exp(x0), RTOL, "f'")
    results = third_orders(f, x0, forward_only=False)
    assert_all_agree(results)
    assert_close(results["grad.grad.grad"], 8 * math.exp(x0), RTOL, "f'''")
    assert_close(cg.grad(cg.grad(f))(x0), 4 * math.exp(x0), RTOL, "f''")
    x, y = 0.7, -0.4
    e = math.exp(x * y)
    want = 2 * e * np.array([[2 * y * y, 2 * x * y + 1], [2 * x * y + 1, 2 * x * x]])
    for name, got in second_derivatives(lambda v: f(v[0] * v[1]) + v[0],
                                        np.array([x, y]), Binomial(2)).items():
        assert_close(got, want, RTOL, name)


def test_a_linear_function_whose_rule_is_itself() -> None:
    """f(x) = 3x with the rule (f(x), f(dx)): transposing the rule transposes the call on
    the tangents as ordinary code (as JAX inlines it), not by the same pullback again."""
    @cg.custom_jvp
    def triple(x: Any) -> Any:
        return 3.0 * x

    @triple.defjvp
    def _(primals: tuple, tangents: tuple) -> tuple:
        return triple(primals[0]), triple(tangents[0])

    def g(x: Any) -> Any:
        return triple(x) * x

    assert cg.grad(g)(2.0) == 12.0
    assert cg.grad(cg.grad(g))(2.0) == 6.0
    assert cg.jvp(cg.grad(g), (2.0,), (1.0,))[1] == 6.0
