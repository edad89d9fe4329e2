"""The `cfgrad` command line, run as a user runs it: `python -m cfgrad …` in a process of
its own (forked from a server that has imported cfgrad: tests/forked_python.py; one test
runs the installed script and `python -m cfgrad` from scratch and compares).

Every option of `cfgrad inspect` and `cfgrad demo`, every error path (exit status 2 for a
mistake on the command line, 1 for an error of the user's code or of cfgrad, the script's
own status for a sys.exit while it is imported; one line each, or the traceback under
--traceback; `--width` takes 20 to 1000 columns), every
function of every example's `example_args()`, and the captured outputs in
docs/inspector.md: each ```text block after a `<!-- cfgrad ... -->` comment is exactly
what that command prints (or, when the command names FILE, what it writes there), and
docs/inspector-demo.svg is exactly what its command saves. Rewrite them after an
intended change with

    CFGRAD_REGEN_GOLDEN=1 python -m pytest tests/tools/test_cli.py

and review the diff.
"""

from __future__ import annotations

import importlib.util
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from functools import cache
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import seed_programs as seeds
from forked_python import PythonServer
from rich.console import Console
from test_docs_api import normalized, run_example, runnable_examples
from test_inspector import has_colour, schedule_sections, totals_of

import cfgrad as cg
from cfgrad import cli, inspector
from cfgrad.errors import (
    ArgumentTypeError,
    ArgumentValueError,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
SEEDS = "examples/seeds.py"
DOC = ROOT / "docs" / "inspector.md"
REGEN = bool(os.environ.get("CFGRAD_REGEN_GOLDEN"))
HANG_GUARD = 300  # seconds: a command still running then is stuck, not slow (no timing)

PYTHON = PythonServer(preload=["cfgrad.cli"])  # what `python -m cfgrad` imports first


@pytest.fixture(scope="module", autouse=True)
def _stop_the_python_server():
    yield
    PYTHON.close()


def plain_environment(env: dict | None = None) -> dict:
    """This process's environment without colour variables, plus `env`."""
    base = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR",
                                                              "COLUMNS", "TERM")}
    return {**base, **(env or {})}


