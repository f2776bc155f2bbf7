"""What locking, flushing and journaling cost the daily ingest (issue 17's cost point).

The daily append of issue 19: a (t, 90, 180) float32 variable, chunks
(1, 90, 180), one day a commit, T days, timed per commit (median). Workloads:

- ``h5py held open``: ``VersionedHDF5File(h5py.File(p, "a"))`` kept open, one
  ``stage_version`` a day (resize + write the new day);
- ``open_file held open`` / ``open_file durable``: the same through
  :func:`xarray_vhdf5.open_file` (journaled; ``durable=True`` fsyncs);
- ``xarray reopen``: each day ``xr.open_dataset`` + ``ds.vhdf5.stage()`` +
  ``.vhdf5.append(day, dim="time")`` + ``.vhdf5.commit()``.

Run it with two installations to compare them in one sitting (the code before
the locks has no ``open_file``; those rows are skipped there)::

    python benchmarks/bench_durability.py --days 150 --json new.json
    /path/to/old/venv/bin/python benchmarks/bench_durability.py --days 150 --json old.json
    python benchmarks/bench_durability.py --compare old.json new.json

Leaves out: compression (none), other processes (see bench_concurrency.py).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import h5py
import numpy as np
import pandas as pd
import xarray as xr

import xarray_vhdf5
from xarray_vhdf5 import VersionedHDF5File

SHAPE = (90, 180)


def _day(t: int) -> np.ndarray:
    return np.random.default_rng(t).random(SHAPE, dtype=np.float32)


def h5py_level(path: str, days: int, opener) -> list[float]:
    times = []
    f = opener(path)
    try:
        vf = VersionedHDF5File(f)
        with vf.stage_version("d0") as g:
            g.create_dataset("sst", data=_day(0)[None], chunks=(1, *SHAPE))  # versioned datasets resize freely
        for t in range(1, days):
            t0 = time.perf_counter()
            with vf.stage_version(f"d{t}") as g:
                d = g["sst"]
                d.resize((t + 1, *SHAPE))
                d[t] = _day(t)
            times.append(time.perf_counter() - t0)
    finally:
        f.close()
    return times


def xarray_reopen(path: str, days: int) -> list[float]:
    def day(t):
        return xr.Dataset(
            {"sst": (("time", "lat", "lon"), _day(t)[None])},
            coords={"time": [np.datetime64("2024-01-01") + np.timedelta64(t, "D")]},
        )

    first = day(0)
    first["sst"].encoding["chunks"] = (1, *SHAPE)
    first.vhdf5.commit("d0", path=path)
    times = []
    for t in range(1, days):
        t0 = time.perf_counter()
        ds = xr.open_dataset(path, engine="vhdf5")
        staged = ds.vhdf5.stage().vhdf5.append(day(t), dim="time")
        staged.vhdf5.commit(f"d{t}")
        ds.close()
        times.append(time.perf_counter() - t0)
    return times


def run(days: int) -> dict[str, float]:
    results = {}
    workloads = {"h5py held open": lambda p: h5py_level(p, days, lambda q: h5py.File(q, "a"))}
    if hasattr(xarray_vhdf5, "open_file"):
        workloads["open_file held open"] = lambda p: h5py_level(p, days, xarray_vhdf5.open_file)
        workloads["open_file durable"] = lambda p: h5py_level(
            p, days, lambda q: xarray_vhdf5.open_file(q, durable=True)
        )
    workloads["xarray reopen"] = lambda p: xarray_reopen(p, days)
    for name, fn in workloads.items():
        with tempfile.TemporaryDirectory() as d:
            times = fn(os.path.join(d, "f.h5"))
        results[name] = float(np.median(times) * 1e3)
        print(f"{name:22s} median commit {results[name]:7.2f} ms")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=150)
    parser.add_argument("--json")
    parser.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args()
    if args.compare:
        before, after = (json.load(open(p)) for p in args.compare)
        table = pd.DataFrame({"before ms": before, "after ms": after})
        table["ratio"] = table["after ms"] / table["before ms"]
        print(table.round(2).to_string())
        return
    results = run(args.days)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh)


if __name__ == "__main__":
    main()
