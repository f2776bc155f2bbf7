"""Staging from xarray: ds.vhdf5.stage(), in-place edits, append, commit (issue 5).

Every edit is checked against the same edit applied to an in-memory copy
(numpy), after commit and reopen; the parent version must stay bit for bit.
"""

from __future__ import annotations

import copy

import h5py
import numpy as np
import pandas as pd
import pytest
import xarray as xr

from xarray_vhdf5.errors import IncompatibleDataError, StaleVersionError
from xarray_vhdf5.xr._staged_array import StagedVariableArray


def _raw(path, version):
    """Every variable of ``version`` as stored (no CF decoding), as numpy."""
    with xr.open_dataset(path, engine="vhdf5", version=version, decode_times=False, mask_and_scale=False) as ds:
        return {k: v.values.copy() for k, v in ds.variables.items()}


def _assert_bitwise(a: dict, b: dict):
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        assert a[k].tobytes() == b[k].tobytes(), k


@pytest.fixture
def coads(noaa_dir, tmp_path):
    src = xr.open_dataset(noaa_dir / "coads_climatology.cdf", decode_times=False).load()
    path = tmp_path / "coads.h5"
    src.vhdf5.commit("v1", path=path)
    return src, path


def _edit_slice(ds):
    ds["SST"][0, :10, :10] = 5.0


def _edit_loc(ds):
    ds["AIRT"].loc[{"TIME": ds["TIME"].values[3]}] = 1.5


def _edit_where(ds):
    ds["SST"][...] = ds["SST"].where(ds["SST"] < 25)


def _edit_oindex(ds):
    ds["SLP"][[1, 4, 7], 5, :] = -3.0


def _edit_vectorized(ds):
    ds["UWND"][xr.DataArray([2, 5], dims="p"), xr.DataArray([10, 20], dims="p"), xr.DataArray([30, 40], dims="p")] = 7.0


def _edit_mask_and_step(ds):
    ds["WSPD"][:, ::7, 3] = np.arange(12, dtype="float32")[:, None]


def _edit_new_var(ds):
    ds["anomaly"] = ds["SST"] - ds["SST"].mean("TIME")


def _edit_drop(ds):
    del ds["SPEH"]


def _edit_attrs(ds):
    ds["SST"].attrs["comment"] = "quality controlled"
    ds.attrs["history"] = "edited"


def _edit_encoding(ds):
    ds["AIRT"].encoding["scale_factor"] = np.float32(0.5)  # stored values change, shown ones do not


EDITS = [
    _edit_slice,
    _edit_loc,
    _edit_where,
    _edit_oindex,
    _edit_vectorized,
    _edit_mask_and_step,
    _edit_new_var,
    _edit_drop,
    _edit_attrs,
    _edit_encoding,
]


@pytest.mark.parametrize("edit", EDITS, ids=lambda f: f.__name__[6:])
def test_edit_commit_reopen(coads, edit):
    src, path = coads
    before = _raw(path, "v1")
    with xr.open_dataset(path, engine="vhdf5", decode_times=False) as ds:
        staged = ds.vhdf5.stage()
        assert isinstance(staged["SST"].data, StagedVariableArray)
        expected = src.copy(deep=True)
        edit(staged)
        edit(expected)
        xr.testing.assert_identical(staged, expected)  # reads see the staged edits
        name = staged.vhdf5.commit(message=edit.__name__)
    with xr.open_dataset(path, engine="vhdf5", version=name, decode_times=False) as got:
        xr.testing.assert_identical(got, expected)
        assert got.vhdf5.versions.loc[name, "parent"] == "v1"
        assert got.vhdf5.versions.loc[name, "message"] == edit.__name__
    _assert_bitwise(_raw(path, "v1"), before)
    if edit is _edit_encoding:
        after = _raw(path, name)
        assert after["AIRT"].tobytes() != before["AIRT"].tobytes()
        with xr.open_dataset(path, engine="vhdf5", version=name, decode_times=False, mask_and_scale=False) as raw:
            assert raw["AIRT"].attrs["scale_factor"] == np.float32(0.5)


def test_untouched_chunks_are_not_rewritten(coads):
    _src, path = coads
    with xr.open_dataset(path, engine="vhdf5", decode_times=False) as ds:
        staged = ds.vhdf5.stage()
        staged["SST"][5, 40:50, 60:70] += 0.5  # one chunk of (1, 90, 180)
        name = staged.vhdf5.commit()
    log = xr.open_dataset(path, engine="vhdf5", decode_times=False).vhdf5.versions
    assert log.loc[name, "changed"] == ("SST",)
    assert log.loc[name, "new_chunks"] == 1
    assert log.loc[name, "new_bytes"] == 90 * 180 * 4


