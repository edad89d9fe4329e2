"""Loop checkpointing strategies (docs/checkpointing.md, issue 3): gradients, schedules, accounting.

Every strategy must run the same floating-point operations as StoreAll, so gradients are
compared bit for bit (`np.array_equal`), on random loops with branches, nested loops whose
trip count depends on the outer index, closures over outer values and swapping carries, and
on the random structured programs of test_properties.

Every recomputing strategy can record its schedule (`trace=True`); `validate` replays it
as a small state machine (the current state, the snapshots and tapes held) and checks it is
a legal reversal: advances start at the current state, stores happen at it, restores touch
only stored states, the snapshot budget is never exceeded, every iteration is reversed
exactly once in the order T-1 … 0 from a tape that is held, and nothing is left held.
The accounting (`forward_steps`, `recompute_steps`, `peak_snapshots`, `peak_bytes`) is
checked against the schedule and against the Griewank–Walther optimum of cfgrad.revolve
(itself checked against reference numbers in test_revolve.py).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import tracemalloc
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from test_properties import (
    Assign,
    Binary,
    Const,
    Fori,
    If,
    Prog,
    State,
    Switch,
    Unary,
    Var,
    While,
    cases,
    cfgrad_functions,
    state_leaves,
)

import cfgrad as cg
import cfgrad.numpy as cnp
import cfgrad.primitives
from cfgrad.checkpoint import (
    Binomial,
    EveryK,
    LoopStats,
    Online,
    Recompute,
    StoreAll,
    first_path,
    traced,
)
from cfgrad.revolve import optimal_cost, repetition_number, reversal_cost
from cfgrad.testing import check_grads

# One object per strategy for the whole module: strategies are stateless between runs, and
# holding them keeps their ids (the per-call strategy cache key) from being reused.
RECOMPUTING = (
    *(EveryK(k, trace=True) for k in range(1, 5)),
    Recompute(trace=True),
    *(Binomial(s, trace=True) for s in range(1, 6)),
    *(Online(s, trace=True) for s in range(1, 6)),
)
STRATEGIES = (StoreAll(), *RECOMPUTING)
LOSS_V = np.array([0.3, -1.1, 0.6])


# ---------------------------------------------------------------------------------
# The schedule-replay validator
# ---------------------------------------------------------------------------------


@dataclasses.dataclass
class Execution:
    """What the replay of one execution of a loop found."""

    trips: int
    reversed: bool  # False: abandoned (its enclosing loop dropped it and recomputed it)
    advances: Counter  # iteration -> untaped runs, the sweep's included
    swept_snapshots: tuple[int, ...]  # held when the sweep ended
    peak_snapshots: int
    peak_tapes: int
    evaluations: int  # "advance" and "taped" events


@dataclasses.dataclass
class _Run:
    """One execution of a loop while its region's schedule is being split."""

    events: list[tuple[str, int]]
    held: set[int]
    trips: int = 0
    swept_at: int = -1  # the index of the sweep's last event ("taped T-1"); -1: sweeping
    ends: str = ""  # "reverse" or "release" once its sweep has been matched to one


def split_executions(schedule: list[tuple[str, int]] | None) -> list[list[tuple[str, int]]]:
    """One loop region's schedule, cut into its executions (in the order they started).

    The schedule is made of three kinds of contiguous blocks (a region never runs inside
    itself, so nothing of another execution of it can happen inside one):

    - a sweep: "store 0" (never recorded otherwise: the reverse stores at split points
      > 0) up to its only "taped", T-1;
    - a reverse: "reverse T-1" up to "reverse 0" and the frees of whatever the execution
      still holds;
    - a release: the frees of an execution that will never be reversed (its enclosing
      loop dropped the iteration that ran it), "free 0" first.

    Which execution a reverse or a release belongs to is not written in the schedule, and
    the position of an execution in the sweep order does not tell: the iteration that drops
    an execution may itself have run the region zero times (no events at all), or not at
    all (the region sits in a branch it did not take), so the execution released may be
    the latest one or any earlier one. What does tell is this: the strategy is
    deterministic, so every execution with the same trip count has the same sweep, ending
    with the same snapshots. So a reverse of T iterations is given the latest swept
    execution of T iterations not given one yet (any other choice among those only
    permutes identical sweeps), and once every reverse is placed, each release goes to an
    execution left over whose sweep ended before it with exactly the snapshots it frees."""
    runs: list[_Run] = []
    releases: list[tuple[int, list[tuple[str, int]]]] = []  # (index, its frees)
    sweeping = reversing = None
    releasing = False
    for k, ev in enumerate(schedule or ()):
        what, t = ev
        if reversing is not None and reversing.ends == "reversed" and not (
                what == "free" and t in reversing.held):
            reversing = None  # its frees are over (held must be empty: replay checks it)
        if sweeping is not None:
            target = sweeping
            if what == "taped":
                sweeping.trips, sweeping.swept_at, sweeping = t + 1, k, None
        elif reversing is not None:
            target = reversing
            if ev == ("reverse", 0):
                reversing.ends = "reversed"
        elif ev == ("store", 0):
            target = sweeping = _Run([], set())
            runs.append(target)
        elif what == "reverse":
            target = reversing = next(
                (r for r in reversed(runs) if r.trips == t + 1 and not r.ends), None)
            assert target is not None, f"{ev} at {k}: no execution of {t + 1} iterations to reverse"
            target.ends = "reversed" if t == 0 else "reverse"
        elif what == "free":
            if t == 0 or not releasing:
                releases.append((k, []))
            releases[-1][1].append(ev)
            releasing = True
            continue
        else:
            raise AssertionError(f"{ev} at {k} is outside any sweep or reverse: {schedule}")
        releasing = False
        target.events.append(ev)
        if what == "store":
            target.held.add(t)
        elif what == "free":
            target.held.discard(t)
    for k, frees in releases:
        freed = {t for _, t in frees}
        owner = next((r for r in reversed(runs) if not r.ends and 0 <= r.swept_at < k
                      and r.held == freed), None)
        assert owner is not None, f"frees {frees} at {k} of no execution holding just those"
        owner.ends = "release"
        owner.events += frees
    return [r.events for r in runs]


