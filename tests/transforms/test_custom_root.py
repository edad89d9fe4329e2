"""cg.custom_root: derivatives of a solver's result by the implicit function theorem, at
every order, whatever the solver (Newton, bisection, a vector fixed point), and the trap
it exists for (a bisection differentiated directly gives exactly 0); its argument checks,
its refusal of a `tangent_solve` that is not linear (through nested programs too), and
its warning where the solver's result is no root (relative to the root's scale), eagerly
and in every transformation."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from solvers import bisection, newton, newton_until, scalar_solve

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad.checkpoint import Binomial, EveryK, Online, Recompute, StoreAll
from cfgrad.testing import check_grads
from cfgrad.trace import Tracer

SOLVERS = [newton, newton_until, bisection]


def sqrt_root(solver):
    return lambda a: cg.custom_root(lambda x: x * x - a, 1.0, solver, scalar_solve)


@pytest.mark.parametrize("solver", SOLVERS)
def test_derivatives_of_every_order_follow_the_theorem(solver):
    """sqrt(a) = a^(1/2): derivatives a^(-1/2)/2, -a^(-3/2)/4, 3a^(-5/2)/8, whichever
    solver found the root, in every composition of modes."""
    root, a = sqrt_root(solver), 2.0
    first, second, third = 0.5 * a ** -0.5, -0.25 * a ** -1.5, 0.375 * a ** -2.5
    assert root(a) == pytest.approx(np.sqrt(a), rel=1e-14)
    assert cg.grad(root)(a) == pytest.approx(first, rel=1e-12)
    assert cg.jvp(root, (a,), (1.0,))[1] == pytest.approx(first, rel=1e-12)
    assert cg.grad(cg.grad(root))(a) == pytest.approx(second, rel=1e-12)
    assert cg.jvp(cg.grad(root), (a,), (1.0,))[1] == pytest.approx(second, rel=1e-12)
    assert cg.grad(lambda a: cg.jvp(root, (a,), (1.0,))[1])(a) == pytest.approx(second,
                                                                              rel=1e-12)
    assert cg.grad(cg.grad(cg.grad(root)))(a) == pytest.approx(third, rel=1e-12)


def test_bisection_differentiated_directly_is_the_trap():
    """The reason custom_root exists: the input reaches bisection's result only through
    comparisons, so reverse mode along the path gives exactly 0, and check_grads says why
    it cannot compare."""
    direct = lambda a: bisection(lambda x: x * x - a, 1.0)  # noqa: E731
    assert cg.grad(direct)(2.0) == 0.0
    with pytest.raises(cg.PathInstabilityError, match="cg.custom_root"):
        check_grads(direct, (2.0,))


def test_a_vector_fixed_point_against_finite_differences():
    W = np.array([[0.2, -0.1, 0.05], [0.05, 0.3, -0.2], [0.1, 0.0, 0.25]])

    def fixed_point(f, x0):
        return cg.fori_loop(0, 200, lambda i, x: x - f(x), x0)

    def richardson(g, y):
        return cg.fori_loop(0, 200, lambda i, v: y + v - g(v), y)

    def loss(b, scale):
        f = lambda x: x - cnp.tanh(W @ x * scale + b)  # noqa: E731
        return cnp.sum(cg.custom_root(f, cnp.zeros(3), fixed_point, richardson) ** 2)

    b = np.array([0.5, -0.25, 0.1])
    check_grads(loss, (b, 1.3), order=2)


def test_has_aux_returns_the_solvers_aux_without_a_derivative():
    def counted(f, x0):
        x, n = cg.while_loop(lambda c: cnp.abs(f(c[0])) > 1e-12,
                             lambda c: (c[0] - f(c[0]) / cg.grad(f)(c[0]), c[1] + 1), (x0, 0))
        return x, n

    def root_and_steps(a):
        return cg.custom_root(lambda x: x * x - a, 1.0, counted, scalar_solve, has_aux=True)

    (value, steps), grad = cg.value_and_grad(root_and_steps, has_aux=True)(4.0)
    assert value == pytest.approx(2.0, rel=1e-14) and grad == pytest.approx(0.25, rel=1e-12)
    assert steps.dtype.kind == "i" and steps > 3


def test_outside_a_transformation_it_is_the_solver():
    assert cg.custom_root(lambda x: x * x - 9.0, 1.0, newton, scalar_solve) == 3.0


def test_the_initial_guess_gets_no_derivative():
    f = lambda g: cg.custom_root(lambda x: x * x - 2.0, g, newton, scalar_solve)  # noqa: E731
    assert cg.grad(f)(1.0) == 0.0


@pytest.mark.parametrize("strategy", [StoreAll(), Recompute(), EveryK(2), Binomial(2),
                                      Online(2)], ids=repr)
def test_a_root_in_every_iteration_of_a_loop(strategy):
    """Each step of an outer loop solves for a root that depends on the carry: first and
    second derivatives are the same bits under every strategy."""
    def loop(checkpoint):
        def f(a):
            def step(i, c):
                return cg.custom_root(lambda x: x * x * x - c - 1.0, 1.0, newton_until,
                                      scalar_solve)
            return cg.fori_loop(0, 5, step, a, checkpoint=checkpoint)
        return f

    f, reference = loop(strategy), loop(StoreAll())
    assert cg.grad(f)(0.7) == cg.grad(reference)(0.7)
    assert cg.grad(cg.grad(f))(0.7) == cg.grad(cg.grad(reference))(0.7)
    assert cg.jvp(cg.grad(f), (0.7,), (1.0,)) == cg.jvp(cg.grad(reference), (0.7,), (1.0,))
    check_grads(f, (0.7,), order=2)


def sqrt_as_root(a, solve=newton, tangent_solve=scalar_solve, guess=1.0, f=None):
    return cg.custom_root(f or (lambda x: x * x - a), guess, solve, tangent_solve)


# -- custom_root: a tangent_solve that is not linear in y ------------------------------


@pytest.mark.parametrize("tangent_solve", [
    lambda g, y: y * y / g(1.0),                  # the issue's reproduction: gave -0.0
    lambda g, y: y / g(1.0) + 1.0,                # affine: forward mode would add the 1
    lambda g, y: cnp.clip(y, -1.0, 1.0) / g(1.0),
    lambda g, y: cg.cond(y > 0.0, lambda: y / g(1.0), lambda: 2.0 * y / g(1.0)),
    lambda g, y: cg.while_loop(lambda v: cnp.abs(g(v) - y) > 1e-12,
                               lambda v: v + (y - g(v)) / g(1.0), 0.0 * y),
    lambda g, y: cnp.linalg.solve(cnp.reshape(y, (1, 1)), cnp.reshape(g(1.0), (1,)))[0],
], ids=["square", "affine", "clip", "branch-on-y", "loop-stopping-on-y", "y-as-matrix"])
def test_a_nonlinear_tangent_solve_is_refused(tangent_solve):
    with pytest.raises(cg.ArgumentTypeError, match=r"tangent_solve\(g, y\)` must be linear in y"):
        cg.grad(lambda a: sqrt_as_root(a, tangent_solve=tangent_solve))(2.0)


@pytest.mark.parametrize("tangent_solve", [
    scalar_solve,
    lambda g, y: cg.fori_loop(0, 60, lambda i, v: v + (y - g(v)) / g(1.0), 0.0 * y),
    lambda g, y: cnp.linalg.solve(cnp.reshape(g(1.0), (1, 1)), cnp.reshape(y, (1,)))[0],
    lambda g, y: cnp.where(cnp.abs(g(1.0)) > 0.0, y / g(1.0), 0.0 * y),
    lambda g, y: cnp.sum(cnp.stack([y, y]) * np.array([0.25, 0.25])) * 2.0 / g(1.0),
    lambda g, y: cg.scan(lambda v, k: (v + (y - g(v)) / g(1.0), v * k), 0.0 * y,
                         np.arange(60.0))[0],
], ids=["divide", "richardson", "linalg-solve", "where-on-g", "stack-and-sum", "scan"])
def test_linear_tangent_solves_are_accepted(tangent_solve):
    """d sqrt(a)/da = 1/(2 sqrt a), by hand."""
    assert cg.grad(lambda a: sqrt_as_root(a, tangent_solve=tangent_solve))(2.0) == \
        pytest.approx(0.5 / np.sqrt(2.0), rel=1e-12)


def test_the_reproduction_of_the_issue_names_the_operation_and_line():
    with pytest.raises(cg.ArgumentTypeError) as err:
        cg.grad(lambda a: cg.custom_root(lambda y: y * y - a, 1.0, lambda f, y0: cnp.sqrt(a),
                                         lambda g, y: y * y / g(1.0)))(2.0)
    message = str(err.value)
    assert "custom_root(<lambda>)" in message and "`mul`" in message
    assert "test_custom_root.py" in message


# -- custom_root: the solver's result is not a root ------------------------------------


def stops_early(f, x0):
    return cg.fori_loop(0, 2, lambda i, x: x - f(x) / cg.grad(f)(x), x0)


def first_guess(f, x0):
    return x0


@pytest.mark.parametrize("solve", [first_guess, stops_early], ids=["guess", "two-steps"])
def test_a_result_that_is_no_root_warns_eagerly_and_in_every_transformation(solve):
    root = lambda a: sqrt_as_root(a, solve=solve)  # noqa: E731
    for run in (root, cg.grad(root), cg.jit(cg.grad(root)),
                lambda a: cg.jvp(root, (a,), (1.0,)), cg.grad(cg.grad(root))):
        with pytest.warns(cg.RootWarning, match="not a root of f"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", cg.CompileWarning)
                run(2.0)


def test_the_warning_fires_at_run_time_for_each_input():
    """The solution is only known when the program runs: a cached program warns for the
    input where the solver fails and not for the one where it converges."""
    def solve(f, x0):  # converges from x0 near the root only
        return cg.fori_loop(0, 4, lambda i, x: x - f(x) / cg.grad(f)(x), x0)

    g = cg.grad(lambda a, guess: sqrt_as_root(a, solve=solve, guess=guess))
    with warnings.catch_warnings():
        warnings.simplefilter("error", cg.RootWarning)
        assert g(2.0, 1.4) == pytest.approx(0.5 / np.sqrt(2.0), rel=1e-12)
    with pytest.warns(cg.RootWarning):
        g(2.0, 40.0)


@pytest.mark.parametrize("solve", [newton, bisection], ids=["newton", "bisection"])
def test_converged_solvers_do_not_warn(solve):
    """Also float32 and roots at 0 (scale from the initial guess) and a vector fixed
    point: a converged solve is at the rounding level."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", cg.RootWarning)
        assert cg.grad(lambda a: sqrt_as_root(a, solve=solve))(3.0) == pytest.approx(
            0.5 / np.sqrt(3.0), rel=1e-10)
        x32 = cg.custom_root(lambda x: x * x - np.float32(2.0), np.float32(1.0), solve,
                             scalar_solve)
        assert x32.dtype == np.float32 and x32 == pytest.approx(np.sqrt(2.0), rel=1e-6)
        assert cg.grad(lambda a: cg.custom_root(lambda x: x - a, 1.0, solve,
                                                scalar_solve))(0.0) == 1.0
        W = np.array([[0.2, -0.1], [0.05, 0.3]])

        def equilibrium(b):
            f = lambda x: x - cnp.tanh(W @ x + b)  # noqa: E731
            return cg.custom_root(f, cnp.zeros(2),
                                  lambda f, x0: cg.fori_loop(0, 100, lambda i, x: x - f(x), x0),
                                  lambda g, y: cg.fori_loop(0, 100,
                                                            lambda i, v: y + v - g(v), y))
        cg.grad(lambda b: cnp.sum(equilibrium(b) ** 2))(np.array([0.5, -0.25]))


