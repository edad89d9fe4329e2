"""The inspector (cfgrad/inspector/) and the DOT export (cfgrad/dot.py).

Goldens: tests/golden/inspector/NAME.VIEW.txt is the whole text of one view (program,
mirrored, run) of one seed example of tests/seed_programs.py, rendered by
`Console(record=True, width=100, color_system=None)` and `export_text()`;
NAME.VIEW.w60.txt is the same at width 60. After an intended change to the inspector,
the lowering or seed_programs.py, regenerate them and review the diff:

    CFGRAD_REGEN_GOLDEN=1 python -m pytest tests/tools/test_inspector.py

Besides the goldens: determinism, NO_COLOR, narrow consoles, folding of long blocks, the
run view's numbers against independently derived ones (visit and decision counts, trip
counts, checkpoint accounting against `cg.vjp`'s pullback statistics, NaN/Inf counts),
the path compression, random structured programs in every view, the 2000-node timing,
and the DOT text.
"""

from __future__ import annotations

import io
import math
import os
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import rich
import seed_programs as seeds
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad import inspector
from cfgrad.dot import to_dot
from cfgrad.errors import ArgumentTypeError, ArgumentValueError
from cfgrad.inspector import Repeat, compress_path, counts_text, record_run, view

GOLDEN = Path(__file__).parents[1] / "golden" / "inspector"
REGEN = bool(os.environ.get("CFGRAD_REGEN_GOLDEN"))
VIEWS = ("program", "mirrored", "run")
SGR = re.compile(r"\x1b\[([0-9;]*)m")


def render(renderable, width: int = 100, **console_options) -> str:
    """What a console of `width` columns shows, as plain text."""
    options = {"color_system": None, **console_options}
    console = Console(record=True, width=width, file=io.StringIO(), **options)
    console.print(renderable)
    return console.export_text()


def seed_view(name: str, kind: str):
    fun, args = seeds.SEEDS[name]
    return view(fun, *args, adjoint=kind == "mirrored", run=kind == "run")


def has_colour(ansi: str) -> bool:
    """Whether any SGR sequence sets a foreground or background colour."""
    for match in SGR.finditer(ansi):
        params = [int(p) for p in match.group(1).split(";") if p]
        if any(30 <= p <= 49 or 90 <= p <= 107 for p in params):
            return True
    return False


# ---------------------------------------------------------------------------------
# Goldens
# ---------------------------------------------------------------------------------

GOLDEN_CASES = [(name, kind, 100) for name in sorted(seeds.SEEDS) for kind in VIEWS] + [
    (name, kind, 60) for name in ("cond", "while") for kind in VIEWS]


def golden_path(name: str, kind: str, width: int) -> Path:
    return GOLDEN / f"{name}.{kind}{'' if width == 100 else f'.w{width}'}.txt"


@pytest.mark.parametrize(("name", "kind", "width"), GOLDEN_CASES)
def test_golden(name, kind, width):
    text = render(seed_view(name, kind), width)
    path = golden_path(name, kind, width)
    if REGEN:
        GOLDEN.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"{path} is missing: regenerate with CFGRAD_REGEN_GOLDEN=1"
    assert text == path.read_text(encoding="utf-8"), (
        f"the {kind} view of {name} differs from {path}; if the change is intended, "
        "regenerate with CFGRAD_REGEN_GOLDEN=1 and review the diff")


def test_golden_files_are_all_used():
    expected = {golden_path(*case).name for case in GOLDEN_CASES}
    assert {p.name for p in GOLDEN.glob("*.txt")} == expected


# ---------------------------------------------------------------------------------
# Determinism, colour, width, folding
# ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", VIEWS)
@pytest.mark.parametrize("name", ["cond", "while", "switch"])
def test_views_are_deterministic(name, kind):
    """Two independent lowerings and runs render the same text, with no object ids or
    addresses in it."""
    fun, args = seeds.SEEDS[name]
    texts = []
    for _ in range(2):
        program = cg.lower(fun, *args)  # a fresh Program each time
        target = record_run(program, *args) if kind == "run" else program
        texts.append(render(view(target, adjoint=kind == "mirrored")))
    assert texts[0] == texts[1]
    assert not re.search(r"0x[0-9a-f]{4,}|object at|<[A-Z]\w+ ", texts[0])


