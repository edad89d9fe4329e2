"""Loop checkpointing strategies: how the reverse pass gets each iteration's state.

A strategy object is the user's choice (`while_loop(..., checkpoint=Binomial(8))`, or per
call with `grad(..., checkpoint=...)`; the loop's own choice wins). This module sits below
the interpreter and knows nothing of it: the interpreter calls a strategy through
`LoopStrategy` (`begin` when a loop execution starts, `after_iteration(t)` at each back
edge, `finish(T)` at exit, `restore(t)` from the adjoint's `LoopState` node for t = T-1
down to 0, `release` for an execution that will never be reversed), and hands it a
`LoopRunner`: the few services a strategy needs (read the carry and the tape of the
iteration that just ran, put a tape back, re-run iterations from a carry untaped or
taped) and the two channels its events go out by. Those events (`store`, `advance`,
`taped`, `reverse`, `restore`, `free`, and the bytes it holds) are what `LoopStats`
counts and what a `trace=True` schedule lists: a strategy mutates no statistics itself.

Every strategy runs the same floating-point operations in the same order, so gradients
are bitwise identical whichever is chosen; only memory and recomputation differ.
"""

from __future__ import annotations

import copy
import operator
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from .errors import ArgumentValueError
from .revolve import NEVER, OnlinePlacement, optimal_split

# The events of a schedule, each about one iteration t of one loop execution:
STORE = "store"  # carry x_t kept as a snapshot
FREE = "free"  # snapshot x_t dropped
RESTORE = "restore"  # x_t made the current state again, from its snapshot
ADVANCE = "advance"  # iteration t run untaped (the sweep's iterations count too)
TAPED = "taped"  # iteration t run with its tape (the values its adjoint reads) kept
REVERSE = "reverse"  # iteration t's tape handed to the adjoint

Carry = tuple  # one loop carry, as the interpreter holds it
StepTape = tuple  # what one iteration saves for its adjoint, as the interpreter holds it

# How compiled code (native.py) runs a strategy, which its class declares as `compiled`:
TAPES_EVERY_STEP = "tapes every step"  # each iteration's tape pushed at its back edge
# the sweep stores the carries and the reverse pass re-runs the iterations that the
# strategy's schedule names (schedule_machine.py: its decisions as a compiled state machine)
FOLLOWS_SCHEDULE = "follows its schedule"


def compiled_form(strategy: Any) -> str | None:
    """How compiled code runs `strategy` (TAPES_EVERY_STEP or FOLLOWS_SCHEDULE), or None
    when it cannot: what the strategy's own class declares (`compiled`), not a base
    class's, since a subclass may change what the strategy does (a strategy of the user's
    own runs in the interpreter)."""
    return vars(type(strategy)).get("compiled")


@dataclass
class LoopStats:
    """Per loop region, over one forward + reverse run (docs/checkpointing.md, Accounting):
    the trip counts and body evaluations the interpreter counts, and what the strategy's
    events add up to."""

    name: str
    strategy: str
    trip_counts: list[int] = field(default_factory=list)
    forward_steps: int = 0
    recompute_steps: int = 0
    peak_snapshots: int = 0
    peak_bytes: int = 0
    snapshots: int = 0  # currently held (for the peaks)
    bytes: int = 0
    schedule: list[tuple[str, int]] | None = None  # with trace=True: the (event, t) list

    def held(self, snapshots: int, nbytes: int) -> None:
        """A strategy now holds `snapshots` more carries (or tapes, for StoreAll) and
        `nbytes` more bytes (fewer when negative)."""
        self.snapshots += snapshots
        self.bytes += nbytes
        if self.snapshots > self.peak_snapshots:
            self.peak_snapshots = self.snapshots
        if self.bytes > self.peak_bytes:
            self.peak_bytes = self.bytes

    def record(self, what: str, t: int) -> None:
        """A schedule event (listened to when the strategy traces)."""
        if self.schedule is None:
            self.schedule = []
        self.schedule.append((what, t))


@dataclass
class RunStats:
    loops: list[LoopStats]

    def loop(self, name: str) -> LoopStats:
        return next(s for s in self.loops if s.name == name)


