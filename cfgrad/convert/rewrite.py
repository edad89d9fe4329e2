"""The source rewriting: a function's `ast` in, the same function calling the runtime out.

Three steps, in order, on a copy of the function's node:

1. **Jumps become flags** (`_Jumps`). `break` sets a flag the loop's condition reads,
   `continue` a flag reset at each iteration; the statements after a jump run under
   `if not flag:`. A `return` inside a loop records which return it was and breaks out
   of every enclosing loop; after the outermost one, `if ret == k: return e_k` evaluates
   the expression on the state the loop stopped in, which is the state it was written
   in, since nothing runs between the jump and the loop's exit (but the exit of a `with`
   or `try` around the `return`: there the value is computed where it stands).
2. **Returns leave from the end** (`lower_returns`). The statements after an `if` that
   returns on some path move into its branches that do not (as one function both call,
   when both need them), so every `return` is the last statement of its path: a traced
   `if` then yields the function's result.
3. **Control flow becomes calls** (`Functionalize`). Each `if`, `while` and `for` becomes
   nested functions of the variables it assigns (the scope analysis says which, and which
   of them are read afterwards) and a call of `operators.if_stmt` / `while_stmt` /
   `for_stmt`, which runs them as Python or lowers them into regions; `and`, `or`, `not`,
   conditional expressions, chained comparisons and `assert` become calls too, and every
   call goes through `operators`' `call`, which converts the user functions it reaches.
   A branch that always raises takes a flag saying whether it is traced under a traced
   condition, and the `raise`s at its top level ask `operators.raised` for their
   exception, which makes it a run-time check then. Every `except` clause first re-raises
   cfgrad's refusal of the code (`operators.refused`): it must reach the user, not have a
   handler traced in place of the refused code; and the body of a `try` with `except`
   clauses runs between `operators.enter_try` and `exit_try` (in a `finally`), so that
   traced control flow it reaches, in any function, is refused.

Generated nodes take the location of the statement they replace, so tracebacks, source
locations in Programs and the errors of the runtime name the user's lines. AutoGraph
(Moldovan et al., "AutoGraph: Imperative-style Coding with Graph-based Performance",
SysML 2019) and Tangent take the same route; these are the semantics, not their code.
"""

from __future__ import annotations

import ast
import copy
import types
from collections.abc import Iterable

from ..errors import Unconvertible
from .scopes import (
    BREAK_FLAG,
    FUNCTION_SCOPES,
    LIVE_AT_HEADER,
    LIVE_OUT,
    annotate,
    assigned,
    declared_outside,
    target_names,
)

OPS = "cfg__ops"  # the name converted code calls the runtime by (a closure cell)
PREFIX = "cfg__"  # the prefix of every name the conversion makes up
# the last parameter of a branch that always raises: true while it is traced under a
# traced condition, where its `raise` becomes a check of the program (`operators.raised`)
RAISE_LATER = f"{PREFIX}raise_later"

# calls that read the calling frame: wrapping them in `call` would change what they see
_FRAME_CALLS = frozenset({"super", "locals", "globals", "vars", "eval", "exec", "dir"})


def locate(node: ast.AST, at: ast.AST) -> ast.AST:
    """`node` placed on the first line of `at` (one line: Python 3.11 places a method
    call at the end line of its callee, which for a whole `if` is its last line)."""
    if hasattr(at, "lineno"):  # a node made up here has none: its parent's is used
        node.lineno = node.end_lineno = at.lineno
        node.col_offset = node.end_col_offset = at.col_offset
    return node


def _ops(attr: str) -> ast.Attribute:
    return ast.Attribute(ast.Name(OPS, ast.Load()), attr, ast.Load())


def _name(id_: str, store: bool = False) -> ast.Name:
    return ast.Name(id_, ast.Store() if store else ast.Load())


def _assign(id_: str, value: ast.expr) -> ast.Assign:
    return ast.Assign([_name(id_, True)], value)


def _const(value: object) -> ast.Constant:
    return ast.Constant(value)


def _thunk(expr: ast.expr) -> ast.Lambda:
    return ast.Lambda(ast.arguments([], [], None, [], [], None, []), expr)


def _own_nodes(stmts: Iterable[ast.AST]) -> Iterable[ast.AST]:
    """The nodes of `stmts` at the function's own scope: a nested function, lambda or
    class is one of them, what is inside it is not."""
    stack = list(stmts)
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, FUNCTION_SCOPES):
            stack.extend(ast.iter_child_nodes(node))


