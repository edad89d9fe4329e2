"""The mirrored view: each forward block beside the adjoint blocks that mirror it, with
notes where the adjoint pops a logged decision or trip count, routes Phi cotangents and
asks the checkpoint strategy for a loop state.
"""

from __future__ import annotations

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ..checkpoint import resolve
from ..ir import (
    Block,
    Cond,
    IfRegion,
    LoopRegion,
    Node,
    Program,
    Region,
    Value,
    back_edge_sources,
    key_text,
)
from ..outline import Naming, region_path
from ..reverse import adjoint as adjoint_of
from .layout import NOTE_STYLE
from .panels import DEFAULT_FOLD, BlockNotes, block_panel


def _strategy_text(r: LoopRegion) -> str:
    return repr(resolve(r.checkpoint, None)) + ("" if r.checkpoint is not None
                                                 else " (default)")


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
                           path=region_path(b))
        right = [block_panel(a, anames, alatches, fold, anotes[a], compact=True,
                             path=region_path(a)) for a in mirrors[b] + strays.get(b, [])]
        table.add_row(left, Group(*right) if right else Text("(nothing to reverse)",
                                                             style=NOTE_STYLE))
    header = Text.assemble(("mirrored ", "bold"), (program.name, "bold cyan"), " ↔ ",
                           (adjoint.name, "bold cyan"),
                           ("   Primal ^%v reads forward value %v", "dim"))
    return Group(header, table)
