"""The derivative table's declarations of how each primitive compiles, walked entry by entry.

Every entry declares its compiled form (`Primitive.compiled`): a numpy ufunc Numba compiles
(`Ufunc`), a Numba source function (`Source`), a node native.py writes itself
(`Structural`), or `NotCompiled` with the reason a user is told. This file holds the table
to those declarations, so that adding a primitive needs no list here:

- each declaration is well formed (a ufunc entry's implementation is that ufunc, a source
  function takes the entry's parameters, a reason is one line);
- every parameterless elementwise entry with a compiled form computes, compiled, what the
  interpreter computes, for each dtype of `DTYPES` its shape rule accepts, on arrays and on
  scalars (bitwise, but for the math library's functions, tests/primitive_facts.py's
  "ulps"): one program per dtype, so a few Numba compiles check the whole family (a
  uint8 `sign` was 255 for 200 until this did);
- every other entry with a compiled form has a case in tests/primitives/test_kernels.py, which
  compares it bitwise with numpy there (the LAPACK entries: in tests/jit/test_jit_linalg.py);
- no entry is `NotCompiled`, and an entry declared so would be refused with its declared
  reason and rewrite, after the line of the node;
- every `operator` an entry declares (which the interpreter, and for `Ufunc(operator=True)`
  the compiled code, writes instead of a call) is the implementation on numpy operands.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import cfgrad.numpy as cnp
from cfgrad.api import lowered
from cfgrad.errors import LoweringError, Unsupported
from cfgrad.interpret import Compiled, Machine
from cfgrad.ir import TensorType
from cfgrad.native import NativeProgram
from cfgrad.primitives import (
    PRIMITIVES,
    NotCompiled,
    Primitive,
    Source,
    Structural,
    Ufunc,
    bind,
)

sys.path.insert(0, str(Path(__file__).parent))
from primitive_facts import FACTS  # noqa: E402
from test_jit_linalg import CHECKED as LAPACK_CHECKED  # noqa: E402
from test_kernels import CASES  # noqa: E402

# the nodes native.py's writer compiles itself (a module constant, a function of its own,
# a call in object mode)
STRUCTURAL = {"const", "call", "vjp_call", "custom_vjp", "custom_jvp", "debug_callback"}


def test_every_entry_declares_its_compiled_form():
    for name, prim in PRIMITIVES.items():
        c = prim.compiled
        assert isinstance(c, Ufunc | Source | NotCompiled | Structural), name
        if isinstance(c, Ufunc):
            assert isinstance(prim.impl, np.ufunc) and c.name == prim.impl.__name__, name
            assert not prim.params, f"{name}: a ufunc entry takes no parameters"
            assert not c.operator or isinstance(prim.operator, str), name
        elif isinstance(c, Source):
            taken = list(inspect.signature(c.write).parameters)
            want = ["args", "types", "out", *prim.params] + (["const"] if c.constants else [])
            assert taken[:3] == want[:3] and set(taken[3:]) == set(want[3:]), (name, taken)
        elif isinstance(c, NotCompiled):
            assert c.reason and "\n" not in c.reason, name
    assert {n for n, p in PRIMITIVES.items() if isinstance(p.compiled, Structural)} == \
        STRUCTURAL


# -- the elementwise family, generated from the declarations ---------------------------

_VALUES = {
    "f": [0.0, -0.0, 0.5, -1.5, 2.0, 3.25, 0.75, -0.25],
    "i": [0, 1, -1, 7, -7, 100, -100, 3],
    "u": [0, 1, 2, 7, 200, 100, 255, 3],
    "b": [True, False, True, True, False, False, True, False],
    "c": [1.5 - 2j, -0.25 + 0.5j, -3.0 - 0.0j, 0j, 0.5 + 0j, -1.0 + 1.0j, 2.0 - 0.5j, 1j],
}
# second operands: no negative exponent of an integer (numpy raises), a zero divisor
_SECOND = {
    "f": [0.25, -0.0, 1.5, 2.0, -3.0, 0.5, 0.75, 4.0],
    "i": [2, 3, 0, 1, 5, 2, 1, 3],
    "u": [2, 3, 0, 1, 5, 2, 1, 3],
}
# float64 and int64 are tests/primitives/test_kernels.py's (arrays and scalars of each entry); these
# are the others, each program a Numba compile of 5-12 s when the disk cache is cold
LONG = os.environ.get("CFGRAD_HYPOTHESIS") == "long"  # the opt-in profile of conftest.py
# each dtype one compiled program (5-10 s cold): the default run keeps a float, an unsigned
# integer (where a compiled `sign` of 200 was 255) and a complex type; the long one adds a
# signed integer and booleans
DTYPES = [np.dtype(d) for d in (np.float32, np.uint8, np.complex128)] + (
    [np.dtype(np.int8), np.dtype(np.bool_)] if LONG else [])
# computed by a math library, Numba's (LLVM's, the C library's) and numpy's: a few ulp apart
# (tests/primitive_facts.py's "ulps"; of complex operands also sqrt, numpy's npymath
# against Numba's cmath)
LIBM = {name for name, facts in FACTS.items() if facts.exactness == "ulps"}
LIBM_COMPLEX = LIBM | {"sqrt"}
# numpy 2 orders complex numbers (lexicographically); Numba has no such ordering, so it
# refuses these on complex operands and cg.jit runs the program in the interpreter, with a
# CompileWarning that says so (not a wrong number): a list that can only shrink
NUMBA_REFUSES_COMPLEX = {"lt", "le", "gt", "ge", "maximum", "minimum"}
# sources that refuse complex operands themselves (Unsupported: the interpreter runs them)
SOURCE_REFUSES_COMPLEX = {"sinc"}


def _arity(prim: Primitive) -> int:
    """How many operands an elementwise entry takes (its implementation's, less the
    parameters)."""
    if isinstance(prim.impl, np.ufunc):
        return prim.impl.nin
    return len(inspect.signature(prim.impl).parameters) - len(prim.params)


def _accepts(prim: Primitive, dtype: np.dtype) -> bool:
    """Whether the entry's shape rule takes operands of `dtype` (numpy has a loop)."""
    types = [TensorType((8,), dtype)] * _arity(prim)
    try:
        prim.abstract(types)
    except LoweringError:
        return False
    return True


