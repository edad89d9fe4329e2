"""Realistic scalar-loop programs, differentiated by cfgrad and timed against JAX's jit.

Each program is written as a scientist would write it for cfgrad: plain Python `if`,
`while` and `for` on cfgrad.numpy values (converted into regions, docs/autograph.md),
stopping on tolerances and events, on scalars and small arrays, which is where the
interpreter's per-node overhead dominates and compiled execution (`cg.jit`) matters.

- rk23        adaptive Bogacki-Shampine 3(2) with accept/reject, a Brusselator's final
              state differentiated w.r.t. its parameters and initial state; also written
              in numpy with a reverse sweep derived by hand (`rk23_grad_by_hand`). The
              step-size controller is under `cg.stop_gradient` (h and t carry no
              derivative), which keeps the hand adjoint to the accepted steps' states.
- bisection   Kepler's equation E - e sin E = M for 96 mean anomalies: bisection to 1e-10,
              then one Newton step (which carries the implicit derivative dE/de).
- rk45        adaptive Dormand-Prince 5(4) on a Van der Pol oscillator, differentiated
              through everything, the step-size controller included.
- cg          conjugate gradients on (K + diag(theta)) x = b until the residual is below
              1e-10 of b's, differentiated w.r.t. theta and b through the iterations.
- ball        a bouncing ball with quadratic drag (explicit Euler), stopped at its 5th
              bounce: the distance travelled w.r.t. launch velocity, restitution, drag.
- meta        meta-learning: an inner loop of minibatch SGD on logistic regression (its
              gradient by `cg.grad` inside the loop) until the gradient is small; the
              validation loss w.r.t. the log learning rate and the initial weights.
- sphere      sphere tracing 36 rays against a sphere over a ground plane until each ray
              hits or leaves; the summed depth w.r.t. the sphere's centre and radius.
- rnn         a tanh RNN reading a sequence until its readout fires (`break`): the
              readout's squared error w.r.t. the weights and bias.
- switched    a thermostat (heating/cooling modes with hysteresis), stopped after 12
              mode switches: comfort and energy cost w.r.t. the heater and wall constants
              and the starting temperature.

Each also has a JAX version, written as a JAX user would: `lax.while_loop` cannot be
reverse-differentiated, so a loop with a data-dependent stop becomes a `lax.scan` over a
static maximum number of steps whose steps after the stop leave the carry unchanged
(`jnp.where` masking), and a loop over rays or roots a `jax.vmap`. `section` checks every
cfgrad gradient against JAX's (and RK23's against the hand-written numpy one) before it
times anything. `python examples/benchmark.py` prints this section after its others;
`python examples/realistic.py` prints it alone (`--quick`: tiny sizes, interpreter only).
"""

from __future__ import annotations

import argparse
import math
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# benchmark.py imports this module inside its main() only, so the import goes one way;
# first, as benchmark pins every thread pool to one thread before numpy is imported.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmark import (FULL, QUICK, best_time, fmt_time, jitted_pass,  # noqa: E402, I001
                       load_others, print_notes)

import numpy as np  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import cfgrad as cg  # noqa: E402
import cfgrad.numpy as cnp  # noqa: E402

RTOL_CHECK = 1e-9  # cfgrad's gradients against JAX's and the hand-written one (float64)


# ---------------------------------------------------------------------------------
# Adaptive RK23 on the Brusselator, and its gradient by hand
# ---------------------------------------------------------------------------------

ATOL = 1e-9
RK23_H0 = 1e-3
RK23_MAX_STEPS = 1000  # the JAX version's static maximum


def brusselator(y, p, xp=cnp):
    """The Brusselator's right-hand side, for any array namespace `xp` (cfgrad.numpy
    traced, numpy for the hand-written gradient)."""
    x, z = y[0], y[1]
    return xp.stack([p[0] + x * x * z - (p[1] + 1.0) * x, p[1] * x - x * x * z])


def bogacki_shampine(y, h, p, rtol, xp=cnp):
    """One trial step of RK23 from y: (y_new, the error's scaled RMS norm, k1, k2)."""
    k1 = brusselator(y, p, xp)
    k2 = brusselator(y + 0.5 * h * k1, p, xp)
    k3 = brusselator(y + 0.75 * h * k2, p, xp)
    y_new = y + h * (2.0 / 9.0 * k1 + 1.0 / 3.0 * k2 + 4.0 / 9.0 * k3)
    k4 = brusselator(y_new, p, xp)
    err = h * (-5.0 / 72.0 * k1 + 1.0 / 12.0 * k2 + 1.0 / 9.0 * k3 - 1.0 / 8.0 * k4)
    scale = ATOL + rtol * xp.maximum(xp.abs(y), xp.abs(y_new))
    return y_new, xp.maximum(xp.sqrt(xp.mean((err / scale) ** 2)), 1e-10), k1, k2


