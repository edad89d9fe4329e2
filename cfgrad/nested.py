"""Transformations applied inside another transformation's trace: derivatives of
derivatives.

When `grad`, `value_and_grad`, `vjp` or `jvp` is called while a function is being traced,
it cannot run: its inputs are not known yet. It traces its own function into a sub-program
P instead (values of the enclosing trace that the function closes over become extra
parameters of P, `trace.trace_nested`) and emits one node into the enclosing trace:

- `call` (of a `Call`): runs P, or P's JVP program for a `jvp`;
- `vjp_call` (of a `Pullback`): P's parameters' cotangents from its outputs' cotangents,
  by a taped run of P and its adjoint, under the call's checkpoint strategy.

Both nodes are differentiable with rules built from derived programs, which is all
higher order needs (JAX's facts; notation: J = the JVP program of P, `jvp(P)`, with
parameters (x, dx) and results (y, dy)):

- JVP of `call P` along dx: the tangent results of `call J (x, dx)`.
- VJP of `call P` for cotangents c: `vjp_call P (x, c)`.
- JVP of `g = vjp_call P (x, c)` along (dx, dc). Without custom rules g is linear in c, so
  its tangent is `vjp_call P (x, dc)` plus D_x[J_P(x)ᵀ c] dx, the derivative in x of
  `c · J_P(x) dx` (symmetric second derivatives): reverse mode of J with cotangent (0, c)
  on its results, `vjp_call J (x, dx, 0, c)`, first n results, a Hessian-vector product by
  reverse over forward, without reversing a reverse. With custom rules, the tangent JAX
  gives is forward mode over P's reverse pass with each rule's fwd and bwd as ordinary
  code (a bwd that clips its cotangent is differentiated where it ran, at the cotangent
  that reached it): reverse mode of K, P's second-order JVP program (J with each custom
  rule the gradient differentiates replaced by its unit, custom.py), with cotangent
  (dc, c) on its results, `vjp_call K (x, dx, dc, c)`, whose first n results are the
  tangent and whose next are g (`Pullback._through_units`).
- VJP of `g = vjp_call P (x, c)` for cotangents ḡ: where J is the transpose of P's reverse
  pass (no custom_vjp rule whose bwd is not linear in its cotangent or calls another
  custom function, `Pullback.transposes_by_rule`), ḡ · g = c · J_P(x) ḡ, so the cotangent
  of c is `call J (x, ḡ)`'s tangent results and that of x is `vjp_call J (x, ḡ, 0, c)`,
  first n results. Elsewhere each element of the cotangents is ḡ · dg along a basis
  vector, one reverse pass of K each (`Pullback._column`).

Every reverse pass is an ordinary reverse pass of an ordinary Program, so while loops with
data-dependent trip counts, the control log and every checkpoint strategy work at every
order, and results do not depend on the strategy.

Forward over reverse, reverse over reverse and JAX then agree also for custom rules whose
derivative field is not a gradient (a rule for x·y that drops y's part), whose bwd clips,
or that call other custom functions: each composition is a derivative of the reverse pass
JAX differentiates.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import numpy as np

from . import numpy as cnp
from . import tree as treelib
from .anomaly import anomaly_detection_enabled, detect_anomaly
from .checkpoint import RunStats, resolve
from .errors import ArgumentTypeError, LoweringError
from .forward_mode import build_jvp
from .interpret import (
    Compiled,
    GradPlan,
    Machine,
    as_runtime_value,
    differentiate,
    execute,
    repeating,
)
from .ir import Program, TensorType
from .linearity import custom_vjp_rules
from .primitives import bind
from .reverse import active_values
from .trace import Tracer, fori_loop, trace_nested, trace_program
from .trace_context import LOWERING_LOCK, current_trace

# Where the statistics of nested pullbacks' runs go while `recorded_runs()` is active.
_RUN_SINK: contextvars.ContextVar[list[tuple[str, RunStats]] | None] = \
    contextvars.ContextVar("cfgrad_nested_runs", default=None)
# That list, or None when nobody records: a compiled function asks before every call (the
# bound method itself, so that asking costs no Python frame), and records only if asked.
current_run_sink = _RUN_SINK.get


@contextmanager
def recorded_runs() -> Iterator[list[tuple[str, RunStats]]]:
    """Collect, while active, the statistics of every taped run a `vjp_call` node makes:
    (the node's `of`, e.g. "vjp(f, wrt=[0])", its RunStats). A second derivative's
    outer run reports only its own loops; the loops of the sub-programs it differentiates
    run inside these nodes, each under its strategy, and this is where their trip counts,
    recomputations and peak snapshots can be read."""
    runs: list[tuple[str, RunStats]] = []
    token = _RUN_SINK.set(runs)
    try:
        yield runs
    finally:
        _RUN_SINK.reset(token)


# The checkpoint choice of the call whose run is executing nested nodes: a loop of a
# sub-program that chose no strategy, under a nested transformation that chose none, takes
# the enclosing call's, as the call's own loops do (precedence: the loop's own, then the
# nearest enclosing transformation's).
_CALL_CHECKPOINT: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "cfgrad_call_checkpoint", default=None)


@contextmanager
def call_checkpoint(choice: Any) -> Iterator[None]:
    """Run nested nodes under a call's `checkpoint=` (None: keep the enclosing choice)."""
    if choice is None:
        yield
        return
    token = _CALL_CHECKPOINT.set(choice)
    try:
        yield
    finally:
        _CALL_CHECKPOINT.reset(token)


def _zeros(t: TensorType) -> np.ndarray:
    return np.zeros(t.shape, t.dtype)


def filled(values: list[Any], types: list[TensorType]) -> list[Any]:
    """`values` with each None (a zero tangent or cotangent) made the zeros of its type:
    what a node's operands must be."""
    return [_zeros(t) if v is None else v for v, t in zip(values, types)]


def _as_type(x: Any, t: TensorType,
             what: str = "jvp: a tangent has shape {shape}, its primal has {want}") -> Any:
    """A tangent or cotangent given for a value of type `t` (a Python scalar, an array or a
    tracer of another dtype) as a value of that type, as the eager transformations convert
    them; a shape that differs is an error (`what` says which, as they do)."""
    shape = x.value.type.shape if isinstance(x, Tracer) else np.shape(x)
    if tuple(shape) != t.shape:
        raise ArgumentTypeError(what.format(shape=tuple(shape), want=t.shape))
    if isinstance(x, Tracer):
        return x if x.value.type.dtype == t.dtype else bind("astype", x, dtype=t.dtype)
    return np.asarray(x, t.dtype)


def _check_inputs(op: str, got: list[TensorType], want: list[TensorType]) -> None:
    """A node's inputs must be exactly the sub-program's parameters (and, for a pullback,
    cotangents of its results): the sub-program was traced at those types."""
    if got != want:
        raise LoweringError(f"{op}: inputs {[str(t) for t in got]} do not match the "
                            f"sub-program's {[str(t) for t in want]}")


def add_contributions(a: Any, b: Any) -> Any:
    """The sum of two contributions, either of which may be None (zero)."""
    if a is None:
        return b
    return a if b is None else a + b


class _Derived:
    """What both node parameters share: the sub-program and what is built from it on first
    use: its JVP program, its compiled form, and the parameters of the nodes its
    derivative rules emit. A cached outer program keeps its nodes' parameters, so each of
    these is built once however often the program runs, and the n nodes of a Hessian's n
    columns share one compiled JVP program."""

    def __init__(self, program: Program):
        self.program = program
        self._built: dict[Any, Any] = {}

    def _once(self, key: Any, build: Callable[[], Any]) -> Any:
        """`build()`, made once per `key` (under the lowering lock: threads running the
        same cached program share its nodes' parameters); an unhashable key (a strategy
        of the user's that cannot be hashed) builds every time."""
        try:
            value = self._built.get(key)
        except TypeError:
            return build()
        if value is None:
            with LOWERING_LOCK:
                value = self._built.get(key)
                if value is None:
                    value = self._built[key] = build()
        return value

    @property
    def jvp_program(self) -> Program:
        return self._once("jvp", lambda: build_jvp(self.program))

    @property
    def compiled(self) -> Compiled:
        return self._once("compiled", lambda: Compiled(self.program))

    def jvp_call_of(self) -> Call:
        """The parameter of a `call` of the JVP program."""
        return self._once("jvp call", lambda: Call(self.jvp_program))

    def pullback_of(self, wrt: tuple[int, ...], checkpoint: Any, of_jvp: bool,
                    check: bool = False, repeats: bool = False) -> Pullback:
        """The parameter of a `vjp_call` of P (or of its JVP program); `repeats`: a `call`
        of P already ran its forward work (see `Pullback.repeats`)."""
        return self._once(("pullback", wrt, checkpoint, of_jvp, check, repeats),
                          lambda: Pullback(self.jvp_program if of_jvp else self.program, wrt,
                                           checkpoint, check, repeats))

    def second_order_program(self, wrt: tuple[int, ...]) -> Program:
        """P's second-order JVP program for P's gradient with respect to the parameters
        `wrt` (forward_mode.build_jvp): its custom rules and calls that gradient
        differentiates become units."""
        return self._once(("jvp2", wrt), lambda: build_jvp(
            self.program, active=active_values(self.program, frozenset(wrt))))

    def float_params(self) -> list[int]:
        return [i for i, p in enumerate(self.program.params) if p.type.is_float]

    def jvp_call(self, xs: list[Any], tangents: list[Any]) -> list[Any]:
        """The tangent results of P at `xs` along `tangents` (one per parameter, None for
        zero; those of non-float parameters are ignored), as a `call` of J."""
        return self.jvp_outputs(xs, tangents)[len(self.program.outputs):]

    def jvp_outputs(self, xs: list[Any], tangents: list[Any]) -> list[Any]:
        """P's results at `xs`, then their tangents along `tangents`: one `call` of J."""
        params = self.program.params
        dx = [_zeros(params[i].type) if tangents[i] is None else _as_type(tangents[i],
                                                                          params[i].type)
              for i in self.float_params()]
        return list(bind("call", *xs, *dx, of=self.jvp_call_of()))

    def jvp_pullback(self, xs: list[Any], tangents: list[Any], cts: list[Any],
                     wrt: tuple[int, ...], checkpoint: Any,
                     also_primal: bool = False) -> list[Any]:
        """The derivative in x of `cts · J_P(x) tangents`: reverse mode of J with cotangent
        zero on its primal results and `cts` on its tangent results; one per parameter of
        P, for those in `wrt`. With `also_primal`, then one per float parameter of P:
        what the same reverse pass gives J's tangent parameters, J_P(x)ᵀ cts, which is
        P's pullback of `cts` (for those in `wrt`), so no second pass computes it."""
        program = self.program
        params = program.params
        floats = self.float_params()
        out_types = [v.type for v in program.outputs]
        dx = filled([tangents[i] for i in floats], [params[i].type for i in floats])
        zeros = [_zeros(t) for t in out_types]
        cts = filled(cts, out_types)
        n = len(params)
        if also_primal:
            wrt = wrt + tuple(n + k for k, i in enumerate(floats) if i in wrt)
        g = bind("vjp_call", *xs, *dx, *zeros, *cts,
                 of=self.pullback_of(wrt, checkpoint, of_jvp=True))
        return list(g[:n + len(floats)] if also_primal else g[:n])


class Call(_Derived):
    """The `of` of a `call` node: run the sub-program P on the node's inputs."""

    def __init__(self, program: Program, first_run: bool = False):
        super().__init__(program)
        # P's work is done nowhere else, though the node runs inside a pullback (a
        # custom_vjp's bwd): its debug prints show there, unlike recomputed work's
        self.first_run = first_run

    def __repr__(self) -> str:
        return self.program.name

    def result_types(self, types: list[TensorType]) -> list[TensorType]:
        _check_inputs("call", types, [p.type for p in self.program.params])
        return [v.type for v in self.program.outputs]

    def run(self, xs: tuple) -> tuple:
        # an untaped run: no strategy keeps anything, so none is resolved per call
        m = Machine(self.compiled, check=anomaly_detection_enabled())
        with repeating(False) if self.first_run else nullcontext():
            outs = m.run([as_runtime_value(x) for x in xs])
        return tuple(as_runtime_value(o) for o in outs)

    def outputs_and_tangents(self, ts: list[Any], xs: list[Any]) -> tuple[list, list]:
        """Both from one `call` of the JVP program."""
        outs = self.jvp_outputs(list(xs), ts)
        m = len(self.program.outputs)
        return outs[:m], outs[m:]

    def unit(self, ts: list[Any], xs: list[Any], active: list[bool]) -> tuple[list, list]:
        """The node in a second-order JVP program (forward_mode.build_jvp), where a
        gradient differentiates it through its `active` inputs: one `call` of P's own
        second-order JVP program for that gradient, whose reverse mode is exact as the
        enclosing program's is (see `Pullback._through_units`)."""
        wrt = tuple(i for i, a in enumerate(active) if a)
        params = self.program.params
        dx = [_zeros(params[i].type) if ts[i] is None else ts[i] for i in self.float_params()]
        outs = bind("call", *xs, *dx, of=self._once(("unit", wrt), lambda: Call(
            self.second_order_program(wrt))))
        m = len(self.program.outputs)
        return list(outs[:m]), list(outs[m:])

    def cotangents(self, cts: list[Any], xs: list[Any]) -> list[Any]:
        wrt = tuple(self.float_params())
        full = filled(cts, [v.type for v in self.program.outputs])
        g = bind("vjp_call", *xs, *full, of=self.pullback_of(wrt, None, of_jvp=False))
        return [g[i] if i in wrt else None for i in range(len(xs))]


class Pullback(_Derived):
    """The `of` of a `vjp_call` node: inputs (x, c) — P's parameters, then a cotangent
    per result of P; results: the cotangent of each parameter (zeros outside `wrt`)."""

    def __init__(self, program: Program, wrt: tuple[int, ...], checkpoint: Any,
                 check: bool = False, repeats: bool = False):
        super().__init__(program)
        self.wrt = wrt
        self.checkpoint = checkpoint
        self.check = check  # the transformation's detect_anomaly=True
        # the taped forward run repeats a `call` of the same program at the same inputs
        # (the value of a nested vjp or value_and_grad): its debug prints stay silent
        self.repeats = repeats

    def __repr__(self) -> str:
        strategy = "" if self.checkpoint is None else f", checkpoint={self.checkpoint!r}"
        return f"vjp({self.program.name}, wrt={list(self.wrt)}{strategy})"

    def result_types(self, types: list[TensorType]) -> list[TensorType]:
        _check_inputs("vjp_call", types, [p.type for p in self.program.params]
                      + [v.type for v in self.program.outputs])
        return [p.type for p in self.program.params]

    @property
    def plan(self) -> GradPlan:
        return self._once("plan", lambda: differentiate(self.program, self.wrt,
                                                         forward=self.compiled))

    def run(self, args: tuple) -> tuple:
        n = len(self.program.params)
        choice = self.checkpoint if self.checkpoint is not None else _CALL_CHECKPOINT.get()
        strategies = [resolve(r.checkpoint, choice) for r in self.program.loops()]
        check = self.check or anomaly_detection_enabled()
        with call_checkpoint(choice), detect_anomaly(check):
            with repeating() if self.repeats else nullcontext():
                tape = execute(self.plan, [as_runtime_value(a) for a in args[:n]],
                               strategies, check=check)
            cts = tape.pullback([as_runtime_value(c) for c in args[n:]])
        sink = _RUN_SINK.get()
        if sink is not None:
            sink.append((repr(self), tape.stats))
        return tuple(as_runtime_value(c) for c in cts)

    def outputs_and_tangents(self, ts: list[Any], xs: list[Any]) -> tuple[list, list]:
        """g = P's pullback of c at x, and its tangent along (dx, dc). Without custom
        rules, g is linear in c, so dc contributes P's pullback of dc, and dx the
        derivative of g in x along dx, from one reverse pass that also gives g
        (`_along_x`). With custom rules, both come from one reverse pass of P's
        second-order JVP program (`_through_units`)."""
        program = self.program
        n = len(program.params)
        x, c, dx, dc = list(xs[:n]), list(xs[n:]), ts[:n], ts[n:]
        if self.has_custom_rules:
            return self._through_units(x, c, dx, dc)
        tangents: list[Any] = [None] * n
        if any(dx[i] is not None for i in self.float_params()):
            outs, tangents = self._along_x(x, dx, c)
        else:
            outs = list(bind("vjp_call", *x, *c, of=self))
        if any(t is not None for t in dc):  # linear in c
            by_c = bind("vjp_call", *x, *filled(dc, [v.type for v in program.outputs]),
                        of=self)
            tangents = [add_contributions(t, by_c[i]) if i in self.wrt else t
                        for i, t in enumerate(tangents)]
        return outs, tangents

    def _along_x(self, x: list[Any], dx: list[Any], c: list[Any]) -> tuple[list, list]:
        """g = J_P(x)ᵀ c and its derivative in x along dx, D_x[J_P(x)ᵀ c] dx (None outside
        `wrt`), for P without custom rules: the gradient of c · J_P(x) dx (second
        derivatives are symmetric), reverse mode of J, whose pass also gives g."""
        program = self.program
        n = len(program.params)
        floats = self.float_params()
        g = self.jvp_pullback(x, dx, c, self.wrt, self.checkpoint, also_primal=True)
        value = {i: g[n + k] for k, i in enumerate(floats)}
        outs = [value[i] if i in self.wrt else _zeros(p.type)
                for i, p in enumerate(program.params)]
        return outs, [g[i] if i in self.wrt else None for i in range(n)]

    def _through_units(self, x: list[Any], c: list[Any], dx: list[Any],
                       dc: list[Any]) -> tuple[list, list]:
        """g and its tangent along (dx, dc) for P with custom rules, as JAX's forward mode
        over P's reverse pass gives them, where each rule's fwd and bwd are ordinary code:
        reverse mode of K = P's second-order JVP program (forward_mode.py), with cotangent
        dc on its values and c on its tangents. For every node of P, the cotangent that
        pass gives a tangent value of K is P's cotangent ū of that value, and the one it
        gives a value is ū's derivative dū along (dx, dc): for a primitive by the symmetry
        of its second derivative, and for a custom rule by its unit, whose reverse mode
        computes ū and dū from the rule as JAX does (bwd where it ran, at the cotangent
        that reached it, whatever that is linear in). So K's parameters receive the
        tangent of g (x's) and g (dx's)."""
        program = self.program
        n = len(program.params)
        floats = self.float_params()
        out_types = [v.type for v in program.outputs]
        dxs = filled([dx[i] for i in floats], [program.params[i].type for i in floats])
        wrt = self.wrt + tuple(n + k for k, i in enumerate(floats) if i in self.wrt)
        g = bind("vjp_call", *x, *dxs, *filled(dc, out_types), *c, of=self.units_pullback(wrt))
        position = {i: n + k for k, i in enumerate(floats)}
        outs = [g[position[i]] if i in self.wrt else _zeros(p.type)
                for i, p in enumerate(program.params)]
        return outs, [g[i] if i in self.wrt else None for i in range(n)]

    def units_pullback(self, wrt: tuple[int, ...]) -> Pullback:
        """The parameter of a `vjp_call` of P's second-order JVP program for this
        pullback's gradient (its `wrt`), with respect to `wrt` of that program."""
        return self._once(("units", wrt), lambda: Pullback(
            self.second_order_program(self.wrt), wrt, self.checkpoint, self.check))

    @property
    def has_custom_rules(self) -> bool:
        """Whether P (or a sub-program it calls, at any depth) has a custom rule's node."""
        return self._once("custom rules", lambda: any(
            node.op in ("custom_vjp", "custom_jvp")
            for p in [self.program] + [q for _, q in sub_programs(self.program)]
            for block in p.blocks for node in block.nodes))

    @property
    def transposes_by_rule(self) -> bool:
        """Whether reverse mode of this pullback may take P's JVP program as the transpose
        of P's reverse pass (`cotangents`): true unless a custom_vjp rule in P has a `bwd`
        that is not linear in its cotangent (a clipped gradient), or a fwd or bwd that calls
        another custom function, for which JVP program and reverse pass differ."""
        return self._once("transposes by rule", lambda: all(
            rule.second_order_problem() is None for rule in custom_vjp_rules(self.program)))

    def cotangents(self, cts: list[Any], xs: list[Any]) -> list[Any]:
        program = self.program
        n = len(program.params)
        x, c = list(xs[:n]), list(xs[n:])
        # the results outside `wrt` are constant zeros: their cotangents reach nothing
        along = [cts[i] if i in self.wrt else None for i in range(n)]
        if all(a is None for a in along):
            return [None] * len(xs)
        if not self.transposes_by_rule:
            g_bar = filled([along[i] for i in self.wrt], [program.params[i].type
                                                          for i in self.wrt])
            return [bind("call", *x, *c, *g_bar, of=self._column(j))[0]
                    if t.is_float else None for j, t in enumerate(self._column_types())]
        ct_c = self.jvp_call(x, along)
        ct_x = self.jvp_pullback(x, along, c, tuple(self.float_params()), self.checkpoint)
        ct_x = [g if program.params[i].type.is_float else None for i, g in enumerate(ct_x)]
        ct_c = [g if v.type.is_float else None for v, g in zip(program.outputs, ct_c)]
        return ct_x + ct_c

    def _column_types(self) -> list[TensorType]:
        """The node's inputs' types: P's parameters, then its results' cotangents."""
        return [p.type for p in self.program.params] + [v.type for v in self.program.outputs]

    def _column(self, j: int) -> Call:
        """The cotangent of the node's input j for cotangents ḡ of its results, where P's
        reverse pass is not linear in c or its JVP program is no transpose of it (see
        `transposes_by_rule`): element k of it is ḡ · dg along the k-th basis vector e_k
        of input j, one reverse pass of P's second-order JVP program (`_through_units`)
        each, in a loop over the elements. That costs a pass per element where JAX
        transposes the pass it linearized; cg.hessian and cg.jacfwd(cg.grad(f)), forward
        mode over the reverse pass, need one pass per column."""
        def build() -> Call:
            program = self.program
            n, types = len(program.params), self._column_types()
            floats, t = self.float_params(), types[j]
            if t.dtype.kind == "c":
                raise ArgumentTypeError(
                    f"a derivative of the gradient of {program.name} in reverse mode meets a "
                    "custom_vjp rule whose bwd is not linear in its cotangent (or that calls "
                    "another custom function) and a complex input; use forward mode over "
                    "the gradient (cg.hessian, cg.jacfwd(cg.grad(f))) instead")
            units = self.units_pullback(self.wrt)

            def column(*leaves: Any) -> Any:
                x, c = list(leaves[:n]), list(leaves[n:len(types)])
                g_bar = leaves[len(types):]

                def element(k: Any, acc: Any) -> Any:
                    e = cnp.reshape((cnp.arange(t.size) == k).astype(t.dtype), t.shape)
                    dx = [e if i == j else _zeros(program.params[i].type) for i in floats]
                    dc = [e if n + o == j else _zeros(v.type)
                          for o, v in enumerate(program.outputs)]
                    dg = bind("vjp_call", *x, *dx, *dc, *c, of=units)
                    total = sum(cnp.sum(cnp.real(gb * dg[i])) for i, gb in zip(self.wrt, g_bar))
                    return acc.at[k].set(cnp.asarray(total).astype(t.dtype))

                flat = fori_loop(0, t.size, element, np.zeros(t.size, t.dtype))
                return cnp.reshape(flat, t.shape)

            g_types = [program.params[i].type for i in self.wrt]
            return Call(trace_program(column, tuple(_zeros(u) for u in types + g_types),
                                      name=f"{program.name}.column{j}"))

        return self._once(("column", j), build)


# ---------------------------------------------------------------------------------
# The transformations, applied inside a trace
# ---------------------------------------------------------------------------------


class Traced:
    """`fun` at argument leaves of the enclosing trace, traced into a sub-program: what
    each transformation below starts from."""

    def __init__(self, fun: Callable, args: tuple):
        leaves, self.in_tree = treelib.flatten(args)
        self.nargs = len(args)
        name = getattr(fun, "__name__", "f")

        def flat(*xs: Any) -> Any:
            return fun(*treelib.unflatten(self.in_tree, list(xs)))

        self.program, captured = trace_nested(flat, leaves, name, home=fun)
        self.call = Call(self.program)  # shared by every node emitted for this function
        self.inputs = list(leaves) + captured
        self.n_leaves = len(leaves)

    def outputs(self) -> list[Any]:
        return list(bind("call", *self.inputs, of=self.call))

    def pullback(self, cts: list[Any], wrt: tuple[int, ...], checkpoint: Any,
                 check: bool, repeats: bool) -> list[Any]:
        """P's pullback of `cts`, one `vjp_call`; `repeats`: `outputs()` ran P already."""
        g = bind("vjp_call", *self.inputs, *cts,
                 of=self.call.pullback_of(wrt, checkpoint, of_jvp=False, check=check,
                                          repeats=repeats))
        return list(g[: self.n_leaves])


def value_and_grad(fun: Callable, args: tuple, nums: tuple[int, ...], single: bool,
                   checkpoint: Any, validate: Callable[[Program], None],
                   want_value: bool = True, anomaly: bool = False) -> Any:
    """`cg.value_and_grad(fun, argnums)(*args)` inside a trace: `validate(program)` refuses a
    function that is not a float scalar (or a (value, aux) pair), as the eager path does.
    Without `want_value` (a `cg.grad` without aux) no node computes the value, so the
    sub-program runs once, in its pullback; the value comes back as None."""
    traced = Traced(fun, args)
    program = traced.program
    validate(program)
    out = treelib.unflatten(program.out_tree, traced.outputs()) if want_value else None
    seeds = [np.ones((), program.outputs[0].type.dtype)] + [
        _zeros(v.type) for v in program.outputs[1:]]
    wrt = tuple(j for j in traced.in_tree.leaves_of(nums) if program.params[j].type.is_float)
    flat = traced.pullback(seeds, wrt, checkpoint, anomaly, repeats=want_value)
    per_arg = treelib.unflatten(traced.in_tree, flat)
    grads = per_arg[nums[0]] if single else tuple(per_arg[i] for i in nums)
    return out, grads


def vjp(fun: Callable, primals: tuple, checkpoint: Any, has_aux: bool,
        validate: Callable[[Program], Any], anomaly: bool = False) -> Any:
    """`cg.vjp(fun, *primals)` inside a trace: the pullback emits a `vjp_call` node;
    `validate(program)` refuses what the eager path refuses (has_aux without a pair);
    `anomaly` is the call's `detect_anomaly=True`, kept by the node for its runs."""
    traced = Traced(fun, primals)
    program = traced.program
    validate(program)
    out = treelib.unflatten(program.out_tree, traced.outputs())
    wrt = tuple(i for i, p in enumerate(program.params[: traced.n_leaves]) if p.type.is_float)

    def pullback(cotangent: Any) -> tuple:
        if has_aux:
            aux_zeros = treelib.tree_map(lambda a: np.zeros(a.shape, a.dtype), out[1])
            cotangent = (cotangent, aux_zeros)
        leaves, tree = treelib.flatten(cotangent)
        if tree != program.out_tree:
            raise ArgumentTypeError(f"pullback: the cotangent's structure {tree.describe()} "
                                    f"differs from the output's {program.out_tree.describe()}")
        leaves = [_as_type(c, v.type, f"pullback: cotangent leaf {i} has shape {{shape}}, the "
                           "output has {want}") for i, (c, v) in enumerate(zip(leaves,
                                                                           program.outputs))]
        flat = traced.pullback(leaves, wrt, checkpoint, anomaly, repeats=True)
        return tuple(treelib.unflatten(traced.in_tree, flat))[: traced.nargs]

    if has_aux:
        return out[0], pullback, out[1]
    return out, pullback


def jvp(fun: Callable, primals: tuple, tangents: tuple) -> tuple[Any, Any]:
    """`cg.jvp(fun, primals, tangents)` inside a trace: one `call` of the JVP program."""
    traced = Traced(fun, primals)
    t_leaves, t_tree = treelib.flatten(tangents)
    if t_tree != traced.in_tree:
        raise ArgumentTypeError("jvp: tangents must have the same structure as primals")
    program = traced.program
    params = program.params
    full = t_leaves + [None] * (len(params) - len(t_leaves))  # closed-over: no tangent
    outs = traced.call.jvp_outputs(traced.inputs, full)
    m = len(program.outputs)
    return (treelib.unflatten(program.out_tree, outs[:m]),
            treelib.unflatten(program.out_tree, outs[m:]))


def is_tracing() -> bool:
    """Whether a transformation called now runs inside a trace, so it must emit a node: a
    trace is being built in this thread. (A traced argument without one is a tracer that
    escaped its finished trace, which lowering refuses by name.)"""
    return current_trace() is not None


def sub_programs(program: Program) -> list[tuple[str, Program]]:
    """The sub-programs `program`'s `call` and `vjp_call` nodes stand for, at any depth,
    each once, outermost first: (what the node does, the sub-program), e.g.
    ("vjp(f, wrt=[0])", f's Program), so a viewer can show what a nested derivative is."""
    found: list[tuple[str, Program]] = []
    seen: set[int] = set()
    pending = [program]
    while pending:
        current = pending.pop(0)
        for block in current.blocks:
            for node in block.nodes:
                of = node.params.get("of") if node.op in ("call", "vjp_call") else None
                if of is not None and id(of.program) not in seen:
                    seen.add(id(of.program))
                    found.append((repr(of), of.program))
                    pending.append(of.program)
    return found
