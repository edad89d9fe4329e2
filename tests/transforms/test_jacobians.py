"""cg.jacfwd, cg.jacrev and cg.hessian: JAX's layout over pytrees, values against central
differences and closed forms, agreement of the two modes through cond / while / fori,
independence from the checkpoint strategy, use inside a trace, and the errors.

Finite differences evaluate the functions eagerly: outside a transformation cfgrad's
control flow is plain Python, so the reference never goes through cfgrad's derivatives.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad import tree as treelib
from cfgrad.checkpoint import Binomial, EveryK, Online, Recompute, StoreAll

JACOBIANS = (cg.jacfwd, cg.jacrev)


# ---------------------------------------------------------------------------------
# References
# ---------------------------------------------------------------------------------


def expected_shapes(out: Any, args: tuple, argnums: int | Sequence[int]) -> Any:
    """JAX's layout: at each output leaf, the differentiated argument's structure (a tuple
    over the arguments for a sequence argnums) with leaves of shape out + in."""
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)

    def at(y: Any) -> Any:
        per_arg = [treelib.tree_map(lambda x: np.shape(y) + np.shape(x), args[i]) for i in nums]
        return per_arg[0] if isinstance(argnums, int) else tuple(per_arg)

    return treelib.tree_map(at, out)


def shapes(jac: Any) -> Any:
    return treelib.tree_map(np.shape, jac)


def fd_jacobian(fun: Callable, args: tuple, argnums: int | Sequence[int] = 0,
                h: float = 1e-6) -> Any:
    """The Jacobian in JAX's layout by central differences of the eager function."""
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    out_leaves, out_tree = treelib.flatten(fun(*args))
    blocks: dict[tuple[int, int, int], np.ndarray] = {}
    for a, i in enumerate(nums):
        leaves, tree = treelib.flatten(args[i])
        for l, leaf in enumerate(leaves):
            x = np.asarray(leaf, np.float64)
            cols = []
            for j in range(x.size):
                shifted = []
                for sign in (1.0, -1.0):
                    moved = [np.asarray(v, np.float64) for v in leaves]
                    moved[l] = x.copy()
                    moved[l].flat[j] += sign * h
                    call = list(args)
                    call[i] = treelib.unflatten(tree, moved)
                    shifted.append(treelib.flatten(fun(*call))[0])
                cols.append([(np.asarray(p) - np.asarray(m)) / (2 * h)
                             for p, m in zip(*shifted)])
            for k, y in enumerate(out_leaves):
                shape = np.shape(y) + x.shape
                blocks[k, a, l] = (np.stack([c[k] for c in cols], axis=-1).reshape(shape)
                                   if cols else np.zeros(shape))
    per_out = []
    for k in range(len(out_leaves)):
        per_arg = []
        for a, i in enumerate(nums):
            leaves, tree = treelib.flatten(args[i])
            per_arg.append(treelib.unflatten(tree, [blocks[k, a, l] for l in range(len(leaves))]))
        per_out.append(per_arg[0] if isinstance(argnums, int) else tuple(per_arg))
    return treelib.unflatten(out_tree, per_out)


def assert_trees_close(got: Any, want: Any, rtol: float = 1e-6, atol: float = 1e-7) -> None:
    g_leaves, g_tree = treelib.flatten(got)
    w_leaves, w_tree = treelib.flatten(want)
    assert g_tree == w_tree
    for g, w in zip(g_leaves, w_leaves):
        assert np.shape(g) == np.shape(w)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def assert_trees_equal(got: Any, want: Any) -> None:
    g_leaves, g_tree = treelib.flatten(got)
    w_leaves, w_tree = treelib.flatten(want)
    assert g_tree == w_tree
    for g, w in zip(g_leaves, w_leaves):
        assert np.shape(g) == np.shape(w) and np.array_equal(g, w)


# ---------------------------------------------------------------------------------
# Layout: shapes and structures as in JAX, values against central differences
# ---------------------------------------------------------------------------------


def _mixed(params: dict, x: Any) -> tuple:
    return cnp.sum(params["w"] * x) * params["b"], {"sq": x * x, "s": cnp.sin(params["b"])}


