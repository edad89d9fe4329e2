"""Reliability of the custom derivative rules (issue 23, items 5, 7 and part of 12):
`cg.custom_root`'s argument checks, its refusal of a nonlinear `tangent_solve` and its
warning where the solver's result is no root; second derivatives through `custom_vjp`
rules whose `bwd` is not linear in the cotangent (gradient clipping) or that call other
custom functions, in every composition of modes, with closed-form expectations."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import cfgrad as cg
import cfgrad.numpy as cnp


def newton(f, x0):
    return cg.fori_loop(0, 30, lambda i, x: x - f(x) / cg.grad(f)(x), x0)


def bisection(f, x0):
    def step(i, bracket):
        lo, hi = bracket
        mid = 0.5 * (lo + hi)
        return cg.cond(f(mid) > 0.0, lambda: (lo, mid), lambda: (mid, hi))

    lo, hi = cg.fori_loop(0, 80, step, (0.0 * x0, 10.0 + 0.0 * x0))
    return 0.5 * (lo + hi)


def scalar_solve(g, y):
    return y / g(1.0)


def sqrt_root(a, solve=newton, tangent_solve=scalar_solve, guess=1.0, f=None):
    return cg.custom_root(f or (lambda x: x * x - a), guess, solve, tangent_solve)


# -- custom_root: a tangent_solve that is not linear in y ------------------------------


@pytest.mark.parametrize("tangent_solve", [
    lambda g, y: y * y / g(1.0),                  # the issue's reproduction: gave -0.0
    lambda g, y: y / g(1.0) + 1.0,                # affine: forward mode would add the 1
    lambda g, y: cnp.clip(y, -1.0, 1.0) / g(1.0),
    lambda g, y: cg.cond(y > 0.0, lambda: y / g(1.0), lambda: 2.0 * y / g(1.0)),
    lambda g, y: cg.while_loop(lambda v: cnp.abs(g(v) - y) > 1e-12,
                               lambda v: v + (y - g(v)) / g(1.0), 0.0 * y),
], ids=["square", "affine", "clip", "branch-on-y", "loop-stopping-on-y"])
def test_a_nonlinear_tangent_solve_is_refused(tangent_solve):
    with pytest.raises(cg.ArgumentTypeError, match=r"tangent_solve\(g, y\)` must be linear in y"):
        cg.grad(lambda a: sqrt_root(a, tangent_solve=tangent_solve))(2.0)


@pytest.mark.parametrize("tangent_solve", [
    scalar_solve,
    lambda g, y: cg.fori_loop(0, 60, lambda i, v: v + (y - g(v)) / g(1.0), 0.0 * y),
    lambda g, y: cnp.linalg.solve(cnp.reshape(g(1.0), (1, 1)), cnp.reshape(y, (1,)))[0],
    lambda g, y: cnp.where(cnp.abs(g(1.0)) > 0.0, y / g(1.0), 0.0 * y),
    lambda g, y: cnp.sum(cnp.stack([y, y]) * np.array([0.25, 0.25])) * 2.0 / g(1.0),
], ids=["divide", "richardson", "linalg-solve", "where-on-g", "stack-and-sum"])
def test_linear_tangent_solves_are_accepted(tangent_solve):
    """d sqrt(a)/da = 1/(2 sqrt a), by hand."""
    assert cg.grad(lambda a: sqrt_root(a, tangent_solve=tangent_solve))(2.0) == \
        pytest.approx(0.5 / np.sqrt(2.0), rel=1e-12)


def test_the_reproduction_of_the_issue_names_the_operation_and_line():
    with pytest.raises(cg.ArgumentTypeError) as err:
        cg.grad(lambda a: cg.custom_root(lambda y: y * y - a, 1.0, lambda f, y0: cnp.sqrt(a),
                                         lambda g, y: y * y / g(1.0)))(2.0)
    message = str(err.value)
    assert "custom_root(<lambda>)" in message and "`mul`" in message
    assert "test_reliability_custom.py" in message


# -- custom_root: the solver's result is not a root ------------------------------------


def stops_early(f, x0):
    return cg.fori_loop(0, 2, lambda i, x: x - f(x) / cg.grad(f)(x), x0)


def first_guess(f, x0):
    return x0


@pytest.mark.parametrize("solve", [first_guess, stops_early], ids=["guess", "two-steps"])
def test_a_result_that_is_no_root_warns_eagerly_and_in_every_transformation(solve):
    root = lambda a: sqrt_root(a, solve=solve)  # noqa: E731
    for run in (root, cg.grad(root), cg.jit(cg.grad(root)),
                lambda a: cg.jvp(root, (a,), (1.0,)), cg.grad(cg.grad(root))):
        with pytest.warns(cg.RootWarning, match="not a root of f"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", cg.CompileWarning)
                run(2.0)


def test_the_warning_fires_at_run_time_for_each_input():
    """The solution is only known when the program runs: a cached program warns for the
    input where the solver fails and not for the one where it converges."""
    def solve(f, x0):  # converges from x0 near the root only
        return cg.fori_loop(0, 4, lambda i, x: x - f(x) / cg.grad(f)(x), x0)

    g = cg.grad(lambda a, guess: sqrt_root(a, solve=solve, guess=guess))
    with warnings.catch_warnings():
        warnings.simplefilter("error", cg.RootWarning)
        assert g(2.0, 1.4) == pytest.approx(0.5 / np.sqrt(2.0), rel=1e-12)
    with pytest.warns(cg.RootWarning):
        g(2.0, 40.0)


@pytest.mark.parametrize("solve", [newton, bisection], ids=["newton", "bisection"])
def test_converged_solvers_do_not_warn(solve):
    """Also float32 and roots at 0 (scale from the initial guess) and a vector fixed
    point: a converged solve is at the rounding level."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", cg.RootWarning)
        assert cg.grad(lambda a: sqrt_root(a, solve=solve))(3.0) == pytest.approx(
            0.5 / np.sqrt(3.0), rel=1e-10)
        x32 = cg.custom_root(lambda x: x * x - np.float32(2.0), np.float32(1.0), solve,
                             scalar_solve)
        assert x32.dtype == np.float32 and x32 == pytest.approx(np.sqrt(2.0), rel=1e-6)
        assert cg.grad(lambda a: cg.custom_root(lambda x: x - a, 1.0, solve,
                                                scalar_solve))(0.0) == 1.0
        W = np.array([[0.2, -0.1], [0.05, 0.3]])

        def equilibrium(b):
            f = lambda x: x - cnp.tanh(W @ x + b)  # noqa: E731
            return cg.custom_root(f, cnp.zeros(2),
                                  lambda f, x0: cg.fori_loop(0, 100, lambda i, x: x - f(x), x0),
                                  lambda g, y: cg.fori_loop(0, 100,
                                                            lambda i, v: y + v - g(v), y))
        cg.grad(lambda b: cnp.sum(equilibrium(b) ** 2))(np.array([0.5, -0.25]))


