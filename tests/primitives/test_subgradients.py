"""Numerical conventions beyond tests/primitives/test_primitives.py, and docs/numerics.md.

tests/primitives/test_primitives.py already checks every documented subgradient at a kink
(`KINKS` of tests/primitive_facts.py: abs'(0), relu'(0), max/min ties, clip at its bounds,
sqrt'(0), pow, floor, sign, prod, where) and logsumexp, softplus, sigmoid, log1p and expm1
at extreme float64 inputs (`EXTREMES`); this file does not repeat them. It adds:

- log_softmax and softmax (compositions in cfgrad.numpy, not table entries) against finite
  differences over every kind of axis, and at extreme inputs; the stable primitives in
  float32 and float16, where accuracy must be that of the dtype, not of the magnitude of
  the input;
- the `where` trap contrasted with `cond`, in loops under every checkpoint strategy, with
  anomaly detection, in forward mode, and the double-`where` workaround;
- docs/numerics.md: its conventions table is the derivative table's notes, every test it
  cites exists, and every example prints what the page shows.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
from primitive_facts import EXTREMES, KINKS
from test_custom import STRATEGIES
from test_docs_api import normalized, run_example, runnable_examples

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad.primitives import PRIMITIVES
from cfgrad.testing import check_grads

ROOT = Path(__file__).resolve().parents[2]
NUMERICS = ROOT / "docs" / "numerics.md"

# -------------------------------------------------------------------------------------
# log_softmax and softmax at extreme inputs (float64), references derived by hand
# -------------------------------------------------------------------------------------

E1 = math.exp(-1.0)
S0, S1 = 1.0 / (1.0 + E1), E1 / (1.0 + E1)  # softmax([a, a - 1]) for any a
W = np.array([1.0, 2.0, 3.0])

SOFTMAX_EXTREMES = [
    # (id, x, log_softmax(x), gradient of sum(W * log_softmax(x)) = W - softmax(x) * sum(W))
    ("+-1000", np.array([1000.0, -1000.0, 0.0]), np.array([0.0, -2000.0, -1000.0]),
     W - np.array([1.0, 0.0, 0.0]) * 6.0),
    ("-1000 spread 1", np.array([-1000.0, -1001.0, -1000.0]),
     np.array([0.0, -1.0, 0.0]) - math.log(2.0 + E1),
     W - np.array([1.0, E1, 1.0]) / (2.0 + E1) * 6.0),
    ("+1000 spread 1", np.array([1000.0, 999.0, 1000.0]),
     np.array([0.0, -1.0, 0.0]) - math.log(2.0 + E1),
     W - np.array([1.0, E1, 1.0]) / (2.0 + E1) * 6.0),
    ("1e-300", np.array([1e-300, -1e-300, 0.0]), np.full(3, -math.log(3.0)), W - 2.0),
]


@pytest.mark.parametrize("x, value, gradient", [e[1:] for e in SOFTMAX_EXTREMES],
                         ids=[e[0] for e in SOFTMAX_EXTREMES])
def test_log_softmax_at_extreme_inputs(x, value, gradient):
    def f(x):
        return cnp.sum(W * cnp.log_softmax(x))

    with np.errstate(over="raise", invalid="raise", divide="raise"):
        np.testing.assert_allclose(cnp.log_softmax(x), value, rtol=1e-13, atol=1e-15)
    got_value, got_grad = cg.value_and_grad(f)(x)
    _, tangent = cg.jvp(f, (x,), (np.ones(3),))
    assert np.isfinite(got_value) and np.all(np.isfinite(got_grad))
    np.testing.assert_allclose(got_grad, gradient, rtol=1e-13, atol=1e-13)
    assert tangent == pytest.approx(np.sum(gradient), abs=1e-12)


@pytest.mark.parametrize("x", [e[1] for e in SOFTMAX_EXTREMES],
                         ids=[e[0] for e in SOFTMAX_EXTREMES])
def test_softmax_at_extreme_inputs(x):
    """softmax = exp(log_softmax): sums to 1, and the gradient of its first entry is
    s0 * (e0 - s), from the softmax computed in exact arithmetic by hand."""
    m = np.max(x)
    e = np.array([math.exp(v - m) for v in x])
    s = e / e.sum()
    np.testing.assert_allclose(cnp.softmax(x), s, rtol=1e-13, atol=1e-300)
    g = cg.grad(lambda x: cnp.softmax(x)[0])(x)
    np.testing.assert_allclose(g, s[0] * (np.eye(3)[0] - s), rtol=1e-12, atol=1e-300)


AXES = [-1, 0, None, (0, 1)]


@pytest.mark.parametrize("axis", AXES, ids=repr)
@pytest.mark.parametrize("f", [cnp.log_softmax, cnp.softmax], ids=lambda f: f.__name__)
def test_softmax_gradients_match_finite_differences(f, axis):
    """tests/primitives/test_primitives.py checks the table; these two are built from it (a shift by
    a stop-gradient'ed maximum), so check the composition, normalized along `axis`."""
    rng = np.random.default_rng(0)
    x, w = rng.uniform(-3.0, 3.0, (3, 4)), rng.uniform(-1.0, 1.0, (3, 4))
    check_grads(lambda x: cnp.sum(w * f(x, axis)), (x,))
    probabilities = np.exp(f(x, axis)) if f is cnp.log_softmax else f(x, axis)
    np.testing.assert_allclose(np.sum(probabilities, axis=axis), 1.0, rtol=1e-14)


# -------------------------------------------------------------------------------------
# The stable primitives in float32 and float16
# -------------------------------------------------------------------------------------

LOW = [
    # (id, f, x): each is compared with float64 math on the same (rounded) inputs
    ("sigmoid +1000", cnp.sigmoid, 1000.0),
    ("sigmoid -1000", cnp.sigmoid, -1000.0),
    ("softplus +1000", cnp.softplus, 1000.0),
    ("softplus -1000", cnp.softplus, -1000.0),
    ("logsumexp +-1000", cnp.logsumexp, [1000.0, -1000.0, 999.0]),
    ("logsumexp 30", cnp.logsumexp, [30.0, 29.0]),
    ("softmax +-1000", lambda x: cnp.softmax(x)[0], [1000.0, -1000.0, 999.0]),
    ("log_softmax +-1000", lambda x: cnp.log_softmax(x)[2], [1000.0, -1000.0, 999.0]),
    ("log_softmax -1000", lambda x: cnp.log_softmax(x)[0], [-1000.0, -999.0]),
]


def sigmoid(x: float) -> float:
    e = math.exp(-abs(x))
    return 1.0 / (1.0 + e) if x >= 0 else e / (1.0 + e)


def reference(name: str, x: np.ndarray) -> tuple[float, np.ndarray]:
    """Value and gradient in float64, written out by hand per primitive."""
    if name.startswith("sigmoid"):
        s = sigmoid(float(x))
        return s, np.float64(s * (1.0 - s))
    if name.startswith("softplus"):
        return max(float(x), 0.0) + math.log1p(math.exp(-abs(x))), np.float64(sigmoid(float(x)))
    m = np.max(x)
    e = np.exp(x - m)
    s = e / e.sum()
    lse = m + math.log(e.sum())
    if name.startswith("logsumexp"):
        return lse, s
    if name.startswith("softmax"):
        return s[0], s[0] * (np.eye(len(x))[0] - s)
    i = 2 if "+-" in name else 0
    return x[i] - lse, np.eye(len(x))[i] - s


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("name, f, x", LOW, ids=[e[0] for e in LOW])
def test_stable_primitives_in_low_precision(name, f, x, dtype):
    """Finite, in the input's dtype, and accurate to a few units of that dtype: the shift by
    the maximum must happen before rounding to the dtype, not after (rounding
    logsumexp(x) ~ 1000 to float16 loses 0.5, a factor e^0.5 in exp(x - lse))."""
    x = np.asarray(x, dtype)
    value, grad = cg.value_and_grad(f)(x)
    assert np.asarray(value).dtype == dtype and np.asarray(grad).dtype == dtype
    assert np.all(np.isfinite(value)) and np.all(np.isfinite(grad))
    want_value, want_grad = reference(name, x.astype(np.float64))
    tol = 4 * np.finfo(dtype).eps
    np.testing.assert_allclose(np.float64(value), want_value, rtol=tol, atol=tol)
    np.testing.assert_allclose(np.float64(grad), want_grad, rtol=tol, atol=tol)


# -------------------------------------------------------------------------------------
# The where trap, and cond
# -------------------------------------------------------------------------------------


def step_cond(x, c):
    """cond runs only the branch taken: sqrt never sees a negative carry."""
    return cg.cond(c > 0, lambda: cnp.sqrt(c) - 1.0, lambda: c * x + 1.0)


def step_where(x, c):
    """The same step with where: both sides are computed, sqrt(c) too where c < 0."""
    return cnp.where(c > 0, cnp.sqrt(c) - 1.0, c * x + 1.0)


def step_double_where(x, c):
    """The workaround for arrays: feed the unselected side a harmless value."""
    return cnp.where(c > 0, cnp.sqrt(cnp.where(c > 0, c, 1.0)) - 1.0, c * x + 1.0)


def iterate(step):
    def f(x):
        return cg.fori_loop(0, 6, lambda i, c: step(x, c), x)
    return f


def iterate_reference(x: float) -> tuple[float, float, int]:
    """Value, derivative and how many steps took the c <= 0 side, by dual numbers."""
    v, d, negative = x, 1.0, 0
    for _ in range(6):
        if v > 0:
            v, d = math.sqrt(v) - 1.0, d * 0.5 / math.sqrt(v)
        else:
            v, d, negative = v * x + 1.0, d * x + v, negative + 1
    return v, d, negative


X_TRAP = 2.5  # the carry goes 2.5, 0.58, -0.24, 0.41, -0.36, 0.09, -0.70: signs alternate


@pytest.mark.parametrize("strategy", STRATEGIES, ids=repr)
def test_cond_never_leaks_nan_from_the_untaken_branch(strategy):
    value, derivative, negative = iterate_reference(X_TRAP)
    assert negative >= 2  # the trap is armed: sqrt would see negative carries
    got = cg.value_and_grad(iterate(step_cond), checkpoint=strategy)(X_TRAP)
    assert got[0] == pytest.approx(value, rel=1e-14)
    assert got[1] == pytest.approx(derivative, rel=1e-12)


@pytest.mark.parametrize("strategy", STRATEGIES, ids=repr)
def test_where_leaks_nan_into_the_gradient(strategy):
    """The value is right, the gradient is NaN: where's VJP gives the unselected side an
    exact 0, and sqrt's VJP turns 0 * (0.5 / sqrt(negative)) into NaN. The double where
    repairs it."""
    value, derivative, _ = iterate_reference(X_TRAP)
    with np.errstate(invalid="ignore"):
        got_value, got_grad = cg.value_and_grad(iterate(step_where), checkpoint=strategy)(X_TRAP)
    assert got_value == pytest.approx(value, rel=1e-14)
    assert np.isnan(got_grad)
    repaired = cg.grad(iterate(step_double_where), checkpoint=strategy)(X_TRAP)
    assert repaired == pytest.approx(derivative, rel=1e-12)


def test_forward_mode_is_not_trapped_by_where():
    """jvp selects tangents as where selects values, so the NaN tangent of the unselected
    side is dropped: the trap is a reverse-mode one."""
    _, derivative, _ = iterate_reference(X_TRAP)
    with np.errstate(invalid="ignore"):
        _, tangent = cg.jvp(iterate(step_where), (X_TRAP,), (1.0,))
    assert tangent == pytest.approx(derivative, rel=1e-12)


def test_anomaly_detection_sees_the_where_trap_but_not_cond():
    """With detection on, the cond version runs clean (the untaken sqrt never runs); the
    where version stops at the sqrt of a negative, in the forward pass, even though its
    value would have been fine."""
    with cg.detect_anomaly():
        assert np.isfinite(cg.grad(iterate(step_cond))(X_TRAP))
        assert np.isfinite(cg.grad(iterate(step_double_where))(X_TRAP))
        with pytest.raises(cg.AnomalyError, match=r"`sqrt` produced nan in the forward pass"):
            cg.grad(iterate(step_where))(X_TRAP)


def test_where_trap_is_per_element():
    """On arrays, only the entries whose unselected side is NaN get a NaN gradient."""
    x = np.array([4.0, -1.0, 0.25])

    def trapped(x):
        return cnp.sum(cnp.where(x > 0, cnp.sqrt(x), -x))

    def repaired(x):
        return cnp.sum(cnp.where(x > 0, cnp.sqrt(cnp.where(x > 0, x, 1.0)), -x))

    with np.errstate(invalid="ignore"):
        g = cg.grad(trapped)(x)
    np.testing.assert_array_equal(np.isnan(g), [False, True, False])
    np.testing.assert_array_equal(cg.grad(repaired)(x), [0.25, -1.0, 1.0])


# -------------------------------------------------------------------------------------
# Domain edges that tests/primitives/test_primitives.py does not visit
# -------------------------------------------------------------------------------------

BOUNDARIES = [
    # (id, f, args, value, gradient with respect to every argument)
    ("log'(0)=inf", cnp.log, (0.0,), -math.inf, (math.inf,)),
    ("x/0", cnp.divide, (1.0, 0.0), math.inf, (math.inf, -math.inf)),
    ("integer_pow at x<0", lambda x: x ** 3, (-2.0,), -8.0, (12.0,)),
    ("mod d/dy=-floor(x/y)", cnp.mod, (7.5, 2.0), 1.5, (1.0, -3.0)),
    ("mod of a negative", cnp.mod, (-7.5, 2.0), 0.5, (1.0, 4.0)),
    ("rint'=0", cnp.rint, (2.5,), 2.0, (0.0,)),
    ("floor_divide'=0", lambda x, y: x // y, (-7.5, 2.0), -4.0, (0.0, 0.0)),
    ("stop_gradient'=0", cg.stop_gradient, (3.0,), 3.0, (0.0,)),
]


@pytest.mark.parametrize("f, args, value, gradient", [b[1:] for b in BOUNDARIES],
                         ids=[b[0] for b in BOUNDARIES])
def test_documented_values_at_domain_edges(f, args, value, gradient):
    got_value, got_grad = cg.value_and_grad(f, tuple(range(len(args))))(*args)
    assert got_value == value
    assert got_grad == gradient


# -------------------------------------------------------------------------------------
# docs/numerics.md
# -------------------------------------------------------------------------------------

NUMERICS_TEXT = NUMERICS.read_text(encoding="utf-8")
EXAMPLES = runnable_examples(NUMERICS_TEXT)


def conventions_rows() -> list[tuple[str, str, str]]:
    """(primitive, convention, tests cell) of the conventions table of docs/numerics.md."""
    body = re.search(r"^## Derivative conventions\b.*?$(.*?)(?=^## |\Z)", NUMERICS_TEXT,
                     re.M | re.S)
    assert body, "docs/numerics.md has no '## Derivative conventions' section"
    rows = []
    for line in body.group(1).splitlines():
        if line.startswith("| `"):
            cells = [c.strip().replace(r"\|", "|")
                     for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            assert len(cells) == 3, line
            rows.append((cells[0].strip("`"), cells[1], cells[2]))
    return rows


def test_conventions_table_is_the_derivative_table():
    rows = conventions_rows()
    names = [name for name, _, _ in rows]
    assert len(names) == len(set(names))
    for needed in ("abs", "relu", "maximum", "minimum", "clip", "sqrt", "pow", "floor",
                   "sign", "amax", "amin"):
        assert needed in names, f"docs/numerics.md does not document {needed}"
    for name, convention, _ in rows:
        assert name in PRIMITIVES, name
        assert convention == PRIMITIVES[name].notes, (
            f"docs/numerics.md says of {name}: {convention!r}; cfgrad/primitives/ says "
            f"{PRIMITIVES[name].notes!r}")


def test_every_cited_test_exists():
    """The 'tested by' column names cases of tests/primitive_facts.py and of this file by
    id."""
    ids = {k[0] for k in KINKS} | {e[0] for e in EXTREMES} | {b[0] for b in BOUNDARIES}
    cited = [re.findall(r"`([^`]+)`", tests) for _, _, tests in conventions_rows()]
    assert sum(map(len, cited)) >= 20
    for case in (c for row in cited for c in row):
        assert case in ids, f"docs/numerics.md cites test case {case!r}, which does not exist"


@pytest.mark.parametrize(("line", "code", "out"), EXAMPLES,
                         ids=[f"numerics.md:{line}" for line, _, _ in EXAMPLES])
def test_numerics_examples_print_what_the_page_shows(line, code, out):
    with np.errstate(all="ignore"):
        printed = run_example(code.group(2))
    assert normalized(printed) == normalized(out.group(2)), (
        f"the example at docs/numerics.md:{line} printed something else than documented "
        "(rerun it and update the text block)")
