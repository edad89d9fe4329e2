"""`cg.jit` of every indexing form against the interpreter, bit for bit: index arrays the
program computes, the `.at[...]` updates (`set`, `add`, `multiply`, `min`, `max`, `get`)
under each out-of-bounds mode, windows `x[i:i + k]` at a traced start, `cg.dynamic_slice`
and `cg.dynamic_update_slice`, values and gradients.

Each group is one program (a Numba compile apiece), run at several index values of one
signature: repeated indices, negative ones, ones past either end (clamped, dropped or
filled as the mode says, or an IndexError where numpy raises one), windows clamped at
both ends and of length 0, float, int and bool arrays. Every program must compile
(`fallback=False`): until issue 25 each of them ran in the interpreter.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad import tree

LONG = os.environ.get("CFGRAD_HYPOTHESIS") == "long"  # the opt-in profile of conftest.py

X = np.array([0.5, -1.25, 2.0, 3.5, -0.75])
M = np.arange(12.0).reshape(3, 4) * 0.5 - 2.0
V = np.array([2.0, -1.25, 0.0])  # -1.25 ties with X[1], 0.0 is a zero factor
EMPTY = np.zeros(0)

# (i, I): a traced start or index, and a traced index array with repeats, negative
# entries, and entries past the end that the modes clamp or drop
INDICES = [(np.int64(2), np.array([1, 1, -2])), (np.int64(-1), np.array([4, 0, 4])),
           (np.int64(9), np.array([0, 0, 0])), (np.int64(-9), np.array([3, -5, 3]))]


def forms(x: Any, m: Any, v: Any, i: Any, idx: Any, e: Any) -> list[Any]:
    """Every indexing form at the traced index `i` and index array `idx`."""
    big = idx + 4  # past the end of x for most entries: the modes decide
    xi, vi = (x * 4.0).astype(np.int32), (v * 4.0).astype(np.int32)
    xb, vb = x > 0.0, v < 1.0
    return [
        x[idx], m[i % 3, idx[:, None] % 4],  # index arrays the program computes
        x.at[big].set(v), x.at[idx].multiply(v, mode="clip"),  # at an index array
        x.at[big].get(mode="fill"), x.at[1:4].max(v),  # (tests/primitives/test_array_at.py
        # compiles every update under each mode at constant index arrays)
        x[i:i + 2], x.at[i:i + 2].add(v[:2]), cg.dynamic_update_slice(x, v, (i,)),
        cg.dynamic_slice(m, (1, -1), (2, 2)), x[i:i + 0], e[i:i + 0],  # windows
        xi.at[big].multiply(vi), xb.at[idx].min(vb),  # int and bool
    ]


def assert_same_bits(got: Any, want: Any) -> None:
    got_leaves, want_leaves = tree.leaves(got), tree.leaves(want)
    assert len(got_leaves) == len(want_leaves)
    for k, (g, w) in enumerate(zip(got_leaves, want_leaves)):
        g, w = np.asarray(g), np.asarray(w)
        assert (g.dtype, g.shape) == (w.dtype, w.shape), k
        assert g.tobytes() == w.tobytes(), (k, g, w)


def interpreted(fun: Any, *args: Any) -> Any:
    """`fun(*args)` as the interpreter runs its Program (the primal of cg.vjp)."""
    return cg.vjp(fun, *args)[0]


@pytest.fixture(scope="module")
def compiled_forms() -> Any:
    jitted = cg.jit(forms, fallback=False)
    assert jitted.info(X, M, V, *INDICES[0], EMPTY).backend == "numba"
    return jitted


@pytest.mark.parametrize(("i", "idx"), INDICES, ids=[f"i={i}, idx={list(a)}" for i, a in INDICES])
def test_every_form_compiles_to_the_interpreters_bits(compiled_forms: Any, i: Any,
                                                      idx: Any) -> None:
    assert_same_bits(compiled_forms(X, M, V, i, idx, EMPTY), interpreted(forms, X, M, V, i, idx,
                                                                          EMPTY))


def test_an_index_array_out_of_bounds_raises_index_error_in_both(compiled_forms: Any) -> None:
    """`x[idx]` with an entry past the end raises numpy's IndexError in the interpreter,
    and an IndexError in compiled code, never a read past the array."""
    for idx in (np.array([0, 5, 1]), np.array([-6, 0, 0])):
        with pytest.raises(IndexError):
            interpreted(forms, X, M, V, np.int64(0), idx, EMPTY)
        with pytest.raises(IndexError):
            compiled_forms(X, M, V, np.int64(0), idx, EMPTY)


def loss(x: Any, m: Any, v: Any, i: Any, idx: Any) -> Any:
    """A scalar of differentiable forms: the derivative rules of a repeated set (only the
    written update gets a gradient) and of max (ties between x and the updates share
    it), and the scatters the gradients of gathers and windows are (multiply's rule is
    compiled in tests/primitives/test_kernels.py's gradient cases)."""
    big = idx + 4
    parts = [x[idx] * v, x.at[idx].set(v, mode="clip"), x.at[big].max(v), x[i:i + 2] * v[:2],
             cg.dynamic_update_slice(x, v * v, (i,))]
    total = 0.0
    for k, p in enumerate(parts):
        total = total + cnp.sum(p * p) * (k + 1.0)
    return total


@pytest.mark.skipif(not LONG, reason="a compiled adjoint, 10-12 s of cold Numba compile: "
                    "run under CFGRAD_HYPOTHESIS=long (values compile in the default run)")
def test_gradients_compile_to_the_interpreters_bits() -> None:
    grad = cg.grad(loss, argnums=(0, 1, 2))
    jitted = cg.jit(grad, fallback=False)
    assert jitted.info(X, M, V, *INDICES[0]).backend == "numba"
    for i, idx in INDICES:
        assert_same_bits(jitted(X, M, V, i, idx), grad(X, M, V, i, idx))
