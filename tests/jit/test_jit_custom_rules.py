"""Custom rules and debug callbacks under `cg.jit` (docs/jit.md, "What compiles and what
falls back"): `custom_vjp`, `custom_jvp` and `custom_root` compile their rules' programs
as functions of the generated module, so the compiled gradient is the rule's, bitwise the
interpreter's; `debug.print`/`debug.callback` call back from compiled code in object
mode, printing the interpreter's lines in its order, silent where a run repeats work.

Numba compiles are paid cold in CI, so the cases are batched into two programs: one of
gradients and tangents, one of callbacks. The arithmetic is rational (no transcendental
function, whose math library differs), so every result is bitwise the interpreter's.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np
import pytest
from test_jit_calls import interpreted  # the reference: cg.jit's Program, interpreted

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad import tree
from cfgrad.checkpoint import Binomial, EveryK, Online, Recompute, StoreAll
from cfgrad.interpret import Compiled
from cfgrad.native import NativeProgram

LONG = os.environ.get("CFGRAD_HYPOTHESIS") == "long"  # the opt-in profile of conftest.py


def assert_bitwise(got: Any, want: Any) -> None:
    got_leaves, got_tree = tree.flatten(got)
    want_leaves, want_tree = tree.flatten(want)
    assert got_tree == want_tree
    for g, w in zip(got_leaves, want_leaves):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape
        assert g.tobytes() == w.tobytes(), (g, w)


def compiled(f: Any, *args: Any) -> Any:
    """`cg.jit(f)`, refusing the interpreter, checked to run compiled at `args`."""
    jitted = cg.jit(f, fallback=False)
    assert jitted.info(*args).backend == "numba"
    return jitted


# -- the rules (on scalars: Numba compiles scalar code fastest) ---------------------------

@cg.custom_vjp
def clip_gradient(x):
    return x


def _clip_fwd(x):
    return x, x


def _clip_bwd(x, g):  # not the derivative: the gradient the rule gives must come out
    return (cnp.clip(g, -0.5, 0.5) + 0.125 * x,)


clip_gradient.defvjp(_clip_fwd, _clip_bwd)


@cg.custom_jvp
def bump(x):
    return x / (1.0 + x * x)


@bump.defjvp
def _bump_jvp(primals, tangents):
    (x,), (dx,) = primals, tangents
    d = 1.0 + x * x
    return bump(x), dx * (1.0 - x * x) / (d * d) * 1.5  # 1.5: the rule's, not the truth


def vjp_in_while(w, x):
    """A custom_vjp in a while loop's body: its bwd runs once per iteration, in reverse."""
    def body(c):
        i, h = c
        return i + 1, clip_gradient(w * h + x) * 0.75
    return cg.while_loop(lambda c: c[0] < 6, body, (0, 0.25))[1]


def cube_root(a):
    """custom_root: Newton's iterations (never differentiated) and the implicit function
    theorem's derivative, 1 / (3 x²), from `tangent_solve`."""
    def f(x):
        return x * x * x - a

    def newton(f, x0):
        def body(c):
            i, x = c
            return i + 1, x - f(x) / (3.0 * x * x)
        return cg.while_loop(lambda c: c[0] < 40, body, (0, x0))[1]

    return cg.custom_root(f, 1.0, newton, lambda g, y: y / g(1.0))


def _rule_gradient(w: float, x: float) -> tuple[float, float]:
    """vjp_in_while's gradient by its rule, by hand: bwd's clipped cotangent at each step."""
    hs, us = [0.25], []
    for _ in range(6):
        us.append(w * hs[-1] + x)
        hs.append(0.75 * us[-1])
    dw = dx = 0.0
    g = 1.0
    for h, u in zip(reversed(hs[:-1]), reversed(us)):
        g = min(max(0.75 * g, -0.5), 0.5) + 0.125 * u
        dw, dx, g = dw + g * h, dx + g, g * w
    return dw, dx


def gradients(w, x):
    """One program for every rule: reverse mode through a custom_vjp in a loop, forward
    and reverse mode of a custom_jvp, a custom_root's value and gradient."""
    return (cg.grad(vjp_in_while, argnums=(0, 1))(w, x),
            cg.jvp(lambda v: bump(v) * v, (x,), (0.75,)),
            cg.grad(lambda v: bump(v) * v)(x),
            cg.value_and_grad(cube_root)(w + 2.0))


def test_custom_rules_compile_and_give_the_interpreters_bits() -> None:
    jitted = compiled(gradients, 0.5, -1.25)
    for x in (-1.25, 3.0):
        got = jitted(0.5, x)
        assert_bitwise(got, interpreted(gradients)(0.5, x))
    # the rules' derivatives, not the functions': bwd's clip, the jvp rule's factor 1.5
    (dw, dx), (_, tangent), grad_bump, (root, d_root) = got
    d = 1.0 + x * x
    assert grad_bump == pytest.approx(x * 1.5 * (1 - x * x) / d ** 2 + x / d, rel=1e-14)
    assert tangent == pytest.approx(0.75 * grad_bump, rel=1e-14)
    assert (dw, dx) == pytest.approx(_rule_gradient(0.5, x), rel=1e-14)
    assert [root, d_root] == pytest.approx([2.5 ** (1 / 3), 1 / (3 * 2.5 ** (2 / 3))],
                                           rel=1e-14)


