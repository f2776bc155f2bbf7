"""What a daily commit costs early and late in a history, measured fairly (issue 19's t=365/t=10).

Run: ``python benchmarks/bench_growth.py [--early 5] [--late 335] [--commits 20]``

Two files get the ingest workload of ``bench_ingest.py`` ((T, 90, 180) float32,
chunks (1, 90, 180), one day per ``commit(path=, append_dim="time")``), one up
to ``--early`` days, the other up to ``--late``. Then one commit goes to each
in turn, ``--commits`` times, in this one process: both see the same minutes
of a machine whose speed drifts by 20-40% (``docs/benchmarks.md``), which
single runs of ``bench_ingest.py`` do not cancel. Printed: the median commit
on each file, their ratio, and the median time of the commit's parts (the
functions of ``PARTS``, timed by wrapping them; a part absent from the code
being measured is skipped).

``--floor`` adds the format's own growth, in the same rounds: two more files
written by :class:`workloads.LeanFloor` (the format's operations only, each
through the compiled libhdf5 calls this package uses: raw_data rows, hash-table
rows, the version group and its virtual dataset of one mapping per chunk),
reopened ``"r+"`` for each commit as the one-call commit reopens its file, the
data variable alone (no coordinates, journal, lock or bookkeeping). Its late
minus early time is what libhdf5 adds to a commit as the version's virtual
dataset grows, whoever writes the format; printed beside ours, with the
ratio ours would have if everything else it does stayed flat.
"""

from __future__ import annotations

import argparse
import collections
import functools
import importlib
import os
import statistics
import tempfile
import time

import h5py
import numpy as np
import xarray as xr
from bench_ingest import ingest_workload
from workloads import LeanFloor

#: (module, function): the parts of a one-call daily commit that are timed.
PARTS = (
    ("xarray_vhdf5.xr._append", "_plan"),
    ("xarray_vhdf5.xr._append", "_grow"),
    ("xarray_vhdf5._wrappers.group", "InMemoryGroup._child"),
    ("xarray_vhdf5._versions.commit", "_commit_dataset"),
    ("xarray_vhdf5._versions.commit", "create_virtual_dataset_id"),
    ("xarray_vhdf5._versions.chunkmaps", "record"),
    ("xarray_vhdf5._versions.commit", "record_commit"),
    ("xarray_vhdf5.xr._writer", "attach_dimension_scales"),
    ("xarray_vhdf5._versions.rootview", "update_root_view"),
    ("h5py._hl.files", "File.close"),
)


def _timed(spent: collections.Counter) -> None:
    """Wrap every part of ``PARTS`` so that its time adds up in ``spent`` (seconds, by name)."""
    for module_name, qualname in PARTS:
        owner = importlib.import_module(module_name)
        *path, name = qualname.split(".")
        for part in path:
            owner = getattr(owner, part)
        fn = getattr(owner, name, None)
        if fn is None:
            continue

        @functools.wraps(fn)
        def wrapped(*args, _fn=fn, _key=qualname, **kwargs):
            start = time.perf_counter()
            try:
                return _fn(*args, **kwargs)
            finally:
                spent[_key] += time.perf_counter() - start

        setattr(owner, name, wrapped)


class ReopenedFloor(LeanFloor):
    """:class:`workloads.LeanFloor` of the ingest's data variable, its file reopened for each commit."""

    def __init__(self, path: str, day0):
        self.path = path
        with h5py.File(path, "w") as f:
            super().__init__(f, day0.shape, (1, *day0.shape[1:]), day0.dtype)
            self.commit("day-1", day0.shape, {(0,) * day0.ndim: day0})

    def commit_day(self, name: str, t: int, day) -> None:
        """Append ``day`` (one time step) as step ``t`` in a new version ``name``, the file opened and closed."""
        with h5py.File(self.path, "r+") as f:
            self.f = f
            self.raw = f[f"_version_data/{self.name}/raw_data"]
            self.hash_table = f[f"_version_data/{self.name}/hash_table"]
            self.versions = f["_version_data/versions"]
            self.commit(name, (t + 1, *day.shape[1:]), {(t,) + (0,) * (day.ndim - 1): day})

    def last(self):
        """The last committed version's data, read back through libhdf5."""
        with h5py.File(self.path, "r") as f:
            return f[f"_version_data/versions/{self.prev}/{self.name}"][()]


