"""Numerical safety: gradient clipping on pytrees and dynamic loss scaling for float16.

Each concern lives in its own section below. Clipping is written with `cfgrad.numpy`, so
the same functions run eagerly on numpy arrays and inside traced functions. Loss scaling
is eager bookkeeping around the transformations in `cfgrad.api`: the scale changes from
step to step, so it is passed into traced programs as an argument, never baked in.
"""

from __future__ import annotations

import functools
import operator
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import numpy as cnp
from . import tree as treelib
from .api import argnums_tuple, resolve_argnums
from .api import value_and_grad as _value_and_grad
from .errors import ArgumentTypeError, ArgumentValueError, NonFiniteError, ScalerStateError
from .numpy.core import _dtype
from .trace import Tracer

# ---------------------------------------------------------------------------------
# Gradient clipping
# ---------------------------------------------------------------------------------


def _cast(x: Any, dtype: np.dtype) -> Any:
    return x if _dtype(x) == dtype else cnp.astype(x, dtype)


def clip_by_value(tree: Any, lo: Any, hi: Any) -> Any:
    """Clip every leaf of `tree` elementwise to [lo, hi], keeping each leaf's dtype.

    Works on numpy arrays and on traced values (inside `cg.grad`, loop bodies, …); at a
    bound the gradient goes to the leaf, as documented for the `clip` primitive."""
    return treelib.tree_map(lambda x: _cast(cnp.clip(x, lo, hi), _dtype(x)), tree)


def _accumulation_dtype(dtype: np.dtype) -> np.dtype:
    """float16 squares overflow from |x| = 256 on, so float16 leaves are summed in
    float64; other float leaves in their own dtype."""
    return np.dtype(np.float64) if dtype == np.float16 else dtype


def _global_norm(leaves: list[Any]) -> Any:
    """sqrt of the sum of squares of all leaves. The square root is guarded (`where` on
    both sides) so that its derivative at an all-zero tree is 0, not 0 * inf = nan; a nan
    sum still gives a nan norm."""
    if not leaves:
        return np.float64(0.0)
    partials = [cnp.sum(cnp.square(_cast(x, _accumulation_dtype(_dtype(x))))) for x in leaves]
    total = functools.reduce(operator.add, partials)
    zero = total == 0
    return cnp.where(zero, 0.0, cnp.sqrt(cnp.where(zero, 1.0, total)))


def clip_by_global_norm(tree: Any, max_norm: float, *,
                        error_if_nonfinite: bool = False) -> tuple[Any, Any]:
    """`(clipped_tree, norm)`: every leaf times `max_norm / max(norm, max_norm)`, where
    `norm` is the global L2 norm over all float leaves (float64 for float16 leaves), so
    the clipped tree's norm is at most `max_norm`. Leaves keep their dtypes. Integer and
    bool leaves (counters, masks riding along in the tree) are neither counted nor
    scaled: scaling them would truncate, as `torch.nn.utils.clip_grad_norm_` only sees
    float gradients.

    A non-finite norm cannot be scaled away (multiplying by nan would poison every leaf):
    on concrete values the tree is returned unchanged with a `RuntimeWarning` naming the
    norm, or a `NonFiniteError` with `error_if_nonfinite=True`. Inside a traced function
    the value is unknown when the program is built, so the tree is passed through
    unchanged whenever the norm is not finite (check the returned norm afterwards), and
    `error_if_nonfinite=True` is refused."""
    if not isinstance(max_norm, Tracer) and not float(max_norm) > 0:
        raise ArgumentValueError(f"clip_by_global_norm: max_norm must be positive, got "
                                 f"{max_norm}")
    leaves, td = treelib.flatten(tree)
    is_float = [_dtype(x).kind == "f" for x in leaves]
    norm = _global_norm([x for x, f in zip(leaves, is_float) if f])
    if isinstance(norm, Tracer):
        if error_if_nonfinite:
            raise ArgumentValueError(
                "clip_by_global_norm(error_if_nonfinite=True) needs concrete values; inside "
                "a traced function the tree passes through unchanged when the norm is not "
                "finite: return the norm and check it outside")
        scale = cnp.where(cnp.isfinite(norm), max_norm / cnp.maximum(norm, max_norm), 1.0)
    else:
        norm = norm[()]
        if not np.isfinite(norm):
            msg = (f"clip_by_global_norm: the global norm of the tree is {norm}; the tree is "
                   "returned unchanged (scaling by a non-finite factor would poison it)")
            if error_if_nonfinite:
                raise NonFiniteError(msg)
            warnings.warn(msg, RuntimeWarning, stacklevel=2)
            return tree, norm
        scale = max_norm / np.maximum(norm, max_norm)
    clipped = [_cast(_cast(x, _accumulation_dtype(_dtype(x))) * scale, _dtype(x)) if f else x
               for x, f in zip(leaves, is_float)]
    return treelib.unflatten(td, clipped), norm


