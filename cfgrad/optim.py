"""Small optimizers as `(init, update)` pairs on pytrees: SGD with momentum and Adam.

    opt = cfgrad.optim.adam(1e-3)
    state = opt.init(params)
    params, state = opt.update(grads, state, params)

The functions are pure: they return new arrays and never modify their inputs, so a
`LossScaler` can skip a step by keeping the old `(params, state)`. Parameters keep their
dtypes. The arithmetic and the optimizer state are at least float32 (float16 parameters
get float32 momentum and moment estimates), since float16 cannot hold a running average of
small gradients or Adam's squared ones. These run eagerly on numpy arrays.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from .errors import ArgumentValueError
from .tree import tree_map


class Optimizer(NamedTuple):
    """`init(params) -> state`; `update(grads, state, params) -> (new_params, new_state)`."""

    init: Callable[[Any], Any]
    update: Callable[[Any, Any, Any], tuple[Any, Any]]


class AdamState(NamedTuple):
    count: int  # steps taken, for the bias corrections
    mu: Any  # first-moment estimates, like the params
    nu: Any  # second-moment estimates, like the params


def _math_dtype(x: Any) -> np.dtype:
    return np.result_type(np.asarray(x).dtype, np.float32)


def _in_math(x: Any, like: Any) -> np.ndarray:
    """`x` as an array in the arithmetic dtype of `like` (a parameter or a state leaf)."""
    return np.asarray(x, dtype=_math_dtype(like))


def _zeros_for(p: Any) -> np.ndarray:
    return np.zeros(np.shape(p), _math_dtype(p))


def _moved(p: Any, delta: np.ndarray) -> np.ndarray:
    """p - delta, computed in the arithmetic dtype and returned in p's dtype."""
    return (_in_math(p, p) - delta).astype(np.asarray(p).dtype)


def sgd(learning_rate: float, momentum: float = 0.0, nesterov: bool = False) -> Optimizer:
    """Stochastic gradient descent, with PyTorch's momentum convention:
    `b = momentum * b + g`, then `p -= lr * b` (or `p -= lr * (g + momentum * b)` with
    Nesterov). Without momentum the state is None."""
    if momentum < 0:
        raise ArgumentValueError(f"sgd: momentum must be >= 0, got {momentum}")
    if nesterov and momentum == 0:
        raise ArgumentValueError("sgd: nesterov=True needs a positive momentum")

    def init(params: Any) -> Any:
        return tree_map(_zeros_for, params) if momentum else None

    def update(grads: Any, state: Any, params: Any) -> tuple[Any, Any]:
        if not momentum:
            return tree_map(lambda p, g: _moved(p, learning_rate * _in_math(g, p)),
                            params, grads), None
        buf = tree_map(lambda b, g: momentum * b + _in_math(g, b), state, grads)
        if nesterov:
            step = tree_map(lambda g, b: _in_math(g, b) + momentum * b, grads, buf)
        else:
            step = buf
        return tree_map(lambda p, s: _moved(p, learning_rate * s), params, step), buf

    return Optimizer(init, update)


def adam(learning_rate: float, b1: float = 0.9, b2: float = 0.999,
         eps: float = 1e-8) -> Optimizer:
    """Adam (Kingma & Ba) with bias-corrected moments:
    `m = b1 m + (1 - b1) g`, `v = b2 v + (1 - b2) g^2`,
    `p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)`."""
    if not (0 <= b1 < 1 and 0 <= b2 < 1):
        raise ArgumentValueError(f"adam: b1 and b2 must be in [0, 1), got {b1} and {b2}")

    def init(params: Any) -> AdamState:
        return AdamState(0, tree_map(_zeros_for, params), tree_map(_zeros_for, params))

    def update(grads: Any, state: AdamState, params: Any) -> tuple[Any, AdamState]:
        count = state.count + 1
        mu = tree_map(lambda m, g: b1 * m + (1 - b1) * _in_math(g, m), state.mu, grads)
        nu = tree_map(lambda v, g: b2 * v + (1 - b2) * np.square(_in_math(g, v)),
                      state.nu, grads)
        c1, c2 = 1 - b1 ** count, 1 - b2 ** count
        new_params = tree_map(
            lambda p, m, v: _moved(p, learning_rate * (m / c1) / (np.sqrt(v / c2) + eps)),
            params, mu, nu)
        return new_params, AdamState(count, mu, nu)

    return Optimizer(init, update)
