"""Each loop's checkpoint schedule in a recorded run: the strategy's events of the forward
run and of the reverse pass grouped into runs (`advance 0→4`), how many events of each kind
touched each iteration, and the totals set against the interpreter's own counts
(`LoopStats`), so a strategy whose events disagree with what it ran shows.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.padding import Padding
from rich.text import Text

from ..checkpoint import (
    ADVANCE,
    FREE,
    RESTORE,
    REVERSE,
    STORE,
    TAPED,
    LoopStats,
    StoreAll,
)
from ..ir import LoopRegion, RegionNest
from ..recording import RunRecord
from ..runlength import compress_path, counts_text
from .layout import NOTE_STYLE, token_items

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


def render_schedules(run: RunRecord) -> RenderableType:
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
                   run: RunRecord) -> RenderableType:
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
