"""The interpreter: runs Programs (forward and adjoint alike) on numpy arrays.

A Program is compiled once, over its layout (layout.py: a slot in a flat register list
per value, the blocks and edges by number, each loop's registers): constants are
materialized into a template of that list, and each block becomes one generated Python
function (`env[7] = mul(env[3], env[5])`, …) that returns the id of the edge it leaves by;
a node kind that is not a primitive has its emitter in `_EMIT`. Phi copies are generated
per edge as a single tuple assignment, which is exactly the parallel-copy semantics (a
carry that swaps `(a, b) → (b, a)` just works). The hot loop therefore only moves arrays;
rule lookup, parameter binding and slot allocation happened at compile time.

Edges carry the layout's action code for the few places the run must be observed: a Cond
decision of an `if` region (logged), entering a loop, taking its back edge (trip counting,
`max_iters`, the checkpoint strategy's hook) and leaving it (trip count logged). These
are method calls per control event, never per node.

The forward run's `ControlLog` holds one stack per Cond region (decisions) and per loop
(trip counts); the adjoint program pops them (`LogPop`, `TripPop`), so after a reverse pass
every stack is empty. The checkpoint strategy of each loop is handed in at run time; it
is called through checkpoint.LoopStrategy and served through checkpoint.LoopRunner
(`_Runner` and `_Sweep` below), and the events it emits go to the loop's `LoopStats`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import numpy as np

from .anomaly import anomaly_detection_enabled
from .checkpoint import Carry, LoopStats, LoopStrategy, RunStats, StepTape
from .diagnostics import (
    anomaly_message,
    bad_argument_message,
    left_early_message,
    loop_limit_message,
)
from .errors import AnomalyError, ArgumentValueError, LoopLimitError, ReplayMismatchError
from .ir import Block, Cond, Jmp, Node, Program, Region, Return, Value
from .layout import (
    DECIDE,
    LOOP_ENTER,
    LOOP_LATCH,
    Edge,
    GradPlan,
    Layout,
    LoopInfo,
    LoopSaves,
)
from .nodespec import UNCHECKED
from .primitives import PRIMITIVES, dense_value, peeked_value
from .reverse import adjoint


def _all_finite(x: Any) -> bool:
    return bool(np.isfinite(x).all())


def _unchecked(n: Node) -> bool:
    """Whether anomaly detection skips `n`'s results: the node kind's flag `unchecked`, or
    its table entry's."""
    return n.op in UNCHECKED or (n.op in PRIMITIVES and PRIMITIVES[n.op].unchecked)


# True while a run repeats work already done (see `repeating`): nodes with an `effect`
# (debug prints and callbacks) are skipped then. A context variable, not a Machine field,
# because the repeated work may run in other Machines: the sub-program of a nested
# transformation's node, run again inside a recomputed iteration or by an adjoint.
_REPEATING: ContextVar[bool] = ContextVar("cfgrad_repeating", default=False)


@contextmanager
def repeating(repeat: bool = True) -> Iterator[None]:
    """Everything run inside repeats work a run already did (the reverse pass, with the
    iterations checkpoint strategies recompute; a second forward run for a second call of
    a pullback): debug prints and callbacks stay silent, so what they show is the forward
    run's, once, whatever the strategy. `repeating(False)` marks work done for the first
    time inside such a run (a custom_vjp's bwd, which only a pullback runs)."""
    token = _REPEATING.set(repeat)
    try:
        yield
    finally:
        _REPEATING.reset(token)


def as_runtime_value(a: Any) -> Any:
    """0-d arrays run as numpy scalars: same arithmetic, far less per-operation overhead."""
    return a[()] if isinstance(a, np.ndarray) and a.ndim == 0 else a


def _gen_copy(edge: Edge) -> Any:
    """The edge's Phi copy as one generated tuple assignment (a parallel copy), or None."""
    if not edge.phi_targets:
        return None
    dst = ", ".join(f"env[{s}]" for s in edge.phi_targets)
    srcs = ", ".join(f"env[{s}]" for s in edge.phi_sources)
    code = f"def copy(env):\n    {dst}, = {srcs},\n"
    ns: dict[str, Any] = {}
    exec(code, ns)  # noqa: S102 - generated from the Program, not from user input
    return ns["copy"]


