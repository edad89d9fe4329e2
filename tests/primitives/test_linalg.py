"""cnp.linalg beyond the example walker (tests/primitives/numpy_cases/linalg.py): the conventions
docs/api.md states (norm's gradient at 0, NaN Cholesky factors, refused derivatives of
complete factors), eig's derivatives against closed forms (at a triangular matrix, where
central differences of LAPACK's results are unreliable), and second derivatives through
the factorizations' rules (which are written with primitives, so they differentiate
again)."""

from __future__ import annotations

import numpy as np
import pytest

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad.testing import check_grads

rng = np.random.default_rng(7)
WELL = rng.normal(size=(3, 3)) + 4.0 * np.eye(3)
X = rng.normal(size=(3, 3))
SPD = X @ X.T + 3.0 * np.eye(3)


TRIANGULAR = np.array([[2.0, 0.5], [0.0, 3.0]])  # eigenvalues 2 and 3, read off the diagonal


def test_eigenvalue_gradients_of_a_triangular_matrix_are_the_closed_forms():
    """For A = [[a, b], [0, d]]: w = (a, d), dw1 = dA11 + b/(a - d) dA21 and dw2 = dA22 +
    b/(d - a) dA21 (left and right eigenvectors (1, b/(a - d)), (1, 0) and (0, 1),
    (b, d - a))."""
    (a, b), (_, d) = TRIANGULAR
    for k, want in enumerate([[[1.0, 0.0], [b / (a - d), 0.0]], [[0.0, 0.0], [b / (d - a), 1.0]]]):
        g = cg.grad(lambda m, k=k: cnp.real(cnp.linalg.eigvals(m)[k]))(TRIANGULAR)
        assert g.dtype == np.float64  # a real input's cotangent is real, as JAX's
        np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-15)
        g = cg.grad(lambda m, k=k: cnp.imag(cnp.linalg.eig(m)[0][k]))(TRIANGULAR)
        np.testing.assert_allclose(g, np.zeros((2, 2)), atol=1e-15)


def test_eigenvector_tangent_of_a_triangular_matrix_is_the_closed_form():
    """Along dA = dB E12 the matrix stays triangular and the second eigenvector is
    ±(b, d - a)/sqrt(b^2 + (d - a)^2): |v[0, 1]|^2 = b^2/(b^2 + (d - a)^2) has derivative
    2 b (d - a)^2/(b^2 + (d - a)^2)^2 in b; the first, (1, 0), does not move."""
    (a, b), (_, d) = TRIANGULAR
    tangent = np.array([[0.0, 1.0], [0.0, 0.0]])
    value, dv = cg.jvp(lambda m: cnp.abs(cnp.linalg.eig(m)[1]) ** 2, (TRIANGULAR,), (tangent,))
    gap = (d - a) ** 2
    np.testing.assert_allclose(value[:, 1], [b * b / (b * b + gap), gap / (b * b + gap)],
                               rtol=1e-12)
    np.testing.assert_allclose(dv, [[0.0, 2 * b * gap / (b * b + gap) ** 2],
                                    [0.0, -2 * b * gap / (b * b + gap) ** 2]], atol=1e-14)


def test_eigenvalue_sums_and_products_differentiate_as_traces_and_determinants():
    """sum(w^2) = tr(A^2): gradient 2 A^T, whose derivative along dA is 2 dA^T (a second
    derivative through eig's rules); prod(w) = det A: gradient det(A) A^{-T}."""
    def power_trace(m):
        return cnp.real(cnp.sum(cnp.linalg.eigvals(m) ** 2))

    np.testing.assert_allclose(cg.grad(power_trace)(WELL), 2.0 * WELL.T, rtol=1e-10)
    tangent = rng.normal(size=(3, 3))
    _, second = cg.jvp(cg.grad(power_trace), (WELL,), (tangent,))
    np.testing.assert_allclose(second, 2.0 * tangent.T, rtol=1e-9, atol=1e-12)
    g = cg.grad(lambda m: cnp.real(cnp.prod(cnp.linalg.eigvals(m))))(WELL)
    np.testing.assert_allclose(g, np.linalg.det(WELL) * np.linalg.inv(WELL).T, rtol=1e-10)


def test_eig_is_complex_at_the_inputs_precision_and_a_complex_input_has_a_complex_gradient():
    w, v = cnp.linalg.eig(WELL.astype(np.float32))
    assert (w.dtype, v.dtype) == (np.complex64, np.complex64)
    w, v = cg.vjp(lambda m: tuple(cnp.linalg.eig(m)), WELL)[0]
    assert (w.dtype, v.dtype) == (np.complex128, np.complex128)
    z = WELL + 1j * X
    g = cg.grad(lambda m: cnp.real(cnp.sum(cnp.linalg.eigvals(m) ** 2)))(z)
    np.testing.assert_allclose(g, 2.0 * z.T, rtol=1e-10)  # JAX's convention: the transpose
    check_grads(lambda m: cnp.abs(cnp.linalg.eig(m)[1]), (z,), order=2, modes=("fwd", "rev"))


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
    (lambda a: cnp.linalg.eig(a), WELL),
    (lambda a: cnp.abs(cnp.linalg.eig(a)[1]) ** 2 * cnp.linalg.eigvals(a), X + 1j * WELL),
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
