"""Linear algebra: `matmul`, `einsum`, and the LAPACK factorizations and solvers.

Compiled, matmul is np.dot and the factorizations are Numba's np.linalg, which call SciPy's
BLAS and LAPACK: the routines numpy calls (gesv, potrf, syevd, geev, gesdd, geqrf and
orgqr, getrf), so the results agree to the last bits (docs/jit.md says which were bitwise
where measured; tests/jit/test_jit_linalg.py checks them against numpy's). Numba's
np.linalg takes one matrix, not a stack, and raises `LinAlgError` where numpy answers (a
matrix with an inf or a NaN, where numpy gives LAPACK's NaNs; a Cholesky factor cfgrad
makes NaN): `cg.jit` then reruns the call in the interpreter (cfgrad/jitted.py), which
gives numpy's answer.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import LoweringError, Unsupported
from ..ir import TensorType
from .rules import (
    add_terms,
    bool_param,
    broadcast_shape,
    unbroadcast,
)
from .table import (
    Primitive,
    Source,
    bind,
    complex_dtype,
    register,
)


def _matmul_type(types: list[TensorType]) -> TensorType:
    a, b = types
    if a.ndim == 0 or b.ndim == 0:
        raise LoweringError(f"matmul: operands must be at least 1-D, got {a} and {b}")
    ka = a.shape[-1]
    kb = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if ka != kb:
        raise LoweringError(f"matmul: contracted dimensions differ: {a} @ {b}")
    batch = broadcast_shape([TensorType(a.shape[:-2], a.dtype), TensorType(b.shape[:-2], b.dtype)],
                       "matmul")
    shape = batch + (a.shape[-2:-1] if a.ndim > 1 else ()) + (b.shape[-1:] if b.ndim > 1 else ())
    return TensorType(tuple(shape), a.dtype)


def _swap_last(x):
    perm = tuple(range(len(x.shape) - 2)) + (len(x.shape) - 1, len(x.shape) - 2)
    return bind("transpose", x, axes=perm)


def _outer(u, v):
    return bind("reshape", u, shape=(u.shape[0], 1)) * bind("reshape", v, shape=(1, v.shape[0]))


def _matmul_vjp(ct, xs, out):
    a, b = xs
    if len(a.shape) == 1 and len(b.shape) == 1:
        return ct * b, ct * a
    # matrix-vector products (an RNN step) need no batch bookkeeping: an outer product
    # and one matmul with the transpose
    if len(a.shape) == 2 and len(b.shape) == 1:
        return _outer(ct, b), bind("matmul", _swap_last(a), ct)
    if len(a.shape) == 1 and len(b.shape) == 2:
        return bind("matmul", b, ct), _outer(a, ct)
    a2 = a if len(a.shape) > 1 else bind("reshape", a, shape=(1, a.shape[0]))
    b2 = b if len(b.shape) > 1 else bind("reshape", b, shape=(b.shape[0], 1))
    out2 = tuple(np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])) + (a2.shape[-2], b2.shape[-1])
    ct2 = bind("reshape", ct, shape=out2)
    da = unbroadcast(bind("matmul", ct2, _swap_last(b2)), a2.shape)
    db = unbroadcast(bind("matmul", _swap_last(a2), ct2), b2.shape)
    return bind("reshape", da, shape=a.shape), bind("reshape", db, shape=b.shape)


def _matmul_stack_source(args, types, out, const):
    """A stack of matrix products (an operand with batch axes): both operands as
    contiguous (batch, rows, columns) arrays (a vector a (1, 1, n) row or (1, n, 1)
    column), each output matrix the product of the pair numpy's broadcasting of the batch
    axes pairs (`K.matmul_stack`, index arrays worked out here)."""
    a, b = types
    if a.dtype.kind not in "fc":
        raise Unsupported(f"matmul of {a} and {b} (compiled: floats)")
    batch = out.shape[:out.ndim - (a.ndim > 1) - (b.ndim > 1)]
    count = int(np.prod(batch, dtype=np.int64))
    stacked, chosen = [], []
    for arg, t, vector in ((args[0], a, (1, 1) + a.shape), (args[1], b, (1,) + b.shape + (1,))):
        lead = t.shape[:-2]
        shape = vector if t.ndim == 1 else (int(np.prod(lead, dtype=np.int64)),) + t.shape[-2:]
        stacked.append(f"np.ascontiguousarray({arg}).reshape({shape})")
        which = np.arange(shape[0], dtype=np.int64).reshape(lead if t.ndim > 1 else ())
        chosen.append(const(np.broadcast_to(which, batch).reshape(count).copy()))
    products = f"K.matmul_stack({stacked[0]}, {stacked[1]}, {chosen[0]}, {chosen[1]})"
    return f"{products}.reshape({out.shape})"


def _matmul_source(args, types, out, const):
    a, b = types
    if a.ndim > 2 or b.ndim > 2:
        return _matmul_stack_source(args, types, out, const)
    if not (1 <= a.ndim <= 2 and 1 <= b.ndim <= 2) or a.dtype.kind not in "fc":
        raise Unsupported(f"matmul of {a} and {b} (compiled: vectors and matrices of floats)")
    return f"K.blas_product({args[0]}, {args[1]})"


register(Primitive(
    name="matmul", impl=np.matmul, abstract=_matmul_type, vjp=_matmul_vjp,
    jvp=lambda ts, xs, out: add_terms(
        None if ts[0] is None else bind("matmul", ts[0], xs[1]),
        None if ts[1] is None else bind("matmul", xs[0], ts[1])),
    family="linalg", operator="({0} @ {1})",
    notes="numpy matmul semantics, including 1-D operands and batch broadcasting",
    compiled=Source(_matmul_source, constants=True)))

# -- Linear algebra and contractions (issue 13, the linalg family): numpy's LAPACK kernels,
# each rule from a published derivation, written with primitives so adjoints are IR and
# differentiate again. Sources: M. Giles, "An extended collection of matrix derivative
# results for forward and reverse mode AD" (2008) for solve, det, slogdet, and (§3.1, with
# the tangent of LAPACK's normalization as JAX's lax.linalg.eig adds it) eig; I. Murray,
# "Differentiation of the Cholesky decomposition" (2016) and Seeger et al. (2017) for
# cholesky; J. Townsend, "Differentiating the singular value decomposition" (2016) for svd;
# the eigh, qr and pinv (Golub and Pereyra 1973) rules as JAX states them. Matrices are the
# last two axes; leading axes are a batch.


def _single_matrices(op: str, *types: TensorType, empty: bool = True) -> None:
    """Numba's np.linalg takes one matrix (numpy's loops over a stack of them); its SVD
    and QR refuse an empty one (`empty=False`), where numpy's return empty factors."""
    for t in types:
        if t.ndim != 2:
            raise Unsupported(f"{op} of a stack of matrices {t} (compiled: single matrices)")
        if not empty and 0 in t.shape:
            raise Unsupported(f"{op} of an empty matrix {t} (Numba's raises, numpy's returns "
                              "empty factors)")


