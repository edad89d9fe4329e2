"""Property tests over random structured programs (docs/api.md, "Control flow").

Hypothesis builds a small AST of statements over a state `(a, b, v)` (two float scalars
and a float vector): assignments through random smooth primitives, a swap of `a` and `b`
(a carry that swaps, inside loops), resets to constants, copies of outer values, and
nested `cond` / `switch` / `while_loop` / `fori_loop` up to depth 3 (every program reaches
depth 3 along one spine). Loops run zero, one or many times; `while` loops stop on the
data; `fori` bounds may be an enclosing loop's index; switch indices come from the data
or a loop index and are clamped. Branches and loop bodies close over the state captured
at every enclosing construct and over enclosing loop indices, so closures over traced
values of outer scopes are exercised at every depth.

The AST is run two independent ways:

* `CfgradRun` traces it through `cg.cond` / `cg.switch` / `cg.while_loop` / `cg.fori_loop`;
* `PythonRun` interprets it with plain `if` / `for` / `while` on numpy arrays, recording
  the decisions and trip counts it took (an oracle that shares nothing with cfgrad but the
  expression arithmetic, which is numpy on one side and `cfgrad.numpy` on the other).

Properties: the forward values agree; cfgrad's control log holds exactly the decisions
and trip counts the Python run took, and is empty after the reverse pass; `vjp` and `jvp`
agree (`u·(J t)` both ways); `check_grads` passes; and `grad` matches central finite
differences of the *Python* version. When a perturbed input takes another path, finite
differences are meaningless, so the example is discarded (`assume(False)`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad.api import lowered
from cfgrad.interpret import differentiate, execute
from cfgrad.testing import check_grads

MAX_DEPTH = 3
# Examples per property: 100 under the deterministic default profile, which among them
# run loops zero, one and many times, loops three deep, swaps, branches and switches in
# loops, and branches that decide differently from one iteration to the next; more under
# CFGRAD_HYPOTHESIS=long.
EXAMPLES = max(100, settings.default.max_examples)


class State(NamedTuple):
    """The program state; also the carry and the operand of every construct."""

    a: Any  # float scalar
    b: Any  # float scalar
    v: Any  # float vector


# ---------------------------------------------------------------------------------
# The AST
# ---------------------------------------------------------------------------------

SCALAR, VECTOR, INT = "scalar", "vector", "int"


@dataclasses.dataclass(frozen=True)
class Var:
    name: str  # a state field ("a", "b", "v") or a capture ("a2", "v1", …)


@dataclasses.dataclass(frozen=True)
class Index:
    name: str  # an enclosing loop's index or counter, read as a float


@dataclasses.dataclass(frozen=True)
class Const:
    value: float


@dataclasses.dataclass(frozen=True)
class Unary:
    op: str
    arg: Any


@dataclasses.dataclass(frozen=True)
class Binary:
    op: str
    lhs: Any
    rhs: Any


@dataclasses.dataclass(frozen=True)
class Sum:
    arg: Any  # a vector expression


@dataclasses.dataclass(frozen=True)
class Assign:
    """`target = 0.5 * target + tanh(expr)`: bounded however often a loop repeats it."""

    target: str
    expr: Any


@dataclasses.dataclass(frozen=True)
class Reset:
    """`target = value`: an accumulator (re)initialised from a constant."""

    target: str
    value: float


@dataclasses.dataclass(frozen=True)
class Load:
    """`target = source`: another state field, or a value of an enclosing scope, enters
    the state unchanged, so it reaches Phis inside branches and loops directly."""

    target: str
    source: str


@dataclasses.dataclass(frozen=True)
class Swap:
    """`a, b = b, a`: inside a loop, a carry that swaps."""


@dataclasses.dataclass(frozen=True)
class If:
    number: int  # the if-region's index in trace (pre-)order
    depth: int
    pred: Any
    thr: float
    then: tuple
    orelse: tuple
    operands: bool  # pass the state as an operand, or close over it


@dataclasses.dataclass(frozen=True)
class SwitchIndex:
    """`offset + sum(pred > thr) + loop_var`, clamped to the branches like jax.lax.switch."""

    tests: tuple  # of (expr, thr)
    loop_var: str | None
    offset: int


@dataclasses.dataclass(frozen=True)
class Switch:
    number: int
    depth: int
    index: SwitchIndex
    branches: tuple


@dataclasses.dataclass(frozen=True)
class Fori:
    number: int  # the loop-region's index in trace order
    depth: int
    lo: int
    hi: int
    hi_var: str | None  # the upper bound adds an enclosing loop's index (traced bound)
    body: tuple


@dataclasses.dataclass(frozen=True)
class While:
    """`k = 0; while k < n and pred(state) - 0.3 k > thr: state = body; k += 1`.

    The rising threshold makes the data, not only `n`, end the loop."""

    number: int
    depth: int
    n: int
    pred: Any
    thr: float
    body: tuple
    bounded: bool  # pass max_iters=n (which must not trigger)


@dataclasses.dataclass(frozen=True)
class Prog:
    body: tuple
    dim: int
    n_ifs: int
    n_loops: int


# ---------------------------------------------------------------------------------
# Expression arithmetic, per backend
# ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Backend:
    xp: Any
    sigmoid: Callable
    to_float: Callable  # loop index -> float
    to_int: Callable  # boolean -> integer


NUMPY = Backend(np, lambda x: 1.0 / (1.0 + np.exp(-x)), np.float64, int)
CFGRAD = Backend(cnp, cnp.sigmoid, lambda i: cnp.astype(i, cnp.float64),
                 lambda p: cnp.astype(p, cnp.int64))

UNARY_OPS = ("sin", "cos", "tanh", "sigmoid", "exp_tanh")
BINARY_OPS = ("add", "sub", "mul")


def eval_expr(e: Any, scope: dict[str, Any], be: Backend) -> Any:
    xp = be.xp
    match e:
        case Var(name):
            return scope[name]
        case Index(name):
            return be.to_float(scope[name]) * 0.25
        case Const(value):
            return value
        case Sum(arg):
            return xp.sum(eval_expr(arg, scope, be))
        case Unary(op, arg):
            x = eval_expr(arg, scope, be)
            if op == "sigmoid":
                return be.sigmoid(x)
            if op == "exp_tanh":  # exp of a bounded argument
                return xp.exp(xp.tanh(x))
            return getattr(xp, op)(x)
        case Binary(op, lhs, rhs):
            x, y = eval_expr(lhs, scope, be), eval_expr(rhs, scope, be)
            return x + y if op == "add" else x - y if op == "sub" else x * y
    raise AssertionError(e)


def with_state(scope: dict[str, Any], state: State) -> dict[str, Any]:
    return {**scope, "a": state.a, "b": state.b, "v": state.v}


def capture(scope: dict[str, Any], state: State, depth: int) -> dict[str, Any]:
    """The scope of a construct's branches/body: the state at its entry, as closures."""
    return {**scope, f"a{depth}": state.a, f"b{depth}": state.b, f"v{depth}": state.v}


