"""Rebuild hash tables from the versions, and the chunk-level diff of one dataset (versioned-hdf5's API).

:func:`rebuild_hash_tables` is versioned-hdf5's ``rebuild_hashtables``: every
versioned dataset's ``hash_table`` is written again from what its versions map.
For each version, in the order h5py lists the versions group, each stored chunk
is hashed (``backend.hashing.chunk_hash``, the rule both libraries use) and the
first row range seen for a digest is kept. Hashing reads the chunk from raw_data
once per distinct row range and extent, not once per version. The new table is
written beside the old one under a scratch name, then linked in its place, so
an interruption leaves the old table or the new one, never a half-written one.
Nothing else changes: raw_data and the versions are only read.

:func:`chunk_diff` is versioned-hdf5's ``get_diff``: the chunks of one dataset
whose mapping differs between two versions, keyed by their region (an
``ndindex.Tuple`` of the trimmed chunk's slices), with the data of each version
there, or None where the region is not mapped in that version. A region mapped
to the same raw_data rows in both versions is unchanged and never read. Unlike
versioned-hdf5, versions committed through the same file handle can be compared
without reopening the file.
"""

from __future__ import annotations

from collections.abc import Iterable

import h5py
import ndindex
import numpy as np

from ..backend.chunks import chunk_grid_shape
from ..backend.hashing import chunk_hash, is_vlen_string_dtype
from ..backend.layout import DATA_VERSION, HASH_TABLE_DTYPE, VERSION_DATA, VERSIONS
from ..errors import IncompatibleDataError, ReadOnlyError
from .delete import chunk_rows, dataset_paths, read_chunk_map, version_dataset, write_hash_table

__all__ = ["chunk_diff", "object_dtype_paths", "rebuild_hash_tables", "rebuild_object_dtype_hash_tables"]

_SCRATCH_TABLE = "hash_table.__vhdf5_rebuilt__"