def test_derived_datasets_keep_the_staging_state(coads):
    src, path = coads
    with xr.open_dataset(path, engine="vhdf5", decode_times=False) as ds:
        staged = ds.vhdf5.stage()
        staged["SST"][0, 0, :5] = 1.0
        copy = staged.copy(deep=True)  # copy-on-write: independent edits, same origin
        copy["SST"][0, 0, :5] = 2.0
        assert float(staged["SST"][0, 0, 0]) == 1.0
        assert isinstance(copy["SST"].data, StagedVariableArray)
        # a subset reads through the staged edits
        assert staged.isel(TIME=0, COADSY=0)["SST"].values[:5].tolist() == [1.0] * 5
        renamed = copy.assign_attrs(title="copy")  # a new accessor, state found with the data
        name = renamed.vhdf5.commit("from-copy")
    with xr.open_dataset(path, engine="vhdf5", version=name, decode_times=False) as got:
        assert got["SST"].values[0, 0, :5].tolist() == [2.0] * 5
        assert got.attrs["title"] == "copy"
        expected = src["SST"].values.copy()
        expected[0, 0, :5] = 2.0
        np.testing.assert_array_equal(got["SST"].values, expected)


def test_commit_rebases_the_staged_dataset(coads):
    src, path = coads
    with xr.open_dataset(path, engine="vhdf5", decode_times=False) as ds:
        staged = ds.vhdf5.stage()
        staged["SST"][0, 0, 0] = 1.0
        first = staged.vhdf5.commit()
        staged["SST"][1, 0, 0] = 2.0  # keeps editing after the commit
        second = staged.vhdf5.commit()
    log = xr.open_dataset(path, engine="vhdf5", decode_times=False).vhdf5.versions
    assert log.loc[second, "parent"] == first
    expected = src.copy(deep=True)
    expected["SST"][0, 0, 0] = 1.0
    expected["SST"][1, 0, 0] = 2.0
    with xr.open_dataset(path, engine="vhdf5", version=second, decode_times=False) as got:
        xr.testing.assert_identical(got, expected)


def test_stale_parent(coads):
    src, path = coads
    with xr.open_dataset(path, engine="vhdf5", decode_times=False) as ds:
        a = ds.vhdf5.stage()
        b = ds.vhdf5.stage()
        a["SST"][0, 0, 0] = 1.0
        b["AIRT"][0, 0, 0] = 2.0
        a.vhdf5.commit("a")
        before = _raw(path, "a")
        with pytest.raises(StaleVersionError, match="current version is now 'a'") as info:
            b.vhdf5.commit("b")
        assert isinstance(info.value, ValueError)
        _assert_bitwise(_raw(path, "a"), before)  # nothing written
        assert float(b["AIRT"][0, 0, 0]) == 2.0  # the staged edits survive the refusal
        b.vhdf5.commit("b", force=True)
    log = xr.open_dataset(path, engine="vhdf5", decode_times=False).vhdf5.versions
    assert log.loc["b", "parent"] == "v1"
    with xr.open_dataset(path, engine="vhdf5", version="b", decode_times=False) as got:
        assert float(got["AIRT"][0, 0, 0]) == 2.0
        np.testing.assert_array_equal(got["SST"].values, src["SST"].values)  # a's edit is not on this branch


def test_append_along_time(noaa_dir, tmp_path):
    src = xr.open_dataset(noaa_dir / "esku_heat_budget.cdf", decode_times=False).load()
    path = tmp_path / "esku.h5"
    src.isel(TIME=slice(0, 5)).vhdf5.commit("v1", path=path)
    before = _raw(path, "v1")
    with xr.open_dataset(path, engine="vhdf5", decode_times=False) as ds:
        staged = ds.vhdf5.stage()
        grown = staged.vhdf5.append(src.isel(TIME=slice(5, 9)), dim="TIME")
        assert staged.sizes["TIME"] == 5  # the original is unchanged
        grown = grown.vhdf5.append(src.isel(TIME=slice(9, 12)), dim="TIME")
        assert isinstance(grown["SST"].data, StagedVariableArray)
        xr.testing.assert_identical(grown, src)
        name = grown.vhdf5.commit()
    with xr.open_dataset(path, engine="vhdf5", version=name, decode_times=False) as got:
        xr.testing.assert_identical(got, src)
    _assert_bitwise(_raw(path, "v1"), before)


def test_append_rejects_mismatched_data(coads):
    src, path = coads
    with xr.open_dataset(path, engine="vhdf5", decode_times=False) as ds:
        staged = ds.vhdf5.stage()
        with pytest.raises(IncompatibleDataError, match="missing from the appended"):
            staged.vhdf5.append(src.isel(TIME=[0]).assign_coords(TIME=[99999.0]).drop_vars("SST"), dim="TIME")
        with pytest.raises(IncompatibleDataError, match="not a dimension"):
            staged.vhdf5.append(src, dim="depth")


