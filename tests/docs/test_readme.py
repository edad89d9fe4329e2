"""The README is what a newcomer runs first: its commands, its example and the values its
comments promise must stay true."""

from __future__ import annotations

import contextlib
import io
import linecache
import math
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
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


def test_runtime_dependencies_are_the_projects() -> None:
    """The README's list of runtime dependencies is pyproject's."""
    import tomllib

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.match(r"[A-Za-z0-9_-]+", d).group(0).lower() for d in declared}
    sentence = re.search(r"Runtime dependencies: ([^.]*)\.", README).group(1)
    listed = {w.lower() for w in re.findall(r"\b(numpy|rich|Numba|SciPy|\w+(?=,))\b", sentence)}
    assert listed == names, (sentence, names)


def test_heat_memory_figures_are_what_the_example_measures() -> None:
    """The heat example's figures: StoreAll keeps every state (T arrays of n float64s),
    Binomial(10) its 10 snapshots (a state and the int64 step counter each) and one
    step's array. The law is checked on the
    example's own functions at a small size (pullback.stats' peak_bytes), and the README's
    numbers are the law at the example's full size, as examples/heat.py prints them."""
    import importlib.util

    import numpy as np

    import cfgrad as cg
    from cfgrad.checkpoint import Binomial, StoreAll

    spec = importlib.util.spec_from_file_location("heat", ROOT / "examples" / "heat.py")
    heat = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(heat)
    n, steps = 300, 40
    u0 = heat.initial_state(n)
    peak = {}
    for strategy in (StoreAll(), Binomial(heat.SNAPSHOTS)):
        _, pullback = cg.vjp(heat.final_energy, u0, steps, checkpoint=strategy)
        pullback(1.0)
        peak[type(strategy).__name__] = pullback.stats.loops[0].peak_bytes
    def binomial(state: int) -> int:
        return heat.SNAPSHOTS * (state + np.dtype(np.int64).itemsize) + state

    state = n * np.dtype(np.float64).itemsize
    assert peak == {"StoreAll": steps * state, "Binomial": binomial(state)}
    m = re.search(r"\(([\d ]+) points, (\d+) steps\) `Binomial\(10\)` holds ([\d.]+) MiB.*?"
                  r"`StoreAll\(\)`\s+holds ([\d,.]+) MiB", README, re.S)
    full_n, full_steps = int(m.group(1).replace(" ", "")), int(m.group(2))
    full_state = full_n * np.dtype(np.float64).itemsize
    assert m.group(3) == heat.mib(binomial(full_state)).removesuffix(" MiB")
    assert m.group(4) == heat.mib(full_steps * full_state).removesuffix(" MiB")
