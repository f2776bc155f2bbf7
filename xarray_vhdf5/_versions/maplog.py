"""The map log: every version's chunk map of one dataset, in one table a reader takes in two reads.

Reading one point from each of 1000 versions through the per-version stored
maps (:mod:`~xarray_vhdf5._versions.chunkmaps`) opens one map and checks five
attributes per version: about 20 HDF5 calls each, two orders of magnitude
more than plain h5py reading the point 1000 times (issue 19). The map log holds
the same maps as changes, so :func:`~xarray_vhdf5._versions.reader_history.read_versions`
reads the whole history of a dataset's mappings at once.

Layout: ``/__vhdf5__/map_log/<dataset path>/`` (:mod:`~xarray_vhdf5._versions.bookkeeping`)

``rows``
    int64 ``(n, 6 + ndim)``, one per map logged, in commit order: the
    version's name digest (:func:`name_digest`) and ``timestamp``
    (microseconds since 1970-01-01 UTC), the first row of its changes in
    ``changes`` and their number, its base's name digest and timestamp (-1:
    none), then the dataset's shape (points). The base is the version the
    dataset was staged or copied from, when that version's map is the
    previous row's.
``changes``
    int64 ``(m, 2)``: per changed chunk, its index in the row's chunk grid
    (C order) and the number of the raw_data chunk it maps (-1: fill value).
    A row lists the chunks of its grid that lie outside its base's grid or
    map another raw_data chunk than there; a row without a base lists every
    chunk. Its map is its base's, cut or grown to its grid, with these changes.

Attribute ``state`` of the group: int64 ``[format, raw, table, rows]``:
:data:`FORMAT`, the object addresses of raw_data and of its hash table when
the log was started, and the rows written whole, written last: the log's
commit point (rows past it are a stopped writer's, overwritten by the next).

Rows are written once and never changed. The writer takes its base's map from
the base's stored map, after the checks of any reader of it
(:meth:`~xarray_vhdf5._versions.chunkmaps.MapReader.numbers`), or from the
map it logged last in this process when the log's last row is still that one;
it writes a row without a base when there is none to trust or when the base
is not the last row's version (a branch). Nothing earlier rows mean depends on
state a stopped writer may have left half written.

It is never the only copy of anything (the virtual datasets say it all) and it
is used only while it holds: the addresses of raw_data and of its hash table
are the ones it was started for (versioned-hdf5's deletion and
``modify_metadata`` write new ones; this package's own chunk-moving mutations
drop it, :func:`~xarray_vhdf5._versions.chunkmaps.forget`), and a row serves a
version, or is the base of another row, only when the version's name and
``timestamp`` are the row's (a version committed by versioned-hdf5 has no row;
one deleted and committed again has another timestamp). A row whose base has
no row serves nobody. Chunk numbers past the committed ones make the reader
decode instead. Written by the commit of each version whose dataset gets a
stored map (:func:`~xarray_vhdf5._versions.chunkmaps.record`,
:func:`~xarray_vhdf5._versions.chunkmaps.carry`), inside its mutation.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import NamedTuple

import h5py
import numpy as np
from h5py import h5d, h5g

from .._backend.h5attrs import read_attr, write_attr
from .._backend.rows import read_rows, write_rows
from . import bookkeeping

__all__ = ["FORMAT", "LOG", "MapLog", "append", "log_path", "name_digest"]

#: Layout of a log (the first value of the group's ``state``).
FORMAT = 1
#: Its member of the bookkeeping group.
LOG = "map_log"
_ROWS_CHUNK = 256  # HDF5 chunk of ``rows``, in rows
_CHANGES_CHUNK = 4096  # of ``changes``, in rows (64 KiB)
_FIXED = 6  # columns of ``rows`` before the shape
#: Maps this process logged last, per dataset and log (its path and the object addresses of
#: raw_data and its hash table the log was started for): the base of its next row, taken
#: only while the log's last row is still that map's (row count, version digest, timestamp).
#: Not keyed by libhdf5's name of the file: a journaled handle's is its file object's, new
#: at each open, and every commit through ``open_file`` or the xarray writers opens anew.
_TIPS: OrderedDict[tuple, tuple[tuple[int, ...], np.ndarray]] = OrderedDict()
_TIPS_KEPT = 64
_TIPS_LOCK = threading.Lock()


def log_path(path: str) -> str:
    """The log's path in the bookkeeping group for dataset ``path`` (``"x"``, ``"grp/x"``)."""
    return f"{LOG}/{path}"


