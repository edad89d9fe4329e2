"""Numba helpers that compiled programs call (`native.py` generates the calls).

The derivative table's Numba sources (each entry's `Source`, in cfgrad/primitives/) are
written against these names (`K.total(x, zero)`): what one expression of Numba's numpy
subset cannot say, or cannot say with numpy's exact rounding, is a small function here.
Every helper computes what its primitive's numpy implementation computes, in the same
order of floating-point operations where the comment says bitwise.
"""

from __future__ import annotations

import inspect
import weakref
from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic, overload
from numpy.lib import _function_base_impl as numpy_function_base

from .primitives.elementwise import square_and_multiply

_PAIRWISE_BLOCK = 128  # numpy's PW_BLOCKSIZE (numpy/_core/src/umath/loops_utils.h.src)


@numba.njit(cache=True)
def grow(a):
    """`a` (C-contiguous) with room for twice as many rows: the logs and tapes of a
    compiled run are arrays whose first axis is a stack, doubled when full (amortised O(1)
    per push). An element loop, not `bigger[:n] = a`: Numba takes seconds to compile a
    slice assignment, and every program with a loop calls this."""
    bigger = np.empty((2 * a.shape[0],) + a.shape[1:], a.dtype)
    into, rows = bigger.reshape(-1), a.reshape(-1)
    for i in range(rows.shape[0]):
        into[i] = rows[i]
    return bigger


