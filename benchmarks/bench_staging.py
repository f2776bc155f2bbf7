"""Benchmarks of the staging engine (:mod:`xarray_vhdf5._staging`) against its peers.

What is measured
----------------
A (2000, 2000) float64 array in (100, 100) chunks (32 MB, 400 chunks), three
phases of 1000 operations each on random 10x10 windows (about 1 in 5 spans
two or four chunks):

``get``         1000 ``arr[i:i+10, j:j+10]`` on the untouched array;
``set``         1000 ``arr[i:i+10, j:j+10] = value`` (a 10x10 array);
``get_staged``  1000 reads again, after the ``set`` phase: most chunks are staged,
                about 1 in 20 is still on the base (never written);
``get_loaded``  the same reads after the ``set`` phase and ``load()``: every chunk
                staged, the pure in-memory read path.

Implementations, side by side in the same run:

``xarray_vhdf5``       ``StagedChangesArray`` over an h5py base slab laid out
                       like ``raw_data`` (chunks concatenated along axis 0,
                       uncompressed, chunked (100, 100));
``versioned-hdf5``     versioned-hdf5 2.6's ``StagedChangesArray``, same base;
``h5py``               a plain chunked (100, 100) ``h5py.Dataset`` (writes go
                       to the file through libhdf5's chunk cache);
``numpy-fancy``        a numpy array indexed with integer arrays (a copy);
``numpy-slice``        a numpy array, basic slicing plus ``.copy()``.

Every benchmark then checks its data against numpy (every read of the last
round, and the whole array).  Each round starts from a fresh state built in
the untimed setup (for ``get_staged`` the setup runs the ``set`` phase).

A second benchmark (``-m slow``) measures the peak memory (``tracemalloc``)
of staging a one-point and a one-chunk edit of a 2 GB HDF5 base.

What is left out: opening files, HDF5's own allocations (not traced by
tracemalloc), commit.  Timings include Python's loop overhead, the same for
every implementation.  Run::

    pytest benchmarks/bench_staging.py --benchmark-only
    pytest benchmarks/bench_staging.py --benchmark-only -m slow   # the 2 GB one
"""

from __future__ import annotations

import tracemalloc
import warnings

import h5py
import numpy as np
import pytest

from xarray_vhdf5._staging import StagedChangesArray

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from versioned_hdf5.staged_changes import StagedChangesArray as VersionedHDF5StagedChangesArray

SHAPE = (2000, 2000)
CHUNKS = (100, 100)
WINDOW = 10
N_OPS = 1000
ROUNDS = 7
IMPLS = ["xarray_vhdf5", "versioned-hdf5", "h5py", "numpy-fancy", "numpy-slice"]
PHASES = ["get", "set", "get_staged", "get_loaded"]
# h5py has no staging area: nothing to load.
CASES = [(p, i) for p in PHASES for i in IMPLS if not (p == "get_loaded" and i == "h5py")]


