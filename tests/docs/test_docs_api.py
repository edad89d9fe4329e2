"""docs/api.md, docs/index.md and the layers of docs/architecture.md stay true to the code.

- Every name in `cfgrad.__all__`, every public function of `cfgrad.numpy` and every error
  class of `cfgrad.errors` is documented in docs/api.md.
- The derivative conventions table lists exactly the primitives that have `notes` in the
  derivative table (cfgrad/primitives/).
- Every runnable example prints exactly the output the page shows. A runnable example is
  a ```python block followed directly (only blank lines between) by a ```text block; the
  text block is the example's captured stdout. Each example runs in a fresh namespace, as
  a file named `example.py` (so source locations in printed programs read `example.py:N`).
- The module map of docs/index.md lists every module of cfgrad/ once, under its layer;
  a module imports only modules of its own or lower layers, and those of one layer import
  each other in no cycle. docs/architecture.md describes exactly the map's layers.

`python tests/docs/test_docs_api.py --update` reruns every runnable example and rewrites its
text block in docs/api.md; review the diff before keeping it.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import io
import linecache
import re
import sys
from pathlib import Path

import pytest

import cfgrad
import cfgrad.errors
import cfgrad.numpy as cnp
from cfgrad.primitives import PRIMITIVES

ROOT = Path(__file__).resolve().parents[2]
API = ROOT / "docs" / "api.md"
INDEX = ROOT / "docs" / "index.md"
ARCHITECTURE = ROOT / "docs" / "architecture.md"

FENCE = re.compile(r"^```(\w*)[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)


def fenced_blocks(text: str) -> list[re.Match]:
    return list(FENCE.finditer(text))


def runnable_examples(text: str) -> list[tuple[int, re.Match, re.Match]]:
    """(line number, python block, text block) for each python block whose next block is
    a text block with only blank lines in between."""
    blocks = fenced_blocks(text)
    pairs = []
    for code, out in zip(blocks, blocks[1:]):
        if (code.group(1) == "python" and out.group(1) == "text"
                and not text[code.end():out.start()].strip()):
            pairs.append((text.count("\n", 0, code.start()) + 1, code, out))
    return pairs


def run_example(source: str) -> str:
    """Run one example as the script `example.py` and return what it printed. Its source
    is registered with `linecache`, as a file's would be, so cfgrad can convert its
    functions' Python control flow (which reads the source)."""
    buffer = io.StringIO()
    namespace = {"__name__": "__main__"}
    linecache.cache["example.py"] = (len(source), None, source.splitlines(True), "example.py")
    with contextlib.redirect_stdout(buffer):
        exec(compile(source, "example.py", "exec"), namespace)
    return buffer.getvalue()


def normalized(output: str) -> str:
    return "\n".join(line.rstrip() for line in output.strip("\n").splitlines())


def section(text: str, heading: str) -> str:
    """The body of the `## heading` section, up to the next heading of level 1 or 2."""
    match = re.search(rf"^## {re.escape(heading)}\s*$(.*?)(?=^#{{1,2}} |\Z)", text, re.M | re.S)
    assert match, f"docs/api.md has no '## {heading}' section"
    return match.group(1)


def first_column_names(table_text: str) -> list[str]:
    """The backquoted names in the first cell of each table row (`| `a`, `b` | …`), last
    dotted part only (`cg.LoweringError` -> `LoweringError`)."""
    cells = [line.split("|")[1] for line in table_text.splitlines() if line.startswith("|")]
    return [name.split(".")[-1] for cell in cells for name in re.findall(r"`([\w.]+)`", cell)]


API_TEXT = API.read_text(encoding="utf-8")
EXAMPLES = runnable_examples(API_TEXT)


# -------------------------------------------------------------------------------------
# Everything public is documented
# -------------------------------------------------------------------------------------


def public_numpy_functions() -> list[str]:
    """The functions cfgrad.numpy exports (aliases such as `absolute` included), those of
    its submodules by their dotted names (`linalg.solve`)."""
    own = [name for name in cnp.__all__
           if callable(getattr(cnp, name)) and not isinstance(getattr(cnp, name), type)]
    return sorted(own + [f"{sub}.{name}" for sub in ("linalg", "fft")
                         for name in getattr(cnp, sub).__all__])


def error_classes() -> list[str]:
    return sorted(name for name, obj in vars(cfgrad.errors).items()
                  if inspect.isclass(obj) and issubclass(obj, cfgrad.errors.CfgradError))


@pytest.mark.parametrize("name", cfgrad.__all__)
def test_every_public_name_is_documented(name: str) -> None:
    assert re.search(rf"\bcg\.{re.escape(name)}\b", API_TEXT), (
        f"cfgrad.{name} is public (in cfgrad.__all__) but docs/api.md never mentions "
        f"`cg.{name}`")