def test_append_aligns_other_coordinates_exactly(coads):
    """A step on another grid, with an extra variable or a label already there is refused; nothing is staged.

    Before, the points of a step whose latitudes ran north to south (or were
    shifted by half a degree) were stored under the file's own latitudes, an
    extra variable was dropped and a day ingested twice was stored twice.
    """
    src, path = coads
    step = src.isel(TIME=[-1])
    step = step.assign_coords(TIME=step.TIME.copy(data=[99999.0]))  # a new label, attrs kept
    refused = {
        "flipped": (step.isel(COADSY=slice(None, None, -1)), r"coordinate 'COADSY' differs.* at position 0 "),
        "shifted": (step.assign_coords(COADSY=step.COADSY + 0.5), r"coordinate 'COADSY' differs.* at position 0 "),
        "narrower": (step.isel(COADSX=slice(1, None)), r"coordinate 'COADSX' differs .*179 labels against 180"),
        "again": (src.isel(TIME=[0, 1]), r"2 of the appended 'TIME' labels are already in the staged"),
        "extra": (step.assign(EXTRA=step.SST * 2), r"data variables the staged one lacks: \['EXTRA'\]"),
    }
    with xr.open_dataset(path, engine="vhdf5", decode_times=False) as ds:
        staged = ds.vhdf5.stage()
        before = staged.copy(deep=True).load()
        for other, message in refused.values():
            with pytest.raises(IncompatibleDataError, match=message):
                staged.vhdf5.append(other, dim="TIME")
        xr.testing.assert_identical(staged, before)
        grown = staged.vhdf5.append(refused["flipped"][0].sortby("COADSY"), dim="TIME")
        name = grown.vhdf5.commit()
    with xr.open_dataset(path, engine="vhdf5", version=name, decode_times=False) as got:
        xr.testing.assert_identical(got.isel(TIME=[-1]), step)
        assert got.sizes["TIME"] == src.sizes["TIME"] + 1


def test_cf_codecs_packed_and_times(tmp_path):
    """Packed int16 (scale_factor) and datetime data variables stage in decoded units."""
    times = pd.date_range("2000-01-01", periods=6, freq="D")
    packed = xr.Variable(("t", "x"), np.linspace(0, 10, 24).reshape(6, 4))
    packed.encoding = {"dtype": "int16", "scale_factor": 0.01, "_FillValue": -999, "chunks": (2, 4)}
    seen = xr.Variable(("t", "x"), np.tile(times.values[:, None], (1, 4)))
    seen.encoding = {"units": "hours since 2000-01-01", "dtype": "int64", "chunks": (2, 4)}
    ds = xr.Dataset({"packed": packed, "seen": seen}, coords={"t": times})
    path = tmp_path / "cf.h5"
    ds.vhdf5.commit("v1", path=path)
    before = _raw(path, "v1")
    with xr.open_dataset(path, engine="vhdf5") as opened:
        expected = opened.load().copy(deep=True)
        staged = opened.vhdf5.stage()
        assert isinstance(staged["packed"].data, StagedVariableArray)
        assert isinstance(staged["seen"].data, StagedVariableArray)
        for target in (staged, expected):
            target["packed"][1, 1:3] = np.nan
            target["packed"][4, 0] = 3.14
            target["seen"][5, :] = np.datetime64("2001-02-03T04:00", "ns")
        xr.testing.assert_identical(staged, expected)
        name = staged.vhdf5.commit()
    with xr.open_dataset(path, engine="vhdf5", version=name) as got:
        xr.testing.assert_identical(got, expected)
    raw = _raw(path, name)
    assert raw["packed"].dtype == np.int16 and raw["packed"][1, 1] == -999 and raw["packed"][4, 0] == 314
    _assert_bitwise(_raw(path, "v1"), before)


def test_rebuilt_datasets_commit_by_hash(coads):
    """A Dataset rebuilt from a staged one (xr.concat) commits through the dedupe-by-hash writer."""
    src, path = coads
    with xr.open_dataset(path, engine="vhdf5", decode_times=False) as ds:
        staged = ds.vhdf5.stage()
        rebuilt = xr.concat([staged.isel(TIME=slice(0, 6)), staged.isel(TIME=slice(6, None))], dim="TIME")
        assert not isinstance(rebuilt["SST"].data, StagedVariableArray)
        name = rebuilt.vhdf5.commit(path=path, allow_empty=True)
    log = xr.open_dataset(path, engine="vhdf5", decode_times=False).vhdf5.versions
    assert log.loc[name, "new_chunks"] == 0  # every chunk deduplicated
    with xr.open_dataset(path, engine="vhdf5", version=name, decode_times=False) as got:
        xr.testing.assert_identical(got, src)


