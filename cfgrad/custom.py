"""Custom derivative rules and `stop_gradient`, JAX-style.

`cg.custom_vjp` pairs a function with a forward rule `fwd(*args) -> (out, residuals)` and a
backward rule `bwd(residuals, cotangent) -> one cotangent per argument`; `cg.custom_jvp`
pairs it with `jvp(primals, tangents) -> (out, tangent_out)`. Traced, a call becomes one
node of its own (`custom_vjp` / `custom_jvp`) whose `rule` parameter is the object below
for that input signature: the rules are lowered once to Programs of their own and run by
the interpreter, so they may use cfgrad.numpy and cfgrad control flow, and the node sits
in cond branches and loop bodies like any other (checkpointing saves or replays its
residuals with the rest of the iteration).

Reverse mode through a custom_jvp function transposes its JVP rule: the rule's tangent
output is traced as a program of the tangents, and the reverse builder differentiates
that program, which for a rule linear in the tangents (as JAX requires) is exactly the
transpose.

Inside its own rules a call of the function is the function again, as in JAX: where the
rule runs it computes the primal (so `def f_fwd(x): return f(x), residuals` works), and
where the rule is differentiated (a derivative of a gradient) its rule gives its
derivative once more. A custom_jvp rule's output and tangent are traced inline into the
JVP program, a call of the function in it is the function's node; inside a custom_vjp's
`fwd` and `bwd` it is `custom_vjp.within_rules`, since the node itself would run fwd
inside fwd.

Redefining a rule makes every Program lowered with the old one stale: it starts a new
lowering epoch (trace.py), and lowering caches (the rule objects here, the api's
per-signature cache) are valid only for the epoch they were built in.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from . import tree as treelib
from .caches import SIGNATURES_PER_FUNCTION, BoundedDict
from .convert import converted
from .errors import ArgumentTypeError, TracerBoolError, require_callable
from .interpret import Compiled, Machine, as_runtime_value
from .ir import Node, Program, TensorType, type_of
from .linearity import custom_vjp_rules, linear_in
from .nested import Call, Pullback, add_contributions, filled, sub_programs
from .primitives import bind
from .reverse import active_values
from .trace import Tracer, invalidate_lowerings, lowering_epoch, trace_program
from .trace_context import LOWERING_LOCK, tracing
from .verify import verify


def stop_gradient(x: Any) -> Any:
    """`x` itself, but no gradient flows through it (a pytree of arrays or tracers)."""
    return treelib.tree_map(lambda leaf: bind("stop_gradient", leaf), x)


def _dummies(types: list[TensorType]) -> list[np.ndarray]:
    return [np.zeros(t.shape, t.dtype) for t in types]


def _types(leaves: list[Any]) -> list[TensorType]:
    return [x.value.type if isinstance(x, Tracer) else type_of(x) for x in leaves]


def _custom_nodes(program: Program) -> list[Node]:
    """The custom rules' nodes of `program` and of the programs its `call` and `vjp_call`
    nodes stand for, at any depth."""
    programs = [program] + [p for _, p in sub_programs(program)]
    return [n for p in programs for b in p.blocks for n in b.nodes
            if n.op in ("custom_vjp", "custom_jvp")]


def _refuse_forward_mode_through_clipping(program: Program, what: str,
                                          itself: custom_jvp | None = None,
                                          own_problem: str | None = None) -> None:
    """A derivative of a gradient differentiates a rule's code (`what`, lowered as
    `program`) in forward mode, as cfgrad's units do. A custom_vjp called there whose bwd
    is not linear in its cotangent (a clipped gradient) has no forward mode: JAX's
    forward mode refuses it (its reverse mode over reverse mode differentiates it by its
    bwd at the cotangent that reached it, which forward mode never sees). So does a call
    of the function `itself` inside its own rules where its bwd is such (`own_problem`)."""
    for rule in custom_vjp_rules(program):
        problem = rule.bwd_problem()
        if problem is not None:
            break
    else:
        own = [n for n in _custom_nodes(program) if n.params["rule"].fn is itself]
        if own_problem is None or not own:
            return
        problem = own_problem
    raise ArgumentTypeError(
        f"a derivative of a gradient differentiates {what} in forward mode, but it calls a "
        f"custom_vjp function that has none: {problem} (its forward mode would not clip); "
        "JAX's forward mode refuses it too. Compute that call's plain value inside the "
        "rule, or give the inner function a cg.custom_jvp rule")


def _run(compiled: Compiled, args: Any) -> tuple:
    m = Machine(compiled)  # untaped: no strategy keeps anything, none is made per call
    return tuple(as_runtime_value(o) for o in m.run([as_runtime_value(a) for a in args]))


class _Signature:
    """What every rule object knows: the function, its argument structure and types, and
    (once `lower_primal` ran) its output structure and types."""

    out_tree: treelib.TreeDef

    def __init__(self, fn: _CustomFunction, in_tree: treelib.TreeDef,
                 in_types: list[TensorType]):
        self.fn = fn
        self.name = fn.__name__
        self.in_tree = in_tree
        self.in_types = in_types
        self.float_inputs = [i for i, t in enumerate(in_types) if t.is_float]
        self.result_types: list[TensorType] = []
        self.n_out = 0

    def __repr__(self) -> str:
        return f"{self.fn.node_op}({self.name})"

    def args(self, leaves: list[Any]) -> tuple:
        return treelib.unflatten(self.in_tree, list(leaves))

    def float_tangents(self, ts: list[Any]) -> list[Any]:
        """The tangents of the float inputs, zeros for None: what a unit node takes."""
        return filled([ts[i] for i in self.float_inputs],
                      [self.in_types[i] for i in self.float_inputs])

    def per_input(self, float_values: list[Any], zeros: bool = False) -> list[Any]:
        """One entry per input from one per float input: None (or, with `zeros`, zeros of
        the input's type) for the others."""
        result: list[Any] = [None] * len(self.in_types)
        for i, v in zip(self.float_inputs, float_values):
            result[i] = v
        return filled(result, self.in_types) if zeros else result

    def make_unit(self, values_and_tangents: Callable[[list, list], tuple[list, list]],
                  residuals: Callable[[list, list, list, list], tuple],
                  cotangents: Callable[[tuple, list, list], tuple[list, list]]) -> _VJPRule:
        """The rule of a unit (see `unit`): a custom_vjp function of (inputs, their float
        tangents) -> (outputs, their tangents), with
        - `values_and_tangents(u, du)` -> (values, tangents) of the outputs, then any extra
          values the unit keeps as residuals (`residuals(u, du, values, tangents)`);
        - `cotangents(residuals, dȳ, ȳ)` -> (dū, ū): ū the rule's first-order cotangents of
          the float inputs for the outputs' cotangents ȳ, dū the derivative of ū along
          the residuals' tangents and dȳ, for every input."""
        n = self.n_out

        def primal(u: tuple, du: tuple) -> tuple:
            values, tangents = values_and_tangents(list(u), list(du))
            return tuple(values[:n]), tuple(tangents[:n])

        def fwd(u: tuple, du: tuple) -> tuple:
            values, tangents = values_and_tangents(list(u), list(du))
            return ((tuple(values[:n]), tuple(tangents[:n])),
                    residuals(list(u), list(du), values, tangents))

        def bwd(res: tuple, ct: tuple) -> tuple:
            second, first = cotangents(res, list(ct[0]), list(ct[1]))
            return tuple(self.per_input(second, zeros=True)), tuple(first)

        unit = custom_vjp(primal)
        unit.__name__ = f"{self.name}.unit"
        unit.defvjp(fwd, bwd)
        leaves = _dummies(self.in_types) + _dummies([self.in_types[i]
                                                     for i in self.float_inputs])
        args = (tuple(leaves[:len(self.in_types)]), tuple(leaves[len(self.in_types):]))
        return unit._rule(treelib.flatten(args)[1], _types(leaves))

    def check_leaves(self, what: str, got: list[Any], want: list[TensorType],
                     whose: str = "") -> None:
        types = [x.value.type if isinstance(x, Tracer) else type_of(x) for x in got]
        if len(types) != len(want) or any(
                a.shape != b.shape or a.dtype != b.dtype for a, b in zip(types, want)):
            raise ArgumentTypeError(
                f"{self.name}: {what} gives {[str(t) for t in types]}, expected "
                f"{[str(t) for t in want]}{whose}")

    def check_output(self, what: str, out: Any) -> list[Any]:
        """The leaves of `out`, which a rule gives in place of the function's own output
        (or as its tangent), so it must have the same structure, shapes and dtypes: else
        the traced function would return something else than the eager one."""
        leaves, tree = treelib.flatten(out)
        if tree != self.out_tree:
            raise ArgumentTypeError(
                f"{self.name}: {what} has structure {tree.describe()}, but {self.name} "
                f"returns {self.out_tree.describe()}")
        self.check_leaves(what, leaves, self.result_types, f" (what {self.name} returns)")
        return leaves

    def lower(self, fun: Callable, types: list[TensorType], name: str, home: Callable,
              calls: Callable | None = None) -> Program:
        """Trace `fun` on leaves of `types`, with the function's own calls inside it
        calling `calls` (by default its primal; see _CustomFunction.calls_become); `home`
        is the user's function (the primal or a rule) that `fun` wraps."""
        with self.fn.calls_become(calls or self.fn.fun):
            try:
                return trace_program(fun, tuple(_dummies(types)), name=name, home=home)
            except TracerBoolError as exc:  # the line is named; say why it was traced
                exc.add_note(f"(while tracing {name}: a {self.fn.node_op} function and its "
                             "rules are traced like any function under cfgrad's "
                             "transformations, as in JAX)")
                raise

    def lower_primal(self) -> Program:
        """The function itself at this signature; records its output structure and types."""
        def primal_flat(*leaves: Any) -> list[Any]:
            out_leaves, self.out_tree = treelib.flatten(self.fn.fun(*self.args(leaves)))
            return out_leaves

        program = self.lower(primal_flat, self.in_types, self.name, self.fn.fun)
        self.result_types = [v.type for v in program.outputs]
        self.n_out = len(self.result_types)
        return program


class _VJPRule(_Signature):
    def __init__(self, fn: custom_vjp, in_tree: treelib.TreeDef, in_types: list[TensorType]):
        super().__init__(fn, in_tree, in_types)
        # the rule as defined now: the backward program is lowered lazily, and a pullback
        # made before a redefinition must keep using the rule its forward ran with
        self.bwd_rule = fn.bwd
        self.lower_primal()  # only for its signature, which fwd's output must match

        def fwd_flat(*leaves: Any) -> list[Any]:
            result = fn.fwd(*self.args(leaves))
            if not (isinstance(result, tuple) and len(result) == 2):
                raise ArgumentTypeError(f"{self.name}: fwd must return (output, residuals)")
            out_leaves = self.check_output("fwd's output", result[0])
            res_leaves, self.res_tree = treelib.flatten(result[1])
            return out_leaves + res_leaves

        self.fwd_program = self.lower(fwd_flat, in_types, f"{self.name}.fwd", fn.fwd,
                                      calls=fn.within_rules)
        # what the node runs (cg.jit compiles this program as a function of its own)
        self.compiled = Compiled(self.fwd_program)
        self.out_types = [v.type for v in self.fwd_program.outputs]
        self._forward_call: Call | None = None
        self._backward_call: Call | None = None
        self._unit: _VJPRule | None = None
        self._bwd_problem: str | None = None  # "" once bwd was found linear

    # forward
    def forward_types(self) -> list[TensorType]:
        return self.out_types

    def forward(self, xs: tuple) -> tuple:
        return _run(self.compiled, xs)

    # reverse, at build time: a `call` of the bwd program, which an outer transformation
    # differentiates as ordinary code (as JAX does)
    def pullback(self, cts: list[Any], xs: list[Any], outs: list[Any]) -> tuple:
        main = filled(cts[: self.n_out], self.out_types)
        float_cts = bind("call", *outs[self.n_out:], *main, of=self.backward_call())
        result: list[Any] = [None] * len(xs)
        for i, ct in zip(self.float_inputs, float_cts):
            result[i] = ct
        if any(c is not None for c in cts[self.n_out:]):
            # a derivative of the gradient reaches the residuals: fwd is ordinary code there
            through_fwd = self.forward_call().cotangents(
                [None] * self.n_out + list(cts[self.n_out:]), xs)
            result = [add_contributions(r, c) for r, c in zip(result, through_fwd)]
        return tuple(result)

    # forward mode, at build time: the outputs' tangents transpose bwd (linear in its
    # cotangents), so they are the custom rule's own derivative; the values, and the
    # residuals' tangents, come from fwd as ordinary code (one `call` of its JVP program).
    # A derivative of these tangents (the Hessian of a function using the rule) then
    # differentiates fwd and bwd as ordinary code, as JAX does: where the program reads
    # the function's output again, its derivative there is fwd's, not the rule's.
    def outputs_and_tangents(self, ts: list[Any], xs: list[Any]) -> tuple[list, list]:
        values = self.forward_call().jvp_outputs(list(xs), ts)
        outs, fwd_tangents = values[:len(self.out_types)], values[len(self.out_types):]
        return outs, self.rule_tangents(outs[self.n_out:], ts) + list(fwd_tangents[self.n_out:])

    def rule_tangents(self, residuals: list[Any], ts: list[Any]) -> list[Any]:
        """The outputs' tangents along `ts` (one per input, None for zero) by the rule: bwd
        at `residuals` transposed, by reverse mode of the bwd program in its cotangents
        (None for a non-float output)."""
        n_res = len(residuals)
        dx = filled([ts[i] for i in self.float_inputs],
                    [self.in_types[i] for i in self.float_inputs])
        cts = _dummies(self.out_types[: self.n_out])
        wrt = tuple(range(n_res, n_res + self.n_out))
        transposed = bind("vjp_call", *residuals, *cts, *dx,
                          of=self.backward_call().pullback_of(wrt, None, of_jvp=False))
        return [transposed[n_res + i] if t.is_float else None
                for i, t in enumerate(self.out_types[: self.n_out])]

    # the derivative of a gradient (nested.py's second-order JVP program): the node as JAX's
    # outer transformation sees a custom_vjp's expansion, fwd and bwd as ordinary code
    def unit(self, ts: list[Any], xs: list[Any], active: list[bool]) -> tuple[list, list]:
        """Values, residuals and their tangents by fwd as ordinary code (one `call` of its
        JVP program); in reverse mode, for the outputs' cotangent ȳ and its derivative dȳ:
        ū = bwd(r, ȳ), at the cotangent that reached the node, and dū = bwd's derivative
        at (r, ȳ) along (ṙ, dȳ). A bwd that is not linear in ȳ (a clipped gradient) is
        differentiated where it ran, as JAX differentiates it. (The unit takes every
        input, `active` or not: an inactive one's cotangents reach nothing.)"""
        if self._unit is None:
            self._unit = self._lower_unit()
        outs = bind("custom_vjp", *xs, *self.float_tangents(ts), rule=self._unit)
        n, m = self.n_out, len(self.out_types)
        values, tangents = list(outs[:n]), list(outs[n:2 * n])
        residuals = list(outs[2 * n:])
        return values + residuals[:m - n], tangents + residuals[m - n:]

    def _lower_unit(self) -> _VJPRule:
        for what, program in (("fwd", self.fwd_program), ("bwd", self.backward_call().program)):
            _refuse_forward_mode_through_clipping(program, f"{self.name}'s {what}",
                                                  self.fn.within_rules, self.bwd_problem())

        def values_and_tangents(u: list, du: list) -> tuple[list, list]:
            outs = self.forward_call().jvp_outputs(u, self.per_input(du))
            return outs[:len(self.out_types)], outs[len(self.out_types):]

        def residuals(u: list, du: list, values: list, tangents: list) -> tuple:
            return tuple(values[self.n_out:]), tuple(tangents[self.n_out:])

        def cotangents(res: tuple, dy_bar: list, y_bar: list) -> tuple[list, list]:
            r, dr = list(res[0]), list(res[1])
            bwd = self.backward_call()
            first = list(bind("call", *r, *y_bar, of=bwd))
            second = bwd.jvp_call(r + y_bar, dr + dy_bar)
            return second, first

        return self.make_unit(values_and_tangents, residuals, cotangents)

    def second_order_problem(self) -> str | None:
        """Why the derivative of a gradient through this rule needs its unit, or None: the
        transpose of bwd (forward mode's rule, `rule_tangents`) is then exactly bwd's
        derivative, which holds when bwd is linear in its cotangent and neither fwd nor
        bwd calls another custom function (whose rule would be differentiated once more
        instead of being used)."""
        problem = self.bwd_problem()
        if problem is not None:
            return problem
        for program in (self.fwd_program, self.backward_call().program):
            for node in _custom_nodes(program):
                if node.params["rule"].fn is not self.fn.within_rules:
                    return f"{program.name} calls {node.params['rule']!r}"
        return None

    def bwd_problem(self) -> str | None:
        """Why bwd is not linear in its cotangent (`clip` at its line), or None."""
        if self._bwd_problem is None:
            n_res = len(self.out_types) - self.n_out
            program = self.backward_call().program
            verdict = linear_in(program, list(range(n_res, len(program.params))))
            self._bwd_problem = (
                "" if verdict.linear else
                f"{self.name}'s bwd is not linear in its cotangent: {verdict.culprit}")
        return self._bwd_problem or None

    def forward_call(self) -> Call:
        if self._forward_call is None:
            self._forward_call = Call(self.fwd_program)
        return self._forward_call

    def backward_call(self) -> Call:
        """The bwd program as a `call` node's sub-program, lowered on first use."""
        if self._backward_call is None:
            self._lower_backward()
        assert self._backward_call is not None
        return self._backward_call

    def _lower_backward(self) -> None:
        n_res = len(self.out_types) - self.n_out

        def bwd_flat(*leaves: Any) -> list[Any]:
            residuals = treelib.unflatten(self.res_tree, list(leaves[:n_res]))
            ct = treelib.unflatten(self.out_tree, list(leaves[n_res:]))
            result = self.bwd_rule(residuals, ct)
            if not isinstance(result, tuple) or len(result) != len(self.in_tree.children):
                raise ArgumentTypeError(
                    f"{self.name}: bwd must return a tuple with one cotangent per argument "
                    f"({len(self.in_tree.children)}), got {type(result).__name__}")
            flat: list[Any] = []
            for arg_tree, ct_arg in zip(self.in_tree.children, result):
                if ct_arg is None:  # no gradient for this argument
                    flat += [None] * arg_tree.num_leaves
                    continue
                leaves_i, tree_i = treelib.flatten(ct_arg)
                if tree_i != arg_tree:
                    raise ArgumentTypeError(
                        f"{self.name}: bwd returned {tree_i.describe()} for an argument of "
                        f"structure {arg_tree.describe()}")
                flat += leaves_i
            types = [self.in_types[i] for i in self.float_inputs]
            out = filled([flat[i] for i in self.float_inputs], types)
            self.check_leaves("bwd", out, types)
            return out

        types = self.out_types[self.n_out:] + self.out_types[: self.n_out]
        # bwd runs only in pullbacks, for the first time there: its debug prints show
        self._backward_call = Call(self.lower(bwd_flat, types, f"{self.name}.bwd", self.bwd_rule,
                                              calls=self.fn.within_rules), first_run=True)


class _JVPRule(_Signature):
    def __init__(self, fn: custom_jvp, in_tree: treelib.TreeDef, in_types: list[TensorType]):
        super().__init__(fn, in_tree, in_types)
        self.jvp_rule = fn.jvp  # as defined now (the transpose is lowered lazily)
        self.primal_program = self.lower_primal()
        # what the node runs (cg.jit compiles this program as a function of its own)
        self.compiled = Compiled(self.primal_program)
        self._transpose_pullback: Pullback | None = None
        self._unit: _VJPRule | None = None

    def primal_types(self) -> list[TensorType]:
        return self.result_types

    def primal(self, xs: tuple) -> tuple:
        return _run(self.compiled, xs)

    def _rule_outputs(self, primals: list[Any], tangents: list[Any]) -> tuple[list, list]:
        """The user's rule, called with pytrees: its output's leaves and its tangent's.

        Traced into a JVP program, a call of the function inside its rule is the function
        again, as in JAX: a node whose rule is expanded only when that node is
        differentiated, at the next order, so tracing the rule never recurses."""
        result = self.jvp_rule(self.args(primals), self.args(tangents))
        if not (isinstance(result, tuple) and len(result) == 2):
            raise ArgumentTypeError(f"{self.name}: the jvp rule must return (output, tangent)")
        return (self.check_output("the jvp rule's output", result[0]),
                self.check_output("the jvp rule's tangent", result[1]))

    # forward mode, at build time: the rule is traced inline into the JVP program, values
    # included, so a derivative of the tangents (a Hessian) differentiates the rule's
    # output as ordinary code, as JAX does (a rule returning x·y for the product is
    # differentiated as x·y there, whatever its tangent says)
    def outputs_and_tangents(self, ts: list[Any], xs: list[Any]) -> tuple[list, list]:
        with tracing(xs[0]._cfgrad_trace):
            return self._rule_outputs(list(xs), filled(ts, self.in_types))

    # reverse mode, at build time: reverse mode of the rule's program of the tangents (a
    # `vjp_call` with respect to the tangents), which for a rule linear in the tangents is
    # its transpose. It only runs in a reverse pass: derivatives of a gradient are built
    # from the JVP program (nested.py), never by differentiating a reverse pass
    def transpose(self, cts: list[Any], xs: list[Any]) -> tuple:
        n = len(self.in_types)
        main = filled(cts, self.result_types)
        cotangents = bind("vjp_call", *xs, *_dummies(self.in_types), *main,
                          of=self._transpose())
        result: list[Any] = [None] * n
        for i in self.float_inputs:
            result[i] = cotangents[n + i]
        return tuple(result)

    # the derivative of a gradient (nested.py's second-order JVP program)
    def unit(self, ts: list[Any], xs: list[Any], active: list[bool]) -> tuple[list, list]:
        """Values and tangents by the rule's primal output as ordinary code (a call of the
        function inside it is the function again, as in JAX); in reverse mode, for the
        outputs' cotangent ȳ and its derivative dȳ: ū = the rule's transpose at ȳ and dū
        its derivative along the inputs' tangents and dȳ."""
        if self._unit is None:
            self._unit = self._lower_unit()
        outs = bind("custom_vjp", *xs, *self.float_tangents(ts), rule=self._unit)
        n = self.n_out
        return list(outs[:n]), list(outs[n:2 * n])

    def _lower_unit(self) -> _VJPRule:
        n = len(self.in_types)

        def rule_primal(*leaves: Any) -> list[Any]:
            return self._rule_outputs(list(leaves), _dummies(self.in_types))[0]

        program = self.lower(rule_primal, self.in_types, f"{self.name}.jvp_primal",
                             self.jvp_rule, calls=self.fn.node)
        _refuse_forward_mode_through_clipping(program, f"{self.name}'s jvp rule")
        primal_output = Call(program)

        def values_and_tangents(u: list, du: list) -> tuple[list, list]:
            outs = primal_output.jvp_outputs(u, self.per_input(du))
            return outs[:self.n_out], outs[self.n_out:]

        def residuals(u: list, du: list, values: list, tangents: list) -> tuple:
            return tuple(u), tuple(du)

        transpose = self._outer_transpose()
        _refuse_forward_mode_through_clipping(transpose.program, f"{self.name}'s jvp rule")

        def cotangents(res: tuple, dy_bar: list, y_bar: list) -> tuple[list, list]:
            u, du = list(res[0]), list(res[1])
            outs, tangents = transpose.outputs_and_tangents(
                [*self.per_input(du), *[None] * n, *dy_bar],
                [*u, *_dummies(self.in_types), *y_bar])
            floats = [n + i for i in self.float_inputs]
            return (filled([tangents[k] for k in floats],
                           [self.in_types[i] for i in self.float_inputs]),
                    [outs[k] for k in floats])

        return self.make_unit(values_and_tangents, residuals, cotangents)

    def _transpose(self) -> Pullback:
        """Reverse mode, with respect to the tangents, of the program (primals, tangents)
        -> the rule's tangent output. A call of the function inside the rule computes its
        primal here, as JAX inlines the function when it transposes: a call on the
        tangents (a linear function whose rule is itself) is transposed as ordinary code,
        not by this pullback again without end; the values are the same either way."""
        if self._transpose_pullback is None:
            self._transpose_pullback = self._tangent_pullback(
                self._tangent_program(self.fn.fun, "jvp_rule"))
        return self._transpose_pullback

    def _outer_transpose(self) -> Pullback:
        """The transpose as JAX's outer transformation sees it, for a derivative of it
        (the unit): a call of the function on the primals (a coefficient, such as the
        rule's own output) is the function again, differentiated by its rule, and one on
        the tangents its primal, as in `_transpose` (the function's rule there would be
        this transpose again, without end)."""
        program = self._tangent_program(self.fn.node, "jvp_rule_outer")
        n = len(self.in_types)
        on_tangents = active_values(program, frozenset(range(n, 2 * n)))
        for block in program.blocks:
            block.nodes = [
                Node("call", node.inputs, {"of": Call(node.params["rule"].primal_program)},
                     node.outputs, node.loc)
                if node.op == "custom_jvp" and node.params["rule"].fn is self.fn
                and any(v in on_tangents for v in node.inputs) else node
                for node in block.nodes]
        return self._tangent_pullback(verify(program))

    def _tangent_program(self, calls: Callable, name: str) -> Program:
        """The rule's tangent output as a program of (primals, tangents), where a call of
        the function is `calls`."""
        n = len(self.in_types)

        def linear(*leaves: Any) -> list[Any]:
            return self._rule_outputs(list(leaves[:n]), list(leaves[n:]))[1]

        return self.lower(linear, self.in_types + self.in_types, f"{self.name}.{name}",
                          self.jvp_rule, calls=calls)

    def _tangent_pullback(self, program: Program) -> Pullback:
        """Reverse mode of a tangent program with respect to the tangents."""
        n = len(self.in_types)
        return Pullback(program, tuple(n + i for i in self.float_inputs), None)


class _CustomFunction:
    """Shared by custom_vjp and custom_jvp: eager calls run the function itself; traced
    calls become one node whose rule object is cached per input signature."""

    rule_class: type
    node_op: str

    def __init__(self, fun: Callable):
        require_callable(fun, self.node_op, "the function")
        functools.update_wrapper(self, fun)
        self.fun = converted(fun)  # its Python control flow works on traced values too
        self._rules: dict[Any, Any] = BoundedDict(SIGNATURES_PER_FUNCTION)
        self._rules_epoch = lowering_epoch()
        # what a call of the function is while code of its own is lowered (innermost last)
        self._inside: list[Callable] = []

    def _ready(self) -> None:
        raise NotImplementedError

    def _redefined(self) -> None:
        """A new rule: lowerings that used the old one (the rule objects here, and any
        Program that holds them, also inside other functions' rules) are stale."""
        if self._rules:
            invalidate_lowerings()
        self._rules.clear()

    @contextmanager
    def calls_become(self, target: Callable) -> Iterator[None]:
        """Calls of the function inside the code lowered now call `target` instead of
        becoming this function's node: inside the function itself its primal (`fun`),
        whose node would lower it again without end; inside a custom_vjp's fwd and bwd
        the function as it is within its rules (`custom_vjp.within_rules`)."""
        with LOWERING_LOCK:  # the stack is shared by threads: only the tracing one sets it
            self._inside.append(target)
            try:
                yield
            finally:
                self._inside.pop()

    def _rule(self, in_tree: treelib.TreeDef, types: list[TensorType]) -> Any:
        """The rule object for this input signature, lowered on first use in an epoch."""
        if self._rules_epoch != lowering_epoch():
            self._rules.clear()
            self._rules_epoch = lowering_epoch()
        key = (in_tree, tuple(types))
        rule = self._rules.get(key)
        if rule is None:
            rule = self._rules[key] = self.rule_class(self, in_tree, types)
        return rule

    def __call__(self, *args: Any) -> Any:
        leaves = treelib.flatten(args)[0]
        if not any(isinstance(x, Tracer) for x in leaves):
            return self.fun(*args)
        if self._inside:
            return self._inside[-1](*args)
        return self.node(*args)

    def node(self, *args: Any) -> Any:
        """The function's node in the trace being built, for traced arguments."""
        leaves, in_tree = treelib.flatten(args)
        self._ready()
        rule = self._rule(in_tree, _types(leaves))
        outs = bind(self.node_op, *leaves, rule=rule)
        return treelib.unflatten(rule.out_tree, list(outs[: rule.n_out]))


class custom_vjp(_CustomFunction):  # noqa: N801 - the JAX name
    """A function with a user-supplied reverse-mode rule: `f.defvjp(fwd, bwd)`."""

    rule_class = _VJPRule
    node_op = "custom_vjp"

    def __init__(self, fun: Callable):
        super().__init__(fun)
        self.fwd: Callable | None = None
        self.bwd: Callable | None = None

    def defvjp(self, fwd: Callable, bwd: Callable) -> None:
        require_callable(fwd, f"{self.__name__}.defvjp", "fwd")
        require_callable(bwd, f"{self.__name__}.defvjp", "bwd")
        self.fwd, self.bwd = converted(fwd), converted(bwd)
        self._redefined()

    @functools.cached_property
    def within_rules(self) -> custom_jvp:
        """The function inside its own fwd and bwd, as JAX has it: its primal where it
        runs (a node running fwd would run fwd inside fwd, without end), and, where it is
        differentiated, its own rule again — values and residuals from fwd, tangents by
        bwd transposed — so a derivative of fwd or bwd (a Hessian) uses the rule for
        their calls of the function at every order."""
        inner = custom_jvp(self.fun)
        inner.defjvp(self._jvp_by_rule)
        return inner

    def _jvp_by_rule(self, primals: tuple, tangents: tuple) -> tuple:
        """within_rules' JVP rule: this function's custom derivative, as JAX's forward
        mode of a custom_vjp (which cfgrad's node has too, `_VJPRule.rule_tangents`)."""
        leaves, in_tree = treelib.flatten(primals)
        rule = self._rule(in_tree, _types(leaves))
        outs = list(bind("call", *leaves, of=rule.forward_call()))
        dx = rule.rule_tangents(outs[rule.n_out:], treelib.flatten(tangents)[0])
        tangent = filled(dx, rule.out_types[: rule.n_out])
        return (treelib.unflatten(rule.out_tree, outs[: rule.n_out]),
                treelib.unflatten(rule.out_tree, tangent))

    def _ready(self) -> None:
        if self.fwd is None:
            raise ArgumentTypeError(f"custom_vjp function {self.__name__} has no rule: call "
                                    f"{self.__name__}.defvjp(fwd, bwd) first")


class custom_jvp(_CustomFunction):  # noqa: N801 - the JAX name
    """A function with a user-supplied forward-mode rule: `@f.defjvp` on
    `jvp(primals, tangents) -> (out, tangent_out)`; reverse mode transposes it."""

    rule_class = _JVPRule
    node_op = "custom_jvp"

    def __init__(self, fun: Callable):
        super().__init__(fun)
        self.jvp: Callable | None = None

    def defjvp(self, jvp: Callable) -> Callable:
        require_callable(jvp, f"{self.__name__}.defjvp", "the rule")
        self.jvp = converted(jvp)
        self._redefined()
        return jvp

    def _ready(self) -> None:
        if self.jvp is None:
            raise ArgumentTypeError(f"custom_jvp function {self.__name__} has no rule: "
                                    f"decorate its rule with @{self.__name__}.defjvp")
