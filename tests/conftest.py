"""Shared fixtures: paths to the NOAA sample files beside the project."""

from __future__ import annotations

from pathlib import Path

import pytest

NOAA_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "noaa"


@pytest.fixture
def noaa_dir() -> Path:
    if not NOAA_DIR.is_dir():
        pytest.skip(f"NOAA sample data not found at {NOAA_DIR} (it lives in ../shared/data/noaa)")
    return NOAA_DIR
