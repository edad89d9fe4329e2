"""Complex numbers' parts: `real`, `imag`, `conj`, `angle`. JAX's convention: a complex
cotangent c of z stands for the real linear functional dz -> Re(c dz), so the VJP of a
map with dw = A dz + B conj(dz) is c -> c A + conj(c B), the transpose (not the
conjugate transpose) in dz and conj(dz); for a holomorphic map (B = 0) that is
c * f'(z), which the ordinary rules compute unchanged. These are the non-holomorphic
parts.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..errors import LoweringError
from ..ir import TensorType
from .rules import (
    np_zero,
)
from .table import (
    Primitive,
    Source,
    bind,
    real_dtype,
    register,
)


def complex_input(op: str, t: TensorType) -> None:
    if t.dtype.kind != "c":
        raise LoweringError(f"{op}: the input must be complex, got {t} (cnp.{op} of a real "
                            "value does not apply this primitive)")


def _complex_part_type(op: str) -> Callable[..., TensorType]:
    def rule(types: list[TensorType]) -> TensorType:
        complex_input(op, types[0])
        return TensorType(types[0].shape, real_dtype(types[0].dtype))

    return rule


def _conj_type(types: list[TensorType]) -> TensorType:
    complex_input("conj", types[0])
    return types[0]


# real(z) = (z + conj z)/2: A = B = 1/2, so c -> (c + c)/2 = c, as a complex number
def _real_source(args, types, out):
    return f"{args[0]}.real" if out.shape == () else f"np.real({args[0]})"


register(Primitive(
    name="real", impl=np.real, abstract=_complex_part_type("real"),
    vjp=lambda ct, xs, out: (bind("astype", ct, dtype=xs[0].dtype),),
    jvp=lambda ts, xs, out: bind("real", ts[0]), compiled=Source(_real_source), family="complex",
    promote="none",
    notes="the real part of a complex value; its cotangent is the real cotangent as complex",
    aliases=True))


# imag(z) = (z - conj z)/(2i): A = -i/2, B = i/2, so c -> -i c
def _imag_source(args, types, out):
    return f"{args[0]}.imag" if out.shape == () else f"np.imag({args[0]})"


register(Primitive(
    name="imag", impl=np.imag, abstract=_complex_part_type("imag"),
    vjp=lambda ct, xs, out: (ct * np.asarray(-1j, xs[0].dtype),),
    jvp=lambda ts, xs, out: bind("imag", ts[0]), compiled=Source(_imag_source), family="complex",
    promote="none",
    notes="the imaginary part of a complex value; its cotangent is -1j times the real "
          "cotangent (JAX's convention)", aliases=True))


# conj(z): A = 0, B = 1, so c -> conj(c)
def _conj_source(args, types, out):
    return f"np.conj({args[0]})"


register(Primitive(
    name="conj", impl=np.conj, abstract=_conj_type,
    vjp=lambda ct, xs, out: (bind("conj", ct),),
    jvp=lambda ts, xs, out: bind("conj", ts[0]), compiled=Source(_conj_source), family="complex",
    promote="none",
    notes="the complex conjugate; its VJP conjugates the cotangent (not holomorphic)"))


def _angle_type(types: list[TensorType]) -> TensorType:
    return TensorType(types[0].shape, real_dtype(types[0].dtype))


# angle(z) = Im(log z): A = 1/(2iz), B = conj(A), so c -> 2 c A = -i c / z
def _angle_source(args, types, out):
    """numpy's angle: arctan2(imag, real), of (0, x) for a real x (pi for x < 0 or -0.0)."""
    if types[0].dtype.kind == "c":
        return f"np.arctan2({args[0]}.imag, {args[0]}.real)"
    return f"np.arctan2({np_zero(out)}, {args[0]})"


register(Primitive(
    name="angle", impl=lambda z: np.angle(z), abstract=_angle_type,
    vjp=lambda ct, xs, out: (ct * (-1j / xs[0]) if xs[0].dtype.kind == "c" else None,),
    jvp=lambda ts, xs, out: bind("imag", ts[0] / xs[0]) if xs[0].dtype.kind == "c" else None,
    compiled=Source(_angle_source), family="complex", promote="float",
    notes="arg(z) in (-pi, pi], numpy's atan2(imag, real); d angle = Im(dz / z), nan at z = "
          "0 (as JAX); for a real input 0 or pi, derivative 0 (JAX: also 0, nan at x = 0)"))


