"""`check_grads`: derivatives against central finite differences, with a path guard.

Finite differences through control flow are only meaningful when `x - eps·v`, `x` and
`x + eps·v` take the same branches and trip counts; otherwise the difference quotient
measures a jump, not a derivative. `check_grads` runs all three through the interpreter
with the control log kept and raises `PathInstabilityError` naming the Cond or loop that
flipped, instead of reporting a bogus mismatch.

The derivatives under test are computed in the function's own precision, so the
tolerances follow the least precise float dtype the program computes in. The finite
differences are taken in float64 whenever the function traces at float64 inputs and
takes the same path there as at its own dtypes: a float16 difference quotient is mostly
rounding noise (a step of 1e-3 does not even move an input near 1.0), so it could not
judge a float16 derivative. But rounding can change a branch or a trip count (a float16
loop adding 0.1 until 1.0 runs 10 times, the same loop in float64 11 times), and then
the float64 differences measure another piece of the function than the derivatives
under test: they are taken at the function's own dtypes instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from numbers import Real
from typing import Any

import numpy as np

from . import tree as treelib
from .api import evaluate, jvp, vjp
from .errors import ArgumentTypeError, ArgumentValueError, CfgradError, PathInstabilityError
from .ir import LoopRegion, Program, defined_values

# Per float size in bytes: the default atol = rtol for derivatives computed at that
# precision (jax.test_util's default gradient tolerances), and the default step of the
# difference quotient when the function is evaluated at that precision (about the cube
# root of its machine epsilon, which balances truncation error against rounding error).
_TOLERANCE = {2: 1e-2, 4: 2e-3, 8: 1e-5}
_STEP = {2: 5e-2, 4: 5e-3, 8: 1e-6}
# When even the finite differences run in float16 (f casts to float16 inside, or traces
# only at its own float16 inputs), the difference quotient itself is off by a few percent.
_FLOAT16_DIFFERENCE_TOLERANCE = 5e-2


def _path(machine: Any) -> list[tuple[str, str, Any, Any]]:
    """The branch decisions and trip counts of `machine`'s run, as (kind, region id, source
    location, value): by region rather than by index into the machine's tables, so runs
    of programs traced at different dtypes compare too."""
    return [("loop" if isinstance(r, LoopRegion) else "if", r.id, r.loc, value)
            for r, value in machine.sinks[0]]


def _first_difference(path: list, other: list) -> tuple | None:
    """The first events where two paths part, as (event of `path`, event of `other`);
    either is None where its path has ended. None when the paths are equal."""
    for a, b in zip(path + [None] * len(other), other + [None] * len(path)):
        if a != b:
            return a, b
    return None


def _describe(event: tuple | None) -> str:
    if event is None:
        return "nothing more"
    kind, rid, loc, value = event
    if kind == "loop":
        return f"{rid} (at {loc}) ran {value} iterations"
    return f"{rid} (at {loc}) took case {value}"


def _precision(program: Program) -> int:
    """The size in bytes of the least precise float any value of `program` has (8 when
    it has none): inputs, intermediates and outputs, so an internal cast counts."""
    values = [*program.params, *defined_values(program.blocks)]
    sizes = [v.type.dtype.itemsize // (2 if v.type.dtype.kind == "c" else 1) for v in values
             if v.type.is_float]
    return min(min(sizes, default=8), 8)


def _parameter(name: str, value: Any, allowed: str, ok: Callable[[float], bool]
               ) -> float | None:
    """`value` as a float, or None (the default); a bool, a non-number or a value `ok`
    refuses is an error naming the parameter and what it may be, rather than a
    ZeroDivisionError (eps=0) or a check that always fails (a negative or NaN tolerance)
    or always passes (an infinite one)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ArgumentTypeError(f"check_grads: {name} must be {allowed} (or None for the "
                                f"default), got {type(value).__name__} {value!r:.60}")
    if not (math.isfinite(value) and ok(float(value))):
        raise ArgumentValueError(f"check_grads: {name}={value!r}; it must be {allowed} (or "
                                 "None for the default)")
    return float(value)


