"""Python control flow on traced values: `cg.autograph` and the conversion behind it.

`converted(f)` finds `f`'s source (the file's text through `linecache`, parsed once per
file), rewrites it (`rewrite`), compiles it with the original file name and line numbers
and rebuilds the function on the original's globals, defaults and closure cells, so the
converted function reads and writes exactly what `f` does. It is cached per function
object (the rewritten code per code object, so a closure made anew each call is only
rebuilt). Converted code calls the runtime (`operators`) through one closure cell, and
every call it makes through `call`, which converts the user functions it reaches: those
whose file lies outside cfgrad, the standard library and site-packages.

What cannot be converted runs as Python: a function without source (typed at a bare
prompt, made by `exec`), a generator, a builtin. If such a function, called from converted
code, meets a traced condition, its `TracerBoolError` carries a note saying why it was not
converted.
"""

from __future__ import annotations
import __future__

import ast
import functools
import linecache
import os
import site
import sysconfig
import types
import weakref
from collections.abc import Callable
from typing import Any

from ..errors import ArgumentTypeError, TracerBoolError, Unconvertible, require_callable
from ..trace_context import LOWERING_LOCK, is_traced
from . import operators
from .rewrite import OPS, convert_function, convert_lambda, locate

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _library_dirs() -> tuple[str, ...]:
    """Directories whose code is not the user's: cfgrad, the standard library and
    site-packages (user code installed in development mode lives outside them)."""
    paths = {_PACKAGE}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            paths.add(path)
    for path in [*getattr(site, "getsitepackages", list)(), site.getusersitepackages()]:
        paths.add(path)
    return tuple(os.path.abspath(p) + os.sep for p in paths if p)


_LIBRARY = _library_dirs()
_FUTURE_FLAGS = functools.reduce(
    lambda acc, name: acc | getattr(__future__, name).compiler_flag,
    __future__.all_feature_names, 0)

# the runtime as converted code sees it: the operators, and `call`, defined below
RUNTIME = types.SimpleNamespace(**{name: getattr(operators, name) for name in (
    "Undefined", "ld", "python_test", "if_stmt", "if_exp", "while_stmt", "for_stmt", "and_",
    "or_", "not_", "chain", "assert_", "raised", "reraise", "refused", "enter_try",
    "exit_try")})

# the converted function per function (it holds the original's cells and globals, never
# the original itself, so an entry goes with its function), and the converted code per
# code object, or the reason it cannot be converted
_BY_FUNCTION: weakref.WeakKeyDictionary[Callable, Callable] = weakref.WeakKeyDictionary()
_BY_CODE: dict[types.CodeType, tuple[types.CodeType, ast.AST] | str] = {}
_CONVERTED: set[types.CodeType] = set()  # the code objects conversion made
_PARSED: dict[tuple[str, int], ast.Module | None] = {}


def _is_library(code: types.CodeType) -> bool:
    return _is_library_file(code.co_filename)


@functools.lru_cache(maxsize=1024)
def _is_library_file(filename: str) -> bool:
    """Whether `filename` is a library's (numpy's, cfgrad's own, …): decided once per file
    name, since `cg.vjp` and `cg.jvp` convert their function on every call."""
    return os.path.abspath(filename).startswith(_LIBRARY)


def converted(fun: Callable) -> Callable:
    """`fun` converted, or `fun` itself when it is not a user's Python function (a
    builtin, a function of a library, a cfgrad transformation). Cached per object."""
    if isinstance(fun, types.MethodType):
        inner = converted(fun.__func__)
        return fun if inner is fun.__func__ else types.MethodType(inner, fun.__self__)
    if isinstance(fun, functools.partial):  # kept, as the transformations key caches by it
        inner = converted(fun.func)
        if inner is fun.func:
            return fun
        try:
            return _BY_FUNCTION[fun]
        except KeyError:
            result = _BY_FUNCTION[fun] = functools.partial(inner, *fun.args, **fun.keywords)
            return result
    if not isinstance(fun, types.FunctionType):
        return fun
    code = fun.__code__
    if code in _CONVERTED or _is_library(code):
        return fun
    result = _BY_FUNCTION.get(fun)
    if result is not None and result.__defaults__ is fun.__defaults__ and (
            result.__kwdefaults__ == fun.__kwdefaults__) and (
            result.__cfgrad_from__ is code):  # type: ignore[attr-defined]
        return result  # (defaults or code set anew after conversion: rebuilt below)
    with LOWERING_LOCK:
        entry = _BY_CODE.get(code)
        if entry is None:
            try:
                entry = _compile(fun)
            except Unconvertible as e:
                entry = str(e)
            _BY_CODE[code] = entry
        if isinstance(entry, str):
            return fun
        result = _BY_FUNCTION[fun] = _rebuilt(fun, *entry)
    return result


