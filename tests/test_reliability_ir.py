"""Reliability of the IR text parser, the command line's numeric options, the source lines
of derived programs and the verifier's dtype checks (issue 23, items 10, 11, 14, 15).

- The parser's work stays proportional to its text: a `full` constant is a broadcast
  view, sizes and integers are bounded, deep nesting is refused, verifying allocates
  nothing of the declared sizes; each refusal is a ParseError naming the line.
- `cfgrad inspect --width` takes 20 to 1000 columns; wider consoles are laid out at 1000.
- Every node of a derived program (adjoints, JVP programs, nested sub-programs, custom
  rules) carries a line of the user's function, never the line of the code that asked
  for it.
- A primitive computed by a numpy ufunc takes the dtypes numpy accepts, and gives its
  result dtype, when traced, verified or called eagerly.
"""

from __future__ import annotations

import inspect
import io
import itertools
import os
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad import cli, inspector
from cfgrad.errors import (
    ArgumentTypeError,
    ArgumentValueError,
    LoweringError,
    ParseError,
    VerifyError,
)
from cfgrad.forward_mode import build_jvp
from cfgrad.interpret import Compiled, Machine
from cfgrad.ir import DTYPE_BY_SHORT_NAME, TensorType
from cfgrad.nested import sub_programs
from cfgrad.primitives import PRIMITIVES, bind

sys.path.insert(0, str(Path(__file__).parent))
import seed_programs as seeds  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def peak_bytes(fn, *args):
    """What `fn(*args)` returns, and the most memory (numpy's included) it held at once."""
    tracemalloc.start()
    try:
        result = fn(*args)
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def program_text(*body: str, params: str = "%x: f64[]", outs: str = "f64[]",
                 regions: str = "") -> str:
    return (f"program f({params}) -> ({outs})\n{regions}b0:  ; entry\n"
            + "".join(f"  {line}\n" for line in body))


LOOP = """program f(%x: f64[]) -> (f64[])
  region loop#0 while preheader b0 header b1 body b2 latch b2 exit b3 {tail}
b0:  ; entry
  Jmp b1
b1: preds (b0, b2)  ; loop#0 header
  %s: f64[] = Phi (b0: %x, b2: %s1)
  %c: bool[] = lt %s, 1.0
  Cond %c -> Proj(T) b2 | Proj(F) b3
b2: preds (b1.T)  ; loop#0 body
  %s1: f64[] = add %s, 1.0
  Jmp b1 ↺
b3: preds (b1.F)  ; loop#0 exit
  %o: f64[] = Phi (b1.F: %s)
  Return %o
"""


# ---------------------------------------------------------------------------------
# Item 10: the parser's work is bounded by its text
# ---------------------------------------------------------------------------------


def test_a_full_constant_is_parsed_as_a_view_and_runs():
    text = program_text("%0: f64[3000,3000] = const {value=full((3000, 3000), 0.5, 'float64')}",
                        "Return %0", outs="f64[3000,3000]")
    program, peak = peak_bytes(cg.parse_program, text)
    assert peak < 1 << 20, f"parsing 100 bytes held {peak} bytes"
    printed, peak = peak_bytes(program.text)
    assert peak < 1 << 20 and printed == cg.parse_program(printed).text()
    small = cg.parse_program(program_text(
        "%0: f64[3,2] = const {value=full((3, 2), 1.5, 'float64')}",
        "%1: f64[3,2] = mul %x, %0  ; f.py:3", "Return %1", outs="f64[3,2]"))
    out, = Machine(Compiled(small)).run([np.float64(2.0)])
    np.testing.assert_array_equal(out, np.full((3, 2), 3.0))


@pytest.mark.parametrize("value", ["full((2,), [1.0, 2.0], 'float64')",
                                   "full((-1,), 0.0, 'float64')", "full(3, 0.0, 'float64')",
                                   "full((True,), 0.0, 'float64')"])
def test_a_bad_full_is_a_parse_error(value):
    with pytest.raises(ParseError, match="line 3: "):
        cg.parse_program(program_text(f"%0: f64[2] = const {{value={value}}}", "Return %x"))


@pytest.mark.parametrize("strategy", ["RunStats(loops=[])", "LoopStats()", "check_strategy(1)",
                                      "EveryK(0)", "StoreAll", "Binomial(snapshots=1.5)"])
def test_a_checkpoint_is_one_of_the_strategies(strategy):
    with pytest.raises(ParseError, match="line 2: .*"):
        cg.parse_program(LOOP.format(tail=f"checkpoint={strategy}"))


def test_the_strategies_parse():
    for strategy in ("StoreAll()", "Recompute()", "EveryK(3)", "Binomial(4)", "Online(2)"):
        region, = cg.parse_program(LOOP.format(tail=f"checkpoint={strategy}")).loops()
        assert repr(region.checkpoint) == strategy


