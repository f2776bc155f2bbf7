"""Deleting 10, 30 and 50 versions of a many-version file, side by side with versioned-hdf5 2.6.

Two files, each built once (not timed) and copied before every timed deletion:

- ``points``: 100 versions of a (2000, 2000) float64 dataset in (100, 100) chunks
  (400 chunks, 32 MB per version), 10 random points changed per version (so about
  10 new chunks per version: 1376 stored chunks, 110 MB of raw_data); written by
  xarray_vhdf5 (the format is the same for both libraries). n random versions
  (fixed seed, never v0) are deleted.
- ``asv``: versioned-hdf5's own ``TimeDeleteVersions`` benchmark file: ``3 * (n + 1)``
  versions of a growing (3, 15000) float64 dataset in (22, 100) chunks, lzf, NaN fill;
  50 random points of the last row changed per version; every version whose number
  is not a multiple of 10 is deleted (the timings in its asv suite).

Measured: wall time of ``delete_versions`` alone (copying and opening the file are not
timed; the table takes the best of 3 rounds, pytest-benchmark's own shows all), and,
in one extra run each, the peak of Python/numpy allocations (``tracemalloc``; libhdf5's
own buffers, e.g. its 1 MiB chunk cache, are not seen). After each deletion the
current version and five random survivors (``points``) or every survivor (``asv``)
are compared with a numpy model. A table with our/versioned-hdf5 ratios is printed at
the end. Left out: building the files, reopening them, h5repack (neither library
shrinks the file itself; the freed space is reused by later writes of the session).
Run: ``pytest benchmarks/bench_versions_delete.py --benchmark-only -s``.
"""

from __future__ import annotations

import shutil
import time
import tracemalloc

import h5py
import numpy as np
import pytest

IMPLS = ("xarray_vhdf5", "versioned_hdf5")
NS = (10, 30, 50)
RESULTS: dict[tuple[str, int, str], dict[str, float]] = {}


def _delete_function(impl):
    if impl == "xarray_vhdf5":
        from xarray_vhdf5._versions import delete_versions
    else:
        from versioned_hdf5 import delete_versions
    return delete_versions


# -- the files and their numpy models ---------------------------------------------------------


def build_points(path) -> list[list[tuple[int, int, float]]]:
    """The ``points`` file; returns each version's changes (v0: none; data ``random((2000, 2000))``)."""
    from xarray_vhdf5 import VersionedHDF5File

    rng = np.random.default_rng(0)
    changes = [[]]
    with h5py.File(path, "w") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v0") as g:
            g.create_dataset("x", data=np.random.default_rng(1).random((2000, 2000)), chunks=(100, 100))
        for i in range(1, 100):
            points = [
                (int(r), int(c), float(v))
                for r, c, v in zip(rng.integers(0, 2000, 10), rng.integers(0, 2000, 10), rng.random(10))
            ]
            with vf.stage_version(f"v{i}") as g:
                for r, c, v in points:
                    g["x"][r, c] = v
            changes.append(points)
    return changes


def points_model(changes, version: str) -> np.ndarray:
    data = np.random.default_rng(1).random((2000, 2000))
    for points in changes[: int(version[1:]) + 1]:
        for r, c, v in points:
            data[r, c] = v
    return data


def build_asv(path, n: int) -> dict[str, np.ndarray]:
    """versioned-hdf5's TimeDeleteVersions file, written by versioned-hdf5; returns the model."""
    import versioned_hdf5

    rng = np.random.default_rng(0)
    model, current = {}, np.zeros((0, 0))
    with h5py.File(path, "w") as f:
        vf = versioned_hdf5.VersionedHDF5File(f)
        with vf.stage_version("init") as sv:
            sv.create_dataset(
                "values",
                shape=(0, 0),
                dtype="float",
                fillvalue=np.nan,
                chunks=(22, 100),
                maxshape=(None, None),
                compression="lzf",
            )
        v = 1
        for _ in range(3):
            with vf.stage_version(str(v)) as sv:
                ds = sv["values"]
                ds.resize((ds.shape[0] + 1, ds.shape[1] + 5000))
                value = rng.random()
                ds[-1, -5000] = value
            grown = np.full((current.shape[0] + 1, current.shape[1] + 5000), np.nan)
            grown[: current.shape[0], : current.shape[1]] = current
            grown[-1, -5000] = value
            current = model[str(v)] = grown
            v += 1
            for _ in range(n):
                with vf.stage_version(str(v)) as sv:
                    ds = sv["values"]
                    idxs = rng.choice(ds.shape[1], 50, replace=False)
                    values = rng.random(50)
                    ds[-1, idxs] = values
                current = current.copy()
                current[-1, idxs] = values
                model[str(v)] = current
                v += 1
        vf.close()
    return model


