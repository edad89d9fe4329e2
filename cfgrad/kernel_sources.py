"""The Numba source of the derivative table's `Source` declarations (see `primitives.Source`).

Each function takes the operands' expressions `args`, their TensorTypes `types`, the
result's type `out` and the node's parameters, and returns one expression of Numba's
numpy subset, computing what the entry's numpy implementation computes. A value of shape
() is a native scalar there, so the shapes decide between scalar and array code. What
one expression cannot say is a helper of `kernels.py`, named `K.…` here. A kernel that
meets a case it cannot compile raises `Unsupported` (native.py names it) with the reason.
An entry declaring `Source(..., constants=True)` has its function also take `const`,
which turns an array worked out while generating the code (the positions a constant
index array reads) into the expression that reads it at run time.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import Unsupported


def _dt(t: Any) -> str:
    return f"np.{t.dtype.name}"


def _zero(t: Any) -> str:
    return f"{_dt(t)}(0)"


def identity(args, types, out):
    return args[0]


def copy(args, types, out):
    return args[0] if out.shape == () else f"{args[0]}.copy()"


def accumulate(args, types, out):
    """acc += c in place (the accumulator is a buffer nothing else sees)."""
    return f"({args[0]} + {args[1]})" if out.shape == () else f"K.add_into({args[0]}, {args[1]})"


def _helper(name: str, doc: str) -> Any:
    """The kernel calling `K.<name>` on the operands (a helper of kernels.py computing the
    primitive as numpy does, where Numba's function of that name differs)."""
    def kernel(args, types, out):
        return f"K.{name}({', '.join(args)})"

    kernel.__doc__ = doc
    return kernel


maximum = _helper("maximum", "numpy's: the second operand on a tie (max(-0.0, 0.0) is "
                             "0.0), NaN from either")
minimum = _helper("minimum", "numpy's: the second operand on a tie, NaN from either")
accumulate_outer = _helper("accumulate_outer", "acc += outer(a, b) in place, entry by entry")


def sign(args, types, out):
    """numpy's sign(-0.0) is 0.0 (Numba's -0.0): adding a zero makes it so. Numba's sign
    of a uint8 array reads it as signed (200 gives 255): of unsigned integers, the
    smaller of x and 1."""
    if out.dtype.kind == "u":
        return f"np.minimum({args[0]}, {_dt(out)}(1))"
    if out.dtype.kind != "f":
        return f"np.sign({args[0]})"
    return f"(np.sign({args[0]}) + {_zero(out)})"


def relu(args, types, out):
    return f"K.maximum({args[0]}, {_zero(out)})"


def softplus(args, types, out):
    return f"np.logaddexp({_zero(out)}, {args[0]})"


def divide(args, types, out):
    """`/` (Numba's is numpy's on reals); numpy's own algorithm on complex operands."""
    if out.dtype.kind != "c":
        return f"({args[0]} / {args[1]})"
    real = "np.float32" if out.dtype == np.complex64 else "np.float64"
    value = f"K.complex_divide({args[0]}, {args[1]}, {real}(1))"
    if out.dtype == np.complex128:
        return value
    return f"np.complex64({value})" if out.shape == () else f"{value}.astype(np.complex64)"



def _width(value: str, out: Any, computed: type) -> str:
    """`value`, which an integer helper computes in the 64-bit type `computed`, cast to
    `out`'s dtype: the low bits, as numpy's loops wrap in the operands' own width."""
    if out.dtype == computed:
        return value
    return f"{_dt(out)}({value})" if out.shape == () else f"{value}.astype({_dt(out)})"


def _division(name: str, ufunc: str, signed: str | None, real: str | None) -> Any:
    """The kernel of a division-like primitive: `K.<signed>` on signed integers, `K.<real>`
    on floats (numpy's algorithm, kernels.py says where Numba's differs), and Numba's
    `np.<ufunc>` on unsigned integers and bools, which is numpy's."""
    def kernel(args, types, out):
        kind = types[0].dtype.kind
        if kind == "i" and signed is not None:
            return _width(f"K.{signed}({', '.join(args)})", out, np.int64)
        if kind == "f" and real is not None:
            return f"K.{real}({', '.join(args)}, {_dt(out)}(1))"
        return f"np.{ufunc}({', '.join(args)})"

    kernel.__name__ = name
    kernel.__doc__ = f"numpy's {ufunc}, which x86 and Numba differ from at edge operands"
    return kernel


floor_divide = _division("floor_divide", "floor_divide", "int_floor_divide",
                         "float_floor_divide")
remainder = _division("remainder", "remainder", "int_remainder", "float_remainder")
fmod = _division("fmod", "fmod", "int_fmod", None)


def power(args, types, out):
    """numpy's x ** y: on integers by repeated squaring, exact and wrapping, a negative
    exponent of a signed type raising numpy's ValueError (Numba's goes through float64:
    3 ** 35 is off by 3, 2 ** -1 is 0); on floats Numba's, which is C's pow."""
    kind = types[0].dtype.kind
    if kind not in "iu":
        return f"np.power({args[0]}, {args[1]})"
    exponent = args[1] if kind == "u" else f"K.nonnegative_exponents({args[1]})"
    return _width(f"K.int_power({args[0]}, {exponent})", out, np.uint64)


def sigmoid(args, types, out):
    return f"K.sigmoid({args[0]}, {_dt(out)}(1))"


def where(args, types, out):
    if out.shape == ():
        return f"({args[1]} if {args[0]} else {args[2]})"
    return f"K.select({args[0]}, {args[1]}, {args[2]})"


def clip(args, types, out):
    if out.shape == ():
        return f"K.clip_scalar({args[0]}, {args[1]}, {args[2]})"
    return f"K.clip({args[0]}, {args[1]}, {args[2]})"


def _reduced(args, types, out, axes, keepdims, whole: str, along: str) -> str:
    """A reduction over `axes`: `whole` for every axis (a scalar), else `along` applied
    one axis at a time from the last, then the result reshaped to `out` (keepdims)."""
    x, t = args[0], types[0]
    if t.shape == ():
        return x
    if not axes:  # numpy reduces over no axis into a new array, never the input itself
        return f"{x}.copy()"
    axes = tuple(sorted(a % t.ndim for a in axes))
    if len(axes) == t.ndim:
        value = whole.format(x)
    else:
        value = x
        for a in reversed(axes):
            value = along.format(value, a)
    if out.shape == () or (not keepdims and len(axes) != t.ndim):
        return value
    return f"K.reshaped({value}, {out.shape})"


def _block(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[int, int, int] | None:
    """(outer, n, inner) when reducing `axes` of a C-contiguous array of `shape` is
    reducing the middle axis of its reshape to (outer, n, inner): the reduced axes are
    adjacent once axes of length 1 are dropped (as numpy's iterator drops them). None
    for axes apart, whose order of operations numpy's iterator chooses."""
    ndim = len(shape)
    axes = {a % ndim for a in axes} if ndim else set()
    kept = [d for d in range(ndim) if shape[d] != 1]
    reduced = [j for j, d in enumerate(kept) if d in axes]
    if reduced and reduced != list(range(reduced[0], reduced[-1] + 1)):
        return None
    first = reduced[0] if reduced else len(kept)
    last = reduced[-1] + 1 if reduced else len(kept)
    size = [shape[d] for d in kept]
    return (int(np.prod(size[:first], dtype=np.int64)),
            int(np.prod(size[first:last], dtype=np.int64)),
            int(np.prod(size[last:], dtype=np.int64)))


def _over_block(helper: str, op: str, args, types, out, axes, cast: bool = True,
                extra: str = "") -> str:
    """`helper` (a `K.…3` function of (outer, n, inner) to (outer, inner)) applied to
    the operand reshaped for `axes`, its result shaped as `out`."""
    t = types[0]
    block = _block(t.shape, axes)
    if block is None:
        raise Unsupported(f"{op} over the axes {tuple(axes)} of {t}, which are not adjacent "
                          "(numpy's iterator picks the order of operations)")
    x = args[0]
    if cast and t.dtype != out.dtype:
        x = f"{_dt(out)}({x})" if t.shape == () else f"{x}.astype({_dt(out)})"
    x3 = (f"np.full((1, 1, 1), {x})" if t.shape == ()
          else f"np.ascontiguousarray({x}).reshape({block})")
    value = f"{helper}({x3}{extra})"
    return f"{value}[0, 0]" if out.shape == () else f"{value}.reshape({out.shape})"


def _apart(x: str, t: Any, out: Any, axes: tuple[int, ...], product: bool) -> str:
    """A sum or product over axes that are not adjacent, in numpy's order for a
    C-contiguous operand (axes of length 1 dropped): a trailing run of reduced axes is its
    iterator's inner loop (pairwise for a sum), every other reduced axis an outer loop
    accumulating into the result in C order (`K.combine3`: rows combined one after
    another)."""
    ndim = t.ndim
    reduced = {a % ndim for a in axes}
    dims = [d for d in range(ndim) if t.shape[d] != 1]
    shape = [t.shape[d] for d in dims]
    flags = [d in reduced for d in dims]
    value = f"np.ascontiguousarray({x}).reshape({tuple(shape)})"
    run = 0
    while not product and run < len(flags) and flags[len(flags) - 1 - run]:
        run += 1
    if run:  # the inner loop: a pairwise sum over the trailing run, for each other index
        lead = shape[:len(shape) - run]
        inner = int(np.prod(shape[len(shape) - run:], dtype=np.int64))
        value = (f"K.sum3({value}.reshape(({int(np.prod(lead, dtype=np.int64))}, {inner}, "
                 f"1))).reshape({tuple(lead)})")
        shape, flags = lead, flags[:len(lead)]
    outer = [j for j, f in enumerate(flags) if f]
    kept = [j for j, f in enumerate(flags) if not f]
    if outer:
        n_outer = int(np.prod([shape[j] for j in outer], dtype=np.int64))
        n_kept = int(np.prod([shape[j] for j in kept], dtype=np.int64))
        value = (f"K.combine3(np.ascontiguousarray(np.transpose({value}, "
                 f"{tuple(outer + kept)})).reshape((1, {n_outer}, {n_kept})), {product})[0]")
    return f"{value}.ravel()[0]" if out.shape == () else f"{value}.reshape({out.shape})"


def sum_(args, types, out, axes, keepdims):
    """numpy's order of additions for C-contiguous operands (the interpreter's arrays,
    where it matters): pairwise along a contiguous run of reduced axes, else row by row."""
    t = types[0]
    x = args[0] if t.dtype == out.dtype else (
        f"{_dt(out)}({args[0]})" if t.shape == () else f"{args[0]}.astype({_dt(out)})")
    if t.shape == ():  # numpy adds the scalar to its 0 (-0.0 becomes 0.0)
        return f"({_zero(out)} + {x})"
    if out.shape == ():  # every axis: a scalar, with no (1, 1) result array made for it
        return f"K.total({x}, {_zero(out)})"
    if _block(t.shape, axes) is not None:
        return _over_block("K.sum3", "sum", [x], [t], out, axes, cast=False)
    return _apart(x, t, out, axes, product=False)


def mean(args, types, out, axes, keepdims):
    """numpy's mean: the sum in the result's dtype, then divided by the count."""
    t = types[0]
    count = int(np.prod([t.shape[a] for a in axes], dtype=np.int64)) if t.shape else 1
    total = sum_(args, types, out, axes, keepdims)
    return f"({total} / {_dt(out)}({count}))"


def prod(args, types, out, axes, keepdims):
    """numpy multiplies in order, from 1: over any axes, the entries in C order."""
    t = types[0]
    if _block(t.shape, axes) is not None or t.shape == ():
        return _over_block("K.combine3", "prod", args, types, out, axes, extra=", True")
    x = args[0] if t.dtype == out.dtype else f"{args[0]}.astype({_dt(out)})"
    return _apart(x, t, out, axes, product=True)


def logsumexp(args, types, out, axes, keepdims):
    return _over_block("K.logsumexp3", "logsumexp", args, types, out, axes)


def _arg(largest: bool):
    def kernel(args, types, out, axis):
        t = types[0]
        axes = tuple(range(t.ndim)) if axis is None else (axis,)
        # the flattened array for axis=None: one run over every entry, in C order
        block = (1, max(1, int(np.prod(t.shape, dtype=np.int64))), 1) if axis is None \
            else _block(t.shape, axes)
        x3 = (f"np.full((1, 1, 1), {args[0]})" if t.shape == ()
              else f"np.ascontiguousarray({args[0]}).reshape({block})")
        value = f"K.arg3({x3}, {largest})"
        return f"{value}[0, 0]" if out.shape == () else f"{value}.reshape({out.shape})"

    kernel.__name__ = "argmax" if largest else "argmin"
    return kernel


argmax = _arg(True)
argmin = _arg(False)


def _cumulate(args, types, out, axis, reverse, product):
    t = types[0]
    x = args[0] if t.dtype == out.dtype else f"{args[0]}.astype({_dt(out)})"
    if t.shape == ():
        return x if t.dtype == out.dtype else f"{_dt(out)}({args[0]})"
    axis %= t.ndim
    block = (int(np.prod(t.shape[:axis], dtype=np.int64)), t.shape[axis],
             int(np.prod(t.shape[axis + 1:], dtype=np.int64)))
    return (f"K.cumulate3(np.ascontiguousarray({x}).reshape({block}), {reverse}, "
            f"{product}).reshape({out.shape})")


def cumsum(args, types, out, axis, reverse):
    return _cumulate(args, types, out, axis, reverse, False)


def cumprod(args, types, out, axis):
    return _cumulate(args, types, out, axis, False, True)


def amax(args, types, out, axes, keepdims):
    return _reduced(args, types, out, axes, keepdims, "np.max({0})",
                    "K.extreme_along({0}, {1}, True)")


def amin(args, types, out, axes, keepdims):
    return _reduced(args, types, out, axes, keepdims, "np.min({0})",
                    "K.extreme_along({0}, {1}, False)")


def matmul(args, types, out):
    a, b = types
    if not (1 <= a.ndim <= 2 and 1 <= b.ndim <= 2) or a.dtype.kind not in "fc":
        raise Unsupported(f"matmul of {a} and {b} (compiled: vectors and matrices of floats)")
    helper = {(1, 1): "dot", (2, 1): "matvec", (1, 2): "vecmat", (2, 2): "matmul"}
    return f"K.{helper[(a.ndim, b.ndim)]}({args[0]}, {args[1]})"


def reshape(args, types, out, shape):
    if types[0].shape == () and out.shape == ():
        return args[0]
    if types[0].shape == ():
        return f"np.full({out.shape}, {args[0]})"
    if out.shape == ():
        return f"{args[0]}.ravel()[0]"
    return f"np.ascontiguousarray({args[0]}).reshape({out.shape})"


def transpose(args, types, out, axes):
    """`.T` where the axes are reversed (every 2-D transpose): Numba compiles
    `np.transpose(x, axes)` in about 4 s and `.T` in a tenth of that."""
    axes = tuple(axes)
    if axes == tuple(range(len(axes))):
        return args[0]
    if axes == tuple(reversed(range(len(axes)))):
        return f"{args[0]}.T"
    return f"np.transpose({args[0]}, {axes})"


def broadcast_to(args, types, out, shape):
    if out.shape == ():
        return args[0] if types[0].shape == () else f"{args[0]}.ravel()[0]"
    if types[0].shape == ():
        return f"np.full({out.shape}, {args[0]})"
    if types[0].shape == out.shape:
        return args[0]
    return f"np.broadcast_to({args[0]}, {out.shape})"


def astype(args, types, out, dtype):
    if types[0].dtype.kind == "c" and out.dtype.kind not in "cb":
        x = f"np.real({args[0]})"
    else:
        x = args[0]
    if out.dtype.kind == "b":
        return f"({x} != 0)"
    if out.shape == ():
        return f"{_dt(out)}({x})"
    return f"{x}.astype({_dt(out)})"


def concatenate(args, types, out, axis):
    return f"np.concatenate(({', '.join(args)},), axis={axis})"


def roll(args, types, out, axis):
    shape = types[0].shape
    if shape == ():
        return args[0]
    if axis is None:  # numpy rolls the flattened array, then restores the shape
        blocks = (1, int(np.prod(shape)), 1)
    else:  # the axes before `axis`, it, the axes after
        k = axis % len(shape)
        blocks = (int(np.prod(shape[:k])), shape[k], int(np.prod(shape[k + 1:])))
    return (f"K.roll3(np.ascontiguousarray({args[0]}).reshape({blocks}), {args[1]})"
            f".reshape({shape})")


def index_expression(spec: tuple, dynamic: list[str], shape: tuple[int, ...],
                     what: str) -> str:
    """The subscript of `x[...]` for an index spec (`'$'` marking each traced index, read
    from `dynamic`) into an array of `shape`; basic indexing only (Numba takes at most one
    array index). A traced index is checked against its axis (`K.bound`): compiled code
    runs without Numba's bounds checks everywhere, which double its compile time, and a
    constant index was checked when the program was traced."""
    it = iter(dynamic)
    items = []
    consuming = sum(1 for s in spec if s is not None and s is not Ellipsis)
    axis = 0
    for s in spec:
        if isinstance(s, str):
            items.append(f"K.bound({next(it)}, {shape[axis]})")
        elif s is None:
            items.append("None")
            continue
        elif s is Ellipsis:
            items.append("...")
            axis += len(shape) - consuming
            continue
        elif isinstance(s, slice):
            items.append("slice(" + ", ".join("None" if v is None else repr(int(v))
                                              for v in (s.start, s.stop, s.step)) + ")")
        elif isinstance(s, int | np.integer) or (isinstance(s, np.ndarray) and s.ndim == 0):
            items.append(repr(int(s)))  # (numpy indexes with a 0-d array as with its int)
        else:
            raise Unsupported(f"{what} with an index array (compiled: basic indexing only)")
        axis += 1
    return ", ".join(items) + ("," if len(items) == 1 else "")


def _array_indices(types: list[Any], first: int) -> bool:
    return any(t.shape != () for t in types[first:])


def _positions(shape: tuple[int, ...], spec: tuple) -> np.ndarray | None:
    """For an index spec with constant index arrays and no traced index, the flat (C
    order) positions of an array of `shape` that `x[spec]` reads, in the order of the
    result's entries: numpy's own indexing of the positions array, so every rule of
    advanced indexing (broadcast arrays, where the indexed axes go) holds by
    construction. None for basic indexing, which compiles as a subscript."""
    if any(isinstance(s, str) for s in spec) or not any(
            isinstance(s, np.ndarray) and s.ndim > 0 for s in spec):
        return None
    return np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)[spec]


def _flat(arg: str) -> str:
    """An array operand as a contiguous 1-D array, its entries in C order."""
    return f"np.ascontiguousarray({arg}).reshape(-1)"


def index(args, types, out, spec, const):
    if _array_indices(types, 1):
        raise Unsupported("indexing with a traced index array (compiled: basic indexing)")
    positions = _positions(types[0].shape, spec)
    if positions is not None:  # a gather through constant positions
        gathered = f"K.gather({_flat(args[0])}, {const(positions.reshape(-1))})"
        return f"{gathered}[0]" if out.shape == () else f"{gathered}.reshape({out.shape})"
    return f"{args[0]}[{index_expression(spec, args[1:], types[0].shape, 'indexing')}]"


def scatter_add(args, types, out, spec, shape, const):
    if _array_indices(types, 1):
        raise Unsupported("scatter_add at a traced index array (compiled: basic indexing)")
    positions = _positions(tuple(shape), spec)
    if positions is not None:  # numpy's np.add.at: repeated positions accumulate, in order
        if types[0].shape == ():
            values = f"np.full({positions.size}, {args[0]})"
        elif types[0].shape == positions.shape:
            values = _flat(args[0])
        else:
            values = _flat(f"np.broadcast_to({args[0]}, {positions.shape})")
        return (f"K.add_at_positions(np.zeros({int(np.prod(shape))}, {_dt(out)}), "
                f"{const(positions.reshape(-1))}, {values}).reshape({tuple(shape)})")
    sub = index_expression(spec, args[1:], tuple(shape), "scatter_add")
    return f"K.set_at(np.zeros({tuple(shape)}, {_dt(out)}), ({sub}), {args[0]})"



def accumulate_index(args, types, out, spec):
    if _array_indices(types, 2):
        raise Unsupported("accumulate_index at a traced index array (compiled: basic "
                          "indexing)")
    sub = index_expression(spec, args[2:], types[0].shape, "accumulate_index")
    return f"K.add_at({args[0]}, ({sub}), {args[1]})"


def real(args, types, out):
    return f"{args[0]}.real" if out.shape == () else f"np.real({args[0]})"


def imag(args, types, out):
    return f"{args[0]}.imag" if out.shape == () else f"np.imag({args[0]})"


def conj(args, types, out):
    return f"np.conj({args[0]})"


def angle(args, types, out):
    """numpy's angle: arctan2(imag, real), of (0, x) for a real x (pi for x < 0 or -0.0)."""
    if types[0].dtype.kind == "c":
        return f"np.arctan2({args[0]}.imag, {args[0]}.real)"
    return f"np.arctan2({_zero(out)}, {args[0]})"

