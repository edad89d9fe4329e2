"""The derivative table: every primitive declared once.

An entry holds the numpy implementation, the shape/dtype rule (abstract evaluation), the
VJP rule, the JVP rule, and notes on domain and subgradient conventions. Rules are written
with primitives (via `bind` and the operators of traced values), so the adjoint of a
program is itself ordinary IR. Adding a primitive means adding one entry here.

Rule signatures (inputs `xs` and output `out` are traced values of the program being
built, cotangents/tangents likewise; `None` is a symbolic zero):

    vjp(ct, xs, out, **params) -> tuple of input cotangents (None where zero)
    jvp(ts, xs, out, **params) -> output tangent (None where zero)

The reverse builder never calls a VJP with a zero cotangent and drops cotangents of
integer and boolean inputs, so rules need not handle either.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import kernel_sources as ks
from .errors import ArgumentTypeError, LoweringError
from .ir import DTYPE_CHOICES, TensorType, broadcast_shapes, format_param, ir_dtype
from .trace_context import current_trace, is_being_built

# ---------------------------------------------------------------------------------
# The table entry and binding
# ---------------------------------------------------------------------------------


# -- How an entry compiles (native.py reads only this declaration): one of four kinds.


@dataclass(frozen=True)
class Ufunc:
    """Compiled as the entry's own implementation, a numpy ufunc that Numba compiles with
    numpy's semantics (Numba's documentation, "Supported NumPy features": ufuncs), written
    `np.<its name>(…)`; with `operator`, as the entry's `operator` instead, for a ufunc
    whose Python operator is exactly it on Numba's scalars and arrays too. Only for an
    entry without parameters; `_register` fills `name` from the implementation."""

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
    time (the positions a constant index array reads)."""

    write: Callable[..., str]
    elementwise: bool = False
    constants: bool = False


@dataclass(frozen=True)
class NotCompiled:
    """No compiled form: a program using the entry runs in the interpreter, and
    `cg.jit` says why with `reason` (`primitive `sort` has no compiled implementation:
    <reason>`)."""

    reason: str


@dataclass(frozen=True)
class Structural:
    """Compiled by native.py's writer itself rather than from an expression of its
    operands (a constant becomes a module constant, a sub-program a function of its
    own); `how` says which way."""

    how: str


Compilation = Ufunc | Source | NotCompiled | Structural
UFUNC = Ufunc()
NEEDS_LAPACK = NotCompiled("it needs SciPy's LAPACK (Numba's np.linalg calls SciPy's; cfgrad "
                           "does not depend on SciPy)")


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
    # copied where the value may be such a one (interpret.shared_outputs), so that no
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
    # kernel and rules are those of real numbers (sigmoid's exp(-|x|)).
    real_only: bool = False
    # How the compiled backend (native.py) computes the entry: a `Ufunc`, a `Source`
    # function, `Structural`, or `NotCompiled` with the reason a user is told. Every entry
    # of the table declares one (`_register` refuses None, which only an entry made
    # outside the table has: not compiled); tests/test_primitive_table.py checks each
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
        (tests/test_primitives.py holds the table to it); an implementation that accepts
        more (`np.clip`'s `out`, `**kwargs`) must not let a mistyped parameter reach it."""
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


def _register(p: Primitive) -> Primitive:
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


# ---------------------------------------------------------------------------------
# Shape rules and helpers used by the rules
# ---------------------------------------------------------------------------------


def _broadcast(types: list[TensorType], op: str) -> tuple[int, ...]:
    try:
        return broadcast_shapes(*(t.shape for t in types))
    except ValueError:
        shapes = " and ".join(str(t) for t in types)
        raise LoweringError(f"{op}: cannot broadcast {shapes} together") from None


# -- Static parameters. A rule's signature names the parameters its primitive takes (the
# verifier holds nodes to it), and the rule checks their values: everything the
# implementation and the derivative rules will do with them must be decided here, so a
# bad parameter is a LoweringError when traced and a VerifyError when parsed, never a
# TypeError or numpy AxisError from a run or a derivative rule.


def _int_param(op: str, name: str, value: Any) -> int:
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        raise LoweringError(f"{op}: parameter {name} must be an int, got {value!r}")
    return int(value)


def _bool_param(op: str, name: str, value: Any) -> bool:
    if not isinstance(value, bool | np.bool_):
        raise LoweringError(f"{op}: parameter {name} must be True or False, got {value!r}")
    return bool(value)


def _axis_param(op: str, name: str, value: Any, t: TensorType, whole: Any = None) -> int:
    """One axis of `t` (an item of the parameter `whole`, if given), as lowering normalizes
    it: 0 <= axis < ndim. No negative axes: the shape rules count from the front, so -1
    would give a different type than numpy's run does."""
    shown = f"{name}={format_param(value if whole is None else whole)}"
    is_int = isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)
    if not is_int or not 0 <= value < t.ndim:
        allowed = f"0 to {t.ndim - 1}" if t.ndim else "none, it is a scalar"
        raise LoweringError(f"{op}: parameter {shown}: {format_param(value)} is not an axis "
                            f"of {t} (its axes: {allowed})")
    return int(value)


def _axes_param(op: str, value: Any, t: TensorType) -> tuple[int, ...]:
    if not isinstance(value, tuple):
        raise LoweringError(f"{op}: parameter axes must be a tuple of axes of {t}, got "
                            f"{value!r}")
    axes = tuple(_axis_param(op, "axes", a, t, value) for a in value)
    if len(set(axes)) != len(axes):
        raise LoweringError(f"{op}: parameter axes={format_param(value)} repeats an axis")
    return axes


def _shape_param(op: str, value: Any) -> tuple[int, ...]:
    if not isinstance(value, tuple) or any(
            isinstance(d, bool | np.bool_) or not isinstance(d, int | np.integer) or d < 0
            for d in value):
        raise LoweringError(f"{op}: parameter shape must be a tuple of sizes (ints >= 0), got "
                            f"{value!r}")
    return tuple(int(d) for d in value)


def _dtype_param(op: str, value: Any) -> np.dtype:
    dtype = ir_dtype(value)
    if dtype is None:
        raise LoweringError(f"{op}: parameter dtype must be one of the IR's dtypes "
                            f"({DTYPE_CHOICES}), got {value!r}")
    return dtype


@dataclass(frozen=True)
class DtypeOf:
    """An elementwise result dtype that depends on the promoted input dtype (`of`)."""

    of: Callable[[np.dtype], np.dtype]


def _elementwise_type(op: str, out_dtype: Any = None) -> Callable[..., TensorType]:
    """The rule of an elementwise primitive: the inputs' broadcast shape, in the dtype the
    inputs are promoted to, or `out_dtype` (a dtype, or a `DtypeOf` the promoted one)."""
    def rule(types: list[TensorType]) -> TensorType:
        dtype = types[-1].dtype
        if isinstance(out_dtype, DtypeOf):
            dtype = out_dtype.of(dtype)
        elif out_dtype is not None:
            dtype = np.dtype(out_dtype)
        return TensorType(_broadcast(types, op), dtype)

    return rule


def _reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> tuple:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def unbroadcast(ct: Any, shape: tuple[int, ...]) -> Any:
    """Sum a cotangent of a broadcast result back to an input's shape."""
    if tuple(ct.shape) == tuple(shape):
        return ct
    lead = len(ct.shape) - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, d in enumerate(shape) if d == 1 and ct.shape[lead + i] != 1)
    summed = bind("sum", ct, axes=axes, keepdims=False) if axes else ct
    return bind("reshape", summed, shape=tuple(shape))


def _mask(condition: Any, like: Any) -> Any:
    """A 0/1 array of `like`'s dtype: keeps float32/float16 programs in their precision."""
    return bind("astype", condition, dtype=like.dtype)


