"""Checkpoint schedules decided by compiled code, as the interpreter's strategies decide them.

A recomputing strategy (`Recompute`, `EveryK`, `Online`, `Binomial` of checkpoint.py)
decides from nothing but iteration numbers, a fori_loop's trip count and its own
parameter. This module is those decisions again, in Numba, as small state machines over
int64 arrays that compiled code (native.py) calls: at each back edge of the sweep, which
carry to store in which snapshot row; at each `LoopState` of the adjoint, the operations
that put that iteration's tape where the adjoint reads it. The snapshots, re-runs and
their order are exactly those of the strategy objects (tests/jit/test_jit_schedule_machine.py
holds every decision against the strategies run on iteration numbers), so compiled
gradients are bitwise the interpreter's.

State is O(s) for s snapshots: the online placement (revolve.OnlinePlacement: the
positions held and when the next one is due), the revolve recursion as an explicit stack
(at most s frames), the free snapshot rows as a heap; EveryK and Recompute are
arithmetic on the iteration number. Nothing grows with the trip count, and no operation
table is built: each `LoopState` asks for its own operations (a queue of
`queue_rows(s)` = 3s + 8 rows).

Arrays:

- a *sweep state* (`sweep_size(s)` entries): the record of one loop execution. The
  sweep fills it (`sweep_begin`, `sweep_step` per back edge, `sweep_end`); compiled code
  keeps the record on a stack (executions of a loop inside another are reversed last
  first) until its reverse.
- a *reverse state* (`reverse_size(s)` entries): a record (`reverse_begin`) and the
  reverse's own machinery; `reverse_step` writes the operations for the next iteration,
  T-1 first, into a queue (`queue_rows(s)` rows of (code, argument)).

Operations: `SET row` (the carry from a snapshot), `ADVANCE n` / `TAPE n` (run n
iterations, untaped / pushing their tapes), `STORE row` (the carry into a snapshot row),
`LOAD t` (pop iteration t's tape to where the adjoint reads it; always the last one).
Snapshot rows are handed out lowest free first.

Each function compiles (or loads from Numba's disk cache) when the first program that runs
a recomputing strategy does, for int64 arguments only: callers pass no literal integers,
each of which would compile a version of its own.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from .checkpoint import Binomial, EveryK, Online, Recompute
from .errors import Unsupported

SET, ADVANCE, TAPE, STORE_ROW, LOAD = 1, 2, 3, 4, 5

# The machines: RECOMPUTE and EVERYK are arithmetic; ONLINE places snapshots as the sweep
# runs (Online, and Binomial on a while_loop); BINOMIAL stores the revolve path of a known
# trip count (Binomial on a fori_loop). Both of the last two reverse by revolve.
RECOMPUTE, EVERYK, ONLINE, BINOMIAL = 0, 1, 2, 3

NEVER = np.iinfo(np.int64).max  # revolve.NEVER: no further snapshot is due

# -- the sweep state (the record of one execution) -------------------------------------
KIND, PARAM, BOUND, TRIPS, BASE, NPOS, DUE, EVICT, NEXT, AT = range(10)
_POSITIONS = 10  # then s positions, then s rows

# -- the reverse state: the record, then these, then a heap of s rows and s frames -------
(_T_NEXT, _CUR, _SEG, _SEG_B, _DEPTH, _LEAF_A, _LEAF_ROW, _LEAF_T, _NHEAP, _FRESH,
 _PA, _PROW, _PB, _PC) = range(14)
_FRAME = 5  # (a, a's row, mid, mid's row, slots)
# optimal_split(l, c) of every l < _MEMO, kept once computed: most of the revolve
# recursion's splits are of short segments, and each costs a search over binomials
_MEMO = 64


def machine_of(strategy: Any) -> tuple[int, int]:
    """(machine, parameter) of a built-in recomputing strategy; `Unsupported` for any
    other class (one of the user's own runs in the interpreter)."""
    kind = type(strategy)
    if kind is Recompute:
        return RECOMPUTE, 0
    if kind is EveryK:
        return EVERYK, strategy.k
    if kind is Online:
        return ONLINE, strategy.snapshots
    if kind is Binomial:
        return BINOMIAL, strategy.snapshots
    raise Unsupported(f"checkpoint={strategy!r}: a strategy of your own runs in the interpreter")


def slots_of(kind: int, param: int) -> int:
    """The snapshot slots a machine's record holds positions for (0: none)."""
    return param if kind >= ONLINE else 0


def sweep_size(slots: int) -> int:
    return _POSITIONS + 2 * slots


def reverse_size(slots: int) -> int:
    return sweep_size(slots) + 14 + slots + _FRAME * slots + _MEMO * slots


def reverse_done(slots: int) -> int:
    """The reverse state's index that is < 0 once its execution is fully reversed (and
    before the first)."""
    return sweep_size(slots) + _T_NEXT


def queue_rows(slots: int) -> int:
    return 3 * slots + 8


# -- revolve arithmetic (revolve.py, in int64) ------------------------------------------

@numba.njit(inline="always")
def _binomial(n, k, cap):
    """C(n, k), or cap + 1 once it exceeds cap (the products stay far from overflow)."""
    if k < 0 or k > n:
        return 0
    if n - k < k:
        k = n - k
    c = 1
    for i in range(1, k + 1):
        c = c * (n - k + i) // i  # C(n - k + i, i): exact, and growing with i
        if c > cap:
            return cap + 1
    return c


@numba.njit(inline="always")
def repetition_number(l, c):
    """revolve.repetition_number: the least r with C(c + r, c) >= l; in closed form for
    one and two slots (the online placement weighs two-slot costs at every change)."""
    if l <= 1:
        return 0
    if c == 1:
        return l - 1
    if c == 2:  # C(r + 2, 2) = (r + 1)(r + 2) / 2 >= l: from the float root, corrected
        r = max(int(np.sqrt(2.0 * l)) - 2, 0)
        while (r + 1) * (r + 2) // 2 < l:
            r += 1
        while r > 0 and r * (r + 1) // 2 >= l:
            r -= 1
        return r
    hi = 1
    while _binomial(c + hi, c, l) < l:
        hi *= 2
    lo = hi // 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _binomial(c + mid, c, l) < l:
            lo = mid
        else:
            hi = mid
    return hi


@numba.njit(cache=True)
def optimal_cost(l, c):
    """revolve.optimal_cost: R(l, c)."""
    if l <= 0:
        return 0
    if c == 1:
        return l * (l + 1) // 2
    r = repetition_number(l, c)
    return l + r * l - _binomial(c + r, c + 1, 2**62 // (c + r + 1))


@numba.njit(inline="always")
def _a_of(k, c, cap):
    """A(k) of `optimal_split`, capped above `cap`."""
    return 1 if k < 2 else _binomial(c + k - 2, c, cap)


@numba.njit(cache=True)
def optimal_split(l, c):
    """revolve.optimal_split: the smallest optimal first advance, for l >= 2, c >= 2.

    The binary search there finds the least m in [1, l-2] where the split cost stops
    falling, else l-1. That cost's step from m to m+1 is 1 + r(m+1, c) - r(l-m, c-1)
    (R(x+1, c) - R(x, c) = r(x+1, c) + 1), so it stops falling at the least m >= 1 with
    r(m+1, c) >= k - 1 and r(l-m, c-1) <= k for some k, that is m >= A(k) = C(c+k-2, c)
    (1 for k < 2) and m >= B(k) = l - C(c-1+k, c-1). A grows with k and B falls, so the
    least max(A, B) is at the first k where A >= B or just before it."""
    # doubling then bisection for the first k with A(k) >= B(k)
    hi = 1
    while _a_of(hi, c, l) < l - _binomial(c - 1 + hi, c - 1, l):
        hi *= 2
    lo = hi // 2
    if _a_of(lo, c, l) >= l - _binomial(c - 1 + lo, c - 1, l):
        hi = lo  # (lo = 0)
    else:
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if _a_of(mid, c, l) < l - _binomial(c - 1 + mid, c - 1, l):
                lo = mid
            else:
                hi = mid
    k = hi
    m = _a_of(k, c, l)
    if k > 0:
        m = min(m, l - _binomial(c - 1 + k - 1, c - 1, l))  # B(k - 1) > A(k - 1)
    if m < 1:
        m = 1
    return min(m, l - 1)


# revolve.OnlinePlacement._plan_next's searches, one predicate each
_LAST, _RISING, _INNER = 0, 1, 2
_TWO = np.int64(2)  # two slots, as an int64: a literal 2 would compile optimal_cost again


@numba.njit(inline="always")
def _holds(which, L, best, last_gap, drop):
    keep = L * (L + 1) // 2
    if which == _LAST:
        return optimal_cost(last_gap + L - 1, _TWO) + 1 - drop <= keep
    if which == _INNER:
        return best + optimal_cost(L - 1, _TWO) + 1 <= keep
    return ((L + 1) * (L + 2) // 2 - optimal_cost(last_gap + L, _TWO)
            >= keep - optimal_cost(last_gap + L - 1, _TWO))


@numba.njit(inline="always")
def _first(which, lo, best, last_gap, drop):
    """revolve._first for one of the predicates above."""
    if _holds(which, lo, best, last_gap, drop):
        return lo
    step = 1
    while not _holds(which, lo + step, best, last_gap, drop):
        step *= 2
    bad, good = lo + step // 2, lo + step
    while good - bad > 1:
        mid = (bad + good) // 2
        if _holds(which, mid, best, last_gap, drop):
            good = mid
        else:
            bad = mid
    return good


@numba.njit(cache=True)
def _plan_next(sw):
    """revolve.OnlinePlacement._plan_next: when the next snapshot is due and which one it
    evicts (the same costs compared in the same order, ties alike)."""
    s = sw[PARAM]
    n = sw[NPOS]
    k = n - 1
    last = sw[_POSITIONS + k]
    if k + 1 < s:
        sw[DUE] = last + 3
        sw[EVICT] = -1
        return
    p = _POSITIONS
    has_best = False
    best = 0
    best_j = -1
    later = 0
    for j in range(k - 1, 0, -1):
        g_before = sw[p + j] - sw[p + j - 1]
        g = sw[p + j + 1] - sw[p + j]
        change = (optimal_cost(g_before + g, s - j + 1) - optimal_cost(g_before, s - j + 1)
                  - optimal_cost(g, s - j) + later)
        if not has_best or change <= best:
            has_best, best, best_j = True, change, j
        later += optimal_cost(g, s - j + 1) - optimal_cost(g, s - j)
    last_gap = sw[p + k] - sw[p + k - 1]
    drop = optimal_cost(last_gap, _TWO)
    low = 2
    if _holds(_LAST, low, best, last_gap, drop):
        l_last = low
    else:
        l_last = _first(_LAST, _first(_RISING, low, best, last_gap, drop), best, last_gap,
                        drop)
    l_inner = _first(_INNER, low, best, last_gap, drop) if has_best else NEVER
    if l_inner < l_last or (l_inner == l_last and best + optimal_cost(l_inner - 1, _TWO) + 1
                            <= optimal_cost(last_gap + l_inner - 1, _TWO) + 1 - drop):
        sw[DUE] = last + 1 + l_inner
        sw[EVICT] = best_j
    else:
        sw[DUE] = last + 1 + l_last
        sw[EVICT] = k


# -- the sweep -------------------------------------------------------------------------

@numba.njit(cache=True)
def sweep_begin(sw, kind, param, bound, base):
    """A loop execution starts (`bound`: a fori_loop's trip count, else -1; `base`: its
    first snapshot row in compiled code's buffers). Binomial with the trip count known
    plans its path now (checkpoint.first_path); without it, it places online."""
    if kind == BINOMIAL and bound < 0:
        kind = ONLINE
    sw[KIND] = kind
    sw[PARAM] = param
    sw[BOUND] = bound
    sw[TRIPS] = 0
    sw[BASE] = base
    sw[NPOS] = 0
    sw[NEXT] = 0
    sw[EVICT] = -1
    sw[DUE] = 3 if param > 1 else NEVER
    sw[AT] = 0  # every machine stores x_0
    if kind == BINOMIAL:
        rows = _POSITIONS + param
        a, c, n = 0, param, 1
        sw[_POSITIONS] = 0
        sw[rows] = 0
        while bound - a > 1 and c > 1:
            a += optimal_split(bound - a, c)
            c -= 1
            sw[_POSITIONS + n] = a
            sw[rows + n] = n
            n += 1
        sw[NPOS] = n


@numba.njit(cache=True)
def sweep_step(sw, t):
    """Back edge t of the sweep, called where t is `sw[AT]` (nothing is stored at the
    others): -1, or 2 * row + 1 to store x_{t-1} (the pending carry) in snapshot row
    `row`, 2 * row to store x_t; `sw[AT]` becomes the next back edge that may store."""
    kind = sw[KIND]
    if kind == RECOMPUTE:
        sw[AT] = NEVER
        return 0
    if kind == EVERYK:  # t is a multiple of k: stored unless a fori_loop's last iteration
        sw[AT] = t + sw[PARAM]
        if t == 0 or t != sw[BOUND] - 1:
            row = sw[NEXT]
            sw[NEXT] = row + 1
            return 2 * row
        return -1
    if kind == BINOMIAL:  # t is the next position of the path
        i = sw[NEXT]
        sw[NEXT] = i + 1
        sw[AT] = sw[_POSITIONS + i + 1] if i + 1 < sw[NPOS] else NEVER
        return 2 * i
    # ONLINE: x_0 at once; x_{due-2} once iteration due-1 has started (it is not the last)
    s = sw[PARAM]
    rows = _POSITIONS + s
    if t == 0:
        sw[_POSITIONS] = 0
        sw[rows] = 0
        sw[NPOS] = 1
        sw[AT] = sw[DUE] - 1
        return 0
    n = sw[NPOS]
    j = sw[EVICT]
    if j >= 0:  # the evicted row is the one free row, so the lowest
        row = sw[rows + j]
        for i in range(j, n - 1):
            sw[_POSITIONS + i] = sw[_POSITIONS + i + 1]
            sw[rows + i] = sw[rows + i + 1]
        n -= 1
    else:  # rows 0 … n-1 are held
        row = n
    sw[_POSITIONS + n] = sw[DUE] - 2
    sw[rows + n] = row
    sw[NPOS] = n + 1
    _plan_next(sw)
    sw[AT] = sw[DUE] - 1
    return 2 * row + 1


@numba.njit(cache=True)
def sweep_end(sw, trips, record):
    """The sweep ended after `trips` >= 1 iterations: the record copied into `record`;
    returns how many snapshot rows the execution may use (the next one's start above)."""
    sw[TRIPS] = trips
    for i in range(sw.shape[0]):
        record[i] = sw[i]
    kind = sw[KIND]
    if kind == RECOMPUTE:
        return 1
    if kind == EVERYK:
        return sw[NEXT]
    return min(sw[PARAM], trips)  # at most s held at once, at distinct iterations


# -- the reverse -----------------------------------------------------------------------

@numba.njit(inline="always")
def _op(q, n, code, arg):
    q[n, 0] = code
    q[n, 1] = arg
    return n + 1


@numba.njit(inline="always")
def _from(rv, w, q, n, a, row):
    """Start from snapshot a (row `row`) unless the state holds x_a already."""
    if rv[w + _CUR] != a:
        n = _op(q, n, SET, row)
    return n


@numba.njit(inline="always")
def _taped_from(rv, w, q, n, a, row, t):
    """Iteration t re-run taped, from snapshot a."""
    n = _from(rv, w, q, n, a, row)
    if t > a:
        n = _op(q, n, ADVANCE, t - a)
    n = _op(q, n, TAPE, 1)
    rv[w + _CUR] = t + 1
    return n


@numba.njit(inline="always")
def _call(rv, w, a, arow, b, c):
    rv[w + _PA], rv[w + _PROW], rv[w + _PB], rv[w + _PC] = a, arow, b, c


@numba.njit(inline="always")
def _take_row(rv, w, heap):
    """The lowest free snapshot row: the heap's least, else a row never used."""
    n = rv[w + _NHEAP]
    if n == 0:
        row = rv[w + _FRESH]
        rv[w + _FRESH] = row + 1
        return row
    row = rv[heap]
    n -= 1
    rv[w + _NHEAP] = n
    last = rv[heap + n]
    i = 0
    while True:  # sift the last entry down from the root
        child = 2 * i + 1
        if child >= n:
            break
        if child + 1 < n and rv[heap + child + 1] < rv[heap + child]:
            child += 1
        if rv[heap + child] >= last:
            break
        rv[heap + i] = rv[heap + child]
        i = child
    rv[heap + i] = last
    return row


@numba.njit(inline="always")
def _give_row(rv, w, heap, row):
    i = rv[w + _NHEAP]
    rv[w + _NHEAP] = i + 1
    while i > 0:  # sift up
        parent = (i - 1) // 2
        if rv[heap + parent] <= row:
            break
        rv[heap + i] = rv[heap + parent]
        i = parent
    rv[heap + i] = row


@numba.njit(inline="always")
def _split(rv, memo, l, c):
    """optimal_split(l, c), from the memo below _MEMO steps (0 there: not yet known)."""
    if l >= _MEMO:
        return optimal_split(l, c)
    i = memo + (c - 1) * _MEMO + l
    m = rv[i]
    if m == 0:
        m = optimal_split(l, c)
        rv[i] = m
    return m


@numba.njit(cache=True)
def _revolve_next(rv, s, w, q):
    """Checkpointing.Online._plan and _revolve, resumed until the next iteration is taped:
    the segments between the sweep's snapshots, last first, each by the revolve
    recursion (its frames on an explicit stack, at most s deep). Returns (operations
    written, the iteration taped)."""
    rows = _POSITIONS + s
    heap = w + 14
    stack = heap + s
    n = 0
    while True:
        t = rv[w + _LEAF_T]
        a = rv[w + _LEAF_A]
        if t >= a:  # a leaf: b-1 … a, each from snapshot a
            rv[w + _LEAF_T] = t - 1
            return _taped_from(rv, w, q, n, a, rv[w + _LEAF_ROW], t), t
        c = rv[w + _PC]
        if c > 0:  # revolve(a, b, c) called
            rv[w + _PC] = 0
            a, arow, b = rv[w + _PA], rv[w + _PROW], rv[w + _PB]
            if b <= a:
                continue
            if b - a == 1 or c == 1:
                rv[w + _LEAF_A] = a
                rv[w + _LEAF_ROW] = arow
                rv[w + _LEAF_T] = b - 1
                continue
            mid = a + _split(rv, stack + _FRAME * s, b - a, c)
            n = _from(rv, w, q, n, a, arow)
            n = _op(q, n, ADVANCE, mid - a)
            rv[w + _CUR] = mid
            mrow = _take_row(rv, w, heap)
            n = _op(q, n, STORE_ROW, mrow)
            f = stack + _FRAME * rv[w + _DEPTH]
            rv[f], rv[f + 1], rv[f + 2], rv[f + 3], rv[f + 4] = a, arow, mid, mrow, c
            rv[w + _DEPTH] += 1
            _call(rv, w, mid, mrow, b, c - 1)
            continue
        depth = rv[w + _DEPTH]
        if depth > 0:  # the part after mid is reversed: free mid, reverse the part before
            depth -= 1
            rv[w + _DEPTH] = depth
            f = stack + _FRAME * depth
            _give_row(rv, w, heap, rv[f + 3])
            _call(rv, w, rv[f], rv[f + 1], rv[f + 2], rv[f + 4])
            continue
        seg = rv[w + _SEG]  # a segment is done (or none begun): the one before it
        if seg < rv[NPOS]:
            if rv[_POSITIONS + seg] != 0:
                _give_row(rv, w, heap, rv[rows + seg])
            rv[w + _SEG_B] = rv[_POSITIONS + seg]
        seg -= 1
        rv[w + _SEG] = seg
        _call(rv, w, rv[_POSITIONS + seg], rv[rows + seg], rv[w + _SEG_B], s - seg)


@numba.njit(cache=True)
def reverse_begin(rv, record):
    """The reverse of the execution `record` starts (its iterations T-1 … 0 in turn)."""
    w = record.shape[0]
    for i in range(w):
        rv[i] = record[i]
    rv[w + _T_NEXT] = record[TRIPS] - 1
    rv[w + _CUR] = -1
    rv[w + _SEG] = record[NPOS]
    rv[w + _SEG_B] = record[TRIPS] - 1
    rv[w + _DEPTH] = 0
    rv[w + _LEAF_A] = 0
    rv[w + _LEAF_T] = -1
    rv[w + _NHEAP] = 0
    rv[w + _FRESH] = record[NPOS]
    rv[w + _PC] = 0


@numba.njit(cache=True)
def reverse_step(rv, q):
    """The operations that hand the adjoint the tape of the next iteration t (T-1 first)
    into queue `q`, the last one `LOAD t`; returns how many."""
    kind = rv[KIND]
    s = rv[PARAM] if kind >= ONLINE else 0
    w = _POSITIONS + 2 * s
    t = rv[w + _T_NEXT]
    rv[w + _T_NEXT] = t - 1
    trips = rv[TRIPS]
    n = 0
    if t == trips - 1:  # the sweep kept its tape
        rv[w + _CUR] = -1
        return _op(q, 0, LOAD, t)
    if kind == RECOMPUTE:
        n = _taped_from(rv, w, q, n, 0, 0, t)
        return _op(q, n, LOAD, t)
    if kind == EVERYK:
        k = rv[PARAM]
        start = (t // k) * k
        end = min(start + k, trips - 1)
        if t == end - 1:  # the segment's first iteration reversed: re-run it taped
            n = _from(rv, w, q, n, start, start // k)
            n = _op(q, n, TAPE, end - start)
        rv[w + _CUR] = -1
        return _op(q, n, LOAD, t)
    n, got = _revolve_next(rv, s, w, q)
    return _op(q, n, LOAD, got)
