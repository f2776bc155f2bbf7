"""The README's Python examples run as written, in order, and do what their comments say.

Each ```python block of ``README.md`` is executed in one namespace in a temporary
directory. The prelude makes what the examples take as given: ``sst.nc`` (four
days of a small (time, lat, lon) ``sst`` and a ``old`` variable) and ``today`` (one
more day of ``sst``). The assertions check the files and versions the examples made.
"""

from __future__ import annotations

import re
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import xarray as xr

import xarray_vhdf5

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def _source() -> xr.Dataset:
    rng = np.random.default_rng(0)
    return xr.Dataset(
        {
            "sst": (("time", "lat", "lon"), rng.normal(20, 2, (4, 18, 36)).astype("f4")),
            "old": (("time",), np.arange(4.0)),
        },
        coords={
            "time": pd.date_range("2024-05-30", periods=4, freq="D"),
            "lat": np.linspace(-85, 85, 18),
            "lon": np.linspace(0, 350, 36),
        },
    )


def test_readme_examples_run_as_written(tmp_path, monkeypatch):
    blocks = _blocks()
    assert len(blocks) == 11, "README examples changed: update this test"
    monkeypatch.chdir(tmp_path)
    src = _source()
    src.to_netcdf("sst.nc", engine="h5netcdf")
    today = src[["sst"]].isel(time=[-1]).assign_coords(time=[np.datetime64("2024-06-03")])
    ns: dict = {"today": today}
    try:
        for block in blocks:
            exec(compile(block, str(README), "exec"), ns)
    finally:
        if isinstance(ns.get("f"), h5py.File):
            ns["f"].close()
        for name in ("ds", "latest", "old", "prev", "dask", "v1", "paper", "days", "remote", "first", "rechunked"):
            if isinstance(ns.get(name), xr.Dataset):
                ns[name].close()

    # Quick start: two versions, the second with the QC fix.
    fixed = src["sst"].values.copy()
    fixed[0, :10, :10] = 15.0
    np.testing.assert_array_equal(ns["latest"]["sst"].values, fixed)
    np.testing.assert_array_equal(ns["old"]["sst"].values, src["sst"].values)
    np.testing.assert_array_equal(ns["prev"]["sst"].values, src["sst"].values)
    assert ns["dask"]["sst"].chunks is not None
    # h5py level: v1 kept, v2 edited.
    with h5py.File("data.h5", "r") as f:
        vf = xarray_vhdf5.VersionedHDF5File(f)
        assert vf.versions == ["v1", "v2", "v3"]
        assert vf["v1"]["x"][0] == 0 and vf["v2"]["x"][0] == -1
        # Sharing a file: v3 committed through open_file (journaled), its journal gone.
        assert vf["v3"]["x"][0] == 3 and vf["v3"]["x"][1] == 1
    assert not Path("data.h5-journal").exists()
    # Reading while others write: a reader, closed at the end of its block.
    assert ns["reader"].closed and ns["x"].name == "/_version_data/versions/v1/x" and ns["x"].shape == (10_000,)
    # Stage, edit, append, commit: a third version with the edits and one more day.
    with xr.open_dataset("sst.h5", engine="vhdf5", version=ns["name"]) as third:
        assert third.sizes["time"] == 5 and "old" not in third and "anomaly" in third
        sst = third["sst"].values
        assert (sst[0, :10, :10] == 15.0).all()
        assert (sst[2] == 0.0).all()  # 2024-06-01 (days from 2024-05-30)
        np.testing.assert_array_equal(sst[4], today["sst"].values[0])
        assert third["sst"].attrs["comment"] == "QC"
    with xr.open_dataset("sst.h5", engine="vhdf5") as current:
        assert current.encoding["vhdf5_version"] == ns["name"]
    # The metadata-cache setting and the netCDF view of a version.
    assert ns["config"].max_size == 64 * 1024
    np.testing.assert_array_equal(ns["v1"]["sst"].values, src["sst"].values)

    # Branches, tags and merges: the QC patch and main's edit both in the merge, tagged.
    report = ns["report"]
    assert report.version == "merged" and report.base == "received" and report.datasets == {"SST": "theirs"}
    assert xarray_vhdf5.list_tags("coads.h5") == {"paper-2026": "merged"}
    assert xarray_vhdf5.list_branches("coads.h5") == {"main": "merged", "qc": "qc-bias"}
    with (
        xr.open_dataset("coads.h5", engine="vhdf5", version="received", decode_times=False) as received,
        xr.open_dataset("coads.h5", engine="vhdf5", version="paper-2026", decode_times=False) as paper,
    ):
        sst, want = paper["SST"].values, received["SST"].values.copy()
        want[-1, 40:50, 60:70] += np.float32(0.5)
        np.testing.assert_array_equal(sst, want)
        assert paper["AIRT"].values[0, 45, 60] == 20.0
        np.testing.assert_array_equal(paper["AIRT"].values[1:], received["AIRT"].values[1:])

    # From the zarr world: three versions through the store, read back four ways.
    with (
        xr.open_dataset("zarr.h5", engine="vhdf5", version="day-4") as day4,
        xr.open_dataset("zarr.h5", engine="vhdf5", version="day-1-fixed") as fixed,
    ):
        np.testing.assert_array_equal(day4["sst"].values, src["sst"].values)
        want = src["sst"].values.copy()
        want[0] += np.float32(0.5)
        np.testing.assert_array_equal(fixed["sst"].transpose("time", "lat", "lon").values, want)
        xr.testing.assert_identical(ns["remote"].load(), day4.load())
    assert ns["first"].sizes["time"] == 3
    with h5py.File("zarr.h5", "r") as f:
        assert xarray_vhdf5.VersionedHDF5File(f).versions == ["day-3", "day-4", "day-1-fixed"]

    # Rechunking and exporting: sst.h5's current version in new chunks, every version unchanged,
    # and its Zarr export equal to it.
    with xr.open_dataset("sst.h5", engine="vhdf5") as current:
        assert current["sst"].encoding["chunks"] == (365, 16, 16)  # room for the appends to come
        with xr.open_zarr("sst.zarr", consolidated=False) as exported:
            xr.testing.assert_identical(exported.load(), current.load())
    with xr.open_dataset("sst.h5", engine="vhdf5", version=ns["name"]) as third:
        np.testing.assert_array_equal(third["sst"].values[4], today["sst"].values[0])
