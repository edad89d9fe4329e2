"""Each backend writes code for a node kind through one table, `{kind: emitter}`
(`interpret._EMIT`, `native._EMIT`), and reads a Program's layout rather than the IR.

A node kind declared in nodespec.py with the `runtime` flag (what an adjoint reads of the
forward run) has no entry in the derivative table, so each backend needs an emitter of
its own for it: these tests fail when a kind is declared without one, or when a table
keeps an emitter for a kind that no longer exists. `const`, whose value is set once per
run, has an emitter in both; every other key must be a primitive of the table.
"""

from __future__ import annotations

import numpy as np
import pytest

import cfgrad as cg
from cfgrad import checkpoint, interpret, native
from cfgrad.interpret import Compiled
from cfgrad.layout import Layout
from cfgrad.nodespec import NODE_KINDS, RUNTIME_NODES
from cfgrad.primitives import PRIMITIVES

TABLES = {"interpreter": interpret._EMIT, "compiled": native._EMIT}


@pytest.mark.parametrize("backend", TABLES)
def test_every_runtime_kind_has_exactly_one_emitter(backend: str) -> None:
    table = TABLES[backend]
    assert {kind for kind in table if kind not in PRIMITIVES} == RUNTIME_NODES
    assert "const" in table


@pytest.mark.parametrize("backend", TABLES)
def test_no_emitter_for_the_kinds_edges_and_blocks_carry(backend: str) -> None:
    """Phis, jumps, branches and Return are the layout's edges and the blocks' ends, which
    every backend writes from the layout, never as nodes."""
    structural = {k.name for k in NODE_KINDS} - RUNTIME_NODES
    assert not structural & TABLES[backend].keys()


def test_every_cfgrad_strategy_declares_its_compiled_form() -> None:
    """native.py asks a strategy's class how compiled code runs it; a subclass, which
    may behave differently, declares nothing until it says so (it then runs in the
    interpreter, as before the declaration)."""
    made = {checkpoint.StoreAll: checkpoint.StoreAll(), checkpoint.Recompute:
            checkpoint.Recompute(), checkpoint.EveryK: checkpoint.EveryK(2),
            checkpoint.Online: checkpoint.Online(2), checkpoint.Binomial: checkpoint.Binomial(2)}
    assert set(made) == set(checkpoint.STRATEGIES)
    forms = {cls: checkpoint.compiled_form(s) for cls, s in made.items()}
    assert forms[checkpoint.StoreAll] == checkpoint.TAPES_EVERY_STEP
    assert {forms[c] for c in made if c is not checkpoint.StoreAll} == {
        checkpoint.FOLLOWS_SCHEDULE}

    class Mine(checkpoint.EveryK):
        pass

    assert checkpoint.compiled_form(Mine(2)) is None


def test_the_layout_holds_the_region_facts_both_backends_read() -> None:
    """A loop nested in another knows its parent loop, each if region its branch block,
    each loop its header, and each edge its Phi copy as registers."""

    def f(x):
        def outer(i, c):
            inner = cg.fori_loop(0, 3, lambda j, d: d * 0.5 + c, c)
            return cg.cond(inner > 0.0, lambda v: v * 2.0, lambda v: v - 1.0, inner)
        return cg.fori_loop(0, 2, outer, x)

    program = cg.lower(f, np.float64(0.3))
    layout = Layout(program)
    (outer, inner) = layout.loops
    assert (outer.parent, inner.parent) == (None, outer.index)
    assert outer.inner_loops == (inner.index,) and len(outer.inner_ifs) == 1
    assert {r: b for b, r in layout.ifs_by_branch.items()} == {
        r: r.branch for r in program.ifs()}
    assert {r: b for b, r in layout.loops_by_header.items()} == {
        r: r.header for r in program.loops()}
    for b in program.blocks:
        for key, target in b.term.successors():
            edge = layout.edges[layout.edge_id[(b, key)]]
            assert edge.target == layout.block_index[target]
            i = target.pred_index(b, key) if target.phis else None
            assert edge.phi_targets == tuple(layout.slot[p.out] for p in target.phis)
            assert edge.phi_sources == tuple(layout.slot[p.inputs[i]] for p in target.phis)
    compiled = Compiled(program)
    assert [(e.target, e.action, e.arg) for e in compiled.edges] == [
        (t, action, arg) for t, _, action, arg in compiled.edge_table]
