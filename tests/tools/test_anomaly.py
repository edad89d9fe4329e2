"""`cg.detect_anomaly()`: the first NaN or Inf raises AnomalyError saying where and why.

Each message is checked against facts derived independently of the message code: the
source line is found by a `# <-` marker in this file, the block by looking the primitive
up in `cg.lower(...)`, the offending input by replaying the computation in plain Python,
and the loop iteration (zero-based) and branch from how the test function is built.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
from test_custom import STRATEGIES

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad.anomaly import anomaly_detection_enabled
from cfgrad.api import lowered
from cfgrad.convert import converted

THIS = Path(__file__)


def marked(tag: str) -> str:
    """`test_anomaly.py:N` for the line of this file that ends in `# <- tag`."""
    lines = THIS.read_text(encoding="utf-8").splitlines()
    hits = [i + 1 for i, line in enumerate(lines) if line.rstrip().endswith(f"# <- {tag}")]
    assert len(hits) == 1, f"marker {tag!r} found {len(hits)} times"
    return f"{THIS.name}:{hits[0]}"


def block_of(program: cg.Program, op: str) -> str:
    """The label of the one block of `program` holding a node `op`."""
    found = [i for i, b in enumerate(program.blocks) for n in b.nodes if n.op == op]
    assert len(found) == 1, f"{op} appears in blocks {found}"
    prefix = "r" if program.name.endswith(".adjoint") else "b"
    return f"{prefix}{found[0]}"


def anomaly(call, *args) -> str:
    """The message of the AnomalyError that call(*args) raises."""
    with pytest.raises(cg.AnomalyError) as info:
        call(*args)
    assert isinstance(info.value, cg.CfgradError)
    assert isinstance(info.value, FloatingPointError)
    return str(info.value)


# -------------------------------------------------------------------------------------
# A NaN made in the forward pass, in the 3rd iteration of a while_loop in a cond branch
# -------------------------------------------------------------------------------------


def log_loop(x):
    """Iterates y <- log(y - 1.5) five times when x > 0. From x = 1.5 + e^3 the arguments
    are e^3, 1.5 and log(1.5) - 1.5 < 0: iteration 2 (the 3rd) takes a log of a negative."""
    def body(c):
        i, y = c
        return i + 1, cnp.log(y - 1.5)  # <- log

    return cg.cond(x > 0, lambda: cg.while_loop(lambda c: c[0] < 5, body, (0, x))[1],
                   lambda: x)


X_LOG = 1.5 + math.exp(3.0)


def log_loop_bad_input() -> float:
    """The argument of the first log that goes wrong, replayed in plain Python."""
    y = X_LOG
    for _ in range(2):
        y = math.log(y - 1.5)
    assert y - 1.5 < 0
    return y - 1.5


@pytest.mark.parametrize("strategy", STRATEGIES, ids=repr)
def test_forward_nan_in_a_loop_in_a_branch(strategy):
    message = anomaly(cg.grad(log_loop, checkpoint=strategy, detect_anomaly=True), X_LOG)
    program = cg.lower(log_loop, X_LOG)
    assert "`log` produced nan in the forward pass" in message
    assert f"block {block_of(program, 'log')} of program log_loop" in message
    assert f"traced at {marked('log')}" in message
    assert f"its inputs there: ({log_loop_bad_input()!r})" in message
    loop, branch = program.loops()[0], program.ifs()[0]
    assert f"iteration 2 of {loop.id} ({loop.loc})" in message  # zero-based: the 3rd
    assert f"case T of {branch.id} ({branch.loc})" in message


def test_the_same_run_without_detection_gives_nan_silently():
    assert anomaly_detection_enabled() is False
    with np.errstate(all="ignore"):
        assert np.isnan(cg.grad(log_loop)(X_LOG))
        assert np.isnan(cg.value_and_grad(log_loop)(X_LOG)[0])
        assert np.isnan(log_loop(X_LOG))  # eager runs are numpy's: never checked


def test_the_branch_of_a_switch_is_named():
    def f(x, k):
        return cg.switch(k, [lambda: x, lambda: x * 2.0, lambda: cnp.sqrt(x)])  # <- switch

    message = anomaly(cg.grad(f, detect_anomaly=True), -1.0, 2)
    branch = cg.lower(f, -1.0, 2).ifs()[0]
    assert f"case 2 of {branch.id}" in message and f"traced at {marked('switch')}" in message
    assert cg.grad(f, detect_anomaly=True)(-1.0, 1) == 2.0  # the sqrt branch did not run


# -------------------------------------------------------------------------------------
# A NaN or Inf that first appears in the reverse pass
# -------------------------------------------------------------------------------------


def sqrt_loop(x):
    """Adds sqrt(|x - i|) * 0 in iteration i: finite forward (sqrt(0) * 0 = 0 at i = 2
    when x = 2), but sqrt'(0) = inf, so the cotangent of iteration 2 is not finite."""
    def body(c):
        i, y = c
        return i + 1, y + cnp.sqrt(cnp.abs(x - i)) * 0.0  # <- sqrt

    return cg.cond(x > 0, lambda: cg.while_loop(lambda c: c[0] < 5, body, (0, x))[1],
                   lambda: x)