def cfgrad(*argv: str, env: dict | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """`python -m cfgrad ARGV` with a plain environment (no colour variables) unless `env`
    adds some."""
    return PYTHON.run(["-m", "cfgrad", *argv], env=plain_environment(env), cwd=cwd)


def cfgrad_many(*argvs: tuple[str, ...]) -> list[subprocess.CompletedProcess]:
    """Several commands at once, each in a process of its own."""
    return PYTHON.run_many([["-m", "cfgrad", *argv] for argv in argvs],
                           env=plain_environment(), cwd=ROOT)


def ok(*argv: str, **kw) -> str:
    proc = cfgrad(*argv, **kw)
    assert proc.returncode == 0, proc.stderr
    assert not proc.stderr
    return proc.stdout


def fails(status: int, message: str, *argv: str, **kw) -> str:
    """Run a command that must fail with `status` and an error naming `message`."""
    return check_failure(cfgrad(*argv, **kw), status, message)


def check_failure(proc: subprocess.CompletedProcess, status: int, message: str) -> str:
    assert proc.returncode == status, (proc.args, proc.returncode, proc.stdout, proc.stderr)
    assert message in proc.stderr, (proc.args, proc.stderr)
    assert proc.stdout == "", proc.args
    return proc.stderr


def load(path: Path):
    return cli.load_module(path)


# ---------------------------------------------------------------------------------
# Options
# ---------------------------------------------------------------------------------


def test_program_view_is_the_default():
    out = ok("inspect", f"{SEEDS}:branch", "--width", "100")
    assert out.startswith("program branch(%a: f64[], %b: f64[]) -> (f64[])")
    assert "Cond %0 -> Proj(T) b1 | Proj(F) b2" in out and "if#0 cond · seeds.py:44" in out


def test_text_prints_the_ir_exactly():
    seeds = load(EXAMPLES / "seeds.py")
    program = cg.lower(seeds.loop, *seeds.example_args()["loop"])
    assert ok("inspect", f"{SEEDS}:loop", "--text") == program.text()
    assert ok("inspect", f"{SEEDS}:loop", "--text", "--adjoint") == cg.adjoint(program).text()


def test_args_replace_example_args():
    """At (3, 2) a < b is false: the False case runs."""
    out = ok("inspect", f"{SEEDS}:branch", "--args", "3.0, 2.0", "--run", "--width", "100")
    assert "T×0 F×1" in out and "b1 case T ← b0.T  not run" in out
    out = ok("inspect", f"{SEEDS}:log_sin", "--args", "[0.5, 0.75]", "--text")
    assert out.startswith("program log_sin(%x: f64[2])")  # a list becomes an array
    out = ok("inspect", f"{SEEDS}:loop", "--args", "2.0, 1.0, 6", "--run", "--width", "100")
    assert "T×6 F×1" in out


def test_adjoint_shows_the_mirrored_view():
    out = ok("inspect", f"{SEEDS}:branch", "--adjoint", "--width", "100")
    assert out.startswith("mirrored branch ↔ branch.adjoint")
    assert "pops the decision of b0's Cond" in out


def test_run_and_values():
    out = ok("inspect", f"{SEEDS}:loop", "--run", "--values", "%5, %3", "--width", "100")
    assert "path  b0 → (b1 → b2)×4 → b1 → b3" in out
    assert re.search(r"loop#0 while\s+4\s+StoreAll\(\)", out)
    assert re.search(r"%5 +f64\[\] .* in b2, last of 4 visits", out)
    assert re.search(r"%3 +f64\[\] ", out)


def test_schedule_and_checkpoint():
    """--schedule runs with every strategy traced (and implies --run); --checkpoint is the
    call's strategy. The schedule's totals are what cg.vjp counts for the same call."""
    seeds = load(EXAMPLES / "seeds.py")
    args = ("--args", "0.5, 1.0, 7", "--width", "100")
    out = ok("inspect", f"{SEEDS}:loop", "--schedule", "--checkpoint", "Binomial(2)", *args)
    assert out.startswith("run of loop") and "\nschedules\n" in out
    section = schedule_sections(out)["loop#0"]
    assert section["head"] == "loop#0 while · Binomial(2) · trips 7"
    _, pullback = cg.vjp(seeds.loop, 0.5, 1.0, 7, checkpoint=cg.checkpoint.Binomial(2))
    pullback(1.0)
    stats = pullback.stats.loops[0]
    totals = totals_of(section["totals"])
    assert (totals["forward"][0], totals["recomputed"][0], totals["peak snapshots"][0]) == (
        stats.forward_steps, stats.recompute_steps, stats.peak_snapshots)
    out = ok("inspect", f"{SEEDS}:loop", "--run", "--checkpoint", "EveryK(2)", *args)
    assert re.search(r"loop#0 while\s+7\s+EveryK\(2\)\s+6\s", out) and "schedules" not in out
    out = ok("inspect", f"{SEEDS}:loop", "--schedule", *args)  # the default: StoreAll()
    assert schedule_sections(out)["loop#0"]["notes"] == [
        "no schedule: StoreAll() keeps every iteration's tape and recomputes nothing"]


def test_run_with_adjoint_shows_both():
    out = ok("inspect", f"{SEEDS}:branch", "--run", "--adjoint", "--width", "100")
    assert out.index("run of branch") < out.index("mirrored branch")


def test_fold():
    target = "examples/benchmark.py:add_chain"
    assert "… 25 nodes …" in ok("inspect", target, "--width", "100")  # 65 rows, fold 40
    assert "… 55 nodes …" in ok("inspect", target, "--fold", "10", "--width", "100")
    assert "nodes …" not in ok("inspect", target, "--fold", "0", "--width", "100")


def test_width():
    out = ok("inspect", f"{SEEDS}:loop", "--run", "--adjoint", "--width", "60")
    assert max(map(len, out.splitlines())) <= 60
    out = ok("inspect", f"{SEEDS}:loop", "--run", "--adjoint")  # not a terminal: 80
    assert max(map(len, out.splitlines())) == 80 and "\x1b[" not in out


def test_colour_follows_no_color_and_the_flag():
    argv = ("inspect", f"{SEEDS}:branch", "--run")
    assert has_colour(ok(*argv, env={"FORCE_COLOR": "1"}))
    assert not has_colour(ok(*argv, env={"FORCE_COLOR": "1", "NO_COLOR": "1"}))
    assert not has_colour(ok(*argv, "--no-color", env={"FORCE_COLOR": "1"}))


def test_dot(tmp_path):
    out = tmp_path / "branch.dot"
    ok("inspect", f"{SEEDS}:branch", "--dot", str(out))
    text = out.read_text()
    assert text.startswith('digraph "branch" {') and "bold" not in text
    ok("inspect", f"{SEEDS}:branch", "--run", "--dot", str(out))
    assert 'label="T ×1"' in out.read_text()
    ok("inspect", f"{SEEDS}:branch", "--adjoint", "--dot", str(out))
    assert out.read_text().startswith('digraph "branch.adjoint" {')
    ok("inspect", f"{SEEDS}:branch", "--text", "--dot", str(out))
    assert out.read_text().startswith('digraph "branch" {')


def test_svg_and_html(tmp_path):
    svg, html = tmp_path / "v.svg", tmp_path / "v.html"
    out = ok("inspect", f"{SEEDS}:branch", "--run", "--svg", str(svg), "--html", str(html),
             "--width", "100")
    assert "run of branch" in out
    root = ET.parse(svg).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    text = "".join(root.itertext()).replace("\xa0", " ")
    assert "cfgrad inspect examples/seeds.py:branch" in text and "run of branch" in text
    assert "<html" in html.read_text() and "run of " in html.read_text()


def test_demo(tmp_path):
    svg = tmp_path / "demo.svg"
    out = ok("demo", "--width", "100", "--svg", str(svg))
    assert re.search(r"df/da\s+-?\d", out) and "Newton iterations: 5" in out
    assert "run of f" in out and "mirrored f ↔ f.adjoint" in out
    assert svg.read_text().startswith("<svg")


def test_python_m_and_the_console_script():
    """The installed script and `python -m cfgrad`, each started from scratch, print and
    exit as the forked commands of the other tests do, on success and on a mistake."""
    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "cfgrad"]
    assert script.value == "cfgrad.cli:main" and script.load() is cli.main
    path = shutil.which("cfgrad") or str(Path(sys.executable).parent / "cfgrad")
    if not Path(path).exists():
        pytest.fail("the cfgrad script is not installed: pip install -e .")
    for argv in (["inspect", f"{SEEDS}:cancel", "--text"], ["inspect", f"{SEEDS}:nope"]):
        forked = cfgrad(*argv)
        assert forked.returncode in (0, 2) and (forked.stdout or forked.stderr)
        for command in ([path], [sys.executable, "-m", "cfgrad"]):
            proc = subprocess.run([*command, *argv], cwd=ROOT, env=plain_environment(),
                                  capture_output=True, text=True, timeout=HANG_GUARD)
            assert (proc.returncode, proc.stdout, proc.stderr) == (
                forked.returncode, forked.stdout, forked.stderr), command


