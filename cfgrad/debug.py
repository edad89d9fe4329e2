"""`cg.debug`: print values and call functions at run time, from inside traced code.

A Python `print` in a traced function runs once, while tracing, and shows tracers. These
functions add a `debug_callback` node to the program instead, which calls back each time
the program runs that node, with the runtime values of the traced arguments: in a cond
branch only when the branch is taken, in a loop body once per iteration, in program order
(passes never move or drop the node, see `Primitive.effect`). The node has no results and
no derivative, so gradients are the same with or without it, and the adjoint does not
contain it. Work a run repeats is silent: iterations a checkpoint strategy recomputes
during the reverse pass, and the rest of the pullback, call nothing (see
`interpret.repeating`), so the output is the forward run's, the same under every strategy;
a custom_vjp's bwd, which only the pullback runs, is not a repeat and prints there.
Outside a trace both functions act at once, as JAX's do.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import Any

import numpy as np

from . import tree as treelib
from .errors import require_callable
from .primitives import PRIMITIVES
from .trace_context import current_trace, is_traced


class DebugCall:
    """A `debug_callback` node's parameter: the user's function, the pytree of its
    arguments and which leaves are static (Python values kept as they are) rather than
    the node's inputs. Called with the inputs' runtime values; prints as `shown`, the
    call the user wrote, so `Program.text()` reads `{callback=print('x = {}')}`."""

    __slots__ = ("fn", "tree", "statics", "shown")

    def __init__(self, fn: Callable[..., Any], tree: treelib.TreeDef,
                 statics: dict[int, Any], shown: str):
        self.fn, self.tree, self.statics, self.shown = fn, tree, statics, shown

    def __call__(self, *values: Any) -> tuple:
        traced = iter(values)
        leaves = [self.statics[i] if i in self.statics else _read_only(next(traced))
                  for i in range(self.tree.num_leaves)]
        args, kwargs = treelib.unflatten(self.tree, leaves)
        self.fn(*args, **kwargs)
        return ()

    def __repr__(self) -> str:
        return self.shown


def _read_only(value: Any) -> np.ndarray:
    """A read-only view of a runtime value: the callback sees the run's own arrays (an
    argument, a constant of the cached program, a value the adjoint reads later), which
    an in-place edit would change for the rest of the run and for later calls."""
    view = np.asarray(value).view()
    view.flags.writeable = False
    return view


def callback(callback: Callable[..., Any], *args: Any, ordered: bool = False,
             **kwargs: Any) -> None:
    """Call `callback(*args, **kwargs)` when the program runs this point, with read-only
    numpy arrays for the traced values (other values as they are). Calls are always in program
    order: `ordered` is accepted for JAX's signature and changes nothing."""
    require_callable(callback, "debug.callback", "callback")
    _emit(callback, args, kwargs, f"callback({getattr(callback, '__name__', 'fn')})")


def print(fmt: str, *args: Any, ordered: bool = False, **kwargs: Any) -> None:  # noqa: A001
    """`print(fmt.format(*args, **kwargs))` when the program runs this point, with the
    runtime values of traced arguments. `ordered` as in `callback`."""

    def show(*values: Any, **named: Any) -> None:
        builtins.print(fmt.format(*values, **named))

    _emit(show, args, kwargs, f"print({fmt!r})")


def _emit(fn: Callable[..., Any], args: tuple, kwargs: dict[str, Any], shown: str) -> None:
    """One `debug_callback` node in the trace being built (the innermost: where the
    user's code is), or the call itself outside any trace."""
    leaves, tree = treelib.flatten((args, kwargs))
    call = DebugCall(fn, tree, {i: x for i, x in enumerate(leaves) if not is_traced(x)},
                     shown)
    trace = current_trace()
    if trace is None:
        call(*(x for x in leaves if is_traced(x)))
        return
    trace.emit(PRIMITIVES["debug_callback"], [x for x in leaves if is_traced(x)],
               {"callback": call}, None)