def test_no_color_is_respected(monkeypatch):
    fun, args = seeds.SEEDS["while"]
    views = [view(fun, *args, run=True), view(fun, *args, adjoint=True)]

    def ansi() -> str:
        console = Console(force_terminal=True, color_system="truecolor", width=100,
                          file=io.StringIO())
        for v in views:
            console.print(v)
        return console.file.getvalue()

    monkeypatch.delenv("NO_COLOR", raising=False)
    assert has_colour(ansi())  # the views are coloured …
    monkeypatch.setenv("NO_COLOR", "1")
    plain = ansi()
    assert not has_colour(plain)  # … and NO_COLOR removes every colour
    assert "\x1b[1m" in plain  # but keeps emphasis, as NO_COLOR asks


@pytest.mark.parametrize("width", [60, 40])
@pytest.mark.parametrize("kind", VIEWS)
def test_narrow_consoles_wrap_without_losing_content(kind, width):
    """Every line fits, and every value the wide view names is still there."""
    for name in seeds.SEEDS:
        wide = render(seed_view(name, kind), 100)
        narrow = render(seed_view(name, kind), width)
        assert max(map(len, narrow.splitlines())) <= width, (name, narrow)
        assert set(re.findall(r"%\w+", narrow)) == set(re.findall(r"%\w+", wide)), name


def chain(x):
    for _ in range(100):
        x = x * 1.01 + 0.5
    return x


def test_long_blocks_fold():
    program = cg.lower(chain, 0.3)
    (block,) = program.blocks
    rows = len(block.phis) + sum(not n.op == "const" for n in block.nodes)
    assert rows == 200  # 100 x (mul, add); the constants print inline
    folded = render(view(program))
    assert f"… {rows - inspector.DEFAULT_FOLD} nodes …" in folded
    assert len(folded.splitlines()) < inspector.DEFAULT_FOLD + 10
    assert "%0 " in folded and "%199 " in folded  # the head and the tail are shown
    assert "%100 " not in folded
    assert f"… {rows - 10} nodes …" in render(view(program, fold=10))
    unfolded = render(view(program, fold=None))
    assert "nodes …" not in unfolded and all(f"%{i} " in unfolded for i in range(rows))


def test_fold_applies_to_every_view():
    program = cg.lower(chain, 0.3)
    for v in (view(program, adjoint=True, fold=20), view(program, 0.3, run=True, fold=20)):
        assert "nodes …" in render(v)


# ---------------------------------------------------------------------------------
# rich integration and the entry points
# ---------------------------------------------------------------------------------


def test_rich_print_of_program_block_and_run():
    fun, args = seeds.SEEDS["while"]
    program = cg.lower(fun, *args)
    assert str(program) == program.text()  # plain str stays the IR text
    # Programs are data: rich prints their text, and the views are the inspector's
    assert render(program) == program.text() + "\n"
    assert render(view(program)) == render(inspector.render_program(program))
    header = program.blocks[1]
    shown = render(view(header))  # a block on its own names other blocks by their role
    assert "block loop#0 header ← (entry), (loop#0 body)" in shown
    assert "Cond %2 -> Proj(T) (loop#0 body) | Proj(F) (loop#0 exit)" in shown
    run = record_run(program, *args)
    assert render(run) == render(inspector.render_run(run))


def test_inspect_prints_to_the_console_and_returns_none(capsys):
    fun, args = seeds.SEEDS["cond"]
    console = Console(record=True, width=100, color_system=None, file=io.StringIO())
    assert cg.inspect(fun, *args, console=console) is None
    assert console.export_text() == render(seed_view("cond", "program"))
    cg.inspect(fun, *args, run=True)  # default: a console on stdout
    assert "run of cond_example" in capsys.readouterr().out


def test_inspect_combines_run_and_mirrored_views():
    fun, args = seeds.SEEDS["while"]
    text = render(view(fun, *args, run=True, adjoint=True))
    assert text.index("run of while_example") < text.index("mirrored while_example")


def test_inspect_refuses_what_it_cannot_show():
    fun, args = seeds.SEEDS["cond"]
    program = cg.lower(fun, *args)
    with pytest.raises(ArgumentTypeError, match="adjoint program"):
        record_run(cg.adjoint(program), *args)
    with pytest.raises(ArgumentTypeError, match="takes 2 argument leaves, got 1"):
        record_run(program, 1.0)
    with pytest.raises(ArgumentTypeError, match="expected a function"):
        view(42)
    with pytest.raises(ArgumentValueError, match="a Block is shown on its own"):
        view(program.blocks[0], adjoint=True)
    with pytest.raises(ArgumentValueError, match="no value named '%99'"):
        record_run(fun, *args, values=["%99"])


# ---------------------------------------------------------------------------------
# The run view's numbers
# ---------------------------------------------------------------------------------


