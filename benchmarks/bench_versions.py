"""Many versions: open, lookups and reads across 1000 versions, side by side.

xarray_vhdf5 vs versioned-hdf5 2.6, and plain h5py where it has an equivalent.
The 1000-version file (``workloads.many_versions_file``: a (1000,) float64 of
(100,) chunks, one point changed per version, versions 1 s apart) is built once
per implementation (not timed; commits are timed in bench_commits.py). Every
benchmark checks its result against the numpy model.

Groups (medians and ratios are printed at the end of the run):

- ``open + list versions``: ``h5py.File`` + ``VersionedHDF5File(f)`` + ``vf.versions``
  (plain h5py: ``h5py.File`` + ``list(f)`` of 1000 datasets);
- ``fresh vf[-999]`` / ``fresh vf[timestamp]`` (exact / at-or-before): a fresh file
  and ``VersionedHDF5File`` each round, then the lookup and reading the dataset;
- ``lookup vf[-999]`` / ``lookup vf[timestamp] ...``: the lookup alone on an open
  ``VersionedHDF5File`` (the name resolution; nothing read; versioned-hdf5's per-key
  cache cleared each round);
- ``one point from each of 1000 versions``: ``vf[f"v{k}"]["x"][k]`` for every
  version, against plain h5py reading one point of each of 1000 datasets;
- ``open version, 1 chunk`` / ``open version, 10000 chunks``: ``vf["v2"][name][i, j]``
  on a (10, 10) and a (1000, 1000) float64, both of (10, 10) chunks (one mapping
  per chunk), against plain h5py reading the same point of ordinary datasets.

Run: ``pytest benchmarks/bench_versions.py --benchmark-only -p no:cacheprovider -o addopts=""``.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from workloads import _versioned_file_class, many_versions_file

N = 1000
VERSIONED = ("xarray_vhdf5", "versioned_hdf5")
#: Between v500 (00:08:20) and v501: at-or-before gives v500.
BETWEEN = np.datetime64("2020-01-01T00:08:20.500")
EXACT = np.datetime64("2020-01-01T00:08:20")


@pytest.fixture(scope="module", params=(*VERSIONED, "h5py"))
def built(request, tmp_path_factory):
    path = str(tmp_path_factory.mktemp(request.param) / "many.h5")
    model = many_versions_file(request.param, path, N)
    return request.param, path, model


def _needs_versions(impl):
    if impl == "h5py":
        pytest.skip("no versions in plain h5py")


def test_open_and_list(benchmark, built, record):
    impl, path, _model = built
    group = "open + list versions (1000)"

    def open_list():
        with h5py.File(path, "r") as f:
            if impl == "h5py":
                return list(f)
            return list(_versioned_file_class(impl)(f).versions)

    names = benchmark(open_list)
    assert sorted(names) == sorted((f"d{k}" if impl == "h5py" else f"v{k}") for k in range(N))
    record(benchmark, group, impl, baseline=impl in ("h5py", "versioned_hdf5"))


@pytest.mark.parametrize("key", ["-999", "exact", "at-or-before"])
def test_fresh_lookup(benchmark, built, record, key):
    """A fresh file and VersionedHDF5File each round, the lookup, and the dataset read."""
    impl, path, model = built
    _needs_versions(impl)
    k = {"-999": -999, "exact": EXACT, "at-or-before": BETWEEN}[key]

    def lookup():
        with h5py.File(path, "r") as f:
            return _versioned_file_class(impl)(f)[k]["x"][()]

    np.testing.assert_array_equal(benchmark(lookup), model[0 if key == "-999" else 500])
    record(benchmark, f"fresh open + vf[{key}] + read", impl, baseline=impl == "versioned_hdf5")


@pytest.mark.parametrize("key", ["-999", "exact", "at-or-before"])
def test_lookup(benchmark, built, record, key):
    """The lookup alone, on an open VersionedHDF5File.

    versioned-hdf5 caches ``vf[key]`` per key: its cache is cleared each round,
    so both libraries resolve the key every time (xarray_vhdf5 reads
    ``current_version`` each time and keeps the current version's ancestry).
    """
    impl, path, model = built
    _needs_versions(impl)
    k = {"-999": -999, "exact": EXACT, "at-or-before": BETWEEN}[key]
    with h5py.File(path, "r") as f:
        vf = _versioned_file_class(impl)(f)
        cache = getattr(vf, "_version_cache", {})

        def lookup():
            cache.clear()
            return vf[k]

        group = benchmark(lookup)
        np.testing.assert_array_equal(group["x"][()], model[0 if key == "-999" else 500])
    record(benchmark, f"lookup vf[{key}] (open file)", impl, baseline=impl == "versioned_hdf5")


def test_one_point_from_each_version(benchmark, built, record):
    """Read point k from version k (or from plain dataset k), for the 1000 versions."""
    impl, path, model = built
    expected = np.array([m[k % 1000] for k, m in enumerate(model)])

    def read_all():
        with h5py.File(path, "r") as f:
            if impl == "h5py":
                return np.array([f[f"d{k}"][k % 1000] for k in range(N)])
            vf = _versioned_file_class(impl)(f)
            return np.array([vf[f"v{k}"]["x"][k % 1000] for k in range(N)])

    np.testing.assert_array_equal(benchmark.pedantic(read_all, rounds=5, iterations=1), expected)
    record(benchmark, "one point from each of 1000 versions", impl, baseline=impl in ("h5py", "versioned_hdf5"))


# -- opening a version: chunk count ---------------------------------------------------

SIZES = {"1 chunk": (10, 10), "10000 chunks": (1000, 1000)}


@pytest.fixture(scope="module", params=(*VERSIONED, "h5py"))
def chunky(request, tmp_path_factory):
    """Datasets of (10, 10) chunks: 1 chunk and 10000 chunks, each chunk distinct."""
    impl = request.param
    path = str(tmp_path_factory.mktemp(f"chunky-{impl}") / "chunky.h5")
    rng = np.random.default_rng(5)
    data = {name: rng.random(shape) for name, shape in SIZES.items()}
    with h5py.File(path, "w") as f:
        if impl == "h5py":
            for name, arr in data.items():
                f.create_dataset(name, data=arr, chunks=(10, 10))
        else:
            vf = _versioned_file_class(impl)(f)
            with vf.stage_version("v1") as g:
                for name, arr in data.items():
                    g.create_dataset(name, data=arr, chunks=(10, 10))
            with vf.stage_version("v2") as g:
                g["10000 chunks"][500, 500] = -1.0
            data["10000 chunks"][500, 500] = -1.0
    return impl, path, data


@pytest.mark.parametrize("name", list(SIZES))
def test_open_version_by_chunk_count(benchmark, chunky, record, name):
    """``vf["v2"][name][i, j]`` on an open file: opening the version's dataset and one point."""
    impl, path, data = chunky
    i = min(500, SIZES[name][0] - 1)
    with h5py.File(path, "r") as f:
        if impl == "h5py":
            read = lambda: f[name][i, i]  # noqa: E731
        else:
            vf = _versioned_file_class(impl)(f)
            read = lambda: vf["v2"][name][i, i]  # noqa: E731
        assert benchmark(read) == data[name][i, i]
    record(benchmark, f"open version + read a point, {name}", impl, baseline=impl in ("h5py", "versioned_hdf5"))
