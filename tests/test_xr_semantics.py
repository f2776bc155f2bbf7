"""What a commit from xarray means (issue 18): unchanged variables stored unchanged, CF
``missing_value``, version addressing, unsorted appends and empty commits.

Each test here failed before its fix (see the commit that added it).
"""

from __future__ import annotations

import datetime as dt

import h5py
import numpy as np
import pandas as pd
import pytest
import xarray as xr

from xarray_vhdf5 import VersionedHDF5File
from xarray_vhdf5._versions.history import version_log
from xarray_vhdf5.errors import (
    IncompatibleDataError,
    NothingToCommitError,
    VersionKeyTypeError,
    VersionNotFoundError,
    VHDF5Error,
)

#: Attributes holding object references into the version's own group: rewritten by every commit.
_REFERENCES = {"REFERENCE_LIST", "DIMENSION_LIST"}


def _stored_attrs(path, version: str, name: str) -> dict:
    """Each attribute of a version's dataset as stored: (HDF5 datatype, shape, bytes or values)."""
    out = {}
    with h5py.File(path, "r") as f:
        dset = f[f"_version_data/versions/{version}/{name}"]
        for key in dset.attrs:
            if key in _REFERENCES:
                continue
            aid = h5py.h5a.open(dset.id, key.encode())
            value = np.asarray(dset.attrs[key])
            stored = repr(value.tolist()) if value.dtype.kind == "O" else value.tobytes()
            out[key] = (aid.get_type().dtype.str, aid.shape, stored)
    return out


def _changed(path) -> dict:
    with h5py.File(path, "r") as f:
        return {e.name: e.changed for e in version_log(f)}


# -- 1. an unchanged variable is stored unchanged ------------------------------------------------


def _time_file(tmp_path, dtype):
    """A first version whose time is stored as netCDF files often have it: ``... 00:00:00`` units."""
    path = tmp_path / f"time_{dtype}.h5"
    raw = xr.Dataset(
        {"x": (("time",), np.arange(6.0))},
        coords={
            "time": (
                "time",
                np.arange(6).astype(dtype),
                {"units": "days since 2024-01-01 00:00:00", "calendar": "proleptic_gregorian"},
            )
        },
    )
    raw.vhdf5.commit("v1", path=path)  # decode_times=False data: the attributes go in verbatim
    return path


def _edit_x_staged(path):
    with xr.open_dataset(path, engine="vhdf5") as ds:
        staged = ds.vhdf5.stage()
        staged["x"][0] = 99.0
        staged.vhdf5.commit("v2")


def _edit_x_path(path):
    with xr.open_dataset(path, engine="vhdf5") as ds:
        ds = ds.load()
    ds["x"][0] = 99.0
    ds.vhdf5.commit("v2", path=path)


@pytest.mark.parametrize("dtype", ["int64", "int32", "float64"])
@pytest.mark.parametrize("edit", [_edit_x_staged, _edit_x_path], ids=["stage", "path"])
def test_unchanged_time_is_stored_unchanged(tmp_path, dtype, edit):
    path = _time_file(tmp_path, dtype)
    with xr.open_dataset(path, engine="vhdf5") as ds:
        assert ds.time.encoding["units"] == "days since 2024-01-01 00:00:00"
        assert ds.time.dtype.kind == "M"
    edit(path)
    assert _changed(path)["v2"] == ("x",)  # time is not reported changed
    assert _stored_attrs(path, "v2", "time") == _stored_attrs(path, "v1", "time")
    with xr.open_dataset(path, engine="vhdf5") as ds:
        assert ds.time.encoding["units"] == "days since 2024-01-01 00:00:00"
        assert ds.time.encoding["calendar"] == "proleptic_gregorian"
        assert float(ds.x[0]) == 99.0
        np.testing.assert_array_equal(ds.time.values, pd.date_range("2024-01-01", periods=6).values)


@pytest.mark.parametrize("how", ["stage", "path"])
def test_noop_commit_stores_every_attribute_as_it_was(tmp_path, how):
    path = _time_file(tmp_path, "int64")
    with xr.open_dataset(path, engine="vhdf5") as ds:
        if how == "stage":
            ds.vhdf5.stage().vhdf5.commit("v2", allow_empty=True)
        else:
            ds.load().vhdf5.commit("v2", path=path, allow_empty=True)
    assert _changed(path)["v2"] == ()
    for name in ("time", "x"):
        assert _stored_attrs(path, "v2", name) == _stored_attrs(path, "v1", name), name


