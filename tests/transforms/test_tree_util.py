"""Pytrees users define (`cg.tree_util`): JAX's functions on examples whose results were
checked against `jax.tree_util` 0.10.2, registered dataclasses and classes as arguments,
loop carries, cond operands and outputs, and the error for an unregistered class."""

from __future__ import annotations

import dataclasses
from collections import namedtuple

import numpy as np
import pytest

import cfgrad as cg
import cfgrad.numpy as cnp

tu = cg.tree_util


@tu.register_dataclass
@dataclasses.dataclass
class Params:
    w: float
    b: float
    name: str = dataclasses.field(default="p", metadata=dict(static=True))


@dataclasses.dataclass(frozen=True)
class State:
    x: float
    steps: int


tu.register_dataclass(State, data_fields=["x"], meta_fields=["steps"])


class Pair:
    """A plain class registered with its own flatten / unflatten."""

    def __init__(self, first, second):
        self.first, self.second = first, second


tu.register_pytree_node(Pair, lambda p: ((p.first, p.second), None),
                        lambda aux, children: Pair(*children))


@dataclasses.dataclass
class Unregistered:
    w: float


Point = namedtuple("Point", "x y")


# -------------------------------------------------------------------------------------
# The functions, as JAX's
# -------------------------------------------------------------------------------------


def test_tree_leaves_and_flatten_as_jax():
    assert tu.tree_leaves([1, None, (2, {"b": 3, "a": 4})]) == [1, 2, 4, 3]
    leaves, td = tu.tree_flatten({"a": None, "b": (1, 2)})
    assert leaves == [1, 2]
    assert (td.num_leaves, td.num_nodes) == (2, 5)
    assert tu.tree_unflatten(td, [7, 8]) == {"a": None, "b": (7, 8)}
    assert td.unflatten([7, 8]) == {"a": None, "b": (7, 8)}
    with pytest.raises(ValueError, match="Too few leaves"):
        tu.tree_unflatten(td, [7])
    with pytest.raises(ValueError, match="Too many leaves"):
        tu.tree_unflatten(td, [7, 8, 9])


def test_none_is_an_empty_subtree():
    assert tu.tree_leaves(None) == []
    assert tu.tree_map(lambda x: x, None) is None
    assert tu.tree_map(lambda x: 1, [None, 2]) == [None, 1]
    assert tu.tree_leaves([None], is_leaf=lambda x: x is None) == [None]


def test_tree_map_several_trees_and_prefixes():
    assert tu.tree_map(lambda x, y: x + y, (1, [2, 3]), (10, [20, 30])) == (11, [22, 33])
    # the extra trees may have the first as a prefix: fn gets their subtrees
    assert tu.tree_map(lambda x, y: (x, y), (1, 2), ([5, 6], {"k": 7})) == (
        (1, [5, 6]), (2, {"k": 7}))
    with pytest.raises(ValueError):
        tu.tree_map(lambda x, y: x, (1, 2), (1, 2, 3))
    assert tu.tree_map(lambda x: x * 2, Point(1, 2)) == Point(2, 4)


def test_is_leaf():
    assert tu.tree_map(lambda x: 0, [(1, 2), (3,)],
                       is_leaf=lambda x: isinstance(x, tuple)) == [0, 0]
    assert tu.tree_leaves([(1, 2), 3], is_leaf=lambda x: isinstance(x, tuple)) == [(1, 2), 3]


def test_register_dataclass_fields_as_jax():
    leaves, td = tu.tree_flatten(Params(1.0, 2.0))
    assert leaves == [1.0, 2.0]
    assert tu.tree_unflatten(td, [3.0, 4.0]) == Params(3.0, 4.0)
    leaves, td = tu.tree_flatten(State(1.5, 3))
    assert leaves == [1.5]
    assert tu.tree_unflatten(td, [2.5]) == State(2.5, 3)
    # the static fields are part of the structure
    assert tu.tree_flatten(State(1.5, 4))[1] != td
    assert tu.tree_map(lambda v: v * 10, {"p": Params(1.0, 2.0, "q")}) == {
        "p": Params(10.0, 20.0, "q")}


def test_registration_errors_as_jax():
    with pytest.raises(ValueError, match="Duplicate"):
        tu.register_dataclass(State, data_fields=["x"], meta_fields=["steps"])
    with pytest.raises(ValueError, match="Duplicate"):
        tu.register_pytree_node(tuple, lambda t: (t, None), lambda a, c: tuple(c))

    @dataclasses.dataclass
    class Two:
        a: float
        n: int

    with pytest.raises(ValueError, match="Missing fields: {'n'}"):
        tu.register_dataclass(Two, data_fields=["a"], meta_fields=[])

    class NotADataclass:
        pass

    with pytest.raises(TypeError, match="required when nodetype is not a dataclass"):
        tu.register_dataclass(NotADataclass)


def test_register_pytree_node_with_a_class():
    leaves, td = tu.tree_flatten(Pair(1, (2, 3)))
    assert leaves == [1, 2, 3]
    rebuilt = tu.tree_unflatten(td, [4, 5, 6])
    assert isinstance(rebuilt, Pair) and rebuilt.first == 4 and rebuilt.second == (5, 6)


# -------------------------------------------------------------------------------------
# Registered classes through the transformations
# -------------------------------------------------------------------------------------


def test_dataclass_argument_gradient_has_its_structure():
    g = cg.grad(lambda p: p.w * p.b ** 2)(Params(3.0, 2.0, "z"))
    assert isinstance(g, Params) and g.name == "z"
    np.testing.assert_allclose([g.w, g.b], [4.0, 12.0])