def name_digest(name: str) -> int:
    """A version name as a signed 64-bit integer: the first 8 bytes of its BLAKE2b digest (UTF-8)."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little", signed=True)


def _state(gid: h5g.GroupID) -> np.ndarray | None:
    try:
        state = np.asarray(read_attr(gid, "state", expect="int"), np.int64)
    except KeyError:
        return None
    return state if state.shape == (4,) and state[0] == FORMAT else None


def _create(bk: h5py.Group, path: str, ndim: int, owner: tuple[int, int]) -> h5py.Group:
    bookkeeping.discard(bk, log_path(path))  # one that no longer holds
    group = bk.require_group(log_path(path))
    width = _FIXED + ndim
    group.create_dataset("rows", (0, width), np.int64, maxshape=(None, width), chunks=(_ROWS_CHUNK, width))
    group.create_dataset("changes", (0, 2), np.int64, maxshape=(None, 2), chunks=(_CHANGES_CHUNK, 2))
    write_attr(group.id, "state", np.asarray([FORMAT, *owner, 0], np.int64))
    return group


class _Opened(NamedTuple):
    group: h5g.GroupID
    rows: h5d.DatasetID
    changes: h5d.DatasetID
    n: int  # rows written whole
    width: int  # columns of ``rows``
    size: int  # rows of ``rows``
    extent: int  # rows of ``changes``


def _opened(bk: h5g.GroupID, path: str, ndim: int, owner: tuple[int, int]) -> _Opened | None:
    """The log of dataset ``path`` if there is one that holds for raw_data ``owner``, else None."""
    try:
        group = h5g.open(bk, log_path(path).encode())
    except (KeyError, ValueError):  # no such group (h5py raises either, by HDF5 version and path depth)
        return None
    state = _state(group)
    if state is None or (int(state[1]), int(state[2])) != owner:
        return None
    try:
        rows, changes = h5d.open(group, b"rows"), h5d.open(group, b"changes")
    except KeyError:
        return None
    n, shape, extent = int(state[3]), rows.shape, changes.shape
    if len(shape) != 2 or shape[1] != _FIXED + ndim or len(extent) != 2 or extent[1] != 2 or not 0 <= n <= shape[0]:
        return None
    return _Opened(group, rows, changes, n, shape[1], shape[0], extent[0])


def append(
    bk: h5py.Group,
    path: str,
    raw: h5py.Dataset,
    owner: tuple[int, int],
    version: str,
    timestamp_us: int,
    shape: tuple[int, ...],
    numbers: np.ndarray,
    base: tuple[str, Callable[[], np.ndarray | None]] | None,
) -> None:
    """Log the map ``numbers`` of ``version``'s dataset ``path`` (the module docstring's layout).

    Parameters
    ----------
    bk : h5py.Group
        The bookkeeping group, writable.
    path : str
        The dataset's path in the versions.
    raw : h5py.Dataset
        Its raw_data; ``owner`` the object addresses of raw_data and of its
        hash table.
    version : str
        The version being committed; ``timestamp_us`` its ``timestamp`` in
        microseconds since 1970-01-01 UTC.
    shape : tuple of int
        The dataset's shape in this version (points; its chunks are raw_data's).
    numbers : numpy.ndarray
        Integer, of the chunk grid's shape: per chunk the raw_data chunk it
        maps, -1 for none.
    base : (str, callable) or None
        The base version's name, and a function giving its map checked (None:
        none to trust), called only when the map this process logged last is
        not that one. Used when the base is the previous row's version (a
        linear history: a name is the previous row's version while the log
        holds, since deleting a version resets the log); else, or for None,
        the row lists every chunk.

    Raises
    ------
    RuntimeError, OSError
        libhdf5 failed writing (as h5py raises it); the caller's mutation is
        then journaled back with it.
    """
    opened = _opened(bk.id, path, len(shape), owner)
    if opened is None:
        _create(bk, path, len(shape), owner)
        opened = _opened(bk.id, path, len(shape), owner)
        assert opened is not None, "the log just created"
    rows, changes, n = opened.rows, opened.changes, opened.n
    current = np.ascontiguousarray(numbers, np.int64)
    previous = np.zeros((1, opened.width), np.int64)
    if n:
        read_rows(rows, n - 1, previous)
    key = (path, *owner)
    base_map = None
    if base is not None and n and int(previous[0, 0]) == name_digest(base[0]):
        with _TIPS_LOCK:
            tip = _TIPS.get(key)
        if tip is not None and tip[0] == (*owner, n, int(previous[0, 0]), int(previous[0, 1])):
            base_map = tip[1]
        else:
            base_map = base[1]()
    if base_map is None or base_map.ndim != current.ndim:
        base = None
        changed = np.arange(current.size, dtype=np.int64)
    else:
        changed = _changed(base_map, current)
    first = int(previous[0, 2] + previous[0, 3]) if n else 0
    if changed.size:
        if opened.extent < first + changed.size:
            changes.set_extent((first + changed.size, 2))
        write_rows(changes, first, np.stack([changed, current.reshape(-1)[changed]], axis=1))
    if opened.size < n + 1:
        rows.set_extent((n + 1, opened.width))
    digest = name_digest(version)
    based = (-1, -1) if base is None else (int(previous[0, 0]), int(previous[0, 1]))
    write_rows(rows, n, np.asarray([[digest, timestamp_us, first, changed.size, *based, *shape]], np.int64))
    write_attr(opened.group, "state", np.asarray([FORMAT, *owner, n + 1], np.int64))  # the commit point
    with _TIPS_LOCK:
        _TIPS[key] = ((*owner, n + 1, digest, timestamp_us), current)
        _TIPS.move_to_end(key)
        while len(_TIPS) > _TIPS_KEPT:
            _TIPS.popitem(last=False)


def _overlap(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[slice, ...]:
    """The chunks two grids have in common: ``[:min]`` on every axis."""
    return tuple(slice(0, min(p, q)) for p, q in zip(a, b, strict=True))


def _changed(previous: np.ndarray, current: np.ndarray) -> np.ndarray:
    """Indices (C order in ``current``'s grid) of its chunks outside ``previous``'s grid or mapping another chunk."""
    changed = np.ones(current.shape, bool)
    overlap = _overlap(previous.shape, current.shape)
    changed[overlap] = previous[overlap] != current[overlap]
    return np.flatnonzero(changed)


class MapLog:
    """The map log of one dataset, read whole (:meth:`load`): the maps of the versions asked for.

    Parameters
    ----------
    rows : numpy.ndarray
        int64 ``(n, 4 + ndim)``, the rows written whole (module docstring).
    changes : numpy.ndarray
        int64 ``(m, 2)``, every row's changes.
    chunks : tuple of int
        The dataset's chunk shape (points).
    """

    def __init__(self, rows: np.ndarray, changes: np.ndarray, chunks: tuple[int, ...]):
        self.rows, self.changes, self.chunks = rows, changes, chunks

    @classmethod
    def load(cls, bk: h5py.Group | None, path: str, raw: h5py.Dataset, owner: tuple[int, int]) -> MapLog | None:
        """The log of ``path`` if there is one that holds for raw_data ``owner`` (module docstring), else None.

        ``owner``: the object addresses of raw_data and of its hash table.
        """
        if bk is None or raw.chunks is None:
            return None
        opened = _opened(bk.id, path, raw.ndim, owner)
        if opened is None or not opened.n:
            return None
        rows = read_rows(opened.rows, 0, np.empty((opened.n, opened.width), np.int64))
        end = int(rows[-1, 2] + rows[-1, 3])
        if not 0 <= end <= opened.extent:
            return None
        changes = read_rows(opened.changes, 0, np.empty((end, 2), np.int64))
        return cls(rows, changes, tuple(int(c) for c in raw.chunks))

    def maps(self, wanted: Iterable[tuple[str, int]]) -> dict[str, tuple[tuple[int, ...], np.ndarray]]:
        """The maps of the versions ``(name, timestamp in microseconds)`` the log serves.

        Returns
        -------
        dict
            ``name -> (shape, chunk numbers)``: the dataset's shape (points) and
            per chunk of its grid the raw_data chunk it maps (-1: none), int64;
            the arrays may be shared, not to be written. Versions without a row
            (another timestamp, a base without a row) are left out; all are
            when the log is inconsistent (changes not following each other, or
            outside their row's grid).
        """
        rows, n = self.rows, len(self.rows)
        firsts, counts = rows[:, 2], rows[:, 3]
        grids = -(-rows[:, _FIXED:] // np.asarray(self.chunks, np.int64))
        row_of = np.repeat(np.arange(n), np.maximum(counts, 0))
        if (
            np.any(counts < 0)
            or int(firsts[0]) != 0
            or not np.array_equal(firsts[1:], (firsts + counts)[:-1])
            or np.any(self.changes[:, 0] < 0)
            or np.any(self.changes[:, 0] >= np.prod(grids, axis=1)[row_of])
        ):
            return {}
        row_at: dict[tuple[int, int], int] = {}  # (name digest, timestamp) -> its row
        base_of = [-1] * n  # each row's base row; -1: none (a whole row), -2: a base without a row
        for i, (digest, stamp, base_digest, base_stamp) in enumerate(rows[:, [0, 1, 4, 5]].tolist()):
            if base_stamp >= 0:
                base_of[i] = row_at.get((base_digest, base_stamp), -2)
            row_at[(digest, stamp)] = i
        targets = {i: name for name, stamp in wanted if (i := row_at.get((name_digest(name), stamp), -1)) >= 0}
        needed, stack = set(), list(targets)
        while stack:  # the targets and their bases
            i = stack.pop()
            if i not in needed:
                needed.add(i)
                if base_of[i] >= 0:
                    stack.append(base_of[i])
        uses = dict.fromkeys(needed, 0)
        for i in needed:
            if base_of[i] >= 0:
                uses[base_of[i]] += 1
        built: dict[int, np.ndarray | None] = {}
        found: dict[str, tuple[tuple[int, ...], np.ndarray]] = {}
        for i in sorted(needed):
            grid = tuple(int(g) for g in grids[i])
            b = base_of[i]
            base = np.empty((0,) * len(grid), np.int64) if b == -1 else built.get(b)
            if b >= 0:
                uses[b] -= 1
                if not uses[b] and b not in targets:
                    del built[b]
            if base is None:  # a base without a row, or one that had none: this row serves nobody
                built[i] = None
                continue
            first, count = int(firsts[i]), int(counts[i])
            if base.shape == grid and not count:
                current = base
            else:
                current = np.full(grid, -1, np.int64)
                overlap = _overlap(base.shape, grid)
                current[overlap] = base[overlap]
                changes = self.changes[first : first + count]
                current.reshape(-1)[changes[:, 0]] = changes[:, 1]
            built[i] = current
            if i in targets:
                found[targets[i]] = (tuple(int(s) for s in rows[i, _FIXED:]), current)
        return found
