"""The IR's own node kinds, each declared once.

A `NodeKind` says everything the rest of the package needs to know about a kind: its
operands, results, successors and static parameters (each a named `Slot` with a role),
its flags, its text syntax, the inspector's style for it and a one-line doc. From these
declarations come the printer's and the parser's spelling (ir.py, irparse.py), the
verifier's per-kind arity checks (verify.py), the inspector's styles (inspector/layout.py,
dot.py), the flag sets the interpreter and the reverse passes consult, and the node
table of docs/ir.md (tests/docs/test_docs_ir.py renders it from here and fails when the page
differs). The shape follows libFirm's node specification (inputs and outputs as named,
documented pairs, flags as words) and MLIR/xDSL's declarative assembly formats (a
syntax string of literals and `$variables` drives both printing and parsing).

Primitive operations (add, mul, …) are not kinds of their own: they share the
`PRIMITIVE` form, and what each computes lives in the derivative table, cfgrad/primitives/.
This module imports nothing of cfgrad, so every layer may read it.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

#: What a `Slot`'s form means: how its value is written in the text.
FORMS: dict[str, str] = {
    "value": "one value: `%3`, or an inline constant such as `2.0`",
    "values": "values separated by commas, possibly none",
    "edge-values": "`EDGE: VALUE` per predecessor edge of the block, separated by commas",
    "block": "a block label, followed by `↺` when the edge is a loop's back edge",
    "cases": "one `Proj` per case, separated by ` | `",
    "key": "a Proj key: `T`, `F` or a case number",
    "forward-value": "`^%3`: a value of the forward program, by its forward name",
    "region": "a region id (`if#0`, `loop#1`)",
    "type": "a result of any type",
    "i64[]": "a result of type i64[]",
}

#: What a flag means; a kind's flags are a subset of these words.
FLAGS: dict[str, str] = {
    "terminator": "ends a block (exactly one per block)",
    "runtime": "adjoint programs only: reads what the forward run recorded, so such "
               "programs do not parse",
    "side-effect": "changes the run's state: passes keep it, in place (no dead-code removal, "
                   "common-subexpression reuse or hoisting)",
    "unchecked": "anomaly detection does not test its results: they are not computed here "
                 "or were tested where they were computed",
}


@dataclass(frozen=True)
class Slot:
    """One named operand, result, successor or parameter of a node kind (libFirm's
    `ins`/`outs` pairs): `form` is how it is written (a key of FORMS), `doc` its role."""

    name: str
    form: str
    doc: str

    def __post_init__(self) -> None:
        assert self.form in FORMS, self.form


@dataclass(frozen=True)
class NodeKind:
    """One IR node kind. `syntax` is its text form after any `%v: TYPE = `: words
    separated by spaces, where `$name` stands for the slot of that name (or `$params`,
    the node's remaining static parameters as `{name=value, …}`) and everything else is
    literal. The first word is the kind's keyword; a word that is only a variable is left
    out when the variable prints nothing (`Return` with no values)."""

    name: str
    operands: tuple[Slot, ...]
    results: tuple[Slot, ...]
    successors: tuple[Slot, ...]
    params: tuple[Slot, ...]
    flags: frozenset[str]
    syntax: str
    style: str  # the rich style the inspector (and the DOT export's colours) give it
    doc: str

    def __post_init__(self) -> None:
        assert self.flags <= FLAGS.keys(), self.flags - FLAGS.keys()
        named = {s.name for s in self.slots} | {"params", "op"}
        assert set(re.findall(r"\$(\w+)", self.syntax)) <= named, self.syntax

    @property
    def slots(self) -> tuple[Slot, ...]:
        return self.operands + self.results + self.successors + self.params

    @functools.cached_property
    def slot(self) -> dict[str, Slot]:
        """The slots by name."""
        return {s.name: s for s in self.slots}

    @functools.cached_property
    def words(self) -> tuple[tuple[tuple[str, bool], ...], ...]:
        """The syntax split into words, each a sequence of (text, is a variable) parts:
        `Proj($key)` is `(("Proj(", False), ("key", True), (")", False))`."""
        return tuple(tuple((part.lstrip("$"), part.startswith("$"))
                           for part in re.split(r"(\$\w+)", word) if part)
                     for word in self.syntax.split())


def _slots(*triples: tuple[str, str, str]) -> tuple[Slot, ...]:
    return tuple(Slot(*t) for t in triples)


NODE_KINDS: tuple[NodeKind, ...] = (
    NodeKind("Phi", _slots(("inputs", "edge-values", "one value per predecessor edge, in "
                                                     "predecessor order")),
             _slots(("out", "type", "the value of the edge control arrived by")), (), (),
             frozenset(), "Phi ($inputs)", "bold magenta",
             "Chooses the input of the edge control arrived by; all Phis of a block read their "
             "inputs before any is written (parallel copy)."),
    NodeKind("Jmp", (), (), _slots(("target", "block", "the block it jumps to")), (),
             frozenset({"terminator"}), "Jmp $target", "cyan",
             "Unconditional jump; `↺` marks a loop's back edge (the latch)."),
    NodeKind("Cond", _slots(("selector", "value", "bool[] (if, loop) or an integer scalar "
                                                  "(switch)")), (),
             _slots(("cases", "cases", "one Proj per outcome, in key order")), (),
             frozenset({"terminator"}), "Cond $selector -> $cases", "bold yellow",
             "Branches on its selector; each outcome leaves by its own Proj."),
    NodeKind("Proj", _slots(("key", "key", "the outcome of its Cond it stands for")), (),
             _slots(("target", "block", "the block control goes to on that outcome")), (),
             frozenset(), "Proj($key) $target", "yellow",
             "A control output of a Cond: Proj(T)/Proj(F) for a boolean, Proj(k) for a switch; "
             "written inside its Cond, and named `b0.T` (source block and key) where its "
             "target lists its predecessors."),
    NodeKind("Return", _slots(("values", "values", "the program's outputs")), (), (), (),
             frozenset({"terminator"}), "Return $values", "bold green",
             "Ends the program; exactly one block of a Program returns."),
    NodeKind("Primal", (), _slots(("value", "type", "the forward value")), (),
             _slots(("of", "forward-value", "the forward value it reads")),
             frozenset({"runtime", "unchecked"}), "Primal ^$of", "blue",
             "Reads a forward value, for the current iteration inside a loop."),
    NodeKind("LogPop", (), _slots(("decision", "type", "bool[] (cond) or the case index "
                                                       "(switch)")), (),
             _slots(("region", "region", "the if region whose decision it pops")),
             frozenset({"runtime", "side-effect", "unchecked"}), "LogPop $params", "bold red",
             "Pops the branch decision the forward run logged for an if region."),
    NodeKind("TripPop", (), _slots(("trips", "i64[]", "the trip count")), (),
             _slots(("loop", "region", "the loop region whose trip count it pops")),
             frozenset({"runtime", "side-effect", "unchecked"}), "TripPop $params", "bold red",
             "Pops the trip count of one execution of a loop."),
    NodeKind("LoopState", _slots(("t", "value", "the iteration index")), (), (),
             _slots(("loop", "region", "the loop region whose strategy it asks")),
             frozenset({"runtime", "side-effect", "unchecked"}), "LoopState $t $params",
             "bold blue",
             "Asks the loop's checkpoint strategy to make iteration t's forward values "
             "available (lookup or recomputation)."),
)

#: The form every primitive node shares: `sum %3 {axes=(0,), keepdims=False}`.
PRIMITIVE = NodeKind("primitive", _slots(("inputs", "values", "as the primitive takes")),
                     _slots(("out", "type", "as its shape rule gives")), (), (), frozenset(),
                     "$op $inputs $params", "bold",
                     "Applies a primitive of the derivative table (cfgrad/primitives/).")

KIND_BY_NAME = {k.name: k for k in NODE_KINDS}


def kinds_with(flag: str) -> frozenset[str]:
    """The names of the kinds that carry `flag`."""
    assert flag in FLAGS, flag
    return frozenset(k.name for k in NODE_KINDS if flag in k.flags)


RUNTIME_NODES = kinds_with("runtime")
TERMINATORS = kinds_with("terminator")
SIDE_EFFECTS = kinds_with("side-effect")
#: Node kinds whose results anomaly detection does not test (primitives say so by their
#: table entry's `unchecked`).
UNCHECKED = kinds_with("unchecked")
