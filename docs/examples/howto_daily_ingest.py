"""How-to: a daily ingest, one version a day. Run by docs/conf.py at every build."""

# [start-day]
import numpy as np
import pandas as pd
import xarray as xr

import xarray_vhdf5

lat = np.arange(-89.0, 90.0, 2.0)
lon = np.arange(-179.0, 180.0, 2.0)


def day(date: str) -> xr.Dataset:
    """One day of a (time, lat, lon) float32 field, as a daily feed delivers it."""
    rng = np.random.default_rng(pd.Timestamp(date).day_of_year)
    sst = (15 + rng.standard_normal((1, lat.size, lon.size))).astype("float32")
    return xr.Dataset(
        {"sst": (("time", "lat", "lon"), sst, {"units": "degC"})},
        coords={"time": pd.DatetimeIndex([date]), "lat": lat, "lon": lon},
    )


# [end-day]


# [start-ingest]
dates = [str(d.date()) for d in pd.date_range("2024-06-01", periods=10)]
first = day(dates[0])
first.encoding["unlimited_dims"] = {"time"}  # time grows: chunks sized for appends
first.vhdf5.commit(dates[0], path="sst.h5", message="day 1")
for date in dates[1:]:
    day(date).vhdf5.commit(date, path="sst.h5", append_dim="time")
# [end-ingest]

# [start-check]
latest = xr.open_dataset("sst.h5", engine="vhdf5")
print(latest.sizes["time"], latest.vhdf5.version)
june_3 = xr.open_dataset("sst.h5", engine="vhdf5", version="2024-06-03")
print(june_3.sizes["time"])
# [end-check]
assert latest.sizes["time"] == 10 and june_3.sizes["time"] == 3
xr.testing.assert_equal(latest.isel(time=[4]), day(dates[4]))

# [start-kept-open]
more = [str(d.date()) for d in pd.date_range("2024-06-11", periods=5)]
staged = xr.open_dataset("sst.h5", engine="vhdf5").vhdf5.stage()
for date in more:
    staged = staged.vhdf5.append(day(date), dim="time")
    staged.vhdf5.commit(date)  # staged is rebased on the new version
# [end-kept-open]
assert xr.open_dataset("sst.h5", engine="vhdf5").sizes["time"] == 15

# [start-late-fix]
fix = day("2024-06-04")
fix["sst"][:] = fix["sst"].where(fix["sst"] < 17.5)  # the provider masks outliers
fix = fix.drop_vars(["lat", "lon"])
fix.vhdf5.commit("2024-06-04-reissued", path="sst.h5", region="auto")
# [end-late-fix]
after = xr.open_dataset("sst.h5", engine="vhdf5")
assert int(after["sst"].sel(time="2024-06-04").isnull().sum()) > 0
assert int(after["sst"].sel(time="2024-06-05").isnull().sum()) == 0
print(xarray_vhdf5.xr.version_log_frame("sst.h5")[["parent", "new_chunks"]].tail(3).to_string())
