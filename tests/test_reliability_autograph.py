"""Reliability of the source conversion where Python's exceptions meet traced values.

Regression of a broad `except` (cfgrad/convert) that caught cfgrad's own refusal and had
its handler traced instead: a wrong value and gradient. Expected values come from plain
Python on the same inputs, never from numbers cfgrad printed. The functions live in this
file: conversion reads source.
"""

import inspect

import pytest

import cfgrad as cg
from cfgrad.convert import converted_source


def _line(fn, text):
    """The file line of the first line of `fn`'s source containing `text`."""
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


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
    assert f"inside the `try` at test_reliability_autograph.py:{_line(fn, 'try:')}" in message
    assert "move the control flow out of the `try`" in message


def test_except_star_lets_the_refusal_pass_in_its_group():
    with pytest.raises(ExceptionGroup) as info:
        cg.value_and_grad(if_in_try_star)(2.0)
    assert info.value.subgroup(cg.ConversionError) is not None


def test_a_refusal_in_a_called_function_passes_the_callers_except():
    with pytest.raises(cg.ConversionError, match="differs between the branches"):
        cg.value_and_grad(helper_in_try)(2.0)


def test_user_exceptions_while_tracing_are_still_caught():
    assert cg.value_and_grad(lookup_in_try)(2.0, {}) == (6.0, 3.0)
    # a Python condition in a `try` is Python: its `raise` is caught by the handler
    small = cg.value_and_grad(concrete_if_in_try, static_argnums=1)
    assert small(2.0, 0) == (10.0, 5.0) and concrete_if_in_try(2.0, 0) == 10.0
    assert small(2.0, 3) == (4.0, 4.0)


def test_every_handler_first_lets_a_conversion_error_pass():
    assert "if cfg__ops.refused():\n            raise" in converted_source(if_in_broad_try)
