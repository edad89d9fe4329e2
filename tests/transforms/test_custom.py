"""Custom derivative rules: `cg.custom_vjp`, `cg.custom_jvp` and `cg.stop_gradient`.

The rules must be *used*: several tests give a rule that deliberately differs from the
true derivative (a gradient scaled by K, a derivative clipped from below, a subgradient of
abs at 0 that is not the library's) and compare against a reference derived by hand with
dual numbers, so a silent fall-back to differentiating the function itself fails. Where
the rule is the true derivative, `check_grads` must agree. Every loop test runs under
every checkpoint strategy and requires bitwise-identical gradients: a rule is part of the
iteration that recomputing strategies replay. Second derivatives go through rules whose
`bwd` is not linear in the cotangent (gradient clipping) or that call other custom
functions, in every composition of modes, against closed forms.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad.checkpoint import Binomial, EveryK, Online, Recompute, StoreAll
from cfgrad.testing import check_grads

STRATEGIES = (StoreAll(), EveryK(2), Binomial(2), Online(2), Recompute())

EPS = 1e-6  # safe_sqrt's floor on sqrt(x) in its derivative
K = 3.0     # scaled_identity multiplies the gradient by K


# -------------------------------------------------------------------------------------
# Functions with rules, shared by the tests
# -------------------------------------------------------------------------------------


@cg.custom_vjp
def safe_sqrt(x):
    """sqrt whose derivative 0.5 / max(sqrt(x), EPS) is finite at 0 (sqrt'(0) = inf)."""
    return cnp.sqrt(x)


def _safe_sqrt_fwd(x):
    y = cnp.sqrt(x)
    return y, y


def _safe_sqrt_bwd(y, ct):
    return (ct * 0.5 / cnp.maximum(y, EPS),)


safe_sqrt.defvjp(_safe_sqrt_fwd, _safe_sqrt_bwd)


@cg.custom_vjp
def scaled_identity(x):
    """The identity, with a gradient rule that multiplies by K: not its derivative."""
    return x


scaled_identity.defvjp(lambda x: (x, None), lambda _, ct: (K * ct,))


@cg.custom_jvp
def clipped_tanh(x):
    """tanh, with a derivative clipped from below at 0.5 (not tanh's for |x| > 0.88)."""
    return cnp.tanh(x)


@clipped_tanh.defjvp
def _clipped_tanh_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    y = cnp.tanh(x)
    return y, cnp.maximum(1.0 - y * y, 0.5) * t


@cg.custom_jvp
def abs_right(x):
    """abs, whose rule picks the right derivative at 0 (1, where cnp.abs gives 0), chosen
    by a cg.cond inside the rule."""
    return cnp.abs(x)


@abs_right.defjvp
def _abs_right_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return cnp.abs(x), cg.cond(x >= 0, lambda: t, lambda: -t)


def clipped_tanh_slope(x: float) -> float:
    return max(1.0 - math.tanh(x) ** 2, 0.5)


def run_under_every_strategy(f, *args, argnums=0):
    """The gradient of f under each strategy, asserting they are bitwise identical."""
    grads = [cg.grad(f, argnums, checkpoint=s)(*args) for s in STRATEGIES]
    for s, g in zip(STRATEGIES, grads):
        assert np.array_equal(g, grads[0]), f"{s!r} gives {g}, StoreAll() {grads[0]}"
    return grads[0]


# -------------------------------------------------------------------------------------
# custom_vjp
# -------------------------------------------------------------------------------------


def test_safe_sqrt_has_a_finite_gradient_at_zero():
    assert cg.grad(cnp.sqrt)(0.0) == math.inf
    assert cg.grad(safe_sqrt)(0.0) == 0.5 / EPS
    assert cg.value_and_grad(safe_sqrt)(4.0) == (2.0, 0.25)


@pytest.mark.parametrize("x", [0.3, 2.0, 1e4, np.array([0.5, 3.0, 7.0])], ids=repr)
def test_safe_sqrt_agrees_with_check_grads_away_from_zero(x):
    check_grads(safe_sqrt, (x,), modes=("rev",))
    check_grads(lambda x: cg.fori_loop(0, 3, lambda i, c: safe_sqrt(c + x), x), (x,),
                modes=("rev",))


def looped(x, n):
    """custom_vjp functions in both branches of a cond in a fori_loop body, then in a
    while_loop body: each iteration's rule must see that iteration's residuals."""
    def body(i, c):
        return cg.cond(i % 2 == 0, lambda: safe_sqrt(c * c + x), lambda: scaled_identity(c) * x)

    a = cg.fori_loop(0, n, body, x)
    return cg.while_loop(lambda c: c[1] < 3, lambda c: (safe_sqrt(c[0]) + c[0], c[1] + 1),
                         (a, 0))[0]


def looped_reference(x: float, n: int) -> tuple[float, float]:
    """looped(x, n) and its derivative by the rules, carried forward as dual numbers."""
    v, d = x, 1.0
    for i in range(n):
        if i % 2 == 0:
            s = math.sqrt(v * v + x)
            v, d = s, (2 * v * d + 1) * 0.5 / max(s, EPS)
        else:
            v, d = v * x, K * d * x + v
    for _ in range(3):
        s = math.sqrt(v)
        v, d = s + v, d * 0.5 / max(s, EPS) + d
    return v, d


@pytest.mark.parametrize("x", [0.7, 0.0], ids=["x=0.7", "x=0: safe_sqrt(0) every step"])
def test_custom_vjp_in_branches_and_loops_under_every_strategy(x):
    g = run_under_every_strategy(looped, x, 5)
    value, derivative = looped_reference(x, 5)
    assert cg.value_and_grad(looped)(x, 5)[0] == pytest.approx(value, rel=1e-14)
    assert g == pytest.approx(derivative, rel=1e-12)
    assert np.isfinite(g)


def test_custom_vjp_is_a_node_of_its_own():
    program = cg.lower(lambda x: safe_sqrt(x) * 2.0, 4.0)
    text, adjoint = program.text(), cg.adjoint(program).text()
    assert "= custom_vjp %x {rule=custom_vjp(safe_sqrt)}" in text
    assert "sqrt" not in text.replace("safe_sqrt", "")  # the body is not inlined
    assert "= call %" in adjoint and "{of=safe_sqrt.bwd}" in adjoint


def _affine_value(p, x, n):
    return {"y": p["w"] * x + p["b"] * n, "total": cnp.sum(x)}


@cg.custom_vjp
def affine(p, x, n):
    """Pytree argument p, array x, integer n; a pytree output."""
    return _affine_value(p, x, n)


def _affine_fwd(p, x, n):
    # pytree residuals, with an integer leaf among them
    return _affine_value(p, x, n), {"w": p["w"], "saved": (x, n)}


def _affine_bwd(res, ct):
    x, n = res["saved"]
    dp = {"w": cnp.sum(ct["y"] * x), "b": cnp.sum(ct["y"]) * n}
    return dp, ct["y"] * res["w"] + ct["total"], None  # None: no cotangent for n


affine.defvjp(_affine_fwd, _affine_bwd)


def test_custom_vjp_with_pytree_arguments_residuals_outputs_and_an_integer_argument():
    p, x = {"w": 2.0, "b": 0.5}, np.array([1.0, 2.0, 3.0])

    def loss(p, x, n):
        out = affine(p, x, n)
        return cnp.sum(out["y"] ** 2) + 3.0 * out["total"]

    dp, dx = cg.grad(loss, (0, 1))(p, x, 3)
    # by hand: y = w x + 3 b = [3.5, 5.5, 7.5]; dL/dy = 2 y
    y = 2.0 * x + 1.5
    assert dp == {"w": pytest.approx(np.sum(2 * y * x)), "b": pytest.approx(np.sum(2 * y) * 3)}
    np.testing.assert_allclose(dx, 2 * y * 2.0 + 3.0)
    _, pullback = cg.vjp(loss, p, x, 3)
    assert pullback(1.0)[2] == 0  # the integer argument's cotangent is a zero
    check_grads(lambda p, x: loss(p, x, 3), (p, x), modes=("rev",))


def test_bwd_may_return_none_for_a_float_argument():
    @cg.custom_vjp
    def first(x, y):
        return x * y

    first.defvjp(lambda x, y: (x * y, y), lambda y, ct: (ct * y, None))
    assert cg.grad(first, (0, 1))(3.0, 2.0) == (2.0, 0.0)


def test_eager_calls_run_the_function_itself():
    calls = []

    @cg.custom_vjp
    def f(x):
        calls.append("f")
        return x * 2.0

    f.defvjp(lambda x: (calls.append("fwd") or x * 2.0, None), lambda _, ct: (2.0 * ct,))
    assert f(3.0) == 6.0 and calls == ["f"]
    assert cg.grad(f)(3.0) == 2.0 and "fwd" in calls

    @cg.custom_vjp
    def no_rule(x):
        return x + 1.0

    assert no_rule(1.0) == 2.0  # a rule is needed only when traced


def _with_rule(fwd, bwd):
    """A fresh custom_vjp function x * y with the given rule (no cached lowering)."""
    @cg.custom_vjp
    def product(x, y):
        return x * y

    product.defvjp(fwd, bwd)
    return product


def _fwd(x, y):
    return x * y, (x, y)


@pytest.mark.parametrize("fwd, bwd, message", [
    (_fwd, lambda r, ct: (ct * r[1],), "one cotangent per argument"),
    (_fwd, lambda r, ct: [ct * r[1], ct * r[0]], "one cotangent per argument"),
    (_fwd, lambda r, ct: (ct * r[1], (ct, ct)), r"bwd returned \(\*, \*\)"),
    (_fwd, lambda r, ct: (ct * r[1], cnp.stack([ct, ct])), r"f64\[2\]"),
    (_fwd, lambda r, ct: (ct * r[1], cnp.astype(ct, np.float32)), r"f32\[\]"),
    (lambda x, y: x * y, lambda r, ct: (ct, ct), r"fwd must return \(output, residuals\)"),
], ids=["too few", "a list", "wrong structure", "wrong shape", "wrong dtype", "fwd no pair"])
def test_malformed_rules_are_argument_type_errors(fwd, bwd, message):
    with pytest.raises(cg.ArgumentTypeError, match=message):
        cg.grad(_with_rule(fwd, bwd))(3.0, 2.0)


@pytest.mark.parametrize("fwd", [
    lambda x, y: ((x * y, x), (x, y)),
    lambda x, y: (cnp.astype(x * y, np.float32), (x, y)),
], ids=["a pair for a scalar", "f32 for f64"])
def test_fwd_output_must_match_the_function_output(fwd):
    """fwd's output must have the function's structure, shapes and dtypes (as JAX checks):
    otherwise the traced function returns something else than the eager one."""
    product = _with_rule(fwd, lambda r, ct: (ct * r[1], ct * r[0]))
    with pytest.raises(cg.ArgumentTypeError, match="fwd"):
        cg.vjp(lambda x, y: product(x, y), 3.0, 2.0)


def test_fwd_may_call_the_function_itself():
    """The JAX idiom `def f_fwd(x): return f(x), residuals`: inside its own fwd, the
    function is the primal computation, not a new custom node."""
    @cg.custom_vjp
    def sin(x):
        return cnp.sin(x)

    sin.defvjp(lambda x: (sin(x), cnp.cos(x)), lambda cos_x, ct: (cos_x * ct,))
    assert cg.value_and_grad(sin)(1.0) == (math.sin(1.0), math.cos(1.0))


def test_missing_rule_names_the_function():
    @cg.custom_vjp
    def lonely(x):
        return x

    with pytest.raises(cg.ArgumentTypeError, match=r"lonely.*lonely\.defvjp"):
        cg.grad(lonely)(1.0)


def test_forward_mode_through_custom_vjp_is_the_rules_derivative():
    """jvp transposes bwd (linear in its cotangent): the rule's derivative, also where it
    differs from fwd's (a straight-through estimator), and finite at 0 as bwd makes it."""
    assert cg.jvp(lambda x: safe_sqrt(x) + 1.0, (4.0,), (1.0,)) == (3.0, 0.25)
    assert cg.jvp(safe_sqrt, (0.0,), (2.0,))[1] == 2.0 * 0.5 / EPS

    @cg.custom_vjp
    def straight_through(x):
        return cnp.round(x)

    straight_through.defvjp(lambda x: (cnp.round(x), None), lambda _, ct: (ct,))
    f = lambda x: straight_through(x) * x  # noqa: E731
    assert cg.jvp(f, (1.3,), (1.0,))[1] == cg.grad(f)(1.3) == 1.0 + 1.3


def test_redefining_the_rule_takes_effect():
    """defvjp again after a gradient was taken: the new rule is used, not a stale one."""
    @cg.custom_vjp
    def ident(x):
        return x

    ident.defvjp(lambda x: (x, None), lambda _, ct: (2.0 * ct,))
    assert cg.grad(ident)(1.0) == 2.0
    ident.defvjp(lambda x: (x, None), lambda _, ct: (5.0 * ct,))
    assert cg.grad(ident)(1.0) == 5.0


def test_a_pullback_keeps_the_rules_it_was_made_with():
    """Redefining a rule after vjp: the pullback already made uses the rules its forward
    ran with (it lowers its backward program lazily, from the rule captured then); new
    calls use the new rule."""
    @cg.custom_vjp
    def scaled(x):
        return cnp.sin(x)

    scaled.defvjp(lambda x: (cnp.sin(x), x), lambda _, ct: (2.0 * ct,))
    _, pb = cg.vjp(lambda x: scaled(x) * 1.0, np.ones(2))
    scaled.defvjp(lambda x: (cnp.sin(x), x), lambda _, ct: (3.0 * ct,))
    assert np.array_equal(pb(np.ones(2))[0], [2.0, 2.0])
    assert np.array_equal(cg.grad(lambda x: scaled(x).sum())(np.ones(2)), [3.0, 3.0])

    @cg.custom_jvp
    def doubled(x):
        return cnp.sin(x)

    doubled.defjvp(lambda p, t: (cnp.sin(p[0]), 2.0 * t[0]))
    _, pb = cg.vjp(lambda x: doubled(x) * 1.0, np.ones(2))
    doubled.defjvp(lambda p, t: (cnp.sin(p[0]), 3.0 * t[0]))
    assert np.array_equal(pb(np.ones(2))[0], [2.0, 2.0])
    assert np.array_equal(cg.grad(lambda x: doubled(x).sum())(np.ones(2)), [3.0, 3.0])


# -------------------------------------------------------------------------------------
# custom_jvp
# -------------------------------------------------------------------------------------


@pytest.mark.parametrize("x", [0.1, 2.0, -3.0])
def test_forward_mode_uses_the_rule(x):
    out, tangent = cg.jvp(clipped_tanh, (x,), (1.0,))
    assert out == math.tanh(x)
    assert tangent == pytest.approx(clipped_tanh_slope(x), rel=1e-15)
    assert (tangent == 0.5) == (abs(x) > 1)  # the clip is active: not tanh's derivative


@pytest.mark.parametrize("x", [0.1, 2.0, -3.0])
def test_reverse_mode_transposes_the_rule(x):
    assert cg.grad(clipped_tanh)(x) == pytest.approx(clipped_tanh_slope(x), rel=1e-15)


M = np.array([[1.0, 2.0, 0.0], [0.0, 3.0, -1.0]])  # not symmetric: a transpose shows


@cg.custom_jvp
def mixed(x):
    """A value of no interest; the rule's tangent is exp(x0) * (M @ t), linear in t."""
    return cnp.matmul(M, x)


@mixed.defjvp
def _mixed_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return cnp.matmul(M, x), cnp.exp(x[0]) * cnp.matmul(M, t)


def test_reverse_mode_is_the_transposed_linear_map_of_the_rule():
    x, t, ct = np.array([0.5, -1.0, 2.0]), np.array([1.0, -2.0, 0.5]), np.array([3.0, -1.0])
    _, tangent = cg.jvp(mixed, (x,), (t,))
    np.testing.assert_allclose(tangent, math.exp(0.5) * (M @ t), rtol=1e-15)
    _, pullback = cg.vjp(mixed, x)
    np.testing.assert_allclose(pullback(ct)[0], math.exp(0.5) * (M.T @ ct), rtol=1e-15)


@pytest.mark.parametrize("x, slope", [(0.0, 1.0), (2.0, 1.0), (-2.0, -1.0)])
def test_rule_with_a_cond_inside_in_reverse_mode(x, slope):
    assert cg.grad(cnp.abs)(0.0) == 0.0  # the library's convention, which the rule overrides
    assert cg.grad(abs_right)(x) == slope


@pytest.mark.parametrize("x, slope", [(0.0, 1.0), (-2.0, -1.0)])
def test_rule_with_a_cond_inside_in_forward_mode(x, slope):
    assert cg.jvp(abs_right, (x,), (1.0,)) == (abs(x), slope)


def jvp_looped(x, n):
    def body(i, c):
        return cg.cond(c > 0.0, lambda: clipped_tanh(c * x) + 0.5, lambda: abs_right(c) - x)

    return cg.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, body(c[0], c[1])),
                         (0, x))[1]