def replay_execution(events: list[tuple[str, int]], budget: float, tape_budget: float
                     ) -> Execution:
    """Replay one execution's events as a state machine; AssertionError on any illegal
    step. `budget` bounds the snapshots held, `tape_budget` the tapes."""
    current, held, tapes = 0, set(), set()
    trips = next_reverse = None
    swept: tuple[int, ...] = ()
    advances: Counter = Counter()
    peak_held = peak_tapes = evaluations = 0
    where = functools.partial(_Where, events)  # built into a message only if it fails
    for k, (what, t) in enumerate(events):
        if what == "store":
            assert current == t and t not in held, f"store away from the current state: {where(k)}"
            held.add(t)
            peak_held = max(peak_held, len(held))
            assert len(held) <= budget, f"more than {budget} snapshots: {where(k)}"
        elif what == "free":
            assert t in held, f"free of a snapshot not held: {where(k)}"
            held.remove(t)
        elif what == "restore":
            assert trips is not None, f"restore during the sweep: {where(k)}"
            assert t in held, f"restore of a state not stored: {where(k)}"
            current = t
        elif what in ("advance", "taped"):
            assert current == t, f"{what} not from the current state: {where(k)}"
            assert trips is None or t < trips - 1, f"re-run of the last iteration: {where(k)}"
            current, evaluations = t + 1, evaluations + 1
            if what == "advance":
                advances[t] += 1
            else:
                tapes.add(t)
                peak_tapes = max(peak_tapes, len(tapes))
                assert len(tapes) <= tape_budget, f"more than {tape_budget} tapes: {where(k)}"
                if trips is None:  # the sweep's last iteration keeps its tape
                    trips, next_reverse, swept = t + 1, t, tuple(sorted(held))
        elif what == "reverse":
            assert trips is not None and t == next_reverse, f"out of order: {where(k)}"
            assert t in tapes, f"reverse of an iteration whose tape is not held: {where(k)}"
            tapes.remove(t)
            next_reverse -= 1
        else:
            raise AssertionError(f"unknown event {where(k)}")
    assert trips is not None, f"a sweep that never ended: {events}"
    complete = next_reverse == -1
    if complete:
        assert not held and not tapes, f"left held after the reverse: {held}, tapes {tapes}"
    else:
        assert next_reverse == trips - 1, f"a reverse that stopped at {next_reverse}: {events}"
    return Execution(trips, complete, advances, swept, peak_held, peak_tapes, evaluations)


class _Where:
    """An event and the schedule around it, formatted only if an assertion fails."""

    def __init__(self, events: list[tuple[str, int]], k: int):
        self.events, self.k = events, k

    def __str__(self) -> str:
        recent = self.events[max(0, self.k - 30):self.k + 1]
        return f"event {self.k} {self.events[self.k]}, after {recent}"


def budgets(strategy: Any) -> tuple[Callable[[int], float], float]:
    """(snapshots allowed for a loop of T iterations, tapes allowed) of a strategy."""
    if isinstance(strategy, EveryK):
        return (lambda T: math.ceil(T / strategy.k)), strategy.k
    if isinstance(strategy, Recompute):
        return (lambda T: 1), 1
    return (lambda T: strategy.snapshots), 1


def validate(stats: LoopStats, strategy: Any, top_level: bool = True) -> list[Execution]:
    """Replay every execution recorded for one loop region and check the region's
    accounting against the schedule. Nested loops (`top_level=False`) also run untaped
    inside their enclosing loop's re-advances, which count as recompute_steps but record
    no events, so only top-level loops have their evaluation counts matched."""
    allowed, tapes = budgets(strategy)
    runs = [replay_execution(ex, allowed(max(stats.trip_counts, default=0)), tapes)
            for ex in split_executions(stats.schedule)]
    for run in runs:
        assert run.peak_snapshots <= allowed(run.trips), (run, strategy)
    reversed_trips = sorted(r.trips for r in runs if r.reversed)
    assert reversed_trips == sorted(T for T in stats.trip_counts if T), (
        "every execution that ran must be reversed once")
    if top_level:
        assert len(runs) == len(reversed_trips) <= 1
        assert stats.forward_steps == sum(stats.trip_counts)
        assert stats.forward_steps + stats.recompute_steps == sum(r.evaluations for r in runs)
    assert (stats.snapshots, stats.bytes) == (0, 0), (
        f"{stats.name}: {stats.snapshots} snapshots / {stats.bytes} bytes still counted as "
        "held after the reverse pass")
    return runs


def validate_all(pullback_stats: Any, strategy_of: Callable[[LoopStats], Any],
                 nested: set[str]) -> None:
    for stats in pullback_stats.loops:
        strategy = strategy_of(stats)
        if stats.schedule is not None:
            validate(stats, strategy, top_level=stats.name not in nested)
        else:
            assert (stats.snapshots, stats.bytes) == (0, 0), stats


def test_validator_rejects_illegal_schedules() -> None:
    """The validator itself must be able to fail: each broken schedule is refused."""
    good = [("store", 0), ("advance", 0), ("taped", 1), ("reverse", 1), ("restore", 0),
            ("taped", 0), ("reverse", 0), ("free", 0)]
    assert replay_execution(good, 1, 1).reversed
    broken = {  # what is wrong -> how the validator must say so
        "not from the current state": [("store", 0), ("advance", 1)],
        "restore of a state not stored": good[:4] + [("restore", 1)],
        "out of order": good[:4] + [("restore", 0), ("taped", 0), ("reverse", 1)],
        "whose tape is not held": good[:4] + [("reverse", 0)],
        "store away from the current state": good[:4] + [("restore", 0), ("store", 1)],
        "left held after the reverse": good[:-1],
        "more than 1 snapshots": [("store", 0), ("advance", 0), ("store", 1), ("taped", 1)],
        "re-run of the last iteration": good[:4] + [("restore", 0), ("advance", 0),
                                                     ("taped", 1)],
        "restore during the sweep": [("store", 0), ("advance", 0), ("restore", 0)],
    }
    for message, schedule in broken.items():
        with pytest.raises(AssertionError, match=message):
            replay_execution(schedule, 1, 1)


