"""The SSA block IR: values, nodes, blocks, regions, programs, and their text form.

A Program is a list of basic blocks in SSA form. Control flow is explicit: a block ends
in exactly one terminator (`Jmp`, `Cond` with `Proj` edges, or `Return`), and values that
meet at a join are merged by `Phi` nodes. Tracing also records the structure it built as
regions (`IfRegion`, `LoopRegion`), so later passes walk regions instead of rediscovering
them from the graph.

`Program.text()` is the deterministic printed form: names are assigned at print time in
definition order, so two equal programs print the same and golden tests are stable.

Programs are data and transformations are functions (as in JAX, where a jaxpr has no
`.grad()`): the adjoint is `cg.adjoint(program)` (reverse.py), reading text back is
`cg.parse_program(text)` (irparse.py) and the rich views are `cg.inspect(program)`
(the inspector package). So this module imports nothing of cfgrad but `nodespec`, and every layer
above can build on it without an import cycle.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from .nodespec import KIND_BY_NAME, PRIMITIVE, NodeKind

_DTYPE_NAMES = {
    "float16": "f16", "float32": "f32", "float64": "f64",
    "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
    "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
    "bool": "bool", "complex64": "c64", "complex128": "c128",
}
DTYPE_BY_SHORT_NAME = {short: np.dtype(long) for long, short in _DTYPE_NAMES.items()}
#: What an error message lists as the allowed dtypes.
DTYPE_CHOICES = ", ".join(f"{short} ({long})" for long, short in _DTYPE_NAMES.items())


def ir_dtype(x: Any) -> np.dtype | None:
    """The dtype `x` is (a numpy dtype, or a scalar type such as `np.float32`) when the IR
    has a name for it, else None. The one test of "a dtype the IR supports", used by the
    parser (`dtype(…)`, `array(…)` literals) and by the shape rules (`astype`, `const`):
    any other dtype would make a value whose type cannot be printed, parsed or traced."""
    if isinstance(x, type) and issubclass(x, np.generic):
        x = np.dtype(x)
    if isinstance(x, np.dtype) and x.name in _DTYPE_NAMES and x.isnative:
        return x
    return None


@dataclass(frozen=True)
class TensorType:
    """The abstract type of a value: a static shape and a numpy dtype."""

    shape: tuple[int, ...]
    dtype: np.dtype

    def __str__(self) -> str:
        return f"{_DTYPE_NAMES[self.dtype.name]}[{','.join(map(str, self.shape))}]"

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def is_float(self) -> bool:
        """Whether values of this type carry derivatives (tangents, cotangents): the
        inexact dtypes, float and complex (numpy's `np.inexact`, as JAX's grad takes)."""
        return self.dtype.kind in "fc"


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """numpy's broadcast of `shapes` (ValueError where they do not broadcast), for any
    number of dimensions: `np.broadcast_shapes` goes through `np.broadcast`, which takes at
    most 32 dimensions where numpy's arrays and ufuncs take 64."""
    ndim = max((len(s) for s in shapes), default=0)
    result = [1] * ndim
    for shape in shapes:
        for i, d in enumerate(shape, ndim - len(shape)):
            if d != 1:
                if result[i] not in (1, d):
                    raise ValueError("shape mismatch: objects cannot be broadcast to a single "
                                     f"shape; {' and '.join(map(str, shapes))}")
                result[i] = d
    return tuple(result)


def type_of(x: Any) -> TensorType:
    """The TensorType of a concrete numpy array or scalar."""
    a = np.asarray(x)
    return TensorType(tuple(a.shape), a.dtype)


class Value:
    """An SSA value. Identity is the object: there are no ids to keep in sync."""

    __slots__ = ("type", "hint")

    def __init__(self, type: TensorType, hint: str | None = None):
        self.type = type
        self.hint = hint

    def __repr__(self) -> str:
        return f"<Value {self.hint or ''}: {self.type}>"


@dataclass(frozen=True)
class SourceLoc:
    """Where in the user's code a node was traced."""

    file: str
    line: int
    function: str = ""

    def __str__(self) -> str:
        return f"{os.path.basename(self.file)}:{self.line}"


