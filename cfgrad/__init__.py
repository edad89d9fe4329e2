"""cfgrad: reverse-mode automatic differentiation through real control flow."""

from . import (
    checkpoint,
    numpy,  # noqa: F401  (registers the numpy namespace for tracers)
    testing,
)
from .anomaly import detect_anomaly
from .api import grad, jvp, value_and_grad, vjp
from .custom import custom_jvp, custom_vjp, stop_gradient
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
from .inspector import inspect
from .ir import Program
from .trace import cond, fori_loop, lower, switch, while_loop

__all__ = [
    "AnomalyError", "ArgumentTypeError", "ArgumentValueError", "CfgradError", "LoopLimitError",
    "LoweringError", "PathInstabilityError", "Program", "ReplayMismatchError",
    "TracerBoolError", "VerifyError",
    "checkpoint", "cond", "custom_jvp", "custom_vjp", "detect_anomaly", "fori_loop", "grad",
    "jvp", "lower", "stop_gradient", "switch", "testing", "value_and_grad", "vjp",
    "while_loop",
]