def test_stage_needs_an_opened_dataset(coads):
    src, _ = coads
    with pytest.raises(ValueError, match="engine='vhdf5'"):
        src.vhdf5.stage()
    with pytest.raises(ValueError, match="stage"):
        src.vhdf5.append(src, dim="TIME")


def test_stage_a_group(coads):
    src, path = coads
    sub = src[["SST"]].isel(TIME=slice(0, 3))
    sub.vhdf5.commit("g1", path=path, group="ocean")
    with xr.open_dataset(path, engine="vhdf5", group="ocean", decode_times=False) as ds:
        staged = ds.vhdf5.stage()
        assert staged["SST"].data.origin.path == "ocean/SST"
        staged["SST"][1, 2, 3] = 9.0
        name = staged.vhdf5.commit()
    expected = sub.copy(deep=True)
    expected["SST"][1, 2, 3] = 9.0
    with xr.open_dataset(path, engine="vhdf5", group="ocean", version=name, decode_times=False) as got:
        xr.testing.assert_identical(got, expected)
    with xr.open_dataset(path, engine="vhdf5", version=name, decode_times=False) as root:
        xr.testing.assert_identical(root, src)  # the root group is untouched


def test_failed_commit_keeps_the_file_and_the_edits(coads):
    from xarray_vhdf5.errors import VersionExistsError

    _src, path = coads
    before = _raw(path, "v1")
    with xr.open_dataset(path, engine="vhdf5", decode_times=False) as ds:
        staged = ds.vhdf5.stage()
        staged["SST"][0, 0, 0] = 3.0
        with pytest.raises(VersionExistsError):
            staged.vhdf5.commit("v1")
        staged["bad"] = xr.Variable(("TIME",), np.array([object()] * 12))
        with pytest.raises(IncompatibleDataError, match="bad"):
            staged.vhdf5.commit("v2")
        del staged["bad"]
        assert float(staged["SST"][0, 0, 0]) == 3.0
        name = staged.vhdf5.commit("v2")
    assert xr.open_dataset(path, engine="vhdf5", decode_times=False).vhdf5.versions.index.tolist() == ["v1", name]
    _assert_bitwise(_raw(path, "v1"), before)
    with xr.open_dataset(path, engine="vhdf5", version=name, decode_times=False) as got:
        assert float(got["SST"][0, 0, 0]) == 3.0


def _rewritten_under_stage(tmp_path):
    """A staged Dataset whose raw_data another writer then compacts and refills to the same length.

    v1-v3 of a (40,) float64 with chunks (10,); v1's chunk is referenced by no
    later version, so deleting v1 removes its raw_data row and moves the
    others; a side version then appends one chunk, which brings raw_data back
    to its staged length (a check on the length alone cannot see the move).
    """
    from xarray_vhdf5 import VersionedHDF5File, delete_versions
    from xarray_vhdf5.xr import _reading

    path = tmp_path / "moved.h5"
    with h5py.File(path, "w") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v0") as g:
            g.create_dataset("x", data=np.zeros(40), chunks=(10,))
        with vf.stage_version("v1") as g:
            g["x"][30:40] = 5
        with vf.stage_version("v2") as g:
            g["x"][30:40] = 7
            g["x"][0:10] = 1
        with vf.stage_version("v3") as g:
            g["x"][10:20] = 2
    with xr.open_dataset(path, engine="vhdf5") as ds:
        staged = ds.vhdf5.stage()
    staged["x"][25] = 99.0  # chunks 0, 1 and 3 stay mapped to their raw_data rows
    _reading.close_read_handles(str(path))  # lets another writer in
    with h5py.File(path, "a") as f:
        shape = f["_version_data/x/raw_data"].shape
        delete_versions(f, ["v1"])
        assert f["_version_data/x/raw_data"].shape[0] < shape[0]  # compacted: rows moved
        with VersionedHDF5File(f).stage_version("side", prev_version="v3", make_current=False) as g:
            g["x"][20:30] = 4
        assert f["_version_data/x/raw_data"].shape == shape
    return staged, path


def test_commit_refuses_a_stage_whose_raw_data_was_rewritten(tmp_path):
    """Committing it would map chunk 1 to the side version's chunk (it did before the check)."""
    staged, path = _rewritten_under_stage(tmp_path)
    with h5py.File(path, "r") as f:
        before = {n: f[f"_version_data/versions/{n}/x"][()] for n in ("v2", "v3", "side")}
    with pytest.raises(StaleVersionError, match="rewritten since it was staged"):
        staged.vhdf5.commit("v4")
    with h5py.File(path, "r") as f:
        assert "v4" not in f["_version_data/versions"]
        for name, data in before.items():
            np.testing.assert_array_equal(f[f"_version_data/versions/{name}/x"][()], data)
    expected = np.zeros(40)
    expected[:10], expected[10:20], expected[30:] = 1, 2, 7
    with xr.open_dataset(path, engine="vhdf5", version="v3") as ds:
        np.testing.assert_array_equal(ds["x"].values, expected)


