"""Reliability of the source conversion where Python's exceptions meet traced values.

Regressions of four defects (cfgrad/convert): a broad `except` that caught cfgrad's own
refusal and had its handler traced instead (a wrong value and gradient), a `raise` under a
traced condition that fired while tracing (no gradient even where Python raises nothing),
`range` with a traced step of zero that ran no iteration (Python raises), and a recursion
that ends on a traced condition, which hit Python's RecursionError; and of two a review
found after: a `TracerBoolError` (code cfgrad could not trace) caught by an `except` of
converted code, its handler traced in its place, and traced control flow reached through
a call in a `try` body, whose run-time check escaped the handler. Expected values come
from plain Python on the same inputs, closed forms or finite differences, never from
numbers cfgrad printed. The functions live in this file: conversion reads source.
"""

import inspect
import math
import warnings

import pytest

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad.convert import converted_source


def _line(fn, text):
    """The file line of the first line of `fn`'s source containing `text`."""
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def _raises(error, message, thunk):
    """That `thunk()` raises exactly `error(message)` (its type and its only argument)."""
    with pytest.raises(error) as info:
        thunk()
    assert type(info.value) is error and info.value.args == (message,)
    return info.value


def _fd(f, x, *rest, h=1e-6):
    """Central finite differences of `f` run as plain Python on concrete floats."""
    return (f(x + h, *rest) - f(x - h, *rest)) / (2 * h)


# -------------------------------------------------------------------------------------
# 2. an `except` of converted code never catches cfgrad's refusal
# -------------------------------------------------------------------------------------


def if_in_broad_try(x):
    try:
        if x > 1:
            y = x * x
        else:
            y = x
    except Exception:
        y = 0 * x
    return y


def while_in_bare_try(x):
    try:
        while x < 10:
            x = x * 2
    except:  # noqa: E722  (the broadest handler there is)
        x = 0.0 * x
    return x


def if_in_try_star(x):
    try:
        if x > 1:
            y = x * x
        else:
            y = x
    except* Exception:
        y = 0 * x
    return y


def mismatched_branches(x):
    if x > 0:
        y = x
    else:
        y = "negative"
    return y


def helper_in_try(x):
    try:
        y = mismatched_branches(x)
    except cg.LoweringError:
        y = 0 * x
    return y


def lookup_in_try(x, table):
    try:
        scale = table["scale"]
    except KeyError:
        scale = 3.0
    return scale * x


def concrete_if_in_try(x, n):
    try:
        if n > 1:
            y = x * x
        else:
            raise ValueError("small n")
    except ValueError:
        y = 5.0 * x
    return y


@pytest.mark.parametrize(("fn", "statement"), [
    (if_in_broad_try, "if x > 1"), (while_in_bare_try, "while x < 10")])
def test_a_broad_except_lets_the_refusal_of_traced_control_flow_pass(fn, statement):
    assert fn(2.0) in (4.0, 16.0)  # plain Python computes, and never runs the handler
    with pytest.raises(cg.ConversionError) as info:
        cg.value_and_grad(fn)(2.0)
    message = str(info.value)
    assert f":{_line(fn, statement)} depends on a traced value" in message
    assert f"inside the `try` at test_autograph_exceptions.py:{_line(fn, 'try:')}" in message
    assert "move the control flow out of the `try`" in message


def test_except_star_lets_the_refusal_pass_in_its_group():
    with pytest.raises(ExceptionGroup) as info:
        cg.value_and_grad(if_in_try_star)(2.0)
    assert info.value.subgroup(cg.ConversionError) is not None


def test_a_refusal_in_a_called_function_passes_the_callers_except():
    # (the traced `if` it reaches is refused as such, before its branches are compared)
    with pytest.raises(cg.ConversionError, match="traced value inside the `try`"):
        cg.value_and_grad(helper_in_try)(2.0)


def test_user_exceptions_while_tracing_are_still_caught():
    assert cg.value_and_grad(lookup_in_try)(2.0, {}) == (6.0, 3.0)
    # a Python condition in a `try` is Python: its `raise` is caught by the handler
    small = cg.value_and_grad(concrete_if_in_try, static_argnums=1)
    assert small(2.0, 0) == (10.0, 5.0) and concrete_if_in_try(2.0, 0) == 10.0
    assert small(2.0, 3) == (4.0, 4.0)


def test_every_handler_first_lets_a_conversion_error_pass():
    assert "if cfg__ops.refused():\n            raise" in converted_source(if_in_broad_try)


