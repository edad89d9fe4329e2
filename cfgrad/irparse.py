"""The IR parser: reads back what `Program.text()` prints, so printing round-trips and
hand-written IR can be verified and run.

The grammar is the printer's (docs/ir.md shows it in full):

    program NAME(%p: f64[], …) -> (f64[], …)
      region if#0 cond at b0 cases (b1, b2) exits (b1, b2) merge b3 [in loop#0]   ; f.py:3
      region loop#0 while preheader b0 header b1 body b2 latch b2 exit b3 [in …]
             [bounds (%lo, %hi)] [checkpoint=StoreAll()] [max_iters=N]          ; f.py:7
    b0:                                   ; entry
      %0: bool[] = lt %a, %b              ; f.py:4
      Cond %0 -> Proj(T) b1 | Proj(F) b2
    b1: preds (b0.T)                      ; if#0 case T
      %1: f64[] = Phi (b0.T: %a)
      Jmp b3

Phis, terminators and Projs are read by the syntax their `nodespec` declaration gives (a
pattern per kind, built from its words and its slots' forms), so a kind is spelled the
same here, in the printer and in the inspector. Names are resolved after the whole text
is read, so a Phi may name a value its block's
latch defines further down. Inline scalar constants (`2.0`, `3`, `True`, `2.0:f32`)
become `const` nodes at the top of the entry block, which dominates every use. Static
node parameters are read by a small evaluator over Python's `ast` that accepts literals
and the few constructors `format_param` prints, and nothing else, so parsing text never
runs code. Adjoint programs name forward values (`Primal ^%3`) and read the forward
run's logs, so they only make sense next to their forward program: they do not parse.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from . import checkpoint
from .errors import ParseError
from .ir import (
    DTYPE_BY_SHORT_NAME,
    DTYPE_CHOICES,
    Block,
    Cond,
    Edge,
    IfRegion,
    Jmp,
    LoopRegion,
    Node,
    Phi,
    Program,
    Region,
    Return,
    SourceLoc,
    TensorType,
    Value,
    const_literal,
    ir_dtype,
    key_text,
)
from .nodespec import FORMS, KIND_BY_NAME, RUNTIME_NODES, TERMINATORS, NodeKind
from .verify import verify

_NAME = r"[A-Za-z_]\w*"
_TYPE = r"(\w+)\[([\d,\s]*)\]"
_VALUE_NAME = re.compile(r"%(\w+)$")
# the name may hold parentheses (`grad(f)`): it ends where the parameter list starts,
# which is empty or begins with `%`
_HEADER = re.compile(r"program\s+(\S+?)\(((?:%[^)]*)?)\)\s*->\s*\((.*)\)$")
_OUTPUT = re.compile(r"\s*%(\w+)\s*:\s*(\w+\[[\d,\s]*\])\s*$")
_BLOCK = re.compile(rf"({_NAME}):(?:\s+preds\s+\((.*)\))?$")
_DEF = re.compile(r"(%[^=]*?)\s*=\s*(.*)$")
_OP = re.compile(rf"({_NAME})(.*)$")
_EDGE = re.compile(rf"({_NAME})(?:\.(T|F|\d+))?$")
_LOC = re.compile(r"(.+):(\d+)$")
_IF_REGION = re.compile(
    rf"region\s+(\S+)\s+(cond|switch)\s+at\s+({_NAME})\s+cases\s+\(([^)]*)\)\s+"
    rf"exits\s+\(([^)]*)\)\s+merge\s+({_NAME})(.*)$")
_LOOP_REGION = re.compile(
    rf"region\s+(\S+)\s+(\w+)\s+preheader\s+({_NAME})\s+header\s+({_NAME})\s+body\s+"
    rf"({_NAME})\s+latch\s+({_NAME})\s+exit\s+({_NAME})(.*)$")
_REGION_TAIL = re.compile(
    r"(?:\s+in\s+(?P<parent>\S+))?(?:\s+bounds\s+\((?P<bounds>[^)]*)\))?"
    r"(?:\s+checkpoint=(?P<checkpoint>.*?))?(?:\s+max_iters=(?P<max_iters>\d+))?\s*$")
_LOOP_KINDS = ("while", "fori", "scan")

# Limits that keep the work of parsing proportional to the text (docs/ir.md, Parsing):
#: an integer literal has at most Python's default number of digits for printing an int
#: (so every int cfgrad prints reads back, and a message can quote it); a hexadecimal
#: literal, which Python reads without that limit, is held to the same size
_INT_LIMIT = 10 ** sys.int_info.default_max_str_digits
#: literals nest at most this deep: an array of numpy's 64 dimensions prints as 64 nested
#: lists inside `array(...)`; deeper text would exhaust Python's stack
_MAX_NESTING = 100
#: a type, a count or a line number is at most numpy's largest size, 2**63 - 1
_MAX_SIZE = np.iinfo(np.intp).max

#: What each slot form of nodespec.FORMS matches in the text (the forms the parser reads).
_FORM_PATTERNS = {
    "value": r"\S+", "values": r".*?", "edge-values": r".*?", "cases": r".+",
    "block": rf"{_NAME}(?:\s+↺)?", "key": r"T|F|\d+",
}


def _syntax(kind: NodeKind) -> re.Pattern:
    """The pattern of `kind`'s syntax: its words separated by blanks, each variable a named
    group of its form's pattern; a word that is only a variable of a form that may print
    nothing (`Return`'s values) may be missing."""
    words = kind.words
    pattern = ""
    for i, word in enumerate(words):
        text = "".join(f"(?P<{name}>{_FORM_PATTERNS[kind.slot[name].form]})" if is_var
                       else re.escape(name) for name, is_var in word)
        optional = len(word) == 1 and word[0][1] and kind.slot[word[0][0]].form == "values"
        pattern += (f"(?:\\s+{text})?" if optional else rf"\s+{text}") if i else text
    return re.compile(pattern)


_SYNTAX = {name: _syntax(KIND_BY_NAME[name]) for name in ("Phi", "Proj", *TERMINATORS)}


def _proj_key(text: str) -> bool | int:
    """`T` → True, `F` → False, `2` → 2: the key of a Proj edge."""
    return True if text == "T" else False if text == "F" else int(text)


def _edge_label(src: str, key: Any) -> str:
    return src if key is None else f"{src}.{key_text(key)}"


def _marks_back_edge(term: _RawTerm) -> bool:
    """Whether a successor of the terminator is marked `↺`."""
    targets = [term.fields.get("target")] + [t for _, t in term.fields.get("cases", [])]
    return any(t is not None and t[1] for t in targets)


_TERMINATOR_CLASSES = {cls.__name__: cls for cls in (Jmp, Cond, Return)}
assert _TERMINATOR_CLASSES.keys() == TERMINATORS


def _shown_line(line: _Line, limit: int = 200) -> str:
    """A line of the text as an error message shows it: a long one abridged in the middle."""
    text = line.text.strip()
    return text if len(text) <= limit else f"{text[:limit // 2]} … {text[-limit // 4:]}"


class _LineError(ParseError):
    """A parse failure inside one line; `parse_program` adds the line number and text."""


# ---------------------------------------------------------------------------------
# Safe evaluation of parameter literals
# ---------------------------------------------------------------------------------

def _dtype(name: Any) -> np.dtype:
    """`dtype('float32')`: only the dtypes the IR names (`f16` … `c128`), so a parsed
    parameter never carries a dtype no type, printer or interpreter handles (`float128`,
    `object`, strings)."""
    try:
        dtype = ir_dtype(np.dtype(name)) if isinstance(name, str) else None
    except TypeError:
        dtype = None
    if dtype is None:
        raise _LineError(f"dtype({name!r}) is not a dtype of the IR; the IR's dtypes are "
                         f"{DTYPE_CHOICES}")
    return dtype


def _array(data: Any, dtype: str, shape: tuple[int, ...] | None = None) -> np.ndarray:
    a = np.asarray(data, dtype=_dtype(dtype))
    return a.reshape(shape) if shape is not None else a


def _full(shape: Any, value: Any, dtype: str) -> np.ndarray:
    """`full((3, 3), 0.0, 'float64')`, as a read-only broadcast view of the one value: a
    constant of any size costs no memory until the program runs (the interpreter reads
    the view, compilation and differentiation copy it), so a short text cannot make the
    parser allocate gigabytes."""
    if not isinstance(shape, tuple) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise _LineError(f"full: the shape must be a tuple of sizes (ints >= 0), got {shape!r}")
    if np.ndim(value) != 0:
        raise _LineError(f"full: the value must be one number, got {value!r}")
    return np.broadcast_to(np.asarray(value, dtype=_dtype(dtype)), shape)


def _complex(real: Any, imag: Any) -> complex:
    """`complex(1.0, nan)`: how the text writes a complex number that `(1+2j)` cannot
    (a non-finite or negative-zero part)."""
    if not all(isinstance(x, int | float) and not isinstance(x, bool) for x in (real, imag)):
        raise _LineError(f"complex({real!r}, {imag!r}) needs two real numbers")
    return complex(real, imag)


_CONSTRUCTORS = {"array": _array, "full": _full, "dtype": _dtype, "slice": slice,
                 "complex": _complex}
_NAMES = {"nan": float("nan"), "inf": float("inf")}


def eval_param(text: str, constructors: dict[str, Any] | None = None) -> Any:
    """Evaluate a parameter literal as `format_param` prints it: numbers, strings, None,
    booleans, `...`, tuples, lists, `nan`/`inf`, complex numbers (`(1+2j)`,
    `complex(1.0, nan)`), `slice(…)`, `array([…], 'float64')` and `dtype('float32')` (plus
    any extra `constructors`). Anything else is a `_LineError`."""
    tree = _expression(text.strip(), "parameter")
    return _eval(tree.body, {**_CONSTRUCTORS, **(constructors or {})})


def _expression(text: str, what: str) -> ast.Expression:
    """`text` parsed as one Python expression; text nested beyond the parser's means (a
    hundred thousand `-` signs) is a `_LineError`, not a MemoryError or RecursionError."""
    try:
        return ast.parse(text, mode="eval")
    except SyntaxError as e:
        raise _LineError(f"cannot read {what} {_abridged(text)}: {e.msg}") from None
    except (MemoryError, RecursionError):
        raise _LineError(f"cannot read {what} {_abridged(text)}: it is nested too deeply "
                         f"(at most {_MAX_NESTING} levels)") from None


def _abridged(text: str, limit: int = 80) -> str:
    """`text` quoted for a message, its middle elided when it is long."""
    return repr(text) if len(text) <= limit else repr(f"{text[:limit // 2]}…{text[-limit // 4:]}")


def _eval(node: ast.AST, constructors: dict[str, Any], depth: int = 0) -> Any:
    if depth > _MAX_NESTING:
        raise _LineError(f"a literal is nested more than {_MAX_NESTING} levels deep")
    depth += 1
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= _INT_LIMIT:
            raise _LineError(f"an integer literal has more than "
                             f"{sys.int_info.default_max_str_digits} digits")
        return value
    if isinstance(node, ast.Tuple):
        return tuple(_eval(e, constructors, depth) for e in node.elts)
    if isinstance(node, ast.List):
        return [_eval(e, constructors, depth) for e in node.elts]
    if isinstance(node, ast.Name) and node.id in _NAMES:
        return _NAMES[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        x = _eval(node.operand, constructors, depth)
        if isinstance(x, int | float | complex) and not isinstance(x, bool):
            return -x if isinstance(node.op, ast.USub) else x
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub):
        # complex literals print as `(1+2j)`
        a, b = _eval(node.left, constructors, depth), _eval(node.right, constructors, depth)
        if isinstance(b, complex) and isinstance(a, int | float) and not isinstance(a, bool):
            return a + b if isinstance(node.op, ast.Add) else a - b
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in constructors):
        args = [_eval(a, constructors, depth) for a in node.args]
        kwargs = {k.arg: _eval(k.value, constructors, depth) for k in node.keywords if k.arg}
        if len(kwargs) != len(node.keywords):
            raise _LineError(f"`**` is not allowed in {ast.unparse(node)!r}")
        try:
            return constructors[node.func.id](*args, **kwargs)
        except _LineError:
            raise
        except (TypeError, ValueError, OverflowError, MemoryError) as e:
            raise _LineError(f"cannot evaluate {ast.unparse(node)!r}: {e}") from None
    raise _LineError(f"{_abridged(ast.unparse(node))} is not a literal the IR text allows")


