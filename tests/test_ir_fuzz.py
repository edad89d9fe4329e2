"""Malformed IR text never crashes the toolchain: mutants of valid programs (lines and
tokens deleted, duplicated, swapped or replaced) either parse, verify, differentiate and
compile, or stop with a `CfgradError` (`ParseError`, `VerifyError`) — never another
exception, and each within a second (a self-loop once made the reverse builder spin).

The mutants come from a fixed seed, so every run tries the same texts."""

from __future__ import annotations

import random
import re
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad.errors import CfgradError
from cfgrad.forward_mode import build_jvp
from cfgrad.interpret import Compiled
from cfgrad.ir import Program

GOLDEN = Path(__file__).parent / "golden"
MUTANTS_PER_SOURCE = 60
# A guard against hangs (a Jmp self-loop once made adjoint() loop forever), not a timing:
# a mutant takes milliseconds, and the guard is generous so a loaded machine never trips it.
HANG_GUARD = 30.0  # seconds per mutant


def nested(x, n):
    """A switch and a fori loop inside a while loop, and a cond inside the fori body."""
    def body(carry):
        i, s = carry
        s = cg.switch(i, [lambda v: v * x, lambda v: cnp.sin(v)], s)
        s = cg.fori_loop(0, i, lambda j, a: cg.cond(a > 0, lambda: a * 0.5, lambda: a - x), s)
        return i + 1, s

    return cg.while_loop(lambda c: c[0] < n, body, (0, x), max_iters=20)[1]


def sources() -> dict[str, str]:
    texts = {p.stem: p.read_text() for p in sorted(GOLDEN.glob("*.txt"))
             if not p.stem.endswith(".adjoint")}
    texts["nested"] = cg.lower(nested, 1.0, 3).text()
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
    program = Program.parse(text)  # parses and verifies
    forward = Compiled(program)
    Compiled(program.adjoint(), forward=forward)
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
