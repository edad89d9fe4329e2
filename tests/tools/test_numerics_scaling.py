"""Gradient clipping on pytrees and dynamic loss scaling (issue 5, items 5 and 6).

Expected values come from numpy on the flattened leaves, from closed forms, or from the
GradScaler rules stated in each test (grow after `growth_interval` clean steps, back off
and restart the tracker on an inf/nan, skip that step).
"""

from __future__ import annotations

import warnings
from collections import namedtuple

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad.checkpoint import Binomial, EveryK, Online, Recompute, StoreAll
from cfgrad.errors import NonFiniteError, ScalerStateError
from cfgrad.testing import check_grads
from cfgrad.tree import flatten, tree_map

Pair = namedtuple("Pair", "first second")
F16_TINY = float(np.finfo(np.float16).smallest_subnormal)  # 2**-24


def nested_tree():
    """Every container kind, mixed float dtypes, a Python scalar and a None."""
    return {"w": np.array([[3.0, -4.0], [0.5, 12.0]], np.float32),
            "b": [np.array([-7.0, 0.25], np.float16), (2.5, None)],
            "p": Pair(np.float64(-1.5), np.array([1e-3, -30.0]))}


def concat(tree) -> np.ndarray:
    return np.concatenate([np.ravel(np.asarray(x, np.float64)) for x in flatten(tree)[0]])


def assert_same_structure_and_dtypes(a, b):
    la, ta = flatten(a)
    lb, tb = flatten(b)
    assert ta == tb
    assert [np.asarray(x).dtype for x in la] == [np.asarray(x).dtype for x in lb]


# ---------------------------------------------------------------------------------
# clip_by_value
# ---------------------------------------------------------------------------------


def test_clip_by_value_on_a_nested_tree_keeps_structure_and_dtypes():
    tree = nested_tree()
    out = cg.clip_by_value(tree, -2.0, 1.0)
    assert_same_structure_and_dtypes(out, tree)
    np.testing.assert_array_equal(concat(out), np.clip(concat(tree), -2.0, 1.0))


def test_clip_by_value_keeps_float16_with_float64_bounds():
    x = np.array([-3.0, 0.5, 70000.0 / 2], np.float16)
    out = cg.clip_by_value(x, np.float64(-1.0), np.float64(2.0))
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out, np.array([-1.0, 0.5, 2.0], np.float16))


def test_clip_by_value_traced_inside_grad_loop_and_cond():
    """d/dx sum(w * clip(x)) is w where lo <= x <= hi (the bound goes to x), else 0; the
    clipping runs in a fori_loop body inside a cond branch."""
    w = np.array([1.0, 2.0, 3.0, 4.0])

    def f(p):
        def clipped_twice():
            return cg.fori_loop(0, 2, lambda i, t: cg.clip_by_value(t, -1.0, 1.0), p)

        t = cg.cond(cnp.sum(p["x"]) > -100.0, clipped_twice, lambda: p)
        return cnp.sum(w * t["x"]) + cnp.sum(t["y"][0])

    p = {"x": np.array([-2.0, -1.0, 0.5, 3.0]), "y": [np.array([0.5, 5.0])]}
    g = cg.grad(f)(p)
    np.testing.assert_array_equal(g["x"], [0.0, 2.0, 3.0, 0.0])
    np.testing.assert_array_equal(g["y"][0], [1.0, 0.0])


# ---------------------------------------------------------------------------------
# clip_by_global_norm
# ---------------------------------------------------------------------------------


def test_global_norm_clipping_of_a_nested_tree():
    tree = nested_tree()
    norm_expected = np.linalg.norm(concat(tree))
    out, norm = cg.clip_by_global_norm(tree, 5.0)
    assert norm == pytest.approx(norm_expected, rel=1e-12)
    assert_same_structure_and_dtypes(out, tree)
    scale = 5.0 / norm_expected
    for got, x in zip(flatten(out)[0], flatten(tree)[0]):
        dtype = np.asarray(x).dtype
        want = (np.asarray(x, np.float64) * scale).astype(dtype)
        np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=np.finfo(dtype).eps)
    assert np.linalg.norm(concat(out)) == pytest.approx(5.0, rel=1e-3)  # float16 leaves