def jvp_looped_reference(x: float, n: int) -> tuple[float, float]:
    v, d = x, 1.0
    for _ in range(n):
        if v > 0:
            v, d = math.tanh(v * x) + 0.5, clipped_tanh_slope(v * x) * (d * x + v)
        else:
            v, d = abs(v) - x, (1.0 if v >= 0 else -1.0) * d - 1.0
    return v, d


@pytest.mark.parametrize("x", [1.7, -0.4])
def test_custom_jvp_in_loops_under_every_strategy(x):
    g = run_under_every_strategy(jvp_looped, x, 6)
    value, derivative = jvp_looped_reference(x, 6)
    assert g == pytest.approx(derivative, rel=1e-12)
    assert cg.value_and_grad(jvp_looped)(x, 6)[0] == pytest.approx(value, rel=1e-14)


@cg.custom_jvp
def softclip(p, n):
    """Pytree and integer arguments; the rule is the true derivative."""
    return p["scale"] * cnp.tanh(p["x"] / n)


@softclip.defjvp
def _softclip_jvp(primals, tangents):
    (p, n), (tp, _) = primals, tangents
    y = cnp.tanh(p["x"] / n)
    return p["scale"] * y, tp["scale"] * y + p["scale"] * (1.0 - y * y) * tp["x"] / n


