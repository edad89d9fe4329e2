"""Examples of cfgrad.numpy's array manipulation (tests/primitives/test_numpy_coverage.py): joining
and splitting, flips, padding, repeats, gathers, diagonals and triangles, index grids and
the axis shuffles. `reference=` marks JAX's semantics where numpy's differ (out-of-bounds
`take`, `unravel_index`, the lists JAX returns)."""

import numpy as np

rng = np.random.default_rng(13)
A = rng.normal(size=(3, 4))
B = rng.normal(size=(2, 3, 4))
V = rng.normal(size=5)
W = rng.normal(size=4)
S = np.float64(rng.normal())
I = np.arange(12).reshape(3, 4)


def _take_fill(a, indices, axis=None):
    """JAX's default mode 'fill': NaN where an index is outside [-n, n)."""
    n = np.shape(a)[axis] if axis is not None else np.size(a)
    idx = np.asarray(indices)
    valid = (idx >= -n) & (idx < n)
    out = np.take(a, np.where(valid, idx, 0), axis=axis).astype(float)
    shape = idx.shape + (1,) * (np.ndim(a) - (axis or 0) - 1 if axis is not None else 0)
    return np.where(valid.reshape(shape), out, np.nan)


def _unravel_clipped(indices, shape):
    """JAX's unravel_index: indices in [-size, 0) count from the end, others clip."""
    size = int(np.prod(shape))
    idx = np.asarray(indices)
    return np.unravel_index(np.clip(np.where(idx < 0, idx + size, idx), 0, size - 1), shape)