def test_global_norm_below_max_norm_leaves_the_values_alone():
    tree = nested_tree()
    out, norm = cg.clip_by_global_norm(tree, 1e6)
    np.testing.assert_array_equal(concat(out), concat(tree))
    assert norm < 1e6


def test_float16_global_norm_does_not_overflow():
    """300^2 and 400^2 overflow float16 (max 65504); the sum is taken in float64."""
    x = np.array([300.0, 400.0], np.float16)
    out, norm = cg.clip_by_global_norm(x, 1.0)
    assert norm == 500.0 and norm.dtype == np.float64
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out, np.array([0.6, 0.8], np.float16))


def test_integer_leaves_are_neither_counted_nor_scaled():
    """A step counter or a mask riding along in a gradient tree: the norm is over the
    float leaves only, and the integer leaves come back unchanged (scaling 7 by 0.5 and
    casting back would give 3)."""
    tree = {"w": np.array([3.0, 4.0]), "step": np.array(7), "mask": np.array([True, False])}
    out, norm = cg.clip_by_global_norm(tree, 2.5)
    assert norm == 5.0
    np.testing.assert_array_equal(out["w"], [1.5, 2.0])
    assert out["step"] is tree["step"] and out["mask"] is tree["mask"]


def test_empty_tree():
    out, norm = cg.clip_by_global_norm({"a": None}, 1.0)
    assert out == {"a": None} and norm == 0.0


@pytest.mark.parametrize("bad", [np.inf, np.nan])
def test_nonfinite_norm_warns_and_returns_the_tree_unchanged(bad):
    tree = {"a": np.array([1.0, bad]), "b": [np.array([2.0], np.float16)]}
    with pytest.warns(RuntimeWarning, match=f"global norm of the tree is {bad}") as record:
        out, norm = cg.clip_by_global_norm(tree, 1.0)
    assert len(record) == 1 and record[0].filename == __file__
    assert out is tree
    assert out["a"][1] is not None and np.isnan(norm) == np.isnan(bad)


def test_nonfinite_norm_raises_on_request():
    with pytest.raises(NonFiniteError, match="nan") as info:
        cg.clip_by_global_norm([np.array([np.nan])], 1.0, error_if_nonfinite=True)
    assert isinstance(info.value, cg.CfgradError)
    assert isinstance(info.value, FloatingPointError)


def test_finite_norm_with_error_if_nonfinite_clips_silently():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out, norm = cg.clip_by_global_norm(np.array([3.0, 4.0]), 1.0, error_if_nonfinite=True)
    np.testing.assert_allclose(out, [0.6, 0.8], rtol=1e-15)


@pytest.mark.parametrize("max_norm", [0.0, -1.0, np.nan])
def test_max_norm_must_be_positive(max_norm):
    with pytest.raises(cg.ArgumentValueError, match="max_norm"):
        cg.clip_by_global_norm(np.ones(2), max_norm)


def clipped_dot(p, w, max_norm=1.0):
    clipped, _ = cg.clip_by_global_norm(p, max_norm)
    return cnp.sum(clipped["a"] * w["a"]) + cnp.sum(clipped["b"][0] * w["b"][0])


def test_gradient_through_global_norm_clipping_matches_the_closed_form():
    """For |p| > c: d/dp [c p.w / |p|] = c (w - (p.w) p / |p|^2) / |p|."""
    p = {"a": np.array([3.0, -1.0]), "b": [np.array([2.0, 0.5, 1.5])]}
    w = {"a": np.array([0.3, -2.0]), "b": [np.array([1.0, 0.7, -0.4])]}
    pv, wv = concat(p), concat(w)
    n = np.linalg.norm(pv)
    want = (wv - pv.dot(wv) * pv / n ** 2) / n
    np.testing.assert_allclose(concat(cg.grad(clipped_dot)(p, w)), want, rtol=1e-12)
    check_grads(clipped_dot, (p, w), modes=("rev",))


