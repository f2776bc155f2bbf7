"""The file's map log: the chunk maps of datasets too small for a map log of their own.

A dataset of at least :data:`~xarray_vhdf5._versions.chunkmaps.MIN_CHUNKS`
chunks gets a stored map per version and a map log
(:mod:`~xarray_vhdf5._versions.maplog`), which
:func:`~xarray_vhdf5._versions.reader_history.read_versions` reads instead of
opening each version's virtual dataset. A smaller one had neither: reading one
point from each of 1000 versions of a 10-chunk dataset opened 1000 virtual
datasets, about 1 ms each, some 90 times plain h5py reading the point 1000
times (issue 19). A log per dataset would cost each commit one append per
dataset, carried ones included; this log takes every small dataset of a
commit in one append.

Layout: ``/__vhdf5__/small_map_log/`` (:mod:`~xarray_vhdf5._versions.bookkeeping`)

``rows``
    int64 ``(n, 8 + MAX_NDIM)``, one per dataset and version, in commit
    order: the dataset path's digest (:func:`~xarray_vhdf5._versions.maplog.name_digest`),
    the object addresses of its raw_data and of raw_data's hash table when the
    row was written, the version's name digest and ``timestamp``
    (microseconds since 1970-01-01 UTC), the first of the row's values in
    ``numbers`` and their count, the dataset's rank, then its shape (points),
    padded with 0 to :data:`MAX_NDIM`.
``numbers``
    int32 ``(m,)``: per chunk of a row's grid (``ceil(shape / chunks)``, C
    order) the raw_data chunk it maps (its first row divided by the rows a
    chunk holds), -1 for fill value. A dataset committed unchanged gets a copy
    of its source version's row, new name and timestamp, same values.

Attribute ``state`` of the group: int64 ``[format, rows, numbers]``:
:data:`FORMAT` and the rows and values written whole, written last: the log's
commit point (anything past it is a stopped writer's, overwritten by the next).

Like the map log of one dataset it is never the only copy of anything (the
virtual datasets say it all) and a row is used only while it holds: its
raw_data and hash table are still at the addresses it names
(versioned-hdf5's deletion writes a new hash table; this package's own
chunk-moving mutations drop the whole log,
:func:`~xarray_vhdf5._versions.chunkmaps.forget`), and the version's name and
``timestamp`` are the row's (a version committed by versioned-hdf5 has no
row; one deleted and committed again has another timestamp). A row whose
values do not fill its grid, or that names chunks past raw_data's committed
ones, makes the reader decode that version instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple

import h5py
import numpy as np
from h5py import h5d, h5g

from .._backend.h5attrs import read_attr, write_attr
from .._backend.rows import read_rows, write_rows
from . import bookkeeping
from .maplog import name_digest

__all__ = ["FORMAT", "LOG", "MAX_NDIM", "Batch", "SmallMaps"]

#: Layout of the log (the first value of the group's ``state``): 2 since rows hold 4
#: dimensions (1 held 8; a log of format 1 is replaced by the next commit).
FORMAT = 2
#: Its member of the bookkeeping group.
LOG = "small_map_log"
#: Datasets of more dimensions are not logged (their versions are decoded). Four cover
#: (time, level, lat, lon); each more costs every row 8 bytes.
MAX_NDIM = 4
_FIXED = 8  # columns of ``rows`` before the shape
_WIDTH = _FIXED + MAX_NDIM
_ROWS_CHUNK = 32  # HDF5 chunk of ``rows``, in rows (3 KiB: each commit rewrites its last chunk)
_NUMBERS_CHUNK = 1024  # of ``numbers``, in values (4 KiB)
_TAIL = 32  # rows read first from the end, looking for a carried dataset's source row
_SEARCHED = 256  # rows looked through at most, in a second read (a source further back: no copy)
_PATH, _RAW, _TABLE, _VERSION, _STAMP, _FIRST, _COUNT, _NDIM = range(_FIXED)


class _Opened(NamedTuple):
    group: h5g.GroupID
    rows: h5d.DatasetID
    numbers: h5d.DatasetID
    n: int  # rows written whole
    m: int  # values written whole
    size: int  # rows of ``rows``
    extent: int  # values of ``numbers``


def _opened(bk: h5g.GroupID) -> _Opened | None:
    """The log, if there is one of this layout whose commit point lies within its datasets.

    None also when libhdf5 cannot read it (a header a killed plain-handle
    writer tore): a cache is never the reason a commit or a read fails; the
    next commit replaces it (:func:`_create`), readers decode meanwhile.
    """
    try:
        group = h5g.open(bk, LOG.encode())
        state = np.asarray(read_attr(group, "state", expect="int"), np.int64)
        rows, numbers = h5d.open(group, b"rows"), h5d.open(group, b"numbers")
    except (KeyError, ValueError, RuntimeError, OSError):  # absent, or unreadable
        return None
    if state.shape != (3,) or state[0] != FORMAT:
        return None
    n, m, shape, extent = int(state[1]), int(state[2]), rows.shape, numbers.shape
    if len(shape) != 2 or shape[1] != _WIDTH or len(extent) != 1 or not (0 <= n <= shape[0] and 0 <= m <= extent[0]):
        return None
    return _Opened(group, rows, numbers, n, m, shape[0], extent[0])


def _create(bk: h5py.Group) -> _Opened:
    bookkeeping.discard(bk, LOG)  # one of another layout, or damaged
    group = bk.require_group(LOG)
    group.create_dataset("rows", (0, _WIDTH), np.int64, maxshape=(None, _WIDTH), chunks=(_ROWS_CHUNK, _WIDTH))
    group.create_dataset("numbers", (0,), np.int32, maxshape=(None,), chunks=(_NUMBERS_CHUNK,))
    write_attr(group.id, "state", np.asarray([FORMAT, 0, 0], np.int64))
    opened = _opened(bk.id)
    assert opened is not None, "the log just created"
    return opened


class Batch:
    """The rows of one commit's small datasets, written by :meth:`write` in one append.

    Parameters
    ----------
    version : str
        The version being committed; ``timestamp_us`` its ``timestamp`` in
        microseconds since 1970-01-01 UTC.
    """

    def __init__(self, version: str, timestamp_us: int):
        self._digest, self._stamp = name_digest(version), int(timestamp_us)
        self._added: list[tuple[np.ndarray, np.ndarray]] = []  # (row, its values)
        self._carried: list[tuple[int, int, int]] = []  # (path digest, source digest, source timestamp)
        self._stamps: dict[str, int] = {}  # source versions' timestamps, looked up once a commit

    def add(self, path: str, owner: tuple[int, int], shape: tuple[int, ...], numbers: np.ndarray) -> None:
        """Queue the map of the version's dataset ``path``, written anew.

        ``owner``: the object addresses of its raw_data and of raw_data's hash
        table; ``shape`` in points; ``numbers``: integers of the chunk grid's
        shape (``ceil(shape / chunks)``), per chunk the raw_data chunk it maps
        (-1: fill value). Nothing is queued for a rank above :data:`MAX_NDIM` or
        a chunk number past int32 (those versions are decoded).
        """
        if len(shape) > MAX_NDIM or (numbers.size and int(numbers.max()) >= 2**31):
            return
        row = np.zeros(_WIDTH, np.int64)
        row[[_PATH, _RAW, _TABLE, _VERSION, _STAMP]] = [name_digest(path), *owner, self._digest, self._stamp]
        row[_COUNT], row[_NDIM] = numbers.size, len(shape)
        row[_FIXED : _FIXED + len(shape)] = shape
        self._added.append((row, np.ascontiguousarray(numbers, np.int32).reshape(-1)))

    def carry(self, path: str, source_version: str, timestamp_of: Callable[[str], int]) -> None:
        """Queue a copy of the row of ``source_version``'s dataset ``path``, committed unchanged.

        ``timestamp_of(version)``: a version's ``timestamp`` in microseconds
        since 1970-01-01 UTC (called once a source version). The row is found
        by :meth:`write` among the log's last 256 rows; none there: no row (a
        branch from far back: its versions are decoded).
        """
        stamp = self._stamps.get(source_version)
        if stamp is None:
            stamp = self._stamps[source_version] = int(timestamp_of(source_version))
        self._carried.append((name_digest(path), name_digest(source_version), stamp))

    def write(self, f: h5py.File) -> int:
        """Append the queued rows to the log of ``f`` (open for writing), its commit point last.

        Called inside the commit's mutation, before the version is marked
        committed. Returns the rows written.

        Raises
        ------
        RuntimeError, OSError
            libhdf5 failed writing (as h5py raises it); the caller's mutation is
            then journaled back with it.
        """
        if not self._added and not self._carried:
            return 0
        bk = bookkeeping.open_group(f) if not self._added else bookkeeping.require_group(f)
        if bk is None:  # only copies to make, and no log to copy from
            return 0
        opened = _opened(bk.id)
        if opened is None:
            if not self._added:
                return 0
            opened = _create(bk)
        rows = [row for row, _ in self._added]
        first = opened.m
        for row, numbers in self._added:
            row[_FIRST], first = first, first + numbers.size
        rows += _copies(opened, self._carried, self._digest, self._stamp)
        if not rows:
            return 0
        if self._added:
            values = np.concatenate([numbers for _, numbers in self._added])
            if opened.extent < first:
                opened.numbers.set_extent((first,))
            if values.size:
                write_rows(opened.numbers, opened.m, values)
        n = opened.n + len(rows)
        if opened.size < n:
            opened.rows.set_extent((n, _WIDTH))
        write_rows(opened.rows, opened.n, np.stack(rows))
        write_attr(opened.group, "state", np.asarray([FORMAT, n, first], np.int64))  # the commit point
        return len(rows)


def _copies(opened: _Opened, carried: list[tuple[int, int, int]], digest: int, stamp: int) -> list[np.ndarray]:
    """Rows for the datasets ``carried`` unchanged: their source rows, renamed to this version."""
    wanted = dict.fromkeys(carried)
    copies: list[np.ndarray] = []
    end = opened.n
    while wanted and end > 0 and opened.n - end < _SEARCHED:
        start = max(0, end - _TAIL if end == opened.n else opened.n - _SEARCHED)
        tail = read_rows(opened.rows, start, np.empty((end - start, _WIDTH), np.int64))
        keys = tail[:, [_PATH, _VERSION, _STAMP]].tolist()
        for i in range(len(keys) - 1, -1, -1):  # the last row of a key is the one that holds
            key = tuple(keys[i])
            if key in wanted:
                del wanted[key]
                copy = tail[i].copy()
                copy[_VERSION], copy[_STAMP] = digest, stamp
                copies.append(copy)
        end = start
    return copies


class SmallMaps:
    """The file's map log, read whole (:meth:`load`): the maps of one dataset's versions (:meth:`maps`).

    Parameters
    ----------
    opened : _Opened
        The log's group and datasets, with its commit point (rows and values
        written whole).
    rows : numpy.ndarray
        int64 ``(n, 8 + MAX_NDIM)``: the rows written whole (module docstring).
    """

    def __init__(self, opened: _Opened, rows: np.ndarray):
        self._opened, self.rows = opened, rows

    @classmethod
    def load(cls, bk: h5py.Group | None) -> SmallMaps | None:
        """The log of the file whose bookkeeping group is ``bk``, or None (no log of this layout)."""
        opened = None if bk is None else _opened(bk.id)
        if opened is None or not opened.n:
            return None
        try:
            return cls(opened, read_rows(opened.rows, 0, np.empty((opened.n, _WIDTH), np.int64)))
        except (RuntimeError, OSError):  # a chunk libhdf5 cannot read: the versions are decoded
            return None

    def logged(self) -> set[tuple[int, int, int, int, int]]:
        """``(path digest, version name digest, timestamp, raw_data address, hash table address)`` of every
        row: a dataset's map is logged for a version while its raw_data and hash table are at those addresses."""
        return {tuple(r) for r in self.rows[:, [_PATH, _VERSION, _STAMP, _RAW, _TABLE]].tolist()}

    def maps(
        self, path: str, chunks: tuple[int, ...], owner: tuple[int, int], wanted: Iterable[tuple[str, int]]
    ) -> dict[str, tuple[tuple[int, ...], np.ndarray]]:
        """The maps of dataset ``path`` in the versions ``(name, timestamp in microseconds)`` the log serves.

        ``chunks``: its chunk shape (points); ``owner``: the object addresses of
        its raw_data and of the hash table now.

        Returns
        -------
        dict
            ``name -> (shape, chunk numbers)``: the dataset's shape (points) and
            per chunk of its grid the raw_data chunk it maps (-1: none), int64.
            Versions without a row that holds (module docstring) are left out.
        """
        rows, ndim = self.rows, len(chunks)
        if not 0 < ndim <= MAX_NDIM:
            return {}
        mine = rows[
            (rows[:, _PATH] == name_digest(path))
            & (rows[:, _RAW] == owner[0])
            & (rows[:, _TABLE] == owner[1])
            & (rows[:, _NDIM] == ndim)
        ]
        row_of = {key: i for i, key in enumerate(zip(mine[:, _VERSION].tolist(), mine[:, _STAMP].tolist()))}
        names, picked = [], []
        for name, stamp in wanted:  # the last row of a version holds
            i = row_of.get((name_digest(name), stamp))
            if i is not None:
                names.append(name)
                picked.append(i)
        if not picked:
            return {}
        chosen = mine[picked]
        shapes, firsts, counts = chosen[:, _FIXED : _FIXED + ndim], chosen[:, _FIRST], chosen[:, _COUNT]
        grids = -(-shapes // np.asarray(chunks, np.int64))
        good = (
            np.all(shapes >= 0, axis=1)
            & ~np.any(chosen[:, _FIXED + ndim :], axis=1)
            & (np.prod(grids, axis=1) == counts)
            & (firsts >= 0)
            & (firsts + counts <= self._opened.m)
        )
        if not good.any():
            return {}
        lo, hi = int(firsts[good].min()), int((firsts + counts)[good].max())
        try:
            values = read_rows(self._opened.numbers, lo, np.empty(hi - lo, np.int32)).astype(np.int64)
        except (RuntimeError, OSError):  # a chunk libhdf5 cannot read: the versions are decoded
            return {}
        checked = values.size == 0 or int(values.min()) >= -1  # else each row is checked
        found = {}
        for k in np.flatnonzero(good).tolist():
            first = int(firsts[k]) - lo
            numbers = values[first : first + int(counts[k])]
            if not checked and numbers.size and int(numbers.min()) < -1:
                continue
            grid = tuple(grids[k].tolist())
            found[names[k]] = (tuple(shapes[k].tolist()), numbers.reshape(grid))
        return found
