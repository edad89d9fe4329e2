"""Property tests over random plain-Python programs: the conversion's counterpart of
test_properties.py (issue 14, docs/autograph.md).

Hypothesis builds a small program AST (dataclasses below) and renders it to the source
text of `f(x, y, n, v, xp)`: x and y floats, n a small int, v a float vector, xp the numpy
module the same source runs on (numpy, autograd.numpy or cfgrad.numpy). The programs use
plain `if`/`elif`/`else`; `while` on a traced condition with a guaranteed bound (a counter
`k < n` or `k < 2` and a condition on the data, so trip counts vary with the data and can
be zero); `for i in range(n)` (traced n), `for i in range(3)` (concrete) and `for r in v`
(a traced array); `break`, `continue` and `return` inside branches and loops; loops in
loops, branches in loops and loops in branches up to depth 3; a swapping carry
`a, b = b, a`; Python-number variables (`acc = 0`, an int counter `c`, resets to `0`)
that meet traced floats; and smooth straight-line updates (sin, cos, tanh, products).

The source is written to a real file (the conversion reads source through linecache) and
imported. Each program is then run by plain Python on numpy (the reference value), by HIPS
autograd, which runs the same Python control flow natively on its boxes (the reference
derivatives, so no care about inputs near a branch switch is needed), and by cfgrad with
conversion on. Properties: the converted function on concrete inputs is the plain Python
function; `value_and_grad`'s value is Python's and its gradient autograd's, with the
default strategy and with a random checkpoint strategy; `jvp` is autograd's gradient
dotted with the tangent; and every loop on a traced condition is a loop region.

The tests below the properties are regressions of the two bugs these properties found
(a Python int carried through a region came out a strong i64; a Python float before a
loop setting an int was truncated).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.util
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cfgrad as cg
import cfgrad.numpy as cnp

autograd = pytest.importorskip("autograd")
anp = pytest.importorskip("autograd.numpy")

MAX_DEPTH = 3
EXAMPLES = max(50, settings.default.max_examples)  # more under CFGRAD_HYPOTHESIS=long
FLOAT_VARS = ("a", "b", "acc")  # state variables updated by smooth statements
RTOL, ATOL = 1e-9, 1e-12

pytestmark = pytest.mark.filterwarnings(
    "ignore:Output seems independent of input")  # autograd, on a path that drops x and y


# ---------------------------------------------------------------------------------
# The AST
# ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Name:
    """A float variable, a loop's row, or (`scaled`) an int read as `0.3 * i`."""

    name: str
    scaled: bool = False


@dataclasses.dataclass(frozen=True)
class Const:
    value: float


@dataclasses.dataclass(frozen=True)
class Call:
    fn: str  # sin, cos, tanh
    arg: Any


@dataclasses.dataclass(frozen=True)
class BinOp:
    op: str  # +, -, *
    lhs: Any
    rhs: Any


@dataclasses.dataclass(frozen=True)
class Compare:
    lhs: Any
    op: str  # <, >
    thr: float


@dataclasses.dataclass(frozen=True)
class BoolOp:
    op: str  # and, or
    lhs: Any
    rhs: Any


@dataclasses.dataclass(frozen=True)
class Not:
    cond: Any


@dataclasses.dataclass(frozen=True)
class Update:
    """A smooth update of a float variable; `kind` picks a bounded or a growing form."""

    target: str
    kind: str  # mix, add, mul, aug, set
    expr: Any


@dataclasses.dataclass(frozen=True)
class Swap:
    """`a, b = b, a`: a carry that swaps."""


@dataclasses.dataclass(frozen=True)
class Reset:
    """`target = value`, a Python number (the int 0 or a float) meeting traced floats."""

    target: str
    value: Any


@dataclasses.dataclass(frozen=True)
class Count:
    """`c = c + 1`: an int that stays an int, a traced one inside traced loops."""


