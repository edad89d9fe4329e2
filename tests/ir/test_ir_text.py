"""The printed IR: golden texts of the seed examples, determinism, and print → parse →
print round trips (the parsed program must also compute what the original computes), and
the parser's work bounded by its text: a `full` constant is a broadcast view, sizes and
integers are bounded, deep nesting is refused, verifying allocates nothing of the declared
sizes; each refusal is a ParseError naming the line.

The golden files in tests/golden/ hold `Program.text()` of each seed example of
tests/seed_programs.py (`NAME.txt`) and of its adjoint (`NAME.adjoint.txt`), compared
whole. After an intended change to the printer, the lowering or seed_programs.py,
regenerate them and review the diff:

    CFGRAD_REGEN_GOLDEN=1 python -m pytest tests/ir/test_ir_text.py
"""

from __future__ import annotations

import os
import re
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import seed_programs as seeds
from hypothesis import given, settings
from hypothesis import strategies as st

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad.errors import (
    LoweringError,
    ParseError,
    VerifyError,
)
from cfgrad.forward_mode import build_jvp
from cfgrad.interpret import Compiled, Machine
from cfgrad.ir import Program, TensorType, format_param
from cfgrad.irparse import eval_param, parse_program
from cfgrad.primitives import PRIMITIVES

GOLDEN = Path(__file__).parents[1] / "golden"
REGEN = bool(os.environ.get("CFGRAD_REGEN_GOLDEN"))


def run(program: Program, args: tuple) -> list:
    """Outputs of one forward run through the compiled interpreter."""
    arrays = [np.asarray(a, p.type.dtype) for a, p in zip(args, program.params)]
    with np.errstate(all="ignore"):  # random programs may overflow: results compare bitwise
        return Machine(Compiled(program)).run(arrays)


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.txt"
    if REGEN:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"{path} is missing: regenerate with CFGRAD_REGEN_GOLDEN=1"
    assert text == path.read_text(), (
        f"{name}: Program.text() differs from {path}; if the change is intended, regenerate "
        "with CFGRAD_REGEN_GOLDEN=1 and review the diff")


@pytest.mark.parametrize("name", sorted(seeds.SEEDS))
def test_golden_forward(name):
    fun, args = seeds.SEEDS[name]
    check_golden(name, cg.lower(fun, *args).text())


@pytest.mark.parametrize("name", sorted(seeds.SEEDS))
def test_golden_adjoint(name):
    fun, args = seeds.SEEDS[name]
    check_golden(f"{name}.adjoint", cg.adjoint(cg.lower(fun, *args)).text())


def test_golden_files_are_all_used():
    expected = {f"{n}.txt" for n in seeds.SEEDS} | {f"{n}.adjoint.txt" for n in seeds.SEEDS}
    assert {p.name for p in GOLDEN.glob("*.txt")} == expected


def test_print_is_str():
    fun, args = seeds.SEEDS["cond"]
    p = cg.lower(fun, *args)
    assert str(p) == p.text() and p.text().endswith("Return %4\n")


@pytest.mark.parametrize("name", sorted(seeds.SEEDS))
def test_printing_and_lowering_are_deterministic(name):
    fun, args = seeds.SEEDS[name]
    p = cg.lower(fun, *args)
    assert p.text() == p.text()
    assert cg.adjoint(p).text() == cg.adjoint(p).text()
    again = cg.lower(fun, *args)
    assert again is not p and again.text() == p.text()
    assert cg.adjoint(again).text() == cg.adjoint(p).text()


@pytest.mark.parametrize("name", sorted(seeds.SEEDS))
def test_seed_round_trip(name):
    fun, args = seeds.SEEDS[name]
    p = cg.lower(fun, *args)
    q = cg.parse_program(p.text())
    assert q.text() == p.text()
    assert [np.asarray(o).tobytes() for o in run(q, args)] == [
        np.asarray(o).tobytes() for o in run(p, args)]
    # the parsed program differentiates like the traced one
    assert cg.adjoint(q).text() == cg.adjoint(p).text()


