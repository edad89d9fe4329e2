"""Forward and gradient time of cfgrad against hand-written numpy, in one run.

Run `python examples/benchmark.py` (a few minutes; more when PyTorch, autograd and JAX
are installed, and about a minute more the first time, while Numba compiles the `cg.jit`
column's programs into its disk cache). `--quick` runs tiny sizes and no `cg.jit` column,
which is what the tests do; `--heat-only`
runs only the heat workload, `--heat-n` and `--heat-steps` set its size (the heat.py
example's full size is `--heat-steps 2000`). Figures are for one thread: BLAS and the
other libraries are pinned to one thread below, before numpy is imported.

Cases (the functions are the ones in newton.py and rnn.py):
  newton  Newton's cube root, a separate call on each of 1000 Python floats
  rnn     tanh RNN, hidden 64, up to 300 steps, stopping early if |h| reaches a threshold
  cond    sum(cond(sum(A) > 0, tanh(A @ B), A @ B.T)) on 512x512 matrices, each branch
  per-node interpreter overhead: a fori_loop over a chain of adds, time per executed node
  minus the time numpy itself takes for the same operation
  fixed   the fixed cost of one call of a transformed function (grad, value_and_grad, vjp,
          jvp, cg.jit of f and of its grad) of a one-multiplication f at a Python float
  hvp     a Hessian-vector product on the RNN and Newton cases, forward over reverse and
          reverse over reverse, against one gradient; peak snapshots under Binomial(4)
  heat    the reaction-diffusion stepping of heat.py (100 000 points, 500 steps): gradient
          of the final energy w.r.t. the initial state under each checkpointing strategy,
          wall time and peak resident memory, each implementation in a subprocess of its own
  fresh   the eight research programs of fresh_programs.py, written as a user writes them:
          whether `cg.jit` of each gradient compiles, its cold compile time (a fresh process,
          empty caches) and its load time from the disk cache in a second process, and one
          gradient compiled and interpreted (not with --quick or --heat-only; minutes)

Each case also runs under `cg.jit` (of the function, and of its `cg.grad`), beside the
interpreter, with Numba's compile time of each; a program the backend cannot compile yet
runs in the interpreter, and its row says so with the `CompileWarning`'s reason.

The baseline is a forward function written once and run on numpy, and a reverse pass
derived by hand. Every implementation's values and gradients are asserted to agree with
cfgrad's before anything is timed, so a wrong baseline cannot pass silently. PyTorch, HIPS
autograd and JAX get a column each when they can be imported. Times are the best of
several repeats (time.perf_counter); ratios divide by hand-written numpy in the same run.
The heat workload is timed once per subprocess (its peak memory is that one run's).
"""

from __future__ import annotations

import os

# Before numpy (or any BLAS user) is imported: one thread everywhere, for stable figures.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
             "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen="
                           "false intra_op_parallelism_threads=1").strip()

import argparse  # noqa: E402
import gc  # noqa: E402
import importlib  # noqa: E402
import importlib.metadata  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import textwrap  # noqa: E402
import time  # noqa: E402
import timeit  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import cfgrad as cg  # noqa: E402
import cfgrad.numpy as cnp  # noqa: E402
from cfgrad.api import evaluate, lowered  # noqa: E402
from cfgrad.checkpoint import Binomial, EveryK, Online, StoreAll  # noqa: E402
from cfgrad.interpret import Machine  # noqa: E402
from cfgrad.jitted import Jitted  # noqa: E402

# The example functions live next to this file; make them importable however it is loaded.
sys.path.insert(0, str(Path(__file__).resolve().parent))
import heat  # noqa: E402
from newton import MAX_ITERS, TOL, cube_root  # noqa: E402
from rnn import make_problem, rnn_loss  # noqa: E402

OTHERS = ("torch", "autograd", "jax")
CHAIN = 64  # adds per iteration in the per-node overhead loop


@dataclass(frozen=True)
class Sizes:
    newton_calls: int
    hidden: int
    inputs: int
    steps: int
    matrix: int
    chain_trips: int
    repeats: int
    budget: float  # seconds of repeats per measurement, beyond the first
    heat_n: int  # grid points of the heat workload
    heat_steps: int


FULL = Sizes(newton_calls=1000, hidden=64, inputs=32, steps=300, matrix=512,
             chain_trips=2000, repeats=25, budget=1.0, heat_n=100_000, heat_steps=500)
QUICK = Sizes(newton_calls=20, hidden=8, inputs=4, steps=20, matrix=32, chain_trips=50,
              repeats=1, budget=0.0, heat_n=1000, heat_steps=30)


# ---------------------------------------------------------------------------------
# The functions under test, written once for every array library `xp` (numpy, autograd's
# numpy, torch), and the reverse passes derived by hand for numpy.
# ---------------------------------------------------------------------------------


def newton_forward(a):
    """Newton's cube root as plain Python: works on floats, tensors and autograd boxes."""
    x = a
    while abs(x ** 3 - a) > TOL * a:
        x = x - (x ** 3 - a) / (3 * x ** 2)
    return x


def newton_grad_by_hand(a: float) -> float:
    """Reverse pass of newton_forward: x' = 2x/3 + a/(3x^2), so dx'/dx = 2/3 - 2a/(3x^3)
    and dx'/da = 1/(3x^2); the start x_0 = a adds the final adjoint of x to a's."""
    xs = []
    x = a
    while abs(x ** 3 - a) > TOL * a:
        xs.append(x)
        x = x - (x ** 3 - a) / (3 * x ** 2)
    gx, ga = 1.0, 0.0
    for xk in reversed(xs):
        ga += gx / (3 * xk * xk)
        gx *= 2.0 / 3.0 - 2.0 * a / (3 * xk ** 3)
    return ga + gx


def rnn_forward(W, U, b, X, target, threshold, xp):
    """The RNN of rnn.py with a Python while loop."""
    h, t = xp.zeros(b.shape[0]), 0
    while t < X.shape[0] and xp.sum(h * h) < threshold ** 2:
        h = xp.tanh(W @ h + U @ X[t] + b)
        t += 1
    return 0.5 * xp.sum((h - target) ** 2)


def rnn_grad_by_hand(W, U, b, X, target, threshold):
    """Reverse pass of rnn_forward: with z_t = W h_t + U x_t + b and h_{t+1} = tanh(z_t),
    dz_t = dh_{t+1} (1 - h_{t+1}^2) and dh_t = W^T dz_t; the weight gradients are sums of
    outer products, done as one matmul each over the stacked dz."""
    hs, t = [np.zeros(b.shape[0])], 0
    while t < X.shape[0] and np.sum(hs[-1] * hs[-1]) < threshold ** 2:
        hs.append(np.tanh(W @ hs[-1] + U @ X[t] + b))
        t += 1
    H = np.array(hs)
    slope = 1.0 - H[1:] ** 2
    dz = np.empty((t, b.shape[0]))
    dh = H[-1] - target
    for k in range(t - 1, -1, -1):
        dz[k] = dh * slope[k]
        dh = dz[k] @ W
    return dz.T @ H[:-1], dz.T @ X[:t], dz.sum(axis=0)


