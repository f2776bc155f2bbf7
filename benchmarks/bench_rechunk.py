"""Rechunking a versioned record: the keep-strategy resplit beside rechunker and dask (issue 22).

Run from the repository root (``nice``: the machine is shared)::

    nice python benchmarks/bench_rechunk.py              # 2 GB record, part 1 and part 2
    nice python benchmarks/bench_rechunk.py --quick      # ~100 MB smoke test
    nice python benchmarks/bench_rechunk.py --size-gb 2 --gzip --parts 1

Part 1 (acceptance): a float32 ``(time, lat=360, lon=720)`` record, smooth
fields plus noise rounded to 1/64 (so that gzip has something real to do),
committed as version ``v0`` of an xarray_vhdf5 file in chunks ``(1, 360, 720)``
(one time step per chunk, about 1 MB), is rechunked to ``(365, 16, 16)`` (time
series of one year; ``--time-chunk`` changes 365) within ``--max-mem`` (512 MB):

- ``ours -> zarr``: ``plan_resplit`` + ``version_chunk_reader`` (each stored
  chunk read with one ``pread`` and decoded, no libhdf5 call) + ``resplit_into``
  a Zarr array (format 2, the same codec as every other method's output);
- ``ours in-file``: ``xarray_vhdf5._versions.rechunk.rechunk`` on a copy of the
  file (the history gets the new chunks; the copy is made before timing);
- ``cli_export`` / ``cli_rechunk``: the ``vhdf5 export`` and ``vhdf5 rechunk``
  commands, whole processes (``vhdf5 rechunk`` on a copy of the file, made before
  timing: a journaled handle, the new raw_data written into the old one's bytes);
  ``cli_rechunk_copyjournal`` is ``vhdf5 rechunk`` with the journal's pre-images
  copied into the journal instead of referenced in the side file (the code
  before issue 22's references: no extent registered);
- ``rechunker``: ``rechunker.rechunk(source, target_chunks, max_mem, target, temp)``
  with the dask executor (2 threads); source is a dask array over the version's
  h5py virtual dataset (rechunker accepts dask arrays, no Zarr copy of the
  input); target and temp stores are Zarr 2 directory stores. rechunker 0.5.4
  needs zarr < 3, so it runs in its own virtual environment (``--rechunker-python``,
  default ``/tmp/venv-rechunker/bin/python``), made with::

      python3.11 -m venv /tmp/venv-rechunker
      /tmp/venv-rechunker/bin/pip install rechunker h5py==3.16.0 dask==2026.8.0 numpy==2.4.6 psutil

  (``pip install rechunker`` into the project's venv downgrades zarr to 2.18 and
  breaks the package: do not.)
- ``dask``: ``da.from_array(h5py_ds, chunks=(1, 360, 720)).rechunk((365, 16, 16))``
  stored with ``da.store`` into the same Zarr array, threaded scheduler with 2
  workers, ``array.chunk-size`` (the rechunk planner's ``block_size_limit``) set
  to ``max_mem / 4`` (two workers, each holding a task's inputs and output);
  dask has no total-memory budget, that is as close as it lets one get.
- the naive baseline (the paper's Algorithm 2, one input chunk at a time):
  its seek count only (``naive_seeks``), beside ours (``plan.seeks``).

Part 2: the paper's three ideal buffer shapes ``B = (1, 1, Λk)``, ``(1, Λj, Λk)``
and ``Λ`` (``plan_resplit(..., buffer_chunks=...)``, Λ from
``plan.aggregate_chunks``) on a 512 MiB array, and a strong shape mismatch
(small input chunks, output chunks growing, ``max_mem`` fixed); source and
target are chunked, uncompressed h5py datasets on disk.

Every run is a fresh child process (``--child``): it imports everything, opens
its inputs, takes ``VmRSS`` as its baseline, resets the peak mark
(``/proc/self/clear_refs``), runs, and reports ``VmHWM - baseline`` as the peak
RSS growth. The parent also polls each child's RSS (a watchdog kills a child
past ``--rss-cap``). Every output is compared with the source on 20 random
output chunks before its numbers are reported. Results are printed and written
to ``benchmarks/results/rechunk.md`` (``rechunk_quick.md`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # memory.py, beside this script
from memory import _reset_peak, _status

HERE = Path(__file__).resolve().parent
VAR = "tas"
LAT, LON = 360, 720
SAMPLES = 20


# --------------------------------------------------------------------------- child side


class _Meter:
    """Baseline RSS now (after imports and opening), peak growth when asked."""

    def __init__(self):
        self.base = _status()["VmRSS"]
        _reset_peak()
        self.t0 = time.perf_counter()

    def done(self) -> dict:
        seconds = time.perf_counter() - self.t0
        st = _status()
        return {"seconds": seconds, "base_rss": self.base, "peak_growth": st["VmHWM"] - self.base}


def _field(t0: int, n: int, lat: int, lon: int):
    """Time steps ``t0 .. t0+n`` of the synthetic record: smooth climate-like fields plus noise, float32."""
    import numpy as np

    phi = np.linspace(-np.pi / 2, np.pi / 2, lat, dtype=np.float32)[:, None]
    lam = np.linspace(0, 2 * np.pi, lon, endpoint=False, dtype=np.float32)[None, :]
    base = 288 - 40 * np.sin(phi) ** 2 + 3 * np.cos(3 * lam) * np.cos(phi)
    t = np.arange(t0, t0 + n, dtype=np.float32)[:, None, None]
    season = 12 * np.cos(2 * np.pi * t / 365.25) * np.sin(phi)[None]
    rng = np.random.default_rng(t0)
    noise = rng.standard_normal((n, lat, lon), dtype=np.float32) * 0.8
    out = base[None] + season + noise
    return (np.rint(out * 64) / 64).astype(np.float32)


def child_create(spec: dict) -> dict:
    import h5py

    from xarray_vhdf5 import VersionedHDF5File

    meter = _Meter()
    nt, lat, lon = spec["shape"]
    kw = {"compression": "gzip", "compression_opts": 4} if spec["codec"] == "gzip" else {}
    with h5py.File(spec["path"], "w") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v0") as g:
            ds = g.create_dataset(VAR, shape=(nt, lat, lon), chunks=(1, lat, lon), dtype="f4", fillvalue=0, **kw)
            step = 16
            for t0 in range(0, nt, step):
                n = min(step, nt - t0)
                ds[t0 : t0 + n] = _field(t0, n, lat, lon)
    res = meter.done()
    res["file_bytes"] = os.path.getsize(spec["path"])
    return res


class _CountingSource:
    """An h5py dataset seen by dask: counts the reads and bytes it hands out."""

    def __init__(self, ds):
        import threading

        self.ds, self.shape, self.dtype, self.ndim = ds, ds.shape, ds.dtype, ds.ndim
        self.calls = self.bytes = 0
        self.lock = threading.Lock()

    def __getitem__(self, key):
        out = self.ds[key]
        with self.lock:
            self.calls += 1
            self.bytes += out.nbytes
        return out


class _TimedTarget:
    """A Zarr array whose writes are counted and timed (seconds in ``__setitem__``)."""

    def __init__(self, arr):
        import threading

        self.arr, self.dtype, self.shape, self.ndim = arr, arr.dtype, arr.shape, arr.ndim
        self.calls, self.seconds = 0, 0.0
        self.lock = threading.Lock()

    def __setitem__(self, key, value):
        t = time.perf_counter()
        self.arr[key] = value
        with self.lock:
            self.seconds += time.perf_counter() - t
            self.calls += 1


def _zarr_codec(codec: str):
    import numcodecs

    return None if codec == "none" else numcodecs.Zlib(level=4)


def _zarr3_target(path: str, shape, chunks, codec: str):
    import zarr

    comp = _zarr_codec(codec)
    return zarr.create_array(
        store=path,
        shape=shape,
        chunks=chunks,
        dtype="float32",
        zarr_format=2,
        compressors=None if comp is None else comp,
        fill_value=0.0,
        overwrite=True,
    )


def _version_path() -> str:
    return f"_version_data/versions/v0/{VAR}"


def child_ours_zarr(
    spec: dict, drop: bool = False, h5: bool = False, batch: int = 0, zarr2: bool = False, threads: int = 0
) -> dict:
    import h5py
    import numpy as np

    from xarray_vhdf5.resplit import iter_resplit, plan_resplit, resplit_into, version_chunk_reader

    f = h5py.File(spec["source"], "r")
    vds = f[_version_path()]
    read_chunk, in_chunks = version_chunk_reader(vds)
    if h5:
        g = h5py.File(spec["out"], "w")
        kw = {"compression": "gzip", "compression_opts": 4} if spec["codec"] == "gzip" else {}
        z = _TimedTarget(g.create_dataset(VAR, shape=vds.shape, dtype="f4", chunks=tuple(spec["chunks"]), **kw))
    elif zarr2:
        import zarr

        assert zarr.__version__.startswith("2."), zarr.__version__
        arr = zarr.open_array(
            zarr.storage.DirectoryStore(spec["out"]),
            mode="w",
            shape=vds.shape,
            chunks=tuple(spec["chunks"]),
            dtype="f4",
            compressor=_zarr_codec(spec["codec"]),
            fill_value=0.0,
        )
        z = _TimedTarget(arr)
    else:
        z = _TimedTarget(_zarr3_target(spec["out"], vds.shape, tuple(spec["chunks"]), spec["codec"]))
    timing = {"read": 0.0}

    def timed_read(index):
        t = time.perf_counter()
        out = read_chunk(index)
        timing["read"] += time.perf_counter() - t
        return out

    meter = _Meter()
    plan = plan_resplit(vds.shape, in_chunks, tuple(spec["chunks"]), 4, spec["max_mem"])
    plan_s = time.perf_counter() - meter.t0
    if threads:
        from collections import deque
        from concurrent.futures import ThreadPoolExecutor

        from xarray_vhdf5.resplit import ResplitCounters

        c = ResplitCounters()
        inflight: deque = deque()
        with ThreadPoolExecutor(threads) as pool:
            for w in iter_resplit(plan, timed_read, z.dtype, pieces=True, counters=c):
                inflight.append(pool.submit(z.__setitem__, w.region, np.array(w.data)))
                del w
                while len(inflight) > 16:
                    inflight.popleft().result()
            while inflight:
                inflight.popleft().result()
    elif batch:
        import asyncio

        from zarr.core.sync import sync

        from xarray_vhdf5.resplit import ResplitCounters

        arr = z.arr._async_array
        pending: list = []

        async def gather(items):
            await asyncio.gather(*(arr.setitem(r, d) for r, d in items))

        def flush():
            t = time.perf_counter()
            sync(gather(list(pending)))
            z.seconds += time.perf_counter() - t
            z.calls += len(pending)
            pending.clear()

        c = ResplitCounters()
        for w in iter_resplit(plan, timed_read, z.dtype, pieces=True, counters=c):
            pending.append((w.region, np.array(w.data)))
            del w
            if len(pending) >= batch:
                flush()
        flush()
    elif drop:
        from xarray_vhdf5.resplit import ResplitCounters

        c = ResplitCounters()
        for w in iter_resplit(plan, timed_read, z.dtype, pieces=True, counters=c):
            z[w.region] = w.data
            del w  # the write's data may be a view of the buffer: let it go before the next one is read
    elif h5:
        c = resplit_into(plan, timed_read, z)
    else:  # the array itself: its whole chunks take the encoded fast path (resplit/_zarr_target.py), untimed
        c = resplit_into(plan, timed_read, z.arr)
    if h5:
        g.close()
    res = meter.done()
    n_in = math.prod(g.n for g in plan.in_grids)
    res.update(
        plan=repr(plan),
        plan_seconds=plan_s,
        read_seconds=timing["read"],
        write_seconds=z.seconds,
        reads_per_chunk=c.input_reads / n_in,
        input_reads=c.input_reads,
        writes=c.output_writes,
        whole_writes=c.chunk_writes,
        piece_writes=c.piece_writes,
        seeks=plan.seeks,
        naive_seeks=plan.naive_seeks,
        predicted_peak=plan.predicted_peak,
        peak_buffer_bytes=c.peak_buffer_bytes,
        buffer_shape=plan.buffer_shape,
        aggregate=plan.aggregate_chunks,
        n_in=n_in,
        n_out=math.prod(g.n for g in plan.out_grids),
    )
    return res


def child_ours_zarr_del(spec: dict) -> dict:
    """``ours_zarr`` with ``resplit_into``'s loop written out, dropping each write before the next buffer."""
    return child_ours_zarr(spec, drop=True)


