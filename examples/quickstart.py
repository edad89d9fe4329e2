"""cfgrad in one screen: a gradient through a data-dependent loop and a branch.

Run `python examples/quickstart.py`.

`f(a, b)` finds sqrt(a) by Newton's method, iterating until the residual is below a
tolerance (so the number of iterations depends on `a`), then branches on the root:

    y = sqrt(a)                       # a `while` that stops on |y*y - a| <= 1e-12 * a
    f = (y - b)**2 if y > b else sin(y * b)

`f` is plain Python: cfgrad converts its `while` and `if` on traced values into a loop and
a branch of the Program (docs/autograph.md). `f_explicit` is the same function written
with `cg.while_loop` and `cg.cond`, the explicit form: the same regions (its loop tests
the condition at the loop's header, the converted `while` before the loop and at the end
of each iteration) and the same gradient.

cfgrad traces `f` once into a Program of blocks (printed below), runs it while logging
which branch was taken and how many iterations ran, and differentiates exactly that path
by running the adjoint Program (also printed) backwards over the log. The gradient is
checked against central finite differences; by hand, on the first branch
df/da = (y - b)/y and df/db = -2(y - b).
"""

from __future__ import annotations

import cfgrad as cg
import cfgrad.numpy as cnp

EPS = 1e-6  # finite-difference step


def f(a, b):
    """Newton's method for sqrt(a) until converged, then a branch on the result."""
    y = a
    while abs(y * y - a) > 1e-12 * a:
        y = 0.5 * (y + a / y)
    if y > b:
        return (y - b) ** 2
    return cnp.sin(y * b)


def f_explicit(a, b):
    """`f` with the explicit control-flow functions (a `max_iters` bound on the loop)."""

    def not_converged(y):
        return cnp.abs(y * y - a) > 1e-12 * a

    def newton_step(y):
        return 0.5 * (y + a / y)

    y = cg.while_loop(not_converged, newton_step, a, max_iters=100)
    return cg.cond(y > b, lambda: (y - b) ** 2, lambda: cnp.sin(y * b))


def example_args() -> dict[str, tuple]:
    return {"f": (2.0, 1.0)}


def report(a: float, b: float) -> None:
    """Value, gradient beside central differences, and the loop's trip count at (a, b)."""
    value, pullback = cg.vjp(f, a, b)
    grads = pullback(1.0)
    trips = pullback.stats.loops[0].trip_counts[0]
    fd = ((f(a + EPS, b) - f(a - EPS, b)) / (2 * EPS),
          (f(a, b + EPS) - f(a, b - EPS)) / (2 * EPS))
    print(f"f({a}, {b}) = {float(value):.12f}   (Newton iterations: {trips})")
    print(f"  {'':6} {'cfgrad':>18} {'finite diff':>18} {'difference':>11}")
    for name, g, d in zip(("df/da", "df/db"), grads, fd):
        print(f"  {name:6} {float(g):18.12f} {float(d):18.12f} {abs(float(g) - d):11.1e}")


def main() -> None:
    report(2.0, 1.0)  # sqrt(2) > 1: the (y - b)**2 branch
    report(10.0, 5.0)  # sqrt(10) < 5: the sin(y * b) branch, and more iterations
    print()
    print("The lowered Program (one block per region entry, header, body, branch, join):")
    print(cg.lower(f, 2.0, 1.0))
    print("Its adjoint (mirrored blocks, run backwards over the logged path):")
    print(cg.adjoint(cg.lower(f, 2.0, 1.0)))
    print(f"f_explicit (cg.while_loop + cg.cond) gives the same gradient: "
          f"{cg.grad(f_explicit, (0, 1))(2.0, 1.0) == cg.grad(f, (0, 1))(2.0, 1.0)}")


if __name__ == "__main__":
    main()