# ---------------------------------------------------------------------------------
# Dynamic loss scaling
# ---------------------------------------------------------------------------------


def _unscaled_dtype(dtype: np.dtype) -> np.dtype:
    """float16 gradients are unscaled into float32 (see `LossScaler.unscale`)."""
    return np.result_type(dtype, np.float32)


def _refuse_traced(x: Any, method: str) -> None:
    if isinstance(x, Tracer):
        raise ArgumentTypeError(
            f"LossScaler.{method} got a traced value: the current scale would be baked into "
            "the program as a constant and stay frozen while the scaler changes it; use "
            "scaler.value_and_grad(fun), which passes the scale as an argument")


class _Scale(float):
    """The current loss scale as a float that can also be called: `scaler.scale` is the
    scaler's state (compare it, print it, store it) and `scaler.scale(loss)`, GradScaler's
    spelling, multiplies an eager loss by it."""

    def __new__(cls, value: float, enabled: bool = True) -> _Scale:
        obj = super().__new__(cls, value)
        obj._enabled = enabled
        return obj

    def __call__(self, loss: Any) -> Any:
        """`loss * scale` computed in float32 (float64 for a float64 loss) and cast back to
        the loss's dtype: a float16 loss times a scale beyond its range becomes inf, which
        the step after it detects. The loss itself when the scaler is disabled."""
        if not self._enabled:
            return loss
        _refuse_traced(loss, "scale")
        a = np.asarray(loss)
        dtype = _unscaled_dtype(a.dtype)
        with np.errstate(over="ignore"):
            return (a.astype(dtype) * dtype.type(self)).astype(a.dtype)[()]

    def __reduce__(self) -> tuple:
        return float, (float(self),)