def test_appending_keeps_the_stored_time_units(tmp_path):
    path = _time_file(tmp_path, "int64")
    with xr.open_dataset(path, engine="vhdf5") as ds:
        staged = ds.vhdf5.stage()
        more = xr.Dataset({"x": (("time",), [6.0])}, coords={"time": [pd.Timestamp("2024-01-07")]})
        staged.vhdf5.append(more, dim="time").vhdf5.commit("v2")
    assert _stored_attrs(path, "v2", "time")["units"] == _stored_attrs(path, "v1", "time")["units"]
    with xr.open_dataset(path, engine="vhdf5", decode_times=False) as ds:
        assert ds.time.values.tolist() == list(range(7))


# -- 2. CF missing_value without _FillValue ------------------------------------------------------


def _sea_ice(tmp_path, fill_encoding=None):
    """A netCDF-4 file like CCSM sea-ice output: missing_value only, a float and a packed int variable."""
    aice = np.arange(12, dtype="f4").reshape(4, 3)
    aice[1, 1] = 1e30
    hi = np.arange(12, dtype="i2").reshape(4, 3)
    hi[2, 2] = -32767
    raw = xr.Dataset(
        {
            "aice": (("time", "ni"), aice, {"missing_value": np.float32(1e30), "units": "1"}),
            "hi": (
                ("time", "ni"),
                hi,
                {
                    "missing_value": np.int16(-32767),
                    "scale_factor": np.float32(0.01),
                    "add_offset": np.float32(1.0),
                    "units": "m",
                },
            ),
        },
        coords={"time": pd.date_range("2024-01-01", periods=4)},
    )
    nc = tmp_path / "iceh.nc"
    encoding = {"aice": {"_FillValue": None}, "hi": {"_FillValue": None}} if fill_encoding is None else fill_encoding
    raw.to_netcdf(nc, engine="h5netcdf", encoding=encoding)
    with xr.open_dataset(nc, engine="h5netcdf") as src:
        return src.load()


def _expected(src):
    return src["aice"].values.copy(), src["hi"].values.copy()


@pytest.mark.parametrize("source", ["missing_value only", "xarray round trip"])
def test_missing_value_commit_edit_append_reopen(tmp_path, source):
    # "xarray round trip": what xarray's netCDF engines write for such a file (a NaN _FillValue
    # beside missing_value), which xarray itself cannot write again.
    src = _sea_ice(tmp_path, fill_encoding={} if source == "xarray round trip" else None)
    path = tmp_path / "ice.h5"
    src.vhdf5.commit("v1", path=path)
    aice, hi = _expected(src)
    first = {n: _stored_attrs(path, "v1", n) for n in ("aice", "hi")}
    assert "missing_value" in first["aice"] and "missing_value" in first["hi"]
    if source == "missing_value only":
        assert "_FillValue" not in first["aice"] and "_FillValue" not in first["hi"]

    # an edit through stage()
    with xr.open_dataset(path, engine="vhdf5") as ds:
        staged = ds.vhdf5.stage()
        staged["aice"][0, 0] = 5.0
        staged["aice"][3, 2] = np.nan
        staged["hi"][0, 1] = np.nan
        staged.vhdf5.commit("v2")
    aice[0, 0], aice[3, 2], hi[0, 1] = 5.0, np.nan, np.nan
    # an append
    with xr.open_dataset(path, engine="vhdf5") as ds:
        staged = ds.vhdf5.stage()
        more = src.isel(time=[1]).assign_coords(time=[pd.Timestamp("2024-01-05")])
        staged.vhdf5.append(more, dim="time").vhdf5.commit("v3")
    aice, hi = np.concatenate([aice, src["aice"].values[[1]]]), np.concatenate([hi, src["hi"].values[[1]]])
    # an edit through commit(path=)
    with xr.open_dataset(path, engine="vhdf5") as ds:
        ds = ds.load()
    ds["aice"][4, 0] = np.nan
    ds.vhdf5.commit("v4", path=path)
    aice[4, 0] = np.nan

    with xr.open_dataset(path, engine="vhdf5") as ds:
        np.testing.assert_array_equal(ds["aice"].values, aice)
        np.testing.assert_allclose(ds["hi"].values, hi, rtol=1e-6)
        assert ds["aice"].dtype == np.float32 and ds["aice"].attrs["units"] == "1"
    with xr.open_dataset(path, engine="vhdf5", mask_and_scale=False) as raw:
        assert raw["aice"].values[4, 0] == np.float32(1e30)  # stored as missing_value
        assert raw["hi"].values[0, 1] == -32767 and raw["hi"].dtype == np.int16
    for version in ("v2", "v3", "v4"):
        for name in ("aice", "hi"):
            assert _stored_attrs(path, version, name) == first[name], (version, name)
    # netCDF readers see the same values
    with xr.open_dataset(path, engine="h5netcdf", group="_version_data/versions/v4") as nc:
        np.testing.assert_array_equal(nc["aice"].values, aice)


