"""Binomial checkpointing arithmetic (Griewank & Walther, ACM TOMS 26(1), 2000, Alg. 799).

Model: reversing l loop steps from a stored state with c snapshot slots (the slot holding
that state included) costs R(l, c) step evaluations, each step taped exactly once and the
rest untaped advances. With the repetition number r = min{r : C(c + r, c) >= l}, the
optimum is R(l, c) = l + t(l, c), t(l, c) = r·l − C(c + r, c + 1), and no step is advanced
more than r times. R is convex and piecewise linear in l (slope r + 1 on each piece), so
the best first advance m of the recursion

    R(l, c) = min over 0 < m < l of  m + R(l − m, c − 1) + R(m, c)

is found by a binary search on the discrete slope. These functions are the whole theory
the `Binomial` and `Online` strategies need; docs/checkpointing.md derives them.
"""

from __future__ import annotations

from functools import lru_cache
from math import comb


def repetition_number(l: int, c: int) -> int:
    """The least r with C(c + r, c) >= l: how often the worst step is re-advanced."""
    r = 0
    while comb(c + r, c) < l:
        r += 1
    return r


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


def online_choice(positions: tuple[int, ...], t: int, slots: int) -> tuple[int, ...]:
    """Online checkpointing (trip count unknown): the snapshot set to hold after step t.

    The rule is greedy: keep the set that would be cheapest if the loop ended right after
    step t, preferring to store the new state on ties (a fresh snapshot can only help
    later) and, when full, evicting the most recent snapshot first.

    With slots >= 2 no online rule is optimal for every T <= slots + 3 (an exhaustive
    search over all online schedules, slots 2..10, shows it; see docs/checkpointing.md),
    so optimality up to Stumm & Walther's (s+1)(s+2)/2 is out of reach in this model. This
    rule is optimal for every T <= slots + 2 and first above the optimum at T = slots + 3.
    Its `reversal_cost` measured against `optimal_cost(T, slots)` for every T in 1..1000
    and slots in 1..10: optimal at 1500 of the 10000 points (15.0%; 5.6% for slots >= 2,
    as slots = 1 leaves no choice) and at 177 of the 285 with T <= (slots+1)(slots+2)/2
    (62%); at most 21.4% above it (T = 6, slots = 2), at most 8.3% for slots >= 4; and
    never costlier with more slots."""
    if len(positions) < slots:
        candidates = [positions + (t,)]
    else:
        candidates = [positions[:j] + positions[j + 1:] + (t,)
                      for j in range(len(positions) - 1, 0, -1)]
    candidates.append(positions)
    return min(candidates, key=lambda c: reversal_cost(c, t + 1, slots))
