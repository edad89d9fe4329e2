"""Graphviz DOT export of a Program (and of what one run did), as plain text.

`to_dot(program, run=None)` returns a `digraph` that `dot -Tsvg` draws; nothing here needs
graphviz installed. Regions are nested clusters, each block a cluster of one DOT node per
Phi, node and terminator (labelled with the IR text of `Program.text()`), so the region
tree shows the way the inspector's panels nest. Data edges are solid, control edges dashed
and labelled with their Proj key (`T`, `F`, `case 0`, `case 1`, …); edges that run backwards
(a loop's back edge, the data it carries) do not constrain the ranking, so loops draw
top-down. With a recorded run (a `recording.RunRecord`, such as the inspector's `Run`) the
blocks carry their visit counts and the control edges taken are bold and labelled with how
often (`T ×31`); the others are grey. Names and region nesting come from `outline.py`, as
the inspector's do; nothing here needs rich.

Ids are derived from block labels and positions (`b3_n2`, `b3_term`), never from object
identities, and colours come from the node kinds' styles in nodespec.NODE_KINDS, so the
same program always exports the same text.
"""

from __future__ import annotations

import re
from typing import Any

from .ir import (
    Block,
    Cond,
    Jmp,
    Program,
    Return,
    Value,
    back_edge_sources,
    block_comment,
    is_inline_const,
    key_text,
    node_text,
    phi_pieces,
    term_text,
)
from .nodespec import KIND_BY_NAME
from .outline import Naming, RegionGroup, region_tree
from .recording import RunRecord

# (fill, border) per colour word of a rich style: light fills keep labels readable.
_PALETTE = {
    "magenta": ("#f7e3f7", "#a0309e"), "cyan": ("#def3f6", "#137a8a"),
    "yellow": ("#fff4c7", "#9a7b00"), "green": ("#e1f3e1", "#2a7d2a"),
    "blue": ("#e2e9fb", "#2d55b5"), "red": ("#fbe2e2", "#b52d2d"),
}
_PLAIN = ("#ffffff", "#808080")
_DATA_EDGE = "#8a8a8a"
_UNTAKEN = "#b8b8b8"
_REGION = "#2d55b5"


def kind_colours(kind: str) -> tuple[str, str]:
    """(fill, border) for an IR node kind (`Phi`, `Cond`, …); primitives are plain."""
    spec = KIND_BY_NAME.get(kind)
    if spec is None:
        return _PLAIN
    word = next((w for w in spec.style.split() if w in _PALETTE), None)
    return _PALETTE[word] if word else _PLAIN


