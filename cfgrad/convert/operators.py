"""The runtime converted code calls: Python semantics on concrete values, regions on traced.

Each operator looks at the value that decides: a concrete condition (a Python bool, a
numpy scalar) runs the statement as Python, exactly as unconverted code would; a traced
one lowers it into the Program being built, through `cg.cond`, `cg.while_loop` and
`cg.fori_loop`. A `while` whose condition starts concrete and becomes traced (`err =
inf` before the loop, a traced `err` after one step; a `break` under a traced `if`) runs
its first iterations as Python and the rest as one loop region, which is what Python would
do with those values.

A traced `if` or loop hands its variables out as results or carries, so they must be
arrays or numbers (or pytrees of them) of one shape and dtype on every path; anything else
must be the same object on every path. Python numbers are weakly typed, as in JAX: a loop
variable that starts as `0` and becomes a float32 array in the body is a float32 carry
that starts at zero. To know those types before the loop, the body is traced once on its
own (`_Carry.initial`); that second tracing also gives loop variables first assigned in
the body (`mid` of a bisection read after the loop) a starting value: zeros, which a run
never reads unless the loop runs no iteration, where Python would raise
`UnboundLocalError`.

Python's exceptions keep their meaning where they can: a `raise` ending a branch of a
traced `if`, and Python's own check of a traced `range` step, become checks the program
makes when it runs (a `debug_callback` node that raises); what cannot be converted is a
`ConversionError` that no `except` of converted code catches (`refused`; nor, while
tracing, a `TracerBoolError`: code cfgrad could not trace), including a recursion that
ends on a traced condition (`_recursion_checked`). While the body of a
`try` with `except` clauses runs under tracing (`enter_try`), no traced `if`, loop or
check may be made, in it or in any function it calls: its handlers could not catch what
the program raises when it runs, and tracing both branches could have them catch what
Python never raises.
"""

from __future__ import annotations

import copy
import operator
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from .. import numpy as cnp
from .. import tree as treelib
from ..debug import callback
from ..errors import ConversionError, LoweringError, TracerBoolError
from ..ir import SourceLoc, TensorType, Value, type_of
from ..trace import Trace, Tracer, argument_problem, cond, fori_loop, while_loop
from ..trace_context import current_loc, current_trace, is_traced, tracing
from .rewrite import PREFIX

_TRY_NOTE = ("its handlers cannot catch errors of the traced program, which happen when it "
             "runs, not when it is traced, and cfgrad does not trace a handler in place of "
             "the code it refuses; move the control flow out of the `try` (or the call that "
             "reaches it), or the `try` outside the function being transformed")

# cfgrad's errors for code it could not trace, which no `except` of converted code
# catches while tracing (see `refused`)
_NEVER_CAUGHT = (ConversionError, TracerBoolError)


class Undefined:
    """The value of a local variable not assigned yet: any use is Python's
    `UnboundLocalError`, naming the variable."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"<undefined {self.name}>"

    def _unbound(self, *args: Any, **kwargs: Any) -> Any:
        loc = current_loc()
        raise UnboundLocalError(
            f"local variable '{self.name}' is used before it is assigned"
            f"{' at ' + str(loc) if loc else ''}")

    __getattr__ = __bool__ = __call__ = __iter__ = __len__ = __getitem__ = _unbound
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _unbound
    __truediv__ = __rtruediv__ = __pow__ = __rpow__ = __neg__ = __matmul__ = _unbound
    __lt__ = __le__ = __gt__ = __ge__ = __array__ = __float__ = __int__ = _unbound


def _where(loc: SourceLoc | None) -> str:
    return f" at {loc}" if loc else ""


def ld(value: Any) -> Any:
    """A read of a variable that may be unassigned: Python's `UnboundLocalError` if it is
    (the placeholder itself is only ever handed on as state)."""
    if isinstance(value, Undefined):
        value._unbound()
    return value


def python_test(test: Any, what: str, instead: str) -> Any:
    """The condition of a statement that must stay Python: concrete, or an error."""
    if is_traced(test):
        loc = current_loc()
        raise ConversionError(f"{what}{_where(loc)} has a traced condition, which cfgrad "
                              f"cannot convert: {instead}")
    return test


def refused() -> bool:
    """Whether the exception an `except` clause of converted code is handling is cfgrad's
    refusal of the code being traced, which the clause re-raises before running: a
    `ConversionError`, or, while a trace is being built, a `TracerBoolError` (`float(x)`
    of a traced `x`: code cfgrad could not trace), also in an exception group (`except*`).
    A handler traced in place of that code would compute a value Python never computes.
    With no trace being built, the `try` ran on concrete values and a `TracerBoolError`
    is that of a transformation called inside it, which failed there: Python's."""
    active = sys.exception()
    never = _NEVER_CAUGHT if current_trace() is not None else ConversionError
    if isinstance(active, BaseExceptionGroup):
        return active.subgroup(never) is not None
    return isinstance(active, never)


class _Tries(threading.local):
    """The `try`s with `except` clauses of converted code whose bodies this thread runs
    while tracing, innermost last, by their location. (A `try` entered on concrete values
    is not among them: a program traced inside its body also runs there, and its errors
    reach the handlers as Python's would.)"""

    def __init__(self) -> None:
        self.entered: list[SourceLoc] = []


_TRIES = _Tries()


def enter_try(line: int) -> bool:
    """The body of the `try` at `line` (of the calling converted code's file) begins:
    whether it begins while a trace is being built, in which case its `finally` calls
    `exit_try` on every way out of it. (On concrete values this is all the `try` costs.)"""
    if current_trace() is None:
        return False
    _TRIES.entered.append(SourceLoc(sys._getframe(1).f_code.co_filename, line))
    return True