def _keep(x: Any, shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> Any:
    """Reshape a reduction result to its keepdims shape so it broadcasts against the input."""
    if keepdims:
        return x
    return bind("reshape", x, shape=_reduced_shape(shape, axes, True))


def _add_terms(*terms: Any) -> Any:
    present = [t for t in terms if t is not None]
    if not present:
        return None
    total = present[0]
    for t in present[1:]:
        total = total + t
    return total


def _to_out_shape(t: Any, out: Any) -> Any:
    """Broadcast a tangent to the output's shape: when the other operand's tangent is a
    symbolic zero, a sum of tangents still has only its own operand's shape."""
    if t is None or tuple(t.shape) == tuple(out.shape):
        return t
    return bind("broadcast_to", t, shape=tuple(out.shape))


# ---------------------------------------------------------------------------------
# Elementwise unary
# ---------------------------------------------------------------------------------


def _unary(name: str, impl: Callable, deriv: Callable[[Any, Any], Any] | None,
           notes: str = "", promote: str = "float", out_dtype: Any = None,
           real_only: bool = False, compiled: Compilation = UFUNC,
           operator: str | None = None) -> None:
    """deriv(x, out) is the pointwise derivative, written with traced values. For complex
    x it is the complex derivative of a holomorphic function, and `ct * deriv` is then
    JAX's VJP as it stands (the transpose, not the conjugate transpose, of t -> t*deriv)."""
    if deriv is None:
        vjp = jvp = None
    else:
        def vjp(ct, xs, out):
            return (ct * deriv(xs[0], out),)

        def jvp(ts, xs, out):
            return None if ts[0] is None else ts[0] * deriv(xs[0], out)

    _register(Primitive(name=name, impl=impl, abstract=_elementwise_type(name, out_dtype), vjp=vjp,
                        jvp=jvp, family="elementwise",
                        promote=promote, nondiff=deriv is None, notes=notes,
                        real_only=real_only, compiled=compiled, operator=operator))


def _sigmoid_impl(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)


def _relu_impl(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, np.zeros((), x.dtype))


_register(Primitive(name="neg", impl=np.negative, abstract=_elementwise_type("neg"),
                    vjp=lambda ct, xs, out: (-ct,),
                    jvp=lambda ts, xs, out: None if ts[0] is None else -ts[0],
                    family="elementwise", compiled=Ufunc(operator=True), operator="(-{0})"))
_unary("exp", np.exp, lambda x, y: y)
_unary("log", np.log, lambda x, y: 1.0 / x, "domain x > 0; log(0) = -inf, gradient inf")
_unary("log1p", np.log1p, lambda x, y: 1.0 / (1.0 + x), "domain x > -1; accurate near 0")
_unary("expm1", np.expm1, lambda x, y: y + 1.0, "accurate near 0")
_unary("sin", np.sin, lambda x, y: bind("cos", x))
_unary("cos", np.cos, lambda x, y: -bind("sin", x))
_unary("tan", np.tan, lambda x, y: 1.0 + y * y)
_unary("tanh", np.tanh, lambda x, y: 1.0 - y * y)
_unary("sinh", np.sinh, lambda x, y: bind("cosh", x))
_unary("cosh", np.cosh, lambda x, y: bind("sinh", x))
_unary("arctan", np.arctan, lambda x, y: 1.0 / (1.0 + x * x))
_unary("sqrt", np.sqrt, lambda x, y: 0.5 / y,
       "domain x >= 0; sqrt'(0) = +inf (as in JAX and PyTorch); use a custom_vjp for a "
       "finite value at 0")


def _safe_modulus(out):
    """|z|, with 1 where z = 0: the rules below divide by it, and conj(z) / |z| (the
    phase, written as a differentiable expression of z and |z|, since sign(z) has
    derivative 0 and a rule using it would give wrong second derivatives) is then 0 at
    z = 0, as JAX's. The division is of real numbers, before the complex product."""
    return bind("where", out == 0.0, 1.0, out)


def _abs_vjp(ct, xs, out):
    """|z| of a complex z: d|z| = Re(conj(z) dz) / |z|, whose transpose in JAX's convention
    is ct * conj(z) / |z|."""
    x = xs[0]
    if x.dtype.kind == "c":
        return ((ct / _safe_modulus(out)) * bind("conj", x),)
    return (ct * bind("sign", x),)


def _abs_jvp(ts, xs, out):
    x, t = xs[0], ts[0]
    if x.dtype.kind == "c":
        return bind("real", bind("conj", x) * t) / _safe_modulus(out)
    return t * bind("sign", x)


_register(Primitive(
    name="abs", impl=np.abs,
    abstract=lambda types: TensorType(types[0].shape, real_dtype(types[0].dtype)),
    vjp=_abs_vjp, jvp=_abs_jvp, family="elementwise", promote="none", compiled=UFUNC,
    operator="abs({0})",
    notes="abs'(0) = 0 (the minimum-norm subgradient); for complex z the result is real, "
          "d|z| = Re(conj(z)/|z| dz), 0 at z = 0 (as JAX)"))
_unary("sign", np.sign, None, "derivative 0 everywhere (undefined at 0, taken as 0)",
       promote="same", compiled=Source(ks.sign))
_unary("sigmoid", _sigmoid_impl, lambda x, y: y * (1.0 - y),
       "computed from exp(-|x|): finite for any input", real_only=True, compiled=Source(ks.sigmoid))
_unary("relu", _relu_impl, lambda x, y: _mask(x > 0, x), "relu'(0) = 0", promote="same",
       real_only=True, compiled=Source(ks.relu))
_unary("softplus", lambda x: np.logaddexp(np.zeros((), x.dtype), x),
       lambda x, y: bind("sigmoid", x), "log(1 + e^x) via logaddexp: finite for any input",
       real_only=True, compiled=Source(ks.softplus))
_unary("floor", np.floor, None, "derivative 0 (undefined at integers, taken as 0)",
       real_only=True)
_unary("rint", np.rint, None,
       "numpy's rint, halves to the even neighbour: derivative 0 (undefined at halves, taken "
       "as 0)")
_register(Primitive(
    name="stop_gradient", impl=lambda x: x[()], abstract=_elementwise_type("stop_gradient"),
    family="elementwise",
    promote="none", nondiff=True, compiled=Source(ks.identity),
    notes="the identity whose derivative is taken as 0: no gradient flows through it",
    aliases=True))
_unary("isfinite", np.isfinite, None, promote="none", out_dtype=np.bool_)
_unary("logical_not", np.logical_not, None, promote="none", out_dtype=np.bool_)
_unary("invert", np.invert, None, promote="none", operator="(~{0})")

# ---------------------------------------------------------------------------------
# Elementwise binary
# ---------------------------------------------------------------------------------


def _binary(name: str, impl: Callable, dx: Callable | None, dy: Callable | None,
            notes: str = "", promote: str = "same", out_dtype: Any = None,
            compiled: Compilation = UFUNC, operator: str | None = None) -> None:
    """dx(x, y, out) and dy(x, y, out) are the partial derivatives (full shape)."""
    if dx is None:
        vjp = jvp = None
    else:
        def vjp(ct, xs, out):
            x, y = xs
            return (unbroadcast(ct * dx(x, y, out), x.shape),
                    unbroadcast(ct * dy(x, y, out), y.shape))

        def jvp(ts, xs, out):
            x, y = xs
            return _add_terms(None if ts[0] is None else ts[0] * dx(x, y, out),
                              None if ts[1] is None else ts[1] * dy(x, y, out))

    _register(Primitive(name=name, impl=impl, abstract=_elementwise_type(name, out_dtype), vjp=vjp,
                        jvp=jvp, family="elementwise",
                        promote=promote, nondiff=dx is None, notes=notes, compiled=compiled,
                        operator=operator))


def _add_vjp(ct, xs, out):
    return unbroadcast(ct, xs[0].shape), unbroadcast(ct, xs[1].shape)


def _sub_vjp(ct, xs, out):
    return unbroadcast(ct, xs[0].shape), unbroadcast(-ct, xs[1].shape)


def _mul_vjp(ct, xs, out):
    x, y = xs
    return unbroadcast(ct * y, x.shape), unbroadcast(ct * x, y.shape)


def _div_vjp(ct, xs, out):
    x, y = xs
    gx = ct / y
    return unbroadcast(gx, x.shape), unbroadcast(-gx * out, y.shape)


_register(Primitive(name="add", impl=np.add, abstract=_elementwise_type("add"), vjp=_add_vjp,
                    jvp=lambda ts, xs, out: _to_out_shape(_add_terms(*ts), out),
                    family="elementwise", compiled=Ufunc(operator=True), operator="({0} + {1})"))
_register(Primitive(name="sub", impl=np.subtract, abstract=_elementwise_type("sub"), vjp=_sub_vjp,
                    jvp=lambda ts, xs, out: _to_out_shape(
                        _add_terms(ts[0], None if ts[1] is None else -ts[1]), out),
                    family="elementwise", compiled=Ufunc(operator=True), operator="({0} - {1})"))
_register(Primitive(name="mul", impl=np.multiply, abstract=_elementwise_type("mul"), vjp=_mul_vjp,
                    jvp=lambda ts, xs, out: _add_terms(None if ts[0] is None else ts[0] * xs[1],
                                                   None if ts[1] is None else xs[0] * ts[1]),
                    family="elementwise", compiled=Ufunc(operator=True), operator="({0} * {1})"))
_register(Primitive(name="div", impl=np.true_divide, abstract=_elementwise_type("div"),
                    vjp=_div_vjp,
                    jvp=lambda ts, xs, out: _add_terms(
                        None if ts[0] is None else ts[0] / xs[1],
                        None if ts[1] is None else -ts[1] * out / xs[1]),
                    family="elementwise", promote="float",
                    notes="x / 0 gives ±inf or nan, as numpy", operator="({0} / {1})",
                    compiled=Source(ks.divide, elementwise=True)))


def _pow_dy(x, y, out):
    """out * log(x); for complex x on log's principal branch, 0 at x = 0 (as JAX)."""
    if x.dtype.kind == "c":
        return out * bind("log", bind("where", x == 0.0, 1.0, x))
    positive = x > 0
    safe_x = bind("where", positive, x, 1.0)
    return out * bind("log", safe_x) * _mask(positive, x)


def _pow_dx(x, y, out):
    """y*x^(y-1), and exactly 0 where y == 0 (x^0 is constant; 0*0^-1 would be nan). The
    exponent is 1 rather than -1 where y == 0, so the unselected side is finite and the
    derivatives of this one are too (x^k at x = 0 to any order, as in `vander`)."""
    constant = y == 0.0
    return bind("where", constant, 0.0, y * x ** bind("where", constant, 1.0, y - 1.0))


_binary("pow", np.power, _pow_dx, _pow_dy,
        "d/dy is taken as 0 where x <= 0 (log x undefined); d/dx follows y*x^(y-1), and is "
        "0 where y == 0 (also at x = 0, as JAX); int ** int stays integer, as numpy, and "
        "bool ** bool is int8, numpy's",
        out_dtype=DtypeOf(lambda dtype: np.dtype(np.int8) if dtype == np.bool_ else dtype),
        compiled=Source(ks.power))


def square_and_multiply(x: Any, n: int) -> Any:
    """x ** n for an integer n >= 1 by repeated squaring, as JAX's integer_pow: exact for
    integers, defined for negative bases, a few multiplications instead of pow(). The one
    chain of multiplications integer_pow is computed by: its numpy implementation runs it
    on arrays, the interpreter and the compiled code write it out as source (`_Product`),
    and compiled code past n = 16 calls Numba's compile of it (`kernels.integer_pow`), so
    all of them multiply the same operands in the same order and round alike."""
    result = x
    have = False
    base = x
    while n:
        if n & 1:
            result = base if not have else result * base
            have = True
        n >>= 1
        if n:
            base = base * base
    return result


class _Product:
    """The source of a value that `*` writes out: `square_and_multiply` of one gives the
    source of its chain, `((x * x) * x)`."""

    def __init__(self, source: str):
        self.source = source

    def __mul__(self, other: _Product) -> _Product:
        return _Product(f"({self.source} * {other.source})")


def _integer_pow_impl(x: np.ndarray, n: int) -> np.ndarray:
    if n < 0:
        return 1 / _integer_pow_impl(x, -n)
    return np.ones_like(x) if n == 0 else square_and_multiply(x, n)


def _integer_pow_inline(args: list[str], n: int) -> str | None:
    """The interpreter's source for x ** n with 2 <= n <= 4 (x*x*x: no call at all)."""
    return square_and_multiply(_Product(args[0]), n).source if 2 <= n <= 4 else None


def _integer_pow_source(args, types, out, n):
    """x ** |n| by the chain written out up to n = 16 (`K.integer_pow` past it: the
    source doubles in length with each squaring), and for a negative n its reciprocal, 1
    of the result's dtype over it (a bare 1 is an int64 to Numba, which would make a
    float32 quotient a float64)."""
    one = f"np.{out.dtype.name}(1)"
    if n == 0:  # ones, whatever x holds (numpy's ones_like)
        return one if out.shape == () else f"np.ones({out.shape}, np.{out.dtype.name})"
    k = abs(n)
    power = (square_and_multiply(_Product(args[0]), k).source if k <= 16
             else f"K.integer_pow({args[0]}, {k})")
    return power if n > 0 else f"({one} / {power})"


def _integer_pow_slope(x, n):
    return float(n) * bind("integer_pow", x, n=n - 1) if n != 1 else 1.0 + 0.0 * x


def _integer_pow_type(types: list[TensorType], n: int) -> TensorType:
    """x ** n keeps x's type, except that a negative power of an integer is a float64."""
    n = _int_param("integer_pow", "n", n)
    return types[0] if types[0].dtype.kind in "fc" or n >= 0 else TensorType(
        types[0].shape, np.dtype(np.float64))


_register(Primitive(
    name="integer_pow", impl=_integer_pow_impl, abstract=_integer_pow_type,
    vjp=lambda ct, xs, out, n: (ct * _integer_pow_slope(xs[0], n),),
    jvp=lambda ts, xs, out, n: None if ts[0] is None else ts[0] * _integer_pow_slope(xs[0], n),
    family="elementwise", promote="none", compiled=Source(_integer_pow_source),
    operator=_integer_pow_inline,
    notes="x ** n for a Python integer n: repeated multiplication (as JAX's integer_pow), "
          "so negative bases are fine; d/dx = n x^(n-1)"))


# -- Elementwise family (issue 13): inverse trigonometric and hyperbolic functions, the
# base-2/base-10 exponentials and logarithms, cube root, sinc, Bessel's I0 (and I1, its
# derivative), logaddexp, hypot, arctan2, fmod, ceil, trunc, signbit. Derivatives are the
# textbook ones (Abramowitz & Stegun 4.4, 4.6, 9.6.27); the conventions at kinks and domain
# edges follow JAX's jax.numpy, except where a note says otherwise.

_LN2, _LN10 = float(np.log(2.0)), float(np.log(10.0))

_unary("arcsin", np.arcsin, lambda x, y: 1.0 / bind("sqrt", (1.0 - x) * (1.0 + x)),
       "domain -1 <= x <= 1; derivative +inf at ±1, as JAX")
_unary("arccos", np.arccos, lambda x, y: -1.0 / bind("sqrt", (1.0 - x) * (1.0 + x)),
       "domain -1 <= x <= 1; derivative -inf at ±1, as JAX")
_unary("arcsinh", np.arcsinh, lambda x, y: 1.0 / bind("hypot", x, 1.0),
       "derivative 1/hypot(x, 1): no overflow for large |x|")
_unary("arccosh", np.arccosh,
       lambda x, y: 1.0 / (bind("sqrt", x - 1.0) * bind("sqrt", x + 1.0)),
       "domain x >= 1; derivative +inf at 1, as JAX")
_unary("arctanh", np.arctanh, lambda x, y: 1.0 / ((1.0 - x) * (1.0 + x)),
       "domain -1 < x < 1; derivative +inf at ±1, as JAX")
_unary("cbrt", np.cbrt, lambda x, y: 1.0 / (3.0 * y * y),
       "real cube root, negative for negative x; derivative +inf at 0, as JAX")
_unary("exp2", np.exp2, lambda x, y: y * _LN2)
_unary("log2", np.log2, lambda x, y: 1.0 / (x * _LN2), "domain x > 0, as log")
_unary("log10", np.log10, lambda x, y: 1.0 / (x * _LN10), "domain x > 0, as log")


def _sinc_slope(x, y):
    """sinc'(x) = (cos(pi x) - sinc(x)) / x, which cancels near 0: within 0.01 of it, the
    Maclaurin series -pi^2 x/3 + pi^4 x^3/30 - pi^6 x^5/840 instead, whose own derivative
    at 0 is sinc''(0) = -pi^2/3 (a `where` between the two: derivatives of any order are
    right at 0, as JAX's)."""
    near = bind("abs", x) < 0.01
    safe = bind("where", near, 1.0, x)
    general = (bind("cos", np.pi * safe) - y) / safe
    x2 = x * x
    series = x * (-np.pi ** 2 / 3.0 + x2 * (np.pi ** 4 / 30.0 - x2 * (np.pi ** 6 / 840.0)))
    return bind("where", near, series, general)


# numpy computes these in Python (np.sinc, np.i0) or in `_i1_impl`'s series, not as ufuncs
SPECIAL_FUNCTION = NotCompiled("a special function, for which no Numba source is written yet")
_unary("sinc", np.sinc, _sinc_slope,
       "sin(pi x) / (pi x), 1 at 0; derivative 0 at 0 (and -pi^2/3 for the second), "
       "from its Maclaurin series near 0, as JAX", compiled=SPECIAL_FUNCTION)


def _i1_impl(x: np.ndarray) -> np.ndarray:
    """Bessel's I1 (Abramowitz & Stegun 9.6.10): (x/2) * sum_k (x^2/4)^k / (k! (k+1)!).
    Every term is positive (no cancellation), so the sum is accurate for any x; it runs
    until the terms stop changing it (about |x|/2 + 20 terms), in float64."""
    z = np.asarray(x, np.float64)
    term = z / 2.0
    total = term.copy()
    quarter = z * z / 4.0
    k = 0
    with np.errstate(over="ignore", invalid="ignore"):
        while np.any(np.abs(term) > 1e-17 * np.abs(total)) and k < 2000:
            term = term * quarter / ((k + 1) * (k + 2))
            total = total + term
            k += 1
    return total.astype(x.dtype, copy=False)


def _i1_slope(x, y):
    """I1'(x) = I0(x) - I1(x)/x (A&S 9.6.27), and 1/2 at 0."""
    zero = x == 0.0
    return bind("i0", x) - bind("where", zero, 0.5, y / bind("where", zero, 1.0, x))


# real only: numpy's i0 refuses complex input, and _i1_impl's sum is of real numbers
_unary("i0", np.i0, lambda x, y: bind("i1", x),
       "modified Bessel function of the first kind, order 0; derivative I1(x)", real_only=True,
       compiled=SPECIAL_FUNCTION)
_unary("i1", _i1_impl, _i1_slope,
       "modified Bessel function of the first kind, order 1 (the derivative of i0; not in "
       "cfgrad.numpy); derivative I0(x) - I1(x)/x, 1/2 at 0", real_only=True,
       compiled=SPECIAL_FUNCTION)
_unary("ceil", np.ceil, None, "derivative 0 (undefined at integers, taken as 0)")
_unary("trunc", np.trunc, None, "derivative 0 (undefined at integers, taken as 0)")
_unary("signbit", np.signbit, None, promote="none", out_dtype=np.bool_)


def _safe_ratio(x, out):
    """x / out, and 0 where out == 0."""
    zero = out == 0.0
    return bind("where", zero, 0.0, x / bind("where", zero, 1.0, out))


_binary("arctan2", np.arctan2, lambda y, x, out: x / (x * x + y * y),
        lambda y, x, out: -y / (x * x + y * y),
        "arctan2(y, x): d/dy = x / (x^2 + y^2), d/dx = -y / (x^2 + y^2); nan at (0, 0), "
        "as JAX", promote="float")
_binary("hypot", np.hypot, lambda x, y, out: _safe_ratio(x, out),
        lambda x, y, out: _safe_ratio(y, out),
        "d/dx = x / hypot(x, y); 0 at (0, 0), the minimum-norm subgradient, as a norm's "
        "gradient at 0 (JAX gives 1/2 each there)", promote="float")
_binary("logaddexp", np.logaddexp, lambda x, y, out: bind("exp", x - out),
        lambda x, y, out: bind("exp", y - out),
        "log(e^x + e^y) without overflow; d/dx = e^(x - out); nan where x = y = ±inf",
        promote="float")
_binary("logaddexp2", np.logaddexp2, lambda x, y, out: bind("exp2", x - out),
        lambda x, y, out: bind("exp2", y - out),
        "log2(2^x + 2^y) without overflow; d/dx = 2^(x - out); nan where x = y = ±inf",
        promote="float")


def _fmod_type(types: list[TensorType]) -> TensorType:
    """As mod's: bools are computed in int8 (the rule is defined further down)."""
    return _integer_division_type("fmod")(types)


def _truncated_quotient(x, y):
    return bind("trunc", x / y)


_register(Primitive(
    name="fmod", impl=np.fmod, abstract=_fmod_type,
    vjp=lambda ct, xs, out: (unbroadcast(ct, xs[0].shape),
                             unbroadcast(-ct * _truncated_quotient(*xs), xs[1].shape)),
    jvp=lambda ts, xs, out: _to_out_shape(_add_terms(
        ts[0], None if ts[1] is None else -ts[1] * _truncated_quotient(*xs)), out),
    family="elementwise", compiled=Source(ks.fmod, elementwise=True),
    notes="C's fmod, the sign of x: x - trunc(x/y)*y, exact; d/dx = 1, d/dy = -trunc(x/y), "
          "as JAX; undefined where x/y is an integer (a jump)"))


def _tie_mask(x, y, out, wins):
    return _mask(wins, x) + 0.5 * _mask(x == y, x)


_binary("maximum", np.maximum, lambda x, y, out: _tie_mask(x, y, out, x > y),
        lambda x, y, out: _tie_mask(y, x, out, y > x), "ties split the gradient 1/2 : 1/2",
        compiled=Source(ks.maximum))
_binary("minimum", np.minimum, lambda x, y, out: _tie_mask(x, y, out, x < y),
        lambda x, y, out: _tie_mask(y, x, out, y < x), "ties split the gradient 1/2 : 1/2",
        compiled=Source(ks.minimum))
for _name, _fn, _symbol in [("lt", np.less, "<"), ("le", np.less_equal, "<="),
                            ("gt", np.greater, ">"), ("ge", np.greater_equal, ">="),
                            ("eq", np.equal, "=="), ("ne", np.not_equal, "!=")]:
    _binary(_name, _fn, None, None, "comparison: no derivative", out_dtype=np.bool_,
            compiled=Ufunc(operator=True), operator=f"({{0}} {_symbol} {{1}})")
for _name, _fn in [("logical_and", np.logical_and), ("logical_or", np.logical_or),
                   ("logical_xor", np.logical_xor)]:
    _binary(_name, _fn, None, None, "logical: no derivative", promote="none",
            out_dtype=np.bool_)
for _name, _fn, _symbol in [("bitwise_and", np.bitwise_and, "&"),
                            ("bitwise_or", np.bitwise_or, "|"),
                            ("bitwise_xor", np.bitwise_xor, "^")]:
    _binary(_name, _fn, None, None, "bitwise on bool/int: no derivative",
            operator=f"({{0}} {_symbol} {{1}})")


def _integer_division_type(op: str) -> Callable[..., TensorType]:
    """x // y and x % y keep the operands' dtype; numpy computes them for bools in int8."""
    def rule(types: list[TensorType]) -> TensorType:
        dtype = types[-1].dtype
        return TensorType(_broadcast(types, op),
                          np.dtype(np.int8) if dtype == np.bool_ else dtype)

    return rule


def _mod_quotient(x, y):
    return bind("floor", x / y)


# Integer operands stay integers: numpy's int64 // and % are exact (2**60 + 1 // 3) and give
# 0 for a zero divisor, which a detour through float64 (floor(x / y)) does not.
_register(Primitive(
    name="floor_divide", impl=np.floor_divide, abstract=_integer_division_type("floor_divide"),
    family="elementwise", nondiff=True, real_only=True,
    compiled=Source(ks.floor_divide, elementwise=True),
    notes="numpy's floor division, exact for integers: derivative 0 (undefined where x/y is "
          "an integer, taken as 0)"))
_register(Primitive(
    name="mod", impl=np.mod, abstract=_integer_division_type("mod"),
    vjp=lambda ct, xs, out: (unbroadcast(ct, xs[0].shape),
                         unbroadcast(-ct * _mod_quotient(*xs), xs[1].shape)),
    jvp=lambda ts, xs, out: _to_out_shape(_add_terms(
        ts[0], None if ts[1] is None else -ts[1] * _mod_quotient(*xs)), out),
    family="elementwise", real_only=True, compiled=Source(ks.remainder, elementwise=True),
    operator="({0} % {1})",
    notes="x - floor(x/y)*y (numpy's sign convention): d/dx = 1, d/dy = -floor(x/y); "
          "undefined where x/y is an integer (a jump)"))

# ---------------------------------------------------------------------------------
# Selection
# ---------------------------------------------------------------------------------


def _where_type(types: list[TensorType]) -> TensorType:
    if types[0].dtype != np.bool_:
        raise LoweringError(f"where: the condition must be bool, got {types[0]}")
    if types[1].dtype != types[2].dtype:
        raise LoweringError(f"where: branches differ in dtype: {types[1]} vs {types[2]}")
    return TensorType(_broadcast(types, "where"), types[1].dtype)


def _where_impl(c, x, y):
    return np.where(c, x, y)


def _where_vjp(ct, xs, out):
    c, x, y = xs
    return (None, unbroadcast(bind("where", c, ct, 0.0), x.shape),
            unbroadcast(bind("where", c, 0.0, ct), y.shape))


def _where_jvp(ts, xs, out):
    if ts[1] is None and ts[2] is None:
        return None
    c = xs[0]
    tx = ts[1] if ts[1] is not None else 0.0
    ty = ts[2] if ts[2] is not None else 0.0
    return bind("broadcast_to", bind("where", c, tx, ty), shape=out.shape)


_register(Primitive(name="where", impl=_where_impl, abstract=_where_type, vjp=_where_vjp,
                    jvp=_where_jvp, family="selection", compiled=Source(ks.where),
                    promote_from=1, dynamic=(0,),
                    notes="only the selected input receives gradient; the other gets exactly 0, "
                          "which its own rule can still turn into nan (0 * inf: where(x > 0, "
                          "sqrt(x), 0) at x = 0, as in JAX); use cond, which never runs the "
                          "untaken branch"))


def _clip_type(types: list[TensorType]) -> TensorType:
    return TensorType(_broadcast(types, "clip"), types[0].dtype)


def _clip_vjp(ct, xs, out):
    x, lo, hi = xs
    inside = bind("logical_and", x >= lo, x <= hi)
    return (unbroadcast(ct * _mask(inside, ct), x.shape),
            unbroadcast(ct * _mask(x < lo, ct), lo.shape),
            unbroadcast(ct * _mask(x > hi, ct), hi.shape))


def _clip_jvp(ts, xs, out):
    x, lo, hi = xs
    inside = bind("logical_and", x >= lo, x <= hi)
    return _add_terms(None if ts[0] is None else ts[0] * _mask(inside, out),
                      None if ts[1] is None else ts[1] * _mask(x < lo, out),
                      None if ts[2] is None else ts[2] * _mask(x > hi, out))


_register(Primitive(name="clip", impl=np.clip, abstract=_clip_type, vjp=_clip_vjp, jvp=_clip_jvp,
                    family="selection", real_only=True, compiled=Source(ks.clip),
                    notes="at a bound (x == lo or x == hi) the gradient goes to x (1), as "
                          "PyTorch's clamp; lo/hi get it only where x is strictly outside"))

# ---------------------------------------------------------------------------------
# Reductions
# ---------------------------------------------------------------------------------


def _nonempty_reduction(op: str, t: TensorType, axes: tuple[int, ...]) -> None:
    """Reductions without an identity (max, min, their arg- forms, logsumexp's shift by the
    max) have no value over an empty axis: numpy raises at run time, so the rule refuses."""
    empty = [a for a in axes if t.shape[a] == 0]
    if empty:
        raise LoweringError(f"{op}: cannot reduce {t} over its empty axis {empty[0]} "
                            "(the reduction has no identity)")


def _reduction_type(op: str, out_dtype: Callable[[np.dtype], np.dtype],
                    identity: bool = True) -> Callable[..., TensorType]:
    def rule(types: list[TensorType], axes: tuple[int, ...], keepdims: bool) -> TensorType:
        t = types[0]
        axes = _axes_param(op, axes, t)
        keepdims = _bool_param(op, "keepdims", keepdims)
        if not identity:
            _nonempty_reduction(op, t, axes)
        return TensorType(_reduced_shape(t.shape, axes, keepdims), np.dtype(out_dtype(t.dtype)))

    return rule


def _sum_dtype(d: np.dtype) -> np.dtype:
    return np.dtype(np.int64) if d.kind in "bi" else (np.dtype(np.uint64) if d.kind == "u" else d)


def _mean_dtype(d: np.dtype) -> np.dtype:
    return np.dtype(np.float64) if d.kind in "biu" else d


def _spread(ct, x, axes, keepdims):
    """Broadcast a reduction's cotangent back over the reduced axes."""
    return bind("broadcast_to", _keep(ct, x.shape, axes, keepdims), shape=x.shape)


def _count(shape, axes) -> int:
    return int(np.prod([shape[a] for a in axes], dtype=np.int64))


def _extreme(name: str, impl: Callable, write: Callable[..., str]) -> None:
    def weights(x, out, axes, keepdims):
        hit = _mask(x == _keep(out, x.shape, axes, keepdims), x)
        return hit / bind("sum", hit, axes=axes, keepdims=True)

    def vjp(ct, xs, out, axes, keepdims):
        x = xs[0]
        return (_spread(ct, x, axes, keepdims) * weights(x, out, axes, keepdims),)

    def jvp(ts, xs, out, axes, keepdims):
        x = xs[0]
        return bind("sum", ts[0] * weights(x, out, axes, keepdims), axes=axes, keepdims=keepdims)

    _register(Primitive(name=name,
                        impl=lambda x, axes, keepdims: impl(x, axis=axes, keepdims=keepdims),
                        abstract=_reduction_type(name, lambda d: d, identity=False), vjp=vjp,
                        jvp=jvp,
                        family="reduction", promote="none", compiled=Source(write),
                        notes="ties share the gradient equally among the extreme entries"))


_register(Primitive(
    name="sum", impl=lambda x, axes, keepdims: x.sum(axis=axes, keepdims=keepdims),
    abstract=_reduction_type("sum", _sum_dtype),
    vjp=lambda ct, xs, out, axes, keepdims: (_spread(ct, xs[0], axes, keepdims),),
    jvp=lambda ts, xs, out, axes, keepdims: bind("sum", ts[0], axes=axes, keepdims=keepdims),
    family="reduction", promote="none", compiled=Source(ks.sum_)))
_register(Primitive(
    name="mean", impl=lambda x, axes, keepdims: np.mean(x, axis=axes, keepdims=keepdims),
    abstract=_reduction_type("mean", _mean_dtype),
    vjp=lambda ct, xs, out, axes, keepdims: (
        _spread(ct, xs[0], axes, keepdims) / float(_count(xs[0].shape, axes)),),
    jvp=lambda ts, xs, out, axes, keepdims: bind("mean", ts[0], axes=axes, keepdims=keepdims),
    family="reduction", promote="none", compiled=Source(ks.mean)))
_extreme("amax", np.max, ks.amax)
_extreme("amin", np.min, ks.amin)


def _prod_partials(x, out, axes, keepdims):
    """d prod / d x_i = product of the other entries, exact when some entries are zero."""
    zero = x == 0.0
    nonzero_x = bind("where", zero, 1.0, x)
    prod_nonzero = bind("prod", nonzero_x, axes=axes, keepdims=True)
    zeros = bind("sum", _mask(zero, x), axes=axes, keepdims=True)
    no_zero = prod_nonzero / nonzero_x
    one_zero_here = prod_nonzero * _mask(bind("logical_and", zero, zeros == 1.0), x)
    return bind("where", zeros == 0.0, no_zero, one_zero_here)


_register(Primitive(
    name="prod", impl=lambda x, axes, keepdims: np.prod(x, axis=axes, keepdims=keepdims),
    abstract=_reduction_type("prod", _sum_dtype),
    vjp=lambda ct, xs, out, axes, keepdims: (
        _spread(ct, xs[0], axes, keepdims) * _prod_partials(xs[0], out, axes, keepdims),),
    jvp=lambda ts, xs, out, axes, keepdims: bind(
        "sum", ts[0] * _prod_partials(xs[0], out, axes, keepdims), axes=axes,
        keepdims=keepdims),
    compiled=Source(ks.prod),
    family="reduction", promote="none", notes="exact with zeros: the product of the other entries"))


def _logsumexp_impl(x, axes, keepdims):
    m = np.max(x, axis=axes, keepdims=True)
    m = np.where(np.isfinite(m), m, np.zeros((), x.dtype))
    s = np.log(np.sum(np.exp(x - m), axis=axes, keepdims=True)) + m
    return s if keepdims else np.squeeze(s, axis=axes)


def shifted_by_max(x: Any, axes: tuple[int, ...]) -> Any:
    """x - max(x) over `axes`, with the maximum behind a stop_gradient.

    softmax, log_softmax and logsumexp are invariant to the shift, so it is a constant to
    their derivatives. Shifting by the maximum itself (exact in any dtype, unlike a rounded
    logsumexp) keeps exp of the result in [0, 1] and accurate to x's own dtype."""
    top = bind("stop_gradient", bind("amax", x, axes=axes, keepdims=True))
    return bind("sub", x, top)


def softmax_of(x: Any, axes: tuple[int, ...]) -> Any:
    """exp(x) / sum(exp(x)) over `axes`, from the shifted x: the gradient of logsumexp,
    and `cnp.softmax`."""
    e = bind("exp", shifted_by_max(x, axes))
    return e / bind("sum", e, axes=axes, keepdims=True)


_register(Primitive(
    name="logsumexp", impl=_logsumexp_impl,
    abstract=_reduction_type("logsumexp", lambda d: d, identity=False),
    vjp=lambda ct, xs, out, axes, keepdims: (
        _spread(ct, xs[0], axes, keepdims) * softmax_of(xs[0], axes),),
    jvp=lambda ts, xs, out, axes, keepdims: bind(
        "sum", ts[0] * softmax_of(xs[0], axes), axes=axes, keepdims=keepdims),
    compiled=Source(ks.logsumexp), family="reduction", promote="float", real_only=True,
    notes="shifted by the maximum: finite for inputs of any size"))


# -- Statistics family (issue 13): cumulative sums and products, sorting, searching. --------


def _along_spec(shape: tuple[int, ...], axis: int) -> tuple:
    """An index spec picking, at every position of `shape`, the entry of the traced index
    ('$', of `shape` too) along `axis`: numpy's take_along_axis as the `index` primitive,
    the other axes indexed by constant open grids, so its VJP is `scatter_add`'s."""
    return tuple("$" if d == axis else
                 np.arange(n, dtype=np.int64).reshape([n if e == d else 1
                                                       for e in range(len(shape))])
                 for d, n in enumerate(shape))


def _axis_type(op: str, out_dtype: Callable[[np.dtype], np.dtype]) -> Callable[..., TensorType]:
    def rule(types: list[TensorType], axis: int) -> TensorType:
        _axis_param(op, "axis", axis, types[0])
        return TensorType(types[0].shape, np.dtype(out_dtype(types[0].dtype)))

    return rule


def _cumsum_type(types: list[TensorType], axis: int, reverse: bool) -> TensorType:
    _bool_param("cumsum", "reverse", reverse)
    return _axis_type("cumsum", _sum_dtype)(types, axis=axis)


def _cumsum_impl(x, axis, reverse):
    if not reverse:
        return np.cumsum(x, axis=axis, dtype=_sum_dtype(x.dtype))
    return np.flip(np.cumsum(np.flip(x, axis), axis=axis, dtype=_sum_dtype(x.dtype)), axis)


_register(Primitive(
    name="cumsum", impl=_cumsum_impl, abstract=_cumsum_type,
    # The transpose of a running sum is the running sum from the other end.
    vjp=lambda ct, xs, out, axis, reverse: (
        bind("cumsum", ct, axis=axis, reverse=not reverse),),
    jvp=lambda ts, xs, out, axis, reverse: bind("cumsum", ts[0], axis=axis, reverse=reverse),
    compiled=Source(ks.cumsum), family="statistics", promote="none"))


def _cumprod_partials(x, axis):
    """D[..., i, j, ...] = d out_j / d x_i = prod of x_k over k <= j, k != i (0 for j < i),
    with the new axis i inserted before `axis`: a running product of x with entry i set to
    1, so it is exact where x has zeros (as JAX's, which differentiates an associative
    scan) and its own derivative is again a cumprod. O(n^2) along the axis."""
    shape, n = tuple(x.shape), x.shape[axis]
    lead, trail = shape[:axis], shape[axis + 1:]
    grid = (1,) * len(lead) + (n, n) + (1,) * len(trail)
    eye = np.eye(n, dtype=bool).reshape(grid)
    upper = np.triu(np.ones((n, n), dtype=bool)).reshape(grid)
    rows = bind("reshape", x, shape=lead + (1, n) + trail)
    running = bind("cumprod", bind("where", eye, 1.0, rows), axis=axis + 1)
    return bind("where", upper, running, 0.0)


def _cumprod_vjp(ct, xs, out, axis):
    x = xs[0]
    shape = tuple(x.shape)
    cts = bind("reshape", ct, shape=shape[:axis] + (1, shape[axis]) + shape[axis + 1:])
    return (bind("sum", _cumprod_partials(x, axis) * cts, axes=(axis + 1,), keepdims=False),)


def _cumprod_jvp(ts, xs, out, axis):
    x = xs[0]
    shape = tuple(x.shape)
    t = bind("reshape", ts[0], shape=shape[:axis + 1] + (1,) + shape[axis + 1:])
    return bind("sum", _cumprod_partials(x, axis) * t, axes=(axis,), keepdims=False)


_register(Primitive(
    name="cumprod", impl=lambda x, axis: np.cumprod(x, axis=axis, dtype=_sum_dtype(x.dtype)),
    abstract=_axis_type("cumprod", _sum_dtype), vjp=_cumprod_vjp, jvp=_cumprod_jvp,
    compiled=Source(ks.cumprod), family="statistics", promote="none",
    notes="exact with zeros: d out_j / d x_i is the product of x_k over k <= j, k != i"))


def _sort_vjp(ct, xs, out, axis):
    x = xs[0]
    perm = bind("argsort", x, axis=axis)
    return (bind("scatter_add", ct, perm, spec=_along_spec(tuple(x.shape), axis),
                 shape=tuple(x.shape)),)


def _sort_jvp(ts, xs, out, axis):
    x = xs[0]
    perm = bind("argsort", x, axis=axis)
    return bind("index", ts[0], perm, spec=_along_spec(tuple(x.shape), axis))


# Numba's sort is not numpy's stable one
ORDERING = NotCompiled("an ordering, which Numba's sort could give in another order than "
                       "numpy's stable one (ties, signed zeros, NaNs)")
_register(Primitive(
    name="sort", impl=lambda x, axis: np.sort(x, axis=axis, kind="stable"),
    abstract=_axis_type("sort", lambda d: d), vjp=_sort_vjp, jvp=_sort_jvp,
    family="statistics", promote="none", compiled=ORDERING,
    notes="a stable sort (NaN last): each output takes the gradient of the input it came "
          "from, so of tied entries the earlier one goes first, as JAX's"))
_register(Primitive(
    name="argsort", impl=lambda x, axis: np.argsort(x, axis=axis, kind="stable"),
    abstract=_axis_type("argsort", lambda d: np.dtype(np.int64)),
    family="statistics", promote="none", nondiff=True, compiled=ORDERING,
    notes="a stable sort's permutation (ties keep their order, NaN last): no derivative"))


def _searchsorted_type(types: list[TensorType], side: str) -> TensorType:
    if side not in ("left", "right"):
        raise LoweringError(f"searchsorted: parameter side must be 'left' or 'right', got "
                            f"{side!r}")
    if types[0].ndim != 1:
        raise LoweringError(f"searchsorted: the sorted array must be 1-D, got {types[0]}")
    return TensorType(types[1].shape, np.dtype(np.int64))


_register(Primitive(
    name="searchsorted",
    impl=lambda a, v, side: np.asarray(np.searchsorted(a, v, side=side), dtype=np.int64),
    abstract=_searchsorted_type, family="statistics", nondiff=True, compiled=ORDERING,
    notes="insertion indices into a sorted 1-D array: no derivative"))


def _arg_type(op: str) -> Callable[..., TensorType]:
    def rule(types: list[TensorType], axis: int | None) -> TensorType:
        t = types[0]
        if axis is None:  # over the flattened array
            _nonempty_reduction(op, TensorType((t.size,), t.dtype), (0,))
            return TensorType((), np.dtype(np.int64))
        axis = _axis_param(op, "axis", axis, t)
        _nonempty_reduction(op, t, (axis,))
        return TensorType(_reduced_shape(t.shape, (axis,), False), np.dtype(np.int64))

    return rule


for _name, _fn in [("argmax", np.argmax), ("argmin", np.argmin)]:
    _register(Primitive(name=_name, impl=(lambda f: lambda x, axis: f(x, axis=axis))(_fn),
                        abstract=_arg_type(_name),
                        family="reduction", promote="none", nondiff=True, real_only=True,
                        compiled=Source(getattr(ks, _name)),
                        notes="integer result: no derivative"))

# ---------------------------------------------------------------------------------
# Linear algebra
# ---------------------------------------------------------------------------------


def _matmul_type(types: list[TensorType]) -> TensorType:
    a, b = types
    if a.ndim == 0 or b.ndim == 0:
        raise LoweringError(f"matmul: operands must be at least 1-D, got {a} and {b}")
    ka = a.shape[-1]
    kb = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if ka != kb:
        raise LoweringError(f"matmul: contracted dimensions differ: {a} @ {b}")
    batch = _broadcast([TensorType(a.shape[:-2], a.dtype), TensorType(b.shape[:-2], b.dtype)],
                       "matmul")
    shape = batch + (a.shape[-2:-1] if a.ndim > 1 else ()) + (b.shape[-1:] if b.ndim > 1 else ())
    return TensorType(tuple(shape), a.dtype)


def _swap_last(x):
    perm = tuple(range(len(x.shape) - 2)) + (len(x.shape) - 1, len(x.shape) - 2)
    return bind("transpose", x, axes=perm)


def _outer(u, v):
    return bind("reshape", u, shape=(u.shape[0], 1)) * bind("reshape", v, shape=(1, v.shape[0]))


def _matmul_vjp(ct, xs, out):
    a, b = xs
    if len(a.shape) == 1 and len(b.shape) == 1:
        return ct * b, ct * a
    # matrix-vector products (an RNN step) need no batch bookkeeping: an outer product
    # and one matmul with the transpose
    if len(a.shape) == 2 and len(b.shape) == 1:
        return _outer(ct, b), bind("matmul", _swap_last(a), ct)
    if len(a.shape) == 1 and len(b.shape) == 2:
        return bind("matmul", b, ct), _outer(a, ct)
    a2 = a if len(a.shape) > 1 else bind("reshape", a, shape=(1, a.shape[0]))
    b2 = b if len(b.shape) > 1 else bind("reshape", b, shape=(b.shape[0], 1))
    out2 = tuple(np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])) + (a2.shape[-2], b2.shape[-1])
    ct2 = bind("reshape", ct, shape=out2)
    da = unbroadcast(bind("matmul", ct2, _swap_last(b2)), a2.shape)
    db = unbroadcast(bind("matmul", _swap_last(a2), ct2), b2.shape)
    return bind("reshape", da, shape=a.shape), bind("reshape", db, shape=b.shape)


