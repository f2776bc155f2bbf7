"""How-to: rechunk a history, export, split and merge; the figure of a plan. Run by docs/conf.py at every build."""

import os

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import xarray as xr
from matplotlib.patches import Rectangle

import xarray_vhdf5  # noqa: F401  (registers the engine and the .vhdf5 accessor)
from xarray_vhdf5.resplit import plan_resplit

OUT = os.environ.get("VHDF5_DOCS_OUT", ".")

# [start-record]
time = pd.date_range("2024-01-01", periods=60)
lat, lon = np.arange(-89.0, 90.0, 4.0), np.arange(-178.0, 180.0, 4.0)
rng = np.random.default_rng(0)
sst = (15 + rng.standard_normal((time.size, lat.size, lon.size))).astype("float32")
ds = xr.Dataset(
    {"sst": (("time", "lat", "lon"), sst, {"units": "degC"})},
    coords={"time": time, "lat": lat, "lon": lon},
)
ds.sst.encoding["chunksizes"] = (1, lat.size, lon.size)  # one day a chunk, as a daily feed stores it
ds.isel(time=slice(0, 30)).vhdf5.commit("january", path="sst.h5")
ds.vhdf5.commit("february", path="sst.h5")
# [end-record]

# [start-plan]
plan = plan_resplit(ds.sst.shape, (1, 45, 90), (30, 9, 9), 4, "1MB")
print(plan)
# [end-plan]

# [start-rechunk]
opened = xr.open_dataset("sst.h5", engine="vhdf5")
rechunked = opened.vhdf5.rechunk({"time": 30, "lat": 9, "lon": 9}, max_mem="1MB")
report = rechunked.encoding["vhdf5_rechunk"]["sst"]
print(rechunked.sst.encoding["chunks"], report.reads_per_input_chunk, report.counters.peak_buffer_bytes)
january = xr.open_dataset("sst.h5", engine="vhdf5", version="january")
xr.testing.assert_identical(january.load(), ds.isel(time=slice(0, 30)))  # every version reads as before
# [end-rechunk]

# [start-export]
r = january.vhdf5.export("january.nc", chunks={"time": -1, "lat": 15, "lon": 30})
print(r.counters["sst"].input_reads, "chunks read for", r.plans["sst"].input_reads, "stored")
xr.testing.assert_identical(xr.open_dataset("january.nc").load(), january.load())
rechunked.vhdf5.export("february.zarr", chunks=(60, 15, 15))
xr.testing.assert_identical(xr.open_zarr("february.zarr", consolidated=False).load(), ds)
# [end-export]

# [start-split]
weeks = rechunked.vhdf5.split("weeks", {"time": 7})
print(len(weeks.files), "files:", os.path.basename(weeks.files[0]), "...")
from xarray_vhdf5.xr._export import merge_files  # noqa: E402

merged = merge_files("weeks", "merged.h5", "all-weeks", chunks={"time": 60, "lat": 9, "lon": 9})
print(merged.counters["sst"].input_reads, "files read once each")
xr.testing.assert_identical(xr.open_dataset("merged.h5", engine="vhdf5").load(), ds)
# [end-split]


def draw(plan, ax, title: str) -> None:
    """Input chunks (thin), output chunks (thick), buffers (shaded, numbered) and remainders of a 2-d plan."""
    (ty, tx) = plan.shape
    for b, (y0, y1) in enumerate(zip(plan.buffer_grids[0].edges[:-1], plan.buffer_grids[0].edges[1:])):
        for c, (x0, x1) in enumerate(zip(plan.buffer_grids[1].edges[:-1], plan.buffer_grids[1].edges[1:])):
            order = b * plan.buffer_grids[1].n + c
            shade = plt.cm.Blues(0.2 if (b + c) % 2 else 0.45)
            ax.add_patch(Rectangle((x0, y0), x1 - x0, y1 - y0, facecolor=shade, edgecolor="tab:blue", lw=2, ls="--"))
            ax.text((x0 + x1) / 2, (y0 + y1) / 2, f"B{order}", ha="center", va="center", fontsize=7)
    for i, (y0, y1) in enumerate(zip(plan.out_grids[0].edges[:-1], plan.out_grids[0].edges[1:])):
        for j, (x0, x1) in enumerate(zip(plan.out_grids[1].edges[:-1], plan.out_grids[1].edges[1:])):
            if plan.straddle[i, j]:
                kept = plan.keep[i, j]
                ax.add_patch(
                    Rectangle(
                        (x0, y0),
                        x1 - x0,
                        y1 - y0,
                        fill=False,
                        hatch="//" if kept else "xx",
                        edgecolor="tab:green" if kept else "tab:red",
                        lw=0,
                    )
                )
    for e in plan.in_grids[0].edges:
        ax.axhline(e, color="0.6", lw=0.4)
    for e in plan.in_grids[1].edges:
        ax.axvline(e, color="0.6", lw=0.4)
    for e in plan.out_grids[0].edges:
        ax.axhline(e, color="k", lw=1.4)
    for e in plan.out_grids[1].edges:
        ax.axvline(e, color="k", lw=1.4)
    ax.set_xlim(0, tx)
    ax.set_ylim(ty, 0)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("lon (fastest axis)")
    ax.set_ylabel("time")


# Input chunks (2, 6); output chunks (5, 9): the input aggregate is (6, 12).
fig, axes = plt.subplots(1, 2, figsize=(9, 4.2))
roomy = plan_resplit((20, 36), (2, 6), (5, 9), 8, 4000)
tight = plan_resplit((20, 36), (2, 6), (5, 9), 8, 2300)
draw(roomy, axes[0], f"max_mem 4000 B: buffer {roomy.buffer_shape}, {roomy.output_writes} writes")
draw(tight, axes[1], f"max_mem 2300 B: buffer {tight.buffer_shape}, {tight.output_writes} writes")
fig.suptitle(
    "Input chunks (grey), output chunks (black), buffers B0, B1... (blue, dashed), "
    "straddling outputs kept (green //) or spilled (red xx)",
    fontsize=9,
)
fig.tight_layout()
fig.savefig(os.path.join(OUT, "resplit_layout.png"), dpi=110)
print(roomy)
print(tight)