def test_custom_jvp_agrees_with_check_grads_where_the_rule_is_the_derivative():
    p = {"scale": 1.5, "x": np.array([-2.0, 0.3, 4.0])}
    check_grads(lambda p: cnp.sum(softclip(p, 3) ** 2), (p,))
    check_grads(lambda x: clipped_tanh(x) * x, (0.4,))  # |x| < 0.88: the clip is inactive
    check_grads(lambda x: cg.fori_loop(0, 3, lambda i, c: clipped_tanh(c) + x, x), (0.2,),
                modes=("rev",))


def test_custom_jvp_is_a_node_of_its_own():
    program = cg.lower(clipped_tanh, 2.0)
    assert "= custom_jvp %x {rule=custom_jvp(clipped_tanh)}" in program.text()
    assert "tanh %" not in program.text()
    adjoint = cg.adjoint(program).text()
    assert "= vjp_call %" in adjoint and "{of=vjp(clipped_tanh.jvp_rule, wrt=[1])}" in adjoint


def _jvp_rule(rule):
    @cg.custom_jvp
    def f(x):
        return x * 2.0

    f.defjvp(rule)
    return f


@pytest.mark.parametrize("rule, message", [
    (lambda p, t: p[0] * 2.0, r"must return \(output, tangent\)"),
    (lambda p, t: (p[0] * 2.0, (t[0], t[0])), "structure"),
    (lambda p, t: (p[0] * 2.0, cnp.stack([t[0], t[0]])), r"f64\[2\]"),
], ids=["not a pair", "wrong structure", "wrong shape"])
def test_malformed_jvp_rules_are_argument_type_errors(rule, message):
    with pytest.raises(cg.ArgumentTypeError, match=message):
        cg.jvp(_jvp_rule(rule), (1.0,), (1.0,))
    with pytest.raises(cg.ArgumentTypeError, match=message):
        cg.grad(_jvp_rule(rule))(1.0)


