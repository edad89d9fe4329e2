"""cfgrad: reverse-mode automatic differentiation through real control flow."""

from . import (
    checkpoint,
    numpy,  # noqa: F401  (registers the numpy namespace for tracers)
    testing,
)
from .api import grad, jvp, value_and_grad, vjp
from .errors import (
    AnomalyError,
    ArgumentTypeError,
    ArgumentValueError,
    CfgradError,
    LoopLimitError,
    LoweringError,
    PathInstabilityError,
    ReplayMismatchError,
    TracerBoolError,
    VerifyError,
)
from .ir import Program
from .trace import cond, fori_loop, lower, switch, while_loop

__all__ = [
    "AnomalyError", "ArgumentTypeError", "ArgumentValueError", "CfgradError", "LoopLimitError",
    "LoweringError", "PathInstabilityError", "Program", "ReplayMismatchError",
    "TracerBoolError", "VerifyError",
    "checkpoint", "cond", "fori_loop", "grad", "jvp", "lower", "switch", "testing",
    "value_and_grad", "vjp", "while_loop",
]