@pytest.fixture(scope="module")
def points_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("points") / "points.h5"
    return path, build_points(path)


@pytest.fixture(scope="module")
def asv_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("asv")
    return {n: (root / f"asv{n}.h5", build_asv(root / f"asv{n}.h5", n)) for n in NS}


@pytest.fixture(scope="module", autouse=True)
def summary(request):
    yield
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or not RESULTS:
        return
    reporter.write_line("")
    reporter.write_line(
        "delete_versions: xarray_vhdf5 vs versioned-hdf5 2.6 (time: best of 3 rounds, the least "
        "disturbed by other processes; peak: tracemalloc, one run)"
    )
    reporter.write_line(
        f"{'file':8} {'n':>3} {'ours s':>8} {'v-h5 s':>8} {'ratio':>6}   "
        f"{'ours peak MB':>12} {'v-h5 peak MB':>12} {'ratio':>6}"
    )
    for scenario in ("points", "asv"):
        for n in NS:
            ours, ref = RESULTS.get((scenario, n, IMPLS[0])), RESULTS.get((scenario, n, IMPLS[1]))
            if not ours or not ref:
                continue
            reporter.write_line(
                f"{scenario:8} {n:>3} {ours['time']:8.3f} {ref['time']:8.3f} {ours['time'] / ref['time']:6.3f}   "
                f"{ours['peak'] / 1e6:12.2f} {ref['peak'] / 1e6:12.2f} {ours['peak'] / ref['peak']:6.3f}"
            )


def run(benchmark, impl, scenario, n, source, work, doomed):
    """Time ``delete_versions(copy of source, doomed)``; measure its peak memory once more."""
    delete = _delete_function(impl)
    state = {}

    def setup():
        shutil.copy(source, work)
        state["f"] = h5py.File(work, "r+")
        return (state["f"], doomed), {}

    def delete_and_close(f, names):
        try:
            delete(f, names)
        finally:
            f.close()

    benchmark.group = f"delete {n} versions ({scenario})"
    benchmark.pedantic(delete_and_close, setup=setup, rounds=3, iterations=1)
    shutil.copy(source, work)
    with h5py.File(work, "r+") as f:
        tracemalloc.start()
        start = time.perf_counter()
        delete(f, doomed)
        elapsed = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    benchmark.extra_info.update(peak_bytes=peak, traced_seconds=elapsed)
    RESULTS[scenario, n, impl] = {"time": benchmark.stats.stats.min, "peak": peak}


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("impl", IMPLS)
def test_delete_points(benchmark, points_file, tmp_path, impl, n):
    source, changes = points_file
    rng = np.random.default_rng(n)
    doomed = [f"v{i}" for i in sorted(rng.choice(np.arange(1, 100), n, replace=False))]
    work = tmp_path / "work.h5"
    run(benchmark, impl, "points", n, source, work, doomed)
    survivors = [f"v{i}" for i in range(100) if f"v{i}" not in doomed]
    with h5py.File(work, "r") as f:
        versions = f["_version_data/versions"]
        assert sorted(versions) == sorted([*survivors, "__first_version__"])
        current = versions.attrs["current_version"]
        assert current == survivors[-1]
        sample = [current] + [str(v) for v in np.random.default_rng(7).choice(survivors, 5, replace=False)]
        for v in sample:
            np.testing.assert_array_equal(versions[v]["x"][()], points_model(changes, v), err_msg=v)


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("impl", IMPLS)
def test_delete_asv(benchmark, asv_files, tmp_path, impl, n):
    source, model = asv_files[n]
    doomed = [v for v in model if int(v) % 10]
    work = tmp_path / "work.h5"
    run(benchmark, impl, "asv", n, source, work, doomed)
    with h5py.File(work, "r") as f:
        versions = f["_version_data/versions"]
        survivors = [v for v in model if v not in doomed]
        assert sorted(versions) == sorted([*survivors, "__first_version__", "init"])
        for v in survivors:
            np.testing.assert_array_equal(versions[v]["values"][()], model[v], err_msg=v)
