"""Control flow through the public API: the seed examples, regressions of the bugs control
flow once had (one named test each), and the API contract around cond / switch /
while_loop / fori_loop (docs/api.md, "Control flow").

Expected values are derived by hand in the comments, or come from an independent oracle:
the same computation unrolled with Python control flow, which cfgrad sees as straight-line
code (no Cond, no loop region), so the control-flow machinery is checked against the
straight-line machinery.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import pytest

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad.testing import check_grads


def assert_same_grads(looped: Callable, unrolled: Callable, args: tuple,
                      argnums: int | tuple[int, ...] = 0) -> None:
    """`looped` (cfgrad control flow) and `unrolled` (Python control flow at trace time)
    have the same value and gradient at `args`."""
    value, grads = cg.value_and_grad(looped, argnums)(*args)
    value_ref, grads_ref = cg.value_and_grad(unrolled, argnums)(*args)
    np.testing.assert_allclose(value, value_ref, rtol=1e-12)
    flat = grads if isinstance(argnums, tuple) else (grads,)
    flat_ref = grads_ref if isinstance(argnums, tuple) else (grads_ref,)
    for g, g_ref in zip(flat, flat_ref, strict=True):
        np.testing.assert_allclose(g, g_ref, rtol=1e-12, atol=1e-14)


# ---------------------------------------------------------------------------------
# Seed examples
# ---------------------------------------------------------------------------------


def test_seed_tree() -> None:
    def tree(x, z, k, g):
        c = 2.0
        return c * z * x + k * x + g

    # dy/dx = c*z + k = 11, dy/dz = c*x = 8, dy/dk = x = 4, dy/dg = 1
    assert cg.grad(tree, (0, 1, 2, 3))(4.0, 3.0, 5.0, 1.0) == (11.0, 8.0, 4.0, 1.0)


def test_seed_cancelling_paths() -> None:
    # (x + 1 - 2x)^2 = (1 - x)^2, derivative 2(x - 1) = 4 at x = 3
    assert cg.grad(lambda x: (x + 1 - 2 * x) ** 2)(3.0) == 4.0


def test_seed_log_sin() -> None:
    x0, x1 = 0.5, 0.75
    g = cg.grad(lambda x: cnp.log(x[0] * x[1]) * cnp.sin(x[1]))(np.array([x0, x1]))
    by_hand = [math.sin(x1) / x0, math.sin(x1) / x1 + math.log(x0 * x1) * math.cos(x1)]
    np.testing.assert_allclose(g, by_hand, rtol=1e-13)
    assert np.round(g, 4).tolist() == [1.3633, 0.1912]


def test_seed_cond() -> None:
    def f(a, b):
        z = cg.cond(a < b, lambda: a + b, lambda: a - b)
        return 2 * z

    assert cg.value_and_grad(f, (0, 1))(1.0, 2.0) == (6.0, (2.0, 2.0))
    assert cg.value_and_grad(f, (0, 1))(3.0, 2.0) == (2.0, (2.0, -2.0))


def while_seed(x, n):
    def body(carry):
        i, s = carry
        return i + 1, s * x + i

    return cg.while_loop(lambda carry: carry[0] < n, body, (0, 0.0))[1]


@pytest.mark.parametrize("n", [0, 1, 2, 4, 7])
def test_seed_while_loop(n: int) -> None:
    # s_0 = 0, s_{i+1} = s_i x + i, so s_n = sum_{i<n} i x^(n-1-i)
    # and ds_n/dx = sum_{i<n} i (n-1-i) x^(n-2-i)
    x = 1.5
    value = sum(i * x ** (n - 1 - i) for i in range(n))
    slope = sum(i * (n - 1 - i) * x ** (n - 2 - i) for i in range(n - 1))
    v, g = cg.value_and_grad(while_seed)(x, n)
    assert v == pytest.approx(value, rel=1e-14)
    assert g == pytest.approx(slope, rel=1e-14)


# ---------------------------------------------------------------------------------
# Regressions: one named test per bug control flow once had
# ---------------------------------------------------------------------------------


# (a, b) -> (b, 2a) from (x, y): (x, y), (y, 2x), (2x, 2y), (2y, 4x), (4x, 4y); the
# gradient of a + 10 b after k trips, read off those states:
SWAP_GRADS = {0: (1.0, 10.0), 1: (20.0, 1.0), 2: (2.0, 20.0), 3: (40.0, 2.0), 4: (4.0, 40.0)}


def swap_fori(x, y, n):
    a, b = cg.fori_loop(0, n, lambda i, c: (c[1], 2.0 * c[0]), (x, y))
    return a + 10.0 * b


def swap_while(x, y, n):
    _, a, b = cg.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[2], 2.0 * c[1]),
                            (0, x, y))
    return a + 10.0 * b


@pytest.mark.parametrize("trips", sorted(SWAP_GRADS))
def test_carry_that_swaps(trips: int) -> None:
    """Phis copy in parallel forward, and their adjoints are one simultaneous assignment
    in reverse (a sequential copy would give (y, 2y) after one trip)."""
    for f in (swap_fori, swap_while):
        assert cg.grad(f, (0, 1))(0.3, 0.7, trips) == SWAP_GRADS[trips]


def test_carry_that_rotates_with_data_dependent_exit() -> None:
    """A 3-cycle rotation whose loop stops on the data: the trip count comes from the
    values, and the reverse pass must undo exactly that many rotations."""

    def step(a, b, d, sin):
        return b, d, a * 1.5 + sin(b)

    def looped(x, y, z):
        def body(c):
            return (c[0] + 1, *step(c[1], c[2], c[3], cnp.sin))

        out = cg.while_loop(lambda c: (c[0] < 10) & (c[1] < 4.0), body, (0, x, y, z))
        return out[1] + 2.0 * out[2] + 3.0 * out[3]

    args = (0.5, 1.0, 2.0)
    state, trips = args, 0  # the trip count, by plain Python on floats
    while trips < 10 and state[0] < 4.0:
        state, trips = step(*state, math.sin), trips + 1
    assert 2 <= trips < 10  # the data, not the bound, ends this loop

    def unrolled(x, y, z):
        a, b, d = x, y, z
        for _ in range(trips):
            a, b, d = step(a, b, d, cnp.sin)
        return a + 2.0 * b + 3.0 * d

    _, pullback = cg.vjp(looped, *args)
    pullback(1.0)
    assert pullback.stats.loops[0].trip_counts == [trips]
    assert_same_grads(looped, unrolled, args, (0, 1, 2))


def test_cond_whose_branches_return_operands_unchanged() -> None:
    """Both Proj edges lead to empty case blocks; the merge Phis read the operands
    themselves, and the gradient reaches them whichever way the Cond went."""

    def same(x, y):
        a, b = cg.cond(x > y, lambda a, b: (a, b), lambda a, b: (a, b), x, y)
        return 3.0 * a + 5.0 * b

    def swapped(x, y):  # one case passes the operands through, the other swaps them
        a, b = cg.cond(x > y, lambda a, b: (a, b), lambda a, b: (b, a), x, y)
        return 3.0 * a + 5.0 * b

    program = cg.lower(same, 1.0, 2.0)
    (region,) = program.ifs()
    assert all(not block.nodes for block in region.cases)
    for x, y in [(2.0, 1.0), (1.0, 2.0)]:
        assert cg.grad(same, (0, 1))(x, y) == (3.0, 5.0)
    assert cg.grad(swapped, (0, 1))(2.0, 1.0) == (3.0, 5.0)
    assert cg.grad(swapped, (0, 1))(1.0, 2.0) == (5.0, 3.0)


@pytest.mark.parametrize(("x", "y", "expected"), [
    (1.0, 2.0, (2.0, 1.0)),  # x*y: (y, x)
    (1.0, -2.0, (1.0, -1.0)),  # x - y
    (-1.0, 2.0, (math.cos(-1.0) * 2.0, math.sin(-1.0))),  # sin(x) y
    (-1.0, -2.0, (-2.0, 0.0)),  # x*x: (2x, 0)
])
def test_cond_inside_cond(x: float, y: float, expected: tuple) -> None:
    def f(x, y):
        return cg.cond(
            x > 0,
            lambda: cg.cond(y > 0, lambda: x * y, lambda: x - y),
            lambda: cg.cond(y > x, lambda: cnp.sin(x) * y, lambda: x * x))

    np.testing.assert_allclose(cg.grad(f, (0, 1))(x, y), expected, rtol=1e-15)


def geometric_fori(x, y, lo, hi):
    return cg.fori_loop(lo, hi, lambda i, c: c * x + 1.0, y)


def geometric_while(x, y, n):
    return cg.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * x + 1.0), (0, y))[1]


@pytest.mark.parametrize(("lo", "hi"), [(0, 0), (3, 1), (2, 3), (0, 1), (0, 6), (-2, 3)])
def test_zero_one_and_many_trips(lo: int, hi: int) -> None:
    # c_{k+1} = c_k x + 1 from c_0 = y: c_n = y x^n + sum_{j<n} x^j, so
    # dc_n/dy = x^n and dc_n/dx = n y x^(n-1) + sum_{j<n} j x^(j-1)
    x, y = 0.8, 1.7
    n = max(hi - lo, 0)
    value = y * x**n + sum(x**j for j in range(n))
    by_hand = (n * y * x ** (n - 1) + sum(j * x ** (j - 1) for j in range(1, n)), x**n)
    for f, args in ((geometric_fori, (x, y, lo, hi)), (geometric_while, (x, y, n))):
        v, g = cg.value_and_grad(f, (0, 1))(*args)
        assert v == pytest.approx(value, rel=1e-14)
        np.testing.assert_allclose(g, by_hand, rtol=1e-14)
        _, pullback = cg.vjp(f, *args)
        pullback(1.0)
        assert pullback.stats.loops[0].trip_counts == [n]


def test_while_whose_condition_is_false_at_once() -> None:
    f = lambda x: cg.while_loop(lambda c: c > 10.0, lambda c: c * c, x)  # noqa: E731
    assert cg.value_and_grad(f)(3.0) == (3.0, 1.0)


def test_nested_loops_whose_inner_trip_count_depends_on_the_outer_index() -> None:
    # the inner loop multiplies by x i times in outer iteration i: x^(0+1+…+(n-1))
    def f(x, n):
        return cg.fori_loop(0, n, lambda i, c: cg.fori_loop(0, i, lambda j, d: d * x, c), 1.0)

    x, n = 1.1, 5
    power = n * (n - 1) // 2
    v, g = cg.value_and_grad(f)(x, n)
    assert v == pytest.approx(x**power, rel=1e-14)
    assert g == pytest.approx(power * x ** (power - 1), rel=1e-14)
    _, pullback = cg.vjp(f, x, n)
    pullback(1.0)
    outer, inner = pullback.stats.loops
    assert outer.trip_counts == [5]
    assert inner.trip_counts == [0, 1, 2, 3, 4]
    assert (outer.forward_steps, inner.forward_steps) == (5, 10)


def test_nested_loops_inner_trip_count_from_outer_carry() -> None:
    """An inner while whose bound is the outer loop's index and whose body also reads it."""

    def looped(x):
        def outer(i, c):
            return cg.while_loop(lambda d: d[0] < i,
                                 lambda d: (d[0] + 1, cnp.tanh(d[1] * x + cnp.astype(i, float))),
                                 (0, c))[1]

        return cg.fori_loop(0, 4, outer, x)

    def unrolled(x):
        c = x
        for i in range(4):
            for _ in range(i):
                c = cnp.tanh(c * x + float(i))
        return c

    assert_same_grads(looped, unrolled, (0.3,))


