"""Drawn Datasets through ``to_zarr(VersionStore)`` + ``commit``: every reader agrees.

The oracle is the same ``to_zarr`` into zarr's own ``MemoryStore``, read back with
``xr.open_zarr``; the committed version is then read through ``xr.open_zarr`` of a
read-only ``VersionStore``, ``engine="vhdf5"``, ``engine="h5netcdf"`` on the version's
group (a netCDF-4 group: what netCDF tools read) and versioned-hdf5 2.6 (raw points).
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import xarray as xr
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xarray_vhdf5 import VersionStore
from xarray_vhdf5.testing.strategies import datasets, numeric_dtypes


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    drawn=datasets(max_points=120, min_first_side=1, dtype=numeric_dtypes(), fill_value=False, chunk_key="chunks"),
    extra=st.integers(1, 3),
)
def test_to_zarr_commit_round_trips(tmp_path_factory, drawn, extra):
    ds, encoding = drawn
    path = tmp_path_factory.mktemp("rt") / "rt.h5"
    store = VersionStore(path, read_only=False)
    ds.to_zarr(store, mode="w", encoding=encoding)
    store.commit("v1")
    oracle_store = zarr.storage.MemoryStore()
    ds.to_zarr(oracle_store, mode="w", encoding=encoding, consolidated=False)
    # a second version: one more step along the first variable's first dimension
    first = next(iter(ds.data_vars))
    dim = ds[first].dims[0]
    more = ds[[v for v in ds.data_vars if dim in ds[v].dims]].isel({dim: slice(0, extra)})
    more = more.drop_vars(list(more.coords))
    more.to_zarr(store, mode="a", append_dim=dim)
    store.commit("v2")
    more.to_zarr(oracle_store, mode="a", append_dim=dim, consolidated=False)

    expected = xr.open_zarr(oracle_store, consolidated=False).load()
    with xr.open_dataset(path, engine="vhdf5") as engine:
        xr.testing.assert_equal(engine.load(), expected)
        assert engine.attrs["title"] == "drawn" and engine[first].attrs["units"] == ds[first].attrs["units"]
    with xr.open_zarr(VersionStore(path, version="v2")) as zr:
        xr.testing.assert_equal(zr.load(), expected)
    with xr.open_dataset(path, engine="h5netcdf", group="/_version_data/versions/v2", phony_dims="access") as nc:
        for name in ds.data_vars:
            np.testing.assert_array_equal(nc[name].values, expected[name].values)
    versioned_hdf5 = pytest.importorskip("versioned_hdf5")
    with h5py.File(path, "r") as f:
        vf = versioned_hdf5.VersionedHDF5File(f)
        for name in ds.data_vars:
            np.testing.assert_array_equal(vf["v2"][name][()], expected[name].values)
            np.testing.assert_array_equal(vf["v1"][name][()], ds[name].values)
