"""Edges of the statistics part of `cfgrad.numpy` that tests/primitives/test_numpy_coverage.py's
examples do not reach: the typed errors for arguments it refuses (out=, where= without
initial=, a traced bincount without a length, unknown quantile methods), dtypes kept
through quantiles and running products, and second derivatives of the new primitives
(cumprod exact with zeros, sort) against central differences of their gradients."""

from __future__ import annotations

import numpy as np
import pytest

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad.errors import ArgumentValueError, TracerBoolError
from cfgrad.testing import check_grads


@pytest.mark.parametrize("call", [
    lambda: cnp.sum(np.ones(3), out=np.zeros(())),
    lambda: cnp.cumsum(np.ones(3), out=np.zeros(3)),
    lambda: cnp.quantile(np.ones(3), 0.5, out=np.zeros(())),
    lambda: cnp.nanmax(np.ones(3), out=np.zeros(())),
], ids=["sum", "cumsum", "quantile", "nanmax"])
def test_out_is_refused_with_a_typed_error(call):
    with pytest.raises(ArgumentValueError, match="out= is not supported"):
        call()


def test_max_with_where_needs_initial():
    with pytest.raises(ArgumentValueError, match="where= needs initial="):
        cnp.max(np.ones(3), where=np.array([True, False, True]))
    assert cnp.max(np.array([1.0, 5.0, 2.0]), where=np.array([True, False, True]),
                   initial=0.0) == 2.0


def test_traced_bincount_needs_a_length():
    weights, x = np.ones(4), np.array([0, 1, 1, 3])
    with pytest.raises(TracerBoolError, match="length="):
        cg.grad(lambda w, i: cnp.sum(cnp.bincount(i, w)))(weights, x)
    with pytest.raises(TracerBoolError, match="length is a traced value"):
        cg.grad(lambda w, n: cnp.sum(cnp.bincount(x, w, length=n)))(weights, 4)
    g = cg.grad(lambda w, i: cnp.sum(cnp.bincount(i, w, length=4) ** 2))(weights, x)
    np.testing.assert_array_equal(g, [2.0, 4.0, 4.0, 2.0])


def test_quantile_refuses_unknown_methods_and_weights():
    with pytest.raises(ArgumentValueError, match="method='cubic'"):
        cnp.quantile(np.ones(3), 0.5, method="cubic")
    with pytest.raises(ArgumentValueError, match="weights="):
        cnp.quantile(np.ones(3), 0.5, weights=np.ones(3))


def test_statistics_keep_float32():
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    for out in (cnp.quantile(x, 0.3, axis=1), cnp.median(x), cnp.cumprod(x, axis=1),
                cnp.sort(x), cnp.nanvar(x, axis=0), cnp.average(x, axis=0)):
        assert out.dtype == np.float32
    g = cg.grad(lambda a: cnp.sum(cnp.quantile(a, 0.3, axis=1, keepdims=True)
                                  * cnp.cumprod(a, 1)))(x)
    assert g.dtype == np.float32


def test_quantile_is_differentiable_in_a_traced_q():
    a = np.array([3.0, 0.0, 2.0, 1.0])
    # between the sorted entries 1 and 2 (q (n - 1) = 1.2): d/dq = (2 - 1) * (n - 1) = 3
    assert cg.grad(lambda q: cnp.quantile(a, q))(0.4) == pytest.approx(3.0, rel=1e-14)


@pytest.mark.parametrize("f", [
    lambda x: cnp.sum(cnp.cumprod(x) * cnp.sin(x)),
    lambda x: cnp.sum(cnp.sort(x * x) * cnp.arange(5.0)),
    lambda x: cnp.quantile(x ** 3, 0.3) + cnp.median(x * x),
    lambda x: cnp.sum(cnp.cumsum(x[::-1]) ** 3),
], ids=["cumprod with a zero", "sort", "quantile", "cumsum"])
def test_second_derivatives_match_finite_differences(f):
    x = np.array([0.7, -1.3, 0.0, 1.9, -0.4])
    check_grads(cg.grad(f), (x,), modes=("fwd", "rev"))
