"""The issue-14 corpus: plain-Python programs, differentiated with conversion on.

Each program is written once, generic over its numpy module `xp`, and run three ways:
by cfgrad (`xp=cfgrad.numpy`, traced, its `if`/`while`/`for` converted), by HIPS autograd
(`xp=autograd.numpy`, which runs the same control flow natively on its boxes) and as plain
Python on floats (`xp=numpy`), whose central differences are the reference that does not
depend on any autodiff. The gradients must agree under every checkpoint strategy, since
each strategy replays the same loops (and the loops' trip counts) differently.

Inputs are chosen to take different branches and trip counts (a test checks that they do,
from the lines Python runs) and to lie away from a branch switch, where finite differences
would straddle two pieces of the function.
"""

from __future__ import annotations

import functools
import inspect
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

import cfgrad as cg
import cfgrad.numpy as cnp

autograd = pytest.importorskip("autograd")
anp = pytest.importorskip("autograd.numpy")


# ---------------------------------------------------------------------------------
# the corpus
# ---------------------------------------------------------------------------------


def newton_cbrt(a, xp):
    """Newton's method for x**3 = a until the residual is below a tolerance."""
    x = 1.0
    fx = x ** 3 - a
    while abs(fx) > 1e-12:
        x = x - fx / (3 * x * x)
        fx = x ** 3 - a
    return x


def bisection_sqrt(a, xp):
    """Bisection for t*t = a on [0, a], returning the midpoint as soon as it is good
    enough (a `return` inside the `while`); the result is piecewise linear in a."""
    lo, hi = 0.0, a
    while hi - lo > 1e-3 * a:
        mid = (lo + hi) / 2
        fm = mid * mid - a
        if abs(fm) < 2e-2 * a:
            return mid
        if fm > 0:
            hi = mid
        else:
            lo = mid
    return (lo + hi) / 2


def fixed_point_cos(a, xp):
    """x = a*cos(x) iterated, leaving a concrete `range` with `break` once converged;
    `x_new` is first assigned in the loop and read after it."""
    x = 0.0
    for _ in range(500):
        x_new = a * xp.cos(x)
        if abs(x_new - x) < 1e-13:
            break
        x = x_new
    return x_new


def heron_while_true(a, xp):
    """`while True` left by `break`: the square root by Heron's rule."""
    y = a
    while True:
        y_next = 0.5 * (y + a / y)
        if abs(y_next - y) < 1e-12:
            break
        y = y_next
    return y_next * xp.sin(y_next)


def heron_err_inf(a, xp):
    """`err = inf` before the loop: the first test is concrete, the others traced."""
    y = a
    err = math.inf
    while err > 1e-12:
        y_next = 0.5 * (y + a / y)
        err = abs(y_next - y)
        y = y_next
    return y


def first_crossing(x, xp):
    """An early `return` inside a `for` over a concrete range."""
    y = x
    for i in range(20):
        y = y * 1.3 + 0.05 * xp.sin(y)
        if y > 1.0:
            return y * (i + 1)
    return -y


def partial_sum_break(x, xp):
    """`break` on a threshold in a `for` loop: a series summed until it passes 1.5."""
    s = 0.0
    for k in range(1, 60):
        s = s + x ** k / k
        if s > 1.5:
            break
    return s * x


def skip_with_continue(x, xp):
    """`continue` on a traced condition and on a concrete one."""
    total = 0.0
    for i in range(8):
        if i % 4 == 3:
            continue
        term = xp.sin(x * (i + 1))
        if term < 0:
            continue
        total += term * term
    return total


def loops_in_branches(x, xp):
    """A `while` and a `for` inside the branches of a traced `if`, inside a `for`."""
    y = x
    for _ in range(3):
        if y > 1.0:
            while y > 0.5:
                y = y * 0.7
        else:
            for j in range(3):
                y = y + 0.1 * x * (j + 1)
    return y * x


def traced_bounds(x, xp):
    """`range` with a bound computed from the data, nested `range(i)` over the traced
    index, and `range(start, stop, step)`."""
    n = xp.floor(x).astype(int)
    acc = 0.0
    for i in range(n):
        for j in range(i):
            acc = acc + xp.sin(x * j)
    for k in range(1, n + 1, 2):
        acc = acc + x / k
    return acc + x


