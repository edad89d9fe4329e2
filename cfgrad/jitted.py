"""`cg.jit`: a function compiled to native code per input signature, as `jax.jit`.

`cg.jit(f)` traces `f` (its Python `if`/`while`/`for` converted, as every transformation
does) into a Program per input signature, the first time it is called with that
signature, and compiles the Program with Numba (`native.py`). Transformations inside
`f` are nodes of that Program, so `cg.jit(cg.grad(f))` and `cg.jit(cg.value_and_grad(f))`
compile the forward sweep with its control log and tapes, and the adjoint, into one
native function.

A Program the backend cannot compile runs in the interpreter instead, with a
`CompileWarning` giving the reason in one line (once per signature); with
`fallback=False` that is a `cg.CompileError`. Called inside another transformation's
trace, a jitted function is traced inline, as `jax.jit` is: put `cg.jit` outermost.

Numba takes seconds to compile. With `wait=False` a new signature's first call does not
wait for it (docs/jit.md, Compiling in the background): the calling thread traces the
Program and writes its source (what cannot be compiled is found there, at the first
call), a daemon thread compiles it, and calls run the interpreter until the machine code
is ready, then switch to it. The default, `wait=True`, compiles in the calling thread:
Numba's type inference swaps the process-wide `warnings` state (`catch_warnings`), which
is not thread-safe, so a compile in another thread can lose or misfile the warnings the
calling thread raises meanwhile.
"""

from __future__ import annotations

import re
import threading
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import nested
from . import tree as treelib
from .anomaly import anomaly_detection_enabled
from .api import argnums_tuple, lowered, static_positions, typed_key
from .caches import SIGNATURES_PER_FUNCTION, BoundedDict
from .convert import traced_as
from .errors import CompileError, CompileWarning, Unsupported
from .ir import Program
from .trace import lowering_epoch

COMPILED, COMPILING, INTERPRETED = "compiled", "compiling in the background", "interpreted"


@dataclass(frozen=True)
class CompileInfo:
    """How one signature of a jitted function runs: `backend` is what its next call runs,
    "numba" or "interpreter"; `state` why: `COMPILED`, `COMPILING` (the interpreter runs
    while a background thread compiles) or `INTERPRETED` (it cannot be compiled: `reason`
    says why). `compile_seconds` is the compilation's time (None until it is done),
    `from_disk_cache` whether Numba loaded the machine code from its cache instead of
    compiling, `reused` whether this process had compiled the same generated module
    already (another jitted function of the same program), `source` the generated Numba
    source (None when it runs in the interpreter for good)."""

    backend: str
    reason: str | None
    compile_seconds: float | None
    from_disk_cache: bool
    source: str | None
    reused: bool = False
    state: str = COMPILED


class _Interpreted:
    """A signature that runs in the interpreter: the fallback's runner."""

    def __init__(self, entry: Any, reason: str):
        self.entry = entry
        self.reason = reason

    def __call__(self, leaves: list[Any]) -> list[Any]:
        return self.entry.run(leaves, check=anomaly_detection_enabled())[0]


class _Refused:
    """A signature whose background compile failed under `fallback=False`: every call
    raises the `CompileError` (as every call of a refused signature does when compiling
    in the calling thread)."""

    def __init__(self, message: str):
        self.message = message

    def __call__(self, leaves: list[Any]) -> list[Any]:
        raise CompileError(self.message)


class _Building:
    """A signature whose machine code a daemon thread is compiling: until it is ready,
    calls run the interpreter (the values agree with the compiled ones to rounding:
    docs/jit.md). The first call after the thread is done puts the outcome in the
    `Jitted`'s caches (`Jitted._settle`), in the calling thread, so that a compile that
    failed warns there (or raises `CompileError` under `fallback=False`), once.

    The thread is a daemon: a process exits without waiting for a compile, which then
    leaves nothing half-written (the source file and Numba's cache files are each
    written to a temporary name and renamed)."""

    def __init__(self, jitted: Jitted, entry: Any, native: Any, args: list[Any]):
        self.jitted = jitted
        self.entry = entry
        self.native = native
        self.reason: str | None = None  # why the compile failed, once it has
        self.done = threading.Event()
        threading.Thread(target=self._compile, args=(args,), daemon=True,
                         name=f"cfgrad.{jitted.__name__}").start()

    def _compile(self, args: list[Any]) -> None:
        try:
            self.native.compile(args)
        except Exception as e:  # Numba's errors (typing, lowering, its own internal ones)
            self.reason = _numba_reason(e)
        finally:
            self.done.set()

    def __call__(self, leaves: list[Any]) -> list[Any]:
        if self.done.is_set():
            return self.jitted._settle(self, stacklevel=5)(leaves)
        return self.entry.run(leaves, check=anomaly_detection_enabled())[0]


