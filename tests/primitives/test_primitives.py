"""The derivative table (cfgrad/primitives/), primitive by primitive (docs/ir.md,
"Primitive nodes"; docs/numerics.md).

`CASES` holds one entry per primitive in `PRIMITIVES`: a hypothesis recipe that draws a
shape (0-d, size-1 dimensions and broadcasting pairs included), values inside the
primitive's domain and away from its kinks, and a function that applies the primitive
through `cfgrad.numpy`. From it:

* every differentiable primitive's VJP and JVP are checked against central differences
  (`check_grads`, float64), and the cotangents/tangents against their primal's shape and
  dtype, which `check_grads` cannot see (it contracts them with broadcasting sums);
* every primitive's numpy implementation is checked against its shape/dtype rule, for
  float64/32/16, integer and bool inputs where meaningful, so traced types match runtime.

Then the documented subgradients at kinks, stable primitives at extreme inputs, eager use
on plain numpy arrays, and float32 programs staying float32.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from primitive_facts import EXTREMES, FACTS, KINKS

import cfgrad as cg
import cfgrad.numpy as cnp
import cfgrad.verify
from cfgrad import tree as treelib
from cfgrad.api import evaluate
from cfgrad.interpret import Compiled, Machine
from cfgrad.numpy import NAMESPACE
from cfgrad.primitives import PRIMITIVES, Deferred, Primitive, bind
from cfgrad.testing import check_grads

F64, F32, F16 = np.dtype(np.float64), np.dtype(np.float32), np.dtype(np.float16)
FLOATS = (F64, F32, F16)
NUMERIC = FLOATS + (np.dtype(np.int64), np.dtype(np.int32))
ALL = NUMERIC + (np.dtype(np.bool_),)
INTS = (np.dtype(np.int64), np.dtype(np.int32), np.dtype(np.bool_))

SHAPES = hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=4)
PAIRS = hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, min_side=1,
                                          max_side=4).map(lambda b: b.input_shapes)
TRIPLES = hnp.mutually_broadcastable_shapes(num_shapes=3, min_dims=0, max_dims=3, min_side=1,
                                            max_side=4).map(lambda b: b.input_shapes)
# Shapes hypothesis may or may not reach in a bounded run, checked for every binary op.
EDGE_PAIRS = [((3, 1), (4,)), ((), (2, 3)), ((2, 3), ()), ((1,), (3, 1)),
              ((2, 1, 3), (1, 4, 1))]

Sampler = Callable[[np.random.Generator, tuple], np.ndarray]
Drawn = tuple[Callable[..., Any], tuple]


# ---------------------------------------------------------------------------------
# Value samplers: inside the domain, away from kinks and ties
# ---------------------------------------------------------------------------------


def uniform(lo: float, hi: float) -> Sampler:
    return lambda rng, shape: rng.uniform(lo, hi, shape)


SYMMETRIC = uniform(-2.0, 2.0)


def inside(name: str) -> Sampler:
    """Values inside the primitive's domain (tests/primitive_facts.py)."""
    return uniform(*FACTS[name].domain)


def away_from_zero(rng: np.random.Generator, shape: tuple) -> np.ndarray:
    """|x| in [0.2, 2] with random signs: clear of the kinks of abs, relu, sign and 1/x."""
    return rng.uniform(0.2, 2.0, shape) * rng.choice([-1.0, 1.0], shape)


def grid(offset: float, lo: int = -5, hi: int = 5) -> Sampler:
    """Multiples of 0.2 plus `offset`, jittered by ±0.02: two grids with offsets 0 and 0.1
    never come closer than 0.06, so maximum/minimum/clip never meet a tie."""
    return lambda rng, shape: (0.2 * rng.integers(lo, hi + 1, shape) + offset
                               + rng.uniform(-0.02, 0.02, shape))


def distinct(rng: np.random.Generator, shape: tuple) -> np.ndarray:
    """Entries at least 0.2 apart: amax/amin have a unique winner along any axis."""
    size = int(np.prod(shape, dtype=np.int64))
    values = 0.3 * (rng.permutation(size) - size / 2) + rng.uniform(-0.05, 0.05, size)
    return values.reshape(shape)


def with_zeros(count: int) -> Sampler:
    """±[0.5, 1.5] with up to `count` exact zeros: prod's exact zero handling."""
    def sample(rng: np.random.Generator, shape: tuple) -> np.ndarray:
        x = rng.uniform(0.5, 1.5, shape) * rng.choice([-1.0, 1.0], shape)
        flat = x.reshape(-1)
        flat[rng.choice(flat.size, min(count, flat.size), replace=False)] = 0.0
        return flat.reshape(shape)

    return sample


def near_zero_or(sample: Sampler) -> Sampler:
    """`sample`, with about half the entries scaled into [-0.01, 0.01]: the branch of a
    rule that is taken near 0 (sinc's and i1's series)."""
    def draw(rng: np.random.Generator, shape: tuple) -> np.ndarray:
        return sample(rng, shape) * rng.choice([1.0, 0.004], shape)

    return draw


def seeded(data: st.DataObject) -> np.random.Generator:
    return np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))


def axes_for(ndim: int) -> st.SearchStrategy:
    """numpy `axis` arguments: None, one (possibly negative) axis, or a tuple of axes."""
    one = st.integers(-ndim, ndim - 1) if ndim else st.nothing()
    many = st.lists(st.integers(0, ndim - 1), unique=True, max_size=ndim).map(tuple) \
        if ndim else st.just(())
    return st.one_of(st.none(), one, many)


def shrunk(data: st.DataObject, shape: tuple) -> tuple:
    """A shape that broadcasts to `shape`: leading axes dropped, others set to 1."""
    drop = data.draw(st.integers(0, len(shape)), label="dropped axes")
    return tuple(1 if data.draw(st.booleans()) else d for d in shape[drop:])