def test_run_of_a_branch():
    """a < b at (1, 2): the True case runs, the False case does not."""
    fun, args = seeds.SEEDS["cond"]
    run = record_run(fun, *args)
    assert run.path == [0, 1, 3]
    assert run.visits == [1, 1, 0, 1]
    assert run.edges == {(0, True): 1, (1, None): 1}
    text = render(run)
    assert "T×1 F×0" in text
    assert "b2 case F ← b0.F  not run" in text
    assert "path  b0 → b1 → b3" in text


def test_run_of_a_while_loop():
    """while i < n with n = 4: the header runs 5 times, the body 4, the loop once."""
    fun, args = seeds.SEEDS["while"]
    run = record_run(fun, *args)
    assert run.visits == [1, 5, 4, 1]
    assert run.edges == {(0, None): 1, (1, True): 4, (1, False): 1, (2, None): 4}
    assert run.stats.loops[0].trip_counts == [4]
    text = render(run)
    assert "path  b0 → (b1 → b2)×4 → b1 → b3" in text
    assert "T×4 F×1" in text and "Jmp b1 ↺" in text


def nested(x, n):
    """Outer iteration i runs the inner loop i times (trip counts 0, 1, …, n-1)."""

    def outer(c):
        i, s = c

        def inner(d):
            j, t = d
            return j + 1, cg.cond(t > 1.0, lambda: t * 0.5, lambda: t + x)

        return i + 1, cg.while_loop(lambda d: d[0] < i, inner, (0, s))[1]

    return cg.while_loop(lambda c: c[0] < n, outer, (0, x))[1]


def test_trip_counts_per_execution_of_a_nested_loop():
    run = record_run(nested, 0.7, 4)
    assert [s.trip_counts for s in run.stats.loops] == [[4], [0, 1, 2, 3]]
    text = render(run)
    assert re.search(r"loop#1 while\s+0, 1, 2, 3\s", text)
    inner_header = run.program.loops()[1].header
    assert run.visits[run.program.blocks.index(inner_header)] == 4 + (0 + 1 + 2 + 3)


@pytest.mark.parametrize("strategy", [None, cg.checkpoint.Binomial(2),
                                      cg.checkpoint.Recompute(), cg.checkpoint.EveryK(2)])
def test_checkpoint_accounting_matches_the_pullback_statistics(strategy):
    """The run's per-loop accounting is what cg.vjp reports for the same call."""
    run = record_run(nested, 0.7, 5, checkpoint=strategy)
    _, pullback = cg.vjp(nested, 0.7, 5, checkpoint=strategy)
    pullback(1.0)
    fields = ("name", "strategy", "trip_counts", "forward_steps", "recompute_steps",
              "peak_snapshots", "peak_bytes")
    got = [[getattr(s, f) for f in fields] for s in run.stats.loops]
    assert got == [[getattr(s, f) for f in fields] for s in pullback.stats.loops]
    text = render(run)
    for s in run.stats.loops:
        assert re.search(rf"{s.name} while .*{re.escape(s.strategy)}\s+{s.recompute_steps}\s+"
                         rf"{s.peak_snapshots}\s", text), text
    if strategy is not None:
        assert sum(run.recomputed) > 0 and "recomputed" in text


def test_run_of_a_pullback_is_the_run_of_its_call():
    fun, args = seeds.SEEDS["while"]
    _, pullback = cg.vjp(fun, *args)
    assert render(view(pullback)) == render(view(fun, *args, run=True))

    def with_aux(x, n):
        return fun(x, n), n * 2

    _, aux_pullback, _ = cg.vjp(with_aux, *args, has_aux=True)
    assert "path  b0 → (b1 → b2)×4 → b1 → b3" in render(view(aux_pullback))


def test_value_summaries_count_nan_and_inf():
    """log([-1, 0, 1, e]) = [nan, -inf, 0, 1]: one NaN, one Inf, finite min 0, max 1."""
    def f(x):
        return cnp.log(x)

    run = record_run(f, np.array([-1.0, 0.0, 1.0, math.e]))
    out = next(s for s in run.values if s.note == "output 0")
    assert (out.nan, out.inf, out.min, out.max, out.mean) == (1, 1, 0.0, 1.0, 0.5)
    assert out.type == "f64[4]"
    assert re.search(r"%0\s+f64\[4\]\s+0\s+1\s+0\.5\s+1\s+1\s+output 0", render(run))


