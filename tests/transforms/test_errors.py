"""The errors of the core (docs/api.md, "Errors"): each situation raises its error type, and
the message names what the user needs to fix it (the construct, both signatures, the
offending shape/dtype, the source line).

Source lines are found by a `# <-` marker comment on the offending line, so editing this
file does not break the line-number checks.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import cfgrad as cg
import cfgrad.numpy as cnp

FILE = os.path.basename(__file__)


def marked_line(fn: Callable) -> str:
    """`test_errors.py:<line>` of the line marked `# <-` in `fn`'s source."""
    lines, start = inspect.getsourcelines(fn)
    (offset,) = [i for i, text in enumerate(lines) if text.rstrip().endswith("# <-")]
    return f"{FILE}:{start + offset}"


def raised(exc_type: type[BaseException], thunk: Callable[[], Any]) -> str:
    with pytest.raises(exc_type) as info:
        thunk()
    return str(info.value)


# ---------------------------------------------------------------------------------
# Python control flow on traced values: TracerBoolError
# ---------------------------------------------------------------------------------


def python_if(x):
    if x > 0:  # <-
        return x
    return -x


def python_while(x):
    while x < 3.0:  # <-
        x = x * 2.0
    return x


def python_bool(x):
    return 1.0 if bool(x) else x  # <-


def python_and(x):
    return (x > 0) and x  # <-


def python_int(x):
    return x * int(x)  # <-


def python_float(x):
    return x * float(x)  # <-


def python_range(x, n):
    for _ in range(n):  # <-
        x = x * 2.0
    return x


def if_inside_a_loop_body(x):
    def body(i, c):
        if c > 1.0:  # <-
            return c
        return c * x

    return cg.fori_loop(0, 3, body, x)


def if_inside_a_branch(x):
    def positive():
        if x > 1.0:  # <-
            return x
        return x * x

    return cg.cond(x > 0, positive, lambda: -x)


@pytest.mark.parametrize(("fun", "args", "suggests"), [
    (python_if, (1.0,), "cg.cond"),
    (python_while, (1.0,), "cg.while_loop"),
    (python_bool, (1.0,), "cg.cond"),
    (python_and, (1.0,), "cg.cond"),
    (python_int, (1.0,), "cg.cond"),
    (python_float, (1.0,), "cg.cond"),
    (python_range, (1.0, 3), "cg.fori_loop"),
    (if_inside_a_loop_body, (1.0,), "cg.cond"),
    (if_inside_a_branch, (1.0,), "cg.cond"),
])
def test_python_control_flow_on_a_tracer(fun: Callable, args: tuple, suggests: str) -> None:
    """Traced as written (`autograph=False`), Python control flow on a traced value is a
    TracerBoolError naming the line and the explicit form to use instead (converted, the
    default, `if`/`while`/`for` work: tests/convert/test_autograph*.py)."""
    for transform in (lambda: cg.grad(fun, autograph=False)(*args),
                      lambda: cg.lower(fun, *args, autograph=False)):
        message = raised(cg.TracerBoolError, transform)
        assert suggests in message
        assert marked_line(fun) in message
    assert issubclass(cg.TracerBoolError, TypeError)


def test_numpy_functions_on_a_tracer() -> None:
    """np.sin dispatches to cfgrad.numpy; a numpy function without a counterpart fails
    with a message pointing there, and converting a tracer to an array is refused."""
    assert cg.grad(lambda x: np.sin(x) * np.exp(x))(0.5) == pytest.approx(
        np.exp(0.5) * (np.cos(0.5) + np.sin(0.5)), rel=1e-15)
    np.testing.assert_array_equal(cg.grad(lambda x: np.sum(x * x))(np.array([1.0, 2.0])),
                                  [2.0, 4.0])
    message = raised(TypeError, lambda: cg.grad(lambda m: np.sum(np.packbits(m)))(np.eye(2)))
    assert "cfgrad.numpy" in message and "packbits" in message

    def to_array(x):
        return np.asarray(x) * x  # <-

    message = raised(cg.TracerBoolError, lambda: cg.grad(to_array)(1.0))
    assert "np.asarray" in message and marked_line(to_array) in message


def test_numpy_array_indexed_with_a_traced_integer() -> None:
    """`X[i]` with X a plain numpy array and i a loop index: numpy tries to convert i; the
    message shows the spelling that works, which gives the right gradient."""
    table = np.arange(5.0)

    def gather(x):
        return cg.fori_loop(0, 3, lambda i, c: c + table[i] * x, x)  # <-

    message = raised(cg.TracerBoolError, lambda: cg.grad(gather)(1.0))
    assert "cnp.asarray(array)[i]" in message and marked_line(gather) in message

    def fixed(x):
        return cg.fori_loop(0, 3, lambda i, c: c + cnp.asarray(table)[i] * x, x)

    assert cg.grad(fixed)(1.0) == 1.0 + 0.0 + 1.0 + 2.0