def test_gradient_through_global_norm_clipping_is_w_below_the_norm_and_at_zero():
    """Below max_norm the map is the identity; at the all-zero tree too, and the guarded
    square root keeps its gradient finite (a bare sqrt would give 0 * inf = nan)."""
    w = {"a": np.array([0.3, -2.0]), "b": [np.array([1.0, 0.7, -0.4])]}
    for p in ({"a": np.array([0.1, 0.2]), "b": [np.array([0.0, 0.1, 0.3])]},
              tree_map(np.zeros_like, w)):
        np.testing.assert_array_equal(concat(cg.grad(clipped_dot)(p, w)), concat(w))


def test_traced_global_norm_passes_a_nonfinite_tree_through():
    def f(p):
        clipped, norm = cg.clip_by_global_norm(p, 1.0)
        return clipped, norm

    (clipped, norm), _ = cg.vjp(f, np.array([np.inf, 2.0]))
    assert np.isinf(norm)
    np.testing.assert_array_equal(clipped, [np.inf, 2.0])
    (clipped, norm), _ = cg.vjp(f, np.array([3.0, 4.0]))
    assert norm == 5.0
    np.testing.assert_allclose(clipped, [0.6, 0.8], rtol=1e-15)


def test_traced_error_if_nonfinite_is_refused():
    def f(x):
        return cnp.sum(cg.clip_by_global_norm(x, 1.0, error_if_nonfinite=True)[0])

    with pytest.raises(cg.ArgumentValueError, match="concrete values"):
        cg.grad(f)(np.ones(3))


def clipped_descent(x, w):
    """Five steps of clipped descent in a while_loop: the clipping (and its guarded square
    root and where) sits in a loop body that every checkpoint strategy must replay."""
    def body(carry):
        t, p = carry
        step, _ = cg.clip_by_global_norm({"x": p["x"] * w, "y": [p["y"] ** 2]}, 1.0)
        clipped = cg.clip_by_value(step, -0.3, 0.3)
        return t + 1, {"x": p["x"] - 0.5 * clipped["x"], "y": p["y"] - 0.5 * clipped["y"][0]}

    _, p = cg.while_loop(lambda c: c[0] < 5, body, (0, {"x": x, "y": x[:2]}))
    return cnp.sum(p["x"] ** 2) + cnp.sum(cnp.sin(p["y"]))


@pytest.mark.parametrize("strategy", [Recompute(), EveryK(2), Online(2), Binomial(3)],
                         ids=["Recompute", "EveryK", "Online", "Binomial"])
def test_clipping_in_a_loop_body_is_identical_under_every_strategy(strategy):
    x, w = np.array([1.5, -2.0, 0.7]), np.array([0.8, 1.3, -0.4])
    reference = cg.grad(clipped_descent, (0, 1), checkpoint=StoreAll())(x, w)
    got = cg.grad(clipped_descent, (0, 1), checkpoint=strategy)(x, w)
    for a, b in zip(got, reference):
        np.testing.assert_array_equal(a, b)
    assert all(np.all(np.isfinite(g)) and np.any(g != 0) for g in reference)
    check_grads(clipped_descent, (x, w), modes=("rev",))


finite = st.floats(-1e3, 1e3, allow_nan=False, width=64)


@settings(max_examples=30)
@given(st.lists(st.lists(finite, min_size=1, max_size=5), min_size=1, max_size=4),
       st.floats(0.01, 100.0))
def test_clipped_norm_is_the_smaller_of_norm_and_max_norm(rows, max_norm):
    tree = [np.array(r) for r in rows]
    norm_expected = np.linalg.norm(concat(tree))
    out, norm = cg.clip_by_global_norm(tree, max_norm)
    assert norm == pytest.approx(norm_expected, rel=1e-12, abs=1e-300)
    assert np.linalg.norm(concat(out)) == pytest.approx(min(norm_expected, max_norm),
                                                        rel=1e-12, abs=1e-300)
    np.testing.assert_allclose(concat(out) * max(norm_expected, max_norm),
                               concat(tree) * max_norm, rtol=1e-12, atol=1e-300)