def test_custom_jvp_without_a_rule():
    @cg.custom_jvp
    def bare(x):
        return x * 3.0

    assert bare(2.0) == 6.0  # eager: the function itself
    with pytest.raises(cg.ArgumentTypeError, match=r"bare\.defjvp"):
        cg.grad(bare)(2.0)


# -------------------------------------------------------------------------------------
# stop_gradient
# -------------------------------------------------------------------------------------


def test_stop_gradient_blocks_the_gradient():
    def f(x):
        return x * cg.stop_gradient(x)

    assert cg.value_and_grad(f)(3.0) == (9.0, 3.0)  # d/dx x*c = c, not 2x
    assert cg.jvp(f, (3.0,), (1.0,)) == (9.0, 3.0)
    assert "stop_gradient %x" in cg.lower(f, 3.0).text()


def test_stop_gradient_eagerly_is_the_identity():
    """Outside a transformation it returns its input as the numpy functions would: a
    scalar stays a numpy scalar, an array keeps its dtype and values."""
    assert repr(cg.stop_gradient(1.5)) == repr(np.float64(1.5))
    x = np.arange(3, dtype=np.float32)
    y = cg.stop_gradient(x)
    assert y.dtype == np.float32 and np.array_equal(y, x)


def test_stop_gradient_on_pytrees():
    def f(p):
        frozen = cg.stop_gradient(p)
        return cnp.sum(p["a"] * frozen["b"] + p["b"] ** 2 + frozen["a"] * 100.0)

    p = {"a": np.array([1.0, 2.0]), "b": np.array([3.0, 4.0])}
    g = cg.grad(f)(p)
    np.testing.assert_array_equal(g["a"], p["b"])
    np.testing.assert_array_equal(g["b"], 2 * p["b"])


