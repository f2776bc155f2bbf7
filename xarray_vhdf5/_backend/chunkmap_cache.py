"""A cache of versions' chunk maps (``slab_indices`` / ``slab_offsets``), filled by commits.

Staging an existing dataset needs where each of its chunks lives in
``raw_data`` (:func:`~xarray_vhdf5._backend.chunkmap.build_slab_indices_and_offsets`).
Reading that back from the virtual dataset costs libhdf5 time per mapping,
every version (``docs/benchmarks.md``). A commit already knows the
answer (the rows it mapped), so :class:`ChunkMapCache` keeps it for the
versions it just wrote: staging the next version on top of them reads no
mapping at all, like the format floor.

Entries are keyed by the virtual dataset's path and HDF5 object address, the
address of its raw_data, the shape and the chunks, and checked before use
against the version's ``timestamp`` attribute (a version deleted and made
again under the same name has another one) and against the dataset's hash
table (:func:`~xarray_vhdf5._backend.hashtable.table_state`): every operation
that moves chunks in raw_data, by any library (deleting versions compacts
raw_data, ``modify_metadata`` rewrites it), rebuilds the hash table. Our
``delete_versions`` and ``modify_metadata`` also clear the caches of the
:class:`~xarray_vhdf5.VersionedHDF5File` they run through. Only the last
committed version's datasets are kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import h5py
import numpy as np
from h5py import h5d, h5i, h5o

from .chunks import chunk_grid_shape
from .h5attrs import read_attr
from .h5objects import object_address, object_address_by_name
from .hashtable import hash_table_id, table_state
from .held import HeldDataset

__all__ = ["ChunkMapCache", "chunk_map_arrays"]

_Key = tuple[str, int, int, tuple[int, ...], tuple[int, ...]]


def _oid(obj):
    """The low-level id of an h5py object, or ``obj`` itself if it is one."""
    return obj.id if isinstance(obj, h5py.HLObject) else obj


def _key(vds: h5py.Dataset | h5d.DatasetID, raw_data: h5py.Dataset, shape, chunks) -> _Key:
    vid = _oid(vds)
    return (
        vds.name if isinstance(vds, h5py.HLObject) else h5i.get_name(vid).decode(),
        object_address(vid),
        raw_data.address if isinstance(raw_data, HeldDataset) else object_address(raw_data.id),
        tuple(int(n) for n in shape),
        tuple(int(c) for c in chunks),
    )


def _version_path(key: _Key) -> str:
    return "/".join(key[0].split("/")[:4])  # /_version_data/versions/<name>


def _version_stamp(vds: h5py.Dataset, key: _Key):
    """The ``timestamp`` attribute of the version group holding ``vds`` (None if it has none)."""
    try:
        return read_attr(h5o.open(_oid(vds), _version_path(key).encode()), "timestamp", expect="str")
    except KeyError:
        return None


def chunk_map_arrays(
    shape: Sequence[int],
    chunks: Sequence[int],
    chunk_rows: Iterable[tuple[tuple[int, ...], int, int]],
) -> tuple[np.ndarray, np.ndarray]:
    """``slab_indices`` / ``slab_offsets`` of a dataset mapped by ``chunk_rows``.

    Parameters
    ----------
    shape, chunks : sequence of int
        In points.
    chunk_rows : iterable of (chunk index, start, stop)
        Every stored chunk and its rows in raw_data (as given to
        :func:`~xarray_vhdf5._backend.virtual.create_virtual_dataset`).

    Returns
    -------
    slab_indices : numpy.ndarray of intp, shape ``ceil(shape / chunks)``
        1 for a stored chunk, 0 for one of fill value.
    slab_offsets : numpy.ndarray of uint64, same shape
        The first row in raw_data, in points along axis 0.
    """
    grid = chunk_grid_shape([int(n) for n in shape], [int(c) for c in chunks])
    slab_indices = np.zeros(grid, dtype=np.intp)
    slab_offsets = np.zeros(grid, dtype=np.uint64)
    rows = list(chunk_rows)
    if rows:
        index = tuple(np.array([r[0] for r in rows], dtype=np.intp).reshape(len(rows), len(grid)).T)
        slab_indices[index] = 1
        slab_offsets[index] = np.array([r[1] for r in rows], dtype=np.uint64)
    return slab_indices, slab_offsets


class ChunkMapCache:
    """``slab_indices`` / ``slab_offsets`` of the last committed version's datasets."""

    def __init__(self) -> None:
        self._entries: dict[_Key, tuple[object, tuple, np.ndarray, np.ndarray]] = {}
        self._pending: dict[_Key, tuple[h5py.Dataset, tuple, np.ndarray, np.ndarray]] = {}
        self._versions_state: tuple[int, int] | None = None
        #: ``(path, object address)`` -> keys of ``_entries`` (for :meth:`carry`).
        self._by_object: dict[tuple[str, int], list[_Key]] = {}

    def get(self, vds: h5py.Dataset, raw_data: h5py.Dataset, shape, chunks, hash_table=None, versions_state=None):
        """The cached ``(slab_indices, slab_offsets, table state)`` of ``vds`` (arrays read-only), or None.

        The table state is the :func:`~xarray_vhdf5._backend.hashtable.table_state`
        of ``raw_data``'s hash table the entry was checked against (now).

        ``hash_table``: the open ``hash_table`` beside ``raw_data`` (its id), when
        the caller holds one (opened here otherwise). ``versions_state``: the
        versions group's ``(number of links, creation-order counter)`` when
        staging began, for a group tracking creation order. Equal to the one
        noted after the commit that filled the cache (:meth:`note_versions_state`),
        no version was made or deleted since, and the version's ``timestamp``
        is not read back.
        """
        if not self._entries:
            return None
        key = _key(vds, raw_data, shape, chunks)
        entry = self._entries.get(key)
        if entry is None:
            return None
        if versions_state is None or versions_state != self._versions_state:
            if entry[0] != _version_stamp(vds, key):
                return None
        if entry[1] != table_state(hash_table if hash_table is not None else hash_table_id(raw_data)):
            return None
        return entry[2], entry[3], entry[1]

    def stage(self, vds: h5py.Dataset, raw_data: h5py.Dataset, shape, chunks, arrays, state) -> None:
        """Remember the arrays of a dataset written by the commit under way.

        ``state`` is the :func:`~xarray_vhdf5._backend.hashtable.table_state`
        of its hash table once the commit's rows are written.
        """
        slab_indices, slab_offsets = arrays
        slab_indices.flags.writeable = False
        slab_offsets.flags.writeable = False
        self._pending[_key(vds, raw_data, shape, chunks)] = (vds, state, slab_indices, slab_offsets)

    def carry(self, source_path: bytes, source_address: int, group: h5py.Group, name: str) -> None:
        """Keep the entries of a dataset the commit under way copied unchanged, for its copy.

        ``source_path`` and ``source_address``: the copied virtual dataset's
        absolute path and object address; the copy is ``group[name]``
        (``backend.virtual.carry_virtual_dataset``: the same mappings). The
        entries are not checked here: :meth:`get` checks one against its hash
        table when it is used.
        """
        keys = self._by_object.get((source_path.decode(), source_address))
        if not keys:
            return
        bname = name.encode()
        new_path = f"{group.name.rstrip('/')}/{name}"
        new_address = object_address_by_name(group.id, bname)
        for key in keys:
            _stamp, state, slab_indices, slab_offsets = self._entries[key]
            self._pending[(new_path, new_address, *key[2:])] = (group.id, state, slab_indices, slab_offsets)

    def commit(self, stamp: str | None = None) -> dict[tuple[str, int], h5d.DatasetID]:
        """The commit succeeded (its timestamp is final): its datasets replace every older entry.

        ``stamp``: the ``timestamp`` attribute the commit wrote on its version
        group (read back from the file when not given).

        Returns
        -------
        dict
            ``(path, object address)`` -> the open id of each virtual dataset
            the commit created (not kept here: these caches outlive the file
            handle, and an open id would keep the file open;
            ``backend.held.OpenDatasets.keep_made`` keeps them per handle).
        """
        stamps: dict[str, object] = {}
        entries = {}
        opened = {}
        for key, (vds, state, slab_indices, slab_offsets) in self._pending.items():
            version_path = _version_path(key)
            if version_path not in stamps:
                stamps[version_path] = stamp if stamp is not None else _version_stamp(vds, key)
            entries[key] = (stamps[version_path], state, slab_indices, slab_offsets)
            if isinstance(vds, h5d.DatasetID):
                opened[key[:2]] = vds
        self._entries, self._pending = entries, {}
        self._by_object = {}
        for key in entries:
            self._by_object.setdefault(key[:2], []).append(key)
        self._versions_state = None
        return opened

    def note_versions_state(self, state: tuple[int, int] | None) -> None:
        """The versions group's state once the commit that filled the cache is registered.

        ``(number of links, creation-order counter)`` of a group tracking
        creation order (None otherwise): every link made or removed since
        changes it (``versions.index``), so a version deleted and made again
        under the same name does too.
        """
        self._versions_state = state

    def clear(self) -> None:
        """Forget everything (a commit failed, or versions were deleted or rewritten)."""
        self._entries = {}
        self._pending = {}
        self._by_object = {}
        self._versions_state = None