# ---------------------------------------------------------------------------------
# Cases: one per primitive
# ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """How to exercise one primitive. `draw(data, dtype)` returns a function applying it
    through cfgrad.numpy and arguments whose float leaves have `dtype` (ints and masks are
    closed over); `dtypes` lists the input dtypes its shape/dtype rule is checked for."""

    draw: Callable[[st.DataObject, np.dtype], Drawn]
    dtypes: tuple[np.dtype, ...] = NUMERIC


def unary(fn: Callable, sample: Sampler = SYMMETRIC, dtypes=NUMERIC) -> Case:
    def draw(data, dtype):
        return fn, (sample(seeded(data), data.draw(SHAPES)).astype(dtype),)

    return Case(draw, dtypes)


@dataclass(frozen=True)
class BinaryCase(Case):
    """An elementwise binary primitive: `fn` applied to samples `sx` and `sy`, built for
    any pair of shapes (hypothesis' or the fixed EDGE_PAIRS)."""

    fn: Callable = None  # type: ignore[assignment]
    sx: Sampler = SYMMETRIC
    sy: Sampler = SYMMETRIC

    def build(self, rng: np.random.Generator, shapes: tuple, which: str,
              dtype: np.dtype) -> Drawn:
        """`which` operands are arguments; the other is closed over, so its tangent and
        cotangent are symbolic zeros and the rules see one-sided broadcasting."""
        x, y = self.sx(rng, shapes[0]).astype(dtype), self.sy(rng, shapes[1]).astype(dtype)
        fn = self.fn
        if which == "x":
            return (lambda a: fn(a, y)), (x,)
        if which == "y":
            return (lambda b: fn(x, b)), (y,)
        return fn, (x, y)


def binary(fn: Callable, sx: Sampler = SYMMETRIC, sy: Sampler = SYMMETRIC,
           dtypes=NUMERIC) -> BinaryCase:
    def draw(data, dtype):
        which = data.draw(st.sampled_from(["xy", "x", "y"]), label="arguments")
        return case.build(seeded(data), data.draw(PAIRS), which, dtype)

    case = BinaryCase(draw, dtypes, fn, sx, sy)  # `draw` builds through it
    return case


def integer_division(fn: Callable) -> Callable:
    def draw(data, dtype):
        """x = q*y with x/y at least 0.2 from an integer: clear of the jumps of mod and
        floor_divide."""
        rng = seeded(data)
        sx = data.draw(SHAPES)
        sy = shrunk(data, sx)
        y = away_from_zero(rng, sy)
        q = rng.integers(-3, 3, sx) + rng.uniform(0.2, 0.8, sx)
        x = (q * y).astype(dtype)
        return fn, (x, y.astype(dtype))

    return draw


def draw_where(data, dtype):
    rng = seeded(data)
    sc, sx, sy = data.draw(TRIPLES)
    mask = rng.random(sc) < 0.5
    x, y = rng.uniform(-2, 2, sx).astype(dtype), rng.uniform(-2, 2, sy).astype(dtype)
    which = data.draw(st.sampled_from(["xy", "x", "y"]), label="arguments")
    if which == "x":
        return (lambda a: cnp.where(mask, a, 0.0)), (x,)
    if which == "y":
        return (lambda b: cnp.where(mask, 1.0, b)), (y,)
    return (lambda a, b: cnp.where(mask, a, b)), (x, y)


def draw_clip(data, dtype):
    """x on the 0.1-offset grid, bounds on the 0-offset grid: some entries below, inside
    and above, none within 0.06 of a bound."""
    rng = seeded(data)
    shape = data.draw(SHAPES)
    x = grid(0.1, -6, 5)(rng, shape).astype(dtype)
    lo = grid(-0.6, -2, 0)(rng, shrunk(data, shape)).astype(dtype)
    hi = grid(0.6, 0, 2)(rng, shrunk(data, shape)).astype(dtype)
    which = data.draw(st.sampled_from(["x", "x lo hi", "lo", "hi", "x None"]))
    if which == "x":
        return (lambda a: cnp.clip(a, lo, hi)), (x,)
    if which == "lo":
        return (lambda b: cnp.clip(x, b, hi)), (lo,)
    if which == "hi":
        return (lambda c: cnp.clip(x, lo, c)), (hi,)
    if which == "x None":
        return (lambda a: cnp.clip(a, None, 0.6)), (x,)
    return cnp.clip, (x, lo, hi)


def reduction(fn: Callable, sample: Sampler = SYMMETRIC, dtypes=ALL) -> Case:
    def draw(data, dtype):
        shape = data.draw(SHAPES)
        axis = data.draw(axes_for(len(shape)), label="axis")
        keepdims = data.draw(st.booleans(), label="keepdims")
        x = sample(seeded(data), shape).astype(dtype)
        return (lambda a: fn(a, axis=axis, keepdims=keepdims)), (x,)

    return Case(draw, dtypes)


def draw_prod(data, dtype):
    count = data.draw(st.integers(0, 2), label="zeros")
    return reduction(cnp.prod, with_zeros(count)).draw(data, dtype)


def draw_arg(fn: Callable) -> Callable:
    def draw(data, dtype):
        shape = data.draw(SHAPES)
        axis = data.draw(st.none() | st.integers(-len(shape), len(shape) - 1)
                         if shape else st.none())
        return (lambda a: fn(a, axis)), (distinct(seeded(data), shape).astype(dtype),)

    return draw


def draw_matmul(data, dtype):
    """All of numpy's matmul forms at once: batched (broadcast) matrix @ matrix, matrix @
    vector, vector @ matrix and vector @ vector."""
    rng = seeded(data)
    n, k, m = (data.draw(st.integers(1, 4)) for _ in range(3))
    ba, bb = data.draw(hnp.mutually_broadcastable_shapes(
        num_shapes=2, min_dims=0, max_dims=2, min_side=1, max_side=3)).input_shapes
    a, b = rng.uniform(-2, 2, ba + (n, k)), rng.uniform(-2, 2, bb + (k, m))
    u, w = rng.uniform(-2, 2, (k,)), rng.uniform(-2, 2, (k,))

    def f(a, b, u, w):
        return cnp.matmul(a, b), cnp.matmul(a, u), cnp.matmul(u, b), cnp.matmul(u, w)

    return f, tuple(x.astype(dtype) for x in (a, b, u, w))


# -- linalg family: factorizations with separated spectra (distinct eigen- and singular
# values away from 0), so each derivative exists and central differences see it


LINALG_DTYPES = (F64, F32)  # LAPACK's; integers are promoted to float64 first


def linalg_batch(data):
    return data.draw(hnp.array_shapes(min_dims=0, max_dims=2, min_side=1, max_side=2),
                     label="batch")


def orthogonal(rng, batch, n):
    return np.linalg.qr(rng.normal(size=batch + (n, n)))[0]


def spectrum(rng, batch, k, low=1.0):
    """k values per matrix, at least 0.5 apart, from `low` up, in random order."""
    steps = np.arange(k) * 0.7 + low + rng.uniform(0.0, 0.2, batch + (k,))
    return rng.permuted(steps, axis=-1)


def draw_einsum(data, dtype):
    """Matrix products with a batch ellipsis, a diagonal, a trace, a sum over an index of
    one operand only, and a contraction of three operands."""
    rng = seeded(data)
    i, j, k = (data.draw(st.integers(1, 3)) for _ in range(3))
    batch = linalg_batch(data)
    a, b = rng.uniform(-2, 2, batch + (i, j)), rng.uniform(-2, 2, (j, k))
    sq, v = rng.uniform(-2, 2, (j, j)), rng.uniform(-2, 2, (k,))

    def f(a, b, sq, v):
        return (cnp.einsum("...ij,jk->...ik", a, b), cnp.einsum("ii->i", sq),
                cnp.einsum("ii", sq), cnp.einsum("ij,k->i", b, v),
                cnp.einsum("...ij,jk,k->...i", a, b, v))

    return f, tuple(x.astype(dtype) for x in (a, b, sq, v))


def draw_solve(data, dtype):
    rng = seeded(data)
    n, k = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 3))
    ba, bb = data.draw(hnp.mutually_broadcastable_shapes(
        num_shapes=2, min_dims=0, max_dims=2, min_side=1, max_side=2)).input_shapes
    a = rng.uniform(-1, 1, ba + (n, n)) + (n + 1) * np.eye(n)
    b = rng.uniform(-2, 2, bb + (n, k))
    return (lambda a, b: (cnp.linalg.solve(a, b), cnp.linalg.inv(a))), (
        a.astype(dtype), b.astype(dtype))


def draw_cholesky(data, dtype):
    rng = seeded(data)
    n, batch = data.draw(st.integers(1, 4)), linalg_batch(data)
    q = orthogonal(rng, batch, n)
    a = q @ (spectrum(rng, batch, n)[..., None] * np.swapaxes(q, -1, -2))
    return cnp.linalg.cholesky, (a.astype(dtype),)


def draw_eigh(data, dtype):
    rng = seeded(data)
    n, batch = data.draw(st.integers(1, 4)), linalg_batch(data)
    q = orthogonal(rng, batch, n)
    a = q @ (spectrum(rng, batch, n, -1.0)[..., None] * np.swapaxes(q, -1, -2))
    uplo = data.draw(st.sampled_from("LU"), label="UPLO")
    return (lambda a: tuple(cnp.linalg.eigh(a, uplo))), (a.astype(dtype),)


def draw_eig(data, dtype):
    """A = S D S^{-1}, S within 0.2 of the identity entrywise, so each eigenvector's
    largest entry (LAPACK's gauge, made real) leads the others by a margin central
    differences do not cross (but see `positive_gauge`); D diagonal with eigenvalues at
    least 0.5 apart: real, or complex for a complex A, or for a real A the pair l ± i of
    a block [[l, 4], [-1/4, l]] (eigenvectors (4, ±i), whose largest entry is again
    clear)."""
    rng = seeded(data)
    n, batch = data.draw(st.integers(1, 4)), linalg_batch(data)
    kind = data.draw(st.sampled_from(["real", "pair", "complex"]), label="eigenvalues")
    s = np.eye(n) + rng.uniform(-0.2, 0.2, batch + (n, n))
    d = spectrum(rng, batch, n, -1.0)[..., None] * np.eye(n)
    if kind == "complex":
        s = s + 1j * rng.uniform(-0.2, 0.2, s.shape) * (1.0 - np.eye(n))
        d = d + 1j * rng.uniform(-1.0, 1.0, batch + (n,))[..., None] * np.eye(n)
    if kind == "pair" and n >= 2:
        d[..., 1, 1] = d[..., 0, 0]
        d[..., 0, 1], d[..., 1, 0] = 4.0, -0.25
    a = s @ d @ np.linalg.inv(s)

    def f(a):
        w, v = cnp.linalg.eig(a)
        return w, positive_gauge(v)

    return f, (a.astype(as_complex(dtype) if kind == "complex" else dtype),)


def positive_gauge(v):
    """V with each column's largest entry made positive. LAPACK makes it real, but for a
    real matrix its sign can flip between x + eps dx and x - eps dx (the Schur vectors'
    signs follow the QR iteration's path), and central differences would see the jump;
    eig's rule differentiates LAPACK's choice, whose tangent this one's follows from."""
    size = cnp.abs(v)
    top = cnp.sum(cnp.where(size == cnp.max(size, axis=-2, keepdims=True), v, 0), axis=-2,
                  keepdims=True)
    return v * (cnp.conj(top) / cnp.abs(top))


def separated_matrix(data, rng):
    """An m×n (stack of) matrices with singular values 1, 1.7, 2.4, … (jittered)."""
    m, n, batch = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4)), linalg_batch(data)
    k = min(m, n)
    u, v = orthogonal(rng, batch, m)[..., :k], orthogonal(rng, batch, n)[..., :k]
    return u @ (spectrum(rng, batch, k)[..., None] * np.swapaxes(v, -1, -2))


