"""Deeply nested control flow lowers, verifies and differentiates in time about linear in
its size: the verifier, the structure walk and the reverse builder keep their own stacks
and answer nesting questions in constant time (a 400-deep nested cond took seconds to
verify when every region's blocks were collected and compared pairwise)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

import cfgrad as cg
from cfgrad.ir import innermost_regions
from cfgrad.verify import verify

DEPTH = 400


@contextmanager
def recursion_limit(limit: int) -> Iterator[None]:
    """Tracing runs the user's nested branch functions inside one another, a few Python
    frames per level, so the test's own function needs more than the default 1000."""
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(max(previous, limit))
    try:
        yield
    finally:
        sys.setrecursionlimit(previous)


def nested_cond(depth: int):
    """cond inside the true branch of cond inside … `depth` times; every predicate holds
    at x = 1, so f(x) = (x + depth) * 3 and f'(x) = 3."""
    def level(k, y):
        if k == 0:
            return y * 3.0
        return cg.cond(y > 0.0, lambda: level(k - 1, y + 1.0), lambda: y * 2.0)

    return lambda x: level(depth, x)


def test_deeply_nested_cond_lowers_and_differentiates():
    f = nested_cond(DEPTH)
    with recursion_limit(20 * DEPTH):
        value, g = cg.value_and_grad(f)(1.0)
        program = cg.lower(f, 1.0)
    assert (value, g) == ((1.0 + DEPTH) * 3.0, 3.0)
    assert len(program.ifs()) == DEPTH
    innermost = program.ifs()[-1]
    assert sum(1 for r in program.ifs() if r.parent is not None) == DEPTH - 1
    assert innermost_regions(program)[innermost.merge] is program.ifs()[-2]
    verify(cg.adjoint(program))


def test_deeply_nested_loops_lower_and_differentiate():
    def f(x):
        def level(k, y):
            if k == 0:
                return y * 1.5
            return cg.fori_loop(0, 1, lambda i, c: level(k - 1, c), y)

        return level(DEPTH // 4, x)

    with recursion_limit(20 * DEPTH):
        assert cg.grad(f)(2.0) == 1.5
