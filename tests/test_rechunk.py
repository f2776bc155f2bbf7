"""Rechunking a history, exporting, splitting and merging on the resplit engine (issue 22).

Every operation is checked against the values read before it (and, for the
rechunked history, against versioned-hdf5 2.6 reading and extending the file),
and through its counters: each stored chunk read once.
"""

from __future__ import annotations

import os

import h5py
import netCDF4
import numpy as np
import pytest
import versioned_hdf5
import xarray as xr
from click.testing import CliRunner

import xarray_vhdf5
from xarray_vhdf5._versions import modify_metadata
from xarray_vhdf5._versions.rechunk import rechunk
from xarray_vhdf5.cli._main import cli
from xarray_vhdf5.errors import DatasetNotFoundError, IncompatibleDataError, MemoryBudgetError
from xarray_vhdf5.xr._export import export_netcdf, export_zarr, merge_files, split_version

COADS = os.path.join(os.path.dirname(xarray_vhdf5.__file__), "data", "coads_sst_airt.nc")


def _history(path, *, compression=None) -> dict[str, np.ndarray]:
    """Daily appends of two (12, 16) slabs stored (1, 12, 16), a QC fix in between; each version's values."""
    data = np.random.default_rng(0).random((20, 12, 16)).astype("f4")
    values = {}
    with h5py.File(path, "w") as f:
        vf = xarray_vhdf5.VersionedHDF5File(f)
        with vf.stage_version("d1") as g:
            g.create_dataset("sst", data=data[:8], chunks=(1, 12, 16), compression=compression, fillvalue=-1.0)
        current = data[:8].copy()
        values["d1"] = current.copy()
        for k in range(2, 7):
            n = 8 + 2 * (k - 1)
            with vf.stage_version(f"d{k}") as g:
                g["sst"].resize((n, 12, 16))
                g["sst"][n - 2 : n] = data[n - 2 : n]
                if k == 4:
                    g["sst"][3, :5, :5] = 99.0  # a QC fix of an old day
            current = np.concatenate([current, data[n - 2 : n]])
            if k == 4:
                current[3, :5, :5] = 99.0
            values[f"d{k}"] = current.copy()
    with h5py.File(path, "r") as f:  # the model agrees with what was committed
        vf = xarray_vhdf5.VersionedHDF5File(f)
        for name, expected in values.items():
            np.testing.assert_array_equal(vf[name]["sst"][()], expected)
    return values


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_rechunk_rewrites_every_version_reading_each_chunk_once(tmp_path, compression):
    path = tmp_path / "h.h5"
    values = _history(path, compression=compression)
    with h5py.File(path, "r+") as f:
        report = rechunk(xarray_vhdf5.VersionedHDF5File(f), "sst", (7, 5, 16), max_mem="64kB")
    assert report.chunks_before == (1, 12, 16) and report.chunks_after == (7, 5, 16)
    assert sorted(report.versions) == sorted(values)
    assert report.reads_per_input_chunk == 1.0
    assert report.counters.peak_buffer_bytes <= max(p.predicted_peak for p in report.plans) <= 64_000
    # chunks an earlier version already produced are not read again: fewer reads than all versions' chunks
    assert report.counters.input_reads < sum(v.shape[0] for v in values.values())
    with h5py.File(path, "r") as f:
        ours = xarray_vhdf5.VersionedHDF5File(f)
        theirs = versioned_hdf5.VersionedHDF5File(f)
        for name, expected in values.items():
            assert ours[name]["sst"].chunks == (7, 5, 16)
            np.testing.assert_array_equal(ours[name]["sst"][()], expected)
            np.testing.assert_array_equal(theirs[name]["sst"][()], expected)
    # versioned-hdf5 commits on top of the rechunked history, in the new chunks
    with h5py.File(path, "r+") as f:
        with versioned_hdf5.VersionedHDF5File(f).stage_version("vh") as g:
            g["sst"][0, 0, 0] = 5.0
    with h5py.File(path, "r") as f:
        got = xarray_vhdf5.VersionedHDF5File(f)["vh"]["sst"][()]
    expected = values["d6"].copy()
    expected[0, 0, 0] = 5.0
    np.testing.assert_array_equal(got, expected)


