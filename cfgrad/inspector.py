"""The inspector: Programs, their adjoints and what one run did, rendered with rich.

Three views, all built from the same block panels:

* the **program view** (`render_program`, what `inspect(program)` prints): one panel
  per block in block order, nested inside one panel per region (`loop#0 while`,
  `if#0 cond`), so the region tree is visible as nesting; rows for Phis, nodes and the
  terminator, each IR node kind styled as `nodespec.NODE_KINDS` says;
* the **mirrored view** (`render_mirrored`): each forward block beside the adjoint blocks
  that mirror it, with notes where the adjoint pops a logged decision or trip count,
  routes Phi cotangents and asks the checkpoint strategy for a loop state;
* the **run view** (`record_run` + `render_run`, or a `Run` given to `rich.print`): the
  program view annotated with what one execution did (visit counts, decision counts,
  trip counts), the executed path run-length encoded, per-loop checkpoint accounting from
  the reverse pass, and value summaries; with traced strategies (`schedule=True`), each
  loop's checkpoint schedule: the strategy's events grouped into runs, per phase, a
  per-iteration count of each kind and totals set against the interpreter's counts.

`inspect()` prints a view; `view()` returns it as a rich renderable. The inspector only
reads: it runs programs through the public machinery of api.py and interpret.py, with the
interpreter's `block_hook` as its only observer.

Rendering is plain rich `Text` laid out by `_Rows` (hanging indents, a source column that
moves to its own line when the console is narrow) rather than rich tables, which are
about five times slower for the 2000-node programs the inspector must draw in well under a
second.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
from rich import box
from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from . import tree as treelib
from .api import Lowering, Pullback, lowered
from .checkpoint import (
    ADVANCE,
    FREE,
    RESTORE,
    REVERSE,
    STORE,
    TAPED,
    LoopStats,
    RunStats,
    StoreAll,
    check_strategy,
    resolve,
    traced,
)
from .convert import converted
from .errors import ArgumentTypeError, ArgumentValueError
from .interpret import Tape, execute
from .ir import (
    Block,
    Cond,
    IfRegion,
    Jmp,
    LoopRegion,
    Node,
    Piece,
    Program,
    Region,
    RegionNest,
    Value,
    back_edge_sources,
    const_literal,
    defined_values,
    is_inline_const,
    key_text,
    node_pieces,
    phi_pieces,
    region_blocks,
    term_pieces,
    type_of,
)
from .nested import call_checkpoint, sub_programs
from .nodespec import KIND_BY_NAME, PRIMITIVE
from .reverse import adjoint as adjoint_of

DEFAULT_FOLD = 40  # blocks with more rows than this show their head and tail only
#: The widths views are laid out for: narrower, a row's columns cannot fit; wider, every
#: line is padded to a width no screen shows, and the output (and its memory) grows with it.
MIN_WIDTH, MAX_WIDTH = 20, 1000

STYLE = {k.name: k.style for k in KIND_BY_NAME.values()}
TYPE_STYLE = "dim"
LOC_STYLE = "dim"
NOTE_STYLE = "italic dim"
LABEL_STYLE = "bold"
#: The style of each role of the printer's pieces (`ir.Piece`).
ROLE_STYLE = {**STYLE, PRIMITIVE.name: PRIMITIVE.style, "block": LABEL_STYLE,
              "error": "bold red"}
COUNT_STYLE = "bold yellow"
REGION_BORDER = "blue"
BLOCK_BORDER = "default"


# ---------------------------------------------------------------------------------
# Names
# ---------------------------------------------------------------------------------


@dataclass
class Naming:
    """Print names of one program: values, blocks, and (adjoints) the forward's values."""

    values: dict[Value, str]
    blocks: dict[Block, str]
    forward_values: dict[Value, str] | None = None
    forward_blocks: dict[Block, str] | None = None

    @staticmethod
    def of(program: Program) -> Naming:
        vn, bn = program.names()
        if program.forward is None:
            return Naming(vn, bn)
        fvn, fbn = program.forward.names()
        return Naming(vn, bn, fvn, fbn)


class _OuterNames(dict):
    """Names for a block shown on its own: values it defines are numbered, values from
    elsewhere are named by their hint (parameters) or `%in0`, `%in1`, …"""

    def __missing__(self, v: Value) -> str:
        name = "%" + v.hint if v.hint else f"%in{sum(k.startswith('%in') for k in self.values())}"
        self[v] = name
        return name


class _BlockRefs(dict):
    """Blocks named by their role when no program gives them labels (`loop#0 header`)."""

    def __missing__(self, b: Block) -> str:
        words = " ".join(w for w in (b.region.id if b.region else "", b.role) if w)
        return f"({words or 'block'})"


def block_naming(block: Block) -> Naming:
    """Names for `render_block`, numbered like `Program.names` but within the block."""
    vn: dict[Value, str] = _OuterNames()
    for n in block.nodes:
        if is_inline_const(n):
            vn[n.outputs[0]] = const_literal(n.params["value"])
    defined = defined_values([block])
    for k, v in enumerate(v for v in defined if v not in vn):
        vn[v] = f"%{k}"
    return Naming(vn, _BlockRefs())


# ---------------------------------------------------------------------------------
# Rows and their layout
# ---------------------------------------------------------------------------------


@dataclass
class Row:
    """One line of a block: `name  type  rhs      source` (+ an optional note below).

    Rows without a name (terminators, fold markers) start at the left edge when `flush`."""

    rhs: Text
    name: str = ""
    type: str = ""
    loc: Text | None = None
    note: Text | None = None
    flush: bool = False


