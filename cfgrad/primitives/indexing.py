"""Indexing: `index` (numpy's basic and integer-array indexing, a `'$'` in the spec marking
each traced index), its transpose `scatter_add`, a scan's output stack (`write_row`,
`StackBuffer`) and the indexed updates of `.at[...]` (`scatter`). Their Numba sources:
basic indexing is a subscript; with index arrays (constant or traced) they gather or
update through flat positions worked out when the code is generated and offset by the
traced indices at run time (`positions_source`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import LoweringError, Unsupported
from ..ir import TensorType
from .rules import (
    add_terms,
    mask_like,
    np_dtype,
    shape_param,
)
from .table import (
    Deferred,
    Primitive,
    Source,
    bind,
    register,
)


def index_tuple(spec: tuple, dynamic: tuple) -> tuple:
    it = iter(dynamic)
    return tuple(next(it) if isinstance(s, str) else s for s in spec)


def _index_impl(x, *dynamic, spec):
    return x[index_tuple(spec, dynamic)]


def index_type(types: list[TensorType], spec: tuple) -> TensorType:
    """The result of numpy indexing `x[spec]`, the traced indices (`'$'` in spec, one per
    index input) of the index inputs' types, found without allocating anything of those
    sizes (a parsed program may declare any; this rule runs when it is verified).

    numpy decides the structure, on a broadcast view of x's shape (no memory), indexed
    with a zero in place of each integer array: the dimensions the slices, `None`s and
    `...` leave (`rest`), and whether the items are valid. The integer arrays' broadcast
    shape then goes in as numpy's advanced indexing puts it: where the first of them
    stands when the integers and arrays are next to each other in the spec, in front
    otherwise (numpy's "Combining advanced and basic indexing"). An empty axis that an
    array selects on counts as length 1 for its zero: the result's shape does not depend
    on that length, and the node may never run (the adjoint of a scan of no steps indexes
    its empty stack)."""
    x = types[0]
    if not isinstance(spec, tuple) or any(isinstance(s, str) and s != "$" for s in spec):
        raise LoweringError(f"indexing: parameter spec must be a tuple of index items "
                            f"('$' marking each traced index), got {spec!r}")
    marks = sum(1 for s in spec if isinstance(s, str))
    if marks != len(types) - 1:
        raise LoweringError(f"indexing: spec {spec!r} marks {marks} traced indices with '$', "
                            f"but the node has {len(types) - 1} index inputs")
    if any(isinstance(s, bool | np.bool_) for s in spec):
        raise LoweringError(f"indexing with a boolean scalar is not supported: {spec!r}")
    for t in types[1:]:
        if t.dtype.kind not in "iu":
            raise LoweringError(f"indexing: a traced index must be an integer, got {t}")
    traced = iter(types[1:])
    arrays: dict[int, tuple[int, ...]] = {}  # spec position -> shape of an integer array
    literal: dict[int, np.ndarray] = {}
    for i, s in enumerate(spec):
        if isinstance(s, str):
            arrays[i] = next(traced).shape
        elif isinstance(s, np.ndarray | list | tuple):
            literal[i] = _index_array(s, x, spec)
            arrays[i] = literal[i].shape
    axis_of = item_axes(spec, len(x.shape))
    probe = list(x.shape)
    for i in arrays:
        if 0 <= axis_of[i] < len(probe):  # (numpy refuses too many items below)
            probe[axis_of[i]] = max(probe[axis_of[i]], 1)
    try:
        view = np.broadcast_to(np.zeros((), x.dtype), tuple(probe))
        rest = view[tuple(0 if i in arrays else s for i, s in enumerate(spec))].shape
        block = np.broadcast_shapes(*arrays.values())
    except (IndexError, TypeError, ValueError) as e:
        raise LoweringError(f"indexing {x} with {spec!r}: {e}") from None
    for i, a in literal.items():
        size = x.shape[axis_of[i]]
        if a.size and not -size <= a.min() <= a.max() < size:
            bad = a.max() if a.max() >= size else a.min()
            raise LoweringError(f"indexing {x} with {spec!r}: index {bad} is out of bounds "
                                f"for axis {axis_of[i]} with size {size}")
    if not any(arrays.values()):  # integers only: basic indexing
        return TensorType(tuple(rest), x.dtype)
    at = _block_start(spec, len(x.shape), set(arrays))
    return TensorType(tuple(rest[:at]) + tuple(block) + tuple(rest[at:]), x.dtype)


def _block_start(spec: tuple, ndim: int, arrays: set[int]) -> int:
    """Where numpy's advanced indexing puts the index arrays' broadcast dimensions in the
    result (`arrays`: the spec positions holding arrays): where the first of them stands
    when the integers and arrays are next to each other in the spec, in front otherwise."""
    taking = sum(1 for s in spec if s is not None and s is not Ellipsis)
    advanced = [i for i, s in enumerate(spec)
                if i in arrays or isinstance(s, int | np.integer)]
    if not advanced or advanced != list(range(advanced[0], advanced[-1] + 1)):
        return 0
    return sum(ndim - taking if s is Ellipsis else 1 for s in spec[:advanced[0]])


def _index_array(item: Any, x: TensorType, spec: tuple) -> np.ndarray:
    """A constant integer array of an index spec (numpy reads an empty list as one)."""
    try:
        a = np.asarray(item)
    except ValueError as e:
        raise LoweringError(f"indexing {x} with {spec!r}: {e}") from None
    if a.dtype == np.bool_:
        raise LoweringError(f"indexing {x} with a boolean mask in {spec!r}: boolean mask "
                            "indexing gives a data-dependent shape; use cnp.where instead")
    if a.size == 0:
        return a.astype(np.int64)
    if a.dtype.kind not in "iu":
        raise LoweringError(f"indexing {x} with {spec!r}: arrays used as indices must be of "
                            f"integer type, got {a.dtype}")
    return a


def _scatter_add_impl(ct, *dynamic, spec, shape):
    z = np.zeros(shape, dtype=ct.dtype)
    idx = index_tuple(spec, dynamic)
    if any(isinstance(s, np.ndarray) or np.ndim(s) > 0 for s in idx):
        np.add.at(z, idx, ct)
    else:
        z[idx] = ct
    return z


def _index_vjp(ct, xs, out, spec):
    return (bind("scatter_add", ct, *xs[1:], spec=spec, shape=xs[0].shape),) + (None,) * (
        len(xs) - 1)


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


def traced_index_arrays(types: list[Any], first: int) -> bool:
    return any(t.shape != () for t in types[first:])


def item_axes(spec: tuple, ndim: int) -> list[int | None]:
    """The axis of an array of `ndim` dimensions each spec (or index) item selects on
    (None for `None` and `...`): what the `index` entry and `cfgrad.numpy`'s indexing of
    arrays and tracers both need."""
    consuming = sum(1 for s in spec if s is not None and s is not Ellipsis)
    axes: list[int | None] = []
    axis = 0
    for s in spec:
        if s is None or s is Ellipsis:
            axes.append(None)
            axis += ndim - consuming if s is Ellipsis else 0
        else:
            axes.append(axis)
            axis += 1
    return axes


def positions_source(shape: tuple[int, ...], spec: tuple, dynamic: list[str],
                     types: list[TensorType], const: Any,
                     basic_too: bool = False) -> tuple[str, int] | None:
    """For indexing an array of `shape` with `spec` (its traced indices `dynamic`, of
    `types`): the Numba expression of the flat (C order) positions `x[spec]` reads, in
    the order of the result's entries, and how many there are; None for basic indexing
    (no index array), which compiles as a subscript, unless `basic_too`.

    A position is linear in the index along each axis, so it is the positions with every
    traced index at 0, worked out now by numpy's own indexing of a positions array (every
    rule of advanced indexing holds by construction), plus each traced index (checked
    against its axis, a negative one counted from the end: `K.wrapped`) times its axis's
    stride, an index array's entries read where numpy's broadcasting puts them (loops in
    kernels, not array expressions: Numba compiles every broadcasting expression anew, a
    second or so apiece, and a kernel once per type)."""
    literal = [i for i, s in enumerate(spec) if isinstance(s, np.ndarray | list | tuple)]
    if not basic_too and not traced_index_arrays(types, 0) and not any(
            np.ndim(spec[i]) for i in literal):
        return None
    selected = index_type([TensorType(shape, np.dtype(np.int64)), *types], spec).shape
    axes = item_axes(spec, len(shape))
    marks = [i for i, s in enumerate(spec) if isinstance(s, str)]
    count = int(np.prod(selected))
    if count == 0 or any(shape[axes[i]] == 0 for i in marks):
        base = np.zeros(count, np.int64)  # no entry read, or a traced index that raises
    else:
        zeros = iter(np.zeros(t.shape, np.int64) for t in types)
        base = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)[
            tuple(next(zeros) if isinstance(s, str) else s for s in spec)].reshape(-1)
    at = _block_start(spec, len(shape), set(literal) | set(marks))
    block = len(np.broadcast_shapes(*(t.shape for t in types),
                                    *(np.shape(spec[i]) for i in literal)))
    positions = const(base)
    for i, arg, t in zip(marks, dynamic, types):
        axis = axes[i]
        stride, n = int(np.prod(shape[axis + 1:])), shape[axis]
        if t.shape == ():
            positions = f"K.offset_by({positions}, {arg}, {stride}, {n})"
        else:  # the entry of the index array each position reads, as numpy broadcasts it
            placed = ((1,) * (at + block - t.ndim) + t.shape
                      + (1,) * (len(selected) - at - block))
            which = np.broadcast_to(np.arange(t.size, dtype=np.int64).reshape(placed),
                                    selected).reshape(-1)
            positions = (f"K.offset_by_each({positions}, {const(which)}, {arg}, {stride}, "
                         f"{n})")
    return positions, count


def _flat(arg: str) -> str:
    """An array operand as a contiguous 1-D array, its entries in C order."""
    return f"np.ascontiguousarray({arg}).reshape(-1)"


def flat_values(arg: str, t: TensorType, count: int) -> str:
    """The values an update writes at `count` positions, as a 1-D array in C order."""
    return f"np.full({count}, {arg})" if t.shape == () else _flat(arg)


def _index_source(args, types, out, spec, const):
    found = positions_source(types[0].shape, spec, args[1:], types[1:], const)
    if found is not None:  # a gather through the flat positions
        gathered = f"K.gather({_flat(args[0])}, {found[0]})"
        return f"{gathered}[0]" if out.shape == () else f"{gathered}.reshape({out.shape})"
    return f"{args[0]}[{index_expression(spec, args[1:], types[0].shape, 'indexing')}]"


register(Primitive(
    name="index", impl=_index_impl, abstract=index_type, vjp=_index_vjp,
    jvp=lambda ts, xs, out, spec: None if ts[0] is None else bind("index", ts[0], *xs[1:],
                                                               spec=spec),
    family="indexing", promote="none", dynamic=(1, 2, 3, 4, 5, 6, 7, 8),
    notes="numpy basic and integer-array indexing; '$' in spec marks a traced index input; "
          "the VJP scatter-adds (repeated indices accumulate)",
    compiled=Source(_index_source, constants=True), aliases=True))


def _scatter_type(types: list[TensorType], spec: tuple, shape: tuple) -> TensorType:
    """Zeros of `shape` with the input added at `spec`: the input has the shape indexing
    `shape` with `spec` gives (scatter_add is the transpose of index)."""
    ct = types[0]
    shape = shape_param("scatter_add", shape)
    target = index_type([TensorType(shape, ct.dtype), *types[1:]], spec)
    if target.shape != ct.shape:
        raise LoweringError(f"scatter_add: spec {spec!r} selects {target} from shape "
                            f"{list(shape)}, but the input is {ct}")
    return TensorType(shape, ct.dtype)


def _scatter_add_source(args, types, out, spec, shape, const):
    found = positions_source(tuple(shape), spec, args[1:], types[1:], const)
    if found is not None:  # numpy's np.add.at: repeated positions accumulate, in order
        positions, count = found
        return (f"K.add_at_positions(np.zeros({int(np.prod(shape))}, {np_dtype(out)}), "
                f"{positions}, {flat_values(args[0], types[0], count)})"
                f".reshape({tuple(shape)})")
    sub = index_expression(spec, args[1:], tuple(shape), "scatter_add")
    return f"K.set_at(np.zeros({tuple(shape)}, {np_dtype(out)}), ({sub}), {args[0]})"


register(Primitive(
    name="scatter_add", impl=_scatter_add_impl, abstract=_scatter_type,
    vjp=lambda ct, xs, out, spec, shape: (bind("index", ct, *xs[1:], spec=spec),) + (None,) * (
        len(xs) - 1),
    jvp=lambda ts, xs, out, spec, shape: None if ts[0] is None else bind(
        "scatter_add", ts[0], *xs[1:], spec=spec, shape=shape),
    family="indexing", promote="none", dynamic=(1, 2, 3, 4, 5, 6, 7, 8),
    notes="zeros of `shape` with the input added at the indexed positions",
    compiled=Source(_scatter_add_source, constants=True)))


# -- Scan and indexed updates (issue 13): a scan's output stack, written row by row in place


class StackBuffer(Deferred):
    """The output stack of a `cg.scan`, owned by the loop that writes it: `write_row`
    assigns each iteration's row into it in place, so the stack costs one allocation per
    loop execution, not a copy per iteration. It is a Deferred so that the interpreter
    hands it as it is only to `write_row` (its `deferred_inputs`) and every other reader,
    and the caller, gets the plain array: nothing else can write to it. A checkpoint
    strategy's snapshot of the loop's carry holds the same buffer, not a copy; re-running
    an iteration from a snapshot writes the same row again."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray):
        self.array = array

    def materialize(self) -> np.ndarray:
        return self.array

    def peek(self) -> np.ndarray:
        return self.array

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self.array if dtype is None else self.array.astype(dtype)


