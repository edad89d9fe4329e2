"""Eight research programs written as a new user writes them, and what `cg.jit` does with them.

Each is plain Python over `cfgrad.numpy` (`if`/`while`/`for` converted by cfgrad), the
kind of code the people cfgrad is for bring with them: a Levenberg–Marquardt fit, value
iteration, Newton's method with a backtracking line search, adaptive Simpson quadrature
with an explicit stack, a Kalman filter over a series with gaps, a pendulum integrated
until an event, soft k-means, and power iteration on a Hessian. None was rewritten to suit
the compiler.

For each program the script checks the gradient against central differences (in the
interpreter), then reports whether `cg.jit` of its gradient compiles (or the reason it
falls back), the cold compile time (a fresh process, empty caches), the time a second
process takes to load it from the disk cache, and the time of one gradient compiled and
interpreted (best of several).

    python3 examples/fresh_programs.py            # everything (minutes: cold compiles)
    python3 examples/fresh_programs.py --quick    # gradients checked, nothing compiled
    python3 examples/fresh_programs.py --only soft_kmeans
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

import cfgrad as cg
import cfgrad.numpy as cnp

# ---------------------------------------------------------------------------------
# The programs: each `name(params, data) -> scalar`, differentiated in `params`.
# ---------------------------------------------------------------------------------


def levenberg_marquardt(y, data):
    """Fit y ≈ a exp(-b t) + c by damped Gauss–Newton; the fitted decay rate b, whose
    gradient in the data y is the fit's sensitivity to each observation."""
    t, p = data
    lam = 1e-2
    step = 1.0
    k = 0
    while step > 1e-10 and k < 50:
        e = cnp.exp(-p[1] * t)
        r = p[0] * e + p[2] - y
        J = cnp.stack([e, -p[0] * t * e, cnp.ones_like(t)], axis=1)
        A = J.T @ J + lam * cnp.eye(3)
        dp = cnp.linalg.solve(A, -(J.T @ r))
        trial = p + dp
        r_trial = trial[0] * cnp.exp(-trial[1] * t) + trial[2] - y
        if r_trial @ r_trial < r @ r:
            p = trial
            lam = lam * 0.3
        else:
            lam = lam * 10.0
        step = cnp.sqrt(dp @ dp)
        k = k + 1
    return p[1]


def value_iteration(reward, data):
    """Optimal values of a small MDP by value iteration until the update is below 1e-9;
    the gradient of the start state's value in the rewards goes along the greedy policy."""
    P, gamma = data
    n_states = reward.shape[0]
    v = cnp.zeros(n_states)
    delta = 1.0
    while delta > 1e-9:
        q = reward + gamma * cnp.einsum("sat,t->sa", P, v)
        v_new = cnp.max(q, axis=1)
        delta = cnp.max(cnp.abs(v_new - v))
        v = v_new
    return v[0]


def newton_line_search(theta, data):
    """argmin_x sum(log cosh(x - theta)) + lam/2 |x|^2 by Newton with a backtracking line
    search; the objective at the minimiser (a hyper-gradient in theta)."""
    lam = data

    def objective(x):
        return cnp.sum(cnp.log(cnp.cosh(x - theta))) + 0.5 * lam * (x @ x)

    x = cnp.zeros_like(theta)
    g = cnp.tanh(x - theta) + lam * x
    k = 0
    while cnp.max(cnp.abs(g)) > 1e-9 and k < 50:
        h = 1.0 - cnp.tanh(x - theta) ** 2 + lam
        d = -g / h
        s = 1.0
        while objective(x + s * d) > objective(x) + 1e-4 * s * (g @ d):
            s = 0.5 * s
        x = x + s * d
        g = cnp.tanh(x - theta) + lam * x
        k = k + 1
    return objective(x)


def adaptive_simpson(theta, data):
    """The integral of exp(-theta x^2) sin(3x) over [0, 2] by adaptive Simpson, its
    intervals kept on an explicit stack of fixed size."""
    tol = data
    depth = 64  # intervals the stack holds: a Python constant, since shapes are static

    def f(x):
        return cnp.exp(-theta * x * x) * cnp.sin(3.0 * x)

    los = cnp.zeros(depth)
    his = cnp.zeros(depth)
    tols = cnp.zeros(depth)
    los = los.at[0].set(0.0)
    his = his.at[0].set(2.0)
    tols = tols.at[0].set(tol)
    top = 1
    total = 0.0
    while top > 0:
        top = top - 1
        a = los[top]
        b = his[top]
        eps = tols[top]
        m = 0.5 * (a + b)
        whole = (b - a) / 6.0 * (f(a) + 4.0 * f(m) + f(b))
        left = (m - a) / 6.0 * (f(a) + 4.0 * f(0.5 * (a + m)) + f(m))
        right = (b - m) / 6.0 * (f(m) + 4.0 * f(0.5 * (m + b)) + f(b))
        if cnp.abs(left + right - whole) <= 15.0 * eps or top + 2 > depth:
            total = total + left + right + (left + right - whole) / 15.0
        else:
            los = los.at[top].set(a)
            his = his.at[top].set(m)
            tols = tols.at[top].set(0.5 * eps)
            los = los.at[top + 1].set(m)
            his = his.at[top + 1].set(b)
            tols = tols.at[top + 1].set(0.5 * eps)
            top = top + 2
    return total