def draw_svd(data, dtype):
    """Reduced factors of any shape, and the complete ones of a square matrix."""
    rng = seeded(data)
    a = separated_matrix(data, rng)
    full = a.shape[-1] == a.shape[-2]
    return (lambda a: tuple(cnp.linalg.svd(a, full_matrices=full))), (a.astype(dtype),)


def draw_qr(data, dtype):
    """Tall, square and wide matrices: the reduced factors, and the complete ones unless
    the matrix is tall (they are not unique then)."""
    rng = seeded(data)
    a = separated_matrix(data, rng)
    mode = "reduced" if a.shape[-2] > a.shape[-1] else data.draw(
        st.sampled_from(["reduced", "complete"]), label="mode")
    return (lambda a: tuple(cnp.linalg.qr(a, mode))), (a.astype(dtype),)


def draw_square(fn: Callable) -> Callable:
    def draw(data, dtype):
        rng = seeded(data)
        n, batch = data.draw(st.integers(1, 4)), linalg_batch(data)
        sign = rng.choice([-1.0, 1.0], batch + (1, 1))
        a = sign * (rng.uniform(-1, 1, batch + (n, n)) + (n + 1) * np.eye(n))
        return fn, (a.astype(dtype),)

    return draw


def draw_pinv(data, dtype):
    return cnp.linalg.pinv, (separated_matrix(data, seeded(data)).astype(dtype),)


def draw_reshape(data, dtype):
    """reshape, expand_dims, squeeze and ravel all lower to the reshape primitive."""
    shape = data.draw(SHAPES)
    target = data.draw(st.sampled_from([(-1,), shape[::-1], (1,) + shape, shape + (1, 1)]))
    axis = data.draw(st.integers(-len(shape) - 1, len(shape)), label="expand axis")

    def f(a):
        return (cnp.reshape(a, target), cnp.expand_dims(a, axis), cnp.squeeze(a),
                cnp.ravel(a))

    return f, (SYMMETRIC(seeded(data), shape).astype(dtype),)


def draw_transpose(data, dtype):
    shape = data.draw(SHAPES)
    perm = data.draw(st.permutations(range(len(shape))))
    x = SYMMETRIC(seeded(data), shape).astype(dtype)
    return (lambda a: (cnp.transpose(a, perm), a.T)), (x,)


def draw_broadcast_to(data, dtype):
    shape = data.draw(SHAPES)
    x = SYMMETRIC(seeded(data), shrunk(data, shape)).astype(dtype)
    return (lambda a: cnp.broadcast_to(a, shape)), (x,)


def draw_concatenate(data, dtype):
    """concatenate along any axis (pieces of different lengths there), and stack."""
    rng = seeded(data)
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=3))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    lengths = data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
    pieces = []
    for n in lengths:
        s = list(shape)
        s[axis] = n
        pieces.append(rng.uniform(-2, 2, s).astype(dtype))
    stack_axis = data.draw(st.integers(-len(shape) - 1, len(shape)))

    def f(*xs):
        return cnp.concatenate(xs, axis=axis), cnp.stack([xs[0], xs[0] * xs[0]], stack_axis)

    return f, tuple(pieces)


def draw_index(data, dtype):
    """Basic indexing (slices, ints, None, Ellipsis), integer arrays (repeated indices
    scatter-add in the VJP), and X[t] with t the traced index of a fori_loop."""
    shape = data.draw(SHAPES)
    basic = data.draw(hnp.basic_indices(shape, allow_newaxis=True, allow_ellipsis=True))
    arrays = data.draw(hnp.integer_array_indices(
        shape, result_shape=hnp.array_shapes(min_dims=1, max_dims=2, max_side=5))) \
        if shape else None
    after_slice = data.draw(hnp.integer_array_indices(shape[1:])) if len(shape) > 1 else None
    x = SYMMETRIC(seeded(data), shape).astype(dtype)

    def f(a):
        outs = [a[basic]]
        if arrays is not None:
            outs.append(a[arrays])
            outs.append(a[cnp.asarray(arrays[0])])  # a traced integer array
            outs.append(cg.fori_loop(0, shape[0], lambda t, c: c + a[t] * a[-1 - t],
                                     cnp.zeros(shape[1:], a.dtype)))
        if after_slice is not None:
            outs.append(a[(slice(None),) + after_slice])
        return tuple(outs)

    return f, (x,)


def draw_scatter_add(data, dtype):
    """scatter_add is index's VJP (not in cfgrad.numpy): bound directly, with a static
    integer-array index and with a traced scalar index inside a loop."""
    rng = seeded(data)
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4))
    idx = tuple(i.astype(np.int64) for i in data.draw(hnp.integer_array_indices(
        shape, result_shape=hnp.array_shapes(min_dims=1, max_dims=2, max_side=5))))
    x = rng.uniform(-2, 2, np.zeros(shape)[idx].shape).astype(dtype)
    rows = rng.uniform(-2, 2, shape).astype(dtype)

    def f(a, r):
        direct = bind("scatter_add", a, spec=idx, shape=shape)
        looped = cg.fori_loop(0, shape[0], lambda t, c: c + bind(
            "scatter_add", r[t] * r[t], t, spec=("$",), shape=shape), cnp.zeros(shape, r.dtype))
        return direct, looped

    return f, (x, rows)


# -- scan and indexed updates (issue 13)


def draw_write_row(data, dtype):
    """write_row is a scan's output stack: through cg.scan, forward and reverse, whose
    stacks it writes row by row; and bound directly on a closed-over stack whose row t is
    zero (its precondition: a stack row is written once)."""
    rng = seeded(data)
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4))
    reverse = data.draw(st.booleans(), label="reverse")
    xs = rng.uniform(-2, 2, shape).astype(dtype)
    t = data.draw(st.integers(0, shape[0] - 1), label="t")
    stack = rng.uniform(-2, 2, shape).astype(dtype)
    stack[t] = 0

    def f(a):
        carry, ys = cg.scan(lambda c, x: (c + x, c * x), cnp.zeros(shape[1:], a.dtype), a,
                            reverse=reverse)
        return carry, ys, bind("write_row", stack, t, a[0] * a[-1])

    return f, (xs,)


def draw_scatter(data, dtype):
    """x.at[idx].set / multiply / min / max with a static integer-array index (repeats
    drawn), and with a traced index, through cfgrad.numpy's .at. Updates are distinct
    from x and from each other for min/max (no ties, where the derivative has a kink)."""
    rng = seeded(data)
    op = data.draw(st.sampled_from(["set", "multiply", "min", "max"]), label="op")
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4))
    idx = tuple(i.astype(np.int64) for i in data.draw(hnp.integer_array_indices(
        shape, result_shape=hnp.array_shapes(min_dims=1, max_dims=2, max_side=5))))
    n_row = int(np.prod(shape[1:]))
    size = int(np.prod(shape)) + int(np.zeros(shape)[idx].size) + n_row
    values = rng.permutation(np.linspace(-2, 2, size))  # distinct: no ties
    x = values[:np.prod(shape)].reshape(shape).astype(dtype)
    v = values[x.size:x.size + np.zeros(shape)[idx].size].reshape(np.zeros(shape)[idx].shape)
    row = values[len(values) - n_row:].reshape(shape[1:]).astype(dtype)
    t = data.draw(st.integers(0, shape[0] - 1), label="t")

    def f(a, b, r):  # `.at` of a traced value; the helper also runs on numpy arrays
        at_idx = getattr(NAMESPACE["_at"](a)[idx], op)(b)
        at_t = getattr(NAMESPACE["_at"](a)[cnp.asarray(t)], op)(r)
        return at_idx, at_t

    return f, (x, v.astype(dtype), row)


def draw_roll(data, dtype):
    shape = data.draw(SHAPES)
    axis = data.draw(st.none() | st.integers(-len(shape), len(shape) - 1)
                     if shape else st.none())
    shift = data.draw(st.integers(-7, 7), label="shift")
    x = SYMMETRIC(seeded(data), shape).astype(dtype)

    def f(a):
        traced = cg.fori_loop(0, 3, lambda t, c: c + cnp.roll(a, t - 1, axis) * c,
                              cnp.ones(shape, a.dtype))
        return cnp.roll(a, shift, axis), traced

    return f, (x,)


