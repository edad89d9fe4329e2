"""Adversarial tests of loop checkpointing under nesting (docs/checkpointing.md).

test_checkpoint.py covers one loop (with at most one nested loop) under every strategy, and
the random programs of test_properties under one call-level strategy. Here every level of a
three-deep nest (fori or while at each level) draws its own strategy, independently of the
others and of the call's; trip counts depend on the enclosing indices or carries (zero trips
included); bodies hold conds, close over every enclosing carry and over a function argument,
and swap their tuple carries (scalars or vectors); a nested loop may sit in a cond branch
that its enclosing iteration takes only sometimes (the "stale record" case: the saved values
of an iteration that did not run the loop still hold the record of an execution that did).

Whatever the mix, values and cotangents must be bitwise those of the all-StoreAll run,
nothing may still be counted as held once the pullback has run, forward_steps must equal
the sum of trip counts for every loop (nested ones included), every execution must be
reversed exactly once, and pullbacks and the per-call strategy cache must be repeatable.
A primal array modified in place after vjp (the one public way to make a recomputation
diverge) must not change the pullback's result.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from test_checkpoint import STRATEGIES, assert_bitwise, validate

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad.checkpoint import Binomial, EveryK, LoopStats, Online, Recompute, RunStats, StoreAll
from cfgrad.revolve import optimal_cost
from cfgrad.testing import check_grads

MOD = 4  # dependent trip counts are (base + enclosing indices [+ carry sign]) % MOD
W = np.array([0.7, -0.4, 1.3])  # the function argument every body closes over
CALLS = st.one_of(st.just(StoreAll()), st.sampled_from(STRATEGIES))  # the call's strategy


# ---------------------------------------------------------------------------------
# Nests of loops, one per level
# ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Level:
    """One loop of a nest; `levels[0]` is the outermost."""

    kind: str  # "fori" or "while" (a counter carried next to the tuple)
    offset: bool  # (below the top) a fori_loop runs from the enclosing indices' sum
    choice: int | None  # index into STRATEGIES of the loop's own choice; None: the call's
    base: int  # the trip count, or its offset when it depends on the enclosing scopes
    depends: str  # "const"; "index": + the enclosing indices; "carry": + the carry's sign
    taken: tuple[bool, ...] | None  # below the top: the loop runs in the branch of a cond
    # taken when taken[(sum of the enclosing indices) % len(taken)]
    branch: bool  # a cond on the data and the index in the body
    swap: bool  # the tuple carry (a, b) swaps
    thr: float


def own_strategy(level: Level) -> Any:
    return None if level.choice is None else STRATEGIES[level.choice]


def build(levels: tuple[Level, ...], own: bool = True) -> Callable:
    """A fresh function (lowering is cached per function) running the nest on (x, y, w):
    x and y the initial carry (scalars or vectors), w a vector argument every body reads.
    With `own=False` no loop chooses a strategy (the call's applies to all)."""

    def nest(d: int, a: Any, b: Any, outer: tuple, isum: Any, w: Any) -> tuple:
        level = levels[d]

        def body(i: Any, a: Any, b: Any) -> tuple:
            fi = cnp.astype(i, cnp.float64)
            around = sum((cnp.tanh(oa) for oa in outer), 0.1 * w[d])  # every enclosing carry
            if level.branch:
                a = cg.cond(cnp.sin(3.0 * cnp.sum(a) + fi) > level.thr,
                            lambda: 0.7 * a + 0.2 * around, lambda: cnp.sin(a + w[d]) - 0.1)
            if d + 1 < len(levels):
                a, b = nest(d + 1, a, b, (*outer, a), i if isum is None else isum + i, w)
            b = 0.8 * b + 0.3 * cnp.tanh(a * w[d] + around)
            a = 0.9 * a + 0.1 * cnp.cos(b) + 0.05 * fi
            return (b, a) if level.swap else (a, b)

        n: Any = level.base
        if level.depends != "const" and isum is not None:
            sign = cnp.astype(cnp.sum(a) > 0.0, cnp.int64) if level.depends == "carry" else 0
            n = (n + isum + sign) % MOD
        choice = own_strategy(level) if own else None

        def run() -> tuple:
            if level.kind == "fori":
                lo = isum if level.offset and isum is not None else 0
                return cg.fori_loop(lo, lo + n, lambda i, c: body(i, *c), (a, b),
                                    checkpoint=choice)
            return cg.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, body(c[0], *c[1])),
                                 (np.int64(0), (a, b)), checkpoint=choice)[1]

        if level.taken is not None and isum is not None:
            pattern = np.array(level.taken)
            return cg.cond(cnp.take(pattern, isum % len(pattern)), run,
                           lambda: (0.5 * a, b + 0.1))
        return run()

    def f(x: Any, y: Any, w: Any) -> Any:
        a, b = nest(0, x, y, (), None, w)
        return cnp.sum(a + 2.0 * b)

    return f


