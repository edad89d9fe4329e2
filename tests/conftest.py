"""Hypothesis profiles, a Numba cache of each test process's own, and the import path.

The default profile, `default`, is deterministic: the same examples on every run and every
machine, with or without `CI` set, so the README's test command never fails by chance.
`CFGRAD_HYPOTHESIS=long` opts in to a long random search for local bug hunting; a failure
it finds prints a reproduction blob to paste into `@reproduce_failure`.

The README's test command runs the files in two processes (pytest-xdist, `-n 2 --dist
loadfile`: each file whole in one process, in its own order). Numba's disk cache is not
safe for two processes saving signatures of one function at the same moment (each picks
the first free data file, and the index one saves can name the other's machine code), so
each worker keeps its own cache (`NUMBA_CACHE_DIR`, read when Numba is imported, which
cfgrad does on the first compile, after this file runs).

Test files import the helpers beside this file (`seed_programs`, `solvers`, `threads`,
`forked_python`, `primitive_facts`) and one another's generators by module name, so this
folder and each layer folder are on `sys.path`. pytest (`--import-mode=importlib`) names a
test module by its file name alone, so file names must be unique across the folders.
"""

import os
import sys
from pathlib import Path

from hypothesis import HealthCheck, settings

_QUIET = [HealthCheck.too_slow, HealthCheck.data_too_large]

settings.register_profile(
    "default", derandomize=True, max_examples=25, deadline=None, print_blob=True,
    database=None, suppress_health_check=_QUIET)
settings.register_profile(
    "long", max_examples=500, deadline=None, print_blob=True, suppress_health_check=_QUIET)
settings.load_profile(os.environ.get("CFGRAD_HYPOTHESIS", "default"))

TESTS = Path(__file__).resolve().parent
LAYERS = ("ir", "convert", "primitives", "transforms", "checkpoint", "jit", "tools", "docs")
for _folder in (TESTS, *(TESTS / layer for layer in LAYERS)):
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))

_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if _WORKER:
    _CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cfgrad"
    os.environ["NUMBA_CACHE_DIR"] = str(_CACHE / "numba-tests" / _WORKER)