def test_modify_metadata_refuses_a_budget_below_the_minimum_before_writing(tmp_path):
    path = tmp_path / "h.h5"
    values = _history(path)
    with h5py.File(path, "r+") as f, pytest.raises(MemoryBudgetError, match="minimum of this rechunk") as info:
        modify_metadata(f, "sst", chunks=(20, 12, 16), max_mem=1000)
    assert info.value.minimum == (2 * 12 * 16 + 20 * 12 * 16) * 4
    with h5py.File(path, "r") as f:
        assert list(f["_version_data/sst"]) == ["hash_table", "raw_data"]  # no new raw_data begun
        vf = xarray_vhdf5.VersionedHDF5File(f)
        for name, expected in values.items():
            assert vf[name]["sst"].chunks == (1, 12, 16)
            np.testing.assert_array_equal(vf[name]["sst"][()], expected)


def test_rechunk_errors(tmp_path):
    path = tmp_path / "h.h5"
    _history(path)
    with h5py.File(path, "r+") as f:
        with pytest.raises(DatasetNotFoundError, match="no versioned dataset 'nope'"):
            rechunk(f, "nope", (1, 1, 1))
        with pytest.raises(IncompatibleDataError, match="one size per axis"):
            rechunk(f, "sst", (4, 4))
        with pytest.raises(IncompatibleDataError, match="positive"):
            rechunk(f, "sst", (0, 4, 4))
        with pytest.raises(ValueError, match="size in bytes"):
            rechunk(f, "sst", (4, 4, 4), max_mem="a lot")


@pytest.fixture
def coads(tmp_path):
    """The NOAA COADS subset as two versions (the second with a QC fix), opened raw."""
    path = tmp_path / "coads.h5"
    ds = xr.open_dataset(COADS, decode_times=False)
    ds.vhdf5.commit("v1", path=path)
    fixed = ds.copy(deep=True)
    fixed["SST"][0, :10, :10] = 20.0
    fixed.vhdf5.commit("v2", path=path)
    return path, ds.load(), fixed.load()


def test_accessor_rechunk_keeps_every_version_and_the_file_size(coads):
    path, v1, v2 = coads
    size = os.path.getsize(path)
    ds = xr.open_dataset(path, engine="vhdf5", decode_times=False)
    out = ds.vhdf5.rechunk({"TIME": -1, "COADSY": 30}, max_mem="1MB")
    assert out.SST.encoding["chunks"] == (12, 30, 45) and out.AIRT.encoding["chunks"] == (12, 30, 45)
    assert out.encoding["vhdf5_rechunk"]["SST"].reads_per_input_chunk == 1.0
    for version, expected in (("v1", v1), ("v2", v2)):
        got = xr.open_dataset(path, engine="vhdf5", version=version, decode_times=False)
        xr.testing.assert_identical(got.load(), expected)
    assert os.path.getsize(path) <= 1.05 * size  # rewritten into the old raw_data's space