def test_help():
    text = ok("inspect", "--help")
    assert "--adjoint" in text and "--schedule" in text and "--checkpoint STRATEGY" in text


# ---------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------


def write(tmp_path: Path, source: str, name: str = "mod.py") -> str:
    path = tmp_path / name
    path.write_text(source)
    return str(path)


def test_usage_errors_exit_2(tmp_path):
    """Each mistake exits 2 with one line naming it, before printing anything."""
    missing = str(tmp_path / "missing" / "x.out")
    cases = [
        (["inspect", "nope.py:f"], "no such file: nope.py"),
        (["inspect", "README.md:f"], "is not a .py file"),
        (["inspect", SEEDS], "expected FILE.py:FUNCTION, got 'examples/seeds.py'"),
        (["inspect", f"{SEEDS}:nope"],
         "has no function 'nope'; it defines branch, cancel, example_args, log_sin, loop,"),
        (["inspect", f"{SEEDS}:main"],
         "example_args() of examples/seeds.py has no arguments for 'main' (it has: branch,"),
        (["inspect", f"{SEEDS}:tree", "--args", "(1"], "is not a list of Python literals"),
        (["inspect", f"{SEEDS}:tree", "--args", "x + 1"], "is not a list of Python literals"),
        (["inspect", f"{SEEDS}:log_sin", "--args", "[[1.0], [2.0, 3.0]]"],
         "a list is not a rectangular array"),
        (["inspect", f"{SEEDS}:tree", "--args", "1.0"],
         "tree(x, z, k, g) cannot take the 1 arguments of --args: missing a required"),
        (["inspect", f"{SEEDS}:tree", "--values", "%1"],
         "--values summarizes values of a run: add --run"),
        (["inspect", f"{SEEDS}:loop", "--run", "--values", "%99"],
         "--values: inspect: loop has no value named '%99'"),
        (["inspect", f"{SEEDS}:tree", "--text", "--run"], "--text prints the plain IR"),
        (["inspect", f"{SEEDS}:tree", "--text", "--schedule"], "--text prints the plain IR"),
        (["inspect", f"{SEEDS}:loop", "--checkpoint", "Binomial(2)"],
         "--checkpoint chooses the strategy of a run: add --run or --schedule"),
        (["inspect", f"{SEEDS}:loop", "--run", "--checkpoint", "Revolve(2)"],
         "--checkpoint 'Revolve(2)' is not a strategy: write one of StoreAll(), Recompute(), "
         "EveryK(k), Binomial(s), Online(s)"),
        (["inspect", f"{SEEDS}:loop", "--run", "--checkpoint", "__import__('os').getcwd()"],
         "is not a strategy"),
        (["inspect", f"{SEEDS}:loop", "--schedule", "--checkpoint", "EveryK(0)"],
         "--checkpoint 'EveryK(0)': EveryK: k must be an integer >= 1, got 0"),
        (["inspect", f"{SEEDS}:loop", "--schedule", "--checkpoint", "Online(n)"],
         "--checkpoint 'Online(n)': "),
        (["inspect", f"{SEEDS}:tree", "--text", "--svg", "x.svg"], "--text prints the plain IR"),
        (["inspect", f"{SEEDS}:tree", "--fold", "-1"], "--fold must be 0"),
        (["inspect", f"{SEEDS}:tree", "--width", "5"], "--width 5: the views are laid out for"),
        (["inspect", f"{SEEDS}:tree", "--svg", missing], "--svg: cannot write"),
        (["inspect", f"{SEEDS}:tree", "--html", missing], "--html: cannot write"),
        (["inspect", f"{SEEDS}:tree", "--dot", missing], "--dot: cannot write"),
        (["inspect", f"{SEEDS}:tree", "--dot", str(tmp_path)], "--dot: cannot write"),
        (["demo", "--svg", missing], "--svg: cannot write"),
        (["inspect", f"{SEEDS}:tree", "--width", "wide"], "invalid int value"),
        (["inspect", f"{SEEDS}:tree", "--bogus"], "unrecognized arguments: --bogus"),
        ([], "usage: cfgrad"),
    ]
    for proc, (_, message) in zip(cfgrad_many(*(argv for argv, _ in cases)), cases):
        check_failure(proc, 2, message)
    # an output file that turns out unwritable after the view was printed
    proc = cfgrad("inspect", f"{SEEDS}:tree", "--svg", str(tmp_path))
    assert proc.returncode == 2 and "--svg: cannot write" in proc.stderr