def _params(text: str) -> dict[str, Any]:
    """`{axes=(0,), keepdims=False}` → a dict, keyword by keyword."""
    inner = text.strip()[1:-1]
    call = _expression(f"_({inner})", "parameters").body
    assert isinstance(call, ast.Call)
    if call.args or any(k.arg is None for k in call.keywords):
        raise _LineError(f"parameters are written name=value: {text.strip()!r}")
    return {k.arg: _eval(k.value, _CONSTRUCTORS) for k in call.keywords}


def _checkpoint(text: str) -> Any:
    """A strategy from its repr, `StoreAll()`: only the strategy classes of
    cfgrad.checkpoint are called (not its statistics or helper classes)."""
    classes = {cls.__name__: cls for cls in checkpoint.STRATEGIES}
    call = _expression(text.strip(), "checkpoint").body
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
            and call.func.id in classes):
        names = ", ".join(f"{name}(…)" for name in classes)
        raise _LineError(f"checkpoint={_abridged(text.strip())} is not a strategy: write one "
                         f"of {names}")
    return _eval(call, classes)


# ---------------------------------------------------------------------------------
# Lexical helpers
# ---------------------------------------------------------------------------------

def _top_level(text: str, chars: str):
    """Positions of `chars` in `text` outside quotes and brackets."""
    depth, quote = 0, ""
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch in chars and depth == 0:
            yield i