class Sweep(Protocol):
    """One execution of a loop whose strategy re-runs iterations in reverse. The
    interpreter keeps each iteration's path (the decisions of the regions inside it),
    against which every re-run is checked, and of the sweep's tapes and control-log
    entries only the latest iteration's: the rest are re-derived by re-running."""

    last: StepTape | None  # the latest iteration's tape, until the strategy takes it

    def ran(self, t: int) -> None:
        """Iteration t has run: its tape replaces the previous one as `last` (that one is
        discarded), its log entries come off the log."""

    def end(self, trips: int) -> None:
        """The loop has exited: the last iteration's log entries go back on the log."""

    def advance(self, carry: Carry, start: int, steps: int) -> Carry:
        """Run iterations start … start+steps-1 untaped from `carry`; the carry reached."""

    def tape_steps(self, carry: Carry, start: int, count: int) -> list[StepTape]:
        """Run iterations start … start+count-1 taped from `carry`, logging their control
        decisions for the adjoint; their tapes (the environment holds the last one's)."""


class LoopRunner(Protocol):
    """What the interpreter offers a strategy for one loop region. Facts: the size of one
    carry and of one tape, whether schedule events are listened to (a strategy skips the
    per-iteration ones otherwise). Services: the carry and tape of the iteration that just
    ran, putting a tape back for the adjoint, discarding one that will never be reversed,
    and opening a `Sweep`. Events: `emit(what, t)` for the schedule, `held(snapshots,
    nbytes)` for memory; `LoopStats` listens to both."""

    carry_bytes: int
    tape_bytes: int
    tracing: bool

    def trip_bound(self) -> int | None:
        """The trip count of a fori_loop, known when it is entered (None for while)."""

    def carry(self) -> Carry:
        """At a back edge: the carry iteration t started from (its input)."""

    def tape(self) -> StepTape:
        """At a back edge: iteration t's tape."""

    def load(self, tape: StepTape) -> None:
        """Put a tape back where the adjoint reads it."""

    def discard(self, tape: StepTape) -> None:
        """A tape that will never be reversed: release the loop executions it holds."""

    def sweep(self) -> Sweep: ...

    def emit(self, what: str, t: int) -> None: ...

    def held(self, snapshots: int, nbytes: int) -> None: ...


class LoopStrategy(Protocol):
    """How one loop's reverse pass gets iteration t's forward values. `begin` returns the
    execution's record, which the other calls receive; `release` drops a record that will
    never be reversed (the enclosing loop discarded the iteration that ran it), so what it
    held stops being counted."""

    def begin(self, run: LoopRunner) -> Any: ...
    def after_iteration(self, run: LoopRunner, record: Any, t: int) -> None: ...
    def finish(self, run: LoopRunner, record: Any, trips: int) -> None: ...
    def restore(self, run: LoopRunner, record: Any, t: int) -> None: ...
    def release(self, run: LoopRunner, record: Any) -> None: ...


_STRATEGY_METHODS = tuple(n for n in vars(LoopStrategy) if not n.startswith("_"))


def check_strategy(choice: Any, where: str) -> Any:
    """Refuse a `checkpoint=` value that is not a strategy object, by name, at the call
    that received it (instead of an AttributeError deep inside the interpreter)."""
    if isinstance(choice, type):
        raise ArgumentValueError(
            f"{where}: checkpoint= takes a strategy instance, got the class {choice.__name__}; "
            f"call it, e.g. checkpoint={choice.__name__}(...)")
    if choice is None or all(callable(getattr(choice, a, None)) for a in _STRATEGY_METHODS):
        return choice
    raise ArgumentValueError(
        f"{where}: checkpoint= takes a strategy object from cfgrad.checkpoint (StoreAll(), "
        f"Recompute(), EveryK(k), Binomial(snapshots), Online(snapshots)) or None, got "
        f"{choice!r}")


class StoreAll:
    """Keep every iteration's forward values that the adjoint reads; reverse by lookup.

    Memory grows with the trip count; no body evaluation is ever repeated."""

    compiled = TAPES_EVERY_STEP

    def __repr__(self) -> str:
        return "StoreAll()"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self)  # a subclass may behave differently

    def __hash__(self) -> int:
        return hash(type(self))

    def begin(self, run: LoopRunner) -> list[StepTape]:
        return []

    def after_iteration(self, run: LoopRunner, record: list[StepTape], t: int) -> None:
        record.append(run.tape())

    def finish(self, run: LoopRunner, record: list[StepTape], trips: int) -> None:
        # tapes only accumulate during the sweep, so the accounting can wait until here
        run.held(trips, trips * run.tape_bytes)

    def restore(self, run: LoopRunner, record: list[StepTape], t: int) -> None:
        # iterations are reversed T-1 … 0, so tape t is always the last one held
        run.load(record.pop())
        run.held(-1, -run.tape_bytes)

    def release(self, run: LoopRunner, record: list[StepTape]) -> None:
        for tape in record:
            run.discard(tape)
        run.held(-len(record), -len(record) * run.tape_bytes)
        record.clear()