# -- custom_root: argument mistakes ----------------------------------------------------


def probe(**changes):
    """custom_root of x² - a with one argument replaced, under cg.grad."""
    def fn(a):
        kw = dict(f=lambda x: x * x - a, initial_guess=1.0,
                  solve=lambda f, x0: cnp.sqrt(a), tangent_solve=scalar_solve)
        kw.update({k: (v(a) if k in ("f", "solve") and getattr(v, "wants_a", False) else v)
                   for k, v in changes.items()})
        return cnp.sum(cg.custom_root(**kw))
    return cg.grad(fn)(2.0)


def with_a(fn):
    fn.wants_a = True
    return fn


@pytest.mark.parametrize(("changes", "pattern"), [
    (dict(f=3.0), r"custom_root: `f` must be a function \(a callable\), got float 3\.0"),
    (dict(solve=5), r"`solve` must be a function \(a callable\), got int 5"),
    (dict(tangent_solve=None), r"`tangent_solve` must be a function.*got NoneType None"),
    (dict(initial_guess="1.0"), r"`initial_guess` must be a float array.*got str '1.0'"),
    (dict(initial_guess=1), r"`initial_guess` must be a float.*got i64\[\]; write 1\.0 for 1"),
    (dict(initial_guess=None), r"`initial_guess` must be a float array.*got None"),
    (dict(f=with_a(lambda a: lambda x: cnp.ones(3) * x - a)),
     r"`f` must return a residual of its argument's structure.*\(f64\[\]: .*returns f64\[3\]"),
    (dict(f=with_a(lambda a: lambda x: (x - a, x))),
     r"`f` must return a residual.*returns \(\*, \*\) with leaves \[f64\[\], f64\[\]\]"),
    (dict(solve=with_a(lambda a: lambda f, x0: cnp.sqrt(a) * cnp.ones(2))),
     r"the solution `solve` returned is f64\[2\], but it must have .* initial_guess: f64\[\]"),
    (dict(solve=with_a(lambda a: lambda f, x0: cnp.sqrt(a).astype(np.float32)),
          initial_guess=np.float64(1.0)),
     r"the solution `solve` returned is f32\[\].*initial_guess: f64\[\]"),
    (dict(tangent_solve=lambda g, y: cnp.ones(2) * y / g(1.0)),
     r"the result of `tangent_solve` is f64\[2\], but it must have"),
])
def test_argument_mistakes_are_typed_errors_naming_the_argument(changes, pattern):
    with pytest.raises(cg.ArgumentTypeError, match=pattern):
        probe(**changes)