def exit_try() -> None:
    _TRIES.entered.pop()


def _refuse_in_try(what: str) -> None:
    """Refuse `what`, a traced `if`, loop or check (the user's line included), while the
    body of a `try` with handlers runs under tracing, in the function of the `try` or in
    one it calls: the innermost such `try` is named."""
    if _TRIES.entered:
        raise ConversionError(f"{what} inside the `try` at {_TRIES.entered[-1]}: {_TRY_NOTE}")


def _predicate(test: Any, construct: str, loc: SourceLoc | None) -> Any:
    """The traced scalar bool standing for the truth of `test`, a traced value. (The
    operators test `is_traced` first and find the user's line only then: on concrete
    values they must cost little more than the statement they run.)"""
    _refuse_in_try(f"the {construct}{_where(loc)} depends on a traced value")
    return _truth(test, f"the condition of the {construct}{_where(loc)}")


def _truth(test: Any, what: str) -> Any:
    if test.shape != ():
        raise ConversionError(
            f"{what} is a traced array of shape {test.shape}, which has no single truth "
            "value: reduce it with cnp.any(...) or cnp.all(...), or select elementwise "
            "with cnp.where")
    return test if test.dtype == np.bool_ else test != 0


def _describe(v: Any) -> str:
    if isinstance(v, Undefined):
        return "not assigned"
    if v is None:
        return "None"
    if isinstance(v, Tracer):
        return f"a traced {v.value.type}"
    if isinstance(v, np.ndarray | np.generic):
        return f"an array {type_of(v)}"
    if isinstance(v, bool | int | float | complex):
        return f"the Python {type(v).__name__} {v!r}"
    if isinstance(v, list | tuple | dict):
        return f"a {type(v).__name__} of {len(v)} item{'s' if len(v) != 1 else ''}"
    return f"a {type(v).__name__}"


def _traceable(v: Any) -> bool:
    """Whether `v` can be a result of a traced `if` or a loop carry: a pytree with leaves,
    all of them traced values, arrays or numbers."""
    if isinstance(v, Undefined) or v is None:
        return False
    leaves = treelib.flatten(v)[0]
    return bool(leaves) and all(is_traced(x) or argument_problem(x) is None for x in leaves)


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if type(a) is not type(b) or isinstance(a, Undefined | np.ndarray):
        return False
    try:
        return bool(a == b)
    except Exception:  # an object whose == is not a truth value
        return False


def _copies(state: tuple) -> tuple:
    """`state` with lists and dicts copied: each branch or iteration traced changes its
    own (the branches of a traced `if` are all traced, one after the other)."""
    return tuple(type(v)(v) if type(v) in (list, dict) else v for v in state)


def _leaf_type(x: Any) -> TensorType:
    return x.value.type if isinstance(x, Tracer) else type_of(x)


class _Depth(threading.local):
    """How many traced `if`s and loops this thread is tracing, one inside the other."""

    def __init__(self) -> None:
        self.value = 0


_TRACED_DEPTH = _Depth()


@contextmanager
def _recursion_checked(construct: str, loc: SourceLoc | None, fn: Callable) -> Iterator[None]:
    """Around the tracing of a traced `if` or loop (`fn`, one of its generated
    functions): Python's RecursionError there is a recursion whose end depends on a
    traced value (both branches are traced, so the one that recurses always is). It
    becomes a `ConversionError` naming the innermost such construct, the one in the
    recursion, raised by the outermost, where the stack is short again."""
    _TRACED_DEPTH.value += 1
    try:
        yield
    except RecursionError as e:
        where = getattr(e, "_cfgrad_where", None)
        if where is None:
            where = e._cfgrad_where = (construct, loc, fn)  # type: ignore[attr-defined]
        if _TRACED_DEPTH.value > 1:
            raise
        raise _endless(*where) from None
    finally:
        _TRACED_DEPTH.value -= 1


def _endless(construct: str, loc: SourceLoc | None, fn: Callable) -> ConversionError:
    return ConversionError(
        f"`{_function_of(fn)}` recursed past Python's recursion limit while cfgrad "
        f"traced the {construct}{_where(loc)}, "
        "whose condition is traced: cfgrad traces both branches of such an `if` (and the "
        "body of such a loop), so a recursion that ends on a traced condition never ends "
        "when traced. Write it as a loop (a `while` on that condition, or "
        "cg.while_loop), or make the argument that ends it static (static_argnums) so "
        "that the condition is a Python value. (A recursion that ends on Python values "
        "but runs deep, some hundreds of levels, meets the limit sooner than in Python: "
        "converted code takes a few frames per level; raise sys.setrecursionlimit)")


def _function_of(fn: Callable) -> str:
    """The user's function a generated branch, loop body or thunk belongs to, by its
    qualified name (`fact.<locals>.cfg__if_true_3`, `fact.<locals>.<lambda>`: `fact`)."""
    parts = fn.__qualname__.split(".")
    if parts[-1] == "<lambda>":  # a conditional expression's thunk
        parts = parts[:-2] or parts
    while len(parts) > 2 and parts[-2] == "<locals>" and parts[-1].startswith(PREFIX):
        del parts[-2:]
    return ".".join(parts)


# ---------------------------------------------------------------------------------
# if
# ---------------------------------------------------------------------------------


