"""Scalar root solvers written as a user would, shared by the custom_root tests: Newton's
method (a fixed number of steps, or until the step is small: a data-dependent trip
count), bisection on [0, 10] (which reaches its result only through comparisons), and
the `tangent_solve` of a scalar root."""

from __future__ import annotations

import cfgrad as cg
import cfgrad.numpy as cnp


def newton(f, x0):
    return cg.fori_loop(0, 30, lambda i, x: x - f(x) / cg.grad(f)(x), x0)


def newton_until(f, x0):
    """Newton with a tolerance stop: a data-dependent trip count."""
    def step(c):
        x, _ = c
        x_new = x - f(x) / cg.grad(f)(x)
        return x_new, cnp.abs(x_new - x)

    return cg.while_loop(lambda c: c[1] > 1e-13, step, (x0, 1.0 + 0.0 * x0), max_iters=100)[0]


def bisection(f, x0):
    def step(i, bracket):
        lo, hi = bracket
        mid = 0.5 * (lo + hi)
        return cg.cond(f(mid) > 0.0, lambda: (lo, mid), lambda: (mid, hi))

    lo, hi = cg.fori_loop(0, 80, step, (0.0 * x0, 10.0 + 0.0 * x0))
    return 0.5 * (lo + hi)


def scalar_solve(g, y):
    return y / g(1.0)
