"""Loop checkpointing strategies: how the reverse pass gets each iteration's state.

A strategy object is the user's choice (`while_loop(..., checkpoint=StoreAll())`); the
interpreter calls it through the `LoopStrategy` interface of interpret.py: `begin` when a
loop execution starts, `after_iteration` at each back edge (the environment then holds
iteration t's carry and values), `finish` at exit, and `restore(t)` from the adjoint's
`LoopState` node. Accounting goes to the machine's per-loop `LoopStats`.
"""

from __future__ import annotations

from typing import Any

from .interpret import LoopInfo, Machine


class StoreAll:
    """Keep every iteration's forward values that the adjoint reads; reverse by lookup.

    Memory grows with the trip count; no body evaluation is ever repeated."""

    tapes_sweep = True

    def __repr__(self) -> str:
        return "StoreAll()"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StoreAll)

    def __hash__(self) -> int:
        return hash("StoreAll")

    def begin(self, m: Machine, loop: LoopInfo) -> list[tuple]:
        return []

    def after_iteration(self, m: Machine, loop: LoopInfo, record: list[tuple], t: int) -> None:
        frame = m.read(loop.saved_slots)
        record.append(frame)
        stats = m.stats.loops[loop.index]
        stats.snapshots += 1
        stats.bytes += loop.saved_bytes
        stats.peak_snapshots = max(stats.peak_snapshots, stats.snapshots)
        stats.peak_bytes = max(stats.peak_bytes, stats.bytes)

    def finish(self, m: Machine, loop: LoopInfo, record: list[tuple], trips: int) -> None:
        pass

    def restore(self, m: Machine, loop: LoopInfo, record: list[tuple], t: int) -> None:
        # iterations are reversed T-1 … 0, so frame t is always the last one held
        assert len(record) == t + 1, (len(record), t)
        m.write(loop.saved_slots, record.pop())
        stats = m.stats.loops[loop.index]
        stats.snapshots -= 1
        stats.bytes -= loop.saved_bytes


def resolve(region_choice: Any, call_choice: Any) -> Any:
    """The loop's own choice wins over the call's; StoreAll when neither chose."""
    return region_choice if region_choice is not None else (call_choice or StoreAll())
