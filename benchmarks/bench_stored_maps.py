"""What a stored chunk map buys a reader and costs a commit, by the number of chunks of a version.

Run: ``python benchmarks/bench_stored_maps.py [--marks 16,64,128,335,1000] [--rounds 15]``

A commit stores, for every dataset of at least
:data:`~xarray_vhdf5._versions.chunkmaps.MIN_CHUNKS` chunks, the version's
chunk map, extends raw_data's address table and appends to the dataset's map
log (:func:`~xarray_vhdf5._versions.chunkmaps.record`), so that opening the
version does not make libhdf5 decode every mapping of its virtual dataset.
This prints both sides of that trade on issue 19's daily ingest
(``bench_ingest.py``'s ``(T, 90, 180)`` float32 in chunks ``(1, 90, 180)``, one
day per ``commit(path=, append_dim="time")``, so version ``t`` maps ``t``
chunks of ``sst``):

- **reader**: at each mark ``t``, a copy of the file as it is, and a second
  copy with the stored maps removed (``/__vhdf5__/chunk_maps`` deleted: the
  reader then decodes the mappings, as for a version written by
  versioned-hdf5); the median of ``--rounds`` opens of version ``t`` reading
  one point, through ``VersionedHDF5File.open`` and through
  ``xr.open_dataset(engine="vhdf5")``, each checked against numpy;
- **commit**: the median time of ``record`` (wrapped) over the 9 commits
  ending at each mark, and of the whole commit.

MIN_CHUNKS is worth its cost where the reader's saving per open exceeds what
``record`` adds to a commit (a version is committed once and opened many times).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

import h5py
import numpy as np
import pandas as pd
import xarray as xr
from bench_ingest import ingest_workload

from xarray_vhdf5 import VersionedHDF5File
from xarray_vhdf5._versions import chunkmaps, commit


def _median_ms(fn, rounds: int, *args) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def _open_h5(path: str, version: str, point: tuple[int, ...], expected) -> None:
    """Open ``version`` of ``path`` through ``VersionedHDF5File.open`` and check one point of ``sst``."""
    with VersionedHDF5File.open(path) as r:
        assert r[version]["sst"][point] == expected


def _open_xr(path: str, version: str, point: tuple[int, ...], expected) -> None:
    """The same through ``xr.open_dataset(engine="vhdf5")``."""
    with xr.open_dataset(path, engine="vhdf5", version=version) as ds:
        assert ds["sst"][point].values == expected


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--marks", default="16,64,128,335,1000", help="versions (chunks of sst) to measure at")
    parser.add_argument("--rounds", type=int, default=15, help="opens per measurement (median)")
    args = parser.parse_args()
    marks = sorted(int(m) for m in args.marks.split(","))
    work = ingest_workload(marks[-1], compress=False)
    record_s: list[float] = []
    original = commit.chunkmaps.record

    def timed_record(*a, **k):
        start = time.perf_counter()
        try:
            return original(*a, **k)
        finally:
            record_s[-1] += time.perf_counter() - start

    commit.chunkmaps.record = timed_record
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ingest.h5")
        commits, t = [], 0
        for mark in marks:
            while t < mark:
                record_s.append(0.0)
                start = time.perf_counter()
                work.day(t).vhdf5.commit(work.name(t + 1), path=path, append_dim="time")
                commits.append(time.perf_counter() - start)
                t += 1
            with_maps, decoded = (os.path.join(tmp, f"{kind}-{mark}.h5") for kind in ("maps", "decoded"))
            shutil.copy(path, with_maps)
            shutil.copy(path, decoded)
            with h5py.File(decoded, "r+") as f:
                if "__vhdf5__/chunk_maps" in f:
                    del f["__vhdf5__/chunk_maps"]
            point = (mark - 1, 0, 0)
            probe = (work.name(mark), point, work.data[point])
            row = {"chunks": mark}
            for label, fn in (("VersionedHDF5File.open", _open_h5), ("xr.open_dataset", _open_xr)):
                mapped = _median_ms(fn, args.rounds, with_maps, *probe)
                plain = _median_ms(fn, args.rounds, decoded, *probe)
                row[f"{label}, maps (ms)"] = mapped
                row[f"{label}, decoded (ms)"] = plain
                row[f"{label}: saved per open (ms)"] = plain - mapped
            row["record per commit (ms)"] = 1e3 * float(np.median(record_s[max(0, mark - 9) : mark]))
            row["commit (ms)"] = 1e3 * float(np.median(commits[max(0, mark - 9) : mark]))
            rows.append(row)
    commit.chunkmaps.record = original
    print(f"MIN_CHUNKS = {chunkmaps.MIN_CHUNKS}; daily ingest, version t maps t chunks of sst")
    with pd.option_context("display.width", 250, "display.max_columns", 20, "display.precision", 2):
        print(pd.DataFrame(rows).set_index("chunks").T)


if __name__ == "__main__":
    main()
