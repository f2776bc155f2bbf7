"""The stored objects of a versioned file, as the operations that rewrite it see them.

Shared by deleting versions (:mod:`.delete`), ``modify_metadata``
(:mod:`.metadata`), rebuilding hash tables (:mod:`.rebuild`), repacking
(:mod:`.repack`), rechunking and repairing: checking the file argument and
opening it for a rewrite (:func:`_open`), listing the versioned datasets
(:func:`dataset_paths`), reading a version's chunk map (:func:`read_chunk_map`)
and turning it back into the rows of a virtual dataset (:func:`chunk_rows`),
copying attributes with their HDF5 types (:func:`copy_attrs`) and writing a new
hash table (:func:`write_hash_table`). Nothing here writes a link: new objects
are swapped in through :mod:`.scratch`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import h5py
import numpy as np

from .._backend.chunkmap import build_slab_indices_and_offsets
from .._backend.chunks import chunk_grid_shape
from .._backend.hashtable import BOOKKEEPING_FILTER
from .._backend.layout import HASH_TABLE_CHUNKS, HASH_TABLE_DTYPE, VERSION_DATA, VERSIONS
from ..errors import ClosedFileError, NotVersionedError, ReadOnlyError
from .chunkcheck import DAMAGE_ERRORS
from .scratch import SCRATCH

__all__ = [
    "check_file_argument",
    "chunk_rows",
    "copy_attrs",
    "dataset_paths",
    "linked_copy",
    "read_chunk_map",
    "version_dataset",
    "write_hash_table",
]


def _open(f, caller: str = "delete_versions") -> tuple[h5py.Group, Any]:
    """The h5py group holding ``_version_data`` and the VersionRegistry to keep in sync.

    Raises
    ------
    TypeError
        ``f`` is neither an h5py.File (or Group) nor a VersionedHDF5File (e.g. a path).
    ClosedFileError
        ``f`` is closed.
    ReadOnlyError, NotVersionedError
        ``f`` is open read-only, or holds no version history.
    """
    check_file_argument(caller, f)
    if isinstance(f, (h5py.File, h5py.Group)):
        h5file, registry = f, None
    else:
        f._check_open()
        h5file, registry = f.f, f._registry
        # Deleting or rewriting versions frees objects whose addresses key its caches.
        f._caches.clear()
    if h5file.file.mode == "r":
        raise ReadOnlyError(f"{h5file.file.filename!r} is open read-only; open it with mode 'a'")
    if f"{VERSION_DATA}/{VERSIONS}" not in h5file:
        raise NotVersionedError(f"{h5file.file.filename!r} has no /{VERSION_DATA}/{VERSIONS} group")
    return h5file, registry


def check_file_argument(caller: str, f: object, *, versioned_file: bool = True) -> None:
    """Check the file argument of ``caller``: an open h5py.File (or Group), or a VersionedHDF5File.

    Parameters
    ----------
    caller : str
        The public function or class checking it (for the message).
    f : object
        What it was given.
    versioned_file : bool
        Whether a VersionedHDF5File is taken too (False for ``VersionedHDF5File`` itself).

    Raises
    ------
    TypeError
        ``f`` is none of these, e.g. a path (the message says to open it first;
        versioned-hdf5 2.6 takes no path either).
    ClosedFileError
        ``f`` is an h5py object whose file is closed (a VersionedHDF5File checks
        itself: ``_check_open``).
    """
    from .file import VersionedHDF5File  # here: file.py imports this module

    kinds = (h5py.File, h5py.Group, VersionedHDF5File) if versioned_file else (h5py.File, h5py.Group)
    if not isinstance(f, kinds):
        takes = "an open h5py.File or VersionedHDF5File" if versioned_file else "an open h5py.File"
        if isinstance(f, (str, bytes, os.PathLike)):
            call = f"{caller}(h5py.File(path, 'a'){', ...' if versioned_file else ''})"
            raise TypeError(f"{caller}() takes {takes}, not a path ({f!r}): open the file first, {call}")
        raise TypeError(f"{caller}() takes {takes}, got {type(f).__name__}")
    if isinstance(f, (h5py.File, h5py.Group)) and not f.id.valid:
        raise ClosedFileError(f"{caller}() was given a closed h5py file; reopen it first")


def dataset_paths(h5file: h5py.Group) -> list[str]:
    """Paths of every versioned dataset (a group under ``_version_data`` holding ``raw_data``)."""
    found: list[str] = []

    def walk(group: h5py.Group, prefix: str) -> None:
        for name in group:
            if not prefix and name in (VERSIONS, SCRATCH):
                continue
            obj = group.get(name)
            if isinstance(obj, h5py.Group) and not name.startswith("__vhdf5_"):
                if "raw_data" in obj:
                    found.append(prefix + name)
                else:
                    walk(obj, f"{prefix}{name}/")

    walk(h5file[VERSION_DATA], "")
    return found


def version_dataset(versions: h5py.Group, version: str, path: str) -> h5py.Dataset | None:
    """The dataset ``path`` of version group ``version``, or None."""
    obj = versions[version].get(path)
    return obj if isinstance(obj, h5py.Dataset) else None


def read_chunk_map(vds: h5py.Dataset, chunks: tuple[int, ...], raw_name: str) -> tuple[np.ndarray, np.ndarray]:
    """``(flat chunk indices, first rows in raw_data)`` of the stored chunks of ``vds``, C order.

    A dataset that is not virtual (old files' all-fill datasets) stores no chunk.

    Raises
    ------
    ValueError
        A mapping does not read whole chunks of ``raw_name`` (the message says what to do).
    """
    if not vds.is_virtual or vds.size == 0:
        return np.empty(0, np.int64), np.empty(0, np.uint64)
    try:
        si, so = build_slab_indices_and_offsets(vds, vds.shape, chunks, raw_name)
    except ValueError as exc:
        raise ValueError(
            f"{exc}. If a modify_metadata() was interrupted, run it again on this dataset "
            "to finish it before deleting versions"
        ) from None
    flat = np.flatnonzero(si)
    return flat, so.ravel()[flat]


def chunk_rows(shape: tuple[int, ...], chunks: tuple[int, ...], flat: np.ndarray, starts: np.ndarray):
    """``[(chunk index, start, stop), ...]`` for create_virtual_dataset (stop trimmed at the edge)."""
    if flat.size == 0:
        return []
    index = np.stack(np.unravel_index(flat, chunk_grid_shape(shape, chunks)), axis=1)
    starts = starts.astype(np.int64)
    stops = starts + np.minimum(chunks[0], shape[0] - index[:, 0] * chunks[0])
    return list(zip(map(tuple, index.tolist()), starts.tolist(), stops.tolist()))


def linked_copy(src: h5py.Group, dst: h5py.Group, skip: str) -> dict[str, BaseException]:
    """Give the new group ``dst`` ``src``'s attributes and a hard link to each of its members but ``skip``.

    How a repair replaces a group whose member ``skip`` libhdf5 cannot unlink
    (its header torn): the new group takes the old one's place, and the old
    one is parked. Members that cannot be linked are left out.

    Returns
    -------
    dict of str to BaseException
        The members left out, and what libhdf5 said.
    """
    copy_attrs(src, dst)
    failed: dict[str, BaseException] = {}
    for member in src:
        if member == skip:
            continue
        try:
            dst[member] = src[member]
        except DAMAGE_ERRORS as exc:
            failed[member] = exc
    return failed


def copy_attrs(src: h5py.HLObject, dst: h5py.HLObject, skip: Iterable[str] = ()) -> None:
    """Copy the attributes of ``src`` to ``dst`` with their HDF5 dtypes (``skip``: names to leave)."""
    skip = set(skip)
    for name in src.attrs:
        if name in skip:
            continue
        aid = src.attrs.get_id(name)
        tid = aid.get_type()
        if tid.get_class() == h5py.h5t.STRING and not tid.is_variable_str():
            # The file type itself, so that its padding stays: a dimension scale's CLASS
            # must stay null-terminated (numpy's "S" dtype would make it null-padded).
            if name in dst.attrs:
                del dst.attrs[name]
            new = h5py.h5a.create(dst.id, name.encode(), tid, aid.get_space())
            value = src.attrs[name]
            if not isinstance(value, h5py.Empty):
                new.write(np.ascontiguousarray(np.asarray(value, dtype=aid.dtype).reshape(aid.shape)))
            continue
        dst.attrs.create(name, src.attrs[name], dtype=aid.dtype)


def write_hash_table(group: h5py.Group, name: str, rows: np.ndarray) -> h5py.Dataset:
    """Create a hash table ``group[name]`` holding ``rows`` (as ``HashTable.create`` does)."""
    ds = group.create_dataset(
        name,
        shape=(max(len(rows), 1),),
        dtype=HASH_TABLE_DTYPE,
        chunks=HASH_TABLE_CHUNKS,
        maxshape=(None,),
        **BOOKKEEPING_FILTER,
    )
    if len(rows):
        ds[: len(rows)] = rows
    ds.attrs["largest_index"] = np.int64(len(rows))
    return ds
