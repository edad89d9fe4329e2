"""`cg.debug.print` and `cg.debug.callback`: they act when the program runs (not while it
is traced), in program order, inside branches and loops, with runtime values; gradients
are the same with and without them; iterations a checkpoint strategy recomputes in the
reverse pass are silent, so the output is the same under every strategy."""

from __future__ import annotations

import numpy as np
import pytest

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad.checkpoint import Binomial, EveryK, Online, Recompute, StoreAll
from cfgrad.passes import ADJOINT_PIPELINE, JVP_PIPELINE, run_passes

STRATEGIES = [None, StoreAll(), Recompute(), Binomial(2), EveryK(2), Online(2)]


def loop_with_branch(x, debug=True):
    """A fori_loop whose body prints, then branches, printing in one branch only."""
    def body(i, c):
        if debug:
            cg.debug.print("iter {}: c={c:.4f}", i, c=c)

        def big(c):
            if debug:
                cg.debug.print("  big {:.4f}", c)
            return cnp.sin(c)

        return cg.cond(c > 0.5, big, lambda c: c * 2.0, c)

    if debug:
        cg.debug.print("start {:.2f}", x)
    return cg.fori_loop(0, 4, body, x) ** 2


def expected_lines(x):
    lines = [f"start {x:.2f}"]
    c = x
    for i in range(4):
        lines.append(f"iter {i}: c={c:.4f}")
        if c > 0.5:
            lines.append(f"  big {c:.4f}")
            c = np.sin(c)
        else:
            c = c * 2.0
    return lines


def printed(capsys):
    return capsys.readouterr().out.splitlines()


def test_nothing_is_printed_while_tracing(capsys):
    program = cg.lower(loop_with_branch, 0.3)
    assert printed(capsys) == []
    assert "debug_callback" in program.text()


@pytest.mark.parametrize("strategy", STRATEGIES, ids=repr)
def test_prints_in_order_at_run_time_once_under_every_strategy(capsys, strategy):
    for x in (0.3, 0.7):  # the same Program, other values and other branches
        g = cg.grad(loop_with_branch, checkpoint=strategy)(x)
        assert printed(capsys) == expected_lines(x)
        assert g == cg.grad(lambda x: loop_with_branch(x, debug=False),
                            checkpoint=strategy)(x)


def test_while_loop_condition_and_body_print_each_evaluation(capsys):
    def f(x):
        def cond(c):
            cg.debug.print("cond {}", c)
            return c < 2.0

        def body(c):
            cg.debug.print("body {}", c)
            return c * 1.5

        return cg.while_loop(cond, body, x, checkpoint=Recompute())

    g = cg.grad(f)(0.5)
    assert printed(capsys) == ["cond 0.5", "body 0.5", "cond 0.75", "body 0.75",
                               "cond 1.125", "body 1.125", "cond 1.6875", "body 1.6875",
                               "cond 2.53125"]
    np.testing.assert_allclose(g, 1.5 ** 4)


def test_nested_recomputed_loops_print_the_forward_run_only(capsys):
    def f(x):
        def outer(i, c):
            cg.debug.print("outer {}", i)
            return cg.fori_loop(
                0, 2, lambda j, d: (cg.debug.print(" inner {} {}", i, j), cnp.sin(d))[1],
                c, checkpoint=Recompute())

        return cg.fori_loop(0, 3, outer, x, checkpoint=Binomial(1))

    pullback = cg.vjp(f, 0.5)[1]
    forward = printed(capsys)
    assert forward == ["outer 0", " inner 0 0", " inner 0 1", "outer 1", " inner 1 0",
                       " inner 1 1", "outer 2", " inner 2 0", " inner 2 1"]
    pullback(1.0)
    assert printed(capsys) == []  # recomputation in the reverse pass is silent
    assert pullback.stats.loops[0].recompute_steps > 0
    pullback(1.0)  # a second call runs the forward program again, silently
    assert printed(capsys) == []