def cond_matmul(A, B):
    """The cfgrad function of the cond case."""
    return cnp.sum(cg.cond(cnp.sum(A) > 0, lambda: cnp.tanh(A @ B), lambda: A @ B.T))


def cond_forward(A, B, xp):
    return xp.sum(xp.tanh(A @ B) if xp.sum(A) > 0 else A @ B.T)


def cond_grad_by_hand(A, B):
    """tanh branch: with T = tanh(A B), dZ = 1 - T^2, dA = dZ B^T, dB = A^T dZ.
    Other branch: d sum(A B^T) / dA[i,k] = sum_j B[j,k], and likewise for B."""
    if np.sum(A) > 0:
        T = np.tanh(A @ B)
        dZ = 1.0 - T * T
        return dZ @ B.T, A.T @ dZ
    return (np.broadcast_to(B.sum(axis=0), A.shape).copy(),
            np.broadcast_to(A.sum(axis=0), B.shape).copy())


def add_chain(s, n):
    """`n` iterations of CHAIN dependent adds: nearly every executed node is an add."""

    def body(i, s):
        for _ in range(CHAIN):
            s = s + 1.0
        return s

    return cg.fori_loop(0, n, body, s)


def example_args() -> dict[str, tuple]:
    rng = np.random.default_rng(0)
    return {"cond_matmul": (rng.standard_normal((4, 4)) + 0.5, rng.standard_normal((4, 4))),
            "add_chain": (0.0, 10)}


# ---------------------------------------------------------------------------------
# Other libraries: each gives, per case, a forward and a gradient thunk.
# ---------------------------------------------------------------------------------


def load_others() -> tuple[dict[str, Any], list[str]]:
    """The importable comparison libraries, configured for float64 and one thread."""
    libs: dict[str, Any] = {}
    missing = []
    for name in OTHERS:
        try:
            libs[name] = importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if "torch" in libs:
        libs["torch"].set_num_threads(1)
        libs["torch"].set_default_dtype(libs["torch"].float64)
    if "autograd" in libs:
        libs["autograd.numpy"] = importlib.import_module("autograd.numpy")
    if "jax" in libs:
        libs["jax"].config.update("jax_enable_x64", True)
        libs["jax.numpy"] = importlib.import_module("jax.numpy")
    return libs, missing


def torch_impls(case: str, torch: Any, data: Any) -> tuple[Callable, Callable]:
    """Eager PyTorch: the same Python control flow, gradients by torch.autograd.grad."""
    if case == "newton":
        def forward():
            with torch.no_grad():
                return [float(newton_forward(torch.tensor(a))) for a in data]

        def gradient():
            out = []
            for a in data:
                t = torch.tensor(a, requires_grad=True)
                out.append(float(torch.autograd.grad(newton_forward(t), t)[0]))
            return out
        return forward, gradient
    if case == "rnn":
        W, U, b, X, target, threshold = (torch.from_numpy(a) if isinstance(a, np.ndarray)
                                         else a for a in data)
        params = [p.detach().clone().requires_grad_(True) for p in (W, U, b)]

        def forward():
            with torch.no_grad():
                return float(rnn_forward(W, U, b, X, target, threshold, torch))

        def gradient():
            loss = rnn_forward(*params, X, target, threshold, torch)
            return tuple(g.numpy() for g in torch.autograd.grad(loss, params))
        return forward, gradient
    A, B = (torch.from_numpy(a) for a in data)
    params = [p.detach().clone().requires_grad_(True) for p in (A, B)]

    def forward():
        with torch.no_grad():
            return float(cond_forward(A, B, torch))

    def gradient():
        return tuple(g.numpy() for g in torch.autograd.grad(cond_forward(*params, torch),
                                                            params))
    return forward, gradient


def autograd_impls(case: str, autograd: Any, anp: Any, data: Any) -> tuple[Callable, Callable]:
    """HIPS autograd: the same Python functions on autograd.numpy."""
    if case == "newton":
        g = autograd.grad(newton_forward)
        return (lambda: [newton_forward(a) for a in data], lambda: [g(a) for a in data])
    if case == "rnn":
        W, U, b, X, target, threshold = data
        g = autograd.grad(lambda p: rnn_forward(*p, X, target, threshold, anp))
        return (lambda: rnn_forward(W, U, b, X, target, threshold, anp),
                lambda: g((W, U, b)))
    A, B = data
    g = autograd.grad(lambda p: cond_forward(*p, anp))
    return lambda: cond_forward(A, B, anp), lambda: g((A, B))


def jax_impls(case: str, jax: Any, jnp: Any, data: Any) -> tuple[Callable, Callable]:
    """JAX under jit. `lax.while_loop` cannot be reverse-differentiated, so the gradients
    of the two loops are taken through a `lax.scan` over the maximum number of steps whose
    steps after the stop condition leave the carry unchanged (jnp.where masking)."""
    lax = jax.lax
    if case == "newton":
        def while_version(a):
            return lax.while_loop(lambda x: jnp.abs(x ** 3 - a) > TOL * a,
                                  lambda x: x - (x ** 3 - a) / (3 * x ** 2), a)

        def scan_version(a):
            def step(x, _):
                done = jnp.abs(x ** 3 - a) <= TOL * a
                return jnp.where(done, x, x - (x ** 3 - a) / (3 * x ** 2)), None
            return lax.scan(step, a, None, length=MAX_ITERS)[0]

        fwd, grd = jax.jit(while_version), jax.jit(jax.grad(scan_version))
        return (lambda: [float(fwd(a)) for a in data], lambda: [float(grd(a)) for a in data])
    if case == "rnn":
        W, U, b, X, target = (jnp.asarray(a) for a in data[:5])
        threshold = data[5]

        def rnn_while(W, U, b):
            def running(c):
                h, t = c
                return (t < X.shape[0]) & (jnp.sum(h * h) < threshold ** 2)

            def step(c):
                h, t = c
                return jnp.tanh(W @ h + U @ X[t] + b), t + 1
            h, _ = lax.while_loop(running, step, (jnp.zeros(b.shape[0]), 0))
            return 0.5 * jnp.sum((h - target) ** 2)

        def rnn_scan(W, U, b):
            def step(c, x_t):
                h, done = c
                done = done | (jnp.sum(h * h) >= threshold ** 2)
                return (jnp.where(done, h, jnp.tanh(W @ h + U @ x_t + b)), done), None
            (h, _), _ = lax.scan(step, (jnp.zeros(b.shape[0]), False), X)
            return 0.5 * jnp.sum((h - target) ** 2)

        fwd, grd = jax.jit(rnn_while), jax.jit(jax.grad(rnn_scan, (0, 1, 2)))
        return (lambda: float(fwd(W, U, b)),
                lambda: tuple(np.asarray(g) for g in grd(W, U, b)))
    A, B = (jnp.asarray(a) for a in data)

    def cond_jax(A, B):
        return jnp.sum(lax.cond(jnp.sum(A) > 0, lambda: jnp.tanh(A @ B), lambda: A @ B.T))

    fwd, grd = jax.jit(cond_jax), jax.jit(jax.grad(cond_jax, (0, 1)))
    return (lambda: float(fwd(A, B)), lambda: tuple(np.asarray(g) for g in grd(A, B)))


