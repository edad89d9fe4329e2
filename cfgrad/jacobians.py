"""Jacobians and Hessians, `jacfwd`, `jacrev` and `hessian`, built from the
transformations as JAX builds them: `jacrev` is one `vjp` and a pullback per output basis
vector (a row of the Jacobian each), `jacfwd` one `jvp` per input basis vector (a column
each), and `hessian` is `jacfwd(jacrev(f))`.

Nothing here runs a Program itself: `vjp` and `jvp` run eagerly on concrete arguments and
emit `call` / `vjp_call` nodes inside a trace (nested.py), and the rows or columns are
assembled with `cfgrad.numpy` (stack, reshape), which works on arrays and traced values
alike. So the same code gives a Jacobian eagerly, inside another transformation
(`cg.grad` of a function of a Jacobian) and as the function `jacfwd` differentiates when
`hessian` composes them. JAX's `vmap` over basis vectors becomes a Python loop: cfgrad has
no batching, and each pullback or JVP is one run along the path the function took.

Results have JAX's layout: for an output leaf of shape S and an input leaf of shape T, the
Jacobian leaf has shape S + T; the output's structure holds, at each of its leaves, the
structure of the differentiated argument (a tuple over the arguments when `argnums` is a
tuple).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import numpy as cnp
from . import tree as treelib
from .api import argnums_tuple, jvp, resolve_argnums, vjp
from .checkpoint import check_strategy
from .convert import traced_as
from .errors import ArgumentTypeError


def _leaf_type(x: Any) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype of a leaf: an array, a numpy or Python scalar, or a traced value
    (which has `shape` and `dtype` but no data)."""
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return tuple(x.shape), np.dtype(x.dtype)
    a = np.asarray(x)
    return a.shape, a.dtype