class _Rows:
    """A block body laid out for the width it is given: columns for name and type, the
    operation wrapped under itself, the source column aligned where it fits and on its own
    right-aligned line where it does not, notes indented below their row."""

    def __init__(self, rows: list[Row], head_note: Text | None = None, dim: bool = False):
        self.rows = rows
        self.head_note = head_note
        self.dim = dim
        self.name_w = max((len(r.name) for r in rows), default=0)
        self.type_w = max((len(r.type) for r in rows), default=0)

    def _lhs_width(self) -> int:
        return (self.name_w + 2 if self.name_w else 0) + (self.type_w + 2 if self.type_w else 0)

    def _natural(self) -> int:
        lhs = self._lhs_width()
        widest = 0
        for r in self.rows:
            w = (0 if r.flush else lhs) + r.rhs.cell_len
            if r.loc is not None:
                w += 2 + r.loc.cell_len
            widest = max(widest, w)
        if self.head_note is not None:
            widest = max(widest, self.head_note.cell_len)
        return widest

    def __rich_measure__(self, console: Console, options: Any) -> Measurement:
        natural = self._natural()
        return Measurement(min(natural, self._lhs_width() + 16), natural)

    def __rich_console__(self, console: Console, options: Any) -> Any:
        width = max(options.max_width, 8)
        lhs_w = self._lhs_width()
        stacked = lhs_w > width // 2  # too narrow for columns: the operation goes below
        indent = 4 if stacked else lhs_w
        ends = [(0 if r.flush else lhs_w) + r.rhs.cell_len for r in self.rows if r.loc]
        loc_w = max((r.loc.cell_len for r in self.rows if r.loc), default=0)
        loc_col = min(max(ends, default=0) + 2, width - loc_w)
        out: list[Text] = []
        if self.head_note is not None:
            out += self._wrap(console, self.head_note, width, 0)
        for r in self.rows:
            start = 0 if r.flush else indent
            if stacked and not r.flush and (r.name or r.type):
                out.append(self._lhs(r))
            lines = self._wrap(console, r.rhs, width - start, start, hang=2 if r.flush else 0)
            if not stacked and not r.flush:
                lines[0] = self._lhs(r) + lines[0][start:]
            if r.loc is not None:
                last = lines[-1]
                if last.cell_len + 2 <= loc_col and loc_col + r.loc.cell_len <= width:
                    last.append(" " * (loc_col - last.cell_len))
                    last.append_text(r.loc)
                else:
                    pad = max(width - r.loc.cell_len, 0)
                    lines.append(Text(" " * pad) + r.loc)
            out += lines
            if r.note is not None:
                note = Text("↳ ", style=NOTE_STYLE) + r.note
                at = start + 2 if width - start - 2 >= 30 else 2  # narrow: use the width
                out += self._wrap(console, note, width - at, at, hang=2)
        text = Text("\n").join(out)
        text.no_wrap = True
        text.overflow = "crop"
        if self.dim:
            text = Text(text.plain, style="dim", no_wrap=True, overflow="crop")
        yield text

    def _lhs(self, r: Row) -> Text:
        t = Text()
        if self.name_w:
            t.append(f"{r.name:<{self.name_w}}  ")
        if self.type_w:
            t.append(f"{r.type:<{self.type_w}}", TYPE_STYLE)
            t.append("  ")
        return t

    @staticmethod
    def _wrap(console: Console, text: Text, width: int, indent: int,
              hang: int = 0) -> list[Text]:
        """`text` wrapped to `width` after `indent` spaces; continuation lines are indented
        `hang` more."""
        width = max(width, 4 + hang)
        if text.cell_len <= width:
            return [Text(" " * indent) + text]
        first, *rest = text.wrap(console, width, overflow="fold")
        if hang and rest:
            rest = list(Text(" ").join(rest).wrap(console, width - hang, overflow="fold"))
        lines = [Text(" " * indent) + first] + [Text(" " * (indent + hang)) + p for p in rest]
        for line in lines:
            line.rstrip()
        return lines


# ---------------------------------------------------------------------------------
# Block and region panels
# ---------------------------------------------------------------------------------


def _edge_text(label: str, keyed: bool, back: bool = False) -> Text:
    t = Text(label, style=STYLE["Proj"] if keyed else STYLE["Jmp"])
    if back:
        t.append(" ↺", style=STYLE["Jmp"])
    return t


def styled(pieces: list[Piece], taken: Callable[[Any], bool] | None = None) -> Text:
    """The printer's pieces (ir.py), styled by what each is: a node kind's keyword as its
    declaration says, block labels bold; with `taken`, the pieces of a Cond case not
    taken are dimmed."""
    t = Text()
    for p in pieces:
        style = ROLE_STYLE.get(p.role, "")
        if taken is not None and p.key is not None and not taken(p.key):
            style = "dim"
        t.append(p.text, style=style)
    return t


def _rhs(n: Node, names: Naming) -> Text:
    """`mul %1, %2 {axis=0}` with the op styled by its kind."""
    return styled(node_pieces(n, names.values, names.forward_values))


def node_row(n: Node, names: Naming, compact: bool = False) -> Row:
    return Row(rhs=_rhs(n, names),
               name=", ".join(names.values[o] for o in n.outputs),
               type="" if compact else ", ".join(str(o.type) for o in n.outputs),
               loc=None if compact or n.loc is None else Text(str(n.loc), style=LOC_STYLE))


def phi_rows(b: Block, names: Naming, compact: bool = False) -> list[Row]:
    return [Row(rhs=styled(phi_pieces(b, phi, names.values, names.blocks)),
                name=names.values[phi.out], type="" if compact else str(phi.out.type))
            for phi in b.phis]


def term_row(b: Block, names: Naming, back_edge: bool,
             counts: dict[Any, int] | None = None) -> Row:
    """`Cond %p -> Proj(T) b3 | Proj(F) b4`, `Jmp b2 ↺`, `Return %7`, as `Program.text()`
    spells them; with `counts` (a run) the untaken cases are dimmed and the decision counts
    follow."""
    t = b.term
    loc = None
    taken = None
    if counts is not None:
        taken = lambda key: counts.get(key, 0) > 0  # noqa: E731
        if isinstance(t, Jmp) and back_edge:
            loc = Text(f"×{counts.get(None, 0)}", style=COUNT_STYLE)
        elif isinstance(t, Cond):
            loc = decision_text(t, counts)
    text = styled(term_pieces(b, names.values, names.blocks, back_edge), taken)
    return Row(rhs=text, loc=loc, flush=True)


def decision_text(t: Cond, counts: dict[Any, int]) -> Text:
    """`T×31 F×2`, cases never taken dimmed."""
    out = Text()
    for i, (key, _) in enumerate(t.cases):
        c = counts.get(key, 0)
        if i:
            out.append(" ")
        out.append(f"{key_text(key)}×{c}", style=COUNT_STYLE if c else "dim")
    return out


def fold_rows(rows: list[Row], fold: int | None) -> list[Row]:
    """Keep the first and last rows of a long block, with `… 37 nodes …` between."""
    if not fold or len(rows) <= fold:
        return rows
    head = (fold + 1) // 2
    tail = fold - head
    hidden = len(rows) - head - tail
    marker = Row(rhs=Text(f"… {hidden} nodes …", style=NOTE_STYLE))
    return rows[:head] + [marker] + (rows[-tail:] if tail else [])


@dataclass
class BlockNotes:
    """Extra text for a block panel: a note above its rows, notes under some rows, a
    title suffix, and whether the block is dimmed (not run)."""

    head: Text | None = None
    rows: dict[Any, Text] = field(default_factory=dict)  # Node or "term" -> note
    title: Text | None = None
    counts: dict[Any, int] | None = None  # a run's edge counts out of this block
    dim: bool = False


def block_title(b: Block, names: Naming, latches: set[Block], path: str = "",
                notes: BlockNotes | None = None, compact: bool = False) -> Text:
    """`b1 header ← b0, b2 ↺`: the role, or the region path when given; an adjoint block
    names the block it mirrors unless `compact` (the mirrored view pairs them instead)."""
    t = Text(names.blocks[b], style=LABEL_STYLE)
    words = path or b.role
    if words:
        t.append(" " + words, style="italic")
    if b.mirrors is not None and names.forward_blocks is not None and not compact:
        t.append(" mirrors ", style="dim")
        t.append(names.forward_blocks[b.mirrors], style=LABEL_STYLE)
    if b.preds:
        t.append(" ← ", style="dim")
        for i, e in enumerate(b.preds):
            if i:
                t.append(", ")
            t.append_text(_edge_text(e.label(names.blocks), e.key is not None,
                                     back=e.src in latches))
    if notes is not None and notes.title is not None:
        t.append("  ")
        t.append_text(notes.title)
    return t


def block_panel(b: Block, names: Naming, latches: set[Block], fold: int | None,
                notes: BlockNotes | None = None, compact: bool = False,
                path: str = "") -> Panel:
    notes = notes or BlockNotes()
    rows = phi_rows(b, names, compact)
    for n in b.nodes:
        if not is_inline_const(n):
            row = node_row(n, names, compact)
            row.note = notes.rows.get(n)
            rows.append(row)
    rows = fold_rows(rows, fold)
    term = term_row(b, names, b in latches, notes.counts)
    term.note = notes.rows.get("term")
    rows.append(term)
    title = block_title(b, names, latches, path, notes, compact)
    return Panel(_Rows(rows, notes.head, dim=notes.dim), title=title, title_align="left",
                 box=box.SQUARE, padding=(0, 1),
                 border_style="dim" if notes.dim else BLOCK_BORDER)


