"""Shared fixtures (paths to the NOAA sample files beside the project) and hypothesis profiles.

Hypothesis profiles (``HYPOTHESIS_PROFILE``): ``default`` draws the same examples on
every run (``derandomize``) and has no per-example deadline, so the suite gives the
same answer on a slow or loaded CI machine; ``explore`` draws new random examples each
run (use it with ``-m slow`` to hunt for bugs).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("default", deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("explore", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# Child processes the tests start (``python -c ...``: writers and readers of another
# process) import the installed package, not the source checkout in the working
# folder, whose kernels are not compiled there (Python 3.11's safe path).
os.environ["PYTHONSAFEPATH"] = "1"

NOAA_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "noaa"


@pytest.fixture
def noaa_dir() -> Path:
    if not NOAA_DIR.is_dir():
        pytest.skip(f"NOAA sample data not found at {NOAA_DIR} (it lives in ../shared/data/noaa)")
    return NOAA_DIR