def test_loop_local_temporaries() -> None:
    """Temporaries made afresh in every iteration (and inside a cond in the body): the
    reverse pass must use each iteration's own values and restart their adjoints at 0."""

    def step(c, x, cond):
        t = cnp.sin(c) * x
        u = t * t
        return cond(u > 0.1, lambda: c + u - t, lambda: c * 1.1 + t)

    def looped(x):
        return cg.fori_loop(0, 5, lambda i, c: step(c, x, cg.cond), x)

    path, c = [], 0.7  # the branches taken, by running the steps on plain floats

    def record(pred, true_fun, false_fun):
        path.append(bool(pred))
        return true_fun() if pred else false_fun()

    for _ in range(5):
        c = step(c, 0.7, record)
    assert path != path[::-1]  # both branches run, and not symmetrically

    def unrolled(x):
        taken = iter(path)
        c = x
        for _ in range(5):
            c = step(c, x, lambda pred, true_fun, false_fun: (
                true_fun() if next(taken) else false_fun()))
        return c

    assert_same_grads(looped, unrolled, (0.7,))


def test_decisions_in_a_loop_are_reversed_last_in_first_out() -> None:
    # decisions T, F, F: c = y x, then y x + x, then y x + 2x, so d/dx = y + 2 and d/dy = x
    def f(x, y):
        return cg.fori_loop(0, 3, lambda i, c: cg.cond(i == 0, lambda: c * x, lambda: c + x), y)

    assert cg.grad(f, (0, 1))(3.0, 5.0) == (7.0, 3.0)