def test_argument_mistakes_are_caught_eagerly_too():
    with pytest.raises(cg.ArgumentTypeError, match="`f` must be a function"):
        cg.custom_root(3.0, 1.0, lambda f, x0: 1.0, scalar_solve)
    with pytest.raises(cg.ArgumentTypeError, match="`f` must return a residual"):
        cg.custom_root(lambda x: cnp.ones((1, 1)) * (x - 2.0), 1.0, lambda f, x0: 2.0,
                       scalar_solve)


def test_a_root_function_of_another_rank_fails_before_the_solver_runs():
    """The rank-growing loop of issue 23 (a 33-dimension RuntimeError): f maps a vector to
    a matrix, so a Python-loop solver grew a dimension per step. The residual's shape is
    checked on f before `solve` is called."""
    def fixed_point(f, x0):
        x = x0
        for _ in range(40):
            x = x - f(x)
        return x

    for run in (lambda a: cg.custom_root(lambda y: y[None] - a, cnp.ones(2), fixed_point,
                                         scalar_solve),
                cg.grad(lambda a: cnp.sum(cg.custom_root(lambda y: y[None] - a, cnp.ones(2),
                                                         fixed_point, scalar_solve)))):
        with pytest.raises(cg.ArgumentTypeError, match=r"returns f64\[1,2\]"):
            run(2.0)


