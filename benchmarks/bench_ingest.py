"""Daily ingest side by side with icechunk (issue 19): one day per commit, for T days.

Run from the repository root with the development environment active::

    python benchmarks/bench_ingest.py --days 200                  # every tool, uncompressed
    python benchmarks/bench_ingest.py --days 200 --tools ours-reopen,icechunk
    python benchmarks/bench_ingest.py --days 200 --compress       # each tool's default filters
    python benchmarks/bench_ingest.py --history 1000              # compact-history workload
    python benchmarks/bench_ingest.py --profile 30                # cProfile of ours-reopen
    python benchmarks/bench_ingest.py --days 365 --rounds 3 --tools icechunk,ours-one-call

**Ingest** (``--days T``): a ``(T, 90, 180)`` float32 variable ``sst``
(standard-normal values), chunks ``(1, 90, 180)``, appended one day per commit;
the xarray rows carry a daily ``time`` coordinate (``datetime64[ns]`` from
2000-01-01) and ``lat``/``lon`` coordinates. Without ``--compress`` every
array is stored uncompressed (ours: ``encoding["compression"] = None``; zarr:
``compressors=None``); with it each tool keeps its default (ours: shuffle +
gzip 1 for numeric variables; zarr 3: zstd; the h5py-level rows: none). After
the last day, a QC fix rewrites a 10x10 box of day ``T // 4`` (values + 10) as
one commit, then the version holding the first ``T // 2`` days is opened and
read whole (open included). The tools (``--tools``, comma-separated):

- ``icechunk``: icechunk 1.1.x, ``to_zarr(append_dim="time")`` into a writable
  session of a repository on local storage, reopened each day, one commit per day
  (``ingest_icechunk.py``, run with ``ICECHUNK_PYTHON``, default
  ``/tmp/icechunk-venv/bin/python``; the row is skipped, with how to make that
  venv, when it is missing);
- ``ours-reopen``: each day ``xr.open_dataset(path, engine="vhdf5")``,
  ``.vhdf5.stage()``, ``.vhdf5.append(today, dim="time")``, ``.vhdf5.commit(name)``;
- ``ours-one-call``: each day ``today.vhdf5.commit(name, path=path, append_dim="time")``;
- ``ours-kept-open``: one staged Dataset kept open, ``staged = staged.vhdf5.append(...)``
  then ``staged.vhdf5.commit(name)`` (as ``bench_xr_append.py``);
- ``ours-h5py``: ``xarray_vhdf5.VersionedHDF5File``, the file opened ``"r+"`` each
  day, ``stage_version`` + ``resize`` + one day written (no coordinates);
- ``vhdf5-2.6``: versioned-hdf5 2.6, the same as ``ours-h5py``;
- ``h5py``: a plain resizable ``h5py.Dataset``, the file opened ``"a"`` each day,
  ``resize`` + write: no history (its "old version" read is the first ``T // 2``
  days of the one dataset: the same bytes).

Columns: median commit over days 2..T (day 1 creates the file), the medians of
the 9 commits around t = 10 (days 6-14) and ending at t = T, their ratio, the
sum of all T commit times, the final size (MB = 10**6 bytes: the file, or the
store directory), open + read of the old version, the QC fix commit, and each
row's ratio to icechunk's (median commit, total, size, read), and the machine's
1-minute load average (the larger of its values before and after the row: the
rows run one after the other, so a row run while the machine was busy shows it).
Every tool's final data (QC fix included), time coordinate and old version are
checked against numpy; a mismatch raises ``AssertionError``.

**History** (``--history N``): N daily versions of a small variable ``x``,
``(N, 130)`` float32 (0.52 MB at N = 1000), chunks ``(1, 130)``, one step per
commit, no QC fix. Rows: ``ours-reopen``, ``ours-h5py`` and ``icechunk`` by
default. Reported: the size, its ratio to icechunk's store, and for our HDF5
files ``h5stat -S`` (file metadata, raw data, tracked free and unaccounted space;
``h5stat`` from ``H5STAT`` or ``PATH``, the columns left out when absent; an
``h5stat`` extracted from a .deb, ``H5STAT=/tmp/deb18/usr/bin/h5stat``, runs with the
``lib/x86_64-linux-gnu`` beside its ``bin`` on ``LD_LIBRARY_PATH``, set for that
subprocess only, since the benchmark's own libhdf5 must not change), and how much of
the unaccounted space is global heap (:func:`global_heap`: ``h5stat`` leaves out the
collections holding variable-length attribute values), the free space inside the
heap's collections, and the share of the file lost (heap free space, unaccounted
space outside the heap, tracked free space); ``--records K`` chunks every tool's
variable in K time steps (16: this package's default for such a variable); then the time of
the ``vhdf5 log`` command line (a subprocess: interpreter start included) and of
``xarray_vhdf5.xr.version_log_frame`` on ours-reopen's file.

**Profile** (``--profile N``): ``ours-reopen`` on the ingest shape for N days
timed step by step (open_dataset, stage, append, commit, close), then N days
again under cProfile (which roughly doubles the time of a commit); prints the self time
summed per package and per module, and the functions with the largest cumulative
time, all in ms per commit.

**Rounds** (``--rounds R``, ingest only): the tools run R times, in reversed order every
other round; after the last round's table, each round's median commit and ratio to
icechunk's in that round, and the median and worst of those ratios (a machine whose
speed drifts within a run then weighs on every tool alike).

What it leaves out: concurrent readers, dask, remote storage, icechunk's
repository kept open across days (each day reopens it, as ours reopens the file).
Timings on a shared machine are noisy: compare the ratios of one run.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import xarray as xr

import xarray_vhdf5
from xarray_vhdf5.xr import version_log_frame

HERE = Path(__file__).resolve().parent
ICECHUNK_PYTHON = os.environ.get("ICECHUNK_PYTHON", "/tmp/icechunk-venv/bin/python")
ICECHUNK_HOWTO = (
    "python3.11 -m venv /tmp/icechunk-venv && /tmp/icechunk-venv/bin/pip install 'icechunk<1.2' zarr xarray"
)
START = "2000-01-01"
WINDOW = 9  # commits in each window of the t=10 and t=T medians
MB = 1e6


@dataclass
class Workload:
    """One variable appended one step per commit; ``data[t]`` is day ``t + 1``."""

    data: np.ndarray  # (T, *step_shape)
    var: str
    dims: tuple[str, ...]  # "time" first
    chunks: tuple[int, ...]
    coords: dict[str, np.ndarray]  # coordinates of the other dimensions
    compress: bool
    qc: tuple | None  # (day index, slice, slice): rewritten with its values + 10, or None
    times: pd.DatetimeIndex = field(init=False)

    def __post_init__(self):
        self.times = pd.date_range(START, periods=len(self.data), freq="D")

    @property
    def n_days(self) -> int:
        return len(self.data)

    @property
    def old(self) -> int:
        """Days in the version read back: ``T // 2``."""
        return self.n_days // 2

    def name(self, t: int) -> str:
        """The version after ``t`` days (1-based)."""
        return f"d{t:05d}"

    def day(self, t: int) -> xr.Dataset:
        """Day ``t + 1`` as a Dataset of one time step, with this workload's encoding."""
        var = xr.Variable(self.dims, self.data[t : t + 1])
        var.encoding["chunks"] = self.chunks
        coords = {"time": self.times[t : t + 1], **self.coords}
        ds = xr.Dataset({self.var: var}, coords=coords)
        if not self.compress:
            for name in ds.variables:
                ds[name].encoding["compression"] = None
        return ds

    def expected(self) -> np.ndarray:
        """The final data, QC fix included."""
        out = self.data.copy()
        if self.qc is not None:
            out[self.qc] = self.qc_values()
        return out

    def qc_values(self) -> np.ndarray:
        return self.data[self.qc] + np.float32(10)