def choice_of(strategy: str) -> int:
    """The index into STRATEGIES of the strategy with this repr."""
    return next(k for k, s in enumerate(STRATEGIES) if repr(s) == strategy)


@st.composite
def levels(draw: Any, depth: int = 3, guard_depths: tuple[int, ...] = (1, 2),
           min_trips: int = 0) -> tuple[Level, ...]:
    """A nest of `depth` loops; the loops at `guard_depths` may sit in a cond branch; the
    trip counts (or their offsets) of all but the innermost are at least `min_trips`."""
    # StoreAll weighs as much as all the recomputing strategies together: the mixes that
    # break are those where one level keeps everything and the next one recomputes
    any_choice = st.one_of(st.none(), st.just(choice_of("StoreAll()")),
                           st.integers(0, len(STRATEGIES) - 1))
    guard = st.one_of(st.none(), st.lists(st.booleans(), min_size=1, max_size=4).map(tuple))
    return tuple(Level(
        kind=draw(st.sampled_from(["fori", "while"])),
        offset=draw(st.booleans()) if d else False,
        choice=draw(any_choice),
        base=draw(st.integers(min_trips if d < depth - 1 else 0, 3 if d else 5)),
        depends=draw(st.sampled_from(["const", "index", "carry"])) if d else "const",
        taken=draw(guard) if d in guard_depths else None,
        branch=draw(st.booleans()),
        swap=draw(st.booleans()),
        thr=draw(st.sampled_from([-0.5, 0.0, 0.4])),
    ) for d in range(depth))


@st.composite
def primals(draw: Any) -> tuple[Any, Any, np.ndarray]:
    """(x, y, w): scalar or 2-vector initial carries (vectors exercise the in-place
    accumulation of array adjoints), and the closed-over argument w."""
    shape = draw(st.sampled_from([(), (2,)]))
    x, y = (draw(st.lists(st.floats(-1.0, 1.0), min_size=math.prod(shape),
                          max_size=math.prod(shape)).map(lambda v: np.array(v).reshape(shape)))
            for _ in range(2))
    return x, y, W.copy()


def strategy_of(levels: tuple[Level, ...], call: Any) -> Callable[[LoopStats], Any]:
    """The strategy each loop region ran under: its own choice, else the call's. Regions
    are numbered in trace order, which for one loop per level is the nesting depth."""
    return lambda stats: own_strategy(levels[int(stats.name.split("#")[1])]) or call


def reversed_executions(schedule: list[tuple[str, int]]) -> list[int]:
    """The trip counts of the executions a region's schedule reversed: its "reverse"
    events must fall into runs T-1, T-2, …, 0 (a region never runs inside itself, so the
    reverses of two executions of it cannot interleave)."""
    runs, due = [], None
    for what, t in schedule:
        if what != "reverse":
            continue
        if due is None:
            runs.append(t + 1)
        else:
            assert t == due, f"reverse {t} where {due} was due: {schedule}"
        due = t - 1 if t else None
    assert due is None, f"a reverse stopped short of iteration 0: {schedule}"
    return runs


def snapshot_budget(strategy: Any, trips: int) -> int:
    """The most carries one execution of `trips` iterations may hold under `strategy`."""
    if isinstance(strategy, StoreAll):
        return trips
    if isinstance(strategy, EveryK):
        return math.ceil(trips / strategy.k)
    if isinstance(strategy, Recompute):
        return min(trips, 1)
    return min(trips, strategy.snapshots)


