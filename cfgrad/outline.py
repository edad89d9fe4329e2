"""What every picture of a Program shows the same way: the names its values and blocks
print as, and its blocks grouped by the region tree.

The inspector's rich views (`inspector/`) and the DOT export (`dot.py`) both draw a
Program as blocks nested in regions, under the names `Program.text()` prints. These are
facts of the Program, not of any drawing, so they live here, apart from rich: the DOT
export needs neither rich nor the inspector.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .ir import Block, Program, Region, Value, const_literal, defined_values, is_inline_const


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
    """Names for a block shown on its own, numbered like `Program.names` but within the
    block."""
    vn: dict[Value, str] = _OuterNames()
    for n in block.nodes:
        if is_inline_const(n):
            vn[n.outputs[0]] = const_literal(n.params["value"])
    defined = defined_values([block])
    for k, v in enumerate(v for v in defined if v not in vn):
        vn[v] = f"%{k}"
    return Naming(vn, _BlockRefs())


def region_chain(b: Block) -> list[Region]:
    """The regions `b` sits in, outermost first."""
    chain: list[Region] = []
    r = b.region
    while r is not None:
        chain.append(r)
        r = r.parent
    return chain[::-1]


def region_path(b: Block) -> str:
    """`loop#0 › if#0 case T`: where a block sits in the region tree, and its role."""
    return " ".join(w for w in (" › ".join(r.id for r in region_chain(b)), b.role) if w)


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
        chain = region_chain(b)
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
