"""The version log (``xarray_vhdf5._versions.history``): changed datasets, stored chunks and their bytes."""

from __future__ import annotations

import datetime as dt

import h5py
import numpy as np
import xarray as xr

import xarray_vhdf5 as xv
from xarray_vhdf5._versions.history import version_log
from xarray_vhdf5._versions.states import changed_attrs, compared_attrs


def _log(path) -> dict:
    with h5py.File(path, "r") as f:
        return {e.name: e for e in version_log(f)}


def test_new_chunks_are_counted_once_by_the_first_version_that_maps_them(tmp_path):
    path = tmp_path / "h.h5"
    with h5py.File(path, "w") as f:
        vf = xv.VersionedHDF5File(f)
        with vf.stage_version("v1") as g:
            g.create_dataset("x", data=np.arange(6, dtype="i2"), chunks=(4,))  # 2 chunks, the last padded
        with vf.stage_version("v2") as g:
            g["x"][0] = 7
        with vf.stage_version("v3", prev_version="v1") as g:
            g["x"][0] = 7  # the chunk v2 stored
        with vf.stage_version("v4") as g:
            g["x"] = vf["v1"]["x"]  # v1's chunks again
        raw = f["_version_data/x/raw_data"]
        sizes = [raw.id.get_chunk_info(i).size for i in range(raw.id.get_num_chunks())]
    log = _log(path)
    assert sizes == [8, 8, 8]  # uncompressed chunks: 4 points of 2 bytes
    got = {n: (e.new_chunks, e.new_bytes, e.changed, e.parent) for n, e in log.items()}
    assert got == {
        "v1": (2, 16, ("x",), "__first_version__"),
        "v2": (1, 8, ("x",), "v1"),
        "v3": (0, 0, ("x",), "v1"),
        "v4": (0, 0, ("x",), "v3"),
    }
    assert [e.new_bytes_on_disk for e in log.values()] == [16, 8, 0, 0]
    assert log["v4"].datasets == ("x",)


def test_chunk_bytes_on_disk_are_the_compressed_sizes(tmp_path):
    path = tmp_path / "z.h5"
    with h5py.File(path, "w") as f:
        vf = xv.VersionedHDF5File(f)
        with vf.stage_version("v1") as g:
            g.create_dataset("z", data=np.zeros((100, 100)) + 1.0, chunks=(50, 100), compression="gzip")
        raw = f["_version_data/z/raw_data"]
        size = raw.id.get_chunk_info(0).size
        assert raw.id.get_num_chunks() == 1  # both chunks are equal: stored once
    entry = _log(path)["v1"]
    assert (entry.new_chunks, entry.new_bytes, entry.new_bytes_on_disk) == (1, 50 * 100 * 8, size)
    assert size < 1000


def test_compared_attrs_leave_out_the_format_and_netcdf_bookkeeping(tmp_path):
    path = tmp_path / "x.h5"
    ds = xr.Dataset({"t": (("time", "lat"), np.zeros((2, 3)), {"units": "K"})}, coords={"lat": [1.0, 2, 3]})
    ds.vhdf5.commit("v1", path=path)
    with h5py.File(path, "r") as f:
        version = f["_version_data/versions/v1"]
        assert {"DIMENSION_LIST", "raw_data", "chunks"} <= set(version["t"].attrs)
        assert {"REFERENCE_LIST", "CLASS", "NAME"} <= set(version["lat"].attrs)
        t, lat = compared_attrs(version["t"]), compared_attrs(version["lat"])
    assert sorted(t) == ["_ARRAY_DIMENSIONS", "_FillValue", "units"]
    assert t["units"] == "K" and list(t["_ARRAY_DIMENSIONS"]) == ["time", "lat"]
    assert sorted(lat) == ["_ARRAY_DIMENSIONS", "_FillValue"]


def test_changed_attrs():
    a = {"units": "K", "scale": np.float32(0.5), "flags": np.array([1.0, np.nan]), "gone": 1}
    b = {"units": "K", "scale": np.float64(0.5), "flags": np.array([1.0, np.nan]), "new": "x"}
    assert changed_attrs(a, b) == ["gone", "new"]
    assert changed_attrs({"u": "K"}, {"u": "degK"}) == ["u"]
    assert changed_attrs({"u": "1"}, {"u": 1}) == ["u"]
    assert changed_attrs({"v": np.array([1, 2])}, {"v": np.array([1, 2, 3])}) == ["v"]


def test_renamed_dimension_is_a_change_of_the_variable(tmp_path):
    path = tmp_path / "r.h5"
    ds = xr.Dataset({"t": ("x", np.arange(3.0))})
    ds.vhdf5.commit("v1", path=path)
    ds.rename_dims(x="y").vhdf5.commit("v2", path=path)
    assert _log(path)["v2"].changed == ("t",)


def test_parents_come_first_whatever_the_timestamps(tmp_path):
    """A child given an earlier timestamp than its parent: listed first, but its parent stored the shared chunks."""
    path = tmp_path / "t.h5"
    t0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    with h5py.File(path, "w") as f:
        vf = xv.VersionedHDF5File(f)
        with vf.stage_version("v1", timestamp=t0 + dt.timedelta(hours=5)) as g:
            g.create_dataset("a", data=np.arange(4.0), chunks=(2,))
            g.create_dataset("b", data=np.arange(4.0), chunks=(2,))
        with vf.stage_version("v2", timestamp=t0) as g:
            g["a"][0] = 9
    log = _log(path)
    assert list(log) == ["v2", "v1"]
    assert [(e.name, e.parent, e.changed, e.new_chunks) for e in log.values()] == [
        ("v2", "v1", ("a",), 1),
        ("v1", "__first_version__", ("a", "b"), 4),
    ]
