"""History and diff: ds.vhdf5.versions, ds.vhdf5.diff, versions.diff, `vhdf5 diff`."""

from __future__ import annotations

import io

import h5py
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from click.testing import CliRunner

import xarray_vhdf5 as xv
from xarray_vhdf5._versions.diff import compare_datasets, diff_versions, equal_points
from xarray_vhdf5.cli._main import cli


def _sample() -> xr.Dataset:
    rng = np.random.default_rng(11)
    ds = xr.Dataset(
        {
            "sst": (("time", "lat", "lon"), rng.normal(15, 4, size=(6, 20, 30)).astype("f4"), {"units": "degC"}),
            "flag": (("lat", "lon"), rng.integers(0, 4, size=(20, 30)).astype("i2")),
            "name": ("lat", np.array([f"s{i}" for i in range(20)], dtype=object)),
        },
        coords={
            "time": ("time", np.datetime64("2000-01-01", "ns") + np.arange(6) * np.timedelta64(1, "D")),
            "lat": ("lat", np.linspace(-40, 40, 20)),
            "lon": ("lon", np.linspace(0, 290, 30)),
        },
    )
    ds["sst"].encoding["chunks"] = (1, 10, 30)
    ds["flag"].encoding["chunks"] = (10, 10)
    return ds


@pytest.fixture
def history(tmp_path):
    path = tmp_path / "h.h5"
    v1 = _sample()
    v1.vhdf5.commit("v1", path=path, message="initial")
    v2 = v1.copy(deep=True)
    v2["sst"][2, 12, 3] += 1.5
    v2["sst"][2, 13, 4] -= 2.0
    v2["flag"][0, 0] = 9
    v2.vhdf5.commit("v2", path=path, message="QC")
    return path, v1, v2


def test_versions_dataframe(history):
    path, _, _ = history
    with xr.open_dataset(path, engine="vhdf5") as ds:
        log = ds.vhdf5.versions
    assert list(log.index) == ["v1", "v2"] and log.index.name == "name"
    assert list(log.columns) == [
        "timestamp",
        "parent",
        "message",
        "changed",
        "new_chunks",
        "new_bytes",
        "new_bytes_on_disk",
    ]
    assert isinstance(log["timestamp"].dtype, pd.DatetimeTZDtype)
    assert log.loc["v2", "parent"] == "v1" and log.loc["v2", "message"] == "QC"
    assert log.loc["v2", "changed"] == ("flag", "sst")
    assert log.loc["v2", "new_chunks"] == 2  # one chunk of sst, one of flag
    assert log.loc["v2", "new_bytes"] == 10 * 30 * 4 + 10 * 10 * 2
    assert log.loc["v1", "new_chunks"] > 12 and log["new_bytes"].dtype == np.int64
    assert 0 < log.loc["v2", "new_bytes_on_disk"] and log["new_bytes_on_disk"].dtype == np.int64


def test_versions_hides_netcdf_phony_scales(tmp_path):
    path = tmp_path / "p.h5"
    xr.Dataset({"a": ("x", np.arange(3.0))}).vhdf5.commit("v1", path=path)
    with xr.open_dataset(path, engine="vhdf5") as ds:
        assert ds.vhdf5.versions.loc["v1", "changed"] == ("a",)


