"""Hypothesis profiles.

The default profile, `default`, is deterministic: the same examples on every run and every
machine, with or without `CI` set, so the README's test command never fails by chance.
`CFGRAD_HYPOTHESIS=long` opts in to a long random search for local bug hunting; a failure
it finds prints a reproduction blob to paste into `@reproduce_failure`.
"""

import os

from hypothesis import HealthCheck, settings

_QUIET = [HealthCheck.too_slow, HealthCheck.data_too_large]

settings.register_profile(
    "default", derandomize=True, max_examples=25, deadline=None, print_blob=True,
    database=None, suppress_health_check=_QUIET)
settings.register_profile(
    "long", max_examples=500, deadline=None, print_blob=True, suppress_health_check=_QUIET)
settings.load_profile(os.environ.get("CFGRAD_HYPOTHESIS", "default"))
