"""Many versions: lookups and reads across 1000 versions, side by side.

xarray_vhdf5 vs versioned-hdf5 2.6 (and, for reading one point per version,
plain h5py reading one point from each of 1000 ordinary datasets). The file is
built once per implementation (not timed here; commits are timed in
bench_commits.py). Run: ``pytest benchmarks/bench_versions.py --benchmark-only``.
"""

from __future__ import annotations

import datetime as dt

import h5py
import numpy as np
import pytest

from workloads import _versioned_file_class, many_versions_file

N = 1000
VERSIONED = ("xarray_vhdf5", "versioned_hdf5")


@pytest.fixture(scope="module", params=VERSIONED + ("h5py",))
def built(request, tmp_path_factory):
    path = str(tmp_path_factory.mktemp(request.param) / "many.h5")
    model = many_versions_file(request.param, path, N)
    return request.param, path, model


def _open(impl, path):
    f = h5py.File(path, "r+")
    return f, _versioned_file_class(impl)(f)


def test_index_lookup(benchmark, built):
    """``vf[-999]`` at 1000 versions (a fresh VersionedHDF5File each time: no cache)."""
    impl, path, model = built
    if impl == "h5py":
        pytest.skip("no versions in plain h5py")
    benchmark.group = "lookup vf[-999] at 1000 versions"

    def lookup():
        f, vf = _open(impl, path)
        try:
            return vf[-999]["x"][()]
        finally:
            f.close()

    np.testing.assert_array_equal(benchmark(lookup), model[0])


def test_timestamp_lookup(benchmark, built):
    """``vf[datetime]`` (latest at or before) at 1000 versions."""
    impl, path, model = built
    if impl == "h5py":
        pytest.skip("no versions in plain h5py")
    benchmark.group = "lookup by timestamp at 1000 versions"
    when = np.datetime64("2020-01-01T00:08:20.500")  # between v500 and v501

    def lookup():
        f, vf = _open(impl, path)
        try:
            return vf[when]["x"][()]
        finally:
            f.close()

    np.testing.assert_array_equal(benchmark(lookup), model[500])


def test_one_point_from_each_version(benchmark, built):
    """Read point 0..N from each of the 1000 versions (or 1000 plain datasets)."""
    impl, path, model = built
    benchmark.group = "one point from each of 1000 versions"
    expected = np.array([m[k % 1000] for k, m in enumerate(model)])

    def read_all():
        with h5py.File(path, "r") as f:
            if impl == "h5py":
                return np.array([f[f"d{k}"][k % 1000] for k in range(N)])
            vf = _versioned_file_class(impl)(f)
            return np.array([vf[f"v{k}"]["x"][k % 1000] for k in range(N)])

    np.testing.assert_array_equal(benchmark.pedantic(read_all, rounds=3, iterations=1), expected)