def draw_astype(data, dtype):
    """A float32 input cast up to float64, float64 values cast down to float32, and a cast
    to another dtype: any for the type rule, but for gradients none whose rounding would
    swamp finite differences (a cast to an integer has no derivative)."""
    shape = data.draw(SHAPES)
    targets = (F64, np.dtype(np.int64), np.dtype(np.bool_)) if dtype == F64 else ALL
    target = data.draw(st.sampled_from(targets), label="target dtype")
    x = SYMMETRIC(seeded(data), shape).astype(F32 if dtype == F64 else dtype)

    def f(a):
        up = cnp.astype(a, np.float64)
        return up * up, cnp.astype(up * 3.0, np.float32), cnp.astype(a, target) * 1

    return f, (x,)


def draw_const(data, dtype):
    c = SYMMETRIC(seeded(data), data.draw(SHAPES)).astype(dtype)
    return (lambda a: a + cnp.asarray(c)), (c,)


# -- complex numbers and fft (issue 13, complex+fft family) --

C128, C64 = np.dtype(np.complex128), np.dtype(np.complex64)
COMPLEX = (C128, C64)


def as_complex(dtype: np.dtype) -> np.dtype:
    """The complex dtype a complex case draws for `dtype`: the derivative tests ask for
    float64 and get complex128; the type rule tests pass a complex dtype itself."""
    return np.result_type(dtype, np.complex64) if dtype.kind == "f" else dtype


def complex_sample(rng: np.random.Generator, shape: tuple, dtype: np.dtype) -> np.ndarray:
    """|z| in [0.2, 2] at any angle: clear of 0, where abs, sign and angle have kinks."""
    z = rng.uniform(0.2, 2.0, shape) * np.exp(1j * rng.uniform(-np.pi, np.pi, shape))
    return z.astype(as_complex(dtype))


def complex_unary(fn: Callable) -> Case:
    def draw(data, dtype):
        return fn, (complex_sample(seeded(data), data.draw(SHAPES), dtype),)

    return Case(draw, COMPLEX)


NORMS = st.sampled_from([None, "backward", "ortho", "forward"])


def draw_fft(data, dtype):
    """fftn/ifftn over some axes of a complex input (fft, fft2 and cropping or padding
    with n= included), and of a real one (cast to complex first)."""
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4))
    axes = data.draw(st.lists(st.integers(0, len(shape) - 1), min_size=1, unique=True))
    norm, n = data.draw(NORMS), data.draw(st.integers(1, 6))
    z = complex_sample(seeded(data), shape, dtype)

    def f(a):
        return (cnp.fft.fftn(a, axes=axes, norm=norm), cnp.fft.ifftn(a, axes=axes, norm=norm),
                cnp.fft.fft(a, n, axis=axes[0], norm=norm), cnp.fft.fft(cnp.real(a) * a))

    return f, (z,)


def draw_rfft(data, dtype):
    """rfft, rfftn (an rfft then a complex fft) and ihfft of a float input, with n=."""
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=5))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    norm, n = data.draw(NORMS), data.draw(st.integers(1, 7))
    x = SYMMETRIC(seeded(data), shape).astype(dtype)

    def f(a):
        return (cnp.fft.rfft(a, axis=axis, norm=norm), cnp.fft.rfft(a, n, axis, norm),
                cnp.fft.rfftn(a, norm=norm), cnp.fft.ihfft(a, n, axis, norm))

    return f, (x,)


def draw_irfft(data, dtype):
    """irfft to even and odd lengths n (cropping or padding the frequencies), irfftn and
    hfft of a complex input whose zero frequency has an imaginary part (ignored); at least
    2 frequencies on each axis, so irfftn's default length 2 (m - 1) is not 0."""
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=2, max_side=5))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    norm, n = data.draw(NORMS), data.draw(st.integers(1, 8))
    z = complex_sample(seeded(data), shape, dtype)

    def f(a):
        return (cnp.fft.irfft(a, n, axis, norm), cnp.fft.irfftn(a, norm=norm),
                cnp.fft.hfft(a, n, axis, norm))

    return f, (z,)


def draw_bitwise(op: Callable) -> Callable:
    def draw(data, dtype):
        sx, sy = data.draw(PAIRS)
        rng = seeded(data)
        x, y = rng.integers(0, 4, sx).astype(dtype), rng.integers(0, 4, sy).astype(dtype)
        return op, (x, y)

    return draw


def draw_invert(data, dtype):
    return (lambda a: ~a), (seeded(data).integers(0, 4, data.draw(SHAPES)).astype(dtype),)


# -- statistics family (issue 13): cumulative sums and products, sorting, searching --


def along_axis(fn: Callable, sample: Sampler) -> Callable:
    """fn(a, axis) on an array of at least one dimension, along any (possibly negative)
    axis."""
    def draw(data, dtype):
        shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4))
        axis = data.draw(st.integers(-len(shape), len(shape) - 1), label="axis")
        return (lambda a: fn(a, axis)), (sample(seeded(data), shape).astype(dtype),)

    return draw


def draw_cumsum(data, dtype):
    """Running sums from the front (cnp.cumsum) and from the back (the VJP's form)."""
    reverse = data.draw(st.booleans(), label="reverse")
    return along_axis(lambda a, axis: bind("cumsum", a, axis=axis % a.ndim, reverse=reverse)
                      if reverse else cnp.cumsum(a, axis), SYMMETRIC)(data, dtype)


def draw_cumprod(data, dtype):
    count = data.draw(st.integers(0, 2), label="zeros")
    return along_axis(cnp.cumprod, with_zeros(count))(data, dtype)


def draw_searchsorted(data, dtype):
    rng = seeded(data)
    n = data.draw(st.integers(1, 5), label="length")
    side = data.draw(st.sampled_from(["left", "right"]), label="side")
    a = np.sort(rng.integers(-3, 4, n)).astype(dtype)
    v = rng.integers(-4, 5, data.draw(SHAPES)).astype(dtype)
    return (lambda s, w: cnp.searchsorted(s, w, side=side)), (a, v)


COMPARE = dict(dtypes=ALL)