def test_accumulator_initialised_from_a_constant() -> None:
    def scalar(x, n):
        return cg.fori_loop(0, n, lambda i, acc: acc + x * cnp.astype(i, float), 0.0)

    def vector(x):
        return cnp.sum(cg.fori_loop(0, 3, lambda i, acc: acc + x * x, np.zeros(2)))

    def two_loops(x):  # both accumulators start from the same (deduplicated) constant
        a = cg.fori_loop(0, 2, lambda i, acc: acc + x, 0.0)
        b = cg.fori_loop(0, 3, lambda i, acc: acc + x * x, 0.0)
        return a * b

    # sum_{i<n} i x: value x n(n-1)/2, gradient n(n-1)/2
    assert cg.value_and_grad(scalar)(2.0, 5) == (20.0, 10.0)
    assert cg.value_and_grad(scalar)(2.0, 0) == (0.0, 0.0)
    # 3 * sum(x^2): gradient 6x
    np.testing.assert_array_equal(cg.grad(vector)(np.array([1.0, -2.0])), [6.0, -12.0])
    # (2x)(3x^2) = 6x^3: gradient 18x^2
    assert cg.grad(two_loops)(2.0) == 72.0


def test_closures_over_traced_values_at_depth_three() -> None:
    """The innermost body (cond > fori > while) reads x and y from the function's scope
    and c from the fori's: three and one scopes out."""

    def looped(x, y):
        def fori_body(i, c):
            def while_body(d):
                return d[0] + 1, d[1] + x * y * c * 0.1 + cnp.sin(d[1]) * y

            return cg.while_loop(lambda d: d[0] < 2, while_body, (0, c))[1]

        return cg.cond(x > 0, lambda: cg.fori_loop(0, 3, fori_body, y), lambda: x * y)

    def unrolled(x, y):
        c = y
        for _ in range(3):
            d = c
            for _ in range(2):
                d = d + x * y * c * 0.1 + cnp.sin(d) * y
            c = d
        return c

    assert_same_grads(looped, unrolled, (0.4, 0.9), (0, 1))
    assert cg.grad(looped, (0, 1))(-0.4, 0.9) == (0.9, -0.4)


