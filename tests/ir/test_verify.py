"""The verifier: it accepts everything lowering and the reverse builder produce, and it
rejects hand-broken programs with a VerifyError that names the broken invariant's tag and
the block (docs/ir.md, "Verifier invariants"). Broken programs are made by mutating a
freshly lowered seed program or by parsing hand-edited text. A primitive computed by a
numpy ufunc takes the dtypes numpy accepts, and gives numpy's result dtype, when traced,
verified or called eagerly."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable

import numpy as np
import pytest
import seed_programs as seeds
from hypothesis import given, settings
from hypothesis import strategies as st
from test_ir_text import program_text

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad.errors import (
    ArgumentTypeError,
    LoweringError,
    VerifyError,
)
from cfgrad.forward_mode import build_jvp
from cfgrad.ir import DTYPE_BY_SHORT_NAME, Block, Edge, Jmp, Program, Return, TensorType, Value
from cfgrad.irparse import parse_program
from cfgrad.primitives import PRIMITIVES, bind
from cfgrad.verify import INVARIANTS, verify

# a cond inside a while loop: its if region's parent is the loop
NESTED = ("while", ("leaf", 0), ("cond", ("leaf", 1), ("leaf", 1), ("unary", "sin", ("leaf", 1))),
          2, None)


def lowered(name: str) -> Program:
    fun, args = seeds.SEEDS[name]
    return cg.lower(fun, *args)


def text_of(name: str) -> str:
    return lowered(name).text()


def nested_text() -> str:
    return cg.lower(seeds.build(NESTED), *seeds.generated_args()).text()


def edit(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new)


def first(p: Program, op: str):
    return next(n for b in p.blocks for n in b.nodes if n.op == op)


# ---------------------------------------------------------------------------------
# Mutations: each returns a broken program (mutated objects) or broken text
# ---------------------------------------------------------------------------------

def no_terminator():
    p = lowered("cond")
    p.blocks[1].term = None
    return p


def phi_arity():
    p = lowered("cond")
    p.blocks[3].phis[0].inputs.pop()
    return p


def use_in_sibling_branch():
    p = lowered("cond")
    p.blocks[2].nodes[0].inputs[0] = p.blocks[1].nodes[0].outputs[0]
    return p


def use_before_def_in_block():
    p = lowered("tree")
    b = p.blocks[0]
    i = b.nodes.index(first(p, "mul"))
    b.nodes[i], b.nodes[i + 1] = b.nodes[i + 1], b.nodes[i]
    return p


def phi_input_type():
    p = lowered("cond")
    p.blocks[3].phis[0].inputs[1] = p.blocks[0].nodes[-1].outputs[0]  # the bool predicate
    return p


def cond_selector_not_bool():
    p = lowered("cond")
    p.blocks[0].term.selector = p.params[0]
    return p


def switch_selector_not_int():
    p = lowered("switch")
    p.blocks[0].term.selector = p.params[1]
    return p


def cond_keys_out_of_order():
    p = lowered("cond")
    p.blocks[0].term.cases.reverse()  # [(False, b2), (True, b1)]: not a two-way Cond
    return p


def edge_missing_at_target():
    p = lowered("cond")
    p.blocks[1].preds = []
    return p


def edge_missing_at_source():
    p = lowered("cond")
    p.blocks[3].preds.append(Edge(p.blocks[0]))
    p.blocks[3].phis[0].inputs.append(p.params[0])
    return p


def jump_outside_program():
    p = lowered("cond")
    p.blocks[1].term = Jmp(Block())
    return p


def start_block_with_preds():
    p = lowered("while")
    p.blocks[0].preds.append(Edge(p.blocks[3]))
    return p


def two_returns():
    p = lowered("cond")
    p.blocks[1].term = Return([p.params[0]])
    return p


def declared_type_wrong():
    p = lowered("tree")
    first(p, "mul").outputs[0].type = TensorType((2,), np.dtype(np.float64))
    return p


def unknown_op():
    p = lowered("tree")
    first(p, "add").op = "frobnicate"
    return p


def defined_twice():
    p = lowered("tree")
    nodes = [n for n in p.blocks[0].nodes if n.op != "const"]
    nodes[1].outputs = nodes[0].outputs
    return p


def block_listed_twice():
    p = lowered("cond")
    p.blocks.append(p.blocks[2])
    return p


def latch_not_recorded():
    p = lowered("while")
    loop = p.loops()[0]
    loop.latch = loop.header
    return p


def branch_block_claims_region():
    p = lowered("cond")
    p.blocks[0].region = p.regions[0]
    return p


# Three conds in a row; the region lines claim that if#0 runs on to the second cond's
# exits and if#1 on to the third's, so if#0 spans b1..b5 and if#1 spans b4..b8: they share
# b4 and b5 without either containing the other.
OVERLAPPING = """\
program f(%x: f64[]) -> (f64[])
  region if#0 cond at b0 cases (b1, b2) exits (b4, b5) merge b6
  region if#1 cond at b3 cases (b4, b5) exits (b7, b8) merge b9
  region if#2 cond at b6 cases (b7, b8) exits (b7, b8) merge b9 in if#1