def test_executions_of_a_nested_loop_are_told_apart() -> None:
    """Sweep A (2 iterations), sweep B (1) during which the enclosing loop drops A and
    frees its snapshot, B reversed, then C (a recomputation of A) swept and reversed."""
    a = [("store", 0), ("advance", 0), ("taped", 1)]
    b = [("store", 0), ("taped", 0)]
    c = [("store", 0), ("advance", 0), ("taped", 1), ("reverse", 1), ("restore", 0),
         ("taped", 0), ("reverse", 0), ("free", 0)]
    schedule = a + b + [("free", 0)] + [("reverse", 0), ("free", 0)] + c
    got = split_executions(schedule)
    assert sorted(got) == sorted([a + [("free", 0)], b + [("reverse", 0), ("free", 0)], c])
    runs = [replay_execution(ex, 1, 1) for ex in got]
    assert sorted((r.trips, r.reversed) for r in runs) == [(1, True), (2, False), (2, True)]


def test_a_released_execution_may_be_the_latest() -> None:
    """Sweep A (3 iterations), sweep B (2), then the enclosing loop drops B (its next
    iteration ran the loop zero times, which records nothing), then A is reversed: the
    release belongs to the latest execution, and the reverse to the one below it."""
    a = [("store", 0), ("advance", 0), ("advance", 1), ("taped", 2)]
    b = [("store", 0), ("advance", 0), ("taped", 1)]
    a_reverse = [("reverse", 2), ("restore", 0), ("advance", 0), ("taped", 1), ("reverse", 1),
                 ("restore", 0), ("taped", 0), ("reverse", 0), ("free", 0)]
    got = split_executions(a + b + [("free", 0)] + a_reverse)
    assert got == [a + a_reverse, b + [("free", 0)]]
    assert [replay_execution(ex, 1, 1).reversed for ex in got] == [True, False]


def test_splitter_refuses_what_no_execution_explains() -> None:
    with pytest.raises(AssertionError, match="no execution of 3 iterations"):
        split_executions([("store", 0), ("taped", 0), ("reverse", 2)])
    with pytest.raises(AssertionError, match="of no execution holding just those"):
        split_executions([("store", 0), ("taped", 0), ("free", 0), ("free", 0)])
    with pytest.raises(AssertionError, match="outside any sweep or reverse"):
        split_executions([("advance", 0)])


# ---------------------------------------------------------------------------------
# Random loops with controlled trip counts
# ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LoopCase:
    kind: str  # "fori" or "while"
    trips: int
    branch: bool  # a cond in the body (and the nested fori's), on data and iteration index
    swap: bool  # the carry swaps a and b
    closure: bool  # the body reads a value computed outside the loop
    inner: str | None  # a nested "fori"/"while" whose trip count depends on the outer index
    thr: float
    seed: int


def build(case: LoopCase, outer: Any = None, inner: Any = None) -> Callable:
    """A fresh function (lowering is cached per function) for `case`, with the outer and
    inner loops' own checkpoint choices."""

    def body(i: Any, a: Any, b: Any, v: Any, w: Any) -> tuple:
        fi = cnp.astype(i, cnp.float64)
        if case.branch:
            a = cg.cond(cnp.sin(3.0 * a + fi) > case.thr,
                        lambda: 0.9 * a + 0.1 * cnp.tanh(b),
                        lambda: 0.8 * a - 0.2 * cnp.sin(b + fi))
        else:
            a = 0.9 * a + 0.1 * cnp.tanh(b)
        if case.closure:
            b = 0.95 * b + 0.05 * w * cnp.cos(a)
        v = 0.7 * v + 0.3 * cnp.sin(a * v + b)
        if case.inner == "fori":  # reads b and v of the outer iteration
            def step(j: Any, d: Any) -> Any:
                new = 0.8 * d + 0.2 * cnp.cos(d * b + cnp.sum(v))
                if case.branch:
                    return cg.cond(cnp.sin(5.0 * d) > case.thr, lambda: new, lambda: 0.5 * new)
                return new

            a = cg.fori_loop(0, i % 3 + 1, step, a, checkpoint=inner)
        elif case.inner == "while":
            a = cg.while_loop(lambda c: (c[0] < i % 3) & (c[1] < 50.0),
                              lambda c: (c[0] + 1, 0.8 * c[1] + 0.2 * cnp.cos(c[1] * b)),
                              (0, a), checkpoint=inner)[1]
        if case.swap:
            a, b = b, a
        return a, b, v

    def f(x: Any, y: Any, v0: Any) -> Any:
        w = cnp.tanh(x) * 0.5  # an outer value the body closes over
        if case.kind == "fori":
            a, b, v = cg.fori_loop(0, case.trips, lambda i, c: body(i, *c, w), (x, y, v0),
                                   checkpoint=outer)
        else:
            _, a, b, v = cg.while_loop(
                lambda c: (c[0] < case.trips) & (c[1] > -100.0),
                lambda c: (c[0] + 1, *body(c[0], *c[1:], w)), (0, x, y, v0),
                checkpoint=outer)
        return a + 2.0 * b + cnp.sum(v * LOSS_V)

    return f


@st.composite
def loop_cases(draw: Any) -> LoopCase:
    """Trip counts at the edges of the revolve schedule: 0, 1, 2, s, s+1, C(s+r, s) and
    C(s+r, s)+1 for some s <= 5 and repetition number r, or a random count."""
    s, r = draw(st.integers(1, 5)), draw(st.integers(1, 3))
    beta = math.comb(s + r, s)
    trips = draw(st.sampled_from([0, 1, 2, s, s + 1, beta, beta + 1, draw(st.integers(0, 40))]))
    return LoopCase(draw(st.sampled_from(["fori", "while"])), trips, draw(st.booleans()),
                    draw(st.booleans()), draw(st.booleans()),
                    draw(st.sampled_from([None, "fori", "while"])),
                    draw(st.sampled_from([-0.5, 0.0, 0.4])), draw(st.integers(0, 2**32 - 1)))


def case_args(case: LoopCase) -> tuple:
    rng = np.random.default_rng(case.seed)
    x, y = (float(z) for z in rng.uniform(-1.0, 1.0, 2))
    return x, y, rng.uniform(-1.0, 1.0, 3)


def assert_bitwise(got: tuple, want: tuple, what: str) -> None:
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert np.array_equal(g, w) and np.shape(g) == np.shape(w), (
            f"{what}: cotangent {k} is {g!r}, StoreAll's {w!r}")


