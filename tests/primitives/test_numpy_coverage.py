"""cfgrad.numpy against its target list, name by name (issue 13).

tests/data/numpy_api.txt lists the functions `cfgrad.numpy` provides, each marked `diff`
(differentiable) or `nodiff` (integer, boolean, index or piecewise-constant results). The
examples live in tests/primitives/numpy_cases/*.py, one file per family of functions, each a module
with a dict `EXAMPLES`: name -> list of example dicts with keys

    args       the positional arguments (numpy arrays, Python values)
    kwargs     keyword arguments, passed as they are (default {})
    traced     the positions of `args` given as traced values (default: every numpy array
               of a number or bool dtype); the rest stay concrete (static)
    reference  the expected function (default: numpy's function of the same name), called
               with the same arguments; JAX's semantics where JAX and numpy differ
    grad       whether a `diff` entry's derivatives are checked here (default True)
    rtol, atol tolerances of the value comparison (default 1e-10, 1e-12)

and, for every example: the concrete call equals the reference (values, shapes, kinds of
dtype, structure); the same call with its array arguments traced (inside `cg.vjp`) equals
it too; and for a `diff` entry, the VJP and the JVP of the call with respect to its traced
float arguments match central differences in float64 (`cg.testing.check_grads`). A name
of the list without an example, or not found in `cfgrad.numpy`, fails; so does an
example for a name not on the list.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad.testing import check_grads

HERE = Path(__file__).parent


def target_list() -> dict[str, str]:
    """name -> kind ("diff" or "nodiff"), from tests/data/numpy_api.txt."""
    entries = {}
    for line in (HERE.parent / "data" / "numpy_api.txt").read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            name, kind = line.split("\t")
            entries[name] = kind
    return entries


TARGET = target_list()


@dataclass(frozen=True)
class Example:
    args: tuple
    kwargs: dict = field(default_factory=dict)
    traced: tuple[int, ...] | None = None
    reference: Callable[..., Any] | None = None
    grad: bool = True
    rtol: float = 1e-10
    atol: float = 1e-12

    def traced_positions(self) -> tuple[int, ...]:
        if self.traced is not None:
            return self.traced
        return tuple(i for i, a in enumerate(self.args)
                     if isinstance(a, np.ndarray) and a.dtype.kind in "biufc")


def load_examples() -> dict[str, list[Example]]:
    examples: dict[str, list[Example]] = {}
    for path in sorted((HERE / "numpy_cases").glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"numpy_cases_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for name, items in module.EXAMPLES.items():
            assert name not in examples, f"{name} has examples in two files ({path.name})"
            examples[name] = [Example(**item) for item in items]
    return examples


EXAMPLES = load_examples()


def resolve(module: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        module = getattr(module, part)
    return module


def leaves(tree: Any) -> list[Any]:
    if isinstance(tree, tuple | list):
        return [leaf for item in tree for leaf in leaves(item)]
    return [tree]


def assert_matches(ours: Any, expected: Any, example: Example, what: str) -> None:
    ours_leaves, expected_leaves = leaves(ours), leaves(expected)
    assert len(ours_leaves) == len(expected_leaves), (
        f"{what}: {len(ours_leaves)} results, expected {len(expected_leaves)}")
    for got, want in zip(ours_leaves, expected_leaves):
        got, want = np.asarray(got), np.asarray(want)
        assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
        kinds = {"b": "b", "i": "i", "u": "i", "f": "f", "c": "c"}
        assert kinds[got.dtype.kind] == kinds[want.dtype.kind], (
            f"{what}: dtype {got.dtype}, expected {want.dtype}")
        np.testing.assert_allclose(got, want, rtol=example.rtol, atol=example.atol,
                                   equal_nan=True, err_msg=what)


def with_traced(fn: Callable, example: Example) -> tuple[Callable, tuple]:
    """fn as a function of the example's traced arguments, and their values."""
    positions = example.traced_positions()

    def partial(*values: Any) -> Any:
        args = list(example.args)
        for i, v in zip(positions, values):
            args[i] = v
        return fn(*args, **example.kwargs)

    return partial, tuple(example.args[i] for i in positions)


def test_every_listed_name_has_examples() -> None:
    missing = sorted(set(TARGET) - set(EXAMPLES))
    assert not missing, f"{len(missing)} names of numpy_api.txt have no example: {missing}"


def test_examples_are_for_listed_names() -> None:
    unknown = sorted(set(EXAMPLES) - set(TARGET))
    assert not unknown, f"examples for names not in numpy_api.txt: {unknown}"


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_listed_function_computes_what_the_reference_does(name: str) -> None:
    fn = resolve(cnp, name)
    for number, example in enumerate(EXAMPLES[name]):
        reference = example.reference or resolve(np, name)
        expected = reference(*example.args, **example.kwargs)
        what = f"cnp.{name} example {number}"
        assert_matches(fn(*example.args, **example.kwargs), expected, example, what)
        partial, values = with_traced(fn, example)
        if values:
            traced_out, _ = cg.vjp(partial, *values)
        else:  # no array argument: traced inside a function of a dummy input
            traced_out, _ = cg.vjp(lambda dummy, partial=partial: partial(), 0.0)
        assert_matches(traced_out, expected, example, what + " (traced)")


DIFF = sorted(name for name in EXAMPLES if TARGET.get(name) == "diff")


@pytest.mark.parametrize("name", DIFF)
def test_listed_function_derivatives_match_finite_differences(name: str) -> None:
    fn = resolve(cnp, name)
    checked = 0
    for example in EXAMPLES[name]:
        if not example.grad:
            continue
        partial, values = with_traced(fn, example)
        floats = [i for i, v in enumerate(values) if np.asarray(v).dtype.kind in "fc"]
        if not floats:
            continue

        def of_floats(*xs: Any, partial=partial, values=values, floats=floats) -> Any:
            args = list(values)
            for i, x in zip(floats, xs):
                args[i] = x
            return partial(*args)

        check_grads(of_floats, tuple(values[i] for i in floats), modes=("fwd", "rev"))
        checked += 1
    assert checked, f"cnp.{name} is differentiable but no example checks its derivatives"