def test_value_summaries_of_chosen_values():
    fun, args = seeds.SEEDS["cond"]
    run = record_run(fun, *args, values=["%1", "%2", "a"])
    by_label = {s.label: s for s in run.values}
    assert by_label["%1"].min == 3.0 and by_label["%1"].note == "in b1"  # a + b
    assert not by_label["%2"].computed and "b2 did not run" in by_label["%2"].note
    grads = [s for s in run.values if s.note == "gradient"]
    assert [(s.label, s.min) for s in grads] == [("∂%a", 2.0), ("∂%b", 2.0)]  # 2z, z = a+b
    loop_fun, loop_args = seeds.SEEDS["while"]
    loop_run = record_run(loop_fun, *loop_args, values=["%6"])
    assert next(s for s in loop_run.values if s.label == "%6").note == \
        "in b2, last of 4 visits"


def test_forward_only_runs():
    fun, args = seeds.SEEDS["while"]
    run = record_run(fun, *args, reverse=False)
    assert not run.reversed and not [s for s in run.values if s.note == "gradient"]
    assert "forward only" in render(run)


# ---------------------------------------------------------------------------------
# Path compression
# ---------------------------------------------------------------------------------


def expand(tokens) -> list:
    out = []
    for t in tokens:
        out += expand(t.unit) * t.count if isinstance(t, Repeat) else [t]
    return out


def test_compress_path_examples():
    assert compress_path([0, 1, 2, 1, 2, 1, 3]) == [0, Repeat((1, 2), 2), 1, 3]
    assert compress_path("aabaab") == [Repeat((Repeat(("a",), 2), "b"), 2)]
    # with loop structure, a repeat must be whole iterations of one loop (header 1)
    assert compress_path([0, 1, 2, 3, 1, 2, 3], {1: frozenset({1, 2})}) == [
        0, 1, 2, 3, 1, 2, 3]
    assert counts_text([4, 4, 4, 2]) == "4×3, 2"
    assert counts_text([]) == "never ran"


@settings(max_examples=60)
@given(st.lists(st.integers(0, 3), max_size=60))
def test_compress_path_round_trips(seq):
    tokens = compress_path(seq)
    assert expand(tokens) == seq
    assert len(tokens) <= len(seq)
    loops = {0: frozenset({0, 1}), 2: frozenset({1, 2, 3})}
    assert expand(compress_path(seq, loops)) == seq


# ---------------------------------------------------------------------------------
# Checkpoint schedules
# ---------------------------------------------------------------------------------


def fori(x, n):
    return cg.fori_loop(0, n, lambda i, c: cnp.sin(c) * 0.9 + 0.1, x)


def while_(x, n):
    return cg.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, cnp.sin(c[1]) * 0.9 + 0.1),
                         (0, x))[1]


LOOPS = {"fori": fori, "while": while_}
ROWS = ("forward run", "reverse pass", "totals")
ITEM = re.compile(r"(\(*)(\w+) (\d+)(?:→(\d+))?((?:\)|×\d+)*)")


def schedule_sections(text: str) -> dict[str, dict[str, Any]]:
    """The schedules of a rendered run view, per loop id: its head line, each row's items
    (wrapped lines joined) and each timeline row's cells (`timeline`: kind -> cells, `t`
    the column labels), plus the lines after the timeline."""
    sections: dict[str, dict[str, Any]] = {}
    current: dict[str, Any] | None = None
    row = None
    for line in text.split("\nschedules\n", 1)[1].splitlines():
        if re.match(r"loop#\d+ ", line):
            current = sections[line.split()[0]] = {"head": line, "timeline": {}, "notes": []}
            row = None
        elif current is None or not line.startswith("  "):
            break  # the values table
        elif (label := next((r for r in ROWS if line[2:].startswith(r + " ")), None)):
            row, current[label] = label, line[2 + len(label):].strip()
        elif row is not None and line.startswith(" " * 16):
            current[row] += " " + line.strip()
        elif (words := line.split()) and (words[0] == "t" or words[0] in inspector.EVENTS):
            row = None
            current["timeline"][words[0]] = words[1:]
        else:
            current["notes"].append(line.strip())
    return sections


def events_of(row: str) -> list[tuple[str, int]]:
    """The events a rendered row lists: `advance 0→2` is three, `(a · b)×2` is a, b, a, b,
    `x×3` is x three times (the inverse of `schedule_items` when nothing is elided)."""
    stack: list[list[tuple[str, int]]] = [[]]
    for item in row.split(" · "):
        m = ITEM.fullmatch(item)
        assert m, item
        stack += [[] for _ in m.group(1)]
        first = int(m.group(3))
        last_t = int(m.group(4) or first)
        step = 1 if last_t >= first else -1
        last = [(m.group(2), t) for t in range(first, last_t + step, step)]
        stack[-1] += last
        for close in re.findall(r"\)|×\d+", m.group(5)):
            if close == ")":
                last = stack.pop()
                stack[-1] += last
            else:
                stack[-1] += last * (int(close[1:]) - 1)
    (events,) = stack
    return events