def test_gradient_flows_to_a_value_closed_over_by_a_loop_body() -> None:
    """Each iteration adds its contribution to the closed-over value's adjoint."""

    def counting(w, n):
        return cg.fori_loop(0, n, lambda i, c: c + w, 0.0)

    def product(w, n):
        return cg.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * w), (0, 1.0))[1]

    def nonlinear(w):
        return cg.fori_loop(0, 4, lambda i, c: c + w * cnp.sin(c), 0.5)

    def nonlinear_unrolled(w):
        c = 0.5
        for _ in range(4):
            c = c + w * cnp.sin(c)
        return c

    assert cg.grad(counting)(0.5, 7) == 7.0
    assert cg.grad(product)(1.5, 4) == pytest.approx(4 * 1.5**3, rel=1e-15)  # n w^(n-1)
    assert_same_grads(nonlinear, nonlinear_unrolled, (0.8,))


def test_outer_value_returned_unchanged_from_inside_a_loop() -> None:
    """An outer value reaching a Phi inside the loop directly (as a cond result, or as the
    carry itself) is a closure too: its adjoint accumulates across the reverse iterations."""

    def via_cond(x, y):  # y = 0.3: c = 0.6, 1.2, then x (c > 1), then x again (x > 1)
        return cg.fori_loop(0, 4, lambda i, c: cg.cond(c > 1.0, lambda: x, lambda: c * 2.0),
                            y)

    def via_carry(x, y, n):
        return cg.fori_loop(0, n, lambda i, c: x, y)

    assert cg.grad(via_cond, (0, 1))(5.0, 0.3) == (1.0, 0.0)
    assert cg.grad(via_carry, (0, 1))(5.0, 0.3, 3) == (1.0, 0.0)
    assert cg.grad(via_carry, (0, 1))(5.0, 0.3, 0) == (0.0, 1.0)


