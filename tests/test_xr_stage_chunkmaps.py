"""``stage()`` builds its staged arrays from the commit's stored chunk map (``_versions/chunkmaps.py``).

A version's virtual dataset with many mappings is then not opened (libhdf5
would decode every mapping); the staged values, edits and commits must be
the same as through the mappings.
"""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import xarray_vhdf5  # noqa: F401  (the accessor)
from xarray_vhdf5._versions import edit as edit_module
from xarray_vhdf5._versions.chunkmaps import MIN_CHUNKS

DAYS = MIN_CHUNKS + 6  # one chunk a day: past the size that gets a stored map


def _data() -> np.ndarray:
    return np.random.default_rng(7).normal(size=(DAYS + 1, 4, 5)).astype("f4")


def _day(data: np.ndarray, t: int) -> xr.Dataset:
    ds = xr.Dataset(
        {"sst": (("time", "y", "x"), data[t : t + 1])},
        coords={"time": pd.date_range("2020-01-01", periods=1) + pd.Timedelta(days=t)},
    )
    ds["sst"].encoding["chunks"] = (1, 4, 5)
    return ds


@pytest.fixture(scope="module")
def _daily_file(tmp_path_factory):
    """The history, committed once for the module (3 s); each test gets a copy."""
    data = _data()
    path = tmp_path_factory.mktemp("daily") / "daily.h5"
    _day(data, 0).vhdf5.commit("d0", path=path)
    staged = xr.open_dataset(path, engine="vhdf5").vhdf5.stage()
    for t in range(1, DAYS):
        staged = staged.vhdf5.append(_day(data, t), dim="time")
        staged.vhdf5.commit(f"d{t}")
    staged.close()
    return path, data


@pytest.fixture
def daily(_daily_file, tmp_path):
    source, data = _daily_file
    path = tmp_path / "daily.h5"
    shutil.copyfile(source, path)
    return path, data


def test_stage_uses_the_stored_map_and_commits_the_same(daily, monkeypatch):
    path, data = daily
    opened = []
    real = edit_module.build_slab_indices_and_offsets
    monkeypatch.setattr(
        edit_module, "build_slab_indices_and_offsets", lambda dset, *a: opened.append(dset.name) or real(dset, *a)
    )
    with xr.open_dataset(path, engine="vhdf5") as ds:
        staged = ds.vhdf5.stage()
        assert opened == []  # built from the stored map: the virtual dataset was not opened
        np.testing.assert_array_equal(staged["sst"].values, data[:DAYS])
        staged["sst"][3, 1, 2] = 99.0
        staged = staged.vhdf5.append(_day(data, DAYS), dim="time")
        staged.vhdf5.commit("edit")
        staged.close()
    expected = data.copy()
    expected[3, 1, 2] = 99.0
    with xr.open_dataset(path, engine="vhdf5") as got:
        np.testing.assert_array_equal(got["sst"].values, expected)
    with xr.open_dataset(path, engine="vhdf5", version=f"d{DAYS - 1}") as old:
        np.testing.assert_array_equal(old["sst"].values, data[:DAYS])


def test_an_old_version_stages_from_its_own_map(daily):
    path, data = daily
    with xr.open_dataset(path, engine="vhdf5", version=f"d{DAYS - 3}") as ds:
        staged = ds.vhdf5.stage()
        np.testing.assert_array_equal(staged["sst"][-1].values, data[DAYS - 3])
        staged["sst"][0, 0, 0] = -1.0
        staged.vhdf5.commit("branch", force=True)
        staged.close()
    with xr.open_dataset(path, engine="vhdf5", version="branch") as got:
        expected = data[: DAYS - 2].copy()
        expected[0, 0, 0] = -1.0
        np.testing.assert_array_equal(got["sst"].values, expected)


def test_a_small_version_stages_from_its_virtual_dataset(tmp_path, monkeypatch):
    """Fewer than MIN_CHUNKS chunks: no stored map; the mapping is decoded (the probe above can see it)."""
    data = _data()
    path = tmp_path / "small.h5"
    _day(data, 0).vhdf5.commit("d0", path=path)
    opened = []
    real = edit_module.build_slab_indices_and_offsets
    monkeypatch.setattr(
        edit_module, "build_slab_indices_and_offsets", lambda dset, *a: opened.append(dset.name) or real(dset, *a)
    )
    with xr.open_dataset(path, engine="vhdf5") as ds:
        staged = ds.vhdf5.stage()
        np.testing.assert_array_equal(staged["sst"].values, data[:1])
        staged.close()
    assert opened == ["/_version_data/versions/d0/sst"]
