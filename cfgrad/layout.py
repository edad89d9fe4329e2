"""The layout of a Program: the facts both backends read, computed once per Program.

A backend turns a Program into something that runs: the interpreter (interpret.py) into
generated Python block functions over a flat register list, the compiled backend
(native.py) into Numba source whose variables are named by register number. Both need the
same facts first, and neither should derive them from the IR on its own: which register
(slot) holds each value, the blocks and edges by number and what each edge does at run
time (a logged decision, entering a loop, its back edge, leaving it), each loop's
registers and its place among the regions, the values that may hold a deferred result,
the outputs a run may not own. A `Layout` holds them; `interpret.Compiled` extends it
with the interpreter's code, and native.py writes its code from it.

A differentiated Program adds the `GradPlan`: the adjoint's layout and what each forward
loop saves for it (`LoopSaves`), decided by what the adjoint reads, so one forward layout
serves every `wrt` (docs/architecture.md, "The artifacts").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from .errors import ArgumentValueError
from .ir import (
    Block,
    Cond,
    IfRegion,
    LoopRegion,
    Node,
    Phi,
    Program,
    Region,
    RegionIndex,
    RegionNest,
    Value,
    loop_owners,
)
from .primitives import PRIMITIVES

#: What an edge does at run time (`Edge.action`): nothing (0), log an if region's decision,
#: enter a loop, take its back edge, leave it. Adjoint programs observe nothing.
DECIDE, LOOP_ENTER, LOOP_LATCH, LOOP_EXIT = 1, 2, 3, 4


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


@dataclass(frozen=True, eq=False)
class LoopInfo:
    """One loop region as both backends run it: its registers, edges and place among the
    program's regions."""

    index: int
    region: LoopRegion
    header: int  # block index
    exit: int
    carry_slots: tuple[int, ...]  # the header Phis: carry_t during iteration t
    latch_edge: int
    record_slot: int  # the register holding this execution's checkpoint record
    trip_bound_slots: tuple[int, int] | None
    parent: int | None  # the loop it is nested in directly (its index), if any
    carry_bytes: int  # size of one carry (a checkpoint)
    inner_ifs: tuple[int, ...]  # if regions inside the loop, at any depth
    inner_loops: tuple[int, ...]  # loops inside the loop, at any depth
    # those regions, ifs first, in signature order (control events name their region);
    # empty when nothing inside the loop decides, so replays need no checking
    event_regions: tuple[Region, ...]
    empty_signature: tuple  # an iteration whose inner regions logged nothing


class Edge(NamedTuple):
    """One control edge: where it goes, what it does at run time (`action`, with its
    argument: a loop's index, or for DECIDE the if region's log index, the decision and the
    control event), and its Phi copy, a parallel copy from `phi_sources` to `phi_targets`
    (registers; both empty when the target has no Phis)."""

    target: int
    action: int
    arg: Any
    phi_targets: tuple[int, ...]
    phi_sources: tuple[int, ...]


