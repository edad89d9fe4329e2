"""cg.custom_root: derivatives of a solver's result by the implicit function theorem, at
every order, whatever the solver (Newton, bisection, a vector fixed point), and the trap
it exists for (a bisection differentiated directly gives exactly 0)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad.checkpoint import Binomial, EveryK, Online, Recompute, StoreAll
from cfgrad.testing import check_grads

sys.path.insert(0, str(Path(__file__).parent))
from solvers import bisection, newton, newton_until, scalar_solve  # noqa: E402

SOLVERS = [newton, newton_until, bisection]


def sqrt_root(solver):
    return lambda a: cg.custom_root(lambda x: x * x - a, 1.0, solver, scalar_solve)


@pytest.mark.parametrize("solver", SOLVERS)
def test_derivatives_of_every_order_follow_the_theorem(solver):
    """sqrt(a) = a^(1/2): derivatives a^(-1/2)/2, -a^(-3/2)/4, 3a^(-5/2)/8, whichever
    solver found the root, in every composition of modes."""
    root, a = sqrt_root(solver), 2.0
    first, second, third = 0.5 * a ** -0.5, -0.25 * a ** -1.5, 0.375 * a ** -2.5
    assert root(a) == pytest.approx(np.sqrt(a), rel=1e-14)
    assert cg.grad(root)(a) == pytest.approx(first, rel=1e-12)
    assert cg.jvp(root, (a,), (1.0,))[1] == pytest.approx(first, rel=1e-12)
    assert cg.grad(cg.grad(root))(a) == pytest.approx(second, rel=1e-12)
    assert cg.jvp(cg.grad(root), (a,), (1.0,))[1] == pytest.approx(second, rel=1e-12)
    assert cg.grad(lambda a: cg.jvp(root, (a,), (1.0,))[1])(a) == pytest.approx(second,
                                                                              rel=1e-12)
    assert cg.grad(cg.grad(cg.grad(root)))(a) == pytest.approx(third, rel=1e-12)


def test_bisection_differentiated_directly_is_the_trap():
    """The reason custom_root exists: the input reaches bisection's result only through
    comparisons, so reverse mode along the path gives exactly 0, and check_grads says why
    it cannot compare."""
    direct = lambda a: bisection(lambda x: x * x - a, 1.0)  # noqa: E731
    assert cg.grad(direct)(2.0) == 0.0
    with pytest.raises(cg.PathInstabilityError, match="cg.custom_root"):
        check_grads(direct, (2.0,))


def test_a_vector_fixed_point_against_finite_differences():
    W = np.array([[0.2, -0.1, 0.05], [0.05, 0.3, -0.2], [0.1, 0.0, 0.25]])

    def fixed_point(f, x0):
        return cg.fori_loop(0, 200, lambda i, x: x - f(x), x0)

    def richardson(g, y):
        return cg.fori_loop(0, 200, lambda i, v: y + v - g(v), y)

    def loss(b, scale):
        f = lambda x: x - cnp.tanh(W @ x * scale + b)  # noqa: E731
        return cnp.sum(cg.custom_root(f, cnp.zeros(3), fixed_point, richardson) ** 2)

    b = np.array([0.5, -0.25, 0.1])
    check_grads(loss, (b, 1.3), order=2)


def test_has_aux_returns_the_solvers_aux_without_a_derivative():
    def counted(f, x0):
        x, n = cg.while_loop(lambda c: cnp.abs(f(c[0])) > 1e-12,
                             lambda c: (c[0] - f(c[0]) / cg.grad(f)(c[0]), c[1] + 1), (x0, 0))
        return x, n

    def root_and_steps(a):
        return cg.custom_root(lambda x: x * x - a, 1.0, counted, scalar_solve, has_aux=True)

    (value, steps), grad = cg.value_and_grad(root_and_steps, has_aux=True)(4.0)
    assert value == pytest.approx(2.0, rel=1e-14) and grad == pytest.approx(0.25, rel=1e-12)
    assert steps.dtype.kind == "i" and steps > 3


def test_outside_a_transformation_it_is_the_solver():
    assert cg.custom_root(lambda x: x * x - 9.0, 1.0, newton, scalar_solve) == 3.0


def test_the_initial_guess_gets_no_derivative():
    f = lambda g: cg.custom_root(lambda x: x * x - 2.0, g, newton, scalar_solve)  # noqa: E731
    assert cg.grad(f)(1.0) == 0.0


@pytest.mark.parametrize("strategy", [StoreAll(), Recompute(), EveryK(2), Binomial(2),
                                      Online(2)], ids=repr)
def test_a_root_in_every_iteration_of_a_loop(strategy):
    """Each step of an outer loop solves for a root that depends on the carry: first and
    second derivatives are the same bits under every strategy."""
    def loop(checkpoint):
        def f(a):
            def step(i, c):
                return cg.custom_root(lambda x: x * x * x - c - 1.0, 1.0, newton_until,
                                      scalar_solve)
            return cg.fori_loop(0, 5, step, a, checkpoint=checkpoint)
        return f

    f, reference = loop(strategy), loop(StoreAll())
    assert cg.grad(f)(0.7) == cg.grad(reference)(0.7)
    assert cg.grad(cg.grad(f))(0.7) == cg.grad(cg.grad(reference))(0.7)
    assert cg.jvp(cg.grad(f), (0.7,), (1.0,)) == cg.jvp(cg.grad(reference), (0.7,), (1.0,))
    check_grads(f, (0.7,), order=2)