def test_parsed_program_runs_the_loop_the_text_describes():
    """Hand-written IR: Σ_{i<n} i·x computed by a while loop, parsed, verified and run."""
    text = """
program f(%x: f64[], %n: i64[]) -> (f64[])
  region loop#0 while preheader b0 header b1 body b2 latch b2 exit b3 max_iters=10
b0:                    ; entry
  Jmp b1
b1: preds (b0, b2)     ; loop#0 header
  %i: i64[] = Phi (b0: 0, b2: %i1)
  %s: f64[] = Phi (b2: %s1, b0: 0.0)
  %c: bool[] = lt %i, %n
  Cond %c -> Proj(T) b2 | Proj(F) b3
b2: preds (b1.T)       ; loop#0 body
  %i1: i64[] = add %i, 1
  %fi: f64[] = astype %i {dtype=dtype('float64')}
  %t: f64[] = mul %fi, %x
  %s1: f64[] = add %s, %t      ; hand.py:3
  Jmp b1 ↺
b3: preds (b1.F)       ; loop#0 exit
  %i_out: i64[] = Phi (b1.F: %i)
  %out: f64[] = Phi (b1.F: %s)
  Return %out
"""
    p = parse_program(text)
    assert run(p, (2.0, 4)) == [12.0]
    loop = p.loops()[0]
    assert (loop.max_iters, loop.header.role, loop.body.nodes[-1].loc.line) == (10, "header", 3)
    assert p.blocks[1].phis[1].inputs[0].type.dtype == np.float64  # reordered to preds order
    with pytest.raises(cg.LoopLimitError):
        run(p, (2.0, 11))
    printed = p.text()
    assert "%0: i64[] = Phi (b0: 0, b2: %3)" in printed
    assert cg.parse_program(printed).text() == printed


def test_inline_constants_keep_their_dtype():
    def f(x):
        return x * np.float32(2.0) + 1
    p = cg.lower(f, np.ones(3, np.float32))
    assert "2.0:f32" in p.text() and "1.0:f32" in p.text()
    q = cg.parse_program(p.text())
    consts = [n for n in q.blocks[0].nodes if n.op == "const"]
    assert sorted(str(n.outputs[0].type) for n in consts) == ["f32[]", "f32[]"]
    assert run(q, (np.ones(3, np.float32),))[0].dtype == np.float32


def test_special_literals_round_trip():
    """inf, nan and -0.0 print as Python literals, inline and inside array parameters."""
    table = np.array([np.nan, 1.0, -np.inf])

    def f(x):
        scaled = cg.cond(x > 0, lambda: x * float("inf"), lambda: x - 0.0)
        return scaled + cnp.asarray(table)[1] * -0.0

    p = cg.lower(f, 1.0)
    for literal in ("inf", "-0.0", "0.0", "array([nan, 1.0, -inf], 'float64')"):
        assert literal in p.text()
    q = cg.parse_program(p.text())
    assert q.text() == p.text()
    assert run(q, (1.0,)) == run(p, (1.0,))


def test_static_parameters_round_trip():
    """Slices, None, Ellipsis, integer arrays, traced indices, dtypes, axes, empty arrays."""
    def f(X, i):
        a = X[::-1, None, ...]
        b = X[np.array([0, 2])]
        c = cnp.concatenate([X, b], axis=0).T.reshape(-1)
        d = cnp.sum(a, axis=(0, 1), keepdims=True) + cnp.mean(X[..., 0])
        e = cnp.astype(X[i], "float32") * 2.0
        empty = cnp.concatenate([cnp.zeros((0, 3)), X])
        return cnp.sum(c) + cnp.sum(d) + cnp.sum(e).astype("float64") + cnp.sum(empty)

    args = (np.arange(9.0).reshape(3, 3), 1)
    p = cg.lower(f, *args)
    for text in ("slice(None, None, -1), None, ...)", "array([0, 2], 'int64')", "('$',)",
                 "dtype('float32')", "keepdims=True", "array([], 'float64', shape=(0, 3))"):
        assert text in p.text()
    q = cg.parse_program(p.text())
    assert q.text() == p.text() and run(q, args) == run(p, args)


