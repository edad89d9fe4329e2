"""Examples for the linalg family: cnp.linalg and the top-level contractions (einsum,
tensordot, dot, inner, outer, kron, convolve, correlate, cross, trace, vecdot, matvec,
vecmat, matmul). Matrices are seeded random and well conditioned (a shifted diagonal,
symmetric positive definite ones for cholesky/eigh), with distinct eigen- and singular
values, so the derivatives exist and central differences see them."""

import numpy as np

rng = np.random.default_rng(13)


def normal(*shape):
    return rng.normal(size=shape)


def well(n, *batch):
    """Random n×n matrices, diagonally shifted: condition numbers of a few units."""
    return normal(*batch, n, n) + 4.0 * np.eye(n)


def spd(n, *batch):
    x = normal(*batch, n, n)
    return x @ np.swapaxes(x, -1, -2) + n * np.eye(n)


INT_MATRIX = np.array([[2, 1, 0], [1, 3, 1], [0, 1, 4]])
INT_VECTOR = np.array([1, -2, 3, 4])


def jax_lstsq(a, b, rcond=None):
    """JAX's lstsq: numpy's, with the residuals always present."""
    x, _, rank, s = np.linalg.lstsq(a, b, rcond=rcond)
    column = b.reshape(len(b), -1)
    return x, np.sum((column - a @ x.reshape(a.shape[1], -1)) ** 2, axis=0), rank, s


def jax_pinv(a, rtol=None):
    m, n = a.shape[-2:]
    rtol = 10.0 * max(m, n) * np.finfo(a.dtype).eps if rtol is None else rtol
    return np.linalg.pinv(a, rtol=rtol)


ROTATING = np.array([[1.0, -2.0], [1.0, 0.5]])  # eigenvalues 0.75 ± 1.56i


def jax_eig(a):
    """JAX's eig: numpy's, always complex (numpy's is real when every eigenvalue is)."""
    w, v = np.linalg.eig(a)
    dtype = np.result_type(a.dtype, np.complex64)
    return w.astype(dtype), v.astype(dtype)


def jax_eigvals(a):
    return jax_eig(a)[0]


