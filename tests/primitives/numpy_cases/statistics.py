"""Examples for the statistics family (issue 13): reductions, NaN-ignoring reductions,
order statistics, moments, cumulative sums and products, sorting and searching,
differences, integrals and interpolation. Inputs for derivative checks stay clear of ties
and kinks (distinct entries, points between knots); the conventions at ties are tested in
tests/primitives/test_subgradients.py."""

import numpy as np

rng = np.random.default_rng(13)


def distinct(*shape):
    """Entries at least 0.2 apart: sorts, extremes and quantiles have no ties."""
    size = int(np.prod(shape))
    values = 0.3 * (rng.permutation(size) - size / 2) + rng.uniform(-0.05, 0.05, size)
    return values.reshape(shape)


def normal(*shape):
    return rng.normal(size=shape)


def ints(*shape, lo=-4, hi=5):
    return rng.integers(lo, hi, shape)


def with_nan(x, count=2):
    x = x.copy()
    flat = x.reshape(-1)
    flat[rng.choice(flat.size, count, replace=False)] = np.nan
    return x


A = distinct(3, 4)
B = distinct(2, 3, 4)
V = distinct(7)
N = distinct(3, 5)
N[0, 1] = N[1, 3] = N[2, 0] = np.nan  # no slice of NaN only
N_ROW = np.array([[np.nan, np.nan, np.nan], [0.4, -1.1, 2.3]])  # an all-NaN slice
MASK = rng.random((3, 4)) < 0.6
MASK[:, 0] = True


def jax_nearest(a, q, axis=None, keepdims=False, method="nearest"):
    """JAX's `nearest`: a fraction of exactly 1/2 rounds down (numpy rounds to even)."""
    a = np.moveaxis(np.asarray(a, float), axis, -1) if axis is not None else np.ravel(a)
    s = np.sort(a, axis=-1)
    pos = np.asarray(q) * (s.shape[-1] - 1)
    idx = np.where(pos - np.floor(pos) <= 0.5, np.floor(pos), np.ceil(pos)).astype(int)
    return np.take(s, idx, axis=-1)


def jax_nanarg(fn):
    def reference(a, axis=None, keepdims=False):
        filled = np.where(np.isnan(a), -np.inf if fn is np.argmax else np.inf, a)
        index = fn(filled, axis=axis, keepdims=keepdims)
        return np.where(np.all(np.isnan(a), axis=axis, keepdims=keepdims), -1, index)

    return reference


def jax_nanvar(a, axis=None, ddof=0, keepdims=False):
    """NaN where count - ddof <= 0 (numpy: inf or nan, with a warning)."""
    count = np.sum(~np.isnan(a), axis=axis, keepdims=keepdims) - ddof
    with np.errstate(all="ignore"):
        total = np.nansum((a - np.nanmean(a, axis=axis, keepdims=True)) ** 2, axis=axis,
                          keepdims=keepdims)
        return np.where(count <= 0, np.nan, total / np.where(count <= 0, 1, count))


def jax_bincount(x, weights=None, minlength=0, *, length=None):
    counts = np.bincount(np.maximum(x, 0), weights, minlength)
    if length is None:
        return counts
    return np.concatenate([counts, np.zeros(max(length - len(counts), 0), counts.dtype)])[
        :length]