class Jitted:
    """The callable `cg.jit` returns; `lower(*args)` gives the Program a signature
    compiles, `info(*args)` how it runs (`CompileInfo`, compiling it if need be)."""

    def __init__(self, fun: Callable, static_argnums: tuple[int, ...], fallback: bool,
                 autograph: bool, wait: bool):
        self.fun = fun
        self._traced = traced_as(fun, autograph, "cfgrad.jit")
        self._statics = static_argnums
        self.fallback = fallback
        self.wait = wait
        # held while a signature's runner is made or replaced: one compile per signature
        # however many threads call at once
        self._lock = threading.Lock()
        # id(Lowering) -> (Lowering, runner), as many as api keeps lowerings of a function
        self._runners: dict[int, tuple[Any, Any]] = BoundedDict(SIGNATURES_PER_FUNCTION)
        # calls whose arguments are all leaves, by their leaf keys (api's cache key without
        # flattening): (Lowering, runner, the builder of its output structure)
        self._by_leaves: dict[tuple, tuple[Any, Any]] = BoundedDict(SIGNATURES_PER_FUNCTION)
        self.__name__ = f"jit({getattr(fun, '__name__', 'f')})"
        self.__doc__ = getattr(fun, "__doc__", None)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if nested.is_tracing():  # inside another trace: traced inline
            return self._traced(*args, **kwargs)
        if anomaly_detection_enabled():  # under cg.detect_anomaly(): the checking interpreter
            entry, leaves = self._lowered(args, kwargs)
            outs = entry.run(leaves, check=True)[0]
            return treelib.unflatten(entry.program.out_tree, outs)
        if not kwargs and not self._statics:  # the common call: numbers and arrays
            try:
                entry, runner, build = self._by_leaves[tuple(map(typed_key, args))]
            except (KeyError, TypeError):
                pass
            else:
                if entry.epoch == lowering_epoch():
                    try:  # (inline: a call here would cost every call a Python frame)
                        return build(runner(args))
                    except np.linalg.LinAlgError:
                        return build(_rerun(entry, runner, args))
        entry, runner, leaves = self._prepare(args, kwargs)
        build = treelib.builder(entry.program.out_tree)
        if not kwargs and not self._statics and len(leaves) == len(args) and all(
                x is y for x, y in zip(leaves, args)):  # every argument is a leaf
            self._by_leaves[tuple(map(typed_key, args))] = (entry, runner, build)
        try:
            return build(runner(leaves))
        except np.linalg.LinAlgError:
            return build(_rerun(entry, runner, leaves))

    def lower(self, *args: Any, **kwargs: Any) -> Program:
        return self._prepare(args, kwargs)[0].program

    def info(self, *args: Any, **kwargs: Any) -> CompileInfo:
        """How the signature of `args` runs, compiling it if need be: waits for a
        background compile to finish, so the answer is final (a failure warns here, or
        raises `CompileError` under `fallback=False`). `state` answers without waiting."""
        entry, runner, leaves = self._prepare(args, kwargs)
        if isinstance(runner, _Building):
            runner.done.wait()
            runner = self._settle(runner, stacklevel=4)
        if isinstance(runner, _Refused):
            runner([])
        if isinstance(runner, _Interpreted):
            return CompileInfo("interpreter", runner.reason, None, False, None,
                               state=INTERPRETED)
        runner.compile(runner.arguments(leaves))
        return CompileInfo("numba", None, runner.compile_seconds, runner.from_disk_cache,
                           runner.source, runner.reused)

    def state(self, *args: Any, **kwargs: Any) -> str:
        """`COMPILED`, `COMPILING` (in the background: calls run the interpreter
        meanwhile) or `INTERPRETED` for the signature of `args`, at once (a new signature
        starts compiling, as its first call would)."""
        runner = self._prepare(args, kwargs)[1]
        if isinstance(runner, _Building):
            if not runner.done.is_set():
                return COMPILING
            runner = self._settle(runner, stacklevel=4)
        if isinstance(runner, _Refused):
            runner([])
        return INTERPRETED if isinstance(runner, _Interpreted) else COMPILED

    def _lowered(self, args: tuple, kwargs: dict[str, Any]) -> tuple[Any, list[Any]]:
        name = getattr(self.fun, "__name__", "f")
        statics = static_positions(self._statics, len(args), (), "cfgrad.jit", name)
        return lowered(self._traced, args, statics, kwargs=kwargs)

    def _prepare(self, args: tuple, kwargs: dict[str, Any]) -> tuple[Any, Any, list[Any]]:
        entry, leaves = self._lowered(args, kwargs)
        found = self._runners.get(id(entry))
        if found is None or found[0] is not entry:
            with self._lock:  # a second thread finds the first one's runner
                found = self._runners.get(id(entry))
                if found is None or found[0] is not entry:
                    found = self._runners[id(entry)] = (entry, self._runner(entry, leaves))
        return entry, found[1], leaves

    def _runner(self, entry: Any, leaves: list[Any]) -> Any:
        # Imported here, on the first compile, not with the package: importing Numba and
        # loading the kernels takes about half a second, which every `import cfgrad` (and
        # every process a user starts) would otherwise pay whether it jits or not.
        from .native import NativeProgram

        try:  # the source is written here, so what cannot be compiled shows at once
            native = NativeProgram(entry.compiled, nested.current_run_sink)
            args = native.arguments(leaves)
            if not self.wait:
                return _Building(self, entry, native, args)
            native.prepare(args)
            return native
        except Unsupported as e:
            reason = e.where_and_why()
        except Exception as e:  # Numba's errors (typing, lowering, its own internal ones)
            reason = _numba_reason(e)
        return self._fallen_back(entry, reason, stacklevel=5)

    def _fallen_back(self, entry: Any, reason: str, stacklevel: int) -> _Interpreted:
        """The interpreter's runner for a signature that cannot be compiled, with the
        warning (or the `CompileError` under `fallback=False`) naming `reason`;
        `stacklevel` is the user's call's, for the warning."""
        name = getattr(self.fun, "__name__", "f")
        if not self.fallback:
            raise CompileError(f"cfgrad.jit of {name}: cannot compile: {reason}")
        warnings.warn(f"cfgrad.jit of {name} runs in the interpreter: {reason}",
                      CompileWarning, stacklevel=stacklevel)
        return _Interpreted(entry, reason)

    def _settle(self, building: _Building, stacklevel: int) -> Any:
        """The runner that replaces `building` once its compile is done (the compiled
        program, or the interpreter's with the warning: `stacklevel` is the user's call),
        put in place of it in the caches, so that later calls go straight to it. Called
        in a calling thread."""
        with self._lock:
            found = self._runners.get(id(building.entry))
            if found is not None and found[1] is not building:  # another thread settled it
                runner = found[1]
            elif building.reason is None:
                runner = building.native
            else:
                try:
                    runner = self._fallen_back(building.entry, building.reason, stacklevel)
                except CompileError as e:
                    runner = _Refused(str(e))
            self._runners[id(building.entry)] = (building.entry, runner)
            # (also where another thread settled it: a call may have put `building` in the
            # fast path's table after that thread replaced it there)
            for key, (entry, was, build) in list(self._by_leaves.items()):
                if was is building:
                    self._by_leaves[key] = (entry, runner, build)
        if isinstance(runner, _Refused):
            runner([])  # raises, here and on every later call
        return runner


