"""Compiled checkpoint strategies: `cg.jit(cg.grad(f))` follows the schedule of the same
strategy object the interpreter runs (cfgrad/schedule.py), so gradients are bitwise the
interpreter's, for every strategy, at the top level and nested, for trip counts of 0, 1
and more. Bodies are arithmetic only (no transcendental functions, whose compiled math
library may differ in the last bit), so the comparison is exact.

A nested program takes Numba 7-15 s to compile, so by default the nested cases cover the
strategies whose tables differ most in kind (EveryK tapes whole segments, Online holds a
pending carry, Binomial recurses) and the top-level case covers all five in one program;
`CFGRAD_HYPOTHESIS=long` (the long profile of conftest.py) runs every pair."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

import cfgrad as cg
from cfgrad.checkpoint import Binomial, EveryK, Online, Recompute, StoreAll

STRATEGIES = [StoreAll(), Recompute(), EveryK(2), Binomial(3), Online(2)]
LONG = os.environ.get("CFGRAD_HYPOTHESIS") == "long"
OUTER = STRATEGIES if LONG else [EveryK(2), Online(2)]
INNER = STRATEGIES[1:] if LONG else [Binomial(3)]


def nested(outer_strategy, inner_strategy):
    """An outer fori_loop whose body runs an inner while_loop of 0, 1 or 2 trips (set by
    the outer index) with a branch inside: regions of every kind under both strategies."""
    def f(y0, n):
        def outer(i, y):
            def inner(c):
                z, k = c
                z = cg.cond(z > 0.5, lambda: z * 0.9 + 0.01 * y, lambda: z * z + 0.3)
                return z, k + 1

            z, _ = cg.while_loop(lambda c: c[1] < i % 3, inner, (y, 0),
                                 checkpoint=inner_strategy)
            return 0.5 * z + 0.2 * y * y
        return cg.fori_loop(0, n, outer, y0, checkpoint=outer_strategy)
    return f


def assert_compiled_matches(f, *args) -> None:
    g = cg.grad(f)
    jitted = cg.jit(g, fallback=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", cg.CompileWarning)
        assert jitted.info(*args).backend == "numba"
    for n in (0, 1, 7):
        got, want = jitted(args[0], n), g(args[0], n)
        assert np.asarray(got).tobytes() == np.asarray(want).tobytes(), (n, got, want)


@pytest.mark.parametrize("outer", OUTER, ids=repr)
def test_each_strategy_on_a_loop_with_a_loop_inside(outer) -> None:
    assert_compiled_matches(nested(outer, None), 0.7, 7)


@pytest.mark.parametrize("inner", INNER, ids=repr)
def test_each_recomputing_strategy_inside_a_recomputing_loop(inner) -> None:
    assert_compiled_matches(nested(Binomial(2), inner), 0.7, 7)


def test_a_while_loop_under_each_strategy_in_one_program() -> None:
    """Five top-level while loops in sequence, one per strategy, the carry of each the
    input of the next: each keeps its own snapshots, tables and records."""
    def step(c):
        x, k = c
        return x * 0.75 + 0.5 / (1 + x * x), k + 1

    def f(x, n):
        for s in STRATEGIES:
            x, _ = cg.while_loop(lambda c: c[1] < n, step, (x, 0), checkpoint=s)
        return x
    assert_compiled_matches(f, 0.3, 7)