class Compiled(Layout):
    """A Program's layout (layout.py) with the interpreter's code for it: generated block
    functions, a runnable edge table and the register template."""

    def __init__(self, program: Program, forward: Compiled | None = None):
        super().__init__(program, forward)
        # every register empty but the constants', which runs copy from here
        self.template: list[Any] = [None] * self.size
        for n in self.constants:
            self.template[self.slot[n.outputs[0]]] = as_runtime_value(n.params["value"])
        # per edge: (target block, its Phi copy or None, action, the action's argument)
        self.edge_table: list[tuple[int, Any, int, Any]] = [
            (e.target, _gen_copy(e), e.action, e.arg) for e in self.edges]
        self.block_fns = [self._gen_block(b) for b in program.blocks]
        self._checked: list[Any] | None = None

    # -- blocks --------------------------------------------------------------------
    def _gen_block(self, b: Block, checked: bool = False) -> Any:
        """One Python function per block. With `checked` (anomaly detection), every float
        result is tested for NaN/Inf right after the node that made it; the unchecked
        functions carry no such code, so detection costs nothing when it is off.

        A value that may be deferred (`self.deferred`) is checked as `peek` shows it and
        materialized at Return; only those values get that code."""
        ns: dict[str, Any] = {"_c": self, "_finite": _all_finite, "_dense": dense_value,
                              "_peek": peeked_value, "_repeating": _REPEATING.get}
        lines = ["def block(env, fenv, m):"]
        line_nodes: dict[int, Node] = {}
        index = self.block_index[b]
        for k, n in enumerate(b.nodes):
            lines.append("    " + self._gen_node(n, k, ns))
            line_nodes[len(lines)] = n
            if checked and not _unchecked(n) and any(
                    o.type.dtype.kind in "fc" for o in n.outputs):
                tests = " and ".join(
                    f"_finite(_peek(env[{self.slot[o]}]))" if o in self.deferred
                    else f"_finite(env[{self.slot[o]}])" for o in n.outputs)
                lines.append(f"    if not ({tests}): m.anomaly(_c, {index}, {k}, env)")
        t = b.term
        if isinstance(t, Jmp):
            lines.append(f"    return {self.edge_id[(b, None)]}")
        elif isinstance(t, Cond):
            sel = f"env[{self.slot[t.selector]}]"
            if [k for k, _ in t.cases] == [True, False]:
                lines.append(f"    return {self.edge_id[(b, True)]} if {sel} else "
                             f"{self.edge_id[(b, False)]}")
            else:
                # a switch index outside 0..n-1 takes the nearest case, as cg.switch and
                # lax.switch do (Python's negative indexing would pick from the end)
                ids = tuple(self.edge_id[(b, k)] for k, _ in t.cases)
                lines.append(f"    return {ids}[min(max({sel}, 0), {len(ids) - 1})]")
        else:
            assert isinstance(t, Return)
            lines += [f"    env[{self.slot[v]}] = _dense(env[{self.slot[v]}])"
                      for v in dict.fromkeys(t.values) if v in self.deferred]
            lines.append("    return -1")
        exec("\n".join(lines) + "\n", ns)  # noqa: S102
        fn = ns["block"]
        fn.line_nodes = line_nodes  # for error messages: which node failed
        return fn

    @property
    def checked_block_fns(self) -> list[Any]:
        """The block functions with NaN/Inf checks, generated the first time they are
        needed (under cg.detect_anomaly())."""
        if self._checked is None:
            self._checked = [self._gen_block(b, checked=True) for b in self.program.blocks]
        return self._checked

    def _arg(self, n: Node, i: int) -> str:
        """The code reading input i of `n`: a value that may be deferred is materialized
        for every reader but an input its primitive's entry lists in `deferred_inputs`
        (runtime nodes, which are not in the table, take none)."""
        v = n.inputs[i]
        if v in self.deferred:
            prim = PRIMITIVES.get(n.op)
            if prim is None or i not in prim.deferred_inputs:
                return f"_dense(env[{self.slot[v]}])"
        return f"env[{self.slot[v]}]"

    def _gen_node(self, n: Node, k: int, ns: dict[str, Any]) -> str:
        """The line computing node k of its block: its kind's emitter (`_EMIT`), or for a
        primitive, `_gen_primitive`'s."""
        emit = _EMIT.get(n.op)
        if emit is not None:
            return emit(self, n)
        return self._gen_primitive(n, k, ns)

    def _gen_primitive(self, n: Node, k: int, ns: dict[str, Any]) -> str:
        outs = ", ".join(f"env[{self.slot[o]}]" for o in n.outputs)
        args = ", ".join(self._arg(n, i) for i in range(len(n.inputs)))
        name = f"f{k}"
        prim = PRIMITIVES[n.op]
        # the entry's operator source where it has one: skips a ufunc call, which
        # dominates the cost of scalar-heavy loops
        form = prim.operator_source([self._arg(n, i) for i in range(len(n.inputs))], n.params)
        if form is not None:
            return f"{outs} = {form}"
        ns[name] = functools.partial(prim.impl, **n.params) if n.params else prim.impl
        if prim.effect:  # computes nothing; silent where a run repeats work (`repeating`)
            return f"if not _repeating(): {name}({args})"
        if prim.multi_output:  # the impl returns a tuple, even of one value
            outs += ","
        return f"{outs} = {name}({args})"


