"""Pytrees: tuples, lists, dicts, namedtuples, None and registered classes hold leaves.

Programs take and return flat lists of values; the pytree layer is what lets users pass
nested structures through `cond`, loop carries and `grad`. A `TreeDef` is hashable so it can
be part of the lowering cache key. Classes of the user's become containers by registering
them (`register_pytree_node`, `register_dataclass`), as in `jax.tree_util`; the registry
is the one fact every flatten reads, so a registered class works wherever a tuple does.
`cfgrad.tree_util` is the public face of this module.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np

from .caches import static_key
from .errors import require_callable


class TreeDef(NamedTuple):
    """The shape of a pytree: a node kind, its static metadata and its children."""

    kind: str  # "leaf", "none", "tuple", "list", "dict", "namedtuple", "custom"
    meta: Any  # dict keys, the namedtuple class, or (registered class, its aux data)
    children: tuple[TreeDef, ...]

    @property
    def num_leaves(self) -> int:
        if self.kind == "leaf":
            return 1
        return sum(child.num_leaves for child in self.children)

    @property
    def num_nodes(self) -> int:
        """Nodes of the tree, leaves and None included (JAX's `PyTreeDef.num_nodes`)."""
        return 1 + sum(child.num_nodes for child in self.children)

    def unflatten(self, leaves: Iterable[Any]) -> Any:
        """`unflatten(self, leaves)`, as JAX's `PyTreeDef.unflatten`."""
        return unflatten(self, leaves)

    def leaves_of(self, children: tuple[int, ...]) -> list[int]:
        """The flat indices of the leaves under the children at `children` (the leaves of
        some positional arguments, in a tree of all of them)."""
        starts = [0]
        for child in self.children:
            starts.append(starts[-1] + child.num_leaves)
        return [i for c in children for i in range(starts[c], starts[c + 1])]

    def flatten_up_to(self, tree: Any) -> list[Any]:
        """The subtrees of `tree` at this structure's leaves: `tree` must have this
        structure as a prefix (`tree_map`'s extra trees). ValueError otherwise."""
        out: list[Any] = []

        def walk(td: TreeDef, node: Any) -> None:
            if td.kind == "leaf":
                out.append(node)
                return
            kind, meta, kids = _node_of(node)
            if kind != td.kind or meta != td.meta or len(kids) != len(td.children):
                raise ValueError(f"tree structure mismatch: expected a tree with prefix "
                                 f"{self.describe()}, got {_describe_node(tree)}")
            for child, kid in zip(td.children, kids):
                walk(child, kid)

        walk(self, tree)
        return out

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
        if self.kind == "custom":
            nodetype, aux = self.meta
            fields = _NODE_TYPES[nodetype].data_fields
            if fields is not None:
                inner = [f"{f}={v}" for f, v in zip(fields, inner)]
            return f"{nodetype.__name__}(" + ", ".join(inner) + ")"
        return f"{self.meta.__name__}(" + ", ".join(inner) + ")"


LEAF = TreeDef("leaf", None, ())
_NONE = TreeDef("none", None, ())


@dataclasses.dataclass(frozen=True)
class _NodeType:
    """A registered container class: `flatten(x) -> (children, aux)` and
    `unflatten(aux, children) -> x`; a dataclass's data field names, for messages."""

    flatten: Callable[[Any], tuple[Iterable[Any], Any]]
    unflatten: Callable[[Any, Iterable[Any]], Any]
    data_fields: tuple[str, ...] | None = None


# The registry every flatten reads: exact classes, as in JAX (a subclass registers itself)
_NODE_TYPES: dict[type, _NodeType] = {}
_registrations = 0  # see `registrations`
_BUILTIN_NODES = (tuple, list, dict, type(None))


def _is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


# types that are leaves unless registered as nodes: `flatten` takes them without a walk
_PLAIN_LEAVES = frozenset({float, int, complex, bool, np.ndarray, np.float64, np.float32,
                           np.complex128, np.int64})


def _node_of(node: Any) -> tuple[str, Any, Sequence[Any]]:
    """One level of `node`: (kind, meta, children); kind "leaf" for a leaf."""
    if node is None:
        return "none", None, ()
    if type(node) is tuple:
        return "tuple", None, node
    if type(node) is list:
        return "list", None, node
    if isinstance(node, dict):
        keys = tuple(sorted(node))
        return "dict", keys, [node[k] for k in keys]
    if _is_namedtuple(node):
        return "namedtuple", type(node), node
    spec = _NODE_TYPES.get(type(node))
    if spec is not None:
        kids, aux = spec.flatten(node)
        return "custom", (type(node), StaticData(aux)), tuple(kids)
    return "leaf", None, ()


class StaticData:
    """A registered node's static data (`aux_data`, a dataclass's meta fields) as part of
    a TreeDef, compared and hashed by `caches.static_key`: the TreeDef keys the caches of
    traced programs, and static data equal under `==` may trace differently (0.0 and
    -0.0, 2 and 2.0) or never equal itself (NaN)."""

    __slots__ = ("value", "_key", "_hash")

    def __init__(self, value: Any):
        self.value = value
        self._key = static_key(value)
        self._hash: int | None = None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StaticData) and self._key == other._key

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(self._key)  # a TypeError for unhashable data, as before
        return self._hash

    def __repr__(self) -> str:
        return repr(self.value)


