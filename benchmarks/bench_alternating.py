"""Commit ratios measured in alternating rounds, for a shared machine whose speed drifts.

Run: ``pytest benchmarks/bench_alternating.py --benchmark-only -p no:cacheprovider -o addopts=""``

``bench_commits.py`` times each implementation in its own rounds, one after the
other; on a shared machine the load changes between them (single timings vary
up to 2x from run to run), which moves the ratios. Here the implementations take
turns, round after round, in one process: each ratio is taken within a round
(the same minute of machine time), and the median over rounds is reported.

- ``workload ratios``: the appends, sparse-edit and bulk-rewrite workloads of
  ``bench_commits.py`` (``workloads.py``), ``WORKLOAD_ROUNDS`` rounds, each
  round running xarray_vhdf5, the format floor and versioned-hdf5 once.
- ``history flatness``: the same one-point commits on two files per
  implementation, one of ``FLAT_SHORT`` versions and one of ``FLAT_LONG``, in
  ``FLAT_ROUNDS`` alternating rounds of ``FLAT_BATCH`` commits on each; the median
  of the per-round ratios long / short (issue 6: version 1000 within 1.2x of
  version 10). Each file gains ``FLAT_ROUNDS * FLAT_BATCH`` versions meanwhile.
- ``one-point commit ratios``: a (1000,) float64 with chunks (100,), first given
  ``ONE_POINT_HISTORY`` one-point versions by each implementation (not timed);
  then ``ONE_POINT_ROUNDS`` rounds of ``ONE_POINT_BATCH`` one-point commits per
  implementation, the file and the ``VersionedHDF5File`` kept open.
- ``one point among datasets``: a file of ``MANY_DATASETS`` such datasets; each
  version changes one point of one of them (chosen at random), the others are
  carried unchanged (the floor copies their virtual datasets with ``H5Ocopy``,
  :class:`workloads.MultiFloor`). ``MANY_HISTORY`` versions first, then
  the same rounds as the one-point commits.

Each final state is checked against numpy.
"""

from __future__ import annotations

import time

import h5py
import numpy as np
import pytest
from workloads import (
    MultiFloor,
    _floor,
    _versioned_file_class,
    append_steps,
    appends,
    bulk_plan,
    bulk_rewrite,
    expected_bulk,
    expected_sparse,
    read_final,
    sparse_edits,
    sparse_plan,
)

IMPLS = ("xarray_vhdf5", "floor", "versioned_hdf5")
WORKLOAD_ROUNDS = 5
ONE_POINT_HISTORY = 300
ONE_POINT_ROUNDS = 10
ONE_POINT_BATCH = 50
SHAPE, CHUNKS = (1000,), (100,)
MANY_DATASETS = 10
MANY_HISTORY = 100
FLAT_SHORT, FLAT_LONG = 10, 1000
FLAT_ROUNDS, FLAT_BATCH = 8, 10


def _summary(note, label: str, times: dict[str, list[float]], unit: float, per: str) -> None:
    ours = np.asarray(times["xarray_vhdf5"])
    for other in ("floor", "versioned_hdf5"):
        ratios = ours / np.asarray(times[other])
        note(
            f"alternating {label}: xarray_vhdf5 / {other} median {np.median(ratios):.2f}x"
            f" (rounds {' '.join(f'{r:.2f}' for r in ratios)})"
        )
    medians = " | ".join(f"{impl} {np.median(times[impl]) * unit:.2f} {per}" for impl in IMPLS)
    note(f"alternating {label}: medians {medians}")


def workload_inputs(workload: str) -> tuple:
    """``(run, args, expected, versions)`` of the appends, sparse-edit or bulk-rewrite workload."""
    if workload == "appends":
        steps = append_steps(200)
        return appends, (steps,), steps, 200
    if workload == "sparse":
        base, edits = sparse_plan(100)
        return sparse_edits, (base, edits), expected_sparse(base, edits), 101
    base, halves = bulk_plan(20)
    return bulk_rewrite, (base, halves), expected_bulk(base, halves), 21


