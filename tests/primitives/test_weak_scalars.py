"""Python numbers are weakly typed in `cfgrad.numpy` (docs/api.md, as in JAX): a function
that joins or selects its operands keeps a float32 array float32 beside a Python float,
also as a loop body (where float64 would change the carry's dtype), and lists or tuples
holding traced values become arrays (`cnp.array`, `cnp.roll`'s shifts)."""

import numpy as np
import pytest

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad.testing import check_grads

C32 = np.array([0.3, -0.5, 0.9, 0.1], np.float32)
I32 = np.array([1, 4, 2, 7], np.int32)

# name -> a function of a 1-D array of 4 entries returning 4 entries of its dtype
SAME_LENGTH = {
    "heaviside(x, 0.5)": lambda x: cnp.heaviside(x, 0.5),
    "heaviside(0.5, x)": lambda x: cnp.heaviside(0.5, x) * x,
    "diff(prepend=0.0)": lambda x: cnp.diff(x, prepend=0.0),
    "diff(append=1.0)": lambda x: cnp.diff(x, append=1.0),
    "append(x, 1.0)": lambda x: cnp.append(x, 1.0)[1:],
    "append(1.0, x)": lambda x: cnp.append(1.0, x)[:-1],
    "select(default=0.5)": lambda x: cnp.select([x > 0], [x], 0.5),
    "select(choice 0.5)": lambda x: cnp.select([x > 0], [0.5], x),
    "pad(constant_values=1.0)": lambda x: cnp.pad(x, 1, constant_values=1.0)[1:-1] + x[0],
    "pad(linear_ramp)": lambda x: cnp.pad(x, 1, mode="linear_ramp", end_values=1.0)[2:],
    "full_like(x, 1.0)": lambda x: cnp.full_like(x, 1.0) * x,
    "where(c, x, 0.5)": lambda x: cnp.where(x > 0, x, 0.5),
    "clip(x, 0.0, 1.0)": lambda x: cnp.clip(x, 0.0, 1.0),
    "nan_to_num(x, nan=1.0)": lambda x: cnp.nan_to_num(x, nan=1.0, posinf=2.0, neginf=-2.0),
    "interp(left, right)": lambda x: cnp.interp(x, x[:2] * 0 + cnp.array([0, 1], x.dtype),
                                                x[:2], left=0.0, right=1.0),
    "insert(x, 1, 1.0)": lambda x: cnp.insert(x, 1, 1.0)[1:],
    "ediff1d(to_end=0.0)": lambda x: cnp.ediff1d(x, to_end=0.0),
    "fmax(x, 0.5)": lambda x: cnp.fmax(x, 0.5),
    "fmin(0.5, x)": lambda x: cnp.fmin(0.5, x),
    "copysign(1.0, x)": lambda x: cnp.copysign(1.0, x) * x,
    "hstack([x[1:], 1.0])": lambda x: cnp.hstack([x[1:], 1.0]),
    "stack([x[0], 1.0, ...])": lambda x: cnp.stack([x[0], 1.0, x[2], 2.0]),
    "polyval(x, 0.5)": lambda x: cnp.polyval(x, 0.5) + x,
    "polyint(x, k=1.0)": lambda x: cnp.polyint(x, k=1.0)[1:],
    "polyder(x)": lambda x: cnp.append(cnp.polyder(x), 0.0),
    "outer(x, 2.0)": lambda x: cnp.ravel(cnp.outer(x, 2.0)),
    "kron(x, 2.0)": lambda x: cnp.kron(x, 2.0),
    "block([x[1:], 1.0])": lambda x: cnp.block([x[1:], 1.0]),
    "choose(i, [x, 0.5])": lambda x: cnp.choose(np.array([0, 1, 0, 1]), [x, 0.5]),
    "array([x[0], 1.0, ...])": lambda x: cnp.array([x[0], 1.0, x[2], 2]),
    "asarray([[x[0], 1.0], [2.0, x[3]]])": lambda x: cnp.ravel(
        cnp.asarray([[x[0], 1.0], [2.0, x[3]]])),
}