HUGE_HEX = "0x" + "f" * 4000  # Python reads a hexadecimal literal of any length
UNBOUNDED = ["5000-digit dimension", "type too large", "5000-digit line number",
             "5000-digit max_iters", "max_iters beyond int64", "hex constant", "hex axis",
             "hex power", "hex strategy argument", "100000 minus signs", "500 minus signs",
             "100000 additions", "500 additions", "150 nested lists"]


@pytest.mark.parametrize("line, text", [
    (3, program_text("%0: f64[" + "9" * 5000 + "] = sin %x", "Return %x")),
    (1, program_text("Return %x", params="%x: f64[100000000000,100000000000]",
                     outs="f64[100000000000,100000000000]")),
    (3, program_text("%0: f64[] = sin %x  ; f.py:" + "9" * 5000, "Return %0")),
    (2, LOOP.format(tail="max_iters=" + "9" * 5000)),
    (2, LOOP.format(tail="max_iters=99999999999999999999")),
    (3, program_text(f"%0: f64[] = add %x, {HUGE_HEX}", "Return %0")),
    (3, program_text(f"%0: f64[] = sum %x {{axes=({HUGE_HEX},), keepdims=False}}",
                     "Return %0")),
    (3, program_text(f"%0: f64[] = integer_pow %x {{n={HUGE_HEX}}}", "Return %0")),
    (2, LOOP.format(tail=f"checkpoint=EveryK({HUGE_HEX})")),
    (3, program_text("%0: f64[] = add %x, " + "-" * 100000 + "1.0", "Return %0")),
    (3, program_text("%0: f64[] = add %x, " + "-" * 500 + "1.0", "Return %0")),
    (3, program_text("%0: f64[] = add %x, 1.0" + "+1j" * 100000 + ":c128", "Return %0")),
    (3, program_text("%0: f64[] = add %x, 1.0" + "+1j" * 500 + ":c128", "Return %0")),
    (3, program_text("%0: f64[2] = const {value=array(" + "[" * 150 + "1.0" + "]" * 150
                     + ", 'float64')}", "Return %x")),
], ids=UNBOUNDED)
def test_unbounded_text_is_a_parse_error_naming_the_line(line, text):
    with pytest.raises(ParseError, match=f"^line {line}: ") as info:
        cg.parse_program(text)
    assert len(str(info.value)) < 1000  # a long line is shown abridged


def test_printed_integers_read_back():
    """The bounds leave room for every int cfgrad prints: a uint64 constant, a slice bound
    and an integer power beyond int64 (Python's own limit is 4300 digits)."""
    big = 10 ** 30
    for fun, args in [(lambda x: x[0:big], (np.ones(3),)),
                      (lambda x: x ** (2 ** 70), (1.0,)),
                      (lambda x: x + np.uint64(2 ** 64 - 1), (np.uint64(1),))]:
        text = cg.lower(fun, *args).text()
        assert cg.parse_program(text).text() == text


def test_verifying_an_index_allocates_nothing_of_its_declared_size():
    text = program_text("%0: f64[4000,4000] = index %x, %i {spec=('$',)}", "Return %0",
                        params="%x: f64[10], %i: i64[4000,4000]", outs="f64[4000,4000]")
    program, peak = peak_bytes(cg.parse_program, text)
    assert peak < 1 << 20, f"verifying held {peak} bytes"
    assert program.outputs[0].type == TensorType((4000, 4000), np.dtype(np.float64))


@st.composite
def index_cases(draw):
    """An array shape, an index spec (ints, slices, None, at most one `...`, traced indices
    `'$'` and constant integer arrays) and the shapes of the traced indices."""
    shape = tuple(draw(st.lists(st.integers(0, 3), max_size=4)))
    spec, traced = [], []
    for kind in draw(st.lists(st.sampled_from("islnet"), max_size=5)):
        if kind == "i":
            spec.append(draw(st.integers(-4, 4)))
        elif kind == "s":
            spec.append(slice(draw(st.sampled_from([None, 0, 1, -1])),
                              draw(st.sampled_from([None, 2, -1, 5])),
                              draw(st.sampled_from([None, 1, 2, -1]))))
        elif kind == "n":
            spec.append(None)
        elif kind == "e" and not any(s is Ellipsis for s in spec):
            spec.append(Ellipsis)
        elif kind == "t":
            spec.append("$")
            traced.append(tuple(draw(st.lists(st.integers(1, 3), max_size=2))))
        else:
            values = draw(st.lists(st.integers(-3, 3), max_size=3))
            column = draw(st.booleans()) and values
            spec.append(np.array(values, np.int64).reshape((-1, 1) if column else (-1,)))
    return shape, tuple(spec), traced


