"""A checkpoint strategy's schedule as data, for code that cannot call the strategy.

A strategy never looks inside a carry or a tape: what it does depends only on the
iteration numbers (and a fori_loop's trip count). So running it against a runner whose
carries and tapes are just iteration numbers gives its exact schedule, which compiled code
(native.py) then follows: the same snapshots at the same iterations, the same
recomputations in the same order, so the same floating-point operations as the
interpreter running the strategy itself.

Two tables come out, both int64 arrays:

- `forward(bound, horizon)`: per back edge t of the sweep, (row freed or -1, row stored
  or -1, 1 if the stored carry is the previous iteration's else 0). A strategy decides at
  back edge t without knowing whether the loop goes on, so a prefix of any length is
  valid; compiled code asks for a longer one when it runs past the end.
- `reverse(trips, bound)`: the operations that hand the adjoint iteration t's tape, for
  t = trips-1 … 0: `SET row` (the carry from a snapshot), `ADVANCE n` / `TAPE n` (run n
  iterations, untaped / pushing their tapes), `STORE row`, and `LOAD t` (pop the tape of
  iteration t to where the adjoint reads it; the adjoint's `LoopState` runs operations
  up to and including it). Where the strategy leaves a re-run's last tape in place
  instead of loading one (the revolve recursion), `LOAD t` pops that tape. A first row
  (rows, 0) says how many snapshot rows the execution uses.

Snapshots live in rows of a buffer; rows are handed out lowest free first, the same way
in both tables (the reverse table replays the sweep to know them).

The same fact gives a compiled run's statistics: `replayed_stats` runs every loop's
strategy through the interpreter's loop bookkeeping again, from nothing but the trip
count of each loop execution, and so gives the interpreter's `RunStats` (trip counts,
steps, peaks, schedules) without running any iteration's arithmetic.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from .checkpoint import FREE, STORE, LoopStats, RunStats, StepTape, traced

SET, ADVANCE, TAPE, STORE_ROW, LOAD = 1, 2, 3, 4, 5
FREED = -1  # a row freed: recorded for the forward table, no code in the reverse one


class _Symbolic:
    """A LoopRunner and its Sweep at once, where a carry is the number of the iteration
    it is the input of and a tape the number of the iteration that made it."""

    carry_bytes = 0
    tape_bytes = 0
    tracing = True

    def __init__(self, bound: int | None):
        self.bound = bound
        self.t = 0  # the back edge being taken
        self.rows: dict[int, int] = {}  # snapshot iteration -> row
        self.used = 0  # rows ever needed
        self.ops: list[tuple[int, int]] = []
        self.current: int | None = None  # the iteration whose carry the state holds
        self.last: int | None = None  # Sweep.last: the latest iteration's tape

    # -- LoopRunner
    def trip_bound(self) -> int | None:
        return self.bound

    def carry(self) -> int:
        return self.t

    def tape(self) -> int:
        return self.t

    def load(self, tape: int) -> None:
        self.ops.append((LOAD, tape))
        self.current = None  # loading a tape may overwrite carry values

    def discard(self, tape: int) -> None:
        """Nothing to release: a symbolic tape holds no loop executions."""

    def sweep(self) -> _Symbolic:
        return self

    def held(self, snapshots: int, nbytes: int) -> None:
        """Memory is the interpreter's statistic; compiled code keeps its own buffers."""

    def emit(self, what: str, t: int) -> None:
        if what == STORE:
            row = min(set(range(len(self.rows) + 1)) - set(self.rows.values()))
            self.rows[t] = row
            self.used = max(self.used, row + 1)
            self.ops.append((STORE_ROW, row, t))  # type: ignore[arg-type]
        elif what == FREE:
            self.ops.append((FREED, self.rows.pop(t)))

    # -- Sweep
    def ran(self, t: int) -> None:
        self.last = t

    def end(self, trips: int) -> None:
        """The log entries are the compiled sweep's to keep (it resets them per iteration)."""

    def _from(self, carry: int) -> None:
        if carry != self.current:
            self.ops.append((SET, self.rows[carry]))

    def advance(self, carry: int, start: int, steps: int) -> int:
        self._from(carry)
        if steps:
            self.ops.append((ADVANCE, steps))
        self.current = start + steps
        return self.current

    def tape_steps(self, carry: int, start: int, count: int) -> list[int]:
        self._from(carry)
        self.ops.append((TAPE, count))
        self.current = start + count
        return list(range(start, start + count))