def rk23(p, y0, t_end, rtol):
    """The squared norm of the Brusselator's state at t_end, by adaptive RK23."""
    t, y, h = 0.0, y0, RK23_H0
    while t < t_end:
        h = min(h, t_end - t)
        y_new, err_norm, _, _ = bogacki_shampine(y, h, p, rtol)
        factor = 0.9 * err_norm ** (-1.0 / 3.0)
        if err_norm <= 1.0:
            t = t_end if h >= t_end - t else t + h
            y = y_new
            h = h * min(factor, 5.0)
        else:
            h = h * max(factor, 0.2)
        h = cg.stop_gradient(h)
    return cnp.sum(y * y)


def brusselator_vjp(y: np.ndarray, p: np.ndarray, v: np.ndarray) -> tuple[np.ndarray,
                                                                          np.ndarray]:
    """(v^T df/dy, v^T df/dp): df/dy = [[2xz - b - 1, x^2], [b - 2xz, -x^2]],
    df/dp = [[1, -x], [0, x]]."""
    x, z = y[0], y[1]
    a = 2.0 * x * z
    return (np.array([v[0] * (a - p[1] - 1.0) + v[1] * (p[1] - a), (v[0] - v[1]) * x * x]),
            np.array([v[0], (v[1] - v[0]) * x]))


def rk23_grad_by_hand(p: np.ndarray, y0: np.ndarray, t_end: float,
                      rtol: float) -> tuple[np.ndarray, np.ndarray, int, int]:
    """d rk23 / d(p, y0), and the accepted and rejected step counts. The forward keeps the
    state and step of every accepted step; h carries no derivative (stop_gradient), so
    the reverse runs over y_{n+1} = y_n + h (2/9 k1 + 1/3 k2 + 4/9 k3) with k1 = f(y_n),
    k2 = f(y_n + h/2 k1), k3 = f(y_n + 3h/4 k2), pulling the adjoint back through the
    three stages in reverse order."""
    t, y, h = 0.0, y0, RK23_H0
    kept = []
    rejected = 0
    while t < t_end:
        h = min(h, t_end - t)
        y_new, err_norm, k1, k2 = bogacki_shampine(y, h, p, rtol, np)
        factor = 0.9 * err_norm ** (-1.0 / 3.0)
        if err_norm <= 1.0:
            kept.append((y, h, k1, k2))
            t = t_end if h >= t_end - t else t + h
            y = y_new
            h = h * min(factor, 5.0)
        else:
            h = h * max(factor, 0.2)
            rejected += 1
    y_bar, p_bar = 2.0 * y, np.zeros_like(p)
    for y, h, k1, k2 in reversed(kept):
        # y_bar is the adjoint of y_{n+1}; `total` collects y_n's
        u_bar, dp = brusselator_vjp(y + 0.75 * h * k2, p, 4.0 / 9.0 * h * y_bar)
        p_bar += dp
        total = y_bar + u_bar
        k2_bar = 1.0 / 3.0 * h * y_bar + 0.75 * h * u_bar
        u_bar, dp = brusselator_vjp(y + 0.5 * h * k1, p, k2_bar)
        p_bar += dp
        total += u_bar
        u_bar, dp = brusselator_vjp(y, p, 2.0 / 9.0 * h * y_bar + 0.5 * h * u_bar)
        p_bar += dp
        y_bar = total + u_bar
    return p_bar, y_bar, len(kept), rejected


def rk23_args(quick: bool) -> tuple:
    return np.array([1.0, 3.0]), np.array([1.5, 3.0]), 1.0 if quick else 10.0, 1e-6


def rk23_jax(jax: Any, jnp: Any) -> Callable:
    lax = jax.lax

    def loss(p, y0, t_end, rtol):
        def step(carry, _):
            t, y, h = carry
            active = t < t_end
            h = jnp.where(active, jnp.minimum(h, t_end - t), h)  # finite work when masked
            y_new, err_norm, _, _ = bogacki_shampine(y, h, p, rtol, jnp)
            factor = 0.9 * err_norm ** (-1.0 / 3.0)
            accept = active & (err_norm <= 1.0)
            t_next = jnp.where(h >= t_end - t, t_end, t + h)
            h_next = jnp.where(err_norm <= 1.0, h * jnp.minimum(factor, 5.0),
                               h * jnp.maximum(factor, 0.2))
            return (jnp.where(accept, t_next, t), jnp.where(accept, y_new, y),
                    lax.stop_gradient(jnp.where(active, h_next, h))), None
        (_, y, _), _ = lax.scan(step, (0.0, y0, RK23_H0), None, length=RK23_MAX_STEPS)
        return jnp.sum(y * y)
    return loss