def _rebuilt(fun: types.FunctionType, code: types.CodeType, source: ast.AST) -> Callable:
    """The converted `code` as a function on `fun`'s globals, defaults and cells."""
    cells = dict(zip(fun.__code__.co_freevars, fun.__closure__ or ()))
    closure = tuple(types.CellType(RUNTIME) if name == OPS else cells[name]
                    for name in code.co_freevars)
    new = types.FunctionType(code, fun.__globals__, fun.__name__, fun.__defaults__, closure)
    new.__kwdefaults__ = fun.__kwdefaults__
    new.__qualname__, new.__module__, new.__doc__ = fun.__qualname__, fun.__module__, fun.__doc__
    new.__annotations__ = fun.__annotations__
    new.__dict__.update(fun.__dict__)
    new.__cfgrad_source__ = source  # type: ignore[attr-defined]  (unparsed when asked)
    new.__cfgrad_from__ = fun.__code__  # type: ignore[attr-defined]
    return new


def why_unconverted(fun: Callable) -> str | None:
    """Why `fun`, a user's function, runs as Python, if conversion was tried and failed."""
    code = getattr(getattr(fun, "__func__", fun), "__code__", None)
    reason = _BY_CODE.get(code) if code is not None else None
    return reason if isinstance(reason, str) else None


def _module_ast(filename: str) -> ast.Module | None:
    """The parsed text of `filename` as it is now (a file rewritten since it was read is
    read again: converting the old text would run code the function does not have)."""
    linecache.checkcache(filename)
    lines = linecache.getlines(filename)
    key = (filename, hash(tuple(lines)))
    if key not in _PARSED:
        try:
            _PARSED[key] = ast.parse("".join(lines), filename) if lines else None
        except SyntaxError:
            _PARSED[key] = None
    return _PARSED[key]


def _find(fun: types.FunctionType, module: ast.Module) -> ast.FunctionDef | ast.Lambda:
    """The node of `fun`'s definition: a `def` of its name on its first line (a
    decorator's line, when decorated), or the lambda whose code spans its positions."""
    code = fun.__code__
    if code.co_name == "<lambda>":
        # the body's instructions (not the empty spans at column 0 of RESUME and RETURN)
        spans = [p for p in code.co_positions() if None not in p and (p[1], p[3]) > (p[0], p[2])]
        first = min((p[0], p[2]) for p in spans) if spans else None
        found = [node for node in ast.walk(module) if isinstance(node, ast.Lambda)
                 and node.lineno == code.co_firstlineno and first is not None
                 and (node.body.lineno, node.body.col_offset) <= first
                 <= (node.body.end_lineno, node.body.end_col_offset)]
        found = [n for n in found if not any(m is not n and _inside(m, n) for m in found)]
    else:
        found = [node for node in ast.walk(module)
                 if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                 and node.name == code.co_name and code.co_firstlineno in (
                     node.lineno, *(d.lineno for d in node.decorator_list[:1]))]
    if len(found) != 1:
        raise Unconvertible(f"its source could not be located in {code.co_filename}")
    if isinstance(found[0], ast.AsyncFunctionDef):
        raise Unconvertible("it is a coroutine (async def)")
    args = found[0].args
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    if names != list(code.co_varnames[:len(names)]) or len(names) != (
            code.co_argcount + code.co_kwonlyargcount):
        raise Unconvertible(f"the source in {code.co_filename} is not the code it runs "
                            "(the file changed since it was imported)")
    return found[0]