# ---------------------------------------------------------------------------------
# Cases, checking and timing
# ---------------------------------------------------------------------------------


@dataclass
class Case:
    label: str
    impls: dict[str, tuple[Callable, Callable]]  # name -> (forward thunk, gradient thunk)
    times: dict[str, tuple[float, float]] = field(default_factory=dict)
    # the compiled column: per pass, how it runs and what compiling it took
    compiled: tuple[Compiled, Compiled] | None = None


@dataclass
class Compiled:
    """One pass of a case under `cg.jit`: the backend it runs on, and the compile time
    (Numba's, or loading the machine code from the disk cache) or the fallback's reason."""

    backend: str
    detail: str


def jitted_pass(jitted: Jitted, args: tuple, shared: dict[int, str]) -> Compiled:
    """How `jitted` runs at `args`, compiling it now (so no timing includes it). A
    Program another case already compiled in this process is marked as shared rather than
    shown with the near-zero time of its second lookup; a fallback's CompileWarning is
    caught and its reason shown instead of a time."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cg.CompileWarning)
        info = jitted.info(*args)
        program = jitted.lower(*args)
    if info.backend != "numba":
        return Compiled(info.backend, info.reason or "")
    if id(program) in shared:
        return Compiled(info.backend, f"as {shared[id(program)]}")
    detail = (f"{fmt_time(info.compile_seconds)} "
              f"{'from the disk cache' if info.from_disk_cache else 'cold'}")
    shared[id(program)] = "the row above"
    return Compiled(info.backend, detail)


def make_cases(sizes: Sizes, libs: dict[str, Any], compiled: bool) -> list[Case]:
    points = [float(a) for a in np.linspace(0.5, 100.0, sizes.newton_calls)]
    # threshold sqrt(hidden) is out of reach (|h| < sqrt(hidden) for tanh entries), so the
    # RNN runs the whole sequence: the worst case for interpreter overhead.
    problem = make_problem(sizes.hidden, sizes.inputs, sizes.steps,
                           threshold=float(np.sqrt(sizes.hidden)), seed=1)
    rng = np.random.default_rng(2)
    scale = sizes.matrix ** -0.25  # entries of A @ B of order one: tanh not saturated
    A = rng.standard_normal((sizes.matrix, sizes.matrix)) * scale
    A += 0.01 - A.mean()  # sum(A) > 0: the tanh branch; -A takes the other one
    B = rng.standard_normal((sizes.matrix, sizes.matrix)) * scale

    newton_grad = cg.grad(cube_root)
    rnn_grad = cg.grad(rnn_loss, (0, 1, 2))
    cond_grad = cg.grad(cond_matmul, (0, 1))
    # the same functions compiled: cg.jit of the function and of its gradient
    jit_fwd = {"newton": cg.jit(cube_root), "rnn": cg.jit(rnn_loss),
               "cond": cg.jit(cond_matmul)}
    jit_grad = {"newton": cg.jit(newton_grad), "rnn": cg.jit(rnn_grad),
                "cond": cg.jit(cond_grad)}
    _, pullback = cg.vjp(rnn_loss, *problem)
    pullback(1.0)
    rnn_steps = pullback.stats.loops[0].trip_counts[0]
    specs = {
        "newton": (f"Newton cube root, {len(points)} scalar calls", points, {
            "numpy": (lambda: [newton_forward(a) for a in points],
                      lambda: [newton_grad_by_hand(a) for a in points]),
            "cfgrad": (lambda: [evaluate(cube_root, a)[0] for a in points],
                       lambda: [newton_grad(a) for a in points]),
            "cfgrad jit": (lambda: [jit_fwd["newton"](a) for a in points],
                           lambda: [jit_grad["newton"](a) for a in points])}),
        "rnn": (f"tanh RNN, hidden {sizes.hidden}, {rnn_steps} of {sizes.steps} steps", problem, {
            "numpy": (lambda: rnn_forward(*problem, np),
                      lambda: rnn_grad_by_hand(*problem)),
            "cfgrad": (lambda: evaluate(rnn_loss, *problem)[0],
                       lambda: rnn_grad(*problem)),
            "cfgrad jit": (lambda: jit_fwd["rnn"](*problem),
                           lambda: jit_grad["rnn"](*problem))}),
    }
    for key, branch, M in (("cond", "tanh(A @ B)", A), ("cond", "A @ B.T", -A)):
        specs[f"{key}: {branch}"] = (
            f"cond with matmuls, {sizes.matrix}x{sizes.matrix}, taking {branch}", (M, B), {
                "numpy": (lambda M=M: cond_forward(M, B, np),
                          lambda M=M: cond_grad_by_hand(M, B)),
                "cfgrad": (lambda M=M: evaluate(cond_matmul, M, B)[0],
                           lambda M=M: cond_grad(M, B)),
                "cfgrad jit": (lambda M=M: jit_fwd["cond"](M, B),
                               lambda M=M: jit_grad["cond"](M, B))})
    cases = []
    shared: dict[int, str] = {}
    for name, (label, data, impls) in specs.items():
        key = name.split(":")[0]
        if compiled:
            args = (points[0],) if key == "newton" else data
            case_compiled = (jitted_pass(jit_fwd[key], args, shared),
                             jitted_pass(jit_grad[key], args, shared))
        else:
            del impls["cfgrad jit"]
            case_compiled = None
        if "torch" in libs:
            impls["torch"] = torch_impls(key, libs["torch"], data)
        if "autograd" in libs:
            impls["autograd"] = autograd_impls(key, libs["autograd"], libs["autograd.numpy"],
                                               data)
        if "jax" in libs:
            impls["jax"] = jax_impls(key, libs["jax"], libs["jax.numpy"], data)
        cases.append(Case(label, impls, compiled=case_compiled))
    return cases


def leaves(x: Any) -> list[np.ndarray]:
    """Results of any implementation as a flat list of float64 arrays (a list of scalars,
    as the Newton case returns, becomes one array)."""
    if isinstance(x, tuple | list):
        if x and all(np.ndim(v) == 0 for v in x):
            return [np.array([float(v) for v in x])]
        return [a for v in x for a in leaves(v)]
    return [np.asarray(x, dtype=np.float64)]


def check(case: Case) -> None:
    """Every implementation's value and gradient must match cfgrad's (this also warms up
    caches and JIT compilation before timing)."""
    want = [leaves(f()) for f in case.impls["cfgrad"]]
    for name, thunks in case.impls.items():
        for what, f, expected in zip(("value", "gradient"), thunks, want):
            got = leaves(f())
            assert len(got) == len(expected), (case.label, name, what)
            for g, e in zip(got, expected):
                np.testing.assert_allclose(
                    g, e, rtol=1e-7, atol=1e-10,
                    err_msg=f"{case.label}: {name}'s {what} differs from cfgrad's")


def best_time(fn: Callable, sizes: Sizes) -> float:
    """Best of up to `sizes.repeats` runs, stopping early once `sizes.budget` is spent.
    The garbage collector is off while a run is timed, as in timeit."""
    times = []
    start = time.perf_counter()
    for _ in range(sizes.repeats):
        gc.disable()
        try:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        finally:
            gc.enable()
        if len(times) >= 3 and time.perf_counter() - start > sizes.budget:
            break
    return min(times)


def executed_nodes(fun: Callable, args: tuple) -> int:
    """How many nodes (constants aside, which cost nothing at run time) one run of `fun`'s
    Program executes, counted block by block as the interpreter enters them."""
    entry, flat = lowered(fun, args)
    per_block = [sum(n.op != "const" for n in b.nodes) for b in entry.program.blocks]
    entered = [0] * len(per_block)

    def count(b: int) -> None:
        entered[b] += 1

    Machine(entry.compiled, entry.strategies(None), block_hook=count).run(
        [np.asarray(x, p.type.dtype) for x, p in zip(flat, entry.program.params)])
    return sum(n * k for n, k in zip(per_block, entered))


def per_node(sizes: Sizes) -> list[tuple[str, int, float, float]]:
    """(operand, executed nodes, cfgrad seconds per node, numpy seconds per op) for the
    add chain on a float64 scalar and on a float64[64] vector."""
    rows = []
    for label, s in (("f64 scalar", 0.0), ("f64[64] vector", np.zeros(64))):
        args = (s, sizes.chain_trips)
        executed = executed_nodes(add_chain, args)
        expected = sizes.chain_trips * CHAIN + np.zeros_like(s)
        np.testing.assert_allclose(evaluate(add_chain, *args)[0], expected)
        run = best_time(lambda args=args: evaluate(add_chain, *args), sizes)
        x, one = np.asarray(s)[()], np.float64(1.0)
        number = 20000 if sizes.repeats > 1 else 200
        numpy_op = min(timeit.repeat("x + one", globals={"x": x, "one": one},
                                     number=number, repeat=max(3, sizes.repeats))) / number
        rows.append((label, executed, run / executed, numpy_op))
    return rows


# ---------------------------------------------------------------------------------
# The heat workload: one implementation per subprocess, for its peak resident memory
# ---------------------------------------------------------------------------------

HEAT_SNAPSHOTS = 10
HEAT_K = 50  # the every-k interval, for EveryK and the hand-written version alike
HEAT_CFGRAD = {  # implementation -> (loop kind, strategy)
    "cfgrad StoreAll": ("fori_loop", StoreAll()),
    f"cfgrad Binomial({HEAT_SNAPSHOTS})": ("fori_loop", Binomial(HEAT_SNAPSHOTS)),
    f"cfgrad EveryK({HEAT_K})": ("fori_loop", EveryK(HEAT_K)),
    f"cfgrad Online({HEAT_SNAPSHOTS})": ("while_loop", Online(HEAT_SNAPSHOTS)),
}
# the same gradients under cg.jit(cg.grad(...)): a strategy the backend does not compile
# falls back to the interpreter, which its row says instead of timing the interpreter again
HEAT_JIT = {name.replace("cfgrad", "cfgrad jit"): how for name, how in HEAT_CFGRAD.items()}
HEAT_NUMPY = ("numpy by hand, all states", f"numpy by hand, every {HEAT_K}")
HEAT_OTHERS = {"torch": "torch eager", "jax": "jax lax.scan + jax.checkpoint"}


def heat_adjoint_step(u: np.ndarray, bar: np.ndarray) -> np.ndarray:
    """The reverse of heat.step at state u: with u' = u + dt (D lap(u) + r (u - u^3)) and the
    periodic Laplacian symmetric, u_bar = u'_bar + dt (D lap(u'_bar) + r (1 - 3 u^2) u'_bar)."""
    n = u.shape[0]
    dx = 1.0 / n
    diffusion = heat.MU * dx * dx / heat.DT
    laplacian = (np.roll(bar, 1) - 2.0 * bar + np.roll(bar, -1)) / (dx * dx)
    return bar + heat.DT * (diffusion * laplacian + heat.R * (1.0 - 3.0 * u * u) * bar)