def test_missing_arguments_exit_2(tmp_path):
    plain = write(tmp_path, "def f(x):\n    return x * 2.0\n")
    fails(2, "no arguments for f: pass --args '...' or define example_args()", "inspect",
          f"{plain}:f")
    assert "program f(%x: f64[])" in ok("inspect", f"{plain}:f", "--args", "1.0")
    not_tuple = write(tmp_path, "def f(x):\n    return x\n\ndef example_args():\n"
                      "    return {'f': 1.0}\n", "not_tuple.py")
    fails(2, "example_args()['f'] of", "inspect", f"{not_tuple}:f")
    wrong = write(tmp_path, "def f(x):\n    return x\n\ndef example_args():\n"
                  "    return {'f': (1.0, 2.0)}\n", "wrong.py")
    fails(2, "cannot take the 2 arguments of example_args()", "inspect", f"{wrong}:f")
    value = write(tmp_path, "f = 3\n", "value.py")
    fails(2, "'f' in", "inspect", f"{value}:f", "--args", "1.0")


def one_line(stderr: str) -> str:
    assert stderr.count("\n") == 1 and "Traceback" not in stderr, stderr
    return stderr


def test_errors_of_user_code_exit_1_in_one_line(tmp_path):
    """Whatever the user's code raises, and wherever, is one line naming the file or
    function, the exception and the line that raised it, and how to see the traceback."""
    broken = write(tmp_path, "raise RuntimeError('boom at import')\n", "broken.py")
    raising = write(tmp_path, "def f(x):\n    return x\n\ndef example_args():\n"
                    "    raise KeyError('no args')\n", "raising.py")
    traced = write(tmp_path, "def f(x):\n    return g(x)\n\ndef g(x):\n"
                   "    raise ValueError('bad x\\nmore')\n", "traced.py")
    traced_if = write(tmp_path, "def f(x):\n    if x > 0:\n        y = x\n    return y\n",
                      "traced_if.py")  # y is assigned on one side of a traced if only
    cases = [
        (["inspect", f"{broken}:f"], f"importing {broken} raised RuntimeError: boom at import "
         f"(at {broken}:1 in <module>); rerun with --traceback for the full traceback"),
        (["inspect", f"{raising}:f"], f"calling example_args() of {raising} raised KeyError: "
         f"'no args' (at {raising}:5 in example_args); rerun with --traceback"),
        (["inspect", f"{traced}:f", "--args", "1.0", "--run"],
         f"tracing {traced}:f raised ValueError: bad x … (at {traced}:5 in g); rerun with"),
        (["inspect", f"{traced_if}:f", "--args", "1.0"], "cfgrad: error: ConversionError:"),
    ]
    for proc, (_, message) in zip(cfgrad_many(*(argv for argv, _ in cases)), cases):
        one_line(check_failure(proc, 1, message))