def kalman_with_gaps(log_noise, data):
    """The negative log-likelihood of a local-level model; observations that are NaN are
    gaps, where the filter predicts without an update."""
    ys = data
    q = cnp.exp(log_noise[0])
    r = cnp.exp(log_noise[1])
    m = 0.0
    P = 1.0
    nll = 0.0
    for t in range(ys.shape[0]):
        P = P + q
        y = ys[t]
        if cnp.isnan(y):
            pass
        else:
            S = P + r
            innovation = y - m
            nll = nll + 0.5 * (cnp.log(2.0 * cnp.pi * S) + innovation * innovation / S)
            K = P / S
            m = m + K * innovation
            P = (1.0 - K) * P
    return nll


def pendulum_until_event(length, data):
    """A pendulum released at an angle, integrated by RK4 until it first swings through the
    bottom; the time of that event, interpolated within the last step."""
    theta0, dt = data
    g = 9.81

    def rhs(th, om):
        return om, -g / length * cnp.sin(th)

    th = theta0
    om = 0.0
    t = 0.0
    th_prev = th
    while th > 0.0:
        th_prev = th
        k1t, k1o = rhs(th, om)
        k2t, k2o = rhs(th + 0.5 * dt * k1t, om + 0.5 * dt * k1o)
        k3t, k3o = rhs(th + 0.5 * dt * k2t, om + 0.5 * dt * k2o)
        k4t, k4o = rhs(th + dt * k3t, om + dt * k3o)
        th = th + dt / 6.0 * (k1t + 2.0 * k2t + 2.0 * k3t + k4t)
        om = om + dt / 6.0 * (k1o + 2.0 * k2o + 2.0 * k3o + k4o)
        t = t + dt
    return t - dt * th / (th - th_prev)


def soft_kmeans(log_temperature, data):
    """Soft k-means (EM with a temperature) from fixed starting centres, 20 rounds; the
    soft within-cluster loss at the end."""
    points, centres = data
    temperature = cnp.exp(log_temperature)
    for _ in range(20):
        d2 = cnp.sum((points[:, None, :] - centres[None, :, :]) ** 2, axis=2)
        w = cnp.exp(-d2 / temperature)
        w = w / cnp.sum(w, axis=1, keepdims=True)
        centres = (w.T @ points) / cnp.sum(w, axis=0)[:, None]
    d2 = cnp.sum((points[:, None, :] - centres[None, :, :]) ** 2, axis=2)
    w = cnp.exp(-d2 / temperature)
    w = w / cnp.sum(w, axis=1, keepdims=True)
    return cnp.sum(w * d2) / points.shape[0]


def hessian_power_iteration(weights, data):
    """The largest eigenvalue of the Hessian of a small regression loss (its sharpness), by
    power iteration on Hessian-vector products until the estimate settles."""
    X, y = data

    def loss(w):
        pred = cnp.tanh(X @ w)
        return 0.5 * cnp.mean((pred - y) ** 2)

    def hvp(v):
        return cg.jvp(cg.grad(loss), (weights,), (v,))[1]

    v = cnp.ones_like(weights) / cnp.sqrt(weights.shape[0])
    estimate = 0.0
    change = 1.0
    k = 0
    while change > 1e-8 and k < 200:
        hv = hvp(v)
        new = v @ hv
        v = hv / cnp.sqrt(hv @ hv)
        change = cnp.abs(new - estimate)
        estimate = new
        k = k + 1
    return estimate


# ---------------------------------------------------------------------------------
# Arguments
# ---------------------------------------------------------------------------------


def example_args() -> dict[str, tuple]:
    """Each program's (params, data), fixed by a seed."""
    rng = np.random.default_rng(0)
    t = np.linspace(0.0, 4.0, 40)
    y_fit = 2.0 * np.exp(-1.3 * t) + 0.5 + 0.01 * rng.standard_normal(40)
    n_states, n_actions = 6, 3
    P = rng.random((n_states, n_actions, n_states))
    P /= P.sum(axis=2, keepdims=True)
    ys = np.cumsum(rng.standard_normal(60) * 0.3) + rng.standard_normal(60) * 0.5
    ys[[7, 8, 9, 23, 40, 41]] = np.nan
    centres = np.array([[-1.0, 0.0], [1.0, 0.5], [0.0, -1.0]])
    points = np.concatenate([rng.standard_normal((40, 2)) * 0.4 + c for c in centres])
    X = rng.standard_normal((30, 8))
    return {
        "levenberg_marquardt": (y_fit, (t, np.array([1.0, 1.0, 0.0]))),
        "value_iteration": (rng.random((n_states, n_actions)), (P, 0.9)),
        "newton_line_search": (rng.standard_normal(5), 0.1),
        "adaptive_simpson": (0.7, 1e-8),
        "kalman_with_gaps": (np.array([-2.0, -1.0]), ys),
        "pendulum_until_event": (1.3, (0.8, 1e-3)),
        "soft_kmeans": (np.log(0.5), (points, centres + 0.3)),
        "hessian_power_iteration": (rng.standard_normal(8) * 0.3,
                                    (X, np.tanh(X @ rng.standard_normal(8)))),
    }