# ---------------------------------------------------------------------------------
# The API contract around control flow (docs/api.md, "Control flow")
# ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("index", "branch"), [
    (-5, 0), (-1, 0), (0, 0), (1, 1), (2, 2), (3, 2), (100, 2)])
def test_switch_index_is_clamped_like_jax(index: int, branch: int) -> None:
    scale = (2.0, 3.0, 5.0)  # branch k computes scale[k] * x

    def f(i, x):
        return cg.switch(i, [lambda x, s=s: s * x for s in scale], x)

    for i in (index, np.int32(index)):
        assert cg.value_and_grad(f, 1)(i, 1.5) == (scale[branch] * 1.5, scale[branch])
    # a constant index, known when the function is traced
    assert cg.grad(lambda x: f(index, x))(1.5) == scale[branch]


class Params(NamedTuple):
    w: Any
    b: Any


def test_pytree_carries_and_operands() -> None:
    """Dict, list, namedtuple and None leaves in carries, operands and results."""

    def step(params, h):
        return cnp.tanh(params.w * h + params.b)

    def looped(params, x):
        def body(c):
            h, _ = c["h"]
            return {"i": c["i"] + 1, "h": [step(params, h), h], "none": None}

        out = cg.while_loop(lambda c: c["i"] < 3, body, {"i": 0, "h": [x, x], "none": None})
        h, prev = out["h"]
        picked = cg.cond(cnp.sum(h) > 0, lambda p, q: p.w * q, lambda p, q: p.b * q, params, prev)
        return cnp.sum(h) + cnp.sum(picked)

    params, x = Params(np.array([0.5, -0.3]), 0.1), np.array([1.0, 2.0])
    h = x
    for _ in range(3):
        h = step(params, h)
    positive = np.sum(h) > 0  # the cond's decision, on plain arrays

    def unrolled(params, x):
        h, prev = x, x
        for _ in range(3):
            h, prev = step(params, h), h
        return cnp.sum(h) + cnp.sum((params.w if positive else params.b) * prev)

    grads = cg.grad(looped, (0, 1))(params, x)
    grads_ref = cg.grad(unrolled, (0, 1))(params, x)
    assert isinstance(grads[0], Params)
    np.testing.assert_allclose(grads[0].w, grads_ref[0].w, rtol=1e-12)
    np.testing.assert_allclose(grads[0].b, grads_ref[0].b, rtol=1e-12)
    np.testing.assert_allclose(grads[1], grads_ref[1], rtol=1e-12)

    out, pullback = cg.vjp(lambda d: {"y": d["a"] * 2.0, "z": None}, {"a": 1.5, "n": None})
    assert out == {"y": 3.0, "z": None}
    assert pullback({"y": 1.0, "z": None}) == ({"a": 2.0, "n": None},)