def test_sys_exit_in_user_code_is_reported_with_its_status(tmp_path):
    """A script's sys.exit(n) at import used to end `cfgrad inspect` silently."""
    cases = [("import sys\nsys.exit(3)\n", 3, "importing {path} called sys.exit(3), so "
              "nothing was inspected (exit status 3)"),
             ("import sys\nsys.exit(0)\n", 1, "called sys.exit(0), so nothing was inspected "
              "(exit status 1)"),
             ("raise SystemExit('usage: mod.py N')\n", 1, "sys.exit('usage: mod.py N')"),
             ("import sys\ndef f(x):\n    sys.exit(4)\n", 4,
              "tracing {path}:f called sys.exit(4)")]
    for i, (source, status, message) in enumerate(cases):
        path = write(tmp_path, source, f"exits{i}.py")
        err = fails(status, message.format(path=path), "inspect", f"{path}:f", "--args", "1.0")
        assert "if __name__ == '__main__':" in one_line(err)


def test_traceback_shows_the_users_exception_in_full(tmp_path):
    broken = write(tmp_path, "def helper():\n    raise RuntimeError('boom at import')\n\n"
                   "helper()\n", "broken.py")
    traced = write(tmp_path, "def f(x):\n    return {}['key'] + x\n", "traced.py")
    traced_if = write(tmp_path, "def f(x):\n    if x > 0:\n        y = x\n    return y\n",
                      "traced_if.py")  # y is assigned on one side of a traced if only
    cases = [
        (["inspect", f"{broken}:f", "--traceback"], "RuntimeError: boom at import\n",
         [f'File "{broken}", line 4, in <module>', f'File "{broken}", line 2, in helper']),
        (["inspect", f"{traced}:f", "--args", "1.0", "--traceback"], "KeyError: 'key'\n",
         [f'File "{traced}", line 2, in f']),
        (["inspect", f"{traced_if}:f", "--args", "1.0", "--traceback"],
         "cfgrad.errors.ConversionError: `y` is assigned on one branch only",
         [f'File "{traced_if}", line 2, in f']),
    ]
    for proc, (_, exception, frames) in zip(cfgrad_many(*(argv for argv, _, _ in cases)),
                                            cases):
        err = check_failure(proc, 1, exception)
        assert err.startswith("Traceback (most recent call last):") and all(
            frame in err for frame in frames), err
        last = err.splitlines()[-1]
        assert last.startswith("cfgrad: error: ") and "rerun with --traceback" not in last


