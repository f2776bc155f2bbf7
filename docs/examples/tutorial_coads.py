"""Tutorial: six months of NOAA's COADS climatology as versions, a QC fix, a diff plot.

Run by docs/conf.py at every build (docs/tutorial.md shows it piece by piece). Writes
the figure and the version log table into $VHDF5_DOCS_OUT. Imports stand in the piece
that first needs them, as the page shows them.
"""
# ruff: noqa: E402

import os
from pathlib import Path

out = Path(os.environ.get("VHDF5_DOCS_OUT", "."))

# [start-ingest]
from importlib import resources

import xarray as xr

import xarray_vhdf5  # registers engine="vhdf5" and the .vhdf5 accessor

coads = resources.files("xarray_vhdf5") / "data" / "coads_sst_airt.nc"
# COADS counts hours since year 0000, which xarray decodes only with cftime: keep numbers
source = xr.open_dataset(coads, decode_times=False).load()

first = source.isel(TIME=[0])
for name in ("SST", "AIRT"):
    first[name].encoding["chunks"] = (1, 45, 90)  # a month in four chunks
first.vhdf5.commit("month-01", path="coads.h5", message="January")
for month in range(1, 6):
    current = xr.open_dataset("coads.h5", engine="vhdf5", decode_times=False)
    grown = current.vhdf5.stage().vhdf5.append(source.isel(TIME=[month]), dim="TIME")
    grown.vhdf5.commit(f"month-{month + 1:02d}", message=f"month {month + 1}")
# [end-ingest]
assert xr.open_dataset("coads.h5", engine="vhdf5", decode_times=False).sizes["TIME"] == 6

# [start-qc]
staged = xr.open_dataset("coads.h5", engine="vhdf5", decode_times=False).vhdf5.stage()
patch = {"TIME": 5, "COADSY": slice(40, 50), "COADSX": slice(60, 80)}
staged["SST"][patch] = staged["SST"][patch].values - 0.8  # a warm bias removed
staged.vhdf5.commit("qc-sst", message="SST -0.8 degC on a 10x20 patch of month 6")
# [end-qc]

# [start-diff]
qc = xr.open_dataset("coads.h5", engine="vhdf5", version="qc-sst", decode_times=False)
diff = qc.vhdf5.diff("month-06")  # B = qc-sst, A = month-06
print(diff.data_vars)
print("points changed:", int(diff["SST_changed"].sum()))
print("mean change:", float(diff["SST_diff"].mean()), "degC")
# [end-diff]
assert int(diff["SST_changed"].sum()) == int(source["SST"][patch].notnull().sum())  # NaN (land) stays NaN
assert abs(float(diff["SST_diff"].mean()) + 0.8) < 1e-5

# [start-plot]
import matplotlib.pyplot as plt

fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.4), constrained_layout=True)
qc["SST"].isel(TIME=5).plot(ax=left, cmap="viridis")
left.set_title("SST, month 6, version qc-sst")
diff["SST_diff"].isel(TIME=5).plot(ax=right, cmap="RdBu_r", vmin=-1, vmax=1)
right.set_title("qc-sst minus month-06")
fig.savefig(out / "coads_diff.png", dpi=90)
# [end-plot]
plt.close(fig)

# [start-log]
log = xarray_vhdf5.xr.version_log_frame("coads.h5")
table = log[["parent", "message", "new_chunks", "new_bytes"]]
print(table.to_string())
# [end-log]
assert list(log.index)[-1] == "qc-sst"
table.to_csv(out / "coads_log.csv")

# [start-read-old]
march = xr.open_dataset("coads.h5", engine="vhdf5", version="month-03", decode_times=False)
print(dict(march.sizes))
# [end-read-old]
assert march.sizes["TIME"] == 3
