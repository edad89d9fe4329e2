"""The code base stays ruff-clean: run as part of the test suite so CI enforces it."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_ruff_clean() -> None:
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.fail("ruff is not installed: install the test extras (pip install -e '.[test]')")
    result = subprocess.run([ruff, "check", "cfgrad", "tests", "examples"], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_package_imports_without_test_dependencies() -> None:
    """Importing cfgrad loads none of the test dependencies (pytest, hypothesis)."""
    code = ("import sys, cfgrad, cfgrad.numpy; "
            "bad = [m for m in ('pytest', 'hypothesis') if m in sys.modules]; "
            "sys.exit(1 if bad else 0)")
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT).returncode == 0