# The interpreter's code for each node kind that is not a primitive of the derivative
# table (nodespec's runtime kinds, which only adjoints have) and for `const`, whose value
# sits in the register template: `(compiled, node) -> line`.
def _outs(c: Compiled, n: Node) -> str:
    return ", ".join(f"env[{c.slot[o]}]" for o in n.outputs)


def _emit_const(c: Compiled, n: Node) -> str:
    return "pass"  # (the template holds its value)


def _emit_primal(c: Compiled, n: Node) -> str:
    read = f"fenv[{c.forward.slot[n.params['of']]}]"
    return f"{_outs(c, n)} = " + (f"_dense({read})" if n.params["of"] in c.forward.deferred
                                  else read)


def _emit_log_pop(c: Compiled, n: Node) -> str:
    return f"{_outs(c, n)} = m.pop_decision({c.forward.if_index[n.params['region']]})"


def _emit_trip_pop(c: Compiled, n: Node) -> str:
    return f"{_outs(c, n)} = m.pop_trip({c.forward.loop_index[n.params['loop']]})"


def _emit_loop_state(c: Compiled, n: Node) -> str:
    args = ", ".join(c._arg(n, i) for i in range(len(n.inputs)))
    return f"m.loop_state({c.forward.loop_index[n.params['loop']]}, {args})"


_EMIT = {"const": _emit_const, "Primal": _emit_primal, "LogPop": _emit_log_pop,
         "TripPop": _emit_trip_pop, "LoopState": _emit_loop_state}


# ---------------------------------------------------------------------------------
# Logs, strategies, statistics
# ---------------------------------------------------------------------------------


@dataclass
class ControlLog:
    """Per-region stacks: branch decisions per Cond, trip counts per loop execution."""

    decisions: list[list[Any]]
    trips: list[list[int]]

    def is_empty(self) -> bool:
        return not any(self.decisions) and not any(self.trips)


# the log of every run of a program without ifs and loops: nothing is ever logged in it
_NOTHING_TO_LOG = ControlLog([], [])


# ---------------------------------------------------------------------------------
# The machine
# ---------------------------------------------------------------------------------