def ingest_workload(n_days: int, compress: bool) -> Workload:
    rng = np.random.default_rng(19)
    data = rng.standard_normal((n_days, 90, 180), dtype=np.float32)
    coords = {"lat": np.linspace(-89.0, 89.0, 90), "lon": np.linspace(-179.0, 179.0, 180)}
    qc = (n_days // 4, slice(10, 20), slice(20, 30))
    return Workload(data, "sst", ("time", "lat", "lon"), (1, 90, 180), coords, compress, qc)


def history_workload(n_days: int, compress: bool, records: int = 1) -> Workload:
    """``n_days`` daily versions of a ``(n_days, 130)`` float32 in chunks of ``records`` time steps."""
    rng = np.random.default_rng(1000)
    data = rng.standard_normal((n_days, 130), dtype=np.float32)
    return Workload(data, "x", ("time", "x"), (records, 130), {}, compress, None)


@dataclass
class Result:
    tool: str
    times: list[float]  # seconds per commit, day 1 first
    qc_s: float | None
    read_s: float
    size: int  # bytes
    path: str
    extra: dict = field(default_factory=dict)


def check(tool: str, what: str, got, expected) -> None:
    """Raise ``AssertionError`` naming the tool when ``got`` differs from ``expected``."""
    try:
        np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))
    except AssertionError as err:
        raise AssertionError(f"{tool}: {what} differs from numpy\n{err}") from None