def alternate_workload(benchmark, tmp_path, workload: str, impls: tuple[str, ...], rounds: int, group: str):
    """Run one workload by each of ``impls`` in turn, ``rounds`` times; check the final data.

    Returns ``(times, versions)``: seconds per run for each implementation, and the
    workload's number of versions.
    """
    run, args, expected, versions = workload_inputs(workload)
    times: dict[str, list[float]] = {impl: [] for impl in impls}

    def all_rounds():
        for _ in range(rounds):
            for impl in impls:
                start = time.perf_counter()
                run(impl, str(tmp_path / f"{impl}.h5"), *args, read=False)
                times[impl].append(time.perf_counter() - start)

    benchmark.group = group
    benchmark.pedantic(all_rounds, rounds=1, iterations=1)
    for impl in impls:
        np.testing.assert_array_equal(read_final(impl, str(tmp_path / f"{impl}.h5")), expected)
    return times, versions


@pytest.mark.parametrize("workload", ("appends", "sparse", "bulk"))
def test_workload_ratios(benchmark, note, tmp_path, workload):
    """Medians over rounds of the ratios xarray_vhdf5 / floor and / versioned-hdf5 for one workload."""
    times, versions = alternate_workload(
        benchmark,
        tmp_path,
        workload,
        IMPLS,
        WORKLOAD_ROUNDS,
        "alternating rounds (whole benchmark time, not a measurement)",
    )
    _summary(note, f"{workload} ({versions} versions)", times, 1e3 / versions, "ms per version")


class _OnePoint:
    """One implementation's open file with ``ONE_POINT_HISTORY`` one-point versions."""

    def __init__(self, impl: str, path: str, rng: np.random.Generator, history: int = ONE_POINT_HISTORY):
        self.impl, self.rng, self.model, self.n = impl, rng, np.zeros(SHAPE), 0
        self.f = h5py.File(path, "w")
        if impl in ("floor", "lean_floor"):
            self.floor = _floor(impl, self.f, SHAPE, CHUNKS, "f8")
            self.floor.commit("v0", SHAPE, {(j,): self.model[j * 100 : (j + 1) * 100].copy() for j in range(10)})
        else:
            self.vf = _versioned_file_class(impl)(self.f)
            with self.vf.stage_version("v0") as g:
                g.create_dataset("x", data=self.model, chunks=CHUNKS)
        for _ in range(history - 1):
            self.commit()

    def commit(self) -> None:
        self.n += 1
        i = int(self.rng.integers(0, SHAPE[0]))
        self.model[i] = float(self.n)
        if self.impl in ("floor", "lean_floor"):
            c = i // 100
            self.floor.commit(f"v{self.n}", SHAPE, {(c,): self.model[c * 100 : (c + 1) * 100].copy()})
        else:
            with self.vf.stage_version(f"v{self.n}") as g:
                g["x"][i] = float(self.n)

    def final(self) -> np.ndarray:
        if self.impl in ("floor", "lean_floor"):
            return self.floor.read(f"v{self.n}")
        return self.vf[self.vf.current_version]["x"][()]


class _OnePointAmong:
    """One implementation's open file of ``MANY_DATASETS`` datasets like ``_OnePoint``'s.

    One point of one dataset changes per version.
    """

    def __init__(self, impl: str, path: str, rng: np.random.Generator, history: int = MANY_HISTORY):
        self.impl, self.rng, self.n = impl, rng, 0
        self.names = [f"d{k}" for k in range(MANY_DATASETS)]
        self.model = {name: np.full(SHAPE, float(k)) for k, name in enumerate(self.names)}
        self.f = h5py.File(path, "w")
        if impl == "floor":
            self.floor = MultiFloor(self.f, self.names, SHAPE, CHUNKS, "f8")
            self.floor.commit(
                "v0",
                {name: {(j,): m[j * 100 : (j + 1) * 100].copy() for j in range(10)} for name, m in self.model.items()},
            )
        else:
            self.vf = _versioned_file_class(impl)(self.f)
            with self.vf.stage_version("v0") as g:
                for name, m in self.model.items():
                    g.create_dataset(name, data=m, chunks=CHUNKS)
        for _ in range(history - 1):
            self.commit()

    def commit(self) -> None:
        self.n += 1
        name = self.names[int(self.rng.integers(0, MANY_DATASETS))]
        i = int(self.rng.integers(0, SHAPE[0]))
        m = self.model[name]
        m[i] = float(self.n)
        if self.impl == "floor":
            c = i // 100
            self.floor.commit(f"v{self.n}", {name: {(c,): m[c * 100 : (c + 1) * 100].copy()}})
        else:
            with self.vf.stage_version(f"v{self.n}") as g:
                g[name][i] = float(self.n)

    def check(self) -> None:
        for name, m in self.model.items():
            if self.impl == "floor":
                got = self.floor.read(f"v{self.n}", name)
            else:
                got = self.vf[self.vf.current_version][name][()]
            np.testing.assert_array_equal(got, m)