# -- custom_root: argument mistakes ----------------------------------------------------


def probe(**changes):
    """custom_root of x² - a with one argument replaced, under cg.grad."""
    def fn(a):
        kw = dict(f=lambda x: x * x - a, initial_guess=1.0,
                  solve=lambda f, x0: cnp.sqrt(a), tangent_solve=scalar_solve)
        kw.update({k: (v(a) if k in ("f", "solve") and getattr(v, "wants_a", False) else v)
                   for k, v in changes.items()})
        return cnp.sum(cg.custom_root(**kw))
    return cg.grad(fn)(2.0)


def with_a(fn):
    fn.wants_a = True
    return fn


@pytest.mark.parametrize(("changes", "pattern"), [
    (dict(f=3.0), r"`f` must be a function x -> f\(x\).*got float 3\.0"),
    (dict(solve=5), r"`solve` must be a function \(f, initial_guess\).*got int 5"),
    (dict(tangent_solve=None), r"`tangent_solve` must be a function.*got NoneType None"),
    (dict(initial_guess="1.0"), r"`initial_guess` must be a float array.*got str '1.0'"),
    (dict(initial_guess=1), r"`initial_guess` must be a float.*got i64\[\]; write 1\.0 for 1"),
    (dict(initial_guess=None), r"`initial_guess` must be a float array.*got None"),
    (dict(f=with_a(lambda a: lambda x: cnp.ones(3) * x - a)),
     r"`f` must return a residual of its argument's structure.*\(f64\[\]: .*returns f64\[3\]"),
    (dict(f=with_a(lambda a: lambda x: (x - a, x))),
     r"`f` must return a residual.*returns \(\*, \*\) with leaves \[f64\[\], f64\[\]\]"),
    (dict(solve=with_a(lambda a: lambda f, x0: cnp.sqrt(a) * cnp.ones(2))),
     r"the solution `solve` returned is f64\[2\], but it must have .* initial_guess: f64\[\]"),
    (dict(solve=with_a(lambda a: lambda f, x0: cnp.sqrt(a).astype(np.float32)),
          initial_guess=np.float64(1.0)),
     r"the solution `solve` returned is f32\[\].*initial_guess: f64\[\]"),
    (dict(tangent_solve=lambda g, y: cnp.ones(2) * y / g(1.0)),
     r"the result of `tangent_solve` is f64\[2\], but it must have"),
])
def test_argument_mistakes_are_typed_errors_naming_the_argument(changes, pattern):
    with pytest.raises(cg.ArgumentTypeError, match=pattern):
        probe(**changes)


def test_argument_mistakes_are_caught_eagerly_too():
    with pytest.raises(cg.ArgumentTypeError, match="`f` must be a function"):
        cg.custom_root(3.0, 1.0, lambda f, x0: 1.0, scalar_solve)
    with pytest.raises(cg.ArgumentTypeError, match="`f` must return a residual"):
        cg.custom_root(lambda x: cnp.ones((1, 1)) * (x - 2.0), 1.0, lambda f, x0: 2.0,
                       scalar_solve)


def test_a_root_function_of_another_rank_fails_before_any_solve_runs():
    """The rank-growing loop of issue 23 (a 33-dimension RuntimeError): f maps a vector to
    a matrix, so a Python-loop tangent_solve grew a dimension per step. The residual's
    shape is checked first."""
    def richardson(g, y):
        v = y
        for _ in range(40):
            v = y + v - g(v)
        return v

    with pytest.raises(cg.ArgumentTypeError, match=r"returns f64\[1,2\]"):
        cg.grad(lambda a: cnp.sum(cg.custom_root(lambda y: y[None] - a, cnp.ones(2),
                                                 lambda f, y0: cnp.ones(2) * a,
                                                 richardson)))(2.0)


def test_has_aux_without_a_pair_is_a_typed_error():
    with pytest.raises(cg.ArgumentTypeError, match=r"has_aux=True\): `solve` must return a pair"):
        cg.grad(lambda a: cg.custom_root(lambda x: x * x - a, 1.0, lambda f, x0: cnp.sqrt(a),
                                         scalar_solve, has_aux=True))(2.0)
