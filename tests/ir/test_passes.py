"""The optimisation passes (cfgrad/passes.py), the algebraic simplifier above all: what it
folds in adjoints and in hand-written programs, what it must leave (a float `x + 0.0`, a
constant that broadcasts), and that simplifying never changes a result's bits; the
rematerializing pass never changes a gradient's bits nor keeps more memory than without it."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cfgrad as cg
import cfgrad.numpy as cnp
import cfgrad.passes as passes
import cfgrad.reverse
import cfgrad.reverse as reverse
from cfgrad.checkpoint import Binomial, EveryK, Online, Recompute, StoreAll
from cfgrad.interpret import Compiled, Machine
from cfgrad.ir import Program
from cfgrad.passes import (
    ADJOINT_PIPELINE,
    eliminate_common_subexpressions,
    eliminate_dead_code,
    rematerialize_primal_reads,
    run_passes,
    simplify,
)
from cfgrad.verify import verify


def lines(program: Program) -> list[str]:
    """The program's text without its header, block labels and source comments."""
    body = [re.sub(r"\s*;.*$", "", line).strip() for line in program.text().splitlines()[1:]]
    return [line for line in body if line and not re.fullmatch(r"r\d+:", line)]


# ---------------------------------------------------------------------------------
# Adjoints: what the derivative rules emit, simplified
# ---------------------------------------------------------------------------------


def test_adjoint_of_a_square_has_no_first_power():
    """The rule of x ** n is ct * (n * x ** (n - 1)): for n = 2 that was `integer_pow x
    {n=1}`, the inspector's complaint in issue 11."""
    assert lines(cg.adjoint(cg.lower(lambda x: x ** 2, 2.0))) == [
        "%0: f64[] = Primal ^%x",
        "%1: f64[] = mul 2.0, %0",
        "%2: f64[] = mul %ct, %1",
        "Return %2",
    ]


def test_adjoint_of_a_polynomial_reads_each_power_once():
    adjoint = cg.adjoint(cg.lower(lambda x: cnp.sum(x ** 3 + x ** 2), np.ones(3)))
    assert lines(adjoint) == [
        "%0: f64[1] = reshape %ct {shape=(1,)}",
        "%1: f64[3] = broadcast_to %0 {shape=(3,)}",
        "%2: f64[3] = Primal ^%x",
        "%3: f64[3] = mul 2.0, %2",
        "%4: f64[3] = mul %1, %3",
        "%5: f64[3] = integer_pow %2 {n=2}",
        "%6: f64[3] = mul 3.0, %5",
        "%7: f64[3] = mul %1, %6",
        "%8: f64[3] = add %4, %7",
        "Return %8",
    ]


def test_adjoint_of_double_negation_and_unit_factor_is_the_cotangent():
    assert lines(cg.adjoint(cg.lower(lambda x: cnp.negative(-x) * 1.0, 2.0))) == ["Return %ct"]


def test_adjoint_of_a_negative_unit_factor_is_a_negation():
    assert lines(cg.adjoint(cg.lower(lambda x: x * -1.0, 2.0))) == [
        "%0: f64[] = neg %ct", "Return %0"]


def test_adjoint_of_a_division_by_one_is_the_cotangent():
    assert lines(cg.adjoint(cg.lower(lambda x: x / 1.0, 2.0))) == ["Return %ct"]


# ---------------------------------------------------------------------------------
# The rules one by one, on hand-written programs
# ---------------------------------------------------------------------------------

HEADER = "program p(%x: f64[3], %s: f64[], %i: i64[3]) -> ({})\nb0:\n"


def simplified(body: str, result_type: str) -> list[str]:
    program = cg.parse_program(HEADER.format(result_type) + body)
    simplify(program)
    return lines(verify(program))[1:]  # the entry block's label is b0, not r0


@pytest.mark.parametrize("op, result", [
    ("mul %x, 1.0", "%x"), ("mul 1.0, %x", "%x"), ("div %x, 1.0", "%x"),
    ("add %x, -0.0", "%x"), ("add -0.0, %x", "%x"), ("sub %x, 0.0", "%x"),
    ("integer_pow %x {n=1}", "%x"),
])
def test_folded_to_the_operand(op, result):
    assert simplified(f"  %0: f64[3] = {op}\n  Return %0\n", "f64[3]") == [f"Return {result}"]


