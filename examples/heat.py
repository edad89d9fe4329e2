"""Reaction–diffusion stepping reversed in bounded memory: StoreAll, Binomial and Online.

Run `python examples/heat.py` (about a minute at full size, N = 100 000 points and
T = 2000 steps, and 1.6 GB of memory for StoreAll; `--n` and `--steps` choose smaller
sizes).

The explicit scheme for the 1-D heat equation with a cubic (Allen–Cahn) reaction term on a
periodic grid of n points, spacing dx = 1/n,

    u_{t+1} = u_t + dt * (D * laplacian(u_t) + r * (u_t - u_t^3)),
    laplacian(u)_i = (u_{i-1} - 2 u_i + u_{i+1}) / dx^2,

with D = MU * dx^2 / dt (MU = D dt / dx^2 is the diffusion number; the scheme is stable
for MU <= 1/2). The loss is the final energy E = 0.5 * sum(u_T^2) * dx and the gradient is
taken with respect to the initial state u_0, a vector of n values.

Every step's adjoint reads that step's u and u*u (the derivative of u*u*u); it recomputes
u*u from u rather than keeping it (passes.rematerialize_primal_reads), so reversing the
loop by storing everything (`StoreAll`) holds T arrays of n floats: 1.6 GB at full size.
`Binomial(10)` (a `fori_loop`, T known on entry) holds at most 10 states u and one step's
array, and pays the revolve minimum of recomputed steps; `Online(10)` runs the
same stepping as a `while_loop` on a time bound (t < t_end), whose trip count is known only
when it exits.

Each strategy runs in a subprocess of its own (this script re-invoked with `--strategy`),
so that its peak resident set size (VmHWM on Linux, see max_rss_bytes) measures that
strategy alone. The parent collects the times, the accounting of `pullback.stats` and the
gradients, checks that the gradients are identical bit for bit across strategies
(`np.array_equal`: every strategy runs the same floating-point operations in the same
order) and that they match a central finite-difference directional derivative of E
computed by running the stepping eagerly on numpy.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad.checkpoint import Binomial, Online, StoreAll

MU = 0.25  # diffusion number D dt / dx^2
DT = 0.005  # time step
R = 1.0  # reaction rate
SNAPSHOTS = 10
STRATEGIES = {  # --strategy name -> (loop kind, checkpoint strategy)
    "StoreAll": ("fori_loop", StoreAll()),
    f"Binomial({SNAPSHOTS})": ("fori_loop", Binomial(SNAPSHOTS)),
    f"Online({SNAPSHOTS})": ("while_loop", Online(SNAPSHOTS)),
}
FD_EPS = 1e-5  # finite-difference step along a unit-max-norm direction
FD_RTOL = 1e-5  # the central difference's error, O(FD_EPS^2) plus rounding: 3e-7 at full size


def step(u, xp=cnp):
    """One explicit step, written once for any array namespace `xp` with `roll` and `sum`:
    cfgrad.numpy (traced here, eager on numpy arrays), numpy, torch, jax.numpy (the
    benchmark runs it on each)."""
    n = u.shape[0]
    dx = 1.0 / n
    diffusion = MU * dx * dx / DT
    laplacian = (xp.roll(u, 1) - 2.0 * u + xp.roll(u, -1)) / (dx * dx)
    # u * u * u rather than u ** 3: numpy's power of negative bases goes through the C
    # library's pow, two orders of magnitude slower on this u, which would handicap the
    # hand-written numpy baseline of the benchmark
    return u + DT * (diffusion * laplacian + R * (u - u * u * u))


def energy(u, xp=cnp):
    """E = 0.5 * sum(u^2) * dx with dx = 1/n."""
    return 0.5 * xp.sum(u * u) / u.shape[0]


def final_energy(u0, steps):
    """E(u_T) after `steps` steps of a fori_loop (the trip count, traced, is known on entry,
    so Binomial uses the revolve schedule)."""
    return energy(cg.fori_loop(0, steps, lambda i, u: step(u), u0))


def final_energy_until(u0, t_end):
    """E(u) once the time t, advanced by DT per step from 0, reaches `t_end`: a while_loop
    whose trip count is decided by the loop itself."""

    def body(carry):
        u, t = carry
        return step(u), t + DT

    u, _ = cg.while_loop(lambda carry: carry[1] < t_end, body, (u0, 0.0))
    return energy(u)


def time_bound(steps: int) -> float:
    """t_end for which the while_loop runs exactly `steps` steps: half a step past
    (steps - 1) DT, so the rounding of the accumulated t cannot add or drop a step."""
    return (steps - 0.5) * DT


def initial_state(n: int) -> np.ndarray:
    """A smooth periodic profile with several modes, amplitude below 1 (the reaction
    drives u towards +-1, the diffusion smooths the fronts between them)."""
    x = np.arange(n) / n
    return 0.6 * np.sin(2 * np.pi * x) + 0.3 * np.cos(6 * np.pi * x) + 0.1 * np.sin(
        20 * np.pi * x)


def example_args() -> dict[str, tuple]:
    return {"final_energy": (initial_state(64), 5),
            "final_energy_until": (initial_state(64), time_bound(5))}


def max_rss_bytes() -> int:
    """This process's peak resident set size so far: VmHWM of /proc/self/status on Linux.

    Not ru_maxrss there: Linux carries ru_maxrss across fork and exec, so a subprocess
    started from a parent that holds 300 MB (one that imported torch and jax, say) reports
    at least 300 MB whatever it does itself. VmHWM belongs to the process's own address
    space. Elsewhere, ru_maxrss (KiB on Linux, bytes on macOS)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def run_strategy(name: str, n: int, steps: int, out: Path) -> dict:
    """Gradient of E w.r.t. u_0 under one strategy, in this process: its time, accounting
    and peak RSS (before the gradient, after setting up, and at the end); the gradient goes
    to `out`."""
    kind, strategy = STRATEGIES[name]
    u0 = initial_state(n)
    if kind == "fori_loop":
        fun, bound = final_energy, steps
    else:
        fun, bound = final_energy_until, time_bound(steps)
    cg.lower(fun, u0, bound)  # trace once outside the timing (a tiny Program)
    rss_setup = max_rss_bytes()
    start, cpu_start = time.perf_counter(), time.process_time()
    value, pullback = cg.vjp(fun, u0, bound, checkpoint=strategy)
    grad, _ = pullback(1.0)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    loop = pullback.stats.loops[0]
    np.save(out, grad)
    return {"strategy": name, "loop": kind, "seconds": seconds, "cpu": cpu, "value": float(value),
            "trips": loop.trip_counts, "forward_steps": loop.forward_steps,
            "recompute_steps": loop.recompute_steps, "peak_snapshots": loop.peak_snapshots,
            "peak_bytes": loop.peak_bytes, "rss_setup": rss_setup, "rss_peak": max_rss_bytes()}