def region_title(r: Region, names: Naming, strategy: str | None = None) -> Text:
    t = Text(r.id, style="bold blue")
    t.append(" " + getattr(r, "kind", ""), style="blue")
    if r.loc is not None:
        t.append(f" · {r.loc}", style=LOC_STYLE)
    if isinstance(r, LoopRegion):
        if r.max_iters is not None:
            t.append(f" · max_iters={r.max_iters}", style="dim")
        if strategy is not None:
            t.append(f" · {strategy}", style="dim")
        elif r.checkpoint is not None:
            t.append(f" · checkpoint={r.checkpoint!r}", style="dim")
        if r.trip_bounds is not None:
            lo, hi = r.trip_bounds
            t.append(f" · bounds {names.values[lo]}..{names.values[hi]}", style="dim")
    return t


def _chain(b: Block) -> list[Region]:
    chain: list[Region] = []
    r = b.region
    while r is not None:
        chain.append(r)
        r = r.parent
    return chain[::-1]


@dataclass
class RegionGroup:
    """A region (None: the program) and its items in block order: blocks and sub-groups."""

    region: Region | None
    items: list[Any] = field(default_factory=list)
    continued: bool = False


def region_tree(program: Program) -> RegionGroup:
    """Blocks grouped by the region tree, in block order. A region whose blocks are not
    contiguous appears once per stretch (later stretches are marked continued)."""
    root = RegionGroup(None)
    stack = [root]
    opened: set[Region] = set()
    for b in program.blocks:
        chain = _chain(b)
        depth = 0
        while depth < min(len(chain), len(stack) - 1) and stack[depth + 1].region is chain[depth]:
            depth += 1
        del stack[depth + 1:]
        for r in chain[depth:]:
            g = RegionGroup(r, continued=r in opened)
            opened.add(r)
            stack[-1].items.append(g)
            stack.append(g)
        stack[-1].items.append(b)
    return root


def _program_header(program: Program, names: Naming) -> Text:
    t = Text("program ", style="bold")
    t.append(program.name, style="bold cyan")
    t.append("(")
    for i, p in enumerate(program.params):
        if i:
            t.append(", ")
        t.append(names.values[p])
        t.append(f": {p.type}", style=TYPE_STYLE)
    outs = ", ".join(str(v.type) for v in program.outputs)
    t.append(f") -> ({outs})")
    nodes = sum(len(b.nodes) for b in program.blocks)
    counts = [(len(program.blocks), "block"), (nodes, "node"), (len(program.regions), "region")]
    t.append("   " + " · ".join(f"{n} {what}{'' if n == 1 else 's'}" for n, what in counts),
             style="dim")
    return t


def render_program(program: Program, fold: int | None = DEFAULT_FOLD,
                   annotate: Callable[[Block], BlockNotes] | None = None,
                   strategies: dict[Region, str] | None = None) -> RenderableType:
    """The program view: the header, then block panels nested in region panels."""
    names = Naming.of(program)
    latches = back_edge_sources(program)

    def render(g: RegionGroup) -> list[RenderableType]:
        out: list[RenderableType] = []
        for item in g.items:
            if isinstance(item, Block):
                notes = annotate(item) if annotate else None
                out.append(block_panel(item, names, latches, fold, notes))
            else:
                title = region_title(item.region, names, (strategies or {}).get(item.region))
                if item.continued:
                    title.append(" (continued)", style="dim")
                out.append(Panel(Group(*render(item)), title=title, title_align="left",
                                 box=box.ROUNDED, padding=(0, 0), border_style=REGION_BORDER))
        return out

    return Group(_program_header(program, names), *render(region_tree(program)))


def render_block(block: Block, fold: int | None = DEFAULT_FOLD) -> RenderableType:
    """One block on its own (no program to name things): its values numbered locally,
    other blocks named by their role."""
    latches = {block} if isinstance(block.region, LoopRegion) and block.region.latch is block \
        else set()
    names = block_naming(block)
    names.blocks[block] = "block"
    return block_panel(block, names, latches, fold, path=_region_path(block) or "")


# ---------------------------------------------------------------------------------
# Mirrored view
# ---------------------------------------------------------------------------------


def _strategy_text(r: LoopRegion) -> str:
    return repr(resolve(r.checkpoint, None)) + ("" if r.checkpoint is not None
                                                 else " (default)")


def _region_path(b: Block) -> str:
    """`loop#0 › if#0 case T`: where a block sits in the region tree, and its role."""
    return " ".join(w for w in (" › ".join(r.id for r in _chain(b)), b.role) if w)


def mirrored_notes(adjoint: Program, names: Naming,
                   fnames: Naming) -> tuple[dict[Block, BlockNotes], dict[Block, BlockNotes]]:
    """Notes for both columns: where the adjoint pops what the forward run logged, how
    Phi cotangents are routed, and where a loop state is restored."""
    forward = adjoint.forward
    assert forward is not None
    fnotes: dict[Block, BlockNotes] = {b: BlockNotes() for b in forward.blocks}
    anotes: dict[Block, BlockNotes] = {b: BlockNotes() for b in adjoint.blocks}
    pops: dict[Region, Block] = {}
    for b in adjoint.blocks:
        sel_pop: dict[Value, Node] = {}
        for n in b.nodes:
            if n.op == "LogPop":
                r = n.params["region"]
                pops[r] = b
                sel_pop[n.outputs[0]] = n
                anotes[b].rows[n] = Text(f"pops the decision of {fnames.blocks[r.branch]}'s "
                                         f"Cond ({r.id})")
            elif n.op == "TripPop":
                r = n.params["loop"]
                pops[r] = b
                anotes[b].rows[n] = Text(f"pops {r.id}'s trip count, logged on exit to "
                                         f"{fnames.blocks[r.exit]}")
            elif n.op == "LoopState":
                r = n.params["loop"]
                anotes[b].rows[n] = Text(
                    f"{_strategy_text(r)} restores iteration "
                    f"{names.values[n.inputs[0]]}'s forward values of {r.id}")
        t = b.term
        if isinstance(t, Cond) and t.selector in sel_pop:
            routes = ", ".join(f"{key_text(k)} → {names.blocks[tb]}"
                               + (f" ({fnames.blocks[tb.mirrors]})" if tb.mirrors else "")
                               for k, tb in t.cases)
            anotes[b].rows["term"] = Text(f"routes the cotangents to the case that ran: {routes}")
    for r in adjoint.regions:
        if isinstance(r, IfRegion) and r.merge is not None and r.merge.phis:
            srcs = ", ".join(names.blocks[e.src] for e in r.merge.preds)
            anotes[r.merge].head = Text(f"gradient merge: each Phi takes the cotangent sent "
                                        f"back by the case that ran ({srcs})", style=NOTE_STYLE)
        elif isinstance(r, LoopRegion) and r.header is not None:
            anotes[r.header].head = Text("reverse loop: counts the logged trip count down; "
                                         "its Phis carry the carry's cotangents",
                                         style=NOTE_STYLE)
    for r in forward.regions:
        where = pops.get(r)
        if isinstance(r, IfRegion) and r.branch is not None:
            fnotes[r.branch].rows["term"] = Text(
                f"logs its decision; popped in {names.blocks[where]}" if where else
                "logs its decision (the adjoint never needs it)")
            if r.merge is not None and r.merge.phis:
                fnotes[r.merge].head = Text("Phis: their cotangents are routed back to the "
                                            "case that ran", style=NOTE_STYLE)
        elif isinstance(r, LoopRegion) and r.header is not None:
            fnotes[r.header].rows["term"] = Text(
                f"logs the trip count on exit; popped in {names.blocks[where]}" if where else
                "logs the trip count on exit")
            if r.latch is not None:
                fnotes[r.latch].rows["term"] = Text(
                    f"back edge: {_strategy_text(r)} keeps what the reverse needs")
    return fnotes, anotes