def test_python_scalar_carries() -> None:
    """Python ints and floats in a carry become int64/float64 values, and the body may
    return arrays of those dtypes for them."""

    def f(x):
        n, p = cg.fori_loop(0, 3, lambda i, c: (c[0] + 1, c[1] * x), (0, 1.0))
        return p, n

    (p, n), (dp, _) = cg.jvp(f, (1.5,), (1.0,))
    assert np.asarray(n).dtype == np.int64 and n == 3
    assert np.asarray(p).dtype == np.float64
    assert p == pytest.approx(1.5**3, rel=1e-15)
    assert dp == pytest.approx(3 * 1.5**2, rel=1e-15)
    assert cg.grad(lambda x: f(x)[0])(1.5) == pytest.approx(3 * 1.5**2, rel=1e-15)


def test_argnums() -> None:
    def f(x, y, z):
        return x * y * y + z

    assert cg.grad(f)(2.0, 3.0, 4.0) == 9.0
    assert cg.grad(f, 1)(2.0, 3.0, 4.0) == 12.0
    assert cg.grad(f, (0, 2))(2.0, 3.0, 4.0) == (9.0, 1.0)
    assert cg.grad(f, (1,))(2.0, 3.0, 4.0) == (12.0,)
    assert cg.value_and_grad(f, (2, 0))(2.0, 3.0, 4.0) == (22.0, (1.0, 9.0))


def test_has_aux() -> None:
    def f(x):
        y = cg.cond(x > 0, lambda: x * x, lambda: -x)
        return y, {"y": y, "twice": 2 * y}

    g, aux = cg.grad(f, has_aux=True)(3.0)
    assert g == 6.0 and aux == {"y": 9.0, "twice": 18.0}
    (value, aux), g = cg.value_and_grad(f, has_aux=True)(-3.0)
    assert (value, g) == (3.0, -1.0) and aux == {"y": 3.0, "twice": 6.0}


def test_vjp_with_non_scalar_outputs() -> None:
    # f(x) = (x^2 elementwise, sin(x0) x1); J^T (u, w) = 2 x u + w [cos(x0) x1, sin(x0), 0]
    def f(x):
        return x * x, cnp.sin(x[0]) * x[1]

    x = np.array([0.3, -1.2, 2.0])
    u, w = np.array([1.0, -2.0, 0.5]), 1.5
    out, pullback = cg.vjp(f, x)
    np.testing.assert_array_equal(out[0], x * x)
    (ct,) = pullback((u, w))
    by_hand = 2 * x * u + w * np.array([math.cos(0.3) * -1.2, math.sin(0.3), 0.0])
    np.testing.assert_allclose(ct, by_hand, rtol=1e-14)


