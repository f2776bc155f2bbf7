"""What a SIGKILL did to a file: the damage classification and the counts of the kill harness.

:func:`classify` compares a killed child's file (as :func:`~xarray_vhdf5.testing._crash_verify.verify_file`
read it) with its ledger: versions lost or altered, an interrupted version
left partial, a returned commit missing, a next commit failing.
:class:`KillReport` holds every kill's row and counts them per package and
kind (:data:`COUNT_COLUMNS`). Used by :mod:`xarray_vhdf5.testing._crash`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

__all__ = ["COUNT_COLUMNS", "INFORMATIVE_COLUMNS", "KillReport", "classify", "data_hash"]


def data_hash(x: np.ndarray, y: np.ndarray) -> str:
    """SHA-256 of a version's data: both arrays' dtype, shape and bytes."""
    h = hashlib.sha256()
    for a in (np.ascontiguousarray(x), np.ascontiguousarray(y)):
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


#: Columns of :meth:`KillReport.counts`.
COUNT_COLUMNS = (
    "kills",
    "in_op",
    "journal_left",
    "h5py_refused",
    "unopenable",
    "reader_unopenable",
    "xr_unopenable",
    "versions_lost",
    "versions_altered",
    "interrupted_partial",
    "returned_missing",
    "deletes_undone",
    "unexpected_versions",
    "check_errors",
    "next_commit_failed",
    "xr_wrong",
    "history_wrong",
    "child_failures",
    "repaired",
    "lost_after_repair",
    "repaired_on_open",
)


#: Columns that count what happened, not damage: a journal rolled back, a plain-h5py open
#: refused until then (this package's documented behaviour), a child whose operation failed,
#: a damaged file that ``vhdf5 check --repair`` brought back with every version it must hold,
#: a file this package repaired when it opened it (``versions.openrepair``).
INFORMATIVE_COLUMNS = (
    "kills",
    "in_op",
    "journal_left",
    "h5py_refused",
    "child_failures",
    "repaired",
    "repaired_on_open",
)


@dataclass
class KillReport:
    """Every kill of :func:`~xarray_vhdf5.testing._crash.run_kills` and its classification.

    Attributes
    ----------
    kills : list of dict
        One record per kill: ``package``, ``kind``, ``running`` (the operation
        the signal interrupted, or ``between``), ``delay_ms`` (after the child
        was ready), ``window_ms``, and the counts of :func:`classify`, with
        ``problems`` (messages).
    wall_seconds : float
        The whole run.
    """

    kills: list[dict] = field(default_factory=list)
    wall_seconds: float = 0.0

    def frame(self):
        """The kills as a ``pandas.DataFrame``, one row each."""
        import pandas as pd

        return pd.DataFrame(self.kills)

    def counts(self):
        """Per package and kind: kills and the damage counts, a ``pandas.DataFrame``.

        The columns of :data:`COUNT_COLUMNS` sum the kills' counts (``versions_lost``
        counts versions, ``unopenable`` kills); ``damaged_kills`` counts the kills
        that left any damage (a column outside :data:`INFORMATIVE_COLUMNS`).
        """
        import pandas as pd

        frame = self.frame()
        if frame.empty:
            return pd.DataFrame(columns=COUNT_COLUMNS)
        damage = [c for c in COUNT_COLUMNS if c not in INFORMATIVE_COLUMNS]
        frame = frame.assign(
            kills=frame["killed_alive"].astype(int),
            in_op=frame["running"].isin(["commit", "delete", "modify"]).astype(int),
            damaged_kills=(frame[damage].sum(axis=1) > 0).astype(int),
        )
        return frame.groupby(["package", "kind"])[[*COUNT_COLUMNS, "damaged_kills"]].sum()

    def running(self):
        """Per package and kind: how many kills landed in each operation (``commit``, ``delete``, ...)."""
        frame = self.frame()
        return frame.groupby(["package", "kind", "running"]).size().unstack(fill_value=0)

    def problems(self) -> list[str]:
        """Every problem found, one line each (package, kind, kill number, what)."""
        return [
            f"{k['package']} {k['kind']} #{k['n']} (running {k['running']}): {p}"
            for k in self.kills
            for p in k["problems"]
        ]


def classify(
    model: dict[str, str],
    before: dict[str, str],
    returned: set[str],
    deleted: set[str],
    interrupted: dict | None,
    expected_interrupted: str | None,
    result: dict,
    next_expected: str | None,
) -> dict:
    """Count what a kill did to the file, from :func:`~xarray_vhdf5.testing._crash_verify.verify_file`'s ``result``.

    Parameters
    ----------
    model : dict of str to str
        Version -> :func:`data_hash` of what it must hold (every version that
        must be there, the child's returned commits included).
    before : dict of str to str
        Version -> hash read from the file before the child ran.
    returned : set of str
        Versions the child committed and saw returned (its ``done`` records).
    deleted : set of str
        Versions the child deleted and saw the deletion return.
    interrupted : dict or None
        The ``start`` record of the operation running at the kill.
    expected_interrupted : str or None
        For an interrupted commit: the hash its version must have if present.
    result : dict
        :func:`~xarray_vhdf5.testing._crash_verify.verify_file`'s.
    next_expected : str or None
        The hash the next commit's version must have.

    Returns
    -------
    dict
        The counts of :data:`COUNT_COLUMNS` (except ``kills``/``in_op``) and ``problems``.
    """
    c: dict[str, int] = {k: 0 for k in COUNT_COLUMNS if k not in ("kills", "in_op")}
    problems: list[str] = []
    probe = result.get("h5py_probe")
    c["repaired_on_open"] = int(result.get("repaired_on_open") is not None)
    # A read-only h5py handle refuses a file this package's first opener must roll back
    # (a journal) or repair (versions.openrepair), saying so: documented, not damage, when
    # that opener then opened it.
    handled = result.get("journal_left") or (c["repaired_on_open"] and result.get("reader_opened"))
    if probe not in (None, "ok") and not handled:
        c["unopenable"] = 1
        problems.append(f"VersionedHDF5File(h5py.File(path, 'r')) refused with no journal left: {probe}")
    if not result["opened"]:
        c["unopenable"] = 1
        problems.append(f"unopenable: {result['open_error']}")
    c["journal_left"] = int(bool(result.get("journal_left")))
    c["h5py_refused"] = int(probe is not None and probe != "ok")
    if result.get("reader_opened") is False:
        c["reader_unopenable"] = 1
        problems.append(f"VersionedHDF5File.open fails: {result.get('reader_error')}")
    if result.get("xr_opened") is False:
        c["xr_unopenable"] = 1
        problems.append(f"xr.open_dataset fails: {result['xr_error']}")
    present = set(result["versions"])
    hashes = result["hashes"]
    target = None
    if interrupted is not None and interrupted["op"] == "delete":
        target = interrupted["versions"][0]
    if interrupted is not None and interrupted["op"] == "commit":
        target = interrupted["version"]
    if result["opened"]:
        for v, h in model.items():
            if v not in present:
                if v == target:
                    continue  # an interrupted deletion may have finished
                c["versions_lost"] += 1
                if v in returned:
                    c["returned_missing"] += 1
                problems.append(f"version {v} lost" + (" (its commit had returned)" if v in returned else ""))
            elif v in result["read_errors"]:
                c["versions_altered"] += 1
                problems.append(f"version {v} unreadable: {result['read_errors'][v]}")
            elif hashes.get(v) != h or (v in before and hashes.get(v) != before[v]):
                c["versions_altered"] += 1
                problems.append(f"version {v} altered")
        for v in sorted(deleted & present):
            c["deletes_undone"] += 1
            problems.append(f"version {v} present after its deletion returned")
        extra = present - set(model) - deleted - ({target} if target else set())
        c["unexpected_versions"] = len(extra)
        if extra:
            problems.append(f"unexpected versions {sorted(extra)}")
        if interrupted is not None and interrupted["op"] == "commit" and target in present:
            if target in result["read_errors"] or hashes.get(target) != expected_interrupted:
                c["interrupted_partial"] = 1
                problems.append(f"interrupted commit {target} present but not whole")
        if interrupted is not None and interrupted["op"] == "modify":
            layouts = {(tuple(result["x_chunks"].get(v, ())), result["x_compression"].get(v)) for v in present}
            if len(layouts) > 1:
                c["interrupted_partial"] = 1
                problems.append(f"interrupted modify_metadata left mixed layouts {sorted(map(str, layouts))}")
        for v, message in result.get("xr_read_errors", {}).items():
            if v in present:
                c["xr_wrong"] += 1
                problems.append(f"xr.open_dataset cannot read {v}: {message}")
        for v, h in result["xr_hashes"].items():
            name = result["current"] if v == "<current>" else v
            # the model's hash where libhdf5 could not read the version (the engine reads chunks as
            # byte ranges, past a torn chunk index): reading the right values there is not a misread
            reference = hashes.get(name) if hashes.get(name) is not None else model.get(name)
            if h != reference:
                c["xr_wrong"] += 1
                problems.append(f"xr.open_dataset reads {v} differently from VersionedHDF5File")
        for v, h in result.get("history_hashes", {}).items():
            if v in present and v not in result["read_errors"] and h != hashes.get(v):
                c["history_wrong"] += 1
                problems.append(f"read_versions reads {v} differently from VersionedHDF5File: {h}")
    if result["check_ok"] is False:
        c["check_errors"] = 1
        problems.append("check_file: " + "; ".join(result["check_errors"][:3]))
    if result.get("repaired_hashes") is not None or result.get("repair_error"):
        _count_repair(c, problems, model, target, result)
    if result["next_ok"] is False:
        c["next_commit_failed"] = 1
        problems.append(f"next commit failed: {result['next_error']}")
    elif result["next_ok"] and next_expected is not None and result["next_hash"] != next_expected:
        c["next_commit_failed"] = 1
        problems.append("next commit holds wrong data")
    return {**c, "problems": problems}


def _count_repair(c: dict, problems: list[str], model: dict[str, str], target: str | None, result: dict) -> None:
    """``repaired`` / ``lost_after_repair``: every version of ``model`` (bar the interrupted one) whole after repair?"""
    after = result.get("repaired_hashes")
    if after is None:
        c["lost_after_repair"] = len(model)
        problems.append(f"vhdf5 check --repair failed: {result.get('repair_error')}")
        return
    lost = [v for v, h in model.items() if v != target and after.get(v) != h]
    c["lost_after_repair"] = len(lost)
    c["repaired"] = int(not lost)
    if lost:
        problems.append(f"after vhdf5 check --repair, {len(lost)} versions lost or altered: {lost[:5]}")
