"""The run view: the program view annotated with what one recorded run did (visit,
decision and trip counts), the executed path run-length encoded, per-loop checkpoint
accounting, the loops' schedules when traced, and value summaries.

A `Run` is a `recording.RunRecord` that rich prints as this view (`rich.print(run)`):
the recording itself is plain data, which the DOT export draws without rich.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from ..ir import Block, Program
from ..outline import Naming
from ..recording import RunRecord, ValueSummary, record
from ..runlength import compress_path, counts_text, loop_blocks
from .layout import COUNT_STYLE, LABEL_STYLE, NOTE_STYLE, TYPE_STYLE, token_items
from .panels import DEFAULT_FOLD, BlockNotes, render_program
from .schedules import render_schedules

MAX_PATH_TOKENS = 40  # top-level tokens shown before the middle is elided


class Run(RunRecord):
    """What one execution of a forward Program did (`record_run`): `rich.print(run)` shows
    the run view."""

    def __rich_console__(self, console: Console, options: Any) -> Any:
        yield render_run(self)


def record_run(target: Any, *args: Any, checkpoint: Any = None, values: Sequence[str] = (),
               reverse: bool = True, schedule: bool = False) -> Run:
    """`recording.record`'s run of `target`, as a `Run`: run forward with the path recorded,
    then (with `reverse`) its adjoint; `values` names more values to summarize (`"%3"`);
    `schedule` runs every loop's strategy traced."""
    recorded = record(target, *args, checkpoint=checkpoint, values=values, reverse=reverse,
                      schedule=schedule)
    return Run(**vars(recorded))


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


def render_run(run: RunRecord, fold: int | None = DEFAULT_FOLD,
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


def loops_table(program: Program, run: RunRecord) -> Table:
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
