"""Issue 20's store benchmarks, ratios in one run: ``python benchmarks/bench_store.py [read|ingest|distributed|all]``.

Run from the repository root with the development environment active::

    python benchmarks/bench_store.py read                 # about 30 s
    python benchmarks/bench_store.py read --profile       # + where the store path's time goes
    python benchmarks/bench_store.py ingest --days 200    # about 40 s (icechunk in its own venv)
    python benchmarks/bench_store.py distributed          # 200 MB from a 2-worker LocalCluster
    python benchmarks/bench_store.py distributed --big    # 2 GB (4 GB of /tmp while it runs)

**read**: one version of a ``(128, 256, 256)`` float32 variable ``sst`` (32 MiB;
a smooth field plus noise rounded to 0.01, so that deflate has something to
do), written by ``ds.vhdf5.commit(name, path=)`` with the project's default
encoding (chunks ``(1, 256, 256)``, 256 KiB; shuffle + gzip 1, "deflate"),
again uncompressed (``encoding["compression"] = None``), and deflate in 4 MiB
chunks ``(16, 256, 256)`` (fewer, larger chunks: what a store presenting
bigger chunks would give). Cold rounds: every
round opens a new store or file (the file is in the page cache: one untimed
round first), the rows interleaved round by round, medians of ``--rounds``:

- ``engine``: ``xr.open_dataset(path, engine="vhdf5").load()`` (the baseline);
- ``engine, chunks={}``: the same through dask, one task per stored chunk;
- ``open_zarr``: ``xr.open_zarr(VersionStore(path)).load()`` (xarray's default
  ``chunks``: dask, one task per zarr chunk), then ``store.close()``;
- ``open_zarr, chunks=None``: the same without dask;
- ``open_zarr, chunks={'time': 16}``: dask tasks of 16 zarr chunks (4 MiB);
- ``... numcodecs``: the store opened with ``numcodecs=True`` (deflate and
  shuffle passed through to zarr-python's ``numcodecs.zlib`` / ``numcodecs.shuffle``,
  zarr decodes; its ``ZarrUserWarning`` about unspecified codecs is filtered).

Each result is checked against numpy. ``--profile`` then times the store
path's parts one by one on the deflate file: the store's open (file, version,
nodes, ``zarr.json`` documents; cProfile of it), every chunk's bytes read
(``stored_chunk``) and decoded (``decoded_chunk``), the store's ``get`` of every
chunk key serially and concurrently (``asyncio.gather``), the engine's
threaded whole read (``ChunkManifest.read``), and zarr's ``open_group(...)[...]``.

**ingest**: issue 19's daily ingest (``bench_ingest.py``'s workload: ``(T, 90,
180)`` float32, chunks ``(1, 90, 180)``, uncompressed, one day per commit,
then a QC fix and a read of an old version). Rows: icechunk 1.1.x
(``to_zarr(session.store, append_dim="time")`` + ``session.commit``, the
repository reopened each day; ``ingest_icechunk.py`` in ``/tmp/icechunk-venv``,
skipped with a note when missing), ours through the one call
``today.vhdf5.commit(name, path=, append_dim="time")``, and ours through the
writable store (``today.to_zarr(VersionStore(path, read_only=False),
mode="a", append_dim="time")`` + ``store.commit(message=...)``), when the
installed package has it (else skipped with a note).

**distributed**: a dask-backed Dataset of ``--mb`` MB (default 200; ``--big``:
2000) of float32 ``(T, 512, 1024)`` (dask's seeded random generator, chunks
``(16, 512, 1024)``, 32 MiB, made on the workers) with a daily ``time``
coordinate, written from a ``LocalCluster(n_workers=2, threads_per_worker=1,
processes=True, dashboard_address=":0")`` by ``to_netcdf(engine="h5netcdf")``
(the baselines, uncompressed and with shuffle + gzip 1, the filters ours
gives a new array; xarray takes dask.distributed's lock), and through the
store's forks when the package has them: ``fork = store.fork()``,
``ds.to_zarr(fork, mode="w")`` on the workers (zarr's default zstd), then
``store.merge(fork)`` and ``store.commit()`` on the client (the phases
printed). Reported: wall time, the client process's
peak RSS above its RSS before the write (psutil, sampled every 5 ms in a
thread), the workers' peak summed RSS, and the file's size. Three steps
(first, middle, last) are checked against the same dask array computed locally.
The files live in a temporary directory under /tmp, deleted at the end.

What it leaves out: remote storage, icechunk reads of the same version, a busy
machine's effect (the 1-minute load average is printed with each table).
Timings on a shared machine are noisy: compare the ratios of one run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import os
import pstats
import statistics
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import xarray as xr
import zarr

import xarray_vhdf5
from xarray_vhdf5.store import VersionStore, version_nodes, zarr_json_documents

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_ingest  # noqa: E402  (the sibling benchmark: issue 19's workload and icechunk's runner)

MB = 1e6
READ_SHAPE = (128, 256, 256)  # float32: 32 MiB


@contextlib.contextmanager
def _quiet_zarr():
    """Filter zarr-python's warning that the ``numcodecs.*`` codecs are not in the Zarr v3 spec."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=zarr.errors.ZarrUserWarning)
        yield


