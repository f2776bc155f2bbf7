"""Daily appends from xarray, one commit per step: is the cost of a commit flat in t?

Run: ``pytest benchmarks/bench_xr_append.py --benchmark-only -s``

Appends 365 daily (180, 360) float32 steps to a ``(t, 180, 360)`` variable,
chunks ``(8, 180, 360)`` (as ``bench_commits.py``), one version per step:

- ``xarray_vhdf5``: ``staged = staged.vhdf5.append(step, dim="time")`` then
  ``staged.vhdf5.commit()`` (the staged Dataset is rebased on each new
  version from the commit's report; the ``time`` coordinate is rewritten
  with it, one 512-point chunk while t < 512; the phony ``lat``/``lon``
  netCDF-4 scales are carried over and every scale re-attached at each
  commit, since object references cannot be carried between versions);
- ``versioned-hdf5``: versioned-hdf5 2.6, ``stage_version`` + ``resize`` + one
  step written;
- ``h5py``: a plain chunked, resizable ``h5py.Dataset``, the file opened in
  mode ``"a"`` for each step (what ``to_netcdf(mode="a")``-style appends
  cost; no versions kept).

Each implementation runs the 365 commits once (one round: the curve is the
measurement, not the total); the summary prints the median time per commit
over the 24 commits ending at t = 25, 100, 200 and 365 (a median: single
commits on a shared machine spike to several times the typical time), the
ratio of the last to the first, the slope of a least-squares line through
all 364 commit times, and the whole curve in bins of 25 commits. Each run checks the final data
against numpy.
"""

from __future__ import annotations

import os
import time

import h5py
import numpy as np
import pytest
import xarray as xr

import xarray_vhdf5  # noqa: F401  (registers the engine and the .vhdf5 accessor)

#: Daily steps appended (``XR_APPEND_STEPS=730`` for two years).
N_STEPS = int(os.environ.get("XR_APPEND_STEPS", "365"))
SHAPE = (180, 360)
CHUNKS = (8, 180, 360)
MARKS = tuple(sorted({25, 100, 200, N_STEPS}))
WINDOW = 24  # commits ending at each mark; their median (a shared machine has spikes)


@pytest.fixture(scope="module")
def steps() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((N_STEPS, *SHAPE)).astype("float32")


def _step_ds(steps: np.ndarray, t: int) -> xr.Dataset:
    sst = xr.Variable(("time", "lat", "lon"), steps[t : t + 1])
    sst.encoding["chunks"] = CHUNKS
    return xr.Dataset({"sst": sst}, coords={"time": np.array([float(t)])})


def run_xarray_vhdf5(path: str, steps: np.ndarray) -> tuple[list[float], np.ndarray]:
    _step_ds(steps, 0).vhdf5.commit("r1", path=path)
    times = [np.nan]
    staged = xr.open_dataset(path, engine="vhdf5").vhdf5.stage()
    for t in range(1, len(steps)):
        start = time.perf_counter()
        staged = staged.vhdf5.append(_step_ds(steps, t), dim="time")
        staged.vhdf5.commit()
        times.append(time.perf_counter() - start)
    staged.close()
    with xr.open_dataset(path, engine="vhdf5") as ds:
        return times, ds["sst"].values


def run_versioned_hdf5(path: str, steps: np.ndarray) -> tuple[list[float], np.ndarray]:
    from versioned_hdf5 import VersionedHDF5File

    times = []
    with h5py.File(path, "w") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("r1") as g:
            g.create_dataset("sst", data=steps[:1], chunks=CHUNKS)
        times.append(np.nan)
    for t in range(1, len(steps)):
        start = time.perf_counter()
        with h5py.File(path, "r+") as f:
            vf = VersionedHDF5File(f)
            with vf.stage_version(f"r{t + 1}") as g:
                ds = g["sst"]
                ds.resize((t + 1, *SHAPE))
                ds[t] = steps[t]
        times.append(time.perf_counter() - start)
    with h5py.File(path, "r") as f:
        return times, VersionedHDF5File(f)[f"r{len(steps)}"]["sst"][()]


def run_h5py(path: str, steps: np.ndarray) -> tuple[list[float], np.ndarray]:
    with h5py.File(path, "w") as f:
        f.create_dataset("sst", data=steps[:1], chunks=CHUNKS, maxshape=(None, *SHAPE))
    times = [np.nan]
    for t in range(1, len(steps)):
        start = time.perf_counter()
        with h5py.File(path, "a") as f:
            ds = f["sst"]
            ds.resize(t + 1, axis=0)
            ds[t] = steps[t]
        times.append(time.perf_counter() - start)
    with h5py.File(path, "r") as f:
        return times, f["sst"][()]


RUNNERS = {"xarray_vhdf5": run_xarray_vhdf5, "versioned-hdf5": run_versioned_hdf5, "h5py": run_h5py}


def curve_summary(impl: str, times: list[float]) -> str:
    """Median ms per commit over the :data:`WINDOW` commits ending at each mark, and the trend.

    ``impl: t=25 a ms | ... | t=365/t=25 r | slope s ms per 100 steps``; the slope
    is a least-squares line through every commit's time.
    """
    parts = []
    medians = []
    for t in MARKS:
        window = [x for x in times[max(1, t - WINDOW) : t] if np.isfinite(x)]
        medians.append(float(np.median(window)))
        parts.append(f"t={t:3d} {medians[-1] * 1e3:6.1f} ms")
    x = np.arange(len(times))
    ok = np.isfinite(np.asarray(times))
    slope = np.polyfit(x[ok], np.asarray(times)[ok] * 1e3, 1)[0] * 100
    return (
        f"{impl:15s} per commit (median of {WINDOW}): "
        + " | ".join(parts)
        + f" | t={MARKS[-1]}/t={MARKS[0]} {medians[-1] / medians[0]:.2f}x | slope {slope:+.2f} ms per 100 steps"
    )


def curve_table(impl: str, times: list[float], step: int = 25) -> str:
    """The whole curve: median ms per commit in bins of ``step`` commits."""
    cells = []
    for start in range(1, len(times), step):
        window = [x for x in times[start : start + step] if np.isfinite(x)]
        cells.append(f"{np.median(window) * 1e3:.0f}")
    return f"{impl:15s} curve (median ms, bins of {step} commits from t=1): " + " ".join(cells)


@pytest.mark.parametrize("impl", list(RUNNERS))
def test_daily_appends(benchmark, tmp_path, steps, impl, record, note):
    benchmark.group = f"xr appends: {N_STEPS} commits x 1 step of (t,180,360) f4"
    counter = iter(range(10**6))
    curves = []

    def once():
        times, data = RUNNERS[impl](str(tmp_path / f"{impl}{next(counter)}.h5"), steps)
        curves.append(times)
        return data

    result = benchmark.pedantic(once, rounds=1, iterations=1)
    np.testing.assert_array_equal(result, steps)
    record(benchmark, benchmark.group, impl, baseline=impl == "h5py")
    note(curve_summary(impl, curves[-1]))
    note(curve_table(impl, curves[-1]))