_register(Primitive(
    name="matmul", impl=np.matmul, abstract=_matmul_type, vjp=_matmul_vjp,
    jvp=lambda ts, xs, out: _add_terms(
        None if ts[0] is None else bind("matmul", ts[0], xs[1]),
        None if ts[1] is None else bind("matmul", xs[0], ts[1])),
    family="linalg", operator="({0} @ {1})",
    notes="numpy matmul semantics, including 1-D operands and batch broadcasting",
    compiled=Source(ks.matmul)))

# -- Linear algebra and contractions (issue 13, the linalg family): numpy's LAPACK kernels,
# each rule from a published derivation, written with primitives so adjoints are IR and
# differentiate again. Sources: M. Giles, "An extended collection of matrix derivative
# results for forward and reverse mode AD" (2008) for solve, det, slogdet, and (§3.1, with
# the tangent of LAPACK's normalization as JAX's lax.linalg.eig adds it) eig; I. Murray,
# "Differentiation of the Cholesky decomposition" (2016) and Seeger et al. (2017) for
# cholesky; J. Townsend, "Differentiating the singular value decomposition" (2016) for svd;
# the eigh, qr and pinv (Golub and Pereyra 1973) rules as JAX states them. Matrices are the
# last two axes; leading axes are a batch.


def _eye_like(x: Any, n: int) -> np.ndarray:
    """The n×n identity in x's dtype (a float64 eye would promote float32 rules)."""
    return np.eye(n, dtype=x.dtype)