def _write_row_impl(buf: Any, t: Any, y: np.ndarray) -> StackBuffer:
    if type(buf) is not StackBuffer:  # the loop's first write: a buffer of its own
        buf = StackBuffer(np.array(buf, copy=True))
    buf.array[t] = y
    return buf


def _write_row_type(types: list[TensorType]) -> TensorType:
    buf, t, y = types
    if buf.ndim == 0 or buf.shape[1:] != y.shape or buf.dtype != y.dtype:
        raise LoweringError(f"write_row: an {buf} stack cannot take an {y} row")
    if t.ndim != 0 or t.dtype.kind not in "iu":
        raise LoweringError(f"write_row: the row index must be an integer scalar, got {t}")
    return buf


def _write_row_source(args, types, out):
    """Row t of the stack assigned in place: native makes the stack the node's own buffer
    (`fresh_buffer`), as the interpreter's first write copies it into a StackBuffer."""
    helper = "K.write_value" if types[2].shape == () else "K.write_row"
    return f"{helper}({', '.join(args)})"


register(Primitive(
    name="write_row", impl=_write_row_impl, abstract=_write_row_type,
    vjp=lambda ct, xs, out: (ct, None, bind("index", ct, xs[1], spec=("$",))),
    jvp=lambda ts, xs, out: ts[0] if ts[2] is None else bind(
        "write_row", np.zeros(xs[0].shape, xs[0].dtype) if ts[0] is None else ts[0], xs[1],
        ts[2]),
    compiled=Source(_write_row_source, fresh_buffer=True),
    family="indexing", promote="none", dynamic=(1,), mutates=True, deferred_result=True,
    deferred_inputs=(0,), unchecked=True,
    notes="stack[t] = y for a row t of `stack` that is zero (a cg.scan's output stack, each "
          "row written once): it is stack + onehot(t) y, so its VJP passes the stack's "
          "cotangent through and reads the row's, ct[t]. Assigned in place (a StackBuffer), "
          "so a checkpoint strategy re-running an iteration writes the row again, not twice"))