def render_mirrored(program: Program, fold: int | None = DEFAULT_FOLD) -> RenderableType:
    """Forward blocks (top-down) beside the adjoint blocks that mirror them; the adjoint
    runs from the bottom row up."""
    if program.forward is not None:
        program = program.forward
    adjoint = adjoint_of(program)
    fnames, anames = Naming.of(program), Naming.of(adjoint)
    flatches, alatches = back_edge_sources(program), back_edge_sources(adjoint)
    fnotes, anotes = mirrored_notes(adjoint, anames, fnames)
    mirrors: dict[Block, list[Block]] = {b: [] for b in program.blocks}
    strays: dict[Block, list[Block]] = {}
    last: Block | None = None
    for b in adjoint.blocks:  # blocks mirroring nothing sit with the previous mirror
        if b.mirrors is not None and b.mirrors in mirrors:
            mirrors[b.mirrors].append(b)
            last = b.mirrors
        else:
            strays.setdefault(last or program.blocks[-1], []).append(b)
    table = Table(box=box.SIMPLE_HEAD, expand=True, show_edge=False, pad_edge=False,
                  padding=(0, 1))
    table.add_column(Text.assemble(("forward ", "bold"), (program.name, "bold cyan"),
                                   (" ↓ runs top-down", "dim")), ratio=1)
    table.add_column(Text.assemble(("adjoint ", "bold"), (adjoint.name, "bold cyan"),
                                   (" ↑ runs bottom-up", "dim")), ratio=1)
    for b in program.blocks:
        left = block_panel(b, fnames, flatches, fold, fnotes[b], compact=True,
                           path=_region_path(b))
        right = [block_panel(a, anames, alatches, fold, anotes[a], compact=True,
                             path=_region_path(a)) for a in mirrors[b] + strays.get(b, [])]
        table.add_row(left, Group(*right) if right else Text("(nothing to reverse)",
                                                             style=NOTE_STYLE))
    header = Text.assemble(("mirrored ", "bold"), (program.name, "bold cyan"), " ↔ ",
                           (adjoint.name, "bold cyan"),
                           ("   Primal ^%v reads forward value %v", "dim"))
    return Group(header, table)


# ---------------------------------------------------------------------------------
# Runs
# ---------------------------------------------------------------------------------


@dataclass
class ValueSummary:
    """What a value held at the end of the forward run (its last iteration, in a loop)."""

    label: str
    type: str
    computed: bool = True
    min: float | None = None
    max: float | None = None
    mean: float | None = None
    nan: int = 0
    inf: int = 0
    note: str = ""

    @staticmethod
    def of(label: str, x: Any, note: str = "") -> ValueSummary:
        a = np.asarray(x)
        kind = a.dtype.kind
        s = ValueSummary(label, str(type_of(a)), note=note)
        vals = a.ravel()
        if kind in "fc":
            s.nan = int(np.isnan(vals).sum())
            s.inf = int(np.isinf(vals).sum())
            vals = vals[np.isfinite(vals)]
            if kind == "c":
                vals = np.abs(vals)
        elif kind == "b":
            vals = vals.astype(np.int64)
        elif kind not in "iu":
            return s
        if vals.size:
            s.min, s.max, s.mean = float(vals.min()), float(vals.max()), float(vals.mean())
        return s


@dataclass
class Run:
    """What one execution of a forward Program did, recorded by the interpreter's block
    hook: `rich.print(run)` shows the run view."""

    program: Program
    path: list[int]  # block indices in the order the forward run entered them
    visits: list[int]
    recomputed: list[int]  # block entries while the reverse pass recomputed iterations
    edges: dict[tuple[int, Any], int]  # (block index, Proj key or None) -> times taken
    stats: RunStats  # per loop: trip counts, strategy, recomputation, snapshots, bytes
    values: list[ValueSummary]
    reversed: bool  # whether the reverse pass ran (checkpoint accounting is complete)
    # per loop, how many of its schedule events the forward run emitted (the rest came
    # from the reverse pass): the events themselves do not say which phase they are of
    forward_events: list[int]
    reverse_error: str = ""
    traced: bool = False  # every loop's strategy was traced (record_run(schedule=True))

    def __rich_console__(self, console: Console, options: Any) -> Any:
        yield render_run(self)


def _hook_recorder() -> tuple[list[int], Callable[[int], None]]:
    path: list[int] = []
    return path, path.append


def _count_edges(program: Program, path: list[int]) -> dict[tuple[int, Any], int]:
    """Edge counts from consecutive block pairs: the key is the Proj of the Cond case whose
    target the next block is (None for a Jmp)."""
    if len(path) < 2:
        return {}
    n = len(program.blocks)
    p = np.asarray(path, dtype=np.int64)
    pairs, counts = np.unique(p[:-1] * n + p[1:], return_counts=True)
    out: dict[tuple[int, Any], int] = {}
    index = {b: i for i, b in enumerate(program.blocks)}
    for pair, c in zip(pairs.tolist(), counts.tolist()):
        src, dst = divmod(pair, n)
        for key, target in program.blocks[src].term.successors():
            if index[target] == dst:
                out[(src, key)] = out.get((src, key), 0) + c
                break
    return out


def find_values(program: Program, chosen: Sequence[str]) -> list[Value]:
    """The values of `program` printed as the names in `chosen` (`"%3"`, `"x"` for `%x`);
    ArgumentValueError for a name the program does not print."""
    names = Naming.of(program)
    by_name = {name: v for v, name in names.values.items() if name.startswith("%")}
    out = []
    for name in chosen:
        key = name if name.startswith("%") else "%" + name
        if key not in by_name:
            known = ", ".join(sorted(by_name, key=_name_order)[:12])
            raise ArgumentValueError(f"inspect: {program.name} has no value named {name!r}; "
                                     f"names look like {known}, …")
        out.append(by_name[key])
    return out


def _name_order(name: str) -> tuple[int, Any]:
    rest = name[1:]
    return (1, int(rest)) if rest.isdigit() else (0, rest)