@dataclasses.dataclass(frozen=True)
class If:
    tests: tuple  # of (condition, body): `if`, then `elif`s
    orelse: tuple | None


@dataclasses.dataclass(frozen=True)
class While:
    """`k = 0; while k < bound and cond: k = k + 1; body`: at most `bound` trips."""

    counter: str
    bound: str  # "n" (traced) or "2"
    data_first: bool  # `cond and k < bound` rather than `k < bound and cond`
    cond: Any
    body: tuple


@dataclasses.dataclass(frozen=True)
class For:
    var: str
    iterable: str  # "range(n)", "range(3)" or "v"
    body: tuple


@dataclasses.dataclass(frozen=True)
class Break:
    pass


@dataclasses.dataclass(frozen=True)
class Continue:
    pass


@dataclasses.dataclass(frozen=True)
class Return:
    expr: Any


TERMINALS = (Break, Continue, Return)


# ---------------------------------------------------------------------------------
# Generation
# ---------------------------------------------------------------------------------

THRESHOLDS = st.one_of(st.sampled_from([0.0, 0.5, -0.5, 1.0]),
                       st.floats(-1.5, 1.5, allow_subnormal=False))


@st.composite
def expressions(draw, scope: tuple, depth: int = 2):
    """A float expression over the names in scope (each `(name, is_int)`)."""
    kind = draw(st.integers(0, 4 if depth else 1))
    if kind == 0:
        name, is_int = draw(st.sampled_from(scope))
        return Name(name, is_int)
    if kind == 1:
        return Const(draw(st.sampled_from([0.5, 1.5, -0.7, 2.0])))
    if kind == 2:
        return Call(draw(st.sampled_from(["sin", "cos", "tanh"])),
                    draw(expressions(scope, depth - 1)))
    return BinOp(draw(st.sampled_from(["*", "+", "-"])), draw(expressions(scope, depth - 1)),
                 draw(expressions(scope, depth - 1)))


@st.composite
def conditions(draw, scope: tuple):
    """A traced (or, on Python-number variables, concrete) comparison, sometimes
    combined by `and`/`or`/`not`."""
    kind = draw(st.integers(0, 3))
    first = Compare(draw(expressions(scope, 1)), draw(st.sampled_from([">", "<"])),
                    draw(THRESHOLDS))
    if kind <= 1:
        return first
    if kind == 2:
        return Not(first)
    second = Compare(draw(expressions(scope, 1)), draw(st.sampled_from([">", "<"])),
                     draw(THRESHOLDS))
    return BoolOp(draw(st.sampled_from(["and", "or"])), first, second)


class Names:
    """Fresh loop-variable names within one program."""

    def __init__(self) -> None:
        self.count = 0

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"


COMPOUND = ["if", "while", "for_n", "for_3", "for_v"]


@st.composite
def statements(draw, names: Names, scope: tuple, depth: int, in_loop: bool,
               spine: bool = False):
    """One statement; on the spine, a compound one whose first body continues the spine
    (so every program nests control flow to MAX_DEPTH along one path)."""
    kinds = ["update", "update", "swap", "reset", "count"]
    if depth < MAX_DEPTH:
        kinds += COMPOUND
    kind = draw(st.sampled_from(COMPOUND if spine else kinds))
    if kind == "update":
        return Update(draw(st.sampled_from(FLOAT_VARS)),
                      draw(st.sampled_from(["mix", "add", "mul", "aug", "set"])),
                      draw(expressions(scope)))
    if kind == "swap":
        return Swap()
    if kind == "reset":
        return Reset(draw(st.sampled_from(FLOAT_VARS)), draw(st.sampled_from([0, 0.5])))
    if kind == "count":
        return Count()
    deeper = spine and depth + 1 < MAX_DEPTH
    if kind == "if":
        tests = []
        for j in range(draw(st.integers(1, 3))):
            tests.append((draw(conditions(scope)), draw(branch_bodies(
                names, scope, depth + 1, in_loop, deeper and j == 0))))
        orelse = (draw(branch_bodies(names, scope, depth + 1, in_loop))
                  if draw(st.booleans()) else None)
        return If(tuple(tests), orelse)
    if kind == "while":
        counter = names.fresh("k")
        inner = scope + ((counter, True),)
        return While(counter, draw(st.sampled_from(["n", "2"])), draw(st.booleans()),
                     draw(conditions(scope)), draw(blocks(names, inner, depth + 1, True, deeper)))
    var = names.fresh("r" if kind == "for_v" else "i")
    iterable = {"for_n": "range(n)", "for_3": "range(3)", "for_v": "v"}[kind]
    inner = scope + ((var, kind != "for_v"),)
    return For(var, iterable, draw(blocks(names, inner, depth + 1, True, deeper)))


