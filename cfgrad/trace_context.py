"""Where tracing stands, per thread: the traces being built and the user's source line.

This sits below both the tracer (trace.py) and the numpy namespace (numpy.py), so that
`cfgrad.numpy` can tell traced values from concrete ones, and find the trace to add
constants to, without importing the module that defines tracers: trace.py imports
numpy.py for the array methods of its tracers, and nothing registers itself on import.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .ir import SourceLoc

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def current_loc() -> SourceLoc | None:
    """The innermost stack frame outside cfgrad itself: the user's line."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not os.path.abspath(filename).startswith(_PACKAGE_DIR + os.sep):
            return SourceLoc(filename, frame.f_lineno, frame.f_code.co_name)
        frame = frame.f_back
    return None


def is_traced(x: Any) -> bool:
    """Whether `x` is a traced value (a tracer of some trace), by the attribute every
    tracer carries, which is how the primitives' `bind` tells them apart too."""
    return getattr(x, "_cfgrad_trace", None) is not None


class _TraceStack(threading.local):
    """The traces being built, innermost last, one stack per thread: two threads tracing
    at once (the first calls of one `grad(f)` from a thread pool) must not see each
    other's traces, and eager control flow in one thread must not lower into another's."""

    def __init__(self) -> None:
        self.traces: list[Any] = []


_STACK = _TraceStack()

# Held while anything is lowered or built from a lowering: a trace, an adjoint or JVP
# program, a custom rule (whose "inside my own rule" flag is state shared by all threads).
# Threads build one at a time and never see a half-built artifact; running programs takes
# no lock. Re-entrant, because building one artifact builds others (an adjoint lowers
# custom rules, a trace calls custom functions). User code traced under it must not wait
# for another thread's first call of a cfgrad transformation, which would wait for it.
LOWERING_LOCK = threading.RLock()


def current_trace() -> Any:
    """The innermost trace this thread is building (a `trace.Trace`), or None."""
    traces = _STACK.traces
    return traces[-1] if traces else None


def is_being_built(trace: Any) -> bool:
    """Whether `trace` is one this thread is building: an enclosing trace, when another
    is current (a transformation applied inside a function being transformed)."""
    return trace in _STACK.traces


@contextmanager
def tracing(trace: Any) -> Iterator[None]:
    """Make `trace` the current one, so cg.cond and friends called by user code (a custom
    JVP rule run by the JVP transform, say) lower into it."""
    _STACK.traces.append(trace)
    try:
        yield
    finally:
        _STACK.traces.pop()