@numba.njit(cache=True)
def _pairwise_block(a, start, n, zero):
    """numpy's pairwise summation of a[start:start+n] for n <= 128 (loops_utils.h.src,
    `pairwise_sum`): sequential below 8 terms, else eight running sums combined as
    ((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7)), then the remainder in order."""
    if n < 8:
        res = zero  # numpy starts from 0. (so -0.0 entries give +0.0)
        for i in range(n):
            res += a[start + i]
        return res
    r0 = a[start]
    r1 = a[start + 1]
    r2 = a[start + 2]
    r3 = a[start + 3]
    r4 = a[start + 4]
    r5 = a[start + 5]
    r6 = a[start + 6]
    r7 = a[start + 7]
    i = 8
    stop = n - n % 8
    while i < stop:
        r0 += a[start + i]
        r1 += a[start + i + 1]
        r2 += a[start + i + 2]
        r3 += a[start + i + 3]
        r4 += a[start + i + 4]
        r5 += a[start + i + 5]
        r6 += a[start + i + 6]
        r7 += a[start + i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[start + i]
        i += 1
    return res


@numba.njit(cache=True)
def _pairwise(a, start, n, zero):
    """numpy's pairwise sum of a[start:start+n]: above 128 terms, the two halves (the
    first rounded down to a multiple of 8) summed apiece and added. numpy recurses; this
    walks the same tree with an explicit stack (Numba cannot cache recursive functions)."""
    if n <= _PAIRWISE_BLOCK:
        return _pairwise_block(a, start, n, zero)
    starts = np.empty(128, np.int64)
    sizes = np.empty(128, np.int64)
    states = np.empty(128, np.int64)
    values = np.empty(128, a.dtype)
    top, held = 0, 0
    starts[0], sizes[0], states[0] = start, n, 0
    while top >= 0:
        s, m = starts[top], sizes[top]
        if m <= _PAIRWISE_BLOCK:
            values[held] = _pairwise_block(a, s, m, zero)
            held += 1
            top -= 1
            continue
        half = m // 2
        half -= half % 8
        if states[top] == 0:  # the first half next
            states[top] = 1
            top += 1
            starts[top], sizes[top], states[top] = s, half, 0
        elif states[top] == 1:  # then the second
            states[top] = 2
            top += 1
            starts[top], sizes[top], states[top] = s + half, m - half, 0
        else:  # both done: first + second
            values[held - 2] = values[held - 2] + values[held - 1]
            held -= 1
            top -= 1
    return values[0]


@numba.njit(cache=True)
def total(x, zero):
    """The sum of every entry of `x`, as numpy's `x.sum()` rounds it: the pairwise sum of
    the entries added to numpy's initial 0 (`zero`, of the result's dtype: passed in, so
    that a sum allocates nothing but what a non-contiguous `x` needs)."""
    flat = np.ascontiguousarray(x).ravel()
    return zero + _pairwise(flat, 0, flat.shape[0], zero)


@numba.njit(cache=True)
def roll3(x3, shift):
    """np.roll(x3, shift, axis=1) of a contiguous (outer, n, inner) array: any array rolled
    along one axis, seen as the axes before it, it, and those after (one compiled version
    per dtype instead of one per rank and layout; element loops instead of `np.moveaxis`
    and slice assignments, which took Numba seconds to compile)."""
    o, n, i = x3.shape
    out = np.empty_like(x3)
    if n == 0:
        return out
    s = shift % n
    for a in range(o):
        for k in range(n):
            to = k + s - n if k + s >= n else k + s
            for c in range(i):
                out[a, to, c] = x3[a, k, c]
    return out


@numba.njit(cache=True)
def accumulate_outer(acc, a, b):
    """acc += outer(a, b), in place (the interpreter batches the same products into a
    matrix product per block, so the rounding differs: docs/jit.md)."""
    for i in range(a.shape[0]):
        ai = a[i]
        for j in range(b.shape[0]):
            acc[i, j] += ai * b[j]
    return acc


@numba.njit(cache=True, inline="always")
def bound(i, n):
    """A traced index i into an axis of n entries, checked (negative ones count from the
    end, as numpy's): out of range is numpy's IndexError, not a read past the array."""
    if i < -n or i >= n:
        raise IndexError("cfgrad.jit: a traced index is out of bounds for its axis")
    return i


@numba.njit(cache=True, inline="always")
def wrapped(i, n):
    """A traced index i into an axis of n entries, checked as `bound` checks it, as its
    place in the axis (a negative one counts from the end): an int64, so that the flat
    positions it goes into stay integers whatever i's integer type."""
    if i < -n or i >= n:
        raise IndexError("cfgrad.jit: a traced index is out of bounds for its axis")
    return np.int64(i) + n if i < 0 else np.int64(i)


@numba.njit(cache=True)
def offset_by(positions, i, stride, n):
    """positions + stride * (i's place in an axis of n entries, checked: `wrapped`): the
    flat positions an index reads, offset by a traced integer index along one axis."""
    step = stride * wrapped(i, n)
    out = np.empty(positions.shape[0], np.int64)
    for k in range(positions.shape[0]):
        out[k] = positions[k] + step
    return out


@numba.njit(cache=True)
def offset_by_each(positions, which, index, stride, n):
    """positions[k] + stride * (the place of the traced index array's entry which[k] in an
    axis of n entries): offset by an index array, its entries read where numpy's
    broadcasting puts them. Every entry is checked first, as numpy checks each index
    array, even where the broadcast result has no entries."""
    flat = np.ascontiguousarray(index).reshape(-1)
    for k in range(flat.shape[0]):
        wrapped(flat[k], n)
    out = np.empty(positions.shape[0], np.int64)
    for k in range(positions.shape[0]):
        out[k] = positions[k] + stride * wrapped(flat[which[k]], n)
    return out


@numba.njit(cache=True)
def set_at(z, index, value):
    """z[index] = value, returning z: a scatter into fresh zeros through a basic index."""
    z[index] = value
    return z


@numba.njit(cache=True)
def gather(flat, positions):
    """flat[positions]: advanced indexing through the flat positions it reads, worked out
    when the code was generated and offset by the traced indices at run time
    (primitives.indexing.positions_source)."""
    out = np.empty(positions.shape[0], flat.dtype)
    for k in range(positions.shape[0]):
        out[k] = flat[positions[k]]
    return out


@numba.njit(cache=True)
def add_at_positions(z, positions, values):
    """np.add.at(z, positions, values) on 1-D arrays: each value added where its position
    says, one after another in order, so repeated positions accumulate as numpy's do."""
    for k in range(positions.shape[0]):
        z[positions[k]] += values[k]
    return z


@numba.njit(cache=True)
def add_at_positions_into(acc, positions, values):
    """`add_at_positions` into the C-contiguous accumulator `acc` of any shape, in place,
    returning acc (a loop's gradient accumulator: a fresh copy, so contiguous)."""
    add_at_positions(acc.reshape(-1), positions, values)
    return acc


@numba.njit(cache=True)
def set_at_positions(z, positions, values):
    """z[positions] = values on 1-D arrays, one after another in order: of a repeated
    position the last value stays, as numpy's assignment through index arrays leaves it
    (the interpreter's `x.at[idx].set`)."""
    for k in range(positions.shape[0]):
        z[positions[k]] = values[k]
    return z


@numba.njit(cache=True)
def multiply_at_positions(z, positions, values):
    """np.multiply.at(z, positions, values) on 1-D arrays: the products in numpy's order
    (z's entry first, the values in turn), so repeated positions round as numpy's do."""
    for k in range(positions.shape[0]):
        z[positions[k]] = z[positions[k]] * values[k]
    return z


@numba.njit(cache=True)
def minimum_at_positions(z, positions, values):
    """np.minimum.at(z, positions, values) on 1-D arrays: numpy's minimum of z's entry
    and each value in turn (the value on a tie, NaN from either, as `minimum`)."""
    for k in range(positions.shape[0]):
        a, b = z[positions[k]], values[k]
        z[positions[k]] = a if a < b or a != a else b
    return z


@numba.njit(cache=True)
def maximum_at_positions(z, positions, values):
    """np.maximum.at(z, positions, values) on 1-D arrays, as `minimum_at_positions`."""
    for k in range(positions.shape[0]):
        a, b = z[positions[k]], values[k]
        z[positions[k]] = a if a > b or a != a else b
    return z


@numba.njit(cache=True)
def add_at(acc, index, value):
    """acc[index] += value in place, returning acc (a basic index: no repeats)."""
    acc[index] += value
    return acc


# x ** n for n > 16 by the chain of multiplications integer_pow's other forms write out (a
# negative n is 1 / this, written by the entry's source: here an integer x stays an integer,
# exact, where one function returning either would make every result a float)
integer_pow = numba.njit(cache=True)(square_and_multiply)

#: The files whose code the helpers compile: a compiled program's cache key hashes them.
SOURCE_FILES = (__file__, inspect.getsourcefile(square_and_multiply))


# -- Integer and floor division, remainders, integer powers: numpy's results at every
# operand, where the CPU's and Numba's differ. numpy's loops (numpy/_core/src/umath/
# loops_arithmetic.dispatch.c.src, loops.c.src, npymath's npy_divmod) give 0 for a zero
# divisor and wrap INT_MIN // -1 to INT_MIN; x86's idiv traps on both (SIGFPE, killing the
# process), Numba's np.remainder of signed integers calls it on INT_MIN % -1, its
# np.floor_divide gives 0 for INT_MIN // -1, its np.fmod of signed integers is an
# unsigned remainder, and its float floor division is floor(a / b) (-0.0 for -5.5 // inf,
# where numpy's is -1.0). A signed integer helper's result is computed in int64 (Numba's
# arithmetic on smaller integers): the kernel casts it to the operands' width, which wraps
# as numpy's does.


@numba.vectorize(cache=True)
def int_floor_divide(a, b):
    """numpy's a // b on signed integers: 0 for b == 0, -a for b == -1 (wrapping:
    INT_MIN // -1 is INT_MIN), else the floored quotient."""
    if b == 0:
        return 0
    if b == -1:
        return -a
    return a // b


@numba.vectorize(cache=True)
def int_remainder(a, b):
    """numpy's a % b on signed integers: 0 for b == 0 or -1, else the floored remainder
    (the sign of b)."""
    if b == 0 or b == -1:
        return 0
    return a % b


@numba.vectorize(cache=True)
def int_fmod(a, b):
    """numpy's fmod on signed integers: 0 for b == 0 or -1, else C's truncated remainder
    (the sign of a), from the floored one."""
    if b == 0 or b == -1:
        return 0
    r = a % b
    if r != 0 and (r < 0) != (a < 0):
        r -= b
    return r


@numba.njit(cache=True)
def nonnegative_exponents(y):
    """`y` (a scalar or an array of signed integers), after numpy's check of integer
    powers: a negative exponent raises numpy's ValueError, with its message."""
    if np.any(y < 0):
        raise ValueError("Integers to negative integer powers are not allowed.")
    return y


@numba.vectorize(cache=True)
def int_power(a, b):
    """numpy's a ** b on integers (b >= 0, see `nonnegative_exponents`) by repeated
    squaring, in uint64: the products wrap, and cast to the operands' width (the kernel
    casts) they are numpy's, without the signed overflow LLVM may assume never happens."""
    one = np.uint64(1)
    base = np.uint64(a)
    k = np.uint64(b)
    out = base if k & one else one
    k >>= one
    while k:
        base *= base
        if k & one:
            out *= base
        k >>= one
    return out


@numba.njit(cache=True, error_model="numpy")
def _float_divmod(a, b, one):
    """numpy's npy_divmod (npymath, npy_math_internal.h.src) for b != 0: the floored
    quotient and the remainder with b's sign, in the operands' precision (`one` is 1 of
    their type); a zero result takes its sign as numpy gives it."""
    zero = one - one
    mod = np.fmod(a, b)
    div = (a - mod) / b
    if mod != zero:  # (true for NaN, as C's `if (mod)`)
        if (b < zero) != (mod < zero):
            mod += b
            div -= one
    else:
        mod = np.copysign(zero, b)
    if div != zero:
        floordiv = np.floor(div)
        if div - floordiv > one / (one + one):  # snap to the nearest integer
            floordiv += one
    else:
        floordiv = np.copysign(zero, a / b)
    return floordiv, mod


@numba.vectorize(cache=True)
def float_floor_divide(a, b, one):
    """numpy's a // b on floats: a / b for b == 0 (±inf or nan), else npy_divmod's
    quotient."""
    if b == one - one:
        return a / b
    return _float_divmod(a, b, one)[0]


@numba.vectorize(cache=True)
def float_remainder(a, b, one):
    """numpy's a % b on floats: fmod for b == 0 (nan), else npy_divmod's remainder."""
    if b == one - one:
        return np.fmod(a, b)
    return _float_divmod(a, b, one)[1]


@intrinsic
def _run_signal_handlers(typingctx):
    """CPython's `PyErr_CheckSignals()` from compiled code (which holds the GIL): it runs
    the handlers of the signals that arrived (Ctrl-C's raises KeyboardInterrupt); when one
    raises, the function calling this returns with that exception set, as Numba's own
    calls into the C API do (`return_exc`). The symbol is resolved by name when the
    machine code is loaded, so the disk cache keeps working."""
    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(ir.IntType(32), [])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "PyErr_CheckSignals")
        status = builder.call(fn, [])
        with builder.if_then(builder.icmp_signed("!=", status, status.type(0)), likely=False):
            context.call_conv.return_exc(builder)
        return context.get_dummy_value()

    return types.none(), codegen