def test_stop_gradient_in_a_loop_under_every_strategy():
    """A fixed-point style iteration whose carry is frozen each step: only the last
    step's explicit dependence on x is differentiated, on any strategy."""
    def f(x):
        return cg.fori_loop(0, 4, lambda i, c: cnp.sin(cg.stop_gradient(c)) + c * x, x)

    x = v = 0.6
    d = 1.0  # by hand: d c_{k+1} = d c_k * x + c_k (the sin term is frozen)
    for _ in range(4):
        v, d = math.sin(v) + v * x, d * x + v
    assert run_under_every_strategy(f, x) == pytest.approx(d, rel=1e-14)


def test_stop_gradient_eagerly_returns_its_input():
    tree = {"a": np.array([1.0, 2.0]), "n": (3, np.float32(1.5))}
    out = cg.stop_gradient(tree)
    assert out.keys() == tree.keys()
    np.testing.assert_array_equal(out["a"], tree["a"])
    assert out["n"][0] == 3 and out["n"][1] == np.float32(1.5)
    assert np.asarray(out["n"][1]).dtype == np.float32


def test_python_control_flow_in_a_custom_function_names_the_line_and_why():
    """The function is traced (for its output structure) like in JAX. Its `if` on a
    traced argument is converted (docs/autograph.md), like any user function's; what stays
    Python (an explicit bool()) is a TracerBoolError naming the line, with a note saying
    what was traced."""
    @cg.custom_vjp
    def absolute(x):
        if x > 0:
            return x
        return -x

    absolute.defvjp(lambda x: (x, None), lambda _, ct: (ct,))
    assert cg.grad(lambda x: absolute(x) * 2.0)(-1.0) == 2.0  # the rule: ct, doubled

    @cg.custom_vjp
    def explicit(x):
        return x if bool(x > 0) else -x

    explicit.defvjp(lambda x: (x, None), lambda _, ct: (ct,))
    with pytest.raises(cg.TracerBoolError, match="test_custom.py") as info:
        cg.grad(lambda x: explicit(x) * 2.0)(1.0)
    assert any("custom_vjp function and its rules are traced" in n
               for n in info.value.__notes__)