@st.composite
def blocks(draw, names: Names, scope: tuple, depth: int, in_loop: bool, spine: bool = False):
    size = draw(st.integers(1, 3))
    at = draw(st.integers(0, size - 1)) if spine else -1
    return tuple(draw(statements(names, scope, depth, in_loop, i == at)) for i in range(size))


@st.composite
def branch_bodies(draw, names: Names, scope: tuple, depth: int, in_loop: bool,
                  spine: bool = False):
    """A block that may end in `return` (anywhere) or `break`/`continue` (in a loop)."""
    body = draw(blocks(names, scope, depth, in_loop, spine))
    ends = [None, "return"] + (["break", "continue"] if in_loop else [])
    end = draw(st.sampled_from(ends))
    if end == "return":
        return body + (Return(draw(expressions(scope))),)
    if end is not None:
        return body + ((Break() if end == "break" else Continue()),)
    return body


BASE_SCOPE = (("a", False), ("b", False), ("acc", False), ("x", False), ("y", False),
              ("c", True))


@st.composite
def programs(draw):
    return draw(blocks(Names(), BASE_SCOPE, 0, False, spine=True))


@st.composite
def inputs(draw):
    """(x, y, n, v): n from 0 (loops that never run) to 3, v with 0 to 3 rows."""
    x = draw(st.floats(-2.0, 2.0, allow_subnormal=False))
    y = draw(st.floats(-2.0, 2.0, allow_subnormal=False))
    n = draw(st.integers(0, 3))
    v = np.array(draw(st.lists(st.floats(-2.0, 2.0, allow_subnormal=False),
                               min_size=0, max_size=3)), dtype=np.float64)
    return x, y, n, v


# ---------------------------------------------------------------------------------
# Rendering and loading
# ---------------------------------------------------------------------------------


def render_expr(e) -> str:
    if isinstance(e, Name):
        return f"(0.3 * {e.name})" if e.scaled else e.name
    if isinstance(e, Const):
        return repr(e.value)
    if isinstance(e, Call):
        return f"xp.{e.fn}({render_expr(e.arg)})"
    if isinstance(e, BinOp):
        return f"({render_expr(e.lhs)} {e.op} {render_expr(e.rhs)})"
    if isinstance(e, Compare):
        return f"{render_expr(e.lhs)} {e.op} {e.thr!r}"
    if isinstance(e, BoolOp):
        return f"({render_expr(e.lhs)} {e.op} {render_expr(e.rhs)})"
    assert isinstance(e, Not)
    return f"not ({render_expr(e.cond)})"


UPDATES = {
    "mix": "{t} = 0.5 * {t} + xp.tanh({e})",
    "add": "{t} = {t} + xp.sin({e})",
    "mul": "{t} = {t} * xp.cos({e})",
    "aug": "{t} += 0.25 * {e}",
    "set": "{t} = xp.tanh({e})",
}


