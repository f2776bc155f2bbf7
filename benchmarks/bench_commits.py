"""Commit workloads side by side: xarray_vhdf5, versioned-hdf5 2.6, the format floor, plain h5py.

Run: ``pytest benchmarks/bench_commits.py --benchmark-only -p no:cacheprovider -o addopts=""``
(the summary at the end prints every group's medians and their ratios to
versioned-hdf5, the floor and plain h5py). Each benchmark checks its final data
against numpy. Workloads (``workloads.py``; shapes, chunks and counts in
``docs/benchmarks.md``):

- ``appends``: 200 versions, each appending one (180, 360) float32 step, chunks (8, 180, 360);
- ``sparse edits``: 100 versions x 10 random points of a (2000, 2000) float64, chunks (100, 100);
- ``bulk rewrite``: 20 versions, each overwriting half (500 rows) of a (1000, 1000)
  float64, chunks (100, 100) (50 of the 100 chunks new per version);
- ``commit cost vs history``: 1000 one-point versions of a (1000,) float64, chunks
  (100,); the time of one commit when the file holds 10, 100, 500 and 1000
  versions (median of the 5 commits ending there), the ``VersionedHDF5File``
  kept open; and, at the same marks, reopening the file + one commit (median of 5 such cycles);
- ``memory``: for appends, sparse edits and bulk rewrite, peak RSS growth and final
  file size per implementation, each in a fresh child process (``memory.py``).

Timed: the whole workload, file creation and the final read-back included (the
same for every implementation); appends, sparse edits and bulk rewrite run
``COMMIT_ROUNDS`` (3) rounds each and report the median (one run of a few
seconds on a shared machine is too noisy), the history one round.
"""

from __future__ import annotations

import time

import h5py
import numpy as np
import pytest
from memory import measure
from workloads import (
    IMPLEMENTATIONS,
    FormatFloor,
    _versioned_file_class,
    append_steps,
    appends,
    bulk_plan,
    bulk_rewrite,
    expected_bulk,
    expected_sparse,
    sparse_edits,
    sparse_plan,
)

N_APPENDS = 200
N_SPARSE = 100
N_BULK = 20
BASELINES = ("versioned_hdf5", "floor", "h5py")


@pytest.fixture(scope="module")
def steps():
    return append_steps(N_APPENDS)


@pytest.fixture(scope="module")
def sparse():
    return sparse_plan(N_SPARSE)


@pytest.fixture(scope="module")
def bulk():
    return bulk_plan(N_BULK)


#: Rounds of each commit workload (its median is reported): one run of a few seconds
#: on a shared machine is too noisy to compare implementations.
COMMIT_ROUNDS = 3


def _once(benchmark, func):
    return benchmark.pedantic(func, rounds=1, iterations=1)


def _rounds(benchmark, func):
    return benchmark.pedantic(func, rounds=COMMIT_ROUNDS, iterations=1)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_appends(benchmark, record, tmp_path, steps, impl):
    """200 versions, each appending one (180, 360) float32 step; chunks (8, 180, 360)."""
    benchmark.group = "appends: 200 versions x 1 step of (t,180,360) f4"
    result = _rounds(benchmark, lambda: appends(impl, str(tmp_path / "a.h5"), steps))
    np.testing.assert_array_equal(result, steps)
    record(benchmark, benchmark.group, impl, baseline=impl in BASELINES)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_sparse_edits(benchmark, record, tmp_path, sparse, impl):
    """100 versions, each changing 10 random points of a (2000, 2000) float64; chunks (100, 100)."""
    benchmark.group = "sparse edits: 100 versions x 10 points of (2000,2000) f8"
    base, edits = sparse
    result = _rounds(benchmark, lambda: sparse_edits(impl, str(tmp_path / "s.h5"), base, edits))
    np.testing.assert_array_equal(result, expected_sparse(base, edits))
    record(benchmark, benchmark.group, impl, baseline=impl in BASELINES)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_bulk_rewrite(benchmark, record, tmp_path, bulk, impl):
    """20 versions, each overwriting half of a (1000, 1000) float64; chunks (100, 100)."""
    benchmark.group = "bulk rewrite: 20 versions x half of (1000,1000) f8"
    base, halves = bulk
    result = _rounds(benchmark, lambda: bulk_rewrite(impl, str(tmp_path / "b.h5"), base, halves))
    np.testing.assert_array_equal(result, expected_bulk(base, halves))
    record(benchmark, benchmark.group, impl, baseline=impl in BASELINES)


# -- commit cost vs history length ----------------------------------------------------------
HISTORY_MARKS = (10, 100, 500, 1000)
HISTORY_WINDOW = 5
HISTORY_SHAPE = (1000,)
HISTORY_CHUNKS = (100,)


