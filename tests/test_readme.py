"""The README is what a newcomer runs first: its commands, its example and the values its
comments promise must stay true."""

from __future__ import annotations

import contextlib
import io
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


def test_first_look_prints_what_its_comments_say() -> None:
    code = fenced("python")[0]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "readme.py", "exec"), {})  # noqa: S102 - the README's own example
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