def alternate_commits(benchmark, files: dict, rounds: int, batch: int, group: str) -> dict[object, list[float]]:
    """``batch`` one-point commits on each of ``files`` (``_OnePoint``) in turn, ``rounds`` times.

    Returns the seconds per commit of each batch, by key of ``files``; checks every
    file's final data against its model and closes the files.
    """
    times: dict[object, list[float]] = {key: [] for key in files}

    def all_rounds():
        for _ in range(rounds):
            for key, one in files.items():
                start = time.perf_counter()
                for _ in range(batch):
                    one.commit()
                times[key].append((time.perf_counter() - start) / batch)

    benchmark.group = group
    try:
        benchmark.pedantic(all_rounds, rounds=1, iterations=1)
        for one in files.values():
            if hasattr(one, "check"):
                one.check()
            else:
                np.testing.assert_array_equal(one.final(), one.model)
    finally:
        for one in files.values():
            one.f.close()
    return times


def test_one_point_commit_ratios(benchmark, note, tmp_path):
    """Medians over rounds of the one-point commit ratios, on files of 300+ versions."""
    files = {impl: _OnePoint(impl, str(tmp_path / f"{impl}.h5"), np.random.default_rng(5)) for impl in IMPLS}
    times = alternate_commits(
        benchmark,
        files,
        ONE_POINT_ROUNDS,
        ONE_POINT_BATCH,
        "alternating rounds (whole benchmark time, not a measurement)",
    )
    _summary(note, f"one-point commit ({ONE_POINT_HISTORY}+ versions)", times, 1e3, "ms")


def test_one_point_among_datasets_ratios(benchmark, note, tmp_path):
    """Medians over rounds of the commit ratios when one point of one of ten datasets changes per version."""
    files = {impl: _OnePointAmong(impl, str(tmp_path / f"{impl}.h5"), np.random.default_rng(7)) for impl in IMPLS}
    times = alternate_commits(
        benchmark,
        files,
        ONE_POINT_ROUNDS,
        ONE_POINT_BATCH,
        "alternating rounds (whole benchmark time, not a measurement)",
    )
    _summary(note, f"one point among {MANY_DATASETS} datasets ({MANY_HISTORY}+ versions)", times, 1e3, "ms")


def test_history_flatness(benchmark, note, tmp_path):
    """Medians over rounds of (commit time at 1000+ versions) / (commit time at 10+ versions)."""
    impls = ("xarray_vhdf5", "floor", "versioned_hdf5")
    files = {
        (impl, n): _OnePoint(impl, str(tmp_path / f"{impl}-{n}.h5"), np.random.default_rng(n), history=n)
        for impl in impls
        for n in (FLAT_SHORT, FLAT_LONG)
    }
    # Fresh handles on both files: xarray_vhdf5 trims libhdf5's metadata cache every 256
    # commits of a handle, which the handle that built the long history would reach
    # inside the timed rounds (at 1024) and the short one's never would.
    for (impl, _), one in files.items():
        if impl != "floor":
            one.vf = _versioned_file_class(impl)(one.f)
    times = alternate_commits(
        benchmark, files, FLAT_ROUNDS, FLAT_BATCH, "alternating rounds (whole benchmark time, not a measurement)"
    )
    end = FLAT_ROUNDS * FLAT_BATCH
    for impl in impls:
        short, long = np.asarray(times[impl, FLAT_SHORT]), np.asarray(times[impl, FLAT_LONG])
        ratios = long / short
        note(
            f"alternating history flatness {impl}: {FLAT_LONG}-{FLAT_LONG + end} versions / "
            f"{FLAT_SHORT}-{FLAT_SHORT + end} versions median {np.median(ratios):.2f}x "
            f"({np.median(long) * 1e3:.2f} / {np.median(short) * 1e3:.2f} ms; "
            f"rounds {' '.join(f'{r:.2f}' for r in ratios)})"
        )