def if_stmt(test: Any, true_fn: Callable, false_fn: Callable, state: tuple,
            outputs: tuple[str, ...] | None, raises: tuple[bool, bool] = (False, False),
            raise_later: bool = False) -> Any:
    """An `if`: the branches are functions of `state` returning the variables named in
    `outputs`, or, when `outputs` is None, the function's return value. A branch that
    always raises (`raises`) takes one argument more, `raise_later` (`raised`): on a
    Python condition the flag of the raising branch this `if` is in, if any."""
    if not is_traced(test):
        taken, raising = (true_fn, raises[0]) if test else (false_fn, raises[1])
        return taken(*state, raise_later) if raising else taken(*state)
    loc = current_loc()
    pred = _predicate(test, "`if`", loc)
    returns = outputs is None
    names = ("the return value",) if returns else outputs
    with _recursion_checked("`if`", loc, true_fn):
        if any(raises):
            return _raising_if(pred, (true_fn, false_fn), raises, state, returns)
        if _typing():
            joined = _typed_branches([true_fn, false_fn], state, names, loc, returns)
            return joined[0] if returns else joined
        branches = _Branches(names, loc, returns)
        result = cond(pred, lambda: branches.run(true_fn, state, "true"),
                      lambda: branches.run(false_fn, state, "false"))
    joined = branches.join(result)
    return joined[0] if returns else joined


def _raising_if(pred: Any, fns: tuple[Callable, Callable], raises: tuple[bool, bool],
                state: tuple, returns: bool) -> Any:
    """A traced `if` with a branch that always raises: that branch is a check (a `Cond`
    whose case runs it up to its `raise`, which raises there when the program runs, see
    `raised`), and the other branch, the only one after which the program goes on, runs
    after it unconditionally, as the rest of the function does. Its values are the
    `if`'s: no placeholder for the raising side, and only it is differentiated. Both
    branches raising, nothing goes on (the rewriting hands nothing on from such an `if`).
    A typing run leaves the checks out: they decide no type."""
    if not _typing():
        def case(fn: Callable, raising: bool) -> Callable[[], tuple]:
            return (lambda: _run_to_raise(fn, state)) if raising else tuple
        cond(pred, case(fns[0], raises[0]), case(fns[1], raises[1]))
    going_on = [fn for fn, raising in zip(fns, raises) if not raising]
    if going_on:
        return going_on[0](*state)
    return None if returns else ()


class _Raised(BaseException):
    """Unwinds a raising branch traced under a traced condition from its `raise`, which
    `raised` has made a check, to `_run_to_raise` (a BaseException: no `except
    Exception` of cfgrad's on the way mistakes it for a failure)."""


def _run_to_raise(fn: Callable, state: tuple) -> tuple:
    """A branch that always raises, traced up to its `raise` (on copies: its changes to
    lists and dicts are not the other branch's). A `raise` under a traced `if` of its
    own is that `if`'s check, after which the branch ends without `_Raised`."""
    try:
        fn(*_copies(state), True)
    except _Raised:
        pass
    return ()


class _Branches:
    """The two branches of one traced `if`: their static outputs (the same object on both
    sides) kept out of the `cond`, the others checked variable by variable so a mismatch
    names the variable and the line. A Python number both branches give (`acc = 0` on
    one, `acc` left 0 on the other) stays that number after the `if`, concrete."""

    def __init__(self, names: tuple[str, ...], loc: SourceLoc | None, single: bool = False):
        self.names, self.loc = names, loc
        self.single = single  # a branch returns one value, not a tuple of variables
        self.first: tuple | None = None  # the first branch's outputs, and its side
        self.second: tuple = ()
        self.side = ""

    def run(self, fn: Callable, state: tuple, side: str) -> tuple:
        out = fn(*_copies(state))
        out = (out,) if self.single else out
        if self.first is None:
            self.first, self.side = out, side
        else:
            self._check(out, side)
            self.second = out
        return tuple(v for v in out if _traceable(v))

    def _check(self, out: tuple, side: str) -> None:
        assert self.first is not None
        for name, a, b in zip(self.names, self.first, out):
            _check_branches(name, a, b, (self.side, side), self.loc, self.single, True)

    def join(self, result: tuple) -> tuple:
        assert self.first is not None
        dynamic = iter(result)
        joined = []
        for a, b in zip(self.first, self.second):
            merged = next(dynamic) if _traceable(a) else a
            joined.append(a if _python_number(a) and _same(a, b) else merged)
        return tuple(joined)


def _check_branches(name: str, a: Any, b: Any, sides: tuple[str, str], loc: SourceLoc | None,
                    single: bool, exact: bool) -> None:
    """Raise the error for variable `name`, `a` on one branch and `b` on the other, if
    they cannot be one result of a traced `if` (with `exact`, traced leaves must also
    agree in dtype; Python numbers take the other side's)."""
    if _traceable(a) and _traceable(b):
        (la, ta), (lb, tb) = treelib.flatten(a), treelib.flatten(b)
        if ta == tb and all(_leaf_type(x).shape == _leaf_type(y).shape and (
                not exact or _leaf_type(x) == _leaf_type(y) or not (
                    is_traced(x) and is_traced(y))) for x, y in zip(la, lb)):
            return
        problem = "has a different structure, shape or dtype on the two branches"
    elif not _traceable(a) and not _traceable(b) and _same(a, b):
        return
    elif isinstance(a, Undefined) or isinstance(b, Undefined):
        problem = "is assigned on one branch only"
    else:
        problem = "differs between the branches"
    what = name if single else f"`{name}`"
    hint = (f"assign {what} before the `if` (or on both branches)"
            if isinstance(a, Undefined) or isinstance(b, Undefined) else
            "only arrays and numbers (and tuples, lists and dicts of them) of one shape and "
            "dtype can differ between the branches of a traced `if`; make both branches "
            "agree (cnp.astype, cnp.broadcast_to)")
    raise ConversionError(
        f"{what} {problem} of the `if`{_where(loc)}, whose condition is traced: on the "
        f"{sides[0]} branch it is {_describe_tree(a)}, on the {sides[1]} branch "
        f"{_describe_tree(b)}; {hint}")


