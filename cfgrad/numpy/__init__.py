"""`cfgrad.numpy`: numpy-like functions that work on arrays and on traced values alike,
with numpy's names and signatures and JAX's semantics and gradients (docs/api.md lists
what is covered and each difference from numpy).

This module only assembles the namespace; each part owns one family of functions:

- `core`: creation (`cg.Array`, the numpy array with `.at` its constructors return), the
  operators' arithmetic, basic reductions, shapes, indexing and JAX's indexed updates
  (the `.at` of traced values and Arrays);
- `statistics`: cumulative sums and products, sorting and searching, quantiles, the
  NaN-ignoring reductions, average/cov/corrcoef, differences, integrals, interpolation;
- `complex`: real and imaginary parts, conjugate, angle;
- `manipulation`: joining, splitting, padding, repeating, gathering, diagonals, triangles,
  index grids and the axis shuffles;
- `indexed`: dynamic slices (`cg.dynamic_slice`, `cg.dynamic_update_slice`);
- `elementwise`: the rest of the elementwise math and the float predicates;
- `creation`: the remaining array constructors (`identity`, `tri`, `logspace`,
  `geomspace`, `copy`; Arrays too) and `ndim`/`shape`/`size`;
- `polynomial`: numpy's `poly*` functions on coefficient arrays and `vander`;
- `contractions`: einsum, tensordot, dot, inner, outer, kron, the vector and matrix
  products of numpy 2, trace, cross, convolve and correlate;
- `linalg` (`cnp.linalg`) and `fft` (`cnp.fft`): numpy's submodules of the same names.
"""

from . import fft, linalg
from .complex import *  # noqa: F403
from .complex import __all__ as _complex_names
from .contractions import *  # noqa: F403
from .contractions import __all__ as _contractions_names
from .core import *  # noqa: F403
from .core import __all__ as _core_names
from .core import _getitem, _IndexUpdateHelper
from .creation import *  # noqa: F403
from .creation import __all__ as _creation_names
from .elementwise import *  # noqa: F403
from .elementwise import __all__ as _elementwise_names
from .indexed import *  # noqa: F403
from .indexed import __all__ as _indexed_names
from .manipulation import *  # noqa: F403
from .manipulation import __all__ as _manipulation_names
from .polynomial import *  # noqa: F403
from .polynomial import __all__ as _polynomial_names
from .statistics import *  # noqa: F403
from .statistics import __all__ as _statistics_names

__all__ = [*_core_names, *_complex_names, *_contractions_names, *_creation_names,
           *_elementwise_names, *_indexed_names, *_manipulation_names, *_polynomial_names,
           *_statistics_names, "fft", "linalg"]

# The functions numpy's dispatch (`np.sin(tracer)`) and the array methods of traced values
# (`x.sum()`, `x[i]`, `x.T`) resolve to, by numpy name: read by trace.py's Tracer.
NAMESPACE = {name: obj for name, obj in globals().items()
             if name in __all__ and callable(obj) and not isinstance(obj, type)}
NAMESPACE["_getitem"] = _getitem
NAMESPACE["_at"] = _IndexUpdateHelper