b0:
  %p: bool[] = gt %x, 0.0
  Cond %p -> Proj(T) b1 | Proj(F) b2
b1: preds (b0.T)
  Jmp b3
b2: preds (b0.F)
  Jmp b3
b3: preds (b1, b2)
  Cond %p -> Proj(T) b4 | Proj(F) b5
b4: preds (b3.T)
  Jmp b6
b5: preds (b3.F)
  Jmp b6
b6: preds (b4, b5)
  Cond %p -> Proj(T) b7 | Proj(F) b8
b7: preds (b6.T)
  Jmp b9
b8: preds (b6.F)
  Jmp b9
b9: preds (b7, b8)
  Return %x
"""


SELF_LOOP = """\
program f(%x: f64[]) -> (f64[])
b0:
  Jmp b1
b1: preds (b0, b1)
  Jmp b1
b2:
  Return %x
"""

# A cycle no loop region records: the merge of if#0 jumps back to its branch block.
UNRECORDED_LOOP = """\
program f(%x: f64[]) -> (f64[])
  region if#0 cond at b1 cases (b2, b3) exits (b2, b3) merge b4
b0:
  Jmp b1
b1: preds (b0, b4)
  %c: bool[] = gt %x, 0.0
  Cond %c -> Proj(T) b2 | Proj(F) b3
b2: preds (b1.T)
  Jmp b4
b3: preds (b1.F)
  Jmp b4
b4: preds (b2, b3)
  Jmp b1
b5:
  Return %x
"""

COND_WITHOUT_REGION = """\
program f(%x: f64[]) -> (f64[])
b0:
  %c: bool[] = gt %x, 0.0
  Cond %c -> Proj(T) b1 | Proj(F) b2
b1: preds (b0.T)
  Jmp b3
b2: preds (b0.F)
  Jmp b3
b3: preds (b1, b2)
  Return %x