@pytest.mark.parametrize("value", [
    (slice(1, None, -2), None, Ellipsis, "$"), [np.int64(3), (0,)], np.float32, np.dtype("i4"),
    np.zeros((2, 0, 1), np.float32), np.array(True), -0.0, float("inf"), 1 - 2j, np.int32(7)])
def test_format_param_reads_back(value):
    back = eval_param(format_param(value))
    assert format_param(back) == format_param(value)
    if isinstance(value, np.ndarray):
        assert back.dtype == value.dtype and back.shape == value.shape


@pytest.mark.parametrize("text, message", [
    ("", "empty"),
    ("programme f() -> ()", "expected `program"),
    ("program f(%x: f64[]) -> (f64[])\nb0:\n  %0: f64[] = sin %y\n  Return %0", "%y is never"),
    ("program f(%x: f64[]) -> (f64[])\nb0:\n  %0: f65[] = sin %x\n  Return %0", "f65[]"),
    ("program f(%x: f64[]) -> (f64[])\nb0:\n  Jmp b9", "block b9 is never defined"),
    ("program f(%x: f64[]) -> (f64[])\nb0:\n  %0: f64[] = sin %x\n  %0: f64[] = cos %x\n"
     "  Return %0", "defined twice"),
    ("program f(%x: f64[]) -> (f64[])\nb0:\n  Return %x\n  %0: f64[] = sin %x",
     "after its terminator"),
    ("program f(%x: f64[]) -> (f64[])\nb0:\n  %0: f64[] = sum %x {axes=__import__('os')}\n"
     "  Return %0", "not a literal"),
    ("program f(%x: f64[]) -> (f64[])\nb0:\n  %0: f64[] = sin %x ; just a note\n  Return %0",
     "source location"),
    ("program f(%x: f64[]) -> (f64[], f64[])\nb0:\n  Return %x", "declares outputs"),
    ("program f(%x: f64[]) -> (f64[])\nb0:\n  %0: i64[] = add %x, 2.5:i64\n  Return %x",
     "cannot have type i64"),
    ("program f(%x: f64[]) -> (f64[])\nb0:\n  Jmp b1 ↺\nb1: preds (b0)\n  Return %x",
     "no loop's latch"),
    ("program f(%x: f64[]) -> (f64[])\nb0:\n  Jmp b1\nb1: preds (b0)\n"
     "  %0: f64[] = Phi (b7: %x)\n  Return %0", "not among b1's preds"),
    ("program f(%n: i64[]) -> (i64[])\nb0:\n  %0: i64[] = add %n, 99999999999999999999\n"
     "  Return %0", "the constant 99999999999999999999 does not fit in int64"),
    ("program f(%n: i8[]) -> (i8[])\nb0:\n  %0: i8[] = add %n, 300:i8\n  Return %0",
     "does not fit in int8 (its range is -128 to 127)"),
    ("program f(%x: f64[]) -> (f64[])\nb0:\n"
     "  %0: i64[1] = const {value=array([99999999999999999999], 'int64')}\n  Return %x",
     "cannot evaluate"),
    # only the dtypes the IR names, in types and in parameters alike
    ("program f(%x: f128[]) -> (f64[])\nb0:\n  Return %x", "'f128[]' is not a type"),
    ("program f(%x: float64[]) -> (f64[])\nb0:\n  Return %x", "'float64[]' is not a type"),
    ("program f(%x: f64[]) -> (f64[])\nb0:\n  %0: f64[] = add %x, 1.0:f128\n  Return %0",
     "cannot read parameter '1.0:f128'"),
    *[(f"program f(%x: f64[]) -> (f64[])\nb0:\n  %0: f64[] = astype %x {{dtype={d}}}\n"
       "  Return %0", f"{d} is not a dtype of the IR; the IR's dtypes are f16 (float16), ")
      for d in ("dtype('O')", "dtype('float128')", "dtype('U3')", "dtype('datetime64')",
                "dtype('>f8')", "dtype(3)", "dtype(None)")],
    ("program f(%x: f64[]) -> (f64[])\nb0:\n"
     "  %0: f64[1] = const {value=array([1.0], 'float128')}\n  Return %x",
     "dtype('float128') is not a dtype of the IR"),
    ("program f(%x: f64[]) -> (f64[])\nb0:\n"
     "  %0: f64[2] = const {value=full((2,), 0, 'object')}\n  Return %x",
     "dtype('object') is not a dtype of the IR"),
])
def test_parse_errors_name_the_line(text, message):
    with pytest.raises(ParseError, match=re.escape(message)) as info:
        cg.parse_program(text)
    if text:
        assert "line " in str(info.value)


