"""Fitting Lotka–Volterra parameters through an adaptive-step ODE solver.

Run `python examples/ode.py` (about fifteen seconds on an idle machine; `--quick` runs a
few iterations).

The predator–prey model, y = (x, z),

    dx/dt = alpha x - beta x z,    dz/dt = delta x z - gamma z,

is integrated by the Bogacki–Shampine 3(2) pair (the RK23 of scipy and MATLAB's ode23),
with an adaptive step inside a `cg.while_loop` that runs until t reaches the end of the
interval: each iteration tries a step of size h, estimates its error from the embedded
second-order solution, and a `cg.cond` either accepts it (advance t and y, grow h) or
rejects it (keep t and y, shrink h). The number of iterations, and which of them were
rejected, depends on the parameters, so the loop is reversed along the path it took.

Observations of y at OBS_TIMES come from the same solver run with the true parameters
and a much tighter tolerance (so the data are close to the exact solution, not to the
solver's own error). The loss is the mean squared difference between the solver's states
and the observations, taken at the end of each of len(OBS_TIMES) segments: an outer
`fori_loop` over the segments whose body is the adaptive `while_loop` up to the next
observation time. The four parameters are fitted by gradient descent (Adam) from a wrong
guess, each gradient from `cg.vjp` with `Online(8)` checkpointing on the adaptive loop:
at most 8 stored states per segment, whatever the number of steps, with the trip count
unknown until each segment ends. Everything is deterministic.
"""

from __future__ import annotations

import argparse

import numpy as np
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad.api import evaluate
from cfgrad.checkpoint import LoopStats, Online

TRUE_PARAMS = np.array([1.5, 1.0, 3.0, 1.0])  # alpha, beta, gamma, delta
GUESS = np.array([1.2, 0.8, 2.6, 0.8])
Y0 = np.array([1.0, 1.0])
OBS_TIMES = np.linspace(0.5, 5.0, 10)
RTOL, ATOL = 1e-6, 1e-9  # the fit's solver tolerances
DATA_RTOL, DATA_ATOL = 1e-10, 1e-12  # the tolerances the observations are made with
H0 = 1e-2  # first trial step
MAX_STEPS = 100_000  # per segment: a guard against a runaway step-size controller
SNAPSHOTS = 8
LEARNING_RATE = 0.1
ITERATIONS, QUICK_ITERATIONS = 120, 5
ADAM_B1, ADAM_B2, ADAM_EPS = 0.9, 0.999, 1e-8


def lotka_volterra(y, p):
    x, z = y[0], y[1]
    return cnp.stack([p[0] * x - p[1] * x * z, p[3] * x * z - p[2] * z])


def rk23_step(carry, p, t_end, rtol, atol):
    """One trial step of Bogacki–Shampine from `carry` = (t, y, h, k1, accepted,
    rejected), k1 = f(y) being carried over from the previous accepted step (FSAL).
    Returns the next carry: the step accepted (t, y advance, h grows by at most 5x) or
    rejected (h shrinks by at most 5x), by the usual controller 0.9 * err^(-1/3)."""
    t, y, h, k1, accepted, rejected = carry
    h = cnp.minimum(h, t_end - t)  # never step past the end of the segment
    k2 = lotka_volterra(y + 0.5 * h * k1, p)
    k3 = lotka_volterra(y + 0.75 * h * k2, p)
    y_new = y + h * (2.0 / 9.0 * k1 + 1.0 / 3.0 * k2 + 4.0 / 9.0 * k3)
    k4 = lotka_volterra(y_new, p)
    # the third-order solution minus the embedded second-order one
    err = h * (-5.0 / 72.0 * k1 + 1.0 / 12.0 * k2 + 1.0 / 9.0 * k3 - 1.0 / 8.0 * k4)
    scale = atol + rtol * cnp.maximum(cnp.abs(y), cnp.abs(y_new))
    err_norm = cnp.maximum(cnp.sqrt(cnp.mean((err / scale) ** 2)), 1e-10)
    factor = 0.9 * err_norm ** (-1.0 / 3.0)

    def accept():
        t_next = cnp.where(h >= t_end - t, t_end, t + h)  # land exactly on t_end
        return t_next, y_new, h * cnp.minimum(factor, 5.0), k4, accepted + 1, rejected

    def reject():
        return t, y, h * cnp.maximum(factor, 0.2), k1, accepted, rejected + 1

    return cg.cond(err_norm <= 1.0, accept, reject)


def solve_segments(p, y0, obs_times, rtol, atol):
    """The states at `obs_times` (from t = 0), and the accepted and rejected step counts;
    each segment is an adaptive while_loop under Online(SNAPSHOTS) checkpointing."""
    obs_times = cnp.asarray(obs_times)  # indexed by the traced k even when not an argument
    count = obs_times.shape[0]

    def segment(k, carry):
        t, y, h, states, accepted, rejected = carry
        t_end = obs_times[k]
        inner = cg.while_loop(lambda c: c[0] < t_end,
                              lambda c: rk23_step(c, p, t_end, rtol, atol),
                              (t, y, h, lotka_volterra(y, p), accepted, rejected),
                              checkpoint=Online(SNAPSHOTS), max_iters=MAX_STEPS)
        t, y, h, _, accepted, rejected = inner
        # row k of `states` (zero so far) becomes y: a one-hot update, k being traced
        states = states + cnp.expand_dims(y, 0) * (cnp.arange(count) == k)[:, None]
        return t, y, h, states, accepted, rejected

    init = (0.0, y0, H0, cnp.zeros((count, 2)), 0, 0)
    _, _, _, states, accepted, rejected = cg.fori_loop(0, count, segment, init)
    return states, (accepted, rejected)