def _inside(inner: ast.AST, outer: ast.AST) -> bool:
    """Whether `outer` contains `inner` (for lambdas within lambdas)."""
    return any(node is inner for node in ast.walk(outer) if node is not outer)


def _compile(fun: types.FunctionType) -> tuple[types.CodeType, ast.AST]:
    """The converted code of `fun`, and its tree (`cfgrad inspect --converted` prints
    it as source)."""
    code = fun.__code__
    module = _module_ast(code.co_filename)
    if module is None:
        raise Unconvertible(f"its source is not available ({code.co_filename})")
    node = _find(fun, module)
    if isinstance(node, ast.Lambda):
        new: ast.stmt | ast.expr = convert_lambda(node)
        result: ast.stmt = ast.Return(new)
        name = "<lambda>"
    else:
        new = convert_function(node)
        new.decorator_list = []
        args = new.args  # defaults and annotations are the original's, set on the function
        args.defaults = [ast.Constant(None) for _ in args.defaults]
        args.kw_defaults = [None if d is None else ast.Constant(None) for d in args.kw_defaults]
        for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            if a is not None:
                a.annotation = None
        new.returns = None
        # defined in the factory under a name of its own: a function calling itself by its
        # global name must not find a factory local (its code object gets its name back)
        new.name = name = "cfg__converted"
        result = ast.Return(ast.Name(name, ast.Load()))
    _mangle(new, code.co_qualname)
    # a factory whose locals stand for the closure's cells: the converted function's
    # free variables are then the original's (and the runtime's), rebound to its cells
    cells = [ast.Assign([ast.Name(v, ast.Store())], ast.Constant(None))
             for v in (*code.co_freevars, OPS)]
    body = cells + ([new] if isinstance(new, ast.FunctionDef) else []) + [result]
    factory = ast.FunctionDef(name="cfg__factory", args=ast.arguments(
        [], [], None, [], [], None, []), body=body, decorator_list=[])
    tree = ast.Module([factory], [])
    for stmt in (factory, *cells, result):
        locate(stmt, node)
    ast.fix_missing_locations(tree)
    compiled = compile(tree, code.co_filename, "exec",
                       flags=code.co_flags & _FUTURE_FLAGS, dont_inherit=True)
    factory_code = next(c for c in compiled.co_consts if isinstance(c, types.CodeType))
    inner = next(c for c in factory_code.co_consts
                 if isinstance(c, types.CodeType) and c.co_name == name)
    inner = _renamed(inner, inner.co_qualname, code.co_qualname)
    if name != "<lambda>":
        inner = inner.replace(co_name=code.co_name)
        new.name = code.co_name
    _remember(inner)
    return inner, new


def _mangle(tree: ast.AST, qualname: str) -> None:
    """Private names (`self.__x`) as Python mangles them in a method of class `C`
    (`_C__x`): the original code was compiled inside the class, the converted code is not
    (Python reference, "Identifiers (Names)", private name mangling)."""
    parts = qualname.split(".")
    # the innermost class: a part followed by another than `<locals>` (a function's)
    owner = next((parts[i].lstrip("_") for i in range(len(parts) - 2, -1, -1)
                  if "<locals>" not in (parts[i], parts[i + 1])), "")
    if not owner:
        return

    def mangled(name: str | None) -> str | None:
        private = name is not None and name.startswith("__") and not name.endswith("__")
        return f"_{owner}{name}" if private else name

    for node in ast.walk(tree):
        for field in ("id", "attr", "arg", "name"):
            value = getattr(node, field, None)
            if isinstance(value, str) and not isinstance(node, ast.alias):
                setattr(node, field, mangled(value))


def _renamed(code: types.CodeType, old: str, new: str) -> types.CodeType:
    """`code` and the code nested in it with the qualified-name prefix `old` (the
    factory's) replaced by `new` (the original's), for tracebacks and reprs."""
    consts = tuple(_renamed(c, old, new) if isinstance(c, types.CodeType) else c
                   for c in code.co_consts)
    qualname = new + code.co_qualname[len(old):] if code.co_qualname.startswith(
        old) else code.co_qualname
    return code.replace(co_consts=consts, co_qualname=qualname)