@pytest.mark.parametrize("index", [-5, -1, 0, 1, 2, 3, 99])
def test_parsed_switch_clamps_its_index_like_cg_switch(index):
    """A switch Cond reached with an index outside 0..n-1 takes the nearest case, as
    cg.switch (and lax.switch) do: the Cond clamps, traced (which emits no clip) and
    parsed programs alike."""
    fun, _ = seeds.SEEDS["switch"]
    p = cg.parse_program(cg.lower(fun, 0, 3.0).text())
    assert "clip" not in p.text() and "Cond %i" in p.text()
    expected = fun(index, 3.0)
    assert run(p, (index, 3.0)) == [expected]
    assert cg.value_and_grad(fun, 1)(index, 3.0)[0] == expected


def test_adjoints_do_not_parse():
    for name in ("cond", "while", "tree"):
        fun, args = seeds.SEEDS[name]
        with pytest.raises(ParseError, match="adjoint program"):
            cg.parse_program(cg.adjoint(cg.lower(fun, *args)).text())


# ---------------------------------------------------------------------------------
# Round trips over random structured programs
# ---------------------------------------------------------------------------------


@settings(max_examples=100)
@given(expr=seeds.expressions(3), dtype=st.sampled_from([np.float64, np.float32]))
def test_random_program_round_trip(expr, dtype):
    fun, args = seeds.build(expr), seeds.generated_args(dtype)
    p = cg.lower(fun, *args)
    text = p.text()
    assert cg.lower(fun, *args).text() == text  # lowering twice prints the same
    q = cg.parse_program(text)
    assert q.text() == text
    expected, got = run(p, args), run(q, args)
    assert [np.asarray(o).tobytes() for o in got] == [np.asarray(o).tobytes() for o in expected]
    # same structure, regions included: both transform into the same programs
    assert cg.adjoint(q).text() == cg.adjoint(p).text()
    jvp_text = build_jvp(p).text()
    assert build_jvp(q).text() == jvp_text
    assert cg.parse_program(jvp_text).text() == jvp_text


def test_names_with_parentheses_parse_and_object_parameters_are_named():
    """A transformation's program is named `grad(f)`: it reads back. A nested
    transformation's node refers to a sub-program the text does not hold: ParseError
    naming the parameter, not a wrong program."""
    def f(x):
        return cg.fori_loop(0, 3, lambda i, c: c * x, x)

    text = cg.lower(f, 1.0).text().replace("program f(", "program grad(f)(", 1)
    assert cg.parse_program(text).text() == text
    with pytest.raises(ParseError, match=r"vjp\(f, wrt=\[0\]\)"):
        cg.parse_program(cg.lower(cg.grad(f), 1.0).text())


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
# The parser's work is bounded by its text
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