class _Record:
    """One execution of a checkpointed loop."""

    __slots__ = ("sweep", "snaps", "trips", "plan", "expected_trips", "path", "placement",
                 "pending")

    def __init__(self, sweep: Sweep, expected_trips: int | None):
        self.sweep = sweep
        self.snaps: dict[int, Carry] = {}  # iteration -> stored carry
        self.trips = 0
        self.plan: Iterator[int] | None = None
        self.expected_trips = expected_trips
        self.path: list[tuple[int, int]] = []  # the sweep's snapshots and their slots
        self.placement: OnlinePlacement | None = None  # Online: where snapshots go
        self.pending: Carry | None = None  # Online: the latest carry, not yet placed


class _Checkpointing:
    """The sweep and restore machinery shared by the recomputing strategies.

    The sweep runs every iteration taped but keeps only the latest iteration's tape (the
    runner's `Sweep`), so iteration T-1 is reversed without recomputation (the revolve
    model). The carries a strategy chooses to keep are its snapshots; `_plan` then yields
    the iterations T-2 … 0 in turn, recomputing each from a snapshot."""

    trace = False

    def _params(self) -> tuple:
        return (type(self), tuple(sorted(vars(self).items())))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Checkpointing) and self._params() == other._params()

    def __hash__(self) -> int:
        return hash(self._params())

    # -- the sweep -------------------------------------------------------------------------
    def begin(self, run: LoopRunner) -> _Record:
        return _Record(run.sweep(), run.trip_bound())

    def after_iteration(self, run: LoopRunner, rec: _Record, t: int) -> None:
        if t == 0:
            run.held(0, run.tape_bytes)  # one iteration's tape is kept at a time
        rec.sweep.ran(t)
        self._sweep(run, rec, t)

    def _sweep(self, run: LoopRunner, rec: _Record, t: int) -> None:
        """Iteration t has run: keep its carry (its input) if the strategy says so. The
        `advance` events trail by one iteration, so the last one is reported as `taped`."""
        if run.tracing and t:
            run.emit(ADVANCE, t - 1)
        if t == 0 or self._keep(rec, t):
            self._store(run, rec, t, run.carry())

    def finish(self, run: LoopRunner, rec: _Record, trips: int) -> None:
        rec.sweep.end(trips)
        rec.trips = trips
        if trips:
            self._swept(run, rec, trips)
        rec.plan = self._plan(run, rec)

    def _swept(self, run: LoopRunner, rec: _Record, trips: int) -> None:
        """The sweep has ended after `trips` >= 1 iterations; its last one keeps its tape."""
        run.emit(TAPED, trips - 1)

    # -- the reverse ------------------------------------------------------------------------
    def restore(self, run: LoopRunner, rec: _Record, t: int) -> None:
        if t == rec.trips - 1:
            run.load(rec.sweep.last)
            rec.sweep.last = None
            run.held(0, -run.tape_bytes)
        else:
            produced = next(rec.plan)
            assert produced == t, (produced, t)
        run.emit(REVERSE, t)
        if t == 0:
            self._free_all(run, rec)

    def _taped_from(self, run: LoopRunner, rec: _Record, a: int, t: int) -> None:
        """Iteration t's tape where the adjoint reads it, recomputed from snapshot a."""
        run.emit(RESTORE, a)
        carry = rec.sweep.advance(rec.snaps[a], a, t - a)
        self._events(run, ADVANCE, a, t)
        rec.sweep.tape_steps(carry, t, 1)
        run.emit(TAPED, t)

    def _store_from(self, run: LoopRunner, rec: _Record, a: int, pos: int) -> None:
        run.emit(RESTORE, a)
        carry = rec.sweep.advance(rec.snaps[a], a, pos - a)
        self._events(run, ADVANCE, a, pos)
        self._store(run, rec, pos, carry)

    def _revolve(self, run: LoopRunner, rec: _Record, a: int, b: int,
                 slots: int) -> Iterator[int]:
        """Reverse iterations b-1 … a from the snapshot at a with `slots` slots (a's own
        included) by the revolve recursion: advance to the optimal split, store it, reverse
        the part after it with one slot less, then the part before it."""
        if b <= a:
            return
        if b - a == 1 or slots == 1:
            for t in range(b - 1, a - 1, -1):
                self._taped_from(run, rec, a, t)
                yield t
            return
        mid = a + optimal_split(b - a, slots)
        self._store_from(run, rec, a, mid)
        yield from self._revolve(run, rec, mid, b, slots - 1)
        self._free(run, rec, mid)
        yield from self._revolve(run, rec, a, mid, slots)

    def release(self, run: LoopRunner, rec: _Record) -> None:
        self._free_all(run, rec)
        if rec.sweep.last is not None:
            run.discard(rec.sweep.last)
            rec.sweep.last = None
            run.held(0, -run.tape_bytes)

    # -- snapshots ----------------------------------------------------------------------------
    def _store(self, run: LoopRunner, rec: _Record, t: int, carry: Carry) -> None:
        rec.snaps[t] = carry
        run.held(1, run.carry_bytes)
        run.emit(STORE, t)

    def _free(self, run: LoopRunner, rec: _Record, t: int) -> None:
        del rec.snaps[t]
        run.held(-1, -run.carry_bytes)
        run.emit(FREE, t)

    def _free_all(self, run: LoopRunner, rec: _Record) -> None:
        for pos in list(rec.snaps):
            self._free(run, rec, pos)

    @staticmethod
    def _events(run: LoopRunner, what: str, first: int, stop: int) -> None:
        """`what` for each of the iterations first … stop-1 that one re-run covered (a
        loop of no-op calls per recomputed iteration when no one listens, so skipped)."""
        if run.tracing:
            for i in range(first, stop):
                run.emit(what, i)

    # -- what each strategy decides ---------------------------------------------------------------
    def _keep(self, rec: _Record, t: int) -> bool:
        raise NotImplementedError

    def _plan(self, run: LoopRunner, rec: _Record) -> Iterator[int]:
        raise NotImplementedError