def test_has_aux_without_a_pair_is_a_typed_error():
    with pytest.raises(cg.ArgumentTypeError, match=r"has_aux=True\): `solve` must return a pair"):
        cg.grad(lambda a: cg.custom_root(lambda x: x * x - a, 1.0, lambda f, x0: cnp.sqrt(a),
                                         scalar_solve, has_aux=True))(2.0)


# -- custom_root: linearity through nested programs (review of issue 23's fixes) --------
#
# The analysis follows a nested program (g, a cg.vjp's function, a custom rule's primal)
# also where its inputs do not depend on y: g(0) in Richardson's first step is zero, so
# y - g(0) is linear. It must stay sound: nothing nonlinear or affine is accepted.

W2 = np.array([[0.2, -0.1], [0.05, 0.3]])
B2 = np.array([0.5, -0.25])


def python_richardson(g, y):
    """The textbook Richardson solve the refusal message recommends (issue's code)."""
    x = cnp.zeros_like(y)
    for _ in range(100):
        x = x + 0.3 * (y - g(x))
    return x


def unit_vectors(y):
    n = np.shape(y)[0]
    return [np.eye(n)[i] for i in range(n)]


def jacobi(g, y):
    """A fixed number of Jacobi sweeps: Richardson divided by g's diagonal."""
    diagonal = cnp.stack([g(e)[i] for i, e in enumerate(unit_vectors(y))])
    v = cnp.zeros_like(y)
    for _ in range(60):
        v = v + (y - g(v)) / diagonal
    return v


def matrix_solve(g, y):
    """cnp.linalg.solve of g's matrix, its columns g of the unit vectors."""
    return cnp.linalg.solve(cnp.stack([g(e) for e in unit_vectors(y)], axis=1), y)


