"""Programs compiled to native code through Numba (docs/jit.md, How it works).

The interpreter pays numpy's per-call cost (about 1 µs) for every node it runs, which
dominates loops over scalars and small arrays. A Program is closed, typed and verified,
so it can be compiled whole instead: this module writes it out as one Python function in
Numba's numpy subset and lets Numba compile that to machine code.

- Every value is a local variable (`f12`: slot 12 of the forward program's layout,
  `a7`: slot 7 of an adjoint's); a value of shape () is a native scalar.
- The Program's regions become structured code: an `if` region an `if`/`else` (a
  switch a chain on its clamped index), a loop a `while True:` whose header tests the
  condition and breaks to the exit; edges do their Phi copies as one tuple assignment
  (a parallel copy, as in the interpreter). Numba's type inference takes several times
  longer on a state machine over block numbers, where every variable meets every arm.
- Each node is what its primitive's entry declares (`compiled`): the same numpy ufunc
  under Numba, or the entry's Numba source for it (`kernel_source`).
- Elementwise nodes on arrays (numpy ufuncs, and sources declared `elementwise`) are
  written as one expression where a result's only use is a later such node of its block
  (`_fusible_chains`): Numba compiles an array
  expression into one loop over the elements with no temporary arrays, where a statement
  per node would allocate and sweep memory once per node (3-4 times slower on arrays
  larger than the cache). The same scalar operations run in the same order per element
  (no fast-math reassociation), so the bits do not change.
- A `vjp_call` node (a gradient inside the traced function, e.g. `cg.jit(cg.grad(f))`)
  compiles to one function that runs the sub-program forward, taped, then its adjoint:
  the control log is a stack array per `if` region (decisions) and per loop (trip
  counts), the tape of each loop a stack array per saved scalar and a typed list per
  saved array (references, as the interpreter's tapes hold), pushed at the back edge and
  popped by the adjoint's `LoopState`, exactly where the interpreter's strategy pushes
  and pops. Stacks start small and double when full. A loop under a recomputing
  strategy decides its schedule as that strategy does, in compiled code
  (`_Recomputed`, schedule_machine.py).
- `call` nodes compile their sub-program as a function of its own, and so do custom
  rules' nodes the program their rule runs forward (`fwd`, or the function itself); the
  rule's derivative is `call`/`vjp_call` nodes of its other programs in the gradient.
- A debug callback calls the user's function in object mode (`K.debug_call`), where the
  code does not repeat work: an adjoint, the iterations it re-runs and a `vjp_call`'s
  sweep of a value computed before are written without them (`_Writer.quiet`), as the
  interpreter's `repeating` has it.
- Statistics (`cfgrad.nested.recorded_runs`): a second, recording variant of the module
  logs each `vjp_call` run's loop trip counts, from which schedule.replayed_stats makes
  the interpreter's RunStats; it is generated and compiled only when someone records.

What cannot be compiled raises `Unsupported` with a one-line reason (a primitive its
entry declares `NotCompiled`, also inside a custom rule's programs, anomaly detection, a
strategy class of the user's own); `cfgrad.jit` then runs the interpreter and says why.

The generated source is written once per program to a cache directory (`CFGRAD_CACHE_DIR`,
else `~/.cache/cfgrad/native`), named by its hash, and compiled with Numba's on-disk
cache, so a second process compiling the same program loads the machine code instead.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import itertools
import os
import shutil
import sys
import tempfile
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import kernels as K
from . import schedule_machine as SM
from .checkpoint import FOLLOWS_SCHEDULE, TAPES_EVERY_STEP, RunStats, compiled_form, resolve
from .diagnostics import left_early_message, loop_limit_message
from .errors import CompileWarning, Unsupported
from .ir import Block, Cond, Node, Program, Return, TensorType, Value
from .layout import (
    DECIDE,
    LOOP_ENTER,
    LOOP_EXIT,
    LOOP_LATCH,
    Edge,
    GradPlan,
    Layout,
    owned_results,
)
from .passes import is_fixed
from .primitives import PRIMITIVES, NotCompiled, Source, Ufunc
from .schedule import LoopFacts, replayed_stats
from .schedule_machine import ADVANCE, LOAD, SET, STORE_ROW, TAPE

# Every 1024th back edge of a loop runs Python's signal handlers (`K.check_signals`), so
# that Ctrl-C stops an endless compiled loop as it stops the interpreter: a masked
# counter test per iteration, and 14 ns per 1024 iterations for the check itself.
_SIGNAL_CHECK_MASK = 1023

def dtype_source(dtype: np.dtype) -> str:
    """The numpy scalar type naming `dtype` in generated source (`np.float64`)."""
    return f"np.{np.dtype(dtype).name}"


def literal(value: Any, t: TensorType) -> str:
    """Source for a scalar constant of type `t`, exact (repr round-trips floats)."""
    v = np.asarray(value, t.dtype)[()]
    if t.dtype.kind == "b":
        return "True" if v else "False"
    if t.dtype.kind == "c":
        return f"{dtype_source(t.dtype)}(complex({v.real!r}, {v.imag!r}))"
    if t.dtype.kind == "f" and not np.isfinite(v):
        inner = "np.nan" if np.isnan(v) else ("np.inf" if v > 0 else "-np.inf")
        return f"{dtype_source(t.dtype)}({inner})"
    return f"{dtype_source(t.dtype)}({v.item()!r})"


def _elementwise(n: Node) -> bool:
    """Whether `n` is written as an elementwise array expression Numba can fuse with
    others: a numpy ufunc under Numba, or a source its entry declares `elementwise`, for
    float operands."""
    prim = PRIMITIVES.get(n.op)
    compiled = None if prim is None else prim.compiled
    if isinstance(compiled, Ufunc):
        return True
    return (isinstance(compiled, Source) and compiled.elementwise and not n.params
            and all(v.type.dtype.kind == "f" for v in (*n.inputs, *n.outputs)))


def kernel_source(n: Node, args: list[str], const: Callable[[np.ndarray], str]) -> str:
    """The Numba expression computing node `n` from the operand expressions `args`, as
    its entry's `compiled` declaration says; `const(array)` is the expression reading an
    array constant (for the sources declared as taking `const`: positions worked out when
    the code is generated)."""
    prim = PRIMITIVES.get(n.op)
    if prim is None:
        raise Unsupported(f"node `{n.op}` has no compiled form")
    compiled = prim.compiled
    if isinstance(compiled, Ufunc):
        return compiled.source(prim, args)
    if compiled is None or isinstance(compiled, NotCompiled):
        reason = f": {compiled.reason}" if compiled else ""
        raise Unsupported(f"primitive `{n.op}` has no compiled implementation{reason}", n.loc,
                          compiled.rewrite if compiled else "")
    assert isinstance(compiled, Source), f"`{n.op}` is written by _Writer.node itself"
    types = [v.type for v in n.inputs]
    out = [o.type for o in n.outputs] if prim.multi_output else n.outputs[0].type
    extra = {"const": const} if compiled.constants else {}
    try:
        return compiled.write(args, types, out, **n.params, **extra)
    except Unsupported as e:  # a source refusing these operands: say where they are
        raise Unsupported(e.reason, n.loc, e.rewrite) from None


def _fusible_chains(layout: Layout, keep: set[Value]) -> set[Value]:
    """The values written into their consumer's expression rather than into a variable:
    float or complex array results of elementwise nodes (`_elementwise`) whose only use
    in the layout's program is an elementwise node later in the same block, with no
    stateful node between (an in-place `accumulate` could change an array the deferred
    expression reads). `keep` are values read from outside the program's nodes (the
    adjoint's `Primal` reads, the tapes), which need their variable."""
    program = layout.program
    uses: Counter[Value] = Counter()
    for b in program.blocks:
        for n in b.nodes:
            uses.update(n.inputs)
        for phi in b.phis:
            uses.update(phi.inputs)
        if isinstance(b.term, Cond):
            uses[b.term.selector] += 1
        elif isinstance(b.term, Return):
            uses.update(b.term.values)
    for li in layout.loops:
        uses.update(li.region.trip_bounds or ())
    inlined: set[Value] = set()
    for b in program.blocks:
        candidates: set[Value] = set()  # elementwise array results since the last barrier
        for n in b.nodes:
            if is_fixed(n):
                candidates.clear()
            elif _elementwise(n):
                inlined.update(v for v in n.inputs
                               if v in candidates and uses[v] == 1 and v not in keep)
                out = n.outputs[0].type
                if out.shape != () and out.dtype.kind in "fc":
                    candidates.add(n.outputs[0])
    return inlined


