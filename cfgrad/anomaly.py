"""`cg.detect_anomaly()`: find the first operation that produced a NaN or Inf.

Under the context manager (or with `detect_anomaly=True` on `grad`, `value_and_grad` and
`vjp`), programs run with block functions that test every float result right after the
node that made it, in the forward pass and in the gradient pass alike; the first
non-finite one raises `cg.AnomalyError` naming the operation, the block, the user's
source line, the input values that produced it (the domain violation), the loop
iterations and the branches the run was in. Those checking functions are generated only
when first needed: with detection off, nothing is checked and nothing is paid.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager

_ACTIVE: contextvars.ContextVar[bool] = contextvars.ContextVar("cfgrad_detect_anomaly",
                                                               default=False)


@contextmanager
def detect_anomaly(enabled: bool = True) -> Iterator[None]:
    """Run every cfgrad program inside the `with` block with NaN/Inf checks."""
    token = _ACTIVE.set(enabled)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def anomaly_detection_enabled() -> bool:
    return _ACTIVE.get()