def child_ours_zarr_batched(spec: dict) -> dict:
    """``ours_zarr_del`` with writes sent to zarr 64 at a time, concurrently (zarr's async API).

    zarr-python 3 spends about a millisecond of event-loop round trip per
    ``array[region] = data``; gathering a batch of writes pays it once per batch.
    Each write's data is copied first (``OutputWrite.data`` is valid only until the
    next event), so the batch adds at most 64 output chunks to the memory held.
    """
    return child_ours_zarr(spec, drop=True, batch=64)


def child_ours_zarr2(spec: dict) -> dict:
    """``ours_zarr_del`` writing through zarr-python 2.18, rechunker's writer (run in rechunker's venv).

    The project's site-packages is added after the venv's own, so that zarr is
    2.18 and xarray_vhdf5 is the working tree's (its editable loader).
    """
    import site

    site.addsitedir(spec["main_site"])
    return child_ours_zarr(spec, drop=True, zarr2=True)


def child_ours_zarr_threads(spec: dict) -> dict:
    """``ours_zarr_del`` with the writes handed to 2 threads (at most 16 output chunks in flight, copied).

    Not what the package does: an experiment showing what overlapping the
    sequential executor's writes (encoding, file writes) would gain.
    """
    return child_ours_zarr(spec, drop=True, threads=2)