class Machine:
    """One execution of a forward Program, and later the adjoint run that reverses it.

    With a `plan` the run is taped for that plan's adjoint (decisions logged, each loop's
    strategy keeping what the plan's `LoopSaves` name); without one it only computes."""

    def __init__(self, compiled: Compiled, strategies: list[LoopStrategy] | None = None,
                 plan: GradPlan | None = None, block_hook: Any = None, check: bool = False):
        if plan is not None and plan.forward is not compiled:
            raise ArgumentValueError("Machine: the GradPlan was built for another compiled "
                                     "forward program")
        self.c = compiled
        self.plan = plan
        self.check = check  # anomaly detection: run the NaN/Inf-checking block functions
        self.fns = compiled.checked_block_fns if check else compiled.block_fns
        self.env: list[Any] = list(compiled.template)
        self.strategies = strategies
        self.taped = plan is not None  # log decisions and keep checkpoint records
        self.log = ControlLog([[] for _ in compiled.if_index], [[] for _ in compiled.loops]) \
            if compiled.if_index or compiled.loops else _NOTHING_TO_LOG
        self.sinks: list[list[Any]] = []  # control events being collected (replay checks)
        self.reversing = False
        self.block_hook = block_hook
        loops = compiled.loops
        if not loops:  # (most calls of small functions: nothing per loop to set up)
            self.counters = self.reverse_iterations = self.nested_record_slots = []
            self.runners = []
            self.stats = RunStats([])
            return
        self.counters = [0] * len(loops)
        self.reverse_iterations = [0] * len(loops)  # the iteration each reverse loop is in
        self.stats = RunStats([LoopStats(li.region.id, repr(strategies[li.index]) if strategies
                                         else "none") for li in loops])
        saves = plan.saves if plan is not None else ()
        # per loop, the record slots to clear after each taped iteration (see LoopSaves)
        self.nested_record_slots = [s.nested_record_slots for s in saves]
        self.runners = [_Runner(self, li, ls, s, self.stats.loops[li.index])
                        for li, ls, s in zip(loops, saves, strategies or ())]

    # -- walking -------------------------------------------------------------------
    def run(self, args: list[Any]) -> list[Any]:
        env = self.env
        for s, a in zip(self.c.param_slots, args):
            env[s] = a
        if self.check:
            for i, a in enumerate(args):
                if np.asarray(a).dtype.kind in "fc" and not _all_finite(a):
                    raise AnomalyError(bad_argument_message(self.c.program, i, a))
        self.walk(0, -1)
        return [env[s] for s in self.c.return_slots]

    def walk(self, b: int, stop: int, stop2: int = -2) -> int:
        """Run from block `b` until control is about to enter `stop`/`stop2` (returns the
        edge taken, its Phi copy not yet applied) or the program returns (-1)."""
        env, fenv, fns, edges, hook = self.env, None, self.fns, self.c.edge_table, \
            self.block_hook
        while True:
            if hook is not None:
                hook(b)
            try:
                e = fns[b](env, fenv, self)
            except Exception as exc:
                _annotate(exc, self.c, b, fns)
                raise
            if e < 0:
                return -1
            target, copy, action, arg = edges[e]
            if target == stop or target == stop2:
                return e
            if action:
                self.act(action, arg)
            if copy is not None:
                copy(env)
            b = target

    def act(self, action: int, arg: Any) -> None:
        if action == DECIDE:
            if self.sinks:
                for sink in self.sinks:
                    sink.append(arg[2])
            if self.taped:
                self.log.decisions[arg[0]].append(arg[1])
            return
        loop = self.c.loops[arg]
        if action == LOOP_ENTER:
            self.counters[arg] = 0
            if self.taped:
                self.env[loop.record_slot] = self.strategies[arg].begin(self.runners[arg])
            return
        if action == LOOP_LATCH:
            t = self.counters[arg]
            self.counters[arg] = t + 1
            limit = loop.region.max_iters
            if limit is not None and t + 1 > limit:
                raise LoopLimitError(loop_limit_message(loop.region))
            stats = self.stats.loops[arg]
            if self.reversing:
                stats.recompute_steps += 1
            else:
                stats.forward_steps += 1
            if self.taped:
                self.strategies[arg].after_iteration(self.runners[arg],
                                                     self.env[loop.record_slot], t)
                for slot in self.nested_record_slots[arg]:  # the iteration's frame has them
                    self.env[slot] = None
            return
        # LOOP_EXIT
        trips = self.counters[arg]
        if self.sinks:
            for sink in self.sinks:
                sink.append((loop.region, trips))
        if not self.reversing:
            self.stats.loops[arg].trip_counts.append(trips)
        if self.taped:
            self.log.trips[arg].append(trips)
            self.strategies[arg].finish(self.runners[arg], self.env[loop.record_slot], trips)

    # -- what _Runner and _Sweep serve strategies with ----------------------------------
    def read(self, slots: tuple[int, ...]) -> tuple:
        env = self.env
        return tuple(env[s] for s in slots)

    def write(self, slots: tuple[int, ...], values: tuple) -> None:
        env = self.env
        for s, v in zip(slots, values):
            env[s] = v

    def trip_bound(self, loop: LoopInfo) -> int | None:
        """The trip count of a fori_loop, known when it is entered (None for while)."""
        if loop.trip_bound_slots is None:
            return None
        lo, hi = loop.trip_bound_slots
        return max(0, int(self.env[hi]) - int(self.env[lo]))

    # Marks on the log stacks of the regions nested in `loop` (if decisions first, then
    # loop trip counts): `take_log` removes what an iteration pushed after them (a
    # recomputing strategy's sweep keeps only the latest iteration's entries), `put_log`
    # puts such entries back.
    def log_marks(self, loop: LoopInfo) -> tuple[int, ...]:
        log = self.log
        return tuple(len(log.decisions[i]) for i in loop.inner_ifs) + tuple(
            len(log.trips[j]) for j in loop.inner_loops)

    def _stacks(self, loop: LoopInfo) -> list[list[Any]]:
        log = self.log
        return [log.decisions[i] for i in loop.inner_ifs] + [log.trips[j]
                                                              for j in loop.inner_loops]

    def take_log(self, loop: LoopInfo, marks: tuple[int, ...]) -> tuple:
        """Remove and return what was logged since `marks`."""
        sig = []
        for stack, mark in zip(self._stacks(loop), marks):
            sig.append(tuple(stack[mark:]))
            del stack[mark:]
        return tuple(sig)

    def put_log(self, loop: LoopInfo, sig: tuple) -> None:
        for stack, entries in zip(self._stacks(loop), sig):
            stack.extend(entries)

    def event_signature(self, loop: LoopInfo, events: list[Any]) -> tuple:
        """What one iteration of `loop` decided, from the control events it produced (every
        decision and trip count of the regions inside it, whether logged or not): one tuple
        per region, if regions first, then loops. Re-running the iteration, taped or not,
        whatever the nested loops' strategies keep of the log, must give the same."""
        per: dict[Region, list[Any]] = {r: [] for r in loop.event_regions}
        for region, value in events:
            per[region].append(value)
        return tuple(tuple(per[r]) for r in loop.event_regions)

    def release_frame(self, loop: LoopInfo, frame: tuple) -> None:
        """A saved frame of `loop` is discarded unreversed: release the records of the loop
        executions it holds."""
        for pos, j in self.plan.saves[loop.index].nested_records:
            record = frame[pos]
            if record is not None:
                self.strategies[j].release(self.runners[j], record)

    def _run_iteration(self, loop: LoopInfo, t: int, expected: tuple, taped: bool) -> int:
        """Run iteration t from the carry in the header slots; returns the latch edge.
        The control events it produces must be `expected` (see `event_signature`); a loop
        with no regions inside produces none, so it collects nothing."""
        saved = self.taped
        self.taped = taped
        sink: list[Any] = []
        if loop.event_regions:
            self.sinks.append(sink)
        try:
            e = self.walk(loop.header, loop.header, loop.exit)
        finally:
            self.taped = saved
            if loop.event_regions:
                self.sinks.pop()
        if self.c.edge_table[e][0] == loop.exit:
            raise ReplayMismatchError(left_early_message(loop.region, f"iteration {t}"))
        if loop.event_regions:
            got = self.event_signature(loop, sink)
            if got != expected:
                raise ReplayMismatchError(self._mismatch_text(loop, t, expected, got))
        self.stats.loops[loop.index].recompute_steps += 1
        return e

    def advance(self, loop: LoopInfo, carry: tuple, start: int, steps: int,
                signatures: dict[int, tuple]) -> tuple:
        """From `carry` (iteration `start`'s), run `steps` iterations without taping and
        return the carry reached. Each re-run iteration must take the path the forward
        run logged for it (`signatures`), else ReplayMismatchError."""
        self.write(loop.carry_slots, carry)
        empty = loop.empty_signature
        for t in range(start, start + steps):
            e = self._run_iteration(loop, t, signatures.get(t, empty), taped=False)
            self.c.edge_table[e][1](self.env)  # the latch's Phi copy: the next carry
        return self.read(loop.carry_slots)

    def replay(self, loop: LoopInfo, carry: tuple, start: int, count: int,
               signatures: dict[int, tuple]) -> list[tuple]:
        """Run `count` iterations taped from `carry` (iteration `start`'s), logging their
        control decisions for the adjoint; return each iteration's saved values (the
        environment holds the last one's)."""
        self.write(loop.carry_slots, carry)
        empty = loop.empty_signature
        read = self.plan.saves[loop.index].read
        frames = []
        for t in range(start, start + count):
            e = self._run_iteration(loop, t, signatures.get(t, empty), taped=True)
            frames.append(read(self.env))
            if t + 1 < start + count:
                self.c.edge_table[e][1](self.env)
        return frames

    def _mismatch_text(self, loop: LoopInfo, t: int, expected: tuple, got: tuple) -> str:
        for r, was, now in zip(loop.event_regions, expected, got):
            if was != now:
                what = "decisions" if r in self.c.if_index else "trip counts"
                return (f"recomputing iteration {t} of {loop.region.id} (at {loop.region.loc}) "
                        f"took a different path than the forward run: the {what} of {r.id} "
                        f"(at {r.loc}) were {list(was)} then and {list(now)} now. The loop "
                        "body must be a deterministic function of its carry and the values it "
                        "closes over (no randomness or state outside cfgrad); or use "
                        "checkpoint=StoreAll(), which never recomputes")
        return f"replay mismatch in iteration {t} of {loop.region.id}"

    # -- services for the adjoint program -------------------------------------------------
    def pop_decision(self, i: int) -> Any:
        return self.log.decisions[i].pop()

    def pop_trip(self, i: int) -> np.int64:
        return np.int64(self.log.trips[i].pop())

    def loop_state(self, i: int, t: Any) -> None:
        loop = self.c.loops[i]
        self.reverse_iterations[i] = int(t)
        self.strategies[i].restore(self.runners[i], self.env[loop.record_slot], int(t))

    def anomaly(self, compiled: Compiled, block: int, k: int, env: list[Any]) -> None:
        """A NaN or Inf came out of node k of `block` (of the forward program, or of the
        adjoint when `compiled` is one): raise AnomalyError saying where and why."""
        reverse = compiled.forward is not None
        iterations = self.reverse_iterations if reverse else self.counters
        loops = {li.region.id: iterations[li.index] for li in self.c.loops}
        node = compiled.program.blocks[block].nodes[k]
        raise AnomalyError(anomaly_message(compiled.program, block, node,
                                           [peeked_value(env[compiled.slot[v]])
                                            for v in node.inputs],
                                           [peeked_value(env[compiled.slot[o]])
                                            for o in node.outputs],
                                           loops))