def test_callback_gets_numpy_arrays_and_static_values():
    seen = []

    def f(x, y):
        cg.debug.callback(lambda a, b, k: seen.append((a, b, k)), x * 2.0, y, k="static")
        return cnp.sum(x * y)

    x, y = np.arange(3.0), 2.0
    g = cg.grad(f)(x, y)
    np.testing.assert_allclose(g, [2.0, 2.0, 2.0])
    (a, b, k), = seen
    assert isinstance(a, np.ndarray) and isinstance(b, np.ndarray)
    np.testing.assert_allclose(a, x * 2.0)
    assert b.shape == () and b == 2.0 and k == "static"


def test_outside_a_trace_it_acts_at_once(capsys):
    cg.debug.print("now {} {x}", 1.5, x=np.arange(2))
    assert printed(capsys) == ["now 1.5 [0 1]"]


def test_the_adjoint_has_no_print_and_passes_keep_it(capsys):
    program = cg.lower(loop_with_branch, 0.3)
    count = program.text().count("debug_callback")
    assert count == 3
    assert "debug_callback" not in cg.adjoint(program).text()
    # the passes never drop, merge or move it (they run on any Program)
    run_passes(program, ADJOINT_PIPELINE + JVP_PIPELINE)
    assert program.text().count("debug_callback") == count


def test_identical_prints_are_not_merged(capsys):
    def f(x):
        cg.debug.print("x {}", x)
        cg.debug.print("x {}", x)
        return x * x

    cg.grad(f)(1.0)
    assert printed(capsys) == ["x 1.0", "x 1.0"]


def test_forward_mode_prints_once(capsys):
    out, tangent = cg.jvp(loop_with_branch, (0.3,), (1.0,))
    assert printed(capsys) == expected_lines(0.3)
    np.testing.assert_allclose(tangent, cg.grad(loop_with_branch)(0.3))


def test_nested_transformations_print_once(capsys):
    def f(x):
        cg.debug.print("f {}", x)
        return cnp.sin(x) * x

    second = cg.grad(cg.grad(f))(0.3)
    assert printed(capsys) == ["f 0.3"]
    by_value_and_grad = cg.grad(lambda x: cg.value_and_grad(f)(x)[1])(0.3)
    assert printed(capsys) == ["f 0.3"]
    np.testing.assert_allclose(by_value_and_grad, second)


def test_program_text_shows_the_call():
    def f(x):
        cg.debug.print("x = {}", x)
        cg.debug.callback(np.shape, x)
        return x

    text = cg.lower(f, 1.0).text()
    assert "debug_callback %x {callback=print('x = {}')}" in text
    assert "debug_callback %x {callback=callback(shape)}" in text


@cg.custom_vjp
def square(x):
    return x * x


def _square_fwd(x):
    cg.debug.print("fwd {}", x)
    return x * x, x


def _square_bwd(x, ct):
    cg.debug.print("bwd {} {}", x, ct)
    return (2 * x * ct,)


square.defvjp(_square_fwd, _square_bwd)


@pytest.mark.parametrize("strategy", [StoreAll(), Recompute(), Binomial(1)], ids=repr)
def test_a_custom_vjp_bwd_prints_in_the_reverse_pass(capsys, strategy):
    """bwd runs only in the pullback, for the first time there: it prints (in reverse
    iteration order), while fwd, recomputed there by a strategy, does not again."""
    def f(x):
        return cg.fori_loop(0, 3, lambda i, c: square(c) * 0.5, x, checkpoint=strategy)

    g = cg.grad(f)(1.5)
    assert printed(capsys) == ["fwd 1.5", "fwd 1.125", "fwd 0.6328125",
                               "bwd 0.6328125 0.5", "bwd 1.125 0.31640625",
                               "bwd 1.5 0.35595703125"]
    np.testing.assert_allclose(g, 1.06787109375)