"""


def unreachable_block():
    p = lowered("cond")
    island = Block()
    island.term, island.preds = Jmp(island), [Edge(island)]
    p.blocks.append(island)
    return p


def case_exits_swapped():
    p = lowered("cond")
    r = p.regions[0]
    r.case_exits.reverse()
    p.blocks[3].preds.reverse()
    p.blocks[3].phis[0].inputs.reverse()
    return p


def preheader_branches():
    p = lowered("while")
    p.loops()[0].preheader = p.blocks[3]  # the exit: it returns, it does not jump
    return p


def fori_bounds(bounds: str) -> str:
    return edit(text_of("fori"), "bounds (0, 3)", f"bounds {bounds}")


# (name, make, tag, block the message must name, extra text the message must contain)
CASES: list[tuple[str, Callable, str, str, str]] = [
    ("missing terminator", no_terminator, "one-terminator", "b1", "no terminator"),
    ("phi arity", phi_arity, "phi-arity", "b3", "1 inputs but the block has 2"),
    ("use in sibling branch", use_in_sibling_branch, "use-dominated", "b2", "defined in b1"),
    ("use before def", use_before_def_in_block, "use-dominated", "b0", "before its definition"),
    ("use of the merge in a branch (text)",
     lambda: edit(text_of("cond"), "%4: f64[] = mul 2.0, %3", "%4: f64[] = mul 2.0, %1"),
     "use-dominated", "b3", "uses %1"),
    ("phi input from the wrong edge (text)",
     lambda: edit(text_of("while"), "Phi (b0: 0, b2: %3)", "Phi (b0: %3, b2: %3)"),
     "use-dominated", "b1", "on the edge from b0"),
    ("phi input type", phi_input_type, "phi-types", "b3", "bool[] merges into f64[]"),
    ("loop carry type (text)",
     lambda: edit(text_of("while"), "Phi (b0: 0.0, b2: %6)", "Phi (b0: 0.0:f32, b2: %6)"),
     "phi-types", "b1", "f32[] merges into f64[]"),
    ("cond selector not bool", cond_selector_not_bool, "cond-selector", "b0", "bool[] selector"),
    ("switch selector not int", switch_selector_not_int, "cond-selector", "b0",
     "integer scalar selector, got f64[]"),
    ("cond keys out of order", cond_keys_out_of_order, "cond-selector", "b0", "neither"),
    ("proj edge missing at its target", edge_missing_at_target, "edge-both-ends", "b1",
     "recorded 0 times"),
    ("proj edge missing at its target (text)",
     lambda: edit(text_of("cond"), "b1: preds (b0.T)", "b1: preds (b0.F)"),
     "edge-both-ends", "b1", "(key True) is recorded 0 times"),
    ("pred without a terminator edge", edge_missing_at_source, "edge-both-ends", "b3",
     "no matching terminator edge"),
    ("jump outside the program", jump_outside_program, "proj-target", "b1", "outside"),
    ("start block with preds", start_block_with_preds, "start-block", "b0", "predecessors"),
    ("two returns", two_returns, "one-return", "b3", "2 blocks end in Return (b1, b3)"),
    ("declared type wrong", declared_type_wrong, "node-types", "b0",
     "declared f64[2], but mul of these inputs gives f64[]"),
    ("declared type wrong (text)",
     lambda: edit(text_of("tree"), "%0: f64[] = mul 2.0, %z", "%0: f32[] = mul 2.0, %z"),
     "node-types", "b0", "declared f32[]"),
    ("params do not type-check (text)",
     lambda: edit(text_of("log_sin"), "{spec=(0,)}", "{spec=(5,)}"),
     "node-types", "b0", "index 5 is out of bounds for axis 0 with size 2"),
    ("too many operands (text)",
     lambda: edit(text_of("tree"), "mul 2.0, %z", "mul 2.0, %z, %x"),
     "operand-count", "b0", "mul takes 2 inputs, got 3"),
    ("a unary op given two operands (text)",
     lambda: edit(text_of("switch"), "sin %x", "sin %x, %x"),
     "operand-count", "b2", "sin takes 1 input, got 2"),
    ("too few operands for where (text)",
     lambda: edit(text_of("tree"), "%0: f64[] = mul 2.0, %z", "%0: f64[] = where True, %z"),
     "operand-count", "b0", "where takes 3 inputs, got 2"),
    ("a parameter the op does not take (text)",
     lambda: edit(text_of("fori"), "tanh %6", "tanh %6 {axes=(0,)}"),
     "operand-count", "b2", "tanh takes no parameters, got axes"),
    ("operands of two dtypes (text)",
     lambda: edit(text_of("tree"), "mul 2.0, %z", "mul 2.0:f32, %z"),
     "operand-types", "b0", "mul of inputs typed f32[], f64[]"),
    ("a float op on an integer (text)",
     lambda: edit(text_of("while"), "%3: i64[] = add %0, 1", "%3: i64[] = sin %0"),
     "operand-types", "b2", "sin computes in floating point but its input is i64[]"),
    ("unknown op", unknown_op, "known-op", "b0", "'frobnicate'"),
    ("unknown op (text)", lambda: edit(text_of("switch"), "= sin %x", "= sine %x"),
     "known-op", "b2", "'sine'"),
    ("defined twice", defined_twice, "single-definition", "b0", "defined twice"),
    ("block listed twice", block_listed_twice, "unique-blocks", "b4", "positions [2, 4]"),
    ("wrong region parent (text)", lambda: edit(nested_text(), " in loop#0", ""),
     "regions-nest", "b2", "smallest enclosing region is loop#0"),
    ("overlapping regions (text)", lambda: OVERLAPPING, "regions-nest", "b3",
     "if#1 starts in case T of if#0 but ends at b9, in the top level: regions overlap"),
    ("if kind disagrees with its Cond (text)",
     lambda: edit(text_of("cond"), "cond at b0", "switch at b0"),
     "region-shape", "b0", "keys [0, 1]"),
    ("loop latch not recorded", latch_not_recorded, "region-shape", "b1", "(preheader, latch)"),
    ("loop bounds defined in the body (text)", lambda: fori_bounds("(0, %3)"),
     "use-dominated", "b0", "the bounds of loop#0"),
    ("loop bounds not integers (text)", lambda: fori_bounds("(0, 3.0)"),
     "region-shape", "b0", "a loop's bounds are integer scalars, got f64[]"),
    ("case reaches the merge through the other exit", case_exits_swapped, "region-shape", "b3",
     "case T of if#0 reaches b3 from b1, not from its recorded exit b2"),
    ("preheader that does not jump to the header", preheader_branches, "region-shape", "b3",
     "the preheader must jump to the header"),
    ("Jmp self-loop (text)", lambda: SELF_LOOP, "structured", "b1",
     "the top level comes back to b1 from b1: the only cycles allowed are loops"),
    ("cycle no loop region records (text)", lambda: UNRECORDED_LOOP, "structured", "b1",
     "the top level comes back to b1 from b4"),
    ("unreachable block", unreachable_block, "structured", "b4", "cannot be reached"),
    ("Cond without its region (text)", lambda: COND_WITHOUT_REGION, "cond-region", "b0",
     "the Cond belongs to no region"),
    ("block outside its region", branch_block_claims_region, "block-region", "b0",
     "lies outside"),
    ("loop carry read past the exit Phis (text)",
     lambda: edit(text_of("while"), "Return %8", "Return %1"),
     "region-closed", "b3", "uses %1, defined inside loop#0, outside it"),
    ("loop exit without a Phi per carry (text)",
     lambda: edit(text_of("while"), "  %7: i64[] = Phi (b1.F: %0)\n", ""),
     "region-closed", "b3", "2 carries, 1 exit Phis"),
]


def verify_case(make: Callable) -> str:
    broken = make()
    with pytest.raises(VerifyError) as info:
        if isinstance(broken, str):
            parse_program(broken)
        else:
            verify(broken)
    return str(info.value)


@pytest.mark.parametrize("name, make, tag, block, detail", CASES, ids=[c[0] for c in CASES])
def test_rejects_broken_program(name, make, tag, block, detail):
    message = verify_case(make)
    assert re.match(rf"\[{re.escape(tag)}\] block {block}\b", message), message
    assert detail in message, message


def tiny(node: str, x: str = "f64[]", out: str = "f64[]") -> str:
    """A one-node program: `%y: OUT = NODE` of a parameter `%x: X`."""
    return f"program f(%x: {x}) -> ({out})\nb0:\n  %y: {out} = {node}\n  Return %y\n"


# Parameters that once passed the verifier (or crashed it), then failed as raw TypeErrors,
# KeyErrors or numpy AxisErrors in cg.adjoint(), compiling or running: (node, input type,
# output type, tag, the message's detail). Each shape rule checks its parameters' values,
# and the verifier holds a node's parameter names to its shape rule's signature.
BAD_PARAMETERS = [
    ("clip %x, 0.0, 1.0 {foo=1}", "f64[]", "f64[]", "operand-count",
     "clip takes no parameters, got foo"),
    ("sum %x {axes=(0,), foo=1, keepdims=False}", "f64[3]", "f64[]", "operand-count",
     "sum takes parameters axes, keepdims, got foo"),
    ("mean %x {axes=(0,)}", "f64[3]", "f64[]", "operand-count",
     "mean takes parameters axes, keepdims; keepdims is missing"),
    ("const", "f64[]", "f64[]", "operand-count", "const takes parameter value; value is missing"),
    ("const {value=3}", "f64[]", "f64[]", "node-types",
     "const: parameter value must be an array"),
    ("mean %x {axes=None, keepdims=False}", "f64[]", "f64[]", "node-types",
     "mean: parameter axes must be a tuple of axes of f64[], got None"),
    ("sum %x {axes=(5,), keepdims=False}", "f64[]", "f64[]", "node-types",
     "sum: parameter axes=(5,): 5 is not an axis of f64[] (its axes: none, it is a scalar)"),
    ("sum %x {axes=(-1,), keepdims=False}", "f64[3]", "f64[]", "node-types",
     "-1 is not an axis of f64[3] (its axes: 0 to 0)"),
    ("sum %x {axes=(0, 0), keepdims=False}", "f64[3]", "f64[]", "node-types",
     "sum: parameter axes=(0, 0) repeats an axis"),
    ("sum %x {axes=(0,), keepdims='no'}", "f64[3]", "f64[]", "node-types",
     "sum: parameter keepdims must be True or False, got 'no'"),
    ("logsumexp %x {axes=(3,), keepdims=False}", "f64[3]", "f64[]", "node-types",
     "logsumexp: parameter axes=(3,): 3 is not an axis of f64[3]"),
    ("amax %x {axes=(0,), keepdims=False}", "f64[0]", "f64[]", "node-types",
     "amax: cannot reduce f64[0] over its empty axis 0"),
    ("argmax %x {axis='a'}", "f64[3]", "i64[]", "node-types",
     "argmax: parameter axis='a': 'a' is not an axis of f64[3] (its axes: 0 to 0)"),
    ("argmax %x {axis=1}", "f64[3]", "i64[]", "node-types",
     "argmax: parameter axis=1: 1 is not an axis of f64[3]"),
    ("integer_pow %x {n=2.5}", "f64[]", "f64[]", "node-types",
     "integer_pow: parameter n must be an int, got 2.5"),
    ("integer_pow %x {n='2'}", "f64[]", "f64[]", "node-types", "must be an int, got '2'"),
    ("integer_pow %x {n=None}", "f64[]", "f64[]", "node-types", "must be an int, got None"),
    ("astype %x {dtype='float32'}", "f64[]", "f32[]", "node-types",
     "astype: parameter dtype must be one of the IR's dtypes"),
    ("reshape %x {shape=(3.0,)}", "f64[3]", "f64[3]", "node-types",
     "reshape: parameter shape must be a tuple of sizes (ints >= 0), got (3.0,)"),
    ("transpose %x {axes=(0.0, 1)}", "f64[2,2]", "f64[2,2]", "node-types",
     "transpose: parameter axes=(0.0, 1): 0.0 is not an axis of f64[2,2]"),
    ("transpose %x {axes=(0,)}", "f64[2,2]", "f64[2,2]", "node-types",
     "transpose: parameter axes=(0,) is not a permutation of the axes of f64[2,2]"),
    ("concatenate %x, %x {axis=1}", "f64[3]", "f64[6]", "node-types",
     "concatenate: parameter axis=1: 1 is not an axis of f64[3]"),
    ("roll %x, 1 {axis=7}", "f64[3]", "f64[3]", "node-types", "roll: parameter axis=7"),
    ("index %x {spec=('$',)}", "f64[3]", "f64[]", "node-types",
     "spec ('$',) marks 1 traced indices with '$', but the node has 0 index inputs"),
    ("scatter_add %x {shape=(3,), spec=(5,)}", "f64[]", "f64[3]", "node-types",
     "index 5 is out of bounds for axis 0 with size 3"),
    ("scatter_add %x {shape=(3,), spec=(0,)}", "f64[2]", "f64[3]", "node-types",
     "scatter_add: spec (0,) selects f64[] from shape [3], but the input is f64[2]"),
]


@pytest.mark.parametrize("node, x, out, tag, detail", BAD_PARAMETERS,
                         ids=[c[0] for c in BAD_PARAMETERS])
def test_bad_parameters_are_verify_errors(node, x, out, tag, detail):
    message = verify_case(lambda: tiny(node, x, out))
    assert message.startswith(f"[{tag}] block b0, node `%0 = {node.split()[0]}`: "), message
    assert detail in message, message


def test_every_invariant_has_a_broken_program():
    assert {c[2] for c in CASES} == set(INVARIANTS)


def test_message_shows_the_block_and_node():
    message = verify_case(unknown_op)
    lines = message.splitlines()
    assert "node `%3 = frobnicate`" in lines[0]
    assert lines[1].split() == ["b0:", ";", "entry"]
    assert any("frobnicate %1, %2" in ln for ln in lines[2:])


def test_broken_program_still_prints():
    """Printing never fails, so errors can show the neighbourhood of what broke."""
    p = lowered("cond")
    p.blocks[2].nodes[0].inputs[0] = Value(TensorType((), np.dtype(np.float64)))
    p.blocks[1].term = Jmp(Block())
    text = p.text()
    assert "sub %?, %b" in text and "Jmp ?" in text


# ---------------------------------------------------------------------------------
# Everything the pipeline builds verifies
# ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(seeds.SEEDS))
def test_accepts_seed_programs_adjoints_and_jvps(name):
    p = lowered(name)
    assert verify(p) is p
    verify(cg.adjoint(p))
    verify(build_jvp(p))


@settings(max_examples=60)
@given(expr=seeds.expressions(3), dtype=st.sampled_from([np.float64, np.float32]))
def test_accepts_random_programs_and_adjoints(expr, dtype):
    p = cg.lower(seeds.build(expr), *seeds.generated_args(dtype))
    verify(p)
    verify(cg.adjoint(p))
    verify(build_jvp(p))


@settings(max_examples=60)
@given(expr=seeds.expressions(2), data=st.data())
def test_random_damage_is_a_verify_error(expr, data):
    """Rewire one input, Phi input, selector or edge at random: the verifier either accepts
    the result or raises VerifyError, and never crashes on its own."""
    p = cg.lower(seeds.build(expr), *seeds.generated_args())
    values = list(p.params) + [o for b in p.blocks for o in
                               [phi.out for phi in b.phis] + [o for n in b.nodes
                                                              for o in n.outputs]]
    b = data.draw(st.sampled_from(p.blocks))
    what = data.draw(st.sampled_from(["input", "phi", "pred", "selector", "type"]))
    pick = st.sampled_from(values)
    if what == "input" and [n for n in b.nodes if n.inputs]:
        n = data.draw(st.sampled_from([n for n in b.nodes if n.inputs]))
        n.inputs[data.draw(st.integers(0, len(n.inputs) - 1))] = data.draw(pick)
    elif what == "phi" and b.phis:
        phi = data.draw(st.sampled_from(b.phis))
        phi.inputs[data.draw(st.integers(0, len(phi.inputs) - 1))] = data.draw(pick)
    elif what == "pred" and b.preds:
        b.preds[data.draw(st.integers(0, len(b.preds) - 1))] = Edge(
            data.draw(st.sampled_from(p.blocks)), data.draw(st.sampled_from([None, True, 1])))
    elif what == "selector" and hasattr(b.term, "selector"):
        b.term.selector = data.draw(pick)
    elif what == "type" and [n for n in b.nodes if n.op != "const"]:
        n = data.draw(st.sampled_from([n for n in b.nodes if n.op != "const"]))
        n.outputs[0].type = data.draw(st.sampled_from(
            [TensorType((), np.dtype(np.float32)), TensorType((3,), np.dtype(np.int64))]))
    try:
        verify(p)
    except VerifyError as e:
        assert re.match(r"\[[a-z-]+\] (block \w+|program)", str(e))
        assert str(e)[1:].split("]")[0] in INVARIANTS


def _adjoint_node(op: str):
    """A fresh adjoint of the while seed (its nodes may be damaged) and its first `op`."""
    fun, args = seeds.SEEDS["while"]
    adjoint = cg.adjoint(cg.lower(fun, *args))
    return adjoint, first(adjoint, op)


def _damage(op: str, how: Callable) -> str:
    adjoint, n = _adjoint_node(op)
    how(n)
    with pytest.raises(VerifyError) as info:
        verify(adjoint)
    return str(info.value)


@pytest.mark.parametrize("op, how, tag, detail", [
    ("LoopState", lambda n: n.inputs.append(n.inputs[0]), "operand-count",
     "LoopState has 1 input, got 2"),
    ("TripPop", lambda n: n.params.update(region=n.params.pop("loop")), "operand-count",
     "TripPop takes parameters loop, got region"),
    ("TripPop", lambda n: setattr(n.outputs[0], "type", TensorType((), np.dtype(np.int32))),
     "node-types", "TripPop's trips is i64[], declared i32[]"),
    ("LoopState", lambda n: n.outputs.append(n.inputs[0]), "node-types",
     "LoopState has 0 outputs, got 1"),
])
def test_runtime_nodes_are_held_to_their_declarations(op, how, tag, detail):
    """The verifier checks a runtime node's operands, parameters and results against its
    nodespec declaration: the interpreter's generated code reads exactly these."""
    message = _damage(op, how)
    assert message.startswith(f"[{tag}]") and detail in message, message