def test_diff_values_and_counts(history):
    path, v1, v2 = history
    with xr.open_dataset(path, engine="vhdf5") as ds:
        d = ds.vhdf5.diff("v1")
    assert d.attrs["version_a"] == "v1" and d.attrs["version_b"] == "v2"
    assert d.attrs["modified"] == ["sst", "flag"]
    assert set(d.attrs["unchanged"]) == {"name", "time", "lat", "lon"}
    expected = (v2["sst"] - v1["sst"]).where(v2["sst"] != v1["sst"])
    xr.testing.assert_allclose(d["sst_diff"].drop_attrs(), expected.drop_attrs())
    assert d["sst_diff"].attrs["points_changed"] == 2 and d["sst_diff"].attrs["units"] == "degC"
    counts = d["sst_changes"]
    assert counts.dims == ("sst_chunk_time", "sst_chunk_lat", "sst_chunk_lon")
    assert counts.shape == (6, 2, 1) and int(counts.sum()) == 2 and int(counts[2, 1, 0]) == 2
    assert counts.attrs["chunks_read"] == 1 and counts.attrs["chunks_total"] == 12
    assert counts["sst_chunk_lat"].values.tolist() == [v1["lat"].values[0], v1["lat"].values[10]]
    # integers become float differences, NaN where unchanged
    assert d["flag_diff"].dtype == np.float64 and float(d["flag_diff"][0, 0]) == 9 - v1["flag"].values[0, 0]
    assert int(d["flag_diff"].notnull().sum()) == 1 and int(d["flag_changes"].sum()) == 1
    # the mask of changed points, over B's grid
    np.testing.assert_array_equal(d["sst_changed"].values, (v2["sst"] != v1["sst"]).values)
    assert d["sst_changed"].dims == ("time", "lat", "lon") and d["sst_changed"].dtype == bool
    assert d["flag_changed"].values.sum() == 1 and bool(d["flag_changed"][0, 0])
    assert "name_changed" not in d  # unchanged variables have none


def test_diff_reads_only_the_chunks_that_differ(history):
    path, _, _ = history

    class Counting(io.FileIO):
        nread = 0

        def readinto(self, b):
            n = super().readinto(b)
            Counting.nread += n or 0
            return n

    fo = Counting(path, "rb")
    with h5py.File(fo, "r") as f:
        diff_versions(f, "v1", "v2", values=False)  # the open: superblock, version index, ...
        Counting.nread = 0
        diff_versions(f, "v1", "v2", values=False)
        mappings_only = Counting.nread
        Counting.nread = 0
        diffs = diff_versions(f, "v1", "v2")
        with_values = Counting.nread
    fo.close()
    assert diffs["sst"].candidates == [(2, 1, 0)] and diffs["sst"].points_changed == 2
    chunk = 10 * 30 * 4
    assert with_values - mappings_only < 4 * chunk + 2 * 10 * 10 * 2 + 16384  # two versions of two chunks
    assert with_values - mappings_only < 6 * 20 * 30 * 4  # far less than sst alone


def test_diff_of_appended_and_added_removed(tmp_path):
    path = tmp_path / "grow.h5"
    v1 = _sample().isel(time=slice(0, 4))
    v1.vhdf5.commit("v1", path=path)
    v2 = _sample().drop_vars("flag")
    v2["extra"] = ("lon", np.arange(30.0))
    v2.vhdf5.commit("v2", path=path)
    d = xv.xr.diff_versions(path, "v1", "v2")
    assert d.attrs["added"] == ["extra"] and d.attrs["removed"] == ["flag"]
    assert "sst" in d.attrs["modified"] and "time" in d.attrs["modified"]
    assert d["sst_diff"].shape == (6, 20, 30) and int(d["sst_diff"].notnull().sum()) == 0
    assert d["sst_diff"].attrs["points_changed"] == 2 * 20 * 30  # the two appended steps
    assert d["sst_changes"].values[4:].sum() == 2 * 20 * 30 and d["sst_changes"].values[:4].sum() == 0
    assert d["sst_changes"].attrs["chunks_read"] == 4  # only the new steps' chunks
    assert int(d["extra_changes"].sum()) == 30 and "extra_diff" not in d
    assert "flag_changes" not in d
    changed = d["sst_changed"]  # the appended steps, and nothing else
    assert changed.shape == (6, 20, 30) and changed.values[4:].all() and not changed.values[:4].any()
    assert int(changed.sum()) == changed.attrs["points_changed"] == 2 * 20 * 30
    extra = d["extra_changed"]  # an added variable: every point is new
    assert extra.dims == ("lon",) and extra.values.all() and int(extra.sum()) == extra.attrs["points_changed"] == 30
    assert extra.attrs["status"] == "added" and "shape_a" not in extra.attrs and extra.attrs["shape_b"] == [30]
    assert "flag_changed" not in d
    back = xv.xr.diff_versions(path, "v2", "v1")
    assert back["sst_diff"].attrs["points_removed"] == 2 * 20 * 30
    assert back["sst_changed"].shape == (4, 20, 30) and not back["sst_changed"].values.any()
    assert back["sst_changed"].attrs["points_removed"] == 2 * 20 * 30


