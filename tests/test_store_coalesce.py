"""Read-only stores serve decoded arrays k stored chunks at a time (coalesce_bytes)."""

from __future__ import annotations

import h5py
import numpy as np
import xarray as xr
import zarr
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import _collect_aiterator, sync

import xarray_vhdf5
from xarray_vhdf5 import VersionStore


def _file(path):
    with h5py.File(path, "w") as f:
        vf = xarray_vhdf5.VersionedHDF5File(f)
        with vf.stage_version("v1") as g:
            g.create_dataset(
                "gz", data=np.arange(100.0 * 6).reshape(100, 6), chunks=(10, 3), compression="gzip", fillvalue=-9.0
            )
            g.create_dataset("raw", data=np.arange(100.0), chunks=(10,))  # passes through: not coalesced
        with vf.stage_version("v2") as g:
            g["gz"].resize((130, 6))  # chunks 10..12 along axis 0: only rows 100..129 (fill value)
            g["gz"][100:105, 0:3] = 1.0


def test_coalesced_chunks_read_the_same_values(tmp_path):
    path = tmp_path / "c.h5"
    _file(path)
    for budget in (None, 10 * 3 * 8 * 4, 10**9):
        store = VersionStore(path, version="v2", coalesce_bytes=budget)
        group = zarr.open_group(store, mode="r")
        gz = group["gz"]
        with h5py.File(path, "r") as f:
            want = f["_version_data/versions/v2/gz"][()]
        np.testing.assert_array_equal(gz[...], want)
        expected_rows = {None: 10, 10 * 3 * 8 * 4: 40, 10**9: 130}[budget]
        assert gz.chunks == (expected_rows, 3)
        assert group["raw"].chunks == (10,)  # as stored: its bytes pass through
        with xr.open_dataset(path, engine="vhdf5", version="v2") as engine:
            xr.testing.assert_identical(xr.open_zarr(store).load(), engine.load())


def test_keys_of_coalesced_chunks(tmp_path):
    path = tmp_path / "c.h5"
    _file(path)
    store = VersionStore(path, version="v2", coalesce_bytes=10 * 3 * 8 * 4)  # 4 stored chunks per zarr chunk
    keys = set(sync(_collect_aiterator(store.list_prefix("gz/c/"))))
    # rows 0..129 in groups of 40, 2 columns; stored rows 110..129 are unmapped (never written), so
    # zarr row 3 (stored rows 120..129) has no key and reads as the fill value
    assert keys == {f"gz/c/{i}/{j}" for i in range(3) for j in range(2)}
    assert sync(store.exists("gz/c/2/1")) and not sync(store.exists("gz/c/3/0"))
    assert sync(store.get("gz/c/3/0", default_buffer_prototype())) is None
    got = sync(store.get("gz/c/2/0", default_buffer_prototype()))
    chunk = np.frombuffer(got.to_bytes(), "<f8").reshape(40, 3)
    with h5py.File(path, "r") as f:
        np.testing.assert_array_equal(chunk, f["_version_data/versions/v2/gz"][80:120, 0:3])
    assert (chunk[20:25] == 1.0).all() and (chunk[25:] == -9.0).all()


def test_dask_tasks_follow_the_coalesced_chunks(tmp_path):
    path = tmp_path / "c.h5"
    _file(path)
    with xr.open_zarr(VersionStore(path, version="v1")) as ds:
        assert ds["gz"].chunks == ((100,), (3, 3))  # one task per column of stored chunks, not 20
    with xr.open_zarr(VersionStore(path, version="v1", coalesce_bytes=None)) as ds:
        assert ds["gz"].chunks == ((10,) * 10, (3, 3))