@numba.njit(cache=True)
def check_signals():
    """Run Python's pending signal handlers, raising what they raise: compiled loops call
    this every 1024th back edge, so that Ctrl-C stops them (native.py)."""
    _run_signal_handlers()


@numba.njit(cache=True)
def write_row(stack, t, row):
    """stack[t] = row in place, returning stack (a scan's output stack, `write_row`;
    `stack` C-contiguous). An element loop: Numba takes seconds to compile the slice
    assignment `stack[t] = row`."""
    into = stack[t].reshape(-1)
    i = 0
    for v in row.flat:
        into[i] = v
        i += 1
    return stack


@numba.njit(cache=True)
def write_value(stack, t, value):
    """stack[t] = value in place for a 1-d stack, returning stack (`write_row` of a
    scalar row)."""
    stack[t] = value
    return stack


@numba.njit(cache=True)
def add_into(acc, contribution):
    """acc += contribution in place, returning acc (primitives' `accumulate`)."""
    acc += contribution
    return acc


@numba.vectorize(cache=True)
def sigmoid(x, one):
    """primitives.elementwise._sigmoid_impl, entry by entry: from exp(-|x|), finite for any x; `one`
    of x's dtype, so float32 stays float32 (a literal 1 would make Numba widen it)."""
    e = np.exp(-np.abs(x))
    return one / (one + e) if x >= 0 else e / (one + e)