def split_comment(line: str) -> tuple[str, str]:
    """Split at the first `;` outside quotes and brackets: (code, comment text)."""
    for i in _top_level(line, ";"):
        return line[:i].rstrip(), line[i + 1:].strip()
    return line.rstrip(), ""


def split_top(text: str, sep: str = ",") -> list[str]:
    """Split at `sep` outside quotes and brackets; empty text gives no items."""
    items, start = [], 0
    for i in _top_level(text, sep):
        items.append(text[start:i].strip())
        start = i + 1
    last = text[start:].strip()
    if items or last:
        items.append(last)
    return items


def parse_type(text: str) -> TensorType:
    m = re.fullmatch(_TYPE, text.strip())
    if m is None or m.group(1) not in DTYPE_BY_SHORT_NAME:
        raise _LineError(f"{_abridged(text.strip())} is not a type like f64[] or f32[3,4]")
    dims = tuple(_count(d.strip(), "a dimension") for d in m.group(2).split(",") if d.strip())
    if np.prod(dims, dtype=object) > _MAX_SIZE:
        raise _LineError(f"the type {m.group(1)}[…] has more than {_MAX_SIZE} elements, more "
                         "than an array can hold")
    return TensorType(dims, DTYPE_BY_SHORT_NAME[m.group(1)])