def _contains(stmts: Iterable[ast.AST], kinds: type | tuple[type, ...],
              into_loops: bool = True) -> bool:
    stack = list(stmts)
    while stack:
        node = stack.pop()
        if isinstance(node, kinds):
            return True
        for child in ast.iter_child_nodes(node):
            if isinstance(child, FUNCTION_SCOPES):
                continue
            if not into_loops and isinstance(child, ast.While | ast.For | ast.AsyncFor):
                continue
            stack.append(child)
    return False


def _not_any(flags: list[str]) -> ast.expr:
    tests = [ast.UnaryOp(ast.Not(), _name(f)) for f in flags]
    return tests[0] if len(tests) == 1 else ast.BoolOp(ast.And(), tests)


# ---------------------------------------------------------------------------------
# 1. jumps become flags
# ---------------------------------------------------------------------------------


class _Loop:
    """What a loop being lowered learnt about its body: a return inside it."""

    def __init__(self) -> None:
        self.returns = False


class _Jumps:
    """Lowers `break`, `continue` and `return` inside loops of one function."""

    def __init__(self) -> None:
        self.count = 0
        # the expression of the k-th `return` inside a loop (from 1), evaluated after the
        # loops on the state the jump left; or None for one inside a `with` or `try`,
        # whose value is computed where it stands (in `retval`), before they exit
        self.returns: list[ast.expr | None] = []
        self.ret = f"{PREFIX}return_at"
        self.retval = f"{PREFIX}retval"

    def fresh(self, what: str) -> str:
        self.count += 1
        return f"{PREFIX}{what}{self.count}"

    def block(self, stmts: list[ast.stmt], loop: _Loop | None,
              held: bool = False) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for stmt in stmts:
            out.extend(self.statement(stmt, loop, held))
        return out

    def statement(self, stmt: ast.stmt, loop: _Loop | None, held: bool) -> list[ast.stmt]:
        """`held`: inside a `with` or `try` within the innermost loop."""
        if isinstance(stmt, ast.While | ast.For):
            return self.loop(stmt, loop)
        if isinstance(stmt, ast.AsyncFor):
            raise Unconvertible(f"async for at line {stmt.lineno}")
        if isinstance(stmt, ast.Return) and loop is not None:
            loop.returns = True
            value = stmt.value or _const(None)
            self.returns.append(None if held else value)
            mark = [locate(_assign(self.ret, _const(len(self.returns))), stmt),
                    locate(ast.Break(), stmt)]
            return ([locate(_assign(self.retval, value), stmt)] if held else []) + mark
        inner_held = held or isinstance(stmt, ast.With | ast.AsyncWith | ast.Try | ast.TryStar)
        for block in _blocks(stmt):
            block[:] = self.block(block, loop, inner_held and loop is not None)
        return [stmt]

    def loop(self, stmt: ast.While | ast.For, outer: _Loop | None) -> list[ast.stmt]:
        if isinstance(stmt, ast.While) and _contains([stmt.test], ast.NamedExpr):
            # `while (y := f()) > 0:` as `while True: if not ...: break`, so that `:=`
            # binds in the loop's body (the converted condition is a function of its own);
            # an `else` runs where the condition ends the loop
            if _contains(stmt.orelse, (ast.Break, ast.Continue), into_loops=False):
                raise Unconvertible(f"the `while` at line {stmt.lineno} has `:=` in its "
                                    "condition and `break`/`continue` in its `else`")
            stmt.body = [locate(ast.If(ast.UnaryOp(ast.Not(), stmt.test), stmt.orelse + [
                locate(ast.Break(), stmt)], []), stmt)] + stmt.body
            stmt.test, stmt.orelse = locate(ast.Constant(True), stmt), []
        inner = _Loop()
        first_return = len(self.returns)
        # `while True:` left by `return` alone: after it, nothing runs but the returns
        endless = (isinstance(stmt, ast.While) and isinstance(stmt.test, ast.Constant)
                   and bool(stmt.test.value) and not stmt.orelse
                   and not _contains(stmt.body, ast.Break, into_loops=False))
        body = self.block(stmt.body, inner)
        orelse = self.block(stmt.orelse, outer)
        before: list[ast.stmt] = []
        after: list[ast.stmt] = []
        broken = _contains(body, ast.Break, into_loops=False)
        continued = _contains(body, ast.Continue, into_loops=False)
        brk = self.fresh("break") if broken else None
        cont = self.fresh("continue") if continued else None
        if brk:
            before.append(_assign(brk, _const(False)))
        body = _guard(body, brk, cont)
        if cont:
            body.insert(0, _assign(cont, _const(False)))
        stmt.body = body or [ast.Pass()]
        stmt.orelse = []
        if brk and isinstance(stmt, ast.While):
            stmt.test = ast.BoolOp(ast.And(), [ast.UnaryOp(ast.Not(), _name(brk)), stmt.test])
        elif brk:
            setattr(stmt, BREAK_FLAG, brk)
        if orelse:
            after.extend([ast.If(ast.UnaryOp(ast.Not(), _name(brk)), orelse, [])]
                         if brk else orelse)
        if inner.returns:  # leave the enclosing loops too, then return
            if outer is not None:
                outer.returns = True
                after.append(ast.Break() if endless else ast.If(
                    ast.Compare(_name(self.ret), [ast.NotEq()], [_const(0)]), [ast.Break()], []))
            else:
                after.extend(self.dispatch(first_return, endless))
        for node in before + after:
            locate(node, stmt)
        return before + [stmt] + after

    def dispatch(self, first: int, endless: bool) -> list[ast.stmt]:
        """`if ret == k: return e_k / elif …` after an outermost loop, for the returns
        inside it (from `first`); after an endless loop the last one needs no test."""
        chain: list[ast.stmt] = []
        for k in range(len(self.returns), first, -1):
            expression = self.returns[k - 1]
            value = copy.deepcopy(expression) if expression else _name(self.retval)
            ret = locate(ast.Return(value), expression or value)
            if endless and not chain:
                chain = [ret]
                continue
            test = ast.Compare(_name(self.ret), [ast.Eq()], [_const(k)])
            chain = [locate(ast.If(test, [ret], chain), ret)]
        return chain