PROGRAMS: dict[str, Callable] = {name: globals()[name] for name in example_args()}

# The finite-difference step per program where 1e-6 is not right: a solver that stops at a
# tolerance is a function with jumps of the size of its last step (1e-10 here) wherever a
# perturbation changes its iteration count, which a difference over 2e-6 sees as 5e-5.
FD_STEP = {"levenberg_marquardt": 1e-4}

# ---------------------------------------------------------------------------------
# Checking and timing
# ---------------------------------------------------------------------------------


def central_differences(fun: Callable, params, data, h: float = 1e-6,
                        entries: int | None = None) -> np.ndarray:
    """The gradient's first `entries` entries (all by default) by central differences."""
    flat = np.array(params, dtype=float).ravel()
    grad = np.empty(flat.size if entries is None else min(entries, flat.size))
    for i in range(grad.size):
        up, down = flat.copy(), flat.copy()
        up[i] += h
        down[i] -= h
        shape = np.shape(params)
        grad[i] = (float(fun(up.reshape(shape), data))
                   - float(fun(down.reshape(shape), data))) / (2 * h)
    return grad


def best_time(thunk: Callable[[], object], repeats: int = 5) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        thunk()
        best = min(best, time.perf_counter() - start)
    return best


def jit_status(name: str) -> str:
    """'compiled', or 'interpreter: <reason>' when `cg.jit` of the gradient falls back."""
    params, data = example_args()[name]
    jitted = cg.jit(cg.grad(PROGRAMS[name]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cg.CompileWarning)
        info = jitted.info(params, data)
    return "compiled" if info.backend == "numba" else f"interpreter: {info.reason}"


def measure(name: str, timed: bool) -> dict:
    """In this process: the time of the first call of `cg.jit` of the gradient of `name`
    (compiling, or loading from the disk cache), its status, and with `timed` the best
    time of one gradient compiled and interpreted."""
    params, data = example_args()[name]
    jitted = cg.jit(cg.grad(PROGRAMS[name]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cg.CompileWarning)
        start = time.perf_counter()
        jitted(params, data)
        first = time.perf_counter() - start
    out = {"seconds": first, "status": jit_status(name)}
    if timed:
        interpreted = cg.grad(PROGRAMS[name])
        out["jit"] = best_time(lambda: jitted(params, data))
        out["interpreter"] = best_time(lambda: interpreted(params, data))
    return out


def in_fresh_process(name: str, cache: str, timed: bool) -> dict:
    """`measure(name, timed)` in a new process with `cache` as every compile cache."""
    here = str(Path(__file__).parent)
    code = (f"import sys, json; sys.path.insert(0, {here!r})\n"
            "import fresh_programs as fp\n"
            f"print(json.dumps(fp.measure({name!r}, {timed!r})))\n")
    env = dict(os.environ, CFGRAD_CACHE_DIR=cache, NUMBA_CACHE_DIR=cache)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"{name}: the measuring process failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def report(names: list[str], quick: bool) -> None:
    """The gradient check of each program; then (unless `quick`) whether `cg.jit` of its
    gradient compiles, its cold compile (a fresh process, empty caches), its load from the
    disk cache in a second process, and one gradient compiled and interpreted there."""
    print(f"{'program':<24} {'rel. error':>10}")
    for name in names:
        params, data = example_args()[name]
        fun = PROGRAMS[name]
        grad = np.ravel(cg.grad(fun)(params, data))
        fd = central_differences(fun, params, data, FD_STEP.get(name, 1e-6),
                                 entries=2 if quick else None)
        error = float(np.max(np.abs(grad[:fd.size] - fd)) / max(1.0, np.max(np.abs(fd))))
        print(f"{name:<24} {error:10.1e}")
    if quick:
        return
    print()
    print(f"{'program':<24} {'cold s':>8} {'cached s':>9} {'jit ms':>9} {'interp ms':>10} "
          f"{'interp/jit':>10}  jit")
    for name in names:
        with tempfile.TemporaryDirectory() as cache:
            cold = in_fresh_process(name, cache, timed=False)
            cached = in_fresh_process(name, cache, timed=True)
        print(f"{name:<24} {cold['seconds']:8.2f} {cached['seconds']:9.3f} "
              f"{cached['jit'] * 1e3:9.3f} {cached['interpreter'] * 1e3:10.3f} "
              f"{cached['interpreter'] / cached['jit']:10.1f}  {cold['status']}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="check gradients (two entries each) in the interpreter only")
    parser.add_argument("--only", nargs="*", default=None, help="programs to run")
    args = parser.parse_args()
    report(args.only or list(PROGRAMS), args.quick)


if __name__ == "__main__":
    main()