def test_a_failure_inside_cfgrad_is_one_line_too(tmp_path, monkeypatch, capsys):
    """An exception that is not a CfgradError, raised in cfgrad's own code: the line says
    it is cfgrad's bug, not the user's code (it used to say "tracing f raised"), and
    where, so a bug report can start from it."""
    from cfgrad.ir import type_of

    monkeypatch.setattr(cli, "lowered", lambda fun, args: str(type_of(object())))
    path = write(tmp_path, "def f(x):\n    return x\n")
    assert cli.main(["inspect", f"{path}:f", "--args", "1.0"]) == 1
    err = one_line(capsys.readouterr().err)
    assert err.startswith(f"cfgrad: error: internal error in cfgrad while tracing {path}:f: "
                          "KeyError: 'object' (at "), err
    assert "cfgrad/ir.py" in err and err.endswith(
        " (please report it; rerun with --traceback)\n"), err
    assert cli.main(["inspect", f"{path}:f", "--args", "1.0", "--traceback"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):") and "KeyError" in err
    assert err.splitlines()[-1].endswith(" (please report it)"), err


def test_the_users_mistakes_that_cfgrad_raises_are_not_its_bugs(tmp_path, capsys):
    """Builtin exceptions cfgrad raises on purpose, and calls of the user's callables with
    arguments they do not take (raised in cfgrad's calling frame), are the user's."""
    path = write(tmp_path, "import cfgrad as cg\n\n"
                 "def attribute(x):\n    return x.foo\n\n"
                 "def arity(x):\n    return cg.while_loop(lambda c: c < 1.0, lambda c, d: c, x)\n\n"
                 "def not_callable(x):\n    return cg.cond(x > 1.0, 3.0, lambda: x)\n")
    for name, message in [("attribute", "tracing {}:attribute raised AttributeError: traced "
                                        "arrays have no attribute"),
                          ("arity", "tracing {}:arity raised TypeError: "),
                          # cfgrad's own typed error, naming the argument
                          ("not_callable", "ArgumentTypeError: cond: true_fun must be a "
                                           "function")]:
        assert cli.main(["inspect", f"{path}:{name}", "--args", "1.0"]) == 1
        err = one_line(capsys.readouterr().err)
        assert message.format(path) in err, err
        assert "internal error" not in err and "please report" not in err, err


def test_any_base_exception_of_user_code_is_one_line(tmp_path):
    """A GeneratorExit (a BaseException, neither SystemExit nor KeyboardInterrupt) escaping
    the user's code used to end `cfgrad inspect` with a raw traceback."""
    traced = write(tmp_path, "def f(x):\n    raise GeneratorExit('stop')\n", "traced.py")
    imported = write(tmp_path, "class Stop(BaseException):\n    pass\n\nraise Stop()\n",
                     "imported.py")
    cases = [(["inspect", f"{traced}:f", "--args", "1.0"],
              f"tracing {traced}:f raised GeneratorExit: stop (at {traced}:2 in f); rerun with "
              "--traceback for the full traceback"),
             (["inspect", f"{imported}:f", "--args", "1.0"],
              f"importing {imported} raised Stop (at {imported}:4 in <module>); rerun with"),
             (["inspect", f"{traced}:f", "--args", "1.0", "--traceback"],
              "GeneratorExit: stop\n")]
    procs = cfgrad_many(*(argv for argv, _ in cases))
    for proc, (_, message) in zip(procs[:2], cases[:2]):
        one_line(check_failure(proc, 1, message))
    err = check_failure(procs[2], 1, cases[2][1])
    assert err.startswith("Traceback (most recent call last):"), err
    assert err.splitlines()[-1] == f"cfgrad: error: tracing {traced}:f raised GeneratorExit: " \
        f"stop (at {traced}:2 in f)", err


def test_keyboard_interrupt_in_user_code_is_an_interruption(tmp_path, capsys):
    path = write(tmp_path, "def f(x):\n    raise KeyboardInterrupt\n")
    assert cli.main(["inspect", f"{path}:f", "--args", "1.0"]) == 130
    assert capsys.readouterr().err == "cfgrad: interrupted\n"


def test_modules_are_registered_before_they_run(tmp_path):
    """A dataclass in the user's file needs its module in sys.modules while it is built;
    sibling modules import as under `python file.py`."""
    write(tmp_path, "SCALE = 3.0\n", "helper.py")
    source = ("import dataclasses\nfrom helper import SCALE\n\n@dataclasses.dataclass\n"
              "class Config:\n    scale: float = SCALE\n\n"
              "def f(x):\n    return x * Config().scale\n\n"
              "def example_args():\n    return {'f': (2.0,)}\n")
    path = write(tmp_path, source, "with_dataclass.py")
    assert "mul %x, 3.0" in ok("inspect", f"{path}:f", "--text", cwd=tmp_path)


# ---------------------------------------------------------------------------------
# Every example function
# ---------------------------------------------------------------------------------


def example_functions() -> list[tuple[str, str]]:
    cases = []
    for path in sorted(EXAMPLES.glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"examples_{path.stem}", path)
        module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        example_args = getattr(module, "example_args", None)
        cases += [(path.name, name) for name in (example_args() if example_args else {})]
    return cases


EXAMPLE_FUNCTIONS = example_functions()


@cache
def example_outputs(tmp: str) -> dict[tuple[str, str], tuple[subprocess.CompletedProcess, str]]:
    """`cfgrad inspect examples/FILE:FUNCTION --run --adjoint --dot …` for every example
    function (run together: each is mostly interpreter start-up)."""
    argvs = [("inspect", f"examples/{file}:{function}", "--run", "--adjoint", "--width",
              "100", "--dot", f"{tmp}/{file}.{function}.dot")
             for file, function in EXAMPLE_FUNCTIONS]
    return {case: (proc, Path(argv[-1]).read_text() if proc.returncode == 0 else "")
            for case, argv, proc in zip(EXAMPLE_FUNCTIONS, argvs, cfgrad_many(*argvs))}


@pytest.mark.parametrize(("file", "function"), EXAMPLE_FUNCTIONS)
def test_every_example_function_inspects(file, function, tmp_path_factory):
    """The run view (which holds the annotated program view), the mirrored view and the
    DOT export of every function of every example's example_args()."""
    proc, dot = example_outputs(str(tmp_path_factory.getbasetemp()))[(file, function)]
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    assert proc.stdout.startswith(f"run of {function}")
    assert f"program {function}(" in proc.stdout and f"mirrored {function} ↔" in proc.stdout
    assert dot.startswith(f'digraph "{function}.adjoint" {{')


# ---------------------------------------------------------------------------------
# docs/inspector.md
# ---------------------------------------------------------------------------------

CAPTURE = re.compile(r"<!-- (cfgrad [^\n]*?) -->\n```text\n(.*?)^```", re.S | re.M)
SVG_COMMAND = re.compile(r"`(cfgrad [^`]*--svg docs/inspector-demo\.svg[^`]*)`")


def doc_captures() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in CAPTURE.finditer(DOC.read_text())]