def heat_numpy_forward(u0: np.ndarray, steps: int) -> float:
    """The final energy, keeping no state."""
    u = u0
    for _ in range(steps):
        u = heat.step(u, np)
    return heat.energy(u, np)


def heat_numpy_states(u0: np.ndarray, steps: int) -> list[np.ndarray]:
    """The forward sweep keeping every state u_0 … u_T."""
    states = [u0]
    for _ in range(steps):
        states.append(heat.step(states[-1], np))
    return states


def heat_numpy_reverse(states: list[np.ndarray]) -> np.ndarray:
    """The hand-derived reverse sweep over the states of `heat_numpy_states` (consumed)."""
    bar = states.pop() / states[0].shape[0]  # dE/du_T = u_T dx
    for u in reversed(states):
        bar = heat_adjoint_step(u, bar)
    return bar


def heat_numpy_store_all(u0: np.ndarray, steps: int) -> tuple[np.ndarray, int]:
    """Forward keeping every state, then the hand-derived reverse; (gradient, recomputed)."""
    return heat_numpy_reverse(heat_numpy_states(u0, steps)), 0


def heat_numpy_every_k(u0: np.ndarray, steps: int, k: int) -> tuple[np.ndarray, int]:
    """Forward keeping every k-th state; the reverse recomputes each segment's states from
    its checkpoint, then reverses the segment; (gradient, recomputed steps)."""
    checkpoints, u = [], u0
    for t in range(steps):
        if t % k == 0:
            checkpoints.append((t, u))
        u = heat.step(u, np)
    bar, recomputed = u / u0.shape[0], 0
    while checkpoints:
        start, u = checkpoints.pop()
        segment = [u]
        for _ in range(start + 1, min(start + k, steps)):
            segment.append(heat.step(segment[-1], np))
            recomputed += 1
        for u in reversed(segment):
            bar = heat_adjoint_step(u, bar)
    return bar, recomputed