def _describe_tree(v: Any) -> str:
    if not _traceable(v) or treelib.flatten(v)[1].kind == "leaf":
        return _describe(v)
    leaves, td = treelib.flatten(v)
    return f"{td.describe()} of " + ", ".join(str(_leaf_type(x)) for x in leaves)


def if_exp(test: Any, true_thunk: Callable, false_thunk: Callable) -> Any:
    """`a if test else b`: a traced test is a `cg.cond` (only the taken side runs)."""
    if not is_traced(test):
        return true_thunk() if test else false_thunk()
    loc = current_loc()
    pred = _predicate(test, "conditional expression", loc)
    names = ("the value of the conditional expression",)
    with _recursion_checked("conditional expression", loc, true_thunk):
        if _typing():
            return _typed_branches([true_thunk, false_thunk], (), names, loc, True)[0]
        branches = _Branches(names, loc, single=True)
        result = cond(pred, lambda: branches.run(true_thunk, (), "true"),
                      lambda: branches.run(false_thunk, (), "false"))
    return branches.join(result)[0]


# ---------------------------------------------------------------------------------
# and, or, not, chained comparisons, assert
# ---------------------------------------------------------------------------------


def _logical(a: Any, b: Any, take_b_when: bool) -> Any:
    """`a and b` (take_b_when True) or `a or b` with a traced: Python's operand-returning
    semantics, elementwise on the truth of a scalar `a`."""
    truth = _truth(a, "an operand of `and`/`or`") if is_traced(a) else bool(a)
    if a.dtype == np.bool_ and (is_traced(b) and b.dtype == np.bool_ or isinstance(
            b, bool | np.bool_)):
        return cnp.logical_and(a, b) if take_b_when else cnp.logical_or(a, b)
    picked = truth if take_b_when else cnp.logical_not(truth)
    return cnp.where(picked, b, a)


def and_(*thunks: Callable) -> Any:
    """`a and b and …`: short-circuits on a concrete false operand, as Python does; with
    a traced operand the rest is evaluated too and combined elementwise."""
    value = thunks[0]()
    for thunk in thunks[1:]:
        if not is_traced(value) and not value:
            return value
        nxt = thunk()
        value = _logical(value, nxt, True) if is_traced(value) else nxt
    return value


def or_(*thunks: Callable) -> Any:
    value = thunks[0]()
    for thunk in thunks[1:]:
        if not is_traced(value) and value:
            return value
        nxt = thunk()
        value = _logical(value, nxt, False) if is_traced(value) else nxt
    return value


def not_(x: Any) -> Any:
    if is_traced(x):
        return cnp.logical_not(_truth(x, "the operand of `not`"))
    return not x


_COMPARISONS: dict[str, Callable[[Any, Any], Any]] = {
    "Eq": operator.eq, "NotEq": operator.ne, "Lt": operator.lt, "LtE": operator.le,
    "Gt": operator.gt, "GtE": operator.ge, "Is": operator.is_, "IsNot": operator.is_not,
    "In": lambda a, b: a in b, "NotIn": lambda a, b: a not in b,
}


def chain(left: Any, *ops_and_thunks: Any) -> Any:
    """`a < b < c`: `a < b and b < c` with `b` evaluated once."""
    thunks = []
    for op, thunk in zip(ops_and_thunks[::2], ops_and_thunks[1::2]):
        def compare(op: str = op, thunk: Callable = thunk) -> Any:
            nonlocal left
            right = thunk()
            result, left = _COMPARISONS[op](left, right), right
            return result
        thunks.append(compare)
    return and_(*thunks)


def extreme(largest: bool, values: Any) -> Any:
    """Python's `max(a, b, …)` / `min(…)` (or of one list or tuple) with a traced value
    among them: the first one wins a tie, as in Python (`cnp.where` on a strict
    comparison, so a tie's gradient goes to the earlier value)."""
    if not values:
        raise ValueError(f"{'max' if largest else 'min'}() arg is an empty sequence")
    best = values[0]
    for v in values[1:]:
        best = cnp.where(v > best if largest else v < best, v, best)
    return best


_NO_CAUSE = object()  # `raise e` (not `raise e from c`)


def raised(raise_later: bool, exception: Any, cause: Any = _NO_CAUSE) -> BaseException:
    """The exception of a `raise` at the top level of a branch that always raises
    (`raise exception from cause`), made an instance as Python's `raise` makes it. When
    that branch is traced under a traced condition (`raise_later`), the exception becomes
    a check of the program where the branch's case runs (a fresh copy raised each time
    it runs, from the call that runs it) and the tracing of the branch ends; otherwise
    it is handed back, for the `raise` statement to raise now."""
    exception = _instance(exception, "exceptions must derive from BaseException")
    if cause is not _NO_CAUSE:
        # setting __cause__ also suppresses the context, as `raise ... from` does
        exception.__cause__ = None if cause is None else _instance(
            cause, "exception causes must derive from BaseException")
    if raise_later:
        callback(_RaiseWhenRun(exception))
        raise _Raised
    return exception


