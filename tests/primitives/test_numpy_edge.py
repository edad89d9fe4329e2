"""Edges of `cfgrad.numpy` where a traced argument meets a function that builds arrays:
`linspace` with traced ends (it used to recurse until RecursionError), `arange` with a
traced bound (a typed error that says what to do), and `round` (numpy's halves-to-even,
bit for bit)."""

from __future__ import annotations

import numpy as np
import pytest

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad.api import evaluate
from cfgrad.testing import check_grads

LINSPACE_CASES = [  # start, stop, num, endpoint, dtype
    (0.3, 2.0, 7, True, None), (2.0, -1.5, 4, True, None), (0.5, 1.5, 5, False, None),
    (0.0, 1.0, 1, True, None), (0.0, 1.0, 0, True, None), (-1.0, 2.0, 4, True, int),
    (1e-3, 1e3, 9, True, np.float32), (np.array([0.0, 1.0]), 2.0, 3, True, None),
    (np.float32(0.1), np.float32(1.0), 6, True, None), (2, 7, 5, True, None),
]


@pytest.mark.parametrize(("start", "stop", "num", "endpoint", "dtype"), LINSPACE_CASES)
@pytest.mark.parametrize("traced", ["start", "stop", "both"])
def test_linspace_with_traced_ends_is_numpys(start, stop, num, endpoint, dtype, traced):
    a = np.asarray(start) if traced != "stop" else start
    b = np.asarray(stop) if traced != "start" else stop
    want = np.linspace(a, b, num, endpoint=endpoint, dtype=dtype)
    if traced == "start":
        got, _ = evaluate(lambda a: cnp.linspace(a, stop, num, endpoint, dtype=dtype), start)
    elif traced == "stop":
        got, _ = evaluate(lambda b: cnp.linspace(start, b, num, endpoint, dtype=dtype), stop)
    else:
        got, _ = evaluate(lambda a, b: cnp.linspace(a, b, num, endpoint, dtype=dtype), start, stop)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_linspace_is_differentiable_in_both_ends():
    da, db = cg.grad(lambda a, b: cnp.sum(cnp.linspace(a, b, 5)), argnums=(0, 1))(0.0, 1.0)
    assert (da, db) == (2.5, 2.5)  # element i is a + (b - a) i / 4
    check_grads(lambda a, b: cnp.sum(cnp.linspace(a, b, 7) ** 2), (0.3, 2.0))
    check_grads(lambda a, b: cnp.sum(cnp.sin(cnp.linspace(a, b, 5, endpoint=False))),
                (np.array([0.3, 1.0]), 2.0))
    check_grads(lambda b: cnp.linspace(1.0, b, 4) * 3.0, (np.float32(2.0),))


@pytest.mark.parametrize(("fun", "names"), [
    (lambda n: cnp.arange(n), "cnp.arange: stop"),
    (lambda n: cnp.arange(n, 10), "cnp.arange: start"),
    (lambda n: cnp.arange(0, 10, n), "cnp.arange: step"),
    (lambda n: cnp.linspace(0.0, 1.0, n), "cnp.linspace: num"),
])
def test_a_traced_length_says_what_to_do(fun, names):
    with pytest.raises(cg.TracerBoolError, match=names) as info:
        cg.lower(fun, 3)
    message = str(info.value)
    assert isinstance(info.value, TypeError)
    assert "concrete value" in message and "cg.fori_loop" in message
    assert "test_numpy_edge.py" in message  # the user's line


def test_a_concrete_arange_still_works_inside_a_trace():
    assert cg.grad(lambda x: cnp.sum(cnp.arange(3) * x))(2.0) == 3.0


ROUND_VALUES = np.concatenate([
    np.random.default_rng(0).uniform(-5, 5, 200), np.arange(-6, 6.5, 0.25),
    [np.inf, -np.inf, np.nan, -0.0, 0.0, -0.3, -0.5, 1e300, 2.0**53 + 2, 2.675, 0.125]])


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("decimals", [0, 1, 2, -1, -2])
def test_round_is_numpys_bit_for_bit(dtype, decimals):
    with np.errstate(all="ignore"):
        x = ROUND_VALUES.astype(dtype)
        want = np.round(x, decimals)
        got, _ = evaluate(lambda x: cnp.round(x, decimals), x)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))  # -0.0 stays -0.0


@pytest.mark.parametrize(("dtype", "decimals"), [
    *((dtype, decimals) for dtype in (np.int32, np.int64) for decimals in (0, 1, -1, -2)),
    (np.bool_, 0),  # numpy rounds booleans to float16, and only at decimals=0
])
def test_round_of_integers_and_booleans_is_numpys(dtype, decimals):
    x = np.array([-1250, -15, 0, 7, 15, 25, 1349]).astype(dtype)
    got, _ = evaluate(lambda x: cnp.round(x, decimals), x)
    want = np.round(x, decimals)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_round_has_derivative_zero_and_dispatches_from_numpy():
    assert cg.grad(lambda x: cnp.sum(cnp.round(x * 3.0, 1)))(np.array([0.4, 1.7])).tolist() \
        == [0.0, 0.0]
    assert cg.grad(lambda x: np.round(x) + np.around(x) + x.round())(2.6) == 0.0
    got, _ = evaluate(lambda x: np.round(x, 1), np.array([0.25, 0.35]))
    np.testing.assert_array_equal(got, np.round(np.array([0.25, 0.35]), 1))


def test_python_round_of_a_traced_value_is_cnp_round():
    """round(x) and round(x, n) on a traced value are cnp.round(x) and cnp.round(x, n):
    numpy's halves-to-even, a traced float (not a Python int), derivative 0."""
    x = np.array([0.5, 1.5, 2.5, -0.5, -0.3, 2.675, 1234.5])
    for call, want in [(lambda x: round(x), np.round(x)),
                       (lambda x: round(x, 2), np.round(x, 2)),
                       (lambda x: round(x, -1), np.round(x, -1))]:
        got, _ = evaluate(call, x)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    assert cg.grad(lambda x: round(x * 3.0, 1) + x)(0.4) == 1.0


@pytest.mark.parametrize("name, fun", [
    ("sort", lambda x: cnp.sort(x, axis=2)),
    ("cumsum", lambda x: cnp.cumsum(x, axis=1)),
    ("sum", lambda x: cnp.sum(x, axis=(0, -2))),
    ("argmax", lambda x: cnp.argmax(x, axis=1)),
    ("fft.fft2", lambda x: cnp.fft.fft2(x)),
    ("fft.fftshift", lambda x: cnp.fft.fftshift(x, axes=3)),
    ("flip", lambda x: cnp.flip(x, 1)),
    ("moveaxis", lambda x: cnp.moveaxis(x, 1, 0)),
])
def test_an_axis_out_of_bounds_names_the_function(name, fun):
    """One shared normalization: a typed error (a ValueError, as numpy's AxisError) naming
    the function, traced or not."""
    x = np.arange(6.0)
    for run in (lambda: fun(x), lambda: cg.jvp(fun, (x,), (x,))):
        with pytest.raises(cg.ArgumentValueError,
                           match=f"cnp.{name}: axis -?\\d is out of bounds for an array of "
                                 "dimension 1"):
            run()