@pytest.mark.parametrize("name", SAME_LENGTH)
def test_python_float_keeps_float32(name):
    f = SAME_LENGTH[name]
    if not name.startswith(("array", "asarray")):  # concrete lists are numpy's: float64
        assert cnp.asarray(f(C32)).dtype == np.float32, "concrete"
    value, tangent = cg.jvp(f, (C32,), (np.ones(4, np.float32),))
    assert value.dtype == np.float32 and tangent.dtype == np.float32, "traced"
    # as a loop body the carry keeps its dtype, as JAX (float64 was a LoweringError)
    loop = cg.grad(lambda x: cnp.sum(cg.fori_loop(0, 2, lambda i, v: f(v), x)))(C32)
    assert loop.dtype == np.float32


@pytest.mark.parametrize("f", [lambda x: cnp.diff(x, prepend=0),
                               lambda x: cnp.append(x, 1)[1:],
                               lambda x: cnp.select([x > 2], [x], 0)])
def test_python_int_keeps_int32(f):
    assert cnp.asarray(f(I32)).dtype == np.int32
    assert cg.lower(f, I32).outputs[0].type.dtype == np.int32


def test_python_float_beside_integers_is_float64():
    """A float Python number does not fit an integer array: float64, as JAX."""
    assert cnp.append(I32, 1.5).dtype == np.float64
    assert cg.lower(lambda x: cnp.diff(x, prepend=0.5), I32).outputs[0].type.dtype == \
        np.float64


def test_numpy_scalars_are_not_weak():
    """np.float64(1.0) is a float subclass but carries its dtype, as in JAX."""
    assert cnp.append(C32, np.float64(1.0)).dtype == np.float64


def test_array_of_traced_values():
    def f(x):
        v = cnp.array([x, 2.0 * x, 3])
        return cnp.sum(v * v)

    assert cg.grad(f)(1.5) == pytest.approx(2 * 1.5 * 5)
    check_grads(f, (0.7,))

    def g(x):  # nested lists of traced arrays and numbers, a leading axis per level
        m = cnp.asarray([[x, x * x], [cnp.sin(x), cnp.ones(3)]])
        assert m.shape == (2, 2, 3)
        return cnp.sum(m * cnp.arange(12.0).reshape(2, 2, 3))

    check_grads(g, (np.array([0.3, -0.2, 0.8]),))
    assert cg.jvp(lambda x: cnp.array((x, 1.0)), (np.float32(2.0),),
                  (np.float32(1.0),))[0].dtype == np.float32
    assert cg.jvp(lambda x: cnp.array([x, 1.0], dtype=np.float64), (np.float32(2.0),),
                  (np.float32(1.0),))[0].dtype == np.float64
    # an integer traced value beside a Python float: float64, as JAX
    out = cg.lower(lambda i: cnp.array([i, 0.5]), np.int32(1)).outputs[0].type
    assert out.dtype == np.float64 and out.shape == (2,)


def test_roll_by_a_tuple_of_traced_shifts():
    weights = np.arange(12.0).reshape(3, 4)

    def f(A, i):
        return cnp.sum(cnp.roll(A, (i, -i), axis=(0, 1)) * weights)

    A = np.random.default_rng(0).normal(size=(3, 4))
    for i in (1, 2, -1):
        assert f(A, i) == pytest.approx(np.sum(np.roll(A, (i, -i), axis=(0, 1)) * weights))
        grad = cg.grad(f)(A, i)
        eps = 1e-6
        fd = np.zeros_like(A)
        for k in np.ndindex(A.shape):
            step = np.zeros_like(A)
            step[k] = eps
            fd[k] = (f(A + step, i) - f(A - step, i)) / (2 * eps)
        np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-6)
        # the same traced shift in a list, and with axis None (their sum)
        np.testing.assert_allclose(
            cg.grad(lambda A, i: cnp.sum(cnp.roll(A, [i, 1], axis=None) * weights))(A, i),
            np.roll(weights, -(i + 1)))