# -------------------------------------------------------------------------------------
# 3. a `raise` under a traced condition is a run-time check
# -------------------------------------------------------------------------------------


def safe_sqrt(x):
    if x < 0:
        raise ValueError("negative input")
    return cnp.sqrt(x)


def log_or_raise(x):
    if x > 0:
        y = cnp.log(x)
    else:
        raise ValueError("x must be positive")
    return y * 2.0


def clipped_square(x):
    if x < 0:
        raise ValueError("negative")
    elif x > 10:
        raise OverflowError("too large")
    else:
        y = x * x
    return y


def returns_else_raises(x):
    if x >= 0:
        return cnp.sin(x) * x
    raise ArithmeticError("negative")


def tripling(x):
    while x < 100.0:
        if x < 0:
            raise ValueError("negative in the loop")
        x = x * 3.0
    return x


def partial_sums(x, n):
    total = 0
    for i in range(n):
        if x * i > 5:
            raise ValueError("partial sum too large")
        total = total + cnp.sin(x * i)
    return total


STRICT = True


def nested_checks(x, y):
    if x < 0:
        if STRICT:
            raise ValueError("strict: x < 0")
        raise KeyError("lenient")
    if x > 5:
        if y < 0:
            raise ValueError("x > 5 and y < 0")
        raise KeyError("x > 5")
    return x * y


def chained(x):
    if x < 0:
        raise ValueError("negative") from KeyError("the cause")
    return x * 2.0


def reraised(x, table):
    try:
        scale = table["scale"]
    except KeyError:
        if x < 0:
            raise
        scale = 2.0
    return scale * x


class NeedsKeyword(Exception):
    def __init__(self, message, *, code):
        super().__init__(message)
        self.code = code


def uncopyable(x):
    if x < 0:
        raise NeedsKeyword("negative", code=7)
    return x


def test_raise_under_a_traced_condition_is_checked_when_the_program_runs():
    assert cg.grad(safe_sqrt)(4.0) == 0.25
    _raises(ValueError, "negative input", lambda: cg.grad(safe_sqrt)(-1.0))
    _raises(ValueError, "negative input", lambda: cg.vjp(safe_sqrt, -1.0))
    _raises(ValueError, "negative input", lambda: safe_sqrt(-1.0))  # Python's, the same
    text = cg.lower(safe_sqrt, 4.0).text()
    assert f"callback(raise ValueError)}} ; test_autograph_exceptions.py:" \
           f"{_line(safe_sqrt, 'raise')}" in text


def test_raise_on_concrete_values_is_pythons_at_the_users_line():
    with pytest.raises(ValueError) as info:
        cg.autograph(safe_sqrt)(-1.0)
    assert info.traceback[-1].lineno + 1 == _line(safe_sqrt, "raise")


@pytest.mark.parametrize("fn", [log_or_raise, clipped_square, returns_else_raises])
def test_the_gradient_is_that_of_the_path_that_does_not_raise(fn):
    for x in (0.7, 2.5, 6.0):
        value, grad = cg.value_and_grad(fn)(x)
        assert math.isclose(value, fn(x), rel_tol=1e-12)
        assert math.isclose(grad, _fd(fn, x), rel_tol=1e-6)


@pytest.mark.parametrize(("fn", "x", "error", "message"), [
    (log_or_raise, -1.0, ValueError, "x must be positive"),
    (clipped_square, -1.0, ValueError, "negative"),
    (clipped_square, 11.0, OverflowError, "too large"),
    (returns_else_raises, -2.0, ArithmeticError, "negative"),
    (tripling, -1.0, ValueError, "negative in the loop")])
def test_the_branch_that_raises_raises_the_users_exception(fn, x, error, message):
    _raises(error, message, lambda: fn(x))
    _raises(error, message, lambda: cg.value_and_grad(fn)(x))


def test_raise_in_loop_bodies():
    assert cg.value_and_grad(tripling)(2.0) == (162.0, 81.0)
    value, grad = cg.value_and_grad(partial_sums)(1.0, 4)
    assert math.isclose(value, partial_sums(1.0, 4), rel_tol=1e-12)
    assert math.isclose(grad, _fd(partial_sums, 1.0, 4), rel_tol=1e-6)
    with pytest.raises(ValueError, match="partial sum too large"):
        partial_sums(3.0, 4)
    with pytest.raises(ValueError, match="partial sum too large"):
        cg.value_and_grad(partial_sums)(3.0, 4)


@pytest.mark.parametrize(("x", "y", "error", "message"), [
    (-1.0, 2.0, ValueError, "strict: x < 0"), (6.0, -1.0, ValueError, "x > 5 and y < 0"),
    (6.0, 1.0, KeyError, "x > 5")])