def counter_int_to_float(x, xp):
    """Loop variables that start as Python ints: `total` becomes a float, `count` stays
    an int counter (with no iteration, both stay Python ints)."""
    n = xp.floor(x * 2).astype(int)
    total = 0
    count = 0
    for i in range(n):
        total = total + x / (i + 1)
        count = count + 1
    return total * count + x


def taylor_list(x, xp):
    """Terms appended to a Python list over a concrete range (one of them chosen by a
    traced `if`), then summed."""
    terms = []
    term = 1.0
    for k in range(12):
        if term > 1.0:
            terms.append(xp.sqrt(term))
        else:
            terms.append(term)
        term = term * x / (k + 1)
    return sum(terms)


def row_norms(W, xp):
    """Iteration over the rows of a traced array, with a traced `if` per row."""
    total = 0.0
    for row in W:
        s = xp.sum(row * row)
        if s > 1.0:
            total = total + xp.sqrt(s)
        else:
            total = total + s
    return total


def enumerate_rows(W, xp):
    """`for i, row in enumerate(W)`: the index weights the row."""
    total = 0.0
    for i, row in enumerate(W):
        total = total + (i + 1) * xp.sum(xp.tanh(row))
        if total > 2.0:
            total = total * 0.5
    return total


COEFS = np.array([0.5, -1.0, 2.0, 0.25, 1.5])


def zip_rows(W, xp):
    """`zip` of a traced array with a constant one, and of two slices of it."""
    total = 0.0
    for row, c in zip(W, COEFS):
        total = total + c * xp.sum(row ** 2)
    for prev, cur in zip(W[:-1], W[1:]):
        d = xp.sum((cur - prev) ** 2)
        if d > 1.0:
            d = xp.sqrt(d)
        total = total + d
    return total


def _soft_clip(y, xp):
    """A helper with its own `if` and `while`, converted when it is called."""
    if y > 2.0:
        y = 2.0 + xp.log(y - 1.0)
    while y < -1.0:
        y = y * 0.5
    return y


def calls_helper(x, xp):
    """A module-level helper called from the differentiated function."""
    return _soft_clip(x * x - 1.5, xp) * _soft_clip(-3.0 * x, xp)


def _apply(f, y):
    return f(y)


def nested_and_lambda(x, xp):
    """A nested function with an early `return` in an `if`, and a lambda whose body is a
    conditional expression."""
    def step(y):
        if y > 1.0:
            return y - 0.5 * xp.sin(y)
        return y * 1.5

    y = x
    for _ in range(4):
        y = step(y)
    return _apply(lambda z: z if z > 0 else 0.1 * z, y - 2.0) + y


def boolean_ops(x, xp):
    """`and`, `or` and `not` on traced comparisons, in `if` tests and as a value."""
    y = x
    if x > 0 and x < 2 or not x > -3:
        y = y * y
    if not (x > 1 and y > 2):
        y = y + 1.0
    inside = x > -1 and x < 1
    if inside or x > 4:
        y = y * 3.0
    return y * x


def chained_comparisons(x, xp):
    """Chained comparisons `lo < x < hi` in an `if` and in a conditional expression."""
    y = xp.sin(x) if -1.0 < x < 1.0 else x * 0.5
    if 0.0 < y < x * x < 4.0:
        y = y + x ** 3
    return y


def elif_chain(x, xp):
    """An `elif` chain assigning in every branch, then one returning from some."""
    if x < -2.0:
        y = -x
    elif x < 0.0:
        y = x * x / 2.0 + 0.5
    elif x < 2.0:
        y = xp.exp(-x)
    else:
        y = xp.log(x)
    if y > 1.0:
        return y * y
    elif y > 0.5:
        return y * 3.0
    return y


def zero_trip_loops(x, xp):
    """Loops whose traced condition may be false on entry (no iteration)."""
    y = x
    while y > 10.0:
        y = y / 2
    for _ in range(xp.floor(y).astype(int) - 4):
        y = y * 0.9
    return y * y


def fibonacci_swap(x, xp):
    """`a, b = b, a + b * x` in a concrete loop, then in a traced `while`."""
    a, b = 1.0, x
    for _ in range(4):
        a, b = b, a + b * x
    while b < 50.0:
        a, b = b, a + b * x
    return a / b


def for_else(x, xp):
    """for-else: the `else` runs only when the loop did not `break`."""
    y = x
    for _ in range(6):
        if y > 4.0:
            y = y - 1.0
            break
        y = y * 1.5
    else:
        y = -y
    return y * x


