"""Round trips of the real NOAA files (netCDF-3, year-zero time units, -1e34 fill values)."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import xarray as xr

FILES = ["coads_climatology.cdf", "ocean_atlas_subset.nc", "esku_heat_budget.cdf", "etopo20.cdf", "etopo5.cdf"]


@pytest.mark.parametrize(
    "name",
    # etopo5.cdf (37 MB, the layout of etopo20.cdf) in the slow run: the suite stays under 5 minutes
    [pytest.param(n, marks=pytest.mark.slow) if n == "etopo5.cdf" else n for n in FILES],
)
def test_round_trip(noaa_dir, tmp_path, name):
    src = xr.open_dataset(noaa_dir / name, decode_times=False)
    out = tmp_path / "out.h5"
    src.vhdf5.commit("v1", path=out)
    with xr.open_dataset(out, engine="vhdf5", decode_times=False) as got:
        xr.testing.assert_identical(got, src)
        for var in src.variables:  # extra attributes (modulo, time_origin, ...) survive
            assert got[var].attrs == src[var].attrs
    # Undecoded, the file holds what xarray's netCDF-4 writer would store (the raw
    # -1e34 fill values, year-zero units, and xarray's default NaN _FillValue on
    # float coordinates): the same Dataset through h5netcdf is the oracle.
    nc = tmp_path / "oracle.nc"
    src.to_netcdf(nc, engine="h5netcdf")
    with (
        xr.open_dataset(nc, engine="h5netcdf", decode_times=False, mask_and_scale=False) as oracle,
        xr.open_dataset(out, engine="vhdf5", decode_times=False, mask_and_scale=False) as got,
    ):
        xr.testing.assert_identical(got, oracle)


def test_coads_time_units_and_missing(noaa_dir, tmp_path):
    src = xr.open_dataset(noaa_dir / "coads_climatology.cdf", decode_times=False)
    out = tmp_path / "coads.h5"
    src.vhdf5.commit("v1", path=out)
    with xr.open_dataset(out, engine="vhdf5", decode_times=False) as got:
        assert got["TIME"].attrs["units"].startswith("hour since 0000-01-01")
        frac = float(np.isnan(got["SST"]).mean())
        assert 0.4 < frac < 0.5  # about 46% of COADS SST is land
    with h5py.File(out) as f:
        assert f["_version_data/SST/raw_data"].fillvalue == np.float32(-1e34)


def test_qc_edit_writes_only_changed_chunks(noaa_dir, tmp_path):
    src = xr.open_dataset(noaa_dir / "coads_climatology.cdf", decode_times=False).load()
    out = tmp_path / "coads.h5"
    src.vhdf5.commit("v1", path=out)
    with h5py.File(out) as f:
        rows = {k: int(f[f"_version_data/{k}/hash_table"].attrs["largest_index"]) for k in src.variables}
    fixed = src.copy(deep=True)
    fixed["SST"][5, 40:50, 60:70] += 0.5  # one month's patch: one chunk of (1, 90, 180)
    fixed.vhdf5.commit("v2", path=out)
    with h5py.File(out) as f:
        after = {k: int(f[f"_version_data/{k}/hash_table"].attrs["largest_index"]) for k in src.variables}
    assert after["SST"] == rows["SST"] + 1
    assert {k: v for k, v in after.items() if k != "SST"} == {k: v for k, v in rows.items() if k != "SST"}
    with xr.open_dataset(out, engine="vhdf5", version="v1", decode_times=False) as v1:
        xr.testing.assert_identical(v1, src)
    with xr.open_dataset(out, engine="vhdf5", decode_times=False) as v2:
        xr.testing.assert_identical(v2, fixed)
