"""`cfgrad.numpy`: numpy-like functions that work on arrays and on traced values alike,
with numpy's names and signatures and JAX's semantics and gradients (docs/api.md lists
what is covered and each difference from numpy).

This module only assembles the namespace; each part owns one family of functions:

- `core`: creation, the operators' arithmetic, basic reductions, shapes and indexing;
- `contractions`: einsum, tensordot, dot, inner, outer, kron, the vector and matrix
  products of numpy 2, trace, cross, convolve and correlate;
- `linalg` (`cnp.linalg`) and `fft` (`cnp.fft`): numpy's submodules of the same names.
"""

from . import fft, linalg
from .contractions import *  # noqa: F403
from .contractions import __all__ as _contractions_names
from .core import *  # noqa: F403
from .core import __all__ as _core_names
from .core import _getitem

__all__ = [*_core_names, *_contractions_names, "fft", "linalg"]

# The functions numpy's dispatch (`np.sin(tracer)`) and the array methods of traced values
# (`x.sum()`, `x[i]`, `x.T`) resolve to, by numpy name: read by trace.py's Tracer.
NAMESPACE = {name: obj for name, obj in globals().items()
             if name in __all__ and callable(obj) and not isinstance(obj, type)}
NAMESPACE["_getitem"] = _getitem
