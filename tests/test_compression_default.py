"""The xarray layer's default compression (README, "Compression"): what a new variable gets."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import xarray as xr

import xarray_vhdf5  # noqa: F401  (the accessor)
from xarray_vhdf5.xr._encoding import DEFAULT_COMPRESSION


def _ds() -> xr.Dataset:
    rng = np.random.default_rng(0)
    return xr.Dataset(
        {
            "sst": (("time", "lat"), rng.normal(20, 2, (3, 40)).astype("f4")),
            "flag": (("time",), np.array([1, 0, 1], dtype="i2")),
        },
        coords={"time": np.arange(3), "lat": np.linspace(-80, 80, 40)},
    )


def _filters(path, name):
    with h5py.File(path, "r") as f:
        raw = f[f"_version_data/{name}/raw_data"]
        return raw.compression, raw.compression_opts, raw.shuffle


def test_a_new_numeric_variable_gets_shuffle_and_deflate_1(tmp_path):
    path = tmp_path / "d.h5"
    ds = _ds()
    ds.vhdf5.commit("v1", path=path)
    assert DEFAULT_COMPRESSION == {"compression": "gzip", "compression_opts": 1, "shuffle": True}
    for name in ("sst", "flag", "lat"):
        assert _filters(path, name) == ("gzip", 1, True), name
    with xr.open_dataset(path, engine="vhdf5") as got:
        xr.testing.assert_identical(got.load(), ds)


@pytest.mark.parametrize(
    ("encoding", "want"),
    [
        ({"compression": None}, (None, None, False)),
        ({"zlib": False}, (None, None, False)),
        ({"zlib": True, "complevel": 4}, ("gzip", 4, False)),
        ({"zlib": True, "complevel": 6, "shuffle": True}, ("gzip", 6, True)),
        ({"compression": "lzf"}, ("lzf", None, False)),
    ],
)
def test_encoding_chooses_the_filters(tmp_path, encoding, want):
    path = tmp_path / "d.h5"
    ds = _ds()
    ds["sst"].encoding = dict(encoding)
    ds.vhdf5.commit("v1", path=path)
    assert _filters(path, "sst") == want


def test_an_existing_uncompressed_dataset_keeps_its_filters(tmp_path):
    """A silent encoding yields to the first version's filters: no IncompatibleDataError."""
    path = tmp_path / "d.h5"
    ds = _ds()
    ds["sst"].encoding = {"compression": None}
    ds.vhdf5.commit("v1", path=path)
    fresh = _ds()
    fresh["sst"] = fresh["sst"] + 1  # arithmetic drops the encoding
    fresh.vhdf5.commit("v2", path=path)
    assert _filters(path, "sst") == (None, None, False)
    with xr.open_dataset(path, engine="vhdf5") as got:
        np.testing.assert_array_equal(got["sst"].values, fresh["sst"].values)


def test_a_netcdf_source_keeps_its_own_choice(tmp_path):
    src = tmp_path / "src.nc"
    _ds().to_netcdf(src, engine="h5netcdf")  # uncompressed: the engine reports it in the encoding
    with xr.open_dataset(src, engine="h5netcdf") as ds:
        ds.load().vhdf5.commit("v1", path=tmp_path / "d.h5")
    assert _filters(tmp_path / "d.h5", "sst") == (None, None, False)
