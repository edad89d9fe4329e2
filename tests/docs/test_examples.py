"""Every example runs as a user would run it, quickly, and prints the right numbers.

Each script in examples/ runs in a subprocess with this interpreter (at the small sizes of
SMALL_ARGS where it has them) and must exit 0; its printed values are checked against values
derived independently here (by hand or from closed forms). No test here times a script: a
loaded machine may take several times as long as an idle one, so the only limit is a hang
guard far beyond any normal run.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
import textwrap
from functools import cache
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
HANG_GUARD = 300.0  # seconds: a script still running then is stuck, not slow
SCRIPTS = sorted(p.name for p in EXAMPLES.glob("*.py"))
NUMBER = r"(-?\d+\.\d+(?:e[-+]\d+)?)"
HEAT_N, HEAT_STEPS = 2000, 60
SMALL_ARGS = {"benchmark.py": ["--quick"], "ode.py": ["--quick"], "realistic.py": ["--quick"],
              "fresh_programs.py": ["--quick"],
              "heat.py": ["--n", str(HEAT_N), "--steps", str(HEAT_STEPS)],
              # Online(10) still re-runs the body at four levels (its own bit-for-bit check)
              "online_overhead.py": ["--steps", "2000"]}


def run_script(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True,
                          timeout=HANG_GUARD, cwd=EXAMPLES.parent)


@cache
def output(name: str) -> str:
    """The stdout of one example; a failure shows its stderr."""
    argv = [str(EXAMPLES / name), *SMALL_ARGS.get(name, [])]
    proc = run_script(*argv)
    assert proc.returncode == 0, f"{name} exited {proc.returncode}:\n{proc.stderr}"
    return proc.stdout


def test_the_expected_examples_exist():
    assert {"quickstart.py", "seeds.py", "newton.py", "rnn.py", "benchmark.py", "heat.py",
            "ode.py"} <= set(SCRIPTS)


@pytest.mark.parametrize("name", SCRIPTS)
def test_example_runs(name):
    assert output(name).strip()


def test_example_args_name_module_level_functions_that_lower():
    """The contract a CLI relies on (`cfgrad inspect examples/seeds.py:fn`): every file's
    `example_args()` names module-level functions, and each lowers at its arguments."""
    script = textwrap.dedent("""
        import importlib.util, sys
        from pathlib import Path
        import cfgrad as cg
        for path in sys.argv[1:]:
            spec = importlib.util.spec_from_file_location("example_" + Path(path).stem, path)
            module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            cases = module.example_args()
            assert cases, path
            for name, args in cases.items():
                program = cg.lower(getattr(module, name), *args)
                print(path, name, len(program.blocks))
    """)
    paths = [str(EXAMPLES / name) for name in SCRIPTS]
    proc = run_script("-c", script, *paths)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) >= len(SCRIPTS)


# ---------------------------------------------------------------------------------
# seeds.py: the values in the issue, each derived by hand in the example's docstring
# ---------------------------------------------------------------------------------


@pytest.mark.parametrize("expected", [
    "y = 45.0   grad (x, z, k, g) = (11.0, 8.0, 4.0, 1.0)",  # c*z + k, c*x, x, 1
    "y = 4.0   grad x = 4.0",  # (1 - x)^2 and 2(x - 1) at 3
    "grad = [1.3633, 0.1912]",
    "at (1.0, 2.0): result = 6.0   grad (a, b) = (2.0, 2.0)",
    "at (3.0, 2.0): result = 2.0   grad (a, b) = (2.0, -2.0)",
    "s = 27.0   grad (x, s) = (38.0, 16.0)   trips = [4]",  # x^4+x^2+2x+3, 4x^3+2x+2, x^4
])
def test_seed_values(expected):
    assert expected in output("seeds.py")


def test_seed_log_sin_unrounded():
    """[sin(x1)/x0, sin(x1)/x1 + log(x0 x1) cos(x1)] at [0.5, 0.75], from the formula."""
    x0, x1 = 0.5, 0.75
    exact = (math.sin(x1) / x0, math.sin(x1) / x1 + math.log(x0 * x1) * math.cos(x1))
    m = re.search(rf"unrounded \({NUMBER}, {NUMBER}\)", output("seeds.py"))
    assert m, output("seeds.py")
    for got, want in zip(map(float, m.groups()), exact):
        assert got == pytest.approx(want, rel=1e-12)


# ---------------------------------------------------------------------------------
# quickstart.py
# ---------------------------------------------------------------------------------


def quickstart_rows() -> dict[tuple[str, str], tuple[float, float]]:
    """(point, 'df/da' | 'df/db') -> (cfgrad, finite difference) from the printed tables."""
    rows, point = {}, None
    for line in output("quickstart.py").splitlines():
        m = re.match(r"f\((.*?)\) = ", line)
        if m:
            point = m.group(1)
        m = re.match(rf"\s+(df/d[ab])\s+{NUMBER}\s+{NUMBER}\s+", line)
        if m:
            rows[(point, m.group(1))] = (float(m.group(2)), float(m.group(3)))
    return rows


def test_quickstart_gradient_matches_closed_form_and_finite_differences():
    """f = (sqrt(a) - b)^2 when sqrt(a) > b, else sin(sqrt(a) b)."""
    y2, y10 = math.sqrt(2.0), math.sqrt(10.0)
    exact = {
        ("2.0, 1.0", "df/da"): (y2 - 1.0) / y2,
        ("2.0, 1.0", "df/db"): -2.0 * (y2 - 1.0),
        ("10.0, 5.0", "df/da"): math.cos(5.0 * y10) * 5.0 / (2.0 * y10),
        ("10.0, 5.0", "df/db"): math.cos(5.0 * y10) * y10,
    }
    rows = quickstart_rows()
    assert set(rows) == set(exact)
    for key, (grad, fd) in rows.items():
        assert grad == pytest.approx(exact[key], rel=1e-10, abs=1e-12), key
        assert fd == pytest.approx(exact[key], rel=1e-7, abs=1e-9), key


def test_quickstart_prints_trip_counts_value_and_both_programs():
    text = output("quickstart.py")
    # Newton from y0 = a: the trip count depends on the data
    assert "f(2.0, 1.0) = 0.171572875254   (Newton iterations: 5)" in text  # (sqrt2 - 1)^2
    assert re.search(r"f\(10\.0, 5\.0\) = .*\(Newton iterations: \d+\)", text)
    for needle in ("program f(%a: f64[], %b: f64[]) -> (f64[])", "program f.adjoint(",
                   "Phi", "Cond", "TripPop", "LogPop"):
        assert needle in text, needle


# ---------------------------------------------------------------------------------
# newton.py and rnn.py
# ---------------------------------------------------------------------------------


def test_newton_gradients_match_the_cube_root_derivative():
    rows = re.findall(rf"^\s*(\d+(?:\.\d+)?)\s+{NUMBER}\s+(\d+)\s+(\S+)\s+\S+\s+\S+$",
                      output("newton.py"), flags=re.MULTILINE)
    assert len(rows) >= 4
    for a, root, iters, grad in rows:
        a = float(a)
        assert float(root) == pytest.approx(a ** (1 / 3), rel=1e-11)
        assert float(grad) == pytest.approx(1 / (3 * a ** (2 / 3)), rel=1e-10)
        assert int(iters) > 0
    assert len({iters for _, _, iters, _ in rows}) > 1  # the trip count depends on a
    assert "plain-Python loop and cg.while_loop give the same gradients: True" in output(
        "newton.py")


def test_rnn_stops_on_the_norm_and_matches_finite_differences():
    text = output("rnn.py")
    m = re.search(r"steps run: (\d+) of (\d+)", text)
    assert m and 0 < int(m.group(1)) < int(m.group(2)), text  # stopped before the end
    m = re.search(rf"cfgrad {NUMBER}\s+finite diff {NUMBER}", text)
    assert m, text
    grad, fd = map(float, m.groups())
    assert abs(grad) > 1e-3
    assert grad == pytest.approx(fd, rel=1e-6)


def test_benchmark_quick_prints_both_tables():
    text = output("benchmark.py")
    for needle in ("Forward and gradient time", "cfgrad ÷ numpy", "Newton cube root",
                   "tanh RNN", "cond with matmuls", "Per-node interpreter overhead"):
        assert needle in text, needle
    for lib in ("torch", "autograd", "jax"):  # a column, or a line saying it is missing
        assert lib in text


def revolve_total(steps: int, snapshots: int) -> int:
    """Griewank & Walther's minimal body evaluations T + t(T, s), from the closed form:
    r = min{r : C(s + r, s) >= T}, t = r T - C(s + r, s + 1)."""
    r = 0
    while math.comb(snapshots + r, snapshots) < steps:
        r += 1
    return steps + r * steps - math.comb(snapshots + r, snapshots + 1)


def test_revolve_total_by_hand():
    """The closed form against cases counted by hand. One snapshot: step T-1 is taped by
    the sweep of T steps, then step t is recomputed from the start with t + 1 evaluations,
    in all T + (T-1) + … + 1. With s >= T every state is stored by the sweep and each of
    the T - 1 other steps is re-run once: 2T - 1."""
    assert [revolve_total(t, 1) for t in (1, 2, 3, 4)] == [1, 3, 6, 10]
    assert [revolve_total(t, 5) for t in (1, 2, 3, 5)] == [1, 3, 5, 9]


def test_benchmark_quick_heat_workload():
    """Every strategy's row, with the revolve optimum for Binomial(10) and the every-k
    recomputation counts derived here."""
    text = output("benchmark.py")
    m = re.search(r"n = ([\d,]+) points, T = (\d+) steps", text)
    assert m, text
    steps = int(m.group(2))
    rows = dict(re.findall(r"│ ((?:cfgrad|numpy) [^│]*?)\s*│[^\n]*?│\s*(\d+ \+ \d+)\s*│", text))
    assert set(rows) == {"cfgrad StoreAll", "cfgrad Binomial(10)", "cfgrad EveryK(50)",
                         "cfgrad Online(10)", "numpy by hand, all states",
                         "numpy by hand, every 50"}, rows
    evals = {k: tuple(map(int, v.split(" + "))) for k, v in rows.items()}
    assert evals["cfgrad StoreAll"] == evals["numpy by hand, all states"] == (steps, 0)
    assert sum(evals["cfgrad Binomial(10)"]) == revolve_total(steps, 10)
    assert sum(evals["cfgrad Online(10)"]) >= revolve_total(steps, 10)
    # T < 50: one segment, recomputed from the initial state up to step T-2 (cfgrad's
    # EveryK, the last step kept taped from the sweep) or T-1 (by hand, storing states)
    assert steps < 50
    assert evals["cfgrad EveryK(50)"] == (steps, steps - 1)
    assert evals["numpy by hand, every 50"] == (steps, steps - 1)
    assert "heat workload" in text.lower() and "bitwise identical" in text


# ---------------------------------------------------------------------------------
# heat.py and ode.py
# ---------------------------------------------------------------------------------


def heat_rows() -> dict[str, dict]:
    rows = {}
    for m in re.finditer(r"^(StoreAll|Binomial\(10\)|Online\(10\))\s+(fori_loop|while_loop)"
                         r"\s+[\d.]+s\s+[\d.]+s\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s",
                         output("heat.py"),
                         flags=re.MULTILINE):
        name, loop, trips, forward, recomputed, snapshots = m.groups()
        rows[name] = {"loop": loop, "trips": int(trips), "forward": int(forward),
                      "recomputed": int(recomputed), "snapshots": int(snapshots)}
    return rows


def test_heat_runs_each_strategy_with_its_accounting():
    rows = heat_rows()
    assert set(rows) == {"StoreAll", "Binomial(10)", "Online(10)"}, output("heat.py")
    assert rows["Online(10)"]["loop"] == "while_loop"  # the time-bound loop
    for row in rows.values():
        assert row["trips"] == row["forward"] == HEAT_STEPS  # t < t_end stops after T steps
    assert rows["StoreAll"]["recomputed"] == 0 and rows["StoreAll"]["snapshots"] == HEAT_STEPS
    assert HEAT_STEPS + rows["Binomial(10)"]["recomputed"] == revolve_total(HEAT_STEPS, 10)
    assert HEAT_STEPS + rows["Online(10)"]["recomputed"] >= revolve_total(HEAT_STEPS, 10)
    assert rows["Binomial(10)"]["snapshots"] <= 10 and rows["Online(10)"]["snapshots"] <= 10


def test_heat_gradients_identical_and_match_finite_differences():
    text = output("heat.py")
    assert "gradients bitwise identical across strategies: True" in text
    m = re.search(r"cfgrad (-?\d\.\d+e[-+]\d+)\s+finite diff (-?\d\.\d+e[-+]\d+)", text)
    assert m, text
    grad, fd = map(float, m.groups())
    assert abs(grad) > 1e-6
    assert grad == pytest.approx(fd, rel=1e-6)
    m = re.search(r"StoreAll / Binomial\(10\): ([\d.]+)x by stats peak_bytes", text)
    assert m and float(m.group(1)) > 1.0, text  # at full size it is over 50x; here T = 60


def ode_output() -> dict[str, str]:
    text = output("ode.py")
    keys = ("true parameters", "initial guess", "fitted parameters", "loss", "last solve",
            "adaptive loop")
    lines = {}
    for line in text.splitlines():
        for key in keys:
            if line.startswith(key):
                lines[key] = line
    assert set(lines) == set(keys), text
    return lines


def test_ode_fit_lowers_the_loss_and_counts_the_steps():
    lines = ode_output()
    m = re.search(r"first (\S+)\s+last (\S+)", lines["loss"])
    first, last = map(float, m.groups())
    assert last < first
    m = re.search(r"(\d+) accepted and (\d+) rejected steps in (\d+) segments \(trip counts "
                  r"\[([\d, ]+)\]\)", lines["last solve"])
    assert m, lines["last solve"]
    accepted, rejected, segments = map(int, m.groups()[:3])
    trips = [int(x) for x in m.group(4).split(",")]
    # every iteration of the adaptive loop is one trial step, accepted or rejected
    assert len(trips) == segments == 10 and sum(trips) == accepted + rejected
    m = re.search(r"forward (\d+) body evaluations, recomputed (\d+); peak snapshots (\d+)",
                  lines["adaptive loop"])
    forward, recomputed, snapshots = map(int, m.groups())
    assert forward == sum(trips)
    assert sum(revolve_total(t, 8) for t in trips) <= forward + recomputed
    assert snapshots <= 8 * segments


def test_ode_gradient_matches_finite_differences_and_forward_mode():
    """The loss's gradient w.r.t. the four parameters, through the adaptive loops, against
    central differences (check_grads refuses points whose control path moves)."""
    script = textwrap.dedent("""
        import importlib.util, sys
        import cfgrad as cg
        from cfgrad.testing import check_grads
        spec = importlib.util.spec_from_file_location("ode_example", sys.argv[1])
        ode = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(ode)
        data = ode.observations()
        check_grads(lambda p: ode.loss(p, ode.Y0, ode.OBS_TIMES, data)[0], (ode.GUESS,),
                    modes=("rev", "fwd"))
        print("ok")
    """)
    proc = run_script("-c", script, str(EXAMPLES / "ode.py"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


# ---------------------------------------------------------------------------------
# newton_optim.py: Newton-CG with Hessian-vector products through a fori_loop
# ---------------------------------------------------------------------------------


def test_newton_optim_converges_quadratically_to_the_true_parameters():
    out = output("newton_optim.py")
    fitted = re.search(r"fitted \[([^\]]*)\]", out).group(1).split()
    assert [float(v) for v in fitted] == pytest.approx([4.0, 0.3, 1.0, 0.0], abs=1e-9)
    losses = [float(v) for v in re.findall(r"^\s+\d+\s+(\d\.\d+e[-+]\d+)\s", out, re.M)]
    assert losses[0] > 0.1 and losses[-1] < 1e-25 and len(losses) <= 15
    tail = [v for v in losses if v < 1e-3]
    # quadratic convergence: each loss about the square of the one before, in scale
    assert all(b < a ** 1.5 for a, b in zip(tail, tail[1:]) if a < 1e-4)
    assert "equals H assembled column by column: True" in out
    assert re.search(r"time of one H v / time of one gradient: \d+\.\d", out)


# ---------------------------------------------------------------------------------
# implicit_euler.py: Newton's method with a linear solve per iteration, in every step
# ---------------------------------------------------------------------------------


def implicit_euler_reference(mu: float, steps: int = 100, h: float = 0.05) -> float:
    """x(T) of implicit Euler on Van der Pol from (2, 0), each step's equation solved to
    machine precision by Newton with Cramer's rule: independent of the example's code."""
    x, v = 2.0, 0.0
    for _ in range(steps):
        zx, zv = x, v
        for _ in range(100):
            gx = zx - x - h * zv
            gv = zv - v - h * (mu * (1 - zx * zx) * zv - zx)
            a, b = 1.0, -h
            c, d = -h * (-2 * mu * zx * zv - 1), 1 - h * mu * (1 - zx * zx)
            det = a * d - b * c
            dx, dv = (-gx * d + b * gv) / det, (-gv * a + c * gx) / det
            zx, zv = zx + dx, zv + dv
            if max(abs(dx), abs(dv)) < 1e-15:
                break
        x, v = zx, zv
    return x


def test_implicit_euler_gradient_matches_finite_differences_of_an_independent_solver():
    out = output("implicit_euler.py")
    value = float(re.search(rf"x\(T\) at mu = 5.0: +{NUMBER}", out).group(1))
    slope = float(re.search(rf"dx\(T\)/dmu, cfgrad: +{NUMBER}", out).group(1))
    central = float(re.search(rf"dx\(T\)/dmu, central diff: +{NUMBER}", out).group(1))
    eps = 1e-6
    expected = (implicit_euler_reference(5.0 + eps)
                - implicit_euler_reference(5.0 - eps)) / (2 * eps)
    assert value == pytest.approx(implicit_euler_reference(5.0), abs=1e-9)
    assert slope == pytest.approx(expected, rel=1e-5)
    assert central == pytest.approx(expected, rel=1e-5)
    trips = re.search(r"min (\d+), max (\d+), total (\d+) over 100 steps", out)
    low, high, total = map(int, trips.groups())
    assert 1 <= low <= high <= 50 and 100 * low <= total <= 100 * high


def test_fresh_programs_gradients_match_central_differences():
    """Each of the eight programs, written as a user writes them, is differentiated to the
    accuracy of a central difference (relative, over the entries the quick run checks)."""
    rows = re.findall(rf"^(\w+) +{NUMBER}$", output("fresh_programs.py"), re.MULTILINE)
    assert [name for name, _ in rows] == [
        "levenberg_marquardt", "value_iteration", "newton_line_search", "adaptive_simpson",
        "kalman_with_gaps", "pendulum_until_event", "soft_kmeans", "hessian_power_iteration"]
    assert all(float(error) < 1e-6 for _, error in rows), rows