@numba.njit(cache=True)
def _quotient(ar, ai, br, bi, one):
    """(re, im) of (ar + i ai) / (br + i bi) as numpy computes it (Smith's method, in
    numpy's complex `divide` loop: numpy/_core/src/umath, the same operations in the same
    order); Numba's own complex division differs from it in the last bit."""
    br_abs, bi_abs = abs(br), abs(bi)
    if br_abs >= bi_abs:
        if br_abs == 0 and bi_abs == 0:  # division by zero: a complex inf or nan
            return ar / br_abs, ai / bi_abs
        rat = bi / br
        scl = one / (br + bi * rat)
        return (ar + ai * rat) * scl, (ai - ar * rat) * scl
    rat = br / bi
    scl = one / (bi + br * rat)
    return (ar * rat + ai) * scl, (ai * rat - ar) * scl


@numba.vectorize(cache=True)
def complex_divide(a, b, one):
    """a / b for complex operands, entry by entry, as numpy divides; `one` a real of the
    operands' precision (complex64 computes in float32, as numpy's loop does). The result
    is complex128: a complex64 division casts it back, which is exact."""
    re, im = _quotient(a.real, a.imag, b.real, b.imag, one)
    return complex(re, im)


@numba.vectorize(cache=True)
def select(c, x, y):
    """np.where(c, x, y), broadcasting as numpy does (a ufunc compiles faster in Numba
    than np.where of broadcast views)."""
    return x if c else y


@numba.vectorize(cache=True)
def maximum(a, b):
    """np.maximum entry by entry as numpy computes it: a if a > b or a is NaN, else b (so
    the second operand on a tie: max(-0.0, 0.0) is 0.0; Numba's np.maximum gives -0.0)."""
    return a if a > b or a != a else b


@numba.vectorize(cache=True)
def minimum(a, b):
    """np.minimum entry by entry as numpy computes it (the second operand on a tie)."""
    return a if a < b or a != a else b


@numba.njit(cache=True)
def clip_scalar(x, lo, hi):
    """np.clip of scalars: a NaN operand (x first, then lo, then hi) is the result; on a
    tie between x and a bound numpy's scalar path keeps x (so -0.0 stays -0.0)."""
    if x != x:
        return x
    if lo != lo:
        return lo
    t = lo if x < lo else x
    if hi != hi:
        return hi
    return hi if t > hi else t


@numba.vectorize(cache=True)
def clip(x, lo, hi):
    """np.clip of arrays, entry by entry: as `clip_scalar`, except that numpy's array
    loop takes the bound on a tie (clip(-0.0, 0.0, 1.0) is 0.0 for an array)."""
    if x != x:
        return x
    if lo != lo:
        return lo
    t = x if x > lo else lo
    if hi != hi:
        return hi
    return t if t < hi else hi


@numba.njit(cache=True)
def reshaped(value, shape):
    """A reduction's result (scalar or array) with the reduced axes kept as size 1."""
    return np.reshape(np.asarray(value), shape)


@numba.njit(cache=True)
def extreme3(x3, largest):
    """np.max (largest) or np.min of x3 along axis 1: numpy's maximum / minimum entry by
    entry, row after row (NaN propagating). On a tie of signed zeros it keeps the later
    row's entry, as `maximum` and `minimum` of two do; numpy's vectorised reduction may
    keep the other, so the sign of a zero result can differ (docs/jit.md)."""
    o, n, i = x3.shape
    out = x3[:, 0, :].copy()
    for k in range(1, n):
        for a in range(o):
            for c in range(i):
                m, v = out[a, c], x3[a, k, c]
                if largest:
                    out[a, c] = m if m > v or m != m else v
                else:
                    out[a, c] = m if m < v or m != m else v
    return out


def _blas_layout(a):
    """`a` as BLAS takes it (see `_blas_layout_impl`)."""
    raise NotImplementedError  # only called from compiled code, through the overload


@overload(_blas_layout)
def _blas_layout_impl(a):
    """`a` itself when it is C- or F-contiguous (BLAS reads a transposed matrix in place),
    else a C-contiguous copy, as numpy's matmul copies an operand BLAS cannot stride
    through; decided on the array's layout when Numba types the call, so that np.dot
    never sees (and warns about) a non-contiguous operand."""
    if a.layout in "CF":
        return lambda a: a
    return lambda a: np.ascontiguousarray(a)


