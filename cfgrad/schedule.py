"""The statistics of a compiled run: the interpreter's `RunStats`, from trip counts.

A checkpoint strategy never looks inside a carry or a tape: what it does depends only on
the iteration numbers (and a fori_loop's trip count). So `replayed_stats` runs every
loop's strategy through the interpreter's loop bookkeeping again, from nothing but the
trip count of each loop execution a compiled sweep logged, and so gives the
interpreter's `RunStats` (trip counts, steps, peaks, schedules) without running any
iteration's arithmetic. (The schedules compiled code follows are decided in compiled
code: schedule_machine.py.)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .checkpoint import LoopStats, RunStats, StepTape


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
        # no loop inside: a re-run step is a count, and its tape the empty tuple
        self.flat = not run.replay.inside[run.j]

    def ran(self, t: int) -> None:
        if self.last is not None:
            self.run.discard(self.last)
        self.last = self.run.tape()

    def end(self, trips: int) -> None:
        """Nothing is logged, so nothing goes back on a log."""

    def advance(self, carry: int, start: int, steps: int) -> int:
        if self.flat:  # only the count to replay: in one addition, not a call per step
            self.run.replay.stats.loops[self.e.loop].recompute_steps += steps
            return start + steps
        for t in range(start, start + steps):
            self.run.replay.rerun(self.e, t, taped=False)
        return start + steps

    def tape_steps(self, carry: int, start: int, count: int) -> list[StepTape]:
        if self.flat:
            self.run.replay.stats.loops[self.e.loop].recompute_steps += count
            return [()] * count
        tapes = []
        for t in range(start, start + count):
            self.run.replay.rerun(self.e, t, taped=True)
            tapes.append(self.run.tape())
        return tapes