def raw_layout(data: np.ndarray, chunks: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``raw_data`` of ``data`` (chunks in C order along axis 0) and its slab metadata."""
    g0, g1 = data.shape[0] // chunks[0], data.shape[1] // chunks[1]
    raw = data.reshape(g0, chunks[0], g1, chunks[1]).transpose(0, 2, 1, 3).reshape(-1, chunks[1])
    si = np.ones((g0, g1), dtype=np.intp)
    so = (np.arange(g0 * g1, dtype=np.uint64) * np.uint64(chunks[0])).reshape(g0, g1)
    return raw, si, so


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    rng = np.random.default_rng(42)
    data = rng.standard_normal(SHAPE)
    raw, si, so = raw_layout(data, CHUNKS)
    path = tmp_path_factory.mktemp("bench") / "staging.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("plain", data=data, chunks=CHUNKS)
        f.create_dataset("raw", data=raw, chunks=CHUNKS, maxshape=(None, CHUNKS[1]))
    high = SHAPE[0] - WINDOW
    positions = {phase: rng.integers(0, high + 1, size=(N_OPS, 2)).tolist() for phase in ("get", "set", "get_staged")}
    value = rng.standard_normal((WINDOW, WINDOW))
    after_set = data.copy()
    for i, j in positions["set"]:
        after_set[i : i + WINDOW, j : j + WINDOW] = value
    f = h5py.File(path, "r+")
    yield {
        "file": f,
        "data": data,
        "after_set": after_set,
        "si": si,
        "so": so,
        "positions": positions,
        "value": value,
    }
    f.close()


def make(impl: str, w: dict):
    """A fresh array of the implementation, holding ``w["data"]``."""
    f = w["file"]
    if impl == "xarray_vhdf5":
        return StagedChangesArray(SHAPE, CHUNKS, [f["raw"]], w["si"], w["so"])
    if impl == "versioned-hdf5":
        return VersionedHDF5StagedChangesArray(
            shape=SHAPE,
            chunk_size=CHUNKS,
            base_slabs=[f["raw"]],
            slab_indices=w["si"].copy(),
            slab_offsets=w["so"].copy(),
        )
    if impl == "h5py":
        dset = f["plain"]
        dset[...] = w["data"]  # undo the previous round's writes
        return dset
    return w["data"].copy()


def reader(impl: str):
    if impl == "numpy-fancy":

        def read(arr, i, j):
            return arr[np.arange(i, i + WINDOW)[:, None], np.arange(j, j + WINDOW)]

    elif impl == "numpy-slice":

        def read(arr, i, j):
            return arr[i : i + WINDOW, j : j + WINDOW].copy()

    else:

        def read(arr, i, j):
            return arr[i : i + WINDOW, j : j + WINDOW]

    return read


def writer(impl: str):
    if impl == "numpy-fancy":

        def write(arr, i, j, value):
            arr[np.arange(i, i + WINDOW)[:, None], np.arange(j, j + WINDOW)] = value

    else:

        def write(arr, i, j, value):
            arr[i : i + WINDOW, j : j + WINDOW] = value

    return write


@pytest.mark.parametrize(("phase", "impl"), CASES)
def test_staging_random_windows(benchmark, record, workload, phase, impl):
    w = workload
    read, write = reader(impl), writer(impl)
    value = w["value"]
    state: dict = {}

    def setup():
        arr = make(impl, w)
        if phase in ("get_staged", "get_loaded"):
            for i, j in w["positions"]["set"]:
                write(arr, i, j, value)
        if phase == "get_loaded" and hasattr(arr, "load"):
            arr.load()
        state["arr"] = arr
        return (arr,), {}

    if phase == "set":
        positions = w["positions"]["set"]

        def target(arr):
            for i, j in positions:
                write(arr, i, j, value)

    else:
        positions = w["positions"]["get" if phase == "get" else "get_staged"]  # same reads

        def target(arr):
            state["out"] = [read(arr, i, j) for i, j in positions]

    benchmark.group = f"staging {phase}: {N_OPS} random {WINDOW}x{WINDOW} windows"
    benchmark.extra_info["impl"] = impl
    benchmark.pedantic(target, setup=setup, rounds=ROUNDS, iterations=1)
    record(
        benchmark,
        benchmark.group,
        impl,
        baseline=impl == "h5py" or (impl == "numpy-fancy" and phase.startswith("get_")),
    )

    # Check the data against numpy.
    expected = w["data"] if phase == "get" else w["after_set"]
    np.testing.assert_array_equal(state["arr"][:, :], expected)
    if phase != "set":
        for out, (i, j) in zip(state["out"], positions):
            np.testing.assert_array_equal(out, expected[i : i + WINDOW, j : j + WINDOW])


BIG_CHUNKS = (1000, 1000)  # 8 MB of float64
BIG_SHAPE = (16_000, 16_000)  # 2.05 GB


@pytest.fixture(scope="module")
def base_2gb(tmp_path_factory):
    """A raw_data-like HDF5 dataset of 2 GB (256 chunks of 8 MB), removed afterwards."""
    chunks, shape = BIG_CHUNKS, BIG_SHAPE
    n = (shape[0] // chunks[0]) * (shape[1] // chunks[1])
    path = tmp_path_factory.mktemp("big") / "base_2gb.h5"
    with h5py.File(path, "w") as f:
        raw = f.create_dataset("raw", shape=(n * chunks[0], chunks[1]), dtype="f8", chunks=chunks)
        block = np.ones((32 * chunks[0], chunks[1]))
        for k in range(0, n, 32):  # a few big writes
            raw[k * chunks[0] : (k + 32) * chunks[0]] = block
    yield path
    path.unlink()


@pytest.mark.slow
@pytest.mark.parametrize("impl", ["xarray_vhdf5", "versioned-hdf5"])
def test_one_chunk_edit_of_a_2gb_base_memory(benchmark, record, note, base_2gb, impl):
    """Peak traced memory of staging edits of a 2 GB HDF5 base (8 MB chunks)."""
    chunks, shape, path = BIG_CHUNKS, BIG_SHAPE, base_2gb
    grid = (shape[0] // chunks[0], shape[1] // chunks[1])
    n = grid[0] * grid[1]
    chunk_bytes = chunks[0] * chunks[1] * 8
    si = np.ones(grid, dtype=np.intp)
    so = (np.arange(n, dtype=np.uint64) * np.uint64(chunks[0])).reshape(grid)
    with h5py.File(path, "r") as f:
        raw = f["raw"]

        def fresh():
            if impl == "xarray_vhdf5":
                return StagedChangesArray(shape, chunks, [raw], si, so)
            return VersionedHDF5StagedChangesArray(
                shape=shape,
                chunk_size=chunks,
                base_slabs=[raw],
                slab_indices=si.copy(),
                slab_offsets=so.copy(),
            )

        peaks = {}
        for label, edit in [
            ("one point", lambda a: a.__setitem__((12_345, 6_789), 42.0)),
            ("one whole chunk", lambda a: a.__setitem__((slice(0, 1000), slice(0, 1000)), 7.0)),
        ]:
            arr = fresh()
            tracemalloc.start()
            try:
                edit(arr)
                peaks[label] = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            assert arr[12_345, 6_789] == 42.0 or arr[0, 0] == 7.0
        for label, peak in peaks.items():
            note(
                f"2 GB base, {impl}, edit of {label}: peak traced memory {peak / 1e6:.1f} MB "
                f"= {peak / chunk_bytes:.2f} chunks of {chunk_bytes / 1e6:.0f} MB"
            )
        if impl == "xarray_vhdf5":
            assert peaks["one point"] < 1.1 * chunk_bytes
            assert peaks["one whole chunk"] < 1.1 * chunk_bytes

        benchmark.group = "staging: one-point edit of a 2 GB base"
        benchmark.pedantic(
            lambda a: a.__setitem__((12_345, 6_789), 42.0),
            setup=lambda: ((fresh(),), {}),
            rounds=5,
        )
        record(benchmark, benchmark.group, impl, baseline=impl == "versioned-hdf5")