def while_else(x, xp):
    """while-else with a `return` in the `else`, and a counter that the traced `break`
    turns into a traced loop variable."""
    y = x
    k = 0
    while k < 6:
        y = y * 1.4 + 0.2
        if y > 5.0:
            break
        k = k + 1
    else:
        return -y
    return y + k


def gradient_descent(a, xp):
    """Minimise (t - a)**2 + t**4 by gradient descent with a tolerance and an iteration
    cap: `while abs(g) > tol and it < max_it`."""
    t = 0.0
    g = 2 * (t - a) + 4 * t ** 3
    it = 0
    while abs(g) > 1e-10 and it < 500:
        t = t - 0.1 * g
        g = 2 * (t - a) + 4 * t ** 3
        it += 1
    return t


def decay_until(x, xp):
    """Explicit Euler for y' = -x*y until y falls below a threshold; returns the time it
    took times the final value (the time is piecewise constant in x)."""
    t = 0.0
    y = 1.0
    while y > 0.1:
        y = y - 0.05 * x * y
        t = t + 0.05
    return t * y + y


def power_iteration(W, xp):
    """The top eigenvalue of W W^T + I/2 by power iteration until the vector settles:
    array loop variables and a condition reduced to a scalar."""
    A = W @ W.T + 0.5 * xp.eye(W.shape[0])
    v = xp.ones(W.shape[0]) / 2.0
    err = 1.0
    while err > 1e-12:
        w = A @ v
        w = w / xp.sqrt(xp.sum(w * w))
        err = xp.max(xp.abs(w - v))
        v = w
    return v @ (A @ v)


JACOBI_A = np.array([[4.0, 1.0, 0.5], [1.0, 3.0, -0.5], [0.5, -0.5, 5.0]])


def jacobi_solve(b, xp):
    """Jacobi iteration for A x = b until the largest residual is below a tolerance."""
    d = np.diag(JACOBI_A)
    R = JACOBI_A - np.diag(d)
    x = xp.zeros_like(b)
    r = b - JACOBI_A @ x
    while xp.max(xp.abs(r)) > 1e-12:
        x = (b - R @ x) / d
        r = b - JACOBI_A @ x
    return xp.sum(x * x * b)


def grid_search_return(x, xp):
    """A `return` from the inner of two nested `for` loops."""
    for i in range(5):
        for j in range(5):
            if x * i + j > 6.0:
                return x * i * j + j
    return x


class Spring:
    """A user class: its method has its own `if` and is converted when called."""

    def __init__(self, k):
        self.k = k

    def force(self, y):
        if abs(y) > 1.0:
            return -self.k * y * y * y
        return -self.k * y


def oscillator(x, xp):
    """Symplectic Euler for a spring whose force law changes beyond |y| = 1."""
    spring = Spring(2.0)
    y, v = x, 0.0
    for _ in range(30):
        v = v + 0.05 * spring.force(y)
        y = y + 0.05 * v
    return y


def adaptive_euler(x, xp):
    """Euler for y' = -x*y*y on [0, 1] with step halving: a rejected step `continue`s
    the `while` with a smaller step."""
    t = 0.0
    y = 1.0
    h = 0.5
    while t < 1.0:
        full = y + h * (-x * y * y)
        half = y + 0.5 * h * (-x * y * y)
        half = half + 0.5 * h * (-x * half * half)
        if abs(full - half) > 1e-3:
            h = h / 2
            continue
        y = half
        t = t + h
    return y


def _scaled(y, xp, scale=2.0, shift=0.0):
    if y * scale > 1.0:
        return xp.tanh(y * scale) + shift
    return y * scale - shift


def defaults_and_keywords(x, xp):
    """A helper called with its defaults and with keyword arguments."""
    return _scaled(x, xp) + _scaled(x, xp, scale=-1.5, shift=x)


def traced_range_jumps(x, xp):
    """`continue` and `break` on traced conditions in a `range` with a traced bound;
    the loop index is read after the loop."""
    n = xp.floor(x * 3).astype(int)
    acc = 0.0
    for i in range(n):
        term = xp.sin(x * (i + 1))
        if term < 0:
            continue
        acc = acc + term / (i + 1)
        if acc > 1.2:
            break
    return acc * x + i


