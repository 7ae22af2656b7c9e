"""Shared test configuration: hypothesis profiles.

The default profile keeps the whole suite within CI's time budget; run the
long fuzzing profile on demand with ``pytest -m fuzz --hypothesis-profile=long``.
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "default",
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,
)
settings.register_profile(
    "long",
    max_examples=3000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

import pytest


@pytest.fixture(autouse=True)
def _scipy_code_restored():
    """Each test starts with SciPy's own code in place.

    SciPy's door leaves its trampolines in place after a gradient until the next
    plain call restores them (tapegrad.interception.uninstall); a test that reads
    functions' ``__code__`` must not see an earlier test's lingering trampolines.
    """
    from tapegrad import interception

    interception.uninstall(now=True)
    yield