def history_run(impl: str, path: str, n: int = HISTORY_MARKS[-1]):
    """Commit ``n`` one-point versions; returns (commit times, reopen+commit times per mark, final data, model).

    ``times[k]`` is the wall time of the commit of the ``k+1``-th version
    (``stage_version`` block, or ``FormatFloor.commit``) with the file and the
    ``VersionedHDF5File`` kept open. After the commit of the ``m``-th version for
    ``m`` in ``HISTORY_MARKS``, versioned implementations also close the file,
    then time reopening it (``h5py.File`` + ``VersionedHDF5File``) plus one more
    one-point commit, ``HISTORY_WINDOW`` times (the median is reported; these
    extra versions are part of the history from then on).
    """
    rng = np.random.default_rng(7)
    model = np.zeros(HISTORY_SHAPE)
    times: list[float] = []
    reopen: dict[int, float] = {}
    counter = iter(range(10**6))

    def edit():
        i = int(rng.integers(0, HISTORY_SHAPE[0]))
        value = float(next(counter) + 1)
        model[i] = value
        return i, value

    if impl == "floor":
        with h5py.File(path, "w") as f:
            fl = FormatFloor(f, HISTORY_SHAPE, HISTORY_CHUNKS, "f8")
            c = HISTORY_CHUNKS[0]
            for k in range(n):
                i, value = edit()
                start = time.perf_counter()
                if k == 0:
                    changed = {(j,): model[j * c : (j + 1) * c].copy() for j in range(HISTORY_SHAPE[0] // c)}
                else:
                    changed = {(i // c,): model[i // c * c : (i // c + 1) * c].copy()}
                fl.commit(f"v{k}", HISTORY_SHAPE, changed)
                times.append(time.perf_counter() - start)
            return times, reopen, fl.read(f"v{n - 1}"), model

    cls = _versioned_file_class(impl)
    f = h5py.File(path, "w")
    try:
        vf = cls(f)
        for k in range(n):
            i, value = edit()
            start = time.perf_counter()
            with vf.stage_version(f"v{k}") as g:
                if k == 0:
                    g.create_dataset("x", data=model, chunks=HISTORY_CHUNKS)
                else:
                    g["x"][i] = value
            times.append(time.perf_counter() - start)
            if k + 1 in HISTORY_MARKS:
                cycles = []
                for r in range(HISTORY_WINDOW):
                    f.close()
                    i, value = edit()
                    start = time.perf_counter()
                    f = h5py.File(path, "r+")
                    vf = cls(f)
                    with vf.stage_version(f"reopened{k + 1}_{r}") as g:
                        g["x"][i] = value
                    cycles.append(time.perf_counter() - start)
                reopen[k + 1] = float(np.median(cycles))
        final = vf[vf.current_version]["x"][()]
    finally:
        f.close()
    return times, reopen, final, model


@pytest.mark.parametrize("impl", ("xarray_vhdf5", "versioned_hdf5", "floor"))
def test_commit_cost_vs_history(benchmark, record_value, note, tmp_path, impl):
    """One-point commits of a (1000,) float64 (chunks (100,)) up to 1000 versions: is a commit's cost flat?"""
    benchmark.group = "history: 1000 one-point commits of (1000,) f8"
    runs = []
    _once(benchmark, lambda: runs.append(history_run(impl, str(tmp_path / "h.h5"))))
    times, reopen, final, model = runs[-1]
    np.testing.assert_array_equal(final, model)
    medians = {}
    for m in HISTORY_MARKS:
        medians[m] = float(np.median(times[m - HISTORY_WINDOW : m]))
        baseline = impl in ("versioned_hdf5", "floor")
        record_value(f"history: one-point commit at {m:4d} versions", impl, medians[m], baseline=baseline)
        if m in reopen:
            record_value(f"history: reopen + commit at {m:4d} versions", impl, reopen[m], baseline=baseline)
    ratio = medians[HISTORY_MARKS[-1]] / medians[HISTORY_MARKS[0]]
    line = " | ".join(f"{m} versions {medians[m] * 1e3:.2f} ms" for m in HISTORY_MARKS)
    note(f"history {impl:15s} commit (median of {HISTORY_WINDOW}): {line} | 1000/10 = {ratio:.2f}x (target <= 1.2x)")
    if reopen:
        line = " | ".join(f"{m}: {reopen[m] * 1e3:.1f} ms" for m in HISTORY_MARKS)
        note(f"history {impl:15s} reopen + commit: {line} | 1000/10 = {reopen[1000] / reopen[10]:.2f}x")


# -- file size and peak memory --------------------------------------------------------------
MEMORY: dict[tuple[str, str], dict] = {}


@pytest.mark.parametrize("workload", ("appends", "sparse", "bulk"))
@pytest.mark.parametrize("impl", ("h5py", "versioned_hdf5", "floor", "xarray_vhdf5"))  # baselines first
def test_memory_and_size(benchmark, note, tmp_path, workload, impl):
    """Peak RSS growth and final file size of a commit workload, in a fresh child process (memory.py).

    The benchmark's time is the child's whole life (interpreter start and
    imports included): not a measurement of the workload, only there so the
    test runs under ``--benchmark-only``.
    """
    benchmark.group = "memory (child process wall time, not a workload measurement)"
    out = _once(benchmark, lambda: measure(workload, impl, tmp_path))  # the child checks the data
    if impl == "xarray_vhdf5":  # the default setting: one trim every 256 commits, none in these workloads
        assert out["metadata_trims"] == 0, out
    MEMORY[workload, impl] = out
    ratios = "".join(
        f" | {out['peak_rss_growth'] / MEMORY[workload, b]['peak_rss_growth']:.2f}x / {b} peak,"
        f" {out['file_size'] / MEMORY[workload, b]['file_size']:.2f}x / {b} size"
        for b in ("h5py", "versioned_hdf5")
        if (workload, b) in MEMORY and b != impl and MEMORY[workload, b]["peak_rss_growth"] > 0
    )
    note(
        f"memory {workload:8s} {impl:15s} peak RSS growth {out['peak_rss_growth'] / 2**20:7.1f} MiB,"
        f" file {out['file_size'] / 2**20:7.1f} MiB ({out['file_size']} B){ratios}"
    )


SMALL_METADATA_CACHE = 64 * 1024


@pytest.mark.parametrize("impl", ("h5py", "floor", "xarray_vhdf5"))  # baselines first
def test_memory_appends_small_metadata_cache(benchmark, note, tmp_path, impl):
    """Peak RSS growth of the appends workload with a fixed 64 KiB metadata cache.

    libhdf5 keeps each new virtual dataset's decoded layout (every mapping's
    hyperslab selections) in the file's metadata cache, which it sizes by the
    layout's bytes on disk: the decoded form is much larger. With the default
    cache (2 MiB of on-disk bytes) that is most of the format floor's memory
    above plain h5py. A smaller cache (``f.id.set_mdc_config``, a setting of the
    file handle) bounds it; compare with ``test_memory_and_size``'s appends rows.
    """
    benchmark.group = "memory (child process wall time, not a workload measurement)"
    out = _once(benchmark, lambda: measure("appends", impl, tmp_path, SMALL_METADATA_CACHE))
    MEMORY["appends-mdc64k", impl] = out
    ratios = "".join(
        f" | {out['peak_rss_growth'] / MEMORY[key]['peak_rss_growth']:.2f}x / {label}"
        for key, label in ((("appends", "h5py"), "h5py (default cache)"), (("appends-mdc64k", "h5py"), "h5py (64 KiB)"))
        if key in MEMORY and key != ("appends-mdc64k", impl) and MEMORY[key]["peak_rss_growth"] > 0
    )
    note(
        f"memory appends, 64 KiB metadata cache, {impl:15s} peak RSS growth"
        f" {out['peak_rss_growth'] / 2**20:7.1f} MiB{ratios}"
    )


def test_memory_appends_trimmed_every_16_commits(benchmark, note, tmp_path):
    """Peak RSS growth and file size of the appends workload, ``metadata_trim_every=16``.

    xarray_vhdf5 lets libhdf5's metadata cache shrink every 256 commits by
    default (never, in this 200-version workload); every 16 commits bounds the
    cached virtual datasets tighter, at a flush each time. Compare with
    ``test_memory_and_size``'s appends rows.
    """
    benchmark.group = "memory (child process wall time, not a workload measurement)"
    out = _once(benchmark, lambda: measure("appends", "xarray_vhdf5", tmp_path, trim_every=16))
    assert out["metadata_trims"] == 200 // 16, out  # the child ran with the setting (200 commits)
    ratios = "".join(
        f" | {out['peak_rss_growth'] / MEMORY[key]['peak_rss_growth']:.2f}x / {key[1]} peak,"
        f" {out['file_size'] / MEMORY[key]['file_size']:.4f}x / {key[1]} size"
        for key in (("appends", "h5py"), ("appends", "versioned_hdf5"), ("appends", "xarray_vhdf5"))
        if key in MEMORY and MEMORY[key]["peak_rss_growth"] > 0
    )
    note(
        f"memory appends, metadata trims every 16 commits, xarray_vhdf5 peak RSS growth"
        f" {out['peak_rss_growth'] / 2**20:7.1f} MiB, file {out['file_size']} B{ratios}"
    )