# ---------------------------------------------------------------------------------
# The eight realistic programs
# ---------------------------------------------------------------------------------

KEPLER_TOL = 1e-10
KEPLER_MAX = 60  # bisection steps in the JAX version (the bracket is at most 2 wide)


def kepler(e, M):
    """Sum over the mean anomalies M of cos E, E solving E - e sin E = M (so the x
    coordinate of the orbit, up to a constant). Since |E - M| <= e, bisection on
    [M - e, M + e]; the closing Newton step makes E's derivative the implicit one,
    dE/de = sin E / (1 - e cos E), up to the tolerance."""
    total = 0.0
    for m in M:
        lo, hi = m - e, m + e
        while hi - lo > KEPLER_TOL:
            mid = 0.5 * (lo + hi)
            if mid - e * cnp.sin(mid) - m > 0.0:
                hi = mid
            else:
                lo = mid
        E = 0.5 * (lo + hi)
        E = E - (E - e * cnp.sin(E) - m) / (1.0 - e * cnp.cos(E))
        total = total + cnp.cos(E)
    return total


def kepler_args(quick: bool) -> tuple:
    return 0.6, np.linspace(0.1, 6.0, 3 if quick else 96)


def kepler_jax(jax: Any, jnp: Any) -> Callable:
    def one(e, m):
        def step(bracket, _):
            lo, hi = bracket
            mid = 0.5 * (lo + hi)
            right = mid - e * jnp.sin(mid) - m > 0.0
            active = hi - lo > KEPLER_TOL
            return (jnp.where(active & ~right, mid, lo), jnp.where(active & right, mid, hi)), None
        (lo, hi), _ = jax.lax.scan(step, (m - e, m + e), None, length=KEPLER_MAX)
        E = 0.5 * (lo + hi)
        E = E - (E - e * jnp.sin(E) - m) / (1.0 - e * jnp.cos(E))
        return jnp.cos(E)

    return lambda e, M: jnp.sum(jax.vmap(one, (None, 0))(e, M))


# Dormand-Prince 5(4): nodes' weights a, the fifth-order weights (the last row of a), and
# the error weights b - b* (b* the embedded fourth-order ones), with k7 = f(y_new).
DOPRI_A = ((1 / 5,), (3 / 40, 9 / 40), (44 / 45, -56 / 15, 32 / 9),
           (19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729),
           (9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656),
           (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84))
DOPRI_E = (71 / 57600, 0.0, -71 / 16695, 71 / 1920, -17253 / 339200, 22 / 525, -1 / 40)
RK45_H0 = 1e-2
RK45_MAX_STEPS = 400


def van_der_pol(y, p, xp):
    return xp.stack([y[1], p[0] * (1.0 - y[0] * y[0]) * y[1] - p[1] * y[0]])


def dopri_trial(y, h, p, xp):
    """One Dormand-Prince trial step from y: (y_new, the error's scaled RMS norm)."""
    ks = [van_der_pol(y, p, xp)]
    for row in DOPRI_A:
        ks.append(van_der_pol(y + h * sum(a * k for a, k in zip(row, ks) if a), p, xp))
    y_new = y + h * sum(a * k for a, k in zip(DOPRI_A[-1], ks) if a)
    err = h * sum(e * k for e, k in zip(DOPRI_E, ks) if e)
    scale = ATOL + 1e-8 * xp.maximum(xp.abs(y), xp.abs(y_new))
    return y_new, xp.maximum(xp.sqrt(xp.mean((err / scale) ** 2)), 1e-10)


def rk45(p, y0, t_end):
    """The squared norm of a Van der Pol state at t_end (rtol 1e-8), by adaptive RK45;
    the step size is differentiated too, as it depends on p."""
    t, h = 0.0, RK45_H0
    y = y0
    while t < t_end:
        h = min(h, t_end - t)
        y_new, err_norm = dopri_trial(y, h, p, cnp)
        factor = 0.9 * err_norm ** -0.2
        if err_norm <= 1.0:
            t = t_end if h >= t_end - t else t + h
            y = y_new
            h = h * min(factor, 10.0)
        else:
            h = h * max(factor, 0.2)
    return cnp.sum(y * y)


def rk45_args(quick: bool) -> tuple:
    return np.array([1.0, 1.0]), np.array([2.0, 0.0]), 0.5 if quick else 10.0