def _size(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _basis(shape: tuple[int, ...], dtype: np.dtype, j: int) -> np.ndarray:
    """The j-th standard basis vector of arrays of this shape (a one at flat index j)."""
    e = np.zeros(shape, dtype)
    e.flat[j] = 1
    return e


def _check_inputs(args: tuple, nums: tuple[int, ...], caller: str, name: str) -> None:
    """As in JAX, a Jacobian is taken only with respect to float leaves: an integer or
    boolean input has no tangent space to put a basis vector in. Complex inputs are
    refused too: JAX's jacfwd needs holomorphic=True for them, which these functions do
    not take. Other kinds of leaves (strings) are left to the lowering, whose message
    names them."""
    for i in nums:
        for leaf in treelib.flatten(args[i])[0]:
            shape, dtype = _leaf_type(leaf)
            if dtype.kind in "biu":
                raise ArgumentTypeError(
                    f"{caller} of {name} with respect to argument {i}: it has dtype {dtype} "
                    f"(shape {shape}); Jacobians need float inputs: pass 2.0 instead of 2, "
                    "use .astype(float), or leave the argument out of argnums")
            if dtype.kind == "c":
                raise ArgumentTypeError(
                    f"{caller} of {name} with respect to argument {i}: it has dtype {dtype} "
                    f"(shape {shape}); Jacobians of complex inputs are not supported (JAX's "
                    "need holomorphic=True): use cg.vjp / cg.jvp, or pass the real and "
                    "imaginary parts as float arguments")


def _split_aux(out: Any, has_aux: bool, caller: str, name: str) -> tuple[Any, Any]:
    """(value, aux) of a function's output; with has_aux it must be a pair, as in JAX."""
    if not has_aux:
        return out, None
    if type(out) is not tuple or len(out) != 2:
        raise ArgumentTypeError(
            f"{caller} of {name} with has_aux=True: the function must return a pair "
            f"(value, aux), got {treelib.flatten(out)[1].describe()}")
    return out


def _call_target(fun: Callable, kwargs: dict[str, Any]) -> Callable:
    """`fun` itself when there are no keyword arguments, so the lowering cache (keyed by
    the function object) serves every call; otherwise `fun` with them bound, which is
    traced on each call of the Jacobian (once for all its basis vectors)."""
    return functools.partial(fun, **kwargs) if kwargs else fun


def _assemble(out_types: list[tuple[tuple[int, ...], np.dtype]], out_tree: treelib.TreeDef,
              in_types: list[list[tuple[tuple[int, ...], np.dtype]]],
              in_trees: list[treelib.TreeDef], single: bool,
              block: Callable[[int, int, int], Any]) -> Any:
    """The Jacobian pytree: at each output leaf k, the differentiated arguments' structure
    (a tuple over them unless `single`), whose leaf l of argument a is `block(k, a, l)`,
    an array of shape out_shape[k] + in_shape[a][l]."""
    per_out = []
    for k in range(len(out_types)):
        per_arg = [treelib.unflatten(tree, [block(k, a, l) for l in range(len(types))])
                   for a, (tree, types) in enumerate(zip(in_trees, in_types))]
        per_out.append(per_arg[0] if single else tuple(per_arg))
    return treelib.unflatten(out_tree, per_out)


class _Inputs:
    """The differentiated arguments `args[nums]`, flattened: their trees and each leaf's
    shape and dtype."""

    def __init__(self, args: tuple, nums: tuple[int, ...]):
        flat = [treelib.flatten(args[i]) for i in nums]
        self.trees = [tree for _, tree in flat]
        self.types = [[_leaf_type(x) for x in leaves] for leaves, _ in flat]


def jacrev(fun: Callable, argnums: int | Sequence[int] = 0, *, has_aux: bool = False,
           checkpoint: Any = None, autograph: bool = True) -> Callable:
    """The Jacobian of `fun` by reverse mode, like `jax.jacrev`: one forward run and one
    pullback per element of the output, so it suits functions with fewer outputs than
    inputs. `checkpoint` is the strategy of every loop that did not choose its own;
    `autograph` as in `cg.vjp`."""
    return _jacrev(traced_as(fun, autograph, "cfgrad.jacrev"), argnums, has_aux, checkpoint,
                   "cfgrad.jacrev", getattr(fun, "__name__", "f"))


def _jacrev(fun: Callable, argnums: int | Sequence[int], has_aux: bool, checkpoint: Any,
            caller: str, name: str) -> Callable:
    """jacrev under the name the user called, so hessian's errors name hessian."""
    check_strategy(checkpoint, caller)
    requested = argnums_tuple(argnums, caller)
    single = isinstance(argnums, int | np.integer)

    def jacrev_fn(*args: Any, **kwargs: Any) -> Any:
        nums = resolve_argnums(requested, len(args), caller, name)
        _check_inputs(args, nums, caller, name)
        # `fun` is converted already, or was asked not to be (autograph=False)
        out, pullback = vjp(_call_target(fun, kwargs), *args, checkpoint=checkpoint,
                            autograph=False)
        value, aux = _split_aux(out, has_aux, caller, name)
        out_leaves, out_tree = treelib.flatten(value)
        out_types = [_leaf_type(y) for y in out_leaves]
        for k, (shape, dtype) in enumerate(out_types):
            if dtype.kind != "f":
                raise ArgumentTypeError(
                    f"{caller} of {name}: output leaf {k} has dtype {dtype} (shape {shape}); "
                    "reverse mode needs float outputs: return integer results as aux "
                    "(has_aux=True), or use cg.jacfwd, whose Jacobian of them is zero")
        aux_zeros = treelib.tree_map(lambda a: np.zeros(*_leaf_type(a)), aux)
        inputs = _Inputs(args, nums)

        def row(k: int, j: int) -> list[list[Any]]:
            """Row j of output leaf k's block: per differentiated argument, its leaves."""
            cts = [np.zeros(*t) for t in out_types]
            cts[k] = _basis(*out_types[k], j)
            ct = treelib.unflatten(out_tree, cts)
            grads = pullback((ct, aux_zeros) if has_aux else ct)
            return [treelib.flatten(grads[i])[0] for i in nums]

        rows = [[row(k, j) for j in range(_size(shape))] for k, (shape, _) in
                enumerate(out_types)]

        def block(k: int, a: int, l: int) -> Any:
            out_shape = out_types[k][0]
            in_shape, in_dtype = inputs.types[a][l]
            if not rows[k]:  # an empty output: no rows to stack
                return np.zeros(out_shape + in_shape, in_dtype)
            return cnp.reshape(cnp.stack([r[a][l] for r in rows[k]]), out_shape + in_shape)

        jac = _assemble(out_types, out_tree, inputs.types, inputs.trees, single, block)
        return (jac, aux) if has_aux else jac

    jacrev_fn.__name__ = f"jacrev({name})"
    return jacrev_fn


def jacfwd(fun: Callable, argnums: int | Sequence[int] = 0, *,
           has_aux: bool = False, autograph: bool = True) -> Callable:
    """The Jacobian of `fun` by forward mode, like `jax.jacfwd`: one JVP run per element of
    the differentiated inputs, so it suits functions with more outputs than inputs;
    `autograph` as in `cg.jvp`."""
    return _jacfwd(traced_as(fun, autograph, "cfgrad.jacfwd"), argnums, has_aux, "cfgrad.jacfwd",
                   getattr(fun, "__name__", "f"))


def _jacfwd(fun: Callable, argnums: int | Sequence[int], has_aux: bool, caller: str,
            name: str) -> Callable:
    """jacfwd under the name the user called, so hessian's errors name hessian."""
    requested = argnums_tuple(argnums, caller)
    single = isinstance(argnums, int | np.integer)

    def jacfwd_fn(*args: Any, **kwargs: Any) -> Any:
        nums = resolve_argnums(requested, len(args), caller, name)
        _check_inputs(args, nums, caller, name)
        target = _call_target(fun, kwargs)
        zero_args = [treelib.tree_map(lambda x: np.zeros(*_leaf_type(x)), a) for a in args]
        inputs = _Inputs(args, nums)

        def run(tangents: list[Any]) -> tuple[Any, list[Any]]:
            """fun's output and its tangent leaves (of the value, with has_aux)."""
            out, tangent = jvp(target, args, tangents, autograph=False)  # as in jacrev
            return out, treelib.flatten(_split_aux(tangent, has_aux, caller, name)[0])[0]

        def column(a: int, l: int, j: int) -> tuple[Any, list[Any]]:
            """The run along element j of leaf l of the a-th differentiated argument."""
            tangents = list(zero_args)
            leaves, tree = treelib.flatten(tangents[nums[a]])
            leaves[l] = _basis(*inputs.types[a][l], j)
            tangents[nums[a]] = treelib.unflatten(tree, leaves)
            return run(tangents)

        columns = [[[column(a, l, j) for j in range(_size(shape))]
                    for l, (shape, _) in enumerate(types)]
                   for a, types in enumerate(inputs.types)]
        first = next((c for per_arg in columns for per_leaf in per_arg for c in per_leaf),
                     None)
        # with nothing to differentiate, one run along zero tangents still gives the
        # output's structure and its tangents' dtypes
        out, template = first if first is not None else run(zero_args)
        value, aux = _split_aux(out, has_aux, caller, name)
        out_leaves, out_tree = treelib.flatten(value)
        out_types = [_leaf_type(y) for y in out_leaves]

        def block(k: int, a: int, l: int) -> Any:
            out_shape = out_types[k][0]
            in_shape = inputs.types[a][l][0]
            cols = columns[a][l]
            if not cols:  # an empty input leaf: no columns to stack
                return np.zeros(out_shape + in_shape, _leaf_type(template[k])[1])
            return cnp.reshape(cnp.stack([c[1][k] for c in cols], axis=-1),
                               out_shape + in_shape)

        jac = _assemble(out_types, out_tree, inputs.types, inputs.trees, single, block)
        return (jac, aux) if has_aux else jac

    jacfwd_fn.__name__ = f"jacfwd({name})"
    return jacfwd_fn


def hessian(fun: Callable, argnums: int | Sequence[int] = 0, *, has_aux: bool = False,
            checkpoint: Any = None, autograph: bool = True) -> Callable:
    """The Hessian of `fun`, `jacfwd(jacrev(fun))` as in JAX: forward over reverse, one
    Hessian-vector product per input element. For an output leaf of shape S and input
    leaves of shapes T and U, its leaf has shape S + T + U. `checkpoint` is the strategy
    of the reverse pass's loops; `autograph` as in `cg.vjp`."""
    name = getattr(fun, "__name__", "f")
    inner = _jacrev(traced_as(fun, autograph, "cfgrad.hessian"), argnums, has_aux, checkpoint,
                    "cfgrad.hessian", name)
    hessian_fn = _jacfwd(inner, argnums, has_aux, "cfgrad.hessian", name)
    hessian_fn.__name__ = f"hessian({name})"
    return hessian_fn