def render_block(body: tuple, indent: int) -> list[str]:
    pad = "    " * indent
    lines: list[str] = []
    for s in body:
        if isinstance(s, Update):
            lines.append(pad + UPDATES[s.kind].format(t=s.target, e=render_expr(s.expr)))
        elif isinstance(s, Swap):
            lines.append(pad + "a, b = b, a")
        elif isinstance(s, Reset):
            lines.append(pad + f"{s.target} = {s.value!r}")
        elif isinstance(s, Count):
            lines.append(pad + "c = c + 1")
        elif isinstance(s, If):
            for j, (cond, then) in enumerate(s.tests):
                lines.append(pad + ("if " if j == 0 else "elif ") + render_expr(cond) + ":")
                lines += render_block(then, indent + 1)
            if s.orelse is not None:
                lines.append(pad + "else:")
                lines += render_block(s.orelse, indent + 1)
        elif isinstance(s, While):
            bound = f"{s.counter} < {s.bound}"
            cond = render_expr(s.cond)
            test = f"{cond} and {bound}" if s.data_first else f"{bound} and {cond}"
            lines.append(pad + f"{s.counter} = 0")
            lines.append(pad + f"while {test}:")
            lines.append(pad + f"    {s.counter} = {s.counter} + 1")
            lines += render_block(s.body, indent + 1)
        elif isinstance(s, For):
            lines.append(pad + f"for {s.var} in {s.iterable}:")
            lines += render_block(s.body, indent + 1)
        elif isinstance(s, Break):
            lines.append(pad + "break")
        elif isinstance(s, Continue):
            lines.append(pad + "continue")
        else:
            assert isinstance(s, Return)
            lines.append(pad + f"return 1.0 * {render_expr(s.expr)}")
    return lines


def render(body: tuple) -> str:
    lines = ["def f(x, y, n, v, xp):",
             "    a = x",
             "    b = y",
             "    acc = 0",
             "    c = 1"]
    lines += render_block(body, 1)
    lines.append("    return a + 0.5 * b + 0.25 * acc + 0.1 * c")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def program_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("autograph_programs")


_LOADED: dict[str, Any] = {}


def load(source: str, directory) -> Any:
    """The function `f` of `source`, written to a real file and imported (one module per
    distinct source: hypothesis replays the same program while shrinking)."""
    digest = hashlib.sha1(source.encode()).hexdigest()[:16]
    if digest not in _LOADED:
        path = directory / f"prog_{digest}.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(f"autograph_prog_{digest}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _LOADED[digest] = module.f
    return _LOADED[digest]


# ---------------------------------------------------------------------------------
# References
# ---------------------------------------------------------------------------------


def python_value(f, args) -> float:
    x, y, n, v = args
    return f(x, y, n, v, np)


def autograd_gradient(f, args) -> tuple:
    """d f / d (x, y, v) by HIPS autograd running the program's control flow natively."""
    x, y, n, v = args

    def g(x, y, v):
        return f(x, y, n, v, anp)

    return tuple(np.asarray(autograd.grad(g, i)(x, y, v), dtype=np.float64) for i in range(3))


def assert_close(actual, expected, what: str, source: str, args) -> None:
    np.testing.assert_allclose(np.asarray(actual, dtype=np.float64), expected, rtol=RTOL,
                               atol=ATOL, err_msg=f"{what}\nargs={args}\n{source}")


def check_value_and_gradient(body, source, f, args, checkpoint) -> None:
    x, y, n, v = args
    value, grads = cg.value_and_grad(functools.partial(f, xp=cnp), argnums=(0, 1, 3),
                                     checkpoint=checkpoint)(x, y, n, v)
    assert_close(value, python_value(f, args), "value", source, args)
    for got, want, name in zip(grads, autograd_gradient(f, args), "xyv", strict=True):
        assert np.shape(got) == np.shape(want)
        assert_close(got, want, f"d/d{name} (checkpoint={checkpoint!r})", source, args)


STRATEGIES = {
    "StoreAll": cg.checkpoint.StoreAll(),
    "Recompute": cg.checkpoint.Recompute(),
    "EveryK2": cg.checkpoint.EveryK(2),
    "Binomial2": cg.checkpoint.Binomial(2),
    "Online2": cg.checkpoint.Online(2),
}


