"""What the transformations accept as arguments and outputs (issue 10, items 2-5 and 9, and
the nested-differentiation message): every input they cannot handle is a typed error naming
the argument, never a silent wrong number or a raw `KeyError`; `argnums` follows Python
indexing; keyword arguments pass through undifferentiated; first calls from many threads at
once all get the right gradient."""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from threads import HANG_GUARD, all_at_once

import cfgrad as cg
import cfgrad.numpy as cnp

pytestmark = pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")

with warnings.catch_warnings():  # np.matrix is pending deprecation, and still in use
    warnings.simplefilter("ignore", PendingDeprecationWarning)
    MATRIX = np.matrix([[1.0, 2.0]])


def square_sum(x):
    return cnp.sum(x * x)


# ---------------------------------------------------------------------------------
# Arguments that cannot be traced: ArgumentTypeError naming the argument
# ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("arg", "parts"), [
    pytest.param(MATRIX, ["np.matrix", "np.asarray"], id="matrix"),
    pytest.param(np.ma.masked_array([1.0, 2.0], mask=[0, 1]), ["masked"], id="masked"),
    pytest.param(np.array([1.0], dtype=object), ["dtype object"], id="object"),
    pytest.param(np.zeros(2, dtype=[("a", "f8")]), ["dtype [('a', '<f8')]"], id="structured"),
    pytest.param(np.array(["ab"]), ["dtype <U2"], id="unicode"),
    pytest.param(np.array([b"ab"]), ["dtype |S2"], id="bytes"),
    pytest.param(np.array(["2020-01-01"], dtype="datetime64[D]"), ["datetime64[D]"],
                 id="datetime"),
    pytest.param(np.array([1], dtype="timedelta64[s]"), ["timedelta64[s]"], id="timedelta"),
    pytest.param("abc", ["a str"], id="str"),
    pytest.param(np.longdouble(2.0), ["float128", "at most 64 bits"], id="longdouble"),
    pytest.param(10**23, ["beyond int64"], id="huge-int"),
    pytest.param(2**63, ["beyond int64"], id="int64-max-plus-one"),
    pytest.param(-(2**63) - 1, ["beyond int64"], id="huge-negative-int"),
])
@pytest.mark.parametrize("transform", [
    pytest.param(lambda f, a: cg.grad(f)(a, 2.0), id="grad"),
    pytest.param(lambda f, a: cg.grad(f, argnums=1)(a, 2.0), id="grad-other-arg"),
    pytest.param(lambda f, a: cg.vjp(f, a, 2.0), id="vjp"),
    pytest.param(lambda f, a: cg.jvp(f, (a, 2.0), (a, 1.0)), id="jvp"),
    pytest.param(lambda f, a: cg.lower(f, a, 2.0), id="lower"),
])
def test_untraceable_argument_is_an_argument_type_error(arg: Any, parts: list[str],
                                                        transform: Callable) -> None:
    def weighted(values, weight):
        return weight * weight

    with pytest.raises(cg.ArgumentTypeError) as info:
        transform(weighted, arg)
    message = str(info.value)
    assert "weighted: argument `values`" in message
    for part in parts:
        assert part in message, message


def test_bad_leaf_never_reuses_the_program_of_a_good_one() -> None:
    """The check runs on every call, not only when tracing: an np.matrix of a cached
    signature's shape and dtype must not run with matrix semantics."""
    g = cg.grad(square_sum)
    np.testing.assert_array_equal(g(np.array([[1.0, 2.0]])), [[2.0, 4.0]])
    with pytest.raises(cg.ArgumentTypeError, match="np.matrix"):
        g(MATRIX)


def test_a_bad_leaf_inside_a_pytree_is_named_by_position() -> None:
    with pytest.raises(cg.ArgumentTypeError, match=r"argument `params` \(leaf 1\)"):
        cg.grad(lambda params: params[0] * 2.0)((1.0, np.array(["a"])))


def test_complex_gradient_is_never_silently_zero() -> None:
    """grad of a real loss of a complex input returned zeros, then was refused; now it is
    JAX's value, conj(z)/|z| (tests/primitives/test_complex.py checks the convention)."""
    np.testing.assert_allclose(cg.grad(lambda z: cnp.sum(cnp.abs(z)))(np.array([3 + 4j])),
                               [0.6 - 0.8j], rtol=1e-15)