def simple(s: Any, state: State, scope: dict[str, Any], be: Backend) -> State:
    """The straight-line statements, shared by both runs."""
    match s:
        case Assign(target, expr):
            new = 0.5 * getattr(state, target) + be.xp.tanh(
                eval_expr(expr, with_state(scope, state), be))
            return state._replace(**{target: new})
        case Reset(target, value):
            return state._replace(**{target: value if target != "v" else np.full(
                state.v.shape, value)})
        case Load(target, source):
            return state._replace(**{target: with_state(scope, state)[source]})
        case Swap():
            return state._replace(a=state.b, b=state.a)
    raise AssertionError(s)


def switch_index(ix: SwitchIndex, scope: dict[str, Any], be: Backend) -> Any:
    idx = ix.offset
    for expr, thr in ix.tests:
        idx = idx + be.to_int(eval_expr(expr, scope, be) > thr)
    if ix.loop_var is not None:
        idx = idx + scope[ix.loop_var]
    return idx


def loop_bound(s: Fori, scope: dict[str, Any]) -> Any:
    return s.hi if s.hi_var is None else s.hi + scope[s.hi_var]


# ---------------------------------------------------------------------------------
# The two runs
# ---------------------------------------------------------------------------------


class PythonRun:
    """The oracle: plain Python control flow on numpy values, recording its path."""

    def __init__(self, prog: Prog):
        self.decisions: list[list[Any]] = [[] for _ in range(prog.n_ifs)]
        self.trips: list[list[int]] = [[] for _ in range(prog.n_loops)]

    def block(self, stmts: tuple, state: State, scope: dict[str, Any]) -> State:
        for s in stmts:
            state = self.stmt(s, state, scope)
        return state

    def stmt(self, s: Any, state: State, scope: dict[str, Any]) -> State:
        if isinstance(s, Assign | Reset | Load | Swap):
            return simple(s, state, scope, NUMPY)
        inner = capture(scope, state, s.depth)
        here = with_state(scope, state)
        if isinstance(s, If):
            taken = bool(eval_expr(s.pred, here, NUMPY) > s.thr)
            self.decisions[s.number].append(taken)
            return self.block(s.then if taken else s.orelse, state, inner)
        if isinstance(s, Switch):
            k = min(max(int(switch_index(s.index, here, NUMPY)), 0), len(s.branches) - 1)
            self.decisions[s.number].append(k)
            return self.block(s.branches[k], state, inner)
        if isinstance(s, Fori):
            trips = 0
            for i in range(s.lo, loop_bound(s, scope)):
                state = self.block(s.body, state, {**inner, f"i{s.depth}": i})
                trips += 1
            self.trips[s.number].append(trips)
            return state
        assert isinstance(s, While)
        k = 0
        while k < s.n and eval_expr(s.pred, with_state(inner, state), NUMPY) - 0.3 * k > s.thr:
            state = self.block(s.body, state, {**inner, f"k{s.depth}": k})
            k += 1
        self.trips[s.number].append(k)
        return state


