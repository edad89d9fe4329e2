"""The realistic programs of examples/realistic.py: cfgrad's gradients (interpreter only)
against central differences of the programs run as plain Python on numpy values, and the
hand-written numpy gradient of adaptive RK23 against cfgrad's.

The programs run at the benchmark's full sizes, so the events that stop their loops
(tolerances, bounces, mode switches, a readout firing) do happen. Differences are taken
along two random directions per differentiated argument (the scheme of
`cg.testing.check_grads`), not through cfgrad: the reference is Python executing the
same source on concrete values (docs/autograph.md, reference semantics).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from unittest import mock

import numpy as np
import pytest

import cfgrad as cg

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
# realistic imports benchmark, which pins thread pools through os.environ: keep that from
# reaching the subprocesses of other tests
with mock.patch.dict(os.environ):
    import realistic

EPS = 1e-6  # relative step of the central differences
# rk23's step-size controller is under stop_gradient: its gradient leaves out h's
# dependence on the parameters, which the differences see. That part is of the order of
# the solver's tolerance (in p: 2e-6 here at rtol 1e-6, 3e-8 at 1e-8, 3e-9 at 1e-9; in
# y0 1e-5 here), and it grows over long runs of the Brusselator (6e-4 at the benchmark's
# t_end = 10), so rk23 is checked on a shorter interval (still with rejected steps) to
# 1e-4. test_rk23_hand_gradient_matches_cfgrad checks it to 1e-9.
RTOL = {"rk23": 1e-4}
SHORTER = {"rk23": lambda: realistic.rk23_args(False)[:2] + (2.0, 1e-6)}


def perturbed(args: tuple, i: int, delta: np.ndarray) -> tuple:
    """args with argument i moved by delta, keeping a Python float a float."""
    x = args[i]
    moved = float(x + delta) if isinstance(x, float) else np.asarray(x, float) + delta
    return args[:i] + (moved,) + args[i + 1:]


@pytest.mark.parametrize("workload", realistic.WORKLOADS, ids=lambda w: w.name)
def test_gradient_matches_central_differences(workload):
    args = SHORTER[workload.name]() if workload.name in SHORTER else workload.args(False)
    grads = cg.grad(workload.fun, workload.argnums)(*args)
    rng = np.random.default_rng(0)
    for i, g in zip(workload.argnums, grads, strict=True):
        x = np.asarray(args[i], float)
        assert np.shape(g) == x.shape
        step = EPS * max(1.0, float(np.max(np.abs(x))))
        for _ in range(2):
            v = rng.standard_normal(x.shape)
            v /= np.linalg.norm(v)
            plus = workload.fun(*perturbed(args, i, step * v))
            minus = workload.fun(*perturbed(args, i, -step * v))
            difference = (float(plus) - float(minus)) / (2.0 * step)
            directional = float(np.sum(np.asarray(g) * v))
            scale = float(np.linalg.norm(g))
            assert abs(directional - difference) <= RTOL.get(workload.name, 1e-6) * scale, (
                workload.name, i, directional, difference)


@pytest.mark.parametrize("quick", [True, False])
def test_rk23_hand_gradient_matches_cfgrad(quick):
    args = realistic.rk23_args(quick)
    p_bar, y_bar, accepted, rejected = realistic.rk23_grad_by_hand(*args)
    want_p, want_y = cg.grad(realistic.rk23, (0, 1))(*args)
    np.testing.assert_allclose(p_bar, want_p, rtol=1e-9)
    np.testing.assert_allclose(y_bar, want_y, rtol=1e-9)
    _, pullback = cg.vjp(realistic.rk23, *args)
    pullback(1.0)
    assert pullback.stats.loops[0].trip_counts == [accepted + rejected]
    assert rejected > 0  # the accept/reject path is exercised