def test_runtime_nodes_only_in_adjoints():
    adjoint, _ = _adjoint_node("TripPop")
    adjoint.forward = None
    with pytest.raises(VerifyError, match=r"\[known-op\].*only adjoint programs"):
        verify(adjoint)


# ---------------------------------------------------------------------------------
# Numpy's type resolution, traced, verified and eager
# ---------------------------------------------------------------------------------


@pytest.mark.parametrize("line, dtypes", [
    ("%0: f64[] = bitwise_and %x, %x", "float64, float64"),
    ("%0: f64[] = invert %x", "float64"),
    ("%0: bool[] = sign %b", "bool"),
    ("%0: bool[] = neg %b", "bool"),
    ("%0: bool[] = sub %b, %b", "bool, bool"),
    ("%0: bool[] = signbit %z", "complex128"),
])
def test_the_verifier_refuses_dtypes_numpy_refuses(line, dtypes):
    op = line.split("= ")[1].split()[0]
    text = program_text(line, "Return %x", params="%x: f64[], %b: bool[], %z: c128[]")
    with pytest.raises(VerifyError, match=rf"^\[node-types\] block b0, node `%0 = {op}`: "
                                          rf"{op} .*{dtypes}"):
        cg.parse_program(text)


def test_tracing_and_eager_calls_refuse_them_too():
    for fun in (lambda x: bind("bitwise_and", x, x), lambda x: cnp.sign(x > 0),
                lambda x: -(x > 0)):
        with pytest.raises(LoweringError, match="numpy's"):
            cg.lower(fun, 1.5)
        with pytest.raises(LoweringError, match="numpy's"):
            cg.jit(fun)(1.5)  # Numba would have computed a number
    with pytest.raises(ArgumentTypeError, match="sign is not defined for inputs of dtype bool"):
        cnp.sign(np.bool_(True))