def strategy_lookup(call: Any, own: dict[str, Any]) -> Callable[[LoopStats], Any]:
    return lambda stats: own.get(stats.name, call)


@given(loop_cases(), st.sampled_from(STRATEGIES), st.sampled_from(STRATEGIES))
@settings(max_examples=50)
def test_random_loops_every_strategy_is_bitwise_storeall(case: LoopCase, inner: Any,
                                                          sample: Any) -> None:
    """Every strategy, at call level (nested loops included) and with the inner loop's own
    choice `inner`: values and gradients identical to StoreAll's, schedules legal. A sample
    strategy (as the outer loop's own choice) is checked against finite differences."""
    args = case_args(case)
    plain, mixed = build(case), build(case, inner=inner)
    nested = {"loop#1"} if case.inner else set()
    value, pullback = cg.vjp(plain, *args, checkpoint=StoreAll())
    want = pullback(1.0)
    assert pullback.stats.loops[0].trip_counts == [case.trips]
    # without a nested loop the inner choice is unused: `mixed` would run `plain` again
    variants = ((plain, {}), (mixed, {"loop#1": inner})) if case.inner else ((plain, {}),)
    runs = []  # gradients first: a wrong gradient is the worse failure to report
    for strategy in STRATEGIES:
        for f, own in variants:
            out, pb = cg.vjp(f, *args, checkpoint=strategy)
            assert np.array_equal(out, value)
            assert_bitwise(pb(1.0), want, f"{strategy} (inner {own or 'same'})")
            runs.append((pb.stats, strategy_lookup(strategy, own)))
    for stats, strategy_of in runs:
        validate_all(stats, strategy_of, nested)
    try:
        check_grads(build(case, outer=sample, inner=inner), args, modes=("rev",))
    except cg.PathInstabilityError:
        event("finite differences skipped: the path changes within eps")


@given(cases())
@settings(max_examples=40)
def test_random_programs_every_strategy_is_bitwise_storeall(case: tuple) -> None:
    """test_properties' random structured programs (nested conds, switches, fori and while
    loops up to depth 3, closures over every enclosing scope, swaps), every loop under one
    call-level strategy: forward values and cotangents identical to StoreAll's, and every
    region's schedule (nested ones included) a legal one."""
    assert_every_strategy_is_storeall(*case)


def assert_every_strategy_is_storeall(prog: Prog, a: float, b: float, v: np.ndarray
                                      ) -> list[tuple[Any, Any]]:
    """Run `prog` under each recomputing strategy: bitwise StoreAll's values and cotangents,
    schedules validated. Returns each run's statistics with its strategy."""
    program, _ = cfgrad_functions(prog)
    rng = np.random.default_rng(0)
    u = State(rng.standard_normal(), rng.standard_normal(), rng.standard_normal(prog.dim))
    value, pullback = cg.vjp(program, a, b, v, checkpoint=StoreAll())
    want = pullback(u)
    nested = nested_loop_ids(prog.body)
    runs = []  # gradients first: a wrong gradient is the worse failure to report
    for strategy in RECOMPUTING:
        out, pb = cg.vjp(program, a, b, v, checkpoint=strategy)
        assert_bitwise(tuple(state_leaves(out)), tuple(state_leaves(value)), f"{strategy} value")
        assert_bitwise(pb(u), want, str(strategy))
        runs.append((pb.stats, strategy))
    for stats, strategy in runs:
        validate_all(stats, lambda _, s=strategy: s, nested)
    return runs


def nested_loop_ids(stmts: tuple, inside: bool = False) -> set[str]:
    """The region ids of the loops of a test_properties program that sit inside another
    loop, read off its AST (whose loops are numbered in trace order, as cfgrad numbers
    their regions) rather than by lowering the program once more."""
    ids: set[str] = set()
    for s in stmts:
        if isinstance(s, Fori | While):
            if inside:
                ids.add(f"loop#{s.number}")
            ids |= nested_loop_ids(s.body, True)
        elif isinstance(s, If):
            ids |= nested_loop_ids(s.then, inside) | nested_loop_ids(s.orelse, inside)
        elif isinstance(s, Switch):
            for branch in s.branches:
                ids |= nested_loop_ids(branch, inside)
    return ids


def test_zero_trip_loop_at_the_bottom_of_a_three_deep_nest() -> None:
    """The drawing that once broke the schedule splitter: fori_loop > while_loop >
    fori_loop(0, k), k the while's counter, so the innermost loop runs 0, 1, 2, 3 times in
    each middle execution. The middle loop drops each iteration's record at the next back
    edge; after an iteration that ran the innermost loop zero times (which leaves no
    events), the execution it drops is the latest one in the schedule, not one below it."""
    inner = Fori(2, 3, 0, 0, "k2", (Assign("a", Binary("mul", Var("a"), Var("b"))),))
    middle = While(1, 2, 4, Const(0.7), -0.6, (inner, Assign("b", Unary("sin", Var("a")))),
                   False)
    outer = Fori(0, 1, 0, 3, None, (middle, Assign("a", Unary("cos", Var("b")))))
    prog = Prog((outer,), 1, 0, 3)
    assert nested_loop_ids(prog.body) == {"loop#1", "loop#2"}
    for stats, strategy in assert_every_strategy_is_storeall(prog, 0.3, -0.4, np.array([0.5])):
        outer_stats, middle_stats, inner_stats = stats.loops
        assert inner_stats.trip_counts == [0, 1, 2, 3] * 3, strategy
        if isinstance(strategy, EveryK | Recompute):  # the middle loop drops iterations
            runs = validate(inner_stats, strategy, top_level=False)
            assert sum(not r.reversed for r in runs) > 0, strategy


# ---------------------------------------------------------------------------------
# Nested loops: closures over the enclosing iteration
# ---------------------------------------------------------------------------------


@pytest.mark.parametrize("outer", [StoreAll(), Binomial(3), EveryK(3), Recompute()],
                         ids=repr)
@pytest.mark.parametrize("inner", [StoreAll(), Recompute(), Binomial(2), Online(2), EveryK(2)],
                         ids=repr)
