"""A stiff oscillator integrated by implicit Euler, differentiated through every solve.

Run `python examples/implicit_euler.py`.

The Van der Pol oscillator x' = v, v' = μ (1 - x²) v - x is stiff for large μ: explicit
steps blow up unless they are tiny. Implicit Euler takes each step z = y + h f(z) by
Newton's method, which solves a 2×2 linear system J Δ = -G(z) with `cnp.linalg.solve`
until |G(z)| < 1e-12: a `while_loop` with a data-dependent trip count inside a
`fori_loop` over the steps. `cg.grad` differentiates the whole solver, every Newton
iteration and every linear solve included, and the gradient of the final position with
respect to μ is checked against central differences of the same solver run in plain numpy.
"""

from __future__ import annotations

import numpy as np

import cfgrad as cg
import cfgrad.numpy as cnp

STEPS, H = 100, 0.05
START = np.array([2.0, 0.0])


def rhs(z, mu):
    x, v = z[0], z[1]
    return cnp.stack([v, mu * (1.0 - x * x) * v - x])


def rhs_jacobian(z, mu):
    x, v = z[0], z[1]
    return cnp.stack([cnp.stack([0.0 * x, 1.0 + 0.0 * x]),
                      cnp.stack([-2.0 * mu * x * v - 1.0, mu * (1.0 - x * x)])])


def implicit_step(y, mu):
    """z with z = y + h f(z), by Newton's method from z = y."""
    def residual(z):
        return z - y - H * rhs(z, mu)

    def newton(z):
        jacobian = cnp.eye(2) - H * rhs_jacobian(z, mu)
        return z + cnp.linalg.solve(jacobian, -residual(z))

    def unconverged(z):
        return cnp.max(cnp.abs(residual(z))) > 1e-12

    return cg.while_loop(unconverged, newton, y, max_iters=50)


def final_position(mu):
    y = cg.fori_loop(0, STEPS, lambda i, y: implicit_step(y, mu), START)
    return y[0]


def final_position_numpy(mu: float) -> float:
    """The same solver in plain numpy, for the finite-difference check."""
    y = START.copy()
    for _ in range(STEPS):
        z = y.copy()
        for _ in range(50):
            g = z - y - H * np.array([z[1], mu * (1 - z[0] ** 2) * z[1] - z[0]])
            if np.max(np.abs(g)) <= 1e-12:
                break
            jac = np.eye(2) - H * np.array([[0.0, 1.0],
                                            [-2 * mu * z[0] * z[1] - 1, mu * (1 - z[0] ** 2)]])
            z = z + np.linalg.solve(jac, -g)
        y = z
    return y[0]


def example_args():
    """Arguments for `cfgrad inspect examples/implicit_euler.py:final_position`."""
    return {"final_position": (5.0,)}


def main() -> None:
    mu = 5.0
    value, slope = cg.value_and_grad(final_position)(mu)
    eps = 1e-6
    central = (final_position_numpy(mu + eps) - final_position_numpy(mu - eps)) / (2 * eps)
    _, pullback = cg.vjp(final_position, mu)
    pullback(1.0)
    newton_trips = pullback.stats.loops[1].trip_counts
    print(f"x(T) at mu = {mu}:          {value:.10f}   (plain numpy: "
          f"{final_position_numpy(mu):.10f})")
    print(f"dx(T)/dmu, cfgrad:       {slope:.8f}")
    print(f"dx(T)/dmu, central diff: {central:.8f}")
    print(f"Newton iterations per step: min {min(newton_trips)}, max {max(newton_trips)}, "
          f"total {sum(newton_trips)} over {STEPS} steps")


if __name__ == "__main__":
    main()