# ---------------------------------------------------------------------------------
# LossScaler: the scale schedule
# ---------------------------------------------------------------------------------

CLEAN = {"g": np.array([1.0, -2.0], np.float16)}
OVERFLOW = {"g": np.array([np.inf, -2.0], np.float16)}
NAN = {"g": np.array([1.0, np.nan], np.float32)}


def keep(params, grads):
    """An update_fn whose result is recognisably new."""
    return {"p": params["p"] + 1.0}


def one_iteration(scaler, grads, params=None):
    params = {"p": np.zeros(2)} if params is None else params
    out = scaler.step(keep, params, grads)
    scaler.update()
    return out


def test_scale_grows_after_growth_interval_clean_steps():
    scaler = cg.LossScaler(init_scale=8.0, growth_interval=3)
    history = []
    for _ in range(7):
        one_iteration(scaler, CLEAN)
        history.append((scaler.scale, scaler.growth_tracker))
    assert history == [(8.0, 1), (8.0, 2), (16.0, 0), (16.0, 1), (16.0, 2), (32.0, 0),
                       (32.0, 1)]
    assert scaler.skipped_steps == 0


@pytest.mark.parametrize("bad", [OVERFLOW, NAN])
def test_overflow_halves_the_scale_skips_the_step_and_resets_the_tracker(bad):
    scaler = cg.LossScaler(init_scale=1024.0, growth_interval=3)
    one_iteration(scaler, CLEAN)
    one_iteration(scaler, CLEAN)
    assert scaler.growth_tracker == 2
    calls = []
    params = {"p": np.array([1.0, 2.0])}
    out = scaler.step(lambda p, g: calls.append(g) or keep(p, g), params, bad)
    assert out is params and out["p"] is params["p"]  # untouched: the same objects
    np.testing.assert_array_equal(params["p"], [1.0, 2.0])
    assert calls == []
    scaler.update()
    assert (scaler.scale, scaler.growth_tracker, scaler.skipped_steps) == (512.0, 0, 1)
    # the tracker restarted: three more clean steps are needed to grow
    for expected in (512.0, 512.0, 1024.0):
        one_iteration(scaler, CLEAN)
        assert scaler.scale == expected


def test_skipped_steps_are_counted_and_clean_steps_applied():
    scaler = cg.LossScaler(init_scale=2.0 ** 10, growth_interval=100)
    params = {"p": np.zeros(2)}
    for grads in (CLEAN, OVERFLOW, CLEAN, NAN, OVERFLOW, CLEAN):
        params = one_iteration(scaler, grads, params)
    assert scaler.skipped_steps == 3
    np.testing.assert_array_equal(params["p"], [3.0, 3.0])  # three applied steps
    assert scaler.scale == 2.0 ** 7


def test_several_steps_per_iteration_back_off_if_any_overflowed():
    scaler = cg.LossScaler(init_scale=64.0, growth_interval=1)
    a, b = {"p": np.zeros(1)}, {"p": np.zeros(1)}
    a2 = scaler.step(keep, a, CLEAN)
    b2 = scaler.step(keep, b, OVERFLOW)
    scaler.update()
    assert a2["p"][0] == 1.0 and b2 is b
    assert scaler.scale == 32.0 and scaler.skipped_steps == 1
    scaler.step(keep, a, CLEAN)
    scaler.step(keep, b, CLEAN)
    scaler.update()
    assert scaler.scale == 64.0  # growth_interval=1: one clean iteration grows it


def test_update_needs_a_step():
    scaler = cg.LossScaler()
    with pytest.raises(ScalerStateError, match="step"):
        scaler.update()
    one_iteration(scaler, CLEAN)
    with pytest.raises(ScalerStateError) as info:
        scaler.update()  # the previous update consumed the step's check
    assert isinstance(info.value, cg.CfgradError)