def _numba_linalg(op: str) -> Source:
    """np.linalg.`op` of one matrix, Numba's (cfgrad/kernels.py's `K.op`)."""
    def write(args, types, out):
        _single_matrices(op, *types)
        return f"K.{op}({', '.join(args)})"

    return Source(write)


def _eye_like(x: Any, n: int) -> np.ndarray:
    """The n×n identity in x's dtype (a float64 eye would promote float32 rules)."""
    return np.eye(n, dtype=x.dtype)


def _mm(a: Any, b: Any) -> Any:
    return bind("matmul", a, b)


def _diag_of(x: Any) -> Any:
    """The diagonals of a stack of square matrices, (..., n, n) -> (..., n)."""
    return bind("sum", x * _eye_like(x, x.shape[-1]), axes=(len(x.shape) - 1,), keepdims=False)


def _as_diag(v: Any) -> Any:
    """(..., n) -> (..., n, n) with v on the diagonal."""
    n = v.shape[-1]
    return bind("reshape", v, shape=tuple(v.shape) + (1,)) * _eye_like(v, n)


def _row(v: Any) -> Any:
    """(..., n) -> (..., 1, n): scales the columns of a matrix it multiplies."""
    return bind("reshape", v, shape=tuple(v.shape[:-1]) + (1, v.shape[-1]))


def _col(v: Any) -> Any:
    """(..., n) -> (..., n, 1): scales the rows of a matrix it multiplies."""
    return bind("reshape", v, shape=tuple(v.shape) + (1,))


def _matrix_shape(op: str, t: TensorType) -> tuple[int, int]:
    """(rows, columns) of the matrices `t` is a stack of; an error for fewer than 2 axes."""
    if t.ndim < 2:
        raise LoweringError(f"{op}: needs a (stack of) matrices, got {t}")
    return t.shape[-2], t.shape[-1]


def _square(op: str, t: TensorType) -> int:
    if t.ndim < 2 or t.shape[-1] != t.shape[-2]:
        raise LoweringError(f"{op}: needs a (stack of) square matrices, got {t}")
    return t.shape[-1]


def _linalg_dtype(op: str, t: TensorType, complex_ok: bool = False) -> np.dtype:
    """LAPACK computes in float32 or float64 (inputs are promoted to floats first), and in
    complex64 or complex128 for the rules that hold for complex matrices too."""
    allowed = (np.float32, np.float64) + ((np.complex64, np.complex128) if complex_ok else ())
    if t.dtype not in allowed:
        kinds = "float32, float64, complex64 or complex128" if complex_ok else \
            "float32 or float64"
        raise LoweringError(f"{op}: needs {kinds} matrices, got {t}")
    return t.dtype


def _batch(op: str, *types: TensorType) -> tuple[int, ...]:
    return broadcast_shape([TensorType(t.shape[:-2], t.dtype) for t in types], op)


def _inverse_transpose(a: Any) -> Any:
    """A^{-T} of a stack of square matrices, as a solve (no inverse primitive)."""
    return bind("solve", _swap_last(a), _eye_like(a, a.shape[-1]))


def _trace_of_solve(a: Any, b: Any) -> Any:
    """tr(A^{-1} B) per matrix of the stack."""
    return bind("sum", _diag_of(bind("solve", a, b)), axes=(len(a.shape) - 2,),
                keepdims=False)


