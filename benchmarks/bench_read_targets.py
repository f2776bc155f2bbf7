"""Issue 19's read targets, side by side in one run: ``python benchmarks/bench_read_targets.py``.

Three workloads, each timed for this package (``xr.open_dataset(engine="vhdf5")``
and ``VersionedHDF5File.open``), versioned-hdf5 2.6, the format floor (plain
h5py reading the version's virtual dataset) and plain h5py reading an
ordinary chunked dataset holding the same data; the files are in the page
cache (one untimed round first); each result is checked against numpy.

1. ``open``: open a version of a (1000, 1000) float32 dataset in (10, 10)
   chunks (10,000 chunks) and read one point (target: < 5 ms);
2. ``points``: one point from each of 1000 versions of a (1000,) float64
   dataset in chunks of 10, one point changed per version (target: <= 10x
   plain h5py reading the same point 1000 times through one open file), by
   ``reader[v]["x"][i]`` per version and by ``reader.read_versions("x", i)``;
   then the same by ``read_versions`` in chunks of 100 (10 chunks: a dataset
   too small for a map log of its own, logged in the file's map log);
3. ``whole``: a whole version of a (2000, 2000) float64 dataset in
   (100, 100) chunks (400 chunks, 32 MB), uncompressed and gzip level 4
   (target: <= 1.0x plain h5py, and faster than plain h5py reading two
   halves in two threads on the compressed data).

Prints one table (pandas) of median milliseconds and ratios to plain h5py.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time

import h5py
import numpy as np
import pandas as pd
import xarray as xr

from xarray_vhdf5 import VersionedHDF5File, open_file

try:
    import versioned_hdf5
except ImportError:  # pragma: no cover
    versioned_hdf5 = None


def _median_ms(fn, rounds: int) -> float:
    fn()  # untimed: the page cache, imports
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def _build(path: str, plain: str, data: np.ndarray, chunks, versions=1, edit=None, **filters) -> None:
    with open_file(path) as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v0") as g:
            g.create_dataset("x", data=data, chunks=chunks, **filters)
        for i in range(1, versions):
            with vf.stage_version(f"v{i}") as g:
                edit(g["x"], i)
    with h5py.File(plain, "w") as f:
        f.create_dataset("x", data=data, chunks=chunks, **filters)


def bench_open(d: str, rounds: int) -> list[dict]:
    path, plain = os.path.join(d, "open.h5"), os.path.join(d, "open_plain.h5")
    data = np.random.default_rng(0).random((1000, 1000), dtype="f4")
    _build(path, plain, data, (10, 10))
    want = data[567, 321]

    def check(value):
        assert value == want, (value, want)

    def ours_xarray():
        with xr.open_dataset(path, engine="vhdf5", version="v0") as ds:
            check(ds["x"][567, 321].values)

    def ours_reader():
        with VersionedHDF5File.open(path) as vf:
            check(vf["v0"]["x"][567, 321])

    def vh():
        with h5py.File(path, "r") as f:
            check(versioned_hdf5.VersionedHDF5File(f)["v0"]["x"][567, 321])

    def floor():
        with h5py.File(path, "r") as f:
            check(f["_version_data/versions/v0/x"][567, 321])

    def h5():
        with h5py.File(plain, "r") as f:
            check(f["x"][567, 321])

    impls = {"xarray_vhdf5 (xarray)": ours_xarray, "xarray_vhdf5 (open)": ours_reader, "floor": floor, "h5py": h5}
    if versioned_hdf5 is not None:
        impls["versioned-hdf5"] = vh
    return [
        {"workload": "open 10k chunks + 1 point", "impl": k, "ms": _median_ms(fn, rounds)} for k, fn in impls.items()
    ]


def bench_points(d: str, rounds: int, n_versions: int = 1000, chunk: int = 10, every: bool = True) -> list[dict]:
    """One point from each version of a (1000,) float64 in chunks of ``chunk`` (``every``: also one
    version at a time and versioned-hdf5; a dataset of fewer than 64 chunks is logged in the file's
    map log, ``_versions/smallmaps.py``, a larger one in its own)."""
    path, plain = os.path.join(d, f"points{chunk}.h5"), os.path.join(d, f"points{chunk}_plain.h5")
    data = np.arange(1000.0)

    def edit(x, i):
        x[i % 1000] = -i

    _build(path, plain, data, (chunk,), versions=n_versions, edit=edit)
    point = 500  # changed by version 500 only

    def ours():
        with VersionedHDF5File.open(path) as vf:
            got = [vf[f"v{i}"]["x"][point] for i in range(n_versions)]
        assert got[499] == 500.0 and got[500] == -500.0 and got[-1] == -500.0

    def ours_batch():
        with VersionedHDF5File.open(path) as vf:
            got = vf.read_versions("x", point, versions=[f"v{i}" for i in range(n_versions)])
        assert got[499] == 500.0 and got[500] == -500.0 and got[-1] == -500.0

    def vh():
        with h5py.File(path, "r") as f:
            vf = versioned_hdf5.VersionedHDF5File(f)
            got = [vf[f"v{i}"]["x"][point] for i in range(n_versions)]
        assert got[500] == -500.0

    def floor():
        with h5py.File(path, "r") as f:
            got = [f[f"_version_data/versions/v{i}/x"][point] for i in range(n_versions)]
        assert got[500] == -500.0

    def h5():
        with h5py.File(plain, "r") as f:
            x = f["x"]
            got = [x[point] for _ in range(n_versions)]
        assert got[0] == 500.0

    impls = {"xarray_vhdf5 (open)": ours, "xarray_vhdf5 (read_versions)": ours_batch, "floor": floor, "h5py": h5}
    if not every:
        del impls["xarray_vhdf5 (open)"]
    elif versioned_hdf5 is not None:
        impls["versioned-hdf5"] = vh
    workload = f"1 point x {n_versions} versions, {-(-1000 // chunk)} chunks"
    return [{"workload": workload, "impl": k, "ms": _median_ms(fn, max(1, rounds // 5))} for k, fn in impls.items()]


def bench_whole(d: str, rounds: int, compression: str | None) -> list[dict]:
    tag = compression or "none"
    path, plain = os.path.join(d, f"whole_{tag}.h5"), os.path.join(d, f"whole_{tag}_plain.h5")
    data = np.random.default_rng(1).standard_normal((2000, 2000)).round(2)
    filters = {"compression": compression, "compression_opts": 4} if compression else {}
    _build(path, plain, data, (100, 100), **filters)

    def ours_reader():
        with VersionedHDF5File.open(path) as vf:
            assert np.array_equal(vf["v0"]["x"][()], data)

    def ours_xarray():
        with xr.open_dataset(path, engine="vhdf5") as ds:
            assert np.array_equal(ds["x"].values, data)

    def floor():
        with h5py.File(path, "r") as f:
            assert np.array_equal(f["_version_data/versions/v0/x"][()], data)

    def h5():
        with h5py.File(plain, "r") as f:
            assert np.array_equal(f["x"][()], data)

    def h5_threads():
        out = np.empty_like(data)
        with h5py.File(plain, "r") as f:
            x = f["x"]

            def half(i):
                out[i * 1000 : (i + 1) * 1000] = x[i * 1000 : (i + 1) * 1000]

            threads = [threading.Thread(target=half, args=(i,)) for i in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        assert np.array_equal(out, data)

    impls = {
        "xarray_vhdf5 (open)": ours_reader,
        "xarray_vhdf5 (xarray)": ours_xarray,
        "floor": floor,
        "h5py": h5,
        "h5py, 2 threads": h5_threads,
    }
    return [
        {"workload": f"whole version 32 MB, {tag}", "impl": k, "ms": _median_ms(fn, rounds)} for k, fn in impls.items()
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=15, help="timed rounds a measurement (median)")
    parser.add_argument("--versions", type=int, default=1000, help="versions of the points workload")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        rows = bench_open(d, args.rounds)
        rows += bench_points(d, args.rounds, args.versions)
        rows += bench_points(d, args.rounds, args.versions, chunk=100, every=False)
        rows += bench_whole(d, args.rounds, None)
        rows += bench_whole(d, args.rounds, "gzip")
    table = pd.DataFrame(rows)
    base = table[table.impl == "h5py"].set_index("workload")["ms"]
    table["x h5py"] = table.ms / table.workload.map(base)
    pd.set_option("display.width", 120)
    print(
        f"h5py {h5py.__version__} (HDF5 {h5py.version.hdf5_version}), {os.cpu_count()} cores, "
        f"load {os.getloadavg()[0]:.1f}"
    )
    print(table.to_string(index=False, float_format=lambda v: f"{v:.2f}"))


if __name__ == "__main__":
    main()