def child_ours_zarr2_threads(spec: dict) -> dict:
    """``ours_zarr2`` with the writes on 2 threads, as ``ours_zarr_threads`` (experiment)."""
    import site

    site.addsitedir(spec["main_site"])
    return child_ours_zarr(spec, drop=True, zarr2=True, threads=2)


def child_ours_h5(spec: dict) -> dict:
    """``ours_zarr`` into a chunked h5py dataset (same codec) instead of a Zarr array: another writer."""
    return child_ours_zarr(spec, h5=True)


def child_ours_export(spec: dict) -> dict:
    """``xarray_vhdf5.xr._export.export_zarr`` (``ds.vhdf5.export``): the version to a Zarr v2 store."""
    from xarray_vhdf5.xr._export import export_zarr

    meter = _Meter()
    r = export_zarr(
        spec["source"], spec["out"], version="v0", chunks=tuple(spec["chunks"]), max_mem=spec["max_mem"], zarr_format=2
    )
    res = meter.done()
    c, plan = r.counters[VAR], r.plans[VAR]
    res.update(
        reads_per_chunk=r.reads_per_input_chunk,
        input_reads=c.input_reads,
        writes=c.output_writes,
        whole_writes=c.chunk_writes,
        piece_writes=c.piece_writes,
        seeks=plan.seeks,
        peak_buffer_bytes=c.peak_buffer_bytes,
        codec="zarr's default for format 2 (Blosc lz4)",
    )
    return res


# ``vhdf5`` as before issue 22's journal references: the journal registers no side-file extent, so
# every byte the new raw_data overwrites is read and copied into the journal (the same code otherwise).
_COPY_JOURNAL = (
    "from xarray_vhdf5._versions.journal import JournaledFile as J; refer = J.refer; "
    "J.refer = lambda self, extents: refer(self, []); "
    "from xarray_vhdf5.cli import main; main()"
)


