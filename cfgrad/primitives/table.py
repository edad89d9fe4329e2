"""The table itself: the `Primitive` entry, its declarations of how it compiles (`Ufunc`,
`Source`, `NotCompiled`, `Structural`), the table `PRIMITIVES` the family modules fill
through `register`, and `bind`, which applies an entry to traced values (a node) or to
arrays (now). Also the `Deferred` protocol of results whose work is put off.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ArgumentTypeError, LoweringError
from ..ir import TensorType
from ..trace_context import current_trace, is_being_built

# -- How an entry compiles (native.py reads only this declaration): one of four kinds.


@dataclass(frozen=True)
class Ufunc:
    """Compiled as the entry's own implementation, a numpy ufunc that Numba compiles with
    numpy's semantics (Numba's documentation, "Supported NumPy features": ufuncs), written
    `np.<its name>(…)`; with `operator`, as the entry's `operator` instead, for a ufunc
    whose Python operator is exactly it on Numba's scalars and arrays too. Only for an
    entry without parameters; `register` fills `name` from the implementation."""

    operator: bool = False
    name: str = ""

    def source(self, prim: Primitive, args: list[str]) -> str:
        if self.operator:
            return prim.operator.format(*args)
        return f"np.{self.name}({', '.join(args)})"


@dataclass(frozen=True)
class Source:
    """Compiled as the expression `write(args, types, out, **params)` returns: Numba
    source computing what the entry's implementation computes from the operands'
    expressions `args` (their TensorTypes `types`, the result's `out`); a case it cannot
    compile raises `Unsupported` with the reason. `elementwise`: on float operands the
    expression is an elementwise array expression Numba fuses with its neighbours
    (native's fused chains). `constants`: `write` also takes `const`, which turns an
    array worked out while generating the code into the expression reading it at run
    time (the positions a constant index array reads). `fresh_buffer`: the expression
    updates its first operand in place, so native hands it a buffer of the node's own: a
    loop carry the node updates (a scan's output stack) is copied once where its loop is
    entered and checkpointed by reference (rewriting what an iteration wrote is then
    harmless), any other operand is copied at the node."""

    write: Callable[..., str]
    elementwise: bool = False
    constants: bool = False
    fresh_buffer: bool = False


@dataclass(frozen=True)
class NotCompiled:
    """No compiled form: a program using the entry runs in the interpreter, and
    `cg.jit` says why with `reason` (`primitive `f` has no compiled implementation:
    <reason>`), and how to write the line instead with `rewrite`, where there is a way."""

    reason: str
    rewrite: str = ""


@dataclass(frozen=True)
class Structural:
    """Compiled by native.py's writer itself rather than from an expression of its
    operands (a constant becomes a module constant, a sub-program a function of its
    own); `how` says which way."""

    how: str


Compilation = Ufunc | Source | NotCompiled | Structural
UFUNC = Ufunc()


@dataclass(frozen=True, kw_only=True)
class Primitive:
    """One entry of the table. Fields are named at every declaration (keyword-only), so a
    reader sees which function is the implementation, which the shape rule and which the
    derivative rules."""

    name: str
    impl: Callable[..., Any]
    abstract: Callable[..., TensorType]  # the shape rule: (input types, **params) -> type
    family: str
    vjp: Callable[..., tuple] | None = None  # None: no derivative (or a zero one)
    jvp: Callable[..., Any] | None = None
    promote: str = "same"  # "same": cast inputs to one dtype; "float": …and ints to f64
    promote_from: int = 0  # inputs before this index keep their own dtype (where's condition)
    nondiff: bool = False  # derivative is zero everywhere it exists (comparisons, sign, …)
    notes: str = ""
    dynamic: tuple[int, ...] = field(default_factory=tuple)  # inputs that take no derivative
    # Several outputs (custom rules): `abstract` returns a list of types, `impl` a tuple,
    # and the rules take and return lists (cotangents of every output, tangents of every
    # output) instead of single values.
    multi_output: bool = False
    # The JVP rule computes the outputs too, as a by-product of the tangents, and returns
    # (outputs, tangents): forward mode then emits no copy of the node itself. A nested
    # pullback's tangent comes from reverse mode of the JVP program, whose other results
    # are the pullback itself; emitting both would run the sub-program's gradient twice.
    jvp_gives_primal: bool = False
    # In-place accumulators (family "internal", emitted by the loop passes): `mutates` marks
    # a primitive that updates its first input in place, which passes never merge, move or
    # drop. `factors`, for an accumulator that takes its contribution in a factored form,
    # recognises that form: factors(contribution, producer) gives the inputs after the
    # accumulator and the node's parameters, or None; producer(v) is the node computing v
    # in every iteration of the loop, or None (passes.accumulate_in_place).
    mutates: bool = False
    factors: Callable[[Any, Callable[[Any], Any]], tuple[list, dict] | None] | None = None
    # Deferred results (see `Deferred`): `deferred_result` marks a primitive whose `impl`
    # may return a Deferred, whose work is cheaper done later in one go than at each call
    # (accumulate_outer's RankOneSum); `deferred_inputs` are the inputs that take one as it
    # is, those of a primitive that carries it on. The interpreter reads both at compile
    # time and materializes a Deferred for every other reader and at Return, so that no
    # other entry, no caller and no per-node code of the interpreter has to know of it.
    deferred_result: bool = False
    deferred_inputs: tuple[int, ...] = ()
    # A result may be an input itself or share an input's memory (a view: reshape, a basic
    # index, np.real of a real array), or be an array the node does not own (a
    # sub-program's constant, what a user's rule returns). Results handed to a user are
    # copied where the value may be such a one (layout.shared_outputs), so that no
    # result aliases an argument, another result or anything a cached program keeps; a
    # test holds every entry without the flag to its implementation's fresh arrays.
    aliases: bool = False
    # Anomaly detection does not test the result: it computes nothing (`const`) or only
    # copies a value tested where it was made (`copy`).
    unchecked: bool = False
    # Runs for an effect outside the program and computes nothing (a debug print or
    # callback): passes keep it where it is, as a `mutates` node; the reverse builder gives
    # it no rule (no derivative, no node in the adjoint); the interpreter runs it only
    # where the program's work is done for the first time, not where a run repeats it
    # (a checkpoint strategy's recomputation, anything during a pullback).
    effect: bool = False
    # Complex inputs are refused, traced (LoweringError, by the shape rule) and eager
    # (ArgumentTypeError, by `bind`):
    # JAX refuses them (floor, mod, clip, argmax: no order or no integer part), or the
    # compiled source and rules are those of real numbers (sigmoid's exp(-|x|)).
    real_only: bool = False
    # How the compiled backend (native.py) computes the entry: a `Ufunc`, a `Source`
    # function, `Structural`, or `NotCompiled` with the reason a user is told. Every entry
    # of the table declares one (`register` refuses None, which only an entry made
    # outside the table has: not compiled); tests/primitives/test_primitive_table.py checks each
    # declaration against the interpreter.
    compiled: Compilation | None = None
    # Python source computing the result exactly as `impl` does on numpy operands, which
    # the interpreter writes in place of a call (a ufunc call costs more than its work
    # on scalars): a format string of the operands' sources, `"({0} - {1})"`, for an entry
    # without parameters, or a function (operand sources, **params) -> source, or None
    # where no such source exists for those parameters. A `Ufunc(operator=True)`
    # declaration has the compiled code write the same string.
    operator: str | Callable[..., str | None] | None = None

    def __repr__(self) -> str:
        return f"<primitive {self.name}>"

    def operator_source(self, args: list[str], params: dict[str, Any]) -> str | None:
        """The `operator` source of a node on operands `args` with `params`, or None."""
        if self.operator is None:
            return None
        if isinstance(self.operator, str):
            return None if params else self.operator.format(*args)
        return self.operator(args, **params)

    @functools.cached_property
    def params(self) -> tuple[str, ...]:
        """The static parameters the primitive takes, every one required: those its shape
        rule names after the input types (`sum`: axes, keepdims; `sin`: none). The shape
        rule is the declaration the implementation and the derivative rules agree with
        (tests/primitives/test_primitives.py holds the table to it); an implementation that
        accepts more (`np.clip`'s `out`, `**kwargs`) must not let a mistyped parameter reach
        it."""
        return tuple(list(inspect.signature(self.abstract).parameters)[1:])

    def parameter_problem(self, params: dict[str, Any]) -> str | None:
        """What is wrong with the names of a node's `params`, or None: `clip takes no
        parameters, got foo`, `mean takes parameters axes, keepdims; keepdims is missing`."""
        unknown = sorted(set(params) - set(self.params))
        missing = [name for name in self.params if name not in params]
        if not unknown and not missing:
            return None
        plural = "s" if len(self.params) > 1 else ""
        takes = (f"takes parameter{plural} {', '.join(self.params)}" if self.params
                 else "takes no parameters")
        if unknown:
            return f"{self.name} {takes}, got {', '.join(unknown)}"
        verb = "is" if len(missing) == 1 else "are"
        return f"{self.name} {takes}; {', '.join(missing)} {verb} missing"


PRIMITIVES: dict[str, Primitive] = {}


def register(p: Primitive) -> Primitive:
    """Enter `p` in the table, its shape rule checking the parameters' names first: a
    traced `bind` with a wrong one is then a LoweringError, as a wrong value is. A
    `real_only` entry's shape rule refuses complex inputs (and `bind` eager ones). An
    entry whose implementation is a numpy ufunc takes the dtypes numpy's type resolution
    accepts, and gives the dtype it gives: `bitwise_and` of floats, `invert` of f64 and
    `sign` of bool are a LoweringError when traced and a VerifyError when parsed, not a
    numpy error when the program runs (or, compiled, a number numpy would refuse)."""
    assert p.name not in PRIMITIVES, p.name
    rule = p.abstract

    @functools.wraps(rule)  # keeps the rule's signature, which names the parameters
    def abstract(types: list[TensorType], **params: Any) -> Any:
        problem = p.parameter_problem(params)
        if problem is not None:
            raise LoweringError(problem)
        if p.real_only and any(t.dtype.kind == "c" for t in types):
            raise LoweringError(_complex_refused(p.name, types))
        result = rule(types, **params)
        if isinstance(p.impl, np.ufunc):
            problem = _ufunc_problem(p, tuple(t.dtype for t in types), result.dtype)
            if problem is not None:
                raise LoweringError(problem)
        return result

    compiled = p.compiled
    assert compiled is not None, f"{p.name} declares no compiled form"
    if isinstance(compiled, Ufunc):
        assert isinstance(p.impl, np.ufunc) and not p.params, p.name
        assert not compiled.operator or isinstance(p.operator, str), p.name
        compiled = dataclasses.replace(compiled, name=p.impl.__name__)
    p = PRIMITIVES[p.name] = dataclasses.replace(p, abstract=abstract, compiled=compiled)
    return p


@functools.lru_cache(maxsize=4096)
def _ufunc_dtype(ufunc: np.ufunc, dtypes: tuple[np.dtype, ...]) -> np.dtype | None:
    """The result dtype numpy's type resolution gives `ufunc` for inputs of `dtypes` (what
    a call does), or None when it has no loop for them."""
    try:
        return ufunc.resolve_dtypes(dtypes + (None,) * ufunc.nout)[-1]
    except TypeError:  # numpy's "no loop matching" and "not supported" errors
        return None


def _ufunc_problem(p: Primitive, dtypes: tuple[np.dtype, ...],
                   declared: np.dtype | None = None) -> str | None:
    """Why numpy's ufunc `p.impl` does not compute `p` on inputs of `dtypes` with the
    result dtype `declared` (None: any), or None when it does."""
    gives = _ufunc_dtype(p.impl, dtypes)
    if gives is not None and (declared is None or gives == declared):
        return None
    shown = ", ".join(map(str, dtypes))
    if gives is None:
        return (f"{p.name} is not defined for inputs of dtype {shown}: numpy's "
                f"{p.impl.__name__} has no loop for them (convert them with astype first)")
    return (f"{p.name} of inputs of dtype {shown}: numpy's {p.impl.__name__} gives "
            f"{gives}, not {declared} (convert them with astype first)")


def _complex_refused(name: str, inputs: Any) -> str:
    dtypes = ", ".join(str(getattr(t, "dtype", t)) for t in inputs)
    return (f"{name} does not accept complex inputs (got {dtypes}), as in JAX: complex "
            "numbers have no order and no integer part. Apply it to the real and "
            "imaginary parts (cnp.real, cnp.imag) or to cnp.abs")


def real_dtype(dtype: np.dtype) -> np.dtype:
    """The float dtype of a complex dtype's parts (complex64: float32); other dtypes as
    they are. The dtype of abs, real, imag and angle of a complex value."""
    return np.dtype(np.finfo(dtype).dtype) if dtype.kind == "c" else dtype


def complex_dtype(dtype: np.dtype) -> np.dtype:
    """The complex dtype whose parts have `dtype` (float32: complex64; ints: complex128)."""
    return np.result_type(dtype, np.complex64)


class Deferred:
    """A result whose work is put off at run time, for a primitive whose entry declares
    `deferred_result`. The interpreter hands it as it is only to the inputs an entry lists
    in `deferred_inputs`; every other reader, and the program's caller, gets
    `dense_value(...)`, the plain array. Subclasses implement both methods."""

    __slots__ = ()

    def materialize(self) -> np.ndarray:
        """The value as a plain array, the pending work done. The Deferred may go on from
        that array (a primitive that then updates it in place declares `mutates`)."""
        raise NotImplementedError

    def peek(self) -> np.ndarray:
        """The value as a plain array, the pending work left pending: what anomaly
        detection tests, since doing the work early could change the result's rounding
        and a checked run must compute what an unchecked one does."""
        raise NotImplementedError


def dense_value(x: Any) -> Any:
    """`x` as a reader may see it: a Deferred materialized, any other value as it is."""
    return x.materialize() if isinstance(x, Deferred) else x


def peeked_value(x: Any) -> Any:
    """`x` as a reader would see it, a Deferred's pending work left pending (`peek`)."""
    return x.peek() if isinstance(x, Deferred) else x


def _trace_of(args: tuple) -> Any:
    """The trace a node on `args` goes to: that of its traced arguments, unless they come
    from a trace that encloses the one being built (a nested transformation's function
    computing with values it closes over): then the innermost trace, which takes those
    values in as parameters. The node must sit where the user's code put it, inside the
    inner function's branch or loop: hoisted into the enclosing program it would run
    where the branch does not, and an untaken `sqrt` of a negative would reach the
    gradient as NaN."""
    found = None
    for a in args:
        t = getattr(a, "_cfgrad_trace", None)
        if t is not None:
            found = t
            break
    if found is None:
        return None
    current = current_trace()
    if current is not None and current is not found and is_being_built(found):
        return current
    return found


def _promoted_dtype(prim: Primitive, args: list[Any]) -> np.dtype | None:
    """numpy 2 (NEP 50) promotion, with Python scalars weakly typed as in JAX."""
    if prim.promote == "none":
        return None
    probes = []
    for a in args[prim.promote_from:]:
        dt = getattr(a, "dtype", None)
        if dt is not None:
            probes.append(np.dtype(dt))
        elif isinstance(a, bool | int | float | complex):
            probes.append(a)
        else:
            probes.append(np.asarray(a).dtype)
    dtype = np.result_type(*probes)
    if prim.promote == "float" and dtype.kind in "biu":
        dtype = np.dtype(np.float64)
    return dtype


def bind(name: str, *args: Any, **params: Any) -> Any:
    """Apply primitive `name`: trace it when any argument is traced, else compute now.

    Inputs are promoted to one dtype first (for primitives that ask for it), so rules and
    implementations see consistent dtypes."""
    prim = PRIMITIVES[name]
    trace = _trace_of(args)
    dtype = _promoted_dtype(prim, list(args))
    if trace is not None:
        return trace.emit(prim, list(args), params, dtype)
    arrays = [np.asarray(a) if dtype is None or i < prim.promote_from
              else np.asarray(a, dtype=dtype) for i, a in enumerate(args)]
    if prim.real_only and any(a.dtype.kind == "c" for a in arrays):
        raise ArgumentTypeError(_complex_refused(name, arrays))
    if isinstance(prim.impl, np.ufunc):
        problem = _ufunc_problem(prim, tuple(a.dtype for a in arrays))
        if problem is not None:
            raise ArgumentTypeError(problem)
    return prim.impl(*arrays, **params)