def test_derivatives_of_a_gradient_differentiate_fwd_and_bwd_as_ordinary_code():
    """JAX's semantics at second order: F(x) = f(x) x with f = sin and a surrogate rule
    bwd = 2 ct. grad F = sin x + 2x (the rule), and its derivative differentiates fwd's
    output as ordinary code: cos x + 2, not the rule again (2 + 2), in every composition."""
    @cg.custom_vjp
    def f(x):
        return cnp.sin(x)

    f.defvjp(lambda x: (cnp.sin(x), None), lambda _, ct: (2.0 * ct,))

    def F(x):
        return f(x) * x

    x = 0.5
    assert cg.grad(F)(x) == pytest.approx(np.sin(x) + 2 * x, rel=1e-14)
    want = 2.0 + np.cos(x)
    assert cg.grad(cg.grad(F))(x) == pytest.approx(want, rel=1e-14)
    assert cg.jvp(cg.grad(F), (x,), (1.0,))[1] == pytest.approx(want, rel=1e-14)
    assert cg.hessian(F)(x) == pytest.approx(want, rel=1e-14)


# -- second derivatives through custom rules (item 7) ----------------------------------
#
# JAX differentiates a gradient's reverse pass as ordinary code: a custom_vjp's bwd runs
# at the cotangent that reached it and is differentiated there, whatever it is linear in.
# Every expectation below is derived by hand from that (the derivation in the comment);
# tests/primitives/test_against_jax.py checks the same programs against JAX itself.

CLIP = 0.6


@cg.custom_vjp
def clip_gradient(x):
    return x


clip_gradient.defvjp(lambda x: (x, None), lambda _, g: (cnp.clip(g, -CLIP, CLIP),))


@cg.custom_vjp
def clipped_sin(x):  # residual cos(x), cotangent clipped after the chain rule
    return cnp.sin(x)


clipped_sin.defvjp(lambda x: (cnp.sin(x), cnp.cos(x)),
                   lambda c, g: (cnp.clip(g * c, -0.5, 0.5),))


def second_derivatives(f, x, checkpoint=None):
    """The derivative of f's gradient at scalar x by every composition of modes."""
    g = cg.grad(f, checkpoint=checkpoint)
    return {"hessian": cg.hessian(f, checkpoint=checkpoint)(x), "jacfwd(grad)": cg.jacfwd(g)(x),
            "jacrev(grad)": cg.jacrev(g)(x), "grad(grad)": cg.grad(g)(x),
            "jvp(grad)": cg.jvp(g, (x,), (1.0,))[1]}


def clipped_power(loop):
    """c ← clip_gradient(x·c) three times from c = x: the value x⁴. Reverse, the output's
    cotangent 1 is clipped to L = CLIP, then L·x and L·x² pass (below L for 0 < x < 1):
    gradient L·x³ + (L·x)·x² + (L·x²)·x + (L·x²)·x = 4 L x³, whose derivative — the
    clipped bwd differentiated where it ran — is 12 L x² (the unclipped one would be
    12 x²), under every checkpoint strategy (`checkpoint=`)."""
    def f(x, checkpoint=None):
        def step(c):
            return clip_gradient(x * c)

        if loop == "fori":
            return cg.fori_loop(0, 3, lambda i, c: step(c), x, checkpoint=checkpoint)
        if loop == "while":
            return cg.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, step(c[1])), (0, x),
                                 checkpoint=checkpoint)[1]
        if loop == "scan":
            return cg.scan(lambda c, k: (step(c), k), x, np.arange(3.0),
                           checkpoint=checkpoint)[0]
        c = x
        for _ in range(3):
            c = step(c)
        return c
    return f