def totals_of(row: str) -> dict[str, tuple[int, dict[str, int]]]:
    """`forward 6 = 5 advance + 1 taped · …` -> {"forward": (6, {"advance": 5, "taped":
    1}), …}; the breakdown's own words are its keys (`untaped`)."""
    out = {}
    for part in row.split(" · "):
        m = re.fullmatch(r"(forward|recomputed|peak snapshots) (\d+)(?: = (.*))?", part)
        assert m, part
        parts = (p.split(" ", 2) for p in (m.group(3) or "").split(" + ") if p)
        out[m.group(1)] = (int(m.group(2)), {p[1]: int(p[0]) for p in parts})
    return out


def peak_of(events: list[tuple[str, int]]) -> int:
    held = peak = 0
    for what, _ in events:
        held += (what == "store") - (what == "free")
        peak = max(peak, held)
    return peak


def check_schedule(section: dict[str, Any], stats, forward_events: int,
                   untaped: int = 0) -> None:
    """A loop's rendered schedule lists exactly its events, split where the reverse pass
    began; its totals are what those events add up to and what the run counted; the
    timeline counts each kind per iteration."""
    forward, reverse = stats.schedule[:forward_events], stats.schedule[forward_events:]
    if "… " not in section["forward run"] + section["reverse pass"]:
        assert events_of(section["forward run"]) == forward
        assert events_of(section["reverse pass"]) == reverse
    totals = totals_of(section["totals"])
    evaluations = ("advance", "taped")
    fw, rv = Counter(w for w, _ in forward), Counter(w for w, _ in reverse)
    assert totals["forward"] == (stats.forward_steps, {k: fw[k] for k in evaluations if fw[k]})
    assert stats.forward_steps == fw["advance"] + fw["taped"]
    breakdown = {k: rv[k] for k in evaluations if rv[k]}
    if untaped:
        breakdown["untaped"] = untaped
    assert totals["recomputed"] == (stats.recompute_steps, breakdown)
    assert stats.recompute_steps == rv["advance"] + rv["taped"] + untaped
    assert totals["peak snapshots"] == (stats.peak_snapshots, {})
    assert stats.peak_snapshots == peak_of(stats.schedule)
    timeline = section["timeline"]
    labels = timeline.pop("t")
    assert labels[-1] == "total"
    size = int(labels[1]) if len(labels) > 2 else 1
    count = Counter(stats.schedule)
    assert set(timeline) == {w for w, _ in stats.schedule}
    for kind, cells in timeline.items():
        per_t = [sum(count[kind, t] for t in range(a, a + size))
                 for a in map(int, labels[:-1])]
        assert [0 if c == "·" else int(c) for c in cells] == per_t + [sum(per_t)], kind


def schedules_text(run, width: int = 100) -> str:
    """The run view of `run`, schedules included."""
    return render(view(run), width)


@pytest.mark.parametrize("strategy", [cg.checkpoint.Binomial(3), cg.checkpoint.EveryK(3),
                                      cg.checkpoint.Online(3)], ids=repr)
@pytest.mark.parametrize("kind", sorted(LOOPS))
def test_schedule_counts_agree_with_the_run_statistics(kind, strategy):
    """Every event is listed, in order, on the row of its phase; the totals are the
    RunStats numbers, which tracing does not change (a plain cg.vjp counts the same)."""
    fun = LOOPS[kind]
    run = record_run(fun, 0.3, 11, checkpoint=strategy, schedule=True)
    (stats,) = run.stats.loops
    _, pullback = cg.vjp(fun, 0.3, 11, checkpoint=strategy)
    pullback(1.0)
    fields = ("forward_steps", "recompute_steps", "peak_snapshots", "peak_bytes")
    assert [getattr(stats, f) for f in fields] == [getattr(pullback.stats.loops[0], f)
                                                   for f in fields]
    assert stats.recompute_steps > 0 and not strategy.trace  # the user's object, untouched
    section = schedule_sections(schedules_text(run))["loop#0"]
    assert section["head"] == f"loop#0 {kind} · {strategy!r} · trips 11"
    assert "…" not in section["forward run"] + section["reverse pass"]
    check_schedule(section, stats, run.forward_events[0])
    assert "interpreter counted" not in section["totals"] and not section["notes"]


