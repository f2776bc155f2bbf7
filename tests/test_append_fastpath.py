"""``commit(path=, append_dim=)`` in one open of the file (``xr._append``) against the general path.

Each workload is committed twice, once through :func:`~xarray_vhdf5.xr._append.commit_appended`
(the general path made to fail, so the one-open path must have committed) and once through the
general path (open, stage, append, commit; the one-open path switched off); both files must store
the same versions, values, dtypes, chunks and attributes. Refusals must raise the general path's
errors and write nothing.
"""

from __future__ import annotations

import dask.array as da
import h5py
import numpy as np
import pandas as pd
import pytest
import xarray as xr

import xarray_vhdf5 as xv
from xarray_vhdf5 import VersionedHDF5File
from xarray_vhdf5._backend.names import NETCDF_DIMENSION_ATTRS
from xarray_vhdf5.errors import IncompatibleDataError, ValueOverflowError
from xarray_vhdf5.xr import _accessor, _append
from xarray_vhdf5.xr._append import _stand_in

LAT = np.linspace(-80.0, 80.0, 5)
LON = np.arange(0.0, 360.0, 60.0)
T0 = pd.Timestamp("2024-01-01")


def _day(t: int, *, packed: bool = False, extra: bool = False, time_axis_last: bool = False) -> xr.Dataset:
    rng = np.random.default_rng(t)
    values = rng.standard_normal((1, LAT.size, LON.size)).astype("f4")
    values[0, 0, t % LON.size] = np.nan
    dims = ("time", "lat", "lon")
    if time_axis_last:
        values, dims = values.transpose(1, 2, 0), ("lat", "lon", "time")
    sst = xr.Variable(dims, values, {"long_name": "sea surface temperature", "units": "degC"})
    if packed:
        sst.encoding.update(dtype="int16", scale_factor=0.01, add_offset=10.0, _FillValue=np.int16(-32768))
    coords = {"time": [T0 + pd.Timedelta(hours=6 * t)], "lat": LAT, "lon": LON}
    ds = xr.Dataset({"sst": sst}, coords=coords, attrs={"title": "fast path"})
    ds["time"].encoding.update(units="hours since 2000-01-01", dtype="int64", calendar="proleptic_gregorian")
    ds["mask"] = (("lat", "lon"), (np.arange(LAT.size * LON.size) % 3 == 0).reshape(LAT.size, LON.size))
    if extra:
        ds = ds.assign_coords(doy=("time", np.array([t + 1], dtype="i2")))
        ds["count"] = ("time", np.array([t * 10], dtype="u4"))
    return ds


def _general_only(monkeypatch) -> None:
    monkeypatch.setattr(_append, "commit_appended", lambda *args, **kwargs: None)


