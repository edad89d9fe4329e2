"""What Online checkpointing costs on a cheap loop body, against StoreAll.

Run `python examples/online_overhead.py` (20 000 steps, a second or so); `--steps 100000`
is the size docs/checkpointing.md reports, `--slots` the snapshot budget (default 10).

The loop is a scalar while_loop, x <- 0.999999 x + 1e-7 sin(x), so the body costs about as
little as a body can and the strategy's own bookkeeping would show if it were not O(1) per
iteration. Online(s) must re-run the body T + t(T, s) times in all (the revolve optimum
for its memory, plus what not knowing T costs), so its time should be about StoreAll's
time per body evaluation times that count, no more. The table prints both ratios; nothing
here asserts a time (tests/docs/test_examples.py only checks that the gradients agree).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad.checkpoint import Online, StoreAll
from cfgrad.revolve import optimal_cost


def decay(x, steps):
    """x after `steps` iterations of the update, as a while_loop on a counter."""
    return cg.while_loop(lambda c: c[0] < steps,
                         lambda c: (c[0] + 1, c[1] * 0.999999 + 1e-7 * cnp.sin(c[1])),
                         (0, x))[1]


def example_args():
    """Arguments to inspect the loop with (`cfgrad inspect examples/online_overhead.py:decay`)."""
    return {"decay": (0.3, np.int64(5))}


def timed(strategy, steps: int, repeats: int = 3):
    """(best forward seconds, best reverse seconds, gradient, loop statistics)."""
    cg.vjp(decay, 0.3, np.int64(2), checkpoint=strategy)[1](1.0)  # lowering, compiling
    best_fwd = best_rev = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        _, pullback = cg.vjp(decay, 0.3, np.int64(steps), checkpoint=strategy)
        middle = time.perf_counter()
        grad = pullback(1.0)[0]
        best_fwd = min(best_fwd, middle - start)
        best_rev = min(best_rev, time.perf_counter() - middle)
    return best_fwd, best_rev, grad, pullback.stats.loops[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--slots", type=int, default=10)
    args = parser.parse_args()
    rows = {}
    for strategy in (StoreAll(), Online(args.slots)):
        rows[repr(strategy)] = timed(strategy, args.steps)
    (fwd0, rev0, grad0, stats0), (fwd, rev, grad, stats) = rows.values()
    assert np.array_equal(grad, grad0), "Online's gradient must be StoreAll's, bit for bit"
    evals0 = stats0.forward_steps + stats0.recompute_steps
    evals = stats.forward_steps + stats.recompute_steps
    print(f"scalar while_loop, T = {args.steps} steps; best of 3 runs")
    print(f"{'strategy':<12} {'forward':>9} {'reverse':>9} {'total':>9} {'body evals':>11}")
    for name, (f, r, _, s) in rows.items():
        print(f"{name:<12} {f:8.3f}s {r:8.3f}s {f + r:8.3f}s "
              f"{s.forward_steps + s.recompute_steps:>11}")
    print(f"Online({args.slots}) / StoreAll: time {(fwd + rev) / (fwd0 + rev0):.2f}x, "
          f"body evaluations {evals / evals0:.2f}x (optimum "
          f"{optimal_cost(args.steps, args.slots) / evals0:.2f}x)")
    print(f"time per body evaluation: StoreAll {(fwd0 + rev0) / evals0 * 1e6:.2f} us, "
          f"Online({args.slots}) {(fwd + rev) / evals * 1e6:.2f} us; the sweep alone "
          f"{fwd / stats.forward_steps * 1e6:.2f} us a step against StoreAll's forward "
          f"{fwd0 / stats0.forward_steps * 1e6:.2f} us")


if __name__ == "__main__":
    main()
