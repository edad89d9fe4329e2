"""Tracing: run the user's function on tracers and lower it into an SSA block Program.

Control flow lowers directly into blocks of the one Program being built, so branches and
loop bodies may close over traced values of enclosing scopes at any depth: the SSA value
is simply used where it is visible, and its gradient flows back through the reverse
builder like any other use. A `Scope` per branch case / loop body catches the opposite
mistake, a value used outside the scope that computed it.

`cond`, `switch`, `while_loop` and `fori_loop` also work outside tracing, as plain Python
control flow on concrete values (like JAX with jit disabled).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import numpy as cfgrad_numpy
from . import tree as treelib
from .checkpoint import check_strategy
from .errors import (
    ArgumentTypeError,
    ArgumentValueError,
    LoopLimitError,
    LoweringError,
    TracerBoolError,
    require_callable,
)
from .ir import (
    DTYPE_BY_SHORT_NAME,
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
    key_text,
    type_of,
)
from .primitives import PRIMITIVES, Primitive, bind
from .trace_context import (
    LOWERING_LOCK,
    current_loc,
    current_trace,
    definition,
    frame_loc,
    is_being_built,
    tracing,
    user_frame,
)
from .verify import verify


class Scope:
    """A lexical tracing scope: the program top level, a branch case, or a loop."""

    __slots__ = ("parent", "region", "what")

    def __init__(self, parent: Scope | None, region: Region | None, what: str):
        self.parent = parent
        self.region = region
        self.what = what

    def encloses(self, other: Scope) -> bool:
        s: Scope | None = other
        while s is not None:
            if s is self:
                return True
            s = s.parent
        return False


# ---------------------------------------------------------------------------------
# Tracers
# ---------------------------------------------------------------------------------

class Tracer:
    """A traced array: shape and dtype are known, the value is not."""

    __slots__ = ("value", "_cfgrad_trace", "scope")
    __array_priority__ = 1000

    def __init__(self, value: Value, trace: Trace, scope: Scope | None):
        self.value = value
        self._cfgrad_trace = trace
        self.scope = scope

    # -- metadata ------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self.value.type.shape

    @property
    def dtype(self) -> np.dtype:
        return self.value.type.dtype

    @property
    def ndim(self) -> int:
        return len(self.value.type.shape)

    @property
    def size(self) -> int:
        return self.value.type.size

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d traced array")
        return self.shape[0]

    def __repr__(self) -> str:
        return f"Tracer({self.value.type})"

    # -- Python control flow is not traceable -----------------------------------------
    def _refuse(self, what: str) -> Any:
        loc = current_loc()
        where = f" at {loc}" if loc else ""
        raise TracerBoolError(
            f"{what} on a traced value ({self.value.type}){where}: the value is not known while "
            "the function is traced. Use cg.cond / cg.switch for branches, cg.while_loop / "
            "cg.fori_loop for loops, and cnp.where for elementwise selection. (cfgrad "
            "converts the `if`, `while` and `for` statements of the functions it transforms "
            "and of the user functions they call, unless autograph=False; explicit bool(), "
            "int(), float(), comprehension conditions and code whose source it cannot read "
            "stay Python: docs/autograph.md)")

    def __bool__(self) -> bool:
        return self._refuse("bool() (an `if`, `while`, `and`/`or` or `not`)")

    def __int__(self) -> int:
        return self._refuse("int()")

    def __float__(self) -> float:
        return self._refuse("float()")

    def __index__(self) -> int:
        return self._refuse("using it as a Python index (to index a numpy array with a traced "
                            "integer, write cnp.asarray(array)[i])")

    def __iter__(self) -> Any:
        if not self.shape:
            raise TypeError("iteration over a 0-d traced array")
        return (self[i] for i in range(self.shape[0]))

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        return self._refuse("conversion to a numpy array (np.asarray, a numpy function "
                            "without a cfgrad.numpy counterpart, or indexing a numpy array "
                            "with it: write cnp.asarray(array)[i])")

    # -- numpy interop -------------------------------------------------------------------
    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        fn = None if method != "__call__" or kwargs else cfgrad_numpy.NAMESPACE.get(
            ufunc.__name__)
        if fn is None:
            raise ArgumentTypeError(
                f"np.{ufunc.__name__} cannot trace a cfgrad value; use the cfgrad.numpy "
                "function of the same name (import cfgrad.numpy as cnp)")
        return fn(*inputs)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        # np.linalg.trace is cnp.linalg.trace (the last two axes), not cnp.trace
        part = getattr(func, "__module__", "").removeprefix("numpy.")
        if part in ("linalg", "fft"):
            sub = getattr(cfgrad_numpy, part)
            fn = getattr(sub, func.__name__) if func.__name__ in sub.__all__ else None
        else:
            fn = cfgrad_numpy.NAMESPACE.get(func.__name__)
        if fn is None:
            raise ArgumentTypeError(
                f"{getattr(func, '__module__', 'numpy')}.{func.__name__} cannot trace a cfgrad "
                "value and cfgrad.numpy has no "
                f"{func.__name__}; see docs/api.md for the supported functions")
        return fn(*args, **kwargs)

    # -- operators -----------------------------------------------------------------------
    def __add__(self, o: Any) -> Any: return bind("add", self, o)
    def __radd__(self, o: Any) -> Any: return bind("add", o, self)
    def __sub__(self, o: Any) -> Any: return bind("sub", self, o)
    def __rsub__(self, o: Any) -> Any: return bind("sub", o, self)
    def __mul__(self, o: Any) -> Any: return bind("mul", self, o)
    def __rmul__(self, o: Any) -> Any: return bind("mul", o, self)
    def __truediv__(self, o: Any) -> Any: return bind("div", self, o)
    def __rtruediv__(self, o: Any) -> Any: return bind("div", o, self)
    def __pow__(self, o: Any) -> Any: return cfgrad_numpy.NAMESPACE["power"](self, o)
    def __rpow__(self, o: Any) -> Any: return cfgrad_numpy.NAMESPACE["power"](o, self)
    def __mod__(self, o: Any) -> Any: return bind("mod", self, o)
    def __rmod__(self, o: Any) -> Any: return bind("mod", o, self)
    def __floordiv__(self, o: Any) -> Any: return cfgrad_numpy.NAMESPACE["floor_divide"](self, o)
    def __rfloordiv__(self, o: Any) -> Any: return cfgrad_numpy.NAMESPACE["floor_divide"](o, self)
    def __matmul__(self, o: Any) -> Any: return bind("matmul", self, o)
    def __rmatmul__(self, o: Any) -> Any: return bind("matmul", o, self)
    def __neg__(self) -> Any: return bind("neg", self)
    def __pos__(self) -> Any: return self
    def __abs__(self) -> Any: return bind("abs", self)

    def __round__(self, ndigits: int | None = None) -> Any:
        # round(x) and round(x, n) are cnp.round: numpy's halves-to-even, and a traced
        # float rather than a Python int, whose value is not known while tracing
        return cfgrad_numpy.NAMESPACE["round"](self, 0 if ndigits is None else ndigits)

    def __lt__(self, o: Any) -> Any: return bind("lt", self, o)
    def __le__(self, o: Any) -> Any: return bind("le", self, o)
    def __gt__(self, o: Any) -> Any: return bind("gt", self, o)
    def __ge__(self, o: Any) -> Any: return bind("ge", self, o)
    def __eq__(self, o: Any) -> Any: return bind("eq", self, o)  # type: ignore[override]
    def __ne__(self, o: Any) -> Any: return bind("ne", self, o)  # type: ignore[override]
    def __and__(self, o: Any) -> Any: return bind("bitwise_and", self, o)
    def __rand__(self, o: Any) -> Any: return bind("bitwise_and", o, self)
    def __or__(self, o: Any) -> Any: return bind("bitwise_or", self, o)
    def __ror__(self, o: Any) -> Any: return bind("bitwise_or", o, self)
    def __xor__(self, o: Any) -> Any: return bind("bitwise_xor", self, o)
    def __rxor__(self, o: Any) -> Any: return bind("bitwise_xor", o, self)
    def __invert__(self) -> Any: return bind("invert", self)
    __hash__ = object.__hash__

    def __getitem__(self, index: Any) -> Any:
        return cfgrad_numpy.NAMESPACE["_getitem"](self, index)

    @property
    def T(self) -> Any:
        return cfgrad_numpy.NAMESPACE["transpose"](self)

    @property
    def real(self) -> Any:
        return cfgrad_numpy.NAMESPACE["real"](self)

    @property
    def imag(self) -> Any:
        return cfgrad_numpy.NAMESPACE["imag"](self)

    @property
    def at(self) -> Any:
        """JAX's indexed updates: `x.at[idx].set(v)`, `.add`, `.multiply`, `.min`, `.max`,
        `.get` (cfgrad.numpy.core), as an Array has them."""
        return cfgrad_numpy.NAMESPACE["_at"](self)

    def __getattr__(self, name: str) -> Any:
        # array methods: x.sum(), x.reshape(…), x.astype(…), …
        fn = cfgrad_numpy.NAMESPACE.get(name)
        if fn is None or name.startswith("_"):
            raise AttributeError(f"traced arrays have no attribute {name!r}")
        if name == "astype":
            return lambda dtype: fn(self, dtype)
        if name in ("reshape", "transpose"):  # x.reshape(2, 3) and x.reshape((2, 3)) alike
            return lambda *shape: fn(self, shape[0] if len(shape) == 1 else shape) if shape \
                else fn(self)
        return lambda *a, **k: fn(self, *a, **k)


# ---------------------------------------------------------------------------------
# The trace: builds one Program
# ---------------------------------------------------------------------------------

def nested_transformation_error() -> LoweringError:
    """The error for a value of a function being traced reaching a program that is traced
    on its own and cannot take it in (a custom rule closing over it)."""
    return LoweringError(
        "a traced value of the function being transformed reached a program traced on its "
        "own: a cg.custom_vjp's fwd or bwd, or a cg.custom_jvp's rule, closes over it. Pass "
        "the value to the custom function as an argument instead")


_lowering_epoch = 0


def lowering_epoch() -> int:
    """Caches of lowered Programs are valid only for the epoch they were traced in. A new
    epoch begins when a custom rule is redefined (`invalidate_lowerings`) and when a pytree
    class is registered: the dispatch caches that find a call of leaves by the arguments'
    types alone (api.lowered's, grad's, jit's) would otherwise give an argument of that
    class, a leaf when cached, the lowering of a leaf instead of its children's."""
    return _lowering_epoch + treelib.registrations()


def invalidate_lowerings() -> None:
    """Something baked into lowered Programs was redefined (a custom rule, see custom.py):
    every Program traced so far is stale."""
    global _lowering_epoch
    _lowering_epoch += 1


def _const_key(a: np.ndarray) -> Any:
    return (a.dtype.str, a.shape, a.tobytes()) if a.size <= 16 else ("big", id(a))


class Trace:
    """The state of one lowering: the blocks built so far and the insertion point."""

    def __init__(self, name: str, check_scopes: bool = True, capture: bool = False,
                 home: SourceLoc | None = None, derived: bool = False):
        self.name = name
        # Where the nodes come from (`loc`): a node traced while the user's function runs
        # has its line; one that cfgrad emits on its own, while no line of the function is
        # on the stack, has `home`, the function's def line, not the line of the code that
        # asked for the trace (`outside`: that code's frame, by identity, as it stays on
        # the stack while the trace is built). A `derived` program (an adjoint, a JVP
        # program) reads no line from the stack: its builder names the forward node or
        # region each node comes from, and `home` is the forward program's.
        self.home = home
        self.derived = derived
        outside = None if derived else user_frame()
        self._outside = None if outside is None else (id(outside), outside.f_code)
        # A nested transformation's trace (`capture`): a value of an enclosing trace that
        # the function closes over becomes one more parameter of this Program, and the
        # enclosing trace passes it in (outer Value -> (its tracer, the parameter here))
        self.captured: dict[Value, tuple[Tracer, Value]] | None = {} if capture else None
        self.blocks: list[Block] = []
        self.regions: list[Region] = []
        self.entry = self.new_block(None, "entry")
        self.current = self.entry
        self.scope: Scope | None = Scope(None, None, "the function body") if check_scopes else None
        self.consts: dict[Any, Value] = {}
        self.const_nodes: list[Node] = []
        self._keep_alive: list[np.ndarray] = []
        self.finished = False
        self.loc_override: SourceLoc | None = None
        self.origin: str | None = None  # reverse builder: the primitive being differentiated
        self.counters = {"if": 0, "loop": 0}
        # values a while_loop's cond_fun computed in its header, by defining node, and their
        # copies per block of the body that used them (see `_recomputed`)
        self.condition_defs: dict[Value, Node] = {}
        self._recomputed: dict[tuple[Block, Value], Value] = {}

    # -- construction --------------------------------------------------------------
    def new_block(self, region: Region | None, role: str) -> Block:
        b = Block(region, role)
        self.blocks.append(b)
        return b

    def tracer(self, v: Value) -> Tracer:
        return Tracer(v, self, self.scope)

    def loc(self) -> SourceLoc | None:
        if self.loc_override is not None or self.derived:
            return self.loc_override or self.home
        frame = user_frame()
        if frame is None or (self.home is not None
                             and (id(frame), frame.f_code) == self._outside):
            return self.home
        return frame_loc(frame)

    def const(self, value: Any, dtype: np.dtype | None = None) -> Value:
        """A constant, deduplicated and hoisted into the entry block (it dominates all)."""
        # a copy: the Program keeps the value it was traced with, whatever the caller later
        # does to its array (closed-over arrays are constants, as under jax.jit)
        try:
            a = np.array(value, dtype=dtype, copy=True)
        except OverflowError:
            if dtype is not None and isinstance(value, int) and -2**63 <= value < 2**63:
                loc = self.loc()
                raise LoweringError(  # numpy's OverflowError (`np.uint8(5) // -1`)
                    f"the Python int {value}{' at ' + str(loc) if loc else ''} is out of "
                    f"bounds for the {np.dtype(dtype)} it meets, as numpy says too; cast "
                    "one side first (cnp.astype)") from None
            a = np.array(value, dtype=object)  # a Python int beyond int64: refused below
        problem = untraceable_dtype(a.dtype)
        if problem is not None:
            loc = self.loc()
            where = f" at {loc}" if loc else ""
            if a.dtype == object and isinstance(value, int):
                raise LoweringError(f"the Python int {value}{where} is beyond int64, cfgrad's "
                                    "integers; use a float or a smaller int")
            hint = treelib.registration_hint(value)
            if a.dtype == object and hint and not isinstance(value, list | tuple | np.ndarray):
                # an object where a value was expected: a carry, a branch result, an
                # operand of a cnp function; most often a container never registered
                raise LoweringError(f"a {type(value).__name__} was used as a traced value"
                                    f"{where}: {hint}")
            raise LoweringError(f"a constant{where} is {problem}")
        key = _const_key(a)
        v = self.consts.get(key)
        if v is None:
            v = Value(type_of(a))
            self.const_nodes.append(Node("const", [], {"value": a}, [v], None))
            self.consts[key] = v
            self._keep_alive.append(a)
        return v

    def value_of(self, x: Any, dtype: np.dtype | None = None) -> Value:
        """The Value of a tracer (checked for scope) or of a concrete input (a constant)."""
        if isinstance(x, Tracer):
            if x._cfgrad_trace is not self:
                if is_being_built(x._cfgrad_trace):  # an enclosing trace's value
                    if self.captured is None:
                        raise nested_transformation_error()
                    return self._captured_value(x, dtype)
                raise LoweringError(
                    "a traced value from another (finished) trace was used; tracers must not "
                    "escape the function being transformed (store results, not tracers)")
            if self.scope is not None and x.scope is not None and not x.scope.encloses(self.scope):
                loc = self.loc()
                raise LoweringError(
                    f"a value computed inside {x.scope.what} is used outside it"
                    f"{' at ' + str(loc) if loc else ''}; return it from the branch or loop "
                    "instead (values leave a cond through its results and a loop through its "
                    "carry)")
            v = x.value
            if v in self.condition_defs:  # registered once the loop's header is complete
                v = self._recomputed_value(v)
            if dtype is not None and v.type.dtype != dtype:
                v = self.emit(PRIMITIVES["astype"], [x], {"dtype": dtype}, None).value
            return v
        if isinstance(x, bool | int | float | complex) and dtype is None:
            dtype = np.dtype(type(x).__name__ if not isinstance(x, bool) else np.bool_)
        return self.const(x, dtype)

    def _captured_value(self, x: Tracer, dtype: np.dtype | None) -> Value:
        """The parameter standing for `x`, a value of an enclosing trace this function
        closes over (made on first use), cast to `dtype` when asked."""
        entry = self.captured.get(x.value)
        if entry is None:
            entry = self.captured[x.value] = (x, Value(x.value.type, x.value.hint))
        v = entry[1]
        if dtype is not None and v.type.dtype != dtype:
            v = self.emit(PRIMITIVES["astype"], [self.tracer(v)], {"dtype": dtype}, None).value
        return v

    def _recomputed_value(self, v: Value) -> Value:
        """`v`, computed by a while_loop's cond_fun, recomputed in the current body block.

        A cond_fun may hand values to the body (Newton's residual through a closure or a
        cache dict). The header that computes them is not differentiated (it only feeds the
        predicate), so a body reading the header's value would get no gradient through it:
        the body recomputes the value from the carry instead, which is the same number and
        an ordinary, differentiated part of the iteration. JAX rejects such a use as a
        leaked tracer; this makes it work."""
        key = (self.current, v)
        copy = self._recomputed.get(key)
        if copy is None:
            node = self.condition_defs[v]
            inputs = [self._recomputed_value(i) if i in self.condition_defs else i
                      for i in node.inputs]
            outputs = [Value(o.type, o.hint) for o in node.outputs]
            self.current.nodes.append(Node(node.op, inputs, node.params, outputs, node.loc,
                                           node.origin))
            for original, out in zip(node.outputs, outputs):
                self._recomputed[(self.current, original)] = out
            copy = self._recomputed[key]
        return copy

    def emit(self, prim: Primitive, args: list[Any], params: dict[str, Any],
             dtype: np.dtype | None) -> Any:
        if self.finished:
            raise LoweringError(
                f"{prim.name} was applied to a traced value from the finished trace of "
                f"{self.name}; tracers must not escape the function being transformed "
                "(return values instead of storing them)")
        if dtype is not None:  # the operands' common dtype (x * 1j: complex)
            self._check_made_dtype(prim, dtype)
        values = [self.value_of(a, dtype if i >= prim.promote_from else None)
                  for i, a in enumerate(args)]
        try:
            out_type = prim.abstract([v.type for v in values], **params)
        except LoweringError as e:
            loc = self.loc()
            raise LoweringError(f"{e}{' at ' + str(loc) if loc else ''}") from None
        if not prim.multi_output:
            self._check_made_dtype(prim, out_type.dtype)
        if prim.multi_output:
            outs = [Value(t) for t in out_type]
            self.current.nodes.append(Node(prim.name, values, params, outs, self.loc(),
                                                    self.origin))
            return [self.tracer(o) for o in outs]
        out = Value(out_type)
        self.current.nodes.append(Node(prim.name, values, params, [out], self.loc(),
                                                self.origin))
        return self.tracer(out)

    def _check_made_dtype(self, prim: Primitive, dtype: np.dtype) -> None:
        problem = untraceable_dtype(dtype)
        if problem is not None:
            loc = self.loc()
            raise LoweringError(f"{prim.name}{' at ' + str(loc) if loc else ''} would make a "
                                f"value {problem}")

    def emit_special(self, op: str, inputs: list[Value], params: dict[str, Any],
                     out_types: list[TensorType]) -> list[Value]:
        """Runtime nodes of adjoint programs (Primal, LogPop, TripPop, LoopState)."""
        outs = [Value(t) for t in out_types]
        self.current.nodes.append(Node(op, inputs, params, outs, self.loc(), self.origin))
        return outs

    def finish(self, params: list[Value], outputs: list[Value]) -> Program:
        self.current.term = Return(outputs)
        self.entry.nodes[:0] = self.const_nodes
        self.finished = True
        program = Program(self.name, params, self.blocks, self.regions)
        program.loc = self.home
        return program

    # -- scopes --------------------------------------------------------------------
    def enter_scope(self, region: Region, what: str) -> Scope | None:
        saved = self.scope
        if saved is not None:
            self.scope = Scope(saved, region, what)
        return saved

    def parent_region(self) -> Region | None:
        s = self.scope
        while s is not None and s.region is None:
            s = s.parent
        return s.region if s is not None else None

    # -- structured control flow ---------------------------------------------------------
    def _leaf_values(self, leaves: list[Any], like: list[TensorType] | None = None) -> list[Value]:
        """Values for output leaves; Python scalars take the dtype of `like` (weak typing)."""
        out = []
        for i, leaf in enumerate(leaves):
            dtype = None
            if like is not None and isinstance(leaf, bool | int | float) and not isinstance(
                    leaf, Tracer):
                dtype = like[i].dtype
            out.append(self.value_of(leaf, dtype))
        return out

    def lower_if(self, kind: str, selector: Value, funs: Sequence[Callable], operands: tuple,
                 loc: SourceLoc | None) -> Any:
        region = IfRegion(f"if#{self.counters['if']}", self.parent_region(), loc, kind=kind)
        self.counters["if"] += 1
        self.regions.append(region)
        branch = self.current
        region.branch = branch
        keys = [True, False] if kind == "cond" else list(range(len(funs)))
        results: list[tuple[treelib.TreeDef, list[Any]]] = []
        for key, fn in zip(keys, funs):
            entry = self.new_block(region, f"case {key_text(key)}")
            entry.preds = [Edge(branch, key)]
            region.cases.append(entry)
            self.current = entry
            saved = self.enter_scope(region, f"{region.id} ({kind} case {key_text(key)})")
            try:
                leaves, td = treelib.flatten(fn(*operands))
                # traced leaves are resolved inside the case's scope; Python scalars wait
                # until every case is known, to take their dtype from the others (weak typing)
                results.append((td, [self.value_of(x) if isinstance(x, Tracer) else x
                                     for x in leaves]))
            finally:
                self.scope = saved
            region.case_exits.append(self.current)
        ref_td, ref_leaves = results[0]
        for td, _ in results[1:]:
            if td != ref_td:
                raise LoweringError(self._mismatch(kind, "branches return different structures",
                                                   ref_td, td, keys, keys[results.index(
                                                       next(r for r in results if r[0] == td))],
                                                   loc))
        like = [next((case[1][i].type.dtype for case in results
                      if isinstance(case[1][i], Value)), None) for i in range(len(ref_leaves))]
        for i, dtype in enumerate(like):  # Python numbers only: their common type (2 | 0.5)
            numbers = [case[1][i] for case in results]
            if dtype is None and all(isinstance(x, bool | int | float | complex)
                                     for x in numbers):
                like[i] = np.result_type(*numbers)
        case_values = [[x if isinstance(x, Value) else self.value_of(
            x, like[i] if like[i] is not None and isinstance(x, bool | int | float | complex)
            else None) for i, x in enumerate(leaves)] for _, leaves in results]
        for vals, key in zip(case_values, keys):
            for i, (a, b) in enumerate(zip(case_values[0], vals)):
                if a.type != b.type:
                    raise LoweringError(
                        f"{kind} at {loc}: the branches return different types for output "
                        f"{i}: case {key_text(keys[0])} gives {a.type}, case {key_text(key)} "
                        f"gives {b.type}; cast one of them (cnp.astype) so both agree")
        merge = self.new_block(region, "merge")
        region.merge = merge
        for exit_block in region.case_exits:
            exit_block.term = Jmp(merge)
            merge.preds.append(Edge(exit_block))
        branch.term = Cond(selector, list(zip(keys, region.cases)))
        outs = []
        for i in range(len(case_values[0])):
            phi = Phi(Value(case_values[0][i].type), [vals[i] for vals in case_values])
            merge.phis.append(phi)
            outs.append(self.tracer(phi.out))
        self.current = merge
        return treelib.unflatten(ref_td, outs)

    @staticmethod
    def _mismatch(kind: str, what: str, td_a: Any, td_b: Any, keys: list, key: Any,
                  loc: Any) -> str:
        return (f"{kind} at {loc}: {what}: case {key_text(keys[0])} returns {td_a.describe()} "
                f"but case {key_text(key)} returns {td_b.describe()}")

    def lower_loop(self, kind: str, cond_fun: Callable, body_fun: Callable, init_val: Any,
                   checkpoint: Any, max_iters: int | None, loc: SourceLoc | None,
                   bounds: tuple[Value, Value] | None = None,
                   stack: int | None = None) -> Any:
        """Lower a loop; returns the carry after it. With `stack` = n, a scan: the body
        returns (carry, y, row) and each leaf of y is written as row `row` of an (n, …)
        stack, a carry of its own that only `write_row` touches (in place); returns
        (carry, stacked ys)."""
        label = "scan" if kind == "scan" else f"{kind}_loop"  # the user's function
        check_strategy(checkpoint, f"{label} at {loc}")
        init_leaves, init_td = treelib.flatten(init_val)
        init_values = [self.value_of(x) for x in init_leaves]
        region = LoopRegion(f"loop#{self.counters['loop']}", self.parent_region(), loc, kind=kind,
                            checkpoint=checkpoint, max_iters=max_iters)
        self.counters["loop"] += 1
        self.regions.append(region)
        region.trip_bounds = bounds
        pre = self.current
        region.preheader = pre
        header = self.new_block(region, "header")
        region.header = header
        header.preds = [Edge(pre)]
        pre.term = Jmp(header)
        phis = [Phi(Value(v.type), [v]) for v in init_values]
        header.phis = phis
        self.current = header
        saved = self.enter_scope(region, f"{region.id} ({kind}_loop)")
        try:
            carry = treelib.unflatten(init_td, [self.tracer(p.out) for p in phis])
            pred = cond_fun(carry)
            selector = check_predicate(self, pred, f"{kind}_loop condition", loc)
            if self.current is not header:
                raise LoweringError(
                    f"{label} at {loc}: cond_fun contains control flow; compute the "
                    "predicate with straight-line operations (cnp.where, comparisons)")
            self.condition_defs.update((o, node) for node in header.nodes for o in node.outputs)
            body = self.new_block(region, "body")
            region.body = body
            body.preds = [Edge(header, True)]
            self.current = body
            new = body_fun(carry)
            if stack is not None:
                new, ys, row = new
            new_leaves, new_td = treelib.flatten(new)
            if new_td != init_td:
                raise LoweringError(
                    f"{label} at {loc}: the body changes the carry's structure: before "
                    f"{init_td.describe()}, after {new_td.describe()}")
            new_values = self._leaf_values(new_leaves, [v.type for v in init_values])
            if stack is not None:
                y_leaves, ys_td = treelib.flatten(ys)
                stack_phis = self._stack_rows(region, stack, self._leaf_values(y_leaves))
                new_values += [self.emit(PRIMITIVES["write_row"], [self.tracer(p.out), row, y],
                                         {}, None).value
                               for p, y in zip(stack_phis, y_leaves)]
                phis = phis + stack_phis
                header.phis = phis
        finally:
            self.scope = saved
        counted = kind != "while"  # fori and scan carry their counter as leaf 0
        for i, (a, b) in enumerate(zip(init_values, new_values)):
            if a.type != b.type:
                raise LoweringError(
                    f"{label} at {loc}: the body changes carry leaf {i - counted} from "
                    f"{a.type} (before) to {b.type} (after); a carry keeps its shape and dtype, "
                    "so cast or broadcast the initial value to match")
        latch = self.current
        region.latch = latch
        latch.term = Jmp(header)
        header.preds.append(Edge(latch))
        for phi, v in zip(phis, new_values):
            phi.inputs.append(v)
        exit_block = self.new_block(region, "exit")
        region.exit = exit_block
        exit_block.preds = [Edge(header, False)]
        header.term = Cond(selector, [(True, body), (False, exit_block)])
        exit_phis = [Phi(Value(p.out.type), [p.out]) for p in phis]
        exit_block.phis = exit_phis
        self.current = exit_block
        out = [self.tracer(p.out) for p in exit_phis]
        carry_out = treelib.unflatten(init_td, out[:len(init_values)])
        if stack is None:
            return carry_out
        return carry_out, treelib.unflatten(ys_td, out[len(init_values):])

    def _stack_rows(self, region: LoopRegion, n: int, y_values: list[Value]) -> list[Phi]:
        """The header Phis of a scan's output stacks, one per leaf of y: each starts as a
        zero (n, …) view made in the preheader (the first `write_row` copies it into a
        buffer of the loop's own) and is updated by `write_row` at the row index."""
        current, self.current = self.current, region.preheader
        try:
            starts = [self.emit(PRIMITIVES["broadcast_to"], [np.zeros((), y.type.dtype)],
                                {"shape": (n, *y.type.shape)}, None).value
                      for y in y_values]
        finally:
            self.current = current
        return [Phi(Value(v.type), [v]) for v in starts]


def check_predicate(trace: Trace, pred: Any, what: str, loc: Any) -> Value:
    v = trace.value_of(pred) if isinstance(pred, Tracer) else trace.const(np.asarray(pred))
    if v.type.shape != () or v.type.dtype != np.bool_:
        raise LoweringError(
            f"{what} at {loc} must be a scalar boolean, got {v.type}; compare explicitly "
            "(e.g. x > 0) or reduce an array predicate with cnp.all / cnp.any")
    return v


# ---------------------------------------------------------------------------------
# The public control-flow functions
# ---------------------------------------------------------------------------------


def cond(pred: Any, true_fun: Callable, false_fun: Callable, *operands: Any) -> Any:
    """`true_fun(*operands) if pred else false_fun(*operands)`, differentiably.

    Only the taken branch runs and only it is differentiated, so a NaN in the untaken
    branch (say `sqrt` of a negative) never reaches the gradient."""
    require_callable(true_fun, "cond", "true_fun")
    require_callable(false_fun, "cond", "false_fun")
    trace = current_trace()
    if trace is None:
        return true_fun(*operands) if bool(np.asarray(pred)) else false_fun(*operands)
    loc = current_loc()
    selector = check_predicate(trace, pred, "cond predicate", loc)
    return trace.lower_if("cond", selector, [true_fun, false_fun], operands, loc)


def switch(index: Any, branches: Sequence[Callable], *operands: Any) -> Any:
    """`branches[clip(index, 0, len(branches) - 1)](*operands)`, differentiably."""
    branches = list(branches)
    if not branches:
        raise LoweringError("switch needs at least one branch")
    for i, branch in enumerate(branches):
        require_callable(branch, "switch", f"branch {i}")
    trace = current_trace()
    if trace is None:
        i = int(np.clip(np.asarray(index), 0, len(branches) - 1))
        return branches[i](*operands)
    loc = current_loc()
    iv = trace.value_of(index) if isinstance(index, Tracer) else trace.const(np.asarray(index))
    if iv.type.shape != () or iv.type.dtype.kind not in "iu":
        raise LoweringError(f"switch index at {loc} must be an integer scalar, got {iv.type}; "
                            "convert it with cnp.astype(index, 'int64')")
    # the index is not clipped here: a switch's Cond clamps it when it runs (design: one
    # place for the clamp, so parsed and traced programs agree)
    return trace.lower_if("switch", iv, branches, operands, loc)


def while_loop(cond_fun: Callable, body_fun: Callable, init_val: Any, *,
               checkpoint: Any = None, max_iters: int | None = None) -> Any:
    """`while cond_fun(val): val = body_fun(val)`, reverse-differentiable.

    `checkpoint` chooses how the reverse pass gets each iteration's state (see
    cfgrad.checkpoint); `max_iters` bounds the loop (`LoopLimitError` past it)."""
    require_callable(cond_fun, "while_loop", "cond_fun")
    require_callable(body_fun, "while_loop", "body_fun")
    if max_iters is not None and (isinstance(max_iters, bool) or not isinstance(max_iters, int)
                                  or max_iters < 0):
        raise ArgumentValueError(f"while_loop: max_iters must be a non-negative int, got "
                                 f"{max_iters!r}")
    trace = current_trace()
    if trace is None:
        val, n = init_val, 0
        while bool(np.asarray(cond_fun(val))):
            if max_iters is not None and n >= max_iters:
                raise LoopLimitError(f"while_loop at {current_loc()} exceeded max_iters="
                                     f"{max_iters}")
            val, n = body_fun(val), n + 1
        return val
    return trace.lower_loop("while", cond_fun, body_fun, init_val, checkpoint, max_iters,
                            current_loc())


def fori_loop(lower: Any, upper: Any, body_fun: Callable, init_val: Any, *,
              checkpoint: Any = None) -> Any:
    """`for i in range(lower, upper): val = body_fun(i, val)`, reverse-differentiable.

    The trip count is known when the loop is entered, which lets `Binomial` checkpointing
    use the optimal (revolve) schedule. Bounds may be traced integers."""
    require_callable(body_fun, "fori_loop", "body_fun")
    trace = current_trace()
    if trace is None:
        val = init_val
        for i in range(int(np.asarray(lower)), int(np.asarray(upper))):
            val = body_fun(np.int64(i), val)
        return val
    loc = current_loc()
    lo = trace.value_of(lower) if isinstance(lower, Tracer) else trace.const(np.asarray(lower))
    hi = trace.value_of(upper) if isinstance(upper, Tracer) else trace.const(np.asarray(upper))
    for name, v in (("lower", lo), ("upper", hi)):
        if v.type.shape != () or v.type.dtype.kind not in "iu":
            raise LoweringError(f"fori_loop at {loc}: the {name} bound must be an integer "
                                f"scalar, got {v.type}")
    dtype = np.result_type(lo.type.dtype, hi.type.dtype)
    lo_t = trace.tracer(lo) if lo.type.dtype == dtype else bind("astype", trace.tracer(lo),
                                                                  dtype=dtype)
    hi_t = trace.tracer(hi)
    out = trace.lower_loop(
        "fori", lambda c: c[0] < hi_t, lambda c: (c[0] + 1, body_fun(c[0], c[1])),
        (lo_t, init_val), checkpoint, None, loc, bounds=(lo_t.value, hi))
    return out[1]


def scan(f: Callable, init: Any, xs: Any = None, length: int | None = None,
         reverse: bool = False, *, checkpoint: Any = None) -> tuple[Any, Any]:
    """`lax.scan`: `carry, y = f(carry, x)` for each x of `xs` (pytree leaves sliced along
    their axis 0), returning the final carry and the ys stacked along axis 0.

    Lowered as a loop of `length` trips (a `scan` region) under the `checkpoint` strategy,
    like a fori_loop; each iteration writes its y as a row of the output stack in place
    (`write_row`), so no strategy snapshots or tapes the stack, and the reverse pass reads
    each row's cotangent. `reverse=True` runs from the last x to the first; ys keep the
    order of xs, as in JAX."""
    require_callable(f, "scan", "f")
    n = _scan_length(xs, length)
    if not isinstance(reverse, bool | np.bool_):
        raise ArgumentTypeError(f"scan: reverse must be True or False (static), got "
                                f"{reverse!r}")
    x_leaves, x_td = treelib.flatten(xs)
    trace = current_trace()
    if trace is None:
        return _scan_eagerly(f, init, x_leaves, x_td, n, reverse)
    loc = current_loc()

    def body(c: Any) -> Any:
        r = n - 1 - c[0] if reverse else c[0]
        # a scan of no steps traces f on zeros (the body never runs): no row to index
        x = treelib.unflatten(x_td, [bind("index", leaf, r, spec=("$",)) if n else np.zeros(
            leaf.shape[1:], leaf.dtype) for leaf in x_leaves])
        carry, y = _carry_and_y(f(c[1], x), loc)
        return (c[0] + 1, carry), y, r

    start, stop = trace.const(np.int64(0)), trace.const(np.int64(n))
    (_, carry), ys = trace.lower_loop(
        "scan", lambda c: c[0] < n, body, (trace.tracer(start), init), checkpoint, None, loc,
        bounds=(start, stop), stack=n)
    return carry, ys


def _scan_length(xs: Any, length: int | None) -> int:
    """The trip count: the common axis-0 size of xs's leaves, which `length` must equal."""
    if length is not None and (isinstance(length, bool) or not isinstance(
            length, int | np.integer) or length < 0):
        raise ArgumentValueError(f"scan: length must be a non-negative int, got {length!r}")
    sizes = set()
    for leaf in treelib.flatten(xs)[0]:
        shape = np.shape(leaf) if not isinstance(leaf, Tracer) else leaf.shape
        if not shape:
            raise ArgumentValueError(f"scan: every leaf of xs must have an axis 0 to scan "
                                     f"over; got a scalar leaf ({leaf!r})")
        sizes.add(shape[0])
    if length is not None:
        sizes.add(int(length))
    if len(sizes) > 1:
        raise ArgumentValueError(f"scan: the leaves of xs (and length, if given) disagree on "
                                 f"the number of steps: {sorted(sizes)}")
    if not sizes:
        raise ArgumentValueError("scan: with xs None (or without leaves), give length")
    return sizes.pop()


def _carry_and_y(out: Any, loc: Any) -> tuple[Any, Any]:
    if not isinstance(out, tuple | list) or len(out) != 2:
        raise LoweringError(f"scan at {loc}: f must return a pair (carry, y), got "
                            f"{type(out).__name__}")
    return out[0], out[1]


def _scan_eagerly(f: Callable, init: Any, x_leaves: list[Any], x_td: Any, n: int,
                  reverse: bool) -> tuple[Any, Any]:
    """scan on concrete values, as Python (like the other control flow outside a trace).
    A scan of no steps calls f once on zeros, for the structure and types of y."""
    carry, ys = init, []
    for t in (reversed(range(n)) if reverse else range(n)):
        carry, y = _carry_and_y(f(carry, treelib.unflatten(
            x_td, [np.asarray(leaf)[t] for leaf in x_leaves])), None)
        ys.append(treelib.flatten(y)[0])
    if reverse:
        ys.reverse()
    if n == 0:
        probe = treelib.unflatten(x_td, [np.zeros(np.shape(leaf)[1:], np.asarray(leaf).dtype)
                                         for leaf in x_leaves])
        y = _carry_and_y(f(init, probe), None)[1]
        y_leaves, y_td = treelib.flatten(y)
        return carry, treelib.unflatten(y_td, [np.zeros((0, *np.shape(v)), np.asarray(v).dtype)
                                               for v in y_leaves])
    y_td = treelib.flatten(y)[1]
    return carry, treelib.unflatten(y_td, [np.stack([np.asarray(v) for v in column])
                                           for column in zip(*ys)])


# ---------------------------------------------------------------------------------
# lower()
# ---------------------------------------------------------------------------------


# What a traced value may be: the dtypes the IR names (bool, integers, floats, complex).
TRACEABLE_DTYPES = frozenset(DTYPE_BY_SHORT_NAME[short].name for short in DTYPE_BY_SHORT_NAME)


def untraceable_dtype(dtype: np.dtype) -> str | None:
    """Why values of `dtype` cannot be traced, or None when they can."""
    if dtype.name not in TRACEABLE_DTYPES:
        return (f"of dtype {dtype}; cfgrad traces bool, integer and float values of at most "
                "64 bits and complex64/complex128 values only")
    return None


def argument_problem(x: Any) -> str | None:
    """Why `x` cannot be a leaf of a traced argument, or None when it can.

    Anything rejected here would otherwise give a wrong number (an `np.matrix`, whose `*`
    is a matrix product) or a raw exception deep in the interpreter (object, string,
    structured, datetime dtypes)."""
    if isinstance(x, Tracer):
        raise LoweringError(
            "a traced value from a finished trace was passed to a transformation; tracers "
            "must not escape the function being transformed (return values instead of "
            "storing them)")
    if isinstance(x, int) and not isinstance(x, bool) and not -2**63 <= x < 2**63:
        return (f"the Python int {x}, beyond int64; pass it as a float, or close over it "
                "(cfgrad's integers are numpy's int64)")
    if isinstance(x, bool | int | float | complex):
        return None
    if isinstance(x, np.matrix):
        return ("an np.matrix, whose * and ** are matrix products; pass a plain array "
                "(np.asarray(x)) and use @ for products")
    if isinstance(x, np.ma.MaskedArray):
        return ("a masked array, whose mask cfgrad would ignore; pass x.filled(value) or "
                "the data and the mask as two arrays")
    if isinstance(x, np.ndarray | np.generic):
        problem = untraceable_dtype(np.asarray(x).dtype)
        if problem is None:
            return None
        return (f"an array {problem}: convert it, or pass it through static_argnums or a "
                "closure")
    hint = treelib.registration_hint(x)
    return (f"a {type(x).__name__}; cfgrad traces arrays and Python scalars only. "
            + (f"{hint}; or mark" if hint else "Mark")
            + " the argument static (static_argnums), or close over it")


def _named_arguments(fun: Callable, args: tuple, dynamic: list[int],
                     kwargs: dict[str, Any]) -> list[tuple[str, Any]]:
    """(name, pytree) of each traced argument, in the order their leaves are flattened:
    the dynamic positional arguments, then the keyword arguments by sorted name."""
    positional = [(argument_name(fun, pos), args[pos]) for pos in dynamic]
    return positional + [(k, kwargs[k]) for k in sorted(kwargs)]


def argument_name(fun: Callable, pos: int) -> str:
    """The name of `fun`'s positional parameter `pos` (`arg2` when it has none: a
    builtin, or `*args`), for messages and parameter hints."""
    try:
        names = list(inspect.signature(fun).parameters)
    except (TypeError, ValueError):
        names = []
    return names[pos] if pos < len(names) else f"arg{pos}"


def check_arguments(fun: Callable, args: tuple, static_argnums: tuple[int, ...] = (),
                    kwargs: dict[str, Any] | None = None) -> None:
    """Raise `ArgumentTypeError` naming the first argument leaf `fun` cannot be traced with."""
    dynamic = [i for i in range(len(args)) if i not in static_argnums]
    for name, tree in _named_arguments(fun, args, dynamic, kwargs or {}):
        leaves, td = treelib.flatten(tree)
        for i, leaf in enumerate(leaves):
            problem = argument_problem(leaf)
            if problem is not None:
                where = f"argument `{name}`" + ("" if td.kind == "leaf" else f" (leaf {i})")
                raise ArgumentTypeError(
                    f"{getattr(fun, '__name__', 'f')}: {where} is {problem}")


def trace_program(fun: Callable, args: tuple, static_argnums: tuple[int, ...] = (),
                  name: str | None = None, kwargs: dict[str, Any] | None = None,
                  home: Callable | None = None) -> Program:
    """Trace `fun(*args, **kwargs)` into a verified Program; statics are baked in as
    constants. Keyword arguments are traced, after the positional ones, as in JAX.
    `home`: the user's function `fun` stands for, when `fun` is cfgrad's wrapper of it
    (its def line is the Program's `loc`)."""
    with LOWERING_LOCK:
        return _trace_program(fun, args, static_argnums, name, kwargs or {},
                              definition(fun if home is None else home))


def _trace_program(fun: Callable, args: tuple, static_argnums: tuple[int, ...],
                   name: str | None, kwargs: dict[str, Any], home: SourceLoc | None) -> Program:
    check_arguments(fun, args, static_argnums, kwargs)
    dynamic = [i for i in range(len(args)) if i not in static_argnums]
    named = _named_arguments(fun, args, dynamic, kwargs)
    leaves, in_tree = treelib.flatten(tuple(tree for _, tree in named))
    hints = []
    for base, tree in named:
        n = treelib.flatten(tree)[1].num_leaves
        hints += [base] if n == 1 else [f"{base}_{i}" for i in range(n)]
    params = [Value(type_of(x), h) for x, h in zip(leaves, hints)]
    trace = Trace(name or getattr(fun, "__name__", "f"), home=home)
    with tracing(trace):
        tracers = [trace.tracer(p) for p in params]
        traced = treelib.unflatten(in_tree, tracers)
        full = list(args)
        for pos, a in zip(dynamic, traced):
            full[pos] = a
        out = fun(*full, **dict(zip(sorted(kwargs), traced[len(dynamic):])))
        out_leaves, out_tree = treelib.flatten(out)
        for i, leaf in enumerate(out_leaves):
            problem = None if isinstance(leaf, Tracer) else argument_problem(leaf)
            if problem is not None:
                raise ArgumentTypeError(f"{trace.name}: output leaf {i} of {out_tree.describe()} "
                                        f"is {problem}")
        outputs = [trace.value_of(x) for x in out_leaves]
    program = trace.finish(params, outputs)
    program.in_tree, program.out_tree = in_tree, out_tree
    verify(program)
    return program


def trace_nested(fun: Callable, leaves: list[Any], name: str,
                 home: Callable | None = None) -> tuple[Program, list[Tracer]]:
    """Trace `fun(*leaves)` (flat leaves, traced or concrete; `fun` returns a pytree) for
    a transformation applied inside another's trace: the Program's parameters are the
    leaves, then one per value of an enclosing trace `fun` closes over, which are
    returned too, so the enclosing trace can pass them to the node it emits. `home` as
    for `trace_program`. An enclosing trace of cfgrad's own wrapper (`grad(f)` lowered by
    itself), which has no home, takes this one's once it is traced (this one may have
    taken its own from `f`, for `grad(grad(f))`): the nodes it emits for `f` stand for
    `f`, and carry its def line."""
    params = [Value(x.value.type if isinstance(x, Tracer) else type_of(x), f"a{i}")
              for i, x in enumerate(leaves)]
    outer = current_trace()
    trace = Trace(name, capture=True, home=definition(fun if home is None else home))
    with tracing(trace):
        out_leaves, out_tree = treelib.flatten(fun(*(trace.tracer(p) for p in params)))
        outputs = [trace.value_of(x) for x in out_leaves]
    if outer is not None and outer.home is None:
        outer.home = trace.home
    assert trace.captured is not None
    captured = list(trace.captured.values())
    program = trace.finish(params + [v for _, v in captured], outputs)
    program.in_tree = treelib.flatten(tuple(params + [v for _, v in captured]))[1]
    program.out_tree = out_tree
    verify(program)
    return program, [x for x, _ in captured]


def lower(fun: Callable, *args: Any, static_argnums: int | Sequence[int] = ()) -> Program:
    """Trace `fun` at `args` and return its Program (`print(program)` shows the IR)."""
    statics = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
    # negative entries count from the end, as for the transformations' static_argnums
    statics = tuple(i + len(args) if -len(args) <= i < 0 else i for i in statics)
    return trace_program(fun, args, statics)