def test_bool_to_a_bool_power_is_numpys_int8():
    """numpy's power of two bools is int8: the rule says so (it refused them), traced and
    compiled alike, and a text declaring it bool is refused."""
    text = program_text("%0: bool[] = pow %b, %b", "Return %x",
                        params="%x: f64[], %b: bool[], %z: c128[]")
    with pytest.raises(VerifyError, match=r"declared bool\[\], but pow of these inputs "
                                          r"gives i8\[\]"):
        cg.parse_program(text)
    a, b = np.array([True, False]), np.array([True, True])
    want = a ** b
    for got in (cg.jit(lambda a, b: a ** b)(a, b), cg.jvp(lambda a, b: a ** b, (a, b),
                                                         (a, b))[0]):
        assert got.dtype == want.dtype == np.int8
        np.testing.assert_array_equal(got, want)


def test_every_ufunc_entry_gives_numpys_dtype_or_refuses():
    dtypes = list(dict.fromkeys(DTYPE_BY_SHORT_NAME.values()))
    for name, prim in PRIMITIVES.items():
        if not isinstance(prim.impl, np.ufunc):
            continue
        for combo in itertools.product(dtypes, repeat=prim.impl.nin):
            try:
                declared = prim.abstract([TensorType((), d) for d in combo]).dtype
            except LoweringError:
                continue
            with np.errstate(all="ignore"):
                got = prim.impl(*(np.ones((), d) for d in combo))
            assert np.asarray(got).dtype == declared, (name, combo)


