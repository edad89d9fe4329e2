"""Messages of run-time errors, for both backends: for anomalies, where a NaN or Inf
appeared and what produced it; a loop past its `max_iters`; a recomputed iteration that
left its loop early.

Only the error path runs this code, so it may walk the program structure freely: it
names the operation, the block, the user's source line, the value that went in (the
domain violation: `log` of -2.0, a division by 0.0), the loop iterations the run was in
and the branch it had taken.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .ir import IfRegion, LoopRegion, Node, Program, key_text, reachable, region_blocks
from .primitives import PRIMITIVES


def _first_bad_index(outputs: list[Any]) -> tuple[int, tuple[int, ...]]:
    for i, out in enumerate(outputs):
        a = np.asarray(out)
        if a.dtype.kind in "fc":
            bad = np.argwhere(~np.isfinite(a))
            if len(bad):
                return i, tuple(int(j) for j in bad[0])
    return 0, ()


def _inputs_at(inputs: list[Any], shape: tuple[int, ...], index: tuple[int, ...]) -> list[Any]:
    """The input elements that produced output element `index` (by broadcasting)."""
    values = []
    for x in inputs:
        a = np.asarray(x)
        if a.shape == shape or (a.ndim <= len(shape) and a.size > 0):
            try:
                values.append(np.broadcast_to(a, shape)[index].item())
                continue
            except ValueError:
                pass
        values.append(a.item() if a.size == 1 else f"<{a.dtype}{list(a.shape)}>")
    return values


def _where_in_control(program: Program, block_index: int, iterations: dict[str, int]) -> str:
    """'in iteration 3 of loop#0 (f.py:9), case T of if#1 (f.py:7)' for the block."""
    block = program.blocks[block_index]
    parts = []
    for r in program.regions:
        if isinstance(r, LoopRegion) and block in region_blocks(r):
            parts.append(f"iteration {iterations.get(r.id, '?')} of {r.id} ({r.loc})")
        elif isinstance(r, IfRegion):
            for key, entry in zip(r.keys, r.cases):
                if block in reachable([entry], r.merge):
                    parts.append(f"case {key_text(key)} of {r.id} ({r.loc})")
                    break
    return ", ".join(parts)


def anomaly_message(program: Program, block_index: int, node: Node, inputs: list[Any],
                    outputs: list[Any], iterations: dict[str, int]) -> str:
    """The text of an AnomalyError for `node`, whose `outputs` contain NaN or Inf."""
    which, index = _first_bad_index(outputs)
    bad = np.asarray(outputs[which])
    value = bad[index] if bad.ndim else bad
    kind = "nan" if np.isnan(value) else ("inf" if value > 0 else "-inf")
    reverse = program.forward is not None
    label = ("r" if reverse else "b") + str(block_index)
    where = "in the gradient (reverse) pass" if reverse else "in the forward pass"
    got = ", ".join(repr(v) for v in _inputs_at(inputs, bad.shape, index))
    at = f" at index {list(index)}" if index else ""
    what = f"`{node.op}`" + (f" (in the derivative of `{node.origin}`)" if node.origin else "")
    lines = [f"cg.detect_anomaly: {what} produced {kind}{at} {where}, block {label} of "
             f"program {program.name}, traced at {node.loc}",
             f"  its inputs there: ({got})"]
    for op in dict.fromkeys(o for o in (node.op, node.origin) if o):
        prim = PRIMITIVES.get(op)
        if prim is not None and prim.notes:
            lines.append(f"  {op}: {prim.notes}")
    control = _where_in_control(program, block_index, iterations)
    if control:
        lines.append(f"  while in {control}")
    if reverse and _reads_nonfinite_primal(program, node, inputs):
        lines.append("  (a forward value it reads is already NaN/Inf: the forward pass ran "
                     "unchecked; run vjp or grad under cg.detect_anomaly() or with "
                     "detect_anomaly=True to find where it first appeared)")
    elif reverse:
        of = f"`{node.origin}`" if node.origin else "the code"
        lines.append(f"  (the NaN/Inf first appeared in a cotangent: the derivative of {of} "
                     f"at {node.loc} is not finite there)")
    return "\n".join(lines)


def _reads_nonfinite_primal(program: Program, node: Node, inputs: list[Any]) -> bool:
    """Whether an input of the adjoint `node` is a forward value (a `Primal` read) that
    is not finite: then the anomaly is the forward pass's, not the derivative's."""
    primal_values = {o for b in program.blocks for n in b.nodes if n.op == "Primal"
                     for o in n.outputs}
    return any(v in primal_values and np.asarray(x).dtype.kind in "fc"
               and not np.all(np.isfinite(x)) for v, x in zip(node.inputs, inputs))


def bad_argument_message(program: Program, index: int, value: Any) -> str:
    p = program.params[index]
    bad = int(np.sum(~np.isfinite(np.asarray(value))))
    return (f"cg.detect_anomaly: argument {p.hint or index} of {program.name} already "
            f"contains NaN or Inf ({bad} {'entry' if bad == 1 else 'entries'}) "
            "before anything ran")


def loop_limit_message(region: LoopRegion) -> str:
    """The LoopLimitError of a loop past its `max_iters` (the interpreter's and compiled
    code's)."""
    return (f"while_loop {region.id} at {region.loc} exceeded max_iters={region.max_iters}; "
            "raise max_iters or check that the loop condition can become false")


def left_early_message(region: LoopRegion, iteration: str) -> str:
    """The ReplayMismatchError of a re-run `iteration` of a loop that left it early."""
    return (f"recomputing {iteration} of {region.id} (at {region.loc}) left the loop early: "
            "the recomputed loop condition differs from the forward run's (the body must be "
            "deterministic; checkpoint=StoreAll() never recomputes)")