def test_reading_a_stage_whose_raw_data_was_rewritten_raises(tmp_path):
    staged, _ = _rewritten_under_stage(tmp_path)
    with pytest.raises(StaleVersionError, match="stage again"):
        staged["x"].values


def _staged_arange(path) -> xr.Dataset:
    """A stage of version v0 of ``path``: ``x`` = arange(40.0), chunks (10,)."""
    src = xr.Dataset({"x": ("i", np.arange(40.0))})
    src["x"].encoding["chunks"] = (10,)
    src.vhdf5.commit("v0", path=path)
    with xr.open_dataset(path, engine="vhdf5") as ds:
        return ds.vhdf5.stage()


def test_commit_after_other_commits_keeps_working(tmp_path):
    """Commits only append raw_data rows: a stage stays valid across them (and is rebased by its own)."""
    from xarray_vhdf5 import VersionedHDF5File
    from xarray_vhdf5.xr import _reading

    path = tmp_path / "grown.h5"
    staged = _staged_arange(path)
    staged["x"][5] = -1.0
    _reading.close_read_handles(str(path))
    with h5py.File(path, "a") as f:
        with VersionedHDF5File(f).stage_version("side", make_current=False) as g:
            g["x"][:] = 3.0
    expected = np.arange(40.0)
    expected[5] = -1.0
    np.testing.assert_array_equal(staged["x"].values, expected)  # reopened over the grown raw_data:
    assert isinstance(staged["x"].variable._data.staged.base_slabs[0], h5py.Dataset)  # compiled reads again
    staged.vhdf5.commit("v1")
    staged["x"][15] = -2.0  # rebased on v1: its map and table state are v1's
    staged.vhdf5.commit("v2")
    expected[15] = -2.0
    with xr.open_dataset(path, engine="vhdf5", version="v2") as ds:
        np.testing.assert_array_equal(ds["x"].values, expected)


def test_reopening_reads_each_hash_table_once_for_all_copies(tmp_path, monkeypatch):
    """Copies of a staged variable (``append`` and ``copy`` make them) share raw_data: reopening
    the stage's file reads that hash table's state once, and a rewrite is still refused for all."""
    from xarray_vhdf5.xr import _reading
    from xarray_vhdf5.xr import _staged_array as staged_array

    path = tmp_path / "copies.h5"
    staged = _staged_arange(path)
    copies = [staged.copy(deep=True) for _ in range(3)]
    calls = []
    real = staged_array.table_state
    monkeypatch.setattr(staged_array, "table_state", lambda table: calls.append(1) or real(table))
    _reading.close_read_handles(str(path))
    handle = copies[0]["x"].variable._data.handle
    assert all(c["x"].variable._data.handle is handle for c in copies) and len(handle.arrays) >= 4
    handle.close()  # reopened by the next read, which checks every array registered
    np.testing.assert_array_equal(copies[0]["x"].values, np.arange(40.0))
    assert len(calls) == 1
    (tmp_path / "r").mkdir()
    staged2, _ = _rewritten_under_stage(tmp_path / "r")
    copied = staged2.copy(deep=True)  # a copy reads nothing (copy-on-write): its reads are refused
    with pytest.raises(StaleVersionError, match="stage again"):
        copied["x"].values
    with pytest.raises(StaleVersionError, match="stage again"):
        staged2["x"].values


