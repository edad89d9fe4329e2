"""`check_grads`: derivatives against central finite differences, with a path guard.

Finite differences through control flow are only meaningful when `x - eps·v`, `x` and
`x + eps·v` take the same branches and trip counts; otherwise the difference quotient
measures a jump, not a derivative. `check_grads` runs all three through the interpreter
with the control log kept and raises `PathInstabilityError` naming the Cond or loop that
flipped, instead of reporting a bogus mismatch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import tree as treelib
from .api import evaluate, jvp, vjp
from .errors import ArgumentValueError, PathInstabilityError


def _describe_event(machine: Any, event: tuple) -> str:
    region_index, value = event
    if region_index < 0:
        r = machine.c.loops[-1 - region_index].region
        return f"{r.id} (at {r.loc}) ran {value} iterations"
    r = list(machine.c.if_index)[region_index]
    return f"{r.id} (at {r.loc}) took case {value}"


def _path(fun: Callable, args: tuple) -> tuple[Any, list, Any]:
    out, m = evaluate(fun, *args)
    return out, m.sinks[0], m


def check_grads(f: Callable, args: Sequence[Any], order: int = 1,
                modes: Sequence[str] = ("fwd", "rev"), eps: float | None = None,
                atol: float | None = None, rtol: float | None = None, seed: int = 0) -> None:
    """Check `f`'s JVP and/or VJP at `args` against central differences along a random
    direction, contracted with a random output cotangent (the JAX/autograd scheme).

    Raises AssertionError on a mismatch and PathInstabilityError when the perturbed points
    take another path through the program's control flow."""
    if order != 1:
        raise ArgumentValueError("check_grads: only order=1 is supported; cfgrad does not "
                         "differentiate adjoint programs (higher order) yet")
    unknown = set(modes) - {"fwd", "rev"}
    if unknown:
        raise ArgumentValueError(f"check_grads: unknown modes {sorted(unknown)}; use 'fwd' "
                                 "and/or 'rev'")
    args = tuple(args)
    rng = np.random.default_rng(seed)
    leaves, td = treelib.flatten(args)
    dtypes = [np.asarray(x).dtype for x in leaves]
    out, path, machine = _path(f, args)
    out_dtypes = [np.asarray(o).dtype for o in treelib.flatten(out)[0]]
    low_precision = any(d.kind == "f" and d.itemsize < 8 for d in dtypes + out_dtypes)
    eps = eps if eps is not None else (1e-3 if low_precision else 1e-6)
    rtol = rtol if rtol is not None else (2e-2 if low_precision else 1e-5)
    atol = atol if atol is not None else (2e-2 if low_precision else 1e-6)
    direction = [rng.standard_normal(np.shape(x)).astype(d) if d.kind == "f"
                 else np.zeros(np.shape(x), d) for x, d in zip(leaves, dtypes)]

    def shifted(sign: float) -> tuple:
        moved = [np.asarray(x + sign * eps * v, d) if d.kind == "f" else x
                 for x, v, d in zip(leaves, direction, dtypes)]
        return treelib.unflatten(td, moved)

    out_plus, path_plus, _ = _path(f, shifted(1.0))
    out_minus, path_minus, _ = _path(f, shifted(-1.0))
    for other in (path_plus, path_minus):
        if other != path:
            for a, b in zip(path + [None] * len(other), other + [None] * len(path)):
                if a != b:
                    where = _describe_event(machine, a if a is not None else b)
                    raise PathInstabilityError(
                        f"check_grads: the control path changes within eps={eps} of the input: "
                        f"{where} at x, but not at x ± eps·v; finite differences are not "
                        "meaningful here (move the point away from the branch boundary)")
    out_leaves, out_td = treelib.flatten(out)
    u = [rng.standard_normal(np.shape(o)) if np.asarray(o).dtype.kind == "f"
         else np.zeros(np.shape(o)) for o in out_leaves]
    plus_leaves = treelib.flatten(out_plus)[0]
    minus_leaves = treelib.flatten(out_minus)[0]
    fd = sum(float(np.sum(w * (np.asarray(p, np.float64) - np.asarray(m, np.float64))))
             for w, p, m in zip(u, plus_leaves, minus_leaves)) / (2 * eps)
    results = {}
    if "rev" in modes:
        _, pullback = vjp(f, *args)
        cts = treelib.unflatten(out_td, [w.astype(np.asarray(o).dtype) if np.asarray(
            o).dtype.kind == "f" else np.zeros(np.shape(o), np.asarray(o).dtype)
            for w, o in zip(u, out_leaves)])
        grads = treelib.flatten(pullback(cts))[0]
        for i, (g, x, d) in enumerate(zip(grads, leaves, dtypes)):
            if d.kind == "f" and (np.shape(g) != np.shape(x) or np.asarray(g).dtype != d):
                raise AssertionError(f"check_grads: the cotangent of input leaf {i} is "
                                     f"{np.asarray(g).dtype}{list(np.shape(g))}, the input is "
                                     f"{d}{list(np.shape(x))}")
        results["rev"] = sum(float(np.sum(np.asarray(g, np.float64) * v))
                             for g, v, d in zip(grads, direction, dtypes) if d.kind == "f")
    if "fwd" in modes:
        _, tangent = jvp(f, args, treelib.unflatten(td, direction))
        for i, (t, o) in enumerate(zip(treelib.flatten(tangent)[0], out_leaves)):
            if np.shape(t) != np.shape(o):
                raise AssertionError(f"check_grads: the tangent of output leaf {i} has shape "
                                     f"{list(np.shape(t))}, the output {list(np.shape(o))}")
        results["fwd"] = sum(float(np.sum(w * np.asarray(t, np.float64)))
                             for w, t in zip(u, treelib.flatten(tangent)[0]))
    for mode, value in results.items():
        scale = max(abs(fd), abs(value))
        if not abs(value - fd) <= atol + rtol * scale:
            raise AssertionError(
                f"check_grads: {mode}-mode derivative {value!r} differs from the central "
                f"difference {fd!r} (eps={eps}, atol={atol}, rtol={rtol})")
