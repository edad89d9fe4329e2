"""`static_argnums` of `grad`, `value_and_grad` and `vjp`: static arguments are hashable
Python values passed as they are, keying the cache of traced programs (as `jax.jit`'s),
taking no gradient; gradients checked against central differences."""

from __future__ import annotations

import numpy as np
import pytest

import cfgrad as cg
import cfgrad.numpy as cnp


def make_power_sum():
    """A function whose trace depends on a Python int (a loop's trip count and a power),
    recording each time it is traced."""
    traced = []

    def f(x, n, scale):
        traced.append((n, scale))
        return cg.fori_loop(0, n, lambda i, c: cnp.sin(c) * scale, x) ** 2

    return f, traced


def reference(x, n, scale):
    for _ in range(n):
        x = np.sin(x) * scale
    return x ** 2


def central(fun, x, eps=1e-6):
    return (fun(x + eps) - fun(x - eps)) / (2 * eps)


@pytest.mark.parametrize("n", [0, 1, 3])
def test_gradient_matches_finite_differences(n):
    f, _ = make_power_sum()
    g = cg.grad(f, static_argnums=(1, 2))(0.7, n, 1.3)
    np.testing.assert_allclose(g, central(lambda x: reference(x, n, 1.3), 0.7), rtol=1e-6)


def test_static_values_key_the_cache_and_retrace_when_they_change():
    f, traced = make_power_sum()
    g = cg.grad(f, static_argnums=(1, 2))
    first = g(0.7, 3, 1.3)
    assert g(0.2, 3, 1.3) != first  # new dynamic value, same program
    assert traced == [(3, 1.3)]
    g(0.7, 4, 1.3)
    g(0.7, 3, 2.0)
    assert traced == [(3, 1.3), (4, 1.3), (3, 2.0)]
    g(0.7, 4, 1.3)
    assert len(traced) == 3
    # equal values of different types are different keys: 2 and 2.0 trace differently
    g(0.7, 3, 2)
    assert traced[-1] == (3, 2) and type(traced[-1][1]) is int


def test_negative_static_argnums_and_value_and_grad():
    f, _ = make_power_sum()
    value, g = cg.value_and_grad(f, static_argnums=(-2, -1))(0.7, 2, 1.3)
    np.testing.assert_allclose(value, reference(0.7, 2, 1.3))
    np.testing.assert_allclose(g, central(lambda x: reference(x, 2, 1.3), 0.7), rtol=1e-6)


def test_several_argnums_around_a_static_one():
    def f(x, n, y):
        return cg.fori_loop(0, n, lambda i, c: c * y + cnp.sin(x), x)

    gx, gy = cg.grad(f, argnums=(0, 2), static_argnums=1)(0.5, 3, 0.9)

    def ref(x, y):
        c = x
        for _ in range(3):
            c = c * y + np.sin(x)
        return c

    np.testing.assert_allclose(gx, central(lambda x: ref(x, 0.9), 0.5), rtol=1e-6)
    np.testing.assert_allclose(gy, central(lambda y: ref(0.5, y), 0.9), rtol=1e-6)


def test_vjp_gives_none_for_static_arguments():
    f, _ = make_power_sum()
    out, pullback = cg.vjp(f, 0.7, 3, 1.3, static_argnums=(1, 2))
    np.testing.assert_allclose(out, reference(0.7, 3, 1.3))
    gx, gn, gs = pullback(1.0)
    assert gn is None and gs is None
    np.testing.assert_allclose(gx, central(lambda x: reference(x, 3, 1.3), 0.7), rtol=1e-6)
    assert pullback(2.0)[1:] == (None, None)


def test_static_argnums_inside_a_trace():
    """A derivative of a derivative: the inner transformation closes over the statics."""
    f, _ = make_power_sum()

    def first(x):
        return cg.grad(f, static_argnums=(1, 2))(x, 3, 1.3)

    def first_by_vjp(x):
        return cg.vjp(f, x, 3, 1.3, static_argnums=(1, 2))[1](1.0)[0]

    expected = central(lambda x: cg.grad(f, static_argnums=(1, 2))(x, 3, 1.3), 0.7)
    np.testing.assert_allclose(cg.grad(first)(0.7), expected, rtol=1e-6)
    np.testing.assert_allclose(cg.grad(first_by_vjp)(0.7), expected, rtol=1e-6)


def test_unhashable_static_argument_is_a_typed_error_naming_it():
    f, _ = make_power_sum()
    with pytest.raises(cg.ArgumentTypeError,
                       match=r"f: static argument 1 \(`n`\) is a list, which is not hashable"):
        cg.grad(f, static_argnums=(1, 2))(0.7, [3], 1.3)
    with pytest.raises(TypeError):  # ArgumentTypeError is a TypeError too
        cg.vjp(f, 0.7, 3, np.array([1.3]), static_argnums=(1, 2))


def test_argnums_may_not_overlap_static_argnums():
    f, _ = make_power_sum()
    with pytest.raises(cg.ArgumentValueError,
                       match="argument 1 is in both argnums and static_argnums"):
        cg.grad(f, argnums=(0, 1), static_argnums=1)(0.7, 3, 1.3)
    with pytest.raises(cg.ArgumentValueError, match="in both"):
        cg.grad(f, argnums=-2, static_argnums=1)(0.7, 3, 1.3)