# -- 3. version addressing ----------------------------------------------------------------------


T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


@pytest.fixture
def months(tmp_path):
    """Versions m0..m5 committed at the start of each month of 2024 (m5 current)."""
    path = tmp_path / "months.h5"
    for i in range(6):
        ds = xr.Dataset({"x": (("i",), np.full(3, float(i)))})
        ds.vhdf5.commit(f"m{i}", path=path, timestamp=dt.datetime(2024, i + 1, 1, tzinfo=dt.UTC))
    return path


def _opened(path, version) -> str:
    with xr.open_dataset(path, engine="vhdf5", version=version) as ds:
        assert float(ds.x[0]) == int(ds.vhdf5.version[1:])
        return ds.vhdf5.version


def test_version_by_position(months):
    assert [_opened(months, i) for i in range(6)] == [f"m{i}" for i in range(6)]
    assert _opened(months, np.int64(2)) == "m2"
    with pytest.raises(VersionNotFoundError, match=r"position 6.*6 versions.*0 to 5") as info:
        _opened(months, 6)
    assert isinstance(info.value, IndexError) and isinstance(info.value, KeyError)
    with pytest.raises(IndexError, match="position 50"):
        _opened(months, 50)


def test_negative_versions_still_count_back_from_the_current_one(months):
    assert _opened(months, -1) == "m4" and _opened(months, -5) == "m0"
    with pytest.raises(VersionNotFoundError, match="cannot go back 6"):
        _opened(months, -6)


def test_version_by_iso_time_string(months):
    assert _opened(months, "2024-06-01T00:00") == "m5"
    assert _opened(months, "2024-03-15") == "m2"
    assert _opened(months, "2024-03-01T00:00:00+00:00") == "m2"
    assert _opened(months, "2024-03-01T00:30+01:00") == "m1"  # 23:30 UTC the day before
    assert _opened(months, pd.Timestamp("2024-04-02")) == "m3"
    with pytest.raises(VersionNotFoundError, match=r"before the first version 'm0'.*2024-01-01") as info:
        _opened(months, "2023-12-31")
    assert isinstance(info.value, KeyError) and isinstance(info.value, ValueError)


def test_version_named_like_a_time_is_opened_by_its_name(months):
    ds = xr.Dataset({"x": (("i",), np.full(3, 9.0))})
    ds.vhdf5.commit("2024-03-15", path=months, timestamp=dt.datetime(2024, 7, 1, tzinfo=dt.UTC))
    with xr.open_dataset(months, engine="vhdf5", version="2024-03-15") as got:
        assert got.vhdf5.version == "2024-03-15" and float(got.x[0]) == 9.0
    with xr.open_dataset(months, engine="vhdf5", version=dt.datetime(2024, 3, 15)) as got:
        assert got.vhdf5.version == "m2"


def test_unknown_version_keys_raise_clearly(months):
    with pytest.raises(VersionNotFoundError, match=r"named 'nope'.*ISO 8601.*'m5'"):
        _opened(months, "nope")
    with pytest.raises(VersionKeyTypeError, match="float") as info:
        _opened(months, 1.5)
    assert isinstance(info.value, TypeError)


def test_versioned_hdf5_lookups_keep_their_meaning(months):
    with h5py.File(months, "r") as f:
        vf = VersionedHDF5File(f)
        assert vf[0].name.endswith("m5") and vf[-1].name.endswith("m4")
        with pytest.raises(IndexError):
            vf[2]
        with pytest.raises(KeyError):
            vf["2024-03-15"]  # a name, as in versioned-hdf5
        assert vf.get_version_by_timestamp("2024-03-15T00:00").name.endswith("m2")


# -- 4. appends that go backwards ---------------------------------------------------------------


def _daily(tmp_path, descending=False):
    path = tmp_path / "daily.h5"
    times = pd.date_range("2024-01-01", periods=4)
    ds = xr.Dataset({"v": (("time",), np.arange(4.0))}, coords={"time": times[::-1] if descending else times})
    ds.vhdf5.commit("v1", path=path)
    return path


def _day(day, value=0.0):
    return xr.Dataset({"v": (("time",), [value])}, coords={"time": [pd.Timestamp(day)]})