def reraise(raise_later: bool) -> None:
    """A bare `raise` at the top level of a branch that always raises: while the branch
    is traced under a traced condition, the exception being handled (Python's
    RuntimeError without one) becomes the check; otherwise the `raise` re-raises it."""
    if raise_later:
        active = sys.exception()
        raised(True, active if active is not None else RuntimeError(
            "No active exception to reraise"))


def _instance(exception: Any, refusal: str) -> BaseException:
    """`exception`, or an instance of it if it is an exception class (Python's rule)."""
    if isinstance(exception, type) and issubclass(exception, BaseException):
        made = exception()
        if not isinstance(made, BaseException):
            raise TypeError(f"calling {exception!r} should have returned an instance of "
                            f"BaseException, not {type(made).__name__}")
        return made
    if not isinstance(exception, BaseException):
        raise TypeError(refusal)
    return exception


class _RaiseWhenRun:
    """The callback a `raise` under a traced condition becomes: raises a copy of the
    exception the branch made when it was traced (each run its own, so notes and
    tracebacks do not pile up on one object), or the exception itself where it cannot
    be copied (an `__init__` whose arguments are not its `args`)."""

    def __init__(self, exception: BaseException):
        self.exception = exception
        self.__name__ = f"raise {type(exception).__name__}"  # the node's text

    def __call__(self) -> None:
        raise self._fresh()

    def _fresh(self) -> BaseException:
        template = self.exception
        try:
            fresh = copy.copy(template)
        except Exception:  # any failure of the class's own constructor
            return template.with_traceback(None)
        fresh.__cause__, fresh.__suppress_context__ = (template.__cause__,
                                                      template.__suppress_context__)
        if hasattr(template, "__notes__"):
            fresh.__notes__ = list(template.__notes__)
        return fresh


def assert_(test: Any, message: Callable | None) -> None:
    """`assert test, message`: as Python on a concrete test; on a traced one a check the
    program makes when it runs (an `AssertionError` from the call that runs it)."""
    if not is_traced(test):
        assert test, message() if message is not None else None
        return
    loc = current_loc()
    _refuse_in_try(f"the `assert`{_where(loc)} has a traced condition")
    truth = _truth(test, f"the condition of the `assert`{_where(loc)}")
    text = message() if message is not None else None

    def check(ok: Any) -> None:
        if not bool(ok):
            raise AssertionError(text if text is not None else f"assertion failed{_where(loc)}")

    callback(check, truth)


# ---------------------------------------------------------------------------------
# loops
# ---------------------------------------------------------------------------------


# -- the typing run -------------------------------------------------------------------
#
# Before a traced loop is lowered, its body is traced once on a throwaway `_TypeTrace` to
# learn the types of its variables. A Python number there is weakly typed, as in JAX: it
# stands as a tracer of the narrowest dtype of its kind (below), so numpy's promotion
# gives what it would give the number (0.0 + a float32 row is float32; 0 + a float is a
# float), and a result still of that dtype is still a weak number. Inside the typing run
# a traced `if` runs both branches and joins their types, and a loop only settles its
# variables' types, so no region is built and weak numbers never meet a strong carry.
# (A user's own float16 or int8 values there look weak: they settle to float64/int64.)

_WEAK_DTYPES = {bool: np.dtype(np.bool_), int: np.dtype(np.int8),
                float: np.dtype(np.float16), complex: np.dtype(np.complex64)}
_WEAK_DEFAULTS = {np.dtype(np.int8): np.dtype(np.int64),
                  np.dtype(np.float16): np.dtype(np.float64),
                  np.dtype(np.complex64): np.dtype(np.complex128)}


class _TypeTrace(Trace):
    """A trace made only to learn the types a loop body gives its variables."""

    def __init__(self, weak: bool):
        super().__init__("loop body (types)", capture=True)
        self.weak = weak  # Python numbers as weak tracers (else as their default dtype)


def _typing() -> bool:
    return isinstance(current_trace(), _TypeTrace)


def _weak_tracer(v: Any) -> bool:
    return isinstance(v, Tracer) and _typing() and v.dtype in _WEAK_DEFAULTS


def _python_number(v: Any) -> bool:
    """A Python number, weakly typed (not numpy's scalars: `np.float64` subclasses
    `float` but has its dtype, as numpy's promotion rules say)."""
    return type(v) in _WEAK_DTYPES


def _weak(v: Any) -> bool:
    """A weakly typed number: a Python number, or its stand-in in a typing run."""
    return _python_number(v) or _weak_tracer(v)


def _weak_type(x: Any) -> TensorType:
    """`x`'s type in a typing run: a Python number as the narrowest dtype of its kind."""
    trace = current_trace()
    if _python_number(x) and getattr(trace, "weak", False):
        return TensorType((), _WEAK_DTYPES[type(x)])
    return _leaf_type(x)


def _stand_in(v: Any, type_of_leaf: Callable[[Any], TensorType] = _weak_type) -> Any:
    """`v` (a pytree of arrays, numbers, tracers) as fresh tracers of the typing run
    being built, of its leaves' types (a Python number's weak one, by default)."""
    leaves, td = treelib.flatten(v)
    trace = current_trace()
    return treelib.unflatten(td, [trace.tracer(Value(type_of_leaf(x))) for x in leaves])


