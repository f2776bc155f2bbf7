"""What bounds the "0.2x versioned-hdf5 per version" target of issue 6, measured.

Run: ``pytest benchmarks/bench_bounds.py --benchmark-only -p no:cacheprovider -o addopts=""``

- ``lean floor ratios``: the appends, sparse-edit and bulk-rewrite workloads of
  ``bench_commits.py`` written by the lean floor (``workloads.LeanFloor``: only the
  format's operations, each through a compiled call into libhdf5), the floor (the
  same operations through h5py) and versioned-hdf5, in ``ROUNDS`` alternating
  rounds; the medians of the per-round ratios. When the lean floor itself is above
  0.2x versioned-hdf5, no writer of the format that works through libhdf5 can meet
  the target on that workload.
- ``one-point commit bounds``: the one-point commits of ``bench_alternating.py``
  (a (1000,) float64 with chunks (100,), 300+ versions, the file kept open) by
  the lean floor, the floor, versioned-hdf5 and xarray_vhdf5 in alternating
  rounds. The floors write a chunk they hold in memory; an editor also opens the
  previous version and reads the chunk it edits.
- ``virtual dataset cost``: creating one version's virtual dataset with N mappings
  (``backend.virtual.create_virtual_dataset_id``: the mappings made in C, then
  ``H5Dcreate``), N = 1, 13 (an append at t = 100), 100 (bulk rewrite) and 400
  (sparse edits); libhdf5's share of every commit of those workloads.

Each workload's final state is checked against numpy.
"""

from __future__ import annotations

import time

import h5py
import numpy as np
import pytest
from bench_alternating import (
    ONE_POINT_BATCH,
    ONE_POINT_HISTORY,
    ONE_POINT_ROUNDS,
    _OnePoint,
    alternate_commits,
    alternate_workload,
)

IMPLS = ("lean_floor", "floor", "versioned_hdf5")
ROUNDS = 5
MAPPINGS = (1, 13, 100, 400)


@pytest.mark.parametrize("workload", ("appends", "sparse", "bulk"))
def test_lean_floor_ratios(benchmark, note, tmp_path, workload):
    """Medians over rounds of lean floor / versioned-hdf5 and lean floor / floor for one workload."""
    times, versions = alternate_workload(
        benchmark, tmp_path, workload, IMPLS, ROUNDS, "bounds rounds (whole benchmark time, not a measurement)"
    )
    lean = np.asarray(times["lean_floor"])
    label = f"bounds {workload} ({versions} versions)"
    for other in ("versioned_hdf5", "floor"):
        ratios = lean / np.asarray(times[other])
        note(
            f"{label}: lean_floor / {other} median {np.median(ratios):.2f}x "
            f"(rounds {' '.join(f'{r:.2f}' for r in ratios)})"
        )
    floor_vh = np.asarray(times["floor"]) / np.asarray(times["versioned_hdf5"])
    note(f"{label}: floor / versioned_hdf5 median {np.median(floor_vh):.2f}x")
    medians = " | ".join(f"{impl} {np.median(times[impl]) * 1e3 / versions:.2f}" for impl in IMPLS)
    note(f"{label}: medians, ms per version: {medians}")


def test_one_point_commit_bounds(benchmark, note, tmp_path):
    """Medians over rounds of one-point commit times and their ratios to versioned-hdf5."""
    impls = ("lean_floor", "floor", "versioned_hdf5", "xarray_vhdf5")
    files = {impl: _OnePoint(impl, str(tmp_path / f"{impl}.h5"), np.random.default_rng(5)) for impl in impls}
    times = alternate_commits(
        benchmark, files, ONE_POINT_ROUNDS, ONE_POINT_BATCH, "bounds rounds (whole benchmark time, not a measurement)"
    )
    label = f"bounds one-point commit ({ONE_POINT_HISTORY}+ versions)"
    vh = np.asarray(times["versioned_hdf5"])
    for impl in ("lean_floor", "floor", "xarray_vhdf5"):
        ratios = np.asarray(times[impl]) / vh
        note(
            f"{label}: {impl} / versioned_hdf5 median {np.median(ratios):.2f}x "
            f"(rounds {' '.join(f'{r:.2f}' for r in ratios)})"
        )
    ours_lean = np.asarray(times["xarray_vhdf5"]) / np.asarray(times["lean_floor"])
    note(f"{label}: xarray_vhdf5 / lean_floor median {np.median(ours_lean):.2f}x")
    note(f"{label}: medians, ms: " + " | ".join(f"{impl} {np.median(times[impl]) * 1e3:.2f}" for impl in impls))


def test_virtual_dataset_cost(benchmark, note, tmp_path):
    """Median time to create a virtual dataset of N chunk mappings into one raw_data."""
    from xarray_vhdf5._backend.virtual import create_virtual_dataset_id

    chunks = (100, 100)
    created: dict[int, list[float]] = {n: [] for n in MAPPINGS}
    with h5py.File(tmp_path / "vds.h5", "w") as f:
        values = np.arange(100 * max(MAPPINGS) * 100, dtype="f8").reshape(-1, 100)  # distinct: a wrong row shows
        raw = f.create_dataset("raw_data", data=values, chunks=chunks, maxshape=(None, 100))
        groups = {n: f.create_group(f"n{n}") for n in MAPPINGS}

        def rounds():
            for r in range(20):
                for n in MAPPINGS:
                    shape = (100 * n, 100)
                    # chunk k reads raw_data's chunk n - 1 - k (reversed: an offset mix-up shows)
                    rows = [((k, 0), 100 * (n - 1 - k), 100 * (n - k)) for k in range(n)]
                    start = time.perf_counter()
                    create_virtual_dataset_id(groups[n].id, f"v{r}", raw, shape, chunks, rows, fillvalue=0.0)
                    created[n].append(time.perf_counter() - start)

        benchmark.group = "bounds rounds (whole benchmark time, not a measurement)"
        benchmark.pedantic(rounds, rounds=1, iterations=1)
        for n in MAPPINGS:
            expected = np.concatenate([values[100 * (n - 1 - k) : 100 * (n - k)] for k in range(n)])
            np.testing.assert_array_equal(f[f"n{n}/v19"][()], expected)
    costs = " | ".join(f"{n} mappings {np.median(created[n]) * 1e3:.2f} ms" for n in MAPPINGS)
    note(f"bounds virtual dataset creation, median of 20: {costs}")
