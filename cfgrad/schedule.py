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
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from .checkpoint import FREE, STORE, traced

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
