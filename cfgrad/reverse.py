"""The reverse-graph builder: forward Program → mirrored adjoint Program, in the same IR.

The builder walks the forward program's region structure backwards:

* a straight-line block becomes VJP nodes in reverse node order; a value used k times
  receives the sum of its k contributions;
* an `if` region becomes a `Cond` on the logged decision (`LogPop`) whose Proj edges lead
  to the reverses of the cases; each merge Phi routes its cotangent to the input of the
  edge that was taken, and the reverse of the branching block begins with Phis that merge
  the cotangents coming back from the cases (the gradient merge);
* a loop becomes a loop that pops the trip count (`TripPop`), counts down, asks the loop's
  checkpoint strategy for iteration t's values (`LoopState`) and runs the reversed body.
  Its Phis carry the carry's cotangents and one accumulator per outer value the body
  reads (closures), which is how gradients reach values of enclosing scopes.

Cotangents are a map from forward values to adjoint values; a missing entry is a symbolic
zero, never a materialized array. Phi cotangents are popped all at once before any is
routed, so reversing a block's Phis is one simultaneous accumulating assignment, and the
reversed body starts from an empty map every iteration.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any

import numpy as np

from .errors import VerifyError
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
    RegionIndex,
    TensorType,
    Value,
    key_text,
    region_start,
)
from .passes import ADJOINT_PIPELINE, run_passes
from .primitives import PRIMITIVES
from .trace import Trace
from .trace_context import LOWERING_LOCK
from .verify import verify

Item = tuple[str, Any]  # ("block", Block) | ("if", IfRegion) | ("loop", LoopRegion)


def structure(start: Block, stop: Block | None, regions: dict[Block, Region]) -> list[Item]:
    """The forward program between `start` and `stop` as a sequence of items."""
    items: list[Item] = []
    b: Block | None = start
    while b is not None and b is not stop:
        items.append(("block", b))
        r = regions.get(b)
        if isinstance(r, IfRegion):
            items.append(("if", r))
            b = r.merge
        elif isinstance(r, LoopRegion):
            items.append(("loop", r))
            b = r.exit
        elif isinstance(b.term, Jmp):
            b = b.term.target
        else:
            b = None
    return items


class ReverseBuilder:
    def __init__(self, fwd: Program, wrt: frozenset[int] | None = None):
        self.fwd = fwd
        self.active = active_values(fwd, wrt)
        # every node names the forward node or region it reverses (`loc_override`); the
        # few the builder adds on its own (cotangents of an output returned twice) the
        # forward function's def line
        self.t = Trace(f"{fwd.name}.adjoint", check_scopes=False, home=fwd.loc, derived=True)
        self.t.entry.mirrors = fwd.return_block
        self.t.entry.role = ""
        self.adj: dict[Value, Any] = {}  # forward value -> adjoint tracer
        self.primal_scopes: list[dict[Value, Any]] = [{}]
        self.const_of = {n.outputs[0]: n.params["value"] for b in fwd.blocks for n in b.nodes
                         if n.op == "const"}
        self.starts: dict[Block, Region] = {region_start(r): r for r in fwd.regions}
        self.region_stack: list[Region] = []
        self.free_of = loop_free_values(fwd)

    # -- helpers ---------------------------------------------------------------------
    def primal(self, v: Value) -> Any:
        """The forward value `v` as seen from the current adjoint block."""
        if v in self.const_of:
            return self.t.tracer(self.t.const(self.const_of[v]))
        for scope in reversed(self.primal_scopes):
            if v in scope:
                return scope[v]
        out = self.t.emit_special("Primal", [], {"of": v}, [v.type])[0]
        tr = self.t.tracer(out)
        self.primal_scopes[-1][v] = tr
        return tr

    def accumulate(self, adj: dict[Value, Any], v: Value, ct: Any) -> None:
        if ct is None or v not in self.active:
            return
        prev = adj.get(v)
        adj[v] = ct if prev is None else prev + ct

    def zeros(self, t: TensorType) -> Any:
        return self.t.tracer(self.t.const(np.zeros(t.shape, t.dtype)))

    def value(self, x: Any, t: TensorType) -> Value:
        return (x if x is not None else self.zeros(t)).value

    def new_block(self, region: Region | None, role: str, mirrors: Block | None) -> Block:
        b = self.t.new_block(region, role)
        b.mirrors = mirrors
        return b

    def parent(self) -> Region | None:
        return self.region_stack[-1] if self.region_stack else None

    # -- the walk ----------------------------------------------------------------------
    def build(self) -> Program:
        fwd = self.fwd
        params = [Value(v.type, f"ct{i}" if len(fwd.outputs) > 1 else "ct")
                  for i, v in enumerate(fwd.outputs)]
        for v, p in zip(fwd.outputs, params):
            self.accumulate(self.adj, v, self.t.tracer(p))
        self.reverse_items(structure(fwd.blocks[0], None, self.starts))
        outs = [self.value(self.adj.get(p), p.type) for p in fwd.params]
        program = self.t.finish(params, outs)
        program.forward = fwd
        return verify(run_passes(program, ADJOINT_PIPELINE))

    def reverse_items(self, items: list[Item]) -> None:
        for kind, obj in reversed(items):
            if kind == "block":
                self.reverse_block(obj)
            elif kind == "if":
                self.reverse_if(obj)
            else:
                self.reverse_loop(obj)

    def reverse_block(self, b: Block) -> None:
        if self.t.current.mirrors is None:
            self.t.current.mirrors = b
        for n in reversed(b.nodes):
            self.reverse_node(n)

    def reverse_node(self, n: Node) -> None:
        out_cts = [self.adj.pop(o, None) for o in n.outputs]
        prim = PRIMITIVES[n.op]
        if prim.vjp is None or all(c is None for c in out_cts):
            return
        if not any(v in self.active for v in n.inputs):
            return
        saved = self.t.loc_override, self.t.origin
        self.t.loc_override, self.t.origin = n.loc, n.op
        primals = [self.primal(v) for v in n.inputs]
        if prim.multi_output:
            cts = prim.vjp(out_cts, primals, [self.primal(o) for o in n.outputs], **n.params)
        else:
            cts = prim.vjp(out_cts[0], primals, self.primal(n.outputs[0]), **n.params)
        for v, c in zip(n.inputs, cts):
            if c is not None and v in self.active and c.value.type != v.type:
                raise VerifyError(f"the VJP rule of {n.op} (traced at {n.loc}) returned a "
                                  f"{c.value.type} cotangent for a {v.type} input")
            self.accumulate(self.adj, v, c)
        self.t.loc_override, self.t.origin = saved

    def reverse_if(self, r: IfRegion) -> None:
        t = self.t
        saved = t.loc_override
        # the logged decision and the cotangents the merge's Phis route into the cases (a
        # case that only passes a value on has no node of its own) point at the if
        t.loc_override = r.loc
        phi_cts = [self.adj.pop(phi.out, None) for phi in r.merge.phis]
        keys = r.keys
        selector_type = r.branch.term.selector.type
        region = IfRegion(r.id, self.parent(), r.loc, kind=r.kind)
        t.regions.append(region)
        sel = t.emit_special("LogPop", [], {"region": r}, [selector_type])[0]
        branch = t.current
        region.branch = branch
        outer = self.adj
        results = []
        self.region_stack.append(region)
        for k, key in enumerate(keys):
            entry = self.new_block(region, f"case {key_text(key)}", r.case_exits[k])
            entry.preds = [Edge(branch, key)]
            region.cases.append(entry)
            t.current = entry
            adj = dict(outer)
            for phi, ct in zip(r.merge.phis, phi_cts):
                self.accumulate(adj, phi.inputs[k], ct)
            self.adj = adj
            self.primal_scopes.append({})
            self.reverse_items(structure(r.cases[k], r.merge, self.starts))
            self.primal_scopes.pop()
            region.case_exits.append(t.current)
            results.append(self.adj)
        self.region_stack.pop()
        branch.term = Cond(sel, list(zip(keys, region.cases)))
        join = self.new_block(region, "merge", r.branch)
        region.merge = join
        for exit_block in region.case_exits:
            exit_block.term = Jmp(join)
            join.preds.append(Edge(exit_block))
        merged: dict[Value, Any] = {}
        for v in {v: None for res in results for v in res}:
            vals = [res.get(v) for res in results]
            if all(x is vals[0] for x in vals):
                merged[v] = vals[0]
                continue
            inputs = []
            for exit_block, x in zip(region.case_exits, vals):
                t.current = exit_block
                inputs.append(self.value(x, v.type))
            phi = Phi(Value(v.type), inputs)
            join.phis.append(phi)
            merged[v] = t.tracer(phi.out)
        self.adj = merged
        t.current = join
        t.loc_override = saved

    def reverse_loop(self, r: LoopRegion) -> None:
        t = self.t
        saved = t.loc_override
        t.loc_override = r.loc  # the loop's own bookkeeping nodes point at the loop
        header = r.header
        carry_cts = [self.adj.pop(p.out, None) for p in r.exit.phis]
        float_carries = [j for j, p in enumerate(header.phis) if p.out.type.is_float]
        closures = self.closures(r)
        region = LoopRegion(r.id, self.parent(), r.loc, kind="reverse")
        t.regions.append(region)
        trips = t.emit_special("TripPop", [], {"loop": r}, [TensorType((), np.dtype(np.int64))])[0]
        pre = t.current
        region.preheader = pre
        head = self.new_block(region, "header", r.header)
        region.header = head
        head.preds = [Edge(pre)]
        pre.term = Jmp(head)
        counter = Phi(Value(trips.type), [trips])
        carry_phis = [Phi(Value(header.phis[j].out.type),
                          [self.value(carry_cts[j], header.phis[j].out.type)])
                      for j in float_carries]
        acc_phis = [Phi(Value(v.type), [self.value(self.adj.get(v), v.type)]) for v in closures]
        head.phis = [counter] + carry_phis + acc_phis
        t.current = head
        go = t.tracer(counter.out) > 0
        body = self.new_block(region, "body", r.latch)
        region.body = body
        body.preds = [Edge(head, True)]
        t.current = body
        it = t.tracer(counter.out) - 1
        t.emit_special("LoopState", [it.value], {"loop": r}, [])
        outer = self.adj
        adj: dict[Value, Any] = {v: t.tracer(p.out) for v, p in zip(closures, acc_phis)}
        for j, phi in zip(float_carries, carry_phis):
            self.accumulate(adj, header.phis[j].inputs[1], t.tracer(phi.out))
        self.adj = adj
        self.primal_scopes.append({})
        self.region_stack.append(region)
        self.reverse_items(structure(r.body, r.header, self.starts))
        self.region_stack.pop()
        self.primal_scopes.pop()
        new_carry = [self.adj.pop(header.phis[j].out, None) for j in float_carries]
        leftover = set(self.adj) - set(closures)
        assert not leftover, f"cotangents escaped the reversed body of {r.id}: {leftover}"
        t.loc_override = r.loc
        latch = t.current
        region.latch = latch
        counter.inputs.append(it.value)
        for phi, j, ct in zip(carry_phis, float_carries, new_carry):
            phi.inputs.append(self.value(ct, header.phis[j].out.type))
        for phi, v in zip(acc_phis, closures):
            phi.inputs.append(self.value(self.adj.get(v), v.type))
        latch.term = Jmp(head)
        head.preds.append(Edge(latch))
        exit_block = self.new_block(region, "exit", r.preheader)
        region.exit = exit_block
        exit_block.preds = [Edge(head, False)]
        head.term = Cond(go.value, [(True, body), (False, exit_block)])
        t.current = exit_block
        self.adj = outer
        for v, phi in zip(closures, acc_phis):
            self.adj[v] = t.tracer(phi.out)
        for j, phi in zip(float_carries, carry_phis):
            self.accumulate(self.adj, header.phis[j].inputs[0], t.tracer(phi.out))
        t.loc_override = saved

    def closures(self, r: LoopRegion) -> list[Value]:
        """Float values defined outside loop `r` that its body reads: their cotangents
        accumulate over the iterations in reverse-loop Phis."""
        return [v for v in self.free_of[r] if v in self.active]


def loop_free_values(program: Program) -> dict[LoopRegion, list[Value]]:
    """For each loop, the values defined outside it that its body and latch Phi inputs
    read, in the order of their first use. The header's condition is not differentiated:
    its reads do not count, and values it computes count as outside the body.

    One bottom-up pass over the region tree: a region's free values are those its own
    blocks read plus those of the regions directly inside it, less those defined inside
    it. A value is carried up only as far as it stays free, so the pass costs about the
    program's size, where collecting every loop's blocks would cost size × depth."""
    regions = RegionIndex.of(program)
    nest, own, home = regions.nest, regions.own, regions.home
    index = {b: i for i, b in enumerate(program.blocks)}

    def read(b: Block, uses: dict[Value, tuple[int, int]]) -> None:
        inputs = [v for phi in b.phis for v in phi.inputs] + [v for n in b.nodes
                                                               for v in n.inputs]
        for pos, v in enumerate(inputs):
            key = (index[b], pos)
            if uses.get(v, key) >= key:
                uses[v] = key

    free: dict[Region, dict[Value, tuple[int, int]]] = {}
    result: dict[LoopRegion, list[Value]] = {}
    for r in reversed(nest.preorder):  # inner regions first
        header = r.header if isinstance(r, LoopRegion) else None
        uses: dict[Value, tuple[int, int]] = {}
        for b in own.get(r, []):
            if b is not header:
                read(b, uses)
        for inner in nest.children.get(r, []):
            for v, key in free.pop(inner).items():
                if uses.get(v, key) >= key:
                    uses[v] = key
        if header is not None:
            condition = {o for n in header.nodes for o in n.outputs}
            body = sorted((v for v in uses if v in condition or not nest.encloses(
                r, home.get(v))), key=uses.__getitem__)
            latch = [phi.inputs[1] for phi in header.phis]
            result[r] = body + [v for v in dict.fromkeys(latch) if v not in uses and (
                v in condition or not nest.encloses(r, home.get(v)))]
            read(header, uses)
        free[r] = {v: key for v, key in uses.items() if not nest.encloses(r, home.get(v))}
    return result


def active_values(program: Program, wrt: frozenset[int] | None) -> set[Value]:
    """Activity analysis: the float values that depend on the parameters being
    differentiated (all float parameters when `wrt` is None). Only they can carry a
    nonzero cotangent, so the builder emits nothing for the rest — no gradient work for
    inputs nobody asked about, nor for constants and integer bookkeeping."""
    active = {p for i, p in enumerate(program.params)
              if p.type.is_float and (wrt is None or i in wrt)}
    changed = True
    while changed:  # loops feed Phis from later blocks: iterate to the fixpoint
        changed = False
        for b in program.blocks:
            for phi in b.phis:
                if phi.out not in active and phi.out.type.is_float and any(
                        v in active for v in phi.inputs):
                    active.add(phi.out)
                    changed = True
            for n in b.nodes:
                outs = [o for o in n.outputs if o not in active and o.type.is_float]
                prim = PRIMITIVES.get(n.op)
                if outs and prim is not None and prim.vjp is not None and any(
                        v in active for v in n.inputs):
                    active.update(outs)
                    changed = True
    return active


# The one adjoint cache: forward Program -> {wrt: adjoint}. Both levels are weak. The
# outer key dies with its Program; the inner values must be weak too, because an adjoint
# refers to its forward Program (`adjoint.forward`), and a value that refers to its own
# weak key keeps that key, and so the entry, alive for ever. An adjoint therefore lives
# as long as someone uses it: api.py's lowering cache holds the compiled adjoints of
# every cached signature, so grad and vjp build each one once.
_ADJOINTS: weakref.WeakKeyDictionary[Program, weakref.WeakValueDictionary[Any, Program]] = \
    weakref.WeakKeyDictionary()


def adjoint(program: Program, wrt: Iterable[int] | None = None) -> Program:
    """The mirrored adjoint of `program`: its parameters are the output cotangents, its
    results the cotangents of the parameters whose indices are in `wrt` (all when None;
    zeros for the others and wherever no gradient flows). Built under the lowering lock
    and cached per program and `wrt`, so every caller gets the same Program."""
    key = None if wrt is None else frozenset(wrt)
    cached = _ADJOINTS.get(program)
    result = cached.get(key) if cached is not None else None
    if result is None:
        with LOWERING_LOCK:
            cached = _ADJOINTS.setdefault(program, weakref.WeakValueDictionary())
            result = cached.get(key)
            if result is None:
                result = cached[key] = ReverseBuilder(program, key).build()
    return result