EXAMPLES = {
    # -- reductions ---------------------------------------------------------------------
    "sum": [
        dict(args=(A,)),
        dict(args=(A,), kwargs=dict(axis=1, keepdims=True)),
        dict(args=(B,), kwargs=dict(axis=(0, 2))),
        dict(args=(A,), kwargs=dict(axis=0, where=MASK, initial=1.5)),
        dict(args=(ints(3, 4),), kwargs=dict(axis=-1)),
        dict(args=(A,), kwargs=dict(dtype=np.float32), rtol=1e-6, grad=False),
        dict(args=(ints(2, 3) > 0,), kwargs=dict(axis=0)),
    ],
    "prod": [
        dict(args=(A,), kwargs=dict(axis=1)),
        dict(args=(np.array([[1.5, 0.0, -0.7], [0.0, 0.0, 2.0]]),), kwargs=dict(axis=1)),
        dict(args=(B,), kwargs=dict(axis=(1,), keepdims=True, initial=2.0)),
        dict(args=(A,), kwargs=dict(axis=0, where=MASK)),
        dict(args=(ints(3, 2, lo=1, hi=4),)),
    ],
    "mean": [
        dict(args=(A,)),
        dict(args=(B,), kwargs=dict(axis=(0, 1), keepdims=True)),
        dict(args=(A,), kwargs=dict(axis=1, where=MASK)),
        dict(args=(ints(3, 4),), kwargs=dict(axis=0)),
        dict(args=(A,), kwargs=dict(axis=0, dtype=np.float32), rtol=1e-6, grad=False),
    ],
    **{name: [
        dict(args=(A,)),
        dict(args=(B,), kwargs=dict(axis=1, keepdims=True)),
        dict(args=(A,), kwargs=dict(axis=0, where=MASK, initial=-5.0 if "max" in name
                                    else 5.0)),
        dict(args=(A,), kwargs=dict(axis=1, initial=0.3)),
        dict(args=(ints(3, 4),), kwargs=dict(axis=-1)),
    ] for name in ("max", "amax", "min", "amin")},
    "all": [
        dict(args=(ints(3, 4) > -3,)),
        dict(args=(ints(3, 4),), kwargs=dict(axis=0, keepdims=True)),
        dict(args=(ints(3, 4) > 0,), kwargs=dict(axis=1, where=MASK)),
    ],
    "any": [
        dict(args=(ints(3, 4) > 3,)),
        dict(args=(A,), kwargs=dict(axis=1)),
        dict(args=(ints(3, 4) > 0,), kwargs=dict(axis=0, where=MASK, keepdims=True)),
    ],
    **{name: [
        dict(args=(A,)),
        dict(args=(B,), kwargs=dict(axis=1)),
        dict(args=(B,), kwargs=dict(axis=-1, keepdims=True)),
        dict(args=(A,), kwargs=dict(keepdims=True)),
        dict(args=(ints(4, 3),), kwargs=dict(axis=0)),
    ] for name in ("argmax", "argmin")},
    **{name: [
        dict(args=(A,)),
        dict(args=(B,), kwargs=dict(axis=(0, 2), ddof=1)),
        dict(args=(A,), kwargs=dict(axis=1, keepdims=True, ddof=2)),
        dict(args=(A,), kwargs=dict(axis=1, where=MASK)),
        dict(args=(ints(3, 4),), kwargs=dict(axis=0, correction=1)),
    ] for name in ("var", "std")},
    "ptp": [
        dict(args=(A,)),
        dict(args=(B,), kwargs=dict(axis=1, keepdims=True)),
        dict(args=(ints(3, 4),), kwargs=dict(axis=0)),
    ],
    "count_nonzero": [
        dict(args=(ints(3, 4),)),
        dict(args=(ints(2, 3, 4),), kwargs=dict(axis=(0, 2))),
        dict(args=(A * (ints(3, 4) > 0),), kwargs=dict(axis=1, keepdims=True)),
    ],
    # -- NaN-ignoring reductions ------------------------------------------------------------
    "nansum": [
        dict(args=(N,)),
        dict(args=(N,), kwargs=dict(axis=1, keepdims=True)),
        dict(args=(N_ROW,), kwargs=dict(axis=1), grad=False),
        dict(args=(ints(3, 4),), kwargs=dict(axis=0)),
    ],
    "nanprod": [
        dict(args=(N,), kwargs=dict(axis=0)),
        dict(args=(N,)),
        dict(args=(N_ROW,), kwargs=dict(axis=1), grad=False),
    ],
    "nanmean": [
        dict(args=(N,)),
        dict(args=(N,), kwargs=dict(axis=1, keepdims=True)),
        dict(args=(ints(3, 4),), kwargs=dict(axis=0)),
    ],
    **{name: [
        dict(args=(N,)),
        dict(args=(N,), kwargs=dict(axis=0, keepdims=True)),
        dict(args=(N_ROW,), kwargs=dict(axis=1), grad=False),
        dict(args=(ints(3, 4),), kwargs=dict(axis=1)),
    ] for name in ("nanmax", "nanmin")},
    **{name: [
        dict(args=(N,)),
        dict(args=(N,), kwargs=dict(axis=1, ddof=1)),
        dict(args=(N_ROW,), kwargs=dict(axis=1, ddof=1), grad=False,
             reference=(jax_nanvar if name == "nanvar"
                        else lambda a, **k: np.sqrt(jax_nanvar(a, **k)))),
        dict(args=(ints(3, 4),), kwargs=dict(axis=0, keepdims=True)),
    ] for name in ("nanvar", "nanstd")},
    **{name: [
        dict(args=(N,)),
        dict(args=(N,), kwargs=dict(axis=1)),
        dict(args=(N_ROW,), kwargs=dict(axis=1, keepdims=True), grad=False,
             reference=jax_nanarg(np.argmax if name == "nanargmax" else np.argmin)),
        dict(args=(ints(3, 4),), kwargs=dict(axis=0)),
    ] for name in ("nanargmax", "nanargmin")},
    "nancumsum": [
        dict(args=(N,)),
        dict(args=(N,), kwargs=dict(axis=1)),
        dict(args=(ints(3, 4),), kwargs=dict(axis=0)),
    ],
    "nancumprod": [
        dict(args=(N,), kwargs=dict(axis=0)),
        dict(args=(N,)),
    ],
    # -- order statistics -------------------------------------------------------------------
    "quantile": [
        dict(args=(V, 0.3)),
        dict(args=(A, np.array([0.1, 0.5, 0.9])), kwargs=dict(axis=1)),
        dict(args=(B, 0.7), kwargs=dict(axis=(0, 2), keepdims=True), traced=(0,)),
        *[dict(args=(A, 0.35), kwargs=dict(axis=0, method=m), traced=(0,))
          for m in ("linear", "lower", "higher", "midpoint", "nearest")],
        dict(args=(np.arange(4.0), 0.5), kwargs=dict(method="nearest"),
             reference=jax_nearest),
        dict(args=(with_nan(A, 1), 0.4), kwargs=dict(axis=1), grad=False),
        dict(args=(ints(5), 0.25)),
    ],
    "percentile": [
        dict(args=(V, 30.0)),
        dict(args=(A, np.array([10.0, 65.0])), kwargs=dict(axis=0, keepdims=True)),
        dict(args=(B, 40.0), kwargs=dict(axis=-1, method="midpoint"), traced=(0,)),
    ],
    "median": [
        dict(args=(V,)),
        dict(args=(A,), kwargs=dict(axis=1)),
        dict(args=(A,), kwargs=dict(axis=0, keepdims=True)),
        dict(args=(B,), kwargs=dict(axis=(1, 2))),
        dict(args=(ints(6),)),
    ],
    "nanquantile": [
        dict(args=(N, 0.3), kwargs=dict(axis=1)),
        dict(args=(N, np.array([0.2, 0.8]))),
        dict(args=(N_ROW, 0.6), kwargs=dict(axis=1, keepdims=True), grad=False),
        dict(args=(N, 0.45), kwargs=dict(axis=0, method="higher"), traced=(0,)),
    ],
    "nanpercentile": [
        dict(args=(N, 35.0), kwargs=dict(axis=1)),
        dict(args=(N_ROW, 50.0), kwargs=dict(axis=1, method="lower"), grad=False),
    ],
    "nanmedian": [
        dict(args=(N,)),
        dict(args=(N,), kwargs=dict(axis=1)),
        dict(args=(N_ROW,), kwargs=dict(axis=1, keepdims=True), grad=False),
    ],
    # -- moments --------------------------------------------------------------------------
    "average": [
        dict(args=(A,)),
        dict(args=(A,), kwargs=dict(axis=1, weights=rng.uniform(0.5, 2.0, 4))),
        dict(args=(A,), kwargs=dict(axis=0, weights=rng.uniform(0.5, 2.0, (3, 4)),
                                    returned=True)),
        dict(args=(A, 1, rng.uniform(0.5, 2.0, (3, 4))), kwargs=dict(keepdims=True)),
        dict(args=(ints(3, 4),), kwargs=dict(axis=1, returned=True)),
    ],
    "cov": [
        dict(args=(normal(3, 6),)),
        dict(args=(normal(6, 2),), kwargs=dict(rowvar=False, bias=True)),
        dict(args=(normal(6), normal(6)), kwargs=dict(ddof=0)),
        dict(args=(normal(2, 5),), kwargs=dict(fweights=np.array([1, 2, 1, 3, 1]),
                                             aweights=rng.uniform(0.5, 2.0, 5)),
             traced=(0,)),
        dict(args=(normal(2, 5),), kwargs=dict(aweights=rng.uniform(0.5, 2.0, 5))),
        dict(args=(normal(5),)),
    ],
    "corrcoef": [
        dict(args=(normal(3, 6),)),
        dict(args=(normal(6, 2),), kwargs=dict(rowvar=False)),
        dict(args=(normal(6), normal(6))),
    ],
    # -- cumulative sums and products ----------------------------------------------------------
    "cumsum": [
        dict(args=(A,)),
        dict(args=(B,), kwargs=dict(axis=1)),
        dict(args=(ints(3, 4),), kwargs=dict(axis=-1)),
        dict(args=(ints(3, 4) > 0,), kwargs=dict(axis=0)),
    ],
    "cumprod": [
        dict(args=(A,), kwargs=dict(axis=1)),
        dict(args=(np.array([2.0, 0.0, -1.5, 0.0, 0.7]),)),
        dict(args=(np.array([[0.5, 0.0, 1.2], [1.1, -0.9, 0.0]]),), kwargs=dict(axis=1)),
        dict(args=(ints(2, 3),), kwargs=dict(axis=0)),
    ],
    "cumulative_sum": [
        dict(args=(V,)),
        dict(args=(A,), kwargs=dict(axis=1, include_initial=True)),
        dict(args=(ints(3, 4),), kwargs=dict(axis=0)),
    ],
    "cumulative_prod": [
        dict(args=(V,)),
        dict(args=(A,), kwargs=dict(axis=0, include_initial=True)),
        dict(args=(ints(3, 4),), kwargs=dict(axis=1)),
    ],
    # -- sorting and searching ----------------------------------------------------------------
    "sort": [
        dict(args=(V,)),
        dict(args=(B,), kwargs=dict(axis=1)),
        dict(args=(A,), kwargs=dict(axis=None)),
        dict(args=(A,), kwargs=dict(axis=0, descending=True),
             reference=lambda a, axis, descending: np.flip(np.sort(a, axis), axis)),
        dict(args=(ints(3, 5),)),
        dict(args=(with_nan(V, 2),), grad=False),
    ],
    "argsort": [
        dict(args=(V,)),
        dict(args=(ints(3, 6),), kwargs=dict(axis=1),  # ties: stable, as JAX
             reference=lambda a, axis: np.argsort(a, axis, kind="stable")),
        dict(args=(B,), kwargs=dict(axis=0)),
        dict(args=(np.array([1, 2, 1, 2, 0]),), kwargs=dict(descending=True),
             reference=lambda a, descending: np.array([1, 3, 0, 2, 4])),
        dict(args=(ints(8),), kwargs=dict(stable=True)),
        dict(args=(ints(8),), reference=lambda a: np.argsort(a, kind="stable")),
    ],
    "searchsorted": [
        dict(args=(np.sort(V), normal(3, 2))),
        dict(args=(np.array([1, 2, 2, 3]), np.array([2, 0, 5])), kwargs=dict(side="right")),
        dict(args=(np.array([1.0, 2.0, 2.0, 3.0]), 2.0)),
        dict(args=(V, normal(4)), kwargs=dict(sorter=np.argsort(V)), traced=(0, 1)),
    ],
    "digitize": [
        dict(args=(normal(5), np.array([-1.0, 0.0, 1.0]))),
        dict(args=(np.array([0.5, 1.0, 2.5]), np.array([3.0, 2.0, 1.0])),
             kwargs=dict(right=True)),
        dict(args=(ints(2, 3), np.array([-2, 0, 2])), kwargs=dict(right=False)),
    ],
    "bincount": [
        dict(args=(np.array([0, 1, 1, 3, 2, 1]),), traced=()),
        dict(args=(np.array([0, 1, 1, 3]), rng.uniform(-1.0, 1.0, 4)), traced=(1,)),
        dict(args=(np.array([0, 1, 1, 3]), rng.uniform(-1.0, 1.0, 4)),
             kwargs=dict(minlength=6), traced=(1,)),
        dict(args=(np.array([0, 1, 4, 3]), rng.uniform(-1.0, 1.0, 4)),
             kwargs=dict(length=4), reference=jax_bincount),
        dict(args=(np.array([2, 0, 2]),), kwargs=dict(length=5), reference=jax_bincount),
    ],
    "isin": [
        dict(args=(ints(3, 4), np.array([0, 2, 3]))),
        dict(args=(ints(5), np.array([[1, -1], [4, 0]])), kwargs=dict(invert=True)),
        dict(args=(np.array([0.5, 1.0, 2.0]), np.array([1.0, 2.0]))),
    ],
    # -- differences, integrals, interpolation ---------------------------------------------
    "diff": [
        dict(args=(V,)),
        dict(args=(B,), kwargs=dict(axis=1, n=2)),
        dict(args=(A,), kwargs=dict(axis=0, prepend=0.5, append=normal(1, 4))),
        dict(args=(ints(6) > 0,)),
        dict(args=(ints(3, 4),), kwargs=dict(n=0)),
    ],
    "ediff1d": [
        dict(args=(V,)),
        dict(args=(A,), kwargs=dict(to_begin=np.array([1.0, 2.0]), to_end=-3.0)),
        dict(args=(ints(2, 3),), kwargs=dict(to_end=np.array([7]))),
    ],
    "gradient": [
        dict(args=(normal(6),)),
        dict(args=(normal(6), 0.5), kwargs=dict(edge_order=2)),
        dict(args=(normal(4, 5),)),
        dict(args=(normal(4, 5), np.array([0.0, 0.3, 1.0, 1.2]), 2.0)),
        dict(args=(normal(4, 5), np.array([0.0, 0.5, 0.7, 1.5, 2.2])),
             kwargs=dict(axis=1, edge_order=2)),
        dict(args=(normal(3, 4),), kwargs=dict(axis=(1, 0))),
        dict(args=(ints(5),)),
    ],
    "trapezoid": [
        dict(args=(V,)),
        dict(args=(A,), kwargs=dict(dx=0.5, axis=0)),
        dict(args=(A, np.array([0.0, 0.4, 1.0, 1.3]))),
        dict(args=(A, np.cumsum(rng.uniform(0.1, 1.0, (3, 4)), axis=1)), kwargs=dict(axis=1)),
        dict(args=(ints(4),)),
    ],
    "interp": [
        dict(args=(np.array([0.25, 1.5, 2.2, -1.0, 9.0]), np.array([0.0, 1.0, 2.0, 3.5]),
                   normal(4))),
        dict(args=(normal(3, 2), np.array([-1.0, 0.1, 0.8, 1.7]), normal(4)),
             kwargs=dict(left=-3.0, right=4.0)),
        dict(args=(np.array([0.3, 2.9, 7.1, -2.4]), np.array([0.5, 1.5, 3.0, 5.0]),
                   normal(4)), kwargs=dict(period=6.0)),
        dict(args=(np.array([-1.0, 0.5, 4.0]), np.array([0.0, 1.0, 2.0]),
                   np.array([1.0, 3.0, 2.0])),
             kwargs=dict(left="extrapolate", right="extrapolate"),
             reference=lambda x, xp, fp, left, right: np.array([-1.0, 2.0, -0.0])),
        dict(args=(np.array([1, 3]), np.array([0, 2, 4]), np.array([0, 4, 6]))),
    ],
    "unwrap": [
        dict(args=(np.array([0.1, 3.0, 6.5, 0.2, -3.3, 2.0]),)),
        dict(args=(np.array([[0.0, 2.5, 5.2], [1.0, -2.0, -5.5]]),), kwargs=dict(axis=0)),
        dict(args=(np.array([0.0, 4.2, 8.9, 3.1]),), kwargs=dict(period=5.0, discont=3.0)),
        dict(args=(np.array([[0.1, 1.9, 4.0, 1.2], [0.2, -2.1, 2.6, 0.4]]),),
             kwargs=dict(axis=1, discont=2.5)),
    ],
}