def _positive_int(name: str, value: Any) -> int:
    """An integer >= 1; numpy integers count (budgets often come from config arrays)."""
    try:
        count = operator.index(value) if not isinstance(value, bool) else None
    except TypeError:
        count = None
    if count is None or count < 1:
        raise ArgumentValueError(f"{name} must be an integer >= 1, got {value!r}")
    return count


class Recompute(_Checkpointing):
    """Keep only the initial carry; recompute every iteration from it: O(1) carries,
    O(T²) body evaluations."""

    compiled = FOLLOWS_SCHEDULE

    def __init__(self, *, trace: bool = False):
        self.trace = trace

    def __repr__(self) -> str:
        return "Recompute()"

    def _keep(self, rec: _Record, t: int) -> bool:
        return False

    def _plan(self, run: LoopRunner, rec: _Record) -> Iterator[int]:
        for t in range(rec.trips - 2, -1, -1):
            self._taped_from(run, rec, 0, t)
            yield t


class EveryK(_Checkpointing):
    """Keep every k-th carry; reverse each segment of k iterations by recomputing it once
    with its tape kept: about T/k + k stored states and T extra body evaluations."""

    compiled = FOLLOWS_SCHEDULE

    def __init__(self, k: int, *, trace: bool = False):
        self.k = _positive_int("EveryK: k", k)
        self.trace = trace

    def __repr__(self) -> str:
        return f"EveryK({self.k})"

    def _keep(self, rec: _Record, t: int) -> bool:
        # the last iteration keeps its tape, so a fori_loop need not store its carry
        return t % self.k == 0 and t != (rec.expected_trips or 0) - 1

    def _plan(self, run: LoopRunner, rec: _Record) -> Iterator[int]:
        end = rec.trips - 1  # iteration T-1 was taped by the sweep
        if end > 0 and end in rec.snaps:  # a while_loop stored it before it knew T
            self._free(run, rec, end)
        while end > 0:
            start = ((end - 1) // self.k) * self.k
            run.emit(RESTORE, start)
            tapes = rec.sweep.tape_steps(rec.snaps[start], start, end - start)
            run.held(0, run.tape_bytes * len(tapes))
            self._events(run, TAPED, start, end)
            for t in range(end - 1, start - 1, -1):
                run.load(tapes.pop())
                run.held(0, -run.tape_bytes)
                yield t
            if start != 0:
                self._free(run, rec, start)
            end = start


class Online(_Checkpointing):
    """At most `snapshots` stored carries (the initial one included) for loops whose trip
    count is unknown until they exit (while_loop): snapshots are placed online as the
    sweep runs (revolve.OnlinePlacement), and once the loop has exited the segments
    between them are reversed by the optimal revolve recursion.

    Iteration t's carry is held back until the next back edge: only once iteration t+1 has
    started is it known that x_t is not the input of the last iteration (whose tape the
    sweep keeps, so storing x_t would waste a slot). Deciding one step late is what makes
    the placement optimal for every T <= (s+1)(s+2)/2 + 1; the carry held meanwhile counts in
    `peak_bytes`, like the one tape the sweep keeps."""

    compiled = FOLLOWS_SCHEDULE

    def __init__(self, snapshots: int, *, trace: bool = False):
        self.snapshots = _positive_int(f"{type(self).__name__}: snapshots", snapshots)
        self.trace = trace

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.snapshots})"

    def begin(self, run: LoopRunner) -> _Record:
        rec = super().begin(run)
        rec.placement = OnlinePlacement(self.snapshots)
        return rec

    def _sweep(self, run: LoopRunner, rec: _Record, t: int) -> None:
        placement = rec.placement
        if placement is None:  # Binomial with the trip count known: its own path
            super()._sweep(run, rec, t)
            return
        carry = run.carry()
        if t == 0:
            self._store(run, rec, 0, carry)
            return
        if placement.due != NEVER:  # (with one slot nothing is ever placed)
            if rec.pending is None:  # t = 1: from now on one carry is held back
                run.held(0, run.carry_bytes)
            elif t + 1 == placement.due:  # x_{t-1} is not the last input: store it now
                stored, evicted = placement.place()
                if evicted is not None:
                    self._free(run, rec, evicted)
                self._store(run, rec, stored, rec.pending)
            rec.pending = carry
        if run.tracing:  # after the store of x_{t-1}, the advance from it
            run.emit(ADVANCE, t - 1)

    def _swept(self, run: LoopRunner, rec: _Record, trips: int) -> None:
        super()._swept(run, rec, trips)
        if rec.placement is not None:
            self._drop_pending(run, rec)
            rec.path = [(pos, self.snapshots - i)
                        for i, pos in enumerate(rec.placement.positions)]

    def _drop_pending(self, run: LoopRunner, rec: _Record) -> None:
        if rec.pending is not None:
            rec.pending = None
            run.held(0, -run.carry_bytes)

    def release(self, run: LoopRunner, rec: _Record) -> None:
        self._drop_pending(run, rec)
        super().release(run, rec)

    def _plan(self, run: LoopRunner, rec: _Record) -> Iterator[int]:
        b = rec.trips - 1  # iteration T-1 was taped by the sweep
        for a, slots in reversed(rec.path):
            yield from self._revolve(run, rec, a, b, slots)
            if a != 0:
                self._free(run, rec, a)
            b = a


