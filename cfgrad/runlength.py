"""Hierarchical run-length encoding: a sequence with its repeated stretches folded, inner
repeats first, as the views show an executed path (`b0 → (b1 → b2)×33 → b3`), trip counts
(`4×3, 2`) and checkpoint schedules.

A loop run 30,000 times enters tens of thousands of blocks; the folded path is a line. The
encoding is plain data (`Repeat` tokens), independent of how a view draws it, and knows
Programs only through `loop_blocks`, which keeps a repeat from straddling a loop's exit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .ir import Program, region_blocks

MAX_PERIOD = 12  # longest repeated unit looked for in one pass (passes nest)


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
