"""Binomial checkpointing arithmetic (cfgrad.revolve) against reference numbers (design §7).

The reference table `tests/data/revolve_table.csv` (T in 1..1000, s in {1,2,3,4,5,8,10},
the initial state counted as a snapshot) was computed from the Griewank–Walther closed form
and cross-checked against an exhaustive dynamic programme, checkpoint_schedules and
pyrevolve; its README explains the columns. On top of the table, the recursion that defines
the optimum is re-derived here by brute force (every split, every slot count), and the online
placement rule is checked against what any online rule can achieve at all, found by an
exhaustive search over online snapshot sequences.
"""

from __future__ import annotations

import csv
from functools import cache
from itertools import combinations
from math import comb
from pathlib import Path

import pytest

from cfgrad.revolve import (
    online_choice,
    optimal_cost,
    optimal_split,
    repetition_number,
    reversal_cost,
)

# a missing table is a failure, never a skip
TABLE = Path(__file__).parent / "data" / "revolve_table.csv"
SLOTS = range(1, 11)
ONLINE_TOLERANCE = 1.15  # Online's cost over the offline optimum, on the reference grid


@cache
def table() -> tuple[dict[str, int], ...]:
    with TABLE.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert rows, f"{TABLE} is empty"
    return tuple({k: int(v) for k, v in r.items() if k != "all_sources_agree"} for r in rows)


def grid() -> list[tuple[int, int, dict[str, int]]]:
    return [(r["T"], r["s_snapshots_incl_x0"], r) for r in table()]


@cache
def online_costs(slots: int, longest: int = 1000) -> tuple[int, ...]:
    """Online's total for every trip count 1..longest (index T; index 0 unused).

    The rule is online, so the snapshot set after step t cannot depend on the trip count:
    one run of the rule over t = 1 … longest-1, starting from the initial state alone,
    gives the set it holds when a loop of any length T exits (after step T-1)."""
    held = (0,)
    costs = [0, reversal_cost(held, 1, slots)]
    for t in range(1, longest):
        held = online_choice(held, t, slots)
        assert held[0] == 0 and len(held) <= slots and list(held) == sorted(set(held))
        costs.append(reversal_cost(held, t + 1, slots))
    return tuple(costs)


@cache
def brute_force_cost(steps: int, slots: int) -> int:
    """R(l, c) from its definition alone: reverse `steps` steps from a stored state with
    `slots` slots (its own included), each step taped once; either give up a slot, or
    advance m steps, store, reverse the tail with one slot less, then the head."""
    if steps == 0:
        return 0
    if steps == 1:
        return 1
    if slots == 1:
        return steps + brute_force_cost(steps - 1, 1)  # re-advance from the start each time
    splits = (m + brute_force_cost(steps - m, slots - 1) + brute_force_cost(m, slots)
              for m in range(1, steps))
    return min(brute_force_cost(steps, slots - 1), *splits)


# ---------------------------------------------------------------------------------
# The offline optimum
# ---------------------------------------------------------------------------------


def test_reference_table_is_the_full_grid() -> None:
    """The grid the acceptance criteria speak of: T up to 1000, s up to 10."""
    steps = {T for T, _, _ in grid()}
    slots = {s for _, s, _ in grid()}
    assert max(steps) == 1000 and {1, 2, 1000} <= steps
    assert {1, 2, 10} <= slots
    assert len(grid()) == len(steps) * len(slots)


@pytest.mark.parametrize("column", ["revolve_total_fwd_evals", "cs_optimal_steps_binomial",
                                    "sim_pyrevolve_total_fwd_evals"])
def test_optimal_cost_matches_reference(column: str) -> None:
    """R(T, s) = T + t(T, s), and the VJP model (last step not taped in the sweep) is one
    more, for every (T, s) of the table."""
    for T, s, row in grid():
        assert optimal_cost(T, s) == row[column], (T, s)
        assert optimal_cost(T, s) + 1 == row["vjp_model_total_body_evals"], (T, s)
        assert optimal_cost(T, s) - T == row["revolve_extra_fwd_evals"], (T, s)


def test_repetition_number_matches_reference() -> None:
    for T, s, row in grid():
        r = repetition_number(T, s)
        assert r == row["r_repetition_number"], (T, s)
        assert comb(s + r, s) >= T and (r == 0 or comb(s + r - 1, s) < T)
        assert comb(s + r, s) == row["beta_s_r"]


def test_closed_form_equals_the_recursion_by_brute_force() -> None:
    """The closed form against the recursion it solves, minimised over every split and
    every number of slots actually used (an independent derivation of the optimum)."""
    for slots in range(1, 7):
        for steps in range(0, 61):
            assert optimal_cost(steps, slots) == brute_force_cost(steps, slots), (steps, slots)


def test_optimal_split_is_in_the_reference_range_and_optimal() -> None:
    for T, s, row in grid():
        if T < 2 or s < 2:
            continue
        m = optimal_split(T, s)
        assert row["opt_first_advance_lo"] <= m <= row["opt_first_advance_hi"], (T, s, m)
        assert m + optimal_cost(T - m, s - 1) + optimal_cost(m, s) == optimal_cost(T, s)