def test_raises_nested_in_a_raising_branch(x, y, error, message):
    with pytest.raises(error, match=message):
        nested_checks(x, y)
    with pytest.raises(error, match=message):
        cg.grad(nested_checks)(x, y)


def test_nested_checks_leave_the_other_path_alone():
    assert cg.grad(nested_checks)(2.0, 3.0) == 3.0


def test_raise_from_keeps_its_cause_and_bare_raise_reraises():
    with pytest.raises(ValueError) as info:
        cg.grad(chained)(-1.0)
    assert isinstance(info.value.__cause__, KeyError)
    assert info.value.__suppress_context__
    assert cg.grad(chained)(1.0) == 2.0
    assert cg.grad(reraised)(3.0, {}) == 2.0
    with pytest.raises(KeyError, match="scale"):
        cg.grad(reraised)(-3.0, {})


def test_each_run_raises_its_own_exception():
    grad = cg.grad(safe_sqrt)
    errors = []
    for _ in range(2):
        with pytest.raises(ValueError) as info:
            grad(-1.0)
        errors.append(info.value)
    assert errors[0] is not errors[1]
    assert len(errors[1].__notes__) == 1  # cfgrad's note of where, once
    for _ in range(2):  # an exception that cannot be copied is raised itself, notes once
        with pytest.raises(NeedsKeyword) as info:
            cg.grad(uncopyable)(-1.0)
        assert info.value.code == 7 and len(info.value.__notes__) == 1


def test_jit_compiles_a_raising_check():
    """The check is a debug callback, which compiled code calls in object mode: the
    exception the interpreter raises, raised out of compiled code."""
    compiled = cg.jit(safe_sqrt, fallback=False)
    assert compiled(4.0) == 2.0
    _raises(ValueError, "negative input", lambda: compiled(-1.0))
    assert compiled.info(4.0).backend == "numba"


# -------------------------------------------------------------------------------------
# 4. `range` with a traced step of zero
# -------------------------------------------------------------------------------------


def stepped(x, step):
    total = 0.0
    for i in range(0, 10, step):
        total = total + x * i
    return total


def stepped_with_break(x, step):
    total = 0.0
    for i in range(10, 0, step):
        if total > 25.0:
            break
        total = total + x * i
    return total


ZERO_STEP = "range() arg 3 must not be zero"  # Python's message


