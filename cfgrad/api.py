"""The user-facing transformations: `grad`, `value_and_grad`, `vjp`, `jvp`.

Lowering is cached per function and input signature (pytree structure, shapes, dtypes),
like `jax.jit`: a second call with the same signature does no tracing, and the adjoint
(or tangent) program and their compiled forms are built once per cached Program. What is
left per call is flattening the arguments, one dictionary lookup and the run itself.
Closed-over arrays and Python values are baked into the Program as constants when it is
traced, as in JAX: change them and call a freshly defined function.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

import numpy as np

from . import nested
from . import tree as treelib
from .anomaly import anomaly_detection_enabled
from .anomaly import detect_anomaly as anomaly_mode
from .caches import SIGNATURES_PER_FUNCTION, BoundedDict, static_key
from .checkpoint import RunStats, check_strategy, resolve
from .convert import converted, traced_as
from .errors import ArgumentTypeError, ArgumentValueError, LoweringError
from .forward_mode import build_jvp
from .interpret import (
    Compiled,
    GradPlan,
    Machine,
    Tape,
    as_runtime_value,
    differentiate,
    execute,
    repeating,
)
from .ir import Program, TensorType
from .layout import owned_results
from .numpy.core import Array
from .trace import (
    TRACEABLE_DTYPES,
    Tracer,
    argument_name,
    argument_problem,
    check_arguments,
    lowering_epoch,
    trace_program,
)
from .trace import lower as lower_traced
from .trace_context import LOWERING_LOCK

_SCALAR_KINDS = {bool: "b", int: "i", float: "f", complex: "c"}
# How many checkpoint choices a lowering keeps resolved strategies for (a call may pass a
# new `Binomial(k)` each time).
STRATEGY_CHOICES = 64



class Lowering:
    """One lowered signature: its Program and, lazily, everything derived from it. The
    inspector, the command line and the tests read these public attributes instead of
    re-building the pipeline:

    - `program`: the traced Program (never mutated);
    - `compiled`: its one forward `Compiled`, shared by every `wrt`;
    - `grad_plan(wrt)`: the `GradPlan` (adjoint Program, its `Compiled`, saved values per
      loop) for the flat parameter indices in `wrt` (all when None), built once each;
    - `jvp`: the compiled JVP program, built on first use;
    - `strategies(choice)`: each loop's checkpoint strategy for a call's `checkpoint`;
    - `arguments(leaves)`: flat argument leaves as the runtime values `Machine.run` takes;
    - `output_types`, `build_outputs(leaves)` and `build_arguments(leaves)`: the outputs'
      types, and the outputs' and the arguments' structures rebuilt from their leaves
      (read on every call of vjp, jvp and pullbacks).
    """

    __slots__ = ("program", "epoch", "compiled", "_plans", "_jvp", "_strategies",
                 "_grad_calls", "_dtypes", "output_types", "build_outputs",
                 "build_arguments")

    def __init__(self, program: Program):
        self.program = program
        self.epoch = lowering_epoch()  # a custom rule redefined later makes it stale
        self.compiled = Compiled(program)  # the one forward compilation, for every wrt
        self._dtypes = [p.type.dtype for p in program.params]
        self.output_types = [v.type for v in program.outputs]
        self.build_outputs = treelib.builder(program.out_tree)
        self.build_arguments = treelib.builder(program.in_tree)
        self._plans: dict[frozenset[int] | None, GradPlan] = {}
        self._jvp: Compiled | None = None
        self._strategies: dict[Any, list[Any]] = BoundedDict(STRATEGY_CHOICES)
        # value_and_grad's calls, checked and prepared per (argnums, single, has_aux,
        # holomorphic)
        self._grad_calls: dict[Any, _GradCall] = {}

    def grad_plan(self, wrt: frozenset[int] | None) -> GradPlan:
        """The plan for differentiating the parameters in `wrt` (all when None), built
        once per `wrt` on the one forward compilation."""
        plan = self._plans.get(wrt)
        if plan is None:
            with LOWERING_LOCK:
                plan = self._plans.get(wrt)
                if plan is None:
                    plan = self._plans[wrt] = differentiate(self.program, wrt,
                                                            forward=self.compiled)
        return plan

    @property
    def jvp(self) -> Compiled:
        if self._jvp is None:
            with LOWERING_LOCK:
                if self._jvp is None:
                    self._jvp = Compiled(build_jvp(self.program))
        return self._jvp

    def arguments(self, leaves: list[Any]) -> list[Any]:
        """Flat argument leaves as runtime values of the parameters' dtypes (Python
        scalars converted, numpy arrays passed as they are, a subclass such as `cg.Array`
        as a plain array of the same memory: the interpreter's results, gradients
        included, are plain numpy arrays whatever the arguments were)."""
        return [_runtime_argument(x, dtype) for x, dtype in zip(leaves, self._dtypes)]

    def run(self, leaves: list[Any], *, check: bool = False,
            events: bool = False) -> tuple[list[Any], Machine]:
        """An untaped run of the program on flat argument leaves: its outputs as runtime
        values, and the Machine (which keeps the control events with `events`, for
        check_grads' path guard). `check` runs the NaN/Inf-checking block functions."""
        m = Machine(self.compiled, self.strategies(None), check=check)
        if events:
            m.sinks.append([])
        with np.errstate(all="ignore"):
            outs = [as_runtime_value(o) for o in m.run(self.arguments(leaves))]
        return owned_results(outs, self.compiled.shared_outputs), m

    def strategies(self, call_choice: Any) -> list[Any]:
        """Each loop's strategy for a call choosing `call_choice`; strategies compare by
        value, so a fresh `Binomial(8)` per call finds the same entry (an unhashable
        user-defined strategy is resolved every time)."""
        try:
            s = self._strategies.get(call_choice)
        except TypeError:
            return [resolve(r.checkpoint, call_choice) for r in self.program.loops()]
        if s is None:
            s = [resolve(r.checkpoint, call_choice) for r in self.program.loops()]
            self._strategies[call_choice] = s
        return s


def _runtime_argument(x: Any, dtype: np.dtype) -> Any:
    """One argument leaf as the runtime value of a parameter of `dtype` (which its leaf
    key chose): a Python number as that numpy scalar, a numpy array or scalar as it is (a
    0-d array as a scalar), anything else (a `cg.Array`, a 0-d subclass) through
    `np.asarray`."""
    kind = type(x)
    if kind is float or kind is int or kind is bool or kind is complex:
        return dtype.type(x)
    if kind is np.ndarray or isinstance(x, np.generic):
        return as_runtime_value(x)
    return as_runtime_value(np.asarray(x, dtype))


_CACHE: weakref.WeakKeyDictionary[Callable, dict[Any, Lowering]] = weakref.WeakKeyDictionary()
# the same entries by the argument leaves' typed keys, for calls of leaves only (`lowered`)
_BY_LEAVES: weakref.WeakKeyDictionary[Callable, dict[tuple, Lowering]] = (
    weakref.WeakKeyDictionary())


def leaf_key(x: Any) -> Any:
    """The part of the cache key one argument leaf contributes; None for a leaf that cannot
    be traced (checked on every call, so a bad leaf never reuses a good leaf's Program)."""
    kind = _SCALAR_KINDS.get(type(x))
    if kind is not None:
        return kind if kind != "i" or -2**63 <= x < 2**63 else None
    if (type(x) is np.ndarray or type(x) is Array) and x.dtype.name in TRACEABLE_DTYPES:
        return (x.shape, x.dtype.char)
    if argument_problem(x) is not None:
        return None
    a = np.asarray(x)
    return (a.shape, a.dtype.char)


def lowered(fun: Callable, args: tuple, static_argnums: tuple[int, ...] = (),
            kwargs: dict[str, Any] | None = None) -> tuple[Lowering, list[Any]]:
    """The cached lowering of `fun` at `args` (and keyword arguments `kwargs`, traced after
    them), and the flat list of traced argument leaves.

    A call whose arguments are all leaves (numbers and arrays), with no static or keyword
    arguments, is found by its leaves' typed keys first, without flattening the arguments
    or building the full key: `cg.vjp` and `cg.jvp` look their function up on every call."""
    fast = not static_argnums and not kwargs
    if fast:
        try:
            entry = _BY_LEAVES[fun][tuple(map(typed_key, args))]
        except (KeyError, TypeError):  # a new signature, a pytree, an unhashable leaf
            pass
        else:
            if entry.epoch == lowering_epoch():
                return entry, list(args)
    dynamic = args if not static_argnums else dynamic_args(args, static_argnums)
    if kwargs:
        dynamic += tuple(kwargs[k] for k in sorted(kwargs))
    leaves, in_tree = treelib.flatten(dynamic)
    leaf_keys = tuple(map(leaf_key, leaves))
    if None in leaf_keys:
        check_arguments(fun, args, static_argnums, kwargs)  # raises, naming the argument
    # static values by type and bits: 2 and 2.0, 0.0 and -0.0 are equal but trace
    # differently, and a NaN must find its own entry
    key = (in_tree, leaf_keys, tuple((i, static_key(args[i])) for i in static_argnums),
           tuple(sorted(kwargs)) if kwargs else ())
    try:
        per_fun = _CACHE[fun]
    except KeyError:
        with LOWERING_LOCK:
            per_fun = _CACHE.setdefault(fun, BoundedDict(SIGNATURES_PER_FUNCTION))
    except TypeError:  # not weak-referenceable: cache nothing
        per_fun = {}
    try:
        entry = per_fun.get(key)
    except TypeError:  # a static argument or a pytree node's static data
        raise _unhashable_key(fun, args, static_argnums, in_tree) from None
    if entry is None or entry.epoch != lowering_epoch():
        with LOWERING_LOCK:
            entry = per_fun.get(key)
            if entry is None or entry.epoch != lowering_epoch():
                entry = per_fun[key] = Lowering(trace_program(fun, args, static_argnums,
                                                            kwargs=kwargs))
    if fast and len(leaves) == len(args) and all(x is y for x, y in zip(leaves, args)):
        try:
            by_leaves = _BY_LEAVES[fun]
        except KeyError:
            with LOWERING_LOCK:
                by_leaves = _BY_LEAVES.setdefault(fun, BoundedDict(SIGNATURES_PER_FUNCTION))
        except TypeError:  # not weak-referenceable: nothing is cached
            return entry, leaves
        by_leaves[tuple(map(typed_key, args))] = entry
    return entry, leaves


def _unhashable_key(fun: Callable, args: tuple, static_argnums: tuple[int, ...],
                    in_tree: treelib.TreeDef) -> ArgumentTypeError:
    """The error for a cache key that cannot be hashed: a static argument, or the static
    data of a registered pytree node, is not hashable (the cache needs both to be)."""
    name = getattr(fun, "__name__", "f")
    for i in static_argnums:
        try:
            hash(args[i])
        except TypeError:
            return ArgumentTypeError(
                f"{name}: static argument {i} (`{argument_name(fun, i)}`) is a "
                f"{type(args[i]).__name__}, which is not hashable; static arguments key the "
                "cache of traced programs, so pass a hashable value (a tuple instead of a "
                "list), or pass arrays as ordinary (traced) arguments")
    return ArgumentTypeError(
        f"{name}: the static data (aux_data or meta_fields) of a registered pytree node in "
        f"the arguments {in_tree.describe()} is not hashable; it keys the cache of traced "
        "programs, so make it hashable (a tuple instead of a list) or make it data")


def dynamic_args(args: tuple, statics: tuple[int, ...]) -> tuple:
    """The dynamic (traced) ones of `args`, in order: those not at a static position."""
    return tuple(a for i, a in enumerate(args) if i not in statics)


def static_positions(requested: tuple[int, ...], nargs: int, nums: tuple[int, ...],
                     caller: str, name: str) -> tuple[int, ...]:
    """The static positions of a call with `nargs` positional arguments, sorted: negative
    entries count from the end, out of range is an error, and none may be in `nums` (the
    positions differentiated: a static argument takes no gradient)."""
    if not requested:
        return ()
    statics = tuple(sorted(set(resolve_argnums(requested, nargs, caller, name,
                                               "static_argnums"))))
    both = sorted(set(statics) & set(nums))
    if both:
        raise ArgumentValueError(
            f"{caller} of {name}: argument {both[0]} is in both argnums and static_argnums; "
            "a static argument takes no gradient, so differentiate another argument or make "
            "it a traced one")
    return statics


def _dynamic_nums(nums: tuple[int, ...], statics: tuple[int, ...]) -> tuple[int, ...]:
    """Positions among all arguments as positions among the dynamic ones."""
    return tuple(i - sum(s < i for s in statics) for i in nums)


def _closing_over_statics(fun: Callable, args: tuple, statics: tuple[int, ...],
                          kwargs: dict[str, Any]) -> Callable:
    """`fun` as a function of its dynamic arguments only, the static ones (and keyword
    arguments) closed over: what a transformation inside a trace differentiates."""
    if not statics and not kwargs:
        return fun

    def of_dynamic(*dynamic: Any) -> Any:
        rest = iter(dynamic)
        return fun(*(args[i] if i in statics else next(rest) for i in range(len(args))),
                   **kwargs)

    of_dynamic.__name__ = getattr(fun, "__name__", "f")
    return of_dynamic


def _none_at_statics(grads: tuple, statics: tuple[int, ...]) -> tuple:
    """One cotangent per positional argument: None at the static ones."""
    rest = iter(grads)
    return tuple(None if i in statics else next(rest)
                 for i in range(len(grads) + len(statics)))


def argnums_tuple(argnums: int | Sequence[int], caller: str, what: str = "argnums") -> tuple[
        int, ...]:
    """`argnums` (or `static_argnums`, `what`) as a tuple, each entry an int (`TypeError`
    otherwise, as in JAX)."""
    nums = (argnums,) if isinstance(argnums, int | np.integer) else argnums
    if isinstance(nums, Sequence) and not isinstance(nums, str) and all(
            isinstance(i, int | np.integer) and not isinstance(i, bool) for i in nums) and \
            not isinstance(argnums, bool):
        return tuple(int(i) for i in nums)
    raise ArgumentTypeError(f"{caller}: {what} must be an int or a sequence of ints, got "
                            f"{argnums!r}")


def resolve_argnums(nums: tuple[int, ...], nargs: int, caller: str, name: str,
                    what: str = "argnums") -> tuple[int, ...]:
    """Negative entries count from the end, as in Python indexing; out of range is
    `ValueError`."""
    for i in nums:
        if not -nargs <= i < nargs:
            raise ArgumentValueError(
                f"{caller} of {name}: {what} includes {i} but {name} was called with {nargs} "
                f"positional argument{'s' if nargs != 1 else ''} (valid: {-nargs}..{nargs - 1})")
    return tuple(i % nargs for i in nums)


def _refuse_traced(leaves: list[Any]) -> None:
    """A pullback made by an eager `cg.vjp` runs on numpy arrays: it cannot take a
    cotangent a function being traced computes."""
    if any(isinstance(x, Tracer) for x in leaves):
        raise LoweringError(
            "pullback: the cotangent is a traced value, but this pullback comes from a "
            "cg.vjp called outside the traced function, on concrete values; call cg.vjp "
            "inside the traced function, so that its pullback is traced too")


def _refuse_complex_for_real(what: str, i: int, x: Any, t: TensorType, of: str) -> None:
    """A complex cotangent or tangent of a real value would lose its imaginary part in
    the cast to the value's dtype; JAX refuses it too."""
    if t.dtype.kind != "c" and type(x) is not float and np.iscomplexobj(x):
        raise ArgumentTypeError(
            f"{what} leaf {i} is complex ({np.asarray(x).dtype}), but its {of} is real "
            f"({t}); pass a real one (np.real(...)), as in JAX")


def _check_aux_pair(program: Program, caller: str, name: str) -> None:
    """With has_aux, `fun` returns a pair (value, aux), as in JAX."""
    td = program.out_tree
    if td.kind != "tuple" or len(td.children) != 2:
        raise ArgumentTypeError(f"{caller} of {name} with has_aux=True: the function must "
                                f"return a pair (value, aux), got {td.describe()}")


class Pullback:
    """Maps output cotangents to input cotangents; `stats` describes the last run.

    `lowering`, `primals` (the flat argument leaves, copied) and `checkpoint` say what the
    forward run was, so the inspector can run it again."""

    def __init__(self, lowering: Lowering, tape: Tape, primals: list[Any], nargs: int,
                 checkpoint: Any, statics: tuple[int, ...] = ()):
        self._check = tape.checked
        self.lowering = lowering
        self._tape: Tape | None = tape
        self.primals = primals
        self._nargs = nargs  # the dynamic positional arguments
        self._statics = statics
        self.checkpoint = checkpoint
        self.stats: RunStats | None = None

    def __call__(self, cotangent: Any) -> tuple:
        entry = self.lowering
        program = entry.program
        ct_leaves, ct_tree = treelib.flatten(cotangent)
        _refuse_traced(ct_leaves)
        if ct_tree != program.out_tree:
            raise ArgumentTypeError(
                f"pullback: the cotangent's structure {ct_tree.describe()} differs from the "
                f"output's {program.out_tree.describe()}")
        cts = []
        for i, (c, t) in enumerate(zip(ct_leaves, entry.output_types)):
            _refuse_complex_for_real("pullback: cotangent", i, c, t, "output")
            a = np.array(c, dtype=t.dtype)  # a copy: results never alias the caller's
            if a.shape != t.shape:
                raise ArgumentTypeError(f"pullback: cotangent leaf {i} has shape {a.shape}, "
                                        f"the output has {t.shape}")
            cts.append(a)
        tape = self._tape
        if tape is None:  # a second call: the first consumed the tape, so run forward again
            with repeating():  # (silently: its debug prints showed in the first run)
                tape = _forward(entry, entry.grad_plan(None), self.primals, self.checkpoint,
                                check=self._check)
        self._tape = None
        with _running(self.checkpoint, tape.checked):
            results = [as_runtime_value(r) for r in tape.pullback(cts)]
        results = owned_results(results, tape.plan.compiled.shared_outputs)
        self.stats = tape.stats
        grads = tuple(entry.build_arguments(results))[: self._nargs]
        return _none_at_statics(grads, self._statics) if self._statics else grads


def _running(checkpoint: Any, check: bool) -> Any:
    """What a run of a call's program, forward or adjoint, runs under: numpy's warnings off
    (NaN/Inf is cfgrad's to report), the call's checkpoint choice for the loops of nested
    sub-programs, and with `check` (`detect_anomaly=True`) anomaly detection for those
    too, so a NaN made inside a nested gradient is named where it is made. Without either
    it is numpy's errstate alone: this runs twice per call of a gradient, and stacked
    context managers cost more than a small program's run."""
    if checkpoint is None and not check:
        return np.errstate(all="ignore")
    return _running_with(checkpoint, check)


@contextmanager
def _running_with(checkpoint: Any, check: bool) -> Iterator[None]:
    with np.errstate(all="ignore"), nested.call_checkpoint(checkpoint), \
            (anomaly_mode() if check else nullcontext()):
        yield


def _forward(entry: Lowering, plan: GradPlan, leaves: list[Any], checkpoint: Any,
             check: bool = False) -> Tape:
    """The forward run, taped for `plan`'s adjoint; its outputs as runtime values."""
    with _running(checkpoint, check):
        tape = execute(plan, entry.arguments(leaves), entry.strategies(checkpoint),
                       check=check or anomaly_detection_enabled())
    tape.outputs = [as_runtime_value(o) for o in tape.outputs]
    return tape


_NO_STATICS: tuple[int, ...] = ()  # vjp's default static_argnums, known to need no check


def vjp(fun: Callable, *primals: Any, checkpoint: Any = None, has_aux: bool = False,
        detect_anomaly: bool = False, static_argnums: int | Sequence[int] = _NO_STATICS,
        autograph: bool = True) -> Any:
    """`(fun(*primals), pullback)`; `pullback(ct)` returns one cotangent per primal (None
    for a static one).

    Only the branches taken and the iterations run are differentiated. `checkpoint` sets
    the strategy of every loop that did not choose its own. `static_argnums` are primals
    passed as they are (hashable Python values, baked into the traced program and keying
    its cache, as `jax.jit`'s). `autograph=False` traces `fun` as written, without
    converting its Python `if`/`while`/`for` (docs/autograph.md)."""
    check_strategy(checkpoint, "cfgrad.vjp")
    fun = traced_as(fun, autograph, "cfgrad.vjp")
    name = getattr(fun, "__name__", "f")
    # (the default skips the check; `==` would compare a numpy integer elementwise)
    statics = () if static_argnums is _NO_STATICS else static_positions(
        argnums_tuple(static_argnums, "cfgrad.vjp", "static_argnums"), len(primals), (),
        "cfgrad.vjp", name)
    if nested.is_tracing():  # inside a traced function: nodes, not a run
        result = nested.vjp(_closing_over_statics(fun, primals, statics, {}),
                            dynamic_args(primals, statics), checkpoint, has_aux,
                            lambda program: has_aux and _check_aux_pair(program, "vjp", name),
                            detect_anomaly)
        if not statics:
            return result
        pullback = result[1]

        def with_statics(cotangent: Any) -> tuple:
            return _none_at_statics(pullback(cotangent), statics)

        return (result[0], with_statics) + tuple(result[2:])
    entry, leaves = lowered(fun, primals, statics)
    if has_aux:
        _check_aux_pair(entry.program, "vjp", name)
    # the pullback reads the primals later (the adjoint, recomputation, a second call): a
    # caller's array modified in place meanwhile must not change them, as JAX's immutable
    # arrays guarantee and PyTorch checks with version counters
    leaves = [x.copy() if isinstance(x, np.ndarray) else x for x in leaves]
    tape = _forward(entry, entry.grad_plan(None), leaves, checkpoint, check=detect_anomaly)
    # the outputs are the very arrays the pullback reads: the caller gets copies, so
    # modifying a result in place cannot change the gradient either
    outs = [x.copy() if isinstance(x, np.ndarray) else x for x in tape.outputs]
    out = entry.build_outputs(outs)
    pb = Pullback(entry, tape, leaves, len(primals) - len(statics), checkpoint, statics)
    if has_aux:
        return out[0], _AuxPullback(pb, out[1]), out[1]
    return out, pb


class _AuxPullback:
    """With has_aux the aux outputs receive zero cotangents; `pullback` is the Pullback of
    the (value, aux) pair."""

    def __init__(self, pb: Pullback, aux: Any):
        self.pullback, self._aux = pb, aux

    def __call__(self, cotangent: Any) -> tuple:
        zeros = treelib.tree_map(lambda a: np.zeros_like(a), self._aux)
        return self.pullback((cotangent, zeros))

    @property
    def stats(self) -> RunStats | None:
        return self.pullback.stats


def value_and_grad(fun: Callable, argnums: int | Sequence[int] = 0, *, has_aux: bool = False,
                   checkpoint: Any = None, detect_anomaly: bool = False,
                   static_argnums: int | Sequence[int] = (),
                   holomorphic: bool = False, autograph: bool = True) -> Callable:
    """A function returning `(fun(*args), gradient)`; with `has_aux`, `((value, aux), grad)`.

    `fun` must return a float scalar (a complex one with `holomorphic=True`, whose
    arguments `argnums` are then complex); the gradient has the structure of
    `args[argnums]` (a tuple of those when `argnums` is a tuple). `static_argnums` are
    arguments passed as they are, hashable Python values keying the cache of traced
    programs, as `jax.jit`'s. `autograph=False` traces `fun` as written, without
    converting its Python `if`/`while`/`for` (docs/autograph.md)."""
    return _value_and_grad(traced_as(fun, autograph, "cfgrad.value_and_grad"), argnums,
                           has_aux, checkpoint, detect_anomaly, "cfgrad.value_and_grad",
                           static_argnums=static_argnums, holomorphic=holomorphic)


def _value_and_grad(fun: Callable, argnums: int | Sequence[int], has_aux: bool,
                    checkpoint: Any, detect_anomaly: bool, caller: str,
                    grad_only: bool = False,
                    static_argnums: int | Sequence[int] = (),
                    holomorphic: bool = False) -> Callable:
    """value_and_grad under the name the user called (errors name `grad` or
    `value_and_grad`). With `grad_only` (`grad`) the function returns the gradients (and
    the aux value with `has_aux`), as `grad` does, without a wrapper of its own around
    each call; a nested call then emits no node for the value, unless aux needs it."""
    want_value = not grad_only or has_aux
    check_strategy(checkpoint, caller)
    requested = argnums_tuple(argnums, caller)
    requested_statics = argnums_tuple(static_argnums, caller, "static_argnums")
    single = isinstance(argnums, int | np.integer)
    name = getattr(fun, "__name__", "f")

    # calls whose arguments are all leaves (numbers and arrays), with no keyword or
    # static arguments, by their leaf keys: the prepared call, found without flattening
    # the arguments or building the lowering cache's key (jit's dispatch does the same)
    by_leaves: dict[tuple, _GradCall] = BoundedDict(SIGNATURES_PER_FUNCTION)

    def value_and_grad_fn(*args: Any, **kwargs: Any) -> Any:
        if not kwargs and not requested_statics and not nested.is_tracing():
            try:
                call = by_leaves[tuple(map(typed_key, args))]
            except (KeyError, TypeError):
                pass
            else:
                if call.entry.epoch == lowering_epoch():
                    out, grads, value_and_grad_fn.stats = call(args, checkpoint,
                                                                detect_anomaly)
                    return returned(out, grads)
        nums = resolve_argnums(requested, len(args), caller, name)
        statics = static_positions(requested_statics, len(args), nums, caller, name)
        dnums = _dynamic_nums(nums, statics) if statics else nums
        if nested.is_tracing():  # a derivative of a derivative: one node
            return returned(*nested.value_and_grad(
                _closing_over_statics(fun, args, statics, kwargs),
                dynamic_args(args, statics), dnums, single, checkpoint,
                lambda program: _check_grad_io(program, args, nums, has_aux, name,
                                               holomorphic),
                want_value, detect_anomaly))
        entry, leaves = lowered(fun, args, statics, kwargs=kwargs)
        key = (dnums, single, has_aux, holomorphic)
        call = entry._grad_calls.get(key)
        if call is None:  # checked and prepared once per signature, like the lowering
            with LOWERING_LOCK:
                call = entry._grad_calls.get(key)
                if call is None:
                    _check_grad_io(entry.program, args, nums, has_aux, name, holomorphic)
                    call = entry._grad_calls[key] = _GradCall(entry, dnums, single)
        if not kwargs and not statics and len(leaves) == len(args) and all(
                x is y for x, y in zip(leaves, args)):  # every argument is a leaf
            by_leaves[tuple(map(typed_key, args))] = call
        out, grads, value_and_grad_fn.stats = call(leaves, checkpoint, detect_anomaly)
        return returned(out, grads)

    def returned(out: Any, grads: Any) -> Any:
        if not grad_only:
            return out, grads
        return (grads, out[1]) if has_aux else grads

    value_and_grad_fn.__name__ = f"{'grad' if grad_only else 'value_and_grad'}({name})"
    return value_and_grad_fn


class _GradCall:
    """value_and_grad of one lowered signature and choice of arguments, prepared once:
    the plan, the output seeds (one for the value, zeros for aux outputs), which of the
    outputs and gradients a run may not own (`owned_results`, the outputs then the
    gradients as one list). Calling it runs the taped
    forward program and its adjoint under one numpy error state."""

    __slots__ = ("entry", "plan", "seeds", "shared", "n_out", "nums", "single",
                 "_run_quietly")

    def __init__(self, entry: Lowering, nums: tuple[int, ...], single: bool):
        program = entry.program
        self.entry, self.nums, self.single = entry, nums, single
        self.plan = entry.grad_plan(_param_indices(program, nums))
        self.seeds = [np.ones((), program.outputs[0].type.dtype)[()]] + [
            np.zeros(v.type.shape, v.type.dtype) for v in program.outputs[1:]]
        self.n_out = len(program.outputs)
        self.shared = entry.compiled.shared_outputs | frozenset(
            self.n_out + i for i in self.plan.compiled.shared_outputs)
        # numpy's warnings off (NaN/Inf is cfgrad's to report) as a decorator: the token
        # is kept per call, and it costs less than entering a new errstate on every call
        self._run_quietly = np.errstate(all="ignore")(self._run)

    def _run(self, leaves: Sequence[Any], checkpoint: Any = None, check: bool = False
             ) -> tuple[Tape, list[Any]]:
        """The taped forward run and its pullback: the tape and the cotangents."""
        entry = self.entry
        tape = execute(self.plan, entry.arguments(leaves), entry.strategies(checkpoint),
                       check=check)
        return tape, tape.pullback(self.seeds)

    def __call__(self, leaves: Sequence[Any], checkpoint: Any, detect_anomaly: bool
                 ) -> tuple[Any, Any, RunStats]:
        """(value, gradients, the run's statistics) at the flat argument `leaves`."""
        entry = self.entry
        check = detect_anomaly or anomaly_detection_enabled()
        if checkpoint is None and not check:
            tape, cotangents = self._run_quietly(leaves)
        else:
            with _running(checkpoint, check):
                tape, cotangents = self._run(leaves, checkpoint, check)
        results = owned_results([as_runtime_value(r) for r in tape.outputs + cotangents],
                                self.shared)
        n = self.n_out
        out = entry.build_outputs(results[:n])
        per_arg = entry.build_arguments(results[n:])
        grads = per_arg[self.nums[0]] if self.single else tuple(per_arg[i] for i in self.nums)
        return out, grads, tape.stats


def typed_key(x: Any) -> tuple:
    """An argument's part of a dispatch key without flattening: its Python type beside its
    leaf key (a list has an array's leaf key, but is a pytree of several leaves)."""
    return type(x), leaf_key(x)


def _param_indices(program: Program, argnums: tuple[int, ...]) -> frozenset[int]:
    """The flat parameter indices of the leaves of the arguments in `argnums`."""
    return frozenset(program.in_tree.leaves_of(argnums))


def _check_grad_io(program: Program, args: tuple, nums: tuple[int, ...], has_aux: bool,
                   name: str, holomorphic: bool) -> None:
    """grad's inputs and output as JAX's grad takes them: one real scalar output of real or
    complex inputs, or with `holomorphic=True` one complex scalar of complex inputs."""
    td = program.out_tree
    if has_aux:
        _check_aux_pair(program, "grad", name)
        td = td.children[0]
    if td.kind != "leaf":
        # as in JAX: a tuple, list or dict output is not differentiated leaf by leaf
        raise ArgumentTypeError(
            f"grad of {name}: the gradient is only defined for a scalar output, but {name} "
            f"returns {td.describe()}; return one float scalar (with has_aux=True, a pair "
            "(value, aux) whose aux is not differentiated), or use cg.vjp for several outputs")
    for i in nums:
        for leaf in treelib.flatten(args[i])[0]:
            array = leaf if isinstance(leaf, Tracer) else np.asarray(leaf)
            if array.dtype.kind not in "fc":
                raise ArgumentTypeError(
                    f"grad of {name} with respect to argument {i}: it has dtype {array.dtype} "
                    f"(shape {array.shape}); gradients need float inputs (or complex ones), "
                    "e.g. pass 2.0 instead of 2 or use .astype(float)")
            if holomorphic and array.dtype.kind != "c":
                raise ArgumentTypeError(
                    f"grad of {name} with holomorphic=True with respect to argument {i}: it "
                    f"has dtype {array.dtype} (shape {array.shape}); holomorphic=True "
                    "requires complex inputs, as in JAX: pass it as complex (x + 0j, "
                    ".astype(complex))")
    first = program.outputs[0]
    if first.type.shape != () or first.type.dtype.kind not in "fc":
        raise ArgumentTypeError(f"grad of {name} needs a float scalar output, got {first.type}; "
                                "reduce it (cnp.sum) or use cg.vjp for non-scalar outputs")
    if holomorphic and first.type.dtype.kind != "c":
        raise ArgumentTypeError(
            f"grad of {name} with holomorphic=True requires a complex output, as in JAX, but "
            f"{name} returns {first.type}; drop holomorphic=True for a real-valued function")
    if not holomorphic and first.type.dtype.kind == "c":
        raise ArgumentTypeError(
            f"grad of {name} requires a real-valued output, as in JAX, but {name} returns "
            f"{first.type}. For a holomorphic function pass holomorphic=True; otherwise "
            "differentiate a real function of it (cnp.real, cnp.abs) or use cg.vjp directly")


def grad(fun: Callable, argnums: int | Sequence[int] = 0, *, has_aux: bool = False,
         checkpoint: Any = None, detect_anomaly: bool = False,
         static_argnums: int | Sequence[int] = (),
         holomorphic: bool = False, autograph: bool = True) -> Callable:
    """The gradient of a float-scalar function, like `jax.grad`, also of complex inputs
    (JAX's convention, docs/api.md, Complex numbers); with `holomorphic=True` the complex
    derivative f'(z) of a complex-scalar function of complex inputs.
    `detect_anomaly=True` checks every result for NaN/Inf, as under
    `cg.detect_anomaly()`; `static_argnums` and `autograph` as in `value_and_grad`."""
    return _value_and_grad(traced_as(fun, autograph, "cfgrad.grad"), argnums, has_aux,
                           checkpoint, detect_anomaly, "cfgrad.grad", grad_only=True,
                           static_argnums=static_argnums, holomorphic=holomorphic)


def jvp(fun: Callable, primals: Sequence[Any], tangents: Sequence[Any], *,
        autograph: bool = True) -> tuple[Any, Any]:
    """`(fun(*primals), J @ tangents)` by forward mode through the same control flow;
    `autograph` as in `vjp`."""
    primals, tangents = tuple(primals), tuple(tangents)
    fun = traced_as(fun, autograph, "cfgrad.jvp")
    if nested.is_tracing():  # inside a traced function: one node
        return nested.jvp(fun, primals, tangents)
    entry, leaves = lowered(fun, primals)
    t_leaves, t_tree = treelib.flatten(tangents)
    _refuse_traced(t_leaves)
    if t_tree != entry.program.in_tree:  # (the primals' structure: no static arguments)
        raise ArgumentTypeError("jvp: tangents must have the same structure as primals")
    program = entry.program
    tans = []
    for i, (t, p) in enumerate(zip(t_leaves, program.params)):
        if not p.type.is_float:
            continue
        _refuse_complex_for_real("jvp: tangent", i, t, p.type, "primal")
        a = np.asarray(t, dtype=p.type.dtype)
        if a.shape != p.type.shape:
            raise ArgumentTypeError(f"jvp: tangent leaf {i} has shape {a.shape}, its primal has "
                            f"{p.type.shape}")
        tans.append(as_runtime_value(a))
    m = Machine(entry.jvp, check=anomaly_detection_enabled())
    with np.errstate(all="ignore"):
        outs = [as_runtime_value(o) for o in m.run(entry.arguments(leaves) + tans)]
    outs = owned_results(outs, entry.jvp.shared_outputs)
    n = len(entry.output_types)
    return entry.build_outputs(outs[:n]), entry.build_outputs(outs[n:])


def lower(fun: Callable, *args: Any, static_argnums: int | Sequence[int] = (),
          autograph: bool = True) -> Program:
    """Trace `fun` at `args` and return its Program (`print(program)` shows the IR);
    `fun`'s Python `if`/`while`/`for` on traced values become regions (`autograph=False`:
    traced as written)."""
    return lower_traced(traced_as(fun, autograph, "cfgrad.lower"), *args,
                        static_argnums=static_argnums)


def evaluate(fun: Callable, *args: Any) -> tuple[Any, Machine]:
    """Run `fun` (converted) through the interpreter with its control log kept (for tests
    and check_grads' path-stability guard)."""
    entry, leaves = lowered(converted(fun), args)
    outs, m = entry.run(leaves, events=True)
    return treelib.unflatten(entry.program.out_tree, outs), m