def _floors(tmp: str, work, days: dict[str, int]) -> dict[str, ReopenedFloor]:
    """One floor file per label, holding ``days[label]`` days of the workload."""
    floors = {}
    for label, n in days.items():
        floor = ReopenedFloor(os.path.join(tmp, f"floor-{label}.h5"), work.data[:1])
        for t in range(1, n):
            floor.commit_day(f"day-{t + 1}", t, work.data[t : t + 1])
        floors[label] = floor
    return floors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--early", type=int, default=5, help="days in the early file before the timed commits")
    parser.add_argument("--late", type=int, default=335, help="days in the late file before the timed commits")
    parser.add_argument("--commits", type=int, default=20, help="timed commits to each file")
    parser.add_argument("--floor", action="store_true", help="also the format floor's growth (LeanFloor, reopened)")
    args = parser.parse_args()
    work = ingest_workload(args.late + args.commits, compress=False)
    spent: collections.Counter = collections.Counter()
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for label, days in (("early", args.early), ("late", args.late)):
            path = os.path.join(tmp, f"{label}.h5")
            for t in range(days):
                work.day(t).vhdf5.commit(work.name(t + 1), path=path, append_dim="time")
            files[label] = (path, days)
        floors = _floors(tmp, work, {"early": args.early, "late": args.late}) if args.floor else {}
        floor_times: dict[str, list[float]] = {label: [] for label in floors}
        _timed(spent)
        total = {label: [] for label in files}
        parts = {label: collections.defaultdict(list) for label in files}
        for i in range(args.commits):
            for label, (path, days) in files.items():
                spent.clear()
                start = time.perf_counter()
                work.day(days + i).vhdf5.commit(work.name(days + i + 1), path=path, append_dim="time")
                total[label].append(time.perf_counter() - start)
                for key, seconds in spent.items():
                    parts[label][key].append(seconds)
                if label in floors:
                    start = time.perf_counter()
                    floors[label].commit_day(f"day-{days + i + 1}", days + i, work.data[days + i : days + i + 1])
                    floor_times[label].append(time.perf_counter() - start)
        for label, (path, days) in files.items():  # every file's last version against numpy
            n = days + args.commits
            with xr.open_dataset(path, engine="vhdf5") as ds:
                np.testing.assert_array_equal(ds[work.var].values, work.data[:n])
            if label in floors:
                np.testing.assert_array_equal(floors[label].last(), work.data[:n])
    medians = {label: 1000 * statistics.median(times) for label, times in total.items()}
    print(f"commit at t={args.early}..: {medians['early']:.2f} ms, at t={args.late}..: {medians['late']:.2f} ms")
    print(f"ratio late / early: {medians['late'] / medians['early']:.3f}")
    if floors:
        floor = {label: 1000 * statistics.median(times) for label, times in floor_times.items()}
        grown = floor["late"] - floor["early"]
        print(
            f"format floor (LeanFloor, reopened): {floor['early']:.2f} ms at t={args.early}.., "
            f"{floor['late']:.2f} ms at t={args.late}.. (+{grown:.2f} ms, ratio {floor['late'] / floor['early']:.3f})"
        )
        print(
            f"ours grew by {medians['late'] - medians['early']:.2f} ms; with only the floor's growth "
            f"its ratio would be {(medians['early'] + grown) / medians['early']:.3f}"
        )
    print(f"{'part (ms, median)':<36}{'early':>8}{'late':>8}")
    for _, key in PARTS:
        early, late = (parts[label].get(key) for label in ("early", "late"))
        if early or late:
            cells = [f"{1000 * statistics.median(v):8.2f}" if v else f"{'-':>8}" for v in (early, late)]
            print(f"{key:<36}{''.join(cells)}")


if __name__ == "__main__":
    main()
