"""One execution of a forward Program recorded for the views: the blocks it entered, in
order, how often each edge was taken, the interpreter's checkpoint statistics, and
summaries of the values asked for.

`record` runs the program through the public machinery (api.py's lowerings, interpret.py's
`execute` and `Tape.pullback`) with the interpreter's `block_hook` as its only observer,
and returns plain data: the inspector's run view draws a `RunRecord` with rich, the DOT
export draws one without it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import tree as treelib
from .api import Lowering, Pullback, lowered
from .checkpoint import RunStats, check_strategy, traced
from .convert import converted
from .errors import ArgumentTypeError, ArgumentValueError
from .interpret import Tape, execute
from .ir import Program, Value, defined_values, type_of
from .nested import call_checkpoint
from .outline import Naming


@dataclass
class ValueSummary:
    """What a value held at the end of the forward run (its last iteration, in a loop)."""

    label: str
    type: str
    computed: bool = True
    min: float | None = None
    max: float | None = None
    mean: float | None = None
    nan: int = 0
    inf: int = 0
    note: str = ""

    @staticmethod
    def of(label: str, x: Any, note: str = "") -> ValueSummary:
        a = np.asarray(x)
        kind = a.dtype.kind
        s = ValueSummary(label, str(type_of(a)), note=note)
        vals = a.ravel()
        if kind in "fc":
            s.nan = int(np.isnan(vals).sum())
            s.inf = int(np.isinf(vals).sum())
            vals = vals[np.isfinite(vals)]
            if kind == "c":
                vals = np.abs(vals)
        elif kind == "b":
            vals = vals.astype(np.int64)
        elif kind not in "iu":
            return s
        if vals.size:
            s.min, s.max, s.mean = float(vals.min()), float(vals.max()), float(vals.mean())
        return s


@dataclass
class RunRecord:
    """What one execution of a forward Program did, recorded by the interpreter's block
    hook (`record`)."""

    program: Program
    path: list[int]  # block indices in the order the forward run entered them
    visits: list[int]
    recomputed: list[int]  # block entries while the reverse pass recomputed iterations
    edges: dict[tuple[int, Any], int]  # (block index, Proj key or None) -> times taken
    stats: RunStats  # per loop: trip counts, strategy, recomputation, snapshots, bytes
    values: list[ValueSummary]
    reversed: bool  # whether the reverse pass ran (checkpoint accounting is complete)
    # per loop, how many of its schedule events the forward run emitted (the rest came
    # from the reverse pass): the events themselves do not say which phase they are of
    forward_events: list[int]
    reverse_error: str = ""
    traced: bool = False  # every loop's strategy was traced (record(schedule=True))


def _hook_recorder() -> tuple[list[int], Callable[[int], None]]:
    path: list[int] = []
    return path, path.append


def _count_edges(program: Program, path: list[int]) -> dict[tuple[int, Any], int]:
    """Edge counts from consecutive block pairs: the key is the Proj of the Cond case whose
    target the next block is (None for a Jmp)."""
    if len(path) < 2:
        return {}
    n = len(program.blocks)
    p = np.asarray(path, dtype=np.int64)
    pairs, counts = np.unique(p[:-1] * n + p[1:], return_counts=True)
    out: dict[tuple[int, Any], int] = {}
    index = {b: i for i, b in enumerate(program.blocks)}
    for pair, c in zip(pairs.tolist(), counts.tolist()):
        src, dst = divmod(pair, n)
        for key, target in program.blocks[src].term.successors():
            if index[target] == dst:
                out[(src, key)] = out.get((src, key), 0) + c
                break
    return out


def find_values(program: Program, chosen: Sequence[str]) -> list[Value]:
    """The values of `program` printed as the names in `chosen` (`"%3"`, `"x"` for `%x`);
    ArgumentValueError for a name the program does not print."""
    names = Naming.of(program)
    by_name = {name: v for v, name in names.values.items() if name.startswith("%")}
    out = []
    for name in chosen:
        key = name if name.startswith("%") else "%" + name
        if key not in by_name:
            known = ", ".join(sorted(by_name, key=_name_order)[:12])
            raise ArgumentValueError(f"inspect: {program.name} has no value named {name!r}; "
                                     f"names look like {known}, …")
        out.append(by_name[key])
    return out


def _name_order(name: str) -> tuple[int, Any]:
    rest = name[1:]
    return (1, int(rest)) if rest.isdigit() else (0, rest)


def record(target: Any, *args: Any, checkpoint: Any = None, values: Sequence[str] = (),
           reverse: bool = True, schedule: bool = False) -> RunRecord:
    """Run `target` (a function, a forward Program, or a Pullback, which is re-run on its
    inputs) forward with the path recorded, then (with `reverse`) its adjoint with unit
    cotangents for float outputs, so the checkpoint accounting is complete.

    `values` names more values to summarize (`"%3"`); parameters, outputs and the
    gradients are always summarized. With `schedule`, every loop's strategy runs traced
    (`checkpoint.traced`: the same decisions, with their events recorded), so the run view
    shows each loop's schedule; a strategy made with `trace=True` is traced anyway."""
    check_strategy(checkpoint, "cfgrad.inspect")
    pb = pullback_of(target)
    if pb is not None:
        # A pullback keeps its lowering and argument leaves: re-run those.
        entry, leaves, checkpoint = pb.lowering, pb.primals, pb.checkpoint
    elif isinstance(target, Program):
        if target.forward is not None:
            raise ArgumentTypeError("inspect: an adjoint program runs only as part of its "
                                    "forward program's run; inspect the forward program")
        entry = Lowering(target)
        leaves = treelib.flatten(args)[0]
        if len(leaves) != len(target.params):
            raise ArgumentTypeError(f"inspect: {target.name} takes {len(target.params)} "
                                    f"argument leaves, got {len(leaves)}")
    elif callable(target):
        entry, leaves = lowered(converted(target), args)
    else:
        raise ArgumentTypeError(f"inspect: cannot run a {type(target).__name__}")
    program = entry.program
    names = Naming.of(program)
    chosen = find_values(program, values)
    path, hook = _hook_recorder()
    strategies = entry.strategies(checkpoint)
    if schedule:
        strategies = [traced(s) for s in strategies]
    with np.errstate(all="ignore"), call_checkpoint(checkpoint):
        tape = execute(entry.grad_plan(None), entry.arguments(leaves), strategies,
                       block_hook=hook)
    forward_events = [len(s.schedule or ()) for s in tape.stats.loops]
    visits = np.bincount(np.asarray(path, dtype=np.int64),
                         minlength=len(program.blocks)).tolist()
    summaries = _summaries(program, names, tape, chosen, visits)
    recomputed_path, recompute_hook = _hook_recorder()
    error = ""
    did_reverse = False
    if reverse:
        cts = [np.ones(v.type.shape, v.type.dtype) if v.type.is_float
               else np.zeros(v.type.shape, v.type.dtype) for v in program.outputs]
        try:
            with np.errstate(all="ignore"), call_checkpoint(checkpoint):
                grads = tape.pullback(cts, block_hook=recompute_hook)
        except Exception as exc:  # noqa: BLE001 - shown in the run view, not raised
            error = f"{type(exc).__name__}: {exc}"
        else:
            did_reverse = True
            summaries += [ValueSummary.of("∂" + names.values[p], g, "gradient")
                          for p, g in zip(program.params, grads) if p.type.is_float]
    recomputed = np.bincount(np.asarray(recomputed_path, dtype=np.int64),
                             minlength=len(program.blocks)).tolist()
    return RunRecord(program, path, visits, recomputed, _count_edges(program, path),
                     tape.stats, summaries, did_reverse, forward_events, error, schedule)


