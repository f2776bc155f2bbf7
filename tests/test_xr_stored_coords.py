"""Staged in-memory coordinates are committed through their stored dataset while unchanged (``xr/_stored.py``).

Each test that edits a coordinate checks that the record is not trusted
then: the committed version shows the edit, as ``xr.open_dataset`` reads it.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import xarray_vhdf5  # noqa: F401  (the accessor)
from xarray_vhdf5.xr import _stage as stage_module
from xarray_vhdf5.xr._stored import STORED_KEY, StoredValues, same_value


def _day(t: int) -> xr.Dataset:
    rng = np.random.default_rng(t)
    ds = xr.Dataset(
        {"sst": (("time", "lat", "lon"), rng.normal(20, 2, (1, 6, 8)).astype("f4"))},
        coords={
            "time": pd.date_range("2024-01-01", periods=1) + pd.Timedelta(days=t),
            "lat": np.linspace(-50.0, 50.0, 6),
            "lon": np.arange(8.0),
        },
    )
    ds["lat"].attrs["units"] = "degrees_north"
    return ds


@pytest.fixture
def rewritten(monkeypatch):
    """Names of the variables a commit rewrites (through ``write_variable``)."""
    names: list[str] = []
    real = stage_module.write_variable

    def spy(group, name, var, **kw):
        names.append(name)
        return real(group, name, var, **kw)

    monkeypatch.setattr(stage_module, "write_variable", spy)
    return names


def _file(tmp_path, days: int = 3):
    path = tmp_path / "sst.h5"
    for t in range(days):
        _day(t).vhdf5.commit(f"d{t}", path=path, append_dim="time")
    return path


def _expected(days: int) -> xr.Dataset:
    return xr.concat([_day(t) for t in range(days)], dim="time")


def test_a_daily_append_rewrites_no_coordinate(tmp_path, rewritten):
    path = _file(tmp_path, 3)
    rewritten.clear()
    with xr.open_dataset(path, engine="vhdf5") as ds:
        staged = ds.vhdf5.stage().vhdf5.append(_day(3), dim="time")
        staged.vhdf5.commit("d3")
        staged.close()
    assert rewritten == []
    with xr.open_dataset(path, engine="vhdf5") as got:
        xr.testing.assert_identical(got.load(), _expected(4))
        assert got["time"].encoding["units"].startswith("days since 2024-01-01")


def test_kept_open_staging_stays_on_the_records(tmp_path, rewritten):
    path = _file(tmp_path, 1)
    staged = xr.open_dataset(path, engine="vhdf5").vhdf5.stage()
    rewritten.clear()
    for t in range(1, 5):
        staged = staged.vhdf5.append(_day(t), dim="time")
        staged.vhdf5.commit(f"d{t}")
        assert staged.encoding[STORED_KEY]["time"].version == f"d{t}"
    staged.close()
    assert rewritten == []
    for t in range(5):
        with xr.open_dataset(path, engine="vhdf5", version=f"d{t}") as got:
            xr.testing.assert_identical(got.load(), _expected(t + 1))


def test_an_attribute_set_in_place_is_committed(tmp_path, rewritten):
    path = _file(tmp_path, 2)
    with xr.open_dataset(path, engine="vhdf5") as ds:
        staged = ds.vhdf5.stage()
        staged["lat"].attrs["long_name"] = "latitude"  # in place: the variable object is the same
        staged["lon"].variable.attrs.update(axis="X")
        staged.vhdf5.commit("attrs")
        staged.close()
    assert sorted(rewritten) == ["lat", "lon"]
    with xr.open_dataset(path, engine="vhdf5") as got:
        assert got["lat"].attrs == {"units": "degrees_north", "long_name": "latitude"}
        assert got["lon"].attrs == {"axis": "X"}


def test_new_values_of_the_same_length_are_committed(tmp_path):
    path = _file(tmp_path, 2)
    with xr.open_dataset(path, engine="vhdf5") as ds:
        staged = ds.vhdf5.stage()
        staged = staged.assign_coords(lat=("lat", staged["lat"].values[::-1], staged["lat"].attrs))
        staged.vhdf5.commit("flipped")
        staged.close()
    with xr.open_dataset(path, engine="vhdf5") as got:
        np.testing.assert_array_equal(got["lat"].values, np.linspace(50.0, -50.0, 6))
        assert got["lat"].attrs == {"units": "degrees_north"}


def test_a_changed_time_encoding_rewrites_the_axis(tmp_path, rewritten):
    path = _file(tmp_path, 2)
    with xr.open_dataset(path, engine="vhdf5") as ds:
        staged = ds.vhdf5.stage().vhdf5.append(_day(2), dim="time")
        staged["time"].encoding["units"] = "hours since 2000-01-01"
        staged.vhdf5.commit("hours")
        staged.close()
    assert rewritten == ["time"]
    with xr.open_dataset(path, engine="vhdf5") as got:
        assert got["time"].encoding["units"] == "hours since 2000-01-01"
        xr.testing.assert_identical(got.load(), _expected(3))


def test_appended_times_the_stored_units_cannot_hold_rewrite_the_axis(tmp_path, rewritten):
    path = _file(tmp_path, 2)
    noon = _day(2).assign_coords(time=_day(2).time + pd.Timedelta(hours=12))
    with xr.open_dataset(path, engine="vhdf5") as ds:
        staged = ds.vhdf5.stage().vhdf5.append(noon, dim="time")
        rewritten.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # xarray may warn that it changes the units
            staged.vhdf5.commit("noon")
        staged.close()
    assert rewritten == ["time"]  # as before the records: the whole axis re-encoded
    with xr.open_dataset(path, engine="vhdf5") as got:
        np.testing.assert_array_equal(got["time"].values, np.concatenate([_expected(2).time.values, noon.time.values]))


def test_a_record_of_another_version_is_not_used(tmp_path, rewritten):
    path = _file(tmp_path, 2)
    with xr.open_dataset(path, engine="vhdf5") as ds:
        staged = ds.vhdf5.stage()
        records = staged.encoding[STORED_KEY]
        assert records["lat"].version == "d1"
        assert records["lat"].points_kept(staged["lat"].variable, "d0", "lat") is None
        assert records["lat"].points_kept(staged["lat"].variable, "d1", "lat") == 6
        assert records["lat"].points_kept(staged["lat"].variable, "d1", "g/lat") is None
        staged.close()


def test_records_compare_bits_types_and_copies():
    var = xr.Variable(("x",), np.array([1.0, np.nan]), {"a": np.array([1, 2])}, {"dtype": np.dtype("f8")})
    record = StoredValues.of(var, "v", "x")
    assert record.points_kept(var, "v", "x") == 2  # NaN equals NaN bit for bit
    var.attrs["a"][0] = 5  # edited in place: the record kept a copy
    assert record.points_kept(var, "v", "x") is None
    var.attrs["a"][0] = 1
    var.attrs["b"] = 1
    assert record.points_kept(var, "v", "x") is None
    del var.attrs["b"]
    grown = xr.Variable(("x",), np.array([1.0, np.nan, 3.0]), var.attrs, var.encoding)
    assert record.points_kept(grown, "v", "x") == 2
    assert record.points_kept(grown[::-1], "v", "x") is None
    assert StoredValues.of(xr.Variable(("x",), np.array(["a", 1], dtype=object)), "v", "x") is None
    assert not same_value(1, 1.0) and not same_value(np.float32(1), np.float64(1))
    assert same_value({"u": (1, "a")}, {"u": (1, "a")}) and not same_value({"u": 1}, {"v": 1})


def test_a_staged_variable_keeps_its_stored_attributes_until_edited(tmp_path):
    path = _file(tmp_path, 2)
    with xr.open_dataset(path, engine="vhdf5") as ds:
        staged = ds.vhdf5.stage()
        assert staged.encoding[STORED_KEY]["sst"].values is None  # metadata only: the values are staged
        staged["sst"][0, 0, 0] = 1.5
        staged.vhdf5.commit("point")
        staged["sst"].attrs["units"] = "degC"  # in place, after a commit renewed the record
        staged["sst"][0, 0, 1] = 2.5
        staged.vhdf5.commit("units")
        staged.close()
    with xr.open_dataset(path, engine="vhdf5", version="point") as got:
        assert got["sst"].attrs == {} and float(got["sst"][0, 0, 0]) == 1.5
    with xr.open_dataset(path, engine="vhdf5", version="units") as got:
        assert got["sst"].attrs == {"units": "degC"} and float(got["sst"][0, 0, 1]) == 2.5


def test_a_new_coordinate_is_listed_on_the_staged_variable(tmp_path):
    path = _file(tmp_path, 2)
    with xr.open_dataset(path, engine="vhdf5") as ds:
        staged = ds.vhdf5.stage()
        staged = staged.assign_coords(flag=("time", np.array([1, 2], dtype="i4")))
        staged.vhdf5.commit("flag")
        staged.close()
    with xr.open_dataset(path, engine="vhdf5") as got:
        assert "flag" in got.coords and "flag" not in got.data_vars