def rk45_jax(jax: Any, jnp: Any) -> Callable:
    def loss(p, y0, t_end):
        def step(carry, _):
            t, y, h = carry
            active = t < t_end
            h = jnp.where(active, jnp.minimum(h, t_end - t), h)
            y_new, err_norm = dopri_trial(y, h, p, jnp)
            factor = 0.9 * err_norm ** -0.2
            accept = active & (err_norm <= 1.0)
            t_next = jnp.where(h >= t_end - t, t_end, t + h)
            h_next = jnp.where(err_norm <= 1.0, h * jnp.minimum(factor, 10.0),
                               h * jnp.maximum(factor, 0.2))
            return (jnp.where(accept, t_next, t), jnp.where(accept, y_new, y),
                    jnp.where(active, h_next, h)), None
        (_, y, _), _ = jax.lax.scan(step, (0.0, y0, RK45_H0), None, length=RK45_MAX_STEPS)
        return jnp.sum(y * y)
    return loss


CG_TOL = 1e-10
CG_MAX = 200


def conjugate_gradients(theta, b, K):
    """sum(x) for x solving (K + diag(theta)) x = b by conjugate gradients, stopped when
    |r| <= CG_TOL |b|."""
    A = K + cnp.diag(theta)
    x = cnp.zeros_like(b)
    r = b
    d = r
    rs = r @ r
    stop = CG_TOL * CG_TOL * (b @ b)
    while rs > stop:
        Ad = A @ d
        alpha = rs / (d @ Ad)
        x = x + alpha * d
        r = r - alpha * Ad
        rs_new = r @ r
        d = r + (rs_new / rs) * d
        rs = rs_new
    return cnp.sum(x)


def cg_args(quick: bool) -> tuple:
    n = 6 if quick else 128
    rng = np.random.default_rng(3)
    G = rng.standard_normal((n, n))
    return np.linspace(0.2, 1.0, n), rng.standard_normal(n), G @ G.T / n


def cg_jax(jax: Any, jnp: Any) -> Callable:
    def loss(theta, b, K):
        A = K + jnp.diag(theta)
        stop = CG_TOL * CG_TOL * (b @ b)

        def step(carry, _):
            x, r, d, rs = carry
            active = rs > stop
            Ad = A @ d
            alpha = rs / (d @ Ad)
            x_n, r_n = x + alpha * d, r - alpha * Ad
            rs_new = r_n @ r_n
            d_n = r_n + (rs_new / rs) * d
            return tuple(jnp.where(active, new, old)
                         for new, old in zip((x_n, r_n, d_n, rs_new), carry)), None
        (x, *_), _ = jax.lax.scan(step, (jnp.zeros_like(b), b, b, b @ b), None, length=CG_MAX)
        return jnp.sum(x)
    return loss


GRAVITY = 9.81
BALL_DT = 1e-3
BALL_T_END = 20.0
BOUNCES = 5


def bouncing_ball(v0, restitution, drag, t_end):
    """Horizontal distance of a ball launched from 1 m at velocity v0 (quadratic drag,
    explicit Euler), when it lands for the BOUNCES-th time (or at t_end)."""
    x, y, vx, vy = 0.0, 1.0, v0[0], v0[1]
    t, bounces = 0.0, 0
    while t < t_end and bounces < BOUNCES:
        speed = cnp.sqrt(vx * vx + vy * vy)
        vx = vx - BALL_DT * drag * speed * vx
        vy = vy - BALL_DT * (GRAVITY + drag * speed * vy)
        x = x + BALL_DT * vx
        y = y + BALL_DT * vy
        if y < 0.0:
            y = -restitution * y
            vy = -restitution * vy
            bounces = bounces + 1
        t = t + BALL_DT
    return x


def ball_args(quick: bool) -> tuple:
    return np.array([3.0, 4.0]), 0.7, 0.05, 0.5 if quick else BALL_T_END


def ball_jax(jax: Any, jnp: Any) -> Callable:
    steps = math.ceil(BALL_T_END / BALL_DT) + 1

    def loss(v0, restitution, drag, t_end):
        def step(carry, _):
            x, y, vx, vy, t, bounces = carry
            active = (t < t_end) & (bounces < BOUNCES)
            speed = jnp.sqrt(vx * vx + vy * vy)
            vx_n = vx - BALL_DT * drag * speed * vx
            vy_n = vy - BALL_DT * (GRAVITY + drag * speed * vy)
            x_n = x + BALL_DT * vx_n
            y_n = y + BALL_DT * vy_n
            hit = y_n < 0.0
            new = (x_n, jnp.where(hit, -restitution * y_n, y_n), vx_n,
                   jnp.where(hit, -restitution * vy_n, vy_n), t + BALL_DT,
                   jnp.where(hit, bounces + 1, bounces))
            return tuple(jnp.where(active, n, o) for n, o in zip(new, carry)), None
        init = (0.0, 1.0, v0[0], v0[1], 0.0, 0)
        (x, *_), _ = jax.lax.scan(step, init, None, length=steps)
        return x
    return loss


