"""Primitives no `cfgrad.numpy` function applies: constants, the in-place accumulators the
loop passes emit (`copy`, `accumulate`, `accumulate_outer`, `accumulate_index`), the
nodes of custom rules (`custom_vjp`, `custom_jvp`), effects (`debug_callback`) and
nested transformations (`call`, `vjp_call`), which route to their node's parameter.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import LoweringError
from ..ir import TensorType
from .indexing import flat_values, index_expression, index_tuple, index_type, positions_source
from .rules import (
    dtype_param,
)
from .table import (
    Deferred,
    Primitive,
    Source,
    Structural,
    register,
)


def _const_type(types: list[TensorType], value: np.ndarray) -> TensorType:
    if not isinstance(value, np.ndarray):
        raise LoweringError(f"const: parameter value must be an array (array([…], 'float64')), "
                            f"got {value!r}")
    return TensorType(tuple(value.shape), dtype_param("const", value.dtype))


register(Primitive(
    name="const", impl=lambda value: value, abstract=_const_type,
    family="constant", promote="none", nondiff=True, unchecked=True,
    compiled=Structural("an array constant of the generated module (a scalar: a literal)"),
    notes="a constant, materialized once when the program is compiled", aliases=True))


# -- Internals of the loop passes: in-place accumulation of a loop's gradient accumulators --


def _same_type(types: list[TensorType]) -> TensorType:
    if any(t != types[0] for t in types[1:]):
        raise LoweringError(f"accumulate: operands differ in type: {types}")
    return types[0]


def _accumulate_impl(acc: np.ndarray, contribution: np.ndarray) -> np.ndarray:
    np.add(acc, contribution, out=acc)
    return acc


class RankOneSum(Deferred):
    """A gradient accumulator receiving one outer product per reverse-loop iteration (the
    weight gradient of `W @ h` in a recurrent body): the vector pairs are collected in
    preallocated buffers and added in blocks as one matrix product, `A.T @ B`, the way a
    hand-written backward pass batches them, instead of forming and adding an n×m outer
    product each iteration. The block size keeps the buffers no larger than the
    accumulator itself (at least 8 pairs). `accumulate_outer` returns it and takes it
    back as its accumulator (its entry's `deferred_result` and `deferred_inputs`)."""

    __slots__ = ("base", "left", "right", "count")

    def __init__(self, base: np.ndarray):
        n, m = base.shape
        block = max(8, (n * m) // (n + m))
        self.base = base
        self.left = np.empty((block, n), base.dtype)
        self.right = np.empty((block, m), base.dtype)
        self.count = 0

    def add(self, a: np.ndarray, b: np.ndarray) -> None:
        k = self.count
        self.left[k] = a  # copies: the vectors may be reused or updated in place later
        self.right[k] = b
        self.count = k + 1
        if self.count == len(self.left):
            self.materialize()

    def peek(self) -> np.ndarray:
        k = self.count
        return self.base + self.left[:k].T @ self.right[:k] if k else self.base

    def materialize(self) -> np.ndarray:
        """The pending block added into the accumulator, which goes on from there."""
        k = self.count
        if k:
            np.add(self.base, self.left[:k].T @ self.right[:k], out=self.base)
            self.count = 0
        return self.base


def _accumulate_outer_impl(acc: Any, a: np.ndarray, b: np.ndarray) -> RankOneSum:
    if type(acc) is not RankOneSum:
        acc = RankOneSum(acc)
    acc.add(a, b)
    return acc


def _outer_product_factors(contribution: Any,
                           producer: Callable[[Any], Any]) -> tuple[list, dict] | None:
    """`mul(reshape(a, (n, 1)), reshape(b, (1, m)))` of float32/float64 vectors a and b,
    computed in the loop, is the outer product `accumulate_outer` takes as [a, b]: the
    weight gradient of a matrix-vector product in a loop body."""
    t = contribution.type
    if t.dtype not in (np.float32, np.float64) or t.ndim != 2:
        return None
    mul = producer(contribution)
    if mul is None or mul.op != "mul":
        return None
    vectors = []
    for v, shape in zip(mul.inputs, ((t.shape[0], 1), (1, t.shape[1]))):
        reshape = producer(v)
        if reshape is None or reshape.op != "reshape" or reshape.inputs[0].type.ndim != 1 or \
                v.type.shape != shape or reshape.inputs[0].type.dtype != v.type.dtype:
            return None
        vectors.append(reshape.inputs[0])
    return vectors, {}


def _accumulate_outer_type(types: list[TensorType]) -> TensorType:
    acc, a, b = types
    if acc.shape != (a.size, b.size) or a.ndim != 1 or b.ndim != 1 or not (
            acc.dtype == a.dtype == b.dtype):
        raise LoweringError(f"accumulate_outer: an {acc} accumulator cannot take the outer "
                            f"product of {a} and {b}")
    return acc


def _copy_source(args, types, out):
    return args[0] if out.shape == () else f"{args[0]}.copy()"


register(Primitive(
    name="copy", impl=lambda x: np.array(x, copy=True), abstract=_same_type, family="internal",
    promote="none", nondiff=True, unchecked=True,
    notes="a fresh buffer: starts a gradient accumulator that `accumulate` then updates",
    compiled=Source(_copy_source)))


def _accumulate_source(args, types, out):
    """acc += c in place (the accumulator is a buffer nothing else sees)."""
    return f"({args[0]} + {args[1]})" if out.shape == () else f"K.add_into({args[0]}, {args[1]})"


register(Primitive(
    name="accumulate", impl=_accumulate_impl, abstract=_same_type, family="internal",
    promote="none",
    nondiff=True, mutates=True,
    notes="acc += contribution in place; emitted only by the loop passes, for a reverse "
          "loop's accumulator whose buffer nothing else can see",
    compiled=Source(_accumulate_source)))


def _accumulate_outer_source(args, types, out):
    """acc += outer(a, b) in place, entry by entry."""
    return f"K.accumulate_outer({', '.join(args)})"


register(Primitive(
    name="accumulate_outer", impl=_accumulate_outer_impl, abstract=_accumulate_outer_type,
    family="internal", promote="none", nondiff=True, mutates=True, factors=_outer_product_factors,
    deferred_result=True, deferred_inputs=(0,),
    notes="acc += outer(a, b), batched into blocks of one matrix product each (RankOneSum); "
          "emitted only by the loop passes, in place of an accumulate of mul(reshape(a, "
          "(n, 1)), reshape(b, (1, m))) for a reverse loop's float32/float64 accumulator",
    compiled=Source(_accumulate_outer_source)))


def _accumulate_index_impl(acc: np.ndarray, contribution: np.ndarray, *dynamic: Any,
                           spec: tuple) -> np.ndarray:
    idx = index_tuple(spec, dynamic)
    if any(isinstance(s, np.ndarray) and s.ndim > 0 for s in idx):
        np.add.at(acc, idx, contribution)
    else:
        acc[idx] += contribution
    return acc


def _scattered_factors(contribution: Any,
                       producer: Callable[[Any], Any]) -> tuple[list, dict] | None:
    """`scatter_add(c, *idx, spec, shape)` computed in the loop (the VJP of `xs[t]`, of
    each row a scan reads) is the contribution `accumulate_index` takes as c at idx."""
    made = producer(contribution)
    if made is None or made.op != "scatter_add":
        return None
    return list(made.inputs), {"spec": made.params["spec"]}


def _accumulate_index_type(types: list[TensorType], spec: tuple) -> TensorType:
    acc, c = types[0], types[1]
    target = index_type([acc, *types[2:]], spec)
    if target != TensorType(c.shape, acc.dtype) or c.dtype != acc.dtype:
        raise LoweringError(f"accumulate_index: spec {spec!r} selects {target} from the {acc} "
                            f"accumulator, but the contribution is {c}")
    return acc


def _accumulate_index_source(args, types, out, spec, const):
    found = positions_source(types[0].shape, spec, args[2:], types[2:], const)
    if found is not None:  # np.add.at's order, into the accumulator (a fresh copy) in place
        positions, count = found
        return (f"K.add_at_positions_into({args[0]}, {positions}, "
                f"{flat_values(args[1], types[1], count)})")
    sub = index_expression(spec, args[2:], types[0].shape, "accumulate_index")
    return f"K.add_at({args[0]}, ({sub}), {args[1]})"


register(Primitive(
    name="accumulate_index", impl=_accumulate_index_impl, abstract=_accumulate_index_type,
    family="internal", promote="none", nondiff=True, mutates=True, factors=_scattered_factors,
    notes="acc[idx] += contribution in place (repeated indices accumulate); emitted only by "
          "the loop passes, in place of an accumulate of a scatter_add made in the loop (the "
          "gradient of xs[t], of each row a scan reads): the work per iteration is the "
          "row's, not the whole accumulator's",
    compiled=Source(_accumulate_index_source, constants=True)))


# -- Custom derivative rules (cfgrad.custom): each node's `rule` parameter is the rule
# object of one cg.custom_vjp / cg.custom_jvp function at one input signature, and does the
# work; these entries only route to it.

CUSTOM = Structural("a function of its own, compiling the program the rule runs forward; its "
                    "derivatives are call and vjp_call nodes of the rule's other programs")
register(Primitive(
    name="custom_vjp", impl=lambda *xs, rule: rule.forward(xs),
    abstract=lambda types, rule: rule.forward_types(),
    vjp=lambda cts, xs, outs, rule: rule.pullback(cts, xs, outs),
    jvp=lambda ts, xs, outs, rule: rule.outputs_and_tangents(ts, xs), family="custom",
    promote="none", multi_output=True, jvp_gives_primal=True, aliases=True, compiled=CUSTOM,
    notes="a cg.custom_vjp function: its fwd runs forward (outputs, then residuals), its bwd "
          "(a `call` of its program) gives the cotangents; forward mode transposes bwd's "
          "derivative in its cotangent (bwd itself where it is linear in it), so both modes "
          "give the rule's derivative, with values from fwd; a derivative of the gradient "
          "differentiates fwd and bwd as ordinary code, bwd at the cotangent that reached it"))
register(Primitive(
    name="custom_jvp", impl=lambda *xs, rule: rule.primal(xs),
    abstract=lambda types, rule: rule.primal_types(),
    vjp=lambda cts, xs, outs, rule: rule.transpose(cts, xs),
    jvp=lambda ts, xs, outs, rule: rule.outputs_and_tangents(ts, xs), family="custom",
    promote="none", multi_output=True, jvp_gives_primal=True, compiled=CUSTOM,
    notes="a cg.custom_jvp function: forward mode traces its JVP rule inline (values "
          "included); reverse mode "
          "transposes that rule (it must be linear in the tangents, as in JAX) by a "
          "`vjp_call` of the rule's program with respect to the tangents", aliases=True))

# -- Effects (cfgrad.debug): a node that calls the user's function at run time with the
# runtime values of its inputs. Its `callback` parameter (a debug.DebugCall) does the
# work and prints as what the user wrote (`print('x = {}')`); like custom rules, the
# node delegates to a user's function.

register(Primitive(
    name="debug_callback", impl=lambda *xs, callback: callback(*xs),
    abstract=lambda types, callback: [], family="custom", promote="none", nondiff=True,
    multi_output=True, effect=True,
    compiled=Structural("a call of the user's function in Numba's object mode "
                        "(kernels.debug_call)"),
    notes="cg.debug.print / cg.debug.callback: calls its function with its inputs' runtime "
          "values where the program runs it, in program order; no results, no derivative; "
          "not run again where a run repeats work (recomputation, the pullback)", aliases=True))

# -- Nested transformations (cfgrad.nested): a transformation applied inside another's trace
# is one node standing for a sub-program. Its `of` parameter is the object that knows the
# sub-program and builds the node's derivative rules from derived programs (the JVP
# program, reverse mode of it), so both rules are ordinary nodes of the same two kinds and
# nesting recurses to any depth.

def _sub_program_primitive(name: str, notes: str) -> Primitive:
    """An entry whose implementation, types and rules are its node's `of` parameter's."""
    return Primitive(
        name=name, impl=lambda *args, of: of.run(args),
        abstract=lambda types, of: of.result_types(types),
        vjp=lambda cts, xs, outs, of: of.cotangents(cts, xs),
        jvp=lambda ts, xs, outs, of: of.outputs_and_tangents(ts, xs), family="transform",
        promote="none", multi_output=True, jvp_gives_primal=True, aliases=True, notes=notes,
        compiled=Structural("a function of its own, compiling the sub-program"))


register(_sub_program_primitive(
    "call", "runs a sub-program (a jvp or value applied inside a traced function); its JVP "
            "is a call of the sub-program's JVP program, its VJP a vjp_call of it"))
register(_sub_program_primitive(
    "vjp_call", "the pullback of a sub-program (grad or vjp applied inside a traced "
                "function): its parameters' cotangents from its outputs' cotangents, by a "
                "taped run and its adjoint under the call's checkpoint strategy; the JVP of "
                "it is reverse mode of the sub-program's JVP program (a Hessian-vector "
                "product; with custom rules, of its second-order JVP program, where each "
                "rule differentiates its fwd and bwd as ordinary code), its VJP a call of "
                "that JVP program and reverse mode of it (with a bwd not linear in its "
                "cotangent, one reverse pass of the second-order program per input element)"))