CASES: dict[str, Case] = {
    "neg": unary(cnp.negative),
    "exp": unary(cnp.exp),
    "log": unary(cnp.log, inside("log")),
    "log1p": unary(cnp.log1p, inside("log1p")),
    "expm1": unary(cnp.expm1),
    "sin": unary(cnp.sin, inside("sin")),
    "cos": unary(cnp.cos, inside("cos")),
    "tan": unary(cnp.tan, inside("tan")),
    "tanh": unary(cnp.tanh),
    "sinh": unary(cnp.sinh),
    "cosh": unary(cnp.cosh),
    "arctan": unary(cnp.arctan),
    # elementwise family (issue 13)
    "arcsin": unary(cnp.arcsin, inside("arcsin")),
    "arccos": unary(cnp.arccos, inside("arccos")),
    "arcsinh": unary(cnp.arcsinh),
    "arccosh": unary(cnp.arccosh, inside("arccosh")),
    "arctanh": unary(cnp.arctanh, inside("arctanh")),
    "cbrt": unary(cnp.cbrt, away_from_zero),
    "exp2": unary(cnp.exp2),
    "log2": unary(cnp.log2, inside("log2")),
    "log10": unary(cnp.log10, inside("log10")),
    "sinc": unary(cnp.sinc, near_zero_or(SYMMETRIC)),  # also the series branch near 0
    "i0": unary(cnp.i0, inside("i0")),
    "i1": unary(lambda x: bind("i1", x), near_zero_or(inside("i1"))),
    "ceil": unary(cnp.ceil, grid(0.1), FLOATS),  # integers are returned as they are
    "trunc": unary(cnp.trunc, grid(0.1), FLOATS),
    "signbit": unary(cnp.signbit, away_from_zero),
    "arctan2": binary(cnp.arctan2, away_from_zero, away_from_zero),
    "hypot": binary(cnp.hypot, away_from_zero, away_from_zero),
    "logaddexp": binary(cnp.logaddexp),
    "logaddexp2": binary(cnp.logaddexp2),
    "fmod": Case(integer_division(cnp.fmod), ALL),
    "sqrt": unary(cnp.sqrt, inside("sqrt")),
    "abs": unary(cnp.abs, away_from_zero, ALL),
    "sign": unary(cnp.sign, away_from_zero),
    "sigmoid": unary(cnp.sigmoid, inside("sigmoid")),
    "relu": unary(cnp.relu, away_from_zero, ALL),
    "softplus": unary(cnp.softplus, inside("softplus")),
    "floor": unary(cnp.floor, grid(0.1), FLOATS),  # integers are returned as they are
    "rint": unary(cnp.rint, grid(0.05)),  # at least 0.03 from a half
    "isfinite": unary(cnp.isfinite),
    "logical_not": unary(cnp.logical_not, dtypes=ALL),
    "invert": Case(draw_invert, INTS),
    "add": binary(cnp.add, dtypes=ALL),
    "sub": binary(cnp.subtract),
    "mul": binary(cnp.multiply, dtypes=ALL),
    "div": binary(cnp.divide, sy=away_from_zero),
    # exponents > -1: negative for floats, but 0 or 1 as integers (numpy refuses x ** -1)
    "pow": binary(cnp.power, sx=inside("pow"), sy=uniform(-0.9, 2.0)),
    "integer_pow": unary(lambda x: cnp.power(x, 3), dtypes=ALL[:-1]),
    "maximum": binary(cnp.maximum, grid(0.1), grid(0.0), ALL),
    "minimum": binary(cnp.minimum, grid(0.1), grid(0.0), ALL),
    "lt": binary(cnp.less, **COMPARE),
    "le": binary(cnp.less_equal, **COMPARE),
    "gt": binary(cnp.greater, **COMPARE),
    "ge": binary(cnp.greater_equal, **COMPARE),
    "eq": binary(cnp.equal, **COMPARE),
    "ne": binary(cnp.not_equal, **COMPARE),
    "logical_and": binary(cnp.logical_and, **COMPARE),
    "logical_or": binary(cnp.logical_or, **COMPARE),
    "logical_xor": binary(cnp.logical_xor, **COMPARE),
    "bitwise_and": Case(draw_bitwise(lambda a, b: a & b), INTS),
    "bitwise_or": Case(draw_bitwise(lambda a, b: a | b), INTS),
    "bitwise_xor": Case(draw_bitwise(lambda a, b: a ^ b), INTS),
    "mod": Case(integer_division(cnp.mod), ALL),
    "floor_divide": Case(integer_division(cnp.floor_divide), ALL),
    "where": Case(draw_where, ALL),
    "clip": Case(draw_clip),
    "sum": reduction(cnp.sum),
    "mean": reduction(cnp.mean),
    "amax": reduction(cnp.amax, distinct),
    "amin": reduction(cnp.amin, distinct),
    "prod": Case(draw_prod, ALL),
    "logsumexp": reduction(cnp.logsumexp, inside("logsumexp"), NUMERIC),
    # statistics family (issue 13)
    "cumsum": Case(draw_cumsum, ALL),
    "cumprod": Case(draw_cumprod, ALL),
    "sort": Case(along_axis(cnp.sort, distinct), ALL),
    "argsort": Case(along_axis(cnp.argsort, distinct), ALL),
    "searchsorted": Case(draw_searchsorted, NUMERIC),
    "argmax": Case(draw_arg(cnp.argmax)),
    "argmin": Case(draw_arg(cnp.argmin)),
    "matmul": Case(draw_matmul),
    # linalg family
    "einsum": Case(draw_einsum),
    "solve": Case(draw_solve, LINALG_DTYPES),
    "cholesky": Case(draw_cholesky, LINALG_DTYPES),
    "eigh": Case(draw_eigh, LINALG_DTYPES),
    "eig": Case(draw_eig, LINALG_DTYPES),
    "svd": Case(draw_svd, LINALG_DTYPES),
    "qr": Case(draw_qr, LINALG_DTYPES),
    "det": Case(draw_square(cnp.linalg.det), LINALG_DTYPES),
    "slogdet": Case(draw_square(lambda a: tuple(cnp.linalg.slogdet(a))), LINALG_DTYPES),
    "pinv": Case(draw_pinv, LINALG_DTYPES),
    "reshape": Case(draw_reshape, ALL),
    "transpose": Case(draw_transpose, ALL),
    "broadcast_to": Case(draw_broadcast_to, ALL),
    "concatenate": Case(draw_concatenate, ALL),
    "index": Case(draw_index, ALL),
    "scatter_add": Case(draw_scatter_add, NUMERIC),
    # scan and indexed updates (issue 13)
    "write_row": Case(draw_write_row, NUMERIC),
    "scatter": Case(draw_scatter, NUMERIC),
    "roll": Case(draw_roll, ALL),
    "astype": Case(draw_astype, ALL),
    "const": Case(draw_const, ALL),
    # complex numbers and fft (issue 13, complex+fft family)
    "real": complex_unary(cnp.real),
    "imag": complex_unary(cnp.imag),
    "conj": complex_unary(cnp.conj),
    "angle": complex_unary(cnp.angle),
    "fft": Case(draw_fft, COMPLEX + (F64, F32)),
    "rfft": Case(draw_rfft, (F64, F32)),
    "irfft": Case(draw_irfft, COMPLEX),
    "stop_gradient": unary(cg.stop_gradient, dtypes=ALL),
}

# custom rules delegate to user functions (tests/transforms/test_custom.py covers them), nested
# transformations to sub-programs (tests/transforms/test_higher_order.py)
CUSTOM = {n for n, p in PRIMITIVES.items() if p.family in ("custom", "transform")}
DIFFERENTIABLE = sorted(n for n, p in PRIMITIVES.items() if not p.nondiff and n not in CUSTOM)
BINARY_DIFFERENTIABLE = sorted(n for n in DIFFERENTIABLE if isinstance(CASES[n], BinaryCase))


# ---------------------------------------------------------------------------------
# 1. The table is complete, and so is this file
# ---------------------------------------------------------------------------------


def test_every_primitive_has_rules_or_is_marked_nondiff():
    # custom_vjp has a reverse rule only, on purpose (forward mode through it is refused)
    missing = [n for n, p in PRIMITIVES.items()
               if not (p.nondiff or n == "const" or n == "custom_vjp")
               and (p.vjp is None or p.jvp is None)]
    assert not missing, f"primitives without a VJP or JVP rule: {missing}"


# Emitted only by the reverse builder (never reachable from cfgrad.numpy): tested below
# through the adjoints that use them.
INTERNAL = {n for n, facts in FACTS.items() if facts.adjoint_only}


def test_every_primitive_has_a_case_here():
    missing = set(PRIMITIVES) - set(CASES) - INTERNAL - CUSTOM
    assert not missing, f"no test case for {missing}"
    unknown = set(CASES) - set(PRIMITIVES)
    assert not unknown, f"cases for primitives not in the table: {unknown}"
    assert all(PRIMITIVES[n].family == "internal" for n in INTERNAL)