CASES = {
    "scalar->scalar": (lambda x: cnp.sin(x) * x, (0.7,), 0),
    "vector->scalar": (lambda x: cnp.sum(cnp.exp(x) * x), (np.array([0.1, -0.4, 0.3]),), 0),
    "scalar->vector": (lambda x: cnp.stack([x, x * x, cnp.cos(x), 1.0 + 0 * x]), (0.3,), 0),
    "vector->vector": (lambda x: cnp.tanh(x) * x[::-1], (np.array([0.2, 0.5, -0.1]),), 0),
    "matrix->matrix": (lambda m: cnp.sin(m.T @ m), (np.arange(6.0).reshape(2, 3) / 7,), 0),
    "dict in, tuple out": (_mixed, ({"b": np.array([0.5, -1.0]), "w": np.ones((2, 2))},
                                    np.array([[0.3, 0.1], [-0.2, 0.4]])), 0),
    "argnums tuple": (_mixed, ({"b": np.array([0.5, -1.0]), "w": np.ones((2, 2))},
                               np.array([[0.3, 0.1], [-0.2, 0.4]])), (1, 0)),
    "argnums negative": (lambda x, y: x * y, (np.array([1.0, 2.0]), 3.0), -1),
    "tuple argument, list out": (lambda t: [t[0] * t[1], t[0] + t[1][0]],
                                 ((0.5, np.array([1.0, 2.0])),), 0),
}


@pytest.mark.parametrize("jacobian", JACOBIANS, ids=lambda j: j.__name__)
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_layout_and_values(jacobian: Callable, case: tuple) -> None:
    fun, args, argnums = case
    jac = jacobian(fun, argnums)(*args)
    nums = (argnums,) if isinstance(argnums, int) else argnums
    nums = tuple(i % len(args) for i in nums)
    want_argnums = nums[0] if isinstance(argnums, int) else nums
    assert shapes(jac) == expected_shapes(fun(*args), args, want_argnums)
    assert_trees_close(jac, fd_jacobian(fun, args, want_argnums))


@pytest.mark.parametrize("jacobian", JACOBIANS, ids=lambda j: j.__name__)
def test_has_aux_returns_the_aux_undifferentiated(jacobian: Callable) -> None:
    def f(x):
        return cnp.sin(x) * 2.0, {"count": 3, "x": x}

    x = np.array([0.1, 0.2])
    jac, aux = jacobian(f, has_aux=True)(x)
    np.testing.assert_allclose(jac, np.diag(2 * np.cos(x)), rtol=1e-15)
    assert aux["count"] == 3 and np.array_equal(aux["x"], x)


def test_hessian_layout_over_pytrees_and_argnums() -> None:
    def f(p, x):
        return {"a": cnp.sum(p["u"] ** 2) * x, "b": p["v"] * cnp.sum(x)}

    p = {"u": np.array([1.0, 2.0]), "v": 0.5}
    x = np.array([0.3, -0.2, 0.1])
    h = cg.hessian(f, argnums=(0, 1))(p, x)
    # JAX's tree product: each output leaf becomes the arguments' structure, each of whose
    # leaves becomes the arguments' structure again, with shape out + in_a + in_b
    args = (p, x)
    want = treelib.tree_map(lambda y: treelib.tree_map(lambda a: treelib.tree_map(
        lambda b: np.shape(y) + np.shape(a) + np.shape(b), args), args), f(p, x))
    assert shapes(h) == want
    # d²a/du² = 2 x ⊗ I, d²b/dv dx = 1
    np.testing.assert_array_equal(h["a"][0]["u"][0]["u"],
                                  2 * x[:, None, None] * np.eye(2)[None])
    np.testing.assert_array_equal(h["b"][0]["v"][1], np.ones(3))


def test_hessian_of_quadratic_form_is_a_plus_a_transpose() -> None:
    a = np.array([[1.0, 2.0, -1.0], [0.0, 3.0, 0.5], [4.0, -2.0, 1.0]])
    h = cg.hessian(lambda x: x @ a @ x)(np.array([0.3, -0.7, 1.2]))
    np.testing.assert_array_equal(h, a + a.T)


def test_empty_inputs_and_outputs() -> None:
    for jacobian in JACOBIANS:
        assert jacobian(lambda x: x * 2.0)(np.ones((2, 0))).shape == (2, 0, 2, 0)
        assert jacobian(lambda x: cnp.sum(x) * np.ones((0, 3)))(np.ones(2)).shape == (0, 3, 2)
    assert cg.jacfwd(lambda x: cnp.sum(x) * np.ones(2))(np.ones(0)).shape == (2, 0)


def test_dtypes_follow_jax() -> None:
    """jacrev's blocks are input cotangents (the argument's dtype), jacfwd's output
    tangents (the output's dtype)."""
    x32 = np.ones(2, np.float32)
    assert cg.jacrev(lambda x: x.astype(np.float64) * 2)(x32).dtype == np.float32
    assert cg.jacfwd(lambda x: x.astype(np.float64) * 2)(x32).dtype == np.float64
    assert cg.hessian(lambda x: cnp.sum(x ** 3))(x32).dtype == np.float32


def test_jacfwd_of_an_integer_output_is_zeros_of_its_dtype() -> None:
    out = cg.jacfwd(lambda x: (cnp.astype(x, np.int64) * 2, x > 1.0))(np.ones(3))
    assert [b.dtype for b in out] == [np.int64, np.bool_]
    assert all(b.shape == (3, 3) and not b.any() for b in out)