def test_bessel_functions_refuse_complex_inputs():
    for name in ("i0", "i1"):
        with pytest.raises(LoweringError, match="does not accept complex"):
            cg.lower(lambda z, name=name: bind(name, z), 1j)


def test_an_integer_exponent_beyond_float64_is_a_typed_error():
    """x ** (10**400) on a traced x: the derivative rule's float(n) raised a raw
    OverflowError; the exponent is refused where the power is traced (2**70 is fine)."""
    assert cg.grad(lambda x: x ** (2 ** 70))(1.0) == 2.0 ** 70
    with pytest.raises(cg.ArgumentValueError, match="beyond float64"):
        cg.grad(lambda x: x ** (10**400))(1.0)


def test_arrays_of_more_than_32_dimensions_trace_as_numpy_computes_them():
    """numpy's arrays and ufuncs take 64 dimensions, np.broadcast_shapes only 32: shape
    rules that used it raised a raw RuntimeError at 33."""
    from cfgrad.ir import broadcast_shapes

    assert cg.grad(lambda x: cnp.sum(x.reshape((1,) * 33) * 2.0))(1.0) == 2.0
    assert cg.grad(lambda x: cnp.sum(x * np.ones((1,) * 40)))(1.0) == 1.0
    for shapes in [((1,) * 40, (3,)), ((2, 1), (3,)), ((0,), (1,)), ((), (4, 5)), ()]:
        assert broadcast_shapes(*shapes) == (np.broadcast_shapes(*shapes) if len(
            max(shapes, key=len, default=())) <= 32 else (1,) * 39 + (3,))
    with pytest.raises(ValueError, match="cannot be broadcast"):
        broadcast_shapes((2,), (3,))