EXAMPLES = {
    "append": [
        dict(args=(V, W)),
        dict(args=(A, A[:1]), kwargs=dict(axis=0)),
        dict(args=(A, B[0]), kwargs=dict(axis=1)),
        dict(args=(I, 1.5)),
    ],
    "array_split": [
        dict(args=(V, 3)),
        dict(args=(A, 3), kwargs=dict(axis=1)),
        dict(args=(B, [1, -1]), kwargs=dict(axis=2)),
        dict(args=(V, [2, 2, 9])),
    ],
    "atleast_1d": [dict(args=(S,)), dict(args=(V,)), dict(args=(S, A, V))],
    "atleast_2d": [dict(args=(S,)), dict(args=(V,)), dict(args=(A, B, V))],
    "atleast_3d": [dict(args=(S,)), dict(args=(V,)), dict(args=(A,)), dict(args=(B, V, S))],
    "block": [
        dict(args=([[A, A[:, :1]], [B[0, :1], np.zeros((1, 1))]],)),
        dict(args=([V, W, S],)),
        dict(args=([[[B]], [[B]]],)),
        dict(args=(A,)),
    ],
    "broadcast_arrays": [
        dict(args=(A, W)),
        dict(args=(B, A[:, :1], S)),
        dict(args=(V,)),
    ],
    "broadcast_to": [
        dict(args=(W, (3, 4))),
        dict(args=(S, (2,))),
        dict(args=(A[:1], (2, 3, 4))),
    ],
    "choose": [
        dict(args=(np.array([0, 1, 2, 1]), [W, 2 * W, S]), traced=()),
        dict(args=(np.array([[0], [1], [1]]), np.stack([A, A + 1])), traced=(1,)),
        dict(args=(np.array([0, 3, -1, 5]), np.stack([W, -W])), kwargs=dict(mode="wrap")),
        dict(args=(np.array([0, 3, -1, 5]), [W, -W]), kwargs=dict(mode="clip")),
        dict(args=(np.array([0, 1, 0]), [A[:, 0], A[:, 1]]), traced=(1,)),
    ],
    "column_stack": [
        dict(args=([V, V, V],), traced=(0,)),
        dict(args=([A, W[:3], A],)),
    ],
    "concat": [
        dict(args=([A, A],), traced=(0,)),
        dict(args=([B, B[:, :1]],), kwargs=dict(axis=1)),
        dict(args=([A, V],), kwargs=dict(axis=None)),
    ],
    "concatenate": [
        dict(args=([A, A[:2]],)),
        dict(args=([B, B],), kwargs=dict(axis=-1), traced=(0,)),
        dict(args=([A, V, I],), kwargs=dict(axis=None)),
    ],
    "delete": [
        dict(args=(V, [0, -1])),
        dict(args=(A, 1), kwargs=dict(axis=1)),
        dict(args=(B, slice(0, 3, 2)), kwargs=dict(axis=2)),
        dict(args=(A, [True, False, True]), kwargs=dict(axis=0)),
        dict(args=(I, 5)),
    ],
    "diag": [
        dict(args=(V,)),
        dict(args=(W,), kwargs=dict(k=2)),
        dict(args=(W,), kwargs=dict(k=-1)),
        dict(args=(A,)),
        dict(args=(A,), kwargs=dict(k=1)),
        dict(args=(A,), kwargs=dict(k=-2)),
        dict(args=(np.arange(3),)),
    ],
    "diag_indices": [dict(args=(3,)), dict(args=(2, 3))],
    "diagflat": [dict(args=(A,)), dict(args=(V,), kwargs=dict(k=-2))],
    "diagonal": [
        dict(args=(A,)),
        dict(args=(A,), kwargs=dict(offset=1)),
        dict(args=(A,), kwargs=dict(offset=-2)),
        dict(args=(B,), kwargs=dict(axis1=2, axis2=0)),
        dict(args=(B,), kwargs=dict(offset=1, axis1=-1, axis2=-2)),
    ],
    "dstack": [dict(args=([V, V],), traced=(0,)), dict(args=([A, A],)), dict(args=([B, B],))],
    "expand_dims": [
        dict(args=(V, 0)),
        dict(args=(A, -1)),
        dict(args=(A, (0, 2))),
        dict(args=(V, (-1, 0))),
        dict(args=(S, (0, 1))),
    ],
    "flip": [
        dict(args=(V,)),
        dict(args=(A, 0)),
        dict(args=(B, (0, 2))),
        dict(args=(B,)),
        dict(args=(I, -1)),
    ],
    "fliplr": [dict(args=(A,)), dict(args=(B,))],
    "flipud": [dict(args=(V,)), dict(args=(A,))],
    "hsplit": [dict(args=(A, 2)), dict(args=(V, [1, 3])), dict(args=(B, [2]))],
    "hstack": [
        dict(args=([A, A],), traced=(0,)),
        dict(args=([V, W],)),
        dict(args=([A, A[:, :1]],)),
        dict(args=([S, V],)),
    ],
    "indices": [
        dict(args=((2, 3),)),
        dict(args=((2, 3, 1),), kwargs=dict(sparse=True)),
    ],
    "insert": [
        dict(args=(V, 1, 7.0)),
        dict(args=(V, [1, -1, 1], np.array([7.0, 8.0, 9.0]))),
        dict(args=(A, 1, W), kwargs=dict(axis=0)),
        dict(args=(A, [0, 2], np.array([[1.0], [2.0], [3.0]])), kwargs=dict(axis=1)),
        dict(args=(I, 2, np.array([5.0, 6.0]))),
        dict(args=(A, slice(0, 2), S), kwargs=dict(axis=1)),
    ],
    "matrix_transpose": [dict(args=(A,)), dict(args=(B,))],
    "meshgrid": [
        dict(args=(V, W)),
        dict(args=(V, W), kwargs=dict(indexing="ij")),
        dict(args=(V, W, A[:, 0]), kwargs=dict(sparse=True)),
        dict(args=(V,)),
    ],
    "moveaxis": [
        dict(args=(B, 0, -1)),
        dict(args=(B, (0, 1), (2, 0))),
        dict(args=(A, -1, 0)),
    ],
    "pad": [
        dict(args=(V, 2)),
        dict(args=(A, ((1, 0), (2, 3)))),
        dict(args=(A, 1), kwargs=dict(constant_values=((1.0, 2.0), (3.0, 4.0)))),
        dict(args=(I, 1), kwargs=dict(constant_values=1.7)),
        dict(args=(A, ((2, 1), (0, 5))), kwargs=dict(mode="edge")),
        dict(args=(V, (7, 9)), kwargs=dict(mode="reflect")),
        dict(args=(A, ((2, 1), (3, 5))), kwargs=dict(mode="symmetric")),
        dict(args=(B, 2), kwargs=dict(mode="wrap")),
        dict(args=(V, (7, 3)), kwargs=dict(mode="reflect", reflect_type="odd")),
        dict(args=(A, ((2, 1), (5, 2))), kwargs=dict(mode="symmetric", reflect_type="odd")),
        dict(args=(A, ((1, 2), (3, 1))), kwargs=dict(mode="linear_ramp", end_values=5.0)),
        dict(args=(I, 2), kwargs=dict(mode="linear_ramp", end_values=((1, 2), (3, -4)))),
        dict(args=(B, 2), kwargs=dict(mode="maximum")),
        dict(args=(A, ((1, 2), (3, 1))), kwargs=dict(mode="minimum", stat_length=((1, 2), (2, 2)))),
        dict(args=(A, ((2, 2), (1, 3))), kwargs=dict(mode="mean", stat_length=2)),
        dict(args=(I, (1, 3)), kwargs=dict(mode="mean")),
        dict(args=(A, 2), kwargs=dict(mode="empty"),
             reference=lambda a, w, mode: np.pad(a, w)),  # JAX pads with zeros
    ],
    "permute_dims": [dict(args=(B, (2, 0, 1))), dict(args=(A, (1, 0)))],
    "ravel": [
        dict(args=(A,)),
        dict(args=(B,), kwargs=dict(order="F")),
        dict(args=(S,)),
    ],
    "ravel_multi_index": [
        dict(args=((np.array([0, 1, 2]), np.array([3, 0, 1])), (3, 4)), traced=()),
        dict(args=((np.array([0, 1, 2]), np.array([3, 0, 1])), (3, 4)), traced=(0,),
             kwargs=dict(order="F", mode="wrap")),
        dict(args=((np.array([0, 5, -1]), np.array([7, 0, 1])), (3, 4)), traced=(0,),
             kwargs=dict(mode="clip")),
        dict(args=((np.array([0, 5, -1]), np.array([7, 0, 1])), (3, 4)), traced=(0,),
             kwargs=dict(mode="wrap")),
        dict(args=((np.array([1, 2]), np.array([3, 0])), (3, 4)), traced=(),
             kwargs=dict(mode="raise")),
    ],
    "repeat": [
        dict(args=(V, 2)),
        dict(args=(A, [1, 0, 2]), kwargs=dict(axis=0)),
        dict(args=(A, 3), kwargs=dict(axis=-1)),
        dict(args=(I, 2)),
        dict(args=(V, 2), kwargs=dict(total_repeat_length=7),
             reference=lambda a, r, total_repeat_length: np.repeat(a, r)[:7]),
        dict(args=(A, np.array([1, 2, 0])), kwargs=dict(axis=0, total_repeat_length=5),
             reference=lambda a, r, axis, total_repeat_length: a[[0, 1, 1, 2, 2]]),
        dict(args=(W, np.array([2, 0, 1, 1])), kwargs=dict(total_repeat_length=3),
             reference=lambda a, r, total_repeat_length: a[[0, 0, 2]]),
    ],
    "reshape": [
        dict(args=(A, (2, 6))),
        dict(args=(B, (-1, 4))),
        dict(args=(A, (4, 3)), kwargs=dict(order="F")),
        dict(args=(B, (6, -1)), kwargs=dict(order="F")),
        dict(args=(I, 12)),
    ],
    "roll": [
        dict(args=(V, 2)),
        dict(args=(A, -1, 1)),
        dict(args=(A, (1, 2), (0, 1))),
        dict(args=(A, (1, 2))),
        dict(args=(B, 3, (0, 2))),
        dict(args=(B, np.array([1, -1]), 2)),
    ],
    "rot90": [
        dict(args=(A,)),
        dict(args=(A, 2)),
        dict(args=(A, -1)),
        dict(args=(B, 1, (2, 0))),
        dict(args=(B, 3, (1, 2))),
    ],
    "select": [
        dict(args=([V > 0, V < -0.5], [V, -V])),
        dict(args=([A > 0, A < -0.5], [A, 2 * A], W), traced=(1, 2)),
        dict(args=([A > 0, W > 0], [A, W], S)),
        dict(args=([np.array([True, False, True])], [A[:, 0]]), kwargs=dict(default=3.0)),
    ],
    "split": [
        dict(args=(A, 2), kwargs=dict(axis=1)),
        dict(args=(V, [1, 3])),
        dict(args=(B, [1, -1]), kwargs=dict(axis=2)),
        dict(args=(B, 2)),
    ],
    "squeeze": [
        dict(args=(A[:1],)),
        dict(args=(B[:, :1, :1],), kwargs=dict(axis=1)),
        dict(args=(B[:1, :, :1],), kwargs=dict(axis=(0, 2))),
    ],
    "stack": [
        dict(args=([A, A],), traced=(0,)),
        dict(args=([V, V, V],), kwargs=dict(axis=1), traced=(0,)),
        dict(args=([A, A],), kwargs=dict(axis=-1)),
    ],
    "swapaxes": [dict(args=(B, 0, 2)), dict(args=(A, -1, 0))],
    "take": [
        dict(args=(A, np.array([0, 5, 11]))),
        dict(args=(A, np.array([[0, 2], [3, -1]])), kwargs=dict(axis=1)),
        dict(args=(A, np.array([[0, 2], [3, -1]])), kwargs=dict(axis=1, mode="fill"),
             traced=(0,), reference=lambda a, i, axis, mode: np.take(a, i, axis=axis)),
        dict(args=(B, [1, 0, 1]), kwargs=dict(axis=0), traced=(0,)),
        dict(args=(V, np.array([-1, 5, -6, 2])), reference=_take_fill, grad=False),
        dict(args=(A, np.array([-5, 2, 4])), kwargs=dict(axis=0), grad=False,
             reference=lambda a, i, axis: _take_fill(a, i, axis)),
        dict(args=(V, np.array([-1, 5, -6, 2])), kwargs=dict(mode="clip")),
        dict(args=(V, np.array([-1, 5, -6, 2])), kwargs=dict(mode="wrap")),
    ],
    "take_along_axis": [
        dict(args=(A, np.argsort(A, axis=1), 1)),
        dict(args=(A, np.array([[0, 2, 1, 1]]), 0)),
        dict(args=(B, np.array([[[3], [0], [-1]]]), 2)),
        dict(args=(V, np.array([4, 0, 0]), None)),
        dict(args=(A, np.array([[0, 4, -4]]), 1),
             reference=lambda a, i, axis: np.where(np.array([[True, False, True]]),
                                                   a[:, [0, 0, 0]], np.nan), grad=False),
    ],
    "tile": [
        dict(args=(V, 2)),
        dict(args=(A, (2, 1))),
        dict(args=(W, (2, 1, 3))),
        dict(args=(B, 2)),
        dict(args=(S, (2, 2))),
    ],
    "transpose": [dict(args=(A,)), dict(args=(B, (1, 2, 0))), dict(args=(B, (-1, 0, 1)))],
    "tril": [dict(args=(A,)), dict(args=(A, 1)), dict(args=(B, -1)), dict(args=(I,))],
    "triu": [dict(args=(A,)), dict(args=(A, -1)), dict(args=(B, 2))],
    "tril_indices": [dict(args=(3,)), dict(args=(3, 1, 4)), dict(args=(4, -1))],
    "tril_indices_from": [dict(args=(A,), traced=(0,)), dict(args=(A, 1), traced=(0,))],
    "triu_indices": [dict(args=(3,)), dict(args=(3, 1, 5))],
    "triu_indices_from": [dict(args=(A,), traced=(0,)), dict(args=(A, -1), traced=(0,))],
    "ix_": [
        dict(args=(np.array([0, 2]), np.array([1, 3, 0]))),
        dict(args=(np.array([True, False, True]), np.array([2])), traced=(1,)),
        dict(args=(V, W, V)),
    ],
    "unravel_index": [
        dict(args=(np.array([0, 5, 11]), (3, 4))),
        dict(args=(np.array([0, 5, 11]), (3, 4)), kwargs=dict(order="F")),
        dict(args=(7, (2, 2, 2))),
        dict(args=(np.array([-1, 12, -13, 4]), (3, 4)), reference=_unravel_clipped),
    ],
    "unstack": [dict(args=(A,)), dict(args=(B,), kwargs=dict(axis=-1))],
    "vsplit": [dict(args=(A, 3)), dict(args=(B, [1]))],
    "vstack": [
        dict(args=([A, W],)),
        dict(args=([B, B],), traced=(0,)),
        dict(args=([V, V],)),
    ],
}
