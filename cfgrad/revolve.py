"""Binomial checkpointing arithmetic (Griewank & Walther, ACM TOMS 26(1), 2000, Alg. 799).

Model: reversing l loop steps from a stored state with c snapshot slots (the slot holding
that state included) costs R(l, c) step evaluations, each step taped exactly once and the
rest untaped advances. With the repetition number r = min{r : C(c + r, c) >= l}, the
optimum is R(l, c) = l + t(l, c), t(l, c) = r·l − C(c + r, c + 1), and no step is advanced
more than r times. R is convex and piecewise linear in l (slope r + 1 on each piece), so
the best first advance m of the recursion

    R(l, c) = min over 0 < m < l of  m + R(l − m, c − 1) + R(m, c)

is found by a binary search on the discrete slope. These functions, and the online
placement built on them (`OnlinePlacement`), are the whole theory the `Binomial` and
`Online` strategies need; docs/checkpointing.md derives them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import lru_cache
from math import comb


def repetition_number(l: int, c: int) -> int:
    """The least r with C(c + r, c) >= l: how often the worst step is re-advanced.
    C(c + r, c) grows with r, so a doubling then a bisection finds it in O(log r) binomials
    (the online placement asks for it at trip counts in the millions)."""
    if l <= 1:
        return 0
    hi = 1
    while comb(c + hi, c) < l:
        hi *= 2
    lo = hi // 2  # C(c + lo, c) < l, or lo = 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if comb(c + mid, c) < l:
            lo = mid
        else:
            hi = mid
    return hi


@lru_cache(maxsize=65536)
def optimal_cost(l: int, c: int) -> int:
    """R(l, c): step evaluations to reverse l steps with c snapshots (revolve model)."""
    if l <= 0:
        return 0
    if c == 1:
        return l * (l + 1) // 2
    r = repetition_number(l, c)
    return l + r * l - comb(c + r, c + 1)


def _split_cost(l: int, c: int, m: int) -> int:
    return m + optimal_cost(l - m, c - 1) + optimal_cost(m, c)


@lru_cache(maxsize=65536)
def optimal_split(l: int, c: int) -> int:
    """The smallest optimal first advance m (1 <= m < l) for l >= 2 steps, c >= 2 slots."""
    lo, hi = 1, l - 1
    while lo < hi:  # the cost is convex in m: find where its slope turns non-negative
        mid = (lo + hi) // 2
        if _split_cost(l, c, mid + 1) - _split_cost(l, c, mid) >= 0:
            hi = mid
        else:
            lo = mid + 1
    return lo


def reversal_cost(positions: tuple[int, ...], trips: int, slots: int) -> int:
    """Total step evaluations when a loop of `trips` steps ends with snapshots at
    `positions` (sorted, starting at 0) and the last step's tape kept: the sweep, then each
    segment between snapshots reversed by the revolve recursion with the slots left free
    by the snapshots before it."""
    total = trips
    last = len(positions) - 1
    for i in range(last):
        total += optimal_cost(positions[i + 1] - positions[i], slots - i)
    return total + optimal_cost(trips - 1 - positions[last], slots - last)


NEVER = sys.maxsize  # OnlinePlacement.due when no further snapshot will be stored


def _first(pred: Callable[[int], bool], lo: int) -> int:
    """The least x >= lo with pred(x), for pred false then true from some point on: a
    doubling then a bisection, O(log) calls."""
    if pred(lo):
        return lo
    step = 1
    while not pred(lo + step):
        step *= 2
    bad, good = lo + step // 2, lo + step  # pred(bad) is false (or bad == lo)
    while good - bad > 1:
        mid = (bad + good) // 2
        if pred(mid):
            good = mid
        else:
            bad = mid
    return good


class OnlinePlacement:
    """Online checkpointing (trip count unknown until the loop exits): where the snapshots go.

    The sweep reports each n = 2, 3, … at which the loop is known to run at least n steps
    (the back edge of step n−1). Carry x_{n−2} is then known not to be the input of the last
    step, so storing it can pay off; the choice is among keeping the snapshots as they are,
    storing x_{n−2} in a free slot, or storing it in place of one snapshot other than x_0.
    It is the cheapest by `reversal_cost` if the loop ended at T = n, the shortest it can
    still be; ties go to storing, and among evictions to the earliest snapshot.

    With s slots this is optimal (its cost is the offline optimum R(T, s)) for every
    T <= (s+1)(s+2)/2 + 1: Stumm and Walther's bound for online checkpointing (SIAM J. Sci.
    Comput. 32(2), 2010), the range where the repetition number is at most 2. There an
    optimal final set fills all s slots and keeps the gap after its i-th snapshot within
    s − i + 1 steps (the last within 2), so each of its segments costs 2·length − 1; the
    rule keeps that invariant as long as it can be kept, filling the early gaps first.
    Beyond that range it is the greedy choice "as if the loop ends now";
    tests/checkpoint/test_revolve.py and docs/checkpointing.md give its measured distance
    from the optimum (for T <= 1000: at most 10.2%, at s = 2; 5.1% from s = 3, 2.3% from
    s = 6).

    Cost: between changes of the snapshot set, nothing (the sweep compares n with `due`);
    at a change, O(s) evaluations of the closed form to weigh the evictions and a doubling
    search over the future n for the next change. Every cost compared is a function of
    the distance L = n − 1 − (last snapshot): keeping costs R(L, 1) (the last segment then
    has one slot), storing after evicting snapshot j < last costs a constant plus
    R(L − 1, 2) + 1, and evicting the last one R(g + L − 1, 2) + 1 (g the gap before it).
    R(L, 1) − R(L − 1, 2) is non-decreasing and R(L, 1) − R(g + L − 1, 2) convex in L (their
    slopes L + 1 ≥ r + 1 and L − r(g + L, 2), r growing by at most 1 a step), so the first n
    at which storing wins is found by monotone searches."""

    __slots__ = ("slots", "positions", "due", "_evict")

    def __init__(self, slots: int):
        self.slots = slots
        self.positions = [0]  # the snapshots held, x_0 first
        self.due = 3 if slots > 1 else NEVER  # the next n at which x_{n-2} is stored
        self._evict: int | None = None  # the index evicted then (None: a free slot)

    def place(self) -> tuple[int, int | None]:
        """Store x_{due−2}, the decision due now: returns (its position, the position
        evicted for it or None), and plans the next one."""
        stored, evicted = self.due - 2, None
        if self._evict is not None:
            evicted = self.positions.pop(self._evict)
        self.positions.append(stored)
        self._plan_next()
        return stored, evicted

    def _plan_next(self) -> None:
        pos, s = self.positions, self.slots
        k = len(pos) - 1
        if k + 1 < s:  # a free slot: storing never costs more than not, so store each carry
            self.due, self._evict = pos[-1] + 3, None
            return
        gaps = [pos[i + 1] - pos[i] for i in range(k)]
        # evicting p_j (0 < j < k) merges gaps j-1 and j at index j-1 and moves the later
        # ones an index down (one slot more each): its cost change relative to keeping
        shift = [optimal_cost(g, s - i + 1) - optimal_cost(g, s - i) for i, g in enumerate(gaps)]
        best, best_j, later = None, None, 0
        for j in range(k - 1, 0, -1):  # later = the saving of moving gaps j+1 … k-1
            merged = optimal_cost(gaps[j - 1] + gaps[j], s - j + 1)
            change = merged - optimal_cost(gaps[j - 1], s - j + 1) - optimal_cost(
                gaps[j], s - j) + later
            if best is None or change <= best:  # ties: the earliest
                best, best_j = change, j
            later += shift[j]
        # evicting the last one, p_k: its gap joins the new last-but-one segment (2 slots)
        last_gap = gaps[-1]
        drop = optimal_cost(last_gap, 2)

        def evict_last(L: int) -> int:
            return optimal_cost(last_gap + L - 1, 2) + 1 - drop

        def keep(L: int) -> int:
            return L * (L + 1) // 2  # R(L, 1)

        def evict_inner(L: int) -> int:
            return best + optimal_cost(L - 1, 2) + 1

        def inner(L: int) -> bool:  # evicting the best p_j, j < k, is no dearer
            return evict_inner(L) <= keep(L)

        def last(L: int) -> bool:  # evicting p_k is no dearer
            return evict_last(L) <= keep(L)

        def rising(L: int) -> bool:  # the convex keep - last has stopped falling
            return (keep(L + 1) - optimal_cost(last_gap + L, 2)
                    >= keep(L) - optimal_cost(last_gap + L - 1, 2))

        low = 2  # L = 1 would store the last snapshot again
        L_last = low if last(low) else _first(last, _first(rising, low))
        L_inner = _first(inner, low) if best is not None else NEVER
        if L_inner < L_last or L_inner == L_last and evict_inner(L_inner) <= evict_last(
                L_inner):
            self.due, self._evict = pos[-1] + 1 + L_inner, best_j
        else:
            self.due, self._evict = pos[-1] + 1 + L_last, k