def inner_break(x, xp):
    """`break` out of the inner of two concrete loops, on a traced condition."""
    t = 0.0
    for i in range(4):
        for j in range(5):
            t = t + x * (j + 1)
            if t > 3.0 * (i + 1):
                break
        t = t * 0.9
    return t


def rows_until(W, xp):
    """Over the rows of a traced array: `return` on one threshold, `break` on another,
    and the last row visited read after the loop."""
    t = 0.0
    for row in W:
        t = t + xp.sum(row ** 2)
        if t > 6.0:
            return t * 2
        if t > 2.0:
            break
    return t * xp.sum(row)


def unpack_rows(W, xp):
    """Rows unpacked in the `for` target: `enumerate(W, 1)` and `zip` with a list."""
    t = 0.0
    for k, (a, b) in enumerate(W, 1):
        if a > b:
            t = t + k * a * b
        else:
            t = t - b / k
    for c, (a, b) in zip([1.0, 2.0, 3.0, 4.0], W):
        t = t + c * a - 0.1 * b
    return t


def while_in_rows(W, xp):
    """A `while` per row of a traced array: a loop region inside a loop region."""
    t = 0.0
    for row in W:
        y = xp.sum(row * row) + 0.1
        while y < 1.0:
            y = y * 2
        t = t + y
    return t


def chained_while(x, xp):
    """A chained comparison as the condition of a `while`."""
    y = x
    while 0.1 < y < 10.0:
        y = y * 1.5 + 0.01
    return y


def augmented_argument(x, xp):
    """The argument itself updated by augmented assignments in the loop."""
    while x < 10.0:
        x += 1.5
        x *= 1.1
    return x


def closure_in_loop(x, xp):
    """A nested function reading a variable of the enclosing function, called in a
    `while`."""
    scale = 2.0

    def grow(y):
        return y * scale + 0.1

    acc = x
    while acc < 5.0:
        acc = grow(acc)
    return acc


def python_ints_in_branches(x, xp):
    """Python ints on one side of a traced `if`, traced floats (or other ints) on the
    other."""
    s = 1 if x > 0 else -1
    if x > 1.0:
        y = 1
    else:
        y = x
    return s * x * x + y * x


def while_count_as_bound(x, xp):
    """The trip count of a `while` left by `break` (traced) as the bound of a `range`."""
    y = x
    k = 0
    while True:
        k = k + 1
        y = y * 1.3
        if y > 3.0 or k > 10:
            break
    for _ in range(k):
        y = y + 0.1 * x
    return y


def counted_while(x, xp):
    """A concrete counter with a traced `if` inside: the loop stays Python."""
    i = 0
    y = x
    while i < 5:
        if y > 1.0:
            y = y * 0.5
        i += 1
    return y


def asserts_positive(x, xp):
    """An `assert` on a traced condition (a check the program makes when it runs)."""
    assert x > 0, "x must be positive"
    y = x
    while y < 3.0:
        y = y * 1.5
    return y * xp.log(x)


def dict_state(x, xp):
    """Loop variables kept in a dict, updated in place in a traced `while`."""
    state = {"y": x, "t": 0.0}
    while state["y"] > 0.1:
        state["t"] = state["t"] + state["y"]
        state["y"] = state["y"] * 0.7
    return state["t"] * state["y"]


def tuple_state(x, xp):
    """Loop variables kept in a tuple, rebuilt each iteration."""
    p = (x, 0.0)
    while p[0] > 0.1:
        p = (p[0] * 0.5, p[1] + p[0])
    return p[0] * p[1]


def _bracket(a):
    if a > 1.0:
        return 1.0, a
    return a, 1.0


def tuple_from_helper(x, xp):
    """A helper returning a tuple from the branches of a traced `if`."""
    lo, hi = _bracket(x * x)
    return lo * hi + hi * x


def indexed_loop(v, xp):
    """`for i in range(len(v))` with `v[i]`: a concrete loop over a traced vector."""
    t = 0.0
    for i in range(len(v)):
        if v[i] > 0:
            t = t + v[i] * (i + 1)
        else:
            t = t - v[i] * v[i]
    return t


def nested_while_breaks(x, xp):
    """`break` out of an inner `while True` and out of the outer `while`."""
    y = x
    outer = 0.0
    while outer < 20.0:
        inner = y
        while True:
            inner = inner * 1.5
            if inner > 4.0:
                break
        outer = outer + inner
        if outer > 12.0 and y > 0.5:
            break
        y = y + 0.1
    return outer * y