INNER_MAX = 300
INNER_GTOL = 0.06


def logistic_loss(w, X, y):
    z = X @ w
    return cnp.mean(cnp.logaddexp(0.0, z) - y * z)


def meta_learning(log_lr, w0, Xb, yb, X_val, y_val, max_steps):
    """Validation loss after minibatch SGD from w0 with learning rate exp(log_lr), run
    until a minibatch gradient is small (or max_steps steps); batches taken in turn."""
    lr = cnp.exp(log_lr)
    w, k, g2 = w0, 0, math.inf
    while k < max_steps and g2 > INNER_GTOL * INNER_GTOL:
        batch = k % Xb.shape[0]
        g = cg.grad(logistic_loss)(w, Xb[batch], yb[batch])
        w = w - lr * g
        g2 = cnp.sum(g * g)
        k = k + 1
    return logistic_loss(w, X_val, y_val)


def meta_args(quick: bool) -> tuple:
    rng = np.random.default_rng(4)
    d, batches, size = (3, 2, 4) if quick else (6, 4, 16)
    w_true = rng.standard_normal(d)

    def data(n):
        X = rng.standard_normal((n, d))
        return X, (X @ w_true + 0.5 * rng.standard_normal(n) > 0).astype(float)
    X, y = data(batches * size)
    X_val, y_val = data(64)
    return (math.log(0.5), np.zeros(d), X.reshape(batches, size, d),
            y.reshape(batches, size), X_val, y_val, 5 if quick else INNER_MAX)


def meta_jax(jax: Any, jnp: Any) -> Callable:
    def logistic(w, X, y):
        z = X @ w
        return jnp.mean(jnp.logaddexp(0.0, z) - y * z)

    def loss(log_lr, w0, Xb, yb, X_val, y_val, max_steps):
        lr = jnp.exp(log_lr)

        def step(carry, _):
            w, k, g2 = carry
            active = (k < max_steps) & (g2 > INNER_GTOL * INNER_GTOL)
            batch = k % Xb.shape[0]
            g = jax.grad(logistic)(w, Xb[batch], yb[batch])
            return (jnp.where(active, w - lr * g, w), jnp.where(active, k + 1, k),
                    jnp.where(active, jnp.sum(g * g), g2)), None
        (w, *_), _ = jax.lax.scan(step, (w0, 0, jnp.inf), None, length=INNER_MAX)
        return logistic(w, X_val, y_val)
    return loss


MARCH_EPS = 1e-6
MARCH_FAR = 20.0
MARCH_MAX = 100


def scene(q, centre, radius):
    """Signed distance to the union of a sphere and the ground plane y = -1."""
    return min(cnp.sqrt(cnp.sum((q - centre) ** 2)) - radius, q[1] + 1.0)


def sphere_tracing(centre, radius, origin, directions):
    """Summed depth of the rays from `origin` along `directions` (rows): each marches by
    the scene's distance until within MARCH_EPS of a surface, beyond MARCH_FAR, or after
    MARCH_MAX steps."""
    total = 0.0
    for direction in directions:
        t, dist, steps = 0.0, math.inf, 0
        while dist > MARCH_EPS and t < MARCH_FAR and steps < MARCH_MAX:
            dist = scene(origin + t * direction, centre, radius)
            t = t + dist
            steps = steps + 1
        total = total + t
    return total


def sphere_args(quick: bool) -> tuple:
    side = 2 if quick else 6
    u, v = np.meshgrid(np.linspace(-0.4, 0.4, side), np.linspace(-0.5, 0.2, side))
    directions = np.stack([u.ravel(), v.ravel(), np.ones(side * side)], axis=1)
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    return np.array([0.2, 0.0, 4.0]), 1.0, np.zeros(3), directions


def sphere_jax(jax: Any, jnp: Any) -> Callable:
    def dist_to(q, centre, radius):
        return jnp.minimum(jnp.sqrt(jnp.sum((q - centre) ** 2)) - radius, q[1] + 1.0)

    def loss(centre, radius, origin, directions):
        def ray(direction):
            def step(carry, _):
                t, dist, steps = carry
                active = (dist > MARCH_EPS) & (t < MARCH_FAR) & (steps < MARCH_MAX)
                d = dist_to(origin + t * direction, centre, radius)
                return (jnp.where(active, t + d, t), jnp.where(active, d, dist),
                        jnp.where(active, steps + 1, steps)), None
            (t, _, _), _ = jax.lax.scan(step, (0.0, jnp.inf, 0), None, length=MARCH_MAX)
            return t
        return jnp.sum(jax.vmap(ray)(directions))
    return loss