class _Runner:
    """The interpreter's services to one loop's strategy (checkpoint.LoopRunner), made
    once per taped Machine: reading and writing a tape are bound to the generated slot
    accessors of the plan's LoopSaves, no extra call per iteration. Events go straight to
    the loop's LoopStats; schedule events only when the strategy traces."""

    def __init__(self, m: Machine, loop: LoopInfo, saves: LoopSaves, strategy: LoopStrategy,
                 stats: LoopStats):
        self.m, self.loop, self.saves = m, loop, saves
        self.carry_bytes, self.tape_bytes = loop.carry_bytes, saves.nbytes
        self.tracing = bool(getattr(strategy, "trace", False))
        if self.tracing:  # a traced loop that runs no iteration still has a schedule: empty
            stats.schedule = []
        self.tape = functools.partial(saves.read, m.env)
        self.load = functools.partial(saves.write, m.env)
        self.held = stats.held
        self.emit = stats.record if self.tracing else _ignore

    def trip_bound(self) -> int | None:
        return self.m.trip_bound(self.loop)

    def carry(self) -> Carry:
        return self.m.read(self.loop.carry_slots)

    def discard(self, tape: StepTape) -> None:
        self.m.release_frame(self.loop, tape)

    def sweep(self) -> _Sweep:
        return _Sweep(self.m, self.loop, self.saves)