class Schedule:
    """The tables of one strategy (see the module docstring); `reverse` is cached per
    trip count, since a loop usually runs with the same one again."""

    def __init__(self, strategy: Any):
        self.strategy = traced(strategy)  # its STORE / FREE events name the iterations

    def _sweep(self, run: _Symbolic, trips: int, each: Any = None) -> Any:
        """The strategy's sweep of `trips` iterations; `each(t)` sees the operations of
        back edge t (then cleared)."""
        record = self.strategy.begin(run)
        for t in range(trips):
            run.t = t
            self.strategy.after_iteration(run, record, t)
            if each is not None:
                each(t)
            run.ops.clear()
        return record

    def forward(self, bound: int, horizon: int) -> np.ndarray:
        table = np.full((horizon, 3), -1, np.int64)
        table[:, 2] = 0

        def back_edge(t: int) -> None:
            for op in run.ops:
                if op[0] == FREED:
                    table[t, 0] = op[1]
                    continue
                _, row, position = op
                if position not in (t, t - 1):
                    raise AssertionError(f"{self.strategy!r} stored x_{position} at back "
                                         f"edge {t}")
                table[t, 1], table[t, 2] = row, int(position == t - 1)

        run = _Symbolic(None if bound < 0 else bound)
        self._sweep(run, horizon, back_edge)
        return table

    @lru_cache(maxsize=64)  # noqa: B019 - one Schedule per strategy, kept by native.py
    def reverse(self, trips: int, bound: int) -> np.ndarray:
        run = _Symbolic(None if bound < 0 else bound)
        record = self._sweep(run, trips)
        self.strategy.finish(run, record, trips)
        ops: list[tuple[int, int]] = []
        for t in range(trips - 1, -1, -1):
            run.ops.clear()
            self.strategy.restore(run, record, t)
            ops += [op[:2] for op in run.ops if op[0] != FREED]
            if ops[-1] != (LOAD, t):
                # re-run taped last, its values left where the adjoint reads them (the
                # interpreter's env): compiled code pushed its tape, and pops it here
                if ops[-1][0] != TAPE:
                    raise AssertionError(f"{self.strategy!r}: restore({t}) left no tape {t}")
                ops.append((LOAD, t))
        return np.array([(run.used, 0), *ops], np.int64).reshape(len(ops) + 1, 2)


# ---------------------------------------------------------------------------------
# The statistics of a compiled run
# ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoopFacts:
    """What the interpreter's statistics of one loop depend on besides trip counts: its
    name, its strategy (the object, whose events are replayed), the loop it sits directly
    inside (an index; None at the top level), whether its trip count is known on entry (a
    fori_loop's, which Binomial and EveryK plan with), and the sizes the interpreter
    accounts one carry and one tape at (`LoopInfo.carry_bytes`, `LoopSaves.nbytes`)."""

    name: str
    strategy: Any
    parent: int | None
    bounded: bool
    carry_bytes: int
    tape_bytes: int


@dataclass
class _Execution:
    """One execution of a loop in the forward sweep, and per iteration the executions of
    the loops directly inside it that the iteration ran, in order."""

    loop: int
    trips: int
    inside: dict[int, list[_Execution]]


def replayed_stats(loops: list[LoopFacts], exits: Iterable[tuple[int, int, int]]) -> RunStats:
    """The `RunStats` the interpreter gives a taped run and its pullback, from what a
    compiled sweep logs: every loop execution's exit in order, as (loop, trips, the
    iteration of the loop it sits directly inside, or -1 at the top level).

    A recomputed iteration re-runs the loops inside it with the trip counts the sweep
    logged (the interpreter checks that it does), so those say everything the interpreter
    counts: the strategies' events (snapshots and bytes held, schedules) depend only on
    iteration numbers and on when each loop execution starts, ends and is reversed."""
    top: list[_Execution] = []
    ended: list[list[tuple[int, _Execution]]] = [[] for _ in loops]  # per loop, inside it
    for j, trips, at in exits:
        e = _Execution(j, trips, {})
        for t, inner in ended[j]:
            e.inside.setdefault(t, []).append(inner)
        ended[j] = []
        parent = loops[j].parent
        if parent is None:
            top.append(e)
        else:
            ended[parent].append((at, e))
    replay = _Replay(loops)
    for e in top:
        replay.execute(e, taped=True)
    replay.reversing = True
    for e in reversed(top):
        replay.reverse(e)
    return replay.stats


