"""Reading old versions, side by side with plain h5py reading the same bytes.

Run: ``pytest benchmarks/bench_reads.py --benchmark-only -p no:cacheprovider -o addopts=""``

Two versioned files are built once (not timed) by xarray_vhdf5 with the
workloads of ``bench_commits.py`` (the format is the one versioned-hdf5 writes):

- ``sparse``: 100 versions x 10 random points of a (2000, 2000) float64, chunks
  (100, 100); version ``v10`` is read (32 MB, 400 chunks, most shared with other
  versions);
- ``appends``: 200 versions, version ``v{k}`` holding ``k + 1`` (180, 360) float32
  steps, chunks (8, 180, 360).

Implementations, each reading the same points:

- ``xarray_vhdf5`` / ``versioned_hdf5``: ``VersionedHDF5File(f)[version]["x"][key]``;
- ``floor``: plain h5py reading the version's virtual dataset
  (``f["_version_data/versions/<version>/x"][key]``), what any reader of the format
  pays;
- ``h5py``: plain h5py reading an ordinary chunked dataset with the same chunks and
  the same data (for the time slices: one (200, 180, 360) dataset).

Timed: opening the file (``h5py.File`` in mode ``"r"``, plus ``VersionedHDF5File``)
and the reads; the files are in the page cache after the first round. Each round's
result is checked against numpy after timing.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from workloads import (
    APPEND_CHUNKS,
    SPARSE_CHUNKS,
    _versioned_file_class,
    append_steps,
    appends,
    expected_sparse,
    sparse_edits,
    sparse_plan,
)

IMPLS = ("xarray_vhdf5", "versioned_hdf5", "floor", "h5py")
BASELINES = ("versioned_hdf5", "floor", "h5py")
OLD = 10  # the old version read from the sparse-edits file
HYPERSLAB = (slice(450, 1350), slice(230, 1130))  # 900 x 900, across chunk edges
N_APPENDS = 200


@pytest.fixture(scope="module")
def sparse_files(tmp_path_factory):
    """(versioned path, plain path, numpy model of v10)."""
    d = tmp_path_factory.mktemp("reads-sparse")
    base, edits = sparse_plan(100)
    versioned = str(d / "versioned.h5")
    sparse_edits("xarray_vhdf5", versioned, base, edits, read=False)
    model = expected_sparse(base, edits[:OLD])
    plain = str(d / "plain.h5")
    with h5py.File(plain, "w") as f:
        f.create_dataset("x", data=model, chunks=SPARSE_CHUNKS)
    return versioned, plain, model


@pytest.fixture(scope="module")
def append_files(tmp_path_factory):
    """(versioned path, plain path, the 200 steps)."""
    d = tmp_path_factory.mktemp("reads-appends")
    steps = append_steps(N_APPENDS)
    versioned = str(d / "versioned.h5")
    appends("xarray_vhdf5", versioned, steps, read=False)
    plain = str(d / "plain.h5")
    with h5py.File(plain, "w") as f:
        f.create_dataset("x", data=steps, chunks=APPEND_CHUNKS)
    return versioned, plain, steps


def reader(impl: str, versioned: str, plain: str, reads):
    """A function doing ``reads``: a list of (version name, key); returns the arrays read."""
    if impl == "h5py":

        def read():
            with h5py.File(plain, "r") as f:
                ds = f["x"]
                return [ds[key] for _, key in reads]

    elif impl == "floor":

        def read():
            with h5py.File(versioned, "r") as f:
                versions = f["_version_data/versions"]
                return [versions[name]["x"][key] for name, key in reads]

    else:
        cls = _versioned_file_class(impl)

        def read():
            with h5py.File(versioned, "r") as f:
                vf = cls(f)
                return [vf[name]["x"][key] for name, key in reads]

    return read


@pytest.mark.parametrize("impl", IMPLS)
def test_whole_old_version(benchmark, record, sparse_files, impl):
    """Version v10 of the sparse-edits file, whole: (2000, 2000) float64, 400 chunks (32 MB)."""
    versioned, plain, model = sparse_files
    benchmark.group = "read: whole old version (2000,2000) f8, chunks (100,100)"
    (out,) = benchmark(reader(impl, versioned, plain, [(f"v{OLD}", ())]))
    np.testing.assert_array_equal(out, model)
    record(benchmark, benchmark.group, impl, baseline=impl in BASELINES)


@pytest.mark.parametrize("impl", IMPLS)
def test_hyperslab_of_old_version(benchmark, record, sparse_files, impl):
    """[450:1350, 230:1130] of version v10: 900 x 900 float64 across 100 chunks, 81 partly."""
    versioned, plain, model = sparse_files
    benchmark.group = "read: 900x900 hyperslab of an old version"
    (out,) = benchmark(reader(impl, versioned, plain, [(f"v{OLD}", HYPERSLAB)]))
    np.testing.assert_array_equal(out, model[HYPERSLAB])
    record(benchmark, benchmark.group, impl, baseline=impl in BASELINES)


@pytest.mark.parametrize("impl", IMPLS)
def test_time_slice_from_each_version(benchmark, record, append_files, impl):
    """Step k of version v{k} for k < 200: one (180, 360) float32 slice from each of 200 versions."""
    versioned, plain, steps = append_files
    benchmark.group = "read: one time slice from each of 200 versions"
    out = benchmark.pedantic(reader(impl, versioned, plain, [(f"v{k}", k) for k in range(N_APPENDS)]), rounds=5)
    np.testing.assert_array_equal(np.stack(out), steps)
    record(benchmark, benchmark.group, impl, baseline=impl in BASELINES)