@pytest.mark.parametrize("bound", ["constant", "outer index"])
@pytest.mark.parametrize("inner_body", ["smooth", "cond"])
def test_nested_checkpointed_loops(outer: Any, inner: Any, bound: str, inner_body: str
                                   ) -> None:
    """A loop nested in a checkpointed loop, itself checkpointed or not, its trip count
    constant or the outer index, a cond in its body or not, and closing over the outer
    carry `c`. Recomputing it reads values of the enclosing iteration (`c`, its trip
    count), which must be those of the iteration being reversed, not of the last one the
    outer loop ran; and an outer iteration re-advanced untaped must be found to take the
    path its sweep took, whatever the inner loop's strategy kept of its log."""

    def make(outer_choice: Any, inner_choice: Any) -> Callable:
        def f(x: Any) -> Any:
            def step(j: Any, d: Any, c: Any) -> Any:
                if inner_body == "cond":
                    return cg.cond(d > 1.0, lambda: d * 0.5 + c, lambda: cnp.sin(d) + c)
                return cnp.sin(d) + c

            def body(i: Any, c: Any) -> Any:
                n = 5 if bound == "constant" else 4 - i % 4
                return cg.fori_loop(0, n, lambda j, d: step(j, d, c), c,
                                    checkpoint=inner_choice)
            return cg.fori_loop(0, 5, body, x, checkpoint=outer_choice)
        return f

    want = cg.grad(make(StoreAll(), StoreAll()))(0.3)
    got = cg.grad(make(outer, inner))(0.3)
    assert np.array_equal(got, want), (got, want)
    check_grads(make(outer, inner), (0.3,), modes=("rev",))


def test_nested_checkpointed_loops_account_per_execution() -> None:
    """Outer Binomial(3), inner Online(2) (different strategies): the inner region's
    schedule splits into legal executions, every one that ran is reversed once, and what
    the outer loop drops is no longer counted as held."""
    outer, inner = Binomial(3, trace=True), Online(2, trace=True)

    def f(x: Any) -> Any:
        body = lambda i, c: cg.fori_loop(0, 4, lambda j, d: cnp.sin(d) * 1.01 + 0.1, c,  # noqa: E731
                                         checkpoint=inner)
        return cg.fori_loop(0, 10, body, x, checkpoint=outer)

    _, pb = cg.vjp(f, 0.3)
    pb(1.0)
    stats_outer, stats_inner = pb.stats.loops
    validate(stats_outer, outer)
    runs = validate(stats_inner, inner, top_level=False)
    assert stats_outer.forward_steps + stats_outer.recompute_steps == optimal_cost(10, 3)
    assert stats_inner.trip_counts == [4] * 10
    assert sum(r.reversed for r in runs) == 10
    # the outer loop holds at most two inner executions at once: the tape it keeps and the
    # iteration it is running (or recomputing)
    assert stats_inner.peak_snapshots <= 2 * inner.snapshots


# ---------------------------------------------------------------------------------
# Binomial on fori_loop: the revolve optimum, exactly
# ---------------------------------------------------------------------------------


def scalar_loop(x: Any, lo: Any, hi: Any) -> Any:
    return cg.fori_loop(lo, hi, lambda i, c: c * 0.999 + 0.001 * cnp.sin(c), x)


def scalar_while(x: Any, n: Any) -> Any:
    return cg.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * 0.999 + 0.001 *
                                                        cnp.sin(c[1])), (0, x))[1]


def trip_grid(slots: int) -> list[int]:
    """0..40, the reference table's T (up to 1000), and C(s+r, s), C(s+r, s)+1 for every r
    (up to 1000). One slot is Recompute, quadratic in T: up to 200 there."""
    grid = set(range(41)) | {50, 64, 100, 128, 200, 500, 1000}
    r = 0
    while math.comb(slots + r, slots) <= 1000:
        grid |= {math.comb(slots + r, slots), math.comb(slots + r, slots) + 1}
        r += 1
    return sorted(T for T in grid if T <= (200 if slots == 1 else 1000))


def run_stats(f: Callable, args: tuple, strategy: Any) -> tuple[tuple, LoopStats]:
    _, pb = cg.vjp(f, *args, checkpoint=strategy)
    grads = pb(1.0)
    return grads, pb.stats.loops[0]


@pytest.mark.parametrize("slots", range(1, 11))
def test_binomial_fori_is_the_revolve_optimum(slots: int) -> None:
    """forward + recompute = T + t(T, s) exactly; at most s (and at most T) carries held;
    no iteration advanced more than r times; a legal schedule; StoreAll's gradient."""
    strategy = Binomial(slots, trace=True)
    for T in trip_grid(slots):
        args = (0.3, np.int64(0), np.int64(T))
        grads, stats = run_stats(scalar_loop, args, strategy)
        assert_bitwise(grads, run_stats(scalar_loop, args, StoreAll())[0], f"T={T}")
        assert stats.trip_counts == [T]
        assert stats.forward_steps + stats.recompute_steps == optimal_cost(T, slots), T
        assert stats.peak_snapshots <= min(slots, T)
        runs = validate(stats, strategy)
        for run in runs:
            assert max(run.advances.values(), default=0) <= repetition_number(T, slots), T
            assert list(run.swept_snapshots) == [p for p, _ in first_path(T, slots)], T


def test_binomial_fori_with_traced_bounds_off_zero() -> None:
    """The trip count is hi - lo (0 when hi < lo), read when the loop is entered."""
    strategy = Binomial(3, trace=True)
    for lo, hi in [(7, 7), (7, 3), (7, 8), (7, 27), (-5, 40)]:
        T = max(0, hi - lo)
        grads, stats = run_stats(scalar_loop, (0.3, np.int64(lo), np.int64(hi)), strategy)
        assert stats.trip_counts == [T]
        assert stats.forward_steps + stats.recompute_steps == optimal_cost(T, 3)
        validate(stats, strategy)


# ---------------------------------------------------------------------------------
# Online (and Binomial) on while_loop
# ---------------------------------------------------------------------------------

WHILE_TRIPS = (1, 2, 3, 5, 8, 10, 16, 20, 32, 50, 64, 100, 128, 200, 500, 1000)


