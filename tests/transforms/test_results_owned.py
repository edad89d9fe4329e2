"""Every array a transformation returns is the caller's own (docs/api.md, "Results are
yours"): writable, and sharing memory with no argument, no other result and nothing a
cached program keeps. Each test takes one kind of result, edits every array of it in
place (as weight decay `g += wd * w` or `np.clip(g, out=g)` do), calls again and expects
the first call's numbers; and checks that no two arrays of a result, and no result and an
argument, share memory. Before this rule a zero gradient, a constant output, a constant
`has_aux` value and `jvp` constants were the cached program's own arrays.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad import tree as treelib
from cfgrad.layout import shared_outputs

W, B, X = np.array([1.0, 2.0]), np.array([0.5, -0.5]), np.array([2.0, 3.0])


def arrays(result: Any) -> list[np.ndarray]:
    return [x for x in treelib.flatten(result)[0] if isinstance(x, np.ndarray)]


def snapshot(result: Any) -> list[Any]:
    return [np.array(x, copy=True) for x in treelib.flatten(result)[0]]


def assert_owned(call: Callable[[], Any], args: tuple = ()) -> None:
    """Call, edit every returned array in place, call again: the same numbers."""
    first = call()
    before = snapshot(first)
    got = arrays(first)
    assert got, "the case returns no array"
    for i, a in enumerate(got):
        assert a.flags.writeable, f"result array {i} is read-only"
        for b in got[i + 1:]:
            assert not np.shares_memory(a, b), "two results share memory"
        for x in arrays(args):
            assert not np.shares_memory(a, x), "a result shares memory with an argument"
    for a in got:
        a += 100.0
    again = call()
    for x, y in zip(snapshot(again), before, strict=True):
        np.testing.assert_array_equal(x, y)


def loss(w, b, x):
    return cnp.sum((w * x - 1.0) ** 2)


def test_the_issues_example_weight_decay_on_an_unused_argument():
    grad = cg.grad(loss, argnums=(0, 1))
    gw, gb = grad(W, B, X)
    gb += 0.1
    np.testing.assert_array_equal(grad(W, B, X)[1], [0.0, 0.0])
    assert_owned(lambda: grad(W, B, X), (W, B, X))


@pytest.mark.parametrize("jit", [False, True], ids=["interpreter", "jit"])
@pytest.mark.parametrize("case", [
    "unused argument", "broadcast from a sum", "constant output", "argument returned",
    "aux constant", "aux is an argument", "one array twice"])
def test_grad_and_value_and_grad(case, jit):
    wrap = cg.jit if jit else (lambda f: f)
    if case == "unused argument":
        f = wrap(cg.grad(loss, argnums=(0, 1)))
    elif case == "broadcast from a sum":
        f = wrap(cg.grad(lambda w, b, x: cnp.sum(w) + cnp.sum(b)))
    elif case == "constant output":
        f = wrap(cg.value_and_grad(lambda w, b, x: (cnp.sum(w * x), np.ones(2)),
                                   has_aux=True))
    elif case == "argument returned":
        f = wrap(cg.value_and_grad(lambda w, b, x: (cnp.sum(w * x), (w, x)), has_aux=True))
    elif case == "aux constant":
        f = wrap(cg.grad(lambda w, b, x: (cnp.sum(w * x), np.zeros((2, 2))), has_aux=True))
    elif case == "aux is an argument":
        f = wrap(cg.grad(lambda w, b, x: (cnp.sum(w * x), b), argnums=(0, 1), has_aux=True))
    else:
        def twice(w, b, x):
            y = w * x
            return cnp.sum(y), (y, y)
        f = wrap(cg.value_and_grad(twice, has_aux=True))
    assert_owned(lambda: f(W, B, X), (W, B, X))


def test_vjp_outputs_and_pullback_zeros():
    out, pullback = cg.vjp(lambda w, b: (w * 2.0, np.arange(3.0)), W, B)
    ct = (np.ones(2), np.ones(3))
    assert_owned(lambda: pullback(ct), (W, B) + ct)
    assert_owned(lambda: cg.vjp(lambda w, b: (w * 2.0, np.arange(3.0)), W, B)[0], (W, B))


def test_pullback_of_the_identity_does_not_return_the_cotangent():
    _, pullback = cg.vjp(lambda w: w, W)
    ct = np.array([1.0, 2.0])
    (g,) = pullback(ct)
    assert not np.shares_memory(g, ct)
    assert_owned(lambda: pullback(ct), (W, ct))


def test_jvp_constants_and_passed_through_tangents():
    t = np.array([1.0, 1.0])
    assert_owned(lambda: cg.jvp(lambda w: (np.ones(3), w), (W,), (t,)), (W, t))
    assert_owned(lambda: cg.jvp(lambda w: w * 3.0, (W,), (t,)), (W, t))


def _jvp_values(f: Callable) -> Callable:
    return lambda x: cg.jvp(f, (x,), (np.ones_like(x),))


@pytest.mark.parametrize("wrap", [_jvp_values, cg.jit], ids=["jvp", "jit"])
def test_forward_results_constants_arguments_and_swapped_carries(wrap):

    def carries(x):
        def body(c):
            a, b, i = c
            return b, b, i + 1  # both carries end as one array

        return cg.while_loop(lambda c: c[2] < 3, body, (x, x * 2.0, 0))[:2]

    for f in (lambda x: x, lambda x: (x, x), lambda x: np.ones(3), carries,
              lambda x: cnp.reshape(x, (2, 1)), lambda x: x.T,
              # a reduction over no axis is a new array (compiled, it was the input)
              lambda x: (cnp.max(x, axis=()), cnp.min(x, axis=()))):
        g = wrap(f)
        assert_owned(lambda g=g: g(W), (W,))


def test_jacobians():
    f = lambda w: cnp.sin(w) * 2.0  # noqa: E731
    for jac in (cg.jacfwd, cg.jacrev, cg.hessian):
        g = jac(lambda w: cnp.sum(f(w))) if jac is cg.hessian else jac(f)
        assert_owned(lambda g=g: g(W), (W,))


def test_a_loop_carry_holding_new_arrays_is_not_copied():
    """The analysis that decides what to copy: constants, arguments, views and a Phi
    with such an input are listed; a loop carry that only ever holds new arrays is not
    (the greatest fixed point: its Phi has itself as an input)."""
    def f(x):
        y = cg.fori_loop(0, 3, lambda i, c: c * 2.0, x * 1.0)
        return y, x, np.ones(2), cnp.reshape(y, (2, 1)), cg.fori_loop(0, 3, lambda i, c: c, x)

    assert shared_outputs(cg.lower(f, W)) == frozenset({1, 2, 3, 4})


def test_a_debug_callback_cannot_edit_the_runs_values():
    """A callback receives read-only views of the run's arrays (here the argument and a
    constant of the cached program): an in-place edit raises instead of changing the
    run and later calls."""
    def f(x):
        c = np.ones(2)
        cg.debug.callback(lambda a, b: a.__iadd__(1.0), x, c + 0.0 * x)
        return cnp.sum(x * c)

    with pytest.raises(ValueError, match="read-only"):
        cg.grad(f)(W)
    np.testing.assert_array_equal(W, [1.0, 2.0])