def _mm(a: Any, b: Any) -> Any:
    return bind("matmul", a, b)


def _diag_of(x: Any) -> Any:
    """The diagonals of a stack of square matrices, (..., n, n) -> (..., n)."""
    return bind("sum", x * _eye_like(x, x.shape[-1]), axes=(len(x.shape) - 1,), keepdims=False)


def _as_diag(v: Any) -> Any:
    """(..., n) -> (..., n, n) with v on the diagonal."""
    n = v.shape[-1]
    return bind("reshape", v, shape=tuple(v.shape) + (1,)) * _eye_like(v, n)


def _row(v: Any) -> Any:
    """(..., n) -> (..., 1, n): scales the columns of a matrix it multiplies."""
    return bind("reshape", v, shape=tuple(v.shape[:-1]) + (1, v.shape[-1]))


def _col(v: Any) -> Any:
    """(..., n) -> (..., n, 1): scales the rows of a matrix it multiplies."""
    return bind("reshape", v, shape=tuple(v.shape) + (1,))


def _matrix_shape(op: str, t: TensorType) -> tuple[int, int]:
    """(rows, columns) of the matrices `t` is a stack of; an error for fewer than 2 axes."""
    if t.ndim < 2:
        raise LoweringError(f"{op}: needs a (stack of) matrices, got {t}")
    return t.shape[-2], t.shape[-1]


def _square(op: str, t: TensorType) -> int:
    if t.ndim < 2 or t.shape[-1] != t.shape[-2]:
        raise LoweringError(f"{op}: needs a (stack of) square matrices, got {t}")
    return t.shape[-1]


def _linalg_dtype(op: str, t: TensorType, complex_ok: bool = False) -> np.dtype:
    """LAPACK computes in float32 or float64 (inputs are promoted to floats first), and in
    complex64 or complex128 for the rules that hold for complex matrices too."""
    allowed = (np.float32, np.float64) + ((np.complex64, np.complex128) if complex_ok else ())
    if t.dtype not in allowed:
        kinds = "float32, float64, complex64 or complex128" if complex_ok else \
            "float32 or float64"
        raise LoweringError(f"{op}: needs {kinds} matrices, got {t}")
    return t.dtype


def _batch(op: str, *types: TensorType) -> tuple[int, ...]:
    return _broadcast([TensorType(t.shape[:-2], t.dtype) for t in types], op)


def _inverse_transpose(a: Any) -> Any:
    """A^{-T} of a stack of square matrices, as a solve (no inverse primitive)."""
    return bind("solve", _swap_last(a), _eye_like(a, a.shape[-1]))


def _trace_of_solve(a: Any, b: Any) -> Any:
    """tr(A^{-1} B) per matrix of the stack."""
    return bind("sum", _diag_of(bind("solve", a, b)), axes=(len(a.shape) - 2,),
                keepdims=False)


@functools.lru_cache(maxsize=512)
def _einsum_plan(subscripts: str, shapes: tuple) -> Any:
    """How np.einsum contracts operands of these shapes, decided once per signature:
    numpy's greedy order (pairwise, through BLAS where it can) for three or more operands
    or large ones, its plain loop (no planning overhead, ~10 µs) for small pairs."""
    if len(shapes) < 3 and max(int(np.prod(s, dtype=np.int64)) for s in shapes) < 4096:
        return False
    return np.einsum_path(subscripts, *(np.empty(s) for s in shapes), optimize="greedy")[0]


def _einsum_impl(*xs: np.ndarray, subscripts: str) -> np.ndarray:
    return np.einsum(subscripts, *xs, optimize=_einsum_plan(
        subscripts, tuple(x.shape for x in xs)))


def _einsum_parts(subscripts: str) -> tuple[list[str], str]:
    inputs, output = subscripts.split("->")
    return inputs.split(","), output


def _einsum_type(types: list[TensorType], subscripts: str) -> TensorType:
    """`subscripts` is explicit (`ij,jk->ik`: letters, no ellipsis, an output), as
    cnp.einsum normalizes it; each letter has one size."""
    if not isinstance(subscripts, str) or subscripts.count("->") != 1 or not all(
            c.isalpha() or c in ",->" for c in subscripts):
        raise LoweringError(f"einsum: parameter subscripts must be explicit letters "
                            f"('ij,jk->ik'), got {subscripts!r}")
    inputs, output = _einsum_parts(subscripts)
    if len(inputs) != len(types):
        raise LoweringError(f"einsum: {subscripts!r} names {len(inputs)} operands, the node "
                            f"has {len(types)}")
    sizes: dict[str, int] = {}
    for letters, t in zip(inputs, types):
        if len(letters) != t.ndim:
            raise LoweringError(f"einsum: {letters!r} does not fit an operand {t}")
        for c, d in zip(letters, t.shape):
            if sizes.setdefault(c, d) != d:
                raise LoweringError(f"einsum: index {c!r} has sizes {sizes[c]} and {d}")
    if len(set(output)) != len(output) or any(c not in sizes for c in output):
        raise LoweringError(f"einsum: output {output!r} repeats a letter or has one no "
                            "operand has")
    return TensorType(tuple(sizes[c] for c in output), types[-1].dtype)


def _einsum_vjp(ct, xs, out, subscripts):
    """The cotangent of operand i is the einsum of the output's cotangent with the other
    operands into operand i's indices; a letter operand i repeats (a diagonal) is renamed
    and joined to its first occurrence by an identity, and a letter only operand i has (a
    sum over it) comes back as a broadcast, by a ones vector."""
    inputs, output = _einsum_parts(subscripts)
    used = set(subscripts)
    free = iter(c for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                if c not in used)
    cts = []
    for i, (letters, x) in enumerate(zip(inputs, xs)):
        terms, operands = [output], [ct]
        for j, (other, y) in enumerate(zip(inputs, xs)):
            if j != i:
                terms.append(other)
                operands.append(y)
        present = set("".join(terms))
        target = []
        for c, d in zip(letters, x.shape):
            if c in target:  # a repeated letter: a fresh one, tied by an identity
                fresh = next(free)
                terms.append(c + fresh)
                operands.append(_eye_like(x, d))
                target.append(fresh)
                continue
            if c not in present:  # summed in operand i only: broadcast back
                terms.append(c)
                operands.append(np.ones(d, x.dtype))
                present.add(c)
            target.append(c)
        cts.append(bind("einsum", *operands, subscripts=",".join(terms) + "->" + "".join(target)))
    return tuple(cts)


def _einsum_jvp(ts, xs, out, subscripts):
    return _add_terms(*(None if t is None else bind(
        "einsum", *xs[:i], t, *xs[i + 1:], subscripts=subscripts) for i, t in enumerate(ts)))


_register(Primitive(
    name="einsum", impl=_einsum_impl, abstract=_einsum_type, vjp=_einsum_vjp,
    jvp=_einsum_jvp, family="linalg",
    compiled=NotCompiled("Numba has no np.einsum, and no Numba source is written for it yet"),
    notes="numpy's einsum on explicit subscripts (cnp.einsum expands '...' and the implicit "
          "output); linear in each operand: the VJP of an operand is an einsum of the "
          "cotangent with the others", aliases=True))


def _solve_type(types: list[TensorType]) -> TensorType:
    a, b = types
    n = _square("solve", a)
    dtype = _linalg_dtype("solve", a, complex_ok=True)
    if b.ndim < 2 or b.shape[-2] != n:
        raise LoweringError(f"solve: the right-hand side {b} must be a (stack of) {n}×k "
                            f"matrices for {a}")
    return TensorType(_batch("solve", a, b) + b.shape[-2:], dtype)


def _solve_vjp(ct, xs, out):
    a, b = xs
    gb = bind("solve", _swap_last(a), ct)
    return unbroadcast(-_mm(gb, _swap_last(out)), a.shape), unbroadcast(gb, b.shape)


def _solve_jvp(ts, xs, out):
    ta, tb = ts
    rhs = _add_terms(tb, None if ta is None else -_mm(ta, out))
    return bind("solve", xs[0], rhs)


_register(Primitive(
    compiled=NEEDS_LAPACK,
    name="solve", impl=np.linalg.solve, abstract=_solve_type, vjp=_solve_vjp,
    jvp=_solve_jvp, family="linalg", promote="float",
    notes="x = A^{-1} B for (stacks of) square A and n×k B, batch axes broadcast (cnp.linalg."
          "solve takes a 1-D b as a vector, as numpy 2 and JAX); dB = A^{-T} ct, dA = -dB "
          "x^T (Giles 2008), also for complex matrices (holomorphic: the transpose, JAX's "
          "convention); a singular A raises numpy's LinAlgError"))


def _cholesky_impl(a: np.ndarray) -> np.ndarray:
    """numpy's Cholesky factor, NaN for a matrix that is not positive definite (as JAX)."""
    try:
        return np.linalg.cholesky(a)
    except np.linalg.LinAlgError:
        flat = a.reshape((-1,) + a.shape[-2:])
        out = np.full_like(flat, np.nan)
        for k, m in enumerate(flat):  # only when some matrix of the stack fails
            if np.all(np.linalg.eigvalsh(m) > 0):
                out[k] = np.linalg.cholesky(m)
        return out.reshape(a.shape)


def _lower_mask(x: Any) -> np.ndarray:
    """Phi of Murray (2016): the lower triangle with the diagonal halved."""
    n = x.shape[-1]
    return (np.tril(np.ones((n, n)), -1) + 0.5 * np.eye(n)).astype(x.dtype)


def _cholesky_jvp(ts, xs, out):
    """dL = L Phi(L^{-1} dA L^{-T})."""
    inner = _swap_last(bind("solve", out, _swap_last(bind("solve", out, ts[0]))))
    return _mm(out, inner * _lower_mask(out))