def test_time_coordinate_diff_is_a_timedelta(tmp_path):
    path = tmp_path / "t.h5"
    v1 = _sample()
    v1.vhdf5.commit("v1", path=path)
    v2 = v1.assign_coords(time=v1["time"] + np.timedelta64(1, "h"))
    v2.vhdf5.commit("v2", path=path)
    d = xv.xr.diff_versions(path, "v1", "v2")
    # the stored numbers are equal (the encoder moved the units' reference date):
    # the changed units make it a change of every value, and every chunk is read
    assert d.attrs["attrs_changed"] == ["time"]
    assert d["time_diff"].dtype.kind == "m"
    assert (d["time_diff"].values == np.timedelta64(1, "h")).all()


def test_remapped_chunk_with_equal_values_is_unchanged(tmp_path):
    path = tmp_path / "z.h5"
    a = xr.Dataset({"v": ("x", np.zeros(8))})
    a["v"].encoding["chunks"] = (4,)
    b = a.copy(deep=True)
    b["v"][1] = -0.0  # other bits, other digest, same value
    b["v"][4] = np.nan
    c = b.copy(deep=True)
    c["v"][4] = np.nan
    a.vhdf5.commit("a", path=path)
    b.vhdf5.commit("b", path=path)
    with h5py.File(path) as f:
        va = f["_version_data/versions/a/v"]
        vb = f["_version_data/versions/b/v"]
        diff = compare_datasets("v", va, vb)
        assert diff.candidates == [(0,), (1,)]  # both chunks remapped
        diffs = diff_versions(f, "a", "b")
    assert diffs["v"].chunks_changed == 1 and diffs["v"].points_changed == 1  # only the NaN
    assert diffs["v"].status == "modified"
    c.vhdf5.commit("c", path=path, allow_empty=True)
    with h5py.File(path) as f:
        assert diff_versions(f, "b", "c")["v"].status == "unchanged"


def test_equal_points():
    a = np.array([1.0, np.nan, 0.0, 2.0])
    b = np.array([1.0, np.nan, -0.0, 3.0])
    assert equal_points(a, b).tolist() == [True, True, True, False]
    s = np.array([b"a", b"b"], dtype=object)
    assert equal_points(s, np.array([b"a", b"c"], dtype=object)).tolist() == [True, False]


def test_diff_of_a_group(tmp_path):
    path = tmp_path / "g.h5"
    ds = _sample()
    ds.vhdf5.commit("v1", path=path, group="ocean")
    ds2 = ds.copy(deep=True)
    ds2["sst"][0, 0, 0] = 0.0
    ds2.vhdf5.commit("v2", path=path, group="ocean")
    with xr.open_dataset(path, engine="vhdf5", group="ocean") as got:
        d = got.vhdf5.diff(-1)
    assert d.attrs["group"] == "/ocean" and d.attrs["modified"] == ["sst"]
    with pytest.raises(KeyError, match="no group"):
        xv.xr.diff_versions(path, "v1", "v2", group="land")


def test_diff_needs_a_vhdf5_dataset(history):
    with pytest.raises(ValueError, match="engine='vhdf5'"):
        _sample().vhdf5.diff("v1")
    with pytest.raises(ValueError, match="engine='vhdf5'"):
        _sample().vhdf5.versions
    path, _, _ = history
    with xr.open_dataset(path, engine="vhdf5") as ds, pytest.raises(xv.VersionNotFoundError):
        ds.vhdf5.diff("v9")