def test_a_rewritten_raw_data_refuses_only_its_own_variables(tmp_path):
    """Reopening the stage's file finds ``x``'s raw_data rewritten and ``y``'s untouched:
    ``y`` stays readable (and so does a copy of it), ``x`` and its copies raise."""
    from xarray_vhdf5 import VersionedHDF5File, delete_versions
    from xarray_vhdf5.xr import _reading

    path = tmp_path / "two.h5"
    with h5py.File(path, "w") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v0") as g:
            g.create_dataset("x", data=np.zeros(40), chunks=(10,))
            g.create_dataset("y", data=np.arange(40.0), chunks=(10,))
        with vf.stage_version("v1") as g:
            g["x"][30:40] = 5
        with vf.stage_version("v2") as g:
            g["x"][30:40] = 7
    with xr.open_dataset(path, engine="vhdf5") as ds:
        staged = ds.vhdf5.stage()
    staged["y"][3] = -1.0
    staged["x"][0] = 2.0  # x's commit would map its other chunks to moved rows
    y_copy = staged["y"].copy(deep=False)
    x_copies = [staged["x"].copy(deep=True), copy.copy(staged["x"].data)]  # made before the rewrite
    _reading.close_read_handles(str(path))
    with h5py.File(path, "a") as f:
        y_table = f["_version_data/y/hash_table"][()]
        x_rows = f["_version_data/x/raw_data"].shape[0]
        delete_versions(f, ["v1"])  # x's v1 chunk goes: x's rows move, y's do not
        assert f["_version_data/x/raw_data"].shape[0] == x_rows - 10
        np.testing.assert_array_equal(f["_version_data/y/hash_table"][()], y_table)
    expected = np.arange(40.0)
    expected[3] = -1.0
    np.testing.assert_array_equal(staged["y"].values, expected)
    np.testing.assert_array_equal(y_copy.values, expected)
    with pytest.raises(StaleVersionError, match="'x'.*stage again"):
        staged["x"].values
    for x_copy in x_copies:  # refused through the one check of their shared base
        with pytest.raises(StaleVersionError, match="stage again"):
            np.asarray(x_copy)
    with pytest.raises(StaleVersionError, match="stage again"):
        staged.vhdf5.commit("v3")  # one stale variable: nothing committed
    with h5py.File(path, "r") as f:
        assert "v3" not in f["_version_data/versions"]


def test_a_shallow_copy_of_a_staged_variable_is_checked_and_shares_no_chunks(tmp_path):
    """``copy.copy`` of a staged variable's data is copy-on-write like ``copy.deepcopy`` and is
    checked when the stage's file reopens: after a rewrite of its raw_data its reads raise."""
    import copy

    staged, _ = _rewritten_under_stage(tmp_path)  # its file rewritten while closed
    stale = copy.copy(staged["x"].data)  # copying reads nothing
    with pytest.raises(StaleVersionError, match="stage again"):
        np.asarray(stale)
    (tmp_path / "f").mkdir()
    fresh = _staged_arange(tmp_path / "f" / "a.h5")
    data = fresh["x"].data
    clone = copy.copy(data)
    clone[0] = -1.0
    assert np.asarray(data)[0] == 0.0 and np.asarray(clone)[0] == -1.0
    assert any(a is clone for a in data.handle.arrays.values())


def test_a_bad_assignment_raises_numpys_error_and_changes_nothing(tmp_path):
    """A value that does not broadcast, or cannot be cast, raises numpy's ValueError through
    xarray (which asks the array for numpy's ``flags`` then); the staged data stays as it was."""
    ds = xr.Dataset({"t": (("time", "x"), np.arange(20.0).reshape(4, 5))}, coords={"time": np.arange(4.0)})
    ds["t"].encoding["chunks"] = (2, 5)
    path = tmp_path / "f.h5"
    ds.vhdf5.commit("v1", path=path)
    with xr.open_dataset(path, engine="vhdf5") as opened:
        staged = opened.vhdf5.stage()
        with pytest.raises(ValueError, match="broadcast"):
            staged["t"][0:2, :] = np.zeros((3, 5))
        with pytest.raises(ValueError, match="could not convert"):
            staged["t"].variable[0, 0] = "abc"
        np.testing.assert_array_equal(staged["t"].values, ds["t"].values)
        staged["t"][0, 0] = -1.0
        staged.vhdf5.commit("v2")
        staged.close()
    with xr.open_dataset(path, engine="vhdf5") as v2:
        assert v2["t"].values[0, 0] == -1.0 and v2["t"].values[0, 1] == 1.0


NEWAXIS_KEYS = [
    (None,),
    (None, Ellipsis),
    (slice(1, 3), None),
    (0, None, slice(None)),
    (Ellipsis, None),
    (None, 1, None),
    (None, slice(None, None, 2), np.int64(4)),
    (-1, None),
]


@pytest.mark.parametrize("key", NEWAXIS_KEYS, ids=repr)
def test_staged_variable_takes_newaxis_as_numpy_does(tmp_path, key):
    data = np.arange(20.0).reshape(4, 5)
    ds = xr.Dataset({"t": (("time", "x"), data)})
    ds["t"].encoding["chunks"] = (2, 5)
    ds.vhdf5.commit("v1", path=tmp_path / "f.h5")
    with xr.open_dataset(tmp_path / "f.h5", engine="vhdf5") as opened:
        staged = opened.vhdf5.stage()
        arr = staged["t"].variable._data
        assert isinstance(arr, StagedVariableArray)
        got = arr[key]
        np.testing.assert_array_equal(got, data[key])
        assert got.shape == data[key].shape
        staged.close()