class Node:
    """A straight-line operation: a primitive (`add`, `mul`, …) or a runtime node of an
    adjoint program (`Primal`, `LogPop`, `TripPop`, `LoopState`)."""

    __slots__ = ("op", "inputs", "params", "outputs", "loc", "origin")

    def __init__(self, op: str, inputs: list[Value], params: dict[str, Any],
                 outputs: list[Value], loc: SourceLoc | None = None, origin: str | None = None):
        self.op = op
        self.inputs = inputs
        self.params = params
        self.outputs = outputs
        self.loc = loc
        # in an adjoint: the forward primitive whose derivative rule emitted this node (so a
        # NaN found here is reported as "in the derivative of sqrt", not as a bare `div`)
        self.origin = origin

    def __repr__(self) -> str:
        return f"<Node {self.op}>"


class Phi:
    """Merges one value per predecessor edge of its block, in predecessor order."""

    __slots__ = ("out", "inputs")

    def __init__(self, out: Value, inputs: list[Value]):
        self.out = out
        self.inputs = inputs


@dataclass(frozen=True)
class Edge:
    """A control edge: its source block and the Proj key it leaves by (None for `Jmp`)."""

    src: Block
    key: Any = None

    def label(self, names: dict[Block, str]) -> str:
        return names[self.src] if self.key is None else f"{names[self.src]}.{key_text(self.key)}"


def key_text(key: Any) -> str:
    if key is True:
        return "T"
    if key is False:
        return "F"
    return str(key)


class Jmp:
    __slots__ = ("target",)

    def __init__(self, target: Block):
        self.target = target

    def successors(self) -> list[tuple[Any, Block]]:
        return [(None, self.target)]


class Cond:
    """Branch on `selector`; `cases` maps each Proj key (True/False or 0..n-1) to a block."""

    __slots__ = ("selector", "cases")

    def __init__(self, selector: Value, cases: list[tuple[Any, Block]]):
        self.selector = selector
        self.cases = cases

    def successors(self) -> list[tuple[Any, Block]]:
        return list(self.cases)


class Return:
    __slots__ = ("values",)

    def __init__(self, values: list[Value]):
        self.values = values

    def successors(self) -> list[tuple[Any, Block]]:
        return []


Terminator = Jmp | Cond | Return
PHI, PROJ = KIND_BY_NAME["Phi"], KIND_BY_NAME["Proj"]


class Block:
    __slots__ = ("preds", "phis", "nodes", "term", "region", "role", "mirrors")

    def __init__(self, region: Region | None = None, role: str = ""):
        self.preds: list[Edge] = []
        self.phis: list[Phi] = []
        self.nodes: list[Node] = []
        self.term: Terminator | None = None
        self.region = region
        self.role = role  # e.g. "case T", "header", "merge": shown in the printed form
        self.mirrors: Block | None = None  # adjoint blocks: the forward block they mirror

    def __repr__(self) -> str:
        return f"<Block {self.role}>"

    def pred_index(self, src: Block, key: Any) -> int:
        """The position of edge (src, key) among this block's predecessors: the input its
        Phis take along that edge (a switch's key 1 is not a cond's True)."""
        return next(j for j, e in enumerate(self.preds) if e.src is src and e.key == key
                    and type(e.key) is type(key))


@dataclass(eq=False)
class Region:
    """A piece of structure recorded by lowering; regions form a tree via `parent`."""

    id: str
    parent: Region | None
    loc: SourceLoc | None


@dataclass(eq=False)
class IfRegion(Region):
    """`cond`/`switch`: `branch` ends in the Cond, `cases[k]` is case k's entry block,
    `case_exits[k]` the block of case k that jumps to `merge`."""

    kind: str = "cond"
    branch: Block | None = None
    cases: list[Block] = field(default_factory=list)
    case_exits: list[Block] = field(default_factory=list)
    merge: Block | None = None

    @property
    def keys(self) -> list[Any]:
        return [True, False] if self.kind == "cond" else list(range(len(self.cases)))