def _typed_branches(fns: list[Callable], state: tuple, names: tuple[str, ...],
                    loc: SourceLoc | None, single: bool) -> tuple:
    """A traced `if` in a typing run: every branch runs; each variable gets a fresh
    tracer of the type its values join to (numpy's promotion, weak numbers included)."""
    outs = [fn(*_copies(state)) for fn in fns]
    outs = [(o,) for o in outs] if single else outs
    trace = current_trace()
    joined = []
    for i, name in enumerate(names):
        values = [o[i] for o in outs]
        for b in values[1:]:
            _check_branches(name, values[0], b, ("true", "false"), loc, single, False)
        if not _traceable(values[0]):
            joined.append(values[0])
            continue
        columns = zip(*(treelib.flatten(v)[0] for v in values))
        types = [[_weak_type(x) for x in column] for column in columns]
        leaves = [trace.tracer(Value(TensorType(ts[0].shape, np.result_type(
            *(t.dtype for t in ts))))) for ts in types]
        joined.append(treelib.unflatten(treelib.flatten(values[0])[1], leaves))
    return tuple(joined)


class _Carry:
    """The variables of one traced loop: the carries (traced values, arrays, numbers)
    and the statics (anything else, which the body must leave as it found them)."""

    def __init__(self, names: tuple[str, ...], state: tuple, loc: SourceLoc | None,
                 what: str):
        self.names, self.loc, self.what = names, loc, what
        self.statics = {i: v for i, v in enumerate(state)
                        if not _traceable(v) and not isinstance(v, Undefined)}
        self.state = list(state)

    def carried(self) -> list[int]:
        return [i for i in range(len(self.names)) if i not in self.statics]

    def initial(self, step: Callable[[tuple], tuple]) -> tuple:
        """The carries' starting values, with the types the body gives them: a Python
        number takes the dtype (and shape) the body computes; a variable first assigned
        in the body starts at zeros of its type. Found by tracing `step` (state -> state)
        on its own, until the types settle."""
        for _ in range(4):
            loose = [i for i in self.carried()
                     if isinstance(self.state[i], Undefined) or _weak(self.state[i])]
            if not loose:
                break
            try:
                outputs, weak = self._typed(step, weak=True), True
            except ConversionError:
                raise
            except (LoweringError, TypeError):  # a primitive refusing a weak stand-in
                outputs, weak = self._typed(step, weak=False), False  # (float16 in linalg)
            changed = False
            for i in loose:
                if _python_number(self.state[i]) and _same(self.state[i], outputs[i]):
                    # the body sets it to the very number it starts as (`acc = 0`): it
                    # stays that number, concrete, whatever the loop does
                    self.statics[i] = self.state[i]
                    continue
                new = self._settled(self.state[i], outputs[i], weak)
                if new is not None:
                    self.state[i], changed = new, True
            if not changed:
                break
        for i in self.carried():
            if isinstance(self.state[i], Undefined):
                self.statics[i] = self.state[i]  # never assigned a value in the body
        return tuple(self.state[i] for i in self.carried())

    def _typed(self, step: Callable[[tuple], tuple], weak: bool) -> tuple:
        """One iteration's state, traced on its own from the current starting types."""
        with tracing(_TypeTrace(weak)):
            return step(tuple(v if i in self.statics or isinstance(v, Undefined) else
                              _stand_in(v) for i, v in enumerate(self.state)))

    @staticmethod
    def _settled(before: Any, after: Any, weak: bool) -> Any:
        """The starting value `before` (a weak number, or not assigned yet) becomes, given
        what one iteration makes of it; None when it stays as it is."""
        if not _traceable(after):
            return None
        leaves, td = treelib.flatten(after)
        types = [_leaf_type(x) for x in leaves]
        if weak and td.kind == "leaf" and types[0].shape == () and (
                _weak_tracer(after) or _python_number(after)):
            # still a weak number: stays one, of the kind both make (0 then 0.5: a float;
            # 0.5 then 0: a float too, which a loop of no iteration leaves at 0.5)
            both = types[0].dtype if isinstance(before, Undefined) else np.result_type(
                types[0].dtype, _weak_type(before).dtype)
            kind = _PYTHON_KIND[both.kind]
            if isinstance(before, Undefined):
                return kind(0)
            if isinstance(before, Tracer):  # a weak stand-in of an enclosing typing run
                same = before.dtype == _WEAK_DTYPES[kind]
                return None if same else current_trace().tracer(Value(TensorType(
                    (), _WEAK_DTYPES[kind])))
            return None if type(before) is kind else kind(before)
        types = [TensorType(t.shape, _WEAK_DEFAULTS.get(t.dtype, t.dtype)) if weak else t
                 for t in types]
        if isinstance(before, Undefined):
            return treelib.unflatten(td, [_zeros(t) for t in types])
        if td.kind != "leaf":
            return None  # a number became a pytree: the check after tracing says so
        # the number's kind may be wider than the body's dtype (0.5 before a body that
        # sets an int): the carry takes both (float), as numpy promotes a Python number
        t = TensorType(types[0].shape, np.result_type(types[0].dtype, before if not isinstance(
            before, Tracer) else before.dtype))
        if isinstance(before, Tracer):  # a weak stand-in of an enclosing typing run
            return current_trace().tracer(Value(t))
        if t == type_of(before):
            return None
        try:
            return np.broadcast_to(np.asarray(before, t.dtype), t.shape).copy()
        except ValueError:
            return None  # the body changes its shape: the check after tracing says so

    def after_typing_run(self, init: tuple) -> tuple:
        """The state after the loop in a typing run: its variables' types, settled."""
        return self.split(tuple(v if _weak(v) else _stand_in(v, _leaf_type) for v in init))

    def split(self, carries: tuple) -> tuple:
        """The full state from the carries (statics put back)."""
        values = iter(carries)
        return tuple(self.statics[i] if i in self.statics else next(values)
                     for i in range(len(self.names)))

    def join(self, state: tuple, before: tuple) -> tuple:
        """The carries of `state`, the state after one iteration, checked against
        `before`, the state it started from, variable by variable."""
        for i, name in enumerate(self.names):
            a, b = before[i], state[i]
            if i in self.statics:
                if not _same(a, b):
                    raise self._changed(name, a, b, "changes")
                continue
            if not _traceable(b):
                raise self._changed(name, a, b, "changes")
            la, ta = treelib.flatten(a)
            lb, tb = treelib.flatten(b)
            if ta != tb or any(_leaf_type(x).shape != _leaf_type(y).shape or (
                    _leaf_type(x).dtype != _leaf_type(y).dtype and not _weak(y)
                    and not _widens(_leaf_type(y).dtype, _leaf_type(x).dtype))
                    for x, y in zip(la, lb)):
                raise self._changed(name, a, b, "changes the shape or dtype of")
            state = state[:i] + (treelib.unflatten(tb, [
                cnp.astype(y, _leaf_type(x).dtype) if is_traced(y) and _widens(
                    _leaf_type(y).dtype, _leaf_type(x).dtype) else y
                for x, y in zip(la, lb)]),) + state[i + 1:]
        return tuple(state[i] for i in self.carried())

    def _changed(self, name: str, a: Any, b: Any, verb: str) -> ConversionError:
        hint = ("a variable of a traced loop keeps its shape and dtype (JAX's rule for "
                "loop carries): give it its final shape and dtype before the loop "
                "(cnp.zeros(shape, dtype), x.astype(...)), or collect per-iteration values "
                "with cg.scan or x.at[i].set(...)")
        if not _traceable(a) or not _traceable(b):
            hint = ("only arrays and numbers (and tuples, lists and dicts of them) can "
                    "change from one iteration of a traced loop to the next; a Python "
                    "list that grows is the usual case: preallocate an array and write "
                    "x = x.at[i].set(v), or use cg.scan")
        return ConversionError(
            f"the {self.what}{_where(self.loc)} {verb} `{name}`: before an iteration it is "
            f"{_describe_tree(a)}, after it {_describe_tree(b)}; {hint}")


