"""cnp.linalg beyond the example walker (tests/numpy_cases/linalg.py): the conventions
docs/api.md states (norm's gradient at 0, NaN Cholesky factors, refused derivatives of
complete factors), eig/eigvals on concrete arrays while complex dtypes cannot be traced,
and second derivatives through the factorizations' rules (which are written with
primitives, so they differentiate again)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad.testing import check_grads

rng = np.random.default_rng(7)
WELL = rng.normal(size=(3, 3)) + 4.0 * np.eye(3)
X = rng.normal(size=(3, 3))
SPD = X @ X.T + 3.0 * np.eye(3)


def _pending_complex_examples() -> dict:
    path = Path(__file__).parent / "numpy_cases" / "linalg.py"
    spec = importlib.util.spec_from_file_location("numpy_cases_linalg_pending", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.COMPLEX_PENDING


@pytest.mark.parametrize("name", ["eig", "eigvals"])
def test_eig_and_eigvals_compute_numpys_values_on_concrete_arrays(name):
    examples = _pending_complex_examples()[f"linalg.{name}"]
    for args in [e["args"] for e in examples] + [(WELL,), (np.array([[0.0, -1.0],
                                                                   [1.0, 0.0]]),)]:
        got, want = getattr(cnp.linalg, name)(*args), getattr(np.linalg, name)(*args)
        for g, w in zip(got if name == "eig" else (got,), want if name == "eig" else (want,)):
            np.testing.assert_allclose(g, w, rtol=1e-12)


@pytest.mark.parametrize("name", ["eig", "eigvals"])
def test_traced_eig_is_a_clear_error(name):
    with pytest.raises(cg.LoweringError, match="complex"):
        cg.lower(getattr(cnp.linalg, name), WELL)


@pytest.mark.parametrize("norm", [
    cnp.linalg.norm, cnp.linalg.vector_norm, lambda x: cnp.linalg.norm(x, 3),
    lambda x: cnp.linalg.matrix_norm(cnp.reshape(x, (2, 2))), lambda x: cnp.linalg.norm(
        cnp.reshape(x, (2, 2)), "fro")])
def test_norm_gradient_at_zero_is_zero(norm):
    x = np.zeros(4)
    assert norm(x) == 0.0
    np.testing.assert_array_equal(cg.grad(norm)(x), np.zeros(4))
    _, tangent = cg.jvp(norm, (x,), (np.ones(4),))
    assert tangent == 0.0


def test_cholesky_of_an_indefinite_matrix_is_nan_as_jax():
    bad = np.array([[1.0, 2.0], [2.0, 1.0]])
    assert np.isnan(cnp.linalg.cholesky(bad)).all()
    stacked = cnp.linalg.cholesky(np.stack([bad, SPD[:2, :2]]))
    assert np.isnan(stacked[0]).all()
    np.testing.assert_allclose(stacked[1], np.linalg.cholesky(SPD[:2, :2]))


def test_cholesky_and_eigh_symmetrize_their_input():
    """As JAX: (A + A^T) / 2 is factored, so the gradient is symmetric."""
    lower_only = np.tril(SPD) + np.triu(rng.normal(size=(3, 3)), 1)
    np.testing.assert_allclose(cnp.linalg.cholesky(lower_only),
                               np.linalg.cholesky((lower_only + lower_only.T) / 2))
    g = cg.grad(lambda a: cnp.sum(cnp.linalg.cholesky(a)))(lower_only)
    np.testing.assert_allclose(g, g.T, rtol=1e-12)
    g = cg.grad(lambda a: cnp.linalg.eigvalsh(a)[0])(lower_only)
    np.testing.assert_allclose(g, g.T, rtol=1e-12)


@pytest.mark.parametrize("f", [
    lambda a: cnp.sum(cnp.linalg.svd(a)[0]),
    lambda a: cnp.sum(cnp.linalg.qr(a, "complete")[0]),
])
def test_derivatives_of_complete_factors_of_non_square_matrices_are_refused(f):
    a = rng.normal(size=(4, 3))
    f(a)  # the values are fine
    with pytest.raises(cg.LoweringError, match="complete factors of a non-square"):
        cg.grad(f)(a)


def test_singular_values_of_complete_factors_still_differentiate():
    a = rng.normal(size=(4, 3))
    check_grads(lambda a: cnp.linalg.svd(a, compute_uv=False), (a,), modes=("fwd", "rev"))


@pytest.mark.parametrize("f, a", [
    (lambda a: cnp.linalg.slogdet(a)[1], WELL),
    (cnp.linalg.det, WELL),
    (lambda a: cnp.sum(cnp.linalg.inv(a) ** 2), WELL),
    (lambda a: cnp.sum(cnp.linalg.cholesky(a) ** 3), SPD),
    (lambda a: cnp.linalg.eigh(a)[1][0, 0] * cnp.linalg.eigvalsh(a)[2], SPD),
    (lambda a: cnp.sum(cnp.linalg.svd(a, full_matrices=False)[0] ** 3) + cnp.linalg.norm(
        a, "nuc"), rng.normal(size=(4, 3))),
    (lambda a: cnp.sum(cnp.linalg.qr(a)[0] * cnp.linalg.qr(a)[1][0]), rng.normal(size=(4, 3))),
    (lambda a: cnp.sum(cnp.linalg.pinv(a) ** 2), rng.normal(size=(3, 4))),
    (lambda a: cnp.sum(cnp.einsum("ij,jk,kk->i", a, a, a) ** 2), X),
])
def test_second_derivatives_through_the_rules(f, a):
    check_grads(f, (a,), order=2, modes=("fwd", "rev"))


def test_rank_of_a_traced_matrix_is_an_integer_without_derivative():
    a = rng.normal(size=(4, 2)) @ rng.normal(size=(2, 3))

    def f(a):
        return cnp.linalg.matrix_rank(a) * cnp.sum(a)

    value, g = cg.value_and_grad(f)(a)
    assert value == pytest.approx(2 * a.sum())
    np.testing.assert_allclose(g, np.full(a.shape, 2.0))


def test_numpy_linalg_on_traced_values_dispatches_to_cnp_linalg():
    """np.linalg.trace(x) is cnp.linalg.trace (the last two axes), not cnp.trace (the
    first two), though both are named trace."""
    a = rng.normal(size=(2, 3, 3)) + 4.0 * np.eye(3)

    def f(a):
        return (np.linalg.trace(a), np.trace(a), np.linalg.norm(a),
                np.linalg.solve(a, np.ones(3)), np.linalg.slogdet(a)[1])

    traced, _ = cg.vjp(f, a)
    for got, want in zip(traced, f(a)):
        np.testing.assert_allclose(got, want, rtol=1e-12)