def _blocks(stmt: ast.stmt) -> list[list[ast.stmt]]:
    """The statement lists of an `if`, `with`, `try` or `match` (not of loops or
    functions)."""
    if isinstance(stmt, ast.If):
        return [stmt.body, stmt.orelse]
    if isinstance(stmt, ast.With | ast.AsyncWith):
        return [stmt.body]
    if isinstance(stmt, ast.Try | ast.TryStar):
        return [stmt.body, *(h.body for h in stmt.handlers), stmt.orelse, stmt.finalbody]
    if isinstance(stmt, ast.Match):
        return [case.body for case in stmt.cases]
    return []


def _guard(stmts: list[ast.stmt], brk: str | None, cont: str | None) -> list[ast.stmt]:
    """`stmts` with their `break`/`continue` (of this loop) as flag assignments, and what
    follows a statement that may jump under `if not flag:`."""
    out: list[ast.stmt] = []
    for i, stmt in enumerate(stmts):
        if isinstance(stmt, ast.Break | ast.Continue):
            flag = brk if isinstance(stmt, ast.Break) else cont
            out.append(locate(_assign(flag, _const(True)), stmt))
            return out  # the rest of the block is unreachable
        flags = [] if isinstance(stmt, ast.While | ast.For) else [
            f for f, kind in ((brk, ast.Break), (cont, ast.Continue))
            if f and _contains([stmt], kind, into_loops=False)]
        jumped_in_try = [f for f, kind in ((brk, ast.Break), (cont, ast.Continue))
                         if f and isinstance(stmt, ast.Try | ast.TryStar)
                         and _contains(stmt.body, kind, into_loops=False)]
        for block in _blocks(stmt):
            block[:] = _guard(block, brk, cont)
        if jumped_in_try and stmt.orelse:  # a jump out of the body skips the `else`
            stmt.orelse = [locate(ast.If(_not_any(jumped_in_try), stmt.orelse, []),
                                  stmt.orelse[0])]
        for block in [getattr(stmt, "body", None), *(
                case.body for case in getattr(stmt, "cases", ()))]:
            if block is not None and not block:  # emptied by a jump: still a statement
                block.append(ast.Pass())
        out.append(stmt)
        if flags:
            rest = _guard(stmts[i + 1:], brk, cont)
            if rest:
                out.append(locate(ast.If(_not_any(flags), rest, []), stmts[i + 1]))
            return out
    return out


# ---------------------------------------------------------------------------------
# 2. returns leave from the end
# ---------------------------------------------------------------------------------


def always_returns(stmts: list[ast.stmt]) -> bool:
    """Whether every path through `stmts` ends in `return` or `raise`."""
    for stmt in stmts:
        if isinstance(stmt, ast.Return | ast.Raise):
            return True
        if isinstance(stmt, ast.If) and always_returns(stmt.body) and always_returns(
                stmt.orelse):
            return True
    return False