@pytest.mark.parametrize("strategy", STRATEGIES, ids=repr)
def test_reverse_anomaly_in_a_loop_in_a_branch(strategy):
    value, pullback = cg.vjp(sqrt_loop, 2.0, checkpoint=strategy, detect_anomaly=True)
    assert value == 2.0  # the forward pass is clean
    message = anomaly(pullback, 1.0)
    program = cg.lower(sqrt_loop, 2.0)
    assert "in the gradient (reverse) pass" in message
    assert "program sqrt_loop.adjoint" in message
    assert f"traced at {marked('sqrt')}" in message
    loop, branch = program.loops()[0], program.ifs()[0]
    assert f"iteration 2 of {loop.id}" in message
    assert f"case T of {branch.id}" in message


def test_reverse_anomaly_names_the_primitive_whose_derivative_failed():
    """The NaN comes from sqrt's derivative; the line holds sqrt, abs and mul, so the
    message must say sqrt (the adjoint's internal `div` means nothing to the user)."""
    message = anomaly(cg.grad(sqrt_loop, detect_anomaly=True), 2.0)
    assert re.search(r"\bsqrt\b", message.split("\n")[0]), message


def nested(x):
    """sqrt'(0) = inf exactly in inner iteration 1 of outer iteration 3."""
    def outer(i, s):
        def inner(c):
            j, y = c
            return j + 1, y + cnp.sqrt(cnp.abs((i * 10.0 + j - 31.0) * x)) * 1e-3  # <- nested

        return cg.while_loop(lambda c: c[0] < 3, inner, (0, s))[1] * 0.5

    return cg.fori_loop(0, 5, outer, x)


@pytest.mark.parametrize("strategy", STRATEGIES, ids=repr)
def test_reverse_anomaly_in_recomputed_nested_iterations(strategy):
    """Recomputing strategies replay outer iterations (and the inner loop in them) during
    the reverse pass; the message still names the right iteration of each loop."""
    message = anomaly(cg.grad(nested, checkpoint=strategy, detect_anomaly=True), 1.0)
    outer, inner = cg.lower(nested, 1.0).loops()
    assert f"iteration 3 of {outer.id}" in message
    assert f"iteration 1 of {inner.id}" in message
    assert f"traced at {marked('nested')}" in message


@pytest.mark.parametrize("strategy", STRATEGIES, ids=repr)
def test_forward_anomaly_in_nested_loops_under_every_strategy(strategy):
    def f(x):
        def outer(i, s):
            def inner(c):
                j, y = c
                return j + 1, y + cnp.log(x - i - j * 0.5)  # <- nested forward
            return cg.while_loop(lambda c: c[0] < 2, inner, (0, s))[1]
        return cg.fori_loop(0, 4, outer, x)

    # x - i - j/2 first reaches 0 (log -> -inf) at i = 2, j = 1 for x = 2.5
    message = anomaly(cg.grad(f, checkpoint=strategy, detect_anomaly=True), 2.5)
    outer, inner = cg.lower(f, 2.5).loops()
    assert "`log` produced -inf in the forward pass" in message
    assert f"iteration 2 of {outer.id}" in message and f"iteration 1 of {inner.id}" in message
    assert f"traced at {marked('nested forward')}" in message


