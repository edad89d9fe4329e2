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
