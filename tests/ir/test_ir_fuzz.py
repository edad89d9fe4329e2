"""Malformed IR text never crashes the toolchain: mutants of valid programs (lines and
tokens deleted, duplicated, swapped or replaced) either parse, verify, differentiate and
compile, or stop with a `CfgradError` (`ParseError`, `VerifyError`) — never another
exception, and never a hang (a self-loop once made the reverse builder spin).

The mutants come from a fixed seed, so every run tries the same texts. A second,
exhaustive test edits every static parameter of every node (`{axes=(0,), …}`): each
value replaced by None, a string, a float, an out-of-range axis, a bad dtype, …, each
parameter dropped, an unknown one added; those mutants also run, forward and adjoint,
since a parameter the verifier let through would fail only there (numpy's AxisError)."""

from __future__ import annotations

import random
import re
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import seed_programs as seeds

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad.checkpoint import StoreAll
from cfgrad.errors import CfgradError
from cfgrad.forward_mode import build_jvp
from cfgrad.interpret import differentiate, execute
from cfgrad.irparse import split_comment, split_top
from cfgrad.primitives import bind

GOLDEN = Path(__file__).parents[1] / "golden"
MUTANTS_PER_SOURCE = 60
# A guard against hangs (a Jmp self-loop once made adjoint() loop forever), not a timing:
# a mutant takes milliseconds, and the guard is generous so a loaded machine never trips it.
HANG_GUARD = 120.0  # seconds per mutant


def nested(x, n):
    """A switch and a fori loop inside a while loop, and a cond inside the fori body."""
    def body(carry):
        i, s = carry
        s = cg.switch(i, [lambda v: v * x, lambda v: cnp.sin(v)], s)
        s = cg.fori_loop(0, i, lambda j, a: cg.cond(a > 0, lambda: a * 0.5, lambda: a - x), s)
        return i + 1, s

    return cg.while_loop(lambda c: c[0] < n, body, (0, x), max_iters=20)[1]


def params_example(x, m, i):
    """Every primitive that takes static parameters, once."""
    a = cnp.sum(m, axis=1) + cnp.mean(m, axis=0, keepdims=True)[0]
    b = cnp.max(m, axis=0) * cnp.min(m, axis=1) + cnp.prod(m, axis=1)
    c = cnp.logsumexp(m, axis=0) + x ** 3 + cnp.astype(cnp.argmax(m, axis=1), np.float64)
    d = cnp.transpose(m)[0] + cnp.reshape(m, (9,))[3:6]
    e = cnp.concatenate([a, b], axis=0)[1:4] + cnp.roll(c, i, axis=0)
    f = cnp.broadcast_to(x, (3,)) * d + m[i] + bind("scatter_add", x, spec=(1,), shape=(3,))
    return cnp.sum(cnp.clip(e * f, -1.0, 1.0) + cnp.where(e > 0, e, f))


PARAMS_ARGS = (0.5, np.arange(9.0).reshape(3, 3) / 10, 1)


def sources() -> dict[str, str]:
    texts = {p.stem: p.read_text() for p in sorted(GOLDEN.glob("*.txt"))
             if not p.stem.endswith(".adjoint")}
    texts["nested"] = cg.lower(nested, 1.0, 3).text()
    texts["params"] = cg.lower(params_example, *PARAMS_ARGS).text()
    return texts


SOURCES = sources()


def mutate(text: str, rng: random.Random) -> str:
    """One to three random edits of lines, or of the names, numbers and words within a
    line (the punctuation between them stays, so most mutants still read)."""
    lines = text.splitlines()
    pool = re.findall(r"%\w+|\bb\d+\b|-?\d+", text) + ["-1", "99999999999999999999"]
    for _ in range(rng.randint(1, 3)):
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        parts = re.split(r"(%\w+|[\w.]+)", lines[i])  # words at the odd positions
        words = range(1, len(parts), 2)
        edit = rng.choice(["drop line", "copy line", "swap lines", "drop word", "copy word",
                           "swap words", "replace word", "replace word", "replace word"])
        if edit == "drop line":
            del lines[i]
        elif edit == "copy line":
            lines.insert(j, lines[i])
        elif edit == "swap lines":
            lines[i], lines[j] = lines[j], lines[i]
        elif words:
            k, m = rng.choice(words), rng.choice(words)
            if edit == "drop word":
                parts[k] = ""
            elif edit == "copy word":
                parts[m] += ", " + parts[k]
            elif edit == "swap words":
                parts[k], parts[m] = parts[m], parts[k]
            else:
                parts[k] = rng.choice(pool)
            lines[i] = "".join(parts)
        if not lines:
            lines = ["program"]
    return "\n".join(lines) + "\n"


