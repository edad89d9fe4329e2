"""Pytree flattening: tuples, lists, dicts, namedtuples and None hold leaves.

Programs take and return flat lists of values; the pytree layer is what lets users pass
nested structures through `cond`, loop carries and `grad`. A `TreeDef` is hashable so it can
be part of the lowering cache key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple


class TreeDef(NamedTuple):
    """The shape of a pytree: a node kind, its static metadata and its children."""

    kind: str  # "leaf", "none", "tuple", "list", "dict", "namedtuple"
    meta: Any  # dict keys, or the namedtuple class
    children: tuple[TreeDef, ...]

    @property
    def num_leaves(self) -> int:
        if self.kind == "leaf":
            return 1
        return sum(child.num_leaves for child in self.children)

    def leaves_of(self, children: tuple[int, ...]) -> list[int]:
        """The flat indices of the leaves under the children at `children` (the leaves of
        some positional arguments, in a tree of all of them)."""
        starts = [0]
        for child in self.children:
            starts.append(starts[-1] + child.num_leaves)
        return [i for c in children for i in range(starts[c], starts[c + 1])]

    def describe(self) -> str:
        """A short human form, used in error messages that compare two structures."""
        if self.kind == "leaf":
            return "*"
        if self.kind == "none":
            return "None"
        inner = [c.describe() for c in self.children]
        if self.kind == "tuple":
            return "(" + ", ".join(inner) + ("," if len(inner) == 1 else "") + ")"
        if self.kind == "list":
            return "[" + ", ".join(inner) + "]"
        if self.kind == "dict":
            return "{" + ", ".join(f"{k!r}: {v}" for k, v in zip(self.meta, inner)) + "}"
        return f"{self.meta.__name__}(" + ", ".join(inner) + ")"


LEAF = TreeDef("leaf", None, ())
_NONE = TreeDef("none", None, ())


def _is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def flatten(tree: Any) -> tuple[list[Any], TreeDef]:
    """Return the leaves of `tree` in a fixed order and the structure to rebuild it."""
    leaves: list[Any] = []

    def walk(node: Any) -> TreeDef:
        if node is None:
            return _NONE
        if type(node) is tuple:
            return TreeDef("tuple", None, tuple(walk(c) for c in node))
        if type(node) is list:
            return TreeDef("list", None, tuple(walk(c) for c in node))
        if isinstance(node, dict):
            keys = tuple(sorted(node))
            return TreeDef("dict", keys, tuple(walk(node[k]) for k in keys))
        if _is_namedtuple(node):
            return TreeDef("namedtuple", type(node), tuple(walk(c) for c in node))
        leaves.append(node)
        return LEAF

    return leaves, walk(tree)


def unflatten(treedef: TreeDef, leaves: list[Any]) -> Any:
    """Inverse of `flatten`."""
    it = iter(leaves)

    def build(td: TreeDef) -> Any:
        if td.kind == "leaf":
            return next(it)
        if td.kind == "none":
            return None
        kids = [build(c) for c in td.children]
        if td.kind == "tuple":
            return tuple(kids)
        if td.kind == "list":
            return kids
        if td.kind == "dict":
            return dict(zip(td.meta, kids))
        return td.meta(*kids)

    out = build(treedef)
    if next(it, _SENTINEL) is not _SENTINEL:
        raise ValueError("unflatten: more leaves than the tree definition holds")
    return out


_SENTINEL = object()


def tree_map(fn: Callable[..., Any], tree: Any, *rest: Any) -> Any:
    """Apply `fn` leaf-wise over one or more trees of the same structure."""
    leaves, td = flatten(tree)
    others = [flatten(r) for r in rest]
    for _, o_td in others:
        if o_td != td:
            raise ValueError(f"tree_map: structures differ: {td.describe()} vs {o_td.describe()}")
    return unflatten(td, [fn(*xs) for xs in zip(leaves, *(o[0] for o in others))])