# --- ours, xarray level -------------------------------------------------------------------------


def _check_xr_file(tool: str, path: str, w: Workload) -> float:
    """Check the final version and time the open + read of the old one (seconds)."""
    with xr.open_dataset(path, engine="vhdf5") as ds:
        check(tool, "final data", ds[w.var].values, w.expected())
        check(tool, "final time", ds["time"].values, w.times.values)
    start = time.perf_counter()
    with xr.open_dataset(path, engine="vhdf5", version=w.name(w.old)) as ds:
        ds.load()
        read_s = time.perf_counter() - start
        check(tool, "old version", ds[w.var].values, w.data[: w.old])
        check(tool, "old time", ds["time"].values, w.times[: w.old].values)
    return read_s


def _qc_reopen(path: str, w: Workload) -> float:
    start = time.perf_counter()
    with xr.open_dataset(path, engine="vhdf5") as ds:
        staged = ds.vhdf5.stage()
        try:
            staged[w.var].variable[w.qc] = w.qc_values()
            staged.vhdf5.commit("qc")
        finally:
            staged.close()
    return time.perf_counter() - start


def _reopen_day(path: str, w: Workload, t: int, phases: dict | None = None) -> None:
    """Day ``t + 1`` through the reopen path; ``phases`` (if given) sums seconds per step."""
    if t == 0:
        w.day(0).vhdf5.commit(w.name(1), path=path)
        return
    today = w.day(t)
    clock = [time.perf_counter()]

    def lap(step: str) -> None:
        now = time.perf_counter()
        if phases is not None:
            phases[step] = phases.get(step, 0.0) + now - clock[0]
        clock[0] = now

    with xr.open_dataset(path, engine="vhdf5") as ds:
        lap("open_dataset")
        staged = ds.vhdf5.stage()
        lap("stage")
        try:
            staged = staged.vhdf5.append(today, dim="time")
            lap("append")
            staged.vhdf5.commit(w.name(t + 1))
            lap("commit")
        finally:
            staged.close()
    lap("close")


def run_ours_reopen(path: str, w: Workload) -> Result:
    times = []
    for t in range(w.n_days):
        start = time.perf_counter()
        _reopen_day(path, w, t)
        times.append(time.perf_counter() - start)
    qc_s = None if w.qc is None else _qc_reopen(path, w)
    return Result("ours-reopen", times, qc_s, _check_xr_file("ours-reopen", path, w), os.path.getsize(path), path)


def run_ours_one_call(path: str, w: Workload) -> Result:
    times = []
    for t in range(w.n_days):
        today = w.day(t)
        start = time.perf_counter()
        today.vhdf5.commit(w.name(t + 1), path=path, append_dim="time")
        times.append(time.perf_counter() - start)
    qc_s = None if w.qc is None else _qc_reopen(path, w)
    return Result("ours-one-call", times, qc_s, _check_xr_file("ours-one-call", path, w), os.path.getsize(path), path)


def run_ours_kept_open(path: str, w: Workload) -> Result:
    start = time.perf_counter()
    w.day(0).vhdf5.commit(w.name(1), path=path)
    times = [time.perf_counter() - start]
    staged = xr.open_dataset(path, engine="vhdf5").vhdf5.stage()
    try:
        for t in range(1, w.n_days):
            today = w.day(t)
            start = time.perf_counter()
            staged = staged.vhdf5.append(today, dim="time")
            staged.vhdf5.commit(w.name(t + 1))
            times.append(time.perf_counter() - start)
        qc_s = None
        if w.qc is not None:
            start = time.perf_counter()
            staged[w.var].variable[w.qc] = w.qc_values()
            staged.vhdf5.commit("qc")
            qc_s = time.perf_counter() - start
    finally:
        staged.close()
    return Result("ours-kept-open", times, qc_s, _check_xr_file("ours-kept-open", path, w), os.path.getsize(path), path)


