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
"""

from __future__ import annotations

import re
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


@dataclass(frozen=True)
class CompileInfo:
    """How one signature of a jitted function runs: `backend` is "numba" or
    "interpreter" (then `reason` says why), `compile_seconds` the compilation's time
    (None for the interpreter), `from_disk_cache` whether Numba loaded the machine code
    from its cache instead of compiling, `reused` whether this process had compiled the
    same generated module already (another jitted function of the same program), `source`
    the generated Numba source."""

    backend: str
    reason: str | None
    compile_seconds: float | None
    from_disk_cache: bool
    source: str | None
    reused: bool = False


class _Interpreted:
    """A signature that runs in the interpreter: the fallback's runner."""

    def __init__(self, entry: Any, reason: str):
        self.entry = entry
        self.reason = reason

    def __call__(self, leaves: list[Any]) -> list[Any]:
        return self.entry.run(leaves, check=anomaly_detection_enabled())[0]


class Jitted:
    """The callable `cg.jit` returns; `lower(*args)` gives the Program a signature
    compiles, `info(*args)` how it runs (`CompileInfo`, compiling it if need be)."""

    def __init__(self, fun: Callable, static_argnums: tuple[int, ...], fallback: bool,
                 autograph: bool):
        self.fun = fun
        self._traced = traced_as(fun, autograph, "cfgrad.jit")
        self._statics = static_argnums
        self.fallback = fallback
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
        entry, runner, leaves = self._prepare(args, kwargs)
        if isinstance(runner, _Interpreted):
            return CompileInfo("interpreter", runner.reason, None, False, None)
        runner.compile(runner.arguments(leaves))
        return CompileInfo("numba", None, runner.compile_seconds, runner.from_disk_cache,
                           runner.source, runner.reused)

    def _lowered(self, args: tuple, kwargs: dict[str, Any]) -> tuple[Any, list[Any]]:
        name = getattr(self.fun, "__name__", "f")
        statics = static_positions(self._statics, len(args), (), "cfgrad.jit", name)
        return lowered(self._traced, args, statics, kwargs=kwargs)

    def _prepare(self, args: tuple, kwargs: dict[str, Any]) -> tuple[Any, Any, list[Any]]:
        entry, leaves = self._lowered(args, kwargs)
        found = self._runners.get(id(entry))
        if found is None or found[0] is not entry:
            found = self._runners[id(entry)] = (entry, self._runner(entry, leaves))
        return entry, found[1], leaves

    def _runner(self, entry: Any, leaves: list[Any]) -> Any:
        # Imported here, on the first compile, not with the package: importing Numba and
        # loading the kernels takes about half a second, which every `import cfgrad` (and
        # every process a user starts) would otherwise pay whether it jits or not.
        from .native import NativeProgram

        try:
            native = NativeProgram(entry.compiled, nested.current_run_sink)
            native.prepare(native.arguments(leaves))
            return native
        except Unsupported as e:
            reason = e.where_and_why()
        except Exception as e:  # Numba's errors (typing, lowering, its own internal ones)
            reason = "Numba could not compile it: " + _first_cause(str(e))
        name = getattr(self.fun, "__name__", "f")
        if not self.fallback:
            raise CompileError(f"cfgrad.jit of {name}: cannot compile: {reason}")
        warnings.warn(f"cfgrad.jit of {name} runs in the interpreter: {reason}",
                      CompileWarning, stacklevel=4)
        return _Interpreted(entry, reason)


def _rerun(entry: Any, runner: Any, leaves: list[Any]) -> list[Any]:
    """The interpreter's outputs, after compiled code raised numpy's `LinAlgError` (else
    that error again). Numba's np.linalg raises it where numpy's answers (a matrix with an
    inf or a NaN, which numpy passes to LAPACK; a Cholesky factor cfgrad makes NaN), or
    says it in other words (a singular matrix): the program is pure, so running it again
    in the interpreter gives numpy's answer or numpy's error."""
    if isinstance(runner, _Interpreted):
        raise
    return entry.run(leaves)[0]


def _first_cause(message: str) -> str:
    """The line of a Numba error that says what failed (its messages start with the
    pipeline stage and carry terminal colour codes)."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in message.splitlines()]
    causes = [line for line in lines if line and not line.startswith(("Failed in", "During"))]
    return causes[0] if causes else lines[0]


def jit(fun: Callable, static_argnums: int | Sequence[int] = (), *, fallback: bool = True,
        autograph: bool = True) -> Jitted:
    """`fun` compiled to native code for each input signature, like `jax.jit`.

    `static_argnums` are arguments passed as they are (hashable Python values that key
    the compiled versions, baked into them). What the backend cannot compile runs in
    the interpreter with a `CompileWarning` naming why, or raises `cg.CompileError` with
    `fallback=False`. `autograph` as in `cg.grad`."""
    return Jitted(fun, argnums_tuple(static_argnums, "cfgrad.jit", "static_argnums"),
                  fallback, autograph)