def test_keyword_arguments_go_to_fun_undifferentiated() -> None:
    def f(x, scale=1.0):
        return x * scale

    for jacobian in JACOBIANS:
        np.testing.assert_array_equal(jacobian(f)(np.ones(2), scale=3.0), 3 * np.eye(2))


# ---------------------------------------------------------------------------------
# Control flow: closed forms, central differences, forward == reverse
# ---------------------------------------------------------------------------------


def cube_root(a):
    """Newton's method until every residual is tiny: a data-dependent trip count."""
    def step(c):
        k, y = c
        return k + 1, y - (y ** 3 - a) / (3 * y ** 2)

    return cg.while_loop(lambda c: cnp.max(cnp.abs(c[1] ** 3 - a)) > 1e-12, step, (0, a))[1]


def fori_with_cond(x):
    def body(i, c):
        return cg.cond(i % 3 == 0, lambda: c * x[::-1], lambda: cnp.sin(c) + x)
    return cg.fori_loop(0, 5, body, x)


def switch_in_while(x):
    def body(c):
        k, y = c
        y = cg.switch(k % 3, [lambda: y * 0.9, lambda: 0.5 * cnp.tanh(y) + 0.01 * x,
                              lambda: y - 0.1 * x])
        return k + 1, y
    # runs until y is small: the trip count depends on x (7 steps at the tests' x)
    return cg.while_loop(lambda c: cnp.sum(c[1] ** 2) > 0.1, body, (0, x))[1]