# --- h5py level -----------------------------------------------------------------------------------


def _run_versioned(tool: str, vf_class, path: str, w: Workload) -> Result:
    """``stage_version`` + ``resize`` + one step per day through ``vf_class`` (a VersionedHDF5File)."""
    times = []
    start = time.perf_counter()
    with h5py.File(path, "w") as f:
        with vf_class(f).stage_version(w.name(1)) as g:
            g.create_dataset(w.var, data=w.data[:1], chunks=w.chunks)
    times.append(time.perf_counter() - start)
    for t in range(1, w.n_days):
        start = time.perf_counter()
        with h5py.File(path, "r+") as f:
            with vf_class(f).stage_version(w.name(t + 1)) as g:
                ds = g[w.var]
                ds.resize((t + 1, *w.data.shape[1:]))
                ds[t] = w.data[t]
        times.append(time.perf_counter() - start)
    qc_s = None
    if w.qc is not None:
        start = time.perf_counter()
        with h5py.File(path, "r+") as f:
            with vf_class(f).stage_version("qc") as g:
                g[w.var][w.qc] = w.qc_values()
        qc_s = time.perf_counter() - start
    start = time.perf_counter()
    with h5py.File(path, "r") as f:
        old = vf_class(f)[w.name(w.old)][w.var][()]
    read_s = time.perf_counter() - start
    check(tool, "old version", old, w.data[: w.old])
    with h5py.File(path, "r") as f:
        vf = vf_class(f)
        check(tool, "final data", vf[vf.current_version][w.var][()], w.expected())
    return Result(tool, times, qc_s, read_s, os.path.getsize(path), path)


def run_ours_h5py(path: str, w: Workload) -> Result:
    return _run_versioned("ours-h5py", xarray_vhdf5.VersionedHDF5File, path, w)


def run_versioned_hdf5(path: str, w: Workload) -> Result:
    from versioned_hdf5 import VersionedHDF5File

    return _run_versioned("vhdf5-2.6", VersionedHDF5File, path, w)


def run_h5py(path: str, w: Workload) -> Result:
    times = []
    start = time.perf_counter()
    with h5py.File(path, "w") as f:
        f.create_dataset(w.var, data=w.data[:1], chunks=w.chunks, maxshape=(None, *w.data.shape[1:]))
    times.append(time.perf_counter() - start)
    for t in range(1, w.n_days):
        start = time.perf_counter()
        with h5py.File(path, "a") as f:
            ds = f[w.var]
            ds.resize(t + 1, axis=0)
            ds[t] = w.data[t]
        times.append(time.perf_counter() - start)
    qc_s = None
    if w.qc is not None:
        start = time.perf_counter()
        with h5py.File(path, "a") as f:
            f[w.var][w.qc] = w.qc_values()
        qc_s = time.perf_counter() - start
    start = time.perf_counter()
    with h5py.File(path, "r") as f:
        old = f[w.var][: w.old]
    read_s = time.perf_counter() - start
    check("h5py", "first T//2 days", old, w.expected()[: w.old])
    with h5py.File(path, "r") as f:
        check("h5py", "final data", f[w.var][()], w.expected())
    return Result("h5py", times, qc_s, read_s, os.path.getsize(path), path)


# --- icechunk, in its own interpreter ---------------------------------------------------------