def test_numpy_namespace_is_nonempty() -> None:
    # guards the parametrization below against silently documenting nothing
    assert len(public_numpy_functions()) > 50


@pytest.mark.parametrize("name", public_numpy_functions())
def test_every_numpy_function_is_documented(name: str) -> None:
    assert re.search(rf"\bcnp\.{re.escape(name)}\b", API_TEXT), (
        f"cfgrad.numpy.{name} is public but docs/api.md never mentions `cnp.{name}`")


def test_errors_table_lists_every_error_class() -> None:
    documented = first_column_names(section(API_TEXT, "Errors"))
    assert sorted(set(documented)) == error_classes(), (
        "the table of docs/api.md '## Errors' must have one row per class of "
        "cfgrad/errors.py")


def test_conventions_table_matches_the_derivative_table() -> None:
    documented = first_column_names(section(API_TEXT, "Derivative conventions"))
    with_notes = sorted(name for name, prim in PRIMITIVES.items() if prim.notes)
    assert len(documented) == len(set(documented)), "a primitive is listed twice"
    assert sorted(documented) == with_notes, (
        "the '## Derivative conventions' table of docs/api.md must list exactly the "
        "primitives of cfgrad/primitives/ that have notes; "
        f"missing {sorted(set(with_notes) - set(documented))}, "
        f"stale {sorted(set(documented) - set(with_notes))}")


def test_every_function_section_has_a_runnable_example() -> None:
    """Each `### `cg.…`` section documents a function and must show it running."""
    headings = list(re.finditer(r"^### `(cg\.[\w.]+)`", API_TEXT, re.M))
    assert len(headings) >= 10
    example_lines = [line for line, _, _ in EXAMPLES]
    for h, nxt in zip(headings, headings[1:] + [None]):
        start = API_TEXT.count("\n", 0, h.start()) + 1
        stop = API_TEXT.count("\n", 0, nxt.start()) + 1 if nxt else 10**9
        assert any(start < line < stop for line in example_lines), (
            f"section {h.group(1)} of docs/api.md has no runnable example")


# -------------------------------------------------------------------------------------
# Examples print what the page says
# -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("line", "code", "out"), EXAMPLES,
                         ids=[f"api.md:{line}" for line, _, _ in EXAMPLES])
def test_example_prints_documented_output(line: int, code: re.Match, out: re.Match) -> None:
    printed = run_example(code.group(2))
    assert normalized(printed) == normalized(out.group(2)), (
        f"the example at docs/api.md:{line} printed something else than documented "
        "(after a deliberate change, run `python tests/docs/test_docs_api.py --update`)")


# -------------------------------------------------------------------------------------
# Behaviour the page promises beyond its examples
# -------------------------------------------------------------------------------------


def test_remainder_of_floats_is_not_silently_constant() -> None:
    """api.md documents `%` / `cnp.mod` as the integer remainder. On float operands its
    derivative in x is 1 almost everywhere: a silent 0 would be a wrong gradient."""
    try:
        g = cfgrad.grad(lambda x: x % 2.0)(3.5)
    except (cfgrad.CfgradError, TypeError):
        return
    assert g == 1.0


def test_grad_of_grad() -> None:
    """api.md says transformations nest: the second derivative of x² is 2."""
    assert cfgrad.grad(cfgrad.grad(lambda x: x * x))(1.0) == 2.0


# -------------------------------------------------------------------------------------
# docs/index.md: the module map
# -------------------------------------------------------------------------------------


LAYER_HEADING = re.compile(r"^### Layer (\d+): (.+?)\s*$", re.M)


