"""Whether a Program's results are linear in some of its parameters, decided from its
nodes: a sound test (a program it calls linear is linear) that may call a linear program
nonlinear when the linearity rests on arithmetic it does not follow.

Two rules need it. `cg.custom_root`'s `tangent_solve(g, y)` must be linear in `y`: reverse
mode transposes it, and the transpose of a nonlinear function is not its derivative (JAX
refuses such a solve when it linearizes it). And the derivative of a gradient through a
`cg.custom_vjp` depends on whether its `bwd` is linear in the cotangent: only then is the
rule a linear map that forward mode can transpose (nested.py).

Each value gets a class: ZERO (a constant of zeros), CONST (independent of the
parameters), LINEAR (a linear function of them) or NONLINEAR. A primitive is linear in
its inputs that depend on the parameters when it is `add`/`sub` of linear values, a
product (`mul`, `matmul`, `einsum`) with exactly one linear factor, `div` of a linear
value by a constant one, a linear `solve`, a reshaping, a sum, an indexing or an update at
constant indices, a `where` on a constant condition, a `call` of a sub-program linear in
those inputs, or a pullback (`vjp_call`) at constant primals whose reverse pass is linear
in its cotangents. A Phi joins its inputs' classes, and a branch or loop whose decision
depends on the parameters makes the program nonlinear; adding a nonzero constant to a
linear value is affine, not linear.

A node standing for a sub-program (`call`, a custom rule's node) is analysed through that
program also where none of its inputs depends on the parameters: a linear sub-program of
zeros gives zeros (g(0) in the first step of a Richardson solve v ← v + ω(y - g(v)) from
v = 0), which a linear value added to it keeps linear, while a constant it gives makes
that sum affine. A pullback's results, linear images of its cotangents, get the join of
their classes: zeros for zeros, affine where a constant cotangent meets a linear one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .ir import Cond, Node, Program, Value
from .primitives import PRIMITIVES

ZERO, CONST, LINEAR, NONLINEAR = "zero", "const", "linear", "nonlinear"

# the primitives linear in their single non-index input
_UNARY = {"neg", "reshape", "transpose", "broadcast_to", "roll", "sum", "mean", "cumsum",
          "real", "imag", "conj", "fft", "rfft", "irfft", "copy", "stop_gradient", "index"}
# the primitives linear in all their non-index inputs together (a sum of linear terms)
_SUMS = {"add", "sub", "concatenate", "scatter_add", "accumulate", "accumulate_index",
         "write_row"}
_PRODUCTS = {"mul", "matmul", "einsum"}


def join(a: str, b: str) -> str:
    """The class of a value that is `a` on some paths and `b` on others (a Phi's)."""
    if a == b or b == ZERO:
        return a
    if a == ZERO:
        return b
    return NONLINEAR  # CONST with LINEAR (affine), or anything with NONLINEAR


@dataclass
class Verdict:
    """The classes of a program's results, and the first node (or branch) that makes a
    result depend nonlinearly on the parameters, as a phrase naming it and its line."""

    classes: list[str]
    culprit: str | None = None

    @property
    def linear(self) -> bool:
        return all(c in (ZERO, LINEAR) for c in self.classes)


def _at(n: Node) -> str:
    return f" (traced at {n.loc})" if n.loc is not None else ""


class _Analysis:
    def __init__(self, program: Program, params: list[str],
                 verdicts: dict[tuple[int, tuple[str, ...]], Verdict] | None = None):
        self.program = program
        self.classes: dict[Value, str] = dict(zip(program.params, params))
        self.culprit: str | None = None
        # the verdicts on sub-programs by their parameters' classes, shared by the
        # analyses of one program: a sub-program called in every step of a Python loop,
        # or again in each sweep to the fixpoint, is analysed once per such classes
        self.verdicts = {} if verdicts is None else verdicts

    def of(self, v: Value) -> str | None:
        return self.classes.get(v)

    def blame(self, what: str) -> None:
        if self.culprit is None:
            self.culprit = what

    def run(self) -> Verdict:
        changed = True
        while changed:  # to a fixpoint: a loop's Phis see their back edges' classes
            changed = False
            for b in self.program.blocks:
                for phi in b.phis:  # a Phi's class only grows, so the sweeps end
                    for c in map(self.of, phi.inputs):
                        if c is not None:
                            changed |= self._set(phi.out, c, grow=True)
                for n in b.nodes:
                    ins = [self.of(v) for v in n.inputs]
                    if any(c is None for c in ins):
                        continue  # reached again once its inputs are known
                    for out, cls in zip(n.outputs, self._node(n, ins)):
                        changed |= self._set(out, cls, grow=False)
                if isinstance(b.term, Cond) and self.of(b.term.selector) in (LINEAR, NONLINEAR):
                    self.blame("a branch or loop condition that depends on them")
                    return Verdict([NONLINEAR] * len(self.program.outputs), self.culprit)
        return Verdict([self.of(v) or NONLINEAR for v in self.program.outputs], self.culprit)

    def _set(self, v: Value, cls: str, grow: bool) -> bool:
        old = self.classes.get(v)
        new = join(old, cls) if grow and old is not None else cls
        if new == old:
            return False
        self.classes[v] = new
        return True

    def _node(self, n: Node, ins: list[str]) -> list[str]:
        if not n.outputs:  # an effect (a debug print) computes nothing
            return []
        if n.op == "const":
            return [CONST if n.params["value"].any() else ZERO]
        if n.op in ("call", "custom_vjp", "custom_jvp", "vjp_call"):
            return self._opaque(n, ins)
        if NONLINEAR not in ins and LINEAR not in ins:
            return [self._independent(n, ins)] * len(n.outputs)
        cls = self._primitive(n, ins)
        if cls == NONLINEAR:
            self.blame(f"`{n.op}`{_at(n)}")
        return [cls] * len(n.outputs)

    @staticmethod
    def _data(n: Node, ins: list[str]) -> tuple[list[str], list[str]]:
        """The classes of the node's float inputs that are not indices, and of the rest
        (indices, integers, conditions), which a linear use must not make depend on the
        parameters."""
        prim = PRIMITIVES.get(n.op)
        indices = set(prim.dynamic) if prim is not None else set()
        data = [i not in indices and v.type.is_float for i, v in enumerate(n.inputs)]
        return ([c for c, d in zip(ins, data) if d], [c for c, d in zip(ins, data) if not d])

    def _independent(self, n: Node, ins: list[str]) -> str:
        """ZERO where a linear primitive's inputs make it zero, else CONST: a value that
        is zero until a loop's back edge brings a linear one then becomes LINEAR, not the
        NONLINEAR join of CONST and LINEAR."""
        zeros = [c == ZERO for c in self._data(n, ins)[0]]
        if zeros and ((n.op in _UNARY or n.op in _SUMS or n.op == "astype") and all(zeros)
                      or n.op in _PRODUCTS and any(zeros) or n.op == "div" and zeros[0]
                      or n.op == "where" and all(zeros)):
            return ZERO
        return CONST

    def _primitive(self, n: Node, ins: list[str]) -> str:
        data, rest = self._data(n, ins)
        if NONLINEAR in ins or LINEAR in rest:  # also an index that moves with them
            return NONLINEAR
        if n.op in _UNARY:
            return LINEAR
        if n.op == "astype":
            return LINEAR if n.outputs[0].type.is_float else NONLINEAR
        if n.op in _SUMS or n.op == "where" or n.op == "scatter" and n.params["op"] == "set":
            return LINEAR if all(c in (ZERO, LINEAR) for c in data) else NONLINEAR
        if n.op in _PRODUCTS:
            return LINEAR if data.count(LINEAR) == 1 else NONLINEAR
        if n.op in ("div", "solve"):  # in the numerator, the right-hand side
            return LINEAR if data.count(LINEAR) == 1 and data[
                0 if n.op == "div" else 1] == LINEAR else NONLINEAR
        return NONLINEAR

    def _opaque(self, n: Node, ins: list[str]) -> list[str]:
        """A node standing for another program: the classes of that program's results,
        also where its inputs do not depend on the parameters (a linear sub-program of
        zeros, such as g(0) in a Richardson solve's first step, gives zeros, which the
        linear values added to it keep linear)."""
        if n.op == "vjp_call":
            return self._pullback(n, ins)
        if n.op == "call":
            program = n.params["of"].program
        elif n.op == "custom_vjp":
            program = n.params["rule"].fwd_program
        else:
            program = n.params["rule"].primal_program
        key = (id(program), tuple(ins))
        verdict = self.verdicts.get(key)
        if verdict is None:
            verdict = self.verdicts[key] = _Analysis(program, ins, self.verdicts).run()
        if verdict.culprit is not None:
            self.blame(f"{verdict.culprit} in {program.name}")
        return verdict.classes

    def _pullback(self, n: Node, ins: list[str]) -> list[str]:
        """A pullback J(x)ᵀ·c at primals x that do not depend on the parameters is linear
        in its cotangents c where its reverse pass is: each result is then a sum of linear
        images of the cotangents, of the class of their join (zeros where all are zeros,
        affine where a constant one meets a linear one)."""
        pullback = n.params["of"]
        count = len(pullback.program.params)
        cotangents = ins[count:]
        if any(c in (LINEAR, NONLINEAR) for c in ins[:count]):
            self.blame(f"a pullback{_at(n)} taken at a point that depends on them")
            return [NONLINEAR] * len(n.outputs)
        problem = reverse_pass_problem(pullback.program)
        if problem is not None:
            if LINEAR not in cotangents and NONLINEAR not in cotangents:
                return [CONST] * len(n.outputs)
            self.blame(f"a pullback{_at(n)} whose reverse pass is not linear: {problem}")
            return [NONLINEAR] * len(n.outputs)
        cls = ZERO
        for c in cotangents:
            cls = join(cls, c)
        if cls == NONLINEAR and NONLINEAR not in cotangents:
            self.blame(f"a pullback{_at(n)} of a constant cotangent added to one that depends "
                       "on them")
        return [cls] * len(n.outputs)


def linear_in(program: Program, params: list[int]) -> Verdict:
    """Whether `program`'s results are linear in the parameters at `params` (the other
    parameters held constant)."""
    chosen = set(params)
    return _Analysis(program, [LINEAR if i in chosen else CONST
                               for i in range(len(program.params))]).run()


def reverse_pass_problem(program: Program) -> str | None:
    """Why the reverse pass of `program` is not linear in its cotangents, or None: it is
    linear unless a `cg.custom_vjp` rule in it (or in a program it calls) has a `bwd` that
    is not linear in its cotangent."""
    for rule in custom_vjp_rules(program):
        problem = rule.bwd_problem()
        if problem is not None:
            return problem
    return None


def custom_vjp_rules(program: Program) -> list[Any]:
    """The rule objects of the `custom_vjp` nodes in `program` and in the programs its
    `call` and `vjp_call` nodes stand for, at any depth, each once."""
    rules: list[Any] = []
    seen: set[int] = set()
    pending = [program]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        for b in current.blocks:
            for n in b.nodes:
                if n.op == "custom_vjp" and all(n.params["rule"] is not r for r in rules):
                    rules.append(n.params["rule"])
                elif n.op in ("call", "vjp_call"):
                    pending.append(n.params["of"].program)
    return rules