@pytest.mark.parametrize("loop", ["python", "fori", "while", "scan"])
def test_a_clipped_gradient_in_a_loop_is_differentiated_where_it_clipped(loop):
    f, x = clipped_power(loop), 0.8
    assert cg.grad(f)(x) == pytest.approx(4 * CLIP * x ** 3, rel=1e-14)
    for name, got in second_derivatives(f, x).items():
        assert got == pytest.approx(12 * CLIP * x ** 2, rel=1e-13), name


@pytest.mark.parametrize("strategy", [Binomial(2), Recompute(), Online(1)], ids=repr)
def test_the_clipped_second_derivative_is_the_same_under_every_strategy(strategy):
    f, x = clipped_power("while"), 0.8
    g = lambda x: f(x, checkpoint=strategy)  # noqa: E731
    for name, got in second_derivatives(g, x, checkpoint=strategy).items():
        assert got == pytest.approx(12 * CLIP * x ** 2, rel=1e-13), name


def test_the_third_derivative_through_a_clipped_loop():
    """The derivative of 12 L x² (above) is 24 L x, by every composition of three modes."""
    f, x = clipped_power("fori"), 0.8
    for got in (cg.jacfwd(cg.hessian(f))(x), cg.grad(cg.grad(cg.grad(f)))(x),
                cg.jvp(cg.hessian(f), (x,), (1.0,))[1]):
        assert got == pytest.approx(24 * CLIP * x, rel=1e-12)


def test_a_clipped_gradient_of_a_product():
    """f = 3·clip_gradient(x sin x): the cotangent 3 is clipped to L, so f' = L u' with
    u = x sin x, and f'' = L u'' = L (2 cos x - x sin x) (3 u'' unclipped)."""
    f, x = (lambda x: 3.0 * clip_gradient(cnp.sin(x) * x)), 1.3
    for name, got in second_derivatives(f, x).items():
        assert got == pytest.approx(CLIP * (2 * np.cos(x) - x * np.sin(x)), rel=1e-13), name


@pytest.mark.parametrize("x", [0.8, 1.2125], ids=["clipped", "unclipped"])
def test_a_rule_with_residuals_clipping_after_the_chain_rule(x):
    """f = 3·clipped_sin(x²): f' = clip(3 cos u, ±1/2)·2x with u = x². Where 3 cos u > 1/2
    (x = 0.8) the clip is constant, f' = x and f'' = 1; where it is not (x = 1.2125),
    f'' = 6 cos u - 12 u sin u."""
    f = lambda x: clipped_sin(x * x) * 3.0  # noqa: E731
    u = x * x
    want = 1.0 if x == 0.8 else 6 * np.cos(u) - 12 * u * np.sin(u)
    for name, got in second_derivatives(f, x).items():
        assert got == pytest.approx(want, rel=1e-12), name


def test_a_vector_hessian_through_clipping_in_a_loop_is_the_derivative_of_the_gradient():
    """The Hessian JAX computes is the derivative of the gradient function as computed
    (clipping included), which away from a clip's kink central differences of cg.grad
    give (its first derivative is right: test_custom.py)."""
    W = np.array([[0.9, -0.4], [0.3, 1.1]])

    def loss(clip):
        def f(v):
            out = cg.fori_loop(0, 3, lambda i, c: clip(cnp.tanh(W @ c) * v * 2.0), v)
            return cnp.sum(out * out) * 2.0
        return f

    f, v, h = loss(clip_gradient), np.array([0.7, -0.5]), 1e-6
    g = cg.grad(f)
    want = np.stack([(g(v + h * e) - g(v - h * e)) / (2 * h) for e in np.eye(2)], axis=1)
    unclipped = cg.hessian(loss(lambda c: c))(v)
    assert np.max(np.abs(unclipped - want)) > 1.0  # the clips are active at v
    for got in (cg.hessian(f)(v), cg.jacrev(g)(v), cg.jacfwd(g)(v),
                np.stack([cg.jvp(g, (v,), (e,))[1] for e in np.eye(2)], axis=1)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)


# custom_vjp rules that call other custom functions: the derivative of the gradient
# differentiates fwd and bwd with those functions' rules, as JAX does.

@cg.custom_vjp
def skewed_sin(x):  # its rule: cos(x)·(1 + 0.3x)
    return cnp.sin(x)


skewed_sin.defvjp(lambda x: (cnp.sin(x), (cnp.cos(x), x)),
                  lambda r, g: (g * r[0] * (1.0 + 0.3 * r[1]),))


@cg.custom_vjp
def skewed_product(x, y):  # its rule: ∂/∂x = 2y, ∂/∂y = x²
    return x * y


skewed_product.defvjp(lambda x, y: (x * y, (x, y)),
                      lambda r, g: (g * r[1] * 2.0, g * r[0] * r[0]))


@cg.custom_vjp
def sin_by_skewed_fwd(x):
    return cnp.sin(x)