def always_raises(stmts: list[ast.stmt]) -> bool:
    """Whether every path through `stmts` ends in `raise` (through nested `if`s), none
    leaving first by `return`, `break` or `continue`: a branch that is only a check."""
    for stmt in stmts:
        if isinstance(stmt, ast.Raise):
            return True
        if isinstance(stmt, ast.If) and always_raises(stmt.body) and always_raises(
                stmt.orelse):
            return True
        if _contains([stmt], (ast.Return, ast.Break, ast.Continue)):
            return False
    return False


def _returns_in_ifs(stmt: ast.stmt) -> bool:
    """Whether an `if` returns on some path through its nested `if`s alone."""
    if isinstance(stmt, ast.Return):
        return True
    if isinstance(stmt, ast.If):
        return any(_returns_in_ifs(s) for s in stmt.body + stmt.orelse)
    return False


GENERATED = "_cfgrad_generated"  # set on a `def` the conversion makes of user code


def lower_returns(stmts: list[ast.stmt], local: set[str],
                  declarations: list[ast.stmt]) -> list[ast.stmt]:
    """`stmts` with what follows an `if` that returns on some path moved into its
    branches that do not. When both need it and it is more than one statement, it
    becomes one function of the variables live at its start (`local` ones: globals it
    reads as they are; `declarations`, the function's `global`/`nonlocal`, repeated in
    it), which both call: copied into both, the code would double with each such `if`."""
    for i, stmt in enumerate(stmts):
        if isinstance(stmt, ast.If) and _returns_in_ifs(stmt):
            rest = stmts[i + 1:]
            open_ = [f for f in ("body", "orelse") if not always_returns(getattr(stmt, f))]
            before: list[ast.stmt] = []
            if len(open_) == 2 and len(rest) > 1:
                params = sorted(annotate(copy.deepcopy(rest), frozenset()) & local)
                name = f"{PREFIX}rest_{rest[0].lineno}_{i}"
                written = assigned(rest)
                declared = [copy.deepcopy(d) for d in declarations
                            if set(d.names) & written]
                hoisted = locate(ast.FunctionDef(name=name, args=ast.arguments(
                    [], [ast.arg(p) for p in params], None, [], [], None, []),
                    body=declared + rest, decorator_list=[]), rest[0])
                setattr(hoisted, GENERATED, True)
                before = [hoisted]
                handed = [_name(p) for p in params]
                for arg in handed:  # state, which may be unassigned: not a checked read
                    setattr(arg, GENERATED, True)
                rest = [locate(ast.Return(ast.Call(_name(name), handed, [])), rest[0])]
            for field in open_:
                setattr(stmt, field, getattr(stmt, field) + copy.deepcopy(rest))
            for field in ("body", "orelse"):
                setattr(stmt, field, lower_returns(getattr(stmt, field), local, declarations))
            return stmts[:i] + before + [stmt]
    return stmts


# ---------------------------------------------------------------------------------
# 3. control flow becomes calls
# ---------------------------------------------------------------------------------


