"""Compiled runs report the interpreter's statistics: under `recorded_runs()`, a call of
`cg.jit(cg.grad(f))` collects the same `(of, RunStats)` list as the interpreter running
the same Program: trip counts, forward and recomputed steps, peak snapshots and bytes,
and the schedules of strategies made with trace=True.

A compiled run logs the trip count of each loop execution, and
`cfgrad.schedule.replayed_stats` replays the strategies from those. So the compiled
programs here (each compiles only its recording variant: a Numba compile costs seconds)
check the log: a loop inside a recomputing loop (whose recomputation re-runs the inner
loop) at trip counts 0, 1 and 7, and pullbacks nested in a pullback (a second
derivative). That nested pullbacks run their loops under the strategy of the call
around them is checked on the generated module. The replay is then checked for every
strategy on fori and while loops and every nested pair of strategies against the
interpreter alone, from the trip counts the interpreter reports, which is what the
compiled log holds."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from test_jit_calls import interpreted
from test_jit_checkpoint import STRATEGIES, nested

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad.checkpoint import Binomial, traced
from cfgrad.native import NativeProgram
from cfgrad.nested import recorded_runs
from cfgrad.schedule import replayed_stats
from cfgrad.schedule_machine import BINOMIAL


def g(y: Any) -> Any:
    return cg.fori_loop(0, 5, lambda i, c: cnp.sin(c) * y + 0.1, y)


def second_order(x: Any) -> Any:
    """Three pullbacks, two nested in the third: of g (in the forward run) and of g's
    JVP program (in the adjoint, differentiating the first)."""
    return cg.grad(cg.grad(g))(x)


def second_order_under_binomial(x: Any) -> Any:
    """The same, g's loop choosing no strategy: the nested pullbacks run it under the
    outer gradient's Binomial(2), as in the interpreter (not compiled below: a
    recomputing loop in two nested pullbacks costs Numba 10-15 s)."""
    return cg.grad(cg.grad(g), checkpoint=Binomial(2))(x)


# Binomial(2) around Binomial(3) is a program test_jit_checkpoint compiles too: the
# ordinary variant the test without recording runs is then compiled once
NESTED = cg.grad(nested(traced(Binomial(2)), traced(Binomial(3))))
COMPILED = {"nested loops": (NESTED, [(0.7, 0), (0.7, 1), (0.7, 7)]),
            "second order": (second_order, [(0.5,)])}
_jitted: dict[str, Any] = {}


def jitted(name: str) -> Any:
    """One jitted function per program, shared by the tests (fallback: an error)."""
    return _jitted.setdefault(name, cg.jit(COMPILED[name][0], fallback=False))


def recorded(run: Any, *args: Any) -> tuple[Any, list]:
    with recorded_runs() as runs:
        out = run(*args)
    return out, runs


@pytest.mark.parametrize("name", list(COMPILED))
def test_compiled_runs_record_the_interpreters_statistics(name: str) -> None:
    f, calls = COMPILED[name]
    for args in calls:
        out, got = recorded(jitted(name), *args)
        want_out, want = recorded(interpreted(f), *args)
        assert np.asarray(out).tobytes() == np.asarray(want_out).tobytes()
        assert got and got == want, (args, got, want)


def test_the_runs_compared_are_not_trivial() -> None:
    """What the comparison above compares: recomputation, snapshots and bytes held, a
    schedule per traced loop, the trip counts of a loop inside a loop, nested pullbacks
    under the strategy of the call around them."""
    _, runs = recorded(interpreted(NESTED), 0.7, 7)
    (of, stats), = runs
    outer, inner = stats.loops
    assert of == "vjp(f, wrt=[0])"
    assert inner.trip_counts == [0, 1, 2, 0, 1, 2, 0] and inner.recompute_steps > 0
    assert outer.peak_snapshots > 0 and inner.peak_bytes > 0 and outer.schedule
    _, runs = recorded(interpreted(second_order), 0.5)
    assert [of for of, _ in runs] == ["vjp(g, wrt=[0])", "vjp(g.jvp, wrt=[0])",
                                      "vjp(grad(g), wrt=[0])"]


def test_nested_pullbacks_take_the_strategy_of_the_call_around_them() -> None:
    """The functions of the nested pullbacks run g's loop under Binomial(2), the strategy
    their runs report (`runs`: each pullback function's `of` and loops, as the
    interpreter's runs name them), as the interpreter does."""
    j = cg.jit(second_order_under_binomial)
    native = NativeProgram(j._lowered((0.5,), {})[0].compiled)  # generated, not compiled
    _, runs = recorded(interpreted(second_order_under_binomial), 0.5)
    want = {of: [s.strategy for s in stats.loops] for of, stats in runs}
    assert want["vjp(g, wrt=[0])"] == ["Binomial(2)"]
    assert {of: [repr(f.strategy) for f in loops] for of, loops in native.runs} == want
    assert native.source.count(f"SM.sweep_begin(sw0, np.int64({BINOMIAL}), np.int64(2),") == 2


def test_a_call_without_recording_records_nothing_and_gives_the_same_result() -> None:
    with recorded_runs() as runs:
        with recorded_runs() as inner:  # the innermost collector gets the runs
            recorded_out = jitted("nested loops")(0.7, 7)
    assert runs == [] and len(inner) == 1
    assert np.asarray(jitted("nested loops")(0.7, 7)).tobytes() == \
        np.asarray(recorded_out).tobytes()


# ---------------------------------------------------------------------------------
# The replay, from the interpreter's trip counts
# ---------------------------------------------------------------------------------


def step(c: tuple) -> tuple:
    x, k = c
    return x * 0.75 + 0.5 / (1 + x * x), k + 1


def every_strategy(x: Any, n: Any) -> Any:
    """Per strategy a while_loop, then a fori_loop under the traced copy: ten loops in
    sequence, each run once."""
    for s in STRATEGIES:
        x, _ = cg.while_loop(lambda c: c[1] < n, step, (x, 0), checkpoint=s)
        x = cg.fori_loop(0, n, lambda i, y: step((y, i))[0], x, checkpoint=traced(s))
    return x


def assert_replay_matches(f: Any, args: tuple, exits: Any) -> None:
    """The one run of `cg.grad(f)`, replayed from the exits `exits(loops)` gives for the
    interpreter's LoopStats, equals the interpreter's statistics of it."""
    g = cg.grad(f)
    entry, leaves = cg.jit(g)._lowered(args, {})
    (of, loops), = NativeProgram(entry.compiled).runs  # its facts (nothing compiled)
    _, runs = recorded(interpreted(g), *args)
    (want_of, want), = runs
    assert of == want_of
    assert replayed_stats(loops, exits(want.loops)) == want


@pytest.mark.parametrize("n", [0, 1, 7])
def test_every_strategy_on_fori_and_while_loops(n: int) -> None:
    assert_replay_matches(every_strategy, (0.3, n),
                          lambda loops: [(j, s.trip_counts[0], -1)
                                         for j, s in enumerate(loops)])


@pytest.mark.parametrize(("outer", "inner"),
                         [(o, i) for o in STRATEGIES for i in STRATEGIES], ids=repr)
def test_every_pair_of_nested_strategies(outer: Any, inner: Any) -> None:
    """The inner loop runs once per outer iteration: exits of the inner execution of
    each iteration, then of the outer."""
    def exits(loops: list) -> list[tuple[int, int, int]]:
        outer_stats, inner_stats = loops
        return [(1, trips, t) for t, trips in enumerate(inner_stats.trip_counts)] + [
            (0, outer_stats.trip_counts[0], -1)]
    assert_replay_matches(nested(traced(outer), traced(inner)), (0.7, 7), exits)