def elif_break(x, xp):
    """An `elif` chain inside a `while`, one of its branches a `break`."""
    y = x
    while y < 100.0:
        if y < 1.0:
            y = y * 3.0
        elif y < 10.0:
            y = y + 4.0
        elif y > 50.0:
            break
        else:
            y = y * y
    return y


def vector_state(W, xp):
    """A vector loop variable grown until its norm passes a bound, with a cap."""
    v = W[0]
    k = 0
    while xp.sum(v * v) < 10.0 and k < 20:
        v = v * 1.3 + 0.1 * W[1]
        k += 1
    return xp.sum(v)


def _tree(x, depth, xp):
    """A recursive helper: a traced `if` at each of its (concrete) levels."""
    if depth == 0:
        return x
    if x > 0:
        return _tree(x * 0.5 - 0.3, depth - 1, xp) + 1.0
    return _tree(-x * x + 0.7, depth - 1, xp) * 2.0


def recursion(x, xp):
    """A recursive helper called from the differentiated function."""
    return _tree(x, 3, xp) * x


# ---------------------------------------------------------------------------------
# cases
# ---------------------------------------------------------------------------------


def _matrix(seed: int, scale: float, rows: int = 4, cols: int = 3) -> np.ndarray:
    return scale * np.random.default_rng(seed).standard_normal((rows, cols))


@dataclass(frozen=True)
class Program:
    fn: Callable
    inputs: tuple  # scalars (Python floats) or arrays
    loops: str = ""  # the kinds of loop regions its Program has: "while", "fori"

    @property
    def name(self) -> str:
        return self.fn.__name__


CORPUS = [
    Program(newton_cbrt, (0.5, 2.0, 30.0), "while"),
    Program(bisection_sqrt, (2.0, 5.3, 9.1), "while"),
    Program(fixed_point_cos, (0.3, 0.6, 0.9), "while"),
    Program(heron_while_true, (0.7, 4.0, 30.0), "while"),
    Program(heron_err_inf, (0.2, 3.0, 50.0), "while"),
    Program(first_crossing, (0.001, 0.1, 0.5, 2.0), "while"),
    Program(partial_sum_break, (0.5, 0.8, 0.9), "while"),
    Program(skip_with_continue, (0.3, 1.1, 2.5)),
    Program(loops_in_branches, (0.3, 1.7, 3.2), "while"),
    Program(traced_bounds, (0.5, 3.5, 6.3), "fori"),
    Program(counter_int_to_float, (0.3, 1.7, 3.2), "fori"),
    Program(taylor_list, (0.5, 2.5, 4.0)),
    Program(row_norms, (_matrix(0, 0.3), _matrix(1, 1.0), _matrix(2, 2.0)), "fori"),
    Program(enumerate_rows, (_matrix(3, 0.2), _matrix(6, 1.0), _matrix(4, 2.0)), "fori"),
    Program(zip_rows, (_matrix(5, 0.3, 5), _matrix(6, 1.0, 5)), "fori"),
    Program(calls_helper, (0.3, 1.5, 2.5), "while"),
    Program(nested_and_lambda, (0.2, 0.9, 1.4)),
    Program(boolean_ops, (-4.0, -0.5, 0.5, 1.5, 2.5, 5.0)),
    Program(chained_comparisons, (-2.0, 0.5, 1.5, 2.5)),
    Program(elif_chain, (-3.0, -1.2, -0.5, 1.5, 3.0)),
    Program(zero_trip_loops, (3.0, 7.5, 25.0), "fori while"),
    Program(fibonacci_swap, (0.8, 1.5, 3.0), "while"),
    Program(for_else, (0.1, 1.0, 3.0), "while"),
    Program(while_else, (0.1, 1.0, 4.5), "while"),
    Program(gradient_descent, (-1.0, 0.5, 2.0), "while"),
    Program(decay_until, (0.5, 1.3, 2.2), "while"),
    Program(power_iteration, (_matrix(7, 1.0, 3), _matrix(8, 0.5, 3)), "while"),
    Program(jacobi_solve, (np.array([0.01, -0.02, 0.005]), np.array([10.0, -20.0, 5.0])), "while"),
    Program(grid_search_return, (-1.0, 0.7, 1.3, 2.7), "while"),
    Program(oscillator, (0.5, 1.5)),
    Program(adaptive_euler, (0.5, 2.0, 4.0), "while"),
    Program(defaults_and_keywords, (0.3, 1.0)),
    Program(traced_range_jumps, (0.7, 1.3, 3.5), "while"),
    Program(inner_break, (0.37, 1.1), "while"),
    Program(rows_until, (_matrix(0, 0.2, 4, 2), _matrix(1, 1.0, 4, 2), _matrix(2, 1.0, 4, 2)),
            "while"),
    Program(unpack_rows, (_matrix(0, 0.7, 4, 2), _matrix(1, 2.0, 4, 2)), "fori"),
    Program(while_in_rows, (_matrix(0, 0.3), _matrix(1, 1.0)), "fori while"),
    Program(chained_while, (0.05, 0.5, 3.0, 12.0), "while"),
    Program(augmented_argument, (0.5, 4.0, 11.0), "while"),
    Program(closure_in_loop, (0.3, 1.3, 6.0), "while"),
    Program(python_ints_in_branches, (-0.5, 0.5, 1.5)),
    Program(while_count_as_bound, (0.01, 0.5, 2.9), "fori while"),
    Program(counted_while, (0.3, 3.0, 17.0)),
    Program(asserts_positive, (0.5, 2.2, 4.0), "while"),
    Program(dict_state, (0.05, 0.5, 3.0), "while"),
    Program(tuple_state, (0.05, 0.5, 3.0), "while"),
    Program(tuple_from_helper, (0.5, 1.5)),
    Program(indexed_loop, (np.array([1.0, -2.0, 3.0]), np.array([-0.5, 0.7, -1.1]))),
    Program(nested_while_breaks, (0.33, 0.9), "while"),
    Program(elif_break, (0.3, 2.3, 7.5, 60.0), "while"),
    Program(recursion, (-0.5, 0.3, 0.9, 2.5)),
    Program(vector_state, (_matrix(0, 1.0, 2), _matrix(1, 0.1, 2), _matrix(2, 4.0, 2)), "while"),
]
BY_NAME = {p.name: p for p in CORPUS}