# -- Indexed updates (x.at[idx].set / multiply / min / max; add is a scatter_add): the
# functional form of numpy's `x[idx] = v` and `np.multiply.at` / `minimum.at` / `maximum.at`


_SCATTER_UFUNCS = {"mul": np.multiply, "min": np.minimum, "max": np.maximum}


def _scatter_impl(x, v, *dynamic, spec, op):
    out = np.array(x, copy=True)
    idx = index_tuple(spec, dynamic)
    if op == "set":
        out[idx] = v  # repeated indices: the last write wins (numpy's order)
    else:
        _SCATTER_UFUNCS[op].at(out, idx, v)
    return out


def _scatter_op_type(types: list[TensorType], spec: tuple, op: str) -> TensorType:
    """x's type; v has the type indexing x with `spec` gives (the caller broadcasts it)."""
    x, v = types[0], types[1]
    if op not in ("set", "mul", "min", "max"):
        raise LoweringError(f"scatter: parameter op must be 'set', 'mul', 'min' or 'max', got "
                            f"{op!r}")
    target = index_type([x, *types[2:]], spec)
    if target != TensorType(target.shape, v.dtype) or v.shape != target.shape:
        raise LoweringError(f"scatter: spec {spec!r} selects {target} from {x}, but the "
                            f"update is {v}")
    return x