def header() -> str:
    return (
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, "
        f"load {os.getloadavg()[0]:.2f}; xarray_vhdf5 {xarray_vhdf5.__version__}, zarr {zarr.__version__}, "
        f"xarray {xr.__version__}, h5py {h5py.__version__} (libhdf5 {h5py.version.hdf5_version}); "
        f"{bench_ingest.source_state()}"
    )


# --- read -----------------------------------------------------------------------------------------


def read_dataset() -> xr.Dataset:
    """The 32 MiB version: a smooth field plus noise rounded to 0.01 (deflate compresses it about 1.6x)."""
    t, y, x = READ_SHAPE
    rng = np.random.default_rng(20)
    field = 20 * np.sin(np.linspace(0, np.pi, y))[:, None] * np.cos(np.linspace(0, 2 * np.pi, x))[None, :]
    data = np.round(field[None] + rng.standard_normal(READ_SHAPE), 2).astype(np.float32)
    coords = {
        "time": pd.date_range(bench_ingest.START, periods=t, freq="D"),
        "lat": np.linspace(-89.0, 89.0, y),
        "lon": np.linspace(-179.0, 179.0, x),
    }
    return xr.Dataset({"sst": (("time", "lat", "lon"), data)}, coords=coords)


def build_read_file(path: str, ds: xr.Dataset, compress: bool, chunks: tuple[int, ...] | None = None) -> None:
    ds = ds.copy()
    if not compress:
        for name in ds.variables:
            ds[name].encoding["compression"] = None
    if chunks is not None:
        ds["sst"].encoding["chunks"] = chunks
    ds.vhdf5.commit("v1", path=path)


def _engine(path: str, chunks=None) -> xr.Dataset:
    kwargs = {} if chunks is None else {"chunks": chunks}
    with xr.open_dataset(path, engine="vhdf5", **kwargs) as ds:
        return ds.load()


def _store(path: str, numcodecs: bool = False, chunks="default") -> xr.Dataset:
    store = VersionStore(path, numcodecs=numcodecs)
    try:
        with _quiet_zarr():
            ds = xr.open_zarr(store) if chunks == "default" else xr.open_zarr(store, chunks=chunks)
            return ds.load()
    finally:
        store.close()


READ_ROWS: dict[str, Callable[[str], xr.Dataset]] = {
    "engine": _engine,
    "engine, chunks={}": lambda p: _engine(p, chunks={}),
    "open_zarr": _store,
    "open_zarr, chunks=None": lambda p: _store(p, chunks=None),
    "open_zarr, chunks={'time': 16}": lambda p: _store(p, chunks={"time": 16}),
    "open_zarr, numcodecs": lambda p: _store(p, numcodecs=True),
    "open_zarr, chunks=None, numcodecs": lambda p: _store(p, numcodecs=True, chunks=None),
}


