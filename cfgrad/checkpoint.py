"""Loop checkpointing strategies: how the reverse pass gets each iteration's state.

A strategy object is the user's choice (`while_loop(..., checkpoint=Binomial(8))`, or per
call with `grad(..., checkpoint=...)`; the loop's own choice wins). The interpreter calls
it through the `LoopStrategy` interface of interpret.py: `begin` when a loop execution
starts, `after_iteration(t)` at each back edge (the environment then holds iteration t's
carry and values, and the log holds what iteration t decided), `finish(T)` at exit, and
`restore(t)` from the adjoint's `LoopState` node, for t = T-1 down to 0, and `release`
for an execution that will never be reversed (an enclosing loop dropped the iteration that
ran it). `interpret.check_strategy` refuses anything without these methods.

Every strategy runs the same floating-point operations in the same order, so gradients
are bitwise identical whichever is chosen; only memory and recomputation differ.
Accounting (design §7) goes to the machine's `LoopStats` of the loop.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from typing import Any

from .errors import ArgumentValueError
from .interpret import LoopInfo, Machine
from .revolve import NEVER, OnlinePlacement, optimal_split


class StoreAll:
    """Keep every iteration's forward values that the adjoint reads; reverse by lookup.

    Memory grows with the trip count; no body evaluation is ever repeated."""

    def __repr__(self) -> str:
        return "StoreAll()"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self)  # a subclass may behave differently

    def __hash__(self) -> int:
        return hash(type(self))

    def begin(self, m: Machine, loop: LoopInfo) -> list[tuple]:
        return []

    def after_iteration(self, m: Machine, loop: LoopInfo, record: list[tuple], t: int) -> None:
        record.append(loop.read_saved(m.env))

    def finish(self, m: Machine, loop: LoopInfo, record: list[tuple], trips: int) -> None:
        # frames only accumulate during the sweep, so the accounting can wait until here
        stats = m.stats.loops[loop.index]
        stats.snapshots += trips
        stats.bytes += trips * loop.saved_bytes
        stats.peak_snapshots = max(stats.peak_snapshots, stats.snapshots)
        stats.peak_bytes = max(stats.peak_bytes, stats.bytes)

    def restore(self, m: Machine, loop: LoopInfo, record: list[tuple], t: int) -> None:
        # iterations are reversed T-1 … 0, so frame t is always the last one held
        loop.write_saved(m.env, record.pop())
        self._drop(m, loop, 1)

    def release(self, m: Machine, loop: LoopInfo, record: list[tuple]) -> None:
        for frame in record:
            m.release_frame(loop, frame)
        self._drop(m, loop, len(record))
        record.clear()

    @staticmethod
    def _drop(m: Machine, loop: LoopInfo, frames: int) -> None:
        stats = m.stats.loops[loop.index]
        stats.snapshots -= frames
        stats.bytes -= frames * loop.saved_bytes


class _Record:
    """One execution of a checkpointed loop."""

    __slots__ = ("marks", "events", "signatures", "last_log", "snaps", "last", "trips", "plan",
                 "expected_trips", "path", "placement", "pending")

    def __init__(self, marks: tuple[int, ...], expected_trips: int | None):
        self.marks = marks
        self.events: list[Any] = []  # the control events of the iteration running
        self.signatures: dict[int, tuple] = {}  # iteration -> its event signature
        self.last_log: tuple = ()  # the latest iteration's log entries
        self.snaps: dict[int, tuple] = {}  # iteration -> stored carry
        self.last: tuple | None = None  # the latest iteration's saved values (its tape)
        self.trips = 0
        self.plan: Iterator[int] | None = None
        self.expected_trips = expected_trips
        self.path: list[tuple[int, int]] = []  # the sweep's snapshots and their slots
        self.placement: OnlinePlacement | None = None  # Online: where snapshots go
        self.pending: tuple | None = None  # Online: the latest carry, not yet placed


class _Checkpointing:
    """The sweep and restore machinery shared by the recomputing strategies.

    The sweep runs every iteration taped but keeps only the latest iteration's tape: at
    each back edge the iteration's log entries are taken back off the log and its saved
    values replace the previous iteration's (whose nested loop records are released). At
    exit the last iteration's entries go back on the log, so iteration T-1 is reversed
    without recomputation (the revolve model). Each iteration's control events (every
    decision of the regions inside it, including those a nested loop's own strategy takes
    off the log) are kept as its signature, against which recomputation is checked. The carries a
    strategy chooses to keep are its snapshots; `_plan` then yields the iterations
    T-2 … 0 in turn, recomputing each from a snapshot."""

    trace = False

    def _params(self) -> tuple:
        return (type(self), tuple(sorted(vars(self).items())))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Checkpointing) and self._params() == other._params()

    def __hash__(self) -> int:
        return hash(self._params())

    # -- the sweep -------------------------------------------------------------------------
    def begin(self, m: Machine, loop: LoopInfo) -> _Record:
        rec = _Record(m.log_marks(loop), m.trip_bound(loop))
        if loop.event_ids:  # else no iteration decides anything there is to check
            m.sinks.append(rec.events)
        return rec

    def after_iteration(self, m: Machine, loop: LoopInfo, rec: _Record, t: int) -> None:
        # runs once per iteration of every sweep: what a loop without regions inside has
        # nothing of (log entries, events, nested records) is not even asked for
        if rec.marks:
            rec.last_log = m.take_log(loop, rec.marks)
        if rec.events:
            rec.signatures[t] = m.event_signature(loop, rec.events)
            rec.events.clear()
        if rec.last is None:
            self._hold(m, loop, loop.saved_bytes)  # one iteration's tape is kept at a time
        elif loop.nested_records:
            m.release_frame(loop, rec.last)
        rec.last = loop.read_saved(m.env)
        self._sweep(m, loop, rec, t)

    def _sweep(self, m: Machine, loop: LoopInfo, rec: _Record, t: int) -> None:
        """Iteration t has run: keep its carry (its input) if the strategy says so."""
        if t == 0 or self._keep(rec, t, m, loop):
            self._store(m, loop, rec, t, m.read(loop.carry_slots))
        self._event(m, loop, "advance", t)

    def finish(self, m: Machine, loop: LoopInfo, rec: _Record, trips: int) -> None:
        if loop.event_ids:
            m.sinks.pop()
        rec.trips = trips
        if trips:
            m.put_log(loop, rec.last_log)
            self._swept(m, loop, rec, trips)
        rec.plan = self._plan(m, loop, rec)

    def _swept(self, m: Machine, loop: LoopInfo, rec: _Record, trips: int) -> None:
        """The sweep has ended after `trips` >= 1 iterations; its last one keeps its tape."""
        schedule = m.stats.loops[loop.index].schedule
        if schedule:
            schedule[-1] = ("taped", trips - 1)

    # -- the reverse ------------------------------------------------------------------------
    def restore(self, m: Machine, loop: LoopInfo, rec: _Record, t: int) -> None:
        if t == rec.trips - 1:
            loop.write_saved(m.env, rec.last)
            rec.last = None
            self._hold(m, loop, -loop.saved_bytes)
        else:
            produced = next(rec.plan)
            assert produced == t, (produced, t)
        self._event(m, loop, "reverse", t)
        if t == 0:
            self._free_all(m, loop, rec)

    def _taped_from(self, m: Machine, loop: LoopInfo, rec: _Record, a: int, t: int) -> None:
        """Iteration t's values into the environment, recomputed from snapshot a."""
        self._event(m, loop, "restore", a)
        carry = m.advance(loop, rec.snaps[a], a, t - a, rec.signatures)
        self._events(m, loop, "advance", a, t)
        m.replay(loop, carry, t, 1, rec.signatures)
        self._event(m, loop, "taped", t)

    def _store_from(self, m: Machine, loop: LoopInfo, rec: _Record, a: int, pos: int) -> None:
        self._event(m, loop, "restore", a)
        carry = m.advance(loop, rec.snaps[a], a, pos - a, rec.signatures)
        self._events(m, loop, "advance", a, pos)
        self._store(m, loop, rec, pos, carry)

    def _revolve(self, m: Machine, loop: LoopInfo, rec: _Record, a: int, b: int,
                 slots: int) -> Iterator[int]:
        """Reverse iterations b-1 … a from the snapshot at a with `slots` slots (a's own
        included) by the revolve recursion: advance to the optimal split, store it, reverse
        the part after it with one slot less, then the part before it."""
        if b <= a:
            return
        if b - a == 1 or slots == 1:
            for t in range(b - 1, a - 1, -1):
                self._taped_from(m, loop, rec, a, t)
                yield t
            return
        mid = a + optimal_split(b - a, slots)
        self._store_from(m, loop, rec, a, mid)
        yield from self._revolve(m, loop, rec, mid, b, slots - 1)
        self._free(m, loop, rec, mid)
        yield from self._revolve(m, loop, rec, a, mid, slots)

    def release(self, m: Machine, loop: LoopInfo, rec: _Record) -> None:
        self._free_all(m, loop, rec)
        if rec.last is not None:
            m.release_frame(loop, rec.last)
            rec.last = None
            self._hold(m, loop, -loop.saved_bytes)

    # -- snapshots and accounting ---------------------------------------------------------------
    def _store(self, m: Machine, loop: LoopInfo, rec: _Record, t: int, carry: tuple) -> None:
        rec.snaps[t] = carry
        stats = m.stats.loops[loop.index]
        stats.snapshots += 1
        stats.bytes += loop.carry_bytes
        stats.peak_snapshots = max(stats.peak_snapshots, stats.snapshots)
        stats.peak_bytes = max(stats.peak_bytes, stats.bytes)
        self._event(m, loop, "store", t)

    def _free(self, m: Machine, loop: LoopInfo, rec: _Record, t: int) -> None:
        del rec.snaps[t]
        stats = m.stats.loops[loop.index]
        stats.snapshots -= 1
        stats.bytes -= loop.carry_bytes
        self._event(m, loop, "free", t)

    def _free_all(self, m: Machine, loop: LoopInfo, rec: _Record) -> None:
        for pos in list(rec.snaps):
            self._free(m, loop, rec, pos)

    @staticmethod
    def _hold(m: Machine, loop: LoopInfo, nbytes: int) -> None:
        """Account for tapes (saved iteration values) held besides the snapshots."""
        stats = m.stats.loops[loop.index]
        stats.bytes += nbytes
        stats.peak_bytes = max(stats.peak_bytes, stats.bytes)

    def _event(self, m: Machine, loop: LoopInfo, what: str, t: int) -> None:
        if self.trace:
            stats = m.stats.loops[loop.index]
            if stats.schedule is None:
                stats.schedule = []
            stats.schedule.append((what, t))

    def _events(self, m: Machine, loop: LoopInfo, what: str, first: int, stop: int) -> None:
        """`what` for each of the iterations first … stop-1 that advance or replay ran (a
        loop of no-op calls per recomputed iteration when not tracing, so it is skipped)."""
        if self.trace:
            for i in range(first, stop):
                self._event(m, loop, what, i)

    # -- what each strategy decides ---------------------------------------------------------------
    def _keep(self, rec: _Record, t: int, m: Machine, loop: LoopInfo) -> bool:
        raise NotImplementedError

    def _plan(self, m: Machine, loop: LoopInfo, rec: _Record) -> Iterator[int]:
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

    def __init__(self, *, trace: bool = False):
        self.trace = trace

    def __repr__(self) -> str:
        return "Recompute()"

    def _keep(self, rec: _Record, t: int, m: Machine, loop: LoopInfo) -> bool:
        return False

    def _plan(self, m: Machine, loop: LoopInfo, rec: _Record) -> Iterator[int]:
        for t in range(rec.trips - 2, -1, -1):
            self._taped_from(m, loop, rec, 0, t)
            yield t