def quote(text: str) -> str:
    """A DOT double-quoted string."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _attrs(**attrs: Any) -> str:
    return "[" + ", ".join(f"{k}={quote(str(v))}" for k, v in attrs.items()) + "]"


def _cluster_id(name: str) -> str:
    return "cluster_" + re.sub(r"\W", "_", name)


def to_dot(program: Program, run: RunRecord | None = None) -> str:
    """The DOT text of `program`; with `run` (of this program), edges taken are bold with
    counts and blocks show how often they ran."""
    names = Naming.of(program)
    vn, bn = names.values, names.blocks
    latches = back_edge_sources(program)
    order = {b: i for i, b in enumerate(program.blocks)}
    defined: dict[Value, tuple[str, int]] = {}  # value -> (DOT node id, block index)
    for i, p in enumerate(program.params):
        defined[p] = (f"p{i}", -1)
    members: dict[Block, list[tuple[str, str, str]]] = {}  # block -> (id, label, kind)
    for b in program.blocks:
        label = bn[b]
        rows = []
        for k, phi in enumerate(b.phis):
            rhs = "".join(p.text for p in phi_pieces(b, phi, vn, bn))
            rows.append((f"{label}_phi{k}", f"{vn[phi.out]}: {phi.out.type} = {rhs}", "Phi"))
            defined[phi.out] = (rows[-1][0], order[b])
        for k, n in enumerate(b.nodes):
            if is_inline_const(n):
                continue
            rows.append((f"{label}_n{k}", node_text(n, vn, names.forward_values), n.op))
            for o in n.outputs:
                defined[o] = (rows[-1][0], order[b])
        kind = type(b.term).__name__ if b.term is not None else "Return"
        rows.append((f"{label}_term", term_text(b, vn, bn, b in latches), kind))
        members[b] = rows

    lines = [f"digraph {quote(program.name)} {{",
             "  graph " + _attrs(compound="true", rankdir="TB", newrank="true",
                                 fontname="Helvetica", fontsize=11, labelloc="t",
                                 label=_signature(program, names)) + ";",
             "  node " + _attrs(shape="box", style="rounded,filled", fontname="Courier",
                                fontsize=10, fillcolor=_PLAIN[0], color=_PLAIN[1]) + ";",
             "  edge " + _attrs(fontname="Helvetica", fontsize=9) + ";"]
    for i, p in enumerate(program.params):
        lines.append(f"  p{i} " + _attrs(label=f"{vn[p]}: {p.type}", shape="ellipse",
                                         style="filled", fillcolor="#f2f2f2") + ";")

    def emit_group(g: RegionGroup, depth: int) -> None:
        pad = "  " * depth
        for item in g.items:
            if isinstance(item, Block):
                emit_block(item, depth)
                continue
            r = item.region
            suffix = "_cont" if item.continued else ""
            title = f"{r.id} {getattr(r, 'kind', '')}" + (f" · {r.loc}" if r.loc else "")
            lines.append(f"{pad}subgraph {_cluster_id(r.id + suffix)} {{")
            lines.append(f"{pad}  graph " + _attrs(label=title, style="rounded,dashed",
                                                   color=_REGION, fontcolor=_REGION) + ";")
            emit_group(item, depth + 1)
            lines.append(pad + "}")

    def emit_block(b: Block, depth: int) -> None:
        pad = "  " * depth
        title = bn[b] + " " + block_comment(b).lstrip("; ")
        dim = False
        if run is not None:
            visits = run.visits[order[b]]
            title += f"  ×{visits}" if visits else "  (not run)"
            dim = not visits
        lines.append(f"{pad}subgraph {_cluster_id(bn[b])} {{")
        lines.append(f"{pad}  graph " + _attrs(label=title.strip(), style="rounded",
                                               color=_UNTAKEN if dim else "#404040",
                                               fontcolor=_UNTAKEN if dim else "#000000") + ";")
        for node_id, label, kind in members[b]:
            fill, border = kind_colours(kind)
            extra = {"fontcolor": _UNTAKEN, "color": _UNTAKEN} if dim else {"color": border}
            lines.append(f"{pad}  {node_id} " + _attrs(label=label, fillcolor=fill, **extra)
                         + ";")
        ids = [m[0] for m in members[b]]
        if len(ids) > 1:  # an invisible spine keeps the block's rows in order, top-down
            lines.append(f"{pad}  " + " -> ".join(ids) + " " + _attrs(style="invis",
                                                                       weight=100) + ";")
        lines.append(pad + "}")

    emit_group(region_tree(program), 1)
    lines += _data_edges(program, members, defined, order)
    lines += _control_edges(program, members, latches, order, run, bn)
    lines.append("}")
    return "\n".join(lines) + "\n"


def _signature(program: Program, names: Naming) -> str:
    params = ", ".join(f"{names.values[p]}: {p.type}" for p in program.params)
    outs = ", ".join(str(v.type) for v in program.outputs)
    return f"program {program.name}({params}) -> ({outs})"


def _data_edges(program: Program, members: dict[Block, list[tuple[str, str, str]]],
                defined: dict[Value, tuple[str, int]], order: dict[Block, int]) -> list[str]:
    """Solid edges from each value's definition to each use; uses in an earlier block
    (loop-carried values) do not constrain the ranking."""
    out = []
    for b in program.blocks:
        rows = iter(members[b])
        users: list[tuple[str, list[Value], bool]] = []  # (DOT id, values read, is a Phi)
        for phi in b.phis:
            users.append((next(rows)[0], phi.inputs, True))
        for n in b.nodes:
            if not is_inline_const(n):
                users.append((next(rows)[0], n.inputs, False))
        t = b.term
        term_uses = [t.selector] if isinstance(t, Cond) else list(t.values) if isinstance(
            t, Return) else []
        users.append((next(rows)[0], term_uses, False))
        for user, values, is_phi in users:
            for v in dict.fromkeys(values):  # one edge per distinct value
                src = defined.get(v)
                if src is None:  # inline constants print as literals
                    continue
                attrs = {"color": _DATA_EDGE, "arrowsize": "0.6"}
                if src[1] > order[b] or (src[1] == order[b] and is_phi):  # carried back
                    attrs["constraint"] = "false"
                out.append(f"  {src[0]} -> {user} " + _attrs(**attrs) + ";")
    return out


def _control_edges(program: Program, members: dict[Block, list[tuple[str, str, str]]],
                   latches: set[Block], order: dict[Block, int], run: RunRecord | None,
                   bn: dict[Block, str]) -> list[str]:
    out = []
    for b in program.blocks:
        t = b.term
        if not isinstance(t, Jmp | Cond):
            continue
        for key, target in t.successors():
            kind = "Jmp" if key is None else "Proj"
            colour = kind_colours(kind)[1]
            label = "" if key is None else key_text(key) if isinstance(key, bool) \
                else f"case {key}"
            attrs: dict[str, Any] = {"style": "dashed", "color": colour, "fontcolor": colour}
            if target is not b:  # clip the edge at the block boundaries
                attrs.update(ltail=_cluster_id(bn[b]), lhead=_cluster_id(bn[target]))
            if b in latches and order[target] <= order[b]:
                attrs["constraint"] = "false"
                label = (label + " ↺").strip()
            if run is not None:
                count = run.edges.get((order[b], key), 0)
                if count:
                    attrs.update(style="dashed,bold", penwidth="2.5")
                    label = f"{label} ×{count}".strip()
                else:
                    attrs.update(color=_UNTAKEN, fontcolor=_UNTAKEN)
            if label:
                attrs["label"] = label
            out.append(f"  {members[b][-1][0]} -> {members[target][0][0]} "
                       + _attrs(**attrs) + ";")
    return out
