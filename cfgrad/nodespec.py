"""The IR's own node kinds, declared once.

This table drives the printer's spelling, the verifier's arity checks, the inspector's
styles and the IR reference in docs/ir.md (a test keeps that page in step with it).
Primitive operations (add, mul, …) are not here: they live in the derivative table,
`primitives.py`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NodeKind:
    name: str
    role: str  # "terminator", "edge", "merge" or "runtime"
    inputs: str
    outputs: str
    style: str  # rich style used by the inspector
    doc: str


NODE_KINDS: tuple[NodeKind, ...] = (
    NodeKind("Phi", "merge", "one value per predecessor edge, in predecessor order", "one value",
             "bold magenta",
             "Chooses the input of the edge control arrived by; all Phis of a block read their "
             "inputs before any is written (parallel copy)."),
    NodeKind("Jmp", "terminator", "none", "one control edge", "cyan",
             "Unconditional jump; `↺` marks a loop's back edge (the latch)."),
    NodeKind("Cond", "terminator", "a selector: bool[] (if, loop) or an integer scalar (switch)",
             "one Proj edge per case", "bold yellow",
             "Branches on its selector; each outcome leaves by its own Proj edge."),
    NodeKind("Proj", "edge", "the Cond it belongs to", "one control edge", "yellow",
             "A control output of a Cond: Proj(T)/Proj(F) for a boolean, Proj(k) for a switch. "
             "Written `T: b3` inside the Cond and `b0.T` in the target's predecessor list."),
    NodeKind("Return", "terminator", "the program's outputs", "none", "bold green",
             "Ends the program; exactly one block of a Program returns."),
    NodeKind("Primal", "runtime", "none (names a forward value)", "one value", "blue",
             "Adjoint programs only: reads a forward value for the current iteration, "
             "written `Primal ^%v`."),
    NodeKind("LogPop", "runtime", "none (names an if region)", "the logged decision", "bold red",
             "Adjoint programs only: pops the branch decision the forward run logged."),
    NodeKind("TripPop", "runtime", "none (names a loop region)", "i64[] trip count", "bold red",
             "Adjoint programs only: pops the trip count of one execution of a loop."),
    NodeKind("LoopState", "runtime", "the iteration index", "none", "bold blue",
             "Adjoint programs only: asks the loop's checkpoint strategy to make iteration "
             "t's forward values available (lookup or recomputation)."),
)

KIND_BY_NAME = {k.name: k for k in NODE_KINDS}
RUNTIME_NODES = frozenset(k.name for k in NODE_KINDS if k.role == "runtime")