@pytest.mark.parametrize("op", [
    "add %x, 0.0",  # -0.0 + 0.0 is +0.0: not x bit for bit
    "sub %x, -0.0",  # likewise
    "sub 0.0, %x",  # that is a negation (and not one for x = 0)
    "div 1.0, %x",
    "mul %x, 2.0",
    "integer_pow %x {n=2}",
])
def test_kept(op):
    assert simplified(f"  %0: f64[3] = {op}\n  Return %0\n", "f64[3]") == [
        f"%0: f64[3] = {op}", "Return %0"]


def test_a_constant_that_broadcasts_is_kept():
    """s * ones(3) is s broadcast to (3,): folding it to s would change the type."""
    body = ("  %0: f64[3] = const {value=full((3,), 1.0, 'float64')}\n"
            "  %1: f64[3] = mul %s, %0\n  Return %1\n")
    assert simplified(body, "f64[3]")[-2:] == ["%1: f64[3] = mul %s, %0", "Return %1"]


def test_integers_fold_any_zero():
    assert simplified("  %0: i64[3] = add %i, 0\n  %1: i64[3] = sub %0, 0\n  Return %1\n",
                      "i64[3]") == ["Return %i"]


def test_zeroth_power_is_a_constant_and_negative_unit_a_negation():
    """-(-(-x)) folds to a second `neg x`, which CSE then merges with the first."""
    body = ("  %0: f64[3] = integer_pow %x {n=0}\n  %1: f64[3] = mul %x, -1.0\n"
            "  %2: f64[3] = neg %1\n  %3: f64[3] = neg %2\n  %4: f64[3] = add %0, %3\n"
            "  Return %4\n")
    assert simplified(body, "f64[3]") == [
        "%0: f64[3] = const {value=full((3,), 1.0, 'float64')}",
        "%1: f64[3] = neg %x",
        "%2: f64[3] = neg %x",
        "%3: f64[3] = add %0, %2",
        "Return %3",
    ]
    program = cg.parse_program(HEADER.format("f64[3]") + body)
    run_passes(program, [simplify, eliminate_common_subexpressions, eliminate_dead_code])
    assert lines(verify(program))[1:] == [
        "%0: f64[3] = const {value=full((3,), 1.0, 'float64')}",
        "%1: f64[3] = neg %x",
        "%2: f64[3] = add %0, %1",
        "Return %2",
    ]


# ---------------------------------------------------------------------------------
# Simplifying never changes a result's bits
# ---------------------------------------------------------------------------------

CONSTANTS = [1.0, -1.0, 0.0, -0.0, 2.0]


def expressions(depth: int) -> st.SearchStrategy:
    """Trees over x (a vector) and y (a scalar) rich in what the simplifier folds: powers
    0 to 3, constants 1, -1, +0, -0 on either side of + - * /, negations."""
    leaf = st.sampled_from(["x", "y"])
    if depth == 0:
        return leaf
    sub = expressions(depth - 1)
    return st.one_of(
        leaf,
        st.tuples(st.sampled_from(["neg", "sin"]), sub),
        st.tuples(st.just("pow"), sub, st.integers(0, 3)),
        st.tuples(st.sampled_from(["add", "sub", "mul", "div"]), sub,
                  st.sampled_from(CONSTANTS), st.booleans()),
        st.tuples(st.sampled_from(["add", "mul"]), sub, sub),
    )


BINARY = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
          "div": lambda a, b: a / b}


def evaluate(e, x, y):
    if isinstance(e, str):
        return x if e == "x" else y
    op = e[0]
    if op == "neg":
        return -evaluate(e[1], x, y)
    if op == "sin":
        return cnp.sin(evaluate(e[1], x, y))
    if op == "pow":
        return evaluate(e[1], x, y) ** e[2]
    a = evaluate(e[1], x, y)
    if isinstance(e[2], float):
        b, constant_first = e[2], e[3]
        return BINARY[op](b, a) if constant_first else BINARY[op](a, b)
    return BINARY[op](a, evaluate(e[2], x, y))


def bits(values) -> list[bytes]:
    """The results' bytes, every NaN made the same one: `x * -1` becomes `neg x`, and
    numpy's negative flips a NaN's sign bit where a product keeps it."""
    return [np.where(np.isnan(v), np.nan, v).tobytes() for v in map(np.asarray, values)]


ARGS = (np.array([-0.0, 0.0, 1.5, -2.0, np.inf, np.nan]), -0.0)


