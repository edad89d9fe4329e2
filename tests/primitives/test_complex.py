"""Complex numbers first class (issue 13): complex inputs, intermediates and outputs, with
JAX's convention for derivatives, through branches and loops.

JAX's convention: a complex cotangent c of z stands for the real functional dz -> Re(c dz),
so grad of a real f is conj of df/dx + i df/dy... in practice the numbers below, which are
JAX 0.10.2's (jax_enable_x64) for the same functions, recorded here since the suite runs
without JAX. Then: grad's holomorphic=, its errors, the complex IR (types, constants, text
round trip), refusals where JAX refuses, complex64 staying complex64, and random programs
with complex carries in cond / switch / while_loop / fori_loop whose gradients agree with
finite differences along complex directions and are bitwise identical under every
checkpoint strategy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad.checkpoint import Binomial, EveryK, Online, Recompute, StoreAll
from cfgrad.interpret import Compiled, Machine
from cfgrad.testing import check_grads

Z = 3 + 4j

# (id, function, argument, JAX's grad at it)
JAX_GRADS = [
    ("|z|^2", lambda z: cnp.abs(z) ** 2, Z, 6 - 8j),
    ("|z|", cnp.abs, Z, 0.6 - 0.8j),
    ("|z| at 0", cnp.abs, 0j, 0j),
    ("angle", cnp.angle, Z, -0.16 - 0.12j),
    ("angle of a negative real", cnp.angle, -2.0, 0.0),
    ("real", cnp.real, Z, 1 + 0j),
    ("imag", cnp.imag, Z, -1j),
    ("Re(conj(z) (1+2i))", lambda z: cnp.real(cnp.conj(z) * (1 + 2j)), Z, 1 - 2j),
    ("Re(sign(z))", lambda z: cnp.real(cnp.sign(z)), Z, 0j),
    ("Re(z^(1.5+i))", lambda z: cnp.real(z ** (1.5 + 1j)), Z,
     -1.4142118660496212 + 0.7371611688809998j),
    ("Re(z^y) in y", lambda y: cnp.real(Z ** y), 1.5 + 0.5j,
     -11.909689547476496 + 5.364669334150793j),
    ("Re(z^2) at 0", lambda z: cnp.real(z ** (2.0 + 0j)), 0j, 0j),
    ("Re(0^y)", lambda y: cnp.real(0j ** y), 2.0 + 0j, 0j),
    ("Re((-2)^y)", lambda y: cnp.real((-2.0 + 0j) ** y), 1.5 + 0j,
     8.885765876316732 - 1.960516286937096j),
    ("Re(sqrt(z)) on the cut", lambda z: cnp.real(cnp.sqrt(z)), -4 + 0j, -0.25j),
    ("astype complex -> float", lambda z: z.astype(np.float64), Z, 1 + 0j),
    ("astype float -> complex", lambda x: cnp.real(x.astype(np.complex128) * (1 + 2j)), 2.0,
     1.0),
    ("Re(vdot(a, b))", lambda a: cnp.real(cnp.vdot(a, np.array([2 + 1j, 1.0]))),
     np.array([1 + 2j, 3j]), np.array([2 - 1j, 1 + 0j])),
]


@pytest.mark.parametrize("f, x, expected", [c[1:] for c in JAX_GRADS],
                         ids=[c[0] for c in JAX_GRADS])
def test_grad_follows_jax(f: Callable, x: Any, expected: Any) -> None:
    got = cg.grad(f)(x)
    assert np.asarray(got).dtype == np.asarray(x).dtype  # a real input's cotangent is real
    np.testing.assert_allclose(got, expected, rtol=1e-14, atol=1e-15)


def test_angle_gradient_at_zero_is_nan_as_jax() -> None:
    assert np.isnan(cg.grad(cnp.angle)(0j))


def test_jvp_follows_jax() -> None:
    value, tangent = cg.jvp(cnp.abs, (Z,), (1 + 2j,))
    assert (value, tangent) == (5.0, pytest.approx(2.2, rel=1e-15))
    assert cg.jvp(cnp.abs, (0j,), (1 + 2j,))[1] == 0.0
    assert cg.jvp(cnp.angle, (Z,), (1 + 2j,))[1] == pytest.approx(0.08, rel=1e-14)
    value, tangent = cg.jvp(lambda z: z * z, (Z,), (1j,))
    assert (value, tangent) == (Z * Z, 2 * Z * 1j)


def test_holomorphic_grad_is_the_complex_derivative() -> None:
    assert cg.grad(lambda z: z ** 2, holomorphic=True)(Z) == 6 + 8j
    g = cg.grad(lambda z: cnp.sum(cnp.exp(z) * cnp.sin(z)), holomorphic=True)
    z = np.array([0.3 + 0.2j, -1 + 1j])
    np.testing.assert_allclose(g(z), np.exp(z) * (np.sin(z) + np.cos(z)), rtol=1e-14)
    value, d = cg.value_and_grad(lambda z: 1 / z, holomorphic=True)(Z)
    assert value == 1 / Z and d == pytest.approx(-1 / Z ** 2, rel=1e-15)


@pytest.mark.parametrize("call, parts", [
    (lambda: cg.grad(lambda z: z ** 2)(Z), ["real-valued output", "holomorphic=True",
                                            "cg.vjp"]),
    (lambda: cg.value_and_grad(lambda z: z * 2.0)(Z), ["real-valued output"]),
    (lambda: cg.grad(lambda x: x ** 2, holomorphic=True)(2.0),
     ["holomorphic=True requires complex inputs", "float64"]),
    (lambda: cg.grad(cnp.abs, holomorphic=True)(Z), ["holomorphic=True requires a complex "
                                                     "output", "f64[]"]),
    (lambda: cg.grad(lambda n: n * 2.0)(2), ["float inputs (or complex ones)"]),
])
def test_grad_refuses_what_jax_refuses(call: Callable, parts: list[str]) -> None:
    with pytest.raises(cg.ArgumentTypeError) as info:
        call()
    for part in parts:
        assert part in str(info.value)


def test_vjp_takes_complex_outputs_and_cotangents() -> None:
    """vjp of a non-holomorphic complex-to-complex map, the cotangent's transpose: f(z) =
    conj(z) z^2 has df = 2 conj(z) z dz + z^2 dconj(z), so c -> 2 c conj(z) z + conj(c z^2)."""
    z, c = np.array([1 + 2j, -0.5j]), np.array([0.3 - 1j, 2 + 0.5j])
    out, pullback = cg.vjp(lambda z: cnp.conj(z) * z * z, z)
    np.testing.assert_allclose(out, np.conj(z) * z * z, rtol=1e-15)
    np.testing.assert_allclose(pullback(c)[0], 2 * c * np.conj(z) * z + np.conj(c * z * z),
                               rtol=1e-14)


# ---------------------------------------------------------------------------------
# Refusals where JAX refuses, and types
# ---------------------------------------------------------------------------------

REFUSED = [
    ("floor", cnp.floor), ("clip", lambda z: cnp.clip(z, 0.0, 1.0)),
    ("mod", lambda z: cnp.mod(z, 2.0)), ("floor_divide", lambda z: cnp.floor_divide(z, 2.0)),
    ("argmax", cnp.argmax), ("argmin", cnp.argmin), ("sigmoid", cnp.sigmoid),
    ("relu", cnp.relu), ("softplus", cnp.softplus), ("logsumexp", cnp.logsumexp),
]


@pytest.mark.parametrize("name, f", REFUSED, ids=[r[0] for r in REFUSED])
def test_operations_without_complex_meaning_are_refused(name: str, f: Callable) -> None:
    z = np.array([1 + 2j, -1j])
    with pytest.raises(cg.ArgumentTypeError, match=f"{name} does not accept complex"):
        f(z)
    with pytest.raises(cg.LoweringError, match=f"{name} does not accept complex"):
        cg.vjp(f, z)


LEXICOGRAPHIC = [
    ("less", lambda a, b: cnp.less(a, b), np.less),
    ("maximum", lambda a, b: cnp.maximum(a, b), np.maximum),
    ("max", lambda a, b: cnp.max(a), lambda a, b: np.max(a)),
]


@pytest.mark.parametrize("ours, theirs", [c[1:] for c in LEXICOGRAPHIC],
                         ids=[c[0] for c in LEXICOGRAPHIC])
def test_complex_comparisons_are_lexicographic_as_numpy_and_jax(ours: Callable,
                                                                theirs: Callable) -> None:
    a, b = np.array([1 + 2j, 3j, 1 + 0j]), np.array([2 + 1j, 3j, 1 + 1j])
    np.testing.assert_array_equal(ours(a, b), theirs(a, b))
    traced, _ = cg.vjp(lambda x: ours(x, b), a)
    np.testing.assert_array_equal(traced, theirs(a, b))


def test_complex_types_promote_as_numpy() -> None:
    x32 = np.array([1.0, 2.0], np.float32)
    program = cg.lower(lambda x, z: (x * 1j, x * z, cnp.abs(z), cnp.real(z) + x), x32,
                       np.array([1j, 2.0], np.complex64))
    assert [str(v.type) for v in program.outputs] == ["c64[2]", "c64[2]", "f32[2]", "f32[2]"]
    program = cg.lower(lambda z: (z * 2.0, z + 1j), np.array([1j], np.complex64))
    assert [str(v.type) for v in program.outputs] == ["c64[1]", "c64[1]"]  # weak scalars


def test_complex64_programs_stay_complex64() -> None:
    z = np.array([0.5 + 0.1j, -0.3 + 1.2j], np.complex64)

    def f(z):
        w = cg.fori_loop(0, 3, lambda i, w: w * 0.5 + cnp.sin(z) * 1j, z)
        return cnp.sum(cnp.abs(w) ** 2) + cnp.real(cnp.vdot(w, z))

    value, g = cg.value_and_grad(f)(z)
    _, tangent = cg.jvp(f, (z,), (np.ones_like(z),))
    assert np.asarray(value).dtype == np.float32 and g.dtype == np.complex64
    assert np.asarray(tangent).dtype == np.float32
    check_grads(f, (z,), modes=("fwd", "rev"))


def test_complex_constants_and_types_round_trip_through_the_text() -> None:
    def f(z, x):
        c = cnp.asarray(np.array([1j, 2.0 - 0.5j], np.complex64))
        return cnp.sum(cnp.conj(z) * c + x * 1j) + (2 + 3j), cnp.angle(z)

    args = (np.array([1 + 1j, -2j], np.complex64), np.float32(0.5))
    program = cg.lower(f, *args)
    text = program.text()
    assert "c64[2]" in text and "complex64" in text
    parsed = cg.parse_program(text)
    assert parsed.text() == text
    ran = Machine(Compiled(parsed)).run([np.asarray(a) for a in args])
    for got, want in zip(ran, f(*args), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_real_and_imag_attributes_of_traced_values() -> None:
    z = np.array([1 + 2j, 3 - 1j])
    out, _ = cg.vjp(lambda z: (z.real, z.imag, z.conj(), np.conj(z), np.real(z), np.abs(z)), z)
    for got, want in zip(out, (z.real, z.imag, z.conj(), np.conj(z), np.real(z), np.abs(z))):
        np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------------------------
# Complex carries through branches and loops, every checkpoint strategy
# ---------------------------------------------------------------------------------

STRATEGIES = (StoreAll(), EveryK(1), EveryK(3), Recompute(), Binomial(1), Binomial(3),
              Online(1), Online(3))


def rotate_until(z: Any, w: Any) -> Any:
    """A while loop on |z| with a complex carry, a cond on Re and a switch on the angle,
    in a fori loop whose body conjugates and takes parts."""
    def body(i, carry):
        z, w = carry
        z = cg.cond(cnp.real(z) > 0.0, lambda: z * (0.8 + 0.3j), lambda: cnp.conj(z) * 0.9)
        k = cnp.astype(cnp.angle(z) > 0.0, cnp.int64) + cnp.astype(cnp.abs(z) > 1.0, cnp.int64)
        w = cg.switch(k, [lambda: w * z, lambda: w + cnp.sin(z),
                          lambda: w * cnp.abs(z) - 1j * cnp.imag(w)])
        _, z = cg.while_loop(lambda c: (c[0] < 4) & (cnp.abs(c[1]) < 1.5),
                             lambda c: (c[0] + 1, c[1] * 1.1 + 0.05j * cnp.sum(w)), (0, z))
        return z, w

    z, w = cg.fori_loop(0, 5, body, (z, w))
    return cnp.sum(cnp.abs(w) ** 2) + cnp.real(z * (0.3 - 0.2j))


def test_complex_carries_every_strategy_is_bitwise_storeall() -> None:
    args = (0.4 - 0.7j, np.array([0.2 + 0.1j, -0.5 + 0.3j]))
    check_grads(rotate_until, args, modes=("fwd", "rev"))
    want = cg.grad(rotate_until, (0, 1), checkpoint=StoreAll())(*args)
    for strategy in STRATEGIES:
        got = cg.grad(rotate_until, (0, 1), checkpoint=strategy)(*args)
        for g, w in zip(got, want):
            assert np.asarray(g).dtype == np.asarray(w).dtype
            assert np.array_equal(g, w), strategy


@dataclasses.dataclass(frozen=True)
class Step:
    """z <- 0.6 z + 0.4 op(z) (or the same of w's sum), op from OPS."""

    op: str
    source: str  # "z" or "w"


OPS = {
    "sin": cnp.sin, "cube": lambda z: z * z * z * 0.3, "conj": cnp.conj,
    "abs": lambda z: cnp.abs(z) + 0j, "real": lambda z: cnp.real(z) * (1 - 1j),
    "rot": lambda z: z * (0.6 + 0.8j), "exp": lambda z: cnp.exp(z * 0.3),
}


@dataclasses.dataclass(frozen=True)
class Loop:
    kind: str  # "fori", "while", "cond", "switch"
    body: tuple
    other: tuple
    trips: int


def run_block(stmts: tuple, z: Any, w: Any) -> tuple[Any, Any]:
    for s in stmts:
        if isinstance(s, Step):
            arg = z if s.source == "z" else cnp.sum(w)
            z = 0.6 * z + 0.4 * OPS[s.op](arg)
            w = w * 0.9 + z * 0.1j
        elif s.kind == "fori":
            z, w = cg.fori_loop(0, s.trips, lambda i, c, s=s: run_block(s.body, *c), (z, w))
        elif s.kind == "while":
            _, z, w = cg.while_loop(
                lambda c, s=s: (c[0] < s.trips) & (cnp.abs(c[1]) < 2.0),
                lambda c, s=s: (c[0] + 1, *run_block(s.body, c[1], c[2])), (0, z, w))
        elif s.kind == "cond":
            z, w = cg.cond(cnp.real(z) > 0.0, lambda c, s=s: run_block(s.body, *c),
                           lambda c, s=s: run_block(s.other, *c), (z, w))
        else:
            k = cnp.astype(cnp.imag(z) > 0.0, cnp.int64)
            z, w = cg.switch(k, [lambda c, s=s: run_block(s.body, *c),
                                 lambda c, s=s: run_block(s.other, *c)], (z, w))
    return z, w


def steps() -> st.SearchStrategy:
    return st.builds(Step, st.sampled_from(sorted(OPS)), st.sampled_from(["z", "w"]))


def blocks(depth: int) -> st.SearchStrategy:
    if depth == 0:
        return st.lists(steps(), min_size=1, max_size=3).map(tuple)
    inner = blocks(depth - 1)
    construct = st.builds(Loop, st.sampled_from(["fori", "while", "cond", "switch"]), inner,
                          inner, st.integers(0, 3))
    return st.lists(st.one_of(steps(), construct), min_size=1, max_size=3).map(tuple)


@given(blocks(2), st.integers(0, 2**32 - 1))
@settings(max_examples=40, deadline=None)
def test_random_complex_programs(program: tuple, seed: int) -> None:
    """Random nests of cond / switch / while / fori over a complex scalar and vector:
    gradients along complex directions match finite differences, and every strategy's
    gradient is StoreAll's, bit for bit."""
    rng = np.random.default_rng(seed)
    z = complex(rng.uniform(-1, 1), rng.uniform(-1, 1))
    w = rng.uniform(-1, 1, 2) + 1j * rng.uniform(-1, 1, 2)

    def loss(z, w):
        z, w = run_block(program, z, w)
        return cnp.real(z) * 0.7 + cnp.sum(cnp.abs(w) ** 2)

    try:
        check_grads(loss, (z, w), modes=("fwd", "rev"))
    except cg.PathInstabilityError:
        assume(False)
    want = cg.grad(loss, (0, 1), checkpoint=StoreAll())(z, w)
    for strategy in STRATEGIES[1:]:
        got = cg.grad(loss, (0, 1), checkpoint=strategy)(z, w)
        for g, ref in zip(got, want):
            assert np.array_equal(g, ref), strategy


@pytest.mark.parametrize("jacobian", [cg.jacfwd, cg.jacrev, cg.hessian])
def test_jacobians_refuse_complex_inputs(jacobian: Callable) -> None:
    with pytest.raises(cg.ArgumentTypeError, match="Jacobians of complex inputs"):
        jacobian(lambda z: cnp.abs(z))(np.array([1j, 2.0]))


def test_check_grads_catches_a_wrong_complex_rule() -> None:
    """A rule that conjugated where it should not (the conjugate-transpose mistake) is
    caught: check_grads moves along complex directions."""
    @cg.custom_vjp
    def square(z):
        return z * z

    square.defvjp(lambda z: (z * z, z), lambda z, ct: (ct * 2.0 * cnp.conj(z),))
    with pytest.raises(AssertionError, match="rev-mode derivative"):
        check_grads(lambda z: cnp.real(square(z)), (0.5 + 1j,), modes=("rev",))


def test_complex_cotangents_and_tangents_of_real_values_are_refused() -> None:
    _, pullback = cg.vjp(lambda x: x * 2.0, 1.5)
    with pytest.raises(cg.ArgumentTypeError, match="cotangent leaf 0 is complex"):
        pullback(1j)
    with pytest.raises(cg.ArgumentTypeError, match="tangent leaf 0 is complex"):
        cg.jvp(lambda x: x * 2.0, (1.5,), (1j,))
    # a real tangent of a complex primal is a complex direction along the real axis
    assert cg.jvp(lambda z: z * z, (1j,), (1.0,))[1] == 2j


SECOND_ORDER = {
    "abs": lambda z: cnp.sum(cnp.abs(cnp.sin(z)) ** 3),
    "angle": lambda z: cnp.sum(cnp.angle(z) * cnp.abs(z)),
    "parts": lambda z: cnp.sum(cnp.real(z) * cnp.imag(z * z) + cnp.real(cnp.conj(z) * z * z)),
    "pow": lambda z: cnp.real(cnp.sum(z ** (1.5 + 0.5j))),
    "fft": lambda z: cnp.sum(cnp.abs(cnp.fft.fft(z * z)) ** 2) + cnp.sum(cnp.fft.irfft(z * z, 5)),
    "loop": lambda z: cnp.sum(cnp.abs(cg.fori_loop(0, 3, lambda i, w: w * z + cnp.conj(w),
                                                    z)) ** 2),
}


@pytest.mark.parametrize("name", sorted(SECOND_ORDER))
def test_second_derivatives_of_complex_functions(name: str) -> None:
    """The rules are differentiable themselves (|z|'s uses conj(z)/|z|, not sign(z), whose
    derivative is 0): derivatives of derivatives match finite differences."""
    z = np.array([0.3 + 0.4j, -1.0 + 0.2j, 0.5 - 0.7j])
    check_grads(SECOND_ORDER[name], (z,), order=2, modes=("fwd", "rev"))


def test_gradient_of_a_gradient_follows_jax() -> None:
    """JAX 0.10.2: grad of Re(sum(grad(f)(z) * c)) for f = sum |sin z|^2."""
    z, c = np.array([0.3 + 0.4j, -1 + 0.2j]), np.array([1 - 2j, 0.5j])

    def inner(z):
        return cnp.sum(cnp.abs(cnp.sin(z)) ** 2)

    got = cg.grad(lambda z: cnp.real(cnp.sum(cg.grad(inner)(z) * c)))(z)
    np.testing.assert_allclose(got, [1.65067123 + 5.34973979j, -1.08107237j], atol=1e-8)


@pytest.mark.parametrize("c", [complex(np.inf, 1.0), complex(1.0, np.nan),
                               complex(-0.0, -np.inf), -1j, complex(0.0, -0.0), 2.5 - 1j])
def test_every_complex_constant_reads_back_bit_for_bit(c: complex) -> None:
    """`(1+nanj)` and `(-0-1j)` would not read back (or lose a zero's sign): such numbers
    print as `complex(re, im)`, inline and in arrays."""
    program = cg.lower(lambda z: (z * c, z * np.array([c, 1j]), z * np.full(3, c)), 1j)
    text = program.text()
    parsed = cg.parse_program(text)
    assert parsed.text() == text
    with np.errstate(invalid="ignore"):  # inf * 1j has a nan part, as numpy computes
        ran = [Machine(Compiled(p)).run([np.complex128(1.0)]) for p in (parsed, program)]
    for got, want in zip(*ran, strict=True):
        np.testing.assert_array_equal(got, want)
        assert np.array_equal(np.signbit(np.real(got)), np.signbit(np.real(want)))


def test_holomorphic_second_derivative_follows_jax() -> None:
    """d^2/dz^2 (z sin z) = 2 cos z - z sin z at 0.3+0.2i (JAX 0.10.2's value too)."""
    def first(z):
        return cg.grad(lambda w: cnp.sin(w) * w, holomorphic=True)(z)

    z = 0.3 + 0.2j
    got = cg.grad(first, holomorphic=True)(z)
    assert got == pytest.approx(1.897047610405516 - 0.2369908707850643j, rel=1e-14)
    assert got == pytest.approx(2 * np.cos(z) - z * np.sin(z), rel=1e-14)


def test_elementwise_functions_that_cast_to_inexact_keep_complex_values():
    """isclose and float_power cast their integer inputs to floats; a complex input keeps
    its imaginary part (it was cast to float64, so 1+1j was close to 1+5j)."""
    a, b = np.array([1 + 1j, 2.0]), np.array([1 + 5j, 2.0])
    np.testing.assert_array_equal(cnp.isclose(a, b), np.isclose(a, b))
    np.testing.assert_allclose(cnp.float_power(np.array([1 + 1j]), 2), [2j])
    out, _ = cg.vjp(lambda z: cnp.float_power(z, 2), np.array([1 + 1j]))
    np.testing.assert_allclose(out, [2j])


def test_a_filled_out_of_bounds_get_of_a_complex_array_is_nan():
    z = np.array([1 + 2j, 3 - 1j])
    out, _ = cg.vjp(lambda z: z.at[np.array([1, 5])].get(mode="fill"), z)
    np.testing.assert_array_equal(out[0], 3 - 1j)
    assert np.isnan(out[1])