def run_icechunk(path: str, w: Workload) -> Result | None:
    """``ingest_icechunk.py`` under :data:`ICECHUNK_PYTHON`; None (with a note) when it is missing."""
    if not os.path.exists(ICECHUNK_PYTHON):
        print(f"icechunk: skipped, no {ICECHUNK_PYTHON}; make it with:\n    {ICECHUNK_HOWTO}", file=sys.stderr)
        return None
    work = Path(path).parent
    np.save(work / "icechunk-data.npy", w.data)
    qc = None
    if w.qc is not None:
        qc = [int(w.qc[0]), *([s.start, s.stop] for s in w.qc[1:])]
    spec = {
        "data": str(work / "icechunk-data.npy"),
        "store": path,
        "var": w.var,
        "dims": list(w.dims),
        "chunks": list(w.chunks),
        "coords": {k: v.tolist() for k, v in w.coords.items()},
        "start": START,
        "compress": w.compress,
        "qc": qc,
        "old": w.old,
    }
    (work / "icechunk-spec.json").write_text(json.dumps(spec))
    proc = subprocess.run(
        [ICECHUNK_PYTHON, str(HERE / "ingest_icechunk.py"), str(work / "icechunk-spec.json")],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"ingest_icechunk.py failed (exit {proc.returncode}):\n{proc.stderr}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if not out.get("ok"):
        raise AssertionError(f"icechunk: ingest_icechunk.py did not verify its data: {out}")
    extra = {k: out[k] for k in ("icechunk", "zarr", "xarray")}
    return Result("icechunk", out["times"], out["qc_s"], out["read_s"], out["size"], path, extra)


RUNNERS = {
    "icechunk": (run_icechunk, ""),
    "ours-reopen": (run_ours_reopen, ".h5"),
    "ours-one-call": (run_ours_one_call, ".h5"),
    "ours-kept-open": (run_ours_kept_open, ".h5"),
    "ours-h5py": (run_ours_h5py, ".h5"),
    "vhdf5-2.6": (run_versioned_hdf5, ".h5"),
    "h5py": (run_h5py, ".h5"),
}
HISTORY_TOOLS = ("ours-reopen", "ours-h5py", "icechunk")


# --- tables -------------------------------------------------------------------------------------


def _median_ms(times: list[float], first: int, last: int) -> float:
    """Median in ms of the commits of days ``first..last`` (1-based, inclusive)."""
    window = times[max(first, 1) - 1 : last]
    return float(np.median(window)) * 1e3


def ingest_table(results: list[Result]) -> pd.DataFrame:
    rows = []
    for r in results:
        n = len(r.times)
        t10 = _median_ms(r.times, 10 - WINDOW // 2, 10 + WINDOW // 2)
        tn = _median_ms(r.times, n - WINDOW + 1, n)
        rows.append(
            {
                "tool": r.tool,
                "median commit (ms)": _median_ms(r.times, 2, n),
                "t=10 (ms)": t10,
                f"t={n} (ms)": tn,
                f"t={n}/t=10": tn / t10,
                "total (s)": float(np.sum(r.times)),
                "size (MB)": r.size / MB,
                "open+read old (s)": r.read_s,
                "QC fix (ms)": np.nan if r.qc_s is None else r.qc_s * 1e3,
                "load": r.extra["load"],
            }
        )
    frame = pd.DataFrame(rows).set_index("tool")
    if "icechunk" in frame.index:
        ice = frame.loc["icechunk"]
        for col, short in (
            ("median commit (ms)", "commit"),
            ("total (s)", "total"),
            ("size (MB)", "size"),
            ("open+read old (s)", "read"),
        ):
            frame[f"{short} / icechunk"] = frame[col] / ice[col]
    return frame


def rounds_table(rounds: list[list[Result]]) -> pd.DataFrame:
    """Per tool: each round's median commit over icechunk's in the same round, and their median.

    Rounds run the tools in alternating order, so a machine whose speed
    drifts during a run weighs on every tool alike over the rounds.
    """
    tables = [ingest_table(results) for results in rounds]
    frame = pd.DataFrame(index=tables[0].index)
    ratio = "commit / icechunk"
    for k, table in enumerate(tables, start=1):
        frame[f"round {k} (ms)"] = table["median commit (ms)"]
        if ratio in table:
            frame[f"round {k} / icechunk"] = table[ratio]
        frame[f"round {k} t=T/t=10"] = table[next(c for c in table.columns if c.endswith("/t=10"))]
    ratios = frame[[c for c in frame.columns if c.endswith("/ icechunk")]]
    if not ratios.empty:
        frame["median / icechunk"] = ratios.median(axis=1)
        frame["worst / icechunk"] = ratios.max(axis=1)
    return frame


def h5stat_program() -> str | None:
    """``H5STAT`` if set, else ``h5stat`` on ``PATH``."""
    return os.environ.get("H5STAT") or shutil.which("h5stat")


def h5stat_summary(path: str, program: str) -> dict:
    """``h5stat -S`` of ``path`` as bytes: total, metadata, raw data, free (tracked), unaccounted."""
    env = dict(os.environ)
    libs = Path(program).resolve().parent.parent / "lib" / "x86_64-linux-gnu"
    if not str(program).startswith("/usr/") and libs.is_dir():  # an extracted .deb: its libhdf5 beside it
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(libs), env.get("LD_LIBRARY_PATH")]))
    out = subprocess.run([program, "-S", "-F", path], capture_output=True, text=True, check=True, env=env).stdout

    def grab(pattern: str) -> int:
        match = re.search(pattern, out)
        if match is None:
            raise ValueError(f"h5stat -S -F output lacks {pattern!r}:\n{out}")
        return int(match.group(1))

    return {
        "total": grab(r"Total space: (\d+) bytes"),
        "metadata": grab(r"File metadata: (\d+) bytes"),
        "raw data": grab(r"Raw data: (\d+) bytes"),
        "free": grab(r"tracked free space: (\d+) bytes"),
        "unaccounted": grab(r"Unaccounted space: (\d+) bytes"),
        "dataset heap": grab(r"Datasets:\s*\n\s*Heap: (\d+)"),
    }


