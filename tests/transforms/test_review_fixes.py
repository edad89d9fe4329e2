"""Regressions found reviewing issues 24 and 28 (the restructuring and per-call speedups).

The dispatch caches that find a call of leaves by the arguments' types alone (vjp's and
jvp's through `api.lowered`, grad's, jit's) must not outlive a pytree registration: an
ndarray subclass is a leaf until its class is registered, and then its children are the
arguments (docs/api.md, Pytrees)."""

from __future__ import annotations

import numpy as np
import pytest

import cfgrad as cg
import cfgrad.numpy as cnp


def _double_sum(x):
    return cnp.sum(x * 2.0)


@pytest.mark.parametrize("transform", [
    pytest.param(lambda f: lambda x: cg.vjp(f, x)[0], id="vjp"),
    pytest.param(lambda f: lambda x: cg.jvp(f, (x,), (x,))[0], id="jvp"),
    pytest.param(lambda f: lambda x: cg.value_and_grad(f)(x)[0], id="value_and_grad"),
    pytest.param(lambda f: cg.value_and_grad(f), id="one value_and_grad"),
    pytest.param(lambda f: cg.jit(f), id="jit"),
])
def test_a_class_registered_after_a_call_is_flattened(transform):
    class Scaled(np.ndarray):
        pass

    def f(x):  # a function of each test's own: no cache entry of another test is met
        return _double_sum(x)

    g = transform(f)
    x = np.array([1.0, 2.0]).view(Scaled)
    value = lambda r: float(r[0] if isinstance(r, tuple) else r)  # noqa: E731
    assert value(g(x)) == 6.0  # a leaf
    cg.tree_util.register_pytree_node(
        Scaled, lambda s: ((np.asarray(s) * 10.0,), None), lambda aux, kids: kids[0])
    assert value(g(x)) == 60.0  # its one child, 10 * x, is the argument now


def test_vjp_takes_a_numpy_integer_static_argnums():
    """vjp's shortcut for the default `static_argnums` compared it with `==`, which numpy
    scalars and arrays answer elementwise: a raw ValueError instead of the call (or the
    typed error)."""
    out, pullback = cg.vjp(lambda x, y: x * y, 2.0, 3.0, static_argnums=np.int64(1))
    assert out == 6.0 and pullback(1.0) == (3.0, None)
    with pytest.raises(cg.ArgumentTypeError, match="static_argnums must be an int"):
        cg.vjp(lambda x, y: x * y, 2.0, 3.0, static_argnums=np.array([1]))