sin_by_skewed_fwd.defvjp(lambda x: (skewed_sin(x) * 1.0, x), lambda x, g: (g * cnp.cos(x) * x,))


@cg.custom_vjp
def sin_by_skewed_bwd(x):
    return cnp.sin(x)


sin_by_skewed_bwd.defvjp(lambda x: (cnp.sin(x), x),
                         lambda x, g: (skewed_product(g, cnp.cos(x)) * x,))


def test_a_fwd_calling_another_custom_function_is_differentiated_by_its_rule():
    """F = A(x²)·3x with A's value sin from fwd = skewed_sin, bwd g·cos(u)·u: F' =
    3 sin u + 6x⁴ cos u (u = x²); F'' differentiates sin u by skewed_sin's rule,
    cos u (1 + 0.3u)·2x, so F'' = 6x cos u (1 + 0.3u) + 24x³ cos u - 12x⁵ sin u (the
    plain cos u in the first term before)."""
    x = 1.1
    u = x * x
    want = 6 * x * np.cos(u) * (1 + 0.3 * u) + 24 * x ** 3 * np.cos(u) - 12 * x ** 5 * np.sin(u)
    for name, got in second_derivatives(lambda x: sin_by_skewed_fwd(x * x) * 3.0 * x, x).items():
        assert got == pytest.approx(want, rel=1e-12), name


def test_a_bwd_calling_another_custom_function_is_differentiated_by_its_rule():
    """F = B(x²)·3x with bwd skewed_product(g, cos u)·u at g = 3x: F' = 3 sin u + s·2x³
    with s = 3x cos u (skewed_product's value); F'' = 6x cos u + s'·2x³ + s·6x², where
    s' comes from skewed_product's rule: 2 cos u·3 + (3x)²·(-2x sin u)."""
    x = 1.1
    u = x * x
    s, ds = 3 * x * np.cos(u), 6 * np.cos(u) - 18 * x ** 3 * np.sin(u)
    want = 6 * x * np.cos(u) + ds * 2 * x ** 3 + s * 6 * x ** 2
    for name, got in second_derivatives(lambda x: sin_by_skewed_bwd(x * x) * 3.0 * x, x).items():
        assert got == pytest.approx(want, rel=1e-12), name


def test_a_custom_jvp_rule_whose_tangent_has_a_custom_coefficient():
    """f = j(x²) whose rule's tangent is dx·q(x, x), q = x·y with the rule y dx + x² dy:
    f' = 2x⁵; f'' differentiates q(u, u) by its rule, (u + u²)·2x, so f'' = 6x⁴ + 4x⁶
    (JAX's value; 10 x⁴ if q were differentiated as x·y)."""
    @cg.custom_jvp
    def q(x, y):
        return x * y

    @q.defjvp
    def _(p, t):
        return p[0] * p[1], p[1] * t[0] + p[0] * p[0] * t[1]

    @cg.custom_jvp
    def j(x):
        return cnp.tanh(x)

    @j.defjvp
    def _(p, t):
        return cnp.tanh(p[0]), t[0] * q(p[0], p[0])

    x = 0.8
    for name, got in second_derivatives(lambda x: j(x * x), x).items():
        assert got == pytest.approx(6 * x ** 4 + 4 * x ** 6, rel=1e-13), name


@cg.custom_vjp
def clip_calling_itself(x):
    return x


clip_calling_itself.defvjp(lambda x: (clip_calling_itself(x), None),
                           lambda _, g: (cnp.clip(g, -CLIP, CLIP),))


@cg.custom_vjp
def clipped_inside_fwd(x):
    return cnp.sin(x)


clipped_inside_fwd.defvjp(lambda x: (clipped_sin(x), x), lambda x, g: (g * cnp.cos(x),))


@cg.custom_vjp
def clipped_inside_bwd(x):
    return cnp.sin(x)


clipped_inside_bwd.defvjp(lambda x: (cnp.sin(x), x),
                          lambda x, g: (clip_gradient(g * cnp.cos(x)),))


@pytest.mark.parametrize("fn", [clip_calling_itself, clipped_inside_fwd, clipped_inside_bwd],
                         ids=["fwd-calls-itself", "in-fwd", "in-bwd"])
def test_a_clipping_rule_inside_a_rule_refuses_the_second_derivative(fn):
    """cfgrad differentiates a rule's fwd and bwd in forward mode, which a clipping rule
    called there does not have (JAX's jacfwd refuses these too); the first derivative
    works."""
    f = lambda x: fn(x * x) * 3.0  # noqa: E731
    assert np.isfinite(cg.grad(f)(0.9))
    for second in (cg.hessian(f), cg.grad(cg.grad(f))):
        with pytest.raises(cg.ArgumentTypeError, match="has none: .*not linear in its cotangent"):
            second(0.9)