def global_heap(path: str) -> dict:
    """Bytes of the file's global heap collections, of the objects they hold, and of their free space.

    HDF5 File Format Specification, "Global Heap": a collection is ``GCOL``,
    version 1, three reserved bytes and its size (8 bytes, at least 4096),
    then objects of a 16-byte header (index, reference count, reserved, size)
    and their data padded to 8 bytes; object 0 is the collection's free space,
    its header included. ``h5stat`` counts as dataset heap only the collections
    that datasets' layouts use (a virtual dataset's mappings), so the variable-
    length attribute values in the others (timestamps, ``raw_data`` paths,
    dimension lists, CF strings) land in its "unaccounted" space. Collections
    are found by their signature; a candidate whose objects do not add up to
    its size is skipped.
    """
    with open(path, "rb") as fh:
        data = fh.read()
    total = used = free = 0
    for match in re.finditer(rb"GCOL\x01", data):
        at = match.start()
        (size,) = struct.unpack_from("<Q", data, at + 8)
        if size < 4096 or at + size > len(data):
            continue
        off, end, objects, spare = at + 16, at + size, 0, 0
        while off + 16 <= end:
            index, _, _, nbytes = struct.unpack_from("<HHIQ", data, off)
            if index == 0:
                spare = nbytes
                break
            step = 16 + (nbytes + 7) // 8 * 8
            objects, off = objects + step, off + step
        if 0 <= size - 16 - objects - spare < 16:
            total, used, free = total + size, used + objects, free + spare
    return {"heap": total, "heap objects": used, "heap free": free}


def history_table(results: list[Result]) -> pd.DataFrame:
    program = h5stat_program()
    ice = next((r.size for r in results if r.tool == "icechunk"), None)
    rows = []
    for r in results:
        n = len(r.times)
        row = {
            "tool": r.tool,
            "size (MB)": r.size / MB,
            "size / icechunk": np.nan if ice is None else r.size / ice,
            "median commit (ms)": _median_ms(r.times, 2, n),
            f"t={n}/t=10": _median_ms(r.times, n - WINDOW + 1, n) / _median_ms(r.times, 6, 14),
            "total (s)": float(np.sum(r.times)),
            "load": r.extra["load"],
        }
        if program is not None:
            stat = h5stat_summary(r.path, program) if r.path.endswith(".h5") else None
            for key in ("metadata", "raw data", "free", "unaccounted"):
                row[f"{key} (MB)"] = np.nan if stat is None else stat[key] / MB
            row["unaccounted %"] = np.nan if stat is None else 100 * stat["unaccounted"] / stat["total"]
            if stat is not None:  # what of the unaccounted space is global heap, and what is lost
                heap = global_heap(r.path)
                outside = max(0, stat["unaccounted"] - (heap["heap"] - stat["dataset heap"]))
                row["heap free (MB)"] = heap["heap free"] / MB
                row["unaccounted outside heap (MB)"] = outside / MB
                row["lost %"] = 100 * (heap["heap free"] + outside + stat["free"]) / stat["total"]
        rows.append(row)
    return pd.DataFrame(rows).set_index("tool")


def time_logs(path: str) -> dict:
    """Seconds of ``vhdf5 log PATH`` (a subprocess) and of ``version_log_frame(PATH)`` (in process)."""
    cli = shutil.which("vhdf5") or str(Path(sys.executable).parent / "vhdf5")
    start = time.perf_counter()
    proc = subprocess.run([cli, "log", path], capture_output=True, text=True)
    cli_s = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"vhdf5 log failed (exit {proc.returncode}): {proc.stderr}")
    start = time.perf_counter()
    frame = version_log_frame(path)
    frame_s = time.perf_counter() - start
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import xarray_vhdf5.cli._main"], check=True)
    import_s = time.perf_counter() - start
    return {
        "vhdf5 log (s)": cli_s,
        "of which interpreter + imports (s)": import_s,
        "version_log_frame (s)": frame_s,
        "versions": len(frame),
    }