def equilibrium_gradient(tangent_solve):
    """d/db of |x|² at x = tanh(W x + b)."""
    def loss(b):
        x = cg.custom_root(lambda x: x - cnp.tanh(W2 @ x + b), cnp.zeros(2),
                           lambda f, x0: cg.fori_loop(0, 100, lambda i, x: x - f(x), x0),
                           tangent_solve)
        return cnp.sum(x * x)
    return cg.grad(loss)(B2)


def equilibrium_gradient_by_hand():
    """x = tanh(W x + b) gives dx = (I - S W)⁻¹ S db with S = diag(1 - x²), so
    d|x|²/db = 2 Sᵀ (I - S W)⁻ᵀ x."""
    x = np.zeros(2)
    for _ in range(200):
        x = np.tanh(W2 @ x + B2)
    S = np.diag(1.0 - x * x)
    return 2.0 * S.T @ np.linalg.solve((np.eye(2) - S @ W2).T, x)


@pytest.mark.parametrize("tangent_solve", [
    python_richardson,
    lambda g, y: cg.fori_loop(0, 100, lambda i, v: v + 0.9 * (y - g(v)), cnp.zeros_like(y)),
    jacobi,
    matrix_solve,
], ids=["richardson-python-loop", "richardson-fori", "jacobi", "linalg-solve-of-g"])
def test_each_recommended_vector_tangent_solve_is_accepted_and_exact(tangent_solve):
    np.testing.assert_allclose(equilibrium_gradient(tangent_solve),
                               equilibrium_gradient_by_hand(), rtol=1e-10)


@pytest.mark.parametrize("tangent_solve", [python_richardson, scalar_solve],
                         ids=["richardson-python-loop", "divide"])
def test_each_recommended_scalar_tangent_solve_is_accepted_and_exact(tangent_solve):
    """The issue's reproduction: the Python-loop Richardson solve was refused."""
    for a in (2.0, 0.3):
        assert cg.grad(lambda a: sqrt_as_root(a, tangent_solve=tangent_solve))(a) == \
            pytest.approx(0.5 / np.sqrt(a), rel=1e-12)


def conjugate_gradients(g, y):
    """Its step sizes are quotients of y's inner products: not linear in y."""
    v, r = cnp.zeros_like(y), y
    p = r
    for _ in range(2):
        gp = g(p)
        alpha = cnp.sum(r * r) / cnp.sum(p * gp)
        v, r_new = v + alpha * p, r - alpha * gp
        p, r = r_new + cnp.sum(r_new * r_new) / cnp.sum(r * r) * p, r_new
    return v


def test_the_refusal_recommends_only_forms_that_are_linear():
    with pytest.raises(cg.ArgumentTypeError) as err:
        cg.grad(lambda a: sqrt_as_root(a, tangent_solve=lambda g, y: y * y / g(1.0)))(2.0)
    message = str(err.value)
    for form in ("y / g(1.0)", "Richardson", "Jacobi", "cnp.linalg.solve of g's matrix"):
        assert form in message
    assert "conjugate" not in message
    with pytest.raises(cg.ArgumentTypeError, match="must be linear in y"):
        equilibrium_gradient(conjugate_gradients)


@cg.custom_jvp
def custom_cos(x):
    return cnp.cos(x)


custom_cos.defjvp(lambda p, t: (cnp.cos(p[0]), -cnp.sin(p[0]) * t[0]))


@cg.custom_jvp
def custom_square(x):
    return x * x


custom_square.defjvp(lambda p, t: (p[0] * p[0], 2.0 * p[0] * t[0]))


def g_of_zeros(g, y):
    """g(0): a traced zero, known to be zero only by following g's program (a function
    of constants, such as cnp.zeros_like(y), is computed while tracing)."""
    return g(cnp.zeros_like(y))