def _fresh_carries(layout: Layout) -> dict[int, Node]:
    """The loop carries (header Phi slots) a node declared `fresh_buffer` updates in place,
    each with that node: the node whose result is the carry's next value and whose first
    operand is the carry itself (a scan's output stack and its `write_row`). The carry is
    copied where its loop is entered, so the node owns what it writes into."""
    made = {o: n for b in layout.program.blocks for n in b.nodes for o in n.outputs}
    found = {}
    for li in layout.loops:
        for phi in li.region.header.phis:
            n = made.get(phi.inputs[-1])
            prim = PRIMITIVES.get(n.op) if n is not None else None
            if (prim is not None and isinstance(prim.compiled, Source)
                    and prim.compiled.fresh_buffer and n.inputs[0] is phi.out):
                found[layout.slot[phi.out]] = n
    return found


class _Constants:
    """The array constants of one generated module, passed to every function as the
    tuple `C` (Numba freezes global arrays into the machine code, which its disk cache
    cannot key by value; an argument it can). Equal arrays (dtype, shape and bytes) are
    one entry, so that sub-programs traced again alike write the same text (and
    `_Module.add_function` keeps one function for them); generated code never writes
    into a constant."""

    def __init__(self) -> None:
        self.arrays: list[np.ndarray] = []
        self._index: dict[tuple, int] = {}

    def __call__(self, array: np.ndarray) -> str:
        """The expression reading `array` inside generated code."""
        key = (array.dtype.str, array.shape, np.ascontiguousarray(array).tobytes())
        if key not in self._index:
            self._index[key] = len(self.arrays)
            self.arrays.append(np.ascontiguousarray(array))
        return f"C[{self._index[key]}]"


@dataclass
class _Stack:
    """A stack of scalars in generated code (a control log's): its array and counter."""

    name: str
    count: str
    dtype: np.dtype

    def init(self) -> str:
        return f"{self.name} = np.empty(16, {dtype_source(self.dtype)}); {self.count} = 0"

    def push(self, value: str) -> list[str]:
        return [f"if {self.count} == {self.name}.shape[0]: {self.name} = K.grow({self.name})",
                f"{self.name}[{self.count}] = {value}", f"{self.count} += 1"]


class _Tape:
    """One loop's tape in generated code: per saved value, scalars in a stack array,
    arrays in a typed list of references (no copy, as the interpreter's tapes hold the
    arrays themselves), all with one counter (`ntape{j}`: iterations taped)."""

    def __init__(self, module: _Module, index: int, entries: list[tuple[str, TensorType]]):
        self.count = f"ntape{index}"
        self.scalars = [(v, f"tape{index}_{v}", t) for v, t in entries if t.shape == ()]
        self.arrays = [(v, f"tape{index}_{v}", module.list_type(t))
                       for v, t in entries if t.shape != ()]

    def __bool__(self) -> bool:
        return bool(self.scalars or self.arrays)

    def init(self) -> list[str]:
        return ([f"{name} = np.empty(16, {dtype_source(t.dtype)})"
                 for _, name, t in self.scalars] +
                [f"{name} = List.empty_list({kind})" for _, name, kind in self.arrays] +
                [f"{self.count} = 0"])

    def push(self) -> list[str]:
        lines = []
        if self.scalars:
            lines.append(f"if {self.count} == {self.scalars[0][1]}.shape[0]:")
            lines += [f"    {name} = K.grow({name})" for _, name, _ in self.scalars]
            lines += [f"{name}[{self.count}] = {v}" for v, name, _ in self.scalars]
        lines += [f"{name}.append({v})" for v, name, _ in self.arrays]
        return lines + [f"{self.count} += 1"]

    def pop(self) -> list[str]:
        return ([f"{self.count} -= 1"] +
                [f"{v} = {name}[{self.count}]" for v, name, _ in self.scalars] +
                [f"{v} = {name}.pop()" for v, name, _ in self.arrays])

    def truncate(self, to: str) -> list[str]:
        """Drop the entries above `to` (a count of iterations)."""
        return [f"{self.count} = {to}"] + [f"while len({name}) > {to}: {name}.pop()"
                                          for _, name, _ in self.arrays]