def test_staged_append_going_backwards_is_refused(tmp_path):
    path = _daily(tmp_path)
    with xr.open_dataset(path, engine="vhdf5") as ds:
        staged = ds.vhdf5.stage()
        with pytest.raises(IncompatibleDataError, match=r"'time'.*increasing.*allow_unsorted") as info:
            staged.vhdf5.append(_day("2023-12-31"), dim="time")
        assert isinstance(info.value, ValueError)
        both = xr.concat([_day("2024-01-06"), _day("2024-01-05")], dim="time")
        with pytest.raises(IncompatibleDataError, match="2024-01-05"):
            staged.vhdf5.append(both, dim="time")
        grown = staged.vhdf5.append(_day("2023-12-31", 7.0), dim="time", allow_unsorted=True)
        grown = grown.vhdf5.append(_day("2024-01-05", 8.0), dim="time", allow_unsorted=True)
        grown.vhdf5.commit("v2")
    with xr.open_dataset(path, engine="vhdf5") as ds:
        assert ds.v.values.tolist() == [0, 1, 2, 3, 7, 8]


def test_staged_append_continuing_a_decreasing_index(tmp_path):
    path = _daily(tmp_path, descending=True)
    with xr.open_dataset(path, engine="vhdf5") as ds:
        staged = ds.vhdf5.stage()
        staged.vhdf5.append(_day("2023-12-31", 9.0), dim="time").vhdf5.commit("v2")
        with pytest.raises(IncompatibleDataError, match="decreasing"):
            staged.vhdf5.append(_day("2024-01-09"), dim="time")


def test_commit_path_appending_backwards_is_refused(tmp_path):
    path = _daily(tmp_path)
    with xr.open_dataset(path, engine="vhdf5") as ds:
        ds = ds.load()
    grown = xr.concat([ds, _day("2023-12-31", 5.0)], dim="time")
    with pytest.raises(IncompatibleDataError, match="allow_unsorted"):
        grown.vhdf5.commit("v2", path=path)
    with h5py.File(path, "r") as f:
        assert VersionedHDF5File(f).versions == ["v1"]
    xr.concat([ds, _day("2024-01-05", 5.0)], dim="time").vhdf5.commit("v2", path=path)
    grown.vhdf5.commit("v3", path=path, prev_version="v1", allow_unsorted=True)
    with xr.open_dataset(path, engine="vhdf5", version="v3") as got:
        assert got.v.values.tolist() == [0, 1, 2, 3, 5]


# -- 5. empty commits ---------------------------------------------------------------------------


def _versions(path):
    with h5py.File(path, "r") as f:
        return VersionedHDF5File(f).versions


def test_empty_staged_commit_is_refused(tmp_path):
    path = _daily(tmp_path)
    with xr.open_dataset(path, engine="vhdf5") as ds:
        staged = ds.vhdf5.stage()
        with pytest.raises(NothingToCommitError, match=r"'v2'.*parent 'v1'.*allow_empty=True") as info:
            staged.vhdf5.commit("v2", message="only a message")
        assert isinstance(info.value, ValueError) and isinstance(info.value, VHDF5Error)
        assert _versions(path) == ["v1"]
        staged.vhdf5.commit("v2", allow_empty=True)
        assert _versions(path) == ["v1", "v2"]
        staged.attrs["history"] = "checked"
        staged.vhdf5.commit("v3")
    assert _versions(path) == ["v1", "v2", "v3"]


def test_empty_commit_with_path_is_refused(tmp_path):
    path = _daily(tmp_path)
    with xr.open_dataset(path, engine="vhdf5") as ds:
        ds = ds.load()
    with pytest.raises(NothingToCommitError):
        ds.vhdf5.commit("v2", path=path)
    with pytest.raises(NothingToCommitError):
        ds.copy(deep=True).vhdf5.commit("v2", path=path, message="again")
    assert _versions(path) == ["v1"]
    ds.vhdf5.commit("v2", path=path, allow_empty=True)
    with xr.open_dataset(path, engine="vhdf5") as ds:
        changed = ds.load()
    changed["v"].attrs["units"] = "K"
    changed.vhdf5.commit("v3", path=path)
    assert _versions(path) == ["v1", "v2", "v3"]


def test_h5py_level_empty_version_is_still_committed(tmp_path):
    # versioned-hdf5's stage_version makes an empty version; ours does too (parity).
    path = _daily(tmp_path)
    with h5py.File(path, "r+") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v2"):
            pass
        assert vf.versions == ["v1", "v2"]