@settings(max_examples=150)
@given(index_cases())
def test_the_index_rule_gives_numpys_shape(case):
    """The rule, which allocates nothing, against numpy indexing a zero array with zero
    arrays for the traced indices (an empty axis a traced index selects on made length 1,
    as the rule's docstring says)."""
    shape, spec, traced = case
    taking = sum(1 for s in spec if s is not None and s is not Ellipsis)
    probe, axis = list(shape), 0
    for s in spec:
        if s is Ellipsis:
            axis += len(shape) - taking
        elif s is not None:
            if isinstance(s, str) and 0 <= axis < len(probe) and probe[axis] == 0:
                probe[axis] = 1
            axis += 1
    zeros = iter(np.zeros(t, np.int64) for t in traced)
    try:
        want = np.zeros(probe)[tuple(next(zeros) if isinstance(s, str) else s
                                     for s in spec)].shape
    except (IndexError, TypeError, ValueError):
        want = None
    types = [TensorType(shape, np.dtype(np.float64))] + [
        TensorType(t, np.dtype(np.int64)) for t in traced]
    try:
        got = PRIMITIVES["index"].abstract(types, spec=spec).shape
    except LoweringError:
        got = None
    assert got == want


def test_a_boolean_mask_in_a_parsed_spec_is_refused_as_when_traced():
    text = program_text("%0: f64[1] = index %x {spec=(array([True, False], 'bool'),)}",
                        "Return %0", params="%x: f64[2]", outs="f64[1]")
    with pytest.raises(VerifyError, match="boolean mask"):
        cg.parse_program(text)


# ---------------------------------------------------------------------------------
# Item 11: the inspector's width and the command line's numeric options
# ---------------------------------------------------------------------------------


QUICKSTART = f"{ROOT / 'examples' / 'quickstart.py'}:f"


def test_inspect_width_outside_20_to_1000_is_a_usage_error(capsys):
    for width in ("1001", "100000000", "19"):  # (1001 first: a width it once rendered)
        assert cli.main(["inspect", QUICKSTART, "--width", width]) == 2
        assert "laid out for 20 to 1000 columns" in capsys.readouterr().err


def test_a_wide_terminal_is_laid_out_at_1000_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100000")
    ns = cli._parser().parse_args(["inspect", QUICKSTART])
    assert cli._console(ns).width == 1000


def test_cg_inspect_lays_out_at_most_1000_columns():
    console = Console(file=io.StringIO(), width=20000, color_system=None)
    cg.inspect(seeds.cond_example, 1.0, 2.0, console=console)
    assert max(map(len, console.file.getvalue().splitlines())) == inspector.MAX_WIDTH


@pytest.mark.parametrize("fold, error", [(-1, ArgumentValueError), ("3", ArgumentTypeError),
                                         (True, ArgumentTypeError), (2.5, ArgumentTypeError)])
def test_inspect_fold_is_a_number_of_rows(fold, error):
    console = Console(file=io.StringIO(), width=80)
    with pytest.raises(error, match="fold"):
        cg.inspect(seeds.cond_example, 1.0, 2.0, fold=fold, console=console)


def test_a_checkpoint_option_nested_too_deeply_is_a_usage_error(capsys):
    argv = ["inspect", QUICKSTART, "--run",
            "--checkpoint", "EveryK(" + "-" * 100000 + "1)"]
    assert cli.main(argv) == 2
    assert "is not a strategy" in capsys.readouterr().err


# ---------------------------------------------------------------------------------
# Item 14: every node of a derived program carries a line of the user's function
# ---------------------------------------------------------------------------------


def cube_root(a):  # README.md's "A first look"
    if a > 1.0:
        x = a / 2.0
    else:
        x = a
    while abs(x * x * x - a) > 1e-12:
        x = x - (x * x * x - a) / (3.0 * x * x)
    return x


def returned_twice(x):
    y = cnp.sin(x)
    return y * 1.0, y


def nested_grad(x):
    g = cg.grad(lambda y: y * cnp.sin(y))
    return g(x) * x


def nested_vjp(x):
    out, pullback = cg.vjp(lambda y: cnp.exp(y) * y, x)
    return pullback(1.0)[0] + out


@cg.custom_vjp
def sin_with_rule(x):
    return cnp.sin(x)


def sin_fwd(x):
    return cnp.sin(x), cnp.cos(x)


def sin_bwd(cos_x, g):
    return (g * cos_x,)


sin_with_rule.defvjp(sin_fwd, sin_bwd)


def uses_custom_vjp(x):
    return sin_with_rule(x) * x


