"""Which names a piece of a function's source reads and writes, and which are live where.

The conversion turns an `if` or a loop into functions of the variables it changes, so it
needs, per statement: the names the statement assigns at the function's own scope (they
become the state handed in and out), and the names still read afterwards (only those leave
a branch or a loop: a temporary defined on one side of a traced `if` and never read again
is no error). That is the classic backward liveness analysis (Aho, Lam, Sethi, Ullman,
*Compilers*, 2nd ed., §9.2.5) over the statement tree, with a fixpoint per loop.

Nested functions, lambdas, comprehensions and classes have scopes of their own: what they
assign stays inside, and every name they read counts as read where they are defined (they
may be called later; reading too much only keeps a variable live longer).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

# Methods that change the object they are called on: `xs.append(y)` changes `xs` as an
# assignment to it would, so a traced branch or loop must hand `xs` in and out.
MUTATING_METHODS = frozenset({
    "append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault",
    "popitem", "add", "discard", "sort", "reverse",
})

# scopes of their own: what they assign stays inside them
FUNCTION_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_SCOPES = FUNCTION_SCOPES + (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_COMPOUND = (ast.If, ast.While, ast.For, ast.AsyncFor, ast.With, ast.AsyncWith, ast.Try,
             ast.TryStar, ast.Match)

# the attributes `annotate` sets: on each statement, the names live after it; on each
# loop, the names live at its header (what one iteration hands the next, or the exit)
LIVE_OUT = "_cfgrad_live_out"
LIVE_AT_HEADER = "_cfgrad_live_at_header"
# set by the conversion on a `for` it gave a `break` flag: the flag is read at the header
BREAK_FLAG = "_cfgrad_break_flag"


def target_names(target: ast.AST, mutations: bool = True) -> set[str]:
    """The names an assignment target binds, and with `mutations` those whose object it
    changes: `x[i] = v` and `x.a = v` change `x`."""
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, ast.Tuple | ast.List):
        return set().union(*(target_names(t, mutations) for t in target.elts))
    if isinstance(target, ast.Starred):
        return target_names(target.value, mutations)
    if mutations and isinstance(target, ast.Subscript | ast.Attribute):
        base = target.value
        while isinstance(base, ast.Subscript | ast.Attribute):
            base = base.value
        return {base.id} if isinstance(base, ast.Name) else set()
    return set()


def _expression_writes(node: ast.AST, mutations: bool) -> set[str]:
    """Names an expression binds at the enclosing scope: `:=` targets (also those inside
    comprehensions, which bind in the enclosing function); with `mutations`, also the
    objects of mutating method calls (`xs.append(y)`)."""
    found: set[str] = set()
    for sub in _walk_scope(node, into_comprehensions=True):
        if isinstance(sub, ast.NamedExpr):
            found |= target_names(sub.target)
        elif (mutations and isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute)
              and sub.func.attr in MUTATING_METHODS):
            found |= target_names(sub.func)
    return found


def _walk_scope(node: ast.AST, into_comprehensions: bool = False) -> Iterable[ast.AST]:
    """The nodes of `node` that belong to its own scope (not inside nested functions,
    lambdas or classes; comprehensions only when asked)."""
    stack = [node]
    while stack:
        sub = stack.pop()
        yield sub
        for child in ast.iter_child_nodes(sub):
            if isinstance(child, _SCOPES) and not (
                    into_comprehensions and isinstance(child, ast.ListComp | ast.SetComp
                                                       | ast.DictComp | ast.GeneratorExp)):
                continue
            stack.append(child)


def reads(node: ast.AST) -> set[str]:
    """Every name read anywhere in `node`, nested scopes included (over-approximated)."""
    return {sub.id for sub in ast.walk(node)
            if isinstance(sub, ast.Name) and not isinstance(sub.ctx, ast.Store)}


def _header_expressions(stmt: ast.stmt) -> list[ast.AST]:
    """The expressions a compound statement evaluates itself (not those of its body)."""
    if isinstance(stmt, ast.If | ast.While):
        return [stmt.test]
    if isinstance(stmt, ast.For | ast.AsyncFor):
        return [stmt.iter]
    if isinstance(stmt, ast.With | ast.AsyncWith):
        return [item.context_expr for item in stmt.items]
    if isinstance(stmt, ast.Try | ast.TryStar):
        return [h.type for h in stmt.handlers if h.type is not None]
    if isinstance(stmt, ast.Match):
        return [stmt.subject]
    return []


def _bodies(stmt: ast.stmt) -> list[list[ast.stmt]]:
    if isinstance(stmt, ast.Try | ast.TryStar):
        return [stmt.body, *(h.body for h in stmt.handlers), stmt.orelse, stmt.finalbody]
    if isinstance(stmt, ast.Match):
        return [case.body for case in stmt.cases]
    return [getattr(stmt, field) for field in ("body", "orelse") if hasattr(stmt, field)]


def assigned(stmts: Iterable[ast.stmt], mutations: bool = False) -> set[str]:
    """The names `stmts` bind at the function's own scope, in any branch; with
    `mutations`, also those whose object they change (`x[i] = v`, `xs.append(v)`)."""
    found: set[str] = set()
    for stmt in stmts:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.add(stmt.name)
            continue
        if isinstance(stmt, ast.Assign):
            for t in stmt.targets:
                found |= target_names(t, mutations)
        elif isinstance(stmt, ast.AugAssign | ast.AnnAssign) and (
                not isinstance(stmt, ast.AnnAssign) or stmt.value is not None):
            found |= target_names(stmt.target, mutations)
        elif isinstance(stmt, ast.For | ast.AsyncFor):
            found |= target_names(stmt.target, mutations)
        elif isinstance(stmt, ast.With | ast.AsyncWith):
            for item in stmt.items:
                if item.optional_vars is not None:
                    found |= target_names(item.optional_vars, mutations)
        elif isinstance(stmt, ast.Import | ast.ImportFrom):
            found |= {(a.asname or a.name).split(".")[0] for a in stmt.names}
        elif isinstance(stmt, ast.Delete):
            for t in stmt.targets:
                found |= target_names(t, mutations)
        elif isinstance(stmt, ast.Try | ast.TryStar):
            found |= {h.name for h in stmt.handlers if h.name}
        elif isinstance(stmt, ast.Match):
            found |= {sub.name for sub in ast.walk(stmt)
                      if isinstance(sub, ast.MatchAs | ast.MatchStar) and sub.name}
        if isinstance(stmt, _COMPOUND):
            for e in _header_expressions(stmt):
                found |= _expression_writes(e, mutations)
            for body in _bodies(stmt):
                found |= assigned(body, mutations)
        else:
            found |= _expression_writes(stmt, mutations)
    return found


def declared_outside(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """Names `fn` declares `global` or `nonlocal`: they live in another scope."""
    return {name for sub in _walk_scope(fn) if isinstance(sub, ast.Global | ast.Nonlocal)
            for name in sub.names}


def annotate(stmts: list[ast.stmt], live_after: frozenset[str]) -> frozenset[str]:
    """Set each statement's live-out names (attribute `LIVE_OUT`) and return the names
    live before `stmts`. `Break`, `Continue` and `Return` inside loops are gone by now
    (the conversion lowers them to flags first); a `Return` ends what is live."""
    live = live_after
    for stmt in reversed(stmts):
        setattr(stmt, LIVE_OUT, live)
        live = _live_before(stmt, live)
    return live


def _live_before(stmt: ast.stmt, live: frozenset[str]) -> frozenset[str]:
    if isinstance(stmt, ast.Return):
        return frozenset(reads(stmt))
    if isinstance(stmt, ast.If):
        return (frozenset(reads(stmt.test)) | annotate(stmt.body, live)
                | annotate(stmt.orelse, live))
    if isinstance(stmt, ast.While | ast.For | ast.AsyncFor):
        header = frozenset(reads(_header_expressions(stmt)[0])) if isinstance(
            stmt, ast.While) else frozenset(filter(None, [getattr(stmt, BREAK_FLAG, None)]))
        bound = frozenset(target_names(stmt.target)) if not isinstance(
            stmt, ast.While) else frozenset()
        orelse = annotate(stmt.orelse, live)
        at_header = live | orelse | header
        while True:  # the loop's fixpoint: what the next iteration reads is live too
            new = live | orelse | header | (annotate(stmt.body, at_header) - bound)
            if new == at_header:
                break
            at_header = new
        setattr(stmt, LIVE_AT_HEADER, at_header)
        if isinstance(stmt, ast.While):
            return at_header
        return at_header | frozenset(reads(stmt.iter))
    if isinstance(stmt, ast.Try | ast.TryStar):
        after = annotate(stmt.finalbody, live)
        handlers = frozenset().union(*(annotate(h.body, after) for h in stmt.handlers))
        body = annotate(stmt.body, annotate(stmt.orelse, after) | handlers | after)
        return body | handlers | frozenset().union(
            *(reads(e) for e in _header_expressions(stmt)))
    if isinstance(stmt, _COMPOUND):  # with, match: the body runs once, after the header
        inner = frozenset().union(*(annotate(b, live) for b in _bodies(stmt)))
        return inner | live | frozenset().union(*(reads(e) for e in _header_expressions(stmt)))
    # a simple statement: what it reads, plus what is live after and it does not bind
    # (`x[i] = v`, an augmented assignment and a mutating call read their target too)
    binds: set[str] = set()
    if isinstance(stmt, ast.Assign):
        binds = set().union(*(target_names(t, mutations=False) for t in stmt.targets))
    elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
        binds = target_names(stmt.target, mutations=False)
    elif isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        binds = {stmt.name}
    elif isinstance(stmt, ast.Import | ast.ImportFrom):
        binds = assigned([stmt])
    elif isinstance(stmt, ast.AugAssign):  # `x += 1` reads x
        return live | frozenset(reads(stmt)) | frozenset(target_names(stmt.target))
    return (live - binds) | frozenset(reads(stmt))

