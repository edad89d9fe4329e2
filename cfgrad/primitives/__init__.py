"""The derivative table: every primitive declared once, in the module of its family.

An entry holds the numpy implementation, the shape/dtype rule (abstract evaluation), the
VJP rule, the JVP rule, notes on domain and subgradient conventions, and how it compiles
(`compiled`: a numpy ufunc Numba compiles, the Numba source function written beside the
entry, or the reason it is not compiled). Rules are written with primitives (via `bind`
and the operators of traced values), so the adjoint of a program is itself ordinary IR.
Adding a primitive means adding one entry to its family's module (the families mirror
`cfgrad.numpy`: elementwise, reductions, linalg, shape, indexing, complex, fft, and
internal for the nodes no numpy function applies).

Rule signatures (inputs `xs` and output `out` are traced values of the program being
built, cotangents/tangents likewise; `None` is a symbolic zero):

    vjp(ct, xs, out, **params) -> tuple of input cotangents (None where zero)
    jvp(ts, xs, out, **params) -> output tangent (None where zero)

The reverse builder never calls a VJP with a zero cotangent and drops cotangents of
integer and boolean inputs, so rules need not handle either.

Importing the package fills its own table, `PRIMITIVES` (each family module registers its
entries there), and nothing else.
"""

# each family module registers its entries when imported
from . import (  # noqa: F401
    complex,
    elementwise,
    fft,
    indexing,
    internal,
    linalg,
    reductions,
    shape,
)
from .elementwise import square_and_multiply
from .fft import DUAL_NORM, FFT_NORMS
from .indexing import item_axes
from .reductions import shifted_by_max, softmax_of
from .table import (
    PRIMITIVES,
    Deferred,
    NotCompiled,
    Primitive,
    Source,
    Structural,
    Ufunc,
    bind,
    complex_dtype,
    dense_value,
    peeked_value,
    real_dtype,
)

__all__ = [
    "DUAL_NORM", "FFT_NORMS", "PRIMITIVES", "Deferred", "NotCompiled", "Primitive", "Source",
    "Structural", "Ufunc", "bind", "complex_dtype", "dense_value", "item_axes", "peeked_value",
    "real_dtype", "shifted_by_max", "softmax_of", "square_and_multiply",
]
