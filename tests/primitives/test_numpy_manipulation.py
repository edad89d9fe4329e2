"""Edges of cfgrad.numpy's array manipulation that the example walker
(tests/primitives/test_numpy_coverage.py) cannot reach: arguments traced by keyword (pad's
constant_values, repeat's repeats), indices computed inside a loop, the typed errors for
traced arguments that set a shape, and the cost of a call (nodes per call)."""

from __future__ import annotations

import numpy as np
import pytest

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad.errors import ArgumentValueError, TracerBoolError
from cfgrad.testing import check_grads

X = np.random.default_rng(5).normal(size=(3, 4))


def test_pad_constant_values_are_differentiable():
    def f(x, c):
        return cnp.pad(x, ((1, 2), (0, 1)), constant_values=c) ** 2

    check_grads(f, (X, 0.7), modes=("fwd", "rev"))
    pairs = np.array([[0.5, -1.0], [2.0, 3.0]])
    check_grads(lambda x, c: cnp.pad(x, 1, constant_values=c) ** 2, (X, pairs),
                modes=("fwd", "rev"))
    out, _ = cg.vjp(lambda c: cnp.pad(X, 1, constant_values=c), pairs)
    np.testing.assert_array_equal(out, np.pad(X, 1, constant_values=pairs))
    # each constant's gradient counts the cells it fills (corners go to the later axis)
    grads = cg.grad(lambda c: cnp.sum(cnp.pad(X, 1, constant_values=c)))(pairs)
    np.testing.assert_array_equal(grads, [[4.0, 4.0], [5.0, 5.0]])


def test_pad_end_values_of_a_linear_ramp_are_differentiable():
    ends = np.array([[0.5, -1.0], [2.0, 3.0]])
    check_grads(lambda x, e: cnp.pad(x, ((2, 1), (3, 2)), mode="linear_ramp", end_values=e),
                (X, ends), modes=("fwd", "rev"))
    out, _ = cg.vjp(lambda e: cnp.pad(X, 2, mode="linear_ramp", end_values=e), ends)
    np.testing.assert_array_equal(out, np.pad(X, 2, mode="linear_ramp", end_values=ends))


def test_repeat_with_traced_repeats_needs_a_total_length():
    counts = np.array([1, 0, 2])

    def f(x, r):
        return cnp.repeat(x, r, axis=0, total_repeat_length=5) * 2.0

    out, _ = cg.vjp(f, X, counts)
    np.testing.assert_array_equal(out, 2.0 * X[[0, 2, 2, 2, 2]])  # padded with the last
    check_grads(lambda x: f(x, counts), (X,), modes=("fwd", "rev"))
    with pytest.raises(TracerBoolError, match="total_repeat_length"):
        cg.vjp(lambda x, r: cnp.repeat(x, r), X, counts)


def test_indices_computed_in_a_loop_gather_and_differentiate():
    """take and take_along_axis at indices a fori_loop computes, some out of bounds:
    JAX's 'fill' (NaN, no gradient) by default, 'clip' and 'wrap' on request."""
    def f(x, mode):
        def body(t, acc):
            idx = cnp.stack([t - 1, t + 2])  # -1 (from the end) then 5 (out of bounds)
            got = cnp.take(x, idx, axis=1, mode=mode)
            return acc + cnp.where(cnp.isfinite(got), got, 0.0) * (t + 1.0)
        return cg.fori_loop(0, 3, body, cnp.zeros((3, 2)))

    for mode in (None, "clip", "wrap"):
        check_grads(lambda x, mode=mode: f(x, mode), (X,), modes=("fwd", "rev"))
    out, _ = cg.vjp(lambda x: cnp.take(x, cnp.asarray(np.array([-1, 4, -5])), axis=1), X)
    np.testing.assert_array_equal(np.isnan(out), [[False, True, True]] * 3)
    out, _ = cg.vjp(lambda x: cnp.take_along_axis(
        x, cnp.asarray(np.array([[9], [1], [-4]])), axis=1, mode="clip"), X)
    np.testing.assert_array_equal(out, X[[0, 1, 2], [3, 1, 0]][:, None])


def test_index_conversions_on_traced_integers():
    flat = np.array([0, 5, 11, -1, 12])

    def f(i):
        rows, cols = cnp.unravel_index(i, (3, 4))
        back = cnp.ravel_multi_index((rows, cols), (3, 4), mode="clip")
        return rows, cols, back

    (rows, cols, back), _ = cg.vjp(lambda x, i: (x, *f(i)), 0.0, flat)[0][1:], None
    np.testing.assert_array_equal(rows, [0, 1, 2, 2, 2])
    np.testing.assert_array_equal(cols, [0, 1, 3, 3, 3])
    np.testing.assert_array_equal(back, [0, 5, 11, 11, 11])


@pytest.mark.parametrize(("call", "match"), [
    (lambda i: cnp.choose(i, [X[0], X[1]]), "mode='wrap' or 'clip'"),
    (lambda i: cnp.ravel_multi_index((i, i), (4, 4)), "mode='clip', 'wrap' or 'ignore'"),
    (lambda i: cnp.insert(X, i, 1.0), "obj is a traced value"),
    (lambda i: cnp.delete(X, i), "obj is a traced value"),
    (lambda i: cnp.split(X, i), "indices_or_sections is a traced value"),
    (lambda i: cnp.take(X, i, mode="raise"), "mode='fill', 'clip' or 'wrap'"),
])
def test_traced_arguments_that_set_a_shape_or_need_a_check_are_typed_errors(call, match):
    with pytest.raises(TracerBoolError, match=match):
        cg.vjp(lambda x, i: x * call(i), 1.0, np.array([0, 1, 1, 0]))


@pytest.mark.parametrize(("call", "error"), [
    (lambda: cnp.pad(X, 1, mode="median"), ArgumentValueError),
    (lambda: cnp.pad(X, 1, mode="minimum", stat_length=0), ArgumentValueError),
    (lambda: cnp.pad(X, 1, mode="edge", constant_values=1.0), ArgumentValueError),
    (lambda: cnp.pad(X, -1), ArgumentValueError),
    (lambda: cnp.tril(X[0]), ArgumentValueError),
    (lambda: cnp.split(X, 3, axis=1), ArgumentValueError),
    (lambda: cnp.choose(np.array([0, 2]), [X[0, :2], X[1, :2]]), ArgumentValueError),
    (lambda: cnp.take(X, np.array([20]), mode="raise"), IndexError),
    (lambda: cnp.block([[X], X]), ArgumentValueError),
    (lambda: cnp.concatenate([]), ArgumentValueError),
    (lambda: cnp.vstack([]), ArgumentValueError),
])
def test_bad_arguments_are_typed_errors(call, error):
    with pytest.raises(error):
        call()


@pytest.mark.parametrize(("call", "nodes"), [
    (lambda x: cnp.flip(x), 1),
    (lambda x: cnp.rot90(x), 2),
    (lambda x: cnp.pad(x, 3, mode="reflect"), 2),
    (lambda x: cnp.repeat(x, 3, axis=1), 1),
    (lambda x: cnp.tile(x, (2, 3)), 3),
    (lambda x: cnp.insert(x, [1, 2], 0.5, axis=1), 4),
    (lambda x: cnp.diagonal(x, 1), 1),
    (lambda x: cnp.take(x, np.array([1, 0]), axis=1), 1),
])
def test_a_call_is_a_few_nodes_whatever_the_size(call, nodes):
    big = np.zeros((40, 50))
    assert cg.lower(call, big).node_count() <= nodes + 1  # + the Return