class _Scattered:
    """The pieces a scatter's rules are written with: gathering at its index, scattering
    into its index, and whether an index may repeat (an integer array among the items)."""

    def __init__(self, xs: list[Any], spec: tuple):
        self.x, self.v, self.dynamic, self.spec = xs[0], xs[1], xs[2:], spec
        self.repeats = any(isinstance(s, np.ndarray) and s.ndim > 0 for s in spec) or any(
            d.ndim > 0 for d in self.dynamic)

    def gather(self, a: Any) -> Any:
        return bind("index", a, *self.dynamic, spec=self.spec)

    def scatter(self, base: Any, v: Any, op: str) -> Any:
        return bind("scatter", base, v, *self.dynamic, spec=self.spec, op=op)

    def add(self, v: Any) -> Any:
        return bind("scatter_add", v, *self.dynamic, spec=self.spec, shape=self.x.shape)

    def zeros(self, like: Any) -> np.ndarray:
        return np.zeros(like.shape, like.dtype)

    def winners(self) -> Any:
        """1 where an update is the one written (the last of a repeated index), else 0."""
        v = self.v
        if not self.repeats:
            return None
        order = np.arange(v.size, dtype=np.int64).reshape(v.shape)
        ids = self.scatter(np.full(self.x.shape, -1, np.int64), order, "set")
        return mask_like(bind("eq", self.gather(ids), order), v)

    def others_product(self) -> Any:
        """For each update, the product of the other updates to its position (1 when none):
        counted with zeros apart, so an update of 0 does not make it 0/0."""
        v = self.v
        if not self.repeats:
            return None
        zero = bind("eq", v, np.zeros((), v.dtype))
        nonzero = bind("where", zero, np.ones((), v.dtype), v)
        product = self.gather(self.scatter(np.ones(self.x.shape, v.dtype), nonzero, "mul"))
        zeros = self.gather(self.add(mask_like(zero, v)))
        none = np.zeros((), v.dtype)
        return bind("where", zero, bind("where", bind("eq", zeros, np.ones((), v.dtype)),
                                        product, none),
                    bind("where", bind("eq", zeros, none), product / nonzero, none))

    def extremes(self, out: Any) -> tuple[Any, Any, Any]:
        """Masks of x and of the updates equal to the result (min/max), and how many tie
        at each position: ties share the derivative equally, as in JAX."""
        at_x = mask_like(bind("eq", self.x, out), self.x)
        at_v = mask_like(bind("eq", self.v, self.gather(out)), self.v)
        count = bind("maximum", at_x + self.add(at_v), np.ones((), self.x.dtype))
        return at_x, at_v, count