def check_grads(f: Callable, args: Sequence[Any], order: int = 1,
                modes: Sequence[str] = ("fwd", "rev"), eps: float | None = None,
                atol: float | None = None, rtol: float | None = None, seed: int = 0) -> None:
    """Check `f`'s JVP and/or VJP at `args` against central differences along a random
    direction, contracted with a random output cotangent (the JAX/autograd scheme);
    complex inputs move along complex directions, and a complex cotangent u contracts an
    output change dy as Re(u dy), JAX's convention.

    With `order` > 1 the derivatives are checked in turn, as in JAX: in forward mode the
    function `(primals, tangents) -> jvp(f, primals, tangents)` at `(args, args)`, in
    reverse mode `x -> pullback of f at x applied to f(x)`, each to order - 1.

    Raises AssertionError on a mismatch, PathInstabilityError when the perturbed points
    take another path through the program's control flow, ArgumentTypeError for `args`
    that are not a tuple or list of arguments or a parameter that is not a number, and
    ArgumentValueError for an order that is not a positive int, modes that are empty or
    not a subset of ("fwd", "rev"), an `eps` that is not positive and finite, or an `atol`
    or `rtol` that is negative or not finite."""
    # bool is an int: order=True would pass as 1, and 1.0 would too
    if isinstance(order, bool) or not isinstance(order, int | np.integer) or order < 1:
        raise ArgumentValueError(f"check_grads: order={order!r}; the order is a positive int "
                                 "(1: first derivatives, 2: also the derivatives of those, …)")
    if isinstance(modes, str):
        raise ArgumentValueError(f"check_grads: modes={modes!r} is a string; pass a tuple of "
                                 f"modes: modes=({modes!r},)")
    if not modes:
        raise ArgumentValueError("check_grads: modes is empty, so nothing would be checked; "
                                 "pass 'fwd' and/or 'rev', e.g. modes=('rev',)")
    unknown = set(modes) - {"fwd", "rev"}
    if unknown:
        raise ArgumentValueError(f"check_grads: unknown modes {sorted(unknown)}; use 'fwd' "
                                 "and/or 'rev'")
    if not isinstance(args, tuple | list):
        raise ArgumentTypeError(f"check_grads: args must be a tuple of f's arguments, got "
                                f"{type(args).__name__} {args!r:.60}; for one argument x pass "
                                "args=(x,)")
    eps = _parameter("eps", eps, "a positive finite float", lambda v: v > 0)
    atol = _parameter("atol", atol, "a non-negative finite float", lambda v: v >= 0)
    rtol = _parameter("rtol", rtol, "a non-negative finite float", lambda v: v >= 0)
    _check_orders(f, tuple(args), int(order), tuple(modes), eps, atol, rtol, seed)


def _check_orders(f: Callable, args: tuple, order: int, modes: tuple[str, ...],
                  eps: float | None, atol: float | None, rtol: float | None,
                  seed: int) -> None:
    """First derivatives of `f`, then (JAX's recursion) those of its derivatives."""
    _check_first_order(f, args, modes, eps, atol, rtol, seed)
    if order == 1:
        return
    if "fwd" in modes:
        def f_jvp(primals: tuple, tangents: tuple) -> Any:
            return jvp(f, primals, tangents)

        _check_orders(f_jvp, (args, args), order - 1, modes, eps, atol, rtol, seed)
    if "rev" in modes:
        def f_vjp(*primals: Any) -> Any:
            out, pullback = vjp(f, *primals)
            return pullback(out)

        _check_orders(f_vjp, args, order - 1, modes, eps, atol, rtol, seed)


def _random(rng: np.random.Generator, shape: tuple, dtype: np.dtype) -> np.ndarray:
    """A random direction or cotangent of `dtype`: normal, complex ones in both parts;
    zeros for values without derivatives (integers, bools)."""
    if dtype.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    return np.zeros(shape, dtype)


def _wide(x: Any) -> np.ndarray:
    """x in float64, or complex128 if it is complex: where differences are taken."""
    a = np.asarray(x)
    return a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)