class LossScaler:
    """Dynamic loss scaling with the semantics of `torch.amp.GradScaler`.

    float16 gradients smaller than 2**-24 (about 6e-8) flush to zero. Multiplying the loss
    by a large `scale` multiplies every gradient by it, lifting small ones into float16's
    range; the update divides it out again. When the scaled gradients overflow (an inf or
    nan in any leaf) the step is skipped and the scale multiplied by `backoff_factor`;
    after `growth_interval` consecutive clean steps it is multiplied by `growth_factor`.

    A training step::

        scaler = cg.LossScaler()
        value, grads = scaler.value_and_grad(loss)(params16, batch)   # scaled grads
        (master, opt_state) = scaler.step(apply, (master, opt_state), grads)
        scaler.update()

    where `apply(state, unscaled_grads)` returns a new state of the same form: on a
    skipped step `step` returns its `params` argument itself, so pass everything the
    update changes (parameters and optimizer state) as `params`. Clip unscaled gradients
    inside `apply`. Several `step` calls between two `update`s (several parameter groups)
    are allowed; the scale backs off if any of them found an inf or nan.

    The pitfall: cfgrad bakes closed-over Python values into a traced program as
    constants, so `scaler.scale(loss)` inside a function given to `cg.grad` would freeze
    the scale at its value when the function was first traced. `scaler.value_and_grad`
    passes the scale as a traced float32 argument instead (one cached program for every
    scale); `scale` refuses traced values.

    A float16 loss cannot use a scale above 2**15: the loss's own cotangent is the scale,
    and 2**16 is inf in float16. The default `init_scale=2**16` therefore backs off on the
    first step, as GradScaler's first steps calibrate, and each growth to 2**16 skips one
    step.

    `dynamic=False` keeps the scale fixed (still skipping non-finite steps);
    `enabled=False` makes every method a pass-through (scale 1, no checks), so one training
    loop serves both precisions.
    """

    def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000,
                 enabled: bool = True, dynamic: bool = True):
        if not (np.isfinite(init_scale) and init_scale > 0):
            raise ArgumentValueError(f"LossScaler: init_scale must be positive and finite, "
                                     f"got {init_scale}")
        if not growth_factor > 1.0:
            raise ArgumentValueError(f"LossScaler: growth_factor must be > 1, got "
                                     f"{growth_factor}")
        if not 0.0 < backoff_factor < 1.0:
            raise ArgumentValueError(f"LossScaler: backoff_factor must be in (0, 1), got "
                                     f"{backoff_factor}")
        if int(growth_interval) != growth_interval or growth_interval < 1:
            raise ArgumentValueError(f"LossScaler: growth_interval must be a positive "
                                     f"integer, got {growth_interval}")
        self.enabled = bool(enabled)
        self.dynamic = bool(dynamic)
        self.growth_factor = float(growth_factor)
        self.backoff_factor = float(backoff_factor)
        self.growth_interval = int(growth_interval)
        self._scale = np.float32(init_scale)  # float32 arithmetic, as GradScaler's tensor
        self.growth_tracker = 0  # consecutive clean steps since the last change
        self.skipped_steps = 0
        self._found_inf: bool | None = None  # None: no step since the last update


    @property
    def scale(self) -> _Scale:
        """The current loss scale (1.0 when disabled); `scaler.scale(loss)` multiplies a
        loss by it."""
        return _Scale(self._scale if self.enabled else 1.0, self.enabled)

    def unscale(self, grads: Any) -> Any:
        """Scaled gradients divided by the scale, leaf by leaf; records nothing (`step`
        does the inf/nan check).

        float16 leaves are unscaled into float32, the precision of master weights:
        dividing back in float16 would flush every gradient below 2**-24 to zero again,
        undoing the scaling. float32 and float64 leaves keep their dtype."""
        if not self.enabled:
            return grads
        return treelib.tree_map(self._unscale_leaf, grads)

    def _unscale_leaf(self, g: Any) -> Any:
        _refuse_traced(g, "unscale")
        a = np.asarray(g)
        dtype = _unscaled_dtype(a.dtype)
        return a.astype(dtype) / dtype.type(self._scale)

    def step(self, update_fn: Callable[[Any, Any], Any], params: Any, grads: Any) -> Any:
        """`update_fn(params, unscale(grads))`, or `params` itself (the same objects,
        untouched) when any unscaled gradient leaf holds an inf or nan; skipped steps are
        counted in `skipped_steps` and make the next `update()` back off."""
        if not self.enabled:
            return update_fn(params, grads)
        unscaled = self.unscale(grads)
        finite = all(np.isfinite(g).all() for g in treelib.flatten(unscaled)[0])
        self._found_inf = bool(self._found_inf) or not finite
        if not finite:
            self.skipped_steps += 1
            return params
        return update_fn(params, unscaled)

    def update(self) -> None:
        """Adjust the scale after the step(s) of one iteration: times `backoff_factor` if
        any found an inf or nan (and the growth tracker restarts), else one more clean step,
        and times `growth_factor` after `growth_interval` of them in a row (unless that
        overflows float32). The scale stays fixed when `dynamic=False`."""
        if not self.enabled:
            return
        if self._found_inf is None:
            raise ScalerStateError("LossScaler.update() needs a step() since the previous "
                                   "update: the scale changes on the outcome of its inf/nan "
                                   "check")
        found_inf, self._found_inf = self._found_inf, None
        if not self.dynamic:
            return
        if found_inf:
            self._scale = np.float32(self._scale * self.backoff_factor)
            self.growth_tracker = 0
            return
        self.growth_tracker += 1
        if self.growth_tracker == self.growth_interval:
            with np.errstate(over="ignore"):
                grown = np.float32(self._scale * self.growth_factor)
            if np.isfinite(grown):
                self._scale = grown
            self.growth_tracker = 0

    def value_and_grad(self, fun: Callable, argnums: int | Sequence[int] = 0, *,
                       checkpoint: Any = None) -> Callable:
        """Like `cg.value_and_grad(fun, argnums)`, returning `(value, scaled_grads)`: the
        gradients of `fun(*args) * scale` (ready for `step`), and the unscaled value.

        The scale enters the program as a float32 argument, so one cached program serves
        every scale (`fun` is traced once per input signature, not once per scale), and the
        product is float32 (or float64 for a float64 loss); the rest of the program keeps
        the dtypes of its inputs, float16 included."""
        caller = "LossScaler.value_and_grad"
        requested = argnums_tuple(argnums, caller)
        single = isinstance(argnums, int | np.integer)

        def scaled(*args: Any) -> tuple[Any, Any]:
            value = fun(*args[:-1])
            return value * args[-1], value

        scaled.__name__ = getattr(fun, "__name__", "f")
        plain_vg = _value_and_grad(fun, argnums, checkpoint=checkpoint)
        scaled_vgs: dict[tuple[int, ...], Callable] = {}

        def value_and_scaled_grad(*args: Any) -> tuple[Any, Any]:
            if not self.enabled:
                return plain_vg(*args)
            # resolved against the user's arguments, so -1 and out-of-range entries never
            # name the scale, appended after them
            nums = resolve_argnums(requested, len(args), caller, scaled.__name__)
            scaled_vg = scaled_vgs.get(nums)
            if scaled_vg is None:
                scaled_vg = scaled_vgs[nums] = _value_and_grad(
                    scaled, nums[0] if single else nums, has_aux=True, checkpoint=checkpoint)
            (_, value), grads = scaled_vg(*args, self._scale)
            return value, grads

        value_and_scaled_grad.__name__ = f"scaled_value_and_grad({scaled.__name__})"
        return value_and_scaled_grad

    # -- state ---------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The scaler's state as plain Python numbers (empty when disabled, like
        GradScaler's); a pending step's inf/nan result is not part of it."""
        if not self.enabled:
            return {}
        return {"scale": float(self._scale), "growth_factor": self.growth_factor,
                "backoff_factor": self.backoff_factor, "growth_interval": self.growth_interval,
                "growth_tracker": self.growth_tracker, "skipped_steps": self.skipped_steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a `state_dict()`; ignored when disabled."""
        if not self.enabled:
            return
        missing = [k for k in _STATE_KEYS if k not in state]
        if missing:
            hint = " (a disabled LossScaler saves an empty state)" if not state else ""
            raise ArgumentValueError(f"LossScaler.load_state_dict: missing {missing}{hint}")
        self._scale = np.float32(state["scale"])
        self.growth_factor = float(state["growth_factor"])
        self.backoff_factor = float(state["backoff_factor"])
        self.growth_interval = int(state["growth_interval"])
        self.growth_tracker = int(state["growth_tracker"])
        self.skipped_steps = int(state["skipped_steps"])

    def __repr__(self) -> str:
        return (f"LossScaler(scale={self.scale}, skipped_steps={self.skipped_steps}, "
                f"growth_tracker={self.growth_tracker}, enabled={self.enabled}, "
                f"dynamic={self.dynamic})")


_STATE_KEYS = ("scale", "growth_factor", "backoff_factor", "growth_interval", "growth_tracker",
               "skipped_steps")