def _times(a: Any, b: Any) -> Any:
    return a if b is None else a * b


def _scatter_vjp(ct, xs, out, spec, op):
    s = _Scattered(xs, spec)
    rest = (None,) * len(s.dynamic)
    if op == "set":
        return (s.scatter(ct, s.zeros(s.v), "set"), _times(s.gather(ct), s.winners())) + rest
    if op == "mul":
        factor = s.scatter(np.ones(s.x.shape, s.x.dtype), s.v, "mul")
        return (ct * factor, _times(s.gather(ct * s.x), s.others_product())) + rest
    at_x, at_v, count = s.extremes(out)
    share = ct / count
    return (share * at_x, s.gather(share) * at_v) + rest


def _scatter_jvp(ts, xs, out, spec, op):
    s = _Scattered(xs, spec)
    tx, tv = ts[0], ts[1]
    if tx is None and tv is None:
        return None
    if op == "set":
        return s.scatter(s.zeros(s.x) if tx is None else tx, s.zeros(s.v) if tv is None else tv,
                         "set")
    if op == "mul":
        factor = s.scatter(np.ones(s.x.shape, s.x.dtype), s.v, "mul")
        terms = [tx * factor if tx is not None else None,
                 s.x * s.add(_times(tv, s.others_product())) if tv is not None else None]
        return add_terms(*terms)
    at_x, at_v, count = s.extremes(out)
    terms = [tx * at_x if tx is not None else None,
             s.add(tv * at_v) if tv is not None else None]
    return add_terms(*terms) / count