@functools.lru_cache(maxsize=512)
def _einsum_plan(subscripts: str, shapes: tuple) -> Any:
    """How np.einsum contracts operands of these shapes, decided once per signature:
    numpy's greedy order (pairwise, through BLAS where it can) for three or more operands
    or large ones, its plain loop (no planning overhead, ~10 µs) for small pairs."""
    if len(shapes) < 3 and max(int(np.prod(s, dtype=np.int64)) for s in shapes) < 4096:
        return False
    return np.einsum_path(subscripts, *(np.empty(s) for s in shapes), optimize="greedy")[0]


def _einsum_impl(*xs: np.ndarray, subscripts: str) -> np.ndarray:
    return np.einsum(subscripts, *xs, optimize=_einsum_plan(
        subscripts, tuple(x.shape for x in xs)))


def _einsum_parts(subscripts: str) -> tuple[list[str], str]:
    inputs, output = subscripts.split("->")
    return inputs.split(","), output


def _einsum_type(types: list[TensorType], subscripts: str) -> TensorType:
    """`subscripts` is explicit (`ij,jk->ik`: letters, no ellipsis, an output), as
    cnp.einsum normalizes it; each letter has one size."""
    if not isinstance(subscripts, str) or subscripts.count("->") != 1 or not all(
            c.isalpha() or c in ",->" for c in subscripts):
        raise LoweringError(f"einsum: parameter subscripts must be explicit letters "
                            f"('ij,jk->ik'), got {subscripts!r}")
    inputs, output = _einsum_parts(subscripts)
    if len(inputs) != len(types):
        raise LoweringError(f"einsum: {subscripts!r} names {len(inputs)} operands, the node "
                            f"has {len(types)}")
    sizes: dict[str, int] = {}
    for letters, t in zip(inputs, types):
        if len(letters) != t.ndim:
            raise LoweringError(f"einsum: {letters!r} does not fit an operand {t}")
        for c, d in zip(letters, t.shape):
            if sizes.setdefault(c, d) != d:
                raise LoweringError(f"einsum: index {c!r} has sizes {sizes[c]} and {d}")
    if len(set(output)) != len(output) or any(c not in sizes for c in output):
        raise LoweringError(f"einsum: output {output!r} repeats a letter or has one no "
                            "operand has")
    return TensorType(tuple(sizes[c] for c in output), types[-1].dtype)


def _einsum_vjp(ct, xs, out, subscripts):
    """The cotangent of operand i is the einsum of the output's cotangent with the other
    operands into operand i's indices; a letter operand i repeats (a diagonal) is renamed
    and joined to its first occurrence by an identity, and a letter only operand i has (a
    sum over it) comes back as a broadcast, by a ones vector."""
    inputs, output = _einsum_parts(subscripts)
    used = set(subscripts)
    free = iter(c for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                if c not in used)
    cts = []
    for i, (letters, x) in enumerate(zip(inputs, xs)):
        terms, operands = [output], [ct]
        for j, (other, y) in enumerate(zip(inputs, xs)):
            if j != i:
                terms.append(other)
                operands.append(y)
        present = set("".join(terms))
        target = []
        for c, d in zip(letters, x.shape):
            if c in target:  # a repeated letter: a fresh one, tied by an identity
                fresh = next(free)
                terms.append(c + fresh)
                operands.append(_eye_like(x, d))
                target.append(fresh)
                continue
            if c not in present:  # summed in operand i only: broadcast back
                terms.append(c)
                operands.append(np.ones(d, x.dtype))
                present.add(c)
            target.append(c)
        cts.append(bind("einsum", *operands, subscripts=",".join(terms) + "->" + "".join(target)))
    return tuple(cts)


def _contraction_source(picked: list[tuple[str, str]], result: str, sizes: dict[str, int],
                        const: Callable[[np.ndarray], str]) -> str:
    """One or two flat operands (letters, expression) contracted into `result`'s letters
    (`K.contract1`/`K.contract2`): the letters' sizes, the result's first, and the C-order
    strides per letter of each operand, then of the result (a letter an operand repeats
    gets the sum of its axes' strides: the diagonal)."""
    letters = list(dict.fromkeys(result + "".join(term for term, _ in picked)))
    terms = [term for term, _ in picked] + [result]
    strides = np.zeros((len(terms), len(letters)), np.int64)
    for row, term in enumerate(terms):
        step = 1
        for c in reversed(term):  # C order: the last axis has stride 1
            strides[row, letters.index(c)] += step
            step *= sizes[c]
    table = f"{const(np.array([sizes[c] for c in letters], np.int64))}, {const(strides)}"
    operands = ", ".join(expr for _, expr in picked)
    return f"K.contract{len(picked)}({operands}, {table}, {len(result)})"


# Above this many multiply-adds in one step a compiled einsum's loops are slower than numpy's
# einsum (measured: 200×200 matrices, 8e6 multiply-adds, 7.5 ms compiled, 0.22 ms numpy; a
# 200×200 elementwise product summed per row, 4e4, about even), so the program runs in the
# interpreter instead.
_EINSUM_LOOP_LIMIT = 100_000