def rnn_readout(W, U, b, v, X, fire):
    """A tanh RNN reads the rows of X until its readout v . h exceeds `fire`; the loss
    is the squared distance of the readout from 1 at that point."""
    h = cnp.zeros(b.shape[0])
    for x in X:
        h = cnp.tanh(W @ h + U @ x + b)
        if v @ h > fire:
            break
    return (v @ h - 1.0) ** 2


def rnn_args(quick: bool) -> tuple:
    hidden, inputs, steps = (3, 2, 6) if quick else (16, 4, 500)
    rng = np.random.default_rng(10)
    W = rng.standard_normal((hidden, hidden)) * 0.9 / np.sqrt(hidden)
    U = rng.standard_normal((hidden, inputs)) * 0.5
    X = rng.standard_normal((steps, inputs)) + np.linspace(0.0, 1.0, steps)[:, None]
    return W, U, np.zeros(hidden), np.ones(hidden) / np.sqrt(hidden), X, 2.0


def rnn_jax(jax: Any, jnp: Any) -> Callable:
    def loss(W, U, b, v, X, fire):
        def step(carry, x):
            h, done = carry
            h_new = jnp.where(done, h, jnp.tanh(W @ h + U @ x + b))
            return (h_new, done | (v @ h_new > fire)), None
        (h, _), _ = jax.lax.scan(step, (jnp.zeros(b.shape[0]), False), X)
        return (v @ h - 1.0) ** 2
    return loss


THERMO_DT = 0.01  # hours
THERMO_T_END = 48.0
SWITCHES = 12
OUTSIDE, HEATER, LOW, HIGH, COMFORT = 5.0, 35.0, 19.0, 22.0, 20.5


def thermostat(heat_rate, leak_rate, temp0, t_end):
    """A room heated towards HEATER while the heater is on and leaking towards OUTSIDE,
    switched off above HIGH and on below LOW: the integrated comfort error plus heating
    time, until the SWITCHES-th switch (or t_end)."""
    temp, heating, t, switches, cost = temp0, 1.0, 0.0, 0, 0.0
    while t < t_end and switches < SWITCHES:
        if heating > 0.5:
            rate = heat_rate * (HEATER - temp) + leak_rate * (OUTSIDE - temp)
        else:
            rate = leak_rate * (OUTSIDE - temp)
        temp = temp + THERMO_DT * rate
        cost = cost + THERMO_DT * ((temp - COMFORT) ** 2 + 0.5 * heating)
        if heating > 0.5 and temp > HIGH:
            heating, switches = 0.0, switches + 1
        elif heating < 0.5 and temp < LOW:
            heating, switches = 1.0, switches + 1
        t = t + THERMO_DT
    return cost


def thermostat_args(quick: bool) -> tuple:
    return 0.25, 0.1, 15.0, 0.5 if quick else THERMO_T_END


def thermostat_jax(jax: Any, jnp: Any) -> Callable:
    steps = math.ceil(THERMO_T_END / THERMO_DT) + 1

    def loss(heat_rate, leak_rate, temp0, t_end):
        def step(carry, _):
            temp, heating, t, switches, cost = carry
            active = (t < t_end) & (switches < SWITCHES)
            on = heating > 0.5
            rate = jnp.where(on, heat_rate * (HEATER - temp) + leak_rate * (OUTSIDE - temp),
                             leak_rate * (OUTSIDE - temp))
            temp_n = temp + THERMO_DT * rate
            cost_n = cost + THERMO_DT * ((temp_n - COMFORT) ** 2 + 0.5 * heating)
            off_now = on & (temp_n > HIGH)
            on_now = ~on & (temp_n < LOW)
            heating_n = jnp.where(off_now, 0.0, jnp.where(on_now, 1.0, heating))
            new = (temp_n, heating_n, t + THERMO_DT,
                   jnp.where(off_now | on_now, switches + 1, switches), cost_n)
            return tuple(jnp.where(active, n, o) for n, o in zip(new, carry)), None
        init = (temp0, 1.0, 0.0, 0, 0.0)
        (*_, cost), _ = jax.lax.scan(step, init, None, length=steps)
        return cost
    return loss


# ---------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    name: str
    fun: Callable  # the cfgrad program
    argnums: tuple[int, ...]  # the arguments it is differentiated in
    args: Callable[[bool], tuple]  # quick -> arguments
    jax: Callable[[Any, Any], Callable]  # (jax, jax.numpy) -> the JAX loss
    jax_note: str  # what the JAX version does