def test_growth_stops_short_of_float32_overflow():
    top = float(np.float32(2.0 ** 127))
    scaler = cg.LossScaler(init_scale=top, growth_interval=1)
    one_iteration(scaler, CLEAN)
    assert scaler.scale == top and scaler.growth_tracker == 0


def test_static_mode_keeps_the_scale_and_still_skips():
    scaler = cg.LossScaler(init_scale=128.0, growth_interval=1, dynamic=False)
    params = {"p": np.zeros(2)}
    for grads in (CLEAN, CLEAN, OVERFLOW, CLEAN):
        params = one_iteration(scaler, grads, params)
        assert scaler.scale == 128.0
    assert scaler.skipped_steps == 1
    np.testing.assert_array_equal(params["p"], [3.0, 3.0])


def test_disabled_scaler_is_a_pass_through():
    scaler = cg.LossScaler(init_scale=1024.0, enabled=False)
    assert scaler.scale == 1.0
    loss = np.float16(3.0)
    assert scaler.scale(loss) is loss
    assert scaler.unscale(OVERFLOW) is OVERFLOW
    seen = []
    params = {"p": np.zeros(2)}
    scaler.step(lambda p, g: seen.append(g) or p, params, OVERFLOW)
    assert seen == [OVERFLOW]  # no check, no unscaling
    scaler.update()
    scaler.update()  # no step needed when disabled
    assert (scaler.scale, scaler.skipped_steps, scaler.state_dict()) == (1.0, 0, {})
    scaler.load_state_dict({})

    def f(x):
        return cnp.sum(cnp.sin(x))

    x = np.array([0.5, 1.0], np.float16)
    value, grads = scaler.value_and_grad(f)(x)
    v_ref, g_ref = cg.value_and_grad(f)(x)
    assert value == v_ref and grads.dtype == np.float16
    np.testing.assert_array_equal(grads, g_ref)


@pytest.mark.parametrize("kwargs", [
    {"init_scale": 0.0}, {"init_scale": np.inf}, {"growth_factor": 1.0},
    {"backoff_factor": 1.0}, {"backoff_factor": 0.0}, {"growth_interval": 0},
    {"growth_interval": 2.5},
])
def test_invalid_parameters(kwargs):
    with pytest.raises(cg.ArgumentValueError):
        cg.LossScaler(**kwargs)


# ---------------------------------------------------------------------------------
# LossScaler: scale, unscale, state
# ---------------------------------------------------------------------------------


def test_scale_multiplies_eager_losses_keeping_their_dtype():
    scaler = cg.LossScaler()  # 2**16
    assert scaler.scale == 65536.0 and float(scaler.scale) == 65536.0
    for dtype in (np.float16, np.float32, np.float64):
        out = scaler.scale(dtype(0.25))
        assert out.dtype == dtype and out == 16384.0
    assert np.isinf(scaler.scale(np.float16(1.0)))  # 65536 is beyond float16's range
    np.testing.assert_array_equal(scaler.scale(np.array([1.0, 2.0], np.float32)),
                                  [65536.0, 131072.0])


def test_scale_refuses_traced_losses():
    scaler = cg.LossScaler()

    def f(x):
        return scaler.scale(cnp.sum(x * x))

    with pytest.raises(cg.ArgumentTypeError, match="value_and_grad"):
        cg.grad(f)(np.ones(2))


def test_unscale_produces_float32_for_float16_so_small_gradients_survive():
    scaler = cg.LossScaler(init_scale=2.0 ** 15)
    grads = {"h": np.array([2.0 ** -10, 3.0], np.float16),
             "s": np.array([6.0], np.float32), "d": np.array([5.0])}
    out = scaler.unscale(grads)
    assert [out[k].dtype for k in ("d", "h", "s")] == [np.float64, np.float32, np.float32]
    # 2**-25 is below float16's smallest subnormal, exact in float32
    np.testing.assert_array_equal(out["h"], np.array([2.0 ** -25, 3.0 * 2.0 ** -15]))
    assert np.float16(out["h"][0]) == 0.0  # what unscaling in float16 would give
    assert out["s"][0] == np.float32(6.0 / 2 ** 15) and out["d"][0] == 5.0 / 2 ** 15