# -- debug callbacks ---------------------------------------------------------------------

@cg.custom_vjp
def shown(x):
    return x * x


def _shown_fwd(x):
    cg.debug.print("fwd x={} y={}", x, x * x)  # (every print of two floats: one helper)
    return x * x, x


def _shown_bwd(x, g):
    cg.debug.print("bwd x={} g={}", x, g)  # bwd runs first in the pullback: it prints
    return (2.0 * x * g,)


shown.defvjp(_shown_fwd, _shown_bwd)


def printer(w):
    def body(t, h):
        h = w * h / (1.0 + h * h) + t * 0.25
        cg.debug.print("t={} h={}", t * 1.0, h)
        return h
    return cg.fori_loop(0, 4, body, 0.25)


def callbacks(w, small, xs):
    """The loop's lines once each (value_and_grad's call and the taped run of its pullback
    run the loop, once), a rule's fwd and bwd, and a callback's values with their dtypes
    (a float32 scalar, an int8, an array, a Python value)."""
    cg.debug.callback(_record, small, small.astype(np.int8), xs, "static")
    value, grad = cg.value_and_grad(printer)(w)
    cg.debug.print("value={} grad={}", value, grad)
    return value, grad, cg.grad(shown)(w)


SEEN: list[tuple] = []


def _record(*values: Any) -> None:
    SEEN.append(tuple((type(v).__name__, v.dtype.name, v.shape, v.flags.writeable,
                       v.tolist()) if isinstance(v, np.ndarray) else v for v in values))


def test_debug_callbacks_compile_and_print_the_interpreters_lines(capsys) -> None:
    args = (0.5, np.float32(1.25), np.array([0.5, -1.5]))
    jitted = compiled(callbacks, *args)
    want = interpreted(callbacks)(*args)
    printed, seen = capsys.readouterr().out, list(SEEN)
    SEEN.clear()
    assert_bitwise(jitted(*args), want)
    assert capsys.readouterr().out == printed
    assert SEEN == seen == [(("ndarray", "float32", (), False, 1.25),
                             ("ndarray", "int8", (), False, 1),
                             ("ndarray", "float64", (2,), False, [0.5, -1.5]), "static")]
    words = [line.split()[0] for line in printed.splitlines()]
    assert words == ["t=0.0", "t=1.0", "t=2.0", "t=3.0", f"value={want[0]}", "fwd", "bwd"]


def test_a_rule_that_cannot_compile_falls_back_with_its_reason() -> None:
    @cg.custom_vjp
    def ranked(x):
        return x * 2.0

    # a sort of complex numbers (numpy's lexicographic order) compiles for reals only
    ranked.defvjp(lambda x: (x * 2.0, x),
                  lambda x, g: (cnp.real(cnp.sort(g * (1.0 + 1.0j))) * 2.0,))
    jitted = cg.jit(cg.grad(lambda x: cnp.sum(ranked(x))))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        info = jitted.info(np.array([0.5, -1.5]))
    assert info.backend == "interpreter"
    assert "sort of complex" in info.reason and "test_jit_custom_rules.py" in info.reason
    assert [type(w.message) for w in caught] == [cg.CompileWarning]
    with pytest.raises(cg.CompileError, match="sort of complex"):
        cg.jit(cg.grad(lambda x: cnp.sum(ranked(x))), fallback=False)(np.array([0.5, -1.5]))


def _scheduled(checkpoint: Any) -> Any:
    return cg.grad(lambda w: printer(w) * w, checkpoint=checkpoint)


def test_iterations_re_run_for_the_adjoint_call_nothing() -> None:
    """A recomputing strategy re-runs iterations in the reverse pass (their code written
    a second time): only the taped sweep calls back, as the interpreter is silent where a
    run repeats work. Read from the generated code, which costs no Numba compile."""
    for checkpoint in (StoreAll(), Binomial(2), Recompute()):
        program = cg.jit(_scheduled(checkpoint))._lowered((0.5,), {})[0].program
        assert NativeProgram(Compiled(program)).source.count("K.debug_call(") == 1


@pytest.mark.skipif(not LONG, reason="a compiled adjoint per strategy, seconds of cold "
                    "Numba compile each: run under CFGRAD_HYPOTHESIS=long")
@pytest.mark.parametrize("checkpoint", [StoreAll(), Recompute(), EveryK(2), Online(2),
                                        Binomial(2)], ids=repr)
def test_every_strategy_prints_the_forward_runs_lines_once(checkpoint, capsys) -> None:
    f = _scheduled(checkpoint)
    want = interpreted(f)(0.5)
    printed = capsys.readouterr().out
    assert_bitwise(compiled(f, 0.5)(0.5), want)
    assert capsys.readouterr().out == printed
    assert [line.split()[0] for line in printed.splitlines()] == [
        "t=0.0", "t=1.0", "t=2.0", "t=3.0"]