def time_rows(rows: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Median seconds of each row, rows interleaved round by round (one untimed round first)."""
    for fn in rows.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(rounds):
        for name, fn in rows.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(ts) for name, ts in times.items()}


def run_read(workdir: Path, rounds: int, profile: bool) -> pd.DataFrame:
    expected = read_dataset()
    table = []
    variants = {
        "deflate": (True, None),
        "uncompressed": (False, None),
        "deflate, chunks (16,256,256)": (True, (16, 256, 256)),
    }
    for kind, (compress, chunks) in variants.items():
        path = str(workdir / f"read-{len(table)}.h5")
        build_read_file(path, expected, compress, chunks)
        for fn in READ_ROWS.values():
            got = fn(path)
            xr.testing.assert_identical(got, _engine(path))
            np.testing.assert_array_equal(got["sst"].values, expected["sst"].values)
        load = os.getloadavg()[0]
        medians = time_rows({name: (lambda fn=fn, path=path: fn(path)) for name, fn in READ_ROWS.items()}, rounds)
        load = max(load, os.getloadavg()[0])
        base = medians["engine"]
        base_dask = medians["engine, chunks={}"]
        for name, s in medians.items():
            table.append(
                {
                    "file": kind,
                    "row": name,
                    "median (ms)": 1e3 * s,
                    "/ engine": s / base,
                    "/ engine chunks={}": s / base_dask,
                    "load": load,
                }
            )
        print(
            f"{kind}: {os.path.getsize(path) / MB:.1f} MB file, {expected['sst'].nbytes / MB:.1f} MB of sst",
            file=sys.stderr,
            flush=True,
        )
        if profile and kind == "deflate":
            print(profile_store(path, rounds))
    return pd.DataFrame(table).set_index(["file", "row"])


def _median_ms(fn: Callable[[], object], rounds: int) -> float:
    return 1e3 * time_rows({"x": fn}, rounds)["x"]


def profile_store(path: str, rounds: int) -> str:
    """The store path's parts timed one by one (ms, medians), then a cProfile of the store's open."""
    from zarr.core.buffer import default_buffer_prototype

    out = io.StringIO()
    reader = xarray_vhdf5.VersionedHDF5File.open(path)
    group = reader[reader.lookup(None)]
    ds = group["sst"]
    grid = tuple(-(-n // c) for n, c in zip(ds.shape, ds.chunks))
    chunks = [tuple(int(i) for i in ix) for ix in np.ndindex(*grid)]
    keys = ["sst/c/" + "/".join(map(str, ix)) for ix in chunks]
    store = VersionStore(path)
    _ = store.nodes  # opened before the timed gets
    proto = default_buffer_prototype()

    async def serial():
        for key in keys:
            await store.get(key, proto)

    async def concurrent():
        await asyncio.gather(*(store.get(key, proto) for key in keys))

    def store_open():
        s = VersionStore(path)
        _ = s.nodes  # opens the file, builds the nodes and documents
        s.close()

    def zarr_read():
        s = VersionStore(path)
        zarr.open_group(s, mode="r")["sst"][...]
        s.close()

    def xr_open():
        s = VersionStore(path)
        xr.open_zarr(s)
        s.close()

    def engine_open():
        xr.open_dataset(path, engine="vhdf5").close()

    import numcodecs

    stored = [ds.stored_chunk(ix)[0] for ix in chunks]
    inflated = [numcodecs.Zlib().decode(b) for b in stored]
    unshuffle = numcodecs.Shuffle(elementsize=ds.dtype.itemsize)
    nodes = version_nodes(group)
    parts = {
        "store open (file, version, nodes, zarr.json)": store_open,
        "  VersionedHDF5File.open + close": lambda: xarray_vhdf5.VersionedHDF5File.open(path).close(),
        "  version_nodes (reader open)": lambda: version_nodes(group),
        "  zarr_json_documents": lambda: zarr_json_documents(nodes),
        "xr.open_zarr(store), no load": xr_open,
        "xr.open_dataset(engine='vhdf5'), no load": engine_open,
        f"stored_chunk x{len(chunks)} (pread)": lambda: [ds.stored_chunk(ix) for ix in chunks],
        f"decoded_chunk x{len(chunks)} (pread + decode, serial)": lambda: [ds.decoded_chunk(ix) for ix in chunks],
        f"store.get x{len(keys)}, serial": lambda: asyncio.run(serial()),
        f"store.get x{len(keys)}, asyncio.gather": lambda: asyncio.run(concurrent()),
        f"numcodecs Zlib.decode x{len(stored)} (what zarr runs, numcodecs=True)": lambda: [
            numcodecs.Zlib().decode(b) for b in stored
        ],
        f"numcodecs Shuffle.decode x{len(stored)}": lambda: [unshuffle.decode(b) for b in inflated],
        "ChunkManifest.read, whole (engine's read, threads)": lambda: ds.manifest.read(()),
        "ChunkManifest.read, whole, threads=1": lambda: ds.manifest.read((), threads=1),
        "zarr.open_group(store)['sst'][...]": zarr_read,
    }
    print("\nthe store path on the deflate file, part by part (median ms):", file=out)
    for name, fn in parts.items():
        print(f"  {name:<58} {_median_ms(fn, rounds):8.1f}", file=out)
    store.close()
    reader.close()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(20):
        store_open()
    prof.disable()
    stats = io.StringIO()
    pstats.Stats(prof, stream=stats).sort_stats("cumulative").print_stats(18)
    print("\ncProfile of 20 store opens (cumulative):", file=out)
    print("\n".join(line for line in stats.getvalue().splitlines()[6:] if line.strip()), file=out)
    return out.getvalue()


# --- ingest ---------------------------------------------------------------------------------------


def writable_store_missing(*methods: str) -> str | None:
    """Why the writable ``VersionStore`` (with ``methods``) cannot run here, or None when it can."""
    for name in methods:
        if not hasattr(VersionStore, name):
            return f"VersionStore has no {name}() in this checkout ({bench_ingest.source_state()})"
    return None


def run_ours_store(path: str, w: bench_ingest.Workload) -> bench_ingest.Result | None:
    """Each day ``to_zarr(VersionStore(path, read_only=False), ...)`` + ``store.commit``, as icechunk's row.

    Day 1 is ``today.vhdf5.commit(name, path=)`` with ``compression=None``: the
    store gives the arrays it creates the package's default filters (shuffle +
    gzip 1) whatever zarr's ``compressors`` say, and the appended days keep the
    dataset's filters, so this keeps the file uncompressed as the other rows.
    Then ``mode="a", append_dim="time"``. The store is made anew each day, as
    icechunk's repository is reopened each day.
    """
    why = writable_store_missing("commit")
    if why is not None:
        print(f"ours-store: skipped, {why}", file=sys.stderr)
        return None
    times, to_zarr_s = [], []
    for t in range(w.n_days):
        today = w.day(t)
        start = time.perf_counter()
        if t == 0:
            today.vhdf5.commit(w.name(1), path=path)
            times.append(time.perf_counter() - start)
            to_zarr_s.append(times[-1])
            continue
        for name in today.variables:  # the ours-only encoding key, which zarr has no use for
            today[name].encoding.pop("compression", None)
        start = time.perf_counter()
        store = VersionStore(path, read_only=False)
        try:
            today.to_zarr(store, mode="a", append_dim="time", consolidated=False)
            to_zarr_s.append(time.perf_counter() - start)
            store.commit(w.name(t + 1), message=f"day {t + 1}")
        finally:
            store.close()
        times.append(time.perf_counter() - start)
    qc_s = None if w.qc is None else bench_ingest._qc_reopen(path, w)
    read_s = bench_ingest._check_xr_file("ours-store", path, w)
    result = bench_ingest.Result("ours-store", times, qc_s, read_s, os.path.getsize(path), path)
    result.extra["to_zarr_ms"] = 1e3 * float(np.median(to_zarr_s[1:]))
    result.extra["commit_ms"] = 1e3 * float(np.median(np.subtract(times, to_zarr_s)[1:]))
    return result


INGEST_RUNNERS = {
    "icechunk": (bench_ingest.run_icechunk, ""),
    "ours-one-call": (bench_ingest.run_ours_one_call, ".h5"),
    "ours-store": (run_ours_store, ".h5"),
}


def run_ingest(workdir: Path, days: int, tools: list[str]) -> pd.DataFrame:
    w = bench_ingest.ingest_workload(days, compress=False)
    results = []
    for tool in tools:
        runner, suffix = INGEST_RUNNERS[tool]
        path = workdir / f"ingest-{tool}{suffix}"
        load = os.getloadavg()[0]
        start = time.perf_counter()
        result = runner(str(path), w)
        if result is None:
            continue
        result.extra["load"] = max(load, os.getloadavg()[0])
        results.append(result)
        print(
            f"{tool}: done in {time.perf_counter() - start:.1f} s, checked against numpy", file=sys.stderr, flush=True
        )
        if tool == "icechunk":
            print(
                f"icechunk {result.extra['icechunk']}, zarr {result.extra['zarr']}, "
                f"xarray {result.extra['xarray']} (icechunk venv)"
            )
    for r in results:
        if "to_zarr_ms" in r.extra:
            print(
                f"{r.tool}: median of days 2..T: store + to_zarr {r.extra['to_zarr_ms']:.1f} ms, "
                f"commit {r.extra['commit_ms']:.1f} ms"
            )
    return bench_ingest.ingest_table(results)


# --- distributed ----------------------------------------------------------------------------------


class PeakRSS:
    """The peak RSS (bytes) of this process and the summed peak of its child processes, sampled in a thread."""

    def __init__(self, interval: float = 0.005):
        import psutil

        self._me = psutil.Process()
        self.interval = interval
        self.before = self._me.memory_info().rss
        self.peak = self.before
        self.children_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _children_rss(self) -> int:
        import psutil

        total = 0
        for child in self._me.children(recursive=True):
            try:
                total += child.memory_info().rss
            except psutil.Error:  # gone meanwhile
                pass
        return total

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            self.peak = max(self.peak, self._me.memory_info().rss)
            if n % 10 == 0:  # the children's sum is slower to take
                self.children_peak = max(self.children_peak, self._children_rss())
            n += 1
            time.sleep(self.interval)

    def __enter__(self) -> PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def distributed_dataset(mb: float):
    """A dask-backed Dataset of about ``mb`` MB: float32 ``(T, 512, 1024)``, chunks ``(16, 512, 1024)``."""
    import dask.array as da

    step = 512 * 1024 * 4
    n = max(16, round(mb * MB / step))
    data = da.random.default_rng(20).standard_normal((n, 512, 1024), chunks=(16, 512, 1024), dtype=np.float32)
    coords = {
        "time": pd.date_range(bench_ingest.START, periods=n, freq="D"),
        "y": np.arange(512, dtype=np.float64),
        "x": np.arange(1024, dtype=np.float64),
    }
    return xr.Dataset({"v": (("time", "y", "x"), data)}, coords=coords)


def _check_steps(tool: str, got: xr.DataArray, ds: xr.Dataset) -> None:
    n = ds.sizes["time"]
    for t in (0, n // 2, n - 1):
        want = ds["v"].data[t].compute(scheduler="synchronous")
        bench_ingest.check(tool, f"step {t}", got[t].values, want)


def write_netcdf(ds: xr.Dataset, path: str, phases: dict) -> None:
    ds.to_netcdf(path, engine="h5netcdf")


def write_netcdf_gzip(ds: xr.Dataset, path: str, phases: dict) -> None:
    ds.to_netcdf(path, engine="h5netcdf", encoding={"v": {"zlib": True, "complevel": 1, "shuffle": True}})


def check_netcdf(ds: xr.Dataset, path: str) -> None:
    with xr.open_dataset(path, engine="h5netcdf") as got:
        _check_steps("to_netcdf", got["v"], ds)
        bench_ingest.check("to_netcdf", "time", got["time"].values, ds["time"].values)


def write_forks(ds: xr.Dataset, path: str, phases: dict) -> None:
    """``to_zarr(store.fork())`` on the cluster, ``store.merge(fork)``, ``store.commit()`` on the client."""
    clock = time.perf_counter()
    store = VersionStore(path, read_only=False)
    try:
        fork = store.fork()
        ds.to_zarr(fork, mode="w", consolidated=False)
        phases["to_zarr (workers)"] = time.perf_counter() - clock
        clock = time.perf_counter()
        store.merge(fork)
        phases["merge"] = time.perf_counter() - clock
        clock = time.perf_counter()
        store.commit("v1", message="from the cluster")
        phases["commit"] = time.perf_counter() - clock
    finally:
        store.close()


def check_version(ds: xr.Dataset, path: str) -> None:
    with xr.open_dataset(path, engine="vhdf5") as got:
        _check_steps("fork/merge", got["v"], ds)
        bench_ingest.check("fork/merge", "time", got["time"].values, ds["time"].values)


def run_distributed(workdir: Path, mb: float) -> pd.DataFrame:
    from dask.distributed import Client, LocalCluster

    ds = distributed_dataset(mb)
    rows = {
        "to_netcdf (h5netcdf)": (write_netcdf, check_netcdf, ".nc"),
        "to_netcdf, shuffle + gzip 1": (write_netcdf_gzip, check_netcdf, ".nc"),
    }
    why = writable_store_missing("fork", "merge")
    if why is not None:
        print(f"fork/merge: skipped, {why}", file=sys.stderr)
    else:
        rows["to_zarr(fork) + merge + commit"] = (write_forks, check_version, ".h5")
    table = []
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster,
        Client(cluster) as client,
    ):
        client.wait_for_workers(2)
        for name, (write, verify, suffix) in rows.items():
            path = str(workdir / f"distributed{suffix}")
            load = os.getloadavg()[0]
            phases: dict[str, float] = {}
            with PeakRSS() as mem:
                start = time.perf_counter()
                write(ds, path, phases)
                seconds = time.perf_counter() - start
            size = os.path.getsize(path)
            verify(ds, path)
            os.unlink(path)
            if phases:
                print(f"{name}: " + ", ".join(f"{k} {v:.2f} s" for k, v in phases.items()), file=sys.stderr)
            table.append(
                {
                    "row": name,
                    "data (MB)": ds["v"].nbytes / MB,
                    "time (s)": seconds,
                    "MB/s": ds["v"].nbytes / MB / seconds,
                    "client peak - before (MB)": (mem.peak - mem.before) / MB,
                    "client before (MB)": mem.before / MB,
                    "workers peak (MB)": mem.children_peak / MB,
                    "file (MB)": size / MB,
                    "load": max(load, os.getloadavg()[0]),
                }
            )
    frame = pd.DataFrame(table).set_index("row")
    base = frame.iloc[0]
    frame["time / to_netcdf"] = frame["time (s)"] / base["time (s)"]
    frame["client peak / to_netcdf"] = frame["client peak - before (MB)"] / base["client peak - before (MB)"]
    return frame


# --- main -----------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", nargs="?", default="all", choices=["read", "ingest", "distributed", "all"])
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds of each read row (default 7)")
    parser.add_argument("--profile", action="store_true", help="read: time the store path's parts")
    parser.add_argument("--days", type=int, default=200, help="ingest: days (default 200)")
    parser.add_argument(
        "--tools",
        default=",".join(INGEST_RUNNERS),
        help=f"ingest: comma-separated subset of {','.join(INGEST_RUNNERS)}",
    )
    parser.add_argument("--mb", type=float, default=200, help="distributed: MB of data (default 200)")
    parser.add_argument("--big", action="store_true", help="distributed: 2000 MB")
    args = parser.parse_args(argv)
    unknown = set(args.tools.split(",")) - set(INGEST_RUNNERS)
    if unknown:
        parser.error(f"unknown tools {sorted(unknown)}; choose from {list(INGEST_RUNNERS)}")
    if args.big:
        args.mb = 2000
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 30)
    print(header())
    with tempfile.TemporaryDirectory(prefix="bench_store-", dir="/tmp") as tmp:
        workdir = Path(tmp)
        if args.what in ("read", "all"):
            table = run_read(workdir, args.rounds, args.profile)
            print(
                f"\nread: open + load of a {np.prod(READ_SHAPE) * 4 / MB:.1f} MB version "
                f"{READ_SHAPE} float32, medians of {args.rounds} cold rounds"
            )
            print(table.round(3).to_string())
        if args.what in ("ingest", "all"):
            table = run_ingest(workdir, args.days, args.tools.split(","))
            print(
                f"\ningest: {args.days} days of (90, 180) float32, chunks (1, 90, 180), uncompressed, "
                "one day per commit"
            )
            print(table.round(3).to_string())
        if args.what in ("distributed", "all"):
            table = run_distributed(workdir, args.mb)
            print("\ndistributed: a dask Dataset written from a 2-process LocalCluster")
            print(table.round(3).to_string())


if __name__ == "__main__":
    main()
