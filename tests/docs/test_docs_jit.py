"""docs/jit.md stays true to the code.

- Every runnable example (a ```python block followed directly by a ```text block, as in
  docs/api.md) prints exactly the output the page shows: `Jitted.info` on a compiled
  signature and the exact `CompileWarning` of each documented fallback.
- The page's list of primitives without a compiled form is exactly the derivative
  table's entries that declare `NotCompiled`.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_docs_api import normalized, run_example, runnable_examples

from cfgrad.primitives import PRIMITIVES
from cfgrad.primitives.table import NotCompiled

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "jit.md").read_text(encoding="utf-8")
EXAMPLES = runnable_examples(DOC)

def test_the_page_has_its_example() -> None:
    assert len(EXAMPLES) >= 1


@pytest.mark.parametrize(("line", "code", "out"), EXAMPLES,
                         ids=[f"jit.md:{line}" for line, _, _ in EXAMPLES])
def test_example_prints_documented_output(line: int, code: re.Match, out: re.Match) -> None:
    assert normalized(run_example(code.group(2))) == normalized(out.group(2)), (
        f"the example at docs/jit.md:{line} printed something else than documented")


EVERY_PRIMITIVE_COMPILES = "Every primitive has a compiled form (`NotCompiled` is declared by none)"


def documented_uncompiled() -> list[str] | None:
    """The backquoted names of the bullet list right after the sentence 'The primitives
    without a compiled form', parenthesised remarks left out; None where the page says
    every primitive has one instead."""
    if EVERY_PRIMITIVE_COMPILES in " ".join(DOC.split()):
        return None
    after = DOC.split("The primitives without a compiled form", 1)[1]
    bullets = after.split("\n\n", 2)[1]
    return re.findall(r"`(\w+)`", re.sub(r"\([^)]*\)", "", bullets))


def test_uncompiled_primitives_are_listed() -> None:
    """The page lists the primitives whose entries declare no compiled form (`NotCompiled`,
    each refused with its reason: tests/primitives/test_primitive_table.py), or says that
    there are none exactly when there are none."""
    actual = sorted(n for n, p in PRIMITIVES.items() if isinstance(p.compiled, NotCompiled))
    listed = documented_uncompiled()
    if listed is None:
        assert actual == [], f"docs/jit.md says every primitive compiles, but not {actual}"
        return
    assert len(listed) == len(set(listed))
    assert sorted(listed) == actual, (
        "docs/jit.md's list of primitives without a compiled form: "
        f"missing {sorted(set(actual) - set(listed))}, stale {sorted(set(listed) - set(actual))}")


def _twice(x):
    return x * 2.0 + 1.0


def test_compile_info_of_a_program_compiled_before_in_this_process() -> None:
    """docs/jit.md: `from_disk_cache=False` means Numba compiled the program, unless
    `reused`: two jitted versions of one function generate the same module, and the
    second finds its machine code already compiled in this process."""
    import cfgrad as cg

    first = cg.jit(_twice).info(1.0)
    second = cg.jit(_twice).info(1.0)
    assert second.reused and not second.from_disk_cache
    assert first.from_disk_cache or first.reused or first.compile_seconds > 1e-3


def test_compile_info_fields_are_the_pages_table() -> None:
    """The page says how many fields `CompileInfo` has and lists each in a table: both
    are the dataclass's fields (it said five and listed six)."""
    import dataclasses

    from cfgrad.jitted import CompileInfo

    fields = [f.name for f in dataclasses.fields(CompileInfo)]
    section = DOC[DOC.index("`CompileInfo` has"):]
    words = {"five": 5, "six": 6, "seven": 7, "eight": 8}
    count = words[re.match(r"`CompileInfo` has (\w+) fields", section).group(1)]
    rows = re.findall(r"^\| `(\w+)` \|", section.split("\n\n")[1], re.M)
    assert count == len(fields) and sorted(rows) == sorted(fields), (count, rows, fields)