@pytest.mark.parametrize(("fun", "parts"), [
    pytest.param(lambda x: cnp.astype(x, np.longdouble), ["astype", "float128"],
                 id="astype-longdouble"),
    pytest.param(lambda x: cg.fori_loop(0, 2, lambda i, c: (c[0], c[1] * x), (2**70, x))[1],
                 ["Python int 1180591620717411303424", "beyond int64"], id="huge-int-carry"),
    pytest.param(lambda x: x * np.array(["a"]), ["mul", "of dtype <U"], id="string-constant"),
])
def test_unsupported_values_made_inside_are_lowering_errors(
        fun: Callable, parts: list[str]) -> None:
    """Not only arguments: a value of a dtype cfgrad cannot trace, made while tracing."""
    for transform in (lambda: cg.grad(fun)(0.5), lambda: cg.jvp(fun, (0.5,), (1.0,)),
                      lambda: cg.vjp(fun, 0.5)):
        with pytest.raises(cg.LoweringError) as info:
            transform()
        for part in parts:
            assert part in str(info.value), str(info.value)


# ---------------------------------------------------------------------------------
# Outputs: grad differentiates one scalar, as in JAX
# ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("fun", "shown"), [
    pytest.param(lambda x: (x * x, x), "(*, *)", id="tuple"),
    pytest.param(lambda x: (x * x,), "(*,)", id="one-tuple"),
    pytest.param(lambda x: [x * x], "[*]", id="list"),
    pytest.param(lambda x: {"loss": x * x}, "{'loss': *}", id="dict"),
])
def test_grad_of_a_container_output_is_a_type_error(fun: Callable, shown: str) -> None:
    for transform in (cg.grad, cg.value_and_grad):
        with pytest.raises(TypeError) as info:
            transform(fun)(2.0)
        assert isinstance(info.value, cg.CfgradError)
        assert "only defined for a scalar output" in str(info.value)
        assert shown in str(info.value)


def test_has_aux_value_must_be_a_scalar_too() -> None:
    with pytest.raises(TypeError, match=r"returns \(\*, \*\)"):
        cg.grad(lambda x: ((x, x), 1.0), has_aux=True)(2.0)
    with pytest.raises(cg.ArgumentTypeError, match=r"output leaf 1 of \(\*, \*\) is a str"):
        cg.grad(lambda x: (x * x, "aux"), has_aux=True)(2.0)
    assert cg.grad(lambda x: (x * x, {"y": x}), has_aux=True)(3.0) == (6.0, {"y": 3.0})


@pytest.mark.parametrize("fun", [lambda x: (x, x, x), lambda x: [x, x], lambda x: x,
                                 lambda x: {"value": x, "aux": x}],
                         ids=["triple", "list", "scalar", "dict"])
def test_vjp_has_aux_needs_a_pair(fun: Callable) -> None:
    with pytest.raises(cg.ArgumentTypeError, match="must return a pair"):
        cg.vjp(fun, 2.0, has_aux=True)


# ---------------------------------------------------------------------------------
# argnums: Python indexing
# ---------------------------------------------------------------------------------


def product(x, y, z):
    return x * y * y * z


@pytest.mark.parametrize(("argnums", "expected"), [
    (-1, 2.0 * 9.0),            # d/dz = x y^2
    (-3, 9.0 * 5.0),            # d/dx = y^2 z
    ((0, -2), (45.0, 60.0)),     # d/dy = 2 x y z
    ((-1, 2), (18.0, 18.0)),
])
def test_negative_argnums_count_from_the_end(argnums: Any, expected: Any) -> None:
    assert cg.grad(product, argnums)(2.0, 3.0, 5.0) == expected
    value, g = cg.value_and_grad(product, argnums)(2.0, 3.0, 5.0)
    assert (value, g) == (90.0, expected)


@pytest.mark.parametrize("argnums", [3, -4, (0, 3), (-4,)])
def test_argnums_out_of_range_is_a_value_error(argnums: Any) -> None:
    with pytest.raises(ValueError, match="argnums includes") as info:
        cg.grad(product, argnums)(2.0, 3.0, 5.0)
    assert isinstance(info.value, cg.CfgradError)
    assert "3 positional arguments" in str(info.value)