def test_cli_diff(history):
    path, _, _ = history
    result = CliRunner().invoke(cli, ["diff", str(path), "v1", "v2"])
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line.split() for line in result.output.splitlines()[2:-1]}
    assert rows["sst"][1] == "modified" and rows["sst"][-4:] == ["1/12", "1", "2", "0"]
    assert rows["name"][1] == "unchanged"
    assert result.output.splitlines()[-1] == "2 of 6 datasets differ from v1 to v2"
    quick = CliRunner().invoke(cli, ["diff", "--mappings-only", str(path), "v1", "v2"])
    assert quick.exit_code == 0 and "?" in quick.output
    bad = CliRunner().invoke(cli, ["diff", str(path), "v1", "nope"])
    assert bad.exit_code != 0 and "no version 'nope'" in bad.output


def test_noaa_qc_patch_diff(noaa_dir, tmp_path):
    src = xr.open_dataset(noaa_dir / "coads_climatology.cdf", decode_times=False).load()
    path = tmp_path / "coads.h5"
    src.vhdf5.commit("v1", path=path)
    fixed = src.copy(deep=True)
    fixed["SST"][5, 40:50, 60:70] += 0.5
    fixed.vhdf5.commit("v2", path=path)
    with xr.open_dataset(path, engine="vhdf5", decode_times=False) as ds:
        d = ds.vhdf5.diff("v1", decode_times=False)
    assert d.attrs["modified"] == ["SST"]
    sst = d["SST_diff"]
    valid = np.isfinite(src["SST"].values[5, 40:50, 60:70])
    assert int(sst.notnull().sum()) == valid.sum()
    np.testing.assert_allclose(sst.values[5, 40:50, 60:70][valid], 0.5, rtol=1e-5)
    assert d["SST_changes"].attrs["chunks_read"] == 1
    assert float(d["SST_changes"].sum()) == valid.sum()
    assert int(d["SST_changed"].sum()) == valid.sum() and d["SST_changed"].values[5, 40:50, 60:70][valid].all()


def test_noaa_fill_and_append_diff(noaa_dir, tmp_path):
    # the user's report: 9 missing points filled and a step appended; SST_diff showed none of them
    src = xr.open_dataset(noaa_dir / "coads_climatology.cdf", decode_times=False)[["SST"]].load()
    path = tmp_path / "coads.h5"
    src.isel(TIME=slice(0, 11)).vhdf5.commit("v1", path=path)
    fixed = src.copy(deep=True)
    missing = np.argwhere(np.isnan(fixed["SST"].values[5]))[:9]
    for j, i in missing:
        fixed["SST"].values[5, j, i] = 20.0
    fixed.vhdf5.commit("v2", path=path)
    with xr.open_dataset(path, engine="vhdf5", decode_times=False) as ds:
        d = ds.vhdf5.diff("v1", decode_times=False)
    want = np.zeros(src["SST"].shape, dtype=bool)
    want[5][tuple(missing.T)] = True
    want[11] = True
    changed = d["SST_changed"]
    np.testing.assert_array_equal(changed.values, want)
    assert int(changed.sum()) == changed.attrs["points_changed"] == 9 + 90 * 180
    assert int(d["SST_diff"].notnull().sum()) == 0


