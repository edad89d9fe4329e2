"""`cfgrad.numpy.fft`: numpy's discrete Fourier transforms on arrays and traced values
alike, each a primitive of the derivative table (numpy's kernel) or a composition."""

from .core import public_names

__all__ = public_names(globals(), __name__)