def record_run(target: Any, *args: Any, checkpoint: Any = None, values: Sequence[str] = (),
               reverse: bool = True, schedule: bool = False) -> Run:
    """Run `target` (a function, a forward Program, or a Pullback, which is re-run on its
    inputs) forward with the path recorded, then (with `reverse`) its adjoint with unit
    cotangents for float outputs, so the checkpoint accounting is complete.

    `values` names more values to summarize (`"%3"`); parameters, outputs and the
    gradients are always summarized. With `schedule`, every loop's strategy runs traced
    (`checkpoint.traced`: the same decisions, with their events recorded), so the run view
    shows each loop's schedule; a strategy made with `trace=True` is traced anyway."""
    check_strategy(checkpoint, "cfgrad.inspect")
    pb = _pullback_of(target)
    if pb is not None:
        # A pullback keeps its lowering and argument leaves: re-run those.
        entry, leaves, checkpoint = pb.lowering, pb.primals, pb.checkpoint
    elif isinstance(target, Program):
        if target.forward is not None:
            raise ArgumentTypeError("inspect: an adjoint program runs only as part of its "
                                    "forward program's run; inspect the forward program")
        entry = Lowering(target)
        leaves = treelib.flatten(args)[0]
        if len(leaves) != len(target.params):
            raise ArgumentTypeError(f"inspect: {target.name} takes {len(target.params)} "
                                    f"argument leaves, got {len(leaves)}")
    elif callable(target):
        entry, leaves = lowered(converted(target), args)
    else:
        raise ArgumentTypeError(f"inspect: cannot run a {type(target).__name__}")
    program = entry.program
    names = Naming.of(program)
    chosen = find_values(program, values)
    path, hook = _hook_recorder()
    strategies = entry.strategies(checkpoint)
    if schedule:
        strategies = [traced(s) for s in strategies]
    with np.errstate(all="ignore"), call_checkpoint(checkpoint):
        tape = execute(entry.grad_plan(None), entry.arguments(leaves), strategies,
                       block_hook=hook)
    forward_events = [len(s.schedule or ()) for s in tape.stats.loops]
    visits = np.bincount(np.asarray(path, dtype=np.int64),
                         minlength=len(program.blocks)).tolist()
    summaries = _summaries(program, names, tape, chosen, visits)
    recomputed_path, recompute_hook = _hook_recorder()
    error = ""
    did_reverse = False
    if reverse:
        cts = [np.ones(v.type.shape, v.type.dtype) if v.type.is_float
               else np.zeros(v.type.shape, v.type.dtype) for v in program.outputs]
        try:
            with np.errstate(all="ignore"), call_checkpoint(checkpoint):
                grads = tape.pullback(cts, block_hook=recompute_hook)
        except Exception as exc:  # noqa: BLE001 - shown in the run view, not raised
            error = f"{type(exc).__name__}: {exc}"
        else:
            did_reverse = True
            summaries += [ValueSummary.of("∂" + names.values[p], g, "gradient")
                          for p, g in zip(program.params, grads) if p.type.is_float]
    recomputed = np.bincount(np.asarray(recomputed_path, dtype=np.int64),
                             minlength=len(program.blocks)).tolist()
    return Run(program, path, visits, recomputed, _count_edges(program, path), tape.stats,
               summaries, did_reverse, forward_events, error, schedule)


def _pullback_of(target: Any) -> Pullback | None:
    """The Pullback behind `target` (`cg.vjp`'s, or the one inside a has_aux pullback)."""
    if isinstance(target, Pullback):
        return target
    inner = getattr(target, "pullback", None)
    return inner if isinstance(inner, Pullback) else None


def _summaries(program: Program, names: Naming, tape: Tape, chosen: list[Value],
               visits: list[int]) -> list[ValueSummary]:
    defined_in: dict[Value, int] = {}
    for i, b in enumerate(program.blocks):
        for v in defined_values([b]):
            defined_in[v] = i
    out = [ValueSummary.of(names.values[p], tape.value(p), "parameter")
           for p in program.params]
    out += [ValueSummary.of(names.values[v], x, f"output {i}")
            for i, (v, x) in enumerate(zip(program.outputs, tape.outputs))]
    for v in chosen:
        label = names.values[v]
        i = defined_in.get(v)
        x = tape.value(v)
        if i is None:  # a parameter
            out.append(ValueSummary.of(label, x, "parameter"))
            continue
        where = names.blocks[program.blocks[i]]
        if x is None or visits[i] == 0:
            out.append(ValueSummary(label, str(v.type), computed=False,
                                    note=f"not computed ({where} did not run)"))
            continue
        note = f"in {where}" + (f", last of {visits[i]} visits" if visits[i] > 1 else "")
        out.append(ValueSummary.of(label, x, note))
    return out


# -- the executed path, run-length encoded ------------------------------------------

MAX_PERIOD = 12  # longest repeated unit looked for in one pass (passes nest)
MAX_PATH_TOKENS = 40  # top-level tokens shown before the middle is elided


def compress_path(seq: Sequence[Any],
                  loops: dict[Any, frozenset[Any]] | None = None) -> list[Any]:
    """Run-length encode a sequence hierarchically: `[0, 1, 2, 1, 2, 1, 3]` becomes
    `[0, Repeat((1, 2), 2), 1, 3]`. Shorter periods are folded first, so an inner loop's
    repeats become single tokens before an outer loop's iterations are compared.

    With `loops` (loop header -> the blocks of its loop), a repeated unit must be whole
    iterations: it starts at a header and stays inside that header's loop, so a repeat
    never straddles the exit of a loop."""
    tokens: list[Any] = list(seq)
    p = 1
    while p <= MAX_PERIOD:
        folded = _fold_period(tokens, p, loops)
        if len(folded) < len(tokens):
            tokens, p = folded, 1  # new tokens may repeat with a short period again
        else:
            p += 1
    return tokens


def _fold_period(tokens: list[Any], p: int, loops: dict[Any, frozenset[Any]] | None) -> list[Any]:
    out: list[Any] = []
    n = len(tokens)
    i = 0
    while i < n:
        run = 0  # how far tokens[j] == tokens[j + p] holds from i
        while i + run + p < n and tokens[i + run] == tokens[i + run + p]:
            run += 1
        k = 1 + run // p
        if k >= 2 and (loops is None or _whole_iterations(tokens[i:i + p], loops)):
            out.append(Repeat(tuple(tokens[i:i + p]), k))
            i += k * p
        else:
            out.append(tokens[i])
            i += 1
    return out


def _whole_iterations(unit: list[Any], loops: dict[Any, frozenset[Any]]) -> bool:
    inside = loops.get(unit[0])
    return inside is not None and all(_blocks_of(t) <= inside for t in unit)


def _blocks_of(token: Any) -> frozenset[Any]:
    if isinstance(token, Repeat):
        return token.blocks
    return frozenset((token,))


def loop_blocks(program: Program) -> dict[int, frozenset[int]]:
    """Loop header index -> indices of the blocks one iteration can visit."""
    index = {b: i for i, b in enumerate(program.blocks)}
    return {index[r.header]: frozenset(index[b] for b in region_blocks(r))
            for r in program.loops()}


@dataclass(frozen=True)
class Repeat:
    """`unit` taken `count` times in a row (a token of a compressed path)."""

    unit: tuple[Any, ...]
    count: int

    @property
    def blocks(self) -> frozenset[Any]:
        return frozenset().union(*map(_blocks_of, self.unit))


def path_text(tokens: Sequence[Any], labels: Sequence[str],
              limit: int = MAX_PATH_TOKENS) -> Text:
    """`b0 → (b1 → b2)×33 → b3`, eliding the middle of very long paths."""
    out = Text()
    for i, item in enumerate(token_items(
            tokens, lambda b: Text.assemble((labels[b], LABEL_STYLE)), limit)):
        if i:
            out.append(" → ", style="dim")
        out.append_text(item)
    return out