def assert_accounting(stats: RunStats, strategy_for: Callable[[LoopStats], Any]) -> None:
    """Invariants every loop must satisfy once the pullback has run: nothing held any
    more, the sweep's body evaluations are the trip counts, every execution reversed once,
    every stored snapshot freed; the top-level loop (one execution) within its snapshot
    budget; and every region's schedule, nested ones included, split into executions and
    replayed by test_checkpoint.validate (executions an enclosing loop dropped included)."""
    for k, loop in enumerate(stats.loops):
        assert (loop.snapshots, loop.bytes) == (0, 0), (
            f"{loop.name}: {loop.snapshots} snapshots / {loop.bytes} bytes still held")
        assert min(loop.peak_snapshots, loop.peak_bytes, loop.recompute_steps) >= 0, loop
        assert loop.forward_steps == sum(loop.trip_counts), loop
        strategy = strategy_for(loop)
        if k == 0:
            assert loop.peak_snapshots <= snapshot_budget(strategy, loop.forward_steps), loop
            if isinstance(strategy, StoreAll):
                assert loop.recompute_steps == 0, loop
        if loop.schedule is None:
            continue
        validate(loop, strategy, top_level=k == 0)
        events = [what for what, _ in loop.schedule]
        assert events.count("store") == events.count("free"), loop
        assert sorted(reversed_executions(loop.schedule)) == sorted(
            t for t in loop.trip_counts if t), loop


def storeall_reference(nest: tuple[Level, ...], args: tuple) -> tuple[Any, tuple]:
    out, pb = cg.vjp(build(nest, own=False), *args, checkpoint=StoreAll())
    return out, pb(1.0)


def assert_like_storeall(nest: tuple[Level, ...], call: Any, args: tuple
                         ) -> tuple[Callable, RunStats]:
    """Run the nest with its own strategies under `call`: value and cotangents bitwise
    StoreAll's, accounting sound. Returns the function that ran and its statistics."""
    want_out, want = storeall_reference(nest, args)
    mixed = build(nest)
    out, pb = cg.vjp(mixed, *args, checkpoint=call)
    assert np.array_equal(out, want_out)
    assert_bitwise(pb(1.0), want, f"call {call}, own {[own_strategy(lv) for lv in nest]}")
    assert pb.stats.loops[0].trip_counts == [nest[0].base]
    assert_accounting(pb.stats, strategy_of(nest, call))
    return mixed, pb.stats


# ---------------------------------------------------------------------------------
# 1, 2: three-deep nests, each level its own strategy
# ---------------------------------------------------------------------------------


@given(levels(), CALLS, primals())
@settings(max_examples=120)
def test_three_deep_nests_are_bitwise_storeall(nest: tuple[Level, ...], call: Any,
                                               args: tuple) -> None:
    """Each level's own strategy and the call's drawn independently: the forward value
    and the cotangents of x, y and w are those of the all-StoreAll run, bit for bit, and
    close to finite differences where the path is stable."""
    mixed, _ = assert_like_storeall(nest, call, args)
    try:
        check_grads(mixed, args, modes=("rev",))
    except cg.PathInstabilityError:
        event("finite differences skipped: the path changes within eps")


@pytest.mark.parametrize("s", [1, 2, 3, 5])
def test_binomial_fori_around_a_nest_stays_within_its_snapshots(s: int) -> None:
    """A top-level Binomial(s) fori_loop whose body runs two nested loops (StoreAll, and
    EveryK(3) inside it, both re-run whenever the top loop re-advances): at most s carries
    held and the revolve total of body evaluations, as without the nest."""
    inner = Level("while", False, choice_of("EveryK(3)"), 1, "index", None, True, True, 0.0)
    nest = (dataclasses.replace(inner, kind="fori", choice=None, base=9, depends="const"),
            dataclasses.replace(inner, choice=choice_of("StoreAll()")), inner)
    _, stats = assert_like_storeall(nest, Binomial(s, trace=True),
                                    (np.float64(0.2), np.float64(-0.3), W))
    top = stats.loops[0]
    assert top.peak_snapshots <= s
    assert top.forward_steps + top.recompute_steps == optimal_cost(9, s)


# ---------------------------------------------------------------------------------
# 3: a loop in a cond branch inside a checkpointed loop
# ---------------------------------------------------------------------------------


@given(st.integers(2, 3).flatmap(lambda depth: levels(depth, guard_depths=(depth - 1,),
                                                      min_trips=2)), CALLS, primals())
@settings(max_examples=120)
def test_loop_in_a_branch_taken_on_some_iterations(nest: tuple[Level, ...], call: Any,
                                                   args: tuple) -> None:
    """The innermost loop runs only on the iterations whose index pattern says so (all,
    none, or some of them; every other one by default), inside loops that run it several
    times: an iteration that skips it must neither reverse nor release the record of an
    execution another iteration (of this execution of its enclosing loop or of an
    earlier one) owns."""
    nest = (*nest[:-1], dataclasses.replace(nest[-1], taken=nest[-1].taken or (True, False)))
    assert_like_storeall(nest, call, args)


