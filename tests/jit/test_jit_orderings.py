"""`cg.jit` of the primitives issue 25 moved off the interpreter: a `cg.scan`'s output
stack (`write_row`) and the orderings (`sort`, `argsort`, `searchsorted`: a stable merge
sort in numpy's order, NaN last, ties and signed zeros in input order), against the
interpreter bit for bit, values and gradients.

Every program must compile (`fallback=False`); each is one Numba compile, so the cases of
a kind share a program. Bodies are arithmetic only (sums in numpy's order, no math
library), so compiled and interpreted gradients agree exactly.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad import tree
from cfgrad.checkpoint import Binomial, EveryK, Online, Recompute, StoreAll

LONG = os.environ.get("CFGRAD_HYPOTHESIS") == "long"  # the opt-in profile of conftest.py


def assert_same_bits(got: Any, want: Any) -> None:
    got, want = tree.flatten(got)[0], tree.flatten(want)[0]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape, (g, w)
        assert g.tobytes() == w.tobytes(), (g, w)


def compiled_equals_interpreted(f: Any, *args: Any) -> None:
    jitted = cg.jit(f, fallback=False)
    assert jitted.info(*args).backend == "numba"
    assert_same_bits(jitted(*args), f(*args))


# -- orderings: one program of every case --------------------------------------------------

NAN = np.nan
# ties, -0.0 beside 0.0 both ways, NaNs of both signs, infinities; along each axis
TIED = np.array([[[1.0, -0.0, NAN], [0.0, 1.0, -NAN], [-np.inf, 0.0, 1.0]],
                 [[NAN, 2.0, -0.0], [2.0, -0.0, 0.0], [np.inf, NAN, 2.0]]])
INTS = np.array([[3, -1, 3, 0], [0, 0, -1, 3]], np.int64)
FLAGS = np.array([True, False, True, False, False])
SORTED = np.array([-np.inf, -1.0, -0.0, 0.0, 0.0, 2.0, NAN, NAN])
KEYS = np.array([[0.0, -0.0, NAN], [2.0, -5.0, np.inf]])


def orderings(x, ints, flags, empty, a, keys):
    """Sorts and permutations along each axis, of ints, booleans and an empty array;
    insertion indices on both sides, of an array and of a scalar."""
    outs = []
    for axis in (0, 1, 2):
        outs += [cnp.sort(x, axis=axis), cnp.argsort(x, axis=axis)]
    outs += [cnp.sort(ints, axis=1), cnp.argsort(flags), cnp.argsort(empty, axis=1)]
    return outs + [cnp.searchsorted(a, keys, side="left"),
                   cnp.searchsorted(a, keys[0, 2], side="right")]


def more_orderings(x, ints, flags, empty, a, keys):
    """The rest: flattened, descending, sorts of ints and booleans, searches into an
    empty array; and a loss whose gradient goes through `sort`'s (ties: the earlier
    entry takes the earlier output)."""
    outs = [cnp.sort(x, axis=None), cnp.argsort(x, axis=None),
            cnp.argsort(x, axis=1, descending=True), cnp.sort(x, axis=-1, descending=True),
            cnp.argsort(ints, axis=0), cnp.sort(flags), cnp.sort(empty, axis=1)]
    for side in ("left", "right"):
        outs += [cnp.searchsorted(a, keys, side=side), cnp.searchsorted(a[:0], keys, side=side)]
    finite = cnp.nan_to_num(x, posinf=5.0, neginf=-5.0)
    loss = cnp.sum(cnp.sort(finite, axis=1) * cnp.arange(3.0)[:, None]) + cnp.sum(
        cnp.sort(ints * 0.5 + x[0, 0, 0]) ** 2)
    return loss, outs


ORDERING_ARGS = (TIED, INTS, FLAGS, np.zeros((2, 0, 3)), SORTED, KEYS)


def test_orderings_compile_in_numpys_stable_order() -> None:
    """Ties, -0.0 beside 0.0, NaNs of both signs and infinities along each axis; keys
    that tie with entries of the sorted array, NaN keys. The interpreter's orders are
    numpy's stable ones (checked here too)."""
    compiled_equals_interpreted(orderings, *ORDERING_ARGS)
    outs = orderings(*ORDERING_ARGS)
    for axis in (0, 1, 2):
        np.testing.assert_array_equal(outs[2 * axis + 1],
                                      np.argsort(TIED, axis=axis, kind="stable"))
    np.testing.assert_array_equal(outs[-2], np.searchsorted(SORTED, KEYS))


@pytest.mark.skipif(not LONG, reason="a second orderings program: CFGRAD_HYPOTHESIS=long")
def test_more_orderings_and_a_sorts_gradient() -> None:
    compiled_equals_interpreted(cg.value_and_grad(more_orderings, has_aux=True),
                                *ORDERING_ARGS)


# -- scans: the output stack is written in place, row by row ------------------------------

