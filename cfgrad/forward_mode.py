"""The JVP transform: forward Program → a Program that also carries tangents.

Every block is copied with, beside each primitive node, the nodes of its JVP rule; every
float Phi gets a tangent Phi; terminators and regions are kept, so the tangent program
branches and loops exactly like the original (the branch taken at run time is the one
differentiated). Zero tangents stay symbolic except where a Phi needs a concrete input.

A custom_jvp rule is traced inline and may lower control flow of its own: the copy of a
forward block then starts in one block and ends in another (the rule's merge or exit),
and the block's terminator, outgoing edges and region roles belong to that last block.
The rule's regions nest in the region enclosing the forward block.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import ArgumentTypeError, LoweringError, VerifyError
from .ir import (
    Block,
    Cond,
    Edge,
    IfRegion,
    Jmp,
    LoopRegion,
    Node,
    Phi,
    Program,
    Region,
    Return,
    Value,
)
from .passes import JVP_PIPELINE, run_passes
from .primitives import PRIMITIVES
from .trace import Trace
from .verify import verify

# the nodes a program's second-order JVP program replaces by units (see build_jvp)
_UNITS = ("custom_vjp", "custom_jvp", "call")


def _or_zeros(tangent: Any, v: Value, zeros: Any) -> Value:
    return (tangent if tangent is not None else zeros(v)).value


def _enclosing(b: Block) -> Region | None:
    """The smallest region containing block b: a region's merge / exit block names that
    region but lies after it."""
    r = b.region
    if isinstance(r, IfRegion) and b is r.merge or isinstance(r, LoopRegion) and b is r.exit:
        return r.parent
    return r


def _next_region_numbers(fwd: Program) -> dict[str, int]:
    """Trace counters past the forward program's region ids (`if#3`, `loop#0`), so regions
    lowered by custom_jvp rules get ids of their own."""
    counters = {"if": 0, "loop": 0}
    for r in fwd.regions:
        kind, _, number = r.id.partition("#")
        if kind in counters and number.isdigit():
            counters[kind] = max(counters[kind], int(number) + 1)
    return counters


def _copy_region(r: Region) -> Region:
    """Forward region r in the JVP program; its parent and blocks are filled in later."""
    if isinstance(r, IfRegion):
        return IfRegion(r.id, None, r.loc, kind=r.kind)
    assert isinstance(r, LoopRegion)
    return LoopRegion(r.id, None, r.loc, kind=r.kind, checkpoint=r.checkpoint,
                      max_iters=r.max_iters)


def _place_region(nr: Region, r: Region, starts: dict[Block, Block], ends: dict[Block, Block],
                  primal: dict[Value, Value]) -> None:
    """Fill in the copy's blocks: entry roles (case, merge, header, body, exit) are where a
    copied block starts, exit roles (branch, case exit, preheader, latch) where it ends."""
    if isinstance(r, IfRegion):
        assert isinstance(nr, IfRegion)
        nr.branch, nr.merge = ends[r.branch], starts[r.merge]
        nr.cases = [starts[c] for c in r.cases]
        nr.case_exits = [ends[c] for c in r.case_exits]
        return
    assert isinstance(r, LoopRegion) and isinstance(nr, LoopRegion)
    nr.preheader, nr.latch = ends[r.preheader], ends[r.latch]
    nr.header, nr.body, nr.exit = starts[r.header], starts[r.body], starts[r.exit]
    if r.trip_bounds is not None:
        nr.trip_bounds = (primal[r.trip_bounds[0]], primal[r.trip_bounds[1]])


def build_jvp(fwd: Program, active: set[Value] | None = None) -> Program:
    """Parameters: the primals, then one tangent per float primal. Results: the outputs,
    then one tangent per output (zeros for non-float outputs).

    With `active` (the values a gradient of the program differentiates), the program
    whose reverse mode gives the derivative of that gradient (nested.py): each custom
    rule's node, and each `call`, with an active input becomes its `unit`, whose values
    and tangents are the rule's as ordinary code and whose reverse mode gives the rule's
    cotangents and their derivative, as JAX's outer transformation sees a rule that the
    gradient expanded. Inactive ones keep their JVP: the gradient never expands them."""
    t = Trace(f"{fwd.name}.{'jvp' if active is None else 'jvp2'}", home=fwd.loc,
              derived=True)  # nodes: the copied node's line
    t.counters = _next_region_numbers(fwd)
    # every tracer lives in the top scope (or, inside a rule's cond or loop, below it);
    # its region follows the block being copied, so a rule's regions nest in that one
    top = t.scope
    assert top is not None
    starts: dict[Block, Block] = {fwd.blocks[0]: t.entry}
    t.entry.role = fwd.blocks[0].role
    for b in fwd.blocks[1:]:
        starts[b] = t.new_block(None, b.role)
    regions = {r: _copy_region(r) for r in fwd.regions}
    for r, nr in regions.items():
        nr.parent = regions[r.parent] if r.parent else None
    t.regions.extend(regions.values())
    for b in fwd.blocks:
        if b.region is not None:
            starts[b].region = regions[b.region]

    primal: dict[Value, Value] = {}
    tangent: dict[Value, Any] = {}
    params = [Value(v.type, v.hint) for v in fwd.params]
    tparams = [Value(v.type, f"d{v.hint or i}") for i, v in enumerate(fwd.params)
               if v.type.is_float]
    primal.update(zip(fwd.params, params))
    tangent.update(zip([v for v in fwd.params if v.type.is_float], (t.tracer(p) for p in tparams)))

    def zeros(v: Value) -> Any:
        return t.tracer(t.const(np.zeros(v.type.shape, v.type.dtype)))

    phi_pairs: list[tuple[Phi, Phi, Phi | None]] = []
    ends: dict[Block, Block] = {}
    created: dict[Block, list[Block]] = {}
    for b in fwd.blocks:
        nb = starts[b]
        t.current = nb
        enclosing = _enclosing(b)
        top.region = regions[enclosing] if enclosing is not None else None
        first_new = len(t.blocks)
        for phi in b.phis:
            p = Phi(Value(phi.out.type), [])
            primal[phi.out] = p.out
            nb.phis.append(p)
            tp = None
            if phi.out.type.is_float:
                tp = Phi(Value(phi.out.type), [])
                nb.phis.append(tp)
                tangent[phi.out] = t.tracer(tp.out)
            phi_pairs.append((phi, p, tp))
        for n in b.nodes:
            _copy_node(t, n, primal, tangent, active)
        ends[b] = t.current
        created[b] = t.blocks[first_new:]
        if t.current is not nb and isinstance(b.region, LoopRegion) and b is b.region.header:
            raise LoweringError(
                f"forward mode (jvp): a custom_jvp rule in the condition of {b.region.id} "
                f"({b.region.kind}_loop at {b.region.loc}) lowers control flow of its own, "
                "which a loop condition cannot hold; compute the predicate without it")
    top.region = None
    # a block's copy is followed by the blocks its rules lowered, so the text reads in order
    t.blocks[:] = [x for b in fwd.blocks for x in (starts[b], *created[b])]
    for b in fwd.blocks:
        starts[b].preds = [Edge(ends[e.src], e.key) for e in b.preds]
        term, end = b.term, ends[b]
        if isinstance(term, Jmp):
            end.term = Jmp(starts[term.target])
        elif isinstance(term, Cond):
            end.term = Cond(primal[term.selector], [(k, starts[x]) for k, x in term.cases])
    for phi, p, tp in phi_pairs:
        p.inputs = [primal[v] for v in phi.inputs]
        if tp is not None:
            tp.inputs = [_or_zeros(tangent.get(v), v, zeros) for v in phi.inputs]
    for r, nr in regions.items():
        _place_region(nr, r, starts, ends, primal)
    ret = fwd.return_block
    t.current = ends[ret]
    assert isinstance(ret.term, Return)
    outs = [primal[v] for v in ret.term.values]
    touts = [_or_zeros(tangent.get(v), v, zeros) for v in ret.term.values]
    program = t.finish(params + tparams, outs + touts)
    return verify(run_passes(program, JVP_PIPELINE))


def _copy_node(t: Trace, n: Node, primal: dict[Value, Value], tangent: dict[Value, Any],
               active: set[Value] | None) -> None:
    """Emit node n into the JVP program at the insertion point, then its JVP rule's nodes
    (which carry n's source location)."""
    if n.op == "const":
        primal[n.outputs[0]] = t.const(n.params["value"])
        return
    t.loc_override = n.loc
    try:
        _emit_with_tangent(t, n, primal, tangent, active)
    finally:
        t.loc_override = None


def _emit_with_tangent(t: Trace, n: Node, primal: dict[Value, Value],
                       tangent: dict[Value, Any], active: set[Value] | None) -> None:
    prim = PRIMITIVES[n.op]
    ins = [t.tracer(primal[v]) for v in n.inputs]
    ts = [tangent.get(v) for v in n.inputs]
    if prim.jvp_gives_primal and any(x is not None for x in ts):
        if active is not None and n.op in _UNITS and any(v in active for v in n.inputs):
            owner = n.params["of" if n.op == "call" else "rule"]
            outs, tans = owner.unit(ts, ins, [v in active for v in n.inputs])
        else:
            outs, tans = prim.jvp(ts, ins, None, **n.params)
        for o, new_out, tan in zip(n.outputs, outs, tans):
            primal[o] = t.value_of(new_out)  # a tracer, or a constant (zeros)
            if tan is not None and o.type.is_float:
                tangent[o] = tan
        return
    emitted = t.emit(prim, ins, n.params, None)
    outs = emitted if prim.multi_output else [emitted]
    for o, new_out in zip(n.outputs, outs):
        primal[o] = new_out.value
    if all(x is None for x in ts):
        return
    if prim.jvp is None:
        if prim.nondiff:
            return
        raise ArgumentTypeError(
            f"forward mode (jvp) cannot go through {n.op} {n.params.get('rule', '')} "
            f"traced at {n.loc}: it has a reverse-mode rule only; give the function a "
            "cg.custom_jvp rule instead, or use cg.vjp/cg.grad")
    tans = prim.jvp(ts, ins, emitted, **n.params)
    for o, new_out, tan in zip(n.outputs, outs, tans if prim.multi_output else [tans]):
        if tan is None or not o.type.is_float:
            continue
        if tan.value.type != new_out.value.type:
            raise VerifyError(f"the JVP rule of {n.op} (traced at {n.loc}) returned a "
                              f"{tan.value.type} tangent for a {new_out.value.type} output")
        tangent[o] = tan