WORKLOADS = (
    Workload("rk23", rk23, (0, 1), rk23_args, rk23_jax,
             f"scan over {RK23_MAX_STEPS} trial steps, masked after t reaches t_end"),
    Workload("bisection", kepler, (0, 1), kepler_args, kepler_jax,
             f"vmap over the roots; scan over {KEPLER_MAX} bisection steps, masked once "
             "the bracket is within tolerance"),
    Workload("rk45", rk45, (0, 1), rk45_args, rk45_jax,
             f"scan over {RK45_MAX_STEPS} trial steps, masked after t reaches t_end"),
    Workload("cg", conjugate_gradients, (0, 1), cg_args, cg_jax,
             f"scan over {CG_MAX} iterations, masked once the residual is small"),
    Workload("ball", bouncing_ball, (0, 1, 2), ball_args, ball_jax,
             f"scan over {math.ceil(BALL_T_END / BALL_DT) + 1} Euler steps (t_end / dt), "
             "masked after the last bounce"),
    Workload("meta", meta_learning, (0, 1), meta_args, meta_jax,
             f"scan over {INNER_MAX} SGD steps (jax.grad inside), masked once the gradient "
             "is small"),
    Workload("sphere", sphere_tracing, (0, 1), sphere_args, sphere_jax,
             f"vmap over the rays; scan over {MARCH_MAX} march steps, masked after a hit "
             "or a miss"),
    Workload("rnn", rnn_readout, (0, 1, 2), rnn_args, rnn_jax,
             "scan over the whole sequence, masked after the readout fires"),
    Workload("switched", thermostat, (0, 1, 2), thermostat_args, thermostat_jax,
             f"scan over {math.ceil(THERMO_T_END / THERMO_DT) + 1} Euler steps "
             "(t_end / dt), masked after the last switch"),
)
REALISTIC = tuple(w for w in WORKLOADS if w.name != "rk23")


def example_args() -> dict[str, tuple]:
    """Two of the programs at their quick arguments, for `cfgrad inspect
    examples/realistic.py:rk23` (tests/tools/test_cli.py runs every example function named here,
    about a second each, so not all nine)."""
    return {w.fun.__name__: w.args(True) for w in WORKLOADS if w.name in ("rk23", "bisection")}


def gradient_and_trips(w: Workload, args: tuple) -> tuple[tuple, str]:
    """`w`'s gradient by the interpreter, and what its loops did: per loop region, its
    trip count (one run) or its runs and mean trips (a loop run inside another)."""
    _, pullback = cg.vjp(w.fun, *args)
    cotangents = pullback(1.0)
    parts = []
    for loop in pullback.stats.loops:
        trips = loop.trip_counts
        parts.append(str(trips[0]) if len(trips) == 1
                     else f"{len(trips)}×{sum(trips) / len(trips):.0f}")
    return tuple(cotangents[i] for i in w.argnums), " / ".join(parts)


def assert_close(got: Any, want: Any, what: str) -> None:
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=RTOL_CHECK, atol=0.0,
                                   err_msg=what)


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def measure(w: Workload, quick: bool,
            libs: dict[str, Any]) -> tuple[dict[str, float], str, str]:
    """Seconds per gradient of `w` in the interpreter, under `cg.jit` and JAX's jit (the
    latter two unless quick, JAX when installed), each checked against the interpreter's
    gradient first; the loops' trip counts; and the cg.jit compile cell (its time, or
    why it falls back)."""
    sizes = QUICK if quick else FULL
    args = w.args(quick)
    grad = cg.grad(w.fun, w.argnums)
    want, trips = gradient_and_trips(w, args)
    assert_close(grad(*args), want, f"{w.name}: cg.grad")
    times = {"interpreter": best_time(lambda: grad(*args), sizes)}
    if quick:
        return times, trips, ""
    jitted = cg.jit(grad)
    compiled = jitted_pass(jitted, args, {})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cg.CompileWarning)
        assert_close(jitted(*args), want, f"{w.name}: cg.jit")
        times["cg.jit"] = best_time(lambda: jitted(*args), sizes)
    if "jax" in libs:
        jax = libs["jax"]
        jax_grad = jax.jit(jax.grad(w.jax(jax, libs["jax.numpy"]), w.argnums))
        assert_close(jax_grad(*args), want, f"{w.name}: JAX")
        times["jax"] = best_time(lambda: jax.block_until_ready(jax_grad(*args)), sizes)
    if compiled.backend != "numba":
        return times, trips, f"runs in the interpreter: {compiled.detail}"
    return times, trips, compiled.detail


