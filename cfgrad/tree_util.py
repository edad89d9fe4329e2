"""`cg.tree_util`: the pytree functions users call, with `jax.tree_util`'s names.

The work is tree.py's (the one flatten every transformation uses); this module only
gives it JAX's public spelling, so code written against `jax.tree_util` reads the same.
"""

from __future__ import annotations

from .tree import (
    TreeDef,
    register_dataclass,
    register_pytree_node,
    tree_map,
)
from .tree import flatten as tree_flatten
from .tree import leaves as tree_leaves
from .tree import unflatten as tree_unflatten

PyTreeDef = TreeDef

__all__ = ["PyTreeDef", "register_dataclass", "register_pytree_node", "tree_flatten",
           "tree_leaves", "tree_map", "tree_unflatten"]