EXAMPLES = {
    # -- contractions ---------------------------------------------------------------------
    "einsum": [
        dict(args=("ij,jk->ik", normal(3, 4), normal(4, 2))),
        dict(args=("ij,jk", normal(3, 4), normal(4, 2))),  # implicit output
        dict(args=("...ij,...jk->...ik", normal(2, 3, 4), normal(4, 5))),  # batched
        dict(args=("bij,bjk->bik", normal(2, 3, 4), normal(2, 4, 2))),
        dict(args=("ii->i", normal(3, 3))),  # diagonal
        dict(args=("ii", normal(3, 3))),  # trace
        dict(args=("ij->", normal(3, 4))),
        dict(args=("i,i,i->", normal(4), normal(4), normal(4))),  # three operands
        dict(args=("ij,jk,kl->il", normal(2, 3), normal(3, 4), normal(4, 2)),
             kwargs=dict(optimize=True)),
        dict(args=("i,j->ij", normal(3), normal(2))),
        dict(args=("...i,...i", normal(2, 1, 3), normal(4, 3))),  # broadcast ellipsis
        dict(args=("ij,jk", INT_MATRIX, INT_MATRIX)),
        dict(args=("ji", normal(2, 3))),  # implicit output sorts: a transpose
    ],
    "tensordot": [
        dict(args=(normal(3, 4, 5), normal(4, 5, 2))),
        dict(args=(normal(3, 4, 5), normal(5, 4, 2)), kwargs=dict(axes=([1, 2], [1, 0]))),
        dict(args=(normal(3, 4), normal(4, 2)), kwargs=dict(axes=1)),
        dict(args=(normal(3, 4), normal(2, 5)), kwargs=dict(axes=0)),
        dict(args=(normal(2, 3), normal(3, 2)), kwargs=dict(axes=(1, 0))),
        dict(args=(INT_MATRIX, INT_MATRIX), kwargs=dict(axes=1)),
    ],
    "dot": [
        dict(args=(normal(3), normal(3))),
        dict(args=(normal(2, 3), normal(3, 4))),
        dict(args=(normal(2, 3), normal(3))),
        dict(args=(normal(3), normal(3, 2))),
        dict(args=(normal(2, 3, 4), normal(5, 4, 2))),  # N-D: a's last with b's -2
        dict(args=(normal(2, 3, 4), normal(4))),
        dict(args=(normal(4), normal(2, 4, 3))),
        dict(args=(2.5, normal(3))),
        dict(args=(INT_MATRIX, INT_MATRIX)),
    ],
    "inner": [
        dict(args=(normal(3), normal(3))),
        dict(args=(normal(2, 3), normal(4, 3))),  # contracts the last axes
        dict(args=(normal(2, 2, 3), normal(3))),
        dict(args=(normal(3), 1.5)),
        dict(args=(INT_VECTOR, INT_VECTOR)),
    ],
    "outer": [
        dict(args=(normal(3), normal(4))),
        dict(args=(normal(2, 2), normal(3))),  # flattens
        dict(args=(INT_VECTOR, INT_VECTOR)),
    ],
    "matmul": [
        dict(args=(normal(3, 4), normal(4, 2))),
        dict(args=(normal(2, 1, 3, 4), normal(3, 4, 2))),  # broadcast batches
        dict(args=(normal(4), normal(2, 4, 3))),
        dict(args=(normal(2, 3, 4), normal(4))),
        dict(args=(INT_MATRIX, INT_MATRIX)),
    ],
    "kron": [
        dict(args=(normal(2, 3), normal(3, 2))),
        dict(args=(normal(3), normal(2, 2))),  # different ndim
        dict(args=(normal(2), normal(3))),
        dict(args=(INT_MATRIX, np.eye(2, dtype=np.int64))),
    ],
    "convolve": [
        dict(args=(normal(6), normal(3))),
        dict(args=(normal(6), normal(4)), kwargs=dict(mode="same")),
        dict(args=(normal(6), normal(4)), kwargs=dict(mode="valid")),
        dict(args=(normal(3), normal(5)), kwargs=dict(mode="same")),  # v longer
        dict(args=(normal(2), normal(5)), kwargs=dict(mode="valid")),
        dict(args=(normal(4), normal(1))),
        dict(args=(INT_VECTOR, np.array([1, 0, -1]))),
    ],
    "correlate": [
        dict(args=(normal(6), normal(3))),
        dict(args=(normal(6), normal(4)), kwargs=dict(mode="same")),
        dict(args=(normal(6), normal(4)), kwargs=dict(mode="full")),
        dict(args=(normal(4), normal(6)), kwargs=dict(mode="same")),  # v longer
        dict(args=(normal(2), normal(5)), kwargs=dict(mode="full")),
        dict(args=(INT_VECTOR, np.array([1, 2])), kwargs=dict(mode="same")),
    ],
    "cross": [
        dict(args=(normal(3), normal(3))),
        dict(args=(normal(4, 3), normal(3))),  # broadcast
        dict(args=(normal(3, 4), normal(3, 4)), kwargs=dict(axisa=0, axisb=0)),
        dict(args=(normal(3, 4), normal(4, 3)), kwargs=dict(axisa=0, axisc=0)),
        dict(args=(normal(2, 3, 2), normal(2, 3, 2)), kwargs=dict(axis=1)),
        dict(args=(np.array([1, 2, 3]), np.array([4, 5, 7]))),
    ],
    "trace": [
        dict(args=(normal(3, 3),)),
        dict(args=(normal(3, 4),), kwargs=dict(offset=1)),
        dict(args=(normal(4, 3),), kwargs=dict(offset=-2)),
        dict(args=(normal(2, 3, 3),), kwargs=dict(axis1=1, axis2=2)),
        dict(args=(normal(3, 2, 3),), kwargs=dict(axis1=0, axis2=-1, offset=1)),
        dict(args=(INT_MATRIX,)),
    ],
    "vecdot": [
        dict(args=(normal(3), normal(3))),
        dict(args=(normal(2, 3), normal(4, 1, 3))),
        dict(args=(normal(3, 2), normal(3, 2)), kwargs=dict(axis=0)),
        dict(args=(INT_VECTOR, INT_VECTOR)),
    ],
    "matvec": [
        dict(args=(normal(3, 4), normal(4))),
        dict(args=(normal(2, 3, 4), normal(5, 1, 4))),
        dict(args=(INT_MATRIX, np.array([1, 0, 2]))),
    ],
    "vecmat": [
        dict(args=(normal(3), normal(3, 4))),
        dict(args=(normal(2, 1, 3), normal(5, 3, 4))),
        dict(args=(np.array([1, 0, 2]), INT_MATRIX)),
    ],
    # -- solving and inverting -----------------------------------------------------------------
    "linalg.solve": [
        dict(args=(well(3), normal(3))),
        dict(args=(well(3), normal(3, 2))),
        dict(args=(well(3, 2), normal(2, 3, 2))),  # stacked
        dict(args=(well(3, 2), normal(3))),  # one vector for every matrix
        dict(args=(well(3, 2), normal(3, 1))),  # a batch-free matrix broadcast
        dict(args=(INT_MATRIX, np.array([1, 2, 3]))),
    ],
    "linalg.inv": [
        dict(args=(well(3),)),
        dict(args=(well(2, 4),)),
        dict(args=(INT_MATRIX,)),
    ],
    "linalg.pinv": [
        dict(args=(normal(4, 3),), reference=jax_pinv),
        dict(args=(normal(3, 5),), reference=jax_pinv),
        dict(args=(normal(2, 4, 3),), reference=jax_pinv),
        dict(args=(well(3),), reference=jax_pinv),
        dict(args=(normal(4, 3),), kwargs=dict(rtol=1e-3), reference=jax_pinv),
    ],
    "linalg.lstsq": [
        dict(args=(normal(5, 3), normal(5, 2))),  # numpy's residuals agree here
        dict(args=(normal(5, 3), normal(5)), reference=jax_lstsq),
        dict(args=(normal(3, 5), normal(3)), reference=jax_lstsq),  # underdetermined
        dict(args=(normal(4, 4), normal(4, 2)), kwargs=dict(rcond=1e-8), reference=jax_lstsq),
    ],
    "linalg.tensorinv": [
        dict(args=(well(6).reshape(6, 2, 3),), kwargs=dict(ind=1)),
        dict(args=(well(4).reshape(2, 2, 2, 2),)),
    ],
    "linalg.tensorsolve": [
        dict(args=(well(6).reshape(2, 3, 6), normal(2, 3))),
        dict(args=(well(6).reshape(6, 2, 3).transpose(1, 0, 2), normal(2, 3)),
             kwargs=dict(axes=(1,))),
    ],
    "linalg.matrix_power": [
        dict(args=(well(3), 3), traced=(0,)),
        dict(args=(well(3, 2), 5), traced=(0,)),  # stacked
        dict(args=(well(3), -2), traced=(0,)),
        dict(args=(well(3), 0), traced=(0,)),
        dict(args=(well(3), 1), traced=(0,)),
        dict(args=(INT_MATRIX, 3), traced=(0,)),
    ],
    "linalg.multi_dot": [
        dict(args=([well(3), normal(3, 3), normal(3, 3), normal(3, 3)],), traced=(0,)),
        dict(args=([normal(2, 3), normal(3, 4), normal(4, 2)],), traced=()),
        dict(args=([normal(3), normal(3, 4), normal(4)],), traced=()),
        dict(args=([normal(3), normal(3, 4)],), traced=()),
    ],
    # -- factorizations ----------------------------------------------------------------
    "linalg.cholesky": [
        dict(args=(spd(3),)),
        dict(args=(spd(3, 2),)),  # stacked
        dict(args=(spd(4),), kwargs=dict(upper=True)),
    ],
    "linalg.eigh": [
        dict(args=(spd(3),)),
        dict(args=(spd(3, 2),)),
        dict(args=(spd(4),), kwargs=dict(UPLO="U")),
    ],
    "linalg.eigvalsh": [
        dict(args=(spd(3),)),
        dict(args=(spd(4, 2),)),
    ],
    "linalg.svd": [
        dict(args=(normal(3, 3),)),
        dict(args=(normal(2, 3, 3),)),
        dict(args=(normal(4, 3),), kwargs=dict(full_matrices=False)),
        dict(args=(normal(2, 3, 5),), kwargs=dict(full_matrices=False)),
        dict(args=(normal(4, 3),), kwargs=dict(compute_uv=False)),
        # complete factors of a non-square matrix: no derivative (as JAX), so values only,
        # and the walker's traced call (a cg.vjp) would build one
        dict(args=(normal(4, 3),), traced=(), grad=False),
    ],
    "linalg.svdvals": [
        dict(args=(normal(4, 3),)),
        dict(args=(normal(2, 3, 5),)),
    ],
    "linalg.qr": [
        dict(args=(normal(4, 3),)),
        dict(args=(normal(2, 3, 3),)),
        dict(args=(normal(3, 3),), kwargs=dict(mode="complete")),
        dict(args=(normal(5, 3),), kwargs=dict(mode="r")),
        dict(args=(normal(3, 5),)),  # wide
        dict(args=(normal(2, 2, 4),), kwargs=dict(mode="complete")),
        dict(args=(normal(4, 3),), kwargs=dict(mode="complete"), traced=(), grad=False),
    ],
    "linalg.det": [
        dict(args=(well(3),)),
        dict(args=(well(2, 3),)),
        dict(args=(normal(1, 1),)),
        dict(args=(INT_MATRIX,)),
    ],
    "linalg.slogdet": [
        dict(args=(well(3),)),
        dict(args=(-well(3, 2),)),
        dict(args=(INT_MATRIX,)),
    ],
    "linalg.matrix_rank": [
        dict(args=(normal(4, 3),)),
        dict(args=(normal(4, 2) @ normal(2, 3),)),  # rank 2
        dict(args=(np.stack([normal(3, 3), np.zeros((3, 3))]),)),
        dict(args=(normal(4, 1) @ normal(1, 4),), kwargs=dict(tol=1e-6)),
        dict(args=(normal(4, 2) @ normal(2, 4),), kwargs=dict(rtol=1e-6)),
        dict(args=(normal(3),)),
        dict(args=(INT_MATRIX,)),
    ],
    # -- norms --------------------------------------------------------------------------
    "linalg.norm": [
        dict(args=(normal(5),)),
        dict(args=(normal(2, 3, 4),)),  # flattened
        dict(args=(normal(3, 4),), kwargs=dict(ord="fro")),
        dict(args=(normal(3, 4),), kwargs=dict(ord="nuc")),
        dict(args=(normal(3, 4),), kwargs=dict(ord=2)),
        dict(args=(normal(3, 4),), kwargs=dict(ord=-2)),
        dict(args=(normal(3, 4),), kwargs=dict(ord=1)),
        dict(args=(normal(3, 4),), kwargs=dict(ord=-1)),
        dict(args=(normal(3, 4),), kwargs=dict(ord=np.inf)),
        dict(args=(normal(3, 4),), kwargs=dict(ord=-np.inf)),
        dict(args=(normal(5),), kwargs=dict(ord=1)),
        dict(args=(normal(5),), kwargs=dict(ord=3)),
        dict(args=(normal(5),), kwargs=dict(ord=-np.inf)),
        dict(args=(normal(5),), kwargs=dict(ord=0), grad=False),
        dict(args=(normal(3, 4),), kwargs=dict(axis=1)),
        dict(args=(normal(3, 4),), kwargs=dict(axis=0, keepdims=True)),
        dict(args=(normal(2, 3, 4),), kwargs=dict(axis=(0, 2), ord=1, keepdims=True)),
        dict(args=(normal(2, 3, 4),), kwargs=dict(axis=(2, 1), ord="nuc")),
        dict(args=(normal(2, 3, 4),), kwargs=dict(axis=(1, 2), ord=2, keepdims=True)),
        dict(args=(np.zeros(3),), grad=False),  # value 0; gradient 0 (not FD's)
        dict(args=(INT_VECTOR,)),
    ],
    "linalg.vector_norm": [
        dict(args=(normal(5),)),
        dict(args=(normal(2, 3),)),  # all axes: one vector
        dict(args=(normal(2, 3),), kwargs=dict(axis=1, keepdims=True)),
        dict(args=(normal(2, 3, 4),), kwargs=dict(axis=(0, 2), ord=1)),
        dict(args=(normal(4),), kwargs=dict(ord=np.inf)),
        dict(args=(normal(4),), kwargs=dict(ord=-1)),
        dict(args=(normal(4),), kwargs=dict(ord=0.5)),
    ],
    "linalg.matrix_norm": [
        dict(args=(normal(3, 4),)),
        dict(args=(normal(2, 3, 4),), kwargs=dict(ord="nuc")),
        dict(args=(normal(2, 3, 4),), kwargs=dict(ord=np.inf, keepdims=True)),
        dict(args=(normal(3, 4),), kwargs=dict(ord=-2)),
    ],
    "linalg.cond": [
        dict(args=(well(3),)),
        dict(args=(well(3, 2),)),
        dict(args=(normal(4, 3),)),
        dict(args=(well(3),), kwargs=dict(p=-2)),
        dict(args=(well(3),), kwargs=dict(p="fro")),
        dict(args=(well(3),), kwargs=dict(p=1)),
        dict(args=(well(3),), kwargs=dict(p=-np.inf)),
    ],
    # -- numpy 2's array-API names ------------------------------------------------------
    "linalg.matmul": [
        dict(args=(normal(3, 4), normal(4, 2))),
        dict(args=(normal(2, 3, 4), normal(4))),
    ],
    "linalg.matrix_transpose": [
        dict(args=(normal(3, 4),)),
        dict(args=(normal(2, 3, 4),)),
    ],
    "linalg.diagonal": [
        dict(args=(normal(3, 3),)),
        dict(args=(normal(2, 3, 4),), kwargs=dict(offset=1)),
        dict(args=(normal(4, 3),), kwargs=dict(offset=-1)),
    ],
    "linalg.trace": [
        dict(args=(normal(3, 3),)),
        dict(args=(normal(2, 3, 4),), kwargs=dict(offset=1)),
        dict(args=(INT_MATRIX,)),
    ],
    "linalg.outer": [
        dict(args=(normal(3), normal(2))),
        dict(args=(INT_VECTOR, INT_VECTOR)),
    ],
    "linalg.cross": [
        dict(args=(normal(3), normal(3))),
        dict(args=(normal(2, 3), normal(3))),
        dict(args=(normal(3, 2), normal(3, 2)), kwargs=dict(axis=0)),
    ],
    "linalg.tensordot": [
        dict(args=(normal(3, 4, 5), normal(4, 5, 2))),
        dict(args=(normal(3, 4), normal(4, 2)), kwargs=dict(axes=1)),
    ],
    "linalg.vecdot": [
        dict(args=(normal(2, 3), normal(3))),
        dict(args=(normal(3, 2), normal(3, 2)), kwargs=dict(axis=0)),
    ],
    # -- eig and eigvals: complex results (drawn last, so the data above stays as it was) --
    "linalg.eig": [
        dict(args=(spd(3),), reference=jax_eig),  # real spectrum: numpy's arrays are real
        # LAPACK takes another path for a triangular matrix than for a perturbed one: the
        # eigenvectors' signs differ there, so values only (as the triangular eigvals
        # example below; tests/primitives/test_linalg.py checks the derivatives against
        # closed forms)
        dict(args=(np.array([[2.0, 1.0], [0.0, 3.0]]),), reference=jax_eig, grad=False),
        dict(args=(ROTATING,), reference=jax_eig),  # a conjugate pair
        dict(args=(well(3),), reference=jax_eig),
        dict(args=(well(3, 2),), reference=jax_eig),
        dict(args=(normal(3, 3) + 1j * normal(3, 3),), reference=jax_eig),
        dict(args=(INT_MATRIX,), reference=jax_eig),
    ],
    "linalg.eigvals": [
        dict(args=(spd(3),), reference=jax_eigvals),
        # LAPACK reads a triangular matrix's eigenvalues off the diagonal in order, but
        # orders a perturbed one's as its QR iteration finds them: central differences
        # would see a permutation, so values only (tests/primitives/test_linalg.py checks the
        # derivatives at a triangular matrix against the closed form)
        dict(args=(np.triu(well(3, 2)),), reference=jax_eigvals, grad=False),
        dict(args=(ROTATING,), reference=jax_eigvals),
        dict(args=(well(4),), reference=jax_eigvals),
        dict(args=(normal(3, 3) + 1j * normal(3, 3),), reference=jax_eigvals),
        dict(args=(INT_MATRIX,), reference=jax_eigvals),
    ],
}
