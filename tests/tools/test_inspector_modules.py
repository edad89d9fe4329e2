"""The inspector's modules, split by job (issue 24): the DOT export (cfgrad/dot.py) and what
it draws with (the names and region tree of cfgrad/outline.py, the recorded run of
cfgrad/recording.py) need no rich, and `import cfgrad` imports the rich views only when
`cg.inspect` is first used; the views themselves are unchanged (tests/tools/test_inspector.py,
tests/tools/test_cli.py and their goldens check every rendering)."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

import cfgrad as cg
from cfgrad import inspector
from cfgrad.dot import to_dot
from cfgrad.recording import RunRecord, record

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

# Run in a fresh interpreter where `import rich` (and any `import rich.x`) raises
# ImportError: the DOT of examples/quickstart.py's f (a while loop, then an if) with the
# run at (2.0, 1.0), and whether anything of rich got imported after all.
WITHOUT_RICH = """
import sys
sys.modules["rich"] = None
sys.path[:0] = [{root!r}, {examples!r}]
import cfgrad as cg
from cfgrad.dot import to_dot
from cfgrad.recording import record
from quickstart import f
program = cg.lower(f, 2.0, 1.0)
sys.stdout.write(to_dot(program, record(program, 2.0, 1.0)))
loaded = sorted(m for m, module in sys.modules.items()
                if module is not None and (m == "rich" or m.startswith("rich.")))
sys.stderr.write(f"rich modules imported: {{loaded}}")
"""


def test_dot_export_needs_no_rich() -> None:
    script = WITHOUT_RICH.format(root=str(ROOT), examples=str(EXAMPLES))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stderr.endswith("rich modules imported: []"), done.stderr
    sys.path.insert(0, str(EXAMPLES))
    try:
        from quickstart import f
    finally:
        sys.path.remove(str(EXAMPLES))
    program = cg.lower(f, 2.0, 1.0)
    # the same text as with rich at hand, from the inspector's own Run
    assert done.stdout == to_dot(program, inspector.record_run(program, 2.0, 1.0))
    assert "subgraph cluster_loop_0 {" in done.stdout
    assert "subgraph cluster_if_0 {" in done.stdout
    assert 'label="T ×1"' in done.stdout or 'label="F ×1"' in done.stdout


def render(renderable: object) -> str:
    console = Console(record=True, width=100, file=io.StringIO(), color_system=None)
    console.print(renderable)
    return console.export_text()


def test_a_plain_record_shows_as_the_inspectors_run() -> None:
    """`record_run`'s `Run` is a `RunRecord` that rich prints as the run view; `view` shows
    a plain `RunRecord` (the DOT export's input) the same way."""
    program = cg.lower(lambda x: cg.while_loop(lambda y: y < 10.0, lambda y: y * 2.0, x), 1.5)
    run = inspector.record_run(program, 1.5)
    plain = record(program, 1.5)
    assert isinstance(run, RunRecord) and type(plain) is RunRecord
    assert render(run) == render(inspector.view(plain)) == render(inspector.render_run(plain))
    assert "×3" in render(run)


def test_cfgrad_binds_the_views_on_first_use() -> None:
    """`cg.inspect` and `cfgrad.inspector` are what they were when `import cfgrad` imported
    them eagerly; a name cfgrad does not have is still an AttributeError."""
    assert cg.inspect is inspector.inspect
    assert cg.inspector is inspector
    assert {"inspect", "inspector"} <= set(dir(cg))
    assert "inspect" in cg.__all__
    with pytest.raises(AttributeError, match="no attribute 'inspector_view'"):
        cg.inspector_view  # noqa: B018