def test_newton_while_loop_jacobian_against_closed_form_and_fd() -> None:
    a = np.array([8.0, 27.0, 2.0, 0.5])
    want = np.diag(a ** (-2 / 3) / 3)
    for jacobian in JACOBIANS:
        jac = jacobian(cube_root)(a)
        np.testing.assert_allclose(jac, want, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(jac, fd_jacobian(cube_root, (a,)), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("fun", [cube_root, fori_with_cond, switch_in_while],
                         ids=lambda f: f.__name__)
def test_forward_and_reverse_agree_through_control_flow(fun: Callable) -> None:
    x = np.array([0.6, 1.3, 0.9])
    fwd, rev = cg.jacfwd(fun)(x), cg.jacrev(fun)(x)
    np.testing.assert_allclose(fwd, rev, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(rev, fd_jacobian(fun, (x,)), rtol=1e-6, atol=1e-8)


def test_hessian_compositions_agree_through_control_flow() -> None:
    def f(x):
        return cnp.sum(fori_with_cond(x) ** 2)

    x = np.array([0.6, 1.3, 0.9])
    h = cg.hessian(f)(x)
    for other in (cg.jacrev(cg.jacrev(f)), cg.jacrev(cg.jacfwd(f)), cg.jacfwd(cg.jacfwd(f)),
                  cg.jacfwd(cg.grad(f))):
        np.testing.assert_allclose(other(x), h, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(h, h.T, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(h, fd_jacobian(cg.grad(f), (x,)), rtol=1e-6, atol=1e-6)


class CountingRecompute(Recompute):
    """Recompute, counting the iterations it restores: proves the strategy was used."""

    restores = 0

    def restore(self, run: Any, record: Any, t: int) -> None:
        CountingRecompute.restores += 1
        super().restore(run, record, t)


STRATEGIES = (StoreAll(), Recompute(), EveryK(1), EveryK(3), Binomial(1), Binomial(3),
              Online(1), Online(3), CountingRecompute())


def test_hessian_through_data_dependent_while_is_the_same_under_every_strategy() -> None:
    def f(x):
        def body(c):
            k, y = c
            return k + 1, y * cnp.cos(y) + x
        trips = cnp.floor(cnp.sum(x * x) * 4.0) + 2.0       # 4 steps at the x below
        return cnp.sum(cg.while_loop(lambda c: c[0] < trips, body, (0.0, x))[1] ** 2)

    x = np.array([0.5, -0.3, 0.45])
    CountingRecompute.restores = 0
    hessians = [cg.hessian(f, checkpoint=s)(x) for s in STRATEGIES]
    assert CountingRecompute.restores > 0
    for s, h in zip(STRATEGIES, hessians):
        assert np.array_equal(h, hessians[0]), f"{s!r} differs from StoreAll"
    np.testing.assert_allclose(hessians[0], fd_jacobian(cg.grad(f), (x,)), rtol=1e-6,
                               atol=1e-6)
    jacobians = [cg.jacrev(cg.grad(f), checkpoint=s)(x) for s in STRATEGIES[:4]]
    assert all(np.array_equal(j, jacobians[0]) for j in jacobians)


def test_hessian_through_custom_rules() -> None:
    """A custom rule's derivative is differentiated as ordinary code (api.md,
    Higher-order derivatives): the Hessians are those of the functions the rules define."""
    @cg.custom_vjp
    def double_tanh(x):
        return cnp.tanh(x) * 2.0

    def fwd(x):
        y = cnp.tanh(x)
        return y * 2.0, y

    double_tanh.defvjp(fwd, lambda y, ct: (ct * 2.0 * (1 - y * y),))

    @cg.custom_jvp
    def softplus(x):
        return cnp.log1p(cnp.exp(x))

    softplus.defjvp(lambda p, t: (softplus(p[0]), t[0] * cnp.sigmoid(p[0])))

    x = np.array([0.3, -0.8])
    t, s = np.tanh(x), 1 / (1 + np.exp(-x))  # d²(4 tanh²)/dx², d²(softplus³)/dx²
    sp = np.log1p(np.exp(x))
    np.testing.assert_allclose(cg.hessian(lambda x: cnp.sum(double_tanh(x) ** 2))(x),
                               np.diag(8 * (1 - t ** 2) * (1 - 3 * t ** 2)), rtol=1e-12)
    np.testing.assert_allclose(cg.hessian(lambda x: cnp.sum(softplus(x) ** 3))(x),
                               np.diag(6 * sp * s ** 2 + 3 * sp ** 2 * s * (1 - s)),
                               rtol=1e-12)


# ---------------------------------------------------------------------------------
# Inside a trace
# ---------------------------------------------------------------------------------


@pytest.mark.parametrize("jacobian", JACOBIANS, ids=lambda j: j.__name__)
def test_grad_of_a_function_of_a_jacobian(jacobian: Callable) -> None:
    def f(x, w):
        return fori_with_cond(x) * w

    def loss(x, w):
        return cnp.sum(jacobian(f, argnums=(0, 1))(x, w)[0] ** 2)

    x, w = np.array([0.6, 1.3, 0.9]), 1.5
    g = cg.grad(loss, argnums=(0, 1))(x, w)
    assert_trees_close(g, fd_jacobian(loss, (x, w), (0, 1)), rtol=1e-5, atol=1e-6)


def test_jacrev_inside_a_loop_body() -> None:
    def g(y):
        return cnp.sin(y) * y[::-1]

    def f(x):
        def body(c):
            k, y = c
            return k + 1, y - 0.1 * (cg.jacrev(g)(y) @ y) + 0.01 * x
        return cg.while_loop(lambda c: c[0] < 3, body, (0, x))[1]

    x = np.array([0.4, 0.9])
    np.testing.assert_allclose(cg.jacrev(f)(x), fd_jacobian(f, (x,)), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(cg.jacfwd(f)(x), cg.jacrev(f)(x), rtol=1e-13, atol=1e-15)


# ---------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------


@pytest.mark.parametrize("transform", [cg.jacfwd, cg.jacrev, cg.hessian],
                         ids=lambda t: t.__name__)
def test_integer_inputs_are_refused_by_name(transform: Callable) -> None:
    def scale(x, n):
        return x * n

    with pytest.raises(cg.ArgumentTypeError,
                       match=rf"cfgrad\.{transform.__name__} of scale with respect to "
                             r"argument 1: it has dtype int64 .*float inputs"):
        transform(scale, argnums=(0, 1))(2.0, 3)
    with pytest.raises(TypeError, match="dtype bool"):
        transform(scale)(np.array([True, False]), 2.0)
    assert np.shape(transform(scale)(np.ones(2), 3)) == ((2, 2) if transform is not cg.hessian
                                                         else (2, 2, 2))


def test_jacrev_refuses_integer_outputs() -> None:
    with pytest.raises(cg.ArgumentTypeError, match=r"output leaf 1 has dtype int64.*aux"):
        cg.jacrev(lambda x: (x, cnp.astype(x, np.int64)))(np.ones(2))


@pytest.mark.parametrize("transform", [cg.jacfwd, cg.jacrev, cg.hessian],
                         ids=lambda t: t.__name__)
def test_argument_errors(transform: Callable) -> None:
    def f(x):
        return x * x

    name = transform.__name__
    with pytest.raises(cg.ArgumentTypeError, match="must return a pair"):
        transform(f, has_aux=True)(1.0)
    with pytest.raises(cg.ArgumentValueError, match=rf"cfgrad\.{name} of f: argnums includes 1"):
        transform(f, argnums=1)(1.0)
    with pytest.raises(cg.ArgumentTypeError, match="argnums must be an int"):
        transform(f, argnums=1.0)
    if transform is not cg.jacfwd:
        with pytest.raises(cg.ArgumentValueError, match="checkpoint="):
            transform(f, checkpoint=Binomial)


def test_returned_functions_are_named() -> None:
    def f(x):
        return x

    assert [t(f).__name__ for t in (cg.jacfwd, cg.jacrev, cg.hessian)] == [
        "jacfwd(f)", "jacrev(f)", "hessian(f)"]