def _ignore(what: str, t: int) -> None:
    """Where schedule events go when no one listens."""


class _Sweep:
    """One execution of a loop under a recomputing strategy (checkpoint.Sweep).

    At each back edge the iteration's log entries are taken back off the log and its tape
    replaces the previous iteration's (whose nested loop records are released); at exit
    the last iteration's entries go back on the log. Each iteration's control events
    (every decision of the regions inside it, including those a nested loop's own strategy
    takes off the log) are kept as its signature, against which re-runs are checked. What
    a loop without regions inside has nothing of is not even asked for."""

    __slots__ = ("m", "loop", "saves", "marks", "events", "signatures", "last_log", "last")

    def __init__(self, m: Machine, loop: LoopInfo, saves: LoopSaves):
        self.m, self.loop, self.saves = m, loop, saves
        self.marks = m.log_marks(loop)
        self.events: list[Any] = []  # the control events of the iteration running
        self.signatures: dict[int, tuple] = {}  # iteration -> its event signature
        self.last_log: tuple = ()  # the latest iteration's log entries
        self.last: StepTape | None = None
        if loop.event_regions:  # else no iteration decides anything there is to check
            m.sinks.append(self.events)

    def ran(self, t: int) -> None:
        m, loop = self.m, self.loop
        if self.marks:
            self.last_log = m.take_log(loop, self.marks)
        if self.events:
            self.signatures[t] = m.event_signature(loop, self.events)
            self.events.clear()
        if self.last is not None and self.saves.nested_records:
            m.release_frame(loop, self.last)
        self.last = self.saves.read(m.env)

    def end(self, trips: int) -> None:
        if self.loop.event_regions:
            self.m.sinks.pop()
        if trips:
            self.m.put_log(self.loop, self.last_log)

    def advance(self, carry: Carry, start: int, steps: int) -> Carry:
        return self.m.advance(self.loop, carry, start, steps, self.signatures)

    def tape_steps(self, carry: Carry, start: int, count: int) -> list[StepTape]:
        return self.m.replay(self.loop, carry, start, count, self.signatures)


