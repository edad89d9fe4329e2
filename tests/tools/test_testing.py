"""`cg.testing.check_grads` itself: its tolerances follow the precision the function
computes in, it still catches a wrong derivative at every precision, and `modes` that
would check nothing are refused."""

from __future__ import annotations

import numpy as np
import pytest

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad.testing import check_grads

SEEDS = range(8)


def sin_x(x):
    return cnp.sum(cnp.sin(x) * x)


def scaled_sin(factor: float):
    """sin with a JVP rule `factor` times the true derivative (1.0: a correct rule)."""
    @cg.custom_jvp
    def f(x):
        return cnp.sin(x)

    @f.defjvp
    def _(primals, tangents):
        (x,), (t,) = primals, tangents
        return cnp.sin(x), cnp.cos(x) * t * factor

    return f


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("seed", SEEDS)
def test_a_correct_function_passes_at_every_precision(dtype, seed):
    """float16 used to fail here: its finite differences were taken in float16, where a
    step of 1e-3 does not move an input near 1.0."""
    x = np.random.default_rng(seed).standard_normal(10).astype(dtype)
    check_grads(sin_x, (x,), seed=seed)
    check_grads(lambda x: cg.fori_loop(0, 4, lambda i, c: c * cnp.cos(x) + x, x), (x,),
                seed=seed)
    check_grads(lambda x: cnp.softmax(x) * 3.0, (x,), seed=seed)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_a_wrong_derivative_fails_at_every_precision(dtype):
    x = np.random.default_rng(0).standard_normal(10).astype(dtype)
    check_grads(lambda x: cnp.sum(scaled_sin(1.0)(x) * x), (x,), modes=("fwd",))
    with pytest.raises(AssertionError, match="fwd-mode derivative"):
        check_grads(lambda x: cnp.sum(scaled_sin(1.5)(x) * x), (x,), modes=("fwd",))


def test_an_internal_float16_cast_counts():
    """float32 inputs computed in float16 inside (mixed precision): judged at float16."""
    for seed in SEEDS:
        x = np.random.default_rng(seed).standard_normal(10).astype(np.float32)
        check_grads(lambda x: cnp.sum(cnp.astype(cnp.astype(x, cnp.float16) ** 2,
                                                 cnp.float32)), (x,), seed=seed)


def test_a_function_that_traces_only_at_its_own_dtype():
    """A carry fixed to float16 cannot take float64 inputs: the differences stay float16."""
    def cube(x):
        return cg.fori_loop(0, 3, lambda i, c: c * x, np.float16(1.0))

    for seed in SEEDS:
        check_grads(cube, (np.float16(1.0 + seed / 8),), seed=seed)


@pytest.mark.parametrize("modes", [(), [], "rev", ("rev", "bwd")])
def test_modes_that_check_nothing_are_refused(modes):
    with pytest.raises(cg.ArgumentValueError, match="modes") as info:
        check_grads(sin_x, (np.ones(3),), modes=modes)
    assert isinstance(info.value, ValueError)


def count_to_one(x):
    """Adds x until the sum reaches 1.0: its trip count depends on rounding, so float16
    runs it fewer times than float64 does at the same (float16) input."""
    return cg.while_loop(lambda c: c[0] < 1.0, lambda c: (c[0] + x, c[1] + 1), (x * 0.0, 0))[0]


@pytest.mark.parametrize("x", [0.1, 0.2, 1 / 3])
def test_a_trip_count_that_float64_changes_is_never_a_mismatch(x):
    """At float16 the loop runs 10 (5, 3) times, at the float64-promoted finite-difference
    points 11 (6, 4): the float64 differences measured another piece of the function and
    check_grads reported a correct derivative as wrong. Now the differences run at float16,
    where a step that moves the input also moves the trip count: a path change."""
    with pytest.raises(cg.PathInstabilityError, match="float64 the input takes another "
                       r"path: loop#0 \(at .*\) ran \d+ iterations there"):
        check_grads(count_to_one, (np.float16(x),))


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_a_branch_that_float64_flips_is_checked_at_the_own_dtype(dtype):
    """0.1 + 0.2 > 0.3 holds in float64 only: the float64 differences saw x*x (derivative
    1.4) where the function at its own dtype computes x*3. The own-dtype differences,
    whose path is stable, judge the derivative instead; a wrong rule still fails there."""
    def f(x):
        return cg.cond(x[0] * 0.0 + 0.1 + 0.2 > 0.3, lambda: x * x, lambda: x * 3.0)

    def g(x):
        return cg.cond(x[0] * 0.0 + 0.1 + 0.2 > 0.3, lambda: x * x,
                       lambda: scaled_sin(1.5)(x) * 3.0)

    x = np.random.default_rng(0).uniform(0.5, 1.0, 10).astype(dtype)
    for seed in SEEDS:
        check_grads(f, (x,), seed=seed)
    with pytest.raises(AssertionError, match="fwd-mode derivative"):
        check_grads(g, (x,), modes=("fwd",))