def _count(digits: str, what: str) -> int:
    """A size, count or line number written in decimal digits, at most numpy's largest
    size (read without converting thousands of digits)."""
    if len(digits) > len(str(_MAX_SIZE)) or int(digits) > _MAX_SIZE:
        raise _LineError(f"{what} is larger than {_MAX_SIZE}: {_abridged(digits)}")
    return int(digits)


def _source_loc(comment: str, what: str) -> SourceLoc:
    """A node's or region's comment, its source location `file:line`."""
    m = _LOC.match(comment)
    if m is None:
        raise _LineError(f"{what} comment is its source location file:line, not "
                         f"{_abridged(comment)}")
    return SourceLoc(m.group(1), _count(m.group(2), "a line number"))


def parse_literal(text: str) -> np.ndarray:
    """An inline scalar constant: `2.0` (f64), `3` (i64), `True` (bool), `2.0:f32`."""
    body, _, suffix = text.rpartition(":")
    if not body or suffix not in DTYPE_BY_SHORT_NAME:
        body, suffix = text, ""
    value = eval_param(body, {})
    if isinstance(value, bool):
        default, fits = np.bool_, "b"
    elif isinstance(value, int):
        default, fits = np.int64, "biufc"
    elif isinstance(value, float):
        default, fits = np.float64, "fc"
    elif isinstance(value, complex):
        default, fits = np.complex128, "c"
    else:
        raise _LineError(f"{text!r} is neither a value name (%x) nor a scalar constant")
    dtype = DTYPE_BY_SHORT_NAME[suffix] if suffix else np.dtype(default)
    if dtype.kind not in fits:
        raise _LineError(f"the constant {body} cannot have type {suffix}")
    try:
        return np.asarray(value, dtype=dtype)
    except OverflowError:
        raise _LineError(f"the constant {body} does not fit in {dtype.name} (its range is "
                         f"{np.iinfo(dtype).min} to {np.iinfo(dtype).max}); write it as a "
                         "float constant or split the computation") from None