def _annotate(exc: Exception, compiled: Compiled, b: int, fns: list[Any]) -> None:
    """Name the block, node and source line of a failure inside generated code."""
    if getattr(exc, "_cfgrad_annotated", False):
        return
    tb = exc.__traceback__
    lineno = None
    while tb is not None:
        if tb.tb_frame.f_code.co_name == "block":
            lineno = tb.tb_lineno
        tb = tb.tb_next
    n = fns[b].line_nodes.get(lineno)
    if n is not None:
        label = ("r" if compiled.forward is not None else "b") + str(b)
        exc.add_note(f"cfgrad: raised by `{n.op}` in block {label} of program "
                     f"{compiled.program.name}, traced at {n.loc}")
    try:
        exc._cfgrad_annotated = True  # type: ignore[attr-defined]
    except AttributeError:
        pass


class Tape:
    """One taped forward run: everything its pullback needs, and the only way to reach it.

    It holds the `GradPlan` the run was taped for, the forward registers (the values the
    adjoint reads through `Primal` nodes), the control log (branch decisions and trip
    counts, which the adjoint's `LogPop` / `TripPop` nodes pop) and each loop's checkpoint
    records (in the registers, owned by the loops' strategies). Reversing pops the log and
    consumes the records, so a Tape is reversed at most once: run `execute` again for a
    second pullback. `stats` covers the forward run and, after `pullback`, the reverse."""

    __slots__ = ("plan", "outputs", "_machine", "_reversed")

    def __init__(self, machine: Machine, outputs: list[Any]):
        self.plan: GradPlan = machine.plan
        self.outputs = outputs
        self._machine = machine
        self._reversed = False

    @property
    def stats(self) -> RunStats:
        return self._machine.stats

    @property
    def log(self) -> ControlLog:
        """The control log: per if region its decisions, per loop its trip counts, in
        forward order; the pullback pops it empty."""
        return self._machine.log

    @property
    def checked(self) -> bool:
        """Whether the forward run checked for NaN/Inf (the pullback then does too)."""
        return self._machine.check

    def value(self, v: Value) -> Any:
        """What the forward run last gave `v` (a parameter's argument; None when `v`'s
        block never ran)."""
        m = self._machine
        return dense_value(m.env[m.c.slot[v]])

    def pullback(self, cotangents: list[Any], block_hook: Any = None) -> list[Any]:
        """The adjoint run against this tape: the cotangents of the plan's parameters
        (zeros outside its `wrt`) for the output cotangents given. NaN/Inf checks run when
        the forward run had them, or under `cg.detect_anomaly()` now: a pullback may be
        called long after its forward pass. `block_hook(b)` sees each forward block that
        a strategy re-runs."""
        if self._reversed:
            raise ArgumentValueError("Tape.pullback: this tape was already reversed (the "
                                     "adjoint consumes its control log); execute the "
                                     "forward program again for another pullback")
        self._reversed = True
        machine = self._machine
        machine.block_hook = block_hook
        adjoint = self.plan.compiled
        env = list(adjoint.template)
        for s, a in zip(adjoint.param_slots, cotangents):
            env[s] = a
        check = machine.check or anomaly_detection_enabled()
        fns = adjoint.checked_block_fns if check else adjoint.block_fns
        edges, fenv = adjoint.edge_table, machine.env
        machine.reversing = True
        b = 0
        token = _REPEATING.set(True)  # forward work the strategies recompute prints nothing
        try:  # (the context variable set directly: `repeating()` costs a generator per call)
            while True:
                try:
                    e = fns[b](env, fenv, machine)
                except Exception as exc:
                    _annotate(exc, adjoint, b, fns)
                    raise
                if e < 0:
                    break
                target, copy, _, _ = edges[e]
                if copy is not None:
                    copy(env)
                b = target
        finally:
            _REPEATING.reset(token)
        if machine.log is not _NOTHING_TO_LOG and not machine.log.is_empty():
            raise AssertionError("internal error: the adjoint left entries on the control log")
        return [env[s] for s in adjoint.return_slots]


