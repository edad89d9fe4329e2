"""cfgrad: reverse-mode automatic differentiation through real control flow."""

from typing import TYPE_CHECKING

from . import (
    checkpoint,
    debug,
    numpy,  # noqa: F401  (cg.numpy, the same module as cfgrad.numpy)
    optim,
    testing,
    tree_util,
)
from .anomaly import detect_anomaly
from .api import grad, jvp, lower, value_and_grad, vjp
from .convert import autograph
from .custom import custom_jvp, custom_vjp, stop_gradient
from .errors import (
    AnomalyError,
    ArgumentTypeError,
    ArgumentValueError,
    CfgradError,
    CompileError,
    CompileWarning,
    ConversionError,
    LoopLimitError,
    LoweringError,
    NonFiniteError,
    PathInstabilityError,
    ReplayMismatchError,
    RootWarning,
    ScalerStateError,
    TracerBoolError,
    VerifyError,
)
from .ir import Program
from .irparse import parse_program
from .jacobians import hessian, jacfwd, jacrev
from .jitted import jit
from .numerics import LossScaler, clip_by_global_norm, clip_by_value
from .numpy.core import Array
from .numpy.indexed import dynamic_slice, dynamic_update_slice
from .reverse import adjoint
from .root import custom_root
from .trace import cond, fori_loop, scan, switch, while_loop

__all__ = [
    "AnomalyError", "ArgumentTypeError", "ArgumentValueError", "Array", "CfgradError",
    "CompileError", "CompileWarning", "ConversionError",
    "LoopLimitError",
    "LossScaler", "LoweringError", "NonFiniteError", "PathInstabilityError", "Program",
    "ReplayMismatchError", "RootWarning", "ScalerStateError", "TracerBoolError", "VerifyError",
    "adjoint", "autograph", "checkpoint", "clip_by_global_norm", "clip_by_value", "cond",
    "custom_jvp", "custom_root", "custom_vjp", "debug", "detect_anomaly", "dynamic_slice",
    "dynamic_update_slice", "fori_loop", "grad", "hessian", "inspect", "jacfwd", "jacrev",
    "jit", "jvp", "lower", "optim", "parse_program", "scan", "stop_gradient", "switch", "testing",
    "tree_util", "value_and_grad", "vjp", "while_loop",
]

if TYPE_CHECKING:  # for type checkers; at run time `__getattr__` imports it on first use
    from .inspector import inspect

_VIEWS = ("inspect", "inspector")


def __getattr__(name: str) -> object:
    """`cg.inspect` and `cfgrad.inspector`, imported on first use: the views need rich, and
    `import cfgrad` (or `import cfgrad.dot`, the DOT export) does not."""
    if name not in _VIEWS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from .inspector import inspect  # also binds the submodule `inspector` here

    globals()["inspect"] = inspect  # later look-ups find it without this function
    return globals()[name]


def __dir__() -> list[str]:
    return sorted({*globals(), *_VIEWS})