def test_diff_changed_marks_a_filled_and_a_masked_point(tmp_path):
    # the user's report: both changes are NaN <-> value, so sst_diff is all NaN
    path = tmp_path / "nd.h5"
    ds = xr.Dataset(
        {"sst": (("y", "x"), np.array([[1.0, np.nan], [3.0, 4.0]], "f4"))}, coords={"y": [0, 1], "x": [0, 1]}
    )
    ds.vhdf5.commit("a", path=path)
    with xr.open_dataset(path, engine="vhdf5") as opened:
        st = opened.vhdf5.stage()
        st["sst"][0, 1] = 2.0  # filled: NaN -> value
        st["sst"][1, 0] = np.nan  # masked: value -> NaN
        st.vhdf5.commit("b")
    with xr.open_dataset(path, engine="vhdf5") as got:
        d = got.vhdf5.diff("a")
    assert d["sst_diff"].isnull().all()  # B - A is NaN at both changed points
    changed = d["sst_changed"]
    assert changed.dims == ("y", "x") and changed.dtype == bool
    assert changed.values.tolist() == [[False, True], [True, False]]
    assert changed.attrs["points_changed"] == d["sst_diff"].attrs["points_changed"] == 2
    assert changed.attrs["status"] == "modified" and changed.attrs["points_removed"] == 0
    assert changed.attrs["shape_a"] == [2, 2] and changed.attrs["shape_b"] == [2, 2]
    assert changed["y"].values.tolist() == [0, 1] and changed["x"].values.tolist() == [0, 1]


def test_diff_changed_is_nan_aware(tmp_path):
    path = tmp_path / "nan.h5"
    a = xr.Dataset(
        {
            "v": ("x", np.array([1.0, np.nan, np.nan, 3.0, 4.0, 5.0])),
            "q": ("x", np.array([1, -999, -999, 3, 4, 5], "i2"), {"_FillValue": np.int16(-999)}),
        },
        coords={"x": np.arange(6)},
    )
    a["v"].encoding["chunks"] = (3,)
    b = a.copy(deep=True)
    # x=0 unchanged, x=1 NaN -> 2 (filled), x=2 NaN stays NaN, x=3 3 -> NaN (masked),
    # x=4 unchanged, x=5 5 -> 7 (a value change)
    b["v"].values[:] = [1.0, 2.0, np.nan, np.nan, 4.0, 7.0]
    b["q"].values[:] = [1, 2, -999, -999, 4, 7]
    a.vhdf5.commit("a", path=path)
    b.vhdf5.commit("b", path=path)
    d = xv.xr.diff_versions(path, "a", "b")
    assert d.attrs["modified"] == ["v", "q"]
    want = [False, True, False, True, False, True]
    for name in ("v", "q"):  # q: NaN is its CF _FillValue, compared decoded
        assert d[f"{name}_changed"].values.tolist() == want, name
        assert d[f"{name}_changed"].attrs["points_changed"] == 3
        diff = d[f"{name}_diff"].values
        assert np.isnan(diff[:5]).all() and diff[5] == 2.0, name  # only where both are numbers
    assert d["v_changes"].values.tolist() == [1, 2]


def test_diff_changed_marks_appended_steps_and_filled_points(tmp_path):
    # the NOAA report in small: fill missing points of the last step and append a step
    path = tmp_path / "app.h5"
    sst = np.arange(3 * 4 * 5, dtype="f4").reshape(3, 4, 5)
    sst[1, 0, :3] = np.nan  # missing in A, filled in B
    sst[1, 3, 4] = np.nan  # missing in both
    v1 = xr.Dataset(
        {"sst": (("time", "lat", "lon"), sst[:2].copy())},
        coords={"time": [0.0, 1.0], "lat": np.arange(4.0), "lon": np.arange(5.0)},
    )
    v1.vhdf5.commit("v1", path=path)
    full = sst.copy()
    full[1, 0, :3] = [7.0, 8.0, 9.0]
    full[2, 2, 2] = np.nan  # a missing point in the appended step is still new
    v2 = xr.Dataset(
        {"sst": (("time", "lat", "lon"), full)},
        coords={"time": [0.0, 1.0, 2.0], "lat": np.arange(4.0), "lon": np.arange(5.0)},
    )
    v2.vhdf5.commit("v2", path=path)
    with xr.open_dataset(path, engine="vhdf5") as got:
        d = got.vhdf5.diff("v1")
    want = np.zeros((3, 4, 5), dtype=bool)
    want[1, 0, :3] = True
    want[2] = True
    changed = d["sst_changed"]
    np.testing.assert_array_equal(changed.values, want)
    assert changed.attrs["points_changed"] == int(changed.sum()) == 3 + 4 * 5
    assert changed.attrs["shape_a"] == [2, 4, 5] and changed.attrs["shape_b"] == [3, 4, 5]
    assert changed["time"].values.tolist() == [0.0, 1.0, 2.0]
    assert int(d["sst_diff"].notnull().sum()) == 0  # no point is a number in both
    assert d["time_changed"].values.tolist() == [False, False, True]