def test_bad_static_argnums():
    f, _ = make_power_sum()
    with pytest.raises(cg.ArgumentValueError, match="static_argnums includes 5"):
        cg.grad(f, static_argnums=5)(0.7, 3, 1.3)
    with pytest.raises(cg.ArgumentTypeError, match="static_argnums must be an int"):
        cg.grad(f, static_argnums="n")


@pytest.mark.parametrize("transform", ["value_and_grad", "jit"])
def test_static_values_are_keyed_by_type_and_bits_at_every_depth(transform):
    """0.0 and -0.0, 2 and 2.0 (inside a tuple) are equal in Python but trace different
    programs: each gets its own entry (they shared one, and a call got the other's
    result). A NaN finds its entry: it traces once (it traced on every call)."""
    traced = []

    def f(x, s):
        traced.append(s)
        return x / s[1] + cnp.sum(cnp.zeros(3, type(s[0][0])) + x)

    call = (cg.jit(f, static_argnums=1) if transform == "jit"
            else cg.value_and_grad(f, static_argnums=1))

    def value(s):
        out = call(3.0, s)
        return out if transform == "jit" else out[0]

    assert value(((2,), 0.0)) == np.inf
    assert value(((2,), -0.0)) == -np.inf
    assert value(((2.0,), -0.0)) == -np.inf
    assert [(type(s[0][0]), bool(np.signbit(s[1]))) for s in traced] == [
        (int, False), (int, True), (float, True)]
    for _ in range(3):
        assert np.isnan(value(((2,), float("nan"))))
    assert len(traced) == 4


def test_a_static_argument_taking_new_values_keeps_a_bounded_cache(monkeypatch):
    """A program calling with ever new static values (or shapes) keeps the signatures
    traced last, not all of them (the cache grew without end). The bound is made small
    here (each new static value of a jitted function is a compile)."""
    import cfgrad.api
    import cfgrad.jitted
    from cfgrad.api import _CACHE

    limit = 4
    monkeypatch.setattr(cfgrad.api, "SIGNATURES_PER_FUNCTION", limit)
    monkeypatch.setattr(cfgrad.jitted, "SIGNATURES_PER_FUNCTION", limit)

    def f(x, s):
        return x * s

    jitted = cg.jit(f, static_argnums=1)
    grad = cg.grad(f, static_argnums=1)
    for s in range(limit + 3):
        assert jitted(2.0, float(s)) == 2.0 * s
        assert grad(2.0, float(s)) == s
    assert len(_CACHE[f]) == limit and len(jitted._runners) == limit
    assert grad(2.0, 1.0) == 1.0 and jitted(2.0, 1.0) == 2.0  # an evicted one traces again


def test_static_data_of_a_registered_pytree_is_keyed_by_type_and_bits():
    """A dataclass's meta fields (aux data) key the caches as static arguments do: they
    were compared with ==, so 0.0 and -0.0, 2 and 2.0 shared a Program (the second call
    got the first one's numbers), and a NaN traced on every call."""
    import dataclasses

    @dataclasses.dataclass
    class Scaled:
        x: float
        s: float = dataclasses.field(metadata=dict(static=True))

    cg.tree_util.register_dataclass(Scaled)
    traced = []

    def f(c):
        traced.append(c.s)
        return c.x / c.s * (2 if type(c.s) is int else 3)

    g = cg.grad(f)
    assert g(Scaled(1.0, 0.0)).x == np.inf
    assert g(Scaled(1.0, -0.0)).x == -np.inf
    assert g(Scaled(1.0, 2)).x == 1.0 and g(Scaled(1.0, 2.0)).x == 1.5
    for _ in range(3):
        g(Scaled(1.0, float("nan")))
    assert len(traced) == 5
    assert cg.jit(f)(Scaled(1.0, -0.0)) == -np.inf


def test_a_bounded_cache_filled_by_threads_at_once_stays_bounded_and_consistent():
    """Eight threads adding entries to one BoundedDict (as threads calling a transformed
    function with new signatures do): no error, and never more than its limit (evicting
    without a lock raised KeyError or 'dictionary changed size during iteration')."""
    from threads import all_at_once

    from cfgrad.caches import BoundedDict

    cache: BoundedDict = BoundedDict(8)
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            for i in range(5000):
                cache[(k, i)] = i
                cache.setdefault((k, -i), i)
                assert len(cache) <= 8
        except BaseException as e:  # noqa: BLE001 - collected, the test re-raises
            errors.append(e)

    all_at_once(work)
    assert not errors, errors[:3]
    assert len(cache) == 8


def test_vjp_takes_a_numpy_integer_static_argnums():
    """vjp's shortcut for the default `static_argnums` compared it with `==`, which numpy
    scalars and arrays answer elementwise: a raw ValueError instead of the call (or the
    typed error)."""
    out, pullback = cg.vjp(lambda x, y: x * y, 2.0, 3.0, static_argnums=np.int64(1))
    assert out == 6.0 and pullback(1.0) == (3.0, None)
    with pytest.raises(cg.ArgumentTypeError, match="static_argnums must be an int"):
        cg.vjp(lambda x, y: x * y, 2.0, 3.0, static_argnums=np.array([1]))