def test_state_dict_round_trip():
    scaler = cg.LossScaler(init_scale=256.0, growth_factor=4.0, backoff_factor=0.25,
                           growth_interval=3)
    for grads in (CLEAN, CLEAN, CLEAN, OVERFLOW, CLEAN, CLEAN):
        one_iteration(scaler, grads)
    state = scaler.state_dict()
    assert state == {"scale": 256.0, "growth_factor": 4.0, "backoff_factor": 0.25,
                     "growth_interval": 3, "growth_tracker": 2, "skipped_steps": 1}
    restored = cg.LossScaler()
    restored.load_state_dict(state)
    assert restored.state_dict() == state
    for grads in (CLEAN, OVERFLOW, CLEAN, CLEAN, CLEAN):  # identical behaviour afterwards
        one_iteration(scaler, grads)
        one_iteration(restored, grads)
        assert restored.state_dict() == scaler.state_dict()
    # tracker 2 -> a clean step grows 256 to 1024; the overflow backs off to 256; three
    # clean steps grow it to 1024 again
    assert scaler.scale == 1024.0 and scaler.growth_tracker == 0


def test_load_state_dict_names_missing_keys():
    with pytest.raises(cg.ArgumentValueError, match="disabled"):
        cg.LossScaler().load_state_dict({})
    with pytest.raises(cg.ArgumentValueError, match="growth_tracker"):
        cg.LossScaler().load_state_dict({"scale": 2.0, "growth_factor": 2.0,
                                         "backoff_factor": 0.5, "growth_interval": 3,
                                         "skipped_steps": 0})


# ---------------------------------------------------------------------------------
# LossScaler.value_and_grad
# ---------------------------------------------------------------------------------


def test_value_and_grad_gives_scaled_gradients_and_the_unscaled_value():
    def f(w, x):
        return cnp.sum(cnp.tanh(x @ w) ** 2)

    w = np.array([0.5, -1.0, 0.25])
    x = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]])
    scaler = cg.LossScaler(init_scale=2.0 ** 12)
    value, scaled = scaler.value_and_grad(f)(w, x)
    v_ref, g_ref = cg.value_and_grad(f)(w, x)
    assert value == v_ref
    np.testing.assert_array_equal(scaled, g_ref * 2.0 ** 12)  # powers of two: exact
    np.testing.assert_array_equal(scaler.unscale(scaled), g_ref)
    (gw, gx) = scaler.value_and_grad(f, argnums=(0, 1))(w, x)[1]
    np.testing.assert_array_equal(scaler.unscale(gx), cg.grad(f, 1)(w, x))
    np.testing.assert_array_equal(scaler.value_and_grad(f, argnums=-1)(w, x)[1], gx)
    for bad in (2, -3):  # never the scale, which follows the arguments
        with pytest.raises(cg.ArgumentValueError, match="argnums"):
            scaler.value_and_grad(f, argnums=bad)(w, x)


def test_value_and_grad_does_not_retrace_when_the_scale_changes():
    calls = []

    def f(x):
        calls.append(1)
        return cnp.sum(x * x)

    scaler = cg.LossScaler(init_scale=4.0, growth_interval=1)
    vg = scaler.value_and_grad(f)
    x = np.array([1.0, 3.0])
    seen = []
    for _ in range(4):
        value, grads = vg(x)
        seen.append((scaler.scale, grads.tolist()))
        scaler.step(lambda p, g: p, x, grads)
        scaler.update()
    assert seen == [(4.0, [8.0, 24.0]), (8.0, [16.0, 48.0]), (16.0, [32.0, 96.0]),
                    (32.0, [64.0, 192.0])]
    assert len(calls) == 1  # traced once; the scale is an argument, not a constant