@pytest.mark.parametrize("kind", sorted(LOOPS))
def test_schedule_of_a_loop_that_runs_no_iteration(kind):
    run = record_run(LOOPS[kind], 0.3, 0, checkpoint=cg.checkpoint.Online(2), schedule=True)
    assert run.stats.loops[0].schedule == []
    section = schedule_sections(schedules_text(run))["loop#0"]
    assert section["head"] == f"loop#0 {kind} · Online(2) · trips 0"
    assert section["forward run"] == section["reverse pass"] == "no events"
    assert section["totals"] == "forward 0 · recomputed 0 · peak snapshots 0"
    assert section["timeline"] == {}


def nested_fori(x):
    return cg.fori_loop(0, 7, lambda i, c: cg.fori_loop(
        0, 4, lambda j, d: cnp.sin(d) * 1.01 + 0.1, c), x)


@pytest.mark.parametrize("strategy", [cg.checkpoint.Binomial(2), cg.checkpoint.EveryK(2),
                                      cg.checkpoint.Online(2)], ids=repr)
@pytest.mark.parametrize(("fun", "args"), [(nested, (0.7, 6)), (nested_fori, (0.3,))],
                         ids=["while in while", "fori in fori"])
def test_schedules_of_nested_loops(fun, args, strategy):
    """The outer loop's events account for all its work. The inner loop also runs inside
    the outer loop's untaped re-runs (its `advance` events), where its strategy is not
    involved: the view names those evaluations, and their number is the inner trip counts
    of the outer iterations re-advanced."""
    run = record_run(fun, *args, checkpoint=strategy, schedule=True)
    outer, inner = run.stats.loops
    sections = schedule_sections(schedules_text(run))
    check_schedule(sections["loop#0"], outer, run.forward_events[0])
    readvanced = [t for what, t in outer.schedule[run.forward_events[0]:] if what == "advance"]
    untaped = sum(inner.trip_counts[t] for t in readvanced)
    assert (untaped > 0) == (not isinstance(strategy, cg.checkpoint.EveryK))
    check_schedule(sections["loop#1"], inner, run.forward_events[1], untaped)
    assert sections["loop#1"]["head"].endswith(f"trips {counts_text(inner.trip_counts)}")
    assert "interpreter counted" not in sections["loop#1"]["totals"]


def test_schedule_totals_show_what_the_interpreter_counted_otherwise():
    """A strategy whose events disagree with what it ran (here: the counts of a real run
    changed after it) shows the interpreter's numbers beside the events' in the totals."""
    run = record_run(fori, 0.3, 5, checkpoint=cg.checkpoint.Binomial(2), schedule=True)
    stats = run.stats.loops[0]
    events = (stats.forward_steps, stats.recompute_steps, stats.peak_snapshots)
    stats.forward_steps += 1
    stats.recompute_steps += 2
    stats.peak_snapshots += 3
    totals = schedule_sections(schedules_text(run))["loop#0"]["totals"]
    assert re.fullmatch(rf"forward {events[0]} = .* \(the interpreter counted "
                        rf"{events[0] + 1}\) · recomputed {events[1]} = .* \(the interpreter "
                        rf"counted {events[1] + 2}\) · peak snapshots {events[2]} \(the "
                        rf"interpreter counted {events[2] + 3}\)", totals), totals


def test_schedules_show_when_traced_or_asked(capsys):
    binomial = cg.checkpoint.Binomial(2)
    assert "schedules" not in render(view(fori, 0.3, 4, run=True, checkpoint=binomial))
    # a strategy made with trace=True shows its schedule without being asked
    made_traced = cg.checkpoint.Binomial(2, trace=True)
    assert "forward run" in render(view(fori, 0.3, 4, run=True, checkpoint=made_traced))
    # schedule=True implies run=True; StoreAll has no schedule
    text = render(view(fori, 0.3, 4, schedule=True))
    assert text.startswith("run of fori") and schedule_sections(text)["loop#0"]["notes"] == [
        "no schedule: StoreAll() keeps every iteration's tape and recomputes nothing"]
    # a Run recorded untraced says how to trace it when asked
    untraced = record_run(fori, 0.3, 4, checkpoint=binomial)
    assert "schedules" not in render(untraced)
    assert schedule_sections(render(view(untraced, schedule=True)))["loop#0"]["notes"] == [
        "not traced: record the run with schedule=True (cfgrad inspect --schedule)"]
    # a forward-only run has no reverse pass to show
    forward_only = record_run(fori, 0.3, 4, checkpoint=binomial, reverse=False, schedule=True)
    assert schedule_sections(render(forward_only))["loop#0"]["reverse pass"] == "not run"
    # cg.inspect passes schedule= on; a pullback's run is traced the same way
    cg.inspect(fori, 0.3, 4, checkpoint=binomial, schedule=True, console=Console(width=100))
    out = capsys.readouterr().out
    assert "loop#0 fori · Binomial(2) · trips 4" in out and "forward run" in out
    _, pullback = cg.vjp(fori, 0.3, 4, checkpoint=binomial)
    assert render(view(pullback, schedule=True)) == render(view(fori, 0.3, 4, schedule=True,
                                                                checkpoint=binomial))
    with pytest.raises(ArgumentValueError, match="schedule=True need"):
        view(cg.lower(fori, 0.3, 4).blocks[0], schedule=True)