def test_jvp_through_loops() -> None:
    """Forward mode through while (the seed loop), fori with a cond inside, and switch."""
    x, n = 1.5, 5
    slope = sum(i * (n - 1 - i) * x ** (n - 2 - i) for i in range(n - 1))
    value, tangent = cg.jvp(while_seed, (x, n), (1.0, 0))
    assert tangent == pytest.approx(slope, rel=1e-14)

    def mixed(x, v):
        def body(i, c):
            return cg.cond(cnp.sum(c) > 1.0, lambda: c * 0.5 + x,
                           lambda: cg.switch(i, [lambda: c * x, lambda: cnp.sin(c) + v]))

        return cg.fori_loop(0, 5, body, v)

    args = (0.9, np.array([0.4, 1.3]))
    t = (0.7, np.array([-1.0, 0.25]))
    _, jv = cg.jvp(mixed, args, t)
    _, pullback = cg.vjp(mixed, *args)
    u = np.array([0.3, -2.0])
    gx, gv = pullback(u)
    assert float(u @ jv) == pytest.approx(gx * t[0] + gv @ t[1], rel=1e-12)
    check_grads(mixed, args)


def test_int_inputs_get_no_gradient_in_vjp() -> None:
    def f(x, n, idx):
        return cg.fori_loop(0, n, lambda i, c: c * x, 1.0) + cnp.sum(cnp.astype(idx, float))

    out, pullback = cg.vjp(f, 2.0, 3, np.array([1, 2]))
    assert out == 11.0
    dx, dn, didx = pullback(1.0)
    assert dx == 12.0  # 3 x^2
    for ct, shape in ((dn, ()), (didx, (2,))):
        assert np.shape(ct) == shape
        assert np.asarray(ct).dtype.kind != "f"
        assert not np.any(ct)


def test_pullback_can_be_called_twice() -> None:
    def f(x, n):
        return cg.fori_loop(0, n, lambda i, c: cg.cond(c > 1.0, lambda: c * 0.5, lambda: c * x),
                            1.0)

    _, pullback = cg.vjp(f, 1.7, 6)
    assert pullback.stats is None
    first = pullback(1.0)
    stats = pullback.stats
    second = pullback(2.0)
    assert second[0] == 2.0 * first[0]
    assert pullback.stats.loops[0].trip_counts == stats.loops[0].trip_counts == [6]
    assert cg.grad(f)(1.7, 6) == first[0]


def test_lowering_is_cached_per_signature() -> None:
    calls = []

    def f(x, n):
        calls.append(1)
        return cnp.sum(cg.fori_loop(0, n, lambda i, c: c * x, x))

    g = cg.grad(f)
    g(1.0, 3)
    g(2.0, 4)  # same signature (float, int): no tracing
    assert len(calls) == 1
    cg.vjp(f, 3.0, 2)
    cg.jvp(f, (3.0, 2), (1.0, 0))
    cg.value_and_grad(f)(0.5, 1)
    assert len(calls) == 1
    g(np.float32(1.0), 3)  # another dtype
    assert len(calls) == 2
    g(np.ones(2), 3)  # another shape
    assert len(calls) == 3
    g(np.ones(2), 5)
    assert len(calls) == 3


def test_stats_for_nested_loops() -> None:
    """One trip count per execution of a loop; forward_steps is their sum."""

    def f(x, n):
        def outer(c):
            i, s = c
            inner = cg.fori_loop(0, i + 1, lambda j, t: t * x, s)
            return i + 1, cg.cond(inner > 3.0, lambda: inner * 0.25, lambda: inner)

        return cg.while_loop(lambda c: c[0] < n, outer, (0, 1.0))[1]

    _, pullback = cg.vjp(f, 1.3, 4)
    pullback(1.0)
    outer, inner = pullback.stats.loops
    assert (outer.name, inner.name) == ("loop#0", "loop#1")
    assert outer.trip_counts == [4] and outer.forward_steps == 4
    assert inner.trip_counts == [1, 2, 3, 4] and inner.forward_steps == 10
    assert outer.recompute_steps == inner.recompute_steps == 0


