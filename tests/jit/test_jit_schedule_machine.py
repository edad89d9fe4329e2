"""The schedules compiled code decides (cfgrad/schedule_machine.py) are the strategies'
own: for every strategy over many (trip count, fori bound, parameter), each back edge of
the sweep stores the carry the strategy object stores, in the same snapshot row, and each
`LoopState` runs the operations the strategy's `restore` does (restore, re-run untaped or
taped, store, load), in the same order. The reference runs the real strategy objects of
checkpoint.py against a runner whose carries and tapes are iteration numbers (`Symbolic`):
all a strategy ever looks at. Then compiled gradients under each strategy, on while and
fori loops of 0, 1, 2 and more trips, bitwise equal to the interpreter's, in one program."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

import cfgrad as cg
from cfgrad import revolve
from cfgrad import schedule_machine as SM
from cfgrad.checkpoint import FREE, STORE, Binomial, EveryK, Online, Recompute, traced
from cfgrad.schedule_machine import ADVANCE, LOAD, SET, STORE_ROW, TAPE

FREED = -1  # a row freed: no operation of its own


class Symbolic:
    """A LoopRunner and its Sweep at once, where a carry is the number of the iteration
    it is the input of and a tape the number of the iteration that made it; records the
    operations compiled code runs for the strategy's calls, rows handed out lowest free
    first."""

    carry_bytes = 0
    tape_bytes = 0
    tracing = True

    def __init__(self, bound: int | None):
        self.bound = bound
        self.t = 0
        self.rows: dict[int, int] = {}  # snapshot iteration -> row
        self.used = 0
        self.ops: list[tuple[int, ...]] = []
        self.current: int | None = None  # the iteration whose carry the state holds
        self.last: int | None = None

    def trip_bound(self):
        return self.bound

    def carry(self):
        return self.t

    def tape(self):
        return self.t

    def load(self, tape):
        self.ops.append((LOAD, tape))
        self.current = None  # loading a tape may overwrite carry values

    def discard(self, tape):
        pass

    def sweep(self):
        return self

    def held(self, snapshots, nbytes):
        pass

    def emit(self, what, t):
        if what == STORE:
            row = min(set(range(len(self.rows) + 1)) - set(self.rows.values()))
            self.rows[t] = row
            self.used = max(self.used, row + 1)
            self.ops.append((STORE_ROW, row, t))
        elif what == FREE:
            self.ops.append((FREED, self.rows.pop(t)))

    def ran(self, t):
        self.last = t

    def end(self, trips):
        pass

    def _from(self, carry):
        if carry != self.current:
            self.ops.append((SET, self.rows[carry]))

    def advance(self, carry, start, steps):
        self._from(carry)
        if steps:
            self.ops.append((ADVANCE, steps))
        self.current = start + steps
        return self.current

    def tape_steps(self, carry, start, count):
        self._from(carry)
        self.ops.append((TAPE, count))
        self.current = start + count
        return list(range(start, start + count))


def reference(strategy, trips: int, bound: int):
    """What the strategy object does: per back edge the code `sweep_step` gives (-1, or
    2 * row + 1 for the previous carry, 2 * row for this one), the operations of each
    restore (T-1 first, each ending with the LOAD of its tape), the rows it used."""
    strategy = traced(strategy)
    run = Symbolic(None if bound < 0 else bound)
    record = strategy.begin(run)
    codes = []
    for t in range(trips):
        run.t = t
        run.ops.clear()
        strategy.after_iteration(run, record, t)
        stored = [op for op in run.ops if op[0] == STORE_ROW]
        assert len(stored) <= 1
        codes.append(-1 if not stored else 2 * stored[0][1] + (stored[0][2] == t - 1))
        assert not stored or stored[0][2] in (t, t - 1)
    strategy.finish(run, record, trips)
    restores = []
    for t in range(trips - 1, -1, -1):
        run.ops.clear()
        strategy.restore(run, record, t)
        ops = [op[:2] for op in run.ops if op[0] != FREED]
        if ops[-1] != (LOAD, t):  # the re-run's last tape is the one the adjoint reads
            assert ops[-1][0] == TAPE
            ops.append((LOAD, t))
        restores.append(ops)
    return codes, restores, run.used


def machine(strategy, trips: int, bound: int):
    kind, param = SM.machine_of(strategy)
    slots = SM.slots_of(kind, param)
    sw = np.zeros(SM.sweep_size(slots), np.int64)
    SM.sweep_begin(sw, kind, param, bound, 0)
    codes = [int(SM.sweep_step(sw, t)) if t == sw[SM.AT] else -1 for t in range(trips)]
    if not trips:
        return codes, [], 0
    record = np.zeros_like(sw)
    used = int(SM.sweep_end(sw, trips, record))
    rv = np.zeros(SM.reverse_size(slots), np.int64)
    rv[SM.reverse_done(slots)] = -1
    SM.reverse_begin(rv, record)
    q = np.zeros((SM.queue_rows(slots), 2), np.int64)
    restores = []
    for _ in range(trips):
        n = SM.reverse_step(rv, q)
        restores.append([tuple(map(int, op)) for op in q[:n]])
    assert rv[SM.reverse_done(slots)] < 0
    return codes, restores, used


STRATEGIES = [Recompute(), EveryK(1), EveryK(2), EveryK(3), EveryK(7), *(
    cls(s) for cls in (Online, Binomial) for s in (1, 2, 3, 4, 6))]


@pytest.mark.parametrize("strategy", STRATEGIES, ids=repr)
def test_each_decision_is_the_strategys(strategy) -> None:
    for trips in [*range(0, 30), 57, 233]:
        for bound in (-1, trips):
            want_codes, want_ops, want_used = reference(strategy, trips, bound)
            codes, ops, used = machine(strategy, trips, bound)
            where = (strategy, trips, bound)
            assert codes == want_codes, where
            assert ops == want_ops, where
            assert want_used <= used, where


def test_revolve_arithmetic_is_revolve_py() -> None:
    for c in range(1, 9):
        for l in range(0, 400):
            assert SM.optimal_cost(l, c) == revolve.optimal_cost(l, c), (l, c)
            if l >= 2 and c >= 2:
                assert SM.optimal_split(l, c) == revolve.optimal_split(l, c), (l, c)
    rng = np.random.default_rng(0)
    for _ in range(300):
        l, c = int(rng.integers(2, 10**7)), int(rng.integers(2, 40))
        assert SM.optimal_split(l, c) == revolve.optimal_split(l, c), (l, c)
        assert SM.optimal_cost(l, c) == revolve.optimal_cost(l, c), (l, c)


LONG = os.environ.get("CFGRAD_HYPOTHESIS") == "long"


@pytest.mark.skipif(not LONG, reason="30 s of cold compile: CFGRAD_HYPOTHESIS=long")
def test_compiled_gradients_equal_the_interpreters_under_each_strategy() -> None:
    """One program: a fori_loop and a while_loop under each recomputing strategy (EveryK(3)
    at 7 trips: the last iteration is a multiple of k, which a fori_loop does not store;
    Binomial on a fori_loop stores the revolve path, on a while_loop places online), then
    a while_loop under Online inside a Binomial fori_loop; 0, 1, 2 and 7 trips. The default
    run has tests/jit/test_jit_checkpoint.py's: a while_loop under each strategy, fori_loops
    under EveryK(2) at 7 trips and under Binomial(2) with loops inside, at 0, 1 and 7."""
    strategies = [Recompute(), EveryK(3), Online(2), Binomial(3)]

    def step(x):
        return x * 0.75 + 0.5 / (1 + x * x)

    def f(x, n):
        for s in strategies:
            x = cg.fori_loop(0, n, lambda i, c: step(c), x, checkpoint=s)
            x, _ = cg.while_loop(lambda c: c[1] < n, lambda c: (step(c[0]), c[1] + 1),
                                 (x, 0), checkpoint=s)

        def outer(i, y):
            z, _ = cg.while_loop(lambda c: c[1] < i % 3, lambda c: (step(c[0]) * y, c[1] + 1),
                                 (y, 0), checkpoint=Online(2))
            return 0.5 * z + 0.2 * y * y
        return cg.fori_loop(0, n, outer, x, checkpoint=Binomial(2))

    g = cg.grad(f)
    jitted = cg.jit(g, fallback=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", cg.CompileWarning)
        assert jitted.info(0.3, 2).backend == "numba"
    for n in (0, 1, 2, 7):
        got, want = jitted(0.3, n), g(0.3, n)
        assert np.asarray(got).tobytes() == np.asarray(want).tobytes(), (n, got, want)
