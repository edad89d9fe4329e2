"""`cfgrad.numpy.linalg`: numpy's linear algebra on arrays and traced values alike, each
function a primitive of the derivative table (numpy's kernel, the published derivative
rules) or a composition of them."""

from .core import public_names

__all__ = public_names(globals(), __name__)