class Functionalize(ast.NodeTransformer):
    """Rewrites one function's statements (after steps 1 and 2 and the liveness
    annotation) into calls of the runtime; nested functions go through the whole
    conversion on their own.

    The generated functions take the variables a statement assigns as parameters and
    return them. A variable a nested function of the user's reads (a cell: `acc` of
    `show = lambda: acc`) must stay one variable, though, which that function sees
    change: the generated functions declare it `nonlocal`, set it from their parameter
    on entry (each branch of a traced `if` starts from the value before the `if`) and
    hand it out whether or not it is read afterwards."""

    def __init__(self, outside: set[str], nonlocals: set[str], local: set[str],
                 unassigned: set[str], cells: set[str]):
        self.outside = outside  # declared global or nonlocal: written where they live
        self.nonlocals = nonlocals  # those declared nonlocal
        self.local = local  # the function's own variables (parameters and assigned)
        self.unassigned = unassigned  # those that may be read before any assignment
        self.cells = cells  # those a nested function reads
        # rewriting the top level of a branch that always raises: its `raise` statements
        # (and the `if`s that hand its flag on) read the branch's RAISE_LATER
        self.raise_later = False

    # -- statements ---------------------------------------------------------------
    def block(self, stmts: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for stmt in stmts:
            new = self.visit(stmt)
            out.extend(new if isinstance(new, list) else [new])
        return out or [ast.Pass()]

    def _def(self, name: str, params: list[str], body: list[ast.stmt], at: ast.AST
             ) -> ast.FunctionDef:
        """A generated function of `params`; names the user's function declares `global`
        or `nonlocal` and `body` writes are declared so in it too, and the cells among
        `params` are `nonlocal`, set from a parameter of their own on entry."""
        written = assigned(body) & self.outside
        cells = [p for p in params if p in self.cells]
        declared: list[ast.stmt] = []
        if written - self.nonlocals:
            declared.append(ast.Global(sorted(written - self.nonlocals)))
        if (written & self.nonlocals) | set(cells):
            declared.append(ast.Nonlocal(sorted((written & self.nonlocals) | set(cells))))
        entry = [_assign(p, _name(f"{PREFIX}in_{p}")) for p in cells]
        args = ast.arguments([], [ast.arg(f"{PREFIX}in_{p}" if p in self.cells else p)
                                  for p in params], None, [], [], None, [])
        node = ast.FunctionDef(name=name, args=args, body=declared + entry + body,
                               decorator_list=[])
        return locate(node, at)

    def _state(self, stmts: list[ast.stmt]) -> list[str]:
        """The variables `stmts` hand on: those they bind, and the function's own
        variables whose objects they change (a list appended to on one branch)."""
        changed = assigned(stmts, mutations=True) & self.local
        return sorted((assigned(stmts) | changed) - self.outside)

    @staticmethod
    def _call(fn: str, args: list[ast.expr], at: ast.AST,
              keywords: list[ast.keyword] | None = None) -> ast.Call:
        return locate(ast.Call(_ops(fn), args, keywords or []), at)

    def _rewritten(self, stmts: list[ast.stmt], raise_later: bool) -> list[ast.stmt]:
        """`stmts` rewritten, at the top level of a branch that always raises or not."""
        outer, self.raise_later = self.raise_later, raise_later
        try:
            return self.block(stmts)
        finally:
            self.raise_later = outer

    def _branch(self, name: str, state: list[str], stmts: list[ast.stmt], raises: bool,
                ret: ast.Return | None, at: ast.AST) -> ast.FunctionDef:
        """One branch of an `if` as a function of `state` (ending in `ret` when given);
        one that always raises takes the flag RAISE_LATER too."""
        body = self._rewritten(stmts, raises)
        return self._def(name, state + [RAISE_LATER] if raises else state,
                         self._ended(body, ret) if ret is not None else body, at)

    def _raising(self, raises: tuple[bool, bool]) -> list[ast.keyword]:
        """The `if_stmt` arguments of an `if` with a branch that always raises: which, and
        in a branch that always raises itself, that branch's flag, which a Python
        condition hands on to the branch it takes."""
        if not any(raises):
            return []
        return [ast.keyword("raises", _const(raises))] + (
            [ast.keyword("raise_later", _name(RAISE_LATER))] if self.raise_later else [])

    @staticmethod
    def _tuple(names: list[str], store: bool = False) -> ast.Tuple:
        return ast.Tuple([_name(n, store) for n in names], ast.Store() if store else ast.Load())

    def visit_If(self, node: ast.If) -> list[ast.stmt]:
        test = self.visit(node.test)
        line = node.lineno
        raises = (always_raises(node.body), always_raises(node.orelse))
        if _returns_in_ifs(node):
            if not (always_returns(node.body) and always_returns(node.orelse)):
                # a return left inside a with/try: this `if` must stay Python
                node.test = locate(ast.Call(_ops("python_test"), [
                    test, _const("an `if` that returns from inside a `with` or `try`"),
                    _const("move the `return` out of the `with`/`try`")], []), node.test)
                node.body, node.orelse = self.block(node.body), self.block(node.orelse)
                return [node]
            state = self._state(node.body + node.orelse)
            true = self._branch(f"{PREFIX}if_true_{line}", state, node.body, raises[0], None,
                                node)
            false = self._branch(f"{PREFIX}if_false_{line}", state, node.orelse, raises[1],
                                 None, node)
            call = self._call("if_stmt", [test, _name(true.name), _name(false.name),
                                          self._tuple(state), _const(None)], node,
                              self._raising(raises))
            return [true, false, locate(ast.Return(call), node)]
        state = self._state(node.body + node.orelse)
        # nothing follows an `if` whose branches both raise: it hands nothing on
        outs = [] if all(raises) else [
            n for n in state if n in getattr(node, LIVE_OUT) or n in self.cells]
        ret = ast.Return(self._tuple(outs))
        true = self._branch(f"{PREFIX}if_true_{line}", state, node.body, raises[0], ret, node)
        false = self._branch(f"{PREFIX}if_false_{line}", state, node.orelse, raises[1], ret,
                             node)
        call = self._call("if_stmt", [test, _name(true.name), _name(false.name),
                                      self._tuple(state), _const(tuple(outs))], node,
                          self._raising(raises))
        return [true, false, self._bind(outs, call, node)]

    def _fresh(self, body: list[ast.stmt], carries: list[str]) -> list[ast.stmt]:
        """`name = Undefined('name')` for the variables an iteration assigns but does not
        carry: the body's function reads them as state of its statements (a `step` set on
        both branches of an `if`) before they are assigned, as the user's function reads
        them after its prologue set them."""
        return undefined_prologue(set(self._state(body)) - set(carries), body[0])

    @staticmethod
    def _ended(body: list[ast.stmt], ret: ast.Return) -> list[ast.stmt]:
        body = [s for s in body if not isinstance(s, ast.Pass)]
        return body + [copy.deepcopy(ret)]

    def _bind(self, names: list[str], call: ast.Call, at: ast.AST) -> ast.stmt:
        if not names:
            return locate(ast.Expr(call), at)
        return locate(ast.Assign([self._tuple(names, True)], call), at)

    def _carries(self, node: ast.While | ast.For, assigned_names: set[str]) -> list[str]:
        """A loop's carries: what it assigns and the next iteration or the code after it
        reads, and the cells it assigns (a nested function may read them any time)."""
        header = getattr(node, LIVE_AT_HEADER)
        return sorted(n for n in assigned_names - self.outside
                      if n in header or n in self.cells)

    def visit_While(self, node: ast.While) -> list[ast.stmt]:
        line = node.lineno
        carries = self._carries(node, set(self._state(node.body)))
        ret = ast.Return(self._tuple(carries))
        test = self._def(f"{PREFIX}loop_test_{line}", carries,
                         [ast.Return(self.visit(node.test))], node)
        body = self._def(f"{PREFIX}loop_body_{line}", carries, self._ended(
            self._fresh(node.body, carries) + self._rewritten(node.body, False), ret), node)
        call = self._call("while_stmt", [_name(test.name), _name(body.name),
                                         self._tuple(carries), _const(tuple(carries))], node)
        return [test, body, self._bind(carries, call, node)]

    def visit_For(self, node: ast.For) -> list[ast.stmt]:
        line = node.lineno
        carries = self._carries(node, set(self._state(node.body))
                                | target_names(node.target, False))
        ret = ast.Return(self._tuple(carries))
        item = f"{PREFIX}item"
        bind_target = locate(ast.Assign([node.target], _name(item)), node.target)
        body = self._def(f"{PREFIX}loop_body_{line}", carries + [item], self._ended(
            self._fresh(node.body, carries) + [bind_target] + self._rewritten(node.body, False),
            ret), node)
        flag = getattr(node, BREAK_FLAG, None)
        defs: list[ast.stmt] = []
        test: ast.expr = _const(None)
        if flag:
            test_def = self._def(f"{PREFIX}loop_test_{line}", carries,
                                 [ast.Return(self.visit(ast.UnaryOp(ast.Not(), _name(flag))))],
                                 node)
            defs.append(test_def)
            test = _name(test_def.name)
        call = self._call("for_stmt", [self.visit(node.iter), test, _name(body.name),
                                       self._tuple(carries), _const(tuple(carries))], node)
        return defs + [body, self._bind(carries, call, node)]

    def visit_Try(self, node: ast.Try) -> ast.Try:
        """A `try`: with `except` clauses, its body runs marked as the body of a `try`
        (`operators.enter_try`, then `exit_try` in a `finally`, on every way out), where
        traced control flow is refused, written there or in a function it calls; and
        every handler first lets cfgrad's refusal pass (`operators.refused`), so that it
        reaches the user instead of the handler being traced in its place. (A `raise`
        inside is not at a raising branch's top level: a handler may catch it.)"""
        node.body = self._rewritten(node.body, False)
        if node.handlers:  # `entered = enter_try(line)`, `finally: if entered: exit_try()`
            entered = f"{PREFIX}try_{node.lineno}"
            enter = _assign(entered, ast.Call(_ops("enter_try"), [_const(node.lineno)], []))
            exit_ = ast.If(_name(entered), [ast.Expr(ast.Call(_ops("exit_try"), [], []))], [])
            node.body = [locate(enter, node), locate(ast.Try(node.body, [], [], [
                locate(exit_, node)]), node)]
        for handler in node.handlers:
            handler.type = self.visit(handler.type) if handler.type else None
            refused = locate(ast.If(ast.Call(_ops("refused"), [], []), [
                locate(ast.Raise(None, None), handler)], []), handler)
            handler.body = [refused] + self._rewritten(handler.body, False)
        node.orelse = self._rewritten(node.orelse, False) if node.orelse else []
        node.finalbody = self._rewritten(node.finalbody, False) if node.finalbody else []
        return node

    visit_TryStar = visit_Try

    def visit_With(self, node: ast.With) -> ast.With:
        for item in node.items:
            item.context_expr = self.visit(item.context_expr)
        node.body = self._rewritten(node.body, False)  # its exit may swallow a `raise`
        return node

    def visit_Raise(self, node: ast.Raise) -> list[ast.stmt] | ast.stmt:
        """At the top level of a branch that always raises, the exception goes through
        `operators.raised`, which makes it a check of the program while the branch is
        traced under a traced condition (and hands it back to be raised otherwise); a
        bare `raise` there asks `operators.reraise` first."""
        self.generic_visit(node)
        if not self.raise_later:
            return node
        if node.exc is None:
            ask = locate(ast.Expr(ast.Call(_ops("reraise"), [_name(RAISE_LATER)], [])), node)
            return [ask, node]
        args = [_name(RAISE_LATER), node.exc] + ([node.cause] if node.cause else [])
        return locate(ast.Raise(locate(ast.Call(_ops("raised"), args, []), node), None), node)

    def visit_Assert(self, node: ast.Assert) -> ast.stmt:
        """Under `if __debug__:`, which `python -O` compiles away, as it does `assert`."""
        message = _thunk(self.visit(node.msg)) if node.msg else _const(None)
        check = locate(ast.Expr(ast.Call(_ops("assert_"), [
            self.visit(node.test), message], [])), node)
        return locate(ast.If(_name("__debug__"), [check], []), node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.stmt:
        # its decorators and defaults run here, in this function, when it is defined
        node.decorator_list = [self.visit(d) for d in node.decorator_list]
        node.args.defaults = [self.visit(d) for d in node.args.defaults]
        node.args.kw_defaults = [d if d is None else self.visit(d)
                                 for d in node.args.kw_defaults]
        try:
            return convert_function(node)
        except Unconvertible:
            return node  # a generator, say: it runs as Python

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> ast.stmt:
        return node

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.stmt:
        return node  # its methods are converted when they are called

    # -- expressions --------------------------------------------------------------
    def visit_Name(self, node: ast.Name) -> ast.expr:
        """A read of a variable that may not be assigned yet checks, as Python's read
        would (its placeholder is handed around as state, but never read as a value)."""
        if (isinstance(node.ctx, ast.Load) and node.id in self.unassigned
                and not getattr(node, GENERATED, False)):
            return locate(ast.Call(_ops("ld"), [node], []), node)
        return node

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.expr:
        self.generic_visit(node)
        if _contains(node.values, ast.NamedExpr):
            return node  # `:=` inside a thunk would bind in the thunk
        fn = "and_" if isinstance(node.op, ast.And) else "or_"
        return locate(ast.Call(_ops(fn), [_thunk(v) for v in node.values], []),
                                 node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.expr:
        self.generic_visit(node)
        if not isinstance(node.op, ast.Not):
            return node
        return locate(ast.Call(_ops("not_"), [node.operand], []), node)

    def visit_IfExp(self, node: ast.IfExp) -> ast.expr:
        self.generic_visit(node)
        if _contains([node.body, node.orelse], ast.NamedExpr):
            return node
        return locate(ast.Call(_ops("if_exp"), [
            node.test, _thunk(node.body), _thunk(node.orelse)], []), node)

    def visit_Compare(self, node: ast.Compare) -> ast.expr:
        self.generic_visit(node)
        if len(node.ops) == 1 or _contains(node.comparators, ast.NamedExpr):
            return node
        args: list[ast.expr] = [node.left]
        for op, right in zip(node.ops, node.comparators):
            args += [_const(type(op).__name__), _thunk(right)]
        return locate(ast.Call(_ops("chain"), args, []), node)

    def visit_Call(self, node: ast.Call) -> ast.expr:
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id in _FRAME_CALLS:
            return node
        return locate(ast.Call(_ops("call"), [node.func, *node.args],
                                          node.keywords), node)



def _check_convertible(fn: ast.FunctionDef | ast.Lambda) -> None:
    for node in _own_nodes(fn.body if isinstance(fn, ast.FunctionDef) else [fn.body]):
        if isinstance(node, ast.Yield | ast.YieldFrom):
            raise Unconvertible(f"it is a generator (`yield` at line {node.lineno}), and "
                                "cfgrad does not convert generators")
        if isinstance(node, ast.Await):
            raise Unconvertible(f"`await` at line {node.lineno}")


def undefined_prologue(names: Iterable[str], at: ast.AST) -> list[ast.stmt]:
    """`x = Undefined('x')` for each of `names`: a variable (the conversion's flags
    too) may be handed to a branch or an iteration as state before it is assigned."""
    return [locate(_assign(name, ast.Call(_ops("Undefined"), [_const(name)], [])), at)
            for name in sorted(names)]


def _cells(node: ast.FunctionDef) -> set[str]:
    """The variables of `node` that functions nested in it read: its code's cell
    variables, as Python's compiler finds them (the names it declares `nonlocal` are
    bound by a stand-in enclosing function, so it compiles on its own)."""
    bound = sorted({n for sub in _own_nodes(node.body) if isinstance(sub, ast.Nonlocal)
                    for n in sub.names})
    outer = ast.FunctionDef(name=f"{PREFIX}outer", args=ast.arguments(
        [], [], None, [], [], None, []), body=[
            *(_assign(n, _const(None)) for n in bound), copy.deepcopy(node)],
        decorator_list=[])
    tree = ast.fix_missing_locations(ast.Module([outer], []))
    try:
        code = compile(tree, "<cells>", "exec", dont_inherit=True)
    except SyntaxError as e:
        raise Unconvertible(f"Python refuses its source here ({e.msg})") from None
    outer_code = next(c for c in code.co_consts if isinstance(c, types.CodeType))
    inner = next(c for c in outer_code.co_consts if isinstance(c, types.CodeType))
    return set(inner.co_cellvars)


def _check_names(node: ast.AST) -> None:
    for sub in ast.walk(node):
        name = getattr(sub, "id", None) or getattr(sub, "arg", None)
        if isinstance(name, str) and name.startswith(PREFIX):
            raise Unconvertible(f"it uses the name {name!r}, and names starting with "
                                f"{PREFIX!r} are the conversion's own")


def convert_function(node: ast.FunctionDef) -> ast.FunctionDef:
    """The converted copy of a `def` (a nested one keeps its decorators, which run when
    the converted code defines it)."""
    _check_convertible(node)
    if not getattr(node, GENERATED, False):
        _check_names(node)
    cells = _cells(node)
    node = copy.deepcopy(node)
    jumps = _Jumps()
    body = jumps.block(node.body, None)
    if not always_returns(body):
        last = body[-1] if body else node
        body.append(locate(ast.Return(_const(None)), last))
    args = node.args
    params = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
    params |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    outside = declared_outside(node)
    body = lower_returns(body, (params | assigned(body)) - outside,
                         [s for s in _own_nodes(body) if isinstance(s, ast.Global | ast.Nonlocal)])
    unassigned = assigned(body) - params - outside - {jumps.ret}
    prologue = undefined_prologue(unassigned, body[0])
    if jumps.returns:
        prologue.append(locate(_assign(jumps.ret, _const(0)), body[0]))
    annotate(body, frozenset())
    nonlocals = {n for sub in _own_nodes(node.body) if isinstance(sub, ast.Nonlocal)
                 for n in sub.names}
    declarations = [s for s in body if isinstance(s, ast.Global | ast.Nonlocal)]
    body = [s for s in body if not isinstance(s, ast.Global | ast.Nonlocal)]
    local = (params | assigned(body)) - outside
    docstring = [s for s in body[:1] if isinstance(s, ast.Expr) and isinstance(
        s.value, ast.Constant) and isinstance(s.value.value, str)]
    node.body = declarations + docstring + prologue + Functionalize(
        outside, nonlocals, local, unassigned, cells - outside).block(body[len(docstring):])
    return node


def convert_lambda(node: ast.Lambda) -> ast.Lambda:
    _check_convertible(node)
    _check_names(node)
    return Functionalize(set(), set(), set(), set(), set()).visit(copy.deepcopy(node))