# --- profile ------------------------------------------------------------------------------------


PACKAGES = ("xarray_vhdf5", "h5py", "xarray", "pandas", "numpy", "benchmarks")


def _module_of(filename: str) -> str:
    if filename.startswith(("~", "<")):
        return "<built-in>"
    for marker in ("site-packages/", "/lib/python3", "/work/main/"):
        if marker in filename:
            tail = filename.split(marker, 1)[1]
            return tail.split("/", 1)[1] if marker == "/lib/python3" else tail
    return filename


def profile_reopen(n_days: int, workdir: Path, compress: bool, top: int = 20) -> None:
    """``ours-reopen`` for ``n_days`` days: time per step, then under cProfile (per package, module, function)."""
    w = ingest_workload(n_days, compress)
    phases: dict[str, float] = {}
    timed = str(workdir / "phases.h5")
    _reopen_day(timed, w, 0)
    for t in range(1, n_days):
        _reopen_day(timed, w, t, phases)
    commits = n_days - 1
    print(f"\nours-reopen without the profiler, {commits} commits, ms per commit by step:")
    steps = pd.Series(phases) / commits * 1e3
    print(pd.concat([steps, pd.Series({"total": steps.sum()})]).round(2).to_string())
    path = str(workdir / "profile.h5")
    _reopen_day(path, w, 0)
    profiler = cProfile.Profile()
    start = time.perf_counter()
    profiler.enable()
    for t in range(1, n_days):
        _reopen_day(path, w, t)
    profiler.disable()
    wall = time.perf_counter() - start
    stats = pstats.Stats(profiler)
    per_module: dict[str, float] = defaultdict(float)
    builtin: dict[str, float] = defaultdict(float)
    for (filename, _, func), (_, _, tottime, _, _) in stats.stats.items():
        module = _module_of(filename)
        per_module[module] += tottime
        if module == "<built-in>":
            builtin[func] += tottime
    per_package: dict[str, float] = defaultdict(float)
    for module, seconds in per_module.items():
        package = module.split("/", 1)[0] if "/" in module else module
        if package not in PACKAGES:
            package = "<built-in>" if module == "<built-in>" else "stdlib/other"
        per_package[package] += seconds
    print(
        f"\nours-reopen under cProfile: {commits} commits, {wall:.2f} s wall ({wall / commits * 1e3:.1f} ms per commit)"
    )
    print("\nself time by package (ms per commit):")
    print((pd.Series(per_package).sort_values(ascending=False) / commits * 1e3).round(2).to_string())
    frame = pd.Series(per_module).sort_values(ascending=False).head(top)
    print("\nself time by module (ms per commit):")
    print((frame / commits * 1e3).round(2).to_string())
    print("\nbuilt-in functions, self time (ms per commit):")
    print((pd.Series(builtin).sort_values(ascending=False).head(10) / commits * 1e3).round(2).to_string())
    rows = []
    for (filename, line, func), (_, ncalls, _, cumtime, _) in stats.stats.items():
        rows.append(
            {
                "function": f"{_module_of(filename)}:{line}({func})",
                "calls/commit": ncalls / commits,
                "cumulative ms/commit": cumtime / commits * 1e3,
            }
        )
    cum = pd.DataFrame(rows).sort_values("cumulative ms/commit", ascending=False).head(top + 10)
    print("\nlargest cumulative times:")
    print(cum.to_string(index=False, float_format=lambda x: f"{x:.2f}"))


# --- main ---------------------------------------------------------------------------------------