def test_concat_of_a_staged_dataset_broadcasts_its_other_variables(tmp_path):
    """``xr.concat(data_vars="all")`` gives a variable without the concatenated dimension that
    dimension by indexing it with ``None`` (``Variable.set_dims``): it reads as xarray computes
    it. Committing it under its name is refused (a dataset keeps its number of dimensions);
    with ``data_vars="minimal"`` it stays as it was and the result commits."""
    ds = xr.Dataset(
        {"t": (("time", "x"), np.arange(20.0).reshape(4, 5)), "m": (("x",), np.arange(5.0))},
        coords={"time": np.arange(4.0)},
    )
    ds["t"].encoding["chunks"] = (2, 5)
    path = tmp_path / "f.h5"
    ds.vhdf5.commit("v1", path=path)
    ext = ds.isel(time=[0]).assign_coords(time=[10.0])
    with xr.open_dataset(path, engine="vhdf5") as opened:
        staged = opened.vhdf5.stage()
        more = staged.isel(time=[0]).assign_coords(time=[10.0])
        combined = xr.concat([staged, more], dim="time", data_vars="all")
        want = xr.concat([ds, ext], dim="time", data_vars="all")
        assert combined["m"].dims == ("time", "x")
        np.testing.assert_array_equal(combined["m"].values, want["m"].values)
        with pytest.raises(IncompatibleDataError):
            combined.vhdf5.commit("v2")
        xr.concat([staged, more], dim="time", data_vars="minimal").vhdf5.commit("v2")  # nothing was committed
        staged.close()
    want = xr.concat([ds, ext], dim="time", data_vars="minimal")
    with xr.open_dataset(path, engine="vhdf5", version="v2") as v2:
        np.testing.assert_array_equal(v2["t"].values, want["t"].values)
        np.testing.assert_array_equal(v2["m"].values, want["m"].values)
        assert "v2" == v2.encoding["vhdf5_version"]


def test_replacing_a_variable_keeps_its_stored_encoding(coads, tmp_path):
    """``staged[v] = <arithmetic on it>`` is stored as v was: fill value, dtype, packing (xarray drops encoding).

    Before, xarray's CF encoder chose a NaN ``_FillValue`` and no packing, which the
    commit refused against the first version's (NOAA's -1e34; a packed int16).
    """
    src, path = coads
    with xr.open_dataset(path, engine="vhdf5", decode_times=False) as ds:
        staged = ds.vhdf5.stage()
        staged["SST"] = staged["SST"] + 1
        staged["AIRT"] = staged["AIRT"] * np.float64(1.5)  # float64 values for a float32 dataset
        name = staged.vhdf5.commit()
    with xr.open_dataset(path, engine="vhdf5", version=name, decode_times=False) as got:
        np.testing.assert_array_equal(got["SST"].values, src["SST"].values + np.float32(1))
        np.testing.assert_array_equal(got["AIRT"].values, (src["AIRT"].values * 1.5).astype("f4"))
    raw = _raw(path, name)
    assert raw["SST"].dtype == raw["AIRT"].dtype == np.float32
    assert (raw["SST"] == np.float32(-1e34)).sum() == np.isnan(src["SST"].values).sum() > 0

    times = pd.date_range("2000-01-01", periods=6, freq="D")
    packed = xr.Variable(("t", "x"), np.linspace(0, 10, 24).reshape(6, 4))
    packed.encoding = {"dtype": "int16", "scale_factor": 0.01, "_FillValue": -999, "chunks": (2, 4)}
    counts = xr.Variable(("t", "x"), np.arange(24).reshape(6, 4))
    path = tmp_path / "packed.h5"
    xr.Dataset({"packed": packed, "counts": counts}, coords={"t": times}).vhdf5.commit("v1", path=path)
    with xr.open_dataset(path, engine="vhdf5") as ds:
        staged = ds.vhdf5.stage()
        expected = ds["packed"].values / 2
        staged["packed"] = staged["packed"] / 2
        conflicting = staged["packed"] + 0
        conflicting.encoding = {"_FillValue": -1}  # said explicitly: still refused
        for name, value, message in (
            ("counts", staged["counts"] / 2, "dtype float64 differs from int64"),
            ("packed", conflicting, r"fill value np.int16\(-1\) differs from np.int16\(-999\)"),
        ):
            attempt = staged.copy()
            attempt[name] = value
            with pytest.raises(IncompatibleDataError, match=message):
                attempt.vhdf5.commit()
        name = staged.vhdf5.commit()
    with xr.open_dataset(path, engine="vhdf5", version=name) as got:
        np.testing.assert_allclose(got["packed"].values, expected, atol=0.005)
    raw = _raw(path, name)
    assert raw["packed"].dtype == np.int16 and raw["packed"][5, 3] == 500  # 10 / 2 / 0.01
    with h5py.File(path) as f:
        assert sorted(f["_version_data/versions"]) == ["__first_version__", "r2", "v1"]  # refusals committed nothing


