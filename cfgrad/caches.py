"""Cache keys that tell apart what traces differently, and caches that stay bounded.

A cache of traced programs is keyed partly by Python values the program bakes in (static
arguments). Python's `==` is the wrong key for them: `0.0 == -0.0` and `(2,) == (2.0,)`
while they trace different programs (a signed zero divides into -inf; an int is an
integer constant, a float a float one), and `nan != nan`, so a NaN would never find its
entry and trace again on every call. `static_key` keys a value by its type and, for
numbers, its bit pattern, at every depth of the tuples that hold it.

Every cache that a user's calls fill (one entry per signature, per static value, per
checkpoint choice) is a `BoundedDict`: a long-running program calling with ever new
shapes or statics keeps a bounded number of entries (the ones made last) instead of
growing without end. Looking an entry up is a plain dict lookup.
"""

from __future__ import annotations

import struct
import threading
from typing import Any

import numpy as np

_PLAIN = (int, bool, str, bytes, type(None))

# How many input signatures each function keeps lowered (with its compiled forms and
# custom-rule objects): the ones traced last (docs/api.md, Caching).
SIGNATURES_PER_FUNCTION = 256


def static_key(value: Any) -> Any:
    """A hashable key equal for two values exactly when they trace the same program: the
    type at every depth, floats and complex numbers (Python's and numpy's) by their bits.
    A value of another type (a user's object, a function) is its own key, compared with
    its own `==` (as `jax.jit` compares static arguments); unhashable values fail when
    the key is hashed, which the caller reports."""
    kind = type(value)
    if kind is float:
        return kind, struct.pack("<d", value)
    if kind is complex:
        return kind, struct.pack("<dd", value.real, value.imag)
    if kind in _PLAIN:
        return kind, value
    if isinstance(value, tuple):  # namedtuples too: their class is part of the key
        return kind, tuple(map(static_key, value))
    if isinstance(value, frozenset):
        return kind, frozenset(map(static_key, value))
    if isinstance(value, np.generic):
        return kind, value.tobytes()
    return kind, value


class BoundedDict(dict):
    """A dict of at most `limit` entries: adding one more drops the oldest entry (the one
    added first, not the one used least lately: an entry used on every call is dropped
    all the same once `limit` newer ones came, and made again on its next call). Reading
    is dict's own, lock-free; writes take a lock, so that threads adding entries at once
    never drop one twice or iterate a dict another thread changes."""

    __slots__ = ("limit", "_lock")

    def __init__(self, limit: int):
        super().__init__()
        self.limit = limit
        self._lock = threading.Lock()

    def __setitem__(self, key: Any, value: Any) -> None:
        with self._lock:
            if len(self) >= self.limit and key not in self:
                super().__delitem__(next(iter(self)))
            super().__setitem__(key, value)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        with self._lock:
            if key in self:
                return super().__getitem__(key)
            if len(self) >= self.limit:
                super().__delitem__(next(iter(self)))
            super().__setitem__(key, default)
            return default

    def clear(self) -> None:
        with self._lock:
            super().clear()
