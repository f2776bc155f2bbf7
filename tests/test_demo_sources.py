"""``vhdf5 demo --source`` on the real CF files of ``tests/data/cf`` (sources in its README).

A demo on a file with a time-like dimension works, or refuses before writing anything;
whatever happens, no partial file is left behind.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from click.testing import CliRunner

import xarray_vhdf5.cli._demo as demo
from xarray_vhdf5.cli._main import cli

DATA = Path(__file__).parent / "data" / "cf"

#: file -> (record dimension the demo must find, its steps)
RECORD_FILES = {
    "sub.nc": ("time", 10),  # packed int16, not unlimited
    "timeseries.nc": ("time", 20),  # stations; time is the last axis
    "c201923412.out1_4.nc": ("time", 1),  # 2-D lat/lon, missing_value without _FillValue
    "lcc_km.nc": ("time", 1),  # netCDF-4 classic
    "metdata_day_subset.nc": ("day", 5),  # `day`: standard_name time, days since 1900
}


def _run(source: Path, out: Path):
    return CliRunner().invoke(cli, ["demo", "--source", str(source), "--out", str(out)])


@pytest.mark.parametrize("name", sorted(RECORD_FILES))
def test_demo_versions_every_record_file(name, tmp_path):
    dim, steps = RECORD_FILES[name]
    out = tmp_path / "demo.h5"
    result = _run(DATA / name, out)
    assert result.exit_code == 0, result.output
    assert f"record dimension {dim!r}: {steps} steps" in result.output
    assert f"verified: all {steps + 1} versions read back identical to the source" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo.h5"]
    with (
        xr.open_dataset(out, engine="vhdf5", version="qc-1", decode_times=False) as qc,
        xr.open_dataset(out, engine="vhdf5", version=f"{dim}-{steps:03d}", decode_times=False) as last,
    ):
        changed = [n for n in qc.data_vars if not qc[n].equals(last[n])]
    assert len(changed) == 1, changed  # the QC version corrects one variable


@pytest.mark.filterwarnings("ignore:String dimension naming mismatch")  # xarray's, as in to_netcdf
def test_demo_on_stations_with_char_names(tmp_path):
    """Char station names, and an int32 variable decoded to float (its QC step is a whole unit)."""
    result = _run(DATA / "example_huc_eta.nc", tmp_path / "demo.h5")
    assert result.exit_code == 0, result.output
    assert "verified: all 26 versions" in result.output


def test_record_dimension_is_found_by_its_attributes():
    ds = xr.Dataset(coords={"day": ("day", [1.0, 2.0], {"units": "days since 1900-01-01"}), "x": [0, 1]})
    assert demo.record_dimension(ds) == "day"
    ds = xr.Dataset(coords={"t": ("t", [0.0], {"standard_name": "time"}), "x": [0, 1]})
    assert demo.record_dimension(ds) == "t"
    ds = xr.Dataset(coords={"d": ("d", np.array(["2001-01-01"], "datetime64[ns]")), "x": [0, 1]})
    assert demo.record_dimension(ds) == "d"
    ds = xr.Dataset(coords={"depth": ("depth", [1.0], {"units": "m"}), "x": [0, 1]})
    assert demo.record_dimension(ds) is None


def test_demo_refuses_a_file_without_record_dimension_and_writes_nothing(tmp_path):
    result = _run(DATA / "bears.nc", tmp_path / "demo.h5")
    assert result.exit_code != 0 and "has no record dimension" in result.output
    assert list(tmp_path.iterdir()) == []


def test_demo_refuses_a_file_without_valid_point_up_front(tmp_path):
    """Every value missing: refused before any version is written (it used to fail after them all)."""
    src = tmp_path / "src" / "empty.nc"
    src.parent.mkdir()
    xr.Dataset(
        {"sst": (("time", "lat"), np.full((3, 4), np.nan, "f4"))},
        coords={"time": ("time", [0.0, 1.0, 2.0], {"units": "days since 2000-01-01"}), "lat": np.arange(4.0)},
    ).to_netcdf(src, engine="h5netcdf")
    out = tmp_path / "out" / "demo.h5"
    out.parent.mkdir()
    result = _run(src, out)
    assert result.exit_code != 0 and "no float variable along its record dimension 'time' has a valid" in result.output
    assert list(out.parent.iterdir()) == []


def test_demo_corrects_the_last_step_that_has_a_valid_point(tmp_path):
    src = tmp_path / "src.nc"
    sst = np.arange(12, dtype="f4").reshape(3, 4)
    sst[2] = np.nan  # the last step is all missing: the QC goes to step 2
    xr.Dataset(
        {"sst": (("time", "lat"), sst)},
        coords={"time": ("time", [0.0, 1.0, 2.0], {"units": "days since 2000-01-01"}), "lat": np.arange(4.0)},
    ).to_netcdf(src, engine="h5netcdf")
    result = _run(src, tmp_path / "demo.h5")
    assert result.exit_code == 0, result.output
    assert "bias correction of sst on a 10 patch of time step 2 of 3" in result.output
    with xr.open_dataset(tmp_path / "demo.h5", engine="vhdf5", version="qc-1", decode_times=False) as qc:
        np.testing.assert_array_equal(qc["sst"].values[1], sst[1] + 0.5)
        np.testing.assert_array_equal(qc["sst"].values[[0, 2]], sst[[0, 2]])


def test_a_demo_that_fails_midway_leaves_no_file(tmp_path, monkeypatch):
    from xarray_vhdf5.xr import _writer as writer

    calls = []
    real = writer.commit_dataset

    def failing(*args, **kwargs):
        calls.append(args[2])
        if len(calls) == 4:
            raise OSError("disk full (injected)")
        return real(*args, **kwargs)

    monkeypatch.setattr(writer, "commit_dataset", failing)
    result = _run(DATA / "sub.nc", tmp_path / "demo.h5")
    assert result.exit_code != 0 and len(calls) == 4
    assert list(tmp_path.iterdir()) == []