def _remember(code: types.CodeType) -> None:
    _CONVERTED.add(code)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _remember(const)


# ---------------------------------------------------------------------------------
# calls from converted code
# ---------------------------------------------------------------------------------


def _is_cfgrad(fun: Any) -> bool:
    module = getattr(fun, "__module__", None) or ""
    return module == "cfgrad" or module.startswith("cfgrad.")


def _user_callable(x: Any) -> Any:
    return converted(x) if isinstance(x, types.FunctionType | functools.partial
                                      | types.MethodType) else x


def call(fun: Any, /, *args: Any, **kwargs: Any) -> Any:
    """A call in converted code: a user function is converted first; `range`,
    `enumerate` and `zip` of traced values become what a converted `for` iterates, and
    `max`/`min` of traced numbers a `cnp.where` of comparisons (`operators.extreme`); a
    cfgrad function's function arguments (the branches of `cg.cond`, a loop's body) are
    converted, like the functions they would have been as statements."""
    if fun is range and any(map(is_traced, args)):
        return operators.traced_range(*args)
    if fun is enumerate and args and operators.traced_iterable(args[0]):
        return operators.traced_enumerate(*args, **kwargs)
    if fun is zip and any(map(operators.traced_iterable, args)):
        return operators.traced_zip(*args)
    if (fun is max or fun is min) and not kwargs:
        values = args if len(args) > 1 else args[0] if args and isinstance(
            args[0], list | tuple) else ()
        if any(map(is_traced, values)):
            return operators.extreme(fun is max, values)
    if _is_cfgrad(fun) and not isinstance(fun, type):
        args = tuple(_user_callable(a) if callable(a) else [
            _user_callable(b) for b in a] if isinstance(a, list | tuple) and a and all(
            callable(b) for b in a) else a for a in args)
        kwargs = {k: _user_callable(v) for k, v in kwargs.items()}
        return fun(*args, **kwargs)
    target = converted(fun)
    if target is not fun:
        return target(*args, **kwargs)
    try:
        return fun(*args, **kwargs)
    except TracerBoolError as e:
        reason = why_unconverted(fun)
        note = f"cfgrad did not convert {getattr(fun, '__qualname__', fun)}: {reason}"
        if reason is not None and note not in getattr(e, "__notes__", ()):
            e.add_note(note)
        raise


RUNTIME.call = call


def autograph(fun: Callable) -> Callable:
    """`fun` with its `if`, `while` and `for` statements (and `and`, `or`, `not`,
    conditional expressions) converted so they work on traced values: on concrete
    values it behaves exactly as `fun`; under a transformation a traced condition makes
    a region. The transformations convert by themselves (`autograph=False` turns it
    off); this is for calling the converted function directly, or reading its source
    (`cfgrad inspect --converted`)."""
    if not callable(fun):
        raise ArgumentTypeError(f"cg.autograph: expected a function, got {type(fun).__name__}")
    return converted(fun)


def traced_as(fun: Callable, autograph: bool, caller: str) -> Callable:
    """What the transformation `caller` traces for `fun`: its converted form, or with
    `autograph=False` `fun` as written (the `autograph` argument every entry point takes);
    a `fun` that is not callable is refused here, naming `caller`."""
    require_callable(fun, caller, "the function to transform")
    return converted(fun) if autograph else fun


def converted_source(fun: Callable) -> str:
    """The Python source cfgrad runs for `fun` (converted), or why it runs `fun` as is."""
    new = converted(fun)
    target = getattr(new, "func", getattr(new, "__func__", new))  # a partial, a method
    if hasattr(target, "__cfgrad_source__"):
        return ast.unparse(target.__cfgrad_source__)
    reason = why_unconverted(fun) or "it is not a Python function of yours"
    return f"# {getattr(fun, '__qualname__', repr(fun))} is not converted: {reason}"


