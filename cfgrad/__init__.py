"""cfgrad: reverse-mode automatic differentiation through real control flow."""

from . import numpy  # noqa: F401  (registers the numpy namespace for tracers)
from .errors import (
    AnomalyError,
    CfgradError,
    LoopLimitError,
    LoweringError,
    PathInstabilityError,
    ReplayMismatchError,
    TracerBoolError,
    VerifyError,
)
from . import checkpoint
from .api import grad, jvp, value_and_grad, vjp
from .ir import Program
from .trace import cond, fori_loop, lower, switch, while_loop

__all__ = [
    "AnomalyError", "CfgradError", "LoopLimitError", "LoweringError", "PathInstabilityError",
    "Program", "ReplayMismatchError", "TracerBoolError", "VerifyError",
    "checkpoint", "cond", "fori_loop", "grad", "jvp", "lower", "switch", "value_and_grad",
    "vjp", "while_loop",
]
