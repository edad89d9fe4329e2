"""The seed programs of cfgrad, each with gradients you can check by hand.

Run `python examples/seeds.py`. Every function is defined at module level (so tools can
import it by name, e.g. `examples/seeds.py:tree`), and `example_args()` gives the inputs
the printed values were computed at.

The expected values, derived by hand:
  tree        y = c*z*x + k*x + g, c = 2:  dy/dx = c*z + k = 11, dy/dz = c*x = 8,
              dy/dk = x = 4, dy/dg = 1 at (x, z, k, g) = (4, 3, 5, 1); y = 45
  cancel      (x + 1 - 2x)**2 = (1 - x)**2:  derivative 2(x - 1) = 4 at x = 3
  log_sin     log(x0*x1)*sin(x1):  [sin(x1)/x0, sin(x1)/x1 + log(x0*x1)*cos(x1)]
              = [1.3633, 0.1912] at [0.5, 0.75]
  branch      2*(a+b) if a < b else 2*(a-b):  (2, 2) at (1, 2) and (2, -2) at (3, 2)
  loop        s_{i+1} = s_i*x + i for i < n:  from s = 1, n = 4, x = 2 the result is
              x^4 + x^2 + 2x + 3 = 27, d/dx = 4x^3 + 2x + 2 = 38, d/ds = x^4 = 16
"""

from __future__ import annotations

import numpy as np

import cfgrad as cg
import cfgrad.numpy as cnp


def tree(x, z, k, g):
    """An expression tree whose `x` is used twice, so its adjoints must add up."""
    c = 2.0
    return c * z * x + k * x + g


def cancel(x):
    """`x` reaches the square through two paths that partly cancel: 1 - x."""
    return (x + 1 - 2 * x) ** 2


def log_sin(x):
    """Indexing a vector argument; the gradient scatters back into both entries."""
    return cnp.log(x[0] * x[1]) * cnp.sin(x[1])


def branch(a, b):
    """`z = a+b if a < b else a-b; return 2z`, with the `if` as a `cg.cond`."""
    z = cg.cond(a < b, lambda: a + b, lambda: a - b)
    return 2 * z


def loop(x, s, n):
    """`while i < n: s = s*x + i; i += 1` as a `cg.while_loop` whose trip count is `n`."""

    def running(carry):
        s, i = carry
        return i < n

    def step(carry):
        s, i = carry
        return s * x + i, i + 1

    s, _ = cg.while_loop(running, step, (s, 0))
    return s


def example_args() -> dict[str, tuple]:
    """The inputs each function is shown at (`branch` also runs at (3.0, 2.0))."""
    return {
        "tree": (4.0, 3.0, 5.0, 1.0),
        "cancel": (3.0,),
        "log_sin": (np.array([0.5, 0.75]),),
        "branch": (1.0, 2.0),
        "loop": (2.0, 1.0, 4),
    }


def _floats(values) -> str:
    """A tuple of gradients as plain Python floats: `(11.0, 8.0, 4.0, 1.0)`."""
    return "(" + ", ".join(repr(float(v)) for v in values) + ")"


def main() -> None:
    args = example_args()

    value, grads = cg.value_and_grad(tree, (0, 1, 2, 3))(*args["tree"])
    print("tree     y = c*z*x + k*x + g at (x, z, k, g) = (4, 3, 5, 1), c = 2")
    print(f"         y = {float(value)!r}   grad (x, z, k, g) = {_floats(grads)}")

    value, g = cg.value_and_grad(cancel)(*args["cancel"])
    print("cancel   (x + 1 - 2x)**2 at x = 3")
    print(f"         y = {float(value)!r}   grad x = {float(g)!r}")

    value, g = cg.value_and_grad(log_sin)(*args["log_sin"])
    rounded = ", ".join(f"{v:.4f}" for v in g)
    print("log_sin  log(x0*x1)*sin(x1) at [0.5, 0.75]")
    print(f"         y = {float(value):.4f}   grad = [{rounded}]   (unrounded {_floats(g)})")

    print("branch   z = a+b if a < b else a-b; result = 2z")
    for point in (args["branch"], (3.0, 2.0)):
        value, grads = cg.value_and_grad(branch, (0, 1))(*point)
        print(f"         at {point}: result = {float(value)!r}   grad (a, b) = "
              f"{_floats(grads)}")

    value, pullback = cg.vjp(loop, *args["loop"])
    grads = pullback(1.0)[:2]  # w.r.t. x and s; n is an integer
    trips = pullback.stats.loops[0].trip_counts
    print("loop     while i < n: s = s*x + i; i += 1   at x = 2, s = 1, n = 4")
    print(f"         s = {float(value)!r}   grad (x, s) = {_floats(grads)}   trips = {trips}")


if __name__ == "__main__":
    main()