@settings(max_examples=150, deadline=None)
@given(expr=expressions(4))
def test_simplifying_a_random_program_keeps_its_outputs_bit_for_bit(expr):
    def f(x, y):
        return evaluate(expr, x, y) + 0.0 * x, evaluate(expr, x, y) * y

    program = cg.lower(f, *ARGS)
    simpler = cg.parse_program(program.text())
    simplify(simpler)
    verify(simpler)
    with np.errstate(all="ignore"):
        expected = Machine(Compiled(program)).run(list(ARGS))
        got = Machine(Compiled(simpler)).run(list(ARGS))
    assert bits(got) == bits(expected)


@settings(max_examples=60, deadline=None)
@given(expr=expressions(3))
def test_gradients_with_and_without_the_simplifier_are_bitwise_equal(expr):
    def f(x, y):
        return cnp.sum(evaluate(expr, x, y) * x) + y

    args = (np.array([-0.0, 0.5, 1.5, -2.0]), 0.75)
    with np.errstate(all="ignore"):
        simplified_grads = cg.grad(f, argnums=(0, 1))(*args)
        without = tuple(p for p in ADJOINT_PIPELINE if p is not simplify)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(cfgrad.reverse, "ADJOINT_PIPELINE", without)
            plain_grads = cg.grad(lambda x, y: f(x, y), argnums=(0, 1))(*args)
    assert bits(simplified_grads) == bits(plain_grads)


# -- recomputing cheap forward values in adjoints -------------------------------------


def heat_like(u, n):
    """The cubic reaction term of examples/heat.py: the adjoint of u * u * u reads u and
    u * u of every iteration."""
    return cnp.sum(cg.fori_loop(0, n, lambda i, u: u - 0.1 * (u * u * u), u) ** 2)


WITHOUT_REMATERIALIZING = tuple(p for p in ADJOINT_PIPELINE
                                if p is not rematerialize_primal_reads)


def test_a_product_of_values_the_adjoint_reads_is_recomputed_not_kept():
    u = np.linspace(-1.0, 1.0, 5)
    adjoint = cg.adjoint(cg.lower(heat_like, u, 4))
    reads = {line.split("= ")[1] for line in lines(adjoint) if "Primal" in line}
    assert reads == {"Primal ^%1", "Primal ^%9"}, reads  # u in the loop, not %4 = u * u
    assert "mul %13, %14" in " ".join(lines(adjoint))  # u * u of two reads of u
    _, pullback = cg.vjp(heat_like, u, 4)
    grad = pullback(1.0)[0]
    assert pullback.stats.loops[0].peak_bytes == 4 * u.nbytes  # u alone, not u * u too
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cfgrad.reverse, "ADJOINT_PIPELINE", WITHOUT_REMATERIALIZING)
        _, kept = cg.vjp(lambda u, n: heat_like(u, n), u, 4)
        assert bits([kept(1.0)[0]]) == bits([grad])
    assert kept.stats.loops[0].peak_bytes == 2 * 4 * u.nbytes


def test_outside_loops_nothing_is_recomputed():
    """A forward value outside any loop stays where the forward run left it: reading it
    costs nothing, recomputing it would."""
    adjoint = cg.adjoint(cg.lower(lambda x: cnp.log(x[0] * x[1]), np.array([2.0, 3.0])))
    assert "Primal ^%2" in " ".join(lines(adjoint))  # x[0] * x[1] read, not recomputed


@settings(max_examples=40, deadline=None)
@given(expr=expressions(3))
def test_gradients_of_loops_with_and_without_recomputing_are_bitwise_equal(expr):
    def f(x, y):
        return cnp.sum(cg.fori_loop(0, 3, lambda i, c: evaluate(expr, c, y) * 0.5 + x, x))

    args = (np.array([-0.0, 0.5, 1.5, -2.0]), 0.75)
    with np.errstate(all="ignore"):
        grads = cg.grad(f, argnums=(0, 1))(*args)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(cfgrad.reverse, "ADJOINT_PIPELINE", WITHOUT_REMATERIALIZING)
            kept = cg.grad(lambda x, y: f(x, y), argnums=(0, 1))(*args)
    assert bits(grads) == bits(kept)


# -- JVP programs --------------------------------------------------------------------


def jvp_program(f, *args) -> Program:
    from cfgrad.api import lowered

    return lowered(f, args)[0].jvp.program


def test_jvp_program_is_simplified():
    """The tangent rules' `x * 1` and unit powers are folded in JVP programs too."""
    text = "\n".join(lines(jvp_program(lambda x: (x ** 2) * 1.0, 2.0)))
    assert "{n=1}" not in text and "1.0" not in text
    assert cg.jvp(lambda x: (x ** 2) * 1.0, (2.0,), (1.0,)) == (4.0, 4.0)