@pytest.mark.parametrize("tangent_solve", [
    lambda g, y: g(y * y) / g(1.0) ** 2,                      # g applied to y²
    lambda g, y: y / g(1.0) + g(1.0),                         # affine: g of a constant
    lambda g, y: python_richardson(lambda v: g(v) + 1.0, y),  # g made affine
    lambda g, y: y / g(1.0) + cg.vjp(cnp.cos, g_of_zeros(g, y))[0],     # cos(0) = 1
    lambda g, y: y / g(1.0) + custom_cos(g_of_zeros(g, y)),  # the same by a custom rule
    lambda g, y: cg.vjp(lambda v: 3.0 * v, 1.0)[1](y * y)[0] / g(1.0),  # gave 0.0 silently
    lambda g, y: cg.vjp(lambda v: (3.0 * v, v), 1.0)[1]((y, 1.0))[0] / g(1.0),  # affine
    lambda g, y: cg.vjp(lambda v: v * v, y)[1](1.0)[0] / g(1.0),  # a point moving with y
    conjugate_gradients,
], ids=["g-of-square", "plus-g-of-constant", "affine-g", "call-of-cos-of-zeros",
        "custom-cos-of-zeros", "pullback-of-square",
        "pullback-of-constant-cotangent", "pullback-at-y", "conjugate-gradients"])
def test_nonlinear_tangent_solves_through_nested_programs_are_refused(tangent_solve):
    with pytest.raises(cg.ArgumentTypeError, match=r"tangent_solve\(g, y\)` must be linear in y"):
        cg.grad(lambda a: sqrt_as_root(a, tangent_solve=tangent_solve))(2.0)


@pytest.mark.parametrize("tangent_solve", [
    lambda g, y: y / g(1.0) + g_of_zeros(g, y),
    lambda g, y: y / g(1.0) + cg.vjp(lambda c: c * c, g_of_zeros(g, y))[0],  # 0² = 0
    lambda g, y: y / g(1.0) + custom_square(g_of_zeros(g, y)),
    lambda g, y: cg.vjp(lambda v: 3.0 * v, 1.0)[1](y)[0] / (3.0 * g(1.0)),
    lambda g, y: y / g(1.0) + cg.vjp(lambda v: v * v, 1.0)[1](g_of_zeros(g, y))[0],
], ids=["plus-g-of-zeros", "call-of-square-of-zeros", "custom-square-of-zeros",
        "pullback-at-a-constant", "pullback-of-zeros"])
def test_linear_tangent_solves_through_nested_programs_are_accepted(tangent_solve):
    assert cg.grad(lambda a: sqrt_as_root(a, tangent_solve=tangent_solve))(2.0) == \
        pytest.approx(0.5 / np.sqrt(2.0), rel=1e-12)


# -- custom_root: the root check's scale near 0 and far from it ------------------------


def fixed_point_until(tolerance):
    """z ← z - f(z) until max |f(z)| < tolerance: an absolute stopping rule."""
    def solve(f, z0):
        def step(c):
            z = c[0] - f(c[0])
            return z, cnp.max(cnp.abs(f(z)))
        return cg.while_loop(lambda c: c[1] >= tolerance, step,
                             (z0, cnp.max(cnp.abs(f(z0)))), max_iters=10_000)[0]
    return solve


def tanh_root(b, guess, solve):
    """The root of z - tanh(z/2 + b), a solution near 2b for small b."""
    return cg.custom_root(lambda z: z - cnp.tanh(0.5 * z + b), guess, solve,
                          lambda g, y: jacobi(g, y) if np.ndim(y) else y / g(1.0))


def tanh_root_derivative(z, b):
    s = 1.0 - np.tanh(0.5 * z + b) ** 2
    return s / (1.0 - 0.5 * s)