def traced_loops(body: tuple) -> int:
    """A lower bound on the loop regions: the loops certainly traced and certainly reached.

    Certainly traced: a `while` whose test starts with `k < n` (n traced; a concrete data
    condition first may short-circuit it) or whose data condition reads x or y (never
    reassigned), `range(n)`, and the rows of v. Certainly reached: not inside
    an `if` (whose condition may be concrete on Python numbers, leaving a branch untraced)
    and not after an `if` or loop that holds a jump (a concrete `return`, `break` or
    `continue` may skip the rest). The bodies of such loops, and of `range(3)`, are traced or
    run by Python."""
    count = 0
    for s in body:
        if isinstance(s, While):
            if (s.bound == "n" and not s.data_first) or reads_xy(s.cond):
                count += 1 + traced_loops(s.body)  # else Python may never run the body
        elif isinstance(s, For):
            count += traced_loops(s.body) + (s.iterable != "range(3)")
        if isinstance(s, If | While | For) and holds_jump(s):
            break
    return count


def reads_xy(e) -> bool:
    """Whether a condition is certainly traced: it compares an expression of x or y (an
    `and`/`or` needs both sides traced, since a concrete side may short-circuit)."""
    if isinstance(e, Compare):
        return mentions_xy(e.lhs)
    if isinstance(e, BoolOp):
        return reads_xy(e.lhs) and reads_xy(e.rhs)
    return reads_xy(e.cond)


def mentions_xy(e) -> bool:
    if isinstance(e, Name):
        return e.name in ("x", "y")
    if isinstance(e, Call):
        return mentions_xy(e.arg)
    if isinstance(e, BinOp):
        return mentions_xy(e.lhs) or mentions_xy(e.rhs)
    return False


def holds_jump(s) -> bool:
    if isinstance(s, TERMINALS):
        return True
    if isinstance(s, If):
        return any(holds_jump(t) for _, b in s.tests for t in b) or any(
            holds_jump(t) for t in s.orelse or ())
    if isinstance(s, While | For):
        return any(holds_jump(t) for t in s.body)
    return False


# ---------------------------------------------------------------------------------
# Known bugs
# ---------------------------------------------------------------------------------


# Regression: a Python int that a traced loop or `if` carries (`acc = 0` before it,
# assigned or merely carried in it) came out of it a strong i64 rather than a weak Python
# number, and a later loop or `if` that makes it a float refused the change of dtype,
# though Python and autograd accept it.


def _int_then_float_loop(x, n):
    acc = 0
    for _ in range(n):
        acc = 0
    for _ in range(n):
        acc = 0.5 * acc + x
    return acc + x


def _reset_in_nested_loops(x, n):
    a = x
    for _ in range(n):
        a = 0
        for _ in range(n):
            a = 0
    return a + x


def test_int_from_a_loop_then_a_float_loop():
    value, g = cg.value_and_grad(_int_then_float_loop)(1.5, 2)
    np.testing.assert_allclose((value, g), (1.5 * 1.5 + 1.5, 1.5 + 1.0), rtol=1e-15)


def test_int_reset_carried_through_an_inner_loop():
    value, g = cg.value_and_grad(_reset_in_nested_loops)(1.5, 2)
    assert (value, g) == (1.5, 1.0)


def _int_from_an_if_then_float_if(x):
    acc = 0
    if x > 0:
        acc = 0
    if x > 1:
        acc = acc + x
    return acc + x


def test_int_from_an_if_then_a_float_if():
    value, g = cg.value_and_grad(_int_from_an_if_then_float_if)(1.5)
    assert (value, g) == (3.0, 2.0)


# Regression: a Python float that a traced loop's body replaces by an int (`a = 0.5`
# before the loop, `a = 0` in it) took the int's dtype, so 0.5 became 0 when the loop ran
# no iteration, where Python keeps 0.5 (a silently wrong value; with `a = n`, the same).