# ---------------------------------------------------------------------------------
# Lowering: LoweringError
# ---------------------------------------------------------------------------------


def branches_differ_in_structure(x):
    return cg.cond(x > 0, lambda: (x, x), lambda: x)  # <-


def branches_differ_in_dict_keys(x):
    return cg.cond(x > 0, lambda: {"a": x}, lambda: {"b": x})  # <-


def branches_differ_in_shape(x):
    return cg.cond(x[0] > 0, lambda: x, lambda: x[:2])  # <-


def branches_differ_in_dtype(x):
    return cg.cond(x > 0, lambda: x, lambda: cnp.astype(x, cnp.float32))  # <-


def switch_branches_differ_in_shape(i, x):
    return cg.switch(i, [lambda: x, lambda: x, lambda: cnp.sum(x)])  # <-


@pytest.mark.parametrize(("fun", "args", "parts"), [
    (branches_differ_in_structure, (1.0,), ["different structures", "(*, *)", "case F"]),
    (branches_differ_in_dict_keys, (1.0,), ["'a'", "'b'"]),
    (branches_differ_in_shape, (np.ones(3),), ["f64[3]", "f64[2]"]),
    (branches_differ_in_dtype, (1.0,), ["f64[]", "f32[]"]),
    (switch_branches_differ_in_shape, (1, np.ones(3)), ["case 0", "f64[3]", "case 2", "f64[]"]),
])
def test_branches_that_disagree(fun: Callable, args: tuple, parts: list[str]) -> None:
    message = raised(cg.LoweringError, lambda: cg.lower(fun, *args))
    for part in parts:
        assert part in message
    assert marked_line(fun) in message


def body_changes_carry_structure(x):
    return cg.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1,), (0, x))  # <-


def body_changes_carry_shape(x):
    return cg.fori_loop(0, 3, lambda i, c: cnp.sum(c), x)  # <-


def body_changes_carry_dtype(x):
    return cg.fori_loop(0, 3, lambda i, c: c * x, np.float32(1.0))  # <-


def body_changes_int_carry_to_float(x):
    return cg.while_loop(lambda c: c < 3, lambda c: c + 0.5, 0)  # <-


@pytest.mark.parametrize(("fun", "args", "before", "after"), [
    (body_changes_carry_structure, (1.0,), "(*, *)", "(*,)"),
    (body_changes_carry_shape, (np.ones(3),), "f64[3]", "f64[]"),
    (body_changes_carry_dtype, (1.0,), "f32[]", "f64[]"),
    (body_changes_int_carry_to_float, (1.0,), "i64[]", "f64[]"),
])
def test_loop_body_that_changes_the_carry(fun: Callable, args: tuple, before: str,
                                          after: str) -> None:
    message = raised(cg.LoweringError, lambda: cg.lower(fun, *args))
    assert "before" in message and "after" in message
    assert message.index(before) < message.index(after)
    assert marked_line(fun) in message


def cond_on_a_float(x):
    return cg.cond(x, lambda: x, lambda: -x)  # <-


def cond_on_an_array(x):
    return cg.cond(x > 0, lambda: x, lambda: -x)  # <-


def while_on_an_array(x):
    return cg.while_loop(lambda c: c > 0, lambda c: c - 1.0, x)  # <-


def while_on_a_float(x):
    return cg.while_loop(lambda c: c, lambda c: c - 1.0, x)  # <-


def switch_on_a_float(x):
    return cg.switch(x, [lambda: x, lambda: -x])  # <-


def switch_on_an_array(i, x):
    return cg.switch(i, [lambda: x, lambda: -x])  # <-


def fori_with_float_bounds(x):
    return cg.fori_loop(0.0, 3.0, lambda i, c: c * x, x)  # <-


def fori_with_a_traced_float_bound(x):
    return cg.fori_loop(0, x, lambda i, c: c * x, x)  # <-


@pytest.mark.parametrize(("fun", "args", "parts"), [
    (cond_on_a_float, (1.0,), ["scalar boolean", "f64[]"]),
    (cond_on_an_array, (np.ones(3),), ["scalar boolean", "bool[3]"]),
    (while_on_an_array, (np.ones(3),), ["while_loop", "scalar boolean", "bool[3]"]),
    (while_on_a_float, (1.0,), ["while_loop", "scalar boolean", "f64[]"]),
    (switch_on_a_float, (1.0,), ["switch index", "integer scalar", "f64[]"]),
    (switch_on_an_array, (np.array([0, 1]), 1.0), ["switch index", "integer scalar", "i64[2]"]),
    (fori_with_float_bounds, (1.0,), ["fori_loop", "lower bound", "integer", "f64[]"]),
    (fori_with_a_traced_float_bound, (1.0,), ["fori_loop", "upper bound", "integer", "f64[]"]),
])
def test_bad_predicates_indices_and_bounds(fun: Callable, args: tuple,
                                           parts: list[str]) -> None:
    message = raised(cg.LoweringError, lambda: cg.lower(fun, *args))
    for part in parts:
        assert part in message
    assert marked_line(fun) in message