class EveryK(_Checkpointing):
    """Keep every k-th carry; reverse each segment of k iterations by recomputing it once
    with its tape kept: about T/k + k stored states and T extra body evaluations."""

    def __init__(self, k: int, *, trace: bool = False):
        self.k = _positive_int("EveryK: k", k)
        self.trace = trace

    def __repr__(self) -> str:
        return f"EveryK({self.k})"

    def _keep(self, rec: _Record, t: int, m: Machine, loop: LoopInfo) -> bool:
        # the last iteration keeps its tape, so a fori_loop need not store its carry
        return t % self.k == 0 and t != (rec.expected_trips or 0) - 1

    def _plan(self, m: Machine, loop: LoopInfo, rec: _Record) -> Iterator[int]:
        end = rec.trips - 1  # iteration T-1 was taped by the sweep
        if end > 0 and end in rec.snaps:  # a while_loop stored it before it knew T
            self._free(m, loop, rec, end)
        while end > 0:
            start = ((end - 1) // self.k) * self.k
            self._event(m, loop, "restore", start)
            frames = m.replay(loop, rec.snaps[start], start, end - start, rec.signatures)
            self._hold(m, loop, loop.saved_bytes * len(frames))
            self._events(m, loop, "taped", start, end)
            for t in range(end - 1, start - 1, -1):
                loop.write_saved(m.env, frames.pop())
                self._hold(m, loop, -loop.saved_bytes)
                yield t
            if start != 0:
                self._free(m, loop, rec, start)
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

    def __init__(self, snapshots: int, *, trace: bool = False):
        self.snapshots = _positive_int(f"{type(self).__name__}: snapshots", snapshots)
        self.trace = trace

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.snapshots})"

    def begin(self, m: Machine, loop: LoopInfo) -> _Record:
        rec = super().begin(m, loop)
        rec.placement = OnlinePlacement(self.snapshots)
        return rec

    def _sweep(self, m: Machine, loop: LoopInfo, rec: _Record, t: int) -> None:
        placement = rec.placement
        if placement is None:  # Binomial with the trip count known: its own path
            super()._sweep(m, loop, rec, t)
            return
        carry = m.read(loop.carry_slots)
        if t == 0:
            self._store(m, loop, rec, 0, carry)
            return
        if placement.due != NEVER:  # (with one slot nothing is ever placed)
            if rec.pending is None:  # t = 1: from now on one carry is held back
                self._hold(m, loop, loop.carry_bytes)
            elif t + 1 == placement.due:  # x_{t-1} is not the last input: store it now
                stored, evicted = placement.place()
                if evicted is not None:
                    self._free(m, loop, rec, evicted)
                self._store(m, loop, rec, stored, rec.pending)
            rec.pending = carry
        if self.trace:  # events trail the sweep by one iteration
            self._event(m, loop, "advance", t - 1)

    def _swept(self, m: Machine, loop: LoopInfo, rec: _Record, trips: int) -> None:
        if rec.placement is None:
            super()._swept(m, loop, rec, trips)
            return
        self._event(m, loop, "taped", trips - 1)
        self._drop_pending(m, loop, rec)
        rec.path = [(pos, self.snapshots - i) for i, pos in enumerate(rec.placement.positions)]

    def _drop_pending(self, m: Machine, loop: LoopInfo, rec: _Record) -> None:
        if rec.pending is not None:
            rec.pending = None
            self._hold(m, loop, -loop.carry_bytes)

    def release(self, m: Machine, loop: LoopInfo, rec: _Record) -> None:
        self._drop_pending(m, loop, rec)
        super().release(m, loop, rec)

    def _plan(self, m: Machine, loop: LoopInfo, rec: _Record) -> Iterator[int]:
        b = rec.trips - 1  # iteration T-1 was taped by the sweep
        for a, slots in reversed(rec.path):
            yield from self._revolve(m, loop, rec, a, b, slots)
            if a != 0:
                self._free(m, loop, rec, a)
            b = a


class Binomial(Online):
    """At most `snapshots` stored carries (the initial one included) and the provably
    minimal number of body evaluations for that memory: the revolve schedule of Griewank &
    Walther, when the trip count is known on entry (fori_loop). On a while_loop, whose trip
    count is unknown until it exits, it places its snapshots online, as `Online`."""

    def begin(self, m: Machine, loop: LoopInfo) -> _Record:
        rec = super().begin(m, loop)
        if rec.expected_trips is not None:
            rec.placement = None
            rec.path = first_path(rec.expected_trips, self.snapshots)
        return rec

    def _keep(self, rec: _Record, t: int, m: Machine, loop: LoopInfo) -> bool:
        return any(pos == t for pos, _ in rec.path)


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