ELEMENTWISE = sorted(
    name for name, p in PRIMITIVES.items()
    if p.family == "elementwise" and not p.params
    and isinstance(p.compiled, Ufunc | Source))


def _operands(dtype: np.dtype, arity: int) -> list[np.ndarray]:
    first = np.array(_VALUES[dtype.kind], dtype)
    second = np.array(_SECOND.get(dtype.kind, _VALUES[dtype.kind][::-1]), dtype)
    return [first, second][:arity]


@pytest.fixture(scope="module", params=DTYPES, ids=str)
def family_run(request):
    """Every elementwise entry accepting `dtype`, on arrays and on scalars (a native
    scalar in compiled code), in one program: its results compiled and interpreted."""
    dtype = request.param
    names = [n for n in ELEMENTWISE if _accepts(PRIMITIVES[n], dtype)
             and not (dtype.kind == "c" and n in NUMBA_REFUSES_COMPLEX | SOURCE_REFUSES_COMPLEX)]
    operands = {n: _operands(dtype, _arity(PRIMITIVES[n])) for n in names}
    flat = [a for n in names for a in operands[n]]

    def fn(*xs):
        outs, k = [], 0
        for n in names:
            args = xs[k:k + len(operands[n])]
            k += len(args)
            outs.append(bind(n, *args))
            outs.append(bind(n, *[a[1] for a in args]))
        return outs

    program = lowered(fn, tuple(flat))[0].program
    with np.errstate(all="ignore"):
        interpreted = Machine(Compiled(program)).run(list(flat))
        compiled = NativeProgram(Compiled(program))(flat)
    return dtype, names, interpreted, compiled


def test_elementwise_entries_compile_to_the_interpreters_bits(family_run):
    dtype, names, interpreted, compiled = family_run
    assert names
    for i, name in enumerate(names):
        for j, shape in ((2 * i, "array"), (2 * i + 1, "scalar")):
            want, got = np.asarray(interpreted[j]), np.asarray(compiled[j])
            where = f"{name} of {dtype} ({shape})"
            assert got.dtype == want.dtype and got.shape == want.shape, where
            if name in (LIBM_COMPLEX if dtype.kind == "c" else LIBM) and \
                    want.dtype.kind in "fc":
                tiny = 4 * np.finfo(want.dtype).eps
                np.testing.assert_allclose(got, want, rtol=tiny, atol=0, err_msg=where)
            else:
                assert got.tobytes() == want.tobytes(), (where, got, want)


