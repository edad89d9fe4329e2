"""The IR verifier: every invariant of docs/ir.md (Verifier invariants), checked on every
Program a builder makes (lowering, the reverse builder, the JVP transform) and on every
parsed one. A violation raises `VerifyError` naming the block and node and showing the
block's text, so a broken pass is caught where it broke the IR, not later as a wrong
gradient."""

from __future__ import annotations

import functools
import inspect
from typing import Any

import numpy as np

from .errors import LoweringError, VerifyError
from .ir import (
    Block,
    Cond,
    IfRegion,
    Jmp,
    LoopRegion,
    Node,
    Program,
    Region,
    RegionNest,
    Return,
    Value,
    defined_values,
    format_param,
    innermost_regions,
    region_head,
    region_join,
    region_start,
)
from .nodespec import KIND_BY_NAME, RUNTIME_NODES, NodeKind
from .primitives import PRIMITIVES, Primitive

#: Every invariant the verifier checks, by the tag its VerifyError messages start with
#: (`[phi-arity] block b3, …`). docs/ir.md describes each one (a test keeps them in step).
INVARIANTS: dict[str, str] = {
    "start-block": "the program has blocks, and the first (the start block) has no "
                   "predecessors",
    "unique-blocks": "no block appears twice in the program's block list",
    "one-terminator": "every block ends in exactly one terminator (Jmp, Cond or Return)",
    "one-return": "exactly one block ends in Return",
    "cond-selector": "a Cond's Proj keys are (T, F) with a bool[] selector, or 0..n-1 with an "
                     "integer scalar selector (switch)",
    "proj-target": "every terminator edge targets a block of the program",
    "edge-both-ends": "every edge is recorded on both ends, exactly once: in the source's "
                      "terminator and in the target's predecessor list",
    "phi-arity": "a Phi has one input per predecessor edge of its block",
    "phi-types": "a Phi's inputs have the Phi's type (branch results and loop carries agree)",
    "known-op": "every node names a primitive of the derivative table (or, in an adjoint "
                "program only, a runtime node)",
    "operand-count": "a primitive node has as many inputs as its implementation takes (`sin` "
                     "one, `add` two, `where` three, …) and exactly the parameters its shape "
                     "rule names (`sum`: axes and keepdims; `sin`, `clip`: none); a runtime "
                     "node has the operands and parameters its nodespec declaration names",
    "operand-types": "a primitive node's inputs have the dtypes lowering gives them: one "
                     "common dtype from the first promoted input on (a float or complex one "
                     "for primitives that compute in floating point)",
    "node-types": "a primitive node has one output, whose declared type is what the "
                  "primitive's shape rule gives for its inputs and parameters; the rule also "
                  "checks the parameters' values (axes in range and distinct, keepdims a "
                  "bool, integer_pow's n an int, shapes tuples of sizes, a dtype or const "
                  "value of an IR dtype), so any parameter the verifier accepts runs; a "
                  "primitive computed by a numpy ufunc takes only input dtypes numpy's type "
                  "resolution accepts, and gives the dtype numpy gives (`bitwise_and` of "
                  "floats, `invert` of f64, `sign` of bool are errors); a runtime node has the "
                  "results its declaration names (`TripPop`: one i64[])",
    "single-definition": "every value is defined once (as a parameter, Phi or node output)",
    "use-dominated": "every use of a value is dominated by its definition (a Phi input by the "
                     "end of the predecessor it comes from, a loop's bounds by the end of its "
                     "preheader)",
    "region-shape": "region ids are unique, and each region's recorded blocks are in the "
                    "program and shaped as recorded: an if's branch Cond leads to its cases "
                    "with its kind's keys, each case reaches the merge through its recorded "
                    "exit and the merge's predecessors are the case exits; a loop's preheader "
                    "jumps to its header, the header has preds (preheader, latch) and ends in "
                    "Cond -> Proj(T) body | Proj(F) exit, the body reaches the latch and the "
                    "latch jumps "
                    "back to the header; a loop's bounds are two integer scalars",
    "cond-region": "every Cond is recorded by a region: an if region's branch or a loop "
                   "region's header",
    "structured": "walking the regions from the start block reaches every block exactly "
                  "once: the only cycles are loops (latch back to header), and control leaves "
                  "a region only through its merge or exit",
    "regions-nest": "regions nest properly: a region that starts inside another ends inside "
                    "it, and each region's parent is the region its branch block / preheader "
                    "lies in",
    "block-region": "a block that names a region lies inside it (or is its merge / exit)",
    "region-closed": "in a forward program, values defined inside a region leave it only "
                     "through the Phis of its merge / exit block, and a loop's exit starts "
                     "with one single-input Phi per header Phi, reading it, in order "
                     "(loop-closed SSA)",
}