def escapes_a_branch(x):
    leaked = []
    cg.cond(x > 0, lambda: leaked.append(x * 2.0) or x, lambda: x)
    return leaked[0] + x  # <-


def escapes_a_loop(x):
    leaked = []

    def body(i, c):
        leaked.append(c * 2.0)
        return c

    cg.fori_loop(0, 3, body, x)
    return leaked[0] * x  # <-


@pytest.mark.parametrize(("fun", "scope"), [
    (escapes_a_branch, "if#0"), (escapes_a_loop, "loop#0")])
def test_value_escaping_its_scope(fun: Callable, scope: str) -> None:
    message = raised(cg.LoweringError, lambda: cg.lower(fun, 1.0))
    assert scope in message and "outside" in message
    assert marked_line(fun) in message


# ---------------------------------------------------------------------------------
# grad's contract: TypeError
# ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("fun", "args", "argnums", "parts"), [
    (lambda x: x * 2.0, (np.ones(3),), 0, ["float scalar", "f64[3]"]),
    (lambda x: cnp.astype(x, cnp.int64), (1.5,), 0, ["float scalar", "i64[]"]),
    (lambda x: x > 0, (1.5,), 0, ["float scalar", "bool[]"]),
    (lambda x, n: x * n, (1.5, 3), 1, ["argument 1", "int64", "()"]),
    (lambda x, n: x * cnp.sum(n), (1.5, np.arange(3)), (0, 1), ["argument 1", "int64", "(3,)"]),
])
def test_grad_needs_float_scalar_output_and_float_inputs(fun: Callable, args: tuple,
                                                         argnums: Any,
                                                         parts: list[str]) -> None:
    message = raised(TypeError, lambda: cg.grad(fun, argnums)(*args))
    for part in parts:
        assert part in message


def test_pullback_rejects_a_cotangent_of_the_wrong_shape() -> None:
    _, pullback = cg.vjp(lambda x: (x * 2.0, cnp.sum(x)), np.ones(3))
    assert "structure" in raised(TypeError, lambda: pullback(np.ones(3)))
    message = raised(TypeError, lambda: pullback((np.ones(2), 1.0)))
    assert "(2,)" in message and "(3,)" in message


# ---------------------------------------------------------------------------------
# Loop limits: LoopLimitError, ValueError
# ---------------------------------------------------------------------------------


def runaway(x):
    return cg.while_loop(lambda c: c < 100.0, lambda c: c + 1.0, x, max_iters=5)  # <-


def runaway_inner(x):
    def outer(i, c):
        return cg.while_loop(lambda d: d < 3.0 * i, lambda d: d + 1.0, c, max_iters=2)  # <-

    return cg.fori_loop(0, 3, outer, x)


def test_loop_limit_names_the_loop_and_its_line() -> None:
    for transform in (lambda: cg.grad(runaway)(1.0), lambda: cg.vjp(runaway, 1.0),
                      lambda: cg.jvp(runaway, (1.0,), (1.0,))):
        message = raised(cg.LoopLimitError, transform)
        assert "loop#0" in message and "max_iters=5" in message
        assert marked_line(runaway) in message
    message = raised(cg.LoopLimitError, lambda: cg.grad(runaway_inner)(0.0))
    assert "loop#1" in message and "max_iters=2" in message
    assert marked_line(runaway_inner) in message
    # outside any transformation the loop runs eagerly and is bounded all the same
    assert marked_line(runaway) in raised(cg.LoopLimitError, lambda: runaway(1.0))


def test_loop_limit_is_inclusive() -> None:
    """Exactly max_iters iterations are allowed; one more is an error."""

    def f(x, limit):
        return cg.while_loop(lambda c: c < 5.0, lambda c: c + 1.0, x, max_iters=limit)

    assert cg.grad(lambda x: f(x, 5))(0.0) == 1.0
    with pytest.raises(cg.LoopLimitError):
        cg.grad(lambda x: f(x, 4))(0.0)


@pytest.mark.parametrize("bad", [-1, 2.5, "3"])
def test_bad_max_iters(bad: Any) -> None:
    message = raised(ValueError, lambda: cg.lower(
        lambda x: cg.while_loop(lambda c: c < 1.0, lambda c: c + 1.0, x, max_iters=bad), 0.0))
    assert "max_iters" in message and repr(bad) in message