def heat_other_gradient(name: str, u0: np.ndarray, steps: int) -> Callable[[], np.ndarray]:
    """A thunk for the gradient in PyTorch (eager, every step on autograd's tape) or JAX
    (jit of lax.scan over jax.checkpoint(step): the scan keeps each step's input state and
    recomputes the step's internals in the reverse pass), compiled before it is returned."""
    if name == "torch":
        import torch
        torch.set_num_threads(1)
        u0_t = torch.from_numpy(u0)

        def gradient() -> np.ndarray:
            u = start = u0_t.clone().requires_grad_(True)
            for _ in range(steps):
                u = heat.step(u, torch)
            return torch.autograd.grad(heat.energy(u, torch), start)[0].numpy()
        return gradient
    import jax
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy

    def final_energy(u0):
        u, _ = jax.lax.scan(jax.checkpoint(lambda u, _: (heat.step(u, jnp), None)), u0, None,
                            length=steps)
        return heat.energy(u, jnp)
    u0_j = jnp.asarray(u0)
    compiled = jax.jit(jax.grad(final_energy)).lower(u0_j).compile()
    return lambda: np.asarray(compiled(u0_j))


def heat_worker(name: str, n: int, steps: int, out: Path) -> dict:
    """One heat implementation in this process: its time (one run), body evaluations and
    peak RSS before (after imports, inputs and compilation) and after the run; the gradient
    is saved to `out`. The StoreAll rows also time their reverse sweep alone (`reverse`)
    and, after the gradient, one run of the forward function alone (`forward_alone`), for
    the gradient ÷ forward ratio."""
    u0 = heat.initial_state(n)
    stats = None
    compiled = {}
    split: dict[str, float] = {}
    forward_alone = None  # a thunk running the forward function alone
    if name in HEAT_JIT:
        kind, strategy = HEAT_JIT[name]
        fun, bound = ((heat.final_energy, steps) if kind == "fori_loop"
                      else (heat.final_energy_until, heat.time_bound(steps)))
        jitted = cg.jit(cg.grad(fun, checkpoint=strategy))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", cg.CompileWarning)
            info = jitted.info(u0, bound)
        if info.backend != "numba":
            return {"fallback": str(caught[0].message)}
        compiled = {"compile_seconds": info.compile_seconds,
                    "from_disk_cache": info.from_disk_cache}

        def gradient() -> np.ndarray:
            return jitted(u0, bound)
        if strategy == StoreAll():
            forward = cg.jit(fun)
            forward.info(u0, bound)  # compiled now, not timed
            forward_alone = lambda: forward(u0, bound)  # noqa: E731
    elif name in HEAT_CFGRAD:
        kind, strategy = HEAT_CFGRAD[name]
        fun, bound = ((heat.final_energy, steps) if kind == "fori_loop"
                      else (heat.final_energy_until, heat.time_bound(steps)))
        cg.lower(fun, u0, bound)

        def gradient() -> np.ndarray:
            nonlocal stats
            _, pullback = cg.vjp(fun, u0, bound, checkpoint=strategy)
            split["reverse"] = time.process_time()
            g = pullback(1.0)[0]
            split["reverse"] = time.process_time() - split["reverse"]
            stats = pullback.stats.loops[0]
            return g
        if strategy == StoreAll():
            forward_alone = lambda: evaluate(fun, u0, bound)  # noqa: E731
    elif name in HEAT_NUMPY:
        recomputed = 0

        def gradient() -> np.ndarray:
            nonlocal recomputed
            if name != HEAT_NUMPY[0]:
                g, recomputed = heat_numpy_every_k(u0, steps, HEAT_K)
                return g
            states = heat_numpy_states(u0, steps)
            split["reverse"] = time.process_time()
            g = heat_numpy_reverse(states)
            split["reverse"] = time.process_time() - split["reverse"]
            return g
        if name == HEAT_NUMPY[0]:
            forward_alone = lambda: heat_numpy_forward(u0, steps)  # noqa: E731
    else:
        gradient = heat_other_gradient(name, u0, steps)
    rss_setup = heat.max_rss_bytes()
    start, cpu_start = time.perf_counter(), time.process_time()
    g = gradient()
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    np.save(out, g)
    result = {"seconds": seconds, "cpu": cpu, "rss_setup": rss_setup,
              "rss_peak": heat.max_rss_bytes(), **compiled, **split}
    if forward_alone is not None:
        del g
        start = time.process_time()
        forward_alone()
        result["forward_alone"] = time.process_time() - start
    if stats is not None:
        result.update(forward=stats.forward_steps, recomputed=stats.recompute_steps,
                      peak_bytes=stats.peak_bytes, peak_snapshots=stats.peak_snapshots)
    elif name in HEAT_NUMPY:
        result.update(forward=steps, recomputed=recomputed)
    return result


