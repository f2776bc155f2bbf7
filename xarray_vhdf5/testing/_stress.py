"""Several processes on one versioned file, measured: a writer with readers, racing writers.

The workloads of issue 17's stress runs (``tests/test_concurrency_slow.py``,
``benchmarks/bench_concurrency.py``); each checks every value it reads
against a model, so a wrong value is counted, never missed.

Writer with readers (:func:`run_writer_and_readers`)
    One writer process appends a day of a ``(t, 90, 180)`` float32 variable
    ``sst`` per version through the xarray path (``ds.vhdf5.stage()``,
    ``.vhdf5.append(day, dim="time")``, ``.vhdf5.commit()``), edits a small
    box of an earlier day every :data:`EDIT_EVERY` commits, and deletes an
    old version every :data:`DELETE_EVERY` commits at the h5py level
    (``VersionedHDF5File(h5py.File(p, "a")).delete_versions([...])``). After
    each commit returns it appends to a :class:`Ledger` what the version holds
    (its length in days and its edit): the values of any version are then a
    function of the ledger (:meth:`DayModel.expected`). Reader processes
    (``xr.open_dataset(p, engine="vhdf5", version=v)``, with and without
    ``chunks={}``, and the h5py-level reader) pick versions from the ledger and
    compare every value they read; a dask ``LocalCluster`` reads from the
    driving process. A read of a version the writer deleted (or was deleting)
    may raise ``KeyError`` (``VersionNotFoundError``); any other exception, and
    any version not pending deletion that cannot be read, is an error.
Racing writers (:func:`run_racing_writers`)
    Two processes each try ``commits`` commits of a small box edit of one 2-d
    variable, through the xarray path, through
    :func:`~xarray_vhdf5._versions.mutation.open_for_writing` or through a plain
    ``h5py.File(p, "a")``. Each attempt lands or is refused
    (:class:`~xarray_vhdf5.errors.FileBusyError`,
    :class:`~xarray_vhdf5.errors.StaleVersionError`,
    :class:`~xarray_vhdf5.errors.ConflictError`, or h5py's ``BlockingIOError``
    at the open of a file the other writer holds with libhdf5's lock).
    :func:`check_race` then replays the landed edits along the file's version
    chain with numpy and compares every version.

The daily variable and its model are in :mod:`.daymodel`; process starts,
ledgers and lock timing in :mod:`.processes`.
Lock waits are measured inside each process by :func:`~.processes.instrument_locks`,
which times how long each of the :class:`~xarray_vhdf5._versions.locking.FileLocks`
context managers takes to enter.

Processes are started from a ``forkserver`` (:func:`process_context`) so that
they inherit no HDF5 handle of the driving process.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import time
from dataclasses import dataclass, field

import numpy as np

from ._daymodel import GRID, DayModel, count_wrong, day_dataset
from ._processes import Ledger, LockWaits, describe_error, instrument_locks, process_context, write_json

__all__ = [
    "DELETE_EVERY",
    "EDIT_EVERY",
    "StressReport",
    "h5py_reader_available",
    "reader_process",
    "run_writer_and_readers",
    "writer_process",
]

#: The writer edits a box of an earlier day every this many commits.
EDIT_EVERY = 7
#: The writer deletes an old version every this many commits.
DELETE_EVERY = 50
#: ... the version committed this many commits before.
DELETE_LAG = 40
#: Readers read at most this many days per read, and the whole variable every ``FULL_READ_EVERY`` reads.
SLAB_DAYS = 16
FULL_READ_EVERY = 25

# ---------------------------------------------------------------------------------------
# the writer


def create_daily_file(path: str) -> str:
    """Create ``path`` with day 0 as version ``d00000`` (through ``ds.vhdf5.commit(path=)``); return the name."""
    day_dataset(0).vhdf5.commit("d00000", path=path)
    return "d00000"


def writer_process(
    path: str,
    ledger_path: str,
    result_path: str,
    stop,
    seed: int = 0,
    delete_every: int = DELETE_EVERY,
    edit_every: int = EDIT_EVERY,
) -> None:
    """Append a day per commit until ``stop`` is set; write a summary to ``result_path`` (JSON).

    The file must hold version ``d00000`` (:func:`create_daily_file`), which
    the ledger must list. Commits go through ``ds.vhdf5.stage()`` (once, and
    again after each deletion: a deletion moves chunks, which makes a staged
    Dataset stale), ``.vhdf5.append`` and ``.vhdf5.commit``. A failed commit or
    deletion is counted and the writer stages again.

    Parameters
    ----------
    path, ledger_path, result_path : str
        The versioned file, the writer's :class:`Ledger` and where the summary goes.
    stop : multiprocessing.Event
        Set by the driver to end the run.
    seed : int
        Seeds the edits' boxes.
    delete_every, edit_every : int
        Commits between deletions and between edits.

    Notes
    -----
    The summary holds ``commits``, ``deletes``, ``failures`` (with the first
    messages), the commit and deletion times (``commit_ms`` quantiles) and the
    lock waits (:func:`instrument_locks`).
    """
    import h5py
    import xarray as xr

    import xarray_vhdf5  # noqa: F401  (the accessor)
    from xarray_vhdf5 import VersionedHDF5File

    timing = instrument_locks()
    ledger = Ledger(ledger_path)
    rng = random.Random(seed)
    commit_s: list[float] = []
    delete_s: list[float] = []
    failures: list[str] = []
    history = ["d00000"]  # versions committed, by commit number
    deletes = 0

    def stage():
        return xr.open_dataset(path, engine="vhdf5").vhdf5.stage()

    staged = stage()
    ntime = staged.sizes["time"]
    day = ntime
    while not stop.is_set():
        name = f"d{day:05d}"
        edit = None
        try:
            grown = staged.vhdf5.append(day_dataset(day), dim="time")
            if day % edit_every == 0:
                t = rng.randrange(max(day - 20, 0), day + 1)
                i0, j0 = rng.randrange(GRID[0] - 4), rng.randrange(GRID[1] - 4)
                edit = [t, i0, i0 + rng.randint(1, 4), j0, j0 + rng.randint(1, 4), -(day + 0.5)]
                grown["sst"][edit[0], edit[1] : edit[2], edit[3] : edit[4]] = np.float32(edit[5])
            start = time.perf_counter()
            committed = grown.vhdf5.commit(name)
            commit_s.append(time.perf_counter() - start)
            staged = grown
        except Exception as exc:  # noqa: BLE001 - counted and reported
            failures.append(f"commit {name}: {describe_error(exc)}")
            with contextlib.suppress(Exception):
                staged.close()
            try:
                staged = stage()
            except Exception as exc2:  # noqa: BLE001
                failures.append(f"stage after failed commit: {describe_error(exc2)}")
                time.sleep(0.05)
            day = staged.sizes["time"]
            continue
        ledger.append({"op": "commit", "version": committed, "ntime": day + 1, "edit": edit}, fsync=False)
        history.append(committed)
        day += 1
        if len(history) % delete_every == 0 and len(history) > DELETE_LAG:
            victim = history[-DELETE_LAG]
            ledger.append({"op": "deleting", "versions": [victim]}, fsync=False)
            start = time.perf_counter()
            try:
                staged.close()
                with h5py.File(path, "a") as f:
                    VersionedHDF5File(f).delete_versions([victim])
                delete_s.append(time.perf_counter() - start)
                deletes += 1
                ledger.append({"op": "deleted", "versions": [victim]}, fsync=False)
            except Exception as exc:  # noqa: BLE001
                failures.append(f"delete {victim}: {describe_error(exc)}")
            try:
                staged = stage()
            except Exception as exc:  # noqa: BLE001
                failures.append(f"stage after delete: {describe_error(exc)}")
    staged.close()
    ledger.close()
    commits = np.asarray(commit_s) * 1e3
    write_json(
        result_path,
        {
            "role": "writer",
            "commits": len(commit_s),
            "deletes": deletes,
            "failures": len(failures),
            "failure_messages": failures[:10],
            "commit_ms_median": float(np.median(commits)) if commits.size else 0.0,
            "commit_ms_p99": float(np.quantile(commits, 0.99)) if commits.size else 0.0,
            "commit_ms_max": float(commits.max()) if commits.size else 0.0,
            "delete_ms_max": 1e3 * max(delete_s, default=0.0),
            "max_lock_wait_ms": timing.max_ms("writing", "moving"),
            "locks": timing.summary(),
        },
    )


# ---------------------------------------------------------------------------------------
# readers


def h5py_reader_available() -> bool:
    """Whether ``VersionedHDF5File.open(path)`` (the h5py-level reader mode) exists in this package."""
    from .._versions.file import VersionedHDF5File

    return callable(getattr(VersionedHDF5File, "open", None))


class _ReaderStats:
    def __init__(self, kind: str):
        self.kind = kind
        self.reads = 0
        self.points = 0
        self.wrong_points = 0
        self.wrong_reads = 0
        self.deleted_errors = 0  # allowed: the version was being deleted
        self.errors: list[str] = []  # unexpected exceptions
        self.wrong_messages: list[str] = []
        self.open_s: list[float] = []
        self.read_s: list[float] = []

    def result(self, timing: LockWaits) -> dict:
        return {
            "role": "reader",
            "kind": self.kind,
            "reads": self.reads,
            "points_checked": self.points,
            "wrong_points": self.wrong_points,
            "wrong_reads": self.wrong_reads,
            "deleted_version_errors": self.deleted_errors,
            "errors": len(self.errors),
            "error_messages": self.errors[:10],
            "wrong_messages": self.wrong_messages[:10],
            "open_ms_max": 1e3 * max(self.open_s, default=0.0),
            "open_ms_median": 1e3 * float(np.median(self.open_s)) if self.open_s else 0.0,
            "read_ms_max": 1e3 * max(self.read_s, default=0.0),
            "max_lock_wait_ms": timing.max_ms(),
            "locks": timing.summary(),
        }


def _pick(model: DayModel, rng: random.Random, count: int) -> tuple[str, int, int | None] | None:
    """A version (the newest half the time) and a slab of its days, or None before any commit."""
    live = model.live()
    if not live:
        return None
    version = live[-1] if rng.random() < 0.5 else rng.choice(live)
    n = model.ntime(version)
    if count % FULL_READ_EVERY == 0:
        return version, 0, None
    first = rng.randrange(n)
    return version, first, min(n, first + rng.randint(1, SLAB_DAYS))


def _read_xarray(path: str, version: str, first: int, stop: int | None, chunks, stats: _ReaderStats):
    import xarray as xr

    start = time.perf_counter()
    ds = xr.open_dataset(path, engine="vhdf5", version=version, chunks=chunks)
    stats.open_s.append(time.perf_counter() - start)
    try:
        start = time.perf_counter()
        sst = ds["sst"].isel(time=slice(first, stop)).values
        times = ds["time"].values
        stats.read_s.append(time.perf_counter() - start)
        return sst, times
    finally:
        ds.close()


def _read_h5py(path: str, version: str, first: int, stop: int | None, stats: _ReaderStats):
    from .._versions.file import VersionedHDF5File

    start = time.perf_counter()
    vf = VersionedHDF5File.open(path)
    try:
        dset = vf[version]["sst"]
        stats.open_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        sst = np.asarray(dset[first:stop])
        times = np.asarray(vf[version]["time"][:])
        stats.read_s.append(time.perf_counter() - start)
        return sst, times
    finally:
        vf.close()
        h5 = getattr(vf, "f", None)
        if h5 is not None and getattr(h5, "id", None) is not None and h5.id.valid:
            h5.file.close()


def check_read(
    model: DayModel, version: str, first: int, stop: int | None, sst: np.ndarray, times: np.ndarray, stats: _ReaderStats
) -> None:
    """Compare a read of ``sst[first:stop]`` and ``time`` of ``version`` with the model; count into ``stats``."""
    expected = model.expected(version, first, stop)
    n = model.ntime(version)
    wrong = count_wrong(sst, expected)
    if times.shape != (n,) or not np.array_equal(times, np.arange(n, dtype=times.dtype)):
        wrong += n
    stats.reads += 1
    stats.points += expected.size + n
    stats.wrong_points += wrong
    if wrong:
        stats.wrong_reads += 1
        if len(stats.wrong_messages) < 10:
            stats.wrong_messages.append(f"wrong values: {version} sst[{first}:{stop}]: {wrong} points differ")


def _classify(exc: BaseException, version: str, model: DayModel, stats: _ReaderStats) -> None:
    if isinstance(exc, KeyError):
        for _ in range(100):  # the ledger records a deletion before it starts; wait for the write
            model.refresh()
            if version in model.deleting or version in model.deleted:
                stats.deleted_errors += 1
                return
            time.sleep(0.01)
    stats.errors.append(f"{version}: {describe_error(exc)}")


def reader_process(
    kind: str, path: str, ledger_path: str, result_path: str, stop, seed: int = 0, pause: float = 0.0
) -> None:
    """Read versions listed in the writer's ledger until ``stop`` is set; check every value read.

    Parameters
    ----------
    kind : str
        ``"xarray"`` (``xr.open_dataset(engine="vhdf5", version=v)``),
        ``"xarray-dask"`` (the same with ``chunks={}``, dask's threaded
        scheduler) or ``"h5py"`` (``VersionedHDF5File.open(path)``; when the
        package does not have it yet, ``xr.open_dataset`` stands in and the
        summary's ``kind`` says ``"h5py (xarray stand-in)"``).
    path, ledger_path, result_path : str
        The file, the writer's ledger, where the summary goes (JSON).
    stop : multiprocessing.Event
        Set by the driver to end the run.
    seed : int
        Seeds the choice of versions and slabs.
    pause : float
        Seconds to sleep after each read (0: read in a tight loop).
    """
    import xarray_vhdf5  # noqa: F401

    timing = instrument_locks()
    if kind == "h5py" and not h5py_reader_available():
        kind = "h5py (xarray stand-in)"
    stats = _ReaderStats(kind)
    model = DayModel(Ledger(ledger_path))
    rng = random.Random(seed)
    count = 0
    while not stop.is_set():
        picked = _pick(model.refresh(), rng, count)
        if picked is None:
            time.sleep(0.01)
            continue
        count += 1
        version, first, stop_day = picked
        try:
            if kind == "h5py":
                sst, times = _read_h5py(path, version, first, stop_day, stats)
            else:
                sst, times = _read_xarray(path, version, first, stop_day, {} if kind == "xarray-dask" else None, stats)
        except Exception as exc:  # noqa: BLE001 - classified and counted
            _classify(exc, version, model, stats)
        else:
            check_read(model, version, first, stop_day, sst, times, stats)
        if pause:
            time.sleep(pause)
    write_json(result_path, stats.result(timing))


def _dask_reader(path: str, ledger_path: str, stop_at: float, seed: int, pause: float = 0.0) -> dict:
    """Read versions through a dask ``LocalCluster`` (2 worker processes) until ``stop_at``."""
    import xarray as xr
    from distributed import Client, LocalCluster

    stats = _ReaderStats("dask LocalCluster (2 processes)")
    model = DayModel(Ledger(ledger_path))
    rng = random.Random(seed)
    count = 0
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster,
        Client(cluster) as client,
    ):
        while time.monotonic() < stop_at:
            picked = _pick(model.refresh(), rng, count)
            if picked is None:
                time.sleep(0.01)
                continue
            count += 1
            version, first, stop_day = picked
            try:
                start = time.perf_counter()
                ds = xr.open_dataset(path, engine="vhdf5", version=version, chunks={})
                stats.open_s.append(time.perf_counter() - start)
                start = time.perf_counter()
                sst = client.compute(ds["sst"].isel(time=slice(first, stop_day)).data).result()
                times = ds["time"].values
                stats.read_s.append(time.perf_counter() - start)
                ds.close()
            except Exception as exc:  # noqa: BLE001
                _classify(exc, version, model, stats)
            else:
                check_read(model, version, first, stop_day, sst, times, stats)
            if pause:
                time.sleep(pause)
    return stats.result(LockWaits())


# ---------------------------------------------------------------------------------------
# the driver of (a)


@dataclass
class StressReport:
    """What :func:`run_writer_and_readers` measured.

    Attributes
    ----------
    seconds : float
        The writer's run time (wall).
    writer : dict
        The writer's summary (:func:`writer_process`).
    readers : list of dict
        Each reader's summary (:func:`reader_process`), the dask reader's last.
    final_wrong_points : int
        Points of the final check (every ``check_every``-th surviving version read
        whole at the h5py level, and the last one) that differ from the model.
    final_versions_checked : int
        Versions read whole by the final check.
    final_missing : list of str
        Versions the ledger lists as committed and not deleted that the file lacks.
    wall_seconds : float
        Everything, process starts and the final check included.
    """

    seconds: float
    writer: dict
    readers: list[dict]
    final_wrong_points: int = 0
    final_versions_checked: int = 0
    final_missing: list[str] = field(default_factory=list)
    wall_seconds: float = 0.0

    @property
    def reader_errors(self) -> int:
        """Unexpected reader exceptions (not counting reads of deleted versions), over all readers."""
        return sum(r["errors"] for r in self.readers)

    @property
    def wrong_values(self) -> int:
        """Points read wrong by any reader, plus those of the final check."""
        return sum(r["wrong_points"] for r in self.readers) + self.final_wrong_points

    def frame(self):
        """One row per process (``pandas.DataFrame``): reads or commits, errors, wrong values, waits (ms)."""
        import pandas as pd

        w = self.writer
        rows = [
            {
                "process": "writer",
                "ops": w["commits"],
                "deletes": w["deletes"],
                "errors": w["failures"],
                "wrong points": self.final_wrong_points,
                "deleted-version errors": 0,
                "max lock wait ms": round(w["max_lock_wait_ms"], 1),
                "max open ms": None,
                "max commit ms": round(w["commit_ms_max"], 1),
                "median commit ms": round(w["commit_ms_median"], 1),
            }
        ]
        for r in self.readers:
            rows.append(
                {
                    "process": r["kind"],
                    "ops": r["reads"],
                    "deletes": None,
                    "errors": r["errors"],
                    "wrong points": r["wrong_points"],
                    "deleted-version errors": r["deleted_version_errors"],
                    "max lock wait ms": round(r["max_lock_wait_ms"], 1),
                    "max open ms": round(r["open_ms_max"], 1),
                    "max commit ms": None,
                    "median commit ms": None,
                }
            )
        return pd.DataFrame(rows).set_index("process")


def _final_check(path: str, model: DayModel, check_every: int) -> tuple[int, int, list[str]]:
    import h5py

    from .._versions.file import VersionedHDF5File

    live = model.live()
    wrong = checked = 0
    missing = []
    with h5py.File(path, "r", locking=False) as f:
        vf = VersionedHDF5File(f)
        present = set(vf.versions)
        missing = [v for v in live if v not in present]
        for i, version in enumerate(live):
            if version in present and (i % check_every == 0 or i == len(live) - 1):
                wrong += count_wrong(vf[version]["sst"][()], model.expected(version))
                checked += 1
    return wrong, checked, missing


def run_writer_and_readers(
    workdir: str,
    seconds: float,
    *,
    xarray_readers: int = 2,
    h5py_readers: int = 2,
    dask_reader: bool = True,
    seed: int = 0,
    check_every: int = 20,
    reader_pause: float = 0.0,
) -> StressReport:
    """One writer and readers on one new file for ``seconds``; return what they measured.

    Parameters
    ----------
    workdir : str
        A directory for the file (``daily.h5``), the ledger and the summaries.
    seconds : float
        How long the writer runs (the readers run as long).
    xarray_readers : int
        Reader processes through ``xr.open_dataset``; they alternate between
        without and with ``chunks={}``.
    h5py_readers : int
        Reader processes through ``VersionedHDF5File.open`` (xarray stand-ins
        while the package lacks it).
    dask_reader : bool
        Also read through a dask ``LocalCluster`` of 2 worker processes, from
        this process.
    seed : int
        Seeds every process.
    check_every : int
        The final check reads every ``check_every``-th surviving version whole.
    reader_pause : float
        Seconds each reader sleeps after each read (0: tight loops, the harshest load).

    Returns
    -------
    StressReport
    """
    wall = time.monotonic()
    path = os.path.join(workdir, "daily.h5")
    ledger_path = os.path.join(workdir, "daily.ledger")
    first = create_daily_file(path)
    Ledger(ledger_path).append({"op": "commit", "version": first, "ntime": 1, "edit": None})
    ctx = process_context()
    stop = ctx.Event()
    jobs = []
    kinds = [("xarray" if i % 2 == 0 else "xarray-dask") for i in range(xarray_readers)] + ["h5py"] * h5py_readers
    for i, kind in enumerate(kinds):
        out = os.path.join(workdir, f"reader{i}.json")
        process = ctx.Process(
            target=reader_process, args=(kind, path, ledger_path, out, stop, seed + 1 + i, reader_pause)
        )
        jobs.append((process, out))
    writer_out = os.path.join(workdir, "writer.json")
    writer = ctx.Process(target=writer_process, args=(path, ledger_path, writer_out, stop, seed))
    if dask_reader:
        import distributed  # noqa: F401  (imported before the clock starts: it takes seconds)
    for process, _ in jobs:
        process.start()
    writer.start()
    start = time.monotonic()
    dask_result = None
    if dask_reader:
        dask_result = _dask_reader(path, ledger_path, start + seconds, seed + 100, reader_pause)
    remaining = start + seconds - time.monotonic()
    if remaining > 0:
        time.sleep(remaining)
    stop.set()
    writer.join(600)
    elapsed = time.monotonic() - start
    for process, _ in jobs:
        process.join(600)
    readers = []
    for (process, out), kind in zip(jobs, kinds):
        if os.path.exists(out):
            with open(out) as fh:
                readers.append(json.load(fh))
        else:
            readers.append(
                {
                    **_ReaderStats(kind).result(LockWaits()),
                    "errors": 1,
                    "error_messages": [f"reader died (exit code {process.exitcode})"],
                }
            )
    if dask_result is not None:
        readers.append(dask_result)
    if os.path.exists(writer_out):
        with open(writer_out) as fh:
            writer_result = json.load(fh)
    else:
        writer_result = {
            "role": "writer",
            "commits": 0,
            "deletes": 0,
            "failures": 1,
            "failure_messages": [f"writer died (exit code {writer.exitcode})"],
            "commit_ms_median": 0.0,
            "commit_ms_p99": 0.0,
            "commit_ms_max": 0.0,
            "delete_ms_max": 0.0,
            "max_lock_wait_ms": 0.0,
            "locks": {},
        }
    model = DayModel(Ledger(ledger_path)).refresh()
    wrong, checked, missing = _final_check(path, model, check_every)
    return StressReport(elapsed, writer_result, readers, wrong, checked, missing, time.monotonic() - wall)
