"""Optimisation passes over Programs: simplification, CSE, DCE, hoisting, accumulation.

Each pass is a function `pass(program) -> None` that rewrites `program` in place and
leaves it a valid Program of the same meaning. In place, because the passes run on a
program that was just built and that nothing else holds yet (the reverse builder's
adjoint, before it is verified and cached); copying a whole program between passes would
cost more than the passes themselves. `run_passes` applies a sequence of them and returns
the program, so a builder ends with `return verify(run_passes(program, PIPELINE))`.

The passes know the IR and the derivative table (primitives/), not who built the
program, so they apply to forward, adjoint and tangent programs alike. Two of them state
a precondition on what may read the program from outside:

* `eliminate_dead_code` assumes that only the program's terminators and its stateful
  nodes need its values. A forward program whose values an adjoint reads (`Primal`)
  breaks that; its adjoint does not (nothing reads an adjoint's values).
* `accumulate_in_place` assumes that nothing outside the program keeps references to its
  loop carries. A checkpoint strategy snapshots a forward loop's carries; nothing
  snapshots an adjoint's reverse-loop Phis.

No pass changes a result's bits: every rewrite computes the same floating-point
operations on the same operands, or provably the same value (`x * 1` is `x`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from .ir import (
    Block,
    Cond,
    Node,
    Phi,
    Program,
    Region,
    RegionNest,
    Return,
    Value,
    defined_values,
    format_param,
    innermost_regions,
    loop_owners,
)
from .nodespec import SIDE_EFFECTS
from .primitives import PRIMITIVES

Pass = Callable[[Program], None]


def run_passes(program: Program, passes: Iterable[Pass]) -> Program:
    """Apply `passes` in order to `program` (rewritten in place) and return it."""
    for p in passes:
        p(program)
    return program


def is_fixed(n: Node) -> bool:
    """Whether passes must leave node `n` where it is and keep it: it changes the run's
    state (a node kind flagged `side-effect`: pops a log, restores a loop's values),
    updates its first operand in place (a primitive that `mutates`: `accumulate`) or acts
    outside the program (a primitive with an `effect`: a debug print, which must run where
    and as often as the user's code put it)."""
    if n.op in SIDE_EFFECTS:
        return True
    prim = PRIMITIVES.get(n.op)
    return prim is not None and (prim.mutates or prim.effect)


def _definitions(program: Program) -> dict[Value, Block]:
    """The block defining each Phi and node result of `program`."""
    return {v: b for b in program.blocks for v in defined_values([b])}


def _replace_uses(program: Program, replace: dict[Value, Value]) -> None:
    """Make every use of a key of `replace` (node and Phi inputs, terminators, fori
    bounds) use its value instead. `replace` must map to values that are not keys."""
    if not replace:
        return
    for b in program.blocks:
        for n in b.nodes:
            n.inputs = [replace.get(v, v) for v in n.inputs]
        for phi in b.phis:
            phi.inputs = [replace.get(v, v) for v in phi.inputs]
        term = b.term
        if isinstance(term, Cond):
            term.selector = replace.get(term.selector, term.selector)
        elif isinstance(term, Return):
            term.values = [replace.get(v, v) for v in term.values]
    for r in program.loops():
        if r.trip_bounds is not None:
            r.trip_bounds = tuple(replace.get(v, v) for v in r.trip_bounds)


# ---------------------------------------------------------------------------------
# Algebraic simplification
# ---------------------------------------------------------------------------------


def _constant(n: Node | None) -> np.ndarray | None:
    return n.params["value"] if n is not None and n.op == "const" else None


def _is_one(c: np.ndarray | None) -> bool:
    return c is not None and c.dtype.kind in "biuf" and bool(np.all(c == 1))


def _is_minus_one(c: np.ndarray | None) -> bool:
    return c is not None and c.dtype.kind in "if" and bool(np.all(c == -1))


def _is_neutral_zero(c: np.ndarray | None, subtracted: bool) -> bool:
    """Whether `x + c` (`x - c` when `subtracted`) is `x` bit for bit, for every x: c is
    all zeros and, in floating point, zeros of the one sign that keeps x = -0.0 as it is
    (-0.0 + -0.0 = -0.0, but -0.0 + 0.0 = +0.0). The zeros the reverse builder
    materializes are +0.0, so a float `add x, 0.0` stays."""
    if c is None or c.dtype.kind not in "biuf" or not bool(np.all(c == 0)):
        return False
    if c.dtype.kind != "f":
        return True
    return bool(np.all(np.signbit(c) != subtracted))


def _simplified(n: Node, producer: Callable[[Value], Node | None]) -> Value | Node | None:
    """What node `n` simplifies to: a value equal to its result bit for bit, a node to
    compute it with instead (same output), or None. Every rule keeps the result's type,
    so no shape grows by broadcasting and no dtype changes."""
    out = n.outputs[0]

    def same(v: Value) -> Value | None:
        return v if v.type == out.type else None

    op, xs = n.op, n.inputs
    if op == "integer_pow":
        power = n.params["n"]
        if power == 1:
            return same(xs[0])
        if power == 0:  # x ** 0 is 1 everywhere, as numpy's (and _integer_pow_impl's)
            ones = np.ones(out.type.shape, out.type.dtype)
            return Node("const", [], {"value": ones}, [out], n.loc, n.origin)
    elif op == "neg":
        inner = producer(xs[0])
        if inner is not None and inner.op == "neg":
            return same(inner.inputs[0])
    elif op in ("mul", "div"):
        operands = [(xs[0], xs[1])] + ([(xs[1], xs[0])] if op == "mul" else [])
        for x, c in operands:
            value = _constant(producer(c))
            if _is_one(value) and same(x) is not None:
                return x
            # x * -1 is -x (for a NaN, numpy's negative flips the sign bit a product
            # keeps; a NaN's sign carries no meaning)
            if op == "mul" and _is_minus_one(value) and same(x) is not None:
                return Node("neg", [x], {}, [out], n.loc, n.origin)
    elif op in ("add", "sub"):
        operands = [(xs[0], xs[1])] + ([(xs[1], xs[0])] if op == "add" else [])
        for x, c in operands:
            if _is_neutral_zero(_constant(producer(c)), op == "sub") and same(x) is not None:
                return x
    return None


def simplify(program: Program) -> None:
    """Algebraic simplification: `integer_pow x {n=1}` is x and `{n=0}` ones; `x * 1`,
    `x / 1`, `x + 0`/`x - 0` (integers, or the sign of zero that provably keeps x) are
    x; `neg(neg x)` is x; `x * -1` is `neg x`. Only where the result keeps x's type.

    Derivative rules are written for the general case (the slope of `x ** n` is
    `n * x ** (n - 1)`, a cotangent times a constant factor) and emit these forms for
    particular parameters; simplifying afterwards keeps rules general and programs lean.
    A node replaced by a value is dropped (it is pure, and nothing reads it any more);
    chains fold in one pass, since each rule looks through replacements already made."""
    replace: dict[Value, Value] = {}
    defs: dict[Value, Node] = {}

    def resolve(v: Value) -> Value:
        while v in replace:
            v = replace[v]
        return v

    def producer(v: Value) -> Node | None:
        return defs.get(resolve(v))

    for b in program.blocks:
        for n in b.nodes:
            defs.update((o, n) for o in n.outputs)
    for b in program.blocks:
        kept = []
        for n in b.nodes:
            n.inputs = [resolve(v) for v in n.inputs]
            result = None if is_fixed(n) or len(n.outputs) != 1 else _simplified(n, producer)
            if isinstance(result, Value):
                replace[n.outputs[0]] = resolve(result)
                continue
            if isinstance(result, Node):
                n = result
                defs[n.outputs[0]] = n
            kept.append(n)
        b.nodes = kept
    _replace_uses(program, {v: resolve(v) for v in replace})


# ---------------------------------------------------------------------------------
# Common subexpressions and dead code
# ---------------------------------------------------------------------------------


def _param_key(p: Any) -> Any:
    """Data parameters compare by their printed form; objects (a custom rule, a region)
    by identity, since two of them may print alike."""
    if p is None or isinstance(p, bool | int | float | str | tuple | slice | np.ndarray |
                               np.dtype | np.generic):
        return format_param(p)
    return ("object", id(p))


def eliminate_common_subexpressions(program: Program) -> None:
    """Within each block, reuse the first of identical pure nodes (same op, inputs and
    parameters). Rules share subterms (both partials of a `div` read `ct / y`, say) and
    this keeps a program from computing them twice. `Primal` reads are not merged: the
    interpreter's saved-value plan counts each one."""
    replace: dict[Value, Value] = {}
    for b in program.blocks:
        seen: dict[Any, Value] = {}
        kept = []
        for n in b.nodes:
            n.inputs = [replace.get(v, v) for v in n.inputs]
            if is_fixed(n) or n.op == "Primal" or len(n.outputs) != 1:
                kept.append(n)
                continue
            key = (n.op, tuple(map(id, n.inputs)),
                   tuple((k, _param_key(p)) for k, p in sorted(n.params.items())))
            first = seen.get(key)
            if first is None:
                seen[key] = n.outputs[0]
                kept.append(n)
            else:
                replace[n.outputs[0]] = first
        b.nodes = kept
    _replace_uses(program, replace)  # uses in blocks listed before the replaced definition


def eliminate_dead_code(program: Program) -> None:
    """Remove nodes and Phis nothing needs (marked from terminators, fori bounds and
    stateful nodes; see the module's note on values read from outside).

    VJP rules are written for the general case (both partials of a `mul`, say); where a
    partial is unused, e.g. for a constant operand, this deletes it, so rules stay simple
    and adjoints stay lean. Log pops are kept: they consume the log. A loop's exit Phis
    stay one per header Phi (the loop-closed form the verifier checks): the exit Phi of a
    live carry is kept even when nothing after the loop reads it."""
    exit_of: dict[Value, Value] = {}  # a header Phi's result -> its exit Phi's
    for r in program.loops():
        exit_of.update((h.out, x.out) for h, x in zip(r.header.phis, r.exit.phis))
    live: set[Value] = set()
    defs: dict[Value, Node | Phi] = {}
    work: list[Value] = []
    for b in program.blocks:
        for phi in b.phis:
            defs[phi.out] = phi
        for n in b.nodes:
            defs.update((o, n) for o in n.outputs)
            if is_fixed(n):
                work.extend(n.inputs)
                live.update(n.outputs)
        term = b.term
        if isinstance(term, Cond):
            work.append(term.selector)
        elif isinstance(term, Return):
            work.extend(term.values)
    for r in program.loops():
        work.extend(r.trip_bounds or ())
    while work:
        v = work.pop()
        if v in live:
            continue
        live.add(v)
        d = defs.get(v)
        if d is not None:
            work.extend(d.inputs)
        if v in exit_of:
            work.append(exit_of[v])
    for b in program.blocks:
        b.phis = [phi for phi in b.phis if phi.out in live]
        b.nodes = [n for n in b.nodes if is_fixed(n) or any(o in live for o in n.outputs)]


# ---------------------------------------------------------------------------------
# Loops: hoisting invariants, in-place accumulation
# ---------------------------------------------------------------------------------


def hoist_loop_invariants(program: Program) -> None:
    """Move work that is the same in every iteration out of a loop, into its preheader.

    A node of a loop's first body block is invariant when its inputs come from outside
    the loop or from nodes already hoisted. In an adjoint, a `Primal` read is invariant
    when the forward value is not one the loop restores (not defined in the forward loop
    it mirrors or in loops inside that). Reading weights and transposing them once per
    loop instead of once per iteration is the typical gain. Innermost loops go first, so
    work can move out of several levels."""
    forward = program.forward
    if forward is not None:
        owners = loop_owners(forward)
        forward_nest = RegionNest(forward.regions)
        forward_of = {r.id: r for r in forward.loops()}
    region_of = innermost_regions(program)
    nest = RegionNest(program.regions)
    def_block = _definitions(program)
    for region in reversed(program.loops()):
        hoisted, kept = [], []
        for n in region.body.nodes:
            if n.op == "Primal":
                owner = owners.get(n.params["of"])
                movable = owner is None or not forward_nest.encloses(forward_of[region.id],
                                                                     owner)
            else:
                movable = not is_fixed(n) and not any(
                    v in def_block and nest.encloses(region, region_of[def_block[v]])
                    for v in n.inputs)
            if movable:
                hoisted.append(n)
                def_block.update((o, region.preheader) for o in n.outputs)
            else:
                kept.append(n)
        region.body.nodes = kept
        region.preheader.nodes.extend(hoisted)


def accumulate_in_place(program: Program) -> None:
    """Turn `acc' = add(acc, c)` into an in-place `accumulate` for loop carries whose
    buffer nothing else reads: the add is the Phi's only use inside the loop, and the
    buffer starts as a `copy` made when the loop is entered (never a shared constant or a
    value the caller holds). Per iteration this saves allocating an array the size of a
    weight matrix, which is what the gradient of a recurrent weight costs otherwise.
    See the module's note: nothing outside the program may hold the carries.

    An accumulator primitive of the table that takes its contribution in factored form
    (its `factors` rule recognises the form, e.g. `accumulate_outer` an outer product of
    two vectors) then replaces the `accumulate` when its contribution is made in the loop
    for this add alone; the nodes only the factored form read are left dead, for
    `eliminate_dead_code`."""
    uses: dict[Value, list[Node | Phi]] = {}
    block_of: dict[int, Block] = {}  # id of a node or Phi -> its block
    defs: dict[Value, tuple[Block, Node]] = {}
    for b in program.blocks:
        for phi in b.phis:
            block_of[id(phi)] = b
            for v in phi.inputs:
                uses.setdefault(v, []).append(phi)
        for n in b.nodes:
            block_of[id(n)] = b
            defs.update((o, (b, n)) for o in n.outputs)
            for v in n.inputs:
                uses.setdefault(v, []).append(n)
    region_of = innermost_regions(program)
    nest = RegionNest(program.regions)
    factored = [p for p in PRIMITIVES.values() if p.factors is not None]
    for region in program.loops():
        def inside(b: Block, region: Region = region) -> bool:
            return nest.encloses(region, region_of[b])

        def producer(v: Value, inside: Callable[[Block], bool] = inside) -> Node | None:
            """The node computing `v` in every iteration of the loop, if any."""
            b, n = defs.get(v, (None, None))
            return n if b is not None and inside(b) else None

        for phi in region.header.phis:
            if phi.out.type.ndim == 0 or len(phi.inputs) != 2:
                continue
            users = [u for u in uses.get(phi.out, []) if inside(block_of[id(u)])]
            nxt = phi.inputs[1]
            if len(users) != 1 or not isinstance(users[0], Node) or users[0].op != "add" or \
                    users[0].outputs[0] is not nxt or users[0].inputs.count(phi.out) != 1:
                continue
            add = users[0]
            contribution = add.inputs[1] if add.inputs[0] is phi.out else add.inputs[0]
            if contribution.type != phi.out.type or len(uses.get(nxt, [])) != 1:
                continue
            add.op, add.inputs = "accumulate", [phi.out, contribution]
            fresh = Value(phi.out.type)
            region.preheader.nodes.append(Node("copy", [phi.inputs[0]], {}, [fresh], region.loc))
            phi.inputs[0] = fresh
            if len(uses.get(contribution, [])) == 1:  # the factored form replaces it
                for prim in factored:
                    found = prim.factors(contribution, producer)
                    if found is not None:
                        factors, params = found
                        add.op, add.inputs, add.params = prim.name, [phi.out, *factors], params
                        break


# ---------------------------------------------------------------------------------
# Adjoints: recomputing cheap forward values instead of keeping them
# ---------------------------------------------------------------------------------

#: Forward primitives whose result an adjoint recomputes from its operands, when it reads
#: those anyway, rather than having every loop iteration keep it: one arithmetic
#: operation per element costs less than writing the array at the forward step and
#: reading it back in the reverse one (and the memory, under StoreAll, is the tape's).
_RECOMPUTED = frozenset({"add", "sub", "mul", "neg"})


def rematerialize_primal_reads(program: Program) -> None:
    """In an adjoint, replace the read of a forward value `v = op(a, b)` (an arithmetic
    op of `_RECOMPUTED`) by `op` of reads of `a` and `b`, where the adjoint reads `a` and
    `b` anyway, reads `v` once, and `v` is computed in a loop. The loops then keep `a`
    and `b` for the adjoint but no longer `v`: for the heat workload's `u * u`, half the
    tape. (Outside loops a forward value costs nothing to keep: it stays where the
    forward run left it.) The same operation on the same operands: the same bits. A read
    happens where the forward iteration it belongs to is the restored one, and `a`, `b`
    belong to that iteration or an enclosing one (they are operands of `v`), and are kept
    for every iteration since the adjoint reads them, so the new reads see the values
    `op` saw.

    A no-op on programs that are not adjoints."""
    forward = program.forward
    if forward is None:
        return
    reads: dict[Value, list[Node]] = {}
    for b in program.blocks:
        for n in b.nodes:
            if n.op == "Primal":
                reads.setdefault(n.params["of"], []).append(n)
    producer = {o: n for b in forward.blocks for n in b.nodes for o in n.outputs}
    owner = loop_owners(forward)
    for b in program.blocks:
        nodes = []
        for n in b.nodes:
            made = producer.get(n.params["of"]) if n.op == "Primal" else None
            if (made is None or owner.get(n.params["of"]) is None
                    or made.op not in _RECOMPUTED or made.params
                    or len(reads[n.params["of"]]) != 1
                    or not all(v in reads for v in made.inputs)):
                nodes.append(n)
                continue
            operands = [Node("Primal", [], {"of": v}, [Value(v.type)], n.loc, n.origin)
                        for v in made.inputs]
            nodes += operands + [Node(made.op, [o.outputs[0] for o in operands], {},
                                      n.outputs, n.loc, n.origin)]
        b.nodes = nodes


#: The passes an adjoint goes through, in order: simplify what the rules emitted, share
#: subterms, drop what no result needs, then the loop passes, drop what the accumulators'
#: factored forms left dead, and last recompute cheap forward values from the reads that
#: are left (earlier, a read it counts on could still be dropped, and the loop would then
#: keep the operands instead of the value: more, not less).
ADJOINT_PIPELINE: tuple[Pass, ...] = (
    simplify,
    eliminate_common_subexpressions,
    eliminate_dead_code,
    hoist_loop_invariants,
    accumulate_in_place,
    eliminate_dead_code,
    rematerialize_primal_reads,
)


#: The passes a JVP program goes through: the tangent rules emit the same kind of
#: redundancy as the adjoint's (`x * 1`, repeated powers, a primal subterm recomputed for
#: the tangent). No hoisting: a forward loop may run zero times, and a hoisted node would
#: then run where the program never asked for it (an anomaly check would see it).
JVP_PIPELINE: tuple[Pass, ...] = (
    simplify,
    eliminate_common_subexpressions,
    eliminate_dead_code,
)