@cg.custom_jvp
def exp_with_rule(x):
    return cnp.exp(x)


@exp_with_rule.defjvp
def exp_rule(primals, tangents):
    (x,), (t,) = primals, tangents
    return cnp.exp(x), cnp.exp(x) * t


def uses_custom_jvp(x):
    return exp_with_rule(x) * 2.0


def closure_loop(x, w):
    return cg.fori_loop(0, 3, lambda i, c: c * w + cnp.sin(x), x)


def switched(i, x):
    return cg.switch(i, [lambda: x, lambda: x * 2.0, lambda: cnp.sin(x)])


RULES = (sin_with_rule, sin_fwd, sin_bwd, exp_with_rule, exp_rule)
CORPUS = [(cube_root, (8.0,)), (returned_twice, (0.5,)), (nested_grad, (0.3,)),
          (nested_vjp, (0.3,)), (uses_custom_vjp, (0.4,)), (uses_custom_jvp, (0.4,)),
          (closure_loop, (0.5, 0.9)), (switched, (2, 0.5)), *seeds.SEEDS.values()]


def lines_of(fun) -> tuple[str, range]:
    fun = inspect.unwrap(fun)  # (a custom_vjp / custom_jvp function)
    source, first = inspect.getsourcelines(fun)
    return os.path.basename(inspect.getsourcefile(fun)), range(first, first + len(source))


def stray_lines(program, fun) -> list[str]:
    """The nodes (and regions) of `program` and its sub-programs whose line is not one of
    `fun`'s (or of the custom rules it uses); constants, hoisted and shared, carry none."""
    allowed = [lines_of(f) for f in (fun, *RULES)]
    stray = []
    for p in [program, *(sub for _, sub in sub_programs(program))]:
        items = [(n.op, n.loc) for b in p.blocks for n in b.nodes if n.op != "const"]
        items += [(r.id, r.loc) for r in p.regions]
        stray += [f"{p.name}: {what} at {loc}" for what, loc in items if loc is None or not any(
            os.path.basename(loc.file) == file and loc.line in lines for file, lines in allowed)]
    return stray


def derived_programs(fun, args) -> list:
    """The adjoints (of every input, of the first float one), the JVP program, and grad(f)
    lowered by itself (a node standing for f) with its own adjoint and JVP program."""
    forward = cg.lower(fun, *args)
    first = next(i for i, a in enumerate(args) if np.asarray(a).dtype.kind == "f")
    derived = [cg.adjoint(forward), cg.adjoint(forward, wrt=[first]), build_jvp(forward)]
    if fun is not returned_twice:  # (grad takes a scalar output)
        of_grad = cg.lower(cg.grad(fun, argnums=first), *args)
        derived += [of_grad, cg.adjoint(of_grad), build_jvp(of_grad)]
    return derived


@pytest.mark.parametrize("fun, args", CORPUS, ids=[f.__name__ for f, _ in CORPUS])
def test_every_node_of_a_derived_program_has_a_line_of_the_function(fun, args):
    for program in derived_programs(fun, args):
        assert stray_lines(program, fun) == [], program.text()


@pytest.mark.parametrize("fun, args", [(cube_root, (8.0,)), (seeds.cond_example, (1.0, 2.0))],
                         ids=["cube_root", "cond_example"])
def test_grad_of_grad_lowered_by_itself_has_lines_of_the_function(fun, args):
    """`grad(grad(f))`'s program and its sub-programs hold nodes that stand for f (and for
    grad(f)): they carry f's lines, not the line that lowered them."""
    of_grad = cg.lower(cg.grad(cg.grad(fun)), *args)
    for program in (of_grad, cg.adjoint(of_grad)):
        assert stray_lines(program, fun) == [], program.text()


def test_the_readme_adjoint_tags_the_false_branch_with_the_if():
    program = cg.adjoint(cg.lower(cube_root, 8.0))
    _, lines = lines_of(cube_root)
    logpop, = [n for b in program.blocks for n in b.nodes if n.op == "LogPop"]
    assert logpop.loc.line == lines[1]  # `if a > 1.0:`
    false_case = program.regions[1].cases[1]
    assert [n.loc.line for n in false_case.nodes] == [lines[1]]


def test_a_parsed_program_without_lines_gives_an_adjoint_without_lines():
    text = program_text("%0: f64[] = sin %x", "%1: f64[] = mul %0, %0", "Return %1, %0",
                        outs="f64[], f64[]")
    program = cg.adjoint(cg.parse_program(text))
    locs = [n.loc for b in program.blocks for n in b.nodes if n.op != "const"]
    assert locs and locs == [None] * len(locs)


# ---------------------------------------------------------------------------------
# Item 15: numpy's type resolution, traced, verified and eager
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
