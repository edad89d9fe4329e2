"""The JVP transform: forward Program → a Program that also carries tangents.

Every block is copied with, beside each primitive node, the nodes of its JVP rule; every
float Phi gets a tangent Phi; terminators and regions are kept, so the tangent program
branches and loops exactly like the original (the branch taken at run time is the one
differentiated). Zero tangents stay symbolic except where a Phi needs a concrete input.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import ArgumentTypeError, VerifyError
from .ir import Block, Cond, Edge, IfRegion, Jmp, LoopRegion, Phi, Program, Region, Return, Value
from .primitives import PRIMITIVES
from .trace import Trace
from .verify import verify


def _float(v: Value) -> bool:
    return v.type.dtype.kind == "f"


def _or_zeros(tangent: Any, v: Value, zeros: Any) -> Value:
    return (tangent if tangent is not None else zeros(v)).value


def build_jvp(fwd: Program) -> Program:
    """Parameters: the primals, then one tangent per float primal. Results: the outputs,
    then one tangent per output (zeros for non-float outputs)."""
    t = Trace(f"{fwd.name}.jvp", check_scopes=False)
    blocks: dict[Block, Block] = {fwd.blocks[0]: t.entry}
    t.entry.role = fwd.blocks[0].role
    for b in fwd.blocks[1:]:
        blocks[b] = t.new_block(None, b.role)
    primal: dict[Value, Value] = {}
    tangent: dict[Value, Any] = {}
    params = [Value(v.type, v.hint) for v in fwd.params]
    tparams = [Value(v.type, f"d{v.hint or i}") for i, v in enumerate(fwd.params) if _float(v)]
    primal.update(zip(fwd.params, params))
    tangent.update(zip([v for v in fwd.params if _float(v)], (t.tracer(p) for p in tparams)))

    def zeros(v: Value) -> Any:
        return t.tracer(t.const(np.zeros(v.type.shape, v.type.dtype)))

    phi_pairs: list[tuple[Phi, Phi, Phi | None]] = []
    for b in fwd.blocks:
        nb = blocks[b]
        t.current = nb
        for phi in b.phis:
            p = Phi(Value(phi.out.type), [])
            primal[phi.out] = p.out
            nb.phis.append(p)
            tp = None
            if _float(phi.out):
                tp = Phi(Value(phi.out.type), [])
                nb.phis.append(tp)
                tangent[phi.out] = t.tracer(tp.out)
            phi_pairs.append((phi, p, tp))
        for n in b.nodes:
            if n.op == "const":
                primal[n.outputs[0]] = t.const(n.params["value"])
                continue
            prim = PRIMITIVES[n.op]
            t.loc_override = n.loc
            ins = [t.tracer(primal[v]) for v in n.inputs]
            emitted = t.emit(prim, ins, n.params, None)
            outs = emitted if prim.multi_output else [emitted]
            for o, new_out in zip(n.outputs, outs):
                primal[o] = new_out.value
            ts = [tangent.get(v) for v in n.inputs]
            if all(x is None for x in ts):
                continue
            if prim.jvp is None:
                if prim.nondiff:
                    continue
                raise ArgumentTypeError(
                    f"forward mode (jvp) cannot go through {n.op} {n.params.get('rule', '')} "
                    f"traced at {n.loc}: it has a reverse-mode rule only; give the function a "
                    "cg.custom_jvp rule instead, or use cg.vjp/cg.grad")
            tans = prim.jvp(ts, ins, emitted, **n.params)
            for o, new_out, tan in zip(n.outputs, outs, tans if prim.multi_output else [tans]):
                if tan is None or not _float(o):
                    continue
                if tan.value.type != new_out.value.type:
                    raise VerifyError(f"the JVP rule of {n.op} (traced at {n.loc}) returned a "
                                      f"{tan.value.type} tangent for a {new_out.value.type} "
                                      "output")
                tangent[o] = tan
            t.loc_override = None
    for b in fwd.blocks:
        nb = blocks[b]
        nb.preds = [Edge(blocks[e.src], e.key) for e in b.preds]
        term = b.term
        if isinstance(term, Jmp):
            nb.term = Jmp(blocks[term.target])
        elif isinstance(term, Cond):
            nb.term = Cond(primal[term.selector], [(k, blocks[x]) for k, x in term.cases])
    for phi, p, tp in phi_pairs:
        p.inputs = [primal[v] for v in phi.inputs]
        if tp is not None:
            tp.inputs = [_or_zeros(tangent.get(v), v, zeros) for v in phi.inputs]
    regions: dict[Region, Region] = {}
    for r in fwd.regions:
        parent = regions.get(r.parent) if r.parent else None
        if isinstance(r, IfRegion):
            nr: Region = IfRegion(r.id, parent, r.loc, kind=r.kind, branch=blocks[r.branch],
                                  cases=[blocks[c] for c in r.cases],
                                  case_exits=[blocks[c] for c in r.case_exits],
                                  merge=blocks[r.merge])
        else:
            assert isinstance(r, LoopRegion)
            nr = LoopRegion(r.id, parent, r.loc, kind=r.kind, preheader=blocks[r.preheader],
                            header=blocks[r.header], body=blocks[r.body],
                            latch=blocks[r.latch], exit=blocks[r.exit],
                            checkpoint=r.checkpoint, max_iters=r.max_iters,
                            trip_bounds=None if r.trip_bounds is None else tuple(
                                primal[v] for v in r.trip_bounds))
        regions[r] = nr
        t.regions.append(nr)
    for b in fwd.blocks:
        if b.region is not None:
            blocks[b].region = regions[b.region]
    ret = fwd.return_block
    t.current = blocks[ret]
    assert isinstance(ret.term, Return)
    outs = [primal[v] for v in ret.term.values]
    touts = [_or_zeros(tangent.get(v), v, zeros) for v in ret.term.values]
    program = t.finish(params + tparams, outs + touts)
    return verify(program)