class _Writer:
    """Writes one program as structured code (see the module docstring): its forward
    run, the taped sweep of a `vjp_call`'s sub-program (`taped`), or an adjoint reading
    the forward program's variables (`forward`)."""

    def __init__(self, module: _Module, layout: Layout, prefix: str, taped: bool = False,
                 forward: _Writer | None = None, keep: frozenset[Value] = frozenset(),
                 silent: bool = False):
        self.module = module
        self.layout = layout
        self.p = prefix
        self.taped = taped  # a sweep that logs its decisions and pushes its tapes
        self.silent = silent  # work a run repeats: its debug callbacks call nothing
        self.forward = forward  # the forward program's writer, for an adjoint
        self.fused = _fused_calls(layout.program)
        self.inlined = _fusible_chains(layout, keep)
        self.replaying: _Recomputed | None = None  # writing a loop's re-run (see `replay`)
        self.replay_taped = False  # whether that re-run keeps its tapes
        self.fresh = _fresh_carries(layout)
        self.updaters = frozenset(self.fresh.values())

    def name(self, v: Value) -> str:
        return f"{self.p}{self.layout.slot[v]}"

    @property
    def quiet(self) -> bool:
        """Whether the code written now repeats work a run did already (the adjoint, an
        iteration re-run for it, the taped run of a value computed before), where debug
        callbacks call nothing, as the interpreter's `repeating` has it."""
        return self.silent or self.replaying is not None

    def constants(self) -> list[str]:
        """Assignments of every constant, at the function's start (the interpreter's
        template of constants, as locals)."""
        lines = []
        for n in self.layout.constants:
            t = n.outputs[0].type
            value = n.params["value"]
            src = (literal(value, t) if t.shape == () else
                   self.module.constants(np.asarray(value, t.dtype)))
            lines.append(f"{self.name(n.outputs[0])} = {src}")
        return lines

    def machine(self, on_return: Any) -> list[str]:
        """The program as structured code: its regions become `if` statements and
        `while` loops (a Program is built from structured constructs, so its block graph
        always has that shape); `on_return(values)` gives the Return's lines. Numba
        compiles structured code several times faster than a state machine over blocks,
        where every variable would meet every other arm at the loop's head."""
        return self._from(self.layout.program.blocks[0], frozenset(), on_return)

    def _from(self, blk: Block, stops: frozenset[Block], on_return: Any) -> list[str]:
        """Code running from `blk` until control reaches a block of `stops` (the merge of
        an enclosing `if`, the header of an enclosing loop) or the Return."""
        lines: list[str] = []
        while True:
            lines += self.nodes(blk.nodes)
            t = blk.term
            if isinstance(t, Return):
                return lines + on_return([self.name(v) for v in t.values])
            if isinstance(t, Cond):  # an if region's branch (loop headers are `_loop`'s)
                region = self.layout.ifs_by_branch[blk]
                lines += self._branches(blk, t, region.merge, stops, on_return)
                blk = region.merge
                continue
            lines += self.edge(blk, None)
            target = t.target
            if target in stops:
                return lines
            loop = self.layout.loops_by_header.get(target)
            if loop is not None:  # entered from its preheader
                lines += self._loop(loop, stops, on_return) + self._log_exit(loop)
                blk = loop.exit
                continue
            blk = target

    def _log_exit(self, loop: Any) -> list[str]:
        """In the recording variant, a loop execution of the taped sweep (not of a
        re-run) logs its exit: (loop, trips, the enclosing loop's iteration or -1). After
        the loop, not before its `break`: Numba 0.68 cannot type a variable that is
        updated before a `break` of one loop and also inside another loop's body."""
        if not (self.module.recording and self.taped and self.replaying is None):
            return []
        j = self.layout.loop_index[loop]
        parent = self.layout.loops[j].parent
        return self.module.log(j, f"n{self.p}{j}", -1 if parent is None else f"n{self.p}{parent}")

    def _branches(self, blk: Block, t: Cond, merge: Block, stops: frozenset[Block],
                  on_return: Any) -> list[str]:
        inner = stops | {merge}
        arms = [(key, self.edge(blk, key) + self._from(target, inner, on_return))
                for key, target in t.cases]
        sel = self.name(t.selector)
        if [k for k, _ in arms] == [True, False]:
            return ([f"if {sel}:"] + _indent(arms[0][1]) + ["else:"] + _indent(arms[1][1]))
        if len(arms) == 1:  # a switch of one branch: every index takes it
            return arms[0][1]
        # a switch index outside 0..n-1 takes the nearest case, as cg.switch does
        lines = [f"k = min(max({sel}, 0), {len(arms) - 1})"]
        for j, (_, body) in enumerate(arms):
            head = "else:" if j == len(arms) - 1 else f"{'if' if j == 0 else 'elif'} k == {j}:"
            lines += [head] + _indent(body)
        return lines

    def _loop(self, loop: Any, stops: frozenset[Block], on_return: Any) -> list[str]:
        """`while True:` around the header's nodes, the exit edge (`break`), the body up
        to the latch's edge back; a re-run (`replay`) instead counts down `rem`."""
        header = loop.header
        t = header.term
        body = self.nodes(header.nodes)
        leave = self.edge(header, False)
        rerun = self.replaying is not None and self.replaying.info.region is loop
        body += [f"if not {self.name(t.selector)}:"] + _indent(
            leave if rerun else leave + ["break"])  # (a re-run's exit raises)
        body += self.edge(header, True) + self._from(loop.body, frozenset({header}),
                                                      on_return)
        if self.forward is not None:  # an adjoint's loop counts nothing: ticks of its own
            ticks = f"t{self.p}{self.layout.loop_index[loop]}"
            body += [f"{ticks} += 1", _signal_check(ticks)]
        return ["while True:"] + _indent(body)

    def tick_counters(self) -> list[str]:
        """An adjoint's loop counters for `_signal_check`, set once per call (they only
        ever grow: the check needs no trip count, only a count of back edges)."""
        if self.forward is None:
            return []
        return [f"t{self.p}{j} = 0" for j in range(len(self.layout.loops))]

    def replay(self, loop: _Recomputed, taped: bool) -> list[str]:
        """Code re-running `rem` iterations of `loop` from the carry in its header's
        variables, keeping each one's tape and control decisions when `taped` (the
        machine's `TAPE`), else only advancing (`ADVANCE`): two loops, since Numba
        compiles a loop that may push to a stack into one several times slower per
        iteration even where it does not push. A re-run that leaves the loop early cannot
        match the forward run: ReplayMismatchError, as the interpreter's (raised after the
        loop, which a `raise` inside would slow down as well)."""
        self.replaying, self.replay_taped = loop, taped
        try:
            code = self._loop(loop.info.region, frozenset(), _no_return)
        finally:
            self.replaying = None
        message = left_early_message(loop.info.region, "an iteration")
        return (["while rem > 0:"] + code[1:]
                + [f"if rem < 0: raise ReplayMismatchError({message!r})"])

    # -- nodes ---------------------------------------------------------------------------
    def nodes(self, nodes: list[Node]) -> list[str]:
        """The lines of a block's nodes, each `inlined` value's expression carried into
        its consumer's (see `_fusible_chains`)."""
        lines: list[str] = []
        pending: dict[Value, str] = {}
        for n in nodes:
            if not _elementwise(n):
                lines += self.node(n)
                continue
            src = kernel_source(n, [pending.pop(v, None) or self.name(v) for v in n.inputs],
                                self.module.constants)
            if n.outputs[0] in self.inlined:
                pending[n.outputs[0]] = src
            else:
                lines += self.node(n, src)
        return lines

    def node(self, n: Node, src: str | None = None) -> list[str]:
        """The lines computing node `n`: its kind's emitter (`_EMIT`), or for a primitive,
        `_primitive`'s (`src`, when given, is its expression)."""
        emit = _EMIT.get(n.op)
        if emit is not None:
            return emit(self, n)
        return self._primitive(n, src)

    def _const(self, n: Node) -> list[str]:
        return []  # (set at the function's start: `constants`)

    def _primal(self, n: Node) -> list[str]:
        return [f"{self.name(n.outputs[0])} = {self.forward.name(n.params['of'])}"]

    def _log_pop(self, n: Node) -> list[str]:
        s = self.module.stacks[("decide", self.forward.layout.if_index[n.params["region"]])]
        return [f"{s.count} -= 1", f"{self.name(n.outputs[0])} = {s.name}[{s.count}]"]

    def _trip_pop(self, n: Node) -> list[str]:
        s = self.module.stacks[("trips", self.forward.layout.loop_index[n.params["loop"]])]
        return [f"{s.count} -= 1", f"{self.name(n.outputs[0])} = np.int64({s.name}[{s.count}])"]

    def _loop_state(self, n: Node) -> list[str]:
        loop = self.forward.layout.loop_index[n.params["loop"]]
        load = self.module.tapes[loop].pop()
        recomputed = self.module.recomputed.get(loop)
        return load if recomputed is None else self._restore(recomputed, load)

    def _call(self, n: Node) -> list[str]:
        """A `call` node: its sub-program's function, or, fused with a later `vjp_call`
        (`_fused_calls`), that one's pullback function, which gives both nodes' outputs."""
        of = n.params["of"]
        silent = self.quiet and not of.first_run  # (first_run: work done nowhere else)
        pullback = self.fused.get(n)
        if pullback is not None:  # its taped sweep does the call's work
            fn = self.module.pullback_function(pullback.params["of"], silent)
            args = ", ".join(self.name(v) for v in pullback.inputs)
            results = ", ".join(self.name(o) for o in [*n.outputs, *pullback.outputs])
            return [self.module.invoke(fn, f"{results},", args)]
        return self._function_call(n, of.compiled, silent)

    def _rule(self, n: Node) -> list[str]:
        """A custom rule's node (`custom_vjp`, `custom_jvp`): the program its rule object
        runs forward (`rule.compiled`: a custom_vjp's fwd, outputs then residuals; a
        custom_jvp's function itself) as a function of its own, as a `call`. Its
        derivatives are `call` and `vjp_call` nodes of the rule's other programs, which the
        gradient program holds, so the rule's gradient is what compiles there."""
        return self._function_call(n, n.params["rule"].compiled, self.quiet)

    def _function_call(self, n: Node, layout: Layout, silent: bool) -> list[str]:
        """`n`'s outputs from the function running `layout`'s program on its inputs."""
        fn = self.module.forward_function(layout, silent=silent)
        got = ", ".join(self.name(o) for o in n.outputs) + ("," if len(n.outputs) == 1 else "")
        return [self.module.invoke(fn, got, ", ".join(self.name(v) for v in n.inputs))]

    def _debug_callback(self, n: Node) -> list[str]:
        """A debug callback: the user's function called in object mode with the node's
        values (`K.debug_call`), where the run does the work for the first time."""
        if self.quiet:
            return []
        call = self.module.callback(n.params["callback"], [v.type for v in n.inputs])
        return [f"K.debug_call({call}{''.join(', ' + self.name(v) for v in n.inputs)})"]

    def _vjp_call(self, n: Node) -> list[str]:
        """A `vjp_call` node: its pullback function, which returns the sub-program's
        outputs, then the cotangents (nothing when a fused `call` ran it already)."""
        if n in self.fused:  # its outputs came with the call's
            return []
        of = n.params["of"]
        fn = self.module.pullback_function(of, self.quiet or of.repeats)
        skip = len(of.program.outputs)
        got = ", ".join(["_"] * skip + [self.name(o) for o in n.outputs]) + ","
        return [self.module.invoke(fn, got, ", ".join(self.name(v) for v in n.inputs))]

    def _primitive(self, n: Node, src: str | None) -> list[str]:
        outs = [self.name(o) for o in n.outputs]
        if src is None:
            args = [self.name(v) for v in n.inputs]
            compiled = PRIMITIVES[n.op].compiled
            if (isinstance(compiled, Source) and compiled.fresh_buffer
                    and n not in self.updaters):  # (an updater's carry is copied at entry)
                args[0] = f"{args[0]}.copy()"
            src = kernel_source(n, args, self.module.constants)
        if len(outs) == 1 and not PRIMITIVES[n.op].multi_output:
            t = n.outputs[0].type
            if t.shape == () and t.dtype.kind in "iu" and t.dtype.itemsize < 8:
                # Numba computes small integer scalars in int64; numpy wraps them in their
                # own width (int8 100 * 2 is -56), so the result is cast back
                src = f"{dtype_source(t.dtype)}({src})"
            return [f"{outs[0]} = {src}"]
        return [f"{', '.join(outs)}, = {src}"]

    def _restore(self, loop: _Recomputed, load: list[str]) -> list[str]:
        """`LoopState` of a loop under a recomputing strategy: run the operations its
        machine gives for this iteration, up to the `LOAD` of its tape (schedule_machine.py)."""
        j = loop.index
        restore = [f"{v} = {snap}[rs{j} + arg]" for v, snap in loop.snapshots]
        store = [f"arg += rs{j}"] + [line for k, (v, snap) in enumerate(loop.snapshots)
                                     for line in loop.store(k, "arg", v)]
        advance = ["rem = arg"] + self.forward.replay(loop, taped=False)
        tape = ["rem = arg"] + self.forward.replay(loop, taped=True)
        lines = loop.begin_reverse() + [
            f"SM.reverse_step(rv{j}, q{j})", "qi = 0",
            "while True:", f"    op = q{j}[qi, 0]", f"    arg = q{j}[qi, 1]",
            "    qi += 1", f"    if op == {LOAD}:"]
        lines += ["        " + x for x in load + ["break"]]
        for code, body in ((SET, restore), (STORE_ROW, store), (ADVANCE, advance),
                           (TAPE, tape)):
            lines.append(f"    elif op == {code}:")
            lines += ["        " + x for x in body]
        return lines

    # -- edges ---------------------------------------------------------------------------
    def edge(self, src: Block, key: Any) -> list[str]:
        edge = self.layout.edges[self.layout.edge_id[(src, key)]]
        loop = self.replaying
        if loop is not None:
            return self._replay_edge(loop, src, key, edge)
        lines = self.action(edge.action, edge.arg) + self._new_iteration(src, key)
        return lines + self._phi_copy(edge, src)

    def _new_iteration(self, src: Block, key: Any) -> list[str]:
        """On the edge into a recomputing loop's body in a taped sweep: the previous
        iteration's log entries, tapes and records come off their stacks (the
        interpreter's Sweep keeps only the last iteration's)."""
        entered = self.module.recomputed.get(self._entered_loop(src, key))
        if entered is None or not self.taped or not entered.inner:
            return []
        j = entered.index
        lines = [f"if nf{j} > 0:"]
        for k, counter in enumerate(entered.inner):
            resets = (counter.truncate(f"mk{j}_{k}") if isinstance(counter, _Tape)
                      else [f"{counter} = mk{j}_{k}"])
            lines += ["    " + x for x in resets]
        return lines

    def _entered_loop(self, src: Block, key: Any) -> int | None:
        """The loop whose body the edge (src, key) enters from its header, if it does."""
        region = self.layout.loops_by_header.get(src) if key is True else None
        return None if region is None else self.layout.loop_index[region]

    def _phi_copy(self, edge: Edge, src: Block) -> list[str]:
        """The edge's parallel copy; entering a loop (from its preheader `src`), a carry
        updated in place (`fresh`) starts as a copy of its initial value."""
        if not edge.phi_targets:
            return []
        region = self.layout.loops_by_header.get(self.layout.program.blocks[edge.target])
        entering = region is not None and region.preheader is src
        dst = ", ".join(f"{self.p}{s}" for s in edge.phi_targets)
        vals = ", ".join(f"{self.p}{s}.copy()" if entering and t in self.fresh else
                         f"{self.p}{s}" for s, t in zip(edge.phi_sources, edge.phi_targets))
        return [f"{dst}, = {vals},"]

    def _replay_edge(self, loop: _Recomputed, src: Block, key: Any, edge: Edge) -> list[str]:
        action, arg = edge.action, edge.arg
        if action == LOOP_EXIT and arg == loop.index:  # left early: `replay` raises
            return ["rem = -1", "break"]
        if action == LOOP_LATCH and arg == loop.index:
            tape = self.module.tapes[loop.index]
            lines = tape.push() if tape and self.replay_taped else []
            return lines + self._phi_copy(edge, src) + ["rem -= 1"]
        # a decision, or a nested loop's events: logged and taped as in the sweep when the
        # re-run is taped, only counted (trips, max_iters) when it is not
        if not self.replay_taped:
            self.taped, saved = False, self.taped
            try:
                return self.action(action, arg) + self._phi_copy(edge, src)
            finally:
                self.taped = saved
        lines = self.action(action, arg)
        if self._entered_loop(src, key) != loop.index:  # (a loop inside the one re-run)
            lines += self._new_iteration(src, key)
        return lines + self._phi_copy(edge, src)

    def action(self, action: int, arg: Any) -> list[str]:
        """What the interpreter's `Machine.act` does on this edge, as code: trip counting
        and `max_iters` always, logging and taping when the sweep is taped."""
        if not action:
            return []
        if action == DECIDE:
            if not self.taped:
                return []
            s = self.module.stacks[("decide", arg[0])]
            value = "True" if arg[1] is True else "False" if arg[1] is False else str(arg[1])
            return s.push(value)
        loop = self.layout.loops[arg]
        count = f"n{self.p}{arg}"
        recomputed = self.module.recomputed.get(arg) if self.taped else None
        if action == LOOP_ENTER:
            return [f"{count} = 0"] + (recomputed.enter() if recomputed else [])
        if action == LOOP_LATCH:
            lines = []
            tape = self.module.tapes[arg] if self.taped else None
            if tape:
                if recomputed is not None:  # the sweep keeps only the latest tape
                    lines += tape.truncate(f"tb{arg}")
                lines += tape.push()
            if recomputed is not None:
                lines += recomputed.back_edge()
            lines += [f"{count} += 1", _signal_check(count)]
            limit = loop.region.max_iters
            if limit is not None:
                message = loop_limit_message(loop.region)
                lines.append(f"if {count} > {limit}: raise LoopLimitError({message!r})")
            return lines
        # LOOP_EXIT
        if not self.taped:
            return []
        lines = self.module.stacks[("trips", arg)].push(count)
        return lines + (recomputed.exit() if recomputed else [])


