"""Committing xarray Datasets: encodings, dedup, errors."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import xarray as xr

import xarray_vhdf5 as xv


def _raw_rows(path, name):
    with h5py.File(path) as f:
        return int(f[f"_version_data/{name}/hash_table"].attrs["largest_index"])


def test_auto_version_names_and_message(tmp_path):
    path = tmp_path / "a.h5"
    ds = xr.Dataset({"x": ("i", np.arange(10.0))})
    assert ds.vhdf5.commit(path=path) == "r1"
    assert ds.vhdf5.commit(path=path, message="again", allow_empty=True) == "r2"
    with h5py.File(path) as f:
        vf = xv.VersionedHDF5File(f)
        assert vf.versions == ["r1", "r2"]
        assert vf["r2"].attrs["_vhdf5_message"] == "again"
        assert "_vhdf5_message" not in vf["r1"].attrs
    with xr.open_dataset(path, engine="vhdf5") as got:
        assert "_vhdf5_message" not in got.attrs


def test_recommitting_same_data_writes_no_chunk(tmp_path):
    path = tmp_path / "a.h5"
    ds = xr.Dataset({"v": (("t", "y"), np.random.default_rng(0).random((8, 50)))})
    ds["v"].encoding["chunks"] = (2, 50)
    ds.vhdf5.commit("a", path=path)
    before = _raw_rows(path, "v")
    rebuilt = xr.concat([ds.isel(t=slice(0, 4)), ds.isel(t=slice(4, None))], dim="t")
    rebuilt.vhdf5.commit("b", path=path, allow_empty=True)
    assert _raw_rows(path, "v") == before == 4
    changed = ds.copy(deep=True)
    changed["v"][7, 0] = -1.0
    changed.vhdf5.commit("c", path=path)
    assert _raw_rows(path, "v") == before + 1


def test_compression_and_fill_value_encoding(tmp_path):
    path = tmp_path / "a.h5"
    data = np.full((4, 100), np.nan, dtype="f4")
    data[0] = 1.0
    ds = xr.Dataset({"v": (("t", "x"), data)})
    ds["v"].encoding.update(
        {"zlib": True, "complevel": 5, "shuffle": True, "_FillValue": np.float32(-999.0), "chunks": (1, 100)}
    )
    ds.vhdf5.commit("a", path=path)
    with h5py.File(path) as f:
        raw = f["_version_data/v/raw_data"]
        assert raw.compression == "gzip" and raw.compression_opts == 5 and raw.shuffle
        assert raw.fillvalue == np.float32(-999.0)
        assert raw.shape[0] == 1  # the three all-missing rows are not stored
    with xr.open_dataset(path, engine="vhdf5") as got:
        xr.testing.assert_identical(got, ds)
        assert got["v"].encoding["compression"] == "gzip"
        assert got["v"].encoding["chunks"] == (1, 100)


def test_strings_bytes_bools_ints_round_trip(tmp_path):
    path = tmp_path / "a.h5"
    ds = xr.Dataset(
        {
            "name": ("i", np.array(["α", "beta", ""], dtype=object)),
            "code": ("i", np.array([b"ab", b"c", b"def"])),
            "ok": ("i", np.array([True, False, True])),
            "n": ("i", np.array([1, -2, 3], dtype="i8")),
            "u": ("i", np.array([1, 2, 3], dtype="u1")),
        }
    )
    ds.vhdf5.commit("a", path=path)
    with xr.open_dataset(path, engine="vhdf5") as got:
        xr.testing.assert_identical(got, ds)
        assert got["ok"].dtype == bool


def test_dask_backed_dataset(tmp_path):
    pytest.importorskip("dask")
    path = tmp_path / "a.h5"
    ds = xr.Dataset({"v": (("t", "x"), np.arange(40.0).reshape(4, 10))}).chunk({"t": 1})
    ds.vhdf5.commit("a", path=path)
    with xr.open_dataset(path, engine="vhdf5") as got:
        xr.testing.assert_identical(got, ds.compute())


def test_variables_removed_in_new_version(tmp_path):
    path = tmp_path / "a.h5"
    ds = xr.Dataset({"a": ("i", np.arange(3)), "b": ("i", np.arange(3))})
    ds.vhdf5.commit("v1", path=path)
    ds[["a"]].vhdf5.commit("v2", path=path)
    with xr.open_dataset(path, engine="vhdf5") as got:
        assert list(got.data_vars) == ["a"]
    with xr.open_dataset(path, engine="vhdf5", version="v1") as got:
        assert sorted(got.data_vars) == ["a", "b"]


def test_errors_leave_history_unchanged(tmp_path):
    path = tmp_path / "a.h5"
    ds = xr.Dataset({"v": ("i", np.arange(5.0))})
    ds.vhdf5.commit("v1", path=path)
    with pytest.raises(xv.VersionExistsError, match="'v1' already exists"):
        ds.vhdf5.commit("v1", path=path)
    wrong = xr.Dataset({"v": ("i", np.arange(5))})  # int64 where float64 was committed
    with pytest.raises(xv.IncompatibleDataError, match="dtype int64 differs from float64"):
        wrong.vhdf5.commit("v2", path=path)
    objs = xr.Dataset({"o": ("i", np.array([1, "a"], dtype=object))})
    with pytest.raises(xv.IncompatibleDataError, match="only str/bytes"):
        objs.vhdf5.commit("v3", path=path)
    with h5py.File(path) as f:
        vf = xv.VersionedHDF5File(f)
        assert vf.versions == ["v1"] and vf.current_version == "v1"
    with xr.open_dataset(path, engine="vhdf5") as got:
        xr.testing.assert_identical(got, ds)
    with pytest.raises(TypeError, match="needs path="):
        ds.vhdf5.commit("v9")


def test_commit_into_plain_hdf5_file_refused(tmp_path):
    plain = tmp_path / "plain.h5"
    with h5py.File(plain, "w") as f:
        f["x"] = np.arange(3)
    with pytest.raises(xv.NotVersionedError):
        xr.Dataset({"v": ("i", np.arange(2))}).vhdf5.commit("v1", path=plain)
    with h5py.File(plain) as f:
        assert list(f) == ["x"]


def test_closed_file_errors(tmp_path):
    path = tmp_path / "a.h5"
    xr.Dataset({"v": ("i", np.arange(5.0))}).vhdf5.commit("v1", path=path)
    f = h5py.File(path)
    vf = xv.VersionedHDF5File(f)
    f.close()
    with pytest.raises(xv.ClosedFileError):
        vf["v1"]
    with pytest.raises(xv.ClosedFileError):
        vf.versions


def test_replacing_a_variable_by_path_keeps_its_stored_encoding(tmp_path):
    """``ds.vhdf5.commit(path=)`` of a Dataset whose variable lost its encoding (arithmetic) stores it as before."""
    path = tmp_path / "a.h5"
    v = xr.Variable("i", np.array([1.0, np.nan, 3.0], "f4"))
    v.encoding = {"_FillValue": np.float32(-1e34)}
    xr.Dataset({"v": v}).vhdf5.commit("v1", path=path)
    with xr.open_dataset(path, engine="vhdf5") as opened:
        new = opened.load()
    new["v"] = new["v"] + 1
    assert "_FillValue" not in new["v"].encoding
    new.vhdf5.commit("v2", path=path)
    with xr.open_dataset(path, engine="vhdf5", version="v2", mask_and_scale=False) as raw:
        np.testing.assert_array_equal(raw["v"].values, np.array([2.0, -1e34, 4.0], "f4"))
        assert raw["v"].attrs["_FillValue"] == np.float32(-1e34)


def test_a_file_that_is_not_hdf5_is_named_and_left_alone(noaa_dir, tmp_path):
    """Committing into, logging or diffing a netCDF-3 file says what it is (libhdf5: 'file signature not found')."""
    path = tmp_path / "coads.cdf"
    path.write_bytes((noaa_dir / "coads_climatology.cdf").read_bytes())
    before = path.read_bytes()
    ds = xr.Dataset({"v": ("i", np.arange(3.0))})
    attempts = {
        "commit": lambda: ds.vhdf5.commit("v1", path=path),
        "log": lambda: xv.xr.version_log_frame(path),
        "diff": lambda: xv.xr.diff_versions(path, "a", "b"),
    }
    for what, attempt in attempts.items():
        with pytest.raises(
            xv.NotHDF5Error, match=r"coads.cdf' is not an HDF5 file \(a netCDF-3 classic file\)"
        ) as info:
            attempt()
        assert isinstance(info.value, OSError) and isinstance(info.value, xv.NotVersionedError), what
    assert path.read_bytes() == before