@dataclass(eq=False)
class LoopRegion(Region):
    """`while_loop`/`fori_loop`: `preheader` jumps to `header`, whose Phis are the carry and
    whose Cond enters `body` (True) or leaves to `exit` (False); `latch` jumps back.
    `exit` starts with one single-input Phi per carry (loop-closed SSA), so nothing outside
    the loop reads the header's Phis directly."""

    kind: str = "while"
    preheader: Block | None = None
    header: Block | None = None
    body: Block | None = None
    latch: Block | None = None
    exit: Block | None = None
    checkpoint: Any = None
    max_iters: int | None = None
    trip_bounds: tuple[Value, Value] | None = None  # fori_loop: (lower, upper) at entry


class Program:
    """Parameters, blocks (the first is the start block) and the region tree."""

    def __init__(self, name: str, params: list[Value], blocks: list[Block],
                 regions: list[Region], outputs: list[Value] | None = None):
        self.name = name
        self.params = params
        self.blocks = blocks
        self.regions = regions
        # API metadata (pytree structures); not part of the printed form.
        self.in_tree: Any = None
        self.out_tree: Any = None
        self.forward: Program | None = None  # set on adjoint programs
        # where the traced function is defined (its def line): the line of the nodes that
        # cfgrad emits on its own; a derived program keeps its source's (None: parsed text)
        self.loc: SourceLoc | None = None

    # -- queries -----------------------------------------------------------------
    @property
    def return_block(self) -> Block:
        return next(b for b in self.blocks if isinstance(b.term, Return))

    @property
    def outputs(self) -> list[Value]:
        term = self.return_block.term
        assert isinstance(term, Return)
        return term.values

    def loops(self) -> list[LoopRegion]:
        return [r for r in self.regions if isinstance(r, LoopRegion)]

    def ifs(self) -> list[IfRegion]:
        return [r for r in self.regions if isinstance(r, IfRegion)]

    def node_count(self) -> int:
        return sum(len(b.nodes) + len(b.phis) + 1 for b in self.blocks)

    # -- printing ----------------------------------------------------------------
    def names(self) -> tuple[dict[Value, str], dict[Block, str]]:
        """Print names: parameters by hint, other values numbered in definition order.

        The maps answer `%?` / `?` for values and blocks the program never defines, so a
        broken program still prints (the verifier shows it in its error messages)."""
        vnames: dict[Value, str] = _Names("%?")
        used: set[str] = set()
        for i, p in enumerate(self.params):
            name = p.hint if p.hint and p.hint not in used and not p.hint.isdigit() else None
            k = i
            while name is None or name in used:
                name, k = f"arg{k}", k + 1
            used.add(name)
            vnames[p] = "%" + name
        counter = 0
        for b in self.blocks:
            for n in b.nodes:
                if is_inline_const(n):
                    vnames[n.outputs[0]] = const_literal(n.params["value"])
            for v in defined_values([b]):
                if v not in vnames:
                    vnames[v] = f"%{counter}"
                    counter += 1
        prefix = "r" if self.forward is not None else "b"
        bnames: dict[Block, str] = _Names("?")
        bnames.update((b, f"{prefix}{i}") for i, b in enumerate(self.blocks))
        return vnames, bnames

    def text(self) -> str:
        return "\n".join(program_lines(self)) + "\n"

    def __str__(self) -> str:
        return self.text()

    def __repr__(self) -> str:
        return f"<Program {self.name}: {len(self.blocks)} blocks, {self.node_count()} nodes>"


# ---------------------------------------------------------------------------------
# Text form
# ---------------------------------------------------------------------------------

class _Names(dict):
    """A name map that answers `missing` for keys it lacks instead of raising."""

    def __init__(self, missing: str):
        super().__init__()
        self.missing = missing

    def __missing__(self, key: Any) -> str:
        return self.missing


def complex_text(value: complex) -> str:
    """`(1+2j)`, or `complex(1.0, nan)` where Python's repr would not read back exactly
    (a non-finite part: `(1+nanj)`; a negative zero: `(-0-1j)`)."""
    parts = (value.real, value.imag)
    if all(math.isfinite(x) and (x != 0 or math.copysign(1.0, x) > 0) for x in parts):
        return repr(value)
    return f"complex({repr(value.real)}, {repr(value.imag)})"