def _describe_node(tree: Any) -> str:
    return flatten(tree)[1].describe()


def flatten(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> tuple[
        list[Any], TreeDef]:
    """Return the leaves of `tree` in a fixed order and the structure to rebuild it;
    a node for which `is_leaf` is true is a leaf, whatever its type (as in JAX)."""
    if is_leaf is None and type(tree) in _PLAIN_LEAVES and type(tree) not in _NODE_TYPES:
        return [tree], LEAF  # one number or array: what most calls pass and return
    leaves: list[Any] = []

    def walk(node: Any) -> TreeDef:
        if is_leaf is not None and is_leaf(node):
            leaves.append(node)
            return LEAF
        kind, meta, kids = _node_of(node)
        if kind == "leaf":
            leaves.append(node)
            return LEAF
        if kind == "none":
            return _NONE
        return TreeDef(kind, meta, tuple(walk(c) for c in kids))

    return leaves, walk(tree)


def builder(treedef: TreeDef) -> Callable[[Sequence[Any]], Any]:
    """A function rebuilding `treedef` from a sequence of exactly its leaves: `unflatten`
    without its count check and walk for the structures a call's arguments and results
    usually have (one leaf, a tuple of leaves), built once where one structure is rebuilt
    on every call of a transformed function."""
    if treedef.kind == "leaf":
        return operator.itemgetter(0)
    if treedef.kind == "tuple" and all(c.kind == "leaf" for c in treedef.children):
        return tuple
    return functools.partial(unflatten, treedef)


def unflatten(treedef: TreeDef, leaves: Iterable[Any]) -> Any:
    """Inverse of `flatten`; ValueError when `leaves` are too few or too many."""
    leaves = list(leaves)
    expected = treedef.num_leaves
    if len(leaves) != expected:
        which = "few" if len(leaves) < expected else "many"
        raise ValueError(f"Too {which} leaves for the tree {treedef.describe()}; expected "
                         f"{expected}, got {len(leaves)}")
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
        if td.kind == "custom":
            nodetype, aux = td.meta
            return _NODE_TYPES[nodetype].unflatten(aux.value, tuple(kids))
        return td.meta(*kids)

    return build(treedef)


def leaves(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> list[Any]:
    """The leaves of `tree`, in flattening order."""
    return flatten(tree, is_leaf)[0]


def tree_map(fn: Callable[..., Any], tree: Any, *rest: Any,
             is_leaf: Callable[[Any], bool] | None = None) -> Any:
    """Apply `fn` leaf-wise over `tree` and the trees `rest`, which have `tree`'s
    structure or have it as a prefix (`fn` then gets their subtrees), as JAX's."""
    require_callable(fn, "tree_map", "fn")
    leaves_, td = flatten(tree, is_leaf)
    try:
        others = [td.flatten_up_to(r) for r in rest]
    except ValueError:
        bad = next(r for r in rest if not _has_prefix(td, r))
        raise ValueError(f"tree_map: structures differ: {td.describe()} vs "
                         f"{_describe_node(bad)}") from None
    return unflatten(td, [fn(*xs) for xs in zip(leaves_, *others)])


def _has_prefix(td: TreeDef, tree: Any) -> bool:
    try:
        td.flatten_up_to(tree)
    except ValueError:
        return False
    return True


# ---------------------------------------------------------------------------------
# Registration
# ---------------------------------------------------------------------------------


def _register(nodetype: type, spec: _NodeType) -> None:
    if nodetype in _NODE_TYPES or nodetype in _BUILTIN_NODES:
        raise ValueError(f"Duplicate custom PyTreeDef type registration for {nodetype}.")
    global _registrations
    _NODE_TYPES[nodetype] = spec
    _registrations += 1


def registrations() -> int:
    """How many classes were registered so far. A cache that takes its arguments to be
    leaves by their types alone is valid only while this stays: the instances of a class
    registered later flatten into their children (trace.lowering_epoch counts it)."""
    return _registrations


def register_pytree_node(nodetype: type, flatten_func: Callable[[Any], tuple[Iterable[Any],
                                                                               Any]],
                         unflatten_func: Callable[[Any, Iterable[Any]], Any]) -> None:
    """Make `nodetype` a container: `flatten_func(x)` gives `(children, aux_data)` and
    `unflatten_func(aux_data, children)` rebuilds it. `aux_data` is static: it is part
    of a lowered program's cache key, so it must be hashable and comparable."""
    _register(nodetype, _NodeType(flatten_func, unflatten_func))


def register_dataclass(nodetype: type, data_fields: Sequence[str] | None = None,
                       meta_fields: Sequence[str] | None = None,
                       drop_fields: Sequence[str] = ()) -> type:
    """Make a dataclass a container whose `data_fields` are children and whose
    `meta_fields` are static; returns `nodetype`, so it also works as a decorator. Without
    the field lists, a dataclass's fields are data unless declared
    `field(metadata=dict(static=True))`, as in JAX."""
    if data_fields is None and meta_fields is None:
        if not dataclasses.is_dataclass(nodetype):
            raise TypeError("register_dataclass: data_fields and meta_fields are required "
                            f"when nodetype is not a dataclass. Got nodetype={nodetype}.")
        init = [f for f in dataclasses.fields(nodetype)
                if f.init and f.name not in drop_fields]
        data_fields = [f.name for f in init if not f.metadata.get("static", False)]
        meta_fields = [f.name for f in init if f.metadata.get("static", False)]
    data, meta = tuple(data_fields or ()), tuple(meta_fields or ())
    if dataclasses.is_dataclass(nodetype):
        init = {f.name for f in dataclasses.fields(nodetype) if f.init}
        missing = init - set(data) - set(meta) - set(drop_fields)
        extra = (set(data) | set(meta)) - init
        if missing or extra:
            raise ValueError(
                "register_dataclass: data_fields and meta_fields must include all dataclass "
                f"fields with init=True and only them. Missing fields: {missing or '{}'}; "
                f"unknown fields: {extra or '{}'}. Add missing ones to drop_fields to "
                "leave them out.")

    def flatten_func(x: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        return tuple(getattr(x, f) for f in data), tuple(getattr(x, f) for f in meta)

    def unflatten_func(aux: tuple[Any, ...], children: Iterable[Any]) -> Any:
        return nodetype(**dict(zip(data, children)), **dict(zip(meta, aux)))

    _register(nodetype, _NodeType(flatten_func, unflatten_func, data))
    return nodetype


def registration_hint(x: Any) -> str | None:
    """How to make an object of `x`'s class a pytree, for errors about a leaf that is
    neither an array nor a number (an unregistered container, usually); None for what
    cannot hold arrays (a string, a function, a class), where the advice would mislead."""
    if isinstance(x, str | bytes) or callable(x):
        return None
    name = type(x).__name__
    how = (f"cg.tree_util.register_dataclass({name})" if dataclasses.is_dataclass(x) else
           f"cg.tree_util.register_pytree_node({name}, flatten, unflatten)")
    return (f"{name} is not a registered pytree node type; to pass its fields as traced "
            f"values, register the class once: {how}")