def test_jvp_dead_code_keeps_a_live_carry_exit_phi():
    """A carry the loop uses but nothing after it reads keeps its exit Phi: dead-code
    elimination leaves the loop-closed form whole (this raised VerifyError)."""
    def f(x):
        return cg.fori_loop(0, 3, lambda i, c: (c[0] * c[1], c[1] + 1.0), (x, x))[0]

    program = jvp_program(f, 2.0)
    for loop in program.loops():
        assert len(loop.exit.phis) == len(loop.header.phis)
    value, tangent = cg.jvp(f, (2.0,), (1.0,))
    # f(x) = x * x * (x + 1) * (x + 2)
    assert value == 2.0 * 2.0 * 3.0 * 4.0
    assert tangent == pytest.approx(2 * 2.0 * 3.0 * 4.0 + 4.0 * 4.0 + 4.0 * 3.0)


# ---------------------------------------------------------------------------------
# The rematerializing pass: the adjoint reads primal values again instead of keeping
# them; it runs last in the adjoint pipeline (it once ran before dead-code removal)
# ---------------------------------------------------------------------------------


_WITHOUT_REMAT = tuple(p for p in passes.ADJOINT_PIPELINE
                       if p is not passes.rematerialize_primal_reads)


def _bits(x) -> bytes:
    return np.ascontiguousarray(np.asarray(x)).tobytes()


def _run(make, args):
    """The gradient and each loop's peak_bytes of a fresh function from `make` (the
    lowering cache is per function, so each call lowers again under the current passes)."""
    _, pullback = cg.vjp(make(), *args)
    grad = pullback(1.0)
    return grad, [s.peak_bytes for s in pullback.stats.loops]


def _with_and_without_remat(make, args):
    with_pass = _run(make, args)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(reverse, "ADJOINT_PIPELINE", _WITHOUT_REMAT)
        without = _run(make, args)
    return with_pass, without


def _nested(outer_strategy, inner_strategy):
    """v = h * p in an inner while loop with p from the outer loop, carries that swap."""
    def make():
        def f(x):
            def outer(i, c):
                a, b = c
                p = a * x

                def inner(cc):
                    h, k = cc
                    v = h * p
                    w = h - a
                    return (v * w + w * 0.25, k + 1.0)
                h, _ = cg.while_loop(lambda cc: cc[1] < 3.0 - a, inner, (b, 0.0),
                                     checkpoint=inner_strategy, max_iters=20)
                return (b * 0.9 + 0.1 * h, a)
            a, b = cg.fori_loop(0, 4, outer, (x, x * 0.5), checkpoint=outer_strategy)
            return a * b
        return f
    return make


@pytest.mark.parametrize("outer", [StoreAll(), Recompute(), EveryK(2), Binomial(2), Online(2)],
                         ids=repr)
@pytest.mark.parametrize("inner", [None, Recompute(), Binomial(1)], ids=repr)
def test_remat_nested_loops_same_bits_and_no_more_memory(outer, inner):
    (g1, peaks1), (g2, peaks2) = _with_and_without_remat(_nested(outer, inner), (0.7,))
    assert _bits(g1) == _bits(g2)
    assert all(p1 <= p2 for p1, p2 in zip(peaks1, peaks2, strict=True))
    assert any(p1 < p2 for p1, p2 in zip(peaks1, peaks2, strict=True))  # the pass fired
    eps = 1e-6
    fd = (_nested(outer, inner)()(0.7 + eps) - _nested(outer, inner)()(0.7 - eps)) / (2 * eps)
    assert np.isclose(g1[0], fd, rtol=1e-6)


def _inner_loop_reads_v():
    """v = a * b in the outer body, read by an inner loop's adjoint; b is not active."""
    def make():
        def f(x):
            def outer(i, c):
                a, b = c
                v = a * b
                k = cg.fori_loop(0, 3, lambda j, k: k * v, b)
                return (k + v * b, b * 0.9)
            a, b = cg.fori_loop(0, 2, outer, (x, 0.3))
            return a
        return f
    return make


def test_remat_never_keeps_more_than_without_it():
    """The pass runs last in the adjoint pipeline: an operand read it counted on can no
    longer be dropped after it (it once could: the cotangent of an operand that does not
    depend on x), so a loop never keeps more than without it."""
    (g1, peaks1), (g2, peaks2) = _with_and_without_remat(_inner_loop_reads_v(), (0.1,))
    assert _bits(g1) == _bits(g2)  # (the numbers are right)
    assert all(p1 <= p2 for p1, p2 in zip(peaks1, peaks2, strict=True)), (peaks1, peaks2)