def test_export_netcdf_and_zarr_round_trip(coads, tmp_path):
    path, v1, v2 = coads
    nc = tmp_path / "v1.nc"
    report = export_netcdf(path, nc, version="v1", chunks={"TIME": -1, "COADSY": 16, "COADSX": 16}, max_mem="1MB")
    assert report.version == "v1" and report.reads_per_input_chunk == 1.0
    assert report.counters["SST"].input_reads == 4 * 4 * 4  # the stored (3, 23, 45) chunks, each once
    back = xr.open_dataset(nc, decode_times=False)
    xr.testing.assert_identical(back.load(), v1)
    assert back.SST.encoding["chunksizes"] == (12, 16, 16)
    with netCDF4.Dataset(nc) as d:  # netCDF-C reads it as a plain netCDF-4 file
        assert d.data_model == "NETCDF4"
        np.testing.assert_array_equal(d["SST"][:].filled(np.nan), v1.SST.values)
    store = tmp_path / "v2.zarr"
    report = export_zarr(path, store, chunks=(12, 30, 30), max_mem="1MB")
    assert report.version == "v2"
    z = xr.open_zarr(store, decode_times=False)  # consolidated, as to_zarr writes: no warning (errors here)
    xr.testing.assert_identical(z.load(), v2)
    assert z.SST.encoding["chunks"] == (12, 30, 30)
    with pytest.raises(FileExistsError, match="exists"):
        export_netcdf(path, nc)


def test_export_refuses_unknown_dimensions_and_small_budgets(coads, tmp_path):
    path, _, _ = coads
    with pytest.raises(IncompatibleDataError, match=r"dimensions \['time'\] the version does not have"):
        export_netcdf(path, tmp_path / "x.nc", chunks={"time": 4})
    with pytest.raises(MemoryBudgetError, match="minimum"):
        export_netcdf(path, tmp_path / "y.nc", chunks={"TIME": -1, "COADSY": -1, "COADSX": -1}, max_mem="10kB")


def test_split_and_merge_round_trip(coads, tmp_path):
    path, _, v2 = coads
    folder = tmp_path / "blocks"
    split = split_version(path, folder, {"TIME": 5, "COADSX": 100})
    assert len(split.files) == 3 * 2 and all(os.path.exists(p) for p in split.files)
    assert split.counters["SST"].input_reads == 64 and split.reads_per_input_chunk == 1.0
    parts = xr.open_mfdataset(split.files, combine="by_coords", decode_times=False)
    xr.testing.assert_identical(parts.load(), v2)
    first = xr.open_dataset(split.files[0], decode_times=False)
    assert first.sizes == {"TIME": 5, "COADSY": 90, "COADSX": 100}
    merged = tmp_path / "merged.h5"
    report = merge_files(folder, merged, "all", chunks={"TIME": 12, "COADSY": 45, "COADSX": 45}, max_mem="4MB")
    assert report.counters["SST"].input_reads == 6  # each file's block read once
    got = xr.open_dataset(merged, engine="vhdf5", decode_times=False)
    xr.testing.assert_identical(got.load(), v2)
    assert got.SST.encoding["chunks"] == (12, 45, 45)


