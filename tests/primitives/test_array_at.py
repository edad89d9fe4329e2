"""`.at` on the arrays cfgrad.numpy's constructors return (issue 23, item 13).

`cnp.zeros(3).at[0].set(x)` raised AttributeError (numpy's arrays have no `.at`) eagerly
and inside `cg.grad` alike. The constructors now return `cg.Array`, numpy's ndarray with
the `.at` traced values have, computed now by the same code that records it when traced:
these tests hold the eager results to the traced ones bit for bit (interpreter and
compiled), check that an Array goes everywhere a numpy array goes, and that it does not
spread into what transformations and cfgrad.numpy's other functions return.
"""

from __future__ import annotations

import pickle
import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_numpy_coverage import EXAMPLES, leaves, resolve

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad.api import evaluate, leaf_key


def assert_same_bits(got: Any, want: Any, what: str = "") -> None:
    """Equal dtype, shape and bytes (NaNs and signed zeros included)."""
    got, want = np.asarray(got), np.asarray(want)
    assert (got.dtype, got.shape) == (want.dtype, want.shape), what
    assert got.tobytes() == want.tobytes(), f"{what}: {got} != {want}"


def assert_all_same_bits(got: tuple, want: tuple, what: str) -> None:
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert_same_bits(g, w, f"{what}, result {k}")


# -------------------------------------------------------------------------------------
# The constructors return Arrays, and `.at` works on them eagerly
# -------------------------------------------------------------------------------------

F23 = np.arange(6.0).reshape(2, 3)

# (constructor call, numpy's array of the same values)
CONSTRUCTED = [
    (lambda: cnp.zeros(3), np.zeros(3)),
    (lambda: cnp.ones((2, 2), np.float32), np.ones((2, 2), np.float32)),
    (lambda: cnp.full(3, 2.5), np.full(3, 2.5)),
    (lambda: cnp.empty((2, 3)), np.zeros((2, 3))),  # JAX's empty: zeros
    (lambda: cnp.zeros_like(F23), np.zeros_like(F23)),
    (lambda: cnp.ones_like(F23, dtype=int), np.ones_like(F23, dtype=int)),
    (lambda: cnp.full_like(F23, 7.0), np.full_like(F23, 7.0)),
    (lambda: cnp.empty_like(F23), np.zeros_like(F23)),
    (lambda: cnp.eye(3, 4, 1), np.eye(3, 4, 1)),
    (lambda: cnp.identity(2), np.identity(2)),
    (lambda: cnp.tri(3), np.tri(3)),
    (lambda: cnp.arange(1.0, 4.0), np.arange(1.0, 4.0)),
    (lambda: cnp.linspace(0.0, 1.0, 5), np.linspace(0.0, 1.0, 5)),
    (lambda: cnp.linspace(0.0, 1.0, 5, retstep=True)[0], np.linspace(0.0, 1.0, 5)),
    (lambda: cnp.logspace(0.0, 2.0, 3), np.logspace(0.0, 2.0, 3)),
    (lambda: cnp.geomspace(1.0, 8.0, 4), np.geomspace(1.0, 8.0, 4)),
    (lambda: cnp.array([1.0, 2.0]), np.array([1.0, 2.0])),
    (lambda: cnp.array(F23, ndmin=3), np.array(F23, ndmin=3)),
    (lambda: cnp.asarray([[1, 2]]), np.asarray([[1, 2]])),
    (lambda: cnp.asarray(F23, np.float32), np.asarray(F23, np.float32)),
    (lambda: cnp.asarray(2.5), np.asarray(2.5)),
    (lambda: cnp.copy(F23), np.copy(F23)),
]


@pytest.mark.parametrize(("make", "expected"), CONSTRUCTED,
                         ids=[str(k) for k in range(len(CONSTRUCTED))])
def test_constructors_return_arrays_with_at(make: Any, expected: np.ndarray) -> None:
    x = make()
    assert type(x) is cg.Array and cg.Array is cnp.Array
    assert_same_bits(x, expected)
    index = (0,) * x.ndim
    y = x.at[index].set(9)
    assert type(y) is cg.Array
    assert y[index] == 9 and x[index] == expected[index]  # x itself is unchanged


def test_the_issue_example_runs_eagerly_and_under_grad() -> None:
    def f(x):
        return cnp.sum(cnp.zeros(3).at[0].set(x) * cnp.arange(1.0, 4.0)) + x

    assert f(2.0) == 4.0
    assert cg.grad(f)(2.0) == 2.0