class Binomial(Online):
    """At most `snapshots` stored carries (the initial one included) and the provably
    minimal number of body evaluations for that memory: the revolve schedule of Griewank &
    Walther, when the trip count is known on entry (fori_loop). On a while_loop, whose trip
    count is unknown until it exits, it places its snapshots online, as `Online`."""

    compiled = FOLLOWS_SCHEDULE

    def begin(self, run: LoopRunner) -> _Record:
        rec = super().begin(run)
        if rec.expected_trips is not None:
            rec.placement = None
            rec.path = first_path(rec.expected_trips, self.snapshots)
        return rec

    def _keep(self, rec: _Record, t: int) -> bool:
        return any(pos == t for pos, _ in rec.path)


#: The strategies a loop or a call may choose (their reprs are what `checkpoint=` prints in
#: the IR text, and what the parser and the command line accept).
STRATEGIES: tuple[type, ...] = (StoreAll, Recompute, EveryK, Online, Binomial)


def first_path(trips: int, snapshots: int) -> list[tuple[int, int]]:
    """The snapshots the sweep stores under the revolve schedule: (iteration, slots left for
    the rest of the loop from there), starting with the initial carry."""
    path = [(0, snapshots)]
    a, c = 0, snapshots
    while trips - a > 1 and c > 1:
        a, c = a + optimal_split(trips - a, c), c - 1
        path.append((a, c))
    return path


def resolve(region_choice: Any, call_choice: Any) -> Any:
    """The loop's own choice wins over the call's; StoreAll when neither chose."""
    return region_choice if region_choice is not None else (call_choice or StoreAll())


def traced(strategy: Any) -> Any:
    """`strategy` with its schedule events listened to: a copy made with `trace=True`.

    For a viewer (the inspector) that shows the schedule of a run whose strategies were
    made without `trace=True`: tracing changes no decision of a strategy, only whether its
    events are recorded, so the copy runs the same schedule, and the user's object is left
    as it was. A strategy without a `trace` attribute (StoreAll, which recomputes nothing
    and has no schedule, or one of the user's own) is returned as it is."""
    if not hasattr(strategy, "trace") or strategy.trace:  # nothing to trace, or traced
        return strategy
    copied = copy.copy(strategy)
    copied.trace = True
    return copied