def module_rows() -> list[tuple[str, int]]:
    """docs/index.md's module map, one (module, layer) per row in the page's order: a
    module as a dotted name below `cfgrad` (`numpy/fft.py` is `numpy.fft`, a package's
    `__init__.py` its package's name), its layer the number of the `### Layer N: name`
    heading above its row."""
    text = INDEX.read_text(encoding="utf-8")
    body = re.search(r"^## Module map\s*$(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert body, "docs/index.md has no '## Module map' section"
    rows, layer = [], None
    for line in body.group(1).splitlines():
        heading = LAYER_HEADING.match(line)
        if heading:
            layer = int(heading.group(1))
        elif row := re.match(r"^\|\s*`([\w/]+)\.py`", line):
            assert layer is not None, f"docs/index.md: {row.group(1)}.py is under no layer"
            rows.append((module_name(row.group(1)), layer))
    return rows


def module_map() -> dict[str, int]:
    """The module map as module -> layer."""
    return dict(module_rows())


def map_layers() -> dict[int, str]:
    """The layers of the module map: number -> name."""
    text = INDEX.read_text(encoding="utf-8")
    return {int(number): name for number, name in LAYER_HEADING.findall(text)}


def module_name(path: str) -> str:
    """`numpy/fft` -> `numpy.fft`, `numpy/__init__` -> `numpy`; top-level names as they are
    (the package's own `__init__` and `__main__` keep theirs)."""
    parts = path.split("/")
    if len(parts) > 1 and parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def module_file(name: str) -> Path:
    path = ROOT / "cfgrad" / name.replace(".", "/")
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def test_module_map_lists_every_module_once() -> None:
    listed = [name for name, _ in module_rows()]
    actual = sorted(module_name(p.relative_to(ROOT / "cfgrad").with_suffix("").as_posix())
                    for p in (ROOT / "cfgrad").rglob("*.py"))
    assert len(listed) == len(set(listed)), "docs/index.md lists a module twice"
    assert sorted(listed) == actual, (
        f"docs/index.md module map: missing {sorted(set(actual) - set(listed))}, "
        f"stale {sorted(set(listed) - set(actual))}")


def test_layers_are_numbered_and_described() -> None:
    """The map's layers are numbered from 0 without a gap, top layer first, and
    docs/architecture.md describes each under the same heading."""
    layers = map_layers()
    text = INDEX.read_text(encoding="utf-8")
    order = [int(n) for n, _ in LAYER_HEADING.findall(text)]
    assert order == sorted(layers, reverse=True) == list(range(len(layers) - 1, -1, -1))
    described = {int(n): name for n, name in LAYER_HEADING.findall(ARCHITECTURE.read_text(
        encoding="utf-8"))}
    assert described == layers, (
        "docs/architecture.md must have a '### Layer N: name' section for each layer of "
        "docs/index.md's module map, and no other")


def test_imports_go_down_the_layers() -> None:
    """A module imports only modules of its own layer or of lower layers, counting imports
    inside functions."""
    layers = module_map()
    for name, layer in layers.items():
        for target in cfgrad_imports(name):
            assert layers[target] <= layer, (
                f"cfgrad/{name}.py (layer {layer}) imports {target} (layer {layers[target]})")


def test_no_import_cycle_within_a_layer() -> None:
    """The imports among the modules of one layer form no cycle (counting imports inside
    functions), so no import cycle among cfgrad's modules is hidden in a layer either."""
    layers = module_map()
    peers = {name: sorted(t for t in cfgrad_imports(name) if layers[t] == layers[name])
             for name in layers}
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            cycle = path[path.index(name):] + [name]
            raise AssertionError(f"import cycle in layer {layers[name]}: {' -> '.join(cycle)}")
        if name not in done:
            for target in peers[name]:
                visit(target, path + [name])
            done.add(name)

    for name in sorted(layers):
        visit(name, [])


def cfgrad_imports(name: str) -> set[str]:
    """The cfgrad modules `name` imports, anywhere in its file, as dotted names of the
    module map (`from . import x` in a package's module is a module of that package)."""
    path = module_file(name)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    if name in ("__init__", "__main__"):
        package = []
    known = set(module_map())

    def resolved(parts: list[str]) -> str:
        """The longest dotted prefix of `parts` that is a module of the map."""
        for end in range(len(parts), 0, -1):
            if ".".join(parts[:end]) in known:
                return ".".join(parts[:end])
        raise AssertionError(f"cfgrad/{path.name} imports {'.'.join(parts)}, not in the map")

    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[:len(package) - (node.level - 1)]
            module = base + (node.module.split(".") if node.module else [])
            if node.module:
                found.add(resolved(module))
            else:
                found |= {resolved(module + [a.name]) for a in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("cfgrad."):
            found.add(resolved(node.module.split(".")[1:]))
        elif isinstance(node, ast.Import):
            found |= {resolved(a.name.split(".")[1:]) for a in node.names
                      if a.name.startswith("cfgrad.")}
    return found - {name}


# -------------------------------------------------------------------------------------
# Rewriting the documented outputs
# -------------------------------------------------------------------------------------


def update_outputs(path: Path = API) -> int:
    """Rerun every runnable example of `path` and write its output into its text block."""
    text = path.read_text(encoding="utf-8")
    pieces, last, changed = [], 0, 0
    for _, code, out in runnable_examples(text):
        printed = normalized(run_example(code.group(2))) + "\n"
        changed += printed != out.group(2)
        pieces += [text[last:out.start(2)], printed]
        last = out.end(2)
    path.write_text("".join(pieces) + text[last:], encoding="utf-8")
    return changed


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        sys.exit("usage: python tests/docs/test_docs_api.py --update")
    print(f"{update_outputs()} example outputs rewritten in {API}")