W = np.array([[0.5, -0.25, 0.125], [0.25, 0.5, -0.5], [0.0, 0.25, 0.75]])
XS = np.linspace(-1.0, 1.0, 21).reshape(7, 3)
H0 = np.array([0.1, -0.2, 0.3])


def rnn(h0: Any, xs: Any, strategy: Any = None) -> Any:
    """An RNN-like scan: a carry, rows of xs, two stacked outputs (rows and scalars)."""
    def step(h, x):
        h2 = h * 0.5 + h[::-1] * 0.25 + x * x
        return h2, (h2 * h, h2[0])
    h, (ys, zs) = cg.scan(step, h0, xs, checkpoint=strategy)
    return cnp.sum(ys * ys) + cnp.sum(zs) + cnp.sum(h), ys


def nested(h0: Any, xs: Any, outer: Any, inner: Any) -> Any:
    """A scan inside a loop (a stack per outer iteration, each kept by reference in the
    outer loop's snapshots under a recomputing strategy), then a reversed scan whose
    stack is returned."""
    def body(i, h):
        def step(c, x):
            return c * 0.75 + x, c * c
        c, ys = cg.scan(step, h, xs, checkpoint=inner)
        return c * 0.5 + 0.1 * cnp.sum(ys, axis=0)
    h = cg.fori_loop(0, 3, body, h0, checkpoint=outer)
    _, ys = cg.scan(lambda c, x: (c + x, c * x), h, xs, reverse=True)
    return cnp.sum(ys * ys), ys


def test_a_scan_compiles_with_its_gradient() -> None:
    """A scan with a carry and rows of xs, taped step by step (an RNN-like one, and
    recomputing strategies, whose programs take Numba 10-20 s, run under
    CFGRAD_HYPOTHESIS=long, below): the value, the stack and the gradients with respect
    to the initial carry and every row of xs."""
    def f(h0, xs):
        h, ys = cg.scan(lambda h, x: (h * 0.5 + x * h, h * x), h0, xs)
        return cnp.sum(ys * ys) + cnp.sum(h), ys
    compiled_equals_interpreted(cg.value_and_grad(f, argnums=(0, 1), has_aux=True), H0, XS)


@pytest.mark.skipif(not LONG, reason="every strategy's scan: CFGRAD_HYPOTHESIS=long")
@pytest.mark.parametrize("strategy", [StoreAll(), Recompute(), EveryK(2), Binomial(3),
                                      Online(2)], ids=repr)
def test_a_scan_under_each_strategy(strategy: Any) -> None:
    """The RNN-like scan (two stacks) and the nested scans, under `strategy`."""
    def f(h0, xs):
        return rnn(h0, xs, strategy)[0] + nested(h0, xs, strategy, strategy)[0]
    compiled_equals_interpreted(cg.value_and_grad(f, argnums=(0, 1)), H0, XS)


# -- the fallback warning: the line, its code, the reason, a rewrite -----------------------


class _MyStoreAll(StoreAll):
    """A strategy of the user's own (a subclass): it runs in the interpreter."""


def _sorted_complex(z):
    return cnp.sort(z) * 2.0


def _own_strategy(x):
    return cg.fori_loop(0, 3, lambda i, c: c * c * 0.5, x, checkpoint=_MyStoreAll())


def test_the_fallback_warning_names_the_line_its_code_and_a_rewrite() -> None:
    """What cannot compile is named by the line of the user's function that holds it,
    with that line's code and the reason, and a rewrite where there is one; the program
    runs in the interpreter, or raises CompileError with fallback=False."""
    here = os.path.basename(__file__)
    z = np.array([1.0 + 2.0j, -1.0 + 0.0j, 1.0 - 1.0j])
    line = _sorted_complex.__code__.co_firstlineno + 1
    with pytest.warns(cg.CompileWarning) as caught:
        got = cg.jit(_sorted_complex)(z)
    assert str(caught[0].message) == (
        f"cfgrad.jit of _sorted_complex runs in the interpreter: {here}:{line} "
        "`return cnp.sort(z) * 2.0`: sort of complex c128[3] (compiled: real numbers)")
    assert_same_bits(got, _sorted_complex(z))

    line = _own_strategy.__code__.co_firstlineno + 1
    with pytest.raises(cg.CompileError) as raised:
        cg.jit(cg.grad(_own_strategy), fallback=False)(0.5)
    assert str(raised.value).startswith(
        f"cfgrad.jit of grad(_own_strategy): cannot compile: {here}:{line} `return "
        "cg.fori_loop(0, 3, lambda i, c: c * c * 0.5, x, checkpoint=_MyStoreAll())`: loop#0 ")
    assert str(raised.value).endswith(
        "a strategy of your own runs in the interpreter; rewrite: a strategy of "
        "cfgrad.checkpoint (StoreAll, Recompute, EveryK, Binomial, Online) compiles")