class CfgradRun:
    """The same AST lowered through cfgrad's structured control flow."""

    def block(self, stmts: tuple, state: State, scope: dict[str, Any]) -> State:
        for s in stmts:
            state = self.stmt(s, state, scope)
        return state

    def stmt(self, s: Any, state: State, scope: dict[str, Any]) -> State:
        if isinstance(s, Assign | Reset | Load | Swap):
            return simple(s, state, scope, CFGRAD)
        inner = capture(scope, state, s.depth)
        here = with_state(scope, state)
        if isinstance(s, If):
            pred = eval_expr(s.pred, here, CFGRAD) > s.thr
            if s.operands:
                return cg.cond(pred, lambda st: self.block(s.then, st, inner),
                               lambda st: self.block(s.orelse, st, inner), state)
            return cg.cond(pred, lambda: self.block(s.then, state, inner),
                           lambda: self.block(s.orelse, state, inner))
        if isinstance(s, Switch):
            return cg.switch(switch_index(s.index, here, CFGRAD),
                             [lambda st, br=br: self.block(br, st, inner) for br in s.branches],
                             state)
        if isinstance(s, Fori):
            return cg.fori_loop(
                s.lo, loop_bound(s, scope),
                lambda i, st: self.block(s.body, st, {**inner, f"i{s.depth}": i}), state)
        assert isinstance(s, While)

        def cond_fun(carry: tuple) -> Any:
            k, st = carry
            return (k < s.n) & (eval_expr(s.pred, with_state(inner, st), CFGRAD) - 0.3 * k
                                > s.thr)

        def body_fun(carry: tuple) -> tuple:
            k, st = carry
            return k + 1, self.block(s.body, st, {**inner, f"k{s.depth}": k})

        return cg.while_loop(cond_fun, body_fun, (0, state),
                             max_iters=s.n if s.bounded else None)[1]


LOSS_W = (1.0, -0.7, np.array([0.3, -1.1, 0.6]))


def loss(state: State, xp: Any) -> Any:
    """A fixed linear functional of the final state: the scalar that `grad` differentiates."""
    wa, wb, wv = LOSS_W
    return wa * state.a + wb * state.b + xp.sum(state.v * wv[: state.v.shape[0]])


def cfgrad_functions(prog: Prog) -> tuple[Callable, Callable]:
    """Fresh Python functions per program (lowering is cached per function object)."""

    def program(a: Any, b: Any, v: Any) -> State:
        return CfgradRun().block(prog.body, State(a, b, v), {})

    def scalar(a: Any, b: Any, v: Any) -> Any:
        return loss(program(a, b, v), cnp)

    return program, scalar


def python_run(prog: Prog, a: float, b: float, v: np.ndarray) -> tuple[State, PythonRun]:
    run = PythonRun(prog)
    return run.block(prog.body, State(a, b, v), {}), run