@numba.njit(cache=True)
def blas_product(a, b):
    """a @ b of float or complex vectors and matrices by np.dot, which Numba computes with
    SciPy's BLAS (dot, gemv, gemm): numpy's matmul calls the same BLAS routines for
    these, so the results agree to the last bits (measured: bitwise for gemv and gemm,
    the last bit of some vector · vector products)."""
    return np.dot(_blas_layout(a), _blas_layout(b))


def _c_order(a):
    """`a` as the linear algebra helpers pass it on (see `_c_order_impl`)."""
    raise NotImplementedError  # only called from compiled code, through the overload


@overload(_c_order)
def _c_order_impl(a):
    """`a` itself when C-contiguous, else a C-contiguous copy: Numba compiles an
    np.linalg function anew for each layout of its operands (seconds apiece: solve's
    takes about 7), and copies the matrix for LAPACK whatever its layout, so one layout
    costs one compile and changes no number."""
    if a.layout == "C":
        return lambda a: a
    return lambda a: np.ascontiguousarray(a)


# -- Linear algebra: Numba's np.linalg of one matrix (cfgrad/primitives/linalg.py says which
# LAPACK routines, the same as numpy's), its operands passed on in C order (`_c_order`).


@numba.njit(cache=True)
def solve(a, b):
    return np.linalg.solve(_c_order(a), _c_order(b))


@numba.njit(cache=True)
def cholesky(a):
    return np.linalg.cholesky(_c_order(a))


@numba.njit(cache=True)
def eigh(a):
    return np.linalg.eigh(_c_order(a))


@numba.njit(cache=True)
def eig(a):
    return np.linalg.eig(_c_order(a))


@numba.njit(cache=True)
def svd(a, full_matrices):
    return np.linalg.svd(_c_order(a), full_matrices)


@numba.njit(cache=True)
def qr(a):
    return np.linalg.qr(_c_order(a))


@numba.njit(cache=True)
def det(a, kind):
    """np.linalg.det as `kind` (Numba's computes a float32 matrix's in float64, numpy's in
    float32)."""
    return kind(np.linalg.det(_c_order(a)))


@numba.njit(cache=True)
def slogdet(a, kind):
    """np.linalg.slogdet as `kind`, as `det`."""
    sign, logdet = np.linalg.slogdet(_c_order(a))
    return kind(sign), kind(logdet)


@numba.njit(cache=True)
def pinv(a, rtol):
    """The pseudo-inverse as the `pinv` entry computes it (its `_pinv_impl`): the reduced
    SVD, singular values not above rtol times the largest replaced by inf (`rtol` of a's
    dtype, as numpy's weak Python float becomes), then V (U^T / s)."""
    u, s, vh = svd(a, False)
    cutoff = rtol * s[0]
    for i in range(s.shape[0]):
        if not s[i] > cutoff:  # np.where(s > cutoff, s, inf): NaN too
            s[i] = np.inf
    return blas_product(vh.T, u.T / s.reshape((s.shape[0], 1)))


@numba.njit(cache=True)
def matmul_stack(a, b, ia, ib):
    """A stack of matrix products, out[t] = a[ia[t]] @ b[ib[t]] by `blas_product`: `a` and `b`
    are (stacks of) matrices with their batch axes flattened into one, and `ia`, `ib`
    say which matrix of each the t-th product takes (numpy's broadcasting of the batch
    axes, worked out when the code was generated). Copied entry by entry, not by slice
    assignment, which takes Numba seconds to compile."""
    n, m = a.shape[1], b.shape[2]
    out = np.empty((ia.shape[0], n, m), a.dtype)
    for t in range(ia.shape[0]):
        product = blas_product(a[ia[t]], b[ib[t]])
        for i in range(n):
            for j in range(m):
                out[t, i, j] = product[i, j]
    return out


# -- einsum: a contraction of one or two operands, each flat (C order), described by the
# letters' sizes and a row of strides per operand and one for the result (in entries; 0
# where an array lacks the letter, the sum of its axes' strides where an operand repeats
# one: a diagonal). The result's letters come first, the summed ones after them, so one
# walk over every combination of letters in C order (the last fastest) adds each result
# entry's products one after another, in C order of its summed letters, onto its 0.
# Small on purpose: every compiled program calling a helper compiles it into itself anew.


@numba.njit(cache=True, inline="always")
def _next_combination(index, position, sizes, strides):
    """Advance `index` (one counter per letter) to the next combination in C order, and
    `position` (an offset per array) with it."""
    d = sizes.shape[0] - 1
    while d >= 0:
        index[d] += 1
        for c in range(position.shape[0]):
            position[c] += strides[c, d]
        if index[d] < sizes[d]:
            return
        for c in range(position.shape[0]):
            position[c] -= strides[c, d] * sizes[d]
        index[d] = 0
        d -= 1


@numba.njit(cache=True)
def contract1(a, sizes, strides, n_out):
    """One operand's einsum (sums over letters, transposes, diagonals): a flat array of
    the result in C order; `strides`: the operand's row, then the result's. The last
    letter is walked by its strides, the others by `_next_combination`."""
    out = np.zeros(np.prod(sizes[:n_out]), a.dtype)
    last = sizes.shape[0] - 1
    if last < 0:  # a scalar's
        out[0] = a[0]
        return out
    length, step, step_out = sizes[last], strides[0, last], strides[1, last]
    index = np.zeros(last, np.int64)
    position = np.zeros(2, np.int64)
    for _ in range(np.prod(sizes[:last])):
        p, o = position[0], position[1]
        for _ in range(length):
            out[o] += a[p]
            p += step
            o += step_out
        _next_combination(index, position, sizes[:last], strides[:, :last])
    return out