def _float_then_int_in_loop(x, n):
    a = 0.5
    for _ in range(n):
        a = 0
    return a + x


def _float_then_traced_int_in_loop(x, n):
    a = 0.5
    for _ in range(n):
        a = n
    return a + x


def test_python_float_before_a_loop_assigning_an_int():
    assert _float_then_int_in_loop(1.5, 0) == 2.0
    value, g = cg.value_and_grad(_float_then_int_in_loop)(1.5, 0)
    assert (value, g) == (2.0, 1.0)


def test_python_float_before_a_loop_assigning_a_traced_int():
    """Refusing the loop (JAX refuses a carry changing dtype) would be right too."""
    assert _float_then_traced_int_in_loop(1.5, 0) == 2.0
    try:
        value, g = cg.value_and_grad(_float_then_traced_int_in_loop)(1.5, 0)
    except cg.ConversionError:
        return
    assert (value, g) == (2.0, 1.0)


# ---------------------------------------------------------------------------------
# Properties
# ---------------------------------------------------------------------------------


@settings(max_examples=EXAMPLES)
@given(body=programs(), args=inputs(), xp=st.sampled_from([np, cnp]))
def test_converted_function_on_concrete_inputs_is_plain_python(program_dir, body, args, xp):
    """On concrete inputs every condition is concrete: the converted program (its jumps
    turned into flags, its returns moved) computes exactly what Python computes."""
    source = render(body)
    f = load(source, program_dir)
    x, y, n, v = args
    got = cg.autograph(functools.partial(f, xp=xp))(x, y, n, v)
    assert_close(got, python_value(f, args), "value", source, args)


@settings(max_examples=EXAMPLES)
@given(body=programs(), args=inputs())
def test_value_and_grad_match_python_and_autograd(program_dir, body, args):
    """Traced, the value is Python's and the gradient autograd's (default strategy)."""
    source = render(body)
    check_value_and_gradient(body, source, load(source, program_dir), args, None)


@settings(max_examples=EXAMPLES)
@given(body=programs(), args=inputs(), strategy=st.sampled_from(sorted(STRATEGIES)))
def test_value_and_grad_under_a_checkpoint_strategy(program_dir, body, args, strategy):
    """Each strategy replays the converted loops (and their trip counts) differently; the
    gradient is autograd's under every one."""
    source = render(body)
    check_value_and_gradient(body, source, load(source, program_dir), args, STRATEGIES[strategy])


@settings(max_examples=EXAMPLES)
@given(body=programs(), args=inputs(),
       tangent=st.tuples(st.floats(-1, 1), st.floats(-1, 1), st.floats(-1, 1)))
def test_jvp_is_autograd_gradient_dot_tangent(program_dir, body, args, tangent):
    """Forward mode through the same regions: Python's value, and autograd's gradient
    dotted with the tangent."""
    source = render(body)
    f = load(source, program_dir)
    x, y, n, v = args
    tv = np.full(v.shape, tangent[2])
    gx, gy, gv = autograd_gradient(f, args)
    value, derivative = cg.jvp(functools.partial(f, xp=cnp), (x, y, n, v),
                               (tangent[0], tangent[1], 0, tv))
    assert_close(value, python_value(f, args), "value", source, args)
    assert_close(derivative, gx * tangent[0] + gy * tangent[1] + np.sum(gv * tv),
                 "jvp", source, args)


@settings(max_examples=EXAMPLES)
@given(body=programs(), args=inputs())
def test_loops_on_traced_conditions_are_regions(program_dir, body, args):
    """Every loop certainly reached with a traced condition (`traced_loops`) becomes at
    least one loop region (more when Python unrolls a concrete loop around it)."""
    source = render(body)
    f = load(source, program_dir)
    text = str(cg.lower(functools.partial(f, xp=cnp), *args))
    regions = [line for line in text.splitlines() if line.lstrip().startswith("region loop#")]
    assert len(regions) >= traced_loops(body), source