@pytest.mark.parametrize("fn", [stepped, stepped_with_break])
def test_a_traced_range_step_of_zero_raises_pythons_value_error(fn):
    _raises(ValueError, ZERO_STEP, lambda: fn(1.0, 0))
    _raises(ValueError, ZERO_STEP, lambda: cg.value_and_grad(fn)(1.0, 0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cg.CompileWarning)
        compiled = cg.jit(fn)
        _raises(ValueError, ZERO_STEP, lambda: compiled(1.0, 0))
        for step in (3, -3, 1, -1):
            assert compiled(1.0, step) == fn(1.0, step)
            assert cg.value_and_grad(fn)(1.0, step) == (fn(1.0, step), fn(1.0, step))


# -------------------------------------------------------------------------------------
# 12. a recursion that ends on a traced condition
# -------------------------------------------------------------------------------------


def fact(n, x):
    return x if n <= 0 else n * fact(n - 1, x)


def fact_if(n, x):
    if n <= 0:
        return x
    return n * fact_if(n - 1, x)


def halving(x):
    while x > 1.0:
        x = halving(x / 2.0)
    return x


def bounded(x, depth):
    if depth == 0:
        return x
    if x > 0:
        return bounded(x * 2.0, depth - 1)
    return bounded(x * 3.0, depth - 1)


@pytest.mark.parametrize(("fn", "args", "argnums", "construct"), [
    (fact, (3, 2.0), 1, "conditional expression"), (fact_if, (3, 2.0), 1, "`if`"),
    (halving, (8.0,), 0, "`while` loop")])
def test_recursion_on_a_traced_condition_is_a_conversion_error(fn, args, argnums, construct):
    assert fn(*args) in (12.0, 1.0)  # Python ends the recursion on the values
    with pytest.raises(cg.ConversionError) as info:
        cg.grad(fn, argnums=argnums)(*args)
    message = str(info.value)
    line = _line(fn, "return x if" if fn is fact else "if n" if fn is fact_if else "while")
    assert message.startswith(f"`{fn.__name__}` recursed past Python's recursion limit")
    assert f"the {construct} at test_autograph_exceptions.py:{line}" in message
    assert "cg.while_loop" in message and "static_argnums" in message
    assert len(info.traceback) < 50  # raised where the stack is short again


def test_recursion_that_a_static_argument_ends_still_works():
    assert cg.grad(bounded, static_argnums=1)(1.0, 4) == 16.0
    assert cg.grad(bounded, static_argnums=1)(-1.0, 3) == 27.0
    assert cg.grad(fact, argnums=1, static_argnums=0)(3, 2.0) == 6.0


# -------------------------------------------------------------------------------------
# 2, continued: what the review found an `except` of converted code still did
# A. a TracerBoolError (cfgrad could not trace the code) was caught, the handler traced
#    in place of the code: a value and gradient Python never computes
# B. a traced `if`, a `raise` check or an `assert` check reached through a function
#    called in a `try` body was not refused: the check escaped the handler at run time
# -------------------------------------------------------------------------------------


def float_in_try(x):
    try:
        y = float(x)
    except Exception:
        y = 0.0
    return x * y


def float_in_type_error_try(x):
    try:
        y = float(x)
    except TypeError:  # written to detect a traced value: now cfgrad's error instead
        y = 0.0
    return x * y


def float_in_try_star(x):
    try:
        y = float(x)
    except* TypeError:
        y = 0.0
    return x * y


@pytest.mark.parametrize("fn", [float_in_try, float_in_type_error_try])
def test_a_tracer_bool_error_passes_every_except_of_converted_code(fn):
    assert fn(2.0) == 4.0  # Python: float(2.0) never raises, the handler never runs
    assert cg.autograph(fn)(2.0) == 4.0
    with pytest.raises(cg.TracerBoolError) as info:
        cg.value_and_grad(fn)(2.0)
    assert f"test_autograph_exceptions.py:{_line(fn, 'float(x)')}" in str(info.value)


def test_a_tracer_bool_error_passes_except_star_in_its_group():
    with pytest.raises(ExceptionGroup) as info:
        cg.value_and_grad(float_in_try_star)(2.0)
    assert info.value.subgroup(cg.TracerBoolError) is not None


def test_without_autograph_a_handler_catches_a_tracer_bool_error_as_python_would():
    # nothing is rewritten: the function is traced as written, its handler included
    assert cg.value_and_grad(float_in_try, autograph=False)(2.0) == (0.0, 0.0)


def squared_by_float(x):
    return float(x) * x


def transform_in_try(x):
    try:
        return cg.grad(squared_by_float)(x)
    except TypeError:
        return -1.0


def test_converted_code_on_concrete_values_catches_a_failed_inner_transformation():
    # nothing of the caller is traced: the inner transformation failed and finished
    # inside the `try`, where Python's handler catches its error too
    assert transform_in_try(2.0) == -1.0
    assert cg.autograph(transform_in_try)(2.0) == -1.0


def check_sign(x):
    if x < 0:
        raise ValueError("negative")
    return x


def check_in_try(x):
    try:
        y = check_sign(x)
    except ValueError:
        y = 0 * x
    return y


def check_two_calls_deep(x):
    return check_sign(x) * 2.0


def deep_check_in_try(x):
    try:
        y = check_two_calls_deep(x)
    except ValueError:
        y = 0 * x
    return y


def asserts_positive(x):
    assert x > 0, "x must be positive"
    return x


def assert_in_try(x):
    try:
        y = asserts_positive(x)
    except AssertionError:
        y = 0 * x
    return y


def doubling_loop(x):
    while x < 10:
        x = x * 2
    return x


def while_in_try(x):
    try:
        y = doubling_loop(x)
    except ValueError:
        y = 0 * x
    return y


def summing_rows(v):
    total = 0.0
    for row in v:
        total = total + row
    return total


def for_in_try(x):
    try:
        y = summing_rows(cnp.stack([x, 2 * x]))
    except ValueError:
        y = 0 * x
    return y


def picks(x):
    return x if x > 0 else -x


def conditional_expression_in_try(x):
    try:
        y = picks(x)
    except KeyError:
        y = 0 * x
    return y


@pytest.mark.parametrize(("fn", "callee", "statement", "construct"), [
    (check_in_try, check_sign, "if x < 0", "`if`"),
    (deep_check_in_try, check_sign, "if x < 0", "`if`"),
    (assert_in_try, asserts_positive, "assert x > 0", "`assert`"),
    (while_in_try, doubling_loop, "while x < 10", "`while` loop"),
    (for_in_try, summing_rows, "for row in v", "`for` loop"),
    (conditional_expression_in_try, picks, "return x if", "conditional expression")])
def test_traced_control_flow_reached_from_a_try_body_is_refused(fn, callee, statement,
                                                                construct):
    with pytest.raises(cg.ConversionError) as info:
        cg.value_and_grad(fn)(2.0)
    message = str(info.value)
    assert f"the {construct} at test_autograph_exceptions.py:" \
           f"{_line(callee, statement)}" in message
    assert f"inside the `try` at test_autograph_exceptions.py:{_line(fn, 'try:')}" in message
    assert "move the control flow out of the `try`" in message


def test_the_check_that_escaped_the_handler_is_refused_where_python_catches():
    # the review's case: Python's handler catches the ValueError of check_sign(-1.0);
    # the traced program's run-time check could not be caught, so it is refused
    assert check_in_try(-1.0) == 0.0 and cg.autograph(check_in_try)(-1.0) == 0.0
    with pytest.raises(cg.ConversionError, match="inside the `try`"):
        cg.value_and_grad(check_in_try)(-1.0)


def python_check(x, n):
    if n < 1:
        raise ValueError("n must be positive")
    for _ in range(n):
        x = x * 2.0
    return x


def python_flow_in_try(x, n):
    try:
        y = python_check(x, n)
    except ValueError:
        y = 5.0 * x
    return y


def test_a_try_around_python_valued_control_flow_is_python():
    grad = cg.value_and_grad(python_flow_in_try, static_argnums=1)
    assert grad(1.5, 2) == (python_flow_in_try(1.5, 2), 4.0) == (6.0, 4.0)
    assert grad(1.5, 0) == (python_flow_in_try(1.5, 0), 5.0) == (7.5, 5.0)


def check_in_try_finally(x):
    try:
        y = check_sign(x)
    finally:
        pass
    return y


def test_try_finally_without_except_is_not_a_guard():
    assert cg.value_and_grad(check_in_try_finally)(3.0) == (3.0, 1.0)
    _raises(ValueError, "negative", lambda: check_in_try_finally(-1.0))
    _raises(ValueError, "negative", lambda: cg.value_and_grad(check_in_try_finally)(-1.0))


def check_in_else(x, table):
    try:
        scale = table["scale"]
    except KeyError:
        scale = 2.0
    else:
        scale = check_sign(scale)
    return check_sign(x) * scale


def test_the_else_and_the_code_after_a_try_are_not_guarded():
    value_and_grad = cg.value_and_grad(check_in_else)
    assert value_and_grad(3.0, {}) == (6.0, 2.0)
    assert value_and_grad(3.0, {"scale": 4.0}) == (12.0, 4.0)
    _raises(ValueError, "negative", lambda: value_and_grad(-3.0, {}))


def returns_from_try(x, table):
    try:
        return x * table["scale"]
    except KeyError:
        return x


def jumps_in_try(x):
    total = 0.0
    for i in range(4):
        try:
            if i == 1:
                continue
            if i == 3:
                break
            total = total + x * i
        except KeyError:
            pass
    return total


def leaves_tries_every_way(x):
    """Traced control flow after `try`s left by `return`, `break`/`continue`, an
    exception caught and an exception that escaped: each exit popped its `try`."""
    y = returns_from_try(x, {}) + returns_from_try(x, {"scale": 2.0}) + jumps_in_try(x)
    try:
        {}["missing"]
    except KeyError:
        y = y + x
    return check_sign(y)


def test_every_way_out_of_a_try_body_ends_its_guard():
    assert leaves_tries_every_way(1.0) == 6.0
    assert cg.value_and_grad(leaves_tries_every_way)(1.0) == (6.0, 6.0)
    # a refusal unwinds through the `try`: the next trace is not inside it
    with pytest.raises(cg.ConversionError):
        cg.value_and_grad(check_in_try)(2.0)
    assert cg.value_and_grad(check_sign)(2.0) == (2.0, 1.0)
    _raises(ValueError, "negative", lambda: cg.value_and_grad(check_sign)(-2.0))


def transformation_in_try(x):
    try:
        return cg.grad(check_sign)(x)
    except ValueError:
        return 0.0


def test_a_try_entered_on_concrete_values_catches_the_checks_of_an_inner_program():
    # the inner program is traced and run inside the body: Python's handler catches it
    assert transformation_in_try(-1.0) == 0.0
    assert cg.autograph(transformation_in_try)(-1.0) == 0.0
    assert cg.autograph(transformation_in_try)(2.0) == 1.0