def test_docs_have_captures():
    assert len(doc_captures()) >= 5


def in_process(argv: list[str], capsys) -> str:
    """`cfgrad ARGV` called in this process (what the page shows is checked here; the
    command line itself is tested through subprocesses above)."""
    capsys.readouterr()
    assert cli.main(argv) == 0
    out, err = capsys.readouterr()
    assert not err
    return out


@pytest.mark.parametrize(("command", "shown"), doc_captures())
def test_docs_show_real_output(command, shown, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    argv = shlex.split(command)[1:]
    out_file = tmp_path / "out"
    argv = [str(out_file) if a == "FILE" else a for a in argv]
    printed = in_process(argv, capsys)
    actual = out_file.read_text() if "FILE" in command else printed
    if REGEN:
        text = DOC.read_text()
        DOC.write_text(text.replace(f"<!-- {command} -->\n```text\n{shown}",
                                    f"<!-- {command} -->\n```text\n{actual}"))
        shown = actual
    assert actual == shown, f"docs/inspector.md: `{command}` prints something else now"


def test_docs_python_examples_run(capsys, monkeypatch):
    """The page's Python snippets run (from examples/, where they import quickstart)."""
    monkeypatch.chdir(EXAMPLES)
    monkeypatch.syspath_prepend(str(EXAMPLES))
    snippets = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(snippets) >= 2
    for code in snippets:
        exec(compile(code, "snippet.py", "exec"), {})  # noqa: S102 - our own documentation
    assert "run of collatz_like" in capsys.readouterr().out


def test_docs_python_examples_print_what_is_shown(monkeypatch):
    """A Python example followed directly by a text block prints exactly that text (run as
    docs/api.md's are: a fresh namespace, the file `example.py`)."""
    monkeypatch.chdir(EXAMPLES)
    monkeypatch.syspath_prepend(str(EXAMPLES))
    examples = runnable_examples(DOC.read_text())
    assert examples
    for line, code, out in examples:
        printed = run_example(code.group(2))
        if REGEN:
            text = DOC.read_text()
            DOC.write_text(text.replace(out.group(0), f"```text\n{printed}```"))
            continue
        assert normalized(printed) == normalized(out.group(2)), (
            f"docs/inspector.md:{line} prints something else now")


def test_docs_svg_is_what_the_cli_saves(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    (command,) = SVG_COMMAND.findall(DOC.read_text())
    argv = shlex.split(command)[1:]
    saved = tmp_path / "demo.svg"
    in_process([str(saved) if a == "docs/inspector-demo.svg" else a for a in argv], capsys)
    documented = ROOT / "docs" / "inspector-demo.svg"
    if REGEN:
        documented.write_text(saved.read_text())
    assert documented.read_text() == saved.read_text()


def test_expand_shows_the_sub_programs(tmp_path, capsys):
    """--expand adds the programs a nested grad stands for, in the view and in --text."""
    path = write(tmp_path, "import cfgrad as cg\n\ndef f(x):\n    return cg.grad("
                           "lambda y: y * y * x)(x)\n")
    assert cli.main(["inspect", f"{path}:f", "--args", "2.0", "--text", "--expand"]) == 0
    text = capsys.readouterr().out
    assert "vjp_call" in text and "; sub-program of {of=vjp(<lambda>, wrt=[0])}" in text
    assert cli.main(["inspect", f"{path}:f", "--args", "2.0", "--expand", "--width",
                     "100", "--no-color"]) == 0
    assert "sub-program of {of=vjp(<lambda>, wrt=[0])}" in capsys.readouterr().out


def test_converted_prints_the_python_cfgrad_traces_without_arguments(tmp_path, capsys):
    """`--converted` shows the function with its control flow converted; it traces
    nothing, so it needs no --args (and no example_args())."""
    path = write(tmp_path, "def f(x):\n    while x < 10.0:\n        x = x * 2.0\n"
                 "    return x\n", "plain.py")
    assert cli.main(["inspect", f"{path}:f", "--converted"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("def f(x):") and "cfg__ops.while_stmt(" in out
    assert "x = x * 2.0" in out


# ---------------------------------------------------------------------------------
# The inspector's width and the command line's numeric options
# ---------------------------------------------------------------------------------


QUICKSTART = f"{ROOT / 'examples' / 'quickstart.py'}:f"


def test_inspect_width_outside_20_to_1000_is_a_usage_error(capsys):
    for width in ("1001", "100000000", "19"):  # (1001 first: a width it once rendered)
        assert cli.main(["inspect", QUICKSTART, "--width", width]) == 2
        assert "laid out for 20 to 1000 columns" in capsys.readouterr().err


def test_a_wide_terminal_is_laid_out_at_1000_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100000")
    ns = cli._parser().parse_args(["inspect", QUICKSTART])
    assert cli._console(ns).width == 1000


def test_cg_inspect_lays_out_at_most_1000_columns():
    console = Console(file=io.StringIO(), width=20000, color_system=None)
    cg.inspect(seeds.cond_example, 1.0, 2.0, console=console)
    assert max(map(len, console.file.getvalue().splitlines())) == inspector.MAX_WIDTH


@pytest.mark.parametrize("fold, error", [(-1, ArgumentValueError), ("3", ArgumentTypeError),
                                         (True, ArgumentTypeError), (2.5, ArgumentTypeError)])
def test_inspect_fold_is_a_number_of_rows(fold, error):
    console = Console(file=io.StringIO(), width=80)
    with pytest.raises(error, match="fold"):
        cg.inspect(seeds.cond_example, 1.0, 2.0, fold=fold, console=console)


def test_a_checkpoint_option_nested_too_deeply_is_a_usage_error(capsys):
    argv = ["inspect", QUICKSTART, "--run",
            "--checkpoint", "EveryK(" + "-" * 100000 + "1)"]
    assert cli.main(argv) == 2
    assert "is not a strategy" in capsys.readouterr().err