def _fast_only(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("the general path was taken")

    monkeypatch.setattr(_accessor.VHDF5DatasetAccessor, "_staged_commit", refuse)


def _stored(path) -> dict:
    """Every version's datasets as stored: values, dtype, chunks, attributes (references left out)."""
    out = {}
    with h5py.File(path, "r") as f:
        vf = VersionedHDF5File(f)
        for name in vf.versions:
            group = vf[name]
            items = {}

            def visit(key, obj, items=items):
                if isinstance(obj, h5py.Dataset):
                    attrs = {k: obj.attrs[k] for k in obj.attrs if k not in NETCDF_DIMENSION_ATTRS}
                    items[key] = (obj[()], obj.dtype, obj.chunks, attrs)

            group.visititems(visit)
            out[name] = (items, group.attrs.get("_vhdf5_message"), group.attrs["prev_version"])
    return out


def _same(a, b) -> None:
    assert a.keys() == b.keys()
    for version in a:
        items_a, msg_a, prev_a = a[version]
        items_b, msg_b, prev_b = b[version]
        assert (msg_a, prev_a) == (msg_b, prev_b), version
        assert items_a.keys() == items_b.keys(), version
        for key in items_a:
            va, da_, ca, aa = items_a[key]
            vb, db, cb, ab = items_b[key]
            assert (da_, ca) == (db, cb), (version, key)
            np.testing.assert_array_equal(va, vb, err_msg=f"{version}/{key}")
            assert aa.keys() == ab.keys(), (version, key)
            for k in aa:
                np.testing.assert_array_equal(aa[k], ab[k], err_msg=f"{version}/{key}@{k}")


def _run(path, days, group=None, **kw) -> None:
    days[0].vhdf5.commit("d0", path=path, group=group)
    for t, day in enumerate(days[1:], start=1):
        day.vhdf5.commit(f"d{t}", path=path, append_dim="time", group=group, message=f"day {t}", **kw)


@pytest.mark.parametrize(
    "options",
    [{}, {"packed": True}, {"extra": True}, {"time_axis_last": True}, {"packed": True, "extra": True}],
    ids=["float", "packed", "coords", "time-last", "packed-coords"],
)
@pytest.mark.parametrize("group", [None, "ocean"])
def test_one_open_stores_what_the_general_path_stores(tmp_path, monkeypatch, options, group):
    days = [_day(t, **options) for t in range(5)]
    with monkeypatch.context() as m:
        _fast_only(m)
        _run(tmp_path / "fast.h5", days, group)
    with monkeypatch.context() as m:
        _general_only(m)
        _run(tmp_path / "general.h5", days, group)
    _same(_stored(tmp_path / "fast.h5"), _stored(tmp_path / "general.h5"))
    with xr.open_dataset(tmp_path / "fast.h5", engine="vhdf5", group=group) as got:
        want = xr.concat([d.drop_vars("mask") for d in days], dim="time").assign(mask=days[0]["mask"])
        want = want.transpose(*got.dims)[list(got.variables)]
        if options.get("packed"):  # decoded to float64, quantized to 0.01
            np.testing.assert_allclose(got["sst"].values, want["sst"].values, atol=0.0051)
            got, want = got.drop_vars("sst"), want.drop_vars("sst")
        xr.testing.assert_identical(got.drop_encoding(), want.drop_encoding())


def test_the_version_name_timestamp_and_current_version(tmp_path, monkeypatch):
    _fast_only(monkeypatch)
    path = tmp_path / "a.h5"
    _day(0).vhdf5.commit("d0", path=path)
    name = _day(1).vhdf5.commit(path=path, append_dim="time", timestamp=np.datetime64("2030-01-02T03:04:05"))
    assert name == "r2"
    _day(2).vhdf5.commit("side", path=path, append_dim="time", make_current=False)
    with h5py.File(path, "r") as f:
        vf = VersionedHDF5File(f)
        assert vf.current_version == "r2"
        assert "side" in vf.versions
        assert str(vf.get_version_by_name("r2").attrs["timestamp"]).startswith("2030-01-02 03:04:05")


def test_no_window_for_another_writer(tmp_path, monkeypatch):
    """The current version is read under the write lock: an append lands on the version current then."""
    _fast_only(monkeypatch)
    path = tmp_path / "a.h5"
    _day(0).vhdf5.commit("d0", path=path)
    today = _day(1)
    with h5py.File(path, "r+") as f:  # another writer, after today was made
        with VersionedHDF5File(f).stage_version("qc") as g:
            g["sst"][0, 0, 1] = 99.0
    _day(1).vhdf5.commit("d1", path=path, append_dim="time")
    with xr.open_dataset(path, engine="vhdf5") as got:
        assert got.sizes["time"] == 2
        assert got["sst"].values[0, 0, 1] == 99.0
        np.testing.assert_array_equal(got["sst"].values[1], today["sst"].values[0])
    with h5py.File(path, "r") as f:
        assert VersionedHDF5File(f).versions[-1] == "d1"
        assert f["_version_data/versions/d1"].attrs["prev_version"] == "qc"


def _refused(path, day, exc, match, **kw) -> None:
    before = _stored(path)
    with pytest.raises(exc, match=match):
        day.vhdf5.commit("bad", path=path, append_dim="time", **kw)
    _same(_stored(path), before)


def test_refusals_are_the_general_paths_and_write_nothing(tmp_path):
    path = tmp_path / "a.h5"
    _day(0).vhdf5.commit("d0", path=path)
    _day(1).vhdf5.commit("d1", path=path, append_dim="time")
    _refused(path, _day(1), IncompatibleDataError, "already in the staged")
    _refused(path, _day(0).assign_coords(time=[T0 - pd.Timedelta(days=1)]), IncompatibleDataError, "no longer be")
    _refused(path, _day(2).assign(other=_day(2)["sst"]), IncompatibleDataError, "lacks")
    _refused(path, _day(2).assign_coords(lat=LAT + 1), IncompatibleDataError, "coordinate 'lat' differs")
    _refused(path, _day(2).isel(lon=slice(0, 3)).drop_vars(["lon", "mask"]), IncompatibleDataError, "dims")
    _refused(path, _day(2).drop_vars("sst"), IncompatibleDataError, "missing from the appended")


def test_values_that_do_not_fit_are_refused(tmp_path):
    path = tmp_path / "a.h5"
    _day(0, packed=True).vhdf5.commit("d0", path=path)
    day = _day(1, packed=True)
    day["sst"][:] = 1e6  # beyond int16 at scale 0.01
    _refused(path, day, ValueOverflowError, "int16")


def _declines(monkeypatch) -> list:
    """Each result of commit_appended, recorded (None: it declined and the general path committed)."""
    results: list = []
    real = _append.commit_appended

    def recorded(*args, **kwargs):
        results.append(real(*args, **kwargs))
        return results[-1]

    monkeypatch.setattr(_append, "commit_appended", recorded)
    return results


def test_the_general_path_takes_what_the_one_open_path_does_not(tmp_path, monkeypatch):
    """dask-backed values are committed by the general path; unsorted labels, allowed, by the one-open path."""
    results = _declines(monkeypatch)
    path = tmp_path / "a.h5"
    _day(0).vhdf5.commit("d0", path=path)
    lazy = _day(1).chunk({"lat": 2})
    assert isinstance(lazy["sst"].data, da.Array)
    lazy.vhdf5.commit("d1", path=path, append_dim="time")
    back = _day(2).assign_coords(time=[T0 - pd.Timedelta(days=3)])
    back.vhdf5.commit("d2", path=path, append_dim="time", allow_unsorted=True)
    with xr.open_dataset(path, engine="vhdf5") as got:
        assert got.sizes["time"] == 3
        np.testing.assert_array_equal(got["sst"].values[1], _day(1)["sst"].values[0])
        assert got.indexes["time"][2] == T0 - pd.Timedelta(days=3)
    assert results == [None, "d2"]  # dask declined (nothing written by the one-open path)


def test_a_file_without_dimension_names_takes_the_general_path(tmp_path, monkeypatch):
    results = _declines(monkeypatch)
    path = tmp_path / "v.h5"
    with h5py.File(path, "w") as f:
        with VersionedHDF5File(f).stage_version("v0") as g:
            g.create_dataset("x", data=np.arange(6.0).reshape(2, 3), chunks=(1, 3))
    with xr.open_dataset(path, engine="vhdf5") as opened:
        dim = opened["x"].dims[0]
        more = opened.isel({dim: slice(0, 1)}).load() + 10
    more.vhdf5.commit("v1", path=path, append_dim=dim)
    with xr.open_dataset(path, engine="vhdf5") as got:
        np.testing.assert_array_equal(got["x"].values[2], [10.0, 11.0, 12.0])
    assert results == [None]


def _remembered_for(path) -> dict:
    st = path.stat()
    found = _append._REMEMBERED.get((st.st_dev, st.st_ino, "", "time"))
    return {} if found is None else {"version": found.version}


@pytest.mark.parametrize("options", [{}, {"extra": True}], ids=["float", "coords"])
def test_the_indexes_remembered_are_those_a_read_gives(tmp_path, monkeypatch, options):
    """After each one-open append, the process keeps the new version's indexes (its parent's, decoded, and
    its new labels as stored) for the next, which reads no coordinate: the labels the next append checks
    against must equal what xr.open_dataset decodes from the file."""
    _fast_only(monkeypatch)
    path = tmp_path / "a.h5"
    days = [_day(t, **options) for t in range(5)]
    _run(path, days[:4])
    assert _remembered_for(path)["version"] == "d3"
    with xr.open_dataset(path, engine="vhdf5") as got:
        want = {key: got.indexes[key] for key in ("time", "lat", "lon")}
    checked = []
    check = _append.check_appendable
    monkeypatch.setattr(
        _append, "check_appendable", lambda dims, indexes, *a: checked.append(indexes) or check(dims, indexes, *a)
    )
    given = []  # the sizes of the stand-ins made with values (a coordinate read, or the parent's new labels)

    def stand_in(dims, shape, dtype, attrs, values=None):
        if values is not None:
            given.append(np.size(values))
        return _stand_in(dims, shape, dtype, attrs, values)

    monkeypatch.setattr(_append, "_stand_in", stand_in)
    days[4].vhdf5.commit("d4", path=path, append_dim="time")
    (indexes,) = checked
    assert indexes.keys() == want.keys()
    for key, index in indexes.items():
        assert index.equals(want[key]), key
        assert index.dtype == want[key].dtype, key
    assert given == [1]  # no coordinate read: only d3's new time label decoded


def test_a_parent_rewritten_by_another_writer_is_read_again(tmp_path, monkeypatch):
    """d1 deleted and committed again by the general path (other labels, same name): the labels this
    process remembered for the old d1 must not be taken, or a label already stored would pass."""
    path = tmp_path / "a.h5"
    _day(0).vhdf5.commit("d0", path=path)
    _day(1).vhdf5.commit("d1", path=path, append_dim="time")
    assert _remembered_for(path)["version"] == "d1"
    with xv.open_file(path, "r+") as f:
        xv.delete_versions(f, ["d1"])
    with monkeypatch.context() as m:
        _general_only(m)
        _day(2).vhdf5.commit("d1", path=path, append_dim="time")  # d0 + day 2
    assert _remembered_for(path)["version"] == "d1"  # the old d1's, kept by this process
    _refused(path, _day(2), IncompatibleDataError, "already in the staged")
    _day(3).vhdf5.commit("d2", path=path, append_dim="time")
    with xr.open_dataset(path, engine="vhdf5") as got:
        assert list(got.indexes["time"]) == [T0, T0 + pd.Timedelta(hours=12), T0 + pd.Timedelta(hours=18)]