def heat_section(console: Console, n: int, steps: int, present: list[str],
                 quick: bool) -> None:
    """Run every heat implementation in its own subprocess, check the gradients, print.
    With `quick`, no torch and jax rows (importing them in fresh processes takes seconds)
    and no cg.jit rows (so does a first Numba compile)."""
    others = [] if quick else [lib for lib in HEAT_OTHERS if lib in present]
    jit_rows = [] if quick else list(HEAT_JIT)
    names = [*HEAT_CFGRAD, *jit_rows, *HEAT_NUMPY] + [HEAT_OTHERS[lib] for lib in others]
    worker_of = {v: k for k, v in HEAT_OTHERS.items()}  # row name -> --heat-worker name
    results, grads = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, name in enumerate(names):
            out = Path(tmp) / f"{i}.npy"
            proc = subprocess.run(
                [sys.executable, __file__, "--heat-worker", worker_of.get(name, name),
                 "--heat-n", str(n), "--heat-steps", str(steps), "--heat-out", str(out)],
                capture_output=True, text=True)
            if proc.returncode != 0:
                raise SystemExit(f"heat worker {name!r} failed:\n{proc.stderr}")
            results[name] = json.loads(proc.stdout.splitlines()[-1])
            if "fallback" not in results[name]:
                grads[name] = np.load(out)
    reference = grads["cfgrad StoreAll"]
    for name in HEAT_CFGRAD:  # the same operations in the same order: the same bits
        assert np.array_equal(grads[name], reference), f"{name}'s gradient is not bitwise equal"
    for name in grads:
        np.testing.assert_allclose(grads[name], reference, rtol=1e-9, atol=1e-12 / n,
                                   err_msg=f"heat: {name}'s gradient differs from cfgrad's")

    base = results[HEAT_NUMPY[0]]["cpu"]
    table = Table(title=f"Heat workload: gradient of the final energy, n = {n:,} points, "
                  f"T = {steps} steps (one state {8 * n / 2 ** 20:.2f} MiB); one run each, "
                  "each in its own process")
    for column in ("implementation", "wall time", "CPU time", "CPU ÷ numpy", "body evaluations",
                   "peak snapshots", "stats peak bytes", "peak RSS", "RSS growth",
                   *(["jit compile"] if jit_rows else [])):
        table.add_column(column, justify="left" if column == "implementation" else "right")
    section_ends = (*HEAT_CFGRAD, *jit_rows)[-1], HEAT_NUMPY[-1]
    for name in names:
        r = results[name]
        if "fallback" in r:
            table.add_row(name, "interpreter", "", "", "", "", "", "", "", "falls back",
                          end_section=name in section_ends)
            continue
        evals = f"{r['forward']} + {r['recomputed']}" if "forward" in r else ""
        compile_time = ("" if "compile_seconds" not in r else fmt_time(r["compile_seconds"])
                        + (" cached" if r["from_disk_cache"] else " cold"))
        table.add_row(name, fmt_time(r["seconds"]), fmt_time(r["cpu"]), f"{r['cpu'] / base:.2f}×",
                      evals,
                      str(r.get("peak_snapshots", "")),
                      fmt_mib(r["peak_bytes"]) if "peak_bytes" in r else "",
                      fmt_mib(r["rss_peak"]), fmt_mib(r["rss_peak"] - r["rss_setup"]),
                      *([compile_time] if jit_rows else []), end_section=name in section_ends)
    console.print(table)
    notes = [
        "CPU time: user + system time of the worker process during the gradient "
        "(time.process_time), steadier than wall time when the machine is busy; "
        "CPU ÷ numpy divides by the first numpy row's",
        "body evaluations: forward sweep + recomputed steps; the reverse steps themselves "
        "are not counted (cfgrad's LoopStats convention)",
        "peak RSS: the subprocess's peak resident set size (VmHWM; interpreter, numpy and "
        "the library included); RSS growth: its increase during the gradient, over the peak "
        "after imports, inputs and compilation",
        "stats peak bytes: the loop's snapshots and tapes by cfgrad's accounting "
        "(pullback.stats.loops[0].peak_bytes)",
        f"memory, StoreAll ÷ Binomial({HEAT_SNAPSHOTS}): "
        + heat.memory_ratios(results["cfgrad StoreAll"],
                             results[f"cfgrad Binomial({HEAT_SNAPSHOTS})"]),
        "cfgrad's gradients are bitwise identical across strategies, and every other row's "
        "agree with them to rtol 1e-9 (both asserted)",
        "the Online row runs the stepping as a while_loop on a time bound (t < t_end), the "
        "others as a fori_loop",
        heat_split_note(results),
    ]
    if jit_rows:
        compiled_rows = [name for name in jit_rows if name in grads]
        bitwise = [name for name in compiled_rows if np.array_equal(grads[name], reference)]
        notes.append(
            "cfgrad jit rows: cg.jit(cg.grad(final_energy, checkpoint=...)), compiled before "
            "the timed run (jit compile: Numba's time, cold or loaded from the disk cache; "
            "their peak RSS includes Numba and LLVM, their RSS growth does not); "
            f"bitwise equal to the interpreter's gradient: {', '.join(bitwise) or 'none'}"
            + (f"; not bitwise: {', '.join(sorted(set(compiled_rows) - set(bitwise)))}"
               if len(bitwise) < len(compiled_rows) else ""))
        notes += [f"{name} runs in the interpreter (its CompileWarning: "
                  f"{results[name]['fallback']})" for name in jit_rows
                  if "fallback" in results[name]]
    else:
        notes.append("--quick: no cfgrad jit rows (a first Numba compile takes seconds)")
    if "jax" in others:
        notes.append("jax: jit-compiled (compilation not timed); jax.checkpoint around the "
                     "scanned step keeps each step's input state and recomputes the step "
                     "once in the reverse pass")
    if "torch" in others:
        notes.append("torch: eager mode, autograd's tape holds every step's intermediates")
    notes += [f"{lib} is not installed: no {HEAT_OTHERS[lib]} row" if lib not in present
              else f"--quick: no {HEAT_OTHERS[lib]} row" for lib in HEAT_OTHERS
              if lib not in others]
    print_notes(console, notes)


def heat_split_note(results: dict[str, dict]) -> str:
    """The StoreAll rows' reverse sweep alone (cfgrad's against the hand-written one) and
    gradient ÷ forward (the gradient's CPU time over one run of the forward function
    alone: cfgrad's interpreter, the numpy stepping, cg.jit of the forward)."""
    cfgrad, hand = results["cfgrad StoreAll"], results[HEAT_NUMPY[0]]
    ratios = [f"{name} {results[name]['cpu'] / results[name]['forward_alone']:.2f}"
              for name in ("cfgrad StoreAll", HEAT_NUMPY[0], "cfgrad jit StoreAll")
              if "forward_alone" in results.get(name, {})]
    return (f"StoreAll: the reverse sweep alone takes {fmt_time(cfgrad['reverse'])} in cfgrad's "
            f"interpreter, {fmt_time(hand['reverse'])} by hand "
            f"({cfgrad['reverse'] / hand['reverse']:.2f}×); gradient ÷ forward: "
            + ", ".join(ratios))


def fmt_mib(nbytes: float) -> str:
    return f"{nbytes / 2 ** 20:,.1f} MiB"


def fmt_time(seconds: float) -> str:
    if seconds >= 1.0:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} µs"


def print_notes(console: Console, notes: list[str]) -> None:
    """Bulleted notes whose wrapped lines stay indented under their bullet."""
    for note in notes:
        console.print(textwrap.fill(note, width=console.width - 2, initial_indent="  - ",
                                    subsequent_indent="    "), markup=False, highlight=False)