def section(console: Console, quick: bool, libs: dict[str, Any]) -> None:
    """The realistic programs' gradient times: cfgrad's interpreter, `cg.jit` and JAX's
    jit (with quick, tiny sizes and the interpreter alone), RK23 also against numpy by
    hand; every gradient checked first."""
    sizes = QUICK if quick else FULL
    table = Table(title="Realistic programs: one gradient (best of up to "
                  f"{sizes.repeats} runs)" + (" at tiny sizes" if quick else ""))
    for column in ("program", "loop trips", "interpreter", "cg.jit", "JAX jit", "jit ÷ JAX",
                   "interp. ÷ JAX", "cg.jit compile"):
        table.add_column(column, justify="left" if column in ("program", "cg.jit compile")
                         else "right")
    jit_ratios, interp_ratios = [], []
    measured = {}
    for w in WORKLOADS:
        times, trips, compile_cell = measure(w, quick, libs)
        measured[w.name] = times
        row = [w.name, trips]
        row += [fmt_time(times[k]) if k in times else "" for k in ("interpreter", "cg.jit",
                                                                  "jax")]
        if compile_cell.startswith("runs in the interpreter"):
            row[3] += " (interpreter)"
        if "jax" in times:
            jit_ratio = times["cg.jit"] / times["jax"]
            interp_ratio = times["interpreter"] / times["jax"]
            if w.name != "rk23":
                jit_ratios.append(jit_ratio)
                interp_ratios.append(interp_ratio)
            row += [f"{jit_ratio:.2f}×", f"{interp_ratio:.1f}×"]
        else:
            row += ["", ""]
        table.add_row(*row, compile_cell)
    if jit_ratios:
        table.add_row("geometric mean, the 8 below rk23", "", "", "", "",
                      f"{geomean(jit_ratios):.2f}×", f"{geomean(interp_ratios):.1f}×", "",
                      style="bold")
    console.print(table)
    notes = ["loop trips: per loop region of the program, its trip count in the gradient's "
             "forward run, or runs × mean trips for a loop run inside another",
             "every gradient is checked against JAX's (when it runs) and RK23's also "
             f"against numpy by hand, to rtol {RTOL_CHECK:g}, before timing"]
    if quick:
        notes.append("--quick: tiny sizes, the interpreter only (no cg.jit, no JAX)")
    else:
        notes.append("cg.jit: cg.jit(cg.grad(f)); its compile time is Numba's (cold) or "
                     "loading the machine code from the disk cache; a program that falls "
                     "back runs in the interpreter, and the CompileWarning's reason is shown "
                     "(the geometric mean takes its time as it is)")
        if "jax" not in libs:
            notes.append("jax is not installed: no JAX column")
    if "jax" in libs and not quick:
        notes.append("JAX: jax.jit of jax.grad, float64. lax.while_loop cannot be "
                     "reverse-differentiated, so each data-dependent loop is a lax.scan over "
                     "a static maximum with jnp.where masking: it does the maximum's work "
                     "whatever the stop, forward and reverse. Per program:")
        notes += [f"{w.name}: {w.jax_note}" for w in WORKLOADS]
    print_notes(console, notes)
    rk23_table(console, quick, measured["rk23"])


def rk23_table(console: Console, quick: bool, times: dict[str, float]) -> None:
    """Adaptive RK23's gradient against the numpy one written by hand."""
    sizes = QUICK if quick else FULL
    args = rk23_args(quick)
    p_bar, y_bar, accepted, rejected = rk23_grad_by_hand(*args)
    assert_close((p_bar, y_bar), cg.grad(rk23, (0, 1))(*args), "rk23: numpy by hand")
    hand = best_time(lambda: rk23_grad_by_hand(*args), sizes)
    table = Table(title=f"Adaptive RK23, {accepted} accepted and {rejected} rejected steps: "
                  "one gradient against numpy by hand")
    for column in ("numpy by hand", "interpreter", "interp. ÷ numpy", "cg.jit",
                   "jit ÷ numpy"):
        table.add_column(column, justify="right")
    row = [fmt_time(hand), fmt_time(times["interpreter"]),
           f"{times['interpreter'] / hand:.2f}×"]
    if "cg.jit" in times:
        row += [fmt_time(times["cg.jit"]), f"{times['cg.jit'] / hand:.2f}×"]
    table.add_row(*row)
    console.print(table)
    print_notes(console, ["numpy by hand: the same solver on numpy arrays keeping each "
                          "accepted step's state, then the reverse sweep derived by hand "
                          "(rk23_grad_by_hand); the step-size controller is under "
                          "stop_gradient in every version"])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, interpreter only")
    quick = parser.parse_args().quick
    section(Console(width=None if sys.stdout.isatty() else 150), quick,
            {} if quick else load_others()[0])