@numba.njit(cache=True)
def contract2(a, b, sizes, strides, n_out):
    """Two operands' einsum, the products a[.] * b[.] summed: a flat array of the result
    in C order; `strides`: a's row, b's, then the result's. The last letter is walked by
    its strides (into a running total when it is a summed one), the others by
    `_next_combination`."""
    out = np.zeros(np.prod(sizes[:n_out]), a.dtype)
    last = sizes.shape[0] - 1
    if last < 0:  # two scalars'
        out[0] += a[0] * b[0]
        return out
    length, step_a, step_b = sizes[last], strides[0, last], strides[1, last]
    step_out = strides[2, last]
    index = np.zeros(last, np.int64)
    position = np.zeros(3, np.int64)
    for _ in range(np.prod(sizes[:last])):
        pa, pb, o = position[0], position[1], position[2]
        if step_out == 0:
            total = out[o]
            for _ in range(length):
                total += a[pa] * b[pb]
                pa += step_a
                pb += step_b
            out[o] = total
        else:
            for _ in range(length):
                out[o] += a[pa] * b[pb]
                pa += step_a
                pb += step_b
                o += step_out
        _next_combination(index, position, sizes[:last], strides[:, :last])
    return out


# -- Reductions over one block of adjacent axes, seen as x3 of shape (outer, n, inner) ----
# numpy reduces a contiguous array over adjacent axes as one axis of length n: with
# inner == 1 every output is one pass over n consecutive entries (the pairwise sum for
# add), else rows of `inner` entries are combined one after another, from the identity.


@numba.njit(cache=True)
def sum3(x3):
    """x3.sum(axis=1) in numpy's order: pairwise along contiguous rows, else row by row."""
    o, n, i = x3.shape
    if i != 1:
        return combine3(x3, False)
    out = np.zeros((o, i), x3.dtype)
    flat = np.ascontiguousarray(x3).ravel()
    zero = np.zeros(1, x3.dtype)[0]
    for a in range(o):
        out[a, 0] = zero + _pairwise(flat, a * n, n, zero)
    return out


@numba.njit(cache=True)
def combine3(x3, product):
    """x3 reduced over axis 1 as numpy's outer reduction loop does it: rows of `inner`
    entries combined one after another into the identity (1 for a product, 0 for a sum).
    numpy multiplies so even along contiguous entries (it has no pairwise product)."""
    o, n, i = x3.shape
    out = np.ones((o, i), x3.dtype) if product else np.zeros((o, i), x3.dtype)
    for a in range(o):
        for k in range(n):
            for c in range(i):
                if product:
                    out[a, c] *= x3[a, k, c]
                else:
                    out[a, c] += x3[a, k, c]
    return out


@numba.njit(cache=True)
def arg3(x3, largest):
    """np.argmax (largest) / np.argmin of x3 along axis 1: the first extreme entry, or
    the first NaN, which numpy takes as the extreme."""
    o, n, i = x3.shape
    out = np.zeros((o, i), np.int64)
    for a in range(o):
        for c in range(i):
            best = x3[a, 0, c]
            at = 0
            if best == best:
                for k in range(1, n):
                    v = x3[a, k, c]
                    if v != v:
                        at = k
                        break
                    if (v > best) if largest else (v < best):
                        best = v
                        at = k
            out[a, c] = at
    return out


@numba.njit(cache=True)
def cumulate3(x3, reverse, product):
    """np.cumsum / np.cumprod along axis 1 (from the far end when `reverse`, as
    np.flip(np.cumsum(np.flip(x)))): the first entry as it is, then one operation per
    entry, in order."""
    o, n, i = x3.shape
    out = np.empty_like(x3)
    for a in range(o):
        for c in range(i):
            k = n - 1 if reverse else 0
            step = -1 if reverse else 1
            acc = x3[a, k, c]
            out[a, k, c] = acc
            for _ in range(n - 1):
                k += step
                acc = acc * x3[a, k, c] if product else acc + x3[a, k, c]
                out[a, k, c] = acc
    return out


@numba.njit(cache=True)
def logsumexp3(x3):
    """primitives.reductions._logsumexp_impl along axis 1: shifted by the maximum (0 where it is
    not finite), the exponentials summed as `sum3`, then log and the shift added back."""
    o, n, i = x3.shape
    m = x3[:, 0, :].copy()
    for k in range(1, n):
        m = np.maximum(m, x3[:, k, :])
    for a in range(o):
        for c in range(i):
            if not np.isfinite(m[a, c]):
                m[a, c] = 0
    e = np.empty_like(x3)
    for k in range(n):
        e[:, k, :] = np.exp(x3[:, k, :] - m)
    return np.log(sum3(e)) + m


# -- Debug callbacks (`cg.debug.print`, `cg.debug.callback`): compiled code calls the
# user's Python function through Numba's object mode. Its functions are Python objects of
# one program (a `debug.DebugCall` each), which machine code the disk cache shares between
# programs cannot name: a compiled program keeps them in `CALLBACKS` under a number, and
# passes that number in an array of its constants (`C`, an argument), so that the same
# machine code calls each program's own functions. An entry goes when its array does.