def run_tools(tools: list[str], w: Workload, workdir: Path) -> list[Result]:
    results = []
    for tool in tools:
        runner, suffix = RUNNERS[tool]
        print(f"{tool}: {w.n_days} commits ...", file=sys.stderr, flush=True)
        path = workdir / f"{tool}{suffix}"
        if path.is_dir():  # a store left in a --keep directory by an earlier run
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
        start = time.perf_counter()
        load = os.getloadavg()[0]
        result = runner(str(path), w)
        if result is not None:
            result.extra["load"] = max(load, os.getloadavg()[0])
            results.append(result)
            print(
                f"{tool}: done in {time.perf_counter() - start:.1f} s, checked against numpy",
                file=sys.stderr,
                flush=True,
            )
    return results


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--days", type=int, default=None, help="ingest T days of (90, 180) float32 (default 200)")
    mode.add_argument("--history", type=int, default=None, metavar="N", help="N daily versions of a (N, 130) variable")
    mode.add_argument("--profile", type=int, default=None, metavar="N", help="cProfile ours-reopen for N days")
    parser.add_argument(
        "--records",
        type=int,
        default=1,
        metavar="K",
        help="history only: chunks of K time steps for every tool (1; 16 is what this package picks "
        "for a growing dimension of 130 float32)",
    )
    parser.add_argument("--tools", default=None, help=f"comma-separated subset of {','.join(RUNNERS)}")
    parser.add_argument("--compress", action="store_true", help="each tool's default compression")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="ingest only: run the tools this many times, in reversed order every other round, and "
        "print each round's ratios to icechunk and their median",
    )
    parser.add_argument(
        "--keep",
        default=None,
        metavar="DIR",
        help="write the files into DIR and keep them (the tools' earlier files there are replaced)",
    )
    args = parser.parse_args(argv)
    if args.history is None and args.profile is None and args.days is None:
        args.days = 200
    n = args.days or args.history or args.profile
    if n < 2 * WINDOW + 14 and args.profile is None:
        parser.error(f"at least {2 * WINDOW + 14} days, for the t=10 and t=T windows to be apart")
    if args.tools is not None:
        unknown = set(args.tools.split(",")) - set(RUNNERS)
        if unknown:
            parser.error(f"unknown tools {sorted(unknown)}; choose from {list(RUNNERS)}")
    return args


def source_state() -> str:
    """The repository's commit, and whether the package's sources differ from it (an editable install)."""
    repo = HERE.parent
    try:
        head = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--", "xarray_vhdf5"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "commit unknown"
    return f"commit {head}" + (" + uncommitted changes in xarray_vhdf5/" if dirty else "")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 30)
    with tempfile.TemporaryDirectory(prefix="bench_ingest-") as tmp:
        workdir = Path(args.keep or tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        print(
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, "
            f"load {os.getloadavg()[0]:.2f}; xarray_vhdf5 {xarray_vhdf5.__version__}, h5py {h5py.__version__}, "
            f"libhdf5 {h5py.version.hdf5_version}, xarray {xr.__version__}; {source_state()}"
        )
        if args.profile is not None:
            profile_reopen(args.profile, workdir, args.compress)
            return
        history = args.history is not None
        if history:
            w = history_workload(args.history, args.compress, args.records)
            tools = args.tools.split(",") if args.tools else list(HISTORY_TOOLS)
        else:
            w = ingest_workload(args.days, args.compress)
            tools = args.tools.split(",") if args.tools else list(RUNNERS)
        rounds = [run_tools(tools if k % 2 == 0 else tools[::-1], w, workdir) for k in range(max(1, args.rounds))]
        results = rounds[-1]
        ice = next((r for r in results if r.tool == "icechunk"), None)
        if ice is not None:
            print(
                f"icechunk {ice.extra['icechunk']}, zarr {ice.extra['zarr']}, xarray {ice.extra['xarray']} "
                f"(icechunk venv)"
            )
        shape = "x".join(map(str, w.data.shape))
        filters = "each tool's default compression" if args.compress else "uncompressed"
        if history:
            print(f"\nhistory: {w.n_days} daily versions of ({shape}) float32, chunks {w.chunks}, {filters}")
            print(history_table(results).round(3).to_string())
            reopen = next((r for r in results if r.tool == "ours-reopen"), None)
            if reopen is not None:
                print("\nversion logs of ours-reopen's file:")
                for key, value in time_logs(reopen.path).items():
                    print(f"  {key}: {value if key == 'versions' else f'{value:.3f}'}")
        else:
            print(
                f"\ningest: {w.n_days} days of ({shape}) float32, chunks {w.chunks}, one day per commit, {filters}; "
                f"QC fix of 10x10 in day {w.qc[0] + 1}; old version: {w.old} days"
            )
            print(ingest_table(results).round(3).to_string())
            if len(rounds) > 1:
                print(f"\n{len(rounds)} rounds (the table above is the last), median commit per round:")
                print(rounds_table(rounds).round(3).to_string())


if __name__ == "__main__":
    main()
