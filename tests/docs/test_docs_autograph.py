"""docs/autograph.md stays true to the code.

Every runnable example (a ```python block followed directly by a ```text block, as in
docs/api.md) prints exactly the output the page shows; `run_example` registers each
example's source with `linecache`, as a file's would be, since conversion reads the
source. The page's promises beyond its examples are checked here against plain Python
or closed forms, never against numbers cfgrad printed.

`python tests/docs/test_docs_autograph.py --update` reruns every runnable example and rewrites
its text block; review the diff before keeping it.
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from test_docs_api import normalized, run_example, runnable_examples, update_outputs

import cfgrad as cg
import cfgrad.numpy as cnp
from cfgrad.convert import converted_source

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "autograph.md"
DOC = PAGE.read_text(encoding="utf-8")
EXAMPLES = runnable_examples(DOC)


def test_the_page_has_its_examples() -> None:
    printed = "\n".join(out.group(2) for _, _, out in EXAMPLES)
    assert len(EXAMPLES) >= 8
    for promised in ("assigned on one branch only", "changes the shape or dtype of",
                     "iterates over a Python list", "inside the `try` at", "region loop#0 while",
                     "UnboundLocalError", "cfg__ops.if_stmt"):
        assert promised in printed, promised


@pytest.mark.parametrize(("line", "code", "out"), EXAMPLES,
                         ids=[f"autograph.md:{line}" for line, _, _ in EXAMPLES])
def test_example_prints_documented_output(line: int, code: re.Match, out: re.Match) -> None:
    assert normalized(run_example(code.group(2))) == normalized(out.group(2)), (
        f"the example at docs/autograph.md:{line} printed something else than documented "
        "(after a deliberate change, run `python tests/docs/test_docs_autograph.py --update`)")


# -------------------------------------------------------------------------------------
# Promises of the page beyond its examples
# -------------------------------------------------------------------------------------


def cube_root(a):
    x = a / 2.0 if a > 1.0 else a
    while abs(x * x * x - a) > 1e-12:
        x = x - (x * x * x - a) / (3.0 * x * x)
    return x


def test_gradient_of_plain_python_newton_is_the_closed_form() -> None:
    for a in (0.5, 8.0, 27.0):
        assert math.isclose(cg.grad(cube_root)(a), 1 / (3 * a ** (2 / 3)), rel_tol=1e-9)


def test_autograph_behaves_as_the_function_on_concrete_values() -> None:
    converted = cg.autograph(cube_root)
    assert converted is cg.autograph(cube_root)
    for a in (0.5, 8.0, 27.0):
        assert converted(a) == cube_root(a)


def checked_sqrt(x):
    assert x >= 0, "x must be >= 0"
    return cnp.sqrt(x)


def test_assert_on_a_traced_value_is_a_run_time_check() -> None:
    """The page: not dropped, raised by the call that runs the program. Both calls of
    `df` share one Program (one signature), so the check is made when it runs."""
    df = cg.grad(checked_sqrt)
    assert df(4.0) == 0.25
    with pytest.raises(AssertionError, match="^x must be >= 0"):
        df(-1.0)
    with pytest.raises(AssertionError, match="^x must be >= 0"):
        cg.vjp(checked_sqrt, -1.0)


def bare_assert(x):
    assert x > 0
    return x


def test_assert_without_message_names_the_line() -> None:
    line = bare_assert.__code__.co_firstlineno + 1
    with pytest.raises(AssertionError, match=rf"assertion failed at .*test_docs_autograph"
                       rf"\.py:{line}"):
        cg.grad(bare_assert)(-1.0)


def test_conversion_error_is_a_lowering_error() -> None:
    assert issubclass(cg.ConversionError, cg.LoweringError)


def grows_in_a_concrete_loop(x, widths):
    out = []
    for w in widths:
        out.append(cnp.sin(w * x))
    return sum(out)


def test_a_concrete_loop_is_unrolled_and_may_grow_a_list() -> None:
    program = cg.lower(grows_in_a_concrete_loop, 1.0, (1.0, 2.0, 3.0), static_argnums=1)
    assert "region" not in program.text()
    expected = sum(w * math.cos(w * 0.7) for w in (1.0, 2.0, 3.0))
    assert math.isclose(cg.grad(grows_in_a_concrete_loop)(0.7, (1.0, 2.0, 3.0)), expected)


def test_converted_loop_uses_the_transformations_strategy() -> None:
    from cfgrad.checkpoint import Binomial

    def power_sum(x, n):
        s = 0.0
        for i in range(n):
            s = s + x ** i
        return s

    _, pullback = cg.vjp(power_sum, 0.5, 20, checkpoint=Binomial(3))
    pullback(1.0)
    assert str(pullback.stats.loops[0].strategy) == "Binomial(3)"
    assert pullback.stats.loops[0].peak_snapshots <= 3


def test_cli_prints_the_converted_source(capsys: pytest.CaptureFixture) -> None:
    """The page's `cfgrad inspect ... --converted`: the same text as converted_source."""
    from cfgrad import cli

    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import quickstart
    finally:
        sys.path.remove(str(ROOT / "examples"))
    status = cli.main(["inspect", str(ROOT / "examples" / "quickstart.py") + ":f",
                       "--args", "2.0, 1.0", "--converted"])
    assert status in (0, None)
    assert capsys.readouterr().out.strip() == converted_source(quickstart.f).strip()
    assert "cfgrad inspect examples/quickstart.py:f --args '2.0, 1.0' --converted" in DOC


CALLS: list[int] = []


def counts_its_calls(x):
    CALLS.append(1)  # a module-level list, only mutated here
    return x * x


def test_mutating_a_global_list() -> None:
    """A global only mutated in a function stays the global (it once became a local
    left Undefined: UnboundLocalError)."""
    before = len(CALLS)
    assert cg.grad(counts_its_calls)(3.0) == 6.0
    assert len(CALLS) == before + 1


# -------------------------------------------------------------------------------------
# Behaviour the page promises that the converter does not deliver yet (lead: converter)
# -------------------------------------------------------------------------------------


def with_a_nested_generator(x):
    def items():
        yield x
    if x > 0:
        return sum(items())
    return -x


def test_nested_generator_does_not_stop_conversion() -> None:
    assert cg.grad(with_a_nested_generator)(2.0) == 1.0


def relu(x):
    if x > 0:
        return x
    return 0.0 * x


def test_lambda_is_converted_and_converts_what_it_calls() -> None:
    assert cg.grad(lambda x: relu(x) * 2)(1.0) == 2.0


def sum_rows(x):
    total = 0.0
    for row in x:
        total = total + row
    return total


def test_python_number_loop_variable_takes_the_bodys_dtype() -> None:
    x = np.ones((3, 2), np.float32)
    assert sum_rows(x).dtype == np.float32  # plain Python (numpy)
    assert cg.lower(sum_rows, x).text().splitlines()[0].endswith("-> (f32[2])")


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        sys.exit("usage: python tests/docs/test_docs_autograph.py --update")
    print(f"{update_outputs(PAGE)} example outputs rewritten in {PAGE}")