# ---------------------------------------------------------------------------------
# The parse: lines into raw records, then records into a Program
# ---------------------------------------------------------------------------------

@dataclass
class _Line:
    number: int
    text: str


class _RawPhi(NamedTuple):
    line: _Line
    out: str
    type: TensorType
    inputs: list[tuple[str, Any, str]]  # (source block, Proj key, value text)


class _RawNode(NamedTuple):
    line: _Line
    outs: list[tuple[str, TensorType]]
    op: str
    args: list[str]
    params: dict[str, Any]
    loc: SourceLoc | None


class _RawTerm(NamedTuple):
    line: _Line
    op: str
    fields: dict[str, Any]  # as read_fields reads them


@dataclass
class _RawBlock:
    """One block as read, names unresolved (a use may precede its definition)."""

    label: str
    line: _Line
    preds: list[tuple[str, Any]]
    comment: str
    phis: list[_RawPhi] = field(default_factory=list)
    nodes: list[_RawNode] = field(default_factory=list)
    term: _RawTerm | None = None


class _Parser:
    def __init__(self, text: str):
        self.lines = [_Line(i + 1, t) for i, t in enumerate(text.splitlines())]
        self.values: dict[str, Value] = {}
        self.consts: dict[str, Value] = {}
        self.const_nodes: list[Node] = []
        self.blocks: dict[str, Block] = {}
        self.raw: list[_RawBlock] = []
        self.region_lines: list[tuple[_Line, re.Match, bool, str]] = []
        self.header = _Line(0, "")

    # -- pass 1: read lines ------------------------------------------------------------
    def read(self) -> tuple[str, list[Value], list[TensorType]]:
        lines = [ln for ln in self.lines if ln.text.strip() and not
                 ln.text.strip().startswith(";")]
        if not lines:
            raise ParseError("empty text: expected `program NAME(…) -> (…)`")
        header = self.header = lines[0]
        name, params, outs = self.at(header, self.read_header, header.text)
        for ln in lines[1:]:
            self.at(ln, self.read_line, ln)
        return name, params, outs

    def at(self, line: _Line, fn: Any, *args: Any) -> Any:
        """Call `fn`, turning a `_LineError` into a ParseError naming the line."""
        try:
            return fn(*args)
        except _LineError as e:
            raise ParseError(f"line {line.number}: {e}\n    {_shown_line(line)}") from None

    def read_header(self, text: str) -> tuple[str, list[Value], list[TensorType]]:
        code, _ = split_comment(text)
        m = _HEADER.match(code.strip())
        if m is None:
            raise _LineError("expected `program NAME(%p: type, …) -> (type, …)`")
        params = []
        for item in split_top(m.group(2)):
            pm = _OUTPUT.match(item)
            if pm is None:
                raise _LineError(f"a parameter is written %name: type, not {item!r}")
            v = Value(parse_type(pm.group(2)), pm.group(1))
            self.define(pm.group(1), v)
            params.append(v)
        outs = [parse_type(t) for t in split_top(m.group(3))]
        return m.group(1), params, outs

    def define(self, name: str, v: Value) -> None:
        if name in self.values:
            raise _LineError(f"%{name} is defined twice")
        self.values[name] = v

    def read_line(self, ln: _Line) -> None:
        code, comment = split_comment(ln.text)
        stripped = code.strip()
        if stripped.startswith("region "):
            if self.raw:
                raise _LineError("region lines come before the first block")
            self.read_region(ln, stripped, comment)
        elif not ln.text[:1].isspace():
            m = _BLOCK.match(stripped)
            if m is None:
                raise _LineError("expected a block label like `b1:` or `b1: preds (b0.T)`")
            if m.group(1) in self.blocks:
                raise _LineError(f"block {m.group(1)} is defined twice")
            preds = [self.edge(e) for e in split_top(m.group(2) or "")]
            if "mirrors" in comment.split():
                raise _LineError(self.adjoint_message())
            self.blocks[m.group(1)] = Block()
            self.raw.append(_RawBlock(m.group(1), ln, preds, comment))
        else:
            if not self.raw:
                raise _LineError("a node outside any block")
            b = self.raw[-1]
            if b.term is not None:
                raise _LineError(f"block {b.label} continues after its terminator")
            self.read_statement(ln, b, stripped, comment)

    @staticmethod
    def adjoint_message() -> str:
        return ("this is an adjoint program (it reads the forward run: Primal ^%v, LogPop, "
                "TripPop, LoopState); only forward programs parse, rebuild the adjoint with "
                "cg.adjoint(program)")

    def edge(self, text: str) -> tuple[str, Any]:
        m = _EDGE.match(text.strip())
        if m is None:
            raise _LineError(f"{text!r} is not an edge like b0, b0.T, b0.F or b0.2")
        return m.group(1), None if m.group(2) is None else _proj_key(m.group(2))

    def read_region(self, ln: _Line, text: str, comment: str) -> None:
        m = _IF_REGION.match(text)
        is_if = m is not None
        if m is None:
            m = _LOOP_REGION.match(text)
            if m is None:
                raise _LineError("expected `region ID cond|switch at …` or "
                                 "`region ID while|fori|scan preheader …`")
            if m.group(2) not in _LOOP_KINDS:
                if m.group(2) == "reverse":
                    raise _LineError(self.adjoint_message())
                raise _LineError(f"unknown loop kind {m.group(2)!r} (expected while, fori or scan)")
        self.region_lines.append((ln, m, is_if, comment))

    def read_statement(self, ln: _Line, b: _RawBlock, text: str, comment: str) -> None:
        m = _DEF.match(text)
        if m is None or not text.startswith("%"):
            outs, rhs = [], text
        else:
            outs = []
            for item in split_top(m.group(1)):
                om = _OUTPUT.match(item)
                if om is None:
                    raise _LineError(f"an output is written %name: type, not {item!r}")
                outs.append((om.group(1), parse_type(om.group(2))))
            rhs = m.group(2)
        om = _OP.match(rhs)
        if om is None:
            raise _LineError("expected an operation name")
        op, rest = om.group(1), om.group(2).strip()
        if op in RUNTIME_NODES:
            raise _LineError(self.adjoint_message())
        if op in TERMINATORS:
            if outs:
                raise _LineError(f"{op} is a terminator and defines no values")
            b.term = _RawTerm(ln, op, self.read_fields(op, rhs))
            return
        if op == "Phi":
            if len(outs) != 1:
                raise _LineError("a Phi defines exactly one value")
            if b.nodes:
                raise _LineError("Phis come before the block's other nodes")
            b.phis.append(_RawPhi(ln, outs[0][0], outs[0][1],
                                  self.read_fields(op, rhs)["inputs"]))
            return
        params: dict[str, Any] = {}
        if rest.endswith("}"):
            brace = rest.find("{")
            if brace < 0:
                raise _LineError("unbalanced `}`")
            params = _params(rest[brace:])
            rest = rest[:brace].strip()
        args = split_top(rest)
        loc = _source_loc(comment, "a node's") if comment else None
        b.nodes.append(_RawNode(ln, outs, op, args, params, loc))

    def read_fields(self, op: str, text: str) -> dict[str, Any]:
        """The slots of a `Phi`, `Proj` or terminator as its declared syntax spells them:
        slot name → the text's names, unresolved (a use may precede its definition)."""
        kind = KIND_BY_NAME[op]
        m = _SYNTAX[op].fullmatch(text)
        if m is None:
            forms = "; ".join(f"${s.name}: {FORMS[s.form]}" for s in kind.slots
                              if f"${s.name}" in kind.syntax)
            raise _LineError(f"expected `{kind.syntax}` ({forms}), not {text!r}")
        return {name: self.read_form(kind.slot[name].form, found)
                for name, found in m.groupdict().items()}

    def read_form(self, form: str, text: str | None) -> Any:
        text = (text or "").strip()
        if form == "value":
            return text
        if form == "values":
            return split_top(text)
        if form == "block":  # (label, whether ↺ marks it as a loop's back edge)
            return text.split()[0], text.endswith("↺")
        if form == "key":
            return _proj_key(text)
        if form == "cases":
            return [tuple(self.read_fields("Proj", item).values())
                    for item in split_top(text, "|")]
        assert form == "edge-values", form
        ins = []
        for item in split_top(text):
            label, sep, value = item.partition(":")
            if not sep:
                raise _LineError(f"a Phi input is written edge: value, not {item!r}")
            src, key = self.edge(label)
            ins.append((src, key, value.strip()))
        return ins

    # -- pass 2: resolve names -----------------------------------------------------------
    def value(self, text: str) -> Value:
        m = _VALUE_NAME.match(text)
        if m is not None:
            v = self.values.get(m.group(1))
            if v is None:
                raise _LineError(f"{text} is never defined")
            return v
        if not text:
            raise _LineError("a value is missing")
        literal = parse_literal(text)
        key = const_literal(literal)
        v = self.consts.get(key)
        if v is None:
            v = self.consts[key] = Value(TensorType((), literal.dtype))
            self.const_nodes.append(Node("const", [], {"value": literal}, [v]))
        return v

    def block(self, label: str) -> Block:
        b = self.blocks.get(label)
        if b is None:
            raise _LineError(f"block {label} is never defined")
        return b

    def build(self) -> Program:
        name, params, outs = self.read()
        if not self.raw:
            raise ParseError("the program has no blocks")
        for rb in self.raw:  # definitions first: uses may come before them in the text
            for phi in rb.phis:
                self.at(phi.line, self.define, phi.out, Value(phi.type))
            for node in rb.nodes:
                for out, t in node.outs:
                    self.at(node.line, self.define, out, Value(t))
        regions = self.build_regions()
        by_id = {r.id: r for r in regions}
        latches = {r.latch for r in regions if isinstance(r, LoopRegion)}
        for rb in self.raw:
            self.at(rb.line, self.build_block, rb, by_id)
            term = rb.term
            if term is not None and _marks_back_edge(term) and self.blocks[rb.label] not in latches:
                raise ParseError(f"line {term.line.number}: ↺ marks a back edge, but "
                                 f"{rb.label} is no loop's latch\n    "
                                 f"{_shown_line(term.line)}")
        entry = self.blocks[self.raw[0].label]
        entry.nodes[:0] = self.const_nodes
        program = Program(name, params, [self.blocks[rb.label] for rb in self.raw], regions)
        returns = [b.term for b in program.blocks if isinstance(b.term, Return)]
        if returns and [v.type for v in returns[0].values] != outs:
            got = ", ".join(str(v.type) for v in returns[0].values)
            raise ParseError(f"line {self.header.number}: the header declares outputs "
                             f"({', '.join(map(str, outs))}) but Return gives ({got})")
        return program

    def build_block(self, rb: _RawBlock, by_id: dict[str, Region]) -> None:
        b = self.blocks[rb.label]
        b.preds = [Edge(self.block(src), key) for src, key in rb.preds]
        words = rb.comment.split(maxsplit=1)
        if words and words[0] in by_id:
            b.region, b.role = by_id[words[0]], words[1] if len(words) > 1 else ""
        else:
            b.role = rb.comment
        labels = [_edge_label(src, key) for src, key in rb.preds]
        for ln, out, _, ins in rb.phis:
            given = [_edge_label(src, key) for src, key, _ in ins]
            for label in given:
                if label not in labels:
                    raise ParseError(f"line {ln.number}: the Phi names edge {label}, which is "
                                     f"not among {rb.label}'s preds\n    {_shown_line(ln)}")
            # inputs are stored in predecessor order; a Phi with missing or repeated edges
            # keeps its own order and the verifier reports its arity
            order = ([given.index(label) for label in labels]
                     if sorted(given) == sorted(labels) else range(len(ins)))
            b.phis.append(Phi(self.values[out], [self.at(ln, self.value, ins[i][2])
                                                 for i in order]))
        for ln, node_outs, op, args, params, loc in rb.nodes:
            inputs = [self.at(ln, self.value, a) for a in args]
            b.nodes.append(Node(op, inputs, params, [self.values[o] for o, _ in node_outs],
                                loc))
        if rb.term is None:
            return  # the verifier reports the missing terminator
        kind = KIND_BY_NAME[rb.term.op]
        b.term = _TERMINATOR_CLASSES[rb.term.op](**{
            name: self.at(rb.term.line, self.resolve, kind.slot[name].form, raw)
            for name, raw in rb.term.fields.items()})

    def resolve(self, form: str, raw: Any) -> Any:
        """A slot's Values and Blocks from the names `read_form` read."""
        if form == "value":
            return self.value(raw)
        if form == "values":
            return [self.value(v) for v in raw]
        if form == "block":
            return self.block(raw[0])
        assert form == "cases", form
        return [(key, self.block(target[0])) for key, target in raw]

    def build_regions(self) -> list[Region]:
        regions: list[Region] = []
        parents: list[str | None] = []
        for ln, m, is_if, comment in self.region_lines:
            region = self.at(ln, self.build_region, m, is_if, comment, parents)
            if any(r.id == region.id for r in regions):
                raise ParseError(f"line {ln.number}: region {region.id} is defined twice\n    "
                                 f"{_shown_line(ln)}")
            regions.append(region)
        by_id = {r.id: r for r in regions}
        for (ln, *_), r, parent in zip(self.region_lines, regions, parents):
            if parent is not None:
                if parent not in by_id:
                    raise ParseError(f"line {ln.number}: the parent region {parent} is never "
                                     f"defined\n    {_shown_line(ln)}")
                r.parent = by_id[parent]
        return regions

    def build_region(self, m: re.Match, is_if: bool, comment: str,
                     parents: list[str | None]) -> Region:
        loc = _source_loc(comment, "a region's") if comment else None
        if is_if:
            rid, kind, branch, cases, exits, merge, tail = m.groups()
            tm = _REGION_TAIL.fullmatch(tail)
            if tm is None or any(tm.group(g) for g in ("bounds", "checkpoint", "max_iters")):
                raise _LineError(f"unexpected {tail.strip()!r} after an if region")
            parents.append(tm.group("parent"))
            return IfRegion(rid, None, loc, kind=kind, branch=self.block(branch),
                            cases=[self.block(c) for c in split_top(cases)],
                            case_exits=[self.block(c) for c in split_top(exits)],
                            merge=self.block(merge))
        rid, kind, pre, header, body, latch, exit_, tail = m.groups()
        tm = _REGION_TAIL.fullmatch(tail)
        if tm is None:
            raise _LineError(f"cannot read {tail.strip()!r} after a loop region")
        parents.append(tm.group("parent"))
        bounds = None
        if tm.group("bounds") is not None:
            items = split_top(tm.group("bounds"))
            if len(items) != 2:
                raise _LineError("bounds are written bounds (%lower, %upper)")
            bounds = (self.value(items[0]), self.value(items[1]))
        checkpoint = _checkpoint(tm.group("checkpoint")) if tm.group("checkpoint") else None
        max_iters = _count(tm.group("max_iters"), "max_iters") if tm.group("max_iters") else None
        return LoopRegion(rid, None, loc, kind=kind, preheader=self.block(pre),
                          header=self.block(header), body=self.block(body),
                          latch=self.block(latch), exit=self.block(exit_),
                          checkpoint=checkpoint, max_iters=max_iters, trip_bounds=bounds)


def parse_program(text: str, *, check: bool = True) -> Program:
    """Read a forward Program from its text form (what `Program.text()` prints).

    Malformed text raises `ParseError` naming the line; with `check` (the default) the
    result is also verified, so text that reads but breaks an IR invariant raises
    `VerifyError`."""
    program = _Parser(text).build()
    if check:
        verify(program)
    return program