# The compiled code of each node kind that is not an ordinary primitive: nodespec's runtime
# kinds (which only adjoints have), `const` (set at the function's start), the
# primitives that stand for a sub-program (`call`, `vjp_call`, the custom rules'
# `custom_vjp` and `custom_jvp`: functions of their own) and debug callbacks (a call in
# object mode).
_EMIT = {"const": _Writer._const, "Primal": _Writer._primal, "LogPop": _Writer._log_pop,
         "TripPop": _Writer._trip_pop, "LoopState": _Writer._loop_state,
         "call": _Writer._call, "vjp_call": _Writer._vjp_call,
         "custom_vjp": _Writer._rule, "custom_jvp": _Writer._rule,
         "debug_callback": _Writer._debug_callback}


class _Recomputed:
    """A loop of a `vjp_call`'s sub-program under a strategy that recomputes, following
    its schedule (checkpoint.FOLLOWS_SCHEDULE), which compiled code decides itself
    (schedule_machine.py: the strategy's decisions as a state machine of O(s) integers).
    Its sweep asks at each back edge which carry to store in which snapshot row, and
    keeps only the latest tape; each `LoopState` asks for the operations that re-run its
    iteration.

    A loop inside another runs once per outer iteration, and its executions are reversed
    last first, as the interpreter's records are: each execution's snapshots take rows
    above the previous one's (`st{j}`, the top), its record (the sweep's state) goes on a
    stack (`ex{j}`), and its first `LoopState` pops the record into the reverse state
    (`rv{j}`). An execution of no iteration records nothing."""

    def __init__(self, writer: _Writer, info: Any, strategy: Any,
                 inner: list[str | _Tape]):
        self.index = j = info.index
        self.info = info
        self.kind, self.param = SM.machine_of(strategy)
        self.slots = SM.slots_of(self.kind, self.param)
        region = info.region
        self.snapshots = [(writer.name(phi.out), f"snap{j}_{k}")
                          for k, phi in enumerate(region.header.phis)]
        self.types = [phi.out.type for phi in region.header.phis]
        # carries updated in place are kept by reference (a typed list of the buffers), as
        # the interpreter's snapshots hold them: the iterations re-run write the same rows
        self.by_reference = {k: writer.module.list_type(phi.out.type, "C")
                             for k, phi in enumerate(region.header.phis)
                             if writer.layout.slot[phi.out] in writer.fresh}
        # the counters of the log stacks, tapes and records the regions inside push to
        self.inner = inner
        lo_hi = info.trip_bound_slots
        self.bound = "-1" if lo_hi is None else f"max(0, f{lo_hi[1]} - f{lo_hi[0]})"

    def declare(self) -> list[str]:
        j, slots = self.index, self.slots
        lines = [f"{snap} = List.empty_list({self.by_reference[k]})" if k in self.by_reference
                 else f"{snap} = np.empty({(4,) + t.shape}, {dtype_source(t.dtype)})"
                 for k, ((_, snap), t) in enumerate(zip(self.snapshots, self.types))]
        # (a carry kept by reference has no row to pend from: an unused empty buffer)
        lines += [f"pd{j}_{k} = np.empty({(0,) * t.ndim}, {dtype_source(t.dtype)})"
                  if k in self.by_reference else f"pd{j}_{k} = {snap}[0]"
                  for k, ((_, snap), t) in enumerate(zip(self.snapshots, self.types))]
        return lines + [f"sw{j} = np.zeros({SM.sweep_size(slots)}, np.int64)",
                        f"rv{j} = np.zeros({SM.reverse_size(slots)}, np.int64)",
                        f"rv{j}[{SM.reverse_done(slots)}] = -1",
                        f"q{j} = np.empty(({SM.queue_rows(slots)}, 2), np.int64)",
                        f"ex{j} = np.empty((4, {SM.sweep_size(slots)}), np.int64); nex{j} = 0",
                        f"st{j} = 0; sb{j} = 0; tb{j} = 0; rs{j} = 0"]

    def enter(self) -> list[str]:
        j = self.index
        return [f"sb{j} = st{j}",
                # (int64, not literals: a literal argument would compile a version per value)
                f"SM.sweep_begin(sw{j}, np.int64({self.kind}), np.int64({self.param}), "
                f"np.int64({self.bound}), np.int64(sb{j}))",
                f"tb{j} = ntape{j}"] + [
                    f"mk{j}_{k} = {counter.count if isinstance(counter, _Tape) else counter}"
                    for k, counter in enumerate(self.inner)]

    def back_edge(self) -> list[str]:
        """At back edge t (`nf{j}`): where the machine may store (`AT`), the carry it names
        (x_t, or x_{t-1} kept as pending); then make x_t the pending one."""
        j = self.index
        lines = [f"if nf{j} == sw{j}[{SM.AT}]:",
                 f"    code = SM.sweep_step(sw{j}, np.int64(nf{j}))",
                 "    if code >= 0:", f"        row = sb{j} + (code >> 1)"]
        for k, (v, _) in enumerate(self.snapshots):
            lines += _indent(_indent(self.store(k, "row", f"pd{j}_{k} if code & 1 else {v}")))
        return lines + [f"pd{j}_{k} = {v}" for k, (v, _) in enumerate(self.snapshots)]

    def store(self, k: int, row: str, value: str) -> list[str]:
        """Lines storing `value` as snapshot `row` of carry k: a copy into the rows of an
        array, or for a carry kept by reference, the buffer into a typed list."""
        snap = self.snapshots[k][1]
        if k in self.by_reference:
            return [f"while {row} >= len({snap}): {snap}.append({value})",
                    f"{snap}[{row}] = {value}"]
        return [f"while {row} >= {snap}.shape[0]: {snap} = K.grow({snap})",
                f"{snap}[{row}] = {value}"]

    def exit(self) -> list[str]:
        """Record the execution, its snapshot rows the stack's top."""
        j = self.index
        return [f"if nf{j} > 0:",
                f"    if nex{j} == ex{j}.shape[0]: ex{j} = K.grow(ex{j})",
                f"    st{j} = sb{j} + SM.sweep_end(sw{j}, np.int64(nf{j}), ex{j}[nex{j}])",
                f"    nex{j} += 1"]

    def begin_reverse(self) -> list[str]:
        """At a `LoopState` with the current execution fully reversed: pop the next
        execution's record (its snapshot rows are the stack's top)."""
        j = self.index
        return [f"if rv{j}[{SM.reverse_done(self.slots)}] < 0:", f"    nex{j} -= 1",
                f"    SM.reverse_begin(rv{j}, ex{j}[nex{j}])",
                f"    rs{j} = rv{j}[{SM.BASE}]", f"    st{j} = rs{j}"]