def test_group_events_and_schedule_items():
    events = [("store", 0), ("advance", 0), ("advance", 1), ("advance", 2), ("reverse", 5),
              ("reverse", 4), ("reverse", 3), ("reverse", 4), ("taped", 1), ("taped", 1),
              ("free", 2), ("free", 3)]
    assert [str(r) for r in inspector.group_events(events)] == [
        "store 0", "advance 0→2", "reverse 5→3", "reverse 4", "taped 1", "taped 1",
        "free 2→3"]
    assert inspector.group_events([]) == []
    sweep = [("store", 0), ("advance", 0), ("advance", 1), ("taped", 2)]
    items = [i.plain for i in inspector.schedule_items(sweep * 3 + [("free", 0)])]
    assert items == ["(store 0", "advance 0→1", "taped 2)×3", "free 0"]
    assert events_of(" · ".join(items)) == sweep * 3 + [("free", 0)]


@settings(max_examples=80)
@given(st.lists(st.tuples(st.sampled_from(inspector.EVENTS), st.integers(0, 4)), max_size=60))
def test_schedule_items_round_trip(events):
    items = inspector.schedule_items(events, limit=10**6)
    assert events_of(" · ".join(i.plain for i in items)) == events if events else not items


def test_long_schedules_bucket_the_timeline_and_fit_narrow_consoles():
    run = record_run(while_, 0.3, 200, checkpoint=cg.checkpoint.Online(4), schedule=True)
    text = schedules_text(run)
    section = schedule_sections(text)["loop#0"]
    assert section["timeline"]["t"] == [str(t) for t in range(0, 200, 10)] + ["total"]
    assert section["notes"] == ["each column counts 10 iterations, from the t above it"]
    assert "more …" in section["reverse pass"]  # the middle of the list is elided
    check_schedule(section, run.stats.loops[0], run.forward_events[0])
    for width in (60, 40, 20):  # (at 20 columns an item wider than the room is cropped)
        narrow = schedules_text(run, width)
        assert max(map(len, narrow.splitlines())) <= width, width
        assert width == 20 or re.search(r"peak\s+snapshots\s+4", narrow)


# ---------------------------------------------------------------------------------
# Random structured programs in every view
# ---------------------------------------------------------------------------------


@settings(max_examples=8)
@given(seeds.expressions(depth=3))
def test_random_programs_render_in_every_view(expr):
    fun = seeds.build(expr)
    args = seeds.generated_args()
    program = cg.lower(fun, *args)
    adjoint = cg.adjoint(program)
    _, abn = adjoint.names()
    mirrored = render(view(program, adjoint=True), 120)
    for b in adjoint.blocks:  # every adjoint block is shown once, beside its mirror
        assert len(re.findall(rf"─ {abn[b]} ", mirrored)) == 1
    run = record_run(program, *args)
    text = render(run, 80)
    assert max(map(len, text.splitlines())) <= 80
    assert expand(compress_path(run.path, inspector.loop_blocks(program))) == run.path
    assert sum(run.visits) == len(run.path)


# ---------------------------------------------------------------------------------
# Speed
# ---------------------------------------------------------------------------------


def many_branches(x):
    for i in range(110):
        x = cg.cond(x > i * 0.01, lambda x=x: cnp.sin(x) * 1.5 + x * x - 0.25 * x,
                    lambda x=x: cnp.cos(x) * 0.5 - x + 1.0)
        x = x * 1.0001 + 0.001
    return x


def test_a_2000_node_program_renders_whole():
    """Every row of a large program is laid out (examples/benchmark.py times it)."""
    program = cg.lower(many_branches, 0.3)
    assert 1900 <= program.node_count() <= 2100
    text = render(view(program, fold=None))
    assert text.count("Cond ") == 110
    assert all(f"─ b{i} " in text for i in range(len(program.blocks)))


# ---------------------------------------------------------------------------------
# DOT
# ---------------------------------------------------------------------------------