def token_items(tokens: Sequence[Any], atom: Callable[[Any], Text], limit: int) -> list[Text]:
    """A compressed sequence (`compress_path`) as the items a line shows between its
    separators: `atom` of each plain token (styled by a span, not as its base style, so
    that the parentheses and `×n` a repeat attaches to its first and last item keep
    their own), and the middle of a sequence longer than `limit` tokens replaced by
    `… 26 more …` when that saves a good part of it."""
    shown: list[Any] = list(tokens)
    hidden = 0
    if len(shown) > limit + limit // 4:
        hidden = len(shown) - limit
        shown = shown[: limit // 2] + [None] + shown[len(shown) - (limit - limit // 2):]
    out: list[Text] = []
    for tok in shown:
        out += [Text(f"… {hidden} more …", style=NOTE_STYLE)] if tok is None else \
            _items(tok, atom)
    return out


def _items(tok: Any, atom: Callable[[Any], Text]) -> list[Text]:
    if not isinstance(tok, Repeat):
        return [atom(tok)]
    items = [item for unit in tok.unit for item in _items(unit, atom)]
    if len(tok.unit) > 1 or isinstance(tok.unit[0], Repeat):
        items[0] = Text("(") + items[0]
        items[-1] = items[-1] + Text(")")
    items[-1] = items[-1] + Text(f"×{tok.count}", style=COUNT_STYLE)
    return items


def counts_text(counts: Sequence[int]) -> str:
    """Trip counts per execution, repeats folded: `4×3, 2` for [4, 4, 4, 2]."""
    if not counts:
        return "never ran"
    parts = []
    for tok in compress_path(counts):
        if isinstance(tok, Repeat):
            unit = ", ".join(map(str, tok.unit))
            parts.append(f"{unit}×{tok.count}" if len(tok.unit) == 1 else
                         f"({unit})×{tok.count}")
        else:
            parts.append(str(tok))
    text = ", ".join(parts)
    return text if len(text) <= 60 else text[:57] + "…"


def _bytes_text(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    for unit in ("KiB", "MiB", "GiB"):
        n /= 1024
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}"
    return ""  # unreachable: the loop returns at GiB


def _num(x: float | None) -> str:
    if x is None:
        return "—"
    if math.isfinite(x) and x == int(x) and abs(x) < 1e15:
        return str(int(x))
    return f"{x:.6g}"


def render_run(run: Run, fold: int | None = DEFAULT_FOLD,
               schedule: bool = False) -> RenderableType:
    """The run view: path, annotated program, loops, schedules and values. The schedules
    are shown when a loop's strategy was traced, or, with `schedule`, in any case (a loop
    not traced says how to trace it)."""
    program = run.program
    names = Naming.of(program)
    labels = [names.blocks[b] for b in program.blocks]
    index = {b: i for i, b in enumerate(program.blocks)}
    total = len(run.path)
    header = Text("run of ", style="bold")
    header.append(program.name, style="bold cyan")
    header.append(f"   {total} block entries", style="dim")
    if run.reversed:
        header.append(" · reverse pass ran", style="dim")
    elif run.reverse_error:
        header.append(" · reverse pass failed: " + run.reverse_error, style="bold red")
    else:
        header.append(" · forward only", style="dim")
    counts: list[dict[Any, int]] = [{} for _ in program.blocks]  # per block: key -> taken
    for (i, key), c in run.edges.items():
        counts[i][key] = c
    path = Text("path  ", style="bold")
    path.append_text(path_text(compress_path(run.path, loop_blocks(program)), labels))

    def annotate(b: Block) -> BlockNotes:
        i = index[b]
        title = Text(f"×{run.visits[i]}", style=COUNT_STYLE if run.visits[i] else "dim")
        if run.recomputed[i]:
            title.append(f" +{run.recomputed[i]} recomputed", style="yellow")
        if not run.visits[i]:
            title = Text("not run", style="dim")
        return BlockNotes(title=title, counts=counts[i], dim=not run.visits[i])

    strategies = {program.loops()[i]: s.strategy for i, s in enumerate(run.stats.loops)}
    parts: list[RenderableType] = [header, path,
                                   render_program(program, fold, annotate, strategies)]
    if run.stats.loops:
        parts.append(loops_table(program, run))
        if schedule or run.traced or any(s.schedule is not None for s in run.stats.loops):
            parts.append(render_schedules(run))
    parts.append(values_table(run.values))
    return Group(*parts)


def loops_table(program: Program, run: Run) -> Table:
    t = Table(title="loops", title_justify="left", title_style="bold", box=box.SIMPLE_HEAD,
              show_edge=False, pad_edge=False)
    t.add_column("loop")
    t.add_column("trips per execution")
    t.add_column("strategy")
    for col in ("recomputed", "peak snapshots", "peak bytes"):
        t.add_column(col, justify="right")
    for r, s in zip(program.loops(), run.stats.loops):
        t.add_row(f"{r.id} {r.kind}", counts_text(s.trip_counts), s.strategy,
                  str(s.recompute_steps) if run.reversed else "—",
                  str(s.peak_snapshots), _bytes_text(s.peak_bytes))
    return t


def values_table(values: Iterable[ValueSummary]) -> Table:
    t = Table(title="values", title_justify="left", title_style="bold", box=box.SIMPLE_HEAD,
              show_edge=False, pad_edge=False)
    t.add_column("value")
    t.add_column("type", style=TYPE_STYLE)
    for col in ("min", "max", "mean", "NaN", "Inf"):
        t.add_column(col, justify="right")
    t.add_column("", style=NOTE_STYLE)
    for s in values:
        if not s.computed:
            t.add_row(s.label, s.type, "", "", "", "", "", s.note, style="dim")
            continue
        t.add_row(s.label, s.type, _num(s.min), _num(s.max), _num(s.mean),
                  Text(str(s.nan), style="bold red" if s.nan else ""),
                  Text(str(s.inf), style="bold red" if s.inf else ""), s.note)
    return t


# -- checkpoint schedules -------------------------------------------------------------

#: The timeline's rows, in this order: memory (snapshots), then body evaluations.
EVENTS = (STORE, FREE, RESTORE, ADVANCE, TAPED, REVERSE)
EVENT_STYLE = {STORE: "green", FREE: "red", RESTORE: "cyan", ADVANCE: "yellow",
               TAPED: "magenta", REVERSE: "bold"}
MAX_SCHEDULE_TOKENS = 40  # grouped events shown per phase before the middle is elided


class EventRun(NamedTuple):
    """Events of one kind on consecutive iterations, one right after the other: iterations
    `first` to `last` inclusive, in the order they happened (`last < first` when they went
    down, as the reverse does). A token of a compressed schedule (a tuple, so the long
    schedules of long loops compare and hash quickly)."""

    what: str
    first: int
    last: int

    def __str__(self) -> str:
        span = str(self.first) if self.last == self.first else f"{self.first}→{self.last}"
        return f"{self.what} {span}"


def group_events(events: Iterable[tuple[str, int]]) -> list[EventRun]:
    """`advance 3, advance 4, advance 5` becomes `advance 3→5`: a run grows while the kind
    stays the same and each iteration is one more (or, going down, one less) than the
    one before."""
    out: list[EventRun] = []
    what, first, last = "", 0, 0
    for w, t in events:
        step = t - last
        if w == what and abs(step) == 1 and (last - first) * step >= 0:
            last = t  # (last - first) is 0 while the run has one event: either way fits
            continue
        if what:
            out.append(EventRun(what, first, last))
        what, first, last = w, t, t
    if what:
        out.append(EventRun(what, first, last))
    return out


def schedule_items(events: Sequence[tuple[str, int]],
                   limit: int = MAX_SCHEDULE_TOKENS) -> list[Text]:
    """`store 0`, `advance 0→4`, `taped 5`, `(restore 0`, `taped 0)×2`: the events grouped
    into runs, repeated stretches folded (as in the path), the middle of a long list
    elided; the items of a line that wraps only between them (`FlowRows`)."""
    return token_items(compress_path(group_events(events)),
                       lambda run: Text.assemble((str(run), EVENT_STYLE.get(run.what, ""))),
                       limit)


class FlowRows:
    """Rows of a label and items (`advance 0→4`, …) joined by ` · `, wrapped only between
    items, so an event never splits from its iteration; continuation lines start under the
    first item (under the label, indented, when the label takes more than half the width).
    Everything is `indent` columns in; an item wider than the whole width is cropped."""

    SEP = " · "

    def __init__(self, rows: list[tuple[str, list[Text]]], indent: int = 0):
        self.rows = rows
        self.indent = indent
        self.label_w = max(len(label) for label, _ in rows)

    def __rich_measure__(self, console: Console, options: Any) -> Measurement:
        widest = max(item.cell_len for _, items in self.rows for item in items)
        longest = max(sum(i.cell_len for i in items) + len(self.SEP) * (len(items) - 1)
                      for _, items in self.rows)
        lhs = self.indent + self.label_w + 2
        return Measurement(lhs + widest, lhs + longest)

    def __rich_console__(self, console: Console, options: Any) -> Any:
        width = max(options.max_width, 8)
        stacked = self.indent + self.label_w + 2 > width // 2
        indent = self.indent + (4 if stacked else self.label_w + 2)
        lines: list[Text] = []
        for label, items in self.rows:
            if stacked:
                lines.append(Text(" " * self.indent + label))
                line = Text(" " * indent)
            else:
                line = Text(" " * self.indent + f"{label:<{self.label_w}}  ")
            col = indent
            for i, item in enumerate(items):
                # an item that is not the last keeps room for the " ·" a break leaves
                need = item.cell_len + (len(self.SEP.rstrip()) if i + 1 < len(items) else 0)
                if i and col + len(self.SEP) + need > width:
                    line.append(self.SEP.rstrip(), style="dim")
                    lines.append(line)
                    line, col = Text(" " * indent), indent
                elif i:
                    line.append(self.SEP, style="dim")
                    col += len(self.SEP)
                line.append_text(item)
                col += item.cell_len
            lines.append(line)
        text = Text("\n").join(lines)
        text.no_wrap = True
        text.overflow = "crop"
        yield text


@dataclass
class ScheduleTotals:
    """What one loop's schedule events add up to: the events of each phase by kind, and
    the most snapshots held at once (stores not yet freed). The view sets these against
    the interpreter's own counts (`LoopStats`), so a strategy whose events disagree with
    what it ran shows."""

    forward: Counter[str]
    reverse: Counter[str]
    peak_snapshots: int

    @staticmethod
    def of(schedule: Sequence[tuple[str, int]], forward_events: int) -> ScheduleTotals:
        held = peak = 0
        for what, _ in schedule:
            if what == STORE:
                held += 1
                peak = max(peak, held)
            elif what == FREE:
                held -= 1
        return ScheduleTotals(Counter(what for what, _ in schedule[:forward_events]),
                              Counter(what for what, _ in schedule[forward_events:]), peak)

    @property
    def forward_steps(self) -> int:
        """Body evaluations of the forward run: the sweep's `advance`s and its `taped`."""
        return self.forward[ADVANCE] + self.forward[TAPED]

    @property
    def recompute_steps(self) -> int:
        """Body evaluations of the reverse pass that the schedule shows. A loop nested in
        another also runs inside its enclosing loops' untaped re-runs, where its strategy
        is not involved: those the interpreter counts but no event shows."""
        return self.reverse[ADVANCE] + self.reverse[TAPED]


def render_schedules(run: Run) -> RenderableType:
    """Per loop, its checkpoint strategy's schedule in this run: the events of the forward
    run and of the reverse pass grouped into runs, how many events of each kind touched
    each iteration, and the totals against `LoopStats` (forward steps, recomputed steps,
    peak snapshots)."""
    nest = RegionNest(run.program.regions)
    parts: list[RenderableType] = [Text("schedules", style="bold")]
    for r, stats, forward_events in zip(run.program.loops(), run.stats.loops,
                                        run.forward_events):
        nested = nest.loop_of[r.parent] is not None
        parts.append(_loop_schedule(r, stats, forward_events, nested, run))
    return Group(*parts)


def _loop_schedule(r: LoopRegion, stats: LoopStats, forward_events: int, nested: bool,
                   run: Run) -> RenderableType:
    head = Text(f"{r.id} {r.kind}", style="bold blue")
    trips = f"trips {counts_text(stats.trip_counts)}" if stats.trip_counts else "never ran"
    head.append(f" · {stats.strategy} · {trips}", style="dim")
    schedule = stats.schedule
    if schedule is None:
        if stats.strategy == repr(StoreAll()):
            note = "no schedule: StoreAll() keeps every iteration's tape and recomputes nothing"
        elif run.traced:
            note = f"no schedule: {stats.strategy} does not trace its events"
        else:
            note = "not traced: record the run with schedule=True (cfgrad inspect --schedule)"
        return Group(head, Padding(Text(note, style=NOTE_STYLE), (0, 0, 0, 2), expand=False))
    totals = ScheduleTotals.of(schedule, forward_events)
    forward, reverse = schedule[:forward_events], schedule[forward_events:]
    rows = [("forward run", schedule_items(forward) if forward else
             [Text("no events", style=NOTE_STYLE)]),
            ("reverse pass", schedule_items(reverse) if reverse else
             [Text("no events" if run.reversed else "not run", style=NOTE_STYLE)]),
            ("totals", totals_items(stats, totals, nested))]
    body: list[RenderableType] = [head, FlowRows(rows, indent=2)]
    if schedule:
        body.append(EventTimeline(schedule, indent=2))
    return Group(*body)


def totals_items(stats: LoopStats, totals: ScheduleTotals, nested: bool) -> list[Text]:
    """`forward 6 = 5 advance + 1 taped`, `recomputed 7 = 2 advance + 5 taped`, `peak
    snapshots 3`, from the events; a number the interpreter counted differently follows
    in red. The body evaluations a nested loop ran inside its enclosing loops' untaped
    re-runs have no events: they are the difference, named as such."""

    def total(label: str, events: Counter[str], counted: int, untaped: int = 0) -> Text:
        shown = events[ADVANCE] + events[TAPED] + untaped
        out = Text(f"{label} {shown}")
        parts = [f"{events[k]} {k}" for k in (ADVANCE, TAPED) if events[k]]
        if untaped:
            parts.append(f"{untaped} untaped inside enclosing loops' re-runs")
        if parts:
            out.append(" = " + " + ".join(parts), style="dim")
        if shown != counted:
            out.append(f" (the interpreter counted {counted})", style="bold red")
        return out

    untaped = stats.recompute_steps - totals.recompute_steps
    peak = Text(f"peak snapshots {totals.peak_snapshots}")
    if totals.peak_snapshots != stats.peak_snapshots:
        peak.append(f" (the interpreter counted {stats.peak_snapshots})", style="bold red")
    return [total("forward", totals.forward, stats.forward_steps),
            total("recomputed", totals.reverse, stats.recompute_steps,
                  untaped if nested and untaped > 0 else 0),
            peak]


class EventTimeline:
    """How many events of each kind touched each iteration t of a loop (over all its
    executions and both phases): one row per kind, a column per iteration and a total
    column. It shows where the snapshots were and which iterations were re-run how often,
    which the event list, in time order, does not show at a glance. When the iterations do
    not fit the width, each column counts a bucket of them (2, 5, 10, 20, 50, …
    iterations), labelled by its first."""

    GAP = 1  # spaces between columns

    def __init__(self, schedule: Sequence[tuple[str, int]], indent: int = 0):
        self.indent = indent
        self.n = max(t for _, t in schedule) + 1
        seen = {what for what, _ in schedule}
        kinds = [k for k in EVENTS if k in seen] + sorted(seen - set(EVENTS))  # and others
        self.counts = {k: [0] * self.n for k in kinds}
        for what, t in schedule:
            self.counts[what][t] += 1
        self.label_w = max(len("t"), *map(len, kinds))
        self.total_w = max(len("total"), *(len(str(sum(c))) for c in self.counts.values()))

    def _sizes(self) -> Iterable[int]:
        """Bucket sizes to try, smallest first: 1, 2, 5, 10, 20, 50, … up to one column."""
        size = 1
        while True:
            for step in (1, 2, 5):
                if step * size >= self.n:
                    yield step * size
                    return
                yield step * size
            size *= 10

    def _columns(self, size: int) -> tuple[list[str], dict[str, list[int]], int]:
        """Column labels, each kind's bucketed counts and the common column width."""
        starts = range(0, self.n, size)
        cells = {k: [sum(c[a:a + size]) for a in starts] for k, c in self.counts.items()}
        width = max(max(len(str(a)) for a in starts),
                    *(len(str(v)) for row in cells.values() for v in row))
        return [str(a) for a in starts], cells, width

    def _width(self, size: int) -> int:
        labels, _, w = self._columns(size)
        return self.indent + self.label_w + 2 + len(labels) * (w + self.GAP) + 2 + self.total_w

    def __rich_measure__(self, console: Console, options: Any) -> Measurement:
        *_, one_column = self._sizes()
        return Measurement(self._width(one_column), self._width(1))

    def __rich_console__(self, console: Console, options: Any) -> Any:
        size = next((z for z in self._sizes() if self._width(z) <= options.max_width),
                    max(self._sizes()))
        labels, cells, w = self._columns(size)
        pad = " " * self.indent
        lines = [Text(f"{pad}{'t':<{self.label_w}}  ", style="dim")]
        for label in labels:
            lines[0].append(f"{label:>{w + self.GAP}}", style="dim")
        lines[0].append(f"  {'total':>{self.total_w}}", style="dim")
        for kind, row in cells.items():
            line = Text(pad)
            line.append(f"{kind:<{self.label_w}}  ", style=EVENT_STYLE.get(kind, ""))
            for v in row:
                line.append(f"{v if v else '·':>{w + self.GAP}}", style="" if v else "dim")
            line.append(f"  {sum(row):>{self.total_w}}")
            lines.append(line)
        text = Text("\n").join(lines)
        text.no_wrap = True
        text.overflow = "crop"
        yield text
        if size > 1:
            yield Padding(Text(f"each column counts {size} iterations, from the t above it",
                               style=NOTE_STYLE), (0, 0, 0, self.indent), expand=False)


# ---------------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------------


def view(target: Any, *args: Any, adjoint: bool = False, run: bool = False,
         fold: int | None = DEFAULT_FOLD, values: Sequence[str] = (),
         checkpoint: Any = None, schedule: bool = False,
         expand: bool = False) -> RenderableType:
    """The renderable `inspect` prints (see `inspect` for the arguments)."""
    if fold is not None and (isinstance(fold, bool) or not isinstance(fold, int | np.integer)):
        raise ArgumentTypeError(f"inspect: fold must be a number of rows or None, got {fold!r}")
    if fold is not None and fold < 0:
        raise ArgumentValueError(f"inspect: fold must be 0 or more rows (None or 0: never "
                                 f"fold), got {fold}")
    if isinstance(target, Block):
        if adjoint or run or schedule:
            raise ArgumentValueError("inspect: a Block is shown on its own; adjoint=True, "
                                     "run=True and schedule=True need its Program or a "
                                     "function")
        return render_block(target, fold)
    if isinstance(target, Run):
        recorded: Run | None = target
        program = target.program
    elif run or schedule or _pullback_of(target) is not None:
        recorded = record_run(target, *args, checkpoint=checkpoint, values=values,
                              schedule=schedule)
        program = recorded.program
    else:
        recorded = None
        program = target if isinstance(target, Program) else _lower(target, args)
    parts: list[RenderableType] = []
    if recorded is not None:
        parts.append(render_run(recorded, fold, schedule))
    if adjoint:
        parts.append(render_mirrored(program, fold))
    if not parts:
        parts.append(render_program(program, fold))
    if expand:
        parts += render_sub_programs(program, fold, adjoint)
    return parts[0] if len(parts) == 1 else Group(*parts)


def render_sub_programs(program: Program, fold: int | None = DEFAULT_FOLD,
                        adjoint: bool = False) -> list[RenderableType]:
    """What the `call` / `vjp_call` nodes of `program` stand for: each sub-program (at any
    depth, once), under a line naming the node parameter that refers to it (a `vjp(f, …)`
    is the pullback of `f`'s program; `f.jvp` is a JVP program)."""
    parts: list[RenderableType] = []
    for what, sub in sub_programs(program):
        parts.append(Text(f"\nsub-program of {{of={what}}}", style="bold"))
        parts.append(render_mirrored(sub, fold) if adjoint else render_program(sub, fold))
    return parts


def _lower(fun: Any, args: tuple) -> Program:
    if not callable(fun):
        raise ArgumentTypeError(f"inspect: expected a function, a Program, a Block, a pullback "
                                f"or a Run, got {type(fun).__name__}")
    return lowered(converted(fun), args)[0].program


def inspect(target: Any, *args: Any, adjoint: bool = False, run: bool = False,
            fold: int | None = DEFAULT_FOLD, values: Sequence[str] = (),
            checkpoint: Any = None, schedule: bool = False, expand: bool = False,
            console: Console | None = None) -> None:
    """Print a view of `target` to `console` (a new rich Console on stdout by default).

    `target` is a function (lowered at `args`, as `cg.lower` does), a Program, a Block
    (shown on its own), a pullback from `cg.vjp` (shows its run) or a `Run`. Without
    options it prints the program view; `adjoint=True` prints the mirrored view (each
    forward block beside its adjoint); `run=True` executes the function at `args` forward
    and backward and prints the run view (visit and decision counts, the path, trip
    counts, checkpoint accounting and the `values` named, e.g. `values=["%3"]`, besides
    parameters, outputs and gradients); `checkpoint` is the call's checkpoint strategy for
    that run; `schedule=True` (which implies `run=True`) runs every loop's strategy traced
    and adds each loop's checkpoint schedule to the run view; `expand=True` adds the
    sub-programs that nested transformations' `call` / `vjp_call` nodes stand for (their
    mirrored views with `adjoint=True`). Blocks with more than `fold` rows show their first
    and last rows only (`fold=None` or 0 shows everything). The view is laid out for the
    console's width, at most `MAX_WIDTH` (1000) columns.

    Returns None, like `rich.inspect`: use `cfgrad.inspector.view` for the renderable."""
    console = console or Console()
    console.print(view(target, *args, adjoint=adjoint, run=run, fold=fold, values=values,
                       checkpoint=checkpoint, schedule=schedule, expand=expand),
                  width=min(console.width, MAX_WIDTH))
