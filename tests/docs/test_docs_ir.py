"""docs/ir.md stays true to the code.

- Its node table (between `<!-- node-table -->` and `<!-- /node-table -->`) is what
  `node_table()` renders from cfgrad/nodespec.py: a row per declared kind, a column per
  field of the declaration, and the meaning of every flag and slot form. A new kind, field,
  flag or form fails here until the page shows it (`CFGRAD_REGEN_GOLDEN=1` rewrites it).
- It has a `### \\`Name\\`` section for exactly the node kinds of cfgrad/nodespec.py.
- Its verifier table lists exactly the invariant tags of cfgrad/verify.py (INVARIANTS).
- The worked example (the text blocks after `<!-- worked-example: forward -->` and
  `<!-- worked-example: adjoint -->`) is exactly what the printer prints today for the
  cond seed example of tests/seed_programs.py, and the hand-written program after
  `<!-- parse-example -->` parses, verifies and computes what the page says.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

import numpy as np
import seed_programs as seeds

import cfgrad as cg
from cfgrad.interpret import Compiled, Machine
from cfgrad.nodespec import FLAGS, FORMS, NODE_KINDS, PRIMITIVE, NodeKind, Slot
from cfgrad.verify import INVARIANTS

DOC = Path(__file__).resolve().parents[2] / "docs" / "ir.md"


def doc() -> str:
    return DOC.read_text()


def marked_block(marker: str) -> str:
    """The ```text block right after `<!-- MARKER -->`."""
    m = re.search(rf"<!-- {re.escape(marker)} -->\s*\n```text\n(.*?)^```", doc(), re.S | re.M)
    assert m is not None, f"docs/ir.md has no ```text block after <!-- {marker} -->"
    return m.group(1)


def section(heading: str) -> str:
    m = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", doc(), re.S | re.M)
    assert m is not None, f"docs/ir.md has no '## {heading}' section"
    return m.group(1)


def _cell(value: object) -> str:
    if isinstance(value, tuple):  # slots
        return "; ".join(_cell(v) for v in value) or "—"
    if isinstance(value, Slot):
        return f"`{value.name}` ({value.form}): {value.doc}"
    if isinstance(value, frozenset):  # flags
        return ", ".join(f"`{f}`" for f in FLAGS if f in value) or "—"
    return str(value)


def node_table() -> str:
    """The markdown of the node table: every field of every declaration, then the flags'
    and the slot forms' meanings."""
    fields = [f.name for f in dataclasses.fields(NodeKind)]
    lines = ["| " + " | ".join(fields) + " |", "|" + " --- |" * len(fields)]
    for kind in (*NODE_KINDS, PRIMITIVE):
        cells = [f"`{v}`" if name in ("name", "syntax") else _cell(v)
                 for name, v in ((f, getattr(kind, f)) for f in fields)]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    lines += ["", "Flags:", ""] + [f"- `{f}`: {meaning}" for f, meaning in FLAGS.items()]
    lines += ["", "Slot forms:", ""] + [f"- `{f}`: {meaning}" for f, meaning in FORMS.items()]
    return "\n".join(lines) + "\n"


def test_node_table_is_the_declarations():
    m = re.search(r"(<!-- node-table -->\n)(.*?)(<!-- /node-table -->)", doc(), re.S)
    assert m is not None, "docs/ir.md has no <!-- node-table --> … <!-- /node-table -->"
    if os.environ.get("CFGRAD_REGEN_GOLDEN"):
        DOC.write_text(doc()[:m.start(2)] + "\n" + node_table() + "\n" + doc()[m.end(2):])
    assert m.group(2).strip() == node_table().strip(), (
        "docs/ir.md's node table differs from cfgrad/nodespec.py: rerun with "
        "CFGRAD_REGEN_GOLDEN=1 and review the diff")


def test_every_node_kind_has_a_section():
    documented = re.findall(r"^### `(\w+)`$", section("Node kinds"), re.M)
    assert documented == [k.name for k in NODE_KINDS], (
        "docs/ir.md '## Node kinds' must have one ### `Name` section per NODE_KINDS entry, "
        "in declaration order")


def test_every_invariant_tag_is_in_the_table():
    rows = re.findall(r"^\| `([a-z-]+)` \|", section("Verifier invariants"), re.M)
    assert rows == list(INVARIANTS), (
        "docs/ir.md's verifier table must list exactly cfgrad.verify.INVARIANTS, in order")


def test_node_sections_name_only_real_tags():
    sections = section("Node kinds").partition("<!-- /node-table -->")[2]  # flags, forms above
    tags = set(re.findall(r"`([a-z]+(?:-[a-z]+)+)`", sections))
    assert tags <= set(INVARIANTS), sorted(tags - set(INVARIANTS))


def test_worked_example_is_what_the_printer_prints():
    p = cg.lower(seeds.cond_example, 1.0, 2.0)
    hint = ("the worked example of docs/ir.md is stale: paste the output of "
            "print(cg.lower(seed_programs.cond_example, 1.0, 2.0)) (and of cg.adjoint(...))")
    assert marked_block("worked-example: forward") == p.text(), hint
    assert marked_block("worked-example: adjoint") == cg.adjoint(p).text(), hint


def test_worked_example_gradients_are_the_documented_ones():
    g = cg.grad(seeds.cond_example, (0, 1))
    assert g(1.0, 2.0) == (2.0, 2.0) and g(3.0, 2.0) == (2.0, -2.0)
    assert "(2, 2)" in section("Worked example") and "(2, -2)" in section("Worked example")


def test_parse_example_parses_and_runs():
    p = cg.parse_program(marked_block("parse-example"))
    assert Machine(Compiled(p)).run([np.float64(2.0), np.int64(4)]) == [12.0]
    assert "[12.0]" in section("Parsing")
    cg.adjoint(p)
