"""`cg.custom_root`: the root a solver finds, differentiated by the implicit function
theorem as `jax.lax.custom_root`, with its arguments checked.

At the root x* of f(x, θ) = 0 (θ: the traced values `f` closes over), dx* = -(∂f/∂x)⁻¹
(∂f/∂θ) dθ: `tangent_solve(g, y)` solves the linear system g(v) = y, where g is ∂f/∂x at
x*, and the solver's iterations are never differentiated. Differentiating them would cost
a reverse pass through every iteration, and for a solver that reaches its result only
through comparisons (bisection) it would give exactly zero.

Built from pieces that already compose: the solver runs as ordinary traced code under
`stop_gradient`, and its result passes through a `custom_jvp` identity whose rule is the
theorem (reverse mode transposes that rule, so `tangent_solve` must be linear in `y`,
which is checked on its program, linearity.py). `f`, with what it closes over as explicit
parameters, is a sub-program whose JVP program gives both partial derivatives, so the rule
and all its derivatives are nodes of the same kinds as any nested transformation.

The theorem gives the derivative at a root, so a solver that stops early (or returns its
initial guess) gives wrong derivatives without a sign. Each run therefore measures the
Newton step from the solver's result, tangent_solve(g, f(x*)), the distance to the root
to first order, and warns (`RootWarning`) where it exceeds ROOT_TOLERANCE (or √eps of a
lower precision) times the solution's scale, max(|x*|, |initial guess|, 1): relative to
the solution where it is large, absolute near 0, where a solver stopping at |f| < 1e-10
has converged though a root of size 1e-9 is not found to 1e-4 of its size. A converged
solver's step is at the rounding level, orders below that. Outside a trace the step is
computed from f's and tangent_solve's values at x* and the JVP program of f's program
(traced once per call before the solve, to check f's residual), so the eager check
traces nothing more.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from . import debug
from . import tree as treelib
from .custom import custom_jvp, stop_gradient
from .errors import ArgumentTypeError, RootWarning, require_callable
from .ir import Program, SourceLoc, TensorType, ir_dtype, type_of
from .linearity import linear_in
from .nested import Call, is_tracing
from .primitives import bind
from .trace import Tracer, trace_nested, trace_program
from .trace_context import current_loc

# The Newton step from a root, relative to the solution's scale, above which the solver's
# result is taken for no root (at lower precisions √eps of the dtype, if larger).
ROOT_TOLERANCE = 1e-4


def _leaf_type(x: Any) -> TensorType | None:
    """The type of a leaf, or None for something that is no number (a string, an object)."""
    if isinstance(x, Tracer):
        return x.value.type
    dtype = np.asarray(x).dtype
    return type_of(x) if ir_dtype(dtype) is not None else None


def _is_weak(x: Any) -> bool:
    """A Python float or complex (not numpy's float64, a subclass): any float dtype of a
    solver's result matches it."""
    return type(x) in (float, complex)


def _shown(x: Any) -> str:
    """A leaf (or a TensorType) as its type, `f64[2]`, or for a leaf that is no number as
    its Python type and value."""
    t = x if isinstance(x, TensorType) else _leaf_type(x)
    return f"{type(x).__name__} {x!r:.40}" if t is None else str(t)


def _describe(tree: treelib.TreeDef, leaves: list[Any]) -> str:
    """`f64[2]` for one array, else the structure and its leaves' types."""
    shown = [_shown(x) for x in leaves]
    if tree == treelib.flatten(0.0)[1]:
        return shown[0]
    return f"{tree.describe()} with leaves [{', '.join(shown)}]"


class _Arguments:
    """custom_root's arguments, checked: every mistake is an ArgumentTypeError that names
    the argument, what it got and what it needs, before anything is traced with it."""

    def __init__(self, f: Callable, initial_guess: Any, solve: Callable,
                 tangent_solve: Callable, has_aux: bool):
        for what, fn in (("f", f), ("solve", solve), ("tangent_solve", tangent_solve)):
            require_callable(fn, "custom_root", f"`{what}`")
        self.f, self.tangent_solve, self.has_aux = f, tangent_solve, has_aux
        self.name = getattr(f, "__name__", "f")
        self.guess_leaves, self.tree = treelib.flatten(initial_guess)
        self.types = [_leaf_type(x) for x in self.guess_leaves]
        if not self.guess_leaves or any(t is None or not t.is_float for t in self.types):
            raise ArgumentTypeError(
                f"custom_root: `initial_guess` must be a float array, scalar or a pytree of "
                f"them (the root's structure, shapes and dtypes), got "
                f"{_describe(self.tree, self.guess_leaves)}"
                + ("; write 1.0 for 1" if any(t is not None and t.dtype.kind in "iub"
                                              for t in self.types) else ""))

    def split(self, solved: Any) -> tuple[Any, Any]:
        """(solution, aux) from what `solve` returned."""
        if not self.has_aux:
            return solved, None
        if not (isinstance(solved, tuple | list) and len(solved) == 2):
            leaves, tree = treelib.flatten(solved)
            raise ArgumentTypeError(
                f"custom_root({self.name}, has_aux=True): `solve` must return a pair "
                f"(solution, aux), got {_describe(tree, leaves)}")
        return solved[0], solved[1]

    def residual(self, x_leaves: list[Any]) -> tuple[Program, list[Tracer]]:
        """`f` as a program of x's leaves (then of the values of the trace being built it
        closes over, returned too), its residual checked: one equation per unknown."""
        def f_flat(*xs: Any) -> Any:
            return self.f(treelib.unflatten(self.tree, list(xs)))

        name = f"custom_root({self.name})"
        program, theta = (trace_nested(f_flat, x_leaves, name, home=self.f) if is_tracing()
                          else (trace_program(f_flat, tuple(x_leaves), name=name, home=self.f),
                                []))
        got = [v.type for v in program.outputs]
        want = [_leaf_type(x) for x in x_leaves]
        if program.out_tree != self.tree or got != want:
            raise ArgumentTypeError(
                f"custom_root({self.name}): `f` must return a residual of its argument's "
                f"structure, shapes and dtypes ({_describe(self.tree, want)}: a root solves "
                f"f(x) = 0 with as many equations as unknowns), but it returns "
                f"{_describe(program.out_tree, got)}")
        return program, theta

    def check_like_guess(self, what: str, value: Any) -> list[Any]:
        """The leaves of `value`, which must have the structure, shapes and dtypes of the
        initial guess (a Python float there matches any float dtype)."""
        leaves, tree = treelib.flatten(value)
        types = [_leaf_type(x) for x in leaves]
        if tree != self.tree or any(
                t is None or t.shape != want.shape or not t.is_float
                or t.dtype != want.dtype and not _is_weak(guess)
                for t, want, guess in zip(types, self.types, self.guess_leaves)):
            raise ArgumentTypeError(
                f"custom_root({self.name}): {what} is {_describe(tree, leaves)}, but it "
                f"must have the structure, shapes and dtypes of initial_guess: "
                f"{_describe(self.tree, self.guess_leaves)}")
        return leaves


class _Residual:
    """`f` as a program (its parameters: x's leaves, then the values θ it closes over in
    the trace being built) with its partial derivatives, and `tangent_solve` with g = ∂f/∂x."""

    def __init__(self, args: _Arguments, program: Program, theta: list[Any]):
        self.args = args
        self.program, self.theta = program, theta
        self.residual = Call(program)

    def partial_jvp(self, x: list[Any], theta: tuple, dx: list[Any],
                    dtheta: list[Any]) -> Any:
        """∂f/∂x · dx + ∂f/∂θ · dθ at (x, θ), in f's output structure."""
        tangents = self.residual.jvp_call([*x, *theta], [*dx, *dtheta])
        return treelib.unflatten(self.program.out_tree, list(tangents))

    def solve_linear(self, x: list[Any], theta: tuple, y: Any) -> Any:
        """`tangent_solve(g, y)` with g = ∂f/∂x at (x, θ), its result checked."""
        dx = self.args.tangent_solve(
            lambda v: self.partial_jvp(x, theta, treelib.flatten(v)[0], [None] * len(theta)),
            y)
        self.args.check_like_guess("the result of `tangent_solve`", dx)
        return dx


class _AtRoot(_Residual):
    """What custom_root builds at the solver's result x* in the trace being built: `f` as
    a sub-program, its partial derivatives, and `tangent_solve` traced as a function of y,
    checked for linearity."""

    def __init__(self, args: _Arguments, x_leaves: list[Any]):
        super().__init__(args, *args.residual(x_leaves))
        self.x_leaves = x_leaves
        self.n = len(x_leaves)
        self.linear_solve = self._traced_tangent_solve()

    def _traced_tangent_solve(self) -> Call:
        """`tangent_solve` at the root as a program of y (then what it closes over), which
        must be linear in y: reverse mode transposes it."""
        tree = self.args.tree

        def solve_flat(*ys: Any) -> list[Any]:
            v = self.solve_linear(self.x_leaves, tuple(self.theta),
                                  treelib.unflatten(tree, list(ys)))
            return treelib.flatten(v)[0]

        program, self.solve_captured = trace_nested(
            solve_flat, self.x_leaves, f"custom_root({self.args.name}).tangent_solve",
            home=self.args.tangent_solve)
        verdict = linear_in(program, list(range(self.n)))
        if not verdict.linear:
            raise ArgumentTypeError(
                f"custom_root({self.args.name}): `tangent_solve(g, y)` must be linear in y "
                f"(it solves the linear system g(v) = y, and reverse mode transposes it), but "
                f"its result depends on y through {verdict.culprit}; solve with y and g only "
                "by linear operations, with no constant term: y / g(1.0) for a scalar root; "
                "a fixed number of Richardson steps v + w * (y - g(v)) from v = 0, or of "
                "Jacobi sweeps, which divide by g's diagonal; cnp.linalg.solve of g's "
                "matrix, whose columns are g of the unit vectors")
        return Call(program)

    def newton_step(self) -> list[Any]:
        """tangent_solve(g, f(x*)): the distance from x* to the root, to first order."""
        r = bind("call", *self.x_leaves, *self.theta, of=self.residual)
        return list(bind("call", *r, *self.solve_captured, of=self.linear_solve))


class _Where(NamedTuple):
    """Which custom_root call: its function's name and the user's line that made it."""

    name: str
    loc: SourceLoc | None


def _warn_if_no_root(where: _Where, step: list[Any], x: list[Any], guess: list[Any]) -> None:
    """The RootWarning, where the Newton step from the solver's result is not small; at
    the line of the custom_root call, with a text of its own so that Python's filters
    show it once per line, not once per run or loop iteration."""
    def largest(leaves: list[Any]) -> float:
        return max((float(np.max(np.abs(a), initial=0.0)) for a in leaves), default=0.0)

    eps = max(np.finfo(np.asarray(a).dtype).eps for a in x)
    tolerance = max(ROOT_TOLERANCE, float(np.sqrt(eps)))
    scale = max(largest(x), largest(guess), 1.0)
    size = largest(step)
    if np.isfinite(size) and size <= tolerance * scale:
        return
    loc = where.loc
    warnings.warn_explicit(
        f"cg.custom_root({where.name}): the solver's result is not a root of f: the Newton step "
        f"from it, tangent_solve(g, f(x)), is larger than {tolerance:g} times the "
        "solution's scale, max(|x|, |initial guess|, 1) (or not finite), so the implicit "
        "function theorem, which holds at a root, "
        "gives wrong derivatives; make `solve` converge (more iterations, a tighter "
        "tolerance) or check f and the initial guess",
        RootWarning, loc.file if loc else "<cfgrad>", loc.line if loc else 0)


def _eager_newton_step(args: _Arguments, program: Program, x: list[np.ndarray]) -> list[Any]:
    """tangent_solve(g, f(x*)) outside a trace, where f and tangent_solve are functions of
    arrays: f and tangent_solve called on x*'s values, g = ∂f/∂x the JVP program of f's
    program (traced before the solve, its closed-over values constants of this call), so
    no program is traced for the check and tangent_solve is not traced at all (nothing is
    differentiated, so its linearity does not matter here)."""
    at = _Residual(args, program, [])
    x = [v.astype(p.type.dtype, copy=False) for v, p in zip(x, program.params)]
    r = args.f(treelib.unflatten(args.tree, x))
    return treelib.flatten(at.solve_linear(x, (), r))[0]


def custom_root(f: Callable, initial_guess: Any, solve: Callable, tangent_solve: Callable,
                has_aux: bool = False) -> Any:
    """A root of `f` found by `solve(f, initial_guess)`, differentiated by the implicit
    function theorem, as `jax.lax.custom_root` (see the module's docstring)."""
    args = _Arguments(f, initial_guess, solve, tangent_solve, has_aux)
    program, _ = args.residual([np.zeros(t.shape, t.dtype)
                                for t in args.types])  # checked before solve uses f
    solved = solve(f, initial_guess)
    solution, aux = args.split(solved)
    x_leaves = args.check_like_guess("the solution `solve` returned", solution)
    where = _Where(args.name, current_loc())
    if not is_tracing():  # nothing to differentiate: only check the result
        x = [np.asarray(v) for v in x_leaves]
        _warn_if_no_root(where, _eager_newton_step(args, program, x), x, args.guess_leaves)
        return solved
    x_leaves = treelib.flatten(stop_gradient(solution))[0]
    at = _AtRoot(args, x_leaves)
    debug.callback(lambda step, x, guess: _warn_if_no_root(where, step, x, guess),
                   at.newton_step(), x_leaves, args.guess_leaves)
    n = at.n

    def identity(x: Any, theta: tuple) -> Any:
        return x

    identity.__name__ = f"custom_root({args.name})"
    root = custom_jvp(identity)

    @root.defjvp
    def theorem(primals: tuple, tangents: tuple) -> tuple:
        """x ↦ x, with the theorem as its JVP rule. Inside the rule the root is this
        function again, so a derivative of the rule, where the root moves with θ, uses the
        theorem once more: every order of derivative of the root comes from the theorem,
        none from the iterations."""
        x, theta = primals
        x = root(x, theta)
        xs = treelib.flatten(x)[0]
        rhs = at.partial_jvp(xs, theta, [None] * n, list(tangents[1]))
        rhs = treelib.tree_map(lambda r: -r, rhs)
        return x, at.solve_linear(xs, theta, rhs)

    found = root(treelib.unflatten(args.tree, x_leaves), tuple(at.theta))
    return (found, stop_gradient(aux)) if has_aux else found