def test_nan_in_an_untaken_branch_never_reaches_the_gradient() -> None:
    """cond differentiates only the taken branch: sqrt(x) at x < 0 is never evaluated.
    cnp.where evaluates both sides, and although its VJP sends exactly 0 to the unselected
    side, sqrt's VJP multiplies that 0 by 0.5/sqrt(-1) = NaN: the `where` trap that
    docs/index.md says cond avoids."""

    def with_cond(x):
        return cg.cond(x > 0, lambda: cnp.sqrt(x), lambda: 0.0 * x)

    def with_where(x):
        return cnp.where(x > 0, cnp.sqrt(x), 0.0)

    assert cg.value_and_grad(with_cond)(-1.0) == (0.0, 0.0)
    assert cg.value_and_grad(with_cond)(4.0) == (2.0, 0.25)
    value, g = cg.value_and_grad(with_where)(-1.0)
    assert value == 0.0
    assert np.isnan(g)
    assert cg.grad(with_where)(4.0) == 0.25


# ---------------------------------------------------------------------------------
# Values that cond_fun hands to body_fun (issue 10, item 1)
# ---------------------------------------------------------------------------------

ALL_STRATEGIES = (None, cg.checkpoint.StoreAll(), cg.checkpoint.Recompute(),
                  cg.checkpoint.EveryK(2), cg.checkpoint.Binomial(2), cg.checkpoint.Online(2))


def newton_sqrt(a):
    """Newton's method for sqrt(a) whose body reuses the residual cond_fun computed."""
    cache = {}

    def not_converged(x):
        cache["residual"] = x * x - a
        return cnp.abs(cache["residual"]) > 1e-12

    return cg.while_loop(not_converged, lambda x: x - cache["residual"] / (2 * x), a)


@pytest.mark.parametrize("strategy", ALL_STRATEGIES, ids=repr)
def test_body_reuses_a_value_computed_by_cond_fun(strategy: Any) -> None:
    # sqrt(4) = 2, d sqrt(a)/da = 1/(2 sqrt(a)) = 0.25; the converged iterate's derivative
    # equals the root's up to the last step's residual (~1e-14)
    value, g = cg.value_and_grad(newton_sqrt, checkpoint=strategy)(4.0)
    assert value == pytest.approx(2.0, abs=1e-12)
    assert g == pytest.approx(0.25, abs=1e-10)
    assert cg.jvp(newton_sqrt, (4.0,), (1.0,))[1] == pytest.approx(g, abs=1e-12)


@pytest.mark.parametrize("strategy", ALL_STRATEGIES, ids=repr)
def test_cond_fun_value_used_in_nested_control_flow_of_the_body(strategy: Any) -> None:
    """The residual reaches a cond and a fori_loop nested in the body; compared with the
    same iteration unrolled in Python."""

    def step(x, r, a):
        scaled = cg.cond(r > 0, lambda: r * a, lambda: r * 0.5)
        return cg.fori_loop(0, 2, lambda i, y: y - 0.1 * scaled * y, x)

    def looped(x0, a):
        seen = {}

        def cond_fun(c):
            seen["r"] = cnp.sin(c[1]) * a
            return c[0] < 3

        return cg.while_loop(cond_fun, lambda c: (c[0] + 1, step(c[1], seen["r"], a)),
                             (0, x0), checkpoint=strategy)[1]

    def unrolled(x0, a):
        x = x0
        for _ in range(3):
            x = step(x, cnp.sin(x) * a, a)
        return x

    assert_same_grads(looped, unrolled, (0.7, 1.3), argnums=(0, 1))


def test_cond_fun_value_used_after_the_loop_is_a_clear_error() -> None:
    def f(x):
        seen = {}

        def cond_fun(c):
            seen["r"] = c * 2.0
            return c < 3.0

        out = cg.while_loop(cond_fun, lambda c: c + 1.0, x)
        return out + seen["r"]

    with pytest.raises(cg.LoweringError, match="used outside it"):
        cg.grad(f)(1.0)