def _einsum_source(args, types, out, subscripts, const):
    """Loops per contraction (`_contraction_source`), in the steps numpy's einsum takes
    (`_einsum_plan`: all operands at once, or pairwise along numpy's greedy path, each
    intermediate keeping the letters later steps or the output need)."""
    if out.dtype.kind == "b":
        raise Unsupported(f"einsum of booleans ({subscripts!r}; compiled: numbers)")
    inputs, output = _einsum_parts(subscripts)
    sizes = {c: d for term, t in zip(inputs, types) for c, d in zip(term, t.shape)}
    plan = _einsum_plan(subscripts, tuple(t.shape for t in types))
    steps = [tuple(range(len(inputs)))] if plan is False else [tuple(s) for s in plan[1:]]
    operands = [(term, f"np.full(1, {arg})" if t.shape == () else
                 f"np.ascontiguousarray({arg}).reshape(-1)")
                for term, arg, t in zip(inputs, args, types)]
    for step in steps:
        picked = [operands[i] for i in step]
        operands = [o for i, o in enumerate(operands) if i not in step]
        while picked:  # a step of more than two operands (numpy's, for scalars): pairwise
            pair, picked = picked[:2], picked[2:]
            needed = set(output).union(*(term for term, _ in picked + operands))
            result = output if not picked + operands else "".join(dict.fromkeys(
                c for term, _ in pair for c in term if c in needed))
            letters = set().union(*(term for term, _ in pair))
            work = math.prod(sizes[c] for c in letters)
            if work > _EINSUM_LOOP_LIMIT:
                raise Unsupported(
                    f"einsum {subscripts!r} of these shapes takes {work} multiply-adds in "
                    "one step, where numpy's einsum (vectorised, or BLAS) is faster than "
                    "compiled loops; for a matrix product write it with @ (cnp.matmul), "
                    "which compiles through BLAS")
            value = (result, _contraction_source(pair, result, sizes, const))
            if picked:
                picked.insert(0, value)
            else:
                operands.append(value)
    (_, value), = operands
    return f"{value}[0]" if out.shape == () else f"{value}.reshape({out.shape})"


def _einsum_jvp(ts, xs, out, subscripts):
    return add_terms(*(None if t is None else bind(
        "einsum", *xs[:i], t, *xs[i + 1:], subscripts=subscripts) for i, t in enumerate(ts)))


register(Primitive(
    name="einsum", impl=_einsum_impl, abstract=_einsum_type, vjp=_einsum_vjp,
    jvp=_einsum_jvp, family="linalg",
    compiled=Source(_einsum_source, constants=True),
    notes="numpy's einsum on explicit subscripts (cnp.einsum expands '...' and the implicit "
          "output); linear in each operand: the VJP of an operand is an einsum of the "
          "cotangent with the others", aliases=True))


def _solve_type(types: list[TensorType]) -> TensorType:
    a, b = types
    n = _square("solve", a)
    dtype = _linalg_dtype("solve", a, complex_ok=True)
    if b.ndim < 2 or b.shape[-2] != n:
        raise LoweringError(f"solve: the right-hand side {b} must be a (stack of) {n}×k "
                            f"matrices for {a}")
    return TensorType(_batch("solve", a, b) + b.shape[-2:], dtype)


def _solve_vjp(ct, xs, out):
    a, b = xs
    gb = bind("solve", _swap_last(a), ct)
    return unbroadcast(-_mm(gb, _swap_last(out)), a.shape), unbroadcast(gb, b.shape)


def _solve_jvp(ts, xs, out):
    ta, tb = ts
    rhs = add_terms(tb, None if ta is None else -_mm(ta, out))
    return bind("solve", xs[0], rhs)


register(Primitive(
    name="solve", impl=np.linalg.solve, abstract=_solve_type, vjp=_solve_vjp,
    jvp=_solve_jvp, family="linalg", promote="float",
    compiled=_numba_linalg("solve"),
    notes="x = A^{-1} B for (stacks of) square A and n×k B, batch axes broadcast (cnp.linalg."
          "solve takes a 1-D b as a vector, as numpy 2 and JAX); dB = A^{-T} ct, dA = -dB "
          "x^T (Giles 2008), also for complex matrices (holomorphic: the transpose, JAX's "
          "convention); a singular A raises numpy's LinAlgError"))


def _cholesky_impl(a: np.ndarray) -> np.ndarray:
    """numpy's Cholesky factor, NaN for a matrix that is not positive definite (as JAX)."""
    try:
        return np.linalg.cholesky(a)
    except np.linalg.LinAlgError:
        flat = a.reshape((-1,) + a.shape[-2:])
        out = np.full_like(flat, np.nan)
        for k, m in enumerate(flat):  # only when some matrix of the stack fails
            if np.all(np.linalg.eigvalsh(m) > 0):
                out[k] = np.linalg.cholesky(m)
        return out.reshape(a.shape)


def _lower_mask(x: Any) -> np.ndarray:
    """Phi of Murray (2016): the lower triangle with the diagonal halved."""
    n = x.shape[-1]
    return (np.tril(np.ones((n, n)), -1) + 0.5 * np.eye(n)).astype(x.dtype)


def _cholesky_jvp(ts, xs, out):
    """dL = L Phi(L^{-1} dA L^{-T})."""
    inner = _swap_last(bind("solve", out, _swap_last(bind("solve", out, ts[0]))))
    return _mm(out, inner * _lower_mask(out))


def _cholesky_vjp(ct, xs, out):
    """A-bar = L^{-T} Phi(L^T L-bar) L^{-1}, the transpose of the JVP."""
    lt = _swap_last(out)
    left = bind("solve", lt, _mm(lt, ct) * _lower_mask(out))
    return (_swap_last(bind("solve", lt, _swap_last(left))),)