@pytest.mark.parametrize("name, value, allowed", [
    ("eps", 0.0, "positive finite"), ("eps", -1e-3, "positive finite"),
    ("eps", float("inf"), "positive finite"), ("eps", float("nan"), "positive finite"),
    ("atol", -1e-3, "non-negative finite"), ("rtol", -1.0, "non-negative finite"),
    ("atol", float("nan"), "non-negative finite"), ("rtol", float("inf"), "non-negative"),
])
def test_invalid_parameter_values_are_refused(name, value, allowed):
    """eps=0.0 used to be a ZeroDivisionError; a negative or NaN tolerance failed every
    check and an infinite one passed every check, without saying why."""
    with pytest.raises(cg.ArgumentValueError, match=f"{name}=.*must be a {allowed}"):
        check_grads(sin_x, (np.ones(3),), **{name: value})


@pytest.mark.parametrize("name, value", [("eps", "1e-3"), ("atol", True), ("rtol", [1e-3]),
                                         ("eps", 1j)])
def test_parameters_that_are_not_numbers_are_refused(name, value):
    with pytest.raises(cg.ArgumentTypeError, match=f"{name} must be a"):
        check_grads(sin_x, (np.ones(3),), **{name: value})


def test_numeric_parameters_of_any_real_type_are_taken():
    check_grads(sin_x, (np.ones(3),), eps=np.float32(1e-6), atol=0, rtol=np.float64(1e-5))


@pytest.mark.parametrize("args", [2.0, np.ones(3), None, {"x": 2.0}])
def test_args_that_are_not_a_tuple_are_refused(args):
    """args=2.0 used to be a raw TypeError from tuple(); an array was split into scalars."""
    with pytest.raises(cg.ArgumentTypeError, match="args must be a tuple of f's arguments"):
        check_grads(cnp.sin, args)


def test_args_may_be_a_list():
    check_grads(lambda x, y: x * cnp.sin(y), [2.0, np.ones(3)])


@pytest.mark.parametrize("order", [True, 1.0, 0, -1, "1", np.float64(1.0)])
def test_orders_other_than_positive_ints_are_refused(order):
    """order=True and order=1.0 would pass a plain comparison with 1."""
    with pytest.raises(cg.ArgumentValueError, match=r"the order is a positive int"):
        check_grads(sin_x, (np.ones(3),), order=order)
    check_grads(sin_x, (np.ones(3),), order=np.int64(1))


def test_second_order_checks_the_derivatives_of_the_derivatives():
    """order=2 passes on a loop program and catches a rule whose first derivative is right
    but whose own derivative is not (bwd reads x through stop_gradient)."""
    def loop(x):
        return cg.while_loop(lambda c: c[1] < 4, lambda c: (cnp.sin(c[0]) * x, c[1] + 1),
                             (x, 0))[0]

    check_grads(loop, (0.7,), order=2)
    check_grads(loop, (0.7,), order=3, modes=("fwd",))

    @cg.custom_vjp
    def frozen_sin(x):
        return cnp.sin(x)

    frozen_sin.defvjp(lambda x: (cnp.sin(x), x),
                      lambda x, ct: (ct * cnp.cos(cg.stop_gradient(x)),))
    check_grads(frozen_sin, (0.7,), modes=("rev",))
    with pytest.raises(AssertionError, match="rev-mode derivative"):
        check_grads(frozen_sin, (0.7,), order=2, modes=("rev",))