def test_online_while_loop_against_the_optimum() -> None:
    """Online on a while_loop (trip count unknown until exit): the total is the reversal
    cost of the snapshots the sweep left (consistency with cfgrad.revolve), equal to the
    optimum up to T = (s+1)(s+2)/2 + 1, within 11% of it on the reference grid, never more
    with more slots; Binomial on a while_loop runs exactly the same schedule."""
    for T in WHILE_TRIPS:
        totals = []
        for slots in range(1, 11):
            if slots == 1 and T > 200:
                continue  # quadratic: the one-slot case is covered up to 200
            strategy = Online(slots, trace=True)
            grads, stats = run_stats(scalar_while, (0.3, np.int64(T)), strategy)
            (run,) = validate(stats, strategy)
            total = stats.forward_steps + stats.recompute_steps
            assert total == reversal_cost(run.swept_snapshots, T, slots), (T, slots)
            assert total <= 1.11 * optimal_cost(T, slots), (T, slots, total)
            if T <= math.comb(slots + 2, 2) + 1:
                assert total == optimal_cost(T, slots), (T, slots)
            totals.append(total)
            _, binomial = run_stats(scalar_while, (0.3, np.int64(T)), Binomial(slots,
                                                                              trace=True))
            assert binomial.schedule == stats.schedule, (T, slots)
            assert binomial.recompute_steps == stats.recompute_steps
        assert totals == sorted(totals, reverse=True), (T, totals)


# ---------------------------------------------------------------------------------
# EveryK and Recompute: exact accounting
# ---------------------------------------------------------------------------------


def bytes_from_schedule(schedule: list[tuple[str, int]], carry: int, tape: int,
                        held_back: bool = False) -> int:
    """Peak bytes implied by a schedule: snapshots of `carry` bytes, tapes of `tape` bytes
    (the sweep holds one tape throughout: the latest iteration's) and, `held_back`, the
    carry Online keeps from the sweep's second iteration on until it knows the loop
    continues."""
    held = peak = 0
    sweeping = True
    for i, (what, t) in enumerate(schedule):
        if i == 0:
            held += tape
        if what == "store":
            held += carry
        elif what == "free":
            held -= carry
        elif what == "advance" and sweeping and t == 0 and held_back:
            held += carry
        elif what == "taped":
            held += 0 if sweeping else tape
            if sweeping and t > 0 and held_back:
                held -= carry
            sweeping = False
        elif what == "reverse":
            held -= tape
        peak = max(peak, held)
    return peak


