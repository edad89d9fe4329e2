"""`cg.jit`'s Numba backend at run time: compiled arithmetic is numpy's at edge values
(complex division and constant index arrays included), a compiled endless loop stops on
Ctrl-C, and an unusable cache directory is a warning rather than a failed compile.

The arithmetic table: for each dtype a program can hold (int8, int16, int32, int64, uint8,
uint64, float32, float64), one compiled program computes every binary operation (and the
unary ones whose edges matter: `-x`, `abs`, `~x`) over arrays of all pairs of edge values
(min, max, -1, 0, 1, ±0.0, ±inf, nan, ...), over two scalars, and over two scalars carried
by a loop; it is called once per pair and compared with the interpreter running the same
Program (which runs numpy itself), bit for bit: same dtype, same bytes, signed zeros and
NaN signs included (a float `x ** y`, C's pow, may be one unit in the last place off).
A compiled integer division used to kill the process (SIGFPE), so the table runs in a
child process (`python3 -c`), which reports what differs.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad import tree

ROOT = Path(__file__).parents[2]

# ---------------------------------------------------------------------------------
# Arithmetic at edge values, against the interpreter (numpy)
# ---------------------------------------------------------------------------------

LONG = os.environ.get("CFGRAD_HYPOTHESIS") == "long"  # the opt-in profile of conftest.py
# each dtype one compiled program (3-4 s cold): the default run keeps the narrowest and the
# widest signed integers, an unsigned one and both floats; the long one adds the rest
TABLE_DTYPES = ["int8", "int64", "uint64", "float32", "float64"] + (
    ["int16", "int32", "uint8"] if LONG else [])


def edge_values(dtype: np.dtype) -> np.ndarray:
    """The values each operand takes: the type's extremes and the small numbers around 0
    where signs, floors and wrap-around change (-7 and 2: a floor that is not a trunc)."""
    if dtype.kind == "f":
        f = np.finfo(dtype)
        values = [-np.inf, -f.max, -5.5, -2.0, -1.0, -f.smallest_subnormal, -0.0, 0.0,
                  f.smallest_subnormal, 1.0, 2.0, 3.0, 5.5, f.max, np.inf, np.nan]
    else:
        i = np.iinfo(dtype)
        small = [-7, -2, -1, 0, 1, 2, 7] if i.min else [0, 1, 2, 7]
        values = sorted({i.min, i.min + 1, *small, i.max - 1, i.max})
    return np.array(values, dtype)


def operations(x: Any, y: Any) -> dict[str, Any]:
    """Every compiled binary operation of x and y (same dtype) and -x, abs(x), ~x, by name.
    `x // y` and `x % y` are the two outputs of `cnp.divmod` (the same primitives), `x > y`
    is `y < x` at the mirrored pair; `x ** 2` is the multiplications the kernel writes for
    small powers, `x ** 35` and `x ** -17` the helper it calls past 16."""
    kind = np.dtype(x.dtype).kind
    quotient, remainder = cnp.divmod(x, y)
    out = {"x+y": x + y, "x-y": x - y, "x*y": x * y, "x/y": x / y,
           "maximum": cnp.maximum(x, y), "minimum": cnp.minimum(x, y), "x<y": x < y,
           "x<=y": x <= y, "x==y": x == y, "x!=y": x != y, "x//y": quotient,
           "x%y": remainder, "fmod": cnp.fmod(x, y), "-x": -x, "abs": cnp.abs(x),
           "x**2": x ** 2, "x**35": x ** 35}
    if kind == "f":
        out.update({"x**y": x ** y, "x**-1": x ** -1, "x**-17": x ** -17})
    else:  # a negative exponent raises (test below): the sign bit masked off
        out.update({"x&y": x & y, "x|y": x | y, "x^y": x ^ y, "~x": ~x,
                    "x**y": x ** (y & np.iinfo(x.dtype).max) if kind == "i" else x ** y})
    return out


LOOPED = ("x//y", "x%y", "fmod", "x**y")


def table_program(xs: Any, ys: Any, x: Any, y: Any, n: Any) -> tuple[dict, dict, dict]:
    """`operations` on arrays and on scalars, and the divisions and powers (the
    operations with kernels of their own) on scalars that a loop carries."""
    def step(i: Any, carry: tuple) -> tuple:
        a, b, _ = carry
        results = operations(a, b)
        return a, b, {name: results[name] for name in LOOPED}

    scalars = operations(x, y)
    looped = cg.fori_loop(0, n, step, (x, y, {name: scalars[name] for name in LOOPED}))
    return operations(xs, ys), scalars, looped[2]


def interpreted(f: Any) -> Any:
    """`f` traced as `cg.jit` traces it, run by the interpreter: the reference."""
    j = cg.jit(f)

    def run(*args: Any) -> Any:
        entry, leaves = j._lowered(args, {})
        return tree.unflatten(entry.program.out_tree, entry.run(leaves)[0])
    return run


def _bits(a: np.ndarray) -> np.ndarray:
    return a.reshape(-1).view(f"u{a.dtype.itemsize}")


def differences(got: dict[str, Any], want: dict[str, Any], xs: np.ndarray,
                ys: np.ndarray) -> list[str]:
    """The operations whose results differ in dtype, shape or bits (signed zeros and a
    NaN's sign included); for arrays, the operands of the first entries that differ. A
    float `x ** y` is C's pow, a transcendental function (docs/jit.md): where numpy's is a
    finite nonzero number, one unit in the last place apart is allowed."""
    found = []
    for name, w in want.items():
        g, w = np.asarray(got[name]), np.asarray(w)
        if (g.dtype, g.shape) != (w.dtype, w.shape):
            found.append(f"{name}: {g.dtype}{g.shape}, want {w.dtype}{w.shape}")
            continue
        same = _bits(g) == _bits(w)
        if name == "x**y" and w.dtype.kind == "f":
            with np.errstate(invalid="ignore", over="ignore"):
                near = np.abs(g - w) <= np.spacing(np.abs(w))
            same |= (np.isfinite(w) & (w != 0) & near).reshape(-1)
        bad = np.flatnonzero(~same)[:3]
        if bad.size:
            found.append(f"{name}: {g.reshape(-1)[bad]!r}, want {w.reshape(-1)[bad]!r}"
                         + (f" at x={xs[bad]!r}, y={ys[bad]!r}" if g.ndim else ""))
    return found


def compiled_dtypes(jitted: Any) -> Any:
    """The dtypes the compiled function of `jitted` (called once) returns, in the shape
    of its results: scalars come back as Python numbers and are converted to their
    dtype, so a float32 value computed in float64 shows only here."""
    ((_, native),) = jitted._runners.values()
    (signature,) = native._fn.nopython_signatures
    returned = [np.dtype(str(getattr(t, "dtype", t))) for t in signature.return_type]
    return tree.unflatten(native.program.out_tree, returned)


def table_mismatches(dtype_name: str) -> list[str]:
    """Where compiled and interpreted results differ over the pairs of edge values of
    one dtype (one compiled program, called once per pair), and the results the
    compiled code computes in another dtype."""
    dtype = np.dtype(dtype_name)
    values = edge_values(dtype)
    xs, ys = (a.ravel() for a in np.meshgrid(values, values, indexing="ij"))
    jitted = cg.jit(table_program, fallback=False)
    reference = interpreted(table_program)
    found = []
    for k, (x, y) in enumerate(zip(xs, ys)):
        got, want = jitted(xs, ys, x, y, 1), reference(xs, ys, x, y, 1)
        if k == 0:  # the arrays' results, the same at every pair; the dtypes computed
            found += [f"{dtype_name} arrays: {d}" for d in differences(got[0], want[0], xs, ys)]
            for label, computed, w in zip(["arrays", "scalars", "loop"],
                                          compiled_dtypes(jitted), want):
                found += [f"{dtype_name} {label}: {name} computed in {computed[name]}, "
                          f"want {np.asarray(value).dtype}" for name, value in w.items()
                          if computed[name] != np.asarray(value).dtype]
        for label, g, w in zip(["scalars", "loop"], got[1:], want[1:]):
            found += [f"{dtype_name} {label} x={x!r} y={y!r}: {d}"
                      for d in differences(g, w, xs, ys)]
    return found


def table_in_child(dtypes: list[str]) -> tuple[int, list[str], str]:
    """Run `table_mismatches` for `dtypes` in a child process: its exit status, the
    mismatches it reported (a line of JSON per dtype) and its stderr."""
    script = ("import sys, json; sys.path.insert(0, sys.argv[1]); "
              "import test_jit_runtime as t\n"
              "for d in sys.argv[2:]:\n"
              "    print(json.dumps([d, t.table_mismatches(d)]), flush=True)\n")
    proc = subprocess.run([sys.executable, "-c", script, str(Path(__file__).parent), *dtypes],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    found = [line for out in proc.stdout.splitlines() for line in json.loads(out)[1]]
    return proc.returncode, found, proc.stderr


def test_compiled_arithmetic_is_numpys_at_edge_values() -> None:
    """Integer `//`, `%`, `fmod` used to kill the process at INT_MIN and -1, integer `**`
    went through float64, float `//` was floor(x / y), `x ** -1` of a float32 scalar was a
    float64: every operation now gives numpy's bits in numpy's dtype."""
    rc, found, stderr = table_in_child(TABLE_DTYPES)
    assert rc == 0, f"the child process ended with {rc}: {stderr[-2000:]}"
    assert not found, "\n".join(found[:40])


def powers(xs: Any, ys: Any, x: Any, y: Any) -> tuple:
    return xs ** ys, x ** y


@pytest.mark.parametrize("negative", ["array", "scalar"])
def test_a_negative_integer_power_raises_numpys_error_compiled_too(negative: str) -> None:
    """numpy refuses integers to negative integer powers (ValueError); compiled code used
    to go through float64 and return 0 for 2 ** -1."""
    xs, ys = np.array([2, 3]), np.array([1, -1] if negative == "array" else [1, 2])
    args = (xs, ys, 2, -1 if negative == "scalar" else 1)
    raised = []
    for run in (cg.jit(powers, fallback=False), interpreted(powers)):
        with pytest.raises(ValueError) as caught:
            run(*args)
        raised.append((type(caught.value), str(caught.value)))
    assert raised[0] == raised[1]


def _bytes_of(x) -> bytes:
    return np.ascontiguousarray(np.asarray(x)).tobytes()


def test_jit_complex_division_bitwise():
    """Compiled complex division is numpy's algorithm (kernels.complex_divide), not
    Numba's, which differs in the last bit: arrays and scalars, complex128 and complex64,
    zero divisors included."""
    rng = np.random.default_rng(0)
    c = rng.normal(size=50) + 1j * rng.normal(size=50)
    d = rng.normal(size=50) * np.exp(rng.uniform(-4, 4, 50)) + 1j * rng.normal(size=50)
    d[:3] = [0.0, 1j, complex(0.0, -0.0)]

    def div(c, d):
        return c / d, c[3] / d[4]
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("error", cg.CompileWarning)
        for dtype in (np.complex128, np.complex64):
            x, y = c.astype(dtype), d.astype(dtype)
            compiled = cg.jit(div)(x, y)
            assert [_bytes_of(v) for v in compiled] == [_bytes_of(v) for v in (x / y, x[3] / y[4])]


_NEG_REPEATED = np.array([-1, 0, 2, 2, -1])
_ROWS = np.array([[0], [1]])
_COLS = np.array([1, 3, 3])


@pytest.mark.skipif(not LONG, reason="16 s of cold compile; constant index arrays compile "
                    "bitwise in test_jit.py and test_jit_indexing.py's default run: run under "
                    "CFGRAD_HYPOTHESIS=long")
def test_jit_constant_index_arrays_gather_and_scatter_bitwise():
    """Negative and repeated indices (their gradients add up), broadcast index arrays
    separated by a slice (numpy moves the advanced axes to the front), Ellipsis, an
    empty index array and cnp.take, forward values and gradient."""
    def parts(x, y):
        t = cnp.zeros((2, 3, 4)) + y[None, :3, :]
        return (x[_NEG_REPEATED], t[_ROWS, :, _COLS], t[..., _COLS],
                x[np.array([], dtype=np.int64)], cnp.take(x, _NEG_REPEATED), y[-1, _COLS])

    def loss(x, y):
        return sum(cnp.sum(p * p) * (j + 1.0) for j, p in enumerate(parts(x, y)))
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=4), rng.normal(size=(4, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("error", cg.CompileWarning)
        compiled = cg.jit(cg.grad(loss, argnums=(0, 1)))(x, y)
    interpreted = cg.grad(loss, argnums=(0, 1))(x, y)
    assert [_bytes_of(g) for g in compiled] == [_bytes_of(g) for g in interpreted]
    assert parts(x, y)[1].shape == (2, 3, 3)  # numpy's own rule, traced


# ---------------------------------------------------------------------------------
# Ctrl-C
# ---------------------------------------------------------------------------------

ENDLESS = textwrap.dedent("""
    import signal

    import cfgrad as cg

    # Python's own Ctrl-C handler, which a process started with SIGINT ignored (a test
    # command run in the background, as CI may) does not install by itself
    signal.signal(signal.SIGINT, signal.default_int_handler)

    def forever(x):
        return cg.while_loop(lambda c: c >= 0.0, lambda c: c + 1.0, x)

    jitted = cg.jit(forever, fallback=False)
    assert jitted(-1.0) == -1.0  # compiled (no iteration)
    try:
        print("looping", flush=True)
        jitted(0.0)
    except KeyboardInterrupt:
        print("KeyboardInterrupt", flush=True)
""")


def test_ctrl_c_stops_an_endless_compiled_loop() -> None:
    """SIGINT while a compiled `while_loop` runs forever raises KeyboardInterrupt in it,
    as in the interpreter (it used to go unnoticed: the loop never returned to Python)."""
    child = subprocess.Popen([sys.executable, "-c", ENDLESS], cwd=ROOT, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert child.stdout.readline() == "looping\n", child.stderr.read()
        time.sleep(1.0)  # into the compiled loop: a Ctrl-C before it stops Python anyway
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=120)  # a hang guard only
    finally:
        child.kill()
    assert out == "KeyboardInterrupt\n", err


def test_every_loop_of_a_compiled_gradient_checks_for_signals() -> None:
    """The forward loops count their iterations anyway; an adjoint's loop, which runs as
    many iterations as its forward loop ran, counts back edges of its own for the check."""
    def geometric(x: Any, n: Any) -> Any:
        inner = cg.fori_loop(0, n, lambda i, c: c * x + 1.0, x)
        return cg.while_loop(lambda c: c < 100.0, lambda c: c * 2.0 + inner, 1.0)

    source = cg.jit(cg.grad(geometric)).info(0.5, 3).source
    loops = source.count("while True:")
    assert loops == 4 and source.count("K.check_signals()") == loops, source


# ---------------------------------------------------------------------------------
# The cache directory
# ---------------------------------------------------------------------------------


def blocked_by_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "cache").write_text("not a directory")
    return tmp_path / "cache"


def below_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return blocked_by_a_file(tmp_path, monkeypatch) / "native"


def read_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory without write permission (for root, who writes there anyway, its
    writes fail as they would for anyone else)."""
    directory = tmp_path / "cache"
    directory.mkdir(mode=0o555)
    if os.geteuid() == 0:
        write_text = Path.write_text

        def refused(path: Path, *args: Any, **kwargs: Any) -> int:
            if path.parent == directory:
                raise PermissionError(errno.EACCES, "Permission denied", str(path))
            return write_text(path, *args, **kwargs)

        monkeypatch.setattr(Path, "write_text", refused)
    return directory


@pytest.mark.parametrize("kind", [blocked_by_a_file, below_a_file, read_only])
def test_an_unusable_cache_directory_warns_and_still_compiles(
        kind: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache directory that is a file, lies below one or cannot be written to used to
    fail every compile ("Numba could not compile it"): now one CompileWarning names it and
    says what to do, and the code compiles in a temporary directory of the process."""
    directory = kind(tmp_path, monkeypatch)
    monkeypatch.setenv("CFGRAD_CACHE_DIR", str(directory))
    offset = float(len(kind.__name__))  # a program of its own: a module not loaded yet

    def shifted(x: Any) -> Any:
        return cg.fori_loop(0, 3, lambda i, c: c * x + offset, x)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        jitted = cg.jit(shifted, fallback=False)
        assert jitted(0.5) == interpreted(shifted)(0.5)
        assert jitted.info(0.5).backend == "numba"
        assert cg.jit(lambda x: shifted(x) + 1.0)(0.5) == jitted(0.5) + 1.0
    assert [type(w.message) for w in caught] == [cg.CompileWarning]
    message = str(caught[0].message)
    assert str(directory) in message and "CFGRAD_CACHE_DIR" in message, message
