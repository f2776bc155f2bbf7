"""Two writers racing commits on one file (issue 17's acceptance point (b)), checked against a numpy replay.

Each writer process commits edits of its own rows and of shared rows through
one of three routes (:data:`RACE_MODES`: a staged xarray commit, a journaled
:func:`~xarray_vhdf5._versions.mutation.open_for_writing`, a plain
``h5py.File(path, "a")``), writing a ledger of what landed;
:func:`check_race` replays the ledgers against the file: every commit landed
or was refused with one of the package's errors, no edit is lost, every
version reads its edits. The writer-with-readers run is in
:mod:`xarray_vhdf5.testing._stress`; the helpers both use (ledger, lock timing,
process context) are in :mod:`xarray_vhdf5.testing._processes`.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import time
import traceback
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._processes import Ledger, describe_error, instrument_locks, process_context, write_json

__all__ = [
    "OWN_ROWS",
    "RACE_CHUNKS",
    "RACE_MODES",
    "RACE_SHAPE",
    "RaceReport",
    "check_race",
    "create_race_file",
    "race_writer",
    "run_racing_writers",
]

#: Shape and chunks of the raced variable ``x`` (float64).
RACE_SHAPE = (100, 100)
RACE_CHUNKS = (10, 10)
#: Rows each writer edits alone (writer w: ``OWN_ROWS * w`` to ``OWN_ROWS * (w + 1)``), and the shared rows after them.
OWN_ROWS = 40
RACE_MODES = ("xarray", "open_for_writing", "h5py")


def create_race_file(path: str) -> str:
    """Create ``path`` with ``x`` = zeros :data:`RACE_SHAPE` as version ``base`` (xarray path); return the name."""
    import xarray as xr

    import xarray_vhdf5  # noqa: F401

    x = xr.Variable(("row", "col"), np.zeros(RACE_SHAPE))
    x.encoding["chunks"] = RACE_CHUNKS
    xr.Dataset({"x": x}).vhdf5.commit("base", path=path)
    return "base"


def _race_edit(writer: int, attempt: int, rng: random.Random) -> dict:
    shared = rng.random() < 0.5
    h, w = rng.randint(1, 4), rng.randint(1, 4)
    if shared:
        rows = (2 * OWN_ROWS, RACE_SHAPE[0])
    else:
        rows = (OWN_ROWS * writer, OWN_ROWS * (writer + 1))
    r0 = rng.randrange(rows[0], rows[1] - h + 1)
    c0 = rng.randrange(0, RACE_SHAPE[1] - w + 1)
    return {"box": [r0, r0 + h, c0, c0 + w], "value": float((writer + 1) * 1000 + attempt + 1), "shared": shared}


def race_writer(
    path: str,
    writer: int,
    commits: int,
    ledger_path: str,
    result_path: str,
    start_at: float,
    seed: int = 0,
    modes: tuple[str, ...] = RACE_MODES,
) -> None:
    """Attempt ``commits`` commits of a box edit of ``x``; record each outcome in a ledger.

    Each attempt picks a mode from ``modes``:

    - ``"xarray"``: ``xr.open_dataset(engine="vhdf5")``, ``.vhdf5.stage()``,
      edit, ``.vhdf5.commit(name)`` (parent: the version opened);
    - ``"open_for_writing"``: :func:`~xarray_vhdf5._versions.mutation.open_for_writing`
      + ``VersionedHDF5File`` + ``stage_version(name)``;
    - ``"h5py"``: ``h5py.File(path, "a")`` + ``VersionedHDF5File`` + ``stage_version(name)``.

    The ledger record (fsync'd) of an attempt: ``name``, ``mode``, ``box``
    (``[r0, r1, c0, c1]``), ``value``, ``parent`` (the version staged from, when
    known) and ``outcome``: ``"landed"``, ``"FileBusyError"``,
    ``"StaleVersionError"``, ``"ConflictError"``, ``"open refused"`` (h5py's
    ``BlockingIOError`` opening a file another process holds with libhdf5's
    lock) or ``"failed"`` (anything else, with the message).

    Parameters
    ----------
    path : str
        The file (made by :func:`create_race_file`).
    writer : int
        0 or 1: which rows are the writer's own, and the edits' values.
    commits : int
        Attempts.
    ledger_path, result_path : str
        The writer's ledger, and where its lock waits go (JSON).
    start_at : float
        ``time.time()`` at which to start (both writers start together).
    seed : int
        Seeds modes and boxes.
    modes : tuple of str
        The modes to draw from.
    """
    import h5py
    import xarray as xr

    import xarray_vhdf5  # noqa: F401
    from xarray_vhdf5 import VersionedHDF5File
    from xarray_vhdf5._versions.mutation import open_for_writing
    from xarray_vhdf5.errors import ConflictError, FileBusyError, StaleVersionError

    timing = instrument_locks()
    ledger = Ledger(ledger_path)
    rng = random.Random(seed * 1000 + writer)
    commit_s = []
    time.sleep(max(0.0, start_at - time.time()))
    for attempt in range(commits):
        mode = rng.choice(modes)
        edit = _race_edit(writer, attempt, rng)
        r0, r1, c0, c1 = edit["box"]
        name = f"w{writer}_{attempt:03d}"
        record = {"name": name, "mode": mode, **edit, "parent": None}
        start = time.perf_counter()
        try:
            if mode == "xarray":
                ds = xr.open_dataset(path, engine="vhdf5")
                try:
                    staged = ds.vhdf5.stage()
                    record["parent"] = staged.encoding.get("vhdf5_version")
                    staged["x"][r0:r1, c0:c1] = edit["value"]
                    staged.vhdf5.commit(name)
                finally:
                    ds.close()
                    with contextlib.suppress(NameError):
                        staged.close()
            else:
                opener = open_for_writing(path) if mode == "open_for_writing" else h5py.File(path, "a")
                with opener as f:
                    vf = VersionedHDF5File(f)
                    record["parent"] = vf.current_version
                    with vf.stage_version(name) as g:
                        g["x"][r0:r1, c0:c1] = edit["value"]
            record["outcome"] = "landed"
            commit_s.append(time.perf_counter() - start)
        except ConflictError as exc:
            record["outcome"], record["message"] = "ConflictError", str(exc)[:200]
        except StaleVersionError as exc:
            record["outcome"], record["message"] = "StaleVersionError", str(exc)[:200]
        except FileBusyError as exc:
            record["outcome"], record["message"] = "FileBusyError", str(exc)[:200]
        except BlockingIOError as exc:  # h5py.File(path, "a"): libhdf5's lock, held by the other writer
            record["outcome"], record["message"] = "open refused", str(exc)[:200]
        except Exception as exc:  # noqa: BLE001
            record["outcome"], record["message"] = "failed", describe_error(exc) + "\n" + traceback.format_exc()[-3000:]
        ledger.append(record)
    ledger.close()
    commits_ms = np.asarray(commit_s) * 1e3
    write_json(
        result_path,
        {
            "writer": writer,
            "max_lock_wait_ms": timing.max_ms("writing", "moving"),
            "commit_ms_max": float(commits_ms.max()) if commits_ms.size else 0.0,
            "commit_ms_median": float(np.median(commits_ms)) if commits_ms.size else 0.0,
            "locks": timing.summary(),
        },
    )


@dataclass
class RaceReport:
    """What :func:`check_race` found after :func:`run_racing_writers`.

    Attributes
    ----------
    outcomes : dict of int to dict of str to int
        Per writer, attempts by outcome (``landed``, ``StaleVersionError``, ...).
    by_mode : dict of str to dict of str to int
        The same by mode.
    missing : list of str
        Landed versions (by their writer's ledger) the file lacks.
    ghosts : list of str
        Versions in the file whose attempt was reported refused or failed.
    off_chain : list of str
        Landed versions not on the current version's ancestry: their edits were
        dropped from the history (a branch left behind).
    lost_edits : list of str
        Versions whose data is not their parent's with their own edit applied
        (an edit lost, or an earlier edit silently reverted).
    wrong_points : int
        Points of all versions (and the final one) that differ from the numpy model.
    final_wrong_points : int
        Of those, in the current version.
    failures : list of str
        Messages of attempts that failed with an unexpected exception.
    max_lock_wait_ms : float
        The longest either writer waited for a lock.
    commit_ms_max : float
        The longest landed attempt (open, stage, commit), ms.
    wall_seconds : float
        From the start of both writers to the end of the check.
    versions : int
        Versions in the file at the end (``base`` included).
    """

    outcomes: dict[int, dict[str, int]]
    by_mode: dict[str, dict[str, int]]
    missing: list[str] = field(default_factory=list)
    ghosts: list[str] = field(default_factory=list)
    off_chain: list[str] = field(default_factory=list)
    lost_edits: list[str] = field(default_factory=list)
    wrong_points: int = 0
    final_wrong_points: int = 0
    failures: list[str] = field(default_factory=list)
    max_lock_wait_ms: float = 0.0
    commit_ms_max: float = 0.0
    wall_seconds: float = 0.0
    versions: int = 0

    @property
    def landed(self) -> int:
        """Attempts that landed, both writers."""
        return sum(o.get("landed", 0) for o in self.outcomes.values())

    def frame(self):
        """Attempts by writer and outcome, and the checks, as a ``pandas.DataFrame``."""
        import pandas as pd

        rows = []
        for writer, outcome in sorted(self.outcomes.items()):
            rows.append({"writer": f"writer {writer}", **outcome})
        for mode, outcome in sorted(self.by_mode.items()):
            rows.append({"writer": f"mode {mode}", **outcome})
        frame = pd.DataFrame(rows).set_index("writer").fillna(0).astype(int)
        frame.attrs.update(self.checks())
        return frame

    def checks(self) -> dict[str, Any]:
        """The checks' counts: missing, ghosts, off-chain, lost edits, wrong points, waits."""
        return {
            "landed": self.landed,
            "missing": len(self.missing),
            "ghosts": len(self.ghosts),
            "off_chain": len(self.off_chain),
            "lost_edits": len(self.lost_edits),
            "wrong_points": self.wrong_points,
            "final_wrong_points": self.final_wrong_points,
            "unexpected_failures": len(self.failures),
            "max_lock_wait_ms": round(self.max_lock_wait_ms, 1),
            "commit_ms_max": round(self.commit_ms_max, 1),
            "wall_seconds": round(self.wall_seconds, 1),
            "versions": self.versions,
        }


def check_race(path: str, ledger_paths: list[str]) -> RaceReport:
    """Replay the landed edits along the file's chain with numpy and compare every version.

    Parameters
    ----------
    path : str
        The raced file.
    ledger_paths : list of str
        The writers' ledgers, writer 0 first.

    Returns
    -------
    RaceReport
        (``max_lock_wait_ms``, ``commit_ms_max`` and ``wall_seconds`` are left
        to the caller.)
    """
    import h5py

    from .._versions.file import VersionedHDF5File

    records = {}
    outcomes: dict[int, dict[str, int]] = {}
    by_mode: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    failures = []
    for writer, ledger_path in enumerate(ledger_paths):
        counts: dict[str, int] = defaultdict(int)
        for record in Ledger(ledger_path).read():
            records[record["name"]] = record
            counts[record["outcome"]] += 1
            by_mode[record["mode"]][record["outcome"]] += 1
            if record["outcome"] == "failed":
                failures.append(f"{record['name']} ({record['mode']}): {record['message']}")
        outcomes[writer] = dict(counts)
    landed = {n for n, r in records.items() if r["outcome"] == "landed"}
    report = RaceReport(outcomes, {m: dict(c) for m, c in by_mode.items()}, failures=failures)
    with h5py.File(path, "r", locking=False) as f:
        vf = VersionedHDF5File(f)
        present = list(vf.versions)
        report.versions = len(present)
        report.missing = sorted(landed - set(present))
        report.ghosts = sorted(v for v in present if v in records and records[v]["outcome"] != "landed")
        parents = {v: vf.version_info(v).prev_version for v in present}
        chain = []
        v = vf.current_version
        while v in parents:
            chain.append(v)
            v = parents[v]
        chain.reverse()
        report.off_chain = sorted(landed - set(chain))
        data = {v: vf[v]["x"][()] for v in present}
    model = {"base": np.zeros(RACE_SHAPE)}
    for v in present:  # oldest first: a parent is always before its children
        parent = parents[v]
        if v == "base" or parent not in model:
            continue
        expected = model[parent].copy()
        box_edit = records.get(v)
        if box_edit is not None:
            r0, r1, c0, c1 = box_edit["box"]
            expected[r0:r1, c0:c1] = box_edit["value"]
        model[v] = expected
        wrong = int(np.count_nonzero(data[v] != expected))
        if wrong:
            report.lost_edits.append(v)
            report.wrong_points += wrong
    current = chain[-1] if chain else None
    if current is not None and current in model:
        report.final_wrong_points = int(np.count_nonzero(data[current] != model[current]))
    return report


def run_racing_writers(workdir: str, commits: int, *, seed: int = 0, modes: tuple[str, ...] = RACE_MODES) -> RaceReport:
    """Two writer processes race ``commits`` attempts each on one new file; check the result.

    Parameters
    ----------
    workdir : str
        A directory for the file (``race.h5``), the ledgers and the summaries.
    commits : int
        Attempts per writer.
    seed : int
        Seeds both writers.
    modes : tuple of str
        The modes the writers draw from (:func:`race_writer`).

    Returns
    -------
    RaceReport
    """
    path = os.path.join(workdir, "race.h5")
    create_race_file(path)
    ctx = process_context()
    start_at = time.time() + 0.5
    ledgers = [os.path.join(workdir, f"race{w}.ledger") for w in (0, 1)]
    outs = [os.path.join(workdir, f"race{w}.json") for w in (0, 1)]
    procs = [
        ctx.Process(target=race_writer, args=(path, w, commits, ledgers[w], outs[w], start_at, seed, modes))
        for w in (0, 1)
    ]
    wall = time.monotonic()
    for p in procs:
        p.start()
    for p in procs:
        p.join(1800)
    report = check_race(path, ledgers)
    for w, p in enumerate(procs):
        if p.exitcode != 0:
            report.failures.append(f"writer {w} exited with code {p.exitcode}")
        if os.path.exists(outs[w]):
            with open(outs[w]) as fh:
                summary = json.load(fh)
            report.max_lock_wait_ms = max(report.max_lock_wait_ms, summary["max_lock_wait_ms"])
            report.commit_ms_max = max(report.commit_ms_max, summary["commit_ms_max"])
    report.wall_seconds = time.monotonic() - wall
    return report