def loss(p, y0, obs_times, data):
    """Mean squared misfit of the states at the observation times; aux: step counts."""
    states, counts = solve_segments(p, y0, obs_times, RTOL, ATOL)
    return cnp.mean((states - data) ** 2), counts


def observations() -> np.ndarray:
    """The synthetic data: the true parameters, solved at the tight tolerances."""
    states, _ = evaluate(solve_segments, TRUE_PARAMS, Y0, OBS_TIMES, DATA_RTOL, DATA_ATOL)[0]
    return np.asarray(states)


def example_args() -> dict[str, tuple]:
    return {"loss": (GUESS, Y0, OBS_TIMES, np.zeros((len(OBS_TIMES), 2)))}


def loss_and_grad(p: np.ndarray, data: np.ndarray) -> tuple[float, np.ndarray, tuple, list]:
    """Loss, gradient w.r.t. the parameters, (accepted, rejected) steps of the solve and
    the accounting of its loops (`pullback.stats.loops`)."""
    value, pullback, (accepted, rejected) = cg.vjp(loss, p, Y0, OBS_TIMES, data,
                                                   has_aux=True)
    grad = pullback(1.0)[0]
    return float(value), grad, (int(accepted), int(rejected)), pullback.stats.loops


def adaptive_loop(loops: list[LoopStats]) -> LoopStats:
    """The LoopStats of the adaptive while_loop (the one under Online checkpointing)."""
    return next(s for s in loops if s.strategy == repr(Online(SNAPSHOTS)))


def fit(data: np.ndarray, iterations: int) -> tuple[np.ndarray, list[float], tuple, list]:
    """Adam from GUESS; returns the parameters, the losses, the last solve's step counts
    and loop accounting."""
    p = GUESS.copy()
    m, v = np.zeros_like(p), np.zeros_like(p)
    losses = []
    columns = (TextColumn("[bold]fit"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("{task.fields[status]}"))
    with Progress(*columns) as progress:
        task = progress.add_task("fit", total=iterations, status="")
        for i in range(1, iterations + 1):
            value, grad, steps, loops = loss_and_grad(p, data)
            losses.append(value)
            m = ADAM_B1 * m + (1 - ADAM_B1) * grad
            v = ADAM_B2 * v + (1 - ADAM_B2) * grad * grad
            step = m / (1 - ADAM_B1 ** i) / (np.sqrt(v / (1 - ADAM_B2 ** i)) + ADAM_EPS)
            p = p - LEARNING_RATE * step
            inner = adaptive_loop(loops)
            progress.update(task, advance=1, status=(
                f"loss {value:.3e}  p {np.array2string(p, precision=4)}  steps "
                f"{steps[0]} accepted / {steps[1]} rejected  recomputed "
                f"{inner.recompute_steps}"))
    return p, losses, steps, loops


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_ITERATIONS} iterations instead of {ITERATIONS}")
    opts = parser.parse_args(argv)
    iterations = QUICK_ITERATIONS if opts.quick else ITERATIONS

    data = observations()
    print(f"Lotka-Volterra fit: {len(OBS_TIMES)} observations of (x, z) on "
          f"t in [{OBS_TIMES[0]}, {OBS_TIMES[-1]}], RK23 at rtol {RTOL:g}, "
          f"Online({SNAPSHOTS}) checkpointing per segment")
    p, losses, (accepted, rejected), loops = fit(data, iterations)
    inner = adaptive_loop(loops)
    outer = next(s for s in loops if s is not inner)
    fmt = ", ".join
    print(f"true parameters   {fmt(f'{x:.6f}' for x in TRUE_PARAMS)}")
    print(f"initial guess     {fmt(f'{x:.6f}' for x in GUESS)}")
    print(f"fitted parameters {fmt(f'{x:.6f}' for x in p)}")
    print(f"loss: first {losses[0]:.6e}  last {losses[-1]:.6e}  after {iterations} iterations")
    print(f"last solve: {accepted} accepted and {rejected} rejected steps in "
          f"{len(inner.trip_counts)} segments (trip counts {inner.trip_counts})")
    print(f"adaptive loop ({inner.strategy}): forward {inner.forward_steps} body evaluations, "
          f"recomputed {inner.recompute_steps}; peak snapshots {inner.peak_snapshots} "
          f"({inner.peak_bytes} bytes) over the {len(inner.trip_counts)} segments, whose "
          "snapshots are all held until the reverse pass")
    print(f"segment loop ({outer.strategy}): trips {outer.trip_counts}, "
          f"recomputed {outer.recompute_steps}")


if __name__ == "__main__":
    main()