STRATEGIES = {
    "default": None,
    "StoreAll": cg.checkpoint.StoreAll(),
    "Recompute": cg.checkpoint.Recompute(),
    "EveryK2": cg.checkpoint.EveryK(2),
    "Binomial2": cg.checkpoint.Binomial(2),
    "Online2": cg.checkpoint.Online(2),
}


def _input_id(x, i: int) -> str:
    """A scalar input by its value, an array by its shape and position (ids must not
    depend on the process, for pytest-xdist)."""
    return f"{x:g}" if isinstance(x, float) else "x".join(map(str, np.shape(x))) + f"-{i}"


POINTS = [pytest.param(p.name, i, id=f"{p.name}-{_input_id(x, i)}")
          for p in CORPUS for i, x in enumerate(p.inputs)]


@functools.cache
def _cfgrad_fn(name: str) -> Callable:
    """The program on cfgrad.numpy, converted once: one function object, so cfgrad's
    cache of traced Programs serves every input of one type and every strategy (the
    strategy is chosen per call), as it would for a user calling one `cg.grad` many
    times."""
    return cg.autograph(functools.partial(BY_NAME[name].fn, xp=cnp))


def _python(name: str, x):
    return BY_NAME[name].fn(x, np)


# ---------------------------------------------------------------------------------
# references
# ---------------------------------------------------------------------------------


def _central_differences(f: Callable, x) -> np.ndarray:
    """d f / d x by central differences of the plain-Python function, element by element
    of x (the step scaled to the element): shape f(x).shape + x.shape."""
    x0 = np.array(x, dtype=np.float64)
    columns = []
    for idx in np.ndindex(x0.shape):
        h = 1e-6 * max(1.0, abs(float(x0[idx])))
        up, down = x0.copy(), x0.copy()
        up[idx] += h
        down[idx] -= h
        if x0.ndim == 0:
            up, down = float(up), float(down)
        columns.append((np.asarray(f(up)) - np.asarray(f(down))) / (2 * h))
    out = np.stack(columns, axis=-1)
    return out.reshape(out.shape[:-1] + x0.shape)


@functools.cache
def _references(name: str, i: int) -> tuple[np.ndarray, np.ndarray]:
    """(autograd's gradient, the finite-difference gradient) at the i-th input."""
    fn, x = BY_NAME[name].fn, BY_NAME[name].inputs[i]
    native = np.asarray(autograd.grad(fn)(x, anp), dtype=np.float64)
    fd = _central_differences(lambda v: fn(v, np), x)
    return native, fd