# number -> the program's callbacks, each (function, per value the dtype to make it, or
# None where object mode's Python value has it already: arrays, float64, int64, bool,
# complex128)
CALLBACKS: dict[int, list[tuple[Any, tuple[np.dtype | None, ...]]]] = {}
_callback_tables = iter(range(1 << 62))


def callback_table(entries: list[tuple[Any, tuple[np.dtype | None, ...]]]) -> np.ndarray:
    """The constant array naming `entries` for `debug_call` (its number, `C[k][0]` in the
    generated code): registered now, forgotten when the array is."""
    number = next(_callback_tables)
    CALLBACKS[number] = entries
    table = np.array([number], np.int64)
    weakref.finalize(table, CALLBACKS.pop, number, None)
    return table


def _call_back(table: int, index: int, values: tuple) -> None:
    """Entry `index` of table `table` called with `values`, each of its value's dtype:
    object mode gives scalars as Python numbers (a float32 as a float), which the function
    would otherwise see in float64."""
    function, dtypes = CALLBACKS[table][index]
    if any(dtypes):
        values = [v if d is None else np.asarray(v, d) for v, d in zip(values, dtypes)]
    function(*values)


@numba.njit(cache=True)
def debug_call(table, index, *values):
    """Call entry `index` of table `table` (see `callback_table`) with `values`, in object
    mode. One small function per signature, which the disk cache keeps for every program:
    Numba lifts an object-mode block into a function of its own (about 0.2 s of compile
    time here); written into a program's code, each call site would pay about 0.1 s, again
    in every process (docs/jit.md)."""
    with numba.objmode():
        _call_back(table, index, values)


# -- orderings: numpy's stable order (sort, argsort, searchsorted)


@numba.njit(cache=True, inline="always")
def _before(a, b):
    """Whether a sorts strictly before b in numpy's order (npysort's `less`): a < b, with
    NaN after every number and NaNs tied with each other; -0.0 and 0.0 tie. For integers
    and booleans it is a < b."""
    return a < b or (b != b and a == a)


@numba.njit(cache=True)
def argsort3(x3):
    """The stable permutation sorting x3 (outer, n, inner) along axis 1: a bottom-up
    merge sort that takes the left run's entry unless the right run's is strictly
    `_before` it. A stable order of one comparison is unique, so this is the permutation
    numpy's stable sorts (timsort, radix sort) give: ties, signed zeros and NaNs keep
    their input order."""
    outer, n, inner = x3.shape
    perm = np.empty((outer, n, inner), np.int64)
    idx = np.empty(n, np.int64)
    buf = np.empty(n, np.int64)
    for p in range(outer):
        for q in range(inner):
            for i in range(n):
                idx[i] = i
            width = 1
            while width < n:
                lo = 0
                while lo < n:
                    mid = min(lo + width, n)
                    hi = min(lo + 2 * width, n)
                    i, j, k = lo, mid, lo
                    while i < mid and j < hi:
                        if _before(x3[p, idx[j], q], x3[p, idx[i], q]):
                            buf[k] = idx[j]
                            j += 1
                        else:
                            buf[k] = idx[i]
                            i += 1
                        k += 1
                    while i < mid:
                        buf[k] = idx[i]
                        i += 1
                        k += 1
                    while j < hi:
                        buf[k] = idx[j]
                        j += 1
                        k += 1
                    lo = hi
                idx, buf = buf, idx
                width *= 2
            for i in range(n):
                perm[p, i, q] = idx[i]
    return perm


@numba.njit(cache=True)
def sort3(x3):
    """x3 (outer, n, inner) stably sorted along axis 1 (`argsort3`'s order)."""
    perm = argsort3(x3)
    out = np.empty_like(x3)
    outer, n, inner = x3.shape
    for p in range(outer):
        for i in range(n):
            for q in range(inner):
                out[p, i, q] = x3[p, perm[p, i, q], q]
    return out


@numba.njit(cache=True, inline="always")
def _insertion_index(a, key, right):
    """Where `key` goes into the sorted 1-d `a` (numpy's order, `_before`): before the
    first entry not before it (left), or after the last entry not after it (right)."""
    lo, hi = 0, a.shape[0]
    while lo < hi:
        mid = lo + ((hi - lo) >> 1)
        if (not _before(key, a[mid])) if right else _before(a[mid], key):
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(cache=True)
def searchsorted(a, keys, right):
    """Insertion indices of the 1-d `keys` into the sorted 1-d `a`: for a sorted `a`
    the one answer every binary search gives, numpy's among them."""
    out = np.empty(keys.shape[0], np.int64)
    for k in range(keys.shape[0]):
        out[k] = _insertion_index(a, keys[k], right)
    return out


@numba.njit(cache=True)
def searchsorted1(a, key, right):
    """`searchsorted` of one key."""
    return np.int64(_insertion_index(a, key, right))


# -- Fourier transforms: numpy's own, called from compiled code in Numba's object mode
# (Numba has no np.fft): the interpreter's results bit for bit, for the cost of boxing the
# operand (microseconds a call) and of compiling one object-mode block per signature.

_NORMS = ("backward", "ortho", "forward")  # a norm's index in generated code