def _signal_check(counter: str) -> str:
    """The line at a loop's back edge, after `counter` counted it, that runs Python's
    signal handlers every 1024th time (see `_SIGNAL_CHECK_MASK`)."""
    return f"if ({counter} & {_SIGNAL_CHECK_MASK}) == 0: K.check_signals()"


def _indent(lines: list[str]) -> list[str]:
    return ["    " + line for line in lines] or ["    pass"]


def _no_return(values: list[str]) -> list[str]:
    raise AssertionError("a loop's body reached the program's Return")


def _taped_values(plan: GradPlan) -> list[list[Value]]:
    """Per forward loop, the values its tape saves each iteration (without the records
    of loops nested in it: those keep stacks of their own)."""
    by_slot = {s: v for v, s in plan.forward.slot.items()}
    return [[by_slot[slot] for pos, slot in enumerate(saves.slots)
             if pos not in dict(saves.nested_records)] for saves in plan.saves]


def _read_by_adjoint(plan: GradPlan) -> frozenset[Value]:
    """The forward values an adjoint reads: through its `Primal` nodes, and those the
    loops' tapes save."""
    return plan.primal_reads.union(*_taped_values(plan))


def _fused_calls(program: Program) -> dict[Node, Node | None]:
    """The `call` nodes whose outputs a later `vjp_call` of the same sub-program at the
    same inputs computes anyway (value_and_grad traces as both), each mapped to that
    `vjp_call`, and the `vjp_call` to None: one taped sweep then gives both. The
    cotangents must be known at the call (made before it in its block, or outside it)."""
    fused: dict[Node, Node | None] = {}
    for blk in program.blocks:
        for i, n in enumerate(blk.nodes):
            if n.op != "call":
                continue
            later = {o for m in blk.nodes[i:] for o in m.outputs}
            k = len(n.inputs)
            for m in blk.nodes[i + 1:]:
                if (m.op == "vjp_call" and m not in fused
                        and m.params["of"].program is n.params["of"].program
                        and m.inputs[:k] == n.inputs
                        and not any(v in later for v in m.inputs[k:])):
                    fused[n], fused[m] = m, None
                    break
    return fused