def in_subprocess(name: str, n: int, steps: int, out: Path) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--strategy", name, "--n", str(n),
                           "--steps", str(steps), "--out", str(out)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.splitlines()[-1])


def eager_energy(u0: np.ndarray, steps: int) -> float:
    """E(u_T) by the same step function run eagerly on numpy arrays (no cfgrad Program)."""
    u = u0
    for _ in range(steps):
        u = step(u, np)
    return float(energy(u, np))


def memory_ratios(big: dict, small: dict) -> str:
    """How many times more memory `big` took than `small` by each measure (results of
    run_strategy or of the benchmark's heat workers)."""
    big_growth = big["rss_peak"] - big["rss_setup"]
    small_growth = small["rss_peak"] - small["rss_setup"]
    growth = f"{big_growth / small_growth:.1f}x" if small_growth > 0 else "n/a (no growth)"
    return (f"{big['peak_bytes'] / small['peak_bytes']:.1f}x by stats peak_bytes, "
            f"{big['rss_peak'] / small['rss_peak']:.1f}x by peak RSS, "
            f"{growth} by peak RSS growth during the gradient")


def mib(nbytes: float) -> str:
    return f"{nbytes / 2 ** 20:,.1f} MiB"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="grid points (100 000)")
    parser.add_argument("--steps", type=int, default=2000, help="time steps T (2000)")
    parser.add_argument("--strategy", choices=list(STRATEGIES),
                        help="run only this strategy and print its result as JSON "
                             "(what the parent runs in each subprocess)")
    parser.add_argument("--out", type=Path, help="with --strategy: where to save the gradient")
    opts = parser.parse_args(argv)
    if opts.strategy:
        print(json.dumps(run_strategy(opts.strategy, opts.n, opts.steps, opts.out)))
        return

    print(f"1-D reaction-diffusion, n = {opts.n:,} points, T = {opts.steps} steps "
          f"(one state: {mib(8 * opts.n)}); gradient of the final energy w.r.t. u_0")
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores (one run each; "
          "other work on the machine slows the wall-clock time more than the CPU time)")
    results, grads = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name in STRATEGIES:
            out = Path(tmp) / f"{len(results)}.npy"
            results.append(in_subprocess(name, opts.n, opts.steps, out))
            grads.append(np.load(out))

    print(f"{'strategy':<13} {'loop':<10} {'time':>8} {'CPU':>8} {'trips':>6} {'forward':>8} "
          f"{'recomputed':>10} {'snapshots':>9} {'peak bytes':>14} {'peak RSS':>13} "
          f"{'RSS growth':>13}")
    for r in results:
        print(f"{r['strategy']:<13} {r['loop']:<10} {r['seconds']:7.2f}s {r['cpu']:7.2f}s "
              f"{r['trips'][0]:6d} "
              f"{r['forward_steps']:8d} {r['recompute_steps']:10d} {r['peak_snapshots']:9d} "
              f"{mib(r['peak_bytes']):>14} {mib(r['rss_peak']):>13} "
              f"{mib(r['rss_peak'] - r['rss_setup']):>13}")
    print(f"peak memory StoreAll / {results[1]['strategy']}: "
          + memory_ratios(results[0], results[1]))

    identical = all(np.array_equal(grads[0], g) for g in grads[1:])
    print(f"gradients bitwise identical across strategies: {identical}")
    if not identical:
        raise SystemExit("the strategies' gradients differ")

    u0 = initial_state(opts.n)
    direction = np.random.default_rng(0).standard_normal(opts.n)
    direction /= np.abs(direction).max()
    fd = (eager_energy(u0 + FD_EPS * direction, opts.steps)
          - eager_energy(u0 - FD_EPS * direction, opts.steps)) / (2 * FD_EPS)
    ad = float(grads[0] @ direction)
    print(f"directional derivative: cfgrad {ad:.10e}  finite diff {fd:.10e}  "
          f"rel. difference {abs(ad - fd) / abs(fd):.1e}")
    if abs(ad - fd) > FD_RTOL * abs(fd):
        raise SystemExit("the gradient disagrees with finite differences")


if __name__ == "__main__":
    main()