def test_in_place_accumulation_never_touches_shared_buffers():
    """A reverse loop accumulates a closed-over weight's gradient in place (on a `copy`:
    `accumulate_outer` for the weight, `accumulate_index` for the rows xs[i] read); the
    gradient must not alias the compiled constants or the previous call's result, and
    must equal the plain sum of per-iteration contributions."""
    W = np.arange(6.0).reshape(2, 3) / 10

    def f(w, xs):
        return cg.fori_loop(0, xs.shape[0], lambda i, s: s + cnp.sum(cnp.tanh(w @ xs[i])), 0.0)

    xs = np.linspace(-1.0, 1.0, 12).reshape(4, 3)
    ops = {n.op for b in cg.adjoint(cg.lower(f, W, xs)).blocks for n in b.nodes}
    assert {"copy", "accumulate_outer", "accumulate_index"} <= ops
    g = cg.grad(f, argnums=(0, 1))
    first = g(W, xs)
    kept = [a.copy() for a in first]
    second = g(W, xs)
    for a, b, k in zip(first, second, kept):
        assert b is not a
        np.testing.assert_array_equal(a, k)  # the second call did not write into the first
        np.testing.assert_array_equal(b, k)
    expected = sum(np.outer(1 - np.tanh(W @ x) ** 2, x) for x in xs)
    np.testing.assert_allclose(first[0], expected, rtol=1e-12)
    rows = np.stack([(1 - np.tanh(W @ x) ** 2) @ W for x in xs])
    np.testing.assert_allclose(first[1], rows, rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("steps", [0, 1, 7, 8, 9, 33])
def test_outer_product_accumulation_is_batched_and_exact(dtype, steps):
    """The gradient of a closed-over matrix in `W @ h` inside a loop is a sum of outer
    products; the reverse builder turns it into `accumulate_outer`, which the interpreter
    adds in blocks of matrix products (RankOneSum). Step counts below, at and beyond a
    block (8 pairs for a 3×4 matrix, the minimum) and the loop run twice (nested in an
    outer loop, so a fresh accumulator per execution): the gradient is a plain array equal
    to the sum computed here, and the previous call's result is never written into."""
    rng = np.random.default_rng(steps)
    W = (rng.standard_normal((3, 4)) * 0.5).astype(dtype)
    xs = rng.standard_normal((max(steps, 1), 4)).astype(dtype)

    def f(w, xs):
        def outer(j, s):
            return cg.fori_loop(0, steps, lambda i, a: a + cnp.sum(cnp.tanh(w @ xs[i])), s)
        return cg.fori_loop(0, 2, outer, cnp.zeros((), dtype))

    ops = {n.op for b in cg.adjoint(cg.lower(f, W, xs)).blocks for n in b.nodes}
    assert "accumulate_outer" in ops
    g = cg.grad(f)
    first = g(W, xs)
    kept = first.copy()
    second = g(W, xs)
    assert type(first) is np.ndarray and first.dtype == dtype
    np.testing.assert_array_equal(first, kept)
    np.testing.assert_array_equal(second, kept)
    expected = 2 * sum((np.outer(1 - np.tanh(W.astype(np.float64) @ x) ** 2, x)
                        for x in xs[:steps].astype(np.float64)), np.zeros((3, 4)))
    tolerance = 1e-12 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(first, expected, rtol=tolerance, atol=tolerance)


def test_batched_accumulator_read_inside_the_program_is_dense():
    """W is also used before the loop, so the reverse pass adds that use's gradient to
    the loop's batched accumulator after the reverse loop: that reader, and the result,
    see the array with all pending products added in, under anomaly detection too."""
    W = np.array([[0.3, -0.2], [0.1, 0.4]])
    xs = np.linspace(-1.0, 1.0, 40).reshape(20, 2)

    def f(w, xs):
        h0 = cnp.tanh(w @ cnp.ones(2))
        h = cg.fori_loop(0, 20, lambda i, h: cnp.tanh(w @ h + xs[i]), h0)
        return cnp.sum(h * h)

    ops = {n.op for b in cg.adjoint(cg.lower(f, W, xs)).blocks for n in b.nodes}
    assert "accumulate_outer" in ops
    check_grads(f, (W, xs), modes=("rev",))
    with cg.detect_anomaly():
        got = cg.grad(f)(W, xs)
    assert type(got) is np.ndarray
    np.testing.assert_array_equal(got, cg.grad(f)(W, xs))


class PendingSum(Deferred):
    """The toy deferred value: a sum whose terms are added up only when it is read."""

    __slots__ = ("terms",)
    materialized = 0  # how often any PendingSum added pending terms (the test resets it)

    def __init__(self, first: np.ndarray):
        self.terms = [first]

    def peek(self) -> np.ndarray:
        return sum(self.terms[1:], self.terms[0])

    def materialize(self) -> np.ndarray:
        if len(self.terms) > 1:
            PendingSum.materialized += 1
            self.terms = [self.peek()]
        return self.terms[0]


@pytest.fixture
def pending_add(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[type]]:
    """`pending_add %acc, %x` (acc + x, deferred) in the table for one test, declared like
    `accumulate_outer` (`deferred_result`, its accumulator in `deferred_inputs`); gives the
    list of the accumulator types its implementation was called with. monkeypatch takes
    the entry out again, and the verifier's per-op cache forgets it."""
    seen: list[type] = []

    def impl(acc: Any, x: np.ndarray) -> PendingSum:
        seen.append(type(acc))
        if not isinstance(acc, PendingSum):
            acc = PendingSum(acc)
        acc.terms.append(x)
        return acc

    monkeypatch.setitem(PRIMITIVES, "pending_add", Primitive(
        name="pending_add", impl=impl, abstract=lambda types: types[0], family="internal",
        promote="none", nondiff=True, deferred_result=True, deferred_inputs=(0,)))
    yield seen
    cfgrad.verify._operands.cache_clear()


PENDING_LOOP = """program pending(%x: f64[3]) -> (f64[3], f64[3])
  region loop#0 fori preheader b0 header b1 body b2 latch b2 exit b3 bounds (0, 3)
b0:
  Jmp b1
b1: preds (b0, b2)
  %0: i64[] = Phi (b0: 0, b2: %3)
  %1: f64[3] = Phi (b0: %x, b2: %4)
  %2: bool[] = lt %0, 3
  Cond %2 -> Proj(T) b2 | Proj(F) b3
b2: preds (b1.T)
  %3: i64[] = add %0, 1
  %4: f64[3] = pending_add %1, %x
  Jmp b1
b3: preds (b1.F)
  %5: i64[] = Phi (b1.F: %0)
  %6: f64[3] = Phi (b1.F: %1)
  %7: f64[3] = mul {read}, 2.0
  Return %6, %7
"""


@pytest.mark.parametrize("read", ["%6", "%x"])
def test_a_deferred_result_is_the_table_entrys_business(pending_add, read):
    """A primitive the interpreter has never heard of, declared with `deferred_result` and
    `deferred_inputs` only: the loop carries its Deferred back into it as it is, and an
    ordinary reader (`mul %6`, when there is one) and the Return see plain arrays, the
    pending work done once, by the first of them. Under anomaly detection its result is
    tested as `peek` shows it, which does no work early."""
    x = np.array([1.0, -2.0, 0.5])
    program = cg.parse_program(PENDING_LOOP.format(read=read))
    for check in (False, True):
        pending_add.clear()
        PendingSum.materialized = 0
        total, doubled = Machine(Compiled(program), check=check).run([x])
        assert pending_add == [np.ndarray, PendingSum, PendingSum]
        assert type(total) is np.ndarray and type(doubled) is np.ndarray
        np.testing.assert_array_equal(total, 4 * x)
        np.testing.assert_array_equal(doubled, (8 if read == "%6" else 2) * x)
        assert PendingSum.materialized == 1
    pending_add.clear()
    with np.errstate(over="ignore"), pytest.raises(cg.AnomalyError, match="pending_add"):
        Machine(Compiled(program), check=True).run([np.full(3, 1e308)])
    assert pending_add == [np.ndarray]  # the first sum, x + x, is the anomaly


# ---------------------------------------------------------------------------------
# 2. VJP and JVP against finite differences
# ---------------------------------------------------------------------------------


def check_rules(f: Callable, args: tuple, **tolerances: float) -> None:
    """check_grads in both modes, plus what its contraction cannot see: each cotangent
    has its input's shape and dtype, and the tangent its output's."""
    check_grads(f, args, modes=("fwd", "rev"), **tolerances)
    out, pullback = cg.vjp(f, *args)
    outs, out_tree = treelib.flatten(out)
    cts = pullback(treelib.unflatten(out_tree, [np.ones_like(o) for o in outs]))
    for i, (x, g) in enumerate(zip(args, cts)):
        assert (np.shape(g), np.asarray(g).dtype) == (x.shape, x.dtype), f"cotangent {i}"
    _, tangent = cg.jvp(f, args, tuple(np.ones_like(x) for x in args))
    for i, (o, t) in enumerate(zip(outs, treelib.flatten(tangent)[0])):
        o, t = np.asarray(o), np.asarray(t)
        if o.dtype.kind in "fc":
            assert (t.shape, t.dtype) == (o.shape, o.dtype), f"tangent of output {i}"


@pytest.mark.parametrize("name", DIFFERENTIABLE)
@given(data=st.data())
def test_vjp_and_jvp_match_finite_differences(name, data):
    f, args = CASES[name].draw(data, F64)
    check_rules(f, args)


@pytest.mark.parametrize("shapes", EDGE_PAIRS, ids=str)
@pytest.mark.parametrize("name", BINARY_DIFFERENTIABLE)
def test_binary_rules_on_broadcasting_edge_shapes(name, shapes):
    case = CASES[name]
    assert isinstance(case, BinaryCase)
    for seed, which in enumerate(["xy", "x", "y"]):
        f, args = case.build(np.random.default_rng(seed), shapes, which, F64)
        check_rules(f, args)


def test_float64_to_float32_round_trip():
    """astype's VJP casts back: exact for this linear map up to float32 rounding, which
    a wider eps keeps well below the tolerance."""
    x = np.random.default_rng(0).uniform(-2, 2, (3, 4))
    check_rules(lambda a: cnp.astype(cnp.astype(a, np.float32) * 3.0, np.float64), (x,),
                eps=1e-2, rtol=1e-3, atol=1e-3)


# ---------------------------------------------------------------------------------
# 3. Documented subgradients at kinks
# ---------------------------------------------------------------------------------

@pytest.mark.parametrize("f, args, expected", [k[1:] for k in KINKS], ids=[k[0] for k in KINKS])
def test_documented_subgradient_at_kinks(f, args, expected):
    """grad of the sum (rev) is the documented value; a one-hot tangent per argument (fwd)
    gives the same numbers summed, so both modes share the convention."""
    def total(*a):
        return cnp.sum(f(*a))

    got = cg.grad(total, tuple(range(len(args))))(*args)
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(g, e)
    for i, e in enumerate(expected):
        tangents = tuple(np.full(np.shape(a), float(j == i)) for j, a in enumerate(args))
        _, t = cg.jvp(total, args, tangents)
        assert t == pytest.approx(np.sum(e), rel=1e-15)


# ---------------------------------------------------------------------------------
# 4. Numpy implementation vs shape/dtype rule
# ---------------------------------------------------------------------------------


def example_input(t: Any, rng: np.random.Generator) -> np.ndarray:
    """Any value of type `t`; integers are 0, a valid index and shift for every shape."""
    if t.dtype == np.bool_:
        return rng.random(t.shape) < 0.5
    if t.dtype.kind in "iu":
        return np.zeros(t.shape, t.dtype)
    return rng.uniform(0.5, 1.5, t.shape).astype(t.dtype)


@pytest.mark.parametrize("name", sorted(CASES))
@given(data=st.data())
def test_impl_output_matches_abstract_rule(name, data):
    """Each node of the primitive in the lowered program: its numpy implementation, run on
    inputs of the node's (promoted) input types, returns the type the rule inferred. And
    the whole function run eagerly (numpy), interpreted and lowered agrees on types."""
    case = CASES[name]
    dtype = data.draw(st.sampled_from(case.dtypes), label="dtype")
    f, args = case.draw(data, dtype)
    program = cg.lower(f, *args)
    nodes = [n for b in program.blocks for n in b.nodes if n.op == name]
    assert nodes, f"the case for {name} does not emit it"
    rng = np.random.default_rng(0)
    prim = PRIMITIVES[name]
    with np.errstate(all="ignore"):
        for n in nodes:
            inputs = [example_input(v.type, rng) for v in n.inputs]
            got = prim.impl(*inputs, **n.params)
            for g, o in zip(got if prim.multi_output else (got,), n.outputs, strict=True):
                if not prim.aliases:  # a new array: owned_results hands it over as it is
                    assert not any(np.shares_memory(g, x) for x in inputs), f"{name}{n.params}"
                g, t = np.asarray(g), o.type
                assert (g.shape, g.dtype) == (t.shape, t.dtype), f"{name}{n.params}"
        eager = treelib.flatten(f(*args))[0]
        interpreted = treelib.flatten(evaluate(f, *args)[0])[0]
    for e, i, v in zip(eager, interpreted, program.outputs, strict=True):
        e, i = np.asarray(e), np.asarray(i)
        assert (e.shape, e.dtype) == (i.shape, i.dtype) == (v.type.shape, v.type.dtype)
        np.testing.assert_array_equal(i, e)


# ---------------------------------------------------------------------------------
# 5. Stable primitives at extreme inputs
# ---------------------------------------------------------------------------------

@pytest.mark.parametrize("f, x, value, derivative", [e[1:] for e in EXTREMES],
                         ids=[e[0] for e in EXTREMES])
def test_stable_primitives_at_extreme_inputs(f, x, value, derivative):
    """Value, gradient and tangent are finite and accurate; run eagerly, the numpy
    implementation does not even overflow on the way (underflow to 0 is allowed)."""
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        np.testing.assert_allclose(f(x), value, rtol=1e-13, atol=0)
    got_value, got_grad = cg.value_and_grad(f)(x)
    _, tangent = cg.jvp(f, (x,), (np.ones_like(x),))
    assert np.all(np.isfinite(got_value)) and np.all(np.isfinite(got_grad))
    np.testing.assert_allclose(got_value, value, rtol=1e-13, atol=0)
    np.testing.assert_allclose(got_grad, derivative, rtol=1e-13, atol=1e-300)
    np.testing.assert_allclose(tangent, np.sum(derivative), rtol=1e-13, atol=1e-300)


# ---------------------------------------------------------------------------------
# 6. Eager use on numpy arrays
# ---------------------------------------------------------------------------------

_X = np.random.default_rng(1).uniform(0.2, 2.0, (3, 4))
_Y = np.random.default_rng(2).uniform(-2.0, 2.0, (4,))
_I = np.array([[1, 5, 2], [7, 0, 3]])
_UNARY = ("exp", "log", "log1p", "expm1", "sin", "cos", "tan", "tanh", "sinh", "cosh", "arctan",
          "sqrt", "abs", "sign", "floor", "rint", "negative", "isfinite", "square")
_BINARY = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "mod", "floor_divide",
           "power",
           "less", "greater_equal", "equal", "logical_and")