def _check_gradient(g, name: str, i: int) -> None:
    native, fd = _references(name, i)
    np.testing.assert_allclose(g, native, rtol=1e-9, atol=1e-12,
                               err_msg="cfgrad's gradient differs from autograd's")
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-6,
                               err_msg="cfgrad's gradient differs from finite differences")


# ---------------------------------------------------------------------------------
# tests
# ---------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", list(STRATEGIES.values()), ids=list(STRATEGIES))
@pytest.mark.parametrize(("name", "i"), POINTS)
def test_gradient_matches_autograd_and_differences(name, i, strategy):
    """The gradient through the converted control flow, under each checkpoint strategy,
    is autograd's and the finite differences' of the same program."""
    x = BY_NAME[name].inputs[i]
    g = cg.grad(_cfgrad_fn(name), checkpoint=strategy)(x)
    assert np.shape(g) == np.shape(x)
    _check_gradient(g, name, i)


@pytest.mark.parametrize(("name", "i"), POINTS)
def test_value_is_the_plain_python_value(name, i):
    """Converted, the program computes what it computes as plain Python."""
    x = BY_NAME[name].inputs[i]
    value, g = cg.value_and_grad(_cfgrad_fn(name))(x)
    np.testing.assert_allclose(value, _python(name, x), rtol=1e-12, atol=1e-14)
    _check_gradient(g, name, i)


def _path(name: str, x) -> tuple:
    """The lines of this file plain Python runs for `name` at `x`, in order."""
    lines: list[tuple[str, int]] = []

    def tracer(frame, event, arg):
        if frame.f_code.co_filename != __file__:
            return None
        if event == "line":
            lines.append((frame.f_code.co_name, frame.f_lineno))
        return tracer

    previous = sys.gettrace()  # a coverage tool's, which must keep running afterwards
    sys.settrace(tracer)
    try:
        _python(name, x)
    finally:
        sys.settrace(previous)
    return tuple(lines)


@pytest.mark.parametrize("name", list(BY_NAME))
def test_inputs_take_different_paths(name):
    """The inputs exercise more than one path (branch or trip count), so the gradient
    tests compare more than one piece of each function."""
    paths = {_path(name, x) for x in BY_NAME[name].inputs}
    assert len(paths) >= 2


@pytest.mark.parametrize("name", list(BY_NAME))
def test_the_corpus_needs_conversion(name):
    """Each program has control flow on traced values: without conversion it fails, so
    the tests above exercise the conversion and not Python running on concrete values."""
    x = BY_NAME[name].inputs[-1]
    with pytest.raises(cg.TracerBoolError):
        cg.grad(functools.partial(BY_NAME[name].fn, xp=cnp), autograph=False)(x)


@pytest.mark.parametrize(("name", "i"), POINTS)
def test_traced_loops_are_regions_and_concrete_loops_stay_python(name, i):
    """A loop on traced values is a loop region (which the checkpoint strategies above
    schedule), placed at the program's own line; a loop on concrete values is unrolled
    as Python, with no region."""
    text = str(cg.lower(_cfgrad_fn(name), BY_NAME[name].inputs[i]))
    regions = [line.split() for line in text.splitlines()
               if line.lstrip().startswith("region loop#")]
    assert {r[2] for r in regions} == set(BY_NAME[name].loops.split())
    source, first = inspect.getsourcelines(LOOPS_IN.get(name, BY_NAME[name].fn))
    for r in regions:
        file, line = r[-1].rsplit(":", 1)
        assert file == os.path.basename(__file__)
        assert first <= int(line) < first + len(source)


LOOPS_IN = {"calls_helper": _soft_clip}  # where a program's loops are, when not in it