# -------------------------------------------------------------------------------------
# Domain violations report the offending value
# -------------------------------------------------------------------------------------

DOMAIN = [
    # (id, f, x, primitive, result, inputs shown)
    ("log of a negative", lambda x: cnp.log(x), -2.0, "log", "nan", "(-2.0)"),
    ("log of zero", lambda x: cnp.log(x), 0.0, "log", "-inf", "(0.0)"),
    ("sqrt of a negative", lambda x: cnp.sqrt(x), -1.0, "sqrt", "nan", "(-1.0)"),
    ("division by zero", lambda x: 1.0 / x, 0.0, "div", "inf", "(1.0, 0.0)"),
    ("exp overflow", lambda x: cnp.exp(x), 1000.0, "exp", "inf", "(1000.0)"),
    ("log1p below -1", lambda x: cnp.log1p(x), -3.0, "log1p", "nan", "(-3.0)"),
    ("pow overflow", lambda x: x ** 3.5, 1e100, "pow", "inf", "(1e+100, 3.5)"),
]


@pytest.mark.parametrize("f, x, op, result, inputs", [d[1:] for d in DOMAIN],
                         ids=[d[0] for d in DOMAIN])
def test_domain_violations_report_the_input(f, x, op, result, inputs):
    message = anomaly(cg.grad(f, detect_anomaly=True), x)
    assert f"`{op}` produced {result} in the forward pass" in message
    assert f"its inputs there: {inputs}" in message


def test_the_offending_element_of_an_array():
    def f(x, y):
        return cnp.sum(cnp.log(x) * y)

    x = np.array([1.0, 2.0, -3.0, 4.0])
    message = anomaly(cg.grad(f, detect_anomaly=True), x, 2.0)
    assert "`log` produced nan at index [2]" in message
    assert "its inputs there: (-3.0)" in message
    # broadcasting: each input shows the element that met the bad output element
    message = anomaly(cg.grad(lambda x, y: cnp.sum(x / y), detect_anomaly=True),
                      np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([1.0, 0.0]))
    assert "`div` produced inf at index [0, 1]" in message
    assert "its inputs there: (2.0, 0.0)" in message


def test_nan_arguments_are_reported_before_anything_runs():
    def f(x):
        return cnp.sum(cnp.log(x))  # would be an anomaly of its own at -1

    message = anomaly(cg.grad(f, detect_anomaly=True), np.array([np.nan, -1.0, np.inf]))
    assert "argument x of f" in message and "(2 entries)" in message
    assert "before anything ran" in message and "`log`" not in message
    message = anomaly(cg.grad(lambda p: p["a"] * p["b"], detect_anomaly=True),
                      {"a": 1.0, "b": np.inf})
    assert "before anything ran" in message


# -------------------------------------------------------------------------------------
# The switches: context manager, keyword argument, jvp, and the cost when off
# -------------------------------------------------------------------------------------


def test_keyword_and_context_manager_report_the_same_anomaly():
    by_keyword = [
        anomaly(cg.grad(log_loop, detect_anomaly=True), X_LOG),
        anomaly(lambda x: cg.value_and_grad(log_loop, detect_anomaly=True)(x), X_LOG),
        anomaly(lambda x: cg.vjp(log_loop, x, detect_anomaly=True), X_LOG),
    ]
    with cg.detect_anomaly():
        by_context = [anomaly(cg.grad(log_loop), X_LOG),
                      anomaly(lambda x: cg.value_and_grad(log_loop)(x), X_LOG),
                      anomaly(lambda x: cg.vjp(log_loop, x), X_LOG),
                      anomaly(lambda x: cg.jvp(log_loop, (x,), (1.0,)), X_LOG)]
    assert len(set(by_keyword)) == 1 and set(by_keyword) == set(by_context[:3])
    assert "`log` produced nan" in by_context[3] and "iteration 2" in by_context[3]