def test_at_chains_and_leaves_its_array_as_it_was() -> None:
    z = cnp.zeros(4)
    y = z.at[0].set(1.0).at[1].add(2.0).at[-1].multiply(3.0).at[2].max(5.0).at[2].min(4.0)
    assert type(y) is cg.Array
    assert_same_bits(y, np.array([1.0, 2.0, 4.0, 0.0]))
    assert_same_bits(z, np.zeros(4))
    assert type(z.at[0].mul(2.0)) is cg.Array
    # get is x[idx]: an Array for several elements, a numpy scalar for one
    assert type(y.at[1:].get()) is cg.Array
    assert type(y.at[1].get()) is np.float64
    assert np.isnan(y.at[9].get(mode="fill"))
    zero_d = cnp.asarray(2.0).at[()].add(1.0)
    assert type(zero_d) is cg.Array and zero_d.shape == () and zero_d == 3.0


def test_at_refuses_what_the_traced_at_refuses() -> None:
    with pytest.raises(cg.ArgumentValueError, match="mode must be one of"):
        cnp.zeros(3).at[0].set(1.0, mode="wrap")
    with pytest.raises(cg.LoweringError, match="too many indices"):
        cnp.zeros(3).at[0, 1].set(1.0)


# -------------------------------------------------------------------------------------
# The same values eagerly and under every transformation, bit for bit
# -------------------------------------------------------------------------------------


REPEATED = np.array([1, 1, 3, -1, 7, -8])  # repeated, negative, out of bounds both ways


def updates(x: Any, w: Any, i: Any) -> tuple:
    """Every `.at` method on Arrays made from the arguments and by constructors: repeated,
    negative and out-of-bounds indices under each mode, slices, `...`, 2-D indices, a
    float32 array, chains, and an index `i` that is traced under a transformation."""
    a, m = cnp.asarray(x), cnp.asarray(w)
    v = cnp.arange(6.0) + 0.5
    return (
        a.at[REPEATED].set(v), a.at[REPEATED].set(v, mode="clip"),
        a.at[REPEATED].add(v), a.at[REPEATED].add(v, mode="clip"),
        a.at[REPEATED].multiply(v), a.at[REPEATED].mul(v, mode="clip"),
        a.at[REPEATED].min(v), a.at[REPEATED].max(v, mode="clip"),
        a.at[REPEATED].get(), a.at[REPEATED].get(mode="fill"),
        a.at[REPEATED].get(mode="fill", fill_value=-1.0),
        a.at[np.array([0, 2])].set(1.5, mode="promise_in_bounds"),
        a.at[1:4].set(x[:3] * 2.0), a.at[::2].add(1.0), a.at[-2].multiply(x[0]),
        a.at[i].set(x[1]), a.at[i + 5].add(x[2], mode="clip"), a.at[i - 9].get(mode="fill"),
        a.at[i].min(-x[3]), a.at[i - 1].max(x[4] * 10.0, mode="drop"),
        m.at[1, 2].set(x[0]), m.at[:, np.array([0, 0, 3])].add(x[:3]),
        m.at[np.array([0, 2]), np.array([1, 1])].max(x[3]), m.at[..., -1].min(x[4]),
        m.at[None, 1].get(), m.at[i % 3].multiply(x[:4]),
        cnp.zeros(4).at[0].set(x[0]).at[1].add(x[1]).at[i % 4].multiply(x[2]),
        cnp.full((2, 2), 3.0, np.float32).at[1, i % 2].set(x[0]),
        cnp.ones(3, int).at[np.array([0, 0])].add(i),
    )


X = np.array([0.5, -1.25, 2.0, 3.5, -0.75])
W = np.arange(12.0).reshape(3, 4) - 5.0
I = 2


def test_updates_eagerly_equal_the_interpreter_bit_for_bit() -> None:
    eager = updates(X, W, I)
    for out in eager:
        assert type(out) in (cg.Array, np.float64)
    traced, _ = cg.vjp(updates, X, W, I)  # index traced too
    assert_all_same_bits(traced, eager, "vjp")
    primal, _ = cg.jvp(lambda x, w: updates(x, w, I), (X, W), (np.ones(5), np.ones((3, 4))))
    assert_all_same_bits(primal, eager, "jvp")
    compiled = cg.jit(updates, fallback=False)  # every update compiles
    assert compiled.info(X, W, I).backend == "numba"
    jitted = compiled(X, W, I)
    assert_all_same_bits(jitted, eager, "jit")
    assert_all_same_bits(compiled(cnp.asarray(X), W, I), eager, "jit of an Array")
    for out in (*traced, *primal, *jitted):  # transformations' results stay plain numpy
        assert type(out) in (np.ndarray, np.float64)


