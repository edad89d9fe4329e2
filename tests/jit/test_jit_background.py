"""`cg.jit(f, wait=False)` compiles in the background (docs/jit.md, Compiling in the
background): a new signature's calls run the interpreter while a daemon thread compiles,
then switch to the machine code; a compile that fails warns once, in the calling thread,
at the next call (with `fallback=False`, a CompileError at every call); the default,
`wait=True`, compiles in the calling thread; many threads calling at once make one
compile; a process exits while a compile runs.

Where a test needs the interpreter phase to last, it holds the compile back with an event
(`held_compiles`), so that nothing depends on how long Numba takes. The programs are tiny
scalar functions, a fraction of a second of Numba each.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from threads import all_at_once

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad.jitted import COMPILED, COMPILING, INTERPRETED
from cfgrad.native import NativeProgram

_REAL_COMPILE = NativeProgram.compile


@contextmanager
def held_compiles(monkeypatch: pytest.MonkeyPatch, error: Exception | None = None
                  ) -> Iterator[tuple[threading.Event, list]]:
    """Every NativeProgram compile started inside waits for the event it yields (set when
    the block ends, at the latest), then raises `error` or compiles; the list collects
    the NativeProgram of each compile, in the thread that ran it."""
    release, compiled = threading.Event(), []

    def compile(self: NativeProgram, args: list) -> None:
        if self.compile_seconds is not None:  # compiled already: nothing to do
            return
        release.wait()
        compiled.append((self, threading.current_thread()))
        if error is not None:
            raise error
        _REAL_COMPILE(self, args)

    monkeypatch.setattr(NativeProgram, "compile", compile)
    try:
        yield release, compiled
    finally:
        release.set()


def settled(jitted: cg.jit, *args: Any) -> None:
    """Wait until the background compile of `args`' signature is done (without settling
    it: the next call does that)."""
    entry = jitted._lowered(args, {})[0]
    assert jitted._runners[id(entry)][1].done.wait(120)


def damped(x: Any) -> Any:
    return cg.fori_loop(0, 3, lambda i, c: cnp.sin(c) * x + 0.25, x)


def test_calls_run_the_interpreter_until_the_machine_code_is_ready(monkeypatch) -> None:
    """Held compile: the first calls are the interpreter's (the same numbers and types as
    `damped` run eagerly), `state` says so; released, the next call runs the machine code.
    The inner `cg.jit` is traced inline (no compile of its own), the grad is compiled."""
    inner = cg.jit(damped)
    jitted = cg.jit(cg.value_and_grad(lambda x: inner(x) * 2.0), wait=False)
    want = cg.value_and_grad(lambda x: damped(x) * 2.0)(0.7)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning on either path
        with held_compiles(monkeypatch) as (release, compiled):
            for _ in range(3):
                got = jitted(0.7)
                assert [type(v) for v in got] == [np.float64, np.float64]
                assert got == want  # the interpreter's bits
            assert jitted.state(0.7) == COMPILING
            assert compiled == []
            release.set()
            info = jitted.info(0.7)  # waits for it
        assert (info.backend, info.state, info.reason) == ("numba", COMPILED, None)
        assert jitted.state(0.7) == COMPILED
        (native, thread), = compiled
        assert thread is not threading.main_thread() and thread.daemon
        assert jitted._by_leaves[((float, "f"),)][1] is native  # calls go straight to it
        got = jitted(0.7)
    assert [type(v) for v in got] == [np.float64, np.float64]
    np.testing.assert_allclose(got, want, rtol=1e-14)  # sin: LLVM's libm, to rounding
    assert inner._runners == {}


def test_a_failed_background_compile_warns_once_at_the_next_call(monkeypatch) -> None:
    jitted = cg.jit(damped, wait=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with held_compiles(monkeypatch, RuntimeError("Failed in nopython mode\nboom")) as (
                release, _):
            assert jitted(0.5) == damped(0.5)
            release.set()
            settled(jitted, 0.5)
            assert caught == []  # nothing from the compiling thread
            results = [jitted(0.5) for _ in range(3)]
        info = jitted.info(0.5)
    assert results == [damped(0.5)] * 3
    assert [(w.category, w.filename) for w in caught] == [(cg.CompileWarning, __file__)]
    assert str(caught[0].message) == (
        "cfgrad.jit of damped runs in the interpreter: Numba could not compile it: boom")
    assert (info.backend, info.state, info.reason) == (
        "interpreter", INTERPRETED, "Numba could not compile it: boom")


def test_the_default_waits_and_fallback_false_refuses_at_every_call(monkeypatch) -> None:
    """By default the first call compiles in the calling thread; with `wait=False` and
    `fallback=False`, a failed compile is a CompileError at the next call and every call
    after it."""
    with held_compiles(monkeypatch, RuntimeError("boom")) as (release, compiled):
        release.set()
        with pytest.raises(cg.CompileError, match="cannot compile: Numba could not"):
            cg.jit(damped, fallback=False)(0.5)
        assert compiled[0][1] is threading.main_thread()
    jitted = cg.jit(damped, fallback=False, wait=False)
    with held_compiles(monkeypatch, RuntimeError("boom")) as (release, compiled):
        assert jitted(0.5) == damped(0.5)
        release.set()
        settled(jitted, 0.5)
        for call in (lambda: jitted(0.5), lambda: jitted(0.5), lambda: jitted.info(0.5)):
            with pytest.raises(cg.CompileError, match="of damped: cannot compile: Numba"):
                call()


def test_a_program_that_cannot_compile_warns_at_its_first_call() -> None:
    """What the generated source cannot express is found in the calling thread, before
    any background work: the warning comes with the first call, as with wait=True."""
    def ranked(x):  # a sort of complex numbers compiles for reals only
        return cnp.real(cnp.sort(x * (1.0 + 1.0j)))[0] * 2.0

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cg.jit(ranked, wait=False)(np.array([1.5, 2.5])) == 3.0
    assert [(w.category, w.filename) for w in caught] == [(cg.CompileWarning, __file__)]


def test_many_first_calls_at_once_make_one_compile(monkeypatch) -> None:
    jitted = cg.jit(lambda x: x * 3.25 - 0.125, wait=False)
    results: list = []
    with held_compiles(monkeypatch) as (release, compiled):
        all_at_once(lambda i: results.append(jitted(2.0 + i)), count=8)
        release.set()
        assert jitted.info(2.0).backend == "numba"
    assert sorted(results) == [(2.0 + i) * 3.25 - 0.125 for i in range(8)]
    assert len(compiled) == 1
    assert jitted(2.0) == 6.375


def test_the_process_exits_while_a_compile_runs(tmp_path: Path) -> None:
    """The compiling thread is a daemon: a script that ends right after its first call
    exits at once, cleanly, whether Numba is typing or in LLVM; the next process compiles
    the same program from what the first left in the cache directory."""
    script = textwrap.dedent("""
        import sys
        import cfgrad as cg
        import cfgrad.numpy as cnp
        def f(x):
            return cg.fori_loop(0, 4, lambda i, c: cnp.cos(c) * x - 0.375, x)
        jitted = cg.jit(f, wait=False)
        print(jitted(0.5) == f(0.5), jitted.state(0.5))
        if sys.argv[1] == "wait":
            print(jitted.info(0.5).backend, abs(jitted(0.5) - f(0.5)) < 1e-15)
    """)
    env = {**os.environ, "CFGRAD_CACHE_DIR": str(tmp_path),
           "PYTHONPATH": str(Path(__file__).parents[2])}
    runs = [subprocess.run([sys.executable, "-c", script, how], env=env, capture_output=True,
                           text=True, timeout=300) for how in ("exit", "wait")]
    assert [(r.returncode, r.stderr) for r in runs] == [(0, ""), (0, "")]
    assert runs[0].stdout.split() == ["True", "compiling", "in", "the", "background"]
    assert runs[1].stdout.split()[-2:] == ["numba", "True"]


def test_a_python_loop_of_gradients_generates_one_function_for_them() -> None:
    """Each step of a Python loop calling `cg.jvp` of `cg.grad` traces its own copy of
    the same sub-programs; the module holds one function for all of them (each copy was
    a Numba compile of its own: a 50-step power iteration took 28 minutes cold), and the
    steps' equal constants are one entry of `C`. Nothing is compiled here."""
    def quartic(x):
        return cnp.sum(x ** 4) * 0.25 + cnp.sum(x * np.arange(3.0))

    def power_iteration(x0):
        v = cnp.ones_like(x0)
        for _ in range(6):
            w = cg.jvp(cg.grad(quartic), (x0,), (v,))[1]
            v = w / cnp.sqrt(w @ w)
        return v @ cg.jvp(cg.grad(quartic), (x0,), (v,))[1]

    entry = cg.jit(power_iteration)._lowered((np.linspace(0.1, 0.5, 3),), {})[0]
    native = NativeProgram(entry.compiled)
    assert sum(n.op == "call" for b in entry.program.blocks for n in b.nodes) == 7
    assert native.source.count("@numba.njit") == 3, native.source  # main, call, vjp
    assert len(native._constants) == 2  # ones_like(x0) and one arange for the 7 copies