# ---------------------------------------------------------------------------------
# Generation
# ---------------------------------------------------------------------------------

THRESHOLDS = st.sampled_from([-0.6, -0.2, 0.15, 0.5])


@st.composite
def exprs(draw: Any, names: tuple, kind: str, depth: int = 2) -> Any:
    """An expression of `kind` over the variables in scope (`names`: (name, kind) pairs)."""
    if kind == VECTOR:
        leaves = [Var(n) for n, k in names if k == VECTOR]
    else:
        leaves = [Var(n) for n, k in names if k == SCALAR] + [
            Index(n) for n, k in names if k == INT] + [Const(0.7), Const(-1.3)]
    if depth == 0 or draw(st.integers(0, 2)) == 0:
        return draw(st.sampled_from(leaves))
    choice = draw(st.sampled_from(["unary", "binary", "sum"] if kind == SCALAR
                                  else ["unary", "binary"]))
    if choice == "unary":
        return Unary(draw(st.sampled_from(UNARY_OPS)), draw(exprs(names, kind, depth - 1)))
    if choice == "sum":
        return Sum(draw(exprs(names, VECTOR, depth - 1)))
    other = draw(st.sampled_from([SCALAR, VECTOR])) if kind == VECTOR else SCALAR
    lhs, rhs = draw(exprs(names, kind, depth - 1)), draw(exprs(names, other, depth - 1))
    return Binary(draw(st.sampled_from(BINARY_OPS)), *draw(st.permutations([lhs, rhs])))


STATE_NAMES = (("a", SCALAR), ("b", SCALAR), ("v", VECTOR))


class Counters:
    """Region numbers handed out in pre-order, which is the order cfgrad traces them."""

    def __init__(self) -> None:
        self.ifs = 0
        self.loops = 0

    def next_if(self) -> int:
        self.ifs += 1
        return self.ifs - 1

    def next_loop(self) -> int:
        self.loops += 1
        return self.loops - 1


@st.composite
def simple_stmts(draw: Any, names: tuple) -> Any:
    kind = draw(st.sampled_from(["assign", "assign", "assign", "reset", "load", "swap"]))
    if kind == "swap":
        return Swap()
    target = draw(st.sampled_from(["a", "b", "v"]))
    if kind == "reset":
        return Reset(target, draw(st.sampled_from([0.0, 0.5, -1.0])))
    if kind == "load":
        kind_of = SCALAR if target != "v" else VECTOR
        return Load(target, draw(st.sampled_from([n for n, k in names if k == kind_of])))
    expr_kind = SCALAR if target != "v" else draw(st.sampled_from([SCALAR, VECTOR]))
    return Assign(target, draw(exprs(names, expr_kind)))


@st.composite
def blocks(draw: Any, names: tuple, depth: int, counters: Counters, spine: bool,
           min_size: int = 0) -> tuple:
    """A statement list inside `depth` enclosing constructs; on the spine, one statement is
    a construct that continues the spine, so every program reaches MAX_DEPTH."""
    size = draw(st.integers(max(min_size, 1 if spine else 0), 2))
    forced = draw(st.integers(0, size - 1)) if spine else -1
    out = []
    for i in range(size):
        compound = i == forced or (depth < MAX_DEPTH and draw(st.integers(0, 3)) == 0)
        out.append(draw(compound_stmts(names, depth + 1, counters, i == forced))
                   if compound else draw(simple_stmts(names)))
    return tuple(out)