def library_tables(console: Console, sizes: Sizes, libs: dict[str, Any],
                   missing: list[str], compiled: bool) -> None:
    """The forward and gradient times of every case (with `compiled`, also under
    `cg.jit`), and the per-node overhead."""
    present = [n for n in OTHERS if n in libs]
    cases = make_cases(sizes, libs, compiled)
    for case in cases:
        check(case)
        for name, (forward, gradient) in case.impls.items():
            case.times[name] = (best_time(forward, sizes), best_time(gradient, sizes))

    table = Table(title=f"Forward and gradient time (best of up to {sizes.repeats} runs); "
                  "ratios are ÷ hand-written numpy")
    table.add_column("case")
    table.add_column("pass")
    table.add_column("numpy by hand", justify="right")
    table.add_column("cfgrad", justify="right")
    table.add_column("cfgrad ÷ numpy", justify="right", style="bold")
    if compiled:
        table.add_column("cfgrad jit", justify="right")
        table.add_column("jit ÷ numpy", justify="right", style="bold")
        table.add_column("jit compile")
    for name in present:
        table.add_column(name, justify="right")
    for case in cases:
        for k, what in enumerate(("forward", "gradient")):
            base = case.times["numpy"][k]
            cells = [fmt_time(case.times[n][k]) + f" ({case.times[n][k] / base:.2f}×)"
                     for n in present]
            if compiled:
                how = case.compiled[k]
                jit_time = case.times["cfgrad jit"][k]
                cells[:0] = [fmt_time(jit_time) + ("" if how.backend == "numba"
                                                   else f" ({how.backend})"),
                             f"{jit_time / base:.2f}×", how.detail]
            table.add_row(case.label if k == 0 else "", what, fmt_time(base),
                          fmt_time(case.times["cfgrad"][k]),
                          f"{case.times['cfgrad'][k] / base:.2f}×", *cells,
                          end_section=k == 1)
    console.print(table)
    notes = ["numpy by hand: the forward function written once in Python/numpy and a reverse "
             "pass derived by hand; on the Newton case its inputs are Python floats, so it "
             "runs Python float arithmetic",
             "cfgrad forward: the lowered Program run by the interpreter "
             "(cfgrad.api.evaluate); gradient: cg.grad, forward and adjoint runs",
             "the RNN's norm threshold is out of reach here, so it runs every step",
             "gradient ÷ forward (cfgrad / numpy by hand"
             + (" / cfgrad jit" if compiled else "") + "): "
             + "; ".join(f"{case.label}: " + " / ".join(
                 f"{case.times[n][1] / case.times[n][0]:.2f}"
                 for n in ("cfgrad", "numpy", *(["cfgrad jit"] if compiled else [])))
                 for case in cases)]
    if compiled:
        notes.append("cfgrad jit: cg.jit of the function (forward) and of its cg.grad "
                     "(gradient), called as the interpreter's column is; jit compile: "
                     "Numba's compile time of each (compiled before timing), cold or "
                     "loaded from the disk cache (CFGRAD_CACHE_DIR, else "
                     "~/.cache/cfgrad/native) that an earlier run filled; a pass that "
                     "falls back to the interpreter shows the CompileWarning's reason")
    else:
        notes.append("--quick: no cfgrad jit column (a first Numba compile takes seconds "
                     "per program)")
    if "jax" in libs:
        notes.append("jax: jit-compiled; lax.while_loop cannot be reverse-differentiated, so "
                     "the Newton and RNN gradients go through a lax.scan over the maximum "
                     "step count whose steps after the stop condition change nothing "
                     f"(Newton: {MAX_ITERS} steps, RNN: {sizes.steps})")
    if "torch" in libs:
        notes.append("torch: eager mode, the same Python loops on float64 tensors")
    for name in missing:
        notes.append(f"{name} is not installed: no {name} column")
    print_notes(console, notes)

    overhead = Table(title="Per-node interpreter overhead: fori_loop over a chain of "
                     f"{CHAIN} adds per iteration, {sizes.chain_trips} iterations (forward)")
    overhead.add_column("operand")
    overhead.add_column("nodes executed", justify="right")
    overhead.add_column("cfgrad per node", justify="right")
    overhead.add_column("numpy per op", justify="right")
    overhead.add_column("overhead per node", justify="right", style="bold")
    for label, executed, node_time, op_time in per_node(sizes):
        overhead.add_row(label, f"{executed:,}", f"{node_time * 1e9:.0f} ns",
                         f"{op_time * 1e9:.0f} ns", f"{(node_time - op_time) * 1e9:.0f} ns")
    console.print(overhead)
    print_notes(console, ["numpy per op: timeit of `x + one` on the same operand; overhead "
                          "is the difference (slot reads and writes in the generated block "
                          "code, control events per iteration)"])


def second_order_thunks(fun: Callable, calls: list[tuple], direction: tuple,
                        checkpoint: Any) -> tuple[Callable, Callable, Callable]:
    """Gradient, Hessian-vector product by forward over reverse (`cg.jvp` of `cg.grad`)
    and by reverse over reverse (`cg.grad` of `grad · v`) of `fun` in its first argument,
    each run at every argument tuple of `calls`; `direction` holds one tangent per
    argument (zeros but the first)."""
    grad = cg.grad(fun, checkpoint=checkpoint)
    v = direction[0]
    rev_rev = cg.grad(lambda x, *rest: cnp.sum(grad(x, *rest) * v), checkpoint=checkpoint)

    def gradient() -> None:
        for args in calls:
            grad(*args)

    def forward_over_reverse() -> None:
        for args in calls:
            cg.jvp(grad, args, direction)

    def reverse_over_reverse() -> None:
        for args in calls:
            rev_rev(*args)

    return gradient, forward_over_reverse, reverse_over_reverse


