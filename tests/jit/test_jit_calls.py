"""Adversarial probes of `cg.jit`: argument kinds, layouts and calling conventions that the
other test_jit*.py files do not reach, each compared with the interpreter.

The first tests are bugs probing found, now fixed: small integer scalars wrap in their own
width, `cg.detect_anomaly()` reaches jitted functions, first calls from several threads
compile, grad of grad compiles. The programs are few and tiny, so the file stays within a
handful of Numba compiles.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from test_jit import paired_leaves
from threads import all_at_once

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad import tree
from cfgrad.checkpoint import Binomial, Online


def interpreted(f: Any) -> Any:
    """`f` traced as `cg.jit` traces it, but run by the interpreter: the reference that
    the compiled numbers must equal (same Program, same promotions)."""
    j = cg.jit(f)

    def run(*args: Any) -> Any:
        entry, leaves = j._lowered(args, {})
        return tree.unflatten(entry.program.out_tree, entry.run(leaves)[0])
    return run


def assert_same(got: Any, want: Any) -> None:
    """Same tree, and each leaf the same dtype, shape and (to 1e-13) values."""
    for g, w in paired_leaves(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-13, equal_nan=True)


# ---------------------------------------------------------------------------------
# Bugs
# ---------------------------------------------------------------------------------


def mul_add_div(x: Any, y: Any) -> Any:
    return x * y + x / y


def test_small_integer_scalars_wrap_as_numpy_does() -> None:
    args = (np.int8(100), np.int8(2))
    assert_same(cg.jit(mul_add_div)(*args), interpreted(mul_add_div)(*args))


def mul(x: Any, y: Any) -> Any:
    return x * y


def test_int32_scalar_overflow_wraps_instead_of_raising() -> None:
    args = (np.int32(2**30), np.int32(4))
    assert_same(cg.jit(mul)(*args), interpreted(mul)(*args))


def sqrt_log(x: Any) -> Any:
    return cnp.sum(cnp.sqrt(x) * cnp.log(x))


def test_detect_anomaly_context_is_honoured_or_falls_back() -> None:
    x = np.array([-1.0, 2.0])
    with cg.detect_anomaly(), warnings.catch_warnings():
        warnings.simplefilter("ignore", cg.CompileWarning)
        with pytest.raises(cg.AnomalyError):
            cg.grad(sqrt_log)(x)
        with pytest.raises(cg.AnomalyError):
            cg.jit(cg.grad(sqrt_log))(x)


def test_first_calls_from_several_threads_compile(monkeypatch: Any, tmp_path: Any) -> None:
    monkeypatch.setenv("CFGRAD_CACHE_DIR", str(tmp_path))

    def f(x: Any) -> Any:  # a program no other test compiles, so its module is new
        return x * 3.25 - 0.125

    errors: list[BaseException] = []

    def call(_: int) -> None:
        try:
            assert cg.jit(f, fallback=False)(2.0) == 6.375
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    all_at_once(call)
    assert not errors, errors


def sin_cube(x: Any) -> Any:
    return cnp.sin(x) * x**3


def test_grad_of_grad_compiles() -> None:
    got = cg.jit(cg.grad(cg.grad(sin_cube)), fallback=False)(0.7)
    assert_same(got, cg.grad(cg.grad(sin_cube))(0.7))


# ---------------------------------------------------------------------------------
# Probes that pass, kept for what they cover
# ---------------------------------------------------------------------------------


def pytree_loss(p: dict, x: tuple) -> Any:
    return p["w"] * x[0] + cnp.sum(p["v"] * x[1])


def test_gradient_with_respect_to_dict_and_tuple_arguments() -> None:
    p = {"w": 2.0, "v": np.array([1.0, 2.0])}
    x = (3.0, np.array([0.5, 1.5]))
    g = cg.value_and_grad(pytree_loss, argnums=(0, 1))
    assert_same(cg.jit(g)(p, x), g(p, x))


def matvec_corner(A: Any, v: Any) -> Any:
    return cnp.sum(A @ v) + A[0, 1]


@pytest.mark.parametrize("layout", ["fortran", "strided", "read-only"])
def test_arrays_of_every_layout_give_the_numbers_of_a_contiguous_copy(layout: str) -> None:
    A, v = np.arange(24.0).reshape(3, 8), np.arange(8.0)
    A, v = {"fortran": (np.asfortranarray(A[:, :4]), v[:4]),
            "strided": (A[:, ::2], v[::2]),
            "read-only": (A[:, :4].copy(), v[:4])}[layout]
    A.flags.writeable = layout != "read-only"
    g = cg.value_and_grad(matvec_corner, argnums=(0, 1))
    assert_same(cg.jit(g)(A, v), g(np.ascontiguousarray(A), np.ascontiguousarray(v)))


def test_small_integer_arrays_wrap_as_numpy_does() -> None:
    """The array counterpart of the scalar bug above, which is right."""
    args = (np.array([100], np.int8), np.array([2], np.int8))
    assert_same(cg.jit(mul_add_div)(*args), mul_add_div(*args))


def shifted_product(x: Any, t: Any) -> Any:
    return x[t - 1] * x[t] ** 2


def test_negative_and_out_of_range_traced_indices() -> None:
    """x[t - 1] at t = 0 reads the last element; past either end is an IndexError, never
    memory outside the array."""
    x = np.array([1.0, 2.0, 3.0, 4.0])
    jitted = cg.jit(cg.value_and_grad(shifted_product))
    for t in (0, 3, -2):
        assert_same(jitted(x, t), cg.value_and_grad(shifted_product)(x, t))
    for t in (4, -5):
        with pytest.raises(IndexError):
            jitted(x, t)


def recurrence(strategy: Any) -> Any:
    def f(x: Any, n: Any) -> Any:
        def body(c: tuple) -> tuple:
            return c[0] + 1, cnp.sin(c[1]) * 1.01 + 0.1 * x
        return cg.while_loop(lambda c: c[0] < n, body, (0, x), checkpoint=strategy)[1]
    return f


@pytest.mark.parametrize("strategy", [Online(4), Binomial(4)], ids=["Online", "Binomial"])
def test_five_thousand_trips_under_four_snapshots(strategy: Any) -> None:
    g = cg.value_and_grad(recurrence(strategy))
    jitted = cg.jit(g)
    for n in (0, 5000):
        assert_same(jitted(0.3, n), g(0.3, n))


def scale(x: Any, n: Any) -> Any:
    return x * n


def test_negative_static_argnums_and_keyword_arguments() -> None:
    assert cg.jit(scale, static_argnums=-1)(2.0, 3) == 6.0
    assert cg.jit(scale, static_argnums=-1)(2.0, 4) == 8.0
    jitted = cg.jit(scale)
    assert jitted(2.0, n=3.0) == jitted(x=2.0, n=3.0) == 6.0
    with pytest.raises(TypeError):
        jitted(2.0)
