"""Every error cfgrad raises, and its one warning, in one place.

Each class derives from `CfgradError` and, where a builtin exception already names the
situation (a `TypeError` for misuse of a traced value), from that builtin too, so callers
can catch either the cfgrad-specific or the conventional type.
"""

from __future__ import annotations

import linecache
from typing import Any


class CfgradError(Exception):
    """Base class of all cfgrad errors."""


class TracerBoolError(CfgradError, TypeError):
    """Python control flow (`if`, `while`, `bool()`, `int()`) was applied to a traced value."""


class LoweringError(CfgradError):
    """A traced function cannot be lowered: mismatched branches, carries, predicates, …"""


class VerifyError(CfgradError):
    """A Program breaks an IR invariant; the message names the block and node."""


class LoopLimitError(CfgradError):
    """A `while_loop` ran past its `max_iters`."""


class ReplayMismatchError(CfgradError):
    """Recomputing a loop iteration took a different path than the logged forward run."""


class AnomalyError(CfgradError, FloatingPointError):
    """A NaN or Inf appeared under `cg.detect_anomaly()`."""


class PathInstabilityError(CfgradError):
    """Finite differences straddle a branch or trip-count change, so they cannot be trusted."""


class ParseError(CfgradError, ValueError):
    """The textual IR could not be read back."""


class ArgumentTypeError(CfgradError, TypeError):
    """A transformation got inputs or outputs it cannot handle: grad of a non-scalar or
    non-float output, grad with respect to an integer input, a cotangent or tangent of
    the wrong structure or shape."""


def require_callable(value: object, caller: str, what: str) -> None:
    """A function argument that is not callable is an ArgumentTypeError naming it where it
    is passed (as JAX's "Expected a callable value"), not Python's "'float' object is not
    callable" from deep inside the first call."""
    if not callable(value):
        shown = repr(value)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise ArgumentTypeError(f"{caller}: {what} must be a function (a callable), got "
                                f"{type(value).__name__} {shown}")


class ArgumentValueError(CfgradError, ValueError):
    """An invalid parameter: a checkpoint strategy's `snapshots < 1` or `k < 1`, a
    negative `max_iters`, an unsupported `check_grads` order."""


class NonFiniteError(CfgradError, FloatingPointError):
    """A quantity that must be finite is not: the global norm of a tree given to
    `clip_by_global_norm(..., error_if_nonfinite=True)`."""


class ScalerStateError(CfgradError, RuntimeError):
    """`LossScaler.update()` was called without a `step()` since the previous update, so
    there is no inf/nan check to base the new scale on."""


class ConversionError(LoweringError):
    """Python control flow on traced values that the conversion cannot turn into regions:
    a variable assigned on one branch of a traced `if` only, a loop variable whose shape
    or dtype changes, a `break` out of a loop over a Python list under a traced condition,
    a `try` around traced control flow, a recursion that ends on a traced condition. The
    message names the construct and the line. No `except` clause of a converted function
    catches it (each lets it pass first), so it is never traded for a traced handler."""


class CompileError(CfgradError):
    """`cg.jit(..., fallback=False)` met a program the compiled backend cannot run: the
    message names what (a primitive, a checkpoint strategy, anomaly detection)."""


class CompileWarning(UserWarning):
    """`cg.jit` compiles or runs a function other than the way it would like to: it runs
    in the interpreter (the message says why), or its compiled code cannot be kept in the
    cache directory (the message names the directory and what to do)."""


class RootWarning(UserWarning):
    """`cg.custom_root`: the solver's result is not a root of `f` (the Newton step from it,
    `tangent_solve(g, f(x))`, is not small next to the solution), so the implicit
    function theorem gives wrong derivatives there. A warning, not a CfgradError: the
    value is the solver's, and may be what was wanted."""


# Internal signals, never seen by a user: each is caught where it is raised for and turned
# into a typed error or a fallback there.


class Unsupported(Exception):
    """No compiled form for this node or program (native.py, the derivative table's
    compiled sources); the message says why, in one line. `cg.jit` catches it and runs the
    interpreter with a CompileWarning, or raises CompileError with `fallback=False`, saying
    `where_and_why()`: `loc` is the source line of the user's code that holds the node
    (an ir.SourceLoc), `rewrite` how to write it so that it compiles, where there is a way."""

    def __init__(self, reason: str, loc: Any = None, rewrite: str = ""):
        super().__init__(reason if loc is None else f"{reason} (at {loc})")
        self.reason = reason
        self.loc = loc
        self.rewrite = rewrite

    def where_and_why(self) -> str:
        r"""`f.py:12 \`y = cnp.sort(z)\`: <reason>; rewrite: <how>`: the line (and its code,
        where the file can be read), the reason, and the rewrite where there is one."""
        text = self.reason
        if self.loc is not None:
            code = linecache.getline(self.loc.file, self.loc.line).strip()
            text = f"{self.loc} `{code}`: {text}" if code else f"{self.loc}: {text}"
        return f"{text}; rewrite: {self.rewrite}" if self.rewrite else text


class Unconvertible(Exception):
    """A function cannot be converted from source (convert/rewrite.py); the message says
    why. The function then runs as Python, unconverted."""