def _cholesky_vjp(ct, xs, out):
    """A-bar = L^{-T} Phi(L^T L-bar) L^{-1}, the transpose of the JVP."""
    lt = _swap_last(out)
    left = bind("solve", lt, _mm(lt, ct) * _lower_mask(out))
    return (_swap_last(bind("solve", lt, _swap_last(left))),)


def _factor_type(op: str) -> Callable[..., TensorType]:
    def rule(types: list[TensorType]) -> TensorType:
        _square(op, types[0])
        return TensorType(types[0].shape, _linalg_dtype(op, types[0]))

    return rule


_register(Primitive(
    compiled=NEEDS_LAPACK,
    name="cholesky", impl=_cholesky_impl, abstract=_factor_type("cholesky"),
    vjp=_cholesky_vjp, jvp=_cholesky_jvp, family="linalg", promote="float",
    notes="the lower factor L of a symmetric positive definite A (cnp.linalg.cholesky "
          "symmetrizes its input first, as JAX, so the gradient is symmetric); NaN where A "
          "is not positive definite, as JAX; rules of Murray (2016): dL = L Phi(L^{-1} dA "
          "L^{-T}), Phi the lower triangle with the diagonal halved"))


def _eigh_type(types: list[TensorType], uplo: str) -> list[TensorType]:
    t = types[0]
    if uplo not in ("L", "U"):
        raise LoweringError(f"eigh: parameter uplo must be 'L' or 'U', got {uplo!r}")
    _square("eigh", t)
    dtype = _linalg_dtype("eigh", t)
    return [TensorType(t.shape[:-1], dtype), TensorType(t.shape, dtype)]


def _gap_reciprocals(w: Any) -> Any:
    """F[i, j] = 1 / (w[j] - w[i]) off the diagonal, 0 on it."""
    eye = _eye_like(w, w.shape[-1])
    return 1.0 / (_row(w) - _col(w) + eye) - eye


def _eigh_jvp(ts, xs, outs, uplo):
    w, v = outs
    vt = _swap_last(v)
    rotated = _mm(vt, _mm(ts[0], v))
    return [_diag_of(rotated), _mm(v, _gap_reciprocals(w) * rotated)]


def _eigh_vjp(cts, xs, outs, uplo):
    w, v = outs
    gw, gv = cts
    inner = _add_terms(None if gw is None else _as_diag(gw),
                       None if gv is None else _gap_reciprocals(w) * _mm(_swap_last(v), gv))
    return (_mm(v, _mm(inner, _swap_last(v))),)


_register(Primitive(
    compiled=NEEDS_LAPACK,
    name="eigh", impl=lambda a, uplo: tuple(np.linalg.eigh(a, uplo)), abstract=_eigh_type,
    vjp=_eigh_vjp, jvp=_eigh_jvp, family="linalg", promote="float", multi_output=True,
    notes="eigenvalues (ascending) and eigenvectors of a symmetric matrix (cnp.linalg.eigh "
          "symmetrizes its input, as JAX; `uplo` only picks LAPACK's triangle, which keeps "
          "numpy's eigenvector signs); derivatives need distinct eigenvalues: dw = "
          "diag(V^T dA V), dV = V (F * V^T dA V) with F[i, j] = 1/(w[j] - w[i]), so "
          "V^T dV has a zero diagonal (JAX's gauge); each eigenvector's sign is LAPACK's"))


def _eig_type(types: list[TensorType]) -> list[TensorType]:
    t = types[0]
    _square("eig", t)
    dtype = complex_dtype(_linalg_dtype("eig", t, complex_ok=True))
    return [TensorType(t.shape[:-1], dtype), TensorType(t.shape, dtype)]