def _rerun(entry: Any, runner: Any, leaves: list[Any]) -> list[Any]:
    """The interpreter's outputs, after compiled code raised numpy's `LinAlgError` (else
    that error again). Numba's np.linalg raises it where numpy's answers (a matrix with an
    inf or a NaN, which numpy passes to LAPACK; a Cholesky factor cfgrad makes NaN), or
    says it in other words (a singular matrix): the program is pure, so running it again
    in the interpreter gives numpy's answer or numpy's error."""
    if isinstance(runner, _Interpreted):
        raise
    return entry.run(leaves)[0]


def _numba_reason(error: Exception) -> str:
    """The fallback's reason for an error Numba raised while compiling."""
    return "Numba could not compile it: " + _first_cause(str(error))


def _first_cause(message: str) -> str:
    """The line of a Numba error that says what failed (its messages start with the
    pipeline stage and carry terminal colour codes)."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in message.splitlines()]
    causes = [line for line in lines if line and not line.startswith(("Failed in", "During"))]
    return causes[0] if causes else lines[0]


def jit(fun: Callable, static_argnums: int | Sequence[int] = (), *, fallback: bool = True,
        autograph: bool = True, wait: bool = True) -> Jitted:
    """`fun` compiled to native code for each input signature, like `jax.jit`.

    `static_argnums` are arguments passed as they are (hashable Python values that key
    the compiled versions, baked into them). What the backend cannot compile runs in
    the interpreter with a `CompileWarning` naming why, or raises `cg.CompileError` with
    `fallback=False`. `wait=False` compiles a new signature in a background thread while
    its calls run the interpreter (module docstring); `wait=True` makes its first call
    compile. `autograph` as in `cg.grad`."""
    return Jitted(fun, argnums_tuple(static_argnums, "cfgrad.jit", "static_argnums"),
                  fallback, autograph, wait)
