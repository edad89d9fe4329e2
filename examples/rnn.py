"""A dynamic-length tanh RNN: the loop stops when the hidden state grows too large.

Run `python examples/rnn.py`.

    h_0 = 0;  h_{t+1} = tanh(W h_t + U x_t + b)   while t < T and |h_t| < threshold
    loss = 0.5 |h_final - target|^2

The number of steps is decided by the data, inside the program, with the sequence
indexed by the traced step counter (`X[t]`). The gradient w.r.t. the weights flows
through exactly the steps that ran; a central finite difference of one weight checks it
(the perturbation is far too small to move the step at which the norm crosses).
"""

from __future__ import annotations

import numpy as np

import cfgrad as cg
import cfgrad.numpy as cnp

EPS = 1e-6  # finite-difference step
SPOT = (3, 5)  # the recurrent weight W[3, 5] checked by finite differences


def rnn_loss(W, U, b, X, target, threshold):
    """Run the RNN over the rows of `X` until they end or |h| reaches `threshold`."""
    steps = X.shape[0]

    def running(carry):
        h, t = carry
        return (t < steps) & (cnp.sum(h * h) < threshold ** 2)

    def step(carry):
        h, t = carry
        return cnp.tanh(W @ h + U @ X[t] + b), t + 1

    h, _ = cg.while_loop(running, step, (cnp.zeros(b.shape[0]), 0), max_iters=steps)
    return 0.5 * cnp.sum((h - target) ** 2)


def make_problem(hidden: int, inputs: int, steps: int, threshold: float,
                 seed: int = 0) -> tuple:
    """Weights and a sequence whose inputs grow along it, so the hidden state's norm rises
    over time and crosses `threshold` partway through when it is reachable (|h| is at
    most sqrt(hidden) since every entry is a tanh)."""
    rng = np.random.default_rng(seed)
    W = rng.standard_normal((hidden, hidden)) * (0.5 / np.sqrt(hidden))
    U = rng.standard_normal((hidden, inputs)) * (1.0 / np.sqrt(inputs))
    b = rng.standard_normal(hidden) * 0.1
    ramp = np.linspace(0.0, 2.0, steps)[:, None]
    X = ramp * rng.standard_normal((steps, inputs))
    target = rng.standard_normal(hidden) * 0.5
    return W, U, b, X, target, threshold


def example_args() -> dict[str, tuple]:
    return {"rnn_loss": make_problem(hidden=16, inputs=4, steps=80, threshold=3.0)}


def main() -> None:
    args = example_args()["rnn_loss"]
    W, U, b, X, target, threshold = args
    loss, pullback = cg.vjp(rnn_loss, *args)
    gW, gU, gb = pullback(1.0)[:3]
    trips = pullback.stats.loops[0].trip_counts[0]
    print(f"tanh RNN, hidden {W.shape[0]}, inputs {U.shape[1]}, sequence length {X.shape[0]}, "
          f"stop when |h| >= {threshold}")
    print(f"steps run: {trips} of {X.shape[0]}   loss = {float(loss):.12f}")
    print(f"gradient norms: |dL/dW| = {np.linalg.norm(gW):.6f}   "
          f"|dL/dU| = {np.linalg.norm(gU):.6f}   |dL/db| = {np.linalg.norm(gb):.6f}")

    bump = np.zeros_like(W)
    bump[SPOT] = EPS
    plus = rnn_loss(W + bump, U, b, X, target, threshold)
    minus = rnn_loss(W - bump, U, b, X, target, threshold)
    fd = (float(plus) - float(minus)) / (2 * EPS)
    print(f"dL/dW{list(SPOT)}: cfgrad {float(gW[SPOT]):.12f}   finite diff {fd:.12f}   "
          f"difference {abs(float(gW[SPOT]) - fd):.1e}")


if __name__ == "__main__":
    main()