@st.composite
def compound_stmts(draw: Any, names: tuple, depth: int, counters: Counters,
                   spine: bool) -> Any:
    """A construct at nesting level `depth` (1 = top level)."""
    child_spine = spine and depth < MAX_DEPTH
    inner = names + ((f"a{depth}", SCALAR), (f"b{depth}", SCALAR), (f"v{depth}", VECTOR))
    loop_vars = [n for n, k in names if k == INT]
    # loops first, then branches inside them, so that Conds run many times per program
    kind = draw(st.sampled_from(["if", "if", "switch", "fori", "while"] if loop_vars
                                else ["if", "switch", "fori", "fori", "while", "while"]))
    if kind == "if":
        number = counters.next_if()
        pred, thr = draw(exprs(names, SCALAR)), draw(THRESHOLDS)
        if loop_vars and draw(st.booleans()):
            # sin(2.5 i + pred): decisions that change from iteration to iteration, in an
            # order that differs from its reverse (a log read first-in-first-out fails)
            wave = Binary("mul", Index(draw(st.sampled_from(loop_vars))), Const(10.0))
            pred = Unary("sin", Binary("add", wave, pred))
        first, second = draw(st.permutations([child_spine, False]))
        then = draw(blocks(inner, depth, counters, first))
        orelse = draw(blocks(inner, depth, counters, second))
        return If(number, depth, pred, thr, then, orelse, draw(st.booleans()))
    if kind == "switch":
        number = counters.next_if()
        tests = tuple((draw(exprs(names, SCALAR)), draw(THRESHOLDS))
                      for _ in range(draw(st.integers(0, 2))))
        index = SwitchIndex(tests, draw(st.sampled_from([None, *loop_vars])),
                            draw(st.integers(-2, 3)))
        n = draw(st.integers(1, 3))
        on_spine = draw(st.integers(0, n - 1))
        branches = tuple(draw(blocks(inner, depth, counters, child_spine and j == on_spine))
                         for j in range(n))
        return Switch(number, depth, index, branches)
    number = counters.next_loop()
    if kind == "fori":
        lo, hi = draw(st.integers(0, 2)), draw(st.sampled_from([0, 1, 3, 4, 4]))
        hi_var = draw(st.sampled_from([None, *loop_vars]))
        body = draw(blocks(inner + ((f"i{depth}", INT),), depth, counters, child_spine,
                           min_size=1))
        return Fori(number, depth, lo, hi, hi_var, body)
    n, pred, thr = draw(st.integers(0, 4)), draw(exprs(inner, SCALAR)), draw(THRESHOLDS)
    body = draw(blocks(inner + ((f"k{depth}", INT),), depth, counters, child_spine,
                       min_size=1))
    return While(number, depth, n, pred, thr, body, draw(st.booleans()))


@st.composite
def programs(draw: Any) -> Prog:
    counters = Counters()
    body = draw(blocks(STATE_NAMES, 0, counters, spine=True))
    return Prog(body, draw(st.integers(1, 3)), counters.ifs, counters.loops)


@st.composite
def cases(draw: Any) -> tuple[Prog, float, float, np.ndarray]:
    prog = draw(programs())
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    a, b = (float(x) for x in rng.uniform(-1.5, 1.5, 2))
    return prog, a, b, rng.uniform(-1.5, 1.5, prog.dim)


def depth_of(stmts: tuple) -> int:
    best = 0
    for s in stmts:
        children = {If: lambda s: (s.then, s.orelse), Switch: lambda s: s.branches,
                    Fori: lambda s: (s.body,), While: lambda s: (s.body,)}.get(type(s))
        if children is not None:
            best = max(best, 1 + max(depth_of(c) for c in children(s)))
    return best


# ---------------------------------------------------------------------------------
# Properties
# ---------------------------------------------------------------------------------


def state_leaves(state: State) -> list[np.ndarray]:
    return [np.asarray(state.a, np.float64), np.asarray(state.b, np.float64),
            np.asarray(state.v, np.float64)]


@given(programs())
@settings(max_examples=100)
def test_generated_programs_reach_depth_three(prog: Prog) -> None:
    """The generator's spine guarantee (the properties rely on it)."""
    assert depth_of(prog.body) >= MAX_DEPTH