@pytest.mark.parametrize(("name", "i"), POINTS)
def test_jvp_matches_autograd(name, i):
    """Forward mode through the same regions: the value, and the directional derivative
    autograd's gradient gives."""
    x = BY_NAME[name].inputs[i]
    tangent = (np.linspace(-1.0, 1.0, np.size(x)).reshape(np.shape(x)) + 0.3
               if np.ndim(x) else 0.7)
    value, derivative = cg.jvp(_cfgrad_fn(name), (x,), (tangent,))
    native, _ = _references(name, i)
    np.testing.assert_allclose(value, _python(name, x), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(derivative, np.sum(native * tangent), rtol=1e-9, atol=1e-12)


HESSIAN_CASES = ["newton_cbrt", "heron_err_inf", "first_crossing", "fixed_point_cos",
                 "elif_chain", "row_norms", "nested_and_lambda", "traced_bounds",
                 "jacobi_solve", "adaptive_euler"]
HESSIAN_STRATEGIES = ["default", "Recompute", "Online2"]


@pytest.mark.filterwarnings("ignore:Output seems independent of input")  # linear pieces
@pytest.mark.parametrize("strategy", [STRATEGIES[k] for k in HESSIAN_STRATEGIES],
                         ids=HESSIAN_STRATEGIES)
@pytest.mark.parametrize(("name", "i"), [p for p in POINTS if p.values[0] in HESSIAN_CASES])
def test_hessian_matches_autograd(name, i, strategy):
    """Forward over reverse through the regions (and the reverse pass's checkpointed
    loops)."""
    fn, x = BY_NAME[name].fn, BY_NAME[name].inputs[i]
    h = cg.hessian(_cfgrad_fn(name), checkpoint=strategy)(x)
    native = np.asarray(autograd.hessian(fn)(x, anp), dtype=np.float64)
    np.testing.assert_allclose(np.reshape(h, native.shape), native, rtol=1e-7, atol=1e-10)
    # and against central differences of autograd's gradient, which do not share a
    # mistake autograd's Hessian might make
    fd = _central_differences(lambda v: autograd.grad(fn)(v, anp), x)
    np.testing.assert_allclose(np.reshape(h, fd.shape), fd, rtol=1e-5, atol=1e-6)


def test_traced_assert_fails_when_the_program_runs():
    """The `assert` of asserts_positive holds at the corpus's inputs; at a negative one
    the program's run raises the user's message."""
    with pytest.raises(AssertionError, match="x must be positive"):
        cg.grad(_cfgrad_fn("asserts_positive"))(-0.5)


# ---------------------------------------------------------------------------------
# Regressions: bugs the corpus found, as minimal repros
# ---------------------------------------------------------------------------------


def _weak_int_nested_for(x, xp):
    n = xp.floor(x).astype(int)
    acc = 0
    for i in range(n):
        for _ in range(i):
            acc = acc + x
    return acc + x


def _weak_int_nested_while(x, xp):
    acc = 0
    while x * acc < 5.0:
        while x * acc < 1.0:
            acc = acc + x
        acc = acc + 1.0
    return acc


def _weak_int_if_in_loop(x, xp):
    n = xp.floor(x).astype(int)
    acc = 0
    for _ in range(n):
        if x > 1.0:
            acc = acc + x
    return acc + x


@pytest.mark.parametrize("fn", [_weak_int_nested_for, _weak_int_nested_while,
                                _weak_int_if_in_loop], ids=lambda f: f.__name__[1:])
def test_python_int_carried_through_nested_traced_control_flow(fn):
    x = 3.5
    g = cg.grad(functools.partial(fn, xp=cnp))(x)
    np.testing.assert_allclose(g, autograd.grad(fn)(x, anp), rtol=1e-12)
    np.testing.assert_allclose(g, _central_differences(lambda v: fn(v, np), x),
                               rtol=1e-5)


def _number_ifexp(x, xp):
    return x * (2 if x > 0 else 0.5)


def _number_if(x, xp):
    if x > 0:
        s = 2
    else:
        s = 0.5
    return x * s


@pytest.mark.parametrize("fn", [_number_ifexp, _number_if], ids=["ifexp", "if"])
@pytest.mark.parametrize("x", [-0.5, 0.5])
def test_int_and_float_numbers_on_the_branches(fn, x):
    g = cg.grad(functools.partial(fn, xp=cnp))(x)
    np.testing.assert_allclose(g, autograd.grad(fn)(x, anp), rtol=1e-12)


def _while_true_return(x, xp):
    y = x
    while True:
        y = y * 1.2
        if y > 2.0:
            return y * x


@pytest.mark.parametrize("x", [0.5, 1.9])
def test_while_true_left_only_by_return(x):
    g = cg.grad(functools.partial(_while_true_return, xp=cnp))(x)
    np.testing.assert_allclose(g, autograd.grad(_while_true_return)(x, anp), rtol=1e-12)
