"""Every node of a derived program (adjoints, JVP programs, nested sub-programs, custom
rules) carries a line of the user's function, never the line of the code that asked for
it: the line the inspector, the verifier's and the anomaly detector's messages show."""

from __future__ import annotations

import inspect
import os

import numpy as np
import pytest
import seed_programs as seeds
from test_ir_text import program_text

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad.forward_mode import build_jvp
from cfgrad.nested import sub_programs

# ---------------------------------------------------------------------------------
# Every node of a derived program carries a line of the user's function
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