# The nodes that run a program of their own, and the parameter whose `compiled` is its
# layout (a `vjp_call`'s: the sub-program its taped sweep runs)
_SUB_PROGRAMS = {"call": "of", "vjp_call": "of", "custom_vjp": "rule", "custom_jvp": "rule"}


# The run log's markers (a loop's exit is logged as its index, >= 0): see `_Module`
_BEGIN, _END = -1, -2


class _Module:
    """One generated module: the function of a top-level program and the functions of
    the sub-programs its `call` and `vjp_call` nodes stand for.

    The `recording` variant also logs what `cfgrad.nested.recorded_runs` needs of each
    `vjp_call` run (schedule.replayed_stats makes the interpreter's RunStats of it): every
    function passes an int64 stack `R` (its length `nR`) on to the functions it calls and
    returns it, and a `vjp_call`'s function pushes triples onto it: (_BEGIN, run, 0),
    then each loop exit of its taped sweep (loop, trips, iteration of the enclosing loop
    or -1), then (_END, run, 0), `run` indexing `runs` (the node's `of` and its loops'
    facts). Runs nest (a `vjp_call` inside a sub-program), so markers pair up like
    brackets, and a run ends where the interpreter's `Pullback.run` records it. A
    separate module, compiled only when someone records, so that the ordinary one pays
    nothing for it."""

    def __init__(self, recording: bool = False) -> None:
        self.recording = recording
        self._log_vars = ["R", "nR"] if recording else []
        self.runs: list[tuple[str, list[LoopFacts]]] = []
        # the enclosing call's checkpoint choice, for loops that chose none in a nested
        # `vjp_call` that chose none (nested.call_checkpoint, as the interpreter's)
        self.choice: Any = None
        self.constants = _Constants()
        self.functions: list[str] = []
        self._texts: dict[str, str] = {}  # each function's text (its own name blanked): name
        self._names: dict[Any, str] = {}
        self._numbers = itertools.count(1)  # of the generated functions
        self.stacks: dict[tuple[str, int], _Stack] = {}
        self.tapes: dict[int, _Tape] = {}
        # typed-list element types, by value type and array layout
        self.list_types: dict[tuple[TensorType, str], str] = {}
        self.recomputed: dict[int, _Recomputed] = {}  # of the vjp function being written
        # the debug callbacks called, and their table's constant (K.callback_table)
        self.callbacks: list[tuple[Any, tuple[np.dtype | None, ...]]] = []
        self._callback_table: str | None = None
        self._calling_back: dict[int, bool] = {}  # by program id: see `calls_back`

    def callback(self, function: Any, types: list[TensorType]) -> str:
        """The first arguments of `K.debug_call` calling `function` with values of
        `types`: the module's table of callbacks, the function's index in it."""
        if self._callback_table is None:
            self._callback_table = self.constants(K.callback_table(self.callbacks)) + "[0]"
        made = tuple(None if t.shape != () or t.dtype.name in _NATIVE_SCALARS else t.dtype
                     for t in types)  # (what object mode does not give as it is)
        self.callbacks.append((function, made))
        return f"{self._callback_table}, {len(self.callbacks) - 1}"

    def calls_back(self, program: Program) -> bool:
        """Whether running `program` calls a debug callback where it does not repeat work:
        a node of it, or of the programs its `call`, `vjp_call` and custom rules' nodes run
        forward, at any depth (functions of such programs are written twice, quiet and
        not, and only those)."""
        key = id(program)
        if key not in self._calling_back:
            self._calling_back[key] = any(self._node_calls_back(n)
                                          for b in program.blocks for n in b.nodes)
        return self._calling_back[key]

    def _node_calls_back(self, n: Node) -> bool:
        if n.op in _SUB_PROGRAMS:
            owner = n.params[_SUB_PROGRAMS[n.op]]
            return self.calls_back(owner.compiled.program)
        return n.op in PRIMITIVES and PRIMITIVES[n.op].effect

    def forward_function(self, layout: Layout, name: str | None = None,
                         silent: bool = False) -> str:
        """A function running `layout`'s program untaped: (C, *params) -> tuple of
        outputs. `layout` is the one its caller keeps (the interpreter's `Compiled` of the
        program): its numbering names the variables. `silent` where it repeats work (see
        `_Writer.quiet`): a second function, without its debug callbacks, where it has any."""
        program = layout.program
        silent = silent and self.calls_back(program)
        key = ("call", id(program), id(self.choice), silent)
        if key in self._names:
            return self._names[key]
        fname = name or f"call_{next(self._numbers)}"
        self._names[key] = fname
        w = _Writer(self, layout, "f", silent=silent)
        params = ", ".join(w.name(p) for p in program.params)
        body = w.constants() + w.machine(lambda vals: [self._returned(vals)])
        self._names[key] = fname = self.add_function(fname, params, body, unique=name is None)
        return fname

    def pullback_function(self, of: Any, silent: bool = False) -> str:
        """A `vjp_call` node's function: the taped forward sweep of its sub-program, then
        the adjoint; (C, *params, *output cotangents) -> the sub-program's outputs, then
        its parameters' cotangents (the outputs serve a `call` fused with it). `silent`:
        the forward sweep repeats work, as the adjoint always does (`_Writer.quiet`)."""
        choice = of.checkpoint if of.checkpoint is not None else self.choice
        silent = silent and self.calls_back(of.program)
        key = ("vjp", id(of), id(choice), silent)
        if key in self._names:
            return self._names[key]
        if getattr(of, "check", False):
            raise Unsupported("anomaly detection (detect_anomaly=True) runs in the "
                              "interpreter", rewrite="jit the gradient without "
                              "detect_anomaly, and check for NaNs unjitted while debugging")
        program: Program = of.program
        plan: GradPlan = of.plan
        fname = f"vjp_{next(self._numbers)}"  # (taken now: the body may name others)
        fwd = _Writer(self, plan.forward, "f", taped=True, keep=_read_by_adjoint(plan),
                      silent=silent)
        adj = _Writer(self, plan.compiled, "a", forward=fwd, silent=True)
        chosen = [resolve(li.region.checkpoint, choice) for li in plan.forward.loops]
        run = len(self.runs)
        self.runs.append((repr(of), [
            LoopFacts(li.region.id, strategy, li.parent, li.trip_bound_slots is not None,
                      li.carry_bytes, saves.nbytes)
            for li, strategy, saves in zip(plan.forward.loops, chosen, plan.saves)]))
        outer = self.stacks, self.tapes, self.recomputed, self.choice
        self.stacks, self.tapes, self.recomputed, self.choice = {}, {}, {}, choice
        try:
            inits = self._log_and_tapes(plan, fwd)
            inits += self._strategies(chosen, fwd)
            params = [fwd.name(p) for p in program.params] + [
                adj.name(p) for p in plan.adjoint.params]
            body = (fwd.constants() + adj.constants() + adj.tick_counters() + inits
                    + self.log(_BEGIN, run, 0))
            outputs = [f"out{i}" for i in range(len(program.outputs))]
            body += fwd.machine(lambda vals: [f"{', '.join(outputs)}, = {', '.join(vals)},"])
            body += adj.machine(lambda vals: self.log(_END, run, 0)
                                + [self._returned(outputs + vals)])
        finally:
            self.stacks, self.tapes, self.recomputed, self.choice = outer
        self._names[key] = fname = self.add_function(fname, ", ".join(params), body)
        return fname

    def _strategies(self, chosen: list[Any], fwd: _Writer) -> list[str]:
        """Each loop's strategy, as its class declares it is compiled
        (`checkpoint.compiled_form`): one that tapes every step needs nothing more; one
        that follows its schedule a `_Recomputed` (its declarations returned)."""
        c = fwd.layout
        lines = []
        for li, strategy in zip(c.loops, chosen):
            r = li.region
            form = compiled_form(strategy)
            if form == TAPES_EVERY_STEP:
                continue
            where = f"{r.id} (at {r.loc}) under checkpoint={strategy!r}"
            if form != FOLLOWS_SCHEDULE:
                raise Unsupported(
                    f"{where}: a strategy of your own runs in the interpreter", r.loc,
                    "a strategy of cfgrad.checkpoint (StoreAll, Recompute, EveryK, Binomial, "
                    "Online) compiles")
            inner = [self.stacks[("decide", i)].count for i in li.inner_ifs]
            for k in li.inner_loops:
                inner.append(self.stacks[("trips", k)].count)
                if self.tapes[k]:
                    inner.append(self.tapes[k])
                if compiled_form(chosen[k]) != TAPES_EVERY_STEP:
                    inner += [f"nex{k}", f"st{k}"]
            self.recomputed[li.index] = rec = _Recomputed(fwd, li, strategy, inner)
            lines += rec.declare()
        return lines

    def _log_and_tapes(self, plan: GradPlan, fwd: _Writer) -> list[str]:
        """Declare the control log's stacks and each loop's tape (the values `plan` saves
        per iteration); their initialising lines."""
        c = plan.forward
        for region, i in c.if_index.items():
            kind = np.dtype(np.bool_) if region.kind == "cond" else np.dtype(np.int64)
            self.stacks[("decide", i)] = _Stack(f"dec{i}", f"ndec{i}", kind)
        for li, taped in zip(c.loops, _taped_values(plan)):
            self.stacks[("trips", li.index)] = _Stack(f"trips{li.index}", f"ntrips{li.index}",
                                                      np.dtype(np.int64))
            self.tapes[li.index] = _Tape(self, li.index, [(fwd.name(v), v.type) for v in taped])
        lines = [s.init() for s in self.stacks.values()]
        return lines + [line for tape in self.tapes.values() for line in tape.init()]

    def log(self, a: Any, b: Any, c: Any) -> list[str]:
        """Lines pushing the triple (a, b, c) onto the run log (none unless recording)."""
        if not self.recording:
            return []
        return ["if nR + 3 > R.shape[0]: R = K.grow(R)",
                f"R[nR] = {a}; R[nR + 1] = {b}; R[nR + 2] = {c}; nR += 3"]

    def invoke(self, fn: str, got: str, args: str) -> str:
        """`got = fn(C, args)`, the run log passed through when recording."""
        if not self.recording:
            return f"{got} = {fn}(C, {args})"
        return f"{got.rstrip(',')}, R, nR, = {fn}(C, R, nR, {args})"

    def _returned(self, values: list[str]) -> str:
        return f"return ({', '.join(values + self._log_vars)},)"

    def add_function(self, name: str, params: str, body: list[str], unique: bool = True
                     ) -> str:
        """Add the function `name` to the module, unless (`unique`) one with the same
        text is there already: then that one's name. Each step of a Python loop that
        calls `cg.grad` or `cg.jvp` traces a sub-program of its own, alike; Numba would
        compile each copy on its own (seconds each), where one function serves all."""
        text = self._function("_", params, body)
        if unique and text in self._texts:
            return self._texts[text]
        self._texts.setdefault(text, name)
        self.functions.append(self._function(name, params, body))
        return name

    def _function(self, name: str, params: str, body: list[str]) -> str:
        lines = ["@numba.njit(cache=True, error_model=\"numpy\")",
                 f"def {name}({', '.join(['C'] + self._log_vars + ([params] if params else []))}):"]
        lines += ["    " + line for line in body]
        return "\n".join(lines) + "\n"

    def list_type(self, t: TensorType, layout: str = "A") -> str:
        """The module-level name of Numba's type for an array of type `t` (any layout, or
        C-contiguous with `layout` "C"), which typed lists of such arrays are declared
        with."""
        key = (t, layout)
        if key not in self.list_types:
            self.list_types[key] = f"A{len(self.list_types)}"
        return self.list_types[key]

    def source(self) -> str:
        # The helpers' version in the text, so in the hash naming the module: Numba's disk
        # cache keys a function by its own file alone, and the machine code it keeps has
        # the helpers it calls compiled in, which would outlive a change to kernels.py.
        header = [f"# cfgrad.kernels {_KERNELS_VERSION}",
                  "import numpy as np", "import numba", "from numba.typed import List",
                  "from cfgrad import kernels as K",
                  "from cfgrad import schedule_machine as SM",
                  "from cfgrad.errors import LoopLimitError, ReplayMismatchError", ""]
        header += [f"{name} = numba.types.Array(numba.types.{t.dtype.name}, {t.ndim}, "
                   f"{layout!r})" for (t, layout), name in self.list_types.items()]
        return "\n".join(header + ["", ""] + self.functions) + "\n"