def pullback_of(target: Any) -> Pullback | None:
    """The Pullback behind `target` (`cg.vjp`'s, or the one inside a has_aux pullback)."""
    if isinstance(target, Pullback):
        return target
    inner = getattr(target, "pullback", None)
    return inner if isinstance(inner, Pullback) else None


def _summaries(program: Program, names: Naming, tape: Tape, chosen: list[Value],
               visits: list[int]) -> list[ValueSummary]:
    defined_in: dict[Value, int] = {}
    for i, b in enumerate(program.blocks):
        for v in defined_values([b]):
            defined_in[v] = i
    out = [ValueSummary.of(names.values[p], tape.value(p), "parameter")
           for p in program.params]
    out += [ValueSummary.of(names.values[v], x, f"output {i}")
            for i, (v, x) in enumerate(zip(program.outputs, tape.outputs))]
    for v in chosen:
        label = names.values[v]
        i = defined_in.get(v)
        x = tape.value(v)
        if i is None:  # a parameter
            out.append(ValueSummary.of(label, x, "parameter"))
            continue
        where = names.blocks[program.blocks[i]]
        if x is None or visits[i] == 0:
            out.append(ValueSummary(label, str(v.type), computed=False,
                                    note=f"not computed ({where} did not run)"))
            continue
        note = f"in {where}" + (f", last of {visits[i]} visits" if visits[i] > 1 else "")
        out.append(ValueSummary.of(label, x, note))
    return out