class _Checker:
    def __init__(self, program: Program):
        self.p = program
        self.vn, self.bn = program.names()
        self.block_set = set(program.blocks)

    # -- reporting -----------------------------------------------------------------
    def fail(self, invariant: str, block: Block | None, what: str, node: Any = None) -> None:
        assert invariant in INVARIANTS, invariant
        where = f"block {self.bn.get(block, '?')}" if block is not None else "program"
        if node is not None:
            where += f", {self._describe(node)}"
        context = ""
        if block is not None and block in self.block_set:
            lines = self.p.text().splitlines()
            label = self.bn[block] + ":"
            start = next((i for i, ln in enumerate(lines) if ln.startswith(label)), None)
            if start is not None:
                end = start + 1
                while end < len(lines) and lines[end].startswith("  "):
                    end += 1
                context = "\n" + "\n".join("    " + ln for ln in lines[start:end])
        raise VerifyError(f"[{invariant}] {where}: {what}{context}")

    def _describe(self, node: Any) -> str:
        if isinstance(node, Node):
            outs = ", ".join(self.vn.get(o, "?") for o in node.outputs)
            return f"node `{outs + ' = ' if outs else ''}{node.op}`"
        if isinstance(node, Value):
            return f"value {self.vn.get(node, '?')}"
        return str(node)

    # -- checks ----------------------------------------------------------------------
    def run(self) -> None:
        p = self.p
        if not p.blocks:
            self.fail("start-block", None, "the program has no blocks")
        if len(self.block_set) != len(p.blocks):
            twice = next(b for i, b in enumerate(p.blocks) if b in p.blocks[:i])
            self.fail("unique-blocks", twice, f"the block appears at positions "
                      f"{[i for i, b in enumerate(p.blocks) if b is twice]} of the block list")
        if p.blocks[0].preds:
            self.fail("start-block", p.blocks[0], "the start block has predecessors")
        for b in p.blocks:
            self.check_terminator(b)
        returns = [b for b in p.blocks if isinstance(b.term, Return)]
        if len(returns) != 1:
            where = ", ".join(self.bn[b] for b in returns)
            self.fail("one-return", returns[1] if returns else None,
                      f"{len(returns)} blocks end in Return ({where or 'none'}), expected 1")
        for b in p.blocks:
            self.check_edges(b)
        for b in p.blocks:
            self.check_phis(b)
            for n in b.nodes:
                self.check_node(b, n)
        self.check_dominance()
        self.check_regions()

    def check_terminator(self, b: Block) -> None:
        t = b.term
        if t is None:
            self.fail("one-terminator", b, "the block has no terminator")
        if isinstance(t, Cond):
            keys = [k for k, _ in t.cases]
            sel = t.selector.type
            if keys == [True, False] and all(type(k) is bool for k in keys):
                if sel.shape != () or sel.dtype != np.bool_:
                    self.fail("cond-selector", b, f"a two-way Cond needs a bool[] selector, got "
                                                  f"{sel}")
            elif keys == list(range(len(keys))) and keys and all(type(k) is int for k in keys):
                if sel.shape != () or sel.dtype.kind not in "iu":
                    self.fail("cond-selector", b, f"a switch Cond needs an integer scalar "
                                                  f"selector, got {sel}")
            else:
                self.fail("cond-selector", b, f"Cond Proj keys {keys} are neither (T, F) nor "
                                              "0..n-1")

    def check_edges(self, b: Block) -> None:
        for key, target in b.term.successors():
            if target not in self.block_set:
                self.fail("proj-target", b, "an edge targets a block outside the program")
            count = sum(1 for e in target.preds if e.src is b and e.key == key
                        and type(e.key) is type(key))
            if count != 1:
                self.fail("edge-both-ends", target,
                          f"the edge from {self.bn[b]} (key {key!r}) is recorded {count} times "
                          "among the target's predecessors, expected once")
        for e in b.preds:
            if e.src not in self.block_set:
                self.fail("edge-both-ends", b, "a predecessor edge comes from a block outside "
                                               "the program")
            if not any(k == e.key and type(k) is type(e.key) and t is b
                       for k, t in e.src.term.successors()):
                self.fail("edge-both-ends", b, f"predecessor edge {e.label(self.bn)} has no "
                                               "matching terminator edge in its source")

    def check_phis(self, b: Block) -> None:
        for phi in b.phis:
            if len(phi.inputs) != len(b.preds):
                self.fail("phi-arity", b, f"the Phi has {len(phi.inputs)} inputs but the block "
                                          f"has {len(b.preds)} predecessor edges", phi.out)
            for v in phi.inputs:
                if v.type != phi.out.type:
                    self.fail("phi-types", b, f"a Phi input of type {v.type} merges into "
                                              f"{phi.out.type}", phi.out)

    def check_node(self, b: Block, n: Node) -> None:
        if n.op in RUNTIME_NODES:
            self.check_declared(b, n, KIND_BY_NAME[n.op])
            return
        prim = PRIMITIVES.get(n.op)
        if prim is None:
            self.fail("known-op", b, f"unknown operation {n.op!r}", n)
        self.check_operands(b, n, prim)
        if len(n.outputs) != 1 and not prim.multi_output:
            self.fail("node-types", b, "a primitive node has exactly one output", n)
        try:  # the rule checks the parameters' values (an axis in range, n an int, …)
            expected = prim.abstract([v.type for v in n.inputs], **n.params)
        except LoweringError as e:  # the rule's own message names the parameter
            self.fail("node-types", b, f"{e}", n)
        except Exception as e:  # noqa: BLE001 - any failure of the rule is a typing error
            self.fail("node-types", b, f"its inputs and parameters {_shown(n.params)} do not "
                                       f"fit {n.op}'s shape rule: {type(e).__name__}: {e}", n)
        declared = [o.type for o in n.outputs]
        if (list(expected) if prim.multi_output else [expected]) != declared:
            shown = ", ".join(map(str, declared))
            self.fail("node-types", b, f"declared {shown}, but {n.op} of these inputs gives "
                                       f"{expected}", n)

    def check_declared(self, b: Block, n: Node, kind: NodeKind) -> None:
        """A runtime node against its nodespec declaration: only in an adjoint program, with
        the declared parameters, operands and results (the interpreter's generated code
        reads exactly these)."""
        if self.p.forward is None:
            self.fail("known-op", b, f"{n.op} is a runtime node: only adjoint programs, which "
                                     "read a forward run, hold one", n)
        params = [s.name for s in kind.params]
        if sorted(n.params) != sorted(params):
            self.fail("operand-count", b, f"{n.op} takes parameters {', '.join(params)}, got "
                                          f"{', '.join(sorted(n.params)) or 'none'}", n)
        for what, got, slots, tag in (("input", n.inputs, kind.operands, "operand-count"),
                                      ("output", n.outputs, kind.results, "node-types")):
            if len(got) != len(slots):
                self.fail(tag, b, f"{n.op} has {len(slots)} {what}"
                                  f"{'' if len(slots) == 1 else 's'}, got {len(got)}", n)
        for o, slot in zip(n.outputs, kind.results):
            if slot.form != "type" and str(o.type) != slot.form:
                self.fail("node-types", b, f"{n.op}'s {slot.name} is {slot.form}, declared "
                                           f"{o.type}", n)

    def check_operands(self, b: Block, n: Node, prim: Primitive) -> None:
        """What the interpreter's call `impl(*inputs, **params)` and the derivative rules'
        `vjp(ct, xs, out, **params)` need, checked before any run: the parameter names
        (those the shape rule's signature names, every one of them), the operand count, and
        the dtypes lowering's promotion gives the operands (numpy would otherwise promote
        silently, or cast a bool `sin` to f16, and the result would not have the declared
        type)."""
        problem = prim.parameter_problem(n.params)
        if problem is not None:
            self.fail("operand-count", b, problem, n)
        operands, variadic = _operands(n.op)
        least = sum(1 for name in operands if name not in n.params)
        most = None if variadic else least
        count = len(n.inputs)
        if count < least or (most is not None and count > most):
            wanted = (f"{least}" if most == least else f"at least {least}" if most is None
                      else f"{least} to {most}")
            plural = "" if most == least == 1 else "s"
            self.fail("operand-count", b, f"{n.op} takes {wanted} input{plural}, got {count}", n)
        dtypes = [v.type.dtype for v in n.inputs[prim.promote_from:]]
        if prim.promote == "none" or not dtypes:
            return
        if len(set(dtypes)) > 1:
            shown = ", ".join(str(v.type) for v in n.inputs[prim.promote_from:])
            self.fail("operand-types", b, f"{n.op} of inputs typed {shown}: its inputs share one "
                                          "dtype (insert an astype node to convert one)", n)
        if prim.promote == "float" and dtypes[0].kind in "biu":
            self.fail("operand-types", b, f"{n.op} computes in floating point but its input is "
                                          f"{n.inputs[0].type} (convert it with astype first)", n)

    # -- dominance ---------------------------------------------------------------------
    def dominators(self) -> dict[Block, Block | None]:
        """Immediate dominators by Cooper, Harvey and Kennedy's iteration over reverse
        postorder (two passes on the structured programs lowering builds)."""
        blocks = self.p.blocks
        order: list[Block] = []
        seen: set[Block] = {blocks[0]}
        stack = [(blocks[0], iter([t for _, t in blocks[0].term.successors()]))]
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                order.append(node)
                stack.pop()
            elif nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, iter([t for _, t in nxt.term.successors()])))
        rpo = list(reversed(order))
        index = {b: i for i, b in enumerate(rpo)}
        idom: dict[Block, Block | None] = {blocks[0]: blocks[0]}

        def intersect(a: Block, c: Block) -> Block:
            while a is not c:
                while index[a] > index[c]:
                    a = idom[a]
                while index[c] > index[a]:
                    c = idom[c]
            return a

        changed = True
        while changed:
            changed = False
            for b in rpo[1:]:
                preds = [e.src for e in b.preds if e.src in idom and e.src in index]
                if not preds:
                    continue
                new = preds[0]
                for q in preds[1:]:
                    new = intersect(q, new)
                if idom.get(b) is not new:
                    idom[b] = new
                    changed = True
        idom[blocks[0]] = None
        return idom

    def check_dominance(self) -> None:
        idom = self.dominators()
        # the dominator tree numbered in preorder: `a` dominates `c` when c's number falls
        # in a's subtree, a constant-time test at any depth
        children: dict[Block, list[Block]] = {}
        for b, d in idom.items():
            if d is not None:
                children.setdefault(d, []).append(b)
        first: dict[Block, int] = {}
        last: dict[Block, int] = {}
        stack: list[tuple[Block, bool]] = [(self.p.blocks[0], False)]
        while stack:
            b, done = stack.pop()
            if done:
                last[b] = len(first) - 1
                continue
            first[b] = len(first)
            stack.append((b, True))
            stack.extend((c, False) for c in children.get(b, []))
        defs: dict[Value, tuple[Block | None, int]] = {v: (None, -1) for v in self.p.params}

        def define(v: Value, b: Block, pos: int, what: Any) -> None:
            if v in defs:
                self.fail("single-definition", b, "the value is defined twice", what)
            defs[v] = (b, pos)

        for b in self.p.blocks:
            for phi in b.phis:
                define(phi.out, b, 0, phi.out)
            for i, n in enumerate(b.nodes):
                for o in n.outputs:
                    define(o, b, i + 1, n)

        def check_use(v: Value, b: Block, pos: int, what: Any, user: Block) -> None:
            """`v` is read at position `pos` of block `b` by `what`, which sits in `user`
            (a Phi reads its input at the end of the predecessor the input comes from)."""
            if v not in defs:
                self.fail("use-dominated", user, "uses a value that is never defined", what)
            db, dpos = defs[v]
            if db is None:
                return
            if b not in first:
                return  # unreachable block: nothing runs there (`structured` rejects it)
            if db is b and dpos >= pos:
                self.fail("use-dominated", user, f"uses {self.vn.get(v, '?')} before its "
                                                 "definition further down the block", what)
            if db is not b and not (db in first and first[db] <= first[b] <= last[db]):
                edge = f" on the edge from {self.bn[b]}" if b is not user else ""
                self.fail("use-dominated", user, f"uses {self.vn.get(v, '?')}{edge} (defined in "
                                                 f"{self.bn[db]}) where its definition does not "
                                                 "dominate", what)

        for b in self.p.blocks:
            for phi in b.phis:
                for e, v in zip(b.preds, phi.inputs):
                    check_use(v, e.src, len(e.src.nodes) + 1, phi.out, b)
            for i, n in enumerate(b.nodes):
                for v in n.inputs:
                    check_use(v, b, i + 1, n, b)
            t = b.term
            used = [t.selector] if isinstance(t, Cond) else (t.values if isinstance(t, Return)
                                                              else [])
            for v in used:
                check_use(v, b, len(b.nodes) + 1, "the terminator", b)
        for r in self.p.loops():  # the interpreter reads the bounds as it enters the loop
            pre = r.preheader
            for v in r.trip_bounds or ():
                if pre in self.block_set:
                    check_use(v, pre, len(pre.nodes) + 1, f"the bounds of {r.id}", pre)

    # -- regions ---------------------------------------------------------------------------
    def check_regions(self) -> None:
        ids = [r.id for r in self.p.regions]
        if len(set(ids)) != len(ids):
            self.fail("region-shape", None, f"region ids repeat: {', '.join(ids)}")
        for r in self.p.regions:
            if isinstance(r, IfRegion):
                self.check_if(r)
            elif isinstance(r, LoopRegion):
                self.check_loop(r)
        owners = innermost_regions(self.p, self.fail)
        for r in self.p.regions:
            expected = owners[region_start(r)]
            if r.parent is not expected:
                self.fail("regions-nest", region_head(r), f"region {r.id} records parent "
                          f"{r.parent.id if r.parent else None}, but its smallest enclosing "
                          f"region is {expected.id if expected else None}")
        nest = RegionNest(self.p.regions)
        regions = set(self.p.regions)
        for b in self.p.blocks:
            r = b.region
            if r is None:
                continue
            if r not in regions:
                self.fail("block-region", b, f"the block names region {r.id}, which is not "
                                             "among the program's regions")
            if not nest.encloses(r, owners[b]) and b is not region_join(r):
                self.fail("block-region", b, f"the block names region {r.id} but lies outside "
                                             "it")
        if self.p.forward is None:  # adjoints read reverse-loop accumulators directly
            self.check_closed(owners, nest)

    def check_closed(self, owners: dict[Block, Region | None], nest: RegionNest) -> None:
        """In a forward program, values leave a region only through its join block's Phis,
        and a loop's exit Phis mirror its header Phis one to one (loop-closed SSA): the
        reverse builder finds a region's results there. One pass over the uses: a use is
        inside the region of its definition, or a Phi of that region's join."""
        for r in self.p.loops():
            join = r.exit
            if [phi.inputs for phi in join.phis] != [[p.out] for p in r.header.phis]:
                self.fail("region-closed", join, f"the exit of {r.id} must start with one "
                          f"single-input Phi per header Phi, in order ({len(r.header.phis)} "
                          f"carries, {len(join.phis)} exit Phis)")
        region_of: dict[Value, Region | None] = {}
        for b in self.p.blocks:
            region_of.update((v, owners[b]) for v in defined_values([b]))
        joined = {region_join(r): r for r in self.p.regions}
        for b in self.p.blocks:
            here = owners[b]
            t = b.term
            uses = [(v, n, False) for n in b.nodes for v in n.inputs]
            uses += [(v, "the terminator", False) for v in (
                [t.selector] if isinstance(t, Cond) else t.values if isinstance(t, Return)
                else [])]
            uses += [(v, phi.out, True) for phi in b.phis for v in phi.inputs]
            for v, user, by_phi in uses:
                d = region_of.get(v)
                if nest.encloses(d, here) or (by_phi and joined.get(b) is d
                                              and nest.encloses(d.parent, here)):
                    continue
                while d.parent is not None and not nest.encloses(d.parent, here):
                    d = d.parent  # name the outermost region the value leaves
                self.fail("region-closed", b, f"uses {self.vn[v]}, defined inside {d.id}, "
                                              f"outside it: results leave {d.id} through "
                                              f"the Phis of {self.bn[region_join(d)]}", user)

    def recorded_blocks(self, r: Region, blocks: list[Block | None]) -> None:
        if any(b not in self.block_set for b in blocks):
            self.fail("region-shape", None, f"{r.id} names a block that is not in the program "
                                            f"({self.bn[region_head(r)]} is its first)")

    def check_if(self, r: IfRegion) -> None:
        self.recorded_blocks(r, [r.branch, r.merge, *r.cases, *r.case_exits])
        t = r.branch.term
        if not isinstance(t, Cond) or [b for _, b in t.cases] != r.cases:
            self.fail("region-shape", r.branch, f"{r.id}: the branch block's Cond does not lead "
                                                "to the recorded cases")
        if [k for k, _ in t.cases] != r.keys:
            self.fail("region-shape", r.branch, f"{r.id}: a {r.kind} region's Cond needs keys "
                                                f"{r.keys}")
        if [e.src for e in r.merge.preds] != r.case_exits or len(r.case_exits) != len(r.cases):
            self.fail("region-shape", r.merge, f"{r.id}: the merge block's predecessors are not "
                                               "the recorded case exits, one per case")

    def check_loop(self, r: LoopRegion) -> None:
        self.recorded_blocks(r, [r.preheader, r.header, r.body, r.latch, r.exit])
        h = r.header
        if not isinstance(r.preheader.term, Jmp) or r.preheader.term.target is not h:
            self.fail("region-shape", r.preheader, f"{r.id}: the preheader must jump to the "
                                                   "header")
        if [e.src for e in h.preds] != [r.preheader, r.latch]:
            self.fail("region-shape", h, f"{r.id}: the header's predecessors must be "
                                         "(preheader, latch)")
        t = h.term
        if not isinstance(t, Cond) or t.cases != [(True, r.body), (False, r.exit)]:
            self.fail("region-shape", h, f"{r.id}: the header must end in Cond -> Proj(T) body "
                                         "| Proj(F) exit")
        if not isinstance(r.latch.term, Jmp) or r.latch.term.target is not h:
            self.fail("region-shape", r.latch, f"{r.id}: the latch must jump back to the header")
        for v in r.trip_bounds or ():
            if v.type.shape != () or v.type.dtype.kind not in "iu":
                self.fail("region-shape", r.preheader, f"{r.id}: a loop's bounds are integer "
                                                       f"scalars, got {v.type}")


@functools.cache
def _operands(op: str) -> tuple[tuple[str, ...], bool]:
    """The positional parameters of a primitive's implementation that its inputs fill, and
    whether it takes any number more (`*xs`). The interpreter calls `impl(*inputs,
    **params)`: inputs fill the positional parameters that have no default and are not
    given as parameters (numpy's `_NoValue` default marks one that is required unless given
    by keyword, like `np.clip`'s bounds), so an input can never land in an optional one such
    as `out`. A numpy ufunc takes `nin` inputs."""
    impl = PRIMITIVES[op].impl
    if isinstance(impl, np.ufunc):
        return tuple(f"x{i}" for i in range(impl.nin)), False
    signature = inspect.signature(impl)
    required = getattr(np, "_NoValue", inspect.Parameter.empty)
    operands = tuple(p.name for p in signature.parameters.values()
                     if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                     and p.default in (p.empty, required))
    variadic = any(p.kind is p.VAR_POSITIONAL for p in signature.parameters.values())
    return operands, variadic


def _shown(params: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k}={format_param(params[k])}" for k in sorted(params)) + "}"


def verify(program: Program) -> Program:
    """Check every IR invariant; return the program so calls can be chained."""
    _Checker(program).run()
    return program