@given(cases())
@settings(max_examples=EXAMPLES)
def test_random_program_forward_log_vjp_jvp(case: tuple) -> None:
    """Forward values, the control log (content, then empty after reverse), vjp vs jvp."""
    prog, a, b, v = case
    program, _ = cfgrad_functions(prog)
    expected, oracle = python_run(prog, a, b, v)

    out, pullback = cg.vjp(program, a, b, v)
    assert isinstance(out, State)
    for got, want in zip(state_leaves(out), state_leaves(expected)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)

    # The log, at the level of the interpreter: exactly the oracle's path, consumed fully.
    entry, _ = lowered(program, (a, b, v))
    assert (len(entry.program.ifs()), len(entry.program.loops())) == (prog.n_ifs, prog.n_loops)
    tape = execute(entry.grad_plan(None), [np.float64(a), np.float64(b), v],
                   entry.strategies(None))
    assert [list(d) for d in tape.log.decisions] == oracle.decisions
    assert [list(t) for t in tape.log.trips] == oracle.trips
    rng = np.random.default_rng(0)
    u = State(rng.standard_normal(), rng.standard_normal(), rng.standard_normal(prog.dim))
    low_level = tape.pullback(state_leaves(u))
    assert tape.log.is_empty()

    cts = pullback(u)
    for x, y in zip(cts, low_level):
        np.testing.assert_array_equal(x, y)
    t = (rng.standard_normal(), rng.standard_normal(), rng.standard_normal(prog.dim))
    primal, tangent = cg.jvp(program, (a, b, v), t)
    assert [np.shape(x) for x in tangent] == [np.shape(x) for x in primal]
    u_jt = sum(float(np.sum(x * y)) for x, y in zip(state_leaves(u), state_leaves(tangent)))
    jtu_t = sum(float(np.sum(x * y)) for x, y in zip(cts, t))
    np.testing.assert_allclose(u_jt, jtu_t, rtol=1e-9, atol=1e-10)


def python_gradient_fd(prog: Prog, a: float, b: float, v: np.ndarray,
                       h: float = 1e-6) -> np.ndarray | None:
    """Central differences of the Python version's loss, or None if a perturbed point
    takes another path (decisions or trip counts) than the unperturbed one."""
    x0 = np.concatenate([[a, b], v])
    _, base = python_run(prog, a, b, v)

    def at(x: np.ndarray) -> tuple[float, PythonRun]:
        state, run = python_run(prog, float(x[0]), float(x[1]), x[2:])
        return float(loss(state, np)), run

    grads = []
    for j in range(len(x0)):
        e = np.zeros_like(x0)
        e[j] = h
        (fp, rp), (fm, rm) = at(x0 + e), at(x0 - e)
        for r in (rp, rm):
            if (r.decisions, r.trips) != (base.decisions, base.trips):
                return None
        grads.append((fp - fm) / (2 * h))
    return np.array(grads)


@given(cases())
@settings(max_examples=EXAMPLES)
def test_random_program_gradients_match_finite_differences(case: tuple) -> None:
    """`grad` equals finite differences of the Python version; check_grads (fwd and rev)."""
    prog, a, b, v = case
    program, scalar = cfgrad_functions(prog)
    fd = python_gradient_fd(prog, a, b, v)
    assume(fd is not None)
    try:
        check_grads(program, (a, b, v))
    except cg.PathInstabilityError:
        assume(False)
    value, (ga, gb, gv) = cg.value_and_grad(scalar, (0, 1, 2))(a, b, v)
    np.testing.assert_allclose(value, loss(python_run(prog, a, b, v)[0], np), rtol=1e-12,
                               atol=1e-12)
    np.testing.assert_allclose(np.concatenate([[ga, gb], gv]), fd, rtol=1e-5, atol=1e-6)


def test_control_log_is_empty_after_reverse_pass() -> None:
    """Driving the pipeline by hand: the forward run logs one decision per Cond execution
    and one trip count per loop execution; the adjoint run pops every one of them."""

    def f(x: Any, n: Any) -> Any:
        def outer(i: Any, s: Any) -> Any:
            inner = cg.fori_loop(0, i, lambda j, t: t * cnp.sin(x) + 1.0, s)
            return cg.cond(inner > 2.0, lambda: inner * 0.5, lambda: inner + x)

        return cg.fori_loop(0, n, outer, x)

    x, n = 0.9, np.int64(4)
    entry, _ = lowered(f, (x, n))
    tape = execute(entry.grad_plan(None), [np.float64(x), n], entry.strategies(None))
    assert not tape.log.is_empty()
    outer_trips, inner_trips = tape.log.trips
    assert (outer_trips, inner_trips) == ([4], [0, 1, 2, 3])
    assert len(tape.log.decisions[0]) == 4
    tape.pullback([np.float64(1.0)])
    assert tape.log.is_empty()
    with pytest.raises(cg.ArgumentValueError, match="already reversed"):
        tape.pullback([np.float64(1.0)])
    other = lowered(lambda x: x * 2.0, (1.0,))[0]
    with pytest.raises(cg.ArgumentValueError, match="forward Compiled given is of"):
        differentiate(entry.program, forward=other.compiled)