def cache_dir() -> Path:
    """Where generated modules (and Numba's cache of their machine code) are kept."""
    root = os.environ.get("CFGRAD_CACHE_DIR")
    if root:
        return Path(root)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "cfgrad" / "native"


_LOADING = threading.Lock()
_unusable: set[Path] = set()  # cache directories this process could not write to
_own_directory: Path | None = None  # then its temporary directory, removed at exit


def _load(source: str) -> Any:
    """Write `source` as a module named by its hash (once) and import it; one thread at a
    time, so that no thread sees another's module before it has run."""
    with _LOADING:
        return _load_unlocked(source)


def _load_unlocked(source: str) -> Any:
    digest = hashlib.sha256(source.encode()).hexdigest()[:20]
    name = f"cfgrad_native_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    directory = cache_dir()
    try:
        path = _written(directory, name, source)
    except OSError as e:
        path = _written(_instead_of(directory, e), name, source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]  # so that a second attempt fails the same way
        raise
    return module


def _written(directory: Path, name: str, source: str) -> Path:
    """The module file `name`.py holding `source` in `directory` (created if need be),
    written unless it is there already."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.py"
    if not path.exists() or path.read_text() != source:
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(source)
        os.replace(tmp, path)
    return path


def _instead_of(directory: Path, error: OSError) -> Path:
    """The directory to use when the cache directory cannot be (a file in its way, no
    permission to write): a temporary one of this process, removed when it exits, so that
    the program still compiles, with a `CompileWarning` (once per directory) that says
    what failed and what to do. Only the disk cache is lost: each process compiles again.
    A temporary directory that cannot be made either is `Unsupported`: the program runs
    in the interpreter, with both reasons."""
    global _own_directory
    reason = f"{error.strerror or error}" + (f": {error.filename}" if error.filename else "")
    if directory not in _unusable:
        _unusable.add(directory)
        warnings.warn(
            f"cfgrad.jit cannot use its cache directory {directory} ({reason}); compiled "
            "code is kept in a temporary directory until this process exits, so every "
            "process compiles again: set CFGRAD_CACHE_DIR to a directory you can write to "
            "(or remove what is in the way)", CompileWarning, stacklevel=2)
    if _own_directory is None:
        try:
            _own_directory = Path(tempfile.mkdtemp(prefix="cfgrad-native-"))
        except OSError as e:
            raise Unsupported(f"no directory to write its generated code to: {directory} "
                              f"({reason}), nor a temporary one ({e})") from None
        atexit.register(shutil.rmtree, _own_directory, ignore_errors=True)
    return _own_directory


_KERNELS_VERSION = hashlib.sha256(b"".join(
    Path(f).read_bytes() for f in (*K.SOURCE_FILES, SM.__file__))).hexdigest()[:16]

_NATIVE_SCALARS = {"float64": float, "int64": int, "bool": bool, "complex128": complex}


class NativeProgram:
    """A Program compiled to one native function: call it with the flat argument leaves,
    get the flat outputs (numpy scalars and arrays of the Program's output types).

    `compile_seconds` is the time the compilation took (Numba's type inference and LLVM,
    or loading machine code from its disk cache: `from_disk_cache`, or nothing when this
    process compiled the same generated module before: `reused`).

    A call made while `run_sink()` returns a list (`cfgrad.nested.recorded_runs()`'s:
    the caller says where runs go, this module sits below the transformations) runs the
    recording variant of the module instead (`_Module`), generated and compiled on its
    first such call, and appends each `vjp_call` run it logged to that list with the
    statistics the interpreter gives the same run (schedule.replayed_stats)."""

    def __init__(self, compiled: Layout,
                 run_sink: Callable[[], list[tuple[str, RunStats]] | None] = lambda: None):
        program = compiled.program
        self._run_sink = run_sink
        module = _Module()
        module.forward_function(compiled, name="main")
        self.compiled = compiled
        self.program = program
        self.source = module.source()
        self._constants = tuple(module.constants.arrays)
        self._fn = _load(self.source).main
        # per `vjp_call` function, the facts its runs are replayed with: (its `of`, its
        # loops' facts), at the index the run log names (the recording variant writes
        # the same functions in the same order)
        self.runs = module.runs
        self.records = bool(module.runs)  # whether a call has runs to record
        self._recording: tuple[Any, tuple] | None = None  # (main, C) of the variant
        # each output's numpy scalar type (None for arrays), and whether any is an array
        # (only arrays may need owned_results' copies)
        self._scalars = [v.type.dtype.type if v.type.shape == () else None
                         for v in program.outputs]
        self._arrays = None in self._scalars
        self._param_types = [p.type for p in program.params]
        # the Python type Numba reads as each scalar parameter's dtype (none for arrays)
        self._native_kinds = [_NATIVE_SCALARS.get(t.dtype.name) if t.shape == () else None
                              for t in self._param_types]
        self.compile_seconds: float | None = None
        self.from_disk_cache = False
        self.reused = False

    def arguments(self, leaves: list[Any]) -> list[Any]:
        """Leaves as Numba takes them: a scalar parameter's Python number of the matching
        kind as it is (Numba reads a float as float64, an int as int64), other scalars as
        numpy scalars of the parameter's dtype, arrays of its dtype."""
        out = []
        for x, t, native in zip(leaves, self._param_types, self._native_kinds):
            if type(x) is native or (type(x) is np.ndarray and x.ndim and x.dtype == t.dtype):
                out.append(x)
                continue
            a = np.asarray(x, t.dtype)
            out.append(a[()] if t.shape == () else a)
        return out

    def __call__(self, leaves: list[Any]) -> list[Any]:
        args = self.arguments(leaves)
        if self.records and (sink := self._run_sink()) is not None:
            results = self._recorded(args, sink)
        else:  # (inline: a method call here would cost the hot path a Python frame)
            if self.compile_seconds is None:
                self.compile(args)
            results = self._fn(self._constants, *args)
        outs = [r if scalar is None else scalar(r) for r, scalar in zip(results, self._scalars)]
        return owned_results(outs, self.compiled.shared_outputs) if self._arrays else outs

    def _recorded(self, args: list[Any], sink: list[tuple[str, RunStats]]) -> tuple:
        """Run the recording variant, its runs to `sink` in the interpreter's order; the
        program's results."""
        main, constants = self.recording_variant(args)
        *results, log, n = main(constants, np.empty(48, np.int64), 0, *args)
        opened: list[list[tuple[int, int, int]]] = []  # the exits of each run not ended
        for a, b, c in log[:n].reshape(-1, 3).tolist():
            if a == _BEGIN:
                opened.append([])
            elif a == _END:
                of, loops = self.runs[b]
                sink.append((of, replayed_stats(loops, opened.pop())))
            else:
                opened[-1].append((a, b, c))
        return results

    def prepare(self, args: list[Any]) -> None:
        """Compile the variant a call made now runs (see `recording_variant`), so that a
        failure shows before the call."""
        if self.records and self._run_sink() is not None:
            self.recording_variant(args)
        else:
            self.compile(args)

    def recording_variant(self, args: list[Any]) -> tuple[Any, tuple]:
        """The recording module's `main` compiled for the types of `args`, and its
        constants (generated, loaded and compiled once)."""
        if self._recording is None:
            import numba

            module = _Module(recording=True)
            module.forward_function(self.compiled, name="main")
            main, constants = _load(module.source()).main, tuple(module.constants.arrays)
            log = (numba.typeof(np.empty(0, np.int64)), numba.typeof(0))
            main.compile((numba.typeof(constants),) + log + tuple(map(numba.typeof, args)))
            self._recording = main, constants
        return self._recording

    def compile(self, args: list[Any]) -> None:
        """Compile for the types of `args` (once; timed into `compile_seconds`)."""
        if self.compile_seconds is not None:
            return
        import numba

        signature = tuple(numba.typeof(a) for a in (self._constants, *args))
        self.reused = signature in self._fn.overloads  # same module, compiled earlier
        hits = sum(self._fn.stats.cache_hits.values())
        start = time.perf_counter()
        self._fn.compile(signature)
        self.compile_seconds = time.perf_counter() - start
        self.from_disk_cache = sum(self._fn.stats.cache_hits.values()) > hits
