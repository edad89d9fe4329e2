"""cfgrad.optim: SGD (with momentum, Nesterov) and Adam against steps computed by hand on
Python floats, dtype handling for float16 parameters, purity, and a small end-to-end fit
with cg.grad."""

from __future__ import annotations

import math

import numpy as np
import pytest

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad.optim import AdamState, adam, sgd
from cfgrad.tree import flatten

P0, G1, G2, LR, MOM = 1.0, 0.5, -0.25, 0.1, 0.9


def scalar_tree(value):
    """A nested tree whose every leaf holds `value`, in several containers and dtypes."""
    return {"a": np.array([value, value]), "b": [np.array([[value]]), (np.float64(value),)]}


def leaves(tree):
    return [np.asarray(x) for x in flatten(tree)[0]]


def run(opt, grads_seq, p0=P0):
    params = scalar_tree(p0)
    state = opt.init(params)
    for g in grads_seq:
        params, state = opt.update(scalar_tree(g), state, params)
    return params, state


def assert_all_leaves(tree, value, rtol=1e-15):
    for x in leaves(tree):
        np.testing.assert_allclose(x, np.full(x.shape, value), rtol=rtol)


def test_sgd_plain_step():
    params, state = run(sgd(LR), [G1, G2])
    assert state is None
    assert_all_leaves(params, P0 - LR * G1 - LR * G2)


def test_sgd_momentum_two_steps():
    # PyTorch: b1 = g1, p1 = p0 - lr b1; b2 = m b1 + g2, p2 = p1 - lr b2
    b1 = G1
    p1 = P0 - LR * b1
    b2 = MOM * b1 + G2
    p2 = p1 - LR * b2
    params, state = run(sgd(LR, momentum=MOM), [G1, G2])
    assert_all_leaves(params, p2)
    assert_all_leaves(state, b2)


def test_sgd_nesterov_two_steps():
    # p -= lr (g + m b) with the updated buffer b
    b1 = G1
    p1 = P0 - LR * (G1 + MOM * b1)
    b2 = MOM * b1 + G2
    p2 = p1 - LR * (G2 + MOM * b2)
    params, _ = run(sgd(LR, momentum=MOM, nesterov=True), [G1, G2])
    assert_all_leaves(params, p2)


def test_adam_two_steps():
    b1, b2, eps = 0.9, 0.999, 1e-8
    m = v = 0.0
    p = P0
    for t, g in enumerate([G1, G2], start=1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        p = p - LR * (m / (1 - b1 ** t)) / (math.sqrt(v / (1 - b2 ** t)) + eps)
    params, state = run(adam(LR), [G1, G2])
    assert isinstance(state, AdamState) and state.count == 2
    assert_all_leaves(params, p, rtol=1e-14)
    assert_all_leaves(state.mu, m, rtol=1e-14)
    assert_all_leaves(state.nu, v, rtol=1e-14)


def test_adam_first_step_moves_every_parameter_by_about_the_learning_rate():
    """Bias correction makes the first step lr * g / (|g| + eps), whatever |g| is."""
    params = np.array([0.0, 0.0, 0.0])
    opt = adam(0.01)
    new, _ = opt.update(np.array([1e-6, -3.0, 100.0]), opt.init(params), params)
    np.testing.assert_allclose(new, [-0.01, 0.01, -0.01], rtol=1e-2)


@pytest.mark.parametrize("opt", [sgd(LR), sgd(LR, momentum=MOM), adam(LR)],
                         ids=["sgd", "momentum", "adam"])
def test_float16_params_keep_their_dtype_with_float32_state(opt):
    params = {"w": np.array([1.0, -2.0], np.float16), "v": np.array([3.0], np.float32)}
    grads = {"w": np.array([0.5, 0.25], np.float32), "v": np.array([1.0], np.float16)}
    state = opt.init(params)
    new, state = opt.update(grads, state, params)
    new, state = opt.update(grads, state, new)
    assert new["w"].dtype == np.float16 and new["v"].dtype == np.float32
    state_leaves = [x for x in flatten(state)[0] if isinstance(x, np.ndarray)]
    assert all(x.dtype == np.float32 for x in state_leaves)
    reference, _ = run_float64(opt, params, grads)
    np.testing.assert_allclose(new["w"], reference["w"], rtol=1e-3)  # float16 rounding


def run_float64(opt, params, grads):
    p64 = {k: v.astype(np.float64) for k, v in params.items()}
    g64 = {k: v.astype(np.float64) for k, v in grads.items()}
    state = opt.init(p64)
    for _ in range(2):
        p64, state = opt.update(g64, state, p64)
    return p64, state


def test_small_float16_updates_are_not_lost_in_the_state():
    """Adam's second moment of a 1e-4 gradient is 1e-11 after one step: float16 flushes
    it to 0 (its smallest subnormal is 6e-8); the float32 state keeps it."""
    params = np.array([1.0], np.float16)
    opt = adam(1e-3)
    _, state = opt.update(np.array([1e-4], np.float16), opt.init(params), params)
    assert state.nu.dtype == np.float32 and state.nu[0] == pytest.approx(1e-11, rel=1e-3)


@pytest.mark.parametrize("opt", [sgd(LR, momentum=MOM), adam(LR)], ids=["momentum", "adam"])
def test_updates_are_pure(opt):
    params = scalar_tree(P0)
    grads = scalar_tree(G1)
    state = opt.init(params)
    before = [x.copy() for x in leaves((params, grads, state))]
    opt.update(grads, state, params)
    for x, y in zip(leaves((params, grads, state)), before):
        np.testing.assert_array_equal(x, y)


def test_mismatched_structures_are_refused():
    opt = sgd(LR)
    with pytest.raises(ValueError, match="structures differ"):
        opt.update({"a": np.ones(1)}, opt.init({"b": np.ones(1)}), {"b": np.ones(1)})


@pytest.mark.parametrize("make", [
    lambda: sgd(LR, momentum=-0.1), lambda: sgd(LR, nesterov=True),
    lambda: adam(LR, b1=1.0), lambda: adam(LR, b2=-0.5),
])
def test_invalid_hyperparameters(make):
    with pytest.raises(cg.ArgumentValueError):
        make()


@pytest.mark.parametrize("opt", [sgd(0.05, momentum=0.9), adam(0.05)],
                         ids=["momentum", "adam"])
def test_fits_a_least_squares_problem_with_cg_grad(opt):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((20, 3))
    w_true = np.array([1.0, -2.0, 0.5])
    y = a @ w_true

    def loss(p):
        return cnp.mean((a @ p["w"] + p["b"] - y) ** 2)

    params = {"w": np.zeros(3), "b": np.zeros(())}
    state = opt.init(params)
    for _ in range(800):
        params, state = opt.update(cg.grad(loss)(params), state, params)
    np.testing.assert_allclose(params["w"], w_true, atol=1e-3)
    assert abs(float(params["b"])) < 1e-3
