"""Newton's method for fitting a simulation, with Hessian-vector products through its loop.

Run `python examples/newton_optim.py`.

A damped oscillator x'' = -k x - c x', started at (x0, v0), is integrated with a fixed
step (semi-implicit Euler) in a `fori_loop`; the loss is the mean squared distance of the
simulated positions to observations made with θ* = (k, c, x0, v0) = (4, 0.3, 1, 0). We fit
θ by Newton–CG: each Newton step solves H p = -g by conjugate gradients, which needs
only products H v, each one `cg.jvp` of `cg.grad(loss)`: forward mode through the
gradient, which is reverse mode through the loop (a Hessian-vector product costs a small
multiple of a gradient, and the Hessian itself is never formed). Plain gradient descent
from the same start, with the best fixed step we found, is shown for comparison.
"""

from __future__ import annotations

import time

import numpy as np

import cfgrad as cg
import cfgrad.numpy as cnp

STEPS, DT = 200, 0.05  # 10 time units
TRUE = np.array([4.0, 0.3, 1.0, 0.0])  # k, c, x0, v0
START = np.array([3.0, 0.5, 0.8, 0.3])


def simulate(theta):
    """Positions of the oscillator at every step (semi-implicit Euler)."""
    k, c = theta[0], theta[1]

    def step(i, state):
        x, v, xs = state
        v = v + DT * (-k * x - c * v)
        x = x + DT * v
        return x, v, cnp.where(cnp.arange(STEPS) == i, x, xs)

    return cg.fori_loop(0, STEPS, step, (theta[2], theta[3], cnp.zeros(STEPS)))[2]


OBSERVED = np.asarray(simulate(TRUE))


def loss(theta):
    return cnp.mean((simulate(theta) - OBSERVED) ** 2)


grad = cg.grad(loss)


def hvp(theta, v):
    """H(θ) v: forward mode (jvp) through reverse mode (grad) through the loop."""
    return cg.jvp(grad, (theta,), (v,))[1]


def conjugate_gradients(theta, g, iters: int = 20, tol: float = 1e-12):
    """Solve H p = -g with H v products only (truncated CG, Nocedal & Wright's Algorithm
    7.1: where the loss curves downwards along a direction, stop there; at the first
    direction, take -g). Returns p and the number of products used."""
    p, r = np.zeros_like(g), -g
    d, rr = r.copy(), r @ r
    for i in range(iters):
        hd = hvp(theta, d)
        curvature = d @ hd
        if curvature <= 0:
            return (-g if i == 0 else p), i + 1
        alpha = rr / curvature
        p, r = p + alpha * d, r - alpha * hd
        rr, rr_old = r @ r, rr
        if rr < tol * (g @ g):
            return p, i + 1
        d = r + (rr / rr_old) * d
    return p, iters


def line_search(theta, p, g):
    """The first of 1, 1/2, 1/4, ... that decreases the loss enough (Armijo)."""
    f0, step = float(loss(theta)), 1.0
    while float(loss(theta + step * p)) > f0 + 1e-4 * step * (g @ p) and step > 1e-8:
        step /= 2
    return step


def example_args() -> dict[str, tuple]:
    return {"loss": (START,)}


def main() -> None:
    print("Newton-CG fit of (k, c, x0, v0); each CG step is one Hessian-vector product")
    print(f"{'iter':>4} {'loss':>12} {'|grad|':>10} {'H v':>4} {'step':>6}  theta")
    theta, products, step = START.copy(), 0, 0.0
    for it in range(30):
        g = grad(theta)
        print(f"{it:>4} {float(loss(theta)):>12.4e} {np.linalg.norm(g):>10.3e} "
              f"{products:>4} {step:>6.3g}  {np.array2string(theta, precision=5)}")
        if np.linalg.norm(g) < 1e-12:
            break
        p, products = conjugate_gradients(theta, g)
        step = line_search(theta, p, g)
        theta = theta + step * p
    print(f"fitted {np.array2string(theta, precision=6)}, true {TRUE}")

    descent = START.copy()
    for _ in range(200):
        descent = descent - 0.02 * grad(descent)
    print(f"gradient descent, 200 steps of 0.02: loss {float(loss(descent)):.4e}, "
          f"theta {np.array2string(descent, precision=4)}")

    v = np.ones(4)
    exact = np.array([hvp(theta, e) for e in np.eye(4)]) @ v  # columns of H, symmetric
    print(f"H v by one jvp of grad equals H assembled column by column: "
          f"{np.allclose(hvp(theta, v), exact, rtol=1e-12, atol=0)}")
    timings = {}
    for name, fn in (("grad", lambda: grad(theta)), ("hvp", lambda: hvp(theta, v))):
        fn()
        best = min(_time(fn) for _ in range(5))
        timings[name] = best
    print(f"time of one H v / time of one gradient: "
          f"{timings['hvp'] / timings['grad']:.1f}")


def _time(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