@pytest.mark.parametrize("name", sorted(NUMBA_REFUSES_COMPLEX))
def test_numba_refuses_complex_orderings(name):
    z = np.array([1.5 - 2j, -0.25 + 0.5j])
    assert _accepts(PRIMITIVES[name], z.dtype)
    program = lowered(lambda a, b: bind(name, a, b), (z, z[::-1].copy()))[0].program
    with pytest.raises(Exception, match="No implementation|Cannot|not supported|Invalid"):
        NativeProgram(Compiled(program))([z, z[::-1].copy()])


@pytest.mark.parametrize("name", sorted(SOURCE_REFUSES_COMPLEX))
def test_sources_refuse_complex_operands(name):
    z = np.array([1.5 - 2j, -0.25 + 0.5j])
    assert _accepts(PRIMITIVES[name], z.dtype)
    program = lowered(lambda a: bind(name, a), (z,))[0].program
    with pytest.raises(Unsupported, match=f"^{name} of c128"):
        NativeProgram(Compiled(program))


# -- the other compiled entries: tests/primitives/test_kernels.py has their cases ------------------

def test_every_other_compiled_entry_has_a_kernel_case():
    with_cases = {c.prim for c in CASES}
    compiled = {n for n, p in PRIMITIVES.items() if isinstance(p.compiled, Ufunc | Source)}
    missing = compiled - set(ELEMENTWISE) - with_cases - LAPACK_CHECKED
    assert not missing, f"no case in tests/primitives/test_kernels.py's CASES for {sorted(missing)}"


# -- NotCompiled: refused, with the reason the entry declares ---------------------------

def test_every_entry_has_a_compiled_form():
    """Every primitive compiles (what falls back is an operand a compiled form refuses,
    tested with the primitive's family)."""
    declared = {n for n, p in PRIMITIVES.items() if isinstance(p.compiled, NotCompiled)}
    assert declared == set()


def test_an_entry_declared_not_compiled_is_refused_with_its_reason(monkeypatch):
    """The declaration still works for an entry that may need it: the node's line, the
    reason and the rewrite the entry declares."""
    def halved(x):
        return cnp.sin(x) / 2.0

    program = lowered(halved, (np.ones(3),))[0].program
    declared = NotCompiled("a reason a user reads", "a way to write it")
    monkeypatch.setitem(PRIMITIVES, "sin",
                        dataclasses.replace(PRIMITIVES["sin"], compiled=declared))
    with pytest.raises(Unsupported) as info:
        NativeProgram(Compiled(program))
    message = str(info.value)
    assert message.startswith("primitive `sin` has no compiled implementation: a reason a "
                              "user reads"), message
    assert info.value.rewrite == "a way to write it"
    where = info.value.where_and_why()
    assert "test_primitive_table.py" in where and "`return cnp.sin(x) / 2.0`" in where, where
    assert where.endswith("; rewrite: a way to write it"), where


# -- operators: the source the interpreter writes instead of a call ---------------------

def _operand_sets(prim: Primitive, dtype: np.dtype) -> list[list[Any]]:
    """Arrays, and scalars (numpy's, as the interpreter holds them), of `dtype`."""
    args = _operands(dtype, _arity(prim))
    if prim.name == "matmul":
        return [[args[0].reshape(2, 4), args[1].reshape(4, 2)]]
    return [args, [a[1] for a in args]]


@pytest.mark.parametrize("name", sorted(n for n, p in PRIMITIVES.items() if p.operator))
def test_operators_compute_the_implementation(name):
    prim = PRIMITIVES[name]
    settings = [{}] if not prim.params else [{"n": n} for n in range(-2, 6)]
    checked = 0
    for dtype in DTYPES:
        for params in settings:
            try:
                prim.abstract([TensorType((8,), dtype)] * _arity(prim) if name != "matmul"
                              else [TensorType((2, 4), dtype), TensorType((4, 2), dtype)],
                              **params)
            except LoweringError:
                continue
            for operands in _operand_sets(prim, dtype):
                source = prim.operator_source([f"a{i}" for i in range(len(operands))], params)
                if source is None:
                    continue
                with np.errstate(all="ignore"):
                    got = eval(source, {}, {f"a{i}": a for i, a in enumerate(operands)})
                    want = prim.impl(*operands, **params)
                got, want = np.asarray(got), np.asarray(want)
                assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), (
                    name, dtype, params, got, want)
                checked += 1
    assert checked