def _factor_type(op: str) -> Callable[..., TensorType]:
    def rule(types: list[TensorType]) -> TensorType:
        _square(op, types[0])
        return TensorType(types[0].shape, _linalg_dtype(op, types[0]))

    return rule


register(Primitive(
    name="cholesky", impl=_cholesky_impl, abstract=_factor_type("cholesky"),
    vjp=_cholesky_vjp, jvp=_cholesky_jvp, family="linalg", promote="float",
    compiled=_numba_linalg("cholesky"),
    notes="the lower factor L of a symmetric positive definite A (cnp.linalg.cholesky "
          "symmetrizes its input first, as JAX, so the gradient is symmetric); NaN where A "
          "is not positive definite, as JAX; rules of Murray (2016): dL = L Phi(L^{-1} dA "
          "L^{-T}), Phi the lower triangle with the diagonal halved"))


def _eigh_type(types: list[TensorType], uplo: str) -> list[TensorType]:
    t = types[0]
    if uplo not in ("L", "U"):
        raise LoweringError(f"eigh: parameter uplo must be 'L' or 'U', got {uplo!r}")
    _square("eigh", t)
    dtype = _linalg_dtype("eigh", t)
    return [TensorType(t.shape[:-1], dtype), TensorType(t.shape, dtype)]


def _gap_reciprocals(w: Any) -> Any:
    """F[i, j] = 1 / (w[j] - w[i]) off the diagonal, 0 on it."""
    eye = _eye_like(w, w.shape[-1])
    return 1.0 / (_row(w) - _col(w) + eye) - eye


def _eigh_jvp(ts, xs, outs, uplo):
    w, v = outs
    vt = _swap_last(v)
    rotated = _mm(vt, _mm(ts[0], v))
    return [_diag_of(rotated), _mm(v, _gap_reciprocals(w) * rotated)]


def _eigh_vjp(cts, xs, outs, uplo):
    w, v = outs
    gw, gv = cts
    inner = add_terms(None if gw is None else _as_diag(gw),
                       None if gv is None else _gap_reciprocals(w) * _mm(_swap_last(v), gv))
    return (_mm(v, _mm(inner, _swap_last(v))),)


def _eigh_source(args, types, out, uplo):
    _single_matrices("eigh", *types)
    if uplo != "L":  # Numba's reads the lower triangle; syevd on the upper rounds otherwise
        raise Unsupported("eigh of the upper triangle (uplo='U'; compiled: 'L', numpy's "
                          "default)")
    return f"K.eigh({args[0]})"


register(Primitive(
    name="eigh", impl=lambda a, uplo: tuple(np.linalg.eigh(a, uplo)), abstract=_eigh_type,
    vjp=_eigh_vjp, jvp=_eigh_jvp, family="linalg", promote="float", multi_output=True,
    compiled=Source(_eigh_source),
    notes="eigenvalues (ascending) and eigenvectors of a symmetric matrix (cnp.linalg.eigh "
          "symmetrizes its input, as JAX; `uplo` only picks LAPACK's triangle, which keeps "
          "numpy's eigenvector signs); derivatives need distinct eigenvalues: dw = "
          "diag(V^T dA V), dV = V (F * V^T dA V) with F[i, j] = 1/(w[j] - w[i]), so "
          "V^T dV has a zero diagonal (JAX's gauge); each eigenvector's sign is LAPACK's"))


def _eig_type(types: list[TensorType]) -> list[TensorType]:
    t = types[0]
    _square("eig", t)
    dtype = complex_dtype(_linalg_dtype("eig", t, complex_ok=True))
    return [TensorType(t.shape[:-1], dtype), TensorType(t.shape, dtype)]


