"""The `cfgrad` command line (also `python -m cfgrad`).

    cfgrad inspect path/to/file.py:function [--args '2.0, 1.0'] [--adjoint] [--run]
                   [--schedule] [--checkpoint 'Binomial(4)'] ...
    cfgrad demo

`inspect` imports the file as a module, takes the function's arguments from `--args` or
from the module's `example_args()` (a dict {function name: argument tuple}, as every file
in examples/ has), lowers the function and prints the inspector's view of it.

Every failure is one line on stderr, never a raw traceback: mistakes on the command line
(a missing file, function or arguments, unparsable `--args`, an output file that cannot
be written) exit with status 2; a cfgrad error, or an exception raised by the user's code
(while its module is imported, by `example_args()`, or while the function is traced or
run), exits with status 1, as does a bug of cfgrad that shows while it runs the user's
code (reported as an internal error, not as the user's); a module that calls
`sys.exit(n)` while it is imported exits with status n (1 when n is 0 or not a status:
nothing was inspected); Ctrl-C exits with status 130. `--traceback` adds the full
traceback of the exception, with its own type, before that line.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.util
import inspect
import io
import re
import sys
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from rich.console import Console
from rich.text import Text

from . import checkpoint, inspector
from .api import lowered
from .convert import converted, converted_source
from .dot import to_dot
from .errors import ArgumentValueError, CfgradError
from .reverse import adjoint


class UsageError(Exception):
    """A mistake on the command line: reported in one line, exit status 2."""


class UserCodeError(Exception):
    """The user's code raised (or called sys.exit): reported in one line, and with the
    original exception's traceback under --traceback; exit status `status`. `advice` ends
    the line when the traceback is not shown (it is how to see it). `bug`: the exception
    is cfgrad's own bug, raised while running the user's code, and the line asks for a
    report."""

    def __init__(self, message: str, original: BaseException, status: int = 1,
                 advice: str = "", bug: bool = False):
        super().__init__(message)
        self.original = original
        self.status = status
        self.advice = advice
        self.bug = bug

    def ending(self, traceback_shown: bool) -> str:
        """What follows the message on its line."""
        advice = self.advice if self.advice and not traceback_shown else ""
        if self.bug:
            return f" (please report it{'; ' + advice if advice else ''})"
        return f"; {advice}" if advice else ""


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    ns = parser.parse_args(argv)
    if ns.command is None:
        parser.print_help(sys.stderr)
        return 2
    show_traceback = getattr(ns, "traceback", False)
    try:
        return ns.run_command(ns)
    except UsageError as exc:
        print(f"cfgrad: error: {exc}", file=sys.stderr)
        return 2
    except UserCodeError as exc:
        if show_traceback:
            traceback.print_exception(exc.original, file=sys.stderr)
        print(f"cfgrad: error: {exc}{exc.ending(show_traceback)}", file=sys.stderr)
        return exc.status
    except CfgradError as exc:
        if show_traceback:
            traceback.print_exception(exc, file=sys.stderr)
        print(f"cfgrad: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("cfgrad: interrupted", file=sys.stderr)
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cfgrad", description="Look at what cfgrad's gradients do: programs of SSA "
        "blocks, their mirrored adjoints and what one run did.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("inspect", help="show the program of FILE.py:FUNCTION",
                       description="Lower FILE.py:FUNCTION and show its program view.")
    p.add_argument("target", metavar="FILE.py:FUNCTION")
    p.add_argument("--args", metavar="LITERALS",
                   help="the arguments as Python literals, as in a call: '2.0, 1.0' "
                   "(lists become numpy arrays; default: the file's example_args())")
    p.add_argument("--adjoint", action="store_true",
                   help="show each forward block beside its adjoint (mirrored view)")
    p.add_argument("--run", action="store_true",
                   help="run forward and backward and show what the run did")
    p.add_argument("--schedule", action="store_true",
                   help="run with every loop's checkpoint strategy traced and show each "
                   "loop's schedule of events (implies --run)")
    p.add_argument("--checkpoint", metavar="STRATEGY",
                   help="the call's checkpoint strategy for the run, e.g. 'Binomial(4)': "
                   f"{', '.join(STRATEGY_FORMS)} (a loop's own choice wins)")
    p.add_argument("--expand", action="store_true",
                   help="also show the sub-programs that nested transformations (a grad "
                   "inside the function) stand for")
    p.add_argument("--text", action="store_true",
                   help="print the plain IR text instead (the adjoint's with --adjoint)")
    p.add_argument("--converted", action="store_true",
                   help="print the Python source cfgrad traces: the function with its "
                   "if/while/for converted (docs/autograph.md)")
    p.add_argument("--values", metavar="NAMES",
                   help="with --run: more values to summarize, e.g. '%%3,%%7'")
    p.add_argument("--fold", type=int, default=inspector.DEFAULT_FOLD, metavar="N",
                   help="fold blocks longer than N rows (0: never; default "
                   f"{inspector.DEFAULT_FOLD})")
    p.add_argument("--dot", metavar="FILE", help="also write the program as Graphviz DOT "
                   "(the adjoint with --adjoint; run counts with --run)")
    p.add_argument("--traceback", action="store_true",
                   help="when the file or the function raises, show the full traceback "
                   "(default: one line)")
    _output_options(p)
    p.set_defaults(run_command=_inspect)

    d = sub.add_parser("demo", help="inspect the quickstart example (examples/quickstart.py)",
                       description="Run the quickstart example and show its run and its "
                       "mirrored adjoint.")
    _output_options(d)
    d.set_defaults(run_command=_demo)
    return parser


def _output_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--svg", metavar="FILE", help="also save the output as SVG")
    p.add_argument("--html", metavar="FILE", help="also save the output as HTML")
    p.add_argument("--width", type=int, metavar="COLUMNS",
                   help="render for this many columns, 20 to 1000 (default: the terminal's, "
                   "at most 1000)")
    p.add_argument("--no-color", action="store_true",
                   help="no colours (as with the NO_COLOR environment variable)")


# ---------------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------------


def _inspect(ns: argparse.Namespace) -> int:
    if ns.text and (ns.run or ns.schedule or ns.checkpoint or ns.svg or ns.html or ns.values):
        raise UsageError("--text prints the plain IR; it does not combine with --run, "
                         "--schedule, --checkpoint, --values, --svg or --html")
    runs = ns.run or ns.schedule
    if ns.values and not runs:
        raise UsageError("--values summarizes values of a run: add --run")
    if ns.checkpoint is not None and not runs:
        raise UsageError("--checkpoint chooses the strategy of a run: add --run or --schedule")
    strategy = parse_strategy(ns.checkpoint) if ns.checkpoint is not None else None
    if ns.fold < 0:
        raise UsageError("--fold must be 0 (never fold) or a positive number of rows")
    console = _console(ns)
    _check_outputs(ns)
    fun, args = resolve_target(ns.target, ns.args, need_args=not ns.converted)
    if ns.converted:
        sys.stdout.write(converted_source(fun) + "\n")
        return 0
    with _user_code(f"tracing {ns.target}", passthrough=CfgradError):
        program = lowered(converted(fun), args)[0].program
    with _user_code(f"inspecting {ns.target}", passthrough=CfgradError):
        shown = adjoint(program) if ns.adjoint else program
        run = None
        if runs:
            values = [v.strip() for v in ns.values.split(",") if v.strip()] if ns.values else []
            try:
                inspector.find_values(program, values)
            except ArgumentValueError as exc:
                raise UsageError(f"--values: {exc}") from None
            run = inspector.record_run(fun, *args, values=values, checkpoint=strategy,
                                       schedule=ns.schedule)
        if ns.dot:
            _write(ns.dot, "--dot", lambda path: Path(path).write_text(
                to_dot(shown, None if ns.adjoint else run), encoding="utf-8"))
        if ns.text:
            sys.stdout.write(shown.text())
            for what, sub in (inspector.sub_programs(shown) if ns.expand else ()):
                sys.stdout.write(f"\n; sub-program of {{of={what}}}\n{sub.text()}")
            return 0
        view = inspector.view(run or program, adjoint=ns.adjoint, fold=ns.fold or None,
                              schedule=ns.schedule, expand=ns.expand)
    console.print(view)
    _save(console, ns, f"cfgrad inspect {ns.target}")
    return 0


def _demo(ns: argparse.Namespace) -> int:
    """The README's main example: examples/quickstart.py's value and gradient beside finite
    differences, then what the inspector shows of that run and of the adjoint."""
    path = Path(__file__).resolve().parents[1] / "examples" / "quickstart.py"
    if not path.is_file():
        raise UsageError(f"the demo runs examples/quickstart.py of a source checkout, which is "
                         f"not at {path}")
    console = _console(ns)
    _check_outputs(ns)
    module = load_module(path)
    args = module.example_args()["f"]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        module.report(*args)
    console.print(Text("cfgrad demo: examples/quickstart.py, f(a, b) = Newton's sqrt(a), then a "
                       "branch on it", style="bold"))
    console.print(Text(printed.getvalue().rstrip("\n")))
    console.print()
    console.print(inspector.view(module.f, *args, run=True, adjoint=True))
    _save(console, ns, "cfgrad demo")
    return 0


# ---------------------------------------------------------------------------------
# Loading the user's function and arguments
# ---------------------------------------------------------------------------------


def resolve_target(target: str, args_text: str | None, need_args: bool = True
                   ) -> tuple[Any, tuple]:
    """`path/to/file.py:function` -> (the function, its arguments; none when not
    `need_args` and none are given)."""
    path_text, sep, name = target.rpartition(":")
    if not sep or not path_text or not name:
        raise UsageError(f"expected FILE.py:FUNCTION, got {target!r}")
    module = load_module(Path(path_text))
    fun = module
    for part in name.split("."):
        fun = getattr(fun, part, None)
        if fun is None:
            raise UsageError(f"{path_text} has no function {name!r}; it defines "
                             f"{_functions(module)}")
    if not callable(fun):
        raise UsageError(f"{name!r} in {path_text} is a {type(fun).__name__}, not a function")
    if args_text is not None:
        return fun, _check_arity(fun, name, parse_args(args_text), "--args")
    example_args = getattr(module, "example_args", None)
    if not need_args:
        return fun, ()
    if example_args is None:
        raise UsageError(f"no arguments for {name}: pass --args '...' or define "
                         f"example_args() in {path_text} returning {{{name!r}: (...)}}")
    with _user_code(f"calling example_args() of {path_text}"):
        cases = example_args()
    if not isinstance(cases, dict) or name not in cases:
        have = ", ".join(sorted(cases)) if isinstance(cases, dict) else type(cases).__name__
        raise UsageError(f"example_args() of {path_text} has no arguments for {name!r} (it "
                         f"has: {have}); pass --args '...'")
    args = cases[name]
    if not isinstance(args, tuple | list):
        raise UsageError(f"example_args()[{name!r}] of {path_text} must be a tuple of "
                         f"arguments, got {type(args).__name__}")
    return fun, _check_arity(fun, name, tuple(args), "example_args()")


def _check_arity(fun: Any, name: str, args: tuple, source: str) -> tuple:
    """Refuse arguments the function cannot take, before tracing calls it."""
    try:
        signature = inspect.signature(fun)
    except (TypeError, ValueError):  # no signature to check (a builtin, …)
        return args
    try:
        signature.bind(*args)
    except TypeError as exc:
        raise UsageError(f"{name}{signature} cannot take the {len(args)} arguments of "
                         f"{source}: {exc}") from None
    return args


def _functions(module: ModuleType) -> str:
    names = sorted(k for k, v in vars(module).items() if callable(v) and not k.startswith("_")
                   and getattr(v, "__module__", None) == module.__name__)
    return ", ".join(names) if names else "no functions"


def load_module(path: Path) -> ModuleType:
    """Import a Python file as a module, registered in sys.modules before it runs (as
    dataclasses and pickling need) and with its directory on sys.path (as `python
    file.py` has)."""
    if not path.is_file():
        raise UsageError(f"no such file: {path}")
    if path.suffix != ".py":
        raise UsageError(f"{path} is not a .py file")
    name = "cfgrad_cli_" + re.sub(r"\W", "_", path.stem)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None  # a .py file always has a loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, str(path.resolve().parent))
    try:
        with _user_code(f"importing {path}"):
            spec.loader.exec_module(module)
    except UserCodeError:
        del sys.modules[name]
        raise
    return module


@contextlib.contextmanager
def _user_code(what: str, passthrough: type[Exception] | tuple = ()) -> Iterator[None]:
    """Run the user's code (`what` says which: "importing FILE", …): an exception it raises
    (other than `passthrough`, which main reports itself) or a sys.exit it calls becomes
    one UserCodeError saying what went wrong, where, and what to do. Any BaseException
    counts (a GeneratorExit escaping the function is the user's too), except a
    KeyboardInterrupt, which main reports as an interruption. An exception that is a bug
    of cfgrad itself is reported as one, so the user's code is not blamed for it."""
    try:
        yield
    except (UsageError, UserCodeError, KeyboardInterrupt):
        raise
    except SystemExit as exc:
        code = exc.code
        status = code if isinstance(code, int) and 0 < code < 256 else 1
        raise UserCodeError(f"{what} called sys.exit({code!r}), so nothing was inspected "
                            f"(exit status {status}); cfgrad inspect imports the file and calls "
                            "the function, so code that exits belongs under `if __name__ == "
                            "'__main__':`", exc, status) from exc
    except BaseException as exc:
        if isinstance(exc, passthrough):
            raise
        lines = str(exc).strip().splitlines()
        summary = type(exc).__name__
        if lines:
            summary += f": {lines[0]}{' …' if len(lines) > 1 else ''}"
        frames = traceback.extract_tb(exc.__traceback__)
        if frames:
            last = frames[-1]
            summary += f" (at {last.filename}:{last.lineno} in {last.name})"
        if _cfgrad_bug(exc, frames):
            raise UserCodeError(f"internal error in cfgrad while {what}: {summary}", exc,
                                advice="rerun with --traceback", bug=True) from exc
        raise UserCodeError(f"{what} raised {summary}", exc,
                            advice="rerun with --traceback for the full traceback") from exc


_PACKAGE = Path(__file__).resolve().parent
# How Python words a call of a function with arguments it does not take, or of something
# that is not a function: the frame that raises is the caller's, so when cfgrad calls the
# user's loop body or branch that way, the innermost frame is cfgrad's but the mistake is
# the user's.
_BAD_CALL = re.compile(r"^\S+\(\) (missing|takes|got) |object is not callable$")


def _cfgrad_bug(exc: BaseException, frames: traceback.StackSummary) -> bool:
    """Whether `exc` is a bug of cfgrad rather than of the user's code: not a CfgradError,
    raised in cfgrad's own code, and not raised there on purpose. cfgrad raises some
    builtin exceptions deliberately, for the user's mistakes (AttributeError for an
    attribute traced arrays lack, ValueError for an axis out of bounds): those are `raise`
    statements, while a bug fails on another line (a KeyError of a lookup, an
    AttributeError of None) or is an AssertionError of a broken invariant."""
    if isinstance(exc, CfgradError) or not frames:
        return False
    last = frames[-1]
    if not Path(last.filename).resolve().is_relative_to(_PACKAGE):
        return False
    if isinstance(exc, AssertionError):
        return True
    if (last.line or "").startswith("raise "):
        return False
    return not (isinstance(exc, TypeError) and _BAD_CALL.search(str(exc)))


def parse_args(text: str) -> tuple:
    """`'2.0, [1.0, 2.0]'` -> (2.0, array([1., 2.])): Python literals as in a call; lists
    become numpy arrays, tuples and dicts stay pytrees."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
        values = ast.literal_eval(node)
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError) as exc:
        raise UsageError(f"--args {text!r} is not a list of Python literals: {exc}") from None
    args = values if isinstance(node, ast.Tuple) else (values,)
    try:
        return tuple(_arrays(a) for a in args)
    except ValueError as exc:
        raise UsageError(f"--args {text!r}: a list is not a rectangular array: {exc}") from None


#: What --checkpoint takes: the strategies of cfgrad.checkpoint, as a call writes them.
STRATEGY_FORMS = ("StoreAll()", "Recompute()", "EveryK(k)", "Binomial(s)", "Online(s)")


def parse_strategy(text: str) -> Any:
    """`'Binomial(4)'` -> Binomial(4): one of the strategies of cfgrad.checkpoint, called
    with literal arguments as in Python. Nothing else is evaluated: the text comes from a
    command line, and a strategy is all it may name."""
    names = {form.partition("(")[0] for form in STRATEGY_FORMS}
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, MemoryError, RecursionError):  # (nested beyond the parser's means)
        node = None
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in names):
        raise UsageError(f"--checkpoint {text!r} is not a strategy: write one of "
                         f"{', '.join(STRATEGY_FORMS)}")
    try:
        args = [ast.literal_eval(a) for a in node.args]
        kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
        return getattr(checkpoint, node.func.id)(*args, **kwargs)
    except (ValueError, TypeError, SyntaxError) as exc:
        raise UsageError(f"--checkpoint {text!r}: {exc}") from None


def _arrays(x: Any) -> Any:
    if isinstance(x, list):
        return np.array(x)
    if isinstance(x, tuple):
        return tuple(_arrays(v) for v in x)
    if isinstance(x, dict):
        return {k: _arrays(v) for k, v in x.items()}
    return x


# ---------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------


def _console(ns: argparse.Namespace) -> Console:
    low, high = inspector.MIN_WIDTH, inspector.MAX_WIDTH
    if ns.width is not None and not low <= ns.width <= high:
        raise UsageError(f"--width {ns.width}: the views are laid out for {low} to {high} "
                         "columns")
    console = Console(width=ns.width, no_color=True if ns.no_color else None,
                      record=bool(ns.svg or ns.html))
    console.width = min(console.width, high)  # a terminal (or COLUMNS) wider than that
    return console


def _check_outputs(ns: argparse.Namespace) -> None:
    """Refuse output files in directories that do not exist before any work is done."""
    for option in ("dot", "svg", "html"):
        path = getattr(ns, option, None)
        if path is not None and not Path(path).parent.is_dir():
            raise UsageError(f"--{option}: cannot write {path}: no directory "
                             f"{Path(path).parent}")


def _save(console: Console, ns: argparse.Namespace, title: str) -> None:
    if ns.html:
        _write(ns.html, "--html", lambda path: console.save_html(path, clear=False))
    if ns.svg:
        _write(ns.svg, "--svg", lambda path: console.save_svg(path, title=title, clear=False))


def _write(path: str, option: str, write: Any) -> None:
    try:
        write(path)
    except OSError as exc:
        raise UsageError(f"{option}: cannot write {path}: {exc.strerror or exc}") from None