class Hang(BaseException):
    """Raised by the timer; a BaseException, so no `except Exception` in the code under
    test can turn a hang into an ordinary error."""


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    def expire(signum, frame):
        raise Hang(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def toolchain(text: str) -> None:
    """Everything a hand-written program goes through before it runs."""
    program = cg.parse_program(text)  # parses and verifies
    differentiate(program)
    build_jvp(program)


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs a POSIX interval timer")
@pytest.mark.parametrize("name", sorted(SOURCES))
def test_mutated_text_is_accepted_or_a_cfgrad_error(name):
    rng = random.Random(f"ir-fuzz-{name}")
    text = SOURCES[name]
    toolchain(text)  # the unmutated source goes through whole
    accepted = 0
    for _ in range(MUTANTS_PER_SOURCE):
        mutant = mutate(text, rng)
        try:
            with time_limit(HANG_GUARD), np.errstate(all="ignore"):
                toolchain(mutant)
            accepted += 1
        except CfgradError:
            pass
        except Exception as e:  # noqa: BLE001 - the failure report shows the mutant
            pytest.fail(f"{type(e).__name__}: {e}\n--- mutant of {name} ---\n{mutant}")
        except Hang:
            pytest.fail(f"no answer within {HANG_GUARD} s\n--- mutant of {name} ---\n{mutant}")
    assert accepted < MUTANTS_PER_SOURCE  # the mutations do break programs


#: What a parameter's value is replaced by: wrong kinds (None, a string, a float, a bool,
#: a list, a bare int for a tuple), axes out of range, repeated or negative, and dtypes
#: the IR lacks or that are merely wrong.
BAD_PARAMS = ["None", "'x'", "2.5", "True", "[0]", "0", "-1", "99", "(99,)", "(-1,)", "(0, 0)",
              "()", "(1, 1, 1)", "(0.0,)", "dtype('float128')", "dtype('int8')", "dtype('bool')",
              "array([1.0], 'float64')", "slice(0, 9, 0)", "('$', '$')", "..."]


def parameter_mutants(text: str) -> Iterator[str]:
    """Every node line with parameters, edited one way at a time: each parameter's value
    replaced by each of BAD_PARAMS, each parameter dropped, and an unknown one added."""
    lines = text.splitlines()
    for k, line in enumerate(lines):
        code, comment = split_comment(line)
        if not code.endswith("}") or "{" not in code:
            continue
        head, _, inner = code[:-1].partition("{")
        params = split_top(inner)
        edits = [params + ["foo=1"]]
        for j, param in enumerate(params):
            name = param.partition("=")[0]
            edits.append(params[:j] + params[j + 1:])
            edits += [params[:j] + [f"{name}={value}"] + params[j + 1:] for value in BAD_PARAMS]
        for edited in edits:
            braces = " {" + ", ".join(edited) + "}" if edited else ""
            new = head.rstrip() + braces + (f" ; {comment}" if comment else "")
            yield "\n".join(lines[:k] + [new] + lines[k + 1:]) + "\n"


def run_both_ways(text: str, args: tuple) -> None:
    """The toolchain, then a forward run and the adjoint run that reverses it."""
    program = cg.parse_program(text)
    plan = differentiate(program)  # as cfgrad.api builds them
    build_jvp(program)
    tape = execute(plan, [np.asarray(a, p.type.dtype) for a, p in zip(args, program.params)],
                   [StoreAll() for _ in program.loops()])
    tape.pullback([np.ones_like(o) for o in tape.outputs])


#: Arguments the parameter mutants run on: the seed programs' own.
RUN_ARGS = {"params": PARAMS_ARGS, "nested": (1.0, 3),
            **{name: args for name, (_, args) in seeds.SEEDS.items()}}


@pytest.mark.parametrize("name", [n for n in sorted(SOURCES)
                                  if next(parameter_mutants(SOURCES[n]), None) is not None])
def test_bad_parameters_are_accepted_or_a_cfgrad_error(name):
    text = SOURCES[name]
    with np.errstate(all="ignore"):
        run_both_ways(text, RUN_ARGS[name])  # the unmutated source runs whole
    mutants = list(parameter_mutants(text))
    rejected = 0
    for mutant in mutants:
        try:
            with np.errstate(all="ignore"):
                run_both_ways(mutant, RUN_ARGS[name])
        except CfgradError:
            rejected += 1
        except Exception as e:  # noqa: BLE001 - the failure report shows the mutant
            pytest.fail(f"{type(e).__name__}: {e}\n--- mutant of {name} ---\n{mutant}")
    assert rejected > len(mutants) // 2  # nearly every edit breaks the program
