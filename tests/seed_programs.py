"""Programs shared by the IR tests: the seed examples and a generator of random ones.

The printed IR carries source locations (`; seed_programs.py:41`), so the golden files in
tests/golden/ and the worked example in docs/ir.md depend on the line numbers of this
file. After editing it, regenerate the goldens
(`CFGRAD_REGEN_GOLDEN=1 python -m pytest tests/ir/test_ir_text.py`) and paste the new cond
example into docs/ir.md (tests/docs/test_docs_ir.py says where when they differ).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import strategies as st

import cfgrad as cg
import cfgrad.numpy as cnp

# ---------------------------------------------------------------------------------
# The seed examples (keep their line numbers stable: see the module docstring)
# ---------------------------------------------------------------------------------


def cond_example(a, b):
    z = cg.cond(a < b, lambda: a + b, lambda: a - b)
    return 2 * z


def while_example(x, n):
    def body(carry):
        i, s = carry
        return i + 1, s * x + i

    return cg.while_loop(lambda carry: carry[0] < n, body, (0, 0.0))[1]


def tree_example(x, z, k, g):
    c = 2.0
    return c * z * x + k * x + g


def log_sin_example(x):
    return cnp.log(x[0] * x[1]) * cnp.sin(x[1])


def switch_example(i, x):
    branches = [lambda x: x * 2.0, lambda x: cnp.sin(x), lambda x: x * x]
    return cg.switch(i, branches, x)


def fori_example(X, w):
    def body(t, acc):
        return acc + cnp.tanh(cnp.sum(X[t] * w))

    return cg.fori_loop(0, X.shape[0], body, 0.0)


#: name -> (function, example arguments); the golden files are named after the keys.
SEEDS: dict[str, tuple[Callable, tuple]] = {
    "cond": (cond_example, (1.0, 2.0)),
    "while": (while_example, (1.5, 4)),
    "tree": (tree_example, (4.0, 3.0, 5.0, 7.0)),
    "log_sin": (log_sin_example, (np.array([0.5, 0.75]),)),
    "switch": (switch_example, (1, 0.5)),
    "fori": (fori_example, (np.arange(6.0).reshape(3, 2) / 10, np.array([0.5, -1.0]))),
}


# ---------------------------------------------------------------------------------
# Random structured programs
# ---------------------------------------------------------------------------------
# A program is an expression tree over float vectors of shape (3,): leaves read the
# input `x` or a value bound by an enclosing loop (its carry, the row X[t]); inner nodes
# apply cnp operations, cond, switch, while_loop and fori_loop. `build` turns a tree into
# a function f(x, y, X, k) that `cg.lower` traces. Every loop has a small static trip
# count (or the traced `k`), so the programs always terminate.

_UNARY: dict[str, Callable] = {
    "sin": cnp.sin, "cos": cnp.cos, "tanh": cnp.tanh, "neg": cnp.negative,
    "square": cnp.square, "sigmoid": cnp.sigmoid,
}
_BINARY: dict[str, Callable] = {
    "add": cnp.add, "sub": cnp.subtract, "mul": cnp.multiply, "max": cnp.maximum,
}


def expressions(depth: int = 3) -> st.SearchStrategy:
    """Expression trees of nesting depth at most `depth` (control flow included)."""
    leaf = st.tuples(st.just("leaf"), st.integers(0, 3))
    if depth == 0:
        return leaf
    sub = expressions(depth - 1)
    return st.one_of(
        leaf,
        st.tuples(st.just("unary"), st.sampled_from(sorted(_UNARY)), sub),
        st.tuples(st.just("binary"), st.sampled_from(sorted(_BINARY)), sub, sub),
        st.tuples(st.just("scale"), sub),
        st.tuples(st.just("shift"), sub, st.sampled_from([0.5, -1.25, 3.0])),
        st.tuples(st.just("reduce"), sub, sub),
        st.tuples(st.just("cond"), sub, sub, sub),
        st.tuples(st.just("switch"), sub, st.lists(sub, min_size=1, max_size=3)),
        st.tuples(st.just("while"), sub, sub, st.integers(0, 3),
                  st.sampled_from([None, "store_all", "max_iters"])),
        st.tuples(st.just("fori"), sub, sub, st.integers(0, 4), st.booleans()),
    )


def _eval(e: tuple, env: list[Any], y: Any, X: Any, k: Any) -> Any:
    kind = e[0]
    if kind == "leaf":
        return env[e[1] % len(env)]
    if kind == "unary":
        return _UNARY[e[1]](_eval(e[2], env, y, X, k))
    if kind == "binary":
        return _BINARY[e[1]](_eval(e[2], env, y, X, k), _eval(e[3], env, y, X, k))
    if kind == "scale":
        return _eval(e[1], env, y, X, k) * y
    if kind == "shift":
        return _eval(e[1], env, y, X, k) + e[2]
    if kind == "reduce":
        return _eval(e[1], env, y, X, k) + cnp.sum(_eval(e[2], env, y, X, k))
    if kind == "cond":
        pred = cnp.sum(_eval(e[1], env, y, X, k)) > 0
        return cg.cond(pred, lambda: _eval(e[2], env, y, X, k),
                       lambda: _eval(e[3], env, y, X, k))
    if kind == "switch":
        index = cnp.astype(cnp.sum(_eval(e[1], env, y, X, k)) > 0, "int64") + 1
        branches = [lambda b=b: _eval(b, env, y, X, k) for b in e[2]]
        return cg.switch(index, branches)
    if kind == "while":
        _, init, body, trips, option = e

        def step(carry):
            i, v = carry
            return i + 1, _eval(body, env + [v], y, X, k)

        options: dict[str, Any] = {"checkpoint": cg.checkpoint.StoreAll()} if (
            option == "store_all") else {"max_iters": trips} if option == "max_iters" else {}
        return cg.while_loop(lambda carry: carry[0] < trips, step,
                             (0, _eval(init, env, y, X, k)), **options)[1]
    assert kind == "fori"
    _, init, body, trips, traced_bound = e
    upper = cnp.minimum(k, trips) if traced_bound else trips
    return cg.fori_loop(0, upper, lambda t, v: _eval(body, env + [v, X[t]], y, X, k),
                        _eval(init, env, y, X, k))


def build(expr: tuple) -> Callable:
    """The function that computes `expr` from inputs x: (3,), y: (), X: (4, 3), k: int."""

    def generated(x, y, X, k):
        return cnp.sum(_eval(expr, [x], y, X, k))

    return generated


def generated_args(dtype: Any = np.float64) -> tuple:
    """Inputs for `build`'s functions; `dtype` sets x, y and X (f32 prints `2.0:f32`)."""
    x = np.array([0.3, -0.7, 1.1], dtype)
    return x, dtype(0.9), (np.arange(12.0).reshape(4, 3) / 7 - 0.5).astype(dtype), 3
