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

#: The NOAA sample files (61 MB, kept out of the repository): ``VHDF5_NOAA_DIR``, else
#: ``../shared/data/noaa`` beside the checkout. ``VHDF5_REQUIRE_NOAA=1`` makes their
#: absence a failure instead of a skip (for a machine that must run them).
NOAA_DIR = Path(os.environ.get("VHDF5_NOAA_DIR") or Path(__file__).resolve().parents[1].parent / "shared/data/noaa")


def _noaa_missing() -> str:
    return (
        f"NOAA sample data MISSING at {NOAA_DIR}: the tests that read the real NOAA files are "
        "skipped (set VHDF5_NOAA_DIR to their folder; VHDF5_REQUIRE_NOAA=1 fails instead)"
    )


def pytest_report_header(config) -> str:
    """Say at the top of every run whether the NOAA files are there (their tests skip otherwise)."""
    return f"NOAA sample data: {NOAA_DIR}" if NOAA_DIR.is_dir() else _noaa_missing()


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """And again at the end, where a skip count alone would hide it."""
    if not NOAA_DIR.is_dir():
        terminalreporter.write_sep("!", _noaa_missing(), yellow=True)


@pytest.fixture
def noaa_dir() -> Path:
    if not NOAA_DIR.is_dir():
        if os.environ.get("VHDF5_REQUIRE_NOAA") == "1":
            pytest.fail(_noaa_missing())
        pytest.skip(_noaa_missing())
    return NOAA_DIR
