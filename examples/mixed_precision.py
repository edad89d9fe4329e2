"""Training a small MLP in float16 with and without dynamic loss scaling.

Run `python examples/mixed_precision.py` (a few seconds).

A two-layer tanh MLP fits a smooth function of 4 inputs. Its forward and gradient
programs run in float16 end to end (numpy float16 parameters and data); the optimizer
(Adam) updates float32 master weights, which are cast to float16 for every step, as in
the usual mixed-precision recipe. The loss is the mean squared error weighted by 2**-20,
as a loss averaged over a huge batch or one term of a weighted sum can be, so its true
gradients are tiny: their median is about 5e-8, and most are below float16's smallest
subnormal (2**-24, about 6e-8). Worse, the cotangent entering the mean, 2**-20 / 64 =
2**-26, is below it too, so without scaling every gradient entry, even the few that float16
could hold, flushes to exactly zero and the weights never move.

Three runs from the same initial weights, 300 Adam steps each:

- float32 programs (the reference; a disabled `LossScaler` passes everything through);
- float16 programs without scaling: every gradient entry is 0;
- float16 programs with `cg.LossScaler(growth_interval=50)`: the loss is multiplied by the
  scale inside the program, the gradients are unscaled into float32 before the update,
  and they match the float32 reference to float16 precision.

The scale starts at GradScaler's 2**16, which is inf in float16: a float16 loss's own
cotangent is the scale, so the first step overflows, is skipped, and the scale backs off
to 2**15. Every 50 clean steps it tries 2**16 again and skips that one step: with 300
steps, the steps 1, 52, 103, 154, 205 and 256 are skipped and the run ends at 2**15.

The gradient comparison uses the first applied step of each run, whose gradients are at the
initial weights (a skipped step leaves the weights untouched). The relative error is taken
per parameter array, max |g - g_ref| / max |g_ref|, and the largest over the arrays is
printed; float16's machine epsilon is 2**-10, about 1e-3.
"""

from __future__ import annotations

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad.tree import flatten, tree_map

LOSS_WEIGHT = 2.0 ** -20
SAMPLES, INPUTS, HIDDEN = 64, 4, 16
STEPS = 300
LEARNING_RATE = 1e-2
GROWTH_INTERVAL = 50


def loss(params, x, y):
    """LOSS_WEIGHT * mean squared error of the MLP; traced with the dtypes of its inputs
    (the Python-scalar weight is weakly typed, so a float16 program stays float16)."""
    hidden = cnp.tanh(x @ params["W1"] + params["b1"])
    out = hidden @ params["W2"] + params["b2"]
    return cnp.mean((out - y) ** 2) * LOSS_WEIGHT


def make_problem(seed: int = 0) -> tuple[dict, np.ndarray, np.ndarray]:
    """float16 initial weights and data; y = sin(x . a) + 0.5 cos(x . b)."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1.0, 1.0, (SAMPLES, INPUTS))
    a, b = rng.standard_normal(INPUTS), rng.standard_normal(INPUTS)
    y = (np.sin(x @ a) + 0.5 * np.cos(x @ b))[:, None]
    params = {"W1": rng.standard_normal((INPUTS, HIDDEN)) / np.sqrt(INPUTS),
              "b1": np.zeros(HIDDEN),
              "W2": rng.standard_normal((HIDDEN, 1)) / np.sqrt(HIDDEN),
              "b2": np.zeros(1)}
    as16 = lambda t: tree_map(lambda v: v.astype(np.float16), t)  # noqa: E731
    return as16(params), as16(x), as16(y)


def example_args() -> dict[str, tuple]:
    return {"loss": make_problem()}


def mse(params, x, y) -> float:
    """The unweighted mean squared error, in float64, for reporting."""
    as64 = tree_map(lambda v: np.asarray(v, np.float64), (params, x, y))
    return float(loss(*as64) / LOSS_WEIGHT)


def train(params16, x, y, dtype, scaler, progress, label):
    """STEPS Adam steps on float32 master weights with programs in `dtype`; returns the
    final master weights and the first gradients applied (unscaled, at the initial
    weights, since skipped steps change nothing)."""
    opt = cg.optim.adam(LEARNING_RATE)
    master = tree_map(lambda v: v.astype(np.float32), params16)
    state = (master, opt.init(master))
    value_and_grad = scaler.value_and_grad(loss)
    x, y = x.astype(dtype), y.astype(dtype)
    applied = []

    def apply(state, grads):
        if not applied:
            applied.append(grads)
        params, opt_state = state
        return opt.update(grads, opt_state, params)

    task = progress.add_task(label, total=STEPS)
    for _ in range(STEPS):
        params = tree_map(lambda v: v.astype(dtype), state[0])
        _, grads = value_and_grad(params, x, y)
        state = scaler.step(apply, state, grads)
        scaler.update()
        progress.advance(task)
    return state[0], applied[0]


def leaves(tree) -> list[np.ndarray]:
    return [np.asarray(v) for v in flatten(tree)[0]]


def main() -> None:
    params16, x, y = make_problem()
    scaler = cg.LossScaler(growth_interval=GROWTH_INTERVAL)
    runs = [("float32 reference", np.float32, cg.LossScaler(enabled=False)),
            ("float16 without scaling", np.float16, cg.LossScaler(enabled=False)),
            ("float16 with LossScaler", np.float16, scaler)]
    columns = (TextColumn("{task.description:<24}"), BarColumn(), MofNCompleteColumn())
    results = {}
    with Progress(*columns, console=Console(stderr=True)) as progress:
        for label, dtype, run_scaler in runs:
            results[label] = train(params16, x, y, dtype, run_scaler, progress, label)

    reference = leaves(results["float32 reference"][1])
    size = sum(g.size for g in reference)
    print(f"float16 MLP {INPUTS}-{HIDDEN}-1 (tanh), {SAMPLES} samples, "
          f"loss = 2^{int(np.log2(LOSS_WEIGHT))} * mean squared error")
    tiny = float(np.finfo(np.float16).smallest_subnormal)
    print(f"gradients at the initial weights ({size} entries; float16's smallest subnormal "
          f"is {tiny:.2e}):")
    for label, (_, grads) in results.items():
        g = leaves(grads)
        zeros = sum(int(np.count_nonzero(v == 0)) for v in g)
        line = f"  {label:<24} {zeros:3d} of {size} exactly zero"
        if label == "float32 reference":
            magnitudes = np.abs(np.concatenate([v.ravel() for v in g]))
            below = int(np.count_nonzero(magnitudes < tiny))
            line += (f"   median |g| {float(np.median(magnitudes)):.2e}, {below} below the "
                     "smallest subnormal")
        else:
            error = max(float(np.abs(v.astype(np.float64) - r).max() / np.abs(r).max())
                        for v, r in zip(g, reference))
            line += f"   max relative error vs float32 {error:.2e}"
        print(line)
    print(f"training: {STEPS} Adam steps (lr {LEARNING_RATE}) on float32 master weights")
    start = mse(params16, x, y)
    for label, (master, _) in results.items():
        line = f"  {label:<24} mse {start:.6f} -> {mse(master, x, y):.6f}"
        if all(np.array_equal(a, b) for a, b in zip(leaves(master), leaves(params16))):
            line += "   (the weights never moved)"
        if label == "float16 with LossScaler":
            line += f"   final scale {scaler.scale:.0f}, skipped steps {scaler.skipped_steps}"
        print(line)
    print(f"float16 epsilon {float(np.finfo(np.float16).eps):.2e}")


if __name__ == "__main__":
    main()