def format_param(value: Any) -> str:
    """A parseable literal for a static node parameter (see irparse.eval_param)."""
    if isinstance(value, np.ndarray):
        # zeros of an accumulator, a parsed `full` (a broadcast view: no comparison needed)…
        if value.size > 1 and (not any(value.strides) or (value == value.flat[0]).all()):
            return f"full({value.shape!r}, {format_param(value.flat[0])}, {value.dtype.name!r})"
        shape = f", shape={value.shape!r}" if value.size == 0 and value.ndim != 1 else ""
        items = format_param(value.tolist()) if value.dtype.kind == "c" else repr(value.tolist())
        return f"array({items}, {value.dtype.name!r}{shape})"
    if isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.generic)):
        return f"dtype({np.dtype(value).name!r})"
    if isinstance(value, slice):
        return f"slice({format_param(value.start)}, {format_param(value.stop)}, " \
               f"{format_param(value.step)})"
    if value is Ellipsis:
        return "..."
    if isinstance(value, tuple):
        inner = ", ".join(format_param(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, list):
        return "[" + ", ".join(format_param(v) for v in value) + "]"
    if isinstance(value, float | np.floating):
        return repr(float(value))
    if isinstance(value, complex | np.complexfloating):
        return complex_text(complex(value))
    if isinstance(value, np.integer):
        return repr(int(value))
    if isinstance(value, np.bool_):
        return repr(bool(value))
    if isinstance(value, Region):
        return value.id
    return repr(value)


def is_inline_const(n: Node) -> bool:
    """Scalar constants print inline as literals (`mul %3, 2.0`), not as their own lines.
    A broken `const` (no value, or a value that is no scalar of an IR dtype) prints as a
    line of its own, so the verifier's message shows what is wrong with it."""
    if n.op != "const" or n.inputs or len(n.outputs) != 1 or len(n.params) != 1:
        return False
    value, out = n.params.get("value"), n.outputs[0].type
    return (isinstance(value, np.ndarray) and value.shape == out.shape == ()
            and value.dtype == out.dtype and ir_dtype(value.dtype) is not None)


def const_literal(value: np.ndarray) -> str:
    """`2.0` (f64), `3` (i64), `True` (bool), or `2.0:f32` for other dtypes."""
    item = value.item()
    text = (repr(float(item)) if value.dtype.kind == "f"
            else complex_text(item) if value.dtype.kind == "c" else repr(item))
    if value.dtype in (np.dtype(np.float64), np.dtype(np.int64), np.dtype(np.bool_)):
        return text
    return f"{text}:{_DTYPE_NAMES[value.dtype.name]}"


def _region_line(r: Region, vn: dict[Value, str], bn: dict[Block, str]) -> str:
    parent = f" in {r.parent.id}" if r.parent else ""
    if isinstance(r, IfRegion):
        cases = ", ".join(bn[c] for c in r.cases)
        exits = ", ".join(bn[c] for c in r.case_exits)
        return (f"  region {r.id} {r.kind} at {bn[r.branch]} cases ({cases}) "
                f"exits ({exits}) merge {bn[r.merge]}{parent}")
    assert isinstance(r, LoopRegion)
    extra = ""
    if r.trip_bounds is not None:
        extra += f" bounds ({vn[r.trip_bounds[0]]}, {vn[r.trip_bounds[1]]})"
    extra += f" checkpoint={r.checkpoint!r}" if r.checkpoint is not None else ""
    extra += f" max_iters={r.max_iters}" if r.max_iters is not None else ""
    return (f"  region {r.id} {r.kind} preheader {bn[r.preheader]} header {bn[r.header]} "
            f"body {bn[r.body]} latch {bn[r.latch]} exit {bn[r.exit]}{parent}{extra}")


def block_comment(b: Block) -> str:
    """`; if#0 case T`: the region that made the block and the block's role in it."""
    words = " ".join(w for w in (b.region.id if b.region is not None else "", b.role) if w)
    return "; " + words if words else ""


class Piece(NamedTuple):
    """A run of printed text and what it is: the inspector styles the printer's own
    pieces, so both show a node with one spelling."""

    text: str
    role: str = ""  # a node kind's name (its keyword), "primitive", "block" or ""
    key: Any = None  # on the pieces of a Cond's case: that case's Proj key


def _joined(groups: list[list[Piece]], sep: str) -> list[Piece]:
    out: list[Piece] = []
    for i, group in enumerate(groups):
        if i:
            out.append(Piece(sep))
        out.extend(group)
    return out


def render(kind: NodeKind, fields: dict[str, Any], vn: dict[Value, str],
           bn: dict[Block, str] | None = None, fwd_names: dict[Value, str] | None = None,
           back_edge: bool = False) -> list[Piece]:
    """`kind`'s syntax with its `$variables` filled from `fields` (slot name → what the
    node holds there: a Value, a list of them, a Block, …), written as each slot's form
    says (nodespec.FORMS)."""

    def variable(name: str) -> list[Piece]:
        x = fields.get(name)
        if name == "op":
            return [Piece(x, "primitive")]
        if name == "params":
            return [Piece("{" + ", ".join(f"{k}={format_param(x[k])}" for k in sorted(x))
                          + "}")] if x else []
        form = kind.slot[name].form
        if form == "value":
            return [Piece(vn[x])]
        if form == "values":
            return _joined([[Piece(vn[v])] for v in x], ", ")
        if form == "edge-values":
            return _joined([[Piece(e.label(bn), "Jmp" if e.key is None else "Proj"),
                             Piece(": " + vn[v])] for e, v in x], ", ")
        if form == "block":
            return [Piece(bn[x], "block")] + ([Piece(" ↺", kind.name)] if back_edge else [])
        if form == "cases":
            return _joined([[p._replace(key=key) for p in render(
                PROJ, {"key": key, "target": target}, vn, bn)] for key, target in x], " | ")
        if form == "key":
            return [Piece(key_text(x), kind.name)]
        assert form == "forward-value", form
        return [Piece(fwd_names[x] if fwd_names else "%?")]

    out: list[Piece] = []
    for i, word in enumerate(kind.words):
        pieces = [p for text, is_var in word
                  for p in (variable(text) if is_var else [Piece(text, kind.name if i == 0
                                                                 else "")])]
        if pieces:
            out.extend(([Piece(" ")] if out else []) + pieces)
    return out


def node_pieces(n: Node, vn: dict[Value, str], fwd_names: dict[Value, str] | None = None
                ) -> list[Piece]:
    """A node's right-hand side: `mul %1, %2`, `LogPop {region=if#0}`, `Primal ^%3`. A
    runtime node that does not fit its declaration prints in the primitive form, which
    shows all it holds (the verifier then says what is wrong)."""
    kind = KIND_BY_NAME.get(n.op)
    if kind is not None and len(n.inputs) == len(kind.operands) and all(
            s.name in n.params for s in kind.params):
        fields: dict[str, Any] = dict(zip([s.name for s in kind.operands], n.inputs))
        named = {name for word in kind.words for name, is_var in word if is_var}
        fields.update(n.params)
        fields["params"] = {k: v for k, v in n.params.items() if k not in named}
        return render(kind, fields, vn, fwd_names=fwd_names)
    pieces = render(PRIMITIVE, {"op": n.op, "inputs": n.inputs, "params": n.params}, vn)
    return [p._replace(role=n.op) if p.role == "primitive" and n.op in KIND_BY_NAME else p
            for p in pieces]


def node_text(n: Node, vn: dict[Value, str], fwd_names: dict[Value, str] | None = None) -> str:
    """`%3: f64[] = mul %1, %2 {axis=(0,)}` (without the source comment)."""
    outs = ", ".join(f"{vn[o]}: {o.type}" for o in n.outputs)
    rhs = "".join(p.text for p in node_pieces(n, vn, fwd_names))
    return f"{outs} = {rhs}" if outs else rhs


def phi_pieces(b: Block, phi: Phi, vn: dict[Value, str], bn: dict[Block, str]) -> list[Piece]:
    """`Phi (b1: %1, b0.T: %2)`: the inputs labelled by the edges they arrive by."""
    return render(PHI, {"inputs": list(zip(b.preds, phi.inputs))}, vn, bn)


def term_pieces(b: Block, vn: dict[Value, str], bn: dict[Block, str], back_edge: bool
                ) -> list[Piece]:
    """`Cond %0 -> Proj(T) b1 | Proj(F) b2`, `Jmp b1 ↺`, `Return %4`."""
    t = b.term
    if t is None:
        return [Piece("<no terminator>", "error")]
    kind = KIND_BY_NAME[type(t).__name__]
    fields = {s.name: getattr(t, s.name) for s in kind.operands + kind.successors}
    return render(kind, fields, vn, bn, back_edge=back_edge)


def term_text(b: Block, vn: dict[Value, str], bn: dict[Block, str], back_edge: bool) -> str:
    return "".join(p.text for p in term_pieces(b, vn, bn, back_edge))


def back_edge_sources(program: Program) -> set[Block]:
    return {r.latch for r in program.loops()}


def program_lines(program: Program) -> list[str]:
    vn, bn = program.names()
    fwd_names: dict[Value, str] | None = None
    fwd_blocks: dict[Block, str] | None = None
    if program.forward is not None:  # adjoints name forward values and mirrored blocks
        fwd_names, fwd_blocks = program.forward.names()
    params = ", ".join(f"{vn[p]}: {p.type}" for p in program.params)
    returns = [b.term for b in program.blocks if isinstance(b.term, Return)]
    outs = ", ".join(str(v.type) for v in returns[0].values) if returns else "?"
    lines = [f"program {program.name}({params}) -> ({outs})"]
    latches = back_edge_sources(program)
    width = 48

    def emit(text: str, comment: str) -> None:
        lines.append(f"{text:<{width}} {comment}".rstrip() if comment else text)

    for r in program.regions:
        emit(_region_line(r, vn, bn), f"; {r.loc}" if r.loc else "")
    for b in program.blocks:
        preds = ""
        if b.preds:
            preds = " preds (" + ", ".join(e.label(bn) for e in b.preds) + ")"
        comment = block_comment(b)
        if b.mirrors is not None and fwd_blocks is not None:
            comment = (comment + ", " if comment else "; ") + f"mirrors {fwd_blocks[b.mirrors]}"
        emit(f"{bn[b]}:{preds}", comment)
        for phi in b.phis:
            rhs = "".join(p.text for p in phi_pieces(b, phi, vn, bn))
            emit(f"  {vn[phi.out]}: {phi.out.type} = {rhs}", "")
        for n in b.nodes:
            if not is_inline_const(n):
                emit("  " + node_text(n, vn, fwd_names), f"; {n.loc}" if n.loc else "")
        emit("  " + term_text(b, vn, bn, b in latches), "")
    return lines


def region_blocks(r: Region) -> set[Block]:
    """The blocks inside a region: for an if, those reachable from its cases before the
    merge; for a loop, the header and those reachable from it before the exit."""
    if isinstance(r, IfRegion):
        return reachable(r.cases, r.merge)
    assert isinstance(r, LoopRegion)
    return reachable([r.header], r.exit)


def reachable(starts: list[Block], stop: Block | None) -> set[Block]:
    """The blocks reachable from `starts` without passing through `stop`."""
    inside: set[Block] = set()
    stack = list(starts)
    while stack:
        b = stack.pop()
        if b in inside or b is stop:
            continue
        inside.add(b)
        stack.extend(t for _, t in b.term.successors())
    return inside


def defined_values(blocks: Iterable[Block]) -> list[Value]:
    """The values the blocks define, in program order: each block's Phi results, then its
    node results. Naming, home-region and definition tables all start from this list."""
    return [v for b in blocks for v in [phi.out for phi in b.phis]
            + [o for n in b.nodes for o in n.outputs]]


def loop_owners(program: Program) -> dict[Value, LoopRegion | None]:
    """The innermost loop whose header or body defines each value (None: not in a loop).

    A loop's exit block belongs to the enclosing scope (loop-closed SSA), so the final
    carry is owned by the enclosing loop, which keeps it in its own saved state."""
    owner: dict[Value, LoopRegion | None] = {v: None for v in program.params}
    loop_of = RegionNest(program.regions).loop_of
    for b, region in innermost_regions(program).items():
        r = loop_of.get(region)
        owner.update((v, r) for v in defined_values([b]))
    return owner


def innermost_regions(program: Program, fail: Callable[[str, Block, str], Any] | None = None
                      ) -> dict[Block, Region | None]:
    """The innermost region around each block (None: the top level), in one pass.

    The walk reads the program the way the reverse builder and the interpreter do: from
    the start block along `Jmp`s; at an if region's branch block into each case, which
    must reach the merge through its recorded exit, and on from the merge; at a loop's
    preheader into the header and the body, which must come back through the latch, and
    on from the exit. It keeps its own stack (nesting depth is not bounded by Python's
    recursion limit) and visits each block once.

    With `fail`, this is the verifier's structure check: `fail(tag, block, message)` is
    called, and must raise, where the control flow is not what the regions record (a Cond
    no region owns, a block reached twice: a cycle other than a loop's back edge or a
    region reaching outside itself, an unreachable block). Without it the program is
    taken as verified, and a path that breaks the structure is simply not followed."""
    names: dict[Block, str] = {}

    def name(b: Block | None) -> str:
        if not names:
            names.update(program.names()[1])
        return names[b] if b is not None else "a nested region's join"

    def broken(tag: str, block: Block, message: str) -> None:
        if fail is not None:
            fail(tag, block, message)

    starts: dict[Block, Region] = {}
    headers = {r.header: r for r in program.regions if isinstance(r, LoopRegion)}
    for r in program.regions:
        anchor = region_start(r)
        other = starts.get(anchor) or headers.get(anchor)
        if other is not None and other is not r:
            broken("region-shape", anchor, f"{other.id} and {r.id} both start at {name(anchor)}")
        starts[anchor] = r
    owner: dict[Block, Region | None] = {}
    path_of: dict[Block, str] = {}
    # (first block, the block that ends the path, the region its blocks lie in, the block
    # that must jump to the end, what the path is)
    work: list[tuple[Block, Block | None, Region | None, Block | None, str]] = [
        (program.blocks[0], None, None, None, "the top level")]
    while work:
        b, stop, region, last, where = work.pop()
        prev: Block | None = None
        entered: Region | None = None  # the region just stepped over to reach `b`
        while b is not stop:
            if b in owner:
                if entered is not None:
                    broken("regions-nest", region_start(entered),
                           f"{entered.id} starts in {where} but ends at {name(b)}, in "
                           f"{path_of[b]}: regions overlap without nesting")
                elif path_of[b] == where:
                    broken("structured", b, f"{where} comes back to {name(b)} from "
                                            f"{name(prev)}: the only cycles allowed are loops, "
                                            "whose latch jumps back to a loop region's header")
                else:
                    broken("structured", b, f"{name(b)} is reached from {where} and from "
                                            f"{path_of[b]}: control leaves a region only "
                                            "through its merge or exit")
                break
            owner[b], path_of[b] = region, where
            r = starts.get(b)
            if isinstance(r, IfRegion):
                work.extend((case, r.merge, r, case_exit, f"case {key_text(key)} of {r.id}")
                            for key, case, case_exit in reversed(list(zip(
                                r.keys, r.cases, r.case_exits))))
                b, prev, entered = r.merge, None, r
            elif isinstance(r, LoopRegion):
                if r.header in owner:
                    broken("structured", r.header, f"{name(r.header)}, the header of {r.id}, "
                                                   f"is also reached from {path_of[r.header]}")
                    break
                owner[r.header], path_of[r.header] = r, f"the header of {r.id}"
                work.append((r.body, r.header, r, r.latch, f"the body of {r.id}"))
                b, prev, entered = r.exit, None, r
            elif isinstance(b.term, Jmp):
                b, prev, entered = b.term.target, b, None
                continue
            elif isinstance(b.term, Cond):
                if b in headers:
                    broken("structured", b, f"{where} enters {name(b)}, the header of "
                                            f"{headers[b].id}, from {name(prev)}, which is "
                                            "neither its preheader nor its latch")
                else:
                    broken("cond-region", b, "the Cond belongs to no region: record the if "
                                             "region it branches for (`region if#N cond at "
                                             f"{name(b)} …`) or the loop it is the header of")
                break
            else:
                if stop is not None:
                    broken("structured", b, f"{where} returns instead of reaching "
                                            f"{name(stop)}")
                break
            if b is stop:
                broken("regions-nest", region_start(r), f"{r.id} ends at {name(b)}, where {where} "
                                                  f"ends too: a region must end inside the "
                                                  "region around it")
                break
        else:
            if prev is not last:
                broken("region-shape", b, f"{where} reaches {name(stop)} from {name(prev)}, "
                                          f"not from its recorded exit {name(last)}")
    for b in program.blocks:
        if b not in owner:
            broken("structured", b, f"{name(b)} cannot be reached from the start block")
    return owner


def region_start(r: Region) -> Block | None:
    """The block control enters a region from: an if's branch block, a loop's preheader."""
    return r.branch if isinstance(r, IfRegion) else r.preheader if isinstance(r, LoopRegion) \
        else None


def region_head(r: Region) -> Block | None:
    """The block an error message names a region by: an if's branch block, a loop's header
    (the loop's own first block; its preheader is code of the enclosing region)."""
    return r.branch if isinstance(r, IfRegion) else r.header if isinstance(r, LoopRegion) \
        else None


def region_join(r: Region) -> Block | None:
    """Where control leaves a region: an if's merge block, a loop's exit."""
    return r.merge if isinstance(r, IfRegion) else r.exit if isinstance(r, LoopRegion) \
        else None


class RegionNest:
    """The region tree, numbered in preorder so that `encloses` answers in constant time
    at any nesting depth (walking `parent` links would cost the depth per question)."""

    def __init__(self, regions: list[Region]):
        children: dict[Region | None, list[Region]] = {}
        for r in regions:
            children.setdefault(r.parent, []).append(r)
        self.children = children
        self.preorder: list[Region] = []
        self.first: dict[Region, int] = {}
        self.last: dict[Region, int] = {}
        self.loop_of: dict[Region | None, LoopRegion | None] = {None: None}
        stack: list[tuple[Region, bool]] = [(r, False) for r in reversed(children.get(None, []))]
        while stack:
            r, done = stack.pop()
            if done:
                self.last[r] = len(self.first) - 1
                continue
            self.first[r] = len(self.first)
            self.preorder.append(r)
            self.loop_of[r] = r if isinstance(r, LoopRegion) else self.loop_of[r.parent]
            stack.append((r, True))
            stack.extend((c, False) for c in reversed(children.get(r, [])))

    def encloses(self, outer: Region | None, inner: Region | None) -> bool:
        """Whether `inner` is `outer` or nested in it (None is the top level)."""
        if outer is None:
            return True
        return inner is not None and self.first[outer] <= self.first[inner] <= self.last[outer]


@dataclass(frozen=True)
class RegionIndex:
    """What a bottom-up pass over the region tree starts from: the tree (`nest`), each
    region's own blocks, those not inside a nested region (`own`, None: the top level, in
    program order), and the innermost region defining each value (`home`; parameters have
    none). The free-value passes of the interpreter and the reverse builder share it and
    differ only in which reads they count."""

    nest: RegionNest
    own: dict[Region | None, list[Block]]
    home: dict[Value, Region | None]

    @classmethod
    def of(cls, program: Program) -> RegionIndex:
        owners = innermost_regions(program)
        own: dict[Region | None, list[Block]] = {}
        home: dict[Value, Region | None] = {}
        for b in program.blocks:
            region = owners.get(b)
            own.setdefault(region, []).append(b)
            home.update((v, region) for v in defined_values([b]))
        return cls(RegionNest(program.regions), own, home)