@pytest.mark.parametrize("argnums", [1.0, "0", True, (0, 1.0), None, [0.5]])
def test_non_integer_argnums_is_a_type_error(argnums: Any) -> None:
    for transform in (cg.grad, cg.value_and_grad):
        with pytest.raises(TypeError, match="argnums must be an int or a sequence of ints"):
            transform(product, argnums)


def test_numpy_integer_argnums_work() -> None:
    assert cg.grad(product, np.int64(-1))(2.0, 3.0, 5.0) == 18.0


# ---------------------------------------------------------------------------------
# Keyword arguments pass through, undifferentiated
# ---------------------------------------------------------------------------------


def scaled_loss(x, *, scale=1.0, offset=0.0):
    return cnp.sum((x * scale + offset) ** 2)


def test_keyword_arguments_pass_through_undifferentiated() -> None:
    x = np.array([1.0, 2.0])
    # d/dx sum((s x + o)^2) = 2 s (s x + o)
    np.testing.assert_allclose(cg.grad(scaled_loss)(x, scale=3.0, offset=1.0),
                               2 * 3.0 * (3.0 * x + 1.0))
    value, g = cg.value_and_grad(scaled_loss)(x, offset=2.0)
    assert value == 9.0 + 16.0
    np.testing.assert_allclose(g, 2 * (x + 2.0))
    # keyword values are traced, not baked in: a new value gives a new answer
    np.testing.assert_allclose(cg.grad(scaled_loss)(x, scale=2.0), 2 * 2.0 * 2.0 * x)
    np.testing.assert_allclose(cg.grad(scaled_loss)(x, scale=np.float64(5.0)), 50.0 * x)


def test_keyword_array_arguments_and_bad_keyword_leaves() -> None:
    def f(x, *, w):
        return cnp.sum(x * w)

    np.testing.assert_allclose(cg.grad(f)(np.ones(2), w=np.array([3.0, 4.0])), [3.0, 4.0])
    with pytest.raises(cg.ArgumentTypeError, match="f: argument `w`"):
        cg.grad(f)(np.ones(2), w=np.array(["a", "b"]))


# ---------------------------------------------------------------------------------
# Nested differentiation: transformations inside traced functions compose
# ---------------------------------------------------------------------------------


@pytest.mark.parametrize("fun, derivative", [
    pytest.param(lambda x: cg.grad(lambda y: y * y * x)(x), 8.0, id="grad-of-grad"),
    pytest.param(lambda x: cg.grad(lambda y: y * x)(1.0), 1.0, id="closure"),
    pytest.param(lambda x: cg.vjp(lambda y: y * x, 1.0)[0], 1.0, id="vjp-inside"),
    pytest.param(lambda x: cg.jvp(lambda y: y * x, (1.0,), (1.0,))[1], 1.0, id="jvp-inside"),
    pytest.param(lambda x: cg.vjp(lambda y: y * 3.0, 1.0)[1](x)[0], 3.0,
                 id="traced-cotangent"),
    pytest.param(lambda x: cg.jvp(lambda y: y * 3.0, (1.0,), (x,))[1], 3.0,
                 id="traced-tangent"),
    pytest.param(lambda x: cg.while_loop(lambda c: c < 3.0,
                                         lambda c: c + cg.grad(lambda y: y * y)(c), x),
                 3.0, id="grad-in-a-loop-body"),
])
def test_nested_differentiation_at_x_2(fun: Callable, derivative: float) -> None:
    """What used to be refused as nested differentiation now differentiates, in both
    modes, to the closed form's derivative at x = 2."""
    assert cg.grad(fun)(2.0) == pytest.approx(derivative, rel=1e-12)
    assert cg.jvp(fun, (2.0,), (1.0,))[1] == pytest.approx(derivative, rel=1e-12)


def test_an_eager_pullback_refuses_a_traced_cotangent() -> None:
    """A pullback made outside the traced function runs on numpy: a traced cotangent is
    a clear error naming the fix, not a wrong number."""
    _, pullback = cg.vjp(lambda y: y * 3.0, 1.0)
    with pytest.raises(cg.LoweringError, match="call cg.vjp inside the traced function"):
        cg.grad(lambda x: pullback(x)[0])(2.0)


