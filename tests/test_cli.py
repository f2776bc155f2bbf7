"""The vhdf5 command line: demo (embedded data and NOAA files) and log."""

from __future__ import annotations

import h5py
import pytest
from click.testing import CliRunner

import xarray_vhdf5 as xv
from xarray_vhdf5.cli.main import cli

#: NOAA files with a record (TIME) dimension, the ones the demo versions.
NOAA_RECORD_FILES = ["coads_climatology.cdf", "ocean_atlas_subset.nc", "esku_heat_budget.cdf"]


def test_demo_on_embedded_data(tmp_path):
    out = tmp_path / "demo.h5"
    result = CliRunner().invoke(cli, ["demo", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "verified: all 13 versions read back identical" in result.output
    assert "one netCDF file per version" in result.output
    with h5py.File(out) as f:
        vf = xv.VersionedHDF5File(f)
        assert vf.versions[-1] == "qc-1" and len(vf) == 13
    # QC version adds exactly the chunk it corrected; appends one chunk per variable.
    log = CliRunner().invoke(cli, ["log", str(out)])
    assert log.exit_code == 0, log.output
    lines = {line.split()[0]: line.split() for line in log.output.splitlines()[2:]}
    assert lines["qc-1"][4] == "1"          # new chunks
    assert lines["time-002"][4] == "3"      # SST, AIRT and the TIME coordinate


@pytest.mark.parametrize("name", NOAA_RECORD_FILES)
def test_demo_on_noaa_files(noaa_dir, tmp_path, name):
    out = tmp_path / "demo.h5"
    result = CliRunner().invoke(cli, ["demo", "--source", str(noaa_dir / name), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "read back identical to the source" in result.output


def test_demo_refuses_file_without_record_dimension(noaa_dir, tmp_path):
    result = CliRunner().invoke(cli, ["demo", "--source", str(noaa_dir / "etopo20.cdf"), "--out", str(tmp_path / "x.h5")])
    assert result.exit_code != 0
    assert "has no record dimension" in result.output


def test_demo_refuses_existing_output(tmp_path):
    out = tmp_path / "demo.h5"
    out.write_bytes(b"")
    result = CliRunner().invoke(cli, ["demo", "--out", str(out)])
    assert result.exit_code != 0 and "exists" in result.output


def test_log_of_a_plain_file_is_an_error(tmp_path):
    plain = tmp_path / "plain.h5"
    with h5py.File(plain, "w") as f:
        f["x"] = [1, 2]
    result = CliRunner().invoke(cli, ["log", str(plain)])
    assert result.exit_code != 0 and "not a versioned HDF5 file" in result.output