def _numpy_fourier(x: np.ndarray, kind: int, axes: tuple, n: int, norm: int) -> np.ndarray:
    """numpy's transform, as the fft entries' implementations call it: 0 fftn, 1 ifftn
    (over `axes`), 2 rfft, 3 irfft to length `n` (along axes[0])."""
    name = _NORMS[norm]
    if kind == 0:
        out = np.fft.fftn(x, axes=axes, norm=name)
    elif kind == 1:
        out = np.fft.ifftn(x, axes=axes, norm=name)
    elif kind == 2:
        out = np.fft.rfft(x, axis=axes[0], norm=name)
    else:
        out = np.fft.irfft(x, n, axis=axes[0], norm=name)
    return np.ascontiguousarray(out)


def fourier(x, kind, axes, n, norm, dtype):
    """`_numpy_fourier` from compiled code (see `_fourier_impl`)."""
    raise NotImplementedError  # only called from compiled code, through the overload


@overload(fourier)
def _fourier_impl(x, kind, axes, n, norm, dtype):
    """An object-mode block calling `_numpy_fourier`, typed as a C-contiguous array of
    `dtype` (a numpy scalar type: the result's) and the operand's dimensions."""
    out_type = types.Array(dtype.dtype, x.ndim, "C")

    def impl(x, kind, axes, n, norm, dtype):
        with numba.objmode(out=out_type):
            out = _numpy_fourier(x, kind, axes, n, norm)
        return out

    return impl


# -- special functions: numpy's formulas entry by entry, in the operand's float dtype where
# numpy computes in it (its Python scalars are weak: NEP 50), so that only exp, sin and
# sqrt, the math library's, can differ from numpy's in the last bits.

def _entrywise(what: str) -> Any:
    """Decorates `one_float(x)`, the typing of a function of one float (what an `overload`
    returns: the implementation for x's Numba type), into a function of compiled code
    applying it to a float or to each entry of a float array (any layout), its result in
    the operand's dtype. Not a `numba.vectorize`: a dynamic ufunc may run a float32
    operand through a float64 loop compiled before it."""
    def make(one_float: Any) -> Any:
        def entry(x):
            raise NotImplementedError  # only called from compiled code, through the overload

        overload(entry)(one_float)

        def stub(x):
            raise NotImplementedError  # only called from compiled code, through the overload

        stub.__doc__ = f"{what} of a float or of each entry of a float array"

        @overload(stub)
        def _impl(x):
            if not isinstance(x, types.Array):
                return lambda x: entry(x)

            def each(x):
                out = np.empty(x.shape, x.dtype)
                into = out.reshape(-1)
                i = 0
                for v in x.flat:
                    into[i] = entry(v)
                    i += 1
                return out

            return each

        return stub

    return make


# numpy's i0 (numpy/lib/_function_base_impl.py: Cephes' Chebyshev coefficients for
# [0, 8] and (8, inf), as Python floats)
_I0A = np.array(numpy_function_base._i0A)
_I0B = np.array(numpy_function_base._i0B)


@numba.njit(cache=True, inline="always")
def _chbevl(x, vals, half):
    """numpy's `_chbevl`: Clenshaw's recurrence for a Chebyshev series, in x's dtype."""
    b0 = vals[0]
    b1 = x - x  # (0 of x's dtype)
    b2 = b1
    for i in range(1, vals.shape[0]):
        b2 = b1
        b1 = b0
        b0 = x * b1 - b2 + vals[i]
    return half * (b0 - b2)


@_entrywise("np.i0")
def i0(x):
    """np.i0 of one float: exp(|x|) times the series for [0, 8], or for (8, inf) that
    over sqrt(|x|) (NaN takes the second, as numpy's `piecewise`), with the
    coefficients and constants in x's dtype."""
    dtype = numba.np.numpy_support.as_dtype(x)
    a, b = _I0A.astype(dtype), _I0B.astype(dtype)
    two, eight, thirty_two, half = (dtype.type(v) for v in (2, 8, 32, 0.5))

    def impl(x):
        ax = np.abs(x)
        if ax <= eight:
            return np.exp(ax) * _chbevl(ax / two - two, a, half)
        return np.exp(ax) * _chbevl(thirty_two / ax - two, b, half) / np.sqrt(ax)

    return impl


@_entrywise("Bessel's I1")
def i1(x):
    """primitives.elementwise._i1_impl of one float: its series in float64, each entry
    stopping where numpy's loop would leave it unchanged (a term below 1e-17 of the sum
    is under half an ulp of it), then in x's dtype."""
    cast = numba.np.numpy_support.as_dtype(x).type

    def impl(x):
        z = np.float64(x)
        term = z / 2.0
        total = term
        quarter = z * z / 4.0
        k = 0
        while np.abs(term) > 1e-17 * np.abs(total) and k < 2000:
            term = term * quarter / np.float64((k + 1) * (k + 2))
            total = total + term
            k += 1
        return cast(total)

    return impl


@_entrywise("np.sinc")
def sinc(x):
    """np.sinc of one float: y = pi x (eps of x's dtype where that is 0), sin(y) / y."""
    dtype = numba.np.numpy_support.as_dtype(x)
    pi, eps = dtype.type(np.pi), np.finfo(dtype).eps

    def impl(x):
        y = pi * x
        if y == 0:
            y = eps
        return np.sin(y) / y

    return impl
