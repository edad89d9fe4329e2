"""Where tracing stands, per thread: the traces being built and the user's source line.

This sits below both the tracer (trace.py) and the numpy namespace (numpy.py), so that
`cfgrad.numpy` can tell traced values from concrete ones, and find the trace to add
constants to, without importing the module that defines tracers: trace.py imports
numpy.py for the array methods of its tracers, and nothing registers itself on import.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from .ir import SourceLoc

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


@functools.lru_cache(maxsize=4096)  # (asked for every frame of every node traced)
def in_cfgrad(filename: str) -> bool:
    """Whether a code object's file is one of cfgrad's own modules."""
    return os.path.abspath(filename).startswith(_PACKAGE_DIR + os.sep)


def user_frame() -> FrameType | None:
    """The innermost stack frame outside cfgrad itself: the user's code running now."""
    frame = sys._getframe(1)
    while frame is not None and in_cfgrad(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def frame_loc(frame: FrameType) -> SourceLoc:
    return SourceLoc(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)


def current_loc() -> SourceLoc | None:
    """The user's line: that of the innermost stack frame outside cfgrad itself."""
    frame = user_frame()
    return frame_loc(frame) if frame is not None else None


def definition(fun: Any) -> SourceLoc | None:
    """Where the user defined `fun`: its `def` line (that of its first decorator), or None
    for one of cfgrad's own functions or a callable without Python code."""
    code = getattr(inspect.unwrap(fun), "__code__", None) if callable(fun) else None
    if code is None or in_cfgrad(code.co_filename):
        return None
    return SourceLoc(code.co_filename, code.co_firstlineno, code.co_name)


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