def _check_first_order(f: Callable, args: tuple, modes: tuple[str, ...], eps: float | None,
                       atol: float | None, rtol: float | None, seed: int) -> None:
    rng = np.random.default_rng(seed)
    leaves, td = treelib.flatten(args)
    dtypes = [np.asarray(x).dtype for x in leaves]
    out, machine = evaluate(f, *args)
    # complex inputs move along complex directions; a complex cotangent u stands for the
    # real functional dy -> Re(u dy) (JAX's convention), so each contraction below is
    # the real part of an inner product without conjugation
    direction = [_random(rng, np.shape(x), d) for x, d in zip(leaves, dtypes)]
    out_leaves, out_td = treelib.flatten(out)
    # rounded to the output dtypes, so the cotangent given to vjp is the one used below
    u = [_random(rng, np.shape(o), np.asarray(o).dtype) for o in out_leaves]

    def point(step: float, fd_dtypes: list[np.dtype]) -> tuple:
        moved = [np.asarray(_wide(x) + step * _wide(v), t) if d.kind in "fc" else x
                 for x, v, d, t in zip(leaves, direction, dtypes, fd_dtypes)]
        return treelib.unflatten(td, moved)

    fd_dtypes = [_wide(np.zeros((), d)).dtype if d.kind in "fc" else d for d in dtypes]
    own_dtypes = ""  # why the differences run at the function's own dtypes, if they do
    try:
        _, centre = evaluate(f, *point(0.0, fd_dtypes))
    except CfgradError:  # f traces only at its own dtypes (a loop carry of fixed dtype, …)
        fd_dtypes, centre = dtypes, machine
    parted = _first_difference(_path(machine), _path(centre))
    if parted is not None:  # rounding at the own dtypes took another branch or trip count
        own, promoted = parted
        if own is not None and promoted is not None and own[:3] == promoted[:3]:
            contrast = f"{_describe(promoted)} there but {own[3]} at its own dtypes"
        else:
            contrast = f"{_describe(promoted)} there, {_describe(own)} at its own dtypes"
        own_dtypes = ("; the differences ran at the function's own dtypes, because promoted "
                      f"to float64 the input takes another path: {contrast}")
        fd_dtypes, centre = dtypes, machine
    fd_precision = _precision(centre.c.program)
    eps = _STEP[fd_precision] if eps is None else eps
    tolerance = (_FLOAT16_DIFFERENCE_TOLERANCE if fd_precision == 2
                 else _TOLERANCE[_precision(machine.c.program)])
    rtol = tolerance if rtol is None else rtol
    atol = tolerance if atol is None else atol
    path = _path(centre)
    out_plus, plus = evaluate(f, *point(eps, fd_dtypes))
    out_minus, minus = evaluate(f, *point(-eps, fd_dtypes))
    for other in (plus, minus):
        parted = _first_difference(path, _path(other))
        if parted is not None:
            where = _describe(parted[0] if parted[0] is not None else parted[1])
            raise PathInstabilityError(
                f"check_grads: the control path changes within eps={eps} of the input: "
                f"{where} at x, but not at x ± eps·v; finite differences are not "
                f"meaningful here (move the point away from the branch boundary){own_dtypes}. "
                "If the path changes at every point, as in a bisection or another solver "
                "whose result depends on the input only through comparisons, the derivative "
                "along any one path is exactly 0: differentiate the solution with "
                "cg.custom_root instead (docs/api.md, Differentiating solvers)")
    fd = sum(float(np.sum(np.real(_wide(w) * (_wide(p) - _wide(m)))))
             for w, p, m in zip(u, treelib.flatten(out_plus)[0], treelib.flatten(out_minus)[0])
             ) / (2 * eps)
    results: dict[str, np.ndarray] = {}  # mode -> the terms of its contraction, in float64
    if "rev" in modes:
        _, pullback = vjp(f, *args)
        cts = treelib.unflatten(out_td, [w if np.asarray(o).dtype.kind in "fc" else np.zeros(
            np.shape(o), np.asarray(o).dtype) for w, o in zip(u, out_leaves)])
        grads = treelib.flatten(pullback(cts))[0]
        for i, (g, x, d) in enumerate(zip(grads, leaves, dtypes)):
            if d.kind in "fc" and (np.shape(g) != np.shape(x) or np.asarray(g).dtype != d):
                raise AssertionError(f"check_grads: the cotangent of input leaf {i} is "
                                     f"{np.asarray(g).dtype}{list(np.shape(g))}, the input is "
                                     f"{d}{list(np.shape(x))}")
        results["rev"] = np.concatenate([np.ravel(np.real(_wide(g) * _wide(v)))
                                         for g, v, d in zip(grads, direction, dtypes)
                                         if d.kind in "fc"] + [np.zeros(0)])
    if "fwd" in modes:
        _, tangent = jvp(f, args, treelib.unflatten(td, direction))
        for i, (t, o) in enumerate(zip(treelib.flatten(tangent)[0], out_leaves)):
            if np.shape(t) != np.shape(o):
                raise AssertionError(f"check_grads: the tangent of output leaf {i} has shape "
                                     f"{list(np.shape(t))}, the output {list(np.shape(o))}")
        results["fwd"] = np.concatenate([np.ravel(np.real(_wide(w) * _wide(t)))
                                         for w, t in zip(u, treelib.flatten(tangent)[0])]
                                        + [np.zeros(0)])
    for mode, terms in results.items():
        value = float(np.sum(terms))
        # rounding error of a sum grows with its terms, not with the (maybe cancelled) total
        scale = max(abs(fd), abs(value), float(np.sum(np.abs(terms))))
        if not abs(value - fd) <= atol + rtol * scale:
            raise AssertionError(
                f"check_grads: {mode}-mode derivative {value!r} differs from the central "
                f"difference {fd!r} (eps={eps}, atol={atol}, rtol={rtol})")