def _kinds(path):
    t = np.array(["2000-01-01", "NaT", "2000-01-03"], "M8[ns]")
    a = xr.Dataset(
        {"s": ((), 1.0), "name": ("x", np.array(["a", "b", "c"], dtype=object)), "t": ("x", t)},
        coords={"x": [0, 1, 2]},
    )
    a.vhdf5.commit("a", path=path)
    b = a.copy(deep=True)
    b["s"] = ((), 3.5)
    b["name"].values[1] = "z"
    b["t"].values[0] = np.datetime64("2000-01-05")  # moves the units' reference date: all chunks read
    b.vhdf5.commit("b", path=path)
    d = xv.xr.diff_versions(path, "a", "b")
    assert d.attrs["modified"] == ["s", "name", "t"]
    return d


def test_diff_changed_of_strings(tmp_path):
    d = _kinds(tmp_path / "kinds.h5")
    assert "name_diff" not in d  # no difference of strings, but the points that changed
    assert d["name_changed"].dims == ("x",) and d["name_changed"].values.tolist() == [False, True, False]
    assert d["name_changed"].attrs["points_changed"] == int(d["name_changes"].sum()) == 1


def test_diff_nat_in_both_versions_is_unchanged(tmp_path):
    d = _kinds(tmp_path / "kinds.h5")
    # every point is read and decoded (the units differ): NaT against NaT is no change, as NaN
    assert d["t_diff"].attrs["points_changed"] == 1
    assert d["t_diff"].values[0] == np.timedelta64(4, "D") and np.isnat(d["t_diff"].values[1:]).all()
    assert d["t_changed"].values.tolist() == [True, False, False]
    assert d["t_changed"].attrs["points_changed"] == 1


def test_diff_of_a_scalar_is_a_scalar(tmp_path):
    d = _kinds(tmp_path / "kinds.h5")
    assert d["s_diff"].dims == () and float(d["s_diff"]) == 2.5
    assert d["s_changes"].dims == () and int(d["s_changes"]) == 1
    assert d["s_changed"].dims == () and bool(d["s_changed"]) is True
    assert d["s_changed"].attrs["points_changed"] == 1


def test_diff_decodes_times_as_the_dataset_was_opened(noaa_dir, tmp_path):
    """``ds.vhdf5.diff(-1)`` of a Dataset opened with ``decode_times=False`` does not decode times either.

    COADS's times are hours since year 0000, which xarray cannot decode without
    cftime: before, the diff decoded them anyway and raised unless told again.
    """
    src = xr.open_dataset(noaa_dir / "coads_climatology.cdf", decode_times=False).load()
    path = tmp_path / "coads.h5"
    src.vhdf5.commit("v1", path=path)
    fixed = src.copy(deep=True)
    fixed["SST"][0, 0, 0] = 1.0
    fixed.vhdf5.commit("v2", path=path)
    with xr.open_dataset(path, engine="vhdf5", decode_times=False) as ds:
        d = ds.vhdf5.diff(-1)
        assert ds.encoding["vhdf5_decode_times"] is False
        assert d.attrs["modified"] == ["SST"] and int(d["SST_changed"].sum()) == 1
        assert d["TIME"].dtype == np.float64  # B's time coordinate, as stored
        with pytest.raises(ValueError, match="unable to decode time units"):
            ds.vhdf5.diff(-1, decode_times=True)