def _cli(spec: dict, argv: list[str], copy_journal: bool = False) -> dict:
    """Run ``vhdf5 ARGV`` as a subprocess; peak RSS growth = its ru_maxrss minus an import-only process's.

    ``copy_journal``: with the journal's pre-images copied, not referenced (:data:`_COPY_JOURNAL`).
    """
    import resource

    vhdf5 = [sys.executable, "-c", _COPY_JOURNAL] if copy_journal else [str(Path(sys.executable).with_name("vhdf5"))]
    subprocess.run(
        [sys.executable, "-c", "import xarray_vhdf5.cli._main, xarray_vhdf5.xr._export, zarr, h5py, xarray"], check=True
    )
    base = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    t = time.perf_counter()
    run = subprocess.run([*vhdf5, *argv], capture_output=True, text=True)
    seconds = time.perf_counter() - t
    if run.returncode:
        raise RuntimeError(f"vhdf5 {' '.join(argv)} failed: {run.stderr[-400:]}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    res = {"seconds": seconds, "base_rss": base, "peak_growth": peak - base, "stdout": run.stdout[-600:]}
    # What the command prints: "... read (1.00 per chunk)", "3105 chunks + 0 pieces written", "seeks 3201".
    import re

    found = re.search(r"\(([\d.]+) per (?:needed )?chunk\)", run.stdout)
    res["reads_per_chunk"] = float(found.group(1)) if found else float("nan")
    found = re.search(r"(\d+) chunks \+ (\d+) pieces written", run.stdout)
    if found:
        res["writes"], res["piece_writes"] = int(found.group(1)) + int(found.group(2)), int(found.group(2))
    found = re.search(r"stored chunks \d+ -> (\d+)", run.stdout)
    if found and "writes" not in res:
        res["writes"] = f"{found.group(1)} stored"
    found = re.search(r"seeks (\d+)", run.stdout)
    if found:
        res["seeks"] = int(found.group(1))
    return res


def child_cli_export(spec: dict) -> dict:
    """``vhdf5 export FILE --version v0 --chunks T,16,16 --to out.zarr --max-mem M``."""
    chunks = ",".join(map(str, spec["chunks"]))
    res = _cli(spec, ["export", spec["source"], "--version", "v0", "--chunks", chunks, "--to", spec["out"],
                      "--max-mem", str(spec["max_mem"]), "--overwrite"])  # fmt: skip
    return res


def _copy_synced(source: str, out: str) -> None:
    """Copy the record for an in-file method, then ``sync``: the copy's 2.2 GB of dirty pages
    are written back before timing starts, not throttling the timed run's own writes."""
    shutil.copyfile(source, out)
    os.sync()


def child_cli_rechunk(spec: dict, copy_journal: bool = False) -> dict:
    """``vhdf5 rechunk COPY tas --chunks T,16,16 --max-mem M`` on a copy of the file (copied before timing)."""
    _copy_synced(spec["source"], spec["out"])
    chunks = ",".join(map(str, spec["chunks"]))
    argv = ["rechunk", spec["out"], VAR, "--chunks", chunks, "--max-mem", str(spec["max_mem"])]
    res = _cli(spec, argv, copy_journal=copy_journal)
    res["file_bytes"] = os.path.getsize(spec["out"])
    return res


def child_cli_rechunk_inproc(spec: dict, grow: bool = False) -> dict:
    """``vhdf5 rechunk`` run in this process after its imports, metered as rechunker's run is.

    :func:`child_cli_rechunk` times the whole command, the interpreter's start and
    imports included (about 0.85 s here); ``rechunker``'s figure starts after its imports.
    ``grow``: with ``--grow`` (the new raw_data written once, after the end of the file).
    """
    from click.testing import CliRunner

    from xarray_vhdf5.cli import cli

    _copy_synced(spec["source"], spec["out"])
    chunks = ",".join(map(str, spec["chunks"]))
    argv = ["rechunk", spec["out"], VAR, "--chunks", chunks, "--max-mem", str(spec["max_mem"])]
    argv += ["--grow"] if grow else []
    meter = _Meter()
    run = CliRunner().invoke(cli, argv)
    res = meter.done()
    if run.exit_code:
        raise RuntimeError(f"vhdf5 {' '.join(argv)} failed: {run.output[-400:]}")
    res["reads_per_chunk"] = 1.0 if "(1.00 per needed chunk)" in run.output else float("nan")
    res["writes"] = run.output.split("stored chunks ")[1].split(";")[0] if "stored chunks" in run.output else "?"
    res["file_bytes"] = os.path.getsize(spec["out"])
    return res


def child_cli_rechunk_grow_inproc(spec: dict) -> dict:
    """:func:`child_cli_rechunk_inproc` with ``--grow``: one write of the data, the file grows by it."""
    return child_cli_rechunk_inproc(spec, grow=True)


def child_cli_rechunk_copyjournal(spec: dict) -> dict:
    """:func:`child_cli_rechunk` with the journal's pre-images copied (before issue 22's references)."""
    return child_cli_rechunk(spec, copy_journal=True)


def child_ours_infile(spec: dict) -> dict:
    import h5py

    from xarray_vhdf5._versions.rechunk import rechunk

    _copy_synced(spec["source"], spec["out"])
    f = h5py.File(spec["out"], "r+")
    meter = _Meter()
    report = rechunk(f, VAR, tuple(spec["chunks"]), max_mem=spec["max_mem"])
    f.close()
    res = meter.done()
    c = report.counters
    n_in = math.prod(-(-s // k) for s, k in zip(spec["shape"], report.chunks_before, strict=True))
    res.update(
        reads_per_chunk=c.input_reads / n_in,
        input_reads=c.input_reads,
        writes=c.output_writes,
        whole_writes=c.chunk_writes,
        piece_writes=c.piece_writes,
        peak_buffer_bytes=c.peak_buffer_bytes,
        spill_bytes=c.spill_bytes,
        report=repr(report)[:400],
        file_bytes=os.path.getsize(spec["out"]),
    )
    return res


def child_dask(spec: dict) -> dict:
    import dask
    import dask.array as da
    import h5py

    f = h5py.File(spec["source"], "r")
    vds = f[_version_path()]
    src = _CountingSource(vds)
    in_chunks = (1, *vds.shape[1:])
    z = _TimedTarget(_zarr3_target(spec["out"], vds.shape, tuple(spec["chunks"]), spec["codec"]))
    limit = spec["max_mem"] // 4
    meter = _Meter()
    with dask.config.set({"array.chunk-size": limit, "scheduler": "threads", "num_workers": 2}):
        x = da.from_array(src, chunks=in_chunks, lock=False)
        y = x.rechunk(tuple(spec["chunks"]))
        stages = len([k for k in y.dask.layers if "rechunk" in k])
        da.store(y, z, lock=False)
    res = meter.done()
    n_in = math.prod(-(-s // k) for s, k in zip(vds.shape, in_chunks, strict=True))
    total = math.prod(vds.shape) * 4
    res.update(
        reads_per_chunk=src.bytes / total,
        input_reads=src.calls,
        writes=z.calls,
        write_seconds=z.seconds,
        n_in=n_in,
        rechunk_layers=stages,
        config=f"array.chunk-size={limit} B, threads, num_workers=2",
    )
    return res


def child_rechunker(spec: dict) -> dict:
    import dask
    import dask.array as da
    import h5py
    import rechunker
    import zarr

    f = h5py.File(spec["source"], "r")
    vds = f[_version_path()]
    src = _CountingSource(vds)
    in_chunks = (1, *vds.shape[1:])
    counts = {"target_sets": 0, "temp_sets": 0, "temp_gets": 0}
    out_root, tmp_root = os.path.abspath(spec["out"]), os.path.abspath(spec["tmp"])
    cls = zarr.storage.DirectoryStore
    orig_set, orig_get = cls.__setitem__, cls.__getitem__

    def counted_set(self, key, value):
        if not key.startswith(".z") and "/.z" not in key:
            counts["temp_sets" if os.path.abspath(self.path) == tmp_root else "target_sets"] += 1
        return orig_set(self, key, value)

    def counted_get(self, key):
        if os.path.abspath(self.path) == tmp_root and ".z" not in key:
            counts["temp_gets"] += 1
        return orig_get(self, key)

    cls.__setitem__, cls.__getitem__ = counted_set, counted_get
    comp = _zarr_codec(spec["codec"])
    meter = _Meter()
    with dask.config.set({"scheduler": "threads", "num_workers": 2}):
        x = da.from_array(src, chunks=in_chunks, lock=False)
        plan = rechunker.rechunk(
            x,
            tuple(spec["chunks"]),
            spec["max_mem"],
            cls(out_root),
            temp_store=cls(tmp_root),
            target_options={"compressor": comp},
            temp_options={"compressor": comp},
        )
        text = repr(plan)
        plan.execute()
    res = meter.done()
    total = math.prod(vds.shape) * 4
    res.update(
        reads_per_chunk=src.bytes / total,
        input_reads=src.calls,
        writes=counts["target_sets"],
        temp_writes=counts["temp_sets"],
        temp_reads=counts["temp_gets"],
        plan=text[-600:],
        temp_bytes=sum(p.stat().st_size for p in Path(tmp_root).rglob("*") if p.is_file()),
    )
    return res


def child_ideal(spec: dict) -> dict:
    """Part 2: one plan over an h5py chunked source into an h5py chunked target."""
    import h5py

    from xarray_vhdf5.resplit import array_chunk_reader, plan_resplit, resplit_into

    f = h5py.File(spec["source"], "r")
    src = f["x"]
    out = h5py.File(spec["out"], "w")
    tgt = out.create_dataset("x", shape=src.shape, dtype=src.dtype, chunks=tuple(spec["out_chunks"]))
    meter = _Meter()
    plan = plan_resplit(
        src.shape, src.chunks, tuple(spec["out_chunks"]), 4, spec["max_mem"], buffer_chunks=spec.get("buffer_chunks")
    )
    c = resplit_into(plan, array_chunk_reader(src, plan.in_grids), tgt)
    out.flush()
    res = meter.done()
    res.update(
        plan=repr(plan),
        buffer_chunks=list(plan.buffer_chunks),
        buffer_shape=list(plan.buffer_shape),
        aggregate=list(plan.aggregate_chunks),
        reads=c.input_reads,
        n_in=math.prod(g.n for g in plan.in_grids),
        n_out=math.prod(g.n for g in plan.out_grids),
        writes=c.output_writes,
        piece_writes=c.piece_writes,
        spilled=plan.spilled_outputs,
        seeks=plan.seeks,
        naive_seeks=plan.naive_seeks,
        kept_bytes=plan.kept_bytes,
        predicted_peak=plan.predicted_peak,
        peak_buffer_bytes=c.peak_buffer_bytes,
    )
    res["ok"] = _compare_sampled(src, tgt, plan.out_grids)
    out.close()
    return res


def _compare_sampled(src, tgt, grids) -> bool:
    import numpy as np

    rng = np.random.default_rng(7)
    for _ in range(SAMPLES):
        idx = [int(rng.integers(g.n)) for g in grids]
        region = tuple(slice(int(g.edges[i]), int(g.edges[i + 1])) for g, i in zip(grids, idx, strict=True))
        if not np.array_equal(src[region], tgt[region]):
            return False
    return True


def child_make_cube(spec: dict) -> dict:
    import h5py
    import numpy as np

    shape, chunks = tuple(spec["shape"]), tuple(spec["chunks"])
    with h5py.File(spec["path"], "w") as f:
        ds = f.create_dataset("x", shape=shape, chunks=chunks, dtype="f4")
        step = chunks[0] * max(1, 64 // chunks[0])
        for t0 in range(0, shape[0], step):
            n = min(step, shape[0] - t0)
            ds[t0 : t0 + n] = np.arange(
                t0 * math.prod(shape[1:]), (t0 + n) * math.prod(shape[1:]), dtype=np.float32
            ).reshape(n, *shape[1:])
    return {}


#: The methods that rechunk a copy of the record in the file (their output is that HDF5 file).
IN_FILE = ("ours_infile", "cli_rechunk", "cli_rechunk_copyjournal", "cli_rechunk_inproc", "cli_rechunk_grow_inproc")

CHILDREN = {
    "create": child_create,
    "ours_zarr": child_ours_zarr,
    "ours_infile": child_ours_infile,
    "ours_zarr_del": child_ours_zarr_del,
    "ours_h5": child_ours_h5,
    "cli_export": child_cli_export,
    "cli_rechunk": child_cli_rechunk,
    "cli_rechunk_copyjournal": child_cli_rechunk_copyjournal,
    "cli_rechunk_inproc": child_cli_rechunk_inproc,
    "cli_rechunk_grow_inproc": child_cli_rechunk_grow_inproc,
    "ours_zarr2_threads": child_ours_zarr2_threads,
    "ours_zarr_threads": child_ours_zarr_threads,
    "ours_zarr2": child_ours_zarr2,
    "ours_export": child_ours_export,
    "ours_zarr_batched": child_ours_zarr_batched,
    "dask": child_dask,
    "rechunker": child_rechunker,
    "ideal": child_ideal,
    "cube": child_make_cube,
}


# --------------------------------------------------------------------------- parent side


def run_child(kind: str, spec: dict, python: str | None = None, rss_cap: int = 10 * 2**30, tries: int = 4) -> dict:
    """Run one measurement in a fresh process; poll its RSS (and its children's) as a watchdog.

    The working tree is shared with engineers editing the package: a child that
    fails while importing (a module caught half-edited) is run again after a pause.
    """
    for attempt in range(tries):
        res = _run_child_once(kind, spec, python, rss_cap)
        err = res.get("error", "")
        if not err or not any(e in err for e in ("ImportError", "NameError", "SyntaxError", "IndentationError")):
            break
        if attempt + 1 < tries:
            print(f"    import failed ({err.strip().splitlines()[-1][:120]}); again in 30 s", flush=True)
            time.sleep(30)
    return res


def _run_child_once(kind: str, spec: dict, python: str | None, rss_cap: int) -> dict:
    import psutil

    cmd = [python or sys.executable, str(Path(__file__).resolve()), "--child", kind, json.dumps(spec)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(HERE.parent))
    ps = psutil.Process(proc.pid)
    polled, killed = 0, False
    while proc.poll() is None:
        try:
            rss = ps.memory_info().rss + sum(c.memory_info().rss for c in ps.children(recursive=True))
            polled = max(polled, rss)
            if rss > rss_cap:
                proc.kill()
                killed = True
        except psutil.NoSuchProcess:
            pass
        time.sleep(0.2)
    out, err = proc.communicate()
    wall = time.perf_counter() - t0
    line = next((ln for ln in reversed(out.splitlines()) if ln.startswith("RESULT ")), None)
    if line is None:
        tail = "\n".join(err.strip().splitlines()[-6:])
        return {
            "error": f"killed past {rss_cap / 2**30:.0f} GiB" if killed else tail or "no result",
            "wall": wall,
            "polled_rss": polled,
        }
    res = json.loads(line[len("RESULT ") :])
    res["wall"], res["polled_rss"] = wall, polled
    return res


def _verify_part1(source: str, outputs: dict[str, tuple[str, str]], shape, chunks, seed: int = 3) -> dict[str, str]:
    """Compare ``SAMPLES`` random output chunks of every output with the source, one source slab per time block."""
    import h5py
    import numpy as np
    import zarr

    nt = shape[0]
    grid = [-(-s // c) for s, c in zip(shape, chunks, strict=True)]
    rng = np.random.default_rng(seed)
    picks = [tuple(int(rng.integers(n)) for n in grid) for _ in range(SAMPLES)]
    readers = {}
    for name, (kind, path) in outputs.items():
        try:
            if kind == "zarr":
                readers[name] = zarr.open_array(path, mode="r")
            elif kind == "h5plain":
                readers[name] = h5py.File(path, "r")[VAR]
            else:
                readers[name] = h5py.File(path, "r")[_version_path()]
        except Exception as e:  # noqa: BLE001 - reported in the table
            readers[name] = e
    verdict = dict.fromkeys(outputs, "ok")
    with h5py.File(source, "r") as f:
        vds = f[_version_path()]
        for tb in sorted({p[0] for p in picks}):
            t0, t1 = tb * chunks[0], min((tb + 1) * chunks[0], nt)
            slab = vds[t0:t1]
            for p in picks:
                if p[0] != tb:
                    continue
                reg = tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(p, chunks, shape, strict=True))
                want = slab[(slice(None), *reg[1:])]
                for name, arr in readers.items():
                    if isinstance(arr, Exception):
                        verdict[name] = f"unreadable: {arr}"
                    elif verdict[name] == "ok" and not np.array_equal(np.asarray(arr[reg]), want):
                        verdict[name] = f"MISMATCH at output chunk {p}"
            del slab
    return verdict


def _mb(b) -> str:
    return f"{b / 1e6:.0f}" if b >= 10e6 else f"{b / 1e6:.2f}"


def _versions(rechunker_python: str) -> str:
    import dask
    import h5py
    import numpy
    import zarr

    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE.parent
    ).stdout.strip()
    try:
        rk = subprocess.run(
            [
                rechunker_python,
                "-c",
                "import rechunker, zarr, dask; print(rechunker.__version__, zarr.__version__, dask.__version__)",
            ],
            capture_output=True,
            text=True,
        ).stdout.split()
        rk_text = f"rechunker {rk[0]} (its venv: zarr {rk[1]}, dask {rk[2]})"
    except Exception:  # noqa: BLE001
        rk_text = "rechunker: not available"
    return (
        f"xarray_vhdf5 @ {commit} (working tree), numpy {numpy.__version__}, h5py {h5py.__version__} "
        f"(libhdf5 {h5py.version.hdf5_version}), zarr {zarr.__version__}, dask {dask.__version__}, {rk_text}"
    )


def _machine() -> str:
    import psutil

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next(ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    ram = psutil.virtual_memory().total / 2**30
    return (
        f"{os.cpu_count()} cores ({cpu}), {ram:.0f} GiB RAM, Linux {platform.release()}, "
        f"Python {platform.python_version()}; shared machine, runs under `nice`"
    )


def _drop_caches() -> None:
    """``sync`` and drop the page cache (root only): each run starts from the same memory state.

    On a virtual machine whose host backs guest memory lazily, pages the guest
    never touched cost far more to fill than pages it freed: a run that follows one
    that freed memory writes its first gigabytes several times faster (``dd`` to one
    file, 1 GB: 0.3-0.4 s after another write, 3-4 s on fresh pages; this machine,
    2026-11-27). Dropping the cache before each run makes every method start with the
    source cold on disk and the same free memory.
    """
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as fh:
        fh.write("3\n")


def part1(args, work: Path, lines: list[str]) -> None:
    nt = args.time_steps
    shape = (nt, LAT, LON)
    chunks = (min(args.time_chunk, nt), 16, 16)
    max_mem = int(args.max_mem_mb * 1e6)
    for codec in ["none", "gzip"] if args.gzip else ["none"]:
        src = work / f"record_{nt}_{codec}.h5"
        if not src.exists():
            print(f"creating {src} ...", flush=True)
            res = run_child(
                "create", {"path": str(src) + ".part", "shape": shape, "codec": codec}, rss_cap=args.rss_cap
            )
            if "error" in res:
                raise SystemExit(f"creating the record failed: {res['error']}")
            os.replace(str(src) + ".part", src)
            print(
                f"  created in {res['seconds']:.0f} s, {res['file_bytes'] / 1e6:.0f} MB, "
                f"peak RSS growth {_mb(res['peak_growth'])} MB"
            )
        size = os.path.getsize(src)
        runs: dict[str, dict] = {}
        verdicts: dict[str, str] = {}  # per method: "ok" or the first run's failure
        base = {"source": str(src), "chunks": chunks, "max_mem": max_mem, "codec": codec, "shape": shape}
        methods = [m for m in args.methods.split(",") if m]
        all_runs: dict[str, list[dict]] = {m: [] for m in methods}
        for rep in range(args.repeat):  # methods interleaved, so that the machine's load falls on all alike
            for method in methods:
                h5out = method in ("ours_h5", *IN_FILE)
                out = work / (f"out_{method}_{codec}.h5" if h5out else f"out_{method}_{codec}.zarr")
                tmp = work / f"tmp_{method}_{codec}.zarr"
                for p in (out, tmp):
                    shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
                spec = dict(base, out=str(out), tmp=str(tmp))
                print(f"[{codec}] {method} (run {rep + 1} of {args.repeat}) ...", flush=True)
                python = args.rechunker_python if method in ("rechunker", "ours_zarr2", "ours_zarr2_threads") else None
                if method.startswith("ours_zarr2"):
                    import sysconfig

                    spec["main_site"] = sysconfig.get_paths()["purelib"]
                if python is not None and not Path(python).exists():
                    all_runs[method].append({"error": f"no rechunker venv at {python}"})
                    continue
                if args.drop_caches:
                    _drop_caches()
                res = run_child(method, spec, python=python, rss_cap=args.rss_cap)
                all_runs[method].append(res)
                shutil.rmtree(tmp, ignore_errors=True)
                if "error" not in res:
                    kind = "h5" if method in IN_FILE else "h5plain" if method == "ours_h5" else "zarr"
                    made = {method: (kind, str(out / VAR) if method in ("ours_export", "cli_export") else str(out))}
                    # Checked now and removed unless --keep: every run starts with the same files on
                    # disk (an output left behind fills the disk and the page cache for the next ones).
                    checked = _verify_part1(str(src), made, shape, chunks)[method]
                    if verdicts.get(method, "ok") == "ok":
                        verdicts[method] = checked
                    if not args.keep:
                        shutil.rmtree(out, ignore_errors=True) if out.is_dir() else out.unlink(missing_ok=True)
                print("   ", {k: v for k, v in res.items() if k not in ("plan", "report")}, flush=True)
        args.raw[f"part1_{codec}"] = all_runs
        for method, results in all_runs.items():
            ok = [r for r in results if "error" not in r]
            if not ok:
                runs[method] = results[-1]
                continue
            ok.sort(key=lambda r: r["seconds"])
            runs[method] = dict(ok[len(ok) // 2])  # the median run (upper median)
            runs[method]["all_seconds"] = [r["seconds"] for r in ok]
            runs[method]["peak_growth"] = max(r["peak_growth"] for r in ok)
        lines += _part1_table(runs, verdicts, shape, chunks, codec, size, max_mem)


def _part1_table(runs, verdict, shape, chunks, codec, size, max_mem) -> list[str]:
    n_in = shape[0]
    n_out = math.prod(-(-s // c) for s, c in zip(shape, chunks, strict=True))
    label = {
        "ours_zarr": "ours → zarr (plan + version_chunk_reader + resplit_into, its writer threads)",
        "ours_infile": "ours in-file (`versions.rechunk.rechunk` on a copy)",
        "ours_zarr_del": "ours → zarr, one writer (iter_resplit loop, `del w`)",
        "ours_h5": "ours → h5py chunked dataset (`resplit_into`; libhdf5 serializes its writer threads)",
        "cli_export": "ours `vhdf5 export --to out.zarr` (CLI; zarr's default format and codec)",
        "cli_rechunk": "ours `vhdf5 rechunk` (CLI, in-file, on a copy)",
        "cli_rechunk_copyjournal": "ours `vhdf5 rechunk`, journal pre-images copied (before the side-file references)",
        "cli_rechunk_inproc": "ours `vhdf5 rechunk` in process, metered after its imports as rechunker is",
        "cli_rechunk_grow_inproc": "ours `vhdf5 rechunk --grow` in process (new raw_data written once, after the end)",
        "ours_zarr2_threads": "ours → zarr 2.18, `del w` + writes on 2 threads, ≤ 16 chunks in flight (experiment)",
        "ours_zarr_threads": "ours → zarr, `del w` + writes on 2 threads, ≤ 16 chunks in flight (experiment)",
        "ours_zarr2": "ours → zarr 2.18 (rechunker's writer), one writer",
        "ours_export": "ours `export_zarr` (`ds.vhdf5.export`; Zarr v2, its default Blosc-lz4 codec)",
        "ours_zarr_batched": "ours → zarr, `del w` + writes gathered 64 at a time (zarr async API)",
        "rechunker": "rechunker (dask executor, 2 threads)",
        "dask": "dask `rechunk` + `da.store` (threads, 2)",
    }
    codec_text = "uncompressed" if codec == "none" else "gzip level 4"
    out = [
        f"### Part 1: {shape} float32 record, {codec_text} ({size / 1e9:.2f} GB on disk, "
        f"{math.prod(shape) * 4 / 1e9:.2f} GB of points), chunks (1, {LAT}, {LON}) → {chunks}, "
        f"max_mem {max_mem / 1e6:.0f} MB",
        "",
        f"{n_in} input chunks, {n_out} output chunks. Outputs are Zarr format 2 arrays with "
        f"{'no compressor' if codec == 'none' else 'Zlib level 4'} unless said otherwise "
        "(the in-file rechunk keeps the dataset's own filter).",
        "",
        "| method | wall s (median (min-max) of runs) | peak RSS growth MB (max of runs) | "
        "x max_mem | source reads per input chunk | output writes | seeks (paper) | check |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for method, res in runs.items():
        name = label.get(method, method)
        if "error" in res:
            out.append(
                f"| {name} | - | - | - | - | - | - | failed: "
                f"{res['error'][-200:].replace('|', '/').replace(chr(10), ' ')} |"
            )
            continue
        growth = res["peak_growth"]
        seeks = res.get("seeks")
        if seeks is None and method == "dask":
            seeks = f"{res['input_reads'] + res['writes']} I/O calls"
        elif seeks is None and method == "rechunker":
            seeks = (
                f"{res['input_reads'] + res['writes'] + res['temp_writes'] + res['temp_reads']} I/O calls "
                f"({res['temp_writes']} temp writes, {res['temp_reads']} temp reads)"
            )
        elif seeks is None:
            seeks = "-"
        writes = res.get("writes", "-")
        if method.startswith(("ours", "cli")) and res.get("piece_writes"):
            writes = f"{writes} ({res['piece_writes']} pieces)"
        secs = res.get("all_seconds", [res["seconds"]])
        spread = f" ({min(secs):.1f}-{max(secs):.1f})" if len(secs) > 1 else ""
        out.append(
            f"| {name} | {res['seconds']:.1f}{spread} | {_mb(growth)} | {growth / max_mem:.2f} | "
            f"{res['reads_per_chunk']:.3f} | {writes} | {seeks} | {verdict.get(method, 'not checked')} |"
        )
    ours = runs.get("ours_zarr", {})
    if "naive_seeks" in ours:
        out.append(
            "| naive baseline (Algorithm 2, one input chunk at a time; counted, not run) "
            f"| - | - | - | 1.000 | - | {ours['naive_seeks']} | - |"
        )
    out.append("")
    if "plan" in ours:
        one = runs.get("ours_zarr_del", {})
        one = dict(one, how="one writer") if "read_seconds" in one else dict(ours, how="`resplit_into`")
        out += [
            f"Our plan: `{ours['plan']}`.",
            "",
            f"Where our time goes (→ zarr, {one['how']}): planning {one['plan_seconds']:.2f} s, "
            f"reading + decoding input chunks {one['read_seconds']:.1f} s, writing output chunks "
            f"(zarr encode + store) {one['write_seconds']:.1f} s, the rest (copies into buffers, kept remainders) "
            f"{one['seconds'] - one['plan_seconds'] - one['read_seconds'] - one['write_seconds']:.1f} s; "
            f"peak buffer bytes held {_mb(ours['peak_buffer_bytes'])} MB (predicted {_mb(ours['predicted_peak'])} MB).",
            "",
        ]
    if "dask" in runs and "config" in runs["dask"]:
        out += [
            f"dask: {runs['dask']['config']}; writes in `__setitem__` {runs['dask'].get('write_seconds', 0):.1f} s.",
            "",
        ]
    if "rechunker" in runs and "temp_bytes" in runs["rechunker"]:
        out += [f"rechunker wrote {runs['rechunker']['temp_bytes'] / 1e6:.0f} MB to its temp store.", ""]
    for method in IN_FILE:
        if "file_bytes" in runs.get(method, {}):
            out += [
                f"File after `{method}`: {runs[method]['file_bytes'] / 1e9:.2f} GB (before: {size / 1e9:.2f} GB).",
                "",
            ]
    if "ours_infile" in runs and "report" in runs["ours_infile"]:
        out += [f"In-file rechunk report: `{runs['ours_infile']['report']}`.", ""]
    out.append("Peak RSS growth: `VmHWM` after the run minus `VmRSS` after imports and opening, in a fresh child.")
    out.append("")
    return out


def part2(args, work: Path, lines: list[str]) -> None:
    side = 512 if not args.quick else 256
    shape = (side, side, side)
    in_chunks = (64, 64, 64)
    out_chunks = (160, 160, 160)
    max_mem = int(args.part2_mem_mb * 1e6)
    src = work / f"cube_{side}_{'x'.join(map(str, in_chunks))}.h5"
    if not src.exists():
        run_child("cube", {"path": str(src), "shape": shape, "chunks": in_chunks})
    from xarray_vhdf5.resplit import plan_resplit

    lam = plan_resplit(shape, in_chunks, out_chunks, 4, max_mem).aggregate_chunks
    cases = [
        ("B = (1, 1, Λk)", (1, 1, lam[2])),
        ("B = (1, Λj, Λk)", (1, lam[1], lam[2])),
        ("B = Λ", tuple(lam)),
        ("B chosen by the planner", None),
    ]
    rows = []
    for name, bc in cases:
        out = work / "ideal_out.h5"
        res = run_child(
            "ideal",
            {"source": str(src), "out": str(out), "out_chunks": out_chunks, "max_mem": max_mem, "buffer_chunks": bc},
        )
        out.unlink(missing_ok=True)
        print(f"  {name}: {res}", flush=True)
        rows.append((name, res))
    lines += [
        f"### Part 2a: the paper's ideal buffers, {shape} float32 ({math.prod(shape) * 4 / 2**20:.0f} MiB), "
        f"I = {in_chunks} → O = {out_chunks}, Λ = {tuple(lam)} input chunks, max_mem {max_mem / 1e6:.0f} MB",
        "",
        "Source and target: chunked, uncompressed h5py datasets on disk (`array_chunk_reader`, `resplit_into`).",
        "",
    ]
    lines += _part2_table(rows, max_mem)
    args.raw["part2_ideal"] = rows

    # Strong mismatch: small input chunks, output chunks growing, max_mem fixed.
    small = (8, 8, 8) if not args.quick else (16, 16, 16)
    mshape = (256, 512, 512) if not args.quick else (128, 256, 256)
    msrc = work / f"cube_{'x'.join(map(str, mshape))}_{'x'.join(map(str, small))}.h5"
    if not msrc.exists():
        run_child("cube", {"path": str(msrc), "shape": mshape, "chunks": small})
    outs = [(32, 32, 32), (64, 64, 64), (64, 128, 128), (64, 256, 256), (128, 256, 256)]
    if args.quick:
        outs = [(32, 32, 32), (64, 128, 128)]
    rows = []
    for oc in outs:
        out = work / "mismatch_out.h5"
        res = run_child("ideal", {"source": str(msrc), "out": str(out), "out_chunks": oc, "max_mem": max_mem})
        out.unlink(missing_ok=True)
        print(f"  O={oc}: {res}", flush=True)
        rows.append((f"O = {oc}", res))
    lines += [
        f"### Part 2b: strong shape mismatch O >> I, {mshape} float32 ({math.prod(mshape) * 4 / 2**20:.0f} MiB), "
        f"I = {small}, max_mem {max_mem / 1e6:.0f} MB, buffer chosen by the planner",
        "",
    ]
    lines += _part2_table(rows, max_mem)
    args.raw["part2_mismatch"] = rows


def _part2_table(rows, max_mem) -> list[str]:
    out = [
        "| case | buffer (chunks) | buffer points | reads / input chunks | writes (pieces) / outputs | spilled "
        "| seeks | naive seeks | kept MB | predicted peak MB | peak buffer MB | peak RSS growth MB | s | check |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, r in rows:
        if "error" in r:
            out.append(f"| {name} | failed: {r['error'][-200:].replace('|', '/').replace(chr(10), ' ')} |" + " |" * 12)
            continue
        out.append(
            f"| {name} | {tuple(r['buffer_chunks'])} | {tuple(r['buffer_shape'])} | {r['reads']} / {r['n_in']} | "
            f"{r['writes']} ({r['piece_writes']}) / {r['n_out']} | {r['spilled']} | {r['seeks']} | "
            f"{r['naive_seeks']} | {_mb(r['kept_bytes'])} | {_mb(r['predicted_peak'])} | "
            f"{_mb(r['peak_buffer_bytes'])} | {_mb(r['peak_growth'])} | "
            f"{r['seconds']:.1f} | {'ok' if r['ok'] else 'MISMATCH'} |"
        )
    out.append("")
    return out


def main(argv=None) -> None:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--child":
        kind, spec = sys.argv[2], json.loads(sys.argv[3])
        res = CHILDREN[kind](spec)
        print("RESULT " + json.dumps(res, default=lambda o: list(o) if isinstance(o, tuple) else str(o)), flush=True)
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--size-gb", type=float, default=2.0, help="size of part 1's record, GB of float32 points (default 2)"
    )
    ap.add_argument("--quick", action="store_true", help="a ~100 MB record and a small part 2 (smoke test)")
    ap.add_argument("--gzip", action="store_true", help="also run part 1 on a gzip-4 copy of the record")
    ap.add_argument("--parts", default="1,2")
    ap.add_argument(
        "--methods",
        default="ours_zarr,ours_zarr_del,ours_zarr2,ours_h5,ours_export,ours_infile,rechunker,dask",
        help="also: ours_zarr_batched (writes gathered 64 at a time through zarr's async API), "
        "ours_zarr_threads, ours_zarr2_threads (writes on 2 threads), cli_export, cli_rechunk (the vhdf5 "
        "command on a copy), cli_rechunk_copyjournal (the same, the journal copying its pre-images), "
        "cli_rechunk_inproc (the command in process, metered after its imports as rechunker is), "
        "cli_rechunk_grow_inproc (the same with --grow)",
    )
    ap.add_argument(
        "--repeat", type=int, default=1, help="runs of each part-1 method, interleaved; median time reported"
    )
    ap.add_argument("--time-chunk", type=int, default=365)
    ap.add_argument("--max-mem-mb", type=float, default=512)
    ap.add_argument("--part2-mem-mb", type=float, default=256)
    ap.add_argument("--workdir", default="/tmp/bench_rechunk")
    ap.add_argument("--keep", action="store_true", help="keep the outputs")
    ap.add_argument(
        "--drop-caches", action="store_true", help="sync and drop the page cache before each part-1 run (root)"
    )
    ap.add_argument("--rss-cap", type=float, default=10, help="GiB; a child past it is killed")
    ap.add_argument("--rechunker-python", default=os.environ.get("RECHUNKER_PYTHON", "/tmp/venv-rechunker/bin/python"))
    ap.add_argument("--results", default=None)
    args = ap.parse_args(argv)
    args.rss_cap = int(args.rss_cap * 2**30)
    args.raw = {}
    if args.quick:
        args.size_gb = 0.1
    args.time_steps = max(2, round(args.size_gb * 1e9 / (LAT * LON * 4)))
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    lines = [
        "# Rechunk benchmark (issue 22): keep-strategy resplit vs rechunker vs dask",
        "",
        f"Command: `{' '.join(['nice', 'python', 'benchmarks/bench_rechunk.py', *sys.argv[1:]])}`",
        "",
        f"Machine: {_machine()}.",
        "",
        f"Versions: {_versions(args.rechunker_python)}.",
        "",
        f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
    ]
    parts = args.parts.split(",")
    if "1" in parts:
        part1(args, work, lines)
    if "2" in parts:
        part2(args, work, lines)
    lines.append(f"Total benchmark time {time.perf_counter() - t0:.0f} s.")
    text = "\n".join(lines) + "\n"
    print(text)
    path = (
        Path(args.results) if args.results else HERE / "results" / ("rechunk_quick.md" if args.quick else "rechunk.md")
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.with_suffix(".json").write_text(json.dumps(args.raw, indent=1, default=str))  # every run's numbers
    print(f"written to {path}")


if __name__ == "__main__":
    main()