DOT_NODE = re.compile(r"^\s*(\w+) \[", re.M)
DOT_EDGE = re.compile(r"^\s*(\w+) -> (\w+) (\[.*\]);$", re.M)


def test_dot_structure():
    fun, args = seeds.SEEDS["while"]
    program = cg.lower(fun, *args)
    text = to_dot(program)
    assert text == to_dot(cg.lower(fun, *args))  # stable ids and colours
    assert text.startswith('digraph "while_example" {') and text.endswith("}\n")
    assert text.count("{") == text.count("}")
    declared = set(DOT_NODE.findall(text)) - {"graph", "node", "edge"}
    edges = DOT_EDGE.findall(text)
    for src, dst, _ in edges:
        assert src in declared and dst in declared
    control = [(s, d, a) for s, d, a in edges if "dashed" in a]
    assert sorted((s, d) for s, d, _ in control) == [
        ("b0_term", "b1_phi0"), ("b1_term", "b2_n0"), ("b1_term", "b3_phi0"),
        ("b2_term", "b1_phi0")]
    labels = {(s, d): re.search(r'label="([^"]*)"', a) for s, d, a in control}
    assert labels[("b1_term", "b2_n0")].group(1) == "T"
    assert labels[("b1_term", "b3_phi0")].group(1) == "F"
    back = next(a for s, d, a in control if s == "b2_term")
    assert 'constraint="false"' in back and "↺" in back
    data = [a for _, _, a in edges if "dashed" not in a and "invis" not in a]
    assert data and all('style="dashed' not in a for a in data)
    assert "subgraph cluster_loop_0 {" in text and "subgraph cluster_b1 {" in text


def test_dot_marks_the_edges_a_run_took():
    fun, args = seeds.SEEDS["cond"]
    program = cg.lower(fun, *args)
    text = to_dot(program, record_run(program, *args))
    taken = [a for _, _, a in DOT_EDGE.findall(text) if "bold" in a]
    assert len(taken) == 2  # b0 -T-> b1 and b1 -> b3
    assert any('label="T ×1"' in a for a in taken)
    untaken = next(a for s, _, a in DOT_EDGE.findall(text) if 'label="F"' in a)
    assert "bold" not in untaken
    assert 'label="b2 if#0 case F  (not run)"' in text
    fun, args = seeds.SEEDS["switch"]  # at i = 1 the switch takes case 1
    program = cg.lower(fun, *args)
    labels = re.findall(r'label="(case [^"]*)"', to_dot(program, record_run(program, *args)))
    assert labels == ["case 0", "case 1 ×1", "case 2"]


@pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz is not installed")
@pytest.mark.parametrize("name", sorted(seeds.SEEDS))
def test_graphviz_draws_the_dot_text(name):
    fun, args = seeds.SEEDS[name]
    program = cg.lower(fun, *args)
    for text in (to_dot(program, record_run(program, *args)), to_dot(cg.adjoint(program))):
        proc = subprocess.run(["dot", "-Tsvg"], input=text, capture_output=True, text=True)
        assert proc.returncode == 0 and not proc.stderr, proc.stderr
        assert "<svg" in proc.stdout


def test_rich_print_of_a_program_just_works(capsys):
    fun, args = seeds.SEEDS["tree"]
    rich.print(cg.lower(fun, *args))
    assert "program tree_example(%x: f64[], %z: f64[]" in capsys.readouterr().out


# -- nested derivatives ----------------------------------------------------------------


def test_expand_shows_the_sub_programs_of_nested_derivatives():
    """A nested grad is one vjp_call node; expand=True shows what it stands for, at every
    depth, each sub-program once, in the program and the mirrored view alike."""
    def f(x):
        return cg.while_loop(lambda c: c[1] < 3, lambda c: (cnp.sin(c[0]) * x, c[1] + 1),
                             (x, 0))[0]

    second = cg.grad(cg.grad(f))
    plain = render(inspector.view(second, 0.5))
    assert "vjp_call %args, 1.0 {of=vjp(grad(f), wrt=[0])}" in plain
    assert "sub-program" not in plain
    expanded = render(inspector.view(second, 0.5, expand=True))
    headers = re.findall(r"^sub-program of \{of=(.*)\}$", expanded, re.M)
    assert headers == ["vjp(grad(f), wrt=[0])", "vjp(f, wrt=[0])"]
    assert "loop#0 while" in expanded and "sin %0" in expanded
    mirrored = render(inspector.view(second, 0.5, adjoint=True, expand=True))
    assert mirrored.count("sub-program of") == 2 and "TripPop" in mirrored
