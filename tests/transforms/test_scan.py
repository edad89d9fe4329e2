"""cg.scan, indexed updates (`x.at[idx]`) and dynamic slices.

scan is checked against hand-written fori_loops and central differences, under every
checkpoint strategy (bitwise the same gradient), nested in and around the other control
flow, to second order, reversed and of no steps; its output stacks must cost what a loop
returning only its final carry costs. The indexed updates are checked against numpy's
in-place forms and central differences, at JAX's conventions (repeated indices, ties,
out-of-bounds modes), and the dynamic slices against their clamping semantics.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad.checkpoint import Binomial, EveryK, Online, Recompute, StoreAll
from cfgrad.testing import check_grads

STRATEGIES = [StoreAll(), Binomial(2), Recompute(), EveryK(3), Online(2)]
RNG = np.random.default_rng(13)
W = RNG.normal(size=(3, 3)) * 0.5
XS = RNG.normal(size=(7, 3))
H0 = RNG.normal(size=3)


def scanned(h0: Any, xs: Any, reverse: bool = False, checkpoint: Any = None) -> Any:
    def body(h, x):
        h = cnp.tanh(W @ h + x)
        return h, (h * h, cnp.sum(h))
    h, (ys, s) = cg.scan(body, h0, xs, reverse=reverse, checkpoint=checkpoint)
    return cnp.sum(h) + cnp.sum(ys * cnp.arange(1.0, 8.0)[:, None]) + cnp.sum(s ** 3)


def by_hand(h0: Any, xs: Any, reverse: bool = False) -> Any:
    n = xs.shape[0]

    def body(i, c):
        h, acc = c
        t = n - 1 - i if reverse else i
        h = cnp.tanh(W @ h + xs[t])
        return h, acc + cnp.sum(h * h) * (t + 1.0) + cnp.sum(h) ** 3
    h, acc = cg.fori_loop(0, n, body, (h0, 0.0))
    return cnp.sum(h) + acc


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_matches_a_hand_written_loop_and_finite_differences(reverse):
    f = lambda h, x: scanned(h, x, reverse)  # noqa: E731
    g = lambda h, x: by_hand(h, x, reverse)  # noqa: E731
    assert f(H0, XS) == pytest.approx(g(H0, XS), rel=1e-13)
    for a, b in zip(cg.grad(f, (0, 1))(H0, XS), cg.grad(g, (0, 1))(H0, XS)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    check_grads(f, (H0, XS), modes=("fwd", "rev"))


@pytest.mark.parametrize("reverse", [False, True])
def test_every_strategy_gives_bitwise_the_same_gradient(reverse):
    grads = [cg.grad(lambda h, x, s=s: scanned(h, x, reverse, s), (0, 1))(H0, XS)
             for s in STRATEGIES]
    for g in grads[1:]:
        for a, b in zip(grads[0], g):
            np.testing.assert_array_equal(a, b)


def test_eager_scan_is_the_traced_one():
    def body(c, x):
        return c * 0.9 + x, (c, x * 2)
    xs = np.arange(5.0)
    for reverse in (False, True):
        eager = cg.scan(body, 1.0, xs, reverse=reverse)
        traced = cg.jvp(lambda x, r=reverse: cg.scan(body, 1.0, x, reverse=r), (xs,),
                        (np.ones(5),))[0]
        assert eager[0] == traced[0]
        for a, b in zip(eager[1], traced[1]):
            np.testing.assert_array_equal(a, b)
    # lax.scan's reverse: ys stay in the order of xs
    np.testing.assert_array_equal(
        cg.scan(lambda c, x: (c + x, c * x), 0.0, np.array([0.5, -1.0, 0.25, 2.0]),
                reverse=True)[1], [0.625, -2.25, 0.5, 0.0])


def test_zero_length_and_xs_none():
    def body(c, x):
        return c + cnp.sum(x), (c * x, None)
    xs = np.zeros((0, 2))
    for run in (lambda: cg.scan(body, 1.0, xs),
                lambda: cg.jvp(lambda x: cg.scan(body, 1.0, x), (xs,), (xs,))[0]):
        carry, (ys, none) = run()
        assert carry == 1.0 and none is None
        assert ys.shape == (0, 2) and ys.dtype == np.float64
    np.testing.assert_array_equal(cg.grad(lambda x: cg.scan(body, 1.0, x)[0])(xs), xs)
    # xs None: `length` steps; d/da of 1 + a + a^2 + a^3 at a = 2
    assert cg.grad(lambda a: cnp.sum(cg.scan(lambda c, _: (c * a, c), 1.0, None,
                                             length=4)[1]))(2.0) == 17.0


@pytest.mark.parametrize("checkpoint", [None, *STRATEGIES], ids=repr)
def test_derivatives_of_a_scan_of_no_steps(checkpoint):
    """The adjoint of a scan of no steps indexes its empty ys stack in a body that never
    runs: it must trace (JAX: d carry/d init = 1, ys' cotangent empty)."""
    def body(c, t):
        return c * 2.0 + (0.0 if t is None else cnp.sum(t)), (c, c * cnp.ones(2))

    empty = np.zeros((0, 2))
    for xs, n in ((None, 0), (empty, None)):
        def run(x, xs=xs, n=n):
            return cg.scan(body, x, xs, length=n, checkpoint=checkpoint)
        assert cg.grad(lambda x: run(x)[0])(2.0) == 1.0  # ys unused
        assert cg.grad(lambda x: run(x)[0] + cnp.sum(run(x)[1][1]))(2.0) == 1.0  # ys used
        (c, (ys, zs)), vjp = cg.vjp(run, 2.0)
        assert c == 2.0 and ys.shape == (0,) and zs.shape == (0, 2)
        assert vjp((1.0, (np.zeros(0), np.zeros((0, 2)))))[0] == 1.0
        tangent = cg.jvp(run, (2.0,), (1.0,))[1]
        assert tangent[0] == 1.0 and tangent[1][1].shape == (0, 2)
    np.testing.assert_array_equal(
        cg.grad(lambda xs: cnp.sum(cg.scan(body, 2.0, xs, checkpoint=checkpoint)[1][1]))(empty),
        empty)


def nested(x):
    def outer(c, row):
        return cg.scan(lambda ci, v: (ci * cnp.sin(v) + v, ci * v), c, row, reverse=True)
    c, yss = cg.scan(outer, 0.3, x)
    return c + cnp.sum(yss * yss)


def in_cond(x):
    return cg.cond(cnp.sum(x) > 0,
                   lambda x: cnp.sum(cg.scan(lambda c, v: (c + v, c * v), 1.0, x.ravel())[1]),
                   lambda x: cnp.sum(x ** 2), x)


def cond_inside(x):
    def body(c, v):
        y = cg.cond(v > 0, lambda: c * v, lambda: cnp.cos(c + v))
        return c + y * 0.5, (y, v * c)
    c, (a, b) = cg.scan(body, 0.2, x.ravel())
    return c + cnp.sum(a * b)


def while_inside(x):
    def body(c, v):
        _, z = cg.while_loop(lambda s: s[0] < 3, lambda s: (s[0] + 1, cnp.sin(s[1]) + v),
                             (0, c))
        return z, z * v
    c, ys = cg.scan(body, 0.1, x.ravel(), checkpoint=Binomial(2))
    return c * cnp.sum(ys)


def inside_fori(x):
    def body(i, c):
        c2, ys = cg.scan(lambda a, xy: (a * xy[0] + xy[1], {"p": a, "q": xy[1]}), c,
                         (x[:, 0], x[:, 1]))
        return c2 * 0.5 + cnp.sum(ys["p"] * ys["q"])
    return cg.fori_loop(0, 3, body, 0.4)


def matrix_ys(x):
    c, ys = cg.scan(lambda c, v: (cnp.tanh(c + v), cnp.outer(c, v)), x[0], x[1:],
                    reverse=True)
    return cnp.sum(ys ** 2) + cnp.sum(c)


@pytest.mark.parametrize("f", [nested, in_cond, cond_inside, while_inside, inside_fori,
                               matrix_ys])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_scan_in_and_around_control_flow_to_second_order(f, sign):
    x = sign * np.random.default_rng(5).normal(size=(4, 3))
    check_grads(f, (x,), modes=("fwd", "rev"), order=2)
    grads = [cg.grad(f, checkpoint=s)(x) for s in STRATEGIES]
    for g in grads[1:]:
        np.testing.assert_array_equal(grads[0], g)
    # jvp of grad (forward over reverse) against the Hessian by reverse over forward
    v = np.random.default_rng(6).normal(size=x.shape)
    hv = cg.jvp(cg.grad(f), (x,), (v,))[1]
    hv_rev = cg.grad(lambda y: cg.jvp(f, (y,), (v,))[1])(x)
    np.testing.assert_allclose(hv, hv_rev, rtol=1e-10, atol=1e-12)


def test_the_stacked_ys_cost_what_a_loop_returning_its_carry_costs():
    """1000 steps: the scan's output stack is written in place, so neither StoreAll nor
    Binomial snapshots or tapes it; the statistics equal those of the same fori_loop."""
    n, d = 1000, 16
    rng = np.random.default_rng(0)
    w, xs = rng.normal(size=(d, d)) / 4, rng.normal(size=(n, d))

    def scan_ys(h0, xs, ck):
        _, ys = cg.scan(lambda h, x: (cnp.tanh(w @ h + x),) * 2, h0, xs, checkpoint=ck)
        return cnp.sum(ys)

    def fori(h0, xs, ck):
        return cnp.sum(cg.fori_loop(0, n, lambda i, h: cnp.tanh(w @ h + xs[i]), h0,
                                    checkpoint=ck))

    for ck, snapshots, nbytes in ((StoreAll(), 1000, 136_000), (Binomial(4), 4, 680)):
        stats = []
        for f in (scan_ys, fori):
            _, pullback = cg.vjp(lambda h, x, f=f, ck=ck: f(h, x, ck), np.zeros(d), xs)
            pullback(1.0)
            stats.append(pullback.stats.loops[0])
        for s in stats:
            assert (s.peak_snapshots, s.peak_bytes) == (snapshots, nbytes)
        assert stats[0].recompute_steps == stats[1].recompute_steps


def test_the_program_shows_a_scan_loop_and_parses_back():
    program = cg.lower(lambda xs: cg.scan(lambda c, x: (c * x, c + x), 1.0, xs), np.ones(3))
    text = program.text()
    assert " scan preheader " in text and "bounds (0, 3)" in text and "write_row" in text
    assert cg.parse_program(text).text() == text


def test_scan_errors():
    with pytest.raises(cg.ArgumentValueError, match="disagree on the number of steps"):
        cg.scan(lambda c, x: (c, x), 0.0, (np.ones(3), np.ones(4)))
    with pytest.raises(cg.ArgumentValueError, match="give length"):
        cg.scan(lambda c, x: (c, x), 0.0, None)
    with pytest.raises(cg.LoweringError, match="must return a pair"):
        cg.grad(lambda x: cg.scan(lambda c, v: c + v, x, np.ones(2))[0])(1.0)
    with pytest.raises(cg.LoweringError, match="carry leaf 0 from f64"):
        cg.grad(lambda x: cg.scan(lambda c, v: (cnp.ones(2) * c, v), x, np.ones(2))[0])(1.0)


# -- indexed updates ------------------------------------------------------------------


def numpy_update(op: str, x: np.ndarray, idx: Any, v: Any) -> np.ndarray:
    y = x.copy()
    if op == "set":
        y[idx] = v
    else:
        {"add": np.add, "multiply": np.multiply, "min": np.minimum,
         "max": np.maximum}[op].at(y, idx, v)
    return y


UPDATE_INDICES = [
    (np.array([1, 1, 3]),),
    (slice(1, 4),),
    (Ellipsis, 2),
    (np.array([[0, 2], [2, 0]]), slice(None)),
    (None, 1),
    (-1, np.array([0, 3])),
]


@pytest.mark.parametrize("op", ["set", "add", "multiply", "min", "max"])
@pytest.mark.parametrize("idx", UPDATE_INDICES, ids=str)
def test_updates_match_numpy_and_finite_differences(op, idx):
    rng = np.random.default_rng(1)
    x = rng.permutation(np.linspace(-2, 2, 20)).reshape(5, 4)
    shape = x[idx].shape
    v = rng.permutation(np.linspace(-1.9, 1.9, int(np.prod(shape)))).reshape(shape)

    def f(x, v):
        return getattr(x.at[idx], op)(v)
    got = cg.jvp(f, (x, v), (x, v))[0]
    # add sums a repeated index's updates first (numpy adds them one by one to x)
    np.testing.assert_allclose(got, numpy_update(op, x, idx, v), rtol=1e-15, atol=1e-15)
    if op != "set" or not isinstance(idx[0], np.ndarray):  # set: the last write wins
        check_grads(f, (x, v), modes=("fwd", "rev"))


def test_traced_indices_and_windows():
    x = np.arange(10.0)

    def f(x, i, j):
        return (x.at[i].add(1.0), x.at[cnp.stack([i, j, i])].add(cnp.ones(3)),
                x[i:i + 3], x.at[i:i + 3].set(0.0), x.at[j].get(mode="fill"))
    out = cg.jvp(f, (x, 2, 12), (np.ones(10), 0, 0))[0]
    np.testing.assert_array_equal(out[0], x + (np.arange(10) == 2))
    np.testing.assert_array_equal(out[1], x + 2 * (np.arange(10) == 2))  # j=12 dropped
    np.testing.assert_array_equal(out[2], [2.0, 3.0, 4.0])
    np.testing.assert_array_equal(out[3], np.where((x >= 2) & (x < 5), 0.0, x))
    assert np.isnan(out[4])
    # a window past the end is clamped to fit, as dynamic_slice
    window = cg.jvp(lambda x, i: x[i:i + 3], (x, 9), (x, 0))[0]
    np.testing.assert_array_equal(window, [7.0, 8.0, 9.0])
    check_grads(lambda x: f(x, 2, 12)[:4], (x,), modes=("fwd", "rev"))
    with pytest.raises(cg.LoweringError, match="use cg.dynamic_slice"):
        cg.grad(lambda x, i: cnp.sum(x[i:i * 2]))(x, 2)


WINDOWS = [  # x.at[index] with traced i, j; the static index numpy gives at i=1, j=2
    (lambda i, j: (slice(i, i + 2), slice(j, j + 2)), (slice(1, 3), slice(2, 4))),
    (lambda i, j: (slice(i, i + 2), slice(None), slice(j, j + 3)),
     (slice(1, 3), slice(None), slice(2, 5))),
    (lambda i, j: (slice(i, i + 2), 1, slice(j, j + 2)), (slice(1, 3), 1, slice(2, 4))),
    (lambda i, j: (j, slice(i, i + 1), slice(i, i + 3)), (2, slice(1, 2), slice(1, 4))),
    (lambda i, j: (Ellipsis, slice(j, j + 2), slice(i, i + 2)),
     (Ellipsis, slice(2, 4), slice(1, 3))),
    (lambda i, j: (slice(i, i + 2), np.array([0, 3, 0])), (slice(1, 3), np.array([0, 3, 0]))),
]


@pytest.mark.parametrize("op", ["set", "add", "multiply", "min", "max", "get"])
@pytest.mark.parametrize("case", range(len(WINDOWS)))
def test_several_windows_select_their_block(op, case):
    """Windows i:i + k on several axes select the block (their outer product), as
    x[idx] reads it, not the diagonal numpy's integer-array indices would broadcast to."""
    traced, static = WINDOWS[case]
    x = np.random.default_rng(case).normal(size=(4, 5, 6))
    v = np.random.default_rng(7).normal(size=x[static].shape)

    def f(x, v, i, j):
        ref = x.at[traced(i, j)]
        return ref.get() if op == "get" else getattr(ref, op)(v)
    got = cg.jvp(f, (x, v, 1, 2), (x, v, 0, 0))[0]
    expected = x[static] if op == "get" else numpy_update(op, x, static, v)
    np.testing.assert_allclose(got, expected, rtol=1e-15, atol=1e-15)
    if op != "set" or case != 5:  # a repeated index's set: the last write wins
        check_grads(lambda x, v: f(x, v, 1, 2), (x, v), modes=("fwd", "rev"))


def test_windows_are_clamped_and_compose_in_a_loop():
    m = np.arange(25.0).reshape(5, 5)
    # windows of different sizes, starts clamped to fit as cg.dynamic_update_slice
    got = cg.jvp(lambda m, i, j: m.at[i:i + 2, j:j + 3].set(-1.0), (m, 4, -1),
                 (m, 0, 0))[0]
    expected = m.copy()
    expected[3:5, 2:5] = -1.0
    np.testing.assert_array_equal(got, expected)
    g = cg.grad(lambda m, i, j: cnp.sum(m.at[i:i + 2, j:j + 2].set(0.0)))(m, 1, 2)
    expected = np.ones((5, 5))
    expected[1:3, 2:4] = 0.0
    np.testing.assert_array_equal(g, expected)

    def loop(m):
        return cnp.sum(cg.fori_loop(0, 3, lambda i, c: c.at[i:i + 2, i:i + 2].multiply(0.5),
                                    m) ** 2)
    by_hand = m.copy()
    for i in range(3):
        by_hand[i:i + 2, i:i + 2] *= 0.5
    assert cg.value_and_grad(loop)(m)[0] == pytest.approx(np.sum(by_hand ** 2), rel=1e-15)
    check_grads(loop, (m,), modes=("fwd", "rev"))


def test_index_errors_are_typed():
    x, m = np.arange(6.0), np.ones((3, 3))
    with pytest.raises(cg.LoweringError, match="too many indices"):
        cg.grad(lambda x: cnp.sum(x.at[0, 1].set(2.0)))(x)
    with pytest.raises(cg.LoweringError, match="too many indices"):
        cg.grad(lambda x, i: cnp.sum(x.at[0, i:i + 2].get()))(x, 1)
    with pytest.raises(cg.LoweringError, match="cannot broadcast f64\\[4\\] to \\[3\\]"):
        cg.grad(lambda m, i: cnp.sum(m.at[i].set(cnp.ones(4))))(m, 1)


def test_conventions_of_jax():
    """Numbers from JAX 0.10 (float64): repeated indices, ties, out-of-bounds modes."""
    x = np.arange(5.0)
    weights = np.arange(1.0, 6.0)
    i = np.array([1, 1, 3])

    def total(op, idx):
        return lambda x, v: cnp.sum(getattr(x.at[idx], op)(v) * weights)
    gx, gv = cg.grad(total("set", i), (0, 1))(x, np.array([10.0, 20.0, 30.0]))
    np.testing.assert_array_equal(gx, [1, 0, 3, 0, 5])
    np.testing.assert_array_equal(gv, [0, 2, 4])  # the overwritten update gets nothing
    gx, gv = cg.grad(total("min", i), (0, 1))(x, np.array([2.0, 0.5, 3.0]))
    np.testing.assert_array_equal(gx, [1, 0, 3, 2, 5])
    np.testing.assert_array_equal(gv, [0, 2, 2])
    gx, gv = cg.grad(total("max", i), (0, 1))(x, np.array([1.0, 1.0, 2.0]))
    np.testing.assert_allclose(gx, [1, 2 / 3, 3, 4, 5])
    np.testing.assert_allclose(gv, [2 / 3, 2 / 3, 0])
    gx, gv = cg.grad(total("multiply", np.array([1, 2, 3])), (0, 1))(x + 1,
                                                                     np.array([2.0, 3, 4]))
    np.testing.assert_array_equal(gx, [1, 4, 9, 16, 5])
    np.testing.assert_array_equal(gv, [4, 9, 16])
    # repeated indices with a zero update: the others' product, exactly (JAX refuses)
    gv = cg.grad(lambda v: cnp.sum(cnp.asarray(np.ones(3)).at[np.array([1, 1, 1])].multiply(v)))(
        np.array([0.0, 2.0, 3.0]))
    np.testing.assert_array_equal(gv, [6, 0, 0])
    out = cg.jvp(lambda x: (x.at[np.array([1, 7])].set(9.0), x.at[7].get(),
                            x.at[-9].get(), x.at[7].add(1.0, mode="clip"),
                            x.at[np.array([1, 7])].get(mode="fill", fill_value=-1.0)),
                 (x,), (x,))[0]
    np.testing.assert_array_equal(out[0], [0, 9, 2, 3, 4])
    assert (out[1], out[2]) == (4.0, 0.0)
    np.testing.assert_array_equal(out[3], [0, 1, 2, 3, 5])
    np.testing.assert_array_equal(out[4], [1, -1])


def test_dynamic_slices():
    m = np.arange(12.0).reshape(3, 4)
    corner = cg.jvp(lambda m, i, j: cg.dynamic_slice(m, (i, j), (2, 2)), (m, 2, -1),
                    (m, 0, 0))[0]
    np.testing.assert_array_equal(corner, m[1:3, 2:4])  # starts (3-1, -1+4) clamped to (1, 2)
    np.testing.assert_array_equal(cg.dynamic_slice(m, (1, 1), (2, 3)), m[1:3, 1:4])
    check_grads(lambda m: cg.dynamic_slice(m, (1, 3), (2, 2)), (m,), modes=("fwd", "rev"))
    u = np.array([[1.0, 2.0]])
    pasted = cg.jvp(lambda m, u, i: cg.dynamic_update_slice(m, u, (i, 7)), (m, u, 1),
                    (m, u, 0))[0]
    expected = m.copy()
    expected[1, 2:4] = u
    np.testing.assert_array_equal(pasted, expected)
    check_grads(lambda m, u: cg.dynamic_update_slice(m, u, (2, 1)), (m, u),
                modes=("fwd", "rev"))
    with pytest.raises(cg.ArgumentValueError, match="does not fit"):
        cg.dynamic_update_slice(m, np.ones((4, 1)), (0, 0))
    with pytest.raises(cg.ArgumentValueError, match="start indices for an operand"):
        cg.dynamic_slice(m, (0,), (1, 1))
    with pytest.raises(cg.ArgumentTypeError, match="must be integer scalars"):
        cg.dynamic_slice(m, (0.5, 1), (1, 1))
    # start indices as one (traced) integer array, as JAX takes them
    got = cg.jvp(lambda m, s: cg.dynamic_slice(m, s, (2, 2)), (m, np.array([5, -7])),
                 (m, np.zeros(2, np.int64)))[0]
    np.testing.assert_array_equal(got, m[1:3, 0:2])


def test_reading_rows_in_a_loop_accumulates_their_gradient_in_place():
    """The gradient of xs[t] in a loop is one row's work per iteration (accumulate_index),
    not a scatter into a zero array of xs's size: repeated and traced rows included."""
    xs = np.random.default_rng(2).normal(size=(6, 2))
    rows = np.array([0, 3, 3, 5, 1])

    def f(xs):
        _, ys = cg.scan(lambda c, x: (c * 0.5 + x, c * x), np.zeros(2), xs)
        picked = cg.fori_loop(0, 5, lambda i, acc: acc + xs[cnp.asarray(rows)[i]] ** 2,
                              np.zeros(2))
        return cnp.sum(ys) + cnp.sum(picked * xs[rows])
    adjoint = cg.adjoint(cg.lower(f, xs)).text()
    assert adjoint.count("accumulate_index") == 2  # one per loop; xs[rows] scatters once
    check_grads(f, (xs,), modes=("rev",))