def test_cli_rechunk_export_split_ingest(coads, tmp_path):
    path, v1, v2 = coads
    run = CliRunner().invoke
    before = path.read_bytes()
    args = ["rechunk", str(path), "SST", "--chunks", "TIME=-1,COADSY=45,COADSX=45", "--max-mem", "4MB"]
    result = run(cli, [*args, "--dry-run"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("SST: <ResplitPlan shape (12, 90, 180)") and "reads 64" in result.output
    assert path.read_bytes() == before  # nothing written
    result = run(cli, args)
    assert result.exit_code == 0, result.output
    assert "(3, 23, 45) -> (12, 45, 45) in 2 versions" in result.output and "1.00 per needed chunk" in result.output
    xr.testing.assert_identical(xr.open_dataset(path, engine="vhdf5", version="v1", decode_times=False).load(), v1)
    nc = tmp_path / "v1.nc"
    result = run(cli, ["export", str(path), "--version", "v1", "--chunks", "12,10,10", "--to", str(nc)])
    assert result.exit_code == 0, result.output
    assert "version v1 ->" in result.output and "(1.00 per chunk)" in result.output
    xr.testing.assert_identical(xr.open_dataset(nc, decode_times=False).load(), v1)
    result = run(cli, ["export", str(path), "--to", str(nc)])
    assert result.exit_code != 0 and "exists" in result.output
    folder = tmp_path / "months"
    result = run(cli, ["export", str(path), "--split", "TIME=3", "--to", str(folder)])
    assert result.exit_code == 0, result.output
    assert "4 files in" in result.output
    into = tmp_path / "ingested.h5"
    result = run(cli, ["ingest", str(folder), "--into", str(into), "--version", "months", "--message", "merged"])
    assert result.exit_code == 0, result.output
    xr.testing.assert_identical(xr.open_dataset(into, engine="vhdf5", decode_times=False).load(), v2)
    result = run(cli, ["rechunk", str(path), "SST", "--chunks", "12,90,180", "--max-mem", "1kB"])
    assert result.exit_code != 0 and "below the minimum" in result.output
    result = run(cli, ["rechunk", str(path), "SST", "--chunks", "a,b"])
    assert result.exit_code != 0 and "expected sizes such as" in result.output


def test_export_of_a_group_writes_that_group(tmp_path):
    """A Dataset opened with ``group=`` exports and splits that group, not the version's root."""
    path = tmp_path / "g.h5"
    inner = xr.Dataset(
        {"t": (("time", "x"), np.arange(24.0).reshape(6, 4))}, coords={"time": np.arange(6), "x": np.arange(4)}
    )
    xr.Dataset({"root_only": ("y", np.arange(3.0))}).vhdf5.commit("v1", path=path)
    inner.vhdf5.commit("v2", path=path, group="station")
    opened = xr.open_dataset(path, engine="vhdf5", group="station")
    report = opened.vhdf5.export(tmp_path / "station.nc", chunks={"time": 3})
    assert report.counters["t"].input_reads >= 1
    got = xr.open_dataset(tmp_path / "station.nc")
    xr.testing.assert_identical(got.load(), opened.load())
    assert "root_only" not in got
    parts = opened.vhdf5.split(tmp_path / "parts", {"time": 2})
    assert len(parts.files) == 3
    xr.testing.assert_identical(xr.open_mfdataset(parts.files, combine="by_coords").load(), opened.load())


def test_export_of_an_empty_variable(tmp_path):
    """A variable with a zero-length dimension has no chunk to resplit: it is created, empty."""
    path = tmp_path / "e.h5"
    xr.Dataset({"a": (("t", "x"), np.zeros((0, 4), "f4")), "b": ("x", np.arange(4.0))}).vhdf5.commit("v1", path=path)
    opened = xr.open_dataset(path, engine="vhdf5")
    opened.vhdf5.export(tmp_path / "e.nc")
    xr.testing.assert_identical(xr.open_dataset(tmp_path / "e.nc").load(), opened.load())
    opened.vhdf5.export(tmp_path / "e.zarr")
    xr.testing.assert_identical(xr.open_zarr(tmp_path / "e.zarr").load(), opened.load())


@pytest.mark.parametrize("filters", [{"compression": "lzf"}, {"scaleoffset": 0}])
def test_version_chunk_reader_reads_what_libhdf5_reads(tmp_path, filters):
    """Chunks the manifest decodes (lzf) and chunks it leaves to h5py (scale-offset) read the same."""
    from xarray_vhdf5.resplit import plan_resplit, resplit_into, version_chunk_reader

    path = tmp_path / "f.h5"
    data = np.arange(30 * 14, dtype="i4").reshape(30, 14) % 97
    with h5py.File(path, "w") as f:
        with xarray_vhdf5.VersionedHDF5File(f).stage_version("v1") as g:
            g.create_dataset("x", data=data, chunks=(4, 5), **filters)
    with h5py.File(path, "r") as f:
        read_chunk, chunks = version_chunk_reader(f["_version_data/versions/v1/x"])
        assert chunks == (4, 5)
        out = np.zeros_like(data)
        plan = plan_resplit(data.shape, chunks, (30, 3), 4, "1MB")
        counters = resplit_into(plan, read_chunk, out)
    np.testing.assert_array_equal(out, data)
    assert counters.input_reads == 8 * 3