@pytest.mark.parametrize("kind", ["fori", "while"])
def test_everyk_and_recompute_accounting(kind: str) -> None:
    """EveryK(k): T extra evaluations (each iteration but the last re-run once, taped),
    ceil(T/k) carries on a while_loop (it cannot know that iteration T-1 is the last) and
    ceil((T-1)/k) on a fori_loop (the last iteration keeps its tape, so its carry is never
    stored; the initial carry always is), and at most k tapes held. Recompute: T(T-1)/2
    extra, one carry.
    peak_bytes of every strategy matches its schedule, with a carry's size derived from
    the dtypes (an int64 counter and a float64) and a tape's from StoreAll's peak."""
    carry = 16
    for T in range(0, 26):
        args = (0.3, np.int64(0), np.int64(T)) if kind == "fori" else (0.3, np.int64(T))
        f = scalar_loop if kind == "fori" else scalar_while
        want, stored = run_stats(f, args, StoreAll())
        assert stored.recompute_steps == 0 and stored.peak_snapshots == T
        tape = stored.peak_bytes // T if T else 0
        assert stored.peak_bytes == T * tape
        for k in range(1, 6):
            strategy = EveryK(k, trace=True)
            grads, stats = run_stats(f, args, strategy)
            assert_bitwise(grads, want, f"EveryK({k}) T={T}")
            assert (stats.forward_steps, stats.recompute_steps) == (T, max(T - 1, 0))
            carries = math.ceil(T / k) if kind == "while" else max(min(T, 1),
                                                                      math.ceil((T - 1) / k))
            assert stats.peak_snapshots == carries
            runs = validate(stats, strategy)
            assert all(r.peak_tapes <= k for r in runs)
            assert stats.peak_bytes == bytes_from_schedule(stats.schedule or [], carry, tape)
        strategy = Recompute(trace=True)
        grads, stats = run_stats(f, args, strategy)
        assert_bitwise(grads, want, f"Recompute T={T}")
        assert (stats.forward_steps, stats.recompute_steps) == (T, T * (T - 1) // 2)
        assert stats.peak_snapshots == min(T, 1)
        assert stats.peak_bytes == (carry + tape if T else 0)
        validate(stats, strategy)
        for slots in (1, 2, 4):
            strategy = Binomial(slots, trace=True)
            _, stats = run_stats(f, args, strategy)
            held_back = kind == "while" and slots > 1
            assert stats.peak_bytes == bytes_from_schedule(stats.schedule or [], carry, tape,
                                                           held_back)


# ---------------------------------------------------------------------------------
# Edge cases
# ---------------------------------------------------------------------------------


@pytest.mark.parametrize("slots", [1, 2, 3, 5])
def test_edge_trip_counts(slots: int) -> None:
    """T = 0, 1, s, s+1, C(s+r, s), C(s+r, s)+1 (r = 1, 2) and s > T, for every strategy
    on fori and while loops: StoreAll's gradient, a legal schedule within budget."""
    trips = {0, 1, slots, slots + 1, max(slots - 1, 0)}
    for r in (1, 2):
        trips |= {math.comb(slots + r, slots), math.comb(slots + r, slots) + 1}
    for T in sorted(trips):
        for f, args in ((scalar_loop, (0.3, np.int64(0), np.int64(T))),
                        (scalar_while, (0.3, np.int64(T)))):
            want, _ = run_stats(f, args, StoreAll())
            for strategy in (Binomial(slots, trace=True), Online(slots, trace=True),
                             EveryK(slots, trace=True), Recompute(trace=True)):
                grads, stats = run_stats(f, args, strategy)
                assert_bitwise(grads, want, f"{strategy} T={T}")
                assert stats.trip_counts == [T]
                validate(stats, strategy)
                if T == 0:
                    assert (stats.forward_steps, stats.recompute_steps,
                            stats.peak_snapshots, stats.peak_bytes) == (0, 0, 0, 0)
                    assert not stats.schedule


def test_snapshots_beyond_the_trip_count_clamp() -> None:
    """s > T is no error: at most T carries are stored, and the cost is the optimum."""
    for T in range(0, 8):
        for slots in (T + 1, T + 5, 50):
            grads, stats = run_stats(scalar_loop, (0.3, np.int64(0), np.int64(T)),
                                     Binomial(slots))
            assert stats.peak_snapshots <= T
            assert stats.forward_steps + stats.recompute_steps == max(2 * T - 1, 0)
            assert stats.forward_steps + stats.recompute_steps == optimal_cost(T, slots)


def test_while_loop_false_at_once() -> None:
    """The condition is false on entry: no iteration, identity gradient, nothing held; a
    traced strategy's schedule is empty (not None, which means "not traced")."""

    def f(x: Any) -> Any:
        return cg.while_loop(lambda c: c > 10.0, lambda c: c * 0.5, x * 2.0)

    for strategy in STRATEGIES:
        _, pb = cg.vjp(f, 1.5, checkpoint=strategy)
        assert pb(1.0) == (2.0,)
        stats = pb.stats.loops[0]
        assert stats.trip_counts == [0]
        assert (stats.forward_steps, stats.recompute_steps, stats.peak_snapshots) == (0, 0, 0)
        assert stats.schedule == ([] if strategy in RECOMPUTING else None)


def test_loop_choice_wins_over_call_choice() -> None:
    """Two loops: one chose Binomial(2), one did not; the call says EveryK(3)."""
    own = Binomial(2, trace=True)

    def f(x: Any) -> Any:
        y = cg.fori_loop(0, 12, lambda i, c: cnp.sin(c) + 0.5, x, checkpoint=own)
        return cg.fori_loop(0, 12, lambda i, c: cnp.cos(c) * y, y)

    call = EveryK(3, trace=True)
    _, pb = cg.vjp(f, 0.4, checkpoint=call)
    got = pb(1.0)
    first, second = pb.stats.loops
    assert (first.strategy, second.strategy) == ("Binomial(2)", "EveryK(3)")
    assert first.forward_steps + first.recompute_steps == optimal_cost(12, 2)
    assert second.recompute_steps == 11 and second.peak_snapshots == 4
    validate(first, own)
    validate(second, call)
    vg = cg.value_and_grad(f, checkpoint=call)
    assert vg(0.4)[1] == got[0]
    assert [s.strategy for s in vg.stats.loops] == ["Binomial(2)", "EveryK(3)"]
    _, pb = cg.vjp(f, 0.4)
    assert pb(1.0) == got
    assert [s.strategy for s in pb.stats.loops] == ["Binomial(2)", "StoreAll()"]


def test_traced_copies_run_the_same_schedule() -> None:
    """`traced(s)` records the schedule `s` made with trace=True records, and leaves `s`
    and what has nothing to trace alone."""
    pairs = [(EveryK(3), EveryK(3, trace=True)), (Recompute(), Recompute(trace=True)),
             (Binomial(3), Binomial(3, trace=True)), (Online(2), Online(2, trace=True))]
    for plain, made_traced in pairs:
        copy = traced(plain)
        assert copy is not plain and copy == made_traced and repr(copy) == repr(plain)
        assert not plain.trace and traced(made_traced) is made_traced
        got, want = (run_stats(scalar_while, (0.3, 11), s)[1] for s in (copy, made_traced))
        assert got.schedule == want.schedule and got.schedule
        assert run_stats(scalar_while, (0.3, 11), plain)[1].schedule is None
    store_all = StoreAll()
    assert traced(store_all) is store_all


# ---------------------------------------------------------------------------------
# Invalid parameters
# ---------------------------------------------------------------------------------


@pytest.mark.parametrize("make, name", [
    (lambda: EveryK(0), "k"), (lambda: EveryK(-3), "k"), (lambda: EveryK(True), "k"),
    (lambda: EveryK(1.5), "k"), (lambda: Binomial(0), "snapshots"),
    (lambda: Binomial(2.5), "snapshots"), (lambda: Binomial(True), "snapshots"),
    (lambda: Online(-1), "snapshots"), (lambda: Online(None), "snapshots"),
])
def test_invalid_strategy_parameters(make: Callable, name: str) -> None:
    with pytest.raises(cg.ArgumentValueError, match=name) as info:
        make()
    assert isinstance(info.value, ValueError)


def test_numpy_integer_parameters_are_accepted() -> None:
    """Counts often come from numpy (a config array, a computed budget)."""
    assert Binomial(np.int64(4)).snapshots == 4
    assert EveryK(np.int32(3)).k == 3


@pytest.mark.parametrize("where", ["while_loop", "fori_loop", "grad"])
@pytest.mark.parametrize("choice", [True, "binomial", 3])
def test_invalid_checkpoint_argument(where: str, choice: Any) -> None:
    """`checkpoint=` takes a strategy object; anything else is refused by name, not an
    AttributeError from deep inside the interpreter."""
    loop_choice = choice if where != "grad" else None

    def f(x: Any) -> Any:
        if where == "while_loop":
            return cg.while_loop(lambda c: c < 3.0, lambda c: c + 1.0, x, checkpoint=loop_choice)
        return cg.fori_loop(0, 3, lambda i, c: c * 2.0, x, checkpoint=loop_choice)

    with pytest.raises(cg.ArgumentValueError, match="checkpoint"):
        cg.grad(f, checkpoint=choice if where == "grad" else None)(1.0)


@pytest.mark.parametrize("where, name", [("grad", "cfgrad.grad"),
                                         ("value_and_grad", "cfgrad.value_and_grad"),
                                         ("vjp", "cfgrad.vjp"), ("fori_loop", "fori_loop")])
def test_a_strategy_class_instead_of_an_instance(where: str, name: str) -> None:
    """`checkpoint=Binomial` (the class) is a likely slip: the error names the function
    the user called and says to call the class."""
    loop_choice = Binomial if where == "fori_loop" else None

    def f(x: Any) -> Any:
        return cg.fori_loop(0, 3, lambda i, c: c * 2.0, x, checkpoint=loop_choice)

    with pytest.raises(cg.ArgumentValueError, match=r"Binomial\(\.\.\.\)") as info:
        if where == "vjp":
            cg.vjp(f, 1.0, checkpoint=Binomial)
        elif where == "fori_loop":
            cg.grad(f)(1.0)
        else:
            getattr(cg, where)(f, checkpoint=Binomial)
    assert str(info.value).startswith(name)


def test_inspect_refuses_a_bad_checkpoint_argument() -> None:
    with pytest.raises(cg.ArgumentValueError, match="cfgrad.inspect: checkpoint="):
        cg.inspect(lambda x: x * 2.0, 1.0, run=True, checkpoint="revolve")


def test_strategy_subclasses_do_not_share_a_cache_entry() -> None:
    """Strategies compare by value, but a subclass may behave differently: it is never
    equal to its base, so the per-call cache cannot hand one the other's place."""
    class Logged(StoreAll):
        pass

    assert StoreAll() == StoreAll() and hash(StoreAll()) == hash(StoreAll())
    assert Logged() != StoreAll() and StoreAll() != Logged()
    assert Binomial(3) == Binomial(3) and Binomial(3) != Online(3)


# ---------------------------------------------------------------------------------
# ReplayMismatchError
# ---------------------------------------------------------------------------------


def first_recomputed_iteration(schedule: list[tuple[str, int]]) -> int:
    """The iteration the reverse re-runs first (after the sweep's "taped T-1")."""
    after_sweep = schedule[[e[0] for e in schedule].index("taped") + 1:]
    return next(t for what, t in after_sweep if what in ("advance", "taped"))


@pytest.mark.parametrize("make_strategy", [
    lambda trace: Recompute(trace=trace), lambda trace: Binomial(2, trace=trace),
    lambda trace: StoreAll()], ids=["Recompute", "Binomial(2)", "StoreAll"])
def test_diverging_recomputation_is_a_replay_mismatch(make_strategy: Callable,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """tanh is replaced by an implementation that flips sign once the forward sweep has
    called it T times, so a recomputed iteration takes the other branch of the cond on
    it. Recomputing strategies must raise, naming the loop, the iteration and the Cond
    with its source line; StoreAll never recomputes, so it must not raise."""
    trips = 6

    def make(choice: Any) -> Callable:
        def body(i: Any, c: Any) -> Any:
            y = cnp.tanh(c)
            return cg.cond(y > 0, lambda: c * 0.9 + 0.1, lambda: c * 1.1 - 0.1)

        def f(x: Any) -> Any:
            return cg.fori_loop(0, trips, body, x, checkpoint=choice)

        lines, start = inspect.getsourcelines(body)
        return f, start + next(k for k, line in enumerate(lines) if "cg.cond(" in line)

    _, pb = cg.vjp(make(make_strategy(True))[0], 0.5)
    pb(1.0)
    schedule = pb.stats.loops[0].schedule  # where the unpatched run recomputes first
    expected = first_recomputed_iteration(schedule) if schedule else None

    calls = []
    original = cfgrad.primitives.PRIMITIVES["tanh"]

    def flipping_tanh(x: Any) -> Any:
        calls.append(x)
        return np.tanh(x) if len(calls) <= trips else -np.tanh(x)

    monkeypatch.setitem(cfgrad.primitives.PRIMITIVES, "tanh",
                        dataclasses.replace(original, impl=flipping_tanh))
    f, cond_line = make(make_strategy(False))  # fresh: lowered and compiled with the patched impl
    _, pb = cg.vjp(f, 0.5)
    assert len(calls) == trips  # the premise: the sweep ran the original values
    if expected is None:
        pb(1.0)
        return
    with pytest.raises(cg.ReplayMismatchError) as info:
        pb(1.0)
    message = str(info.value)
    assert "loop#0" in message and f"iteration {expected} " in message, message
    assert "if#0" in message and f"test_checkpoint.py:{cond_line}" in message, message


# ---------------------------------------------------------------------------------
# Memory
# ---------------------------------------------------------------------------------


def test_binomial_holds_far_less_memory_than_storeall(
        record_property: pytest.RecordProperty) -> None:
    """A carry of 10_000 floats for 200 iterations: Binomial(4)'s accounted peak is at least
    20x below StoreAll's. The accounting is checked against tracemalloc (numpy reports its
    buffers to it): the measured peak exceeds the accounted one by no more than a few
    arrays of temporaries, so no memory is held that the accounting does not show."""
    x = np.linspace(0.0, 1.0, 10_000)
    array_bytes = x.nbytes

    def f(x: Any) -> Any:
        return cnp.sum(cg.fori_loop(0, 200, lambda i, c: cnp.sin(c) * 0.99 + 0.01, x))

    peaks, measured, grads = {}, {}, {}
    for strategy in (StoreAll(), Binomial(4)):
        vg = cg.value_and_grad(f, checkpoint=strategy)
        vg(x)  # lowering and compiling outside the measurement
        tracemalloc.start()
        try:
            grads[repr(strategy)] = vg(x)[1]
            measured[repr(strategy)] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        peaks[repr(strategy)] = vg.stats.loops[0].peak_bytes
        assert measured[repr(strategy)] <= peaks[repr(strategy)] + 16 * array_bytes
    assert np.array_equal(grads["StoreAll()"], grads["Binomial(4)"])
    ratio = peaks["StoreAll()"] / peaks["Binomial(4)"]
    measured_ratio = measured["StoreAll()"] / measured["Binomial(4)"]
    report = (f"peak bytes StoreAll {peaks['StoreAll()']}, Binomial(4) {peaks['Binomial(4)']}: "
              f"{ratio:.1f}x accounted, {measured_ratio:.1f}x measured by tracemalloc")
    print(report)
    record_property("memory_ratio", report)
    assert ratio >= 20


def test_call_strategies_are_told_apart_by_value() -> None:
    """Fresh strategy objects per call (the usual spelling) each get their own strategy,
    and equal ones share the cached resolution: no mix-up through recycled object ids."""
    def f(x: Any) -> Any:
        return cg.fori_loop(0, 6, lambda i, c: cnp.sin(c) + 0.1, x)

    for _ in range(3):
        for choice in (Binomial(2), Recompute(), EveryK(3), Online(2), None):
            _, pb = cg.vjp(f, 0.3, checkpoint=choice)
            pb(1.0)
            assert pb.stats.loops[0].strategy == repr(choice or StoreAll())
    assert Binomial(2) == Binomial(2) and Binomial(2) != Online(2)
    assert len({Binomial(2), Binomial(2), EveryK(2)}) == 2
