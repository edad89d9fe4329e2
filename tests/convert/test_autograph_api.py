"""The conversion's place in the API: every transformation converts, `autograph=False`
turns it off everywhere, and converted functions are cached per function object."""

from __future__ import annotations

import numpy as np
import pytest

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad.testing import check_grads


def clipped_square(x):
    if cnp.sum(x) > 1.0:
        return cnp.sum(x * x)
    return cnp.sum(x)


X = np.array([0.75, 0.5])  # the sum is 1.25: the squaring branch


TRANSFORMATIONS = {
    "grad": lambda ag: cg.grad(clipped_square, autograph=ag)(X),
    "value_and_grad": lambda ag: cg.value_and_grad(clipped_square, autograph=ag)(X)[1],
    "vjp": lambda ag: cg.vjp(clipped_square, X, autograph=ag)[1](1.0)[0],
    "jvp": lambda ag: cg.jvp(clipped_square, (X,), (np.ones(2),), autograph=ag)[1],
    "lower": lambda ag: cg.lower(clipped_square, X, autograph=ag),
    "jacrev": lambda ag: cg.jacrev(clipped_square, autograph=ag)(X),
    "jacfwd": lambda ag: cg.jacfwd(clipped_square, autograph=ag)(X),
    "hessian": lambda ag: cg.hessian(clipped_square, autograph=ag)(X),
}
EXPECTED = {"grad": 2 * X, "value_and_grad": 2 * X, "vjp": 2 * X, "jvp": 2 * X.sum(),
            "jacrev": 2 * X, "jacfwd": 2 * X, "hessian": 2 * np.eye(2)}


@pytest.mark.parametrize("name", sorted(TRANSFORMATIONS))
def test_every_transformation_converts_and_autograph_false_turns_it_off(name: str) -> None:
    result = TRANSFORMATIONS[name](True)
    if name == "lower":
        assert "region if#0 cond" in result.text()
    else:
        np.testing.assert_allclose(result, EXPECTED[name], rtol=1e-12)
    with pytest.raises(cg.TracerBoolError, match="test_autograph_api.py"):
        TRANSFORMATIONS[name](False)


def test_check_grads_and_nested_transformations_see_the_converted_function() -> None:
    check_grads(clipped_square, (X,), order=2)
    outer = cg.grad(lambda x: cnp.sum(cg.grad(clipped_square)(x) ** 2))
    np.testing.assert_allclose(outer(X), 8 * X, rtol=1e-12)


def test_the_converted_function_is_cached_per_function_object() -> None:
    converted = cg.autograph(clipped_square)
    assert converted is cg.autograph(clipped_square)
    assert cg.autograph(converted) is converted  # converting twice changes nothing
    assert converted(X) == clipped_square(X)
    assert converted.__name__ == "clipped_square" and converted.__doc__ == clipped_square.__doc__


def test_autograph_refuses_what_is_not_callable() -> None:
    with pytest.raises(cg.ArgumentTypeError, match="expected a function"):
        cg.autograph(3.0)


def test_library_functions_are_not_converted() -> None:
    assert cg.autograph(np.sum) is np.sum
    assert cg.autograph(cnp.where) is cnp.where
    assert cg.autograph(len) is len


# -- the conversion's own cost ------------------------------------------------------------


def nested_early_returns(x, n):
    y = 0.0
    if x > 0:
        if n > 0:
            return y
    y = y + x
    if x > 1:
        if n > 1:
            return y + 1
    y = y + x
    if x > 2:
        if n > 2:
            return y + 2
    y = y + x
    if x > 3:
        if n > 3:
            return y + 3
    y = y + x
    if x > 4:
        if n > 4:
            return y + 4
    y = y + x
    if x > 5:
        if n > 5:
            return y + 5
    y = y + x
    return y


def test_conversion_size_is_linear_in_early_returns():
    source = cg.convert.converted_source(nested_early_returns)
    assert len(source.splitlines()) < 300  # the original is 31 lines; today ~890


# -- the cache of converted functions ----------------------------------------------------


def _scaled_step(x, k=1.0):
    if x > 0:
        return x * k
    return -x * k


def test_defaults_changed_after_conversion():
    fn = type(_scaled_step)(_scaled_step.__code__, _scaled_step.__globals__, "fn",
                            _scaled_step.__defaults__, _scaled_step.__closure__)
    cg.autograph(fn)(2.0)
    fn.__defaults__ = (3.0,)
    assert cg.autograph(fn)(2.0) == fn(2.0)