def stale_record_nest(outer: Any, middle: Any, inner: Any, outer_trips: int) -> Callable:
    """Three fori loops; the innermost runs only in the outer loop's first iteration. In
    the later ones the iterations of the middle loop skip it, and the innermost loop's
    record slot still holds the record of an execution of the first outer iteration."""

    def f(x: Any) -> Any:
        def outer_body(i: Any, c: Any) -> Any:
            def middle_body(j: Any, d: Any) -> Any:
                return cg.cond(i == 0, lambda: cg.fori_loop(0, 1, lambda k, e: cnp.sin(e), d,
                                                            checkpoint=inner), lambda: d)
            return cg.fori_loop(0, 2, middle_body, c, checkpoint=middle)
        return cg.fori_loop(0, outer_trips, outer_body, x, checkpoint=outer)

    return f


@pytest.mark.parametrize("outer, middle, inner, outer_trips", [
    (None, EveryK(1), None, 2), (None, Recompute(), None, 2), (None, Binomial(1), None, 2),
    (None, EveryK(1), Binomial(2), 2), (None, Online(2), Recompute(), 2),
    (EveryK(3), EveryK(1), None, 3)], ids=repr)
def test_stale_record_of_an_earlier_execution_is_kept(outer: Any, middle: Any, inner: Any,
                                                      outer_trips: int) -> None:
    """Regression: a checkpointing middle loop, discarding the saved values of an iteration
    that skipped the innermost loop, released the stale record they held, which belonged to
    an execution the outer loop still had to reverse (under StoreAll, or in an EveryK
    segment it replays): the reverse then failed with IndexError or TypeError."""
    want = cg.grad(stale_record_nest(None, None, None, outer_trips))(0.3)
    assert cg.grad(stale_record_nest(outer, middle, inner, outer_trips))(0.3) == want


# ---------------------------------------------------------------------------------
# 4: repeated pullbacks, and the per-call strategy cache
# ---------------------------------------------------------------------------------


def stats_summary(stats: RunStats) -> list[tuple]:
    return [(s.name, s.strategy, s.trip_counts, s.forward_steps, s.recompute_steps,
             s.peak_snapshots, s.peak_bytes, s.schedule) for s in stats.loops]


def governed_by_call(nest: tuple[Level, ...], stats: RunStats) -> list[LoopStats]:
    """The loops that chose no strategy of their own."""
    return [s for s in stats.loops if own_strategy(nest[int(s.name.split("#")[1])]) is None]


@given(levels(), st.lists(CALLS, min_size=2, max_size=3), primals())
@settings(max_examples=40)
def test_pullbacks_and_calls_repeat_exactly(nest: tuple[Level, ...], calls: list[Any],
                                            args: tuple) -> None:
    """One function object differentiated under several call-level strategies (one
    lowering, one cache entry): pullbacks made before any of them runs, run in reverse
    order, each twice (the second re-runs the forward), give the same cotangents and the
    same statistics. The per-call strategy cache compares strategies by value: an equal
    fresh object finds the same entry, one that differs only in `trace` does not (its
    loops record no schedule). grad with one argnum agrees with the pullback."""
    f = build(nest)
    _, want = storeall_reference(nest, args)
    pullbacks = [cg.vjp(f, *args, checkpoint=call)[1] for call in calls]
    for call, pb in reversed(list(zip(calls, pullbacks))):
        first = pb(1.0)
        stats = stats_summary(pb.stats)
        assert_bitwise(first, want, f"{call}, first call")
        assert_bitwise(pb(1.0), want, f"{call}, second call")
        assert stats_summary(pb.stats) == stats
        assert {s.strategy for s in governed_by_call(nest, pb.stats)} <= {repr(call)}
        quiet = copy.copy(call)
        quiet.trace = False
        _, pb = cg.vjp(f, *args, checkpoint=quiet)
        assert_bitwise(pb(1.0), want, f"{call} without trace")
        assert all(s.schedule is None for s in governed_by_call(nest, pb.stats))
    for argnum in range(3):
        got = cg.grad(f, argnums=argnum, checkpoint=calls[0])(*args)
        assert_bitwise((got,), (want[argnum],), f"grad argnums={argnum}")


