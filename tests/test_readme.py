"""The README is what a newcomer runs first: its commands, its example and the values its
comments promise must stay true."""

from __future__ import annotations

import contextlib
import io
import linecache
import math
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def fenced(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, re.S)


def test_ci_runs_exactly_the_readme_test_command() -> None:
    quickstart = fenced("bash")[0]
    commands = [line for line in quickstart.splitlines() if line and not line.startswith("#")]
    assert len(commands) == 2, commands  # install + example, install + tests
    ci = (ROOT / ".ci" / "run").read_text()
    ci_commands = [line for line in ci.splitlines()
                   if line.strip() and not line.startswith(("#", "set ", "cd "))]
    assert ci_commands == [commands[1]], (ci_commands, commands[1])


def run(code: str, namespace: dict) -> None:
    """Run README code as the file `readme.py`, its source registered with `linecache` as
    a file's would be: cfgrad reads the source to convert Python control flow."""
    linecache.cache["readme.py"] = (len(code), None, code.splitlines(True), "readme.py")
    exec(compile(code, "readme.py", "exec"), namespace)  # noqa: S102 - the README's own code


def test_first_look_prints_what_its_comments_say() -> None:
    code = fenced("python")[0]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        run(code, {})
    printed = out.getvalue().splitlines()
    promised = [m.group(1).strip() for line in code.splitlines()
                if line.startswith("print(") and (m := re.search(r"#\s+([-\d\[(]\S*)", line))]
    assert printed[: len(promised)] == promised
    # the excerpt of the program text is made of lines the program really prints
    excerpt = fenced("text")[0]
    program = set(printed[len(promised):])
    for line in excerpt.splitlines():
        if line != "...":
            assert line in program, line


def test_explicit_form_is_the_same_function() -> None:
    """The README's second example, cg.cond + cg.while_loop, computes the first one's
    value and gradient (both against the closed form 1 / (3 a^(2/3)))."""
    namespace: dict = {}
    run(fenced("python")[0].split("print(")[0] + fenced("python")[1], namespace)
    cg = namespace["cg"]
    for a in (0.5, 8.0, 27.0):
        for f in (namespace["cube_root"], namespace["cube_root_explicit"]):
            assert math.isclose(f(a), a ** (1 / 3), rel_tol=1e-12)
            assert math.isclose(cg.grad(f)(a), 1 / (3 * a ** (2 / 3)), rel_tol=1e-9)
