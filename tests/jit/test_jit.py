"""`cg.jit`: the compiled path against the interpreter on control flow, and its fallback.

The control-flow programs here use only primitives the Numba backend compiles, under the
default StoreAll, so their tests assert `info(...).backend == "numba"`: a silent fallback
to the interpreter would otherwise pass every comparison. They run only + - * /, abs,
comparisons and selects, so compiled and interpreted results must be the same bits (IEEE
arithmetic rounds alike in both). Transcendental functions may differ in the last place
(Numba calls libm, numpy its own SIMD loops): test_jit_properties.py compares those with
rtol=1e-13 (`assert_close`). The fallback tests check programs that must not compile.

Numba compiles each distinct program once per process (about 0.3-3 s), so the programs
are few and reused across parameters: trip counts, indices and branch choices are
runtime arguments of one compiled program.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import seed_programs as seeds
from test_control_flow import (
    SWAP_GRADS,
    geometric_fori,
    newton_sqrt,
    swap_fori,
    swap_while,
    while_seed,
)
from test_errors import runaway, runaway_inner

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad import tree

# ---------------------------------------------------------------------------------
# Comparisons
# ---------------------------------------------------------------------------------


def paired_leaves(got: Any, want: Any) -> list[tuple[np.ndarray, np.ndarray]]:
    """The leaves of two results side by side, after checking that the trees have as many
    leaves and each pair the same dtype and shape."""
    got_leaves, want_leaves = tree.leaves(got), tree.leaves(want)
    assert len(got_leaves) == len(want_leaves)
    pairs = [(np.asarray(g), np.asarray(w)) for g, w in zip(got_leaves, want_leaves)]
    for g, w in pairs:
        assert (g.dtype, g.shape) == (w.dtype, w.shape)
    return pairs


def assert_bitwise(got: Any, want: Any) -> None:
    """Same tree, and every leaf the same dtype, shape and bytes."""
    for g, w in paired_leaves(got, want):
        assert g.tobytes() == w.tobytes(), (g, w)


def assert_close(got: Any, want: Any) -> None:
    """Same tree, dtypes and shapes; values within a few ulps (for transcendentals)."""
    for g, w in paired_leaves(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-13, atol=1e-300)


def compiled(fun: Any, *args: Any, **kwargs: Any) -> cg.jit:
    """`cg.jit(fun, ...)`, asserted to compile for `args` (no fallback hides)."""
    jitted = cg.jit(fun, **kwargs)
    info = jitted.info(*args)
    assert info.backend == "numba", info.reason
    return jitted


def check(fun: Any, arg_sets: list[tuple], argnums: Any = 0) -> None:
    """`fun` and its `value_and_grad`, compiled, against the interpreter at each of
    `arg_sets` (one signature: one compilation each; `grad` is the same vjp_call without
    the value, compiled in test_carry_that_swaps), bit for bit."""
    transforms = [fun, cg.value_and_grad(fun, argnums)]
    jitted = [compiled(t, *arg_sets[0]) for t in transforms]
    for args in arg_sets:
        for t, j in zip(transforms, jitted):
            assert_bitwise(j(*args), t(*args))


# ---------------------------------------------------------------------------------
# Control flow, bitwise (only arithmetic, comparisons and selects run)
# ---------------------------------------------------------------------------------


def test_seed_cond_both_ways() -> None:
    check(seeds.cond_example, [(1.0, 2.0), (3.0, 2.0), (2.0, 2.0)], argnums=(0, 1))


def test_while_loop_zero_one_and_many_trips() -> None:
    check(while_seed, [(1.5, n) for n in (0, 1, 2, 7)])


def test_fori_loop_zero_one_many_and_reversed_bounds() -> None:
    """lo > hi and lo == hi run no iteration; negative lo counts up from there."""
    bounds = [(0, 0), (3, 1), (2, 3), (0, 6), (-2, 3)]
    check(geometric_fori, [(0.8, 1.7, lo, hi) for lo, hi in bounds], argnums=(0, 1))


def test_carry_that_swaps() -> None:
    """Phi copies are parallel in the compiled state machine as in the interpreter."""
    trips = sorted(SWAP_GRADS)
    check(swap_while, [(0.3, 0.7, n) for n in trips], argnums=(0, 1))
    grad = compiled(cg.grad(swap_fori, (0, 1)), 0.3, 0.7, 0)
    assert [grad(0.3, 0.7, n) for n in trips] == [SWAP_GRADS[n] for n in trips]


def test_switch_index_out_of_range_is_clamped() -> None:
    def f(i, x):
        return cg.switch(i, [lambda x: 2.0 * x, lambda x: x * x, lambda x: x - 5.0], x)

    check(f, [(i, 1.5) for i in (-5, -1, 0, 1, 2, 3, 100)], argnums=1)
    jitted = cg.jit(f)
    assert (jitted(-5, 1.5), jitted(100, 1.5)) == (3.0, -3.5)


def nested_triangle(x, n):
    """The inner loop runs i times in outer iteration i (zero the first time)."""
    return cg.fori_loop(0, n, lambda i, c: cg.fori_loop(0, i, lambda j, d: d * x + 0.5, c),
                        1.0)


def branches_in_loop(x, y, n):
    """Decisions that change from iteration to iteration: reversed last in first out."""
    def body(i, c):
        return cg.cond((i % 3 == 0) | (c > 4.0), lambda: c * x - y, lambda: c + x * y)

    return cg.fori_loop(0, n, body, y)


def loops_in_branches(x, n):
    """A while loop in one branch of a cond, a fori_loop in the other."""
    return cg.cond(x > 0.0,
                   lambda: cg.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * x),
                                         (0, x))[1],
                   lambda: cg.fori_loop(0, n, lambda i, c: c - x * c, x))


def test_nested_loops_and_branches() -> None:
    check(nested_triangle, [(1.1, n) for n in (0, 1, 5)])
    check(branches_in_loop, [(1.3, 0.4, n) for n in (0, 1, 7)], argnums=(0, 1))
    check(loops_in_branches, [(x, n) for x in (0.9, -0.6) for n in (0, 3)])


def test_while_with_max_iters_that_does_not_trigger() -> None:
    def f(x, n):
        return cg.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * x - 1.0),
                             (0, x), max_iters=4)[1]

    check(f, [(1.25, n) for n in (0, 4)])


def test_newton_sqrt_whose_body_reads_cond_fun() -> None:
    """A data-dependent trip count, and a body reusing the residual cond_fun computed."""
    check(newton_sqrt, [(4.0,), (0.25,)])


def test_loop_limit_error_is_raised_with_the_interpreters_message() -> None:
    """The compiled forward and gradient raise `LoopLimitError`, worded as the
    interpreter running the same Program words it (`cg.vjp` for the forward: the eager
    call words it without the loop's id, and is no Program run)."""

    def message(call: Any) -> str:
        with pytest.raises(cg.LoopLimitError) as info:
            call()
        return str(info.value)

    interpreted = message(lambda: cg.vjp(runaway, 1.0))
    assert message(lambda: compiled(runaway, 1.0)(1.0)) == interpreted
    interpreted = message(lambda: cg.grad(runaway_inner)(0.0))
    assert message(lambda: compiled(cg.grad(runaway_inner), 0.0)(0.0)) == interpreted


def test_switch_of_one_branch_compiles() -> None:
    def f(i, x):
        return cg.switch(i, [lambda x: 2.0 * x], x)

    assert_bitwise(compiled(f, 3, 1.5)(3, 1.5), f(3, 1.5))


def test_gradient_of_a_sum_added_to_a_vector_compiles() -> None:
    def f(x):
        return cnp.sum(x + cnp.sum(x))

    x = np.array([0.3, -0.7, 1.1])
    assert_bitwise(compiled(cg.grad(f), x)(x), cg.grad(f)(x))


def test_gradient_of_a_scalar_scaling_a_vector_in_a_branch_compiles() -> None:
    def f(x, y):
        return cnp.sum(cg.cond(y > 0, lambda: x * y, lambda: x))

    x = np.array([0.3, -0.7, 1.1])
    assert_bitwise(compiled(cg.grad(f, 1), x, 0.9)(x, 0.9), cg.grad(f, 1)(x, 0.9))


def test_elementwise_chains_fuse_into_one_expression_with_the_same_bits() -> None:
    """A chain of elementwise nodes on arrays is one Numba array expression (one loop, no
    temporaries), in the forward sweep and in the adjoint, in float32 and float64; a value
    read twice (`y`) or taped for the adjoint (`x * x`) keeps its variable. The bits are the
    interpreter's (sqrt is correctly rounded in both; tanh would not be, see
    test_kernels)."""

    def f(x, n):
        def body(i, s):
            y = s * 0.5 + x
            return s + cnp.sqrt(y * y - x / 3.0 + 1.0) * (x * x) + y

        return cnp.sum(cg.fori_loop(0, n, body, x))

    for dtype in (np.float32, np.float64):
        x = np.linspace(-1.0, 1.0, 7).astype(dtype)
        jitted = compiled(cg.value_and_grad(f), x, 3)
        assert_bitwise(jitted(x, 3), cg.value_and_grad(f)(x, 3))
        assert_bitwise(jitted(x, 0), cg.value_and_grad(f)(x, 0))
    assert "np.sqrt((((" in jitted.info(x, 3).source  # y * y - x / 3.0 + 1.0 in the sqrt


def test_constant_index_arrays_gather_and_scatter_as_numpy_does() -> None:
    """Advanced indexing with constant index arrays (`cnp.diag`, `cnp.take`, `x[idx]`
    with arrays broadcast against each other, repeated indices whose cotangents add up)
    compiles, in the forward and in the adjoint's scatter, bitwise the interpreter's."""

    def f(x, y):
        d = cnp.diag(cnp.stack([y, 2.0 * y]))  # a 2x2 built through a scatter
        picked = x[np.array([0, 2])] * x[np.array([[1], [0]]), np.array([0, 1])]
        return cnp.sum(picked @ d + x[np.array([1, 1]), :]) + cnp.sum(cnp.take(x, 4) * y)

    x = np.arange(6.0).reshape(3, 2) * 0.3 - 0.5
    jitted = compiled(cg.value_and_grad(f, (0, 1)), x, 0.7)
    assert_bitwise(jitted(x, 0.7), cg.value_and_grad(f, (0, 1))(x, 0.7))


def test_maximum_and_minimum_of_signed_zeros_match_the_interpreter() -> None:
    def f(x, y):
        return cnp.maximum(x, y), cnp.minimum(x, y), cnp.maximum(y, x), cnp.minimum(y, x)

    assert_bitwise(compiled(f, -0.0, 0.0)(-0.0, 0.0), cg.vjp(f, -0.0, 0.0)[0])


def test_sign_of_negative_zero_matches_the_interpreter() -> None:
    assert_bitwise(compiled(cnp.sign, -0.0)(-0.0), cg.vjp(cnp.sign, -0.0)[0])


def test_a_generated_module_that_fails_to_import_fails_the_same_way_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cfgrad import native

    monkeypatch.setenv("CFGRAD_CACHE_DIR", str(tmp_path))
    for _ in range(2):
        with pytest.raises(SyntaxError):
            native._load("def main(:\n")


# ---------------------------------------------------------------------------------
# Fallback to the interpreter
# ---------------------------------------------------------------------------------


class KeepEverything(cg.checkpoint.StoreAll):
    """A strategy of the user's own (here StoreAll's behaviour under another class):
    compiled code follows only cfgrad's strategies, whose schedules it can derive."""

    def __repr__(self) -> str:
        return "KeepEverything()"


def own_strategy_loop(x):
    return cg.fori_loop(0, 6, lambda i, c: c * x + 0.25, x, checkpoint=KeepEverything())


def ordered(x):
    """A sort of complex numbers (numpy's lexicographic order), which compiles for reals."""
    return cnp.real(cnp.sort(cnp.stack([x, x * x]) * (1.0 + 1.0j)))[0] * 3.0


@pytest.mark.parametrize(("f", "words"), [
    (own_strategy_loop, ["loop#0", "KeepEverything()", "of your own"]),
    (ordered, ["sort of complex", "real numbers", "test_jit.py"]),
], ids=["own_strategy", "complex_sort"])
def test_fallback_warns_once_and_gives_the_interpreters_numbers(f: Any, words: list) -> None:
    """One CompileWarning for the signature however often it runs, naming the function
    and what could not compile; fallback=False raises that reason instead."""
    jitted = cg.jit(cg.grad(f))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = [jitted(x) for x in (0.5, 1.5, 0.5)]
        info = jitted.info(0.5)
    assert [type(w.message) for w in caught] == [cg.CompileWarning]
    assert info.backend == "interpreter"
    assert str(caught[0].message) == (
        f"cfgrad.jit of grad({f.__name__}) runs in the interpreter: {info.reason}")
    assert all(word in info.reason for word in words), info.reason
    assert_bitwise(results, [cg.grad(f)(x) for x in (0.5, 1.5, 0.5)])
    with pytest.raises(cg.CompileError, match=re.escape(info.reason)):
        cg.jit(cg.grad(f), fallback=False)(0.5)


def test_static_argnums_compile_one_version_per_value() -> None:
    def f(x, n, scale):
        return cg.fori_loop(0, n, lambda i, c: c * x + scale, x)

    jitted = compiled(f, 1.5, 3, 0.5, static_argnums=2)
    sources = {s: jitted.info(1.5, 3, s).source for s in (0.5, 2.0)}
    assert sources[0.5] != sources[2.0]
    for s in (0.5, 2.0):
        assert jitted.info(1.5, 3, s).backend == "numba"
        assert_bitwise(jitted(1.5, 3, s), f(1.5, 3, s))


def test_jitted_function_inside_grad_is_traced_inline() -> None:
    """cg.grad traces through the jitted function as through `while_seed` itself (a
    compiled black box would have no derivative)."""
    jitted = cg.jit(while_seed)
    for n in (0, 4):
        assert_bitwise(cg.value_and_grad(jitted)(1.5, n), cg.value_and_grad(while_seed)(1.5, n))


def test_second_process_loads_machine_code_from_the_disk_cache(tmp_path: Path) -> None:
    script = textwrap.dedent("""
        import cfgrad as cg
        def f(x, n):
            return cg.fori_loop(0, n, lambda i, c: c * x + 1.0, x)
        info = cg.jit(f).info(0.5, 3)
        print(info.backend, info.from_disk_cache)
    """)
    env = {**os.environ, "CFGRAD_CACHE_DIR": str(tmp_path),
           "PYTHONPATH": str(Path(__file__).parents[2])}
    runs = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                           text=True, check=True).stdout.split() for _ in range(2)]
    assert runs == [["numba", "False"], ["numba", "True"]]