# ---------------------------------------------------------------------------------
# 5: primals modified in place after vjp
# ---------------------------------------------------------------------------------
# cfgrad's primitives are deterministic and custom rules are traced, so the one way the
# public API could make a recomputation diverge (ReplayMismatchError, or worse a silently
# different gradient) is a primal array modified in place between vjp and the pullback.
# vjp copies its primals, so the pullback must not notice at all.


def mutation_nest(outer: Any, middle: Any) -> Callable:
    """Three loops; the innermost body's cond reads p[0], the others p[1] and p[2]; and a
    term whose adjoint reads p itself."""

    def f(p: Any) -> Any:
        def inner(k: Any, e: Any) -> Any:
            return cg.cond(e * p[0] > 0.0, lambda: 0.9 * e + 0.1, lambda: 1.1 * e - 0.1)

        def middle_body(j: Any, d: Any) -> Any:
            return cnp.sin(cg.fori_loop(0, 2, inner, d)) * p[1] + 0.3

        def outer_body(i: Any, c: Any) -> Any:
            return cg.fori_loop(0, 3, middle_body, c, checkpoint=middle) * p[2]

        return cg.fori_loop(0, 4, outer_body, p[2], checkpoint=outer) + cnp.sum(p * p)

    return f


@pytest.mark.parametrize("outer, middle", [
    (StoreAll(), None), (Recompute(), None), (Binomial(2), StoreAll()), (EveryK(2), Online(1)),
    (StoreAll(), Recompute())], ids=repr)
@pytest.mark.parametrize("flip", [True, False], ids=["flip", "values"])
def test_primal_modified_after_vjp(outer: Any, middle: Any, flip: bool) -> None:
    """Modifying the caller's array after vjp (flipping p[0], which would send every
    recomputed innermost cond the other way, or changing p[1:], which no branch notices)
    changes nothing: both calls of the pullback (the second re-runs the forward) give the
    cotangent at the values vjp was called with, under any strategy. (Before vjp copied
    its primals, the adjoint and recomputation read the modified array: ReplayMismatchError
    on a flip, else a cotangent at neither point that differed between strategies.)"""
    before = np.array([1.0, 0.8, 0.5])
    f = mutation_nest(outer, middle)
    want = cg.grad(f)(before.copy())
    p = before.copy()
    _, pb = cg.vjp(f, p)
    if flip:
        p[0] = -1.0
    else:
        p[1:] = [0.6, 0.4]
    assert_bitwise(pb(1.0), (want,), "first call")
    assert_bitwise(pb(1.0), (want,), "second call")


@pytest.mark.parametrize("strategy", [StoreAll(), Recompute()], ids=repr)
def test_zero_dim_primal_modified_after_vjp(strategy: Any) -> None:
    def f(x: Any) -> Any:
        return cg.fori_loop(0, 3, lambda i, c: cnp.sin(c) * x + 0.1, x, checkpoint=strategy)

    want = cg.grad(f)(np.array(0.7))
    x = np.array(0.7)
    _, pb = cg.vjp(f, x)
    x[()] = -0.2
    assert_bitwise(pb(1.0), (want,), "first call")
    assert_bitwise(pb(1.0), (want,), "second call")


@pytest.mark.parametrize("strategy", [StoreAll(), Binomial(2)], ids=repr)
def test_outputs_and_cotangents_modified_around_the_pullback(strategy: Any) -> None:
    """vjp's outputs are not the arrays its pullback reads, and the pullback's results are
    not the caller's cotangent: writing into either changes no gradient (the identity
    output below is the primal the adjoint of `x * y` reads)."""
    def f(x: Any, y: Any) -> Any:
        z = cg.fori_loop(0, 3, lambda i, c: cnp.sin(c) * y, x, checkpoint=strategy)
        return x, z

    x, y = np.array([0.3, 0.9]), np.array([1.1, 0.7])
    want = cg.vjp(f, x, y)[1]((np.ones(2), np.ones(2)))
    (out_x, out_z), pb = cg.vjp(f, x, y)
    out_x[:] = 5.0
    out_z[:] = -5.0
    ct = (np.ones(2), np.ones(2))
    got = pb(ct)
    assert_bitwise(got, want, "after writing into the outputs")
    got[0][:] = 9.0
    assert np.array_equal(ct[0], np.ones(2)) and np.array_equal(ct[1], np.ones(2))
    identity_ct = np.ones(2)
    (_, pb_identity) = cg.vjp(lambda a: a, x)
    result = pb_identity(identity_ct)[0]
    result[:] = 3.0
    assert np.array_equal(identity_ct, np.ones(2))
