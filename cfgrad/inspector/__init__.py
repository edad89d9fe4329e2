"""The inspector: Programs, their adjoints and what one run did, rendered with rich.

Three views, all built from the same block panels:

* the **program view** (`render_program`, what `inspect(program)` prints; `panels.py`):
  one panel per block in block order, nested inside one panel per region (`loop#0 while`,
  `if#0 cond`), so the region tree is visible as nesting; rows for Phis, nodes and the
  terminator, each IR node kind styled as `nodespec.NODE_KINDS` says;
* the **mirrored view** (`render_mirrored`, `mirrored.py`): each forward block beside the
  adjoint blocks that mirror it, with notes where the adjoint pops a logged decision or
  trip count, routes Phi cotangents and asks the checkpoint strategy for a loop state;
* the **run view** (`record_run` + `render_run`, or a `Run` given to `rich.print`;
  `run_view.py`): the program view annotated with what one execution did (visit counts,
  decision counts, trip counts), the executed path run-length encoded, per-loop
  checkpoint accounting from the reverse pass, and value summaries; with traced
  strategies (`schedule=True`), each loop's checkpoint schedule (`schedules.py`): the
  strategy's events grouped into runs, per phase, a per-iteration count of each kind and
  totals set against the interpreter's counts.

This module holds the entry points: `inspect()` prints a view; `view()` returns it as a
rich renderable. The inspector only reads: it runs programs through the public machinery
of api.py and interpret.py (`recording.py`), with the interpreter's `block_hook` as its
only observer. What the views share with the DOT export, the names and the region tree
(`outline.py`), the recorded run (`recording.py`) and the folded path (`runlength.py`),
lives outside this package, so that the DOT export does not need rich.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from rich.console import Console, Group, RenderableType
from rich.text import Text

from ..api import lowered
from ..convert import converted
from ..errors import ArgumentTypeError, ArgumentValueError
from ..ir import Block, Program
from ..nested import sub_programs
from ..recording import RunRecord, ValueSummary, find_values, pullback_of
from ..runlength import Repeat, compress_path, counts_text, loop_blocks
from .mirrored import render_mirrored
from .panels import DEFAULT_FOLD, render_block, render_program
from .run_view import Run, record_run, render_run
from .schedules import EVENTS, group_events, render_schedules, schedule_items

__all__ = [
    "DEFAULT_FOLD", "EVENTS", "MAX_WIDTH", "MIN_WIDTH", "Repeat", "Run", "RunRecord",
    "ValueSummary", "compress_path", "counts_text", "find_values", "group_events", "inspect",
    "loop_blocks", "record_run", "render_block", "render_mirrored", "render_program",
    "render_run", "render_schedules", "render_sub_programs", "schedule_items", "view",
]

#: The widths views are laid out for: narrower, a row's columns cannot fit; wider, every
#: line is padded to a width no screen shows, and the output (and its memory) grows with it.
MIN_WIDTH, MAX_WIDTH = 20, 1000


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
    if isinstance(target, RunRecord):
        recorded: RunRecord | None = target
        program = target.program
    elif run or schedule or pullback_of(target) is not None:
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