def test_a_transformation_of_constants_inside_a_traced_function_works() -> None:
    """Only traced values crossing into an inner transformation are refused."""
    inner = cg.grad(lambda y: y * y * y)  # 3 y^2 = 12 at y = 2
    assert cg.grad(lambda x: x * inner(2.0))(5.0) == 12.0


# ---------------------------------------------------------------------------------
# Threads
# ---------------------------------------------------------------------------------


def test_first_calls_from_many_threads_all_get_the_right_gradient() -> None:
    """Each thread's first call traces while the others trace: with one trace stack for the
    process they took each other's traces (195 of 200 raised LoweringError)."""

    def slow_to_trace(x):
        time.sleep(0.002)  # the threads' first calls all arrive while one is tracing
        y = cg.cond(x > 0, lambda: cnp.sin(x) * x, lambda: x)
        return cg.while_loop(lambda c: c[0] < 4, lambda c: (c[0] + 1, c[1] * x), (0, y))[1]

    expected = cg.grad(lambda x: slow_to_trace(x))(0.7)
    g = cg.grad(slow_to_trace)
    results: list[Any] = []

    def call(_: int) -> None:
        for _ in range(25):
            try:
                results.append(g(0.7))
            except Exception as e:  # noqa: BLE001 - collected and reported below
                results.append(e)

    all_at_once(call)
    assert len(results) == 200
    assert all(r == expected for r in results), [r for r in results if r != expected][:3]


def test_a_huge_int_is_refused_after_a_small_one_was_cached() -> None:
    g = cg.grad(lambda x, n: x * n)
    assert g(1.0, 3) == 3.0
    assert g(1.0, 2**63 - 1) == float(2**63 - 1)
    with pytest.raises(cg.ArgumentTypeError, match="beyond int64"):
        g(1.0, 2**70)


def test_eager_control_flow_in_one_thread_while_another_traces() -> None:
    """cg.while_loop outside any transformation is plain Python; with one trace stack for
    the process it would be lowered into the trace another thread was building."""
    tracing_started, eager_done = threading.Event(), threading.Event()

    def slow(x):
        tracing_started.set()
        eager_done.wait(HANG_GUARD)  # the eager loop runs while this is being traced
        return cg.while_loop(lambda c: c < 3.0, lambda c: c + x, x)

    grads: list[Any] = []
    tracer_thread = threading.Thread(target=lambda: grads.append(cg.grad(slow)(1.0)))
    tracer_thread.start()
    assert tracing_started.wait(HANG_GUARD)
    try:
        eager = cg.while_loop(lambda c: c < 10, lambda c: c + 4, 1)
        branch = cg.cond(True, lambda: "taken", lambda: "not taken")
    finally:
        eager_done.set()
        tracer_thread.join()
    assert (eager, branch) == (13, "taken")
    assert grads == [3.0]  # x -> 2x -> 3x: three times x


def test_custom_rules_hold_while_other_threads_lower() -> None:
    """A thread tracing a custom_vjp's rule marks the function as "inside its own rule";
    another thread tracing a call of it meanwhile must still use the rule (the flag is
    only set under the lowering lock)."""

    @cg.custom_vjp
    def scaled_sin(x):
        return cnp.sin(x)

    def slow_forward(x):
        time.sleep(0.001)  # a wide window while the rule is being traced
        return cnp.sin(x), x

    scaled_sin.defvjp(slow_forward, lambda x, ct: (100.0 * ct,))
    results: list[Any] = []

    def worker(i: int) -> None:
        for j in range(10):
            if i % 2:  # a new shape each time: the rule is traced again
                cg.lower(lambda x: cnp.sum(scaled_sin(x)), np.ones(10 * i + j + 1))
            else:
                results.append(cg.grad(lambda x, j=j: scaled_sin(x) * 1.0)(0.5))

    all_at_once(worker)
    assert results == [100.0] * 40


def test_an_escaped_tracer_passed_to_a_transformation_is_named() -> None:
    """A tracer kept from a finished trace and passed to grad, jvp or vjp later."""
    kept = []

    def f(x):
        kept.append(x)
        return x * x

    cg.grad(f)(1.0)
    for call in (lambda: cg.grad(lambda y: y * y)(kept[0]),
                 lambda: cg.jvp(lambda y: y * y, (kept[0],), (1.0,)),
                 lambda: cg.vjp(lambda y: y, kept[0])):
        with pytest.raises(cg.LoweringError, match="from a finished trace"):
            call()