class Layout:
    """A Program's registers, blocks, edges, regions and loops, numbered once (see the
    module docstring). `forward` is the forward program's layout when this is an adjoint's
    (whose `Primal`, `LogPop`, `TripPop` and `LoopState` nodes name the forward's values
    and regions); an adjoint's edges observe nothing."""

    def __init__(self, program: Program, forward: Layout | None = None):
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
        self.loop_index = {r: i for i, r in enumerate(program.loops())}
        self.ifs_by_branch: dict[Block, IfRegion] = {r.branch: r for r in self.if_index}
        self.loops_by_header: dict[Block, LoopRegion] = {r.header: r
                                                         for r in self.loop_index}
        self.edges: list[Edge] = []
        self.edge_id: dict[tuple[Block, Any], int] = {}
        self._lay_edges()
        # the registers: a slot per value, then a checkpoint record per loop
        self.size = len(self.slot) + len(self.loop_index)
        self.loops: list[LoopInfo] = self._lay_loops()
        self.deferred = _deferred_values(program)
        #: the const nodes, in program order: their values are set once, not per run
        self.constants: tuple[Node, ...] = tuple(n for b in blocks for n in b.nodes
                                                 if n.op == "const")
        self.return_slots = tuple(self.slot[v] for v in program.outputs)
        self.shared_outputs = shared_outputs(program)
        self.param_slots = tuple(self.slot[v] for v in program.params)

    def _alloc(self, v: Value) -> None:
        self.slot[v] = len(self.slot)

    def _lay_edges(self) -> None:
        observe = self.forward is None  # adjoint programs log nothing
        loops_by_header = self.loops_by_header
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
                        r_if = self.ifs_by_branch[b]
                        # (log stack, decision, the control event: region and decision)
                        action, arg = DECIDE, (self.if_index[r_if], key, (r_if, key))
                copied: tuple[int, ...] = ()
                if target.phis:
                    i = target.pred_index(b, key)
                    copied = tuple(self.slot[phi.inputs[i]] for phi in target.phis)
                self.edge_id[(b, key)] = len(self.edges)
                self.edges.append(Edge(self.block_index[target], action, arg,
                                       tuple(self.slot[phi.out] for phi in target.phis),
                                       copied))

    def _lay_loops(self) -> list[LoopInfo]:
        program = self.program
        in_place = _updated_in_place(program)
        nest = RegionNest(program.regions)
        loops = []
        for r, i in self.loop_index.items():
            bounds = None
            if r.trip_bounds is not None:
                bounds = (self.slot[r.trip_bounds[0]], self.slot[r.trip_bounds[1]])
            parent = nest.loop_of[r.parent]
            inside = [q for q in program.regions if q is not r and nest.encloses(r, q)]
            event_regions = tuple(q for q in inside if q in self.if_index) + tuple(
                q for q in inside if q in self.loop_index)
            loops.append(LoopInfo(
                i, r, self.block_index[r.header], self.block_index[r.exit],
                tuple(self.slot[p.out] for p in r.header.phis),
                self.edge_id[(r.latch, None)], len(self.slot) + i, bounds,
                parent=None if parent is None else self.loop_index[parent],
                carry_bytes=sum(p.out.type.size * p.out.type.dtype.itemsize
                                for p in r.header.phis if p not in in_place),
                inner_ifs=tuple(self.if_index[q] for q in inside if q in self.if_index),
                inner_loops=tuple(self.loop_index[q] for q in inside if q in self.loop_index),
                event_regions=event_regions, empty_signature=((),) * len(event_regions)))
        return loops


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
    """Everything reverse mode needs beyond the forward layout, for one adjoint: the
    adjoint Program, its layout (`compiled`: the backend's own, an `interpret.Compiled`
    when `differentiate` made the plan), each forward loop's `LoopSaves` and the forward
    values the adjoint reads (`primal_reads`).

    The adjoint decides which values each loop must keep, so this plan, not the forward
    compilation, holds that decision: one forward layout serves every `wrt`, and a taped
    run receives the plan it runs for. Built once, never mutated."""

    __slots__ = ("forward", "adjoint", "compiled", "saves", "primal_reads")

    def __init__(self, forward: Layout, compiled: Layout):
        adjoint = compiled.program
        if adjoint.forward is not forward.program or compiled.forward is not forward:
            raise ArgumentValueError(f"GradPlan: {adjoint.name} is not an adjoint of "
                                     f"{forward.program.name}")
        self.forward = forward
        self.adjoint = adjoint
        self.compiled = compiled
        self.primal_reads: frozenset[Value] = _primal_reads(adjoint)
        self.saves: tuple[LoopSaves, ...] = _plan_saves(forward, self.primal_reads)


def _primal_reads(adjoint: Program) -> frozenset[Value]:
    """The forward values the adjoint reads (what StoreAll must keep per iteration)."""
    return frozenset(n.params["of"] for b in adjoint.blocks for n in b.nodes
                     if n.op == "Primal")


def _plan_saves(forward: Layout, needed: frozenset[Value]) -> tuple[LoopSaves, ...]:
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
        if li.parent is not None:
            nested[li.parent].append((len(per_loop[li.parent]), li.index))
            per_loop[li.parent].append(li.record_slot)
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