def loss(x: Any) -> Any:
    """A scalar function building its value with `.at` on constructed arrays."""
    y = cnp.zeros(4).at[0].set(x[0] * x[1]).at[np.array([1, 1, 3])].add(x)
    y = y.at[2].max(cnp.sin(x[0])).at[-1].multiply(x[2])
    return cnp.sum(y * y) + y.at[np.array([0, 9])].get(mode="fill", fill_value=0.0)[1]


def test_a_function_using_at_has_one_value_with_and_without_transformations() -> None:
    x = np.array([0.7, -1.3, 2.1])
    eager = loss(x)
    value, grad = cg.value_and_grad(loss)(x)
    assert_same_bits(value, eager, "value_and_grad")
    assert_same_bits(cg.vjp(loss, x)[0], eager, "vjp")
    assert_same_bits(cg.jvp(loss, (x,), (np.ones(3),))[0], eager, "jvp")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cg.CompileWarning)
        assert_same_bits(cg.jit(loss)(x), eager, "jit")
        assert_same_bits(cg.jit(cg.grad(loss))(x), grad, "jit of grad")
    assert_same_bits(cg.grad(loss)(cnp.asarray(x)), grad, "grad at an Array")
    assert type(grad) is np.ndarray
    cg.testing.check_grads(loss, (x,))


def test_at_in_a_loop_carry_runs_eagerly_and_traced() -> None:
    """A carry made by a constructor and updated with `.at`: a Python loop of Arrays
    eagerly, a loop region of traced values under cg.grad."""
    def f(x):
        def body(i, acc):
            return acc.at[i].set(x[i] * i)
        return cnp.sum(cg.fori_loop(0, 3, body, cnp.zeros(3)) ** 2)

    x = np.array([1.5, -2.0, 0.5])
    value, grad = cg.value_and_grad(f)(x)
    assert_same_bits(value, f(x))
    np.testing.assert_allclose(grad, 2 * x * np.arange(3.0) ** 2, rtol=1e-15)


@given(st.data())
def test_each_update_eagerly_equals_traced(data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 5), label="n")
    index = np.array(data.draw(st.lists(st.integers(-n - 2, n + 1), min_size=1, max_size=5),
                               label="index"))
    op = data.draw(st.sampled_from(["set", "add", "multiply", "min", "max", "get"]), label="op")
    mode = data.draw(st.sampled_from([None, "drop", "clip", "fill", "promise_in_bounds"]),
                     label="mode")
    dtype = data.draw(st.sampled_from([np.float64, np.float32, np.int64]), label="dtype")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16), label="seed"))
    x = (rng.normal(size=n) * 4).astype(dtype)
    v = (rng.normal(size=len(index)) * 4).astype(dtype)

    def update(x, v, index):
        ref = cnp.asarray(x).at[index]
        return ref.get(mode=mode) if op == "get" else getattr(ref, op)(v, mode=mode)

    eager = update(x, v, index)
    assert_same_bits(evaluate(update, x, v, index)[0], eager, "traced index")
    assert_same_bits(evaluate(lambda x, v: update(x, v, index), x, v)[0], eager,
                     "constant index")


# -------------------------------------------------------------------------------------
# Arrays go wherever numpy arrays go
# -------------------------------------------------------------------------------------


def test_arrays_are_arguments_like_numpy_arrays_of_their_shape_and_dtype() -> None:
    traces = []

    def f(x, params):
        traces.append(1)
        return cnp.sum(cnp.tanh(x * params["w"]) * params["b"])

    x, w, b = np.array([0.3, -0.8]), np.array([1.5, 2.0]), np.array(0.25)
    plain = cg.grad(f, argnums=(0, 1))(x, {"w": w, "b": b})
    arrays = cg.grad(f, argnums=(0, 1))(cnp.asarray(x), {"w": cnp.asarray(w),
                                                         "b": cnp.asarray(b)})
    assert len(traces) == 1  # one Program for both: the same cache key
    assert leaf_key(cnp.asarray(x)) == leaf_key(x)
    for got, want in zip(cg.tree_util.tree_leaves(arrays), cg.tree_util.tree_leaves(plain)):
        assert type(got) is type(want)  # a plain ndarray, a numpy scalar for 0-d
        assert_same_bits(got, want)
    assert cg.tree_util.tree_leaves({"a": cnp.ones(2)})[0].shape == (2,)  # a leaf