class _Replay:
    """The interpreter's bookkeeping of loop events (`interpret.Machine.act` on entering,
    latching and leaving a loop, `_run_iteration`, `_Sweep`, `release_frame`) with each
    iteration's arithmetic left out: the real strategies are called in the interpreter's
    order, on runners whose carries are iteration numbers and whose tapes hold only the
    checkpoint records of the loops directly inside (all a strategy's bookkeeping reaches
    of a tape), and their events go to LoopStats as the interpreter's do."""

    def __init__(self, loops: list[LoopFacts]):
        self.loops = loops
        self.stats = RunStats([LoopStats(f.name, repr(f.strategy)) for f in loops])
        self.inside = [[k for k, g in enumerate(loops) if g.parent == j]
                       for j in range(len(loops))]
        self.records: list[Any] = [None] * len(loops)  # the interpreter's record slots
        self.counters = [0] * len(loops)  # the back edge each loop is taking
        self.entered: list[_Execution | None] = [None] * len(loops)
        self.reversing = False
        self.runners = [_ReplayRunner(self, j, f, s)
                        for j, (f, s) in enumerate(zip(loops, self.stats.loops))]

    def execute(self, e: _Execution, taped: bool) -> None:
        """Run execution `e` (taped: its strategy keeps what the adjoint needs)."""
        j = e.loop
        strategy, run, stats = self.loops[j].strategy, self.runners[j], self.stats.loops[j]
        self.entered[j] = e
        if taped:
            self.records[j] = strategy.begin(run)
        for t in range(e.trips):
            for inner in e.inside.get(t, ()):
                self.execute(inner, taped)
            if self.reversing:
                stats.recompute_steps += 1
            else:
                stats.forward_steps += 1
            if taped:
                self.counters[j] = t
                strategy.after_iteration(run, self.records[j], t)
                for k in self.inside[j]:  # the iteration's tape holds their records now
                    self.records[k] = None
        if not self.reversing:
            self.stats.loops[j].trip_counts.append(e.trips)
        if taped:
            strategy.finish(run, self.records[j], e.trips)

    def rerun(self, e: _Execution, t: int, taped: bool) -> None:
        """A strategy re-runs iteration t of `e` (its back edge is not taken: the
        strategy goes on from the carry it asked for)."""
        for inner in e.inside.get(t, ()):
            self.execute(inner, taped)
        self.stats.loops[e.loop].recompute_steps += 1

    def reverse(self, e: _Execution) -> None:
        """The adjoint of `e`: iterations last first, each one's state from the strategy
        (`LoopState`), then the loops inside it, last first."""
        j = e.loop
        for t in range(e.trips - 1, -1, -1):
            self.loops[j].strategy.restore(self.runners[j], self.records[j], t)
            for inner in reversed(e.inside.get(t, ())):
                self.reverse(inner)

    def release(self, j: int, tape: StepTape) -> None:
        """A tape of loop j is discarded unreversed: the records it holds are released."""
        for k, record in zip(self.inside[j], tape):
            if record is not None:
                self.loops[k].strategy.release(self.runners[k], record)


class _ReplayRunner:
    """The LoopRunner of one loop in a `_Replay`: its tape is the records of the loops
    directly inside it (a tuple in `_Replay.inside` order)."""

    def __init__(self, replay: _Replay, j: int, facts: LoopFacts, stats: LoopStats):
        self.replay, self.j, self.facts = replay, j, facts
        self.carry_bytes, self.tape_bytes = facts.carry_bytes, facts.tape_bytes
        self.tracing = bool(getattr(facts.strategy, "trace", False))
        if self.tracing:  # a traced loop that runs no iteration still has a schedule: empty
            stats.schedule = []
        self.held = stats.held
        self.emit = stats.record if self.tracing else _unheard

    def trip_bound(self) -> int | None:
        return self.replay.entered[self.j].trips if self.facts.bounded else None

    def carry(self) -> int:
        return self.replay.counters[self.j]

    def tape(self) -> StepTape:
        records = self.replay.records
        return tuple(records[k] for k in self.replay.inside[self.j])

    def load(self, tape: StepTape) -> None:
        for k, record in zip(self.replay.inside[self.j], tape):
            self.replay.records[k] = record

    def discard(self, tape: StepTape) -> None:
        self.replay.release(self.j, tape)

    def sweep(self) -> _ReplaySweep:
        return _ReplaySweep(self, self.replay.entered[self.j])


def _unheard(what: str, t: int) -> None:
    """Where the schedule events of a strategy that does not trace go."""


class _ReplaySweep:
    """The Sweep of one execution in a `_Replay`: keeps the latest iteration's tape,
    releasing the one before (as the interpreter's `_Sweep.ran`), and re-runs iterations
    by replaying the executions inside them."""

    def __init__(self, run: _ReplayRunner, e: _Execution):
        self.run, self.e = run, e
        self.last: StepTape | None = None

    def ran(self, t: int) -> None:
        if self.last is not None:
            self.run.discard(self.last)
        self.last = self.run.tape()

    def end(self, trips: int) -> None:
        """Nothing is logged, so nothing goes back on a log."""

    def advance(self, carry: int, start: int, steps: int) -> int:
        for t in range(start, start + steps):
            self.run.replay.rerun(self.e, t, taped=False)
        return start + steps

    def tape_steps(self, carry: int, start: int, count: int) -> list[StepTape]:
        tapes = []
        for t in range(start, start + count):
            self.run.replay.rerun(self.e, t, taped=True)
            tapes.append(self.run.tape())
        return tapes