def _widens(new: np.dtype, carry: np.dtype) -> bool:
    """Whether a body's value of dtype `new` joins a carry of dtype `carry` by a cast
    that keeps every value: a bool or an integer into a float (a carry that started as
    0.5 and an iteration that sets an int), as Python's numbers would. Floats of another
    precision do not: that is JAX's carry error, and usually a bug."""
    return (new.kind in "biu" and carry.kind in "fc" or new.kind == "b" and carry.kind in "iu"
            ) and np.can_cast(new, carry, "safe")


def _zeros(t: TensorType) -> Any:
    """Zeros of type `t`, as a tracer of the typing run when one is being built (its
    values feed only types) and as an array otherwise."""
    if _typing():
        return current_trace().tracer(Value(t))
    return np.zeros(t.shape, t.dtype)


_PYTHON_KIND: dict[str, type] = {"b": bool, "i": int, "u": int, "f": float, "c": complex}


def while_stmt(test_fn: Callable, body_fn: Callable, state: tuple, names: tuple[str, ...]
               ) -> tuple:
    """A `while`: Python iterations while the condition is concrete; from the first
    traced one, a `cg.while_loop` over the variables in `names`."""
    while True:
        test = test_fn(*state)
        if is_traced(test):
            loc = current_loc()
            pred = _predicate(test, "`while` loop", loc)
            with _recursion_checked("`while` loop", loc, body_fn):
                return _traced_while(test_fn, body_fn, state, names, pred, loc)
        if not test:
            return state
        state = body_fn(*state)


def _loop_predicate(test: Any, loc: SourceLoc | None) -> Any:
    if is_traced(test):
        return _truth(test, f"the condition of the loop{_where(loc)}")
    return np.bool_(bool(test))


def _traced_while(test_fn: Callable, body_fn: Callable, state: tuple,
                  names: tuple[str, ...], pred: Any, loc: SourceLoc | None) -> tuple:
    carry = _Carry(names, state, loc, "`while` loop")
    init = carry.initial(lambda s: body_fn(*_copies(s)))
    if _typing():
        return carry.after_typing_run(init)

    def body(c: tuple) -> tuple:
        before = carry.split(c[0])
        after = body_fn(*_copies(before))
        return carry.join(after, before), _loop_predicate(test_fn(*after), loc)

    out, _ = while_loop(lambda c: c[1], body, (init, pred))
    return carry.split(out)


class TracedIteration:
    """What a `for` over traced values iterates: a length (an int or a traced int) and
    the item at a (traced) position."""

    def __init__(self, length: Any, item: Callable[[Any], Any], what: str):
        self.length, self.item, self.what = length, item, what

    def __iter__(self) -> Any:
        loc = current_loc()
        raise LoweringError(
            f"{self.what}{_where(loc)} has traced values and can only be iterated by a "
            "`for` statement of a function cfgrad converts")