EAGER = [
    # (id, cfgrad.numpy call, numpy reference)
    *[(f"{n} {x.dtype}", lambda n=n, x=x: getattr(cnp, n)(x), lambda n=n, x=x: getattr(np, n)(x))
      for n in _UNARY for x in (_X, _X.astype(np.float32))],
    *[(n, lambda n=n: getattr(cnp, n)(_X, _Y), lambda n=n: getattr(np, n)(_X, _Y))
      for n in _BINARY],
    ("mod int", lambda: cnp.mod(_I, 3), lambda: np.mod(_I, 3)),
    ("power int", lambda: cnp.power(_I, 3), lambda: np.power(_I, 3)),
    ("sigmoid", lambda: cnp.sigmoid(_Y), lambda: 1.0 / (1.0 + np.exp(-_Y))),
    ("relu", lambda: cnp.relu(_Y), lambda: np.maximum(_Y, 0.0)),
    ("softplus", lambda: cnp.softplus(_Y), lambda: np.log1p(np.exp(_Y))),
    ("logsumexp", lambda: cnp.logsumexp(_X, axis=1),
     lambda: np.log(np.sum(np.exp(_X), axis=1))),
    ("where", lambda: cnp.where(_X > 1, _X, _Y), lambda: np.where(_X > 1, _X, _Y)),
    ("clip", lambda: cnp.clip(_X, 0.5, None), lambda: np.clip(_X, 0.5, None)),
    ("sum keepdims", lambda: cnp.sum(_X, axis=0, keepdims=True),
     lambda: np.sum(_X, axis=0, keepdims=True)),
    ("sum int", lambda: cnp.sum(_I), lambda: np.sum(_I)),
    ("mean int", lambda: cnp.mean(_I, axis=-1), lambda: np.mean(_I, axis=-1)),
    ("prod", lambda: cnp.prod(_X, axis=(0, 1)), lambda: np.prod(_X, axis=(0, 1))),
    ("max", lambda: cnp.max(_X, axis=1), lambda: np.max(_X, axis=1)),
    ("min", lambda: cnp.min(_X), lambda: np.min(_X)),
    ("argmax", lambda: cnp.argmax(_X, axis=0), lambda: np.argmax(_X, axis=0)),
    ("argmin", lambda: cnp.argmin(_X), lambda: np.argmin(_X)),
    ("matmul", lambda: cnp.matmul(_X, _Y), lambda: np.matmul(_X, _Y)),
    ("dot", lambda: cnp.dot(_X.T, _X), lambda: np.dot(_X.T, _X)),
    ("reshape", lambda: cnp.reshape(_X, (2, -1)), lambda: np.reshape(_X, (2, -1))),
    ("transpose", lambda: cnp.transpose(_X), lambda: np.transpose(_X)),
    ("broadcast_to", lambda: cnp.broadcast_to(_Y, (2, 3, 4)),
     lambda: np.broadcast_to(_Y, (2, 3, 4))),
    ("expand_dims", lambda: cnp.expand_dims(_X, 1), lambda: np.expand_dims(_X, 1)),
    ("squeeze", lambda: cnp.squeeze(_X[:1]), lambda: np.squeeze(_X[:1])),
    ("concatenate", lambda: cnp.concatenate([_X, _X], axis=-1),
     lambda: np.concatenate([_X, _X], axis=-1)),
    ("concatenate axis=None", lambda: cnp.concatenate([_X, _Y], axis=None),
     lambda: np.concatenate([_X, _Y], axis=None)),
    ("stack", lambda: cnp.stack([_Y, _Y], axis=1), lambda: np.stack([_Y, _Y], axis=1)),
    ("take", lambda: cnp.take(_X, [2, 2, 0], axis=1), lambda: np.take(_X, [2, 2, 0], axis=1)),
    ("roll", lambda: cnp.roll(_X, -5), lambda: np.roll(_X, -5)),
    ("roll axis", lambda: cnp.roll(_X, 2, axis=1), lambda: np.roll(_X, 2, axis=1)),
    ("astype", lambda: cnp.astype(_X, np.float32), lambda: _X.astype(np.float32)),
    ("zeros_like scalar", lambda: cnp.zeros_like(1.5), lambda: np.zeros_like(1.5)),
    ("ones_like list", lambda: cnp.ones_like([1, 2]), lambda: np.ones_like([1, 2])),
    ("full_like", lambda: cnp.full_like(_I, 7), lambda: np.full_like(_I, 7)),
    ("exp scalar", lambda: cnp.exp(0.5), lambda: np.exp(0.5)),
]


@pytest.mark.parametrize("ours, reference", [e[1:] for e in EAGER], ids=[e[0] for e in EAGER])
def test_eager_calls_compute_what_numpy_does(ours, reference):
    got, want = ours(), reference()
    assert isinstance(got, np.ndarray | np.generic)
    assert (np.shape(got), np.asarray(got).dtype) == (np.shape(want), np.asarray(want).dtype)
    np.testing.assert_allclose(got, want, rtol=1e-14)