def test_jvp_checks_its_tangents():
    with cg.detect_anomaly():
        message = anomaly(cg.jvp, lambda x: cnp.sqrt(x) * 2.0, (0.0,), (1.0,))  # <- jvp
    assert "program <lambda>.jvp" in message and f"traced at {marked('jvp')}" in message
    assert cg.jvp(lambda x: cnp.sqrt(x) * 2.0, (0.0,), (1.0,))[1] == math.inf  # off again


def test_pullback_called_under_the_context_manager_is_checked():
    """`with cg.detect_anomaly(): pullback(ct)` checks the reverse pass of a vjp taken
    before: the gradient pass runs inside the block."""
    _, pullback = cg.vjp(lambda x: cnp.sqrt(x), 0.0)
    with cg.detect_anomaly():
        message = anomaly(pullback, 1.0)
    assert "in the gradient (reverse) pass" in message


def test_context_manager_restores_the_previous_state():
    assert not anomaly_detection_enabled()
    with pytest.raises(cg.AnomalyError), cg.detect_anomaly():
        assert anomaly_detection_enabled()
        cg.grad(log_loop)(X_LOG)
    assert not anomaly_detection_enabled()
    with pytest.raises(KeyError), cg.detect_anomaly():
        raise KeyError("unrelated")
    assert not anomaly_detection_enabled()
    with cg.detect_anomaly():
        with cg.detect_anomaly(False):
            assert not anomaly_detection_enabled()
            with np.errstate(all="ignore"):
                assert np.isnan(cg.grad(log_loop)(X_LOG))
        assert anomaly_detection_enabled()
    assert not anomaly_detection_enabled()


def test_runtime_errors_keep_their_note_under_detection():
    """An error that is not an anomaly (an index out of range) names the primitive that
    raised it with detection on as well as off."""
    def f(x, i):
        return cnp.sum(cnp.sin(x) * cnp.cos(x) * 2.0) + x[i]

    for check in (False, True):
        with pytest.raises(IndexError) as info:
            cg.grad(f, detect_anomaly=check)(np.ones(3), 7)
        notes = getattr(info.value, "__notes__", [])
        assert any("raised by `index`" in note for note in notes), (check, notes)


def compiled_objects(f, *args) -> list:
    """The forward compilation, the adjoints of grad (wrt x) and vjp (wrt all), the JVP."""
    entry = lowered(converted(f), args)[0]  # the transformations trace f converted
    adjoints = [entry.grad_plan(wrt).compiled for wrt in (frozenset({0}), None)]
    return [entry.compiled, *adjoints, entry.jvp]


def test_no_checking_code_exists_until_detection_is_asked_for():
    """Off by default and free: plain runs never generate the checking block functions,
    and the block functions they run contain no NaN test."""
    def f(x):
        return cg.fori_loop(0, 3, lambda i, c: cnp.sin(c) * x, x)

    cg.grad(f)(0.5)
    cg.vjp(f, 0.5)[1](1.0)
    cg.jvp(f, (0.5,), (1.0,))
    compiled = compiled_objects(f, 0.5)
    assert len(compiled) == 4  # one forward for every wrt, two adjoints, jvp
    for c in compiled:
        assert c._checked is None
        assert all("_finite" not in fn.__code__.co_names for fn in c.block_fns)
    cg.grad(f, detect_anomaly=True)(0.5)
    checked = [c for c in compiled if c._checked is not None]
    assert len(checked) == 2  # the forward and grad's adjoint, generated on demand
    for c in checked:
        assert any("_finite" in fn.__code__.co_names for fn in c._checked)


def test_checking_only_the_pullback_points_at_the_unchecked_forward_pass():
    """vjp ran unchecked and log(-1) gave nan; detect_anomaly around the pullback only
    meets that nan when the derivative of `x * log(x)` reads it. The message must not
    blame the derivative: it says the forward value was already nan and how to find it."""
    def f(x):
        return (cnp.log(x) * x).sum()

    _, pb = cg.vjp(f, np.array([-1.0, 2.0]))
    with cg.detect_anomaly(), pytest.raises(cg.AnomalyError) as info:
        pb(1.0)
    text = str(info.value)
    assert "a forward value it reads is already NaN/Inf" in text
    assert "first appeared in a cotangent" not in text