def test_optimal_split_is_the_smallest_optimal_first_advance() -> None:
    """Exhaustively, off the reference grid too: the binary search on the convex split
    cost finds the first minimiser."""
    for slots in range(2, 8):
        for steps in range(2, 120):
            costs = [m + optimal_cost(steps - m, slots - 1) + optimal_cost(m, slots)
                     for m in range(1, steps)]
            best = min(costs)
            assert best == optimal_cost(steps, slots), (steps, slots)
            assert optimal_split(steps, slots) == 1 + costs.index(best), (steps, slots)


def test_reversal_cost_of_the_initial_state_alone() -> None:
    """With only the initial snapshot kept by the sweep, the reversal of T-1 steps (the
    last one's tape is kept) gets all the slots."""
    for T in range(1, 40):
        for s in SLOTS:
            assert reversal_cost((0,), T, s) == T + optimal_cost(T - 1, s)


# ---------------------------------------------------------------------------------
# Online placement (trip count unknown until the loop exits)
# ---------------------------------------------------------------------------------


def always_optimal_horizon(slots: int, limit: int) -> int:
    """The largest N <= limit such that SOME online rule is optimal for every T <= N.

    An online rule is a sequence of snapshot sets P_t (P_0 = {0}, P_t ⊆ P_{t-1} ∪ {t},
    |P_t| <= slots), and a loop of T steps costs reversal_cost(P_{T-1}, T, slots). This
    tracks every set reachable by a sequence that was optimal at every length so far."""
    reachable = {(0,)}
    for t in range(1, limit):
        best = optimal_cost(t + 1, slots)
        nxt = set()
        for held in reachable:
            pool = held[1:] + (t,)
            for k in range(min(slots, len(pool) + 1)):
                for keep in combinations(pool, k):
                    if reversal_cost((0,) + keep, t + 1, slots) == best:
                        nxt.add((0,) + keep)
        if not nxt:
            return t
        reachable = nxt
    return limit


@pytest.mark.parametrize("slots", [2, 3, 4, 5])
def test_no_online_rule_is_optimal_for_every_length_beyond_slots_plus_two(slots: int) -> None:
    """Why Online is held to the offline optimum only up to T = slots + 2: no online rule
    does better (an exhaustive search), so that is the strongest exact guarantee."""
    assert always_optimal_horizon(slots, slots + 12) == slots + 2


@pytest.mark.parametrize("slots", SLOTS)
def test_online_is_optimal_up_to_slots_plus_two(slots: int) -> None:
    costs = online_costs(slots)
    for T in range(1, slots + 3):
        assert costs[T] == optimal_cost(T, slots), (T, slots)


def test_online_with_one_slot_is_recompute() -> None:
    """One slot is the initial state: every strategy must recompute from it, optimally."""
    costs = online_costs(1)
    assert all(costs[T] == optimal_cost(T, 1) == T * (T + 1) // 2 for T in range(1, 1001))


def test_online_never_costs_more_with_more_slots() -> None:
    """For every trip count up to 1000 (the reference grid's included) and s in 1..10."""
    for slots in range(1, 10):
        fewer, more = online_costs(slots), online_costs(slots + 1)
        worse = [T for T in range(1, 1001) if more[T] > fewer[T]]
        assert not worse, f"Online({slots + 1}) costs more than Online({slots}) at T={worse}"


def test_online_is_within_tolerance_of_the_optimum_on_the_grid() -> None:
    over = [(T, s, online_costs(s)[T], row["revolve_total_fwd_evals"])
            for T, s, row in grid()
            if online_costs(s)[T] > ONLINE_TOLERANCE * row["revolve_total_fwd_evals"]]
    assert not over, f"(T, s, online, optimum) beyond {ONLINE_TOLERANCE}x: {over}"


def test_online_report_against_pyrevolve(record_property: pytest.RecordProperty) -> None:
    """Records (does not assert) how Online compares with the optimum and with revolve
    2.0's online mode on the grid, and its worst ratio over every T <= 1000. The
    assertions only check the comparison is meaningful: nothing online beats offline."""
    worst_grid, worst_py, ours_better, ours_worse = (0.0, 0, 0), (0.0, 0, 0), 0, 0
    for T, s, row in grid():
        best, ours = row["revolve_total_fwd_evals"], online_costs(s)[T]
        theirs = row["pyrevolve_online_total_fwd_evals"]
        assert ours >= best and theirs >= best, (T, s)
        assert theirs - best == row["pyrevolve_online_excess_over_offline"]
        worst_grid = max(worst_grid, (ours / best, T, s))
        worst_py = max(worst_py, (theirs / best, T, s))
        ours_better += ours < theirs
        ours_worse += ours > theirs
    worst_all = max((online_costs(s)[T] / optimal_cost(T, s), T, s)
                    for s in SLOTS for T in range(1, 1001))
    report = (f"Online worst ratio to the offline optimum on the grid: {worst_grid[0]:.4f} "
              f"(T={worst_grid[1]}, s={worst_grid[2]}); over every T <= 1000: "
              f"{worst_all[0]:.4f} (T={worst_all[1]}, s={worst_all[2]}); pyrevolve online "
              f"worst on the grid: {worst_py[0]:.4f} (T={worst_py[1]}, s={worst_py[2]}); ours "
              f"cheaper at {ours_better} grid points, dearer at {ours_worse} of {len(grid())}")
    print(report)
    record_property("online_report", report)
