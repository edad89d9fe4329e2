"""The interpreter: runs Programs (forward and adjoint alike) on numpy arrays.

A Program is compiled once: every value gets a slot in a flat register list, constants are
materialized into a template of that list, and each block becomes one generated Python
function (`env[7] = mul(env[3], env[5])`, …) that returns the id of the edge it leaves by.
Phi copies are generated per edge as a single tuple assignment, which is exactly the
parallel-copy semantics (a carry that swaps `(a, b) → (b, a)` just works). The hot loop
therefore only moves arrays; rule lookup, parameter binding and slot allocation happened
at compile time.

Edges carry an action code for the few places the run must be observed: a Cond decision
of an `if` region (logged), entering a loop, taking its back edge (trip counting,
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
from .diagnostics import anomaly_message, bad_argument_message
from .errors import AnomalyError, ArgumentValueError, LoopLimitError, ReplayMismatchError
from .ir import (
    Block,
    Cond,
    Jmp,
    LoopRegion,
    Node,
    Phi,
    Program,
    Region,
    RegionIndex,
    RegionNest,
    Return,
    Value,
    loop_owners,
)
from .nodespec import UNCHECKED
from .primitives import PRIMITIVES, dense_value, peeked_value
from .reverse import adjoint

DECIDE, LOOP_ENTER, LOOP_LATCH, LOOP_EXIT = 1, 2, 3, 4

def loop_limit_message(region: LoopRegion) -> str:
    """The LoopLimitError of a loop past its `max_iters` (the interpreter's and compiled
    code's)."""
    return (f"while_loop {region.id} at {region.loc} exceeded max_iters={region.max_iters}; "
            "raise max_iters or check that the loop condition can become false")


def left_early_message(region: LoopRegion, iteration: str) -> str:
    """The ReplayMismatchError of a re-run `iteration` of a loop that left it early."""
    return (f"recomputing {iteration} of {region.id} (at {region.loc}) left the loop early: "
            "the recomputed loop condition differs from the forward run's (the body must be "
            "deterministic; checkpoint=StoreAll() never recomputes)")


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


def shared_outputs(program: Program) -> frozenset[int]:
    """The positions of `program`'s array outputs whose runtime value may be an array the
    run did not make: an argument, a constant the cached program keeps, a view of either,
    a forward value an adjoint reads, or what a sub-program or a user's rule returned.

    Every array a transformation hands a user is the user's own (docs/api.md, "Results
    are yours"): an in-place edit such as `g += wd * w` must change nothing else. Arrays a
    primitive without `aliases` made in this run are new, so only these positions need a
    copy (`owned_results`). Owned values are those of such primitives (of a `mutates` one
    when the buffer it updates is owned) and the Phis whose every input is owned: the
    greatest such set, so a loop carry that only ever holds new arrays is owned too.
    Scalars (shape ()) run as immutable numpy scalars and are never listed."""
    defined: dict[Value, Node | Phi] = {}
    for b in program.blocks:
        for phi in b.phis:
            defined[phi.out] = phi
        for n in b.nodes:
            prim = PRIMITIVES.get(n.op)
            if prim is not None and not prim.aliases:
                for o in n.outputs:
                    defined[o] = n
    owned = set(defined)
    changed = True
    while changed:
        changed = False
        for v in list(owned):
            d = defined[v]
            if isinstance(d, Phi):
                keep = all(i in owned for i in d.inputs)
            else:
                keep = not PRIMITIVES[d.op].mutates or d.inputs[0] in owned
            if not keep:
                owned.discard(v)
                changed = True
    return frozenset(i for i, v in enumerate(program.outputs)
                     if v.type.shape != () and v not in owned)


def owned_results(values: list[Any], shared: frozenset[int]) -> list[Any]:
    """`values` (a run's outputs) with a copy at each position in `shared` and of any array
    an earlier position holds already (two carries may end holding one array), so that
    no two results, and no result and anything else, share memory."""
    seen: set[int] = set()
    out = list(values)
    for i, v in enumerate(out):
        if isinstance(v, np.ndarray):
            if i in shared or id(v) in seen:
                v = out[i] = v.copy()
            seen.add(id(v))
    return out


@dataclass
class LoopInfo:
    """What the interpreter needs of one loop region, resolved at compile time."""

    index: int
    region: LoopRegion
    header: int  # block index
    exit: int
    carry_slots: tuple[int, ...]  # the header Phis: carry_t during iteration t
    latch_edge: int
    record_slot: int  # env slot holding this execution's checkpoint record
    trip_bound_slots: tuple[int, int] | None
    carry_bytes: int = 0  # size of one carry (a checkpoint)
    inner_ifs: tuple[int, ...] = ()  # if regions inside the loop, at any depth
    inner_loops: tuple[int, ...] = ()  # loops inside the loop, at any depth
    # those regions, ifs first, in signature order (control events name their region);
    # empty when nothing inside the loop decides, so replays need no checking
    event_regions: tuple[Region, ...] = ()
    empty_signature: tuple = ()  # an iteration whose inner regions logged nothing


class Compiled:
    """A Program turned into generated block functions and an edge table."""

    def __init__(self, program: Program, forward: Compiled | None = None):
        self.program = program
        self.forward = forward
        self.slot: dict[Value, int] = {}
        blocks = program.blocks
        self.block_index = {b: i for i, b in enumerate(blocks)}
        for v in program.params:
            self._alloc(v)
        for b in blocks:
            for phi in b.phis:
                self._alloc(phi.out)
            for n in b.nodes:
                for o in n.outputs:
                    self._alloc(o)
        self.if_index = {r: i for i, r in enumerate(program.ifs())}
        self.loops: list[LoopInfo] = []
        self.loop_index: dict[LoopRegion, int] = {}
        for i, r in enumerate(program.loops()):
            self.loop_index[r] = i
        self.template: list[Any] = [None] * len(self.slot)
        self.edges: list[tuple[int, Any, int, Any]] = []
        self.edge_id: dict[tuple[Block, Any], int] = {}
        self._build_edges()
        in_place = _updated_in_place(program)
        for r, i in self.loop_index.items():
            bounds = None
            if r.trip_bounds is not None:
                bounds = (self.slot[r.trip_bounds[0]], self.slot[r.trip_bounds[1]])
            self.loops.append(LoopInfo(
                i, r, self.block_index[r.header], self.block_index[r.exit],
                tuple(self.slot[p.out] for p in r.header.phis),
                self.edge_id[(r.latch, None)], self._alloc_extra(), bounds,
                carry_bytes=sum(p.out.type.size * p.out.type.dtype.itemsize
                                for p in r.header.phis if p not in in_place)))
        nest = RegionNest(program.regions)
        for li in self.loops:
            inside = [r for r in program.regions
                      if r is not li.region and nest.encloses(li.region, r)]
            li.inner_ifs = tuple(self.if_index[r] for r in inside if r in self.if_index)
            li.inner_loops = tuple(self.loop_index[r] for r in inside if r in self.loop_index)
            li.event_regions = tuple(r for r in inside if r in self.if_index) + tuple(
                r for r in inside if r in self.loop_index)
            li.empty_signature = ((),) * len(li.event_regions)
        self.deferred = _deferred_values(program)
        self.block_fns = [self._gen_block(b) for b in blocks]
        self._checked: list[Any] | None = None
        self.return_slots = tuple(self.slot[v] for v in program.outputs)
        self.shared_outputs = shared_outputs(program)
        self.param_slots = tuple(self.slot[v] for v in program.params)

    def _alloc(self, v: Value) -> int:
        self.slot[v] = len(self.slot)
        return self.slot[v]

    def _alloc_extra(self) -> int:
        self.template.append(None)
        return len(self.template) - 1

    # -- edges ---------------------------------------------------------------------
    def _build_edges(self) -> None:
        observe = self.forward is None  # adjoint programs log nothing
        loops_by_header = {r.header: r for r in self.loop_index}
        for b in self.program.blocks:
            for key, target in b.term.successors():
                action, arg = 0, None
                if observe:
                    if target in loops_by_header:
                        r = loops_by_header[target]
                        action = LOOP_ENTER if b is r.preheader else LOOP_LATCH
                        arg = self.loop_index[r]
                    elif b in loops_by_header and key is False:
                        action, arg = LOOP_EXIT, self.loop_index[loops_by_header[b]]
                    elif isinstance(b.term, Cond) and b not in loops_by_header:
                        r_if = next(r for r in self.if_index if r.branch is b)
                        # (log stack, decision, the control event: region and decision)
                        action, arg = DECIDE, (self.if_index[r_if], key, (r_if, key))
                self.edge_id[(b, key)] = len(self.edges)
                self.edges.append((self.block_index[target], self._gen_copy(b, key, target),
                                   action, arg))

    def _gen_copy(self, src: Block, key: Any, target: Block) -> Any:
        if not target.phis:
            return None
        i = target.pred_index(src, key)
        dst = ", ".join(f"env[{self.slot[phi.out]}]" for phi in target.phis)
        srcs = ", ".join(f"env[{self.slot[phi.inputs[i]]}]" for phi in target.phis)
        code = f"def copy(env):\n    {dst}, = {srcs},\n"
        ns: dict[str, Any] = {}
        exec(code, ns)  # noqa: S102 - generated from the Program, not from user input
        return ns["copy"]

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
        outs = ", ".join(f"env[{self.slot[o]}]" for o in n.outputs)
        args = ", ".join(self._arg(n, i) for i in range(len(n.inputs)))
        name = f"f{k}"
        if n.op == "const":
            self.template[self.slot[n.outputs[0]]] = as_runtime_value(n.params["value"])
            return "pass"
        if n.op == "Primal":
            read = f"fenv[{self.forward.slot[n.params['of']]}]"
            return f"{outs} = " + (f"_dense({read})" if n.params["of"] in self.forward.deferred
                                   else read)
        if n.op == "LogPop":
            return f"{outs} = m.pop_decision({self.forward.if_index[n.params['region']]})"
        if n.op == "TripPop":
            return f"{outs} = m.pop_trip({self.forward.loop_index[n.params['loop']]})"
        if n.op == "LoopState":
            return f"m.loop_state({self.forward.loop_index[n.params['loop']]}, {args})"
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
        self.log = ControlLog([[] for _ in compiled.if_index], [[] for _ in compiled.loops])
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
        env, fenv, fns, edges, hook = self.env, None, self.fns, self.c.edges, \
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
        if self.c.edges[e][0] == loop.exit:
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
            self.c.edges[e][1](self.env)  # the latch's Phi copy: the next carry
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
                self.c.edges[e][1](self.env)
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
        edges, fenv = adjoint.edges, machine.env
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
        if not machine.log.is_empty():
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
    return GradPlan(forward, adjoint(program, wrt))


@dataclass(frozen=True)
class LoopSaves:
    """What one forward loop keeps per taped iteration for one adjoint: the loop-owned
    slots the adjoint reads, plus the checkpoint records of the loops nested directly
    inside it. Everything the hot loop needs is precomputed here, accessors included."""

    slots: tuple[int, ...]
    nbytes: int  # their size: shapes are static, so it is known before running
    # (position in a saved frame, loop index) of the records of loops directly inside
    nested_records: tuple[tuple[int, int], ...]
    # their env slots: cleared after each iteration, so that a frame holds only the records
    # of the executions that ran in its own iteration (not a stale one, from an iteration
    # that skipped the nested loop, which another frame owns)
    nested_record_slots: tuple[int, ...]
    read: Any  # env -> tuple of the saved slots (generated)
    write: Any  # (env, values) -> None, the inverse


class GradPlan:
    """Everything reverse mode needs beyond the forward `Compiled`, for one adjoint: the
    adjoint Program, its compiled form, and each forward loop's `LoopSaves`.

    The adjoint decides which values each loop must keep, so this plan, not the forward
    compilation, holds that decision: one forward `Compiled` serves every `wrt`, and a
    taped `Machine` receives the plan it runs for. Built once, never mutated."""

    __slots__ = ("forward", "adjoint", "compiled", "saves")

    def __init__(self, forward: Compiled, adjoint: Program):
        if adjoint.forward is not forward.program:
            raise ArgumentValueError(f"GradPlan: {adjoint.name} is not an adjoint of "
                                     f"{forward.program.name}")
        self.forward = forward
        self.adjoint = adjoint
        self.compiled = Compiled(adjoint, forward=forward)
        self.saves: tuple[LoopSaves, ...] = _plan_saves(forward, _primal_reads(adjoint))


def _primal_reads(adjoint: Program) -> set[Value]:
    """The forward values the adjoint reads (what StoreAll must keep per iteration)."""
    return {n.params["of"] for b in adjoint.blocks for n in b.nodes if n.op == "Primal"}


def _plan_saves(forward: Compiled, needed: set[Value]) -> tuple[LoopSaves, ...]:
    """Which of its slots each loop keeps for an adjoint reading `needed`, so StoreAll
    keeps only those (plus the checkpoint records of the loops nested directly inside it).

    A nested loop may be recomputed by its strategy while its enclosing loop is being
    reversed; the recomputation reads values of the enclosing iteration (a closed-over
    carry, the trip bound), so those count as read by the adjoint too."""
    program = forward.program
    owner = loop_owners(program)
    index = RegionIndex.of(program)
    nest = index.nest
    needed = set(needed)
    for r, free in _free_values(index).items():
        if nest.loop_of[r.parent] is not None:  # the loop sits inside another loop
            needed |= free
    per_loop: dict[int, list[int]] = {li.index: [] for li in forward.loops}
    nbytes = dict.fromkeys(per_loop, 0)
    for v in sorted(needed, key=lambda v: forward.slot[v]):
        r = owner.get(v)
        if r is not None:
            per_loop[forward.loop_index[r]].append(forward.slot[v])
            nbytes[forward.loop_index[r]] += v.type.size * v.type.dtype.itemsize
    nested: dict[int, list[tuple[int, int]]] = {i: [] for i in per_loop}
    for li in forward.loops:
        parent = nest.loop_of[li.region.parent]
        if parent is not None:
            p = forward.loop_index[parent]
            nested[p].append((len(per_loop[p]), li.index))
            per_loop[p].append(li.record_slot)
    saves = []
    for li in forward.loops:
        slots = tuple(per_loop[li.index])
        records = tuple(nested[li.index])
        saves.append(LoopSaves(slots, nbytes[li.index], records,
                               tuple(slots[pos] for pos, _ in records), *_slot_access(slots)))
    return tuple(saves)


def _free_values(index: RegionIndex) -> dict[LoopRegion, set[Value]]:
    """For each loop, the values defined outside it that running its iterations reads
    (the initial carries excepted: the strategies keep iteration 0's carry themselves).

    One bottom-up pass over the region tree, inner regions first: a region reads what its
    own blocks read and what the regions inside it leave free, and of those, the values
    defined outside it are free. That costs about the program's size times what stays
    free, where collecting each loop's blocks cost size x depth."""
    nest, own, home = index.nest, index.own, index.home
    free: dict[Region, set[Value]] = {}  # what each region leaves to its parent
    result: dict[LoopRegion, set[Value]] = {}
    for r in reversed(nest.preorder):
        used: set[Value] = set()
        initial: set[Value] = set()  # a loop's initial carries: read where it is entered
        for b in own.get(r, []):
            entry = isinstance(r, LoopRegion) and b is r.header
            for phi in b.phis:
                used.update(phi.inputs[1:] if entry else phi.inputs)
                if entry:
                    initial.add(phi.inputs[0])
            for n in b.nodes:
                used.update(n.inputs)
            if isinstance(b.term, Cond):
                used.add(b.term.selector)
        for inner in nest.children.get(r, []):
            used |= free.pop(inner)
        free[r] = {v for v in used if not nest.encloses(r, home.get(v))}
        if isinstance(r, LoopRegion):
            result[r] = set(free[r])
        free[r] |= initial
    return result


def _updated_in_place(program: Program) -> set[Phi]:
    """The loop carries whose next value is their own buffer updated in place (by a
    primitive that `mutates` its first input, a scan's `write_row`): a checkpoint of the
    carry holds that same buffer, not a copy, so it costs no snapshot bytes."""
    made = {o: n for b in program.blocks for n in b.nodes for o in n.outputs}
    found = set()
    for r in program.loops():
        for phi in r.header.phis:
            n = made.get(phi.inputs[-1])
            prim = PRIMITIVES.get(n.op) if n is not None else None
            if prim is not None and prim.mutates and n.inputs[0] is phi.out:
                found.add(phi)
    return found


def _deferred_values(program: Program) -> frozenset[Value]:
    """The values that may hold a primitives.Deferred at run time: the outputs of the
    primitives whose entry declares `deferred_result`, and the Phis that carry them (a
    reverse loop's header Phi, say)."""
    deferring = {name for name, prim in PRIMITIVES.items() if prim.deferred_result}
    deferred = {o for b in program.blocks for n in b.nodes if n.op in deferring
                for o in n.outputs}
    grew = bool(deferred)
    while grew:
        grew = False
        for b in program.blocks:
            for phi in b.phis:
                if phi.out not in deferred and any(v in deferred for v in phi.inputs):
                    deferred.add(phi.out)
                    grew = True
    return frozenset(deferred)


def _slot_access(slots: tuple[int, ...]) -> tuple[Any, Any]:
    """Generated `env -> tuple of env[slots]` and `(env, values) -> None` for a fixed slot
    list: one tuple build or one unpacking assignment per iteration, no Python loop."""
    if not slots:
        return (lambda env: ()), (lambda env, values: None)
    targets = ", ".join(f"env[{s}]" for s in slots)
    ns: dict[str, Any] = {}
    exec(f"def read(env):\n    return ({targets},)\n"  # noqa: S102 - from slot numbers
         f"def write(env, values):\n    {targets}, = values\n", ns)
    return ns["read"], ns["write"]