def traced_range(*args: Any) -> TracedIteration:
    """`range(...)` with a traced bound: its trip count max(0, ceil((stop-start)/step))."""
    if not 1 <= len(args) <= 3:
        raise TypeError(f"range expected 1 to 3 arguments, got {len(args)}")
    start, stop, step = (0, args[0], 1) if len(args) == 1 else (*args, 1)[:3]
    for name, v in (("start", start), ("stop", stop), ("step", step)):
        if is_traced(v) and (v.shape != () or v.dtype.kind not in "iu"):
            raise TypeError(f"range() {name} must be an integer scalar, got {_describe(v)}")
        if not is_traced(v):
            operator.index(v)  # Python's TypeError for a float or an array
    if is_traced(step):  # Python's check, made when the program runs
        callback(_nonzero_step, step)
    else:
        _nonzero_step(step)
    length = cnp.maximum(-((start - stop) // step), 0)
    return TracedIteration(length, lambda k: start + k * step, "range()")


def _nonzero_step(step: Any) -> None:
    """Python's check of a `range` step, ValueError for zero (made when the program runs
    for a traced one, where the trip count's floor division would make no iteration)."""
    if step == 0:
        raise ValueError("range() arg 3 must not be zero")


def traced_iterable(x: Any) -> bool:
    """Whether a converted `for` over `x` is a loop region (`x` is traced values)."""
    return is_traced(x) or isinstance(x, TracedIteration)


def _as_iteration(x: Any) -> TracedIteration:
    if isinstance(x, TracedIteration):
        return x
    if is_traced(x):
        if x.shape == ():
            raise TypeError("iteration over a 0-d traced array")
        return TracedIteration(x.shape[0], lambda k: x[k], "a traced array")
    a = cnp.asarray(x)
    if np.ndim(a) == 0:
        raise TypeError(f"iteration over {_describe(x)}")
    return TracedIteration(np.shape(a)[0], lambda k: a[k], "an array")


def traced_enumerate(x: Any, start: Any = 0) -> TracedIteration:
    it = _as_iteration(x)
    return TracedIteration(it.length, lambda k: (start + k, it.item(k)), "enumerate()")


def traced_zip(*xs: Any) -> TracedIteration:
    its = [_as_iteration(x) for x in xs]
    lengths = [it.length for it in its]
    length = lengths[0]
    for n in lengths[1:]:
        length = cnp.minimum(length, n) if is_traced(length) or is_traced(n) else min(
            length, n)
    return TracedIteration(length, lambda k: tuple(it.item(k) for it in its), "zip()")


def for_stmt(iterable: Any, test_fn: Callable | None, body_fn: Callable, state: tuple,
             names: tuple[str, ...]) -> tuple:
    """A `for`: over traced values (a traced array's rows, `range` with a traced bound,
    their `enumerate` and `zip`) a loop region; over anything else Python iterations. A
    `break` (`test_fn`, false once the loop should stop) that becomes traced in a `range`
    loop turns the remaining iterations into one region."""
    if traced_iterable(iterable):
        loc = current_loc()
        _refuse_in_try(f"the `for` loop{_where(loc)} iterates over traced values")
        with _recursion_checked("`for` loop", loc, body_fn):
            return _traced_for(_as_iteration(iterable), test_fn, body_fn, state, names, loc)
    iterator = iter(iterable)
    position = 0
    while True:
        if test_fn is not None:
            test = test_fn(*state)
            if is_traced(test):
                loc = current_loc()
                pred = _predicate(test, "`for` loop's `break`", loc)
                if isinstance(iterable, range):
                    with _recursion_checked("`for` loop", loc, body_fn):
                        return _traced_for(_rest_of(iterable[position:]), test_fn, body_fn,
                                           state, names, loc, pred)
                raise ConversionError(
                    f"the `for` loop{_where(loc)} iterates over a Python "
                    f"{type(iterable).__name__} and leaves it with `break` or `return` "
                    "under a traced condition; cfgrad can make a loop region only of a "
                    "`range` or an array: iterate over `range(len(...))` or over "
                    "cnp.asarray(...) instead")
            if not test:
                return state
        try:
            item = next(iterator)
        except StopIteration:
            return state
        state = body_fn(*state, item)
        position += 1


def _rest_of(rest: range) -> TracedIteration:
    return TracedIteration(len(rest), lambda k: rest.start + k * rest.step, "range()")


def _traced_for(it: TracedIteration, test_fn: Callable | None, body_fn: Callable,
                state: tuple, names: tuple[str, ...], loc: SourceLoc | None,
                pred: Any = None) -> tuple:
    carry = _Carry(names, state, loc, "`for` loop")
    # the typing run's item is at a traced position: a concrete one could make the body
    # take a path of its own (`range(i)` empty at i = 0)
    init = carry.initial(lambda s: body_fn(*_copies(s), it.item(
        current_trace().tracer(Value(TensorType((), np.dtype(np.int64)))))))
    if _typing():
        return carry.after_typing_run(init)
    if test_fn is None:
        def fori_body(k: Any, c: tuple) -> tuple:
            before = carry.split(c)
            return carry.join(body_fn(*_copies(before), it.item(k)), before)

        return carry.split(fori_loop(0, it.length, fori_body, init))

    def body(c: tuple) -> tuple:
        k, carries, _ = c
        before = carry.split(carries)
        after = body_fn(*_copies(before), it.item(k))
        more = _loop_predicate(test_fn(*after), loc)
        return k + 1, carry.join(after, before), cnp.logical_and(k + 1 < it.length, more)

    if pred is None:
        pred = _loop_predicate(test_fn(*state), loc)
    start = cnp.logical_and(0 < it.length, pred) if is_traced(it.length) or is_traced(
        pred) else pred and it.length > 0
    _, out, _ = while_loop(lambda c: c[2], body, (np.int64(0), init, start))
    return carry.split(out)