def test_value_and_grad_keeps_float16_and_float32_programs():
    """The program keeps its inputs' dtype up to the loss; only the product with the
    (float32) scale is float32. Gradients come back in the parameters' dtype."""
    def f(w):
        return cnp.sum(cnp.sin(w) * w)

    for dtype in (np.float16, np.float32):
        w = np.array([0.5, -1.25, 2.0], dtype)
        scaler = cg.LossScaler(init_scale=2.0 ** 8)
        value, scaled = scaler.value_and_grad(f)(w)
        assert value.dtype == dtype and scaled.dtype == dtype
        exact = np.cos(w.astype(np.float64)) * w + np.sin(w.astype(np.float64))
        eps = float(np.finfo(dtype).eps)  # each term rounds in `dtype`; entry 2 cancels
        np.testing.assert_allclose(scaler.unscale(scaled), exact, rtol=2 * eps,
                                   atol=2 * eps * np.abs(exact).max())


# ---------------------------------------------------------------------------------
# float16 underflow: zero gradients without scaling, correct ones with it
# ---------------------------------------------------------------------------------

WEIGHT = 2.0 ** -20


def tiny_loss(w, x, y):
    """A weighted least-squares loss whose gradients are ~1e-8 to 1e-6 in float64."""
    return cnp.mean((cnp.tanh(x @ w) - y) ** 2) * WEIGHT


def tiny_problem(dtype):
    rng = np.random.default_rng(1)
    w = rng.standard_normal(5) * 0.5
    x = rng.uniform(-1.0, 1.0, (32, 5))
    y = rng.uniform(-1.0, 1.0, 32)
    return tuple(a.astype(np.float16).astype(dtype) for a in (w, x, y))


def test_float16_gradients_underflow_to_zero_without_scaling():
    exact = cg.grad(tiny_loss)(*tiny_problem(np.float64))
    assert np.all(exact != 0) and np.median(np.abs(exact)) < 1e-6
    g16 = cg.grad(tiny_loss)(*tiny_problem(np.float16))
    assert g16.dtype == np.float16
    np.testing.assert_array_equal(g16, np.zeros(5))


def test_float16_gradients_are_correct_with_the_loss_scaler():
    exact = cg.grad(tiny_loss)(*tiny_problem(np.float64))
    scaler = cg.LossScaler()
    vg = scaler.value_and_grad(tiny_loss)
    w, x, y = tiny_problem(np.float16)
    applied = []
    for _ in range(3):  # 2**16 overflows float16 (the loss's own cotangent), 2**15 does not
        _, scaled = vg(w, x, y)
        assert scaled.dtype == np.float16
        scaler.step(lambda p, g: applied.append(g) or p, w, scaled)
        scaler.update()
    assert scaler.skipped_steps == 1 and scaler.scale == 2.0 ** 15 and len(applied) == 2
    unscaled = applied[0]
    assert unscaled.dtype == np.float32 and np.all(unscaled != 0)
    error = np.abs(unscaled - exact).max() / np.abs(exact).max()
    assert error < 2 * float(np.finfo(np.float16).eps)


def test_dynamic_scaler_on_a_float16_loss_settles_at_two_to_the_fifteen():
    """Every attempt at 2**16 overflows and is skipped: with growth_interval k the skipped
    steps are 1, 1 + (k + 1), 1 + 2 (k + 1), ..."""
    k, steps = 4, 17
    scaler = cg.LossScaler(growth_interval=k)
    vg = scaler.value_and_grad(tiny_loss)
    w, x, y = tiny_problem(np.float16)
    skipped = []
    for i in range(1, steps + 1):
        _, scaled = vg(w, x, y)
        before = scaler.skipped_steps
        scaler.step(lambda p, g: p, w, scaled)
        if scaler.skipped_steps > before:
            skipped.append(i)
        scaler.update()
    assert skipped == list(range(1, steps + 1, k + 1))
    assert scaler.scale == 2.0 ** 15