def _str(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _table_rows(h5file: h5py.Group, path: str) -> np.ndarray:
    """The hash-table rows of dataset ``path`` as its versions map it (first range per digest)."""
    versions = h5file[VERSION_DATA][VERSIONS]
    raw = h5file[VERSION_DATA][path]["raw_data"]
    chunks = tuple(int(c) for c in raw.attrs["chunks"])
    digests: dict[bytes, tuple[int, int]] = {}
    hashed: dict[tuple, bytes] = {}  # (start, stop, trailing extents) -> digest
    for version in versions:
        vds = version_dataset(versions, version, path)
        if vds is None:
            continue
        flat, starts = read_chunk_map(vds, chunks, raw.name)
        for index, start, stop in chunk_rows(vds.shape, chunks, flat, starts):
            trailing = tuple(min(c, n - i * c) for i, c, n in zip(index[1:], chunks[1:], vds.shape[1:]))
            key = (start, stop, trailing)
            digest = hashed.get(key)
            if digest is None:
                digest = hashed[key] = chunk_hash(raw[(slice(start, stop),) + tuple(slice(0, e) for e in trailing)])
            digests.setdefault(digest, (start, stop))
    rows = np.zeros(len(digests), HASH_TABLE_DTYPE)
    if digests:
        rows["hash"] = np.frombuffer(b"".join(digests), np.uint8).reshape(-1, 32)
        rows["shape"] = np.array(list(digests.values()), dtype=np.int64)
    return rows


def rebuild_hash_tables(h5file: h5py.Group, paths: Iterable[str] | None = None) -> dict[str, int]:
    """Write the hash tables of versioned datasets again from their versions.

    versioned-hdf5's ``VersionedHDF5File.rebuild_hashtables`` (all datasets) and
    ``rebuild_object_dtype_hashtables`` (``paths``: the variable-length string
    ones), with the same rule: every stored chunk that a version maps is hashed;
    the first raw_data rows seen for a digest (versions in h5py's order of the
    versions group, chunks in C order) are its row.

    Parameters
    ----------
    h5file : h5py.File or h5py.Group
        Open for writing, holding ``_version_data``.
    paths : iterable of str, optional
        Dataset paths inside the versions (``"x"``, ``"group/x"``); all by default.

    Returns
    -------
    dict of str to int
        Rows of each rebuilt table (distinct chunks its versions map).

    Raises
    ------
    ReadOnlyError
        The file is open read-only.
    KeyError
        A path in ``paths`` is not a versioned dataset.
    """
    if h5file.file.mode == "r":
        raise ReadOnlyError(f"{h5file.file.filename!r} is open read-only; open it with mode 'a'")
    known = dataset_paths(h5file)
    chosen = known if paths is None else list(paths)
    for path in chosen:
        if path not in known:
            raise KeyError(f"no versioned dataset {path!r} in {h5file.file.filename!r}; datasets: {known}")
    done = {}
    for path in chosen:
        group = h5file[VERSION_DATA][path]
        rows = _table_rows(h5file, path)
        if _SCRATCH_TABLE in group:  # left by an interrupted rebuild
            del group[_SCRATCH_TABLE]
        write_hash_table(group, _SCRATCH_TABLE, rows)
        if "hash_table" in group:
            del group["hash_table"]
        group.move(_SCRATCH_TABLE, "hash_table")
        done[path] = len(rows)
    return done


def object_dtype_paths(h5file: h5py.Group) -> list[str]:
    """Paths of the versioned datasets of variable-length strings (numpy object dtype)."""
    return [
        path for path in dataset_paths(h5file)
        if is_vlen_string_dtype(h5file[VERSION_DATA][path]["raw_data"].dtype)
    ]


def rebuild_object_dtype_hash_tables(h5file: h5py.Group) -> dict[str, int]:
    """:func:`rebuild_hash_tables` of the variable-length string datasets; sets ``data_version``.

    versioned-hdf5's ``rebuild_object_dtype_hashtables``: files from its
    versions before data version 4 hashed such chunks differently. Also sets
    the versions group's ``data_version`` to the current one.
    """
    done = rebuild_hash_tables(h5file, object_dtype_paths(h5file))
    h5file[VERSION_DATA][VERSIONS].attrs["data_version"] = DATA_VERSION
    return done


def _regions(vds: h5py.Dataset) -> dict[ndindex.Tuple, int]:
    """Stored chunk region (trimmed, as ``ndindex.Tuple``) -> first raw_data row, C order."""
    if "chunks" not in vds.attrs or "raw_data" not in vds.attrs:
        raise IncompatibleDataError(f"{vds.name!r} is not a versioned dataset (no 'chunks' and 'raw_data' attributes)")
    chunks = tuple(int(c) for c in vds.attrs["chunks"])
    flat, starts = read_chunk_map(vds, chunks, _str(vds.attrs["raw_data"]))
    if flat.size == 0:
        return {}
    index = np.stack(np.unravel_index(flat, chunk_grid_shape(vds.shape, chunks)), axis=1)
    out = {}
    for idx, start in zip(index.tolist(), starts.tolist()):
        region = ndindex.Tuple(*(slice(i * c, min((i + 1) * c, n), 1) for i, c, n in zip(idx, chunks, vds.shape)))
        out[region] = int(start)
    return out


def chunk_diff(
    a: h5py.Dataset, b: h5py.Dataset
) -> dict[ndindex.Tuple, tuple[np.ndarray | None, np.ndarray | None]]:
    """The chunks of a dataset whose mapping differs between version A and version B.

    versioned-hdf5's ``VersionedHDF5File.get_diff`` (``_diff_data``), from the
    chunk maps: B's stored regions first (C order), changed or added, then A's
    regions that B does not store.

    Parameters
    ----------
    a, b : h5py.Dataset
        The dataset's virtual dataset in version A and in version B.

    Returns
    -------
    dict
        ``region -> (A's data, B's data)`` for each stored chunk region whose
        raw_data rows differ, or that only one version stores (the other
        side is None). ``region`` is an ``ndindex.Tuple`` of ``slice(start,
        stop, 1)``, in points, trimmed at that version's shape; the data are
        numpy arrays of the region.

    Raises
    ------
    IncompatibleDataError
        ``a`` or ``b`` is not a versioned dataset (no ``chunks`` / ``raw_data``).
    """
    in_a, in_b = _regions(a), _regions(b)
    diff = {}
    for region, row in in_b.items():
        if region not in in_a:
            diff[region] = (None, b[region.raw])
        elif in_a[region] != row:
            diff[region] = (a[region.raw], b[region.raw])
    for region in in_a:
        if region not in in_b:
            diff[region] = (a[region.raw], None)
    return diff
