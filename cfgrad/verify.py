"""The IR verifier: every invariant of design §4, checked after lowering and after the
reverse builder. A violation raises `VerifyError` naming the block and node and showing
the block's text, so a broken pass is caught where it broke the IR, not later as a wrong
gradient."""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import VerifyError
from .ir import (
    Block,
    Cond,
    IfRegion,
    Jmp,
    LoopRegion,
    Node,
    Program,
    Region,
    Return,
    Value,
    region_blocks,
)
from .nodespec import RUNTIME_NODES
from .primitives import PRIMITIVES

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
    "known-op": "every node names a primitive of the derivative table (or a runtime node of "
                "an adjoint program)",
    "node-types": "a primitive node has one output, whose declared type is what the "
                  "primitive's shape rule gives for its inputs and parameters",
    "single-definition": "every value is defined once (as a parameter, Phi or node output)",
    "use-dominated": "every use of a value is dominated by its definition (a Phi input by the "
                     "end of the predecessor it comes from)",
    "region-shape": "region ids are unique, and each region's recorded blocks are in the "
                    "program and shaped as recorded: an if's branch Cond leads to its cases "
                    "with its kind's keys and its merge's predecessors are the case exits; a "
                    "loop's header has preds (preheader, latch) and ends in Cond -> T: body | "
                    "F: exit, and the latch jumps back to the header",
    "regions-nest": "regions nest properly: two regions' interiors are disjoint or one "
                    "contains the other, and each region's parent is its smallest enclosing "
                    "region",
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
            return
        prim = PRIMITIVES.get(n.op)
        if prim is None:
            self.fail("known-op", b, f"unknown operation {n.op!r}", n)
        if len(n.outputs) != 1 and not prim.multi_output:
            self.fail("node-types", b, "a primitive node has exactly one output", n)
        try:
            expected = prim.abstract([v.type for v in n.inputs], **n.params)
        except Exception as e:  # noqa: BLE001 - any failure of the rule is a typing error
            self.fail("node-types", b, f"its inputs and params do not type-check: "
                                       f"{type(e).__name__}: {e}", n)
        declared = [o.type for o in n.outputs]
        if (list(expected) if prim.multi_output else [expected]) != declared:
            shown = ", ".join(map(str, declared))
            self.fail("node-types", b, f"declared {shown}, but {n.op} of these inputs gives "
                                       f"{expected}", n)

    # -- dominance ---------------------------------------------------------------------
    def dominators(self) -> dict[Block, Block | None]:
        blocks = self.p.blocks
        order: list[Block] = []
        seen: set[Block] = set()

        def dfs(b: Block) -> None:
            stack = [(b, iter([t for _, t in b.term.successors()]))]
            seen.add(b)
            while stack:
                node, it = stack[-1]
                nxt = next(it, None)
                if nxt is None:
                    order.append(node)
                    stack.pop()
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, iter([t for _, t in nxt.term.successors()])))

        dfs(blocks[0])
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

        def dominates(a: Block, c: Block) -> bool:
            x: Block | None = c
            while x is not None:
                if x is a:
                    return True
                x = idom.get(x)
            return False

        def check_use(v: Value, b: Block, pos: int, what: Any, user: Block) -> None:
            """`v` is read at position `pos` of block `b` by `what`, which sits in `user`
            (a Phi reads its input at the end of the predecessor the input comes from)."""
            if v not in defs:
                self.fail("use-dominated", user, "uses a value that is never defined", what)
            db, dpos = defs[v]
            if db is None:
                return
            if b not in idom and b is not self.p.blocks[0]:
                return  # unreachable block: nothing runs there
            if db is b and dpos >= pos:
                self.fail("use-dominated", user, f"uses {self.vn.get(v, '?')} before its "
                                                 "definition further down the block", what)
            if db is not b and not dominates(db, b):
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

    # -- regions ---------------------------------------------------------------------------
    def check_regions(self) -> None:
        ids = [r.id for r in self.p.regions]
        if len(set(ids)) != len(ids):
            self.fail("region-shape", None, f"region ids repeat: {', '.join(ids)}")
        interiors: dict[Region, set[Block]] = {}
        for r in self.p.regions:
            if isinstance(r, IfRegion):
                self.check_if(r)
            elif isinstance(r, LoopRegion):
                self.check_loop(r)
            interiors[r] = region_blocks(r)
        for r, inner in interiors.items():
            enclosing = [q for q, qi in interiors.items() if q is not r and inner < qi]
            for q, qi in interiors.items():
                if q is not r and inner & qi and not (inner <= qi or qi <= inner):
                    self.fail("regions-nest", _anchor(r), f"regions {r.id} and {q.id} overlap "
                                                    "without nesting")
            smallest = min(enclosing, key=lambda q: len(interiors[q]), default=None)
            if smallest is not r.parent:
                self.fail("regions-nest", _anchor(r), f"region {r.id} records parent "
                          f"{r.parent.id if r.parent else None}, but its smallest enclosing "
                          f"region is {smallest.id if smallest else None}")
        for b in self.p.blocks:
            r = b.region
            if r is None:
                continue
            if r not in interiors:
                self.fail("block-region", b, f"the block names region {r.id}, which is not "
                                             "among the program's regions")
            if b not in interiors[r] and b is not _join(r):
                self.fail("block-region", b, f"the block names region {r.id} but lies outside "
                                             "it")
        if self.p.forward is None:  # adjoints read reverse-loop accumulators directly
            for r, inner in interiors.items():
                self.check_closed(r, inner)

    def check_closed(self, r: Region, inner: set[Block]) -> None:
        """In a forward program, values leave a region only through its join block's Phis,
        and a loop's exit Phis mirror its header Phis one to one (loop-closed SSA): the
        reverse builder finds a region's results there."""
        join = _join(r)
        if isinstance(r, LoopRegion):
            if [phi.inputs for phi in join.phis] != [[p.out] for p in r.header.phis]:
                self.fail("region-closed", join, f"the exit of {r.id} must start with one "
                          f"single-input Phi per header Phi, in order ({len(r.header.phis)} "
                          f"carries, {len(join.phis)} exit Phis)")
        defined = {phi.out for b in inner for phi in b.phis}
        defined.update(o for b in inner for n in b.nodes for o in n.outputs)
        for b in self.p.blocks:
            if b in inner:
                continue
            t = b.term
            uses = [(v, n) for n in b.nodes for v in n.inputs]
            uses += [(v, "the terminator") for v in ([t.selector] if isinstance(t, Cond) else
                                                     t.values if isinstance(t, Return) else [])]
            if b is not join:
                uses += [(v, phi.out) for phi in b.phis for v in phi.inputs]
            for v, user in uses:
                if v in defined:
                    self.fail("region-closed", b, f"uses {self.vn[v]}, defined inside {r.id}, "
                                                  f"outside it: results leave {r.id} through "
                                                  f"the Phis of {self.bn[join]}", user)

    def region_blocks(self, r: Region, blocks: list[Block | None]) -> None:
        if any(b not in self.block_set for b in blocks):
            self.fail("region-shape", None, f"{r.id} names a block that is not in the program "
                                            f"({self.bn[_anchor(r)]} is its first)")

    def check_if(self, r: IfRegion) -> None:
        self.region_blocks(r, [r.branch, r.merge, *r.cases, *r.case_exits])
        t = r.branch.term
        if not isinstance(t, Cond) or [b for _, b in t.cases] != r.cases:
            self.fail("region-shape", r.branch, f"{r.id}: the branch block's Cond does not lead "
                                                "to the recorded cases")
        if [k for k, _ in t.cases] != r.keys:
            self.fail("region-shape", r.branch, f"{r.id}: a {r.kind} region's Cond needs keys "
                                                f"{r.keys}")
        if [e.src for e in r.merge.preds] != r.case_exits:
            self.fail("region-shape", r.merge, f"{r.id}: the merge block's predecessors are not "
                                               "the recorded case exits")

    def check_loop(self, r: LoopRegion) -> None:
        self.region_blocks(r, [r.preheader, r.header, r.body, r.latch, r.exit])
        h = r.header
        if [e.src for e in h.preds] != [r.preheader, r.latch]:
            self.fail("region-shape", h, f"{r.id}: the header's predecessors must be "
                                         "(preheader, latch)")
        t = h.term
        if not isinstance(t, Cond) or t.cases != [(True, r.body), (False, r.exit)]:
            self.fail("region-shape", h, f"{r.id}: the header must end in Cond -> T: body | F: "
                                         "exit")
        if not isinstance(r.latch.term, Jmp) or r.latch.term.target is not h:
            self.fail("region-shape", r.latch, f"{r.id}: the latch must jump back to the header")


def _join(r: Region) -> Block | None:
    """Where control leaves a region: an if's merge block, a loop's exit."""
    return r.merge if isinstance(r, IfRegion) else r.exit if isinstance(r, LoopRegion) \
        else None


def _anchor(r: Region) -> Block | None:
    """The block a region starts at: an if's branch block, a loop's header."""
    return r.branch if isinstance(r, IfRegion) else r.header if isinstance(r, LoopRegion) \
        else None


def verify(program: Program) -> Program:
    """Check every IR invariant; return the program so calls can be chained."""
    _Checker(program).run()
    return program