def _eig_impl(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """numpy's eig, complex even where numpy's is real (all eigenvalues real), as JAX's."""
    w, v = np.linalg.eig(a)
    dtype = complex_dtype(a.dtype)
    return w.astype(dtype, copy=False), v.astype(dtype, copy=False)


def _column_sums(x: Any) -> Any:
    """(..., n, n) -> (..., n): the sum of each column."""
    return bind("sum", x, axes=(len(x.shape) - 2,), keepdims=False)


def _largest_entries(v: Any) -> Any:
    """1 at the entry of largest modulus of each column of V (the one LAPACK makes real,
    the first of equals), 0 elsewhere, in V's dtype."""
    n = v.shape[-1]
    k = bind("argmax", bind("abs", v), axis=len(v.shape) - 2)
    return bind("astype", bind("eq", _row(k), np.arange(n).reshape(n, 1)), dtype=v.dtype)


def _eig_jvp(ts, xs, outs):
    """Giles (2008) §3.1 with JAX's gauge: P = V^{-1} dA V, dw = diag(P), U = V (F * P);
    dV = U + V diag(c) with c[j] = -Re(v_j^H u_j) - i Im(u[k, j]) / Re(v[k, j]), k the
    entry of v_j of largest modulus: the tangent of LAPACK's normalization (unit 2-norm
    columns whose largest entry is real), so FD of numpy's eig sees the same."""
    w, v = outs
    da = ts[0] if ts[0].dtype == v.dtype else bind("astype", ts[0], dtype=v.dtype)
    p = _mm(bind("solve", v, da), v)
    u = _mm(v, _gap_reciprocals(w) * p)
    mask = _largest_entries(v)
    size = -bind("real", _column_sums(bind("conj", v) * u))
    phase = -bind("imag", _column_sums(mask * u)) / bind("real", _column_sums(mask * v))
    c = bind("astype", size, dtype=v.dtype) + bind("astype", phase, dtype=v.dtype) * \
        np.asarray(1j, v.dtype)
    return [_diag_of(p), u + v * _row(c)]


def _eig_vjp(cts, xs, outs):
    """The transpose of `_eig_jvp` in JAX's convention (a cotangent g of z stands for
    dz -> Re(g dz)), step by step: dV = U + V diag(c) gives U-bar = V-bar and c-bar =
    colsum(V-bar * V); c = x + i y with x = -Re(s), y = -Im(t) / r gives s-bar =
    -Re(c-bar) and t-bar = -i Im(c-bar) / r, so U-bar += conj(V) s-bar + mask t-bar; then
    P-bar = diag(w-bar) + F * V^T U-bar and A-bar = V^{-T} P-bar V^T (the real part for a
    real A)."""
    a = xs[0]
    w, v = outs
    gw, gv = cts
    inner = None if gw is None else _as_diag(gw)
    if gv is not None:
        mask = _largest_entries(v)
        cbar = _column_sums(gv * v)
        r = bind("real", _column_sums(mask * v))
        sbar = -bind("astype", bind("real", cbar), dtype=v.dtype)
        tbar = bind("astype", bind("imag", cbar) / r, dtype=v.dtype) * np.asarray(-1j, v.dtype)
        ubar = gv + bind("conj", v) * _row(sbar) + mask * _row(tbar)
        inner = _add_terms(inner, _gap_reciprocals(w) * _mm(_swap_last(v), ubar))
    vt = _swap_last(v)
    ga = bind("solve", vt, _mm(inner, vt))
    return (ga if a.dtype.kind == "c" else bind("real", ga),)


_register(Primitive(
    compiled=NEEDS_LAPACK,
    name="eig", impl=_eig_impl, abstract=_eig_type, vjp=_eig_vjp, jvp=_eig_jvp,
    family="linalg", promote="float", multi_output=True,
    notes="numpy's eig of a real or complex matrix: eigenvalues w and right eigenvectors V, "
          "always complex (as JAX), LAPACK's normalization (unit 2-norm columns, the "
          "largest entry real); derivatives need distinct eigenvalues: dw = diag(V^{-1} dA "
          "V), dV = V (F * V^{-1} dA V) with F[i, j] = 1/(w[j] - w[i]) (Giles 2008 §3.1) "
          "plus the tangent of the normalization, as JAX's lax.linalg.eig; a real A's "
          "cotangent is real"))


def _svd_type(types: list[TensorType], full_matrices: bool) -> list[TensorType]:
    t = types[0]
    full = _bool_param("svd", "full_matrices", full_matrices)
    dtype = _linalg_dtype("svd", t)
    m, n = _matrix_shape("svd", t)
    k = min(m, n)
    batch = t.shape[:-2]
    return [TensorType(batch + (m, m if full else k), dtype), TensorType(batch + (k,), dtype),
            TensorType(batch + (n if full else k, n), dtype)]


def _no_complete_derivative(op: str, a: Any, complete: bool) -> None:
    m, n = a.shape[-2:]
    if complete and m != n:
        raise LoweringError(f"{op}: no derivative of the complete factors of a non-square "
                            f"{m}×{n} matrix (they are not unique; JAX refuses too): use the "
                            "reduced ones")


def _svd_jvp(ts, xs, outs, full_matrices):
    """JAX's statement of Townsend (2016), real case."""
    a = xs[0]
    _no_complete_derivative("svd", a, full_matrices)
    u, s, vh = outs
    v = _swap_last(vh)
    da = ts[0]
    ds_mat = _mm(_swap_last(u), _mm(da, v))
    ds = _diag_of(ds_mat)
    f = _gap_reciprocals(s * s)
    dss = ds_mat * _row(s)
    sds = _col(s) * ds_mat
    du = _mm(u, f * (dss + _swap_last(dss)))
    dv = _mm(v, f * (sds + _swap_last(sds)))
    m, n = a.shape[-2:]
    if m > n:
        dav = _mm(da, v)
        du = du + (dav - _mm(u, _mm(_swap_last(u), dav))) / _row(s)
    if n > m:
        dahu = _mm(_swap_last(da), u)
        dv = dv + (dahu - _mm(v, _mm(_swap_last(v), dahu))) / _row(s)
    return [du, ds, _swap_last(dv)]


def _svd_vjp(cts, xs, outs, full_matrices):
    """The transpose of the JVP: A-bar = U [diag(s-bar) + (J + J^T) S + S (K + K^T)] V^T
    with J = F * U^T U-bar, K = F * V^T V-bar, plus the parts off the column spaces for
    non-square A (Townsend 2016)."""
    a = xs[0]
    _no_complete_derivative("svd", a, full_matrices)
    u, s, vh = outs
    gu, gs, gvh = cts
    v = _swap_last(vh)
    f = _gap_reciprocals(s * s)
    inner, extra = [], []
    if gs is not None:
        inner.append(_as_diag(gs))
    m, n = a.shape[-2:]
    if gu is not None:
        j = f * _mm(_swap_last(u), gu)
        inner.append((j + _swap_last(j)) * _row(s))
        if m > n:
            scaled = gu / _row(s)
            extra.append(_mm(scaled - _mm(u, _mm(_swap_last(u), scaled)), vh))
    if gvh is not None:
        gv = _swap_last(gvh)
        k = f * _mm(vh, gv)
        inner.append(_col(s) * (k + _swap_last(k)))
        if n > m:
            scaled = gv / _row(s)
            extra.append(_mm(u, _swap_last(scaled - _mm(v, _mm(vh, scaled)))))
    core = _mm(u, _mm(_add_terms(*inner), vh))
    return (_add_terms(core, *extra),)


_register(Primitive(
    compiled=NEEDS_LAPACK,
    name="svd", impl=lambda a, full_matrices: tuple(np.linalg.svd(a, full_matrices)),
    abstract=_svd_type, vjp=_svd_vjp, jvp=_svd_jvp, family="linalg", promote="float",
    multi_output=True,
    notes="u, s, vh with s descending; derivatives (Townsend 2016, JAX's rule) need "
          "distinct nonzero singular values, and the reduced factors of a non-square matrix "
          "(full_matrices=True only for square ones, as JAX); singular vectors' signs are "
          "LAPACK's"))


def _qr_type(types: list[TensorType], complete: bool) -> list[TensorType]:
    t = types[0]
    complete = _bool_param("qr", "complete", complete)
    dtype = _linalg_dtype("qr", t)
    m, n = _matrix_shape("qr", t)
    k = m if complete else min(m, n)
    return [TensorType(t.shape[:-2] + (m, k), dtype), TensorType(t.shape[:-2] + (k, n), dtype)]


def _strict_lower(x: Any) -> np.ndarray:
    n = x.shape[-1]
    return np.tril(np.ones((n, n), x.dtype), -1)


def _columns(x: Any, start: int, stop: int) -> Any:
    return bind("index", x, spec=(Ellipsis, slice(None, None, None), slice(start, stop, None)))


def _thin_qr_jvp(q, r, da):
    """JAX's rule for m >= n: with Z = dA R^{-1} and C = Q^T Z, dQ = Q (W - C) + Z and
    dR = (C - W) R, W the skew-symmetric matrix of C's strictly lower part."""
    z = _swap_last(bind("solve", _swap_last(r), _swap_last(da)))
    c = _mm(_swap_last(q), z)
    low = c * _strict_lower(c)
    w = low - _swap_last(low)
    return _mm(q, w - c) + z, _mm(c - w, r)


def _thin_qr_vjp(q, r, gq, gr):
    """The transpose of `_thin_qr_jvp`: with G = Q^T Q-bar - R-bar R^T, A-bar =
    (Q (low(G - G^T) - G) + Q-bar) R^{-T}."""
    g = _add_terms(None if gq is None else _mm(_swap_last(q), gq),
                   None if gr is None else -_mm(gr, _swap_last(r)))
    h = _add_terms(_mm(q, (g - _swap_last(g)) * _strict_lower(g) - g), gq)
    return _swap_last(bind("solve", r, _swap_last(h)))


def _qr_jvp(ts, xs, outs, complete):
    """A wide A = [A1 A2] (m < n) as JAX: Q, R1 are the QR of the square A1, and
    R2 = Q^T A2 gives dR2 = dQ^T A2 + Q^T dA2."""
    a, da = xs[0], ts[0]
    _no_complete_derivative("qr", a, complete and a.shape[-2] > a.shape[-1])
    q, r = outs
    m, n = a.shape[-2:]
    if m >= n:
        return list(_thin_qr_jvp(q, r, da))
    dq, dr1 = _thin_qr_jvp(q, _columns(r, 0, m), _columns(da, 0, m))
    dr2 = _mm(_swap_last(dq), _columns(a, m, n)) + _mm(_swap_last(q), _columns(da, m, n))
    return [dq, bind("concatenate", dr1, dr2, axis=len(a.shape) - 1)]


def _qr_vjp(cts, xs, outs, complete):
    a = xs[0]
    _no_complete_derivative("qr", a, complete and a.shape[-2] > a.shape[-1])
    q, r = outs
    gq, gr = cts
    m, n = a.shape[-2:]
    if m >= n:
        return (_thin_qr_vjp(q, r, gq, gr),)
    if gr is None:
        gr1, ga2 = None, np.zeros(tuple(a.shape[:-1]) + (n - m,), a.dtype)
    else:
        gr1, gr2 = _columns(gr, 0, m), _columns(gr, m, n)
        gq = _add_terms(gq, _mm(_columns(a, m, n), _swap_last(gr2)))
        ga2 = _mm(q, gr2)
    ga1 = _thin_qr_vjp(q, _columns(r, 0, m), gq, gr1)
    return (bind("concatenate", ga1, ga2, axis=len(a.shape) - 1),)


_register(Primitive(
    compiled=NEEDS_LAPACK,
    name="qr", impl=lambda a, complete: tuple(np.linalg.qr(a, "complete" if complete else
                                                            "reduced")),
    abstract=_qr_type, vjp=_qr_vjp, jvp=_qr_jvp, family="linalg", promote="float",
    multi_output=True,
    notes="Q, R with LAPACK's signs; derivatives by JAX's rule, a wide matrix's through "
          "the QR of its leading square block; not for the complete factors of a tall matrix "
          "(JAX 0.10 has a rule for those, cfgrad refuses)"))


def _det_type(types: list[TensorType]) -> TensorType:
    t = types[0]
    _square("det", t)
    return TensorType(t.shape[:-2], _linalg_dtype("det", t))


def _expand2(x: Any) -> Any:
    return bind("reshape", x, shape=tuple(x.shape) + (1, 1))


_register(Primitive(
    compiled=NEEDS_LAPACK,
    name="det", impl=np.linalg.det, abstract=_det_type,
    vjp=lambda ct, xs, out: (_expand2(ct * out) * _inverse_transpose(xs[0]),),
    jvp=lambda ts, xs, out: out * _trace_of_solve(xs[0], ts[0]),
    family="linalg", promote="float",
    notes="numpy's LU determinant; d det = det tr(A^{-1} dA) (Giles 2008), so the gradient "
          "det A^{-T} is inf/NaN at a singular A (JAX gives the cofactor matrix there)"))


def _slogdet_type(types: list[TensorType]) -> list[TensorType]:
    t = _det_type(types)
    return [t, t]


def _slogdet_vjp(cts, xs, outs):
    if cts[1] is None:
        return (None,)
    return (_expand2(cts[1]) * _inverse_transpose(xs[0]),)


_register(Primitive(
    compiled=NEEDS_LAPACK,
    name="slogdet", impl=lambda a: tuple(np.linalg.slogdet(a)), abstract=_slogdet_type,
    vjp=_slogdet_vjp, jvp=lambda ts, xs, outs: [None, _trace_of_solve(xs[0], ts[0])],
    family="linalg", promote="float", multi_output=True,
    notes="sign and log|det|; the sign has derivative 0, d log|det| = tr(A^{-1} dA)"))


def _pinv_impl(a: np.ndarray, rtol: float) -> np.ndarray:
    """JAX's pseudo-inverse: singular values at most rtol times the largest count as 0."""
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    cutoff = rtol * s[..., :1]
    s = np.where(s > cutoff, s, np.inf)
    return np.matmul(np.swapaxes(vh, -1, -2), np.swapaxes(u, -1, -2) / s[..., :, None])


def _pinv_type(types: list[TensorType], rtol: float) -> TensorType:
    t = types[0]
    if not isinstance(rtol, float) or rtol < 0:
        raise LoweringError(f"pinv: parameter rtol must be a float >= 0, got {rtol!r}")
    m, n = _matrix_shape("pinv", t)
    return TensorType(t.shape[:-2] + (n, m), _linalg_dtype("pinv", t))


def _pinv_jvp(ts, xs, out, rtol):
    """Golub and Pereyra (1973), as JAX: dP = -P dA P + P P^T dA^T (I - A P)
    + (I - P A) dA^T P^T P, for A of constant rank."""
    a, p, da = xs[0], out, ts[0]
    pt, dat = _swap_last(p), _swap_last(da)
    s = _mm(_mm(p, pt), dat)
    t = _mm(dat, _mm(pt, p))
    return -_mm(_mm(p, da), p) + s - _mm(_mm(s, a), p) + t - _mm(p, _mm(a, t))


def _pinv_vjp(ct, xs, out, rtol):
    """The transpose of the JVP: -P^T G P^T + (I - A P) G^T P P^T + P^T P G^T (I - P A)."""
    a, p = xs[0], out
    pt, gt = _swap_last(p), _swap_last(ct)
    left = _mm(gt, _mm(p, pt))
    right = _mm(_mm(pt, p), gt)
    return (-_mm(pt, _mm(ct, pt)) + left - _mm(a, _mm(p, left))
            + right - _mm(_mm(right, p), a),)


_register(Primitive(
    compiled=NEEDS_LAPACK,
    name="pinv", impl=_pinv_impl, abstract=_pinv_type, vjp=_pinv_vjp, jvp=_pinv_jvp,
    family="linalg", promote="float",
    notes="the Moore-Penrose pseudo-inverse by numpy's SVD, singular values <= rtol * the "
          "largest dropped (JAX's default rtol = 10 max(m, n) eps); the derivative of "
          "Golub and Pereyra (1973), JAX's rule, holds where the rank is locally constant"))

# ---------------------------------------------------------------------------------
# Shape and data movement
# ---------------------------------------------------------------------------------


def _reshape_type(types: list[TensorType], shape: tuple[int, ...]) -> TensorType:
    shape = _shape_param("reshape", shape)
    if int(np.prod(shape, dtype=np.int64)) != types[0].size:
        raise LoweringError(f"reshape: cannot reshape {types[0]} to {list(shape)}")
    return TensorType(tuple(shape), types[0].dtype)


_register(Primitive(
    name="reshape", impl=lambda x, shape: x.reshape(shape), abstract=_reshape_type,
    vjp=lambda ct, xs, out, shape: (bind("reshape", ct, shape=xs[0].shape),),
    jvp=lambda ts, xs, out, shape: bind("reshape", ts[0], shape=shape),
    family="shape", promote="none", compiled=Source(ks.reshape), aliases=True))


def _transpose_type(types: list[TensorType], axes: tuple[int, ...]) -> TensorType:
    t = types[0]
    if len(_axes_param("transpose", axes, t)) != t.ndim:
        raise LoweringError(f"transpose: parameter axes={format_param(axes)} is not a "
                            f"permutation of the axes of {t}")
    return TensorType(tuple(t.shape[a] for a in axes), t.dtype)


_register(Primitive(
    name="transpose", impl=lambda x, axes: x.transpose(axes), abstract=_transpose_type,
    vjp=lambda ct, xs, out, axes: (bind("transpose", ct, axes=tuple(np.argsort(axes).tolist())),),
    jvp=lambda ts, xs, out, axes: bind("transpose", ts[0], axes=axes),
    family="shape", promote="none", compiled=Source(ks.transpose), aliases=True))


def _broadcast_to_type(types: list[TensorType], shape: tuple[int, ...]) -> TensorType:
    t = types[0]
    shape = _shape_param("broadcast_to", shape)
    try:
        if broadcast_shapes(t.shape, shape) != tuple(shape):
            raise ValueError
    except ValueError:
        raise LoweringError(f"broadcast_to: cannot broadcast {t} to {list(shape)}") from None
    return TensorType(tuple(shape), t.dtype)


_register(Primitive(
    name="broadcast_to", impl=lambda x, shape: np.broadcast_to(x, shape),
    abstract=_broadcast_to_type,
    vjp=lambda ct, xs, out, shape: (unbroadcast(ct, xs[0].shape),),
    jvp=lambda ts, xs, out, shape: bind("broadcast_to", ts[0], shape=shape),
    family="shape", promote="none",
    notes="the result is a read-only view, as numpy's", compiled=Source(ks.broadcast_to),
    aliases=True))


def _concat_type(types: list[TensorType], axis: int) -> TensorType:
    first = types[0]
    axis = _axis_param("concatenate", "axis", axis, first)
    for t in types[1:]:
        if t.ndim != first.ndim or any(
                a != b for i, (a, b) in enumerate(zip(t.shape, first.shape)) if i != axis):
            raise LoweringError(f"concatenate: shapes {first} and {t} differ off axis {axis}")
    shape = list(first.shape)
    shape[axis] = sum(t.shape[axis] for t in types)
    return TensorType(tuple(shape), first.dtype)


def _concat_vjp(ct, xs, out, axis):
    pieces, start = [], 0
    for x in xs:
        stop = start + x.shape[axis]
        spec = (slice(None),) * axis + (slice(start, stop, None),)
        pieces.append(bind("index", ct, spec=spec))
        start = stop
    return tuple(pieces)


def _concat_jvp(ts, xs, out, axis):
    if all(t is None for t in ts):
        return None
    full = [t if t is not None else bind("broadcast_to", 0.0 * x, shape=x.shape)
            for t, x in zip(ts, xs)]
    return bind("concatenate", *full, axis=axis)


_register(Primitive(
    name="concatenate", impl=lambda *xs, axis: np.concatenate(xs, axis=axis), abstract=_concat_type,
    vjp=_concat_vjp, jvp=_concat_jvp, family="shape", compiled=Source(ks.concatenate)))


def _index_tuple(spec: tuple, dynamic: tuple) -> tuple:
    it = iter(dynamic)
    return tuple(next(it) if isinstance(s, str) else s for s in spec)


def _index_impl(x, *dynamic, spec):
    return x[_index_tuple(spec, dynamic)]


def _index_type(types: list[TensorType], spec: tuple) -> TensorType:
    """The result of numpy indexing `x[spec]`, the traced indices (`'$'` in spec, one per
    index input) of the index inputs' types, found without allocating anything of those
    sizes (a parsed program may declare any; this rule runs when it is verified).

    numpy decides the structure, on a broadcast view of x's shape (no memory), indexed
    with a zero in place of each integer array: the dimensions the slices, `None`s and
    `...` leave (`rest`), and whether the items are valid. The integer arrays' broadcast
    shape then goes in as numpy's advanced indexing puts it: where the first of them
    stands when the integers and arrays are next to each other in the spec, in front
    otherwise (numpy's "Combining advanced and basic indexing"). An empty axis that an
    array selects on counts as length 1 for its zero: the result's shape does not depend
    on that length, and the node may never run (the adjoint of a scan of no steps indexes
    its empty stack)."""
    x = types[0]
    if not isinstance(spec, tuple) or any(isinstance(s, str) and s != "$" for s in spec):
        raise LoweringError(f"indexing: parameter spec must be a tuple of index items "
                            f"('$' marking each traced index), got {spec!r}")
    marks = sum(1 for s in spec if isinstance(s, str))
    if marks != len(types) - 1:
        raise LoweringError(f"indexing: spec {spec!r} marks {marks} traced indices with '$', "
                            f"but the node has {len(types) - 1} index inputs")
    if any(isinstance(s, bool | np.bool_) for s in spec):
        raise LoweringError(f"indexing with a boolean scalar is not supported: {spec!r}")
    for t in types[1:]:
        if t.dtype.kind not in "iu":
            raise LoweringError(f"indexing: a traced index must be an integer, got {t}")
    traced = iter(types[1:])
    arrays: dict[int, tuple[int, ...]] = {}  # spec position -> shape of an integer array
    literal: dict[int, np.ndarray] = {}
    for i, s in enumerate(spec):
        if isinstance(s, str):
            arrays[i] = next(traced).shape
        elif isinstance(s, np.ndarray | list | tuple):
            literal[i] = _index_array(s, x, spec)
            arrays[i] = literal[i].shape
    taking = sum(1 for s in spec if s is not None and s is not Ellipsis)
    axis_of: dict[int, int] = {}
    axis = 0
    for i, s in enumerate(spec):
        if s is Ellipsis:
            axis += len(x.shape) - taking
        elif s is not None:
            axis_of[i] = axis
            axis += 1
    probe = list(x.shape)
    for i in arrays:
        if 0 <= axis_of[i] < len(probe):  # (numpy refuses too many items below)
            probe[axis_of[i]] = max(probe[axis_of[i]], 1)
    try:
        view = np.broadcast_to(np.zeros((), x.dtype), tuple(probe))
        rest = view[tuple(0 if i in arrays else s for i, s in enumerate(spec))].shape
        block = np.broadcast_shapes(*arrays.values())
    except (IndexError, TypeError, ValueError) as e:
        raise LoweringError(f"indexing {x} with {spec!r}: {e}") from None
    for i, a in literal.items():
        size = x.shape[axis_of[i]]
        if a.size and not -size <= a.min() <= a.max() < size:
            bad = a.max() if a.max() >= size else a.min()
            raise LoweringError(f"indexing {x} with {spec!r}: index {bad} is out of bounds "
                                f"for axis {axis_of[i]} with size {size}")
    if not any(arrays.values()):  # integers only: basic indexing
        return TensorType(tuple(rest), x.dtype)
    advanced = [i for i, s in enumerate(spec)
                if i in arrays or isinstance(s, int | np.integer)]
    at = 0
    if advanced == list(range(advanced[0], advanced[-1] + 1)):
        at = sum(len(x.shape) - taking if s is Ellipsis else 1 for s in spec[:advanced[0]])
    return TensorType(tuple(rest[:at]) + tuple(block) + tuple(rest[at:]), x.dtype)


def _index_array(item: Any, x: TensorType, spec: tuple) -> np.ndarray:
    """A constant integer array of an index spec (numpy reads an empty list as one)."""
    try:
        a = np.asarray(item)
    except ValueError as e:
        raise LoweringError(f"indexing {x} with {spec!r}: {e}") from None
    if a.dtype == np.bool_:
        raise LoweringError(f"indexing {x} with a boolean mask in {spec!r}: boolean mask "
                            "indexing gives a data-dependent shape; use cnp.where instead")
    if a.size == 0:
        return a.astype(np.int64)
    if a.dtype.kind not in "iu":
        raise LoweringError(f"indexing {x} with {spec!r}: arrays used as indices must be of "
                            f"integer type, got {a.dtype}")
    return a


def _scatter_add_impl(ct, *dynamic, spec, shape):
    z = np.zeros(shape, dtype=ct.dtype)
    idx = _index_tuple(spec, dynamic)
    if any(isinstance(s, np.ndarray) or np.ndim(s) > 0 for s in idx):
        np.add.at(z, idx, ct)
    else:
        z[idx] = ct
    return z


def _index_vjp(ct, xs, out, spec):
    return (bind("scatter_add", ct, *xs[1:], spec=spec, shape=xs[0].shape),) + (None,) * (
        len(xs) - 1)


_register(Primitive(
    name="index", impl=_index_impl, abstract=_index_type, vjp=_index_vjp,
    jvp=lambda ts, xs, out, spec: None if ts[0] is None else bind("index", ts[0], *xs[1:],
                                                               spec=spec),
    family="indexing", promote="none", dynamic=(1, 2, 3, 4, 5, 6, 7, 8),
    notes="numpy basic and integer-array indexing; '$' in spec marks a traced index input; "
          "the VJP scatter-adds (repeated indices accumulate)",
    compiled=Source(ks.index, constants=True), aliases=True))


def _scatter_type(types: list[TensorType], spec: tuple, shape: tuple) -> TensorType:
    """Zeros of `shape` with the input added at `spec`: the input has the shape indexing
    `shape` with `spec` gives (scatter_add is the transpose of index)."""
    ct = types[0]
    shape = _shape_param("scatter_add", shape)
    target = _index_type([TensorType(shape, ct.dtype), *types[1:]], spec)
    if target.shape != ct.shape:
        raise LoweringError(f"scatter_add: spec {spec!r} selects {target} from shape "
                            f"{list(shape)}, but the input is {ct}")
    return TensorType(shape, ct.dtype)


_register(Primitive(
    name="scatter_add", impl=_scatter_add_impl, abstract=_scatter_type,
    vjp=lambda ct, xs, out, spec, shape: (bind("index", ct, *xs[1:], spec=spec),) + (None,) * (
        len(xs) - 1),
    jvp=lambda ts, xs, out, spec, shape: None if ts[0] is None else bind(
        "scatter_add", ts[0], *xs[1:], spec=spec, shape=shape),
    family="indexing", promote="none", dynamic=(1, 2, 3, 4, 5, 6, 7, 8),
    notes="zeros of `shape` with the input added at the indexed positions",
    compiled=Source(ks.scatter_add, constants=True)))


# -- Scan and indexed updates (issue 13): a scan's output stack, written row by row in place


class StackBuffer(Deferred):
    """The output stack of a `cg.scan`, owned by the loop that writes it: `write_row`
    assigns each iteration's row into it in place, so the stack costs one allocation per
    loop execution, not a copy per iteration. It is a Deferred so that the interpreter
    hands it as it is only to `write_row` (its `deferred_inputs`) and every other reader,
    and the caller, gets the plain array: nothing else can write to it. A checkpoint
    strategy's snapshot of the loop's carry holds the same buffer, not a copy; re-running
    an iteration from a snapshot writes the same row again."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray):
        self.array = array

    def materialize(self) -> np.ndarray:
        return self.array

    def peek(self) -> np.ndarray:
        return self.array

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self.array if dtype is None else self.array.astype(dtype)


def _write_row_impl(buf: Any, t: Any, y: np.ndarray) -> StackBuffer:
    if type(buf) is not StackBuffer:  # the loop's first write: a buffer of its own
        buf = StackBuffer(np.array(buf, copy=True))
    buf.array[t] = y
    return buf


def _write_row_type(types: list[TensorType]) -> TensorType:
    buf, t, y = types
    if buf.ndim == 0 or buf.shape[1:] != y.shape or buf.dtype != y.dtype:
        raise LoweringError(f"write_row: an {buf} stack cannot take an {y} row")
    if t.ndim != 0 or t.dtype.kind not in "iu":
        raise LoweringError(f"write_row: the row index must be an integer scalar, got {t}")
    return buf


_register(Primitive(
    name="write_row", impl=_write_row_impl, abstract=_write_row_type,
    vjp=lambda ct, xs, out: (ct, None, bind("index", ct, xs[1], spec=("$",))),
    jvp=lambda ts, xs, out: ts[0] if ts[2] is None else bind(
        "write_row", np.zeros(xs[0].shape, xs[0].dtype) if ts[0] is None else ts[0], xs[1],
        ts[2]),
    compiled=NotCompiled(
        "a cg.scan's output stack is written in place by iterations that a compiled loop "
        "would have to own; not compiled yet"),
    family="indexing", promote="none", dynamic=(1,), mutates=True, deferred_result=True,
    deferred_inputs=(0,), unchecked=True,
    notes="stack[t] = y for a row t of `stack` that is zero (a cg.scan's output stack, each "
          "row written once): it is stack + onehot(t) y, so its VJP passes the stack's "
          "cotangent through and reads the row's, ct[t]. Assigned in place (a StackBuffer), "
          "so a checkpoint strategy re-running an iteration writes the row again, not twice"))


def _accumulate_index_impl(acc: np.ndarray, contribution: np.ndarray, *dynamic: Any,
                           spec: tuple) -> np.ndarray:
    idx = _index_tuple(spec, dynamic)
    if any(isinstance(s, np.ndarray) and s.ndim > 0 for s in idx):
        np.add.at(acc, idx, contribution)
    else:
        acc[idx] += contribution
    return acc


def _scattered_factors(contribution: Any,
                       producer: Callable[[Any], Any]) -> tuple[list, dict] | None:
    """`scatter_add(c, *idx, spec, shape)` computed in the loop (the VJP of `xs[t]`, of
    each row a scan reads) is the contribution `accumulate_index` takes as c at idx."""
    made = producer(contribution)
    if made is None or made.op != "scatter_add":
        return None
    return list(made.inputs), {"spec": made.params["spec"]}


def _accumulate_index_type(types: list[TensorType], spec: tuple) -> TensorType:
    acc, c = types[0], types[1]
    target = _index_type([acc, *types[2:]], spec)
    if target != TensorType(c.shape, acc.dtype) or c.dtype != acc.dtype:
        raise LoweringError(f"accumulate_index: spec {spec!r} selects {target} from the {acc} "
                            f"accumulator, but the contribution is {c}")
    return acc


_register(Primitive(
    name="accumulate_index", impl=_accumulate_index_impl, abstract=_accumulate_index_type,
    family="internal", promote="none", nondiff=True, mutates=True, factors=_scattered_factors,
    notes="acc[idx] += contribution in place (repeated indices accumulate); emitted only by "
          "the loop passes, in place of an accumulate of a scatter_add made in the loop (the "
          "gradient of xs[t], of each row a scan reads): the work per iteration is the "
          "row's, not the whole accumulator's", compiled=Source(ks.accumulate_index)))


# -- Indexed updates (x.at[idx].set / multiply / min / max; add is a scatter_add): the
# functional form of numpy's `x[idx] = v` and `np.multiply.at` / `minimum.at` / `maximum.at`


_SCATTER_UFUNCS = {"mul": np.multiply, "min": np.minimum, "max": np.maximum}


def _scatter_impl(x, v, *dynamic, spec, op):
    out = np.array(x, copy=True)
    idx = _index_tuple(spec, dynamic)
    if op == "set":
        out[idx] = v  # repeated indices: the last write wins (numpy's order)
    else:
        _SCATTER_UFUNCS[op].at(out, idx, v)
    return out


def _scatter_op_type(types: list[TensorType], spec: tuple, op: str) -> TensorType:
    """x's type; v has the type indexing x with `spec` gives (the caller broadcasts it)."""
    x, v = types[0], types[1]
    if op not in ("set", "mul", "min", "max"):
        raise LoweringError(f"scatter: parameter op must be 'set', 'mul', 'min' or 'max', got "
                            f"{op!r}")
    target = _index_type([x, *types[2:]], spec)
    if target != TensorType(target.shape, v.dtype) or v.shape != target.shape:
        raise LoweringError(f"scatter: spec {spec!r} selects {target} from {x}, but the "
                            f"update is {v}")
    return x


class _Scattered:
    """The pieces a scatter's rules are written with: gathering at its index, scattering
    into its index, and whether an index may repeat (an integer array among the items)."""

    def __init__(self, xs: list[Any], spec: tuple):
        self.x, self.v, self.dynamic, self.spec = xs[0], xs[1], xs[2:], spec
        self.repeats = any(isinstance(s, np.ndarray) and s.ndim > 0 for s in spec) or any(
            d.ndim > 0 for d in self.dynamic)

    def gather(self, a: Any) -> Any:
        return bind("index", a, *self.dynamic, spec=self.spec)

    def scatter(self, base: Any, v: Any, op: str) -> Any:
        return bind("scatter", base, v, *self.dynamic, spec=self.spec, op=op)

    def add(self, v: Any) -> Any:
        return bind("scatter_add", v, *self.dynamic, spec=self.spec, shape=self.x.shape)

    def zeros(self, like: Any) -> np.ndarray:
        return np.zeros(like.shape, like.dtype)

    def winners(self) -> Any:
        """1 where an update is the one written (the last of a repeated index), else 0."""
        v = self.v
        if not self.repeats:
            return None
        order = np.arange(v.size, dtype=np.int64).reshape(v.shape)
        ids = self.scatter(np.full(self.x.shape, -1, np.int64), order, "set")
        return _mask(bind("eq", self.gather(ids), order), v)

    def others_product(self) -> Any:
        """For each update, the product of the other updates to its position (1 when none):
        counted with zeros apart, so an update of 0 does not make it 0/0."""
        v = self.v
        if not self.repeats:
            return None
        zero = bind("eq", v, np.zeros((), v.dtype))
        nonzero = bind("where", zero, np.ones((), v.dtype), v)
        product = self.gather(self.scatter(np.ones(self.x.shape, v.dtype), nonzero, "mul"))
        zeros = self.gather(self.add(_mask(zero, v)))
        none = np.zeros((), v.dtype)
        return bind("where", zero, bind("where", bind("eq", zeros, np.ones((), v.dtype)),
                                        product, none),
                    bind("where", bind("eq", zeros, none), product / nonzero, none))

    def extremes(self, out: Any) -> tuple[Any, Any, Any]:
        """Masks of x and of the updates equal to the result (min/max), and how many tie
        at each position: ties share the derivative equally, as in JAX."""
        at_x = _mask(bind("eq", self.x, out), self.x)
        at_v = _mask(bind("eq", self.v, self.gather(out)), self.v)
        count = bind("maximum", at_x + self.add(at_v), np.ones((), self.x.dtype))
        return at_x, at_v, count


def _times(a: Any, b: Any) -> Any:
    return a if b is None else a * b


def _scatter_vjp(ct, xs, out, spec, op):
    s = _Scattered(xs, spec)
    rest = (None,) * len(s.dynamic)
    if op == "set":
        return (s.scatter(ct, s.zeros(s.v), "set"), _times(s.gather(ct), s.winners())) + rest
    if op == "mul":
        factor = s.scatter(np.ones(s.x.shape, s.x.dtype), s.v, "mul")
        return (ct * factor, _times(s.gather(ct * s.x), s.others_product())) + rest
    at_x, at_v, count = s.extremes(out)
    share = ct / count
    return (share * at_x, s.gather(share) * at_v) + rest


def _scatter_jvp(ts, xs, out, spec, op):
    s = _Scattered(xs, spec)
    tx, tv = ts[0], ts[1]
    if tx is None and tv is None:
        return None
    if op == "set":
        return s.scatter(s.zeros(s.x) if tx is None else tx, s.zeros(s.v) if tv is None else tv,
                         "set")
    if op == "mul":
        factor = s.scatter(np.ones(s.x.shape, s.x.dtype), s.v, "mul")
        terms = [tx * factor if tx is not None else None,
                 s.x * s.add(_times(tv, s.others_product())) if tv is not None else None]
        return _add_terms(*terms)
    at_x, at_v, count = s.extremes(out)
    terms = [tx * at_x if tx is not None else None,
             s.add(tv * at_v) if tv is not None else None]
    return _add_terms(*terms) / count


_register(Primitive(
    name="scatter", impl=_scatter_impl, abstract=_scatter_op_type, vjp=_scatter_vjp,
    jvp=_scatter_jvp, family="indexing", promote="none", dynamic=(2, 3, 4, 5, 6, 7, 8, 9),
    compiled=NotCompiled("no Numba source is written yet for the .at[...].set / multiply / "
                         "min / max updates"),
    notes="x.at[idx].set / multiply / min / max (op set, mul, min, max): a repeated index "
          "keeps the last update for set (only that one gets a gradient), multiplies all "
          "for mul (each update's derivative is the product of the others, exact with "
          "zeros), and for min/max ties between x and the updates share the derivative "
          "equally, as in JAX"))


def _roll_type(types: list[TensorType], axis: int | None) -> TensorType:
    if types[1].dtype.kind not in "iu" or types[1].ndim != 0:
        raise LoweringError(f"roll: the shift must be an integer scalar, got {types[1]}")
    if axis is not None:  # None: roll the flattened array
        _axis_param("roll", "axis", axis, types[0])
    return types[0]


_register(Primitive(
    name="roll", impl=lambda x, shift, axis: np.roll(x, int(shift), axis=axis), abstract=_roll_type,
    vjp=lambda ct, xs, out, axis: (bind("roll", ct, -xs[1], axis=axis), None),
    jvp=lambda ts, xs, out, axis: None if ts[0] is None else bind("roll", ts[0], xs[1], axis=axis),
    family="shape", promote="none", dynamic=(1,), compiled=Source(ks.roll)))


def _astype_impl(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """numpy's cast, except that complex to a real number type takes the real part without
    numpy's ComplexWarning (as JAX does); complex to bool is x != 0, as numpy's."""
    x = np.asarray(x)
    if x.dtype.kind == "c" and np.dtype(dtype).kind not in "cb":
        return np.real(x).astype(dtype)
    return x.astype(dtype)


def _astype_vjp(ct, xs, out, dtype):
    """The transpose of the cast: back to the input's dtype; a complex cotangent of a real
    input keeps its real part (JAX's convention: the cotangent of a real value is real)."""
    x = xs[0]
    if x.dtype.kind not in "fc":
        return (None,)
    if x.dtype.kind == "f" and ct.dtype.kind == "c":
        ct = bind("real", ct)
    return (bind("astype", ct, dtype=x.dtype),)


def _astype_jvp(ts, xs, out, dtype):
    if out.dtype.kind not in "fc":
        return None
    t = ts[0]
    if t.dtype.kind == "c" and out.dtype.kind == "f":
        t = bind("real", t)
    return bind("astype", t, dtype=dtype)


_register(Primitive(
    name="astype", impl=_astype_impl,
    abstract=lambda types, dtype: TensorType(types[0].shape, _dtype_param("astype", dtype)),
    vjp=_astype_vjp, jvp=_astype_jvp,
    family="shape", promote="none",
    notes="a cast to an integer or bool type has no derivative; complex to a real type "
          "takes the real part (as JAX), so its cotangent is the real cotangent as complex, "
          "and a real to complex cast's cotangent is the real part of the complex one",
    compiled=Source(ks.astype)))

# ---------------------------------------------------------------------------------
# Complex numbers (issue 13, complex+fft family). JAX's convention: a complex cotangent
# c of z stands for the real linear functional dz -> Re(c dz), so the VJP of a map with
# dw = A dz + B conj(dz) is c -> c A + conj(c B), the transpose (not the conjugate
# transpose) in dz and conj(dz); for a holomorphic map (B = 0) that is c * f'(z), which
# the ordinary rules compute unchanged. These are the non-holomorphic parts.
# ---------------------------------------------------------------------------------


def _complex_input(op: str, t: TensorType) -> None:
    if t.dtype.kind != "c":
        raise LoweringError(f"{op}: the input must be complex, got {t} (cnp.{op} of a real "
                            "value does not apply this primitive)")


def _complex_part_type(op: str) -> Callable[..., TensorType]:
    def rule(types: list[TensorType]) -> TensorType:
        _complex_input(op, types[0])
        return TensorType(types[0].shape, real_dtype(types[0].dtype))

    return rule


def _conj_type(types: list[TensorType]) -> TensorType:
    _complex_input("conj", types[0])
    return types[0]


# real(z) = (z + conj z)/2: A = B = 1/2, so c -> (c + c)/2 = c, as a complex number
_register(Primitive(
    name="real", impl=np.real, abstract=_complex_part_type("real"),
    vjp=lambda ct, xs, out: (bind("astype", ct, dtype=xs[0].dtype),),
    jvp=lambda ts, xs, out: bind("real", ts[0]), compiled=Source(ks.real), family="complex",
    promote="none",
    notes="the real part of a complex value; its cotangent is the real cotangent as complex",
    aliases=True))
# imag(z) = (z - conj z)/(2i): A = -i/2, B = i/2, so c -> -i c
_register(Primitive(
    name="imag", impl=np.imag, abstract=_complex_part_type("imag"),
    vjp=lambda ct, xs, out: (ct * np.asarray(-1j, xs[0].dtype),),
    jvp=lambda ts, xs, out: bind("imag", ts[0]), compiled=Source(ks.imag), family="complex",
    promote="none",
    notes="the imaginary part of a complex value; its cotangent is -1j times the real "
          "cotangent (JAX's convention)", aliases=True))
# conj(z): A = 0, B = 1, so c -> conj(c)
_register(Primitive(
    name="conj", impl=np.conj, abstract=_conj_type,
    vjp=lambda ct, xs, out: (bind("conj", ct),),
    jvp=lambda ts, xs, out: bind("conj", ts[0]), compiled=Source(ks.conj), family="complex",
    promote="none",
    notes="the complex conjugate; its VJP conjugates the cotangent (not holomorphic)"))


def _angle_type(types: list[TensorType]) -> TensorType:
    return TensorType(types[0].shape, real_dtype(types[0].dtype))


# angle(z) = Im(log z): A = 1/(2iz), B = conj(A), so c -> 2 c A = -i c / z
_register(Primitive(
    name="angle", impl=lambda z: np.angle(z), abstract=_angle_type,
    vjp=lambda ct, xs, out: (ct * (-1j / xs[0]) if xs[0].dtype.kind == "c" else None,),
    jvp=lambda ts, xs, out: bind("imag", ts[0] / xs[0]) if xs[0].dtype.kind == "c" else None,
    compiled=Source(ks.angle), family="complex", promote="float",
    notes="arg(z) in (-pi, pi], numpy's atan2(imag, real); d angle = Im(dz / z), nan at z = "
          "0 (as JAX); for a real input 0 or pi, derivative 0 (JAX: also 0, nan at x = 0)"))


# ---------------------------------------------------------------------------------
# Discrete Fourier transforms (issue 13, complex+fft family), numpy's kernels. Three
# primitives, each transforming whole axes of their input's length: cfgrad.numpy.fft
# crops or zero-pads (index, concatenate) for numpy's n= and s=, and composes rfftn,
# irfftn, hfft and ihfft from them. Each is linear, so its JVP is itself applied to the
# tangent; the VJPs are transposes in JAX's convention (see the complex section):
# - fft: the DFT matrix F (and its inverse) is symmetric, F^T = F, with the same norm;
# - rfft: the first m = n//2+1 rows R of F, from real x: c -> Re(R^T c) = Re(F pad(c));
# - irfft: x = Re(A y) with A[j, k] = s w[k] e^(2 pi i jk/n), w = 1, 2, …, 2 (, 1 for
#   even n), s the norm's scale: c -> c A = w * conj(rfft(c)) at the dual norm (the one
#   scaling by s). JAX's rules for lax.fft (its FFT, RFFT, IRFFT transposes) are the same.
# ---------------------------------------------------------------------------------

FFT_NORMS = ("backward", "ortho", "forward")
FOURIER = NotCompiled("Numba has no np.fft, and no Numba source is written for it yet")
#: The norm that scales the opposite transform the same way (1/n on the other side).
DUAL_NORM = {"backward": "forward", "ortho": "ortho", "forward": "backward"}


def _norm_param(op: str, norm: Any) -> str:
    if norm not in FFT_NORMS:
        raise LoweringError(f"{op}: parameter norm must be one of {', '.join(FFT_NORMS)}, got "
                            f"{norm!r}")
    return norm


def _fft_type(types: list[TensorType], axes: tuple[int, ...], inverse: bool,
              norm: str) -> TensorType:
    t = types[0]
    _complex_input("fft", t)
    _axes_param("fft", axes, t)
    _bool_param("fft", "inverse", inverse)
    _norm_param("fft", norm)
    return t


def _fft_impl(x: np.ndarray, axes: tuple[int, ...], inverse: bool, norm: str) -> np.ndarray:
    return (np.fft.ifftn if inverse else np.fft.fftn)(x, axes=axes, norm=norm)


_register(Primitive(
    name="fft", impl=_fft_impl, abstract=_fft_type,
    vjp=lambda ct, xs, out, axes, inverse, norm: (
        bind("fft", ct, axes=axes, inverse=inverse, norm=norm),),
    jvp=lambda ts, xs, out, axes, inverse, norm: bind("fft", ts[0], axes=axes,
                                                      inverse=inverse, norm=norm),
    family="fft", promote="none", compiled=FOURIER,
    notes="numpy's fftn / ifftn (inverse=True) over `axes` of a complex input, norm "
          "'backward', 'ortho' or 'forward'; its own transpose (the DFT matrix is symmetric)"))


def _half_length(n: int) -> int:
    return n // 2 + 1


def _rfft_type(types: list[TensorType], axis: int, norm: str) -> TensorType:
    t = types[0]
    if t.dtype.kind != "f":
        raise LoweringError(f"rfft: the input must be a float array, got {t}")
    axis = _axis_param("rfft", "axis", axis, t)
    _norm_param("rfft", norm)
    if t.shape[axis] == 0:
        raise LoweringError(f"rfft: axis {axis} of {t} is empty")
    shape = list(t.shape)
    shape[axis] = _half_length(shape[axis])
    return TensorType(tuple(shape), complex_dtype(t.dtype))


def _zero_pad(x: Any, axis: int, length: int) -> Any:
    """x zero-padded at the end of `axis` to `length` (>= its own)."""
    extra = length - x.shape[axis]
    if extra == 0:
        return x
    shape = list(x.shape)
    shape[axis] = extra
    return bind("concatenate", x, np.zeros(shape, x.dtype), axis=axis)


def _rfft_vjp(ct, xs, out, axis, norm):
    full = _zero_pad(ct, axis, xs[0].shape[axis])
    return (bind("real", bind("fft", full, axes=(axis,), inverse=False, norm=norm)),)


_register(Primitive(
    name="rfft", impl=lambda x, axis, norm: np.fft.rfft(x, axis=axis, norm=norm),
    abstract=_rfft_type, vjp=_rfft_vjp,
    jvp=lambda ts, xs, out, axis, norm: bind("rfft", ts[0], axis=axis, norm=norm),
    family="fft", promote="none", compiled=FOURIER,
    notes="numpy's rfft along `axis` of a float input: the n//2+1 non-negative frequencies"))


def _irfft_type(types: list[TensorType], axis: int, n: int, norm: str) -> TensorType:
    t = types[0]
    _complex_input("irfft", t)
    axis = _axis_param("irfft", "axis", axis, t)
    n = _int_param("irfft", "n", n)
    _norm_param("irfft", norm)
    if n < 1 or t.shape[axis] != _half_length(n):
        raise LoweringError(f"irfft: an output of length n={n} needs {_half_length(max(n, 1))} "
                            f"frequencies along axis {axis}, got {t}")
    shape = list(t.shape)
    shape[axis] = n
    return TensorType(tuple(shape), real_dtype(t.dtype))


def _irfft_vjp(ct, xs, out, axis, n, norm):
    weights = np.full(_half_length(n), 2.0, real_dtype(xs[0].dtype))
    weights[0] = 1.0
    if n % 2 == 0:
        weights[-1] = 1.0
    weights = weights.reshape((-1,) + (1,) * (len(ct.shape) - 1 - axis))
    spectrum = bind("rfft", ct, axis=axis, norm=DUAL_NORM[norm])
    return (bind("conj", spectrum) * weights,)


_register(Primitive(
    name="irfft", impl=lambda y, axis, n, norm: np.fft.irfft(y, n, axis=axis, norm=norm),
    abstract=_irfft_type, vjp=_irfft_vjp,
    jvp=lambda ts, xs, out, axis, n, norm: bind("irfft", ts[0], axis=axis, n=n, norm=norm),
    family="fft", promote="none", compiled=FOURIER,
    notes="numpy's irfft along `axis` to a real output of length n, from its n//2+1 "
          "frequencies; the imaginary parts of the zero (and, n even, the n/2) frequency "
          "are ignored, so their cotangents are real"))

def _const_type(types: list[TensorType], value: np.ndarray) -> TensorType:
    if not isinstance(value, np.ndarray):
        raise LoweringError(f"const: parameter value must be an array (array([…], 'float64')), "
                            f"got {value!r}")
    return TensorType(tuple(value.shape), _dtype_param("const", value.dtype))


_register(Primitive(
    name="const", impl=lambda value: value, abstract=_const_type,
    family="constant", promote="none", nondiff=True, unchecked=True,
    compiled=Structural("an array constant of the generated module (a scalar: a literal)"),
    notes="a constant, materialized once when the program is compiled", aliases=True))


# -- Internals of the loop passes: in-place accumulation of a loop's gradient accumulators --


def _same_type(types: list[TensorType]) -> TensorType:
    if any(t != types[0] for t in types[1:]):
        raise LoweringError(f"accumulate: operands differ in type: {types}")
    return types[0]


def _accumulate_impl(acc: np.ndarray, contribution: np.ndarray) -> np.ndarray:
    np.add(acc, contribution, out=acc)
    return acc


class RankOneSum(Deferred):
    """A gradient accumulator receiving one outer product per reverse-loop iteration (the
    weight gradient of `W @ h` in a recurrent body): the vector pairs are collected in
    preallocated buffers and added in blocks as one matrix product, `A.T @ B`, the way a
    hand-written backward pass batches them, instead of forming and adding an n×m outer
    product each iteration. The block size keeps the buffers no larger than the
    accumulator itself (at least 8 pairs). `accumulate_outer` returns it and takes it
    back as its accumulator (its entry's `deferred_result` and `deferred_inputs`)."""

    __slots__ = ("base", "left", "right", "count")

    def __init__(self, base: np.ndarray):
        n, m = base.shape
        block = max(8, (n * m) // (n + m))
        self.base = base
        self.left = np.empty((block, n), base.dtype)
        self.right = np.empty((block, m), base.dtype)
        self.count = 0

    def add(self, a: np.ndarray, b: np.ndarray) -> None:
        k = self.count
        self.left[k] = a  # copies: the vectors may be reused or updated in place later
        self.right[k] = b
        self.count = k + 1
        if self.count == len(self.left):
            self.materialize()

    def peek(self) -> np.ndarray:
        k = self.count
        return self.base + self.left[:k].T @ self.right[:k] if k else self.base

    def materialize(self) -> np.ndarray:
        """The pending block added into the accumulator, which goes on from there."""
        k = self.count
        if k:
            np.add(self.base, self.left[:k].T @ self.right[:k], out=self.base)
            self.count = 0
        return self.base


def _accumulate_outer_impl(acc: Any, a: np.ndarray, b: np.ndarray) -> RankOneSum:
    if type(acc) is not RankOneSum:
        acc = RankOneSum(acc)
    acc.add(a, b)
    return acc


def _outer_product_factors(contribution: Any,
                           producer: Callable[[Any], Any]) -> tuple[list, dict] | None:
    """`mul(reshape(a, (n, 1)), reshape(b, (1, m)))` of float32/float64 vectors a and b,
    computed in the loop, is the outer product `accumulate_outer` takes as [a, b]: the
    weight gradient of a matrix-vector product in a loop body."""
    t = contribution.type
    if t.dtype not in (np.float32, np.float64) or t.ndim != 2:
        return None
    mul = producer(contribution)
    if mul is None or mul.op != "mul":
        return None
    vectors = []
    for v, shape in zip(mul.inputs, ((t.shape[0], 1), (1, t.shape[1]))):
        reshape = producer(v)
        if reshape is None or reshape.op != "reshape" or reshape.inputs[0].type.ndim != 1 or \
                v.type.shape != shape or reshape.inputs[0].type.dtype != v.type.dtype:
            return None
        vectors.append(reshape.inputs[0])
    return vectors, {}


def _accumulate_outer_type(types: list[TensorType]) -> TensorType:
    acc, a, b = types
    if acc.shape != (a.size, b.size) or a.ndim != 1 or b.ndim != 1 or not (
            acc.dtype == a.dtype == b.dtype):
        raise LoweringError(f"accumulate_outer: an {acc} accumulator cannot take the outer "
                            f"product of {a} and {b}")
    return acc


_register(Primitive(
    name="copy", impl=lambda x: np.array(x, copy=True), abstract=_same_type, family="internal",
    promote="none", nondiff=True, unchecked=True,
    notes="a fresh buffer: starts a gradient accumulator that `accumulate` then updates",
    compiled=Source(ks.copy)))
_register(Primitive(
    name="accumulate", impl=_accumulate_impl, abstract=_same_type, family="internal",
    promote="none",
    nondiff=True, mutates=True,
    notes="acc += contribution in place; emitted only by the loop passes, for a reverse "
          "loop's accumulator whose buffer nothing else can see", compiled=Source(ks.accumulate)))
_register(Primitive(
    name="accumulate_outer", impl=_accumulate_outer_impl, abstract=_accumulate_outer_type,
    family="internal", promote="none", nondiff=True, mutates=True, factors=_outer_product_factors,
    deferred_result=True, deferred_inputs=(0,),
    notes="acc += outer(a, b), batched into blocks of one matrix product each (RankOneSum); "
          "emitted only by the loop passes, in place of an accumulate of mul(reshape(a, "
          "(n, 1)), reshape(b, (1, m))) for a reverse loop's float32/float64 accumulator",
    compiled=Source(ks.accumulate_outer)))


# -- Custom derivative rules (cfgrad.custom): each node's `rule` parameter is the rule
# object of one cg.custom_vjp / cg.custom_jvp function at one input signature, and does the
# work; these entries only route to it.

CUSTOM = NotCompiled("a custom rule's functions are the user's Python")
_register(Primitive(
    name="custom_vjp", impl=lambda *xs, rule: rule.forward(xs),
    abstract=lambda types, rule: rule.forward_types(),
    vjp=lambda cts, xs, outs, rule: rule.pullback(cts, xs, outs),
    jvp=lambda ts, xs, outs, rule: rule.outputs_and_tangents(ts, xs), family="custom",
    promote="none", multi_output=True, jvp_gives_primal=True, aliases=True, compiled=CUSTOM,
    notes="a cg.custom_vjp function: its fwd runs forward (outputs, then residuals), its bwd "
          "(a `call` of its program) gives the cotangents; forward mode transposes bwd's "
          "derivative in its cotangent (bwd itself where it is linear in it), so both modes "
          "give the rule's derivative, with values from fwd; a derivative of the gradient "
          "differentiates fwd and bwd as ordinary code, bwd at the cotangent that reached it"))
_register(Primitive(
    name="custom_jvp", impl=lambda *xs, rule: rule.primal(xs),
    abstract=lambda types, rule: rule.primal_types(),
    vjp=lambda cts, xs, outs, rule: rule.transpose(cts, xs),
    jvp=lambda ts, xs, outs, rule: rule.outputs_and_tangents(ts, xs), family="custom",
    promote="none", multi_output=True, jvp_gives_primal=True, compiled=CUSTOM,
    notes="a cg.custom_jvp function: forward mode traces its JVP rule inline (values "
          "included); reverse mode "
          "transposes that rule (it must be linear in the tangents, as in JAX) by a "
          "`vjp_call` of the rule's program with respect to the tangents", aliases=True))

# -- Effects (cfgrad.debug): a node that calls the user's function at run time with the
# runtime values of its inputs. Its `callback` parameter (a debug.DebugCall) does the
# work and prints as what the user wrote (`print('x = {}')`); like custom rules, the
# node delegates to a user's function.

_register(Primitive(
    name="debug_callback", impl=lambda *xs, callback: callback(*xs),
    abstract=lambda types, callback: [], family="custom", promote="none", nondiff=True,
    multi_output=True, effect=True,
    compiled=NotCompiled("it calls the user's Python function at run time"),
    notes="cg.debug.print / cg.debug.callback: calls its function with its inputs' runtime "
          "values where the program runs it, in program order; no results, no derivative; "
          "not run again where a run repeats work (recomputation, the pullback)", aliases=True))

# -- Nested transformations (cfgrad.nested): a transformation applied inside another's trace
# is one node standing for a sub-program. Its `of` parameter is the object that knows the
# sub-program and builds the node's derivative rules from derived programs (the JVP
# program, reverse mode of it), so both rules are ordinary nodes of the same two kinds and
# nesting recurses to any depth.

def _sub_program_primitive(name: str, notes: str) -> Primitive:
    """An entry whose implementation, types and rules are its node's `of` parameter's."""
    return Primitive(
        name=name, impl=lambda *args, of: of.run(args),
        abstract=lambda types, of: of.result_types(types),
        vjp=lambda cts, xs, outs, of: of.cotangents(cts, xs),
        jvp=lambda ts, xs, outs, of: of.outputs_and_tangents(ts, xs), family="transform",
        promote="none", multi_output=True, jvp_gives_primal=True, aliases=True, notes=notes,
        compiled=Structural("a function of its own, compiling the sub-program"))


_register(_sub_program_primitive(
    "call", "runs a sub-program (a jvp or value applied inside a traced function); its JVP "
            "is a call of the sub-program's JVP program, its VJP a vjp_call of it"))
_register(_sub_program_primitive(
    "vjp_call", "the pullback of a sub-program (grad or vjp applied inside a traced "
                "function): its parameters' cotangents from its outputs' cotangents, by a "
                "taped run and its adjoint under the call's checkpoint strategy; the JVP of "
                "it is reverse mode of the sub-program's JVP program (a Hessian-vector "
                "product; with custom rules, of its second-order JVP program, where each "
                "rule differentiates its fwd and bwd as ordinary code), its VJP a call of "
                "that JVP program and reverse mode of it (with a bwd not linear in its "
                "cotangent, one reverse pass of the second-order program per input element)"))