SCALAR_BINARY = {n: (c.fn, c.sx, c.sy) for n, c in CASES.items() if isinstance(c, BinaryCase)}
SCALAR_BINARY["mod"] = (cnp.mod, uniform(-3.0, 3.0), away_from_zero)
SCALAR_BINARY["floor_divide"] = (cnp.floor_divide, uniform(-3.0, 3.0), away_from_zero)


@pytest.mark.parametrize("name", sorted(SCALAR_BINARY))
def test_interpreter_computes_what_numpy_does_on_scalars(name):
    """The interpreter runs 0-d values as numpy scalars and some ufuncs as Python operators
    (cheaper per call); the result must still be the ufunc's, to the last bit."""
    fn, sx, sy = SCALAR_BINARY[name]
    rng = np.random.default_rng(0)
    differ = []
    for a, b in zip(sx(rng, (300,)), sy(rng, (300,))):
        x, y = np.asarray(a), np.asarray(b)
        if evaluate(fn, x, y)[0] != fn(x, y):
            differ.append((a, b))
    assert not differ, f"{len(differ)} of 300 differ from numpy, e.g. {name}{differ[0]}"


# ---------------------------------------------------------------------------------
# 7. float32 programs stay float32
# ---------------------------------------------------------------------------------

LOW_PRECISION = {
    "scalars": lambda x: cnp.sum(x * 2.0 + 1 - x / 3.0 + x % 0.7),
    "power": lambda x: cnp.sum(cnp.abs(x) ** 2.5 + 2.0 ** x),
    "maximum": lambda x: cnp.sum(cnp.maximum(x, 0.3) * cnp.relu(x)),
    "where+clip": lambda x: cnp.sum(cnp.where(x > 0, x, 0.0) + cnp.clip(x, -0.1, None)),
    "sigmoid": lambda x: cnp.sum(cnp.sigmoid(x) * cnp.softplus(x)),
    "reductions": lambda x: cnp.logsumexp(x) + cnp.mean(x) + cnp.max(x) + cnp.prod(x),
    "matmul+index": lambda x: cnp.sum((x @ x.T)[np.array([0, 0, 1])]),
    "loop": lambda x: cnp.sum(cg.fori_loop(0, 3, lambda t, c: c * 0.5 + x[t % 2], x[0])),
}


@pytest.mark.parametrize("dtype", [F32, F16], ids=str)
@pytest.mark.parametrize("name", sorted(LOW_PRECISION))
def test_low_precision_programs_keep_their_dtype(name, dtype):
    """Python scalars are weakly typed, so they never promote a float32 program to float64:
    value, gradient and tangent all keep the input's dtype."""
    f = LOW_PRECISION[name]
    x = np.array([[0.5, -0.3], [1.2, 0.7]], dtype)
    value, g = cg.value_and_grad(f)(x)
    _, tangent = cg.jvp(f, (x,), (np.ones_like(x),))
    assert np.asarray(value).dtype == g.dtype == np.asarray(tangent).dtype == dtype
    assert cg.lower(f, x).outputs[0].type.dtype == dtype


# ---------------------------------------------------------------------------------
# Integer // and %: exact numpy semantics, never through float64 (issue 10, item 6)
# ---------------------------------------------------------------------------------

INT64_DIVISIONS = [(2**60 + 1, 3), (-(2**62) - 7, 5), (2**63 - 1, -2), (3, 0), (-7, 0),
                   (-7, 2), (7, -2), (-(2**63), -1), (0, 0), (-(2**63), 1)]


@pytest.mark.parametrize(("a", "b"), INT64_DIVISIONS)
def test_traced_int64_floor_divide_and_mod_are_exact(a: int, b: int) -> None:
    a, b = np.int64(a), np.int64(b)

    def f(x, y):
        return x // y, x % y, cnp.floor_divide(x, y), cnp.mod(x, y), 10 // y, x // 3

    with np.errstate(all="ignore"):
        want = (a // b, a % b, a // b, a % b, np.int64(10) // b, a // np.int64(3))
    got, _ = evaluate(f, a, b)
    for g, w in zip(got, want, strict=True):
        assert np.asarray(g).dtype == np.int64
        assert int(g) == int(w), (g, w)


def test_integer_division_in_a_loop_carry_is_exact() -> None:
    """An integer recurrence over values beyond 2**53 (where float64 is inexact), traced
    with a fori_loop and a while_loop, equals the same recurrence in numpy int64."""
    def step(c):
        return (c * 7 + 1) // 3 + c % 5 - (c // 1024) * 2

    def f(a, n):
        looped = cg.fori_loop(0, n, lambda i, c: step(c), a)
        counted = cg.while_loop(lambda c: c[0] > 0, lambda c: (c[0] // 2, c[1] + c[0] % 2),
                                (a, np.int64(0)))
        return looped, counted[1]

    a = np.int64(2**52 + 12345)  # stays below 2**63 over the six steps
    c = a
    for _ in range(6):
        c = step(c)
    got, _ = evaluate(f, a, 6)
    assert int(got[0]) == int(c)
    assert int(got[1]) == bin(int(a)).count("1")


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.uint8, np.uint64, np.bool_])
def test_small_and_unsigned_integer_division_keeps_numpy_dtypes(dtype: Any) -> None:
    x = np.array([7, 0, 5, 1], dtype)
    y = np.array([2, 3, 0, 1], dtype)
    got, _ = evaluate(lambda x, y: (x // y, x % y), x, y)
    with np.errstate(all="ignore"):
        want = (np.floor_divide(x, y), np.mod(x, y))
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("base", [np.int64(2), np.array([2, 4], np.int32), np.int8(3)])
def test_integer_to_a_negative_integer_power_is_refused_as_in_numpy(base: Any) -> None:
    """numpy raises ValueError; a traced int ** -1 gave the float 0.5."""
    with pytest.raises(ValueError, match="negative integer powers are not allowed"):
        evaluate(lambda x: x ** -1, base)
    with pytest.raises(ValueError, match="negative integer powers"):
        np.asarray(base) ** -1
    assert evaluate(lambda x: x ** 2, base)[0].dtype == np.asarray(base).dtype


# ---------------------------------------------------------------------------------
# Static parameters: the shape rule names them and checks their values
# ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PRIMITIVES))
def test_rules_and_implementation_take_the_shape_rules_parameters(name):
    """The verifier holds a node's parameters to its shape rule's signature
    (`Primitive.params`), so the implementation and the derivative rules must take
    exactly those: a name one of them lacked would pass the verifier and fail in a run or
    in `cg.adjoint`."""
    prim = PRIMITIVES[name]
    if not isinstance(prim.impl, np.ufunc) and prim.impl is not np.clip:
        named = [p for p in inspect.signature(prim.impl).parameters.values()
                 if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        assert set(prim.params) <= {p.name for p in named}
        # whatever else the implementation names is an input, never an optional parameter
        assert all(p.default is p.empty for p in named if p.name not in prim.params)
    elif prim.impl is np.clip:
        assert prim.params == ()
    for rule in (prim.vjp, prim.jvp):
        if rule is not None:
            assert tuple(inspect.signature(rule).parameters)[3:] == prim.params, rule


def _traced(f: Callable) -> Any:
    return cg.lower(f, np.arange(6.0).reshape(2, 3), 2.0)


@pytest.mark.parametrize("f, message", [
    (lambda m, x: bind("sum", m, axes=(5,), keepdims=False),
     "sum: parameter axes=(5,): 5 is not an axis of f64[2,3] (its axes: 0 to 1)"),
    (lambda m, x: cnp.sum(m, axis=(0, 0)), "sum: parameter axes=(0, 0) repeats an axis"),
    (lambda m, x: bind("mean", m, axes=(0,), keepdims="no"),
     "mean: parameter keepdims must be True or False, got 'no'"),
    (lambda m, x: bind("integer_pow", x, n=2.5), "integer_pow: parameter n must be an int"),
    (lambda m, x: bind("astype", x, dtype=np.dtype(np.longdouble)),
     "astype: parameter dtype must be one of the IR's dtypes"),
    (lambda m, x: bind("clip", x, 0.0, 1.0, foo=1), "clip takes no parameters, got foo"),
    (lambda m, x: bind("sum", m, axes=(0,)), "sum takes parameters axes, keepdims; keepdims "
                                             "is missing"),
    (lambda m, x: bind("reshape", m, shape=(6.0,)), "reshape: parameter shape must be a tuple"),
    (lambda m, x: cnp.max(m[:, 3:], axis=1), "amax: cannot reduce f64[2,0] over its empty "
                                             "axis 1"),
])
def test_tracing_a_bad_parameter_is_a_lowering_error(f, message):
    """The shape rules check parameters for tracing as for parsed text: the same mistake is
    a LoweringError at the call that made it, not an error when the program runs."""
    with pytest.raises(cg.LoweringError, match=re.escape(message)):
        _traced(f)