def _eig_impl(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """numpy's eig, complex even where numpy's is real (all eigenvalues real), as JAX's."""
    w, v = np.linalg.eig(a)
    dtype = complex_dtype(a.dtype)
    return w.astype(dtype, copy=False), v.astype(dtype, copy=False)


def _column_sums(x: Any) -> Any:
    """(..., n, n) -> (..., n): the sum of each column."""
    return bind("sum", x, axes=(len(x.shape) - 2,), keepdims=False)


def _largest_entries(v: Any) -> Any:
    """1 at the entry of largest modulus of each column of V (the one LAPACK makes real,
    the first of equals), 0 elsewhere, in V's dtype."""
    n = v.shape[-1]
    k = bind("argmax", bind("abs", v), axis=len(v.shape) - 2)
    return bind("astype", bind("eq", _row(k), np.arange(n).reshape(n, 1)), dtype=v.dtype)


def _eig_jvp(ts, xs, outs):
    """Giles (2008) §3.1 with JAX's gauge: P = V^{-1} dA V, dw = diag(P), U = V (F * P);
    dV = U + V diag(c) with c[j] = -Re(v_j^H u_j) - i Im(u[k, j]) / Re(v[k, j]), k the
    entry of v_j of largest modulus: the tangent of LAPACK's normalization (unit 2-norm
    columns whose largest entry is real), so FD of numpy's eig sees the same."""
    w, v = outs
    da = ts[0] if ts[0].dtype == v.dtype else bind("astype", ts[0], dtype=v.dtype)
    p = _mm(bind("solve", v, da), v)
    u = _mm(v, _gap_reciprocals(w) * p)
    mask = _largest_entries(v)
    size = -bind("real", _column_sums(bind("conj", v) * u))
    phase = -bind("imag", _column_sums(mask * u)) / bind("real", _column_sums(mask * v))
    c = bind("astype", size, dtype=v.dtype) + bind("astype", phase, dtype=v.dtype) * \
        np.asarray(1j, v.dtype)
    return [_diag_of(p), u + v * _row(c)]


def _eig_vjp(cts, xs, outs):
    """The transpose of `_eig_jvp` in JAX's convention (a cotangent g of z stands for
    dz -> Re(g dz)), step by step: dV = U + V diag(c) gives U-bar = V-bar and c-bar =
    colsum(V-bar * V); c = x + i y with x = -Re(s), y = -Im(t) / r gives s-bar =
    -Re(c-bar) and t-bar = -i Im(c-bar) / r, so U-bar += conj(V) s-bar + mask t-bar; then
    P-bar = diag(w-bar) + F * V^T U-bar and A-bar = V^{-T} P-bar V^T (the real part for a
    real A)."""
    a = xs[0]
    w, v = outs
    gw, gv = cts
    inner = None if gw is None else _as_diag(gw)
    if gv is not None:
        mask = _largest_entries(v)
        cbar = _column_sums(gv * v)
        r = bind("real", _column_sums(mask * v))
        sbar = -bind("astype", bind("real", cbar), dtype=v.dtype)
        tbar = bind("astype", bind("imag", cbar) / r, dtype=v.dtype) * np.asarray(-1j, v.dtype)
        ubar = gv + bind("conj", v) * _row(sbar) + mask * _row(tbar)
        inner = add_terms(inner, _gap_reciprocals(w) * _mm(_swap_last(v), ubar))
    vt = _swap_last(v)
    ga = bind("solve", vt, _mm(inner, vt))
    return (ga if a.dtype.kind == "c" else bind("real", ga),)


def _eig_source(args, types, out):
    _single_matrices("eig", *types)
    if types[0].dtype.kind != "c":
        raise Unsupported(f"eig of a real matrix {types[0]} (Numba's raises where its "
                          "eigenvalues are complex; compiled: complex matrices)")
    return f"K.eig({args[0]})"


register(Primitive(
    name="eig", impl=_eig_impl, abstract=_eig_type, vjp=_eig_vjp, jvp=_eig_jvp,
    family="linalg", promote="float", multi_output=True,
    compiled=Source(_eig_source),
    notes="numpy's eig of a real or complex matrix: eigenvalues w and right eigenvectors V, "
          "always complex (as JAX), LAPACK's normalization (unit 2-norm columns, the "
          "largest entry real); derivatives need distinct eigenvalues: dw = diag(V^{-1} dA "
          "V), dV = V (F * V^{-1} dA V) with F[i, j] = 1/(w[j] - w[i]) (Giles 2008 §3.1) "
          "plus the tangent of the normalization, as JAX's lax.linalg.eig; a real A's "
          "cotangent is real"))


def _svd_type(types: list[TensorType], full_matrices: bool) -> list[TensorType]:
    t = types[0]
    full = bool_param("svd", "full_matrices", full_matrices)
    dtype = _linalg_dtype("svd", t)
    m, n = _matrix_shape("svd", t)
    k = min(m, n)
    batch = t.shape[:-2]
    return [TensorType(batch + (m, m if full else k), dtype), TensorType(batch + (k,), dtype),
            TensorType(batch + (n if full else k, n), dtype)]


def _no_complete_derivative(op: str, a: Any, complete: bool) -> None:
    m, n = a.shape[-2:]
    if complete and m != n:
        raise LoweringError(f"{op}: no derivative of the complete factors of a non-square "
                            f"{m}×{n} matrix (they are not unique; JAX refuses too): use the "
                            "reduced ones")


def _svd_jvp(ts, xs, outs, full_matrices):
    """JAX's statement of Townsend (2016), real case."""
    a = xs[0]
    _no_complete_derivative("svd", a, full_matrices)
    u, s, vh = outs
    v = _swap_last(vh)
    da = ts[0]
    ds_mat = _mm(_swap_last(u), _mm(da, v))
    ds = _diag_of(ds_mat)
    f = _gap_reciprocals(s * s)
    dss = ds_mat * _row(s)
    sds = _col(s) * ds_mat
    du = _mm(u, f * (dss + _swap_last(dss)))
    dv = _mm(v, f * (sds + _swap_last(sds)))
    m, n = a.shape[-2:]
    if m > n:
        dav = _mm(da, v)
        du = du + (dav - _mm(u, _mm(_swap_last(u), dav))) / _row(s)
    if n > m:
        dahu = _mm(_swap_last(da), u)
        dv = dv + (dahu - _mm(v, _mm(_swap_last(v), dahu))) / _row(s)
    return [du, ds, _swap_last(dv)]


def _svd_vjp(cts, xs, outs, full_matrices):
    """The transpose of the JVP: A-bar = U [diag(s-bar) + (J + J^T) S + S (K + K^T)] V^T
    with J = F * U^T U-bar, K = F * V^T V-bar, plus the parts off the column spaces for
    non-square A (Townsend 2016)."""
    a = xs[0]
    _no_complete_derivative("svd", a, full_matrices)
    u, s, vh = outs
    gu, gs, gvh = cts
    v = _swap_last(vh)
    f = _gap_reciprocals(s * s)
    inner, extra = [], []
    if gs is not None:
        inner.append(_as_diag(gs))
    m, n = a.shape[-2:]
    if gu is not None:
        j = f * _mm(_swap_last(u), gu)
        inner.append((j + _swap_last(j)) * _row(s))
        if m > n:
            scaled = gu / _row(s)
            extra.append(_mm(scaled - _mm(u, _mm(_swap_last(u), scaled)), vh))
    if gvh is not None:
        gv = _swap_last(gvh)
        k = f * _mm(vh, gv)
        inner.append(_col(s) * (k + _swap_last(k)))
        if n > m:
            scaled = gv / _row(s)
            extra.append(_mm(u, _swap_last(scaled - _mm(v, _mm(vh, scaled)))))
    core = _mm(u, _mm(add_terms(*inner), vh))
    return (add_terms(core, *extra),)


def _svd_source(args, types, out, full_matrices):
    _single_matrices("svd", *types, empty=False)
    return f"K.svd({args[0]}, {bool(full_matrices)})"


register(Primitive(
    name="svd", impl=lambda a, full_matrices: tuple(np.linalg.svd(a, full_matrices)),
    abstract=_svd_type, vjp=_svd_vjp, jvp=_svd_jvp, family="linalg", promote="float",
    multi_output=True,
    compiled=Source(_svd_source),
    notes="u, s, vh with s descending; derivatives (Townsend 2016, JAX's rule) need "
          "distinct nonzero singular values, and the reduced factors of a non-square matrix "
          "(full_matrices=True only for square ones, as JAX); singular vectors' signs are "
          "LAPACK's"))


def _qr_type(types: list[TensorType], complete: bool) -> list[TensorType]:
    t = types[0]
    complete = bool_param("qr", "complete", complete)
    dtype = _linalg_dtype("qr", t)
    m, n = _matrix_shape("qr", t)
    k = m if complete else min(m, n)
    return [TensorType(t.shape[:-2] + (m, k), dtype), TensorType(t.shape[:-2] + (k, n), dtype)]


def _strict_lower(x: Any) -> np.ndarray:
    n = x.shape[-1]
    return np.tril(np.ones((n, n), x.dtype), -1)


def _columns(x: Any, start: int, stop: int) -> Any:
    return bind("index", x, spec=(Ellipsis, slice(None, None, None), slice(start, stop, None)))


def _thin_qr_jvp(q, r, da):
    """JAX's rule for m >= n: with Z = dA R^{-1} and C = Q^T Z, dQ = Q (W - C) + Z and
    dR = (C - W) R, W the skew-symmetric matrix of C's strictly lower part."""
    z = _swap_last(bind("solve", _swap_last(r), _swap_last(da)))
    c = _mm(_swap_last(q), z)
    low = c * _strict_lower(c)
    w = low - _swap_last(low)
    return _mm(q, w - c) + z, _mm(c - w, r)


def _thin_qr_vjp(q, r, gq, gr):
    """The transpose of `_thin_qr_jvp`: with G = Q^T Q-bar - R-bar R^T, A-bar =
    (Q (low(G - G^T) - G) + Q-bar) R^{-T}."""
    g = add_terms(None if gq is None else _mm(_swap_last(q), gq),
                   None if gr is None else -_mm(gr, _swap_last(r)))
    h = add_terms(_mm(q, (g - _swap_last(g)) * _strict_lower(g) - g), gq)
    return _swap_last(bind("solve", r, _swap_last(h)))


def _qr_jvp(ts, xs, outs, complete):
    """A wide A = [A1 A2] (m < n) as JAX: Q, R1 are the QR of the square A1, and
    R2 = Q^T A2 gives dR2 = dQ^T A2 + Q^T dA2."""
    a, da = xs[0], ts[0]
    _no_complete_derivative("qr", a, complete and a.shape[-2] > a.shape[-1])
    q, r = outs
    m, n = a.shape[-2:]
    if m >= n:
        return list(_thin_qr_jvp(q, r, da))
    dq, dr1 = _thin_qr_jvp(q, _columns(r, 0, m), _columns(da, 0, m))
    dr2 = _mm(_swap_last(dq), _columns(a, m, n)) + _mm(_swap_last(q), _columns(da, m, n))
    return [dq, bind("concatenate", dr1, dr2, axis=len(a.shape) - 1)]


def _qr_vjp(cts, xs, outs, complete):
    a = xs[0]
    _no_complete_derivative("qr", a, complete and a.shape[-2] > a.shape[-1])
    q, r = outs
    gq, gr = cts
    m, n = a.shape[-2:]
    if m >= n:
        return (_thin_qr_vjp(q, r, gq, gr),)
    if gr is None:
        gr1, ga2 = None, np.zeros(tuple(a.shape[:-1]) + (n - m,), a.dtype)
    else:
        gr1, gr2 = _columns(gr, 0, m), _columns(gr, m, n)
        gq = add_terms(gq, _mm(_columns(a, m, n), _swap_last(gr2)))
        ga2 = _mm(q, gr2)
    ga1 = _thin_qr_vjp(q, _columns(r, 0, m), gq, gr1)
    return (bind("concatenate", ga1, ga2, axis=len(a.shape) - 1),)


def _qr_source(args, types, out, complete):
    _single_matrices("qr", *types, empty=False)
    m, n = types[0].shape
    if complete and m > n:
        raise Unsupported(f"the complete QR of a tall matrix {types[0]} (Numba's gives the "
                          "reduced factors)")
    return f"K.qr({args[0]})"


register(Primitive(
    name="qr", impl=lambda a, complete: tuple(np.linalg.qr(a, "complete" if complete else
                                                            "reduced")),
    abstract=_qr_type, vjp=_qr_vjp, jvp=_qr_jvp, family="linalg", promote="float",
    multi_output=True,
    compiled=Source(_qr_source),
    notes="Q, R with LAPACK's signs; derivatives by JAX's rule, a wide matrix's through "
          "the QR of its leading square block; not for the complete factors of a tall matrix "
          "(JAX 0.10 has a rule for those, cfgrad refuses)"))


def _det_type(types: list[TensorType]) -> TensorType:
    t = types[0]
    _square("det", t)
    return TensorType(t.shape[:-2], _linalg_dtype("det", t))


def _det_source(args, types, out):
    _single_matrices("det", *types)
    return f"K.det({args[0]}, np.{out.dtype.name})"


def _expand2(x: Any) -> Any:
    return bind("reshape", x, shape=tuple(x.shape) + (1, 1))


register(Primitive(
    name="det", impl=np.linalg.det, abstract=_det_type,
    vjp=lambda ct, xs, out: (_expand2(ct * out) * _inverse_transpose(xs[0]),),
    jvp=lambda ts, xs, out: out * _trace_of_solve(xs[0], ts[0]),
    family="linalg", promote="float",
    compiled=Source(_det_source),
    notes="numpy's LU determinant; d det = det tr(A^{-1} dA) (Giles 2008), so the gradient "
          "det A^{-T} is inf/NaN at a singular A (JAX gives the cofactor matrix there)"))


def _slogdet_type(types: list[TensorType]) -> list[TensorType]:
    t = _det_type(types)
    return [t, t]


def _slogdet_source(args, types, out):
    _single_matrices("slogdet", *types)
    return f"K.slogdet({args[0]}, np.{out[0].dtype.name})"


def _slogdet_vjp(cts, xs, outs):
    if cts[1] is None:
        return (None,)
    return (_expand2(cts[1]) * _inverse_transpose(xs[0]),)


register(Primitive(
    name="slogdet", impl=lambda a: tuple(np.linalg.slogdet(a)), abstract=_slogdet_type,
    vjp=_slogdet_vjp, jvp=lambda ts, xs, outs: [None, _trace_of_solve(xs[0], ts[0])],
    family="linalg", promote="float", multi_output=True,
    compiled=Source(_slogdet_source),
    notes="sign and log|det|; the sign has derivative 0, d log|det| = tr(A^{-1} dA)"))


def _pinv_impl(a: np.ndarray, rtol: float) -> np.ndarray:
    """JAX's pseudo-inverse: singular values at most rtol times the largest count as 0."""
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    cutoff = rtol * s[..., :1]
    s = np.where(s > cutoff, s, np.inf)
    return np.matmul(np.swapaxes(vh, -1, -2), np.swapaxes(u, -1, -2) / s[..., :, None])


def _pinv_source(args, types, out, rtol):
    _single_matrices("pinv", *types, empty=False)
    return f"K.pinv({args[0]}, np.{out.dtype.name}({rtol!r}))"


def _pinv_type(types: list[TensorType], rtol: float) -> TensorType:
    t = types[0]
    if not isinstance(rtol, float) or rtol < 0:
        raise LoweringError(f"pinv: parameter rtol must be a float >= 0, got {rtol!r}")
    m, n = _matrix_shape("pinv", t)
    return TensorType(t.shape[:-2] + (n, m), _linalg_dtype("pinv", t))


def _pinv_jvp(ts, xs, out, rtol):
    """Golub and Pereyra (1973), as JAX: dP = -P dA P + P P^T dA^T (I - A P)
    + (I - P A) dA^T P^T P, for A of constant rank."""
    a, p, da = xs[0], out, ts[0]
    pt, dat = _swap_last(p), _swap_last(da)
    s = _mm(_mm(p, pt), dat)
    t = _mm(dat, _mm(pt, p))
    return -_mm(_mm(p, da), p) + s - _mm(_mm(s, a), p) + t - _mm(p, _mm(a, t))


def _pinv_vjp(ct, xs, out, rtol):
    """The transpose of the JVP: -P^T G P^T + (I - A P) G^T P P^T + P^T P G^T (I - P A)."""
    a, p = xs[0], out
    pt, gt = _swap_last(p), _swap_last(ct)
    left = _mm(gt, _mm(p, pt))
    right = _mm(_mm(pt, p), gt)
    return (-_mm(pt, _mm(ct, pt)) + left - _mm(a, _mm(p, left))
            + right - _mm(_mm(right, p), a),)


register(Primitive(
    name="pinv", impl=_pinv_impl, abstract=_pinv_type, vjp=_pinv_vjp, jvp=_pinv_jvp,
    family="linalg", promote="float",
    compiled=Source(_pinv_source),
    notes="the Moore-Penrose pseudo-inverse by numpy's SVD, singular values <= rtol * the "
          "largest dropped (JAX's default rtol = 10 max(m, n) eps); the derivative of "
          "Golub and Pereyra (1973), JAX's rule, holds where the rank is locally constant"))