def test_transformations_of_arrays_return_plain_numpy_arrays() -> None:
    def f(x):
        return cnp.ones(2) * cnp.sum(x * x) + cnp.zeros(2).at[0].set(x[0])

    x = cnp.asarray([1.0, -2.0])
    results = [cg.vjp(f, x)[0], cg.vjp(f, x)[1](cnp.ones(2))[0],
               *cg.jvp(f, (x,), (cnp.ones(2),)), cg.jacfwd(f)(x), cg.jacrev(f)(x),
               cg.hessian(lambda x: cnp.sum(f(x)))(x), cg.value_and_grad(
                   lambda x: cnp.sum(f(x)))(x)[1], cg.vjp(lambda x: cnp.ones(2), x)[0],
               cg.jacrev(lambda x: x[:0])(x), cg.jacfwd(lambda x: cnp.sum(x))(cnp.zeros(0))]
    for k, out in enumerate(results):
        assert type(out) is np.ndarray, f"result {k} is a {type(out).__name__}"
    np.testing.assert_array_equal(results[4], [[3.0, -4.0], [2.0, -4.0]])


def test_jit_compiles_for_arrays_and_numpy_arrays_alike() -> None:
    traces = []

    def f(x, y):
        traces.append(1)
        return x @ y + cnp.arange(2.0)

    jitted = cg.jit(f, fallback=False)
    x, y = np.eye(2) * 3.0, np.array([1.0, 2.0])
    plain = jitted(x, y)
    both = jitted(cnp.asarray(x), cnp.asarray(y))
    assert jitted.info(cnp.asarray(x), y).backend == "numba"
    assert len(traces) == 1
    assert type(both) is np.ndarray
    assert_same_bits(both, plain)
    assert_same_bits(both, np.array([3.0, 7.0]))


def test_arrays_inside_a_trace_are_constants_of_plain_numpy_arrays() -> None:
    def f(x, i):
        a = cnp.arange(3.0)
        return (a + x, x * a, np.add(a, x), a.at[i].set(x[0]), cnp.zeros(3).at[0].add(x[1]))

    program = cg.lower(f, np.ones(3), 1)
    consts = [n.params["value"] for b in program.blocks for n in b.nodes if n.op == "const"]
    assert consts and all(type(c) is np.ndarray for c in consts)
    outs = cg.vjp(f, np.ones(3), 1)[0]
    np.testing.assert_array_equal(outs[3], [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(outs[4], [1.0, 0.0, 0.0])


def test_arrays_with_numpy_pickle_and_printing() -> None:
    a = cnp.arange(3.0)
    assert isinstance(a, np.ndarray) and repr(a) == "Array([0., 1., 2.])"
    assert str(a) == str(np.arange(3.0))
    back = pickle.loads(pickle.dumps(a))
    assert type(back) is cg.Array and back.at[0].set(5.0)[0] == 5.0
    view = np.asarray(a)
    assert type(view) is np.ndarray and np.shares_memory(view, a)
    # numpy keeps an Array an Array (as it keeps any subclass), as JAX keeps its arrays
    for kept in (a + 1, np.sin(a), a[1:], a.reshape(3, 1), a.T, a.copy(), -a,
                 a.sum(axis=0, keepdims=True)):
        assert type(kept) is cg.Array
    # a full reduction is a numpy scalar, as for a plain array: hashable (a static argument)
    for scalar in (a.sum(), a.mean(), a.max(), np.sum(a), a @ a, a[1]):
        assert type(scalar) is np.float64
    assert hash(a.sum()) == hash(3.0)
    assert type(cnp.sin(a)) is np.ndarray  # cfgrad.numpy's other functions: plain


CREATION = {"asarray", "array", "copy", "zeros", "ones", "full", "empty", "zeros_like",
            "ones_like", "full_like", "empty_like", "arange", "linspace", "logspace",
            "geomspace", "eye", "identity", "tri"}


def test_only_the_constructors_make_arrays() -> None:
    """Over every example of tests/primitives/numpy_cases, eagerly: the creation family returns
    Arrays; every other function returns plain numpy arrays for numpy arrays, and for
    Arrays too, unless it hands an argument back as it was (`cnp.real` of a real one)."""
    made = set()
    for name, examples in EXAMPLES.items():
        fn = resolve(cnp, name)
        for example in examples:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore", RuntimeWarning)
                plain_out = fn(*example.args, **example.kwargs)
                args = [cnp.asarray(a) if isinstance(a, np.ndarray) else a
                        for a in example.args]
                array_out = fn(*args, **example.kwargs)
            if any(type(leaf) is cg.Array for leaf in leaves(plain_out)):
                made.add(name)
            if name not in CREATION:
                for leaf in leaves(array_out):
                    assert type(leaf) is not cg.Array or any(leaf is a for a in args), (
                        f"cnp.{name} of Arrays returned an Array")
    assert made == CREATION