def runs_without_warning(fn, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("error", cg.RootWarning)
        return fn(*args)


def warns_no_root(fn, *args):
    with pytest.warns(cg.RootWarning, match="not a root of f"):
        return fn(*args)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_converged_solver_at_a_root_near_zero_does_not_warn(dtype):
    """The review's case: stopping at |f| < 1e-10 for b = 1e-9 from 0 warned, though the
    derivative is exact (the root's scale, 2e-9, was taken for the tolerance's)."""
    b, tolerance = dtype(1e-9 if dtype == np.float64 else 1e-6), \
        1e-10 if dtype == np.float64 else 1e-8
    solve = fixed_point_until(tolerance)
    z = runs_without_warning(tanh_root, b, dtype(0.0), solve)
    assert z.dtype == dtype and 0.0 < z < 4 * b
    grad = runs_without_warning(cg.grad(lambda b: tanh_root(b, dtype(0.0), solve)), b)
    assert grad == pytest.approx(tanh_root_derivative(float(z), float(b)),
                                 rel=1e-9 if dtype == np.float64 else 1e-5)


def test_a_converged_vector_solver_at_a_root_near_zero_does_not_warn():
    b = np.array([1e-9, -3e-10])
    solve = fixed_point_until(1e-12)
    loss = lambda b: cnp.sum(tanh_root(b, cnp.zeros(2), solve))  # noqa: E731
    z = runs_without_warning(tanh_root, b, np.zeros(2), solve)
    np.testing.assert_allclose(runs_without_warning(cg.grad(loss), b),
                               tanh_root_derivative(z, b), rtol=1e-9)


def test_a_root_of_size_a_million_is_checked_relative_to_its_size():
    a = 1.7e12  # root 1.3038e6
    converged = runs_without_warning(sqrt_as_root, a, newton, scalar_solve, 1e6)
    assert converged == pytest.approx(np.sqrt(a), rel=1e-14)
    assert runs_without_warning(cg.grad(lambda a: sqrt_as_root(a, guess=1e6)), a) == \
        pytest.approx(0.5 / np.sqrt(a), rel=1e-10)
    off = lambda f, x0: np.sqrt(a) * (1.0 + 1e-3)  # noqa: E731
    warns_no_root(sqrt_as_root, a, off, scalar_solve, 1e6)
    warns_no_root(cg.grad(lambda a: sqrt_as_root(a, solve=lambda f, x0: cnp.sqrt(a) * 1.001,
                                              guess=1e6)), a)


@pytest.mark.parametrize("case", ["guess-near-zero", "stops-early", "vector-guess",
                                  "float32-guess"])
def test_a_clear_non_root_near_zero_still_warns(case):
    """A solver that returns its initial guess 0 for a root at 0.01 or stops at |f| < 1e-2
    for a root at 0.8: steps of 1e-2 are 100 times the absolute floor."""
    if case == "guess-near-zero":
        args = (0.005, 0.0, first_guess)
    elif case == "stops-early":
        args = (0.5, 0.0, fixed_point_until(1e-2))
    elif case == "vector-guess":
        args = (np.array([0.005, 0.0]), np.zeros(2), first_guess)
    else:
        args = (np.float32(0.005), np.float32(0.0), first_guess)
    warns_no_root(tanh_root, *args)
    warns_no_root(cg.grad(lambda b: cnp.sum(tanh_root(b, *args[1:]))), args[0])


# -- custom_root outside a transformation: the check from values ----------------------


def test_the_eager_check_uses_the_values_f_closes_over_at_each_call():
    """Outside a trace f's program is traced at each call: one f object whose closed-over
    value changes is checked against the value of the call, not a cached one."""
    box = [2.0]
    f = lambda x: x * x - box[0]  # noqa: E731
    for a in (2.0, 9.0, 0.25):
        box[0] = a
        assert runs_without_warning(cg.custom_root, f, 1.0, newton, scalar_solve) == \
            pytest.approx(np.sqrt(a), rel=1e-14)
    box[0] = 16.0
    warns_no_root(cg.custom_root, f, 1.0, lambda f, x0: 3.0, scalar_solve)


def test_the_eager_check_calls_tangent_solve_on_values():
    """Outside a transformation nothing is differentiated: tangent_solve is called on the
    residual's values (not traced), g is exact, and a float32 solution of a Python-float
    guess is checked."""
    seen = []

    def solve_and_record(g, y):
        seen.append(type(y))
        return y / g(1.0)

    x = runs_without_warning(cg.custom_root, lambda x: x * x - 2.0, 1.0,
                             lambda f, x0: np.float32(np.sqrt(2.0)), solve_and_record)
    assert x.dtype == np.float32 and seen and not any(issubclass(t, Tracer) for t in seen)
    warns_no_root(cg.custom_root, lambda x: x * x - 2.0, 1.0, lambda f, x0: np.float32(1.4),
                  solve_and_record)
    z = np.array([0.3, -0.2])
    step = []

    def record_exact(g, y):  # g is the exact Jacobian of x - tanh(W x + b) at the solution
        s = 1.0 - np.tanh(W2 @ z + B2) ** 2
        np.testing.assert_allclose(g(np.array([1.0, 0.0])),
                                   np.eye(2)[0] - s * W2[:, 0], rtol=1e-15)
        step.append(matrix_solve(g, y))
        return step[-1]

    warns_no_root(cg.custom_root, lambda x: x - cnp.tanh(W2 @ x + B2), np.zeros(2),
                  lambda f, x0: z, record_exact)
    x = np.zeros(2)
    for _ in range(200):
        x = np.tanh(W2 @ x + B2)
    np.testing.assert_allclose(z - step[0], x, atol=0.1)  # one Newton step towards it
