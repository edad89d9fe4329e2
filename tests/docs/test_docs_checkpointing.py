"""docs/checkpointing.md stays true to the code.

Every runnable example (a ```python block followed directly by a ```text block, as in
docs/api.md) prints exactly the output the page shows: the strategies' accounting, the
Binomial schedule, and the measured Online tables against the reference table (which the
examples read from tests/data, so they run from the repository root). The prose around
the tables quotes some of their figures; those are checked against the code too.
"""

from __future__ import annotations

import re
from math import comb
from pathlib import Path

import pytest
from test_docs_api import normalized, run_example, runnable_examples

from cfgrad.revolve import OnlinePlacement, optimal_cost, reversal_cost

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "checkpointing.md").read_text()
EXAMPLES = runnable_examples(DOC)


def test_the_page_has_its_examples() -> None:
    printed = "\n".join(out.group(2) for _, _, out in EXAMPLES)
    assert len(EXAMPLES) >= 4
    assert "Online(8)" in printed and "worst ratio" in printed and "pyrevolve" in printed


@pytest.mark.parametrize(("line", "code", "out"), EXAMPLES,
                         ids=[f"checkpointing.md:{line}" for line, _, _ in EXAMPLES])
def test_example_prints_documented_output(line: int, code: re.Match, out: re.Match,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # the examples read tests/data/revolve_table.csv
    assert normalized(run_example(code.group(2))) == normalized(out.group(2)), (
        f"the example at docs/checkpointing.md:{line} printed something else than documented")


def test_quoted_online_figures() -> None:
    """The summary sentence and the strategy table quote the worst ratio over T <= 1000
    and the range of exact optimality."""
    worst = {}
    for s in range(2, 11):
        placement, ratios = OnlinePlacement(s), []
        for n in range(2, 1001):
            if n == placement.due:
                placement.place()
            ratios.append(reversal_cost(tuple(placement.positions), n, s) / optimal_cost(n, s))
            if n <= comb(s + 2, 2) + 1:
                assert ratios[-1] == 1.0, (s, n)
        worst[s] = max(ratios)
    assert f"at most {100 * (worst[2] - 1):.1f}% above" in DOC
    assert f"within {100 * (max(worst[s] for s in range(3, 11)) - 1):.1f}% for s ≥ 3" in DOC
    assert f"{100 * (max(worst[s] for s in range(6, 11)) - 1):.1f}% for s ≥ 6" in DOC
    assert "every T ≤ (s+1)(s+2)/2 + 1" in DOC
