"""The daily variable of the stress runs and the model of what each version holds.

A writer appends day ``d`` of a ``(t, 90, 180)`` float32 variable ``sst``
(:func:`day_block`, :func:`day_dataset`) and records each commit, edit and
deletion in a :class:`~xarray_vhdf5.testing._processes.Ledger`;
:class:`DayModel` replays that ledger into the values any version must read,
and :func:`count_wrong` counts the points that differ.
"""

from __future__ import annotations

import numpy as np

from ._processes import Ledger

__all__ = ["CHUNKS", "GRID", "DayModel", "count_wrong", "day_block", "day_dataset"]

#: Grid of the daily variable (lat, lon) and its chunks along (time, lat, lon).
GRID = (90, 180)
CHUNKS = (8, 90, 180)


def day_block(first: int, stop: int) -> np.ndarray:
    """The values of days ``first`` to ``stop - 1`` as appended, before any edit: float32 ``(n, 90, 180)``.

    Day ``d`` holds ``d + 0.25 * lat_index + 0.001 * lon_index`` (in float32),
    so every day and point differs.
    """
    days = np.arange(first, stop, dtype=np.float32)[:, None, None]
    lat = (np.arange(GRID[0], dtype=np.float32) * np.float32(0.25))[None, :, None]
    lon = (np.arange(GRID[1], dtype=np.float32) * np.float32(0.001))[None, None, :]
    return (days + lat + lon).astype(np.float32)


def day_dataset(day: int):
    """The one-day ``xarray.Dataset`` the writer appends (``time`` = ``day``, sst chunks :data:`CHUNKS`)."""
    import xarray as xr

    sst = xr.Variable(("time", "lat", "lon"), day_block(day, day + 1))
    sst.encoding["chunks"] = CHUNKS
    return xr.Dataset({"sst": sst}, coords={"time": np.array([float(day)])})


class DayModel:
    """What each version of the writer's file holds, from its :class:`Ledger`.

    Ledger records of the writer (:func:`writer_process`):

    - ``{"op": "commit", "version": name, "ntime": n, "edit": [t, i0, i1, j0, j1, value] or None}``
      after a commit returned: the version holds days ``0 .. n-1``, with the
      edits of every commit up to this one applied in order;
    - ``{"op": "deleting", "versions": [...]}`` before a deletion and
      ``{"op": "deleted", "versions": [...]}`` after it returned.

    Parameters
    ----------
    ledger : Ledger
        The writer's ledger (read again by :meth:`refresh`).
    """

    def __init__(self, ledger: Ledger):
        self.ledger = ledger
        self.order: dict[str, int] = {}  # version -> index in self.commits
        self.commits: list[dict] = []
        self.edits: list[tuple[int, list]] = []  # (commit index, edit)
        self.deleting: set[str] = set()
        self.deleted: set[str] = set()
        self._seen = 0

    def refresh(self) -> DayModel:
        """Read the records appended since the last call."""
        records = self.ledger.read()
        for record in records[self._seen :]:
            if record["op"] == "commit":
                self.order[record["version"]] = len(self.commits)
                self.commits.append(record)
                if record["edit"] is not None:
                    self.edits.append((len(self.commits) - 1, record["edit"]))
            elif record["op"] == "deleting":
                self.deleting.update(record["versions"])
            elif record["op"] == "deleted":
                self.deleted.update(record["versions"])
        self._seen = len(records)
        return self

    def live(self) -> list[str]:
        """Committed versions not deleted nor being deleted, oldest first."""
        gone = self.deleting | self.deleted
        return [c["version"] for c in self.commits if c["version"] not in gone]

    def ntime(self, version: str) -> int:
        """Days held by ``version``."""
        return self.commits[self.order[version]]["ntime"]

    def expected(self, version: str, first: int = 0, stop: int | None = None) -> np.ndarray:
        """``sst[first:stop]`` of ``version`` as the writer committed it.

        Raises
        ------
        KeyError
            ``version`` is not in the ledger.
        """
        index = self.order[version]
        n = self.commits[index]["ntime"]
        stop = n if stop is None else min(stop, n)
        out = day_block(first, stop)
        for commit_index, (t, i0, i1, j0, j1, value) in self.edits:
            if commit_index > index:
                break
            if first <= t < stop:
                out[t - first, i0:i1, j0:j1] = np.float32(value)
        return out


def count_wrong(got: np.ndarray, expected: np.ndarray) -> int:
    """Points of ``got`` not bit-for-bit equal to ``expected`` (all of them if the shapes differ)."""
    got = np.asarray(got)
    if got.shape != expected.shape or got.dtype != expected.dtype:
        return int(max(got.size, expected.size, 1))
    return int(np.count_nonzero(got.view(np.uint32) != expected.view(np.uint32)))