def test_dataclass_nested_in_dicts_and_tuples():
    def f(tree):
        p, (q,) = tree["p"], tree["rest"]
        return p.w * q.b + cnp.sin(p.b)

    value, g = cg.value_and_grad(f)({"p": Params(2.0, 0.5), "rest": (Params(1.0, 3.0),)})
    np.testing.assert_allclose(value, 6.0 + np.sin(0.5))
    np.testing.assert_allclose([g["p"].w, g["p"].b, g["rest"][0].w, g["rest"][0].b],
                               [3.0, np.cos(0.5), 0.0, 2.0])


def test_dataclass_loop_carry():
    def f(x):
        def body(s):
            return State(s.x * 1.5 + cnp.sin(s.x), s.steps)
        out = cg.while_loop(lambda s: s.x < 4.0, body, State(x, 7))
        assert out.steps == 7  # static, known while tracing
        return out.x

    def reference(x):
        while x < 4.0:
            x = x * 1.5 + np.sin(x)
        return x

    for x0 in (0.3, 1.1):
        eps = 1e-6
        fd = (reference(x0 + eps) - reference(x0 - eps)) / (2 * eps)
        np.testing.assert_allclose(cg.grad(f)(x0), fd, rtol=1e-6)


def test_dataclass_fori_carry_and_cond_operand_and_output():
    def step(i, p):
        return cg.cond(p.w > 1.0, lambda q: Params(q.w * 0.5, q.b + q.w, q.name),
                       lambda q: Params(q.w * 3.0, q.b * q.w, q.name), p)

    def f(w, b):
        return cg.fori_loop(0, 4, step, Params(w, b, "s"))

    out, pb = cg.vjp(f, 0.8, 1.0)
    assert isinstance(out, Params) and out.name == "s"
    gw, gb = pb(Params(1.0, 1.0, "s"))

    def reference(w, b):
        for _ in range(4):
            w, b = (w * 0.5, b + w) if w > 1.0 else (w * 3.0, b * w)
        return w + b

    eps = 1e-6
    np.testing.assert_allclose(gw, (reference(0.8 + eps, 1.0) - reference(0.8 - eps, 1.0))
                               / (2 * eps), rtol=1e-6)
    np.testing.assert_allclose(gb, (reference(0.8, 1.0 + eps) - reference(0.8, 1.0 - eps))
                               / (2 * eps), rtol=1e-6)


def test_custom_class_through_grad_jvp_and_carries():
    def f(p):
        q = cg.fori_loop(0, 2, lambda i, c: Pair(c.first * c.second[0], c.second), p)
        return q.first + q.second[1]

    g = cg.grad(f)(Pair(2.0, (3.0, 1.0)))
    assert isinstance(g, Pair)
    np.testing.assert_allclose([g.first, *g.second], [9.0, 12.0, 1.0])
    _, tangent = cg.jvp(f, (Pair(2.0, (3.0, 1.0)),), (Pair(1.0, (0.0, 0.0)),))
    np.testing.assert_allclose(tangent, 9.0)


def test_static_fields_key_the_cache():
    traced = []

    def f(s):
        traced.append(s.steps)
        return s.x * s.steps

    g = cg.grad(f)
    assert g(State(1.0, 2)).x == 2.0 and g(State(5.0, 2)).x == 2.0
    assert g(State(1.0, 3)).x == 3.0
    assert traced == [2, 3]


# -------------------------------------------------------------------------------------
# Unregistered classes: the error says how to register
# -------------------------------------------------------------------------------------


@pytest.mark.parametrize("call", [
    lambda: cg.grad(lambda p: p.w)(Unregistered(1.0)),
    lambda: cg.grad(lambda x: cg.while_loop(lambda c: c.w < 3.0,
                                            lambda c: Unregistered(c.w + 1.0),
                                            Unregistered(x)).w)(1.0),
    lambda: cg.grad(lambda x: cg.cond(x > 0, lambda: Unregistered(x),
                                      lambda: Unregistered(-x)).w)(1.0),
    lambda: cg.vjp(lambda x: Unregistered(x), 1.0),
], ids=["argument", "carry", "branch result", "output"])
def test_unregistered_class_error_says_how_to_register(call):
    with pytest.raises(cg.CfgradError,
                       match=r"Unregistered is not a registered pytree node type.*"
                             r"cg\.tree_util\.register_dataclass\(Unregistered\)"):
        call()


def test_unregistered_plain_class_suggests_register_pytree_node():
    class Box:
        def __init__(self, v):
            self.v = v

    with pytest.raises(cg.ArgumentTypeError,
                       match=r"register_pytree_node\(Box, flatten, unflatten\)"):
        cg.grad(lambda b: b.v)(Box(1.0))


def test_unhashable_static_data_is_a_clear_error():
    with pytest.raises(cg.ArgumentTypeError, match="not hashable"):
        cg.grad(lambda s: s.x)(State(1.0, [1, 2]))


def test_no_registration_advice_for_strings_and_functions():
    for value in ("text", len):
        with pytest.raises(cg.ArgumentTypeError, match="static") as info:
            cg.grad(lambda x, s: x)(1.0, value)
        assert "register" not in str(info.value)


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
    """The dispatch caches that find a call of leaves by the arguments' types alone (vjp's
    and jvp's through `api.lowered`, grad's, jit's) do not outlive a pytree registration:
    an ndarray subclass is a leaf until its class is registered, and then its children
    are the arguments (docs/api.md, Pytrees)."""
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