def test_replacing_a_variable_of_a_versioned_hdf5_file(tmp_path):
    """A dataset versioned-hdf5 wrote (no CF attributes, fill value 0) replaced by arithmetic on it."""
    versioned_hdf5 = pytest.importorskip("versioned_hdf5")
    path = tmp_path / "vh.h5"
    with h5py.File(path, "w") as f:
        with versioned_hdf5.VersionedHDF5File(f).stage_version("v1") as g:
            g.create_dataset("temp", data=np.arange(20.0).reshape(4, 5), chunks=(2, 5))
    with xr.open_dataset(path, engine="vhdf5") as ds:
        staged = ds.vhdf5.stage()
        staged["temp"] = staged["temp"] + 1
        staged.vhdf5.commit("v2")
    with h5py.File(path) as f:
        vf = versioned_hdf5.VersionedHDF5File(f)
        np.testing.assert_array_equal(vf["v2"]["temp"][()], np.arange(20.0).reshape(4, 5) + 1)
        assert f["_version_data/temp/raw_data"].fillvalue == 0.0
        assert "_FillValue" not in vf["v2"]["temp"].attrs


def test_an_xarray_edit_keeps_a_versioned_hdf5_files_layout(tmp_path):
    """A one-point edit from xarray on datasets versioned-hdf5 wrote adds nothing else to the version.

    Before, the commit added netCDF-4 scales ``phony_dim_0``/``phony_dim_1`` (new
    datasets a versioned-hdf5 user iterating the version sees) and
    ``DIMENSION_LIST``, ``_ARRAY_DIMENSIONS`` and a NaN ``_FillValue`` to both datasets,
    though only one point of one of them changed.
    """
    versioned_hdf5 = pytest.importorskip("versioned_hdf5")
    path = tmp_path / "vh.h5"
    with h5py.File(path, "w") as f:
        with versioned_hdf5.VersionedHDF5File(f).stage_version("v1") as g:
            g.create_dataset("temp", data=np.arange(20.0).reshape(4, 5), chunks=(2, 5))
            g["temp"].attrs["units"] = "K"
            g.create_dataset("count", data=np.arange(4), chunks=(4,))
    with xr.open_dataset(path, engine="vhdf5") as ds:
        expected = ds.load().copy(deep=True)
        expected["temp"][0, 0] = -1.0
        staged = ds.vhdf5.stage()
        staged["temp"][0, 0] = -1.0
        staged.vhdf5.commit("v2")
    with h5py.File(path) as f:
        vf = versioned_hdf5.VersionedHDF5File(f)
        v1, v2 = vf["v1"], vf["v2"]
        assert sorted(v2) == sorted(v1) == ["count", "temp"]
        for name in v1:
            assert sorted(v2[name].attrs) == sorted(v1[name].attrs), name
        np.testing.assert_array_equal(v2["temp"][()], expected["temp"].values)
    with xr.open_dataset(path, engine="vhdf5", version="v2") as got:
        xr.testing.assert_identical(got, expected)


def test_an_append_of_whole_chunks_opens_no_file(tmp_path, monkeypatch):
    """Between commits the stage's handle is closed: appending whole chunks (copy, resize, assign)
    reads no base chunk, so the file stays closed; an append into a partly filled edge chunk
    opens it to read that chunk."""
    from xarray_vhdf5.xr import _stagefile

    path = tmp_path / "a.h5"
    staged = _staged_arange(path)  # x: 40 points, chunks of 10
    staged.vhdf5.commit("v1", allow_empty=True)  # closes the stage's handle
    opened = []
    real = _stagefile.open_for_reading
    monkeypatch.setattr(_stagefile, "open_for_reading", lambda *a, **k: opened.append(a) or real(*a, **k))
    more = xr.Dataset({"x": ("i", np.arange(40.0, 50.0))})
    staged = staged.vhdf5.append(more, dim="i")
    assert opened == []
    staged.vhdf5.commit("v2")
    staged = staged.vhdf5.append(xr.Dataset({"x": ("i", [50.0, 51.0])}), dim="i")
    staged.vhdf5.commit("v3")  # chunk 5 stored with 2 of its 10 points
    assert opened == []
    staged = staged.vhdf5.append(xr.Dataset({"x": ("i", np.arange(52.0, 60.0))}), dim="i")
    assert len(opened) == 1  # chunk 5 read to be filled
    staged.vhdf5.commit("v4")
    with xr.open_dataset(path, engine="vhdf5") as got:
        np.testing.assert_array_equal(got["x"].values, np.arange(60.0))
