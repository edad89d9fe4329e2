"""The views' styles and the text layouts they share.

Views are plain rich `Text` laid out here (hanging indents, a source column that moves to
its own line when the console is narrow) rather than rich tables, which are about five
times slower for the 2000-node programs the inspector must draw in well under a second:
`Rows` lays out the rows of a block panel, `token_items` the items of a folded sequence
(a path, a checkpoint schedule).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.measure import Measurement
from rich.text import Text

from ..nodespec import KIND_BY_NAME, PRIMITIVE
from ..runlength import Repeat

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


class Rows:
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