_SCATTER_KERNELS = {"set": "set", "mul": "multiply", "min": "minimum", "max": "maximum"}


def _scatter_source(args, types, out, spec, op, const):
    """A copy of x updated in place through the flat positions its index reads, in
    numpy's order (`K.set_at_positions` and its siblings: a repeated position keeps the
    last update for set, takes every one in turn for the others); a set at a basic index
    is a subscript assignment to the copy."""
    x, v = types[0], types[1]
    if x.shape == ():
        raise Unsupported("an update of a 0-d array (compiled: arrays of 1 or more axes)")
    if op in ("min", "max") and x.dtype.kind == "c":
        raise Unsupported(f"x.at[...].{op} of complex numbers (numpy's lexicographic order)")
    found = positions_source(x.shape, spec, args[2:], types[2:], const, basic_too=op != "set")
    if found is None:
        sub = index_expression(spec, args[2:], x.shape, "x.at[...].set")
        return f"K.set_at({args[0]}.copy(), ({sub}), {args[1]})"
    positions, count = found
    return (f"K.{_SCATTER_KERNELS[op]}_at_positions({args[0]}.copy().reshape(-1), {positions}, "
            f"{flat_values(args[1], v, count)}).reshape({x.shape})")


register(Primitive(
    name="scatter", impl=_scatter_impl, abstract=_scatter_op_type, vjp=_scatter_vjp,
    jvp=_scatter_jvp, family="indexing", promote="none", dynamic=(2, 3, 4, 5, 6, 7, 8, 9),
    compiled=Source(_scatter_source, constants=True),
    notes="x.at[idx].set / multiply / min / max (op set, mul, min, max): a repeated index "
          "keeps the last update for set (only that one gets a gradient), multiplies all "
          "for mul (each update's derivative is the product of the others, exact with "
          "zeros), and for min/max ties between x and the updates share the derivative "
          "equally, as in JAX"))


