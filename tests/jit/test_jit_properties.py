"""`cg.jit` over the random control-flow programs of the property tests.

The programs come from the generators of tests/transforms/test_properties.py (statements over a
state `(a, b, v)` with cond / switch / while_loop / fori_loop nested to depth 3, swapping
carries, zero-trip loops, clamped switch indices, bounded while loops) and of
tests/seed_programs.py (expression trees with loops whose bounds may be traced). Each is
compiled forward and as `value_and_grad`, asserted to run on Numba (no silent fallback),
and compared with the interpreter running the same function.

Every property-test program applies tanh (its `Assign` statements), so those compare with
rtol=1e-13: Numba's libm and numpy's SIMD loops may round transcendentals differently in
the last place. An expression tree of seed_programs without sin/cos/tanh/sigmoid runs
only + - * max, comparisons and full sums, and must match bit for bit.

Each example compiles two fresh programs (1-8 s together), hence the few examples by
default (three programs in all); `CFGRAD_HYPOTHESIS=long` runs twenty times as many.
"""

from __future__ import annotations

import warnings

import seed_programs as seeds
from hypothesis import Phase, example, given, settings
from test_jit import assert_bitwise, assert_close, compiled
from test_properties import cases, cfgrad_functions

import cfgrad as cg

TRANSCENDENTAL = {"sin", "cos", "tanh", "sigmoid"}
# Shrinking recompiles every candidate program (seconds each): a failure is reported as
# found, with its reproduction blob.
NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)
SCALE = max(1, settings.default.max_examples // 25)


@given(cases())
@settings(max_examples=2 * SCALE, phases=NO_SHRINK)
def test_random_programs_compiled_match_the_interpreter(case: tuple) -> None:
    prog, a, b, v = case
    program, scalar = cfgrad_functions(prog)
    args = (a, b, v)
    assert_close(compiled(program, *args)(*args), program(*args))
    vg = cg.value_and_grad(scalar, (0, 1, 2))
    assert_close(compiled(vg, *args)(*args), vg(*args))


def subtrees(expr: tuple) -> list[tuple]:
    """`expr` and every expression under it (a node's tuple holds sub-trees, a switch's
    list of them, and plain labels)."""
    children = [x for x in expr[1:] if isinstance(x, tuple)]
    children += [b for x in expr[1:] if isinstance(x, list) for b in x]
    return [expr] + [t for c in children for t in subtrees(c)]


def uses_transcendentals(expr: tuple) -> bool:
    """Whether an expression tree applies sin, cos, tanh or sigmoid anywhere."""
    return any(e[0] == "unary" and e[1] in TRANSCENDENTAL for e in subtrees(expr))


# An explicit example: the bitwise comparison runs, not only the tolerant one (a switch in
# a cond, arithmetic only; the loops' bitwise comparisons are in test_jit.py).
ARITHMETIC_ONLY = ("cond", ("binary", "sub", ("scale", ("leaf", 0)), ("leaf", 0)),
                   ("switch", ("shift", ("leaf", 0), 0.5),
                    [("unary", "square", ("leaf", 0)), ("shift", ("leaf", 0), -1.25)]),
                   ("binary", "max", ("leaf", 0), ("unary", "neg", ("leaf", 0))))


@given(seeds.expressions())
@example(ARITHMETIC_ONLY)
@settings(max_examples=SCALE, phases=NO_SHRINK)
def test_random_expressions_compiled_match_the_interpreter(expr: tuple) -> None:
    """`build(expr)` and its value_and_grad, compiled, against the interpreter."""
    f = seeds.build(expr)
    args = seeds.generated_args()
    same = assert_close if uses_transcendentals(expr) else assert_bitwise
    same(compiled(f, *args)(*args), f(*args))
    vg = cg.value_and_grad(f, (0, 1, 2))
    jitted = cg.jit(vg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cg.CompileWarning)
        info = jitted.info(*args)
    assert info.backend == "numba", info.reason
    same(jitted(*args), vg(*args))
