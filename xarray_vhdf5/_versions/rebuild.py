"""Rebuild hash tables from the versions, and the chunk-level diff of one dataset (versioned-hdf5's API).

:func:`rebuild_hash_tables` is versioned-hdf5's ``rebuild_hashtables``: every
versioned dataset's ``hash_table`` is written again from what its versions map.
For each version, in the order h5py lists the versions group, each stored chunk
is hashed (``backend.hashing.chunk_hash``, the rule both libraries use) and the
first row range seen for a digest is kept. Hashing reads the chunk from raw_data
once per distinct row range and extent, not once per version.

One difference from versioned-hdf5, for safety: the next commit appends its new
chunks after the table's rows (at ``largest_index * chunks[0]`` for
versioned-hdf5, after the highest row range for this package). A table keeping
only the first range of each digest can end below a chunk slot that a version
still maps (the same chunk stored twice, or a slot no digest names), and the
next commit of either library would then overwrite that version's data
(versioned-hdf5 2.6 does). The rebuilt table therefore also lists every mapped
slot it does not name, with a placeholder digest (24 zero bytes, then the slot
number as 8 big-endian bytes: distinct, so the last row still tells tables
apart, and no chunk's SHA-256 in practice), and is as long as the highest
mapped slot: both libraries append above every mapped
chunk. Without duplicates or gaps the table is versioned-hdf5's, row for row.

The new tables are written to the scratch group and swapped in through
``scratch.Scratch`` with its journal (as deleting versions does): an interrupted
rebuild is finished by the next one, or by deleting versions or
``modify_metadata``. Nothing else changes: raw_data and the versions are only
read.

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

from .._backend.chunkmap import version_dataset_layout
from .._backend.chunks import chunk_grid_shape
from .._backend.h5objects import readable
from .._backend.hashing import chunk_hash, is_vlen_string_dtype
from .._backend.hashtable import placeholder_digest
from .._backend.layout import DATA_VERSION, HASH_TABLE_DTYPE, VERSION_DATA, VERSIONS
from . import bookkeeping
from .mutation import mutating
from .objects import (
    _open,
    chunk_rows,
    dataset_paths,
    linked_copy,
    read_chunk_map,
    version_dataset,
    write_hash_table,
)
from .scratch import Scratch, _barrier

__all__ = [
    "chunk_diff",
    "object_dtype_paths",
    "placeholder_digest",
    "rebuild_hash_tables",
    "rebuild_object_dtype_hash_tables",
    "table_rows",
]


def table_rows(h5file: h5py.Group, path: str) -> np.ndarray:
    """The hash-table rows of dataset ``path`` rebuilt from what its versions map.

    Parameters
    ----------
    h5file : h5py.File or h5py.Group
        Holding ``_version_data``.
    path : str
        The dataset's path inside the versions.

    Returns
    -------
    numpy.ndarray of ``HASH_TABLE_DTYPE``, shape (n,)
        First the digest of each distinct mapped chunk with the first raw_data
        row range (points along axis 0) seen for it, in versioned-hdf5's order;
        then a placeholder digest (:func:`placeholder_digest`) for every
        mapped slot no digest names, and for
        slots no version maps, until the table reaches the highest mapped slot
        (see the module docstring).

    Raises
    ------
    ValueError
        A version maps rows that are not whole chunks of raw_data
        (``objects.read_chunk_map``).
    """
    versions = h5file[VERSION_DATA][VERSIONS]
    raw = h5file[VERSION_DATA][path]["raw_data"]
    chunks = tuple(int(c) for c in raw.attrs["chunks"])
    c0 = chunks[0]
    # (start, stop, trailing extents) of every mapped chunk, in versioned-hdf5's order.
    mapped: list[tuple[int, int, tuple[int, ...]]] = []
    for version in versions:
        vds = version_dataset(versions, version, path)
        if vds is None:
            continue
        flat, starts = read_chunk_map(vds, chunks, raw.name)
        shape = vds.shape
        # Edge-trimmed extent of chunk i on each trailing axis.
        grid = chunk_grid_shape(shape, chunks)
        extents = [[min(c, n - i * c) for i in range(g)] for c, n, g in zip(chunks[1:], shape[1:], grid[1:])]
        for index, start, stop in chunk_rows(shape, chunks, flat, starts):
            mapped.append((start, stop, tuple(e[i] for e, i in zip(extents, index[1:]))))
    hashed = _hash_mapped(raw, set(mapped))
    digests: dict[bytes, tuple[int, int]] = {}
    unnamed: dict[int, tuple[int, int]] = {}  # slot -> range of a mapped chunk whose digest has another row
    for key in mapped:
        start, stop = key[0], key[1]
        if digests.setdefault(hashed[key], (start, stop)) != (start, stop):
            unnamed.setdefault(start // c0, (start, stop))
    named = {start // c0 for start, _ in digests.values()}
    extra = [r for slot, r in unnamed.items() if slot not in named]
    slots = named | {r[0] // c0 for r in extra}
    top = max(slots) + 1 if slots else 0
    gaps = [(s * c0, s * c0 + c0) for s in range(top) if s not in slots]
    extra += gaps[: max(0, top - len(digests) - len(extra))]
    rows = np.zeros(len(digests) + len(extra), HASH_TABLE_DTYPE)
    names = list(digests) + [placeholder_digest(start // c0) for start, _ in extra]
    if names:
        rows["hash"] = np.frombuffer(b"".join(names), np.uint8).reshape(-1, 32)
    if len(rows):
        rows["shape"] = np.array(list(digests.values()) + extra, dtype=np.int64)
    return rows


def _hash_mapped(raw: h5py.Dataset, keys: set[tuple], block_bytes: int = 32 * 2**20) -> dict[tuple, bytes]:
    """The ``chunk_hash`` of each ``(start, stop, trailing extents)`` region of ``raw``.

    raw_data is read in blocks of whole rows of at most about ``block_bytes``
    (one read per block, instead of one ``H5Dread`` through h5py per chunk),
    in row order; memory holds one block at a time.
    """
    row_bytes = max(1, int(np.prod(raw.shape[1:], dtype=np.int64)) * raw.dtype.itemsize)
    max_rows = max(1, block_bytes // row_bytes)
    ordered = sorted(keys)
    out: dict[tuple, bytes] = {}
    i = 0
    while i < len(ordered):
        lo = ordered[i][0]
        j, hi = i, ordered[i][1]
        while j + 1 < len(ordered) and max(hi, ordered[j + 1][1]) - lo <= max_rows:
            j += 1
            hi = max(hi, ordered[j][1])
        block = raw[lo:hi]
        for start, stop, trailing in ordered[i : j + 1]:
            region = (slice(start - lo, stop - lo), *(slice(0, e) for e in trailing))
            out[(start, stop, trailing)] = chunk_hash(block[region])
        i = j + 1
    return out


def rebuild_hash_tables(f, paths: Iterable[str] | None = None) -> dict[str, int]:
    """Write the hash tables of versioned datasets again from their versions.

    versioned-hdf5's ``VersionedHDF5File.rebuild_hashtables`` (all datasets) and
    ``rebuild_object_dtype_hashtables`` (``paths``: the variable-length string
    ones), with the same rule, made safe for the next commit (module docstring).

    Parameters
    ----------
    f : h5py.File, h5py.Group or VersionedHDF5File
        Open for writing, holding ``_version_data`` (a ``VersionedHDF5File``'s
        caches are dropped: the tables are new objects).
    paths : iterable of str, optional
        Dataset paths inside the versions (``"x"``, ``"group/x"``); all by default.

    Returns
    -------
    dict of str to int
        The number of hash-table rows of each rebuilt table, by dataset path.

    Raises
    ------
    ReadOnlyError
        The file is open read-only.
    NotVersionedError
        No ``_version_data/versions`` group.
    KeyError
        A path in ``paths`` is not a versioned dataset.
    ValueError
        A version maps rows that are not whole chunks of raw_data.
    """
    h5file, _ = _open(f, "rebuild_hashtables")
    with mutating(h5file, what="hash-table rebuild"):
        return _rebuild_hash_tables(h5file, paths)


def _rebuild_hash_tables(h5file, paths: Iterable[str] | None) -> dict[str, int]:
    Scratch.recover(h5file)
    known = dataset_paths(h5file)
    chosen = known if paths is None else list(paths)
    for path in chosen:
        if path not in known:
            raise KeyError(f"no versioned dataset {path!r} in {h5file.file.filename!r}; datasets: {known}")
    scratch = Scratch(h5file)
    done, slots, torn = {}, {}, []
    for path in chosen:
        rows = table_rows(h5file, path)
        table = f"/{VERSION_DATA}/{path}/hash_table"
        if readable(h5file.file.id, table.encode()) or not h5file.file.id.links.exists(table.encode()):
            slots[path] = (scratch.reserve(table), table)
            write_hash_table(scratch.group, slots[path][0], rows)
        else:  # libhdf5 reads an object's header to move or unlink it: its group is replaced
            parent = f"/{VERSION_DATA}/{path}"
            slots[path] = (scratch.reserve(parent), parent)
            fresh = scratch.group.create_group(slots[path][0])
            linked_copy(h5file[parent], fresh, skip="hash_table")
            write_hash_table(fresh, "hash_table", rows)
            torn.append(path)
        done[path] = len(rows)
    scratch.write_journal()
    _barrier(h5file, "written")
    for path in chosen:
        name, target = slots[path]
        if path in torn:  # parked where nothing reads it, never deleted (deleting reads the header)
            h5file.move(target, bookkeeping.parking_place(h5file, "datasets", path))
        scratch.move_in(name, target)
    _barrier(h5file, "switched")
    scratch.remove()
    _barrier(h5file, "done")
    return done


def object_dtype_paths(h5file: h5py.Group) -> list[str]:
    """Paths of the versioned datasets of variable-length strings (numpy object dtype)."""
    return [
        path for path in dataset_paths(h5file) if is_vlen_string_dtype(h5file[VERSION_DATA][path]["raw_data"].dtype)
    ]


def rebuild_object_dtype_hash_tables(f) -> dict[str, int]:
    """:func:`rebuild_hash_tables` of the variable-length string datasets, then ``data_version`` set to 4.

    versioned-hdf5's ``rebuild_object_dtype_hashtables``: its versions before data
    version 4 hashed string chunks differently. ``f``, the returned row counts and
    the errors are those of :func:`rebuild_hash_tables`.
    """
    h5file, _ = _open(f, "rebuild_object_dtype_hashtables")  # checks the file and drops a VersionedHDF5File's caches
    with mutating(h5file, what="hash-table rebuild"):
        done = rebuild_hash_tables(h5file, object_dtype_paths(h5file))
        h5file[VERSION_DATA][VERSIONS].attrs["data_version"] = DATA_VERSION
    return done


def _chunk_map(vds: h5py.Dataset) -> tuple[np.ndarray, np.ndarray, tuple[int, ...], str]:
    """``(flat chunk indices, first raw_data rows, chunks, raw_data path)`` of the stored chunks of ``vds``, C order."""
    chunks, raw = version_dataset_layout(vds)
    flat, starts = read_chunk_map(vds, chunks, raw)
    return flat, starts, chunks, raw


def _region(flat: int, shape: tuple[int, ...], chunks: tuple[int, ...]) -> ndindex.Tuple:
    """The trimmed region of chunk ``flat`` (C order) of ``shape``, as versioned-hdf5 keys it."""
    index = np.unravel_index(flat, chunk_grid_shape(shape, chunks))
    return ndindex.Tuple(*(slice(int(i) * c, min((int(i) + 1) * c, n), 1) for i, c, n in zip(index, chunks, shape)))


def chunk_diff(a: h5py.Dataset, b: h5py.Dataset) -> dict[ndindex.Tuple, tuple[np.ndarray | None, np.ndarray | None]]:
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
        raw_data rows differ (every stored region when A and B map different
        raw_data), or that only one version stores (the other side is None).
        ``region`` is an ``ndindex.Tuple`` of ``slice(start,
        stop, 1)``, in points, trimmed at that version's shape; the data are
        numpy arrays of the region.

    Raises
    ------
    IncompatibleDataError
        ``a`` or ``b`` is not a versioned dataset (no ``chunks`` / ``raw_data``).
    """
    flat_a, rows_a, chunks_a, raw_a = _chunk_map(a)
    flat_b, rows_b, chunks_b, raw_b = _chunk_map(b)
    comparable = raw_a == raw_b  # rows of two raw_data say nothing: every stored chunk differs
    if chunks_a == chunks_b and a.shape == b.shape:
        # Same grid, same trimming: a chunk's flat index is its region. The maps are
        # compared as arrays and keys made only for the chunks that differ.
        pos = np.searchsorted(flat_a, flat_b)  # flat indices are ascending
        hit = pos < len(flat_a)
        hit[hit] = flat_a[pos[hit]] == flat_b[hit]
        same = np.zeros(len(flat_b), dtype=bool)
        same[hit] = (rows_a[pos[hit]] == rows_b[hit]) & comparable
        diff = {}
        for flat, in_a in zip(flat_b[~same].tolist(), hit[~same].tolist()):
            region = _region(flat, b.shape, chunks_b)
            diff[region] = (a[region.raw] if in_a else None, b[region.raw])
        for flat in flat_a[~np.isin(flat_a, flat_b)].tolist():
            region = _region(flat, a.shape, chunks_a)
            diff[region] = (a[region.raw], None)
        return diff
    # Shapes differ: edge regions differ too, so compare by region.
    in_a = {_region(f, a.shape, chunks_a): r for f, r in zip(flat_a.tolist(), rows_a.tolist())}
    in_b = {_region(f, b.shape, chunks_b): r for f, r in zip(flat_b.tolist(), rows_b.tolist())}
    diff = {}
    for region, row in in_b.items():
        if region not in in_a:
            diff[region] = (None, b[region.raw])
        elif in_a[region] != row or not comparable:
            diff[region] = (a[region.raw], b[region.raw])
    for region in in_a:
        if region not in in_b:
            diff[region] = (a[region.raw], None)
    return diff
