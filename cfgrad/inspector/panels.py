"""The program view: a Program as block panels nested in region panels, and one block
on its own.

A block panel (`block_panel`) is the unit every view is built from: rows for Phis, nodes
and the terminator, each IR node kind styled as `nodespec.NODE_KINDS` says, a title with
the block's predecessors, and the notes (`BlockNotes`) the mirrored and run views add.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rich import box
from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.text import Text

from ..ir import (
    Block,
    Cond,
    Jmp,
    LoopRegion,
    Node,
    Piece,
    Program,
    Region,
    back_edge_sources,
    is_inline_const,
    key_text,
    node_pieces,
    phi_pieces,
    term_pieces,
)
from ..outline import Naming, RegionGroup, block_naming, region_path, region_tree
from .layout import (
    BLOCK_BORDER,
    COUNT_STYLE,
    LABEL_STYLE,
    LOC_STYLE,
    NOTE_STYLE,
    REGION_BORDER,
    ROLE_STYLE,
    STYLE,
    TYPE_STYLE,
    Row,
    Rows,
)

DEFAULT_FOLD = 40  # blocks with more rows than this show their head and tail only


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
    return Panel(Rows(rows, notes.head, dim=notes.dim), title=title, title_align="left",
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
    return block_panel(block, names, latches, fold, path=region_path(block) or "")