# ---------------------------------------------------------------------------------
# One base class
# ---------------------------------------------------------------------------------


def test_error_classes_derive_from_cfgrad_error() -> None:
    for cls in (cg.TracerBoolError, cg.LoweringError, cg.VerifyError, cg.LoopLimitError,
                cg.ReplayMismatchError, cg.AnomalyError, cg.PathInstabilityError):
        assert issubclass(cls, cg.CfgradError)


@pytest.mark.parametrize("thunk", [
    pytest.param(lambda: cg.grad(lambda x: x * 2.0)(np.ones(3)), id="grad-of-vector"),
    pytest.param(lambda: cg.grad(lambda x: cnp.astype(x, cnp.int64))(1.5), id="grad-of-int"),
    pytest.param(lambda: cg.grad(lambda x, n: x * n, 1)(1.5, 3), id="grad-wrt-int"),
    pytest.param(lambda: cg.lower(lambda x: cg.while_loop(
        lambda c: c < 1.0, lambda c: c + 1.0, x, max_iters=-1), 0.0), id="bad-max-iters"),
    pytest.param(lambda: cg.grad(lambda m: np.sum(np.packbits(m)))(np.eye(2)),
                 id="np-packbits"),
    pytest.param(lambda: cg.vjp(lambda x: x * 2.0, np.ones(3))[1](np.ones(2)),
                 id="cotangent-shape"),
    pytest.param(lambda: cg.lower(branches_differ_in_shape, np.ones(3)), id="lowering"),
    pytest.param(lambda: cg.grad(runaway)(1.0), id="loop-limit"),
    pytest.param(lambda: cg.grad(python_if, autograph=False)(1.0), id="tracer-bool"),
])
def test_every_error_is_a_cfgrad_error(thunk: Callable[[], Any]) -> None:
    """docs/api.md, "Errors": all errors derive from cg.CfgradError, besides the builtin base (so
    `except cg.CfgradError` catches every misuse of cfgrad)."""
    with pytest.raises(Exception) as info:
        thunk()
    assert isinstance(info.value, cg.CfgradError), type(info.value).__mro__


@pytest.mark.parametrize("case", [
    ("cfgrad.grad", lambda: cg.grad(3.0)),
    ("cfgrad.value_and_grad", lambda: cg.value_and_grad(3.0)),
    ("cfgrad.vjp", lambda: cg.vjp(3.0, 1.0)),
    ("cfgrad.jvp", lambda: cg.jvp(3.0, (1.0,), (1.0,))),
    ("cfgrad.jit", lambda: cg.jit(3.0)),
    ("cfgrad.lower", lambda: cg.lower(3.0, 1.0)),
    ("cfgrad.jacrev", lambda: cg.jacrev(None)),
    ("cfgrad.jacfwd", lambda: cg.jacfwd(None)),
    ("cfgrad.hessian", lambda: cg.hessian(None)),
    ("cond", lambda: cg.grad(lambda x: cg.cond(x > 0, None, lambda: x))(1.0)),
    ("switch", lambda: cg.switch(0, [lambda: 1.0, 2.0])),
    ("while_loop", lambda: cg.while_loop(1, lambda c: c, 1.0)),
    ("while_loop", lambda: cg.grad(lambda x: cg.while_loop(lambda c: c < 1, 2, x))(1.0)),
    ("fori_loop", lambda: cg.grad(lambda x: cg.fori_loop(0, 3, None, x))(1.0)),
    ("scan", lambda: cg.scan(None, 0.0, np.ones(3))),
    ("custom_vjp", lambda: cg.custom_vjp(3.0)),
    ("custom_jvp", lambda: cg.custom_jvp(3.0)),
    ("debug.callback", lambda: cg.debug.callback(3.0, 1.0)),
    ("tree_map", lambda: cg.tree_util.tree_map(3, [1.0])),
], ids=lambda c: c[0])
def test_a_function_argument_that_is_not_callable_is_named_where_it_is_passed(case):
    """(Python's "'float' object is not callable" came from inside the first call.)"""
    caller, call = case
    with pytest.raises(cg.ArgumentTypeError, match=f"^{caller}: .* must be a function"):
        call()


def test_a_python_int_out_of_bounds_for_the_dtype_it_meets_says_so():
    """`x // -1` with a uint8 x: numpy refuses -1 for uint8 (OverflowError); the message
    said '-1 is beyond int64'."""
    with pytest.raises(cg.LoweringError, match="-1 .* out of bounds for the uint8"):
        cg.jit(lambda x: x // -1)(np.uint8(5))