def hvp_section(console: Console, sizes: Sizes) -> None:
    """Second order: a Hessian-vector product, both ways, against one gradient, and the
    peak checkpoint snapshots of the nested runs under Binomial(4)."""
    from cfgrad.checkpoint import Binomial
    from cfgrad.nested import recorded_runs

    W, U, b, X, target, _ = make_problem(sizes.hidden, sizes.inputs, sizes.steps, 1e9)
    rnn_args = (W, U, b, X, target, 1e9)
    rnn_direction = (np.random.default_rng(1).standard_normal(W.shape),
                     *(np.zeros_like(np.asarray(a, float)) for a in rnn_args[1:]))
    points = [(a,) for a in np.linspace(0.5, 50.0, max(sizes.newton_calls // 10, 2))]
    cases = [(f"RNN hidden {sizes.hidden}, {sizes.steps} steps, d/dW", rnn_loss, [rnn_args],
              rnn_direction),
             (f"Newton cube root, {len(points)} scalar calls", cube_root, points, (1.0,))]
    table = Table(title="Second order: one Hessian-vector product against one gradient")
    for column in ("case", "gradient", "jvp of grad", "÷ gradient", "grad of grad·v",
                   "÷ gradient", "peak snapshots, Binomial(4)"):
        table.add_column(column, justify="left" if column == "case" else "right")
    for label, fun, calls, direction in cases:
        thunks = second_order_thunks(fun, calls, direction, None)
        for thunk in thunks:
            thunk()  # lower and compile before timing
        t_grad, t_fr, t_rr = (best_time(thunk, sizes) for thunk in thunks)
        _, *second = second_order_thunks(fun, calls, direction, Binomial(4))
        with recorded_runs() as runs:
            for thunk in second:
                thunk()
        peak = max((lp.peak_snapshots for _, st in runs for lp in st.loops), default=0)
        table.add_row(label, fmt_time(t_grad), fmt_time(t_fr), f"{t_fr / t_grad:.2f}×",
                      fmt_time(t_rr), f"{t_rr / t_grad:.2f}×", str(peak))
    console.print(table)
    print_notes(console, [
        "jvp of grad: forward mode through the gradient, i.e. reverse mode of the JVP program "
        "in one pass (cfgrad/nested.py); grad of grad·v: reverse over reverse",
        "peak snapshots: the most checkpoints any nested run's loop held at once, over the "
        "runs both orders made; Binomial(4) bounds it by 4 at every order",
        "the RNN's threshold is out of reach here, so every step runs"])


def fixed_cost_section(console: Console, sizes: Sizes, compiled: bool) -> None:
    """What one call of a transformed function costs beyond the program's own work: a
    function of one multiplication, called on a Python float, per call (the best of many
    batches of calls). Interpreted, the call looks up its prepared signature, runs the
    forward program taped and its adjoint, and hands over the results; compiled (cg.jit),
    it is one Numba dispatch. The aims (issue 28): at most 10 µs interpreted, 3 µs
    compiled."""
    def double(x):
        return x * 2.0

    calls = 200 if sizes is QUICK else 20_000

    def per_call(fn: Callable) -> float:
        fn(1.5)  # lower (and compile) outside the timing
        return min(timeit.repeat(lambda: fn(1.5), number=calls,
                                 repeat=max(sizes.repeats // 3, 1))) / calls

    def pullback_of_vjp(x: float) -> Any:
        _, pullback = cg.vjp(double, x)
        return pullback(1.0)

    rows = [("cg.grad(f)(x)", "interpreter", cg.grad(double)),
            ("cg.value_and_grad(f)(x)", "interpreter", cg.value_and_grad(double)),
            ("cg.vjp(f, x), then pullback(1.0)", "interpreter", pullback_of_vjp),
            ("cg.jvp(f, (x,), (1.0,))", "interpreter",
             lambda x: cg.jvp(double, (x,), (1.0,)))]
    if compiled:
        rows += [("cg.jit(cg.grad(f))(x)", "cg.jit", cg.jit(cg.grad(double))),
                 ("cg.jit(f)(x)", "cg.jit", cg.jit(double))]
    table = Table(title=f"Fixed cost of one call: f(x) = x * 2.0 at a Python float, best of "
                        f"{calls:,} calls")
    for column in ("call", "runs in", "per call"):
        table.add_column(column, justify="right" if column == "per call" else "left")
    for label, where, fn in rows:
        table.add_row(label, where, f"{per_call(fn) * 1e6:.2f} µs")
    console.print(table)
    print_notes(console, [
        "the program itself is one multiplication (and its adjoint one more): the rest is "
        "the call's dispatch, the taped run's setup, numpy's error state and handing over "
        "the results; aims: at most 10 µs for an interpreted grad, 3 µs compiled"])


def many_branches(x):
    """110 conds in a row, about 2000 nodes: a large program for the inspector timing."""
    for i in range(110):
        x = cg.cond(x > i * 0.01, lambda x=x: cnp.sin(x) * 1.5 + x * x - 0.25 * x,
                    lambda x=x: cnp.cos(x) * 0.5 - x + 1.0)
        x = x * 1.0001 + 0.001
    return x


def inspector_section(console: Console) -> None:
    """How long the inspector takes to lay out a ~2000-node program, every row shown."""
    program = cg.lower(many_branches, 0.3)
    table = Table(title=f"Inspector: rendering a program of {program.node_count():,} nodes in "
                  f"{len(program.blocks)} blocks (no folding, 100 columns, to a string)")
    table.add_column("view")
    table.add_column("lines", justify="right")
    table.add_column("time", justify="right", style="bold")
    for label, options in (("program", {}), ("mirrored (forward beside adjoint)",
                                             {"adjoint": True})):
        out = Console(file=io.StringIO(), width=100, color_system=None)
        start = time.perf_counter()
        cg.inspect(program, fold=None, console=out, **options)
        elapsed = time.perf_counter() - start
        table.add_row(label, f"{out.file.getvalue().count(chr(10)):,}", fmt_time(elapsed))
    console.print(table)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (for the tests)")
    parser.add_argument("--heat-only", action="store_true", help="only the heat workload")
    parser.add_argument("--heat-n", type=int, help="heat grid points (100 000; --quick 1000)")
    parser.add_argument("--heat-steps", type=int, help="heat time steps (500; --quick 30)")
    parser.add_argument("--heat-worker", help=argparse.SUPPRESS)  # one heat implementation
    parser.add_argument("--heat-out", type=Path, help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    sizes = QUICK if opts.quick else FULL
    heat_n = opts.heat_n or sizes.heat_n
    heat_steps = opts.heat_steps or sizes.heat_steps
    if opts.heat_worker:
        print(json.dumps(heat_worker(opts.heat_worker, heat_n, heat_steps, opts.heat_out)))
        return
    console = Console(width=None if sys.stdout.isatty() else 150)
    libs, missing = load_others()
    present = [n for n in OTHERS if n in libs]
    console.print(f"cfgrad benchmark{' (--quick: tiny sizes)' if opts.quick else ''}: "
                  f"Python {platform.python_version()}, numpy {np.__version__}, "
                  + ", ".join(f"{n} {importlib.metadata.version(n)}" for n in present)
                  + ("" if present else "no comparison library installed"))
    console.print(f"BLAS and thread pools pinned to 1 thread; load average "
                  f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores (other work on the "
                  "machine makes the figures noisy)")

    if not opts.heat_only:
        library_tables(console, sizes, libs, missing, compiled=not opts.quick)
        fixed_cost_section(console, sizes, compiled=not opts.quick)
        hvp_section(console, sizes)
        inspector_section(console)
        import realistic  # here, not at the top: it imports this module's timing helpers
        realistic.section(console, opts.quick, libs)
    heat_section(console, heat_n, heat_steps, present, opts.quick)
    if not opts.quick and not opts.heat_only:  # minutes: cold compiles in fresh processes
        import fresh_programs
        console.print("\nFresh research programs (examples/fresh_programs.py): gradient "
                      "checks, cg.jit status, cold and cached compile times")
        fresh_programs.report(list(fresh_programs.PROGRAMS), quick=False)


if __name__ == "__main__":
    main()