def execute(plan: GradPlan, args: list[Any], strategies: list[LoopStrategy], *,
            check: bool = False, block_hook: Any = None) -> Tape:
    """Run `plan`'s forward program on `args` (runtime values, one per parameter), taped
    for its adjoint: each loop keeps what `plan.saves` names, as its strategy (one per
    loop, in `program.loops()` order) schedules. `check` runs the NaN/Inf-checking block
    functions; `block_hook(b)` sees every forward block entered."""
    machine = Machine(plan.forward, strategies, plan=plan, block_hook=block_hook,
                      check=check)
    return Tape(machine, machine.run(args))


def differentiate(program: Program, wrt: Iterable[int] | None = None, *,
                  forward: Compiled | None = None) -> GradPlan:
    """The `GradPlan` for the cotangents of the parameters in `wrt` (flat indices; all when
    None): `cg.adjoint(program, wrt)` (cached there) compiled against `forward` (the
    program's forward `Compiled`, compiled here when not given), and what each loop saves
    for it. Not cached: callers keep the plan they run with (api's `Lowering`, one per
    `wrt`; a custom rule's transpose)."""
    if forward is None:
        forward = Compiled(program)
    elif forward.program is not program:
        raise ArgumentValueError(f"differentiate: the forward Compiled given is of "
                                 f"{forward.program.name}, not of {program.name}")
    return GradPlan(forward, Compiled(adjoint(program, wrt), forward=forward))
