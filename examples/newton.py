"""Newton's method for a cube root, differentiated through its convergence loop.

Run `python examples/newton.py`.

The iteration x <- x - (x^3 - a) / (3 x^2), started at x = a, runs until the residual
|x^3 - a| falls below a relative tolerance, so the number of iterations depends on `a`.
cfgrad differentiates the iterations that actually ran; once they have converged, the
result is the derivative of the cube root itself, d a^(1/3) / da = 1 / (3 a^(2/3)),
which the table compares against.
"""

from __future__ import annotations

import cfgrad as cg
import cfgrad.numpy as cnp

TOL = 1e-12  # relative residual at which the iteration stops
MAX_ITERS = 100
POINTS = (0.001, 0.5, 2.0, 27.0, 1000.0)


def cube_root(a):
    """a^(1/3) for a > 0 by Newton's method until |x^3 - a| <= TOL * a, written as
    plain Python: cfgrad converts the `while` on the traced residual into a loop region
    (docs/autograph.md); `cube_root_explicit` is the same loop as `cg.while_loop`."""
    x = a
    while abs(x ** 3 - a) > TOL * a:
        x = x - (x ** 3 - a) / (3 * x ** 2)
    return x


def cube_root_explicit(a):
    """The explicit form, which also bounds the loop (`LoopLimitError` past MAX_ITERS)."""

    def not_converged(x):
        return cnp.abs(x ** 3 - a) > TOL * a

    def newton_step(x):
        return x - (x ** 3 - a) / (3 * x ** 2)

    return cg.while_loop(not_converged, newton_step, a, max_iters=MAX_ITERS)


def example_args() -> dict[str, tuple]:
    return {"cube_root": (2.0,), "cube_root_explicit": (2.0,)}


def main() -> None:
    print("Newton's method for a^(1/3), gradient w.r.t. a against 1 / (3 a^(2/3))")
    print(f"{'a':>8} {'cube root':>18} {'iters':>5} {'cfgrad d/da':>20} {'analytic':>20} "
          f"{'rel. error':>10}")
    for a in POINTS:
        root, pullback = cg.vjp(cube_root, a)
        (g,) = pullback(1.0)
        trips = pullback.stats.loops[0].trip_counts[0]
        exact = 1.0 / (3.0 * a ** (2.0 / 3.0))
        print(f"{a:8g} {float(root):18.12f} {trips:5d} {float(g):20.12g} {exact:20.12g} "
              f"{abs(float(g) - exact) / exact:10.1e}")
    same = all(cg.grad(cube_root)(a) == cg.grad(cube_root_explicit)(a) for a in POINTS)
    print(f"plain-Python loop and cg.while_loop give the same gradients: {same}")


if __name__ == "__main__":
    main()
